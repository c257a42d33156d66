/* The image-fitting trainer (fit_image.h): bad configurations and images (typed errors naming the
 * cause), the resolved defaults, the hash model's first loss against the same step assembled from
 * the encoding / MLP / loss calls by hand, learning (PSNR rises) and reproducibility on the CPU
 * for both models (on CUDA: equal to float-atomic rounding), the profiler's phases, the prediction view; the same fit on CUDA when there is
 * a GPU. Also the datasheet peak table (device.h) and the loss-curve plot (image.h) that the CLI
 * prints and draws with. */
#include <math.h>
#include <unistd.h>

#include "nabla/fit_image.h"
#include "nabla/image.h"
#include "nabla/nn_encoding.h"
#include "nabla/nn_mlp.h"
#include "nabla/nn_optim.h"
#include "nb_test.h"

static nb_device *cpu(void) {
    nb_device *d = NULL;
    nb_device_open("cpu", &d);
    return d;
}

static void test_bad_config(void) {
    nb_device *d = cpu();
    nb_tensor *img = NULL;
    NB_REQUIRE_OK(nb_image_procedural(d, 8, 8, &img));
    nb_fit_image *f = (nb_fit_image *)1;
    nb_fit_image_config c = nb_fit_image_config_default();
    c.model = (nb_fit_image_model)7;
    NB_EXPECT_ERR(nb_fit_image_create(d, img, &c, &f), NB_ERR_INVALID_ARG, "unknown model 7");
    NB_EXPECT(f == NULL);
    c = nb_fit_image_config_default(), c.batch = -1;
    NB_EXPECT_ERR(nb_fit_image_create(d, img, &c, &f), NB_ERR_INVALID_ARG, "batch -1");
    c = nb_fit_image_config_default(), c.batch = ((int64_t)1 << 24) + 1;
    NB_EXPECT_ERR(nb_fit_image_create(d, img, &c, &f), NB_ERR_INVALID_ARG, "1..16777216");
    c = nb_fit_image_config_default(), c.lr = 0;
    NB_EXPECT_ERR(nb_fit_image_create(d, img, &c, &f), NB_ERR_INVALID_ARG, "learning rate 0");
    c = nb_fit_image_config_default(), c.lr = NAN;
    NB_EXPECT_ERR(nb_fit_image_create(d, img, &c, &f), NB_ERR_INVALID_ARG, "learning rate");
    c = nb_fit_image_config_default(), c.loss = (nb_loss_kind)5;
    NB_EXPECT_ERR(nb_fit_image_create(d, img, &c, &f), NB_ERR_INVALID_ARG, "unknown loss 5");
    c = nb_fit_image_config_default(), c.stratified = 2;
    NB_EXPECT_ERR(nb_fit_image_create(d, img, &c, &f), NB_ERR_INVALID_ARG, "stratified 2");
    c = nb_fit_image_config_default(), c.model = NB_FIT_IMAGE_GRID, c.loss = NB_LOSS_L1;
    NB_EXPECT_ERR(nb_fit_image_create(d, img, &c, &f), NB_ERR_INVALID_ARG, "loss l1 is for the hash model");
    c = nb_fit_image_config_default(), c.model = NB_FIT_IMAGE_GRID, c.stratified = 1;
    NB_EXPECT_ERR(nb_fit_image_create(d, img, &c, &f), NB_ERR_INVALID_ARG, "stratified sampling is for the hash");
    NB_EXPECT_ERR(nb_fit_image_create(d, NULL, NULL, &f), NB_ERR_INVALID_ARG, "image");
    NB_EXPECT_ERR(nb_fit_image_create(NULL, img, NULL, &f), NB_ERR_INVALID_ARG, "dev");
    NB_EXPECT(nb_fit_image_model_from_name("hash") == NB_FIT_IMAGE_HASH);
    NB_EXPECT(nb_fit_image_model_from_name("grid") == NB_FIT_IMAGE_GRID);
    NB_EXPECT(nb_fit_image_model_from_name("mlp") == -1 && nb_fit_image_model_from_name(NULL) == -1);
    nb_tensor_free(img);
    nb_device_close(d);
}

static void test_bad_image(void) {
    nb_device *d = cpu();
    nb_fit_image *f = NULL;
    nb_tensor *t = NULL;
    NB_REQUIRE_OK(nb_tensor_zeros(d, NB_F32, 3, (int64_t[]){8, 8, 1}, &t));
    NB_EXPECT_ERR(nb_fit_image_create(d, t, NULL, &f), NB_ERR_INVALID_ARG, "want f32 [H, W, 3]");
    nb_tensor_free(t);
    NB_REQUIRE_OK(nb_tensor_zeros(d, NB_F16, 3, (int64_t[]){8, 8, 3}, &t));
    NB_EXPECT_ERR(nb_fit_image_create(d, t, NULL, &f), NB_ERR_INVALID_ARG, "want f32 [H, W, 3]");
    nb_tensor_free(t);
    NB_REQUIRE_OK(nb_tensor_zeros(d, NB_F32, 3, (int64_t[]){1, 5, 3}, &t));
    NB_EXPECT_ERR(nb_fit_image_create(d, t, NULL, &f), NB_ERR_INVALID_ARG, "5x1 pixels: fit-image needs at least 2x2");
    nb_tensor_free(t);
    NB_EXPECT(f == NULL);
    nb_device_close(d);
}

/* The hash model's first step, assembled by hand as fit_image.h describes it (hash grid 16 x 2,
 * 2^15, base 16, scale 1.5 -> MLP 64 wide, 2 hidden, ReLU, no bias; CPU: separate calls): its
 * loss must equal the fit's first loss. */
static double manual_first_loss(nb_device *d, const nb_tensor *img, int64_t B, uint64_t seed) {
    nb_encoding_config ec = nb_hash_grid_config(2, 16, 2, 15, 16, 1.5f);
    nb_encoding *enc = NULL;
    nb_mlp *mlp = NULL;
    nb_tensor *p = NULL, *x = NULL, *t = NULL, *feat = NULL, *y = NULL, *dy = NULL, *loss = NULL;
    double out = -1;
    if (nb_encoding_create(d, &ec, &enc)) goto done;
    nb_mlp_config mc = nb_mlp_config_default(nb_encoding_n_output_dims(enc), 3, 64, 2);
    mc.act = NB_ACT_RELU, mc.out_act = NB_ACT_NONE, mc.bias = 0;
    int F = nb_encoding_n_output_dims(enc);
    if (nb_mlp_create(d, &mc, &mlp) || nb_mlp_init_params(mlp, seed) ||
        nb_tensor_zeros(d, NB_F32, 1, (int64_t[]){nb_encoding_n_params(enc)}, &p) ||
        nb_encoding_init_params(enc, p, seed) || nb_tensor_zeros(d, NB_F32, 2, (int64_t[]){B, 2}, &x) ||
        nb_tensor_zeros(d, NB_F32, 2, (int64_t[]){B, 3}, &t) ||
        nb_tensor_zeros(d, NB_F16, 2, (int64_t[]){B, F}, &feat) ||
        nb_tensor_zeros(d, NB_F32, 2, (int64_t[]){B, 3}, &y) || nb_tensor_zeros(d, NB_F32, 2, (int64_t[]){B, 3}, &dy) ||
        nb_tensor_zeros(d, NB_F32, 0, NULL, &loss) || nb_image_sample(img, seed, 1, x, t) ||
        nb_encoding_forward(enc, p, x, feat) || nb_mlp_forward(mlp, feat, y, 1) || nb_loss_l2(y, t, loss, dy))
        goto done;
    float l = 0;
    if (nb_tensor_to_host(loss, &l, sizeof l) == NB_OK) out = l;
done:
    nb_tensor_free(p), nb_tensor_free(x), nb_tensor_free(t), nb_tensor_free(feat), nb_tensor_free(y);
    nb_tensor_free(dy), nb_tensor_free(loss);
    nb_mlp_free(mlp);
    nb_encoding_destroy(enc);
    return out;
}

/* n steps of cfg on img; returns the PSNR before and after and the loss read after each step. */
static void run_fit(nb_device *d, const nb_tensor *img, const nb_fit_image_config *c, int n, double *psnr0,
                    double *psnr1, double *losses) {
    nb_fit_image *f = NULL;
    NB_REQUIRE_OK(nb_fit_image_create(d, img, c, &f));
    NB_EXPECT_OK(nb_fit_image_eval(f, psnr0));
    for (int s = 1; s <= n; s++) {
        NB_EXPECT_OK(nb_fit_image_step(f, (uint32_t)s));
        NB_EXPECT_OK(nb_fit_image_read_loss(f, &losses[s - 1]));
    }
    NB_EXPECT_OK(nb_fit_image_eval(f, psnr1));
    nb_fit_image_free(f);
}

static void check_fit(nb_device *d, nb_fit_image_model model, int side, int64_t batch, int steps, double min_psnr) {
    nb_tensor *img = NULL;
    NB_REQUIRE_OK(nb_image_procedural(d, side, side, &img));
    nb_fit_image_config c = nb_fit_image_config_default();
    c.model = model, c.batch = batch;
    double p0 = 0, p1 = 0, p0b = 0, p1b = 0, la[64] = {0}, lb[64] = {0};
    run_fit(d, img, &c, steps, &p0, &p1, la);
    run_fit(d, img, &c, steps, &p0b, &p1b, lb); /* the same seed: the same run */
    fprintf(stderr, "  %s on %s: psnr %.3f -> %.3f dB, loss %.5f -> %.5f\n", model ? "grid" : "hash",
            nb_device_name(d), p0, p1, la[0], la[steps - 1]);
    NB_EXPECT(p1 > min_psnr && p1 > p0 + 3);
    NB_EXPECT(la[steps - 1] < 0.5 * la[0]);
    /* The same seed gives the same run. On the CPU bit for bit; on CUDA the gradients of the grid /
     * hash table are summed with float atomics, whose order varies between runs (as in
     * tiny-cuda-nn), so the runs agree to rounding that grows slowly over the steps. */
    int exact = nb_device_get_kind(d) == NB_DEVICE_CPU;
    double worst = 0;
    for (int i = 0; i < steps; i++) {
        double rel = fabs(la[i] - lb[i]) / fmax(fabs(la[i]), 1e-30);
        if (rel > worst) worst = rel;
        if (exact) NB_EXPECT(la[i] == lb[i]);
        else NB_EXPECT(rel < 1e-3);
    }
    if (exact) NB_EXPECT(p1 == p1b);
    else NB_EXPECT(fabs(p1 - p1b) < 0.05);
    fprintf(stderr, "  same seed twice: largest loss difference %.3g (relative), PSNR %.3g dB\n",
            worst, fabs(p1 - p1b));
    c.seed = 7; /* another seed: another run */
    run_fit(d, img, &c, steps, &p0b, &p1b, lb);
    NB_EXPECT(lb[0] != la[0]);
    nb_tensor_free(img);
}

static void test_hash_cpu(void) {
    nb_device *d = cpu();
    nb_tensor *img = NULL;
    NB_REQUIRE_OK(nb_image_procedural(d, 32, 32, &img));
    nb_fit_image *f = NULL;
    nb_fit_image_config c = nb_fit_image_config_default();
    NB_REQUIRE_OK(nb_fit_image_create(d, img, &c, &f));
    nb_tensor_free(img); /* the fit keeps its own view */
    img = NULL;
    nb_fit_image_info in;
    NB_EXPECT_OK(nb_fit_image_get_info(f, &in));
    NB_EXPECT(in.model == NB_FIT_IMAGE_HASH && in.width == 32 && in.height == 32 && !in.every_pixel);
    NB_EXPECT(in.batch == 4096);   /* the CPU default */
    NB_EXPECT(in.mlp_params == 32 * 64 + 64 * 64 + 64 * 3);
    NB_EXPECT(in.encoding_params > 16 * 2 * 1000 && in.encoding_params <= 16 * 2 * (1 << 15));
    double loss = -1;
    NB_EXPECT_OK(nb_fit_image_read_loss(f, &loss));
    NB_EXPECT(loss == 0);          /* no step yet */
    nb_fit_image_profile p;
    NB_EXPECT_ERR(nb_fit_image_profile_steps(f, 0, 1, &p), NB_ERR_INVALID_ARG, "0 steps");
    NB_REQUIRE_OK(nb_fit_image_profile_steps(f, 2, 1, &p));
    NB_EXPECT(p.n_phases == 7 && !strcmp(p.phase[0], "sample") && !strcmp(p.phase[6], "adam"));
    NB_EXPECT(p.note == NULL);     /* the CPU runs the separate calls */
    for (int i = 0; i < p.n_phases; i++) NB_EXPECT(p.ms[i] >= 0);
    NB_EXPECT_OK(nb_fit_image_read_loss(f, &loss)); /* the profiled steps train */
    NB_EXPECT(loss > 0);
    nb_tensor *pred = NULL;
    NB_REQUIRE_OK(nb_fit_image_prediction(f, &pred));
    NB_EXPECT(nb_tensor_ndim(pred) == 3 && nb_tensor_shape(pred)[0] == 32 && nb_tensor_shape(pred)[2] == 3);
    nb_tensor_free(pred);
    nb_fit_image_free(f);

    NB_REQUIRE_OK(nb_image_procedural(d, 32, 32, &img));
    c.batch = 256;
    NB_REQUIRE_OK(nb_fit_image_create(d, img, &c, &f));
    NB_EXPECT_OK(nb_fit_image_step(f, 1));
    NB_EXPECT_OK(nb_fit_image_read_loss(f, &loss));
    double want = manual_first_loss(d, img, 256, c.seed);
    NB_EXPECT(want > 0);
    NB_EXPECT_NEAR(loss, want, 1e-6 * want);
    nb_fit_image_free(f);
    nb_tensor_free(img);
    check_fit(d, NB_FIT_IMAGE_HASH, 32, 512, 30, 12);
    nb_device_close(d);
}

static void test_grid_cpu(void) {
    nb_device *d = cpu();
    nb_tensor *img = NULL;
    NB_REQUIRE_OK(nb_image_procedural(d, 16, 12, &img));
    nb_fit_image_config c = nb_fit_image_config_default();
    c.model = NB_FIT_IMAGE_GRID;
    nb_fit_image *f = NULL;
    nb_fit_image_info in;
    NB_REQUIRE_OK(nb_fit_image_create(d, img, &c, &f));
    NB_EXPECT_OK(nb_fit_image_get_info(f, &in));
    NB_EXPECT(in.width == 16 && in.height == 12 && in.batch == 192 && in.every_pixel);
    NB_EXPECT(in.encoding_params == 33 * 33 * 14 && in.mlp_params == 768);
    nb_fit_image_profile p;
    NB_REQUIRE_OK(nb_fit_image_profile_steps(f, 1, 1, &p));
    NB_EXPECT(p.n_phases == 3 && !strcmp(p.phase[1], "fwd+bwd") && p.note == NULL);
    nb_fit_image_free(f);
    c.batch = 100; /* fewer than the pixels: sampled */
    NB_REQUIRE_OK(nb_fit_image_create(d, img, &c, &f));
    NB_EXPECT_OK(nb_fit_image_get_info(f, &in));
    NB_EXPECT(in.batch == 100 && !in.every_pixel);
    nb_fit_image_free(f);
    c.batch = 1000; /* more than the pixels: every pixel */
    NB_REQUIRE_OK(nb_fit_image_create(d, img, &c, &f));
    NB_EXPECT_OK(nb_fit_image_get_info(f, &in));
    NB_EXPECT(in.batch == 192 && in.every_pixel);
    nb_fit_image_free(f);
    nb_tensor_free(img);
    check_fit(d, NB_FIT_IMAGE_GRID, 32, 0, 20, 11);
    nb_device_close(d);
}

static void test_cuda_fit(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *d = NULL;
    NB_REQUIRE_OK(nb_device_open("cuda", &d));
    nb_tensor *img = NULL;
    NB_REQUIRE_OK(nb_image_procedural(d, 64, 64, &img));
    nb_fit_image *f = NULL;
    NB_REQUIRE_OK(nb_fit_image_create(d, img, NULL, &f));
    nb_fit_image_info in;
    NB_EXPECT_OK(nb_fit_image_get_info(f, &in));
    NB_EXPECT(in.batch == (1 << 18)); /* the CUDA default */
    nb_fit_image_profile p;
    NB_EXPECT_OK(nb_fit_image_profile_steps(f, 1, 1, &p));
    NB_EXPECT(p.note != NULL);        /* the fused MLP forward + loss + backwards */
    nb_fit_image_free(f);
    check_fit(d, NB_FIT_IMAGE_HASH, 64, 4096, 40, 14);
    check_fit(d, NB_FIT_IMAGE_GRID, 32, 0, 20, 11);
    nb_tensor_free(img);
    nb_device_close(d);
}

static void test_datasheet_peak(void) {
    nb_device *d = cpu();
    double flops = -1;
    const char *src = NULL;
    NB_EXPECT_OK(nb_device_datasheet_peak(d, "bf16", &flops, &src));
    NB_EXPECT(flops == 0 && src && strstr(src, "CPU"));
    NB_EXPECT_ERR(nb_device_datasheet_peak(d, "fp8", &flops, &src), NB_ERR_INVALID_ARG, "unknown precision 'fp8'");
    NB_EXPECT_ERR(nb_device_datasheet_peak(d, NULL, &flops, &src), NB_ERR_INVALID_ARG, "precision");
    nb_device_close(d);
    if (nb_cuda_device_count() == 0) return;
    NB_REQUIRE_OK(nb_device_open("cuda", &d));
    const char *name = nb_device_get_info(d)->name;
    double f32 = 0, tf32 = 0, bf16 = 0;
    NB_EXPECT_OK(nb_device_datasheet_peak(d, "fp32", &f32, &src));
    NB_EXPECT_OK(nb_device_datasheet_peak(d, "tf32", &tf32, &src));
    NB_EXPECT_OK(nb_device_datasheet_peak(d, "bf16", &bf16, &src));
    if (strstr(name, "H100") || strstr(name, "H200"))
        NB_EXPECT(f32 > 0 && tf32 > f32 && bf16 == 2 * tf32);
    else
        NB_EXPECT(bf16 == 0 && strstr(src, "unknown GPU"));
    nb_device_close(d);
}

static void test_plot_loss(void) {
    char dir[] = "/tmp/nb_fit_plotXXXXXX", path[300];
    if (!mkdtemp(dir)) NB_SKIP("cannot make a temporary directory");
    snprintf(path, sizeof path, "%s/loss.png", dir);
    double x[50], y[50];
    for (int i = 0; i < 50; i++) x[i] = 10.0 * (i + 1), y[i] = 0.5 * exp(-0.05 * i);
    y[20] = NAN; /* breaks the line, not the plot */
    NB_REQUIRE_OK(nb_image_plot_loss(path, x, y, 50));
    nb_tensor *img = NULL;
    NB_REQUIRE_OK(nb_image_read_png(path, 0, NULL, &img));
    NB_EXPECT(nb_tensor_shape(img)[0] == 480 && nb_tensor_shape(img)[1] == 800 && nb_tensor_shape(img)[2] == 3);
    /* the curve is blue (0.1, 0.3, 0.8) somewhere; the background white */
    const float *p = nb_tensor_data(img);
    int blue = 0;
    for (int64_t i = 0; i < 480 * 800; i++) blue += p[3 * i + 2] > 0.7f && p[3 * i] < 0.2f;
    NB_EXPECT(blue > 100);
    NB_EXPECT(p[0] == 1.0f && p[1] == 1.0f && p[2] == 1.0f);
    nb_tensor_free(img);
    NB_EXPECT_ERR(nb_image_plot_loss(path, x, y, 0), NB_ERR_INVALID_ARG, "no points");
    double bad[2] = {0, -1};
    NB_EXPECT_ERR(nb_image_plot_loss(path, x, bad, 2), NB_ERR_INVALID_ARG, "no positive finite loss");
    snprintf(path, sizeof path, "%s/none/loss.png", dir);
    NB_EXPECT(nb_image_plot_loss(path, x, y, 50) != NB_OK);
    snprintf(path, sizeof path, "%s/loss.png", dir);
    unlink(path);
    /* several series, log-log (nb_image_plot_lines): each series' colour shows, a gap (NAN)
     * leaves the rest; bad x and no value are typed errors */
    snprintf(path, sizeof path, "%s/lines.png", dir);
    double lx[4] = {32, 64, 128, 256}, ly[8] = {1, 2, 4, 8, 0.01, NAN, 0.1, 1};
    const char *names[2] = {"cpu", "immediate_cached"};
    NB_REQUIRE_OK(nb_image_plot_lines(path, "t", "size", "ms", lx, 4, names, ly, 2));
    NB_REQUIRE_OK(nb_image_read_png(path, 0, NULL, &img));
    NB_EXPECT(nb_tensor_shape(img)[0] == 480 && nb_tensor_shape(img)[1] == 1040);
    p = nb_tensor_data(img);
    int c0 = 0, c1 = 0; /* palette 0 (0.12, 0.47, 0.71), 1 (1.0, 0.5, 0.05) */
    for (int64_t i = 0; i < 480 * 1040; i++) {
        c0 += fabsf(p[3 * i] - 0.12f) < 0.01f && fabsf(p[3 * i + 2] - 0.71f) < 0.01f;
        c1 += fabsf(p[3 * i] - 1.0f) < 0.01f && fabsf(p[3 * i + 2] - 0.05f) < 0.01f;
    }
    NB_EXPECT(c0 > 100 && c1 > 100);
    nb_tensor_free(img);
    unlink(path);
    double lxbad[2] = {64, 32};
    NB_EXPECT_ERR(nb_image_plot_lines(path, NULL, NULL, NULL, lxbad, 2, names, ly, 1),
                  NB_ERR_INVALID_ARG, "increasing");
    NB_EXPECT_ERR(nb_image_plot_lines(path, NULL, NULL, NULL, lx, 2, names, bad, 1),
                  NB_ERR_INVALID_ARG, "no positive finite value");
    NB_EXPECT_ERR(nb_image_plot_lines(path, NULL, NULL, NULL, lx, 0, names, ly, 1),
                  NB_ERR_INVALID_ARG, "no points");
    rmdir(dir);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_bad_config, test_bad_image, test_hash_cpu, test_grid_cpu, test_cuda_fit,
                 test_datasheet_peak, test_plot_loss);
}

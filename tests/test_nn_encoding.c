/* Encodings (nn_encoding.h): layouts, values, finite-difference gradients on the CPU, CUDA vs CPU
 * agreement, accumulate/overwrite semantics and bad arguments. */
#include <stdint.h>

#include "nabla/nn_encoding.h"
#include "nabla/nn_mlp.h"
#include "nb_test.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* [0, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) * (1.0 / 16777216.0));
}

static nb_tensor *tens(nb_device *dev, int ndim, int64_t d0, int64_t d1, const float *data) {
    int64_t shape[2] = {d0, d1};
    nb_tensor *t = NULL;
    if (data)
        nb_tensor_from_host(dev, NB_F32, ndim, shape, data, &t);
    else
        nb_tensor_zeros(dev, NB_F32, ndim, shape, &t);
    return t;
}

static float *host(const nb_tensor *t) {
    size_t n = nb_tensor_nbytes(t);
    float *h = malloc(n ? n : 4);
    if (nb_tensor_to_host(t, h, n) != NB_OK) memset(h, 0, n);
    return h;
}

static void test_layout_hash(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_encoding_config c = nb_hash_grid_config(2, 16, 2, 15, 16, 1.5f);
    nb_encoding *e;
    NB_REQUIRE_OK(nb_encoding_create(cpu, &c, &e));
    NB_EXPECT(nb_encoding_n_output_dims(e) == 32);
    NB_EXPECT(nb_encoding_n_input_dims(e) == 2);
    /* resolutions 16, 24, 36, 54, 81, 121 are dense ((N+1)^2 <= 2^15), 182.. hashed */
    static const int res[6] = {16, 24, 36, 54, 81, 121};
    int64_t off = 0;
    for (int l = 0; l < 16; l++) {
        int side[3], hashed;
        int64_t o, entries;
        NB_REQUIRE_OK(nb_encoding_level_info(e, l, side, &o, &entries, &hashed));
        NB_EXPECT(o == off);
        if (l < 6) {
            NB_EXPECT(side[0] == res[l] + 1 && side[1] == res[l] + 1 && side[2] == 1);
            NB_EXPECT(!hashed && entries == (int64_t)(res[l] + 1) * (res[l] + 1));
        } else {
            NB_EXPECT(hashed && entries == 32768);
        }
        off += entries * 2;
    }
    NB_EXPECT(nb_encoding_n_params(e) == off);
    NB_EXPECT(off == 709192);
    int side[3];
    NB_EXPECT_ERR(nb_encoding_level_info(e, 16, side, NULL, NULL, NULL), NB_ERR_INVALID_ARG, "level 16");
    nb_encoding_destroy(e);
    nb_device_close(cpu);
}

static void test_bad_config(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_encoding *e = NULL;
    nb_encoding_config c = nb_hash_grid_config(4, 16, 2, 15, 16, 1.5f);
    NB_EXPECT_ERR(nb_encoding_create(cpu, &c, &e), NB_ERR_INVALID_ARG, "n_dims = 4");
    c = nb_hash_grid_config(2, 0, 2, 15, 16, 1.5f);
    NB_EXPECT_ERR(nb_encoding_create(cpu, &c, &e), NB_ERR_INVALID_ARG, "n_levels = 0");
    c = nb_hash_grid_config(2, 16, 2, 40, 16, 1.5f);
    NB_EXPECT_ERR(nb_encoding_create(cpu, &c, &e), NB_ERR_INVALID_ARG, "log2_table_size = 40");
    c = nb_hash_grid_config(2, 16, 2, 15, 16, 0.5f);
    NB_EXPECT_ERR(nb_encoding_create(cpu, &c, &e), NB_ERR_INVALID_ARG, "per_level_scale");
    c = nb_hash_grid_config(2, 16, 0, 15, 16, 1.5f);
    NB_EXPECT_ERR(nb_encoding_create(cpu, &c, &e), NB_ERR_INVALID_ARG, "n_features = 0");
    c = nb_dense_grid_config(2, 4, 1, 8, 0);
    NB_EXPECT_ERR(nb_encoding_create(cpu, &c, &e), NB_ERR_INVALID_ARG, "resolution[0] = 1");
    c = nb_dense_grid_config(3, 64, 1 << 20, 1 << 20, 2);
    NB_EXPECT_ERR(nb_encoding_create(cpu, &c, &e), NB_ERR_INVALID_ARG, "2^31");
    c = nb_frequency_config(2, 0);
    NB_EXPECT_ERR(nb_encoding_create(cpu, &c, &e), NB_ERR_INVALID_ARG, "n_frequencies = 0");
    NB_EXPECT_ERR(nb_encoding_create(cpu, NULL, &e), NB_ERR_INVALID_ARG, "NULL");
    NB_EXPECT(e == NULL);
    nb_device_close(cpu);
}

/* A dense grid whose vertex features are linear in the vertex position reproduces the linear
 * function exactly (bilinear interpolation is exact on linear functions). */
static void test_dense_linear(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_encoding_config c = nb_dense_grid_config(3, 2, 5, 7, 4);
    nb_encoding *e;
    NB_REQUIRE_OK(nb_encoding_create(cpu, &c, &e));
    NB_EXPECT(nb_encoding_n_params(e) == 5 * 7 * 4 * 2);
    float p[5 * 7 * 4 * 2];
    for (int z = 0; z < 4; z++)
        for (int y = 0; y < 7; y++)
            for (int x = 0; x < 5; x++) {
                float fx = x / 4.0f, fy = y / 6.0f, fz = z / 3.0f;
                p[((z * 7 + y) * 5 + x) * 2] = 1.0f + 2.0f * fx - 3.0f * fy + 0.5f * fz;
                p[((z * 7 + y) * 5 + x) * 2 + 1] = fx * 0.25f + fz;
            }
    enum { B = 50 };
    float xs[B * 3];
    for (int i = 0; i < B * 3; i++) xs[i] = frand();
    xs[0] = 0.0f, xs[1] = 1.0f, xs[2] = 1.0f; /* corners and edges included */
    nb_tensor *params = tens(cpu, 1, 280, 0, p), *x = tens(cpu, 2, B, 3, xs), *f = tens(cpu, 2, B, 2, NULL);
    NB_REQUIRE_OK(nb_encoding_forward(e, params, x, f));
    float *fh = host(f);
    for (int b = 0; b < B; b++) {
        const float *q = xs + b * 3;
        NB_EXPECT_NEAR(fh[b * 2], 1.0f + 2.0f * q[0] - 3.0f * q[1] + 0.5f * q[2], 1e-5);
        NB_EXPECT_NEAR(fh[b * 2 + 1], q[0] * 0.25f + q[2], 1e-5);
    }
    free(fh);
    nb_tensor_free(params), nb_tensor_free(x), nb_tensor_free(f);
    nb_encoding_destroy(e);
    nb_device_close(cpu);
}

/* L = sum_b,j r[b,j] feat[b,j]: analytic gradients vs central differences. */
static double loss_of(nb_encoding *e, nb_tensor *params, const float *xs, int B, const float *r) {
    int D = nb_encoding_n_input_dims(e), F = nb_encoding_n_output_dims(e);
    nb_device *cpu = nb_tensor_device(params ? params : NULL);
    (void)cpu;
    nb_device *dev;
    nb_device_open("cpu", &dev);
    nb_tensor *x = tens(dev, 2, B, D, xs), *f = tens(dev, 2, B, F, NULL);
    double L = 0;
    if (nb_encoding_forward(e, params, x, f) == NB_OK) {
        float *fh = host(f);
        for (int i = 0; i < B * F; i++) L += (double)r[i] * fh[i];
        free(fh);
    }
    nb_tensor_free(x), nb_tensor_free(f);
    nb_device_close(dev);
    return L;
}

/* Keeps points away from cell boundaries of every level (the interpolation has kinks there). */
static int near_boundary(nb_encoding *e, const float *q, float h) {
    int D = nb_encoding_n_input_dims(e);
    for (int l = 0;; l++) {
        int side[3];
        if (nb_encoding_level_info(e, l, side, NULL, NULL, NULL) != NB_OK) break;
        for (int d = 0; d < D; d++) {
            float pos = q[d] * (side[d] - 1), fr = pos - floorf(pos), m = h * (side[d] - 1) * 4;
            if (fr < m || fr > 1 - m) return 1;
        }
    }
    nb_clear_error();
    return 0;
}

static void check_grads_fd(const nb_encoding_config *c, const char *what) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_encoding *e;
    NB_REQUIRE_OK(nb_encoding_create(cpu, c, &e));
    int D = nb_encoding_n_input_dims(e), F = nb_encoding_n_output_dims(e);
    int64_t np = nb_encoding_n_params(e);
    enum { B = 24 };
    float xs[B * 3], r[B * 256];
    const float h = 2e-4f;
    for (int b = 0; b < B; b++) {
        do
            for (int d = 0; d < D; d++) xs[b * D + d] = 0.05f + 0.9f * frand();
        while (c->kind != NB_ENCODING_FREQUENCY && near_boundary(e, xs + b * D, h));
    }
    for (int i = 0; i < B * F; i++) r[i] = frand() * 2 - 1;
    float *p = malloc((size_t)(np ? np : 1) * sizeof(float));
    for (int64_t i = 0; i < np; i++) p[i] = frand() * 2 - 1;
    nb_tensor *params = np ? tens(cpu, 1, np, 0, p) : NULL;
    nb_tensor *grads = np ? tens(cpu, 1, np, 0, NULL) : NULL;
    nb_tensor *x = tens(cpu, 2, B, D, xs), *dfeat = tens(cpu, 2, B, F, r), *dx = tens(cpu, 2, B, D, NULL);
    NB_REQUIRE_OK(nb_encoding_backward(e, params, x, dfeat, grads, dx));
    float *dxh = host(dx);
    /* input gradient */
    int bad = 0;
    for (int b = 0; b < B; b++)
        for (int d = 0; d < D; d++) {
            float save = xs[b * D + d];
            xs[b * D + d] = save + h;
            double lp = loss_of(e, params, xs, B, r);
            xs[b * D + d] = save - h;
            double lm = loss_of(e, params, xs, B, r);
            xs[b * D + d] = save;
            double fd = (lp - lm) / (2.0 * h), an = dxh[b * D + d];
            if (fabs(fd - an) > 2e-2 * (1.0 + fabs(fd))) {
                if (bad++ < 5) fprintf(stderr, "  %s: dx[%d,%d] analytic %g vs fd %g\n", what, b, d, an, fd);
            }
        }
    NB_EXPECT(bad == 0);
    /* parameter gradient (the output is linear in the parameters, so the difference is exact up
     * to rounding): 40 parameters that some point touches, 10 random ones */
    if (np) {
        float *gh = host(grads);
        int checked = 0;
        for (int64_t i = 0; i < np && checked < 50; i++) {
            int touched = gh[i] != 0.0f;
            if (!touched && frand() > 10.0f / (float)np) continue;
            if (touched && checked >= 40) continue;
            float save = p[i];
            float hp = 1e-2f;
            p[i] = save + hp;
            nb_tensor_from_host_into(params, p, (size_t)np * sizeof(float));
            double lp = loss_of(e, params, xs, B, r);
            p[i] = save - hp;
            nb_tensor_from_host_into(params, p, (size_t)np * sizeof(float));
            double lm = loss_of(e, params, xs, B, r);
            p[i] = save;
            nb_tensor_from_host_into(params, p, (size_t)np * sizeof(float));
            double fd = (lp - lm) / (2.0 * hp);
            if (fabs(fd - gh[i]) > 1e-3 * (1.0 + fabs(fd))) {
                if (bad++ < 5) fprintf(stderr, "  %s: dparam[%lld] analytic %g vs fd %g\n", what, (long long)i, gh[i], fd);
            }
            checked++;
        }
        NB_EXPECT(checked >= 40);
        NB_EXPECT(bad == 0);
        /* accumulate: a second backward doubles the gradient; dx is overwritten (unchanged) */
        NB_REQUIRE_OK(nb_encoding_backward(e, params, x, dfeat, grads, dx));
        float *gh2 = host(grads), *dxh2 = host(dx);
        int ok = 1;
        for (int64_t i = 0; i < np; i++) ok &= fabsf(gh2[i] - 2 * gh[i]) <= 1e-5f * (1 + fabsf(gh[i]));
        for (int i = 0; i < B * D; i++) ok &= dxh2[i] == dxh[i];
        NB_EXPECT(ok);
        free(gh), free(gh2), free(dxh2);
    }
    free(dxh), free(p);
    nb_tensor_free(params), nb_tensor_free(grads), nb_tensor_free(x), nb_tensor_free(dfeat), nb_tensor_free(dx);
    nb_encoding_destroy(e);
    nb_device_close(cpu);
}

static void test_fd_dense2d(void) {
    nb_encoding_config c = nb_dense_grid_config(2, 3, 9, 6, 0);
    check_grads_fd(&c, "dense2d");
}
static void test_fd_dense3d(void) {
    nb_encoding_config c = nb_dense_grid_config(3, 2, 4, 5, 6);
    check_grads_fd(&c, "dense3d");
}
static void test_fd_hash2d(void) {
    /* 2^8 entries: levels 0-1 dense, the finer ones hashed */
    nb_encoding_config c = nb_hash_grid_config(2, 5, 2, 8, 4, 1.6f);
    check_grads_fd(&c, "hash2d");
}
static void test_fd_hash3d(void) {
    nb_encoding_config c = nb_hash_grid_config(3, 4, 4, 9, 3, 1.7f);
    check_grads_fd(&c, "hash3d");
}
static void test_fd_frequency(void) {
    nb_encoding_config c = nb_frequency_config(3, 5);
    check_grads_fd(&c, "frequency");
}

static void test_frequency_values(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_encoding_config c = nb_frequency_config(2, 3);
    nb_encoding *e;
    NB_REQUIRE_OK(nb_encoding_create(cpu, &c, &e));
    NB_EXPECT(nb_encoding_n_params(e) == 0 && nb_encoding_n_output_dims(e) == 12);
    float xs[4] = {0.1f, 0.7f, -0.3f, 1.5f};
    nb_tensor *x = tens(cpu, 2, 2, 2, xs), *f = tens(cpu, 2, 2, 12, NULL);
    NB_REQUIRE_OK(nb_encoding_forward(e, NULL, x, f));
    float *fh = host(f);
    for (int b = 0; b < 2; b++)
        for (int d = 0; d < 2; d++)
            for (int k = 0; k < 3; k++) {
                double a = ldexp(3.14159265358979323846, k) * xs[b * 2 + d];
                NB_EXPECT_NEAR(fh[b * 12 + (d * 3 + k) * 2], sin(a), 1e-5);
                NB_EXPECT_NEAR(fh[b * 12 + (d * 3 + k) * 2 + 1], cos(a), 1e-5);
            }
    nb_tensor *g = tens(cpu, 1, 4, 0, NULL);
    NB_EXPECT_ERR(nb_encoding_backward(e, NULL, x, f, g, NULL), NB_ERR_INVALID_ARG, "no parameters");
    free(fh);
    nb_tensor_free(x), nb_tensor_free(f), nb_tensor_free(g);
    nb_encoding_destroy(e);
    nb_device_close(cpu);
}

/* f16 features: the f32 result rounded to nearest even. */
static void test_f16_output(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_encoding_config cs[2] = {nb_hash_grid_config(2, 6, 2, 10, 4, 1.5f), nb_frequency_config(2, 4)};
    for (int k = 0; k < 2; k++) {
        nb_encoding *e;
        NB_REQUIRE_OK(nb_encoding_create(cpu, &cs[k], &e));
        int F = nb_encoding_n_output_dims(e);
        int64_t np = nb_encoding_n_params(e);
        nb_tensor *p = np ? tens(cpu, 1, np, 0, NULL) : NULL;
        if (p) {
            float *h = host(p);
            for (int64_t i = 0; i < np; i++) h[i] = frand() * 2 - 1;
            nb_tensor_from_host_into(p, h, (size_t)np * 4);
            free(h);
        }
        float xs[200];
        for (int i = 0; i < 200; i++) xs[i] = frand();
        nb_tensor *x = tens(cpu, 2, 100, 2, xs), *f = tens(cpu, 2, 100, F, NULL), *fh;
        int64_t sh[2] = {100, F};
        NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F16, 2, sh, &fh));
        NB_REQUIRE_OK(nb_encoding_forward(e, p, x, f));
        NB_REQUIRE_OK(nb_encoding_forward(e, p, x, fh));
        const float *a = nb_tensor_data(f);
        const uint16_t *b = nb_tensor_data(fh);
        int ok = 1;
        for (int i = 0; i < 100 * F; i++) ok &= b[i] == nb_f32_to_f16(a[i]);
        NB_EXPECT(ok);
        nb_tensor *bad;
        int64_t sb[2] = {100, F + 1};
        NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F16, 2, sb, &bad));
        NB_EXPECT_ERR(nb_encoding_forward(e, p, x, bad), NB_ERR_SHAPE, "feat is f16");
        nb_tensor_free(bad);
        nb_tensor_free(p), nb_tensor_free(x), nb_tensor_free(f), nb_tensor_free(fh);
        nb_encoding_destroy(e);
    }
    nb_device_close(cpu);
}

static void test_bad_args(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_encoding_config c = nb_hash_grid_config(2, 4, 2, 10, 4, 1.5f);
    nb_encoding *e;
    NB_REQUIRE_OK(nb_encoding_create(cpu, &c, &e));
    int64_t np = nb_encoding_n_params(e);
    nb_tensor *p = tens(cpu, 1, np, 0, NULL), *x = tens(cpu, 2, 8, 2, NULL), *f = tens(cpu, 2, 8, 8, NULL);
    nb_tensor *x3 = tens(cpu, 2, 8, 3, NULL), *f9 = tens(cpu, 2, 7, 8, NULL), *pshort = tens(cpu, 1, np - 1, 0, NULL);
    int64_t sh[2] = {8, 2};
    nb_tensor *xd;
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F64, 2, sh, &xd));
    NB_EXPECT_ERR(nb_encoding_forward(e, p, x3, f), NB_ERR_SHAPE, "x has shape [8,3], expected [B,2]");
    NB_EXPECT_ERR(nb_encoding_forward(e, p, x, f9), NB_ERR_SHAPE, "feat has shape [7,8]");
    NB_EXPECT_ERR(nb_encoding_forward(e, pshort, x, f), NB_ERR_SHAPE, "params");
    NB_EXPECT_ERR(nb_encoding_forward(e, NULL, x, f), NB_ERR_INVALID_ARG, "params is NULL");
    NB_EXPECT_ERR(nb_encoding_forward(e, p, xd, f), NB_ERR_DTYPE, "x must be f32");
    NB_EXPECT_ERR(nb_encoding_backward(e, p, x, f, NULL, NULL), NB_ERR_INVALID_ARG, "both NULL");
    NB_EXPECT_ERR(nb_encoding_set_spatially_ordered(NULL, 1), NB_ERR_INVALID_ARG, "enc is NULL");
    NB_EXPECT_OK(nb_encoding_set_spatially_ordered(e, 1)); /* a hint; no effect on the CPU */
    NB_EXPECT_OK(nb_encoding_forward(e, p, x, f));
    NB_EXPECT_ERR(nb_encoding_backward(e, p, x, f, pshort, NULL), NB_ERR_SHAPE, "grads");
    nb_tensor *xt;
    NB_REQUIRE_OK(nb_tensor_transpose(f, 0, 1, &xt));
    NB_EXPECT_ERR(nb_encoding_backward(e, p, x, xt, p, NULL), NB_ERR_LAYOUT, "contiguous");
    nb_tensor_free(xt);
    nb_tensor_free(p), nb_tensor_free(x), nb_tensor_free(f), nb_tensor_free(x3), nb_tensor_free(f9);
    nb_tensor_free(pshort), nb_tensor_free(xd);
    nb_encoding_destroy(e);
    nb_device_close(cpu);
}

/* CUDA against the CPU reference: forward, parameter gradient (atomics: order differs), dx. */
static int clustered; /* cuda_vs_cpu: points in a small square (many share vertices) */
static int ordered;   /* cuda_vs_cpu: nb_encoding_set_spatially_ordered on the CUDA encoding */

static void cuda_vs_cpu(const nb_encoding_config *c, int B, const char *what) {
    nb_device *cpu, *gpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    NB_REQUIRE_OK(nb_device_open("cuda", &gpu));
    nb_encoding *ec, *eg;
    NB_REQUIRE_OK(nb_encoding_create(cpu, c, &ec));
    NB_REQUIRE_OK(nb_encoding_create(gpu, c, &eg));
    NB_REQUIRE_OK(nb_encoding_set_spatially_ordered(eg, ordered));
    int D = nb_encoding_n_input_dims(ec), F = nb_encoding_n_output_dims(ec);
    int64_t np = nb_encoding_n_params(ec);
    float *xs = malloc((size_t)B * D * sizeof(float)), *r = malloc((size_t)B * F * sizeof(float));
    for (int i = 0; i < B * D; i++) xs[i] = clustered ? 0.4f + 0.02f * frand() : frand();
    for (int i = 0; i < B * F; i++) r[i] = frand() * 2 - 1;
    nb_tensor *pc = np ? tens(cpu, 1, np, 0, NULL) : NULL, *pg = np ? tens(gpu, 1, np, 0, NULL) : NULL;
    if (np) {
        NB_REQUIRE_OK(nb_encoding_init_params(ec, pc, 7));
        NB_REQUIRE_OK(nb_encoding_init_params(eg, pg, 7));
        float *a = host(pc), *b = host(pg);
        NB_EXPECT(memcmp(a, b, (size_t)np * 4) == 0); /* same init on both devices */
        for (int64_t i = 0; i < np; i++) a[i] = frand() * 2 - 1;  /* larger values for the test */
        nb_tensor_from_host_into(pc, a, (size_t)np * 4);
        nb_tensor_from_host_into(pg, a, (size_t)np * 4);
        free(a), free(b);
    }
    nb_tensor *xc = tens(cpu, 2, B, D, xs), *xg = tens(gpu, 2, B, D, xs);
    nb_tensor *fc = tens(cpu, 2, B, F, NULL), *fg = tens(gpu, 2, B, F, NULL);
    nb_tensor *rc = tens(cpu, 2, B, F, r), *rg = tens(gpu, 2, B, F, r);
    nb_tensor *gc = np ? tens(cpu, 1, np, 0, NULL) : NULL, *gg = np ? tens(gpu, 1, np, 0, NULL) : NULL;
    nb_tensor *dc = tens(cpu, 2, B, D, NULL), *dg = tens(gpu, 2, B, D, NULL);
    NB_REQUIRE_OK(nb_encoding_forward(ec, pc, xc, fc));
    NB_REQUIRE_OK(nb_encoding_forward(eg, pg, xg, fg));
    NB_REQUIRE_OK(nb_encoding_backward(ec, pc, xc, rc, gc, dc));
    NB_REQUIRE_OK(nb_encoding_backward(eg, pg, xg, rg, gg, dg));
    float *a = host(fc), *b = host(fg);
    double worst = 0;
    for (int64_t i = 0; i < (int64_t)B * F; i++) worst = fmax(worst, fabs(a[i] - b[i]));
    NB_EXPECT(worst < 1e-5);
    if (worst >= 1e-5) fprintf(stderr, "  %s: forward differs by %g\n", what, worst);
    { /* f16 features on CUDA: within one f16 rounding of the CPU's f32 */
        nb_tensor *fh;
        int64_t sh[2] = {B, F};
        NB_REQUIRE_OK(nb_tensor_zeros(gpu, NB_F16, 2, sh, &fh));
        NB_REQUIRE_OK(nb_encoding_forward(eg, pg, xg, fh));
        uint16_t *hh = malloc((size_t)B * F * 2);
        NB_REQUIRE_OK(nb_tensor_to_host(fh, hh, (size_t)B * F * 2));
        double w16 = 0;
        for (int64_t i = 0; i < (int64_t)B * F; i++)
            w16 = fmax(w16, fabs(nb_f16_to_f32(hh[i]) - a[i]) / (1e-3 + fabs(a[i])));
        NB_EXPECT(w16 < 1.5e-3);
        if (w16 >= 1.5e-3) fprintf(stderr, "  %s: f16 forward differs by %g (relative)\n", what, w16);
        free(hh);
        nb_tensor_free(fh);
    }
    free(a), free(b);
    if (np) {
        a = host(gc), b = host(gg);
        worst = 0;
        for (int64_t i = 0; i < np; i++) worst = fmax(worst, fabs(a[i] - b[i]) / (1.0 + fabs(a[i])));
        NB_EXPECT(worst < 1e-4);
        if (worst >= 1e-4) fprintf(stderr, "  %s: parameter gradient differs by %g\n", what, worst);
        free(a), free(b);
    }
    a = host(dc), b = host(dg);
    worst = 0;
    for (int64_t i = 0; i < (int64_t)B * D; i++) worst = fmax(worst, fabs(a[i] - b[i]) / (1.0 + fabs(a[i])));
    NB_EXPECT(worst < 1e-3);
    if (worst >= 1e-3) fprintf(stderr, "  %s: dx differs by %g\n", what, worst);
    free(a), free(b);
    nb_tensor *ts[] = {pc, pg, xc, xg, fc, fg, rc, rg, gc, gg, dc, dg};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) nb_tensor_free(ts[i]);
    free(xs), free(r);
    nb_encoding_destroy(ec), nb_encoding_destroy(eg);
    nb_device_close(gpu), nb_device_close(cpu);
}

static void test_cuda_agrees(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_encoding_config c = nb_hash_grid_config(2, 16, 2, 15, 16, 1.5f);
    cuda_vs_cpu(&c, 5000, "hash2d tcnn image");
    c = nb_hash_grid_config(3, 8, 4, 12, 4, 2.0f);
    cuda_vs_cpu(&c, 3000, "hash3d F=4");
    c = nb_hash_grid_config(2, 3, 3, 10, 8, 1.5f);
    cuda_vs_cpu(&c, 3000, "hash2d F=3");
    c = nb_dense_grid_config(2, 14, 33, 33, 0);
    cuda_vs_cpu(&c, 3000, "dense 33x33x14");
    c = nb_dense_grid_config(3, 1, 7, 9, 5);
    cuda_vs_cpu(&c, 3000, "dense3d F=1");
    c = nb_frequency_config(3, 6);
    cuda_vs_cpu(&c, 3000, "frequency");
    /* the other parameter-backward kernels: plain atomics (no level fits in shared memory: a
     * first level of 128^2 entries), and the warp-aggregated one (spatially ordered batches) */
    nb_encoding_config cp = nb_hash_grid_config(2, 8, 2, 15, 128, 1.5f);
    cuda_vs_cpu(&cp, 5000, "hash2d, plain atomics");
    c = nb_hash_grid_config(2, 16, 2, 15, 16, 1.5f);
    ordered = 1; /* nb_encoding_set_spatially_ordered: the warp-aggregated kernel */
    cuda_vs_cpu(&c, 5000, "hash2d, warp-aggregated");
    clustered = 1;
    cuda_vs_cpu(&c, 5003, "hash2d, warp-aggregated, clustered points");
    nb_encoding_config c3 = nb_hash_grid_config(3, 8, 4, 12, 4, 2.0f);
    cuda_vs_cpu(&c3, 3001, "hash3d F=4, warp-aggregated, clustered points");
    clustered = 0;
    ordered = 0;
}

/* The paired 16-byte gradient reductions (2-D grids of 2 features), in the shared-memory kernel
 * and in the plain one (first levels too big for shared memory), on spread and on clustered
 * points; other shapes take the unpaired code (checked too). */
static void test_cuda_paired_atomics(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_encoding_config c = nb_hash_grid_config(2, 16, 2, 15, 16, 1.5f);
    cuda_vs_cpu(&c, 5000, "hash2d, paired atomics");
    clustered = 1;
    cuda_vs_cpu(&c, 5001, "hash2d, paired atomics, clustered points");
    clustered = 0;
    nb_encoding_config d = nb_dense_grid_config(2, 2, 31, 17, 0); /* odd side: pairs at odd x too */
    cuda_vs_cpu(&d, 3000, "dense2d F=2, paired atomics");
    nb_encoding_config cn = nb_hash_grid_config(2, 8, 2, 15, 128, 1.5f);
    nb_encoding_config dn = nb_dense_grid_config(2, 2, 97, 91, 0); /* 17654 floats: no shared memory */
    cuda_vs_cpu(&cn, 5002, "hash2d, paired atomics, no shared memory");
    cuda_vs_cpu(&dn, 3001, "dense2d F=2, paired atomics, no shared memory");
    nb_encoding_config c3 = nb_hash_grid_config(3, 8, 4, 12, 4, 2.0f);
    cuda_vs_cpu(&c3, 3000, "hash3d F=4 (unpaired: other shapes)");
    nb_encoding_config c23 = nb_hash_grid_config(2, 8, 3, 14, 16, 1.5f);
    cuda_vs_cpu(&c23, 3002, "hash2d F=3 (unpaired: other shapes)");
}

/* nb_encoding_backward_mlp: hash grid -> MLP (the fit-image model) on dev; returns the grid
 * gradients and the MLP gradients (malloc'd) after forward + the combined backward. */
static int train_mode;  /* enc_mlp_run: 0 forward + nb_encoding_backward_mlp(dys); 1 nb_encoding_mlp_train
                          (dys is the target, L2 loss), 2 the same with f16 features; 3 like 0 and
                          4 like 1 by separate calls (nb_mlp_backward + nb_encoding_backward) */
static int mlp_ordered; /* enc_mlp_run: nb_encoding_set_spatially_ordered (warp-aggregated scatter) */
static float train_loss; /* enc_mlp_run, modes 1-2: the loss */

static void enc_mlp_run(nb_device *dev, int B, const float *xs, const float *dys, const float *gp,
                        const float *mp, float **genc, float **gmlp) {
    nb_encoding_config c = nb_hash_grid_config(2, 16, 2, 15, 16, 1.5f);
    nb_encoding *e;
    NB_REQUIRE_OK(nb_encoding_create(dev, &c, &e));
    NB_REQUIRE_OK(nb_encoding_set_spatially_ordered(e, mlp_ordered));
    nb_mlp_config mc = nb_mlp_config_default(32, 3, 64, 2);
    mc.act = NB_ACT_RELU;
    mc.out_act = NB_ACT_NONE;
    mc.bias = 0;
    nb_mlp *m;
    NB_REQUIRE_OK(nb_mlp_create(dev, &mc, &m));
    int64_t np = nb_encoding_n_params(e);
    NB_REQUIRE_OK(nb_tensor_from_host_into(nb_mlp_params(m), mp, (size_t)nb_mlp_n_params(m) * 4));
    nb_tensor *p = tens(dev, 1, np, 0, gp), *g = tens(dev, 1, np, 0, NULL);
    nb_tensor *x = tens(dev, 2, B, 2, xs), *f = tens(dev, 2, B, 32, NULL), *y = tens(dev, 2, B, 3, NULL);
    nb_tensor *dy = tens(dev, 2, B, 3, dys), *ls = tens(dev, 0, 0, 0, NULL), *fh = NULL;
    if (train_mode == 2) {
        int64_t sh[2] = {B, 32};
        NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F16, 2, sh, &fh));
    }
    NB_REQUIRE_OK(nb_encoding_forward(e, p, x, fh ? fh : f));
    if (train_mode == 0) {
        NB_REQUIRE_OK(nb_mlp_forward(m, f, y, 1));
        NB_EXPECT_OK(nb_encoding_backward_mlp(e, m, p, x, dy, g));
    } else if (train_mode >= 3) { /* the same arithmetic by separate calls */
        nb_tensor *df = tens(dev, 2, B, 32, NULL), *d = dy;
        NB_REQUIRE_OK(nb_mlp_forward(m, f, y, 1));
        if (train_mode == 4) { /* dys is the target: the loss gradient into a fresh dL/dy */
            d = tens(dev, 2, B, 3, NULL);
            NB_EXPECT_OK(nb_loss(NB_LOSS_L2, y, dy, ls, d));
            NB_EXPECT_OK(nb_tensor_to_host(ls, &train_loss, 4));
        }
        NB_EXPECT_OK(nb_mlp_backward(m, d, df));
        NB_EXPECT_OK(nb_encoding_backward(e, p, x, df, g, NULL));
        if (d != dy) nb_tensor_free(d);
        nb_tensor_free(df);
    } else {
        NB_EXPECT_OK(nb_encoding_mlp_train(e, m, p, x, fh ? fh : f, dy, 0, ls, g));
        NB_EXPECT_OK(nb_tensor_to_host(ls, &train_loss, 4));
    }
    *genc = host(g);
    *gmlp = host(nb_mlp_grads(m));
    nb_tensor *ts[] = {p, g, x, f, y, dy, ls, fh};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) nb_tensor_free(ts[i]);
    nb_mlp_free(m);
    nb_encoding_destroy(e);
}

/* Largest |a - b| over the largest |b|. */
static double rel_max(const float *a, const float *b, int64_t n) {
    double d = 0, m = 1e-30;
    for (int64_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i])), m = fmax(m, fabs((double)b[i]));
    return d / m;
}

/* The fused CUDA backward (one kernel: MLP backward + grid scatter) against the two calls on
 * CUDA (same arithmetic: only the atomic order differs) and against the CPU reference (the MLP in
 * f16 there too: 1e-2 of the largest gradient). Batches: small, and 2^15 + 3 (several block tiles
 * per persistent block, the shared-memory flush of the coarse levels). Also the warp-aggregated
 * scatter, and nb_encoding_mlp_train (forward + loss fused too) with f32 and f16 features. */
static void test_cuda_backward_mlp(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *cpu, *gpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    NB_REQUIRE_OK(nb_device_open("cuda", &gpu));
    const int np = 709192, nm = 32 * 64 + 64 * 64 + 64 * 3;
    float *gp = malloc((size_t)np * 4), *mp = malloc((size_t)nm * 4);
    for (int i = 0; i < np; i++) gp[i] = (frand() * 2 - 1) * 0.5f;
    for (int i = 0; i < nm; i++) mp[i] = (frand() * 2 - 1) * 0.25f;
    const int batches[2] = {1000, (1 << 15) + 3};
    for (int bi = 0; bi < 2; bi++) {
        int B = batches[bi];
        float *xs = malloc((size_t)B * 8), *dys = malloc((size_t)B * 12);
        for (int i = 0; i < 2 * B; i++) xs[i] = frand();
        for (int i = 0; i < 3 * B; i++) dys[i] = (frand() * 2 - 1) / (float)B;
        float *ge_c, *gm_c, *ge_u, *gm_u, *ge_f, *gm_f, *ge_p, *gm_p;
        enc_mlp_run(cpu, B, xs, dys, gp, mp, &ge_c, &gm_c);
        train_mode = 3;
        enc_mlp_run(gpu, B, xs, dys, gp, mp, &ge_u, &gm_u);
        train_mode = 0;
        enc_mlp_run(gpu, B, xs, dys, gp, mp, &ge_f, &gm_f);
        mlp_ordered = 1; /* the warp-aggregated scatter (spatially ordered batches) */
        enc_mlp_run(gpu, B, xs, dys, gp, mp, &ge_p, &gm_p);
        mlp_ordered = 0;
        double e_fu = rel_max(ge_f, ge_u, np), m_fu = rel_max(gm_f, gm_u, nm);
        double e_pu = rel_max(ge_p, ge_u, np), e_fc = rel_max(ge_f, ge_c, np), m_fc = rel_max(gm_f, gm_c, nm);
        printf("  B %d: fused vs two calls: grid %.2e mlp %.2e; warp-aggregated %.2e; fused vs CPU: grid %.2e mlp %.2e\n",
               B, e_fu, m_fu, e_pu, e_fc, m_fc);
        NB_EXPECT(e_fu < 1e-5);
        NB_EXPECT(m_fu < 1e-5); /* weight-gradient partial sums per block: other block counts */
        NB_EXPECT(e_pu < 1e-5);
        /* Against the CPU: f16 activations that land within rounding of zero can flip a ReLU
         * on one side only, which moves single gradient entries by up to a few percent of the
         * largest (seen: 1.6e-2 at B = 32771 on the H100, with the two CUDA paths agreeing to
         * 6e-7); a wrong kernel is off by O(1). */
        NB_EXPECT(e_fc < 5e-2);
        NB_EXPECT(m_fc < 5e-2);
        free(ge_c), free(gm_c), free(ge_u), free(gm_u), free(ge_f), free(gm_f), free(ge_p), free(gm_p);
        /* nb_encoding_mlp_train: dys as the target (mean squared error against the mlp output) */
        for (int i = 0; i < 3 * B; i++) dys[i] = frand();
        float lc, lu, lf, lh;
        train_mode = 1;
        enc_mlp_run(cpu, B, xs, dys, gp, mp, &ge_c, &gm_c);
        lc = train_loss;
        train_mode = 4;
        enc_mlp_run(gpu, B, xs, dys, gp, mp, &ge_u, &gm_u);
        lu = train_loss;
        train_mode = 1;
        enc_mlp_run(gpu, B, xs, dys, gp, mp, &ge_f, &gm_f);
        lf = train_loss;
        train_mode = 2;
        enc_mlp_run(gpu, B, xs, dys, gp, mp, &ge_p, &gm_p);
        lh = train_loss;
        train_mode = 0;
        e_fu = rel_max(ge_f, ge_u, np), m_fu = rel_max(gm_f, gm_u, nm), e_fc = rel_max(ge_f, ge_c, np);
        m_fc = rel_max(gm_f, gm_c, nm);
        double e_hf = rel_max(ge_p, ge_f, np), m_hf = rel_max(gm_p, gm_f, nm);
        printf("  B %d train: loss cpu %.6f gpu %.6f fused %.6f fused f16 %.6f; fused vs separate: grid %.2e mlp %.2e; "
               "f16 vs f32 in: grid %.2e mlp %.2e; fused vs CPU: grid %.2e mlp %.2e\n",
               B, lc, lu, lf, lh, e_fu, m_fu, e_hf, m_hf, e_fc, m_fc);
        NB_EXPECT(fabs(lf - lu) <= 1e-5 * fabs(lu) + 1e-7);
        NB_EXPECT(fabs(lf - lc) <= 1e-2 * fabs(lc));
        NB_EXPECT(lh == lf || fabs(lh - lf) <= 1e-5 * fabs(lf));
        NB_EXPECT(e_fu < 1e-5);
        NB_EXPECT(m_fu < 1e-5);
        NB_EXPECT(e_hf < 1e-5);
        NB_EXPECT(m_hf == 0);
        /* Against the CPU: f16 activations that land within rounding of zero can flip a ReLU
         * on one side only, which moves single gradient entries by up to a few percent of the
         * largest (seen: 1.6e-2 at B = 32771 on the H100, with the two CUDA paths agreeing to
         * 6e-7); a wrong kernel is off by O(1). */
        NB_EXPECT(e_fc < 5e-2);
        NB_EXPECT(m_fc < 5e-2);
        free(ge_c), free(gm_c), free(ge_u), free(gm_u), free(ge_f), free(gm_f), free(ge_p), free(gm_p);
        free(xs), free(dys);
    }
    { /* warp aggregation in the fused scatter (spatially ordered), clustered points (many merges) */
        int B = 5003;
        float *xs = malloc((size_t)B * 8), *dys = malloc((size_t)B * 12);
        for (int i = 0; i < 2 * B; i++) xs[i] = 0.4f + 0.02f * frand();
        for (int i = 0; i < 3 * B; i++) dys[i] = (frand() * 2 - 1) / (float)B;
        float *ge_u, *gm_u, *ge_a, *gm_a;
        train_mode = 3;
        enc_mlp_run(gpu, B, xs, dys, gp, mp, &ge_u, &gm_u);
        train_mode = 0;
        mlp_ordered = 1;
        enc_mlp_run(gpu, B, xs, dys, gp, mp, &ge_a, &gm_a);
        mlp_ordered = 0;
        double e = rel_max(ge_a, ge_u, np), m = rel_max(gm_a, gm_u, nm);
        printf("  B %d clustered, warp-aggregated fused scatter vs two calls: grid %.2e mlp %.2e\n", B, e, m);
        NB_EXPECT(e < 1e-5);
        NB_EXPECT(m < 1e-5);
        free(ge_u), free(gm_u), free(ge_a), free(gm_a), free(xs), free(dys);
    }
    free(gp), free(mp);
    nb_device_close(gpu), nb_device_close(cpu);
}

/* Argument errors of nb_encoding_backward_mlp (CPU). */
static void test_backward_mlp_errors(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_encoding_config c = nb_hash_grid_config(2, 4, 2, 10, 4, 1.5f);
    nb_encoding *e;
    NB_REQUIRE_OK(nb_encoding_create(cpu, &c, &e));
    nb_mlp *m, *m9;
    nb_mlp_config mc = nb_mlp_config_default(8, 3, 16, 1);
    NB_REQUIRE_OK(nb_mlp_create(cpu, &mc, &m));
    mc.n_in = 9;
    NB_REQUIRE_OK(nb_mlp_create(cpu, &mc, &m9));
    int64_t np = nb_encoding_n_params(e);
    nb_tensor *p = tens(cpu, 1, np, 0, NULL), *g = tens(cpu, 1, np, 0, NULL), *x = tens(cpu, 2, 5, 2, NULL);
    nb_tensor *f = tens(cpu, 2, 5, 8, NULL), *y = tens(cpu, 2, 5, 3, NULL), *dy = tens(cpu, 2, 5, 3, NULL);
    nb_tensor *dy4 = tens(cpu, 2, 4, 3, NULL), *x4 = tens(cpu, 2, 4, 2, NULL);
    NB_EXPECT_ERR(nb_encoding_backward_mlp(e, NULL, p, x, dy, g), NB_ERR_INVALID_ARG, "mlp is NULL");
    NB_EXPECT_ERR(nb_encoding_backward_mlp(e, m9, p, x, dy, g), NB_ERR_SHAPE, "takes 9 inputs");
    NB_EXPECT_ERR(nb_encoding_backward_mlp(e, m, p, x, dy, g), NB_ERR_INVALID_ARG, "no saved activations");
    NB_REQUIRE_OK(nb_encoding_forward(e, p, x, f));
    NB_REQUIRE_OK(nb_mlp_forward(m, f, y, 1));
    NB_EXPECT_ERR(nb_encoding_backward_mlp(e, m, p, x4, dy4, g), NB_ERR_SHAPE, "batch 5");
    NB_EXPECT_ERR(nb_encoding_backward_mlp(e, m, p, x, dy4, g), NB_ERR_SHAPE, "dy");
    NB_EXPECT_ERR(nb_encoding_backward_mlp(e, m, p, x, dy, NULL), NB_ERR_INVALID_ARG, "grads");
    NB_EXPECT_OK(nb_encoding_backward_mlp(e, m, p, x, dy, g));
    nb_tensor *ts[] = {p, g, x, f, y, dy, dy4, x4};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) nb_tensor_free(ts[i]);
    nb_mlp_free(m), nb_mlp_free(m9);
    nb_encoding_destroy(e);
    nb_device_close(cpu);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_layout_hash, test_bad_config, test_dense_linear, test_fd_dense2d,
                 test_fd_dense3d, test_fd_hash2d, test_fd_hash3d, test_fd_frequency, test_frequency_values,
                 test_f16_output, test_bad_args, test_cuda_agrees, test_cuda_paired_atomics,
                 test_backward_mlp_errors, test_cuda_backward_mlp);
}

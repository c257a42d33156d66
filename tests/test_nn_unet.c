/* UNet (nn_unet.h) on the tape, CPU: the reference config's parameter count and names, config
 * validation, forward shapes, gradients against finite differences on a tiny UNet, checkpoint
 * round trip and mismatches, DDPM training lowering the loss, both samplers. */
#include <unistd.h>

#include "nb_test.h"
#include "nabla/nn_unet.h"
#include "nabla/alloc.h"
#include "nabla/safetensors.h"

static nb_unet_config tiny(void) {
    nb_unet_config c = nb_unet_config_reference();
    c.image_size = 8;
    c.in_channels = c.out_channels = 1;
    c.model_channels = 8;
    c.n_levels = 2;
    c.channel_mult[0] = 1, c.channel_mult[1] = 2;
    c.num_res_blocks = 1;
    c.n_attn = 1;
    c.attention_res[0] = 4;
    c.num_head_channels = 8;
    c.num_groups = 4;
    return c;
}

static void test_reference_param_count(void) {
    nb_unet_config c = nb_unet_config_reference();
    int64_t n = 0;
    NB_EXPECT_OK(nb_unet_param_count(&c, &n));
    NB_EXPECT(n == 20494211);
    /* the same count from the registered tape parameters, and guided-diffusion's names */
    nb_tape *t;
    nb_unet *u;
    NB_REQUIRE_OK(nb_tape_create(&t));
    NB_REQUIRE_OK(nb_unet_create(&c, t, &u));
    float *p;
    int64_t np;
    NB_EXPECT_OK(nb_tape_params(t, &p, &np));
    NB_EXPECT(np == 20494211);
    const char *names[] = {"time_embed.0.weight", "input_blocks.0.0.weight",
                           "input_blocks.1.0.in_layers.2.weight", "input_blocks.4.0.skip_connection.weight",
                           "input_blocks.7.1.qkv.weight", "input_blocks.8.1.proj_out.bias",
                           "middle_block.1.norm.weight", "middle_block.2.out_layers.3.weight",
                           "output_blocks.0.0.skip_connection.weight", "output_blocks.5.1.qkv.bias",
                           "output_blocks.11.0.emb_layers.1.weight", "out.2.weight"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        nb_tvar v;
        NB_EXPECT_OK(nb_tape_param_find(t, names[i], &v));
    }
    nb_tvar v;
    int nd;
    int64_t s[4];
    NB_EXPECT_OK(nb_tape_param_find(t, "input_blocks.7.1.qkv.weight", &v)); /* level 2: 192 ch, 16x16 */
    NB_EXPECT_OK(nb_tape_shape(t, v, &nd, s));
    NB_EXPECT(nd == 3 && s[0] == 576 && s[1] == 192 && s[2] == 1);
    NB_EXPECT_OK(nb_tape_param_find(t, "output_blocks.0.0.in_layers.2.weight", &v)); /* 256+256 -> 256 */
    NB_EXPECT_OK(nb_tape_shape(t, v, &nd, s));
    NB_EXPECT(nd == 4 && s[0] == 256 && s[1] == 512);
    NB_EXPECT_ERR(nb_tape_param_find(t, "input_blocks.3.0.op.weight", &v), NB_ERR_NOT_FOUND, "op.weight");
    const nb_unet_param_name *pn;
    int npn;
    NB_EXPECT_OK(nb_unet_params(u, &pn, &npn));
    NB_EXPECT(npn > 200 && !strcmp(pn[0].name, "time_embed.0.weight"));
    nb_unet_free(u);
    nb_tape_free(t);
    /* conv resample adds the op / conv weights */
    c.conv_resample = 1;
    NB_EXPECT_OK(nb_unet_param_count(&c, &n));
    NB_EXPECT(n == 20494211 + 64 * 64 * 9 + 64 + 128 * 128 * 9 + 128 + 192 * 192 * 9 + 192 +
                       128 * 128 * 9 + 128 + 192 * 192 * 9 + 192 + 256 * 256 * 9 + 256);
}

static void test_bad_configs(void) {
    nb_unet_config c = nb_unet_config_reference();
    int64_t n;
    c.model_channels = 48; /* 48 % 32 */
    NB_EXPECT_ERR(nb_unet_param_count(&c, &n), NB_ERR_INVALID_ARG, "not divisible by 32 GroupNorm groups");
    c = nb_unet_config_reference();
    c.attention_res[1] = 12;
    NB_EXPECT_ERR(nb_unet_config_validate(&c), NB_ERR_INVALID_ARG,
                  "attention resolution 12 is not in the pyramid (64,32,16,8)");
    c = nb_unet_config_reference();
    c.image_size = 60;
    NB_EXPECT_ERR(nb_unet_config_validate(&c), NB_ERR_INVALID_ARG, "divisible by 2^3");
    c = nb_unet_config_reference();
    c.num_head_channels = 48;
    NB_EXPECT_ERR(nb_unet_config_validate(&c), NB_ERR_INVALID_ARG, "head channels");
    c = nb_unet_config_reference();
    c.num_res_blocks = 0;
    NB_EXPECT_ERR(nb_unet_config_validate(&c), NB_ERR_INVALID_ARG, "res blocks");
    c = nb_unet_config_reference();
    NB_EXPECT_ERR(nb_unet_config_set(&c, "channel_mult", "1,x"), NB_ERR_INVALID_ARG, "positive integers");
    NB_EXPECT_ERR(nb_unet_config_set(&c, "frob", "1"), NB_ERR_NOT_FOUND, "frob");
    NB_EXPECT_OK(nb_unet_config_set(&c, "attention_resolutions", ""));
    NB_EXPECT(c.n_attn == 0);
    NB_EXPECT_OK(nb_unet_config_validate(&c));
}

static nb_unet *make(nb_tape **t, nb_unet_config c, uint64_t seed) {
    nb_unet *u = NULL;
    if (nb_tape_create(t) || nb_unet_create(&c, *t, &u) || nb_unet_init(u, seed)) return NULL;
    return u;
}

static void test_forward_shapes(void) {
    nb_tape *t;
    nb_unet_config c = tiny();
    c.in_channels = 3, c.out_channels = 2, c.conv_resample = 1;
    nb_unet *u = make(&t, c, 1);
    NB_REQUIRE_OK(u ? NB_OK : NB_ERR_INTERNAL);
    float x[2 * 3 * 64], ts[2] = {3, 900};
    for (int i = 0; i < 2 * 3 * 64; i++) x[i] = (float)sin(i * 0.37);
    nb_tvar xv, y;
    NB_EXPECT_OK(nb_tape_input(t, 4, (int64_t[]){2, 3, 8, 8}, x, 0, &xv));
    NB_EXPECT_OK(nb_unet_forward(u, xv, ts, &y));
    int nd;
    int64_t s[4];
    NB_EXPECT_OK(nb_tape_shape(t, y, &nd, s));
    NB_EXPECT(nd == 4 && s[0] == 2 && s[1] == 2 && s[2] == 8 && s[3] == 8);
    double fl;
    NB_EXPECT_OK(nb_unet_last_forward_flops(u, &fl));
    NB_EXPECT(fl > 1e5);
    /* zero-initialised output conv: the initial prediction is exactly 0 */
    float *yd;
    int64_t cnt;
    NB_EXPECT_OK(nb_tape_data(t, y, &yd, &cnt));
    int zero = 1;
    for (int64_t i = 0; i < cnt; i++) zero &= yd[i] == 0.0f;
    NB_EXPECT(zero);
    NB_EXPECT_ERR(nb_tape_input(t, 4, (int64_t[]){2, 1, 8, 8}, x, 0, &xv) ? NB_ERR_INTERNAL
                      : nb_unet_forward(u, xv, ts, &y),
                  NB_ERR_SHAPE, "input must be [N,3,8,8]");
    nb_unet_free(u);
    nb_tape_free(t);
}

/* Randomises every parameter (so no zero-init layer hides a gradient path) and checks a few
 * elements of each parameter's gradient against central differences of the loss. */
static double loss_of(nb_tape *t, nb_unet *u, const float *x, const float *tgt, const float *ts, int with_bwd) {
    nb_tvar xv, tv, y, l;
    float *ld;
    if (nb_tape_reset(t) || nb_tape_zero_grad(t) || nb_tape_input(t, 4, (int64_t[]){2, 1, 8, 8}, x, 0, &xv) ||
        nb_tape_input(t, 4, (int64_t[]){2, 1, 8, 8}, tgt, 0, &tv) || nb_unet_forward(u, xv, ts, &y) ||
        nb_tape_mse(t, y, tv, &l) || (with_bwd && nb_tape_backward(t, l)) || nb_tape_data(t, l, &ld, NULL))
        return NAN;
    return ld[0];
}

static void test_gradients(void) {
    nb_tape *t;
    nb_unet *u = make(&t, tiny(), 2);
    NB_REQUIRE_OK(u ? NB_OK : NB_ERR_INTERNAL);
    float *p, *g;
    int64_t np;
    NB_REQUIRE_OK(nb_tape_params(t, &p, &np));
    NB_REQUIRE_OK(nb_tape_grads(t, &g, &np));
    uint64_t st = 99;
    for (int64_t i = 0; i < np; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        p[i] += (float)((double)(st >> 11) / 9007199254740992.0 - 0.5) * 0.3f;
    }
    float x[128], tgt[128], ts[2] = {10, 700};
    for (int i = 0; i < 128; i++) x[i] = (float)sin(i * 0.7), tgt[i] = (float)cos(i * 0.3);
    NB_REQUIRE_OK(isnan(loss_of(t, u, x, tgt, ts, 1)) ? NB_ERR_INTERNAL : NB_OK);
    float *g0 = malloc(sizeof(float) * (size_t)np);
    memcpy(g0, g, sizeof(float) * (size_t)np);
    const nb_unet_param_name *pn;
    int n;
    NB_REQUIRE_OK(nb_unet_params(u, &pn, &n));
    int checked = 0, bad = 0, nonzero = 0;
    double worst = 0;
    for (int k = 0; k < n; k++) {
        int64_t off, cnt;
        NB_REQUIRE_OK(nb_tape_param_info(t, pn[k].id, &off, &cnt));
        for (int j = 0; j < 2; j++) {
            int64_t i = off + (j == 0 ? 0 : (cnt * 7 / 11));
            float keep = p[i];
            const float h = 1e-2f;
            p[i] = keep + h;
            double lp = loss_of(t, u, x, tgt, ts, 0);
            p[i] = keep - h;
            double lm = loss_of(t, u, x, tgt, ts, 0);
            p[i] = keep;
            double fd = (lp - lm) / (2 * h), err = fabs(fd - g0[i]);
            double tol = 2e-4 + 2e-2 * fabs(fd);
            nonzero += fabs(fd) > 1e-3;
            if (err / tol > worst) worst = err / tol;
            if (err > tol) {
                if (bad++ < 5) fprintf(stderr, "  %s[%lld]: analytic %g, fd %g\n", pn[k].name, (long long)(i - off), g0[i], fd);
            }
            checked++;
        }
    }
    printf("  gradient check: %d elements over %d parameters (%d with |g| > 1e-3), worst err/tol %.3f\n",
           checked, n, nonzero, worst);
    NB_EXPECT(bad == 0);
    NB_EXPECT(nonzero > checked / 2);
    free(g0);
    nb_unet_free(u);
    nb_tape_free(t);
}

static void test_checkpoint_roundtrip(void) {
    char path[] = "/tmp/nabla_unet_ckpt_XXXXXX";
    int fd = mkstemp(path);
    NB_REQUIRE_OK(fd >= 0 ? NB_OK : NB_ERR_IO);
    close(fd);
    nb_tape *t1, *t2, *t3;
    nb_unet_config c = tiny();
    nb_unet *u1 = make(&t1, c, 5), *u2 = make(&t2, c, 6);
    NB_REQUIRE_OK(u1 && u2 ? NB_OK : NB_ERR_INTERNAL);
    float *p1, *p2;
    int64_t n1, n2;
    nb_tape_params(t1, &p1, &n1);
    nb_tape_params(t2, &p2, &n2);
    NB_EXPECT(memcmp(p1, p2, sizeof(float) * (size_t)n1) != 0);
    NB_EXPECT_OK(nb_unet_save(u1, p1, path));
    nb_unet_config rc;
    NB_EXPECT_OK(nb_unet_read_config(path, &rc));
    NB_EXPECT(rc.image_size == 8 && rc.n_levels == 2 && rc.channel_mult[1] == 2 && rc.n_attn == 1 &&
              rc.attention_res[0] == 4 && rc.num_groups == 4);
    NB_EXPECT_OK(nb_unet_load(u2, path));
    NB_EXPECT(memcmp(p1, p2, sizeof(float) * (size_t)n1) == 0);
    nb_safetensors *f;
    NB_REQUIRE_OK(nb_safetensors_read(path, &f));
    const char *fmt;
    NB_EXPECT_OK(nb_safetensors_meta(f, "format", &fmt));
    NB_EXPECT(fmt && !strcmp(fmt, "nabla.unet.v1"));
    nb_safetensors_free(f);
    /* a model of another config refuses the file */
    c.model_channels = 16;
    nb_unet *u3 = make(&t3, c, 7);
    NB_REQUIRE_OK(u3 ? NB_OK : NB_ERR_INTERNAL);
    NB_EXPECT_ERR(nb_unet_load(u3, path), NB_ERR_INVALID_ARG, "model_channels is 8 in the file, 16 in the model");
    NB_EXPECT_ERR(nb_unet_load(u3, "/nonexistent/x.safetensors"), NB_ERR_IO, "cannot open");
    /* the right config, but a tensor missing / with a wrong shape / one too many */
    const nb_unet_param_name *pn;
    int n;
    NB_REQUIRE_OK(nb_unet_params(u1, &pn, &n));
    nb_st_tensor *ts = calloc((size_t)n + 1, sizeof *ts);
    for (int i = 0; i < n; i++) {
        int64_t off, cnt;
        nb_tape_param_info(t1, pn[i].id, &off, &cnt);
        ts[i].name = pn[i].name, ts[i].ndim = pn[i].ndim, ts[i].data = p1 + off;
        memcpy(ts[i].shape, pn[i].shape, sizeof pn[i].shape);
    }
    const char *keys[NB_UNET_META_N];
    char vals[NB_UNET_META_N][64];
    const char *vp[NB_UNET_META_N];
    nb_unet_config c1 = tiny();
    nb_unet_config_to_meta(&c1, keys, vals);
    for (int i = 0; i < NB_UNET_META_N; i++) vp[i] = vals[i];
    NB_REQUIRE_OK(nb_safetensors_write(path, n - 1, ts + 1, NB_UNET_META_N, keys, vp));
    NB_EXPECT_ERR(nb_unet_load(u2, path), NB_ERR_NOT_FOUND, "lacks parameter 'time_embed.0.weight'");
    ts[3].shape[0]++;
    ts[3].data = p1; /* enough floats */
    NB_REQUIRE_OK(nb_safetensors_write(path, n, ts, NB_UNET_META_N, keys, vp));
    NB_EXPECT_ERR(nb_unet_load(u2, path), NB_ERR_SHAPE, "tensor 'time_embed.2.bias' has shape [33], the model [32]");
    ts[3].shape[0]--;
    ts[n] = ts[0];
    ts[n].name = "extra";
    NB_REQUIRE_OK(nb_safetensors_write(path, n + 1, ts, NB_UNET_META_N, keys, vp));
    NB_EXPECT_ERR(nb_unet_load(u2, path), NB_ERR_SHAPE, "the model has");
    NB_REQUIRE_OK(nb_safetensors_write(path, n, ts, 0, NULL, NULL));
    NB_EXPECT_ERR(nb_unet_load(u2, path), NB_ERR_INVALID_ARG, "metadata key 'image_size' is missing");
    free(ts);
    nb_unet_free(u1), nb_unet_free(u2), nb_unet_free(u3);
    nb_tape_free(t1), nb_tape_free(t2), nb_tape_free(t3);
    unlink(path);
}

static void test_ddpm_train_and_sample(void) {
    nb_tape *t;
    nb_unet *u = make(&t, tiny(), 3);
    NB_REQUIRE_OK(u ? NB_OK : NB_ERR_INTERNAL);
    nb_ddpm_config dc = nb_ddpm_config_default();
    dc.lr = 3e-3f;
    dc.ema_decay = 0.9f;
    nb_ddpm *d;
    NB_REQUIRE_OK(nb_ddpm_create(u, &dc, &d));
    const double *acp;
    NB_EXPECT_OK(nb_ddpm_alphas_cumprod(d, &acp));
    NB_EXPECT_NEAR(acp[0], 1 - 1e-4, 1e-9);
    NB_EXPECT_NEAR(acp[999], 4.0358e-5, 2e-7); /* guided-diffusion's linear schedule */
    /* a fixed data set of two images: the loss must come down */
    float x0[4 * 64];
    for (int i = 0; i < 4 * 64; i++) x0[i] = ((i / 8 + i % 8) % 2) ? 0.8f : -0.8f;
    double first = 0, last = 0;
    for (int s = 0; s < 60; s++) {
        float l, gn;
        NB_REQUIRE_OK(nb_ddpm_train_step(d, x0, 4, &l, &gn));
        NB_EXPECT(isfinite(l) && isfinite(gn));
        if (s < 10) first += l;
        if (s >= 50) last += l;
    }
    printf("  ddpm: mean loss of steps 0-9 %.4f, of steps 50-59 %.4f\n", first / 10, last / 10);
    NB_EXPECT(last < 0.8 * first);
    float *ema;
    NB_EXPECT_OK(nb_ddpm_ema_params(d, &ema));
    NB_EXPECT_OK(nb_ddpm_use_ema(d));
    float a[20 * 64], b[20 * 64];
    NB_EXPECT_OK(nb_ddpm_sample(d, NB_SAMPLER_DDIM, 10, 20, 42, a)); /* two chunks */
    NB_EXPECT_OK(nb_ddpm_sample(d, NB_SAMPLER_DDIM, 10, 20, 42, b));
    NB_EXPECT(memcmp(a, b, sizeof a) == 0);
    int finite = 1;
    for (int i = 0; i < 20 * 64; i++) finite &= isfinite(a[i]) && fabsf(a[i]) <= 1.0001f;
    NB_EXPECT(finite);
    NB_EXPECT_OK(nb_ddpm_sample(d, NB_SAMPLER_DDPM, 8, 3, 1, b));
    for (int i = 0; i < 3 * 64; i++) finite &= isfinite(b[i]);
    NB_EXPECT(finite);
    NB_EXPECT_ERR(nb_ddpm_sample(d, NB_SAMPLER_DDIM, 0, 1, 1, b), NB_ERR_INVALID_ARG, "steps 0 not in 1..1000");
    NB_EXPECT_ERR(nb_ddpm_sample(d, NB_SAMPLER_DDIM, 1001, 1, 1, b), NB_ERR_INVALID_ARG, "1..1000");
    nb_ddpm_free(d);
    dc.lr = -1;
    NB_EXPECT_ERR(nb_ddpm_create(u, &dc, &d), NB_ERR_INVALID_ARG, "lr > 0");
    nb_unet_free(u);
    nb_tape_free(t);
}

/* After the first steps, a DDPM training step allocates nothing through nabla's allocator (the
 * tape's arena is sized; the trainer's host scratch is reused). */
static int64_t n_allocs;
static nb_allocator prev_alloc;
static void *count_alloc(size_t size, size_t align, void *user) {
    (void)user;
    n_allocs++;
    return prev_alloc.alloc(size, align, prev_alloc.user);
}
static void count_free(void *p, size_t size, void *user) {
    (void)user;
    prev_alloc.free(p, size, prev_alloc.user);
}

static void test_ddpm_steady_state_no_alloc(void) {
    nb_tape *t;
    nb_unet *u = make(&t, tiny(), 4);
    NB_REQUIRE_OK(u ? NB_OK : NB_ERR_INTERNAL);
    nb_ddpm_config dc = nb_ddpm_config_default();
    nb_ddpm *d;
    NB_REQUIRE_OK(nb_ddpm_create(u, &dc, &d));
    float x0[2 * 64];
    for (int i = 0; i < 2 * 64; i++) x0[i] = (float)cos(i);
    for (int s = 0; s < 2; s++) NB_REQUIRE_OK(nb_ddpm_train_step(d, x0, 2, NULL, NULL));
    prev_alloc = *nb_get_allocator();
    nb_allocator counting = {count_alloc, count_free, NULL};
    nb_set_allocator(&counting);
    n_allocs = 0;
    for (int s = 0; s < 3; s++) NB_EXPECT_OK(nb_ddpm_train_step(d, x0, 2, NULL, NULL));
    nb_set_allocator(&prev_alloc);
    NB_EXPECT(n_allocs == 0);
    nb_ddpm_free(d);
    nb_unet_free(u);
    nb_tape_free(t);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_reference_param_count, test_bad_configs, test_forward_shapes,
                 test_gradients, test_checkpoint_roundtrip, test_ddpm_train_and_sample,
                 test_ddpm_steady_state_no_alloc);
}

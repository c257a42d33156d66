/* UNet (nn_unet.h) on the tape, CPU: the reference config's parameter count and names, config
 * validation, forward shapes, gradients against finite differences on a tiny UNet, checkpoint
 * round trip and mismatches, DDPM training lowering the loss, both samplers, statistics and
 * profiles. CUDA (skipped without a GPU): forward / backward of a tiny UNet against the CPU at
 * each precision, DDPM training steps and samplers against the CPU, a CUDA checkpoint loading on
 * the CPU. */
#include <unistd.h>

#include "nb_test.h"
#include "nb_test_alloc.h"
#include "nabla/nn_unet.h"
#include "nabla/alloc.h"
#include "nabla/safetensors.h"
#include "models/ddpm_internal.h"

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
    NB_EXPECT_OK(nb_tape_shape(t, v, &nd, s)); /* on the tape: a 1x1 conv2d weight */
    NB_EXPECT(nd == 4 && s[0] == 576 && s[1] == 192 && s[2] == 1 && s[3] == 1);
    NB_EXPECT_OK(nb_tape_param_find(t, "output_blocks.0.0.in_layers.2.weight", &v)); /* 256+256 -> 256 */
    NB_EXPECT_OK(nb_tape_shape(t, v, &nd, s));
    NB_EXPECT(nd == 4 && s[0] == 256 && s[1] == 512);
    NB_EXPECT_ERR(nb_tape_param_find(t, "input_blocks.3.0.op.weight", &v), NB_ERR_NOT_FOUND, "op.weight");
    const nb_unet_param_name *pn;
    int npn;
    NB_EXPECT_OK(nb_unet_params(u, &pn, &npn));
    NB_EXPECT(npn > 200 && !strcmp(pn[0].name, "time_embed.0.weight"));
    int found = 0;
    for (int i = 0; i < npn; i++) /* checkpoints keep the state_dict's conv1d shape */
        if (!strcmp(pn[i].name, "input_blocks.7.1.qkv.weight"))
            found = pn[i].ndim == 3 && pn[i].shape[0] == 576 && pn[i].shape[1] == 192 && pn[i].shape[2] == 1;
    NB_EXPECT(found);
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

/* The same on any device: reads the loss back. */
static double loss_of_dev(nb_tape *t, nb_unet *u, const float *x, const float *tgt, const float *ts, float *loss) {
    nb_tvar xv, tv, y, l;
    if (nb_tape_reset(t) || nb_tape_zero_grad(t) || nb_tape_input(t, 4, (int64_t[]){2, 1, 8, 8}, x, 0, &xv) ||
        nb_tape_input(t, 4, (int64_t[]){2, 1, 8, 8}, tgt, 0, &tv) || nb_unet_forward(u, xv, ts, &y) ||
        nb_tape_mse(t, y, tv, &l) || nb_tape_backward(t, l) || nb_tape_read(t, l, loss, 1))
        return NAN;
    return *loss;
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
    nb_test_count_allocs_begin();
    for (int s = 0; s < 3; s++) NB_EXPECT_OK(nb_ddpm_train_step(d, x0, 2, NULL, NULL));
    nb_test_count_allocs_end();
    NB_EXPECT(nb_test_allocs == 0);
    nb_ddpm_free(d);
    nb_unet_free(u);
    nb_tape_free(t);
}


/* Window statistics, the forward / phase profile and read_ema on the CPU. */
static void test_ddpm_stats_profile(void) {
    nb_tape *t;
    nb_unet *u = make(&t, tiny(), 8);
    NB_REQUIRE_OK(u ? NB_OK : NB_ERR_INTERNAL);
    nb_ddpm_config dc = nb_ddpm_config_default();
    dc.lr = 1e-3f;
    nb_ddpm *d;
    NB_REQUIRE_OK(nb_ddpm_create(u, &dc, &d));
    float x0[3 * 64];
    for (int i = 0; i < 3 * 64; i++) x0[i] = (float)sin(i * 0.21);
    double sum = 0;
    NB_REQUIRE_OK(nb_ddpm_set_profile(d, 1));
    for (int s = 0; s < 4; s++) {
        float l;
        NB_REQUIRE_OK(nb_ddpm_train_step(d, x0, 3, &l, NULL));
        sum += l;
    }
    nb_ddpm_stats st;
    NB_EXPECT_OK(nb_ddpm_read_stats(d, &st));
    NB_EXPECT(st.steps == 4);
    NB_EXPECT_NEAR(st.mean_loss, sum / 4, 1e-5);
    NB_EXPECT(st.last_grad_norm > 0 && st.max_grad_norm >= st.last_grad_norm);
    NB_EXPECT_OK(nb_ddpm_read_stats(d, &st)); /* the window starts afresh */
    NB_EXPECT(st.steps == 0 && st.mean_loss == 0);
    nb_ddpm_profile pr;
    NB_EXPECT_OK(nb_ddpm_get_profile(d, &pr));
    NB_EXPECT(pr.steps == 4 && pr.forward_ms > 0 && pr.backward_ms > 0);
    nb_unet_prof_entry e[NB_UNET_PROF_KINDS];
    int n = 0, conv_calls = 0;
    NB_EXPECT_OK(nb_unet_get_profile(u, e, &n));
    for (int i = 0; i < n; i++)
        if (!strcmp(e[i].op, "conv3x3")) conv_calls = (int)e[i].calls;
    NB_EXPECT(n > 5 && conv_calls > 0 && conv_calls % 4 == 0);
    NB_EXPECT_OK(nb_ddpm_set_profile(d, 0));
    float *h = malloc(sizeof(float) * 100000);
    int64_t np;
    float *p;
    NB_EXPECT_OK(nb_tape_params(t, &p, &np));
    NB_EXPECT_ERR(nb_ddpm_read_ema(d, h, np + 1), NB_ERR_SHAPE, "does not match");
    NB_EXPECT_OK(nb_ddpm_read_ema(d, h, np));
    free(h);
    nb_ddpm_free(d);
    nb_unet_free(u);
    nb_tape_free(t);
}

/* ---- CUDA against the CPU reference ---------------------------------------------------------- */

static nb_device *open_gpu(void) {
    nb_device *g = NULL;
    return nb_device_open("cuda", &g) == NB_OK ? g : NULL;
}

/* A tiny model on dev (NULL: the CPU) with every parameter randomised the same way. */
static nb_unet *make_on(nb_device *dev, nb_tape **t, nb_tape_precision prec) {
    nb_unet *u = NULL;
    nb_unet_config c = tiny();
    if (nb_tape_create_on(dev, t) || nb_tape_set_precision(*t, dev ? prec : NB_TAPE_FP32) ||
        nb_unet_create(&c, *t, &u) || nb_unet_init(u, 11))
        return NULL;
    float *p;
    int64_t np;
    if (nb_tape_params(*t, &p, &np)) return NULL;
    float *h = malloc(sizeof(float) * (size_t)np);
    if (!h || nb_tape_read_params(*t, h, np)) return NULL;
    uint64_t st = 7;
    for (int64_t i = 0; i < np; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        h[i] += (float)((double)(st >> 11) / 9007199254740992.0 - 0.5) * 0.3f;
    }
    nb_status s = nb_tape_write_params(*t, h, np);
    free(h);
    return s ? NULL : u;
}

static double max_rel(const float *a, const float *b, int64_t n, double *scale) {
    double m = 0, sc = 0;
    for (int64_t i = 0; i < n; i++) sc = fmax(sc, fabs(b[i]));
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(a[i] - b[i]));
    if (scale) *scale = sc;
    return sc > 0 ? m / sc : m;
}

/* Output, loss and every parameter gradient of a forward + backward, CUDA vs CPU. */
static void test_cuda_forward_backward(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device");
    float x[128], tgt[128], ts[2] = {10, 700};
    for (int i = 0; i < 128; i++) x[i] = (float)sin(i * 0.7), tgt[i] = (float)cos(i * 0.3);
    nb_tape *tc, *tg;
    nb_unet *uc = make_on(NULL, &tc, NB_TAPE_FP32);
    NB_REQUIRE_OK(uc ? NB_OK : NB_ERR_INTERNAL);
    float out_c[128], out_g[128], loss_g = 0;
    double loss_c = loss_of(tc, uc, x, tgt, ts, 1);
    NB_REQUIRE_OK(isnan(loss_c) ? NB_ERR_INTERNAL : NB_OK);
    float *gc;
    int64_t np;
    NB_REQUIRE_OK(nb_tape_grads(tc, &gc, &np));
    { /* the output alone (a forward; the gradients stay) */
        nb_tvar xv, yc;
        NB_REQUIRE_OK(nb_tape_reset(tc));
        NB_REQUIRE_OK(nb_tape_input(tc, 4, (int64_t[]){2, 1, 8, 8}, x, 0, &xv));
        NB_REQUIRE_OK(nb_unet_forward(uc, xv, ts, &yc));
        NB_REQUIRE_OK(nb_tape_read(tc, yc, out_c, 128));
    }
    const char *pn[3] = {"fp32", "tf32", "bf16"};
    const double tol_out[3] = {2e-5, 1e-2, 5e-2}, tol_g[3] = {1e-4, 2e-2, 1e-1};
    float *gg = malloc(sizeof(float) * (size_t)np);
    for (int prec = 0; prec < 3; prec++) {
        nb_unet *ug = make_on(gpu, &tg, (nb_tape_precision)prec);
        NB_REQUIRE_OK(ug ? NB_OK : NB_ERR_INTERNAL);
        double lg = loss_of_dev(tg, ug, x, tgt, ts, &loss_g);
        NB_REQUIRE_OK(isnan(lg) ? NB_ERR_INTERNAL : NB_OK);
        NB_REQUIRE_OK(nb_tape_read_grads(tg, gg, np));
        double gs, gerr = max_rel(gg, gc, np, &gs);
        nb_tvar xv, yg;
        NB_REQUIRE_OK(nb_tape_reset(tg));
        NB_REQUIRE_OK(nb_tape_input(tg, 4, (int64_t[]){2, 1, 8, 8}, x, 0, &xv));
        NB_REQUIRE_OK(nb_unet_forward(ug, xv, ts, &yg));
        NB_REQUIRE_OK(nb_tape_read(tg, yg, out_g, 128));
        double os, oerr = max_rel(out_g, out_c, 128, &os);
        printf("  cuda %s: loss %.7f vs cpu %.7f; output max err %.3g (of max |y| %.3g); grads max err %.3g "
               "(of max |g| %.3g)\n", pn[prec], loss_g, loss_c, oerr * os, os, gerr * gs, gs);
        NB_EXPECT(oerr <= tol_out[prec]);
        NB_EXPECT(gerr <= tol_g[prec]);
        NB_EXPECT_NEAR(loss_g, loss_c, tol_out[prec] * fabs(loss_c) + 1e-6);
        nb_unet_free(ug);
        nb_tape_free(tg);
    }
    free(gg);
    nb_unet_free(uc);
    nb_tape_free(tc);
    nb_device_close(gpu);
}

/* Training steps (same data, same t and noise by construction) and both samplers: CUDA vs CPU;
 * a CUDA checkpoint loads on the CPU with the same values. */
static void test_cuda_ddpm(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device");
    nb_tape *tc, *tg;
    nb_unet *uc = make_on(NULL, &tc, NB_TAPE_FP32), *ug = make_on(gpu, &tg, NB_TAPE_FP32);
    NB_REQUIRE_OK(uc && ug ? NB_OK : NB_ERR_INTERNAL);
    nb_ddpm_config dc = nb_ddpm_config_default();
    dc.lr = 1e-3f;
    dc.ema_decay = 0.9f;
    dc.grad_clip = 0.5f; /* below the norm: clipping is exercised */
    dc.seed = 5;
    nb_ddpm *dcpu, *dgpu;
    NB_REQUIRE_OK(nb_ddpm_create(uc, &dc, &dcpu));
    NB_REQUIRE_OK(nb_ddpm_create(ug, &dc, &dgpu));
    float x0[4 * 64];
    for (int i = 0; i < 4 * 64; i++) x0[i] = ((i / 8 + i % 8) % 2) ? 0.8f : -0.8f;
    for (int s = 0; s < 3; s++) {
        float lc, lg, nc, ng;
        NB_REQUIRE_OK(nb_ddpm_train_step(dcpu, x0, 4, &lc, &nc));
        NB_REQUIRE_OK(nb_ddpm_train_step(dgpu, x0, 4, &lg, &ng));
        printf("  ddpm step %d: loss cuda %.6f cpu %.6f, grad norm cuda %.5f cpu %.5f\n", s, lg, lc, ng, nc);
        /* step 0 from equal parameters; later steps after Adam updates that may differ where a
         * gradient element is ~0 (Adam's first step moves by lr * sign(g)) */
        NB_EXPECT_NEAR(lg, lc, (s ? 5e-3 : 1e-3) * fabs(lc) + 1e-6);
        NB_EXPECT_NEAR(ng, nc, (s ? 1e-2 : 2e-3) * fabs(nc) + 1e-6);
    }
    for (int s = 0; s < 5; s++) NB_REQUIRE_OK(nb_ddpm_train_step(dgpu, x0, 4, NULL, NULL)); /* no waits */
    for (int s = 0; s < 5; s++) NB_REQUIRE_OK(nb_ddpm_train_step(dcpu, x0, 4, NULL, NULL));
    nb_ddpm_stats sc, sg;
    NB_EXPECT_OK(nb_ddpm_read_stats(dcpu, &sc));
    NB_EXPECT_OK(nb_ddpm_read_stats(dgpu, &sg));
    NB_EXPECT(sc.steps == 8 && sg.steps == 8);
    NB_EXPECT_NEAR(sg.mean_loss, sc.mean_loss, 5e-3 * sc.mean_loss);
    int64_t np;
    float *p;
    NB_REQUIRE_OK(nb_tape_params(tc, &p, &np));
    float *ec = malloc(sizeof(float) * (size_t)np), *eg = malloc(sizeof(float) * (size_t)np);
    NB_REQUIRE_OK(nb_ddpm_read_ema(dcpu, ec, np));
    NB_REQUIRE_OK(nb_ddpm_read_ema(dgpu, eg, np));
    double sc_, perr = max_rel(eg, ec, np, &sc_), mean = 0;
    for (int64_t i = 0; i < np; i++) mean += fabs(eg[i] - ec[i]) / (double)np;
    printf("  ddpm after 8 steps: EMA parameters max err %.3g, mean %.3g (of max %.3g)\n", perr * sc_, mean, sc_);
    NB_EXPECT(perr * sc_ < 2e-2 && mean < 1e-4); /* max: a few sign flips of Adam's lr-sized steps */
    /* samplers: the CPU's EMA parameters on both, same seed, same noise */
    NB_REQUIRE_OK(nb_ddpm_use_ema(dcpu));
    NB_REQUIRE_OK(nb_tape_write_params(tg, ec, np));
    float a[20 * 64], b[20 * 64];
    for (int smp = 0; smp < 2; smp++) {
        NB_REQUIRE_OK(nb_ddpm_sample(dcpu, (nb_sampler)smp, 6, 20, 3, a));
        NB_REQUIRE_OK(nb_ddpm_sample(dgpu, (nb_sampler)smp, 6, 20, 3, b));
        double ss, serr = max_rel(b, a, 20 * 64, &ss);
        printf("  %s 6 steps, 20 images: cuda vs cpu max err %.3g\n", smp ? "ddim" : "ddpm", serr * ss);
        NB_EXPECT(serr * ss < 1e-2);
    }
    /* a checkpoint written from the GPU loads on the CPU */
    char path[] = "/tmp/nabla_unet_cuda_XXXXXX";
    int fd = mkstemp(path);
    NB_REQUIRE_OK(fd >= 0 ? NB_OK : NB_ERR_IO);
    close(fd);
    NB_EXPECT_OK(nb_ddpm_save(dgpu, path));
    nb_tape *t3;
    nb_unet_config c = tiny();
    nb_unet *u3 = NULL;
    NB_REQUIRE_OK(nb_tape_create(&t3));
    NB_REQUIRE_OK(nb_unet_create(&c, t3, &u3));
    NB_EXPECT_OK(nb_unet_load(u3, path));
    float *p3;
    NB_REQUIRE_OK(nb_tape_params(t3, &p3, &np));
    NB_EXPECT(memcmp(p3, eg, sizeof(float) * (size_t)np) == 0);
    /* and back onto the GPU */
    NB_EXPECT_OK(nb_unet_load(ug, path));
    NB_REQUIRE_OK(nb_tape_read_params(tg, ec, np));
    NB_EXPECT(memcmp(ec, eg, sizeof(float) * (size_t)np) == 0);
    unlink(path);
    free(ec), free(eg);
    nb_unet_free(u3);
    nb_tape_free(t3);
    nb_ddpm_free(dcpu), nb_ddpm_free(dgpu);
    nb_unet_free(uc), nb_unet_free(ug);
    nb_tape_free(tc), nb_tape_free(tg);
    nb_device_close(gpu);
}

/* The DDPM kernels (ddpm_internal.h) on the CPU, and on CUDA against the CPU: q_sample over more
 * than one argument chunk (NB_DDPM_QMAX images), the noise's moments, the norm / clip statistics,
 * the EMA and a DDIM update with the exact noise (which must give back x0). */
static void run_kernels(nb_ddpm_dev *k, float *buf, int64_t n_img, int64_t img, const float *x0,
                        const float *qa, const float *qb, float *host_out /* [4, n_img * img] + 8 */) {
    int64_t m = n_img * img;
    float *x0d = buf, *eps = buf + m, *xt = buf + 2 * m, *st = buf + 3 * m;
    nb_ddpm_put(k, x0d, x0, m);
    float z[NB_DDPM_STATS] = {0}, loss = 0.5f;
    nb_ddpm_put(k, st, z, NB_DDPM_STATS);
    nb_ddpm_put(k, st + NB_DDPM_STATS, &loss, 1);
    NB_EXPECT_OK(nb_ddpm_qsample(k, x0d, eps, xt, img, (int)n_img, 12345u, qa, qb));
    NB_EXPECT_OK(nb_ddpm_sumsq(k, eps, m, st + 1));
    NB_EXPECT_OK(nb_ddpm_clip(k, xt, m, st, 1, 1.0f, st + NB_DDPM_STATS)); /* xt scaled to norm 1 */
    NB_EXPECT_OK(nb_ddpm_ema_update(k, x0d, eps, m, 0.75f));                /* x0d := .75 x0 + .25 eps */
    nb_ddpm_get(k, host_out, eps, m);
    nb_ddpm_get(k, host_out + m, xt, m);
    nb_ddpm_get(k, host_out + 2 * m, x0d, m);
    nb_ddpm_get(k, host_out + 4 * m, st, NB_DDPM_STATS);
    /* DDIM update of x = sa x0 + s1a e with the exact e: x0 comes back (clipped to [-1, 1]) */
    nb_ddpm_update_args a;
    memset(&a, 0, sizeof a);
    a.mode = 0, a.sa = 0.6f, a.s1a = 0.8f, a.sap = 1.0f, a.s1ap = 0.0f;
    float *xh = malloc(sizeof(float) * (size_t)m);
    for (int64_t i = 0; i < m; i++) xh[i] = 0.6f * x0[i] + 0.8f * host_out[i];
    nb_ddpm_put(k, xt, xh, m);
    NB_EXPECT_OK(nb_ddpm_update(k, xt, eps, m, &a));
    nb_ddpm_get(k, host_out + 3 * m, xt, m);
    free(xh);
}

static void test_ddpm_kernels(void) {
    const int64_t n_img = NB_DDPM_QMAX + 44, img = 5, m = n_img * img;
    float *x0 = malloc(sizeof(float) * (size_t)m), qa[NB_DDPM_QMAX + 44], qb[NB_DDPM_QMAX + 44];
    for (int64_t i = 0; i < m; i++) x0[i] = (float)sin(0.37 * (double)i);
    for (int i = 0; i < n_img; i++) qa[i] = (float)cos(i * 0.01), qb[i] = (float)sin(i * 0.01 + 0.1);
    float *cpu_out = malloc(sizeof(float) * (size_t)(4 * m + NB_DDPM_STATS));
    float *buf = malloc(sizeof(float) * (size_t)(3 * m + NB_DDPM_STATS + 1));
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_ddpm_dev k;
    NB_REQUIRE_OK(nb_ddpm_dev_init(&k, cpu));
    run_kernels(&k, buf, n_img, img, x0, qa, qb, cpu_out);
    const float *eps = cpu_out, *xt = cpu_out + m, *ema = cpu_out + 2 * m, *x0b = cpu_out + 3 * m,
                *st = cpu_out + 4 * m;
    double mean = 0, var = 0, sq = 0, worst = 0, worst_ema = 0, worst_x0 = 0;
    for (int64_t i = 0; i < m; i++) mean += eps[i] / (double)m, sq += (double)eps[i] * eps[i];
    for (int64_t i = 0; i < m; i++) var += (eps[i] - mean) * (eps[i] - mean) / (double)m;
    double norm = sqrt(sq), scale = 1.0 / (norm + 1e-6);
    for (int64_t i = 0; i < m; i++) {
        int64_t s = i / img;
        double want = (qa[s] * x0[i] + qb[s] * eps[i]) * (norm > 1 ? scale : 1);
        worst = fmax(worst, fabs(xt[i] - want));
        worst_ema = fmax(worst_ema, fabs(ema[i] - (0.75 * x0[i] + 0.25 * eps[i])));
        worst_x0 = fmax(worst_x0, fabs(x0b[i] - fmin(fmax(x0[i], -1.0), 1.0)));
    }
    /* the second argument chunk draws fresh numbers (counter base), not a repeat of the first */
    int repeats = 0;
    for (int64_t i = NB_DDPM_QMAX * img; i < m; i++) repeats += eps[i] == eps[i - NB_DDPM_QMAX * img];
    printf("  ddpm kernels (cpu): noise mean %.3f var %.3f over %lld; x_t err %.2g, ema err %.2g, ddim x0 err %.2g\n",
           mean, var, (long long)m, worst, worst_ema, worst_x0);
    NB_EXPECT(fabs(mean) < 0.1 && fabs(var - 1) < 0.15 && repeats == 0);
    NB_EXPECT(worst < 1e-6 && worst_ema < 1e-6 && worst_x0 < 1e-5);
    NB_EXPECT_NEAR(st[NB_DDPM_LAST_NORM], norm, 1e-4 * norm);
    NB_EXPECT(st[NB_DDPM_COUNT] == 1 && st[NB_DDPM_LOSS_SUM] == 0.5f && st[NB_DDPM_BAD] == 0 && st[0] == 0);
    nb_ddpm_dev_release(&k);
    nb_device *gpu = open_gpu();
    if (gpu) {
        nb_ddpm_dev kg;
        nb_buffer *b;
        float *gpu_out = malloc(sizeof(float) * (size_t)(4 * m + NB_DDPM_STATS));
        NB_REQUIRE_OK(nb_ddpm_dev_init(&kg, gpu));
        NB_REQUIRE_OK(nb_buffer_alloc(gpu, sizeof(float) * (size_t)(3 * m + NB_DDPM_STATS + 1), &b));
        run_kernels(&kg, nb_buffer_ptr(b), n_img, img, x0, qa, qb, gpu_out);
        double de = 0, dx = 0;
        for (int64_t i = 0; i < m; i++) de = fmax(de, fabs(gpu_out[i] - eps[i]));
        for (int64_t i = 0; i < 4 * m; i++) dx = fmax(dx, fabs(gpu_out[i] - cpu_out[i]));
        printf("  ddpm kernels: cuda vs cpu noise max err %.2g, all outputs %.2g, norm %.6f vs %.6f\n", de, dx,
               gpu_out[4 * m + NB_DDPM_LAST_NORM], st[NB_DDPM_LAST_NORM]);
        NB_EXPECT(de < 1e-5 && dx < 1e-4);
        NB_EXPECT_NEAR(gpu_out[4 * m + NB_DDPM_LAST_NORM], st[NB_DDPM_LAST_NORM], 1e-4 * norm);
        nb_buffer_release(b);
        free(gpu_out);
        nb_device_close(gpu);
    }
    nb_device_close(cpu);
    free(x0), free(cpu_out), free(buf);
}

/* A BF16 tape (bf16 activation storage): DDPM training steps and both samplers run, stay finite
 * and follow an FP32 CUDA run of the same seed within bf16 tolerances. */
static void test_cuda_ddpm_bf16(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device");
    nb_tape *tf, *tb;
    nb_unet *uf = make_on(gpu, &tf, NB_TAPE_FP32), *ub = make_on(gpu, &tb, NB_TAPE_BF16);
    NB_REQUIRE_OK(uf && ub ? NB_OK : NB_ERR_INTERNAL);
    nb_ddpm_config dc = nb_ddpm_config_default();
    dc.lr = 1e-3f;
    dc.seed = 9;
    nb_ddpm *df, *db;
    NB_REQUIRE_OK(nb_ddpm_create(uf, &dc, &df));
    NB_REQUIRE_OK(nb_ddpm_create(ub, &dc, &db));
    float x0[4 * 64];
    for (int i = 0; i < 4 * 64; i++) x0[i] = ((i / 8 + i % 8) % 2) ? 0.8f : -0.8f;
    for (int s = 0; s < 4; s++) {
        float lf, lb, nf, nbn;
        NB_REQUIRE_OK(nb_ddpm_train_step(df, x0, 4, &lf, &nf));
        NB_REQUIRE_OK(nb_ddpm_train_step(db, x0, 4, &lb, &nbn));
        printf("  ddpm step %d: loss bf16 %.6f fp32 %.6f, grad norm bf16 %.5f fp32 %.5f\n", s, lb, lf, nbn, nf);
        NB_EXPECT(isfinite(lb) && isfinite(nbn));
        NB_EXPECT_NEAR(lb, lf, 3e-2 * fabs(lf) + 1e-4);
        NB_EXPECT_NEAR(nbn, nf, 5e-2 * fabs(nf) + 1e-4);
    }
    float a[8 * 64], b[8 * 64];
    for (int smp = 0; smp < 2; smp++) {
        NB_REQUIRE_OK(nb_ddpm_sample(df, (nb_sampler)smp, 4, 8, 3, a));
        NB_REQUIRE_OK(nb_ddpm_sample(db, (nb_sampler)smp, 4, 8, 3, b));
        double ss, serr = max_rel(b, a, 8 * 64, &ss), mean = 0, m2 = 0;
        int finite = 1;
        for (int i = 0; i < 8 * 64; i++) {
            finite &= isfinite(b[i]) != 0;
            mean += fabs((double)b[i] - a[i]) / (8 * 64);
            m2 += (double)b[i] * b[i] / (8 * 64);
        }
        /* DDIM's first step from t = 999 scales the noise prediction's error by
         * sqrt(1 - abar) / sqrt(abar) ~ 156 (then clipped): a few pixels differ a lot, the mean
         * little */
        printf("  %s 4 steps, 8 images: bf16 vs fp32 max err %.3g, mean abs err %.3g (rms of the "
               "samples %.3g)\n", smp ? "ddim" : "ddpm", serr * ss, mean, sqrt(m2));
        NB_EXPECT(finite);
        NB_EXPECT(sqrt(m2) > 0.05);
        NB_EXPECT(mean <= 0.1);
        NB_EXPECT(smp || serr * ss <= 0.3);
    }
    nb_ddpm_free(df), nb_ddpm_free(db);
    nb_unet_free(uf), nb_unet_free(ub);
    nb_tape_free(tf), nb_tape_free(tb);
    nb_device_close(gpu);
}

/* CUDA graphs (nb_ddpm_set_cuda_graphs): the same model trained with and without them gives the
 * same losses and parameters; the state goes 1 (warming) -> 2 (replaying); a sample (which resets
 * the tape) and a new batch size make the next steps record and capture afresh. */
static void test_cuda_ddpm_graphs(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device");
    for (int prec = NB_TAPE_FP32; prec <= NB_TAPE_BF16; prec += NB_TAPE_BF16 - NB_TAPE_FP32) {
        nb_tape *ta, *tb;
        nb_unet *ua = make_on(gpu, &ta, (nb_tape_precision)prec), *ub = make_on(gpu, &tb, (nb_tape_precision)prec);
        NB_REQUIRE_OK(ua && ub ? NB_OK : NB_ERR_INTERNAL);
        nb_ddpm_config dc = nb_ddpm_config_default();
        dc.lr = 1e-3f;
        dc.seed = 4;
        nb_ddpm *da, *db;
        NB_REQUIRE_OK(nb_ddpm_create(ua, &dc, &da));
        NB_REQUIRE_OK(nb_ddpm_create(ub, &dc, &db));
        NB_REQUIRE_OK(nb_ddpm_set_cuda_graphs(da, 1));
        NB_REQUIRE_OK(nb_ddpm_set_cuda_graphs(db, 0));
        NB_EXPECT(nb_ddpm_graph_state(da) == 1 && nb_ddpm_graph_state(db) == 0);
        float x0[6 * 64];
        for (int i = 0; i < 6 * 64; i++) x0[i] = ((i / 8 + i % 8 + i / 64) % 3) ? 0.7f : -0.9f;
        double worst = 0;
        int states[12];
        for (int s = 0; s < 12; s++) {
            int n = s < 7 ? 4 : 6; /* a new batch size from step 7 */
            if (s == 5) { /* sampling resets the tape: the next steps record again */
                float smp[2 * 64];
                NB_REQUIRE_OK(nb_ddpm_sample(da, NB_SAMPLER_DDIM, 2, 2, 1, smp));
                NB_REQUIRE_OK(nb_ddpm_sample(db, NB_SAMPLER_DDIM, 2, 2, 1, smp));
            }
            float la, lb, na, nbn;
            NB_REQUIRE_OK(nb_ddpm_train_step(da, x0, n, &la, &na));
            NB_REQUIRE_OK(nb_ddpm_train_step(db, x0, n, &lb, &nbn));
            states[s] = nb_ddpm_graph_state(da);
            worst = fmax(worst, fabs(la - lb) / fabs(lb));
            NB_EXPECT_NEAR(la, lb, 2e-3 * fabs(lb) + 1e-6);
            NB_EXPECT_NEAR(na, nbn, 5e-3 * fabs(nbn) + 1e-6);
        }
        printf("  %s: graph states", prec == NB_TAPE_BF16 ? "bf16" : "fp32");
        for (int s = 0; s < 12; s++) printf(" %d", states[s]);
        printf("; losses with vs without graphs max rel diff %.3g\n", worst);
        /* steps 0, 1 record; 2 captures (then replays); 5 follows a sample; 7 a new batch */
        int want[12] = {1, 1, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2};
        for (int s = 0; s < 12; s++) NB_EXPECT(states[s] == want[s]);
        int64_t np;
        float *p;
        NB_REQUIRE_OK(nb_tape_params(ta, &p, &np));
        float *pa = malloc(sizeof(float) * (size_t)np), *pb = malloc(sizeof(float) * (size_t)np);
        NB_REQUIRE_OK(pa && pb ? NB_OK : NB_ERR_OUT_OF_MEMORY);
        NB_REQUIRE_OK(nb_tape_read_params(ta, pa, np));
        NB_REQUIRE_OK(nb_tape_read_params(tb, pb, np));
        double sc, err = max_rel(pa, pb, np, &sc);
        printf("  parameters after 12 steps: max err %.3g of max %.3g\n", err * sc, sc);
        NB_EXPECT(err * sc < 2e-2);
        free(pa), free(pb);
        /* a device buffer freed since the capture (scratch that grew, anything): record afresh */
        nb_buffer *tmp;
        NB_REQUIRE_OK(nb_buffer_alloc(gpu, 1 << 20, &tmp));
        nb_buffer_release(tmp);
        NB_EXPECT(nb_ddpm_graph_captures(da) == 2); /* steps 2 and 9 */
        NB_EXPECT_OK(nb_ddpm_train_step(da, x0, 6, NULL, NULL));
        NB_EXPECT(nb_ddpm_graph_state(da) == 2 && nb_ddpm_graph_captures(da) == 3);
        NB_EXPECT_OK(nb_ddpm_set_cuda_graphs(da, 0));
        NB_EXPECT(nb_ddpm_graph_state(da) == 0);
        NB_EXPECT_OK(nb_ddpm_train_step(da, x0, 4, NULL, NULL));
        nb_ddpm_free(da), nb_ddpm_free(db);
        nb_unet_free(ua), nb_unet_free(ub);
        nb_tape_free(ta), nb_tape_free(tb);
    }
    nb_device_close(gpu);
}

/* The graph switch on the CPU: accepted, nothing to capture (state 0). */
static void test_ddpm_graphs_cpu(void) {
    nb_tape *t;
    nb_unet *u = make_on(NULL, &t, NB_TAPE_FP32);
    NB_REQUIRE_OK(u ? NB_OK : NB_ERR_INTERNAL);
    nb_ddpm_config dc = nb_ddpm_config_default();
    nb_ddpm *d;
    NB_REQUIRE_OK(nb_ddpm_create(u, &dc, &d));
    NB_EXPECT_OK(nb_ddpm_set_cuda_graphs(d, 1));
    NB_EXPECT(nb_ddpm_graph_state(d) == 0);
    NB_EXPECT_ERR(nb_ddpm_set_cuda_graphs(NULL, 1), NB_ERR_INVALID_ARG, "NULL");
    NB_EXPECT(nb_ddpm_graph_state(NULL) == 0 && nb_ddpm_graph_captures(NULL) == 0);
    nb_ddpm_free(d);
    nb_unet_free(u);
    nb_tape_free(t);
}

/* nb_ddpm_sample_grid: 5 RGB samples of 2x2 in a 3-column grid at scale 2 -> [8, 12, 3]; every
 * output pixel is its sample's value mapped from [-1, 1] to [0, 1] and clamped; the missing sixth
 * cell is black; bad arguments name themselves. */
static void test_sample_grid(void) {
    enum { N = 5, C = 3, S = 2, K = 2 };
    float x[N * C * S * S];
    for (int i = 0; i < N * C * S * S; i++) x[i] = -1.5f + 0.1f * (float)i; /* some out of [-1, 1] */
    nb_tensor *g = NULL;
    NB_REQUIRE_OK(nb_ddpm_sample_grid(x, N, C, S, K, &g));
    const int64_t *sh = nb_tensor_shape(g);
    NB_EXPECT(nb_tensor_ndim(g) == 3 && sh[0] == 2 * S * K && sh[1] == 3 * S * K && sh[2] == C);
    NB_EXPECT(nb_device_get_kind(nb_tensor_device(g)) == NB_DEVICE_CPU);
    const float *p = nb_tensor_data(g);
    int bad = 0;
    for (int gy = 0; gy < 2 * S * K; gy++)
        for (int gx = 0; gx < 3 * S * K; gx++)
            for (int c = 0; c < C; c++) {
                int i = gy / (S * K) * 3 + gx / (S * K), y = gy % (S * K) / K, xx = gx % (S * K) / K;
                float want = 0;
                if (i < N) {
                    want = (x[((i * C + c) * S + y) * S + xx] + 1) * 0.5f;
                    want = want < 0 ? 0 : want > 1 ? 1 : want;
                }
                bad += p[((size_t)gy * 3 * S * K + gx) * C + c] != want;
            }
    NB_EXPECT(bad == 0);
    nb_tensor_free(g);
    NB_EXPECT_ERR(nb_ddpm_sample_grid(x, N, 2, S, K, &g), NB_ERR_INVALID_ARG, "2 channels");
    NB_EXPECT_ERR(nb_ddpm_sample_grid(x, 0, C, S, K, &g), NB_ERR_INVALID_ARG, "0 samples");
    NB_EXPECT_ERR(nb_ddpm_sample_grid(x, N, C, S, 17, &g), NB_ERR_INVALID_ARG, "scale 17");
    NB_EXPECT_ERR(nb_ddpm_sample_grid(NULL, N, C, S, K, &g), NB_ERR_INVALID_ARG, "x");
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_reference_param_count, test_bad_configs, test_forward_shapes,
                 test_gradients, test_checkpoint_roundtrip, test_ddpm_train_and_sample,
                 test_ddpm_steady_state_no_alloc, test_ddpm_stats_profile, test_cuda_forward_backward,
                 test_cuda_ddpm, test_cuda_ddpm_bf16, test_ddpm_kernels, test_cuda_ddpm_graphs,
                 test_ddpm_graphs_cpu, test_sample_grid);
}

/* Tape autograd on CUDA (nn_tape.h, src/graph/tape_cuda_basic.c, tape_cuda_norm.c): every op with a
 * CUDA row against the CPU tape (forward values, input and parameter gradients) on odd shapes
 * (scalar paths) and aligned ones (float4 paths), aliasing inputs, gradient accumulation, the
 * read / write API, no allocation in steady state, and errors. Skips without a GPU. */
#include "nb_test.h"
#include "nabla/device.h"
#include "nabla/nn_tape.h"

static nb_device *g_dev;

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform [-1, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static float *rand_buf(int64_t n, float scale) {
    float *a = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) a[i] = scale * frand();
    return a;
}
static int64_t numel(int nd, const int64_t *s) {
    int64_t c = 1;
    for (int i = 0; i < nd; i++) c *= s[i];
    return c;
}

static int open_cuda(void) {
    if (g_dev) return 1;
    if (nb_device_open("cuda", &g_dev) != NB_OK) {
        g_dev = NULL;
        return 0;
    }
    return 1;
}
#define NEED_CUDA()                                                                                \
    do {                                                                                           \
        if (!open_cuda()) NB_SKIP("no CUDA device");                                               \
    } while (0)

/* ---- one op (or a small chain) on a CPU tape and a CUDA tape, compared ---------------------- */

enum { OP_SILU, OP_ADD, OP_ADD_SELF, OP_ADDC, OP_CONCAT, OP_CONCAT_SELF, OP_UP, OP_POOL, OP_MSE,
       OP_RESHAPE, OP_TRANSPOSE, OP_SLICE, OP_GN, OP_GNS, OP_CHAIN };

typedef struct tcase {
    const char *name;
    int op;
    int nin;
    int nd[2];
    int64_t shape[2][4];
    int ia, ib;   /* groups / slice start, count */
    int affine;   /* 0: none, 1: gamma and beta, 2: gamma only */
    float scale;  /* input scale */
} tcase;

typedef struct result {
    float loss;
    float *y, *gx[2], *gp;
    int64_t ny, nx[2], np;
} result;

static void free_result(result *r) {
    free(r->y);
    free(r->gx[0]);
    free(r->gx[1]);
    free(r->gp);
}

static nb_status build(nb_tape *t, const tcase *c, const nb_tvar *in, const nb_tvar *p, nb_tvar *y) {
    switch (c->op) {
    case OP_SILU: return nb_tape_silu(t, in[0], y);
    case OP_ADD: return nb_tape_add(t, in[0], in[1], y);
    case OP_ADD_SELF: return nb_tape_add(t, in[0], in[0], y);
    case OP_ADDC: return nb_tape_add_channel(t, in[0], in[1], y);
    case OP_CONCAT: return nb_tape_concat(t, in[0], in[1], y);
    case OP_CONCAT_SELF: return nb_tape_concat(t, in[0], in[0], y);
    case OP_UP: return nb_tape_upsample2x(t, in[0], y);
    case OP_POOL: return nb_tape_avgpool2x(t, in[0], y);
    case OP_MSE: return nb_tape_mse(t, in[0], in[1], y);
    case OP_RESHAPE: {
        int64_t n = numel(c->nd[0], c->shape[0]);
        return nb_tape_reshape(t, in[0], 2, (int64_t[]){c->shape[0][0], n / c->shape[0][0]}, y);
    }
    case OP_TRANSPOSE: return nb_tape_transpose(t, in[0], y);
    case OP_SLICE: return nb_tape_slice_channels(t, in[0], c->ia, c->ib, y);
    case OP_GN: return nb_tape_group_norm(t, in[0], c->ia, p[0], p[1], 1e-5f, y);
    case OP_GNS: return nb_tape_group_norm_silu(t, in[0], c->ia, p[0], p[1], 1e-5f, y);
    case OP_CHAIN: {
        /* x feeds three ops (gradient stored by the first contribution, added by the others) */
        nb_tvar a, b, cc, d, e, f, g, h;
        nb_status s;
        int64_t C = c->shape[0][1];
        if ((s = nb_tape_silu(t, in[0], &a)) ||
            (s = nb_tape_group_norm_silu(t, in[0], c->ia, p[0], p[1], 1e-5f, &b)) ||
            (s = nb_tape_add(t, a, b, &cc)) || (s = nb_tape_concat(t, cc, in[0], &d)) ||
            (s = nb_tape_slice_channels(t, d, 1, C, &e)) || (s = nb_tape_upsample2x(t, e, &f)) ||
            (s = nb_tape_avgpool2x(t, f, &g)) || (s = nb_tape_transpose(t, g, &h)))
            return s;
        int64_t n = numel(c->nd[0], c->shape[0]);
        return nb_tape_reshape(t, h, 2, (int64_t[]){c->shape[0][0], n / c->shape[0][0]}, y);
    }
    default: return nb_error(NB_ERR_INTERNAL, "bad test op");
    }
}

/* Runs c on dev (NULL = CPU): y = op(inputs), loss = mse(y, target) (or y itself for MSE). */
static nb_status run_case(const tcase *c, nb_device *dev, float *const *xs, const float *target,
                          const float *params, int steps, result *r) {
    memset(r, 0, sizeof *r);
    nb_tape *t;
    nb_status s = nb_tape_create_on(dev, &t);
    if (s) return s;
    nb_tvar p[2] = {NB_TVAR_NONE, NB_TVAR_NONE}, in[2], y, loss;
    int64_t C = c->shape[0][1];
    if (c->affine && (s = nb_tape_param(t, "gamma", 1, &C, &p[0]))) goto done;
    if (c->affine == 1 && (s = nb_tape_param(t, "beta", 1, &C, &p[1]))) goto done;
    nb_tape_params(t, &(float *){0}, &r->np);
    if (r->np && (s = nb_tape_write_params(t, params, r->np))) goto done;
    for (int step = 0; step < steps; step++) {
        if ((s = nb_tape_reset(t))) goto done;
        for (int i = 0; i < c->nin; i++)
            if ((s = nb_tape_input(t, c->nd[i], c->shape[i], xs[i], 1, &in[i]))) goto done;
        if ((s = build(t, c, in, p, &y))) goto done;
        if (c->op == OP_MSE) {
            loss = y;
        } else {
            int nd;
            int64_t sh[4];
            nb_tvar tg;
            nb_tape_shape(t, y, &nd, sh);
            if ((s = nb_tape_input(t, nd, sh, target, 0, &tg)) || (s = nb_tape_mse(t, y, tg, &loss)))
                goto done;
        }
        if ((s = nb_tape_backward(t, loss))) goto done;
    }
    int nd;
    int64_t sh[4];
    nb_tape_shape(t, y, &nd, sh);
    r->ny = numel(nd, sh);
    r->y = malloc(sizeof(float) * (size_t)r->ny);
    if ((s = nb_tape_read(t, y, r->y, r->ny)) || (s = nb_tape_read(t, loss, &r->loss, 1))) goto done;
    for (int i = 0; i < c->nin; i++) {
        r->nx[i] = numel(c->nd[i], c->shape[i]);
        r->gx[i] = malloc(sizeof(float) * (size_t)r->nx[i]);
        if ((s = nb_tape_read_grad(t, in[i], r->gx[i], r->nx[i]))) goto done;
    }
    r->gp = malloc(sizeof(float) * (size_t)(r->np ? r->np : 1));
    if (r->np) s = nb_tape_read_grads(t, r->gp, r->np);
done:
    nb_tape_free(t);
    return s;
}

/* max |a - b| <= rtol * max|a| + atol; prints the worst element otherwise */
static int close_arrays(const char *what, const char *part, const float *a, const float *b,
                        int64_t n, double rtol) {
    double m = 0, e = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        m = fmax(m, fabs(a[i]));
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > e || d != d) e = d, at = i;
    }
    int ok = e <= rtol * m + 1e-6;
    if (!ok)
        fprintf(stderr, "  %s: %s[%lld]: cpu %.7g cuda %.7g (max |cpu| %.4g)\n", what, part,
                (long long)at, a[at], b[at], m);
    return ok;
}

static void compare_case(const tcase *c) {
    float *xs[2] = {NULL, NULL};
    for (int i = 0; i < c->nin; i++) xs[i] = rand_buf(numel(c->nd[i], c->shape[i]), c->scale);
    float *target = rand_buf(4 * numel(c->nd[0], c->shape[0]) + 4 * numel(c->nd[1], c->shape[1]), 1);
    float *params = rand_buf(2 * c->shape[0][1], 1.0f);
    for (int64_t i = 0; i < c->shape[0][1]; i++) params[i] += 1.0f; /* gamma around 1 */
    for (int steps = 1; steps <= 2; steps++) { /* 2: gradients accumulate over two backwards */
        result a, b;
        NB_REQUIRE_OK(run_case(c, NULL, xs, target, params, steps, &a));
        nb_status s = run_case(c, g_dev, xs, target, params, steps, &b);
        NB_EXPECT_OK(s);
        if (!s) {
            char what[96];
            snprintf(what, sizeof what, "%s (%d step%s)", c->name, steps, steps > 1 ? "s" : "");
            NB_EXPECT(a.ny == b.ny && a.np == b.np);
            NB_EXPECT(close_arrays(what, "y", a.y, b.y, a.ny, 2e-5));
            NB_EXPECT(close_arrays(what, "loss", &a.loss, &b.loss, 1, 1e-5));
            for (int i = 0; i < c->nin; i++)
                NB_EXPECT(close_arrays(what, i ? "grad x1" : "grad x0", a.gx[i], b.gx[i], a.nx[i], 1e-4));
            if (a.np) NB_EXPECT(close_arrays(what, "param grads", a.gp, b.gp, a.np, 1e-4));
        }
        free_result(&a);
        free_result(&b);
    }
    free(xs[0]);
    free(xs[1]);
    free(target);
    free(params);
}

#define S4(a, b, c, d) {a, b, c, d}

static void test_elementwise_layout(void) {
    NEED_CUDA();
    const tcase cases[] = {
        {"silu odd", OP_SILU, 1, {4}, {S4(3, 6, 5, 7)}, 0, 0, 0, 3.0f},
        {"silu aligned", OP_SILU, 1, {4}, {S4(2, 8, 16, 16)}, 0, 0, 0, 3.0f},
        {"add odd", OP_ADD, 2, {4, 4}, {S4(3, 6, 5, 7), S4(3, 6, 5, 7)}, 0, 0, 0, 1.0f},
        {"add aligned", OP_ADD, 2, {2, 2}, {S4(64, 36, 0, 0), S4(64, 36, 0, 0)}, 0, 0, 0, 1.0f},
        {"add x+x", OP_ADD_SELF, 1, {4}, {S4(3, 6, 5, 7)}, 0, 0, 0, 1.0f},
        {"add_channel odd", OP_ADDC, 2, {4, 2}, {S4(3, 6, 5, 7), S4(3, 6, 0, 0)}, 0, 0, 0, 1.0f},
        {"add_channel aligned", OP_ADDC, 2, {4, 2}, {S4(2, 8, 16, 16), S4(2, 8, 0, 0)}, 0, 0, 0, 1.0f},
        {"concat odd", OP_CONCAT, 2, {4, 4}, {S4(3, 2, 5, 7), S4(3, 5, 5, 7)}, 0, 0, 0, 1.0f},
        {"concat aligned", OP_CONCAT, 2, {4, 4}, {S4(2, 4, 8, 8), S4(2, 8, 8, 8)}, 0, 0, 0, 1.0f},
        {"concat x,x", OP_CONCAT_SELF, 1, {4}, {S4(3, 3, 5, 7)}, 0, 0, 0, 1.0f},
        {"upsample2x", OP_UP, 1, {4}, {S4(3, 6, 5, 7)}, 0, 0, 0, 1.0f},
        {"avgpool2x", OP_POOL, 1, {4}, {S4(3, 6, 6, 8)}, 0, 0, 0, 1.0f},
        {"mse odd", OP_MSE, 2, {4, 4}, {S4(3, 6, 5, 7), S4(3, 6, 5, 7)}, 0, 0, 0, 1.0f},
        {"mse large", OP_MSE, 2, {4, 4}, {S4(8, 64, 32, 32), S4(8, 64, 32, 32)}, 0, 0, 0, 1.0f},
        {"reshape", OP_RESHAPE, 1, {4}, {S4(3, 6, 5, 7)}, 0, 0, 0, 1.0f},
        {"transpose odd", OP_TRANSPOSE, 1, {4}, {S4(3, 6, 5, 7)}, 0, 0, 0, 1.0f},
        {"transpose tiles", OP_TRANSPOSE, 1, {3}, {S4(3, 70, 45, 0)}, 0, 0, 0, 1.0f},
        {"slice odd", OP_SLICE, 1, {4}, {S4(3, 6, 5, 7)}, 1, 3, 0, 1.0f},
        {"slice aligned", OP_SLICE, 1, {4}, {S4(2, 8, 4, 4)}, 4, 4, 0, 1.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) compare_case(&cases[i]);
}

static void test_group_norm(void) {
    NEED_CUDA();
    const tcase cases[] = {
        {"gn odd", OP_GN, 1, {4}, {S4(3, 6, 5, 7)}, 3, 0, 0, 2.0f},
        {"gn odd affine", OP_GN, 1, {4}, {S4(3, 6, 5, 7)}, 3, 0, 1, 2.0f},
        {"gn gamma only", OP_GN, 1, {4}, {S4(3, 6, 5, 7)}, 2, 0, 2, 2.0f},
        {"gn [N,C]", OP_GN, 1, {2}, {S4(5, 12, 0, 0)}, 4, 0, 1, 2.0f},
        {"gn S%4, not %128", OP_GN, 1, {4}, {S4(2, 16, 8, 8)}, 4, 0, 1, 2.0f},
        {"gn unet 32x32", OP_GN, 1, {4}, {S4(2, 64, 32, 32)}, 32, 0, 1, 2.0f},
        {"gn tiles", OP_GN, 1, {4}, {S4(2, 4, 128, 96)}, 2, 0, 1, 2.0f},
        {"gn+silu odd", OP_GNS, 1, {4}, {S4(3, 6, 5, 7)}, 3, 0, 1, 2.0f},
        {"gn+silu no affine", OP_GNS, 1, {4}, {S4(3, 6, 5, 7)}, 3, 0, 0, 2.0f},
        {"gn+silu unet 8x8", OP_GNS, 1, {4}, {S4(2, 256, 8, 8)}, 32, 0, 1, 2.0f},
        {"gn+silu unet 32x32", OP_GNS, 1, {4}, {S4(2, 128, 32, 32)}, 32, 0, 1, 2.0f},
        {"gn+silu 4 chunks", OP_GNS, 1, {4}, {S4(1, 64, 64, 64)}, 32, 0, 1, 2.0f},
        {"gn 4 chunks, scalar", OP_GN, 1, {4}, {S4(2, 5, 35, 35)}, 1, 0, 1, 2.0f},
        {"gn+silu tiles", OP_GNS, 1, {4}, {S4(1, 6, 96, 96)}, 1, 0, 1, 2.0f},
        /* forward R 8 in one tile, backward R 4 in two tiles (the second partial) */
        {"gn bwd tiles", OP_GN, 1, {4}, {S4(2, 8, 48, 48)}, 2, 0, 1, 2.0f},
        {"gn+silu bwd tiles", OP_GNS, 1, {4}, {S4(2, 20, 32, 32)}, 2, 0, 1, 2.0f},
        {"chain odd", OP_CHAIN, 1, {4}, {S4(3, 6, 5, 7)}, 3, 0, 1, 2.0f},
        {"chain aligned", OP_CHAIN, 1, {4}, {S4(2, 64, 16, 16)}, 32, 0, 1, 2.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) compare_case(&cases[i]);
}

/* ---- reshape views of parameters and activations (CUDA: shared data and gradient) ----------- */

/* loss = mse(add(reshape(add(silu(reshape(p)), reshape(reshape(p)))), p), tgt), several views of
 * one parameter and of an activation; fills the loss, the parameter gradients and y */
static nb_status views_run(nb_device *dev, const float *pinit, const float *tgt, float *loss,
                           float *gp, float *y) {
    nb_tape *t;
    nb_status s = nb_tape_create_on(dev, &t);
    if (s) return s;
    nb_tvar p, r, r2, a, b, c, d, e, tg, l;
    if ((s = nb_tape_param(t, "p", 2, (int64_t[]){3, 4}, &p)) ||
        (s = nb_tape_write_params(t, pinit, 12)))
        goto done;
    for (int step = 0; step < 2; step++) { /* twice: gradients accumulate in the parameter */
        if ((s = nb_tape_reset(t)) || (s = nb_tape_reshape(t, p, 1, (int64_t[]){12}, &r)) ||
            (s = nb_tape_reshape(t, p, 2, (int64_t[]){2, 6}, &r2)) || (s = nb_tape_silu(t, r, &a)) ||
            (s = nb_tape_reshape(t, r2, 1, (int64_t[]){12}, &b)) || (s = nb_tape_add(t, a, b, &c)) ||
            (s = nb_tape_reshape(t, c, 2, (int64_t[]){3, 4}, &d)) || (s = nb_tape_add(t, d, p, &e)) ||
            (s = nb_tape_input(t, 2, (int64_t[]){3, 4}, tgt, 0, &tg)) ||
            (s = nb_tape_mse(t, e, tg, &l)) || (s = nb_tape_backward(t, l)))
            goto done;
    }
    if ((s = nb_tape_read(t, l, loss, 1)) || (s = nb_tape_read_grads(t, gp, 12)) ||
        (s = nb_tape_read(t, d, y, 12)))
        goto done;
done:
    nb_tape_free(t);
    return s;
}

static void test_reshape_views(void) {
    NEED_CUDA();
    float *pinit = rand_buf(12, 2.0f), *tgt = rand_buf(12, 1.0f);
    float la, lb, ga[12], gb[12], ya[12], yb[12];
    NB_REQUIRE_OK(views_run(NULL, pinit, tgt, &la, ga, ya));
    NB_REQUIRE_OK(views_run(g_dev, pinit, tgt, &lb, gb, yb));
    NB_EXPECT(close_arrays("views", "loss", &la, &lb, 1, 1e-5));
    NB_EXPECT(close_arrays("views", "y", ya, yb, 12, 1e-5));
    NB_EXPECT(close_arrays("views", "param grads", ga, gb, 12, 1e-4));
    free(pinit);
    free(tgt);
}

/* ---- timestep embedding, read / write API ---------------------------------------------------- */

static void test_timestep_embedding(void) {
    NEED_CUDA();
    /* 5 timesteps: a kernel with them in its parameter block; 600: built on the host, uploaded */
    const int64_t ns[2] = {5, 600};
    const int dims[2] = {32, 6};
    for (int k = 0; k < 2; k++) {
        int64_t n = ns[k], cnt = n * dims[k];
        float *ts = malloc(sizeof(float) * (size_t)n), *a = malloc(sizeof(float) * (size_t)cnt),
              *b = malloc(sizeof(float) * (size_t)cnt);
        for (int64_t i = 0; i < n; i++) ts[i] = (float)((i * 37) % 1000);
        nb_tape *tc, *tg;
        nb_tvar ya, yb;
        NB_REQUIRE_OK(nb_tape_create(&tc));
        NB_REQUIRE_OK(nb_tape_create_on(g_dev, &tg));
        NB_REQUIRE_OK(nb_tape_timestep_embedding(tc, n, ts, dims[k], 10000.0f, &ya));
        NB_REQUIRE_OK(nb_tape_timestep_embedding(tg, n, ts, dims[k], 10000.0f, &yb));
        NB_EXPECT_OK(nb_tape_read(tc, ya, a, cnt));
        NB_EXPECT_OK(nb_tape_read(tg, yb, b, cnt));
        /* double math on both sides; the GPU's sin / cos may differ in the last bit of a float */
        NB_EXPECT(close_arrays(k ? "embedding n=600" : "embedding n=5", "y", a, b, cnt, 3e-7));
        nb_tape_free(tc);
        nb_tape_free(tg);
        free(ts);
        free(a);
        free(b);
    }
}

static void test_api(void) {
    NEED_CUDA();
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create_on(g_dev, &t));
    NB_EXPECT(nb_tape_device(t) == g_dev);
    NB_EXPECT_OK(nb_tape_set_precision(t, NB_TAPE_TF32));
    NB_EXPECT(nb_tape_get_precision(t) == NB_TAPE_TF32);
    NB_EXPECT_ERR(nb_tape_set_precision(t, (nb_tape_precision)3), NB_ERR_INVALID_ARG, "precision 3");
    /* parameter growth past the first capacity copies the earlier ones on the device */
    nb_tvar p1, p2, p3;
    NB_REQUIRE_OK(nb_tape_param(t, "p1", 1, (int64_t[]){1000}, &p1));
    NB_REQUIRE_OK(nb_tape_param_init_uniform(t, p1, 0.5f, 3));
    NB_REQUIRE_OK(nb_tape_param(t, "p2", 2, (int64_t[]){50, 60}, &p2));
    NB_REQUIRE_OK(nb_tape_param(t, "p3", 1, (int64_t[]){7}, &p3));
    int64_t np;
    float *dp;
    NB_EXPECT_OK(nb_tape_params(t, &dp, &np));
    NB_EXPECT(np == 4007);
    float *h = malloc(sizeof(float) * 4007), *h2 = malloc(sizeof(float) * 4007);
    NB_EXPECT_OK(nb_tape_read_params(t, h, np));
    /* the same numbers as a CPU tape's init */
    nb_tape *tc;
    nb_tvar q1;
    NB_REQUIRE_OK(nb_tape_create(&tc));
    NB_REQUIRE_OK(nb_tape_param(tc, "p1", 1, (int64_t[]){1000}, &q1));
    NB_REQUIRE_OK(nb_tape_param_init_uniform(tc, q1, 0.5f, 3));
    float *cp;
    NB_EXPECT_OK(nb_tape_params(tc, &cp, NULL));
    NB_EXPECT(memcmp(h, cp, 1000 * sizeof(float)) == 0);
    for (int i = 1000; i < 4007; i++) NB_EXPECT(h[i] == 0.0f);
    nb_tape_free(tc);
    for (int i = 0; i < 4007; i++) h[i] = (float)i;
    NB_EXPECT_OK(nb_tape_write_params(t, h, np));
    NB_EXPECT_OK(nb_tape_read_params(t, h2, np));
    NB_EXPECT(memcmp(h, h2, 4007 * sizeof(float)) == 0);
    NB_EXPECT_ERR(nb_tape_write_params(t, h, np - 1), NB_ERR_SHAPE, "count 4006 does not match");
    NB_EXPECT_OK(nb_tape_read_grads(t, h2, np));
    NB_EXPECT(h2[0] == 0.0f && h2[4006] == 0.0f);
    /* values: device pointers; reads copy */
    nb_tvar x, y;
    float xd[6] = {-2, -1, 0, 1, 2, 3}, yd[6];
    NB_REQUIRE_OK(nb_tape_input(t, 2, (int64_t[]){2, 3}, xd, 1, &x));
    NB_REQUIRE_OK(nb_tape_silu(t, x, &y));
    float *dptr;
    NB_EXPECT_OK(nb_tape_data(t, y, &dptr, NULL));
    NB_EXPECT(dptr != NULL);
    NB_EXPECT_ERR(nb_tape_read(t, y, yd, 5), NB_ERR_SHAPE, "count 5 does not match the 6 floats");
    NB_EXPECT_OK(nb_tape_read(t, y, yd, 6));
    for (int i = 0; i < 6; i++) NB_EXPECT_NEAR(yd[i], xd[i] / (1.0f + expf(-xd[i])), 1e-6);
    NB_EXPECT_OK(nb_tape_read_grad(t, x, yd, 6)); /* not reached yet: zeros */
    NB_EXPECT(yd[0] == 0.0f && yd[5] == 0.0f);
    /* a parameter as the loss itself: the seed adds into the parameter gradient buffer */
    nb_tvar tgt, l1;
    float z[7] = {0};
    NB_REQUIRE_OK(nb_tape_input(t, 1, (int64_t[]){7}, z, 0, &tgt));
    NB_REQUIRE_OK(nb_tape_mse(t, p3, tgt, &l1));
    NB_REQUIRE_OK(nb_tape_backward(t, l1));
    NB_REQUIRE_OK(nb_tape_backward(t, l1));
    float g3[7];
    int64_t off;
    NB_EXPECT_OK(nb_tape_param_info(t, p3, &off, NULL));
    NB_EXPECT_OK(nb_tape_read_grads(t, h2, np));
    memcpy(g3, h2 + off, sizeof g3);
    for (int i = 0; i < 7; i++) NB_EXPECT_NEAR(g3[i], 2 * 2.0f * (float)(off + i) / 7.0f, 1e-3);
    NB_EXPECT_OK(nb_tape_zero_grad(t));
    NB_EXPECT_OK(nb_tape_read_grads(t, h2, np));
    NB_EXPECT(h2[off] == 0.0f);
    free(h);
    free(h2);
    nb_tape_free(t);
}

/* ---- steady state: no host or device allocation after the second step ----------------------- */

static void test_steady_state(void) {
    NEED_CUDA();
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create_on(g_dev, &t));
    nb_tvar gm, bt;
    NB_REQUIRE_OK(nb_tape_param(t, "gamma", 1, (int64_t[]){16}, &gm));
    NB_REQUIRE_OK(nb_tape_param(t, "beta", 1, (int64_t[]){16}, &bt));
    NB_REQUIRE_OK(nb_tape_param_init_uniform(t, gm, 1.0f, 1));
    int64_t sh[4] = {4, 16, 32, 32}, n = 4 * 16 * 32 * 32;
    float *x = rand_buf(n, 1.0f), *tg = rand_buf(n / 4, 1.0f), ts[4] = {1, 2, 3, 4};
    nb_tape_stats st2 = {0}, st;
    nb_mem_stats m2 = {0}, m;
    for (int step = 0; step < 5; step++) {
        nb_tvar xv, a, b, c, d, e, emb, tv, loss;
        NB_REQUIRE_OK(nb_tape_reset(t));
        NB_REQUIRE_OK(nb_tape_zero_grad(t));
        NB_REQUIRE_OK(nb_tape_input(t, 4, sh, x, 1, &xv));
        NB_REQUIRE_OK(nb_tape_group_norm_silu(t, xv, 4, gm, bt, 1e-5f, &a));
        NB_REQUIRE_OK(nb_tape_timestep_embedding(t, 4, ts, 16, 10000.0f, &emb));
        NB_REQUIRE_OK(nb_tape_add_channel(t, a, emb, &b));
        NB_REQUIRE_OK(nb_tape_avgpool2x(t, b, &c));
        NB_REQUIRE_OK(nb_tape_upsample2x(t, c, &d));
        NB_REQUIRE_OK(nb_tape_add(t, d, b, &e));
        NB_REQUIRE_OK(nb_tape_group_norm(t, e, 2, gm, NB_TVAR_NONE, 1e-5f, &d));
        NB_REQUIRE_OK(nb_tape_avgpool2x(t, d, &e));
        NB_REQUIRE_OK(nb_tape_input(t, 4, (int64_t[]){4, 16, 16, 16}, tg, 0, &tv));
        NB_REQUIRE_OK(nb_tape_mse(t, e, tv, &loss));
        NB_REQUIRE_OK(nb_tape_backward(t, loss));
        NB_REQUIRE_OK(nb_tape_get_stats(t, &st));
        NB_REQUIRE_OK(nb_device_mem_stats(g_dev, &m));
        if (step == 1) st2 = st, m2 = m;
        if (step > 1) {
            NB_EXPECT(st.host_allocs == st2.host_allocs);
            NB_EXPECT(st.device_allocs == st2.device_allocs);
            NB_EXPECT(m.driver_allocs == m2.driver_allocs);
        }
    }
    NB_EXPECT(st.device_allocs >= 3); /* params + grads + the arena */
    free(x);
    free(tg);
    nb_tape_free(t);
}

/* ---- per-op profiler on CUDA: event times per op kind --------------------------------------- */

static void test_profiler(void) {
    NEED_CUDA();
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create_on(g_dev, &t));
    nb_tvar gm, bt;
    NB_REQUIRE_OK(nb_tape_param(t, "gamma", 1, (int64_t[]){16}, &gm));
    NB_REQUIRE_OK(nb_tape_param(t, "beta", 1, (int64_t[]){16}, &bt));
    NB_REQUIRE_OK(nb_tape_param_init_uniform(t, gm, 1.0f, 1));
    int64_t sh[4] = {4, 16, 32, 32}, n = 4 * 16 * 32 * 32;
    float *x = rand_buf(n, 1.0f), *tg = rand_buf(n / 4, 1.0f);
    NB_REQUIRE_OK(nb_tape_set_profiling(t, 1));
    nb_tape_stats st2 = {0}, st;
    for (int step = 0; step < 4; step++) {
        if (step == 1) NB_REQUIRE_OK(nb_tape_profile_reset(t)); /* drop the warm-up step */
        nb_tvar xv, a, b, c, tv, loss;
        NB_REQUIRE_OK(nb_tape_reset(t));
        NB_REQUIRE_OK(nb_tape_zero_grad(t));
        NB_REQUIRE_OK(nb_tape_input(t, 4, sh, x, 1, &xv));
        NB_REQUIRE_OK(nb_tape_group_norm_silu(t, xv, 4, gm, bt, 1e-5f, &a));
        NB_REQUIRE_OK(nb_tape_avgpool2x(t, a, &b));
        NB_REQUIRE_OK(nb_tape_input(t, 4, (int64_t[]){4, 16, 16, 16}, tg, 0, &tv));
        NB_REQUIRE_OK(nb_tape_silu(t, tv, &c)); /* no gradient: forward only */
        NB_REQUIRE_OK(nb_tape_mse(t, b, c, &loss));
        NB_REQUIRE_OK(nb_tape_backward(t, loss));
        NB_REQUIRE_OK(nb_tape_get_stats(t, &st));
        if (step == 1) st2 = st;
        if (step > 1) NB_EXPECT(st.host_allocs == st2.host_allocs &&
                                st.device_allocs == st2.device_allocs);
    }
    nb_tape_profile_row rows[8];
    int nr = 0;
    int64_t passes = 0;
    NB_EXPECT_OK(nb_tape_profile_rows(t, rows, 8, &nr, &passes));
    NB_EXPECT(nr == 4 && passes == 3);
    const char *names[4] = {"group_norm_silu", "avgpool2x", "silu", "mse"};
    int64_t bwd[4] = {3, 3, 0, 3};
    for (int k = 0; k < 4; k++) {
        const nb_tape_profile_row *r = NULL;
        for (int i = 0; i < nr; i++)
            if (!strcmp(rows[i].name, names[k])) r = &rows[i];
        NB_EXPECT(r != NULL);
        if (!r) continue;
        NB_EXPECT(r->calls[0] == 3 && r->calls[1] == bwd[k]);
        NB_EXPECT(r->ms[0] > 0 && r->host_ms[0] > 0);
        NB_EXPECT(bwd[k] ? r->ms[1] > 0 : r->ms[1] == 0);
    }
    char rep[4096];
    NB_EXPECT_OK(nb_tape_profile_report(t, rep, sizeof rep));
    NB_EXPECT(strstr(rep, "CUDA event") && strstr(rep, "group_norm_silu"));
    fprintf(stderr, "%s", rep);
    NB_EXPECT_OK(nb_tape_set_profiling(t, 0));
    free(x);
    free(tg);
    nb_tape_free(t);
}

/* ---- errors ---------------------------------------------------------------------------------- */

/* Ops whose CUDA rows live in other files may still be missing: then the error names the op. */
static void test_missing_rows(void) {
    NEED_CUDA();
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create_on(g_dev, &t));
    nb_tvar w, wc, x, xi, q, y;
    NB_REQUIRE_OK(nb_tape_param(t, "w", 2, (int64_t[]){4, 3}, &w));
    NB_REQUIRE_OK(nb_tape_param(t, "wc", 4, (int64_t[]){4, 3, 3, 3}, &wc));
    float d[512] = {0};
    NB_REQUIRE_OK(nb_tape_input(t, 2, (int64_t[]){2, 3}, d, 1, &x));
    NB_REQUIRE_OK(nb_tape_input(t, 4, (int64_t[]){1, 3, 4, 4}, d, 1, &xi));
    NB_REQUIRE_OK(nb_tape_input(t, 4, (int64_t[]){1, 2, 4, 8}, d, 1, &q));
    nb_status s = nb_tape_linear(t, x, w, NB_TVAR_NONE, &y);
    if (s) NB_EXPECT_ERR(s, NB_ERR_UNSUPPORTED, "op 'linear' has no CUDA forward path");
    s = nb_tape_conv2d(t, xi, wc, NB_TVAR_NONE, 1, 1, &y);
    if (s) NB_EXPECT_ERR(s, NB_ERR_UNSUPPORTED, "op 'conv2d' has no CUDA forward path");
    s = nb_tape_attention(t, q, q, q, &y);
    if (s) NB_EXPECT_ERR(s, NB_ERR_UNSUPPORTED, "op 'attention' has no CUDA forward path");
    nb_tape_free(t);
}

static void test_errors(void) {
    NEED_CUDA();
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create_on(g_dev, &t));
    nb_tvar gm, x, y, tg, loss;
    /* group norm backward with more channels per group than the kernel's shared partials */
    NB_REQUIRE_OK(nb_tape_param(t, "gamma", 1, (int64_t[]){2048}, &gm));
    float *d = calloc(2 * 2048, sizeof(float));
    NB_REQUIRE_OK(nb_tape_input(t, 2, (int64_t[]){2, 2048}, d, 1, &x));
    NB_REQUIRE_OK(nb_tape_group_norm(t, x, 1, gm, NB_TVAR_NONE, 1e-5f, &y));
    NB_REQUIRE_OK(nb_tape_input(t, 2, (int64_t[]){2, 2048}, d, 0, &tg));
    NB_REQUIRE_OK(nb_tape_mse(t, y, tg, &loss));
    NB_EXPECT_ERR(nb_tape_backward(t, loss), NB_ERR_UNSUPPORTED, "2048 channels per group");
    NB_EXPECT_ERR(nb_tape_read(t, y, d, 7), NB_ERR_SHAPE, "count 7");
    NB_EXPECT_ERR(nb_tape_read_grad(t, y, NULL, 4096), NB_ERR_INVALID_ARG, "host pointer is NULL");
    free(d);
    nb_tape_free(t);
}

static void test_close(void) {
    if (!g_dev) NB_SKIP("no CUDA device");
    nb_device_close(g_dev);
    g_dev = NULL;
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_elementwise_layout, test_group_norm, test_reshape_views,
                 test_timestep_embedding,
                 test_api, test_steady_state, test_profiler, test_missing_rows, test_errors, test_close);
}

/* BF16 activation storage on the CUDA tape (op_rows.h: nb_tval.dtype, NB_TOPF_*): every
 * elementwise, layout and normalisation row of src/graph/tape_cuda_basic.c / tape_cuda_norm.c on a
 * CUDA tape in NB_TAPE_BF16 precision against the CPU tape (f32) on the same inputs: forward
 * values, loss, input and parameter gradients within bf16 tolerances (relative to each tensor's
 * max |value|). Inputs enter as f32 (nb_tape_input) and are cast to bf16 (nb_tape_cast) per a
 * mask, so each row sees all-bf16 and mixed f32 / bf16 inputs; the CPU reference gets the same
 * inputs rounded to bf16 on the host. Also checks that the rows' outputs are bf16 and that no
 * cast op was inserted in front of them (their NB_TOPF_IN_BF16 flag), odd shapes (scalar
 * paths), aliasing inputs, gradient accumulation over two backwards, and no allocation in a
 * steady-state loop. Skips without a GPU. */
#include <math.h>

#include "nb_test.h"
#include "nabla/device.h"
#include "nabla/dtype.h"
#include "nabla/nn_tape.h"
#include "graph/op_rows.h"

static nb_device *g_dev;

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static float frand(void) { /* uniform [-1, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static float bfr(float x) { return nb_bf16_to_f32(nb_f32_to_bf16(x)); }
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

enum { OP_SILU, OP_ADD, OP_ADD_SELF, OP_ADDC, OP_CONCAT, OP_CONCAT_SELF, OP_UP, OP_POOL, OP_MSE,
       OP_RESHAPE, OP_TRANSPOSE, OP_SLICE, OP_GN, OP_GNS, OP_CHAIN };

typedef struct tcase {
    const char *name;
    int op;
    int nin;
    int nd[2];
    int64_t shape[2][4];
    int ia, ib;  /* groups / slice start, count */
    int affine;  /* 0: none, 1: gamma and beta, 2: gamma only */
    float scale; /* input scale */
    float tol;   /* 0: the default 2e-2 (relative to the tensor's max |value|) */
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

/* the op under test (on a bf16 tape its output must be bf16, except mse's) */
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
        nb_tvar r;
        nb_status s = nb_tape_reshape(t, in[0], 2, (int64_t[]){c->shape[0][0], n / c->shape[0][0]}, &r);
        return s ? s : nb_tape_silu(t, r, y); /* a row reading the view */
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

static int count_casts(const nb_tape *t) {
    int n = 0;
    for (int32_t i = 0; i < t->n_ops; i++) n += t->ops[i].kind == NB_TOP_CAST;
    return n;
}

/* Runs c on dev (NULL = the CPU tape, f32) or on a bf16-storage CUDA tape: y = op(inputs), loss =
 * mse(y, target) (or y itself for MSE). cast: bit i = input i is cast to bf16 (CUDA). */
static nb_status run_case(const tcase *c, nb_device *dev, int cast, float *const *xs,
                          const float *target, const float *params, int steps, result *r) {
    memset(r, 0, sizeof *r);
    nb_tape *t;
    nb_status s = nb_tape_create_on(dev, &t);
    if (s) return s;
    if (dev && (s = nb_tape_set_precision(t, NB_TAPE_BF16))) goto done;
    nb_tvar p[2] = {NB_TVAR_NONE, NB_TVAR_NONE}, raw[2], in[2], y, loss;
    int64_t C = c->shape[0][1];
    if (c->affine && (s = nb_tape_param(t, "gamma", 1, &C, &p[0]))) goto done;
    if (c->affine == 1 && (s = nb_tape_param(t, "beta", 1, &C, &p[1]))) goto done;
    nb_tape_params(t, &(float *){0}, &r->np);
    if (r->np && (s = nb_tape_write_params(t, params, r->np))) goto done;
    for (int step = 0; step < steps; step++) {
        if ((s = nb_tape_reset(t))) goto done;
        int ncast = 0;
        for (int i = 0; i < c->nin; i++) {
            if ((s = nb_tape_input(t, c->nd[i], c->shape[i], xs[i], 1, &raw[i]))) goto done;
            in[i] = raw[i];
            if (dev && (cast >> i & 1)) {
                if ((s = nb_tape_cast(t, raw[i], NB_BF16, &in[i]))) goto done;
                ncast++;
            }
        }
        if ((s = build(t, c, in, p, &y))) goto done;
        if (dev) {
            /* flagged rows: a bf16 output (mse: f32), no cast inserted before them */
            nb_dtype want = c->op == OP_MSE ? NB_F32 : NB_BF16;
            if (t->vals[y].dtype != want) {
                s = nb_error(NB_ERR_INTERNAL, "%s: output dtype %s, want %s", c->name,
                             nb_dtype_name(t->vals[y].dtype), nb_dtype_name(want));
                goto done;
            }
            if (count_casts(t) != ncast) {
                s = nb_error(NB_ERR_INTERNAL, "%s: %d cast ops recorded, want %d", c->name,
                             count_casts(t), ncast);
                goto done;
            }
        }
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
        if ((s = nb_tape_read_grad(t, raw[i], r->gx[i], r->nx[i]))) goto done;
    }
    r->gp = malloc(sizeof(float) * (size_t)(r->np ? r->np : 1));
    if (r->np) s = nb_tape_read_grads(t, r->gp, r->np);
done:
    nb_tape_free(t);
    return s;
}

/* max |a - b| <= rtol * max|a| + 1e-6; prints the worst element otherwise */
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
        fprintf(stderr, "  %s: %s[%lld]: cpu %.7g cuda bf16 %.7g (max |cpu| %.4g, err %.3g)\n", what,
                part, (long long)at, a[at], b[at], m, e / (m > 0 ? m : 1));
    return ok;
}

static void compare_case(const tcase *c) {
    float *xs[2] = {NULL, NULL};
    for (int i = 0; i < c->nin; i++) {
        int64_t n = numel(c->nd[i], c->shape[i]);
        xs[i] = rand_buf(n, c->scale);
        for (int64_t k = 0; k < n; k++) xs[i][k] = bfr(xs[i][k]); /* exact in bf16 */
    }
    float *target = rand_buf(4 * numel(c->nd[0], c->shape[0]) + 4 * numel(c->nd[1], c->shape[1]), 1);
    float *params = rand_buf(2 * c->shape[0][1], 1.0f);
    for (int64_t i = 0; i < c->shape[0][1]; i++) params[i] += 1.0f; /* gamma around 1 */
    double tol = c->tol > 0 ? c->tol : 2e-2;
    /* the cast masks: every input bf16, and for two inputs each alone (mixed f32 / bf16); the
     * single-input ops also with no cast (an f32 input into a bf16 output) */
    int masks[4], nm = 0;
    masks[nm++] = c->nin == 2 ? 3 : 1;
    if (c->nin == 2) masks[nm++] = 1, masks[nm++] = 2;
    else masks[nm++] = 0;
    for (int m = 0; m < nm; m++) {
        int steps = m == 0 ? 2 : 1; /* 2: gradients accumulate over two backwards */
        result a, b;
        NB_REQUIRE_OK(run_case(c, NULL, 0, xs, target, params, steps, &a));
        nb_status s = run_case(c, g_dev, masks[m], xs, target, params, steps, &b);
        NB_EXPECT_OK(s);
        if (!s) {
            char what[128];
            snprintf(what, sizeof what, "%s (cast mask %d, %d step%s)", c->name, masks[m], steps,
                     steps > 1 ? "s" : "");
            NB_EXPECT(a.ny == b.ny && a.np == b.np);
            NB_EXPECT(close_arrays(what, "y", a.y, b.y, a.ny, 1e-2));
            NB_EXPECT(close_arrays(what, "loss", &a.loss, &b.loss, 1, 1e-2));
            for (int i = 0; i < c->nin; i++)
                NB_EXPECT(close_arrays(what, i ? "grad x1" : "grad x0", a.gx[i], b.gx[i], a.nx[i], tol));
            if (a.np) NB_EXPECT(close_arrays(what, "param grads", a.gp, b.gp, a.np, tol));
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
        {"silu odd", OP_SILU, 1, {4}, {S4(3, 6, 5, 7)}, 0, 0, 0, 3.0f, 0},
        {"silu aligned", OP_SILU, 1, {4}, {S4(2, 8, 16, 16)}, 0, 0, 0, 3.0f, 0},
        {"add odd", OP_ADD, 2, {4, 4}, {S4(3, 6, 5, 7), S4(3, 6, 5, 7)}, 0, 0, 0, 1.0f, 0},
        {"add aligned", OP_ADD, 2, {2, 2}, {S4(64, 36, 0, 0), S4(64, 36, 0, 0)}, 0, 0, 0, 1.0f, 0},
        {"add x+x", OP_ADD_SELF, 1, {4}, {S4(3, 6, 5, 7)}, 0, 0, 0, 1.0f, 0},
        {"add_channel odd", OP_ADDC, 2, {4, 2}, {S4(3, 6, 5, 7), S4(3, 6, 0, 0)}, 0, 0, 0, 1.0f, 0},
        {"add_channel aligned", OP_ADDC, 2, {4, 2}, {S4(2, 8, 16, 16), S4(2, 8, 0, 0)}, 0, 0, 0, 1.0f, 0},
        {"concat odd", OP_CONCAT, 2, {4, 4}, {S4(3, 2, 5, 7), S4(3, 5, 5, 7)}, 0, 0, 0, 1.0f, 0},
        {"concat aligned", OP_CONCAT, 2, {4, 4}, {S4(2, 4, 8, 8), S4(2, 8, 8, 8)}, 0, 0, 0, 1.0f, 0},
        {"concat x,x", OP_CONCAT_SELF, 1, {4}, {S4(3, 3, 5, 7)}, 0, 0, 0, 1.0f, 0},
        {"upsample2x odd", OP_UP, 1, {4}, {S4(3, 6, 5, 7)}, 0, 0, 0, 1.0f, 0},
        {"upsample2x", OP_UP, 1, {4}, {S4(2, 4, 8, 8)}, 0, 0, 0, 1.0f, 0},
        {"avgpool2x", OP_POOL, 1, {4}, {S4(3, 6, 6, 8)}, 0, 0, 0, 1.0f, 0},
        {"avgpool2x 2x2", OP_POOL, 1, {4}, {S4(3, 5, 2, 2)}, 0, 0, 0, 1.0f, 0},
        {"mse odd", OP_MSE, 2, {4, 4}, {S4(3, 6, 5, 7), S4(3, 6, 5, 7)}, 0, 0, 0, 1.0f, 0},
        {"mse large", OP_MSE, 2, {4, 4}, {S4(8, 64, 32, 32), S4(8, 64, 32, 32)}, 0, 0, 0, 1.0f, 0},
        {"reshape", OP_RESHAPE, 1, {4}, {S4(3, 6, 5, 7)}, 0, 0, 0, 1.0f, 0},
        {"transpose odd", OP_TRANSPOSE, 1, {4}, {S4(3, 6, 5, 7)}, 0, 0, 0, 1.0f, 0},
        {"transpose tiles", OP_TRANSPOSE, 1, {3}, {S4(3, 70, 45, 0)}, 0, 0, 0, 1.0f, 0},
        {"slice odd", OP_SLICE, 1, {4}, {S4(3, 6, 5, 7)}, 1, 3, 0, 1.0f, 0},
        {"slice aligned", OP_SLICE, 1, {4}, {S4(2, 8, 4, 4)}, 4, 4, 0, 1.0f, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) compare_case(&cases[i]);
}

static void test_group_norm(void) {
    NEED_CUDA();
    const tcase cases[] = {
        {"gn odd", OP_GN, 1, {4}, {S4(3, 6, 5, 7)}, 3, 0, 0, 2.0f, 0},
        {"gn odd affine", OP_GN, 1, {4}, {S4(3, 6, 5, 7)}, 3, 0, 1, 2.0f, 0},
        {"gn gamma only", OP_GN, 1, {4}, {S4(3, 6, 5, 7)}, 2, 0, 2, 2.0f, 0},
        {"gn [N,C]", OP_GN, 1, {2}, {S4(5, 12, 0, 0)}, 4, 0, 1, 2.0f, 0},
        {"gn S%4, not %128", OP_GN, 1, {4}, {S4(2, 16, 8, 8)}, 4, 0, 1, 2.0f, 0},
        {"gn S 6 (group 4k+2)", OP_GN, 1, {4}, {S4(2, 9, 2, 3)}, 3, 0, 1, 2.0f, 0},
        {"gn unet 32x32", OP_GN, 1, {4}, {S4(2, 64, 32, 32)}, 32, 0, 1, 2.0f, 0},
        {"gn tiles", OP_GN, 1, {4}, {S4(2, 4, 128, 96)}, 2, 0, 1, 2.0f, 0},
        {"gn+silu odd", OP_GNS, 1, {4}, {S4(3, 6, 5, 7)}, 3, 0, 1, 2.0f, 0},
        {"gn+silu no affine", OP_GNS, 1, {4}, {S4(3, 6, 5, 7)}, 3, 0, 0, 2.0f, 0},
        {"gn+silu unet 8x8", OP_GNS, 1, {4}, {S4(2, 256, 8, 8)}, 32, 0, 1, 2.0f, 0},
        {"gn+silu unet 32x32", OP_GNS, 1, {4}, {S4(2, 128, 32, 32)}, 32, 0, 1, 2.0f, 0},
        {"gn+silu 4 chunks", OP_GNS, 1, {4}, {S4(1, 64, 64, 64)}, 32, 0, 1, 2.0f, 0},
        {"gn 4 chunks, scalar", OP_GN, 1, {4}, {S4(2, 5, 35, 35)}, 1, 0, 1, 2.0f, 0},
        {"gn+silu tiles", OP_GNS, 1, {4}, {S4(1, 6, 96, 96)}, 1, 0, 1, 2.0f, 0},
        {"gn bwd tiles", OP_GN, 1, {4}, {S4(2, 8, 48, 48)}, 2, 0, 1, 2.0f, 0},
        {"gn+silu bwd tiles", OP_GNS, 1, {4}, {S4(2, 20, 32, 32)}, 2, 0, 1, 2.0f, 0},
        /* eight rows through bf16 values: roundings compound */
        {"chain odd", OP_CHAIN, 1, {4}, {S4(3, 6, 5, 7)}, 3, 0, 1, 2.0f, 3e-2f},
        {"chain aligned", OP_CHAIN, 1, {4}, {S4(2, 64, 16, 16)}, 32, 0, 1, 2.0f, 3e-2f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) compare_case(&cases[i]);
}

/* add_channel of the timestep embedding (an f32 value without gradient, as produced by
 * nb_tape_timestep_embedding) into a bf16 activation, and of its bf16 cast. (The gradients of
 * f32 and bf16 channel vectors: the add_channel cases of test_elementwise_layout.) */
static void test_add_channel_emb(void) {
    NEED_CUDA();
    for (int cast_c = 0; cast_c < 2; cast_c++) {
        nb_tape *t;
        NB_REQUIRE_OK(nb_tape_create_on(g_dev, &t));
        NB_REQUIRE_OK(nb_tape_set_precision(t, NB_TAPE_BF16));
        int64_t N = 3, C = 8, H = 4, W = 4, n = N * C * H * W;
        float *x = rand_buf(n, 1.0f), ts[3] = {1, 50, 700}, *tg = rand_buf(n, 1.0f);
        for (int64_t i = 0; i < n; i++) x[i] = bfr(x[i]);
        nb_tvar xv, xb, emb, e, y, tv, l;
        NB_REQUIRE_OK(nb_tape_input(t, 4, (int64_t[]){N, C, H, W}, x, 1, &xv));
        NB_REQUIRE_OK(nb_tape_cast(t, xv, NB_BF16, &xb));
        NB_REQUIRE_OK(nb_tape_timestep_embedding(t, N, ts, (int)C, 10000.0f, &emb));
        NB_EXPECT(t->vals[emb].dtype == NB_F32);
        e = emb;
        if (cast_c) NB_REQUIRE_OK(nb_tape_cast(t, emb, NB_BF16, &e));
        NB_REQUIRE_OK(nb_tape_add_channel(t, xb, e, &y));
        NB_EXPECT(t->vals[y].dtype == NB_BF16);
        NB_REQUIRE_OK(nb_tape_input(t, 4, (int64_t[]){N, C, H, W}, tg, 0, &tv));
        NB_REQUIRE_OK(nb_tape_mse(t, y, tv, &l));
        NB_REQUIRE_OK(nb_tape_backward(t, l));
        float *yd = malloc(sizeof(float) * (size_t)n), *gx = malloc(sizeof(float) * (size_t)n);
        float ed[24];
        NB_REQUIRE_OK(nb_tape_read(t, emb, ed, N * C));
        NB_REQUIRE_OK(nb_tape_read(t, y, yd, n));
        NB_REQUIRE_OK(nb_tape_read_grad(t, xv, gx, n));
        double ey = 0, eg = 0, my = 0, mg = 0;
        for (int64_t i = 0; i < n; i++) {
            float ev = cast_c ? bfr(ed[i / (H * W)]) : ed[i / (H * W)];
            float ref = x[i] + ev, g = 2.0f * (bfr(ref) - tg[i]) / (float)n;
            ey = fmax(ey, fabs(yd[i] - ref)), my = fmax(my, fabs(ref));
            eg = fmax(eg, fabs(gx[i] - g)), mg = fmax(mg, fabs(g));
        }
        NB_EXPECT(ey <= 1e-2 * my);
        NB_EXPECT(eg <= 1e-2 * mg);
        nb_tape_free(t);
        free(x);
        free(tg);
        free(yd);
        free(gx);
    }
}

/* No host or device allocation in steady state on a bf16 tape (bf16 values and gradients carve
 * their 2-byte buffers from the arena like f32 ones). */
static void test_steady_state(void) {
    NEED_CUDA();
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create_on(g_dev, &t));
    NB_REQUIRE_OK(nb_tape_set_precision(t, NB_TAPE_BF16));
    nb_tvar gm, bt;
    NB_REQUIRE_OK(nb_tape_param(t, "gamma", 1, (int64_t[]){16}, &gm));
    NB_REQUIRE_OK(nb_tape_param(t, "beta", 1, (int64_t[]){16}, &bt));
    NB_REQUIRE_OK(nb_tape_param_init_uniform(t, gm, 1.0f, 1));
    int64_t sh[4] = {4, 16, 32, 32}, n = 4 * 16 * 32 * 32;
    float *x = rand_buf(n, 1.0f), *tg = rand_buf(2 * n, 1.0f), ts[4] = {1, 2, 3, 4};
    nb_tape_stats st2 = {0}, st;
    nb_mem_stats m2 = {0}, m;
    float l0 = 0;
    for (int step = 0; step < 5; step++) {
        nb_tvar xv, xb, a, b, c, d, e, f, emb, tv, loss;
        NB_REQUIRE_OK(nb_tape_reset(t));
        NB_REQUIRE_OK(nb_tape_zero_grad(t));
        NB_REQUIRE_OK(nb_tape_input(t, 4, sh, x, 1, &xv));
        NB_REQUIRE_OK(nb_tape_cast(t, xv, NB_BF16, &xb));
        NB_REQUIRE_OK(nb_tape_group_norm_silu(t, xb, 4, gm, bt, 1e-5f, &a));
        NB_REQUIRE_OK(nb_tape_timestep_embedding(t, 4, ts, 16, 10000.0f, &emb));
        NB_REQUIRE_OK(nb_tape_add_channel(t, a, emb, &b));
        NB_REQUIRE_OK(nb_tape_avgpool2x(t, b, &c));
        NB_REQUIRE_OK(nb_tape_upsample2x(t, c, &d));
        NB_REQUIRE_OK(nb_tape_add(t, d, b, &e));
        NB_REQUIRE_OK(nb_tape_group_norm(t, e, 2, gm, NB_TVAR_NONE, 1e-5f, &d));
        NB_REQUIRE_OK(nb_tape_concat(t, d, xv, &f));
        NB_REQUIRE_OK(nb_tape_input(t, 4, (int64_t[]){4, 32, 32, 32}, tg, 0, &tv));
        NB_REQUIRE_OK(nb_tape_mse(t, f, tv, &loss));
        NB_REQUIRE_OK(nb_tape_backward(t, loss));
        NB_EXPECT(count_casts(t) == 1);
        float l;
        NB_REQUIRE_OK(nb_tape_read(t, loss, &l, 1));
        if (step == 0) l0 = l;
        NB_EXPECT(l == l0); /* deterministic */
        NB_REQUIRE_OK(nb_tape_get_stats(t, &st));
        NB_REQUIRE_OK(nb_device_mem_stats(g_dev, &m));
        if (step == 1) st2 = st, m2 = m;
        if (step > 1) {
            NB_EXPECT(st.host_allocs == st2.host_allocs);
            NB_EXPECT(st.device_allocs == st2.device_allocs);
            NB_EXPECT(m.driver_allocs == m2.driver_allocs);
        }
    }
    free(x);
    free(tg);
    nb_tape_free(t);
}

/* The f32 paths of the same rows on a bf16-precision tape with bf16 storage switched off are
 * covered by test_nn_tape_cuda (FP32 tapes); here: a TF32 tape keeps every value f32. */
static void test_f32_tapes_stay_f32(void) {
    NEED_CUDA();
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create_on(g_dev, &t));
    NB_REQUIRE_OK(nb_tape_set_precision(t, NB_TAPE_TF32));
    float d[64];
    for (int i = 0; i < 64; i++) d[i] = (float)i / 64.0f;
    nb_tvar x, y, z;
    NB_REQUIRE_OK(nb_tape_input(t, 4, (int64_t[]){1, 4, 4, 4}, d, 1, &x));
    NB_REQUIRE_OK(nb_tape_silu(t, x, &y));
    NB_REQUIRE_OK(nb_tape_group_norm(t, y, 2, NB_TVAR_NONE, NB_TVAR_NONE, 1e-5f, &z));
    NB_EXPECT(t->vals[y].dtype == NB_F32 && t->vals[z].dtype == NB_F32);
    nb_tape_free(t);
}

static void test_close(void) {
    if (!g_dev) NB_SKIP("no CUDA device");
    nb_device_close(g_dev);
    g_dev = NULL;
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_elementwise_layout, test_group_norm, test_add_channel_emb,
                 test_steady_state, test_f32_tapes_stay_f32, test_close);
}

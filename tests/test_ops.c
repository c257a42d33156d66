/* Table-driven test of every op of the tape's op table (src/graph/ops.def), in the manner of
 * ggml's test-backend-ops. A per-op case list gives input and parameter shapes and attributes;
 * test_every_op_has_a_case fails for a row of ops.def without a case, so a new op cannot skip it.
 * Each case builds its op through the public nb_tape_* API (plus nb_tape_cast for the cast op)
 * and checks:
 *   - the op of the case's kind was recorded, with its row's shape rule;
 *   - CPU: the gradient of every input and parameter against central finite differences of the
 *     loss L = mse(y, T) (T a fixed random target: dL/dy = 2 (y - T) / n, a random projection
 *     of the output) or L = y for a scalar op;
 *   - CUDA (skips without a GPU; NB_REQUIRE_CUDA=1 makes that a failure): forward and every
 *     gradient against the CPU tape, in FP32, TF32 and BF16 precision (BF16: bf16 storage;
 *     inputs cast to bf16 first where the row reads bf16, the CPU reference fed the same
 *     rounded values).
 *
 * Tolerances (f32 finite differences): h = 1e-2 on O(1) inputs. L is O(1) and rounds at ~1e-7,
 * so the difference quotient's noise is ~1e-5 of L, and the truncation error h^2/6 f''' is
 * ~2e-5 relative for these smooth ops (measured: <= 1.3e-5 absolute, <= 1e-4 of max|g|); the
 * check is max|fd - g| <= 1e-3 max|g| + 1e-6 per tensor (a wrong factor, a missed term or a
 * dropped accumulation is off by >= 10%). The cast case's forward rounds to bf16: its inputs
 * and h lie on the 1/64 grid that bf16 holds exactly over [-2, 2], so the quotient is exact up
 * to rounding of L; its analytic gradient passes through a bf16 gradient of y (relative
 * rounding 2^-9), hence 1e-2 there (measured 2e-3).
 * The module rows: the MLP computes with f16 operands, its hidden activations rounded to 2^-11
 * relative, so the loss moves by ~1e-4 of rounding noise under any perturbation and h = 1e-2
 * gave errors of 3.6 % of max|g|; with h = 0.1 the noise falls to ~4e-3 (measured 3.7e-3 for x,
 * 4.1e-3 for the weights), the SiLU's curvature adds less: MLP_TOL = 1.5e-2 (a wrong factor or a
 * dropped term stays >= 10 % off). The frequency encoding's sin(2 pi x) has truncation error
 * (2 pi)^2 h^2 / 6 = 6.6e-4 relative at h = 1e-2 (measured 6e-4): FREQ_TOL = 2e-3. The grids are
 * linear in their parameters and, with x inside the cells (op_case.cells), in x: default 1e-3.
 * On CUDA the MLP's tensor cores sum in another order than the CPU reference (f16 roundings of
 * hidden values flip): its CUDA check uses MLP_TOL too (test_nn_mlp: 1e-2 .. 2e-2 normwise). */
#include "nb_test.h"
#include "nabla/device.h"
#include "nabla/module.h"
#include "nabla/nn_encoding.h"
#include "nabla/nn_mlp.h"
#include "nabla/nn_tape.h"
#include "graph/fuse.h"
#include "graph/op_rows.h"

#define MAXT 3 /* inputs / parameters per case */
#define MLP_TOL 1.5e-2
#define MLP_H 0.1f
#define FREQ_TOL 2e-3

typedef struct op_case {
    int kind;          /* NB_TOP_* exercised */
    const char *label;
    int nin;           /* activation inputs (all need gradients) */
    int nd[MAXT];
    int64_t in[MAXT][4];
    int npar;          /* parameters, in the builder's order */
    int pnd[MAXT];
    int64_t par[MAXT][4];
    int a, b;          /* attributes: groups, heads, stride / pad, slice start / count, ... */
    int grid;          /* inputs and h on the 1/64 grid (the cast's rounding forward) */
    int cells;         /* > 0: input 0 lies in (0, 1), inside the cells of a grid of `cells` per
                        * dimension (>= 0.25 of a cell from their edges, so x +- h crosses none:
                        * the grid encodings are piecewise linear in x) */
    float h;           /* > 0: the finite-difference step (default 1e-2; 1/64 with grid) */
    double tol;        /* > 0: the relative tolerance of the finite-difference and CUDA checks, for
                        * rows whose module computes in reduced precision (the MLP's f16
                        * operands); 0: the defaults above */
} op_case;

static const op_case cases[] = {
    {NB_TOP_LINEAR, "linear", 1, {2}, {{3, 5}}, 2, {2, 1}, {{4, 5}, {4}}, 0, 0, 0, 0, 0, 0},
    {NB_TOP_LINEAR, "linear no bias", 1, {2}, {{2, 6}}, 1, {2}, {{3, 6}}, 0, 0, 0, 0, 0, 0},
    {NB_TOP_CONV2D, "conv2d 3x3 s1 p1", 1, {4}, {{2, 3, 5, 5}}, 2, {4, 1}, {{4, 3, 3, 3}, {4}}, 1, 1, 0, 0, 0, 0},
    {NB_TOP_CONV2D, "conv2d 3x3 s2 p1", 1, {4}, {{1, 2, 6, 5}}, 2, {4, 1}, {{3, 2, 3, 3}, {3}}, 2, 1, 0, 0, 0, 0},
    {NB_TOP_CONV2D, "conv2d 1x1 no bias", 1, {4}, {{2, 3, 3, 4}}, 1, {4}, {{2, 3, 1, 1}}, 1, 0, 0, 0, 0, 0},
    {NB_TOP_GROUP_NORM, "group_norm", 1, {4}, {{2, 4, 3, 3}}, 2, {1, 1}, {{4}, {4}}, 2, 0, 0, 0, 0, 0},
    {NB_TOP_GROUP_NORM, "group_norm no affine", 1, {3}, {{2, 6, 4}}, 0, {0}, {{0}}, 3, 0, 0, 0, 0, 0},
    {NB_TOP_GROUP_NORM_SILU, "group_norm_silu", 1, {4}, {{2, 4, 3, 3}}, 2, {1, 1}, {{4}, {4}}, 2, 0, 0, 0, 0, 0},
    {NB_TOP_SILU, "silu", 1, {3}, {{2, 3, 7}}, 0, {0}, {{0}}, 0, 0, 0, 0, 0, 0},
    {NB_TOP_ADD, "add", 2, {3, 3}, {{2, 3, 5}, {2, 3, 5}}, 0, {0}, {{0}}, 0, 0, 0, 0, 0, 0},
    {NB_TOP_ADD_CHANNEL, "add_channel", 2, {4, 2}, {{2, 3, 4, 4}, {2, 3}}, 0, {0}, {{0}}, 0, 0, 0, 0, 0, 0},
    {NB_TOP_CONCAT, "concat", 2, {4, 4}, {{2, 3, 4, 3}, {2, 2, 4, 3}}, 0, {0}, {{0}}, 0, 0, 0, 0, 0, 0},
    {NB_TOP_UPSAMPLE2X, "upsample2x", 1, {4}, {{2, 3, 3, 4}}, 0, {0}, {{0}}, 0, 0, 0, 0, 0, 0},
    {NB_TOP_AVGPOOL2X, "avgpool2x", 1, {4}, {{2, 3, 4, 6}}, 0, {0}, {{0}}, 0, 0, 0, 0, 0, 0},
    {NB_TOP_MSE, "mse", 2, {3, 3}, {{2, 3, 5}, {2, 3, 5}}, 0, {0}, {{0}}, 0, 0, 0, 0, 0, 0},
    {NB_TOP_ATTENTION, "attention", 3, {4, 4, 4}, {{1, 2, 3, 8}, {1, 2, 5, 8}, {1, 2, 5, 8}}, 0,
     {0}, {{0}}, 0, 0, 0, 0, 0, 0},
    {NB_TOP_RESHAPE, "reshape", 1, {3}, {{2, 3, 4}}, 0, {0}, {{0}}, 0, 0, 0, 0, 0, 0},
    {NB_TOP_TRANSPOSE, "transpose", 1, {3}, {{2, 3, 5}}, 0, {0}, {{0}}, 0, 0, 0, 0, 0, 0},
    {NB_TOP_SLICE_CHANNELS, "slice_channels", 1, {4}, {{2, 5, 3, 3}}, 0, {0}, {{0}}, 1, 3, 0, 0, 0, 0},
    {NB_TOP_CAST, "cast f32->bf16", 1, {3}, {{2, 3, 5}}, 0, {0}, {{0}}, 0, 0, 1, 0, 0, 0},
    {NB_TOP_QKV_ATTENTION, "qkv_attention 3-D", 1, {3}, {{1, 24, 5}}, 0, {0}, {{0}}, 2, 0, 0, 0, 0, 0},
    {NB_TOP_QKV_ATTENTION, "qkv_attention 4-D", 1, {4}, {{2, 12, 2, 3}}, 0, {0}, {{0}}, 1, 0, 0, 0, 0, 0},
    /* mlp_config(): 3 -> 16 (SiLU) -> 2, biases: 3*16 + 16 + 16*2 + 2 = 98 weights */
    {NB_TOP_MLP, "mlp f16", 1, {2}, {{5, 3}}, 1, {1}, {{98}}, 0, 0, 0, 0, MLP_H, MLP_TOL},
    /* enc_config(a): a = 0 dense 4x4 grid of 2 features (32 params), 1 hash grid of 2 levels
     * (a dense 3x3 level and a hashed 5x5 one in 16 entries: (9 + 16) * 2 = 50 params), 2 the
     * frequency encoding (2 frequencies, no params) */
    {NB_TOP_ENCODING, "encoding dense grid", 1, {2}, {{4, 2}}, 1, {1}, {{32}}, 0, 0, 0, 3, 0, 0},
    {NB_TOP_ENCODING, "encoding hash grid", 1, {2}, {{4, 2}}, 1, {1}, {{50}}, 1, 0, 0, 4, 0, 0},
    {NB_TOP_ENCODING, "encoding frequency", 1, {2}, {{3, 2}}, 0, {0}, {{0}}, 2, 0, 0, 1, 0, FREQ_TOL},
    /* fused kernels (graph/fuse.h): a = 0 silu(add_channel(x, c)), 1 mse(silu(x) + z, x) */
    {NB_TOP_FUSED, "fused add_channel+silu", 2, {4, 2}, {{2, 3, 4, 4}, {2, 3}}, 0, {0}, {{0}}, 0, 0, 0, 0, 0, 0},
    {NB_TOP_FUSED, "fused silu+add+mse", 2, {3, 3}, {{2, 3, 5}, {2, 3, 5}}, 0, {0}, {{0}}, 1, 0, 0, 0, 0, 0},
    /* a user's .nb function (CALL_SRC): float3 a [2,4,3] with b [4] broadcast over the batch, and
     * the scalar 0.5; its gradient sums b's over the broadcast */
    {NB_TOP_CALL, "call (user .nb function)", 2, {3, 1}, {{2, 4, 3}, {4}}, 0, {0}, {{0}}, 0, 0, 0, 0, 0, 0},
    /* relu / linear_relu: inputs kept >= KINK from the kink (kink_clear) */
    {NB_TOP_RELU, "relu", 1, {3}, {{2, 3, 7}}, 0, {0}, {{0}}, 0, 0, 0, 0, 0, 0},
    {NB_TOP_SOFTMAX, "softmax", 1, {3}, {{2, 3, 7}}, 0, {0}, {{0}}, 0, 0, 0, 0, 0, 0},
    /* (outputs ~1/70: the loss moves by ~1e-6 per 1e-2 step, its rounding noise as large; h = 0.1
     * brings the noise down tenfold, truncation stays < 1e-4 relative) */
    {NB_TOP_SOFTMAX, "softmax rows of 70", 1, {2}, {{3, 70}}, 0, {0}, {{0}}, 0, 0, 0, 0, 0.1f, 0},
    {NB_TOP_LINEAR_RELU, "linear_relu", 1, {2}, {{3, 5}}, 2, {2, 1}, {{4, 5}, {4}}, 0, 0, 0, 0, 0, 0},
    {NB_TOP_LINEAR_RELU, "linear_relu no bias", 1, {2}, {{2, 6}}, 1, {2}, {{3, 6}}, 0, 0, 0, 0, 0, 0},
};
/* The CALL case's module: loaded on the tape's device by build(). */
static const char *CALL_SRC =
    "[Differentiable] float3 tc_fn(float3 a, float b, float k) { return a * sin(b) + k * a * a; }\n";
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* The module objects of the MLP and ENCODING cases, created by build() on the tape's device and
 * freed by run_case after the tape (an op holds its object while on the tape). */
static nb_mlp *g_mlp;
static nb_encoding *g_enc;
static nb_fuse_kernel *g_fuse;
static nb_module *g_callmod;
static nb_device *g_cpu; /* a CPU tape's device for them (an encoding borrows its device) */

static nb_mlp_config mlp_config(void) {
    nb_mlp_config c = nb_mlp_config_default(3, 2, 16, 1);
    c.act = NB_ACT_SILU; /* smooth: finite differences see no kinks */
    c.bias = 1;
    return c;
}

static nb_encoding_config enc_config(int a) {
    if (a == 0) return nb_dense_grid_config(2, 2, 4, 4, 0);
    if (a == 1) return nb_hash_grid_config(2, 2, 2, 4, 2, 2.0f);
    return nb_frequency_config(2, 2);
}

/* The device the tape runs on, as the modules want it (a CPU tape may have none). */
static nb_status tape_device(nb_tape *t, nb_device **dev) {
    if (nb_tape_on_cuda(t)) {
        *dev = t->dev;
        return NB_OK;
    }
    nb_status s = g_cpu ? NB_OK : nb_device_open("cpu", &g_cpu);
    *dev = g_cpu;
    return s;
}

static nb_status build_mlp(nb_tape *t, nb_tvar x, nb_tvar w, nb_tvar *y) {
    nb_device *dev;
    nb_status s = tape_device(t, &dev);
    nb_mlp_config c = mlp_config();
    if (!s) s = nb_mlp_create(dev, &c, &g_mlp);
    return s ? s : nb_tape_mlp(t, g_mlp, x, w, y);
}

static nb_status build_fused(nb_tape *t, int a, const nb_tvar *in, nb_tvar *y) {
    nb_device *dev;
    nb_status s = tape_device(t, &dev);
    nb_fuse_spec sp = {0};
    int x = nb_fuse_add_input(&sp, NB_FUSE_FULL), z = nb_fuse_add_input(&sp, a ? NB_FUSE_FULL : NB_FUSE_CHANNEL);
    if (a == 0) {
        int u = nb_fuse_add_node(&sp, NB_TOP_ADD_CHANNEL, 2, (int[]){x, z});
        nb_fuse_add_node(&sp, NB_TOP_SILU, 1, (int[]){u});
    } else {
        int u = nb_fuse_add_node(&sp, NB_TOP_SILU, 1, (int[]){x});
        int v = nb_fuse_add_node(&sp, NB_TOP_ADD, 2, (int[]){u, z});
        nb_fuse_add_node(&sp, NB_TOP_MSE, 2, (int[]){v, x});
    }
    if (!s) s = nb_fuse_kernel_create(dev, &sp, &g_fuse);
    return s ? s : nb_tape_fused(t, g_fuse, 2, in, y);
}

static nb_status build_encoding(nb_tape *t, int a, nb_tvar x, nb_tvar p, nb_tvar *y) {
    nb_device *dev;
    nb_status s = tape_device(t, &dev);
    nb_encoding_config c = enc_config(a);
    if (!s) s = nb_encoding_create(dev, &c, &g_enc);
    return s ? s : nb_tape_encoding(t, g_enc, x, p, y);
}

static nb_status build_call(nb_tape *t, nb_tvar a, nb_tvar b, nb_tvar *y) {
    nb_device *dev;
    nb_func *f = NULL;
    nb_status s = tape_device(t, &dev);
    if (!s) s = nb_module_load_source(dev, "test_ops_call.nb", CALL_SRC, NULL, &g_callmod);
    if (!s) s = nb_module_func(g_callmod, "tc_fn", &f);
    return s ? s : nb_tape_call_scalars(t, f, 3, (nb_tvar[]){a, b, NB_TVAR_NONE}, (double[]){0, 0, 0.5}, y);
}

static void free_modules(void) {
    nb_module_free(g_callmod);
    g_callmod = NULL;
    nb_mlp_free(g_mlp);
    nb_encoding_destroy(g_enc);
    nb_fuse_kernel_free(g_fuse);
    g_fuse = NULL;
    nb_device_close(g_cpu);
    g_mlp = NULL;
    g_enc = NULL;
    g_cpu = NULL;
}

static int64_t numel(int nd, const int64_t *s) {
    int64_t c = 1;
    for (int i = 0; i < nd; i++) c *= s[i];
    return c;
}

/* Builds the case's op on t from inputs in[] and parameters p[]. */
static nb_status build(nb_tape *t, const op_case *c, const nb_tvar *in, const nb_tvar *p,
                       nb_tvar *y) {
    nb_tvar p0 = c->npar > 0 ? p[0] : NB_TVAR_NONE, p1 = c->npar > 1 ? p[1] : NB_TVAR_NONE;
    switch (c->kind) {
    case NB_TOP_LINEAR: return nb_tape_linear(t, in[0], p0, p1, y);
    case NB_TOP_CONV2D: return nb_tape_conv2d(t, in[0], p0, p1, c->a, c->b, y);
    case NB_TOP_GROUP_NORM: return nb_tape_group_norm(t, in[0], c->a, p0, p1, 1e-5f, y);
    case NB_TOP_GROUP_NORM_SILU: return nb_tape_group_norm_silu(t, in[0], c->a, p0, p1, 1e-5f, y);
    case NB_TOP_SILU: return nb_tape_silu(t, in[0], y);
    case NB_TOP_ADD: return nb_tape_add(t, in[0], in[1], y);
    case NB_TOP_ADD_CHANNEL: return nb_tape_add_channel(t, in[0], in[1], y);
    case NB_TOP_CONCAT: return nb_tape_concat(t, in[0], in[1], y);
    case NB_TOP_UPSAMPLE2X: return nb_tape_upsample2x(t, in[0], y);
    case NB_TOP_AVGPOOL2X: return nb_tape_avgpool2x(t, in[0], y);
    case NB_TOP_MSE: return nb_tape_mse(t, in[0], in[1], y);
    case NB_TOP_ATTENTION: return nb_tape_attention(t, in[0], in[1], in[2], y);
    case NB_TOP_RESHAPE: {
        const int64_t *s = c->in[0];
        return nb_tape_reshape(t, in[0], 2, (int64_t[]){s[0] * s[1], s[2]}, y);
    }
    case NB_TOP_TRANSPOSE: return nb_tape_transpose(t, in[0], y);
    case NB_TOP_SLICE_CHANNELS: return nb_tape_slice_channels(t, in[0], c->a, c->b, y);
    case NB_TOP_CAST: return nb_tape_cast(t, in[0], NB_BF16, y);
    case NB_TOP_QKV_ATTENTION: return nb_tape_qkv_attention(t, in[0], c->a, y);
    case NB_TOP_MLP: return build_mlp(t, in[0], p0, y);
    case NB_TOP_ENCODING: return build_encoding(t, c->a, in[0], p0, y);
    case NB_TOP_FUSED: return build_fused(t, c->a, in, y);
    case NB_TOP_CALL: return build_call(t, in[0], in[1], y);
    case NB_TOP_RELU: return nb_tape_relu(t, in[0], y);
    case NB_TOP_SOFTMAX: return nb_tape_softmax(t, in[0], y);
    case NB_TOP_LINEAR_RELU: return nb_tape_linear_relu(t, in[0], p0, p1, y);
    default: return nb_error(NB_ERR_INTERNAL, "test_ops: no builder for op kind %d", c->kind);
    }
}

/* Host data of one case: inputs, parameters, the loss target. */
typedef struct case_data {
    float *in[MAXT];
    int64_t nin_el[MAXT];
    float *par; /* all parameters, in the tape's parameter-buffer order */
    int64_t npar_el;
    float *tgt; /* [numel(y)] */
    int64_t ny;
} case_data;

/* What one run of a case gives back. */
typedef struct case_out {
    double loss;
    float *y;          /* [ny] */
    float *gin[MAXT];  /* input gradients */
    float *gpar;       /* parameter gradients */
} case_out;

static void free_out(case_out *o) {
    free(o->y);
    for (int i = 0; i < MAXT; i++) free(o->gin[i]);
    free(o->gpar);
    memset(o, 0, sizeof *o);
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform [-1, 1) */
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static float rnd(int grid) { return grid ? roundf(frand() * 64.0f) / 64.0f : frand(); }

/* One run of case c on dev (NULL: CPU) in precision prec: bf16_in casts every input to bf16
 * before the op (the bf16 storage path of rows that read bf16; the CPU reference rounds the
 * same way). want_grad: also the backward and every gradient. d->tgt / d->ny are filled on the
 * first call (ny = 0). */
static nb_status run_case(const op_case *c, case_data *d, nb_device *dev, int prec, int bf16_in,
                          int want_grad, case_out *o) {
    memset(o, 0, sizeof *o);
    nb_tape *t = NULL;
    nb_status s = dev ? nb_tape_create_on(dev, &t) : nb_tape_create(&t);
    if (s) return s;
    nb_tvar p[MAXT], in[MAXT], x[MAXT], y = NB_TVAR_NONE, loss = NB_TVAR_NONE;
    char name[16];
    for (int i = 0; i < c->npar && !s; i++) {
        snprintf(name, sizeof name, "p%d", i);
        s = nb_tape_param(t, name, c->pnd[i], c->par[i], &p[i]);
    }
    if (!s) s = nb_tape_set_precision(t, (nb_tape_precision)prec);
    if (!s && c->npar) s = nb_tape_write_params(t, d->par, d->npar_el);
    for (int i = 0; i < c->nin && !s; i++) {
        s = nb_tape_input(t, c->nd[i], c->in[i], d->in[i], 1, &in[i]);
        x[i] = in[i];
        if (!s && bf16_in) s = nb_tape_cast(t, in[i], NB_BF16, &x[i]);
    }
    if (!s) s = build(t, c, x, p, &y);
    /* the recorded op: the case's kind, its row's shape rule */
    if (!s) {
        const nb_top *op = &t->ops[t->n_ops - 1];
        const nb_tval *yv = &t->vals[y];
        if (op->kind != c->kind || op->out != y)
            s = nb_error(NB_ERR_INTERNAL, "%s: the last op recorded is '%s', not '%s'", c->label,
                         nb_tape_op_name(op->kind), nb_tape_op_name(c->kind));
        else if (nb_top_rows[c->kind].shape == NB_OPSHAPE_SCALAR && yv->count != 1)
            s = nb_error(NB_ERR_INTERNAL, "%s: a scalar op with %lld outputs", c->label,
                         (long long)yv->count);
        else if (nb_top_rows[c->kind].shape == NB_OPSHAPE_LIKE_IN0 &&
                 (yv->ndim != c->nd[0] || memcmp(yv->shape, c->in[0], sizeof(int64_t) * c->nd[0])))
            s = nb_error(NB_ERR_INTERNAL, "%s: output shape is not in[0]'s", c->label);
    }
    int64_t ny = 0;
    if (!s) s = nb_tape_shape(t, y, NULL, NULL);
    if (!s) ny = t->vals[y].count;
    if (!s && !d->ny) {
        d->ny = ny;
        d->tgt = malloc(sizeof(float) * (size_t)ny);
        for (int64_t i = 0; i < ny; i++) d->tgt[i] = frand();
    }
    if (!s && nb_top_rows[c->kind].shape == NB_OPSHAPE_SCALAR) {
        loss = y;
    } else if (!s) {
        nb_tvar tv;
        int ndy = 0;
        int64_t sh[4];
        s = nb_tape_shape(t, y, &ndy, sh);
        if (!s) s = nb_tape_input(t, ndy, sh, d->tgt, 0, &tv);
        if (!s) s = nb_tape_mse(t, y, tv, &loss);
    }
    float l = 0;
    if (!s) s = nb_tape_read(t, loss, &l, 1);
    o->loss = l;
    if (!s) {
        o->y = malloc(sizeof(float) * (size_t)ny);
        s = nb_tape_read(t, y, o->y, ny);
    }
    if (!s && want_grad) {
        s = nb_tape_backward(t, loss);
        for (int i = 0; i < c->nin && !s; i++) {
            o->gin[i] = malloc(sizeof(float) * (size_t)d->nin_el[i]);
            s = nb_tape_read_grad(t, in[i], o->gin[i], d->nin_el[i]);
        }
        if (!s && c->npar) {
            o->gpar = malloc(sizeof(float) * (size_t)d->npar_el);
            s = nb_tape_read_grads(t, o->gpar, d->npar_el);
        }
    }
    nb_tape_free(t);
    free_modules();
    if (s) free_out(o);
    return s;
}

/* The ReLU's kink at 0: a finite difference across it is no derivative. Finite differences
 * move one element by h = 1e-2, which moves a linear's output by at most h max(|x|, |w|, 1) =
 * h: relu inputs and linear_relu pre-activations are kept >= KINK = 5 h away from 0 (relu:
 * pushed out; linear_relu: the bias of an output column redrawn, or without bias its weight
 * row, until every row's pre-activation clears it). */
#define KINK 0.05f
static void kink_clear(const op_case *c, case_data *d) {
    if (c->kind == NB_TOP_RELU)
        for (int64_t k = 0; k < d->nin_el[0]; k++) {
            float *v = &d->in[0][k];
            if (fabsf(*v) < KINK) *v += *v < 0 ? -KINK : KINK;
        }
    if (c->kind != NB_TOP_LINEAR_RELU) return;
    int64_t N = c->in[0][0], F = c->in[0][1], O = c->par[0][0];
    float *w = d->par, *b = c->npar > 1 ? d->par + O * F : NULL;
    for (int64_t o = 0; o < O; o++)
        for (int tries = 0; tries < 1000; tries++) {
            int ok = 1;
            for (int64_t n = 0; n < N && ok; n++) {
                float z = b ? b[o] : 0.0f;
                for (int64_t f = 0; f < F; f++) z += d->in[0][n * F + f] * w[o * F + f];
                ok = fabsf(z) >= KINK;
            }
            if (ok) break;
            if (b) b[o] = frand();
            else
                for (int64_t f = 0; f < F; f++) w[o * F + f] = frand();
        }
}

static void case_data_init(const op_case *c, case_data *d) {
    memset(d, 0, sizeof *d);
    for (int i = 0; i < c->nin; i++) {
        d->nin_el[i] = numel(c->nd[i], c->in[i]);
        d->in[i] = malloc(sizeof(float) * (size_t)d->nin_el[i]);
        for (int64_t k = 0; k < d->nin_el[i]; k++) d->in[i][k] = rnd(c->grid);
        if (i == 0 && c->cells) /* (cell + 0.25 .. 0.75) / cells */
            for (int64_t k = 0; k < d->nin_el[i]; k++) {
                float u = 0.5f * (frand() + 1.0f); /* [0, 1) */
                int cell = (int)(u * (float)c->cells) % c->cells;
                d->in[i][k] = ((float)cell + 0.5f + 0.25f * frand()) / (float)c->cells;
            }
    }
    for (int i = 0; i < c->npar; i++) d->npar_el += numel(c->pnd[i], c->par[i]);
    d->par = malloc(sizeof(float) * (size_t)(d->npar_el ? d->npar_el : 1));
    for (int64_t k = 0; k < d->npar_el; k++) d->par[k] = rnd(c->grid);
    kink_clear(c, d);
}

static void case_data_free(case_data *d) {
    for (int i = 0; i < MAXT; i++) free(d->in[i]);
    free(d->par);
    free(d->tgt);
}

static double max_abs(const float *a, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i]));
    return m;
}

/* max|a - b| <= rtol max|b| + atol, else a message naming the worst element. */
static int close_enough(const char *label, const char *what, const float *a, const float *b,
                        int64_t n, double rtol, double atol) {
    double ref = max_abs(b, n), worst = 0;
    int64_t wi = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (e > worst || e != e) worst = e, wi = i;
    }
    if (worst <= rtol * ref + atol) return 1;
    fprintf(stderr, "  %s: %s: max error %.3g at [%lld] (%.6g vs %.6g; max |ref| %.3g)\n", label,
            what, worst, (long long)wi, a[wi], b[wi], ref);
    return 0;
}

/* Central differences of the loss over every element of buf (an input or the parameters). */
static int check_fd(const op_case *c, case_data *d, float *buf, int64_t n, const float *g,
                    const char *what) {
    if (!n) return 1;
    const float h = c->h > 0 ? c->h : c->grid ? 1.0f / 64.0f : 1e-2f;
    float *fd = malloc(sizeof(float) * (size_t)n);
    int ok = 1;
    for (int64_t k = 0; k < n && ok; k++) {
        float x0 = buf[k];
        case_out lo, hi;
        buf[k] = x0 + h;
        nb_status s = run_case(c, d, NULL, NB_TAPE_FP32, 0, 0, &hi);
        buf[k] = x0 - h;
        if (!s) s = run_case(c, d, NULL, NB_TAPE_FP32, 0, 0, &lo);
        buf[k] = x0;
        if (s) {
            fprintf(stderr, "  %s: %s: %s\n", c->label, what, nb_last_error());
            ok = 0;
            break;
        }
        fd[k] = (float)((hi.loss - lo.loss) / (2.0 * (double)h));
        free_out(&lo);
        free_out(&hi);
    }
    /* a gradient that is zero everywhere would make the comparison vacuous */
    if (ok && max_abs(g, n) < 1e-6) {
        fprintf(stderr, "  %s: %s: analytic gradient is all zero\n", c->label, what);
        ok = 0;
    }
    if (ok) ok = close_enough(c->label, what, g, fd, n, c->tol > 0 ? c->tol : c->grid ? 1e-2 : 1e-3, 1e-6);
    free(fd);
    return ok;
}

/* ---- tests ----------------------------------------------------------------------------------- */

/* Every row of ops.def has a case, every case names a row, and the names are unique. */
static void test_every_op_has_a_case(void) {
    int seen[NB_TOP_COUNT] = {0};
    for (int i = 0; i < NCASES; i++) {
        NB_EXPECT(cases[i].kind >= 0 && cases[i].kind < NB_TOP_COUNT);
        if (cases[i].kind >= 0 && cases[i].kind < NB_TOP_COUNT) seen[cases[i].kind]++;
    }
    int k = 0;
#define NB_OP(id, nm, ni, shape, cpu_fwd, cpu_bwd, cuda_fwd, cuda_bwd, flags)                   \
    if (!seen[NB_TOP_##id]) {                                                                      \
        fprintf(stderr, "  ops.def row %s (\"%s\") has no case in tests/test_ops.c\n", #id, nm);   \
        nb_test_failures_++;                                                                       \
    }                                                                                              \
    NB_EXPECT(NB_TOP_##id == k++);                                                                 \
    NB_EXPECT(!strcmp(nb_tape_op_name(NB_TOP_##id), nm));                                          \
    NB_EXPECT(nb_top_rows[NB_TOP_##id].nin == ni && ni <= NB_TOP_MAX_IN);
#include "graph/ops.def"
#undef NB_OP
    NB_EXPECT(k == NB_TOP_COUNT);
    for (int a = 0; a < NB_TOP_COUNT; a++)
        for (int b = a + 1; b < NB_TOP_COUNT; b++)
            NB_EXPECT(strcmp(nb_tape_op_name(a), nb_tape_op_name(b)) != 0);
    NB_EXPECT(nb_tape_op_name(-1) == NULL && nb_tape_op_name(NB_TOP_COUNT) == NULL);
}

/* CPU forward + backward of every case; every gradient against central differences. */
static void test_cpu_gradients_vs_finite_differences(void) {
    for (int i = 0; i < NCASES; i++) {
        const op_case *c = &cases[i];
        case_data d;
        case_data_init(c, &d);
        case_out o;
        nb_status s = run_case(c, &d, NULL, NB_TAPE_FP32, 0, 1, &o);
        if (s) {
            fprintf(stderr, "  %s: %s\n", c->label, nb_last_error());
            nb_test_failures_++;
            case_data_free(&d);
            continue;
        }
        int ok = 1;
        char what[32];
        for (int k = 0; k < c->nin; k++) {
            snprintf(what, sizeof what, "input %d", k);
            ok &= check_fd(c, &d, d.in[k], d.nin_el[k], o.gin[k], what);
        }
        if (c->npar) ok &= check_fd(c, &d, d.par, d.npar_el, o.gpar, "parameters");
        if (!ok) nb_test_failures_++;
        free_out(&o);
        case_data_free(&d);
    }
}

/* A recorded op that breaks its row's arity or shape rule is refused (nb_tape_check_op). */
static void test_record_checks_the_row(void) {
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    float x[6] = {1, 2, 3, 4, 5, 6};
    nb_tvar a, y;
    NB_REQUIRE_OK(nb_tape_input(t, 2, (int64_t[]){2, 3}, x, 1, &a));
    nb_top op = {.kind = NB_TOP_SILU, .nin = 2, .in = {a, a, NB_TVAR_NONE}};
    NB_REQUIRE_OK(nb_tape_op_out(t, &op, 2, (int64_t[]){2, 3}));
    NB_EXPECT_ERR(nb_tape_record(t, &op), NB_ERR_INTERNAL, "ops.def says 1");
    op.nin = 1;
    NB_REQUIRE_OK(nb_tape_op_out(t, &op, 2, (int64_t[]){3, 2}));
    NB_EXPECT_ERR(nb_tape_record(t, &op), NB_ERR_INTERNAL, "shape rule");
    op.kind = NB_TOP_COUNT;
    NB_EXPECT_ERR(nb_tape_record(t, &op), NB_ERR_INTERNAL, "unknown op kind");
    NB_REQUIRE_OK(nb_tape_silu(t, a, &y)); /* the tape still works */
    NB_EXPECT(t->n_ops == 1);
    nb_tape_free(t);
}

/* The CUDA functions a row without a CUDA path names: a typed error naming the op. */
static void test_no_cuda_path_error(void) {
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    nb_top op = {.kind = NB_TOP_CONCAT, .nin = 2};
    NB_EXPECT_ERR(nb_op_no_cuda_fwd(t, &op), NB_ERR_UNSUPPORTED, "op 'concat' has no CUDA forward");
    NB_EXPECT_ERR(nb_op_no_cuda_bwd(t, &op), NB_ERR_UNSUPPORTED, "op 'concat' has no CUDA backward");
    nb_tape_free(t);
}

/* The profiler labels its rows with the table's names. */
static void test_profiler_labels_from_table(void) {
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    NB_REQUIRE_OK(nb_tape_set_profiling(t, 1));
    float x[6] = {1, -2, 3, -4, 5, -6};
    nb_tvar a, y, l;
    NB_REQUIRE_OK(nb_tape_input(t, 1, (int64_t[]){6}, x, 1, &a));
    NB_REQUIRE_OK(nb_tape_silu(t, a, &y));
    NB_REQUIRE_OK(nb_tape_mse(t, y, a, &l));
    NB_REQUIRE_OK(nb_tape_backward(t, l));
    nb_tape_profile_row rows[8];
    int n = 0;
    NB_REQUIRE_OK(nb_tape_profile_rows(t, rows, 8, &n, NULL));
    int silu = 0, mse = 0;
    for (int i = 0; i < n && i < 8; i++) {
        silu += !strcmp(rows[i].name, nb_tape_op_name(NB_TOP_SILU));
        mse += !strcmp(rows[i].name, nb_tape_op_name(NB_TOP_MSE));
    }
    NB_EXPECT(n == 2 && silu == 1 && mse == 1);
    nb_tape_free(t);
}

/* CUDA forward and gradients of every case against the CPU tape, in FP32, TF32 and BF16. */
static void test_cuda_vs_cpu(void) {
    nb_device *dev = NULL;
    if (nb_device_open("cuda", &dev) != NB_OK) NB_SKIP("no CUDA device");
    for (int i = 0; i < NCASES; i++) {
        const op_case *c = &cases[i];
        for (int prec = NB_TAPE_FP32; prec <= NB_TAPE_BF16; prec++) {
            int bf = prec == NB_TAPE_BF16;
            /* bf16: storage in bf16; the inputs cast to bf16 where the row reads bf16 (the cast
             * op itself does that conversion) */
            int bf16_in = bf && c->kind != NB_TOP_CAST && (nb_top_rows[c->kind].flags & NB_TOPF_IN_BF16);
            /* fp32: order of sums only; tf32: 10-bit mantissas in GEMM / attention inputs;
             * bf16: 8-bit mantissas in storage and GEMM inputs */
            double rtol = bf ? 4e-2 : prec == NB_TAPE_TF32 ? 5e-3 : 1e-4;
            if (c->tol > rtol) rtol = c->tol;
            double atol = bf ? 1e-3 : prec == NB_TAPE_TF32 ? 1e-4 : 1e-6;
            case_data d;
            case_data_init(c, &d);
            case_out ref, got;
            nb_status s = run_case(c, &d, NULL, NB_TAPE_FP32, bf16_in, 1, &ref);
            if (!s) s = run_case(c, &d, dev, prec, bf16_in, 1, &got);
            else memset(&got, 0, sizeof got);
            char label[96], what[32];
            snprintf(label, sizeof label, "%s (CUDA %s)", c->label,
                     bf ? "bf16" : prec == NB_TAPE_TF32 ? "tf32" : "fp32");
            if (s) {
                fprintf(stderr, "  %s: %s\n", label, nb_last_error());
                nb_test_failures_++;
            } else {
                int ok = close_enough(label, "forward", got.y, ref.y, d.ny, rtol, atol);
                for (int k = 0; k < c->nin; k++) {
                    snprintf(what, sizeof what, "input %d gradient", k);
                    ok &= close_enough(label, what, got.gin[k], ref.gin[k], d.nin_el[k], rtol, atol);
                }
                if (c->npar)
                    ok &= close_enough(label, "parameter gradients", got.gpar, ref.gpar, d.npar_el,
                                       rtol, atol);
                if (!ok) nb_test_failures_++;
            }
            free_out(&ref);
            free_out(&got);
            case_data_free(&d);
        }
    }
    nb_device_close(dev);
}

/* loss = mse(mlp(z) + z, 0), z = e + x, e = enc(x) (twice: enc(x) + enc(x), two encoding ops on
 * x): x's and z's gradients have contributions from several ops, so the module rows take their
 * accumulate path (the backward runs in reverse: the adds first); gx (or NULL) receives x's. */
static nb_status compose(nb_encoding *enc, nb_mlp *mlp, int twice, const float *xs, const float *ps,
                         double *loss, float *gx) {
    nb_tape *t;
    nb_status s = nb_tape_create(&t);
    if (s) return s;
    nb_tvar p, w, x, f1, f2, z, y, l, tgt;
    float zero[6] = {0}, lv = 0;
    s = nb_tape_param(t, "enc", 1, (int64_t[]){32}, &p);
    if (!s) s = nb_tape_param(t, "mlp", 1, (int64_t[]){nb_mlp_n_params(mlp)}, &w);
    if (!s) s = nb_tape_write_params(t, ps, 32 + nb_mlp_n_params(mlp));
    if (!s) s = nb_tape_input(t, 2, (int64_t[]){3, 2}, xs, 1, &x);
    if (!s) s = nb_tape_encoding(t, enc, x, p, &f1);
    if (!s && twice) s = nb_tape_encoding(t, enc, x, p, &f2);
    if (!s && twice) s = nb_tape_add(t, f1, f2, &f1);
    if (!s) s = nb_tape_add(t, f1, x, &z);
    if (!s) s = nb_tape_mlp(t, mlp, z, w, &y);
    if (!s) s = nb_tape_add(t, y, z, &y); /* z's gradient: the add's, then the mlp's added */
    if (!s) s = nb_tape_input(t, 2, (int64_t[]){3, 2}, zero, 0, &tgt);
    if (!s) s = nb_tape_mse(t, y, tgt, &l);
    if (!s) s = nb_tape_read(t, l, &lv, 1);
    *loss = lv;
    if (!s && gx) {
        /* the mlp already has an op that needs a gradient: a second is refused */
        nb_tvar y2;
        NB_EXPECT_ERR(nb_tape_mlp(t, mlp, z, w, &y2), NB_ERR_UNSUPPORTED, "one training forward");
        s = nb_tape_backward(t, l);
        if (!s) s = nb_tape_read_grad(t, x, gx, 6);
    }
    nb_tape_free(t);
    return s;
}

/* The module rows add into gradients that have other contributions (x feeds the encoding op(s),
 * an add and, through it, the mlp): x's gradient against central differences, once with one
 * encoding op and once with two. Then the builders' typed errors. */
static void test_module_rows_accumulate_and_check(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_encoding_config ec = nb_dense_grid_config(2, 2, 4, 4, 0);
    nb_encoding *enc;
    NB_REQUIRE_OK(nb_encoding_create(cpu, &ec, &enc));
    nb_mlp_config mc = mlp_config();
    mc.n_in = 2;
    nb_mlp *mlp;
    NB_REQUIRE_OK(nb_mlp_create(cpu, &mc, &mlp));
    /* x at the centres of the grid's 3 cells per dimension (x +- h stays inside) */
    float xs[6] = {1 / 6.f, 0.5f, 5 / 6.f, 0.5f, 1 / 6.f, 5 / 6.f}, ps[32 + 128], gx[6], fd[6];
    NB_EXPECT(nb_mlp_n_params(mlp) == 16 * 2 + 16 + 16 * 2 + 2); /* fits ps */
    for (int i = 0; i < 32 + 128; i++) ps[i] = frand();
    /* h: truncation ~h^2 (14 % of max|g| at h = 0.1) against the f16 noise ~1/h */
    const float h = 0.02f;
    for (int twice = 0; twice < 2; twice++) {
        double l0, lo, hi;
        NB_REQUIRE_OK(compose(enc, mlp, twice, xs, ps, &l0, gx));
        for (int k = 0; k < 6; k++) {
            float x0 = xs[k];
            xs[k] = x0 + h;
            NB_REQUIRE_OK(compose(enc, mlp, twice, xs, ps, &hi, NULL));
            xs[k] = x0 - h;
            NB_REQUIRE_OK(compose(enc, mlp, twice, xs, ps, &lo, NULL));
            xs[k] = x0;
            fd[k] = (float)((hi - lo) / (2.0 * h));
        }
        NB_EXPECT(max_abs(gx, 6) > 1e-3);
        NB_EXPECT(close_enough(twice ? "encoding x2 + mlp" : "encoding + mlp", "x", gx, fd, 6,
                               MLP_TOL, 1e-6));
    }
    /* errors: wrong x width, wrong parameter count, parameters for the frequency encoding,
     * NULL module */
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    nb_tvar p, w, x, bad;
    NB_REQUIRE_OK(nb_tape_param(t, "enc", 1, (int64_t[]){32}, &p));
    NB_REQUIRE_OK(nb_tape_param(t, "mlp", 1, (int64_t[]){nb_mlp_n_params(mlp)}, &w));
    NB_REQUIRE_OK(nb_tape_input(t, 2, (int64_t[]){3, 2}, xs, 1, &x));
    NB_EXPECT_ERR(nb_tape_mlp(t, mlp, p, w, &bad), NB_ERR_SHAPE, "expected [B, n_in]");
    NB_EXPECT_ERR(nb_tape_mlp(t, mlp, x, p, &bad), NB_ERR_SHAPE, "parameters");
    NB_EXPECT_ERR(nb_tape_encoding(t, enc, x, w, &bad), NB_ERR_SHAPE, "the encoding has 32");
    NB_EXPECT_ERR(nb_tape_encoding(t, enc, p, p, &bad), NB_ERR_SHAPE, "expected [B, n_dims]");
    nb_encoding_config fc = nb_frequency_config(2, 2);
    nb_encoding *fe;
    NB_REQUIRE_OK(nb_encoding_create(cpu, &fc, &fe));
    NB_EXPECT_ERR(nb_tape_encoding(t, fe, x, p, &bad), NB_ERR_INVALID_ARG, "no parameters");
    nb_encoding_destroy(fe);
    NB_EXPECT_ERR(nb_tape_mlp(t, NULL, x, w, &bad), NB_ERR_INVALID_ARG, "NULL");
    NB_EXPECT_ERR(nb_tape_encoding(t, NULL, x, p, &bad), NB_ERR_INVALID_ARG, "NULL");
    nb_tape_free(t);
    nb_mlp_free(mlp);
    nb_encoding_destroy(enc);
    nb_device_close(cpu);
}

/* x [N,F] -> linear -> relu on a tape of dev (NULL: CPU), then the same through nb_tape_linear_relu
 * and through the op nb_top_fuse_linear_relu makes of the recorded pair (recorded again with
 * nb_tape_record): the three outputs and the parameter gradients of a loss over them. */
static void linear_relu_three_ways(nb_device *dev, int prec, float *y3[3], float *g3[3]) {
    enum { N = 5, F = 7, O = 6 };
    float xs[N * F], ps[O * F + O], tgt[N * O];
    for (int i = 0; i < N * F; i++) xs[i] = frand();
    for (int i = 0; i < O * F + O; i++) ps[i] = frand();
    for (int i = 0; i < N * O; i++) tgt[i] = frand();
    for (int way = 0; way < 3; way++) {
        nb_tape *t;
        NB_REQUIRE_OK(dev ? nb_tape_create_on(dev, &t) : nb_tape_create(&t));
        nb_tvar w, b, x, z, y, tv, l;
        NB_REQUIRE_OK(nb_tape_param(t, "w", 2, (int64_t[]){O, F}, &w));
        NB_REQUIRE_OK(nb_tape_param(t, "b", 1, (int64_t[]){O}, &b));
        NB_REQUIRE_OK(nb_tape_set_precision(t, (nb_tape_precision)prec));
        NB_REQUIRE_OK(nb_tape_write_params(t, ps, O * F + O));
        NB_REQUIRE_OK(nb_tape_input(t, 2, (int64_t[]){N, F}, xs, 0, &x));
        if (way == 1) {
            NB_REQUIRE_OK(nb_tape_linear_relu(t, x, w, b, &y));
        } else {
            NB_REQUIRE_OK(nb_tape_linear(t, x, w, b, &z));
            NB_REQUIRE_OK(nb_tape_relu(t, z, &y));
        }
        if (way == 2) {
            /* the compile pass's rewrite: the pair becomes one op writing relu's output */
            nb_top fused, lin = t->ops[t->n_ops - 2], relu = t->ops[t->n_ops - 1];
            NB_EXPECT(!nb_top_fuse_linear_relu(&relu, &lin, &fused)); /* wrong order */
            NB_EXPECT(nb_top_fuse_linear_relu(&lin, &relu, &fused));
            NB_EXPECT(fused.kind == NB_TOP_LINEAR_RELU && fused.out == y && fused.in[0] == x &&
                      fused.in[1] == w && fused.in[2] == b);
            NB_REQUIRE_OK(nb_tape_record(t, &fused)); /* recomputes y in one op */
        }
        NB_REQUIRE_OK(nb_tape_input(t, 2, (int64_t[]){N, O}, tgt, 0, &tv));
        NB_REQUIRE_OK(nb_tape_mse(t, y, tv, &l));
        y3[way] = malloc(sizeof(float) * N * O);
        g3[way] = malloc(sizeof(float) * (O * F + O));
        NB_REQUIRE_OK(nb_tape_read(t, y, y3[way], N * O));
        if (way < 2) { /* (way 2 recorded y twice: its backward would count it twice) */
            NB_REQUIRE_OK(nb_tape_backward(t, l));
            NB_REQUIRE_OK(nb_tape_read_grads(t, g3[way], O * F + O));
        }
        nb_tape_free(t);
    }
}

/* LINEAR_RELU == LINEAR then RELU: bit for bit on the CPU (the same sums), forward and gradients;
 * on CUDA (skipped without a GPU) within the fp32 tolerance. Then the builders' errors. */
static void test_linear_relu_fusion(void) {
    float *y[3], *g[3];
    linear_relu_three_ways(NULL, NB_TAPE_FP32, y, g);
    NB_EXPECT(!memcmp(y[0], y[1], sizeof(float) * 30) && !memcmp(y[0], y[2], sizeof(float) * 30));
    NB_EXPECT(!memcmp(g[0], g[1], sizeof(float) * 48));
    int zeros = 0;
    for (int i = 0; i < 30; i++) zeros += y[0][i] == 0.0f;
    NB_EXPECT(zeros > 0 && zeros < 30); /* the relu cut some, not all */
    for (int i = 0; i < 3; i++) free(y[i]), free(g[i]);
    nb_device *dev = NULL;
    if (nb_device_open("cuda", &dev) == NB_OK) {
        float *yc[3], *gc[3];
        linear_relu_three_ways(dev, NB_TAPE_FP32, yc, gc);
        NB_EXPECT(close_enough("linear_relu (CUDA)", "forward", yc[1], yc[0], 30, 1e-5, 1e-6));
        NB_EXPECT(close_enough("linear_relu (CUDA)", "fused forward", yc[2], yc[0], 30, 1e-5, 1e-6));
        NB_EXPECT(close_enough("linear_relu (CUDA)", "gradients", gc[1], gc[0], 48, 1e-5, 1e-6));
        for (int i = 0; i < 3; i++) free(yc[i]), free(gc[i]);
        nb_device_close(dev);
    }
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    float xs[12] = {0};
    nb_tvar x, w, bad;
    NB_REQUIRE_OK(nb_tape_param(t, "w", 2, (int64_t[]){3, 5}, &w));
    NB_REQUIRE_OK(nb_tape_input(t, 2, (int64_t[]){3, 4}, xs, 1, &x));
    NB_EXPECT_ERR(nb_tape_linear_relu(t, x, w, NB_TVAR_NONE, &bad), NB_ERR_SHAPE,
                  "nb_tape_linear_relu: x [3,4] and w [3,5] must be [N,F] and [O,F]");
    NB_EXPECT_ERR(nb_tape_linear_relu(t, x, x, w, &bad), NB_ERR_SHAPE, "b [3,5] must be [O] = [3]");
    NB_EXPECT_ERR(nb_tape_relu(t, 99, &bad), NB_ERR_INVALID_ARG, "nb_tape_relu");
    NB_EXPECT_ERR(nb_tape_softmax(t, 99, &bad), NB_ERR_INVALID_ARG, "nb_tape_softmax");
    NB_EXPECT_ERR(nb_tape_relu(t, x, NULL), NB_ERR_INVALID_ARG, "NULL");
    NB_EXPECT_ERR(nb_tape_softmax(NULL, x, &bad), NB_ERR_INVALID_ARG, "NULL");
    nb_top lin = {.kind = NB_TOP_LINEAR, .out = 5}, relu = {.kind = NB_TOP_RELU, .in = {6}}, f;
    NB_EXPECT(!nb_top_fuse_linear_relu(&lin, &relu, &f)); /* relu reads another value */
    relu.in[0] = 5, relu.kind = NB_TOP_SILU;
    NB_EXPECT(!nb_top_fuse_linear_relu(&lin, &relu, &f)); /* not a relu */
    nb_tape_free(t);
}

/* softmax's rows sum to 1 and survive large and -inf inputs (the max is subtracted). */
static void test_softmax_stable(void) {
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    float xs[8] = {1000.f, 1001.f, 999.f, -INFINITY, -1000.f, -1001.f, -1002.f, -999.f}, y[8];
    nb_tvar x, s;
    NB_REQUIRE_OK(nb_tape_input(t, 2, (int64_t[]){2, 4}, xs, 0, &x));
    NB_REQUIRE_OK(nb_tape_softmax(t, x, &s));
    NB_REQUIRE_OK(nb_tape_read(t, s, y, 8));
    for (int r = 0; r < 2; r++) {
        double sum = 0;
        for (int j = 0; j < 4; j++) {
            NB_EXPECT(isfinite(y[r * 4 + j]));
            sum += y[r * 4 + j];
        }
        NB_EXPECT(fabs(sum - 1.0) < 1e-6);
    }
    NB_EXPECT(y[3] == 0.0f && y[1] > y[0] && y[0] > y[2]);
    NB_EXPECT(fabsf(y[1] - 0.66524096f) < 1e-6f); /* e / (1 + e + 1/e) */
    nb_tape_free(t);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_every_op_has_a_case, test_cpu_gradients_vs_finite_differences,
                 test_record_checks_the_row, test_no_cuda_path_error,
                 test_profiler_labels_from_table, test_module_rows_accumulate_and_check,
                 test_linear_relu_fusion, test_softmax_stable, test_cuda_vs_cpu);
}

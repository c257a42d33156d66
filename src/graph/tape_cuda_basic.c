/* CUDA rows of the tape's elementwise and layout ops: SiLU, add, per-channel add, channel concat,
 * nearest upsample ×2, average pool 2×2, MSE, reshape, transpose (last two dims), channel slice,
 * the sinusoidal timestep embedding and the backward seed. The CPU references are in
 * tape_ops_basic.c / tape_ops_shape.c.
 *
 * SiLU's forward is lib/nn_ops.nb's nn_silu, run through a prepared call (tape_nbrows.c): on an
 * H200 the .nb row ran at 0.82x the hand-written kernel's time (docs/PERF.md), which it replaced.
 * The others are hand-written CUDA C in src/graph/kernels/basic.cu (docs/PERF.md's table says why
 * each stays), compiled with NVRTC by the kernel-file loader (nb_jit_cuda_kernel; each entry
 * loaded on first use and kept per tape in t->kern), launched on nb_device_stream(t->dev);
 * nothing here synchronises.
 * Elementwise kernels are grid-stride loops over float4 chunks (every arena value is 64-byte
 * aligned; a scalar tail and a scalar path for unaligned parameter pointers), reductions are
 * deterministic (fixed grids, fixed summation order; no float atomics). Gradients accumulate
 * (dx += ...) as on the CPU, except that the first contribution to a fresh activation gradient
 * is stored (nb_tape_grad_buf_w: no zero fill, no read). Indices are 32-bit: every value has
 * < 2^31 elements (checked).
 * BF16 storage (op_rows.h, NB_TOPF_*): every row but the timestep embedding reads its
 * inputs and writes its output in each value's own dtype (f32 or bf16, any mix; gradients in
 * their value's dtype; the MSE loss [1] stays f32). A kernel gets the dtypes as bits in
 * tk_args.dt and runs a template variant: BF = 0 (all f32) is the f32 code as before (16-byte
 * accesses), BF = 1 reads / writes each buffer through the graph/kernels/bf16.cuh helpers (8-byte
 * accesses per 4 bf16). Arithmetic is f32 either way; bf16 stores round to nearest even, and a
 * gradient accumulated into a bf16 buffer is rounded after each addition. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "jit/cuda_files.h"
#include "nabla/device.h"
#include "jit/jit.h"
#include "graph/tape_internal.h"

#define VAL(t, v) (&(t)->vals[(v)])

/* One parameter block for every kernel of this file. */
typedef struct tk_args {
    const float *a, *b, *c;
    float *y, *y2;
    int32_t n, d0, d1, d2;
    int32_t v4; /* 1: the float4 path is allowed (pointers 16-byte aligned) */
    int32_t ow; /* bit 0: store into y rather than add (a fresh gradient), bit 1: y2 */
    float f;
    int32_t dt; /* storage of a, b, c, y, y2: bits TK_A .. TK_Y2 set for bf16 (else f32) */
} tk_args;

/* tk_args.dt bits */
enum { TK_A = 1, TK_B = 2, TK_C = 4, TK_Y = 8, TK_Y2 = 16 };

static const char *const tk_entry[NB_TK_COUNT] = {
    [NB_TK_ADD_SCALAR] = "tk_add_scalar", [NB_TK_SILU_BWD] = "tk_silu_bwd",
    [NB_TK_ADD_FWD] = "tk_add_fwd",
    [NB_TK_ACC] = "tk_acc",               [NB_TK_ADDC_FWD] = "tk_addc_fwd",
    [NB_TK_ADDC_BWD] = "tk_addc_bwd",     [NB_TK_CONCAT_FWD] = "tk_concat_fwd",
    [NB_TK_CONCAT_BWD] = "tk_concat_bwd", [NB_TK_UP_FWD] = "tk_up_fwd",
    [NB_TK_UP_BWD] = "tk_up_bwd",         [NB_TK_POOL_FWD] = "tk_pool_fwd",
    [NB_TK_POOL_BWD] = "tk_pool_bwd",     [NB_TK_MSE_PART] = "tk_mse_part",
    [NB_TK_MSE_FIN] = "tk_mse_fin",       [NB_TK_MSE_BWD] = "tk_mse_bwd",
    [NB_TK_TR] = "tk_transpose",          [NB_TK_SLICE_FWD] = "tk_slice_fwd",
    [NB_TK_SLICE_BWD] = "tk_slice_bwd",   [NB_TK_TEMB] = "tk_temb",
    [NB_TK_RELU_FWD] = "tk_relu_fwd",     [NB_TK_RELU_BWD] = "tk_relu_bwd",
    [NB_TK_SOFTMAX_FWD] = "tk_softmax_fwd", [NB_TK_SOFTMAX_BWD] = "tk_softmax_bwd",
};

/* The tape's handle of kernel id (loaded on first use). */
static nb_status tk_kernel(nb_tape *t, int id, nb_jit_kernel **k) {
    if (!t->kern[id]) {
        nb_status s = nb_jit_cuda_kernel(t->dev, "src/graph/kernels/basic.cu", NULL, tk_entry[id], &t->kern[id]);
        if (s) return s;
    }
    *k = t->kern[id];
    return NB_OK;
}

/* Grid-stride launch over n work items. */
static nb_status tk_launch(nb_tape *t, int id, const tk_args *a, int64_t n) {
    nb_jit_kernel *k;
    nb_status s = tk_kernel(t, id, &k);
    return s ? s : nb_jit_launch_cuda(k, a, sizeof *a, n, nb_device_stream(t->dev));
}

static nb_status tk_launch_grid(nb_tape *t, int id, const tk_args *a, unsigned gx, unsigned gy,
                                unsigned gz, unsigned bx, unsigned by) {
    nb_jit_kernel *k;
    nb_status s = tk_kernel(t, id, &k);
    if (s) return s;
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, 1};
    return nb_jit_launch_cuda_grid(k, a, sizeof *a, grid, block, nb_device_stream(t->dev));
}

static int al16(const void *p) { return p == NULL || ((uintptr_t)p & 15u) == 0; }

/* bit when value v is stored as bf16 (0 for f32 values and NB_TVAR_NONE) */
static int32_t bfbit(const nb_tape *t, nb_tvar v, int32_t bit) {
    return v >= 0 && t->vals[v].dtype == NB_BF16 ? bit : 0;
}

/* Work items of an EW kernel: float4 chunks plus the scalar tail (or all scalars). */
static int64_t ew_items(const tk_args *a) {
    return a->v4 ? a->n / 4 + a->n % 4 : a->n;
}

static nb_status tk_ew(nb_tape *t, int id, tk_args *a) {
    a->v4 = al16(a->a) && al16(a->b) && al16(a->y) && al16(a->y2);
    return tk_launch(t, id, a, ew_items(a));
}

static nb_status tk_check_count(const char *op, int64_t n) {
    if (n >= ((int64_t)1 << 31))
        return nb_error(NB_ERR_UNSUPPORTED, "tape (CUDA): %s on %lld elements (>= 2^31)", op,
                        (long long)n);
    return NB_OK;
}

/* The timestep embedding's parameter block (struct TE of the kernels). */
typedef struct tk_temb_args {
    float *y;
    const float *tsp;
    int32_t n, dim;
    double lmp;
    float ts[NB_TAPE_TEMB_MAX];
} tk_temb_args;

nb_status nb_tape_cuda_timestep_embedding(nb_tape *t, float *y, int64_t n, const float *timesteps,
                                          int dim, float max_period) {
    if (n > NB_TAPE_TEMB_MAX || n * dim >= ((int64_t)1 << 31))
        return nb_error(NB_ERR_INTERNAL, "tape (CUDA): timestep embedding of %lld x %d", (long long)n,
                        dim);
    tk_temb_args a;
    memset(&a, 0, sizeof a);
    a.y = y;
    a.n = (int32_t)n;
    a.dim = dim;
    a.lmp = log((double)max_period);
    if (t->temb_dev) a.tsp = t->temb_dev; /* nb_tape_set_device_timesteps */
    else memcpy(a.ts, timesteps, (size_t)n * sizeof(float));
    nb_jit_kernel *k;
    nb_status s = tk_kernel(t, NB_TK_TEMB, &k);
    return s ? s : nb_jit_launch_cuda(k, &a, sizeof a, n * dim, nb_device_stream(t->dev));
}

nb_status nb_tape_cuda_add_scalar(nb_tape *t, float *p, float v) {
    tk_args a = {.y = p, .n = 1, .f = v};
    return tk_launch(t, NB_TK_ADD_SCALAR, &a, 1);
}

/* ---- SiLU ----------------------------------------------------------------------------------- */

/* y = f(x) elementwise (kernel id: relu; SiLU's forward is .nb, below) */
static nb_status ew_unary_fwd(nb_tape *t, nb_top *op, int id, const char *name) {
    const nb_tval *x = VAL(t, op->in[0]);
    nb_status s = tk_check_count(name, x->count);
    if (s) return s;
    tk_args a = {.a = x->data, .y = VAL(t, op->out)->data, .n = (int32_t)x->count,
                 .dt = bfbit(t, op->in[0], TK_A) | bfbit(t, op->out, TK_Y)};
    return tk_ew(t, id, &a);
}

/* The forward is lib/nn_ops.nb's nn_silu through a prepared call (tape_nbrows.c); measured
 * against the hand-written kernel it replaced in docs/PERF.md. */
nb_status nb_op_silu_cuda_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]), *y = VAL(t, op->out);
    nb_status s = tk_check_count("silu", x->count);
    if (s) return s;
    return nb_tape_nb_unary(t, NB_TNB_SILU, x->data, x->dtype, y->data, y->dtype, x->count);
}

/* dx (+)= dy * f'(x) elementwise (kernel id reads a = x, b = dy) */
static nb_status ew_unary_bwd(nb_tape *t, const nb_top *op, int id) {
    const nb_tval *x = VAL(t, op->in[0]);
    float *dx;
    int ow;
    nb_status s = nb_tape_grad_buf_w(t, op->in[0], &dx, &ow);
    if (s || !dx) return s;
    tk_args a = {.a = x->data, .b = VAL(t, op->out)->grad, .y = dx, .n = (int32_t)x->count, .ow = ow,
                 .dt = bfbit(t, op->in[0], TK_A | TK_Y) | bfbit(t, op->out, TK_B)};
    return tk_ew(t, id, &a);
}

nb_status nb_op_silu_cuda_bwd(nb_tape *t, const nb_top *op) {
    return ew_unary_bwd(t, op, NB_TK_SILU_BWD);
}

/* dst += src over count f32 elements: the add backward's kernel with one output, accumulating. */
nb_status nb_tape_cuda_accumulate(nb_tape *t, float *dst, const float *src, int64_t count) {
    nb_status s = tk_check_count("accumulate", count);
    if (s) return s;
    tk_args a = {.a = src, .y = dst, .n = (int32_t)count};
    return tk_ew(t, NB_TK_ACC, &a);
}

/* ---- add (backward: dy into both inputs' gradients), reshape (a view) ----------------------- */

nb_status nb_op_add_cuda_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    nb_status s = tk_check_count("add", x->count);
    if (s) return s;
    tk_args a = {.a = x->data, .b = VAL(t, op->in[1])->data, .y = VAL(t, op->out)->data,
                 .n = (int32_t)x->count,
                 .dt = bfbit(t, op->in[0], TK_A) | bfbit(t, op->in[1], TK_B) | bfbit(t, op->out, TK_Y)};
    return tk_ew(t, NB_TK_ADD_FWD, &a);
}

/* Gradients of both inputs += the output's gradient. */
nb_status nb_op_add_cuda_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *o = VAL(t, op->out);
    float *d0 = NULL, *d1 = NULL;
    int w0 = 0, w1 = 0; /* add(x, x): the first stores, the second adds (in order, per thread) */
    nb_status s = nb_tape_grad_buf_w(t, op->in[0], &d0, &w0);
    if (!s) s = nb_tape_grad_buf_w(t, op->in[1], &d1, &w1);
    if (s || (!d0 && !d1)) return s;
    tk_args a = {.a = o->grad, .y = d0, .y2 = d1, .n = (int32_t)o->count, .ow = w0 | w1 << 1,
                 .dt = bfbit(t, op->out, TK_A) | bfbit(t, op->in[0], TK_Y) | bfbit(t, op->in[1], TK_Y2)};
    return tk_ew(t, NB_TK_ACC, &a);
}

/* Reshape on CUDA is a view: the output shares the input's data (values are never written after
 * their op) and, through alias1, its gradient buffer, so neither direction runs a kernel. (The
 * arena slot carved for the output's own data stays unused.) */
nb_status nb_op_reshape_cuda_fwd(nb_tape *t, nb_top *op) {
    nb_tval *o = VAL(t, op->out);
    o->data = VAL(t, op->in[0])->data;
    o->alias1 = op->in[0] + 1;
    return NB_OK;
}

nb_status nb_op_reshape_cuda_bwd(nb_tape *t, const nb_top *op) {
    (void)t, (void)op; /* the gradient already landed in the input's buffer */
    return NB_OK;
}

/* ---- per-channel add: x [N,C,H,W] + c [N,C] ------------------------------------------------- */

nb_status nb_op_add_channel_cuda_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    nb_status s = tk_check_count("add_channel", x->count);
    if (s) return s;
    int64_t HW = x->shape[2] * x->shape[3];
    tk_args a = {.a = x->data, .b = VAL(t, op->in[1])->data, .y = VAL(t, op->out)->data,
                 .n = (int32_t)x->count, .d0 = (int32_t)HW,
                 .dt = bfbit(t, op->in[0], TK_A) | bfbit(t, op->in[1], TK_B) | bfbit(t, op->out, TK_Y)};
    a.v4 = HW % 4 == 0 && al16(a.a) && al16(a.y);
    return tk_launch(t, NB_TK_ADDC_FWD, &a, ew_items(&a));
}

nb_status nb_op_add_channel_cuda_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    float *dx, *dc;
    int wx, wc;
    nb_status s;
    if ((s = nb_tape_grad_buf_w(t, op->in[0], &dx, &wx)) ||
        (s = nb_tape_grad_buf_w(t, op->in[1], &dc, &wc)))
        return s;
    if (!dx && !dc) return NB_OK;
    int64_t NC = x->shape[0] * x->shape[1], HW = x->shape[2] * x->shape[3];
    tk_args a = {.a = VAL(t, op->out)->grad, .y = dx, .y2 = dc, .n = (int32_t)x->count,
                 .d0 = (int32_t)HW, .d1 = (int32_t)NC, .ow = wx | wc << 1,
                 .dt = bfbit(t, op->out, TK_A) | bfbit(t, op->in[0], TK_Y) | bfbit(t, op->in[1], TK_Y2)};
    a.v4 = al16(a.a) && al16(a.y);
    return tk_launch(t, NB_TK_ADDC_BWD, &a, NC * 32); /* a warp per row */
}

/* ---- channel concat ------------------------------------------------------------------------- */

nb_status nb_op_concat_cuda_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *A = VAL(t, op->in[0]), *B = VAL(t, op->in[1]), *o = VAL(t, op->out);
    nb_status s = tk_check_count("concat", o->count);
    if (s) return s;
    int64_t N = A->shape[0];
    tk_args a = {.a = A->data, .b = B->data, .y = o->data, .n = (int32_t)o->count,
                 .d0 = (int32_t)(A->count / N), .d1 = (int32_t)(B->count / N),
                 .dt = bfbit(t, op->in[0], TK_A) | bfbit(t, op->in[1], TK_B) | bfbit(t, op->out, TK_Y)};
    a.v4 = a.d0 % 4 == 0 && a.d1 % 4 == 0 && al16(a.a) && al16(a.b) && al16(a.y);
    return tk_launch(t, NB_TK_CONCAT_FWD, &a, ew_items(&a));
}

nb_status nb_op_concat_cuda_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *A = VAL(t, op->in[0]), *B = VAL(t, op->in[1]), *o = VAL(t, op->out);
    float *da, *db;
    int wa, wb;
    nb_status s;
    if ((s = nb_tape_grad_buf_w(t, op->in[0], &da, &wa)) ||
        (s = nb_tape_grad_buf_w(t, op->in[1], &db, &wb)))
        return s;
    if (!da && !db) return NB_OK;
    int64_t N = A->shape[0];
    tk_args a = {.a = o->grad, .y = da, .y2 = db, .n = (int32_t)o->count,
                 .d0 = (int32_t)(A->count / N), .d1 = (int32_t)(B->count / N), .ow = wa | wb << 1,
                 .dt = bfbit(t, op->out, TK_A) | bfbit(t, op->in[0], TK_Y) | bfbit(t, op->in[1], TK_Y2)};
    a.v4 = a.d0 % 4 == 0 && a.d1 % 4 == 0 && al16(a.a) && al16(a.y) && al16(a.y2);
    if (da && da == db) {
        /* concat(x, x): both halves land on the same gradient; two passes avoid a race */
        a.y2 = NULL;
        if ((s = tk_launch(t, NB_TK_CONCAT_BWD, &a, ew_items(&a)))) return s;
        a.y = NULL;
        a.y2 = db;
    }
    return tk_launch(t, NB_TK_CONCAT_BWD, &a, ew_items(&a));
}

/* ---- nearest upsample ×2, average pool 2×2 (float2 accesses: W of the larger side is even) -- */

nb_status nb_op_upsample2x_cuda_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    nb_status s = tk_check_count("upsample2x", 4 * x->count);
    if (s) return s;
    tk_args a = {.a = x->data, .y = VAL(t, op->out)->data, .n = (int32_t)x->count,
                 .d0 = (int32_t)x->shape[2], .d1 = (int32_t)x->shape[3],
                 .dt = bfbit(t, op->in[0], TK_A) | bfbit(t, op->out, TK_Y)};
    return tk_launch(t, NB_TK_UP_FWD, &a, a.n);
}

nb_status nb_op_upsample2x_cuda_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    float *dx;
    int ow;
    nb_status s = nb_tape_grad_buf_w(t, op->in[0], &dx, &ow);
    if (s || !dx) return s;
    tk_args a = {.a = VAL(t, op->out)->grad, .y = dx, .n = (int32_t)x->count,
                 .d0 = (int32_t)x->shape[2], .d1 = (int32_t)x->shape[3], .ow = ow,
                 .dt = bfbit(t, op->out, TK_A) | bfbit(t, op->in[0], TK_Y)};
    return tk_launch(t, NB_TK_UP_BWD, &a, a.n);
}

nb_status nb_op_avgpool2x_cuda_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]), *o = VAL(t, op->out);
    nb_status s = tk_check_count("avgpool2x", x->count);
    if (s) return s;
    tk_args a = {.a = x->data, .y = o->data, .n = (int32_t)o->count, .d0 = (int32_t)x->shape[2],
                 .d1 = (int32_t)x->shape[3],
                 .dt = bfbit(t, op->in[0], TK_A) | bfbit(t, op->out, TK_Y)};
    return tk_launch(t, NB_TK_POOL_FWD, &a, a.n);
}

nb_status nb_op_avgpool2x_cuda_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]), *o = VAL(t, op->out);
    float *dx;
    int ow;
    nb_status s = nb_tape_grad_buf_w(t, op->in[0], &dx, &ow);
    if (s || !dx) return s;
    tk_args a = {.a = o->grad, .y = dx, .n = (int32_t)o->count, .d0 = (int32_t)x->shape[2],
                 .d1 = (int32_t)x->shape[3], .ow = ow,
                 .dt = bfbit(t, op->out, TK_A) | bfbit(t, op->in[0], TK_Y)};
    return tk_launch(t, NB_TK_POOL_BWD, &a, a.n);
}

/* ---- MSE: deterministic two-pass reduction (block partials in double, then one block) ------- */

nb_status nb_op_mse_cuda_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *p = VAL(t, op->in[0]), *q = VAL(t, op->in[1]);
    nb_status s = tk_check_count("mse", p->count);
    if (s) return s;
    tk_args a = {.a = p->data, .b = q->data, .n = (int32_t)p->count,
                 .dt = bfbit(t, op->in[0], TK_A) | bfbit(t, op->in[1], TK_B)};
    a.v4 = al16(a.a) && al16(a.b);
    int64_t items = ew_items(&a), blocks = (items + 255) / 256;
    if (blocks > 1024) blocks = 1024; /* fixed by n alone: the same sum order every run */
    double *part = (double *)nb_tape_alloc_f32(t, 2 * blocks, 0);
    if (!part) return NB_ERR_OUT_OF_MEMORY;
    a.y2 = (float *)part;
    if ((s = tk_launch_grid(t, NB_TK_MSE_PART, &a, (unsigned)blocks, 1, 1, 256, 1))) return s;
    tk_args f = {.c = (const float *)part, .y = VAL(t, op->out)->data, .n = (int32_t)p->count,
                 .d0 = (int32_t)blocks};
    return tk_launch_grid(t, NB_TK_MSE_FIN, &f, 1, 1, 1, 256, 1);
}

nb_status nb_op_mse_cuda_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *p = VAL(t, op->in[0]), *q = VAL(t, op->in[1]);
    float *dp, *dq;
    int wp, wq;
    nb_status s;
    if ((s = nb_tape_grad_buf_w(t, op->in[0], &dp, &wp)) ||
        (s = nb_tape_grad_buf_w(t, op->in[1], &dq, &wq)))
        return s;
    if (!dp && !dq) return NB_OK;
    tk_args a = {.a = p->data, .b = q->data, .c = VAL(t, op->out)->grad, .y = dp, .y2 = dq,
                 .n = (int32_t)p->count, .ow = wp | wq << 1,
                 .dt = bfbit(t, op->in[0], TK_A | TK_Y) | bfbit(t, op->in[1], TK_B | TK_Y2)};
    return tk_ew(t, NB_TK_MSE_BWD, &a);
}

/* IN_BF16 only: the loss [1] stays f32 (so does its gradient, read by tk_mse_bwd as c[0]) */

/* ---- transpose of the last two dims (32×32 shared-memory tiles) ----------------------------- */

static nb_status tr_run(nb_tape *t, const float *src, float *dst, int64_t B, int64_t R, int64_t C,
                        int ow, int32_t dt) {
    if (B > 65535)
        return nb_error(NB_ERR_UNSUPPORTED, "tape (CUDA): transpose over %lld matrices (> 65535)",
                        (long long)B);
    tk_args a = {.a = src, .y = dst, .d0 = (int32_t)R, .d1 = (int32_t)C, .ow = ow, .dt = dt};
    return tk_launch_grid(t, NB_TK_TR, &a, (unsigned)((C + 31) / 32), (unsigned)((R + 31) / 32),
                          (unsigned)B, 32, 8);
}

nb_status nb_op_transpose_cuda_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    nb_status s = tk_check_count("transpose", x->count);
    if (s) return s;
    int64_t R = x->shape[x->ndim - 2], C = x->shape[x->ndim - 1];
    return tr_run(t, x->data, VAL(t, op->out)->data, x->count / (R * C), R, C, 1,
                  bfbit(t, op->in[0], TK_A) | bfbit(t, op->out, TK_Y));
}

nb_status nb_op_transpose_cuda_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    float *dx;
    int ow;
    nb_status s = nb_tape_grad_buf_w(t, op->in[0], &dx, &ow);
    if (s || !dx) return s;
    int64_t R = x->shape[x->ndim - 2], C = x->shape[x->ndim - 1];
    /* dy is [B, C, R]: transposing it back gives [B, R, C], stored or accumulated into dx */
    return tr_run(t, VAL(t, op->out)->grad, dx, x->count / (R * C), C, R, ow,
                  bfbit(t, op->out, TK_A) | bfbit(t, op->in[0], TK_Y));
}

/* ---- channel slice -------------------------------------------------------------------------- */

static void slice_args(nb_tape *t, const nb_top *op, tk_args *a) {
    const nb_tval *x = VAL(t, op->in[0]), *o = VAL(t, op->out);
    int64_t N = x->shape[0], S = x->count / (N * x->shape[1]);
    memset(a, 0, sizeof *a);
    a->n = (int32_t)o->count;
    a->d0 = (int32_t)(o->count / N);
    a->d1 = (int32_t)(x->count / N);
    a->d2 = (int32_t)(op->ip[0] * S);
}

nb_status nb_op_slice_channels_cuda_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    nb_status s = tk_check_count("slice_channels", x->count);
    if (s) return s;
    tk_args a;
    slice_args(t, op, &a);
    a.a = x->data;
    a.y = VAL(t, op->out)->data;
    a.dt = bfbit(t, op->in[0], TK_A) | bfbit(t, op->out, TK_Y);
    a.v4 = a.d0 % 4 == 0 && a.d1 % 4 == 0 && a.d2 % 4 == 0 && al16(a.a) && al16(a.y);
    return tk_launch(t, NB_TK_SLICE_FWD, &a, ew_items(&a));
}

nb_status nb_op_slice_channels_cuda_bwd(nb_tape *t, const nb_top *op) {
    float *dx;
    nb_status s = nb_tape_grad_buf(t, op->in[0], &dx);
    if (s || !dx) return s;
    tk_args a;
    slice_args(t, op, &a);
    a.a = VAL(t, op->out)->grad;
    a.y = dx;
    a.dt = bfbit(t, op->out, TK_A) | bfbit(t, op->in[0], TK_Y);
    a.v4 = a.d0 % 4 == 0 && a.d1 % 4 == 0 && a.d2 % 4 == 0 && al16(a.a) && al16(a.y);
    return tk_launch(t, NB_TK_SLICE_BWD, &a, ew_items(&a));
}


/* ---- ReLU, row softmax (CPU reference: tape_ops_act.c) -------------------------------------- */

nb_status nb_op_relu_cuda_fwd(nb_tape *t, nb_top *op) {
    return ew_unary_fwd(t, op, NB_TK_RELU_FWD, "relu");
}

nb_status nb_op_relu_cuda_bwd(nb_tape *t, const nb_top *op) {
    return ew_unary_bwd(t, op, NB_TK_RELU_BWD);
}

/* dz = (y > 0 ? dy : 0): the relu backward kernel storing (ow) into a fresh buffer */
nb_status nb_tape_cuda_relu_grad(nb_tape *t, void *dz, const void *y, const void *dy, int64_t count,
                                 nb_dtype dt) {
    nb_status s = tk_check_count("relu gradient", count);
    if (s || count <= 0) return s;
    if (dt != NB_F32 && dt != NB_BF16)
        return nb_error(NB_ERR_INTERNAL, "nb_tape_relu_grad: dtype %s", nb_dtype_name(dt));
    tk_args a = {.a = y, .b = dy, .y = dz, .n = (int32_t)count, .ow = 1,
                 .dt = dt == NB_BF16 ? TK_A | TK_B | TK_Y : 0};
    return tk_ew(t, NB_TK_RELU_BWD, &a);
}

/* rows of D = the last dim; a warp per row */
static void sm_dims(const nb_tval *x, tk_args *a) {
    int64_t D = x->shape[x->ndim - 1];
    a->d0 = (int32_t)D;
    a->d1 = (int32_t)(D ? x->count / D : 0);
}

nb_status nb_op_softmax_cuda_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    nb_status s = tk_check_count("softmax", x->count);
    if (s) return s;
    tk_args a = {.a = x->data, .y = VAL(t, op->out)->data, .n = (int32_t)x->count,
                 .dt = bfbit(t, op->in[0], TK_A) | bfbit(t, op->out, TK_Y)};
    sm_dims(x, &a);
    return tk_launch(t, NB_TK_SOFTMAX_FWD, &a, (int64_t)a.d1 * 32);
}

nb_status nb_op_softmax_cuda_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]), *o = VAL(t, op->out);
    float *dx;
    int ow;
    nb_status s = nb_tape_grad_buf_w(t, op->in[0], &dx, &ow);
    if (s || !dx) return s;
    tk_args a = {.a = o->data, .b = o->grad, .y = dx, .n = (int32_t)x->count, .ow = ow,
                 .dt = bfbit(t, op->out, TK_A | TK_B) | bfbit(t, op->in[0], TK_Y)};
    sm_dims(x, &a);
    return tk_launch(t, NB_TK_SOFTMAX_BWD, &a, (int64_t)a.d1 * 32);
}

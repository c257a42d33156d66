/* CUDA row of the tape's scaled-dot-product attention: fused, FlashAttention-2 style (kernels
 * and their design in attn_cuda_kernels.h; raw-buffer entry points in attn_cuda.h). The CPU
 * reference is tape_ops_attn.c (it materialises P; this path never holds more than a 64 x 64
 * tile of scores).
 *
 * Forward: o and the row log-sum-exp (op->saved[0], [BH,Tq] in the tape arena) in one launch.
 * Backward: delta = rowsum(dO * O) (arena scratch), then one launch for dq, dk, dv, which
 * accumulate into the inputs' gradient buffers (absent when an input needs no gradient).
 *
 * Precision: NB_TAPE_FP32 runs the fp32 SIMT kernels (exact fp32 math, any d <= 128); TF32 and
 * BF16 run the tensor-core kernels of attn_cuda_tc.h (mma.sync, fp32 accumulation and storage)
 * for d <= 64 on compute capability 8.0+, and the SIMT kernels otherwise (64 < d <= 128).
 */
#include <math.h>

#include "core/util.h"
#include "nn/attn_cuda.h"
#include "nn/attn_cuda_kernels.h"
#include "nn/attn_cuda_tc.h"
#include "nn/encoding_internal.h"
#include "nn/tape_internal.h"

/* Host mirrors of the kernels' argument structs (attn_cuda_kernels.h). */
typedef struct {
    const float *q, *k, *v;
    float *o, *lse;
    int32_t Tq, Tk, d, ntiles;
    float sl2;
} attn_fwd_args;

typedef struct {
    const float *q, *k, *v, *dout, *lse, *delta;
    float *dq, *dk, *dv;
    int32_t Tq, Tk, d, ntiles;
    float sl2, scale;
} attn_bwd_args;

typedef struct {
    const float *o, *dout;
    float *delta;
    long long rows;
    int32_t d;
} attn_delta_args;

#define ATTN_BQ 64
#define ATTN_BK 64
#define ATTN_NT 256

static const char *const attn_src[4] = {NB_ATTN_SRC(16), NB_ATTN_SRC(32), NB_ATTN_SRC(64),
                                        NB_ATTN_SRC(128)};

static const char *const attn_src_tc[3][2] = {
    {NB_ATTN_SRC_TC(16, 0), NB_ATTN_SRC_TC(16, 1)},
    {NB_ATTN_SRC_TC(32, 0), NB_ATTN_SRC_TC(32, 1)},
    {NB_ATTN_SRC_TC(64, 0), NB_ATTN_SRC_TC(64, 1)},
};

/* Padded head dim and its source: *tc = 1 for the tensor-core module (TF32 / BF16, DP <= 64,
 * compute capability 8.0+). */
static int attn_dp(nb_device *dev, int64_t d, int precision, const char **src, int *tc) {
    int i = d <= 16 ? 0 : d <= 32 ? 1 : d <= 64 ? 2 : 3;
    *tc = i < 3 && (precision == NB_TAPE_TF32 || precision == NB_TAPE_BF16) &&
          nb_device_get_info(dev)->cc_major >= 8;
    *src = *tc ? attn_src_tc[i][precision == NB_TAPE_BF16] : attn_src[i];
    return 16 << i;
}

nb_status nb_attn_cuda_check(const char *fn, int64_t BH, int64_t Tq, int64_t Tk, int64_t d) {
    if (d < 1 || d > NB_ATTN_CUDA_MAX_D)
        return nb_error(NB_ERR_UNSUPPORTED,
                        "%s: head dim d = %lld is not supported by the CUDA fused attention "
                        "(limit of %d)",
                        fn, (long long)d, NB_ATTN_CUDA_MAX_D);
    if (BH < 1 || Tq < 1 || Tk < 1 || Tq >= ((int64_t)1 << 30) || Tk >= ((int64_t)1 << 30))
        return nb_error(NB_ERR_SHAPE,
                        "%s: sequence lengths Tq = %lld, Tk = %lld (N*heads = %lld) must be in 1..2^30",
                        fn, (long long)Tq, (long long)Tk, (long long)BH);
    int64_t tiles = (Tq > Tk ? Tq : Tk) / 64 + 1;
    if (BH * tiles >= ((int64_t)1 << 31))
        return nb_error(NB_ERR_SHAPE, "%s: N*heads = %lld x %lld tiles exceeds the CUDA grid", fn,
                        (long long)BH, (long long)tiles);
    return NB_OK;
}

static nb_status attn_launch(nb_device *dev, const char *src, const char *entry, unsigned blocks,
                             unsigned threads, size_t smem, void *args) {
    nb_jit_kernel *k;
    NB_TRY(nb_nn_cuda_kernel(dev, src, entry, &k));
    const unsigned grid[3] = {blocks, 1, 1}, block[3] = {threads, 1, 1};
    void *argv[1] = {args};
    return nb_cuda_launch(nb_jit_kernel_cuda_fn(k), grid, block, (unsigned)smem,
                          nb_device_stream(dev), argv);
}

nb_status nb_attn_cuda_forward(nb_device *dev, int precision, const float *q, const float *k,
                               const float *v, float *o, float *lse, int64_t BH, int64_t Tq,
                               int64_t Tk, int64_t d) {
    NB_TRY(nb_attn_cuda_check("attention (CUDA forward)", BH, Tq, Tk, d));
    const char *src;
    int tc, dp = attn_dp(dev, d, precision, &src, &tc);
    int64_t ntiles = (Tq + ATTN_BQ - 1) / ATTN_BQ;
    attn_fwd_args a = {q, k, v, o, lse, (int32_t)Tq, (int32_t)Tk, (int32_t)d, (int32_t)ntiles,
                       (float)(1.4426950408889634 / sqrt((double)d))};
    if (tc) /* Q, K at stride dp + 8, V at dp + 4 */
        return attn_launch(dev, src, "nb_attn_fwd_tc", (unsigned)(ntiles * BH), 128,
                           (size_t)64 * (3 * dp + 20) * 4, &a);
    size_t smem = ((size_t)(ATTN_BQ + 2 * ATTN_BK) * (dp + 4) + (size_t)ATTN_BQ * (ATTN_BK + 4)) * 4;
    return attn_launch(dev, src, "nb_attn_fwd", (unsigned)(ntiles * BH), ATTN_NT, smem, &a);
}

nb_status nb_attn_cuda_backward(nb_device *dev, int precision, const float *q, const float *k,
                                const float *v, const float *o, const float *dout,
                                const float *lse, float *delta, float *dq, float *dk, float *dv,
                                int64_t BH, int64_t Tq, int64_t Tk, int64_t d) {
    NB_TRY(nb_attn_cuda_check("attention (CUDA backward)", BH, Tq, Tk, d));
    if (!dq && !dk && !dv) return NB_OK;
    const char *src, *src32; /* delta comes from the fp32 module */
    int tc, tc32, dp = attn_dp(dev, d, precision, &src, &tc);
    attn_dp(dev, d, NB_TAPE_FP32, &src32, &tc32);
    int64_t rows = BH * Tq, blocks = (rows + 7) / 8;
    if (blocks > 65535) blocks = 65535;
    attn_delta_args da = {o, dout, delta, rows, (int32_t)d};
    NB_TRY(attn_launch(dev, src32, "nb_attn_delta", (unsigned)blocks, 256, 0, &da));
    int64_t ntiles = (Tk + ATTN_BK - 1) / ATTN_BK;
    attn_bwd_args a = {q, k, v, dout, lse, delta, dq, dk, dv,
                       (int32_t)Tq, (int32_t)Tk, (int32_t)d, (int32_t)ntiles,
                       (float)(1.4426950408889634 / sqrt((double)d)), (float)(1.0 / sqrt((double)d))};
    if (tc) /* K at stride dp + 4; V, Q, dO at dp + 8; dS 64 x 72; lse, delta */
        return attn_launch(dev, src, "nb_attn_bwd_tc", (unsigned)(ntiles * BH), 128,
                           ((size_t)64 * (4 * dp + 28 + 72) + 128) * 4, &a);
    size_t smem = ((size_t)(2 * ATTN_BK + 2 * ATTN_BQ) * (dp + 4) +
                   (size_t)3 * ATTN_BQ * (ATTN_BK + 4) + 2 * ATTN_BQ) * 4;
    return attn_launch(dev, src, "nb_attn_bwd", (unsigned)(ntiles * BH), ATTN_NT, smem, &a);
}

/* ---- the tape row ----------------------------------------------------------------------- */

#define VAL(t, v) (&(t)->vals[(v)])

static nb_status attn_cuda_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *q = VAL(t, op->in[0]), *k = VAL(t, op->in[1]), *v = VAL(t, op->in[2]);
    const nb_tval *o = VAL(t, op->out);
    int64_t BH = q->shape[0] * q->shape[1], Tq = q->shape[2], Tk = k->shape[2], d = q->shape[3];
    NB_TRY(nb_attn_cuda_check("nb_tape_attention", BH, Tq, Tk, d));
    op->saved[0] = nb_tape_alloc_f32(t, BH * Tq, 0);
    if (!op->saved[0]) return NB_ERR_OUT_OF_MEMORY;
    return nb_attn_cuda_forward(t->dev, t->precision, q->data, k->data, v->data, o->data,
                                op->saved[0], BH, Tq, Tk, d);
}

static nb_status attn_cuda_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *q = VAL(t, op->in[0]), *k = VAL(t, op->in[1]), *v = VAL(t, op->in[2]);
    const nb_tval *o = VAL(t, op->out);
    int64_t BH = q->shape[0] * q->shape[1], Tq = q->shape[2], Tk = k->shape[2], d = q->shape[3];
    float *dq, *dk, *dv;
    NB_TRY(nb_tape_grad_buf(t, op->in[0], &dq));
    NB_TRY(nb_tape_grad_buf(t, op->in[1], &dk));
    NB_TRY(nb_tape_grad_buf(t, op->in[2], &dv));
    if (!dq && !dk && !dv) return NB_OK;
    float *delta = nb_tape_alloc_f32(t, BH * Tq, 0);
    if (!delta) return NB_ERR_OUT_OF_MEMORY;
    return nb_attn_cuda_backward(t->dev, t->precision, q->data, k->data, v->data, o->data,
                                 o->grad, op->saved[0], delta, dq, dk, dv, BH, Tq, Tk, d);
}

const nb_top_cuda_impl nb_top_attention_cuda = {attn_cuda_fwd, attn_cuda_bwd, 0};

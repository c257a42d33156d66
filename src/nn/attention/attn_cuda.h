/* Fused scaled-dot-product attention on CUDA (tape_cuda_attn.c): the tape's attention rows
 * (nb_tape_attention, nb_tape_qkv_attention) and their kernels on raw device buffers (for tests
 * and benchmarks).
 *
 * Row-major form (f32):
 *   q [BH,Tq,d], k, v [BH,Tk,d], o, dout [BH,Tq,d]: f32, row-major, device addresses on dev.
 *   lse [BH,Tq]: written by the forward (row log-sum-exp of the scaled scores, base 2), read by
 *                the backward.
 *   delta [BH,Tq]: backward scratch (rowsum(dout * o)).
 *   dq, dk, dv: gradients ACCUMULATED into (+=, atomics: they may alias); any may be NULL.
 *
 *   nb_attn_cuda_forward(dev, NB_TAPE_FP32, q, k, v, o, lse, BH, Tq, Tk, d);
 *   nb_attn_cuda_backward(dev, NB_TAPE_FP32, q, k, v, o, dout, lse, delta, dq, dk, dv, BH, Tq, Tk, d);
 *
 * Strided form (nb_attn_view: any strides, f32 or bf16 storage): element (bh, position t,
 * feature i) of a view at p[bh * bs + t * rs + i * cs]. The legacy QKV layout
 * qkv [N, heads * 3d, L] gives q = {qkv, 3dL, 1, L}, k = {qkv + dL, ...}, v = {qkv + 2dL, ...}
 * with BH = N * heads, and o [N, heads * d, L] = {o, dL, 1, L}: feature-major, positions
 * contiguous (the kernels then load tiles along positions).
 *
 *   nb_attn_cuda_forward_v(dev, prec, &q, &k, &v, &o, lse, BH, Tq, Tk, d);
 *   nb_attn_cuda_backward_v(dev, prec, &q, &k, &v, &o, &dout, lse, delta, &dq, &dk, &dv,
 *                           NB_ATTN_GRAD_STORE, scratch, BH, Tq, Tk, d);
 *
 * Gradient modes: NB_ATTN_GRAD_ATOMIC accumulates with atomics (f32 gradients only; they may
 * alias one another: self-attention); NB_ATTN_GRAD_STORE writes every element of each present
 * gradient (no zero fill needed) and NB_ATTN_GRAD_ADD accumulates, both for gradients in
 * disjoint memory (f32 or bf16). A gradient with p == NULL is not wanted. In STORE / ADD mode a
 * bf16 dq over more than one 64-key tile accumulates in an f32 scratch of
 * nb_attn_cuda_dq_scratch(...) floats (caller-provided device memory) and is converted at the
 * end; an f32 dq accumulates in place (zeroed first in STORE mode).
 *
 * Kernel choice (tape_cuda_attn.c): feature-major views with d <= 32 and Tq, Tk <= 256 can run
 * the whole-sequence kernels (one block per batch-head in the backward: dq is stored, no
 * scratch; nb_attn_cuda_dq_scratch then returns 0); by default BF16 with all-bf16 storage does
 * (forward and backward), and TF32 for the forward when Tq > 64 (measured on the H100).
 *
 * Limits: 1 <= d <= NB_ATTN_CUDA_MAX_D; Tq, Tk < 2^30. Work is queued on nb_device_stream(dev);
 * nothing synchronises. precision: nb_tape_precision: FP32 = fp32 SIMT kernels; TF32 / BF16 =
 * tensor-core kernels (fp32 accumulation) for d <= 64, the SIMT kernels above that.
 * dq's accumulation order over key tiles (atomics) is not deterministic run to run.
 */
#ifndef NB_NN_ATTN_CUDA_H
#define NB_NN_ATTN_CUDA_H

#include <stdint.h>

#include "nabla/device.h"
#include "nabla/status.h"

#define NB_ATTN_CUDA_MAX_D 128

/* A strided [BH, T, d] view (mirrors the kernels' struct Mat field by field). */
typedef struct nb_attn_view {
    void *p;               /* device address; NULL = absent (gradients) */
    long long bs, rs, cs;  /* element strides: batch-head, position, feature */
    int bf16;              /* 1: bf16 storage, 0: f32 */
} nb_attn_view;

enum { NB_ATTN_GRAD_ATOMIC = 0, NB_ATTN_GRAD_STORE = 1, NB_ATTN_GRAD_ADD = 2 };

/* NB_ERR_UNSUPPORTED / NB_ERR_SHAPE naming the limit when the sizes are out of the kernels' range. */
nb_status nb_attn_cuda_check(const char *fn, int64_t BH, int64_t Tq, int64_t Tk, int64_t d);

nb_status nb_attn_cuda_forward(nb_device *dev, int precision, const float *q, const float *k,
                               const float *v, float *o, float *lse, int64_t BH, int64_t Tq,
                               int64_t Tk, int64_t d);

nb_status nb_attn_cuda_backward(nb_device *dev, int precision, const float *q, const float *k,
                                const float *v, const float *o, const float *dout,
                                const float *lse, float *delta, float *dq, float *dk, float *dv,
                                int64_t BH, int64_t Tq, int64_t Tk, int64_t d);

nb_status nb_attn_cuda_forward_v(nb_device *dev, int precision, const nb_attn_view *q,
                                 const nb_attn_view *k, const nb_attn_view *v,
                                 const nb_attn_view *o, float *lse, int64_t BH, int64_t Tq,
                                 int64_t Tk, int64_t d);

/* Floats of f32 scratch nb_attn_cuda_backward_v needs for dq with these arguments (0: none;
 * scratch may then be NULL). */
int64_t nb_attn_cuda_dq_scratch(nb_device *dev, int precision, const nb_attn_view *q,
                                const nb_attn_view *k, const nb_attn_view *v,
                                const nb_attn_view *o, const nb_attn_view *dout,
                                const nb_attn_view *dq, const nb_attn_view *dk,
                                const nb_attn_view *dv, int mode, int64_t BH, int64_t Tq,
                                int64_t Tk, int64_t d);

nb_status nb_attn_cuda_backward_v(nb_device *dev, int precision, const nb_attn_view *q,
                                  const nb_attn_view *k, const nb_attn_view *v,
                                  const nb_attn_view *o, const nb_attn_view *dout,
                                  const float *lse, float *delta, const nb_attn_view *dq,
                                  const nb_attn_view *dk, const nb_attn_view *dv, int mode,
                                  float *dq_scratch, int64_t BH, int64_t Tq, int64_t Tk, int64_t d);

#endif

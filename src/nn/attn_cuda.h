/* Fused scaled-dot-product attention on CUDA (tape_cuda_attn.c): the tape's attention row and
 * its kernels on raw device buffers (for tests and benchmarks).
 *
 *   q [BH,Tq,d], k, v [BH,Tk,d], o, dout [BH,Tq,d]: f32, row-major, device addresses on dev.
 *   lse [BH,Tq]: written by the forward (row log-sum-exp of the scaled scores, base 2), read by
 *                the backward.
 *   delta [BH,Tq]: backward scratch (rowsum(dout * o)).
 *   dq, dk, dv: gradients ACCUMULATED into (+=); any may be NULL (not wanted).
 *
 *   nb_attn_cuda_forward(dev, NB_TAPE_FP32, q, k, v, o, lse, BH, Tq, Tk, d);
 *   nb_attn_cuda_backward(dev, NB_TAPE_FP32, q, k, v, o, dout, lse, delta, dq, dk, dv, BH, Tq, Tk, d);
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

/* NB_ERR_UNSUPPORTED / NB_ERR_SHAPE naming the limit when the sizes are out of the kernels' range. */
nb_status nb_attn_cuda_check(const char *fn, int64_t BH, int64_t Tq, int64_t Tk, int64_t d);

nb_status nb_attn_cuda_forward(nb_device *dev, int precision, const float *q, const float *k,
                               const float *v, float *o, float *lse, int64_t BH, int64_t Tq,
                               int64_t Tk, int64_t d);

nb_status nb_attn_cuda_backward(nb_device *dev, int precision, const float *q, const float *k,
                                const float *v, const float *o, const float *dout,
                                const float *lse, float *delta, float *dq, float *dk, float *dv,
                                int64_t BH, int64_t Tq, int64_t Tk, int64_t d);

#endif

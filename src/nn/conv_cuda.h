/* CUDA linear and conv2d on raw device buffers (internal to src/nn; the tape's CUDA rows in
 * tape_cuda_conv.c call these). All pointers are device addresses on dev; work is queued on
 * nb_device_stream(dev). precision is an nb_tape_precision (FP32 exact, TF32, BF16 operands
 * with fp32 accumulation).
 *
 *   nb_conv_dims d;
 *   nb_conv_dims_make(&d, N, C, H, W, O, K, stride, pad);          // computes OH, OW
 *   nb_cuda_conv2d_forward(dev, NB_TAPE_TF32, &d, NB_F32, NB_F32, x, w, b, y);  // y := conv + b
 *   nb_cuda_conv2d_backward(dev, NB_TAPE_TF32, &d, NB_F32, NB_F32, x, w, dy, dx, dw, db, 0);
 *
 * Storage: the activations x / dx (dtype xdt) and y / dy (dtype ydt) are NB_F32 or NB_BF16
 * (bf16 = the top 16 bits of an f32, rounded to nearest even on store); bf16 storage needs
 * precision NB_TAPE_BF16 (FP32 / TF32 see f32 tensors only: NB_ERR_INVALID_ARG otherwise).
 * Weights, bias and their gradients are always f32 (converted to bf16 operands in scratch per
 * call); sums are f32 inside the kernels, a bf16 output is rounded once (bias added first).
 *
 * Layouts: x [N,C,H,W], w [O,C,K,K], b [O], y/dy [N,O,OH,OW]; linear x [N,F], w [O,F], b [O],
 * y [N,O]. Backward ACCUMULATES into dw / db, and into dx unless dx_store = 1: then every
 * element of dx is WRITTEN (its old contents are never read; the tape's first contribution,
 * nb_tape_grad_buf_w). dx / dw / db may each be NULL (not wanted); b may be NULL. Algorithms, chosen per part (forward, data gradient, weight gradient): the implicit-GEMM
 * kernels of conv_cuda_igemm.c (tensor cores for TF32 / BF16, FFMA for FP32) wherever they
 * apply and the tensors they read are 16-byte aligned (the tape's arena always is), else
 * im2col + cuBLAS; 1x1 stride-1 pad-0 convolutions run their forward and data gradient as one
 * strided-batched cuBLAS GEMM on NCHW in the automatic choice (faster than the kernels on the
 * UNet's 1x1 shapes, .export/device-results/conv/bench.log), their weight gradient on the
 * kernels. Linear is cuBLAS. With bf16 activations the cuBLAS GEMMs take bf16 operands
 * (CUDA_R_16BF, fp32 accumulation, output in y's / dx's dtype, or f32 for dw), im2col columns
 * are bf16, and the 1x1 weight gradient is one strided-batched bf16 GEMM into f32 partials
 * summed over the batch (automatic choice and algo 1). Sums
 * split across blocks are added atomically: the last bits vary from run to run. */
#ifndef NB_NN_CONV_CUDA_H
#define NB_NN_CONV_CUDA_H

#include <stdint.h>

#include "nabla/device.h"
#include "nabla/dtype.h"
#include "nabla/status.h"

typedef struct nb_conv_dims {
    int64_t N, C, H, W, O, K, stride, pad, OH, OW;
} nb_conv_dims;

/* Fills d and checks it: K 1 or 3, stride 1 or 2, pad 0..8, output >= 1x1, sizes in range. */
nb_status nb_conv_dims_make(nb_conv_dims *d, int64_t N, int64_t C, int64_t H, int64_t W,
                            int64_t O, int64_t K, int64_t stride, int64_t pad);

nb_status nb_cuda_conv2d_forward(nb_device *dev, int precision, const nb_conv_dims *d,
                                 nb_dtype xdt, nb_dtype ydt, const void *x, const float *w,
                                 const float *b, void *y);
nb_status nb_cuda_conv2d_backward(nb_device *dev, int precision, const nb_conv_dims *d,
                                  nb_dtype xdt, nb_dtype ydt, const void *x, const float *w,
                                  const void *dy, void *dx, float *dw, float *db, int dx_store);

nb_status nb_cuda_linear_forward(nb_device *dev, int precision, int64_t N, int64_t F, int64_t O,
                                 nb_dtype xdt, nb_dtype ydt, const void *x, const float *w,
                                 const float *b, void *y);
nb_status nb_cuda_linear_backward(nb_device *dev, int precision, int64_t N, int64_t F, int64_t O,
                                  nb_dtype xdt, nb_dtype ydt, const void *x, const float *w,
                                  const void *dy, void *dx, float *dw, float *db, int dx_store);

/* Compiles (or loads) every kernel a precision can use, in parallel: call once before a model's
 * first step to avoid compiling on first use (optional). */
nb_status nb_cuda_conv_prewarm(nb_device *dev, int precision);

/* Algorithm choice, for tests and benchmarks: 0 = automatic (default), 1 = always im2col +
 * cuBLAS, 2 = implicit GEMM wherever it supports the shape (else cuBLAS; 1x1 convolutions too).
 * Process-wide. */
void nb_cuda_conv_set_algo(int algo);
int nb_cuda_conv_get_algo(void);

/* Scratch memory per device: slot 0 im2col columns, 1 rearranged weights, 2 weight-gradient
 * partials, 3 / 4 converted copies of x / dy (dtype conversions), 5 an f32 output (split sums
 * into a bf16 tensor), 6 bf16 weights for cuBLAS, 7 split partials of conv_cuda_wgrad.c (slot 2
 * is kept zeroed between calls by the MODE 2 weight gradient). Grow-only, kept for the process's life; valid
 * until the next call for the slot (all users queue on the device's main stream, so reuse is
 * ordered). */
#define NB_CONV_SCRATCH_SLOTS 8
nb_status nb_conv_scratch(nb_device *dev, int slot, size_t bytes, float **out);

/* dst[i] (ddt) := src[i] (sdt), or dst += src with acc = 1, for i < n (NB_F32 / NB_BF16;
 * queued on the device's stream). */
nb_status nb_conv_convert(nb_device *dev, const void *src, nb_dtype sdt, void *dst, nb_dtype ddt,
                          int64_t n, int acc);
/* dw[i] += sum over z < Z of part[z * L + i], i < L (f32; split partial sums of a weight
 * gradient). */
nb_status nb_conv_sum_splits(nb_device *dev, const float *part, float *dw, int64_t L, int64_t Z);
/* A copy of the n elements at src (dtype sdt) in dtype want: src itself when sdt == want, else
 * converted into scratch slot `slot`. */
nb_status nb_conv_as(nb_device *dev, const void *src, nb_dtype sdt, nb_dtype want, int64_t n,
                     int slot, const void **out);

/* CUDA source of the helper kernels (im2col, col2im, bias, bias gradient), for compile tests. */
const char *nb_conv_aux_source(void);

#endif

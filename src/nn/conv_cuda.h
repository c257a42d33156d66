/* CUDA linear and conv2d on raw device buffers (internal to src/nn; the tape's CUDA rows in
 * tape_cuda_conv.c call these). All pointers are device addresses on dev; work is queued on
 * nb_device_stream(dev). precision is an nb_tape_precision (FP32 exact, TF32, BF16 operands
 * with fp32 accumulation; fp32 storage always).
 *
 *   nb_conv_dims d;
 *   nb_conv_dims_make(&d, N, C, H, W, O, K, stride, pad);          // computes OH, OW
 *   nb_cuda_conv2d_forward(dev, NB_TAPE_TF32, &d, x, w, b, y);     // y := conv(x, w) + b
 *   nb_cuda_conv2d_backward(dev, NB_TAPE_TF32, &d, x, w, dy, dx, dw, db, 0);  // += into each
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
 * kernels. Linear is cuBLAS. Sums
 * split across blocks are added atomically: the last bits vary from run to run. */
#ifndef NB_NN_CONV_CUDA_H
#define NB_NN_CONV_CUDA_H

#include <stdint.h>

#include "nabla/device.h"
#include "nabla/status.h"

typedef struct nb_conv_dims {
    int64_t N, C, H, W, O, K, stride, pad, OH, OW;
} nb_conv_dims;

/* Fills d and checks it: K 1 or 3, stride 1 or 2, pad 0..8, output >= 1x1, sizes in range. */
nb_status nb_conv_dims_make(nb_conv_dims *d, int64_t N, int64_t C, int64_t H, int64_t W,
                            int64_t O, int64_t K, int64_t stride, int64_t pad);

nb_status nb_cuda_conv2d_forward(nb_device *dev, int precision, const nb_conv_dims *d,
                                 const float *x, const float *w, const float *b, float *y);
nb_status nb_cuda_conv2d_backward(nb_device *dev, int precision, const nb_conv_dims *d,
                                  const float *x, const float *w, const float *dy, float *dx,
                                  float *dw, float *db, int dx_store);

nb_status nb_cuda_linear_forward(nb_device *dev, int precision, int64_t N, int64_t F, int64_t O,
                                 const float *x, const float *w, const float *b, float *y);
nb_status nb_cuda_linear_backward(nb_device *dev, int precision, int64_t N, int64_t F, int64_t O,
                                  const float *x, const float *w, const float *dy, float *dx,
                                  float *dw, float *db, int dx_store);

/* Compiles (or loads) every kernel a precision can use, in parallel: call once before a model's
 * first step to avoid compiling on first use (optional). */
nb_status nb_cuda_conv_prewarm(nb_device *dev, int precision);

/* Algorithm choice, for tests and benchmarks: 0 = automatic (default), 1 = always im2col +
 * cuBLAS, 2 = implicit GEMM wherever it supports the shape (else cuBLAS; 1x1 convolutions too).
 * Process-wide. */
void nb_cuda_conv_set_algo(int algo);
int nb_cuda_conv_get_algo(void);

/* Scratch memory per device: slot 0 im2col columns, 1 rearranged weights, 2 weight-gradient
 * partials. Grow-only, kept for the process's life; valid until the next call for the slot
 * (all users queue on the device's main stream, so reuse is ordered). */
#define NB_CONV_SCRATCH_SLOTS 3
nb_status nb_conv_scratch(nb_device *dev, int slot, size_t bytes, float **out);

/* CUDA source of the helper kernels (im2col, col2im, bias, bias gradient), for compile tests. */
const char *nb_conv_aux_source(void);

#endif

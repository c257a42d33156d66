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
 * nb_tape_grad_buf_w). dx / dw / db may each be NULL (not wanted); b may be NULL.
 * Algorithms, chosen per part (forward, data gradient, weight gradient): the implicit-GEMM
 * kernels of conv_cuda_igemm.c (tensor cores for TF32 / BF16, FFMA for FP32) wherever they
 * apply and the tensors they read are 16-byte aligned (the tape's arena always is), else
 * im2col + cuBLAS; 1x1 stride-1 pad-0 convolutions run their forward and data gradient as one
 * strided-batched cuBLAS GEMM on NCHW in the automatic choice (faster than the kernels on the
 * UNet's 1x1 shapes, .export/device-results/conv/bench.log), their weight gradient on the
 * kernels. Linear is cuBLAS. With bf16 activations the cuBLAS GEMMs take bf16 operands
 * (CUDA_R_16BF, fp32 accumulation, output in y's / dx's dtype, or f32 for dw), im2col columns
 * are bf16, and the 1x1 weight gradient is one strided-batched bf16 GEMM into f32 partials
 * summed over the batch (automatic choice and algo 1). Sums
 * split across blocks are added atomically: the last bits vary from run to run.
 *
 * Helper passes (fewest launches): the bias gradient rides along with a pass the weight
 * gradient makes anyway where there is one (the small-image prep over dy, MODE 2's rearranging
 * add, the 1x1 split sum), else one vectorised pass over dy; a cuBLAS forward with bf16
 * operands fills y with the bias in the launch that converts its weights, then runs its GEMM
 * with beta = 1 (the bias rounded to y's dtype first; else a bias pass after the GEMM); split
 * sums into a bf16 output accumulate in a zeroed f32 scratch that one pass rounds out (adding
 * the bias or the old output) and re-zeroes. */
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

/* Weights kept from a forward for its backward (the tape's conv2d / linear ops: parameters do
 * not change between a step's forward and backward). buf: device memory of at least
 * nb_cuda_conv2d_wcache_bytes / nb_cuda_linear_wcache_bytes (0: nothing to keep for this op),
 * or NULL (no cache: the plain functions). The forward writes there, in the launch that
 * prepares its own weights, the layout the data gradient will read (the implicit-GEMM
 * kernels' flipped weights, or a bf16 copy [O][C*K*K] for cuBLAS) and sets key (0 = nothing
 * kept); the backward given the same buf and key reads them instead of preparing w again
 * (a key it does not expect is ignored: w is prepared as without a cache). */
typedef struct nb_conv_wcache {
    void *buf;
    int key; /* 1..8: an implicit-GEMM data-gradient layout; NB_CONV_WC_BF16: the bf16 copy */
} nb_conv_wcache;
#define NB_CONV_WC_BF16 9
size_t nb_cuda_conv2d_wcache_bytes(int precision, const nb_conv_dims *d, nb_dtype xdt,
                                   nb_dtype ydt);
size_t nb_cuda_linear_wcache_bytes(int precision, int64_t F, int64_t O, nb_dtype xdt,
                                   nb_dtype ydt);
nb_status nb_cuda_conv2d_forward_wc(nb_device *dev, int precision, const nb_conv_dims *d,
                                    nb_dtype xdt, nb_dtype ydt, const void *x, const float *w,
                                    const float *b, void *y, nb_conv_wcache *wc);
nb_status nb_cuda_conv2d_backward_wc(nb_device *dev, int precision, const nb_conv_dims *d,
                                     nb_dtype xdt, nb_dtype ydt, const void *x, const float *w,
                                     const void *dy, void *dx, float *dw, float *db, int dx_store,
                                     const nb_conv_wcache *wc);
nb_status nb_cuda_linear_forward_wc(nb_device *dev, int precision, int64_t N, int64_t F,
                                    int64_t O, nb_dtype xdt, nb_dtype ydt, const void *x,
                                    const float *w, const float *b, void *y, nb_conv_wcache *wc);
/* y [N,O] = relu(x w^T + b): nb_cuda_linear_forward_wc with the ReLU in the bias pass after the
 * GEMM (one pass y = relu(y + b); where the bias went in before the GEMM, the bf16 paths, or
 * there is none, the same pass with no bias). Its backward: nb_tape_relu_grad then
 * nb_cuda_linear_backward_wc. */
nb_status nb_cuda_linear_relu_forward_wc(nb_device *dev, int precision, int64_t N, int64_t F,
                                         int64_t O, nb_dtype xdt, nb_dtype ydt, const void *x,
                                         const float *w, const float *b, void *y,
                                         nb_conv_wcache *wc);
nb_status nb_cuda_linear_backward_wc(nb_device *dev, int precision, int64_t N, int64_t F,
                                     int64_t O, nb_dtype xdt, nb_dtype ydt, const void *x,
                                     const float *w, const void *dy, void *dx, float *dw,
                                     float *db, int dx_store, const nb_conv_wcache *wc);

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
 * partials (kept zeroed between calls by the MODE 2 weight gradient), 3 / 4 converted copies of
 * x / dy (dtype conversions), 5 an f32 output or split partials (f32 halo kernels, stored
 * partial sums), 6 bf16 weights for cuBLAS, 7 split partials of
 * conv_cuda_wgrad.c, 8 the f32 accumulator of split sums into a bf16 output (kept zeroed
 * between calls: nb_conv_split_out), 9 the bias gradient's chunk partials (nb_conv_bias_grad,
 * small planes). Grow-only, kept for the process's life; valid until the
 * next call for the slot (all users queue on the device's main stream, so reuse is ordered). */
#define NB_CONV_SCRATCH_SLOTS 10
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

/* y [N,O,P] (ydt: NB_F32 / NB_BF16) += b[o]; db[o] += sum over n, p of dy [N,O,P] (ydt). Planes
 * of P >= 16 are read with 16-byte vectors by groups of up to 32 lanes (any P and alignment:
 * scalar head and tail), smaller ones by columns; the sums meet in atomics (last bits vary).
 * CPU reference: tape_ops_conv.c. */
nb_status nb_conv_add_bias(nb_device *dev, void *y, nb_dtype ydt, const float *b, int64_t N,
                           int64_t O, int64_t P);
nb_status nb_conv_bias_grad(nb_device *dev, const void *dy, nb_dtype ydt, float *db, int64_t N,
                            int64_t O, int64_t P);
/* y [N,O,P] (ydt) := relu(y + b[o]) (b may be NULL: relu alone), by columns: small planes only
 * (P < 16; the linear's P = 1), else NB_ERR_UNSUPPORTED. */
nb_status nb_conv_add_bias_relu(nb_device *dev, void *y, nb_dtype ydt, const float *b, int64_t N,
                                int64_t O, int64_t P);
/* y [N,O,P] (ydt) := b[o], or 0 where b is NULL (the start of a split sum; rows form for any
 * P). */
nb_status nb_conv_fill_bias(nb_device *dev, void *y, nb_dtype ydt, const float *b, int64_t N,
                            int64_t O, int64_t P);
/* The end of a split sum into a bf16 y [N,O,P]: y := bf16((acc ? y : 0) + src + b[o]) (b may be
 * NULL), and src [N,O,P] (f32) := 0 (an accumulator kept zeroed between uses). */
nb_status nb_conv_split_out(nb_device *dev, float *src, void *y, const float *b, int64_t N,
                            int64_t O, int64_t P, int acc);
/* The MODE 2 weight gradient's end, dw [O][C][KK] += dwr [O][KK][C] and dwr := 0, and
 * db[o] += sum dy [N,O,P] (ydt; planes of P >= 16) in one launch. */
nb_status nb_conv_dw_bias_grad(nb_device *dev, float *dwr, float *dw, int64_t O, int64_t C,
                               int64_t KK, const void *dy, nb_dtype ydt, float *db, int64_t N,
                               int64_t P);


#endif

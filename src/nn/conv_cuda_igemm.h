/* Implicit-GEMM tensor-core convolution kernels (internal; conv_cuda.c chooses them per part).
 * Arguments are checked by the caller (conv_cuda.c); pointers are device addresses. */
#ifndef NB_NN_CONV_CUDA_IGEMM_H
#define NB_NN_CONV_CUDA_IGEMM_H

#include "nn/conv_cuda.h"

/* 1 when the kernels handle part `which` (0 forward, 1 data gradient, 2 weight gradient) of
 * this shape at this precision. */
int nb_conv_igemm_supports(const nb_conv_dims *d, int precision, int which);
/* Activations: x / dx in dtype xdt, y / dy in ydt (NB_F32 / NB_BF16; bf16 only at BF16
 * precision, checked by the caller). At BF16 precision with bf16 tensors the kernels read and
 * write bf16 directly where their variant exists (MODE 1 forward / data gradient), else the
 * tensors are converted through f32 scratch (slots 3-5). */
/* y := conv(x, w) (+ b) */
nb_status nb_conv_igemm_forward(nb_device *dev, int precision, const nb_conv_dims *d,
                                nb_dtype xdt, nb_dtype ydt, const void *x, const float *w,
                                const float *b, void *y);
/* dx += conv^T(dy, w); store = 1: dx = conv^T(dy, w) (every element written, none read) */
nb_status nb_conv_igemm_dgrad(nb_device *dev, int precision, const nb_conv_dims *d,
                              nb_dtype xdt, nb_dtype ydt, const float *w, const void *dy,
                              void *dx, int store);
/* dw += sum over n, p of dy x-patches */
nb_status nb_conv_igemm_wgrad(nb_device *dev, int precision, const nb_conv_dims *d,
                              nb_dtype xdt, nb_dtype ydt, const void *x, const void *dy,
                              float *dw);
/* Compiles (or loads from the cache) every specialisation used at this precision, in parallel
 * on the thread pool: first-use latency of a model in one call. */
nb_status nb_conv_igemm_prewarm(nb_device *dev, int precision);
/* Benchmarks: forces the tile {BM, BN, WM, WN, STAGES} of mode 0 (forward, data gradient) or
 * 2 (weight gradient); tile NULL restores the automatic choice. Returns 0 for an invalid tile.
 * Process-wide, not thread-safe. */
int nb_conv_igemm_set_tile(int mode, const int *tile);
/* Benchmarks / tests: the weight gradient on bf16 activations (bits; 0 = default): 2 = MODE 2
 * even where the halo MODE 3 would run; 4 = the k splits' partial sums stored per split
 * (scratch slot 5) and summed by a second kernel instead of added atomically (slower).
 * Process-wide. */
void nb_conv_igemm_set_bf16_wgrad(int mode);
/* Compiles the given tiles of a mode at TF32 and BF16, in parallel. */
nb_status nb_conv_igemm_prewarm_tiles(nb_device *dev, int mode, int ks, int stride, int n,
                                      const int (*tiles)[5]);
/* The kernel source (without its #define prefix), for compile tests. */
const char *nb_conv_igemm_source(void);

#endif

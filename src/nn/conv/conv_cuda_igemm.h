/* Implicit-GEMM tensor-core convolution kernels (internal; conv_cuda.c chooses them per part).
 * Arguments are checked by the caller (conv_cuda.c); pointers are device addresses. */
#ifndef NB_NN_CONV_CUDA_IGEMM_H
#define NB_NN_CONV_CUDA_IGEMM_H

#include "nn/conv/conv_cuda.h"

/* 1 when the kernels handle part `which` (0 forward, 1 data gradient, 2 weight gradient) of
 * this shape at this precision. */
int nb_conv_igemm_supports(const nb_conv_dims *d, int precision, int which);
/* Activations: x / dx in dtype xdt, y / dy in ydt (NB_F32 / NB_BF16; bf16 only at BF16
 * precision, checked by the caller). At BF16 precision with bf16 tensors the kernels read and
 * write bf16 directly where their variant exists (MODE 1 forward / data gradient), else the
 * tensors are converted through f32 scratch (slots 3-5). */
/* y := conv(x, w) (+ b). fill (may be NULL): with fill->buf and a planned fill->key (from
 * nb_conv_igemm_dgrad_key, or NB_CONV_WC_BF16), the weight arrangement also writes that layout
 * into fill->buf (same launch); fill->key = 0 where it did not. */
nb_status nb_conv_igemm_forward(nb_device *dev, int precision, const nb_conv_dims *d,
                                nb_dtype xdt, nb_dtype ydt, const void *x, const float *w,
                                const float *b, void *y, nb_conv_wcache *fill);
/* dx += conv^T(dy, w); store = 1: dx = conv^T(dy, w) (every element written, none read).
 * use (may be NULL): weights a forward kept; read instead of rearranging w where use->key is
 * the layout this call needs. */
nb_status nb_conv_igemm_dgrad(nb_device *dev, int precision, const nb_conv_dims *d,
                              nb_dtype xdt, nb_dtype ydt, const float *w, const void *dy,
                              void *dx, int store, const nb_conv_wcache *use);
/* The key of the weight layout nb_conv_igemm_dgrad reads for d (with a 16-byte aligned dx), 0
 * where it does not apply; nb_conv_igemm_wc_bytes: bytes of a key's layout (0 for key 0). */
int nb_conv_igemm_dgrad_key(const nb_conv_dims *d, int precision, nb_dtype xdt, nb_dtype ydt);
size_t nb_conv_igemm_wc_bytes(int key, const nb_conv_dims *d);
/* dw += sum over n, p of dy x-patches. db (may be NULL; *db may be NULL): where the weight
 * gradient ends with a pass of its own (MODE 2 with K = 3), that pass also adds the bias
 * gradient db[o] += sum dy and *db is set to NULL (else left for the caller). */
nb_status nb_conv_igemm_wgrad(nb_device *dev, int precision, const nb_conv_dims *d,
                              nb_dtype xdt, nb_dtype ydt, const void *x, const void *dy,
                              float *dw, float **db);
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
/* Tests / benchmarks: rearranges w [O][C][KK] (f32) for part `which` (0 forward, 1 data
 * gradient) exactly as that part would at this precision, abf = 1 for the bf16-activation
 * kernels (BF16 only), into scratch slot 1: *wr and its size in *bytes (valid until the next
 * conv call); *cb (may be NULL) the layout: 0 = MODE 0's [O][KK][C] (data gradient: [C][KK][O],
 * taps reversed), else MODE 1's [C/cb][O][KK][cb] (data gradient: [O/cb][C][KK][cb], taps
 * reversed; channels past C / O zero; bf16 with abf, slot kp = 4*((k&7)>>1) + 2*(k>>3) + (k&1)
 * holding channel k of a group). NB_ERR_UNSUPPORTED where the kernels do not take the shape. */
nb_status nb_conv_igemm_arrange_weights(nb_device *dev, int precision, const nb_conv_dims *d,
                                        int which, int abf, const float *w, void **wr,
                                        size_t *bytes, int *cb);

/* The defines of src/nn/conv/kernels/igemm.cu for one configuration v = {MODE, PREC, BM, BN, WM,
 * WN, STAGES, KS, STRIDE, CB, ABF, OBF}: the strings in buf, defs NULL-terminated (for
 * nb_jit_cuda_kernel / nb_cuda_program_prepare). */
void nb_conv_igemm_defines(const int v[12], char buf[12][24], const char *defs[13]);

#endif

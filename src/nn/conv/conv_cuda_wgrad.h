/* conv2d weight gradient on CUDA as im2col + one cuBLAS GEMM (internal to src/nn).
 * nb_cuda_conv2d_backward (conv_cuda.c) takes this path for the weight gradient where
 * nb_conv_wgrad_gemm_preferred says so (3x3 stride 1 at <= 8x8 outputs, or 16x16 with bf16).
 *
 *   // dw [O, C*K*K] (f32) += sum over n, p of dy[n][o][p] * x[n][c][tap kk of p]
 *   NB_TRY(nb_conv_wgrad_gemm(dev, NB_TAPE_BF16, &d, x, NB_BF16, dy, NB_BF16, dw));
 *
 * Steps per chunk of m samples (the chunk's columns stay under ~256 MiB):
 *   1. col [C*K*K, m*P] (row = c*KK + kk, column = n*P + p; 0 outside the image) := im2col(x),
 *      in the operand dtype (bf16 when x or dy is bf16, else f32), scratch slot 0;
 *   2. dyT [O, m*P] := dy [m, O, P] transposed per sample, in the operand dtype, slot 4;
 *   3. dw [O, CKK] += dyT col^T: one cublasGemmEx (nb_cublas_gemm_rm_dt; bf16 operands with fp32
 *      accumulation, or f32 operands at the precision's math mode: FP32 exact, TF32, BF16
 *      FAST_16BF). With a K split S > 1 the GEMM runs as S strided-batched slices into f32
 *      partials (slot 7) and a kernel adds them into dw (the remainder of K goes straight into dw).
 * Row-shift form (tuning layout 2; 3x3, stride 1, pad 1, OW % 8 == 0, else the above): columns
 * over the 3 horizontal taps only, on rows padded to OH+2 per sample, so that the vertical tap ki
 * is the K index shifted by ki*OW: cols3 [3C, m (OH+2) OW + 2 OW], dyp [O, m (OH+2) OW] (zero in
 * the padding rows), part[ki][s] [O, 3C] (slot 7, one strided-batched GEMM over the 3 taps
 * without a split), then a kernel adds them into dw's [c][ki][kj] order: a third of im2col's
 * column traffic. The automatic choice takes it above 8x8 outputs (faster there than im2col on
 * every UNet shape, .export/device-results/wgrad/bench_rowshift.log).
 * d: nb_conv_dims (conv_cuda.h; K 1 or 3, stride 1 or 2, any pad). xdt / ydt: NB_F32 or NB_BF16
 * (bf16 needs precision NB_TAPE_BF16; a mixed f32 x / bf16 dy is converted to bf16 on the fly).
 * dw is ACCUMULATED (beta = 1). All work is queued on nb_device_stream(dev). x and dy must not
 * live in scratch slots 0, 4 or 7. CPU reference: tape_ops_conv.c (and the f64 loop in
 * tests/test_nn_conv_wgrad_cuda.c). */
#ifndef NB_NN_CONV_CUDA_WGRAD_H
#define NB_NN_CONV_CUDA_WGRAD_H

#include "nabla/device.h"
#include "nabla/dtype.h"
#include "nabla/status.h"
#include "nn/conv/conv_cuda.h"

nb_status nb_conv_wgrad_gemm(nb_device *dev, int precision, const nb_conv_dims *d, const void *x,
                             nb_dtype xdt, const void *dy, nb_dtype ydt, float *dw);
/* The same, and the bias gradient db [O] += sum over n, p of dy (db may be NULL) taken from the
 * pass that rearranges dy (no separate read of dy, no extra launch; with skipped steps,
 * nb_conv_wgrad_set_skip: nb_conv_bias_grad first). */
nb_status nb_conv_wgrad_gemm_db(nb_device *dev, int precision, const nb_conv_dims *d,
                                const void *x, nb_dtype xdt, const void *dy, nb_dtype ydt,
                                float *dw, float *db);

/* 1 where this path measured faster than the implicit-GEMM weight gradient on an H100 at batch
 * 32 (bench*.log under .export/device-results/wgrad): 3x3 stride 1 with outputs of at most 8x8,
 * or 16x16 with a bf16 x or dy. */
int nb_conv_wgrad_gemm_preferred(const nb_conv_dims *d, nb_dtype xdt, nb_dtype ydt);

/* Tuning knobs for tests and benchmarks (process-wide). split: 0 = automatic K split (im2col:
 * one GEMM; row-shift: slices to cover the SMs), 1 = one GEMM, S > 1 = S slices. layout: -1 =
 * automatic (default: the row-shift form above 8x8 outputs where it applies, else im2col), 0 =
 * im2col col [CKK, K] (K contiguous), 1 = col [K, CKK] (row = (n, p)), 2 = the row-shift form
 * where it applies (else layout 0). chunk_mib: column scratch cap per chunk (0 = 256 MiB, at
 * most 1024). */
void nb_conv_wgrad_set_tuning(int split, int layout, int chunk_mib);
/* Benchmarks only (the result is wrong while set): skip steps, bit 0 im2col, 1 the dy
 * transpose, 2 the GEMM (0: run all). */
void nb_conv_wgrad_set_skip(int mask);
/* The split the automatic choice takes for d (for benchmark logs). */
int nb_conv_wgrad_auto_split(nb_device *dev, const nb_conv_dims *d);


#endif

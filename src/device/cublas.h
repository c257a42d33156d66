/* cuBLAS, loaded with dlopen at run time: the few GEMM entry points the nn layers' linear and
 * convolution ops need, bound to a CUDA device's primary context and its main stream
 * (nb_device_stream). Implemented by the CUDA backend (src/device/cuda/cublas.c); the header
 * is the device layer's, outside cuda/, because nothing outside a backend includes its private
 * headers. No cuBLAS header is needed to build.
 *
 *   // C[M,N] (row-major, ldc) = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, per batch entry b
 *   // at A + b*sa, B + b*sb, C + b*sc (batch 1: strides unused)
 *   NB_TRY(nb_cublas_gemm_rm(dev, NB_CUBLAS_TF32, 0, 1, M, N, K, 1.0f, x, F, w, F, 0.0f, y, O,
 *                            1, 0, 0, 0));
 *
 * Library search: $NABLA_CUBLAS (a path; then the only candidate), else libcublas.so.13,
 * libcublas.so.12, then the same names under /usr/local/cuda/lib64. Absent: NB_ERR_UNSUPPORTED
 * naming what was tried.
 * precision is an nb_cublas_precision (the values of nb_tape_precision): FP32 = exact fp32
 * (CUBLAS_COMPUTE_32F, no tensor cores), TF32 = CUBLAS_COMPUTE_32F_FAST_TF32, BF16 =
 * CUBLAS_COMPUTE_32F_FAST_16BF (bf16 operands, fp32 accumulation); storage is fp32 in
 * nb_cublas_gemm_rm. nb_cublas_gemm_rm_dt takes A and B in dtype ab (NB_F32 or NB_BF16) and C in
 * dtype c: bf16 A / B run CUBLAS_COMPUTE_32F (fp32 accumulation) with C bf16 (rounded once, beta
 * applied in fp32) or f32; f32 A / B need an f32 C. */
#ifndef NB_DEVICE_CUBLAS_H
#define NB_DEVICE_CUBLAS_H

#include <stdint.h>

#include "nabla/device.h"
#include "nabla/dtype.h"
#include "nabla/status.h"

/* Math of a GEMM; the values are nb_tape_precision's, so the tape passes its precision as is. */
typedef enum nb_cublas_precision {
    NB_CUBLAS_FP32 = 0, /* exact fp32 */
    NB_CUBLAS_TF32 = 1, /* tensor cores, tf32 inputs */
    NB_CUBLAS_BF16 = 2, /* tensor cores, bf16 inputs, fp32 accumulation */
} nb_cublas_precision;

/* 1 when cuBLAS can be loaded (loads it); never an error. */
int nb_cublas_available(void);
/* Why cuBLAS cannot be loaded, or NULL once it is. */
const char *nb_cublas_unavailable_reason(void);

/* Row-major GEMM, see the header comment. ta / tb: 1 = op is the transpose of the stored matrix
 * (lda / ldb are the row strides of the STORED matrices). */
nb_status nb_cublas_gemm_rm(nb_device *dev, int precision, int ta, int tb, int64_t M, int64_t N,
                            int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                            int64_t ldb, float beta, float *C, int64_t ldc, int64_t batch,
                            int64_t sa, int64_t sb, int64_t sc);
nb_status nb_cublas_gemm_rm_dt(nb_device *dev, int precision, nb_dtype ab, nb_dtype c, int ta,
                               int tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                               int64_t lda, const void *B, int64_t ldb, float beta, void *C,
                               int64_t ldc, int64_t batch, int64_t sa, int64_t sb, int64_t sc);

#endif

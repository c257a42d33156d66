/* cuBLAS through dlopen (cublas.h): a handle per CUDA device, bound to the device's primary
 * context and main stream. The enum values and signatures below copy cublas_api.h /
 * library_types.h (CUDA 12/13), which keep them stable. */
#include "device/cublas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/cuda/cuda_api.h"
#include "nabla/env.h"

typedef int cublasStatus_t;
typedef struct cublasContext *cublasHandle_t;
#define CUBLAS_STATUS_SUCCESS 0
#define CUBLAS_OP_N 0
#define CUBLAS_OP_T 1
#define CUDA_R_32F 0
#define CUDA_R_16BF 14
#define CUBLAS_COMPUTE_32F 68
#define CUBLAS_COMPUTE_32F_FAST_16BF 75
#define CUBLAS_COMPUTE_32F_FAST_TF32 77
#define CUBLAS_GEMM_DEFAULT (-1)

typedef struct nb_cublas_api {
    cublasStatus_t (*Create)(cublasHandle_t *h);                                 /* _v2 */
    cublasStatus_t (*SetStream)(cublasHandle_t h, CUstream s);                   /* _v2 */
    const char *(*GetStatusString)(cublasStatus_t s);
    cublasStatus_t (*GemmStridedBatchedEx)(cublasHandle_t h, int ta, int tb, int m, int n, int k,
                                           const void *alpha, const void *A, int atype, int lda,
                                           long long sa, const void *B, int btype, int ldb,
                                           long long sb, const void *beta, void *C, int ctype,
                                           int ldc, long long sc, int batch, int compute, int algo);
} nb_cublas_api;

static pthread_mutex_t nb_cublas_lock = PTHREAD_MUTEX_INITIALIZER;
static nb_cublas_api nb_cb;
static int nb_cb_state; /* 0 not tried, 1 loaded, -1 failed */
static char nb_cb_reason[512];

#define NB_CUBLAS_MAX_DEV 16
typedef struct nb_cublas_slot {
    cublasHandle_t h;
    CUcontext ctx;
    CUstream stream; /* stream the handle is bound to */
} nb_cublas_slot;
static nb_cublas_slot nb_cb_slots[NB_CUBLAS_MAX_DEV];

/* With nb_cublas_lock held. */
static int nb_cublas_load_locked(void) {
    if (nb_cb_state) return nb_cb_state > 0;
    const char *env = nb_env_get(NB_ENV_CUBLAS);
    const char *names[] = {env, "libcublas.so.13", "libcublas.so.12",
                           "/usr/local/cuda/lib64/libcublas.so.13",
                           "/usr/local/cuda/lib64/libcublas.so.12"};
    void *lib = NULL;
    size_t n = 0;
    n += (size_t)snprintf(nb_cb_reason, sizeof nb_cb_reason, "cuBLAS not found (tried");
    /* An explicit $NABLA_CUBLAS is the only candidate. */
    size_t count = names[0] ? 1 : sizeof names / sizeof names[0];
    for (size_t i = 0; i < count && !lib; i++) {
        if (!names[i]) continue;
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib && n < sizeof nb_cb_reason)
            n += (size_t)snprintf(nb_cb_reason + n, sizeof nb_cb_reason - n, " %s", names[i]);
    }
    if (!lib) {
        if (n < sizeof nb_cb_reason)
            snprintf(nb_cb_reason + n, sizeof nb_cb_reason - n,
                     "; set NABLA_CUBLAS to libcublas.so's path)");
        nb_cb_state = -1;
        return 0;
    }
    struct { void **slot; const char *sym; } syms[] = {
        {(void **)&nb_cb.Create, "cublasCreate_v2"},
        {(void **)&nb_cb.SetStream, "cublasSetStream_v2"},
        {(void **)&nb_cb.GetStatusString, "cublasGetStatusString"},
        {(void **)&nb_cb.GemmStridedBatchedEx, "cublasGemmStridedBatchedEx"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].slot = dlsym(lib, syms[i].sym);
        if (!*syms[i].slot) {
            snprintf(nb_cb_reason, sizeof nb_cb_reason, "cuBLAS library lacks %s", syms[i].sym);
            dlclose(lib);
            nb_cb_state = -1;
            return 0;
        }
    }
    nb_cb_reason[0] = 0;
    nb_cb_state = 1;
    return 1;
}

int nb_cublas_available(void) {
    pthread_mutex_lock(&nb_cublas_lock);
    int ok = nb_cublas_load_locked();
    pthread_mutex_unlock(&nb_cublas_lock);
    return ok;
}

const char *nb_cublas_unavailable_reason(void) {
    return nb_cublas_available() ? NULL : nb_cb_reason;
}

static const char *nb_cublas_str(cublasStatus_t s) {
    const char *m = nb_cb.GetStatusString ? nb_cb.GetStatusString(s) : NULL;
    return m ? m : "unknown cuBLAS status";
}

/* The device's handle, its context made current on this thread. With nb_cublas_lock held. */
static nb_status nb_cublas_bind(nb_device *dev, nb_cublas_slot **out) {
    if (!dev || nb_device_get_kind(dev) != NB_DEVICE_CUDA)
        return nb_error(NB_ERR_INVALID_ARG, "cuBLAS: device %s is not a CUDA device",
                        dev ? nb_device_name(dev) : "NULL");
    if (!nb_cublas_load_locked()) return nb_error(NB_ERR_UNSUPPORTED, "%s", nb_cb_reason);
    const nb_cuda_api *cu = nb_cuda_api_get();
    if (!cu) return nb_error(NB_ERR_NO_DEVICE, "cuBLAS: the CUDA driver is not loaded");
    int idx = nb_device_get_info(dev)->index;
    if (idx < 0 || idx >= NB_CUBLAS_MAX_DEV)
        return nb_error(NB_ERR_UNSUPPORTED, "cuBLAS: device index %d >= %d", idx, NB_CUBLAS_MAX_DEV);
    nb_cublas_slot *sl = &nb_cb_slots[idx];
    if (!sl->ctx) {
        CUdevice cd;
        NB_CU_TRY(DeviceGet, &cd, idx);
        NB_CU_TRY(DevicePrimaryCtxRetain, &sl->ctx, cd); /* held for the process's life */
    }
    NB_CU_TRY(CtxSetCurrent, sl->ctx);
    if (!sl->h) {
        cublasStatus_t r = nb_cb.Create(&sl->h);
        if (r != CUBLAS_STATUS_SUCCESS) {
            sl->h = NULL;
            return nb_error(NB_ERR_DEVICE, "cublasCreate on %s failed: %s", nb_device_name(dev),
                            nb_cublas_str(r));
        }
        sl->stream = NULL;
    }
    CUstream s = (CUstream)nb_stream_native(nb_device_stream(dev));
    if (s != sl->stream || !sl->stream) {
        cublasStatus_t r = nb_cb.SetStream(sl->h, s);
        if (r != CUBLAS_STATUS_SUCCESS)
            return nb_error(NB_ERR_DEVICE, "cublasSetStream failed: %s", nb_cublas_str(r));
        sl->stream = s;
    }
    *out = sl;
    return NB_OK;
}

nb_status nb_cublas_gemm_rm(nb_device *dev, int precision, int ta, int tb, int64_t M, int64_t N,
                            int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                            int64_t ldb, float beta, float *C, int64_t ldc, int64_t batch,
                            int64_t sa, int64_t sb, int64_t sc) {
    return nb_cublas_gemm_rm_dt(dev, precision, NB_F32, NB_F32, ta, tb, M, N, K, alpha, A, lda, B,
                                ldb, beta, C, ldc, batch, sa, sb, sc);
}

nb_status nb_cublas_gemm_rm_dt(nb_device *dev, int precision, nb_dtype ab, nb_dtype c, int ta,
                               int tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                               int64_t lda, const void *B, int64_t ldb, float beta, void *C,
                               int64_t ldc, int64_t batch, int64_t sa, int64_t sb, int64_t sc) {
    const int64_t lim = 0x7fffffff;
    if ((ab != NB_F32 && ab != NB_BF16) || (c != NB_F32 && c != NB_BF16) ||
        (ab == NB_F32 && c != NB_F32))
        return nb_error(NB_ERR_INVALID_ARG, "cuBLAS GEMM: operands %s with output %s unsupported "
                        "(f32 operands need an f32 output)", nb_dtype_name(ab), nb_dtype_name(c));
    if (M < 1 || N < 1 || K < 1 || batch < 1 || M > lim || N > lim || K > lim || batch > lim ||
        lda > lim || ldb > lim || ldc > lim)
        return nb_error(NB_ERR_INVALID_ARG,
                        "cuBLAS GEMM: sizes M=%lld N=%lld K=%lld batch=%lld out of range",
                        (long long)M, (long long)N, (long long)K, (long long)batch);
    int compute = ab == NB_BF16                 ? CUBLAS_COMPUTE_32F
                  : precision == NB_CUBLAS_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                  : precision == NB_CUBLAS_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF
                                              : CUBLAS_COMPUTE_32F;
    int abt = ab == NB_BF16 ? CUDA_R_16BF : CUDA_R_32F, ct = c == NB_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    pthread_mutex_lock(&nb_cublas_lock);
    nb_cublas_slot *sl = NULL;
    nb_status st = nb_cublas_bind(dev, &sl);
    if (st == NB_OK) {
        /* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T. */
        cublasStatus_t r = nb_cb.GemmStridedBatchedEx(
            sl->h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M,
            (int)K, &alpha, B, abt, (int)ldb, (long long)sb, A, abt, (int)lda,
            (long long)sa, &beta, C, ct, (int)ldc, (long long)sc, (int)batch, compute,
            CUBLAS_GEMM_DEFAULT);
        if (r != CUBLAS_STATUS_SUCCESS)
            st = nb_error(NB_ERR_DEVICE,
                          "cublasGemmStridedBatchedEx (M=%lld N=%lld K=%lld batch=%lld) failed: %s",
                          (long long)M, (long long)N, (long long)K, (long long)batch,
                          nb_cublas_str(r));
    }
    pthread_mutex_unlock(&nb_cublas_lock);
    return st;
}

/* CUDA linear and conv2d (conv_cuda.h): cuBLAS GEMMs, im2col / col2im, bias and bias-gradient
 * kernels, and the choice between this path and the implicit-GEMM kernels of
 * conv_cuda_igemm.c. CPU reference: tape_ops_basic.c (linear) and tape_ops_conv.c (conv2d). */
#include "nn/conv/conv_cuda.h"
#include "nn/conv/conv_cuda_aux.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "jit/cuda_files.h"
#include "nabla/nn_tape.h"
#include "nn/conv/conv_cuda_igemm.h"
#include "nn/conv/conv_cuda_wgrad.h"
#include "nn/conv/conv_cuda_wg4.h"
#include "device/cublas.h"
#include "nn/common/nn_common.h"

/* The tape passes its nb_tape_precision to cuBLAS as is. */
_Static_assert(NB_CUBLAS_FP32 == (int)NB_TAPE_FP32 && NB_CUBLAS_TF32 == (int)NB_TAPE_TF32 &&
                   NB_CUBLAS_BF16 == (int)NB_TAPE_BF16,
               "nb_cublas_precision and nb_tape_precision differ");

/* ---- kernels (NVRTC): src/nn/conv/kernels/conv_aux.cu ---------------------------------------- */

typedef struct {
    const void *x;
    void *col;
    long long total;
    int C, H, W, K, S, pad, OH, OW, xbf, cbf;
} nb_im2col_p;
typedef struct {
    const float *col;
    void *dx;
    long long total;
    int C, H, W, K, S, pad, OH, OW, store, xbf;
} nb_col2im_p;
typedef struct {
    const void *src;
    void *dst;
    long long n;
    int sbf, dbf, acc, vec;
} nb_cvt_p;

static nb_status nb_conv_kernel(nb_device *dev, const char *entry, nb_jit_kernel **k) {
    return nb_jit_cuda_kernel(dev, "src/nn/conv/kernels/conv_aux.cu", NULL, entry, k);
}

nb_status nb_conv_convert(nb_device *dev, const void *src, nb_dtype sdt, void *dst, nb_dtype ddt,
                          int64_t n, int acc) {
    if (n <= 0) return NB_OK;
    nb_jit_kernel *k;
    NB_TRY(nb_conv_kernel(dev, "nb_conv_cvt", &k));
    /* the 4-element path needs 16-byte (f32) / 8-byte (bf16) aligned buffers (the tape's arena
     * always is) */
    int vec = (uintptr_t)src % (sdt == NB_BF16 ? 8 : 16) == 0 &&
              (uintptr_t)dst % (ddt == NB_BF16 ? 8 : 16) == 0;
    nb_cvt_p a = {src, dst, (long long)n, sdt == NB_BF16, ddt == NB_BF16, acc, vec};
    return nb_jit_launch_cuda(k, &a, sizeof a, vec ? n / 4 + 3 : n, NULL);
}

nb_status nb_conv_as(nb_device *dev, const void *src, nb_dtype sdt, nb_dtype want, int64_t n,
                     int slot, const void **out) {
    if (sdt == want) {
        *out = src;
        return NB_OK;
    }
    float *buf;
    NB_TRY(nb_conv_scratch(dev, slot, (size_t)n * nb_dtype_size(want), &buf));
    NB_TRY(nb_conv_convert(dev, src, sdt, buf, want, n, 0));
    *out = buf;
    return NB_OK;
}

/* ---- scratch: grow-only buffers per device and slot, reused in stream order ---------------- */

#define NB_CONV_MAX_DEV 16
static pthread_mutex_t nb_conv_scratch_lock = PTHREAD_MUTEX_INITIALIZER;
static nb_buffer *nb_conv_scratch_buf[NB_CONV_MAX_DEV][NB_CONV_SCRATCH_SLOTS];

/* All work is queued on the device's main stream, so a buffer handed back to the caching
 * allocator is reused only after the work queued before it. */
nb_status nb_conv_scratch(nb_device *dev, int slot, size_t bytes, float **out) {
    int idx = nb_device_get_info(dev)->index;
    if (idx < 0 || idx >= NB_CONV_MAX_DEV || slot < 0 || slot >= NB_CONV_SCRATCH_SLOTS)
        return nb_error(NB_ERR_UNSUPPORTED, "conv2d (CUDA): device index %d >= %d", idx,
                        NB_CONV_MAX_DEV);
    nb_status s = NB_OK;
    pthread_mutex_lock(&nb_conv_scratch_lock);
    nb_buffer **b = &nb_conv_scratch_buf[idx][slot];
    if (!*b || nb_buffer_size(*b) < bytes || nb_buffer_device(*b) != dev) {
        if (*b) nb_buffer_release(*b);
        *b = NULL;
        s = nb_buffer_alloc(dev, bytes, b);
    }
    if (s == NB_OK) *out = nb_buffer_ptr(*b);
    pthread_mutex_unlock(&nb_conv_scratch_lock);
    return s;
}

/* Samples per im2col chunk: the columns of one chunk stay under ~256 MiB. */
static int64_t nb_conv_chunk(const nb_conv_dims *d) {
    int64_t per = d->C * d->K * d->K * d->OH * d->OW * (int64_t)sizeof(float);
    int64_t n = ((int64_t)256 << 20) / (per > 0 ? per : 1);
    if (n < 1) n = 1;
    if (n > d->N) n = d->N;
    return n;
}

/* col (cdt) of nc samples from x (xdt) */
static nb_status nb_conv_im2col(nb_device *dev, const nb_conv_dims *d, const void *x, nb_dtype xdt,
                                void *col, nb_dtype cdt, int64_t nc) {
    nb_jit_kernel *k;
    NB_TRY(nb_conv_kernel(dev, "nb_conv_im2col", &k));
    int64_t total = nc * d->C * d->K * d->K * d->OH * d->OW;
    nb_im2col_p a = {x, col, (long long)total, (int)d->C, (int)d->H, (int)d->W, (int)d->K,
                     (int)d->stride, (int)d->pad, (int)d->OH, (int)d->OW, xdt == NB_BF16,
                     cdt == NB_BF16};
    return nb_jit_launch_cuda(k, &a, sizeof a, total, NULL);
}

/* dx (xdt) of nc samples += (store: =) the scatter of the f32 columns col */
static nb_status nb_conv_col2im(nb_device *dev, const nb_conv_dims *d, const float *col, void *dx,
                                nb_dtype xdt, int64_t nc, int store) {
    nb_jit_kernel *k;
    NB_TRY(nb_conv_kernel(dev, "nb_conv_col2im", &k));
    int64_t total = nc * d->C * d->H * d->W;
    nb_col2im_p a = {col, dx, (long long)total, (int)d->C, (int)d->H, (int)d->W, (int)d->K,
                     (int)d->stride, (int)d->pad, (int)d->OH, (int)d->OW, store, xdt == NB_BF16};
    return nb_jit_launch_cuda(k, &a, sizeof a, total, NULL);
}

/* ---- dims and algorithm choice -------------------------------------------------------------- */

nb_status nb_conv_dims_make(nb_conv_dims *d, int64_t N, int64_t C, int64_t H, int64_t W,
                            int64_t O, int64_t K, int64_t stride, int64_t pad) {
    if (!d) return nb_error(NB_ERR_INVALID_ARG, "conv2d (CUDA): dims is NULL");
    if (K != 1 && K != 3)
        return nb_error(NB_ERR_UNSUPPORTED, "conv2d (CUDA): kernel %lldx%lld (1x1 and 3x3 supported)",
                        (long long)K, (long long)K);
    if (stride != 1 && stride != 2)
        return nb_error(NB_ERR_UNSUPPORTED, "conv2d (CUDA): stride %lld (1 or 2 supported)",
                        (long long)stride);
    if (pad < 0 || pad > 8)
        return nb_error(NB_ERR_INVALID_ARG, "conv2d (CUDA): pad %lld not in 0..8", (long long)pad);
    const int64_t lim = (int64_t)1 << 30;
    if (N < 1 || C < 1 || H < 1 || W < 1 || O < 1 || N > lim || C > lim || H > 65535 ||
        W > 65535 || O > 65535)
        return nb_error(NB_ERR_SHAPE,
                        "conv2d (CUDA): sizes N=%lld C=%lld H=%lld W=%lld O=%lld out of range",
                        (long long)N, (long long)C, (long long)H, (long long)W, (long long)O);
    if (H + 2 * pad < K || W + 2 * pad < K)
        return nb_error(NB_ERR_SHAPE, "conv2d (CUDA): input %lldx%lld with pad %lld is smaller "
                        "than the kernel", (long long)H, (long long)W, (long long)pad);
    d->N = N, d->C = C, d->H = H, d->W = W, d->O = O, d->K = K, d->stride = stride, d->pad = pad;
    d->OH = (H + 2 * pad - K) / stride + 1;
    d->OW = (W + 2 * pad - K) / stride + 1;
    if (N * C * H * W > ((int64_t)1 << 31) - 1 || N * O * d->OH * d->OW > ((int64_t)1 << 31) - 1)
        return nb_error(NB_ERR_SHAPE, "conv2d (CUDA): tensors over 2^31 elements");
    return NB_OK;
}

static nb_status nb_conv_check_dev(nb_device *dev, const char *fn) {
    if (!dev || nb_device_get_kind(dev) != NB_DEVICE_CUDA)
        return nb_error(NB_ERR_INVALID_ARG, "%s: device %s is not a CUDA device", fn,
                        dev ? nb_device_name(dev) : "NULL");
    return NB_OK;
}

static nb_status nb_conv_check_prec(int precision, const char *fn) {
    if (precision < 0 || precision > 2)
        return nb_error(NB_ERR_INVALID_ARG, "%s: precision %d is not FP32, TF32 or BF16", fn,
                        precision);
    return NB_OK;
}

nb_status nb_cuda_conv_prewarm(nb_device *dev, int precision) {
    NB_TRY(nb_conv_check_dev(dev, "nb_cuda_conv_prewarm"));
    NB_TRY(nb_conv_check_prec(precision, "nb_cuda_conv_prewarm"));
    nb_jit_kernel *k;
    NB_TRY(nb_conv_kernel(dev, "nb_conv_im2col", &k));
    return nb_conv_igemm_prewarm(dev, precision);
}

static int nb_conv_algo = 0;
void nb_cuda_conv_set_algo(int algo) { nb_conv_algo = algo; }
int nb_cuda_conv_get_algo(void) { return nb_conv_algo; }

/* 1x1, stride 1, pad 0: the image is already the column matrix. */
static int nb_conv_is_pointwise(const nb_conv_dims *d) {
    return d->K == 1 && d->stride == 1 && d->pad == 0;
}

/* which: 0 forward, 1 data gradient, 2 weight gradient; a, b: the tensors the kernels read
 * with 16-byte copies (must be 16-byte aligned; the tape's arena always is). Automatic choice:
 * the pointwise forward and data gradient are one strided-batched cuBLAS GEMM, which beat the
 * kernels on every UNet 1x1 shape (bench.log: forward 0.045-0.074 ms vs 0.077-0.090 ms, TF32). */
static int nb_conv_use_igemm(const nb_conv_dims *d, int precision, int which, const void *a,
                             const void *b) {
    if (nb_conv_algo == 1 || ((uintptr_t)a | (uintptr_t)b) % 16) return 0;
    if (nb_conv_algo == 0 && which != 2 && nb_conv_is_pointwise(d)) return 0;
    return nb_conv_igemm_supports(d, precision, which);
}

/* Storage dtypes: NB_F32 / NB_BF16, bf16 only at BF16 precision. */
static nb_status nb_conv_check_dt(int precision, nb_dtype xdt, nb_dtype ydt, const char *fn) {
    if ((xdt != NB_F32 && xdt != NB_BF16) || (ydt != NB_F32 && ydt != NB_BF16))
        return nb_error(NB_ERR_INVALID_ARG, "%s: storage dtypes %s / %s (f32 or bf16 supported)",
                        fn, nb_dtype_name(xdt), nb_dtype_name(ydt));
    if ((xdt == NB_BF16 || ydt == NB_BF16) && precision != NB_TAPE_BF16)
        return nb_error(NB_ERR_INVALID_ARG, "%s: bf16 storage needs BF16 precision (got %d)", fn,
                        precision);
    return NB_OK;
}

/* Element offset of sample n0 (elements per sample per) in a buffer of dtype dt. */
static const void *nb_at(const void *p, nb_dtype dt, int64_t i) {
    return dt == NB_BF16 ? (const void *)((const uint16_t *)p + i) : (const void *)((const float *)p + i);
}
static void *nb_at_w(void *p, nb_dtype dt, int64_t i) {
    return dt == NB_BF16 ? (void *)((uint16_t *)p + i) : (void *)((float *)p + i);
}

/* ---- conv2d --------------------------------------------------------------------------------- */

/* The cuBLAS paths take their operands (A, B) in one dtype: bf16 when any activation is bf16
 * (the f32 ones, weights included, converted into scratch), else f32 as before. */
/* ---- weights kept for the backward (nb_conv_wcache) ------------------------------------------ */

/* The key of the layout the backward's data gradient will read for d (0: none kept): the
 * implicit-GEMM kernels' (dx in the tape's 16-byte aligned arena), or the bf16 copy of the
 * cuBLAS paths. */
static int nb_conv_wc_key(int precision, const nb_conv_dims *d, nb_dtype xdt, nb_dtype ydt) {
    if (!d || precision < 0 || precision > 2) return 0;
    const void *al = (const void *)(uintptr_t)256;
    if (nb_conv_use_igemm(d, precision, 1, al, al))
        return nb_conv_igemm_dgrad_key(d, precision, xdt, ydt);
    return xdt == NB_BF16 || ydt == NB_BF16 ? NB_CONV_WC_BF16 : 0;
}

size_t nb_cuda_conv2d_wcache_bytes(int precision, const nb_conv_dims *d, nb_dtype xdt,
                                   nb_dtype ydt) {
    return nb_conv_igemm_wc_bytes(nb_conv_wc_key(precision, d, xdt, ydt), d);
}

size_t nb_cuda_linear_wcache_bytes(int precision, int64_t F, int64_t O, nb_dtype xdt,
                                   nb_dtype ydt) {
    if (precision < 0 || precision > 2 || F < 1 || O < 1 ||
        (xdt != NB_BF16 && ydt != NB_BF16))
        return 0;
    return (size_t)(F * O) * 2;
}

/* The forward's cache to fill: wc->key planned (wc->buf set), else NULL with wc->key = 0. */
static nb_conv_wcache *nb_conv_wc_fill(nb_conv_wcache *wc, int key) {
    if (!wc) return NULL;
    wc->key = wc->buf ? key : 0;
    return wc->key ? wc : NULL;
}

/* Weights w [n] (f32) as cuBLAS operands of dtype op: the forward's bf16 copy goes into the
 * cache it fills (fill, key NB_CONV_WC_BF16; else its key is cleared), a backward reads the
 * copy its forward kept (use), else slot 6 (nb_conv_as). */
typedef struct {
    const float *w;
    uint16_t *wb;
    long long n, wblocks;
    nb_row_p r;
} nb_wcvt_fill_p;

/* A forward's bf16 conversion with filled (non-NULL): also y [N,O,P] (ydt) := b[o] in the same
 * launch (nb_conv_wcvt_fill; b non-NULL), *filled = 1: the GEMM then runs with
 * beta = 1 instead of a bias pass afterwards. */
static nb_status nb_conv_w_operand_fill(nb_device *dev, const float *w, nb_dtype op, int64_t n,
                                        nb_conv_wcache *fill, const nb_conv_wcache *use,
                                        const void **wo, void *y, nb_dtype ydt, const float *b,
                                        int64_t N, int64_t O, int64_t P, int *filled) {
    if (filled) *filled = 0;
    void *dst = NULL;
    if (op == NB_BF16 && fill && fill->key == NB_CONV_WC_BF16) {
        dst = fill->buf;
    } else {
        if (fill) fill->key = 0;
        if (op == NB_BF16 && use && use->buf && use->key == NB_CONV_WC_BF16) {
            *wo = use->buf;
            return NB_OK;
        }
        if (op != NB_BF16) return nb_conv_as(dev, w, NB_F32, op, n, 6, wo);
        float *s6;
        NB_TRY(nb_conv_scratch(dev, 6, (size_t)n * 2, &s6));
        dst = s6;
    }
    *wo = dst;
    if (!filled || !y || !b || N <= 0 || O <= 0 || P <= 0)
        return nb_conv_convert(dev, w, NB_F32, dst, NB_BF16, n, 0);
    nb_wcvt_fill_p a;
    memset(&a, 0, sizeof a);
    a.w = w, a.wb = dst, a.n = (long long)n, a.wblocks = (long long)((n + 1023) / 1024);
    a.r = nb_conv_rows(dev, y, ydt, b, NULL, N, O, P);
    a.r.set = 1;
    int64_t rblocks = (((int64_t)a.r.units << a.r.lg) + 255) / 256;
    nb_jit_kernel *k;
    NB_TRY(nb_conv_aux_kernel(dev, "nb_conv_wcvt_fill", &k));
    const unsigned grid[3] = {(unsigned)(a.wblocks + rblocks), 1, 1}, block[3] = {256, 1, 1};
    NB_TRY(nb_jit_launch_cuda_grid(k, &a, sizeof a, grid, block, NULL));
    *filled = 1;
    return NB_OK;
}

static nb_status nb_conv_w_operand(nb_device *dev, const float *w, nb_dtype op, int64_t n,
                                   nb_conv_wcache *fill, const nb_conv_wcache *use,
                                   const void **wo) {
    return nb_conv_w_operand_fill(dev, w, op, n, fill, use, wo, NULL, NB_F32, NULL, 0, 0, 0, NULL);
}

nb_status nb_cuda_conv2d_forward(nb_device *dev, int precision, const nb_conv_dims *d,
                                 nb_dtype xdt, nb_dtype ydt, const void *x, const float *w,
                                 const float *b, void *y) {
    return nb_cuda_conv2d_forward_wc(dev, precision, d, xdt, ydt, x, w, b, y, NULL);
}

nb_status nb_cuda_conv2d_forward_wc(nb_device *dev, int precision, const nb_conv_dims *d,
                                    nb_dtype xdt, nb_dtype ydt, const void *x, const float *w,
                                    const float *b, void *y, nb_conv_wcache *wc) {
    if (wc) wc->key = 0;
    NB_TRY(nb_conv_check_dev(dev, "conv2d forward (CUDA)"));
    NB_TRY(nb_conv_check_prec(precision, "conv2d forward (CUDA)"));
    NB_TRY(nb_conv_check_dt(precision, xdt, ydt, "conv2d forward (CUDA)"));
    if (!d || !x || !w || !y)
        return nb_error(NB_ERR_INVALID_ARG, "conv2d forward (CUDA): dims, x, w or y is NULL");
    nb_conv_wcache *fill = nb_conv_wc_fill(wc, nb_conv_wc_key(precision, d, xdt, ydt));
    if (nb_conv_use_igemm(d, precision, 0, x, x))
        return nb_conv_igemm_forward(dev, precision, d, xdt, ydt, x, w, b, y, fill);
    int64_t P = d->OH * d->OW, CKK = d->C * d->K * d->K;
    nb_dtype op = xdt == NB_BF16 || ydt == NB_BF16 ? NB_BF16 : NB_F32;
    const void *wo = w;
    int filled = 0; /* y already holds the bias (beta = 1) */
    NB_TRY(nb_conv_w_operand_fill(dev, w, op, d->O * CKK, fill, NULL, &wo, y, ydt, b, d->N, d->O,
                                  P, &filled));
    float beta = filled ? 1.0f : 0.0f;
    if (nb_conv_is_pointwise(d)) {
        const void *xo;
        NB_TRY(nb_conv_as(dev, x, xdt, op, d->N * d->C * P, 3, &xo));
        /* y[n] [O,P] = w [O,C] x[n] [C,P] */
        NB_TRY(nb_cublas_gemm_rm_dt(dev, precision, op, ydt, 0, 0, d->O, P, d->C, 1.0f, wo, d->C,
                                    xo, P, beta, y, P, d->N, 0, d->C * P, d->O * P));
    } else {
        int64_t nc = nb_conv_chunk(d);
        float *col;
        NB_TRY(nb_conv_scratch(dev, 0, (size_t)(nc * CKK * P) * sizeof(float), &col));
        for (int64_t n0 = 0; n0 < d->N; n0 += nc) {
            int64_t m = d->N - n0 < nc ? d->N - n0 : nc;
            NB_TRY(nb_conv_im2col(dev, d, nb_at(x, xdt, n0 * d->C * d->H * d->W), xdt, col, op, m));
            /* y[n] [O,P] = w [O,CKK] col[n] [CKK,P] */
            NB_TRY(nb_cublas_gemm_rm_dt(dev, precision, op, ydt, 0, 0, d->O, P, CKK, 1.0f, wo, CKK,
                                        col, P, beta, nb_at_w(y, ydt, n0 * d->O * P), P, m, 0,
                                        CKK * P, d->O * P));
        }
    }
    if (b && !filled) NB_TRY(nb_conv_add_bias(dev, y, ydt, b, d->N, d->O, P));
    return NB_OK;
}

/* 1x1 stride-1 pad-0 weight gradient with bf16 activations on cuBLAS (automatic choice and
 * algo 1: ahead of the kernels' MODE 2 on the UNet's 1x1 shapes, H100 batch 32, backward
 * 0.095 vs 0.119 ms for 128->64 at 64x64, 0.051 vs 0.082 for 256->128 at 32x32):
 * dwn[n] [O,C] = dy[n] [O,P] x[n]^T [P,C] as one strided-batched bf16 GEMM into f32 scratch
 * (slot 5), then dw += the sum over n. */
/* (db, may be NULL: the bias gradient, in the launch that sums the partials) */
static nb_status nb_conv_pointwise_wgrad_bf16(nb_device *dev, int precision, const nb_conv_dims *d,
                                              nb_dtype xdt, nb_dtype ydt, const void *x,
                                              const void *dy, float *dw, float *db) {
    int64_t P = d->OH * d->OW, L = d->O * d->C;
    const void *xo, *dyo;
    NB_TRY(nb_conv_as(dev, x, xdt, NB_BF16, d->N * d->C * P, 3, &xo));
    NB_TRY(nb_conv_as(dev, dy, ydt, NB_BF16, d->N * d->O * P, 4, &dyo));
    float *part;
    NB_TRY(nb_conv_scratch(dev, 5, (size_t)(d->N * L) * sizeof(float), &part));
    NB_TRY(nb_cublas_gemm_rm_dt(dev, precision, NB_BF16, NB_F32, 0, 1, d->O, d->C, P, 1.0f, dyo, P,
                                xo, P, 0.0f, part, d->C, d->N, d->O * P, d->C * P, L));
    return nb_conv_sum_splits_db(dev, part, dw, L, d->N, dy, ydt, db, d->N, d->O, P);
}

nb_status nb_cuda_conv2d_backward(nb_device *dev, int precision, const nb_conv_dims *d,
                                  nb_dtype xdt, nb_dtype ydt, const void *x, const float *w,
                                  const void *dy, void *dx, float *dw, float *db, int dx_store) {
    return nb_cuda_conv2d_backward_wc(dev, precision, d, xdt, ydt, x, w, dy, dx, dw, db, dx_store,
                                      NULL);
}

nb_status nb_cuda_conv2d_backward_wc(nb_device *dev, int precision, const nb_conv_dims *d,
                                     nb_dtype xdt, nb_dtype ydt, const void *x, const float *w,
                                     const void *dy, void *dx, float *dw, float *db, int dx_store,
                                     const nb_conv_wcache *wc) {
    NB_TRY(nb_conv_check_dev(dev, "conv2d backward (CUDA)"));
    NB_TRY(nb_conv_check_prec(precision, "conv2d backward (CUDA)"));
    NB_TRY(nb_conv_check_dt(precision, xdt, ydt, "conv2d backward (CUDA)"));
    if (!d || !x || !w || !dy)
        return nb_error(NB_ERR_INVALID_ARG, "conv2d backward (CUDA): dims, x, w or dy is NULL");
    int64_t P = d->OH * d->OW, CKK = d->C * d->K * d->K;
    if (dx && nb_conv_use_igemm(d, precision, 1, dy, dy)) {
        NB_TRY(nb_conv_igemm_dgrad(dev, precision, d, xdt, ydt, w, dy, dx, dx_store, wc));
        dx = NULL;
    }
    if (dw && nb_conv_is_pointwise(d) && nb_conv_algo != 2 &&
        (xdt == NB_BF16 || ydt == NB_BF16)) {
        NB_TRY(nb_conv_pointwise_wgrad_bf16(dev, precision, d, xdt, ydt, x, dy, dw, db));
        dw = NULL, db = NULL;
    }
    /* bf16 3x3 stride 1 (lead, session 5): the vectorized-im2col kernel (conv_cuda_wg4.h),
     * 1.2-2.4x ahead of both paths below on every reference-UNet shape (H100, batch 32,
     * tools/device/wg4.sh (removed; git history); UNet step BF16 13.86 -> 12.61 ms, docs/PERF.md) */
    if (dw && nb_conv_algo == 0 && ((uintptr_t)x | (uintptr_t)dy) % 16 == 0 &&
        nb_conv_wg4_preferred(d, precision, xdt, ydt)) {
        NB_TRY(nb_conv_wg4(dev, precision, d, x, dy, dw, db)); /* (db along with dy's read) */
        dw = NULL, db = NULL;
    }
    /* small images (8x8; 16x16 with bf16): im2col + one cuBLAS GEMM beats the implicit-GEMM
     * weight gradient (conv_cuda_wgrad.h; .export/device-results/wgrad/bench.log) */
    if (dw && nb_conv_algo == 0 && nb_conv_wgrad_gemm_preferred(d, xdt, ydt)) {
        /* (the bias gradient rides along with its pass over dy) */
        NB_TRY(nb_conv_wgrad_gemm_db(dev, precision, d, x, xdt, dy, ydt, dw, db));
        dw = NULL, db = NULL;
    }
    if (dw && nb_conv_use_igemm(d, precision, 2, dy, x)) {
        /* (may take the bias gradient along: db = NULL then) */
        NB_TRY(nb_conv_igemm_wgrad(dev, precision, d, xdt, ydt, x, dy, dw, &db));
        dw = NULL;
    }
    if (db) NB_TRY(nb_conv_bias_grad(dev, dy, ydt, db, d->N, d->O, P));
    if (!dx && !dw) return NB_OK;
    nb_dtype op = xdt == NB_BF16 || ydt == NB_BF16 ? NB_BF16 : NB_F32;
    const void *wo = w, *dyo;
    if (dx) NB_TRY(nb_conv_w_operand(dev, w, op, d->O * CKK, NULL, wc, &wo));
    NB_TRY(nb_conv_as(dev, dy, ydt, op, d->N * d->O * P, 4, &dyo));
    if (nb_conv_is_pointwise(d)) {
        /* dx[n] [C,P] += (dx_store: =) w^T [C,O] dy[n] [O,P] */
        if (dx)
            NB_TRY(nb_cublas_gemm_rm_dt(dev, precision, op, xdt, 1, 0, d->C, P, d->O, 1.0f, wo,
                                        d->C, dyo, P, dx_store ? 0.0f : 1.0f, dx, P, d->N, 0,
                                        d->O * P, d->C * P));
        /* dw [O,C] += dy[n] [O,P] x[n]^T [P,C], summed over n */
        const void *xo = x;
        if (dw) NB_TRY(nb_conv_as(dev, x, xdt, op, d->N * d->C * P, 3, &xo));
        for (int64_t n = 0; dw && n < d->N; n++)
            NB_TRY(nb_cublas_gemm_rm_dt(dev, precision, op, NB_F32, 0, 1, d->O, d->C, P, 1.0f,
                                        nb_at(dyo, op, n * d->O * P), P,
                                        nb_at(xo, op, n * d->C * P), P, 1.0f, dw, d->C, 1, 0, 0, 0));
        return NB_OK;
    }
    int64_t nc = nb_conv_chunk(d);
    float *col;
    NB_TRY(nb_conv_scratch(dev, 0, (size_t)(nc * CKK * P) * sizeof(float), &col));
    for (int64_t n0 = 0; n0 < d->N; n0 += nc) {
        int64_t m = d->N - n0 < nc ? d->N - n0 : nc;
        if (dw) {
            NB_TRY(nb_conv_im2col(dev, d, nb_at(x, xdt, n0 * d->C * d->H * d->W), xdt, col, op, m));
            /* dw [O,CKK] += dy[n] [O,P] col[n]^T [P,CKK] */
            for (int64_t i = 0; i < m; i++)
                NB_TRY(nb_cublas_gemm_rm_dt(dev, precision, op, NB_F32, 0, 1, d->O, CKK, P, 1.0f,
                                            nb_at(dyo, op, (n0 + i) * d->O * P), P,
                                            nb_at(col, op, i * CKK * P), P, 1.0f, dw, CKK, 1, 0,
                                            0, 0));
        }
        if (dx) {
            /* dcol[n] [CKK,P] (f32) = w^T [CKK,O] dy[n] [O,P], then scattered back (summed) */
            NB_TRY(nb_cublas_gemm_rm_dt(dev, precision, op, NB_F32, 1, 0, CKK, P, d->O, 1.0f, wo,
                                        CKK, nb_at(dyo, op, n0 * d->O * P), P, 0.0f, col, P, m, 0,
                                        d->O * P, CKK * P));
            NB_TRY(nb_conv_col2im(dev, d, col, nb_at_w(dx, xdt, n0 * d->C * d->H * d->W), xdt, m,
                                  dx_store));
        }
    }
    return NB_OK;
}

/* ---- linear --------------------------------------------------------------------------------- */

nb_status nb_cuda_linear_forward(nb_device *dev, int precision, int64_t N, int64_t F, int64_t O,
                                 nb_dtype xdt, nb_dtype ydt, const void *x, const float *w,
                                 const float *b, void *y) {
    return nb_cuda_linear_forward_wc(dev, precision, N, F, O, xdt, ydt, x, w, b, y, NULL);
}

/* relu: the bias pass is y = relu(y + b) (LINEAR_RELU) */
static nb_status linear_forward(nb_device *dev, int precision, int64_t N, int64_t F, int64_t O,
                                nb_dtype xdt, nb_dtype ydt, const void *x, const float *w,
                                const float *b, void *y, nb_conv_wcache *wc, int relu) {
    if (wc) wc->key = 0;
    NB_TRY(nb_conv_check_dev(dev, "linear forward (CUDA)"));
    NB_TRY(nb_conv_check_prec(precision, "linear forward (CUDA)"));
    NB_TRY(nb_conv_check_dt(precision, xdt, ydt, "linear forward (CUDA)"));
    if (!x || !w || !y) return nb_error(NB_ERR_INVALID_ARG, "linear forward (CUDA): x, w or y is NULL");
    nb_dtype op = xdt == NB_BF16 || ydt == NB_BF16 ? NB_BF16 : NB_F32;
    const void *xo, *wo;
    NB_TRY(nb_conv_as(dev, x, xdt, op, N * F, 3, &xo));
    nb_conv_wcache *fill = nb_conv_wc_fill(
        wc, nb_cuda_linear_wcache_bytes(precision, F, O, xdt, ydt) ? NB_CONV_WC_BF16 : 0);
    int filled = 0; /* y already holds the bias (beta = 1) */
    NB_TRY(nb_conv_w_operand_fill(dev, w, op, O * F, fill, NULL, &wo, y, ydt, b, N, O, 1, &filled));
    /* y [N,O] = x [N,F] w^T [F,O] */
    NB_TRY(nb_cublas_gemm_rm_dt(dev, precision, op, ydt, 0, 1, N, O, F, 1.0f, xo, F, wo, F,
                                filled ? 1.0f : 0.0f, y, O, 1, 0, 0, 0));
    if (relu) return nb_conv_add_bias_relu(dev, y, ydt, filled ? NULL : b, N, O, 1);
    if (b && !filled) NB_TRY(nb_conv_add_bias(dev, y, ydt, b, N, O, 1));
    return NB_OK;
}

nb_status nb_cuda_linear_forward_wc(nb_device *dev, int precision, int64_t N, int64_t F,
                                    int64_t O, nb_dtype xdt, nb_dtype ydt, const void *x,
                                    const float *w, const float *b, void *y, nb_conv_wcache *wc) {
    return linear_forward(dev, precision, N, F, O, xdt, ydt, x, w, b, y, wc, 0);
}

nb_status nb_cuda_linear_relu_forward_wc(nb_device *dev, int precision, int64_t N, int64_t F,
                                         int64_t O, nb_dtype xdt, nb_dtype ydt, const void *x,
                                         const float *w, const float *b, void *y,
                                         nb_conv_wcache *wc) {
    return linear_forward(dev, precision, N, F, O, xdt, ydt, x, w, b, y, wc, 1);
}

nb_status nb_cuda_linear_backward(nb_device *dev, int precision, int64_t N, int64_t F, int64_t O,
                                  nb_dtype xdt, nb_dtype ydt, const void *x, const float *w,
                                  const void *dy, void *dx, float *dw, float *db, int dx_store) {
    return nb_cuda_linear_backward_wc(dev, precision, N, F, O, xdt, ydt, x, w, dy, dx, dw, db,
                                      dx_store, NULL);
}

nb_status nb_cuda_linear_backward_wc(nb_device *dev, int precision, int64_t N, int64_t F,
                                     int64_t O, nb_dtype xdt, nb_dtype ydt, const void *x,
                                     const float *w, const void *dy, void *dx, float *dw,
                                     float *db, int dx_store, const nb_conv_wcache *wc) {
    NB_TRY(nb_conv_check_dev(dev, "linear backward (CUDA)"));
    NB_TRY(nb_conv_check_prec(precision, "linear backward (CUDA)"));
    NB_TRY(nb_conv_check_dt(precision, xdt, ydt, "linear backward (CUDA)"));
    if (!x || !w || !dy)
        return nb_error(NB_ERR_INVALID_ARG, "linear backward (CUDA): x, w or dy is NULL");
    nb_dtype op = xdt == NB_BF16 || ydt == NB_BF16 ? NB_BF16 : NB_F32;
    const void *dyo;
    NB_TRY(nb_conv_as(dev, dy, ydt, op, N * O, 4, &dyo));
    /* dx [N,F] += (dx_store: =) dy [N,O] w [O,F] */
    if (dx) {
        const void *wo;
        NB_TRY(nb_conv_w_operand(dev, w, op, O * F, NULL, wc, &wo));
        NB_TRY(nb_cublas_gemm_rm_dt(dev, precision, op, xdt, 0, 0, N, F, O, 1.0f, dyo, O, wo, F,
                                    dx_store ? 0.0f : 1.0f, dx, F, 1, 0, 0, 0));
    }
    /* dw [O,F] += dy^T [O,N] x [N,F] */
    if (dw) {
        const void *xo;
        NB_TRY(nb_conv_as(dev, x, xdt, op, N * F, 3, &xo));
        NB_TRY(nb_cublas_gemm_rm_dt(dev, precision, op, NB_F32, 1, 0, O, F, N, 1.0f, dyo, O, xo, F,
                                    1.0f, dw, F, 1, 0, 0, 0));
    }
    if (db) NB_TRY(nb_conv_bias_grad(dev, dy, ydt, db, N, O, 1));
    return NB_OK;
}

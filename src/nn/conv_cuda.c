/* CUDA linear and conv2d (conv_cuda.h): cuBLAS GEMMs, im2col / col2im, bias and bias-gradient
 * kernels, and the choice between this path and the implicit-GEMM kernels of
 * conv_cuda_igemm.c. CPU reference: tape_ops_basic.c (linear) and tape_ops_conv.c (conv2d). */
#include "nn/conv_cuda.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core/util.h"
#include "nn/conv_cuda_igemm.h"
#include "nn/cublas.h"
#include "nn/encoding_internal.h"

/* ---- kernels (NVRTC) ------------------------------------------------------------------------ */

static const char nb_conv_aux_src[] =
    "struct Im2colP { const float *x; float *col; long long total;\n"
    "                 int C, H, W, K, S, pad, OH, OW; };\n"
    "/* col[nl][c*K*K + ki*K + kj][oh*OW + ow] = x[nl][c][oh*S-pad+ki][ow*S-pad+kj] (0 outside) */\n"
    "extern \"C\" __global__ void nb_conv_im2col(Im2colP p) {\n"
    "    long long P = (long long)p.OH * p.OW; int KK = p.K * p.K;\n"
    "    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.total;\n"
    "         i += (long long)gridDim.x * blockDim.x) {\n"
    "        long long pp = i % P, r = i / P;\n"
    "        int kk = (int)(r % KK); r /= KK;\n"
    "        int c = (int)(r % p.C); long long nl = r / p.C;\n"
    "        int oh = (int)(pp / p.OW), ow = (int)(pp % p.OW);\n"
    "        int ih = oh * p.S - p.pad + kk / p.K, iw = ow * p.S - p.pad + kk % p.K;\n"
    "        float v = 0.0f;\n"
    "        if (ih >= 0 && ih < p.H && iw >= 0 && iw < p.W)\n"
    "            v = p.x[((nl * p.C + c) * p.H + ih) * p.W + iw];\n"
    "        p.col[i] = v;\n"
    "    }\n"
    "}\n"
    "struct Col2imP { const float *col; float *dx; long long total;\n"
    "                 int C, H, W, K, S, pad, OH, OW, store; };\n"
    "/* dx[nl][c][h][w] += (store: =) sum of the col entries that im2col read from (h, w) */\n"
    "extern \"C\" __global__ void nb_conv_col2im(Col2imP p) {\n"
    "    long long P = (long long)p.OH * p.OW; int KK = p.K * p.K;\n"
    "    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.total;\n"
    "         i += (long long)gridDim.x * blockDim.x) {\n"
    "        int w = (int)(i % p.W); long long r = i / p.W;\n"
    "        int h = (int)(r % p.H); r /= p.H;\n"
    "        int c = (int)(r % p.C); long long nl = r / p.C;\n"
    "        const float *col = p.col + (nl * p.C + c) * KK * P;\n"
    "        float acc = 0.0f;\n"
    "        for (int ki = 0; ki < p.K; ki++) {\n"
    "            int th = h + p.pad - ki;\n"
    "            if (th < 0 || th % p.S) continue;\n"
    "            int oh = th / p.S; if (oh >= p.OH) continue;\n"
    "            for (int kj = 0; kj < p.K; kj++) {\n"
    "                int tw = w + p.pad - kj;\n"
    "                if (tw < 0 || tw % p.S) continue;\n"
    "                int ow = tw / p.S; if (ow >= p.OW) continue;\n"
    "                acc += col[(long long)(ki * p.K + kj) * P + oh * p.OW + ow];\n"
    "            }\n"
    "        }\n"
    "        if (p.store) p.dx[i] = acc; else p.dx[i] += acc;\n"
    "    }\n"
    "}\n"
    "struct BiasP { float *y; const float *b; long long total; long long P; int O; };\n"
    "/* y[n][o][p] += b[o] */\n"
    "extern \"C\" __global__ void nb_conv_bias(BiasP p) {\n"
    "    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.total;\n"
    "         i += (long long)gridDim.x * blockDim.x)\n"
    "        p.y[i] += p.b[(int)((i / p.P) % p.O)];\n"
    "}\n"
    "struct BiasGradP { const float *dy; float *db; int N, P, O; };\n"
    "/* db[o] += sum over n, p of dy[n][o][p]: blocks (o, y) of 256 threads, each y a strided share\n"
    " * of the N*P terms, added with one atomic per block */\n"
    "extern \"C\" __global__ void nb_conv_bias_grad(BiasGradP p) {\n"
    "    int o = blockIdx.x, tot = p.N * p.P;\n"
    "    float acc = 0.0f;\n"
    "    for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < tot; i += gridDim.y * blockDim.x) {\n"
    "        int n = i / p.P, pp = i - n * p.P;\n"
    "        acc += p.dy[((long long)n * p.O + o) * p.P + pp];\n"
    "    }\n"
    "    for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);\n"
    "    __shared__ float part[32];\n"
    "    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;\n"
    "    __syncthreads();\n"
    "    if (threadIdx.x == 0) {\n"
    "        float s = 0.0f;\n"
    "        for (int k = 0; k < (int)(blockDim.x >> 5); k++) s += part[k];\n"
    "        atomicAdd(p.db + o, s);\n"
    "    }\n"
    "}\n";

const char *nb_conv_aux_source(void) { return nb_conv_aux_src; }

typedef struct {
    const float *x;
    float *col;
    long long total;
    int C, H, W, K, S, pad, OH, OW;
} nb_im2col_p;
typedef struct {
    const float *col;
    float *dx;
    long long total;
    int C, H, W, K, S, pad, OH, OW, store;
} nb_col2im_p;
typedef struct {
    float *y;
    const float *b;
    long long total;
    long long P;
    int O;
} nb_bias_p;
typedef struct {
    const float *dy;
    float *db;
    int N, P, O;
} nb_bias_grad_p;

static nb_status nb_conv_kernel(nb_device *dev, const char *entry, nb_jit_kernel **k) {
    return nb_nn_cuda_kernel(dev, nb_conv_aux_src, entry, k);
}

/* y [N,O,P] += b[o] */
static nb_status nb_conv_add_bias(nb_device *dev, float *y, const float *b, int64_t N, int64_t O,
                                  int64_t P) {
    nb_jit_kernel *k;
    NB_TRY(nb_conv_kernel(dev, "nb_conv_bias", &k));
    nb_bias_p a = {y, b, (long long)(N * O * P), (long long)P, (int)O};
    return nb_jit_launch_cuda(k, &a, sizeof a, N * O * P, NULL);
}

/* db[o] += sum dy[n,o,p] */
static nb_status nb_conv_bias_grad(nb_device *dev, const float *dy, float *db, int64_t N,
                                   int64_t O, int64_t P) {
    nb_jit_kernel *k;
    NB_TRY(nb_conv_kernel(dev, "nb_conv_bias_grad", &k));
    nb_bias_grad_p a = {dy, db, (int)N, (int)P, (int)O};
    /* about two blocks per SM in all, each summing >= 4096 terms */
    int64_t want = 2 * (int64_t)nb_device_get_info(dev)->multiprocessors;
    int64_t y = (want + O - 1) / O, most = (N * P + 4095) / 4096;
    if (y > most) y = most;
    if (y < 1) y = 1;
    if (y > 65535) y = 65535;
    const unsigned grid[3] = {(unsigned)O, (unsigned)y, 1}, block[3] = {256, 1, 1};
    return nb_jit_launch_cuda_grid(k, &a, sizeof a, grid, block, NULL);
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

static nb_status nb_conv_im2col(nb_device *dev, const nb_conv_dims *d, const float *x, float *col,
                                int64_t nc) {
    nb_jit_kernel *k;
    NB_TRY(nb_conv_kernel(dev, "nb_conv_im2col", &k));
    int64_t total = nc * d->C * d->K * d->K * d->OH * d->OW;
    nb_im2col_p a = {x, col, (long long)total, (int)d->C, (int)d->H, (int)d->W, (int)d->K,
                     (int)d->stride, (int)d->pad, (int)d->OH, (int)d->OW};
    return nb_jit_launch_cuda(k, &a, sizeof a, total, NULL);
}

static nb_status nb_conv_col2im(nb_device *dev, const nb_conv_dims *d, const float *col, float *dx,
                                int64_t nc, int store) {
    nb_jit_kernel *k;
    NB_TRY(nb_conv_kernel(dev, "nb_conv_col2im", &k));
    int64_t total = nc * d->C * d->H * d->W;
    nb_col2im_p a = {col, dx, (long long)total, (int)d->C, (int)d->H, (int)d->W, (int)d->K,
                     (int)d->stride, (int)d->pad, (int)d->OH, (int)d->OW, store};
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

/* ---- conv2d --------------------------------------------------------------------------------- */

nb_status nb_cuda_conv2d_forward(nb_device *dev, int precision, const nb_conv_dims *d,
                                 const float *x, const float *w, const float *b, float *y) {
    NB_TRY(nb_conv_check_dev(dev, "conv2d forward (CUDA)"));
    NB_TRY(nb_conv_check_prec(precision, "conv2d forward (CUDA)"));
    if (!d || !x || !w || !y)
        return nb_error(NB_ERR_INVALID_ARG, "conv2d forward (CUDA): dims, x, w or y is NULL");
    if (nb_conv_use_igemm(d, precision, 0, x, x)) return nb_conv_igemm_forward(dev, precision, d, x, w, b, y);
    int64_t P = d->OH * d->OW, CKK = d->C * d->K * d->K;
    if (nb_conv_is_pointwise(d)) {
        /* y[n] [O,P] = w [O,C] x[n] [C,P] */
        NB_TRY(nb_cublas_gemm_rm(dev, precision, 0, 0, d->O, P, d->C, 1.0f, w, d->C, x, P, 0.0f,
                                 y, P, d->N, 0, d->C * P, d->O * P));
    } else {
        int64_t nc = nb_conv_chunk(d);
        float *col;
        NB_TRY(nb_conv_scratch(dev, 0, (size_t)(nc * CKK * P) * sizeof(float), &col));
        for (int64_t n0 = 0; n0 < d->N; n0 += nc) {
            int64_t m = d->N - n0 < nc ? d->N - n0 : nc;
            NB_TRY(nb_conv_im2col(dev, d, x + n0 * d->C * d->H * d->W, col, m));
            /* y[n] [O,P] = w [O,CKK] col[n] [CKK,P] */
            NB_TRY(nb_cublas_gemm_rm(dev, precision, 0, 0, d->O, P, CKK, 1.0f, w, CKK, col, P,
                                     0.0f, y + n0 * d->O * P, P, m, 0, CKK * P, d->O * P));
        }
    }
    if (b) NB_TRY(nb_conv_add_bias(dev, y, b, d->N, d->O, P));
    return NB_OK;
}

nb_status nb_cuda_conv2d_backward(nb_device *dev, int precision, const nb_conv_dims *d,
                                  const float *x, const float *w, const float *dy, float *dx,
                                  float *dw, float *db, int dx_store) {
    NB_TRY(nb_conv_check_dev(dev, "conv2d backward (CUDA)"));
    NB_TRY(nb_conv_check_prec(precision, "conv2d backward (CUDA)"));
    if (!d || !x || !w || !dy)
        return nb_error(NB_ERR_INVALID_ARG, "conv2d backward (CUDA): dims, x, w or dy is NULL");
    int64_t P = d->OH * d->OW, CKK = d->C * d->K * d->K;
    if (db) NB_TRY(nb_conv_bias_grad(dev, dy, db, d->N, d->O, P));
    if (dx && nb_conv_use_igemm(d, precision, 1, dy, dy)) {
        NB_TRY(nb_conv_igemm_dgrad(dev, precision, d, w, dy, dx, dx_store));
        dx = NULL;
    }
    if (dw && nb_conv_use_igemm(d, precision, 2, dy, x)) {
        NB_TRY(nb_conv_igemm_wgrad(dev, precision, d, x, dy, dw));
        dw = NULL;
    }
    if (!dx && !dw) return NB_OK;
    if (nb_conv_is_pointwise(d)) {
        /* dx[n] [C,P] += (dx_store: =) w^T [C,O] dy[n] [O,P] */
        if (dx)
            NB_TRY(nb_cublas_gemm_rm(dev, precision, 1, 0, d->C, P, d->O, 1.0f, w, d->C, dy, P,
                                     dx_store ? 0.0f : 1.0f, dx, P, d->N, 0, d->O * P, d->C * P));
        /* dw [O,C] += dy[n] [O,P] x[n]^T [P,C], summed over n */
        for (int64_t n = 0; dw && n < d->N; n++)
            NB_TRY(nb_cublas_gemm_rm(dev, precision, 0, 1, d->O, d->C, P, 1.0f, dy + n * d->O * P,
                                     P, x + n * d->C * P, P, 1.0f, dw, d->C, 1, 0, 0, 0));
        return NB_OK;
    }
    int64_t nc = nb_conv_chunk(d);
    float *col;
    NB_TRY(nb_conv_scratch(dev, 0, (size_t)(nc * CKK * P) * sizeof(float), &col));
    for (int64_t n0 = 0; n0 < d->N; n0 += nc) {
        int64_t m = d->N - n0 < nc ? d->N - n0 : nc;
        if (dw) {
            NB_TRY(nb_conv_im2col(dev, d, x + n0 * d->C * d->H * d->W, col, m));
            /* dw [O,CKK] += dy[n] [O,P] col[n]^T [P,CKK] */
            for (int64_t i = 0; i < m; i++)
                NB_TRY(nb_cublas_gemm_rm(dev, precision, 0, 1, d->O, CKK, P, 1.0f,
                                         dy + (n0 + i) * d->O * P, P, col + i * CKK * P, P, 1.0f,
                                         dw, CKK, 1, 0, 0, 0));
        }
        if (dx) {
            /* dcol[n] [CKK,P] = w^T [CKK,O] dy[n] [O,P], then scattered back (summed) */
            NB_TRY(nb_cublas_gemm_rm(dev, precision, 1, 0, CKK, P, d->O, 1.0f, w, CKK,
                                     dy + n0 * d->O * P, P, 0.0f, col, P, m, 0, d->O * P, CKK * P));
            NB_TRY(nb_conv_col2im(dev, d, col, dx + n0 * d->C * d->H * d->W, m, dx_store));
        }
    }
    return NB_OK;
}

/* ---- linear --------------------------------------------------------------------------------- */

nb_status nb_cuda_linear_forward(nb_device *dev, int precision, int64_t N, int64_t F, int64_t O,
                                 const float *x, const float *w, const float *b, float *y) {
    NB_TRY(nb_conv_check_dev(dev, "linear forward (CUDA)"));
    NB_TRY(nb_conv_check_prec(precision, "linear forward (CUDA)"));
    if (!x || !w || !y) return nb_error(NB_ERR_INVALID_ARG, "linear forward (CUDA): x, w or y is NULL");
    /* y [N,O] = x [N,F] w^T [F,O] */
    NB_TRY(nb_cublas_gemm_rm(dev, precision, 0, 1, N, O, F, 1.0f, x, F, w, F, 0.0f, y, O, 1, 0, 0, 0));
    if (b) NB_TRY(nb_conv_add_bias(dev, y, b, N, O, 1));
    return NB_OK;
}

nb_status nb_cuda_linear_backward(nb_device *dev, int precision, int64_t N, int64_t F, int64_t O,
                                  const float *x, const float *w, const float *dy, float *dx,
                                  float *dw, float *db, int dx_store) {
    NB_TRY(nb_conv_check_dev(dev, "linear backward (CUDA)"));
    NB_TRY(nb_conv_check_prec(precision, "linear backward (CUDA)"));
    if (!x || !w || !dy)
        return nb_error(NB_ERR_INVALID_ARG, "linear backward (CUDA): x, w or dy is NULL");
    /* dx [N,F] += (dx_store: =) dy [N,O] w [O,F] */
    if (dx)
        NB_TRY(nb_cublas_gemm_rm(dev, precision, 0, 0, N, F, O, 1.0f, dy, O, w, F,
                                 dx_store ? 0.0f : 1.0f, dx, F, 1, 0, 0, 0));
    /* dw [O,F] += dy^T [O,N] x [N,F] */
    if (dw) NB_TRY(nb_cublas_gemm_rm(dev, precision, 1, 0, O, F, N, 1.0f, dy, O, x, F, 1.0f, dw, F, 1, 0, 0, 0));
    if (db) NB_TRY(nb_conv_bias_grad(dev, dy, db, N, O, 1));
    return NB_OK;
}

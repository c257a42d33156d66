/* conv2d weight gradient as im2col + one cuBLAS GEMM (conv_cuda_wgrad.h). CPU reference:
 * tape_ops_conv.c's conv2d backward (and the f64 loop in tests/test_nn_conv_wgrad_cuda.c). */
#include "nn/conv/conv_cuda_wgrad.h"

#include <stdint.h>
#include <string.h>

#include "core/util.h"
#include "jit/cuda_files.h"
#include "nabla/nn_tape.h"
#include "device/cublas.h"
#include "nn/common/nn_common.h"

/* The kernels of this file. */
#define NB_WG_CU "src/nn/conv/kernels/wgrad.cu"

/* ---- kernels (NVRTC) ------------------------------------------------------------------------ */

typedef struct {
    const void *x;
    void *col;
    int C, H, W, K, S, pad, OH, OW, Kt, CKK, xbf, cbf, vec;
} nb_wg_col_p;
typedef struct {
    const void *dy;
    void *dyt;
    int O, P, Kt, ybf, tbf, vec;
    float *db;
} nb_wg_tr_p;
typedef struct {
    const float *part;
    float *dw;
    long long L;
    int S;
} nb_wg_sum_p;
typedef struct {
    const void *src;
    void *dst;
    int C, H, W, OH, OW, rows, Kt, Lr, sbf, dbf, vec;
} nb_wg_rs_p;
typedef struct {
    const float *part;
    float *dw;
    int O, C, T;
} nb_wg_sum3_p;
typedef struct {
    nb_wg_rs_p a, b;
    float *db;
    int ya;
} nb_wg_rs2_p;

/* ---- tuning --------------------------------------------------------------------------------- */

static int nb_wg_split = 0, nb_wg_layout = -1, nb_wg_chunk_mib = 0, nb_wg_skip = 0;

void nb_conv_wgrad_set_skip(int mask) { nb_wg_skip = mask; }

void nb_conv_wgrad_set_tuning(int split, int layout, int chunk_mib) {
    nb_wg_split = split < 0 ? 0 : split;
    nb_wg_layout = layout >= 0 && layout <= 2 ? layout : -1;
    nb_wg_chunk_mib = chunk_mib < 0 ? 0 : chunk_mib;
}

#define NB_WG_MAX_SPLIT 32
#define NB_WG_PART_BYTES ((int64_t)64 << 20)

/* Slices of K so that (output tiles of 128 x 128) x slices covers the SMs about once, each slice
 * >= 1024 deep, the partials <= 64 MiB. */
static int nb_wg_pick_split(nb_device *dev, const nb_conv_dims *d, int64_t Kt) {
    int64_t CKK = d->C * d->K * d->K;
    int64_t tiles = ((d->O + 127) / 128) * ((CKK + 127) / 128);
    int64_t sms = nb_device_get_info(dev)->multiprocessors;
    if (sms < 1) sms = 1;
    int64_t s = (sms + tiles - 1) / tiles;
    if (s > Kt / 1024) s = Kt / 1024;
    if (s > NB_WG_MAX_SPLIT) s = NB_WG_MAX_SPLIT;
    int64_t most = NB_WG_PART_BYTES / (d->O * CKK * (int64_t)sizeof(float));
    if (s > most) s = most;
    return s < 1 ? 1 : (int)s;
}

/* Samples per chunk: the columns of one chunk stay under the cap (~256 MiB). */
static int64_t nb_wg_chunk(const nb_conv_dims *d, size_t es) {
    int64_t per = d->C * d->K * d->K * d->OH * d->OW * (int64_t)es;
    int64_t cap = (int64_t)(nb_wg_chunk_mib > 0 ? nb_wg_chunk_mib : 256) << 20;
    if (cap > ((int64_t)1 << 30)) cap = (int64_t)1 << 30;
    int64_t n = cap / (per > 0 ? per : 1);
    /* the kernels index col [CKK, n P] and dyT [O, n P] with 32-bit ints (one sample beyond
     * that is refused by nb_conv_wgrad_gemm) */
    int64_t rows = d->C * d->K * d->K > d->O ? d->C * d->K * d->K : d->O;
    int64_t kmax = (int64_t)0x7fffffff / (d->OH * d->OW * rows);
    if (n > kmax) n = kmax;
    if (n < 1) n = 1;
    if (n > d->N) n = d->N;
    return n;
}

static int nb_wg_rs_ok_dims(const nb_conv_dims *d) {
    return d->K == 3 && d->stride == 1 && d->pad == 1 && d->OW % 8 == 0;
}

int nb_conv_wgrad_auto_split(nb_device *dev, const nb_conv_dims *d) {
    if (!nb_wg_rs_ok_dims(d) || d->OH * d->OW <= 64) return 1; /* im2col: one GEMM */
    nb_conv_dims d3 = *d;
    d3.C = 3 * d->C, d3.K = 1;
    return nb_wg_pick_split(dev, &d3, d->N * (d->OH + 2) * d->OW);
}

int nb_conv_wgrad_gemm_preferred(const nb_conv_dims *d, nb_dtype xdt, nb_dtype ydt) {
    int bf = xdt == NB_BF16 || ydt == NB_BF16;
    int64_t P = d->OH * d->OW;
    return d->K == 3 && d->stride == 1 && (P <= 64 || (bf && P <= 256));
}

/* ---- the weight gradient ---------------------------------------------------------------------- */

static const void *nb_wg_at(const void *p, nb_dtype dt, int64_t i) {
    return dt == NB_BF16 ? (const void *)((const uint16_t *)p + i) : (const void *)((const float *)p + i);
}

static nb_status nb_wg_check(nb_device *dev, int precision, const nb_conv_dims *d, const void *x,
                             nb_dtype xdt, const void *dy, nb_dtype ydt, const float *dw) {
    const char *fn = "conv2d weight gradient (CUDA GEMM)";
    if (!dev || nb_device_get_kind(dev) != NB_DEVICE_CUDA)
        return nb_error(NB_ERR_INVALID_ARG, "%s: device %s is not a CUDA device", fn,
                        dev ? nb_device_name(dev) : "NULL");
    if (precision < NB_TAPE_FP32 || precision > NB_TAPE_BF16)
        return nb_error(NB_ERR_INVALID_ARG, "%s: precision %d is not FP32, TF32 or BF16", fn,
                        precision);
    if ((xdt != NB_F32 && xdt != NB_BF16) || (ydt != NB_F32 && ydt != NB_BF16))
        return nb_error(NB_ERR_INVALID_ARG, "%s: storage dtypes %s / %s (f32 or bf16 supported)",
                        fn, nb_dtype_name(xdt), nb_dtype_name(ydt));
    if ((xdt == NB_BF16 || ydt == NB_BF16) && precision != NB_TAPE_BF16)
        return nb_error(NB_ERR_INVALID_ARG, "%s: bf16 storage needs BF16 precision (got %d)", fn,
                        precision);
    if (!d || !x || !dy || !dw) return nb_error(NB_ERR_INVALID_ARG, "%s: d, x, dy or dw is NULL", fn);
    if (d->N < 1 || d->C < 1 || d->O < 1 || d->OH < 1 || d->OW < 1 || (d->K != 1 && d->K != 3) ||
        d->stride < 1 || d->stride > 2 || d->pad < 0 ||
        d->OH != (d->H + 2 * d->pad - d->K) / d->stride + 1 ||
        d->OW != (d->W + 2 * d->pad - d->K) / d->stride + 1)
        return nb_error(NB_ERR_INVALID_ARG,
                        "%s: bad dims N=%lld C=%lld H=%lld W=%lld O=%lld K=%lld stride=%lld pad=%lld "
                        "(make them with nb_conv_dims_make)",
                        fn, (long long)d->N, (long long)d->C, (long long)d->H, (long long)d->W,
                        (long long)d->O, (long long)d->K, (long long)d->stride, (long long)d->pad);
    return NB_OK;
}

/* The row-shift form applies: 3x3, stride 1, pad 1, OW % 8 == 0 (16-byte aligned tap offsets). */
static int nb_wg_rs_ok(const nb_conv_dims *d) { return nb_wg_rs_ok_dims(d); }

/* Row-shift form (layout 2): columns over the 3 horizontal taps only, on padded rows, so the
 * vertical tap ki is a shift of the K index by ki*OW: per chunk
 *   cols3 [3C, Lr] (Lr = m (OH+2) OW + 2 OW, zero tail), dyp [O, Kt] (Kt = m (OH+2) OW, zero
 *   in the 2 padding rows of each sample), part[ki][s] [O, 3C] = dyp[:, slice s] x
 *   cols3[:, slice s + ki OW]^T, then dw[o][c*9 + ki*3 + kj] += sum over s of part[ki][s][o][c*3+kj].
 * A third of im2col's column traffic. */
static nb_status nb_wg_rowshift(nb_device *dev, int precision, const nb_conv_dims *d,
                                const void *x, nb_dtype xdt, const void *dy, nb_dtype ydt,
                                float *dw, float *db, nb_dtype op) {
    size_t es = nb_dtype_size(op);
    int64_t OW = d->OW, Bk = (d->OH + 2) * OW, C3 = 3 * d->C, HW = d->H * d->W, P = d->OH * OW;
    int64_t cap = (int64_t)(nb_wg_chunk_mib > 0 ? nb_wg_chunk_mib : 256) << 20;
    int64_t rows = C3 > d->O ? C3 : d->O;
    int64_t nc = cap / (C3 * Bk * (int64_t)es);
    int64_t kmax = ((int64_t)0x7fffffff - 2 * OW) / (Bk * rows);
    if (nc > kmax) nc = kmax;
    if (nc < 1) nc = 1;
    if (nc > d->N) nc = d->N;
    if ((nc * Bk + 2 * OW) * rows > 0x7fffffff)
        return nb_error(NB_ERR_UNSUPPORTED, "conv2d weight gradient (CUDA GEMM): sample too large");
    nb_jit_kernel *krs, *krs2, *ksum;
    NB_TRY(nb_jit_cuda_kernel(dev, NB_WG_CU, NULL, "nb_wg_rs", &krs));
    NB_TRY(nb_jit_cuda_kernel(dev, NB_WG_CU, NULL, "nb_wg_rs2", &krs2));
    NB_TRY(nb_jit_cuda_kernel(dev, NB_WG_CU, NULL, "nb_wg_sum3j", &ksum));
    float *col, *dyp, *part;
    NB_TRY(nb_conv_scratch(dev, 0, (size_t)(C3 * (nc * Bk + 2 * OW)) * es, &col));
    NB_TRY(nb_conv_scratch(dev, 4, (size_t)(d->O * nc * Bk) * es, &dyp));
    const unsigned block[3] = {256, 1, 1};
    int64_t L3 = d->O * C3;
    for (int64_t n0 = 0; n0 < d->N; n0 += nc) {
        int64_t m = d->N - n0 < nc ? d->N - n0 : nc, Kt = m * Bk, Lr = Kt + 2 * OW;
        nb_wg_rs_p a = {nb_wg_at(x, xdt, n0 * d->C * HW), col, (int)d->C, (int)d->H,
                        (int)d->W, (int)d->OH, (int)OW, (int)C3, (int)Kt, (int)Lr,
                        xdt == NB_BF16, op == NB_BF16, 1};
        nb_wg_rs_p t = {nb_wg_at(dy, ydt, n0 * d->O * P), dyp, 0, (int)d->H, (int)d->W,
                        (int)d->OH, (int)OW, (int)d->O, (int)Kt, (int)Lr, ydt == NB_BF16,
                        op == NB_BF16, 1};
        if (!nb_wg_skip) {
            /* both passes (and the bias gradient) in one launch */
            int64_t ya = C3 < 32768 ? C3 : 32768, yb = d->O < 65535 - ya ? d->O : 65535 - ya;
            nb_wg_rs2_p q = {a, t, db, (int)ya};
            const unsigned grid[3] = {(unsigned)((Lr + 1023) / 1024), (unsigned)(ya + yb), 1};
            NB_TRY(nb_jit_launch_cuda_grid(krs2, &q, sizeof q, grid, block, NULL));
        } else {
            if (!(nb_wg_skip & 1)) {
                const unsigned grid[3] = {(unsigned)((Lr + 1023) / 1024), (unsigned)(C3 < 65535 ? C3 : 65535), 1};
                NB_TRY(nb_jit_launch_cuda_grid(krs, &a, sizeof a, grid, block, NULL));
            }
            if (!(nb_wg_skip & 2)) {
                const unsigned grid[3] = {(unsigned)((Kt + 1023) / 1024), (unsigned)(d->O < 65535 ? d->O : 65535), 1};
                NB_TRY(nb_jit_launch_cuda_grid(krs, &t, sizeof t, grid, block, NULL));
            }
        }
        if (nb_wg_skip & 4) continue;
        /* T slices of Kc along K (the last one shorter), each tap ki into part[ki][s] */
        /* the automatic split sees one tap's GEMM [O, 3C]; the partials of all three stay
         * under 64 MiB */
        nb_conv_dims d3 = *d;
        d3.C = C3, d3.K = 1;
        int S = nb_wg_split > 0 ? nb_wg_split : nb_wg_pick_split(dev, &d3, Kt);
        if (nb_wg_split <= 0 && S > 1 && 3 * S * L3 * (int64_t)sizeof(float) > NB_WG_PART_BYTES)
            S = (int)(NB_WG_PART_BYTES / (3 * L3 * (int64_t)sizeof(float)));
        if (S < 1) S = 1;
        if (S > NB_WG_MAX_SPLIT) S = NB_WG_MAX_SPLIT;
        int64_t Kc = (Kt + S - 1) / S;
        Kc = (Kc + 63) / 64 * 64;
        int64_t full = Kt / Kc, rest = Kt - full * Kc, T = full + (rest > 0);
        NB_TRY(nb_conv_scratch(dev, 7, (size_t)(3 * T * L3) * sizeof(float), &part));
        if (T == 1) /* the three taps in one call: tap ki's columns start ki*OW further on */
            NB_TRY(nb_cublas_gemm_rm_dt(dev, precision, op, NB_F32, 0, 1, d->O, C3, Kt, 1.0f, dyp,
                                        Kt, col, Lr, 0.0f, part, C3, 3, 0, OW, L3));
        for (int64_t ki = 0; T > 1 && ki < 3; ki++) {
            float *pk = part + ki * T * L3;
            const void *bk = nb_wg_at(col, op, ki * OW);
            if (full > 0)
                NB_TRY(nb_cublas_gemm_rm_dt(dev, precision, op, NB_F32, 0, 1, d->O, C3, Kc, 1.0f,
                                            dyp, Kt, bk, Lr, 0.0f, pk, C3, full, Kc, Kc, L3));
            if (rest > 0)
                NB_TRY(nb_cublas_gemm_rm_dt(dev, precision, op, NB_F32, 0, 1, d->O, C3, rest, 1.0f,
                                            nb_wg_at(dyp, op, full * Kc), Kt,
                                            nb_wg_at(bk, op, full * Kc), Lr, 0.0f,
                                            pk + full * L3, C3, 1, 0, 0, 0));
        }
        nb_wg_sum3_p sp = {part, dw, (int)d->O, (int)d->C, (int)T};
        NB_TRY(nb_jit_launch_cuda(ksum, &sp, sizeof sp,
                                  d->O * d->C * 3, NULL));
    }
    return NB_OK;
}

nb_status nb_conv_wgrad_gemm(nb_device *dev, int precision, const nb_conv_dims *d, const void *x,
                             nb_dtype xdt, const void *dy, nb_dtype ydt, float *dw) {
    return nb_conv_wgrad_gemm_db(dev, precision, d, x, xdt, dy, ydt, dw, NULL);
}

nb_status nb_conv_wgrad_gemm_db(nb_device *dev, int precision, const nb_conv_dims *d,
                                const void *x, nb_dtype xdt, const void *dy, nb_dtype ydt,
                                float *dw, float *db) {
    NB_TRY(nb_wg_check(dev, precision, d, x, xdt, dy, ydt, dw));
    /* steps skipped (benchmarks): the bias gradient on its own */
    if (db && nb_wg_skip) {
        NB_TRY(nb_conv_bias_grad(dev, dy, ydt, db, d->N, d->O, d->OH * d->OW));
        db = NULL;
    }
    int64_t rows = d->C * d->K * d->K > d->O ? d->C * d->K * d->K : d->O;
    if (d->OH * d->OW * rows > 0x7fffffff || d->N * d->C * d->H * d->W > ((int64_t)1 << 40))
        return nb_error(NB_ERR_UNSUPPORTED,
                        "conv2d weight gradient (CUDA GEMM): one sample's columns (%lld x %lld) "
                        "exceed 2^31 elements", (long long)rows, (long long)(d->OH * d->OW));
    nb_dtype op = xdt == NB_BF16 || ydt == NB_BF16 ? NB_BF16 : NB_F32;
    /* automatic (layout -1): the row-shift form above 8x8 outputs, im2col at 8x8 and below
     * (H100, .export/device-results/wgrad/bench*.log) */
    int lay = nb_wg_layout >= 0 ? nb_wg_layout : d->OH * d->OW > 64 ? 2 : 0;
    if (lay == 2 && nb_wg_rs_ok(d))
        return nb_wg_rowshift(dev, precision, d, x, xdt, dy, ydt, dw, db, op);
    size_t es = nb_dtype_size(op);
    int64_t KK = d->K * d->K, CKK = d->C * KK, P = d->OH * d->OW, HW = d->H * d->W;
    int64_t nc = nb_wg_chunk(d, es);
    int layout = lay == 1;
    nb_jit_kernel *kcol, *ktr, *ksum = NULL;
    NB_TRY(nb_jit_cuda_kernel(dev, NB_WG_CU, NULL, layout ? "nb_wg_im2col_rows" : "nb_wg_im2col", &kcol));
    NB_TRY(nb_jit_cuda_kernel(dev, NB_WG_CU, NULL, "nb_wg_transpose", &ktr));
    float *col, *dyt, *part = NULL;
    NB_TRY(nb_conv_scratch(dev, 0, (size_t)(nc * P * CKK) * es, &col));
    NB_TRY(nb_conv_scratch(dev, 4, (size_t)(nc * P * d->O) * es, &dyt));
    int tvec = P % 4 == 0 && (uintptr_t)dy % (ydt == NB_BF16 ? 8 : 16) == 0 &&
               (uintptr_t)dyt % 16 == 0;
    for (int64_t n0 = 0; n0 < d->N; n0 += nc) {
        int64_t m = d->N - n0 < nc ? d->N - n0 : nc, Kt = m * P;
        unsigned gx = (unsigned)((Kt + 4 * 256 - 1) / (4 * 256));
        const unsigned block[3] = {256, 1, 1};
        /* 1. columns of the chunk */
        nb_wg_col_p a = {nb_wg_at(x, xdt, n0 * d->C * HW), col, (int)d->C, (int)d->H, (int)d->W,
                         (int)d->K, (int)d->stride, (int)d->pad, (int)d->OH, (int)d->OW, (int)Kt,
                         (int)CKK, xdt == NB_BF16, op == NB_BF16, Kt % 4 == 0};
        if (nb_wg_skip & 1) {
        } else if (layout) {
            NB_TRY(nb_jit_launch_cuda(kcol, &a, sizeof a, CKK * Kt, NULL));
        } else {
            const unsigned grid[3] = {gx, (unsigned)(CKK < 65535 ? CKK : 65535), 1};
            NB_TRY(nb_jit_launch_cuda_grid(kcol, &a, sizeof a, grid, block, NULL));
        }
        /* 2. dyT [O, Kt] */
        nb_wg_tr_p t = {nb_wg_at(dy, ydt, n0 * d->O * P), dyt, (int)d->O, (int)P, (int)Kt,
                        ydt == NB_BF16, op == NB_BF16, tvec, db};
        const unsigned tgrid[3] = {gx, (unsigned)(d->O < 65535 ? d->O : 65535), 1};
        if (!(nb_wg_skip & 2)) NB_TRY(nb_jit_launch_cuda_grid(ktr, &t, sizeof t, tgrid, block, NULL));
        if (nb_wg_skip & 4) continue;
        /* 3. dw [O, CKK] += dyT [O, Kt] col^T [Kt, CKK], K split into S slices of Kc */
        /* automatic: one GEMM (cuBLAS splits K itself; measured best or within noise on every
         * UNet shape) */
        int S = nb_wg_split > 0 ? nb_wg_split : 1;
        if (S > NB_WG_MAX_SPLIT) S = NB_WG_MAX_SPLIT;
        int64_t Kc = Kt, full = 0;
        if (S > 1) {
            Kc = (Kt + S - 1) / S;
            Kc = (Kc + 63) / 64 * 64;
            full = Kt / Kc; /* slices through the partials */
            if (full < 2) full = 0, Kc = Kt;
        }
        int64_t ldb = layout ? CKK : Kt;        /* col's stored row stride */
        int64_t bstep = layout ? CKK : 1;       /* elements per step along K in col */
        int64_t k0 = full * Kc, rest = Kt - k0; /* the part that goes straight into dw */
        if (rest > 0)
            NB_TRY(nb_cublas_gemm_rm_dt(dev, precision, op, NB_F32, 0, !layout, d->O, CKK, rest,
                                        1.0f, nb_wg_at(dyt, op, k0), Kt,
                                        nb_wg_at(col, op, k0 * bstep), ldb, 1.0f, dw, CKK, 1, 0, 0,
                                        0));
        if (full > 0) {
            int64_t L = d->O * CKK;
            if (!ksum) NB_TRY(nb_jit_cuda_kernel(dev, NB_WG_CU, NULL, "nb_wg_sum", &ksum));
            NB_TRY(nb_conv_scratch(dev, 7, (size_t)(full * L) * sizeof(float), &part));
            NB_TRY(nb_cublas_gemm_rm_dt(dev, precision, op, NB_F32, 0, !layout, d->O, CKK, Kc,
                                        1.0f, dyt, Kt, col, ldb, 0.0f, part, CKK, full, Kc,
                                        Kc * bstep, L));
            nb_wg_sum_p s = {part, dw, (long long)L, (int)full};
            NB_TRY(nb_jit_launch_cuda(ksum, &s, sizeof s, L, NULL));
        }
    }
    return NB_OK;
}

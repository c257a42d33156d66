/* The conv path's helper passes on CUDA (conv_cuda_aux.h): bias add / fill / gradient over
 * planes with 16-byte vectors, the split-sum and MODE 2 endings with the bias gradient taken
 * along, the bf16 weight conversion with the bias fill, the end of a split sum into bf16 (the
 * scalar kernels they replaced were deleted; their numbers: docs/PERF.md). CPU reference: tape_ops_conv.c (bias and its gradient), tape_ops_basic.c (linear). */
#include "nn/conv/conv_cuda_aux.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "jit/cuda_files.h"
#include "nn/common/nn_common.h"

/* ---- kernels (NVRTC): src/nn/conv/kernels/bias.cu -------------------------------------------- */

nb_status nb_conv_aux_kernel(nb_device *dev, const char *entry, nb_jit_kernel **k) {
    return nb_jit_cuda_kernel(dev, "src/nn/conv/kernels/bias.cu", NULL, entry, k);
}
static nb_status nb_aux_kernel(nb_device *dev, const char *entry, nb_jit_kernel **k) {
    return nb_conv_aux_kernel(dev, entry, k);
}

typedef struct {
    const float *s;
    float *dw;
    long long L;
    int N, vec;
} nb_sum_n4_p;

typedef struct {
    void *y;
    const float *b;
    float *db;
    int N, OP, P, nper, bf;
} nb_col_p;

/* Planes of y [N*O][P] split into units for nb_conv_bias_rows / nb_conv_bias_grad_rows: 2^lg
 * lanes per unit (up to a warp: enough lanes for one 16-byte vector each), units of up to 8
 * vectors per lane, split further until the grid has >= 1024 threads per SM. */
nb_row_p nb_conv_rows(nb_device *dev, void *y, nb_dtype ydt, const float *b, float *db,
                             int64_t N, int64_t O, int64_t P) {
    int es = ydt == NB_BF16 ? 2 : 4, V = 16 / es;
    int64_t nvec = (P + V - 1) / V, rows = N * O;
    int lg = 0;
    while (lg < 5 && ((int64_t)1 << lg) < nvec) lg++;
    int64_t L = (int64_t)1 << lg, per = L * V * 8;
    int64_t segs = (P + per - 1) / per;
    int64_t sms = nb_device_get_info(dev)->multiprocessors;
    int64_t want = ((sms > 0 ? sms : 132) * 1024 / L + rows - 1) / rows; /* units per row wanted */
    int64_t most = (P + L * V - 1) / (L * V);                           /* >= 1 vector a lane */
    if (segs < want) segs = want < most ? want : most;
    if (segs < 1) segs = 1;
    int64_t seg = (P + segs - 1) / segs;
    seg = (seg + V - 1) / V * V;
    segs = (P + seg - 1) / seg;
    nb_row_p a = {y, b, db, (long long)(rows * segs), (int)P, (int)O, ydt == NB_BF16, lg, (int)segs,
                  (int)seg, (uintptr_t)y % (uintptr_t)es == 0, 0};
    return a;
}

static nb_status nb_conv_launch_rows(nb_device *dev, const char *entry, const nb_row_p *a) {
    nb_jit_kernel *k;
    NB_TRY(nb_aux_kernel(dev, entry, &k));
    int64_t threads = (int64_t)a->units << a->lg;
    const unsigned grid[3] = {(unsigned)((threads + 255) / 256), 1, 1}, block[3] = {256, 1, 1};
    return nb_jit_launch_cuda_grid(k, a, sizeof *a, grid, block, NULL);
}

/* Columns j = o*P + p of y [N][O*P] (P < 16): samples split over blockIdx.y, at least minper
 * each, until the grid has >= 32768 threads. */
static nb_status nb_conv_launch_cols(nb_device *dev, const char *entry, void *y, nb_dtype ydt,
                                     const float *b, float *db, int64_t N, int64_t O, int64_t P,
                                     int64_t minper) {
    nb_jit_kernel *k;
    NB_TRY(nb_aux_kernel(dev, entry, &k));
    int64_t OP = O * P, gy = (32768 + OP - 1) / OP, most = (N + minper - 1) / minper;
    if (gy > most) gy = most;
    if (gy > 65535) gy = 65535;
    if (gy < 1) gy = 1;
    int64_t nper = (N + gy - 1) / gy;
    gy = (N + nper - 1) / nper;
    nb_col_p a = {y, b, db, (int)N, (int)OP, (int)P, (int)nper, ydt == NB_BF16};
    const unsigned grid[3] = {(unsigned)((OP + 255) / 256), (unsigned)gy, 1}, block[3] = {256, 1, 1};
    return nb_jit_launch_cuda_grid(k, &a, sizeof a, grid, block, NULL);
}

/* Small planes go by columns (coalesced across o and p); the column form needs O*P and N to
 * fit an int. */
static int nb_conv_use_cols(int64_t N, int64_t O, int64_t P) {
    return P < 16 && O * P < ((int64_t)1 << 31) && N < ((int64_t)1 << 31);
}

/* y [N,O,P] (ydt) += b[o] */
nb_status nb_conv_add_bias(nb_device *dev, void *y, nb_dtype ydt, const float *b, int64_t N,
                           int64_t O, int64_t P) {
    if (N <= 0 || O <= 0 || P <= 0) return NB_OK;
    if (nb_conv_use_cols(N, O, P))
        return nb_conv_launch_cols(dev, "nb_conv_bias_cols", y, ydt, b, NULL, N, O, P, 1);
    nb_row_p a = nb_conv_rows(dev, y, ydt, b, NULL, N, O, P);
    return nb_conv_launch_rows(dev, "nb_conv_bias_rows", &a);
}

nb_status nb_conv_add_bias_relu(nb_device *dev, void *y, nb_dtype ydt, const float *b, int64_t N,
                                int64_t O, int64_t P) {
    if (N <= 0 || O <= 0 || P <= 0) return NB_OK;
    if (!nb_conv_use_cols(N, O, P))
        return nb_error(NB_ERR_UNSUPPORTED,
                        "linear_relu (CUDA): output [%lld, %lld] too large for the bias + relu pass",
                        (long long)N, (long long)(O * P));
    return nb_conv_launch_cols(dev, "nb_conv_bias_relu_cols", y, ydt, b, NULL, N, O, P, 1);
}

nb_status nb_conv_fill_bias(nb_device *dev, void *y, nb_dtype ydt, const float *b, int64_t N,
                            int64_t O, int64_t P) {
    if (N <= 0 || O <= 0 || P <= 0) return NB_OK;
    nb_row_p a = nb_conv_rows(dev, y, ydt, b, NULL, N, O, P);
    a.set = 1;
    return nb_conv_launch_rows(dev, "nb_conv_bias_rows", &a);
}

typedef struct {
    nb_row_p r;
    float *src;
    int acc;
} nb_split_p;

nb_status nb_conv_split_out(nb_device *dev, float *src, void *y, const float *b, int64_t N,
                            int64_t O, int64_t P, int acc) {
    if (N <= 0 || O <= 0 || P <= 0) return NB_OK;
    nb_split_p a = {nb_conv_rows(dev, y, NB_BF16, b, NULL, N, O, P), src, acc ? 1 : 0};
    a.r.vec = ((uintptr_t)y | (uintptr_t)src) % 16 == 0;
    nb_jit_kernel *k;
    NB_TRY(nb_aux_kernel(dev, "nb_conv_split_out", &k));
    int64_t threads = (int64_t)a.r.units << a.r.lg;
    const unsigned grid[3] = {(unsigned)((threads + 255) / 256), 1, 1}, block[3] = {256, 1, 1};
    return nb_jit_launch_cuda_grid(k, &a, sizeof a, grid, block, NULL);
}

/* db[o] += sum dy[n,o,p] (dy in ydt) */
nb_status nb_conv_bias_grad(nb_device *dev, const void *dy, nb_dtype ydt, float *db, int64_t N,
                            int64_t O, int64_t P) {
    if (N <= 0 || O <= 0 || P <= 0) return NB_OK;
    if (nb_conv_use_cols(N, O, P))
        return nb_conv_launch_cols(dev, "nb_conv_bias_grad_cols", (void *)dy, ydt, NULL, db, N, O,
                                   P, 16);
    nb_row_p a = nb_conv_rows(dev, (void *)dy, ydt, NULL, db, N, O, P);
    return nb_conv_launch_rows(dev, "nb_conv_bias_grad_rows", &a);
}

typedef struct {
    nb_sum_n4_p s;
    nb_row_p r;
    long long sblocks;
} nb_sum_bg_p;

/* dw += the Z partial sums part [Z][L] (nb_conv_sum_splits), and db[o] += sum dy [N,O,P] (ydt)
 * in the same launch (db NULL, or small planes: the sum, then nb_conv_bias_grad). */
nb_status nb_conv_sum_splits_db(nb_device *dev, const float *part, float *dw, int64_t L,
                                       int64_t Z, const void *dy, nb_dtype ydt, float *db,
                                       int64_t N, int64_t O, int64_t P) {
    if (!db || L <= 0 || nb_conv_use_cols(N, O, P)) {
        NB_TRY(nb_conv_sum_splits(dev, part, dw, L, Z));
        return db ? nb_conv_bias_grad(dev, dy, ydt, db, N, O, P) : NB_OK;
    }
    int vec = L % 4 == 0 && ((uintptr_t)part | (uintptr_t)dw) % 16 == 0;
    nb_sum_bg_p a;
    memset(&a, 0, sizeof a);
    nb_sum_n4_p sp = {part, dw, (long long)L, (int)Z, vec};
    a.s = sp;
    a.r = nb_conv_rows(dev, (void *)dy, ydt, NULL, db, N, O, P);
    a.sblocks = (long long)(((vec ? L / 4 : L) + 255) / 256);
    int64_t rblocks = (((int64_t)a.r.units << a.r.lg) + 255) / 256;
    nb_jit_kernel *k;
    NB_TRY(nb_aux_kernel(dev, "nb_conv_sum_bg", &k));
    const unsigned grid[3] = {(unsigned)(a.sblocks + rblocks), 1, 1}, block[3] = {256, 1, 1};
    return nb_jit_launch_cuda_grid(k, &a, sizeof a, grid, block, NULL);
}

typedef struct {
    float *dwr, *dw;
    int O, C, KK;
    long long dblocks;
    nb_row_p r;
} nb_dw_bg_p;

nb_status nb_conv_dw_bias_grad(nb_device *dev, float *dwr, float *dw, int64_t O, int64_t C,
                               int64_t KK, const void *dy, nb_dtype ydt, float *db, int64_t N,
                               int64_t P) {
    nb_dw_bg_p a;
    memset(&a, 0, sizeof a);
    a.dwr = dwr, a.dw = dw, a.O = (int)O, a.C = (int)C, a.KK = (int)KK;
    a.dblocks = (long long)((O * C * KK + 255) / 256);
    a.r = nb_conv_rows(dev, (void *)dy, ydt, NULL, db, N, O, P);
    int64_t rblocks = (((int64_t)a.r.units << a.r.lg) + 255) / 256;
    nb_jit_kernel *k;
    NB_TRY(nb_aux_kernel(dev, "nb_conv_dw_bg", &k));
    const unsigned grid[3] = {(unsigned)(a.dblocks + rblocks), 1, 1}, block[3] = {256, 1, 1};
    return nb_jit_launch_cuda_grid(k, &a, sizeof a, grid, block, NULL);
}

nb_status nb_conv_sum_splits(nb_device *dev, const float *part, float *dw, int64_t L, int64_t Z) {
    nb_jit_kernel *k;
    if (L <= 0) return NB_OK;
    NB_TRY(nb_aux_kernel(dev, "nb_conv_sum_n4", &k));
    int vec = L % 4 == 0 && ((uintptr_t)part | (uintptr_t)dw) % 16 == 0;
    nb_sum_n4_p a = {part, dw, (long long)L, (int)Z, vec};
    int64_t threads = vec ? L / 4 : L;
    const unsigned grid[3] = {(unsigned)((threads + 255) / 256), 1, 1}, block[3] = {256, 1, 1};
    return nb_jit_launch_cuda_grid(k, &a, sizeof a, grid, block, NULL);
}

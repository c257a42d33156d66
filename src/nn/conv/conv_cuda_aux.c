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
    long long n;
    int OP, P, bf, vec, relu;
} nb_ew_p;

typedef struct {
    const void *y;
    float *part;
    int N, OP, nper, G, bf, vec;
} nb_bg_p;

typedef struct {
    const float *part;
    float *db;
    int Z, OP, P;
} nb_bg_fin_p;

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

/* y [N][OP = O*P] (ydt) += b[j / P] for column j (relu: then max(., 0)), elementwise
 * (nb_conv_bias_ew): 4 values a thread where y is 16-byte (f32) / 8-byte (bf16) aligned, a
 * grid-stride loop over at most 32 blocks of 256 a multiprocessor. */
static nb_status nb_conv_launch_ew(nb_device *dev, void *y, nb_dtype ydt, const float *b,
                                   int64_t N, int64_t O, int64_t P, int relu) {
    nb_jit_kernel *k;
    NB_TRY(nb_aux_kernel(dev, "nb_conv_bias_ew", &k));
    int bf = ydt == NB_BF16, vec = (uintptr_t)y % (uintptr_t)(bf ? 8 : 16) == 0;
    int64_t n = N * O * P, work = vec ? n / 4 + 3 : n;
    int64_t sms = nb_device_get_info(dev)->multiprocessors, blocks = (work + 255) / 256;
    int64_t most = (sms > 0 ? sms : 132) * 32;
    if (blocks > most) blocks = most;
    nb_ew_p a = {y, b, (long long)n, (int)(O * P), (int)P, bf, vec, relu};
    const unsigned grid[3] = {(unsigned)blocks, 1, 1}, block[3] = {256, 1, 1};
    return nb_jit_launch_cuda_grid(k, &a, sizeof a, grid, block, NULL);
}

/* db[o] += sum over n, p of dy [N][O*P] (ydt), deterministic in two launches: row chunks into
 * partials [Z][OP] (scratch slot 9, grow-only: no allocation in the steady state), then a
 * fixed-order sum of the Z partials per o. Chunks: about 8 blocks of 256 a multiprocessor,
 * at least 64 rows each. */
static nb_status nb_conv_bias_grad_ew(nb_device *dev, const void *dy, nb_dtype ydt, float *db,
                                      int64_t N, int64_t O, int64_t P) {
    nb_jit_kernel *k1, *k2;
    NB_TRY(nb_aux_kernel(dev, "nb_conv_bias_grad_part", &k1));
    NB_TRY(nb_aux_kernel(dev, "nb_conv_bias_grad_fin", &k2));
    int64_t OP = O * P;
    int bf = ydt == NB_BF16;
    int vec = OP % 4 == 0 && (uintptr_t)dy % (uintptr_t)(bf ? 8 : 16) == 0;
    int64_t C = vec ? OP / 4 : OP, G = C < 256 ? C : 256, tiles = (C + G - 1) / G;
    int64_t sms = nb_device_get_info(dev)->multiprocessors;
    int64_t Z = ((sms > 0 ? sms : 132) * 8 + tiles - 1) / tiles, most = (N + 63) / 64;
    if (Z > most) Z = most;
    if (Z > 65535) Z = 65535;
    if (Z < 1) Z = 1;
    int64_t nper = (N + Z - 1) / Z;
    Z = (N + nper - 1) / nper;
    float *part;
    NB_TRY(nb_conv_scratch(dev, 9, (size_t)(Z * OP) * sizeof(float), &part));
    nb_bg_p a = {dy, part, (int)N, (int)OP, (int)nper, (int)G, bf, vec};
    const unsigned g1[3] = {(unsigned)tiles, (unsigned)Z, 1}, blk[3] = {256, 1, 1};
    NB_TRY(nb_jit_launch_cuda_grid(k1, &a, sizeof a, g1, blk, NULL));
    nb_bg_fin_p f = {part, db, (int)Z, (int)OP, (int)P};
    const unsigned g2[3] = {(unsigned)O, 1, 1};
    return nb_jit_launch_cuda_grid(k2, &f, sizeof f, g2, blk, NULL);
}

/* Small planes (the linear: P = 1) go elementwise / by column chunks over y [N][O*P] (the
 * row units would give each plane a lane group of its own); O*P and N must fit an int. */
static int nb_conv_use_cols(int64_t N, int64_t O, int64_t P) {
    return P < 16 && O * P < ((int64_t)1 << 31) && N < ((int64_t)1 << 31);
}

/* y [N,O,P] (ydt) += b[o] */
nb_status nb_conv_add_bias(nb_device *dev, void *y, nb_dtype ydt, const float *b, int64_t N,
                           int64_t O, int64_t P) {
    if (N <= 0 || O <= 0 || P <= 0) return NB_OK;
    if (nb_conv_use_cols(N, O, P))
        return nb_conv_launch_ew(dev, y, ydt, b, N, O, P, 0);
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
    return nb_conv_launch_ew(dev, y, ydt, b, N, O, P, 1);
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
        return nb_conv_bias_grad_ew(dev, dy, ydt, db, N, O, P);
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

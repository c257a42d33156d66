/* Implicit-GEMM tensor-core convolution (conv_cuda_igemm.h): one NVRTC kernel source
 * (src/nn/conv/kernels/igemm.cu) specialised per mode / precision / tile / kernel size / stride.
 *   forward        MODE 1 (halo) on (x, w as [C/CB][O][KK][CB], C padded with zeros to CB =
 *                  8, bf16 16) where it applies: 3x3, stride 1, OW % 8 == 0, W % 4 == 0, whole
 *                  output rows per 64/128-pixel block; else MODE 0 on (x, w as [O][KK][C]),
 *                  C % 32 == 0. Bias in the epilogue.
 *   data gradient  the same on (dy, w flipped and transposed), pad K-1-pad, dx += (or dx =
 *                  for a first contribution); stride 1,
 *                  pad <= K-1 (MODE 0: O % 32 == 0)
 *   weight grad.   MODE 3 (halo: dy rows and an x halo reused by every tap) straight into
 *                  dw where it applies and wins: 3x3, C >= 2 O, stride 1, OW in 8..128
 *                  dividing 128, W % 4 == 0, C % 32 == 0; else MODE 2 into dwr [O][KK][C]
 *                  (zeroed), then
 *                  dw [O][C][KK] += dwr (which also re-zeroes dwr: no memset per call;
 *                  1x1: MODE 2 adds straight into dw); OH*OW % 32 == 0.
 *                  Both split over k with atomics.
 * bf16-stored activations (BF16 precision): MODE 1 (forward, data gradient), MODE 2 and MODE 3
 *                  (weight gradient; MODE 3 then taken for C < 2 O too) have bf16 variants (ABF;
 *                  MODE 1 writes a bf16 output, OBF); MODE 0 (the forward / data gradient where
 *                  the halo kernel does not apply: stride 2, 1x1 under algo 2, OW % 8 != 0)
 *                  converts bf16 tensors to f32 scratch and back (correct, slower).
 * Weights: one arrangement kernel (nb_conv_wprep) writes every layout above; a tape forward also
 * writes, in the same launch, the layout its backward's data gradient reads (nb_conv_wcache),
 * so that the data gradient rearranges nothing.
 * Grids with fewer blocks than SMs split the reduction over blockIdx.z (atomic adds; the
 * forward first fills y with the bias; a bf16 output accumulates in a zeroed f32 scratch that
 * nb_conv_split_out rounds out and re-zeroes). FP32 runs the same tiles with FFMA (exact fp32
 * products and sums). Split sums arrive in no fixed order: results vary in the last bits from
 * run to run. */
#include "nn/conv/conv_cuda_igemm.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "nabla/alloc.h"
#include "nabla/nn_tape.h"
#include "jit/cuda_files.h"
#include "nn/common/nn_common.h"

typedef struct {
    const float *a, *b, *bias;
    float *out;
    int N, C, H, W, O, OH, OW, pad;
    int accum, kt_per_split;
} nb_ig_params;

typedef struct {
    float *dwr;
    float *dw;
    int O, C;
} nb_ig_dw_params;

typedef struct {
    int mode, prec, bm, bn, wm, wn, stages, ks, stride, cb;
    int abf, obf; /* MODE 1 at BF16: bf16 input activations / bf16 output (else f32) */
} nb_ig_cfg;

/* Loaded kernels, by configuration and device (the JIT's own table would hash the source on
 * every call). */
#define NB_IG_CACHE 256 /* a full table reloads through the JIT on every call: keep it roomy */
typedef struct {
    nb_ig_cfg cfg;
    nb_device *dev;
    nb_jit_kernel *main, *dw;
} nb_ig_entry;
static nb_ig_entry nb_ig_cache[NB_IG_CACHE];
static int nb_ig_count;
static pthread_mutex_t nb_ig_lock = PTHREAD_MUTEX_INITIALIZER;

#define NB_IG_CU "src/nn/conv/kernels/igemm.cu"

void nb_conv_igemm_defines(const int v[12], char buf[12][24], const char *defs[13]) {
    static const char *const names[12] = {"MODE", "PREC", "BM", "BN", "WM", "WN", "STAGES", "KS", "STRIDE",
                                          "CB", "ABF", "OBF"};
    for (int i = 0; i < 12; i++) {
        snprintf(buf[i], sizeof buf[i], "%s=%d", names[i], v[i]);
        defs[i] = buf[i];
    }
    defs[12] = NULL;
}

static nb_status nb_ig_load(nb_device *dev, const nb_ig_cfg *c, nb_ig_entry **out) {
    pthread_mutex_lock(&nb_ig_lock);
    for (int i = 0; i < nb_ig_count; i++)
        if (nb_ig_cache[i].dev == dev && !memcmp(&nb_ig_cache[i].cfg, c, sizeof *c)) {
            *out = &nb_ig_cache[i];
            pthread_mutex_unlock(&nb_ig_lock);
            return NB_OK;
        }
    pthread_mutex_unlock(&nb_ig_lock);
    /* the configuration as defines of src/nn/conv/kernels/igemm.cu (its top lists them) */
    const int v[12] = {c->mode, c->prec, c->bm, c->bn, c->wm, c->wn, c->stages, c->ks, c->stride,
                       c->cb ? c->cb : 8, c->abf, c->obf};
    char buf[12][24];
    const char *defs[13];
    nb_conv_igemm_defines(v, buf, defs);
    nb_ig_entry e = {*c, dev, NULL, NULL};
    nb_status s = nb_jit_cuda_kernel(dev, NB_IG_CU, defs, "nb_conv_igemm", &e.main);
    if (!s) s = nb_jit_cuda_kernel(dev, NB_IG_CU, defs, "nb_conv_igemm_dw", &e.dw);
    if (s) return s;
    pthread_mutex_lock(&nb_ig_lock);
    int slot = nb_ig_count < NB_IG_CACHE ? nb_ig_count++ : NB_IG_CACHE - 1; /* full: replace last */
    nb_ig_cache[slot] = e;
    *out = &nb_ig_cache[slot];
    pthread_mutex_unlock(&nb_ig_lock);
    return NB_OK;
}

/* ---- weight arrangement ------------------------------------------------------------------------
 * One kernel for every layout the implicit-GEMM kernels read (it replaced per-specialisation
 * kernels of igemm.cu that stored 4 or 2 bytes per element at a stride; docs/PERF.md): a thread
 * per 4 / 8 consecutive output slots (one 16-byte or 8-byte store), the channel padding written
 * as zeros (no memset), 32-bit index arithmetic once per thread. nb_conv_wprep2 writes two layouts in one
 * launch: the forward's, and the one its backward's data gradient reads (nb_conv_wcache).
 * The kernels: src/nn/conv/kernels/wprep.cu. */
#define NB_IG_WPREP_CU "src/nn/conv/kernels/wprep.cu"

typedef struct {
    const float *w;
    void *wr;
    long long total;
    int O, C, KK, R, CB, flip, perm, bf, vec;
} nb_ig_wprep_params;

typedef struct {
    nb_ig_wprep_params a, b;
} nb_ig_wprep2_params;

/* Parameters of nb_conv_wprep for the weights of a conv with O x C channels (w [O][C][KK]) in
 * the layout configuration c reads: MODE 1 [Cp/CB][O][KK][CB] (flip: [Op/CB][C][KK][CB], taps
 * reversed), bf16 with its slot order when c->abf; MODE 0 [O][KK][C] (flip: [C][KK][O]), bf16
 * when c->abf (MODE 0, K = 1, C*KK channels, no flip: a plain copy). wr: scratch of the size
 * nb_ig_weights allocates (or nb_conv_igemm_wc_bytes). */
static nb_ig_wprep_params nb_ig_wprep_make(const nb_ig_cfg *c, const float *w, void *wr, int64_t O,
                                           int64_t C, int64_t K, int flip) {
    int64_t KK = K * K, R = flip ? C : O, inner = flip ? O : C;
    int halo = c->mode == 1;
    int64_t CB = halo ? c->cb : inner, G = halo ? (inner + CB - 1) / CB : 1;
    int bf = c->abf != 0;
    int vec = bf && CB % 8 == 0 ? 8 : CB % 4 == 0 ? 4 : 1;
    nb_ig_wprep_params a = {w, wr, (long long)(G * R * KK * CB), (int)O, (int)C, (int)KK, (int)R,
                            (int)CB, flip, halo && bf, bf, vec};
    return a;
}

static nb_status nb_ig_wprep(nb_device *dev, const nb_ig_cfg *c, const float *w, void *wr,
                             int64_t O, int64_t C, int64_t K, int flip) {
    nb_jit_kernel *k;
    NB_TRY(nb_jit_cuda_kernel(dev, NB_IG_WPREP_CU, NULL, "nb_conv_wprep", &k));
    nb_ig_wprep_params a = nb_ig_wprep_make(c, w, wr, O, C, K, flip);
    int64_t threads = a.total / a.vec;
    const unsigned grid[3] = {(unsigned)((threads + 255) / 256), 1, 1}, block[3] = {256, 1, 1};
    return nb_jit_launch_cuda_grid(k, &a, sizeof a, grid, block, NULL);
}

/* ---- weights kept for the backward (nb_conv_wcache, conv_cuda.h) ---------------------------------
 * key 1 + mode + 2 abf + 4 (cb == 16): the data gradient's flipped layout of that configuration;
 * NB_CONV_WC_BF16: a plain bf16 copy [O][C*KK] (the cuBLAS paths). */
static int nb_ig_key(const nb_ig_cfg *c) {
    return 1 + (c->mode == 1) + 2 * (c->abf != 0) + 4 * (c->mode == 1 && c->cb == 16);
}

/* The layout (configuration c, flip, and the K / C to arrange with) a key stands for. */
static void nb_ig_key_layout(int key, const nb_conv_dims *d, nb_ig_cfg *c, int64_t *K, int64_t *C,
                             int *flip) {
    memset(c, 0, sizeof *c);
    if (key == NB_CONV_WC_BF16) {
        c->mode = 0, c->abf = 1, *K = 1, *C = d->C * d->K * d->K, *flip = 0;
        return;
    }
    int k = key - 1;
    c->mode = k & 1, c->abf = (k >> 1) & 1, c->cb = (k >> 2) & 1 ? 16 : 8;
    *K = d->K, *C = d->C, *flip = 1;
}

size_t nb_conv_igemm_wc_bytes(int key, const nb_conv_dims *d) {
    if (key <= 0 || key > NB_CONV_WC_BF16 || !d) return 0;
    nb_ig_cfg c;
    int64_t K, C;
    int flip;
    nb_ig_key_layout(key, d, &c, &K, &C, &flip);
    int64_t inner = flip ? d->O : C, cp = c.mode == 1 ? (inner + c.cb - 1) / c.cb * c.cb : inner;
    return (size_t)(cp * (flip ? C : d->O) * K * K) * (c.abf ? 2 : 4);
}

static int64_t nb_ig_smem(const nb_ig_cfg *c) {
    if (c->abf && c->mode == 0) /* bf16: A as channel pairs [16][BM + 8] words, B [BN][40] */
        return (int64_t)c->stages * (16 * (c->bm + 8) * 4 + c->bn * (32 + 8) * 2);
    if (c->abf) return (int64_t)c->stages * (c->bm + c->bn) * (32 + 8) * 2; /* MODE 2, bf16 */
    int64_t a = c->mode == 0 ? 32 * (c->bm + (c->prec == NB_TAPE_BF16 ? 4 : 8)) : c->bm * 36;
    return (int64_t)c->stages * (a + c->bn * 36) * (int64_t)sizeof(float);
}

/* Tile override per mode (index mode / 2), for benchmarks: {bm, bn, wm, wn, stages}, bm 0 = none. */
static int nb_ig_tile_override[2][5];

int nb_conv_igemm_set_tile(int mode, const int *tile) {
    if (mode != 0 && mode != 2) return 0;
    if (!tile) {
        memset(nb_ig_tile_override[mode / 2], 0, sizeof nb_ig_tile_override[0]);
        return 1;
    }
    int bm = tile[0], bn = tile[1], wm = tile[2], wn = tile[3], st = tile[4];
    int ok = wm * wn == 8 && st >= 2 && st <= 6 && bn % 32 == 0 && bm % (16 * wm) == 0 &&
             bn % (8 * wn) == 0 && (mode == 2 ? bm % 32 == 0 : (bm == 64 || bm == 128 || bm == 256));
    if (!ok) return 0;
    nb_ig_cfg c = {mode, NB_TAPE_FP32, bm, bn, wm, wn, st, 3, 1, 8, 0, 0};
    if (nb_ig_smem(&c) > 227 * 1024) return 0;
    memcpy(nb_ig_tile_override[mode / 2], tile, sizeof nb_ig_tile_override[0]);
    return 1;
}

static int nb_ig_sms(nb_device *dev) {
    int n = dev ? nb_device_get_info(dev)->multiprocessors : 0;
    return n > 0 ? n : 132;
}

/* Tile configuration (measured on an H100 at batch 32, see tools/device/conv.sh (removed; git history)):
 *   MODE 0 (M = N*OH*OW rows, `cols` = output channels): 128x64 (warps 4x2) for <= 64
 *     columns, else 128x128 (2x4); 64x64 (2x4, 4 stages) when that leaves fewer than two
 *     blocks per SM (8x8 and 16x16 images), split over k below that;
 *   MODE 2 (`cols` = O rows, KK*C columns): 64x128 for O <= 64 (64x256 from 1024 columns),
 *     else 128x128. */
static nb_ig_cfg nb_ig_pick_dev(nb_device *dev, int mode, int prec, const nb_conv_dims *d,
                                int64_t cols) {
    nb_ig_cfg c = {mode, prec, 128, 128, 2, 4, 3, (int)d->K, (int)d->stride, 8, 0, 0};
    if (mode == 0) {
        if (cols <= 64) c.bn = 64, c.wm = 4, c.wn = 2;
        int64_t M = d->N * d->OH * d->OW;
        int64_t blocks = ((M + c.bm - 1) / c.bm) * ((cols + c.bn - 1) / c.bn);
        if (dev && blocks < 2 * nb_ig_sms(dev)) c.bm = 64, c.bn = 64, c.wm = 2, c.wn = 4, c.stages = 4;
    } else {
        if (cols <= 64) c.bm = 64, c.bn = d->K * d->K * d->C >= 1024 ? 256 : 128;
    }
    const int *o = nb_ig_tile_override[mode / 2];
    if (o[0]) c.bm = o[0], c.bn = o[1], c.wm = o[2], c.wn = o[3], c.stages = o[4];
    return c;
}

/* MODE 1 (halo) shared memory: STAGES x (CB channel planes of the halo + BN weight rows). */
static int64_t nb_ig_halo_smem(const nb_ig_cfg *c, const nb_conv_dims *g) {
    int64_t R = c->bm / g->OW, HR = R + c->ks - 1, RS = g->W + 8, mod = c->prec == NB_TAPE_BF16 ? 4 : 8;
    if (c->abf) { /* CB / 2 planes of 32-bit channel pairs, CS % 32 == 8; weights KK * CB / 2 words */
        int64_t CS = HR * RS + (8 - (HR * RS) % 32 + 32) % 32;
        return (int64_t)c->stages * (c->cb / 2 * CS + c->bn * c->ks * c->ks * c->cb / 2) * 4;
    }
    int64_t CS = HR * RS + (mod - (HR * RS) % 32 + 32) % 32;
    int64_t BRS = (int64_t)c->ks * c->ks * c->cb + (c->prec == NB_TAPE_BF16 ? 8 : 4);
    return (int64_t)c->stages * (c->cb * CS + c->bn * BRS) * (int64_t)sizeof(float);
}

/* The halo kernel's tile for the forward-style conv g (stride 1, whole output rows per block,
 * 16-byte rows), or 0 when it does not apply. abf: the bf16-activation variant (BF16 only; also
 * needs W % 8 == 0 and at most 2 halo units of 8 pixels per thread). */
static int nb_ig_halo_pick_dt(int prec, const nb_conv_dims *g, nb_ig_cfg *out, int abf) {
    int cb = prec == NB_TAPE_BF16 ? 16 : 8;
    int64_t P = g->OH * g->OW;
    /* 3x3 only: a 1x1 step would be a single CB-deep k8/k16 slice per barrier (measured 1.5-2x
     * slower than MODE 0 on the reference UNet's 1x1 convolutions) */
    if (g->K != 3 || g->stride != 1 || g->OW % 8 || g->W % 4 || g->pad > 4) return 0;
    int bm = 128 % g->OW == 0 && P % 128 == 0 ? 128 : 64 % g->OW == 0 && P % 64 == 0 ? 64 : 0;
    if (!bm) return 0;
    nb_ig_cfg c = {1, prec, bm, 64, bm == 128 ? 4 : 2, bm == 128 ? 2 : 4, 3, (int)g->K, 1, cb, 0, 0};
    if (abf) {
        if (prec != NB_TAPE_BF16 || g->W % 8 || (cb / 2) * (bm / g->OW + 2) * (g->W / 8) > 512) return 0;
        c.abf = 1;
    }
    if (nb_ig_halo_smem(&c, g) > 227 * 1024) c.stages = 2;
    if (nb_ig_halo_smem(&c, g) > 227 * 1024) return 0;
    if (nb_ig_tile_override[0][0]) return 0; /* a forced MODE 0 tile (benchmarks) */
    *out = c;
    return 1;
}

static int nb_ig_halo_pick(int prec, const nb_conv_dims *g, nb_ig_cfg *out) {
    return nb_ig_halo_pick_dt(prec, g, out, 0);
}

/* MODE 3 (halo weight gradient) shared memory: STAGES x (dy rows [64][KP+4] + x halo). */
static int64_t nb_ig_wg_smem(const nb_ig_cfg *c, const nb_conv_dims *d) {
    int64_t RT = d->OH < 128 / d->OW ? d->OH : 128 / d->OW, KP = RT * d->OW;
    if (c->abf) { /* bf16: rows KP + 8, halo rows W + 16, CS % 64 == 8 (elements of 2 bytes) */
        int64_t HR = RT + c->ks - 1, RS = d->W + 16, CS = HR * RS + (8 - (HR * RS) % 64 + 64) % 64;
        return (int64_t)c->stages * (c->bm * (KP + 8) + 32 * CS) * 2;
    }
    int64_t HR = RT + c->ks - 1, RS = d->W + 8, CS = HR * RS + (4 - (HR * RS) % 32 + 32) % 32;
    return (int64_t)c->stages * (c->bm * (KP + 4) + 32 * CS) * (int64_t)sizeof(float);
}

/* The halo weight-gradient kernel's configuration, or 0 when it does not apply: stride 1,
 * output rows of 8..128 pixels (dividing 128) grouped into steps of <= 128 pixels, 16-byte
 * rows, C % 32 == 0. abf: the bf16-activation variant (BF16; W % 8 == 0; also OW >= 16). */
static int nb_ig_wg_pick_dt(int prec, const nb_conv_dims *d, nb_ig_cfg *out, int abf) {
    /* measured on the H100 (batch 32): ahead of MODE 2 when C >= 2 O (128->64 at 64x64: 0.56 vs
     * 0.61 ms backward), behind it for C == O (64->64 at 64x64: 0.39 vs 0.34 ms) and for 1x1 */
    /* bf16 (H100, batch 32, .export/device-results/bf16conv): MODE 3 ahead where C >= 2 O and
     * OW >= 16 (128->64 at 64x64: 0.343 vs 0.428 ms backward; 64->3: 0.102 vs 0.178), MODE 2
     * for C == O (128->128 at 32x32: 0.161 vs 0.190; 256->256 at 8x8: 0.091 vs 0.137) and 8x8
     * (512->256: 0.132 vs 0.166) */
    if (d->K != 3 || d->C < 2 * d->O || (abf && d->OW < 16) || d->stride != 1 || d->OW % 8 || d->OW > 128 ||
        128 % d->OW || d->W % (abf ? 8 : 4) || d->pad > 4 || d->C % 32 ||
        (abf && prec != NB_TAPE_BF16))
        return 0;
    int64_t RT = d->OH < 128 / d->OW ? d->OH : 128 / d->OW;
    if (d->OH % RT || (RT * d->OW) % 16) return 0;
    nb_ig_cfg c = {3, prec, 64, 64, 2, 4, 3, (int)d->K, 1, 32, abf, 0};
    /* bf16: 2 stages where 3 would leave room for only one block per SM (128 registers allow 2) */
    if (nb_ig_wg_smem(&c, d) > (abf ? 113 : 227) * 1024) c.stages = 2;
    if (nb_ig_wg_smem(&c, d) > 227 * 1024) return 0;
    if (nb_ig_tile_override[1][0]) return 0; /* a forced MODE 2 tile (benchmarks) */
    *out = c;
    return 1;
}

static int nb_ig_wg_pick(int prec, const nb_conv_dims *d, nb_ig_cfg *out) {
    return nb_ig_wg_pick_dt(prec, d, out, 0);
}

/* The data gradient as a forward-style conv: dy (O channels, OHxOW) with the flipped weights,
 * pad K-1-pad, into dx (C channels, HxW). */
static nb_conv_dims nb_ig_dgrad_dims(const nb_conv_dims *d) {
    nb_conv_dims g = {d->N, d->O, d->OH, d->OW, d->C, d->K, 1, d->K - 1 - d->pad, d->H, d->W};
    return g;
}

int nb_conv_igemm_supports(const nb_conv_dims *d, int precision, int which) {
    if (!d || precision < NB_TAPE_FP32 || precision > NB_TAPE_BF16) return 0;
    nb_ig_cfg c;
    switch (which) {
    case 0: return nb_ig_halo_pick(precision, d, &c) || d->C % 32 == 0;
    case 1: {
        if (d->stride != 1 || d->pad > d->K - 1) return 0;
        nb_conv_dims g = nb_ig_dgrad_dims(d);
        return nb_ig_halo_pick(precision, &g, &c) || d->O % 32 == 0;
    }
    case 2: return nb_ig_wg_pick(precision, d, &c) || (d->OH * d->OW) % 32 == 0;
    default: return 0;
    }
}

static nb_status nb_ig_launch(nb_jit_kernel *k, int64_t smem, const nb_ig_params *p, unsigned gx,
                              unsigned gy, unsigned gz) {
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {256, 1, 1};
    void *args[1] = {(void *)p};
    return nb_cuda_launch(nb_jit_kernel_cuda_fn(k), grid, block, (unsigned)smem, NULL, args);
}

/* The weight-gradient partials (scratch slot 2) stay zeroed between calls: nb_conv_igemm_dw
 * zeroes every element it consumes, so a call memsets only a buffer it has not seen (new,
 * regrown, another device) or one a failed call may have left dirty (clean = 0). Per device
 * index, like the scratch itself; ordered by the device's main stream. */
#define NB_IG_DWR_DEVS 16
typedef struct {
    nb_device *dev;
    float *ptr;
    size_t clean; /* bytes from ptr known to be zero once the queued work has run */
} nb_ig_dwr_zero;
static nb_ig_dwr_zero nb_ig_dwr_state[NB_IG_DWR_DEVS];
/* the same for the split-sum accumulator of bf16 outputs (scratch slot 8, nb_ig_run_bf16) */
static nb_ig_dwr_zero nb_ig_acc_state[NB_IG_DWR_DEVS];

static nb_status nb_ig_grid_stride(nb_jit_kernel *k, const void *p, size_t size, int64_t n) {
    return nb_jit_launch_cuda(k, p, size, n, NULL);
}

/* Scratch for the rearranged weights of a conv with cout x cin channels; for the halo kernel
 * (halo != NULL) cin is padded to a multiple of its CB with zeros. */
static nb_status nb_ig_weights(nb_device *dev, const nb_ig_cfg *halo, int64_t cout, int64_t cin,
                               int64_t K, float **wr) {
    int64_t cp = halo ? (cin + halo->cb - 1) / halo->cb * halo->cb : cin, n = cout * cp * K * K;
    /* (nb_ig_wprep writes the padding too: no memset) */
    return nb_conv_scratch(dev, 1, (size_t)n * sizeof(float), wr);
}

/* Rearranges w [O][C][KK] into wr for configuration c (loaded as e) with nb_ig_wprep. A forward (flip 0) with fill (fill->buf, planned
 * fill->key; conv dims d) writes the layout of fill->key into fill->buf in the same launch, or
 * sets fill->key = 0 (nothing kept). */
static nb_status nb_ig_arrange(nb_device *dev, const nb_ig_entry *e, const float *w, float *wr,
                               int64_t O, int64_t C, int64_t K, int flip, nb_conv_wcache *fill,
                               const nb_conv_dims *d) {
    if (fill && (flip || !d || !fill->buf || fill->key <= 0 || fill->key > NB_CONV_WC_BF16)) {
        fill->key = 0;
        fill = NULL;
    }
    if (!fill) return nb_ig_wprep(dev, &e->cfg, w, wr, O, C, K, flip);
    nb_ig_cfg c2;
    int64_t K2, C2;
    int flip2;
    nb_ig_key_layout(fill->key, d, &c2, &K2, &C2, &flip2);
    nb_ig_wprep2_params q = {nb_ig_wprep_make(&e->cfg, w, wr, O, C, K, 0),
                             nb_ig_wprep_make(&c2, w, fill->buf, d->O, C2, K2, flip2)};
    int64_t ta = q.a.total / q.a.vec, tb = q.b.total / q.b.vec, threads = ta > tb ? ta : tb;
    nb_jit_kernel *k;
    NB_TRY(nb_jit_cuda_kernel(dev, NB_IG_WPREP_CU, NULL, "nb_conv_wprep2", &k));
    const unsigned grid[3] = {(unsigned)((threads + 255) / 256), 1, 1}, block[3] = {256, 1, 1};
    return nb_jit_launch_cuda_grid(k, &q, sizeof q, grid, block, NULL);
}

/* The data gradient's weights for configuration c: the ones the forward kept (use->key matches)
 * or rearranged now into scratch (nb_ig_weights + nb_ig_arrange). */
static nb_status nb_ig_dgrad_weights(nb_device *dev, const nb_ig_entry *e, const nb_conv_dims *g,
                                     const float *w, int64_t O, int64_t C,
                                     const nb_conv_wcache *use, float **wr) {
    if (use && use->buf && use->key == nb_ig_key(&e->cfg)) {
        *wr = use->buf;
        return NB_OK;
    }
    NB_TRY(nb_ig_weights(dev, e->cfg.mode == 1 ? &e->cfg : NULL, g->O, g->C, g->K, wr));
    return nb_ig_arrange(dev, e, w, *wr, O, C, g->K, 1, NULL, NULL);
}

/* out [N][O][P] (f32) := bias[o] (0 without): the start of a split sum (16-byte stores,
 * nb_conv_fill_bias). */
static nb_status nb_ig_fill(nb_device *dev, float *out, const float *bias, int64_t N, int64_t O,
                            int64_t P) {
    return nb_conv_fill_bias(dev, out, NB_F32, bias, N, O, P);
}

/* MODE 0 on image a [N][Cin][H][W] with weights wr [Cout][KK][Cin] -> out [N][Cout][OH][OW]
 * (accum: +=). Fewer blocks than SMs: the k range is split over blockIdx.z, partial sums added
 * atomically (the forward first fills out with the bias). */
static nb_status nb_ig_mode0(nb_device *dev, const nb_conv_dims *g, nb_ig_entry *e,
                             const float *a, const float *wr, const float *bias, float *out,
                             int accum) {
    nb_ig_params p = {a, wr, bias, out, (int)g->N, (int)g->C, (int)g->H, (int)g->W, (int)g->O,
                      (int)g->OH, (int)g->OW, (int)g->pad, accum, 0};
    int64_t M = g->N * g->OH * g->OW, P = g->OH * g->OW;
    unsigned gx = (unsigned)((M + e->cfg.bm - 1) / e->cfg.bm);
    unsigned gy = (unsigned)((g->O + e->cfg.bn - 1) / e->cfg.bn);
    /* k steps: 32-wide k tiles (MODE 0) or CB-channel chunks of all taps (MODE 1) */
    int halo = e->cfg.mode == 1;
    int64_t nkt = halo ? (g->C + e->cfg.cb - 1) / e->cfg.cb : g->K * g->K * g->C / 32;
    int64_t blocks = (int64_t)gx * gy, sms = nb_ig_sms(dev);
    int64_t splits = blocks < sms ? (2 * sms + blocks - 1) / blocks : 1;
    if (splits > nkt / (halo ? 2 : 4)) splits = nkt / (halo ? 2 : 4); /* >= 4 k tiles each */
    unsigned gz = 1;
    if (splits > 1) {
        int64_t kps = (nkt + splits - 1) / splits;
        gz = (unsigned)((nkt + kps - 1) / kps);
        p.kt_per_split = (int)kps;
        if (!accum) {
            NB_TRY(nb_ig_fill(dev, out, bias, g->N, g->O, P));
        }
        p.accum = 2;
        p.bias = NULL;
    }
    return nb_ig_launch(e->main, halo ? nb_ig_halo_smem(&e->cfg, g) : nb_ig_smem(&e->cfg), &p, gx, gy, gz);
}

static nb_status nb_ig_forward_f32(nb_device *dev, int precision, const nb_conv_dims *d,
                                   const float *x, const float *w, const float *b, float *y,
                                   nb_conv_wcache *fill) {
    if (!nb_conv_igemm_supports(d, precision, 0))
        return nb_error(NB_ERR_UNSUPPORTED, "conv2d (CUDA): implicit GEMM forward needs "
                        "C %% 32 == 0 (C = %lld)", (long long)d->C);
    nb_ig_cfg c;
    int halo = nb_ig_halo_pick(precision, d, &c);
    if (!halo) c = nb_ig_pick_dev(dev, 0, precision, d, d->O);
    nb_ig_entry *e;
    NB_TRY(nb_ig_load(dev, &c, &e));
    float *wr;
    NB_TRY(nb_ig_weights(dev, halo ? &c : NULL, d->O, d->C, d->K, &wr));
    NB_TRY(nb_ig_arrange(dev, e, w, wr, d->O, d->C, d->K, 0, fill, d));
    return nb_ig_mode0(dev, d, e, x, wr, b, y, 0);
}

static nb_status nb_ig_dgrad_f32(nb_device *dev, int precision, const nb_conv_dims *d,
                                 const float *w, const float *dy, float *dx, int store,
                                 const nb_conv_wcache *use) {
    if (!nb_conv_igemm_supports(d, precision, 1))
        return nb_error(NB_ERR_UNSUPPORTED, "conv2d (CUDA): implicit GEMM data gradient needs "
                        "stride 1, O %% 32 == 0 and pad <= K-1");
    /* dx = forward conv of dy (O channels, OHxOW) with the flipped weights, pad K-1-pad */
    nb_conv_dims g = nb_ig_dgrad_dims(d);
    nb_ig_cfg c;
    int halo = nb_ig_halo_pick(precision, &g, &c);
    if (!halo) c = nb_ig_pick_dev(dev, 0, precision, &g, g.O);
    nb_ig_entry *e;
    NB_TRY(nb_ig_load(dev, &c, &e));
    float *wr;
    NB_TRY(nb_ig_dgrad_weights(dev, e, &g, w, d->O, d->C, use, &wr));
    /* store: accum 0 without a bias writes every element (split k: zero fill, then atomics) */
    return nb_ig_mode0(dev, &g, e, dy, wr, NULL, dx, !store);
}

/* Benchmarks / tests (bits): 2 = MODE 2 even where MODE 3 applies, 4 = each k split's partial
 * sums stored (scratch slot 5) and summed by a second kernel instead of added atomically
 * (measured slower on the H100 at batch 32: e.g. 256->256 at 8x8 weight gradient 0.050 vs
 * 0.036 ms, 128->128 at 32x32 0.100 vs 0.086; .export/device-results/bf16conv). */
static int nb_ig_bf16_wgrad_mode;
void nb_conv_igemm_set_bf16_wgrad(int mode) { nb_ig_bf16_wgrad_mode = mode; }

/* MODE 3: straight into dw, split over steps of whole output rows (x, dy f32, or bf16 for
 * c->abf; with nb_ig_bf16_wgrad_mode & 4 each split's partials stored, then summed). */
static nb_status nb_ig_mode3(nb_device *dev, const nb_conv_dims *d, const nb_ig_cfg *c,
                             const void *x, const void *dy, float *dw) {
    nb_ig_entry *e;
    NB_TRY(nb_ig_load(dev, c, &e));
    int64_t RT = d->OH < 128 / d->OW ? d->OH : 128 / d->OW, nsteps = d->N * (d->OH / RT);
    unsigned gx = (unsigned)((d->O + 63) / 64), gy = (unsigned)(d->C / 32);
    int64_t want = 2 * (int64_t)nb_ig_sms(dev), blocks = (int64_t)gx * gy;
    int64_t splits = want / blocks; /* rounded down: see nb_ig_wgrad_run */
    if (splits > nsteps) splits = nsteps;
    if (splits < 1) splits = 1;
    int64_t kps = (nsteps + splits - 1) / splits;
    splits = (nsteps + kps - 1) / kps;
    if (splits > 65535) return nb_error(NB_ERR_UNSUPPORTED, "conv2d (CUDA): too many k splits");
    nb_ig_params p = {dy, x, NULL, dw, (int)d->N, (int)d->C, (int)d->H, (int)d->W, (int)d->O,
                      (int)d->OH, (int)d->OW, (int)d->pad, 0, (int)kps};
    if (!c->abf || splits == 1 || !(nb_ig_bf16_wgrad_mode & 4))
        return nb_ig_launch(e->main, nb_ig_wg_smem(c, d), &p, gx, gy, (unsigned)splits);
    /* bf16 with mode bit 4: each split's partial sums stored, then summed into dw */
    int64_t L = d->O * d->C * d->K * d->K;
    float *part;
    NB_TRY(nb_conv_scratch(dev, 5, (size_t)(splits * L) * sizeof(float), &part));
    p.out = part, p.accum = 1;
    NB_TRY(nb_ig_launch(e->main, nb_ig_wg_smem(c, d), &p, gx, gy, (unsigned)splits));
    return nb_conv_sum_splits(dev, part, dw, L, splits);
}

/* Weight-gradient k splits: blocks x splits <= 2 x SMs (rounded down, not up). The weight
 * gradient's tiles run 1 block per SM (MODE 2 128x128: 167-210 registers; MODE 3 and MODE 2
 * 64x256: shared memory or 255 registers) or 2 (MODE 2 64x128: 128 registers, ptxas sm_90),
 * so rounding up left 1-56 blocks over 2 x SMs on every UNet shape at batch 32 (e.g. 64->64 at
 * 64x64: 265 blocks; 256->256 at 8x8: 288; 512->256 at 8x8: 320): one more, mostly empty
 * wave. Rounded down: 260, 252, 256 blocks, each with a few more k steps. */

/* x, dy f32, or bf16 with abf (BF16 precision); bias gradient (db, may be NULL) from bdy (bdt:
 * the caller's dy, before any conversion) where the rearranging add runs */
static nb_status nb_ig_wgrad_run(nb_device *dev, int precision, const nb_conv_dims *d,
                                 const void *x, const void *dy, float *dw, int abf,
                                 const void *bdy, nb_dtype bdt, float **db) {
    if (!nb_conv_igemm_supports(d, precision, 2))
        return nb_error(NB_ERR_UNSUPPORTED, "conv2d (CUDA): implicit GEMM weight gradient needs "
                        "OH*OW %% 32 == 0");
    nb_ig_cfg c;
    nb_ig_entry *e;
    if (abf ? (!(nb_ig_bf16_wgrad_mode & 2) || (d->OH * d->OW) % 32) &&
                  nb_ig_wg_pick_dt(precision, d, &c, 1)
            : nb_ig_wg_pick(precision, d, &c))
        return nb_ig_mode3(dev, d, &c, x, dy, dw);
    c = nb_ig_pick_dev(dev, 2, precision, d, d->O);
    c.abf = abf;
    NB_TRY(nb_ig_load(dev, &c, &e));
    int64_t KK = d->K * d->K, nw = d->O * d->C * KK, Nn = KK * d->C;
    /* 1x1: dwr [O][1][C] is dw [O][C][1] itself; MODE 2 only adds (atomically), so it goes
     * straight into dw (no zeroed scratch, no rearranging add) */
    float *dwr = dw;
    nb_ig_dwr_zero *z = NULL;
    size_t z_clean = 0;
    if (KK > 1) {
        size_t bytes = (size_t)nw * sizeof(float);
        NB_TRY(nb_conv_scratch(dev, 2, bytes, &dwr));
        /* index < NB_IG_DWR_DEVS: nb_conv_scratch checked it */
        z = &nb_ig_dwr_state[nb_device_get_info(dev)->index];
        if (z->dev != dev || z->ptr != dwr || z->clean < bytes) {
            NB_TRY(nb_memset(dev, dwr, 0, bytes));
            z->dev = dev, z->ptr = dwr, z->clean = bytes;
        }
        z_clean = z->clean;
        z->clean = 0; /* dirty until the rearranging add below has been queued */
    }
    int64_t tiles = ((d->O + c.bm - 1) / c.bm) * ((Nn + c.bn - 1) / c.bn);
    int64_t nkt = d->N * d->OH * d->OW / 32;
    int64_t want = 2 * (int64_t)nb_ig_sms(dev);
    int64_t splits = want / tiles; /* rounded down, as MODE 3 above */
    if (splits < 1) splits = 1;
    if (splits > nkt) splits = nkt;
    int64_t kps = (nkt + splits - 1) / splits;
    splits = (nkt + kps - 1) / kps;
    if (splits > 65535) return nb_error(NB_ERR_UNSUPPORTED, "conv2d (CUDA): too many k splits");
    nb_ig_params p = {dy, x, NULL, dwr, (int)d->N, (int)d->C, (int)d->H, (int)d->W, (int)d->O,
                      (int)d->OH, (int)d->OW, (int)d->pad, 0, (int)kps};
    float *part = NULL;
    if (abf && splits > 1 && (nb_ig_bf16_wgrad_mode & 4)) {
        /* bf16 with mode bit 4: each split's partials stored, then summed into dwr (or dw) */
        NB_TRY(nb_conv_scratch(dev, 5, (size_t)(splits * nw) * sizeof(float), &part));
        p.out = part, p.accum = 1;
    }
    NB_TRY(nb_ig_launch(e->main, nb_ig_smem(&c), &p, (unsigned)((d->O + c.bm - 1) / c.bm),
                        (unsigned)((Nn + c.bn - 1) / c.bn), (unsigned)splits));
    if (part) NB_TRY(nb_conv_sum_splits(dev, part, dwr, nw, splits));
    if (KK == 1) return NB_OK;
    int64_t P = d->OH * d->OW;
    if (db && *db && P >= 16) {
        NB_TRY(nb_conv_dw_bias_grad(dev, dwr, dw, d->O, d->C, KK, bdy, bdt, *db, d->N, P));
        *db = NULL;
    } else {
        nb_ig_dw_params q = {dwr, dw, (int)d->O, (int)d->C};
        NB_TRY(nb_ig_grid_stride(e->dw, &q, sizeof q, nw));
    }
    z->clean = z_clean; /* the add zeroes what MODE 2 summed into: the scratch is clean again */
    return NB_OK;
}

/* ---- storage dtypes ---------------------------------------------------------------------------- */

/* BF16 precision with bf16 tensors: the bf16-activation kernels (MODE 1 where it applies, else
 * MODE 0, for the forward and data gradient; MODE 3 where it applies, else MODE 2, for the
 * weight gradient); an f32 tensor among them is converted to bf16 first (slot 3 x, 4 dy).
 * The f32 copies (slot 3 x, 4 dy, 5 the f32 output) serve what is left: a shape only the f32
 * halo kernels take (C % 32 != 0 with W % 8 != 0 or a misaligned output; a halo weight
 * gradient with W % 8 != 0 and OH * OW % 32 != 0). */
static int nb_ig_bf16_storage(int precision, nb_dtype xdt, nb_dtype ydt) {
    return precision == NB_TAPE_BF16 && (xdt == NB_BF16 || ydt == NB_BF16);
}

/* k splits of a MODE 0 / MODE 1 grid (as nb_ig_mode0): blockIdx.z count, k steps per split in
 * *kps (0: no split). */
static unsigned nb_ig_split(nb_device *dev, const nb_conv_dims *g, const nb_ig_cfg *c, int64_t *kps,
                            unsigned *gx, unsigned *gy) {
    int64_t M = g->N * g->OH * g->OW;
    *gx = (unsigned)((M + c->bm - 1) / c->bm);
    *gy = (unsigned)((g->O + c->bn - 1) / c->bn);
    int halo = c->mode == 1;
    int64_t nkt = halo ? (g->C + c->cb - 1) / c->cb : g->K * g->K * g->C / 32;
    int64_t blocks = (int64_t)*gx * *gy, sms = nb_ig_sms(dev);
    int64_t splits = blocks < sms ? (2 * sms + blocks - 1) / blocks : 1;
    if (splits > nkt / (halo ? 2 : 4)) splits = nkt / (halo ? 2 : 4);
    *kps = 0;
    if (splits <= 1) return 1;
    *kps = (nkt + splits - 1) / splits;
    return (unsigned)((nkt + *kps - 1) / *kps);
}

/* MODE 1 (halo) or MODE 0 (c.mode) on bf16 activations a (the forward-style conv g; weights w
 * [wO][wC][KK], flip for the data gradient) into out (odt; accum 0: = (+ bias), 1: +=). Split
 * over k: f32 partial sums added atomically into out (f32) or into the zeroed f32 accumulator
 * (slot 8) that nb_conv_split_out rounds into a bf16 out. */
static nb_status nb_ig_run_bf16(nb_device *dev, const nb_conv_dims *g, nb_ig_cfg c, const void *a,
                                const float *w, int flip, int64_t wO, int64_t wC,
                                const float *bias, void *out, nb_dtype odt, int accum,
                                nb_conv_wcache *fill, const nb_conv_wcache *use) {
    int64_t kps;
    int halo = c.mode == 1;
    c.abf = 1;
    unsigned gx, gy, gz = nb_ig_split(dev, g, &c, &kps, &gx, &gy);
    c.obf = odt == NB_BF16 && gz == 1;
    nb_ig_entry *e;
    NB_TRY(nb_ig_load(dev, &c, &e));
    float *wr;
    if (flip) {
        NB_TRY(nb_ig_dgrad_weights(dev, e, g, w, wO, wC, use, &wr));
    } else {
        NB_TRY(nb_ig_weights(dev, halo ? &c : NULL, g->O, g->C, g->K, &wr));
        NB_TRY(nb_ig_arrange(dev, e, w, wr, wO, wC, g->K, 0, fill, g));
    }
    nb_ig_params p = {a, wr, bias, out, (int)g->N, (int)g->C, (int)g->H, (int)g->W, (int)g->O,
                      (int)g->OH, (int)g->OW, (int)g->pad, accum, 0};
    int64_t smem = halo ? nb_ig_halo_smem(&c, g) : nb_ig_smem(&c);
    if (gz == 1) return nb_ig_launch(e->main, smem, &p, gx, gy, 1);
    int64_t P = g->OH * g->OW, ny = g->N * g->O * P;
    if (odt == NB_BF16) {
        /* into the zeroed f32 accumulator (slot 8), then one pass adds the bias (or the old
         * output), rounds to bf16 and re-zeroes the accumulator: no fill launch */
        size_t bytes = (size_t)ny * sizeof(float);
        float *acc;
        NB_TRY(nb_conv_scratch(dev, 8, bytes, &acc));
        nb_ig_dwr_zero *z = &nb_ig_acc_state[nb_device_get_info(dev)->index];
        if (z->dev != dev || z->ptr != acc || z->clean < bytes) {
            NB_TRY(nb_memset(dev, acc, 0, bytes));
            z->dev = dev, z->ptr = acc, z->clean = bytes;
        }
        size_t clean = z->clean;
        z->clean = 0; /* dirty until nb_conv_split_out has been queued */
        p.out = acc, p.accum = 2, p.bias = NULL, p.kt_per_split = (int)kps;
        NB_TRY(nb_ig_launch(e->main, smem, &p, gx, gy, gz));
        NB_TRY(nb_conv_split_out(dev, acc, out, bias, g->N, g->O, P, accum));
        z->clean = clean;
        return NB_OK;
    }
    /* f32 out: filled with the bias (accum 0), the splits added atomically */
    if (!accum) NB_TRY(nb_ig_fill(dev, (float *)out, bias, g->N, g->O, P));
    p.accum = 2, p.bias = NULL, p.kt_per_split = (int)kps;
    return nb_ig_launch(e->main, smem, &p, gx, gy, gz);
}

nb_status nb_conv_igemm_forward(nb_device *dev, int precision, const nb_conv_dims *d,
                                nb_dtype xdt, nb_dtype ydt, const void *x, const float *w,
                                const float *b, void *y, nb_conv_wcache *fill) {
    if (xdt == NB_F32 && ydt == NB_F32) return nb_ig_forward_f32(dev, precision, d, x, w, b, y, fill);
    nb_ig_cfg hc;
    /* (its bf16 output is written with 16-byte stores) */
    if (nb_ig_bf16_storage(precision, xdt, ydt) && (uintptr_t)y % 16 == 0 &&
        nb_ig_halo_pick_dt(precision, d, &hc, 1)) {
        const void *xb;
        NB_TRY(nb_conv_as(dev, x, xdt, NB_BF16, d->N * d->C * d->H * d->W, 3, &xb));
        return nb_ig_run_bf16(dev, d, hc, xb, w, 0, d->O, d->C, b, y, ydt, 0, fill, NULL);
    }
    if (nb_ig_bf16_storage(precision, xdt, ydt) && d->C % 32 == 0) { /* MODE 0 */
        const void *xb;
        NB_TRY(nb_conv_as(dev, x, xdt, NB_BF16, d->N * d->C * d->H * d->W, 3, &xb));
        return nb_ig_run_bf16(dev, d, nb_ig_pick_dev(dev, 0, precision, d, d->O), xb, w, 0, d->O,
                              d->C, b, y, ydt, 0, fill, NULL);
    }
    int64_t ny = d->N * d->O * d->OH * d->OW;
    const void *xf;
    float *yf = y;
    NB_TRY(nb_conv_as(dev, x, xdt, NB_F32, d->N * d->C * d->H * d->W, 3, &xf));
    if (ydt != NB_F32) NB_TRY(nb_conv_scratch(dev, 5, (size_t)ny * sizeof(float), &yf));
    NB_TRY(nb_ig_forward_f32(dev, precision, d, xf, w, b, yf, fill));
    return ydt != NB_F32 ? nb_conv_convert(dev, yf, NB_F32, y, ydt, ny, 0) : NB_OK;
}

nb_status nb_conv_igemm_dgrad(nb_device *dev, int precision, const nb_conv_dims *d,
                              nb_dtype xdt, nb_dtype ydt, const float *w, const void *dy,
                              void *dx, int store, const nb_conv_wcache *use) {
    if (xdt == NB_F32 && ydt == NB_F32)
        return nb_ig_dgrad_f32(dev, precision, d, w, dy, dx, store, use);
    int64_t nx = d->N * d->C * d->H * d->W;
    nb_conv_dims g = nb_ig_dgrad_dims(d);
    nb_ig_cfg hc;
    if (nb_ig_bf16_storage(precision, xdt, ydt) && (uintptr_t)dx % 16 == 0 &&
        nb_ig_halo_pick_dt(precision, &g, &hc, 1)) {
        const void *dyb;
        NB_TRY(nb_conv_as(dev, dy, ydt, NB_BF16, d->N * d->O * d->OH * d->OW, 4, &dyb));
        return nb_ig_run_bf16(dev, &g, hc, dyb, w, 1, d->O, d->C, NULL, dx, xdt, !store, NULL, use);
    }
    if (nb_ig_bf16_storage(precision, xdt, ydt) && d->O % 32 == 0) { /* MODE 0 */
        const void *dyb;
        NB_TRY(nb_conv_as(dev, dy, ydt, NB_BF16, d->N * d->O * d->OH * d->OW, 4, &dyb));
        return nb_ig_run_bf16(dev, &g, nb_ig_pick_dev(dev, 0, precision, &g, g.O), dyb, w, 1,
                              d->O, d->C, NULL, dx, xdt, !store, NULL, use);
    }
    const void *dyf;
    NB_TRY(nb_conv_as(dev, dy, ydt, NB_F32, d->N * d->O * d->OH * d->OW, 4, &dyf));
    if (xdt == NB_F32) return nb_ig_dgrad_f32(dev, precision, d, w, dyf, dx, store, use);
    float *dxf;
    NB_TRY(nb_conv_scratch(dev, 5, (size_t)nx * sizeof(float), &dxf));
    NB_TRY(nb_ig_dgrad_f32(dev, precision, d, w, dyf, dxf, 1, use));
    return nb_conv_convert(dev, dxf, NB_F32, dx, xdt, nx, !store);
}

nb_status nb_conv_igemm_wgrad(nb_device *dev, int precision, const nb_conv_dims *d,
                              nb_dtype xdt, nb_dtype ydt, const void *x, const void *dy,
                              float *dw, float **db) {
    if (xdt == NB_F32 && ydt == NB_F32)
        return nb_ig_wgrad_run(dev, precision, d, x, dy, dw, 0, dy, ydt, db);
    nb_ig_cfg c;
    if (nb_ig_bf16_storage(precision, xdt, ydt) &&
        (nb_ig_wg_pick_dt(precision, d, &c, 1) || (d->OH * d->OW) % 32 == 0)) {
        /* MODE 3 / MODE 2 on bf16 (an f32 tensor converted) */
        const void *xb, *dyb;
        NB_TRY(nb_conv_as(dev, x, xdt, NB_BF16, d->N * d->C * d->H * d->W, 3, &xb));
        NB_TRY(nb_conv_as(dev, dy, ydt, NB_BF16, d->N * d->O * d->OH * d->OW, 4, &dyb));
        return nb_ig_wgrad_run(dev, precision, d, xb, dyb, dw, 1, dy, ydt, db);
    }
    const void *xf, *dyf; /* the f32 halo MODE 3 on converted copies (W % 8 != 0) */
    NB_TRY(nb_conv_as(dev, x, xdt, NB_F32, d->N * d->C * d->H * d->W, 3, &xf));
    NB_TRY(nb_conv_as(dev, dy, ydt, NB_F32, d->N * d->O * d->OH * d->OW, 4, &dyf));
    return nb_ig_wgrad_run(dev, precision, d, xf, dyf, dw, 0, dy, ydt, db);
}

/* ---- the data gradient's layout, and the weight arrangement alone (tests / benchmarks) -------- */

/* The configuration the data gradient (nb_conv_igemm_dgrad) runs for d, on a 16-byte aligned dx
 * (as nb_conv_igemm_dgrad decides). */
static int nb_ig_dgrad_cfg(const nb_conv_dims *d, int prec, nb_dtype xdt, nb_dtype ydt,
                           nb_ig_cfg *c) {
    if (!nb_conv_igemm_supports(d, prec, 1)) return 0;
    nb_conv_dims g = nb_ig_dgrad_dims(d);
    if (prec == NB_TAPE_BF16 && (xdt == NB_BF16 || ydt == NB_BF16)) {
        if (nb_ig_halo_pick_dt(prec, &g, c, 1)) return 1;
        if (d->O % 32 == 0) {
            memset(c, 0, sizeof *c);
            c->abf = 1;
            return 1;
        }
    }
    if (nb_ig_halo_pick(prec, &g, c)) return 1;
    memset(c, 0, sizeof *c);
    return 1;
}

int nb_conv_igemm_dgrad_key(const nb_conv_dims *d, int precision, nb_dtype xdt, nb_dtype ydt) {
    nb_ig_cfg c;
    return d && nb_ig_dgrad_cfg(d, precision, xdt, ydt, &c) ? nb_ig_key(&c) : 0;
}

nb_status nb_conv_igemm_arrange_weights(nb_device *dev, int precision, const nb_conv_dims *d,
                                        int which, int abf, const float *w, void **wr,
                                        size_t *bytes, int *cb) {
    if (which != 0 && which != 1)
        return nb_error(NB_ERR_INVALID_ARG, "conv2d (CUDA): weight arrangement of part %d (0 "
                        "forward, 1 data gradient)", which);
    if (!nb_conv_igemm_supports(d, precision, which) || (abf && precision != NB_TAPE_BF16))
        return nb_error(NB_ERR_UNSUPPORTED, "conv2d (CUDA): the implicit-GEMM kernels do not "
                        "take this shape / precision");
    nb_conv_dims g = which ? nb_ig_dgrad_dims(d) : *d;
    nb_ig_cfg c;
    int halo = nb_ig_halo_pick_dt(precision, &g, &c, abf);
    if (!halo) {
        if (g.C % 32) return nb_error(NB_ERR_UNSUPPORTED, "conv2d (CUDA): no kernel for this shape");
        c = nb_ig_pick_dev(dev, 0, precision, &g, g.O);
        c.abf = abf;
    }
    nb_ig_entry *e;
    NB_TRY(nb_ig_load(dev, &c, &e));
    float *out;
    NB_TRY(nb_ig_weights(dev, halo ? &c : NULL, g.O, g.C, d->K, &out));
    int64_t cp = halo ? (g.C + c.cb - 1) / c.cb * c.cb : g.C;
    *bytes = (size_t)(g.O * cp * d->K * d->K) * (abf ? 2 : 4);
    *wr = out;
    if (cb) *cb = halo ? c.cb : 0;
    return nb_ig_arrange(dev, e, w, out, d->O, d->C, d->K, which, NULL, NULL);
}

/* ---- prewarm: compile every specialisation of a precision in parallel ------------------------ */

#define NB_IG_WARM_MAX 64
typedef struct {
    nb_device *dev;
    nb_ig_cfg cfg[NB_IG_WARM_MAX];
    nb_status st[NB_IG_WARM_MAX];
} nb_ig_warm;

static void nb_ig_warm_range(void *ctx, int64_t b, int64_t e) {
    nb_ig_warm *w = ctx;
    for (int64_t i = b; i < e; i++) {
        nb_ig_entry *en;
        w->st[i] = nb_ig_load(w->dev, &w->cfg[i], &en);
    }
}

nb_status nb_conv_igemm_prewarm(nb_device *dev, int precision) {
    /* every tile nb_ig_pick_dev can choose (without an override) */
    static const int tiles[2][3][5] = {{{128, 64, 4, 2, 3}, {128, 128, 2, 4, 3}, {64, 64, 2, 4, 4}},
                                       {{64, 128, 2, 4, 3}, {64, 256, 2, 4, 3}, {128, 128, 2, 4, 3}}};
    nb_ig_warm w;
    memset(&w, 0, sizeof w);
    w.dev = dev;
    int n = 0;
    for (int mode = 0; mode <= 2; mode += 2)
        for (int i = 0; i < 3; i++)
            for (int ks = 1; ks <= 3; ks += 2)
                for (int stride = 1; stride <= 2; stride++) {
                    const int *t = tiles[mode / 2][i];
                    nb_ig_cfg c = {mode, precision, t[0], t[1], t[2], t[3], t[4], ks, stride, 8, 0, 0};
                    w.cfg[n++] = c;
                }
    for (int i = 0; i < 3 && precision == NB_TAPE_BF16; i++) /* MODE 2 on bf16 activations */
        for (int ks = 1; ks <= 3; ks += 2) {
            const int *t = tiles[1][i];
            nb_ig_cfg c = {2, precision, t[0], t[1], t[2], t[3], t[4], ks, 1, 8, 1, 0};
            w.cfg[n++] = c;
        }
    for (int i = 0; i < 3 && precision == NB_TAPE_BF16; i++) /* MODE 0 on bf16, 3x3 stride 2 */
        for (int obf = 0; obf <= 1; obf++) {
            const int *t = tiles[0][i];
            nb_ig_cfg c = {0, precision, t[0], t[1], t[2], t[3], t[4], 3, 2, 8, 1, obf};
            w.cfg[n++] = c;
        }
    for (int abf = 0; abf <= (precision == NB_TAPE_BF16); abf++) /* the halo weight gradient (3x3) */
        for (int st = 3; st >= 2 + !abf; st--) {
            nb_ig_cfg c = {3, precision, 64, 64, 2, 4, st, 3, 1, 32, abf, 0};
            w.cfg[n++] = c;
        }
    for (int bm = 64; bm <= 128; bm *= 2) { /* the halo kernel's tiles (nb_ig_halo_pick: 3x3) */
        nb_ig_cfg c = {1, precision, bm, 64, bm == 128 ? 4 : 2, bm == 128 ? 2 : 4, 3, 3, 1,
                       precision == NB_TAPE_BF16 ? 16 : 8, 0, 0};
        w.cfg[n++] = c;
    }
    for (int bm = 64; bm <= 128 && precision == NB_TAPE_BF16; bm *= 2)
        for (int obf = 0; obf <= 1; obf++) { /* the bf16-activation halo kernel */
            nb_ig_cfg c = {1, precision, bm, 64, bm == 128 ? 4 : 2, bm == 128 ? 2 : 4, 3, 3, 1, 16, 1, obf};
            w.cfg[n++] = c;
        }
    nb_nn_parallel(n, 1, nb_ig_warm_range, &w);
    for (int i = 0; i < n; i++)
        if (w.st[i]) return nb_error(w.st[i], "conv2d (CUDA): compiling the implicit-GEMM kernels failed");
    nb_jit_kernel *k;
    return nb_jit_cuda_kernel(dev, NB_IG_WPREP_CU, NULL, "nb_conv_wprep", &k);
}

nb_status nb_conv_igemm_prewarm_tiles(nb_device *dev, int mode, int ks, int stride, int n,
                                      const int (*tiles)[5]) {
    nb_ig_warm w;
    memset(&w, 0, sizeof w);
    w.dev = dev;
    int m = 0;
    for (int i = 0; i < n && m + 2 <= NB_IG_WARM_MAX; i++)
        for (int prec = NB_TAPE_TF32; prec <= NB_TAPE_BF16; prec++) {
            const int *t = tiles[i];
            nb_ig_cfg c = {mode, prec, t[0], t[1], t[2], t[3], t[4], ks, stride, 8, 0, 0};
            w.cfg[m++] = c;
        }
    nb_nn_parallel(m, 1, nb_ig_warm_range, &w);
    for (int i = 0; i < m; i++)
        if (w.st[i]) return nb_error(w.st[i], "conv2d (CUDA): compiling the implicit-GEMM kernels failed");
    return NB_OK;
}

/* CUDA rows of the tape's scaled-dot-product attention (nb_tape_attention, [BH,T,d] inputs) and
 * of the fused legacy-layout QKV attention (nb_tape_qkv_attention: q, k, v read straight from the
 * qkv conv output, no layout copies): fused, FlashAttention-2 style (kernels and their design in
 * kernels/simt.cu; raw-buffer entry points and strided views in attn_cuda.h). The CPU
 * reference is tape_ops_attn.c (it materialises P; this path never holds more than a 64 x 64
 * tile of scores).
 *
 * The QKV row handles BF16 storage (NB_TOPF_IN_BF16 | OUT_BF16): qkv / out / their gradients are
 * loaded and stored as bf16, all arithmetic and lse / delta stay f32. Its backward writes dqkv
 * with plain stores on the first contribution (nb_tape_grad_buf_w; dq via f32 atomics over key
 * tiles, through an f32 scratch when dqkv is bf16). nb_tape_attention's row stays f32-only.
 *
 * Forward: o and the row log-sum-exp (op->saved[0], [BH,Tq] in the tape arena) in one launch.
 * Backward: delta = rowsum(dO * O) (arena scratch), then one launch for dq, dk, dv, which
 * accumulate into the inputs' gradient buffers (absent when an input needs no gradient).
 *
 * Precision: NB_TAPE_FP32 runs the fp32 SIMT kernels (exact fp32 math, any d <= 128); TF32 and
 * BF16 run the tensor-core kernels of kernels/tc.cu (mma.sync, fp32 accumulation and storage)
 * for d <= 64 on compute capability 8.0+, and the SIMT kernels otherwise (64 < d <= 128).
 * Feature-major views (the QKV row) with d <= 32 and Tq, Tk <= 256 (the reference UNet's
 * attention: [32,6,256,32] and [32,8,64,32]) run the whole-sequence tensor-core kernels
 * nb_attn_fwd_fa / nb_attn_bwd_fa instead: all keys of a (batch, head) in shared memory, the
 * backward one block per (batch, head) with delta fused and dq stored directly (no delta pass,
 * no dq scratch, no conversion pass) -- by default where measured faster (BF16 with bf16
 * storage; the TF32 forward for long sequences: attn_fa_ok).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "jit/cuda_files.h"
#include "nn/attention/attn_cuda.h"
#include "nn/common/nn_common.h"
#include "graph/op_rows.h"

/* Host mirrors of the kernels' argument structs (kernels/simt.cu; nb_attn_view = Mat). */
typedef struct {
    nb_attn_view q, k, v, o;
    float *lse;
    int32_t Tq, Tk, d, ntiles;
    float sl2;
} attn_fwd_args;

typedef struct {
    nb_attn_view q, k, v, dout, dq, dk, dv;
    const float *lse, *delta;
    int32_t dq_mode, kv_mode;
    int32_t Tq, Tk, d, ntiles;
    float sl2, scale;
    nb_attn_view o; /* nb_attn_bwd_fa only: delta = rowsum(dout * o) in its prologue */
    int32_t fa_flags; /* nb_attn_bwd_fa: dQ's key split (attn_fa_dq_split) */
} attn_bwd_args;

typedef struct {
    nb_attn_view o, dout, z;
    float *delta;
    long long rows;
    int32_t T, d;
} attn_delta_args;

typedef struct {
    nb_attn_view dst;
    const float *src;
    long long n;
    int32_t T, d, add;
} attn_fin_args;

#define ATTN_BQ 64
#define ATTN_BK 64
#define ATTN_NT 256

/* Module variants: 0 row-major f32 (FM 0), 1 feature-major f32 (FM 1), 2 feature-major with
 * some bf16 views (FM 1, SBF 1), 3 feature-major, all bf16 (FM 1, SBF 2: the UNet's BF16 path).
 * A module is a kernel file of src/nn/attention/kernels with its defines: simt.cu (DP, FM, SBF),
 * tc.cu (DP, IS_BF16, FM, SBF), aux.cu (the delta / dq conversion kernels; DP 16). */
typedef struct attn_mod {
    const char *path;
    char buf[4][32]; /* "IS_BF16=%d" of any int fits */
    const char *defs[5];
} attn_mod;

/* Fills m for file path with DP = dp, IS_BF16 = bf16 (when >= 0) and variant var's FM / SBF. */
static void attn_mod_make(attn_mod *m, const char *path, int dp, int bf16, int var) {
    static const int fm[4] = {0, 1, 1, 1}, sbf[4] = {0, 0, 1, 2};
    int n = 0;
    m->path = path;
    snprintf(m->buf[n], sizeof m->buf[n], "DP=%d", dp), n++;
    if (bf16 >= 0) snprintf(m->buf[n], sizeof m->buf[n], "IS_BF16=%d", bf16), n++;
    snprintf(m->buf[n], sizeof m->buf[n], "FM=%d", fm[var]), n++;
    snprintf(m->buf[n], sizeof m->buf[n], "SBF=%d", sbf[var]), n++;
    for (int i = 0; i < n; i++) m->defs[i] = m->buf[i];
    m->defs[n] = NULL;
}

/* Padded head dim and its module for variant var: *tc = 1 for the tensor-core module
 * (TF32 / BF16, DP <= 64, compute capability 8.0+). */
static int attn_dp(nb_device *dev, int64_t d, int precision, int var, attn_mod *src, int *tc) {
    int i = d <= 16 ? 0 : d <= 32 ? 1 : d <= 64 ? 2 : 3;
    *tc = i < 3 && (precision == NB_TAPE_TF32 || precision == NB_TAPE_BF16) &&
          nb_device_get_info(dev)->cc_major >= 8;
    if (*tc)
        attn_mod_make(src, "src/nn/attention/kernels/tc.cu", 16 << i, precision == NB_TAPE_BF16, var);
    else
        attn_mod_make(src, "src/nn/attention/kernels/simt.cu", 16 << i, -1, var);
    return 16 << i;
}

/* The module variant for a set of views (NULL / absent ones skipped): all row-major f32 -> 0
 * (only with atomic gradients: the row-major modules know no other mode), all feature-major ->
 * 1 (f32), 2 (some bf16) or 3 (all bf16); anything else is an error. (Views with both unit strides, e.g. a
 * single position, fit either.) */
static nb_status attn_variant(const char *fn, const nb_attn_view *const *v, int n, int mode,
                              int *var) {
    int rm = 1, fm = 1, bf = 0, all_bf = 1;
    *var = 0;
    for (int i = 0; i < n; i++) {
        if (!v[i] || !v[i]->p) continue;
        rm = rm && v[i]->cs == 1 && !v[i]->bf16;
        fm = fm && v[i]->rs == 1;
        bf = bf || v[i]->bf16;
        all_bf = all_bf && v[i]->bf16;
    }
    if (rm && mode == NB_ATTN_GRAD_ATOMIC) *var = 0;
    else if (fm) *var = all_bf ? 3 : bf ? 2 : 1;
    else
        return nb_error(NB_ERR_INVALID_ARG,
                        "%s: views must be all row-major f32 (feature stride 1) or all "
                        "feature-major (position stride 1)", fn);
    return NB_OK;
}

nb_status nb_attn_cuda_check(const char *fn, int64_t BH, int64_t Tq, int64_t Tk, int64_t d) {
    if (d < 1 || d > NB_ATTN_CUDA_MAX_D)
        return nb_error(NB_ERR_UNSUPPORTED,
                        "%s: head dim d = %lld is not supported by the CUDA fused attention "
                        "(limit of %d)",
                        fn, (long long)d, NB_ATTN_CUDA_MAX_D);
    if (BH < 1 || Tq < 1 || Tk < 1 || Tq >= ((int64_t)1 << 30) || Tk >= ((int64_t)1 << 30))
        return nb_error(NB_ERR_SHAPE,
                        "%s: sequence lengths Tq = %lld, Tk = %lld (N*heads = %lld) must be in 1..2^30",
                        fn, (long long)Tq, (long long)Tk, (long long)BH);
    int64_t tiles = (Tq > Tk ? Tq : Tk) / 64 + 1;
    if (BH * tiles >= ((int64_t)1 << 31))
        return nb_error(NB_ERR_SHAPE, "%s: N*heads = %lld x %lld tiles exceeds the CUDA grid", fn,
                        (long long)BH, (long long)tiles);
    return NB_OK;
}

static nb_status attn_launch(nb_device *dev, const attn_mod *src, const char *entry, unsigned blocks,
                             unsigned threads, size_t smem, void *args) {
    nb_jit_kernel *k;
    NB_TRY(nb_jit_cuda_kernel(dev, src->path, src->defs, entry, &k));
    const unsigned grid[3] = {blocks, 1, 1}, block[3] = {threads, 1, 1};
    void *argv[1] = {args};
    return nb_cuda_launch(nb_jit_kernel_cuda_fn(k), grid, block, (unsigned)smem,
                          nb_device_stream(dev), argv);
}

static nb_attn_view rowmajor(const float *p, int64_t T, int64_t d) {
    nb_attn_view v = {(void *)p, (long long)(T * d), (long long)d, 1, 0};
    return v;
}

/* The whole-sequence kernels nb_attn_fwd_fa / nb_attn_bwd_fa (kernels/tc.cu) can run
 * tensor-core precisions on feature-major views (module variants 1..3) with padded head dim
 * <= 32 (DP 64 would spill in the 512-thread backward) and Tq, Tk <= 256 (the backward holds the
 * whole sequence in shared memory, one warp per 16 keys). By default they run where the H100
 * measured them faster than the 64 x 64 tiled kernels (CUDA-graph GPU time, the UNet's shapes
 * [32,6,256,32] / [32,8,64,32]): BF16 with bf16 q, k, v, o storage (forward 35.6 -> 15.4 us and
 * 6.8 -> 4.5 us, backward 101.3 -> 59.6 us and 18.8 -> 13.0 us) and the TF32 forward for
 * Tq > 64 (36.1 -> 29.4 us; at Tq = 64 5.7 vs 6.8 us, and the TF32 backward 104 vs 106 us, stay
 * tiled); f32 storage under BF16 (converted on the load) measured slower. (The A/B switch
 * NB_ATTN_IMPL=tiled|fa that forced one kind everywhere is gone; docs/PERF.md keeps the numbers.) */
#define ATTN_FA_MAXT 256

/* Warps (16 queries each) per forward block for long sequences (the measured best). */
#define ATTN_FA_FWD_WARPS 8

static int attn_fa_ok(int tc, int var, int dp, int precision, int fwd, int64_t Tq, int64_t Tk) {
    if (!tc || var == 0 || dp > 32 || Tq > ATTN_FA_MAXT || Tk > ATTN_FA_MAXT) return 0;
    if (precision == NB_TAPE_BF16) return var == 3;
    return fwd && var == 1 && Tq > 64; /* TF32 */
}

/* Dynamic shared memory of nb_attn_bwd_fa (bytes): K, V [dp][Tk16 + pad], Q, dO [dp][Tq32 + pad],
 * two dS buffers [Tk16][32 + pad] (operand type), lse and delta [Tq32], two dQ chunk sums
 * [dp][33] (f32). */
static size_t attn_fa_bwd_smem(int precision, int dp, int64_t Tq, int64_t Tk) {
    const size_t es = precision == NB_TAPE_BF16 ? 2 : 4, pad = precision == NB_TAPE_BF16 ? 8 : 4;
    const size_t tk = (size_t)(Tk + 15) / 16 * 16, tq = (size_t)(Tq + 31) / 32 * 32;
    return (2 * dp * (tk + pad) + 2 * dp * (tq + pad) + 2 * tk * (32 + pad)) * es + 2 * tq * 4 +
           2 * (size_t)dp * 33 * 4;
}

nb_status nb_attn_cuda_forward_v(nb_device *dev, int precision, const nb_attn_view *q,
                                 const nb_attn_view *k, const nb_attn_view *v,
                                 const nb_attn_view *o, float *lse, int64_t BH, int64_t Tq,
                                 int64_t Tk, int64_t d) {
    NB_TRY(nb_attn_cuda_check("attention (CUDA forward)", BH, Tq, Tk, d));
    const nb_attn_view *vs[4] = {q, k, v, o};
    int var;
    NB_TRY(attn_variant("attention (CUDA forward)", vs, 4, NB_ATTN_GRAD_ATOMIC, &var));
    attn_mod src;
    int tc, dp = attn_dp(dev, d, precision, var, &src, &tc);
    int64_t ntiles = (Tq + ATTN_BQ - 1) / ATTN_BQ;
    attn_fwd_args a = {*q, *k, *v, *o, lse, (int32_t)Tq, (int32_t)Tk, (int32_t)d, (int32_t)ntiles,
                       (float)(1.4426950408889634 / sqrt((double)d))};
    if (attn_fa_ok(tc, var, dp, precision, 1, Tq, Tk)) { /* 16 nw queries per block; all keys in shared */
        int nw = (int)(Tq + 15) / 16, cap = ATTN_FA_FWD_WARPS;
        if (nw > cap) nw = cap;
        const size_t es = precision == NB_TAPE_BF16 ? 2 : 4, pad = precision == NB_TAPE_BF16 ? 8 : 4;
        const size_t tk = (size_t)(Tk + 63) / 64 * 64;
        a.ntiles = (int32_t)((Tq + 16 * nw - 1) / (16 * nw));
        return attn_launch(dev, &src, "nb_attn_fwd_fa", (unsigned)(a.ntiles * BH), 32 * (unsigned)nw,
                           (2 * dp * (tk + pad) + dp * (16 * (size_t)nw + pad)) * es, &a);
    }
    if (tc) /* Q, K at stride dp + 8, V at dp + 4 */
        return attn_launch(dev, &src, "nb_attn_fwd_tc", (unsigned)(ntiles * BH), 128,
                           (size_t)64 * (3 * dp + 20) * 4, &a);
    size_t smem = ((size_t)(ATTN_BQ + 2 * ATTN_BK) * (dp + 4) + (size_t)ATTN_BQ * (ATTN_BK + 4)) * 4;
    return attn_launch(dev, &src, "nb_attn_fwd", (unsigned)(ntiles * BH), ATTN_NT, smem, &a);
}

nb_status nb_attn_cuda_forward(nb_device *dev, int precision, const float *q, const float *k,
                               const float *v, float *o, float *lse, int64_t BH, int64_t Tq,
                               int64_t Tk, int64_t d) {
    nb_attn_view Q = rowmajor(q, Tq, d), K = rowmajor(k, Tk, d), V = rowmajor(v, Tk, d),
                 O = rowmajor(o, Tq, d);
    return nb_attn_cuda_forward_v(dev, precision, &Q, &K, &V, &O, lse, BH, Tq, Tk, d);
}

/* dq goes through the f32 scratch: STORE / ADD mode, bf16 dq, more than one key tile. */
static int dq_via_scratch(const nb_attn_view *dq, int mode, int64_t Tk) {
    return dq && dq->p && mode != NB_ATTN_GRAD_ATOMIC && dq->bf16 && Tk > ATTN_BK;
}

/* nb_attn_bwd_fa runs this backward (no delta pass, no dq scratch): STORE / ADD mode, the
 * conditions of attn_fa_ok, and its shared memory within the device's opt-in limit. */
static int attn_bwd_fa(nb_device *dev, int precision, const nb_attn_view *const *views, int mode,
                       int64_t Tq, int64_t Tk, int64_t d) {
    if (mode == NB_ATTN_GRAD_ATOMIC) return 0;
    int var;
    if (attn_variant("attention (CUDA backward)", views, 8, mode, &var)) {
        nb_clear_error();
        return 0;
    }
    attn_mod src;
    int tc, dp = attn_dp(dev, d, precision, var, &src, &tc);
    return attn_fa_ok(tc, var, dp, precision, 0, Tq, Tk) &&
           attn_fa_bwd_smem(precision, dp, Tq, Tk) <= nb_device_get_info(dev)->shared_mem_per_block_optin;
}

int64_t nb_attn_cuda_dq_scratch(nb_device *dev, int precision, const nb_attn_view *q,
                                const nb_attn_view *k, const nb_attn_view *v,
                                const nb_attn_view *o, const nb_attn_view *dout,
                                const nb_attn_view *dq, const nb_attn_view *dk,
                                const nb_attn_view *dv, int mode, int64_t BH, int64_t Tq,
                                int64_t Tk, int64_t d) {
    const nb_attn_view *vs[8] = {q, k, v, o, dout, dq, dk, dv};
    if (!dq_via_scratch(dq, mode, Tk) || attn_bwd_fa(dev, precision, vs, mode, Tq, Tk, d)) return 0;
    return BH * Tq * d;
}

static const nb_attn_view no_view = {NULL, 0, 0, 0, 0};

nb_status nb_attn_cuda_backward_v(nb_device *dev, int precision, const nb_attn_view *q,
                                  const nb_attn_view *k, const nb_attn_view *v,
                                  const nb_attn_view *o, const nb_attn_view *dout,
                                  const float *lse, float *delta, const nb_attn_view *dq,
                                  const nb_attn_view *dk, const nb_attn_view *dv, int mode,
                                  float *dq_scratch, int64_t BH, int64_t Tq, int64_t Tk, int64_t d) {
    NB_TRY(nb_attn_cuda_check("attention (CUDA backward)", BH, Tq, Tk, d));
    if (!dq || !dq->p) dq = &no_view;
    if (!dk || !dk->p) dk = &no_view;
    if (!dv || !dv->p) dv = &no_view;
    if (!dq->p && !dk->p && !dv->p) return NB_OK;
    if (mode < NB_ATTN_GRAD_ATOMIC || mode > NB_ATTN_GRAD_ADD)
        return nb_error(NB_ERR_INVALID_ARG, "attention (CUDA backward): gradient mode %d", mode);
    if (mode == NB_ATTN_GRAD_ATOMIC && (dq->bf16 || dk->bf16 || dv->bf16))
        return nb_error(NB_ERR_INVALID_ARG,
                        "attention (CUDA backward): atomic accumulation needs f32 gradients");
    {
        const nb_attn_view *vs[8] = {q, k, v, o, dout, dq, dk, dv};
        if (attn_bwd_fa(dev, precision, vs, mode, Tq, Tk, d)) {
            int var;
            NB_TRY(attn_variant("attention (CUDA backward)", vs, 8, mode, &var));
            attn_mod src;
            int tc, dp = attn_dp(dev, d, precision, var, &src, &tc);
            attn_bwd_args a = {*q, *k, *v, *dout, *dq, *dk, *dv, lse, delta, mode, mode,
                               (int32_t)Tq, (int32_t)Tk, (int32_t)d, 1,
                               (float)(1.4426950408889634 / sqrt((double)d)),
                               (float)(1.0 / sqrt((double)d)), *o,
                               0 /* fa_flags: dQ one warp per unit over all keys (the key split
                                    over warps measured slower on the H100) */};
            return attn_launch(dev, &src, "nb_attn_bwd_fa", (unsigned)BH,
                               32 * (unsigned)((Tk + 15) / 16),
                               attn_fa_bwd_smem(precision, dp, Tq, Tk), &a);
        }
    }
    const int scratch = dq_via_scratch(dq, mode, Tk);
    if (scratch && !dq_scratch)
        return nb_error(NB_ERR_INVALID_ARG,
                        "attention (CUDA backward): a bf16 dq needs an f32 scratch buffer");
    /* dq: one writer per element when there is a single key tile; else f32 atomics, into dq
     * itself (zeroed by the delta kernel in STORE mode) or into the zeroed scratch. */
    int dq_mode = mode;
    nb_attn_view dqv = *dq, z = no_view;
    if (mode != NB_ATTN_GRAD_ATOMIC && Tk > ATTN_BK) {
        dq_mode = NB_ATTN_GRAD_ATOMIC;
        if (scratch) {
            nb_attn_view sv = {dq_scratch, (long long)(d * Tq), 1, (long long)Tq, 0};
            dqv = z = sv;
        } else if (mode == NB_ATTN_GRAD_STORE && dq->p) {
            z = *dq;
        }
    }
    const nb_attn_view *vs[8] = {q, k, v, o, dout, dq, dk, dv};
    int var;
    NB_TRY(attn_variant("attention (CUDA backward)", vs, 8, mode, &var));
    attn_mod src, src32; /* src32: delta, dq conversion */
    attn_mod_make(&src32, "src/nn/attention/kernels/aux.cu", 16, -1, var);
    int tc, dp = attn_dp(dev, d, precision, var, &src, &tc);
    int64_t rows = BH * Tq;
    attn_delta_args da = {*o, *dout, z, delta, rows, (int32_t)Tq, (int32_t)d};
    if (var == 0) { /* row-major: a warp per row */
        int64_t blocks = (rows + 7) / 8;
        if (blocks > 65535) blocks = 65535;
        NB_TRY(attn_launch(dev, &src32, "nb_attn_delta", (unsigned)blocks, 256, 0, &da));
    } else { /* feature-major: a thread per row, coalesced along positions */
        int64_t blocks = (rows + 127) / 128;
        if (blocks > 65535) blocks = 65535;
        NB_TRY(attn_launch(dev, &src32, "nb_attn_delta_t", (unsigned)blocks, 128, 0, &da));
    }
    int64_t ntiles = (Tk + ATTN_BK - 1) / ATTN_BK;
    attn_bwd_args a = {*q, *k, *v, *dout, dqv, *dk, *dv, lse, delta, dq_mode, mode,
                       (int32_t)Tq, (int32_t)Tk, (int32_t)d, (int32_t)ntiles,
                       (float)(1.4426950408889634 / sqrt((double)d)), (float)(1.0 / sqrt((double)d)),
                       *o, 0};
    if (tc) /* K at stride dp + 4; V, Q, dO at dp + 8; dS 64 x 72; lse, delta */
        NB_TRY(attn_launch(dev, &src, "nb_attn_bwd_tc", (unsigned)(ntiles * BH), 128,
                           ((size_t)64 * (4 * dp + 28 + 72) + 128) * 4, &a));
    else
        NB_TRY(attn_launch(dev, &src, "nb_attn_bwd", (unsigned)(ntiles * BH), ATTN_NT,
                           ((size_t)(2 * ATTN_BK + 2 * ATTN_BQ) * (dp + 4) +
                            (size_t)3 * ATTN_BQ * (ATTN_BK + 4) + 2 * ATTN_BQ) * 4,
                           &a));
    if (!scratch) return NB_OK;
    int64_t n = BH * Tq * d, blocks = (n + 255) / 256;
    if (blocks > 65535) blocks = 65535;
    attn_fin_args fa = {*dq, dq_scratch, n, (int32_t)Tq, (int32_t)d, mode == NB_ATTN_GRAD_ADD};
    return attn_launch(dev, &src32, "nb_attn_dq_fin", (unsigned)blocks, 256, 0, &fa);
}

nb_status nb_attn_cuda_backward(nb_device *dev, int precision, const float *q, const float *k,
                                const float *v, const float *o, const float *dout,
                                const float *lse, float *delta, float *dq, float *dk, float *dv,
                                int64_t BH, int64_t Tq, int64_t Tk, int64_t d) {
    nb_attn_view Q = rowmajor(q, Tq, d), K = rowmajor(k, Tk, d), V = rowmajor(v, Tk, d),
                 O = rowmajor(o, Tq, d), G = rowmajor(dout, Tq, d), DQ = rowmajor(dq, Tq, d),
                 DK = rowmajor(dk, Tk, d), DV = rowmajor(dv, Tk, d);
    return nb_attn_cuda_backward_v(dev, precision, &Q, &K, &V, &O, &G, lse, delta, &DQ, &DK, &DV,
                                   NB_ATTN_GRAD_ATOMIC, NULL, BH, Tq, Tk, d);
}

/* ---- the tape row ----------------------------------------------------------------------- */

#define VAL(t, v) (&(t)->vals[(v)])

nb_status nb_op_attention_cuda_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *q = VAL(t, op->in[0]), *k = VAL(t, op->in[1]), *v = VAL(t, op->in[2]);
    const nb_tval *o = VAL(t, op->out);
    int64_t BH = q->shape[0] * q->shape[1], Tq = q->shape[2], Tk = k->shape[2], d = q->shape[3];
    NB_TRY(nb_attn_cuda_check("nb_tape_attention", BH, Tq, Tk, d));
    op->saved[0] = nb_tape_alloc_f32(t, BH * Tq, 0);
    if (!op->saved[0]) return NB_ERR_OUT_OF_MEMORY;
    return nb_attn_cuda_forward(t->dev, t->precision, q->data, k->data, v->data, o->data,
                                op->saved[0], BH, Tq, Tk, d);
}

nb_status nb_op_attention_cuda_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *q = VAL(t, op->in[0]), *k = VAL(t, op->in[1]), *v = VAL(t, op->in[2]);
    const nb_tval *o = VAL(t, op->out);
    int64_t BH = q->shape[0] * q->shape[1], Tq = q->shape[2], Tk = k->shape[2], d = q->shape[3];
    float *dq, *dk, *dv;
    NB_TRY(nb_tape_grad_buf(t, op->in[0], &dq));
    NB_TRY(nb_tape_grad_buf(t, op->in[1], &dk));
    NB_TRY(nb_tape_grad_buf(t, op->in[2], &dv));
    if (!dq && !dk && !dv) return NB_OK;
    float *delta = nb_tape_alloc_f32(t, BH * Tq, 0);
    if (!delta) return NB_ERR_OUT_OF_MEMORY;
    return nb_attn_cuda_backward(t->dev, t->precision, q->data, k->data, v->data, o->data,
                                 o->grad, op->saved[0], delta, dq, dk, dv, BH, Tq, Tk, d);
}

/* ---- the fused legacy-layout QKV row (nb_tape_qkv_attention) ------------------------------
 * qkv [N, heads*3d, L] (or [N, heads*3d, H, W]) -> out [N, heads*d, L]: the kernels read q, k, v
 * and write out / dqkv in place through feature-major views, f32 or bf16 (the values' dtypes). */

typedef struct {
    int64_t BH, L, d;
    nb_attn_view q, k, v, o;
} qkv_views;

static void qkv_make_views(const nb_tape *t, const nb_top *op, void *qkv, int qkv_bf, void *o,
                           int o_bf, qkv_views *w) {
    const nb_tval *x = VAL(t, op->in[0]);
    int64_t heads = op->ip[0], L = x->count / (x->shape[0] * x->shape[1]);
    int64_t d = x->shape[1] / (3 * heads);
    size_t es = qkv_bf ? 2 : 4;
    w->BH = x->shape[0] * heads, w->L = L, w->d = d;
    for (int j = 0; j < 3; j++) {
        nb_attn_view v = {qkv ? (char *)qkv + (size_t)(j * d * L) * es : NULL,
                          (long long)(3 * d * L), 1, (long long)L, qkv_bf};
        *(j == 0 ? &w->q : j == 1 ? &w->k : &w->v) = v;
    }
    nb_attn_view ov = {o, (long long)(d * L), 1, (long long)L, o_bf};
    w->o = ov;
}

nb_status nb_op_qkv_attention_cuda_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]), *o = VAL(t, op->out);
    qkv_views w;
    qkv_make_views(t, op, x->data, x->dtype == NB_BF16, o->data, o->dtype == NB_BF16, &w);
    NB_TRY(nb_attn_cuda_check("nb_tape_qkv_attention", w.BH, w.L, w.L, w.d));
    op->saved[0] = nb_tape_alloc_f32(t, w.BH * w.L, 0);
    if (!op->saved[0]) return NB_ERR_OUT_OF_MEMORY;
    return nb_attn_cuda_forward_v(t->dev, t->precision, &w.q, &w.k, &w.v, &w.o, op->saved[0],
                                  w.BH, w.L, w.L, w.d);
}

nb_status nb_op_qkv_attention_cuda_bwd(nb_tape *t, const nb_top *op) {
    float *g;
    int overwrite;
    NB_TRY(nb_tape_grad_buf_w(t, op->in[0], &g, &overwrite));
    if (!g) return NB_OK;
    const nb_tval *x = VAL(t, op->in[0]), *o = VAL(t, op->out);
    const int xbf = x->dtype == NB_BF16, obf = o->dtype == NB_BF16;
    qkv_views w, gw;
    qkv_make_views(t, op, x->data, xbf, o->data, obf, &w);
    qkv_make_views(t, op, g, xbf, o->grad, obf, &gw); /* gradients: the values' dtypes */
    const int mode = overwrite ? NB_ATTN_GRAD_STORE : NB_ATTN_GRAD_ADD;
    float *delta = nb_tape_alloc_f32(t, w.BH * w.L, 0), *scratch = NULL;
    if (!delta) return NB_ERR_OUT_OF_MEMORY;
    int64_t ns = nb_attn_cuda_dq_scratch(t->dev, t->precision, &w.q, &w.k, &w.v, &w.o, &gw.o,
                                         &gw.q, &gw.k, &gw.v, mode, w.BH, w.L, w.L, w.d);
    if (ns && !(scratch = nb_tape_alloc_f32(t, ns, 0))) return NB_ERR_OUT_OF_MEMORY;
    return nb_attn_cuda_backward_v(t->dev, t->precision, &w.q, &w.k, &w.v, &w.o, &gw.o,
                                   op->saved[0], delta, &gw.q, &gw.k, &gw.v, mode, scratch, w.BH,
                                   w.L, w.L, w.d);
}

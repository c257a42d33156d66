/* Encodings on CUDA: kernel sources (one per configuration: dimensions, features and levels are
 * compile-time constants, so the corner and feature loops unroll): src/nn/encoding/kernels/
 * encoding.cu with the configuration as defines, compiled through nb_jit_cuda_kernel (NVRTC +
 * disk cache) on first use, launched on the device's main stream.
 *
 * Grids: one thread per (point, level), i = b * L + l, so a warp's 32 threads write 32 * F
 * consecutive floats of feat[b, l * F + f] (coalesced) and read the same few x. The level table
 * travels in the parameter block and is copied to shared memory (threads of a warp index it by
 * different levels). Parameter gradients are float atomics into the level's table (float2 /
 * float4 vector atomics on sm_90 when F is even / a multiple of 4). dL/dx: one thread per point.
 * Frequency: one thread per (point, dimension, frequency) forward, per (point, dimension) back.
 * Forward kernels come in two flavours: f32 features (nb_*_fwd) and f16 (nb_*_fwd_h).
 * nb_enc_cuda_mlp_defines (end of file): the configuration of the grid scatter compiled into the
 * fused MLP kernels (kernels/grid_scatter.cuh; mlp_bwd_rc_enc, mlp_train_rc_enc_*:
 * nb_encoding_backward_mlp / nb_encoding_mlp_train). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "jit/cuda_files.h"
#include "nabla/alloc.h"
#include "nn/encoding/encoding_internal.h"

typedef struct nb_cu_level {
    int32_t side[3];
    int32_t hashed;
    uint32_t mask;    /* entries - 1 for hashed levels */
    uint32_t offset;  /* first float of the level */
} nb_cu_level;

typedef struct nb_cu_enc_args {
    const float *params, *x, *dfeat;
    void *out;
    float *grads, *dx;
    int64_t n;
    nb_cu_level lv[NB_ENCODING_MAX_LEVELS];
} nb_cu_enc_args;

/* Static shared memory for the coarse-level gradients (48 KiB per block, less the level table). */
#define NB_ENC_SMEM_FLOATS 11776

/* The prefix of levels whose gradients fit in shared memory: *levels of them, *floats floats.
 * 0 levels for the frequency encoding (docs/NN.md: H100 0.353 -> 0.171 ms at 2^18 points). */
static void nb_enc_smem_levels(const nb_encoding *e, int *levels, int *floats) {
    *levels = 0;
    *floats = 0;
    if (e->cfg.kind == NB_ENCODING_FREQUENCY) return;
    int64_t n = 0;
    int l = 0;
    while (l < e->n_levels && n + e->level[l].entries * e->cfg.n_features <= NB_ENC_SMEM_FLOATS)
        n += e->level[l++].entries * e->cfg.n_features;
    *levels = l;
    *floats = (int)n;
}

/* Levels per warp of the warp-aggregated backward: 4 (8 points per warp; 16 and 32 points per
 * warp were an unmeasured experiment, removed). Paired 16-byte gradient reductions in the plain
 * and shared-memory backward kernels and the fused MLP scatter for 2-D grids of 2 features
 * (measured on the H100: the uniform-sample backward 0.171 -> 0.145 ms, docs/PERF.md). */
#define NB_ENC_AGG_LPW 4

#define NB_ENC_CU "src/nn/encoding/kernels/encoding.cu"

static nb_status nb_enc_cuda_prepare(nb_encoding *e) {
    if (e->k_fwd) return NB_OK;
    /* the configuration as the defines of NB_ENC_CU (its top lists them) */
    int freq = e->cfg.kind == NB_ENCODING_FREQUENCY;
    int sl, sf;
    nb_enc_smem_levels(e, &sl, &sf);
    const int v[7] = {e->cfg.n_dims, freq ? 1 : e->cfg.n_features, freq ? 1 : e->n_levels,
                      freq ? e->cfg.n_frequencies : 1, sl, sf > 0 ? sf : 1, NB_ENC_AGG_LPW};
    static const char *const names[7] = {"NB_D", "NB_F", "NB_L", "NB_NFREQ", "NB_SMEM_LEVELS",
                                         "NB_SMEM_FLOATS", "NB_AGG_LPW"};
    char buf[7][32];
    const char *defs[8];
    for (int i = 0; i < 7; i++) {
        snprintf(buf[i], sizeof buf[i], "%s=%d", names[i], v[i]);
        defs[i] = buf[i];
    }
    defs[7] = NULL;
    if (e->cfg.kind == NB_ENCODING_FREQUENCY) {
        NB_TRY(nb_jit_cuda_kernel(e->dev, NB_ENC_CU, defs, "nb_freq_bwd", &e->k_bwd_dx));
        NB_TRY(nb_jit_cuda_kernel(e->dev, NB_ENC_CU, defs, "nb_freq_fwd_h", &e->k_fwd_h));
        return nb_jit_cuda_kernel(e->dev, NB_ENC_CU, defs, "nb_freq_fwd", &e->k_fwd);
    }
    NB_TRY(nb_jit_cuda_kernel(e->dev, NB_ENC_CU, defs, "nb_grid_bwd", &e->k_bwd));
    e->k_bwd_smem = e->k_bwd_agg = NULL;
    if (sl > 0) NB_TRY(nb_jit_cuda_kernel(e->dev, NB_ENC_CU, defs, "nb_grid_bwd_smem", &e->k_bwd_smem));
    /* the warp-aggregated kernel: when the caller says batches are spatially ordered
     * (nb_encoding_set_spatially_ordered; docs/NN.md: faster on such batches, slower on random) */
    if (e->spatially_ordered && e->n_levels % NB_ENC_AGG_LPW == 0)
        NB_TRY(nb_jit_cuda_kernel(e->dev, NB_ENC_CU, defs, "nb_grid_bwd_agg", &e->k_bwd_agg));
    NB_TRY(nb_jit_cuda_kernel(e->dev, NB_ENC_CU, defs, "nb_grid_bwd_dx", &e->k_bwd_dx));
    NB_TRY(nb_jit_cuda_kernel(e->dev, NB_ENC_CU, defs, "nb_grid_fwd_h", &e->k_fwd_h));
    return nb_jit_cuda_kernel(e->dev, NB_ENC_CU, defs, "nb_grid_fwd", &e->k_fwd);
}

void nb_enc_cuda_release(nb_encoding *e) {
    /* Kernels belong to the JIT's table (freed by nb_jit_forget_all); the fused MLP's defines
     * are rebuilt on the next use (spatially_ordered may have changed) */
    e->mlp_defs[0] = NULL;
    e->k_fwd = e->k_fwd_h = e->k_bwd = e->k_bwd_smem = e->k_bwd_agg = e->k_bwd_dx = NULL;
}

static void nb_enc_cuda_args(const nb_encoding *e, nb_cu_enc_args *a) {
    memset(a, 0, sizeof *a);
    for (int l = 0; l < e->n_levels; l++) {
        const nb_enc_level *lv = &e->level[l];
        for (int d = 0; d < 3; d++) a->lv[l].side[d] = lv->side[d];
        a->lv[l].hashed = lv->hashed;
        a->lv[l].mask = lv->hashed ? (uint32_t)(lv->entries - 1) : 0;
        a->lv[l].offset = (uint32_t)lv->offset;
    }
}

nb_status nb_enc_cuda_forward(nb_encoding *e, const float *params, const float *x, void *feat,
                              int feat_f16, int64_t B) {
    NB_TRY(nb_enc_cuda_prepare(e));
    nb_cu_enc_args a;
    nb_enc_cuda_args(e, &a);
    a.params = params;
    a.x = x;
    a.out = feat;
    if (e->cfg.kind == NB_ENCODING_FREQUENCY)
        a.n = B * e->cfg.n_dims * e->cfg.n_frequencies;
    else
        a.n = B * e->n_levels;
    return nb_jit_launch_cuda(feat_f16 ? e->k_fwd_h : e->k_fwd, &a, sizeof a, a.n, NULL);
}

nb_status nb_enc_cuda_backward(nb_encoding *e, const float *params, const float *x,
                               const float *dfeat, float *grads, float *dx, int64_t B) {
    NB_TRY(nb_enc_cuda_prepare(e));
    nb_cu_enc_args a;
    nb_enc_cuda_args(e, &a);
    a.params = params;
    a.x = x;
    a.dfeat = dfeat;
    a.grads = grads;
    a.dx = dx;
    if (e->cfg.kind == NB_ENCODING_FREQUENCY) {
        a.n = B * e->cfg.n_dims;
        return nb_jit_launch_cuda(e->k_bwd_dx, &a, sizeof a, a.n, NULL);
    }
    if (grads) {
        a.n = B * e->n_levels;
        nb_jit_kernel *big = e->k_bwd_agg ? e->k_bwd_agg : e->k_bwd_smem;
        if (big) { /* two blocks of 1024 threads per SM, each flushing its sums once */
            int64_t blocks = (a.n + 1023) / 1024, cap = 2 * (int64_t)nb_device_get_info(e->dev)->multiprocessors;
            if (blocks > cap) blocks = cap;
            const unsigned grid[3] = {(unsigned)(blocks > 0 ? blocks : 1), 1, 1}, block[3] = {1024, 1, 1};
            NB_TRY(nb_jit_launch_cuda_grid(big, &a, sizeof a, grid, block, NULL));
        } else {
            NB_TRY(nb_jit_launch_cuda(e->k_bwd, &a, sizeof a, a.n, NULL));
        }
    }
    if (dx) {
        a.n = B;
        NB_TRY(nb_jit_launch_cuda(e->k_bwd_dx, &a, sizeof a, a.n, NULL));
    }
    return NB_OK;
}

/* ---- the grid backward fused into the MLP backward (nb_encoding_backward_mlp) --------------
 * Device code: src/nn/encoding/kernels/grid_scatter.cuh, compiled into the fused MLP kernels
 * (src/nn/mlp/kernels/mlp.cu with ENC=1) with this encoding's configuration and level tables as
 * defines. 2-D grids of 2 features. */

/* "NAME=v0,v1,..." of table t (0 vertices along x, 1 along y, 2 first float, 3 hash mask) of
 * every level into buf at *n; 0 if it does not fit. */
static int nb_enc_table_define(const nb_encoding *e, int t, char *buf, size_t cap, size_t *n) {
    static const char *const names[4] = {"ENC_SX", "ENC_SY", "ENC_OFF", "ENC_MASK"};
    int k = snprintf(buf + *n, cap - *n, "%s=", names[t]);
    for (int l = 0; k > 0 && (size_t)k < cap - *n && l < e->n_levels; l++) {
        const nb_enc_level *lv = &e->level[l];
        unsigned v = t == 0 ? (unsigned)lv->side[0] : t == 1 ? (unsigned)lv->side[1]
                   : t == 2 ? (unsigned)lv->offset : (lv->hashed ? (unsigned)(lv->entries - 1) : 0u);
        k += snprintf(buf + *n + k, cap - *n - (size_t)k, "%s%u", l ? "," : "", v);
    }
    if (k < 0 || (size_t)k >= cap - *n) return 0;
    *n += (size_t)k + 1;
    return 1;
}

nb_status nb_enc_cuda_mlp_defines(nb_encoding *e, const char *const **defs, int *smem_floats) {
    *defs = NULL;
    *smem_floats = 0;
    if (e->cfg.kind == NB_ENCODING_FREQUENCY || e->cfg.n_dims != 2 || e->cfg.n_features != 2)
        return nb_error(NB_ERR_UNSUPPORTED, "nb_encoding_backward_mlp: the fused CUDA path takes 2-D grids of 2 features");
    int sl, sf;
    nb_enc_smem_levels(e, &sl, &sf);
    sf &= ~1; /* the flush works on pairs; both features of an entry are adjacent, so sf is even */
    if (!e->mlp_defs[0]) {
        char *b = e->mlp_def_buf;
        size_t cap = sizeof e->mlp_def_buf, n = 0;
        int k = snprintf(b, cap, "ENC_L=%d", e->n_levels);
        n += (size_t)k + 1;
        k = snprintf(b + n, cap - n, "ENC_SMEM_LEVELS=%d", sl);
        n += (size_t)k + 1;
        k = snprintf(b + n, cap - n, "ENC_SMEM_FLOATS=%d", sf);
        n += (size_t)k + 1;
        k = snprintf(b + n, cap - n, "ENC_AGG=%d", e->spatially_ordered); /* warp aggregation: docs/PERF.md */
        n += (size_t)k + 1;
        int ok = n < cap;
        for (int t = 0; t < 4 && ok; t++) ok = nb_enc_table_define(e, t, b, cap, &n);
        if (!ok) return nb_error(NB_ERR_INTERNAL, "nb_encoding_backward_mlp: level tables do not fit the define buffer");
        const char *p = b;
        for (int d = 0; d < NB_ENC_MLP_DEFS; d++, p += strlen(p) + 1) e->mlp_defs[d] = p;
        e->mlp_defs[NB_ENC_MLP_DEFS] = NULL;
    }
    *defs = e->mlp_defs;
    *smem_floats = sf;
    return NB_OK;
}

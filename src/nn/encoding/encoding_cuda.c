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
 * nb_enc_cuda_mlp_source (end of file): the grid scatter as device code for the fused MLP kernels
 * (mlp_bwd_rc_enc, mlp_train_rc_enc_*: nb_encoding_backward_mlp / nb_encoding_mlp_train). */
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
    /* Kernels belong to the JIT's table (freed by nb_jit_forget_all); only the source is ours. */
    if (e->mlp_src) nb_free(e->mlp_src, e->mlp_src_cap);
    e->mlp_src = NULL;
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
 * CUDA device code appended to the fused MLP's source (mlp_bwd_rc_enc): the MLP's input
 * gradient of row r, features (2l, 2l+1) = level l, goes straight into the level's parameter
 * gradients (the same atomics as nb_grid_bwd_smem, coarse levels summed in the kernel's shared
 * memory and flushed once per block), so dL/dfeatures is never stored. 2-D grids of 2 features. */
static const char nb_enc_mlp_body[] =
    "__device__ __forceinline__ void enc_cell(float x, int side, unsigned &cell, float &frac) {\n"
    "    float xc = x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x);\n"
    "    float pos = __fmul_rn(xc, (float)(side - 1));\n"
    "    float fl = floorf(pos);\n"
    "    if (fl > (float)(side - 2)) fl = (float)(side - 2);\n"
    "    cell = (unsigned)fl;\n"
    "    frac = pos - fl;\n"
    "}\n"
    "__device__ __forceinline__ unsigned enc_index(int l, unsigned gx, unsigned gy) {\n"
    "    const unsigned m = enc_mask[l];\n"
    "    return m ? ((gx ^ (gy * 2654435761u)) & m) : gx + (unsigned)enc_sx[l] * gy;\n"
    "}\n"
    "__device__ __forceinline__ void enc_red2(float *p, float a, float b) {\n"
    "#if __CUDA_ARCH__ >= 900\n"
    "    asm volatile(\"red.global.add.v2.f32 [%0], {%1, %2};\" :: \"l\"(p), \"f\"(a), \"f\"(b) : \"memory\");\n"
    "#else\n"
    "    atomicAdd(p, a); atomicAdd(p + 1, b);\n"
    "#endif\n"
    "}\n"
    /* One entry's update (v0, v1) at float a (shared memory when smem). ENC_AGG (spatially
     * ordered batches): first merged over the lanes that differ in bits 2..4, which the fused MLP
     * backward gives the same level and neighbouring rows; the merged sum goes out once. Every
     * lane of the warp must call it (shuffles). */
    "__device__ __forceinline__ void enc_put(float *grads, float *s_g, bool smem, unsigned a, float v0, float v1,\n"
    "                                        bool alive) {\n"
    "#if ENC_AGG\n"
    "    const unsigned lane = threadIdx.x & 31u;\n"
    "    #pragma unroll\n"
    "    for (unsigned o = 4; o <= 16; o <<= 1) {\n"
    "        const unsigned pa = __shfl_xor_sync(0xffffffffu, a, o);\n"
    "        const bool pal = __shfl_xor_sync(0xffffffffu, alive ? 1 : 0, o) != 0;\n"
    "        const float p0 = __shfl_xor_sync(0xffffffffu, v0, o), p1 = __shfl_xor_sync(0xffffffffu, v1, o);\n"
    "        const bool merge = alive && pal && pa == a;\n"
    "        if (merge && !(lane & o)) { v0 += p0; v1 += p1; }\n"
    "        if (merge && (lane & o)) alive = false;\n"
    "    }\n"
    "#endif\n"
    "    if (!alive) return;\n"
    "    if (smem) { atomicAdd(s_g + a, v0); atomicAdd(s_g + a + 1, v1); }\n"
    "    else enc_red2(grads + a, v0, v1);\n"
    "}\n"
    /* dL/d(features 2l, 2l+1) of row `row` = (d0, d1): added to the 4 corners of its cell. Every
     * lane calls it; inactive ones (active = false) add nothing. */
    "__device__ __forceinline__ void enc_scatter(const float *x, float *grads, float *s_g, long long row, int l,\n"
    "                                            float d0, float d1, bool active) {\n"
    "#if !ENC_AGG\n"
    "    if (!active) return;\n"
    "#endif\n"
    "    const float2 p = active ? __ldg((const float2 *)(x + 2 * row)) : make_float2(0.0f, 0.0f);\n"
    "    unsigned cx, cy; float fx, fy;\n"
    "    enc_cell(p.x, enc_sx[l], cx, fx);\n"
    "    enc_cell(p.y, enc_sy[l], cy, fy);\n"
    "    const unsigned off = enc_off[l];\n"
    "    const bool smem = l < ENC_SMEM_LEVELS;\n"
    "    #pragma unroll\n"
    "    for (int k = 0; k < 2; k++) {\n"
    "        const float wy = k ? fy : 1.0f - fy, w0 = (1.0f - fx) * wy, w1 = fx * wy;\n"
    "        const unsigned a0 = off + enc_index(l, cx, cy + k) * 2u, a1 = off + enc_index(l, cx + 1, cy + k) * 2u;\n"
    "#if __CUDA_ARCH__ >= 900 && !ENC_AGG\n"
    "        if (!smem && a1 == a0 + 2u && (a0 & 3u) == 0u) {\n"
    "            asm volatile(\"red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\" :: \"l\"(grads + a0), \"f\"(w0 * d0),\n"
    "                         \"f\"(w0 * d1), \"f\"(w1 * d0), \"f\"(w1 * d1) : \"memory\");\n"
    "            continue;\n"
    "        }\n"
    "#endif\n"
    "        enc_put(grads, s_g, smem, a0, w0 * d0, w0 * d1, active);\n"
    "        enc_put(grads, s_g, smem, a1, w1 * d0, w1 * d1, active);\n"
    "    }\n"
    "}\n"
    "__device__ __forceinline__ void enc_smem_zero(float *s_g) {\n"
    "    for (int j = threadIdx.x; j < ENC_SMEM_FLOATS; j += blockDim.x) s_g[j] = 0.0f;\n"
    "}\n"
    "__device__ __forceinline__ void enc_smem_flush(float *grads, const float *s_g) {\n"
    "    for (int j = 2 * threadIdx.x; j + 1 < ENC_SMEM_FLOATS; j += 2 * blockDim.x) {\n"
    "        const float p = s_g[j], q = s_g[j + 1];\n"
    "        if (p != 0.0f || q != 0.0f) enc_red2(grads + j, p, q);\n"
    "    }\n"
    "}\n";

#define NB_ENC_MLP_TABLES 4096

nb_status nb_enc_cuda_mlp_source(nb_encoding *e, const char **src, int *smem_floats) {
    *src = NULL;
    *smem_floats = 0;
    if (e->cfg.kind == NB_ENCODING_FREQUENCY || e->cfg.n_dims != 2 || e->cfg.n_features != 2)
        return nb_error(NB_ERR_UNSUPPORTED, "nb_encoding_backward_mlp: the fused CUDA path takes 2-D grids of 2 features");
    int sl, sf;
    nb_enc_smem_levels(e, &sl, &sf);
    sf &= ~1; /* the flush works on pairs; both features of an entry are adjacent, so sf is even */
    if (!e->mlp_src) {
        size_t cap = sizeof nb_enc_mlp_body + NB_ENC_MLP_TABLES;
        char *s = nb_alloc(cap, 16);
        if (!s) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_encoding_backward_mlp: out of host memory");
        int n = snprintf(s, cap, "// nabla grid scatter (fused MLP backward)\n#define ENC_L %d\n#define ENC_SMEM_LEVELS %d\n"
                                 "#define ENC_SMEM_FLOATS %d\n#define ENC_AGG %d\n",
                         e->n_levels, sl, sf, e->spatially_ordered); /* warp aggregation: docs/PERF.md */
        const char *names[4] = {"enc_sx", "enc_sy", "enc_off", "enc_mask"};
        for (int t = 0; t < 4 && n > 0 && (size_t)n < cap; t++) {
            n += snprintf(s + n, cap - (size_t)n, "__constant__ %s %s[%d] = {", t < 2 ? "int" : "unsigned", names[t],
                          e->n_levels);
            for (int l = 0; l < e->n_levels && (size_t)n < cap; l++) {
                const nb_enc_level *lv = &e->level[l];
                unsigned v = t == 0 ? (unsigned)lv->side[0] : t == 1 ? (unsigned)lv->side[1]
                           : t == 2 ? (unsigned)lv->offset : (lv->hashed ? (unsigned)(lv->entries - 1) : 0u);
                n += snprintf(s + n, cap - (size_t)n, "%s%u", l ? ", " : "", v);
            }
            if ((size_t)n < cap) n += snprintf(s + n, cap - (size_t)n, "};\n");
        }
        if (n < 0 || (size_t)n + sizeof nb_enc_mlp_body > cap) {
            nb_free(s, cap);
            return nb_error(NB_ERR_INTERNAL, "nb_encoding_backward_mlp: level tables do not fit the source buffer");
        }
        memcpy(s + n, nb_enc_mlp_body, sizeof nb_enc_mlp_body);
        e->mlp_src = s;
        e->mlp_src_cap = cap;
    }
    *src = e->mlp_src;
    *smem_floats = sf;
    return NB_OK;
}

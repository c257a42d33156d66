/* Encodings on CUDA: kernel sources (one per configuration: dimensions, features and levels are
 * compile-time constants, so the corner and feature loops unroll), compiled through the JIT
 * (NVRTC + disk cache) on first use, launched on the device's main stream.
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

static const char nb_enc_cuda_body[] =
    "struct Lv { int side[3]; int hashed; unsigned mask; unsigned offset; };\n"
    "struct Args { const float *params, *x, *dfeat; void *out; float *grads, *dx; long long n;\n"
    "              Lv lv[32]; };\n"
    "#define PI_F 3.14159265358979323846f\n"
    "__device__ __forceinline__ unsigned grid_index(const Lv &lv, const unsigned g[3]) {\n"
    "    if (!lv.hashed) {\n"
    "        unsigned i = g[0] + (unsigned)lv.side[0] * g[1];\n"
    "        if (NB_D == 3) i += (unsigned)lv.side[0] * (unsigned)lv.side[1] * g[2];\n"
    "        return i;\n"
    "    }\n"
    "    unsigned h = g[0] ^ (g[1] * 2654435761u);\n"
    "    if (NB_D == 3) h ^= g[2] * 805459861u;\n"
    "    return h & lv.mask;\n"
    "}\n"
    "__device__ __forceinline__ void grid_cell(float x, int side, unsigned &cell, float &frac) {\n"
    "    float xc = x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x);\n"
    "    float pos = __fmul_rn(xc, (float)(side - 1));\n"
    "    float fl = floorf(pos);\n"
    "    if (fl > (float)(side - 2)) fl = (float)(side - 2);\n"
    "    cell = (unsigned)fl;\n"
    "    frac = pos - fl;\n"
    "}\n"
    "__device__ __forceinline__ void load_feat(const float *p, float v[NB_F]) {\n"
    "#if NB_F % 4 == 0\n"
    "    #pragma unroll\n"
    "    for (int f = 0; f < NB_F; f += 4) { float4 q = __ldg((const float4 *)(p + f));\n"
    "        v[f] = q.x; v[f + 1] = q.y; v[f + 2] = q.z; v[f + 3] = q.w; }\n"
    "#elif NB_F % 2 == 0\n"
    "    #pragma unroll\n"
    "    for (int f = 0; f < NB_F; f += 2) { float2 q = __ldg((const float2 *)(p + f));\n"
    "        v[f] = q.x; v[f + 1] = q.y; }\n"
    "#else\n"
    "    #pragma unroll\n"
    "    for (int f = 0; f < NB_F; f++) v[f] = __ldg(p + f);\n"
    "#endif\n"
    "}\n"
    "__device__ __forceinline__ void add_feat(float *p, const float v[NB_F]) {\n"
    /* sm_90 vector reductions (no return value: red, not atom) */
    "#if __CUDA_ARCH__ >= 900 && NB_F % 4 == 0\n"
    "    #pragma unroll\n"
    "    for (int f = 0; f < NB_F; f += 4)\n"
    "        asm volatile(\"red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\" :: \"l\"(p + f), \"f\"(v[f]),\n"
    "                     \"f\"(v[f + 1]), \"f\"(v[f + 2]), \"f\"(v[f + 3]) : \"memory\");\n"
    "#elif __CUDA_ARCH__ >= 900 && NB_F % 2 == 0\n"
    "    #pragma unroll\n"
    "    for (int f = 0; f < NB_F; f += 2)\n"
    "        asm volatile(\"red.global.add.v2.f32 [%0], {%1, %2};\" :: \"l\"(p + f), \"f\"(v[f]), \"f\"(v[f + 1]) : \"memory\");\n"
    "#else\n"
    "    #pragma unroll\n"
    "    for (int f = 0; f < NB_F; f++) atomicAdd(p + f, v[f]);\n"
    "#endif\n"
    "}\n"
    /* The gradient of one point at all corners of its cell (2-D grids of 2 features): the two corners
     * of a row differ in x only; when their entries are adjacent and the pair is 16-byte
     * aligned (hashed cells with even x, dense cells at even indices: about half), one 16-byte
     * vector reduction adds both (red.v4), else two 8-byte ones. Levels below `smem_levels` go
     * to the shared-memory sums s_g instead. */
    "#if NB_D == 2 && NB_F == 2\n"
    "__device__ __forceinline__ void add_cell2(float *grads, float *s_g, bool to_smem, const Lv &lv,\n"
    "                                          const unsigned cell[3], const float fr[3], const float dy[2]) {\n"
    "    #pragma unroll\n"
    "    for (int cy = 0; cy < 2; cy++) {\n"
    "        const float wy = cy ? fr[1] : 1.0f - fr[1], w0 = (1.0f - fr[0]) * wy, w1 = fr[0] * wy;\n"
    "        const unsigned g0[3] = {cell[0], cell[1] + cy, 0}, g1[3] = {cell[0] + 1, cell[1] + cy, 0};\n"
    "        const unsigned a0 = lv.offset + grid_index(lv, g0) * 2u, a1 = lv.offset + grid_index(lv, g1) * 2u;\n"
    "        const float v0[2] = {w0 * dy[0], w0 * dy[1]}, v1[2] = {w1 * dy[0], w1 * dy[1]};\n"
    "        if (to_smem) {\n"
    "            atomicAdd(s_g + a0, v0[0]); atomicAdd(s_g + a0 + 1, v0[1]);\n"
    "            atomicAdd(s_g + a1, v1[0]); atomicAdd(s_g + a1 + 1, v1[1]);\n"
    "            continue;\n"
    "        }\n"
    "#if __CUDA_ARCH__ >= 900\n"
    "        if (a1 == a0 + 2u && (a0 & 3u) == 0u) {\n"
    "            asm volatile(\"red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\" :: \"l\"(grads + a0), \"f\"(v0[0]),\n"
    "                         \"f\"(v0[1]), \"f\"(v1[0]), \"f\"(v1[1]) : \"memory\");\n"
    "            continue;\n"
    "        }\n"
    "#endif\n"
    "        add_feat(grads + a0, v0);\n"
    "        add_feat(grads + a1, v1);\n"
    "    }\n"
    "}\n"
    "#endif\n"
    "#define LOAD_LEVELS __shared__ Lv s_lv[NB_L > 0 ? NB_L : 1];\\\n"
    "    for (int t = threadIdx.x; t < NB_L; t += blockDim.x) s_lv[t] = a.lv[t];\\\n"
    "    __syncthreads();\n"
    "#define GRID_LOOP(n) for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < (unsigned)(n); \\\n"
    "    i += gridDim.x * blockDim.x)\n"
    /* forward: thread per (point, level); features stored as f32 or f16 */
    "__device__ __forceinline__ unsigned short f2h(float f) {\n"
    "    unsigned short r; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(r) : \"f\"(f)); return r;\n"
    "}\n"
    "template <bool H> __device__ __forceinline__ void store_feat(void *out, size_t at, const float *v, int n) {\n"
    "    if (H) {\n"
    "        unsigned short *o = (unsigned short *)out + at;\n"
    "        if (n % 2 == 0 && at % 2 == 0) {\n"
    "            for (int f = 0; f < n; f += 2)\n"
    "                *(unsigned *)(o + f) = (unsigned)f2h(v[f]) | ((unsigned)f2h(v[f + 1]) << 16);\n"
    "        } else {\n"
    "            for (int f = 0; f < n; f++) o[f] = f2h(v[f]);\n"
    "        }\n"
    "    } else {\n"
    "        float *o = (float *)out + at;\n"
    "        for (int f = 0; f < n; f++) o[f] = v[f];\n"
    "    }\n"
    "}\n"
    "template <bool H> __device__ __forceinline__ void grid_fwd(const Args &a) {\n"
    "    LOAD_LEVELS\n"
    "    GRID_LOOP(a.n) {\n"
    "        unsigned b = i / NB_L, l = i - b * NB_L;\n"
    "        const Lv lv = s_lv[l];\n"
    "        unsigned cell[3] = {0, 0, 0}; float fr[3] = {0, 0, 0};\n"
    "        #pragma unroll\n"
    "        for (int d = 0; d < NB_D; d++) grid_cell(__ldg(a.x + b * NB_D + d), lv.side[d], cell[d], fr[d]);\n"
    "        float acc[NB_F];\n"
    "        #pragma unroll\n"
    "        for (int f = 0; f < NB_F; f++) acc[f] = 0.0f;\n"
    "        #pragma unroll\n"
    "        for (int c = 0; c < (1 << NB_D); c++) {\n"
    "            unsigned g[3] = {0, 0, 0}; float w = 1.0f;\n"
    "            #pragma unroll\n"
    "            for (int d = 0; d < NB_D; d++) { int up = (c >> d) & 1; g[d] = cell[d] + up;\n"
    "                w *= up ? fr[d] : 1.0f - fr[d]; }\n"
    "            float v[NB_F];\n"
    "            load_feat(a.params + lv.offset + grid_index(lv, g) * NB_F, v);\n"
    "            #pragma unroll\n"
    "            for (int f = 0; f < NB_F; f++) acc[f] += w * v[f];\n"
    "        }\n"
    "        store_feat<H>(a.out, (size_t)i * NB_F, acc, NB_F);\n"
    "    }\n"
    "}\n"
    "extern \"C\" __global__ void nb_grid_fwd(const Args a) { grid_fwd<false>(a); }\n"
    "extern \"C\" __global__ void nb_grid_fwd_h(const Args a) { grid_fwd<true>(a); }\n"
    /* backward to the parameters: thread per (point, level), atomics */
    "extern \"C\" __global__ void nb_grid_bwd(const Args a) {\n"
    "    LOAD_LEVELS\n"
    "    GRID_LOOP(a.n) {\n"
    "        unsigned b = i / NB_L, l = i - b * NB_L;\n"
    "        const Lv lv = s_lv[l];\n"
    "        float dy[NB_F];\n"
    "        load_feat(a.dfeat + (size_t)i * NB_F, dy);\n"
    "        unsigned cell[3] = {0, 0, 0}; float fr[3] = {0, 0, 0};\n"
    "        #pragma unroll\n"
    "        for (int d = 0; d < NB_D; d++) grid_cell(__ldg(a.x + b * NB_D + d), lv.side[d], cell[d], fr[d]);\n"
    "#if NB_D == 2 && NB_F == 2\n"
    "        add_cell2(a.grads, (float *)0, false, lv, cell, fr, dy);\n"
    "#else\n"
    "        #pragma unroll\n"
    "        for (int c = 0; c < (1 << NB_D); c++) {\n"
    "            unsigned g[3] = {0, 0, 0}; float w = 1.0f;\n"
    "            #pragma unroll\n"
    "            for (int d = 0; d < NB_D; d++) { int up = (c >> d) & 1; g[d] = cell[d] + up;\n"
    "                w *= up ? fr[d] : 1.0f - fr[d]; }\n"
    "            float v[NB_F];\n"
    "            #pragma unroll\n"
    "            for (int f = 0; f < NB_F; f++) v[f] = w * dy[f];\n"
    "            add_feat(a.grads + lv.offset + grid_index(lv, g) * NB_F, v);\n"
    "        }\n"
    "#endif\n"
    "    }\n"
    "}\n"
    /* backward to the parameters with the coarse levels (levels 0 .. NB_SMEM_LEVELS-1, the first
     * NB_SMEM_FLOATS floats of the parameter vector) accumulated in shared memory: thousands of
     * points hit each of their few vertices, and global atomics on one address serialise in L2.
     * Launched with few, large blocks (grid-stride), each flushing its partial sums once. */
    "#if NB_SMEM_LEVELS > 0\n"
    "extern \"C\" __global__ void __launch_bounds__(1024) nb_grid_bwd_smem(const Args a) {\n"
    "    LOAD_LEVELS\n"
    "    __shared__ float s_g[NB_SMEM_FLOATS];\n"
    "    for (int j = threadIdx.x; j < NB_SMEM_FLOATS; j += blockDim.x) s_g[j] = 0.0f;\n"
    "    __syncthreads();\n"
    "    GRID_LOOP(a.n) {\n"
    "        unsigned b = i / NB_L, l = i - b * NB_L;\n"
    "        const Lv lv = s_lv[l];\n"
    "        float dy[NB_F];\n"
    "        load_feat(a.dfeat + (size_t)i * NB_F, dy);\n"
    "        unsigned cell[3] = {0, 0, 0}; float fr[3] = {0, 0, 0};\n"
    "        #pragma unroll\n"
    "        for (int d = 0; d < NB_D; d++) grid_cell(__ldg(a.x + b * NB_D + d), lv.side[d], cell[d], fr[d]);\n"
    "#if NB_D == 2 && NB_F == 2\n"
    "        add_cell2(a.grads, s_g, l < NB_SMEM_LEVELS, lv, cell, fr, dy);\n"
    "#else\n"
    "        #pragma unroll\n"
    "        for (int c = 0; c < (1 << NB_D); c++) {\n"
    "            unsigned g[3] = {0, 0, 0}; float w = 1.0f;\n"
    "            #pragma unroll\n"
    "            for (int d = 0; d < NB_D; d++) { int up = (c >> d) & 1; g[d] = cell[d] + up;\n"
    "                w *= up ? fr[d] : 1.0f - fr[d]; }\n"
    "            float v[NB_F];\n"
    "            #pragma unroll\n"
    "            for (int f = 0; f < NB_F; f++) v[f] = w * dy[f];\n"
    "            unsigned at = lv.offset + grid_index(lv, g) * NB_F;\n"
    "            if (l < NB_SMEM_LEVELS) {\n"
    "                #pragma unroll\n"
    "                for (int f = 0; f < NB_F; f++) atomicAdd(s_g + at + f, v[f]);\n"
    "            } else {\n"
    "                add_feat(a.grads + at, v);\n"
    "            }\n"
    "        }\n"
    "#endif\n"
    "    }\n"
    "    __syncthreads();\n"
    "    for (int j = 2 * threadIdx.x; j < NB_SMEM_FLOATS; j += 2 * blockDim.x) {\n"
    "        float p = s_g[j], q = j + 1 < NB_SMEM_FLOATS ? s_g[j + 1] : 0.0f;\n"
    "        if (p == 0.0f && q == 0.0f) continue;\n"
    "#if __CUDA_ARCH__ >= 900\n"
    "        if (j + 1 < NB_SMEM_FLOATS) {\n"
    "            asm volatile(\"red.global.add.v2.f32 [%0], {%1, %2};\" :: \"l\"(a.grads + j), \"f\"(p), \"f\"(q) : \"memory\");\n"
    "            continue;\n"
    "        }\n"
    "#endif\n"
    "        atomicAdd(a.grads + j, p);\n"
    "        if (j + 1 < NB_SMEM_FLOATS) atomicAdd(a.grads + j + 1, q);\n"
    "    }\n"
    "}\n"
    "#endif\n"
    /* backward to the parameters, warp-aggregated: a warp takes 32 / LPW consecutive points x
     * LPW consecutive levels (lane = LPW * point + level; LPW = NB_AGG_LPW, 4 by default), so the
     * lanes of one level hold neighbouring points when the batch is spatially ordered
     * (nb_image_sample_stratified). Before each corner's update, shuffle rounds (lane distance
     * LPW, 2 LPW, .., 16) merge the values of lanes that hit the same parameter into one lane;
     * the others skip their atomic. Each value reaches exactly one surviving lane (a lane is
     * either sender or receiver per round). Coarse levels also go through shared memory as in
     * nb_grid_bwd_smem. */
    "#if NB_L % NB_AGG_LPW == 0\n"
    "extern \"C\" __global__ void __launch_bounds__(1024) nb_grid_bwd_agg(const Args a) {\n"
    "    LOAD_LEVELS\n"
    "#if NB_SMEM_LEVELS > 0\n"
    "    __shared__ float s_g[NB_SMEM_FLOATS];\n"
    "    for (int j = threadIdx.x; j < NB_SMEM_FLOATS; j += blockDim.x) s_g[j] = 0.0f;\n"
    "    __syncthreads();\n"
    "#endif\n"
    "    const unsigned lane = threadIdx.x & 31u, B = (unsigned)(a.n / NB_L);\n"
    "    const unsigned PPW = 32 / NB_AGG_LPW, groups = NB_L / NB_AGG_LPW, n_warps = ((B + PPW - 1) / PPW) * groups;\n"
    "    for (unsigned wi = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; wi < n_warps;\n"
    "         wi += (gridDim.x * blockDim.x) >> 5) {\n"
    "        unsigned m = wi % groups, b = (wi / groups) * PPW + lane / NB_AGG_LPW;\n"
    "        unsigned l = NB_AGG_LPW * m + lane % NB_AGG_LPW;\n"
    "        bool active = b < B;\n"
    "        const Lv lv = s_lv[l];\n"
    "        float dy[NB_F];\n"
    "        unsigned cell[3] = {0, 0, 0}; float fr[3] = {0, 0, 0};\n"
    "        if (active) {\n"
    "            load_feat(a.dfeat + ((size_t)b * NB_L + l) * NB_F, dy);\n"
    "            #pragma unroll\n"
    "            for (int d = 0; d < NB_D; d++) grid_cell(__ldg(a.x + b * NB_D + d), lv.side[d], cell[d], fr[d]);\n"
    "        } else {\n"
    "            #pragma unroll\n"
    "            for (int f = 0; f < NB_F; f++) dy[f] = 0.0f;\n"
    "        }\n"
    "        #pragma unroll\n"
    "        for (int c = 0; c < (1 << NB_D); c++) {\n"
    "            unsigned g[3] = {0, 0, 0}; float w = 1.0f;\n"
    "            #pragma unroll\n"
    "            for (int d = 0; d < NB_D; d++) { int up = (c >> d) & 1; g[d] = cell[d] + up;\n"
    "                w *= up ? fr[d] : 1.0f - fr[d]; }\n"
    "            float v[NB_F];\n"
    "            #pragma unroll\n"
    "            for (int f = 0; f < NB_F; f++) v[f] = w * dy[f];\n"
    "            unsigned at = lv.offset + grid_index(lv, g) * NB_F;\n"
    "            bool alive = active;\n"
    "            #pragma unroll\n"
    "            for (unsigned o = NB_AGG_LPW; o <= 16; o <<= 1) {\n"
    "                unsigned pat = __shfl_xor_sync(0xffffffffu, at, o);\n"
    "                bool palive = __shfl_xor_sync(0xffffffffu, alive ? 1 : 0, o) != 0;\n"
    "                bool merge = alive && palive && pat == at;\n"
    "                #pragma unroll\n"
    "                for (int f = 0; f < NB_F; f++) {\n"
    "                    float pv = __shfl_xor_sync(0xffffffffu, v[f], o);\n"
    "                    if (merge && !(lane & o)) v[f] += pv;\n"
    "                }\n"
    "                if (merge && (lane & o)) alive = false;\n"
    "            }\n"
    "            if (!alive) continue;\n"
    "#if NB_SMEM_LEVELS > 0\n"
    "            if (l < NB_SMEM_LEVELS) {\n"
    "                #pragma unroll\n"
    "                for (int f = 0; f < NB_F; f++) atomicAdd(s_g + at + f, v[f]);\n"
    "                continue;\n"
    "            }\n"
    "#endif\n"
    "            add_feat(a.grads + at, v);\n"
    "        }\n"
    "    }\n"
    "#if NB_SMEM_LEVELS > 0\n"
    "    __syncthreads();\n"
    "    for (int j = 2 * threadIdx.x; j < NB_SMEM_FLOATS; j += 2 * blockDim.x) {\n"
    "        float p = s_g[j], q = j + 1 < NB_SMEM_FLOATS ? s_g[j + 1] : 0.0f;\n"
    "        if (p == 0.0f && q == 0.0f) continue;\n"
    "        atomicAdd(a.grads + j, p);\n"
    "        if (j + 1 < NB_SMEM_FLOATS) atomicAdd(a.grads + j + 1, q);\n"
    "    }\n"
    "#endif\n"
    "}\n"
    "#endif\n"
    /* backward to x: thread per point */
    "extern \"C\" __global__ void nb_grid_bwd_dx(const Args a) {\n"
    "    LOAD_LEVELS\n"
    "    GRID_LOOP(a.n) {\n"
    "        float acc[3] = {0, 0, 0};\n"
    "        for (int l = 0; l < NB_L; l++) {\n"
    "            const Lv lv = s_lv[l];\n"
    "            unsigned cell[3] = {0, 0, 0}; float fr[3] = {0, 0, 0};\n"
    "            #pragma unroll\n"
    "            for (int d = 0; d < NB_D; d++) grid_cell(__ldg(a.x + i * NB_D + d), lv.side[d], cell[d], fr[d]);\n"
    "            float dy[NB_F];\n"
    "            load_feat(a.dfeat + ((size_t)i * NB_L + l) * NB_F, dy);\n"
    "            #pragma unroll\n"
    "            for (int c = 0; c < (1 << NB_D); c++) {\n"
    "                unsigned g[3] = {0, 0, 0};\n"
    "                #pragma unroll\n"
    "                for (int d = 0; d < NB_D; d++) g[d] = cell[d] + ((c >> d) & 1);\n"
    "                float v[NB_F];\n"
    "                load_feat(a.params + lv.offset + grid_index(lv, g) * NB_F, v);\n"
    "                float dot = 0.0f;\n"
    "                #pragma unroll\n"
    "                for (int f = 0; f < NB_F; f++) dot += dy[f] * v[f];\n"
    "                #pragma unroll\n"
    "                for (int d = 0; d < NB_D; d++) {\n"
    "                    float w = ((c >> d) & 1) ? 1.0f : -1.0f;\n"
    "                    #pragma unroll\n"
    "                    for (int k = 0; k < NB_D; k++) if (k != d) w *= ((c >> k) & 1) ? fr[k] : 1.0f - fr[k];\n"
    "                    acc[d] += dot * w * (float)(lv.side[d] - 1);\n"
    "                }\n"
    "            }\n"
    "        }\n"
    "        #pragma unroll\n"
    "        for (int d = 0; d < NB_D; d++) a.dx[i * NB_D + d] = acc[d];\n"
    "    }\n"
    "}\n"
    /* frequency: forward per (point, dim, frequency), backward per (point, dim) */
    "template <bool H> __device__ __forceinline__ void freq_fwd(const Args &a) {\n"
    "    GRID_LOOP(a.n) {\n"
    "        unsigned k = i % NB_NFREQ, bd = i / NB_NFREQ;\n"
    "        float v[2]; sincosf(ldexpf(PI_F, k) * a.x[bd], &v[0], &v[1]);\n"
    "        store_feat<H>(a.out, 2 * (size_t)i, v, 2);\n"
    "    }\n"
    "}\n"
    "extern \"C\" __global__ void nb_freq_fwd(const Args a) { freq_fwd<false>(a); }\n"
    "extern \"C\" __global__ void nb_freq_fwd_h(const Args a) { freq_fwd<true>(a); }\n"
    "extern \"C\" __global__ void nb_freq_bwd(const Args a) {\n"
    "    GRID_LOOP(a.n) {\n"
    "        float acc = 0.0f, x = a.x[i];\n"
    "        for (int k = 0; k < NB_NFREQ; k++) {\n"
    "            float sc = ldexpf(PI_F, k), s, c; sincosf(sc * x, &s, &c);\n"
    "            const float *dy = a.dfeat + ((size_t)i * NB_NFREQ + k) * 2;\n"
    "            acc += sc * (dy[0] * c - dy[1] * s);\n"
    "        }\n"
    "        a.dx[i] = acc;\n"
    "    }\n"
    "}\n";

#define NB_ENC_SRC_EXTRA 512
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

static nb_status nb_enc_cuda_prepare(nb_encoding *e) {
    if (e->k_fwd) return NB_OK;
    if (!e->cuda_src) {
        size_t cap = sizeof nb_enc_cuda_body + NB_ENC_SRC_EXTRA;
        char *src = nb_alloc(cap, 16);
        if (!src) return nb_error(NB_ERR_OUT_OF_MEMORY, "encoding: out of host memory");
        int freq = e->cfg.kind == NB_ENCODING_FREQUENCY;
        int sl, sf;
        nb_enc_smem_levels(e, &sl, &sf);
        snprintf(src, cap,
                 "// nabla encoding (%s)\n#define NB_D %d\n#define NB_F %d\n#define NB_L %d\n#define NB_NFREQ %d\n"
                 "#define NB_SMEM_LEVELS %d\n#define NB_SMEM_FLOATS %d\n#define NB_AGG_LPW %d\n%s",
                 freq ? "frequency" : "grid", e->cfg.n_dims, freq ? 1 : e->cfg.n_features,
                 freq ? 1 : e->n_levels, freq ? e->cfg.n_frequencies : 1, sl, sf > 0 ? sf : 1,
                 NB_ENC_AGG_LPW, nb_enc_cuda_body);
        e->cuda_src = src;
    }
    if (e->cfg.kind == NB_ENCODING_FREQUENCY) {
        NB_TRY(nb_nn_cuda_kernel(e->dev, e->cuda_src, "nb_freq_bwd", &e->k_bwd_dx));
        NB_TRY(nb_nn_cuda_kernel(e->dev, e->cuda_src, "nb_freq_fwd_h", &e->k_fwd_h));
        return nb_nn_cuda_kernel(e->dev, e->cuda_src, "nb_freq_fwd", &e->k_fwd);
    }
    NB_TRY(nb_nn_cuda_kernel(e->dev, e->cuda_src, "nb_grid_bwd", &e->k_bwd));
    int sl, sf;
    nb_enc_smem_levels(e, &sl, &sf);
    e->k_bwd_smem = e->k_bwd_agg = NULL;
    if (sl > 0) NB_TRY(nb_nn_cuda_kernel(e->dev, e->cuda_src, "nb_grid_bwd_smem", &e->k_bwd_smem));
    /* the warp-aggregated kernel: when the caller says batches are spatially ordered
     * (nb_encoding_set_spatially_ordered; docs/NN.md: faster on such batches, slower on random) */
    if (e->spatially_ordered && e->n_levels % NB_ENC_AGG_LPW == 0)
        NB_TRY(nb_nn_cuda_kernel(e->dev, e->cuda_src, "nb_grid_bwd_agg", &e->k_bwd_agg));
    NB_TRY(nb_nn_cuda_kernel(e->dev, e->cuda_src, "nb_grid_bwd_dx", &e->k_bwd_dx));
    NB_TRY(nb_nn_cuda_kernel(e->dev, e->cuda_src, "nb_grid_fwd_h", &e->k_fwd_h));
    return nb_nn_cuda_kernel(e->dev, e->cuda_src, "nb_grid_fwd", &e->k_fwd);
}

void nb_enc_cuda_release(nb_encoding *e) {
    /* Kernels belong to the JIT's table (freed by nb_jit_forget_all); only the source is ours. */
    if (e->cuda_src) nb_free(e->cuda_src, sizeof nb_enc_cuda_body + NB_ENC_SRC_EXTRA);
    e->cuda_src = NULL;
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

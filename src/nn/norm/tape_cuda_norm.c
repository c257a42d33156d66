/* CUDA rows of the tape's group norm and fused group norm + SiLU (CPU reference: the group-norm
 * part of tape_ops_conv.c).
 *
 * One block per (n, group): the group's M = C/G × S floats are contiguous, so the block reads
 * them as float4 chunks (when S % 4 == 0) into registers (2, 4 or 8 chunks per thread, a kernel
 * variant each; groups beyond 16384 floats are processed in tiles that are re-read), computes the mean and then the variance from
 * the registers (two-pass, exact), saves mean / rstd [N*G] in the arena like the CPU path, and
 * writes y (silu applied in the same pass for the fused op). Backward: a block per (n, group)
 * recomputes x̂ (and z = x̂ γ + β, silu'(z) for the fused op) from x and the saved statistics,
 * reduces Σ dx̂ and Σ dx̂ x̂, accumulates dx, and writes per-(n, channel) partials of Σ dz x̂ and
 * Σ dz; a second small kernel sums them over n in fixed order into dγ, dβ (deterministic, no
 * float atomics on global memory).
 * BF16 storage (tape_internal.h, NB_TOPF_*): x / dx and y / dy may each be bf16 (gn_args.dt);
 * then the *_bf kernel variants run (the same code reading / writing 4 bf16 per 8-byte access;
 * the f32 kernels are unchanged). Statistics, sums, γ / β and their gradients stay f32.
 *
 * The split path (the default for bf16 storage where S % 8 == 0 and the buffers are 16-byte
 * aligned; the per-group kernels above stay for f32 storage, mixed storage, other shapes and
 * the backward of groups under 4096 elements): one block per (n, group)
 * leaves most SMs waiting on a group's reduction, and a group beyond the registers is re-read;
 * instead the reductions are per (n, channel) plane in a statistics kernel (many small blocks,
 * 8 elements per 16-byte load), and a second kernel combines a group's channel sums (Cg of them)
 * and streams over slices of the group:
 *   forward:  gn_fst  plane mean and sum of squared deviations (exact two-pass, in registers)
 *             gn_fnm  group mean / variance from its channels' (Chan et al.'s combination),
 *                     saves mean / rstd, writes y (silu fused); a group of at most 4096
 *                     elements is one block of gn_fnm, which then takes the statistics from
 *                     its registers and gn_fst is skipped
 *   backward: gn_bst  plane sums of dz xh and dz (dz = dy, times silu'(z) when fused)
 *             gn_bdx  md = Σ_c γ_c Σdz / M, mdx = Σ_c γ_c Σdz xh / M, dx (+)= rstd (dz γ - md -
 *                     xh mdx); dγ, dβ summed over n in a fixed order (gn_dgb's work, fused)
 * x (and dy) are read twice; the second kernel walks its blocks in reverse so that its first
 * reads hit what the first kernel read last in L2. Each step's results equal the per-group
 * kernels' up to rounding (tests/test_nn_gn_cuda.c). Measured on the H100 (tools/device/gn.sh (removed; git history),
 * session 5): the reference UNet's 56 group norms + SiLU in bf16, 20 calls back to back, forward
 * 0.760 -> 0.669 ms, backward 1.506 -> 1.192 ms per step (byte floors 0.291 / 0.437 ms);
 * `nabla unet bench --batch 32 --precision bf16` 12.89 -> 12.47 ms/step. In f32 storage the
 * split forward is slower (1.02 vs 0.93 ms; the per-group forward is near its floor there) and
 * the backward only a little faster, so f32 keeps the per-group kernels (the f32 split kernels
 * and the A/B switches NABLA_GN_IMPL, NABLA_GN_CPT, NABLA_GN_BF16_R, NABLA_GN_SPLIT_MIN_FWD /
 * _BWD were removed; the choices are in gn_split_ok and gn_split_tp).
 * Tried and dropped (H100, session 5): thread-block clusters of 8 per group exchanging partial
 * sums through distributed shared memory (x, dy read once, but 1.2-4.6x slower than this path as
 * written, 14.10 vs 12.64 ms per UNet step), and L2 evict_last / evict_first hints on the two
 * reads (12.67 ms: no change). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/device.h"
#include "nn/common/bf16_cuda.h"
#include "nn/common/nn_common.h"
#include "nn/tape/tape_internal.h"

#define VAL(t, v) (&(t)->vals[(v)])
#define GN_MAX_CG 1024 /* channels per group of the backward's shared partials */

typedef struct gn_args {
    const float *x, *gamma, *beta, *dy;
    float *y, *dx, *mean, *rstd, *pg, *pb, *dgamma, *dbeta;
    int32_t N, C, G, S, Cg, M, v4, silu, tiles, wuni;
    int32_t ow; /* bit 0: store dx (fresh gradient) rather than add; bit 1: dgamma; bit 2: dbeta */
    float eps;
    int32_t dt; /* storage: bit 0 x and dx are bf16, bit 1 y and dy (else f32) */
    int32_t tp, nsl; /* split path: threads per (n, c) plane; blocks (slices) per group */
    int32_t self;    /* split forward: one block per group computes its own statistics */
} gn_args;

static const char gn_src[] = NB_CUDA_BF16_HELPERS
    "/* one block per (n, group): blockIdx.x = n * G + g; the group's M = Cg * S elements are contiguous */\n"
    "struct G { const float *x, *gamma, *beta, *dy; float *y, *dx, *mean, *rstd, *pg, *pb, *dgamma, *dbeta;\n"
    "           int N, C, G, S, Cg, M, v4, silu, tiles, wuni, ow; float eps; int dt, tp, nsl, self; };\n"
    "/* ow: bit 0 = store dx (a fresh gradient) instead of adding, bit 1 = dgamma, bit 2 = dbeta;\n"
    " * dt: bit 0 = x and dx are bf16, bit 1 = y and dy (gamma, beta, statistics, partials: f32).\n"
    " * The kernels are templates on BF: 0 = all f32 (the dtype tests fold to 0: the f32 code),\n"
    " * 1 = x / dx and y / dy in the dtypes dt names; separate entry points (gn_*_bf) so that the\n"
    " * f32 kernels keep their registers. */\n"
    "#define FX (BF && (p.dt & 1))\n"
    "#define FY (BF && (p.dt & 2))\n"
    "/* element i of p in dtype bf, as an untyped pointer */\n"
    "__device__ __forceinline__ const void *at(const float *p, size_t i, int bf) {\n"
    "    return bf ? (const void *)((const unsigned short *)p + i) : (const void *)(p + i);\n"
    "}\n"
    "__device__ __forceinline__ void *atw(float *p, size_t i, int bf) {\n"
    "    return bf ? (void *)((unsigned short *)p + i) : (void *)(p + i);\n"
    "}\n"
    "__device__ __forceinline__ void ld_chunk(const void *base, unsigned e, unsigned M, int v4, int bf, float v[4]) {\n"
    "    if (v4) {\n"
    "        float4 q = nb_ld4(base, e, bf);\n"
    "        v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;\n"
    "    } else {\n"
    "        #pragma unroll\n"
    "        for (int k = 0; k < 4; k++) v[k] = e + k < M ? nb_ld(base, e + k, bf) : 0.0f;\n"
    "    }\n"
    "}\n"
    "/* sums of a and b over the block, returned to every thread */\n"
    "__device__ __forceinline__ float2 block_sum2(float a, float b) {\n"
    "    __shared__ float2 sh[32];\n"
    "    __shared__ float2 tot;\n"
    "    for (int o = 16; o > 0; o >>= 1) {\n"
    "        a += __shfl_xor_sync(0xffffffffu, a, o);\n"
    "        b += __shfl_xor_sync(0xffffffffu, b, o);\n"
    "    }\n"
    "    unsigned w = threadIdx.x >> 5, nw = blockDim.x >> 5;\n"
    "    if ((threadIdx.x & 31u) == 0) sh[w] = make_float2(a, b);\n"
    "    __syncthreads();\n"
    "    if (w == 0) {\n"
    "        float2 v = threadIdx.x < nw ? sh[threadIdx.x] : make_float2(0.0f, 0.0f);\n"
    "        for (int o = 16; o > 0; o >>= 1) {\n"
    "            v.x += __shfl_xor_sync(0xffffffffu, v.x, o);\n"
    "            v.y += __shfl_xor_sync(0xffffffffu, v.y, o);\n"
    "        }\n"
    "        if (threadIdx.x == 0) tot = v;\n"
    "    }\n"
    "    __syncthreads();\n"
    "    float2 r = tot;\n"
    "    __syncthreads(); /* sh and tot may be reused by the next call */\n"
    "    return r;\n"
    "}\n"
    "/* channel of element e + k of group g (clamped: tail elements past M read a valid gamma) */\n"
    "__device__ __forceinline__ unsigned chan(const G &p, unsigned c0, unsigned e, int k) {\n"
    "    unsigned j = (e + (unsigned)k) / (unsigned)p.S;\n"
    "    return c0 + (j < (unsigned)p.Cg ? j : (unsigned)p.Cg - 1u);\n"
    "}\n"
    "__device__ __forceinline__ float sig(float z) { return 1.0f / (1.0f + __expf(-z)); }\n"
    "/* chunk r of tile t for this thread (R chunks of 4 floats per thread per tile): first element */\n"
    "#define CHUNK_E(t, r) ((((unsigned)(t) * R + (r)) * blockDim.x + threadIdx.x) * 4u)\n"
    "\n"
    "template <int R, int BF, int V4 = 0> __device__ __forceinline__ void gn_fwd_t(const G &p) {\n"
    "    unsigned bid = blockIdx.x, n = bid / (unsigned)p.G, g = bid - n * (unsigned)p.G;\n"
    "    size_t base = ((size_t)n * p.C + (size_t)g * p.Cg) * p.S;\n"
    "    const void *x = at(p.x, base, FX);\n"
    "    void *y = atw(p.y, base, FY);\n"
    "    unsigned M = (unsigned)p.M, S = (unsigned)p.S;\n"
    "    float v[R][4];\n"
    "    float s = 0.0f;\n"
    "    for (int t = 0; t < p.tiles; t++) {\n"
    "        #pragma unroll\n"
    "        for (int r = 0; r < R; r++) {\n"
    "            unsigned e = CHUNK_E(t, r);\n"
    "            if (e < M) ld_chunk(x, e, M, p.v4, FX, v[r]);\n"
    "            else v[r][0] = v[r][1] = v[r][2] = v[r][3] = 0.0f;\n"
    "            s += (v[r][0] + v[r][1]) + (v[r][2] + v[r][3]);\n"
    "        }\n"
    "    }\n"
    "    float mean = block_sum2(s, 0.0f).x / (float)M;\n"
    "    float q = 0.0f;\n"
    "    for (int t = 0; t < p.tiles; t++) {\n"
    "        #pragma unroll\n"
    "        for (int r = 0; r < R; r++) {\n"
    "            unsigned e = CHUNK_E(t, r);\n"
    "            if (e >= M) continue;\n"
    "            if (p.tiles > 1) ld_chunk(x, e, M, p.v4, FX, v[r]);\n"
    "            #pragma unroll\n"
    "            for (int k = 0; k < 4; k++) if (e + k < M) { float d = v[r][k] - mean; q += d * d; }\n"
    "        }\n"
    "    }\n"
    "    float rstd = rsqrtf(block_sum2(q, 0.0f).x / (float)M + p.eps);\n"
    "    if (threadIdx.x == 0) { p.mean[bid] = mean; p.rstd[bid] = rstd; }\n"
    "    unsigned c0 = g * (unsigned)p.Cg;\n"
    "    for (int t = 0; t < p.tiles; t++) {\n"
    "        #pragma unroll\n"
    "        for (int r = 0; r < R; r++) {\n"
    "            unsigned e = CHUNK_E(t, r);\n"
    "            if (e >= M) continue;\n"
    "            if (p.tiles > 1) ld_chunk(x, e, M, p.v4, FX, v[r]);\n"
    "            unsigned cb = c0 + e / S; /* the chunk's channel when v4 (S % 4 == 0) */\n"
    "            if (BF && V4) { /* bf16 variant: the chunk's scale and shift once */\n"
    "                float sc = rstd * (p.gamma ? __ldg(p.gamma + cb) : 1.0f), be = p.beta ? __ldg(p.beta + cb) : 0.0f;\n"
    "                float4 z = make_float4((v[r][0] - mean) * sc + be, (v[r][1] - mean) * sc + be,\n"
    "                                       (v[r][2] - mean) * sc + be, (v[r][3] - mean) * sc + be);\n"
    "                if (p.silu) { z.x *= sig(z.x); z.y *= sig(z.y); z.z *= sig(z.z); z.w *= sig(z.w); }\n"
    "                nb_st4(y, e, FY, z);\n"
    "                continue;\n"
    "            }\n"
    "            float o[4];\n"
    "            #pragma unroll\n"
    "            for (int k = 0; k < 4; k++) {\n"
    "                unsigned c = p.v4 ? cb : chan(p, c0, e, k);\n"
    "                float ga = p.gamma ? __ldg(p.gamma + c) : 1.0f, be = p.beta ? __ldg(p.beta + c) : 0.0f;\n"
    "                float z = (v[r][k] - mean) * rstd * ga + be;\n"
    "                o[k] = p.silu ? z * sig(z) : z;\n"
    "            }\n"
    "            if (p.v4) nb_st4(y, e, FY, make_float4(o[0], o[1], o[2], o[3]));\n"
    "            else {\n"
    "                #pragma unroll\n"
    "                for (int k = 0; k < 4; k++) if (e + k < M) nb_st(y, e + k, FY, o[k]);\n"
    "            }\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "/* backward: dx += rstd (dxh - mean(dxh) - xh mean(dxh xh)), dxh = dz gamma, dz = dy (times\n"
    " * silu'(z) when fused); per-channel partials of sum dz xh, sum dz into pg, pb [N, C] */\n"
    "template <int R, int BF, int V4 = 0> __device__ __forceinline__ void gn_bwd_t(const G &p, float (&sg)[1024], float (&sb)[1024]) {\n"
    "    unsigned bid = blockIdx.x, n = bid / (unsigned)p.G, g = bid - n * (unsigned)p.G;\n"
    "    size_t base = ((size_t)n * p.C + (size_t)g * p.Cg) * p.S;\n"
    "    const void *x = at(p.x, base, FX), *dy = at(p.dy, base, FY);\n"
    "    unsigned M = (unsigned)p.M, S = (unsigned)p.S, Cg = (unsigned)p.Cg, c0 = g * Cg;\n"
    "    unsigned lane = threadIdx.x & 31u;\n"
    "    int part = p.pg != 0;\n"
    "    if (part) for (unsigned c = threadIdx.x; c < Cg; c += blockDim.x) { sg[c] = 0.0f; sb[c] = 0.0f; }\n"
    "    __syncthreads();\n"
    "    float mean = p.mean[bid], rstd = p.rstd[bid];\n"
    "    float xv[R][4], gv[R][4];\n"
    "    float sd = 0.0f, sdx = 0.0f;\n"
    "    for (int t = 0; t < p.tiles; t++) {\n"
    "        #pragma unroll\n"
    "        for (int r = 0; r < R; r++) {\n"
    "            unsigned e = CHUNK_E(t, r);\n"
    "            if (e >= M) continue; /* wuni: M % 128 == 0, so whole warps skip together */\n"
    "            unsigned cb = c0 + e / S;\n"
    "            ld_chunk(x, e, M, p.v4, FX, xv[r]);\n"
    "            ld_chunk(dy, e, M, p.v4, FY, gv[r]);\n"
    "            float pgs = 0.0f, pbs = 0.0f;\n"
    "            if (BF && V4) { /* bf16 variant: gamma, beta once per chunk (M % 4 == 0: no tail) */\n"
    "                float ga = p.gamma ? __ldg(p.gamma + cb) : 1.0f, be = p.beta ? __ldg(p.beta + cb) : 0.0f;\n"
    "                #pragma unroll\n"
    "                for (int k = 0; k < 4; k++) {\n"
    "                    float xh = (xv[r][k] - mean) * rstd, dz = gv[r][k];\n"
    "                    if (p.silu) { float z = xh * ga + be, sz = sig(z); dz *= sz * (1.0f + z * (1.0f - sz)); }\n"
    "                    float dxh = dz * ga;\n"
    "                    sd += dxh;\n"
    "                    sdx += dxh * xh;\n"
    "                    gv[r][k] = dz;\n"
    "                    pgs += dz * xh;\n"
    "                    pbs += dz;\n"
    "                }\n"
    "            } else\n"
    "            #pragma unroll\n"
    "            for (int k = 0; k < 4; k++) {\n"
    "                unsigned c = p.v4 ? cb : chan(p, c0, e, k);\n"
    "                float ga = p.gamma ? __ldg(p.gamma + c) : 1.0f;\n"
    "                float xh = (xv[r][k] - mean) * rstd, dz = gv[r][k];\n"
    "                if (p.silu) {\n"
    "                    float be = p.beta ? __ldg(p.beta + c) : 0.0f, z = xh * ga + be, sz = sig(z);\n"
    "                    dz *= sz * (1.0f + z * (1.0f - sz));\n"
    "                }\n"
    "                if (e + k >= M) dz = 0.0f;\n"
    "                float dxh = dz * ga;\n"
    "                sd += dxh;\n"
    "                sdx += dxh * xh;\n"
    "                gv[r][k] = dz; /* keep dz for the dx pass */\n"
    "                if (part) {\n"
    "                    if (p.v4) { pgs += dz * xh; pbs += dz; }\n"
    "                    else if (e + k < M) { atomicAdd(&sg[c - c0], dz * xh); atomicAdd(&sb[c - c0], dz); }\n"
    "                }\n"
    "            }\n"
    "            if (part && p.v4) {\n"
    "                unsigned c = cb - c0;\n"
    "                if (p.wuni) { /* the warp's 128 elements lie in one channel */\n"
    "                    for (int o = 16; o > 0; o >>= 1) {\n"
    "                        pgs += __shfl_xor_sync(0xffffffffu, pgs, o);\n"
    "                        pbs += __shfl_xor_sync(0xffffffffu, pbs, o);\n"
    "                    }\n"
    "                    if (lane == 0) { atomicAdd(&sg[c], pgs); atomicAdd(&sb[c], pbs); }\n"
    "                } else {\n"
    "                    atomicAdd(&sg[c], pgs); atomicAdd(&sb[c], pbs);\n"
    "                }\n"
    "            }\n"
    "        }\n"
    "    }\n"
    "    float2 tot = block_sum2(sd, sdx);\n"
    "    float md = tot.x / (float)M, mdx = tot.y / (float)M;\n"
    "    if (p.dx) {\n"
    "        void *dx = atw(p.dx, base, FX);\n"
    "        for (int t = 0; t < p.tiles; t++) {\n"
    "            #pragma unroll\n"
    "            for (int r = 0; r < R; r++) {\n"
    "                unsigned e = CHUNK_E(t, r);\n"
    "                if (e >= M) continue;\n"
    "                unsigned cb = c0 + e / S;\n"
    "                if (BF && V4 && p.tiles == 1) { /* bf16 variant: gamma once per chunk */\n"
    "                    float ga = p.gamma ? __ldg(p.gamma + cb) : 1.0f, rm = rstd * mdx;\n"
    "                    float4 d = make_float4(rstd * (gv[r][0] * ga - md) - (xv[r][0] - mean) * rstd * rm,\n"
    "                                           rstd * (gv[r][1] * ga - md) - (xv[r][1] - mean) * rstd * rm,\n"
    "                                           rstd * (gv[r][2] * ga - md) - (xv[r][2] - mean) * rstd * rm,\n"
    "                                           rstd * (gv[r][3] * ga - md) - (xv[r][3] - mean) * rstd * rm);\n"
    "                    if (!(p.ow & 1)) {\n"
    "                        float4 q = nb_ld4(dx, e, FX);\n"
    "                        d.x += q.x; d.y += q.y; d.z += q.z; d.w += q.w;\n"
    "                    }\n"
    "                    nb_st4(dx, e, FX, d);\n"
    "                    continue;\n"
    "                }\n"
    "                if (p.tiles > 1) {\n"
    "                    ld_chunk(x, e, M, p.v4, FX, xv[r]);\n"
    "                    ld_chunk(dy, e, M, p.v4, FY, gv[r]);\n"
    "                    #pragma unroll\n"
    "                    for (int k = 0; k < 4; k++) if (p.silu) {\n"
    "                        unsigned c = p.v4 ? cb : chan(p, c0, e, k);\n"
    "                        float ga = p.gamma ? __ldg(p.gamma + c) : 1.0f, be = p.beta ? __ldg(p.beta + c) : 0.0f;\n"
    "                        float z = (xv[r][k] - mean) * rstd * ga + be, sz = sig(z);\n"
    "                        gv[r][k] *= sz * (1.0f + z * (1.0f - sz));\n"
    "                    }\n"
    "                }\n"
    "                float o[4];\n"
    "                #pragma unroll\n"
    "                for (int k = 0; k < 4; k++) {\n"
    "                    unsigned c = p.v4 ? cb : chan(p, c0, e, k);\n"
    "                    float ga = p.gamma ? __ldg(p.gamma + c) : 1.0f;\n"
    "                    float xh = (xv[r][k] - mean) * rstd;\n"
    "                    o[k] = rstd * (gv[r][k] * ga - md - xh * mdx);\n"
    "                }\n"
    "                if (p.v4) {\n"
    "                    float4 d = make_float4(o[0], o[1], o[2], o[3]);\n"
    "                    if (!(p.ow & 1)) {\n"
    "                        float4 q = nb_ld4(dx, e, FX);\n"
    "                        d.x += q.x; d.y += q.y; d.z += q.z; d.w += q.w;\n"
    "                    }\n"
    "                    nb_st4(dx, e, FX, d);\n"
    "                } else {\n"
    "                    #pragma unroll\n"
    "                    for (int k = 0; k < 4; k++)\n"
    "                        if (e + k < M) nb_st(dx, e + k, FX, (p.ow & 1) ? o[k] : nb_ld(dx, e + k, FX) + o[k]);\n"
    "                }\n"
    "            }\n"
    "        }\n"
    "    }\n"
    "    if (part) {\n"
    "        __syncthreads();\n"
    "        for (unsigned c = threadIdx.x; c < Cg; c += blockDim.x) {\n"
    "            p.pg[(size_t)n * p.C + c0 + c] = sg[c];\n"
    "            p.pb[(size_t)n * p.C + c0 + c] = sb[c];\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "/* R = 2, 4, 8: registers for 8, 16, 32 floats of x per thread (the backward, which also holds\n"
    " * dy, stops at 4: see gn_setup) */\n"
    "/* LB: the bf16 variant's launch bounds (bwd2: 40 registers, 3 blocks of 512 per SM as the f32\n"
    " * kernel; elsewhere a minimum of blocks makes ptxas spill or take more registers) */\n"
    "#define GN_FWD(R, LB) \\\n"
    "    extern \"C\" __global__ void __launch_bounds__(512) gn_fwd##R(const G p) { gn_fwd_t<R, 0>(p); } \\\n"
    "    extern \"C\" __global__ void __launch_bounds__ LB gn_fwd##R##_bf(const G p) { \\\n"
    "        if (p.v4) gn_fwd_t<R, 1, 1>(p); else gn_fwd_t<R, 1, 0>(p); }\n"
    "#define GN_BWD(R, LB) \\\n"
    "    extern \"C\" __global__ void __launch_bounds__(512) gn_bwd##R(const G p) { \\\n"
    "        __shared__ float sg[1024], sb[1024]; gn_bwd_t<R, 0>(p, sg, sb); } \\\n"
    "    extern \"C\" __global__ void __launch_bounds__ LB gn_bwd##R##_bf(const G p) { \\\n"
    "        __shared__ float sg[1024], sb[1024]; \\\n"
    "        if (p.v4) gn_bwd_t<R, 1, 1>(p, sg, sb); else gn_bwd_t<R, 1, 0>(p, sg, sb); }\n"
    "#if !defined(GN_ONLY) || defined(GN_ONLY_gn_fwd2) || defined(GN_ONLY_gn_fwd2_bf)\n"
    "GN_FWD(2, (512))\n"
    "#endif\n"
    "#if !defined(GN_ONLY) || defined(GN_ONLY_gn_fwd4) || defined(GN_ONLY_gn_fwd4_bf)\n"
    "GN_FWD(4, (512))\n"
    "#endif\n"
    "#if !defined(GN_ONLY) || defined(GN_ONLY_gn_fwd8) || defined(GN_ONLY_gn_fwd8_bf)\n"
    "GN_FWD(8, (512))\n"
    "#endif\n"
    "#if !defined(GN_ONLY) || defined(GN_ONLY_gn_bwd2) || defined(GN_ONLY_gn_bwd2_bf)\n"
    "GN_BWD(2, (512, 3))\n"
    "#endif\n"
    "#if !defined(GN_ONLY) || defined(GN_ONLY_gn_bwd4) || defined(GN_ONLY_gn_bwd4_bf)\n"
    "GN_BWD(4, (512))\n"
    "#endif\n"
    "\n"
    "/* ---- the split path (gn_split_ok): a group's reductions spread over many blocks ----\n"
    " * Needs S % 8 == 0 and 16-byte aligned x, y / dy, dx: a chunk is 8 elements of one channel\n"
    " * (one 16-byte bf16 load, two f32 ones), and all of x, y, dy, dx f32 (BF = 0) or all bf16\n"
    " * (BF = 1; mixed storage takes the per-group kernels). Forward: gn_fst (per (n, c) plane:\n"
    " * mean and sum of squared deviations, two passes over registers), gn_fnm (per slice of a\n"
    " * group: combines its channels' statistics, saves mean / rstd, writes y). Backward: gn_bst\n"
    " * (per plane: sum dz xh, sum dz), gn_bdx (per slice: the group's sums from its channels' ones, dx; and dgamma / dbeta\n"
    " * summed over n in a fixed order). The slice kernels run their blocks in reverse order, so the\n"
    " * first read what the statistics kernel read last (still in L2). */\n"
    "struct C8 { uint4 a, b; }; /* 8 f32 (a, b) or 8 bf16 (a), as loaded */\n"
    "__device__ __forceinline__ C8 ld8(const void *p, size_t i, int bf) {\n"
    "    C8 r;\n"
    "    if (bf) { r.a = *(const uint4 *)((const unsigned short *)p + i); r.b = make_uint4(0u, 0u, 0u, 0u); }\n"
    "    else { r.a = *(const uint4 *)((const float *)p + i); r.b = *(const uint4 *)((const float *)p + i + 4); }\n"
    "    return r;\n"
    "}\n"
    "/* element k (0..7, a constant once unrolled) of a loaded chunk */\n"
    "__device__ __forceinline__ float e8(const C8 &r, int k, int bf) {\n"
    "    if (bf) {\n"
    "        unsigned w = k < 2 ? r.a.x : k < 4 ? r.a.y : k < 6 ? r.a.z : r.a.w;\n"
    "        return __uint_as_float((k & 1) ? (w & 0xffff0000u) : (w << 16));\n"
    "    }\n"
    "    const uint4 &q = k < 4 ? r.a : r.b;\n"
    "    unsigned w = (k & 3) == 0 ? q.x : (k & 3) == 1 ? q.y : (k & 3) == 2 ? q.z : q.w;\n"
    "    return __uint_as_float(w);\n"
    "}\n"
    "__device__ __forceinline__ void st8(void *p, size_t i, int bf, const float o[8]) {\n"
    "    if (bf) {\n"
    "        *(uint4 *)((unsigned short *)p + i) =\n"
    "            make_uint4(nb_f2bf2(o[0], o[1]), nb_f2bf2(o[2], o[3]), nb_f2bf2(o[4], o[5]), nb_f2bf2(o[6], o[7]));\n"
    "    } else {\n"
    "        *(float4 *)((float *)p + i) = make_float4(o[0], o[1], o[2], o[3]);\n"
    "        *(float4 *)((float *)p + i + 4) = make_float4(o[4], o[5], o[6], o[7]);\n"
    "    }\n"
    "}\n"
    "/* sigmoid with a fast reciprocal (within 2 ulp; 1 / inf = 0) */\n"
    "__device__ __forceinline__ float sigf(float z) { return __fdividef(1.0f, 1.0f + __expf(-z)); }\n"
    "/* sums of a and b over the tp consecutive threads of a plane (tp a power of two, 8 .. 256),\n"
    " * returned to each of them, in a fixed order. Every thread of the block calls it. */\n"
    "__device__ __forceinline__ float2 plane_sum2(float a, float b, unsigned tp) {\n"
    "    __shared__ float2 sh[32];\n"
    "    unsigned w = tp < 32u ? tp : 32u;\n"
    "    for (unsigned o = w >> 1; o > 0u; o >>= 1) {\n"
    "        a += __shfl_xor_sync(0xffffffffu, a, (int)o);\n"
    "        b += __shfl_xor_sync(0xffffffffu, b, (int)o);\n"
    "    }\n"
    "    if (tp > 32u) { /* the plane's tp / 32 warps, in order */\n"
    "        if ((threadIdx.x & 31u) == 0u) sh[threadIdx.x >> 5] = make_float2(a, b);\n"
    "        __syncthreads();\n"
    "        unsigned w0 = (threadIdx.x / tp) * (tp >> 5);\n"
    "        a = 0.0f; b = 0.0f;\n"
    "        for (unsigned k = 0; k < (tp >> 5); k++) { float2 v = sh[w0 + k]; a += v.x; b += v.y; }\n"
    "        __syncthreads();\n"
    "    }\n"
    "    return make_float2(a, b);\n"
    "}\n"
    "/* sums of a and b over warp 0's lanes (called by warp 0 only), returned to each lane */\n"
    "__device__ __forceinline__ float2 warp_sum2(float a, float b) {\n"
    "    for (int o = 16; o > 0; o >>= 1) {\n"
    "        a += __shfl_xor_sync(0xffffffffu, a, o);\n"
    "        b += __shfl_xor_sync(0xffffffffu, b, o);\n"
    "    }\n"
    "    return make_float2(a, b);\n"
    "}\n"
    "__device__ __forceinline__ float sum8(const C8 &r, int bf) {\n"
    "    float s = 0.0f;\n"
    "    #pragma unroll\n"
    "    for (int k = 0; k < 8; k++) s += e8(r, k, bf);\n"
    "    return s;\n"
    "}\n"
    "__device__ __forceinline__ float dev8(const C8 &r, int bf, float m) {\n"
    "    float s = 0.0f;\n"
    "    #pragma unroll\n"
    "    for (int k = 0; k < 8; k++) { float d = e8(r, k, bf) - m; s += d * d; }\n"
    "    return s;\n"
    "}\n"
    "\n"
    "/* forward statistics: plane pl = n * C + c (256 / tp planes per block of 256 threads):\n"
    " * pg[pl] = its mean, pb[pl] = its sum of squared deviations from that mean */\n"
    "template <int BF> __device__ __forceinline__ void gn_fst_t(const G &p) {\n"
    "    unsigned tp = (unsigned)p.tp, sub = threadIdx.x / tp, l = threadIdx.x - sub * tp;\n"
    "    unsigned NC = (unsigned)p.N * (unsigned)p.C, pl = blockIdx.x * (blockDim.x / tp) + sub, S = (unsigned)p.S;\n"
    "    int ok = pl < NC;\n"
    "    const void *x = at(p.x, (size_t)(ok ? pl : 0u) * S, BF);\n"
    "    unsigned e0 = l * 8u, e1 = e0 + tp * 8u;\n"
    "    int h0 = ok && e0 < S, h1 = ok && e1 < S;\n"
    "    C8 x0, x1;\n"
    "    float s = 0.0f;\n"
    "    if (h0) { x0 = ld8(x, e0, BF); s += sum8(x0, BF); }\n"
    "    if (h1) { x1 = ld8(x, e1, BF); s += sum8(x1, BF); }\n"
    "    for (unsigned e = e0 + tp * 16u; ok && e < S; e += tp * 8u) s += sum8(ld8(x, e, BF), BF);\n"
    "    float mc = plane_sum2(s, 0.0f, tp).x / (float)S, q = 0.0f;\n"
    "    if (h0) q += dev8(x0, BF, mc);\n"
    "    if (h1) q += dev8(x1, BF, mc);\n"
    "    for (unsigned e = e0 + tp * 16u; ok && e < S; e += tp * 8u) q += dev8(ld8(x, e, BF), BF, mc);\n"
    "    q = plane_sum2(q, 0.0f, tp).x;\n"
    "    if (ok && l == 0u) { p.pg[pl] = mc; p.pb[pl] = q; }\n"
    "}\n"
    "\n"
    "/* forward output: block = slice sl of group (n, g), 2 chunks per thread; the group's mean and\n"
    " * variance from its channels' (equal counts: mean of means; sum of squared deviations plus S\n"
    " * times the squared deviations of the channel means) */\n"
    "template <int BF> __device__ __forceinline__ void gn_fnm_t(const G &p) {\n"
    "    __shared__ float2 st;\n"
    "    unsigned rb = gridDim.x - 1u - blockIdx.x, nsl = (unsigned)p.nsl, ng = rb / nsl, sl = rb - ng * nsl;\n"
    "    unsigned n = ng / (unsigned)p.G, g = ng - n * (unsigned)p.G, Cg = (unsigned)p.Cg, c0 = g * Cg;\n"
    "    unsigned M = (unsigned)p.M, S = (unsigned)p.S, C = (unsigned)p.C;\n"
    "    size_t base = ((size_t)n * C + c0) * S;\n"
    "    const void *x = at(p.x, base, BF);\n"
    "    unsigned e0 = (sl * 2u * blockDim.x + threadIdx.x) * 8u, e1 = e0 + blockDim.x * 8u;\n"
    "    int h0 = e0 < M, h1 = e1 < M;\n"
    "    C8 x0, x1;\n"
    "    if (h0) x0 = ld8(x, e0, BF);\n"
    "    if (h1) x1 = ld8(x, e1, BF);\n"
    "    if (p.self) { /* one block holds the group (nsl == 1): its statistics from the registers */\n"
    "        float a = (h0 ? sum8(x0, BF) : 0.0f) + (h1 ? sum8(x1, BF) : 0.0f);\n"
    "        float mean = block_sum2(a, 0.0f).x / (float)M;\n"
    "        a = (h0 ? dev8(x0, BF, mean) : 0.0f) + (h1 ? dev8(x1, BF, mean) : 0.0f);\n"
    "        float rstd = rsqrtf(block_sum2(a, 0.0f).x / (float)M + p.eps);\n"
    "        if (threadIdx.x == 0u) { st = make_float2(mean, rstd); p.mean[ng] = mean; p.rstd[ng] = rstd; }\n"
    "    } else if (threadIdx.x < 32u) {\n"
    "        const float *cm = p.pg + (size_t)n * C + c0, *cq = p.pb + (size_t)n * C + c0;\n"
    "        float a = 0.0f;\n"
    "        for (unsigned c = threadIdx.x; c < Cg; c += 32u) a += cm[c];\n"
    "        float mean = warp_sum2(a, 0.0f).x / (float)Cg, q = 0.0f;\n"
    "        for (unsigned c = threadIdx.x; c < Cg; c += 32u) { float d = cm[c] - mean; q += cq[c] + (float)S * d * d; }\n"
    "        float rstd = rsqrtf(warp_sum2(q, 0.0f).x / (float)M + p.eps);\n"
    "        if (threadIdx.x == 0u) {\n"
    "            st = make_float2(mean, rstd);\n"
    "            if (sl == 0u) { p.mean[ng] = mean; p.rstd[ng] = rstd; }\n"
    "        }\n"
    "    }\n"
    "    __syncthreads();\n"
    "    float mean = st.x, rstd = st.y;\n"
    "    void *y = atw(p.y, base, BF);\n"
    "    #pragma unroll\n"
    "    for (int u = 0; u < 2; u++) {\n"
    "        if (!(u ? h1 : h0)) continue;\n"
    "        unsigned e = u ? e1 : e0, c = c0 + e / S;\n"
    "        float sc = rstd * (p.gamma ? __ldg(p.gamma + c) : 1.0f), be = p.beta ? __ldg(p.beta + c) : 0.0f;\n"
    "        float o[8];\n"
    "        #pragma unroll\n"
    "        for (int k = 0; k < 8; k++) {\n"
    "            float z = (e8(u ? x1 : x0, k, BF) - mean) * sc + be;\n"
    "            o[k] = p.silu ? z * sigf(z) : z;\n"
    "        }\n"
    "        st8(y, e, BF, o);\n"
    "    }\n"
    "}\n"
    "\n"
    "/* backward statistics: plane pl = n * C + c: pg[pl] = sum dz xh, pb[pl] = sum dz (dz = dy, times\n"
    " * silu'(z) when fused) */\n"
    "template <int BF> __device__ __forceinline__ void bst_acc(const G &p, const C8 &xc, const C8 &gc, float mean,\n"
    "                                                           float rstd, float ga, float be, float &a, float &b) {\n"
    "    #pragma unroll\n"
    "    for (int k = 0; k < 8; k++) {\n"
    "        float xh = (e8(xc, k, BF) - mean) * rstd, dz = e8(gc, k, BF);\n"
    "        if (p.silu) { float z = xh * ga + be, sz = sigf(z); dz *= sz * (1.0f + z * (1.0f - sz)); }\n"
    "        a += dz * xh;\n"
    "        b += dz;\n"
    "    }\n"
    "}\n"
    "template <int BF> __device__ __forceinline__ void gn_bst_t(const G &p) {\n"
    "    unsigned tp = (unsigned)p.tp, sub = threadIdx.x / tp, l = threadIdx.x - sub * tp;\n"
    "    unsigned NC = (unsigned)p.N * (unsigned)p.C, pl = blockIdx.x * (blockDim.x / tp) + sub, S = (unsigned)p.S;\n"
    "    float a = 0.0f, b = 0.0f;\n"
    "    if (pl < NC) {\n"
    "        unsigned n = pl / (unsigned)p.C, c = pl - n * (unsigned)p.C, ng = n * (unsigned)p.G + c / (unsigned)p.Cg;\n"
    "        float mean = p.mean[ng], rstd = p.rstd[ng];\n"
    "        float ga = p.gamma ? __ldg(p.gamma + c) : 1.0f, be = p.beta ? __ldg(p.beta + c) : 0.0f;\n"
    "        const void *x = at(p.x, (size_t)pl * S, BF), *dy = at(p.dy, (size_t)pl * S, BF);\n"
    "        for (unsigned e = l * 8u; e < S; e += tp * 16u) {\n"
    "            unsigned e1 = e + tp * 8u;\n"
    "            C8 x0 = ld8(x, e, BF), g0 = ld8(dy, e, BF), x1, g1;\n"
    "            if (e1 < S) { x1 = ld8(x, e1, BF); g1 = ld8(dy, e1, BF); }\n"
    "            bst_acc<BF>(p, x0, g0, mean, rstd, ga, be, a, b);\n"
    "            if (e1 < S) bst_acc<BF>(p, x1, g1, mean, rstd, ga, be, a, b);\n"
    "        }\n"
    "    }\n"
    "    float2 s = plane_sum2(a, b, tp);\n"
    "    if (pl < NC && l == 0u) { p.pg[pl] = s.x; p.pb[pl] = s.y; }\n"
    "}\n"
    "\n"
    "/* backward dx: block = slice sl of group (n, g), 2 chunks per thread;\n"
    " * dx (+)= rstd (dz gamma - md - xh mdx), md = sum_c gamma_c pb / M, mdx = sum_c gamma_c pg / M.\n"
    " * The blocks of n == N - 1, sl == 0 also add dgamma, dbeta of the group's channels (sums over\n"
    " * n in order) */\n"
    "template <int BF> __device__ __forceinline__ void bdx_chunk(const G &p, void *dx, unsigned e, unsigned c,\n"
    "                                                             const C8 &xc, const C8 &gc, const C8 &dc, float mean,\n"
    "                                                             float rstd, float md, float mdx) {\n"
    "    float ga = p.gamma ? __ldg(p.gamma + c) : 1.0f, be = p.beta ? __ldg(p.beta + c) : 0.0f;\n"
    "    float o[8];\n"
    "    #pragma unroll\n"
    "    for (int k = 0; k < 8; k++) {\n"
    "        float xh = (e8(xc, k, BF) - mean) * rstd, dz = e8(gc, k, BF);\n"
    "        if (p.silu) { float z = xh * ga + be, sz = sigf(z); dz *= sz * (1.0f + z * (1.0f - sz)); }\n"
    "        o[k] = rstd * (dz * ga - md - xh * mdx);\n"
    "        if (!(p.ow & 1)) o[k] += e8(dc, k, BF);\n"
    "    }\n"
    "    st8(dx, e, BF, o);\n"
    "}\n"
    "template <int BF> __device__ __forceinline__ void gn_bdx_t(const G &p) {\n"
    "    __shared__ float2 st;\n"
    "    unsigned rb = gridDim.x - 1u - blockIdx.x, nsl = (unsigned)p.nsl, ng = rb / nsl, sl = rb - ng * nsl;\n"
    "    unsigned n = ng / (unsigned)p.G, g = ng - n * (unsigned)p.G, Cg = (unsigned)p.Cg, c0 = g * Cg;\n"
    "    unsigned M = (unsigned)p.M, S = (unsigned)p.S, C = (unsigned)p.C;\n"
    "    size_t base = ((size_t)n * C + c0) * S;\n"
    "    const void *x = at(p.x, base, BF), *dy = at(p.dy, base, BF);\n"
    "    void *dx = p.dx ? atw(p.dx, base, BF) : (void *)0;\n"
    "    unsigned e0 = (sl * 2u * blockDim.x + threadIdx.x) * 8u, e1 = e0 + blockDim.x * 8u;\n"
    "    int h0 = dx && e0 < M, h1 = dx && e1 < M, add = !(p.ow & 1);\n"
    "    C8 x0, g0, d0, x1, g1, d1;\n"
    "    if (h0) { x0 = ld8(x, e0, BF); g0 = ld8(dy, e0, BF); if (add) d0 = ld8(dx, e0, BF); }\n"
    "    if (h1) { x1 = ld8(x, e1, BF); g1 = ld8(dy, e1, BF); if (add) d1 = ld8(dx, e1, BF); }\n"
    "    float mean = p.mean[ng], rstd = p.rstd[ng];\n"
    "    if (threadIdx.x < 32u) {\n"
    "        const float *pg = p.pg + (size_t)n * C + c0, *pb = p.pb + (size_t)n * C + c0;\n"
    "        float a = 0.0f, b = 0.0f;\n"
    "        for (unsigned c = threadIdx.x; c < Cg; c += 32u) {\n"
    "            float ga = p.gamma ? __ldg(p.gamma + c0 + c) : 1.0f;\n"
    "            a += ga * pb[c];\n"
    "            b += ga * pg[c];\n"
    "        }\n"
    "        float2 s = warp_sum2(a, b);\n"
    "        if (threadIdx.x == 0u) st = make_float2(s.x / (float)M, s.y / (float)M);\n"
    "    }\n"
    "    if (n == (unsigned)p.N - 1u && sl == 0u && (p.dgamma || p.dbeta)) /* among the first blocks */\n"
    "        for (unsigned c = threadIdx.x; c < Cg; c += blockDim.x) {\n"
    "            float a = 0.0f, b = 0.0f;\n"
    "            for (unsigned m = 0; m < (unsigned)p.N; m++) {\n"
    "                a += p.pg[(size_t)m * C + c0 + c];\n"
    "                b += p.pb[(size_t)m * C + c0 + c];\n"
    "            }\n"
    "            if (p.dgamma) p.dgamma[c0 + c] = (p.ow & 2) ? a : p.dgamma[c0 + c] + a;\n"
    "            if (p.dbeta) p.dbeta[c0 + c] = (p.ow & 4) ? b : p.dbeta[c0 + c] + b;\n"
    "        }\n"
    "    __syncthreads();\n"
    "    float md = st.x, mdx = st.y;\n"
    "    if (h0) bdx_chunk<BF>(p, dx, e0, c0 + e0 / S, x0, g0, d0, mean, rstd, md, mdx);\n"
    "    if (h1) bdx_chunk<BF>(p, dx, e1, c0 + e1 / S, x1, g1, d1, mean, rstd, md, mdx);\n"
    "}\n"
        "/* The split path runs for bf16 storage only (f32 measured slower, see the top): the f32\n"
    " * entries gn_fst .. gn_bdx are never launched, but compiled beside their bf16 twins: without\n"
    " * them ptxas lays out gn_fnm_bf's shared memory in another order (checked: PTX and sm_90\n"
    " * machine code), so they stay until a GPU run measures the change. */\n"
    "#define GN_SPLIT(K, LB) \\\n"
    "    extern \"C\" __global__ void __launch_bounds__ LB gn_##K(const G p) { gn_##K##_t<0>(p); } \\\n"
    "    extern \"C\" __global__ void __launch_bounds__ LB gn_##K##_bf(const G p) { gn_##K##_t<1>(p); }\n"
    "#if !defined(GN_ONLY) || defined(GN_ONLY_gn_fst) || defined(GN_ONLY_gn_fst_bf)\n"
    "GN_SPLIT(fst, (256))\n"
    "#endif\n"
    "#if !defined(GN_ONLY) || defined(GN_ONLY_gn_fnm) || defined(GN_ONLY_gn_fnm_bf)\n"
    "GN_SPLIT(fnm, (256))\n"
    "#endif\n"
    "#if !defined(GN_ONLY) || defined(GN_ONLY_gn_bst) || defined(GN_ONLY_gn_bst_bf)\n"
    "GN_SPLIT(bst, (256))\n"
    "#endif\n"
    "#if !defined(GN_ONLY) || defined(GN_ONLY_gn_bdx) || defined(GN_ONLY_gn_bdx_bf)\n"
    "GN_SPLIT(bdx, (256))\n"
    "#endif\n"
    "/* dgamma[c] += sum_n pg[n, c]; dbeta[c] += sum_n pb[n, c]: a warp per channel, lane l sums\n"
    " * n = l, l + 32, ..., then a fixed shuffle tree (deterministic; no serial loop over N) */\n"
    "#if !defined(GN_ONLY) || defined(GN_ONLY_gn_dgb)\n"
    "extern \"C\" __global__ void gn_dgb(const G p) {\n"
    "    unsigned lane = threadIdx.x & 31u, c = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);\n"
    "    if (c >= (unsigned)p.C) return; /* whole warps: c is uniform per warp */\n"
    "    float a = 0.0f, b = 0.0f;\n"
    "    for (unsigned n = lane; n < (unsigned)p.N; n += 32u) { a += p.pg[(size_t)n * p.C + c]; b += p.pb[(size_t)n * p.C + c]; }\n"
    "    for (int o = 16; o > 0; o >>= 1) {\n"
    "        a += __shfl_xor_sync(0xffffffffu, a, o);\n"
    "        b += __shfl_xor_sync(0xffffffffu, b, o);\n"
    "    }\n"
    "    if (lane == 0) {\n"
    "        if (p.dgamma) p.dgamma[c] = (p.ow & 2) ? a : p.dgamma[c] + a;\n"
    "        if (p.dbeta) p.dbeta[c] = (p.ow & 4) ? b : p.dbeta[c] + b;\n"
    "    }\n"
    "}\n"
    "#endif\n";

/* kernel ids NB_TK_GN_FWD2 .. NB_TK_GN_DGB, in order; then the bf16 variants of the first five */
static const char *const gn_entry[11] = {"gn_fwd2",    "gn_fwd4",    "gn_fwd8",    "gn_bwd2",
                                         "gn_bwd4",    "gn_dgb",     "gn_fwd2_bf", "gn_fwd4_bf",
                                         "gn_fwd8_bf", "gn_bwd2_bf", "gn_bwd4_bf"};

_Static_assert(NB_TK_GN_FWD2_BF - NB_TK_GN_FWD2 == 6 && NB_TK_GN_BWD4_BF - NB_TK_GN_FWD2_BF == 4,
               "bf16 group-norm kernel ids follow the f32 ones' order");

/* Loads entry into t->kern[id] once. The source is gn_src behind "#define GN_ONLY_<entry>", so
 * NVRTC compiles that entry's kernels only (gn_src holds 19 kernels; compiling all of them for
 * each entry loaded made a cold start slow). */
static nb_status gn_kernel(nb_tape *t, int id, const char *entry) {
    if (t->kern[id]) return NB_OK;
    size_t n = strlen(entry);
    char *src = malloc(n + 40 + sizeof gn_src);
    if (!src) return nb_error(NB_ERR_OUT_OF_MEMORY, "tape (CUDA): group norm kernel source");
    int k = snprintf(src, n + 40, "#define GN_ONLY\n#define GN_ONLY_%s\n", entry);
    memcpy(src + k, gn_src, sizeof gn_src);
    nb_status s = nb_nn_cuda_kernel(t->dev, src, entry, &t->kern[id]);
    free(src);
    return s;
}

/* Launches kernel id (NB_TK_GN_FWD2 .. NB_TK_GN_DGB), its bf16 variant when a->dt != 0. */
static nb_status gn_launch(nb_tape *t, int id, const gn_args *a, unsigned grid, unsigned block) {
    int e = id - NB_TK_GN_FWD2;
    if (a->dt && id != NB_TK_GN_DGB) {
        id = NB_TK_GN_FWD2_BF + e;
        e += 6;
    }
    nb_status s = gn_kernel(t, id, gn_entry[e]);
    if (s) return s;
    const unsigned g[3] = {grid, 1, 1}, b[3] = {block, 1, 1};
    return nb_jit_launch_cuda_grid(t->kern[id], a, sizeof *a, g, b, nb_device_stream(t->dev));
}

static int al16(const void *p) { return p == NULL || ((uintptr_t)p & 15u) == 0; }

/* Which kernels run (nb_gn_cuda_set_path): 0 the choice below, 1 the per-group kernels, 2 the
 * split ones wherever they can run. Process-wide; tests compare the paths on the same shapes. */
static int gn_path;
void nb_gn_cuda_set_path(int path) { gn_path = path == 1 || path == 2 ? path : 0; }

/* The split path (the kernels' comment above) for bf16 storage (x and y both bf16: f32 keeps the
 * per-group kernels, their forward is near the byte floor in f32 and the split path's second
 * read of x and dy costs more than it saves there). Needs S % 8 == 0 and 16-byte aligned
 * buffers (x, y and dy, and dx in the backward); other cases take the per-group kernels. The
 * backward of groups under 4096 elements too: a group that one block holds needs no split, and
 * the per-group backward reads x and dy once (the split forward does the same with gn_fnm
 * alone, see above). */
static int gn_split_ok(const gn_args *a, int pass, const float *dx) {
    if (gn_path == 1 || a->dt != 3) return 0;
    if (pass && a->M < 4096 && gn_path != 2) return 0;
    return a->S % 8 == 0 && al16(a->x) && al16(a->y) && al16(a->dy) && al16(dx);
}

/* Threads per (n, c) plane of the split statistics kernels: a power of two in 8 .. 256, about
 * 2 chunks of 8 per thread (4 measured 0.045 ms faster in the forward, equal end to end); 256 /
 * tp planes per block of 256. gn_fst keeps 2 chunks in registers and re-reads the others (L1)
 * for its second pass. */
static int32_t gn_split_tp(int64_t S) {
    int64_t tp = 8;
    while (tp < 256 && tp * 8 * 2 < S) tp *= 2;
    return (int32_t)tp;
}

/* Block size (a multiple of 32, 32 .. 256) and slices per group of the split slice kernels
 * (2 chunks of 8 per thread). */
static unsigned gn_split_slices(gn_args *a) {
    int64_t ch = a->M / 8, bt = ((ch + 1) / 2 + 31) / 32 * 32;
    if (bt < 32) bt = 32;
    if (bt > 256) bt = 256;
    a->nsl = (int32_t)((ch + 2 * bt - 1) / (2 * bt));
    return (unsigned)bt;
}

static const char *const gn_split_entry[4] = {"gn_fst_bf", "gn_fnm_bf", "gn_bst_bf", "gn_bdx_bf"};

/* Launches split kernel id (NB_TK_GN_FST_BF .. NB_TK_GN_BDX_BF; bf16 storage only). */
static nb_status gn_launch_split(nb_tape *t, int id, const gn_args *a, unsigned grid, unsigned block) {
    nb_status s = gn_kernel(t, id, gn_split_entry[id - NB_TK_GN_FST_BF]);
    if (s) return s;
    const unsigned g[3] = {grid, 1, 1}, b[3] = {block, 1, 1};
    return nb_jit_launch_cuda_grid(t->kern[id], a, sizeof *a, g, b, nb_device_stream(t->dev));
}

/* Statistics kernel grid: 256 / tp planes per block. */
static unsigned gn_split_grid(gn_args *a) {
    a->tp = gn_split_tp(a->S);
    int64_t ppb = 256 / a->tp, NC = (int64_t)a->N * a->C;
    return (unsigned)((NC + ppb - 1) / ppb);
}

/* Shapes, block size, register depth (variant 0, 1, 2 = R 2, 4, 8 chunks of 4 floats per thread,
 * at most rmax) and tiling of op; NB_ERR_UNSUPPORTED for sizes the kernels do not take. Shallow
 * register tiles keep more warps resident (the backward holds x and dy: 40 / 58 / 99 registers).
 * The backward takes rmax 4: at R 8 (99 registers) only one 512-thread block fits an SM, whose
 * load / reduce / store phases then never overlap (measured 3.6-4.8x the forward on the H100);
 * at R 4 two blocks fit, and the extra tiles re-read x and dy (mostly from L2). */
static nb_status gn_setup(nb_tape *t, const nb_top *op, int rmax, gn_args *a, unsigned *block,
                          int *variant) {
    const nb_tval *x = VAL(t, op->in[0]), *y = VAL(t, op->out);
    memset(a, 0, sizeof *a);
    int64_t N = x->shape[0], C = x->shape[1], G = op->ip[0], S = x->count / (N * C);
    int64_t Cg = C / G, M = Cg * S;
    if (x->count >= ((int64_t)1 << 31) || N * G > INT32_MAX)
        return nb_error(NB_ERR_UNSUPPORTED, "tape (CUDA): group norm on %lld elements (>= 2^31)",
                        (long long)x->count);
    a->x = x->data;
    a->gamma = op->in[1] >= 0 ? VAL(t, op->in[1])->data : NULL;
    a->beta = op->in[2] >= 0 ? VAL(t, op->in[2])->data : NULL;
    a->y = y->data;
    a->dy = y->grad;
    a->mean = op->saved[0];
    a->rstd = op->saved[1];
    a->N = (int32_t)N, a->C = (int32_t)C, a->G = (int32_t)G, a->S = (int32_t)S;
    a->Cg = (int32_t)Cg, a->M = (int32_t)M;
    a->eps = op->fp[0];
    a->silu = op->kind == NB_TOP_GROUP_NORM_SILU;
    a->dt = (x->dtype == NB_BF16 ? 1 : 0) | (y->dtype == NB_BF16 ? 2 : 0);
    a->v4 = S % 4 == 0 && al16(a->x) && al16(a->y) && al16(a->dy);
    a->wuni = a->v4 && S % 128 == 0;
    int64_t nch = (M + 3) / 4, R = nch <= 2 * 512 ? 2 : nch <= 4 * 512 || rmax < 8 ? 4 : 8;
    int64_t b = ((nch + R - 1) / R + 31) / 32 * 32;
    if (b < 64) b = 64;
    if (b > 512) b = 512;
    a->tiles = (int32_t)((nch + R * b - 1) / (R * b));
    *block = (unsigned)b;
    *variant = R == 2 ? 0 : R == 4 ? 1 : 2;
    return NB_OK;
}

nb_status nb_op_group_norm_cuda_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    int64_t NG = x->shape[0] * op->ip[0];
    op->saved[0] = nb_tape_alloc_f32(t, NG, 0);
    op->saved[1] = nb_tape_alloc_f32(t, NG, 0);
    if (!op->saved[0] || !op->saved[1]) return NB_ERR_OUT_OF_MEMORY;
    gn_args a;
    unsigned block = 0;
    int v = 0;
    nb_status s = gn_setup(t, op, 8, &a, &block, &v);
    if (s) return s;
    if (!gn_split_ok(&a, 0, NULL)) return gn_launch(t, NB_TK_GN_FWD2 + v, &a, (unsigned)NG, block);
    block = gn_split_slices(&a);
    a.self = a.nsl == 1; /* one kernel for small groups */
    if (!a.self) {
        int64_t NC = (int64_t)a.N * a.C; /* per-plane mean, squared deviations */
        a.pg = nb_tape_alloc_f32(t, NC, 0);
        a.pb = nb_tape_alloc_f32(t, NC, 0);
        if (!a.pg || !a.pb) return NB_ERR_OUT_OF_MEMORY;
        if ((s = gn_launch_split(t, NB_TK_GN_FST_BF, &a, gn_split_grid(&a), 256))) return s;
    }
    return gn_launch_split(t, NB_TK_GN_FNM_BF, &a, (unsigned)(NG * a.nsl), block);
}

nb_status nb_op_group_norm_cuda_bwd(nb_tape *t, const nb_top *op) {
    gn_args a;
    unsigned block = 0;
    int v = 0;
    nb_status s = gn_setup(t, op, 4, &a, &block, &v);
    if (s) return s;
    int wx, wg, wb;
    if ((s = nb_tape_grad_buf_w(t, op->in[0], &a.dx, &wx)) ||
        (s = nb_tape_grad_buf_w(t, op->in[1], &a.dgamma, &wg)) ||
        (s = nb_tape_grad_buf_w(t, op->in[2], &a.dbeta, &wb)))
        return s;
    a.ow = wx | wg << 1 | wb << 2;
    a.v4 = a.v4 && al16(a.dx);
    a.wuni = a.wuni && a.v4;
    int affine = a.dgamma || a.dbeta;
    if (!a.dx && !affine) return NB_OK;
    if (gn_split_ok(&a, 1, a.dx)) { /* per-plane sums always: dx needs them too */
        int64_t NC = (int64_t)a.N * a.C;
        a.pg = nb_tape_alloc_f32(t, NC, 0);
        a.pb = nb_tape_alloc_f32(t, NC, 0);
        if (!a.pg || !a.pb) return NB_ERR_OUT_OF_MEMORY;
        if ((s = gn_launch_split(t, NB_TK_GN_BST_BF, &a, gn_split_grid(&a), 256))) return s;
        block = gn_split_slices(&a);
        return gn_launch_split(t, NB_TK_GN_BDX_BF, &a, (unsigned)(a.N * a.G * a.nsl), block);
    }
    if (affine) {
        if (a.Cg > GN_MAX_CG)
            return nb_error(NB_ERR_UNSUPPORTED,
                            "tape (CUDA): group norm backward with %d channels per group (the "
                            "kernel takes at most %d)", (int)a.Cg, GN_MAX_CG);
        int64_t NC = (int64_t)a.N * a.C;
        a.pg = nb_tape_alloc_f32(t, NC, 0);
        a.pb = nb_tape_alloc_f32(t, NC, 0);
        if (!a.pg || !a.pb) return NB_ERR_OUT_OF_MEMORY;
    }
    if ((s = gn_launch(t, NB_TK_GN_BWD2 + v, &a, (unsigned)(a.N * a.G), block))) return s;
    if (!affine) return NB_OK;
    unsigned blocks = (unsigned)((a.C + 7) / 8); /* 8 warps of 256 threads, a warp per channel */
    return gn_launch(t, NB_TK_GN_DGB, &a, blocks, 256);
}

const char *nb_tape_cuda_norm_source(void) { return gn_src; }

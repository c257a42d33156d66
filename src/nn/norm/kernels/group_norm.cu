// Group norm (and group norm + SiLU) forward / backward for the tape (src/nn/norm/tape_cuda_norm.c),
// f32 and mixed f32/bf16 storage. The loader compiles one entry's kernels at a time: defines
// GN_ONLY and GN_ONLY_<entry> (16 kernels in all; compiling all of them per entry made a cold
// start slow); without GN_ONLY every kernel is compiled.
//! nvrtc-check:
//! nvrtc-check: GN_ONLY GN_ONLY_gn_bwd4_bf
#include "graph/kernels/bf16.cuh"
/* one block per (n, group): blockIdx.x = n * G + g; the group's M = Cg * S elements are contiguous */
struct G { const float *x, *gamma, *beta, *dy; float *y, *dx, *mean, *rstd, *pg, *pb, *dgamma, *dbeta;
           int N, C, G, S, Cg, M, v4, silu, tiles, wuni, ow; float eps; int dt, tp, nsl, self; };
/* ow: bit 0 = store dx (a fresh gradient) instead of adding, bit 1 = dgamma, bit 2 = dbeta;
 * dt: bit 0 = x and dx are bf16, bit 1 = y and dy (gamma, beta, statistics, partials: f32).
 * The kernels are templates on BF: 0 = all f32 (the dtype tests fold to 0: the f32 code),
 * 1 = x / dx and y / dy in the dtypes dt names; separate entry points (gn_*_bf) so that the
 * f32 kernels keep their registers. */
#define FX (BF && (p.dt & 1))
#define FY (BF && (p.dt & 2))
/* element i of p in dtype bf, as an untyped pointer */
__device__ __forceinline__ const void *at(const float *p, size_t i, int bf) {
    return bf ? (const void *)((const unsigned short *)p + i) : (const void *)(p + i);
}
__device__ __forceinline__ void *atw(float *p, size_t i, int bf) {
    return bf ? (void *)((unsigned short *)p + i) : (void *)(p + i);
}
__device__ __forceinline__ void ld_chunk(const void *base, unsigned e, unsigned M, int v4, int bf, float v[4]) {
    if (v4) {
        float4 q = nb_ld4(base, e, bf);
        v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
    } else {
        #pragma unroll
        for (int k = 0; k < 4; k++) v[k] = e + k < M ? nb_ld(base, e + k, bf) : 0.0f;
    }
}
/* sums of a and b over the block, returned to every thread */
__device__ __forceinline__ float2 block_sum2(float a, float b) {
    __shared__ float2 sh[32];
    __shared__ float2 tot;
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_xor_sync(0xffffffffu, a, o);
        b += __shfl_xor_sync(0xffffffffu, b, o);
    }
    unsigned w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if ((threadIdx.x & 31u) == 0) sh[w] = make_float2(a, b);
    __syncthreads();
    if (w == 0) {
        float2 v = threadIdx.x < nw ? sh[threadIdx.x] : make_float2(0.0f, 0.0f);
        for (int o = 16; o > 0; o >>= 1) {
            v.x += __shfl_xor_sync(0xffffffffu, v.x, o);
            v.y += __shfl_xor_sync(0xffffffffu, v.y, o);
        }
        if (threadIdx.x == 0) tot = v;
    }
    __syncthreads();
    float2 r = tot;
    __syncthreads(); /* sh and tot may be reused by the next call */
    return r;
}
/* channel of element e + k of group g (clamped: tail elements past M read a valid gamma) */
__device__ __forceinline__ unsigned chan(const G &p, unsigned c0, unsigned e, int k) {
    unsigned j = (e + (unsigned)k) / (unsigned)p.S;
    return c0 + (j < (unsigned)p.Cg ? j : (unsigned)p.Cg - 1u);
}
__device__ __forceinline__ float sig(float z) { return 1.0f / (1.0f + __expf(-z)); }
/* chunk r of tile t for this thread (R chunks of 4 floats per thread per tile): first element */
#define CHUNK_E(t, r) ((((unsigned)(t) * R + (r)) * blockDim.x + threadIdx.x) * 4u)

template <int R, int BF, int V4 = 0> __device__ __forceinline__ void gn_fwd_t(const G &p) {
    unsigned bid = blockIdx.x, n = bid / (unsigned)p.G, g = bid - n * (unsigned)p.G;
    size_t base = ((size_t)n * p.C + (size_t)g * p.Cg) * p.S;
    const void *x = at(p.x, base, FX);
    void *y = atw(p.y, base, FY);
    unsigned M = (unsigned)p.M, S = (unsigned)p.S;
    float v[R][4];
    float s = 0.0f;
    for (int t = 0; t < p.tiles; t++) {
        #pragma unroll
        for (int r = 0; r < R; r++) {
            unsigned e = CHUNK_E(t, r);
            if (e < M) ld_chunk(x, e, M, p.v4, FX, v[r]);
            else v[r][0] = v[r][1] = v[r][2] = v[r][3] = 0.0f;
            s += (v[r][0] + v[r][1]) + (v[r][2] + v[r][3]);
        }
    }
    float mean = block_sum2(s, 0.0f).x / (float)M;
    float q = 0.0f;
    for (int t = 0; t < p.tiles; t++) {
        #pragma unroll
        for (int r = 0; r < R; r++) {
            unsigned e = CHUNK_E(t, r);
            if (e >= M) continue;
            if (p.tiles > 1) ld_chunk(x, e, M, p.v4, FX, v[r]);
            #pragma unroll
            for (int k = 0; k < 4; k++) if (e + k < M) { float d = v[r][k] - mean; q += d * d; }
        }
    }
    float rstd = rsqrtf(block_sum2(q, 0.0f).x / (float)M + p.eps);
    if (threadIdx.x == 0) { p.mean[bid] = mean; p.rstd[bid] = rstd; }
    unsigned c0 = g * (unsigned)p.Cg;
    for (int t = 0; t < p.tiles; t++) {
        #pragma unroll
        for (int r = 0; r < R; r++) {
            unsigned e = CHUNK_E(t, r);
            if (e >= M) continue;
            if (p.tiles > 1) ld_chunk(x, e, M, p.v4, FX, v[r]);
            unsigned cb = c0 + e / S; /* the chunk's channel when v4 (S % 4 == 0) */
            if (BF && V4) { /* bf16 variant: the chunk's scale and shift once */
                float sc = rstd * (p.gamma ? __ldg(p.gamma + cb) : 1.0f), be = p.beta ? __ldg(p.beta + cb) : 0.0f;
                float4 z = make_float4((v[r][0] - mean) * sc + be, (v[r][1] - mean) * sc + be,
                                       (v[r][2] - mean) * sc + be, (v[r][3] - mean) * sc + be);
                if (p.silu) { z.x *= sig(z.x); z.y *= sig(z.y); z.z *= sig(z.z); z.w *= sig(z.w); }
                nb_st4(y, e, FY, z);
                continue;
            }
            float o[4];
            #pragma unroll
            for (int k = 0; k < 4; k++) {
                unsigned c = p.v4 ? cb : chan(p, c0, e, k);
                float ga = p.gamma ? __ldg(p.gamma + c) : 1.0f, be = p.beta ? __ldg(p.beta + c) : 0.0f;
                float z = (v[r][k] - mean) * rstd * ga + be;
                o[k] = p.silu ? z * sig(z) : z;
            }
            if (p.v4) nb_st4(y, e, FY, make_float4(o[0], o[1], o[2], o[3]));
            else {
                #pragma unroll
                for (int k = 0; k < 4; k++) if (e + k < M) nb_st(y, e + k, FY, o[k]);
            }
        }
    }
}

/* backward: dx += rstd (dxh - mean(dxh) - xh mean(dxh xh)), dxh = dz gamma, dz = dy (times
 * silu'(z) when fused); per-channel partials of sum dz xh, sum dz into pg, pb [N, C] */
template <int R, int BF, int V4 = 0> __device__ __forceinline__ void gn_bwd_t(const G &p, float (&sg)[1024], float (&sb)[1024]) {
    unsigned bid = blockIdx.x, n = bid / (unsigned)p.G, g = bid - n * (unsigned)p.G;
    size_t base = ((size_t)n * p.C + (size_t)g * p.Cg) * p.S;
    const void *x = at(p.x, base, FX), *dy = at(p.dy, base, FY);
    unsigned M = (unsigned)p.M, S = (unsigned)p.S, Cg = (unsigned)p.Cg, c0 = g * Cg;
    unsigned lane = threadIdx.x & 31u;
    int part = p.pg != 0;
    if (part) for (unsigned c = threadIdx.x; c < Cg; c += blockDim.x) { sg[c] = 0.0f; sb[c] = 0.0f; }
    __syncthreads();
    float mean = p.mean[bid], rstd = p.rstd[bid];
    float xv[R][4], gv[R][4];
    float sd = 0.0f, sdx = 0.0f;
    for (int t = 0; t < p.tiles; t++) {
        #pragma unroll
        for (int r = 0; r < R; r++) {
            unsigned e = CHUNK_E(t, r);
            if (e >= M) continue; /* wuni: M % 128 == 0, so whole warps skip together */
            unsigned cb = c0 + e / S;
            ld_chunk(x, e, M, p.v4, FX, xv[r]);
            ld_chunk(dy, e, M, p.v4, FY, gv[r]);
            float pgs = 0.0f, pbs = 0.0f;
            if (BF && V4) { /* bf16 variant: gamma, beta once per chunk (M % 4 == 0: no tail) */
                float ga = p.gamma ? __ldg(p.gamma + cb) : 1.0f, be = p.beta ? __ldg(p.beta + cb) : 0.0f;
                #pragma unroll
                for (int k = 0; k < 4; k++) {
                    float xh = (xv[r][k] - mean) * rstd, dz = gv[r][k];
                    if (p.silu) { float z = xh * ga + be, sz = sig(z); dz *= sz * (1.0f + z * (1.0f - sz)); }
                    float dxh = dz * ga;
                    sd += dxh;
                    sdx += dxh * xh;
                    gv[r][k] = dz;
                    pgs += dz * xh;
                    pbs += dz;
                }
            } else
            #pragma unroll
            for (int k = 0; k < 4; k++) {
                unsigned c = p.v4 ? cb : chan(p, c0, e, k);
                float ga = p.gamma ? __ldg(p.gamma + c) : 1.0f;
                float xh = (xv[r][k] - mean) * rstd, dz = gv[r][k];
                if (p.silu) {
                    float be = p.beta ? __ldg(p.beta + c) : 0.0f, z = xh * ga + be, sz = sig(z);
                    dz *= sz * (1.0f + z * (1.0f - sz));
                }
                if (e + k >= M) dz = 0.0f;
                float dxh = dz * ga;
                sd += dxh;
                sdx += dxh * xh;
                gv[r][k] = dz; /* keep dz for the dx pass */
                if (part) {
                    if (p.v4) { pgs += dz * xh; pbs += dz; }
                    else if (e + k < M) { atomicAdd(&sg[c - c0], dz * xh); atomicAdd(&sb[c - c0], dz); }
                }
            }
            if (part && p.v4) {
                unsigned c = cb - c0;
                if (p.wuni) { /* the warp's 128 elements lie in one channel */
                    for (int o = 16; o > 0; o >>= 1) {
                        pgs += __shfl_xor_sync(0xffffffffu, pgs, o);
                        pbs += __shfl_xor_sync(0xffffffffu, pbs, o);
                    }
                    if (lane == 0) { atomicAdd(&sg[c], pgs); atomicAdd(&sb[c], pbs); }
                } else {
                    atomicAdd(&sg[c], pgs); atomicAdd(&sb[c], pbs);
                }
            }
        }
    }
    float2 tot = block_sum2(sd, sdx);
    float md = tot.x / (float)M, mdx = tot.y / (float)M;
    if (p.dx) {
        void *dx = atw(p.dx, base, FX);
        for (int t = 0; t < p.tiles; t++) {
            #pragma unroll
            for (int r = 0; r < R; r++) {
                unsigned e = CHUNK_E(t, r);
                if (e >= M) continue;
                unsigned cb = c0 + e / S;
                if (BF && V4 && p.tiles == 1) { /* bf16 variant: gamma once per chunk */
                    float ga = p.gamma ? __ldg(p.gamma + cb) : 1.0f, rm = rstd * mdx;
                    float4 d = make_float4(rstd * (gv[r][0] * ga - md) - (xv[r][0] - mean) * rstd * rm,
                                           rstd * (gv[r][1] * ga - md) - (xv[r][1] - mean) * rstd * rm,
                                           rstd * (gv[r][2] * ga - md) - (xv[r][2] - mean) * rstd * rm,
                                           rstd * (gv[r][3] * ga - md) - (xv[r][3] - mean) * rstd * rm);
                    if (!(p.ow & 1)) {
                        float4 q = nb_ld4(dx, e, FX);
                        d.x += q.x; d.y += q.y; d.z += q.z; d.w += q.w;
                    }
                    nb_st4(dx, e, FX, d);
                    continue;
                }
                if (p.tiles > 1) {
                    ld_chunk(x, e, M, p.v4, FX, xv[r]);
                    ld_chunk(dy, e, M, p.v4, FY, gv[r]);
                    #pragma unroll
                    for (int k = 0; k < 4; k++) if (p.silu) {
                        unsigned c = p.v4 ? cb : chan(p, c0, e, k);
                        float ga = p.gamma ? __ldg(p.gamma + c) : 1.0f, be = p.beta ? __ldg(p.beta + c) : 0.0f;
                        float z = (xv[r][k] - mean) * rstd * ga + be, sz = sig(z);
                        gv[r][k] *= sz * (1.0f + z * (1.0f - sz));
                    }
                }
                float o[4];
                #pragma unroll
                for (int k = 0; k < 4; k++) {
                    unsigned c = p.v4 ? cb : chan(p, c0, e, k);
                    float ga = p.gamma ? __ldg(p.gamma + c) : 1.0f;
                    float xh = (xv[r][k] - mean) * rstd;
                    o[k] = rstd * (gv[r][k] * ga - md - xh * mdx);
                }
                if (p.v4) {
                    float4 d = make_float4(o[0], o[1], o[2], o[3]);
                    if (!(p.ow & 1)) {
                        float4 q = nb_ld4(dx, e, FX);
                        d.x += q.x; d.y += q.y; d.z += q.z; d.w += q.w;
                    }
                    nb_st4(dx, e, FX, d);
                } else {
                    #pragma unroll
                    for (int k = 0; k < 4; k++)
                        if (e + k < M) nb_st(dx, e + k, FX, (p.ow & 1) ? o[k] : nb_ld(dx, e + k, FX) + o[k]);
                }
            }
        }
    }
    if (part) {
        __syncthreads();
        for (unsigned c = threadIdx.x; c < Cg; c += blockDim.x) {
            p.pg[(size_t)n * p.C + c0 + c] = sg[c];
            p.pb[(size_t)n * p.C + c0 + c] = sb[c];
        }
    }
}

/* R = 2, 4, 8: registers for 8, 16, 32 floats of x per thread (the backward, which also holds
 * dy, stops at 4: see gn_setup) */
/* LB: the bf16 variant's launch bounds (bwd2: 40 registers, 3 blocks of 512 per SM as the f32
 * kernel; elsewhere a minimum of blocks makes ptxas spill or take more registers) */
#define GN_FWD(R, LB) \
    extern "C" __global__ void __launch_bounds__(512) gn_fwd##R(const G p) { gn_fwd_t<R, 0>(p); } \
    extern "C" __global__ void __launch_bounds__ LB gn_fwd##R##_bf(const G p) { \
        if (p.v4) gn_fwd_t<R, 1, 1>(p); else gn_fwd_t<R, 1, 0>(p); }
#define GN_BWD(R, LB) \
    extern "C" __global__ void __launch_bounds__(512) gn_bwd##R(const G p) { \
        __shared__ float sg[1024], sb[1024]; gn_bwd_t<R, 0>(p, sg, sb); } \
    extern "C" __global__ void __launch_bounds__ LB gn_bwd##R##_bf(const G p) { \
        __shared__ float sg[1024], sb[1024]; \
        if (p.v4) gn_bwd_t<R, 1, 1>(p, sg, sb); else gn_bwd_t<R, 1, 0>(p, sg, sb); }
#if !defined(GN_ONLY) || defined(GN_ONLY_gn_fwd2) || defined(GN_ONLY_gn_fwd2_bf)
GN_FWD(2, (512))
#endif
#if !defined(GN_ONLY) || defined(GN_ONLY_gn_fwd4) || defined(GN_ONLY_gn_fwd4_bf)
GN_FWD(4, (512))
#endif
#if !defined(GN_ONLY) || defined(GN_ONLY_gn_fwd8) || defined(GN_ONLY_gn_fwd8_bf)
GN_FWD(8, (512))
#endif
#if !defined(GN_ONLY) || defined(GN_ONLY_gn_bwd2) || defined(GN_ONLY_gn_bwd2_bf)
GN_BWD(2, (512, 3))
#endif
#if !defined(GN_ONLY) || defined(GN_ONLY_gn_bwd4) || defined(GN_ONLY_gn_bwd4_bf)
GN_BWD(4, (512))
#endif

/* ---- the split path (gn_split_ok): a group's reductions spread over many blocks ----
 * Needs S % 8 == 0 and 16-byte aligned x, y / dy, dx: a chunk is 8 elements of one channel
 * (one 16-byte bf16 load, two f32 ones), and all of x, y, dy, dx f32 (BF = 0) or all bf16
 * (BF = 1; mixed storage takes the per-group kernels). Forward: gn_fst (per (n, c) plane:
 * mean and sum of squared deviations, two passes over registers), gn_fnm (per slice of a
 * group: combines its channels' statistics, saves mean / rstd, writes y). Backward: gn_bst
 * (per plane: sum dz xh, sum dz), gn_bdx (per slice: the group's sums from its channels' ones, dx; and dgamma / dbeta
 * summed over n in a fixed order). The slice kernels run their blocks in reverse order, so the
 * first read what the statistics kernel read last (still in L2). */
struct C8 { uint4 a, b; }; /* 8 f32 (a, b) or 8 bf16 (a), as loaded */
__device__ __forceinline__ C8 ld8(const void *p, size_t i, int bf) {
    C8 r;
    if (bf) { r.a = *(const uint4 *)((const unsigned short *)p + i); r.b = make_uint4(0u, 0u, 0u, 0u); }
    else { r.a = *(const uint4 *)((const float *)p + i); r.b = *(const uint4 *)((const float *)p + i + 4); }
    return r;
}
/* element k (0..7, a constant once unrolled) of a loaded chunk */
__device__ __forceinline__ float e8(const C8 &r, int k, int bf) {
    if (bf) {
        unsigned w = k < 2 ? r.a.x : k < 4 ? r.a.y : k < 6 ? r.a.z : r.a.w;
        return __uint_as_float((k & 1) ? (w & 0xffff0000u) : (w << 16));
    }
    const uint4 &q = k < 4 ? r.a : r.b;
    unsigned w = (k & 3) == 0 ? q.x : (k & 3) == 1 ? q.y : (k & 3) == 2 ? q.z : q.w;
    return __uint_as_float(w);
}
__device__ __forceinline__ void st8(void *p, size_t i, int bf, const float o[8]) {
    if (bf) {
        *(uint4 *)((unsigned short *)p + i) =
            make_uint4(nb_f2bf2(o[0], o[1]), nb_f2bf2(o[2], o[3]), nb_f2bf2(o[4], o[5]), nb_f2bf2(o[6], o[7]));
    } else {
        *(float4 *)((float *)p + i) = make_float4(o[0], o[1], o[2], o[3]);
        *(float4 *)((float *)p + i + 4) = make_float4(o[4], o[5], o[6], o[7]);
    }
}
/* sigmoid with a fast reciprocal (within 2 ulp; 1 / inf = 0) */
__device__ __forceinline__ float sigf(float z) { return __fdividef(1.0f, 1.0f + __expf(-z)); }
/* sums of a and b over the tp consecutive threads of a plane (tp a power of two, 8 .. 256),
 * returned to each of them, in a fixed order. Every thread of the block calls it. */
__device__ __forceinline__ float2 plane_sum2(float a, float b, unsigned tp) {
    __shared__ float2 sh[32];
    unsigned w = tp < 32u ? tp : 32u;
    for (unsigned o = w >> 1; o > 0u; o >>= 1) {
        a += __shfl_xor_sync(0xffffffffu, a, (int)o);
        b += __shfl_xor_sync(0xffffffffu, b, (int)o);
    }
    if (tp > 32u) { /* the plane's tp / 32 warps, in order */
        if ((threadIdx.x & 31u) == 0u) sh[threadIdx.x >> 5] = make_float2(a, b);
        __syncthreads();
        unsigned w0 = (threadIdx.x / tp) * (tp >> 5);
        a = 0.0f; b = 0.0f;
        for (unsigned k = 0; k < (tp >> 5); k++) { float2 v = sh[w0 + k]; a += v.x; b += v.y; }
        __syncthreads();
    }
    return make_float2(a, b);
}
/* sums of a and b over warp 0's lanes (called by warp 0 only), returned to each lane */
__device__ __forceinline__ float2 warp_sum2(float a, float b) {
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_xor_sync(0xffffffffu, a, o);
        b += __shfl_xor_sync(0xffffffffu, b, o);
    }
    return make_float2(a, b);
}
__device__ __forceinline__ float sum8(const C8 &r, int bf) {
    float s = 0.0f;
    #pragma unroll
    for (int k = 0; k < 8; k++) s += e8(r, k, bf);
    return s;
}
__device__ __forceinline__ float dev8(const C8 &r, int bf, float m) {
    float s = 0.0f;
    #pragma unroll
    for (int k = 0; k < 8; k++) { float d = e8(r, k, bf) - m; s += d * d; }
    return s;
}

/* forward statistics: plane pl = n * C + c (256 / tp planes per block of 256 threads):
 * pg[pl] = its mean, pb[pl] = its sum of squared deviations from that mean */
template <int BF> __device__ __forceinline__ void gn_fst_t(const G &p) {
    unsigned tp = (unsigned)p.tp, sub = threadIdx.x / tp, l = threadIdx.x - sub * tp;
    unsigned NC = (unsigned)p.N * (unsigned)p.C, pl = blockIdx.x * (blockDim.x / tp) + sub, S = (unsigned)p.S;
    int ok = pl < NC;
    const void *x = at(p.x, (size_t)(ok ? pl : 0u) * S, BF);
    unsigned e0 = l * 8u, e1 = e0 + tp * 8u;
    int h0 = ok && e0 < S, h1 = ok && e1 < S;
    C8 x0, x1;
    float s = 0.0f;
    if (h0) { x0 = ld8(x, e0, BF); s += sum8(x0, BF); }
    if (h1) { x1 = ld8(x, e1, BF); s += sum8(x1, BF); }
    for (unsigned e = e0 + tp * 16u; ok && e < S; e += tp * 8u) s += sum8(ld8(x, e, BF), BF);
    float mc = plane_sum2(s, 0.0f, tp).x / (float)S, q = 0.0f;
    if (h0) q += dev8(x0, BF, mc);
    if (h1) q += dev8(x1, BF, mc);
    for (unsigned e = e0 + tp * 16u; ok && e < S; e += tp * 8u) q += dev8(ld8(x, e, BF), BF, mc);
    q = plane_sum2(q, 0.0f, tp).x;
    if (ok && l == 0u) { p.pg[pl] = mc; p.pb[pl] = q; }
}

/* forward output: block = slice sl of group (n, g), 2 chunks per thread; the group's mean and
 * variance from its channels' (equal counts: mean of means; sum of squared deviations plus S
 * times the squared deviations of the channel means) */
template <int BF> __device__ __forceinline__ void gn_fnm_t(const G &p) {
    __shared__ float2 st;
    unsigned rb = gridDim.x - 1u - blockIdx.x, nsl = (unsigned)p.nsl, ng = rb / nsl, sl = rb - ng * nsl;
    unsigned n = ng / (unsigned)p.G, g = ng - n * (unsigned)p.G, Cg = (unsigned)p.Cg, c0 = g * Cg;
    unsigned M = (unsigned)p.M, S = (unsigned)p.S, C = (unsigned)p.C;
    size_t base = ((size_t)n * C + c0) * S;
    const void *x = at(p.x, base, BF);
    unsigned e0 = (sl * 2u * blockDim.x + threadIdx.x) * 8u, e1 = e0 + blockDim.x * 8u;
    int h0 = e0 < M, h1 = e1 < M;
    C8 x0, x1;
    if (h0) x0 = ld8(x, e0, BF);
    if (h1) x1 = ld8(x, e1, BF);
    if (p.self) { /* one block holds the group (nsl == 1): its statistics from the registers */
        float a = (h0 ? sum8(x0, BF) : 0.0f) + (h1 ? sum8(x1, BF) : 0.0f);
        float mean = block_sum2(a, 0.0f).x / (float)M;
        a = (h0 ? dev8(x0, BF, mean) : 0.0f) + (h1 ? dev8(x1, BF, mean) : 0.0f);
        float rstd = rsqrtf(block_sum2(a, 0.0f).x / (float)M + p.eps);
        if (threadIdx.x == 0u) { st = make_float2(mean, rstd); p.mean[ng] = mean; p.rstd[ng] = rstd; }
    } else if (threadIdx.x < 32u) {
        const float *cm = p.pg + (size_t)n * C + c0, *cq = p.pb + (size_t)n * C + c0;
        float a = 0.0f;
        for (unsigned c = threadIdx.x; c < Cg; c += 32u) a += cm[c];
        float mean = warp_sum2(a, 0.0f).x / (float)Cg, q = 0.0f;
        for (unsigned c = threadIdx.x; c < Cg; c += 32u) { float d = cm[c] - mean; q += cq[c] + (float)S * d * d; }
        float rstd = rsqrtf(warp_sum2(q, 0.0f).x / (float)M + p.eps);
        if (threadIdx.x == 0u) {
            st = make_float2(mean, rstd);
            if (sl == 0u) { p.mean[ng] = mean; p.rstd[ng] = rstd; }
        }
    }
    __syncthreads();
    float mean = st.x, rstd = st.y;
    void *y = atw(p.y, base, BF);
    #pragma unroll
    for (int u = 0; u < 2; u++) {
        if (!(u ? h1 : h0)) continue;
        unsigned e = u ? e1 : e0, c = c0 + e / S;
        float sc = rstd * (p.gamma ? __ldg(p.gamma + c) : 1.0f), be = p.beta ? __ldg(p.beta + c) : 0.0f;
        float o[8];
        #pragma unroll
        for (int k = 0; k < 8; k++) {
            float z = (e8(u ? x1 : x0, k, BF) - mean) * sc + be;
            o[k] = p.silu ? z * sigf(z) : z;
        }
        st8(y, e, BF, o);
    }
}

/* backward statistics: plane pl = n * C + c: pg[pl] = sum dz xh, pb[pl] = sum dz (dz = dy, times
 * silu'(z) when fused) */
template <int BF> __device__ __forceinline__ void bst_acc(const G &p, const C8 &xc, const C8 &gc, float mean,
                                                           float rstd, float ga, float be, float &a, float &b) {
    #pragma unroll
    for (int k = 0; k < 8; k++) {
        float xh = (e8(xc, k, BF) - mean) * rstd, dz = e8(gc, k, BF);
        if (p.silu) { float z = xh * ga + be, sz = sigf(z); dz *= sz * (1.0f + z * (1.0f - sz)); }
        a += dz * xh;
        b += dz;
    }
}
template <int BF> __device__ __forceinline__ void gn_bst_t(const G &p) {
    unsigned tp = (unsigned)p.tp, sub = threadIdx.x / tp, l = threadIdx.x - sub * tp;
    unsigned NC = (unsigned)p.N * (unsigned)p.C, pl = blockIdx.x * (blockDim.x / tp) + sub, S = (unsigned)p.S;
    float a = 0.0f, b = 0.0f;
    if (pl < NC) {
        unsigned n = pl / (unsigned)p.C, c = pl - n * (unsigned)p.C, ng = n * (unsigned)p.G + c / (unsigned)p.Cg;
        float mean = p.mean[ng], rstd = p.rstd[ng];
        float ga = p.gamma ? __ldg(p.gamma + c) : 1.0f, be = p.beta ? __ldg(p.beta + c) : 0.0f;
        const void *x = at(p.x, (size_t)pl * S, BF), *dy = at(p.dy, (size_t)pl * S, BF);
        for (unsigned e = l * 8u; e < S; e += tp * 16u) {
            unsigned e1 = e + tp * 8u;
            C8 x0 = ld8(x, e, BF), g0 = ld8(dy, e, BF), x1, g1;
            if (e1 < S) { x1 = ld8(x, e1, BF); g1 = ld8(dy, e1, BF); }
            bst_acc<BF>(p, x0, g0, mean, rstd, ga, be, a, b);
            if (e1 < S) bst_acc<BF>(p, x1, g1, mean, rstd, ga, be, a, b);
        }
    }
    float2 s = plane_sum2(a, b, tp);
    if (pl < NC && l == 0u) { p.pg[pl] = s.x; p.pb[pl] = s.y; }
}

/* backward dx: block = slice sl of group (n, g), 2 chunks per thread;
 * dx (+)= rstd (dz gamma - md - xh mdx), md = sum_c gamma_c pb / M, mdx = sum_c gamma_c pg / M.
 * The blocks of n == N - 1, sl == 0 also add dgamma, dbeta of the group's channels (sums over
 * n in order) */
template <int BF> __device__ __forceinline__ void bdx_chunk(const G &p, void *dx, unsigned e, unsigned c,
                                                             const C8 &xc, const C8 &gc, const C8 &dc, float mean,
                                                             float rstd, float md, float mdx) {
    float ga = p.gamma ? __ldg(p.gamma + c) : 1.0f, be = p.beta ? __ldg(p.beta + c) : 0.0f;
    float o[8];
    #pragma unroll
    for (int k = 0; k < 8; k++) {
        float xh = (e8(xc, k, BF) - mean) * rstd, dz = e8(gc, k, BF);
        if (p.silu) { float z = xh * ga + be, sz = sigf(z); dz *= sz * (1.0f + z * (1.0f - sz)); }
        o[k] = rstd * (dz * ga - md - xh * mdx);
        if (!(p.ow & 1)) o[k] += e8(dc, k, BF);
    }
    st8(dx, e, BF, o);
}
template <int BF> __device__ __forceinline__ void gn_bdx_t(const G &p) {
    __shared__ float2 st;
    unsigned rb = gridDim.x - 1u - blockIdx.x, nsl = (unsigned)p.nsl, ng = rb / nsl, sl = rb - ng * nsl;
    unsigned n = ng / (unsigned)p.G, g = ng - n * (unsigned)p.G, Cg = (unsigned)p.Cg, c0 = g * Cg;
    unsigned M = (unsigned)p.M, S = (unsigned)p.S, C = (unsigned)p.C;
    size_t base = ((size_t)n * C + c0) * S;
    const void *x = at(p.x, base, BF), *dy = at(p.dy, base, BF);
    void *dx = p.dx ? atw(p.dx, base, BF) : (void *)0;
    unsigned e0 = (sl * 2u * blockDim.x + threadIdx.x) * 8u, e1 = e0 + blockDim.x * 8u;
    int h0 = dx && e0 < M, h1 = dx && e1 < M, add = !(p.ow & 1);
    C8 x0, g0, d0, x1, g1, d1;
    if (h0) { x0 = ld8(x, e0, BF); g0 = ld8(dy, e0, BF); if (add) d0 = ld8(dx, e0, BF); }
    if (h1) { x1 = ld8(x, e1, BF); g1 = ld8(dy, e1, BF); if (add) d1 = ld8(dx, e1, BF); }
    float mean = p.mean[ng], rstd = p.rstd[ng];
    if (threadIdx.x < 32u) {
        const float *pg = p.pg + (size_t)n * C + c0, *pb = p.pb + (size_t)n * C + c0;
        float a = 0.0f, b = 0.0f;
        for (unsigned c = threadIdx.x; c < Cg; c += 32u) {
            float ga = p.gamma ? __ldg(p.gamma + c0 + c) : 1.0f;
            a += ga * pb[c];
            b += ga * pg[c];
        }
        float2 s = warp_sum2(a, b);
        if (threadIdx.x == 0u) st = make_float2(s.x / (float)M, s.y / (float)M);
    }
    if (n == (unsigned)p.N - 1u && sl == 0u && (p.dgamma || p.dbeta)) /* among the first blocks */
        for (unsigned c = threadIdx.x; c < Cg; c += blockDim.x) {
            float a = 0.0f, b = 0.0f;
            for (unsigned m = 0; m < (unsigned)p.N; m++) {
                a += p.pg[(size_t)m * C + c0 + c];
                b += p.pb[(size_t)m * C + c0 + c];
            }
            if (p.dgamma) p.dgamma[c0 + c] = (p.ow & 2) ? a : p.dgamma[c0 + c] + a;
            if (p.dbeta) p.dbeta[c0 + c] = (p.ow & 4) ? b : p.dbeta[c0 + c] + b;
        }
    __syncthreads();
    float md = st.x, mdx = st.y;
    if (h0) bdx_chunk<BF>(p, dx, e0, c0 + e0 / S, x0, g0, d0, mean, rstd, md, mdx);
    if (h1) bdx_chunk<BF>(p, dx, e1, c0 + e1 / S, x1, g1, d1, mean, rstd, md, mdx);
}
/* The split path runs for bf16 storage only (f32 measured slower, see the top): its kernels
 * exist as bf16 entries only, except gn_fnm, the f32 twin of gn_fnm_bf: never launched, but
 * compiled beside it because block_sum2's __shared__ arrays are then module-level (two users)
 * instead of gn_fnm_bf's own, and ptxas schedules gn_fnm_bf differently without it (same length,
 * other order: checked on NVRTC's sm_90 machine code); it stays until a GPU
 * run measures that change. Deleting the f32 twins of gn_fst / gn_bst / gn_bdx left their bf16
 * kernels' machine code, shared memory and constant bank byte for byte the same. */
#define GN_SPLIT(K, LB) \
    extern "C" __global__ void __launch_bounds__ LB gn_##K##_bf(const G p) { gn_##K##_t<1>(p); }
#if !defined(GN_ONLY) || defined(GN_ONLY_gn_fst_bf)
GN_SPLIT(fst, (256))
#endif
#if !defined(GN_ONLY) || defined(GN_ONLY_gn_fnm_bf)
extern "C" __global__ void __launch_bounds__(256) gn_fnm(const G p) { gn_fnm_t<0>(p); }
GN_SPLIT(fnm, (256))
#endif
#if !defined(GN_ONLY) || defined(GN_ONLY_gn_bst_bf)
GN_SPLIT(bst, (256))
#endif
#if !defined(GN_ONLY) || defined(GN_ONLY_gn_bdx_bf)
GN_SPLIT(bdx, (256))
#endif
/* dgamma[c] += sum_n pg[n, c]; dbeta[c] += sum_n pb[n, c]: a warp per channel, lane l sums
 * n = l, l + 32, ..., then a fixed shuffle tree (deterministic; no serial loop over N) */
#if !defined(GN_ONLY) || defined(GN_ONLY_gn_dgb)
extern "C" __global__ void gn_dgb(const G p) {
    unsigned lane = threadIdx.x & 31u, c = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (c >= (unsigned)p.C) return; /* whole warps: c is uniform per warp */
    float a = 0.0f, b = 0.0f;
    for (unsigned n = lane; n < (unsigned)p.N; n += 32u) { a += p.pg[(size_t)n * p.C + c]; b += p.pb[(size_t)n * p.C + c]; }
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_xor_sync(0xffffffffu, a, o);
        b += __shfl_xor_sync(0xffffffffu, b, o);
    }
    if (lane == 0) {
        if (p.dgamma) p.dgamma[c] = (p.ow & 2) ? a : p.dgamma[c] + a;
        if (p.dbeta) p.dbeta[c] = (p.ow & 4) ? b : p.dbeta[c] + b;
    }
}
#endif

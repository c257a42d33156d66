// Shared by the fused attention kernels (simt.cu, tc.cu, aux.cu): the argument structs (the
// host structs in tape_cuda_attn.c mirror them field by field), view access and helpers.
// Needs DP, FM and SBF defined (see simt.cu).
#pragma once
#include "graph/kernels/bf16.cuh"
typedef unsigned int u32;
struct Mat { void *p; long long bs, rs, cs; int bf; };
struct FwdArgs { Mat q, k, v, o; float *lse; int Tq, Tk, d, ntiles; float sl2; };
struct BwdArgs { Mat q, k, v, dout, dq, dk, dv; const float *lse, *delta; int dq_mode, kv_mode;
                 int Tq, Tk, d, ntiles; float sl2, scale;
                 Mat o; int fa_flags; /* nb_attn_bwd_fa: delta, options */ };
struct DeltaArgs { Mat o, dout, z; float *delta; long long rows; int T, d; };
struct FinArgs { Mat dst; const float *src; long long n; int T, d, add; };
constexpr unsigned FULL = 0xffffffffu;
__device__ __forceinline__ float pinf() { return __int_as_float(0x7f800000); }
/* storage dtype of a view: f32 (SBF 0), the view's flag (SBF 1), bf16 (SBF 2: every view
 * read or stored through mbf is bf16; an f32 dq accumulator is only used with atomics) */
__device__ __forceinline__ int mbf(const Mat &m) { return SBF == 2 ? 1 : SBF ? m.bf : 0; }
/* element (bh, r, c): FM modules know rs = 1, the others cs = 1 */
__device__ __forceinline__ long long at(const Mat &m, long long bh, int r, int c) {
    return bh * m.bs + (FM ? r + (long long)c * m.cs : (long long)r * m.rs + c);
}
/* gradient write: mode 0 atomicAdd (f32), 1 store, 2 add (one writer per element); the
 * row-major modules only accumulate atomically */
__device__ __forceinline__ void gw(const Mat &m, long long i, float x, int mode) {
    if (!FM || mode == 0) atomicAdd((float *)m.p + i, x);
    else if (mode == 1) nb_st(m.p, i, mbf(m), x);
    else nb_st(m.p, i, mbf(m), nb_ld(m.p, i, mbf(m)) + x);
}
/* Rows [r0, r0 + 64) x DP of the [T, d] matrix bh of view m into shared memory (stride S,
 * a multiple of 4), zero-padded, as f32. Row-major modules: float4 loads along features
 * when aligned. Feature-major modules (FM): each thread reads 8 adjacent positions of one
 * feature (two 4-wide loads) when T, cs and the base are multiples of 4, so a warp covers
 * whole 32-byte sectors and writes shared rows conflict-free; else scalar loads along
 * positions. NTH threads. */
template <int NTH>
__device__ __forceinline__ void ld_tile(float *s, int S, const Mat &m, long long bh, int r0, int T, int d) {
    const long long base = bh * m.bs;
    const int bf = mbf(m);
    if constexpr (!FM) {
        const float *src = (const float *)m.p + base;
        if ((d & 3) == 0 && (m.rs & 3) == 0 && ((unsigned long long)src & 15) == 0) {
            for (int i = threadIdx.x; i < 16 * DP; i += NTH) {
                const int r = i / (DP / 4), c = 4 * (i % (DP / 4));
                float4 x = {0.0f, 0.0f, 0.0f, 0.0f};
                if (r0 + r < T && c < d) x = *(const float4 *)(src + (long long)(r0 + r) * m.rs + c);
                *(float4 *)(s + r * S + c) = x;
            }
            return;
        }
        for (int i = threadIdx.x; i < 64 * DP; i += NTH) {
            const int r = i / DP, c = i % DP;
            s[r * S + c] = (r0 + r < T && c < d) ? src[(long long)(r0 + r) * m.rs + c] : 0.0f;
        }
    } else {
        const bool al = ((unsigned long long)m.p & (bf ? 7 : 15)) == 0 && (base & 3) == 0;
        if (al && (T & 3) == 0 && (m.cs & 3) == 0) {
            for (int i = threadIdx.x; i < 8 * DP; i += NTH) {
                const int c = i % DP, r = 8 * (i / DP);
                const long long gi = base + (long long)c * m.cs + r0 + r;
                float4 x0 = {0.0f, 0.0f, 0.0f, 0.0f}, x1 = x0;
                if (c < d && r0 + r < T) x0 = nb_ld4(m.p, gi, bf);
                if (c < d && r0 + r + 4 < T) x1 = nb_ld4(m.p, gi + 4, bf);
                float *o = s + r * S + c;
                o[0] = x0.x; o[S] = x0.y; o[2 * S] = x0.z; o[3 * S] = x0.w;
                o[4 * S] = x1.x; o[5 * S] = x1.y; o[6 * S] = x1.z; o[7 * S] = x1.w;
            }
            return;
        }
        for (int i = threadIdx.x; i < 64 * DP; i += NTH) {
            const int c = i / 64, r = i % 64;
            s[r * S + c] = (r0 + r < T && c < d) ? nb_ld(m.p, base + r0 + r + (long long)c * m.cs, bf) : 0.0f;
        }
    }
}
__device__ __forceinline__ float comp(const float4 &v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
__device__ __forceinline__ float4 ld4(const float *p) { return *(const float4 *)p; }
/* float2 atomics need an f32, row-major (cs = 1) view with even strides, 8-byte aligned */
__device__ __forceinline__ bool pair_ok(const Mat &m) {
    return !FM && (!m.p || (((m.bs | m.rs) & 1) == 0 && ((unsigned long long)m.p & 7) == 0));
}

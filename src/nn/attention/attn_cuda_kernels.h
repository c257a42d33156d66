/* CUDA source of the tape's fused scaled-dot-product attention (tape_cuda_attn.c), as strings
 * that NVRTC compiles at run time, specialised by a prefix "#define DP <16|32|64|128>" (the head
 * dim rounded up; tiles are zero-padded to DP columns, the true d is a run-time argument).
 *
 * Further prefixes "#define FM <0|1>" (feature-major views) and "#define SBF <0|1|2>" (f32
 * storage / each view's own dtype / all bf16) specialise the loads, stores and gradient writes
 * at compile time, so the row-major f32 modules compile to the code of the original [BH,T,d]
 * kernels and the all-bf16 ones carry no dtype branches (a run-time dtype costs ~30 registers).
 *
 * The code is written inside NB_ATTN_STR(...), so it may not contain preprocessor directives
 * (use _Pragma) and all lines collapse to one in compiler messages.
 *
 * Layout: every tensor is a strided view (struct Mat, attn_cuda.h's nb_attn_view): element
 * (bh, position t, feature i) at p[bh bs + t rs + i cs], f32 or bf16 (Mat.bf; bf16_cuda.h's
 * nb_ld / nb_st: loads widen to f32, stores round to nearest even). nb_tape_attention uses
 * [BH,T,d] row-major (cs = 1); the fused QKV op reads q, k, v straight from the legacy qkv layout
 * [N, heads*3d, L] (rs = 1, cs = L: feature-major, positions contiguous; tiles are then loaded
 * along positions, coalesced) and writes o in [N, heads*d, L]. Shared tiles are f32 either way,
 * so the products below do not depend on the layout. lse [BH,Tq] (f32) holds the row
 * log-sum-exp of the scaled scores in base 2 (log2 sum_j 2^(s_ij * scale * log2 e)).
 * Gradient writes (gw) have a mode: 0 atomicAdd (f32 only; the buffers may alias), 1 store,
 * 2 load + add + store (1 and 2: one writer per element; dq only when there is one key tile).
 *
 * SIMT fp32 kernels (256 threads, a 16 x 16 thread grid; thread (ty, tx) owns rows ty + 16 r and
 * columns tx + 16 c of every tile; the 16 lanes of a row group sit in one half-warp, so row
 * reductions are 4 xor shuffles). Products read float4 along shared rows whose strides (DP + 4,
 * BK + 4) put the 16 column groups' rows in distinct banks.
 *   nb_attn_fwd    one block per (BQ query rows, bh): Q tile resident, loops over BK-key tiles:
 *                  S = Q K^T (registers), online softmax (running max m, sum l; O rescaled),
 *                  P -> shared tile, O += P V. Never holds more than BQ x BK scores.
 *   nb_attn_delta  D_i = sum_e dO_ie O_ie, one warp per row (row-major views), or
 *   nb_attn_delta_t  one thread per row (feature-major views: coalesced along positions); both
 *                  also zero an f32 dq accumulator z when z.p is set (store mode, dq atomics).
 *   nb_attn_dq_fin dq (any view / dtype) = [dq +] an f32 accumulator [BH, d, Tq] (bf16 dq).
 *   nb_attn_bwd    FlashAttention-2: one block per (BK keys, bh), K and V resident, dK and dV in
 *                  registers; loops over query tiles: recompute S and P = 2^(S scale log2e - lse),
 *                  dP = dO V^T, dS = P (dP - D) scale; dV += P^T dO, dK += dS^T Q, and
 *                  dQ += dS K added to global memory with atomics (so dQ's summation order over
 *                  key tiles is not deterministic; each element gets ceil(Tk / BK) adds; the dQ
 *                  step gives each thread adjacent column pairs for float2 atomics on sm_90+).
 * With mode 0 (nb_tape_attention) gradients ACCUMULATE into the given buffers: dk and dv get one
 * atomic add per element (so they stay correct when the buffers alias dq, e.g. self-attention on
 * one value). The fused QKV op uses modes 1 / 2 for dk, dv (their block is the only writer) and
 * for dq when Tk <= 64; else dq is zeroed by the delta kernel (f32) or accumulated in an f32
 * scratch and converted by nb_attn_dq_fin (bf16).
 */
#ifndef NB_NN_ATTN_CUDA_KERNELS_H
#define NB_NN_ATTN_CUDA_KERNELS_H

#include "nn/common/bf16_cuda.h"

#define NB_ATTN_STR(...) #__VA_ARGS__

/* Arguments (the host structs in tape_cuda_attn.c mirror these field by field), shared helpers. */
#define NB_ATTN_SRC_HEAD                                                                      \
    NB_ATTN_STR(                                                                              \
    typedef unsigned int u32;                                                                 \
    struct Mat { void *p; long long bs, rs, cs; int bf; };                                    \
    struct FwdArgs { Mat q, k, v, o; float *lse; int Tq, Tk, d, ntiles; float sl2; };         \
    struct BwdArgs { Mat q, k, v, dout, dq, dk, dv; const float *lse, *delta; int dq_mode, kv_mode; \
                     int Tq, Tk, d, ntiles; float sl2, scale;       \
                     Mat o; int fa_flags; /* nb_attn_bwd_fa: delta, options */ };                              \
    struct DeltaArgs { Mat o, dout, z; float *delta; long long rows; int T, d; };             \
    struct FinArgs { Mat dst; const float *src; long long n; int T, d, add; };                \
    constexpr unsigned FULL = 0xffffffffu;                                                    \
    __device__ __forceinline__ float pinf() { return __int_as_float(0x7f800000); }           \
    /* storage dtype of a view: f32 (SBF 0), the view's flag (SBF 1), bf16 (SBF 2: every view \
     * read or stored through mbf is bf16; an f32 dq accumulator is only used with atomics) */  \
    __device__ __forceinline__ int mbf(const Mat &m) { return SBF == 2 ? 1 : SBF ? m.bf : 0; } \
    /* element (bh, r, c): FM modules know rs = 1, the others cs = 1 */                       \
    __device__ __forceinline__ long long at(const Mat &m, long long bh, int r, int c) {       \
        return bh * m.bs + (FM ? r + (long long)c * m.cs : (long long)r * m.rs + c);          \
    }                                                                                         \
    /* gradient write: mode 0 atomicAdd (f32), 1 store, 2 add (one writer per element); the   \
     * row-major modules only accumulate atomically */                                        \
    __device__ __forceinline__ void gw(const Mat &m, long long i, float x, int mode) {        \
        if (!FM || mode == 0) atomicAdd((float *)m.p + i, x);                                 \
        else if (mode == 1) nb_st(m.p, i, mbf(m), x);                                         \
        else nb_st(m.p, i, mbf(m), nb_ld(m.p, i, mbf(m)) + x);                                \
    }                                                                                         \
    /* Rows [r0, r0 + 64) x DP of the [T, d] matrix bh of view m into shared memory (stride S, \
     * a multiple of 4), zero-padded, as f32. Row-major modules: float4 loads along features  \
     * when aligned. Feature-major modules (FM): each thread reads 8 adjacent positions of one \
     * feature (two 4-wide loads) when T, cs and the base are multiples of 4, so a warp covers \
     * whole 32-byte sectors and writes shared rows conflict-free; else scalar loads along     \
     * positions. NTH threads. */                                                             \
    template <int NTH>                                                                        \
    __device__ __forceinline__ void ld_tile(float *s, int S, const Mat &m, long long bh, int r0, int T, int d) { \
        const long long base = bh * m.bs;                                                     \
        const int bf = mbf(m);                                                                \
        if constexpr (!FM) {                                                                  \
            const float *src = (const float *)m.p + base;                                     \
            if ((d & 3) == 0 && (m.rs & 3) == 0 && ((unsigned long long)src & 15) == 0) {     \
                for (int i = threadIdx.x; i < 16 * DP; i += NTH) {                            \
                    const int r = i / (DP / 4), c = 4 * (i % (DP / 4));                       \
                    float4 x = {0.0f, 0.0f, 0.0f, 0.0f};                                      \
                    if (r0 + r < T && c < d) x = *(const float4 *)(src + (long long)(r0 + r) * m.rs + c); \
                    *(float4 *)(s + r * S + c) = x;                                           \
                }                                                                             \
                return;                                                                       \
            }                                                                                 \
            for (int i = threadIdx.x; i < 64 * DP; i += NTH) {                                \
                const int r = i / DP, c = i % DP;                                             \
                s[r * S + c] = (r0 + r < T && c < d) ? src[(long long)(r0 + r) * m.rs + c] : 0.0f; \
            }                                                                                 \
        } else {                                                                              \
            const bool al = ((unsigned long long)m.p & (bf ? 7 : 15)) == 0 && (base & 3) == 0; \
            if (al && (T & 3) == 0 && (m.cs & 3) == 0) {                                      \
                for (int i = threadIdx.x; i < 8 * DP; i += NTH) {                             \
                    const int c = i % DP, r = 8 * (i / DP);                                   \
                    const long long gi = base + (long long)c * m.cs + r0 + r;                 \
                    float4 x0 = {0.0f, 0.0f, 0.0f, 0.0f}, x1 = x0;                            \
                    if (c < d && r0 + r < T) x0 = nb_ld4(m.p, gi, bf);                        \
                    if (c < d && r0 + r + 4 < T) x1 = nb_ld4(m.p, gi + 4, bf);                \
                    float *o = s + r * S + c;                                                 \
                    o[0] = x0.x; o[S] = x0.y; o[2 * S] = x0.z; o[3 * S] = x0.w;               \
                    o[4 * S] = x1.x; o[5 * S] = x1.y; o[6 * S] = x1.z; o[7 * S] = x1.w;       \
                }                                                                             \
                return;                                                                       \
            }                                                                                 \
            for (int i = threadIdx.x; i < 64 * DP; i += NTH) {                                \
                const int c = i / 64, r = i % 64;                                             \
                s[r * S + c] = (r0 + r < T && c < d) ? nb_ld(m.p, base + r0 + r + (long long)c * m.cs, bf) : 0.0f; \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    __device__ __forceinline__ float comp(const float4 &v, int i) {                           \
        return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;                              \
    }                                                                                         \
    __device__ __forceinline__ float4 ld4(const float *p) { return *(const float4 *)p; }      \
    /* float2 atomics need an f32, row-major (cs = 1) view with even strides, 8-byte aligned */ \
    __device__ __forceinline__ bool pair_ok(const Mat &m) {                                   \
        return !FM && (!m.p || (((m.bs | m.rs) & 1) == 0 && ((unsigned long long)m.p & 7) == 0)); \
    }                                                                                         \
    )

/* Vector atomics: float2 atomicAdd exists from sm_90 on (real directives: outside NB_ATTN_STR). */
#define NB_ATTN_SRC_ATOMIC                                                                 \
    "\n#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n"                                  \
    "#define PAIR_ATOMICS 1\n"                                                                \
    "__device__ __forceinline__ void atomic_add2(float *p, float x, float y) {\n"             \
    "    float2 v; v.x = x; v.y = y; atomicAdd((float2 *)p, v);\n"                            \
    "}\n"                                                                                     \
    "#else\n"                                                                                 \
    "#define PAIR_ATOMICS 0\n"                                                                \
    "__device__ __forceinline__ void atomic_add2(float *p, float x, float y) {\n"             \
    "    atomicAdd(p, x); atomicAdd(p + 1, y);\n"                                             \
    "}\n"                                                                                     \
    "#endif\n"

/* Tile sizes of the SIMT kernels: row strides are multiples of 4 (float4 reads along rows) and
 * 4 mod 16 floats apart for the 16 column-group threads (conflict-free 128-bit reads). */
#define NB_ATTN_SRC_SIMT_HEAD                                                                 \
    NB_ATTN_STR(                                                                              \
    constexpr int NT = 256;                                                                   \
    constexpr int BQ = 64, BK = 64;                                                           \
    constexpr int TM = BQ / 16, TN = BK / 16, DC = DP / 16;                                   \
    constexpr int SD = DP + 4, SP = BK + 4;                                                   \
    )

/* Forward, SIMT fp32. Dynamic shared memory: ((BQ + 2 BK) SD + BQ SP) floats. */
#define NB_ATTN_SRC_FWD                                                                       \
    NB_ATTN_STR(                                                                              \
    extern "C" __global__ void __launch_bounds__(256) nb_attn_fwd(const FwdArgs a) {          \
        extern __shared__ float sm[];                                                         \
        float *sQ = sm, *sK = sQ + BQ * SD, *sV = sK + BK * SD, *sP = sV + BK * SD;           \
        const int tile = blockIdx.x % a.ntiles;                                               \
        const long long bh = blockIdx.x / a.ntiles;                                           \
        const int q0 = tile * BQ, tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;            \
        ld_tile<NT>(sQ, SD, a.q, bh, q0, a.Tq, a.d);                            \
        float m[TM], l[TM], acc[TM][DC];                                                      \
        _Pragma("unroll") for (int r = 0; r < TM; r++) {                                      \
            m[r] = -pinf();                                                                   \
            l[r] = 0.0f;                                                                      \
            _Pragma("unroll") for (int c = 0; c < DC; c++) acc[r][c] = 0.0f;                  \
        }                                                                                     \
        for (int k0 = 0; k0 < a.Tk; k0 += BK) {                                               \
            __syncthreads();                                                                  \
            ld_tile<NT>(sK, SD, a.k, bh, k0, a.Tk, a.d);                                      \
            ld_tile<NT>(sV, SD, a.v, bh, k0, a.Tk, a.d);                                      \
            __syncthreads();                                                                  \
            float s[TM][TN];                                                                  \
            _Pragma("unroll") for (int r = 0; r < TM; r++)                                    \
                _Pragma("unroll") for (int c = 0; c < TN; c++) s[r][c] = 0.0f;                \
            _Pragma("unroll 2") for (int e = 0; e < DP; e += 4) {                             \
                float4 qv[TM], kv[TN];                                                        \
                _Pragma("unroll") for (int r = 0; r < TM; r++) qv[r] = ld4(sQ + (ty + 16 * r) * SD + e); \
                _Pragma("unroll") for (int c = 0; c < TN; c++) kv[c] = ld4(sK + (tx + 16 * c) * SD + e); \
                _Pragma("unroll") for (int r = 0; r < TM; r++)                                \
                    _Pragma("unroll") for (int c = 0; c < TN; c++) {                          \
                        s[r][c] = fmaf(qv[r].x, kv[c].x, s[r][c]);                            \
                        s[r][c] = fmaf(qv[r].y, kv[c].y, s[r][c]);                            \
                        s[r][c] = fmaf(qv[r].z, kv[c].z, s[r][c]);                            \
                        s[r][c] = fmaf(qv[r].w, kv[c].w, s[r][c]);                            \
                    }                                                                         \
            }                                                                                 \
            _Pragma("unroll") for (int r = 0; r < TM; r++) {                                  \
                float mx = -pinf();                                                           \
                _Pragma("unroll") for (int c = 0; c < TN; c++) {                              \
                    s[r][c] = (k0 + tx + 16 * c < a.Tk) ? s[r][c] * a.sl2 : -pinf();          \
                    mx = fmaxf(mx, s[r][c]);                                                  \
                }                                                                             \
                _Pragma("unroll") for (int o = 8; o > 0; o >>= 1)                             \
                    mx = fmaxf(mx, __shfl_xor_sync(FULL, mx, o));                             \
                const float mn = fmaxf(m[r], mx); /* finite: the tile has a valid key */      \
                const float al = exp2f(m[r] - mn);                                            \
                float sum = 0.0f;                                                             \
                _Pragma("unroll") for (int c = 0; c < TN; c++) {                              \
                    const float p = exp2f(s[r][c] - mn);                                      \
                    sum += p;                                                                 \
                    sP[(ty + 16 * r) * SP + tx + 16 * c] = p;                                 \
                }                                                                             \
                _Pragma("unroll") for (int o = 8; o > 0; o >>= 1)                             \
                    sum += __shfl_xor_sync(FULL, sum, o);                                     \
                l[r] = l[r] * al + sum;                                                       \
                m[r] = mn;                                                                    \
                _Pragma("unroll") for (int c = 0; c < DC; c++) acc[r][c] *= al;               \
            }                                                                                 \
            __syncthreads();                                                                  \
            const int kn = min(BK, a.Tk - k0); /* P = 0 and V = 0 on padding keys */          \
            _Pragma("unroll 2") for (int j = 0; j < kn; j += 4) {                             \
                float4 pv[TM];                                                                \
                _Pragma("unroll") for (int r = 0; r < TM; r++) pv[r] = ld4(sP + (ty + 16 * r) * SP + j); \
                _Pragma("unroll") for (int jj = 0; jj < 4; jj++) {                            \
                    float vv[DC];                                                             \
                    _Pragma("unroll") for (int c = 0; c < DC; c++) vv[c] = sV[(j + jj) * SD + tx + 16 * c]; \
                    _Pragma("unroll") for (int r = 0; r < TM; r++)                            \
                        _Pragma("unroll") for (int c = 0; c < DC; c++)                        \
                            acc[r][c] = fmaf(comp(pv[r], jj), vv[c], acc[r][c]);              \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        _Pragma("unroll") for (int r = 0; r < TM; r++) {                                      \
            const int row = q0 + ty + 16 * r;                                                 \
            if (row >= a.Tq) continue;                                                        \
            const float inv = 1.0f / l[r];                                                    \
            _Pragma("unroll") for (int c = 0; c < DC; c++) {                                  \
                const int col = tx + 16 * c;                                                  \
                if (col < a.d) nb_st(a.o.p, at(a.o, bh, row, col), mbf(a.o), acc[r][c] * inv);  \
            }                                                                                 \
            if (tx == 0) a.lse[bh * a.Tq + row] = m[r] + log2f(l[r]);                         \
        }                                                                                     \
    }                                                                                         \
    )

/* D_i = sum_e dO_ie O_ie (row i = bh * T + t): nb_attn_delta one warp per row (grid-stride
 * over warps), nb_attn_delta_t one thread per row; both zero z's row when z.p is set. */
#define NB_ATTN_SRC_DELTA                                                                     \
    NB_ATTN_STR(                                                                              \
    extern "C" __global__ void nb_attn_delta(const DeltaArgs a) {                             \
        const int lane = threadIdx.x & 31;                                                    \
        const long long warps = (long long)gridDim.x * (blockDim.x >> 5);                     \
        for (long long row = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);  \
             row < a.rows; row += warps) {                                                    \
            const long long bh = row / a.T;                                                   \
            const int t = (int)(row - bh * a.T);                                              \
            const long long oi = at(a.o, bh, t, 0), gi = at(a.dout, bh, t, 0);                \
            float s = 0.0f;                                                                   \
            for (int e = lane; e < a.d; e += 32)                                              \
                s += nb_ld(a.o.p, oi + e * a.o.cs, mbf(a.o)) * nb_ld(a.dout.p, gi + e * a.dout.cs, mbf(a.dout)); \
            _Pragma("unroll") for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(FULL, s, o); \
            if (lane == 0) a.delta[row] = s;                                                  \
            if (a.z.p)                                                                        \
                for (int e = lane; e < a.d; e += 32) ((float *)a.z.p)[at(a.z, bh, t, e)] = 0.0f; \
        }                                                                                     \
    }                                                                                         \
    extern "C" __global__ void nb_attn_delta_t(const DeltaArgs a) {                           \
        for (long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x; row < a.rows;  \
             row += (long long)gridDim.x * blockDim.x) {                                      \
            const long long bh = row / a.T;                                                   \
            const int t = (int)(row - bh * a.T);                                              \
            const long long oi = at(a.o, bh, t, 0), gi = at(a.dout, bh, t, 0);                \
            float s = 0.0f;                                                                   \
            for (int e = 0; e < a.d; e++)                                                     \
                s += nb_ld(a.o.p, oi + e * a.o.cs, mbf(a.o)) * nb_ld(a.dout.p, gi + e * a.dout.cs, mbf(a.dout)); \
            a.delta[row] = s;                                                                 \
            if (a.z.p)                                                                        \
                for (int e = 0; e < a.d; e++) ((float *)a.z.p)[at(a.z, bh, t, e)] = 0.0f;     \
        }                                                                                     \
    }                                                                                         \
    /* dst(bh, t, i) = [dst +] src[(bh d + i) T + t] */                                       \
    extern "C" __global__ void nb_attn_dq_fin(const FinArgs a) {                              \
        const long long dT = (long long)a.d * a.T;                                            \
        for (long long x = (long long)blockIdx.x * blockDim.x + threadIdx.x; x < a.n;         \
             x += (long long)gridDim.x * blockDim.x) {                                        \
            const long long bh = x / dT, r = x - bh * dT;                                     \
            const int i = (int)(r / a.T), t = (int)(r - (long long)i * a.T);                  \
            const long long gi = at(a.dst, bh, t, i);                                         \
            float v = a.src[x];                                                               \
            if (a.add) v += nb_ld(a.dst.p, gi, mbf(a.dst));                                     \
            nb_st(a.dst.p, gi, mbf(a.dst), v);                                                  \
        }                                                                                     \
    }                                                                                         \
    )

/* Backward, SIMT fp32. Dynamic shared memory: (2 BK + 2 BQ) SD + 3 BQ SP + 2 BQ floats:
 * K, V, Q, dO tiles; P and dS key-major (for dV, dK: float4 along queries) and dS query-major
 * (for dQ: float4 along keys). */
#define NB_ATTN_SRC_BWD                                                                       \
    NB_ATTN_STR(                                                                              \
    extern "C" __global__ void __launch_bounds__(256) nb_attn_bwd(const BwdArgs a) {          \
        extern __shared__ float sm[];                                                         \
        float *sK = sm, *sV = sK + BK * SD, *sQ = sV + BK * SD, *sO = sQ + BQ * SD;           \
        float *sPt = sO + BQ * SD, *sSt = sPt + BK * SP, *sS = sSt + BK * SP;                 \
        float *sL = sS + BQ * SP, *sD = sL + BQ;                                              \
        const int tile = blockIdx.x % a.ntiles;                                               \
        const long long bh = blockIdx.x / a.ntiles;                                           \
        const int k0 = tile * BK, tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;            \
        const float *lse = a.lse + bh * a.Tq, *delta = a.delta + bh * a.Tq;                   \
        ld_tile<NT>(sK, SD, a.k, bh, k0, a.Tk, a.d);                                          \
        ld_tile<NT>(sV, SD, a.v, bh, k0, a.Tk, a.d);                                          \
        const bool kv_grad = a.dk.p || a.dv.p;                                                \
        float dk[TN][DC], dv[TN][DC];                                                         \
        _Pragma("unroll") for (int r = 0; r < TN; r++)                                        \
            _Pragma("unroll") for (int c = 0; c < DC; c++) dk[r][c] = dv[r][c] = 0.0f;        \
        for (int q0 = 0; q0 < a.Tq; q0 += BQ) {                                               \
            __syncthreads();                                                                  \
            ld_tile<NT>(sQ, SD, a.q, bh, q0, a.Tq, a.d);                                      \
            ld_tile<NT>(sO, SD, a.dout, bh, q0, a.Tq, a.d);                                   \
            if (tid < BQ) {                                                                   \
                const bool ok = q0 + tid < a.Tq;                                              \
                sL[tid] = ok ? lse[q0 + tid] : pinf(); /* P = 0 on padding rows */            \
                sD[tid] = ok ? delta[q0 + tid] : 0.0f;                                        \
            }                                                                                 \
            __syncthreads();                                                                  \
            float s[TM][TN], dp[TM][TN];                                                      \
            _Pragma("unroll") for (int r = 0; r < TM; r++)                                    \
                _Pragma("unroll") for (int c = 0; c < TN; c++) s[r][c] = dp[r][c] = 0.0f;     \
            for (int e = 0; e < DP; e += 4) {                                                 \
                float4 qv[TM], ov[TM], kv[TN], vv[TN];                                        \
                _Pragma("unroll") for (int r = 0; r < TM; r++) {                              \
                    qv[r] = ld4(sQ + (ty + 16 * r) * SD + e);                                 \
                    ov[r] = ld4(sO + (ty + 16 * r) * SD + e);                                 \
                }                                                                             \
                _Pragma("unroll") for (int c = 0; c < TN; c++) {                              \
                    kv[c] = ld4(sK + (tx + 16 * c) * SD + e);                                 \
                    vv[c] = ld4(sV + (tx + 16 * c) * SD + e);                                 \
                }                                                                             \
                _Pragma("unroll") for (int r = 0; r < TM; r++)                                \
                    _Pragma("unroll") for (int c = 0; c < TN; c++)                            \
                        _Pragma("unroll") for (int u = 0; u < 4; u++) {                       \
                            s[r][c] = fmaf(comp(qv[r], u), comp(kv[c], u), s[r][c]);          \
                            dp[r][c] = fmaf(comp(ov[r], u), comp(vv[c], u), dp[r][c]);        \
                        }                                                                     \
            }                                                                                 \
            _Pragma("unroll") for (int r = 0; r < TM; r++) {                                  \
                const int i = ty + 16 * r;                                                    \
                const float li = sL[i], di = sD[i];                                           \
                _Pragma("unroll") for (int c = 0; c < TN; c++) {                              \
                    const int j = tx + 16 * c;                                                \
                    const float p = (k0 + j < a.Tk) ? exp2f(s[r][c] * a.sl2 - li) : 0.0f;     \
                    const float ds = p * (dp[r][c] - di) * a.scale;                           \
                    sPt[j * SP + i] = p;                                                      \
                    sSt[j * SP + i] = ds;                                                     \
                    sS[i * SP + j] = ds;                                                      \
                }                                                                             \
            }                                                                                 \
            __syncthreads();                                                                  \
            if (kv_grad) {                                                                    \
                const int qn = min(BQ, a.Tq - q0); /* P = dS = 0, Q = dO = 0 past it */       \
                for (int i = 0; i < qn; i += 4) {                                             \
                    float4 pj[TN], sj[TN];                                                    \
                    _Pragma("unroll") for (int r = 0; r < TN; r++) {                          \
                        pj[r] = ld4(sPt + (ty + 16 * r) * SP + i);                            \
                        sj[r] = ld4(sSt + (ty + 16 * r) * SP + i);                            \
                    }                                                                         \
                    _Pragma("unroll") for (int u = 0; u < 4; u++) {                           \
                        float ov[DC], qv[DC];                                                 \
                        _Pragma("unroll") for (int c = 0; c < DC; c++) {                      \
                            ov[c] = sO[(i + u) * SD + tx + 16 * c];                           \
                            qv[c] = sQ[(i + u) * SD + tx + 16 * c];                           \
                        }                                                                     \
                        _Pragma("unroll") for (int r = 0; r < TN; r++)                        \
                            _Pragma("unroll") for (int c = 0; c < DC; c++) {                  \
                                dv[r][c] = fmaf(comp(pj[r], u), ov[c], dv[r][c]);             \
                                dk[r][c] = fmaf(comp(sj[r], u), qv[c], dk[r][c]);             \
                            }                                                                 \
                    }                                                                         \
                }                                                                             \
            }                                                                                 \
            if (a.dq.p) {                                                                     \
                /* columns in adjacent pairs (DP >= 32): col(c) = 32 (c / 2) + 2 tx + c % 2, so \
                 * K is read as float2 and dq gets float2 atomics */                            \
                float g[TM][DC];                                                              \
                _Pragma("unroll") for (int r = 0; r < TM; r++)                                \
                    _Pragma("unroll") for (int c = 0; c < DC; c++) g[r][c] = 0.0f;            \
                const int kn = min(BK, a.Tk - k0); /* dS = 0, K = 0 past it */                \
                for (int j = 0; j < kn; j += 4) {                                             \
                    float4 sv[TM];                                                            \
                    _Pragma("unroll") for (int r = 0; r < TM; r++) sv[r] = ld4(sS + (ty + 16 * r) * SP + j); \
                    _Pragma("unroll") for (int u = 0; u < 4; u++) {                           \
                        float kv[DC];                                                         \
                        if constexpr (DC >= 2) {                                              \
                            _Pragma("unroll") for (int c = 0; c < DC; c += 2) {               \
                                const float2 x = *(const float2 *)(sK + (j + u) * SD + 16 * c + 2 * tx); \
                                kv[c] = x.x;                                                  \
                                kv[c + 1] = x.y;                                              \
                            }                                                                 \
                        } else {                                                              \
                            kv[0] = sK[(j + u) * SD + tx];                                    \
                        }                                                                     \
                        _Pragma("unroll") for (int r = 0; r < TM; r++)                        \
                            _Pragma("unroll") for (int c = 0; c < DC; c++)                    \
                                g[r][c] = fmaf(comp(sv[r], u), kv[c], g[r][c]);               \
                    }                                                                         \
                }                                                                             \
                const bool pairs = PAIR_ATOMICS && (a.d & 1) == 0 && a.dq_mode == 0 &&        \
                                   pair_ok(a.dq);                                             \
                _Pragma("unroll") for (int r = 0; r < TM; r++) {                              \
                    const int row = q0 + ty + 16 * r;                                         \
                    if (row >= a.Tq) continue;                                                \
                    const long long ri = at(a.dq, bh, row, 0);                                \
                    if constexpr (DC >= 2) {                                                  \
                        _Pragma("unroll") for (int c = 0; c < DC; c += 2) {                   \
                            const int col = 16 * c + 2 * tx;                                  \
                            if (pairs && col + 1 < a.d) {                                     \
                                atomic_add2((float *)a.dq.p + ri + col, g[r][c], g[r][c + 1]); \
                            } else {                                                          \
                                if (col < a.d) gw(a.dq, ri + col * a.dq.cs, g[r][c], a.dq_mode); \
                                if (col + 1 < a.d) gw(a.dq, ri + (col + 1) * a.dq.cs, g[r][c + 1], a.dq_mode); \
                            }                                                                 \
                        }                                                                     \
                    } else {                                                                  \
                        if (tx < a.d) gw(a.dq, ri + tx * a.dq.cs, g[r][0], a.dq_mode);        \
                    }                                                                         \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        _Pragma("unroll") for (int r = 0; r < TN; r++) {                                      \
            const int row = k0 + ty + 16 * r;                                                 \
            if (row >= a.Tk) continue;                                                        \
            _Pragma("unroll") for (int c = 0; c < DC; c++) {                                  \
                const int col = tx + 16 * c;                                                  \
                if (col >= a.d) continue;                                                     \
                /* mode 0 (atomics): dk, dv may alias dq */                                   \
                if (a.dk.p) gw(a.dk, at(a.dk, bh, row, col), dk[r][c], a.kv_mode);            \
                if (a.dv.p) gw(a.dv, at(a.dv, bh, row, col), dv[r][c], a.kv_mode);            \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    )

/* The small module of nb_attn_delta / nb_attn_delta_t / nb_attn_dq_fin alone (no tiles: DP is
 * only there for the shared helpers), per layout and storage. */
#define NB_ATTN_SRC_AUX(fm, sbf)                                                              \
    "#define DP 16\n#define FM " #fm "\n#define SBF " #sbf "\n" NB_CUDA_BF16_HELPERS NB_ATTN_SRC_HEAD \
        NB_ATTN_SRC_DELTA

/* One module per (padded head dim, layout, storage): every entry above. FM 1: feature-major
 * views (rs = 1), 0: row-major (cs = 1, f32, atomic gradients only); SBF 1: views may be bf16,
 * SBF 2: all views bf16. */
#define NB_ATTN_SRC(dp, fm, sbf)                                                              \
    "#define DP " #dp "\n#define FM " #fm "\n#define SBF " #sbf "\n" NB_CUDA_BF16_HELPERS NB_ATTN_SRC_HEAD NB_ATTN_SRC_ATOMIC NB_ATTN_SRC_SIMT_HEAD NB_ATTN_SRC_FWD \
        NB_ATTN_SRC_DELTA NB_ATTN_SRC_BWD

#endif

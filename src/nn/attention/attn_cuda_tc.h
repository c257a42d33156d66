/* CUDA source of the tensor-core variants of the fused attention (tape_cuda_attn.c), used for
 * the TF32 and BF16 tape precisions at padded head dims 16, 32 and 64 (DP = 128 runs the fp32
 * SIMT kernels of attn_cuda_kernels.h: its accumulators would not fit in registers). Prefix:
 * "#define DP <16|32|64>\n#define IS_BF16 <0|1>\n", FM and SBF as in attn_cuda_kernels.h, then
 * NB_ATTN_SRC_HEAD.
 *
 * mma.sync with fp32 accumulation: BF16 m16n8k16 (operands rounded to bf16), TF32 m16n8k8
 * (operands rounded to tf32). Tiles stay fp32 in shared memory (ld_tile widens bf16 storage on
 * the load, exactly) and are converted when fragments are loaded. Views and gradient modes as in
 * attn_cuda_kernels.h. Fragment helpers (g = lane / 4, t = lane % 4):
 *   ldA_rows  A[r][k] = M[r0 + r][c0 + k]         (16 x KS, from shared memory)
 *   ldB_rows  B[k][n] = M[n0 + n][c0 + k]         (KS x 8, "K^T": rows of M are B's columns)
 *   ldB_cols  B[k][n] = M[k0 + k][n0 + n]         (KS x 8)
 *   ldA_acc   A = a 16 x KS slice of a row of C accumulator tiles (P or dS straight from the
 *             registers of the previous product: the FlashAttention-2 register reuse).
 * TF32 uses a permuted k order inside each 8-step (mma k index t <-> element 2t, t + 4 <->
 * 2t + 1), so that every thread's pair of elements is adjacent, exactly like BF16's pairs: the
 * C layout (row g, columns 2t, 2t+1) is then directly an A fragment, and the shared loads are
 * float2. The sum over k is the same set of products in any order.
 *
 *   nb_attn_fwd_tc  128 threads, one block per (64 queries, bh), each warp 16 query rows with
 *                   its Q fragments in registers; per 64-key tile: S = Q K^T (8 n-tiles), online
 *                   softmax on the accumulators (quad shuffles), O += P V with P reused from
 *                   the registers. Shared: Q, K (stride DP + 8), V (stride DP + 4).
 *   nb_attn_bwd_tc  128 threads, one block per (64 keys, bh), each warp 16 keys; per 64-query
 *                   tile: S^T = K Q^T, dP^T = V dO^T, P^T and dS^T in registers; dV += P^T dO,
 *                   dK += dS^T Q; dS^T -> shared (query-major), then each warp 16 query rows of
 *                   dQ += dS K, added to global memory with atomics (float2 atomics on sm_90+
 *                   when d is even). delta from nb_attn_delta.
 *   nb_attn_fwd_fa / nb_attn_bwd_fa  whole-sequence kernels for feature-major views (below).
 * Needs sm_80+ (mma.sync bf16 / tf32); tape_cuda_attn.c falls back to the SIMT kernels of
 * attn_cuda_kernels.h on older GPUs.
 */
#ifndef NB_NN_ATTN_CUDA_TC_H
#define NB_NN_ATTN_CUDA_TC_H

#include "nn/attention/attn_cuda_kernels.h"

/* PTX helpers: conversions and mma (the CPU emulator used in development replaces this part). */
#define NB_ATTN_SRC_TC_ASM                                                                    \
    NB_ATTN_STR(                                                                              \
    __device__ __forceinline__ u32 cvt2(float lo, float hi) {                                 \
        u32 r;                                                                                \
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));                    \
        return r;                                                                             \
    }                                                                                         \
    __device__ __forceinline__ u32 cvt1(float x) {                                            \
        u32 r;                                                                                \
        asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));                                   \
        return r;                                                                             \
    }                                                                                         \
    __device__ __forceinline__ void mma(float *c, const u32 *a, const u32 *b) {               \
        if (IS_BF16)                                                                          \
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "               \
                         "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"              \
                         : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                     \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1])); \
        else                                                                                  \
            asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "                \
                         "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"              \
                         : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                     \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1])); \
    }                                                                                         \
    )

/* Fragment loads (shared fp32 -> bf16 pairs or tf32). */
#define NB_ATTN_SRC_TC_FRAG                                                                   \
    NB_ATTN_STR(                                                                              \
    constexpr int KS = IS_BF16 ? 16 : 8;                                                      \
    constexpr int SQ = DP + 8, SV = DP + 4, SSS = 64 + 8;                                     \
    __device__ __forceinline__ void ldA_rows(u32 *a, const float *M, int S, int r0, int c0, int g, int t) { \
        const float2 x0 = *(const float2 *)(M + (r0 + g) * S + c0 + 2 * t);                  \
        const float2 x1 = *(const float2 *)(M + (r0 + g + 8) * S + c0 + 2 * t);               \
        if (IS_BF16) {                                                                        \
            const float2 x2 = *(const float2 *)(M + (r0 + g) * S + c0 + 8 + 2 * t);           \
            const float2 x3 = *(const float2 *)(M + (r0 + g + 8) * S + c0 + 8 + 2 * t);       \
            a[0] = cvt2(x0.x, x0.y); a[1] = cvt2(x1.x, x1.y);                                 \
            a[2] = cvt2(x2.x, x2.y); a[3] = cvt2(x3.x, x3.y);                                 \
        } else {                                                                              \
            a[0] = cvt1(x0.x); a[1] = cvt1(x1.x); a[2] = cvt1(x0.y); a[3] = cvt1(x1.y);       \
        }                                                                                     \
    }                                                                                         \
    __device__ __forceinline__ void ldB_rows(u32 *b, const float *M, int S, int n0, int c0, int g, int t) { \
        const float2 x0 = *(const float2 *)(M + (n0 + g) * S + c0 + 2 * t);                  \
        if (IS_BF16) {                                                                        \
            const float2 x1 = *(const float2 *)(M + (n0 + g) * S + c0 + 8 + 2 * t);           \
            b[0] = cvt2(x0.x, x0.y); b[1] = cvt2(x1.x, x1.y);                                 \
        } else {                                                                              \
            b[0] = cvt1(x0.x); b[1] = cvt1(x0.y);                                             \
        }                                                                                     \
    }                                                                                         \
    __device__ __forceinline__ void ldB_cols(u32 *b, const float *M, int S, int k0, int n0, int g, int t) { \
        const float *p = M + (k0 + 2 * t) * S + n0 + g;                                       \
        if (IS_BF16) {                                                                        \
            b[0] = cvt2(p[0], p[S]); b[1] = cvt2(p[8 * S], p[9 * S]);                         \
        } else {                                                                              \
            b[0] = cvt1(p[0]); b[1] = cvt1(p[S]);                                             \
        }                                                                                     \
    }                                                                                         \
    /* m[ri + col] += x, m[ri + col + 1] += y with ri = at(m, bh, row, 0) (columns < d only;  \
     * gw's mode): one float2 atomic when pairs (mode 0, row-major f32 views). */              \
    __device__ __forceinline__ void add2(const Mat &m, long long ri, int col, int d, float x, float y, \
                                         bool pairs, int mode) {                              \
        if constexpr (!FM) {                                                                  \
            float *p = (float *)m.p + ri;                                                     \
            if (pairs && col + 1 < d) {                                                       \
                atomic_add2(p + col, x, y);                                                   \
                return;                                                                       \
            }                                                                                 \
            if (col < d) atomicAdd(p + col, x);                                               \
            if (col + 1 < d) atomicAdd(p + col + 1, y);                                       \
        } else {                                                                              \
            const long long i = ri + (long long)col * m.cs;                                   \
            if (col < d) gw(m, i, x, mode);                                                   \
            if (col + 1 < d) gw(m, i + m.cs, y, mode);                                        \
        }                                                                                     \
    }                                                                                         \
    /* k-step kk of a row of C tiles c[nt][4] (8 columns each) as an A fragment. */           \
    __device__ __forceinline__ void ldA_acc(u32 *a, float (*c)[4], int kk) {                  \
        if (IS_BF16) {                                                                        \
            a[0] = cvt2(c[2 * kk][0], c[2 * kk][1]); a[1] = cvt2(c[2 * kk][2], c[2 * kk][3]); \
            a[2] = cvt2(c[2 * kk + 1][0], c[2 * kk + 1][1]);                                  \
            a[3] = cvt2(c[2 * kk + 1][2], c[2 * kk + 1][3]);                                  \
        } else {                                                                              \
            a[0] = cvt1(c[kk][0]); a[1] = cvt1(c[kk][2]); a[2] = cvt1(c[kk][1]); a[3] = cvt1(c[kk][3]); \
        }                                                                                     \
    }                                                                                         \
    )

/* Forward. Dynamic shared memory: (64 SQ * 2 + 64 SV) floats. */
#define NB_ATTN_SRC_TC_FWD                                                                    \
    NB_ATTN_STR(                                                                              \
    /* 6 blocks per SM (80 registers) where that spills nothing: bf16 without run-time dtypes, DP <= 32 */ \
    extern "C" __global__ void __launch_bounds__(128, IS_BF16 && DP <= 32 && SBF != 1 ? 6 : 0) nb_attn_fwd_tc(const FwdArgs a) {        \
        extern __shared__ float sm[];                                                         \
        float *sQ = sm, *sK = sQ + 64 * SQ, *sV = sK + 64 * SQ;                               \
        const int tile = blockIdx.x % a.ntiles;                                               \
        const long long bh = blockIdx.x / a.ntiles;                                           \
        const int q0 = tile * 64, lane = threadIdx.x & 31, w = threadIdx.x >> 5;              \
        const int g = lane >> 2, t = lane & 3;                                                \
        ld_tile<128>(sQ, SQ, a.q, bh, q0, a.Tq, a.d);                                \
        __syncthreads();                                                                      \
        u32 qa[DP / KS][4];                                                                   \
        _Pragma("unroll") for (int ks = 0; ks < DP / KS; ks++) ldA_rows(qa[ks], sQ, SQ, 16 * w, ks * KS, g, t); \
        float m[2] = {-pinf(), -pinf()}, l[2] = {0.0f, 0.0f}, o[DP / 8][4];                   \
        _Pragma("unroll") for (int n = 0; n < DP / 8; n++)                                    \
            _Pragma("unroll") for (int i = 0; i < 4; i++) o[n][i] = 0.0f;                     \
        for (int k0 = 0; k0 < a.Tk; k0 += 64) {                                               \
            __syncthreads();                                                                  \
            ld_tile<128>(sK, SQ, a.k, bh, k0, a.Tk, a.d);                                     \
            ld_tile<128>(sV, SV, a.v, bh, k0, a.Tk, a.d);                                     \
            __syncthreads();                                                                  \
            float s[8][4];                                                                    \
            _Pragma("unroll") for (int n = 0; n < 8; n++) {                                   \
                _Pragma("unroll") for (int i = 0; i < 4; i++) s[n][i] = 0.0f;                 \
                _Pragma("unroll") for (int ks = 0; ks < DP / KS; ks++) {                      \
                    u32 b[2];                                                                 \
                    ldB_rows(b, sK, SQ, 8 * n, ks * KS, g, t);                                \
                    mma(s[n], qa[ks], b);                                                     \
                }                                                                             \
            }                                                                                 \
            float mx[2] = {-pinf(), -pinf()};                                                 \
            _Pragma("unroll") for (int n = 0; n < 8; n++)                                     \
                _Pragma("unroll") for (int i = 0; i < 4; i++) {                               \
                    const int key = k0 + 8 * n + 2 * t + (i & 1);                             \
                    s[n][i] = key < a.Tk ? s[n][i] * a.sl2 : -pinf();                         \
                    mx[i >> 1] = fmaxf(mx[i >> 1], s[n][i]);                                  \
                }                                                                             \
            float al[2];                                                                      \
            _Pragma("unroll") for (int h = 0; h < 2; h++) {                                   \
                mx[h] = fmaxf(mx[h], __shfl_xor_sync(FULL, mx[h], 1));                        \
                mx[h] = fmaxf(mx[h], __shfl_xor_sync(FULL, mx[h], 2));                        \
                const float mn = fmaxf(m[h], mx[h]); /* finite: the tile has a valid key */   \
                al[h] = exp2f(m[h] - mn);                                                     \
                m[h] = mn;                                                                    \
                l[h] *= al[h];                                                                \
            }                                                                                 \
            _Pragma("unroll") for (int n = 0; n < 8; n++)                                     \
                _Pragma("unroll") for (int i = 0; i < 4; i++) {                               \
                    s[n][i] = exp2f(s[n][i] - m[i >> 1]);                                     \
                    l[i >> 1] += s[n][i]; /* this thread's share; quad sum at the end */      \
                }                                                                             \
            _Pragma("unroll") for (int n = 0; n < DP / 8; n++)                                \
                _Pragma("unroll") for (int i = 0; i < 4; i++) o[n][i] *= al[i >> 1];          \
            _Pragma("unroll") for (int kk = 0; kk < 64 / KS; kk++) {                          \
                u32 pa[4];                                                                    \
                ldA_acc(pa, s, kk);                                                           \
                _Pragma("unroll") for (int n = 0; n < DP / 8; n++) {                          \
                    u32 b[2];                                                                 \
                    ldB_cols(b, sV, SV, kk * KS, 8 * n, g, t);                                \
                    mma(o[n], pa, b);                                                         \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        _Pragma("unroll") for (int h = 0; h < 2; h++) {                                       \
            l[h] += __shfl_xor_sync(FULL, l[h], 1);                                           \
            l[h] += __shfl_xor_sync(FULL, l[h], 2);                                           \
            const int row = q0 + 16 * w + g + 8 * h;                                          \
            if (row >= a.Tq) continue;                                                        \
            const float inv = 1.0f / l[h];                                                    \
            _Pragma("unroll") for (int n = 0; n < DP / 8; n++)                                \
                _Pragma("unroll") for (int j = 0; j < 2; j++) {                               \
                    const int col = 8 * n + 2 * t + j;                                        \
                    if (col < a.d) nb_st(a.o.p, at(a.o, bh, row, col), mbf(a.o), o[n][2 * h + j] * inv); \
                }                                                                             \
            if (t == 0) a.lse[bh * a.Tq + row] = m[h] + log2f(l[h]);                          \
        }                                                                                     \
    }                                                                                         \
    )

/* Backward. Dynamic shared memory: (64 (SV + 3 SQ + SSS) + 128) floats. */
#define NB_ATTN_SRC_TC_BWD                                                                    \
    NB_ATTN_STR(                                                                              \
    template <bool PAIRS>                                                                     \
    __device__ __forceinline__ void bwd_tc(const BwdArgs &a, float *sm) {                     \
        float *sK = sm, *sV = sK + 64 * SV, *sQ = sV + 64 * SQ, *sO = sQ + 64 * SQ;           \
        float *sS = sO + 64 * SQ, *sL = sS + 64 * SSS, *sD = sL + 64;                         \
        const int tile = blockIdx.x % a.ntiles;                                               \
        const long long bh = blockIdx.x / a.ntiles;                                           \
        const int k0 = tile * 64, tid = threadIdx.x, lane = tid & 31, w = tid >> 5;           \
        const int g = lane >> 2, t = lane & 3;                                                \
        const float *lse = a.lse + bh * a.Tq, *delta = a.delta + bh * a.Tq;                   \
        ld_tile<128>(sK, SV, a.k, bh, k0, a.Tk, a.d);                                         \
        ld_tile<128>(sV, SQ, a.v, bh, k0, a.Tk, a.d);                                         \
        const bool kv_grad = a.dk.p || a.dv.p;                                                \
        float dk[DP / 8][4], dv[DP / 8][4];                                                   \
        _Pragma("unroll") for (int n = 0; n < DP / 8; n++)                                    \
            _Pragma("unroll") for (int i = 0; i < 4; i++) dk[n][i] = dv[n][i] = 0.0f;         \
        for (int q0 = 0; q0 < a.Tq; q0 += 64) {                                               \
            __syncthreads();                                                                  \
            ld_tile<128>(sQ, SQ, a.q, bh, q0, a.Tq, a.d);                                     \
            ld_tile<128>(sO, SQ, a.dout, bh, q0, a.Tq, a.d);                                  \
            if (tid < 64) {                                                                   \
                const bool ok = q0 + tid < a.Tq;                                              \
                sL[tid] = ok ? lse[q0 + tid] : pinf(); /* P = 0 on padding rows */            \
                sD[tid] = ok ? delta[q0 + tid] : 0.0f;                                        \
            }                                                                                 \
            __syncthreads();                                                                  \
            float st[8][4], dp[8][4];                                                         \
            _Pragma("unroll") for (int n = 0; n < 8; n++)                                     \
                _Pragma("unroll") for (int i = 0; i < 4; i++) st[n][i] = dp[n][i] = 0.0f;     \
            _Pragma("unroll") for (int ks = 0; ks < DP / KS; ks++) {                          \
                u32 ka[4], va[4];                                                             \
                ldA_rows(ka, sK, SV, 16 * w, ks * KS, g, t);                                  \
                ldA_rows(va, sV, SQ, 16 * w, ks * KS, g, t);                                  \
                _Pragma("unroll") for (int n = 0; n < 8; n++) {                               \
                    u32 b[2];                                                                 \
                    ldB_rows(b, sQ, SQ, 8 * n, ks * KS, g, t);                                \
                    mma(st[n], ka, b);                                                        \
                    ldB_rows(b, sO, SQ, 8 * n, ks * KS, g, t);                                \
                    mma(dp[n], va, b);                                                        \
                }                                                                             \
            }                                                                                 \
            _Pragma("unroll") for (int n = 0; n < 8; n++)                                     \
                _Pragma("unroll") for (int i = 0; i < 4; i++) {                               \
                    const int qi = 8 * n + 2 * t + (i & 1), kr = 16 * w + g + 8 * (i >> 1);   \
                    const float p = k0 + kr < a.Tk ? exp2f(st[n][i] * a.sl2 - sL[qi]) : 0.0f; \
                    const float ds = p * (dp[n][i] - sD[qi]) * a.scale;                       \
                    st[n][i] = p;                                                             \
                    dp[n][i] = ds;                                                            \
                    sS[qi * SSS + kr] = ds;                                                   \
                }                                                                             \
            if (kv_grad) {                                                                    \
                _Pragma("unroll") for (int kk = 0; kk < 64 / KS; kk++) {                      \
                    u32 pa[4], sa[4];                                                         \
                    ldA_acc(pa, st, kk);                                                      \
                    ldA_acc(sa, dp, kk);                                                      \
                    _Pragma("unroll") for (int n = 0; n < DP / 8; n++) {                      \
                        u32 b[2];                                                             \
                        ldB_cols(b, sO, SQ, kk * KS, 8 * n, g, t);                            \
                        mma(dv[n], pa, b);                                                    \
                        ldB_cols(b, sQ, SQ, kk * KS, 8 * n, g, t);                            \
                        mma(dk[n], sa, b);                                                    \
                    }                                                                         \
                }                                                                             \
            }                                                                                 \
            if (a.dq.p) {                                                                     \
                __syncthreads();                                                              \
                float acc[DP / 8][4];                                                         \
                _Pragma("unroll") for (int n = 0; n < DP / 8; n++)                            \
                    _Pragma("unroll") for (int i = 0; i < 4; i++) acc[n][i] = 0.0f;           \
                _Pragma("unroll") for (int kk = 0; kk < 64 / KS; kk++) {                      \
                    u32 sa[4];                                                                \
                    ldA_rows(sa, sS, SSS, 16 * w, kk * KS, g, t);                             \
                    _Pragma("unroll") for (int n = 0; n < DP / 8; n++) {                      \
                        u32 b[2];                                                             \
                        ldB_cols(b, sK, SV, kk * KS, 8 * n, g, t);                            \
                        mma(acc[n], sa, b);                                                   \
                    }                                                                         \
                }                                                                             \
                _Pragma("unroll") for (int h = 0; h < 2; h++) {                               \
                    const int row = q0 + 16 * w + g + 8 * h;                                  \
                    if (row >= a.Tq) continue;                                                \
                    const long long ri = at(a.dq, bh, row, 0);                                \
                    _Pragma("unroll") for (int n = 0; n < DP / 8; n++)                        \
                        add2(a.dq, ri, 8 * n + 2 * t, a.d, acc[n][2 * h], acc[n][2 * h + 1], PAIRS, a.dq_mode); \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        _Pragma("unroll") for (int h = 0; h < 2; h++) {                                       \
            const int row = k0 + 16 * w + g + 8 * h;                                          \
            if (row >= a.Tk) continue;                                                        \
            const long long rk = at(a.dk, bh, row, 0), rv = at(a.dv, bh, row, 0);            \
            _Pragma("unroll") for (int n = 0; n < DP / 8; n++) {                              \
                if (a.dk.p) add2(a.dk, rk, 8 * n + 2 * t, a.d, dk[n][2 * h], dk[n][2 * h + 1], PAIRS, a.kv_mode); \
                if (a.dv.p) add2(a.dv, rv, 8 * n + 2 * t, a.d, dv[n][2 * h], dv[n][2 * h + 1], PAIRS, a.kv_mode); \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    /* float2 atomics (sm_90) when d is even and every gradient is an atomically accumulated,  \
     * row-major f32 view (pair_ok); the choice is made once per launch (a run-time branch     \
     * around the atomics doubles register use). */                                           \
    extern "C" __global__ void __launch_bounds__(128, IS_BF16 && DP == 32 ? 3 : 0) nb_attn_bwd_tc(const BwdArgs a) { \
        extern __shared__ float smb[];                                                        \
        if (PAIR_ATOMICS && (a.d & 1) == 0 && a.dq_mode == 0 && a.kv_mode == 0 &&             \
            pair_ok(a.dq) && pair_ok(a.dk) && pair_ok(a.dv))                                  \
            bwd_tc<true>(a, smb);                                                             \
        else                                                                                  \
            bwd_tc<false>(a, smb);                                                            \
    }                                                                                         \
    )

/* ---- Whole-sequence kernels (nb_attn_fwd_fa / nb_attn_bwd_fa): feature-major views (FM 1),
 * Tq, Tk <= 256, TF32 / BF16. Shared tiles hold the operand type E (bf16 for BF16, f32 for TF32)
 * in the views' own layout, feature-major: tile[f][position] with row stride SR (positions
 * padded with zeros; rows of 16 * odd bytes for bf16, 4 mod 16 floats for tf32: conflict-free
 * fragment loads). Storage in the operand type is copied with cp.async (16 bytes, when the view
 * is aligned); other dtypes are converted on the load (f32 -> bf16 round to nearest even, as the
 * tiled kernels' fragment loads do). Fragments: BF16 by ldmatrix (.trans where the k index runs
 * along the tile's rows), TF32 by scalar loads with the k permutation of the tiled kernels
 * (TF32 tiles are rounded to tf32 once in shared memory after the copies, not per fragment).
 *   fragA_T  A[r][c] = M[c0 + c][r0 + r]        fragA_N  A[r][c] = M[r0 + r][c0 + c]
 *   fragB_T2 B[k][n] = M[k0 + k][n0 + n]        fragB_N2 B[k][n] = M[n0 + n][k0 + k]
 *   (the *2 forms: two n-tiles, b[0..1] for n0, b[2..3] for n0 + 8; fragB_T1: one n-tile)
 *   ldB_acc2 B[k][n] = C^T: k-step kk of a row of C tiles (keys x queries) as the B operand of
 *            two n-tiles (the transposed-product trick: dK^T = Q^T dS, dV^T = dO^T P).
 *
 *   nb_attn_fwd_fa  one block per (16 NW queries, bh), NW warps of 16 query rows; all keys and
 *                   values of bh in shared memory, copied in one cp.async group per 64 keys
 *                   (the first step starts when its keys have landed); per 64-key step
 *                   S = Q K^T, online softmax, O += P V (P from registers) as nb_attn_fwd_tc.
 *   nb_attn_bwd_fa  one block per bh, one warp per 16 keys (NW = Tk / 16 rounded up); K, V, Q,
 *                   dO of the whole sequence in shared memory (a copy group per 32-query
 *                   chunk); delta = rowsum(dO O) and lse in the prologue; per chunk:
 *                   S^T = K Q^T, dP^T = V dO^T, P^T and dS^T in registers, dV^T += dO^T P^T and
 *                   dK^T += Q^T dS^T with P^T / dS^T as B operands straight from the
 *                   accumulators (transposed products: results run along positions), dS^T ->
 *                   shared (two buffers: one barrier per chunk), then dQ^T = K^T dS^T by units
 *                   of 16 features x 8 queries, one warp per unit over all keys (default).
 *                   fa_flags & 1 (never set by the host since the NB_ATTN_FA_DQSPLIT switch
 *                   went; kept because removing it changes this kernel's PTX) splits each
 *                   unit's keys over warps adding into an f32 chunk buffer with shared atomics
 *                   (slower on the H100); the warp-pair variant nb_attn_bwd_fa_pairs (also
 *                   slower) was deleted. BF16 keeps
 *                   the warp's K, V fragments in registers over the chunks. The block owns
 *                   every key: dq is stored, never accumulated with global atomics (STORE / ADD
 *                   modes only; no delta pass, no dq scratch). */
/* PTX helpers of the whole-sequence kernels: shared addresses, cp.async, ldmatrix (the CPU
 * emulator used in development replaces this part). */
#define NB_ATTN_SRC_FA_ASM                                                                    \
    NB_ATTN_STR(                                                                              \
    __device__ __forceinline__ unsigned sa(const void *p) {                                   \
        return (unsigned)__cvta_generic_to_shared(p);                                         \
    }                                                                                         \
    __device__ __forceinline__ void cp16(void *s, const void *g) {                            \
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa(s)), "l"(g));      \
    }                                                                                         \
    __device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); } \
    /* wait until at most n (0..7) of this thread's committed groups are pending */           \
    __device__ __forceinline__ void cp_wait_n(int n) {                                        \
        if (n <= 0) asm volatile("cp.async.wait_group 0;" ::: "memory");                      \
        else if (n == 1) asm volatile("cp.async.wait_group 1;" ::: "memory");                 \
        else if (n == 2) asm volatile("cp.async.wait_group 2;" ::: "memory");                 \
        else if (n == 3) asm volatile("cp.async.wait_group 3;" ::: "memory");                 \
        else if (n == 4) asm volatile("cp.async.wait_group 4;" ::: "memory");                 \
        else if (n == 5) asm volatile("cp.async.wait_group 5;" ::: "memory");                 \
        else if (n == 6) asm volatile("cp.async.wait_group 6;" ::: "memory");                 \
        else asm volatile("cp.async.wait_group 7;" ::: "memory");                             \
    }                                                                                         \
    __device__ __forceinline__ void ldsm4(u32 *r, const void *p) {                            \
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"          \
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(sa(p)));          \
    }                                                                                         \
    __device__ __forceinline__ void ldsm4t(u32 *r, const void *p) {                           \
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"    \
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(sa(p)));          \
    }                                                                                         \
    __device__ __forceinline__ void ldsm2t(u32 *r, const void *p) {                           \
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"          \
                     : "=r"(r[0]), "=r"(r[1]) : "r"(sa(p)));                                  \
    }                                                                                         \
    )

#define NB_ATTN_SRC_FA                                                                        \
    NB_ATTN_STR(                                                                              \
    template <bool B> struct ETy { typedef float T; };                                        \
    template <> struct ETy<true> { typedef unsigned short T; };                               \
    typedef ETy<IS_BF16 != 0>::T E;                                                           \
    constexpr int PADE = IS_BF16 ? 8 : 4, QC = 32;                                            \
    __device__ __forceinline__ E to_e(float x) {                                              \
        if constexpr (IS_BF16) return nb_f2bf(x); else return x;                              \
    }                                                                                         \
    /* TF32 tiles are rounded once in shared memory (round_tf32), so fragments take raw bits */ \
    __device__ __forceinline__ u32 tf(const E *p) { return __float_as_uint(*(const float *)p); } \
    __device__ __forceinline__ u32 fb(float x) { return __float_as_uint(x); }                 \
    /* s[0, n) = cvt.rna.tf32(s[i]) (TF32 only), block-wide */                                \
    __device__ __forceinline__ void round_tf32(E *s, int n) {                                 \
        if constexpr (!IS_BF16)                                                               \
            for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = __uint_as_float(cvt1(s[i])); \
    }                                                                                         \
    __device__ __forceinline__ void fragA_T(u32 *a, const E *M, int S, int r0, int c0, int lane) { \
        const int g = lane >> 2, t = lane & 3;                                                \
        if constexpr (IS_BF16) {                                                              \
            const int i = lane >> 3, j = lane & 7;                                            \
            ldsm4t(a, M + (c0 + (i >> 1) * 8 + j) * S + r0 + (i & 1) * 8);                    \
        } else {                                                                              \
            const E *p = M + (c0 + 2 * t) * S + r0 + g;                                       \
            a[0] = tf(p); a[1] = tf(p + 8); a[2] = tf(p + S); a[3] = tf(p + S + 8);           \
        }                                                                                     \
    }                                                                                         \
    __device__ __forceinline__ void fragA_N(u32 *a, const E *M, int S, int r0, int c0, int lane) { \
        const int g = lane >> 2, t = lane & 3;                                                \
        if constexpr (IS_BF16) {                                                              \
            const int i = lane >> 3, j = lane & 7;                                            \
            ldsm4(a, M + (r0 + (i & 1) * 8 + j) * S + c0 + (i >> 1) * 8);                     \
        } else {                                                                              \
            const float2 x0 = *(const float2 *)(M + (r0 + g) * S + c0 + 2 * t);               \
            const float2 x1 = *(const float2 *)(M + (r0 + g + 8) * S + c0 + 2 * t);           \
            a[0] = fb(x0.x); a[1] = fb(x1.x); a[2] = fb(x0.y); a[3] = fb(x1.y);               \
        }                                                                                     \
    }                                                                                         \
    __device__ __forceinline__ void fragB_T2(u32 *b, const E *M, int S, int k0, int n0, int lane) { \
        const int g = lane >> 2, t = lane & 3;                                                \
        if constexpr (IS_BF16) {                                                              \
            const int i = lane >> 3, j = lane & 7;                                            \
            ldsm4t(b, M + (k0 + (i & 1) * 8 + j) * S + n0 + (i >> 1) * 8);                    \
        } else {                                                                              \
            const E *p = M + (k0 + 2 * t) * S + n0 + g;                                       \
            b[0] = tf(p); b[1] = tf(p + S); b[2] = tf(p + 8); b[3] = tf(p + S + 8);           \
        }                                                                                     \
    }                                                                                         \
    __device__ __forceinline__ void fragB_T1(u32 *b, const E *M, int S, int k0, int n0, int lane) { \
        const int g = lane >> 2, t = lane & 3;                                                \
        if constexpr (IS_BF16) {                                                              \
            const int i = (lane >> 3) & 1, j = lane & 7;                                      \
            ldsm2t(b, M + (k0 + i * 8 + j) * S + n0);                                         \
        } else {                                                                              \
            const E *p = M + (k0 + 2 * t) * S + n0 + g;                                       \
            b[0] = tf(p); b[1] = tf(p + S);                                                   \
        }                                                                                     \
    }                                                                                         \
    __device__ __forceinline__ void fragB_N2(u32 *b, const E *M, int S, int k0, int n0, int lane) { \
        const int g = lane >> 2, t = lane & 3;                                                \
        if constexpr (IS_BF16) {                                                              \
            const int i = lane >> 3, j = lane & 7;                                            \
            ldsm4(b, M + (n0 + (i >> 1) * 8 + j) * S + k0 + (i & 1) * 8);                     \
        } else {                                                                              \
            const float2 x0 = *(const float2 *)(M + (n0 + g) * S + k0 + 2 * t);               \
            const float2 x1 = *(const float2 *)(M + (n0 + 8 + g) * S + k0 + 2 * t);           \
            b[0] = fb(x0.x); b[1] = fb(x0.y); b[2] = fb(x1.x); b[3] = fb(x1.y);               \
        }                                                                                     \
    }                                                                                         \
    __device__ __forceinline__ void ldB_acc2(u32 *b, float (*c)[4], int kk) {                 \
        if constexpr (IS_BF16) {                                                              \
            b[0] = cvt2(c[2 * kk][0], c[2 * kk][1]); b[1] = cvt2(c[2 * kk + 1][0], c[2 * kk + 1][1]); \
            b[2] = cvt2(c[2 * kk][2], c[2 * kk][3]); b[3] = cvt2(c[2 * kk + 1][2], c[2 * kk + 1][3]); \
        } else {                                                                              \
            b[0] = cvt1(c[kk][0]); b[1] = cvt1(c[kk][1]); b[2] = cvt1(c[kk][2]); b[3] = cvt1(c[kk][3]); \
        }                                                                                     \
    }                                                                                         \
    /* positions [r0, r0 + cnt) x features [0, DP) of view m (bh) -> s[f * S + p], zero-padded \
     * (cnt a multiple of 16); cp.async when the storage is E and 16-byte chunks are aligned */ \
    __device__ __forceinline__ void ld_fm(E *s, int S, const Mat &m, long long bh, int r0, int cnt, \
                                         int T, int d) {                                      \
        const int bf = mbf(m), tid = threadIdx.x, nth = blockDim.x;                           \
        const long long base = bh * m.bs;                                                     \
        constexpr int VE = 16 / (int)sizeof(E);                                               \
        if ((bf != 0) == (IS_BF16 != 0) && ((unsigned long long)m.p & 15) == 0 &&             \
            m.bs % VE == 0 && m.cs % VE == 0 && T % VE == 0 && r0 % VE == 0) {                \
            const int cpr = cnt / VE;                                                         \
            for (int i = tid; i < DP * cpr; i += nth) {                                       \
                const int f = i / cpr, p = (i - f * cpr) * VE;                                \
                E *dst = s + f * S + p;                                                       \
                if (f < d && r0 + p < T)                                                      \
                    cp16(dst, (const E *)m.p + base + (long long)f * m.cs + r0 + p);          \
                else                                                                          \
                    *(uint4 *)dst = make_uint4(0u, 0u, 0u, 0u);                               \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        for (int i = tid; i < DP * cnt; i += nth) {                                           \
            const int f = i / cnt, p = i - f * cnt;                                           \
            const float x = f < d && r0 + p < T ? nb_ld(m.p, base + (long long)f * m.cs + r0 + p, bf) : 0.0f; \
            s[f * S + p] = to_e(x);                                                           \
        }                                                                                     \
    }                                                                                         \
    /* gradient pair (positions pos, pos + 1; feature f) in mode 1 (store) / 2 (add) */       \
    __device__ __forceinline__ void st_pair(const Mat &m, long long bh, int pos, int f, int T, int d, \
                                            float x, float y, int mode) {                     \
        if (f >= d) return;                                                                   \
        const long long i = bh * m.bs + (long long)f * m.cs + pos;                            \
        if (pos < T) gw(m, i, x, mode);                                                       \
        if (pos + 1 < T) gw(m, i + 1, y, mode);                                               \
    }                                                                                         \
    /* bf16: 3 blocks of 8 warps per SM (80 registers): the UNet's 384 blocks in one wave */  \
    extern "C" __global__ void __launch_bounds__(256, IS_BF16 && SBF != 1 ? 3 : 1) nb_attn_fwd_fa(const FwdArgs a) { \
        extern __shared__ __align__(16) unsigned char smc[];                                  \
        const int NW = blockDim.x >> 5, QB = 16 * NW;                                         \
        const int Tkp = (a.Tk + 63) & ~63, SRK = Tkp + PADE, SRQ = QB + PADE;                 \
        E *sK = (E *)smc, *sV = sK + DP * SRK, *sQ = sV + DP * SRK;                           \
        const int tile = blockIdx.x % a.ntiles;                                               \
        const long long bh = blockIdx.x / a.ntiles;                                           \
        const int q0 = tile * QB, lane = threadIdx.x & 31, w = threadIdx.x >> 5;              \
        const int g = lane >> 2, t = lane & 3;                                                \
        /* copy groups: Q with the first 64 keys, then one per 64-key step */                 \
        const int ntk = Tkp / 64;                                                             \
        ld_fm(sQ, SRQ, a.q, bh, q0, QB, a.Tq, a.d);                                           \
        for (int j = 0; j < ntk; j++) {                                                       \
            ld_fm(sK + 64 * j, SRK, a.k, bh, 64 * j, 64, a.Tk, a.d);                          \
            ld_fm(sV + 64 * j, SRK, a.v, bh, 64 * j, 64, a.Tk, a.d);                          \
            cp_commit();                                                                      \
        }                                                                                     \
        if constexpr (!IS_BF16) { /* all tiles, rounded to tf32 once */                       \
            cp_wait_n(0);                                                                     \
            __syncthreads();                                                                  \
            round_tf32(sK, 2 * DP * SRK + DP * SRQ);                                          \
        }                                                                                     \
        cp_wait_n(ntk - 1);                                                                   \
        __syncthreads();                                                                      \
        u32 qa[DP / KS][4];                                                                   \
        _Pragma("unroll") for (int ks = 0; ks < DP / KS; ks++) fragA_T(qa[ks], sQ, SRQ, 16 * w, ks * KS, lane); \
        float m[2] = {-pinf(), -pinf()}, l[2] = {0.0f, 0.0f}, o[DP / 8][4];                   \
        _Pragma("unroll") for (int n = 0; n < DP / 8; n++)                                    \
            _Pragma("unroll") for (int i = 0; i < 4; i++) o[n][i] = 0.0f;                     \
        for (int k0 = 0, j = 0; k0 < a.Tk; k0 += 64, j++) {                                   \
            if (j > 0) {                                                                      \
                cp_wait_n(ntk - 1 - j);                                                       \
                __syncthreads();                                                              \
            }                                                                                 \
            float s[8][4];                                                                    \
            _Pragma("unroll") for (int n = 0; n < 8; n++)                                     \
                _Pragma("unroll") for (int i = 0; i < 4; i++) s[n][i] = 0.0f;                 \
            _Pragma("unroll") for (int n = 0; n < 8; n += 2)                                  \
                _Pragma("unroll") for (int ks = 0; ks < DP / KS; ks++) {                      \
                    u32 b[4];                                                                 \
                    fragB_T2(b, sK, SRK, ks * KS, k0 + 8 * n, lane);                          \
                    mma(s[n], qa[ks], b);                                                     \
                    mma(s[n + 1], qa[ks], b + 2);                                             \
                }                                                                             \
            float mx[2] = {-pinf(), -pinf()};                                                 \
            _Pragma("unroll") for (int n = 0; n < 8; n++)                                     \
                _Pragma("unroll") for (int i = 0; i < 4; i++) {                               \
                    const int key = k0 + 8 * n + 2 * t + (i & 1);                             \
                    s[n][i] = key < a.Tk ? s[n][i] * a.sl2 : -pinf();                         \
                    mx[i >> 1] = fmaxf(mx[i >> 1], s[n][i]);                                  \
                }                                                                             \
            float al[2];                                                                      \
            _Pragma("unroll") for (int h = 0; h < 2; h++) {                                   \
                mx[h] = fmaxf(mx[h], __shfl_xor_sync(FULL, mx[h], 1));                        \
                mx[h] = fmaxf(mx[h], __shfl_xor_sync(FULL, mx[h], 2));                        \
                const float mn = fmaxf(m[h], mx[h]);                                          \
                al[h] = exp2f(m[h] - mn);                                                     \
                m[h] = mn;                                                                    \
                l[h] *= al[h];                                                                \
            }                                                                                 \
            _Pragma("unroll") for (int n = 0; n < 8; n++)                                     \
                _Pragma("unroll") for (int i = 0; i < 4; i++) {                               \
                    s[n][i] = exp2f(s[n][i] - m[i >> 1]);                                     \
                    l[i >> 1] += s[n][i];                                                     \
                }                                                                             \
            _Pragma("unroll") for (int n = 0; n < DP / 8; n++)                                \
                _Pragma("unroll") for (int i = 0; i < 4; i++) o[n][i] *= al[i >> 1];          \
            _Pragma("unroll") for (int kk = 0; kk < 64 / KS; kk++) {                          \
                u32 pa[4];                                                                    \
                ldA_acc(pa, s, kk);                                                           \
                _Pragma("unroll") for (int n = 0; n < DP / 8; n += 2) {                       \
                    u32 b[4];                                                                 \
                    fragB_N2(b, sV, SRK, k0 + kk * KS, 8 * n, lane);                          \
                    mma(o[n], pa, b);                                                         \
                    mma(o[n + 1], pa, b + 2);                                                 \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        _Pragma("unroll") for (int h = 0; h < 2; h++) {                                       \
            l[h] += __shfl_xor_sync(FULL, l[h], 1);                                           \
            l[h] += __shfl_xor_sync(FULL, l[h], 2);                                           \
            const int row = q0 + 16 * w + g + 8 * h;                                          \
            if (row >= a.Tq) continue;                                                        \
            const float inv = 1.0f / l[h];                                                    \
            _Pragma("unroll") for (int n = 0; n < DP / 8; n++)                                \
                _Pragma("unroll") for (int j = 0; j < 2; j++) {                               \
                    const int col = 8 * n + 2 * t + j;                                        \
                    if (col < a.d) nb_st(a.o.p, at(a.o, bh, row, col), mbf(a.o), o[n][2 * h + j] * inv); \
                }                                                                             \
            if (t == 0) a.lse[bh * a.Tq + row] = m[h] + log2f(l[h]);                          \
        }                                                                                     \
    }                                                                                         \
    /* dq rows [q0, q0 + QC) from the f32 chunk buffer b[f][q] (row stride S), in dq's mode,   \
     * coalesced along positions; b is zeroed for its next chunk */                           \
    __device__ __forceinline__ void flush_dq(const BwdArgs &a, long long bh, float *b, int S, int q0) { \
        for (int i = threadIdx.x; i < DP * QC; i += blockDim.x) {                             \
            const int f = i / QC, q = i - f * QC;                                             \
            if (f < a.d && q0 + q < a.Tq)                                                     \
                gw(a.dq, bh * a.dq.bs + (long long)f * a.dq.cs + q0 + q, b[f * S + q], a.dq_mode); \
            b[f * S + q] = 0.0f;                                                              \
        }                                                                                     \
    }                                                                                         \
    __device__ __forceinline__ void bwd_fa(const BwdArgs &a) {                               \
        extern __shared__ __align__(16) unsigned char smc[];                                  \
        const int NW = blockDim.x >> 5, Tkp = 16 * NW, Tqp = (a.Tq + QC - 1) / QC * QC;       \
        const int SRK = Tkp + PADE, SRQ = Tqp + PADE, SRS = QC + PADE;                        \
        E *sK = (E *)smc, *sV = sK + DP * SRK, *sQ = sV + DP * SRK, *sO = sQ + DP * SRQ;      \
        E *sS = sO + DP * SRQ;                                                                \
        float *sL = (float *)(sS + 2 * Tkp * SRS), *sD = sL + Tqp, *sQd = sD + Tqp;         \
        const long long bh = blockIdx.x;                                                      \
        const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t = lane & 3; \
        const int kr0 = 16 * w;                                                               \
        /* copy groups: K, V with the first query chunk (Q, dO), then one per chunk */        \
        const int nch = Tqp / QC;                                                             \
        ld_fm(sK, SRK, a.k, bh, 0, Tkp, a.Tk, a.d);                                           \
        ld_fm(sV, SRK, a.v, bh, 0, Tkp, a.Tk, a.d);                                           \
        for (int j = 0; j < nch; j++) {                                                       \
            ld_fm(sQ + QC * j, SRQ, a.q, bh, QC * j, QC, a.Tq, a.d);                          \
            ld_fm(sO + QC * j, SRQ, a.dout, bh, QC * j, QC, a.Tq, a.d);                       \
            cp_commit();                                                                      \
        }                                                                                     \
        /* delta = rowsum(dO * O) (the loads of a row issued together) and lse, while the      \
         * copies land; padding rows: P = 0 */                                                \
        for (int q = tid; q < Tqp; q += blockDim.x) {                                         \
            float s = 0.0f, L = pinf();                                                       \
            if (q < a.Tq) {                                                                   \
                const long long oi = at(a.o, bh, q, 0), gi = at(a.dout, bh, q, 0);            \
                float x[DP], y[DP];                                                           \
                _Pragma("unroll") for (int e = 0; e < DP; e++) {                              \
                    x[e] = e < a.d ? nb_ld(a.o.p, oi + e * a.o.cs, mbf(a.o)) : 0.0f;          \
                    y[e] = e < a.d ? nb_ld(a.dout.p, gi + e * a.dout.cs, mbf(a.dout)) : 0.0f; \
                }                                                                             \
                _Pragma("unroll") for (int e = 0; e < DP; e++) s += x[e] * y[e];              \
                L = a.lse[bh * a.Tq + q];                                                     \
            }                                                                                 \
            sL[q] = L;                                                                        \
            sD[q] = s;                                                                        \
        }                                                                                     \
        /* dQ units: 16 features x 8 queries; with fa_flags & 1 and enough warps, each unit's  \
         * keys are split over NS warps that add into an f32 chunk buffer sQd (two, [DP][QC+1]) \
         * stored after the next barrier */                                                   \
        constexpr int NU = (DP / 16) * (QC / 8), SQD = QC + 1;                                \
        const int NS = (a.fa_flags & 1) && NW >= 2 * NU ? NW / NU : 1;                        \
        const int kper = (Tkp / KS + NS - 1) / NS * KS;   \
        if (NS > 1)                                                                           \
            for (int i = tid; i < 2 * DP * SQD; i += blockDim.x) sQd[i] = 0.0f;               \
        if constexpr (!IS_BF16) { /* all tiles, rounded to tf32 once */                       \
            cp_wait_n(0);                                                                     \
            __syncthreads();                                                                  \
            round_tf32(sK, 2 * DP * SRK + 2 * DP * SRQ);                                      \
        }                                                                                     \
        cp_wait_n(nch - 1);                                                                   \
        __syncthreads();                                                                      \
        const bool kv_grad = a.dk.p || a.dv.p;                                                \
        /* BF16: the warp's K, V fragments stay in registers over the chunks */               \
        u32 kva[IS_BF16 ? DP / KS : 1][2][4];                                                 \
        if constexpr (IS_BF16)                                                                \
            _Pragma("unroll") for (int ks = 0; ks < DP / KS; ks++) {                          \
                fragA_T(kva[ks][0], sK, SRK, kr0, ks * KS, lane);                             \
                fragA_T(kva[ks][1], sV, SRK, kr0, ks * KS, lane);                             \
            }                                                                                 \
        float dk[DP / 16][2][4], dv[DP / 16][2][4];                                           \
        _Pragma("unroll") for (int mt = 0; mt < DP / 16; mt++)                                \
            _Pragma("unroll") for (int n = 0; n < 2; n++)                                     \
                _Pragma("unroll") for (int i = 0; i < 4; i++) dk[mt][n][i] = dv[mt][n][i] = 0.0f; \
        for (int c = 0; c < Tqp; c += QC) {                                                   \
            float st[QC / 8][4], dp[QC / 8][4];                                               \
            _Pragma("unroll") for (int n = 0; n < QC / 8; n++)                                \
                _Pragma("unroll") for (int i = 0; i < 4; i++) st[n][i] = dp[n][i] = 0.0f;     \
            _Pragma("unroll") for (int ks = 0; ks < DP / KS; ks++) {                          \
                u32 tk[4], tv[4], *ka = tk, *va = tv;                                         \
                if constexpr (IS_BF16) {                                                      \
                    ka = kva[ks][0];                                                          \
                    va = kva[ks][1];                                                          \
                } else {                                                                      \
                    fragA_T(tk, sK, SRK, kr0, ks * KS, lane);                                 \
                    fragA_T(tv, sV, SRK, kr0, ks * KS, lane);                                 \
                }                                                                             \
                _Pragma("unroll") for (int n = 0; n < QC / 8; n += 2) {                       \
                    u32 b[4];                                                                 \
                    fragB_T2(b, sQ, SRQ, ks * KS, c + 8 * n, lane);                           \
                    mma(st[n], ka, b);                                                        \
                    mma(st[n + 1], ka, b + 2);                                                \
                    fragB_T2(b, sO, SRQ, ks * KS, c + 8 * n, lane);                           \
                    mma(dp[n], va, b);                                                        \
                    mma(dp[n + 1], va, b + 2);                                                \
                }                                                                             \
            }                                                                                 \
            E *sSb = sS + ((c / QC) & 1) * Tkp * SRS;                                         \
            _Pragma("unroll") for (int n = 0; n < QC / 8; n++) {                              \
                _Pragma("unroll") for (int i = 0; i < 4; i++) {                               \
                    const int qi = c + 8 * n + 2 * t + (i & 1), kr = kr0 + g + 8 * (i >> 1);  \
                    const float p = kr < a.Tk ? exp2f(st[n][i] * a.sl2 - sL[qi]) : 0.0f;      \
                    st[n][i] = p;                                                             \
                    dp[n][i] = p * (dp[n][i] - sD[qi]) * a.scale;                             \
                }                                                                             \
                _Pragma("unroll") for (int h = 0; h < 2; h++) {                               \
                    E *d2 = sSb + (kr0 + g + 8 * h) * SRS + 8 * n + 2 * t;                    \
                    if constexpr (IS_BF16) *(u32 *)d2 = cvt2(dp[n][2 * h], dp[n][2 * h + 1]); \
                    else *(float2 *)d2 = make_float2(dp[n][2 * h], dp[n][2 * h + 1]);         \
                }                                                                             \
            }                                                                                 \
            if (kv_grad) {                                                                    \
                _Pragma("unroll") for (int kk = 0; kk < QC / KS; kk++) {                      \
                    u32 pb[4], sb[4];                                                         \
                    ldB_acc2(pb, st, kk);                                                     \
                    ldB_acc2(sb, dp, kk);                                                     \
                    _Pragma("unroll") for (int mt = 0; mt < DP / 16; mt++) {                  \
                        u32 a4[4];                                                            \
                        fragA_N(a4, sO, SRQ, 16 * mt, c + kk * KS, lane);                     \
                        mma(dv[mt][0], a4, pb);                                               \
                        mma(dv[mt][1], a4, pb + 2);                                           \
                        fragA_N(a4, sQ, SRQ, 16 * mt, c + kk * KS, lane);                     \
                        mma(dk[mt][0], a4, sb);                                               \
                        mma(dk[mt][1], a4, sb + 2);                                           \
                    }                                                                         \
                }                                                                             \
            }                                                                                 \
            if (c + QC < Tqp) cp_wait_n(nch - 2 - c / QC); /* the next chunk's Q, dO */      \
            __syncthreads();                                                                  \
            if (a.dq.p && NS > 1 && c > 0) /* the previous chunk's sums are complete */       \
                flush_dq(a, bh, sQd + ((c / QC - 1) & 1) * DP * SQD, SQD, c - QC);            \
            if (a.dq.p)                                                                       \
                for (int u0 = w; u0 < NU * NS; u0 += NW) {                                   \
                    const int u = u0 % NU, part = u0 / NU, mt = u % (DP / 16), nt = u / (DP / 16); \
                    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};                                  \
                    const int kend = min(Tkp, (part + 1) * kper);                             \
                    _Pragma("unroll 4") for (int k0 = part * kper; k0 < kend; k0 += KS) {     \
                        u32 a4[4], b2[2];                                                     \
                        fragA_N(a4, sK, SRK, 16 * mt, k0, lane);                              \
                        fragB_T1(b2, sSb, SRS, k0, 8 * nt, lane);                             \
                        mma(acc, a4, b2);                                                     \
                    }                                                                         \
                    if (NS > 1) {                                                             \
                        float *b = sQd + ((c / QC) & 1) * DP * SQD;                           \
                        _Pragma("unroll") for (int i = 0; i < 4; i++)                         \
                            atomicAdd(b + (16 * mt + g + 8 * (i >> 1)) * SQD + 8 * nt + 2 * t + (i & 1), acc[i]); \
                    } else {                                                                  \
                        _Pragma("unroll") for (int h = 0; h < 2; h++)                         \
                            st_pair(a.dq, bh, c + 8 * nt + 2 * t, 16 * mt + g + 8 * h, a.Tq, a.d, \
                                    acc[2 * h], acc[2 * h + 1], a.dq_mode);                   \
                    }                                                                         \
                }                                                                             \
        }                                                                                     \
        if (a.dq.p && NS > 1) {                                                               \
            __syncthreads();                                                                  \
            flush_dq(a, bh, sQd + ((Tqp / QC - 1) & 1) * DP * SQD, SQD, Tqp - QC);            \
        }                                                                                     \
        _Pragma("unroll") for (int mt = 0; mt < DP / 16; mt++)                                \
            _Pragma("unroll") for (int n = 0; n < 2; n++)                                     \
                _Pragma("unroll") for (int h = 0; h < 2; h++) {                               \
                    const int f = 16 * mt + g + 8 * h, key = kr0 + 8 * n + 2 * t;             \
                    if (a.dk.p) st_pair(a.dk, bh, key, f, a.Tk, a.d, dk[mt][n][2 * h], dk[mt][n][2 * h + 1], a.kv_mode); \
                    if (a.dv.p) st_pair(a.dv, bh, key, f, a.Tk, a.d, dv[mt][n][2 * h], dv[mt][n][2 * h + 1], a.kv_mode); \
                }                                                                             \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(512) nb_attn_bwd_fa(const BwdArgs a) {       \
        bwd_fa(a);                                                                            \
    }                                                                                         \
    )

/* One module per (padded head dim, tensor-core type, layout FM, storage SBF). */
#define NB_ATTN_SRC_TC(dp, bf16, fm, sbf)                                                     \
    "#define DP " #dp "\n#define IS_BF16 " #bf16 "\n#define FM " #fm "\n#define SBF " #sbf "\n" \
        NB_CUDA_BF16_HELPERS NB_ATTN_SRC_HEAD NB_ATTN_SRC_TC_ASM       \
        NB_ATTN_SRC_ATOMIC NB_ATTN_SRC_TC_FRAG NB_ATTN_SRC_TC_FWD NB_ATTN_SRC_TC_BWD \
        "\n#if FM\n" NB_ATTN_SRC_FA_ASM NB_ATTN_SRC_FA "\n#endif\n"

#endif

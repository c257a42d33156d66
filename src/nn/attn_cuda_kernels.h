/* CUDA source of the tape's fused scaled-dot-product attention (tape_cuda_attn.c), as strings
 * that NVRTC compiles at run time, specialised by a prefix "#define DP <16|32|64|128>" (the head
 * dim rounded up; tiles are zero-padded to DP columns, the true d is a run-time argument).
 *
 * The code is written inside NB_ATTN_STR(...), so it may not contain preprocessor directives
 * (use _Pragma) and all lines collapse to one in compiler messages.
 *
 * Layout: q [BH,Tq,d], k, v [BH,Tk,d] row-major (BH = N * heads); lse [BH,Tq] holds the row
 * log-sum-exp of the scaled scores in base 2 (log2 sum_j 2^(s_ij * scale * log2 e)).
 *
 * SIMT fp32 kernels (256 threads, a 16 x 16 thread grid; thread (ty, tx) owns rows ty + 16 r and
 * columns tx + 16 c of every tile; the 16 lanes of a row group sit in one half-warp, so row
 * reductions are 4 xor shuffles). Products read float4 along shared rows whose strides (DP + 4,
 * BK + 4) put the 16 column groups' rows in distinct banks.
 *   nb_attn_fwd    one block per (BQ query rows, bh): Q tile resident, loops over BK-key tiles:
 *                  S = Q K^T (registers), online softmax (running max m, sum l; O rescaled),
 *                  P -> shared tile, O += P V. Never holds more than BQ x BK scores.
 *   nb_attn_delta  D_i = sum_e dO_ie O_ie, one warp per row.
 *   nb_attn_bwd    FlashAttention-2: one block per (BK keys, bh), K and V resident, dK and dV in
 *                  registers; loops over query tiles: recompute S and P = 2^(S scale log2e - lse),
 *                  dP = dO V^T, dS = P (dP - D) scale; dV += P^T dO, dK += dS^T Q, and
 *                  dQ += dS K added to global memory with atomics (so dQ's summation order over
 *                  key tiles is not deterministic; each element gets ceil(Tk / BK) adds; the dQ
 *                  step gives each thread adjacent column pairs for float2 atomics on sm_90+).
 * Gradients ACCUMULATE into the given buffers. dk and dv get one atomic add per element (so they
 * stay correct when the buffers alias dq, e.g. self-attention on one value).
 */
#ifndef NB_NN_ATTN_CUDA_KERNELS_H
#define NB_NN_ATTN_CUDA_KERNELS_H

#define NB_ATTN_STR(...) #__VA_ARGS__

/* Arguments (the host structs in tape_cuda_attn.c mirror these field by field), shared helpers. */
#define NB_ATTN_SRC_HEAD                                                                      \
    NB_ATTN_STR(                                                                              \
    typedef unsigned int u32;                                                                 \
    struct FwdArgs { const float *q, *k, *v; float *o, *lse; int Tq, Tk, d, ntiles; float sl2; }; \
    struct BwdArgs { const float *q, *k, *v, *dout, *lse, *delta; float *dq, *dk, *dv;        \
                     int Tq, Tk, d, ntiles; float sl2, scale; };                              \
    struct DeltaArgs { const float *o, *dout; float *delta; long long rows; int d; };         \
    constexpr unsigned FULL = 0xffffffffu;                                                    \
    __device__ __forceinline__ float pinf() { return __int_as_float(0x7f800000); }           \
    /* Rows [r0, r0 + 64) x DP of a [T, d] matrix into shared memory (stride S, a multiple of \
     * 4), zero-padded; float4 loads when d % 4 == 0 and src is 16-byte aligned. NTH threads. */ \
    template <int NTH>                                                                        \
    __device__ __forceinline__ void ld_tile(float *s, int S, const float *src, int r0, int T, int d) { \
        if ((d & 3) == 0 && ((unsigned long long)src & 15) == 0) {                            \
            for (int i = threadIdx.x; i < 16 * DP; i += NTH) {                                \
                const int r = i / (DP / 4), c = 4 * (i % (DP / 4));                           \
                float4 x = {0.0f, 0.0f, 0.0f, 0.0f};                                          \
                if (r0 + r < T && c < d) x = *(const float4 *)(src + (long long)(r0 + r) * d + c); \
                *(float4 *)(s + r * S + c) = x;                                               \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        for (int i = threadIdx.x; i < 64 * DP; i += NTH) {                                    \
            const int r = i / DP, c = i % DP;                                                 \
            s[r * S + c] = (r0 + r < T && c < d) ? src[(long long)(r0 + r) * d + c] : 0.0f;   \
        }                                                                                     \
    }                                                                                         \
    __device__ __forceinline__ float comp(const float4 &v, int i) {                           \
        return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;                              \
    }                                                                                         \
    __device__ __forceinline__ float4 ld4(const float *p) { return *(const float4 *)p; }      \
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
        ld_tile<NT>(sQ, SD, a.q + bh * a.Tq * a.d, q0, a.Tq, a.d);                            \
        float m[TM], l[TM], acc[TM][DC];                                                      \
        _Pragma("unroll") for (int r = 0; r < TM; r++) {                                      \
            m[r] = -pinf();                                                                   \
            l[r] = 0.0f;                                                                      \
            _Pragma("unroll") for (int c = 0; c < DC; c++) acc[r][c] = 0.0f;                  \
        }                                                                                     \
        for (int k0 = 0; k0 < a.Tk; k0 += BK) {                                               \
            __syncthreads();                                                                  \
            ld_tile<NT>(sK, SD, a.k + bh * a.Tk * a.d, k0, a.Tk, a.d);                        \
            ld_tile<NT>(sV, SD, a.v + bh * a.Tk * a.d, k0, a.Tk, a.d);                        \
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
        float *o = a.o + bh * a.Tq * a.d;                                                     \
        _Pragma("unroll") for (int r = 0; r < TM; r++) {                                      \
            const int row = q0 + ty + 16 * r;                                                 \
            if (row >= a.Tq) continue;                                                        \
            const float inv = 1.0f / l[r];                                                    \
            _Pragma("unroll") for (int c = 0; c < DC; c++) {                                  \
                const int col = tx + 16 * c;                                                  \
                if (col < a.d) o[(long long)row * a.d + col] = acc[r][c] * inv;               \
            }                                                                                 \
            if (tx == 0) a.lse[bh * a.Tq + row] = m[r] + log2f(l[r]);                         \
        }                                                                                     \
    }                                                                                         \
    )

/* D_i = sum_e dO_ie O_ie: one warp per row, grid-stride over warps. */
#define NB_ATTN_SRC_DELTA                                                                     \
    NB_ATTN_STR(                                                                              \
    extern "C" __global__ void nb_attn_delta(const DeltaArgs a) {                             \
        const int lane = threadIdx.x & 31;                                                    \
        const long long warps = (long long)gridDim.x * (blockDim.x >> 5);                     \
        for (long long row = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);  \
             row < a.rows; row += warps) {                                                    \
            float s = 0.0f;                                                                   \
            for (int e = lane; e < a.d; e += 32) s += a.o[row * a.d + e] * a.dout[row * a.d + e]; \
            _Pragma("unroll") for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(FULL, s, o); \
            if (lane == 0) a.delta[row] = s;                                                  \
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
        const float *q = a.q + bh * a.Tq * a.d, *dout = a.dout + bh * a.Tq * a.d;             \
        const float *lse = a.lse + bh * a.Tq, *delta = a.delta + bh * a.Tq;                   \
        ld_tile<NT>(sK, SD, a.k + bh * a.Tk * a.d, k0, a.Tk, a.d);                            \
        ld_tile<NT>(sV, SD, a.v + bh * a.Tk * a.d, k0, a.Tk, a.d);                            \
        const bool kv_grad = a.dk || a.dv;                                                    \
        float dk[TN][DC], dv[TN][DC];                                                         \
        _Pragma("unroll") for (int r = 0; r < TN; r++)                                        \
            _Pragma("unroll") for (int c = 0; c < DC; c++) dk[r][c] = dv[r][c] = 0.0f;        \
        for (int q0 = 0; q0 < a.Tq; q0 += BQ) {                                               \
            __syncthreads();                                                                  \
            ld_tile<NT>(sQ, SD, q, q0, a.Tq, a.d);                                            \
            ld_tile<NT>(sO, SD, dout, q0, a.Tq, a.d);                                         \
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
            if (a.dq) {                                                                       \
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
                float *dq = a.dq + bh * a.Tq * a.d;                                           \
                const bool pairs = PAIR_ATOMICS && (a.d & 1) == 0 &&                          \
                                   ((unsigned long long)a.dq & 7) == 0;                       \
                _Pragma("unroll") for (int r = 0; r < TM; r++) {                              \
                    const int row = q0 + ty + 16 * r;                                         \
                    if (row >= a.Tq) continue;                                                \
                    float *p = dq + (long long)row * a.d;                                     \
                    if constexpr (DC >= 2) {                                                  \
                        _Pragma("unroll") for (int c = 0; c < DC; c += 2) {                   \
                            const int col = 16 * c + 2 * tx;                                  \
                            if (pairs && col + 1 < a.d) {                                     \
                                atomic_add2(p + col, g[r][c], g[r][c + 1]);                   \
                            } else {                                                          \
                                if (col < a.d) atomicAdd(p + col, g[r][c]);                   \
                                if (col + 1 < a.d) atomicAdd(p + col + 1, g[r][c + 1]);       \
                            }                                                                 \
                        }                                                                     \
                    } else {                                                                  \
                        if (tx < a.d) atomicAdd(p + tx, g[r][0]);                             \
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
                const long long g = bh * a.Tk * a.d + (long long)row * a.d + col;             \
                if (a.dk) atomicAdd(a.dk + g, dk[r][c]); /* atomics: dk, dv may alias dq */   \
                if (a.dv) atomicAdd(a.dv + g, dv[r][c]);                                      \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    )

/* One module per padded head dim: every entry above. */
#define NB_ATTN_SRC(dp)                                                                       \
    "#define DP " #dp "\n" NB_ATTN_SRC_HEAD NB_ATTN_SRC_ATOMIC NB_ATTN_SRC_SIMT_HEAD NB_ATTN_SRC_FWD \
        NB_ATTN_SRC_DELTA NB_ATTN_SRC_BWD

#endif

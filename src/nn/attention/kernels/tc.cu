// The tensor-core variants of the fused attention (tape_cuda_attn.c), used for the TF32 and
// BF16 tape precisions at padded head dims 16, 32 and 64 (DP = 128 runs the fp32 SIMT kernels of
// simt.cu: its accumulators would not fit in registers). Defines: DP <16|32|64>, IS_BF16 <0|1>,
// FM and SBF as in simt.cu; the shared part is attn_common.cuh.
//
// mma.sync with fp32 accumulation: BF16 m16n8k16 (operands rounded to bf16), TF32 m16n8k8
// (operands rounded to tf32). Tiles stay fp32 in shared memory (ld_tile widens bf16 storage on
// the load, exactly) and are converted when fragments are loaded. Views and gradient modes as in
// simt.cu. Fragment helpers (g = lane / 4, t = lane % 4):
//   ldA_rows  A[r][k] = M[r0 + r][c0 + k]         (16 x KS, from shared memory)
//   ldB_rows  B[k][n] = M[n0 + n][c0 + k]         (KS x 8, "K^T": rows of M are B's columns)
//   ldB_cols  B[k][n] = M[k0 + k][n0 + n]         (KS x 8)
//   ldA_acc   A = a 16 x KS slice of a row of C accumulator tiles (P or dS straight from the
//             registers of the previous product: the FlashAttention-2 register reuse).
// TF32 uses a permuted k order inside each 8-step (mma k index t <-> element 2t, t + 4 <->
// 2t + 1), so that every thread's pair of elements is adjacent, exactly like BF16's pairs: the
// C layout (row g, columns 2t, 2t+1) is then directly an A fragment, and the shared loads are
// float2. The sum over k is the same set of products in any order.
//
//   nb_attn_fwd_tc  128 threads, one block per (64 queries, bh), each warp 16 query rows with
//                   its Q fragments in registers; per 64-key tile: S = Q K^T (8 n-tiles), online
//                   softmax on the accumulators (quad shuffles), O += P V with P reused from
//                   the registers. Shared: Q, K (stride DP + 8), V (stride DP + 4).
//   nb_attn_bwd_tc  128 threads, one block per (64 keys, bh), each warp 16 keys; per 64-query
//                   tile: S^T = K Q^T, dP^T = V dO^T, P^T and dS^T in registers; dV += P^T dO,
//                   dK += dS^T Q; dS^T -> shared (query-major), then each warp 16 query rows of
//                   dQ += dS K, added to global memory with atomics (float2 atomics on sm_90+
//                   when d is even). delta from nb_attn_delta.
//   nb_attn_fwd_fa / nb_attn_bwd_fa  whole-sequence kernels for feature-major views (below).
// Needs sm_80+ (mma.sync bf16 / tf32); tape_cuda_attn.c falls back to the SIMT kernels of
// simt.cu on older GPUs.
//
//
// One module per (DP, IS_BF16, FM, SBF): -D defines from tape_cuda_attn.c.
//! nvrtc-check: DP=32 IS_BF16=1 FM=1 SBF=2
//! nvrtc-check: DP=32 IS_BF16=0 FM=1 SBF=0
//! nvrtc-check: DP=16 IS_BF16=1 FM=1 SBF=1
//! nvrtc-check: DP=32 IS_BF16=1 FM=1 SBF=0
//! nvrtc-check: DP=32 IS_BF16=0 FM=1 SBF=2
//! nvrtc-check: DP=32 IS_BF16=1 FM=0 SBF=0
#include "attn_common.cuh"
// PTX helpers: conversions and mma.
__device__ __forceinline__ u32 cvt2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ u32 cvt1(float x) {
    u32 r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ void mma(float *c, const u32 *a, const u32 *b) {
    if (IS_BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#include "atomic.cuh"
#include "tc_frag.cuh"
/* 6 blocks per SM (80 registers) where that spills nothing: bf16 without run-time dtypes, DP <= 32 */
extern "C" __global__ void __launch_bounds__(128, IS_BF16 && DP <= 32 && SBF != 1 ? 6 : 0) nb_attn_fwd_tc(const FwdArgs a) {
    extern __shared__ float sm[];
    float *sQ = sm, *sK = sQ + 64 * SQ, *sV = sK + 64 * SQ;
    const int tile = blockIdx.x % a.ntiles;
    const long long bh = blockIdx.x / a.ntiles;
    const int q0 = tile * 64, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    ld_tile<128>(sQ, SQ, a.q, bh, q0, a.Tq, a.d);
    __syncthreads();
    u32 qa[DP / KS][4];
    _Pragma("unroll") for (int ks = 0; ks < DP / KS; ks++) ldA_rows(qa[ks], sQ, SQ, 16 * w, ks * KS, g, t);
    float m[2] = {-pinf(), -pinf()}, l[2] = {0.0f, 0.0f}, o[DP / 8][4];
    _Pragma("unroll") for (int n = 0; n < DP / 8; n++)
        _Pragma("unroll") for (int i = 0; i < 4; i++) o[n][i] = 0.0f;
    for (int k0 = 0; k0 < a.Tk; k0 += 64) {
        __syncthreads();
        ld_tile<128>(sK, SQ, a.k, bh, k0, a.Tk, a.d);
        ld_tile<128>(sV, SV, a.v, bh, k0, a.Tk, a.d);
        __syncthreads();
        float s[8][4];
        _Pragma("unroll") for (int n = 0; n < 8; n++) {
            _Pragma("unroll") for (int i = 0; i < 4; i++) s[n][i] = 0.0f;
            _Pragma("unroll") for (int ks = 0; ks < DP / KS; ks++) {
                u32 b[2];
                ldB_rows(b, sK, SQ, 8 * n, ks * KS, g, t);
                mma(s[n], qa[ks], b);
            }
        }
        float mx[2] = {-pinf(), -pinf()};
        _Pragma("unroll") for (int n = 0; n < 8; n++)
            _Pragma("unroll") for (int i = 0; i < 4; i++) {
                const int key = k0 + 8 * n + 2 * t + (i & 1);
                s[n][i] = key < a.Tk ? s[n][i] * a.sl2 : -pinf();
                mx[i >> 1] = fmaxf(mx[i >> 1], s[n][i]);
            }
        float al[2];
        _Pragma("unroll") for (int h = 0; h < 2; h++) {
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(FULL, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(FULL, mx[h], 2));
            const float mn = fmaxf(m[h], mx[h]); /* finite: the tile has a valid key */
            al[h] = exp2f(m[h] - mn);
            m[h] = mn;
            l[h] *= al[h];
        }
        _Pragma("unroll") for (int n = 0; n < 8; n++)
            _Pragma("unroll") for (int i = 0; i < 4; i++) {
                s[n][i] = exp2f(s[n][i] - m[i >> 1]);
                l[i >> 1] += s[n][i]; /* this thread's share; quad sum at the end */
            }
        _Pragma("unroll") for (int n = 0; n < DP / 8; n++)
            _Pragma("unroll") for (int i = 0; i < 4; i++) o[n][i] *= al[i >> 1];
        _Pragma("unroll") for (int kk = 0; kk < 64 / KS; kk++) {
            u32 pa[4];
            ldA_acc(pa, s, kk);
            _Pragma("unroll") for (int n = 0; n < DP / 8; n++) {
                u32 b[2];
                ldB_cols(b, sV, SV, kk * KS, 8 * n, g, t);
                mma(o[n], pa, b);
            }
        }
    }
    fwd_store(a, bh, q0, w, g, t, o, m, l);
}
template <bool PAIRS>
__device__ __forceinline__ void bwd_tc(const BwdArgs &a, float *sm) {
    float *sK = sm, *sV = sK + 64 * SV, *sQ = sV + 64 * SQ, *sO = sQ + 64 * SQ;
    float *sS = sO + 64 * SQ, *sL = sS + 64 * SSS, *sD = sL + 64;
    const int tile = blockIdx.x % a.ntiles;
    const long long bh = blockIdx.x / a.ntiles;
    const int k0 = tile * 64, tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const float *lse = a.lse + bh * a.Tq, *delta = a.delta + bh * a.Tq;
    ld_tile<128>(sK, SV, a.k, bh, k0, a.Tk, a.d);
    ld_tile<128>(sV, SQ, a.v, bh, k0, a.Tk, a.d);
    const bool kv_grad = a.dk.p || a.dv.p;
    float dk[DP / 8][4], dv[DP / 8][4];
    _Pragma("unroll") for (int n = 0; n < DP / 8; n++)
        _Pragma("unroll") for (int i = 0; i < 4; i++) dk[n][i] = dv[n][i] = 0.0f;
    for (int q0 = 0; q0 < a.Tq; q0 += 64) {
        __syncthreads();
        ld_tile<128>(sQ, SQ, a.q, bh, q0, a.Tq, a.d);
        ld_tile<128>(sO, SQ, a.dout, bh, q0, a.Tq, a.d);
        if (tid < 64) {
            const bool ok = q0 + tid < a.Tq;
            sL[tid] = ok ? lse[q0 + tid] : pinf(); /* P = 0 on padding rows */
            sD[tid] = ok ? delta[q0 + tid] : 0.0f;
        }
        __syncthreads();
        float st[8][4], dp[8][4];
        _Pragma("unroll") for (int n = 0; n < 8; n++)
            _Pragma("unroll") for (int i = 0; i < 4; i++) st[n][i] = dp[n][i] = 0.0f;
        _Pragma("unroll") for (int ks = 0; ks < DP / KS; ks++) {
            u32 ka[4], va[4];
            ldA_rows(ka, sK, SV, 16 * w, ks * KS, g, t);
            ldA_rows(va, sV, SQ, 16 * w, ks * KS, g, t);
            _Pragma("unroll") for (int n = 0; n < 8; n++) {
                u32 b[2];
                ldB_rows(b, sQ, SQ, 8 * n, ks * KS, g, t);
                mma(st[n], ka, b);
                ldB_rows(b, sO, SQ, 8 * n, ks * KS, g, t);
                mma(dp[n], va, b);
            }
        }
        _Pragma("unroll") for (int n = 0; n < 8; n++)
            _Pragma("unroll") for (int i = 0; i < 4; i++) {
                const int qi = 8 * n + 2 * t + (i & 1), kr = 16 * w + g + 8 * (i >> 1);
                const float p = k0 + kr < a.Tk ? exp2f(st[n][i] * a.sl2 - sL[qi]) : 0.0f;
                const float ds = p * (dp[n][i] - sD[qi]) * a.scale;
                st[n][i] = p;
                dp[n][i] = ds;
                sS[qi * SSS + kr] = ds;
            }
        if (kv_grad) {
            _Pragma("unroll") for (int kk = 0; kk < 64 / KS; kk++) {
                u32 pa[4], sa[4];
                ldA_acc(pa, st, kk);
                ldA_acc(sa, dp, kk);
                _Pragma("unroll") for (int n = 0; n < DP / 8; n++) {
                    u32 b[2];
                    ldB_cols(b, sO, SQ, kk * KS, 8 * n, g, t);
                    mma(dv[n], pa, b);
                    ldB_cols(b, sQ, SQ, kk * KS, 8 * n, g, t);
                    mma(dk[n], sa, b);
                }
            }
        }
        if (a.dq.p) {
            __syncthreads();
            float acc[DP / 8][4];
            _Pragma("unroll") for (int n = 0; n < DP / 8; n++)
                _Pragma("unroll") for (int i = 0; i < 4; i++) acc[n][i] = 0.0f;
            _Pragma("unroll") for (int kk = 0; kk < 64 / KS; kk++) {
                u32 sa[4];
                ldA_rows(sa, sS, SSS, 16 * w, kk * KS, g, t);
                _Pragma("unroll") for (int n = 0; n < DP / 8; n++) {
                    u32 b[2];
                    ldB_cols(b, sK, SV, kk * KS, 8 * n, g, t);
                    mma(acc[n], sa, b);
                }
            }
            _Pragma("unroll") for (int h = 0; h < 2; h++) {
                const int row = q0 + 16 * w + g + 8 * h;
                if (row >= a.Tq) continue;
                const long long ri = at(a.dq, bh, row, 0);
                _Pragma("unroll") for (int n = 0; n < DP / 8; n++)
                    add2(a.dq, ri, 8 * n + 2 * t, a.d, acc[n][2 * h], acc[n][2 * h + 1], PAIRS, a.dq_mode);
            }
        }
    }
    _Pragma("unroll") for (int h = 0; h < 2; h++) {
        const int row = k0 + 16 * w + g + 8 * h;
        if (row >= a.Tk) continue;
        const long long rk = at(a.dk, bh, row, 0), rv = at(a.dv, bh, row, 0);
        _Pragma("unroll") for (int n = 0; n < DP / 8; n++) {
            if (a.dk.p) add2(a.dk, rk, 8 * n + 2 * t, a.d, dk[n][2 * h], dk[n][2 * h + 1], PAIRS, a.kv_mode);
            if (a.dv.p) add2(a.dv, rv, 8 * n + 2 * t, a.d, dv[n][2 * h], dv[n][2 * h + 1], PAIRS, a.kv_mode);
        }
    }
}
/* float2 atomics (sm_90) when d is even and every gradient is an atomically accumulated,
 * row-major f32 view (pair_ok); the choice is made once per launch (a run-time branch
 * around the atomics doubles register use). */
extern "C" __global__ void __launch_bounds__(128, IS_BF16 && DP == 32 ? 3 : 0) nb_attn_bwd_tc(const BwdArgs a) {
    extern __shared__ float smb[];
    if (PAIR_ATOMICS && (a.d & 1) == 0 && a.dq_mode == 0 && a.kv_mode == 0 &&
        pair_ok(a.dq) && pair_ok(a.dk) && pair_ok(a.dv))
        bwd_tc<true>(a, smb);
    else
        bwd_tc<false>(a, smb);
}
#if FM
__device__ __forceinline__ unsigned sa(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void cp16(void *s, const void *g) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa(s)), "l"(g));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
/* wait until at most n (0..7) of this thread's committed groups are pending */
__device__ __forceinline__ void cp_wait_n(int n) {
    if (n <= 0) asm volatile("cp.async.wait_group 0;" ::: "memory");
    else if (n == 1) asm volatile("cp.async.wait_group 1;" ::: "memory");
    else if (n == 2) asm volatile("cp.async.wait_group 2;" ::: "memory");
    else if (n == 3) asm volatile("cp.async.wait_group 3;" ::: "memory");
    else if (n == 4) asm volatile("cp.async.wait_group 4;" ::: "memory");
    else if (n == 5) asm volatile("cp.async.wait_group 5;" ::: "memory");
    else if (n == 6) asm volatile("cp.async.wait_group 6;" ::: "memory");
    else asm volatile("cp.async.wait_group 7;" ::: "memory");
}
__device__ __forceinline__ void ldsm4(u32 *r, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(sa(p)));
}
__device__ __forceinline__ void ldsm4t(u32 *r, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(sa(p)));
}
__device__ __forceinline__ void ldsm2t(u32 *r, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(sa(p)));
}
#include "fa.cuh"
#endif

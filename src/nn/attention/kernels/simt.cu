// The tape's fused scaled-dot-product attention (tape_cuda_attn.c), SIMT fp32 kernels, compiled
// by NVRTC at run time, specialised by the define DP <16|32|64|128> (the head dim rounded up;
// tiles are zero-padded to DP columns, the true d is a run-time argument).
//
// Further defines FM <0|1> (feature-major views) and SBF <0|1|2> (f32
// storage / each view's own dtype / all bf16) specialise the loads, stores and gradient writes
// at compile time, so the row-major f32 modules compile to the code of the original [BH,T,d]
// kernels and the all-bf16 ones carry no dtype branches (a run-time dtype costs ~30 registers).
//
// Layout: every tensor is a strided view (struct Mat, attn_cuda.h's nb_attn_view): element
// (bh, position t, feature i) at p[bh bs + t rs + i cs], f32 or bf16 (Mat.bf; graph/kernels/bf16.cuh's
// nb_ld / nb_st: loads widen to f32, stores round to nearest even). nb_tape_attention uses
// [BH,T,d] row-major (cs = 1); the fused QKV op reads q, k, v straight from the legacy qkv layout
// [N, heads*3d, L] (rs = 1, cs = L: feature-major, positions contiguous; tiles are then loaded
// along positions, coalesced) and writes o in [N, heads*d, L]. Shared tiles are f32 either way,
// so the products below do not depend on the layout. lse [BH,Tq] (f32) holds the row
// log-sum-exp of the scaled scores in base 2 (log2 sum_j 2^(s_ij * scale * log2 e)).
// Gradient writes (gw) have a mode: 0 atomicAdd (f32 only; the buffers may alias), 1 store,
// 2 load + add + store (1 and 2: one writer per element; dq only when there is one key tile).
//
// SIMT fp32 kernels (256 threads, a 16 x 16 thread grid; thread (ty, tx) owns rows ty + 16 r and
// columns tx + 16 c of every tile; the 16 lanes of a row group sit in one half-warp, so row
// reductions are 4 xor shuffles). Products read float4 along shared rows whose strides (DP + 4,
// BK + 4) put the 16 column groups' rows in distinct banks.
//   nb_attn_fwd    one block per (BQ query rows, bh): Q tile resident, loops over BK-key tiles:
//                  S = Q K^T (registers), online softmax (running max m, sum l; O rescaled),
//                  P -> shared tile, O += P V. Never holds more than BQ x BK scores.
//   nb_attn_delta  D_i = sum_e dO_ie O_ie, one warp per row (row-major views), or
//   nb_attn_delta_t  one thread per row (feature-major views: coalesced along positions); both
//                  also zero an f32 dq accumulator z when z.p is set (store mode, dq atomics).
//   nb_attn_dq_fin dq (any view / dtype) = [dq +] an f32 accumulator [BH, d, Tq] (bf16 dq).
//   nb_attn_bwd    FlashAttention-2: one block per (BK keys, bh), K and V resident, dK and dV in
//                  registers; loops over query tiles: recompute S and P = 2^(S scale log2e - lse),
//                  dP = dO V^T, dS = P (dP - D) scale; dV += P^T dO, dK += dS^T Q, and
//                  dQ += dS K added to global memory with atomics (so dQ's summation order over
//                  key tiles is not deterministic; each element gets ceil(Tk / BK) adds; the dQ
//                  step gives each thread adjacent column pairs for float2 atomics on sm_90+).
// With mode 0 (nb_tape_attention) gradients ACCUMULATE into the given buffers: dk and dv get one
// atomic add per element (so they stay correct when the buffers alias dq, e.g. self-attention on
// one value). The fused QKV op uses modes 1 / 2 for dk, dv (their block is the only writer) and
// for dq when Tk <= 64; else dq is zeroed by the delta kernel (f32) or accumulated in an f32
// scratch and converted by nb_attn_dq_fin (bf16).
//
//
// One module per (padded head dim DP, layout FM, storage SBF): -D defines from tape_cuda_attn.c.
//! nvrtc-check: DP=64 FM=0 SBF=0
//! nvrtc-check: DP=128 FM=1 SBF=2
#include "attn_common.cuh"
#include "atomic.cuh"
// Tile sizes of the SIMT kernels: row strides are multiples of 4 (float4 reads along rows) and
// 4 mod 16 floats apart for the 16 column-group threads (conflict-free 128-bit reads).
constexpr int NT = 256;
constexpr int BQ = 64, BK = 64;
constexpr int TM = BQ / 16, TN = BK / 16, DC = DP / 16;
constexpr int SD = DP + 4, SP = BK + 4;
// Forward, SIMT fp32. Dynamic shared memory: ((BQ + 2 BK) SD + BQ SP) floats.
extern "C" __global__ void __launch_bounds__(256) nb_attn_fwd(const FwdArgs a) {
    extern __shared__ float sm[];
    float *sQ = sm, *sK = sQ + BQ * SD, *sV = sK + BK * SD, *sP = sV + BK * SD;
    const int tile = blockIdx.x % a.ntiles;
    const long long bh = blockIdx.x / a.ntiles;
    const int q0 = tile * BQ, tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    ld_tile<NT>(sQ, SD, a.q, bh, q0, a.Tq, a.d);
    float m[TM], l[TM], acc[TM][DC];
    _Pragma("unroll") for (int r = 0; r < TM; r++) {
        m[r] = -pinf();
        l[r] = 0.0f;
        _Pragma("unroll") for (int c = 0; c < DC; c++) acc[r][c] = 0.0f;
    }
    for (int k0 = 0; k0 < a.Tk; k0 += BK) {
        __syncthreads();
        ld_tile<NT>(sK, SD, a.k, bh, k0, a.Tk, a.d);
        ld_tile<NT>(sV, SD, a.v, bh, k0, a.Tk, a.d);
        __syncthreads();
        float s[TM][TN];
        _Pragma("unroll") for (int r = 0; r < TM; r++)
            _Pragma("unroll") for (int c = 0; c < TN; c++) s[r][c] = 0.0f;
        _Pragma("unroll 2") for (int e = 0; e < DP; e += 4) {
            float4 qv[TM], kv[TN];
            _Pragma("unroll") for (int r = 0; r < TM; r++) qv[r] = ld4(sQ + (ty + 16 * r) * SD + e);
            _Pragma("unroll") for (int c = 0; c < TN; c++) kv[c] = ld4(sK + (tx + 16 * c) * SD + e);
            _Pragma("unroll") for (int r = 0; r < TM; r++)
                _Pragma("unroll") for (int c = 0; c < TN; c++) {
                    s[r][c] = fmaf(qv[r].x, kv[c].x, s[r][c]);
                    s[r][c] = fmaf(qv[r].y, kv[c].y, s[r][c]);
                    s[r][c] = fmaf(qv[r].z, kv[c].z, s[r][c]);
                    s[r][c] = fmaf(qv[r].w, kv[c].w, s[r][c]);
                }
        }
        _Pragma("unroll") for (int r = 0; r < TM; r++) {
            float mx = -pinf();
            _Pragma("unroll") for (int c = 0; c < TN; c++) {
                s[r][c] = (k0 + tx + 16 * c < a.Tk) ? s[r][c] * a.sl2 : -pinf();
                mx = fmaxf(mx, s[r][c]);
            }
            _Pragma("unroll") for (int o = 8; o > 0; o >>= 1)
                mx = fmaxf(mx, __shfl_xor_sync(FULL, mx, o));
            const float mn = fmaxf(m[r], mx); /* finite: the tile has a valid key */
            const float al = exp2f(m[r] - mn);
            float sum = 0.0f;
            _Pragma("unroll") for (int c = 0; c < TN; c++) {
                const float p = exp2f(s[r][c] - mn);
                sum += p;
                sP[(ty + 16 * r) * SP + tx + 16 * c] = p;
            }
            _Pragma("unroll") for (int o = 8; o > 0; o >>= 1)
                sum += __shfl_xor_sync(FULL, sum, o);
            l[r] = l[r] * al + sum;
            m[r] = mn;
            _Pragma("unroll") for (int c = 0; c < DC; c++) acc[r][c] *= al;
        }
        __syncthreads();
        const int kn = min(BK, a.Tk - k0); /* P = 0 and V = 0 on padding keys */
        _Pragma("unroll 2") for (int j = 0; j < kn; j += 4) {
            float4 pv[TM];
            _Pragma("unroll") for (int r = 0; r < TM; r++) pv[r] = ld4(sP + (ty + 16 * r) * SP + j);
            _Pragma("unroll") for (int jj = 0; jj < 4; jj++) {
                float vv[DC];
                _Pragma("unroll") for (int c = 0; c < DC; c++) vv[c] = sV[(j + jj) * SD + tx + 16 * c];
                _Pragma("unroll") for (int r = 0; r < TM; r++)
                    _Pragma("unroll") for (int c = 0; c < DC; c++)
                        acc[r][c] = fmaf(comp(pv[r], jj), vv[c], acc[r][c]);
            }
        }
    }
    _Pragma("unroll") for (int r = 0; r < TM; r++) {
        const int row = q0 + ty + 16 * r;
        if (row >= a.Tq) continue;
        const float inv = 1.0f / l[r];
        _Pragma("unroll") for (int c = 0; c < DC; c++) {
            const int col = tx + 16 * c;
            if (col < a.d) nb_st(a.o.p, at(a.o, bh, row, col), mbf(a.o), acc[r][c] * inv);
        }
        if (tx == 0) a.lse[bh * a.Tq + row] = m[r] + log2f(l[r]);
    }
}
#include "delta.cuh"
extern "C" __global__ void __launch_bounds__(256) nb_attn_bwd(const BwdArgs a) {
    extern __shared__ float sm[];
    float *sK = sm, *sV = sK + BK * SD, *sQ = sV + BK * SD, *sO = sQ + BQ * SD;
    float *sPt = sO + BQ * SD, *sSt = sPt + BK * SP, *sS = sSt + BK * SP;
    float *sL = sS + BQ * SP, *sD = sL + BQ;
    const int tile = blockIdx.x % a.ntiles;
    const long long bh = blockIdx.x / a.ntiles;
    const int k0 = tile * BK, tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const float *lse = a.lse + bh * a.Tq, *delta = a.delta + bh * a.Tq;
    ld_tile<NT>(sK, SD, a.k, bh, k0, a.Tk, a.d);
    ld_tile<NT>(sV, SD, a.v, bh, k0, a.Tk, a.d);
    const bool kv_grad = a.dk.p || a.dv.p;
    float dk[TN][DC], dv[TN][DC];
    _Pragma("unroll") for (int r = 0; r < TN; r++)
        _Pragma("unroll") for (int c = 0; c < DC; c++) dk[r][c] = dv[r][c] = 0.0f;
    for (int q0 = 0; q0 < a.Tq; q0 += BQ) {
        __syncthreads();
        ld_tile<NT>(sQ, SD, a.q, bh, q0, a.Tq, a.d);
        ld_tile<NT>(sO, SD, a.dout, bh, q0, a.Tq, a.d);
        if (tid < BQ) {
            const bool ok = q0 + tid < a.Tq;
            sL[tid] = ok ? lse[q0 + tid] : pinf(); /* P = 0 on padding rows */
            sD[tid] = ok ? delta[q0 + tid] : 0.0f;
        }
        __syncthreads();
        float s[TM][TN], dp[TM][TN];
        _Pragma("unroll") for (int r = 0; r < TM; r++)
            _Pragma("unroll") for (int c = 0; c < TN; c++) s[r][c] = dp[r][c] = 0.0f;
        for (int e = 0; e < DP; e += 4) {
            float4 qv[TM], ov[TM], kv[TN], vv[TN];
            _Pragma("unroll") for (int r = 0; r < TM; r++) {
                qv[r] = ld4(sQ + (ty + 16 * r) * SD + e);
                ov[r] = ld4(sO + (ty + 16 * r) * SD + e);
            }
            _Pragma("unroll") for (int c = 0; c < TN; c++) {
                kv[c] = ld4(sK + (tx + 16 * c) * SD + e);
                vv[c] = ld4(sV + (tx + 16 * c) * SD + e);
            }
            _Pragma("unroll") for (int r = 0; r < TM; r++)
                _Pragma("unroll") for (int c = 0; c < TN; c++)
                    _Pragma("unroll") for (int u = 0; u < 4; u++) {
                        s[r][c] = fmaf(comp(qv[r], u), comp(kv[c], u), s[r][c]);
                        dp[r][c] = fmaf(comp(ov[r], u), comp(vv[c], u), dp[r][c]);
                    }
        }
        _Pragma("unroll") for (int r = 0; r < TM; r++) {
            const int i = ty + 16 * r;
            const float li = sL[i], di = sD[i];
            _Pragma("unroll") for (int c = 0; c < TN; c++) {
                const int j = tx + 16 * c;
                const float p = (k0 + j < a.Tk) ? exp2f(s[r][c] * a.sl2 - li) : 0.0f;
                const float ds = p * (dp[r][c] - di) * a.scale;
                sPt[j * SP + i] = p;
                sSt[j * SP + i] = ds;
                sS[i * SP + j] = ds;
            }
        }
        __syncthreads();
        if (kv_grad) {
            const int qn = min(BQ, a.Tq - q0); /* P = dS = 0, Q = dO = 0 past it */
            for (int i = 0; i < qn; i += 4) {
                float4 pj[TN], sj[TN];
                _Pragma("unroll") for (int r = 0; r < TN; r++) {
                    pj[r] = ld4(sPt + (ty + 16 * r) * SP + i);
                    sj[r] = ld4(sSt + (ty + 16 * r) * SP + i);
                }
                _Pragma("unroll") for (int u = 0; u < 4; u++) {
                    float ov[DC], qv[DC];
                    _Pragma("unroll") for (int c = 0; c < DC; c++) {
                        ov[c] = sO[(i + u) * SD + tx + 16 * c];
                        qv[c] = sQ[(i + u) * SD + tx + 16 * c];
                    }
                    _Pragma("unroll") for (int r = 0; r < TN; r++)
                        _Pragma("unroll") for (int c = 0; c < DC; c++) {
                            dv[r][c] = fmaf(comp(pj[r], u), ov[c], dv[r][c]);
                            dk[r][c] = fmaf(comp(sj[r], u), qv[c], dk[r][c]);
                        }
                }
            }
        }
        if (a.dq.p) {
            /* columns in adjacent pairs (DP >= 32): col(c) = 32 (c / 2) + 2 tx + c % 2, so
             * K is read as float2 and dq gets float2 atomics */
            float g[TM][DC];
            _Pragma("unroll") for (int r = 0; r < TM; r++)
                _Pragma("unroll") for (int c = 0; c < DC; c++) g[r][c] = 0.0f;
            const int kn = min(BK, a.Tk - k0); /* dS = 0, K = 0 past it */
            for (int j = 0; j < kn; j += 4) {
                float4 sv[TM];
                _Pragma("unroll") for (int r = 0; r < TM; r++) sv[r] = ld4(sS + (ty + 16 * r) * SP + j);
                _Pragma("unroll") for (int u = 0; u < 4; u++) {
                    float kv[DC];
                    if constexpr (DC >= 2) {
                        _Pragma("unroll") for (int c = 0; c < DC; c += 2) {
                            const float2 x = *(const float2 *)(sK + (j + u) * SD + 16 * c + 2 * tx);
                            kv[c] = x.x;
                            kv[c + 1] = x.y;
                        }
                    } else {
                        kv[0] = sK[(j + u) * SD + tx];
                    }
                    _Pragma("unroll") for (int r = 0; r < TM; r++)
                        _Pragma("unroll") for (int c = 0; c < DC; c++)
                            g[r][c] = fmaf(comp(sv[r], u), kv[c], g[r][c]);
                }
            }
            const bool pairs = PAIR_ATOMICS && (a.d & 1) == 0 && a.dq_mode == 0 &&
                               pair_ok(a.dq);
            _Pragma("unroll") for (int r = 0; r < TM; r++) {
                const int row = q0 + ty + 16 * r;
                if (row >= a.Tq) continue;
                const long long ri = at(a.dq, bh, row, 0);
                if constexpr (DC >= 2) {
                    _Pragma("unroll") for (int c = 0; c < DC; c += 2) {
                        const int col = 16 * c + 2 * tx;
                        if (pairs && col + 1 < a.d) {
                            atomic_add2((float *)a.dq.p + ri + col, g[r][c], g[r][c + 1]);
                        } else {
                            if (col < a.d) gw(a.dq, ri + col * a.dq.cs, g[r][c], a.dq_mode);
                            if (col + 1 < a.d) gw(a.dq, ri + (col + 1) * a.dq.cs, g[r][c + 1], a.dq_mode);
                        }
                    }
                } else {
                    if (tx < a.d) gw(a.dq, ri + tx * a.dq.cs, g[r][0], a.dq_mode);
                }
            }
        }
    }
    _Pragma("unroll") for (int r = 0; r < TN; r++) {
        const int row = k0 + ty + 16 * r;
        if (row >= a.Tk) continue;
        _Pragma("unroll") for (int c = 0; c < DC; c++) {
            const int col = tx + 16 * c;
            if (col >= a.d) continue;
            /* mode 0 (atomics): dk, dv may alias dq */
            if (a.dk.p) gw(a.dk, at(a.dk, bh, row, col), dk[r][c], a.kv_mode);
            if (a.dv.p) gw(a.dv, at(a.dv, bh, row, col), dv[r][c], a.kv_mode);
        }
    }
}

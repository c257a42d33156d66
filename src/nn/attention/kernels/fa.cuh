// The whole-sequence kernels nb_attn_fwd_fa / nb_attn_bwd_fa of tc.cu (feature-major modules,
// FM 1). A file of its own so tests/emu/attn2_emu.sh can run it on the CPU.
#pragma once
template <bool B> struct ETy { typedef float T; };
template <> struct ETy<true> { typedef unsigned short T; };
typedef ETy<IS_BF16 != 0>::T E;
constexpr int PADE = IS_BF16 ? 8 : 4, QC = 32;
__device__ __forceinline__ E to_e(float x) {
    if constexpr (IS_BF16) return nb_f2bf(x); else return x;
}
/* TF32 tiles are rounded once in shared memory (round_tf32), so fragments take raw bits */
__device__ __forceinline__ u32 tf(const E *p) { return __float_as_uint(*(const float *)p); }
__device__ __forceinline__ u32 fb(float x) { return __float_as_uint(x); }
/* s[0, n) = cvt.rna.tf32(s[i]) (TF32 only), block-wide */
__device__ __forceinline__ void round_tf32(E *s, int n) {
    if constexpr (!IS_BF16)
        for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = __uint_as_float(cvt1(s[i]));
}
__device__ __forceinline__ void fragA_T(u32 *a, const E *M, int S, int r0, int c0, int lane) {
    const int g = lane >> 2, t = lane & 3;
    if constexpr (IS_BF16) {
        const int i = lane >> 3, j = lane & 7;
        ldsm4t(a, M + (c0 + (i >> 1) * 8 + j) * S + r0 + (i & 1) * 8);
    } else {
        const E *p = M + (c0 + 2 * t) * S + r0 + g;
        a[0] = tf(p); a[1] = tf(p + 8); a[2] = tf(p + S); a[3] = tf(p + S + 8);
    }
}
__device__ __forceinline__ void fragA_N(u32 *a, const E *M, int S, int r0, int c0, int lane) {
    const int g = lane >> 2, t = lane & 3;
    if constexpr (IS_BF16) {
        const int i = lane >> 3, j = lane & 7;
        ldsm4(a, M + (r0 + (i & 1) * 8 + j) * S + c0 + (i >> 1) * 8);
    } else {
        const float2 x0 = *(const float2 *)(M + (r0 + g) * S + c0 + 2 * t);
        const float2 x1 = *(const float2 *)(M + (r0 + g + 8) * S + c0 + 2 * t);
        a[0] = fb(x0.x); a[1] = fb(x1.x); a[2] = fb(x0.y); a[3] = fb(x1.y);
    }
}
__device__ __forceinline__ void fragB_T2(u32 *b, const E *M, int S, int k0, int n0, int lane) {
    const int g = lane >> 2, t = lane & 3;
    if constexpr (IS_BF16) {
        const int i = lane >> 3, j = lane & 7;
        ldsm4t(b, M + (k0 + (i & 1) * 8 + j) * S + n0 + (i >> 1) * 8);
    } else {
        const E *p = M + (k0 + 2 * t) * S + n0 + g;
        b[0] = tf(p); b[1] = tf(p + S); b[2] = tf(p + 8); b[3] = tf(p + S + 8);
    }
}
__device__ __forceinline__ void fragB_T1(u32 *b, const E *M, int S, int k0, int n0, int lane) {
    const int g = lane >> 2, t = lane & 3;
    if constexpr (IS_BF16) {
        const int i = (lane >> 3) & 1, j = lane & 7;
        ldsm2t(b, M + (k0 + i * 8 + j) * S + n0);
    } else {
        const E *p = M + (k0 + 2 * t) * S + n0 + g;
        b[0] = tf(p); b[1] = tf(p + S);
    }
}
__device__ __forceinline__ void fragB_N2(u32 *b, const E *M, int S, int k0, int n0, int lane) {
    const int g = lane >> 2, t = lane & 3;
    if constexpr (IS_BF16) {
        const int i = lane >> 3, j = lane & 7;
        ldsm4(b, M + (n0 + (i >> 1) * 8 + j) * S + k0 + (i & 1) * 8);
    } else {
        const float2 x0 = *(const float2 *)(M + (n0 + g) * S + k0 + 2 * t);
        const float2 x1 = *(const float2 *)(M + (n0 + 8 + g) * S + k0 + 2 * t);
        b[0] = fb(x0.x); b[1] = fb(x0.y); b[2] = fb(x1.x); b[3] = fb(x1.y);
    }
}
__device__ __forceinline__ void ldB_acc2(u32 *b, float (*c)[4], int kk) {
    if constexpr (IS_BF16) {
        b[0] = cvt2(c[2 * kk][0], c[2 * kk][1]); b[1] = cvt2(c[2 * kk + 1][0], c[2 * kk + 1][1]);
        b[2] = cvt2(c[2 * kk][2], c[2 * kk][3]); b[3] = cvt2(c[2 * kk + 1][2], c[2 * kk + 1][3]);
    } else {
        b[0] = cvt1(c[kk][0]); b[1] = cvt1(c[kk][1]); b[2] = cvt1(c[kk][2]); b[3] = cvt1(c[kk][3]);
    }
}
/* positions [r0, r0 + cnt) x features [0, DP) of view m (bh) -> s[f * S + p], zero-padded
 * (cnt a multiple of 16); cp.async when the storage is E and 16-byte chunks are aligned */
__device__ __forceinline__ void ld_fm(E *s, int S, const Mat &m, long long bh, int r0, int cnt,
                                     int T, int d) {
    const int bf = mbf(m), tid = threadIdx.x, nth = blockDim.x;
    const long long base = bh * m.bs;
    constexpr int VE = 16 / (int)sizeof(E);
    if ((bf != 0) == (IS_BF16 != 0) && ((unsigned long long)m.p & 15) == 0 &&
        m.bs % VE == 0 && m.cs % VE == 0 && T % VE == 0 && r0 % VE == 0) {
        const int cpr = cnt / VE;
        for (int i = tid; i < DP * cpr; i += nth) {
            const int f = i / cpr, p = (i - f * cpr) * VE;
            E *dst = s + f * S + p;
            if (f < d && r0 + p < T)
                cp16(dst, (const E *)m.p + base + (long long)f * m.cs + r0 + p);
            else
                *(uint4 *)dst = make_uint4(0u, 0u, 0u, 0u);
        }
        return;
    }
    for (int i = tid; i < DP * cnt; i += nth) {
        const int f = i / cnt, p = i - f * cnt;
        const float x = f < d && r0 + p < T ? nb_ld(m.p, base + (long long)f * m.cs + r0 + p, bf) : 0.0f;
        s[f * S + p] = to_e(x);
    }
}
/* gradient pair (positions pos, pos + 1; feature f) in mode 1 (store) / 2 (add) */
__device__ __forceinline__ void st_pair(const Mat &m, long long bh, int pos, int f, int T, int d,
                                        float x, float y, int mode) {
    if (f >= d) return;
    const long long i = bh * m.bs + (long long)f * m.cs + pos;
    if (pos < T) gw(m, i, x, mode);
    if (pos + 1 < T) gw(m, i + 1, y, mode);
}
/* bf16: 3 blocks of 8 warps per SM (80 registers): the UNet's 384 blocks in one wave */
extern "C" __global__ void __launch_bounds__(256, IS_BF16 && SBF != 1 ? 3 : 1) nb_attn_fwd_fa(const FwdArgs a) {
    extern __shared__ __align__(16) unsigned char smc[];
    const int NW = blockDim.x >> 5, QB = 16 * NW;
    const int Tkp = (a.Tk + 63) & ~63, SRK = Tkp + PADE, SRQ = QB + PADE;
    E *sK = (E *)smc, *sV = sK + DP * SRK, *sQ = sV + DP * SRK;
    const int tile = blockIdx.x % a.ntiles;
    const long long bh = blockIdx.x / a.ntiles;
    const int q0 = tile * QB, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    /* copy groups: Q with the first 64 keys, then one per 64-key step */
    const int ntk = Tkp / 64;
    ld_fm(sQ, SRQ, a.q, bh, q0, QB, a.Tq, a.d);
    for (int j = 0; j < ntk; j++) {
        ld_fm(sK + 64 * j, SRK, a.k, bh, 64 * j, 64, a.Tk, a.d);
        ld_fm(sV + 64 * j, SRK, a.v, bh, 64 * j, 64, a.Tk, a.d);
        cp_commit();
    }
    if constexpr (!IS_BF16) { /* all tiles, rounded to tf32 once */
        cp_wait_n(0);
        __syncthreads();
        round_tf32(sK, 2 * DP * SRK + DP * SRQ);
    }
    cp_wait_n(ntk - 1);
    __syncthreads();
    u32 qa[DP / KS][4];
    _Pragma("unroll") for (int ks = 0; ks < DP / KS; ks++) fragA_T(qa[ks], sQ, SRQ, 16 * w, ks * KS, lane);
    float m[2] = {-pinf(), -pinf()}, l[2] = {0.0f, 0.0f}, o[DP / 8][4];
    _Pragma("unroll") for (int n = 0; n < DP / 8; n++)
        _Pragma("unroll") for (int i = 0; i < 4; i++) o[n][i] = 0.0f;
    for (int k0 = 0, j = 0; k0 < a.Tk; k0 += 64, j++) {
        if (j > 0) {
            cp_wait_n(ntk - 1 - j);
            __syncthreads();
        }
        float s[8][4];
        _Pragma("unroll") for (int n = 0; n < 8; n++)
            _Pragma("unroll") for (int i = 0; i < 4; i++) s[n][i] = 0.0f;
        _Pragma("unroll") for (int n = 0; n < 8; n += 2)
            _Pragma("unroll") for (int ks = 0; ks < DP / KS; ks++) {
                u32 b[4];
                fragB_T2(b, sK, SRK, ks * KS, k0 + 8 * n, lane);
                mma(s[n], qa[ks], b);
                mma(s[n + 1], qa[ks], b + 2);
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
            const float mn = fmaxf(m[h], mx[h]);
            al[h] = exp2f(m[h] - mn);
            m[h] = mn;
            l[h] *= al[h];
        }
        _Pragma("unroll") for (int n = 0; n < 8; n++)
            _Pragma("unroll") for (int i = 0; i < 4; i++) {
                s[n][i] = exp2f(s[n][i] - m[i >> 1]);
                l[i >> 1] += s[n][i];
            }
        _Pragma("unroll") for (int n = 0; n < DP / 8; n++)
            _Pragma("unroll") for (int i = 0; i < 4; i++) o[n][i] *= al[i >> 1];
        _Pragma("unroll") for (int kk = 0; kk < 64 / KS; kk++) {
            u32 pa[4];
            ldA_acc(pa, s, kk);
            _Pragma("unroll") for (int n = 0; n < DP / 8; n += 2) {
                u32 b[4];
                fragB_N2(b, sV, SRK, k0 + kk * KS, 8 * n, lane);
                mma(o[n], pa, b);
                mma(o[n + 1], pa, b + 2);
            }
        }
    }
    fwd_store(a, bh, q0, w, g, t, o, m, l);
}
/* dq rows [q0, q0 + QC) from the f32 chunk buffer b[f][q] (row stride S), in dq's mode,
 * coalesced along positions; b is zeroed for its next chunk */
__device__ __forceinline__ void flush_dq(const BwdArgs &a, long long bh, float *b, int S, int q0) {
    for (int i = threadIdx.x; i < DP * QC; i += blockDim.x) {
        const int f = i / QC, q = i - f * QC;
        if (f < a.d && q0 + q < a.Tq)
            gw(a.dq, bh * a.dq.bs + (long long)f * a.dq.cs + q0 + q, b[f * S + q], a.dq_mode);
        b[f * S + q] = 0.0f;
    }
}
__device__ __forceinline__ void bwd_fa(const BwdArgs &a) {
    extern __shared__ __align__(16) unsigned char smc[];
    const int NW = blockDim.x >> 5, Tkp = 16 * NW, Tqp = (a.Tq + QC - 1) / QC * QC;
    const int SRK = Tkp + PADE, SRQ = Tqp + PADE, SRS = QC + PADE;
    E *sK = (E *)smc, *sV = sK + DP * SRK, *sQ = sV + DP * SRK, *sO = sQ + DP * SRQ;
    E *sS = sO + DP * SRQ;
    float *sL = (float *)(sS + 2 * Tkp * SRS), *sD = sL + Tqp, *sQd = sD + Tqp;
    const long long bh = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t = lane & 3;
    const int kr0 = 16 * w;
    /* copy groups: K, V with the first query chunk (Q, dO), then one per chunk */
    const int nch = Tqp / QC;
    ld_fm(sK, SRK, a.k, bh, 0, Tkp, a.Tk, a.d);
    ld_fm(sV, SRK, a.v, bh, 0, Tkp, a.Tk, a.d);
    for (int j = 0; j < nch; j++) {
        ld_fm(sQ + QC * j, SRQ, a.q, bh, QC * j, QC, a.Tq, a.d);
        ld_fm(sO + QC * j, SRQ, a.dout, bh, QC * j, QC, a.Tq, a.d);
        cp_commit();
    }
    /* delta = rowsum(dO * O) (the loads of a row issued together) and lse, while the
     * copies land; padding rows: P = 0 */
    for (int q = tid; q < Tqp; q += blockDim.x) {
        float s = 0.0f, L = pinf();
        if (q < a.Tq) {
            const long long oi = at(a.o, bh, q, 0), gi = at(a.dout, bh, q, 0);
            float x[DP], y[DP];
            _Pragma("unroll") for (int e = 0; e < DP; e++) {
                x[e] = e < a.d ? nb_ld(a.o.p, oi + e * a.o.cs, mbf(a.o)) : 0.0f;
                y[e] = e < a.d ? nb_ld(a.dout.p, gi + e * a.dout.cs, mbf(a.dout)) : 0.0f;
            }
            _Pragma("unroll") for (int e = 0; e < DP; e++) s += x[e] * y[e];
            L = a.lse[bh * a.Tq + q];
        }
        sL[q] = L;
        sD[q] = s;
    }
    /* dQ units: 16 features x 8 queries; with fa_flags & 1 and enough warps, each unit's
     * keys are split over NS warps that add into an f32 chunk buffer sQd (two, [DP][QC+1])
     * stored after the next barrier */
    constexpr int NU = (DP / 16) * (QC / 8), SQD = QC + 1;
    const int NS = (a.fa_flags & 1) && NW >= 2 * NU ? NW / NU : 1;
    const int kper = (Tkp / KS + NS - 1) / NS * KS;
    if (NS > 1)
        for (int i = tid; i < 2 * DP * SQD; i += blockDim.x) sQd[i] = 0.0f;
    if constexpr (!IS_BF16) { /* all tiles, rounded to tf32 once */
        cp_wait_n(0);
        __syncthreads();
        round_tf32(sK, 2 * DP * SRK + 2 * DP * SRQ);
    }
    cp_wait_n(nch - 1);
    __syncthreads();
    const bool kv_grad = a.dk.p || a.dv.p;
    /* BF16: the warp's K, V fragments stay in registers over the chunks */
    u32 kva[IS_BF16 ? DP / KS : 1][2][4];
    if constexpr (IS_BF16)
        _Pragma("unroll") for (int ks = 0; ks < DP / KS; ks++) {
            fragA_T(kva[ks][0], sK, SRK, kr0, ks * KS, lane);
            fragA_T(kva[ks][1], sV, SRK, kr0, ks * KS, lane);
        }
    float dk[DP / 16][2][4], dv[DP / 16][2][4];
    _Pragma("unroll") for (int mt = 0; mt < DP / 16; mt++)
        _Pragma("unroll") for (int n = 0; n < 2; n++)
            _Pragma("unroll") for (int i = 0; i < 4; i++) dk[mt][n][i] = dv[mt][n][i] = 0.0f;
    for (int c = 0; c < Tqp; c += QC) {
        float st[QC / 8][4], dp[QC / 8][4];
        _Pragma("unroll") for (int n = 0; n < QC / 8; n++)
            _Pragma("unroll") for (int i = 0; i < 4; i++) st[n][i] = dp[n][i] = 0.0f;
        _Pragma("unroll") for (int ks = 0; ks < DP / KS; ks++) {
            u32 tk[4], tv[4], *ka = tk, *va = tv;
            if constexpr (IS_BF16) {
                ka = kva[ks][0];
                va = kva[ks][1];
            } else {
                fragA_T(tk, sK, SRK, kr0, ks * KS, lane);
                fragA_T(tv, sV, SRK, kr0, ks * KS, lane);
            }
            _Pragma("unroll") for (int n = 0; n < QC / 8; n += 2) {
                u32 b[4];
                fragB_T2(b, sQ, SRQ, ks * KS, c + 8 * n, lane);
                mma(st[n], ka, b);
                mma(st[n + 1], ka, b + 2);
                fragB_T2(b, sO, SRQ, ks * KS, c + 8 * n, lane);
                mma(dp[n], va, b);
                mma(dp[n + 1], va, b + 2);
            }
        }
        E *sSb = sS + ((c / QC) & 1) * Tkp * SRS;
        _Pragma("unroll") for (int n = 0; n < QC / 8; n++) {
            _Pragma("unroll") for (int i = 0; i < 4; i++) {
                const int qi = c + 8 * n + 2 * t + (i & 1), kr = kr0 + g + 8 * (i >> 1);
                const float p = kr < a.Tk ? exp2f(st[n][i] * a.sl2 - sL[qi]) : 0.0f;
                st[n][i] = p;
                dp[n][i] = p * (dp[n][i] - sD[qi]) * a.scale;
            }
            _Pragma("unroll") for (int h = 0; h < 2; h++) {
                E *d2 = sSb + (kr0 + g + 8 * h) * SRS + 8 * n + 2 * t;
                if constexpr (IS_BF16) *(u32 *)d2 = cvt2(dp[n][2 * h], dp[n][2 * h + 1]);
                else *(float2 *)d2 = make_float2(dp[n][2 * h], dp[n][2 * h + 1]);
            }
        }
        if (kv_grad) {
            _Pragma("unroll") for (int kk = 0; kk < QC / KS; kk++) {
                u32 pb[4], sb[4];
                ldB_acc2(pb, st, kk);
                ldB_acc2(sb, dp, kk);
                _Pragma("unroll") for (int mt = 0; mt < DP / 16; mt++) {
                    u32 a4[4];
                    fragA_N(a4, sO, SRQ, 16 * mt, c + kk * KS, lane);
                    mma(dv[mt][0], a4, pb);
                    mma(dv[mt][1], a4, pb + 2);
                    fragA_N(a4, sQ, SRQ, 16 * mt, c + kk * KS, lane);
                    mma(dk[mt][0], a4, sb);
                    mma(dk[mt][1], a4, sb + 2);
                }
            }
        }
        if (c + QC < Tqp) cp_wait_n(nch - 2 - c / QC); /* the next chunk's Q, dO */
        __syncthreads();
        if (a.dq.p && NS > 1 && c > 0) /* the previous chunk's sums are complete */
            flush_dq(a, bh, sQd + ((c / QC - 1) & 1) * DP * SQD, SQD, c - QC);
        if (a.dq.p)
            for (int u0 = w; u0 < NU * NS; u0 += NW) {
                const int u = u0 % NU, part = u0 / NU, mt = u % (DP / 16), nt = u / (DP / 16);
                float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                const int kend = min(Tkp, (part + 1) * kper);
                _Pragma("unroll 4") for (int k0 = part * kper; k0 < kend; k0 += KS) {
                    u32 a4[4], b2[2];
                    fragA_N(a4, sK, SRK, 16 * mt, k0, lane);
                    fragB_T1(b2, sSb, SRS, k0, 8 * nt, lane);
                    mma(acc, a4, b2);
                }
                if (NS > 1) {
                    float *b = sQd + ((c / QC) & 1) * DP * SQD;
                    _Pragma("unroll") for (int i = 0; i < 4; i++)
                        atomicAdd(b + (16 * mt + g + 8 * (i >> 1)) * SQD + 8 * nt + 2 * t + (i & 1), acc[i]);
                } else {
                    _Pragma("unroll") for (int h = 0; h < 2; h++)
                        st_pair(a.dq, bh, c + 8 * nt + 2 * t, 16 * mt + g + 8 * h, a.Tq, a.d,
                                acc[2 * h], acc[2 * h + 1], a.dq_mode);
                }
            }
    }
    if (a.dq.p && NS > 1) {
        __syncthreads();
        flush_dq(a, bh, sQd + ((Tqp / QC - 1) & 1) * DP * SQD, SQD, Tqp - QC);
    }
    _Pragma("unroll") for (int mt = 0; mt < DP / 16; mt++)
        _Pragma("unroll") for (int n = 0; n < 2; n++)
            _Pragma("unroll") for (int h = 0; h < 2; h++) {
                const int f = 16 * mt + g + 8 * h, key = kr0 + 8 * n + 2 * t;
                if (a.dk.p) st_pair(a.dk, bh, key, f, a.Tk, a.d, dk[mt][n][2 * h], dk[mt][n][2 * h + 1], a.kv_mode);
                if (a.dv.p) st_pair(a.dv, bh, key, f, a.Tk, a.d, dv[mt][n][2 * h], dv[mt][n][2 * h + 1], a.kv_mode);
            }
}
extern "C" __global__ void __launch_bounds__(512) nb_attn_bwd_fa(const BwdArgs a) {
    bwd_fa(a);
}

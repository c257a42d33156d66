// Fragment loads of the tensor-core attention kernels (tc.cu; see its top for ldA_rows,
// ldB_rows, ldB_cols, ldA_acc) and the forward epilogue fwd_store that nb_attn_fwd_tc and
// nb_attn_fwd_fa (fa.cuh) share. A file of its own so tests/emu/attn2_emu.sh can run it on the CPU.
#pragma once
constexpr int KS = IS_BF16 ? 16 : 8;
constexpr int SQ = DP + 8, SV = DP + 4, SSS = 64 + 8;
__device__ __forceinline__ void ldA_rows(u32 *a, const float *M, int S, int r0, int c0, int g, int t) {
    const float2 x0 = *(const float2 *)(M + (r0 + g) * S + c0 + 2 * t);
    const float2 x1 = *(const float2 *)(M + (r0 + g + 8) * S + c0 + 2 * t);
    if (IS_BF16) {
        const float2 x2 = *(const float2 *)(M + (r0 + g) * S + c0 + 8 + 2 * t);
        const float2 x3 = *(const float2 *)(M + (r0 + g + 8) * S + c0 + 8 + 2 * t);
        a[0] = cvt2(x0.x, x0.y); a[1] = cvt2(x1.x, x1.y);
        a[2] = cvt2(x2.x, x2.y); a[3] = cvt2(x3.x, x3.y);
    } else {
        a[0] = cvt1(x0.x); a[1] = cvt1(x1.x); a[2] = cvt1(x0.y); a[3] = cvt1(x1.y);
    }
}
__device__ __forceinline__ void ldB_rows(u32 *b, const float *M, int S, int n0, int c0, int g, int t) {
    const float2 x0 = *(const float2 *)(M + (n0 + g) * S + c0 + 2 * t);
    if (IS_BF16) {
        const float2 x1 = *(const float2 *)(M + (n0 + g) * S + c0 + 8 + 2 * t);
        b[0] = cvt2(x0.x, x0.y); b[1] = cvt2(x1.x, x1.y);
    } else {
        b[0] = cvt1(x0.x); b[1] = cvt1(x0.y);
    }
}
__device__ __forceinline__ void ldB_cols(u32 *b, const float *M, int S, int k0, int n0, int g, int t) {
    const float *p = M + (k0 + 2 * t) * S + n0 + g;
    if (IS_BF16) {
        b[0] = cvt2(p[0], p[S]); b[1] = cvt2(p[8 * S], p[9 * S]);
    } else {
        b[0] = cvt1(p[0]); b[1] = cvt1(p[S]);
    }
}
/* m[ri + col] += x, m[ri + col + 1] += y with ri = at(m, bh, row, 0) (columns < d only;
 * gw's mode): one float2 atomic when pairs (mode 0, row-major f32 views). */
__device__ __forceinline__ void add2(const Mat &m, long long ri, int col, int d, float x, float y,
                                     bool pairs, int mode) {
    if constexpr (!FM) {
        float *p = (float *)m.p + ri;
        if (pairs && col + 1 < d) {
            atomic_add2(p + col, x, y);
            return;
        }
        if (col < d) atomicAdd(p + col, x);
        if (col + 1 < d) atomicAdd(p + col + 1, y);
    } else {
        const long long i = ri + (long long)col * m.cs;
        if (col < d) gw(m, i, x, mode);
        if (col + 1 < d) gw(m, i + m.cs, y, mode);
    }
}
/* k-step kk of a row of C tiles c[nt][4] (8 columns each) as an A fragment. */
__device__ __forceinline__ void ldA_acc(u32 *a, float (*c)[4], int kk) {
    if (IS_BF16) {
        a[0] = cvt2(c[2 * kk][0], c[2 * kk][1]); a[1] = cvt2(c[2 * kk][2], c[2 * kk][3]);
        a[2] = cvt2(c[2 * kk + 1][0], c[2 * kk + 1][1]);
        a[3] = cvt2(c[2 * kk + 1][2], c[2 * kk + 1][3]);
    } else {
        a[0] = cvt1(c[kk][0]); a[1] = cvt1(c[kk][2]); a[2] = cvt1(c[kk][1]); a[3] = cvt1(c[kk][3]);
    }
}
/* the forward epilogue (nb_attn_fwd_tc, nb_attn_fwd_fa): warp w's 16 query rows q0 + 16 w +
 * [0, 16), row g and g + 8 of this lane; the row sums l[2] reduced over the row's 4 lanes, then
 * o[DP / 8][4] / l stored in o's mode and lse = m + log2 l */
__device__ __forceinline__ void fwd_store(const FwdArgs &a, long long bh, int q0, int w, int g, int t,
                                          float (*o)[4], const float *m, float *l) {
    _Pragma("unroll") for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(FULL, l[h], 1);
        l[h] += __shfl_xor_sync(FULL, l[h], 2);
        const int row = q0 + 16 * w + g + 8 * h;
        if (row >= a.Tq) continue;
        const float inv = 1.0f / l[h];
        _Pragma("unroll") for (int n = 0; n < DP / 8; n++)
            _Pragma("unroll") for (int j = 0; j < 2; j++) {
                const int col = 8 * n + 2 * t + j;
                if (col < a.d) nb_st(a.o.p, at(a.o, bh, row, col), mbf(a.o), o[n][2 * h + j] * inv);
            }
        if (t == 0) a.lse[bh * a.Tq + row] = m[h] + log2f(l[h]);
    }
}

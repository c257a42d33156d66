// The conv weight gradient's kernels (src/nn/conv/conv_cuda_wgrad.c): im2col of x (two layouts),
// the dy transpose, reduced-sum (rs / rs2) kernels and the final sum.
#include "graph/kernels/bf16.cuh"
struct WgColP { const void *x; void *col; int C, H, W, K, S, pad, OH, OW, Kt, CKK, xbf, cbf, vec; };
/* col[c*KK + kk][n*P + p] = x[n][c][oh*S-pad+ki][ow*S-pad+kj] (0 outside): block row y takes
 * rows c*KK + kk, each thread 4 consecutive columns (vec: one 4-element store, Kt % 4 == 0) */
extern "C" __global__ void nb_wg_im2col(WgColP p) {
    int q0 = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (q0 >= p.Kt) return;
    int P = p.OH * p.OW, KK = p.K * p.K;
    int n0 = q0 / P, pp = q0 - n0 * P, oh0 = pp / p.OW, ow0 = pp - oh0 * p.OW;
    for (int r = blockIdx.y; r < p.CKK; r += gridDim.y) {
        int c = r / KK, kk = r - c * KK, ki = kk / p.K, kj = kk - ki * p.K;
        int n = n0, oh = oh0, ow = ow0;
        float v[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float val = 0.0f;
            int ih = oh * p.S - p.pad + ki, iw = ow * p.S - p.pad + kj;
            if (q0 + j < p.Kt && ih >= 0 && ih < p.H && iw >= 0 && iw < p.W)
                val = nb_ld(p.x, ((long long)(n * p.C + c) * p.H + ih) * p.W + iw, p.xbf);
            v[j] = val;
            if (++ow == p.OW) { ow = 0; if (++oh == p.OH) { oh = 0; n++; } }
        }
        long long o = (long long)r * p.Kt + q0;
        if (p.vec) nb_st4(p.col, o, p.cbf, make_float4(v[0], v[1], v[2], v[3]));
        else
            for (int j = 0; j < 4 && q0 + j < p.Kt; j++) nb_st(p.col, o + j, p.cbf, v[j]);
    }
}
/* layout 1: col[n*P + p][c*KK + kk] (one element a thread; total < 2^31) */
extern "C" __global__ void nb_wg_im2col_rows(WgColP p) {
    int P = p.OH * p.OW, KK = p.K * p.K;
    unsigned total = (unsigned)p.Kt * (unsigned)p.CKK;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int r = (int)(i % (unsigned)p.CKK), q = (int)(i / (unsigned)p.CKK);
        int c = r / KK, kk = r - c * KK, ki = kk / p.K, kj = kk - ki * p.K;
        int n = q / P, pp = q - n * P, oh = pp / p.OW, ow = pp - oh * p.OW;
        int ih = oh * p.S - p.pad + ki, iw = ow * p.S - p.pad + kj;
        float v = 0.0f;
        if (ih >= 0 && ih < p.H && iw >= 0 && iw < p.W)
            v = nb_ld(p.x, ((long long)(n * p.C + c) * p.H + ih) * p.W + iw, p.xbf);
        nb_st(p.col, i, p.cbf, v);
    }
}
struct WgTrP { const void *dy; void *dyt; int O, P, Kt, ybf, tbf, vec; float *db; };
/* dyt[o][n*P + p] = dy[n][o][p]: block row y takes rows o, each thread 4 consecutive columns
 * (vec: P % 4 == 0 and aligned, one 4-element load and store). db (may be NULL): db[o] += the
 * dy values (each read once), one atomic per warp and row. */
extern "C" __global__ void nb_wg_transpose(WgTrP a) {
    int q0 = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (q0 >= a.Kt && !a.db) return;
    int n0 = q0 / a.P, p0 = q0 - n0 * a.P;
    for (int o = blockIdx.y; o < a.O; o += gridDim.y) {
        long long d = (long long)o * a.Kt + q0;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (q0 < a.Kt) {
            if (a.vec) {
                v = nb_ld4(a.dy, ((long long)n0 * a.O + o) * a.P + p0, a.ybf);
                nb_st4(a.dyt, d, a.tbf, v);
            } else {
                int n = n0, pp = p0;
                float t[4] = {0.f, 0.f, 0.f, 0.f};
                for (int j = 0; j < 4 && q0 + j < a.Kt; j++) {
                    t[j] = nb_ld(a.dy, ((long long)n * a.O + o) * a.P + pp, a.ybf);
                    nb_st(a.dyt, d + j, a.tbf, t[j]);
                    if (++pp == a.P) pp = 0, n++;
                }
                v = make_float4(t[0], t[1], t[2], t[3]);
            }
        }
        if (a.db) { /* every lane of the warp is here */
            float s = (v.x + v.y) + (v.z + v.w);
            for (int k = 16; k > 0; k >>= 1) s += __shfl_xor_sync(0xffffffffu, s, k);
            if ((threadIdx.x & 31) == 0) atomicAdd(a.db + o, s);
        }
    }
}
struct Wg3P { const void *src; void *dst; int C, H, W, OH, OW, rows, Kt, Lr, sbf, dbf, vec; };
/* row-shift form (3x3, stride 1, pad 1): K index k = n*(OH+2)*OW + h*OW + ow over padded rows
 * h < OH+2. cols3: dst[c*3 + kj][k] = x[n][c][h-1][ow+kj-1] (0 outside, and 0 for n >= m in the
 * tail), k < Lr; dyp: dst[o][k] = dy[n][o][h][ow] for h < OH, else 0, k < Kt. Rows r = y0,
 * y0 + ys, ...; each thread 4 consecutive k (vec: one 4-element store). db (dyp only, may be
 * NULL): db[o] += the dy values read (each exactly once), one atomic per warp and row. */
__device__ __forceinline__ void nb_wg_rs_body(const Wg3P &p, int y0, int ys, float *db) {
    int k0 = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    int len = p.C ? p.Lr : p.Kt, B = (p.OH + 2) * p.OW, m = p.Kt / B;
    if (k0 >= len && !db) return;
    int n0 = k0 / B, rem = k0 - n0 * B, h0 = rem / p.OW, w0 = rem - h0 * p.OW;
    for (int r = y0; r < p.rows; r += ys) {
        int n = n0, h = h0, ow = w0;
        float v[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float val = 0.0f;
            if (k0 + j < len && n < m) {
                if (p.C) { /* cols3: r = c*3 + kj */
                    int c = r / 3, ih = h - 1, iw = ow + r - c * 3 - 1;
                    if (ih >= 0 && ih < p.H && iw >= 0 && iw < p.W)
                        val = nb_ld(p.src, ((long long)(n * p.C + c) * p.H + ih) * p.W + iw, p.sbf);
                } else if (h < p.OH) { /* dyp: r = o */
                    val = nb_ld(p.src, ((long long)n * p.rows + r) * (p.OH * p.OW) + h * p.OW + ow, p.sbf);
                }
            }
            v[j] = val;
            if (++ow == p.OW) { ow = 0; if (++h == p.OH + 2) { h = 0; n++; } }
        }
        if (db) { /* every lane of the warp is here (no early return with db) */
            float s = (v[0] + v[1]) + (v[2] + v[3]);
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            if ((threadIdx.x & 31) == 0) atomicAdd(db + r, s);
            if (k0 >= len) continue;
        }
        long long o = (long long)r * len + k0;
        if (p.vec) nb_st4(p.dst, o, p.dbf, make_float4(v[0], v[1], v[2], v[3]));
        else
            for (int j = 0; j < 4 && k0 + j < len; j++) nb_st(p.dst, o + j, p.dbf, v[j]);
    }
}
extern "C" __global__ void nb_wg_rs(Wg3P p) { nb_wg_rs_body(p, blockIdx.y, gridDim.y, 0); }
struct Wg3x2P { Wg3P a, b; float *db; int ya; };
/* both passes of a chunk in one launch: block rows y < ya the columns (a), the rest dyp (b),
 * with the bias gradient db[o] += dy (NULL: none) */
extern "C" __global__ void nb_wg_rs2(Wg3x2P q) {
    if ((int)blockIdx.y < q.ya) nb_wg_rs_body(q.a, blockIdx.y, q.ya, 0);
    else nb_wg_rs_body(q.b, blockIdx.y - q.ya, gridDim.y - q.ya, q.db);
}
struct WgSum3P { const float *part; float *dw; int O, C, T; };
/* dw[o][c*9 + ki*3 + kj] += sum over s < T of part[ki][s][o][c*3 + kj]: a thread per
 * (o, j = c*3 + kj) with the three taps, reads coalesced along j */
extern "C" __global__ void nb_wg_sum3j(WgSum3P a) {
    int N3 = 3 * a.C, L = a.O * N3;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < L; i += gridDim.x * blockDim.x) {
        int o = i / N3, j = i - o * N3, c = j / 3, kj = j - c * 3;
        float *d = a.dw + (long long)o * 3 * N3 + c * 9 + kj;
#pragma unroll
        for (int ki = 0; ki < 3; ki++) {
            const float *q = a.part + (long long)ki * a.T * L + i;
            float s0 = 0.0f, s1 = 0.0f;
            int s = 0;
            for (; s + 1 < a.T; s += 2) s0 += q[(long long)s * L], s1 += q[(long long)(s + 1) * L];
            if (s < a.T) s0 += q[(long long)s * L];
            d[ki * 3] += s0 + s1;
        }
    }
}
struct WgSumP { const float *part; float *dw; long long L; int S; };
/* dw[i] += sum over s < S of part[s*L + i] */
extern "C" __global__ void nb_wg_sum(WgSumP a) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < a.L;
         i += (long long)gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < a.S; s++) acc += a.part[s * a.L + i];
        a.dw[i] += acc;
    }
}

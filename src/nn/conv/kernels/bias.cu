// The conv path's bias and epilogue kernels (src/nn/conv/conv_cuda_aux.c): bias add / fill /
// gradient over planes, the split-sum and MODE 2 endings with the bias gradient taken along, the
// bf16 weight conversion with the bias fill, the end of a split sum into bf16.
#include "graph/kernels/bf16.cuh"
/* ---- vectorised bias add / bias gradient ---- */
struct RowP { void *y; const float *b; float *db; long long units; int P, O, bf, lg, segs, seg, vec, set; };
/* 16 bytes of y: 8 bf16 or 4 f32 values, summed */
__device__ __forceinline__ float nb_sum16(uint4 u, int bf) {
    if (!bf) return (__uint_as_float(u.x) + __uint_as_float(u.y)) +
                    (__uint_as_float(u.z) + __uint_as_float(u.w));
    float a = __uint_as_float(u.x << 16) + __uint_as_float(u.x & 0xffff0000u);
    float b = __uint_as_float(u.y << 16) + __uint_as_float(u.y & 0xffff0000u);
    float c = __uint_as_float(u.z << 16) + __uint_as_float(u.z & 0xffff0000u);
    float d = __uint_as_float(u.w << 16) + __uint_as_float(u.w & 0xffff0000u);
    return (a + b) + (c + d);
}
__device__ __forceinline__ unsigned nb_addbf2(unsigned w, float v) {
    return nb_f2bf2(__uint_as_float(w << 16) + v, __uint_as_float(w & 0xffff0000u) + v);
}
__device__ __forceinline__ uint4 nb_add16(uint4 u, float v, int bf) {
    if (bf) return make_uint4(nb_addbf2(u.x, v), nb_addbf2(u.y, v), nb_addbf2(u.z, v), nb_addbf2(u.w, v));
    return make_uint4(__float_as_uint(__uint_as_float(u.x) + v), __float_as_uint(__uint_as_float(u.y) + v),
                      __float_as_uint(__uint_as_float(u.z) + v), __float_as_uint(__uint_as_float(u.w) + v));
}
/* A unit u = (row, s) is elements [s*seg, min(P, s*seg + seg)) of the plane row = n*O + o of
 * y [N*O][P] (f32, or bf16 with bf): a group of 2^lg lanes reads it with 16-byte loads (vec)
 * between a scalar head (up to the first 16-byte boundary) and tail. Sets *b0, *head, *v0,
 * *nv, *e0 (element indices; vectors from v0 on). */
__device__ __forceinline__ void nb_unit(const RowP &p, long long row, int s, long long *b0,
                                        int *head, long long *v0, int *nv, long long *e0) {
    int es = p.bf ? 2 : 4, V = 16 / es;
    long long seg_end = (long long)(s + 1) * p.seg;
    *b0 = row * p.P + (long long)s * p.seg;
    *e0 = row * p.P + (seg_end < p.P ? seg_end : p.P);
    int h = 0, n = 0;
    if (p.vec) {
        unsigned mis = (unsigned)(((unsigned long long)p.y + (unsigned long long)*b0 * es) & 15u);
        h = (int)(((16u - mis) & 15u) / es);
        if (h > *e0 - *b0) h = (int)(*e0 - *b0);
        n = (int)((*e0 - *b0 - h) / V);
    }
    *head = h, *v0 = *b0 + h, *nv = n;
}
/* db[o] += sum over n, p of dy[n][o][p] (dy = p.y): one unit per lane group, summed over the
 * group with shuffles, one atomic per unit */
__device__ __forceinline__ void nb_bias_grad_rows_body(const RowP &p, long long blk) {
    int L = 1 << p.lg, lane = threadIdx.x & (L - 1);
    long long u = (blk * blockDim.x + threadIdx.x) >> p.lg, row = 0;
    float acc = 0.0f;
    if (u < p.units) {
        row = u / p.segs;
        long long b0, v0, e0; int head, nv;
        nb_unit(p, row, (int)(u - row * p.segs), &b0, &head, &v0, &nv, &e0);
        for (int j = lane; j < head; j += L) acc += nb_ld(p.y, b0 + j, p.bf);
        const uint4 *q = (const uint4 *)((const char *)p.y + v0 * (p.bf ? 2 : 4));
        float a2 = 0.0f;
        int j = lane;
        for (; j + L < nv; j += 2 * L) acc += nb_sum16(__ldg(q + j), p.bf), a2 += nb_sum16(__ldg(q + j + L), p.bf);
        if (j < nv) acc += nb_sum16(__ldg(q + j), p.bf);
        acc += a2;
        for (long long i = v0 + (long long)nv * (p.bf ? 8 : 4) + lane; i < e0; i += L)
            acc += nb_ld(p.y, i, p.bf);
    }
    for (int s = L >> 1; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);
    if (lane == 0 && u < p.units) atomicAdd(p.db + row % p.O, acc);
}
extern "C" __global__ void nb_conv_bias_grad_rows(RowP p) { nb_bias_grad_rows_body(p, blockIdx.x); }
/* y[n][o][p] += b[o] (set: y[n][o][p] = b[o], or 0 without b), by units as above */
__device__ __forceinline__ void nb_bias_rows_body(const RowP &p, long long blk) {
    int L = 1 << p.lg, lane = threadIdx.x & (L - 1);
    long long u = (blk * blockDim.x + threadIdx.x) >> p.lg;
    if (u >= p.units) return;
    long long row = u / p.segs, b0, v0, e0; int head, nv;
    nb_unit(p, row, (int)(u - row * p.segs), &b0, &head, &v0, &nv, &e0);
    float bv = p.b ? p.b[row % p.O] : 0.0f;
    uint4 *q = (uint4 *)((char *)p.y + v0 * (p.bf ? 2 : 4));
    if (p.set) {
        unsigned h = p.bf ? (unsigned)nb_f2bf(bv) : 0u;
        unsigned wv = p.bf ? (h | (h << 16)) : __float_as_uint(bv);
        for (int j = lane; j < head; j += L) nb_st(p.y, b0 + j, p.bf, bv);
        for (int j = lane; j < nv; j += L) q[j] = make_uint4(wv, wv, wv, wv);
        for (long long i = v0 + (long long)nv * (p.bf ? 8 : 4) + lane; i < e0; i += L)
            nb_st(p.y, i, p.bf, bv);
        return;
    }
    for (int j = lane; j < head; j += L) nb_st(p.y, b0 + j, p.bf, nb_ld(p.y, b0 + j, p.bf) + bv);
#pragma unroll 2
    for (int j = lane; j < nv; j += L) q[j] = nb_add16(q[j], bv, p.bf);
    for (long long i = v0 + (long long)nv * (p.bf ? 8 : 4) + lane; i < e0; i += L)
        nb_st(p.y, i, p.bf, nb_ld(p.y, i, p.bf) + bv);
}
extern "C" __global__ void nb_conv_bias_rows(RowP p) { nb_bias_rows_body(p, blockIdx.x); }
struct WcP { const float *w; unsigned short *wb; long long n, wblocks; RowP r; };
/* cuBLAS operands and output start in one launch: blocks < wblocks wb[i] := bf16(w[i]) (4 a
 * thread, i < n), the rest y := b[o] by the units of nb_unit (r.set; the GEMM then adds with
 * beta = 1) */
extern "C" __global__ void nb_conv_wcvt_fill(WcP p) {
    if (blockIdx.x < p.wblocks) {
        long long i = (blockIdx.x * (long long)blockDim.x + threadIdx.x) * 4;
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (i + j < p.n) p.wb[i + j] = nb_f2bf(p.w[i + j]);
        return;
    }
    nb_bias_rows_body(p.r, blockIdx.x - p.wblocks);
}
struct SplitP { RowP r; float *src; int acc; };
/* A split sum's end: y[n][o][p] (bf16, p.r.y) := bf16((acc ? y : 0) + src + b[o]) and src := 0
 * (the f32 accumulator is left zeroed for the next split sum), by the units of nb_unit;
 * vectors (p.r.vec) need y and src 16-byte aligned. */
extern "C" __global__ void nb_conv_split_out(SplitP q) {
    const RowP &p = q.r;
    int L = 1 << p.lg, lane = threadIdx.x & (L - 1);
    long long u = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> p.lg;
    if (u >= p.units) return;
    long long row = u / p.segs, b0, v0, e0; int head, nv;
    nb_unit(p, row, (int)(u - row * p.segs), &b0, &head, &v0, &nv, &e0);
    float bv = p.b ? p.b[row % p.O] : 0.0f;
    unsigned short *y = (unsigned short *)p.y;
    for (int j = lane; j < head; j += L) {
        long long i = b0 + j;
        y[i] = nb_f2bf((q.acc ? nb_bf2f(y[i]) : 0.0f) + q.src[i] + bv), q.src[i] = 0.0f;
    }
    for (int j = lane; j < nv; j += L) {
        long long i = v0 + 8LL * j;
        float4 *sp = (float4 *)(q.src + i);
        float4 s0 = sp[0], s1 = sp[1];
        uint4 o = q.acc ? *(const uint4 *)(y + i) : make_uint4(0u, 0u, 0u, 0u);
        float v[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
        unsigned w[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
        for (int k = 0; k < 4; k++)
            w[k] = nb_f2bf2(__uint_as_float(w[k] << 16) + v[2 * k] + bv,
                            __uint_as_float(w[k] & 0xffff0000u) + v[2 * k + 1] + bv);
        *(uint4 *)(y + i) = make_uint4(w[0], w[1], w[2], w[3]);
        sp[0] = make_float4(0.f, 0.f, 0.f, 0.f), sp[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    for (long long i = v0 + 8LL * nv + lane; i < e0; i += L)
        y[i] = nb_f2bf((q.acc ? nb_bf2f(y[i]) : 0.0f) + q.src[i] + bv), q.src[i] = 0.0f;
}
/* ---- small planes (P < 16; the linear: P = 1): y viewed as [N][OP], OP = O*P ----
 * The add is elementwise over the N*OP values (4 a thread with 16-byte f32 / 8-byte bf16 vectors
 * where y is aligned, column j = i % OP, bias b[j / P]); the gradient is a deterministic
 * two-stage column sum (row chunks -> partials [chunks][OP], then a fixed-order sum), no atomics.
 * (The column kernels they replaced ran one thread per column: for [2^20, 64] 64 threads a block
 * with serial 4-byte loads, 5x above the memory floor: docs/PERF.md.) */
struct EwP { void *y; const float *b; long long n; int OP, P, bf, vec, relu; };
__device__ __forceinline__ float nb_bias_at(const EwP &p, int j) {
    return p.b ? p.b[p.P == 1 ? j : j / p.P] : 0.0f;
}
__device__ __forceinline__ float nb_ew_out(const EwP &p, float v) {
    return p.relu && v < 0.0f ? 0.0f : v; /* NaN passes through */
}
/* y[i] += b[(i % OP) / P] (relu: y = max(y + b, 0), b may be NULL), i < n, grid-stride */
extern "C" __global__ void nb_conv_bias_ew(EwP p) {
    long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x, st = (long long)gridDim.x * blockDim.x;
    long long n4 = p.vec ? p.n / 4 : 0;
    for (long long v = t; v < n4; v += st) {
        long long i = 4 * v;
        int j = (int)(i % p.OP);
        float4 x = nb_ld4(p.y, i, p.bf);
        float e[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            e[k] = nb_ew_out(p, e[k] + nb_bias_at(p, j));
            if (++j == p.OP) j = 0;
        }
        nb_st4(p.y, i, p.bf, make_float4(e[0], e[1], e[2], e[3]));
    }
    for (long long i = 4 * n4 + t; i < p.n; i += st)
        nb_st(p.y, i, p.bf, nb_ew_out(p, nb_ld(p.y, i, p.bf) + nb_bias_at(p, (int)(i % p.OP))));
}
/* Stage 1: part[blockIdx.y][j] = sum over rows n of chunk blockIdx.y ([y*nper, y*nper + nper))
 * of y[n][j]. A block: G column lanes (vector columns of V = vec ? 4 : 1 values, tile blockIdx.x)
 * x R = 256 / G row lanes striding the chunk; the row lanes summed in shared memory in fixed
 * order (deterministic). */
struct BgP { const void *y; float *part; int N, OP, nper, G, bf, vec; };
extern "C" __global__ void nb_conv_bias_grad_part(BgP p) {
    __shared__ float sm[256 * 4];
    int V = p.vec ? 4 : 1, G = p.G, R = blockDim.x / G, g = threadIdx.x % G, r = threadIdx.x / G;
    long long c = (long long)blockIdx.x * G + g; /* vector column */
    int n0 = blockIdx.y * p.nper, n1 = n0 + p.nper < p.N ? n0 + p.nper : p.N;
    bool on = r < R && c * V < p.OP;
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f), b = a;
    if (on) {
        long long j = c * V;
        int n = n0 + r;
        if (p.vec) {
            for (; n + R < n1; n += 2 * R) {
                float4 u = nb_ld4(p.y, (long long)n * p.OP + j, p.bf);
                float4 w = nb_ld4(p.y, (long long)(n + R) * p.OP + j, p.bf);
                a.x += u.x, a.y += u.y, a.z += u.z, a.w += u.w;
                b.x += w.x, b.y += w.y, b.z += w.z, b.w += w.w;
            }
            if (n < n1) {
                float4 u = nb_ld4(p.y, (long long)n * p.OP + j, p.bf);
                a.x += u.x, a.y += u.y, a.z += u.z, a.w += u.w;
            }
        } else {
            for (; n + R < n1; n += 2 * R)
                a.x += nb_ld(p.y, (long long)n * p.OP + j, p.bf), b.x += nb_ld(p.y, (long long)(n + R) * p.OP + j, p.bf);
            if (n < n1) a.x += nb_ld(p.y, (long long)n * p.OP + j, p.bf);
        }
        a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
    }
    if (r < R) {
        float *s = sm + (r * G + g) * 4;
        s[0] = a.x, s[1] = a.y, s[2] = a.z, s[3] = a.w;
    }
    __syncthreads();
    if (r != 0 || !on) return;
    for (int k = 0; k < V; k++) {
        float acc = 0.0f;
        for (int q = 0; q < R; q++) acc += sm[(q * G + g) * 4 + k];
        p.part[(long long)blockIdx.y * p.OP + c * V + k] = acc;
    }
}
/* Stage 2: db[o] += sum over chunks z < Z and p < P of part[z][o*P + p]: a block per o, its
 * threads striding the Z*P values, then a fixed shared-memory tree (deterministic) */
struct BgFinP { const float *part; float *db; int Z, OP, P; };
extern "C" __global__ void nb_conv_bias_grad_fin(BgFinP p) {
    __shared__ float sm[256];
    int o = blockIdx.x;
    float acc = 0.0f;
    for (int t = threadIdx.x; t < p.Z * p.P; t += blockDim.x)
        acc += p.part[(long long)(t / p.P) * p.OP + (long long)o * p.P + t % p.P];
    sm[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sm[threadIdx.x] += sm[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) p.db[o] += sm[0];
}
struct SumN4P { const float *s; float *dw; long long L; int N, vec; };
/* dw[i] += sum over n < N of s[n * L + i]: vec (L % 4 == 0, 16-byte aligned) a thread per 4
 * columns with float4 loads, else one; the n loop two-way unrolled */
__device__ __forceinline__ void nb_sum_n4_body(const SumN4P &p, long long blk) {
    long long i = blk * blockDim.x + threadIdx.x;
    if (p.vec) {
        if (4 * i >= p.L) return;
        const float4 *s = (const float4 *)p.s + i;
        long long st = p.L >> 2;
        float4 a = make_float4(0.f, 0.f, 0.f, 0.f), b = a;
        int n = 0;
        for (; n + 1 < p.N; n += 2) {
            float4 u = __ldg(s + n * st), v = __ldg(s + (n + 1) * st);
            a.x += u.x, a.y += u.y, a.z += u.z, a.w += u.w;
            b.x += v.x, b.y += v.y, b.z += v.z, b.w += v.w;
        }
        if (n < p.N) { float4 u = __ldg(s + n * st); a.x += u.x, a.y += u.y, a.z += u.z, a.w += u.w; }
        float4 *d = (float4 *)p.dw + i, o = *d;
        o.x += a.x + b.x, o.y += a.y + b.y, o.z += a.z + b.z, o.w += a.w + b.w;
        *d = o;
        return;
    }
    if (i >= p.L) return;
    float a = 0.0f, b = 0.0f;
    int n = 0;
    for (; n + 1 < p.N; n += 2) a += p.s[n * p.L + i], b += p.s[(n + 1) * p.L + i];
    if (n < p.N) a += p.s[n * p.L + i];
    p.dw[i] += a + b;
}
extern "C" __global__ void nb_conv_sum_n4(SumN4P p) { nb_sum_n4_body(p, blockIdx.x); }
struct SumBgP { SumN4P s; RowP r; long long sblocks; };
/* the split sum and a bias gradient in one launch: blocks < sblocks the sum, the rest the
 * bias gradient's units */
extern "C" __global__ void nb_conv_sum_bg(SumBgP p) {
    if (blockIdx.x < p.sblocks) nb_sum_n4_body(p.s, blockIdx.x);
    else nb_bias_grad_rows_body(p.r, blockIdx.x - p.sblocks);
}
struct DwBgP { float *dwr; float *dw; int O, C, KK; long long dblocks; RowP r; };
/* The implicit-GEMM weight gradient's end (MODE 2, KK > 1) and a bias gradient in one launch:
 * blocks < dblocks dw [O][C][KK] += dwr [O][KK][C] and dwr := 0 (as nb_conv_igemm_dw), the
 * rest the bias gradient's units */
extern "C" __global__ void nb_conv_dw_bg(DwBgP p) {
    if (blockIdx.x < p.dblocks) {
        long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
        if (i >= (long long)p.O * p.C * p.KK) return;
        int kk = (int)(i % p.KK); long long r = i / p.KK;
        int c = (int)(r % p.C), o = (int)(r / p.C);
        long long j = ((long long)o * p.KK + kk) * p.C + c;
        p.dw[i] += p.dwr[j];
        p.dwr[j] = 0.0f;
        return;
    }
    nb_bias_grad_rows_body(p.r, blockIdx.x - p.dblocks);
}

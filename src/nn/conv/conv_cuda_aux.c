/* The conv path's helper passes on CUDA (conv_cuda_aux.h): bias add / fill / gradient over
 * planes with 16-byte vectors, the split-sum and MODE 2 endings with the bias gradient taken
 * along, the bf16 weight conversion with the bias fill, the end of a split sum into bf16; and
 * the previous kernels they replace (nb_cuda_conv_set_aux_legacy, for A/B runs). CPU
 * reference: tape_ops_conv.c (bias and its gradient), tape_ops_basic.c (linear). */
#include "nn/conv/conv_cuda_aux.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "nn/common/bf16_cuda.h"
#include "nn/common/nn_common.h"

/* ---- kernels (NVRTC) ------------------------------------------------------------------------ */

static const char nb_conv_aux2_src[] = NB_CUDA_BF16_HELPERS
    "struct BiasP { void *y; const float *b; long long total; long long P; int O, ybf; };\n"
    "/* y[n][o][p] += b[o] */\n"
    "extern \"C\" __global__ void nb_conv_bias(BiasP p) {\n"
    "    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.total;\n"
    "         i += (long long)gridDim.x * blockDim.x)\n"
    "        nb_st(p.y, i, p.ybf, nb_ld(p.y, i, p.ybf) + p.b[(int)((i / p.P) % p.O)]);\n"
    "}\n"
    "struct BiasGradP { const void *dy; float *db; int N, P, O, ybf; };\n"
    "/* db[o] += sum over n, p of dy[n][o][p]: blocks (o, y) of 256 threads, each y a strided share\n"
    " * of the N*P terms, added with one atomic per block */\n"
    "extern \"C\" __global__ void nb_conv_bias_grad(BiasGradP p) {\n"
    "    int o = blockIdx.x, tot = p.N * p.P;\n"
    "    float acc = 0.0f;\n"
    "    for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < tot; i += gridDim.y * blockDim.x) {\n"
    "        int n = i / p.P, pp = i - n * p.P;\n"
    "        acc += nb_ld(p.dy, ((long long)n * p.O + o) * p.P + pp, p.ybf);\n"
    "    }\n"
    "    for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);\n"
    "    __shared__ float part[32];\n"
    "    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;\n"
    "    __syncthreads();\n"
    "    if (threadIdx.x == 0) {\n"
    "        float s = 0.0f;\n"
    "        for (int k = 0; k < (int)(blockDim.x >> 5); k++) s += part[k];\n"
    "        atomicAdd(p.db + o, s);\n"
    "    }\n"
    "}\n"
    "/* ---- vectorised bias add / bias gradient (the nb_conv_bias / nb_conv_bias_grad above are\n"
    " * the old forms, kept for A/B runs: nb_cuda_conv_set_aux_legacy) ---- */\n"
    "struct RowP { void *y; const float *b; float *db; long long units; int P, O, bf, lg, segs, seg, vec, set; };\n"
    "/* 16 bytes of y: 8 bf16 or 4 f32 values, summed */\n"
    "__device__ __forceinline__ float nb_sum16(uint4 u, int bf) {\n"
    "    if (!bf) return (__uint_as_float(u.x) + __uint_as_float(u.y)) +\n"
    "                    (__uint_as_float(u.z) + __uint_as_float(u.w));\n"
    "    float a = __uint_as_float(u.x << 16) + __uint_as_float(u.x & 0xffff0000u);\n"
    "    float b = __uint_as_float(u.y << 16) + __uint_as_float(u.y & 0xffff0000u);\n"
    "    float c = __uint_as_float(u.z << 16) + __uint_as_float(u.z & 0xffff0000u);\n"
    "    float d = __uint_as_float(u.w << 16) + __uint_as_float(u.w & 0xffff0000u);\n"
    "    return (a + b) + (c + d);\n"
    "}\n"
    "__device__ __forceinline__ unsigned nb_addbf2(unsigned w, float v) {\n"
    "    return nb_f2bf2(__uint_as_float(w << 16) + v, __uint_as_float(w & 0xffff0000u) + v);\n"
    "}\n"
    "__device__ __forceinline__ uint4 nb_add16(uint4 u, float v, int bf) {\n"
    "    if (bf) return make_uint4(nb_addbf2(u.x, v), nb_addbf2(u.y, v), nb_addbf2(u.z, v), nb_addbf2(u.w, v));\n"
    "    return make_uint4(__float_as_uint(__uint_as_float(u.x) + v), __float_as_uint(__uint_as_float(u.y) + v),\n"
    "                      __float_as_uint(__uint_as_float(u.z) + v), __float_as_uint(__uint_as_float(u.w) + v));\n"
    "}\n"
    "/* A unit u = (row, s) is elements [s*seg, min(P, s*seg + seg)) of the plane row = n*O + o of\n"
    " * y [N*O][P] (f32, or bf16 with bf): a group of 2^lg lanes reads it with 16-byte loads (vec)\n"
    " * between a scalar head (up to the first 16-byte boundary) and tail. Sets *b0, *head, *v0,\n"
    " * *nv, *e0 (element indices; vectors from v0 on). */\n"
    "__device__ __forceinline__ void nb_unit(const RowP &p, long long row, int s, long long *b0,\n"
    "                                        int *head, long long *v0, int *nv, long long *e0) {\n"
    "    int es = p.bf ? 2 : 4, V = 16 / es;\n"
    "    long long seg_end = (long long)(s + 1) * p.seg;\n"
    "    *b0 = row * p.P + (long long)s * p.seg;\n"
    "    *e0 = row * p.P + (seg_end < p.P ? seg_end : p.P);\n"
    "    int h = 0, n = 0;\n"
    "    if (p.vec) {\n"
    "        unsigned mis = (unsigned)(((unsigned long long)p.y + (unsigned long long)*b0 * es) & 15u);\n"
    "        h = (int)(((16u - mis) & 15u) / es);\n"
    "        if (h > *e0 - *b0) h = (int)(*e0 - *b0);\n"
    "        n = (int)((*e0 - *b0 - h) / V);\n"
    "    }\n"
    "    *head = h, *v0 = *b0 + h, *nv = n;\n"
    "}\n"
    "/* db[o] += sum over n, p of dy[n][o][p] (dy = p.y): one unit per lane group, summed over the\n"
    " * group with shuffles, one atomic per unit */\n"
    "__device__ __forceinline__ void nb_bias_grad_rows_body(const RowP &p, long long blk) {\n"
    "    int L = 1 << p.lg, lane = threadIdx.x & (L - 1);\n"
    "    long long u = (blk * blockDim.x + threadIdx.x) >> p.lg, row = 0;\n"
    "    float acc = 0.0f;\n"
    "    if (u < p.units) {\n"
    "        row = u / p.segs;\n"
    "        long long b0, v0, e0; int head, nv;\n"
    "        nb_unit(p, row, (int)(u - row * p.segs), &b0, &head, &v0, &nv, &e0);\n"
    "        for (int j = lane; j < head; j += L) acc += nb_ld(p.y, b0 + j, p.bf);\n"
    "        const uint4 *q = (const uint4 *)((const char *)p.y + v0 * (p.bf ? 2 : 4));\n"
    "        float a2 = 0.0f;\n"
    "        int j = lane;\n"
    "        for (; j + L < nv; j += 2 * L) acc += nb_sum16(__ldg(q + j), p.bf), a2 += nb_sum16(__ldg(q + j + L), p.bf);\n"
    "        if (j < nv) acc += nb_sum16(__ldg(q + j), p.bf);\n"
    "        acc += a2;\n"
    "        for (long long i = v0 + (long long)nv * (p.bf ? 8 : 4) + lane; i < e0; i += L)\n"
    "            acc += nb_ld(p.y, i, p.bf);\n"
    "    }\n"
    "    for (int s = L >> 1; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);\n"
    "    if (lane == 0 && u < p.units) atomicAdd(p.db + row % p.O, acc);\n"
    "}\n"
    "extern \"C\" __global__ void nb_conv_bias_grad_rows(RowP p) { nb_bias_grad_rows_body(p, blockIdx.x); }\n"
    "/* y[n][o][p] += b[o] (set: y[n][o][p] = b[o], or 0 without b), by units as above */\n"
    "__device__ __forceinline__ void nb_bias_rows_body(const RowP &p, long long blk) {\n"
    "    int L = 1 << p.lg, lane = threadIdx.x & (L - 1);\n"
    "    long long u = (blk * blockDim.x + threadIdx.x) >> p.lg;\n"
    "    if (u >= p.units) return;\n"
    "    long long row = u / p.segs, b0, v0, e0; int head, nv;\n"
    "    nb_unit(p, row, (int)(u - row * p.segs), &b0, &head, &v0, &nv, &e0);\n"
    "    float bv = p.b ? p.b[row % p.O] : 0.0f;\n"
    "    uint4 *q = (uint4 *)((char *)p.y + v0 * (p.bf ? 2 : 4));\n"
    "    if (p.set) {\n"
    "        unsigned h = p.bf ? (unsigned)nb_f2bf(bv) : 0u;\n"
    "        unsigned wv = p.bf ? (h | (h << 16)) : __float_as_uint(bv);\n"
    "        for (int j = lane; j < head; j += L) nb_st(p.y, b0 + j, p.bf, bv);\n"
    "        for (int j = lane; j < nv; j += L) q[j] = make_uint4(wv, wv, wv, wv);\n"
    "        for (long long i = v0 + (long long)nv * (p.bf ? 8 : 4) + lane; i < e0; i += L)\n"
    "            nb_st(p.y, i, p.bf, bv);\n"
    "        return;\n"
    "    }\n"
    "    for (int j = lane; j < head; j += L) nb_st(p.y, b0 + j, p.bf, nb_ld(p.y, b0 + j, p.bf) + bv);\n"
    "#pragma unroll 2\n"
    "    for (int j = lane; j < nv; j += L) q[j] = nb_add16(q[j], bv, p.bf);\n"
    "    for (long long i = v0 + (long long)nv * (p.bf ? 8 : 4) + lane; i < e0; i += L)\n"
    "        nb_st(p.y, i, p.bf, nb_ld(p.y, i, p.bf) + bv);\n"
    "}\n"
    "extern \"C\" __global__ void nb_conv_bias_rows(RowP p) { nb_bias_rows_body(p, blockIdx.x); }\n"
    "struct WcP { const float *w; unsigned short *wb; long long n, wblocks; RowP r; };\n"
    "/* cuBLAS operands and output start in one launch: blocks < wblocks wb[i] := bf16(w[i]) (4 a\n"
    " * thread, i < n), the rest y := b[o] by the units of nb_unit (r.set; the GEMM then adds with\n"
    " * beta = 1) */\n"
    "extern \"C\" __global__ void nb_conv_wcvt_fill(WcP p) {\n"
    "    if (blockIdx.x < p.wblocks) {\n"
    "        long long i = (blockIdx.x * (long long)blockDim.x + threadIdx.x) * 4;\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < 4; j++)\n"
    "            if (i + j < p.n) p.wb[i + j] = nb_f2bf(p.w[i + j]);\n"
    "        return;\n"
    "    }\n"
    "    nb_bias_rows_body(p.r, blockIdx.x - p.wblocks);\n"
    "}\n"
    "struct SplitP { RowP r; float *src; int acc; };\n"
    "/* A split sum's end: y[n][o][p] (bf16, p.r.y) := bf16((acc ? y : 0) + src + b[o]) and src := 0\n"
    " * (the f32 accumulator is left zeroed for the next split sum), by the units of nb_unit;\n"
    " * vectors (p.r.vec) need y and src 16-byte aligned. */\n"
    "extern \"C\" __global__ void nb_conv_split_out(SplitP q) {\n"
    "    const RowP &p = q.r;\n"
    "    int L = 1 << p.lg, lane = threadIdx.x & (L - 1);\n"
    "    long long u = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> p.lg;\n"
    "    if (u >= p.units) return;\n"
    "    long long row = u / p.segs, b0, v0, e0; int head, nv;\n"
    "    nb_unit(p, row, (int)(u - row * p.segs), &b0, &head, &v0, &nv, &e0);\n"
    "    float bv = p.b ? p.b[row % p.O] : 0.0f;\n"
    "    unsigned short *y = (unsigned short *)p.y;\n"
    "    for (int j = lane; j < head; j += L) {\n"
    "        long long i = b0 + j;\n"
    "        y[i] = nb_f2bf((q.acc ? nb_bf2f(y[i]) : 0.0f) + q.src[i] + bv), q.src[i] = 0.0f;\n"
    "    }\n"
    "    for (int j = lane; j < nv; j += L) {\n"
    "        long long i = v0 + 8LL * j;\n"
    "        float4 *sp = (float4 *)(q.src + i);\n"
    "        float4 s0 = sp[0], s1 = sp[1];\n"
    "        uint4 o = q.acc ? *(const uint4 *)(y + i) : make_uint4(0u, 0u, 0u, 0u);\n"
    "        float v[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};\n"
    "        unsigned w[4] = {o.x, o.y, o.z, o.w};\n"
    "#pragma unroll\n"
    "        for (int k = 0; k < 4; k++)\n"
    "            w[k] = nb_f2bf2(__uint_as_float(w[k] << 16) + v[2 * k] + bv,\n"
    "                            __uint_as_float(w[k] & 0xffff0000u) + v[2 * k + 1] + bv);\n"
    "        *(uint4 *)(y + i) = make_uint4(w[0], w[1], w[2], w[3]);\n"
    "        sp[0] = make_float4(0.f, 0.f, 0.f, 0.f), sp[1] = make_float4(0.f, 0.f, 0.f, 0.f);\n"
    "    }\n"
    "    for (long long i = v0 + 8LL * nv + lane; i < e0; i += L)\n"
    "        y[i] = nb_f2bf((q.acc ? nb_bf2f(y[i]) : 0.0f) + q.src[i] + bv), q.src[i] = 0.0f;\n"
    "}\n"
    "struct ColP { void *y; const float *b; float *db; int N, OP, P, nper, bf; };\n"
    "/* small planes (P < 16; linear: P = 1): y viewed as [N][O*P], a thread per column j = o*P + p\n"
    " * (coalesced), blockIdx.y taking samples [y*nper, y*nper + nper) */\n"
    "extern \"C\" __global__ void nb_conv_bias_grad_cols(ColP p) {\n"
    "    int j = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (j >= p.OP) return;\n"
    "    int n0 = blockIdx.y * p.nper, n1 = n0 + p.nper < p.N ? n0 + p.nper : p.N;\n"
    "    float acc = 0.0f, a2 = 0.0f;\n"
    "    int n = n0;\n"
    "    for (; n + 1 < n1; n += 2)\n"
    "        acc += nb_ld(p.y, (long long)n * p.OP + j, p.bf), a2 += nb_ld(p.y, (long long)(n + 1) * p.OP + j, p.bf);\n"
    "    if (n < n1) acc += nb_ld(p.y, (long long)n * p.OP + j, p.bf);\n"
    "    atomicAdd(p.db + j / p.P, acc + a2);\n"
    "}\n"
    "extern \"C\" __global__ void nb_conv_bias_cols(ColP p) {\n"
    "    int j = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (j >= p.OP) return;\n"
    "    int n0 = blockIdx.y * p.nper, n1 = n0 + p.nper < p.N ? n0 + p.nper : p.N;\n"
    "    float bv = p.b[j / p.P];\n"
    "    for (int n = n0; n < n1; n++) {\n"
    "        long long i = (long long)n * p.OP + j;\n"
    "        nb_st(p.y, i, p.bf, nb_ld(p.y, i, p.bf) + bv);\n"
    "    }\n"
    "}\n"
    "struct SumNP { const float *s; float *dw; long long L; int N; };\n"
    "/* dw[i] += sum over n < N of s[n * L + i] */\n"
    "extern \"C\" __global__ void nb_conv_sum_n(SumNP p) {\n"
    "    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.L;\n"
    "         i += (long long)gridDim.x * blockDim.x) {\n"
    "        float acc = 0.0f;\n"
    "        for (int n = 0; n < p.N; n++) acc += p.s[n * p.L + i];\n"
    "        p.dw[i] += acc;\n"
    "    }\n"
    "}\n"
    "struct SumN4P { const float *s; float *dw; long long L; int N, vec; };\n"
    "/* dw[i] += sum over n < N of s[n * L + i]: vec (L % 4 == 0, 16-byte aligned) a thread per 4\n"
    " * columns with float4 loads, else one; the n loop two-way unrolled */\n"
    "__device__ __forceinline__ void nb_sum_n4_body(const SumN4P &p, long long blk) {\n"
    "    long long i = blk * blockDim.x + threadIdx.x;\n"
    "    if (p.vec) {\n"
    "        if (4 * i >= p.L) return;\n"
    "        const float4 *s = (const float4 *)p.s + i;\n"
    "        long long st = p.L >> 2;\n"
    "        float4 a = make_float4(0.f, 0.f, 0.f, 0.f), b = a;\n"
    "        int n = 0;\n"
    "        for (; n + 1 < p.N; n += 2) {\n"
    "            float4 u = __ldg(s + n * st), v = __ldg(s + (n + 1) * st);\n"
    "            a.x += u.x, a.y += u.y, a.z += u.z, a.w += u.w;\n"
    "            b.x += v.x, b.y += v.y, b.z += v.z, b.w += v.w;\n"
    "        }\n"
    "        if (n < p.N) { float4 u = __ldg(s + n * st); a.x += u.x, a.y += u.y, a.z += u.z, a.w += u.w; }\n"
    "        float4 *d = (float4 *)p.dw + i, o = *d;\n"
    "        o.x += a.x + b.x, o.y += a.y + b.y, o.z += a.z + b.z, o.w += a.w + b.w;\n"
    "        *d = o;\n"
    "        return;\n"
    "    }\n"
    "    if (i >= p.L) return;\n"
    "    float a = 0.0f, b = 0.0f;\n"
    "    int n = 0;\n"
    "    for (; n + 1 < p.N; n += 2) a += p.s[n * p.L + i], b += p.s[(n + 1) * p.L + i];\n"
    "    if (n < p.N) a += p.s[n * p.L + i];\n"
    "    p.dw[i] += a + b;\n"
    "}\n"
    "extern \"C\" __global__ void nb_conv_sum_n4(SumN4P p) { nb_sum_n4_body(p, blockIdx.x); }\n"
    "struct SumBgP { SumN4P s; RowP r; long long sblocks; };\n"
    "/* the split sum and a bias gradient in one launch: blocks < sblocks the sum, the rest the\n"
    " * bias gradient's units */\n"
    "extern \"C\" __global__ void nb_conv_sum_bg(SumBgP p) {\n"
    "    if (blockIdx.x < p.sblocks) nb_sum_n4_body(p.s, blockIdx.x);\n"
    "    else nb_bias_grad_rows_body(p.r, blockIdx.x - p.sblocks);\n"
    "}\n"
    "struct DwBgP { float *dwr; float *dw; int O, C, KK; long long dblocks; RowP r; };\n"
    "/* The implicit-GEMM weight gradient's end (MODE 2, KK > 1) and a bias gradient in one launch:\n"
    " * blocks < dblocks dw [O][C][KK] += dwr [O][KK][C] and dwr := 0 (as nb_conv_igemm_dw), the\n"
    " * rest the bias gradient's units */\n"
    "extern \"C\" __global__ void nb_conv_dw_bg(DwBgP p) {\n"
    "    if (blockIdx.x < p.dblocks) {\n"
    "        long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "        if (i >= (long long)p.O * p.C * p.KK) return;\n"
    "        int kk = (int)(i % p.KK); long long r = i / p.KK;\n"
    "        int c = (int)(r % p.C), o = (int)(r / p.C);\n"
    "        long long j = ((long long)o * p.KK + kk) * p.C + c;\n"
    "        p.dw[i] += p.dwr[j];\n"
    "        p.dwr[j] = 0.0f;\n"
    "        return;\n"
    "    }\n"
    "    nb_bias_grad_rows_body(p.r, blockIdx.x - p.dblocks);\n"
    "}\n";

const char *nb_conv_aux2_source(void) { return nb_conv_aux2_src; }

nb_status nb_conv_aux_kernel(nb_device *dev, const char *entry, nb_jit_kernel **k) {
    return nb_nn_cuda_kernel(dev, nb_conv_aux2_src, entry, k);
}
static nb_status nb_aux_kernel(nb_device *dev, const char *entry, nb_jit_kernel **k) {
    return nb_conv_aux_kernel(dev, entry, k);
}

typedef struct {
    void *y;
    const float *b;
    long long total;
    long long P;
    int O, ybf;
} nb_bias_p;
typedef struct {
    const void *dy;
    float *db;
    int N, P, O, ybf;
} nb_bias_grad_p;
typedef struct {
    const float *s;
    float *dw;
    long long L;
    int N;
} nb_sum_n_p;
typedef struct {
    const float *s;
    float *dw;
    long long L;
    int N, vec;
} nb_sum_n4_p;

typedef struct {
    void *y;
    const float *b;
    float *db;
    int N, OP, P, nper, bf;
} nb_col_p;

/* The old bias kernels (one element per thread with a 64-bit division; a strided scalar sum),
 * for A/B runs: -1 = not read yet (NABLA_CONV_AUX_LEGACY=1 in the environment sets it). */
static int nb_conv_aux_legacy = -1;
void nb_cuda_conv_set_aux_legacy(int legacy) { nb_conv_aux_legacy = legacy ? 1 : 0; }
int nb_cuda_conv_get_aux_legacy(void) {
    if (nb_conv_aux_legacy < 0) {
        const char *e = getenv("NABLA_CONV_AUX_LEGACY");
        nb_conv_aux_legacy = e && e[0] == '1';
    }
    return nb_conv_aux_legacy;
}

/* Planes of y [N*O][P] split into units for nb_conv_bias_rows / nb_conv_bias_grad_rows: 2^lg
 * lanes per unit (up to a warp: enough lanes for one 16-byte vector each), units of up to 8
 * vectors per lane, split further until the grid has >= 1024 threads per SM. */
nb_row_p nb_conv_rows(nb_device *dev, void *y, nb_dtype ydt, const float *b, float *db,
                             int64_t N, int64_t O, int64_t P) {
    int es = ydt == NB_BF16 ? 2 : 4, V = 16 / es;
    int64_t nvec = (P + V - 1) / V, rows = N * O;
    int lg = 0;
    while (lg < 5 && ((int64_t)1 << lg) < nvec) lg++;
    int64_t L = (int64_t)1 << lg, per = L * V * 8;
    int64_t segs = (P + per - 1) / per;
    int64_t sms = nb_device_get_info(dev)->multiprocessors;
    int64_t want = ((sms > 0 ? sms : 132) * 1024 / L + rows - 1) / rows; /* units per row wanted */
    int64_t most = (P + L * V - 1) / (L * V);                           /* >= 1 vector a lane */
    if (segs < want) segs = want < most ? want : most;
    if (segs < 1) segs = 1;
    int64_t seg = (P + segs - 1) / segs;
    seg = (seg + V - 1) / V * V;
    segs = (P + seg - 1) / seg;
    nb_row_p a = {y, b, db, (long long)(rows * segs), (int)P, (int)O, ydt == NB_BF16, lg, (int)segs,
                  (int)seg, (uintptr_t)y % (uintptr_t)es == 0, 0};
    return a;
}

static nb_status nb_conv_launch_rows(nb_device *dev, const char *entry, const nb_row_p *a) {
    nb_jit_kernel *k;
    NB_TRY(nb_aux_kernel(dev, entry, &k));
    int64_t threads = (int64_t)a->units << a->lg;
    const unsigned grid[3] = {(unsigned)((threads + 255) / 256), 1, 1}, block[3] = {256, 1, 1};
    return nb_jit_launch_cuda_grid(k, a, sizeof *a, grid, block, NULL);
}

/* Columns j = o*P + p of y [N][O*P] (P < 16): samples split over blockIdx.y, at least minper
 * each, until the grid has >= 32768 threads. */
static nb_status nb_conv_launch_cols(nb_device *dev, const char *entry, void *y, nb_dtype ydt,
                                     const float *b, float *db, int64_t N, int64_t O, int64_t P,
                                     int64_t minper) {
    nb_jit_kernel *k;
    NB_TRY(nb_aux_kernel(dev, entry, &k));
    int64_t OP = O * P, gy = (32768 + OP - 1) / OP, most = (N + minper - 1) / minper;
    if (gy > most) gy = most;
    if (gy > 65535) gy = 65535;
    if (gy < 1) gy = 1;
    int64_t nper = (N + gy - 1) / gy;
    gy = (N + nper - 1) / nper;
    nb_col_p a = {y, b, db, (int)N, (int)OP, (int)P, (int)nper, ydt == NB_BF16};
    const unsigned grid[3] = {(unsigned)((OP + 255) / 256), (unsigned)gy, 1}, block[3] = {256, 1, 1};
    return nb_jit_launch_cuda_grid(k, &a, sizeof a, grid, block, NULL);
}

/* Small planes go by columns (coalesced across o and p); the column form needs O*P and N to
 * fit an int. */
static int nb_conv_use_cols(int64_t N, int64_t O, int64_t P) {
    return P < 16 && O * P < ((int64_t)1 << 31) && N < ((int64_t)1 << 31);
}

/* y [N,O,P] (ydt) += b[o] */
nb_status nb_conv_add_bias(nb_device *dev, void *y, nb_dtype ydt, const float *b, int64_t N,
                           int64_t O, int64_t P) {
    if (N <= 0 || O <= 0 || P <= 0) return NB_OK;
    if (nb_cuda_conv_get_aux_legacy()) {
        nb_jit_kernel *k;
        NB_TRY(nb_aux_kernel(dev, "nb_conv_bias", &k));
        nb_bias_p a = {y, b, (long long)(N * O * P), (long long)P, (int)O, ydt == NB_BF16};
        return nb_jit_launch_cuda(k, &a, sizeof a, N * O * P, NULL);
    }
    if (nb_conv_use_cols(N, O, P))
        return nb_conv_launch_cols(dev, "nb_conv_bias_cols", y, ydt, b, NULL, N, O, P, 1);
    nb_row_p a = nb_conv_rows(dev, y, ydt, b, NULL, N, O, P);
    return nb_conv_launch_rows(dev, "nb_conv_bias_rows", &a);
}

nb_status nb_conv_fill_bias(nb_device *dev, void *y, nb_dtype ydt, const float *b, int64_t N,
                            int64_t O, int64_t P) {
    if (N <= 0 || O <= 0 || P <= 0) return NB_OK;
    nb_row_p a = nb_conv_rows(dev, y, ydt, b, NULL, N, O, P);
    a.set = 1;
    return nb_conv_launch_rows(dev, "nb_conv_bias_rows", &a);
}

typedef struct {
    nb_row_p r;
    float *src;
    int acc;
} nb_split_p;

nb_status nb_conv_split_out(nb_device *dev, float *src, void *y, const float *b, int64_t N,
                            int64_t O, int64_t P, int acc) {
    if (N <= 0 || O <= 0 || P <= 0) return NB_OK;
    nb_split_p a = {nb_conv_rows(dev, y, NB_BF16, b, NULL, N, O, P), src, acc ? 1 : 0};
    a.r.vec = ((uintptr_t)y | (uintptr_t)src) % 16 == 0;
    nb_jit_kernel *k;
    NB_TRY(nb_aux_kernel(dev, "nb_conv_split_out", &k));
    int64_t threads = (int64_t)a.r.units << a.r.lg;
    const unsigned grid[3] = {(unsigned)((threads + 255) / 256), 1, 1}, block[3] = {256, 1, 1};
    return nb_jit_launch_cuda_grid(k, &a, sizeof a, grid, block, NULL);
}

/* db[o] += sum dy[n,o,p] (dy in ydt) */
nb_status nb_conv_bias_grad(nb_device *dev, const void *dy, nb_dtype ydt, float *db, int64_t N,
                            int64_t O, int64_t P) {
    if (N <= 0 || O <= 0 || P <= 0) return NB_OK;
    if (nb_cuda_conv_get_aux_legacy()) {
        nb_jit_kernel *k;
        NB_TRY(nb_aux_kernel(dev, "nb_conv_bias_grad", &k));
        nb_bias_grad_p a = {dy, db, (int)N, (int)P, (int)O, ydt == NB_BF16};
        /* about two blocks per SM in all, each summing >= 4096 terms */
        int64_t want = 2 * (int64_t)nb_device_get_info(dev)->multiprocessors;
        int64_t y = (want + O - 1) / O, most = (N * P + 4095) / 4096;
        if (y > most) y = most;
        if (y < 1) y = 1;
        if (y > 65535) y = 65535;
        const unsigned grid[3] = {(unsigned)O, (unsigned)y, 1}, block[3] = {256, 1, 1};
        return nb_jit_launch_cuda_grid(k, &a, sizeof a, grid, block, NULL);
    }
    if (nb_conv_use_cols(N, O, P))
        return nb_conv_launch_cols(dev, "nb_conv_bias_grad_cols", (void *)dy, ydt, NULL, db, N, O,
                                   P, 16);
    nb_row_p a = nb_conv_rows(dev, (void *)dy, ydt, NULL, db, N, O, P);
    return nb_conv_launch_rows(dev, "nb_conv_bias_grad_rows", &a);
}

typedef struct {
    nb_sum_n4_p s;
    nb_row_p r;
    long long sblocks;
} nb_sum_bg_p;

/* dw += the Z partial sums part [Z][L] (nb_conv_sum_splits), and db[o] += sum dy [N,O,P] (ydt)
 * in the same launch (db NULL: the sum alone; the old kernels: two launches). */
nb_status nb_conv_sum_splits_db(nb_device *dev, const float *part, float *dw, int64_t L,
                                       int64_t Z, const void *dy, nb_dtype ydt, float *db,
                                       int64_t N, int64_t O, int64_t P) {
    if (!db || L <= 0 || nb_cuda_conv_get_aux_legacy() || nb_conv_use_cols(N, O, P)) {
        NB_TRY(nb_conv_sum_splits(dev, part, dw, L, Z));
        return db ? nb_conv_bias_grad(dev, dy, ydt, db, N, O, P) : NB_OK;
    }
    int vec = L % 4 == 0 && ((uintptr_t)part | (uintptr_t)dw) % 16 == 0;
    nb_sum_bg_p a;
    memset(&a, 0, sizeof a);
    nb_sum_n4_p sp = {part, dw, (long long)L, (int)Z, vec};
    a.s = sp;
    a.r = nb_conv_rows(dev, (void *)dy, ydt, NULL, db, N, O, P);
    a.sblocks = (long long)(((vec ? L / 4 : L) + 255) / 256);
    int64_t rblocks = (((int64_t)a.r.units << a.r.lg) + 255) / 256;
    nb_jit_kernel *k;
    NB_TRY(nb_aux_kernel(dev, "nb_conv_sum_bg", &k));
    const unsigned grid[3] = {(unsigned)(a.sblocks + rblocks), 1, 1}, block[3] = {256, 1, 1};
    return nb_jit_launch_cuda_grid(k, &a, sizeof a, grid, block, NULL);
}

typedef struct {
    float *dwr, *dw;
    int O, C, KK;
    long long dblocks;
    nb_row_p r;
} nb_dw_bg_p;

nb_status nb_conv_dw_bias_grad(nb_device *dev, float *dwr, float *dw, int64_t O, int64_t C,
                               int64_t KK, const void *dy, nb_dtype ydt, float *db, int64_t N,
                               int64_t P) {
    nb_dw_bg_p a;
    memset(&a, 0, sizeof a);
    a.dwr = dwr, a.dw = dw, a.O = (int)O, a.C = (int)C, a.KK = (int)KK;
    a.dblocks = (long long)((O * C * KK + 255) / 256);
    a.r = nb_conv_rows(dev, (void *)dy, ydt, NULL, db, N, O, P);
    int64_t rblocks = (((int64_t)a.r.units << a.r.lg) + 255) / 256;
    nb_jit_kernel *k;
    NB_TRY(nb_aux_kernel(dev, "nb_conv_dw_bg", &k));
    const unsigned grid[3] = {(unsigned)(a.dblocks + rblocks), 1, 1}, block[3] = {256, 1, 1};
    return nb_jit_launch_cuda_grid(k, &a, sizeof a, grid, block, NULL);
}

nb_status nb_conv_sum_splits(nb_device *dev, const float *part, float *dw, int64_t L, int64_t Z) {
    nb_jit_kernel *k;
    if (L <= 0) return NB_OK;
    if (nb_cuda_conv_get_aux_legacy()) {
        NB_TRY(nb_aux_kernel(dev, "nb_conv_sum_n", &k));
        nb_sum_n_p a = {part, dw, (long long)L, (int)Z};
        return nb_jit_launch_cuda(k, &a, sizeof a, L, NULL);
    }
    NB_TRY(nb_aux_kernel(dev, "nb_conv_sum_n4", &k));
    int vec = L % 4 == 0 && ((uintptr_t)part | (uintptr_t)dw) % 16 == 0;
    nb_sum_n4_p a = {part, dw, (long long)L, (int)Z, vec};
    int64_t threads = vec ? L / 4 : L;
    const unsigned grid[3] = {(unsigned)((threads + 255) / 256), 1, 1}, block[3] = {256, 1, 1};
    return nb_jit_launch_cuda_grid(k, &a, sizeof a, grid, block, NULL);
}


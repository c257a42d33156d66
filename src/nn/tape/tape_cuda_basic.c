/* CUDA rows of the tape's elementwise and layout ops: SiLU, add, per-channel add, channel concat,
 * nearest upsample ×2, average pool 2×2, MSE, reshape, transpose (last two dims), channel slice,
 * the sinusoidal timestep embedding and the backward seed. The CPU references are in
 * tape_ops_basic.c / tape_ops_shape.c.
 *
 * Hand-written CUDA C compiled with NVRTC through the JIT (one module, loaded on first use and
 * kept per tape in t->kern), launched on nb_device_stream(t->dev); nothing here synchronises.
 * (Not generated from .nb kernels yet: these are plain enough that the hand-written float4
 * versions are the reference the generated code would have to match.)
 * Elementwise kernels are grid-stride loops over float4 chunks (every arena value is 64-byte
 * aligned; a scalar tail and a scalar path for unaligned parameter pointers), reductions are
 * deterministic (fixed grids, fixed summation order; no float atomics). Gradients accumulate
 * (dx += ...) as on the CPU, except that the first contribution to a fresh activation gradient
 * is stored (nb_tape_grad_buf_w: no zero fill, no read). Indices are 32-bit: every value has
 * < 2^31 elements (checked).
 * BF16 storage (tape_internal.h, NB_TOPF_*): every row but the timestep embedding reads its
 * inputs and writes its output in each value's own dtype (f32 or bf16, any mix; gradients in
 * their value's dtype; the MSE loss [1] stays f32). A kernel gets the dtypes as bits in
 * tk_args.dt and runs a template variant: BF = 0 (all f32) is the f32 code as before (16-byte
 * accesses), BF = 1 reads / writes each buffer through the bf16_cuda.h helpers (8-byte
 * accesses per 4 bf16). Arithmetic is f32 either way; bf16 stores round to nearest even, and a
 * gradient accumulated into a bf16 buffer is rounded after each addition. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "nabla/device.h"
#include "nn/common/bf16_cuda.h"
#include "nn/common/nn_common.h"
#include "nn/tape/tape_internal.h"

#define VAL(t, v) (&(t)->vals[(v)])

/* One parameter block for every kernel of this file. */
typedef struct tk_args {
    const float *a, *b, *c;
    float *y, *y2;
    int32_t n, d0, d1, d2;
    int32_t v4; /* 1: the float4 path is allowed (pointers 16-byte aligned) */
    int32_t ow; /* bit 0: store into y rather than add (a fresh gradient), bit 1: y2 */
    float f;
    int32_t dt; /* storage of a, b, c, y, y2: bits TK_A .. TK_Y2 set for bf16 (else f32) */
} tk_args;

/* tk_args.dt bits */
enum { TK_A = 1, TK_B = 2, TK_C = 4, TK_Y = 8, TK_Y2 = 16 };

static const char tk_src[] = NB_CUDA_BF16_HELPERS
    "/* ow: bit 0 = store into y instead of adding, bit 1 = the same for y2 (a fresh gradient);\n"
    " * dt: storage of a, b, c, y, y2 (bits 0..4; set = bf16, clear = f32) */\n"
    "struct A { const float *a, *b, *c; float *y, *y2; int n, d0, d1, d2; int v4, ow; float f; int dt; };\n"
    "#define TID (blockIdx.x * blockDim.x + threadIdx.x)\n"
    "#define STRIDE (gridDim.x * blockDim.x)\n"
    "/* EW4: 4-element chunks [0, n/4); EW1: then the scalar tail (v4 == 0: all scalar) */\n"
    "#define EW4(N) unsigned n4_ = p.v4 ? (unsigned)(N) / 4u : 0u; \\\n"
    "    for (unsigned i = TID; i < n4_; i += STRIDE)\n"
    "#define EW1(N) for (unsigned i = n4_ * 4u + TID; i < (unsigned)(N); i += STRIDE)\n"
    "/* Kernel bodies are templates on BF: 0 = every buffer f32 (the f32 code: the dtype tests below\n"
    " * fold to 0), 1 = each buffer in the dtype its dt bit names. The entry points take BF = 1 when\n"
    " * any dt bit is set (a uniform branch at the top). Buffers are indexed by element (not by\n"
    " * pointer arithmetic on float *, which would be wrong for bf16). */\n"
    "#define FA (BF && (p.dt & 1))\n"
    "#define FB (BF && (p.dt & 2))\n"
    "#define FC (BF && (p.dt & 4))\n"
    "#define FY (BF && (p.dt & 8))\n"
    "#define FY2 (BF && (p.dt & 16))\n"
    "#define ENTRY(name) extern \"C\" __global__ void name(const A p) { \\\n"
    "    if (p.dt) name##_t<1>(p); else name##_t<0>(p); }\n"
    "__device__ __forceinline__ float silu(float v) { return v / (1.0f + __expf(-v)); }\n"
    "__device__ __forceinline__ float dsilu(float v) {\n"
    "    float s = 1.0f / (1.0f + __expf(-v)); return s * (1.0f + v * (1.0f - s)); }\n"
    "__device__ __forceinline__ float4 add4(float4 a, float4 b) {\n"
    "    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }\n"
    "/* elements i, i + 1 (i even): float2 / one 32-bit pair of bf16 */\n"
    "__device__ __forceinline__ float2 ld2(const void *p, long long i, int bf) {\n"
    "    if (!bf) return *(const float2 *)((const float *)p + i);\n"
    "    unsigned u = *(const unsigned *)((const unsigned short *)p + i);\n"
    "    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u)); }\n"
    "__device__ __forceinline__ void st2(void *p, long long i, int bf, float2 v) {\n"
    "    if (!bf) *(float2 *)((float *)p + i) = v;\n"
    "    else *(unsigned *)((unsigned short *)p + i) = nb_f2bf2(v.x, v.y); }\n"
    "/* p[i .. i+3] / p[i] (+)= v: store when ow, else accumulate (bf: p is bf16) */\n"
    "__device__ __forceinline__ void acc4(void *p, long long i, int bf, float4 v, bool ow) {\n"
    "    nb_st4(p, i, bf, ow ? v : add4(nb_ld4(p, i, bf), v)); }\n"
    "__device__ __forceinline__ void acc1(void *p, long long i, int bf, float v, bool ow) {\n"
    "    nb_st(p, i, bf, ow ? v : nb_ld(p, i, bf) + v); }\n"
    "#define OW0 (p.ow & 1)\n"
    "#define OW1 (p.ow & 2)\n"
    "extern \"C\" __global__ void tk_add_scalar(const A p) {\n"
    "    if (TID == 0) p.y[0] += p.f; }\n"
    "/* y = silu(a) */\n"
    "template <int BF> __device__ __forceinline__ void tk_silu_fwd_t(const A &p) {\n"
    "    EW4(p.n) { float4 v = nb_ld4(p.a, 4u * i, FA);\n"
    "        nb_st4(p.y, 4u * i, FY, make_float4(silu(v.x), silu(v.y), silu(v.z), silu(v.w))); }\n"
    "    EW1(p.n) nb_st(p.y, i, FY, silu(nb_ld(p.a, i, FA))); }\n"
    "ENTRY(tk_silu_fwd)\n"
    "/* y += b * silu'(a) */\n"
    "template <int BF> __device__ __forceinline__ void tk_silu_bwd_t(const A &p) {\n"
    "    EW4(p.n) {\n"
    "        float4 v = nb_ld4(p.a, 4u * i, FA), g = nb_ld4(p.b, 4u * i, FB);\n"
    "        acc4(p.y, 4u * i, FY, make_float4(g.x * dsilu(v.x), g.y * dsilu(v.y), g.z * dsilu(v.z), g.w * dsilu(v.w)), OW0);\n"
    "    }\n"
    "    EW1(p.n) acc1(p.y, i, FY, nb_ld(p.b, i, FB) * dsilu(nb_ld(p.a, i, FA)), OW0); }\n"
    "ENTRY(tk_silu_bwd)\n"
    "/* y = a + b */\n"
    "template <int BF> __device__ __forceinline__ void tk_add_fwd_t(const A &p) {\n"
    "    EW4(p.n) nb_st4(p.y, 4u * i, FY, add4(nb_ld4(p.a, 4u * i, FA), nb_ld4(p.b, 4u * i, FB)));\n"
    "    EW1(p.n) nb_st(p.y, i, FY, nb_ld(p.a, i, FA) + nb_ld(p.b, i, FB)); }\n"
    "ENTRY(tk_add_fwd)\n"
    "/* y += a; y2 += a (each may be NULL; the same pointer twice adds twice, in order) */\n"
    "template <int BF> __device__ __forceinline__ void tk_acc_t(const A &p) {\n"
    "    EW4(p.n) {\n"
    "        float4 g = nb_ld4(p.a, 4u * i, FA);\n"
    "        if (p.y) acc4(p.y, 4u * i, FY, g, OW0);\n"
    "        if (p.y2) acc4(p.y2, 4u * i, FY2, g, OW1);\n"
    "    }\n"
    "    EW1(p.n) { float g = nb_ld(p.a, i, FA); if (p.y) acc1(p.y, i, FY, g, OW0); if (p.y2) acc1(p.y2, i, FY2, g, OW1); } }\n"
    "ENTRY(tk_acc)\n"
    "/* y[i] = a[i] + b[i / HW], d0 = HW (v4 only when HW % 4 == 0) */\n"
    "template <int BF> __device__ __forceinline__ void tk_addc_fwd_t(const A &p) {\n"
    "    EW4(p.n) {\n"
    "        float c = nb_ld(p.b, (4u * i) / (unsigned)p.d0, FB); float4 v = nb_ld4(p.a, 4u * i, FA);\n"
    "        nb_st4(p.y, 4u * i, FY, make_float4(v.x + c, v.y + c, v.z + c, v.w + c));\n"
    "    }\n"
    "    EW1(p.n) nb_st(p.y, i, FY, nb_ld(p.a, i, FA) + nb_ld(p.b, i / (unsigned)p.d0, FB)); }\n"
    "ENTRY(tk_addc_fwd)\n"
    "/* a warp per row r of d1 rows of HW = d0 elements: y2[r] += sum_j a[r, j]; y[r, j] += a[r, j] */\n"
    "template <int BF> __device__ __forceinline__ void tk_addc_bwd_t(const A &p) {\n"
    "    unsigned lane = threadIdx.x & 31u, warp = TID >> 5, nw = STRIDE >> 5;\n"
    "    unsigned HW = (unsigned)p.d0;\n"
    "    for (unsigned r = warp; r < (unsigned)p.d1; r += nw) {\n"
    "        size_t o = (size_t)r * HW;\n"
    "        float s = 0.0f;\n"
    "        if (p.v4 && HW % 4u == 0u) {\n"
    "            for (unsigned j = lane; j < HW / 4u; j += 32u) {\n"
    "                float4 v = nb_ld4(p.a, o + 4u * j, FA); s += (v.x + v.y) + (v.z + v.w);\n"
    "                if (p.y) acc4(p.y, o + 4u * j, FY, v, OW0);\n"
    "            }\n"
    "        } else {\n"
    "            for (unsigned j = lane; j < HW; j += 32u) { float v = nb_ld(p.a, o + j, FA); s += v; if (p.y) acc1(p.y, o + j, FY, v, OW0); }\n"
    "        }\n"
    "        for (int k = 16; k > 0; k >>= 1) s += __shfl_xor_sync(0xffffffffu, s, k);\n"
    "        if (lane == 0 && p.y2) acc1(p.y2, r, FY2, s, OW1);\n"
    "    } }\n"
    "/* (at most 40 registers, as the f32 code alone: 6 blocks of 256 per SM) */\n"
    "extern \"C\" __global__ void __launch_bounds__(256, 6) tk_addc_bwd(const A p) {\n"
    "    if (p.dt) tk_addc_bwd_t<1>(p); else tk_addc_bwd_t<0>(p); }\n"
    "/* concat: d0 = sa, d1 = sb elements per sample; y [N, sa + sb] */\n"
    "template <int BF> __device__ __forceinline__ void tk_concat_fwd_t(const A &p) {\n"
    "    unsigned sa = (unsigned)p.d0, sb = (unsigned)p.d1, so = sa + sb;\n"
    "    EW4(p.n) {\n"
    "        unsigned e = 4u * i, n = e / so, r = e - n * so;\n"
    "        nb_st4(p.y, e, FY, r < sa ? nb_ld4(p.a, n * sa + r, FA) : nb_ld4(p.b, n * sb + r - sa, FB));\n"
    "    }\n"
    "    EW1(p.n) { unsigned n = i / so, r = i - n * so;\n"
    "        nb_st(p.y, i, FY, r < sa ? nb_ld(p.a, n * sa + r, FA) : nb_ld(p.b, n * sb + r - sa, FB)); } }\n"
    "ENTRY(tk_concat_fwd)\n"
    "/* concat backward: a = dy; y += dy[:, :sa], y2 += dy[:, sa:] (NULL: skipped) */\n"
    "template <int BF> __device__ __forceinline__ void tk_concat_bwd_t(const A &p) {\n"
    "    unsigned sa = (unsigned)p.d0, sb = (unsigned)p.d1, so = sa + sb;\n"
    "    EW4(p.n) {\n"
    "        unsigned e = 4u * i, n = e / so, r = e - n * so;\n"
    "        if (r < sa) { if (p.y) acc4(p.y, n * sa + r, FY, nb_ld4(p.a, e, FA), OW0); }\n"
    "        else if (p.y2) acc4(p.y2, n * sb + r - sa, FY2, nb_ld4(p.a, e, FA), OW1);\n"
    "    }\n"
    "    EW1(p.n) {\n"
    "        unsigned n = i / so, r = i - n * so;\n"
    "        if (r < sa) { if (p.y) acc1(p.y, n * sa + r, FY, nb_ld(p.a, i, FA), OW0); }\n"
    "        else if (p.y2) acc1(p.y2, n * sb + r - sa, FY2, nb_ld(p.a, i, FA), OW1);\n"
    "    } }\n"
    "ENTRY(tk_concat_bwd)\n"
    "/* nearest ×2 upsample: thread per input element, d0 = H, d1 = W */\n"
    "template <int BF> __device__ __forceinline__ void tk_up_fwd_t(const A &p) {\n"
    "    unsigned H = (unsigned)p.d0, W = (unsigned)p.d1, HW = H * W;\n"
    "    for (unsigned i = TID; i < (unsigned)p.n; i += STRIDE) {\n"
    "        unsigned q = i / HW, rem = i - q * HW, r = rem / W, c = rem - r * W;\n"
    "        float v = nb_ld(p.a, i, FA); float2 v2 = make_float2(v, v);\n"
    "        size_t o = ((size_t)q * 2u * H + 2u * r) * 2u * W + 2u * c;\n"
    "        st2(p.y, o, FY, v2); st2(p.y, o + 2u * W, FY, v2);\n"
    "    } }\n"
    "ENTRY(tk_up_fwd)\n"
    "template <int BF> __device__ __forceinline__ void tk_up_bwd_t(const A &p) {\n"
    "    unsigned H = (unsigned)p.d0, W = (unsigned)p.d1, HW = H * W;\n"
    "    for (unsigned i = TID; i < (unsigned)p.n; i += STRIDE) {\n"
    "        unsigned q = i / HW, rem = i - q * HW, r = rem / W, c = rem - r * W;\n"
    "        size_t o = ((size_t)q * 2u * H + 2u * r) * 2u * W + 2u * c;\n"
    "        float2 u = ld2(p.a, o, FA), l = ld2(p.a, o + 2u * W, FA);\n"
    "        acc1(p.y, i, FY, (u.x + u.y) + (l.x + l.y), OW0);\n"
    "    } }\n"
    "ENTRY(tk_up_bwd)\n"
    "/* 2×2 average pool: thread per output element, d0 = H, d1 = W (input) */\n"
    "template <int BF> __device__ __forceinline__ void tk_pool_fwd_t(const A &p) {\n"
    "    unsigned H = (unsigned)p.d0, W = (unsigned)p.d1, oh = H / 2u, ow = W / 2u, ohw = oh * ow;\n"
    "    for (unsigned i = TID; i < (unsigned)p.n; i += STRIDE) {\n"
    "        unsigned q = i / ohw, rem = i - q * ohw, r = rem / ow, c = rem - r * ow;\n"
    "        size_t o = ((size_t)q * H + 2u * r) * W + 2u * c;\n"
    "        float2 u = ld2(p.a, o, FA), l = ld2(p.a, o + W, FA);\n"
    "        nb_st(p.y, i, FY, 0.25f * ((u.x + u.y) + (l.x + l.y)));\n"
    "    } }\n"
    "ENTRY(tk_pool_fwd)\n"
    "template <int BF> __device__ __forceinline__ void tk_pool_bwd_t(const A &p) {\n"
    "    unsigned H = (unsigned)p.d0, W = (unsigned)p.d1, oh = H / 2u, ow = W / 2u, ohw = oh * ow;\n"
    "    for (unsigned i = TID; i < (unsigned)p.n; i += STRIDE) {\n"
    "        unsigned q = i / ohw, rem = i - q * ohw, r = rem / ow, c = rem - r * ow;\n"
    "        size_t o = ((size_t)q * H + 2u * r) * W + 2u * c; float g = 0.25f * nb_ld(p.a, i, FA);\n"
    "        float2 u = make_float2(g, g), l = u;\n"
    "        if (!OW0) {\n"
    "            float2 a = ld2(p.y, o, FY), b = ld2(p.y, o + W, FY);\n"
    "            u.x += a.x; u.y += a.y; l.x += b.x; l.y += b.y;\n"
    "        }\n"
    "        st2(p.y, o, FY, u); st2(p.y, o + W, FY, l);\n"
    "    } }\n"
    "ENTRY(tk_pool_bwd)\n"
    "/* block-wide sum (result in thread 0) */\n"
    "__device__ double block_sum(double v) {\n"
    "    __shared__ double sh[32];\n"
    "    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
    "    if ((threadIdx.x & 31u) == 0) sh[threadIdx.x >> 5] = v;\n"
    "    __syncthreads();\n"
    "    double r = 0.0;\n"
    "    if (threadIdx.x == 0) for (unsigned w = 0; w < (blockDim.x + 31u) / 32u; w++) r += sh[w];\n"
    "    return r; }\n"
    "/* MSE: per-block partial sums of (a - b)^2 (double) into y2 as double[gridDim.x] */\n"
    "template <int BF> __device__ __forceinline__ void tk_mse_part_t(const A &p) {\n"
    "    double s = 0.0;\n"
    "    EW4(p.n) {\n"
    "        float4 u = nb_ld4(p.a, 4u * i, FA), v = nb_ld4(p.b, 4u * i, FB);\n"
    "        float e0 = u.x - v.x, e1 = u.y - v.y, e2 = u.z - v.z, e3 = u.w - v.w;\n"
    "        s += (double)(e0 * e0 + e1 * e1) + (double)(e2 * e2 + e3 * e3);\n"
    "    }\n"
    "    EW1(p.n) { float d = nb_ld(p.a, i, FA) - nb_ld(p.b, i, FB); s += (double)(d * d); }\n"
    "    double r = block_sum(s);\n"
    "    if (threadIdx.x == 0) ((double *)p.y2)[blockIdx.x] = r; }\n"
    "ENTRY(tk_mse_part)\n"
    "/* y[0] = sum of the d0 partials in c / n (one block; fixed order; all f32 / double) */\n"
    "extern \"C\" __global__ void tk_mse_fin(const A p) {\n"
    "    double s = 0.0;\n"
    "    for (unsigned i = threadIdx.x; i < (unsigned)p.d0; i += blockDim.x) s += ((const double *)p.c)[i];\n"
    "    double r = block_sum(s);\n"
    "    if (threadIdx.x == 0) p.y[0] = (float)(r / (double)p.n); }\n"
    "/* dp (y) += g (a - b), dq (y2) -= g (a - b), g = 2 c[0] / n (c: the f32 loss gradient) */\n"
    "template <int BF> __device__ __forceinline__ void tk_mse_bwd_t(const A &p) {\n"
    "    float g = 2.0f * p.c[0] / (float)p.n;\n"
    "    EW4(p.n) {\n"
    "        float4 u = nb_ld4(p.a, 4u * i, FA), v = nb_ld4(p.b, 4u * i, FB);\n"
    "        float4 d = make_float4(g * (u.x - v.x), g * (u.y - v.y), g * (u.z - v.z), g * (u.w - v.w));\n"
    "        if (p.y) acc4(p.y, 4u * i, FY, d, OW0);\n"
    "        if (p.y2) acc4(p.y2, 4u * i, FY2, make_float4(-d.x, -d.y, -d.z, -d.w), OW1);\n"
    "    }\n"
    "    EW1(p.n) { float d = g * (nb_ld(p.a, i, FA) - nb_ld(p.b, i, FB));\n"
    "        if (p.y) acc1(p.y, i, FY, d, OW0); if (p.y2) acc1(p.y2, i, FY2, -d, OW1); } }\n"
    "ENTRY(tk_mse_bwd)\n"
    "/* batched transpose a [B, R, C] -> y [B, C, R] (d0 = R, d1 = C), 32×32 tiles, blocks (32, 8);\n"
    " * ow bit 0: store (else accumulate into y) */\n"
    "template <int BF> __device__ __forceinline__ void tk_transpose_t(const A &p, float (&tile)[32][33]) {\n"
    "    unsigned R = (unsigned)p.d0, C = (unsigned)p.d1;\n"
    "    size_t off = (size_t)blockIdx.z * R * C;\n"
    "    unsigned c = blockIdx.x * 32u + threadIdx.x, r0 = blockIdx.y * 32u;\n"
    "    for (unsigned k = threadIdx.y; k < 32u; k += 8u)\n"
    "        if (c < C && r0 + k < R) tile[k][threadIdx.x] = nb_ld(p.a, off + (size_t)(r0 + k) * C + c, FA);\n"
    "    __syncthreads();\n"
    "    unsigned r = r0 + threadIdx.x, c0 = blockIdx.x * 32u;\n"
    "    for (unsigned k = threadIdx.y; k < 32u; k += 8u)\n"
    "        if (r < R && c0 + k < C) acc1(p.y, off + (size_t)(c0 + k) * R + r, FY, tile[threadIdx.x][k], OW0);\n"
    "}\n"
    "extern \"C\" __global__ void tk_transpose(const A p) {\n"
    "    __shared__ float tile[32][33];\n"
    "    if (p.dt) tk_transpose_t<1>(p, tile); else tk_transpose_t<0>(p, tile); }\n"
    "/* channel slice: d0 = so (elements per sample out), d1 = sx (in), d2 = offset (c0 * S) */\n"
    "template <int BF> __device__ __forceinline__ void tk_slice_fwd_t(const A &p) {\n"
    "    unsigned so = (unsigned)p.d0, sx = (unsigned)p.d1, off = (unsigned)p.d2;\n"
    "    EW4(p.n) { unsigned e = 4u * i, n = e / so, r = e - n * so; nb_st4(p.y, e, FY, nb_ld4(p.a, n * sx + off + r, FA)); }\n"
    "    EW1(p.n) { unsigned n = i / so, r = i - n * so; nb_st(p.y, i, FY, nb_ld(p.a, n * sx + off + r, FA)); } }\n"
    "ENTRY(tk_slice_fwd)\n"
    "template <int BF> __device__ __forceinline__ void tk_slice_bwd_t(const A &p) {\n"
    "    unsigned so = (unsigned)p.d0, sx = (unsigned)p.d1, off = (unsigned)p.d2;\n"
    "    EW4(p.n) { unsigned e = 4u * i, n = e / so, r = e - n * so; acc4(p.y, n * sx + off + r, FY, nb_ld4(p.a, e, FA), false); }\n"
    "    EW1(p.n) { unsigned n = i / so, r = i - n * so; acc1(p.y, n * sx + off + r, FY, nb_ld(p.a, i, FA), false); } }\n"
    "ENTRY(tk_slice_bwd)\n"
    "/* sinusoidal timestep embedding (f32), thread per output element of y [n, dim]: the timesteps\n"
    " * travel in the parameter block (no host -> device copy); double math as on the CPU\n"
    " * (or, with tsp, from device memory: what a captured graph replays with new values) */\n"
    "struct TE { float *y; const float *tsp; int n, dim; double lmp; float ts[512]; };\n"
    "extern \"C\" __global__ void tk_temb(const TE p) {\n"
    "    unsigned half = (unsigned)p.dim / 2u;\n"
    "    for (unsigned i = TID; i < (unsigned)(p.n * p.dim); i += STRIDE) {\n"
    "        unsigned r = i / (unsigned)p.dim, j = i - r * (unsigned)p.dim, k = j < half ? j : j - half;\n"
    "        double f = exp(-p.lmp * (double)k / (double)half), a = (double)(p.tsp ? p.tsp[r] : p.ts[r]) * f;\n"
    "        p.y[i] = (float)(j < half ? cos(a) : sin(a));\n"
    "    } }\n";

static const char *const tk_entry[NB_TK_COUNT] = {
    [NB_TK_ADD_SCALAR] = "tk_add_scalar", [NB_TK_SILU_FWD] = "tk_silu_fwd",
    [NB_TK_SILU_BWD] = "tk_silu_bwd",     [NB_TK_ADD_FWD] = "tk_add_fwd",
    [NB_TK_ACC] = "tk_acc",               [NB_TK_ADDC_FWD] = "tk_addc_fwd",
    [NB_TK_ADDC_BWD] = "tk_addc_bwd",     [NB_TK_CONCAT_FWD] = "tk_concat_fwd",
    [NB_TK_CONCAT_BWD] = "tk_concat_bwd", [NB_TK_UP_FWD] = "tk_up_fwd",
    [NB_TK_UP_BWD] = "tk_up_bwd",         [NB_TK_POOL_FWD] = "tk_pool_fwd",
    [NB_TK_POOL_BWD] = "tk_pool_bwd",     [NB_TK_MSE_PART] = "tk_mse_part",
    [NB_TK_MSE_FIN] = "tk_mse_fin",       [NB_TK_MSE_BWD] = "tk_mse_bwd",
    [NB_TK_TR] = "tk_transpose",          [NB_TK_SLICE_FWD] = "tk_slice_fwd",
    [NB_TK_SLICE_BWD] = "tk_slice_bwd",   [NB_TK_TEMB] = "tk_temb",
};

/* The tape's handle of kernel id (loaded on first use). */
static nb_status tk_kernel(nb_tape *t, int id, nb_jit_kernel **k) {
    if (!t->kern[id]) {
        nb_status s = nb_nn_cuda_kernel(t->dev, tk_src, tk_entry[id], &t->kern[id]);
        if (s) return s;
    }
    *k = t->kern[id];
    return NB_OK;
}

/* Grid-stride launch over n work items. */
static nb_status tk_launch(nb_tape *t, int id, const tk_args *a, int64_t n) {
    nb_jit_kernel *k;
    nb_status s = tk_kernel(t, id, &k);
    return s ? s : nb_jit_launch_cuda(k, a, sizeof *a, n, nb_device_stream(t->dev));
}

static nb_status tk_launch_grid(nb_tape *t, int id, const tk_args *a, unsigned gx, unsigned gy,
                                unsigned gz, unsigned bx, unsigned by) {
    nb_jit_kernel *k;
    nb_status s = tk_kernel(t, id, &k);
    if (s) return s;
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, 1};
    return nb_jit_launch_cuda_grid(k, a, sizeof *a, grid, block, nb_device_stream(t->dev));
}

static int al16(const void *p) { return p == NULL || ((uintptr_t)p & 15u) == 0; }

/* bit when value v is stored as bf16 (0 for f32 values and NB_TVAR_NONE) */
static int32_t bfbit(const nb_tape *t, nb_tvar v, int32_t bit) {
    return v >= 0 && t->vals[v].dtype == NB_BF16 ? bit : 0;
}

/* Work items of an EW kernel: float4 chunks plus the scalar tail (or all scalars). */
static int64_t ew_items(const tk_args *a) {
    return a->v4 ? a->n / 4 + a->n % 4 : a->n;
}

static nb_status tk_ew(nb_tape *t, int id, tk_args *a) {
    a->v4 = al16(a->a) && al16(a->b) && al16(a->y) && al16(a->y2);
    return tk_launch(t, id, a, ew_items(a));
}

static nb_status tk_check_count(const char *op, int64_t n) {
    if (n >= ((int64_t)1 << 31))
        return nb_error(NB_ERR_UNSUPPORTED, "tape (CUDA): %s on %lld elements (>= 2^31)", op,
                        (long long)n);
    return NB_OK;
}

/* The timestep embedding's parameter block (struct TE of the kernels). */
typedef struct tk_temb_args {
    float *y;
    const float *tsp;
    int32_t n, dim;
    double lmp;
    float ts[NB_TAPE_TEMB_MAX];
} tk_temb_args;

nb_status nb_tape_cuda_timestep_embedding(nb_tape *t, float *y, int64_t n, const float *timesteps,
                                          int dim, float max_period) {
    if (n > NB_TAPE_TEMB_MAX || n * dim >= ((int64_t)1 << 31))
        return nb_error(NB_ERR_INTERNAL, "tape (CUDA): timestep embedding of %lld x %d", (long long)n,
                        dim);
    tk_temb_args a;
    memset(&a, 0, sizeof a);
    a.y = y;
    a.n = (int32_t)n;
    a.dim = dim;
    a.lmp = log((double)max_period);
    if (t->temb_dev) a.tsp = t->temb_dev; /* nb_tape_set_device_timesteps */
    else memcpy(a.ts, timesteps, (size_t)n * sizeof(float));
    nb_jit_kernel *k;
    nb_status s = tk_kernel(t, NB_TK_TEMB, &k);
    return s ? s : nb_jit_launch_cuda(k, &a, sizeof a, n * dim, nb_device_stream(t->dev));
}

nb_status nb_tape_cuda_add_scalar(nb_tape *t, float *p, float v) {
    tk_args a = {.y = p, .n = 1, .f = v};
    return tk_launch(t, NB_TK_ADD_SCALAR, &a, 1);
}

/* ---- SiLU ----------------------------------------------------------------------------------- */

static nb_status silu_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    nb_status s = tk_check_count("silu", x->count);
    if (s) return s;
    tk_args a = {.a = x->data, .y = VAL(t, op->out)->data, .n = (int32_t)x->count,
                 .dt = bfbit(t, op->in[0], TK_A) | bfbit(t, op->out, TK_Y)};
    return tk_ew(t, NB_TK_SILU_FWD, &a);
}

static nb_status silu_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    float *dx;
    int ow;
    nb_status s = nb_tape_grad_buf_w(t, op->in[0], &dx, &ow);
    if (s || !dx) return s;
    tk_args a = {.a = x->data, .b = VAL(t, op->out)->grad, .y = dx, .n = (int32_t)x->count, .ow = ow,
                 .dt = bfbit(t, op->in[0], TK_A | TK_Y) | bfbit(t, op->out, TK_B)};
    return tk_ew(t, NB_TK_SILU_BWD, &a);
}

const nb_top_cuda_impl nb_top_silu_cuda = {silu_fwd, silu_bwd, NB_TOPF_IN_BF16 | NB_TOPF_OUT_BF16};

/* ---- add (backward: dy into both inputs' gradients), reshape (a view) ----------------------- */

static nb_status add_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    nb_status s = tk_check_count("add", x->count);
    if (s) return s;
    tk_args a = {.a = x->data, .b = VAL(t, op->in[1])->data, .y = VAL(t, op->out)->data,
                 .n = (int32_t)x->count,
                 .dt = bfbit(t, op->in[0], TK_A) | bfbit(t, op->in[1], TK_B) | bfbit(t, op->out, TK_Y)};
    return tk_ew(t, NB_TK_ADD_FWD, &a);
}

/* Gradients of both inputs += the output's gradient. */
static nb_status add_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *o = VAL(t, op->out);
    float *d0 = NULL, *d1 = NULL;
    int w0 = 0, w1 = 0; /* add(x, x): the first stores, the second adds (in order, per thread) */
    nb_status s = nb_tape_grad_buf_w(t, op->in[0], &d0, &w0);
    if (!s) s = nb_tape_grad_buf_w(t, op->in[1], &d1, &w1);
    if (s || (!d0 && !d1)) return s;
    tk_args a = {.a = o->grad, .y = d0, .y2 = d1, .n = (int32_t)o->count, .ow = w0 | w1 << 1,
                 .dt = bfbit(t, op->out, TK_A) | bfbit(t, op->in[0], TK_Y) | bfbit(t, op->in[1], TK_Y2)};
    return tk_ew(t, NB_TK_ACC, &a);
}

const nb_top_cuda_impl nb_top_add_cuda = {add_fwd, add_bwd, NB_TOPF_IN_BF16 | NB_TOPF_OUT_BF16};

/* Reshape on CUDA is a view: the output shares the input's data (values are never written after
 * their op) and, through alias1, its gradient buffer, so neither direction runs a kernel. (The
 * arena slot carved for the output's own data stays unused.) */
static nb_status reshape_fwd(nb_tape *t, nb_top *op) {
    nb_tval *o = VAL(t, op->out);
    o->data = VAL(t, op->in[0])->data;
    o->alias1 = op->in[0] + 1;
    return NB_OK;
}

static nb_status reshape_bwd(nb_tape *t, const nb_top *op) {
    (void)t, (void)op; /* the gradient already landed in the input's buffer */
    return NB_OK;
}

const nb_top_cuda_impl nb_top_reshape_cuda = {reshape_fwd, reshape_bwd,
                                               NB_TOPF_IN_BF16 | NB_TOPF_OUT_LIKE_IN};

/* ---- per-channel add: x [N,C,H,W] + c [N,C] ------------------------------------------------- */

static nb_status addc_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    nb_status s = tk_check_count("add_channel", x->count);
    if (s) return s;
    int64_t HW = x->shape[2] * x->shape[3];
    tk_args a = {.a = x->data, .b = VAL(t, op->in[1])->data, .y = VAL(t, op->out)->data,
                 .n = (int32_t)x->count, .d0 = (int32_t)HW,
                 .dt = bfbit(t, op->in[0], TK_A) | bfbit(t, op->in[1], TK_B) | bfbit(t, op->out, TK_Y)};
    a.v4 = HW % 4 == 0 && al16(a.a) && al16(a.y);
    return tk_launch(t, NB_TK_ADDC_FWD, &a, ew_items(&a));
}

static nb_status addc_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    float *dx, *dc;
    int wx, wc;
    nb_status s;
    if ((s = nb_tape_grad_buf_w(t, op->in[0], &dx, &wx)) ||
        (s = nb_tape_grad_buf_w(t, op->in[1], &dc, &wc)))
        return s;
    if (!dx && !dc) return NB_OK;
    int64_t NC = x->shape[0] * x->shape[1], HW = x->shape[2] * x->shape[3];
    tk_args a = {.a = VAL(t, op->out)->grad, .y = dx, .y2 = dc, .n = (int32_t)x->count,
                 .d0 = (int32_t)HW, .d1 = (int32_t)NC, .ow = wx | wc << 1,
                 .dt = bfbit(t, op->out, TK_A) | bfbit(t, op->in[0], TK_Y) | bfbit(t, op->in[1], TK_Y2)};
    a.v4 = al16(a.a) && al16(a.y);
    return tk_launch(t, NB_TK_ADDC_BWD, &a, NC * 32); /* a warp per row */
}

const nb_top_cuda_impl nb_top_add_channel_cuda = {addc_fwd, addc_bwd,
                                                   NB_TOPF_IN_BF16 | NB_TOPF_OUT_BF16};

/* ---- channel concat ------------------------------------------------------------------------- */

static nb_status concat_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *A = VAL(t, op->in[0]), *B = VAL(t, op->in[1]), *o = VAL(t, op->out);
    nb_status s = tk_check_count("concat", o->count);
    if (s) return s;
    int64_t N = A->shape[0];
    tk_args a = {.a = A->data, .b = B->data, .y = o->data, .n = (int32_t)o->count,
                 .d0 = (int32_t)(A->count / N), .d1 = (int32_t)(B->count / N),
                 .dt = bfbit(t, op->in[0], TK_A) | bfbit(t, op->in[1], TK_B) | bfbit(t, op->out, TK_Y)};
    a.v4 = a.d0 % 4 == 0 && a.d1 % 4 == 0 && al16(a.a) && al16(a.b) && al16(a.y);
    return tk_launch(t, NB_TK_CONCAT_FWD, &a, ew_items(&a));
}

static nb_status concat_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *A = VAL(t, op->in[0]), *B = VAL(t, op->in[1]), *o = VAL(t, op->out);
    float *da, *db;
    int wa, wb;
    nb_status s;
    if ((s = nb_tape_grad_buf_w(t, op->in[0], &da, &wa)) ||
        (s = nb_tape_grad_buf_w(t, op->in[1], &db, &wb)))
        return s;
    if (!da && !db) return NB_OK;
    int64_t N = A->shape[0];
    tk_args a = {.a = o->grad, .y = da, .y2 = db, .n = (int32_t)o->count,
                 .d0 = (int32_t)(A->count / N), .d1 = (int32_t)(B->count / N), .ow = wa | wb << 1,
                 .dt = bfbit(t, op->out, TK_A) | bfbit(t, op->in[0], TK_Y) | bfbit(t, op->in[1], TK_Y2)};
    a.v4 = a.d0 % 4 == 0 && a.d1 % 4 == 0 && al16(a.a) && al16(a.y) && al16(a.y2);
    if (da && da == db) {
        /* concat(x, x): both halves land on the same gradient; two passes avoid a race */
        a.y2 = NULL;
        if ((s = tk_launch(t, NB_TK_CONCAT_BWD, &a, ew_items(&a)))) return s;
        a.y = NULL;
        a.y2 = db;
    }
    return tk_launch(t, NB_TK_CONCAT_BWD, &a, ew_items(&a));
}

const nb_top_cuda_impl nb_top_concat_cuda = {concat_fwd, concat_bwd,
                                              NB_TOPF_IN_BF16 | NB_TOPF_OUT_BF16};

/* ---- nearest upsample ×2, average pool 2×2 (float2 accesses: W of the larger side is even) -- */

static nb_status up_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    nb_status s = tk_check_count("upsample2x", 4 * x->count);
    if (s) return s;
    tk_args a = {.a = x->data, .y = VAL(t, op->out)->data, .n = (int32_t)x->count,
                 .d0 = (int32_t)x->shape[2], .d1 = (int32_t)x->shape[3],
                 .dt = bfbit(t, op->in[0], TK_A) | bfbit(t, op->out, TK_Y)};
    return tk_launch(t, NB_TK_UP_FWD, &a, a.n);
}

static nb_status up_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    float *dx;
    int ow;
    nb_status s = nb_tape_grad_buf_w(t, op->in[0], &dx, &ow);
    if (s || !dx) return s;
    tk_args a = {.a = VAL(t, op->out)->grad, .y = dx, .n = (int32_t)x->count,
                 .d0 = (int32_t)x->shape[2], .d1 = (int32_t)x->shape[3], .ow = ow,
                 .dt = bfbit(t, op->out, TK_A) | bfbit(t, op->in[0], TK_Y)};
    return tk_launch(t, NB_TK_UP_BWD, &a, a.n);
}

const nb_top_cuda_impl nb_top_upsample_cuda = {up_fwd, up_bwd, NB_TOPF_IN_BF16 | NB_TOPF_OUT_BF16};

static nb_status pool_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]), *o = VAL(t, op->out);
    nb_status s = tk_check_count("avgpool2x", x->count);
    if (s) return s;
    tk_args a = {.a = x->data, .y = o->data, .n = (int32_t)o->count, .d0 = (int32_t)x->shape[2],
                 .d1 = (int32_t)x->shape[3],
                 .dt = bfbit(t, op->in[0], TK_A) | bfbit(t, op->out, TK_Y)};
    return tk_launch(t, NB_TK_POOL_FWD, &a, a.n);
}

static nb_status pool_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]), *o = VAL(t, op->out);
    float *dx;
    int ow;
    nb_status s = nb_tape_grad_buf_w(t, op->in[0], &dx, &ow);
    if (s || !dx) return s;
    tk_args a = {.a = o->grad, .y = dx, .n = (int32_t)o->count, .d0 = (int32_t)x->shape[2],
                 .d1 = (int32_t)x->shape[3], .ow = ow,
                 .dt = bfbit(t, op->out, TK_A) | bfbit(t, op->in[0], TK_Y)};
    return tk_launch(t, NB_TK_POOL_BWD, &a, a.n);
}

const nb_top_cuda_impl nb_top_avgpool_cuda = {pool_fwd, pool_bwd, NB_TOPF_IN_BF16 | NB_TOPF_OUT_BF16};

/* ---- MSE: deterministic two-pass reduction (block partials in double, then one block) ------- */

static nb_status mse_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *p = VAL(t, op->in[0]), *q = VAL(t, op->in[1]);
    nb_status s = tk_check_count("mse", p->count);
    if (s) return s;
    tk_args a = {.a = p->data, .b = q->data, .n = (int32_t)p->count,
                 .dt = bfbit(t, op->in[0], TK_A) | bfbit(t, op->in[1], TK_B)};
    a.v4 = al16(a.a) && al16(a.b);
    int64_t items = ew_items(&a), blocks = (items + 255) / 256;
    if (blocks > 1024) blocks = 1024; /* fixed by n alone: the same sum order every run */
    double *part = (double *)nb_tape_alloc_f32(t, 2 * blocks, 0);
    if (!part) return NB_ERR_OUT_OF_MEMORY;
    a.y2 = (float *)part;
    if ((s = tk_launch_grid(t, NB_TK_MSE_PART, &a, (unsigned)blocks, 1, 1, 256, 1))) return s;
    tk_args f = {.c = (const float *)part, .y = VAL(t, op->out)->data, .n = (int32_t)p->count,
                 .d0 = (int32_t)blocks};
    return tk_launch_grid(t, NB_TK_MSE_FIN, &f, 1, 1, 1, 256, 1);
}

static nb_status mse_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *p = VAL(t, op->in[0]), *q = VAL(t, op->in[1]);
    float *dp, *dq;
    int wp, wq;
    nb_status s;
    if ((s = nb_tape_grad_buf_w(t, op->in[0], &dp, &wp)) ||
        (s = nb_tape_grad_buf_w(t, op->in[1], &dq, &wq)))
        return s;
    if (!dp && !dq) return NB_OK;
    tk_args a = {.a = p->data, .b = q->data, .c = VAL(t, op->out)->grad, .y = dp, .y2 = dq,
                 .n = (int32_t)p->count, .ow = wp | wq << 1,
                 .dt = bfbit(t, op->in[0], TK_A | TK_Y) | bfbit(t, op->in[1], TK_B | TK_Y2)};
    return tk_ew(t, NB_TK_MSE_BWD, &a);
}

/* IN_BF16 only: the loss [1] stays f32 (so does its gradient, read by tk_mse_bwd as c[0]) */
const nb_top_cuda_impl nb_top_mse_cuda = {mse_fwd, mse_bwd, NB_TOPF_IN_BF16};

/* ---- transpose of the last two dims (32×32 shared-memory tiles) ----------------------------- */

static nb_status tr_run(nb_tape *t, const float *src, float *dst, int64_t B, int64_t R, int64_t C,
                        int ow, int32_t dt) {
    if (B > 65535)
        return nb_error(NB_ERR_UNSUPPORTED, "tape (CUDA): transpose over %lld matrices (> 65535)",
                        (long long)B);
    tk_args a = {.a = src, .y = dst, .d0 = (int32_t)R, .d1 = (int32_t)C, .ow = ow, .dt = dt};
    return tk_launch_grid(t, NB_TK_TR, &a, (unsigned)((C + 31) / 32), (unsigned)((R + 31) / 32),
                          (unsigned)B, 32, 8);
}

static nb_status transpose_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    nb_status s = tk_check_count("transpose", x->count);
    if (s) return s;
    int64_t R = x->shape[x->ndim - 2], C = x->shape[x->ndim - 1];
    return tr_run(t, x->data, VAL(t, op->out)->data, x->count / (R * C), R, C, 1,
                  bfbit(t, op->in[0], TK_A) | bfbit(t, op->out, TK_Y));
}

static nb_status transpose_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    float *dx;
    int ow;
    nb_status s = nb_tape_grad_buf_w(t, op->in[0], &dx, &ow);
    if (s || !dx) return s;
    int64_t R = x->shape[x->ndim - 2], C = x->shape[x->ndim - 1];
    /* dy is [B, C, R]: transposing it back gives [B, R, C], stored or accumulated into dx */
    return tr_run(t, VAL(t, op->out)->grad, dx, x->count / (R * C), C, R, ow,
                  bfbit(t, op->out, TK_A) | bfbit(t, op->in[0], TK_Y));
}

const nb_top_cuda_impl nb_top_transpose_cuda = {transpose_fwd, transpose_bwd,
                                                 NB_TOPF_IN_BF16 | NB_TOPF_OUT_BF16};

/* ---- channel slice -------------------------------------------------------------------------- */

static void slice_args(nb_tape *t, const nb_top *op, tk_args *a) {
    const nb_tval *x = VAL(t, op->in[0]), *o = VAL(t, op->out);
    int64_t N = x->shape[0], S = x->count / (N * x->shape[1]);
    memset(a, 0, sizeof *a);
    a->n = (int32_t)o->count;
    a->d0 = (int32_t)(o->count / N);
    a->d1 = (int32_t)(x->count / N);
    a->d2 = (int32_t)(op->ip[0] * S);
}

static nb_status slice_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    nb_status s = tk_check_count("slice_channels", x->count);
    if (s) return s;
    tk_args a;
    slice_args(t, op, &a);
    a.a = x->data;
    a.y = VAL(t, op->out)->data;
    a.dt = bfbit(t, op->in[0], TK_A) | bfbit(t, op->out, TK_Y);
    a.v4 = a.d0 % 4 == 0 && a.d1 % 4 == 0 && a.d2 % 4 == 0 && al16(a.a) && al16(a.y);
    return tk_launch(t, NB_TK_SLICE_FWD, &a, ew_items(&a));
}

static nb_status slice_bwd(nb_tape *t, const nb_top *op) {
    float *dx;
    nb_status s = nb_tape_grad_buf(t, op->in[0], &dx);
    if (s || !dx) return s;
    tk_args a;
    slice_args(t, op, &a);
    a.a = VAL(t, op->out)->grad;
    a.y = dx;
    a.dt = bfbit(t, op->out, TK_A) | bfbit(t, op->in[0], TK_Y);
    a.v4 = a.d0 % 4 == 0 && a.d1 % 4 == 0 && a.d2 % 4 == 0 && al16(a.a) && al16(a.y);
    return tk_launch(t, NB_TK_SLICE_BWD, &a, ew_items(&a));
}

const nb_top_cuda_impl nb_top_slice_cuda = {slice_fwd, slice_bwd, NB_TOPF_IN_BF16 | NB_TOPF_OUT_BF16};

const char *nb_tape_cuda_source(int which) { return which == 0 ? tk_src : nb_tape_cuda_norm_source(); }

// The tape's elementwise, broadcast, shape and loss kernels (src/graph/tape_cuda_basic.c;
// struct A mirrors its tk_args, the entries are its tk_entry table): add/silu/concat/upsample/
// pool/MSE/transpose/slice/timestep embedding, each in f32 and mixed f32/bf16 storage. (SiLU's
// forward is lib/nn_ops.nb's nn_silu: tape_nbrows.c.)
#include "graph/kernels/bf16.cuh"
/* ow: bit 0 = store into y instead of adding, bit 1 = the same for y2 (a fresh gradient);
 * dt: storage of a, b, c, y, y2 (bits 0..4; set = bf16, clear = f32) */
struct A { const float *a, *b, *c; float *y, *y2; int n, d0, d1, d2; int v4, ow; float f; int dt; };
#define TID (blockIdx.x * blockDim.x + threadIdx.x)
#define STRIDE (gridDim.x * blockDim.x)
/* EW4: 4-element chunks [0, n/4); EW1: then the scalar tail (v4 == 0: all scalar) */
#define EW4(N) unsigned n4_ = p.v4 ? (unsigned)(N) / 4u : 0u; \
    for (unsigned i = TID; i < n4_; i += STRIDE)
#define EW1(N) for (unsigned i = n4_ * 4u + TID; i < (unsigned)(N); i += STRIDE)
/* Kernel bodies are templates on BF: 0 = every buffer f32 (the f32 code: the dtype tests below
 * fold to 0), 1 = each buffer in the dtype its dt bit names. The entry points take BF = 1 when
 * any dt bit is set (a uniform branch at the top). Buffers are indexed by element (not by
 * pointer arithmetic on float *, which would be wrong for bf16). */
#define FA (BF && (p.dt & 1))
#define FB (BF && (p.dt & 2))
#define FC (BF && (p.dt & 4))
#define FY (BF && (p.dt & 8))
#define FY2 (BF && (p.dt & 16))
#define ENTRY(name) extern "C" __global__ void name(const A p) { \
    if (p.dt) name##_t<1>(p); else name##_t<0>(p); }
__device__ __forceinline__ float dsilu(float v) {
    float s = 1.0f / (1.0f + __expf(-v)); return s * (1.0f + v * (1.0f - s)); }
__device__ __forceinline__ float4 add4(float4 a, float4 b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }
/* elements i, i + 1 (i even): float2 / one 32-bit pair of bf16 */
__device__ __forceinline__ float2 ld2(const void *p, long long i, int bf) {
    if (!bf) return *(const float2 *)((const float *)p + i);
    unsigned u = *(const unsigned *)((const unsigned short *)p + i);
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u)); }
__device__ __forceinline__ void st2(void *p, long long i, int bf, float2 v) {
    if (!bf) *(float2 *)((float *)p + i) = v;
    else *(unsigned *)((unsigned short *)p + i) = nb_f2bf2(v.x, v.y); }
/* p[i .. i+3] / p[i] (+)= v: store when ow, else accumulate (bf: p is bf16) */
__device__ __forceinline__ void acc4(void *p, long long i, int bf, float4 v, bool ow) {
    nb_st4(p, i, bf, ow ? v : add4(nb_ld4(p, i, bf), v)); }
__device__ __forceinline__ void acc1(void *p, long long i, int bf, float v, bool ow) {
    nb_st(p, i, bf, ow ? v : nb_ld(p, i, bf) + v); }
#define OW0 (p.ow & 1)
#define OW1 (p.ow & 2)
extern "C" __global__ void tk_add_scalar(const A p) {
    if (TID == 0) p.y[0] += p.f; }
/* y += b * silu'(a) */
template <int BF> __device__ __forceinline__ void tk_silu_bwd_t(const A &p) {
    EW4(p.n) {
        float4 v = nb_ld4(p.a, 4u * i, FA), g = nb_ld4(p.b, 4u * i, FB);
        acc4(p.y, 4u * i, FY, make_float4(g.x * dsilu(v.x), g.y * dsilu(v.y), g.z * dsilu(v.z), g.w * dsilu(v.w)), OW0);
    }
    EW1(p.n) acc1(p.y, i, FY, nb_ld(p.b, i, FB) * dsilu(nb_ld(p.a, i, FA)), OW0); }
ENTRY(tk_silu_bwd)
/* y = a + b */
template <int BF> __device__ __forceinline__ void tk_add_fwd_t(const A &p) {
    EW4(p.n) nb_st4(p.y, 4u * i, FY, add4(nb_ld4(p.a, 4u * i, FA), nb_ld4(p.b, 4u * i, FB)));
    EW1(p.n) nb_st(p.y, i, FY, nb_ld(p.a, i, FA) + nb_ld(p.b, i, FB)); }
ENTRY(tk_add_fwd)
/* y += a; y2 += a (each may be NULL; the same pointer twice adds twice, in order) */
template <int BF> __device__ __forceinline__ void tk_acc_t(const A &p) {
    EW4(p.n) {
        float4 g = nb_ld4(p.a, 4u * i, FA);
        if (p.y) acc4(p.y, 4u * i, FY, g, OW0);
        if (p.y2) acc4(p.y2, 4u * i, FY2, g, OW1);
    }
    EW1(p.n) { float g = nb_ld(p.a, i, FA); if (p.y) acc1(p.y, i, FY, g, OW0); if (p.y2) acc1(p.y2, i, FY2, g, OW1); } }
ENTRY(tk_acc)
/* y[i] = a[i] + b[i / HW], d0 = HW (v4 only when HW % 4 == 0) */
template <int BF> __device__ __forceinline__ void tk_addc_fwd_t(const A &p) {
    EW4(p.n) {
        float c = nb_ld(p.b, (4u * i) / (unsigned)p.d0, FB); float4 v = nb_ld4(p.a, 4u * i, FA);
        nb_st4(p.y, 4u * i, FY, make_float4(v.x + c, v.y + c, v.z + c, v.w + c));
    }
    EW1(p.n) nb_st(p.y, i, FY, nb_ld(p.a, i, FA) + nb_ld(p.b, i / (unsigned)p.d0, FB)); }
ENTRY(tk_addc_fwd)
/* a warp per row r of d1 rows of HW = d0 elements: y2[r] += sum_j a[r, j]; y[r, j] += a[r, j] */
template <int BF> __device__ __forceinline__ void tk_addc_bwd_t(const A &p) {
    unsigned lane = threadIdx.x & 31u, warp = TID >> 5, nw = STRIDE >> 5;
    unsigned HW = (unsigned)p.d0;
    for (unsigned r = warp; r < (unsigned)p.d1; r += nw) {
        size_t o = (size_t)r * HW;
        float s = 0.0f;
        if (p.v4 && HW % 4u == 0u) {
            for (unsigned j = lane; j < HW / 4u; j += 32u) {
                float4 v = nb_ld4(p.a, o + 4u * j, FA); s += (v.x + v.y) + (v.z + v.w);
                if (p.y) acc4(p.y, o + 4u * j, FY, v, OW0);
            }
        } else {
            for (unsigned j = lane; j < HW; j += 32u) { float v = nb_ld(p.a, o + j, FA); s += v; if (p.y) acc1(p.y, o + j, FY, v, OW0); }
        }
        for (int k = 16; k > 0; k >>= 1) s += __shfl_xor_sync(0xffffffffu, s, k);
        if (lane == 0 && p.y2) acc1(p.y2, r, FY2, s, OW1);
    } }
/* (at most 40 registers, as the f32 code alone: 6 blocks of 256 per SM) */
extern "C" __global__ void __launch_bounds__(256, 6) tk_addc_bwd(const A p) {
    if (p.dt) tk_addc_bwd_t<1>(p); else tk_addc_bwd_t<0>(p); }
/* concat: d0 = sa, d1 = sb elements per sample; y [N, sa + sb] */
template <int BF> __device__ __forceinline__ void tk_concat_fwd_t(const A &p) {
    unsigned sa = (unsigned)p.d0, sb = (unsigned)p.d1, so = sa + sb;
    EW4(p.n) {
        unsigned e = 4u * i, n = e / so, r = e - n * so;
        nb_st4(p.y, e, FY, r < sa ? nb_ld4(p.a, n * sa + r, FA) : nb_ld4(p.b, n * sb + r - sa, FB));
    }
    EW1(p.n) { unsigned n = i / so, r = i - n * so;
        nb_st(p.y, i, FY, r < sa ? nb_ld(p.a, n * sa + r, FA) : nb_ld(p.b, n * sb + r - sa, FB)); } }
ENTRY(tk_concat_fwd)
/* concat backward: a = dy; y += dy[:, :sa], y2 += dy[:, sa:] (NULL: skipped) */
template <int BF> __device__ __forceinline__ void tk_concat_bwd_t(const A &p) {
    unsigned sa = (unsigned)p.d0, sb = (unsigned)p.d1, so = sa + sb;
    EW4(p.n) {
        unsigned e = 4u * i, n = e / so, r = e - n * so;
        if (r < sa) { if (p.y) acc4(p.y, n * sa + r, FY, nb_ld4(p.a, e, FA), OW0); }
        else if (p.y2) acc4(p.y2, n * sb + r - sa, FY2, nb_ld4(p.a, e, FA), OW1);
    }
    EW1(p.n) {
        unsigned n = i / so, r = i - n * so;
        if (r < sa) { if (p.y) acc1(p.y, n * sa + r, FY, nb_ld(p.a, i, FA), OW0); }
        else if (p.y2) acc1(p.y2, n * sb + r - sa, FY2, nb_ld(p.a, i, FA), OW1);
    } }
ENTRY(tk_concat_bwd)
/* nearest ×2 upsample: thread per input element, d0 = H, d1 = W */
template <int BF> __device__ __forceinline__ void tk_up_fwd_t(const A &p) {
    unsigned H = (unsigned)p.d0, W = (unsigned)p.d1, HW = H * W;
    for (unsigned i = TID; i < (unsigned)p.n; i += STRIDE) {
        unsigned q = i / HW, rem = i - q * HW, r = rem / W, c = rem - r * W;
        float v = nb_ld(p.a, i, FA); float2 v2 = make_float2(v, v);
        size_t o = ((size_t)q * 2u * H + 2u * r) * 2u * W + 2u * c;
        st2(p.y, o, FY, v2); st2(p.y, o + 2u * W, FY, v2);
    } }
ENTRY(tk_up_fwd)
template <int BF> __device__ __forceinline__ void tk_up_bwd_t(const A &p) {
    unsigned H = (unsigned)p.d0, W = (unsigned)p.d1, HW = H * W;
    for (unsigned i = TID; i < (unsigned)p.n; i += STRIDE) {
        unsigned q = i / HW, rem = i - q * HW, r = rem / W, c = rem - r * W;
        size_t o = ((size_t)q * 2u * H + 2u * r) * 2u * W + 2u * c;
        float2 u = ld2(p.a, o, FA), l = ld2(p.a, o + 2u * W, FA);
        acc1(p.y, i, FY, (u.x + u.y) + (l.x + l.y), OW0);
    } }
ENTRY(tk_up_bwd)
/* 2×2 average pool: thread per output element, d0 = H, d1 = W (input) */
template <int BF> __device__ __forceinline__ void tk_pool_fwd_t(const A &p) {
    unsigned H = (unsigned)p.d0, W = (unsigned)p.d1, oh = H / 2u, ow = W / 2u, ohw = oh * ow;
    for (unsigned i = TID; i < (unsigned)p.n; i += STRIDE) {
        unsigned q = i / ohw, rem = i - q * ohw, r = rem / ow, c = rem - r * ow;
        size_t o = ((size_t)q * H + 2u * r) * W + 2u * c;
        float2 u = ld2(p.a, o, FA), l = ld2(p.a, o + W, FA);
        nb_st(p.y, i, FY, 0.25f * ((u.x + u.y) + (l.x + l.y)));
    } }
ENTRY(tk_pool_fwd)
template <int BF> __device__ __forceinline__ void tk_pool_bwd_t(const A &p) {
    unsigned H = (unsigned)p.d0, W = (unsigned)p.d1, oh = H / 2u, ow = W / 2u, ohw = oh * ow;
    for (unsigned i = TID; i < (unsigned)p.n; i += STRIDE) {
        unsigned q = i / ohw, rem = i - q * ohw, r = rem / ow, c = rem - r * ow;
        size_t o = ((size_t)q * H + 2u * r) * W + 2u * c; float g = 0.25f * nb_ld(p.a, i, FA);
        float2 u = make_float2(g, g), l = u;
        if (!OW0) {
            float2 a = ld2(p.y, o, FY), b = ld2(p.y, o + W, FY);
            u.x += a.x; u.y += a.y; l.x += b.x; l.y += b.y;
        }
        st2(p.y, o, FY, u); st2(p.y, o + W, FY, l);
    } }
ENTRY(tk_pool_bwd)
/* block-wide sum (result in thread 0) */
__device__ double block_sum(double v) {
    __shared__ double sh[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31u) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    double r = 0.0;
    if (threadIdx.x == 0) for (unsigned w = 0; w < (blockDim.x + 31u) / 32u; w++) r += sh[w];
    return r; }
/* MSE: per-block partial sums of (a - b)^2 (double) into y2 as double[gridDim.x] */
template <int BF> __device__ __forceinline__ void tk_mse_part_t(const A &p) {
    double s = 0.0;
    EW4(p.n) {
        float4 u = nb_ld4(p.a, 4u * i, FA), v = nb_ld4(p.b, 4u * i, FB);
        float e0 = u.x - v.x, e1 = u.y - v.y, e2 = u.z - v.z, e3 = u.w - v.w;
        s += (double)(e0 * e0 + e1 * e1) + (double)(e2 * e2 + e3 * e3);
    }
    EW1(p.n) { float d = nb_ld(p.a, i, FA) - nb_ld(p.b, i, FB); s += (double)(d * d); }
    double r = block_sum(s);
    if (threadIdx.x == 0) ((double *)p.y2)[blockIdx.x] = r; }
ENTRY(tk_mse_part)
/* y[0] = sum of the d0 partials in c / n (one block; fixed order; all f32 / double) */
extern "C" __global__ void tk_mse_fin(const A p) {
    double s = 0.0;
    for (unsigned i = threadIdx.x; i < (unsigned)p.d0; i += blockDim.x) s += ((const double *)p.c)[i];
    double r = block_sum(s);
    if (threadIdx.x == 0) p.y[0] = (float)(r / (double)p.n); }
/* dp (y) += g (a - b), dq (y2) -= g (a - b), g = 2 c[0] / n (c: the f32 loss gradient) */
template <int BF> __device__ __forceinline__ void tk_mse_bwd_t(const A &p) {
    float g = 2.0f * p.c[0] / (float)p.n;
    EW4(p.n) {
        float4 u = nb_ld4(p.a, 4u * i, FA), v = nb_ld4(p.b, 4u * i, FB);
        float4 d = make_float4(g * (u.x - v.x), g * (u.y - v.y), g * (u.z - v.z), g * (u.w - v.w));
        if (p.y) acc4(p.y, 4u * i, FY, d, OW0);
        if (p.y2) acc4(p.y2, 4u * i, FY2, make_float4(-d.x, -d.y, -d.z, -d.w), OW1);
    }
    EW1(p.n) { float d = g * (nb_ld(p.a, i, FA) - nb_ld(p.b, i, FB));
        if (p.y) acc1(p.y, i, FY, d, OW0); if (p.y2) acc1(p.y2, i, FY2, -d, OW1); } }
ENTRY(tk_mse_bwd)
/* batched transpose a [B, R, C] -> y [B, C, R] (d0 = R, d1 = C), 32×32 tiles, blocks (32, 8);
 * ow bit 0: store (else accumulate into y) */
template <int BF> __device__ __forceinline__ void tk_transpose_t(const A &p, float (&tile)[32][33]) {
    unsigned R = (unsigned)p.d0, C = (unsigned)p.d1;
    size_t off = (size_t)blockIdx.z * R * C;
    unsigned c = blockIdx.x * 32u + threadIdx.x, r0 = blockIdx.y * 32u;
    for (unsigned k = threadIdx.y; k < 32u; k += 8u)
        if (c < C && r0 + k < R) tile[k][threadIdx.x] = nb_ld(p.a, off + (size_t)(r0 + k) * C + c, FA);
    __syncthreads();
    unsigned r = r0 + threadIdx.x, c0 = blockIdx.x * 32u;
    for (unsigned k = threadIdx.y; k < 32u; k += 8u)
        if (r < R && c0 + k < C) acc1(p.y, off + (size_t)(c0 + k) * R + r, FY, tile[threadIdx.x][k], OW0);
}
extern "C" __global__ void tk_transpose(const A p) {
    __shared__ float tile[32][33];
    if (p.dt) tk_transpose_t<1>(p, tile); else tk_transpose_t<0>(p, tile); }
/* channel slice: d0 = so (elements per sample out), d1 = sx (in), d2 = offset (c0 * S) */
template <int BF> __device__ __forceinline__ void tk_slice_fwd_t(const A &p) {
    unsigned so = (unsigned)p.d0, sx = (unsigned)p.d1, off = (unsigned)p.d2;
    EW4(p.n) { unsigned e = 4u * i, n = e / so, r = e - n * so; nb_st4(p.y, e, FY, nb_ld4(p.a, n * sx + off + r, FA)); }
    EW1(p.n) { unsigned n = i / so, r = i - n * so; nb_st(p.y, i, FY, nb_ld(p.a, n * sx + off + r, FA)); } }
ENTRY(tk_slice_fwd)
template <int BF> __device__ __forceinline__ void tk_slice_bwd_t(const A &p) {
    unsigned so = (unsigned)p.d0, sx = (unsigned)p.d1, off = (unsigned)p.d2;
    EW4(p.n) { unsigned e = 4u * i, n = e / so, r = e - n * so; acc4(p.y, n * sx + off + r, FY, nb_ld4(p.a, e, FA), false); }
    EW1(p.n) { unsigned n = i / so, r = i - n * so; acc1(p.y, n * sx + off + r, FY, nb_ld(p.a, i, FA), false); } }
ENTRY(tk_slice_bwd)
/* sinusoidal timestep embedding (f32), thread per output element of y [n, dim]: the timesteps
 * travel in the parameter block (no host -> device copy); double math as on the CPU
 * (or, with tsp, from device memory: what a captured graph replays with new values) */
struct TE { float *y; const float *tsp; int n, dim; double lmp; float ts[512]; };
extern "C" __global__ void tk_temb(const TE p) {
    unsigned half = (unsigned)p.dim / 2u;
    for (unsigned i = TID; i < (unsigned)(p.n * p.dim); i += STRIDE) {
        unsigned r = i / (unsigned)p.dim, j = i - r * (unsigned)p.dim, k = j < half ? j : j - half;
        double f = exp(-p.lmp * (double)k / (double)half), a = (double)(p.tsp ? p.tsp[r] : p.ts[r]) * f;
        p.y[i] = (float)(j < half ? cos(a) : sin(a));
    } }
/* ---- ReLU and the row softmax (ops.def RELU, SOFTMAX; CPU reference: tape_ops_act.c) ---- */
__device__ __forceinline__ float relu1(float v) { return v < 0.0f ? 0.0f : v; } /* NaN passes */
/* y = relu(a) */
template <int BF> __device__ __forceinline__ void tk_relu_fwd_t(const A &p) {
    EW4(p.n) { float4 v = nb_ld4(p.a, 4u * i, FA);
        nb_st4(p.y, 4u * i, FY, make_float4(relu1(v.x), relu1(v.y), relu1(v.z), relu1(v.w))); }
    EW1(p.n) nb_st(p.y, i, FY, relu1(nb_ld(p.a, i, FA))); }
ENTRY(tk_relu_fwd)
/* y += (a > 0 ? b : 0): a = the relu's input (or its output: the same mask), b = dy */
__device__ __forceinline__ float rmask(float a, float g) { return a > 0.0f ? g : 0.0f; }
template <int BF> __device__ __forceinline__ void tk_relu_bwd_t(const A &p) {
    EW4(p.n) {
        float4 v = nb_ld4(p.a, 4u * i, FA), g = nb_ld4(p.b, 4u * i, FB);
        acc4(p.y, 4u * i, FY, make_float4(rmask(v.x, g.x), rmask(v.y, g.y), rmask(v.z, g.z), rmask(v.w, g.w)), OW0);
    }
    EW1(p.n) acc1(p.y, i, FY, rmask(nb_ld(p.a, i, FA), nb_ld(p.b, i, FB)), OW0); }
ENTRY(tk_relu_bwd)
/* softmax over rows of d0 = D elements, d1 = rows; a warp per row (grid-stride over warps).
 * Forward: one pass keeps each lane's running max m and sum s of exp(x - m) (rescaled when m
 * grows), the warp merges them, a second pass writes y = exp(x - M) / S (-inf entries give 0). */
#define SM_NEG_INF __int_as_float(0xff800000u) /* -inf (NVRTC has no INFINITY) */
__device__ __forceinline__ void sm_merge(float &m, float &s, float m2, float s2) {
    float M = fmaxf(m, m2);
    if (M == SM_NEG_INF) { s = 0.0f; return; } /* both empty so far */
    s = (m == SM_NEG_INF ? 0.0f : s * expf(m - M)) + (m2 == SM_NEG_INF ? 0.0f : s2 * expf(m2 - M));
    m = M; }
template <int BF> __device__ __forceinline__ void tk_softmax_fwd_t(const A &p) {
    unsigned lane = threadIdx.x & 31u, warp = TID >> 5, nw = STRIDE >> 5, D = (unsigned)p.d0;
    for (unsigned r = warp; r < (unsigned)p.d1; r += nw) {
        size_t o = (size_t)r * D;
        float m = SM_NEG_INF, s = 0.0f;
        for (unsigned j = lane; j < D; j += 32u) sm_merge(m, s, nb_ld(p.a, o + j, FA), 1.0f);
        for (int k = 16; k > 0; k >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, m, k), s2 = __shfl_xor_sync(0xffffffffu, s, k);
            sm_merge(m, s, m2, s2);
        }
        /* lane 0's max and sum for the whole row (the butterfly's lanes sum in different orders) */
        m = __shfl_sync(0xffffffffu, m, 0), s = __shfl_sync(0xffffffffu, s, 0);
        float inv = 1.0f / s;
        for (unsigned j = lane; j < D; j += 32u) nb_st(p.y, o + j, FY, expf(nb_ld(p.a, o + j, FA) - m) * inv);
    } }
ENTRY(tk_softmax_fwd)
/* backward: a = y, b = dy; y (the gradient, p.y) (+)= y * (dy - sum_j dy_j y_j) per row */
template <int BF> __device__ __forceinline__ void tk_softmax_bwd_t(const A &p) {
    unsigned lane = threadIdx.x & 31u, warp = TID >> 5, nw = STRIDE >> 5, D = (unsigned)p.d0;
    for (unsigned r = warp; r < (unsigned)p.d1; r += nw) {
        size_t o = (size_t)r * D;
        float dot = 0.0f;
        for (unsigned j = lane; j < D; j += 32u) dot += nb_ld(p.a, o + j, FA) * nb_ld(p.b, o + j, FB);
        for (int k = 16; k > 0; k >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, k);
        dot = __shfl_sync(0xffffffffu, dot, 0); /* one value for the whole row */
        for (unsigned j = lane; j < D; j += 32u)
            acc1(p.y, o + j, FY, nb_ld(p.a, o + j, FA) * (nb_ld(p.b, o + j, FB) - dot), OW0);
    } }
ENTRY(tk_softmax_bwd)

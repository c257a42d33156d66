// Random (stratified) pixel samples of an image: positions and target colours for fitting
// (src/models/image.c; Args mirrors its host struct).
#include "nn/common/kernels/rng.cuh"
struct Args { const float *img; float *x, *target; long long n; int W, H, C; unsigned key; int strat_k, pad_; };
__device__ __forceinline__ unsigned compact1by1(unsigned x) {
    x &= 0x55555555u; x = (x ^ (x >> 1)) & 0x33333333u; x = (x ^ (x >> 2)) & 0x0f0f0f0fu;
    x = (x ^ (x >> 4)) & 0x00ff00ffu; return (x ^ (x >> 8)) & 0x0000ffffu;
}
extern "C" __global__ void nb_image_sample(const Args a) {
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < (unsigned)a.n; i += gridDim.x * blockDim.x) {
        float u = nb_uniform(a.key, 2u * i), v = nb_uniform(a.key, 2u * i + 1u);
        if (a.strat_k) {
            unsigned st = i & ((1u << (2 * a.strat_k)) - 1u);
            float sc = ldexpf(1.0f, -a.strat_k);
            u = ((float)compact1by1(st) + u) * sc; v = ((float)compact1by1(st >> 1) + v) * sc;
        }
        a.x[2 * (size_t)i] = u; a.x[2 * (size_t)i + 1] = v;
        float px = __fadd_rn(__fmul_rn(u, (float)a.W), -0.5f), py = __fadd_rn(__fmul_rn(v, (float)a.H), -0.5f);
        px = fminf(fmaxf(px, 0.0f), (float)(a.W - 1)); py = fminf(fmaxf(py, 0.0f), (float)(a.H - 1));
        float x0 = fminf(floorf(px), (float)(a.W - 2)), y0 = fminf(floorf(py), (float)(a.H - 2));
        float fx = px - x0, fy = py - y0;
        const float *p = a.img + ((size_t)y0 * a.W + (size_t)x0) * a.C;
        size_t row = (size_t)a.W * a.C;
        for (int c = 0; c < a.C; c++) {
            float top = p[c] + fx * (p[a.C + c] - p[c]);
            float bot = p[row + c] + fx * (p[row + a.C + c] - p[row + c]);
            a.target[(size_t)i * a.C + c] = top + fy * (bot - top);
        }
    }
}

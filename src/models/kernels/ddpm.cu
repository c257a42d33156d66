// DDPM training and sampling kernels (src/models/ddpm_kernels.c): q-sample, squared-norm
// reduction, gradient clipping, EMA, Gaussian noise, sampler update.
//
// QMAX (= NB_DDPM_QMAX): most timesteps one q-sample launch carries in its parameter block.
//! nvrtc-check: QMAX=256
#include "nn/common/kernels/rng.cuh"
__device__ __forceinline__ float nb_gauss(unsigned key, unsigned c) {
    float u1 = ((float)(nb_pcg((2u * c) ^ key) >> 8) + 0.5f) * (1.0f / 16777216.0f);
    float u2 = (float)(nb_pcg((2u * c + 1u) ^ key) >> 8) * (1.0f / 16777216.0f);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.283185307f * u2);
}
#define LOOP(n) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); \
                     i += (long long)gridDim.x * blockDim.x)
struct QArgs { const float *x0; float *eps, *xt; long long img, n; unsigned key, base;
               float a[QMAX], b[QMAX]; };
extern "C" __global__ void nb_ddpm_qsample(const QArgs q) {
    LOOP(q.n) {
        int s = (int)(i / q.img);
        float e = nb_gauss(q.key, q.base + (unsigned)i);
        q.eps[i] = e;
        q.xt[i] = __fadd_rn(__fmul_rn(q.a[s], q.x0[i]), __fmul_rn(q.b[s], e));
    }
}
struct SqArgs { const float *g; long long n; float *acc; };
extern "C" __global__ void nb_ddpm_sumsq(const SqArgs a) {
    float s = 0.0f;
    LOOP(a.n) { float v = a.g[i]; s += v * v; }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    __shared__ float part[32];
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
        if (threadIdx.x == 0) atomicAdd(a.acc, s);
    }
}
struct ClipArgs { float *g; long long n; float *st; const float *loss; int slot; float clip; };
extern "C" __global__ void nb_ddpm_clip(const ClipArgs a) {
    float norm = sqrtf(a.st[a.slot]);
    float k = !isfinite(norm) ? 0.0f : (a.clip > 0.0f && norm > a.clip) ? a.clip / (norm + 1e-6f) : 1.0f;
    if (k != 1.0f) LOOP(a.n) a.g[i] *= k;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        a.st[2] += *a.loss;
        a.st[3] = norm;
        a.st[4] = fmaxf(a.st[4], norm);
        a.st[5] += 1.0f;
        if (!isfinite(norm)) a.st[6] = 1.0f;
        a.st[1 - a.slot] = 0.0f;
    }
}
struct EmaArgs { float *ema; const float *p; long long n; float a, b; };
extern "C" __global__ void nb_ddpm_ema(const EmaArgs a) {
    LOOP(a.n) a.ema[i] = __fadd_rn(__fmul_rn(a.a, a.ema[i]), __fmul_rn(a.b, a.p[i]));
}
struct RandnArgs { float *x; long long n; unsigned key, base; };
extern "C" __global__ void nb_ddpm_randn(const RandnArgs a) {
    LOOP(a.n) a.x[i] = nb_gauss(a.key, a.base + (unsigned)i);
}
struct UpdArgs { float *x; const float *e; long long n; unsigned key, base; int mode;
                 float sa, s1a, sap, s1ap, c0, c1, sigma; };
extern "C" __global__ void nb_ddpm_update(const UpdArgs a) {
    LOOP(a.n) {
        float x = a.x[i], x0 = (x - a.s1a * a.e[i]) / a.sa;
        x0 = fminf(fmaxf(x0, -1.0f), 1.0f);
        if (a.mode == 0) x = a.sap * x0 + a.s1ap * ((x - a.sa * x0) / a.s1a);
        else {
            x = a.c0 * x0 + a.c1 * x;
            if (a.mode == 1) x += a.sigma * nb_gauss(a.key, a.base + (unsigned)i);
        }
        a.x[i] = x;
    }
}

// The encodings' kernels (src/nn/encoding/encoding_cuda.c): dense / hash grid and frequency
// forward (f32 / f16 output), backward to the parameters (plain, shared-memory levels, warp-
// aggregated) and to the inputs. Defines: NB_D dims, NB_F features per level, NB_L levels,
// NB_NFREQ frequencies, NB_SMEM_LEVELS / NB_SMEM_FLOATS (levels kept in shared memory by the
// backward), NB_AGG_LPW levels per warp of the aggregated backward (Args mirrors nb_cu_enc_args).
//! nvrtc-check: NB_D=2 NB_F=2 NB_L=16 NB_NFREQ=1 NB_SMEM_LEVELS=4 NB_SMEM_FLOATS=2048 NB_AGG_LPW=4
//! nvrtc-check: NB_D=3 NB_F=1 NB_L=1 NB_NFREQ=6 NB_SMEM_LEVELS=0 NB_SMEM_FLOATS=1 NB_AGG_LPW=4
struct Lv { int side[3]; int hashed; unsigned mask; unsigned offset; };
struct Args { const float *params, *x, *dfeat; void *out; float *grads, *dx; long long n;
              Lv lv[32]; };
#define PI_F 3.14159265358979323846f
__device__ __forceinline__ unsigned grid_index(const Lv &lv, const unsigned g[3]) {
    if (!lv.hashed) {
        unsigned i = g[0] + (unsigned)lv.side[0] * g[1];
        if (NB_D == 3) i += (unsigned)lv.side[0] * (unsigned)lv.side[1] * g[2];
        return i;
    }
    unsigned h = g[0] ^ (g[1] * 2654435761u);
    if (NB_D == 3) h ^= g[2] * 805459861u;
    return h & lv.mask;
}
#include "grid_cell.cuh"
__device__ __forceinline__ void load_feat(const float *p, float v[NB_F]) {
#if NB_F % 4 == 0
    #pragma unroll
    for (int f = 0; f < NB_F; f += 4) { float4 q = __ldg((const float4 *)(p + f));
        v[f] = q.x; v[f + 1] = q.y; v[f + 2] = q.z; v[f + 3] = q.w; }
#elif NB_F % 2 == 0
    #pragma unroll
    for (int f = 0; f < NB_F; f += 2) { float2 q = __ldg((const float2 *)(p + f));
        v[f] = q.x; v[f + 1] = q.y; }
#else
    #pragma unroll
    for (int f = 0; f < NB_F; f++) v[f] = __ldg(p + f);
#endif
}
__device__ __forceinline__ void add_feat(float *p, const float v[NB_F]) {
#if __CUDA_ARCH__ >= 900 && NB_F % 4 == 0
    #pragma unroll
    for (int f = 0; f < NB_F; f += 4)
        asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(p + f), "f"(v[f]),
                     "f"(v[f + 1]), "f"(v[f + 2]), "f"(v[f + 3]) : "memory");
#elif __CUDA_ARCH__ >= 900 && NB_F % 2 == 0
    #pragma unroll
    for (int f = 0; f < NB_F; f += 2)
        asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" :: "l"(p + f), "f"(v[f]), "f"(v[f + 1]) : "memory");
#else
    #pragma unroll
    for (int f = 0; f < NB_F; f++) atomicAdd(p + f, v[f]);
#endif
}
#if NB_D == 2 && NB_F == 2
__device__ __forceinline__ void add_cell2(float *grads, float *s_g, bool to_smem, const Lv &lv,
                                          const unsigned cell[3], const float fr[3], const float dy[2]) {
    #pragma unroll
    for (int cy = 0; cy < 2; cy++) {
        const float wy = cy ? fr[1] : 1.0f - fr[1], w0 = (1.0f - fr[0]) * wy, w1 = fr[0] * wy;
        const unsigned g0[3] = {cell[0], cell[1] + cy, 0}, g1[3] = {cell[0] + 1, cell[1] + cy, 0};
        const unsigned a0 = lv.offset + grid_index(lv, g0) * 2u, a1 = lv.offset + grid_index(lv, g1) * 2u;
        const float v0[2] = {w0 * dy[0], w0 * dy[1]}, v1[2] = {w1 * dy[0], w1 * dy[1]};
        if (to_smem) {
            atomicAdd(s_g + a0, v0[0]); atomicAdd(s_g + a0 + 1, v0[1]);
            atomicAdd(s_g + a1, v1[0]); atomicAdd(s_g + a1 + 1, v1[1]);
            continue;
        }
#if __CUDA_ARCH__ >= 900
        if (a1 == a0 + 2u && (a0 & 3u) == 0u) {
            asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(grads + a0), "f"(v0[0]),
                         "f"(v0[1]), "f"(v1[0]), "f"(v1[1]) : "memory");
            continue;
        }
#endif
        add_feat(grads + a0, v0);
        add_feat(grads + a1, v1);
    }
}
#endif
#define LOAD_LEVELS __shared__ Lv s_lv[NB_L > 0 ? NB_L : 1];\
    for (int t = threadIdx.x; t < NB_L; t += blockDim.x) s_lv[t] = a.lv[t];\
    __syncthreads();
#define GRID_LOOP(n) for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < (unsigned)(n); \
    i += gridDim.x * blockDim.x)
__device__ __forceinline__ unsigned short f2h(float f) {
    unsigned short r; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f)); return r;
}
template <bool H> __device__ __forceinline__ void store_feat(void *out, size_t at, const float *v, int n) {
    if (H) {
        unsigned short *o = (unsigned short *)out + at;
        if (n % 2 == 0 && at % 2 == 0) {
            for (int f = 0; f < n; f += 2)
                *(unsigned *)(o + f) = (unsigned)f2h(v[f]) | ((unsigned)f2h(v[f + 1]) << 16);
        } else {
            for (int f = 0; f < n; f++) o[f] = f2h(v[f]);
        }
    } else {
        float *o = (float *)out + at;
        for (int f = 0; f < n; f++) o[f] = v[f];
    }
}
template <bool H> __device__ __forceinline__ void grid_fwd(const Args &a) {
    LOAD_LEVELS
    GRID_LOOP(a.n) {
        unsigned b = i / NB_L, l = i - b * NB_L;
        const Lv lv = s_lv[l];
        unsigned cell[3] = {0, 0, 0}; float fr[3] = {0, 0, 0};
        #pragma unroll
        for (int d = 0; d < NB_D; d++) grid_cell(__ldg(a.x + b * NB_D + d), lv.side[d], cell[d], fr[d]);
        float acc[NB_F];
        #pragma unroll
        for (int f = 0; f < NB_F; f++) acc[f] = 0.0f;
        #pragma unroll
        for (int c = 0; c < (1 << NB_D); c++) {
            unsigned g[3] = {0, 0, 0}; float w = 1.0f;
            #pragma unroll
            for (int d = 0; d < NB_D; d++) { int up = (c >> d) & 1; g[d] = cell[d] + up;
                w *= up ? fr[d] : 1.0f - fr[d]; }
            float v[NB_F];
            load_feat(a.params + lv.offset + grid_index(lv, g) * NB_F, v);
            #pragma unroll
            for (int f = 0; f < NB_F; f++) acc[f] += w * v[f];
        }
        store_feat<H>(a.out, (size_t)i * NB_F, acc, NB_F);
    }
}
extern "C" __global__ void nb_grid_fwd(const Args a) { grid_fwd<false>(a); }
extern "C" __global__ void nb_grid_fwd_h(const Args a) { grid_fwd<true>(a); }
extern "C" __global__ void nb_grid_bwd(const Args a) {
    LOAD_LEVELS
    GRID_LOOP(a.n) {
        unsigned b = i / NB_L, l = i - b * NB_L;
        const Lv lv = s_lv[l];
        float dy[NB_F];
        load_feat(a.dfeat + (size_t)i * NB_F, dy);
        unsigned cell[3] = {0, 0, 0}; float fr[3] = {0, 0, 0};
        #pragma unroll
        for (int d = 0; d < NB_D; d++) grid_cell(__ldg(a.x + b * NB_D + d), lv.side[d], cell[d], fr[d]);
#if NB_D == 2 && NB_F == 2
        add_cell2(a.grads, (float *)0, false, lv, cell, fr, dy);
#else
        #pragma unroll
        for (int c = 0; c < (1 << NB_D); c++) {
            unsigned g[3] = {0, 0, 0}; float w = 1.0f;
            #pragma unroll
            for (int d = 0; d < NB_D; d++) { int up = (c >> d) & 1; g[d] = cell[d] + up;
                w *= up ? fr[d] : 1.0f - fr[d]; }
            float v[NB_F];
            #pragma unroll
            for (int f = 0; f < NB_F; f++) v[f] = w * dy[f];
            add_feat(a.grads + lv.offset + grid_index(lv, g) * NB_F, v);
        }
#endif
    }
}
#if NB_SMEM_LEVELS > 0
extern "C" __global__ void __launch_bounds__(1024) nb_grid_bwd_smem(const Args a) {
    LOAD_LEVELS
    __shared__ float s_g[NB_SMEM_FLOATS];
    for (int j = threadIdx.x; j < NB_SMEM_FLOATS; j += blockDim.x) s_g[j] = 0.0f;
    __syncthreads();
    GRID_LOOP(a.n) {
        unsigned b = i / NB_L, l = i - b * NB_L;
        const Lv lv = s_lv[l];
        float dy[NB_F];
        load_feat(a.dfeat + (size_t)i * NB_F, dy);
        unsigned cell[3] = {0, 0, 0}; float fr[3] = {0, 0, 0};
        #pragma unroll
        for (int d = 0; d < NB_D; d++) grid_cell(__ldg(a.x + b * NB_D + d), lv.side[d], cell[d], fr[d]);
#if NB_D == 2 && NB_F == 2
        add_cell2(a.grads, s_g, l < NB_SMEM_LEVELS, lv, cell, fr, dy);
#else
        #pragma unroll
        for (int c = 0; c < (1 << NB_D); c++) {
            unsigned g[3] = {0, 0, 0}; float w = 1.0f;
            #pragma unroll
            for (int d = 0; d < NB_D; d++) { int up = (c >> d) & 1; g[d] = cell[d] + up;
                w *= up ? fr[d] : 1.0f - fr[d]; }
            float v[NB_F];
            #pragma unroll
            for (int f = 0; f < NB_F; f++) v[f] = w * dy[f];
            unsigned at = lv.offset + grid_index(lv, g) * NB_F;
            if (l < NB_SMEM_LEVELS) {
                #pragma unroll
                for (int f = 0; f < NB_F; f++) atomicAdd(s_g + at + f, v[f]);
            } else {
                add_feat(a.grads + at, v);
            }
        }
#endif
    }
    __syncthreads();
    for (int j = 2 * threadIdx.x; j < NB_SMEM_FLOATS; j += 2 * blockDim.x) {
        float p = s_g[j], q = j + 1 < NB_SMEM_FLOATS ? s_g[j + 1] : 0.0f;
        if (p == 0.0f && q == 0.0f) continue;
#if __CUDA_ARCH__ >= 900
        if (j + 1 < NB_SMEM_FLOATS) {
            asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" :: "l"(a.grads + j), "f"(p), "f"(q) : "memory");
            continue;
        }
#endif
        atomicAdd(a.grads + j, p);
        if (j + 1 < NB_SMEM_FLOATS) atomicAdd(a.grads + j + 1, q);
    }
}
#endif
#if NB_L % NB_AGG_LPW == 0
extern "C" __global__ void __launch_bounds__(1024) nb_grid_bwd_agg(const Args a) {
    LOAD_LEVELS
#if NB_SMEM_LEVELS > 0
    __shared__ float s_g[NB_SMEM_FLOATS];
    for (int j = threadIdx.x; j < NB_SMEM_FLOATS; j += blockDim.x) s_g[j] = 0.0f;
    __syncthreads();
#endif
    const unsigned lane = threadIdx.x & 31u, B = (unsigned)(a.n / NB_L);
    const unsigned PPW = 32 / NB_AGG_LPW, groups = NB_L / NB_AGG_LPW, n_warps = ((B + PPW - 1) / PPW) * groups;
    for (unsigned wi = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; wi < n_warps;
         wi += (gridDim.x * blockDim.x) >> 5) {
        unsigned m = wi % groups, b = (wi / groups) * PPW + lane / NB_AGG_LPW;
        unsigned l = NB_AGG_LPW * m + lane % NB_AGG_LPW;
        bool active = b < B;
        const Lv lv = s_lv[l];
        float dy[NB_F];
        unsigned cell[3] = {0, 0, 0}; float fr[3] = {0, 0, 0};
        if (active) {
            load_feat(a.dfeat + ((size_t)b * NB_L + l) * NB_F, dy);
            #pragma unroll
            for (int d = 0; d < NB_D; d++) grid_cell(__ldg(a.x + b * NB_D + d), lv.side[d], cell[d], fr[d]);
        } else {
            #pragma unroll
            for (int f = 0; f < NB_F; f++) dy[f] = 0.0f;
        }
        #pragma unroll
        for (int c = 0; c < (1 << NB_D); c++) {
            unsigned g[3] = {0, 0, 0}; float w = 1.0f;
            #pragma unroll
            for (int d = 0; d < NB_D; d++) { int up = (c >> d) & 1; g[d] = cell[d] + up;
                w *= up ? fr[d] : 1.0f - fr[d]; }
            float v[NB_F];
            #pragma unroll
            for (int f = 0; f < NB_F; f++) v[f] = w * dy[f];
            unsigned at = lv.offset + grid_index(lv, g) * NB_F;
            bool alive = active;
            #pragma unroll
            for (unsigned o = NB_AGG_LPW; o <= 16; o <<= 1) {
                unsigned pat = __shfl_xor_sync(0xffffffffu, at, o);
                bool palive = __shfl_xor_sync(0xffffffffu, alive ? 1 : 0, o) != 0;
                bool merge = alive && palive && pat == at;
                #pragma unroll
                for (int f = 0; f < NB_F; f++) {
                    float pv = __shfl_xor_sync(0xffffffffu, v[f], o);
                    if (merge && !(lane & o)) v[f] += pv;
                }
                if (merge && (lane & o)) alive = false;
            }
            if (!alive) continue;
#if NB_SMEM_LEVELS > 0
            if (l < NB_SMEM_LEVELS) {
                #pragma unroll
                for (int f = 0; f < NB_F; f++) atomicAdd(s_g + at + f, v[f]);
                continue;
            }
#endif
            add_feat(a.grads + at, v);
        }
    }
#if NB_SMEM_LEVELS > 0
    __syncthreads();
    for (int j = 2 * threadIdx.x; j < NB_SMEM_FLOATS; j += 2 * blockDim.x) {
        float p = s_g[j], q = j + 1 < NB_SMEM_FLOATS ? s_g[j + 1] : 0.0f;
        if (p == 0.0f && q == 0.0f) continue;
        atomicAdd(a.grads + j, p);
        if (j + 1 < NB_SMEM_FLOATS) atomicAdd(a.grads + j + 1, q);
    }
#endif
}
#endif
extern "C" __global__ void nb_grid_bwd_dx(const Args a) {
    LOAD_LEVELS
    GRID_LOOP(a.n) {
        float acc[3] = {0, 0, 0};
        for (int l = 0; l < NB_L; l++) {
            const Lv lv = s_lv[l];
            unsigned cell[3] = {0, 0, 0}; float fr[3] = {0, 0, 0};
            #pragma unroll
            for (int d = 0; d < NB_D; d++) grid_cell(__ldg(a.x + i * NB_D + d), lv.side[d], cell[d], fr[d]);
            float dy[NB_F];
            load_feat(a.dfeat + ((size_t)i * NB_L + l) * NB_F, dy);
            #pragma unroll
            for (int c = 0; c < (1 << NB_D); c++) {
                unsigned g[3] = {0, 0, 0};
                #pragma unroll
                for (int d = 0; d < NB_D; d++) g[d] = cell[d] + ((c >> d) & 1);
                float v[NB_F];
                load_feat(a.params + lv.offset + grid_index(lv, g) * NB_F, v);
                float dot = 0.0f;
                #pragma unroll
                for (int f = 0; f < NB_F; f++) dot += dy[f] * v[f];
                #pragma unroll
                for (int d = 0; d < NB_D; d++) {
                    float w = ((c >> d) & 1) ? 1.0f : -1.0f;
                    #pragma unroll
                    for (int k = 0; k < NB_D; k++) if (k != d) w *= ((c >> k) & 1) ? fr[k] : 1.0f - fr[k];
                    acc[d] += dot * w * (float)(lv.side[d] - 1);
                }
            }
        }
        #pragma unroll
        for (int d = 0; d < NB_D; d++) a.dx[i * NB_D + d] = acc[d];
    }
}
template <bool H> __device__ __forceinline__ void freq_fwd(const Args &a) {
    GRID_LOOP(a.n) {
        unsigned k = i % NB_NFREQ, bd = i / NB_NFREQ;
        float v[2]; sincosf(ldexpf(PI_F, k) * a.x[bd], &v[0], &v[1]);
        store_feat<H>(a.out, 2 * (size_t)i, v, 2);
    }
}
extern "C" __global__ void nb_freq_fwd(const Args a) { freq_fwd<false>(a); }
extern "C" __global__ void nb_freq_fwd_h(const Args a) { freq_fwd<true>(a); }
extern "C" __global__ void nb_freq_bwd(const Args a) {
    GRID_LOOP(a.n) {
        float acc = 0.0f, x = a.x[i];
        for (int k = 0; k < NB_NFREQ; k++) {
            float sc = ldexpf(PI_F, k), s, c; sincosf(sc * x, &s, &c);
            const float *dy = a.dfeat + ((size_t)i * NB_NFREQ + k) * 2;
            acc += sc * (dy[0] * c - dy[1] * s);
        }
        a.dx[i] = acc;
    }
}

// Vector atomics: float2 atomicAdd exists from sm_90 on.
#pragma once
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PAIR_ATOMICS 1
__device__ __forceinline__ void atomic_add2(float *p, float x, float y) {
    float2 v; v.x = x; v.y = y; atomicAdd((float2 *)p, v);
}
#else
#define PAIR_ATOMICS 0
__device__ __forceinline__ void atomic_add2(float *p, float x, float y) {
    atomicAdd(p, x); atomicAdd(p + 1, y);
}
#endif

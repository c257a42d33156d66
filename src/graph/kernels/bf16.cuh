// Device helpers for values stored as bf16 (tape values: op_rows.h nb_tval.dtype; conv
// and attention operands). Include with #include "graph/kernels/bf16.cuh"; no cuda_bf16.h.
//
// bf16 <-> f32: the bf16 is the top 16 bits of the f32; f32 -> bf16 rounds to nearest even
// (cvt.rn), like PyTorch's .to(torch.bfloat16). A buffer's dtype travels to kernels as an int
// flag (0 = f32, 1 = bf16): the nb_ld / nb_st / nb_ld4 / nb_st4 forms branch on it (uniform
// across a launch, so the branch costs nothing measurable); kernels that want no branch
// specialise on a macro instead. Vector forms need 16-byte (f32) / 8-byte (bf16) alignment:
// element index a multiple of 4 on a tape arena buffer.
#pragma once
__device__ __forceinline__ float nb_bf2f(unsigned short h) {
    return __uint_as_float(((unsigned)h) << 16);
}
__device__ __forceinline__ unsigned short nb_f2bf(float f) {
    unsigned short r; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f)); return r;
}
/* two floats -> one 32-bit pair (lo in the low half) */
__device__ __forceinline__ unsigned nb_f2bf2(float lo, float hi) {
    unsigned r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ float nb_ld(const void *p, long long i, int bf) {
    return bf ? nb_bf2f(((const unsigned short *)p)[i]) : ((const float *)p)[i];
}
__device__ __forceinline__ void nb_st(void *p, long long i, int bf, float v) {
    if (bf) ((unsigned short *)p)[i] = nb_f2bf(v); else ((float *)p)[i] = v;
}
/* elements i .. i+3 (i % 4 == 0) */
__device__ __forceinline__ float4 nb_ld4(const void *p, long long i, int bf) {
    if (!bf) return *(const float4 *)((const float *)p + i);
    uint2 u = *(const uint2 *)((const unsigned short *)p + i);
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                       __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
}
__device__ __forceinline__ void nb_st4(void *p, long long i, int bf, float4 v) {
    if (!bf) { *(float4 *)((float *)p + i) = v; return; }
    *(uint2 *)((unsigned short *)p + i) = make_uint2(nb_f2bf2(v.x, v.y), nb_f2bf2(v.z, v.w));
}

// PTX helpers the tensor-core conv kernels share (igemm.cu, igemm_bf16.cuh, wg4.cu): cp.async
// copies into shared memory with zero fill, their commit / wait, bf16 conversions, the 8-byte
// global atomic add, ldmatrix and the two mma shapes. igemm.cu includes this only without
// NB_IG_HOST_EMU (tests/emu/conv_emu.sh supplies host versions of the same names).
#pragma once
__device__ __forceinline__ unsigned smem_u32(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
/* 4-byte / 16-byte async copies global -> shared; v false: the bytes are zero (src unread) */
__device__ __forceinline__ void cp4(float *dst, const float *src, bool v) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::
                 "r"(smem_u32(dst)), "l"(src), "r"(v ? 4 : 0));
}
__device__ __forceinline__ void cp16(void *dst, const void *src, bool v) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::
                 "r"(smem_u32(dst)), "l"(src), "r"(v ? 16 : 0));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int n> __device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(n));
}
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ float ig_bf2f(unsigned short h) { return __uint_as_float(((unsigned)h) << 16); }
__device__ __forceinline__ unsigned short ig_f2bf(float f) {
    unsigned short r; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f)); return r;
}
/* *p += a, p[1] += b as one 8-byte atomic (sm_90 red.v2.f32; p 8-byte aligned) */
__device__ __forceinline__ void ig_red2(float *p, float a, float b) {
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" :: "l"(p), "f"(a), "f"(b) : "memory");
}
/* four 8x8 b16 matrices from shared memory (lane l gives row l's 16-byte address) */
__device__ __forceinline__ void ldm4(unsigned *r, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}
/* c[4] += a (16x8 tf32 / 16x16 bf16, 4 registers) * b (8x8 / 16x8, 2 registers) */
__device__ __forceinline__ void mma_tf32(float *c, const unsigned *a, const unsigned *b) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_bf16(float *c, const unsigned *a, const unsigned *b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

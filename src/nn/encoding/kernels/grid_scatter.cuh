// The 2-D, 2-feature grid encoding's backward as device code for the fused MLP backward
// (mlp_bwd_rc_enc, mlp_train_rc_enc_*: nb_encoding_backward_mlp / nb_encoding_mlp_train):
// the MLP's input gradient of row r, features (2l, 2l+1) = level l, goes straight into the
// level's parameter gradients (the same atomics as encoding.cu's nb_grid_bwd_smem, coarse levels
// summed in the kernel's shared memory and flushed once per block), so dL/dfeatures is never
// stored. Included by src/nn/mlp/kernels/mlp.cu (ENC=1) before mlp_head.cuh, in place of
// mlp_enc_stub.cuh. Defines (encoding_cuda.c, nb_enc_cuda_mlp_defines):
//   ENC_L            levels
//   ENC_SMEM_LEVELS  the first levels summed in shared memory; ENC_SMEM_FLOATS their floats
//   ENC_AGG          1: updates merged across lanes first (spatially ordered batches)
//   ENC_SX, ENC_SY   each level's vertices along x / y (ENC_L comma-separated values)
//   ENC_OFF          each level's first float in the parameters
//   ENC_MASK         entries - 1 of a hashed level, 0 for a dense one
__constant__ int enc_sx[ENC_L] = {ENC_SX};
__constant__ int enc_sy[ENC_L] = {ENC_SY};
__constant__ unsigned enc_off[ENC_L] = {ENC_OFF};
__constant__ unsigned enc_mask[ENC_L] = {ENC_MASK};
#include "grid_cell.cuh"
__device__ __forceinline__ unsigned enc_index(int l, unsigned gx, unsigned gy) {
    const unsigned m = enc_mask[l];
    return m ? ((gx ^ (gy * 2654435761u)) & m) : gx + (unsigned)enc_sx[l] * gy;
}
__device__ __forceinline__ void enc_red2(float *p, float a, float b) {
#if __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" :: "l"(p), "f"(a), "f"(b) : "memory");
#else
    atomicAdd(p, a); atomicAdd(p + 1, b);
#endif
}
/* One entry's update (v0, v1) at float a (shared memory when smem). ENC_AGG (spatially
 * ordered batches): first merged over the lanes that differ in bits 2..4, which the fused MLP
 * backward gives the same level and neighbouring rows; the merged sum goes out once. Every
 * lane of the warp must call it (shuffles). */
__device__ __forceinline__ void enc_put(float *grads, float *s_g, bool smem, unsigned a, float v0, float v1,
                                        bool alive) {
#if ENC_AGG
    const unsigned lane = threadIdx.x & 31u;
    #pragma unroll
    for (unsigned o = 4; o <= 16; o <<= 1) {
        const unsigned pa = __shfl_xor_sync(0xffffffffu, a, o);
        const bool pal = __shfl_xor_sync(0xffffffffu, alive ? 1 : 0, o) != 0;
        const float p0 = __shfl_xor_sync(0xffffffffu, v0, o), p1 = __shfl_xor_sync(0xffffffffu, v1, o);
        const bool merge = alive && pal && pa == a;
        if (merge && !(lane & o)) { v0 += p0; v1 += p1; }
        if (merge && (lane & o)) alive = false;
    }
#endif
    if (!alive) return;
    if (smem) { atomicAdd(s_g + a, v0); atomicAdd(s_g + a + 1, v1); }
    else enc_red2(grads + a, v0, v1);
}
/* dL/d(features 2l, 2l+1) of row `row` = (d0, d1): added to the 4 corners of its cell. Every
 * lane calls it; inactive ones (active = false) add nothing. */
__device__ __forceinline__ void enc_scatter(const float *x, float *grads, float *s_g, long long row, int l,
                                            float d0, float d1, bool active) {
#if !ENC_AGG
    if (!active) return;
#endif
    const float2 p = active ? __ldg((const float2 *)(x + 2 * row)) : make_float2(0.0f, 0.0f);
    unsigned cx, cy; float fx, fy;
    grid_cell(p.x, enc_sx[l], cx, fx);
    grid_cell(p.y, enc_sy[l], cy, fy);
    const unsigned off = enc_off[l];
    const bool smem = l < ENC_SMEM_LEVELS;
    #pragma unroll
    for (int k = 0; k < 2; k++) {
        const float wy = k ? fy : 1.0f - fy, w0 = (1.0f - fx) * wy, w1 = fx * wy;
        const unsigned a0 = off + enc_index(l, cx, cy + k) * 2u, a1 = off + enc_index(l, cx + 1, cy + k) * 2u;
#if __CUDA_ARCH__ >= 900 && !ENC_AGG
        if (!smem && a1 == a0 + 2u && (a0 & 3u) == 0u) {
            asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(grads + a0), "f"(w0 * d0),
                         "f"(w0 * d1), "f"(w1 * d0), "f"(w1 * d1) : "memory");
            continue;
        }
#endif
        enc_put(grads, s_g, smem, a0, w0 * d0, w0 * d1, active);
        enc_put(grads, s_g, smem, a1, w1 * d0, w1 * d1, active);
    }
}
/* the shared-memory sums of the coarse levels: zeroed at the start, flushed at the end */
__device__ __forceinline__ void enc_smem_zero(float *s_g) {
    for (int j = threadIdx.x; j < ENC_SMEM_FLOATS; j += blockDim.x) s_g[j] = 0.0f;
}
__device__ __forceinline__ void enc_smem_flush(float *grads, const float *s_g) {
    for (int j = 2 * threadIdx.x; j + 1 < ENC_SMEM_FLOATS; j += 2 * blockDim.x) {
        const float p = s_g[j], q = s_g[j + 1];
        if (p != 0.0f || q != 0.0f) enc_red2(grads + j, p, q);
    }
}

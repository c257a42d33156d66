// Stand-ins for the grid-encoding device code of mlp_bwd_rc_enc (src/nn/encoding/kernels/
// grid_scatter.cuh), included by mlp.cu before mlp_head.cuh when it does not fuse the grid
// backward (ENC=0).
#define ENC_SMEM_FLOATS 0
__device__ __forceinline__ void enc_scatter(const float *, float *, float *, long long, int, float, float, bool) {}
__device__ __forceinline__ void enc_smem_zero(float *) {}
__device__ __forceinline__ void enc_smem_flush(float *, const float *) {}

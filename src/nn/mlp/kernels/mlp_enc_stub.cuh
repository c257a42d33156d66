// Stand-ins for the grid-encoding device code of mlp_bwd_rc_enc (nb_enc_cuda_mlp_source), included
// before mlp_head.cuh in every program that does not fuse the grid backward.
#define ENC_SMEM_FLOATS 0
__device__ __forceinline__ void enc_scatter(const float *, float *, float *, long long, int, float, float, bool) {}
__device__ __forceinline__ void enc_smem_zero(float *) {}
__device__ __forceinline__ void enc_smem_flush(float *, const float *) {}

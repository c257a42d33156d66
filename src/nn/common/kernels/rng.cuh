// Counter-based random numbers for kernels (PCG hash): the same numbers as nb_nn_pcg /
// nb_nn_uniform on the CPU (src/nn/common/nn_common.h), so CPU and CUDA agree.
// nb_uniform(key, i): uniform float in [0, 1) for counter i under key.
#pragma once
__device__ __forceinline__ unsigned nb_pcg(unsigned v) {
    unsigned s = v * 747796405u + 2891336453u;
    unsigned w = ((s >> ((s >> 28u) + 4u)) ^ s) * 277803737u;
    return (w >> 22u) ^ w;
}
__device__ __forceinline__ float nb_uniform(unsigned key, unsigned i) {
    return (float)(nb_pcg(i ^ key) >> 8) * (1.0f / 16777216.0f);
}

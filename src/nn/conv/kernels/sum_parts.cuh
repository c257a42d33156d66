// The partial-sum ending the conv kernels share (bias.cu nb_conv_sum_n, wgrad.cu nb_wg_sum):
// one definition instead of a copy in each file.
#pragma once
/* dw[i] += sum over n < N of s[n * L + i], grid-stride over i < L */
__device__ __forceinline__ void sum_parts_add(const float *s, float *dw, long long L, int N) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < L;
         i += (long long)gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (int n = 0; n < N; n++) acc += s[n * L + i];
        dw[i] += acc;
    }
}

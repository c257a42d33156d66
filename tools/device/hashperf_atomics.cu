// Throughput of global float reductions on the device (for the hash-grid backward, issue 6):
// N = 2^24 reductions of 8 bytes (2 features) to random entries of a table the size of the
// fit-image hash grid (709192 floats, L2 resident), issued as red.f32 x2, red.v2.f32,
// red.v4.f32 (two adjacent entries per op: N/2 ops), red.f16x2 (4 bytes), red.v2.f16x2 (N/2),
// and the same red.v2.f32 on a table 16x smaller (more same-line traffic).
// Build + run: nvcc -O3 -arch=sm_90 -o atomics tools/device/hashperf_atomics.cu && ./atomics
#include <cstdio>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

__device__ __forceinline__ unsigned hsh(unsigned v) {
    unsigned s = v * 747796405u + 2891336453u;
    unsigned w = ((s >> ((s >> 28u) + 4u)) ^ s) * 277803737u;
    return (w >> 22u) ^ w;
}

template <int MODE>
__global__ void k(float *g, unsigned entries, unsigned n) {
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        unsigned e = hsh(i) % entries;
        float a = 1e-3f * (float)(i & 7), b = 2e-3f;
        if (MODE == 0) {
            atomicAdd(g + 2 * e, a);
            atomicAdd(g + 2 * e + 1, b);
        } else if (MODE == 1) {
            asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(g + 2 * e), "f"(a), "f"(b) : "memory");
        } else if (MODE == 2) { // two adjacent entries per op
            e &= ~1u;
            asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(g + 2 * e), "f"(a), "f"(b), "f"(a), "f"(b) : "memory");
        } else if (MODE == 3) {
            __half2 v = __floats2half2_rn(a, b);
            atomicAdd((__half2 *)g + e, v);
        } else if (MODE == 4) { // two adjacent half2 entries per op
            e &= ~1u;
            __half2 v = __floats2half2_rn(a, b);
            unsigned u = *(unsigned *)&v;
            asm volatile("red.global.add.noftz.v2.f16x2 [%0], {%1, %2};" ::"l"((__half2 *)g + e), "r"(u), "r"(u) : "memory");
        }
    }
}

template <int MODE>
static float run(float *g, unsigned entries, unsigned n, int sms) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float best = 1e30f;
    for (int rep = 0; rep < 6; rep++) {
        cudaEventRecord(e0);
        k<MODE><<<sms * 8, 256>>>(g, entries, n);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (rep > 0 && ms < best) best = ms;
    }
    return best;
}

int main() {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const unsigned entries = 354596, n = 1u << 24;
    float *g;
    cudaMalloc(&g, (size_t)entries * 8 + 64);
    cudaMemset(g, 0, (size_t)entries * 8 + 64);
    float t0 = run<0>(g, entries, n, sms), t1 = run<1>(g, entries, n, sms), t2 = run<2>(g, entries, n / 2, sms);
    float t3 = run<3>(g, entries, n, sms), t4 = run<4>(g, entries, n / 2, sms);
    float t5 = run<1>(g, entries / 16, n, sms);
    cudaError_t err = cudaDeviceSynchronize();
    printf("atomics: %s; %u reductions of 8 B (2 features) into %u random entries\n", cudaGetErrorString(err), n, entries);
    printf("  red.f32 x2        %.4f ms  %.1f G entries/s\n", t0, n / t0 * 1e-6);
    printf("  red.v2.f32        %.4f ms  %.1f G entries/s\n", t1, n / t1 * 1e-6);
    printf("  red.v4.f32 (pair) %.4f ms  %.1f G entries/s (n/2 ops)\n", t2, n / t2 * 1e-6);
    printf("  red.f16x2         %.4f ms  %.1f G entries/s\n", t3, n / t3 * 1e-6);
    printf("  red.v2.f16x2 pair %.4f ms  %.1f G entries/s (n/2 ops)\n", t4, n / t4 * 1e-6);
    printf("  red.v2.f32, %u entries: %.4f ms  %.1f G entries/s\n", entries / 16, t5, n / t5 * 1e-6);
    printf("  (the fit-image step does 2^18 x 16 x 4 = 16.8 M entry updates)\n");
    return 0;
}

// Tape dtype cast (src/graph/tape_cast.c): y (+)= x elementwise between f32 and bf16 buffers.
#include "graph/kernels/bf16.cuh"
struct CastP { const void *x; void *y; long long n; int xbf, ybf, acc; };
/* y[i] (+= when acc) x[i], each in its dtype; 4 elements per item (the tape's buffers are
 * 64-byte aligned), the tail one by one */
extern "C" __global__ void tk_cast(CastP p) {
    long long n4 = p.n / 4;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4 + p.n % 4;
         i += (long long)gridDim.x * blockDim.x) {
        if (i < n4) {
            float4 v = nb_ld4(p.x, 4 * i, p.xbf);
            if (p.acc) { float4 o = nb_ld4(p.y, 4 * i, p.ybf);
                v.x += o.x; v.y += o.y; v.z += o.z; v.w += o.w; }
            nb_st4(p.y, 4 * i, p.ybf, v);
        } else {
            long long j = 4 * n4 + (i - n4);
            float v = nb_ld(p.x, j, p.xbf);
            if (p.acc) v += nb_ld(p.y, j, p.ybf);
            nb_st(p.y, j, p.ybf, v);
        }
    }
}

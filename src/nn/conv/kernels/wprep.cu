// Weight arrangement for the implicit-GEMM convolution (src/nn/conv/conv_cuda_igemm.c, see
// its "weight arrangement" comment): nb_conv_wprep writes one layout the igemm kernels read,
// nb_conv_wprep2 two in one launch (WpP mirrors nb_ig_wprep_params).
#include "graph/kernels/bf16.cuh"
struct WpP { const float *w; void *wr; long long total; int O, C, KK, R, CB, flip, perm, bf, vec; };
/* wr [G][R][KK][CB] (f32, or bf16 with bf) from w [O][C][KK]: R rows (o; with flip c), inner
 * channel ch = g*CB + k (c; with flip o; zero at or past C / O), the taps reversed with flip;
 * perm: channel k sits in slot kp = 4*((k&7)>>1) + 2*(k>>3) + (k&1) (the bf16 halo kernel's
 * order, CB = 16). MODE 0's [O][KK][C] / [C][KK][O] are G = 1, CB = C / O. A thread writes
 * vec (1, 4 or 8) consecutive slots; CB % vec == 0. */
__device__ __forceinline__ void nb_wprep_body(const WpP &p, long long tid) {
    long long i0 = tid * p.vec;
    if (i0 >= p.total) return;
    long long r = i0 / p.CB;
    int kp0 = (int)(i0 - r * p.CB);
    int t = (int)(r % p.KK); r /= p.KK;
    int row = (int)(r % p.R), g = (int)(r / p.R);
    int tap = p.flip ? p.KK - 1 - t : t;
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        v[j] = 0.0f;
        if (j >= p.vec) continue;
        int kp = kp0 + j, k = p.perm ? 8 * ((kp >> 1) & 1) + 2 * (kp >> 2) + (kp & 1) : kp;
        int ch = g * p.CB + k, o = p.flip ? ch : row, c = p.flip ? row : ch;
        if (p.flip ? o < p.O : c < p.C) v[j] = p.w[((long long)o * p.C + c) * p.KK + tap];
    }
    if (p.bf) {
        unsigned short *o = (unsigned short *)p.wr + i0;
        if (p.vec == 8)
            *(uint4 *)o = make_uint4(nb_f2bf2(v[0], v[1]), nb_f2bf2(v[2], v[3]),
                                     nb_f2bf2(v[4], v[5]), nb_f2bf2(v[6], v[7]));
        else if (p.vec == 4) *(uint2 *)o = make_uint2(nb_f2bf2(v[0], v[1]), nb_f2bf2(v[2], v[3]));
        else *o = nb_f2bf(v[0]);
    } else {
        float *o = (float *)p.wr + i0;
        if (p.vec == 4) *(float4 *)o = make_float4(v[0], v[1], v[2], v[3]);
        else *o = v[0];
    }
}
extern "C" __global__ void nb_conv_wprep(WpP p) {
    nb_wprep_body(p, blockIdx.x * (long long)blockDim.x + threadIdx.x);
}
struct WpP2 { WpP a, b; };
/* two layouts of the same weights in one launch (the forward's, and the one its backward will
 * read: nb_conv_wcache in conv_cuda.h) */
extern "C" __global__ void nb_conv_wprep2(WpP2 p) {
    long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    nb_wprep_body(p.a, t);
    nb_wprep_body(p.b, t);
}

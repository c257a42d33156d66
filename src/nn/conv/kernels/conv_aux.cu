// The cuBLAS conv path's helpers (src/nn/conv/conv_cuda.c): im2col / col2im over f32 or bf16
// activations and the f32 <-> bf16 convert / accumulate kernel (the P structs mirror its
// nb_im2col_p / nb_col2im_p / nb_cvt_p).
#include "graph/kernels/bf16.cuh"
struct Im2colP { const void *x; void *col; long long total;
                 int C, H, W, K, S, pad, OH, OW, xbf, cbf; };
/* col[nl][c*K*K + ki*K + kj][oh*OW + ow] = x[nl][c][oh*S-pad+ki][ow*S-pad+kj] (0 outside);
 * x and col in f32 or bf16 (xbf, cbf) */
extern "C" __global__ void nb_conv_im2col(Im2colP p) {
    long long P = (long long)p.OH * p.OW; int KK = p.K * p.K;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.total;
         i += (long long)gridDim.x * blockDim.x) {
        long long pp = i % P, r = i / P;
        int kk = (int)(r % KK); r /= KK;
        int c = (int)(r % p.C); long long nl = r / p.C;
        int oh = (int)(pp / p.OW), ow = (int)(pp % p.OW);
        int ih = oh * p.S - p.pad + kk / p.K, iw = ow * p.S - p.pad + kk % p.K;
        float v = 0.0f;
        if (ih >= 0 && ih < p.H && iw >= 0 && iw < p.W)
            v = nb_ld(p.x, ((nl * p.C + c) * p.H + ih) * p.W + iw, p.xbf);
        nb_st(p.col, i, p.cbf, v);
    }
}
struct Col2imP { const float *col; void *dx; long long total;
                 int C, H, W, K, S, pad, OH, OW, store, xbf; };
/* dx[nl][c][h][w] += (store: =) sum of the col entries that im2col read from (h, w) */
extern "C" __global__ void nb_conv_col2im(Col2imP p) {
    long long P = (long long)p.OH * p.OW; int KK = p.K * p.K;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.total;
         i += (long long)gridDim.x * blockDim.x) {
        int w = (int)(i % p.W); long long r = i / p.W;
        int h = (int)(r % p.H); r /= p.H;
        int c = (int)(r % p.C); long long nl = r / p.C;
        const float *col = p.col + (nl * p.C + c) * KK * P;
        float acc = 0.0f;
        for (int ki = 0; ki < p.K; ki++) {
            int th = h + p.pad - ki;
            if (th < 0 || th % p.S) continue;
            int oh = th / p.S; if (oh >= p.OH) continue;
            for (int kj = 0; kj < p.K; kj++) {
                int tw = w + p.pad - kj;
                if (tw < 0 || tw % p.S) continue;
                int ow = tw / p.S; if (ow >= p.OW) continue;
                acc += col[(long long)(ki * p.K + kj) * P + oh * p.OW + ow];
            }
        }
        nb_st(p.dx, i, p.xbf, p.store ? acc : nb_ld(p.dx, i, p.xbf) + acc);
    }
}
struct CvtP { const void *src; void *dst; long long n; int sbf, dbf, acc, vec; };
/* dst[i] := src[i] (acc: +=), each in f32 or bf16; vec: 4 elements per thread (aligned
 * buffers), the n % 4 tail by the first threads */
extern "C" __global__ void nb_conv_cvt(CvtP p) {
    long long n4 = p.vec ? p.n >> 2 : 0, tid = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    for (long long q = tid; q < n4; q += (long long)gridDim.x * blockDim.x) {
        float4 v = nb_ld4(p.src, 4 * q, p.sbf);
        if (p.acc) {
            float4 d = nb_ld4(p.dst, 4 * q, p.dbf);
            v.x += d.x, v.y += d.y, v.z += d.z, v.w += d.w;
        }
        nb_st4(p.dst, 4 * q, p.dbf, v);
    }
    for (long long i = 4 * n4 + tid; i < p.n; i += (long long)gridDim.x * blockDim.x) {
        float v = nb_ld(p.src, i, p.sbf);
        nb_st(p.dst, i, p.dbf, p.acc ? nb_ld(p.dst, i, p.dbf) + v : v);
    }
}

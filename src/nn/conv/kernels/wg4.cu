// The tensor-core 3x3 conv weight gradient (src/nn/conv/conv_cuda_wg4.c), specialised by PREC.
//! nvrtc-check: PREC=1
//! nvrtc-check: PREC=2
/* PREC 2: bf16 x / dy, mma m16n8k16 bf16; PREC 1: f32 x / dy, mma m16n8k8 tf32 (the f32 bits
 * as they are, as the implicit-GEMM kernels) */
#define BM 64
#define BN 192
#define TRI 64 /* (c, kh) triples per block: BN / 3 */
#define BK 32
#define NTH 256
#define MT 2 /* 16-row tiles per warp (warp rows 32) */
#define NT 6 /* 8-column tiles per warp (warp columns 48) */
#if PREC == 2
typedef unsigned short E;
#define EPV 8   /* elements per 16 bytes */
#define LDK 40  /* elements per smem row: 80 bytes; ldmatrix rows conflict-free */
#define KSTEP 16
#else
typedef float E;
#define EPV 4
#define LDK 36  /* 144 bytes */
#define KSTEP 8
#endif
#define A_PER (BM * BK / EPV / NTH) /* 16-byte A chunks per thread and k tile */
#define B_PER (TRI * BK / EPV / NTH) /* B tasks (EPV pixels of one x row) per thread */
struct Wg4P { const E *x, *dy; float *dw, *db; int N, C, H, W, O, kt_per_split; };
#include "ptx.cuh"
/* the mma of this precision */
__device__ __forceinline__ void mma(float *c, const unsigned *a, const unsigned *b) {
#if PREC == 2
    mma_bf16(c, a, b);
#else
    mma_tf32(c, a, b);
#endif
}
/* the three kw-shifted copies of EPV pixels v (16 bytes) with left neighbour l, right r:
 * kw = 0: pixels -1 .. EPV-2, kw = 1: 0 .. EPV-1, kw = 2: 1 .. EPV */
__device__ __forceinline__ void shifts(uint4 v, unsigned l, unsigned r, uint4 *k0, uint4 *k2) {
#if PREC == 2
    /* l: the left pixel in the high half; r: the right one in the low half */
    unsigned s0 = __byte_perm(v.x, v.y, 0x5432), s1 = __byte_perm(v.y, v.z, 0x5432);
    unsigned s2 = __byte_perm(v.z, v.w, 0x5432);
    *k0 = make_uint4(__byte_perm(l, v.x, 0x5432), s0, s1, s2);
    *k2 = make_uint4(s0, s1, s2, __byte_perm(v.w, r, 0x5432));
#else
    *k0 = make_uint4(l, v.x, v.y, v.z);
    *k2 = make_uint4(v.y, v.z, v.w, r);
#endif
}
extern "C" __global__ void __launch_bounds__(NTH, 2) nb_conv_wg4(Wg4P p) {
    extern __shared__ __align__(16) unsigned char smem[];
    E (*As)[BM][LDK] = (E (*)[BM][LDK])smem;            /* [2][BM][LDK] */
    E (*Bs)[BN][LDK] = (E (*)[BN][LDK])(smem + 2 * BM * LDK * sizeof(E)); /* [2][BN][LDK] */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int wm0 = (warp >> 2) * 32, wn0 = (warp & 3) * 48;
    const int P = p.H * p.W, C3 = 3 * p.C, J = 9 * p.C;
    const int m0 = blockIdx.x * BM, q0 = blockIdx.y * TRI;
    const int nkt = p.N * (P / BK);
    const int kt0 = blockIdx.z * p.kt_per_split, kt1 = min(nkt, kt0 + p.kt_per_split);
    auto aload = [&](int s, int kt) {
        int k0 = kt * BK, n = k0 / P, p0 = k0 - n * P;
        _Pragma("unroll")
        for (int r = 0; r < A_PER; r++) {
            int i = tid + r * NTH, row = i / (BK / EPV), ch = i % (BK / EPV), o = m0 + row;
            bool v = o < p.O;
            cp16(&As[s][row][EPV * ch], v ? (const void *)(p.dy + ((long long)n * p.O + o) * P + p0 + EPV * ch)
                                          : (const void *)p.dy, v);
        }
        cp_commit();
    };
    uint4 bv[B_PER]; unsigned bl[B_PER], br[B_PER];
    auto bload = [&](int kt) {
        int k0 = kt * BK, n = k0 / P, pb = k0 - n * P;
        _Pragma("unroll")
        for (int r = 0; r < B_PER; r++) {
            int i = tid + r * NTH, tri = i / (BK / EPV), grp = i % (BK / EPV);
            int q = q0 + tri, c = q / 3, kh = q - 3 * c;
            int pix = pb + EPV * grp, oh = pix / p.W, ow = pix - oh * p.W, ih = oh + kh - 1;
            bv[r] = make_uint4(0u, 0u, 0u, 0u); bl[r] = 0u; br[r] = 0u;
            if (q < C3 && ih >= 0 && ih < p.H) {
                const E *row = p.x + (((long long)n * p.C + c) * p.H + ih) * p.W + ow;
                bv[r] = *(const uint4 *)row;
#if PREC == 2
                if (ow > 0) bl[r] = (unsigned)row[-1] << 16;
                if (ow + EPV < p.W) br[r] = (unsigned)row[EPV];
#else
                if (ow > 0) bl[r] = __float_as_uint(row[-1]);
                if (ow + EPV < p.W) br[r] = __float_as_uint(row[EPV]);
#endif
            }
        }
    };
    auto bstore = [&](int s) {
        _Pragma("unroll")
        for (int r = 0; r < B_PER; r++) {
            int i = tid + r * NTH, tri = i / (BK / EPV), grp = i % (BK / EPV);
            uint4 k0v, k2v;
            shifts(bv[r], bl[r], br[r], &k0v, &k2v);
            *(uint4 *)&Bs[s][3 * tri][EPV * grp] = k0v;
            *(uint4 *)&Bs[s][3 * tri + 1][EPV * grp] = bv[r];
            *(uint4 *)&Bs[s][3 * tri + 2][EPV * grp] = k2v;
        }
    };
    /* db (blocks of column block 0): row sums of the dy tiles this block reads anyway; a
     * thread sums the 16-byte A chunk(s) it loads, lanes sharing a row reduce at the end */
    const bool dob = p.db && blockIdx.y == 0;
    float dbs[A_PER];
    _Pragma("unroll")
    for (int r = 0; r < A_PER; r++) dbs[r] = 0.0f;
    float acc[MT][NT][4];
    _Pragma("unroll")
    for (int i = 0; i < MT; i++)
        _Pragma("unroll")
        for (int j = 0; j < NT; j++)
            _Pragma("unroll")
            for (int r = 0; r < 4; r++) acc[i][j][r] = 0.0f;
    if (kt0 < kt1) {
        aload(0, kt0);
        bload(kt0);
        bstore(0);
        cp_wait<0>();
    }
    __syncthreads();
    /* ldmatrix lane addresses (16-byte rows = 8 bf16 / 4 f32): A rows (lane & 15), k half
     * (lane >> 4); B columns (lane & 7) + 8 (lane >> 4), k half ((lane >> 3) & 1) */
    const int ar = wm0 + (lane & 15), ak = (lane >> 4) * (KSTEP / 2);
    const int bn = wn0 + (lane & 7) + (lane >> 4) * 8, bk = ((lane >> 3) & 1) * (KSTEP / 2);
    for (int kt = kt0; kt < kt1; kt++) {
        const int s = (kt - kt0) & 1;
        const bool more = kt + 1 < kt1;
        if (more) {
            aload(s ^ 1, kt + 1);
            bload(kt + 1);
        }
        if (dob) {
            _Pragma("unroll")
            for (int r = 0; r < A_PER; r++) {
                int i = tid + r * NTH, row = i / (BK / EPV), ch = i % (BK / EPV);
                uint4 v = *(const uint4 *)&As[s][row][EPV * ch];
#if PREC == 2
                unsigned w4[4] = {v.x, v.y, v.z, v.w};
                _Pragma("unroll")
                for (int e = 0; e < 4; e++)
                    dbs[r] += __uint_as_float(w4[e] << 16) + __uint_as_float(w4[e] & 0xffff0000u);
#else
                dbs[r] += (__uint_as_float(v.x) + __uint_as_float(v.y)) + (__uint_as_float(v.z) + __uint_as_float(v.w));
#endif
            }
        }
        _Pragma("unroll")
        for (int kk = 0; kk < BK; kk += KSTEP) {
            unsigned a[MT][4], b[NT / 2][4];
            _Pragma("unroll")
            for (int i = 0; i < MT; i++) ldm4(a[i], &As[s][ar + 16 * i][kk + ak]);
            _Pragma("unroll")
            for (int j = 0; j < NT / 2; j++) ldm4(b[j], &Bs[s][bn + 16 * j][kk + bk]);
            _Pragma("unroll")
            for (int i = 0; i < MT; i++)
                _Pragma("unroll")
                for (int j = 0; j < NT; j++) mma(acc[i][j], a[i], &b[j >> 1][2 * (j & 1)]);
        }
        if (more) bstore(s ^ 1);
        cp_wait<0>();
        __syncthreads();
    }
    if (kt0 >= kt1) return;
    if (dob) {
        _Pragma("unroll")
        for (int r = 0; r < A_PER; r++) {
            float v = dbs[r];
            _Pragma("unroll")
            for (int o = 1; o < BK / EPV; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
            int i = tid + r * NTH, row = i / (BK / EPV), ch = i % (BK / EPV), o = m0 + row;
            if (ch == 0 && o < p.O) atomicAdd(p.db + o, v);
        }
    }
    /* epilogue: column pairs (2t, 2t + 1) are adjacent dw elements: one 8-byte red where the
     * pair is 8-byte aligned (C even), else two atomics */
    _Pragma("unroll")
    for (int i = 0; i < MT; i++)
        _Pragma("unroll")
        for (int h = 0; h < 2; h++) {
            int m = m0 + wm0 + 16 * i + g + 8 * h;
            if (m >= p.O) continue;
            float *row = p.dw + (long long)m * J;
            _Pragma("unroll")
            for (int j = 0; j < NT; j++) {
                int n = 3 * q0 + wn0 + 8 * j + 2 * t;
                float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
                if (n + 1 < J && ((unsigned long long)(row + n) & 7) == 0) ig_red2(row + n, v0, v1);
                else {
                    if (n < J) atomicAdd(row + n, v0);
                    if (n + 1 < J) atomicAdd(row + n + 1, v1);
                }
            }
        }
}

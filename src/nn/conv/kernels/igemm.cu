// The implicit-GEMM convolution kernels (NVRTC), specialised by
// defines (-D options) from conv_cuda_igemm.c:
//   MODE    0: forward-style conv  out[n][o][p] (+)= sum_k A(m=(n,p), k) B(k, o), gathered per
//              32-wide k tile (the forward pass, and the data gradient of a stride-1 conv as a
//              forward conv of dy with the flipped, transposed weights)
//           1: the same with halo reuse (stride 1): a block owns whole output rows; a k step is
//              CB channels, whose input rows (+ halo) are loaded once and read by every tap
//           2: weight gradient     out[o][j] += sum_k dy[n][o][p] X(k=(n,p), j)
//           3: weight gradient with halo reuse (stride 1): dy rows and the x halo of 32
//              channels loaded once per step of whole output rows, read by every tap
//           Every mode may split its reduction over blockIdx.z (atomic adds).
//   PREC    0 exact fp32 (FFMA), 1 tf32 (mma m16n8k8), 2 bf16 (mma m16n8k16; fp32 operands
//           rounded to bf16)
//   BM, BN  block tile (rows m, columns n); WM x WN warps (= 8); BK = 32; STAGES cp.async stages
//   KS      kernel size (1 or 3), STRIDE (1 or 2); CB channels per MODE 1 step (8, bf16 16)
//   ABF     1: bf16-stored activations (PREC 2; every mode): MODE 0 / 1 read a bf16 image and
//           bf16 weights (nb_conv_wprep in wprep.cu converts them), MODE 2 / 3 bf16 dy and x; 0: f32
//   OBF     1: MODE 0 / 1 write a bf16 output (bias added, or the old value read, in f32 first;
//           no atomic split: the host splits into f32 scratch instead)
//
// MODE 0/2 reduction order k = (kk, c): kernel tap outer, channel inner (weights pre-arranged as
// wr[o][kk][c]), so a 32-wide k tile has a single tap when C % 32 == 0 (MODE 0 requires it):
// the gather's bounds test and address are computed once per tile and row. MODE 2's columns
// j = kk * C + c index the same arrangement (dwr[o][kk][c], rearranged afterwards); its k tiles
// lie within one image (P % 32 == 0).
//
// Shared memory per stage: MODE 0 As[BK][BM+APAD] (m contiguous: the gather is coalesced along
// output pixels; for bf16 with k pairs interleaved), MODE 2 As[BM][BK+4]; Bs[BN][BK+4] (k
// contiguous); MODE 1/3 halo planes [c][row][W+8] (4 zero columns each side). Padding keeps
// the fragment loads (mostly) free of bank conflicts. Loads are cp.async (4-byte with zero fill
// for gathers and padding, 16-byte for contiguous rows). Defining NB_IG_HOST_EMU drops the PTX
// helpers of ptx.cuh (cp4, cp16, cp_commit, cp_wait, pack_bf16, ig_bf2f, ig_f2bf, ig_red2,
// mma_tf32, mma_bf16) so that a host emulation can supply its own: tests/emu/conv_emu.sh runs any
// configuration on the CPU.
//
// The bf16-activation variants (ABF = 1) are igemm_bf16.cuh, included at their #if branches;
// the pieces both share (pipeline, geometry, tile updates) are macros of igemm_pipe.cuh.
//! nvrtc-check: MODE=0 PREC=1 BM=128 BN=64 WM=4 WN=2 STAGES=3 KS=3 STRIDE=1 CB=8 ABF=0 OBF=0
//! nvrtc-check: MODE=1 PREC=2 BM=128 BN=64 WM=4 WN=2 STAGES=3 KS=3 STRIDE=1 CB=16 ABF=1 OBF=1
//! nvrtc-check: MODE=2 PREC=2 BM=64 BN=64 WM=2 WN=4 STAGES=3 KS=3 STRIDE=1 CB=8 ABF=1 OBF=0
//! nvrtc-check: MODE=3 PREC=0 BM=64 BN=64 WM=2 WN=4 STAGES=2 KS=3 STRIDE=1 CB=8 ABF=0 OBF=0
#define BK 32
#ifndef ABF
#define ABF 0
#endif
#ifndef OBF
#define OBF 0
#endif
#ifndef CB
#define CB 8
#endif
#define NTH 256
#define KK (KS * KS)
#define WTM (BM / WM)
#define WTN (BN / WN)
#define MT (WTM / 16)
#define NT (WTN / 8)
#define LDB (BK + 4)
#if MODE == 0 && PREC == 2
/* k pairs interleaved, As[k / 2][m][k % 2]: a bf16 fragment's two k values are one 8-byte load */
#define APAD 4
#define A_ELEMS (BK * (BM + APAD))
#define A_AT(s, m, k) As[(s) * A_ELEMS + ((k) >> 1) * (2 * (BM + APAD)) + 2 * (m) + ((k) & 1)]
#elif MODE == 0
#define APAD 8
#define A_ELEMS (BK * (BM + APAD))
#define A_AT(s, m, k) As[(s) * A_ELEMS + (k) * (BM + APAD) + (m)]
#else
#define A_ELEMS (BM * LDB)
#define A_AT(s, m, k) As[(s) * A_ELEMS + (m) * LDB + (k)]
#endif
#define B_ELEMS (BN * LDB)
#define B_AT(s, k, n) Bs[(s) * B_ELEMS + (n) * LDB + (k)]
/* (k, k + 1) as one float2, k even */
#define A_PAIR(s, m, k) (*(const float2 *)&A_AT(s, m, k))
#define B_PAIR(s, k, n) (*(const float2 *)&B_AT(s, k, n))
struct IgP {
    const float *a;    /* MODE 0: image [N][C][H][W]; MODE 2: dy [N][O][P] */
    const float *b;    /* MODE 0: weights wr [O][KK][C]; MODE 2: image x [N][C][H][W] */
    const float *bias; /* MODE 0, may be NULL */
    float *out;        /* MODE 0: [N][O][OH][OW]; MODE 2: dwr [O][KK][C] */
    int N, C, H, W, O, OH, OW, pad;
    int accum;         /* MODE 0: out += instead of out = (2: atomically, split k); MODE 2 / 3
                        * with ABF: 1 = each split's partial sums stored at out + z * size */
    int kt_per_split;  /* k tiles per blockIdx.z (MODE 0: 0 = all) */
};
#ifndef NB_IG_HOST_EMU
#include "ptx.cuh"
#endif
#include "igemm_pipe.cuh"
#if MODE == 3 && ABF
#include "igemm_bf16.cuh"
#elif MODE == 3
/* weight gradient with halo reuse (stride 1): block = BM output channels x 32 input channels
 * x all KK taps; a k step = RT whole output rows of one image (KP = RT * OW pixels): dy rows
 * [BM][KP] and the x halo [32][RT+KS-1][W+8] are loaded once and reused by every tap.
 * Partial sums over the steps of blockIdx.z are added atomically into dw [O][C][KK]. */
#define C3 32
extern "C" __global__ void __launch_bounds__(NTH) nb_conv_igemm(IgP p) {
    extern __shared__ __align__(16) float smem[];
    IG_THREAD_IDS
    const int wm0 = (warp >> 2) * (BM / 2), cg = (warp & 3) * 8;
    const int P = p.OH * p.OW;
    const int RT = min(p.OH, 128 / p.OW), KP = RT * p.OW, LDA = KP + 4;
    const int HR = RT + KS - 1, RS = p.W + 8;
    const int CS = HR * RS + (4 - (HR * RS) % 32 + 32) % 32;
    const int A_EL = BM * LDA, B_EL = C3 * CS;
    float *As = smem, *Bs = smem + STAGES * A_EL;
    IG_ROWS_SPLIT
    IG_HALO_ZERO(Bs, C3, 0.0f)
    const int WQ = p.W >> 2, KQ = KP >> 2;
    auto load = [&](int s, int step) {
        const int n = step / tpi, r0 = (step - n * tpi) * RT;
        float *Ad = As + s * A_EL;
        for (int i = tid; i < BM * KQ; i += NTH) {
            int q = i % KQ, row = i / KQ, o = m0 + row;
            bool v = o < p.O;
            cp16(Ad + row * LDA + 4 * q,
                 v ? p.a + ((long long)n * p.O + o) * P + r0 * p.OW + 4 * q : p.a, v);
        }
        float *Bd = Bs + s * B_EL;
        for (int i = tid; i < C3 * HR * WQ; i += NTH) {
            int q = i % WQ, r = i / WQ, hr = r % HR, c = r / HR;
            int ih = r0 - p.pad + hr;
            bool v = ih >= 0 && ih < p.H;
            cp16(Bd + c * CS + hr * RS + 4 + 4 * q,
                 v ? p.b + (((long long)n * p.C + c0 + c) * p.H + ih) * p.W + 4 * q : p.b, v);
        }
    };
    IG_ACC_ZERO(KK)
    IG_CP_PROLOGUE(load)
    for (int kt = kt0; kt < kt1; kt++) {
        IG_CP_STEP(load)
        const float *Ah = As + s * A_EL, *Bh = Bs + s * B_EL + cg * CS;
#if PREC == 0
        for (int k8 = 0; k8 < KP; k8 += 8) {
            const int row = k8 / p.OW, hb0 = row * RS + (k8 - row * p.OW) + 4 - p.pad;
            _Pragma("unroll")
            for (int kk = 0; kk < 8; kk++) {
                float av[MT][2];
                _Pragma("unroll")
                for (int i = 0; i < MT; i++) {
                    av[i][0] = Ah[(wm0 + i * 16 + g) * LDA + k8 + kk];
                    av[i][1] = Ah[(wm0 + i * 16 + g + 8) * LDA + k8 + kk];
                }
                _Pragma("unroll")
                for (int j = 0; j < KK; j++) {
                    const float *bp = Bh + 2 * t * CS + hb0 + kk + (j / KS) * RS + j % KS;
                    float b0 = bp[0], b1 = bp[CS];
                    _Pragma("unroll")
                    for (int i = 0; i < MT; i++) {
                        acc[i][j][0] = fmaf(av[i][0], b0, acc[i][j][0]);
                        acc[i][j][1] = fmaf(av[i][0], b1, acc[i][j][1]);
                        acc[i][j][2] = fmaf(av[i][1], b0, acc[i][j][2]);
                        acc[i][j][3] = fmaf(av[i][1], b1, acc[i][j][3]);
                    }
                }
            }
        }
#elif PREC == 1
        for (int k8 = 0; k8 < KP; k8 += 8) {
            const int row = k8 / p.OW, hb = row * RS + (k8 - row * p.OW) + t + 4 - p.pad;
            unsigned a[MT][4];
            _Pragma("unroll")
            for (int i = 0; i < MT; i++) {
                const float *ap = Ah + (wm0 + i * 16 + g) * LDA + k8 + t;
                a[i][0] = __float_as_uint(ap[0]);
                a[i][1] = __float_as_uint(ap[8 * LDA]);
                a[i][2] = __float_as_uint(ap[4]);
                a[i][3] = __float_as_uint(ap[8 * LDA + 4]);
            }
            _Pragma("unroll")
            for (int j = 0; j < KK; j++) {
                const float *bp = Bh + g * CS + hb + (j / KS) * RS + j % KS;
                unsigned b[2] = {__float_as_uint(bp[0]), __float_as_uint(bp[4])};
                _Pragma("unroll")
                for (int i = 0; i < MT; i++) mma_tf32(acc[i][j], a[i], b);
            }
        }
#else
        for (int k16 = 0; k16 < KP; k16 += 16) {
            const int ra = k16 / p.OW, rb = (k16 + 8) / p.OW;
            const int hba = ra * RS + (k16 - ra * p.OW) + 2 * t + 4 - p.pad;
            const int hbb = rb * RS + (k16 + 8 - rb * p.OW) + 2 * t + 4 - p.pad;
            unsigned a[MT][4];
            _Pragma("unroll")
            for (int i = 0; i < MT; i++) {
                const float *ap = Ah + (wm0 + i * 16 + g) * LDA + k16 + 2 * t;
                float2 v0 = *(const float2 *)ap, v1 = *(const float2 *)(ap + 8 * LDA);
                float2 v2 = *(const float2 *)(ap + 8), v3 = *(const float2 *)(ap + 8 * LDA + 8);
                a[i][0] = pack_bf16(v0.x, v0.y);
                a[i][1] = pack_bf16(v1.x, v1.y);
                a[i][2] = pack_bf16(v2.x, v2.y);
                a[i][3] = pack_bf16(v3.x, v3.y);
            }
            _Pragma("unroll")
            for (int j = 0; j < KK; j++) {
                const int toff = g * CS + (j / KS) * RS + j % KS;
                const float *pa = Bh + toff + hba, *pb = Bh + toff + hbb;
                unsigned b[2] = {pack_bf16(pa[0], pa[1]), pack_bf16(pb[0], pb[1])};
                _Pragma("unroll")
                for (int i = 0; i < MT; i++) mma_bf16(acc[i][j], a[i], b);
            }
        }
#endif
    }
    cp_wait<0>();
    IG_DW_EPILOGUE(
        _Pragma("unroll")
        for (int j = 0; j < KK; j++) atomicAdd(d + j, acc[i][j][2 * h + e]);
    )
}
#else /* MODE 0, 1, 2 */
#if MODE == 2 && ABF
#include "igemm_bf16.cuh"
#elif MODE == 0 && ABF
#include "igemm_bf16.cuh"
#elif MODE != 1
extern "C" __global__ void __launch_bounds__(NTH) nb_conv_igemm(IgP p) {
    extern __shared__ __align__(16) float smem[];
    float *As = smem, *Bs = smem + STAGES * A_ELEMS;
    IG_THREAD_IDS
    IG_WARP_TILE
    const int HW = p.H * p.W, P = p.OH * p.OW;
#if MODE == 0
    IG_GATHER_SPLIT
    /* A: this thread's output pixel (fixed) and k rows ak0 + i * ASTEP */
    const int ASTEP = NTH / BM, am = tid % BM, ak0 = tid / BM;
    IG_GATHER_PIXEL(float, p.a)
    /* B: rows of wr, 16 bytes per copy */
    const int bk4 = (tid & 7) * 4, bn0 = tid >> 3;
    auto load = [&](int s, int kt) {
        int k0 = kt * BK, kk = k0 / p.C, c0 = k0 - kk * p.C;
        int ih = ih0 + kk / KS, iw = iw0 + kk % KS;
        bool v = mval && ih >= 0 && ih < p.H && iw >= 0 && iw < p.W;
        const float *src = v ? xb + (long long)(c0 + ak0) * HW + ih * p.W + iw : p.a;
        _Pragma("unroll")
        for (int i = 0; i < BK / ASTEP; i++)
            cp4(&A_AT(s, am, ak0 + i * ASTEP), v ? src + (long long)i * ASTEP * HW : p.a, v);
        _Pragma("unroll")
        for (int i = 0; i < BN / 32; i++) {
            int n = n0 + bn0 + i * 32; bool bv = n < Nn;
            cp16(&B_AT(s, bk4, bn0 + i * 32), bv ? p.b + (long long)n * Kd + k0 + bk4 : p.b, bv);
        }
    };
#else
    IG_WG_SPLIT
    /* A: dy rows (o), 16 bytes per copy */
    const int ak4 = (tid & 7) * 4, am0 = tid >> 3;
    /* B: this thread's k column (fixed within a tile) and columns j = bn0 + 8 i */
    const int bk = tid & 31, bn0 = tid >> 5;
    IG_COL_TAPS(BN / 8, bn0, 8)
    auto load = [&](int s, int kt) {
        int k0 = kt * BK, nb = k0 / P, p0 = k0 - nb * P;
        _Pragma("unroll")
        for (int i = 0; i < BM / 32; i++) {
            int o = m0 + am0 + i * 32; bool v = o < M;
            cp16(&A_AT(s, am0 + i * 32, ak4),
                 v ? p.a + ((long long)nb * p.O + o) * P + p0 + ak4 : p.a, v);
        }
        int pp = p0 + bk, oh = pp / p.OW, ow = pp - oh * p.OW;
        int ihb = oh * STRIDE - p.pad, iwb = ow * STRIDE - p.pad;
        IG_TAP_MASK(mask)
        const float *xb = p.b + (long long)nb * p.C * HW + ihb * p.W + iwb;
        _Pragma("unroll")
        for (int i = 0; i < BN / 8; i++) {
            bool v = (mask >> jbit[i]) & 1u;
            cp4(&B_AT(s, bk, bn0 + i * 8), v ? xb + joff[i] : p.b, v);
        }
    };
#endif
    IG_ACC_ZERO(NT)
    IG_CP_PROLOGUE(load)
    for (int kt = kt0; kt < kt1; kt++) {
        IG_CP_STEP(load)
#if PREC == 0
        /* exact fp32 (FFMA): the thread owns the same 2 MT x 2 NT outputs as in the mma layout */
        _Pragma("unroll 4")
        for (int k = 0; k < BK; k++) {
            float av[MT][2], bv[NT][2];
            _Pragma("unroll")
            for (int i = 0; i < MT; i++) {
                av[i][0] = A_AT(s, wm0 + i * 16 + g, k);
                av[i][1] = A_AT(s, wm0 + i * 16 + g + 8, k);
            }
            _Pragma("unroll")
            for (int j = 0; j < NT; j++) {
                bv[j][0] = B_AT(s, k, wn0 + j * 8 + 2 * t);
                bv[j][1] = B_AT(s, k, wn0 + j * 8 + 2 * t + 1);
            }
            IG_FMA_TILE
        }
#elif PREC == 1
        _Pragma("unroll")
        for (int k8 = 0; k8 < BK; k8 += 8) {
            unsigned a[MT][4], b[NT][2];
            _Pragma("unroll")
            for (int i = 0; i < MT; i++) {
                int m = wm0 + i * 16 + g;
                a[i][0] = __float_as_uint(A_AT(s, m, k8 + t));
                a[i][1] = __float_as_uint(A_AT(s, m + 8, k8 + t));
                a[i][2] = __float_as_uint(A_AT(s, m, k8 + t + 4));
                a[i][3] = __float_as_uint(A_AT(s, m + 8, k8 + t + 4));
            }
            _Pragma("unroll")
            for (int j = 0; j < NT; j++) {
                int n = wn0 + j * 8 + g;
                b[j][0] = __float_as_uint(B_AT(s, k8 + t, n));
                b[j][1] = __float_as_uint(B_AT(s, k8 + t + 4, n));
            }
            IG_MMA_TILE(mma_tf32)
        }
#else
        _Pragma("unroll")
        for (int k16 = 0; k16 < BK; k16 += 16) {
            unsigned a[MT][4], b[NT][2];
            _Pragma("unroll")
            for (int i = 0; i < MT; i++) {
                int m = wm0 + i * 16 + g, k = k16 + 2 * t;
                float2 v0 = A_PAIR(s, m, k), v1 = A_PAIR(s, m + 8, k);
                float2 v2 = A_PAIR(s, m, k + 8), v3 = A_PAIR(s, m + 8, k + 8);
                a[i][0] = pack_bf16(v0.x, v0.y);
                a[i][1] = pack_bf16(v1.x, v1.y);
                a[i][2] = pack_bf16(v2.x, v2.y);
                a[i][3] = pack_bf16(v3.x, v3.y);
            }
            _Pragma("unroll")
            for (int j = 0; j < NT; j++) {
                int n = wn0 + j * 8 + g, k = k16 + 2 * t;
                float2 v0 = B_PAIR(s, k, n), v1 = B_PAIR(s, k + 8, n);
                b[j][0] = pack_bf16(v0.x, v0.y);
                b[j][1] = pack_bf16(v1.x, v1.y);
            }
            IG_MMA_TILE(mma_bf16)
        }
#endif
    }
    cp_wait<0>();
#elif ABF /* MODE 1, bf16 activations (PREC 2, CB 16) */
#include "igemm_bf16.cuh"
#else /* MODE 1 */
#define CSMOD (PREC == 2 ? 4 : 8)
#define BRS (KK * CB + (PREC == 2 ? 8 : 4))
extern "C" __global__ void __launch_bounds__(NTH) nb_conv_igemm(IgP p) {
    extern __shared__ __align__(16) float smem[];
    IG_THREAD_IDS
    IG_WARP_TILE
    const int P = p.OH * p.OW, M = p.N * P, Nn = p.O;
    const int R = BM / p.OW, HR = R + KS - 1, RS = p.W + 8;
    const int CS = HR * RS + (CSMOD - (HR * RS) % 32 + 32) % 32;
    const int A_EL = CB * CS, B_EL = BN * BRS;
    float *As = smem, *Bs = smem + STAGES * A_EL;
    IG_HALO_SPLIT
    const float *xb = p.a + (long long)nb * p.C * p.H * p.W;
    IG_HALO_ZERO(As, CB, 0.0f)
    IG_HALO_PIXELS
    const int WQ = p.W >> 2;
    auto load = [&](int s, int cc) {
        const int c0 = cc * CB;
        float *Ad = As + s * A_EL;
        for (int i = tid; i < CB * HR * WQ; i += NTH) {
            int q = i % WQ, r = i / WQ, hr = r % HR, c = r / HR;
            int ih = oh0 - p.pad + hr;
            bool v = ih >= 0 && ih < p.H && c0 + c < p.C;
            cp16(Ad + c * CS + hr * RS + 4 + 4 * q,
                 v ? xb + ((long long)(c0 + c) * p.H + ih) * p.W + 4 * q : p.a, v);
        }
        float *Bd = Bs + s * B_EL;
        const float *wsrc = p.b + ((long long)cc * p.O + n0) * (KK * CB);
        for (int i = tid; i < BN * (KK * CB / 4); i += NTH) {
            int q = i % (KK * CB / 4), n = i / (KK * CB / 4);
            bool v = n0 + n < Nn;
            cp16(Bd + n * BRS + 4 * q, v ? wsrc + (long long)n * (KK * CB) + 4 * q : p.b, v);
        }
    };
    IG_ACC_ZERO(NT)
    IG_CP_PROLOGUE(load)
    for (int kt = kt0; kt < kt1; kt++) {
        IG_CP_STEP(load)
        const float *Ah = As + s * A_EL, *Bh = Bs + s * B_EL;
        _Pragma("unroll")
        for (int tap = 0; tap < KK; tap++) {
            const int toff = (tap / KS) * RS + tap % KS;
#if PREC == 0
            _Pragma("unroll")
            for (int k = 0; k < CB; k++) {
                float av[MT][2], bv[NT][2];
                _Pragma("unroll")
                for (int i = 0; i < MT; i++) {
                    av[i][0] = Ah[k * CS + hb[i][0] + toff];
                    av[i][1] = Ah[k * CS + hb[i][1] + toff];
                }
                _Pragma("unroll")
                for (int j = 0; j < NT; j++) {
                    const float *bp = Bh + (wn0 + j * 8 + 2 * t) * BRS + tap * CB + k;
                    bv[j][0] = bp[0];
                    bv[j][1] = bp[BRS];
                }
                IG_FMA_TILE
            }
#elif PREC == 1
            unsigned a[MT][4], b[NT][2];
            _Pragma("unroll")
            for (int i = 0; i < MT; i++) {
                a[i][0] = __float_as_uint(Ah[t * CS + hb[i][0] + toff]);
                a[i][1] = __float_as_uint(Ah[t * CS + hb[i][1] + toff]);
                a[i][2] = __float_as_uint(Ah[(t + 4) * CS + hb[i][0] + toff]);
                a[i][3] = __float_as_uint(Ah[(t + 4) * CS + hb[i][1] + toff]);
            }
            _Pragma("unroll")
            for (int j = 0; j < NT; j++) {
                const float *bp = Bh + (wn0 + j * 8 + g) * BRS + tap * CB + t;
                b[j][0] = __float_as_uint(bp[0]);
                b[j][1] = __float_as_uint(bp[4]);
            }
            IG_MMA_TILE(mma_tf32)
#else
            unsigned a[MT][4], b[NT][2];
            _Pragma("unroll")
            for (int i = 0; i < MT; i++) {
                const float *q0 = Ah + 2 * t * CS + toff, *q8 = q0 + 8 * CS;
                a[i][0] = pack_bf16(q0[hb[i][0]], q0[CS + hb[i][0]]);
                a[i][1] = pack_bf16(q0[hb[i][1]], q0[CS + hb[i][1]]);
                a[i][2] = pack_bf16(q8[hb[i][0]], q8[CS + hb[i][0]]);
                a[i][3] = pack_bf16(q8[hb[i][1]], q8[CS + hb[i][1]]);
            }
            _Pragma("unroll")
            for (int j = 0; j < NT; j++) {
                const float *bp = Bh + (wn0 + j * 8 + g) * BRS + tap * CB + 2 * t;
                float2 v0 = *(const float2 *)bp, v1 = *(const float2 *)(bp + 8);
                b[j][0] = pack_bf16(v0.x, v0.y);
                b[j][1] = pack_bf16(v1.x, v1.y);
            }
            IG_MMA_TILE(mma_bf16)
#endif
        }
    }
    cp_wait<0>();
#endif /* MODE 1 */
    /* epilogue: accumulator (i, j, r) is row wm0 + 16 i + g + 8 (r / 2), column
     * wn0 + 8 j + 2 t + (r % 2) of the block tile */
    _Pragma("unroll")
    for (int i = 0; i < MT; i++)
        _Pragma("unroll")
        for (int h = 0; h < 2; h++) {
            int m = m0 + wm0 + i * 16 + g + 8 * h;
            if (m >= M) continue;
#if MODE != 2
            int nb = m / P, pp = m - nb * P;
            const long long ooff = (long long)nb * p.O * P + pp;
            float *orow = p.out + ooff;
#else
            float *orow = p.out + (long long)m * Nn;
#endif
            _Pragma("unroll")
            for (int j = 0; j < NT; j++)
                _Pragma("unroll")
                for (int e = 0; e < 2; e++) {
                    int n = n0 + wn0 + j * 8 + 2 * t + e;
                    if (n >= Nn) continue;
                    float v = acc[i][j][2 * h + e];
#if MODE != 2 && OBF
                    unsigned short *o = (unsigned short *)p.out + ooff + (long long)n * P;
                    if (p.accum) v += ig_bf2f(*o);
                    else if (p.bias) v += p.bias[n];
                    *o = ig_f2bf(v);
#elif MODE != 2
                    float *o = orow + (long long)n * P;
                    if (p.accum == 2) atomicAdd(o, v);
                    else if (p.accum) *o += v;
                    else *o = p.bias ? v + p.bias[n] : v;
#else
                    atomicAdd(orow + n, v);
#endif
                }
        }
}
#endif /* MODE 3 */
struct DwP { float *dwr; float *dw; int O, C; };
extern "C" __global__ void nb_conv_igemm_dw(DwP p) {
    long long total = (long long)p.O * p.C * KK;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        int kk = (int)(i % KK); long long r = i / KK;
        int c = (int)(r % p.C), o = (int)(r / p.C);
        long long j = ((long long)o * KK + kk) * p.C + c;
        p.dw[i] += p.dwr[j];
        p.dwr[j] = 0.0f;
    }
}

/* 3x3 stride-1 pad-1 convolution forward and data gradient with a vectorized im2col
 * (conv_cuda_fw4.h), bf16 activations at BF16 precision or f32 ones at TF32:
 *
 *   y[n][o][p] = b[o] + sum over (c, kh, kw) of w[o][c][kh][kw] x[n][c][p + (kh - 1, kw - 1)]
 *
 * as a GEMM with M = O rows, the pixels as columns and K = 9 C in the weights' own order
 * k = (c * 3 + kh) * 3 + kw, so A is the weight tensor itself ([O][9C] row-major: f32 at TF32,
 * a bf16 copy at BF16). The data gradient is the same convolution of dy with w flipped and
 * transposed (w'[c][o][kh][kw] = w[o][c][2 - kh][2 - kw], a small pre-pass). A block owns 64
 * rows x BN (64 or 128) pixels, all of K; per k step of 16 (c, kh) "triples" (48 k):
 *   A  w [64][48] by cp.async;
 *   B  [48 k][BN px]: a thread loads 16 bytes of one input row (c, h + kh - 1) plus the left and
 *      right neighbours and stores the three kw-shifted copies (as conv_cuda_wg4.c);
 * A fragments by ldmatrix, B by ldmatrix.trans (bf16) or scalar loads (tf32, rows padded to
 * stay conflict-free); two stages; mma.sync m16n8k16 bf16 / m16n8k8 tf32, f32 accumulation; the
 * epilogue adds the bias (or, accumulating, the old value) and stores y / dx in its dtype.
 * Needs C % 16 == 0 (input channels of the GEMM), W % 8 == 0, H W % 8 == 0. */
#include "nn/conv_cuda_fw4.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "jit/jit.h"
#include "nabla/nn_tape.h"
#include "nn/encoding_internal.h"

static const char nb_fw4_src[] =
    "/* prefix: #define PREC (2 bf16, 1 tf32), #define BN (64 or 128) */\n"
    "#define BM 64\n"
    "#define TRI 16 /* (c, kh) triples per k step */\n"
    "#define BK 48\n"
    "#define NTH 256\n"
    "#define MT 2          /* warp rows 32 */\n"
    "#define WN (BN / 4)   /* warp columns */\n"
    "#define NT (WN / 8)\n"
    "#if PREC == 2\n"
    "typedef unsigned short E;\n"
    "#define EPV 8\n"
    "#define LDA 56        /* 112-byte rows: ldmatrix conflict-free */\n"
    "#define LDN (BN + 8)  /* 16-byte aligned, conflict-free for ldmatrix.trans */\n"
    "#define KSTEP 16\n"
    "#else\n"
    "typedef float E;\n"
    "#define EPV 4\n"
    "#define LDA 52        /* 208-byte rows */\n"
    "#define LDN (BN + 8)  /* == 8 mod 32 words: the scalar B loads are conflict-free */\n"
    "#define KSTEP 8\n"
    "#endif\n"
    "#define GPR (BN / EPV)            /* pixel groups per B row */\n"
    "#define BTASKS (TRI * GPR)       /* B tasks (EPV pixels of one input row) per k step */\n"
    "#define B_PER ((BTASKS + NTH - 1) / NTH)\n"
    "#define ACH (BK / EPV)            /* 16-byte A chunks per row */\n"
    "struct Fw4P { const E *x; const E *w; const float *bias; E *y; int N, C, H, W, O, accum; };\n"
    "__device__ __forceinline__ unsigned smem_u32(const void *p) {\n"
    "    return (unsigned)__cvta_generic_to_shared(p);\n"
    "}\n"
    "__device__ __forceinline__ void cp16(void *dst, const void *src, bool v) {\n"
    "    asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16, %2;\\n\" ::\n"
    "                 \"r\"(smem_u32(dst)), \"l\"(src), \"r\"(v ? 16 : 0));\n"
    "}\n"
    "__device__ __forceinline__ void ldm4(unsigned *r, const void *p) {\n"
    "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\\n\"\n"
    "                 : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(smem_u32(p)));\n"
    "}\n"
    "__device__ __forceinline__ void ldm4t(unsigned *r, const void *p) {\n"
    "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\\n\"\n"
    "                 : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(smem_u32(p)));\n"
    "}\n"
    "__device__ __forceinline__ void mma(float *c, const unsigned *a, const unsigned *b) {\n"
    "#if PREC == 2\n"
    "    asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 \"\n"
    "#else\n"
    "    asm volatile(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 \"\n"
    "#endif\n"
    "                 \"{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\\n\"\n"
    "                 : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
    "                 : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]));\n"
    "}\n"
    "__device__ __forceinline__ void shifts(uint4 v, unsigned l, unsigned r, uint4 *k0, uint4 *k2) {\n"
    "#if PREC == 2\n"
    "    unsigned s0 = __byte_perm(v.x, v.y, 0x5432), s1 = __byte_perm(v.y, v.z, 0x5432);\n"
    "    unsigned s2 = __byte_perm(v.z, v.w, 0x5432);\n"
    "    *k0 = make_uint4(__byte_perm(l, v.x, 0x5432), s0, s1, s2);\n"
    "    *k2 = make_uint4(s0, s1, s2, __byte_perm(v.w, r, 0x5432));\n"
    "#else\n"
    "    *k0 = make_uint4(l, v.x, v.y, v.z);\n"
    "    *k2 = make_uint4(v.y, v.z, v.w, r);\n"
    "#endif\n"
    "}\n"
    "__device__ __forceinline__ float ldv(const E *p) {\n"
    "#if PREC == 2\n"
    "    return __uint_as_float((unsigned)*p << 16);\n"
    "#else\n"
    "    return *p;\n"
    "#endif\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(NTH, 2) nb_conv_fw4(Fw4P p) {\n"
    "    extern __shared__ __align__(16) unsigned char smem[];\n"
    "    E (*As)[BM][LDA] = (E (*)[BM][LDA])smem;                         /* [2][BM][LDA] */\n"
    "    E (*Bs)[BK][LDN] = (E (*)[BK][LDN])(smem + 2 * BM * LDA * sizeof(E)); /* [2][BK][LDN] */\n"
    "    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;\n"
    "    const int g = lane >> 2, t = lane & 3;\n"
    "    const int wm0 = (warp >> 2) * 32, wn0 = (warp & 3) * WN;\n"
    "    const int P = p.H * p.W, K = 9 * p.C, nks = 3 * p.C / TRI;\n"
    "    const int m0 = blockIdx.y * BM, px0 = blockIdx.x * BN;\n"
    "    const long long NP = (long long)p.N * P;\n"
    "    auto aload = [&](int s, int ks) {\n"
    "        for (int i = tid; i < BM * ACH; i += NTH) {\n"
    "            int row = i / ACH, ch = i - row * ACH, o = m0 + row;\n"
    "            bool v = o < p.O;\n"
    "            cp16(&As[s][row][EPV * ch], v ? (const void *)(p.w + (long long)o * K + ks * BK + EPV * ch)\n"
    "                                          : (const void *)p.w, v);\n"
    "        }\n"
    "        asm volatile(\"cp.async.commit_group;\\n\" ::);\n"
    "    };\n"
    "    uint4 bv[B_PER]; unsigned bl[B_PER], br[B_PER];\n"
    "    auto bload = [&](int ks) {\n"
    "        _Pragma(\"unroll\")\n"
    "        for (int r = 0; r < B_PER; r++) {\n"
    "            int i = tid + r * NTH, tri = i / GPR, grp = i - tri * GPR;\n"
    "            if (i >= BTASKS) break;\n"
    "            int q = ks * TRI + tri, c = q / 3, kh = q - 3 * c;\n"
    "            long long pix = px0 + EPV * grp;\n"
    "            bv[r] = make_uint4(0u, 0u, 0u, 0u); bl[r] = 0u; br[r] = 0u;\n"
    "            if (pix < NP) {\n"
    "                int n = (int)(pix / P), pp = (int)(pix - (long long)n * P);\n"
    "                int oh = pp / p.W, ow = pp - oh * p.W, ih = oh + kh - 1;\n"
    "                if (ih >= 0 && ih < p.H) {\n"
    "                    const E *row = p.x + (((long long)n * p.C + c) * p.H + ih) * p.W + ow;\n"
    "                    bv[r] = *(const uint4 *)row;\n"
    "#if PREC == 2\n"
    "                    if (ow > 0) bl[r] = (unsigned)row[-1] << 16;\n"
    "                    if (ow + EPV < p.W) br[r] = (unsigned)row[EPV];\n"
    "#else\n"
    "                    if (ow > 0) bl[r] = __float_as_uint(row[-1]);\n"
    "                    if (ow + EPV < p.W) br[r] = __float_as_uint(row[EPV]);\n"
    "#endif\n"
    "                }\n"
    "            }\n"
    "        }\n"
    "    };\n"
    "    auto bstore = [&](int s) {\n"
    "        _Pragma(\"unroll\")\n"
    "        for (int r = 0; r < B_PER; r++) {\n"
    "            int i = tid + r * NTH, tri = i / GPR, grp = i - tri * GPR;\n"
    "            if (i >= BTASKS) break;\n"
    "            uint4 k0v, k2v;\n"
    "            shifts(bv[r], bl[r], br[r], &k0v, &k2v);\n"
    "            *(uint4 *)&Bs[s][3 * tri][EPV * grp] = k0v;\n"
    "            *(uint4 *)&Bs[s][3 * tri + 1][EPV * grp] = bv[r];\n"
    "            *(uint4 *)&Bs[s][3 * tri + 2][EPV * grp] = k2v;\n"
    "        }\n"
    "    };\n"
    "    float acc[MT][NT][4];\n"
    "    _Pragma(\"unroll\")\n"
    "    for (int i = 0; i < MT; i++)\n"
    "        _Pragma(\"unroll\")\n"
    "        for (int j = 0; j < NT; j++)\n"
    "            _Pragma(\"unroll\")\n"
    "            for (int r = 0; r < 4; r++) acc[i][j][r] = 0.0f;\n"
    "    aload(0, 0);\n"
    "    bload(0);\n"
    "    bstore(0);\n"
    "    asm volatile(\"cp.async.wait_group 0;\\n\" ::);\n"
    "    __syncthreads();\n"
    "    const int ar = wm0 + (lane & 15), ak = (lane >> 4) * (KSTEP / 2);\n"
    "#if PREC == 2\n"
    "    /* ldmatrix.trans of Bs[k][n]: matrices (k 0-7 | 8-15) x (n 0-7 | 8-15) */\n"
    "    const int bkr = (lane & 7) + ((lane >> 3) & 1) * 8, bnc = (lane >> 4) * 8;\n"
    "#endif\n"
    "    for (int ks = 0; ks < nks; ks++) {\n"
    "        const int s = ks & 1;\n"
    "        const bool more = ks + 1 < nks;\n"
    "        if (more) {\n"
    "            aload(s ^ 1, ks + 1);\n"
    "            bload(ks + 1);\n"
    "        }\n"
    "        _Pragma(\"unroll\")\n"
    "        for (int kk = 0; kk < BK; kk += KSTEP) {\n"
    "            unsigned a[MT][4], b[NT][2];\n"
    "            _Pragma(\"unroll\")\n"
    "            for (int i = 0; i < MT; i++) ldm4(a[i], &As[s][ar + 16 * i][kk + ak]);\n"
    "#if PREC == 2\n"
    "            _Pragma(\"unroll\")\n"
    "            for (int j = 0; j < NT; j += 2) {\n"
    "                unsigned r4[4];\n"
    "                ldm4t(r4, &Bs[s][kk + bkr][wn0 + 8 * j + bnc]);\n"
    "                b[j][0] = r4[0], b[j][1] = r4[1], b[j + 1][0] = r4[2], b[j + 1][1] = r4[3];\n"
    "            }\n"
    "#else\n"
    "            _Pragma(\"unroll\")\n"
    "            for (int j = 0; j < NT; j++) {\n"
    "                b[j][0] = __float_as_uint(Bs[s][kk + t][wn0 + 8 * j + g]);\n"
    "                b[j][1] = __float_as_uint(Bs[s][kk + t + 4][wn0 + 8 * j + g]);\n"
    "            }\n"
    "#endif\n"
    "            _Pragma(\"unroll\")\n"
    "            for (int i = 0; i < MT; i++)\n"
    "                _Pragma(\"unroll\")\n"
    "                for (int j = 0; j < NT; j++) mma(acc[i][j], a[i], b[j]);\n"
    "        }\n"
    "        if (more) bstore(s ^ 1);\n"
    "        asm volatile(\"cp.async.wait_group 0;\\n\" ::);\n"
    "        __syncthreads();\n"
    "    }\n"
    "    /* epilogue: pixel pairs (2t, 2t + 1) lie in one image row (W even) */\n"
    "    _Pragma(\"unroll\")\n"
    "    for (int i = 0; i < MT; i++)\n"
    "        _Pragma(\"unroll\")\n"
    "        for (int h = 0; h < 2; h++) {\n"
    "            int m = m0 + wm0 + 16 * i + g + 8 * h;\n"
    "            if (m >= p.O) continue;\n"
    "            float bias = p.bias ? p.bias[m] : 0.0f;\n"
    "            _Pragma(\"unroll\")\n"
    "            for (int j = 0; j < NT; j++) {\n"
    "                long long pix = px0 + wn0 + 8 * j + 2 * t;\n"
    "                if (pix >= NP) continue;\n"
    "                int n = (int)(pix / P), pp = (int)(pix - (long long)n * P);\n"
    "                E *dst = p.y + ((long long)n * p.O + m) * P + pp;\n"
    "                float v0 = acc[i][j][2 * h] + bias, v1 = acc[i][j][2 * h + 1] + bias;\n"
    "                if (p.accum) v0 += ldv(dst), v1 += ldv(dst + 1);\n"
    "#if PREC == 2\n"
    "                unsigned pk;\n"
    "                asm(\"cvt.rn.bf16x2.f32 %0, %1, %2;\\n\" : \"=r\"(pk) : \"f\"(v1), \"f\"(v0));\n"
    "                *(unsigned *)dst = pk;\n"
    "#else\n"
    "                *(float2 *)dst = make_float2(v0, v1);\n"
    "#endif\n"
    "            }\n"
    "        }\n"
    "}\n"
    "/* the weights as the GEMM's A: bf16 copy (flip 0), or flipped + transposed for the data\n"
    " * gradient: wr[c][o][kh][kw] = w[o][c][2 - kh][2 - kw] (flip 1); f32 or bf16 out */\n"
    "struct WprepP { const float *w; E *wr; int O, C, flip; };\n"
    "extern \"C\" __global__ void nb_conv_fw4_wprep(WprepP p) {\n"
    "    long long n = (long long)p.O * p.C * 9;\n"
    "    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
    "         i += (long long)gridDim.x * blockDim.x) {\n"
    "        long long src = i;\n"
    "        if (p.flip) { /* i indexes wr [C][O][9] */\n"
    "            int tap = (int)(i % 9); long long r = i / 9; int o = (int)(r % p.O), c = (int)(r / p.O);\n"
    "            src = ((long long)o * p.C + c) * 9 + (8 - tap);\n"
    "        }\n"
    "        float v = p.w[src];\n"
    "#if PREC == 2\n"
    "        unsigned short h; asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(v)); p.wr[i] = h;\n"
    "#else\n"
    "        p.wr[i] = v;\n"
    "#endif\n"
    "    }\n"
    "}\n";

const char *nb_conv_fw4_source(void) { return nb_fw4_src; }

typedef struct {
    const void *x, *w;
    const float *bias;
    void *y;
    int N, C, H, W, O, accum;
} nb_fw4_params;

typedef struct {
    const float *w;
    void *wr;
    int O, C, flip;
} nb_fw4_wprep_params;

#define NB_FW4_DEVS 16
typedef struct {
    nb_device *dev;
    nb_jit_kernel *k, *prep;
} nb_fw4_entry;
static nb_fw4_entry nb_fw4_cache[NB_FW4_DEVS][2][2]; /* [device index][bf16][BN 128] */
static pthread_mutex_t nb_fw4_lock = PTHREAD_MUTEX_INITIALIZER;

static nb_status nb_fw4_kernels(nb_device *dev, int bf16, int bn128, nb_fw4_entry *out) {
    int idx = nb_device_get_info(dev)->index;
    if (idx < 0 || idx >= NB_FW4_DEVS)
        return nb_error(NB_ERR_UNSUPPORTED, "conv2d (fw4): device index %d >= %d", idx, NB_FW4_DEVS);
    pthread_mutex_lock(&nb_fw4_lock);
    nb_fw4_entry e = nb_fw4_cache[idx][bf16][bn128];
    pthread_mutex_unlock(&nb_fw4_lock);
    if (e.dev != dev || !e.k) {
        char *src = malloc(sizeof nb_fw4_src + 64);
        if (!src) return nb_error(NB_ERR_OUT_OF_MEMORY, "conv2d (fw4): out of host memory");
        int n = snprintf(src, 64, "#define PREC %d\n#define BN %d\n", bf16 ? 2 : 1, bn128 ? 128 : 64);
        memcpy(src + n, nb_fw4_src, sizeof nb_fw4_src);
        e.dev = dev;
        nb_status s = nb_nn_cuda_kernel(dev, src, "nb_conv_fw4", &e.k);
        if (!s) s = nb_nn_cuda_kernel(dev, src, "nb_conv_fw4_wprep", &e.prep);
        free(src);
        NB_TRY(s);
        pthread_mutex_lock(&nb_fw4_lock);
        nb_fw4_cache[idx][bf16][bn128] = e;
        pthread_mutex_unlock(&nb_fw4_lock);
    }
    *out = e;
    return NB_OK;
}

/* the conv's input channels Cin (C forward, O data gradient) and outputs Cout */
static int nb_fw4_shape_ok(const nb_conv_dims *d, int precision, nb_dtype xdt, nb_dtype ydt, int64_t cin) {
    int dt_ok = (precision == NB_TAPE_BF16 && xdt == NB_BF16 && ydt == NB_BF16) ||
                (precision == NB_TAPE_TF32 && xdt == NB_F32 && ydt == NB_F32);
    return d && dt_ok && d->K == 3 && d->stride == 1 && d->pad == 1 && d->OH == d->H && d->OW == d->W &&
           d->W % 8 == 0 && cin % 16 == 0 && d->N * d->H * d->W < ((int64_t)1 << 31) &&
           d->N * d->C * d->H * d->W < ((int64_t)1 << 31) && d->N * d->O * d->H * d->W < ((int64_t)1 << 31);
}

int nb_conv_fw4_supports(const nb_conv_dims *d, int precision, nb_dtype xdt, nb_dtype ydt, int which) {
    return d && nb_fw4_shape_ok(d, precision, xdt, ydt, which ? d->O : d->C);
}

static int nb_fw4_env = -1;
void nb_conv_fw4_enable(int on) { nb_fw4_env = on; }
int nb_conv_fw4_preferred(const nb_conv_dims *d, int precision, nb_dtype xdt, nb_dtype ydt, int which) {
    if (nb_fw4_env < 0) {
        const char *e = getenv("NABLA_CONV_FW4");
        nb_fw4_env = e && !strcmp(e, "0") ? 0 : 1;
    }
    return nb_fw4_env && nb_conv_fw4_supports(d, precision, xdt, ydt, which);
}

/* out [N][cout][H][W] (+)= conv of in [N][cin][H][W] with wr [cout][cin * 9] (GEMM layout) */
static nb_status nb_fw4_run(nb_device *dev, const nb_fw4_entry *e, int bf16, int bn128,
                            const void *in, const void *wr, const float *bias, void *out, int64_t N,
                            int64_t cin, int64_t H, int64_t W, int64_t cout, int accum) {
    int64_t np = N * H * W, bn = bn128 ? 128 : 64;
    nb_fw4_params p = {in, wr, bias, out, (int)N, (int)cin, (int)H, (int)W, (int)cout, accum};
    const unsigned grid[3] = {(unsigned)((np + bn - 1) / bn), (unsigned)((cout + 63) / 64), 1};
    const unsigned block[3] = {256, 1, 1};
    /* two stages of A [64][LDA] and B [48][BN + 8]: LDA 56 bf16 / 52 f32 */
    unsigned smem = bf16 ? (unsigned)(2 * (64 * 56 + 48 * (bn + 8)) * 2)
                         : (unsigned)(2 * (64 * 52 + 48 * (bn + 8)) * 4);
    void *args[1] = {&p};
    return nb_cuda_launch(nb_jit_kernel_cuda_fn(e->k), grid, block, smem, NULL, args);
}

/* BN 64 where BN 128 would leave fewer than 2 blocks per SM */
static int nb_fw4_bn128(nb_device *dev, int64_t np, int64_t cout) {
    int sms = nb_device_get_info(dev)->multiprocessors;
    return ((np + 127) / 128) * ((cout + 63) / 64) >= 2 * (int64_t)(sms > 0 ? sms : 132);
}

static nb_status nb_fw4_prep(nb_device *dev, const nb_fw4_entry *e, int bf16, const float *w,
                             int64_t O, int64_t C, int flip, void **wr) {
    int64_t n = O * C * 9;
    float *buf;
    NB_TRY(nb_conv_scratch(dev, 1, (size_t)n * (bf16 ? 2 : 4), &buf));
    nb_fw4_wprep_params q = {w, buf, (int)O, (int)C, flip};
    NB_TRY(nb_jit_launch_cuda(e->prep, &q, sizeof q, n, NULL));
    *wr = buf;
    return NB_OK;
}

static nb_status nb_fw4_check(nb_device *dev, const nb_conv_dims *d, int precision, const void *a,
                              const void *b, const float *w, int which) {
    if (!dev || !d || !a || !b || !w) return nb_error(NB_ERR_INVALID_ARG, "conv2d (fw4): NULL argument");
    nb_dtype dt = precision == NB_TAPE_BF16 ? NB_BF16 : NB_F32;
    if (!nb_conv_fw4_supports(d, precision, dt, dt, which))
        return nb_error(NB_ERR_UNSUPPORTED,
                        "conv2d (fw4): needs BF16 (bf16 tensors) or TF32 (f32), 3x3, stride 1, pad 1, "
                        "W %% 8 == 0 and %s %% 16 == 0 (got C %lld, O %lld, %lldx%lld)",
                        which ? "O" : "C", (long long)d->C, (long long)d->O, (long long)d->H,
                        (long long)d->W);
    if (((uintptr_t)a | (uintptr_t)b) % 16)
        return nb_error(NB_ERR_INVALID_ARG, "conv2d (fw4): activations must be 16-byte aligned");
    return NB_OK;
}

nb_status nb_conv_fw4_forward(nb_device *dev, int precision, const nb_conv_dims *d, const void *x,
                              const float *w, const float *b, void *y) {
    NB_TRY(nb_fw4_check(dev, d, precision, x, y, w, 0));
    int bf16 = precision == NB_TAPE_BF16, big = nb_fw4_bn128(dev, d->N * d->H * d->W, d->O);
    nb_fw4_entry e;
    NB_TRY(nb_fw4_kernels(dev, bf16, big, &e));
    const void *wr = w; /* TF32: the f32 weights are the GEMM's A as they are */
    if (bf16) {
        void *t;
        NB_TRY(nb_fw4_prep(dev, &e, bf16, w, d->O, d->C, 0, &t));
        wr = t;
    }
    return nb_fw4_run(dev, &e, bf16, big, x, wr, b, y, d->N, d->C, d->H, d->W, d->O, 0);
}

nb_status nb_conv_fw4_dgrad(nb_device *dev, int precision, const nb_conv_dims *d, const float *w,
                            const void *dy, void *dx, int store) {
    NB_TRY(nb_fw4_check(dev, d, precision, dy, dx, w, 1));
    int bf16 = precision == NB_TAPE_BF16, big = nb_fw4_bn128(dev, d->N * d->H * d->W, d->C);
    nb_fw4_entry e;
    NB_TRY(nb_fw4_kernels(dev, bf16, big, &e));
    void *wr;
    NB_TRY(nb_fw4_prep(dev, &e, bf16, w, d->O, d->C, 1, &wr));
    return nb_fw4_run(dev, &e, bf16, big, dy, wr, NULL, dx, d->N, d->O, d->H, d->W, d->C, !store);
}

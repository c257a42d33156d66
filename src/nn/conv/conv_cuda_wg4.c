/* 3x3 stride-1 pad-1 weight gradient (conv_cuda_wg4.h), bf16 activations at BF16 precision or
 * f32 ones at TF32:
 *
 *   dw[o][c][kh][kw] += sum over n, h, w of dy[n][o][h][w] x[n][c][h + kh - 1][w + kw - 1]
 *
 * as a GEMM with M = O rows, 9 C columns in dw's own order j = (c * 3 + kh) * 3 + kw, and the
 * N H W pixels as the reduction. A block owns 64 rows x 192 columns (64 (c, kh) "triples" x the
 * three kw taps) and a range of 32-pixel k tiles (split over blockIdx.z, partial sums added with
 * 8-byte atomics into dw: no rearranging pass, no scratch; the blocks of column block 0 also
 * sum the dy rows they read into the bias gradient db when asked). Per k tile:
 *   A  dy [64 o][32 px] by cp.async (16-byte chunks: 8 bf16 / 4 f32 pixels);
 *   B  the 192 columns x 32 px: a thread loads 16 bytes of one x row (c, h + kh - 1) plus the
 *      left and right neighbours and stores the three kw-shifted copies (byte_perm for bf16) as
 *      three 16-byte rows: one vector load per three columns instead of one scalar gather per
 *      column and pixel (the implicit-GEMM MODE 2's cost, which made it 2.4x slower at 64 rows).
 * Fragments come from shared memory with ldmatrix (rows of 80 / 144 bytes: conflict-free);
 * mma.sync m16n8k16 bf16 or m16n8k8 tf32 (the f32 bits as they are, like the implicit-GEMM
 * kernels) with f32 accumulation; two stages (A by cp.async, B through registers, loaded a tile
 * ahead). Needs W % 8 == 0 and H W % 32 == 0 (a k tile lies in one image and each 8-pixel
 * group in one row). The CPU reference is conv2d's own (tape_ops_conv.c); the tests compare. */
#include "nn/conv/conv_cuda_wg4.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "jit/jit.h"
#include "nabla/nn_tape.h"
#include "nn/common/nn_common.h"

static const char nb_wg4_src[] =
    "/* PREC 2: bf16 x / dy, mma m16n8k16 bf16; PREC 1: f32 x / dy, mma m16n8k8 tf32 (the f32 bits\n"
    " * as they are, as the implicit-GEMM kernels) */\n"
    "#define BM 64\n"
    "#define BN 192\n"
    "#define TRI 64 /* (c, kh) triples per block: BN / 3 */\n"
    "#define BK 32\n"
    "#define NTH 256\n"
    "#define MT 2 /* 16-row tiles per warp (warp rows 32) */\n"
    "#define NT 6 /* 8-column tiles per warp (warp columns 48) */\n"
    "#if PREC == 2\n"
    "typedef unsigned short E;\n"
    "#define EPV 8   /* elements per 16 bytes */\n"
    "#define LDK 40  /* elements per smem row: 80 bytes; ldmatrix rows conflict-free */\n"
    "#define KSTEP 16\n"
    "#else\n"
    "typedef float E;\n"
    "#define EPV 4\n"
    "#define LDK 36  /* 144 bytes */\n"
    "#define KSTEP 8\n"
    "#endif\n"
    "#define A_PER (BM * BK / EPV / NTH) /* 16-byte A chunks per thread and k tile */\n"
    "#define B_PER (TRI * BK / EPV / NTH) /* B tasks (EPV pixels of one x row) per thread */\n"
    "struct Wg4P { const E *x, *dy; float *dw, *db; int N, C, H, W, O, kt_per_split; };\n"
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
    "__device__ __forceinline__ void red2(float *p, float a, float b) {\n"
    "    asm volatile(\"red.global.add.v2.f32 [%0], {%1, %2};\" :: \"l\"(p), \"f\"(a), \"f\"(b) : \"memory\");\n"
    "}\n"
    "/* the three kw-shifted copies of EPV pixels v (16 bytes) with left neighbour l, right r:\n"
    " * kw = 0: pixels -1 .. EPV-2, kw = 1: 0 .. EPV-1, kw = 2: 1 .. EPV */\n"
    "__device__ __forceinline__ void shifts(uint4 v, unsigned l, unsigned r, uint4 *k0, uint4 *k2) {\n"
    "#if PREC == 2\n"
    "    /* l: the left pixel in the high half; r: the right one in the low half */\n"
    "    unsigned s0 = __byte_perm(v.x, v.y, 0x5432), s1 = __byte_perm(v.y, v.z, 0x5432);\n"
    "    unsigned s2 = __byte_perm(v.z, v.w, 0x5432);\n"
    "    *k0 = make_uint4(__byte_perm(l, v.x, 0x5432), s0, s1, s2);\n"
    "    *k2 = make_uint4(s0, s1, s2, __byte_perm(v.w, r, 0x5432));\n"
    "#else\n"
    "    *k0 = make_uint4(l, v.x, v.y, v.z);\n"
    "    *k2 = make_uint4(v.y, v.z, v.w, r);\n"
    "#endif\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(NTH, 2) nb_conv_wg4(Wg4P p) {\n"
    "    extern __shared__ __align__(16) unsigned char smem[];\n"
    "    E (*As)[BM][LDK] = (E (*)[BM][LDK])smem;            /* [2][BM][LDK] */\n"
    "    E (*Bs)[BN][LDK] = (E (*)[BN][LDK])(smem + 2 * BM * LDK * sizeof(E)); /* [2][BN][LDK] */\n"
    "    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;\n"
    "    const int g = lane >> 2, t = lane & 3;\n"
    "    const int wm0 = (warp >> 2) * 32, wn0 = (warp & 3) * 48;\n"
    "    const int P = p.H * p.W, C3 = 3 * p.C, J = 9 * p.C;\n"
    "    const int m0 = blockIdx.x * BM, q0 = blockIdx.y * TRI;\n"
    "    const int nkt = p.N * (P / BK);\n"
    "    const int kt0 = blockIdx.z * p.kt_per_split, kt1 = min(nkt, kt0 + p.kt_per_split);\n"
    "    auto aload = [&](int s, int kt) {\n"
    "        int k0 = kt * BK, n = k0 / P, p0 = k0 - n * P;\n"
    "        _Pragma(\"unroll\")\n"
    "        for (int r = 0; r < A_PER; r++) {\n"
    "            int i = tid + r * NTH, row = i / (BK / EPV), ch = i % (BK / EPV), o = m0 + row;\n"
    "            bool v = o < p.O;\n"
    "            cp16(&As[s][row][EPV * ch], v ? (const void *)(p.dy + ((long long)n * p.O + o) * P + p0 + EPV * ch)\n"
    "                                          : (const void *)p.dy, v);\n"
    "        }\n"
    "        asm volatile(\"cp.async.commit_group;\\n\" ::);\n"
    "    };\n"
    "    uint4 bv[B_PER]; unsigned bl[B_PER], br[B_PER];\n"
    "    auto bload = [&](int kt) {\n"
    "        int k0 = kt * BK, n = k0 / P, pb = k0 - n * P;\n"
    "        _Pragma(\"unroll\")\n"
    "        for (int r = 0; r < B_PER; r++) {\n"
    "            int i = tid + r * NTH, tri = i / (BK / EPV), grp = i % (BK / EPV);\n"
    "            int q = q0 + tri, c = q / 3, kh = q - 3 * c;\n"
    "            int pix = pb + EPV * grp, oh = pix / p.W, ow = pix - oh * p.W, ih = oh + kh - 1;\n"
    "            bv[r] = make_uint4(0u, 0u, 0u, 0u); bl[r] = 0u; br[r] = 0u;\n"
    "            if (q < C3 && ih >= 0 && ih < p.H) {\n"
    "                const E *row = p.x + (((long long)n * p.C + c) * p.H + ih) * p.W + ow;\n"
    "                bv[r] = *(const uint4 *)row;\n"
    "#if PREC == 2\n"
    "                if (ow > 0) bl[r] = (unsigned)row[-1] << 16;\n"
    "                if (ow + EPV < p.W) br[r] = (unsigned)row[EPV];\n"
    "#else\n"
    "                if (ow > 0) bl[r] = __float_as_uint(row[-1]);\n"
    "                if (ow + EPV < p.W) br[r] = __float_as_uint(row[EPV]);\n"
    "#endif\n"
    "            }\n"
    "        }\n"
    "    };\n"
    "    auto bstore = [&](int s) {\n"
    "        _Pragma(\"unroll\")\n"
    "        for (int r = 0; r < B_PER; r++) {\n"
    "            int i = tid + r * NTH, tri = i / (BK / EPV), grp = i % (BK / EPV);\n"
    "            uint4 k0v, k2v;\n"
    "            shifts(bv[r], bl[r], br[r], &k0v, &k2v);\n"
    "            *(uint4 *)&Bs[s][3 * tri][EPV * grp] = k0v;\n"
    "            *(uint4 *)&Bs[s][3 * tri + 1][EPV * grp] = bv[r];\n"
    "            *(uint4 *)&Bs[s][3 * tri + 2][EPV * grp] = k2v;\n"
    "        }\n"
    "    };\n"
    "    /* db (blocks of column block 0): row sums of the dy tiles this block reads anyway; a\n"
    "     * thread sums the 16-byte A chunk(s) it loads, lanes sharing a row reduce at the end */\n"
    "    const bool dob = p.db && blockIdx.y == 0;\n"
    "    float dbs[A_PER];\n"
    "    _Pragma(\"unroll\")\n"
    "    for (int r = 0; r < A_PER; r++) dbs[r] = 0.0f;\n"
    "    float acc[MT][NT][4];\n"
    "    _Pragma(\"unroll\")\n"
    "    for (int i = 0; i < MT; i++)\n"
    "        _Pragma(\"unroll\")\n"
    "        for (int j = 0; j < NT; j++)\n"
    "            _Pragma(\"unroll\")\n"
    "            for (int r = 0; r < 4; r++) acc[i][j][r] = 0.0f;\n"
    "    if (kt0 < kt1) {\n"
    "        aload(0, kt0);\n"
    "        bload(kt0);\n"
    "        bstore(0);\n"
    "        asm volatile(\"cp.async.wait_group 0;\\n\" ::);\n"
    "    }\n"
    "    __syncthreads();\n"
    "    /* ldmatrix lane addresses (16-byte rows = 8 bf16 / 4 f32): A rows (lane & 15), k half\n"
    "     * (lane >> 4); B columns (lane & 7) + 8 (lane >> 4), k half ((lane >> 3) & 1) */\n"
    "    const int ar = wm0 + (lane & 15), ak = (lane >> 4) * (KSTEP / 2);\n"
    "    const int bn = wn0 + (lane & 7) + (lane >> 4) * 8, bk = ((lane >> 3) & 1) * (KSTEP / 2);\n"
    "    for (int kt = kt0; kt < kt1; kt++) {\n"
    "        const int s = (kt - kt0) & 1;\n"
    "        const bool more = kt + 1 < kt1;\n"
    "        if (more) {\n"
    "            aload(s ^ 1, kt + 1);\n"
    "            bload(kt + 1);\n"
    "        }\n"
    "        if (dob) {\n"
    "            _Pragma(\"unroll\")\n"
    "            for (int r = 0; r < A_PER; r++) {\n"
    "                int i = tid + r * NTH, row = i / (BK / EPV), ch = i % (BK / EPV);\n"
    "                uint4 v = *(const uint4 *)&As[s][row][EPV * ch];\n"
    "#if PREC == 2\n"
    "                unsigned w4[4] = {v.x, v.y, v.z, v.w};\n"
    "                _Pragma(\"unroll\")\n"
    "                for (int e = 0; e < 4; e++)\n"
    "                    dbs[r] += __uint_as_float(w4[e] << 16) + __uint_as_float(w4[e] & 0xffff0000u);\n"
    "#else\n"
    "                dbs[r] += (__uint_as_float(v.x) + __uint_as_float(v.y)) + (__uint_as_float(v.z) + __uint_as_float(v.w));\n"
    "#endif\n"
    "            }\n"
    "        }\n"
    "        _Pragma(\"unroll\")\n"
    "        for (int kk = 0; kk < BK; kk += KSTEP) {\n"
    "            unsigned a[MT][4], b[NT / 2][4];\n"
    "            _Pragma(\"unroll\")\n"
    "            for (int i = 0; i < MT; i++) ldm4(a[i], &As[s][ar + 16 * i][kk + ak]);\n"
    "            _Pragma(\"unroll\")\n"
    "            for (int j = 0; j < NT / 2; j++) ldm4(b[j], &Bs[s][bn + 16 * j][kk + bk]);\n"
    "            _Pragma(\"unroll\")\n"
    "            for (int i = 0; i < MT; i++)\n"
    "                _Pragma(\"unroll\")\n"
    "                for (int j = 0; j < NT; j++) mma(acc[i][j], a[i], &b[j >> 1][2 * (j & 1)]);\n"
    "        }\n"
    "        if (more) bstore(s ^ 1);\n"
    "        asm volatile(\"cp.async.wait_group 0;\\n\" ::);\n"
    "        __syncthreads();\n"
    "    }\n"
    "    if (kt0 >= kt1) return;\n"
    "    if (dob) {\n"
    "        _Pragma(\"unroll\")\n"
    "        for (int r = 0; r < A_PER; r++) {\n"
    "            float v = dbs[r];\n"
    "            _Pragma(\"unroll\")\n"
    "            for (int o = 1; o < BK / EPV; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
    "            int i = tid + r * NTH, row = i / (BK / EPV), ch = i % (BK / EPV), o = m0 + row;\n"
    "            if (ch == 0 && o < p.O) atomicAdd(p.db + o, v);\n"
    "        }\n"
    "    }\n"
    "    /* epilogue: column pairs (2t, 2t + 1) are adjacent dw elements: one 8-byte red where the\n"
    "     * pair is 8-byte aligned (C even), else two atomics */\n"
    "    _Pragma(\"unroll\")\n"
    "    for (int i = 0; i < MT; i++)\n"
    "        _Pragma(\"unroll\")\n"
    "        for (int h = 0; h < 2; h++) {\n"
    "            int m = m0 + wm0 + 16 * i + g + 8 * h;\n"
    "            if (m >= p.O) continue;\n"
    "            float *row = p.dw + (long long)m * J;\n"
    "            _Pragma(\"unroll\")\n"
    "            for (int j = 0; j < NT; j++) {\n"
    "                int n = 3 * q0 + wn0 + 8 * j + 2 * t;\n"
    "                float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];\n"
    "                if (n + 1 < J && ((unsigned long long)(row + n) & 7) == 0) red2(row + n, v0, v1);\n"
    "                else {\n"
    "                    if (n < J) atomicAdd(row + n, v0);\n"
    "                    if (n + 1 < J) atomicAdd(row + n + 1, v1);\n"
    "                }\n"
    "            }\n"
    "        }\n"
    "}\n";

const char *nb_conv_wg4_source(void) { return nb_wg4_src; }

typedef struct {
    const void *x, *dy;
    float *dw, *db;
    int N, C, H, W, O, kt_per_split;
} nb_wg4_params;

#define NB_WG4_DEVS 16
static struct {
    nb_device *dev;
    nb_jit_kernel *k;
} nb_wg4_cache[NB_WG4_DEVS][2]; /* [device index][bf16] */
static pthread_mutex_t nb_wg4_lock = PTHREAD_MUTEX_INITIALIZER;

static nb_status nb_wg4_kernel(nb_device *dev, int bf16, nb_jit_kernel **out) {
    int idx = nb_device_get_info(dev)->index;
    if (idx < 0 || idx >= NB_WG4_DEVS)
        return nb_error(NB_ERR_UNSUPPORTED, "conv2d weight gradient (CUDA): device index %d >= %d", idx,
                        NB_WG4_DEVS);
    pthread_mutex_lock(&nb_wg4_lock);
    nb_jit_kernel *k = nb_wg4_cache[idx][bf16].dev == dev ? nb_wg4_cache[idx][bf16].k : NULL;
    pthread_mutex_unlock(&nb_wg4_lock);
    if (!k) {
        char *src = malloc(sizeof nb_wg4_src + 32);
        if (!src) return nb_error(NB_ERR_OUT_OF_MEMORY, "conv2d weight gradient (CUDA): out of host memory");
        int n = snprintf(src, 32, "#define PREC %d\n", bf16 ? 2 : 1);
        memcpy(src + n, nb_wg4_src, sizeof nb_wg4_src);
        nb_status s = nb_nn_cuda_kernel(dev, src, "nb_conv_wg4", &k);
        free(src);
        NB_TRY(s);
        pthread_mutex_lock(&nb_wg4_lock);
        nb_wg4_cache[idx][bf16].dev = dev, nb_wg4_cache[idx][bf16].k = k;
        pthread_mutex_unlock(&nb_wg4_lock);
    }
    *out = k;
    return NB_OK;
}

int nb_conv_wg4_supports(const nb_conv_dims *d, int precision, nb_dtype xdt, nb_dtype ydt) {
    int dt_ok = (precision == NB_TAPE_BF16 && xdt == NB_BF16 && ydt == NB_BF16) ||
                (precision == NB_TAPE_TF32 && xdt == NB_F32 && ydt == NB_F32);
    return d && dt_ok && d->K == 3 && d->stride == 1 && d->pad == 1 && d->OH == d->H &&
           d->OW == d->W && d->W % 8 == 0 && (d->H * d->W) % 32 == 0 &&
           d->N * d->H * d->W < ((int64_t)1 << 31) && d->N * d->C * d->H * d->W < ((int64_t)1 << 31) &&
           d->N * d->O * d->H * d->W < ((int64_t)1 << 31);
}

static int nb_wg4_env = -1;
void nb_conv_wg4_enable(int on) { nb_wg4_env = on; }
int nb_conv_wg4_preferred(const nb_conv_dims *d, int precision, nb_dtype xdt, nb_dtype ydt) {
    if (nb_wg4_env < 0) {
        const char *e = getenv("NABLA_CONV_WG4");
        nb_wg4_env = e && !strcmp(e, "0") ? 0 : 1;
    }
    return nb_wg4_env && nb_conv_wg4_supports(d, precision, xdt, ydt) && d->C >= 32 && d->O >= 32;
}

nb_status nb_conv_wg4(nb_device *dev, int precision, const nb_conv_dims *d, const void *x,
                      const void *dy, float *dw, float *db) {
    if (!dev || !d || !x || !dy || !dw)
        return nb_error(NB_ERR_INVALID_ARG, "conv2d weight gradient (wg4): NULL argument");
    int bf16 = precision == NB_TAPE_BF16;
    nb_dtype dt = bf16 ? NB_BF16 : NB_F32;
    if (!nb_conv_wg4_supports(d, precision, dt, dt))
        return nb_error(NB_ERR_UNSUPPORTED,
                        "conv2d weight gradient (wg4): needs BF16 (bf16 x, dy) or TF32 (f32), 3x3, "
                        "stride 1, pad 1, W %% 8 == 0 and H*W %% 32 == 0 (got %lldx%lld, k %lld, "
                        "stride %lld, pad %lld)",
                        (long long)d->H, (long long)d->W, (long long)d->K, (long long)d->stride,
                        (long long)d->pad);
    if (((uintptr_t)x | (uintptr_t)dy) % 16)
        return nb_error(NB_ERR_INVALID_ARG, "conv2d weight gradient (wg4): x and dy must be 16-byte aligned");
    nb_jit_kernel *k = NULL;
    NB_TRY(nb_wg4_kernel(dev, bf16, &k));
    unsigned gx = (unsigned)((d->O + 63) / 64), gy = (unsigned)((3 * d->C + 63) / 64);
    int64_t nkt = d->N * (d->H * d->W / 32), tiles = (int64_t)gx * gy;
    int sms = nb_device_get_info(dev)->multiprocessors;
    int64_t want = 2 * (int64_t)(sms > 0 ? sms : 132), splits = want / tiles;
    if (splits < 1) splits = 1;
    if (splits > nkt) splits = nkt;
    int64_t kps = (nkt + splits - 1) / splits;
    splits = (nkt + kps - 1) / kps;
    if (splits > 65535) return nb_error(NB_ERR_UNSUPPORTED, "conv2d weight gradient (wg4): too many k splits");
    nb_wg4_params p = {x, dy, dw, db, (int)d->N, (int)d->C, (int)d->H, (int)d->W, (int)d->O, (int)kps};
    const unsigned grid[3] = {gx, gy, (unsigned)splits}, block[3] = {256, 1, 1};
    /* two stages of A [64][LDK] and B [192][LDK]: LDK 40 bf16 / 36 f32 */
    unsigned smem = bf16 ? 2 * 256 * 40 * 2 : 2 * 256 * 36 * 4;
    void *args[1] = {&p};
    return nb_cuda_launch(nb_jit_kernel_cuda_fn(k), grid, block, smem, NULL, args);
}

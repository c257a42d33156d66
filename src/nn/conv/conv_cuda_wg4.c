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
 * group in one row). The CPU reference is conv2d's own (tape_ops_conv.c); the tests compare.
 * The kernel: src/nn/conv/kernels/wg4.cu (PREC 1 tf32, 2 bf16). */
#include "nn/conv/conv_cuda_wg4.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "jit/cuda_files.h"
#include "nabla/nn_tape.h"
#include "nn/common/nn_common.h"

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
        const char *defs[] = {bf16 ? "PREC=2" : "PREC=1", NULL};
        NB_TRY(nb_jit_cuda_kernel(dev, "src/nn/conv/kernels/wg4.cu", defs, "nb_conv_wg4", &k));
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

static int nb_wg4_on = 1;
void nb_conv_wg4_enable(int on) { nb_wg4_on = on != 0; }
int nb_conv_wg4_preferred(const nb_conv_dims *d, int precision, nb_dtype xdt, nb_dtype ydt) {
    return nb_wg4_on && nb_conv_wg4_supports(d, precision, xdt, ydt) && d->C >= 32 && d->O >= 32;
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

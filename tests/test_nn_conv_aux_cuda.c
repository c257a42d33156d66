/* The CUDA conv path's helper kernels (src/nn/conv/conv_cuda_aux.c, conv_cuda.c, conv_cuda_igemm.c,
 * conv_cuda_wgrad.c, tape_cuda_conv.c) against host references (the scalar kernels they replaced
 * were deleted; their numbers stay in docs/PERF.md):
 *   - bias add, bias gradient and bias fill against a CPU double reference: f32 and bf16
 *     storage, odd sizes, planes P of 1..70001 incl. P % 8 != 0, linear's P = 1, misaligned
 *     pointers, tall-skinny [N, F] (the linear); the bias + relu pass (b NULL, NaN); the
 *     small-plane gradient bit-equal on a second run (deterministic, no atomics);
 *   - the split-sum kernel (nb_conv_sum_splits), L % 4 != 0 and misaligned too, and the end of
 *     a split sum into bf16 (nb_conv_split_out: bias, accumulate, the accumulator re-zeroed);
 *   - the weight arrangement kernel nb_conv_wprep bit for bit against the layout computed on the
 *     host for every layout (MODE 0 / MODE 1, forward / flipped, f32 / bf16, channel padding
 *     written as zeros over garbage);
 *   - conv2d forward + backward with bias against the double reference (incl. the bias
 *     gradient taken along by the weight gradient's own passes: the small-image prep over dy,
 *     MODE 2's rearranging add, the 1x1 split sum; the 1x1 forward's bias filled with the weight
 *     conversion; split sums into bf16 ending in nb_conv_split_out);
 *   - linear forward + backward with bias against the double reference;
 *   - weights kept from the forward for the backward (nb_conv_wcache) against the plain calls.
 * Skips the GPU parts without a GPU (NB_REQUIRE_CUDA=1: fails).
 *
 * Benchmark: NB_CONVAUX_BENCH=1 ./test_nn_conv_aux_cuda test_bench_aux  times the bias
 * gradient, the bias add and the weight arrangement on the reference UNet's shapes (batch 32),
 * CUDA events, median of 20 (ms). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nb_test.h"
#include "nabla/alloc.h"
#include "nabla/device.h"
#include "nabla/dtype.h"
#include "nabla/nn_tape.h"
#include "nabla/status.h"
#include "nn/conv/conv_cuda.h"
#include "nn/conv/conv_cuda_aux.h"
#include "nn/conv/conv_cuda_igemm.h"
#include "nn/conv/conv_cuda_wgrad.h"
#include "nn/conv/conv_cuda_wg4.h"
#include "device/cublas.h"
#include "device/cuda/cuda_api.h"

#define NB_TEST_SEED 0x2545f4914f6cdd1dull
#include "nb_test_dbuf.h"
#include "nb_test_conv_ref.h"

static float *hrand(int64_t n) {
    float *a = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) a[i] = frand();
    return a;
}


/* ---- bias gradient and bias add ------------------------------------------------------------- */

static const int64_t shapes[][3] = {
    /* N, O, P */
    {1, 1, 1},     {3, 5, 1},     {32, 512, 1},  {7, 3, 3},    {2, 9, 15},    {3, 4, 16},
    {3, 5, 17},    {2, 7, 63},    {4, 3, 64},    {3, 6, 100},  {2, 3, 257},   {5, 2, 1000},
    {2, 3, 4096},  {3, 2, 4099},  {1, 1, 70001}, {67, 3, 1},   {2, 130, 64},  {9, 1, 8},
    /* tall-skinny (the linear's [N, F] and small planes: elementwise add, chunked gradient):
     * F % 4 == 0 (vectors), F % 4 != 0, 256 / G not whole, more than 256 vector columns */
    {70001, 64, 1}, {4099, 6, 1}, {2053, 24, 1}, {1031, 3, 5}, {300, 300, 1}, {65, 1100, 1},
};

/* db := db0 + sum dy over n, p, checked against the double reference. */
static void check_bias_grad(nb_device *gpu, nb_dtype dt, int off) {
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t N = shapes[s][0], O = shapes[s][1], P = shapes[s][2], n = N * O * P;
        float *dy = hrand(n), *db0 = hrand(O), *got = malloc((size_t)O * sizeof(float));
        if (dt == NB_BF16)
            for (int64_t i = 0; i < n; i++) dy[i] = bf_round(dy[i]);
        dbuf bdy, bdb;
        int ok = dput_at(gpu, &bdy, dy, n, dt, off) && dput_at(gpu, &bdb, db0, O, NB_F32, off);
        NB_EXPECT(ok);
        if (ok) {
            NB_EXPECT_OK(nb_conv_bias_grad(gpu, bdy.p, dt, bdb.p, N, O, P));
            NB_EXPECT(dget(gpu, &bdb, got));
            double worst = 0;
            for (int64_t o = 0; o < O; o++) {
                double ref = db0[o], scale = fabs(db0[o]);
                for (int64_t i = 0; i < N; i++)
                    for (int64_t p = 0; p < P; p++) {
                        double v = dy[(i * O + o) * P + p];
                        ref += v, scale += fabs(v);
                    }
                double e = fabs(got[o] - ref) / (scale * 1e-5 + 1e-6);
                if (e > worst) worst = e;
            }
            if (worst > 1.0)
                fprintf(stderr, "  bias grad %s off %d N=%lld O=%lld P=%lld: err %.3g x tol\n",
                        nb_dtype_name(dt), off, (long long)N, (long long)O, (long long)P, worst);
            NB_EXPECT(worst <= 1.0);
        }
        dfree(&bdy), dfree(&bdb);
        free(dy), free(db0), free(got);
    }
}

/* y := y0 + b[o], exact (the f32 sum rounded once to bf16 for bf16 storage). */
static void check_bias_add(nb_device *gpu, nb_dtype dt, int off) {
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t N = shapes[s][0], O = shapes[s][1], P = shapes[s][2], n = N * O * P;
        float *y = hrand(n), *b = hrand(O), *got = malloc((size_t)n * sizeof(float));
        if (dt == NB_BF16)
            for (int64_t i = 0; i < n; i++) y[i] = bf_round(y[i]);
        dbuf by, bb;
        int ok = dput_at(gpu, &by, y, n, dt, off) && dput_at(gpu, &bb, b, O, NB_F32, 0);
        NB_EXPECT(ok);
        if (ok) {
            NB_EXPECT_OK(nb_conv_add_bias(gpu, by.p, dt, bb.p, N, O, P));
            NB_EXPECT(dget(gpu, &by, got));
            int64_t bad = 0;
            for (int64_t i = 0; i < n; i++) {
                float want = y[i] + b[(i / P) % O];
                if (dt == NB_BF16) want = bf_round(want);
                if (got[i] != want && bad++ < 3)
                    fprintf(stderr, "  bias add %s off %d N=%lld O=%lld P=%lld: [%lld] %g vs %g\n",
                            nb_dtype_name(dt), off, (long long)N, (long long)O,
                            (long long)P, (long long)i, got[i], want);
            }
            NB_EXPECT(bad == 0);
            /* y := b[o], then y := 0 (nb_conv_fill_bias, the split sums' start) */
            for (int withb = 1; withb >= 0; withb--) {
                NB_EXPECT_OK(nb_conv_fill_bias(gpu, by.p, dt, withb ? bb.p : NULL, N, O, P));
                NB_EXPECT(dget(gpu, &by, got));
                bad = 0;
                for (int64_t i = 0; i < n; i++) {
                    float want = withb ? b[(i / P) % O] : 0.0f;
                    if (dt == NB_BF16) want = bf_round(want);
                    bad += got[i] != want;
                }
                if (bad)
                    fprintf(stderr, "  fill %s off %d b %d N=%lld O=%lld P=%lld: %lld wrong\n",
                            nb_dtype_name(dt), off, withb, (long long)N, (long long)O, (long long)P,
                            (long long)bad);
                NB_EXPECT(bad == 0);
            }
        }
        dfree(&by), dfree(&bb);
        free(y), free(b), free(got);
    }
}

static void test_bias_grad(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device or cuBLAS");
    for (int dt = 0; dt < 2; dt++)
        for (int off = 0; off <= 3; off++) check_bias_grad(gpu, dt ? NB_BF16 : NB_F32, off);
    nb_device_close(gpu);
}

static void test_bias_add(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device or cuBLAS");
    for (int dt = 0; dt < 2; dt++)
        for (int off = 0; off <= 3; off++) check_bias_add(gpu, dt ? NB_BF16 : NB_F32, off);
    nb_device_close(gpu);
}

/* nb_conv_add_bias_relu (the fused linear + relu's pass): y := max(y0 + b[o], 0) exactly, b may
 * be NULL, NaN passes through; the small-plane bias gradient is deterministic (bit-equal on a
 * second run, no atomics). */
static void test_bias_relu_det(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device or cuBLAS");
    static const int64_t rs[][3] = {{70001, 64, 1}, {4099, 6, 1}, {33, 7, 3}, {1, 5, 1}};
    for (int dt = 0; dt < 2; dt++)
        for (int off = 0; off <= 1; off++)
            for (size_t s = 0; s < sizeof rs / sizeof rs[0]; s++) {
                int64_t N = rs[s][0], O = rs[s][1], P = rs[s][2], n = N * O * P;
                nb_dtype t = dt ? NB_BF16 : NB_F32;
                float *y = hrand(n), *b = hrand(O), *got = malloc((size_t)n * sizeof(float));
                if (dt) for (int64_t i = 0; i < n; i++) y[i] = bf_round(y[i]);
                y[n / 2] = NAN;
                for (int withb = 1; withb >= 0; withb--) {
                    dbuf by, bb;
                    int ok = dput_at(gpu, &by, y, n, t, off) && dput_at(gpu, &bb, b, O, NB_F32, 0);
                    NB_EXPECT(ok);
                    if (ok) {
                        NB_EXPECT_OK(nb_conv_add_bias_relu(gpu, by.p, t, withb ? bb.p : NULL, N, O, P));
                        NB_EXPECT(dget(gpu, &by, got));
                        int64_t bad = 0;
                        for (int64_t i = 0; i < n; i++) {
                            float want = y[i] + (withb ? b[(i / P) % O] : 0.0f);
                            want = want < 0.0f ? 0.0f : want;
                            if (dt) want = bf_round(want);
                            bad += i == n / 2 ? !isnan(got[i]) : got[i] != want;
                        }
                        if (bad)
                            fprintf(stderr, "  bias relu %s off %d b %d N=%lld O=%lld P=%lld: %lld wrong\n",
                                    nb_dtype_name(t), off, withb, (long long)N, (long long)O,
                                    (long long)P, (long long)bad);
                        NB_EXPECT(bad == 0);
                    }
                    dfree(&by), dfree(&bb);
                }
                /* the gradient twice from the same db0: bit-equal */
                y[n / 2] = 0.5f;
                float *g[2] = {malloc((size_t)O * sizeof(float)), malloc((size_t)O * sizeof(float))};
                for (int r = 0; r < 2; r++) {
                    dbuf by, bb;
                    int ok = dput_at(gpu, &by, y, n, t, off) && dput_at(gpu, &bb, b, O, NB_F32, 0);
                    NB_EXPECT(ok);
                    if (ok) {
                        NB_EXPECT_OK(nb_conv_bias_grad(gpu, by.p, t, bb.p, N, O, P));
                        NB_EXPECT(dget(gpu, &bb, g[r]));
                    }
                    dfree(&by), dfree(&bb);
                }
                NB_EXPECT(memcmp(g[0], g[1], (size_t)O * sizeof(float)) == 0);
                free(g[0]), free(g[1]), free(y), free(b), free(got);
            }
    nb_device_close(gpu);
}

/* dw := dw0 + sum over z of part[z][i] (nb_conv_sum_splits; L % 4 != 0 and misaligned too) */
static void test_sum_splits(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device or cuBLAS");
    static const int64_t cs[][2] = {{8192, 32}, {1, 1}, {7, 3}, {1001, 5}, {4096, 1}, {36, 33}};
    for (size_t s = 0; s < sizeof cs / sizeof cs[0]; s++)
            for (int off = 0; off <= 1; off++) {
                int64_t L = cs[s][0], Z = cs[s][1];
                float *part = hrand(L * Z), *dw0 = hrand(L), *got = malloc((size_t)L * 4);
                dbuf bp, bw;
                int ok = dput_at(gpu, &bp, part, L * Z, NB_F32, off) && dput_at(gpu, &bw, dw0, L, NB_F32, off);
                NB_EXPECT(ok);
                if (ok) {
                    NB_EXPECT_OK(nb_conv_sum_splits(gpu, bp.p, bw.p, L, Z));
                    NB_EXPECT(dget(gpu, &bw, got));
                    int bad = 0;
                    for (int64_t i = 0; i < L; i++) {
                        double ref = dw0[i], sc = fabs(dw0[i]);
                        for (int64_t z = 0; z < Z; z++) ref += part[z * L + i], sc += fabs(part[z * L + i]);
                        if (fabs(got[i] - ref) > 1e-5 * sc + 1e-6) bad++;
                    }
                    if (bad) fprintf(stderr, "  sum_splits L=%lld Z=%lld off %d: %d wrong\n",
                                     (long long)L, (long long)Z, off, bad);
                    NB_EXPECT(bad == 0);
                }
                dfree(&bp), dfree(&bw);
                free(part), free(dw0), free(got);
            }
    nb_device_close(gpu);
}

/* y := bf16((acc ? y : 0) + src + b[o]), src := 0 (nb_conv_split_out), exact */
static void test_split_out(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device or cuBLAS");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int off = 0; off <= 1; off++)
            for (int acc = 0; acc <= 1; acc++)
                for (int withb = 0; withb <= 1; withb++) {
                    int64_t N = shapes[s][0], O = shapes[s][1], P = shapes[s][2], n = N * O * P;
                    float *y = hrand(n), *src = hrand(n), *b = hrand(O);
                    float *got = malloc((size_t)n * 4), *gs = malloc((size_t)n * 4);
                    for (int64_t i = 0; i < n; i++) y[i] = bf_round(y[i]);
                    dbuf by, bs, bb;
                    int ok = dput_at(gpu, &by, y, n, NB_BF16, off) && dput_at(gpu, &bs, src, n, NB_F32, off) &&
                             dput_at(gpu, &bb, b, O, NB_F32, 0);
                    NB_EXPECT(ok);
                    if (ok) {
                        NB_EXPECT_OK(nb_conv_split_out(gpu, bs.p, by.p, withb ? bb.p : NULL, N, O, P, acc));
                        NB_EXPECT(dget(gpu, &by, got) && dget(gpu, &bs, gs));
                        int64_t bad = 0, dirty = 0;
                        for (int64_t i = 0; i < n; i++) {
                            float v = (acc ? y[i] : 0.0f) + src[i];
                            v = v + (withb ? b[(i / P) % O] : 0.0f);
                            bad += got[i] != bf_round(v);
                            dirty += gs[i] != 0.0f;
                        }
                        if (bad || dirty)
                            fprintf(stderr, "  split_out N=%lld O=%lld P=%lld off %d acc %d b %d: %lld wrong, %lld not zeroed\n",
                                    (long long)N, (long long)O, (long long)P, off, acc, withb,
                                    (long long)bad, (long long)dirty);
                        NB_EXPECT(bad == 0 && dirty == 0);
                    }
                    dfree(&by), dfree(&bs), dfree(&bb);
                    free(y), free(src), free(b), free(got), free(gs);
                }
    nb_device_close(gpu);
}

/* ---- weight arrangement: nb_conv_wprep against the host layout, bit for bit ------------------ */

/* The layout nb_conv_igemm_arrange_weights documents (conv_cuda_igemm.h), built on the host
 * from w [O][C][KK]: which 0 rows o over channels c, which 1 rows c over channels o with the
 * taps reversed; cb 0: [rows][KK][channels], else [groups][rows][KK][cb] with the channels past
 * the count zero and, bf16 (abf), channel k of a group in slot 4*((k&7)>>1) + 2*(k>>3) + (k&1).
 * Returns the bytes (f32 or bf16 elements), or 0 for a layout it cannot describe. */
static size_t ref_layout(const nb_conv_dims *d, const float *w, int which, int abf, int cb,
                         unsigned char **out) {
    int64_t KK = d->K * d->K, R = which ? d->C : d->O, inner = which ? d->O : d->C;
    int64_t CB = cb ? cb : inner, G = (inner + CB - 1) / CB, n = G * R * KK * CB;
    if (abf && cb && cb != 16) return 0; /* the slot order needs groups of 16 */
    size_t es = abf ? 2 : 4;
    unsigned char *h = calloc((size_t)n, es);
    for (int64_t g = 0; g < G; g++)
        for (int64_t r = 0; r < R; r++)
            for (int64_t t = 0; t < KK; t++)
                for (int64_t k = 0; k < CB; k++) {
                    int64_t ch = g * CB + k, tap = which ? KK - 1 - t : t;
                    int64_t o = which ? ch : r, c = which ? r : ch;
                    float v = ch < inner ? w[(o * d->C + c) * KK + tap] : 0.0f;
                    int64_t slot = abf && cb ? 4 * ((k & 7) >> 1) + 2 * (k >> 3) + (k & 1) : k;
                    int64_t i = ((g * R + r) * KK + t) * CB + slot;
                    if (abf) ((uint16_t *)h)[i] = nb_f32_to_bf16(v);
                    else ((float *)h)[i] = v;
                }
    *out = h;
    return (size_t)n * es;
}

static void test_weight_arrangement(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device or cuBLAS");
    /* N, C, H, W, O, K, stride, pad: halo shapes (C / O not multiples of CB: padding), MODE 0
     * shapes (stride 2, OW % 8 != 0, 1x1) */
    static const int64_t cs[][8] = {
        {2, 64, 16, 16, 64, 3, 1, 1},  {2, 3, 16, 16, 64, 3, 1, 1},  {2, 64, 16, 16, 3, 3, 1, 1},
        {2, 13, 8, 8, 21, 3, 1, 1},    {2, 128, 8, 8, 256, 3, 1, 1}, {2, 64, 16, 16, 128, 3, 2, 1},
        {2, 64, 10, 10, 96, 3, 1, 1},  {2, 64, 8, 8, 128, 1, 1, 0},  {2, 32, 32, 32, 64, 3, 1, 1},
    };
    int tested = 0, padded = 0, mode0 = 0;
    for (size_t s = 0; s < sizeof cs / sizeof cs[0]; s++) {
        nb_conv_dims d;
        NB_REQUIRE_OK(nb_conv_dims_make(&d, cs[s][0], cs[s][1], cs[s][2], cs[s][3], cs[s][4],
                                        cs[s][5], cs[s][6], cs[s][7]));
        int64_t nw = d.O * d.C * d.K * d.K;
        float *w = hrand(nw);
        dbuf bw;
        NB_EXPECT(dput_at(gpu, &bw, w, nw, NB_F32, 0));
        /* (FP32 on the first shape only: each configuration is one more NVRTC compile) */
        for (int prec = s ? NB_TAPE_TF32 : NB_TAPE_FP32; prec <= NB_TAPE_BF16; prec++)
            for (int abf = 0; abf <= (prec == NB_TAPE_BF16); abf++)
                for (int which = 0; which <= 1; which++) {
                    void *wr;
                    size_t bytes;
                    int cb = -1;
                    /* once to learn the scratch, which is then filled with garbage: the
                     * padding must be written */
                    nb_status st = nb_conv_igemm_arrange_weights(gpu, prec, &d, which, abf, bw.p,
                                                                 &wr, &bytes, &cb);
                    if (st == NB_ERR_UNSUPPORTED) continue;
                    NB_EXPECT_OK(st);
                    if (st != NB_OK) continue;
                    NB_EXPECT_OK(nb_memset(gpu, wr, 0x7f, bytes));
                    NB_EXPECT_OK(nb_conv_igemm_arrange_weights(gpu, prec, &d, which, abf, bw.p,
                                                               &wr, &bytes, &cb));
                    unsigned char *h = malloc(bytes), *ref = NULL;
                    NB_EXPECT_OK(nb_memcpy_d2h(gpu, h, wr, bytes));
                    size_t rb = ref_layout(&d, w, which, abf, cb, &ref);
                    int same = rb == bytes && !memcmp(h, ref, bytes);
                    if (!same)
                        fprintf(stderr, "  weights differ: shape %zu prec %d abf %d which %d cb %d (%zu / %zu bytes)\n",
                                s, prec, abf, which, cb, bytes, rb);
                    NB_EXPECT(same);
                    tested++;
                    mode0 += cb == 0;
                    padded += cb > 0 && (which ? d.O : d.C) % cb != 0;
                    free(h), free(ref);
                }
        dfree(&bw);
        free(w);
    }
    /* every kind seen: MODE 0, MODE 1 with padding */
    NB_EXPECT(tested >= 30 && mode0 > 0 && padded > 0);
    nb_device_close(gpu);
}

/* ---- conv2d and linear forward + backward against the double reference ----------------------- */

/* One conv (or linear: lin, 1x1 conv of 1x1 images, through the linear entry points) at TF32
 * (f32 tensors) or BF16 (bf16 activations): y with bias, then dx stored, dw and db from zero;
 * against conv_ref on the values the kernels see (bf16-rounded x, dy). */
static void conv_case_ref(nb_device *gpu, const nb_conv_dims *d, int prec, int lin, size_t s) {
    nb_dtype dt = prec == NB_TAPE_BF16 ? NB_BF16 : NB_F32;
    int64_t nx = d->N * d->C * d->H * d->W, ny = d->N * d->O * d->OH * d->OW;
    int64_t nw = d->O * d->C * d->K * d->K;
    float *x = hrand(nx), *w = hrand(nw), *b = hrand(d->O), *dy = hrand(ny);
    for (int64_t i = 0; i < nx && dt == NB_BF16; i++) x[i] = bf_round(x[i]);
    for (int64_t i = 0; i < ny && dt == NB_BF16; i++) dy[i] = bf_round(dy[i]);
    int64_t ns[4] = {ny, nx, nw, d->O};
    double *ref[4];
    float *got[4];
    for (int k = 0; k < 4; k++) {
        ref[k] = calloc((size_t)ns[k], sizeof(double));
        got[k] = calloc((size_t)ns[k], sizeof(float));
    }
    conv_ref(d, x, w, b, dy, ref[0], ref[1], ref[2], ref[3]);
    dbuf bx, bw, bb, by, bdy, bdx, bdw, bdb;
    int ok = dput_at(gpu, &bx, x, nx, dt, 0) && dput_at(gpu, &bw, w, nw, NB_F32, 0) &&
             dput_at(gpu, &bb, b, d->O, NB_F32, 0) && dput_at(gpu, &by, NULL, ny, dt, 0) &&
             dput_at(gpu, &bdy, dy, ny, dt, 0) && dput_at(gpu, &bdx, NULL, nx, dt, 0) &&
             dput_at(gpu, &bdw, NULL, nw, NB_F32, 0) && dput_at(gpu, &bdb, NULL, d->O, NB_F32, 0);
    NB_EXPECT(ok);
    if (ok) {
        nb_memset(gpu, bdw.p, 0, (size_t)nw * 4);
        nb_memset(gpu, bdb.p, 0, (size_t)d->O * 4);
        if (lin) {
            NB_EXPECT_OK(nb_cuda_linear_forward(gpu, prec, d->N, d->C, d->O, dt, dt, bx.p, bw.p,
                                                bb.p, by.p));
            NB_EXPECT_OK(nb_cuda_linear_backward(gpu, prec, d->N, d->C, d->O, dt, dt, bx.p, bw.p,
                                                 bdy.p, bdx.p, bdw.p, bdb.p, 1));
        } else {
            NB_EXPECT_OK(nb_cuda_conv2d_forward(gpu, prec, d, dt, dt, bx.p, bw.p, bb.p, by.p));
            NB_EXPECT_OK(nb_cuda_conv2d_backward(gpu, prec, d, dt, dt, bx.p, bw.p, bdy.p, bdx.p,
                                                 bdw.p, bdb.p, 1));
        }
        dbuf *bs[4] = {&by, &bdx, &bdw, &bdb};
        for (int k = 0; k < 4; k++) NB_EXPECT(dget(gpu, bs[k], got[k]));
        static const char *names[4] = {"y", "dx", "dw", "db"};
        /* TF32 / bf16 operands (and bf16 outputs) against exact sums; db sums dy in f32 */
        double tol = prec == NB_TAPE_BF16 ? 3e-2 : 1e-2;
        for (int k = 0; k < 4; k++)
            CHECK_ERR(names[k], rel_err(got[k], ref[k], ns[k]), k == 3 ? 1e-4 : tol,
                      "%s %zu prec %d", lin ? "linear" : "conv", s, prec);
    }
    dfree(&bx), dfree(&bw), dfree(&bb), dfree(&by), dfree(&bdy), dfree(&bdx), dfree(&bdw),
        dfree(&bdb);
    for (int k = 0; k < 4; k++) free(ref[k]), free(got[k]);
    free(x), free(w), free(b), free(dy);
}

static void conv_vs_ref(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device or cuBLAS");
    static const int64_t cs[][8] = {
        {3, 64, 16, 16, 64, 3, 1, 1}, {2, 3, 16, 16, 64, 3, 1, 1}, {2, 64, 16, 16, 3, 3, 1, 1},
        {2, 64, 8, 8, 128, 1, 1, 0},  {3, 32, 9, 7, 32, 3, 1, 1},  {2, 64, 16, 16, 128, 3, 2, 1},
        {2, 128, 8, 8, 64, 3, 1, 1},  {2, 32, 32, 32, 32, 3, 1, 1}, /* MODE 2 (+ bias grad) */
        {2, 64, 32, 32, 32, 3, 1, 1}, /* MODE 3 */
    };
    for (size_t s = 0; s < sizeof cs / sizeof cs[0]; s++) {
        nb_conv_dims d;
        NB_REQUIRE_OK(nb_conv_dims_make(&d, cs[s][0], cs[s][1], cs[s][2], cs[s][3], cs[s][4],
                                        cs[s][5], cs[s][6], cs[s][7]));
        for (int prec = NB_TAPE_TF32; prec <= NB_TAPE_BF16; prec++) conv_case_ref(gpu, &d, prec, 0, s);
    }
    nb_device_close(gpu);
}

/* linear forward + backward with bias against the reference (the bias filled with the weight
 * conversion before a beta = 1 GEMM, the bias gradient by columns) */
static void test_linear_vs_ref(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device or cuBLAS");
    static const int64_t cs[][3] = {{32, 256, 1024}, {5, 40, 24}, {3, 7, 9}}; /* N, F, O */
    for (size_t s = 0; s < sizeof cs / sizeof cs[0]; s++) {
        nb_conv_dims d; /* x [N,F] as [N,F,1,1], w [O,F] as [O,F,1,1] */
        NB_REQUIRE_OK(nb_conv_dims_make(&d, cs[s][0], cs[s][1], 1, 1, cs[s][2], 1, 1, 0));
        for (int prec = NB_TAPE_TF32; prec <= NB_TAPE_BF16; prec++) conv_case_ref(gpu, &d, prec, 1, s);
    }
    nb_device_close(gpu);
}

/* ---- weights kept from the forward for the backward (nb_conv_wcache) ------------------------ */

/* conv2d / linear forward + backward with a cache (and with a wrong key: ignored) against the
 * plain calls; an implicit-GEMM key's cache holds exactly the data gradient's arrangement. */
static void wcache_check(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device or cuBLAS");
    static const int64_t cs[][8] = {
        {2, 64, 16, 16, 64, 3, 1, 1}, {2, 3, 16, 16, 64, 3, 1, 1}, {2, 64, 16, 16, 3, 3, 1, 1},
        {2, 64, 8, 8, 128, 1, 1, 0},  {3, 32, 9, 7, 32, 3, 1, 1},  {2, 64, 16, 16, 128, 3, 2, 1},
        {2, 32, 8, 8, 48, 3, 1, 1},   {0, 40, 0, 0, 24, 0, 0, 0}, /* linear F = 40 -> O = 24 */
    };
    int kept = 0;
    for (size_t s = 0; s < sizeof cs / sizeof cs[0]; s++) {
        int lin = cs[s][0] == 0;
        nb_conv_dims d;
        if (lin) {
            memset(&d, 0, sizeof d);
            d.N = 5, d.C = cs[s][1], d.O = cs[s][4], d.H = d.W = d.OH = d.OW = d.K = 1;
        } else {
            NB_REQUIRE_OK(nb_conv_dims_make(&d, cs[s][0], cs[s][1], cs[s][2], cs[s][3], cs[s][4],
                                            cs[s][5], cs[s][6], cs[s][7]));
        }
        int64_t nx = d.N * d.C * d.H * d.W, ny = d.N * d.O * d.OH * d.OW, nw = d.O * d.C * d.K * d.K;
        float *x = hrand(nx), *w = hrand(nw), *b = hrand(d.O), *dy = hrand(ny);
        for (int prec = s ? NB_TAPE_TF32 : NB_TAPE_FP32; prec <= NB_TAPE_BF16; prec++)
            for (int bfs = 0; bfs <= (prec == NB_TAPE_BF16); bfs++) {
                nb_dtype dt = bfs ? NB_BF16 : NB_F32;
                size_t bytes = lin ? nb_cuda_linear_wcache_bytes(prec, d.C, d.O, dt, dt)
                                   : nb_cuda_conv2d_wcache_bytes(prec, &d, dt, dt);
                float *res[3][2];
                int keys[3] = {0, 0, 0};
                for (int mode = 0; mode < 3; mode++) { /* plain, cache, cache with a wrong key */
                    dbuf bx, bw, bb, by, bdy, bdx, bc;
                    int ok = dput_at(gpu, &bx, x, nx, dt, 0) && dput_at(gpu, &bw, w, nw, NB_F32, 0) &&
                             dput_at(gpu, &bb, b, d.O, NB_F32, 0) && dput_at(gpu, &by, NULL, ny, dt, 0) &&
                             dput_at(gpu, &bdy, dy, ny, dt, 0) && dput_at(gpu, &bdx, NULL, nx, dt, 0) &&
                             dput_at(gpu, &bc, NULL, (int64_t)bytes / 2 + 8, NB_BF16, 0);
                    NB_EXPECT(ok);
                    nb_conv_wcache wc = {mode && bytes ? bc.p : NULL, 0};
                    if (ok) {
                        if (lin) {
                            NB_EXPECT_OK(nb_cuda_linear_forward_wc(gpu, prec, d.N, d.C, d.O, dt, dt, bx.p,
                                                                   bw.p, bb.p, by.p, &wc));
                        } else {
                            NB_EXPECT_OK(nb_cuda_conv2d_forward_wc(gpu, prec, &d, dt, dt, bx.p, bw.p,
                                                                   bb.p, by.p, &wc));
                        }
                        keys[mode] = wc.key;
                        if (mode == 1 && wc.key > 0 && wc.key < NB_CONV_WC_BF16 && !lin) {
                            /* the kept layout is the data gradient's arrangement, bit for bit */
                            size_t kb = nb_conv_igemm_wc_bytes(wc.key, &d);
                            unsigned char *h0 = malloc(kb), *h1 = malloc(kb);
                            NB_EXPECT_OK(nb_memcpy_d2h(gpu, h0, bc.p, kb));
                            void *wr;
                            size_t wb = 0;
                            NB_EXPECT_OK(nb_conv_igemm_arrange_weights(gpu, prec, &d, 1, bfs, bw.p, &wr, &wb, NULL));
                            NB_EXPECT(wb == kb);
                            if (wb == kb) {
                                NB_EXPECT_OK(nb_memcpy_d2h(gpu, h1, wr, kb));
                                NB_EXPECT(!memcmp(h0, h1, kb));
                            }
                            free(h0), free(h1);
                        }
                        if (mode == 2 && wc.key) wc.key = wc.key % NB_CONV_WC_BF16 + 1; /* wrong */
                        if (lin) {
                            NB_EXPECT_OK(nb_cuda_linear_backward_wc(gpu, prec, d.N, d.C, d.O, dt, dt, bx.p,
                                                                    bw.p, bdy.p, bdx.p, NULL, NULL, 1, &wc));
                        } else {
                            NB_EXPECT_OK(nb_cuda_conv2d_backward_wc(gpu, prec, &d, dt, dt, bx.p, bw.p,
                                                                    bdy.p, bdx.p, NULL, NULL, 1, &wc));
                        }
                    }
                    res[mode][0] = calloc((size_t)ny, 4), res[mode][1] = calloc((size_t)nx, 4);
                    if (ok) NB_EXPECT(dget(gpu, &by, res[mode][0]) && dget(gpu, &bdx, res[mode][1]));
                    dfree(&bx), dfree(&bw), dfree(&bb), dfree(&by), dfree(&bdy), dfree(&bdx), dfree(&bc);
                }
                if (keys[1]) kept++;
                NB_EXPECT(keys[0] == 0);
                NB_EXPECT((keys[1] != 0) == (bytes != 0));
                for (int mode = 1; mode < 3; mode++)
                    for (int k = 0; k < 2; k++) {
                        int64_t n = k ? nx : ny;
                        double num = 0, den = 0;
                        for (int64_t i = 0; i < n; i++) {
                            double e = (double)res[mode][k][i] - res[0][k][i];
                            num += e * e, den += (double)res[0][k][i] * res[0][k][i];
                        }
                        double rel = sqrt(num / (den > 0 ? den : 1));
                        /* the same sums (split sums in another order: bf16 roundings may flip) */
                        double tol = bfs ? 5e-3 : 1e-5;
                        if (!(rel <= tol))
                            fprintf(stderr, "  wcache shape %zu prec %d bf16 %d mode %d %s: rel %.3g (key %d)\n",
                                    s, prec, bfs, mode, k ? "dx" : "y", rel, keys[1]);
                        NB_EXPECT(rel <= tol);
                    }
                for (int mode = 0; mode < 3; mode++) free(res[mode][0]), free(res[mode][1]);
            }
        free(x), free(w), free(b), free(dy);
    }
    NB_EXPECT(kept >= 5);
    nb_device_close(gpu);
}

/* Both with the vectorized-im2col 3x3 weight-gradient kernel (conv_cuda_wg4.h: it takes most
 * 3x3 stride-1 shapes; the lead dropped its forward twin, slower than the halo kernels) and without it (the implicit-GEMM and cuBLAS paths this file's kernels
 * serve). */
static void test_conv_vs_ref(void) {
    for (int on = 1; on >= 0; on--) {
        nb_conv_wg4_enable(on);
        conv_vs_ref();
    }
    nb_conv_wg4_enable(-1);
}
static void test_wcache(void) {
    for (int on = 1; on >= 0; on--) {
        nb_conv_wg4_enable(on);
        wcache_check();
    }
    nb_conv_wg4_enable(-1);
}

/* ---- benchmark (NB_CONVAUX_BENCH=1) ----------------------------------------------------------- */

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

typedef nb_status (*bench_fn)(nb_device *gpu, void *ctx);

/* median ms of 20 calls (events between calls) after 3 warm-up calls */
static float time_it(nb_device *gpu, bench_fn f, void *ctx) {
    enum { ITERS = 20, WARM = 3 };
    nb_event *e[ITERS + 1];
    for (int i = 0; i <= ITERS; i++) NB_EXPECT_OK(nb_event_create(gpu, &e[i]));
    nb_stream *st = nb_device_stream(gpu);
    nb_status s = NB_OK;
    for (int it = 0; it < WARM + ITERS && s == NB_OK; it++) {
        if (it >= WARM) nb_event_record(e[it - WARM], st);
        s = f(gpu, ctx);
        if (it == WARM - 1) nb_device_synchronize(gpu);
    }
    nb_event_record(e[ITERS], st);
    nb_event_synchronize(e[ITERS]);
    float t[ITERS];
    for (int i = 0; i < ITERS; i++) nb_event_elapsed_ms(e[i], e[i + 1], &t[i]);
    for (int i = 0; i <= ITERS; i++) nb_event_destroy(e[i]);
    if (s != NB_OK) {
        fprintf(stderr, "  bench failed: %s\n", nb_last_error());
        return NAN;
    }
    qsort(t, ITERS, sizeof t[0], cmp_f);
    return (t[ITERS / 2 - 1] + t[ITERS / 2]) / 2;
}

typedef struct {
    void *y;
    float *b;
    nb_dtype dt;
    int64_t N, O, P;
    const nb_conv_dims *d;
    int prec, which, abf;
} bctx;

static nb_status b_grad(nb_device *gpu, void *c) {
    bctx *a = c;
    return nb_conv_bias_grad(gpu, a->y, a->dt, a->b, a->N, a->O, a->P);
}
static nb_status b_add(nb_device *gpu, void *c) {
    bctx *a = c;
    return nb_conv_add_bias(gpu, a->y, a->dt, a->b, a->N, a->O, a->P);
}
static nb_status b_wr(nb_device *gpu, void *c) {
    bctx *a = c;
    void *wr;
    size_t bytes;
    return nb_conv_igemm_arrange_weights(gpu, a->prec, a->d, a->which, a->abf, a->b, &wr, &bytes, NULL);
}

static void test_bench_aux(void) {
    const char *env = getenv("NB_CONVAUX_BENCH");
    if (!env || !env[0] || env[0] == '0') return; /* NB_CONVAUX_BENCH=1 runs it */
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device or cuBLAS");
    /* the reference UNet's conv outputs at batch 32 (O, P = OH*OW), and a linear (P = 1) */
    /* (channels 64, 128, 192, 256 at 64, 32, 16, 8 px) */
    static const int64_t op[][2] = {{64, 4096}, {3, 4096}, {128, 1024}, {192, 256}, {256, 64},
                                    {512, 64}, {256, 1}, {1024, 1}};
    const int64_t N = 32;
    dbuf by, bb;
    NB_REQUIRE_OK(nb_buffer_alloc(gpu, 32 * 128 * 4096 * 4 + 64, &by.b));
    by.p = nb_buffer_ptr(by.b);
    NB_REQUIRE_OK(nb_buffer_alloc(gpu, 512 * 512 * 9 * 4, &bb.b)); /* >= every w here */
    bb.p = nb_buffer_ptr(bb.b);
    nb_memset(gpu, by.p, 0, 32 * 128 * 4096 * 4);
    nb_memset(gpu, bb.p, 0, 512 * 512 * 9 * 4);
    printf("conv aux bench (H100 expected), batch %lld, median of 20 (ms)\n", (long long)N);
    double tot[2][2] = {{0}}; /* [kind][dtype] */
    for (int dt = 0; dt < 2; dt++)
        for (size_t s = 0; s < sizeof op / sizeof op[0]; s++) {
            bctx a = {by.p, bb.p, dt ? NB_BF16 : NB_F32, N, op[s][0], op[s][1], NULL, 0, 0, 0};
            float t[2] = {time_it(gpu, b_grad, &a), time_it(gpu, b_add, &a)};
            double mb = (double)(N * a.O * a.P) * (dt ? 2 : 4) / 1e6;
            printf("  %-4s O=%-4lld P=%-5lld (%6.1f MB)  bias_grad %.4f (%5.0f GB/s)   bias %.4f (%5.0f GB/s)\n",
                   dt ? "bf16" : "f32", (long long)a.O, (long long)a.P, mb, t[0], mb / t[0],
                   t[1], 2 * mb / t[1]);
            for (int k = 0; k < 2; k++) tot[k][dt] += t[k];
        }
    for (int dt = 0; dt < 2; dt++)
        printf("  sum %s: bias_grad %.4f, bias %.4f\n", dt ? "bf16" : "f32", tot[0][dt], tot[1][dt]);
    /* the linear's tall-skinny [2^20, 64] (issue #17 Benchmark 2): memory floor on an H200
     * ~0.16 ms (add) / ~0.08 ms (gradient) in f32 */
    {
        dbuf bt;
        const int64_t TN = (int64_t)1 << 20, TF = 64;
        if (nb_buffer_alloc(gpu, (size_t)(TN * TF) * 4, &bt.b) == NB_OK) {
            bt.p = nb_buffer_ptr(bt.b);
            nb_memset(gpu, bt.p, 0, (size_t)(TN * TF) * 4);
            for (int dt = 0; dt < 2; dt++) {
                bctx a = {bt.p, bb.p, dt ? NB_BF16 : NB_F32, TN, TF, 1, NULL, 0, 0, 0};
                float t[2] = {time_it(gpu, b_grad, &a), time_it(gpu, b_add, &a)};
                double mb = (double)(TN * TF) * (dt ? 2 : 4) / 1e6;
                printf("  %-4s linear [%lld, %lld] (%6.1f MB)  bias_grad %.4f (%5.0f GB/s)   bias %.4f (%5.0f GB/s)\n",
                       dt ? "bf16" : "f32", (long long)TN, (long long)TF, mb, t[0], mb / t[0], t[1],
                       2 * mb / t[1]);
            }
            nb_buffer_release(bt.b);
        }
    }
    /* weight arrangement: the UNet's 3x3 stride-1 convs (C -> O at the size) */
    static const int64_t wc[][4] = {{3, 64, 64},    {64, 64, 64},   {128, 64, 64},  {64, 128, 32},
                                    {128, 128, 32}, {256, 128, 32}, {128, 192, 16}, {192, 192, 16},
                                    {384, 192, 16}, {192, 256, 8},  {256, 256, 8},  {512, 256, 8},
                                    {64, 3, 64}};
    double wt[2] = {0};
    for (int prec = NB_TAPE_TF32; prec <= NB_TAPE_BF16; prec++)
        for (size_t s = 0; s < sizeof wc / sizeof wc[0]; s++) {
            nb_conv_dims d;
            if (nb_conv_dims_make(&d, N, wc[s][0], wc[s][2], wc[s][2], wc[s][1], 3, 1, 1)) continue;
            printf("  weights %s %lld->%lld at %lld:", prec == NB_TAPE_BF16 ? "bf16" : "tf32",
                   (long long)d.C, (long long)d.O, (long long)d.H);
            for (int which = 0; which <= 1; which++) {
                bctx a = {NULL, bb.p, NB_F32, 0, 0, 0, &d, prec, which, prec == NB_TAPE_BF16};
                void *wr;
                size_t bytes;
                if (nb_conv_igemm_arrange_weights(gpu, prec, &d, which, a.abf, bb.p, &wr, &bytes, NULL) != NB_OK) {
                    printf("  %s n/a", which ? "dgrad" : "fwd");
                    continue;
                }
                float t = time_it(gpu, b_wr, &a);
                printf("  %s %.4f", which ? "dgrad" : "fwd", t);
                wt[prec - 1] += t;
            }
            printf("\n");
        }
    printf("  sum weights tf32 %.4f, bf16 %.4f\n", wt[0], wt[1]);
    nb_buffer_release(by.b);
    nb_buffer_release(bb.b);
    nb_device_close(gpu);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_bias_grad, test_bias_add, test_bias_relu_det, test_sum_splits, test_split_out,
                 test_weight_arrangement, test_conv_vs_ref, test_linear_vs_ref, test_wcache, test_bench_aux);
}

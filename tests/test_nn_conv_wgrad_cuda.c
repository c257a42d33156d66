/* conv2d weight gradient as im2col + one cuBLAS GEMM (src/nn/conv/conv_cuda_wgrad.c): dw against an
 * f64 CPU reference for the reference UNet's shapes (3x3 stride 1 pad 1 with C / O from 3 to 512
 * at 64 / 32 / 16 / 8 px, 3x3 stride 2, 1x1) at a small batch, on bf16 storage (BF16 precision,
 * also x f32 with dy bf16), and f32 storage at FP32 / TF32 / BF16; dw accumulates (two calls
 * onto random values); odd sizes (N = 3, 7x9 images), K splits, both column layouts, chunked
 * batches, unaligned pointers; bad input is refused. Skips without a GPU (NB_REQUIRE_CUDA=1:
 * fails).
 *
 * Benchmark: NB_WGRAD_BENCH=1 ./test_nn_conv_wgrad_cuda test_bench_wgrad  times this path (im2col
 * form: test_bench_wgrad_im2col, row-shift form: test_bench_wgrad_rowshift)
 * against today's weight gradient (nb_cuda_conv2d_backward with dx = db = NULL, automatic
 * algorithm) at batch 32 on the UNet's 3x3 shapes, bf16 storage and TF32 f32 storage, CUDA
 * events, median of 20. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "nb_test.h"
#include "nabla/device.h"
#include "nabla/dtype.h"
#include "nabla/nn_tape.h"
#include "nabla/status.h"
#include "nn/conv/conv_cuda.h"
#include "nn/conv/conv_cuda_wgrad.h"
#include "device/cublas.h"
#include "nb_test_dbuf.h"

static float *hrand(int64_t n) {
    float *a = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) a[i] = frand();
    return a;
}



/* dw[o][c*KK + kk] = sum over n, p of dy[n][o][p] x[n][c][tap kk of p]; aw: the same sum of
 * absolute values (the scale of rounding errors) */
static void ref_wgrad(const nb_conv_dims *d, const float *x, const float *dy, double *dw,
                      double *aw) {
    int64_t C = d->C, H = d->H, W = d->W, O = d->O, K = d->K, OH = d->OH, OW = d->OW;
    int64_t CKK = C * K * K;
    for (int64_t i = 0; i < O * CKK; i++) dw[i] = 0.0, aw[i] = 0.0;
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t c = 0; c < C; c++)
                for (int64_t ki = 0; ki < K; ki++)
                    for (int64_t kj = 0; kj < K; kj++) {
                        double s = 0.0, a = 0.0;
                        for (int64_t oh = 0; oh < OH; oh++) {
                            int64_t ih = oh * d->stride - d->pad + ki;
                            if (ih < 0 || ih >= H) continue;
                            const float *g = dy + ((n * O + o) * OH + oh) * OW;
                            const float *xr = x + ((n * C + c) * H + ih) * W;
                            for (int64_t ow = 0; ow < OW; ow++) {
                                int64_t iw = ow * d->stride - d->pad + kj;
                                if (iw < 0 || iw >= W) continue;
                                double t = (double)g[ow] * xr[iw];
                                s += t, a += fabs(t);
                            }
                        }
                        int64_t wi = o * CKK + (c * K + ki) * K + kj;
                        dw[wi] += s, aw[wi] += a;
                    }
}

static const char *prec_name[] = {"fp32", "tf32", "bf16"};

/* Runs the GEMM path twice onto random dw0 and checks dw0 + 2 ref within tol of 2 aw. Returns
 * the worst error / scale. */
static double run_case(nb_device *gpu, const nb_conv_dims *d, int prec, nb_dtype xdt,
                       nb_dtype ydt, const float *x, const float *dy, const double *ref,
                       const double *aw) {
    int64_t L = d->O * d->C * d->K * d->K, P = d->OH * d->OW;
    float *dw0 = hrand(L), *got = malloc((size_t)L * sizeof(float));
    dbuf bx, by, bw;
    double worst = INFINITY;
    if (!dput(gpu, &bx, x, d->N * d->C * d->H * d->W, xdt) || !dput(gpu, &by, dy, d->N * d->O * P, ydt) ||
        !dput(gpu, &bw, dw0, L, NB_F32)) {
        NB_EXPECT(0);
        goto done;
    }
    for (int r = 0; r < 2; r++)
        NB_EXPECT_OK(nb_conv_wgrad_gemm(gpu, prec, d, bx.p, xdt, by.p, ydt, (float *)bw.p));
    NB_EXPECT_OK(nb_memcpy_d2h(gpu, got, bw.p, (size_t)L * 4));
    double amax = 1e-30;
    for (int64_t i = 0; i < L; i++) amax = aw[i] > amax ? aw[i] : amax;
    worst = 0.0;
    for (int64_t i = 0; i < L; i++) {
        double want = (double)dw0[i] + 2.0 * ref[i];
        double e = fabs((double)got[i] - want) / (2.0 * aw[i] + 1e-3 * amax);
        if (!(e <= worst)) worst = e; /* NaN sticks */
    }
done:
    dfree(&bx), dfree(&by), dfree(&bw);
    free(dw0), free(got);
    return worst;
}

/* Error scale per operand precision: bf16 operands (storage or BF16 precision) 2e-2, TF32 5e-3,
 * FP32 2e-5 (of the sum of |terms|). */
static double tol_for(int prec, nb_dtype xdt, nb_dtype ydt) {
    if (xdt == NB_BF16 || ydt == NB_BF16 || prec == NB_TAPE_BF16) return 2e-2;
    return prec == NB_TAPE_TF32 ? 5e-3 : 2e-5;
}

/* Every storage / precision combination on one shape. */
static void check_shape(nb_device *gpu, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,
                        int64_t K, int64_t S, int64_t pad, int all) {
    nb_conv_dims d;
    NB_REQUIRE_OK(nb_conv_dims_make(&d, N, C, H, W, O, K, S, pad));
    int64_t L = O * C * K * K;
    float *x = hrand(N * C * H * W), *dy = hrand(N * O * d.OH * d.OW);
    double *ref = malloc((size_t)L * sizeof(double)), *aw = malloc((size_t)L * sizeof(double));
    ref_wgrad(&d, x, dy, ref, aw);
    static const struct { int prec; nb_dtype xdt, ydt; } combos[] = {
        {NB_TAPE_BF16, NB_BF16, NB_BF16}, {NB_TAPE_TF32, NB_F32, NB_F32},
        {NB_TAPE_FP32, NB_F32, NB_F32},   {NB_TAPE_BF16, NB_F32, NB_F32},
        {NB_TAPE_BF16, NB_F32, NB_BF16},  {NB_TAPE_BF16, NB_BF16, NB_F32},
    };
    int nc = all ? 6 : 2;
    for (int i = 0; i < nc; i++) {
        double e = run_case(gpu, &d, combos[i].prec, combos[i].xdt, combos[i].ydt, x, dy, ref, aw);
        double tol = tol_for(combos[i].prec, combos[i].xdt, combos[i].ydt);
        if (!(e <= tol))
            fprintf(stderr, "  N%lld C%lld %lldx%lld O%lld K%lld s%lld p%lld %s x %s dy %s: err %.3g > %.3g\n",
                    (long long)N, (long long)C, (long long)H, (long long)W, (long long)O,
                    (long long)K, (long long)S, (long long)pad, prec_name[combos[i].prec],
                    nb_dtype_name(combos[i].xdt), nb_dtype_name(combos[i].ydt), e, tol);
        NB_EXPECT(e <= tol);
    }
    free(x), free(dy), free(ref), free(aw);
}

static void test_wgrad_unet_shapes(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device or cuBLAS");
    nb_conv_wgrad_set_tuning(0, 0, 0);
    /* 3x3 stride 1 pad 1: the UNet's levels (64 / 32 / 16 / 8 px) */
    static const int64_t s1[][3] = {{3, 64, 64},    {64, 64, 64},   {64, 3, 64},    {128, 64, 64},
                                    {64, 128, 32},  {128, 128, 32}, {256, 128, 32}, {128, 192, 16},
                                    {192, 192, 16}, {384, 192, 16}, {192, 256, 8},  {256, 256, 8},
                                    {512, 256, 8}};
    for (size_t i = 0; i < sizeof s1 / sizeof s1[0]; i++)
        check_shape(gpu, 2, s1[i][0], s1[i][2], s1[i][2], s1[i][1], 3, 1, 1, s1[i][0] <= 128);
    /* 3x3 stride 2 (downsampling) and 1x1 (skip projections) */
    check_shape(gpu, 2, 64, 64, 64, 64, 3, 2, 1, 1);
    check_shape(gpu, 2, 192, 16, 16, 192, 3, 2, 1, 0);
    check_shape(gpu, 2, 192, 32, 32, 128, 1, 1, 0, 1);
    check_shape(gpu, 2, 512, 8, 8, 256, 1, 1, 0, 0);
    nb_device_close(gpu);
}

static void test_wgrad_odd(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device or cuBLAS");
    nb_conv_wgrad_set_tuning(0, 0, 0);
    check_shape(gpu, 3, 5, 7, 9, 6, 3, 1, 1, 1);
    check_shape(gpu, 3, 5, 7, 9, 6, 3, 2, 1, 1);
    check_shape(gpu, 3, 5, 7, 9, 6, 1, 1, 0, 1);
    check_shape(gpu, 3, 5, 7, 9, 6, 1, 2, 0, 1);
    check_shape(gpu, 3, 4, 9, 7, 3, 3, 1, 0, 1);  /* no padding */
    check_shape(gpu, 1, 1, 1, 1, 1, 3, 1, 1, 1);  /* one pixel */
    /* unaligned pointers: the scalar transpose */
    dput_offset = 1;
    check_shape(gpu, 3, 8, 8, 8, 16, 3, 1, 1, 1);
    dput_offset = 0;
    nb_device_close(gpu);
}

/* K splits (automatic, none, uneven), the [K, CKK] column layout, and chunked batches. */
static void test_wgrad_tuning(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device or cuBLAS");
    static const int t[][3] = {{1, 0, 0}, {3, 0, 0}, {7, 0, 0}, {0, 1, 0}, {5, 1, 0}, {0, 0, 1},
                               {4, 1, 1}, {0, 2, 0}, {1, 2, 0}, {3, 2, 0}, {2, 2, 1},
                               {0, -1, 0}, {0, -1, 1}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        nb_conv_wgrad_set_tuning(t[i][0], t[i][1], t[i][2]);
        check_shape(gpu, 4, 64, 32, 32, 32, 3, 1, 1, 0); /* 1 MiB chunks: one sample a chunk */
        check_shape(gpu, 3, 5, 7, 9, 6, 3, 2, 1, 0);
    }
    nb_conv_wgrad_set_tuning(0, 0, 0);
    nb_device_close(gpu);
}

/* The row-shift form (layout 2: 3x3 stride 1 pad 1 with OW % 8 == 0; others fall back). */
static void test_wgrad_rowshift(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device or cuBLAS");
    nb_conv_wgrad_set_tuning(0, 2, 0);
    static const int64_t s1[][3] = {{3, 64, 64},    {64, 64, 64},   {128, 64, 64}, {128, 128, 32},
                                    {256, 128, 32}, {192, 192, 16}, {384, 192, 16}, {256, 256, 8},
                                    {512, 256, 8}};
    for (size_t i = 0; i < sizeof s1 / sizeof s1[0]; i++)
        check_shape(gpu, 1, s1[i][0], s1[i][2], s1[i][2], s1[i][1], 3, 1, 1, s1[i][0] <= 128);
    check_shape(gpu, 3, 5, 7, 16, 6, 3, 1, 1, 1); /* odd height, OW 16 */
    check_shape(gpu, 3, 5, 7, 9, 6, 3, 1, 1, 1);  /* OW 9: the im2col fallback */
    check_shape(gpu, 2, 192, 32, 32, 128, 1, 1, 0, 0);
    nb_conv_wgrad_set_tuning(0, 0, 0);
    nb_device_close(gpu);
}

static void test_wgrad_bad_input(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device or cuBLAS");
    nb_conv_dims d;
    NB_REQUIRE_OK(nb_conv_dims_make(&d, 1, 4, 8, 8, 4, 3, 1, 1));
    float *p = (float *)(uintptr_t)256; /* never dereferenced: refused before any launch */
    NB_EXPECT_ERR(nb_conv_wgrad_gemm(gpu, NB_TAPE_TF32, &d, p, NB_BF16, p, NB_BF16, p),
                  NB_ERR_INVALID_ARG, "bf16 storage needs BF16");
    NB_EXPECT_ERR(nb_conv_wgrad_gemm(gpu, NB_TAPE_FP32, &d, p, NB_F32, p, NB_BF16, p),
                  NB_ERR_INVALID_ARG, "bf16 storage needs BF16");
    NB_EXPECT_ERR(nb_conv_wgrad_gemm(gpu, NB_TAPE_BF16, &d, p, NB_F16, p, NB_BF16, p),
                  NB_ERR_INVALID_ARG, "storage dtypes f16");
    NB_EXPECT_ERR(nb_conv_wgrad_gemm(gpu, 7, &d, p, NB_F32, p, NB_F32, p), NB_ERR_INVALID_ARG,
                  "precision 7 is not");
    NB_EXPECT_ERR(nb_conv_wgrad_gemm(gpu, NB_TAPE_TF32, &d, p, NB_F32, p, NB_F32, NULL),
                  NB_ERR_INVALID_ARG, "is NULL");
    nb_conv_dims bad = d;
    bad.OH = 3;
    NB_EXPECT_ERR(nb_conv_wgrad_gemm(gpu, NB_TAPE_TF32, &bad, p, NB_F32, p, NB_F32, p),
                  NB_ERR_INVALID_ARG, "bad dims");
    nb_device *cpu = NULL;
    if (nb_device_open("cpu", &cpu) == NB_OK) {
        NB_EXPECT_ERR(nb_conv_wgrad_gemm(cpu, NB_TAPE_TF32, &d, p, NB_F32, p, NB_F32, p),
                      NB_ERR_INVALID_ARG, "is not a CUDA device");
        nb_device_close(cpu);
    }
    nb_device_close(gpu);
}

/* ---- benchmark (NB_WGRAD_BENCH=1) ------------------------------------------------------------ */

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Median ms of iters back-to-back calls (events between calls, one sync at the end). which: 0
 * today's implicit-GEMM backward (dw only, algorithm forced to 2), 1 the GEMM path. */
static float time_it(nb_device *gpu, const nb_conv_dims *d, int prec, nb_dtype sdt, void *x,
                     float *w, void *dy, float *dw, int which) {
    enum { ITERS = 20, WARM = 3 };
    nb_event *e[ITERS + 1];
    for (int i = 0; i <= ITERS; i++) NB_EXPECT_OK(nb_event_create(gpu, &e[i]));
    nb_stream *st = nb_device_stream(gpu);
    nb_status s = NB_OK;
    int algo = nb_cuda_conv_get_algo();
    if (!which) nb_cuda_conv_set_algo(2); /* the implicit-GEMM kernels (automatic would pick the GEMM path on small images) */
    for (int it = 0; it < WARM + ITERS && s == NB_OK; it++) {
        if (it >= WARM) nb_event_record(e[it - WARM], st);
        s = which ? nb_conv_wgrad_gemm(gpu, prec, d, x, sdt, dy, sdt, dw)
                  : nb_cuda_conv2d_backward(gpu, prec, d, sdt, sdt, x, w, dy, NULL, dw, NULL, 0);
        if (it == WARM - 1) nb_device_synchronize(gpu);
    }
    nb_cuda_conv_set_algo(algo);
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

static void bench_wgrad(int rowshift) {
    const char *env = getenv("NB_WGRAD_BENCH");
    if (!env || !env[0] || env[0] == '0') return; /* NB_WGRAD_BENCH=1 runs it (passes as a no-op) */
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device or cuBLAS");
    static const int64_t sh[][3] = {{64, 64, 64},   {128, 64, 64},  {128, 128, 32}, {256, 128, 32},
                                    {192, 192, 16}, {384, 192, 16}, {256, 256, 8},  {512, 256, 8}};
    const int64_t N = 32;
    size_t most = 0;
    for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
        size_t a = (size_t)(N * sh[i][0] * sh[i][2] * sh[i][2]), b = (size_t)(N * sh[i][1] * sh[i][2] * sh[i][2]);
        most = a > most ? a : most, most = b > most ? b : most;
    }
    float *h = hrand((int64_t)most);
    dbuf bx, by, bxb, byb, bw, bdw;
    if (!dput(gpu, &bx, h, (int64_t)most, NB_F32) || !dput(gpu, &by, h, (int64_t)most, NB_F32) ||
        !dput(gpu, &bxb, h, (int64_t)most, NB_BF16) || !dput(gpu, &byb, h, (int64_t)most, NB_BF16) ||
        !dput(gpu, &bw, h, 512 * 512 * 9, NB_F32) || !dput(gpu, &bdw, NULL, 512 * 512 * 9, NB_F32)) {
        NB_EXPECT(0);
        nb_device_close(gpu);
        return;
    }
    NB_EXPECT_OK(nb_memset(gpu, bdw.p, 0, 512 * 512 * 9 * 4));
    printf("wgrad bench: batch %lld, 3x3 stride 1 pad 1, median of 20 (ms, TFLOP/s = 2 N O P C 9 / t)\n",
           (long long)N);
    for (int pass = 0; pass < 2; pass++) {
        nb_dtype sdt = pass == 0 ? NB_BF16 : NB_F32;
        int prec = pass == 0 ? NB_TAPE_BF16 : NB_TAPE_TF32;
        const char *tag = pass == 0 ? "bf16s" : "tf32";
        void *xp = pass == 0 ? bxb.p : bx.p, *yp = pass == 0 ? byb.p : by.p;
        for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
            nb_conv_dims d;
            if (nb_conv_dims_make(&d, N, sh[i][0], sh[i][2], sh[i][2], sh[i][1], 3, 1, 1) != NB_OK) continue;
            double fl = 2.0 * (double)N * d.O * d.OH * d.OW * d.C * 9;
            int lay = rowshift ? 2 : 0;
            nb_conv_wgrad_set_tuning(0, lay, 0);
            float base = time_it(gpu, &d, prec, sdt, xp, bw.p, yp, bdw.p, 0);
            float t_auto = time_it(gpu, &d, prec, sdt, xp, bw.p, yp, bdw.p, 1);
            nb_conv_wgrad_set_tuning(1, lay, 0);
            float t_one = time_it(gpu, &d, prec, sdt, xp, bw.p, yp, bdw.p, 1);
            float best = INFINITY;
            int best_s = 0;
            static const int splits[] = {2, 4, 8, 16, 32};
            for (int k = 0; k < 5; k++) {
                nb_conv_wgrad_set_tuning(splits[k], lay, 0);
                float t = time_it(gpu, &d, prec, sdt, xp, bw.p, yp, bdw.p, 1);
                if (t < best) best = t, best_s = splits[k];
            }
            nb_conv_wgrad_set_tuning(0, rowshift ? 0 : 1, 0);
            float t_l1 = time_it(gpu, &d, prec, sdt, xp, bw.p, yp, bdw.p, 1);
            nb_conv_wgrad_set_tuning(0, lay, 0);
            nb_conv_wgrad_set_skip(4);
            float t_prep = time_it(gpu, &d, prec, sdt, xp, bw.p, yp, bdw.p, 1);
            nb_conv_wgrad_set_skip(3);
            float t_gemm = time_it(gpu, &d, prec, sdt, xp, bw.p, yp, bdw.p, 1);
            nb_conv_wgrad_set_skip(0);
            nb_conv_wgrad_set_tuning(0, 0, 0);
            printf(rowshift ? "%-5s C%-3lld O%-3lld S%-2lld  today %7.4f ms %6.1f TF/s | rowshift auto(S=%d) %7.4f ms "
                   "%6.1f TF/s  x%.2f | S=1 %7.4f | best S=%-2d %7.4f | im2col auto %7.4f | parts: cols3+dyp "
                   "%7.4f gemm+sum %7.4f\n" : "%-5s C%-3lld O%-3lld S%-2lld  today %7.4f ms %6.1f TF/s | gemm auto(S=%d) %7.4f ms "
                   "%6.1f TF/s  x%.2f | S=1 %7.4f | best S=%-2d %7.4f | layout1 %7.4f | parts: im2col+dyT "
                   "%7.4f gemm+sum %7.4f\n",
                   tag, (long long)d.C, (long long)d.O, (long long)d.H, base, fl / base * 1e-9,
                   nb_conv_wgrad_auto_split(gpu, &d), t_auto, fl / t_auto * 1e-9, base / t_auto,
                   t_one, best_s, best, t_l1, t_prep, t_gemm);
            fflush(stdout);
        }
    }
    dfree(&bx), dfree(&by), dfree(&bxb), dfree(&byb), dfree(&bw), dfree(&bdw);
    free(h);
    nb_device_close(gpu);
}

static void test_bench_wgrad_im2col(void) { bench_wgrad(0); }
static void test_bench_wgrad_rowshift(void) { bench_wgrad(1); }

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_wgrad_bad_input, test_wgrad_odd, test_wgrad_tuning,
                 test_wgrad_unet_shapes, test_wgrad_rowshift, test_bench_wgrad_im2col,
                 test_bench_wgrad_rowshift);
}

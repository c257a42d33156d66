/* CUDA linear and conv2d of the tape (src/nn/conv/conv_cuda.c, conv_cuda_igemm.c, tape_cuda_conv.c):
 * the raw kernels against an independent double reference over every kernel size / stride /
 * pad / bias combination on odd sizes, per precision, both algorithms (im2col + cuBLAS and
 * the implicit-GEMM kernels; the tape tests use the automatic choice), accumulation into existing
 * gradients and, for the data gradient, store mode (dx_store: starts as NaNs, must be written
 * everywhere); the CPU tape against the CUDA tape, including a value consumed twice (first
 * contribution stored, second accumulated); bad input (runs without a GPU). Skips without a GPU.
 *
 * Benchmark mode: NB_CONV_BENCH=1 ./test_nn_tape_conv_cuda bench  times forward and backward
 * of the reference UNet's convolutions at batch 32 per precision and algorithm (cublas, igemm,
 * auto = the automatic choice; the backward stores dx, as the tape's first contribution; "wgrad":
 * the weight gradient alone, part of bwd) (PyTorch
 * reference: bench/torch/bench_conv.py); rows "bf16s" store the activations (x, y, dy, dx) in
 * bf16 (the BF16 tape's storage) where "bf16" keeps them f32; NB_CONV_BENCH=sweep adds
 * implicit-GEMM tile sweeps. NB_CONV_BENCH=quick: tf32 auto, bf16s on each algorithm, and
 * "conv-m2" / "conv-part" rows (bf16s with the 3x3 weight gradient on MODE 2 instead of the halo
 * MODE 3 / with split partial sums stored and summed instead of atomics). */
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jit/cuda_files.h"
#include "nabla/env.h"
#include "nb_test.h"
#include "nabla/device.h"
#include "nabla/nn_tape.h"
#include "nn/conv/conv_cuda.h"
#include "nn/conv/conv_cuda_igemm.h"
#include "device/cublas.h"
#include "device/cuda/cuda_api.h"
#include "nb_test_conv_ref.h"

#define NB_TRY_T(expr)                                                                         \
    do {                                                                                       \
        nb_status s_ = (expr);                                                                 \
        if (s_ != NB_OK) return s_;                                                            \
    } while (0)

/* ---- helpers -------------------------------------------------------------------------------- */

static uint64_t rng_state = 88172645463325252ull;
static float frand(void) { /* uniform [-1, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static float *hrand(int64_t n) {
    float *a = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) a[i] = frand();
    return a;
}

static nb_device *open_gpu(void) {
    nb_device *gpu = NULL;
    if (nb_device_open("cuda", &gpu) != NB_OK) return NULL;
    return gpu;
}

/* Device copy of a host array (NULL host: n uninitialised floats). */
typedef struct {
    nb_buffer *b;
    float *p;
} dbuf;
static int dput_offset; /* floats: > 0 gives misaligned device pointers */
static int dput(nb_device *gpu, dbuf *d, const float *host, int64_t n) {
    d->b = NULL;
    d->p = NULL;
    if (nb_buffer_alloc(gpu, (size_t)(n + 4) * sizeof(float), &d->b) != NB_OK) return 0;
    d->p = (float *)nb_buffer_ptr(d->b) + dput_offset;
    if (host && nb_memcpy_h2d(gpu, d->p, host, (size_t)n * sizeof(float)) != NB_OK) return 0;
    return 1;
}
static void dget(nb_device *gpu, const dbuf *d, float *host, int64_t n) {
    NB_EXPECT_OK(nb_memcpy_d2h(gpu, host, d->p, (size_t)n * sizeof(float)));
}
static void dfree(dbuf *d) {
    if (d->b) nb_buffer_release(d->b);
    d->b = NULL;
}

static double rel_err_f(const float *a, const float *ref, int64_t n) {
    double *r = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) r[i] = ref[i];
    double e = rel_err(a, r, n);
    free(r);
    return e;
}

static const char *prec_name[3] = {"fp32", "tf32", "bf16"};
static const double prec_tol[3] = {1e-4, 1e-2, 3e-2};

/* (the double references conv_ref / rel_err / CHECK_ERR: nb_test_conv_ref.h) */

/* ---- raw conv2d against the reference ------------------------------------------------------- */

typedef struct {
    int64_t N, C, H, W, O;
} conv_size;

/* Host array of n NaNs: a store-mode gradient must overwrite every one of them. */
static float *hnan(int64_t n) {
    float *a = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) a[i] = NAN;
    return a;
}

/* One case on the GPU at one precision; dw / db start from random values (accumulation), dx
 * too unless store (dx_store = 1: dx starts as NaNs and must be written everywhere). */
static void conv_case(nb_device *gpu, const conv_size *sz, int K, int stride, int pad, int bias,
                      int prec, int store) {
    nb_conv_dims d;
    NB_REQUIRE_OK(nb_conv_dims_make(&d, sz->N, sz->C, sz->H, sz->W, sz->O, K, stride, pad));
    int64_t nx = d.N * d.C * d.H * d.W, nw = d.O * d.C * K * K, ny = d.N * d.O * d.OH * d.OW;
    float *x = hrand(nx), *w = hrand(nw), *b = bias ? hrand(d.O) : NULL, *dy = hrand(ny);
    float *dx0 = store ? hnan(nx) : hrand(nx), *dw0 = hrand(nw), *db0 = hrand(d.O);
    double *y = calloc((size_t)ny, sizeof(double)), *dx = calloc((size_t)nx, sizeof(double));
    double *dw = calloc((size_t)nw, sizeof(double)), *db = calloc((size_t)d.O, sizeof(double));
    conv_ref(&d, x, w, b, dy, y, dx, dw, db);
    for (int64_t i = 0; i < nx && !store; i++) dx[i] += dx0[i];
    for (int64_t i = 0; i < nw; i++) dw[i] += dw0[i];
    for (int64_t i = 0; i < d.O; i++) db[i] += db0[i];
    dbuf gx, gw, gb = {0}, gdy, gy, gdx, gdw, gdb;
    int ok = dput(gpu, &gx, x, nx) && dput(gpu, &gw, w, nw) && (!bias || dput(gpu, &gb, b, d.O)) &&
             dput(gpu, &gdy, dy, ny) && dput(gpu, &gy, NULL, ny) && dput(gpu, &gdx, dx0, nx) &&
             dput(gpu, &gdw, dw0, nw) && dput(gpu, &gdb, db0, d.O);
    NB_EXPECT(ok);
    float *hy = malloc((size_t)ny * sizeof(float)), *hdx = malloc((size_t)nx * sizeof(float));
    float *hdw = malloc((size_t)nw * sizeof(float)), *hdb = malloc((size_t)d.O * sizeof(float));
    if (ok) {
        NB_EXPECT_OK(nb_cuda_conv2d_forward(gpu, prec, &d, NB_F32, NB_F32, gx.p, gw.p, bias ? gb.p : NULL, gy.p));
        NB_EXPECT_OK(nb_cuda_conv2d_backward(gpu, prec, &d, NB_F32, NB_F32, gx.p, gw.p, gdy.p, gdx.p, gdw.p, gdb.p,
                                             store));
        dget(gpu, &gy, hy, ny);
        dget(gpu, &gdx, hdx, nx);
        dget(gpu, &gdw, hdw, nw);
        dget(gpu, &gdb, hdb, d.O);
        double tol = prec_tol[prec];
#define DESC "%s algo %d N%lld C%lld H%lld W%lld O%lld K%d s%d p%d bias %d store %d",          \
             prec_name[prec], nb_cuda_conv_get_algo(), (long long)d.N, (long long)d.C,          \
             (long long)d.H, (long long)d.W, (long long)d.O, K, stride, pad, bias, store
        CHECK_ERR("y", rel_err(hy, y, ny), tol, DESC);
        CHECK_ERR("dx", rel_err(hdx, dx, nx), tol, DESC);
        CHECK_ERR("dw", rel_err(hdw, dw, nw), tol, DESC);
        CHECK_ERR("db", rel_err(hdb, db, d.O), 1e-4, DESC);
#undef DESC
        /* dx / dw / db NULL: nothing written, no error */
        NB_EXPECT_OK(nb_cuda_conv2d_backward(gpu, prec, &d, NB_F32, NB_F32, gx.p, gw.p, gdy.p, NULL, gdw.p, NULL, 0));
        NB_EXPECT_OK(nb_cuda_conv2d_backward(gpu, prec, &d, NB_F32, NB_F32, gx.p, gw.p, gdy.p, gdx.p, NULL, NULL, store));
        NB_EXPECT_OK(nb_device_synchronize(gpu));
        /* the second weight gradient (dx NULL) added the same sum again: dw0 + 2 g; it ran
         * right after the first, on the weight-gradient scratch the first one re-zeroed */
        for (int64_t i = 0; i < nw; i++) dw[i] += dw[i] - dw0[i];
        dget(gpu, &gdw, hdw, nw);
        CHECK_ERR("dw twice", rel_err(hdw, dw, nw), prec_tol[prec],
                  "%s algo %d N%lld C%lld H%lld W%lld O%lld K%d s%d p%d", prec_name[prec],
                  nb_cuda_conv_get_algo(), (long long)d.N, (long long)d.C, (long long)d.H,
                  (long long)d.W, (long long)d.O, K, stride, pad);
    }
    dbuf *all[] = {&gx, &gw, &gb, &gdy, &gy, &gdx, &gdw, &gdb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dfree(all[i]);
    free(x), free(w), free(b), free(dy), free(dx0), free(dw0), free(db0);
    free(y), free(dx), free(dw), free(db), free(hy), free(hdx), free(hdw), free(hdb);
}

static void conv_sweep(int algo) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device");
    if (!nb_cublas_available()) {
        nb_device_close(gpu);
        NB_SKIP(nb_cublas_unavailable_reason());
    }
    for (int prec = 0; prec <= 2; prec++) NB_EXPECT_OK(nb_cuda_conv_prewarm(gpu, prec));
    nb_cuda_conv_set_algo(algo);
    const conv_size odd = {3, 5, 9, 11, 7};
    for (int prec = 0; prec < 3; prec++)
        for (int K = 1; K <= 3; K += 2)
            for (int stride = 1; stride <= 2; stride++)
                for (int pad = 0; pad <= 2; pad++)
                    for (int bias = 0; bias <= 1; bias++)
                        conv_case(gpu, &odd, K, stride, pad, bias, prec, bias ^ (pad & 1));
    /* tile edges of the tensor-core kernels: channel counts around multiples of 8/16/32/64 */
    const conv_size mid[] = {{2, 37, 19, 13, 45}, {2, 64, 16, 16, 64}, {1, 3, 20, 20, 64},
                             {2, 64, 12, 12, 3}, {1, 96, 8, 8, 130}, {3, 17, 7, 33, 9},
                             {2, 32, 8, 12, 40}, {3, 32, 6, 16, 32}, {2, 3, 16, 16, 20},
                             {1, 12, 8, 8, 5},   {2, 64, 16, 16, 24}, {1, 64, 8, 8, 3}};
    for (int prec = 0; prec < 3; prec++)
        for (size_t i = 0; i < sizeof mid / sizeof mid[0]; i++) {
            int st = (int)(i + (size_t)prec) & 1;
            conv_case(gpu, &mid[i], 3, 1, 1, 1, prec, st);
            conv_case(gpu, &mid[i], 1, 1, 0, 1, prec, !st);
            conv_case(gpu, &mid[i], 3, 2, 1, 0, prec, st);
        }
    /* large enough for the implicit GEMM's big tiles without a k split */
    const conv_size big = {9, 32, 64, 64, 32};
    for (int prec = 1; prec < 3; prec++)
        for (int st = 0; st <= 1; st++) conv_case(gpu, &big, 3, 1, 1, 1, prec, st);
    nb_cuda_conv_set_algo(0);
    nb_device_close(gpu);
}

static void test_conv_cublas(void) { conv_sweep(1); }
/* Device pointers that are not 16-byte aligned: the kernels' 16-byte copies cannot be used, the
 * automatic choice must fall back (and still be right). */
static void test_conv_unaligned(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device");
    if (!nb_cublas_available()) {
        nb_device_close(gpu);
        NB_SKIP(nb_cublas_unavailable_reason());
    }
    const conv_size sz = {2, 64, 16, 16, 64};
    dput_offset = 1;
    for (int prec = 0; prec < 3; prec++) {
        conv_case(gpu, &sz, 3, 1, 1, 1, prec, prec & 1);
        conv_case(gpu, &sz, 1, 1, 0, 0, prec, !(prec & 1));
    }
    dput_offset = 0;
    nb_device_close(gpu);
}
static void test_conv_igemm(void) { conv_sweep(2); }

/* ---- raw linear against the reference ------------------------------------------------------- */

static void linear_case(nb_device *gpu, int64_t N, int64_t F, int64_t O, int bias, int prec,
                        int store) {
    float *x = hrand(N * F), *w = hrand(O * F), *b = bias ? hrand(O) : NULL, *dy = hrand(N * O);
    float *dx0 = store ? hnan(N * F) : hrand(N * F), *dw0 = hrand(O * F), *db0 = hrand(O);
    double *y = calloc((size_t)(N * O), sizeof(double)), *dx = calloc((size_t)(N * F), sizeof(double));
    double *dw = calloc((size_t)(O * F), sizeof(double)), *db = calloc((size_t)O, sizeof(double));
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++) {
            double acc = b ? b[o] : 0.0, g = dy[n * O + o];
            for (int64_t f = 0; f < F; f++) {
                acc += (double)x[n * F + f] * w[o * F + f];
                dx[n * F + f] += g * w[o * F + f];
                dw[o * F + f] += g * x[n * F + f];
            }
            y[n * O + o] = acc;
            db[o] += g;
        }
    for (int64_t i = 0; i < N * F && !store; i++) dx[i] += dx0[i];
    for (int64_t i = 0; i < O * F; i++) dw[i] += dw0[i];
    for (int64_t i = 0; i < O; i++) db[i] += db0[i];
    dbuf gx, gw, gb = {0}, gdy, gy, gdx, gdw, gdb;
    int ok = dput(gpu, &gx, x, N * F) && dput(gpu, &gw, w, O * F) && (!bias || dput(gpu, &gb, b, O)) &&
             dput(gpu, &gdy, dy, N * O) && dput(gpu, &gy, NULL, N * O) && dput(gpu, &gdx, dx0, N * F) &&
             dput(gpu, &gdw, dw0, O * F) && dput(gpu, &gdb, db0, O);
    NB_EXPECT(ok);
    float *hy = malloc((size_t)(N * O) * sizeof(float)), *hdx = malloc((size_t)(N * F) * sizeof(float));
    float *hdw = malloc((size_t)(O * F) * sizeof(float)), *hdb = malloc((size_t)O * sizeof(float));
    if (ok) {
        NB_EXPECT_OK(nb_cuda_linear_forward(gpu, prec, N, F, O, NB_F32, NB_F32, gx.p, gw.p, bias ? gb.p : NULL, gy.p));
        NB_EXPECT_OK(nb_cuda_linear_backward(gpu, prec, N, F, O, NB_F32, NB_F32, gx.p, gw.p, gdy.p, gdx.p, gdw.p,
                                             gdb.p, store));
        dget(gpu, &gy, hy, N * O);
        dget(gpu, &gdx, hdx, N * F);
        dget(gpu, &gdw, hdw, O * F);
        dget(gpu, &gdb, hdb, O);
        double tol = prec_tol[prec];
#define DESC "%s N%lld F%lld O%lld bias %d store %d", prec_name[prec], (long long)N,      \
             (long long)F, (long long)O, bias, store
        CHECK_ERR("y", rel_err(hy, y, N * O), tol, DESC);
        CHECK_ERR("dx", rel_err(hdx, dx, N * F), tol, DESC);
        CHECK_ERR("dw", rel_err(hdw, dw, O * F), tol, DESC);
        CHECK_ERR("db", rel_err(hdb, db, O), 1e-4, DESC);
#undef DESC
    }
    dbuf *all[] = {&gx, &gw, &gb, &gdy, &gy, &gdx, &gdw, &gdb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dfree(all[i]);
    free(x), free(w), free(b), free(dy), free(dx0), free(dw0), free(db0);
    free(y), free(dx), free(dw), free(db), free(hy), free(hdx), free(hdw), free(hdb);
}

static void test_linear_raw(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device");
    if (!nb_cublas_available()) {
        nb_device_close(gpu);
        NB_SKIP(nb_cublas_unavailable_reason());
    }
    for (int prec = 0; prec < 3; prec++)
        for (int bias = 0; bias <= 1; bias++) {
            for (int st = 0; st <= 1; st++) {
                linear_case(gpu, 3, 5, 7, bias, prec, st);
                linear_case(gpu, 37, 70, 19, bias, prec, st);
                linear_case(gpu, 1, 1, 1, bias, prec, st);
                linear_case(gpu, 32, 256, 512, bias, prec, st);
            }
        }
    nb_device_close(gpu);
}

/* ---- CPU tape vs CUDA tape ------------------------------------------------------------------ */

/* Builds x -> op (conv2d or linear) -> mse against a target on a tape; params written from host. */
typedef struct {
    int conv; /* 1: conv2d, 0: linear */
    int64_t xs[4], ws[4];
    int xnd, wnd, bias, stride, pad;
} tape_case;

static nb_status tape_run(nb_tape *t, const tape_case *c, const float *params, int64_t np,
                          const float *x, const float *tgt, const int64_t *ys, int scalar,
                          nb_tvar *vx, nb_tvar *vy, int backward_twice) {
    nb_tvar w, b = NB_TVAR_NONE, y, l;
    NB_TRY_T(nb_tape_param(t, "w", c->wnd, c->ws, &w));
    if (c->bias) NB_TRY_T(nb_tape_param(t, "b", 1, c->ws, &b));
    NB_TRY_T(nb_tape_write_params(t, params, np));
    NB_TRY_T(nb_tape_input(t, c->xnd, c->xs, x, 1, vx));
    if (c->conv)
        NB_TRY_T(nb_tape_conv2d(t, *vx, w, b, c->stride, c->pad, &y));
    else
        NB_TRY_T(nb_tape_linear(t, *vx, w, b, &y));
    *vy = y;
    if (scalar) {
        l = y; /* the output is a single element: its own loss */
    } else {
        nb_tvar tv;
        NB_TRY_T(nb_tape_input(t, c->conv ? 4 : 2, ys, tgt, 0, &tv));
        NB_TRY_T(nb_tape_mse(t, y, tv, &l));
    }
    NB_TRY_T(nb_tape_backward(t, l));
    if (backward_twice) NB_TRY_T(nb_tape_backward(t, l));
    return NB_OK;
}

static int64_t prod(int nd, const int64_t *s) {
    int64_t c = 1;
    for (int i = 0; i < nd; i++) c *= s[i];
    return c;
}

/* 1: compared; 0: the CUDA tape lacks something outside this file (skip message printed) */
static int tape_compare(nb_device *gpu, const tape_case *c, int prec, int scalar) {
    int64_t nx = prod(c->xnd, c->xs), nw = prod(c->wnd, c->ws), np = nw + (c->bias ? c->ws[0] : 0);
    int64_t ys[4];
    if (c->conv) {
        int64_t K = c->ws[2];
        ys[0] = c->xs[0], ys[1] = c->ws[0];
        ys[2] = (c->xs[2] + 2 * c->pad - K) / c->stride + 1;
        ys[3] = (c->xs[3] + 2 * c->pad - K) / c->stride + 1;
    } else {
        ys[0] = c->xs[0], ys[1] = c->ws[0];
    }
    int64_t ny = prod(c->conv ? 4 : 2, ys);
    float *params = hrand(np), *x = hrand(nx), *tgt = hrand(ny);
    float *y[2], *dx[2], *g[2];
    int done = 1;
    for (int k = 0; k < 2; k++) {
        y[k] = calloc((size_t)ny, sizeof(float));
        dx[k] = calloc((size_t)nx, sizeof(float));
        g[k] = calloc((size_t)np, sizeof(float));
    }
    for (int k = 0; k < 2 && done; k++) {
        nb_tape *t = NULL;
        nb_status s = k ? nb_tape_create_on(gpu, &t) : nb_tape_create(&t);
        if (s == NB_OK) s = nb_tape_set_precision(t, (nb_tape_precision)prec);
        nb_tvar vx = NB_TVAR_NONE, vy = NB_TVAR_NONE;
        if (s == NB_OK) s = tape_run(t, c, params, np, x, tgt, ys, scalar, &vx, &vy, 1);
        if (s == NB_OK) s = nb_tape_read(t, vy, y[k], ny);
        if (s == NB_OK) s = nb_tape_read_grad(t, vx, dx[k], nx);
        if (s == NB_OK) s = nb_tape_read_grads(t, g[k], np);
        if (s != NB_OK) {
            if (k == 1 && s == NB_ERR_UNSUPPORTED && strstr(nb_last_error(), "CUDA") &&
                !strstr(nb_last_error(), "conv2d") && !strstr(nb_last_error(), "linear")) {
                fprintf(stderr, "  %s: CUDA tape not complete yet: %s\n", nb_test_name_,
                        nb_last_error());
                done = 0;
            } else {
                fprintf(stderr, "  %s: %s tape failed: %s: %s\n", nb_test_name_, k ? "CUDA" : "CPU",
                        nb_status_name(s), nb_last_error());
                nb_test_failures_++;
                done = 0;
            }
        }
        nb_tape_free(t);
    }
    if (done) {
        double tol = prec_tol[prec];
#define DESC "%s %s x[%lld,%lld,..] w[%lld,%lld,..] s%d p%d bias %d scalar %d", prec_name[prec], \
             c->conv ? "conv2d" : "linear", (long long)c->xs[0], (long long)c->xs[1],              \
             (long long)c->ws[0], (long long)c->ws[1], c->stride, c->pad, c->bias, scalar
        CHECK_ERR("tape y", rel_err_f(y[1], y[0], ny), tol, DESC);
        CHECK_ERR("tape dx", rel_err_f(dx[1], dx[0], nx), tol, DESC);
        CHECK_ERR("tape param grads", rel_err_f(g[1], g[0], np), tol, DESC);
#undef DESC
    }
    for (int k = 0; k < 2; k++) free(y[k]), free(dx[k]), free(g[k]);
    free(params), free(x), free(tgt);
    return done;
}

static void test_tape_cpu_vs_cuda(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device");
    if (!nb_cublas_available()) {
        nb_device_close(gpu);
        NB_SKIP(nb_cublas_unavailable_reason());
    }
    const tape_case cases[] = {
        {1, {3, 5, 9, 11}, {7, 5, 3, 3}, 4, 4, 1, 1, 1},
        {1, {3, 5, 9, 11}, {7, 5, 3, 3}, 4, 4, 0, 2, 0},
        {1, {3, 5, 9, 11}, {7, 5, 3, 3}, 4, 4, 1, 2, 1},
        {1, {3, 5, 9, 11}, {7, 5, 1, 1}, 4, 4, 1, 1, 0},
        {1, {3, 5, 9, 11}, {7, 5, 1, 1}, 4, 4, 1, 2, 1},
        {1, {2, 64, 16, 16}, {64, 64, 3, 3}, 4, 4, 1, 1, 1},
        {0, {3, 5}, {7, 5}, 2, 2, 1, 1, 0},
        {0, {3, 5}, {7, 5}, 2, 2, 0, 1, 0},
        {0, {33, 128}, {256, 128}, 2, 2, 1, 1, 0},
    };
    int complete = 1;
    for (int prec = 0; prec < 3 && complete; prec++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0] && complete; i++)
            complete = tape_compare(gpu, &cases[i], prec, 0);
    nb_device_close(gpu);
    if (!complete) NB_SKIP("the CUDA tape lacks an op outside conv2d/linear (see above)");
}

/* Tapes whose op output is one element (its own loss): only conv2d / linear run on the GPU. */
static void test_tape_scalar(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device");
    if (!nb_cublas_available()) {
        nb_device_close(gpu);
        NB_SKIP(nb_cublas_unavailable_reason());
    }
    const tape_case cases[] = {
        {1, {1, 4, 3, 3}, {1, 4, 3, 3}, 4, 4, 1, 1, 0},
        {1, {1, 4, 3, 3}, {1, 4, 3, 3}, 4, 4, 0, 2, 0},
        {1, {1, 6, 1, 1}, {1, 6, 1, 1}, 4, 4, 1, 1, 0},
        {0, {1, 6}, {1, 6}, 2, 2, 1, 1, 0},
        {0, {1, 300}, {1, 300}, 2, 2, 0, 1, 0},
    };
    int complete = 1;
    for (int prec = 0; prec < 3 && complete; prec++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0] && complete; i++)
            complete = tape_compare(gpu, &cases[i], prec, 1);
    nb_device_close(gpu);
    if (!complete) NB_SKIP("the CUDA tape's device plumbing is not there yet (see above)");
}

/* A value consumed twice and an intermediate value: x feeds two convs (or linears), whose
 * outputs are added and go through a third; the first backward contribution to x and to the
 * sum is stored (nb_tape_grad_buf_w), the second one to x accumulates. conv: x [2,8,8,12],
 * w1 [6,8,3,3] + b1, w2 [6,8,1,1], w3 [4,6,3,3]; linear: x [5,12], w1/w2 [9,12], w3 [3,9]. */
static nb_status tape_shared_run(nb_tape *t, int conv, const float *params, int64_t np,
                                 const float *x, const float *tgt, float *hx, int64_t nx,
                                 float *hg) {
    nb_tvar w1, b1, w2, w3, vx, h1, h2, sum, y, tv, l;
    if (conv) {
        NB_TRY_T(nb_tape_param(t, "w1", 4, (int64_t[]){6, 8, 3, 3}, &w1));
        NB_TRY_T(nb_tape_param(t, "b1", 1, (int64_t[]){6}, &b1));
        NB_TRY_T(nb_tape_param(t, "w2", 4, (int64_t[]){6, 8, 1, 1}, &w2));
        NB_TRY_T(nb_tape_param(t, "w3", 4, (int64_t[]){4, 6, 3, 3}, &w3));
    } else {
        NB_TRY_T(nb_tape_param(t, "w1", 2, (int64_t[]){9, 12}, &w1));
        NB_TRY_T(nb_tape_param(t, "b1", 1, (int64_t[]){9}, &b1));
        NB_TRY_T(nb_tape_param(t, "w2", 2, (int64_t[]){9, 12}, &w2));
        NB_TRY_T(nb_tape_param(t, "w3", 2, (int64_t[]){3, 9}, &w3));
    }
    NB_TRY_T(nb_tape_write_params(t, params, np));
    if (conv) {
        NB_TRY_T(nb_tape_input(t, 4, (int64_t[]){2, 8, 8, 12}, x, 1, &vx));
        NB_TRY_T(nb_tape_conv2d(t, vx, w1, b1, 1, 1, &h1));
        NB_TRY_T(nb_tape_conv2d(t, vx, w2, NB_TVAR_NONE, 1, 0, &h2));
        NB_TRY_T(nb_tape_add(t, h1, h2, &sum));
        NB_TRY_T(nb_tape_conv2d(t, sum, w3, NB_TVAR_NONE, 1, 1, &y));
        NB_TRY_T(nb_tape_input(t, 4, (int64_t[]){2, 4, 8, 12}, tgt, 0, &tv));
    } else {
        NB_TRY_T(nb_tape_input(t, 2, (int64_t[]){5, 12}, x, 1, &vx));
        NB_TRY_T(nb_tape_linear(t, vx, w1, b1, &h1));
        NB_TRY_T(nb_tape_linear(t, vx, w2, NB_TVAR_NONE, &h2));
        NB_TRY_T(nb_tape_add(t, h1, h2, &sum));
        NB_TRY_T(nb_tape_linear(t, sum, w3, NB_TVAR_NONE, &y));
        NB_TRY_T(nb_tape_input(t, 2, (int64_t[]){5, 3}, tgt, 0, &tv));
    }
    NB_TRY_T(nb_tape_mse(t, y, tv, &l));
    NB_TRY_T(nb_tape_backward(t, l));
    NB_TRY_T(nb_tape_read_grad(t, vx, hx, nx));
    return nb_tape_read_grads(t, hg, np);
}

static void test_tape_shared_input(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device");
    if (!nb_cublas_available()) {
        nb_device_close(gpu);
        NB_SKIP(nb_cublas_unavailable_reason());
    }
    int complete = 1;
    for (int conv = 0; conv <= 1 && complete; conv++) {
        int64_t np = conv ? 6 * 8 * 9 + 6 + 6 * 8 + 4 * 6 * 9 : 9 * 12 + 9 + 9 * 12 + 3 * 9;
        int64_t nx = conv ? 2 * 8 * 8 * 12 : 5 * 12, ny = conv ? 2 * 4 * 8 * 12 : 5 * 3;
        float *params = hrand(np), *x = hrand(nx), *tgt = hrand(ny);
        for (int prec = 0; prec < 3 && complete; prec++) {
            float *gx[2], *gp[2];
            for (int k = 0; k < 2; k++) {
                gx[k] = calloc((size_t)nx, sizeof(float));
                gp[k] = calloc((size_t)np, sizeof(float));
            }
            int done = 1;
            for (int k = 0; k < 2 && done; k++) {
                nb_tape *t = NULL;
                nb_status s = k ? nb_tape_create_on(gpu, &t) : nb_tape_create(&t);
                if (s == NB_OK) s = nb_tape_set_precision(t, (nb_tape_precision)prec);
                if (s == NB_OK) s = tape_shared_run(t, conv, params, np, x, tgt, gx[k], nx, gp[k]);
                if (s != NB_OK && k == 1 && s == NB_ERR_UNSUPPORTED && strstr(nb_last_error(), "CUDA") &&
                    !strstr(nb_last_error(), "conv2d") && !strstr(nb_last_error(), "linear")) {
                    fprintf(stderr, "  %s: CUDA tape not complete yet: %s\n", nb_test_name_,
                            nb_last_error());
                    done = complete = 0;
                } else if (s != NB_OK) {
                    fprintf(stderr, "  %s: %s tape failed: %s: %s\n", nb_test_name_,
                            k ? "CUDA" : "CPU", nb_status_name(s), nb_last_error());
                    nb_test_failures_++;
                    done = 0;
                }
                nb_tape_free(t);
            }
            if (done) {
                double tol = prec_tol[prec];
                CHECK_ERR("shared dx", rel_err_f(gx[1], gx[0], nx), tol, "%s %s", prec_name[prec],
                          conv ? "conv2d" : "linear");
                CHECK_ERR("shared param grads", rel_err_f(gp[1], gp[0], np), tol, "%s %s",
                          prec_name[prec], conv ? "conv2d" : "linear");
            }
            for (int k = 0; k < 2; k++) free(gx[k]), free(gp[k]);
        }
        free(params), free(x), free(tgt);
    }
    nb_device_close(gpu);
    if (!complete) NB_SKIP("the CUDA tape lacks an op outside conv2d/linear (see above)");
}

/* ---- bad input (no GPU needed) -------------------------------------------------------------- */

static void test_bad_input(void) {
    nb_conv_dims d;
    NB_EXPECT_ERR(nb_conv_dims_make(&d, 2, 3, 8, 8, 4, 5, 1, 1), NB_ERR_UNSUPPORTED, "kernel 5x5");
    NB_EXPECT_ERR(nb_conv_dims_make(&d, 2, 3, 8, 8, 4, 3, 3, 1), NB_ERR_UNSUPPORTED, "stride 3");
    NB_EXPECT_ERR(nb_conv_dims_make(&d, 2, 3, 8, 8, 4, 3, 1, -1), NB_ERR_INVALID_ARG, "pad -1");
    NB_EXPECT_ERR(nb_conv_dims_make(&d, 2, 3, 1, 8, 4, 3, 1, 0), NB_ERR_SHAPE, "smaller than the kernel");
    NB_EXPECT_ERR(nb_conv_dims_make(&d, 0, 3, 8, 8, 4, 3, 1, 0), NB_ERR_SHAPE, "N=0");
    NB_EXPECT_ERR(nb_conv_dims_make(NULL, 2, 3, 8, 8, 4, 3, 1, 0), NB_ERR_INVALID_ARG, "NULL");
    NB_EXPECT_OK(nb_conv_dims_make(&d, 2, 3, 9, 10, 4, 3, 2, 1));
    NB_EXPECT(d.OH == 5 && d.OW == 5);
    float dummy[4];
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    NB_EXPECT_ERR(nb_cuda_conv2d_forward(cpu, NB_TAPE_FP32, &d, NB_F32, NB_F32, dummy, dummy, NULL, dummy),
                  NB_ERR_INVALID_ARG, "not a CUDA device");
    NB_EXPECT_ERR(nb_cuda_conv2d_backward(cpu, NB_TAPE_FP32, &d, NB_F32, NB_F32, dummy, dummy, dummy, dummy, NULL, NULL, 0),
                  NB_ERR_INVALID_ARG, "not a CUDA device");
    NB_EXPECT_ERR(nb_cuda_linear_forward(cpu, NB_TAPE_TF32, 1, 1, 1, NB_F32, NB_F32, dummy, dummy, NULL, dummy),
                  NB_ERR_INVALID_ARG, "not a CUDA device");
    NB_EXPECT_ERR(nb_cuda_linear_backward(NULL, NB_TAPE_TF32, 1, 1, 1, NB_F32, NB_F32, dummy, dummy, dummy, dummy, NULL, NULL, 1),
                  NB_ERR_INVALID_ARG, "not a CUDA device");
    nb_device_close(cpu);
    nb_device *gpu = open_gpu();
    if (gpu) {
        NB_EXPECT_ERR(nb_cuda_conv2d_forward(gpu, 7, &d, NB_F32, NB_F32, dummy, dummy, NULL, dummy), NB_ERR_INVALID_ARG,
                      "precision 7");
        NB_EXPECT_ERR(nb_cuda_conv2d_forward(gpu, NB_TAPE_FP32, &d, NB_F32, NB_F32, NULL, dummy, NULL, dummy),
                      NB_ERR_INVALID_ARG, "NULL");
        nb_device_close(gpu);
    }
    /* The tape's own checks (shared with the CPU): kernel 2x2 is refused before any device work. */
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    nb_tvar w, x, y;
    NB_REQUIRE_OK(nb_tape_param(t, "w", 4, (int64_t[]){4, 3, 2, 2}, &w));
    float xs[3 * 16] = {0};
    NB_REQUIRE_OK(nb_tape_input(t, 4, (int64_t[]){1, 3, 4, 4}, xs, 0, &x));
    NB_EXPECT_ERR(nb_tape_conv2d(t, x, w, NB_TVAR_NONE, 1, 0, &y), NB_ERR_UNSUPPORTED, "only 1x1 and 3x3");
    nb_tape_free(t);
}

/* The implicit-GEMM kernel file compiles for sm_90 with NVRTC (no GPU or driver needed) in the
 * configurations the dispatcher picks (test_cuda_files compiles every kernel file once). */
static int igemm_compiles(const char *what, int mode, int prec, int bm, int bn, int wm, int wn, int ks,
                          int stride, int cb, int abf, int obf) {
    const int v[12] = {mode, prec, bm, bn, wm, wn, 3, ks, stride, cb, abf, obf};
    char buf[12][24];
    const char *defs[13];
    nb_conv_igemm_defines(v, buf, defs);
    nb_cuda_program p;
    void *img = NULL;
    size_t size = 0;
    nb_status s = nb_cuda_program_prepare(NULL, "src/nn/conv/kernels/igemm.cu", defs, &p);
    if (s == NB_OK) s = nb_nvrtc_compile_headers(p.source, p.path, "sm_90", p.opts, &p.headers, &img, &size, NULL);
    if (img) nb_free(img, size);
    if (s != NB_OK) {
        fprintf(stderr, "  %s: mode %d prec %d bm %d bn %d abf %d obf %d: %s\n", what, mode, prec, bm, bn, abf, obf,
                nb_last_error());
        nb_test_failures_++;
    }
    return s == NB_OK;
}

static void test_kernels_compile(void) {
    if (!nb_nvrtc_version()) NB_SKIP("NVRTC not available");
    if (nb_cuda_device_count() > 0) return; /* the GPU tests compile (and run) them all */
    /* the tile shapes the dispatcher picks (kernel size and stride only change constants) */
    int ok = 1;
    for (int mode = 0; mode <= 3 && ok; mode++)
        for (int prec = 0; prec <= 2 && ok; prec++)
            for (int small = 0; small <= (mode == 0) && ok; small++) {
                int bm = mode == 2 && small ? 64 : 128, bn = mode == 0 && small ? 64 : 128;
                int wm = mode == 0 && small ? 4 : 2, wn = 8 / wm;
                if (mode == 1) bm = small ? 64 : 128, bn = 64, wm = small ? 2 : 4, wn = 8 / wm;
                if (mode == 3) bm = 64, bn = 64, wm = 2, wn = 4;
                ok = igemm_compiles("f32 activations", mode, prec, bm, bn, wm, wn, 3, 1, prec == 2 ? 16 : 8, 0, 0);
            }
    /* the bf16-activation kernels (BF16): MODE 1 (bf16 or f32 output), MODE 3, MODE 2, MODE 0 */
    for (int small = 0; small <= 4; small++)
        for (int obf = 0; obf <= (small < 2 || small == 4); obf++) {
            if (small >= 2)
                igemm_compiles("bf16", small == 2 ? 3 : small == 3 ? 2 : 0, 2, small == 4 ? 128 : 64,
                               small == 2 ? 64 : 128, small == 4 ? 4 : 2, small == 4 ? 2 : 4, 3,
                               small == 4 ? 2 : 1, 32, 1, obf);
            else
                igemm_compiles("bf16 halo", 1, 2, small ? 64 : 128, 64, small ? 2 : 4, small ? 4 : 2, 3, 1, 16,
                               1, obf);
        }
}

/* A missing cuBLAS is a clear NB_ERR_UNSUPPORTED naming the library (in a child process: the
 * load is attempted once per process). */
static void test_cublas_missing(void) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("NABLA_CUBLAS", "/nonexistent/libcublas.so.13", 1);
        nb_env_reload();
        int ok = !nb_cublas_available() && strstr(nb_cublas_unavailable_reason(), "libcublas.so.13") &&
                 strstr(nb_cublas_unavailable_reason(), "cuBLAS not found");
        nb_device *gpu = open_gpu();
        if (ok && gpu) {
            nb_conv_dims d;
            float *p = (float *)(uintptr_t)256;
            ok = nb_conv_dims_make(&d, 1, 1, 3, 3, 1, 1, 1, 0) == NB_OK &&
                 nb_cuda_conv2d_forward(gpu, NB_TAPE_FP32, &d, NB_F32, NB_F32, p, p, NULL, p) == NB_ERR_UNSUPPORTED &&
                 strstr(nb_last_error(), "libcublas") != NULL;
            if (!ok) fprintf(stderr, "  child: %s\n", nb_last_error());
        }
        _exit(ok ? 0 : 1);
    }
    NB_REQUIRE_OK(pid > 0 ? NB_OK : NB_ERR_INTERNAL);
    int st = 0;
    waitpid(pid, &st, 0);
    NB_EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* ---- benchmark (NB_CONV_BENCH=1) ------------------------------------------------------------ */

typedef struct {
    int64_t C, O, S, K;
} bench_shape;

/* The reference UNet's convolutions (batch 32): 3x3 stride 1 pad 1 at each level, the
 * channel-changing ones after concatenation in the decoder, 1x1 skips, in/out convs. */
static const bench_shape bench_shapes[] = {
    {64, 64, 64, 3},   {128, 64, 64, 3},  {128, 128, 32, 3}, {256, 128, 32, 3}, {192, 192, 16, 3},
    {384, 192, 16, 3}, {256, 256, 8, 3},  {512, 256, 8, 3},  {3, 64, 64, 3},    {64, 3, 64, 3},
    {128, 64, 64, 1},  {256, 128, 32, 1}, {192, 576, 16, 1},
};

/* sdt: the activations' storage (NB_BF16: x, y, dy, dx in bf16, "bf16s" in the log) */
static void bench_one(nb_device *gpu, const bench_shape *b, int prec, int algo, float *buf[8],
                      const char *tag, int iters, nb_dtype sdt) {
    nb_conv_dims d;
    int64_t N = 32;
    if (nb_conv_dims_make(&d, N, b->C, b->S, b->S, b->O, b->K, 1, b->K / 2) != NB_OK) return;
    nb_cuda_conv_set_algo(algo);
    if (algo == 2 && !nb_conv_igemm_supports(&d, prec, 0) && !nb_conv_igemm_supports(&d, prec, 1) &&
        !nb_conv_igemm_supports(&d, prec, 2))
        return; /* the kernels take no part of it: it would time cuBLAS again */
    nb_event *e[3];
    for (int i = 0; i < 3; i++) NB_EXPECT_OK(nb_event_create(gpu, &e[i]));
    nb_stream *st = nb_device_stream(gpu);
    const int warm = 2;
    float fwd = 0, bwd = 0;
    nb_status s = NB_OK;
    for (int it = 0; it < warm + iters && s == NB_OK; it++) {
        if (it == warm) nb_event_record(e[0], st);
        s = nb_cuda_conv2d_forward(gpu, prec, &d, sdt, sdt, buf[0], buf[1], buf[2], buf[3]);
        if (it >= warm) nb_event_record(e[1], st);
        /* dx stored, as on the tape (a first contribution) */
        if (s == NB_OK) s = nb_cuda_conv2d_backward(gpu, prec, &d, sdt, sdt, buf[0], buf[1], buf[4], buf[5], buf[6], buf[7], 1);
        if (it >= warm) {
            nb_event_record(e[2], st);
            nb_event_synchronize(e[2]);
            float a, c;
            nb_event_elapsed_ms(e[0], e[1], &a);
            nb_event_elapsed_ms(e[1], e[2], &c);
            fwd += a, bwd += c;
            nb_event_record(e[0], st);
        }
    }
    NB_EXPECT_OK(s);
    fwd /= iters, bwd /= iters;
    /* the weight gradient alone (dx, db not wanted): its share of bwd */
    float wg = 0;
    if (s == NB_OK) {
        nb_event_record(e[0], st);
        for (int it = 0; it < iters && s == NB_OK; it++)
            s = nb_cuda_conv2d_backward(gpu, prec, &d, sdt, sdt, buf[0], buf[1], buf[4], NULL, buf[6], NULL, 1);
        nb_event_record(e[1], st);
        nb_event_synchronize(e[1]);
        nb_event_elapsed_ms(e[0], e[1], &wg);
        wg /= iters;
        NB_EXPECT_OK(s);
    }
    double fl = 2.0 * (double)N * d.O * d.OH * d.OW * d.C * d.K * d.K;
    printf("%s N%lld C%-3lld O%-3lld S%-2lld K%lld %s %-6s fwd %7.3f ms %6.1f TF/s  bwd %7.3f ms "
           "%6.1f TF/s  total %7.3f ms  (wgrad %6.3f ms)\n",
           tag, (long long)N, (long long)b->C, (long long)b->O, (long long)b->S, (long long)b->K,
           sdt == NB_BF16 ? "bf16s" : prec_name[prec], algo == 1 ? "cublas" : algo == 2 ? "igemm" : "auto", fwd, fl / fwd * 1e-9, bwd,
           2 * fl / bwd * 1e-9, fwd + bwd, wg);
    fflush(stdout);
    for (int i = 0; i < 3; i++) nb_event_destroy(e[i]);
    nb_cuda_conv_set_algo(0);
}

static void test_bench_conv(void) {
    const char *env = getenv("NB_CONV_BENCH");
    if (!env || !env[0] || !strcmp(env, "0")) return; /* not requested: nothing to do */
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device");
    int64_t big = 0;
    for (size_t i = 0; i < sizeof bench_shapes / sizeof bench_shapes[0]; i++) {
        const bench_shape *b = &bench_shapes[i];
        int64_t m = 32 * (b->C > b->O ? b->C : b->O) * b->S * b->S;
        if (b->O * b->C * 9 > m) m = b->O * b->C * 9;
        big = m > big ? m : big;
    }
    dbuf bufs[8];
    float *p[8];
    int ok = 1;
    for (int i = 0; i < 8 && ok; i++) {
        float *h = hrand(big);
        ok = dput(gpu, &bufs[i], h, big);
        free(h);
        p[i] = bufs[i].p;
    }
    NB_EXPECT(ok);
    int quick = strcmp(env, "quick") == 0;
    for (int prec = quick; prec <= 2; prec++) NB_EXPECT_OK(nb_cuda_conv_prewarm(gpu, prec));
    /* per shape: fp32, tf32, bf16 (f32 storage), bf16s (bf16 storage of x, y, dy, dx) */
    for (size_t i = 0; ok && i < sizeof bench_shapes / sizeof bench_shapes[0]; i++) {
        for (int prec = quick; prec < 4; prec++)
            for (int algo = quick && prec < 3 ? 3 : 1; algo <= 3; algo++) /* 3: automatic (0) */
                if (!quick || prec != 2) bench_one(gpu, &bench_shapes[i], prec < 3 ? prec : 2, algo % 3, p, "conv", 20,
                          prec < 3 ? NB_F32 : NB_BF16);
        /* bf16 storage, the weight gradient on MODE 2 instead of the halo MODE 3 ("conv-m2"),
         * or with its k splits' partials stored and summed ("conv-part") instead of atomics */
        if (bench_shapes[i].K == 3) {
            nb_conv_igemm_set_bf16_wgrad(2);
            bench_one(gpu, &bench_shapes[i], 2, 0, p, "conv-m2", 20, NB_BF16);
            nb_conv_igemm_set_bf16_wgrad(4);
            bench_one(gpu, &bench_shapes[i], 2, 0, p, "conv-part", 20, NB_BF16);
            nb_conv_igemm_set_bf16_wgrad(0);
        }
    }
    /* NB_CONV_BENCH=sweep: tile sweeps of the implicit GEMM on the main shapes: mode 0 (forward
     * and data gradient), mode 2 (weight gradient) */
    int sweeping = ok && strcmp(env, "sweep") == 0;
    static const int t0[][5] = {{128, 64, 4, 2, 3}, {128, 64, 4, 2, 2}, {128, 128, 2, 4, 3},
                                {128, 128, 2, 4, 2}, {64, 64, 2, 4, 4},  {64, 64, 2, 4, 2}};
    static const int t2[][5] = {{64, 128, 2, 4, 3}, {64, 128, 2, 4, 2}, {64, 256, 2, 4, 3},
                                {64, 256, 2, 4, 2}, {128, 128, 2, 4, 3}, {128, 128, 2, 4, 2}};
    const int n0 = (int)(sizeof t0 / sizeof t0[0]), n2 = (int)(sizeof t2 / sizeof t2[0]);
    if (sweeping) NB_EXPECT_OK(nb_conv_igemm_prewarm_tiles(gpu, 0, 3, 1, n0, t0));
    if (sweeping) NB_EXPECT_OK(nb_conv_igemm_prewarm_tiles(gpu, 2, 3, 1, n2, t2));
    static const bench_shape sweep[] = {{64, 64, 64, 3}, {128, 64, 64, 3}, {128, 128, 32, 3}, {192, 192, 16, 3}, {256, 256, 8, 3}};
    for (size_t i = 0; sweeping && i < sizeof sweep / sizeof sweep[0]; i++)
        for (int prec = 1; prec <= 2; prec++)
            for (int mode = 0; mode <= 2; mode += 2)
                for (int k = 0; k < (mode ? n2 : n0); k++) {
                    const int *tile = mode ? t2[k] : t0[k];
                    char tag[64];
                    snprintf(tag, sizeof tag, "tile m%d %dx%d w%dx%d s%d", mode, tile[0], tile[1], tile[2],
                             tile[3], tile[4]);
                    if (!nb_conv_igemm_set_tile(mode, tile)) continue;
                    bench_one(gpu, &sweep[i], prec, 2, p, tag, 8, NB_F32);
                    nb_conv_igemm_set_tile(mode, NULL);
                }
    for (int i = 0; i < 8; i++) dfree(&bufs[i]);
    nb_device_close(gpu);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_cublas_missing, test_bad_input, test_kernels_compile, test_linear_raw, test_conv_cublas,
                 test_conv_igemm, test_conv_unaligned, test_tape_scalar, test_tape_cpu_vs_cuda,
                 test_tape_shared_input,
                 test_bench_conv);
}

/* CUDA conv2d and linear on bf16-stored activations (src/nn/conv/conv_cuda.c, conv_cuda_igemm.c,
 * cublas.c): x / dx in dtype xdt, y / dy in dtype ydt (NB_F32 or NB_BF16) at BF16 precision,
 * weights and their gradients f32. Each case runs forward, backward with dx stored (starts as
 * NaNs) and accumulated, dw / db accumulated onto random values, on both algorithms (im2col +
 * cuBLAS, implicit GEMM) and the automatic choice, against a double reference computed from the
 * bf16-rounded inputs the kernels see. Shapes: the reference UNet's (1x1 and 3x3, stride 1 and 2,
 * C from 3 to 384) at a small batch, and odd sizes. Also: FP32 / TF32 refuse bf16 tensors, bad
 * dtypes are refused. Skips without a GPU (NB_REQUIRE_CUDA=1: fails). */
#include <stdint.h>

#include "nb_test.h"
#include "nabla/device.h"
#include "nabla/dtype.h"
#include "nabla/nn_tape.h"
#include "nn/conv/conv_cuda.h"
#include "nn/conv/conv_cuda_igemm.h"
#include "device/cublas.h"
#include "nabla/status.h"
#include "nb_test_dbuf.h"
#include "nb_test_conv_ref.h"

#define bfr bf_round

/* n random values, rounded to bf16 when dt is bf16 (what the device buffer will hold) */
static float *hrand(int64_t n, nb_dtype dt) {
    float *a = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) a[i] = dt == NB_BF16 ? bfr(frand()) : frand();
    return a;
}
static float *hnan(int64_t n) {
    float *a = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) a[i] = NAN;
    return a;
}


static const char *dtn(nb_dtype t) { return t == NB_BF16 ? "bf16" : "f32"; }

typedef struct {
    int64_t N, C, H, W, O;
    int K, stride, pad;
} cshape;

static const double TOL = 3e-2;

/* One conv case: forward, backward (dx stored or accumulated), in the given storage dtypes, on
 * each algorithm (0 automatic, 1 im2col + cuBLAS, 2 implicit GEMM where it applies) against one
 * reference. */
static void conv_case(nb_device *gpu, const cshape *c, nb_dtype xdt, nb_dtype ydt, int bias,
                      int store) {
    nb_conv_dims d;
    NB_REQUIRE_OK(nb_conv_dims_make(&d, c->N, c->C, c->H, c->W, c->O, c->K, c->stride, c->pad));
    int64_t nx = d.N * d.C * d.H * d.W, nw = d.O * d.C * d.K * d.K, ny = d.N * d.O * d.OH * d.OW;
    float *x = hrand(nx, xdt), *w = hrand(nw, NB_F32), *b = bias ? hrand(d.O, NB_F32) : NULL;
    float *dy = hrand(ny, ydt), *dx0 = store ? hnan(nx) : hrand(nx, xdt), *dw0 = hrand(nw, NB_F32);
    float *db0 = hrand(d.O, NB_F32);
    double *y = calloc((size_t)ny, sizeof(double)), *dx = calloc((size_t)nx, sizeof(double));
    double *dw = calloc((size_t)nw, sizeof(double)), *db = calloc((size_t)d.O, sizeof(double));
    conv_ref(&d, x, w, b, dy, y, dx, dw, db);
    for (int64_t i = 0; i < nx && !store; i++) dx[i] += dx0[i];
    for (int64_t i = 0; i < nw; i++) dw[i] += dw0[i];
    for (int64_t i = 0; i < d.O; i++) db[i] += db0[i];
    float *hy = malloc((size_t)ny * sizeof(float)), *hdx = malloc((size_t)nx * sizeof(float));
    float *hdw = malloc((size_t)nw * sizeof(float)), *hdb = malloc((size_t)d.O * sizeof(float));
    for (int algo = 0; algo <= 2; algo++) {
        nb_cuda_conv_set_algo(algo);
        dbuf gx, gw, gb = {0}, gdy, gy, gdx, gdw, gdb;
        int ok = dput(gpu, &gx, x, nx, xdt) && dput(gpu, &gw, w, nw, NB_F32) &&
                 (!bias || dput(gpu, &gb, b, d.O, NB_F32)) && dput(gpu, &gdy, dy, ny, ydt) &&
                 dput(gpu, &gy, NULL, ny, ydt) && dput(gpu, &gdx, dx0, nx, xdt) &&
                 dput(gpu, &gdw, dw0, nw, NB_F32) && dput(gpu, &gdb, db0, d.O, NB_F32);
        NB_EXPECT(ok);
        if (ok) {
            NB_EXPECT_OK(nb_cuda_conv2d_forward(gpu, NB_TAPE_BF16, &d, xdt, ydt, gx.p, gw.p,
                                                bias ? gb.p : NULL, gy.p));
            NB_EXPECT_OK(nb_cuda_conv2d_backward(gpu, NB_TAPE_BF16, &d, xdt, ydt, gx.p, gw.p, gdy.p,
                                                 gdx.p, gdw.p, gdb.p, store));
            NB_EXPECT(dget(gpu, &gy, hy));
            NB_EXPECT(dget(gpu, &gdx, hdx));
            NB_EXPECT(dget(gpu, &gdw, hdw));
            NB_EXPECT(dget(gpu, &gdb, hdb));
#define DESC "algo %d x %s y %s N%lld C%lld H%lld W%lld O%lld K%d s%d p%d bias %d store %d",  \
             algo, dtn(xdt), dtn(ydt), (long long)d.N, (long long)d.C, (long long)d.H,        \
             (long long)d.W, (long long)d.O, c->K, c->stride, c->pad, bias, store
            CHECK_ERR("y", rel_err(hy, y, ny), TOL, DESC);
            CHECK_ERR("dx", rel_err(hdx, dx, nx), TOL, DESC);
            CHECK_ERR("dw", rel_err(hdw, dw, nw), TOL, DESC);
            CHECK_ERR("db", rel_err(hdb, db, d.O), 1e-4, DESC);
#undef DESC
        }
        dbuf *all[] = {&gx, &gw, &gb, &gdy, &gy, &gdx, &gdw, &gdb};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dfree(all[i]);
    }
    nb_cuda_conv_set_algo(0);
    free(x), free(w), free(b), free(dy), free(dx0), free(dw0), free(db0);
    free(y), free(dx), free(dw), free(db), free(hy), free(hdx), free(hdw), free(hdb);
}

/* The reference UNet's convolution kinds at batch 2 (3x3 stride 1 at 32/16/8, the first conv
 * from the 3-channel image, the last to 3 channels, 1x1 skips, a 1x1 to 3 C (qkv), stride 2) */
static const cshape unet_shapes[] = {
    {2, 3, 32, 32, 64, 3, 1, 1},   {1, 64, 32, 32, 64, 3, 1, 1},  {2, 128, 16, 16, 64, 3, 1, 1},
    {2, 64, 32, 32, 3, 3, 1, 1},   {2, 384, 8, 8, 192, 3, 1, 1},  {2, 256, 8, 8, 256, 3, 1, 1},
    {1, 192, 16, 16, 192, 3, 1, 1}, {2, 128, 16, 16, 64, 1, 1, 0}, {2, 192, 8, 8, 576, 1, 1, 0},
    {2, 64, 32, 32, 64, 3, 2, 1},  {2, 128, 16, 16, 128, 3, 2, 1}, {4, 64, 8, 8, 128, 3, 1, 1},
};
/* odd sizes: channel counts off every tile multiple, odd images, pads 0..2 */
static const cshape odd_shapes[] = {
    {3, 5, 9, 11, 7, 3, 1, 1},   {3, 5, 9, 11, 7, 1, 2, 0},  {2, 37, 19, 13, 45, 3, 1, 1},
    {3, 17, 7, 33, 9, 3, 2, 2},  {1, 96, 8, 8, 130, 3, 1, 1}, {2, 32, 8, 12, 40, 3, 1, 0},
    {2, 64, 12, 12, 3, 1, 1, 0}, {1, 12, 8, 8, 5, 3, 1, 2},   {2, 3, 16, 16, 20, 3, 1, 1},
    {2, 48, 16, 20, 32, 3, 1, 1}, {1, 40, 8, 24, 36, 3, 1, 1},
    /* pad 3, W % 8 != 0: the f32 halo kernel on converted copies (C % 32 != 0), MODE 0 (== 0) */
    {2, 20, 12, 12, 24, 3, 1, 3}, {1, 32, 12, 12, 40, 3, 1, 3},
};

static void test_conv_bf16(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device with cuBLAS");
    NB_EXPECT_OK(nb_cuda_conv_prewarm(gpu, NB_TAPE_BF16)); /* compiles in parallel */
    const nb_dtype pairs[3][2] = {{NB_BF16, NB_BF16}, {NB_F32, NB_BF16}, {NB_BF16, NB_F32}};
    for (size_t i = 0; i < sizeof unet_shapes / sizeof unet_shapes[0]; i++)
        for (int p = 0; p < 3; p++) {
            if (p == 1 && i % 3) continue; /* f32 -> bf16 (the first conv): a few more */
            if (p == 2 && i % 4) continue; /* bf16 -> f32 (not on the tape): a few */
            conv_case(gpu, &unet_shapes[i], pairs[p][0], pairs[p][1], (int)(i & 1) || p,
                      (int)(i + p) & 1);
        }
    for (size_t i = 0; i < sizeof odd_shapes / sizeof odd_shapes[0]; i++)
        for (int p = 0; p < 2; p++)
            conv_case(gpu, &odd_shapes[i], pairs[p][0], pairs[p][1], (int)(i + 1) & 1,
                      (int)(i + p) & 1);
    nb_device_close(gpu);
}

/* Bigger: the implicit GEMM's large tiles without k splits (bf16 outputs written by the
 * kernels), 1x1 on cuBLAS. */
static void test_conv_bf16_big(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device with cuBLAS");
    const cshape big[] = {{4, 64, 64, 64, 64, 3, 1, 1}, {2, 128, 32, 32, 128, 3, 1, 1},
                          {4, 32, 64, 64, 32, 1, 1, 0}};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
        conv_case(gpu, &big[i], NB_BF16, NB_BF16, 1, (int)i & 1);
    nb_device_close(gpu);
}

/* The weight gradient's other variants (nb_conv_igemm_set_bf16_wgrad): MODE 2 where the halo
 * MODE 3 would run (2), and the k splits' partial sums stored and summed instead of added
 * atomically (4). */
static void test_conv_bf16_wgrad_variants(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device with cuBLAS");
    const cshape sz[] = {{2, 64, 16, 16, 64, 3, 1, 1}, {1, 128, 32, 32, 64, 3, 1, 1},
                         {2, 96, 8, 8, 40, 3, 1, 1}, {2, 64, 16, 16, 48, 1, 1, 0}};
    const int modes[] = {2, 4, 6};
    for (int m = 0; m < 3; m++) {
        nb_conv_igemm_set_bf16_wgrad(modes[m]);
        for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++)
            conv_case(gpu, &sz[i], NB_BF16, NB_BF16, 1, (int)(i + m) & 1);
    }
    nb_conv_igemm_set_bf16_wgrad(0);
    nb_device_close(gpu);
}

/* Misaligned device pointers (2 / 4 bytes off): the kernels' 16-byte copies and stores cannot be
 * used, the choice falls back (cuBLAS, scalar conversions) and must stay right. */
static void test_conv_bf16_unaligned(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device with cuBLAS");
    const cshape sz[] = {{2, 64, 16, 16, 64, 3, 1, 1}, {2, 32, 8, 8, 48, 1, 1, 0}};
    dput_offset = 1;
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) {
        conv_case(gpu, &sz[i], NB_BF16, NB_BF16, 1, (int)i & 1);
        conv_case(gpu, &sz[i], NB_F32, NB_BF16, 0, !(i & 1));
    }
    dput_offset = 0;
    nb_device_close(gpu);
}

/* ---- linear ------------------------------------------------------------------------------- */

static void linear_case(nb_device *gpu, int64_t N, int64_t F, int64_t O, nb_dtype xdt,
                        nb_dtype ydt, int bias, int store) {
    float *x = hrand(N * F, xdt), *w = hrand(O * F, NB_F32), *b = bias ? hrand(O, NB_F32) : NULL;
    float *dy = hrand(N * O, ydt), *dx0 = store ? hnan(N * F) : hrand(N * F, xdt);
    float *dw0 = hrand(O * F, NB_F32), *db0 = hrand(O, NB_F32);
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
    int ok = dput(gpu, &gx, x, N * F, xdt) && dput(gpu, &gw, w, O * F, NB_F32) &&
             (!bias || dput(gpu, &gb, b, O, NB_F32)) && dput(gpu, &gdy, dy, N * O, ydt) &&
             dput(gpu, &gy, NULL, N * O, ydt) && dput(gpu, &gdx, dx0, N * F, xdt) &&
             dput(gpu, &gdw, dw0, O * F, NB_F32) && dput(gpu, &gdb, db0, O, NB_F32);
    NB_EXPECT(ok);
    float *hy = malloc((size_t)(N * O) * sizeof(float)), *hdx = malloc((size_t)(N * F) * sizeof(float));
    float *hdw = malloc((size_t)(O * F) * sizeof(float)), *hdb = malloc((size_t)O * sizeof(float));
    if (ok) {
        NB_EXPECT_OK(nb_cuda_linear_forward(gpu, NB_TAPE_BF16, N, F, O, xdt, ydt, gx.p, gw.p,
                                            bias ? gb.p : NULL, gy.p));
        NB_EXPECT_OK(nb_cuda_linear_backward(gpu, NB_TAPE_BF16, N, F, O, xdt, ydt, gx.p, gw.p,
                                             gdy.p, gdx.p, gdw.p, gdb.p, store));
        NB_EXPECT(dget(gpu, &gy, hy));
        NB_EXPECT(dget(gpu, &gdx, hdx));
        NB_EXPECT(dget(gpu, &gdw, hdw));
        NB_EXPECT(dget(gpu, &gdb, hdb));
#define DESC "x %s y %s N%lld F%lld O%lld bias %d store %d", dtn(xdt), dtn(ydt), (long long)N, \
             (long long)F, (long long)O, bias, store
        CHECK_ERR("y", rel_err(hy, y, N * O), TOL, DESC);
        CHECK_ERR("dx", rel_err(hdx, dx, N * F), TOL, DESC);
        CHECK_ERR("dw", rel_err(hdw, dw, O * F), TOL, DESC);
        CHECK_ERR("db", rel_err(hdb, db, O), 1e-4, DESC);
#undef DESC
    }
    dbuf *all[] = {&gx, &gw, &gb, &gdy, &gy, &gdx, &gdw, &gdb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dfree(all[i]);
    free(x), free(w), free(b), free(dy), free(dx0), free(dw0), free(db0);
    free(y), free(dx), free(dw), free(db), free(hy), free(hdx), free(hdw), free(hdb);
}

static void test_linear_bf16(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device with cuBLAS");
    const int64_t sz[][3] = {{3, 5, 7}, {37, 70, 19}, {1, 1, 1}, {32, 256, 512}, {32, 128, 1024}};
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++)
        for (int xb = 0; xb <= 1; xb++)
            for (int st = 0; st <= 1; st++)
                linear_case(gpu, sz[i][0], sz[i][1], sz[i][2], xb ? NB_BF16 : NB_F32, NB_BF16,
                            (int)(i + st) & 1, st);
    nb_device_close(gpu);
}

/* ---- a BF16 tape against the CPU tape ------------------------------------------------------ */

/* x [2,3,16,16] (f32 input) -> conv3x3 3->32 -> silu -> conv3x3 32->32, + the silu output (whose
 * gradient so gets two contributions) -> conv1x1 32->16 -> reshape [2, 4096] -> linear -> 10
 * -> mse. On the BF16 CUDA tape the conv / linear outputs must be bf16 (nb_tape_dtype) and
 * every value and gradient match the CPU tape within bf16 tolerances. */
#define NB_TRY(expr)                                                                           \
    do {                                                                                       \
        nb_status s_ = (expr);                                                                 \
        if (s_ != NB_OK) return s_;                                                            \
    } while (0)
static nb_status chain_run(nb_tape *t, const float *params, int64_t np, const float *x,
                           const float *tgt, nb_tvar *vx, nb_tvar out[4], int *bf16_ok) {
    nb_tvar w1, b1, w2, b2, w3, w4, b4, h1, a1, h2, s2, h3, r, y, tv, l;
    NB_TRY(nb_tape_param(t, "w1", 4, (int64_t[]){32, 3, 3, 3}, &w1));
    NB_TRY(nb_tape_param(t, "b1", 1, (int64_t[]){32}, &b1));
    NB_TRY(nb_tape_param(t, "w2", 4, (int64_t[]){32, 32, 3, 3}, &w2));
    NB_TRY(nb_tape_param(t, "b2", 1, (int64_t[]){32}, &b2));
    NB_TRY(nb_tape_param(t, "w3", 4, (int64_t[]){16, 32, 1, 1}, &w3));
    NB_TRY(nb_tape_param(t, "w4", 2, (int64_t[]){10, 16 * 16 * 16}, &w4));
    NB_TRY(nb_tape_param(t, "b4", 1, (int64_t[]){10}, &b4));
    NB_TRY(nb_tape_write_params(t, params, np));
    NB_TRY(nb_tape_input(t, 4, (int64_t[]){2, 3, 16, 16}, x, 1, vx));
    NB_TRY(nb_tape_conv2d(t, *vx, w1, b1, 1, 1, &h1));
    NB_TRY(nb_tape_silu(t, h1, &a1));
    NB_TRY(nb_tape_conv2d(t, a1, w2, b2, 1, 1, &h2));
    NB_TRY(nb_tape_add(t, h2, a1, &s2));
    NB_TRY(nb_tape_conv2d(t, s2, w3, NB_TVAR_NONE, 1, 0, &h3));
    NB_TRY(nb_tape_reshape(t, h3, 2, (int64_t[]){2, 16 * 16 * 16}, &r));
    NB_TRY(nb_tape_linear(t, r, w4, b4, &y));
    NB_TRY(nb_tape_input(t, 2, (int64_t[]){2, 10}, tgt, 0, &tv));
    NB_TRY(nb_tape_mse(t, y, tv, &l));
    NB_TRY(nb_tape_backward(t, l));
    out[0] = h1, out[1] = h2, out[2] = h3, out[3] = y;
    *bf16_ok = 1;
    for (int i = 0; i < 4; i++) {
        nb_dtype dt;
        NB_TRY(nb_tape_dtype(t, out[i], &dt));
        if (dt != NB_BF16) *bf16_ok = 0;
    }
    return NB_OK;
}

static void test_tape_bf16_chain(void) {
    nb_device *gpu = open_gpu();
    if (!gpu) NB_SKIP("no CUDA device with cuBLAS");
    const int64_t np = 32 * 27 + 32 + 32 * 32 * 9 + 32 + 16 * 32 + 10 * 4096 + 10;
    const int64_t nx = 2 * 3 * 16 * 16, sizes[4] = {2 * 32 * 256, 2 * 32 * 256, 2 * 16 * 256, 20};
    float *params = hrand(np, NB_F32), *x = hrand(nx, NB_F32), *tgt = hrand(20, NB_F32);
    for (int64_t i = 0; i < np; i++) params[i] *= 0.2f; /* keep activations O(1) */
    float *vals[2][4], *dx[2], *g[2];
    int ok = 1, bf16_ok = 0;
    for (int k = 0; k < 2 && ok; k++) {
        nb_tape *t = NULL;
        nb_tvar vx, out[4];
        nb_status st = k ? nb_tape_create_on(gpu, &t) : nb_tape_create(&t);
        if (st == NB_OK) st = nb_tape_set_precision(t, NB_TAPE_BF16);
        int bo = 0;
        if (st == NB_OK) st = chain_run(t, params, np, x, tgt, &vx, out, &bo);
        if (k) bf16_ok = bo;
        dx[k] = malloc((size_t)nx * sizeof(float));
        g[k] = malloc((size_t)np * sizeof(float));
        for (int i = 0; i < 4; i++) {
            vals[k][i] = malloc((size_t)sizes[i] * sizeof(float));
            if (st == NB_OK) st = nb_tape_read(t, out[i], vals[k][i], sizes[i]);
        }
        if (st == NB_OK) st = nb_tape_read_grad(t, vx, dx[k], nx);
        if (st == NB_OK) st = nb_tape_read_grads(t, g[k], np);
        if (st != NB_OK) {
            fprintf(stderr, "  %s: %s tape failed: %s: %s\n", nb_test_name_, k ? "CUDA" : "CPU",
                    nb_status_name(st), nb_last_error());
            nb_test_failures_++;
            ok = 0;
        }
        nb_tape_free(t);
    }
    if (ok) {
        if (!bf16_ok) {
            fprintf(stderr, "  %s: conv / linear outputs on the BF16 CUDA tape are not bf16\n",
                    nb_test_name_);
            nb_test_failures_++;
        }
        for (int i = 0; i < 4; i++) {
            double *r = malloc((size_t)sizes[i] * sizeof(double));
            for (int64_t j = 0; j < sizes[i]; j++) r[j] = vals[0][i][j];
            CHECK_ERR("value", rel_err(vals[1][i], r, sizes[i]), 3e-2, "chain value %d", i);
            free(r);
        }
        double *r = malloc((size_t)np * sizeof(double));
        for (int64_t j = 0; j < nx; j++) r[j] = dx[0][j];
        CHECK_ERR("dx", rel_err(dx[1], r, nx), 5e-2, "chain input gradient");
        /* per parameter tensor: its own scale */
        const int64_t off[8] = {0, 864, 896, 896 + 9216, 896 + 9216 + 32, 896 + 9216 + 32 + 512,
                                896 + 9216 + 32 + 512 + 40960, np};
        for (int pi = 0; pi < 7; pi++) {
            for (int64_t j = off[pi]; j < off[pi + 1]; j++) r[j - off[pi]] = g[0][j];
            CHECK_ERR("param grad", rel_err(g[1] + off[pi], r, off[pi + 1] - off[pi]), 5e-2,
                      "chain parameter %d", pi);
        }
        free(r);
    }
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 4; i++) free(vals[k][i]);
        free(dx[k]), free(g[k]);
    }
    free(params), free(x), free(tgt);
    nb_device_close(gpu);
}

/* ---- bad input ------------------------------------------------------------------------------ */

static void test_bad_dtypes(void) {
    nb_device *gpu = NULL;
    if (nb_device_open("cuda", &gpu) != NB_OK) NB_SKIP("no CUDA device");
    nb_conv_dims d;
    NB_REQUIRE_OK(nb_conv_dims_make(&d, 1, 4, 8, 8, 4, 3, 1, 1));
    float *p = (float *)(uintptr_t)256; /* never dereferenced: refused before any launch */
    NB_EXPECT_ERR(nb_cuda_conv2d_forward(gpu, NB_TAPE_TF32, &d, NB_BF16, NB_BF16, p, p, NULL, p),
                  NB_ERR_INVALID_ARG, "needs BF16 precision");
    NB_EXPECT_ERR(nb_cuda_conv2d_backward(gpu, NB_TAPE_FP32, &d, NB_F32, NB_BF16, p, p, p, p, p, p, 0),
                  NB_ERR_INVALID_ARG, "needs BF16 precision");
    NB_EXPECT_ERR(nb_cuda_conv2d_forward(gpu, NB_TAPE_BF16, &d, NB_F16, NB_BF16, p, p, NULL, p),
                  NB_ERR_INVALID_ARG, "storage dtypes f16");
    NB_EXPECT_ERR(nb_cuda_linear_forward(gpu, NB_TAPE_BF16, 1, 4, 4, NB_BF16, NB_I32, p, p, NULL, p),
                  NB_ERR_INVALID_ARG, "storage dtypes bf16 / i32");
    NB_EXPECT_ERR(nb_cuda_linear_backward(gpu, NB_TAPE_TF32, 1, 4, 4, NB_BF16, NB_BF16, p, p, p, p, p, p, 1),
                  NB_ERR_INVALID_ARG, "needs BF16 precision");
    nb_device_close(gpu);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_bad_dtypes, test_linear_bf16, test_conv_bf16, test_conv_bf16_big,
                 test_conv_bf16_wgrad_variants, test_conv_bf16_unaligned, test_tape_bf16_chain);
}

/* The bf16 3x3 weight-gradient kernel (src/nn/conv/conv_cuda_wg4.c): against a double CPU reference
 * on the bf16-rounded inputs (odd channel counts, channels not a multiple of the 64-row /
 * 64-triple tiles, non-square images, accumulation into an existing dw); bad input and the
 * NVRTC compile without a GPU. NB_WG4_BENCH=1: the reference UNet's shapes at batch 32, the
 * kernel vs the automatic weight-gradient path of nb_cuda_conv2d_backward. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nb_test.h"
#include "nabla/alloc.h"
#include "nabla/device.h"
#include "nabla/dtype.h"
#include "nabla/nn_tape.h"
#include "device/cuda/cuda_api.h"
#include "nn/conv/conv_cuda_wg4.h"

static uint64_t rng = 0x1234567887654321ull;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static nb_device *open_gpu(void) {
    nb_device *g = NULL;
    return nb_device_open("cuda", &g) == NB_OK ? g : NULL;
}

static void test_bad_input(void) {
    nb_conv_dims d;
    NB_REQUIRE_OK(nb_conv_dims_make(&d, 2, 64, 16, 16, 64, 3, 1, 1));
    NB_EXPECT(nb_conv_wg4_supports(&d, NB_TAPE_BF16, NB_BF16, NB_BF16));
    NB_EXPECT(!nb_conv_wg4_supports(&d, NB_TAPE_TF32, NB_BF16, NB_BF16));
    NB_EXPECT(nb_conv_wg4_supports(&d, NB_TAPE_TF32, NB_F32, NB_F32));
    NB_EXPECT(!nb_conv_wg4_supports(&d, NB_TAPE_FP32, NB_F32, NB_F32)); /* exact fp32: not here */
    NB_EXPECT(!nb_conv_wg4_supports(&d, NB_TAPE_BF16, NB_F32, NB_BF16));
    NB_EXPECT(!nb_conv_wg4_supports(NULL, NB_TAPE_BF16, NB_BF16, NB_BF16));
    nb_conv_dims e;
    NB_REQUIRE_OK(nb_conv_dims_make(&e, 2, 64, 16, 12, 64, 3, 1, 1)); /* W % 8 != 0 */
    NB_EXPECT(!nb_conv_wg4_supports(&e, NB_TAPE_BF16, NB_BF16, NB_BF16));
    NB_REQUIRE_OK(nb_conv_dims_make(&e, 2, 64, 16, 16, 64, 3, 2, 1)); /* stride 2 */
    NB_EXPECT(!nb_conv_wg4_supports(&e, NB_TAPE_BF16, NB_BF16, NB_BF16));
    NB_REQUIRE_OK(nb_conv_dims_make(&e, 2, 64, 16, 16, 64, 1, 1, 0)); /* 1x1 */
    NB_EXPECT(!nb_conv_wg4_supports(&e, NB_TAPE_BF16, NB_BF16, NB_BF16));
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    char buf[64] __attribute__((aligned(16)));
    float dw[4];
    NB_EXPECT_ERR(nb_conv_wg4(cpu, NB_TAPE_BF16, &d, NULL, buf, dw, NULL), NB_ERR_INVALID_ARG, "NULL");
    NB_REQUIRE_OK(nb_conv_dims_make(&e, 2, 64, 16, 12, 64, 3, 1, 1));
    NB_EXPECT_ERR(nb_conv_wg4(cpu, NB_TAPE_BF16, &e, buf, buf, dw, NULL), NB_ERR_UNSUPPORTED, "W % 8");
    NB_EXPECT_ERR(nb_conv_wg4(cpu, NB_TAPE_BF16, &d, buf + 2, buf, dw, dw), NB_ERR_INVALID_ARG, "aligned");
    nb_device_close(cpu);
}

/* dw [O][C][3][3] += sum dy x-patch, in double, on bf16 values (as floats) */
static void reference(const float *x, const float *dy, double *dw, double *bound, int N, int C, int H,
                      int W, int O) {
    for (int o = 0; o < O; o++)
        for (int c = 0; c < C; c++)
            for (int kh = 0; kh < 3; kh++)
                for (int kw = 0; kw < 3; kw++) {
                    double s = 0, b = 0;
                    for (int n = 0; n < N; n++)
                        for (int h = 0; h < H; h++) {
                            int ih = h + kh - 1;
                            if (ih < 0 || ih >= H) continue;
                            const float *xr = x + (((size_t)n * C + c) * H + ih) * W;
                            const float *dr = dy + (((size_t)n * O + o) * H + h) * W;
                            for (int w = 0; w < W; w++) {
                                int iw = w + kw - 1;
                                if (iw >= 0 && iw < W) s += (double)dr[w] * xr[iw], b += fabs((double)dr[w] * xr[iw]);
                            }
                        }
                    dw[((size_t)o * C + c) * 9 + kh * 3 + kw] += s;
                    bound[((size_t)o * C + c) * 9 + kh * 3 + kw] = b;
                }
}

/* prec NB_TAPE_BF16: bf16 x, dy (products exact in f32); NB_TAPE_TF32: f32 x, dy, which the
 * tensor cores read as tf32 (10-bit mantissas: each product within ~2^-10 relative) */
static void run_case(nb_device *g, int prec, int N, int C, int H, int W, int O) {
    int bf = prec == NB_TAPE_BF16;
    size_t es = bf ? 2 : 4;
    size_t nx = (size_t)N * C * H * W, ny = (size_t)N * O * H * W, nw = (size_t)O * C * 9;
    float *x = malloc(nx * 4), *dy = malloc(ny * 4), *dw0 = malloc(nw * 4), *out = malloc(nw * 4);
    uint16_t *xb = malloc(nx * 2), *dyb = malloc(ny * 2);
    double *ref = malloc(nw * sizeof(double)), *bound = malloc(nw * sizeof(double));
    for (size_t i = 0; i < nx; i++) xb[i] = nb_f32_to_bf16(frand()), x[i] = bf ? nb_bf16_to_f32(xb[i]) : frand();
    for (size_t i = 0; i < ny; i++) dyb[i] = nb_f32_to_bf16(frand()), dy[i] = bf ? nb_bf16_to_f32(dyb[i]) : frand();
    for (size_t i = 0; i < nw; i++) dw0[i] = frand(), ref[i] = dw0[i];
    reference(x, dy, ref, bound, N, C, H, W, O);
    nb_buffer *bx, *by, *bw;
    NB_REQUIRE_OK(nb_buffer_alloc(g, nx * es, &bx));
    NB_REQUIRE_OK(nb_buffer_alloc(g, ny * es, &by));
    NB_REQUIRE_OK(nb_buffer_alloc(g, nw * 4, &bw));
    NB_EXPECT_OK(nb_memcpy_h2d(g, nb_buffer_ptr(bx), bf ? (void *)xb : (void *)x, nx * es));
    NB_EXPECT_OK(nb_memcpy_h2d(g, nb_buffer_ptr(by), bf ? (void *)dyb : (void *)dy, ny * es));
    NB_EXPECT_OK(nb_memcpy_h2d(g, nb_buffer_ptr(bw), dw0, nw * 4));
    nb_conv_dims d;
    NB_REQUIRE_OK(nb_conv_dims_make(&d, N, C, H, W, O, 3, 1, 1));
    /* the bias gradient along (db0 + sum over n, p of dy) */
    float *db0 = malloc((size_t)O * 4), *dbg = malloc((size_t)O * 4);
    double *dbr = malloc((size_t)O * sizeof(double)), *dbb = malloc((size_t)O * sizeof(double));
    for (int o = 0; o < O; o++) {
        db0[o] = frand(), dbr[o] = db0[o], dbb[o] = fabs(db0[o]);
        for (int n = 0; n < N; n++)
            for (int i = 0; i < H * W; i++) {
                double v = dy[((size_t)n * O + o) * H * W + i];
                dbr[o] += v, dbb[o] += fabs(v);
            }
    }
    nb_buffer *bdb;
    NB_REQUIRE_OK(nb_buffer_alloc(g, (size_t)O * 4, &bdb));
    NB_EXPECT_OK(nb_memcpy_h2d(g, nb_buffer_ptr(bdb), db0, (size_t)O * 4));
    nb_status s = nb_conv_wg4(g, prec, &d, nb_buffer_ptr(bx), nb_buffer_ptr(by), nb_buffer_ptr(bw),
                              nb_buffer_ptr(bdb));
    if (s) fprintf(stderr, "  %s\n", nb_last_error());
    NB_EXPECT_OK(s);
    NB_EXPECT_OK(nb_memcpy_d2h(g, out, nb_buffer_ptr(bw), nw * 4));
    NB_EXPECT_OK(nb_memcpy_d2h(g, dbg, nb_buffer_ptr(bdb), (size_t)O * 4));
    int dbad = 0;
    double dberr = 0;
    for (int o = 0; o < O; o++) {
        double e = fabs(dbg[o] - dbr[o]);
        dberr = fmax(dberr, e);
        dbad += e > 1e-5 * dbb[o] + 1e-5;
    }
    printf("  db max err %.3g\n", dberr);
    NB_EXPECT(dbad == 0);
    nb_buffer_release(bdb);
    free(db0), free(dbg), free(dbr), free(dbb);
    double worst = 0, err = 0;
    int bad = 0;
    for (size_t i = 0; i < nw; i++) {
        double e = fabs(out[i] - ref[i]);
        /* f32 accumulation: ~1e-6 of the sum of |terms| (and of |dw0|); tf32 operands: 2^-10 */
        double tol = (bf ? 1e-5 : 2e-3) * bound[i] + 1e-5 * (1 + fabs(ref[i]));
        bad += e > tol;
        err = fmax(err, e);
        worst = fmax(worst, e / tol);
    }
    printf("  %s N%d C%d H%d W%d O%d: max err %.3g (worst err / tolerance %.3g)\n", bf ? "bf16" : "tf32", N, C, H, W,
           O, err, worst);
    NB_EXPECT(bad == 0);
    nb_buffer_release(bx), nb_buffer_release(by), nb_buffer_release(bw);
    free(x), free(dy), free(dw0), free(out), free(xb), free(dyb), free(ref), free(bound);
}

static void test_against_reference(void) {
    nb_device *g = open_gpu();
    if (!g) NB_SKIP("no CUDA device");
    for (int prec = NB_TAPE_TF32; prec <= NB_TAPE_BF16; prec++) {
        run_case(g, prec, 2, 64, 16, 16, 64);  /* whole tiles */
        run_case(g, prec, 3, 40, 8, 8, 48);    /* partial row and triple tiles, 8x8 (k tiles span rows) */
        run_case(g, prec, 1, 33, 8, 32, 70);   /* odd C: scalar atomics; non-square; two row blocks */
        run_case(g, prec, 2, 128, 32, 32, 96); /* several triple blocks, 32-pixel rows */
    }
    nb_device_close(g);
}

static void test_bench(void) {
    const char *env = getenv("NB_WG4_BENCH");
    if (!env || !env[0] || !strcmp(env, "0")) return;
    nb_device *g = open_gpu();
    if (!g) NB_SKIP("no CUDA device");
    static const int shapes[][3] = {{64, 64, 64},  {128, 64, 64},  {192, 64, 64}, {128, 128, 32}, {256, 128, 32},
                                    {192, 192, 16}, {384, 192, 16}, {256, 256, 8},  {512, 256, 8}};
    const int N = 32;
    nb_buffer *bx, *by, *bw;
    NB_REQUIRE_OK(nb_buffer_alloc(g, (size_t)N * 512 * 64 * 64 * 4, &bx));
    NB_REQUIRE_OK(nb_buffer_alloc(g, (size_t)N * 512 * 64 * 64 * 4, &by));
    NB_REQUIRE_OK(nb_buffer_alloc(g, (size_t)512 * 512 * 9 * 4, &bw));
    NB_EXPECT_OK(nb_memset(g, nb_buffer_ptr(bx), 0x3c, (size_t)N * 512 * 64 * 64 * 4));
    NB_EXPECT_OK(nb_memset(g, nb_buffer_ptr(by), 0x3c, (size_t)N * 512 * 64 * 64 * 4));
    nb_event *e0, *e1;
    NB_REQUIRE_OK(nb_event_create(g, &e0));
    NB_REQUIRE_OK(nb_event_create(g, &e1));
    for (int prec = NB_TAPE_TF32; prec <= NB_TAPE_BF16; prec++) {
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            int C = shapes[i][0], O = shapes[i][1], S = shapes[i][2];
            nb_dtype dt = prec == NB_TAPE_BF16 ? NB_BF16 : NB_F32;
            nb_conv_dims d;
            NB_REQUIRE_OK(nb_conv_dims_make(&d, N, C, S, S, O, 3, 1, 1));
            double fl = 2.0 * N * O * S * S * C * 9;
            float ms[2] = {0, 0};
            for (int which = 0; which < 2; which++) {
                nb_conv_wg4_enable(0); /* "current path": the automatic choice without this kernel */
                for (int it = 0; it < 23; it++) {
                    if (it == 3) nb_event_record(e0, NULL);
                    nb_status s = which ? nb_conv_wg4(g, prec, &d, nb_buffer_ptr(bx), nb_buffer_ptr(by), nb_buffer_ptr(bw), NULL)
                                        : nb_cuda_conv2d_backward(g, prec, &d, dt, dt, nb_buffer_ptr(bx),
                                                                  nb_buffer_ptr(bw), nb_buffer_ptr(by), NULL,
                                                                  nb_buffer_ptr(bw), NULL, 1);
                    NB_EXPECT_OK(s);
                }
                nb_event_record(e1, NULL);
                nb_event_synchronize(e1);
                nb_event_elapsed_ms(e0, e1, &ms[which]);
                ms[which] /= 20;
            }
            nb_conv_wg4_enable(-1);
            printf("wg4 bench %s N32 C%-3d O%-3d S%-2d: current path %7.1f us (%6.1f TF/s)  wg4 %7.1f us (%6.1f TF/s)  x%.2f\n",
                   prec == NB_TAPE_BF16 ? "bf16" : "tf32", C, O, S, ms[0] * 1e3, fl / ms[0] * 1e-9, ms[1] * 1e3, fl / ms[1] * 1e-9, ms[0] / ms[1]);
        }
    }
    nb_event_destroy(e0), nb_event_destroy(e1);
    nb_buffer_release(bx), nb_buffer_release(by), nb_buffer_release(bw);
    nb_device_close(g);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_bad_input, test_against_reference, test_bench);
}

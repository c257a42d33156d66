/* The 3x3 forward / data-gradient kernel (src/nn/conv_cuda_fw4.c): against a double CPU
 * reference on the rounded inputs (bf16 / tf32), with bias, accumulation and store, channels
 * not a multiple of the 64-row tile, 8x8 images (pixel tiles spanning images), both pixel tile
 * widths; bad input and the NVRTC compile without a GPU. NB_FW4_BENCH=1: the reference UNet's
 * shapes at batch 32, the kernel vs the automatic path without it. */
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
#include "nn/conv_cuda_fw4.h"

static uint64_t rng = 0x9876543212345678ull;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static nb_device *open_gpu(void) {
    nb_device *g = NULL;
    return nb_device_open("cuda", &g) == NB_OK ? g : NULL;
}

static void test_compile(void) {
    if (!nb_nvrtc_version()) NB_SKIP("NVRTC not available");
    const char *src = nb_conv_fw4_source();
    size_t len = strlen(src);
    char *buf = malloc(len + 64);
    for (int prec = 1; prec <= 2; prec++)
        for (int bn = 64; bn <= 128; bn *= 2) {
            int n = snprintf(buf, 64, "#define PREC %d\n#define BN %d\n", prec, bn);
            memcpy(buf + n, src, len + 1);
            void *img = NULL;
            size_t size = 0;
            nb_status s = nb_nvrtc_compile(buf, "fw4", "sm_90", NULL, &img, &size, NULL);
            if (s) fprintf(stderr, "  prec %d bn %d: %s\n", prec, bn, nb_last_error());
            NB_EXPECT_OK(s);
            if (img) nb_free(img, size);
        }
    free(buf);
}

static void test_bad_input(void) {
    nb_conv_dims d, e;
    NB_REQUIRE_OK(nb_conv_dims_make(&d, 2, 64, 16, 16, 48, 3, 1, 1));
    NB_EXPECT(nb_conv_fw4_supports(&d, NB_TAPE_BF16, NB_BF16, NB_BF16, 0));
    NB_EXPECT(nb_conv_fw4_supports(&d, NB_TAPE_TF32, NB_F32, NB_F32, 1));
    NB_EXPECT(!nb_conv_fw4_supports(&d, NB_TAPE_FP32, NB_F32, NB_F32, 0));
    NB_EXPECT(!nb_conv_fw4_supports(&d, NB_TAPE_BF16, NB_F32, NB_BF16, 0));
    NB_REQUIRE_OK(nb_conv_dims_make(&e, 2, 40, 16, 16, 48, 3, 1, 1)); /* C % 16 != 0 */
    NB_EXPECT(!nb_conv_fw4_supports(&e, NB_TAPE_BF16, NB_BF16, NB_BF16, 0));
    NB_EXPECT(nb_conv_fw4_supports(&e, NB_TAPE_BF16, NB_BF16, NB_BF16, 1)); /* O = 48 */
    NB_REQUIRE_OK(nb_conv_dims_make(&e, 2, 64, 16, 12, 48, 3, 1, 1)); /* W % 8 != 0 */
    NB_EXPECT(!nb_conv_fw4_supports(&e, NB_TAPE_BF16, NB_BF16, NB_BF16, 0));
    NB_REQUIRE_OK(nb_conv_dims_make(&e, 2, 64, 16, 16, 48, 3, 2, 1)); /* stride 2 */
    NB_EXPECT(!nb_conv_fw4_supports(&e, NB_TAPE_BF16, NB_BF16, NB_BF16, 0));
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    char buf[64] __attribute__((aligned(16)));
    float w[4];
    NB_EXPECT_ERR(nb_conv_fw4_forward(cpu, NB_TAPE_BF16, &d, NULL, w, NULL, buf), NB_ERR_INVALID_ARG, "NULL");
    NB_REQUIRE_OK(nb_conv_dims_make(&e, 2, 40, 16, 16, 48, 3, 1, 1));
    NB_EXPECT_ERR(nb_conv_fw4_forward(cpu, NB_TAPE_BF16, &e, buf, w, NULL, buf), NB_ERR_UNSUPPORTED, "C % 16");
    NB_EXPECT_ERR(nb_conv_fw4_dgrad(cpu, NB_TAPE_BF16, &d, w, buf + 2, buf, 1), NB_ERR_INVALID_ARG, "aligned");
    nb_device_close(cpu);
}

static float round_tf32(float v) { /* the tensor cores read the top 19 bits */
    uint32_t u;
    memcpy(&u, &v, 4);
    u &= 0xffffe000u;
    memcpy(&v, &u, 4);
    return v;
}

/* which 0: y[n][o] = b + conv(x, w); 1: dx[n][c] (+)= conv^T(dy, w). Inputs rounded as the
 * kernel reads them; bf16 outputs compared after the reference is rounded too. */
static void run_case(nb_device *g, int prec, int which, int N, int C, int H, int W, int O, int accum) {
    int bf = prec == NB_TAPE_BF16;
    size_t es = bf ? 2 : 4;
    int cin = which ? O : C, cout = which ? C : O;
    size_t nin = (size_t)N * cin * H * W, nout = (size_t)N * cout * H * W, nw = (size_t)O * C * 9;
    float *in = malloc(nin * 4), *w = malloc(nw * 4), *b = malloc((size_t)O * 4), *out0 = malloc(nout * 4);
    float *got = malloc(nout * 4), *wq = malloc(nw * 4);
    uint16_t *inb = malloc(nin * 2), *outb = malloc(nout * 2);
    double *ref = malloc(nout * sizeof(double)), *bound = malloc(nout * sizeof(double));
    for (size_t i = 0; i < nin; i++) {
        float v = frand();
        inb[i] = nb_f32_to_bf16(v);
        in[i] = bf ? nb_bf16_to_f32(inb[i]) : v;
    }
    for (size_t i = 0; i < nw; i++) w[i] = frand() * 0.2f, wq[i] = bf ? nb_bf16_to_f32(nb_f32_to_bf16(w[i])) : round_tf32(w[i]);
    for (int i = 0; i < O; i++) b[i] = frand();
    for (size_t i = 0; i < nout; i++) {
        float v = frand();
        outb[i] = nb_f32_to_bf16(v);
        out0[i] = bf ? nb_bf16_to_f32(outb[i]) : v;
    }
    for (int n = 0; n < N; n++)
        for (int co = 0; co < cout; co++)
            for (int h = 0; h < H; h++)
                for (int x = 0; x < W; x++) {
                    double s = 0, bd = 0;
                    for (int ci = 0; ci < cin; ci++)
                        for (int kh = 0; kh < 3; kh++)
                            for (int kw = 0; kw < 3; kw++) {
                                int ih = h + kh - 1, iw = x + kw - 1;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                /* forward: w[co][ci][kh][kw]; data gradient: w[ci][co][2-kh][2-kw] */
                                double wv = which ? wq[((size_t)ci * C + co) * 9 + (2 - kh) * 3 + (2 - kw)]
                                                  : wq[((size_t)co * C + ci) * 9 + kh * 3 + kw];
                                double iv = bf ? in[(((size_t)n * cin + ci) * H + ih) * W + iw]
                                               : round_tf32(in[(((size_t)n * cin + ci) * H + ih) * W + iw]);
                                s += wv * iv, bd += fabs(wv * iv);
                            }
                    size_t o = (((size_t)n * cout + co) * H + h) * W + x;
                    if (!which) s += b[co];
                    if (accum) s += out0[o];
                    ref[o] = s, bound[o] = bd + fabs(s);
                }
    nb_buffer *bi, *bw, *bb, *bo;
    NB_REQUIRE_OK(nb_buffer_alloc(g, nin * es, &bi));
    NB_REQUIRE_OK(nb_buffer_alloc(g, nw * 4, &bw));
    NB_REQUIRE_OK(nb_buffer_alloc(g, (size_t)O * 4, &bb));
    NB_REQUIRE_OK(nb_buffer_alloc(g, nout * es, &bo));
    NB_EXPECT_OK(nb_memcpy_h2d(g, nb_buffer_ptr(bi), bf ? (void *)inb : (void *)in, nin * es));
    NB_EXPECT_OK(nb_memcpy_h2d(g, nb_buffer_ptr(bw), w, nw * 4));
    NB_EXPECT_OK(nb_memcpy_h2d(g, nb_buffer_ptr(bb), b, (size_t)O * 4));
    NB_EXPECT_OK(nb_memcpy_h2d(g, nb_buffer_ptr(bo), bf ? (void *)outb : (void *)out0, nout * es));
    nb_conv_dims d;
    NB_REQUIRE_OK(nb_conv_dims_make(&d, N, C, H, W, O, 3, 1, 1));
    nb_status s = which ? nb_conv_fw4_dgrad(g, prec, &d, nb_buffer_ptr(bw), nb_buffer_ptr(bi), nb_buffer_ptr(bo), !accum)
                        : nb_conv_fw4_forward(g, prec, &d, nb_buffer_ptr(bi), nb_buffer_ptr(bw), nb_buffer_ptr(bb),
                                              nb_buffer_ptr(bo));
    if (s) fprintf(stderr, "  %s\n", nb_last_error());
    NB_EXPECT_OK(s);
    if (bf) {
        NB_EXPECT_OK(nb_memcpy_d2h(g, outb, nb_buffer_ptr(bo), nout * 2));
        for (size_t i = 0; i < nout; i++) got[i] = nb_bf16_to_f32(outb[i]);
    } else {
        NB_EXPECT_OK(nb_memcpy_d2h(g, got, nb_buffer_ptr(bo), nout * 4));
    }
    double err = 0, worst = 0;
    int bad = 0;
    for (size_t i = 0; i < nout; i++) {
        double e = fabs(got[i] - ref[i]);
        /* f32 sums (1e-5 of the terms); a bf16 output: its rounding (2^-8 relative) */
        double tol = 1e-5 * bound[i] + (bf ? 4e-3 * fabs(ref[i]) : 1e-6) + 1e-5;
        bad += e > tol;
        err = fmax(err, e), worst = fmax(worst, e / tol);
    }
    printf("  %s %s N%d C%d H%d W%d O%d %s: max err %.3g (worst err / tolerance %.3g)\n", bf ? "bf16" : "tf32",
           which ? "dgrad" : "fwd", N, C, H, W, O, accum ? "accumulate" : "store", err, worst);
    NB_EXPECT(bad == 0);
    nb_buffer_release(bi), nb_buffer_release(bw), nb_buffer_release(bb), nb_buffer_release(bo);
    free(in), free(w), free(b), free(out0), free(got), free(wq), free(inb), free(outb), free(ref), free(bound);
}

static void test_against_reference(void) {
    nb_device *g = open_gpu();
    if (!g) NB_SKIP("no CUDA device");
    for (int prec = NB_TAPE_TF32; prec <= NB_TAPE_BF16; prec++) {
        run_case(g, prec, 0, 2, 32, 16, 16, 48, 0);  /* partial row tile, BN 64 */
        run_case(g, prec, 0, 3, 16, 8, 8, 80, 0);    /* 8x8: pixel tiles span images */
        run_case(g, prec, 1, 2, 48, 16, 24, 32, 0);  /* dgrad store, non-square */
        run_case(g, prec, 1, 2, 40, 8, 8, 64, 1);    /* dgrad accumulate, C % 16 != 0 (the output) */
        run_case(g, prec, 0, 8, 64, 32, 32, 64, 0);  /* enough pixels for BN 128 */
    }
    nb_device_close(g);
}

static void test_bench(void) {
    const char *env = getenv("NB_FW4_BENCH");
    if (!env || !env[0] || !strcmp(env, "0")) return;
    nb_device *g = open_gpu();
    if (!g) NB_SKIP("no CUDA device");
    static const int shapes[][3] = {{64, 64, 64},  {128, 64, 64},  {128, 128, 32}, {256, 128, 32},
                                    {192, 192, 16}, {384, 192, 16}, {256, 256, 8},  {512, 256, 8}};
    const int N = 32;
    size_t big = (size_t)N * 512 * 64 * 64 * 4;
    nb_buffer *bx, *by, *bw;
    NB_REQUIRE_OK(nb_buffer_alloc(g, big, &bx));
    NB_REQUIRE_OK(nb_buffer_alloc(g, big, &by));
    NB_REQUIRE_OK(nb_buffer_alloc(g, (size_t)512 * 512 * 9 * 4, &bw));
    NB_EXPECT_OK(nb_memset(g, nb_buffer_ptr(bx), 0x3c, big));
    NB_EXPECT_OK(nb_memset(g, nb_buffer_ptr(by), 0x3c, big));
    NB_EXPECT_OK(nb_memset(g, nb_buffer_ptr(bw), 0, (size_t)512 * 512 * 9 * 4));
    nb_event *e0, *e1;
    NB_REQUIRE_OK(nb_event_create(g, &e0));
    NB_REQUIRE_OK(nb_event_create(g, &e1));
    for (int prec = NB_TAPE_TF32; prec <= NB_TAPE_BF16; prec++)
        for (int which = 0; which < 2; which++)
            for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
                int C = shapes[i][0], O = shapes[i][1], S = shapes[i][2];
                nb_dtype dt = prec == NB_TAPE_BF16 ? NB_BF16 : NB_F32;
                nb_conv_dims d;
                NB_REQUIRE_OK(nb_conv_dims_make(&d, N, C, S, S, O, 3, 1, 1));
                double fl = 2.0 * N * O * S * S * C * 9;
                float ms[2] = {0, 0};
                for (int k = 0; k < 2; k++) {
                    nb_conv_fw4_enable(k);
                    for (int it = 0; it < 23; it++) {
                        if (it == 3) nb_event_record(e0, NULL);
                        nb_status s = which ? nb_cuda_conv2d_backward(g, prec, &d, dt, dt, nb_buffer_ptr(bx), nb_buffer_ptr(bw),
                                                                      nb_buffer_ptr(by), nb_buffer_ptr(bx), NULL, NULL, 1)
                                            : nb_cuda_conv2d_forward(g, prec, &d, dt, dt, nb_buffer_ptr(bx), nb_buffer_ptr(bw),
                                                                     NULL, nb_buffer_ptr(by));
                        NB_EXPECT_OK(s);
                    }
                    nb_event_record(e1, NULL);
                    nb_event_synchronize(e1);
                    nb_event_elapsed_ms(e0, e1, &ms[k]);
                    ms[k] /= 20;
                }
                nb_conv_fw4_enable(-1);
                printf("fw4 bench %s %-5s N32 C%-3d O%-3d S%-2d: current path %7.1f us (%6.1f TF/s)  fw4 %7.1f us (%6.1f TF/s)  x%.2f\n",
                       prec == NB_TAPE_BF16 ? "bf16" : "tf32", which ? "dgrad" : "fwd", C, O, S, ms[0] * 1e3,
                       fl / ms[0] * 1e-9, ms[1] * 1e3, fl / ms[1] * 1e-9, ms[0] / ms[1]);
            }
    nb_event_destroy(e0), nb_event_destroy(e1);
    nb_buffer_release(bx), nb_buffer_release(by), nb_buffer_release(bw);
    nb_device_close(g);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_compile, test_bad_input, test_against_reference, test_bench);
}

/* Fused MLP throughput (public API only; PyTorch reference of the same model in
 * bench/torch/bench_mlp.py).
 *
 * The benchmark: widths 16/32/64/128, 5 hidden layers, ReLU, no bias, no output
 * activation, f16 operands with f32 accumulation, batch 2^21, n_in = n_out = width (the shape
 * tiny-cuda-nn's MLP benchmarks use: identity encoding, input width = network width). Measured:
 *
 *   train   nb_mlp_forward(training) + nb_mlp_backward(dy, dx = NULL): weight gradients only,
 *           as in tiny-cuda-nn's training step (the loss and the optimizer are outside the MLP
 *           here: dy is a fixed buffer; tiny-cuda-nn's figure includes its L2 loss + Adam).
 *   train+dx  the same with dx (what an encoding in front of the MLP needs).
 *   infer   nb_mlp_inference.
 *   fwd(train)  nb_mlp_forward(training) alone (train minus this = the backward).
 * The backward is the one the shape selects (recompute, fused or split; see docs/NN.md).
 *
 * Each is timed with device events around --reps repetitions of one step, median of 5 such
 * measurements, after warm-up. Samples/s = batch / step time. Printed beside tiny-cuda-nn's
 * published H100 figures and the targets. Then the fit-image shape (n_in 32, n_out 3,
 * width 64, 2 hidden layers, batch 2^18): one forward+backward(dx) in ms.
 *
 *   usage: bench_mlp [--log2b N] [--reps R] [--width W] [--bf16]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/nabla.h"
#include "nabla/nn_mlp.h"

#define CHECK(x)                                                                               \
    do {                                                                                       \
        nb_status s_ = (x);                                                                    \
        if (s_ != NB_OK) {                                                                     \
            fprintf(stderr, "bench_mlp: %s failed: %s\n", #x, nb_last_error());                \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

typedef enum { TRAIN, TRAIN_DX, INFER, FWD_TRAIN } mode;

typedef struct ctx {
    nb_mlp *m;
    nb_tensor *x, *y, *dy, *dx;
} ctx;

static void step(ctx *c, mode md) {
    if (md == INFER) {
        CHECK(nb_mlp_inference(c->m, c->x, c->y));
    } else if (md == FWD_TRAIN) {
        CHECK(nb_mlp_forward(c->m, c->x, c->y, 1));
    } else {
        CHECK(nb_mlp_forward(c->m, c->x, c->y, 1));
        CHECK(nb_mlp_backward(c->m, c->dy, md == TRAIN_DX ? c->dx : NULL));
    }
}

static int cmpf(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median over 5 measurements of the mean step time (ms) over `reps` steps. */
static double time_step(nb_device *dev, ctx *c, mode md, int reps) {
    nb_event *e0, *e1;
    CHECK(nb_event_create(dev, &e0));
    CHECK(nb_event_create(dev, &e1));
    for (int i = 0; i < 3; i++) step(c, md);
    float ms[5];
    for (int k = 0; k < 5; k++) {
        CHECK(nb_event_record(e0, nb_device_stream(dev)));
        for (int i = 0; i < reps; i++) step(c, md);
        CHECK(nb_event_record(e1, nb_device_stream(dev)));
        CHECK(nb_event_synchronize(e1));
        CHECK(nb_event_elapsed_ms(e0, e1, &ms[k]));
        ms[k] /= (float)reps;
    }
    qsort(ms, 5, sizeof ms[0], cmpf);
    nb_event_destroy(e0);
    nb_event_destroy(e1);
    return ms[2];
}

static void fill(nb_tensor *t, float scale) {
    int64_t n = nb_tensor_numel(t);
    float *h = malloc(sizeof(float) * (size_t)n);
    uint64_t s = 12345;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = scale * ((float)(s >> 40) / 16777216.0f * 2.f - 1.f);
    }
    CHECK(nb_tensor_from_host_into(t, h, sizeof(float) * (size_t)n));
    free(h);
}

static void setup(nb_device *dev, ctx *c, const nb_mlp_config *cfg, int64_t B) {
    CHECK(nb_mlp_create(dev, cfg, &c->m));
    CHECK(nb_mlp_init_params(c->m, 1));
    int64_t sx[2] = {B, cfg->n_in}, sy[2] = {B, cfg->n_out};
    CHECK(nb_tensor_empty(dev, NB_F32, 2, sx, &c->x));
    CHECK(nb_tensor_empty(dev, NB_F32, 2, sx, &c->dx));
    CHECK(nb_tensor_empty(dev, NB_F32, 2, sy, &c->y));
    CHECK(nb_tensor_empty(dev, NB_F32, 2, sy, &c->dy));
    fill(c->x, 1.f);
    fill(c->dy, 1e-3f);
}

static void teardown(ctx *c) {
    nb_tensor_free(c->x);
    nb_tensor_free(c->dx);
    nb_tensor_free(c->y);
    nb_tensor_free(c->dy);
    nb_mlp_free(c->m);
}

int main(int argc, char **argv) {
    int log2b = 21, reps = 10, only_w = 0, bf16 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--log2b") && i + 1 < argc) log2b = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--width") && i + 1 < argc) only_w = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bf16")) bf16 = 1;
        else {
            fprintf(stderr, "usage: bench_mlp [--log2b N] [--reps R] [--width W] [--bf16]\n");
            return 2;
        }
    }
    nb_device *dev;
    if (nb_device_open("cuda", &dev) != NB_OK) {
        printf("bench_mlp: no CUDA device (%s); nothing to measure\n", nb_last_error());
        return 0;
    }
    const nb_device_info *info = nb_device_get_info(dev);
    int64_t B = (int64_t)1 << log2b;
    printf("bench_mlp: %s, %d SMs; fused MLP, 5 hidden layers, ReLU, no bias, %s operands, f32 "
           "accumulation, batch 2^%d = %lld, n_in = n_out = width\n",
           info->name, info->multiprocessors, bf16 ? "bf16" : "f16", log2b, (long long)B);
    /* Copy bandwidth (read + write bytes / s of a 1 GiB device-to-device copy), for the floor:
     * inference must read x and write y (2 x 4 x width bytes per sample). */
    double copy_gbs = 0;
    {
        nb_buffer *a, *b;
        size_t bytes = (size_t)1 << 30;
        CHECK(nb_buffer_alloc(dev, bytes, &a));
        CHECK(nb_buffer_alloc(dev, bytes, &b));
        nb_event *e0, *e1;
        CHECK(nb_event_create(dev, &e0));
        CHECK(nb_event_create(dev, &e1));
        float best = 1e30f;
        for (int i = 0; i < 5; i++) {
            CHECK(nb_event_record(e0, nb_device_stream(dev)));
            CHECK(nb_memcpy_d2d(dev, nb_buffer_ptr(b), nb_buffer_ptr(a), bytes));
            CHECK(nb_event_record(e1, nb_device_stream(dev)));
            CHECK(nb_event_synchronize(e1));
            float ms;
            CHECK(nb_event_elapsed_ms(e0, e1, &ms));
            if (ms < best) best = ms;
        }
        copy_gbs = 2.0 * (double)bytes / (best * 1e-3) / 1e9;
        nb_event_destroy(e0);
        nb_event_destroy(e1);
        nb_buffer_release(a);
        nb_buffer_release(b);
        printf("copy bandwidth %.0f GB/s (read + write); inference floor at width W: "
               "8 W bytes/sample -> %.3g samples/s at W = 64\n", copy_gbs, copy_gbs * 1e9 / (8.0 * 64));
    }
    /* tiny-cuda-nn's published H100 figures (issue 6): training / inference samples/s. */
    const int widths[4] = {16, 32, 64, 128};
    const double tcnn_train[4] = {0, 0, 4.5e8, 2.4e8}, tcnn_infer[4] = {0, 0, 1.09e9, 7.0e8};
    printf("%-6s %-22s %10s %14s %14s %10s\n", "width", "mode", "ms/step", "samples/s",
           "tcnn samples/s", "vs tcnn");
    /* The backward is the one the shape selects (mlp_cuda.c): recompute at widths <= 64, split at
     * 128 (5 hidden layers: the weights do not fit in shared memory beside the fused tiles).
     * Earlier runs measured the other variants through switches since removed (docs/NN.md,
     * docs/PERF.md keep those numbers). */
    for (int wi = 0; wi < 4; wi++) {
        int W = widths[wi];
        if (only_w && W != only_w) continue;
        nb_mlp_config cfg = nb_mlp_config_default(W, W, W, 5);
        if (bf16) cfg.compute = NB_BF16;
        ctx c;
        setup(dev, &c, &cfg, B);
        for (int md = 0; md < 4; md++) {
            double ms = time_step(dev, &c, (mode)md, reps);
            double sps = (double)B / (ms * 1e-3);
            double ref = md == INFER ? tcnn_infer[wi] : md == TRAIN ? tcnn_train[wi] : 0;
            char refs[32] = "-", ratio[32] = "-";
            if (ref > 0) {
                snprintf(refs, sizeof refs, "%.3g", ref);
                snprintf(ratio, sizeof ratio, "%.2fx", sps / ref);
            }
            const char *name = md == INFER ? "infer" : md == FWD_TRAIN ? "fwd(train)" : md == TRAIN ? "train" : "train+dx";
            printf("%-6d %-22s %10.4f %14.4g %14s %10s\n", W, name, ms, sps, refs, ratio);
        }
        fflush(stdout);
        teardown(&c);
        if (W == 64)
            printf("       target (issue 6): train >= 9e8 samples/s, inference >= 4e9 samples/s\n");
        /* Per-kernel times (each launch synchronised), printed to stderr by nb_mlp_free. */
        setup(dev, &c, &cfg, B);
        CHECK(nb_mlp_set_profile(c.m, 1));
        for (int i = 0; i < 3; i++) {
            step(&c, TRAIN);
            step(&c, INFER);
        }
        fflush(stdout);
        teardown(&c);
    }
    /* The fit-image model: hash grid (32 features) -> MLP 64 wide, 2 hidden, ReLU, 3 outputs. */
    {
        nb_mlp_config cfg = nb_mlp_config_default(32, 3, 64, 2);
        if (bf16) cfg.compute = NB_BF16;
        ctx c;
        setup(dev, &c, &cfg, (int64_t)1 << 18);
        double ms = time_step(dev, &c, TRAIN_DX, 50);
        double msi = time_step(dev, &c, INFER, 50);
        printf("fit-image MLP (32 -> 64 x2 -> 3, batch 2^18): forward+backward(dx) %.4f ms, "
               "inference %.4f ms (whole-step budget incl. encoding + loss + Adam: 0.25 ms)\n",
               ms, msi);
        teardown(&c);
    }
    nb_device_close(dev);
    return 0;
}

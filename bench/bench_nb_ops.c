/* The .nb ops of lib/nn_ops.nb (src/nn/ops/nb_ops.c, vectorized calls) against the hand-written
 * ones, forward and backward, at a UNet activation shape f32 [32,128,32,32] (4.2M elements):
 *   silu, add, add_channel, mse    vs the tape's rows (CPU: tape_ops_basic.c; CUDA:
 *                                  tape_cuda_basic.c), timed by the tape profiler per step
 *                                  (the CUDA silu forward row runs nn_silu itself now, through
 *                                  a prepared call: that row compares the two call paths; the
 *                                  deleted hand kernel's numbers are in docs/PERF.md);
 *   cast f32 -> bf16 / bf16 -> f32 vs nb_convert (the CPU cast row's conversion) / the CUDA
 *                                  tape's cast row (nb_tape_cast);
 *   AdamW step over 4.2M params    vs nb_adam_step (which runs the .nb op itself now, through a
 *                                  prepared call, on every device: the row compares a plain
 *                                  call with the prepared one; the deleted hand-written loop's
 *                                  and CUDA kernel's numbers are in docs/PERF.md);
 *   mul                            (no hand-written row: the .nb time alone).
 * Prints per row the median ms over the iterations (after 2 warm-up runs), GB/s from the bytes
 * each op must move (stated per row), and .nb / hand-written. On CUDA both sides are device time
 * (CUDA events, as the tape profiler's); the last column is the .nb call's wall-clock time with
 * the device synchronised around it, which adds the host side and the wait. The backward rows of
 * silu, add, mse and mul run the stored forms (nb_nbops_*_bwd_to: dx = ...), as the tape stores
 * a fresh gradient's first contribution. The issue-16 rule: an op moves to .nb where that ratio
 * is <= 1.10 (CUDA measured on an H100).
 *   bench_nb_ops [iters [cpu|cuda|all]]   (default 9 all: the CPU, then CUDA when present) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nabla/device.h"
#include "nabla/nn_optim.h"
#include "nabla/nn_tape.h"
#include "nabla/tensor.h"
#include "nn/ops/nb_ops.h"
#include "graph/op_rows.h" /* nb_tape_cast: the hand-written cast row */

/* Exits with the message of a failed step (a benchmark has nothing to recover). */
static void check(nb_status s, const char *what, int line) {
    if (!s) return;
    fprintf(stderr, "bench_nb_ops.c:%d: %s: %s\n", line, what, nb_last_error());
    exit(1);
}
#define CHECK(x) check((x), #x, __LINE__)

enum { N = 32, C = 128, H = 32, W = 32, MAXIT = 64 };
#define NUMEL ((int64_t)N * C * H * W)
static const int64_t S4[4] = {N, C, H, W}, S2[2] = {N, C};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Rows of the table: the op, bytes per element it must move, .nb ms and hand-written ms. */
enum { R_SILU_F, R_SILU_B, R_ADD_F, R_ADD_B, R_ADDC_F, R_ADDC_B, R_MSE_F, R_MSE_B, R_CAST_F, R_CAST_B,
       R_ADAM, R_MUL_F, R_MUL_B, R_COUNT };
static const char *row_name[R_COUNT] = {"silu fwd", "silu bwd", "add fwd", "add bwd", "add_channel fwd",
                                        "add_channel bwd", "mse fwd", "mse bwd", "cast f32->bf16",
                                        "cast bf16->f32", "adamw step", "mul fwd", "mul bwd"};
/* bytes per element: reads + writes (a gradient that accumulates is read and written; the bwd
 * rows store fresh gradients, *_bwd_to, as the tape's first contribution does; add_channel's dx
 * accumulates) */
static const int row_bytes[R_COUNT] = {8, 12, 12, 12, 8, 12, 8, 16, 6, 6, 32, 12, 20};
static double t_nb[R_COUNT][MAXIT], t_wall[R_COUNT][MAXIT], t_hand[R_COUNT][MAXIT];
static int n_hand[R_COUNT];

static nb_tensor *mk(nb_device *dev, int ndim, const int64_t *shape, uint32_t seed) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    float *h = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = seed ? (float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f : 0.0f;
    }
    nb_tensor *t;
    CHECK(nb_tensor_from_host(dev, NB_F32, ndim, shape, h, &t));
    free(h);
    return t;
}

/* one .nb op, timed: t_nb is device time on CUDA (events on the device stream around the call,
 * as the tape profiler times the hand-written rows), wall-clock time on the CPU; t_wall is always
 * the wall-clock time of the call with the device synchronised around it (host binding + launch
 * + the wait). */
static nb_event *ev0, *ev1;
#define TIME_NB(row, it, call)                                                                     \
    do {                                                                                           \
        CHECK(nb_device_synchronize(dev));                                                         \
        double t0_ = now_ms();                                                                     \
        if (ev0) CHECK(nb_event_record(ev0, nb_device_stream(dev)));                               \
        CHECK(call);                                                                               \
        if (ev1) CHECK(nb_event_record(ev1, nb_device_stream(dev)));                               \
        CHECK(nb_device_synchronize(dev));                                                         \
        double t1_ = now_ms();                                                                     \
        float ms_ = 0.0f;                                                                          \
        if (ev0) CHECK(nb_event_elapsed_ms(ev0, ev1, &ms_));                                       \
        if ((it) >= 0) t_nb[row][it] = ev0 ? (double)ms_ : t1_ - t0_, t_wall[row][it] = t1_ - t0_; \
    } while (0)

static void run_nb(nb_device *dev, int iters) {
    nb_nbops *o;
    CHECK(nb_nbops_create(dev, &o));
    ev0 = ev1 = NULL;
    if (nb_device_get_kind(dev) == NB_DEVICE_CUDA) CHECK(nb_event_create(dev, &ev0)), CHECK(nb_event_create(dev, &ev1));
    nb_tensor *x = mk(dev, 4, S4, 1), *b = mk(dev, 4, S4, 2), *dy = mk(dev, 4, S4, 3), *c = mk(dev, 2, S2, 4);
    nb_tensor *y = mk(dev, 4, S4, 5), *dx = mk(dev, 4, S4, 6), *db = mk(dev, 4, S4, 7), *dc = mk(dev, 2, S2, 8);
    nb_tensor *m = mk(dev, 4, S4, 9), *v, *loss = mk(dev, 1, (int64_t[]){1}, 10), *xb;
    nb_tensor *dl = mk(dev, 1, (int64_t[]){1}, 11);
    CHECK(nb_tensor_zeros(dev, NB_F32, 4, S4, &v));
    CHECK(nb_tensor_empty(dev, NB_BF16, 4, S4, &xb));
    nb_adam_config cfg = nb_adam_config_default();
    cfg.decoupled = 1, cfg.weight_decay = 0.01f, cfg.lr = 1e-6f;
    for (int it = -2; it < iters; it++) {
        TIME_NB(R_SILU_F, it, nb_nbops_silu(o, x, y));
        TIME_NB(R_SILU_B, it, nb_nbops_silu_bwd_to(o, x, dy, dx));
        TIME_NB(R_ADD_F, it, nb_nbops_add(o, x, b, y));
        TIME_NB(R_ADD_B, it, nb_nbops_add_bwd_to(o, x, b, dy, dx, db));
        TIME_NB(R_ADDC_F, it, nb_nbops_add_channel(o, x, c, y));
        TIME_NB(R_ADDC_B, it, nb_nbops_add_channel_bwd(o, x, c, dy, dx, dc));
        TIME_NB(R_MSE_F, it, nb_nbops_mse(o, x, b, loss));
        TIME_NB(R_MSE_B, it, nb_nbops_mse_bwd_to(o, x, b, dl, dx, db));
        TIME_NB(R_CAST_F, it, nb_nbops_cast(o, x, xb));
        TIME_NB(R_CAST_B, it, nb_nbops_cast(o, xb, y));
        TIME_NB(R_ADAM, it, nb_nbops_adamw(o, &cfg, it + 3, x, dy, m, v, 0));
        TIME_NB(R_MUL_F, it, nb_nbops_mul(o, x, b, y));
        TIME_NB(R_MUL_B, it, nb_nbops_mul_bwd_to(o, x, b, dy, dx, db));
    }
    nb_tensor *all[] = {x, b, dy, c, y, dx, db, dc, m, v, loss, xb, dl};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) nb_tensor_free(all[i]);
    nb_nbops_destroy(o);
    if (ev0) nb_event_destroy(ev0), nb_event_destroy(ev1);
    ev0 = ev1 = NULL;
}

/* the tape's rows: one step silu -> add -> add_channel -> mse (+ on CUDA a bf16 round trip
 * through the cast row), backward; per op kind and direction from the profiler, per step */
static void run_tape(nb_device *dev, int iters, int cuda) {
    nb_tape *t;
    CHECK(nb_tape_create_on(dev, &t));
    CHECK(nb_tape_set_profiling(t, 1));
    float *hx = malloc(NUMEL * 4), *hb = malloc(NUMEL * 4), *hc = malloc(N * C * 4);
    for (int64_t i = 0; i < NUMEL; i++) hx[i] = (float)(i % 2001) / 1000.0f - 1.0f, hb[i] = (float)(i % 997) / 997.0f;
    for (int i = 0; i < N * C; i++) hc[i] = (float)(i % 17) / 17.0f;
    for (int it = -2; it < iters; it++) {
        nb_tvar x, b, cc, tg, y1, y2, y3, yb, yf, l;
        CHECK(nb_tape_profile_reset(t));
        CHECK(nb_tape_reset(t));
        CHECK(nb_tape_input(t, 4, S4, hx, 1, &x));
        CHECK(nb_tape_input(t, 4, S4, hb, 1, &b));
        CHECK(nb_tape_input(t, 2, S2, hc, 1, &cc));
        CHECK(nb_tape_input(t, 4, S4, hb, 0, &tg));
        CHECK(nb_tape_silu(t, x, &y1));
        CHECK(nb_tape_add(t, y1, b, &y2));
        CHECK(nb_tape_add_channel(t, y2, cc, &y3));
        if (cuda) {
            CHECK(nb_tape_cast(t, y3, NB_BF16, &yb));
            CHECK(nb_tape_cast(t, yb, NB_F32, &yf));
            y3 = yf;
        }
        CHECK(nb_tape_mse(t, y3, tg, &l));
        CHECK(nb_tape_backward(t, l));
        nb_tape_profile_row rows[16];
        int nr;
        CHECK(nb_tape_profile_rows(t, rows, 16, &nr, NULL));
        if (it < 0) continue;
        for (int r = 0; r < nr; r++) {
            int f = -1;
            if (!strcmp(rows[r].name, "silu")) f = R_SILU_F;
            if (!strcmp(rows[r].name, "add")) f = R_ADD_F;
            if (!strcmp(rows[r].name, "add_channel")) f = R_ADDC_F;
            if (!strcmp(rows[r].name, "mse")) f = R_MSE_F;
            if (!strcmp(rows[r].name, "cast")) f = R_CAST_F; /* 2 calls each way: per call */
            if (f < 0) continue;
            double k = f == R_CAST_F ? 0.5 : 1.0;
            t_hand[f][it] = rows[r].ms[0] * k, t_hand[f + 1][it] = rows[r].ms[1] * k;
            n_hand[f] = n_hand[f + 1] = it + 1;
        }
    }
    if (n_hand[R_CAST_F]) /* the tape's cast row, each way averaged: same number for both rows */
        printf("(CUDA cast rows: the tape's f32->bf16 and bf16->f32 casts, forward and backward, "
               "per call)\n");
    free(hx), free(hb), free(hc);
    nb_tape_free(t);
    if (!cuda) { /* the CPU cast row converts with nb_convert */
        float *f = malloc(NUMEL * 4);
        uint16_t *h = malloc(NUMEL * 2);
        for (int64_t i = 0; i < NUMEL; i++) f[i] = (float)(i % 2001) / 1000.0f - 1.0f;
        for (int it = -2; it < iters; it++) {
            double t0 = now_ms();
            nb_convert(h, NB_BF16, f, NB_F32, (size_t)NUMEL);
            double t1 = now_ms();
            nb_convert(f, NB_F32, h, NB_BF16, (size_t)NUMEL);
            if (it >= 0) t_hand[R_CAST_F][it] = t1 - t0, t_hand[R_CAST_B][it] = now_ms() - t1;
        }
        n_hand[R_CAST_F] = n_hand[R_CAST_B] = iters;
        free(f), free(h);
    }
    /* nb_adam_step over the same number of parameters */
    nb_adam_config cfg = nb_adam_config_default();
    cfg.decoupled = 1, cfg.weight_decay = 0.01f, cfg.lr = 1e-6f;
    nb_adam *opt;
    CHECK(nb_adam_create(dev, NUMEL, &cfg, &opt));
    int64_t n = NUMEL;
    nb_tensor *p = mk(dev, 1, &n, 21), *g = mk(dev, 1, &n, 22);
    for (int it = -2; it < iters; it++) {
        CHECK(nb_device_synchronize(dev));
        double t0 = now_ms();
        CHECK(nb_adam_step(opt, p, g, 0));
        CHECK(nb_device_synchronize(dev));
        if (it >= 0) t_hand[R_ADAM][it] = now_ms() - t0;
    }
    n_hand[R_ADAM] = iters;
    nb_tensor_free(p), nb_tensor_free(g);
    nb_adam_destroy(opt);
}

static void bench(const char *devname, int iters) {
    nb_device *dev;
    CHECK(nb_device_open(devname, &dev));
    int cuda = nb_device_get_kind(dev) == NB_DEVICE_CUDA;
    memset(n_hand, 0, sizeof n_hand);
    run_nb(dev, iters);
    run_tape(dev, iters, cuda);
    printf("\n%s, f32 [%d,%d,%d,%d], median of %d (ms; GB/s from the bytes per element named)\n",
           nb_device_name(dev), N, C, H, W, iters);
    if (cuda)
        printf("(.nb ms and hand ms: device time by CUDA events; .nb wall: the call's wall-clock time "
               "with the device synchronised around it: host binding + launch + the wait)\n");
    printf("%-16s %5s %10s %8s %10s %8s %8s %10s\n", "op", "B/el", ".nb ms", "GB/s", "hand ms", "GB/s", "ratio",
           ".nb wall");
    for (int r = 0; r < R_COUNT; r++) {
        double a = median(t_nb[r], iters), w = median(t_wall[r], iters), gb = (double)row_bytes[r] * NUMEL * 1e-6;
        if (n_hand[r]) {
            double h = median(t_hand[r], n_hand[r]);
            printf("%-16s %5d %10.3f %8.1f %10.3f %8.1f %8.2f %10.3f\n", row_name[r], row_bytes[r], a, gb / a, h,
                   gb / h, a / h, w);
        } else {
            printf("%-16s %5d %10.3f %8.1f %10s %8s %8s %10.3f\n", row_name[r], row_bytes[r], a, gb / a, "-", "-",
                   "-", w);
        }
    }
    printf("(adamw: nb_adam_step runs this .nb op too, as a prepared call; %s)\n",
           cuda ? "silu fwd: the tape's CUDA row does as well" : "per segment");
    nb_device_close(dev);
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 9;
    const char *which = argc > 2 ? argv[2] : "all";
    if (iters < 1 || iters > MAXIT) {
        fprintf(stderr, "bench_nb_ops: iters must be 1..%d\n", MAXIT);
        return 2;
    }
    if (strcmp(which, "cuda")) bench("cpu", iters);
    if (strcmp(which, "cpu")) {
        if (nb_cuda_device_count() > 0) bench("cuda", iters);
        else if (!strcmp(which, "cuda")) {
            fprintf(stderr, "bench_nb_ops: no CUDA device\n");
            return 77;
        } else printf("\n(no CUDA device: CUDA half skipped)\n");
    }
    return 0;
}

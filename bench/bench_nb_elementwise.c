/* Are the tape's elementwise pieces fast enough when written in the kernel language? The issue
 * asks for .nb "where the generated code is fast enough". This compares, on CUDA and f32 at a
 * UNet shape [32,128,32,32]:
 *   - the hand-written CUDA rows of silu, add, add_channel (tape_cuda_basic.c), timed by the
 *     tape profiler (forward, and backward with first gradients stored, as the tape runs them);
 *   - the same functions in .nb called over the tape's buffers (nb_tensor_wrap, no copies):
 *     silu(x), add(a, b), add(x, c[N,C,1,1]) (broadcast = add_channel); forward calls write into
 *     an existing output (nb_call_result), backward calls (NB_MODE_BWD, the generated bwds
 *     kernels) add into zeroed gradient arrays (the call layer's gradients accumulate).
 * Results are checked against each other first (max abs difference printed).
 *   bench_nb_elementwise [iters [device]]   (device "cpu" checks the program itself) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/device.h"
#include "nabla/module.h"
#include "nabla/nn_tape.h"
#include "nabla/tensor.h"

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        nb_status s_ = (x);                                                                        \
        if (s_) {                                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, nb_last_error());         \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static const char nb_src[] =
    "[Differentiable] float silu(float x) { return x / (1.0 + exp(-x)); }\n"
    "[Differentiable] float add(float a, float b) { return a + b; }\n";

enum { N = 32, C = 128, H = 32, W = 32 };
#define NUMEL ((int64_t)N * C * H * W)

static nb_device *g_dev;
static nb_func *g_silu, *g_add;
static nb_tensor *tx, *tb, *tc, *ty, *tdy, *tdx, *tdb, *tdc;

static nb_tensor *dev_tensor(int ndim, const int64_t *shape, const float *host) {
    nb_tensor *t;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    if (host) CHECK(nb_tensor_from_host(g_dev, NB_F32, ndim, shape, host, &t));
    else CHECK(nb_tensor_zeros(g_dev, NB_F32, ndim, shape, &t));
    (void)n;
    return t;
}

/* which: 0 silu fwd, 1 silu bwd, 2 add fwd, 3 add bwd, 4 add_channel fwd, 5 add_channel bwd */
static void nb_op(int which) {
    nb_call *c;
    int bwd = which & 1, kind = which / 2;
    CHECK(nb_call_begin(kind == 0 ? g_silu : g_add, &c));
    if (bwd) CHECK(nb_call_set_mode(c, NB_MODE_BWD));
    CHECK(nb_call_arg(c, 0, tx));
    if (kind == 1) CHECK(nb_call_arg(c, 1, tb));
    if (kind == 2) CHECK(nb_call_arg(c, 1, tc));
    if (bwd) {
        CHECK(nb_call_dout(c, tdy));
        CHECK(nb_call_grad(c, 0, tdx));
        if (kind == 1) CHECK(nb_call_grad(c, 1, tdb));
        if (kind == 2) CHECK(nb_call_grad(c, 1, tdc));
        CHECK(nb_call_run(c, NULL));
    } else {
        CHECK(nb_call_result(c, ty));
        CHECK(nb_call_run(c, NULL));
    }
}

static double time_nb(int which, int iters) {
    nb_event *e0, *e1;
    for (int i = 0; i < 3; i++) nb_op(which);
    if (nb_device_get_kind(g_dev) != NB_DEVICE_CUDA) return 0;
    CHECK(nb_event_create(g_dev, &e0));
    CHECK(nb_event_create(g_dev, &e1));
    CHECK(nb_event_record(e0, nb_device_stream(g_dev)));
    for (int i = 0; i < iters; i++) nb_op(which);
    CHECK(nb_event_record(e1, nb_device_stream(g_dev)));
    CHECK(nb_event_synchronize(e1));
    float ms;
    CHECK(nb_event_elapsed_ms(e0, e1, &ms));
    nb_event_destroy(e0);
    nb_event_destroy(e1);
    return ms / iters;
}

static double maxdiff(const float *a, const float *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 50;
    if (nb_device_open(argc > 2 ? argv[2] : "cuda", &g_dev) != NB_OK) {
        printf("no CUDA device: %s\n", nb_last_error());
        return 77;
    }
    float *hx = malloc(sizeof(float) * NUMEL), *hb = malloc(sizeof(float) * NUMEL),
          *hdy = malloc(sizeof(float) * NUMEL), *hc = malloc(sizeof(float) * N * C),
          *r1 = malloc(sizeof(float) * NUMEL), *r2 = malloc(sizeof(float) * NUMEL);
    uint64_t s = 7;
    for (int64_t i = 0; i < NUMEL; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        hx[i] = (float)((s >> 40) % 2001) / 1000.0f - 1.0f;
        hb[i] = (float)((s >> 20) % 2001) / 1000.0f - 1.0f;
        hdy[i] = (float)((s >> 8) % 2001) / 1000.0f - 1.0f;
    }
    for (int i = 0; i < N * C; i++) hc[i] = (float)(i % 17) / 17.0f;
    int64_t shp[4] = {N, C, H, W}, cs[4] = {N, C, 1, 1};
    tx = dev_tensor(4, shp, hx), tb = dev_tensor(4, shp, hb), tc = dev_tensor(4, cs, hc);
    ty = dev_tensor(4, shp, NULL), tdy = dev_tensor(4, shp, hdy), tdx = dev_tensor(4, shp, NULL);
    tdb = dev_tensor(4, shp, NULL), tdc = dev_tensor(4, cs, NULL);
    nb_module *m;
    CHECK(nb_module_load_source(g_dev, "tape_ew.nb", nb_src, NULL, &m));
    CHECK(nb_module_func(m, "silu", &g_silu));
    CHECK(nb_module_func(m, "add", &g_add));

    /* correctness: .nb silu vs a host loop; add_channel bwd dc vs host sums */
    nb_op(0);
    CHECK(nb_tensor_to_host(ty, r1, sizeof(float) * NUMEL));
    for (int64_t i = 0; i < NUMEL; i++) r2[i] = hx[i] / (1.0f + expf(-hx[i]));
    printf("check: .nb silu vs host max diff %.3g\n", maxdiff(r1, r2, NUMEL));
    nb_op(5);
    float dc[N * C], rc[N * C];
    CHECK(nb_tensor_to_host(tdc, dc, sizeof dc));
    for (int i = 0; i < N * C; i++) {
        double acc = 0;
        for (int j = 0; j < H * W; j++) acc += hdy[(int64_t)i * H * W + j];
        rc[i] = (float)acc;
    }
    printf("check: .nb add_channel dc vs host max diff %.3g (max |dc| %.3g)\n", maxdiff(dc, rc, N * C),
           maxdiff(rc, (float[N * C]){0}, N * C));

    const char *names[6] = {"silu fwd", "silu bwd", "add fwd", "add bwd", "add_channel fwd",
                            "add_channel bwd"};
    double nbt[6];
    for (int w = 0; w < 6; w++) nbt[w] = time_nb(w, iters);

    /* the hand-written rows through a tape, per op kind from the profiler */
    nb_tape *t;
    CHECK(nb_tape_create_on(g_dev, &t));
    CHECK(nb_tape_set_profiling(t, 1));
    for (int it = 0; it < iters + 3; it++) {
        if (it == 3) CHECK(nb_tape_profile_reset(t));
        nb_tvar x, b, cc, y1, y2, y3, tg, l;
        CHECK(nb_tape_reset(t));
        CHECK(nb_tape_input(t, 4, shp, hx, 1, &x));
        CHECK(nb_tape_input(t, 4, shp, hb, 1, &b));
        CHECK(nb_tape_input(t, 2, (int64_t[]){N, C}, hc, 1, &cc));
        CHECK(nb_tape_input(t, 4, shp, hdy, 0, &tg));
        CHECK(nb_tape_silu(t, x, &y1));
        CHECK(nb_tape_add(t, y1, b, &y2));
        CHECK(nb_tape_add_channel(t, y2, cc, &y3));
        CHECK(nb_tape_mse(t, y3, tg, &l));
        CHECK(nb_tape_backward(t, l));
    }
    nb_tape_profile_row rows[16];
    int nr;
    int64_t passes;
    CHECK(nb_tape_profile_rows(t, rows, 16, &nr, &passes));
    double gb = NUMEL * 4.0 / 1e9;
    /* bytes moved by each (minimum: reads + writes of the big tensors) */
    const double traffic[6] = {2 * gb, 3 * gb, 3 * gb, 3 * gb, 2 * gb, 2 * gb};
    printf("op               .nb ms   hand ms   (.nb / hand)   floor ms at 3000 GB/s\n");
    for (int w = 0; w < 6; w++) {
        const char *kind = w < 2 ? "silu" : w < 4 ? "add" : "add_channel";
        double hand = -1;
        for (int r = 0; r < nr; r++)
            if (!strcmp(rows[r].name, kind)) hand = rows[r].ms[w & 1] / (double)passes;
        printf("%-16s %7.4f  %7.4f   %5.2fx          %.4f\n", names[w], nbt[w], hand,
               hand > 0 ? nbt[w] / hand : 0.0, traffic[w] / 3000.0 * 1e3);
    }
    printf("(.nb backward: gradients accumulate into zeroed arrays (+ the zeroing the tape would "
           "need, not timed); hand: first contributions stored)\n");
    nb_tape_free(t);
    nb_module_free(m);
    nb_device_close(g_dev);
    return 0;
}

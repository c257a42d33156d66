/* Autodiff benchmarks over arrays (public API only; the cases of the autodiff issue, next to
 * bench/torch/bench_autodiff.py):
 *
 *   1. fused: f(w[16], b[16], x) = sum_k tanh(w_k * x + b_k) * w_k over 2^N values of x, w and b
 *      shared (f32[16] arrays broadcast to every thread); forward (primal call writing y) +
 *      backward (bwds call: gradients of w, b — reduced over all threads — and x).
 *   2. memory-bound: dot64(w[64], x[64]) with w shared and x an f32[2^(N-2), 64] array (call rank
 *      1); forward + backward (gradients of w and x).
 *
 * A step is: zero the gradient arrays (nb_tensor_fill_bytes: gradients accumulate), the primal
 * call (bwds returns no result), the bwds call. Each part and the whole step are timed with device
 * events; median of --reps reps after warm-up. The memory floor is the bytes that must move
 * (fused: x read + y written + dx written = 12 B/elem; dot: x read twice + dx written = 3 x 256 B
 * per row) over the copy bandwidth measured in the same run (nb_memcpy_d2d of a 1 GiB buffer,
 * read + write bytes). The last step's outputs are checked against a double-precision CPU
 * reference before anything is reported (exit 1 on a relative error > 1e-3).
 *
 *   usage: bench_autodiff [cuda|cpu|auto] [--cpu] [--log2n N] [--reps R]
 *          (default: cuda, N = 24, R = 20; smoke test: bench_autodiff --cpu --log2n 16)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nabla/nabla.h"

#define CHECK(x)                                                                               \
    do {                                                                                       \
        nb_status s_ = (x);                                                                    \
        if (s_ != NB_OK) {                                                                     \
            fprintf(stderr, "bench_autodiff: %s failed: %s\n", #x, nb_last_error());           \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static const char *SRC =
    "[Differentiable]\n"
    "float f(float w[16], float b[16], float x) {\n"
    "    float s = 0;\n"
    "    for (int k = 0; k < 16; k++) s += tanh(w[k] * x + b[k]) * w[k];\n"
    "    return s;\n"
    "}\n"
    "[Differentiable]\n"
    "float dot64(float w[64], float x[64]) {\n"
    "    float s = 0;\n"
    "    for (int k = 0; k < 64; k++) s += w[k] * x[k];\n"
    "    return s;\n"
    "}\n";

#define TOL 1e-3

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float uniform(float lo, float hi) { /* xorshift64*, deterministic */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 0x2545F4914F6CDD1Dull;
    return lo + (hi - lo) * (float)((double)(r >> 40) / (double)(1ull << 24));
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}
static float median(float *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

/* |got - ref| / scale, scale = max(|ref|, abs_sum): for a reduced gradient abs_sum is the sum of
 * the absolute values of its terms (what float accumulation is accurate relative to). */
static double rel_err(double got, double ref, double abs_sum) {
    double scale = fabs(ref) > abs_sum ? fabs(ref) : abs_sum;
    if (scale < 1e-30) scale = 1e-30;
    return fabs(got - ref) / scale;
}

typedef struct timing {
    float zero, fwd, bwd, step; /* medians, ms */
} timing;

/* ---- case 1: fused tanh-sum ------------------------------------------------------------------ */

/* fused = 1: one call does forward and backward (a bwds call that also writes the result: the
 * f__bwdr kernel, when dL/dy is known before the forward runs, here dL/dy = 1); else a primal
 * call writes y and a bwds call (which recomputes what it needs) the gradients. */
static int g_fused;

typedef struct fused {
    nb_func *f;
    nb_tensor *w, *b, *x, *y, *dw, *db, *dx;
} fused;

static void fused_zero(fused *p) {
    CHECK(nb_tensor_fill_bytes(p->dw, 0));
    CHECK(nb_tensor_fill_bytes(p->db, 0));
    CHECK(nb_tensor_fill_bytes(p->dx, 0));
}
static void fused_fwd(fused *p) {
    if (g_fused) return;
    nb_call *c = NULL;
    CHECK(nb_call_begin(p->f, &c));
    CHECK(nb_call_arg(c, 0, p->w));
    CHECK(nb_call_arg(c, 1, p->b));
    CHECK(nb_call_arg(c, 2, p->x));
    CHECK(nb_call_result(c, p->y));
    CHECK(nb_call_run(c, NULL));
}
static void fused_bwd(fused *p) {
    nb_call *c = NULL;
    CHECK(nb_call_begin(p->f, &c));
    CHECK(nb_call_set_mode(c, NB_MODE_BWD));
    CHECK(nb_call_arg(c, 0, p->w));
    CHECK(nb_call_arg(c, 1, p->b));
    CHECK(nb_call_arg(c, 2, p->x));
    CHECK(nb_call_grad(c, 0, p->dw));
    CHECK(nb_call_grad(c, 1, p->db));
    CHECK(nb_call_grad(c, 2, p->dx));
    if (g_fused) CHECK(nb_call_result(c, p->y));
    CHECK(nb_call_run(c, NULL));
}

/* ---- case 2: dot64 ---------------------------------------------------------------------------- */

typedef struct dot {
    nb_func *f;
    nb_tensor *w, *x, *y, *dw, *dx;
    int want_dx; /* 0: the case (x needs no gradient), 1: dx too */
} dot;

static void dot_zero(dot *p) {
    CHECK(nb_tensor_fill_bytes(p->dw, 0));
    if (p->want_dx) CHECK(nb_tensor_fill_bytes(p->dx, 0));
}
static void dot_fwd(dot *p) {
    if (g_fused) return;
    nb_call *c = NULL;
    CHECK(nb_call_begin(p->f, &c));
    CHECK(nb_call_arg(c, 0, p->w));
    CHECK(nb_call_arg(c, 1, p->x));
    CHECK(nb_call_result(c, p->y));
    CHECK(nb_call_run(c, NULL));
}
static void dot_bwd(dot *p) {
    nb_call *c = NULL;
    CHECK(nb_call_begin(p->f, &c));
    CHECK(nb_call_set_mode(c, NB_MODE_BWD));
    CHECK(nb_call_arg(c, 0, p->w));
    CHECK(nb_call_arg(c, 1, p->x));
    CHECK(nb_call_grad(c, 0, p->dw));
    if (p->want_dx) CHECK(nb_call_grad(c, 1, p->dx));
    if (g_fused) CHECK(nb_call_result(c, p->y));
    CHECK(nb_call_run(c, NULL));
}

/* ---- timing ----------------------------------------------------------------------------------- */

typedef void (*part_fn)(void *);

static timing time_step(nb_device *dev, void *p, part_fn zero, part_fn fwd, part_fn bwd, int reps) {
    nb_event *e[4];
    for (int i = 0; i < 4; i++) CHECK(nb_event_create(dev, &e[i]));
    for (int r = 0; r < 3; r++) { /* warm-up: compiles, faults pages in */
        zero(p);
        fwd(p);
        bwd(p);
    }
    CHECK(nb_device_synchronize(dev));
    float *tz = malloc(sizeof(float) * 4 * (size_t)reps);
    float *tf = tz + reps, *tb = tf + reps, *ts = tb + reps;
    for (int r = 0; r < reps; r++) {
        CHECK(nb_event_record(e[0], NULL));
        zero(p);
        CHECK(nb_event_record(e[1], NULL));
        fwd(p);
        CHECK(nb_event_record(e[2], NULL));
        bwd(p);
        CHECK(nb_event_record(e[3], NULL));
        CHECK(nb_event_synchronize(e[3]));
        CHECK(nb_event_elapsed_ms(e[0], e[1], &tz[r]));
        CHECK(nb_event_elapsed_ms(e[1], e[2], &tf[r]));
        CHECK(nb_event_elapsed_ms(e[2], e[3], &tb[r]));
        CHECK(nb_event_elapsed_ms(e[0], e[3], &ts[r]));
    }
    timing t = {median(tz, reps), median(tf, reps), median(tb, reps), median(ts, reps)};
    free(tz);
    for (int i = 0; i < 4; i++) nb_event_destroy(e[i]);
    return t;
}

/* Copy bandwidth (GB/s, read + write bytes) of nb_memcpy_d2d between two `bytes` buffers. */
static double copy_gbs(nb_device *dev, size_t bytes, int reps) {
    nb_buffer *src = NULL, *dst = NULL;
    CHECK(nb_buffer_alloc(dev, bytes, &src));
    CHECK(nb_buffer_alloc(dev, bytes, &dst));
    CHECK(nb_memset(dev, nb_buffer_ptr(src), 1, bytes));
    CHECK(nb_memset(dev, nb_buffer_ptr(dst), 0, bytes));
    nb_event *a = NULL, *b = NULL;
    CHECK(nb_event_create(dev, &a));
    CHECK(nb_event_create(dev, &b));
    for (int r = 0; r < 3; r++) CHECK(nb_memcpy_d2d(dev, nb_buffer_ptr(dst), nb_buffer_ptr(src), bytes));
    float *t = malloc(sizeof(float) * (size_t)reps);
    for (int r = 0; r < reps; r++) {
        CHECK(nb_event_record(a, NULL));
        CHECK(nb_memcpy_d2d(dev, nb_buffer_ptr(dst), nb_buffer_ptr(src), bytes));
        CHECK(nb_event_record(b, NULL));
        CHECK(nb_event_synchronize(b));
        CHECK(nb_event_elapsed_ms(a, b, &t[r]));
    }
    double ms = median(t, reps);
    free(t);
    nb_event_destroy(a);
    nb_event_destroy(b);
    nb_buffer_release(src);
    nb_buffer_release(dst);
    return 2.0 * (double)bytes / (ms * 1e-3) / 1e9;
}

static void w_fused_zero(void *p) { fused_zero(p); }
static void w_fused_fwd(void *p) { fused_fwd(p); }
static void w_fused_bwd(void *p) { fused_bwd(p); }
static void w_dot_zero(void *p) { dot_zero(p); }
static void w_dot_fwd(void *p) { dot_fwd(p); }
static void w_dot_bwd(void *p) { dot_bwd(p); }

/* Rows checked element by element (y, dx): up to this many, spread over the whole array. */
#define SAMPLE 4096

int main(int argc, char **argv) {
    const char *spec = "cuda";
    int log2n = 24, reps = 20, log2n_set = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--log2n") && i + 1 < argc) {
            log2n = atoi(argv[++i]);
            log2n_set = 1;
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cpu")) spec = "cpu";
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: bench_autodiff [cuda|cpu|auto] [--cpu] [--log2n N] [--reps R]\n");
            return 2;
        } else spec = argv[i];
    }
    nb_device *dev = NULL;
    CHECK(nb_device_open(spec, &dev));
    int cuda = nb_device_get_kind(dev) == NB_DEVICE_CUDA;
    if (!cuda && !log2n_set) log2n = 16;
    if (log2n < 4 || log2n > 28 || reps < 1) {
        fprintf(stderr, "bench_autodiff: --log2n must be in 4..28 and --reps >= 1\n");
        return 2;
    }
    nb_module *m = NULL;
    CHECK(nb_module_load_source(dev, "bench_autodiff.nb", SRC, NULL, &m));
    printf("bench_autodiff on %s (%s), fused n = 2^%d, dot rows = 2^%d, median of %d reps\n\n",
           nb_device_name(dev), nb_device_get_info(dev)->name, log2n, log2n - 2, reps);

    /* Copy bandwidth in the same run. */
    size_t copy_bytes = cuda ? (size_t)1 << 30 : (size_t)1 << 26;
    double gbs = copy_gbs(dev, copy_bytes, reps);
    printf("copy bandwidth: %.1f GB/s (nb_memcpy_d2d of %zu MiB, read + write bytes)\n\n", gbs,
           copy_bytes >> 20);

    int fail = 0;

    /* ---- 1. fused ---- */
    int64_t n = (int64_t)1 << log2n, s16 = 16;
    float hw[16], hb[16];
    for (int k = 0; k < 16; k++) {
        hw[k] = uniform(-1, 1);
        hb[k] = uniform(-0.5f, 0.5f);
    }
    float *hx = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) hx[i] = uniform(-2, 2);
    fused F = {0};
    CHECK(nb_module_func(m, "f", &F.f));
    CHECK(nb_tensor_from_host(dev, NB_F32, 1, &s16, hw, &F.w));
    CHECK(nb_tensor_from_host(dev, NB_F32, 1, &s16, hb, &F.b));
    CHECK(nb_tensor_from_host(dev, NB_F32, 1, &n, hx, &F.x));
    CHECK(nb_tensor_empty(dev, NB_F32, 1, &n, &F.y));
    CHECK(nb_tensor_zeros(dev, NB_F32, 1, &s16, &F.dw));
    CHECK(nb_tensor_zeros(dev, NB_F32, 1, &s16, &F.db));
    CHECK(nb_tensor_zeros(dev, NB_F32, 1, &n, &F.dx));
    timing tfv[2];
    int fail_fv[2] = {0, 0};
    for (int v = 0; v < 2; v++) {
        g_fused = v;
        CHECK(nb_tensor_fill_bytes(F.y, 0xff)); /* (NaN: a result not written fails the check) */
        tfv[v] = time_step(dev, &F, w_fused_zero, w_fused_fwd, w_fused_bwd, reps);
        /* Check the last step (zeroed gradients, then one fwd + one bwd). */
        double t0 = now();
        float *gy = malloc(sizeof(float) * (size_t)n * 2), *gdx = gy + n, gdw[16], gdb[16];
        CHECK(nb_tensor_to_host(F.y, gy, sizeof(float) * (size_t)n));
        CHECK(nb_tensor_to_host(F.dx, gdx, sizeof(float) * (size_t)n));
        CHECK(nb_tensor_to_host(F.dw, gdw, sizeof gdw));
        CHECK(nb_tensor_to_host(F.db, gdb, sizeof gdb));
        double rdw[16] = {0}, rdb[16] = {0}, adw[16] = {0}, adb[16] = {0};
        double err_y = 0, err_dx = 0, err_dw = 0, err_db = 0;
        int64_t stride = n / SAMPLE > 0 ? n / SAMPLE : 1;
        for (int64_t i = 0; i < n; i++) {
            double x = hx[i], y = 0, ay = 0, dx = 0, adx = 0;
            int sample = i % stride == 0 || i == n - 1;
            for (int k = 0; k < 16; k++) {
                double w = hw[k], t = tanh(w * x + (double)hb[k]), s = 1 - t * t;
                double gw = s * x * w + t, gb = s * w;
                rdw[k] += gw;
                adw[k] += fabs(gw);
                rdb[k] += gb;
                adb[k] += fabs(gb);
                if (sample) {
                    y += t * w;
                    ay += fabs(t * w);
                    dx += s * w * w;
                    adx += fabs(s * w * w);
                }
            }
            if (sample) {
                double e1 = rel_err(gy[i], y, ay), e2 = rel_err(gdx[i], dx, adx);
                if (e1 > err_y) err_y = e1;
                if (e2 > err_dx) err_dx = e2;
            }
        }
        for (int k = 0; k < 16; k++) {
            double e1 = rel_err(gdw[k], rdw[k], adw[k]), e2 = rel_err(gdb[k], rdb[k], adb[k]);
            if (e1 > err_dw) err_dw = e1;
            if (e2 > err_db) err_db = e2;
        }
        int ok = err_y <= TOL && err_dx <= TOL && err_dw <= TOL && err_db <= TOL;
        printf("fused [%s] check vs double CPU (%.1f s): max rel err y %.2e, dx %.2e, dw %.2e, db %.2e "
               "(y/dx at %lld sampled elems; dw/db all 16, over all %lld threads) %s\n",
               v ? "one call" : "two calls", now() - t0, err_y, err_dx, err_dw, err_db, (long long)((n + stride - 1) / stride),
               (long long)n, ok ? "OK" : "FAILED");
        printf("  dw[0] = %.6g (ref %.6g), db[0] = %.6g (ref %.6g), dx[0] = %.6g\n", gdw[0], rdw[0],
               gdb[0], rdb[0], gdx[0]);
        if (!ok) fail = fail_fv[v] = 1;
        free(gy);
    }
    nb_tensor_free(F.w);
    nb_tensor_free(F.b);
    nb_tensor_free(F.x);
    nb_tensor_free(F.y);
    nb_tensor_free(F.dw);
    nb_tensor_free(F.db);
    nb_tensor_free(F.dx);
    free(hx);

    /* ---- 2. dot64 ---- */
    int64_t rows = (int64_t)1 << (log2n - 2), s64 = 64, xs[2] = {rows, 64};
    float hw64[64];
    for (int k = 0; k < 64; k++) hw64[k] = uniform(-1, 1);
    float *hx2 = malloc(sizeof(float) * (size_t)rows * 64);
    for (int64_t i = 0; i < rows * 64; i++) hx2[i] = uniform(-1, 1);
    dot D = {0};
    CHECK(nb_module_func(m, "dot64", &D.f));
    CHECK(nb_tensor_from_host(dev, NB_F32, 1, &s64, hw64, &D.w));
    CHECK(nb_tensor_from_host(dev, NB_F32, 2, xs, hx2, &D.x));
    CHECK(nb_tensor_empty(dev, NB_F32, 1, &rows, &D.y));
    CHECK(nb_tensor_zeros(dev, NB_F32, 1, &s64, &D.dw));
    CHECK(nb_tensor_zeros(dev, NB_F32, 2, xs, &D.dx));
    timing tdv[4];
    int fail_dv[4] = {0, 0, 0, 0};
    for (int v = 0; v < 4; v++) { /* v & 1: fused; v & 2: dx too */
        g_fused = v & 1;
        D.want_dx = (v & 2) != 0;
        CHECK(nb_tensor_fill_bytes(D.y, 0xff));
        CHECK(nb_tensor_fill_bytes(D.dx, 0));
        tdv[v] = time_step(dev, &D, w_dot_zero, w_dot_fwd, w_dot_bwd, reps);
        double t0 = now();
        float *gy = malloc(sizeof(float) * (size_t)rows), gdw[64];
        float *gdx = malloc(sizeof(float) * (size_t)rows * 64);
        CHECK(nb_tensor_to_host(D.y, gy, sizeof(float) * (size_t)rows));
        CHECK(nb_tensor_to_host(D.dx, gdx, sizeof(float) * (size_t)rows * 64));
        CHECK(nb_tensor_to_host(D.dw, gdw, sizeof gdw));
        double rdw[64] = {0}, adw[64] = {0}, err_y = 0, err_dx = 0, err_dw = 0;
        int64_t stride = rows / SAMPLE > 0 ? rows / SAMPLE : 1;
        for (int64_t i = 0; i < rows; i++) {
            const float *xr = hx2 + i * 64;
            for (int k = 0; k < 64; k++) {
                rdw[k] += xr[k];
                adw[k] += fabs(xr[k]);
            }
            if (i % stride == 0 || i == rows - 1) {
                double y = 0, ay = 0;
                for (int k = 0; k < 64; k++) {
                    y += (double)hw64[k] * xr[k];
                    ay += fabs((double)hw64[k] * xr[k]);
                    double e = rel_err(gdx[i * 64 + k], D.want_dx ? hw64[k] : 0.0, 0);
                    if (e > err_dx) err_dx = e;
                }
                double e = rel_err(gy[i], y, ay);
                if (e > err_y) err_y = e;
            }
        }
        for (int k = 0; k < 64; k++) {
            double e = rel_err(gdw[k], rdw[k], adw[k]);
            if (e > err_dw) err_dw = e;
        }
        int ok = err_y <= TOL && err_dx <= TOL && err_dw <= TOL;
        printf("dot64 [%s, %s] check vs double CPU (%.1f s): max rel err y %.2e, dx %.2e, dw %.2e "
               "(y/dx at %lld sampled rows; dw all 64, over all %lld rows) %s\n",
               v & 2 ? "dw + dx" : "dw only", v & 1 ? "one call" : "two calls", now() - t0, err_y, err_dx, err_dw, (long long)((rows + stride - 1) / stride),
               (long long)rows, ok ? "OK" : "FAILED");
        printf("  dw[0] = %.6g (ref %.6g), dx[0][0] = %.6g (ref %.6g)\n\n", gdw[0], rdw[0], gdx[0],
               hw64[0]);
        if (!ok) fail = fail_dv[v] = 1;
        free(gy);
        free(gdx);
    }
    nb_tensor_free(D.w);
    nb_tensor_free(D.x);
    nb_tensor_free(D.y);
    nb_tensor_free(D.dw);
    nb_tensor_free(D.dx);
    free(hx2);
    nb_module_free(m);
    nb_device_close(dev);

    /* A case whose check failed gets no time: a fast wrong answer is not a result. */
    if (fail)
        fprintf(stderr, "bench_autodiff: a case exceeded max rel err %g; its times are not reported\n",
                TOL);

    /* floors: the bytes the step must move over the copy bandwidth. fused: x read, y and dx written
     * (12 B/elem). dot, two calls: x read by each (+ dx written); one call: x read once (+ dx). */
    double fl_fused = 12.0 * (double)n / (gbs * 1e9) * 1e3;
    double xb = 256.0 * (double)rows, yb = 4.0 * (double)rows;
    printf("%-38s %8s %8s %8s %8s | %8s %7s\n", "case (median ms)", "zero", "fwd", "bwd", "step", "floor", "x floor");
    for (int v = 0; v < 2; v++) {
        char name[64];
        snprintf(name, sizeof name, "fused tanh-sum 2^%d, %s", log2n, v ? "one call" : "two calls");
        if (fail_fv[v]) printf("%-38s FAILED\n", name);
        else printf("%-38s %8.3f %8.3f %8.3f %8.3f | %8.3f %6.1fx\n", name, tfv[v].zero, tfv[v].fwd, tfv[v].bwd, tfv[v].step,
                    fl_fused, tfv[v].step / fl_fused);
    }
    for (int v = 0; v < 4; v++) {
        char name[64];
        snprintf(name, sizeof name, "dot64 2^%d rows, %s, %s", log2n - 2, v & 2 ? "dw+dx" : "dw", v & 1 ? "one call" : "two calls");
        double bytes = (v & 1 ? xb : 2 * xb) + yb + (v & 2 ? xb : 0);
        double fl = bytes / (gbs * 1e9) * 1e3;
        if (fail_dv[v]) printf("%-38s FAILED\n", name);
        else printf("%-38s %8.3f %8.3f %8.3f %8.3f | %8.3f %6.1fx\n", name, tdv[v].zero, tdv[v].fwd, tdv[v].bwd, tdv[v].step, fl,
                    tdv[v].step / fl);
    }
    printf("(step = zero the gradients + the call(s); floor = bytes moved at %.1f GB/s; one call = a bwds call that also "
           "writes y, with dL/dy = 1)\n", gbs);
    return fail ? 1 : 0;
}

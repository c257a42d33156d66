/* Vectorized-call benchmarks (public API only):
 *
 *   1. warm call overhead: neg(x) over a 1-element tensor, begin/arg/run/free in a loop (µs/call),
 *      next to its floor: a raw launch of an empty kernel taking the same-size parameter block
 *      (nb_jit_launch_*) and a 1-element nb_tensor_empty + free
 *   2. add(a, b) over 2^26 floats: ms and GB/s (12 bytes moved per element) next to a
 *      device-to-device copy of the same 2^26 floats measured in the same run (8 bytes/element)
 *   3. square.nb: cold compile (empty cache directory) and warm-cache load, each measured in a
 *      fresh process from nb_module_load to the first result on the host
 *
 *   usage: bench_call [cpu|cuda|auto] [--log2n N]        (default: auto, N = 26)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "jit/jit.h" /* the launch floor: a raw launch of an empty kernel, for comparison */
#include "nabla/nabla.h"

#define CHECK(x)                                                                               \
    do {                                                                                       \
        nb_status s_ = (x);                                                                    \
        if (s_ != NB_OK) {                                                                     \
            fprintf(stderr, "bench_call: %s failed: %s\n", #x, nb_last_error());               \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *SRC =
    "float neg(float x) { return -x; }\n"
    "float add(float a, float b) { return a + b; }\n"
    "[Differentiable]\nfloat square(float x) { return x * x; }\n";

/* Child mode: time load + first call of square in this (fresh) process; prints seconds. */
static int child(const char *spec) {
    double t0 = now();
    nb_device *dev = NULL;
    CHECK(nb_device_open(spec, &dev));
    double t1 = now();
    nb_module *m = NULL;
    nb_func *f = NULL;
    CHECK(nb_module_load_source(dev, "square.nb", SRC, NULL, &m));
    CHECK(nb_module_func(m, "square", &f));
    float x = 3, y = 0;
    int64_t one[1] = {1};
    nb_tensor *tx = NULL, *ty = NULL;
    CHECK(nb_tensor_from_host(dev, NB_F32, 1, one, &x, &tx));
    nb_tensor *args[1] = {tx};
    CHECK(nb_func_call(f, 1, args, &ty));
    CHECK(nb_tensor_to_host(ty, &y, sizeof y));
    double t2 = now();
    if (y != 9) {
        fprintf(stderr, "bench_call: square(3) = %g\n", y);
        return 1;
    }
    printf("%.6f %.6f\n", t2 - t1, t1 - t0);
    nb_tensor_free(tx);
    nb_tensor_free(ty);
    nb_module_free(m);
    nb_device_close(dev);
    return 0;
}

static double run_child(const char *self, const char *spec, const char *cache_dir) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "NABLA_CACHE_DIR='%s' '%s' --child '%s'", cache_dir, self, spec);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    double load = -1, open_s = 0;
    if (fscanf(p, "%lf %lf", &load, &open_s) != 2) load = -1;
    if (pclose(p) != 0) return -1;
    return load;
}

static double time_calls(nb_func *f, nb_tensor *x, nb_device *dev, int iters) {
    CHECK(nb_device_synchronize(dev));
    double t0 = now();
    for (int i = 0; i < iters; i++) {
        nb_call *c = NULL;
        nb_tensor *y = NULL;
        CHECK(nb_call_begin(f, &c));
        CHECK(nb_call_arg(c, 0, x));
        CHECK(nb_call_run(c, &y));
        nb_tensor_free(y);
    }
    CHECK(nb_device_synchronize(dev));
    return (now() - t0) / iters;
}

int main(int argc, char **argv) {
    const char *spec = "auto";
    int log2n = 26;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--child") && i + 1 < argc) return child(argv[i + 1]);
        if (!strcmp(argv[i], "--log2n") && i + 1 < argc) log2n = atoi(argv[++i]);
        else spec = argv[i];
    }
    nb_device *dev = NULL;
    CHECK(nb_device_open(spec, &dev));
    int cuda = nb_device_get_kind(dev) == NB_DEVICE_CUDA;
    nb_module *m = NULL;
    nb_func *neg = NULL, *add = NULL;
    CHECK(nb_module_load_source(dev, "bench.nb", SRC, NULL, &m));
    CHECK(nb_module_func(m, "neg", &neg));
    CHECK(nb_module_func(m, "add", &add));
    printf("bench_call on %s (%s)\n\n", nb_device_name(dev), nb_device_get_info(dev)->name);

    /* 1. Warm call overhead. */
    float one = 1;
    int64_t s1[1] = {1};
    nb_tensor *x1 = NULL;
    CHECK(nb_tensor_from_host(dev, NB_F32, 1, s1, &one, &x1));
    time_calls(neg, x1, dev, 200); /* compile + warm up */
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        double t = time_calls(neg, x1, dev, 20000);
        if (t < best) best = t;
    }
    nb_tensor_free(x1);

    /* The floor under it: the same launch path with an empty kernel, and the result allocation. */
    const char *empty_src = cuda ? "struct P { char b[64]; };\n"
                                   "extern \"C\" __global__ void nb_empty(P p) { }\n"
                                 : "#include <stdint.h>\n"
                                   "void nb_empty(const void *p, int64_t b, int64_t e) { (void)p; (void)b; (void)e; }\n";
    nb_jit_kernel *ek = NULL;
    CHECK(nb_jit_load(dev, empty_src, "nb_empty", NULL, &ek));
    unsigned char blk[64] = {0};
    double launch_best = 1e9, alloc_best = 1e9;
    for (int r = 0; r < 5; r++) {
        CHECK(nb_device_synchronize(dev));
        double t0 = now();
        for (int i = 0; i < 20000; i++) {
            if (cuda) CHECK(nb_jit_launch_cuda(ek, blk, sizeof blk, 1, NULL));
            else CHECK(nb_jit_launch_cpu(ek, blk, 1));
        }
        CHECK(nb_device_synchronize(dev));
        double t1 = now();
        for (int i = 0; i < 20000; i++) {
            nb_tensor *t = NULL;
            CHECK(nb_tensor_empty(dev, NB_F32, 1, s1, &t));
            nb_tensor_free(t);
        }
        double t2 = now();
        if ((t1 - t0) / 20000 < launch_best) launch_best = (t1 - t0) / 20000;
        if ((t2 - t1) / 20000 < alloc_best) alloc_best = (t2 - t1) / 20000;
    }

    /* 2. add over 2^log2n floats vs a D2D copy of the same floats. */
    int64_t n = (int64_t)1 << log2n;
    nb_tensor *a = NULL, *b = NULL, *y = NULL, *cp = NULL;
    CHECK(nb_tensor_zeros(dev, NB_F32, 1, &n, &a));
    CHECK(nb_tensor_zeros(dev, NB_F32, 1, &n, &b));
    CHECK(nb_tensor_empty(dev, NB_F32, 1, &n, &cp));
    CHECK(nb_tensor_empty(dev, NB_F32, 1, &n, &y));
    nb_tensor *args[2] = {a, b};
    double add_best = 1e9, copy_best = 1e9;
    for (int r = 0; r < 12; r++) {
        CHECK(nb_device_synchronize(dev));
        double t0 = now();
        nb_call *c = NULL;
        CHECK(nb_call_begin(add, &c));
        CHECK(nb_call_arg(c, 0, args[0]));
        CHECK(nb_call_arg(c, 1, args[1]));
        CHECK(nb_call_result(c, y));
        CHECK(nb_call_run(c, NULL));
        CHECK(nb_device_synchronize(dev));
        double t1 = now();
        CHECK(nb_memcpy_d2d(dev, nb_tensor_data(cp), nb_tensor_data(a), (size_t)n * 4));
        CHECK(nb_device_synchronize(dev));
        double t2 = now();
        if (r >= 2) { /* the first runs compile and fault pages in */
            if (t1 - t0 < add_best) add_best = t1 - t0;
            if (t2 - t1 < copy_best) copy_best = t2 - t1;
        }
    }
    double add_gbs = 12.0 * (double)n / add_best / 1e9, copy_gbs = 8.0 * (double)n / copy_best / 1e9;
    nb_tensor_free(a);
    nb_tensor_free(b);
    nb_tensor_free(y);
    nb_tensor_free(cp);
    nb_module_free(m);

    /* 3. Cold compile and warm-cache load, each in a fresh process. */
    char dir[] = "/tmp/nb_bench_cache_XXXXXX";
    double cold = -1, warm = -1;
    if (mkdtemp(dir)) {
        cold = run_child(argv[0], nb_device_name(dev), dir);
        warm = run_child(argv[0], nb_device_name(dev), dir);
        char rm[256];
        snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
        if (system(rm) != 0) fprintf(stderr, "bench_call: could not remove %s\n", dir);
    }

    printf("%-44s %14s\n", "measure", "value");
    printf("%-44s %11.2f us\n", "warm call, neg(f32[1]), begin..run+free", best * 1e6);
    printf("%-44s %11.2f us\n", "  floor: raw launch of an empty kernel", launch_best * 1e6);
    printf("%-44s %11.2f us\n", "  floor: nb_tensor_empty(f32[1]) + free", alloc_best * 1e6);
    printf("%-44s %11.2f us\n", "  => call layer's own share",
           (best - launch_best - alloc_best) * 1e6);
    printf("%-44s %11.3f ms  (%.1f GB/s, 12 B/elem)\n", "add(f32[2^N], f32[2^N]) into y", add_best * 1e3,
           add_gbs);
    printf("%-44s %11.3f ms  (%.1f GB/s, 8 B/elem)\n", cuda ? "D2D copy f32[2^N] (same run)"
                                                           : "memcpy f32[2^N], 1 thread (same run)",
           copy_best * 1e3, copy_gbs);
    printf("%-44s %11.1f %%\n", "add bandwidth / copy bandwidth", 100.0 * add_gbs / copy_gbs);
    printf("%-44s %11.1f ms\n", cuda ? "square: cold NVRTC compile + first call" : "square: cold cc compile + first call",
           cold * 1e3);
    printf("%-44s %11.1f ms\n", "square: warm-cache load + first call", warm * 1e3);
    printf("(N = %d; fresh processes for the compile rows, device open excluded)\n", log2n);
    nb_device_close(dev);
    return cold < 0 || warm < 0;
}

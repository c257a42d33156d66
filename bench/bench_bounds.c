/* The cost of bounds-checked indexing (lang/callsig.h): kernels whose work is tensor and
 * local-array indexing, each next to a plain elementwise call over the same elements (its memory
 * floor). Every tensor access costs a compare and a branch per dimension; every local-array index
 * that is not a constant one more, and a checked CUDA launch reads its error word back (a
 * synchronisation). Each kernel runs from a checked module and from an unchecked one
 * (nb_module_options.unchecked) in the same process; "cost" is checked over unchecked.
 *
 *   1. stencil: a 3x3 box filter over an N x N f32 Tensor<float,2> (9 checked 2-D loads per
 *      element, indices from dispatch-style arithmetic), one result per pixel
 *   2. gather: out[k] = t[idx[k]] with idx random in [0, N*N) (1-D loads, indices from data)
 *   3. scatter: [Kernel] writes dst[id.x] = v over a grid of N*N (a checked store per thread)
 *   4. lut: a float[16] local table indexed by (k * 7 + j) & 15 in a 16-step loop
 *   floor: copy(x) = x over N*N floats (8 bytes per element)
 *
 *   usage: bench_bounds [cpu|cuda|auto] [--n N] [--iters K]     (default: auto, N = 4096 on CUDA,
 *                                                                 1024 on the CPU)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nabla/nabla.h"

#define CHECK(x)                                                                               \
    do {                                                                                       \
        nb_status s_ = (x);                                                                    \
        if (s_ != NB_OK) {                                                                     \
            fprintf(stderr, "bench_bounds: %s failed: %s\n", #x, nb_last_error());             \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *SRC =
    "float copy(float x) { return x; }\n"
    "float stencil(Tensor<float, 2> img, int y, int x, int h, int w) {\n"
    "    float s = 0;\n"
    "    for (int dy = -1; dy <= 1; dy++)\n"
    "        for (int dx = -1; dx <= 1; dx++)\n"
    "            s += img[clamp(y + dy, 0, h - 1), clamp(x + dx, 0, w - 1)];\n"
    "    return s * (1.0 / 9.0);\n"
    "}\n"
    "float gather(Tensor<float, 1> t, int i) { return t[i]; }\n"
    "[Kernel] void scatter(Tensor<float, 1> dst, float v) { uint3 id = dispatch_id(); dst[id.x] = v; }\n"
    "float lut(int k) {\n"
    "    float tab[16];\n"
    "    for (int i = 0; i < 16; i++) tab[i] = float(i) * 0.5;\n"
    "    float s = 0;\n"
    "    for (int j = 0; j < 16; j++) s += tab[(k * 7 + j) & 15];\n"
    "    return s;\n"
    "}\n";

typedef enum { K_COPY, K_STENCIL, K_GATHER, K_SCATTER, K_LUT } kind;

/* One call; the result (if any) is freed. */
static void once(kind k, nb_func *f, nb_tensor *a, nb_tensor *b, nb_tensor *c2, int64_t n) {
    nb_call *c = NULL;
    nb_tensor *r = NULL;
    CHECK(nb_call_begin(f, &c));
    switch (k) {
    case K_COPY: CHECK(nb_call_arg(c, 0, a)); break;
    case K_STENCIL:
        CHECK(nb_call_arg(c, 0, a));
        CHECK(nb_call_arg(c, 1, b));  /* y: [N, 1] */
        CHECK(nb_call_arg(c, 2, c2)); /* x: [N] */
        CHECK(nb_call_arg_int(c, 3, n));
        CHECK(nb_call_arg_int(c, 4, n));
        break;
    case K_GATHER:
        CHECK(nb_call_arg(c, 0, a));
        CHECK(nb_call_arg(c, 1, b));
        break;
    case K_SCATTER:
        CHECK(nb_call_arg(c, 0, a));
        CHECK(nb_call_arg_double(c, 1, 1.5));
        CHECK(nb_call_run_grid(c, (int64_t[]){n, 1, 1}));
        return;
    case K_LUT: CHECK(nb_call_arg(c, 0, b)); break;
    }
    CHECK(nb_call_run(c, &r));
    nb_tensor_free(r);
}

static double time_ms(kind k, nb_func *f, nb_tensor *a, nb_tensor *b, nb_tensor *c2, int64_t n, nb_device *dev,
                      int iters) {
    once(k, f, a, b, c2, n); /* compile + warm up */
    CHECK(nb_device_synchronize(dev));
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        for (int i = 0; i < iters; i++) once(k, f, a, b, c2, n);
        CHECK(nb_device_synchronize(dev));
        double ms = (now() - t0) * 1e3 / iters;
        if (ms < best) best = ms;
    }
    return best;
}

int main(int argc, char **argv) {
    const char *spec = "auto";
    int64_t n = 0;
    int iters = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc) n = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else spec = argv[i];
    }
    nb_device *dev = NULL;
    CHECK(nb_device_open(spec, &dev));
    int cuda = nb_device_get_kind(dev) == NB_DEVICE_CUDA;
    if (n <= 0) n = cuda ? 4096 : 1024;
    if (iters <= 0) iters = cuda ? 50 : 5;
    int64_t nn = n * n;
    printf("bench_bounds on %s (%s): N = %lld (%lld elements), best of 3 x %d calls\n\n", nb_device_name(dev),
           nb_device_get_info(dev)->name, (long long)n, (long long)nn, iters);

    /* the same source twice: bounds-checked (the default) and nb_module_options.unchecked */
    nb_module *m = NULL, *mu = NULL;
    nb_module_options uo = {0};
    uo.unchecked = 1;
    CHECK(nb_module_load_source(dev, "bench_bounds.nb", SRC, NULL, &m));
    CHECK(nb_module_load_source(dev, "bench_bounds.nb", SRC, &uo, &mu));
    nb_func *fcopy, *fst, *fga, *fsc, *flut, *ust, *uga, *usc, *ulut;
    CHECK(nb_module_func(m, "copy", &fcopy));
    CHECK(nb_module_func(m, "stencil", &fst));
    CHECK(nb_module_func(m, "gather", &fga));
    CHECK(nb_module_func(m, "scatter", &fsc));
    CHECK(nb_module_func(m, "lut", &flut));
    CHECK(nb_module_func(mu, "stencil", &ust));
    CHECK(nb_module_func(mu, "gather", &uga));
    CHECK(nb_module_func(mu, "scatter", &usc));
    CHECK(nb_module_func(mu, "lut", &ulut));

    float *img = malloc(sizeof(float) * (size_t)nn);
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)nn), *ys = malloc(sizeof(int32_t) * (size_t)n),
            *xs = malloc(sizeof(int32_t) * (size_t)n);
    if (!img || !idx || !ys || !xs) return 1;
    unsigned long long rng = 88172645463325252ULL;
    for (int64_t i = 0; i < nn; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        img[i] = (float)(rng % 1000) * 1e-3f;
        idx[i] = (int32_t)(rng % (unsigned long long)nn);
    }
    for (int64_t i = 0; i < n; i++) ys[i] = xs[i] = (int32_t)i;
    nb_tensor *timg = NULL, *tflat = NULL, *tidx = NULL, *ty = NULL, *tx = NULL, *tdst = NULL;
    CHECK(nb_tensor_from_host(dev, NB_F32, 2, (int64_t[]){n, n}, img, &timg));
    CHECK(nb_tensor_from_host(dev, NB_F32, 1, (int64_t[]){nn}, img, &tflat));
    CHECK(nb_tensor_from_host(dev, NB_I32, 1, (int64_t[]){nn}, idx, &tidx));
    CHECK(nb_tensor_from_host(dev, NB_I32, 2, (int64_t[]){n, 1}, ys, &ty));
    CHECK(nb_tensor_from_host(dev, NB_I32, 1, (int64_t[]){n}, xs, &tx));
    CHECK(nb_tensor_zeros(dev, NB_F32, 1, (int64_t[]){nn}, &tdst));

    double fl = time_ms(K_COPY, fcopy, tflat, NULL, NULL, nn, dev, iters);
    printf("%-10s %9.3f ms  %7.1f GB/s   (floor: 8 bytes per element)\n", "copy", fl, 8.0 * (double)nn / (fl * 1e6));
    struct { const char *name; kind k; nb_func *f, *fu; nb_tensor *a, *b, *c; const char *what; } rows[] = {
        {"stencil", K_STENCIL, fst, ust, timg, ty, tx, "9 checked 2-D tensor loads per element"},
        {"gather", K_GATHER, fga, uga, tflat, tidx, NULL, "1 checked tensor load, index from data"},
        {"scatter", K_SCATTER, fsc, usc, tdst, NULL, NULL, "1 checked tensor store per grid thread"},
        {"lut", K_LUT, flut, ulut, NULL, tidx, NULL, "16 checked local-array reads per element"},
    };
    printf("%-10s %12s %12s %9s %9s\n", "kernel", "checked", "unchecked", "cost", "vs copy");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int64_t kn = rows[i].k == K_STENCIL ? n : nn;
        double ms = time_ms(rows[i].k, rows[i].f, rows[i].a, rows[i].b, rows[i].c, kn, dev, iters);
        double mu_ms = time_ms(rows[i].k, rows[i].fu, rows[i].a, rows[i].b, rows[i].c, kn, dev, iters);
        printf("%-10s %9.3f ms %9.3f ms %+8.1f%% %8.2fx   (%s)\n", rows[i].name, ms, mu_ms,
               100.0 * (ms / mu_ms - 1.0), ms / fl, rows[i].what);
    }
    nb_tensor_free(timg);
    nb_tensor_free(tflat);
    nb_tensor_free(tidx);
    nb_tensor_free(ty);
    nb_tensor_free(tx);
    nb_tensor_free(tdst);
    free(img);
    free(idx);
    free(ys);
    free(xs);
    nb_module_free(m);
    nb_module_free(mu);
    nb_device_close(dev);
    return 0;
}

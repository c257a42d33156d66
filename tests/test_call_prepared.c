/* Prepared calls (module.h "prepared calls"): bound once, relaunched over other arrays. Results
 * equal nb_call_run's; a steady-state launch allocates nothing (host hooks and the device's
 * allocation counters); arrays set later are checked (dtype, shape, strides, device, alignment,
 * overlapping owned gradients); uniforms change per launch; bounds errors at launch (CPU) or
 * nb_prepared_check (CUDA); a stale call after nb_module_set_constant. CPU, and CUDA when there
 * is a GPU (there also a launch captured into a CUDA graph and replayed). */
#include <string.h>

#include "nabla/module.h"
#include "nb_test.h"
#include "nb_test_alloc.h"

static const char *SRC =
    "[Differentiable] float sil(float x) { return x / (1.0 + exp(-x)); }\n"
    "[Differentiable] float madd(float a, float b) { return a * b + a; }\n"
    "void step(inout float p, float g, float lr, int k) { p = p - lr * g * float(k); }\n"
    "float pick(Tensor<float, 1> t, int i) { return t[i]; }\n"
    "int twice(int i) { return 2 * i; }\n"
    "struct P { float a; float b; };\n"
    "float sum2(P s) { return s.a + s.b; }\n"
    "extern static const int K = 1;\n"
    "float kmul(float x) { return x * float(K); }\n";

/* The module of SRC on dev and its function `fn` (NULL on failure: the test fails). */
static nb_module *load(nb_device *dev, const char *fn, nb_func **f) {
    nb_module *m = NULL;
    NB_EXPECT_OK(nb_module_load_source(dev, "prep.nb", SRC, NULL, &m));
    if (m && nb_module_func(m, fn, f) != NB_OK) {
        NB_EXPECT_OK(nb_module_func(m, fn, f));
        nb_module_free(m);
        m = NULL;
    }
    return m;
}

static nb_tensor *from(nb_device *dev, int64_t n, const float *v) {
    nb_tensor *t = NULL;
    nb_tensor_from_host(dev, NB_F32, 1, &n, v, &t);
    return t;
}

static void fill(float *v, int64_t n, float a, float b) {
    for (int64_t i = 0; i < n; i++) v[i] = a + b * (float)((i * 37) % 101) / 101.0f;
}

/* y = f(x) through nb_call_run (the reference). */
static nb_status run1(nb_func *f, nb_tensor *x, nb_tensor *y) {
    nb_call *c;
    nb_status s = nb_call_begin(f, &c);
    if (s) return s;
    nb_call_arg(c, 0, x);
    nb_call_result(c, y);
    return nb_call_run(c, NULL);
}

static void expect_equal(nb_tensor *a, nb_tensor *b, int64_t n) {
    float *ha = malloc(sizeof(float) * (size_t)n), *hb = malloc(sizeof(float) * (size_t)n);
    NB_EXPECT_OK(nb_tensor_to_host(a, ha, sizeof(float) * (size_t)n));
    NB_EXPECT_OK(nb_tensor_to_host(b, hb, sizeof(float) * (size_t)n));
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += memcmp(&ha[i], &hb[i], 4) != 0;
    NB_EXPECT(bad == 0);
    if (bad) fprintf(stderr, "  %d of %lld differ (first %g vs %g)\n", bad, (long long)n, ha[0], hb[0]);
    free(ha), free(hb);
}

static uint64_t dev_allocs(nb_device *dev) {
    nb_mem_stats st;
    return nb_device_mem_stats(dev, &st) == NB_OK ? st.driver_allocs + st.cache_hits : 0;
}

/* Forward: results equal nb_call_run's over two pairs of arrays; no allocation when relaunched. */
static void forward(nb_device *dev) {
    nb_func *sil;
    nb_module *m = load(dev, "sil", &sil);
    if (!m) return;
    enum { N = 100003 };
    static float h[N];
    fill(h, N, -4.0f, 8.0f);
    nb_tensor *x1 = from(dev, N, h), *y1 = NULL, *r1 = NULL;
    fill(h, N, -1.0f, 3.0f);
    nb_tensor *x2 = from(dev, N, h), *y2 = NULL, *r2 = NULL;
    int64_t n = N;
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, &n, &y1));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, &n, &y2));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, &n, &r1));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, &n, &r2));
    NB_REQUIRE_OK(run1(sil, x1, r1));
    NB_REQUIRE_OK(run1(sil, x2, r2));

    nb_call *c;
    NB_REQUIRE_OK(nb_call_begin(sil, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, x1));
    NB_EXPECT_OK(nb_call_result(c, y1));
    nb_prepared *p = NULL;
    NB_REQUIRE_OK(nb_call_prepare(c, &p));
    NB_EXPECT(nb_prepared_size(p) == N);
    int xs = -1, ys = -1, xs2 = -1;
    NB_EXPECT_OK(nb_prepared_slot(p, "x", &xs));
    NB_EXPECT_OK(nb_prepared_slot(p, "_result", &ys));
    NB_EXPECT_OK(nb_prepared_param_slot(p, 0, &xs2));
    NB_EXPECT(xs == 0 && ys == 1 && xs2 == xs);
    NB_EXPECT_OK(nb_prepared_launch(p, NULL));
    expect_equal(y1, r1, N);

    /* steady state: set both arrays and launch, 20 times; nothing allocated */
    NB_EXPECT_OK(nb_device_synchronize(dev));
    uint64_t d0 = dev_allocs(dev);
    nb_test_count_allocs_begin();
    for (int i = 0; i < 20; i++) {
        NB_EXPECT_OK(nb_prepared_set_arg(p, xs, i % 2 ? x1 : x2));
        NB_EXPECT_OK(nb_prepared_set_ptr(p, ys, nb_tensor_data(i % 2 ? y1 : y2)));
        NB_EXPECT_OK(nb_prepared_launch(p, NULL));
    }
    nb_test_count_allocs_end();
    int64_t host = nb_test_allocs;
    NB_EXPECT(host == 0);
    NB_EXPECT(dev_allocs(dev) == d0);
    if (host) fprintf(stderr, "  %lld host allocations in 20 launches\n", (long long)host);
    expect_equal(y1, r1, N);
    expect_equal(y2, r2, N);

    /* errors at set time */
    nb_tensor *f64 = NULL, *short_ = NULL, *wide = NULL, *strided = NULL;
    int64_t n2 = 2 * N, nshort = N - 1;
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F64, 1, &n, &f64));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, &nshort, &short_));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, &n2, &wide));
    NB_REQUIRE_OK(nb_tensor_slice(wide, 0, 0, n2, 2, &strided)); /* [N], stride 8 bytes */
    NB_EXPECT_ERR(nb_prepared_set_arg(p, xs, f64), NB_ERR_DTYPE, "prepared for f32");
    NB_EXPECT_ERR(nb_prepared_set_arg(p, xs, short_), NB_ERR_SHAPE, "prepared for shape [100003]");
    NB_EXPECT_ERR(nb_prepared_set_arg(p, ys, strided), NB_ERR_SHAPE, "byte strides");
    NB_EXPECT_ERR(nb_prepared_set_arg(p, xs, NULL), NB_ERR_INVALID_ARG, "NULL");
    NB_EXPECT_ERR(nb_prepared_set_ptr(p, xs, NULL), NB_ERR_INVALID_ARG, "NULL");
    NB_EXPECT_ERR(nb_prepared_set_arg(p, 7, x1), NB_ERR_INVALID_ARG, "slot 7 out of range");
    NB_EXPECT_ERR(nb_prepared_set_double(p, xs, 1.0), NB_ERR_INVALID_ARG, "not bound to a single scalar");
    NB_EXPECT_ERR(nb_prepared_slot(p, "z", &xs2), NB_ERR_NOT_FOUND, "slots: x, _result");
    NB_EXPECT_ERR(nb_prepared_param_slot(p, 3, &xs2), NB_ERR_INVALID_ARG, "no parameter 3");
    NB_EXPECT_ERR(nb_prepared_launch(NULL, NULL), NB_ERR_INVALID_ARG, "NULL");
    /* a failed set leaves the slot as it was */
    NB_EXPECT_OK(nb_prepared_set_arg(p, xs, x1));
    NB_EXPECT_OK(nb_prepared_set_arg(p, ys, y1));
    NB_EXPECT_OK(nb_tensor_fill_bytes(y1, 0));
    NB_EXPECT_ERR(nb_prepared_set_arg(p, ys, strided), NB_ERR_SHAPE, "strides");
    NB_EXPECT_OK(nb_prepared_launch(p, NULL));
    expect_equal(y1, r1, N);
    NB_EXPECT_OK(nb_prepared_check(p));
    nb_prepared_free(p);

    /* another device's array */
    if (nb_device_get_kind(dev) == NB_DEVICE_CUDA) {
        nb_device *cpu = NULL;
        NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
        nb_tensor *hx = NULL;
        NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F32, 1, &n, &hx));
        NB_REQUIRE_OK(nb_call_begin(sil, &c));
        nb_call_arg(c, 0, x1);
        nb_call_result(c, y1);
        NB_REQUIRE_OK(nb_call_prepare(c, &p));
        NB_EXPECT_ERR(nb_prepared_set_arg(p, 0, hx), NB_ERR_DEVICE, "module runs on");
        nb_prepared_free(p);
        nb_tensor_free(hx);
        nb_device_close(cpu);
    }
    nb_tensor_free(f64), nb_tensor_free(short_), nb_tensor_free(wide), nb_tensor_free(strided);
    nb_tensor_free(x1), nb_tensor_free(x2), nb_tensor_free(y1), nb_tensor_free(y2), nb_tensor_free(r1), nb_tensor_free(r2);
    nb_module_free(m);
}

/* Uniforms per launch (an optimizer's step constants), an inout array, an int parameter. */
static void uniforms(nb_device *dev) {
    nb_func *step;
    nb_module *m = load(dev, "step", &step);
    if (!m) return;
    enum { N = 4099 };
    static float hp[N], hg[N];
    fill(hp, N, 1.0f, 1.0f);
    fill(hg, N, -0.5f, 1.0f);
    nb_tensor *p1 = from(dev, N, hp), *p2 = from(dev, N, hp), *g = from(dev, N, hg);
    nb_call *c;
    NB_REQUIRE_OK(nb_call_begin(step, &c));
    nb_call_arg(c, 0, p1);
    nb_call_arg(c, 1, g);
    nb_call_arg_double(c, 2, 0.1);
    nb_call_arg_int(c, 3, 1);
    nb_prepared *p = NULL;
    NB_REQUIRE_OK(nb_call_prepare(c, &p));
    int lr = -1, k = -1;
    NB_EXPECT_OK(nb_prepared_slot(p, "lr", &lr));
    NB_EXPECT_OK(nb_prepared_param_slot(p, 3, &k));
    for (int i = 1; i <= 3; i++) { /* p1 -= lr_i g k_i, as three nb_call_runs on p2 */
        NB_EXPECT_OK(nb_prepared_set_double(p, lr, 0.1 * i));
        NB_EXPECT_OK(nb_prepared_set_double(p, k, (double)(i + 1)));
        NB_EXPECT_OK(nb_prepared_launch(p, NULL));
        NB_REQUIRE_OK(nb_call_begin(step, &c));
        nb_call_arg(c, 0, p2);
        nb_call_arg(c, 1, g);
        nb_call_arg_double(c, 2, 0.1 * i);
        nb_call_arg_int(c, 3, i + 1);
        NB_EXPECT_OK(nb_call_run(c, NULL));
    }
    expect_equal(p1, p2, N);
    NB_EXPECT_ERR(nb_prepared_set_double(p, k, 1.5), NB_ERR_DTYPE, "not a whole number");
    NB_EXPECT_ERR(nb_prepared_set_double(p, k, 3e9), NB_ERR_DTYPE, "in its range");
    NB_EXPECT_ERR(nb_prepared_set_arg(p, lr, g), NB_ERR_INVALID_ARG, "bound to a single value, not an array");
    nb_prepared_free(p);

    /* an i64 array into an int parameter is range-checked when bound: it cannot be set later */
    nb_func *twice;
    NB_REQUIRE_OK(nb_module_func(m, "twice", &twice));
    int64_t iv[3] = {1, 2, 3}, three = 3;
    nb_tensor *i64 = NULL;
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_I64, 1, &three, iv, &i64));
    NB_REQUIRE_OK(nb_call_begin(twice, &c));
    nb_call_arg(c, 0, i64);
    NB_REQUIRE_OK(nb_call_prepare(c, &p));
    NB_EXPECT_ERR(nb_prepared_set_arg(p, 0, i64), NB_ERR_UNSUPPORTED, "narrower integer parameter");
    nb_prepared_free(p);

    /* struct parameters: one slot per field */
    nb_func *sum2;
    NB_REQUIRE_OK(nb_module_func(m, "sum2", &sum2));
    NB_REQUIRE_OK(nb_call_begin(sum2, &c));
    nb_call_arg_named(c, "s.a", g);
    nb_call_arg_named(c, "s.b", g);
    nb_call_result(c, p2);
    NB_REQUIRE_OK(nb_call_prepare(c, &p));
    int sa = -1;
    NB_EXPECT_ERR(nb_prepared_param_slot(p, 0, &sa), NB_ERR_INVALID_ARG, "is a struct");
    NB_EXPECT_OK(nb_prepared_slot(p, "s.b", &sa));
    NB_EXPECT_OK(nb_prepared_set_arg(p, sa, p1));
    NB_EXPECT_OK(nb_prepared_launch(p, NULL));
    nb_prepared_free(p);
    fill(hp, N, 0, 0);
    NB_EXPECT_OK(nb_tensor_to_host(p2, hp, sizeof hp));
    NB_EXPECT_OK(nb_tensor_to_host(p1, hg, sizeof hg));
    float hgg[N];
    nb_tensor_to_host(g, hgg, sizeof hgg);
    NB_EXPECT(hp[5] == hgg[5] + hg[5] && hp[N - 1] == hgg[N - 1] + hg[N - 1]);

    /* calls a prepared call does not take */
    NB_REQUIRE_OK(nb_call_begin(sum2, &c));
    nb_call_arg_named(c, "s.a", g);
    nb_call_arg_named(c, "s.b", g);
    nb_call_defer_checks(c);
    NB_EXPECT_ERR(nb_call_prepare(c, &p), NB_ERR_UNSUPPORTED, "deferred");
    NB_EXPECT(p == NULL);
    /* a binding error comes back from prepare (and frees the call) */
    NB_REQUIRE_OK(nb_call_begin(sum2, &c));
    nb_call_arg_named(c, "s.a", g);
    NB_EXPECT_ERR(nb_call_prepare(c, &p), NB_ERR_INVALID_ARG, "s.b");
    NB_EXPECT(p == NULL);

    /* stale after a constant changed */
    nb_func *kmul;
    NB_REQUIRE_OK(nb_module_func(m, "kmul", &kmul));
    NB_REQUIRE_OK(nb_call_begin(kmul, &c));
    nb_call_arg(c, 0, g);
    nb_call_result(c, p2);
    NB_REQUIRE_OK(nb_call_prepare(c, &p));
    NB_EXPECT_OK(nb_prepared_launch(p, NULL));
    NB_EXPECT_OK(nb_module_set_constant(m, "K", 3));
    NB_EXPECT_ERR(nb_prepared_launch(p, NULL), NB_ERR_INVALID_ARG, "prepare it again");
    nb_prepared_free(p);
    nb_tensor_free(i64), nb_tensor_free(p1), nb_tensor_free(p2), nb_tensor_free(g);
    nb_module_free(m);
}

/* Bounds checks: an index set per launch. CPU: the launch fails; CUDA: nb_prepared_check. */
static void bounds(nb_device *dev) {
    nb_func *pick;
    nb_module *m = load(dev, "pick", &pick);
    if (!m) return;
    float h[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    nb_tensor *t = from(dev, 8, h), *y = NULL;
    int64_t four = 4;
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, &four, &y));
    nb_call *c;
    NB_REQUIRE_OK(nb_call_begin(pick, &c));
    nb_call_arg(c, 0, t);
    nb_call_arg_int(c, 1, 2);
    nb_call_result(c, y);
    nb_prepared *p = NULL;
    NB_REQUIRE_OK(nb_call_prepare(c, &p));
    /* (no array of the kernel's shape besides y: 4 threads) */
    NB_EXPECT(nb_prepared_size(p) == 4);
    NB_EXPECT_OK(nb_prepared_launch(p, NULL));
    NB_EXPECT_OK(nb_prepared_check(p));
    float got[4];
    NB_EXPECT_OK(nb_tensor_to_host(y, got, sizeof got));
    NB_EXPECT(got[0] == 2 && got[3] == 2);
    NB_EXPECT_OK(nb_prepared_set_double(p, 1, 9));
    if (nb_device_get_kind(dev) == NB_DEVICE_CUDA) {
        NB_EXPECT_OK(nb_prepared_launch(p, NULL));
        NB_EXPECT_ERR(nb_prepared_check(p), NB_ERR_SHAPE, "out-of-bounds index [9] into tensor 't' of shape [8]");
        NB_EXPECT_OK(nb_prepared_check(p)); /* reported once */
    } else {
        NB_EXPECT_ERR(nb_prepared_launch(p, NULL), NB_ERR_SHAPE, "out-of-bounds index [9] into tensor 't' of shape [8]");
    }
    NB_EXPECT_OK(nb_prepared_set_double(p, 1, 7));
    NB_EXPECT_OK(nb_prepared_launch(p, NULL));
    NB_EXPECT_OK(nb_prepared_check(p));
    NB_EXPECT_OK(nb_tensor_to_host(y, got, sizeof got));
    NB_EXPECT(got[1] == 7);
    nb_prepared_free(p);
    nb_tensor_free(t), nb_tensor_free(y);
    nb_module_free(m);
}

/* Reverse mode: gradient slots "a_grad", "b_grad", "_dout"; equal to nb_call_run's gradients;
 * owned gradients may not be set to overlap each other shifted. */
static void backward(nb_device *dev) {
    nb_func *madd;
    nb_module *m = load(dev, "madd", &madd);
    if (!m) return;
    enum { N = 1024 };
    static float ha[N], hb[N], hd[N];
    fill(ha, N, -1, 2), fill(hb, N, 0.5f, 1), fill(hd, N, 1, 1);
    nb_tensor *a = from(dev, N, ha), *b = from(dev, N, hb), *dy = from(dev, N, hd), *ga = NULL, *gb = NULL, *ra = NULL,
              *rb = NULL, *both = NULL, *lo = NULL, *hi = NULL;
    int64_t n = N, n2 = N + 4;
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, &n, &ga));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, &n, &gb));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, &n, &ra));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, &n, &rb));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, &n2, &both));
    NB_REQUIRE_OK(nb_tensor_slice(both, 0, 0, N, 1, &lo));
    NB_REQUIRE_OK(nb_tensor_slice(both, 0, 4, N + 4, 1, &hi));
    for (int pass = 0; pass < 2; pass++) {
        nb_call *c;
        NB_REQUIRE_OK(nb_call_begin(madd, &c));
        nb_call_set_mode(c, NB_MODE_BWD);
        nb_call_arg(c, 0, a);
        nb_call_arg(c, 1, b);
        nb_call_grad(c, 0, pass ? ga : ra);
        nb_call_grad(c, 1, pass ? gb : rb);
        nb_call_dout(c, dy);
        if (!pass) {
            NB_EXPECT_OK(nb_call_run(c, NULL));
            continue;
        }
        nb_prepared *p = NULL;
        NB_REQUIRE_OK(nb_call_prepare(c, &p));
        int sa = -1, sb = -1, sd = -1;
        NB_EXPECT_OK(nb_prepared_slot(p, "a_grad", &sa));
        NB_EXPECT_OK(nb_prepared_slot(p, "b_grad", &sb));
        NB_EXPECT_OK(nb_prepared_slot(p, "_dout", &sd));
        NB_EXPECT_OK(nb_prepared_launch(p, NULL));
        expect_equal(ga, ra, N);
        expect_equal(gb, rb, N);
        /* the owned gradients in two views of one buffer, 4 elements apart, or the same array
         * twice: refused (a contig4 kernel loads both before it stores: one add would be lost) */
        NB_EXPECT_OK(nb_prepared_set_arg(p, sa, lo));
        NB_EXPECT_ERR(nb_prepared_set_arg(p, sb, hi), NB_ERR_INVALID_ARG, "would overlap 'a_grad'");
        NB_EXPECT_ERR(nb_prepared_set_arg(p, sb, lo), NB_ERR_INVALID_ARG, "would overlap 'a_grad'");
        NB_EXPECT_OK(nb_prepared_set_arg(p, sd, dy));
        nb_prepared_free(p);
    }
    nb_tensor_free(a), nb_tensor_free(b), nb_tensor_free(dy), nb_tensor_free(ga), nb_tensor_free(gb);
    nb_tensor_free(ra), nb_tensor_free(rb), nb_tensor_free(both), nb_tensor_free(lo), nb_tensor_free(hi);
    nb_module_free(m);
}

static void on_cpu(void (*f)(nb_device *)) {
    nb_device *dev = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    f(dev);
    nb_device_close(dev);
}

static void test_forward_cpu(void) { on_cpu(forward); }
static void test_uniforms_cpu(void) { on_cpu(uniforms); }
static void test_bounds_cpu(void) { on_cpu(bounds); }
static void test_backward_cpu(void) { on_cpu(backward); }

static nb_device *cuda_dev(void) {
    nb_device *dev = NULL;
    if (nb_cuda_device_count() == 0 || nb_device_open("cuda", &dev)) return NULL;
    return dev;
}

/* CUDA: the same, plus a capture into a CUDA graph (the launch is capturable; the graph replays
 * the pointers it was captured with) and the alignment check of contig4 arrays. */
static void test_cuda(void) {
    nb_device *dev = cuda_dev();
    if (!dev) NB_SKIP("no CUDA device");
    forward(dev);
    uniforms(dev);
    bounds(dev);
    backward(dev);
    nb_func *sil;
    nb_module *m = load(dev, "sil", &sil);
    if (!m) return;
    enum { N = 4096 };
    static float h[N];
    fill(h, N, -3, 6);
    nb_tensor *x = from(dev, N, h), *y = NULL, *r = NULL, *x1 = NULL, *y1 = NULL;
    int64_t n = N;
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, &n, &y));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, &n, &r));
    NB_REQUIRE_OK(run1(sil, x, r));
    nb_call *c;
    NB_REQUIRE_OK(nb_call_begin(sil, &c));
    nb_call_arg(c, 0, x);
    nb_call_result(c, y);
    nb_prepared *p = NULL;
    NB_REQUIRE_OK(nb_call_prepare(c, &p));
    NB_REQUIRE_OK(nb_device_graph_capture_begin(dev));
    nb_status ls = nb_prepared_launch(p, NULL);
    nb_device_graph *g = NULL;
    NB_EXPECT_OK(nb_device_graph_capture_end(dev, &g));
    NB_EXPECT_OK(ls);
    if (g) {
        NB_EXPECT_OK(nb_device_graph_launch(g));
        NB_EXPECT_OK(nb_device_graph_launch(g));
        expect_equal(y, r, N);
        nb_device_graph_destroy(g);
    }
    /* contig4: the kernel loads 4 floats at once, so an address off by one element is refused */
    int64_t n1 = N + 1;
    nb_tensor *big = NULL;
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, &n1, &big));
    NB_REQUIRE_OK(nb_tensor_slice(big, 0, 1, N + 1, 1, &x1));
    NB_REQUIRE_OK(nb_tensor_slice(big, 0, 0, N, 1, &y1));
    NB_EXPECT_ERR(nb_prepared_set_arg(p, 0, x1), NB_ERR_INVALID_ARG, "not a multiple of 16 bytes");
    NB_EXPECT_OK(nb_prepared_set_arg(p, 0, y1));
    nb_prepared_free(p);
    nb_tensor_free(x), nb_tensor_free(y), nb_tensor_free(r), nb_tensor_free(x1), nb_tensor_free(y1), nb_tensor_free(big);
    nb_module_free(m);
    nb_device_close(dev);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_forward_cpu, test_uniforms_cpu, test_bounds_cpu, test_backward_cpu, test_cuda);
}

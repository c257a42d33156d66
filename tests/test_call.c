/* The vectorized-call layer from C (include/nabla/module.h): binding, broadcasting, maps,
 * outputs, strided views, dtypes, the kernel cache, constants, and every error path. Runs on the
 * CPU, and the same checks on CUDA when there is a GPU. */
#include <pthread.h>

#include "jit/jit.h"
#include "nabla/module.h"
#include "nb_test.h"

static const char *SRC =
    "float add(float a, float b) { return a + b; }\n"
    "float3 scale(float3 v, float s) { return v * s; }\n"
    "void split(float3 v, out float x, out float2 yz) { x = v.x; yz = v.yz; }\n"
    "void bump(inout float x, float d) { x = x + d; }\n"
    "int twice(int x) { return x * 2; }\n"
    "float twice(float x) { return x * 3; }\n"
    "bool neg(bool b) { return !b; }\n"
    "struct P { float2 xy; float w; };\n"
    "float weigh(P p) { return (p.xy.x + p.xy.y) * p.w; }\n"
    "P make(float w) { P p; p.xy = float2(0, 0); p.w = w; return p; }\n"
    "void nothing(float x) { }\n"
    "float trace(float2x2 m) { return m[0][0] + m[1][1]; }\n"
    "float gather(Tensor<float, 1> t, int i) { return t[i]; }\n"
    "[Kernel] void fill(Tensor<float, 1> dst, float v) { uint3 id = dispatch_id(); dst[id.x] = v + float(id.x); }\n"
    "extern static const float kGain = 1.0;\n"
    "float gain(float x) { return x * kGain; }\n";

static nb_device *cpu_dev(void) {
    static nb_device *d;
    if (!d) nb_device_open("cpu", &d);
    return d;
}

static nb_tensor *arr(nb_device *dev, nb_dtype t, int ndim, const int64_t *shape, const void *data) {
    nb_tensor *x = NULL;
    if (nb_tensor_from_host(dev, t, ndim, shape, data, &x) != NB_OK) return NULL;
    return x;
}

static int read_f32(const nb_tensor *t, float *out, size_t n) {
    return nb_tensor_to_host(t, out, n * sizeof(float)) == NB_OK;
}

/* ---- functional checks, run per device ------------------------------------------------------ */

static void functional(nb_device *dev) {
    nb_module *m = NULL;
    NB_REQUIRE_OK(nb_module_load_source(dev, "t.nb", SRC, NULL, &m));
    nb_func *add, *scale, *split, *bump, *twice, *trace, *gather, *fill, *weigh;
    NB_REQUIRE_OK(nb_module_func(m, "add", &add));
    NB_REQUIRE_OK(nb_module_func(m, "scale", &scale));
    NB_REQUIRE_OK(nb_module_func(m, "split", &split));
    NB_REQUIRE_OK(nb_module_func(m, "bump", &bump));
    NB_REQUIRE_OK(nb_module_func(m, "twice", &twice));
    NB_REQUIRE_OK(nb_module_func(m, "trace", &trace));
    NB_REQUIRE_OK(nb_module_func(m, "gather", &gather));
    NB_REQUIRE_OK(nb_module_func(m, "fill", &fill));
    NB_REQUIRE_OK(nb_module_func(m, "weigh", &weigh));
    NB_EXPECT(nb_module_device(m) == dev);

    /* A transposed view [3,2] plus a broadcast [2] row. */
    float a6[6] = {1, 2, 3, 4, 5, 6}, b2[2] = {10, 20}, y[16];
    int64_t s23[2] = {2, 3}, s2[1] = {2};
    nb_tensor *a = arr(dev, NB_F32, 2, s23, a6), *at = NULL, *b = arr(dev, NB_F32, 1, s2, b2), *r = NULL;
    NB_REQUIRE_OK(nb_tensor_transpose(a, 0, 1, &at));
    nb_call *c = NULL;
    NB_REQUIRE_OK(nb_call_begin(add, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, at));
    NB_EXPECT_OK(nb_call_arg_named(c, "b", b));
    NB_REQUIRE_OK(nb_call_run(c, &r));
    NB_EXPECT(nb_tensor_ndim(r) == 2 && nb_tensor_shape(r)[0] == 3 && nb_tensor_shape(r)[1] == 2);
    NB_EXPECT(read_f32(r, y, 6));
    float want1[6] = {11, 24, 12, 25, 13, 26};
    NB_EXPECT(!memcmp(y, want1, sizeof want1));
    nb_tensor_free(r);

    /* A stride-0 broadcast view as input; a strided (step 2) slice as the result array. */
    nb_tensor *bb = NULL, *big = NULL, *every2 = NULL;
    int64_t s32[2] = {3, 2}, s6[1] = {12};
    NB_REQUIRE_OK(nb_tensor_broadcast_to(b, 2, s32, &bb));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, s6, &big));
    int64_t s62[2] = {6, 2};
    nb_tensor *big2 = NULL;
    NB_REQUIRE_OK(nb_tensor_reshape(big, 2, s62, &big2));
    NB_REQUIRE_OK(nb_tensor_slice(big2, 0, 0, 6, 2, &every2)); /* [3,2] rows 0,2,4 */
    NB_REQUIRE_OK(nb_call_begin(add, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, at));
    NB_EXPECT_OK(nb_call_arg(c, 1, bb));
    NB_EXPECT_OK(nb_call_result(c, every2));
    NB_REQUIRE_OK(nb_call_run(c, &r));
    NB_EXPECT(r != NULL && nb_tensor_numel(r) == 6);
    nb_tensor_free(r);
    NB_EXPECT(read_f32(big, y, 12));
    float want2[12] = {11, 24, 0, 0, 12, 25, 0, 0, 13, 26, 0, 0};
    NB_EXPECT(!memcmp(y, want2, sizeof want2));

    /* f16, bf16, u8 and i64 storage feed a float parameter; a uniform from nb_call_arg_int. */
    nb_dtype kinds[4] = {NB_F16, NB_BF16, NB_U8, NB_I64};
    for (int k = 0; k < 4; k++) {
        double src[2] = {2, 5};
        unsigned char raw[16];
        nb_convert(raw, kinds[k], src, NB_F64, 2);
        nb_tensor *x = arr(dev, kinds[k], 1, s2, raw);
        NB_REQUIRE_OK(nb_call_begin(add, &c));
        NB_EXPECT_OK(nb_call_arg(c, 0, x));
        NB_EXPECT_OK(nb_call_arg_int(c, 1, 1));
        NB_EXPECT_OK(nb_call_run(c, &r));
        NB_EXPECT(r && read_f32(r, y, 2) && y[0] == 3 && y[1] == 6);
        nb_tensor_free(r);
        nb_tensor_free(x);
    }

    /* float3 values: [2,3] -> call shape [2]; value host arrays are uploaded. */
    float v6[6] = {1, 2, 3, 4, 5, 6}, sc[2] = {2, 3};
    NB_REQUIRE_OK(nb_call_begin(scale, &c));
    NB_EXPECT_OK(nb_call_arg_value(c, 0, NB_F32, 2, s23, v6));
    NB_EXPECT_OK(nb_call_arg_value(c, 1, NB_F32, 1, s2, sc));
    NB_REQUIRE_OK(nb_call_run(c, &r));
    NB_EXPECT(nb_tensor_ndim(r) == 2 && nb_tensor_shape(r)[1] == 3);
    NB_EXPECT(read_f32(r, y, 6));
    float want3[6] = {2, 4, 6, 12, 15, 18};
    NB_EXPECT(!memcmp(y, want3, sizeof want3));
    nb_tensor_free(r);

    /* out parameters allocated by the call (struct of results) and given by name. */
    nb_tensor *ox = NULL, *oyz = NULL;
    nb_tensor *v = arr(dev, NB_F32, 2, s23, v6);
    NB_REQUIRE_OK(nb_call_begin(split, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, v));
    NB_EXPECT_OK(nb_call_arg_alloc(c, 1, &ox));
    NB_EXPECT_OK(nb_call_arg_alloc_named(c, "yz", &oyz));
    NB_EXPECT_OK(nb_call_run(c, &r));
    NB_EXPECT(r == NULL); /* void */
    NB_EXPECT(ox && oyz && nb_tensor_ndim(oyz) == 2 && nb_tensor_shape(oyz)[1] == 2);
    if (ox && oyz) {
        NB_EXPECT(read_f32(ox, y, 2) && y[0] == 1 && y[1] == 4);
        NB_EXPECT(read_f32(oyz, y, 4) && y[0] == 2 && y[1] == 3 && y[2] == 5 && y[3] == 6);
    }
    nb_tensor_free(ox);
    nb_tensor_free(oyz);

    /* inout, aliased elementwise: x = x + d in place. */
    nb_tensor *acc = arr(dev, NB_F32, 1, s2, b2);
    NB_REQUIRE_OK(nb_call_begin(bump, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, acc));
    NB_EXPECT_OK(nb_call_arg(c, 1, acc));
    NB_EXPECT_OK(nb_call_run(c, NULL));
    NB_EXPECT(read_f32(acc, y, 2) && y[0] == 20 && y[1] == 40);
    nb_tensor_free(acc);

    /* Overloads: an i32 array picks int twice, f32 float twice. */
    int32_t iv[2] = {1, 2};
    nb_tensor *ti = arr(dev, NB_I32, 1, s2, iv);
    NB_REQUIRE_OK(nb_call_begin(twice, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, ti));
    NB_REQUIRE_OK(nb_call_run(c, &r));
    int32_t ir[2] = {0};
    NB_EXPECT(nb_tensor_dtype(r) == NB_I32 && nb_tensor_to_host(r, ir, sizeof ir) == NB_OK &&
              ir[0] == 2 && ir[1] == 4);
    nb_tensor_free(r);
    nb_tensor_free(ti);
    NB_REQUIRE_OK(nb_call_begin(twice, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, b));
    NB_REQUIRE_OK(nb_call_run(c, &r));
    NB_EXPECT(nb_tensor_dtype(r) == NB_F32 && read_f32(r, y, 2) && y[0] == 30 && y[1] == 60);
    nb_tensor_free(r);

    /* A matrix: the last two dims are the value. */
    float m8[8] = {1, 2, 3, 4, 10, 0, 0, 10};
    int64_t s222[3] = {2, 2, 2};
    nb_tensor *tm = arr(dev, NB_F32, 3, s222, m8);
    nb_tensor *margs[1] = {tm};
    NB_REQUIRE_OK(nb_func_call(trace, 1, margs, &r));
    NB_EXPECT(read_f32(r, y, 2) && y[0] == 5 && y[1] == 20);
    nb_tensor_free(r);
    nb_tensor_free(tm);

    /* Struct fields bound separately: xy an array of two float2, w one value. */
    float xy[4] = {1, 2, 3, 4}, w = 10;
    int64_t s22[2] = {2, 2};
    NB_REQUIRE_OK(nb_call_begin(weigh, &c));
    NB_EXPECT_OK(nb_call_arg_value_named(c, "p.xy", NB_F32, 2, s22, xy));
    NB_EXPECT_OK(nb_call_arg_value_named(c, "p.w", NB_F32, 0, NULL, &w));
    NB_REQUIRE_OK(nb_call_run(c, &r));
    NB_EXPECT(read_f32(r, y, 2) && y[0] == 30 && y[1] == 70);
    nb_tensor_free(r);

    /* Map: outer sum [2] x [3]. */
    nb_tensor *a3 = arr(dev, NB_F32, 1, (int64_t[]){3}, a6);
    int d0 = 0, d1 = 1;
    NB_REQUIRE_OK(nb_call_begin(add, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, b));
    NB_EXPECT_OK(nb_call_arg(c, 1, a3));
    NB_EXPECT_OK(nb_call_map(c, 0, 1, &d0));
    NB_EXPECT_OK(nb_call_map_named(c, "b", 1, &d1));
    NB_REQUIRE_OK(nb_call_run(c, &r));
    NB_EXPECT(nb_tensor_shape(r)[0] == 2 && nb_tensor_shape(r)[1] == 3);
    NB_EXPECT(read_f32(r, y, 6));
    float want4[6] = {11, 12, 13, 21, 22, 23};
    NB_EXPECT(!memcmp(y, want4, sizeof want4));
    nb_tensor_free(r);

    /* Tensor<> parameters and a [Kernel] over a grid. */
    int32_t idx[3] = {2, 0, 2};
    nb_tensor *tidx = arr(dev, NB_I32, 1, (int64_t[]){3}, idx);
    NB_REQUIRE_OK(nb_call_begin(gather, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, a3));
    NB_EXPECT_OK(nb_call_arg(c, 1, tidx));
    NB_REQUIRE_OK(nb_call_run(c, &r));
    NB_EXPECT(read_f32(r, y, 3) && y[0] == 3 && y[1] == 1 && y[2] == 3);
    nb_tensor_free(r);
    nb_tensor_free(tidx);
    nb_tensor *dst = NULL;
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, (int64_t[]){5}, &dst));
    NB_REQUIRE_OK(nb_call_begin(fill, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, dst));
    NB_EXPECT_OK(nb_call_arg_double(c, 1, 100));
    NB_EXPECT_OK(nb_call_run_grid(c, (int64_t[]){5, 1, 1}));
    NB_EXPECT(read_f32(dst, y, 5) && y[0] == 100 && y[4] == 104);
    nb_tensor_free(dst);

    /* Link-time constants: a new value recompiles. */
    nb_func *gain;
    NB_REQUIRE_OK(nb_module_func(m, "gain", &gain));
    nb_tensor *gargs[1] = {b};
    NB_REQUIRE_OK(nb_func_call(gain, 1, gargs, &r));
    NB_EXPECT(read_f32(r, y, 2) && y[0] == 10);
    nb_tensor_free(r);
    NB_EXPECT_OK(nb_module_set_constant(m, "kGain", 3));
    NB_REQUIRE_OK(nb_func_call(gain, 1, gargs, &r));
    NB_EXPECT(read_f32(r, y, 2) && y[0] == 30 && y[1] == 60);
    nb_tensor_free(r);
    NB_EXPECT_ERR(nb_module_set_constant(m, "nope", 3), NB_ERR_NOT_FOUND, "nope");

    /* Empty arrays: no launch, an empty result. */
    nb_tensor *e0 = NULL;
    NB_REQUIRE_OK(nb_tensor_empty(dev, NB_F32, 1, (int64_t[]){0}, &e0));
    nb_tensor *eargs[2] = {e0, b};
    NB_EXPECT_ERR(nb_func_call(add, 2, eargs, &r), NB_ERR_SHAPE, "kernel dim 0 is 0 vs 2");
    eargs[1] = e0;
    NB_EXPECT_OK(nb_func_call(add, 2, eargs, &r));
    NB_EXPECT(r && nb_tensor_numel(r) == 0);
    nb_tensor_free(r);
    nb_tensor_free(e0);

    /* Big enough for several CPU chunks and many GPU blocks: a [301, 1001] transposed view
     * plus a [1001] row, and a 3-d broadcast [2,1,4] x [3,1]. */
    {
        int64_t sh[2] = {1001, 301}, n = 1001 * 301;
        float *h = malloc(sizeof(float) * (size_t)n), *o = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) h[i] = (float)(i % 977);
        nb_tensor *big_a = arr(dev, NB_F32, 2, sh, h), *big_t = NULL, *row = NULL;
        NB_REQUIRE_OK(nb_tensor_transpose(big_a, 0, 1, &big_t)); /* [301, 1001] */
        row = arr(dev, NB_F32, 1, (int64_t[]){1001}, h);
        nb_tensor *bargs[2] = {big_t, row};
        NB_REQUIRE_OK(nb_func_call(add, 2, bargs, &r));
        NB_EXPECT(nb_tensor_to_host(r, o, sizeof(float) * (size_t)n) == NB_OK);
        int bad = 0;
        for (int64_t i = 0; i < 301 && !bad; i++)
            for (int64_t j = 0; j < 1001; j++)
                if (o[i * 1001 + j] != h[j * 301 + i] + h[j]) bad = 1;
        NB_EXPECT(!bad);
        nb_tensor_free(r);
        nb_tensor_free(row);
        nb_tensor_free(big_t);
        nb_tensor_free(big_a);
        float p8[8] = {1, 2, 3, 4, 5, 6, 7, 8}, q3[3] = {100, 200, 300};
        nb_tensor *p = arr(dev, NB_F32, 3, (int64_t[]){2, 1, 4}, p8);
        nb_tensor *q = arr(dev, NB_F32, 2, (int64_t[]){3, 1}, q3);
        nb_tensor *pq[2] = {p, q};
        NB_REQUIRE_OK(nb_func_call(add, 2, pq, &r));
        NB_EXPECT(nb_tensor_ndim(r) == 3 && nb_tensor_shape(r)[0] == 2 &&
                  nb_tensor_shape(r)[1] == 3 && nb_tensor_shape(r)[2] == 4);
        NB_EXPECT(read_f32(r, o, 24) && o[0] == 101 && o[23] == 308 && o[4] == 201);
        nb_tensor_free(r);
        nb_tensor_free(p);
        nb_tensor_free(q);
        free(h);
        free(o);
    }

    nb_tensor_free(a3);
    nb_tensor_free(v);
    nb_tensor_free(every2);
    nb_tensor_free(big2);
    nb_tensor_free(big);
    nb_tensor_free(bb);
    nb_tensor_free(at);
    nb_tensor_free(a);
    nb_tensor_free(b);
    nb_module_free(m);
}

static void test_functional_cpu(void) { functional(cpu_dev()); }

static void test_functional_cuda(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *g = NULL;
    NB_REQUIRE_OK(nb_device_open("cuda", &g));
    functional(g);
    nb_device_close(g);
}

/* A new batch size reuses the compiled kernel: one compile for several extents. */
static void test_kernel_cache(void) {
    nb_module *m = NULL;
    nb_func *add = NULL;
    NB_REQUIRE_OK(nb_module_load_source(cpu_dev(), "cache.nb",
                                        "float add7(float a, float b) { return a + b + 7; }", NULL, &m));
    NB_REQUIRE_OK(nb_module_func(m, "add7", &add));
    nb_jit_stats_t s0, s1;
    nb_jit_stats(&s0);
    for (int n = 1; n <= 5; n++) {
        float d[5] = {1, 2, 3, 4, 5}, y[5];
        int64_t sh[1] = {n};
        nb_tensor *x = arr(cpu_dev(), NB_F32, 1, sh, d), *r = NULL;
        nb_tensor *args[2] = {x, x};
        NB_EXPECT_OK(nb_func_call(add, 2, args, &r));
        NB_EXPECT(r && read_f32(r, y, (size_t)n) && y[n - 1] == 2 * n + 7);
        nb_tensor_free(r);
        nb_tensor_free(x);
    }
    nb_jit_stats(&s1);
    /* At most one kernel load went past the in-process table (compile or disk hit). */
    NB_EXPECT(s1.compiles + s1.disk_hits - s0.compiles - s0.disk_hits <= 1);
    nb_module_free(m);
}

/* Preprocessor defines from the host: one source, two defines, two results; they survive the
 * rebuild that a link-time constant causes; bad define arguments are errors. */
static void test_defines(void) {
    static const char *src = "#if !defined(SCALE)\n#error SCALE missing\n#endif\n"
                             "extern static const float OFF = 0;\n"
                             "float f(float x) { return x * SCALE + OFF; }\n";
    float d[2] = {1, 2}, y[2];
    const char *defs[2][2] = {{"SCALE=2", "UNUSED"}, {"SCALE=5", "UNUSED="}};
    float want[2][2] = {{2, 4}, {5, 10}};
    for (int k = 0; k < 2; k++) {
        nb_module_options o = {0};
        o.defines = defs[k];
        o.ndefines = 2;
        nb_module *m = NULL;
        nb_func *f = NULL;
        NB_REQUIRE_OK(nb_module_load_source(cpu_dev(), "defs.slang", src, &o, &m));
        NB_REQUIRE_OK(nb_module_func(m, "f", &f));
        nb_tensor *x = arr(cpu_dev(), NB_F32, 1, (int64_t[]){2}, d), *r = NULL;
        NB_EXPECT_OK(nb_func_call(f, 1, &x, &r));
        NB_EXPECT(r && read_f32(r, y, 2) && y[0] == want[k][0] && y[1] == want[k][1]);
        nb_tensor_free(r);
        /* a constant rebuilds the module from its sources: the defines still apply */
        NB_EXPECT_OK(nb_module_set_constant(m, "OFF", 1));
        r = NULL;
        NB_EXPECT_OK(nb_func_call(f, 1, &x, &r));
        NB_EXPECT(r && read_f32(r, y, 2) && y[0] == want[k][0] + 1 && y[1] == want[k][1] + 1);
        nb_tensor_free(r);
        nb_tensor_free(x);
        nb_module_free(m);
    }
    nb_module *m = NULL;
    NB_EXPECT_ERR(nb_module_load_source(cpu_dev(), "defs.slang", src, NULL, &m), NB_ERR_COMPILE,
                  "defs.slang:2:1: error: #error: SCALE missing");
    nb_module_options o = {0};
    o.ndefines = 1;
    NB_EXPECT_ERR(nb_module_load_source(cpu_dev(), "defs.slang", src, &o, &m), NB_ERR_INVALID_ARG, "defines");
    const char *bad[1] = {"2X=1"};
    o.defines = bad;
    NB_EXPECT_ERR(nb_module_load_source(cpu_dev(), "defs.slang", src, &o, &m), NB_ERR_COMPILE,
                  "bad define '2X=1'");
}

/* Several threads calling one function at once. */
static nb_func *g_thread_fn;
static void *thread_body(void *arg) {
    long ok = 1;
    for (int i = 0; i < 50; i++) {
        float v[3] = {1, 2, (float)i}, y[3];
        nb_tensor *x = arr(cpu_dev(), NB_F32, 1, (int64_t[]){3}, v), *r = NULL;
        nb_tensor *args[2] = {x, x};
        if (nb_func_call(g_thread_fn, 2, args, &r) != NB_OK || !read_f32(r, y, 3) || y[2] != 2.0f * i)
            ok = 0;
        nb_tensor_free(r);
        nb_tensor_free(x);
    }
    (void)arg;
    return (void *)ok;
}

static void test_threads(void) {
    nb_module *m = NULL;
    NB_REQUIRE_OK(nb_module_load_source(cpu_dev(), "th.nb", SRC, NULL, &m));
    NB_REQUIRE_OK(nb_module_func(m, "add", &g_thread_fn));
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, thread_body, NULL);
    for (int i = 0; i < 4; i++) {
        void *ok = NULL;
        pthread_join(th[i], &ok);
        NB_EXPECT(ok == (void *)1);
    }
    nb_module_free(m);
}

/* ---- reflection and dumps ------------------------------------------------------------------- */

static void test_reflection(void) {
    nb_module *m = NULL;
    NB_REQUIRE_OK(nb_module_load_source(NULL, "r.nb", SRC, NULL, &m));
    nb_func *f = NULL;
    NB_REQUIRE_OK(nb_module_func(m, "split", &f));
    nb_func *again = NULL;
    NB_EXPECT_OK(nb_module_func(m, "split", &again));
    NB_EXPECT(f == again);
    NB_EXPECT(!strcmp(nb_func_name(f), "split"));
    NB_EXPECT(nb_func_overload_count(f) == 1);
    NB_EXPECT(!strcmp(nb_func_signature(f, 0), "void split(float3 v, out float x, out float2 yz)"));
    NB_EXPECT(nb_func_param_count(f, 0) == 3);
    NB_EXPECT(!strcmp(nb_func_param_name(f, 0, 2), "yz"));
    NB_EXPECT(nb_func_param_dir(f, 0, 1) == NB_ARG_OUT);
    NB_EXPECT(nb_func_param_name(f, 0, 3) == NULL);
    NB_EXPECT(nb_func_signature(f, 1) == NULL);
    NB_EXPECT(nb_func_leaf_count(f, 0) == 3);
    nb_leaf_info li;
    NB_EXPECT_OK(nb_func_leaf(f, 0, 2, &li));
    NB_EXPECT(!strcmp(li.path, "yz") && li.value_rank == 1 && li.value_shape[0] == 2 &&
              li.dtype == NB_F32 && li.dir == NB_ARG_OUT);
    NB_EXPECT_ERR(nb_func_leaf(f, 0, 3, &li), NB_ERR_INVALID_ARG, "out of range");
    NB_EXPECT_ERR(nb_func_leaf(f, 4, 0, &li), NB_ERR_INVALID_ARG, "no overload 4");
    NB_EXPECT(nb_func_result(f, 0, &li) == 0);
    NB_EXPECT(!nb_func_is_kernel(f, 0));
    NB_REQUIRE_OK(nb_module_func(m, "weigh", &f));
    NB_EXPECT(nb_func_leaf_count(f, 0) == 2);
    NB_EXPECT_OK(nb_func_leaf(f, 0, 1, &li));
    NB_EXPECT(!strcmp(li.path, "p.w"));
    NB_EXPECT(nb_func_result(f, 0, &li) == 1 && li.dtype == NB_F32 && !strcmp(li.path, "_result"));
    NB_REQUIRE_OK(nb_module_func(m, "twice", &f));
    NB_EXPECT(nb_func_overload_count(f) == 2);
    NB_REQUIRE_OK(nb_module_func(m, "fill", &f));
    NB_EXPECT(nb_func_is_kernel(f, 0));
    NB_EXPECT_OK(nb_func_leaf(f, 0, 0, &li));
    NB_EXPECT(li.is_tensor && li.tensor_rank == 1);
    NB_EXPECT_ERR(nb_module_func(m, "nosuch", &f), NB_ERR_NOT_FOUND, "no function 'nosuch'");
    NB_EXPECT(f == NULL);

    char *text = NULL;
    NB_EXPECT_OK(nb_module_dump(m, NB_DUMP_C, "add", NB_MODE_PRIMAL, &text));
    NB_EXPECT(text && strstr(text, "add"));
    nb_module_free_text(text);
    NB_EXPECT_OK(nb_module_dump(m, NB_DUMP_CUDA, NULL, NB_MODE_PRIMAL, &text));
    NB_EXPECT(text && strstr(text, "scale"));
    nb_module_free_text(text);
    NB_EXPECT_OK(nb_module_dump(m, NB_DUMP_IR, "add", NB_MODE_PRIMAL, &text));
    NB_EXPECT(text && text[0]);
    nb_module_free_text(text);
    NB_EXPECT_ERR(nb_module_dump(m, (nb_dump_format)7, NULL, NB_MODE_PRIMAL, &text),
                  NB_ERR_INVALID_ARG, "bad format 7");
    NB_EXPECT_ERR(nb_module_dump(m, NB_DUMP_C, NULL, (nb_diff_mode)9, &text), NB_ERR_INVALID_ARG,
                  "bad mode 9");
    NB_EXPECT_ERR(nb_module_dump(NULL, NB_DUMP_C, NULL, NB_MODE_PRIMAL, &text), NB_ERR_INVALID_ARG,
                  "NULL");
    NB_EXPECT_ERR(nb_module_dump(m, NB_DUMP_C, NULL, NB_MODE_PRIMAL, NULL), NB_ERR_INVALID_ARG,
                  "NULL");
    nb_module_free_text(NULL);

    /* A module without a device can be inspected but not called. */
    NB_REQUIRE_OK(nb_module_func(m, "add", &f));
    nb_call *c = NULL;
    NB_REQUIRE_OK(nb_call_begin(f, &c));
    NB_EXPECT_OK(nb_call_arg_double(c, 0, 1));
    NB_EXPECT_OK(nb_call_arg_double(c, 1, 1));
    nb_tensor *r = NULL;
    NB_EXPECT_ERR(nb_call_run(c, &r), NB_ERR_NO_DEVICE, "loaded without a device");
    nb_module_free(m);
}

/* ---- load errors -------------------------------------------------------------------------- */

static void test_load_errors(void) {
    nb_module *m = NULL;
    NB_EXPECT_ERR(nb_module_load(cpu_dev(), "/nonexistent/x.nb", NULL, &m), NB_ERR_IO,
                  "/nonexistent/x.nb");
    NB_EXPECT(m == NULL);
    NB_EXPECT_ERR(nb_module_load_source(cpu_dev(), "bad.nb", "float f(float x) { return y; }",
                                        NULL, &m),
                  NB_ERR_COMPILE, "bad.nb:1:27: error: use of undeclared identifier 'y'");
    NB_EXPECT_ERR(nb_module_load(cpu_dev(), NULL, NULL, &m), NB_ERR_INVALID_ARG, "path");
    NB_EXPECT_ERR(nb_module_load(cpu_dev(), "x.nb", NULL, NULL), NB_ERR_INVALID_ARG, "out");
    NB_EXPECT_ERR(nb_module_load_source(cpu_dev(), "x.nb", NULL, NULL, &m), NB_ERR_INVALID_ARG,
                  "source");
    nb_module_options o = {0};
    o.ninclude_dirs = 2;
    NB_EXPECT_ERR(nb_module_load(cpu_dev(), "x.nb", &o, &m), NB_ERR_INVALID_ARG, "include_dirs");
    NB_EXPECT_ERR(nb_module_load_source(cpu_dev(), "x.nb", "", &o, &m), NB_ERR_INVALID_ARG,
                  "include_dirs");
    NB_EXPECT_ERR(nb_module_func(NULL, "f", (nb_func **)&m), NB_ERR_INVALID_ARG, "NULL");
    NB_EXPECT_ERR(nb_module_set_constant(NULL, "x", 1), NB_ERR_INVALID_ARG, "NULL");
    nb_module_free(NULL);
    NB_EXPECT(nb_module_device(NULL) == NULL);
    NB_EXPECT(nb_func_overload_count(NULL) == 0);
}

/* ---- call errors -------------------------------------------------------------------------- */

static nb_module *g_m;
static nb_func *fn(const char *name) {
    nb_func *f = NULL;
    nb_module_func(g_m, name, &f);
    return f;
}

static void test_setter_errors(void) {
    NB_REQUIRE_OK(nb_module_load_source(cpu_dev(), "e.nb", SRC, NULL, &g_m));
    nb_call *c = NULL;
    NB_EXPECT_ERR(nb_call_begin(NULL, &c), NB_ERR_INVALID_ARG, "'f' is NULL");
    NB_EXPECT_ERR(nb_call_begin(fn("add"), NULL), NB_ERR_INVALID_ARG, "'out' is NULL");
    NB_EXPECT_ERR(nb_call_arg(NULL, 0, NULL), NB_ERR_INVALID_ARG, "'c' is NULL");
    NB_EXPECT_ERR(nb_call_map(NULL, 0, 0, NULL), NB_ERR_INVALID_ARG, "'c' is NULL");
    NB_EXPECT_ERR(nb_call_result(NULL, NULL), NB_ERR_INVALID_ARG, "'c' is NULL");
    NB_EXPECT_ERR(nb_call_run(NULL, NULL), NB_ERR_INVALID_ARG, "'c' is NULL");
    NB_EXPECT_ERR(nb_call_run_grid(NULL, NULL), NB_ERR_INVALID_ARG, "'c' is NULL");
    nb_call_free(NULL);

    NB_REQUIRE_OK(nb_call_begin(fn("add"), &c));
    NB_EXPECT_ERR(nb_call_arg(c, -1, NULL), NB_ERR_INVALID_ARG, "argument index -1 is negative");
    NB_EXPECT_ERR(nb_call_arg(c, 2, NULL), NB_ERR_INVALID_ARG,
                  "too many arguments: argument 2 given but float add(float a, float b) takes 2");
    NB_EXPECT_ERR(nb_call_arg(c, 0, NULL), NB_ERR_INVALID_ARG, "the tensor for argument 'a' is NULL");
    NB_EXPECT_ERR(nb_call_arg_named(c, NULL, NULL), NB_ERR_INVALID_ARG, "name is NULL");
    NB_EXPECT_ERR(nb_call_arg_named(c, "", NULL), NB_ERR_INVALID_ARG, "empty argument name");
    NB_EXPECT_ERR(nb_call_arg_value(c, 0, (nb_dtype)99, 0, NULL, NULL), NB_ERR_INVALID_ARG,
                  "invalid dtype 99");
    NB_EXPECT_ERR(nb_call_arg_value(c, 0, NB_F32, 9, NULL, NULL), NB_ERR_INVALID_ARG, "bad ndim 9");
    NB_EXPECT_ERR(nb_call_arg_value(c, 0, NB_F32, 1, (int64_t[]){-2}, NULL), NB_ERR_SHAPE,
                  "negative dim -2");
    NB_EXPECT_ERR(nb_call_arg_value(c, 0, NB_F32, 1, (int64_t[]){2}, NULL), NB_ERR_INVALID_ARG,
                  "data is NULL");
    NB_EXPECT_ERR(nb_call_arg_value_named(c, NULL, NB_F32, 0, NULL, NULL), NB_ERR_INVALID_ARG,
                  "name is NULL");
    NB_EXPECT_ERR(nb_call_arg_alloc(c, 0, NULL), NB_ERR_INVALID_ARG, "slot is NULL");
    NB_EXPECT_ERR(nb_call_arg_alloc_named(c, NULL, NULL), NB_ERR_INVALID_ARG, "name is NULL");
    NB_EXPECT_ERR(nb_call_map(c, 0, 9, (int[]){0}), NB_ERR_INVALID_ARG, "bad ndims 9");
    NB_EXPECT_ERR(nb_call_map(c, 0, 1, (int[]){8}), NB_ERR_INVALID_ARG, "kernel dim 8 out of range");
    NB_EXPECT_ERR(nb_call_map(c, 0, 2, (int[]){1, 1}), NB_ERR_INVALID_ARG, "kernel dim 1 appears twice");
    NB_EXPECT_ERR(nb_call_map(c, -1, 1, (int[]){1}), NB_ERR_INVALID_ARG, "negative");
    NB_EXPECT_ERR(nb_call_map_named(c, NULL, 1, (int[]){1}), NB_ERR_INVALID_ARG, "name is NULL");
    NB_EXPECT_OK(nb_call_map(c, 0, 1, (int[]){1}));
    NB_EXPECT_ERR(nb_call_map(c, 0, 1, (int[]){0}), NB_ERR_INVALID_ARG, "mapped twice");
    NB_EXPECT_ERR(nb_call_result(c, NULL), NB_ERR_INVALID_ARG, "'into' is NULL");
    nb_tensor *t = NULL;
    NB_REQUIRE_OK(nb_tensor_zeros(cpu_dev(), NB_F32, 1, (int64_t[]){2}, &t));
    NB_EXPECT_OK(nb_call_result(c, t));
    NB_EXPECT_ERR(nb_call_result(c, t), NB_ERR_INVALID_ARG, "result given twice");
    /* The first setter error comes back from run. */
    nb_tensor *r = NULL;
    NB_EXPECT_ERR(nb_call_run(c, &r), NB_ERR_INVALID_ARG, "argument index -1 is negative");
    NB_EXPECT(r == NULL);
    NB_REQUIRE_OK(nb_call_begin(fn("fill"), &c));
    NB_EXPECT_ERR(nb_call_arg(c, 5, t), NB_ERR_INVALID_ARG, "too many arguments");
    NB_EXPECT_ERR(nb_call_run_grid(c, (int64_t[]){1, 1, 1}), NB_ERR_INVALID_ARG, "too many");
    NB_REQUIRE_OK(nb_call_begin(fn("fill"), &c));
    NB_EXPECT_ERR(nb_call_run_grid(c, NULL), NB_ERR_INVALID_ARG, "grid is NULL");
    /* More than 64 arguments. */
    NB_REQUIRE_OK(nb_call_begin(fn("add"), &c));
    nb_status last = NB_OK;
    for (int i = 0; i < 70; i++) last = nb_call_arg(c, 0, t);
    NB_EXPECT(last == NB_ERR_INVALID_ARG && strstr(nb_last_error(), "more than 64 arguments"));
    nb_call_free(c);
    nb_tensor_free(t);
}

/* Runs f with (name or index, tensor or value) arguments and expects an error. */
#define RUN_ERR(setup, code, msg)                                                              \
    do {                                                                                       \
        nb_call *c_ = NULL;                                                                    \
        nb_tensor *r_ = NULL;                                                                  \
        NB_REQUIRE_OK(nb_call_begin(f, &c_));                                                  \
        nb_call *c = c_;                                                                       \
        setup;                                                                                 \
        NB_EXPECT_ERR(nb_call_run(c_, &r_), code, msg);                                        \
        NB_EXPECT(r_ == NULL);                                                                 \
    } while (0)

static void test_bind_errors(void) {
    nb_device *d = cpu_dev();
    float z[12] = {0};
    nb_tensor *f3 = arr(d, NB_F32, 1, (int64_t[]){3}, z), *f2 = arr(d, NB_F32, 1, (int64_t[]){2}, z);
    nb_tensor *f23 = arr(d, NB_F32, 2, (int64_t[]){2, 3}, z), *f0 = arr(d, NB_F32, 0, NULL, z);
    nb_tensor *i2 = arr(d, NB_I32, 1, (int64_t[]){2}, z), *b2 = arr(d, NB_BOOL, 1, (int64_t[]){2}, z);
    nb_func *f = fn("add");
    RUN_ERR((void)c, NB_ERR_INVALID_ARG, "add: missing argument for parameter 'a'");
    RUN_ERR((nb_call_arg(c, 0, f3), nb_call_arg(c, 1, f2)), NB_ERR_SHAPE,
            "add: cannot broadcast argument 'a' (f32[3], call shape [3]) with argument 'b' (f32[2], "
            "call shape [2]): kernel dim 0 is 3 vs 2");
    RUN_ERR((nb_call_arg(c, 0, f3), nb_call_arg_named(c, "zz", f3)), NB_ERR_NOT_FOUND,
            "add: no parameter named 'zz' in float add(float a, float b) (parameters: a, b)");
    RUN_ERR((nb_call_arg(c, 0, f3), nb_call_arg_named(c, "a", f3)), NB_ERR_INVALID_ARG,
            "argument 'a' is given twice");
    RUN_ERR((nb_call_arg(c, 0, f3), nb_call_arg(c, 1, b2)), NB_ERR_DTYPE,
            "argument 'b' is bool[2] but parameter 'b' is float: bool data cannot feed a "
            "floating-point parameter");
    RUN_ERR((nb_call_arg(c, 0, f3), nb_call_arg_alloc(c, 1, &r_)), NB_ERR_INVALID_ARG,
            "only out parameters can be allocated by the call; 'b' is an input");
    RUN_ERR((nb_call_arg(c, 0, f3), nb_call_arg(c, 1, f3), nb_call_map(c, 1, 2, (int[]){0, 1})),
            NB_ERR_SHAPE, "the map of argument 'b' has 2 dims but its call shape [3] has 1");
    RUN_ERR((nb_call_arg(c, 0, f3), nb_call_arg(c, 1, f3), nb_call_map_named(c, "q", 1, (int[]){0})),
            NB_ERR_NOT_FOUND, "map for unknown parameter 'q'");
    RUN_ERR((nb_call_arg(c, 0, f3), nb_call_arg(c, 1, f3), nb_call_result(c, f2)), NB_ERR_SHAPE,
            "cannot broadcast argument 'a' (f32[3], call shape [3]) with argument '_result'");
    RUN_ERR((nb_call_arg(c, 0, f3), nb_call_arg(c, 1, f3), nb_call_result(c, i2)), NB_ERR_DTYPE,
            "argument '_result' is i32[2] but parameter '_result' is float");
    RUN_ERR((nb_call_arg(c, 0, f3), nb_call_arg(c, 1, f3), nb_call_result(c, f0)), NB_ERR_SHAPE,
            "argument '_result' (f32, call shape []) is written by the call, so its call shape must "
            "be the kernel shape [3]");
    /* A broadcast view cannot be written. */
    nb_tensor *bview = NULL;
    NB_REQUIRE_OK(nb_tensor_broadcast_to(f0, 1, (int64_t[]){3}, &bview));
    RUN_ERR((nb_call_arg(c, 0, f3), nb_call_arg(c, 1, f3), nb_call_result(c, bview)), NB_ERR_LAYOUT,
            "is a broadcast view (stride 0 in dim 0)");
    nb_tensor_free(bview);

    f = fn("scale");
    RUN_ERR((nb_call_arg(c, 0, f2), nb_call_arg_double(c, 1, 1)), NB_ERR_SHAPE,
            "scale: argument 'v' has shape [2] but parameter 'v' is float3 which needs at least 1 dim "
            "ending in [3]");
    RUN_ERR((nb_call_arg(c, 0, f3), nb_call_arg_double(c, 1, 2), nb_call_map(c, 1, 1, (int[]){0})),
            NB_ERR_INVALID_ARG, "argument 's' is a single value; only arrays can be mapped");
    /* Kernel dim 7 makes the kernel rank 8; with the float3 value the result would need 9. */
    RUN_ERR((nb_call_arg(c, 0, f23), nb_call_arg_double(c, 1, 2), nb_call_map(c, 0, 1, (int[]){7})),
            NB_ERR_SHAPE, "scale: the output would have 9 dims (at most 8)");
    f = fn("bump");
    RUN_ERR((nb_call_arg_double(c, 0, 1), nb_call_arg_double(c, 1, 1)), NB_ERR_INVALID_ARG,
            "bump: parameter 'x' is inout, so its argument must be a tensor to write to (got a host "
            "value f64)");
    RUN_ERR((nb_call_arg_alloc(c, 0, &r_), nb_call_arg_double(c, 1, 1)), NB_ERR_INVALID_ARG,
            "only out parameters can be allocated by the call; 'x' is inout");
    RUN_ERR((nb_call_arg(c, 0, i2), nb_call_arg_double(c, 1, 1)), NB_ERR_DTYPE,
            "argument 'x' is i32[2] but parameter 'x' is float: integer data cannot receive the "
            "values of a floating-point parameter");
    RUN_ERR((nb_call_arg(c, 0, f0), nb_call_arg(c, 1, f3)), NB_ERR_SHAPE,
            "argument 'x' (f32, call shape []) is written by the call");
    f = fn("split");
    RUN_ERR((nb_call_arg(c, 0, f23)), NB_ERR_INVALID_ARG,
            "split: missing argument for parameter 'x' (an out parameter needs a tensor or "
            "nb_call_arg_alloc)");
    f = fn("weigh");
    RUN_ERR((nb_call_arg(c, 0, f3)), NB_ERR_INVALID_ARG,
            "weigh: parameter 'p' is a struct (P): bind its fields one by one by name (p.xy, p.w)");
    RUN_ERR((nb_call_arg_named(c, "p.w", f3)), NB_ERR_INVALID_ARG,
            "missing argument for parameter 'p.xy'");
    f = fn("make");
    RUN_ERR((nb_call_arg_double(c, 0, 1)), NB_ERR_UNSUPPORTED, "returns a struct");
    f = fn("nothing");
    RUN_ERR((nb_call_arg_double(c, 0, 1), nb_call_result(c, f3)), NB_ERR_INVALID_ARG,
            "void nothing(float x) returns nothing, so it has no result to write into");
    f = fn("twice");
    RUN_ERR((nb_call_arg(c, 0, b2)), NB_ERR_INVALID_ARG,
            "twice: no overload matches the arguments (candidates: int twice(int x); float "
            "twice(float x))");
    f = fn("gather");
    RUN_ERR((nb_call_arg(c, 0, f23), nb_call_arg_int(c, 1, 0)), NB_ERR_SHAPE,
            "gather: argument 't' is f32[2,3] but parameter 't' is Tensor<float,1> (needs f32 with 1 "
            "dim)");
    RUN_ERR((nb_call_arg(c, 0, i2), nb_call_arg_int(c, 1, 0)), NB_ERR_DTYPE,
            "argument 't' is i32[2] but parameter 't' is Tensor<float,1>");
    RUN_ERR((nb_call_arg(c, 0, f3), nb_call_arg_int(c, 1, 0), nb_call_map(c, 0, 1, (int[]){0})),
            NB_ERR_INVALID_ARG, "a whole array, which cannot be mapped");
    RUN_ERR((nb_call_arg_alloc(c, 0, &r_), nb_call_arg_int(c, 1, 0)), NB_ERR_INVALID_ARG,
            "only out parameters");
    /* [Kernel] vs plain functions. */
    f = fn("fill");
    RUN_ERR((nb_call_arg(c, 0, f3), nb_call_arg_double(c, 1, 1)), NB_ERR_INVALID_ARG,
            "fill: [Kernel] functions are launched over a grid (nb_call_run_grid)");
    {
        nb_call *c = NULL;
        NB_REQUIRE_OK(nb_call_begin(f, &c));
        nb_call_arg(c, 0, f3);
        nb_call_arg(c, 1, f3);
        NB_EXPECT_ERR(nb_call_run_grid(c, (int64_t[]){3, 1, 1}), NB_ERR_INVALID_ARG,
                      "[Kernel] arguments must be single values or whole arrays");
        NB_REQUIRE_OK(nb_call_begin(f, &c));
        nb_call_arg(c, 0, f3);
        nb_call_arg_double(c, 1, 1);
        NB_EXPECT_ERR(nb_call_run_grid(c, (int64_t[]){3, -1, 1}), NB_ERR_INVALID_ARG,
                      "grid[1] is negative");
        NB_REQUIRE_OK(nb_call_begin(fn("add"), &c));
        nb_call_arg(c, 0, f3);
        nb_call_arg(c, 1, f3);
        NB_EXPECT_ERR(nb_call_run_grid(c, (int64_t[]){3, 1, 1}), NB_ERR_INVALID_ARG,
                      "only [Kernel] functions are launched over a grid");
    }
    NB_EXPECT_ERR(nb_func_call(fn("add"), -1, NULL, NULL), NB_ERR_INVALID_ARG, "bad nargs");
    nb_tensor *two[2] = {f3, NULL};
    NB_EXPECT_ERR(nb_func_call(fn("add"), 2, two, NULL), NB_ERR_INVALID_ARG, "is NULL");
    nb_tensor_free(f3);
    nb_tensor_free(f2);
    nb_tensor_free(f23);
    nb_tensor_free(f0);
    nb_tensor_free(i2);
    nb_tensor_free(b2);
    nb_module_free(g_m);
    g_m = NULL;
}

/* Arrays on another device than the module. */
static void test_device_mismatch(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *g = NULL;
    NB_REQUIRE_OK(nb_device_open("cuda", &g));
    nb_module *m = NULL;
    NB_REQUIRE_OK(nb_module_load_source(g, "dm.nb", SRC, NULL, &m));
    nb_func *f = NULL;
    NB_REQUIRE_OK(nb_module_func(m, "add", &f));
    float z[2] = {0};
    nb_tensor *t = arr(cpu_dev(), NB_F32, 1, (int64_t[]){2}, z), *r = NULL;
    nb_tensor *args[2] = {t, t};
    NB_EXPECT_ERR(nb_func_call(f, 2, args, &r), NB_ERR_DEVICE,
                  "add: argument 'a' is on cpu but the module runs on cuda:0");
    nb_call *c = NULL;
    nb_tensor *tg = arr(g, NB_F32, 1, (int64_t[]){2}, z);
    NB_REQUIRE_OK(nb_call_begin(f, &c));
    nb_call_arg(c, 0, tg);
    nb_call_arg(c, 1, tg);
    nb_call_result(c, t);
    NB_EXPECT_ERR(nb_call_run(c, &r), NB_ERR_DEVICE,
                  "the result array is on cpu but the module runs on cuda:0");
    nb_tensor_free(t);
    nb_tensor_free(tg);
    nb_module_free(m);
    nb_device_close(g);
}

/* Defaults, struct results and the overload a call ran. */
static void test_defaults_results(void) {
    nb_device *dev = cpu_dev();
    nb_module *m = NULL;
    NB_REQUIRE_OK(nb_module_load_source(
        dev, "d.nb",
        "float sc(float x, float s = 2.0, float3 o = float3(1, 2, 3)) { return x * s + o.z; }\n"
        "struct Q { float3 pos; int n; };\n"
        "float nd(float x, Q q = Q(float3(0, 0, 0), 1)) { return x; }\n"
        "Q mk(float x) { Q q; q.pos = float3(x, 2 * x, 3 * x); q.n = int(x) + 1; return q; }\n"
        "float ov(float x) { return x + 1; }\n"
        "int ov(int x, int y) { return x * y; }\n",
        NULL, &m));
    nb_func *sc, *nd, *mk, *ov;
    NB_REQUIRE_OK(nb_module_func(m, "sc", &sc));
    NB_REQUIRE_OK(nb_module_func(m, "nd", &nd));
    NB_REQUIRE_OK(nb_module_func(m, "mk", &mk));
    NB_REQUIRE_OK(nb_module_func(m, "ov", &ov));
    NB_EXPECT(nb_func_param_has_default(sc, 0, 0) == 0);
    NB_EXPECT(nb_func_param_has_default(sc, 0, 1) == 1);
    NB_EXPECT(nb_func_param_has_default(sc, 0, 2) == 1);
    NB_EXPECT(nb_func_param_has_default(sc, 0, 3) == 0);

    /* unbound defaults: s = 2, o.z = 3 */
    float x2[2] = {1, 2}, y[8];
    int64_t s2[1] = {2};
    nb_tensor *x = arr(dev, NB_F32, 1, s2, x2), *r = NULL;
    nb_call *c = NULL;
    NB_REQUIRE_OK(nb_call_begin(sc, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, x));
    NB_REQUIRE_OK(nb_call_run(c, &r));
    NB_EXPECT(read_f32(r, y, 2) && y[0] == 5 && y[1] == 7);
    nb_tensor_free(r);
    NB_REQUIRE_OK(nb_call_begin(sc, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, x));
    NB_EXPECT_OK(nb_call_arg_double(c, 1, 10));
    NB_REQUIRE_OK(nb_call_run(c, &r));
    NB_EXPECT(read_f32(r, y, 2) && y[0] == 13 && y[1] == 23);
    nb_tensor_free(r);
    /* a struct default cannot be folded on the host */
    NB_REQUIRE_OK(nb_call_begin(nd, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, x));
    NB_EXPECT_ERR(nb_call_run(c, &r), NB_ERR_UNSUPPORTED, "parameter 'q' (Q) has a default value the host cannot evaluate");

    /* struct results: one array per field, in result-leaf order */
    NB_EXPECT(nb_func_result_count(mk, 0) == 2);
    nb_leaf_info li;
    NB_EXPECT(nb_func_result(mk, 0, &li) == 1 && li.value_rank == -1);
    NB_EXPECT_OK(nb_func_result_leaf(mk, 0, 1, &li));
    NB_EXPECT(!strcmp(li.path, "_result.n") && li.dtype == NB_I32);
    NB_EXPECT_ERR(nb_func_result_leaf(mk, 0, 2, &li), NB_ERR_INVALID_ARG, "out of range");
    nb_tensor *res[4] = {0};
    int n = -1;
    NB_REQUIRE_OK(nb_call_begin(mk, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, x));
    NB_REQUIRE_OK(nb_call_run_results(c, res, 4, &n));
    NB_EXPECT(n == 2 && nb_tensor_ndim(res[0]) == 2 && nb_tensor_shape(res[0])[1] == 3);
    NB_EXPECT(read_f32(res[0], y, 6) && y[0] == 1 && y[4] == 4 && y[5] == 6);
    int32_t ni[2] = {0, 0};
    NB_EXPECT(nb_tensor_to_host(res[1], ni, sizeof ni) == NB_OK && ni[0] == 2 && ni[1] == 3);
    for (int i = 0; i < n; i++) nb_tensor_free(res[i]);
    /* a field written into a given array */
    int32_t z2[2] = {0, 0};
    nb_tensor *into = arr(dev, NB_I32, 1, s2, z2);
    NB_REQUIRE_OK(nb_call_begin(mk, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, x));
    NB_EXPECT_OK(nb_call_result_named(c, "_result.n", into));
    NB_REQUIRE_OK(nb_call_run_results(c, res, 4, &n));
    NB_EXPECT(n == 2);
    for (int i = 0; i < n; i++) nb_tensor_free(res[i]);
    NB_EXPECT(nb_tensor_to_host(into, ni, sizeof ni) == NB_OK && ni[0] == 2 && ni[1] == 3);
    /* errors: too little room, a struct into one array, an unknown field, a non-matching array */
    NB_REQUIRE_OK(nb_call_begin(mk, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, x));
    NB_EXPECT_ERR(nb_call_run_results(c, res, 1, &n), NB_ERR_INVALID_ARG, "2 result leaves but room for 1");
    NB_REQUIRE_OK(nb_call_begin(mk, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, x));
    NB_EXPECT_OK(nb_call_result(c, into));
    NB_EXPECT_ERR(nb_call_run_results(c, res, 4, &n), NB_ERR_INVALID_ARG, "returns a struct, which one array cannot hold");
    NB_REQUIRE_OK(nb_call_begin(mk, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, x));
    NB_EXPECT_OK(nb_call_result_named(c, "_result.m", into));
    NB_EXPECT_ERR(nb_call_run_results(c, res, 4, &n), NB_ERR_NOT_FOUND, "'_result.m' is not a result field");
    NB_REQUIRE_OK(nb_call_begin(mk, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, x));
    NB_EXPECT_OK(nb_call_result_named(c, "_result.pos", into));
    NB_EXPECT_ERR(nb_call_run_results(c, res, 4, &n), NB_ERR_SHAPE, "_result.pos");
    NB_EXPECT(n == 0 && res[0] == NULL);
    NB_REQUIRE_OK(nb_call_begin(mk, &c));
    NB_EXPECT_ERR(nb_call_result_named(c, "pos", into), NB_ERR_INVALID_ARG, "not a result field path");
    nb_call_free(c);

    /* the overload a call ran */
    int used = 5;
    NB_REQUIRE_OK(nb_call_begin(ov, &c));
    NB_EXPECT_OK(nb_call_report_overload(c, &used));
    NB_EXPECT(used == -1);
    NB_EXPECT_OK(nb_call_arg_int(c, 0, 3));
    NB_EXPECT_OK(nb_call_arg_int(c, 1, 4));
    NB_REQUIRE_OK(nb_call_run(c, &r));
    NB_EXPECT(used == 1);
    nb_tensor_free(r);
    NB_REQUIRE_OK(nb_call_begin(ov, &c));
    NB_EXPECT_OK(nb_call_report_overload(c, &used));
    NB_EXPECT_OK(nb_call_arg(c, 0, x));
    NB_REQUIRE_OK(nb_call_run_results(c, res, 4, &n));
    NB_EXPECT(used == 0 && n == 1);
    nb_tensor_free(res[0]);
    nb_tensor_free(into);
    nb_tensor_free(x);
    nb_module_free(m);
}

/* Bounds-checked indexing: out-of-range tensor and local-array indices are errors naming the
 * tensor / array, the index and the extent; nothing outside the arrays is touched, and the module
 * stays usable (the record of the first bad access is reset). */
static void bounds(nb_device *dev) {
    static const char *BSRC =
        "float gather(Tensor<float, 1> t, int i) { return t[i]; }\n"
        "float pixel(Tensor<float, 2> img, int y, int x) { return img[y, x]; }\n"
        "[Kernel] void fill(Tensor<float, 1> dst, float v) { uint3 id = dispatch_id(); dst[id.x] = v + float(id.x); }\n"
        "float loc(int i) { float a[4] = {1, 2, 3, 4}; return a[i]; }\n"
        "struct Img { Tensor<float, 1> px; float gain; };\n"
        "float sfetch(Img s, int i) { return s.px[i] * s.gain; }\n";
    nb_module *m = NULL;
    NB_REQUIRE_OK(nb_module_load_source(dev, "bounds.nb", BSRC, NULL, &m));
    nb_func *gather, *pixel, *fill, *loc, *sfetch;
    NB_REQUIRE_OK(nb_module_func(m, "gather", &gather));
    NB_REQUIRE_OK(nb_module_func(m, "pixel", &pixel));
    NB_REQUIRE_OK(nb_module_func(m, "fill", &fill));
    NB_REQUIRE_OK(nb_module_func(m, "loc", &loc));
    NB_REQUIRE_OK(nb_module_func(m, "sfetch", &sfetch));
    float d4[4] = {10, 20, 30, 40}, y[8];
    float d12[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    nb_tensor *t4 = arr(dev, NB_F32, 1, (int64_t[]){4}, d4);
    nb_tensor *img = arr(dev, NB_F32, 2, (int64_t[]){4, 3}, d12);
    NB_EXPECT(t4 && img);
    if (!t4 || !img) return;
    nb_call *c;
    nb_tensor *r = NULL;
    int32_t ix[3] = {3, 7, 0};
    nb_tensor *tix = arr(dev, NB_I32, 1, (int64_t[]){3}, ix);
    NB_EXPECT(tix != NULL);
    if (!tix) return;

    /* an index from data: one bad element fails the call */
    NB_REQUIRE_OK(nb_call_begin(gather, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, t4));
    NB_EXPECT_OK(nb_call_arg(c, 1, tix));
    NB_EXPECT_ERR(nb_call_run(c, &r), NB_ERR_SHAPE,
                  "out-of-bounds index [7] into tensor 't' of shape [4] in function 'gather'");
    NB_EXPECT(r == NULL);
    NB_REQUIRE_OK(nb_call_begin(gather, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, t4));
    NB_EXPECT_OK(nb_call_arg_int(c, 1, -3));
    NB_EXPECT_ERR(nb_call_run(c, &r), NB_ERR_SHAPE, "out-of-bounds index [-3] into tensor 't' of shape [4]");
    NB_REQUIRE_OK(nb_call_begin(gather, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, t4));
    NB_EXPECT_OK(nb_call_arg_int(c, 1, 2000000000));
    NB_EXPECT_ERR(nb_call_run(c, &r), NB_ERR_SHAPE, "index [2000000000] into tensor 't'");
    /* the module still works, and the error does not stick */
    NB_REQUIRE_OK(nb_call_begin(gather, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, t4));
    NB_EXPECT_OK(nb_call_arg_int(c, 1, 3));
    NB_REQUIRE_OK(nb_call_run(c, &r));
    NB_EXPECT(read_f32(r, y, 1) && y[0] == 40);
    nb_tensor_free(r);
    r = NULL;

    /* every dimension against its own extent: [0, 3] lies inside the buffer but not the shape */
    NB_REQUIRE_OK(nb_call_begin(pixel, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, img));
    NB_EXPECT_OK(nb_call_arg_int(c, 1, 0));
    NB_EXPECT_OK(nb_call_arg_int(c, 2, 3));
    NB_EXPECT_ERR(nb_call_run(c, &r), NB_ERR_SHAPE,
                  "out-of-bounds index [0, 3] into tensor 'img' of shape [4, 3] in function 'pixel'");
    NB_REQUIRE_OK(nb_call_begin(pixel, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, img));
    NB_EXPECT_OK(nb_call_arg_int(c, 1, 7));
    NB_EXPECT_OK(nb_call_arg_int(c, 2, 3));
    NB_EXPECT_ERR(nb_call_run(c, &r), NB_ERR_SHAPE, "out-of-bounds index [7, 3] into tensor 'img' of shape [4, 3]");
    NB_REQUIRE_OK(nb_call_begin(pixel, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, img));
    NB_EXPECT_OK(nb_call_arg_int(c, 1, 3));
    NB_EXPECT_OK(nb_call_arg_int(c, 2, 2));
    NB_REQUIRE_OK(nb_call_run(c, &r));
    NB_EXPECT(read_f32(r, y, 1) && y[0] == 12);
    nb_tensor_free(r);
    r = NULL;

    /* a [Kernel] grid larger than the tensor: the 4 elements are written, nothing past them */
    nb_tensor *big = NULL, *dst = NULL;
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, (int64_t[]){8}, &big));
    NB_REQUIRE_OK(nb_tensor_slice(big, 0, 0, 4, 1, &dst));
    NB_REQUIRE_OK(nb_call_begin(fill, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, dst));
    NB_EXPECT_OK(nb_call_arg_double(c, 1, 100));
    NB_EXPECT_ERR(nb_call_run_grid(c, (int64_t[]){7, 1, 1}), NB_ERR_SHAPE,
                  "into tensor 'dst' of shape [4] in function 'fill'");
    NB_EXPECT(read_f32(big, y, 8) && y[0] == 100 && y[3] == 103 && y[4] == 0 && y[5] == 0 && y[6] == 0 && y[7] == 0);
    nb_tensor_free(dst);
    nb_tensor_free(big);

    /* a local array */
    NB_REQUIRE_OK(nb_call_begin(loc, &c));
    NB_EXPECT_OK(nb_call_arg_int(c, 0, 5));
    NB_EXPECT_ERR(nb_call_run(c, &r), NB_ERR_SHAPE, "out-of-bounds index 5 into array 'a' of length 4 in function 'loc'");
    NB_REQUIRE_OK(nb_call_begin(loc, &c));
    NB_EXPECT_OK(nb_call_arg_int(c, 0, 2));
    NB_REQUIRE_OK(nb_call_run(c, &r));
    NB_EXPECT(read_f32(r, y, 1) && y[0] == 3);
    nb_tensor_free(r);
    r = NULL;

    /* a tensor field of a struct parameter is named by its path */
    float two = 2;
    nb_tensor *gain = arr(dev, NB_F32, 0, NULL, &two);
    NB_EXPECT(gain != NULL);
    NB_REQUIRE_OK(nb_call_begin(sfetch, &c));
    NB_EXPECT_OK(nb_call_arg_named(c, "s.px", t4));
    NB_EXPECT_OK(nb_call_arg_named(c, "s.gain", gain));
    NB_EXPECT_OK(nb_call_arg_int(c, 1, 9));
    NB_EXPECT_ERR(nb_call_run(c, &r), NB_ERR_SHAPE, "out-of-bounds index [9] into tensor 's.px' of shape [4] in function 'sfetch'");
    nb_tensor_free(gain);

    nb_tensor_free(tix);
    nb_tensor_free(img);
    nb_tensor_free(t4);
    nb_module_free(m);
}

static void test_bounds_cpu(void) { bounds(cpu_dev()); }

static void test_bounds_cuda(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *g = NULL;
    NB_REQUIRE_OK(nb_device_open("cuda", &g));
    bounds(g);
    nb_device_close(g);
}

static void test_cleanup(void) { nb_device_close(cpu_dev()); }

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_functional_cpu, test_functional_cuda, test_kernel_cache, test_defines,
                 test_threads, test_reflection, test_load_errors, test_setter_errors,
                 test_bind_errors, test_device_mismatch, test_defaults_results, test_bounds_cpu,
                 test_bounds_cuda, test_cleanup);
}

/* Generator arguments (include/nabla/module.h nb_generator: SlangPy's call_id, thread_id, grid,
 * wang_hash, rand_float) from C: the values each gives per kernel index, how grid shapes the
 * kernel, and the errors for parameter types a generator cannot fill. CPU, and CUDA when there is
 * a GPU (the same checks). */
#include <string.h>

#include "device/cuda/cuda_api.h"
#include "lang/compiler.h"
#include "nabla/alloc.h"
#include "nabla/module.h"
#include "nb_test.h"

static const char *SRC =
    "int2 id2(int2 v) { return v; }\n"
    "int2 ida(int v[2]) { return int2(v[0], v[1]); }\n"
    "int3 id3(int3 v) { return v; }\n"
    "uint idu(uint v) { return v; }\n"
    "uint3 idu3(uint3 v) { return v; }\n"
    "float3 idf3(float3 v) { return v; }\n"
    "float idf(float v) { return v; }\n"
    "float addf(float a, int b) { return a + float(b); }\n"
    "struct S { int a; };\n"
    "int ids(S s) { return s.a; }\n"
    "void outi(out int x) { x = 1; }\n";

static uint32_t wang(uint32_t s) { return nb_wang_hash(s); }

static nb_tensor *empty_i32(nb_device *dev, int nd, const int64_t *shape) {
    nb_tensor *t = NULL;
    if (nb_tensor_empty(dev, NB_I32, nd, shape, &t) != NB_OK) return NULL;
    return t;
}

static void run_gen(nb_module *m, const char *fn, const nb_generator *g, nb_tensor *into) {
    nb_func *f = NULL;
    NB_REQUIRE_OK(nb_module_func(m, fn, &f));
    nb_call *c = NULL;
    NB_REQUIRE_OK(nb_call_begin(f, &c));
    NB_EXPECT_OK(nb_call_arg_generator(c, 0, g));
    NB_EXPECT_OK(nb_call_result(c, into));
    NB_EXPECT_OK(nb_call_run(c, NULL));
}

static void gens(nb_device *dev) {
    nb_module *m = NULL;
    NB_REQUIRE_OK(nb_module_load_source(dev, "gen.nb", SRC, NULL, &m));
    nb_generator g;
    int32_t v[4 * 3 * 3];
    int64_t s432[3] = {4, 3, 2};

    /* call_id into int2: x = the last (fastest) kernel dim */
    nb_tensor *r = empty_i32(dev, 3, s432);
    nb_generator_init(&g, NB_GEN_CALL_ID);
    run_gen(m, "id2", &g, r);
    NB_EXPECT_OK(nb_tensor_to_host(r, v, 24 * 4));
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) NB_EXPECT(v[(i * 3 + j) * 2] == j && v[(i * 3 + j) * 2 + 1] == i);
    /* into int[2]: the dims in order */
    run_gen(m, "ida", &g, r);
    NB_EXPECT_OK(nb_tensor_to_host(r, v, 24 * 4));
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) NB_EXPECT(v[(i * 3 + j) * 2] == i && v[(i * 3 + j) * 2 + 1] == j);
    /* int3 over a 2-d call: (x, y, 0) */
    int64_t s433[3] = {4, 3, 3};
    nb_tensor *r3 = empty_i32(dev, 3, s433);
    run_gen(m, "id3", &g, r3);
    NB_EXPECT_OK(nb_tensor_to_host(r3, v, 36 * 4));
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) {
            const int32_t *e = v + (i * 3 + j) * 3;
            NB_EXPECT(e[0] == j && e[1] == i && e[2] == 0);
        }
    nb_tensor_free(r3);

    /* grid(shape=(4,3), stride=(2,5), offset=(1,-1)) gives the kernel its shape */
    nb_generator_init(&g, NB_GEN_GRID);
    g.dims = 2;
    g.shape[0] = 4, g.shape[1] = 3;
    g.stride[0] = 2, g.stride[1] = 5;
    g.offset[0] = 1, g.offset[1] = -1;
    nb_func *id2 = NULL;
    NB_REQUIRE_OK(nb_module_func(m, "id2", &id2));
    nb_call *c = NULL;
    nb_tensor *out = NULL;
    NB_REQUIRE_OK(nb_call_begin(id2, &c));
    NB_EXPECT_OK(nb_call_arg_generator(c, 0, &g));
    NB_REQUIRE_OK(nb_call_run(c, &out));
    NB_EXPECT(nb_tensor_ndim(out) == 3 && nb_tensor_shape(out)[0] == 4 && nb_tensor_shape(out)[1] == 3);
    NB_EXPECT_OK(nb_tensor_to_host(out, v, 24 * 4));
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            NB_EXPECT(v[(i * 3 + j) * 2] == -1 + 5 * j && v[(i * 3 + j) * 2 + 1] == 1 + 2 * i);
    nb_tensor_free(out);
    /* -1 extents are inferred from the result array */
    g.shape[0] = g.shape[1] = -1;
    run_gen(m, "id2", &g, r);
    NB_EXPECT_OK(nb_tensor_to_host(r, v, 24 * 4));
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            NB_EXPECT(v[(i * 3 + j) * 2] == -1 + 5 * j && v[(i * 3 + j) * 2 + 1] == 1 + 2 * i);
    /* a grid of another shape than the result is a shape error naming it */
    g.shape[0] = 8, g.shape[1] = 8;
    NB_REQUIRE_OK(nb_call_begin(id2, &c));
    NB_EXPECT_OK(nb_call_arg_generator(c, 0, &g));
    NB_EXPECT_OK(nb_call_result(c, r));
    NB_EXPECT_ERR(nb_call_run(c, NULL), NB_ERR_SHAPE, "grid()");
    nb_tensor_free(r);

    /* thread_id: the linear index as x; wang_hash as SlangPy computes it */
    int64_t s16[1] = {16}, s163[2] = {16, 3};
    nb_tensor *ru = NULL, *ru3 = NULL;
    NB_REQUIRE_OK(nb_tensor_empty(dev, NB_U32, 1, s16, &ru));
    NB_REQUIRE_OK(nb_tensor_empty(dev, NB_U32, 2, s163, &ru3));
    uint32_t u[48];
    nb_generator_init(&g, NB_GEN_THREAD_ID);
    run_gen(m, "idu3", &g, ru3);
    NB_EXPECT_OK(nb_tensor_to_host(ru3, u, 48 * 4));
    for (int i = 0; i < 16; i++) NB_EXPECT(u[3 * i] == (uint32_t)i && u[3 * i + 1] == 0 && u[3 * i + 2] == 0);
    for (int warm = 0; warm < 3; warm++)
        for (int hs = 0; hs < 2; hs++) {
            nb_generator_init(&g, NB_GEN_WANG_HASH);
            g.warmup = warm;
            g.hash_seed = hs;
            g.seed = 12345u;
            uint32_t seed = hs ? wang(12345u) : 12345u;
            run_gen(m, "idu", &g, ru);
            NB_EXPECT_OK(nb_tensor_to_host(ru, u, 16 * 4));
            for (uint32_t i = 0; i < 16; i++) {
                uint32_t h = i;
                for (int w = 0; w < warm; w++) h = wang(h);
                NB_EXPECT(u[i] == wang(h ^ seed));
            }
            run_gen(m, "idu3", &g, ru3);
            NB_EXPECT_OK(nb_tensor_to_host(ru3, u, 48 * 4));
            for (uint32_t i = 0; i < 16; i++) {
                uint32_t h = i * 3;
                for (int w = 0; w < warm; w++) h = wang(h);
                h ^= seed;
                for (int k = 0; k < 3; k++) {
                    h = wang(h);
                    NB_EXPECT(u[3 * i + k] == h);
                }
            }
        }
    /* rand_float in [1, 3): the same hashes, 23 bits each */
    nb_tensor *rf = NULL;
    NB_REQUIRE_OK(nb_tensor_empty(dev, NB_F32, 2, s163, &rf));
    nb_generator_init(&g, NB_GEN_RAND_FLOAT);
    g.min = 1.0f, g.max = 3.0f;
    run_gen(m, "idf3", &g, rf);
    float fv[48];
    NB_EXPECT_OK(nb_tensor_to_host(rf, fv, 48 * 4));
    for (uint32_t i = 0; i < 16; i++) {
        uint32_t h = (i * 3) ^ wang(2640457667u);
        for (int k = 0; k < 3; k++) {
            h = wang(h);
            NB_EXPECT_NEAR(fv[3 * i + k], 1.0 + 2.0 * (double)(h & 0x7fffff) / 8388608.0, 1e-6);
            NB_EXPECT(fv[3 * i + k] >= 1.0f && fv[3 * i + k] < 3.0f);
        }
    }
    nb_tensor_free(rf);

    /* a generator beside an ordinary argument: the array gives the shape */
    nb_func *addf = NULL;
    NB_REQUIRE_OK(nb_module_func(m, "addf", &addf));
    float a5[5] = {10, 20, 30, 40, 50}, y5[5];
    int64_t s5[1] = {5};
    nb_tensor *a = NULL, *y = NULL;
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, s5, a5, &a));
    nb_generator_init(&g, NB_GEN_CALL_ID);
    NB_REQUIRE_OK(nb_call_begin(addf, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, a));
    NB_EXPECT_OK(nb_call_arg_generator_named(c, "b", &g));
    NB_REQUIRE_OK(nb_call_run(c, &y));
    NB_EXPECT_OK(nb_tensor_to_host(y, y5, sizeof y5));
    for (int i = 0; i < 5; i++) NB_EXPECT(y5[i] == a5[i] + (float)i);
    nb_tensor_free(y);
    nb_tensor_free(a);

    /* ---- errors: parameter types a generator cannot fill ---- */
    struct { const char *fn; nb_generator_kind k; nb_status code; const char *msg; } bad[] = {
        {"idf", NB_GEN_CALL_ID, NB_ERR_INVALID_ARG, "call_id() cannot fill parameter 'v' (float): it fills integer"},
        {"idu3", NB_GEN_RAND_FLOAT, NB_ERR_INVALID_ARG, "rand_float() cannot fill parameter 'v' (uint3)"},
        {"ida", NB_GEN_WANG_HASH, NB_ERR_INVALID_ARG, "not arrays"},
        {"ids", NB_GEN_CALL_ID, NB_ERR_INVALID_ARG, "is a struct"},
        {"outi", NB_GEN_THREAD_ID, NB_ERR_INVALID_ARG, "written by the call"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        nb_func *f = NULL;
        NB_REQUIRE_OK(nb_module_func(m, bad[i].fn, &f));
        nb_generator_init(&g, bad[i].k);
        NB_REQUIRE_OK(nb_call_begin(f, &c));
        NB_EXPECT_OK(nb_call_arg_generator(c, 0, &g));
        NB_EXPECT_ERR(nb_call_run(c, NULL), bad[i].code, bad[i].msg);
    }
    /* call_id without any shape: the kernel is rank 0 */
    nb_generator_init(&g, NB_GEN_CALL_ID);
    NB_REQUIRE_OK(nb_call_begin(id2, &c));
    NB_EXPECT_OK(nb_call_arg_generator(c, 0, &g));
    NB_EXPECT_ERR(nb_call_run(c, &out), NB_ERR_SHAPE, "needs a call of rank 2");
    /* dims that disagree with the parameter */
    g.dims = 3;
    NB_REQUIRE_OK(nb_call_begin(id2, &c));
    NB_EXPECT_OK(nb_call_arg_generator(c, 0, &g));
    NB_EXPECT_ERR(nb_call_run(c, &out), NB_ERR_INVALID_ARG, "dims=3");
    /* a 3-d grid for an int2 */
    nb_generator_init(&g, NB_GEN_GRID);
    g.dims = 3;
    NB_REQUIRE_OK(nb_call_begin(id2, &c));
    NB_EXPECT_OK(nb_call_arg_generator(c, 0, &g));
    NB_EXPECT_ERR(nb_call_run(c, &out), NB_ERR_INVALID_ARG, "a grid of 3 dims");
    /* setter errors */
    NB_REQUIRE_OK(nb_call_begin(id2, &c));
    g.dims = 0;
    NB_EXPECT_ERR(nb_call_arg_generator(c, 0, &g), NB_ERR_INVALID_ARG, "1 to 8 dims");
    NB_EXPECT_ERR(nb_call_arg_generator(c, 0, NULL), NB_ERR_INVALID_ARG, "NULL");
    nb_call_free(c);
    nb_tensor_free(ru);
    nb_tensor_free(ru3);
    nb_module_free(m);
}

static void test_generators_cpu(void) {
    nb_device *d = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &d));
    gens(d);
    nb_device_close(d);
}

static void test_generators_cuda(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *d = NULL;
    NB_REQUIRE_OK(nb_device_open("cuda", &d));
    gens(d);
    nb_device_close(d);
}

/* Struct methods as functions ("Particle.update"): reflection shows `this` first (inout for
 * [mutating]); a call over arrays writes the fields back; static methods take no `this`. */
static void test_struct_methods(void) {
    nb_device *d = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &d));
    nb_module *m = NULL;
    NB_REQUIRE_OK(nb_module_load_source(d, "p.nb",
                                        "struct P { float2 pos; float2 vel;\n"
                                        "  [mutating] void step(float dt) { pos += vel * dt; }\n"
                                        "  float speed() { return length(vel); }\n"
                                        "  static float twice(float x) { return 2 * x; } };\n",
                                        NULL, &m));
    nb_func *step = NULL, *speed = NULL, *twice = NULL, *bad = NULL;
    NB_REQUIRE_OK(nb_module_func(m, "P.step", &step));
    NB_REQUIRE_OK(nb_module_func(m, "P.speed", &speed));
    NB_REQUIRE_OK(nb_module_func(m, "P.twice", &twice));
    NB_EXPECT_ERR(nb_module_func(m, "P.fly", &bad), NB_ERR_NOT_FOUND, "P.fly");
    NB_EXPECT(!strcmp(nb_func_signature(step, 0), "void P.step(inout P this, float dt)"));
    NB_EXPECT(!strcmp(nb_func_signature(twice, 0), "static float P.twice(float x)"));
    NB_EXPECT(nb_func_param_count(step, 0) == 2 && !strcmp(nb_func_param_name(step, 0, 0), "this"));
    NB_EXPECT(nb_func_param_dir(step, 0, 0) == NB_ARG_INOUT && nb_func_param_dir(speed, 0, 0) == NB_ARG_IN);
    nb_leaf_info li;
    NB_EXPECT_OK(nb_func_leaf(step, 0, 1, &li));
    NB_EXPECT(!strcmp(li.path, "this.vel") && li.dir == NB_ARG_INOUT);
    float pos[4] = {0, 0, 1, 1}, vel[4] = {1, 2, 3, 4}, got[4];
    int64_t s22[2] = {2, 2};
    nb_tensor *tp = NULL, *tv = NULL, *r = NULL;
    NB_REQUIRE_OK(nb_tensor_from_host(d, NB_F32, 2, s22, pos, &tp));
    NB_REQUIRE_OK(nb_tensor_from_host(d, NB_F32, 2, s22, vel, &tv));
    nb_call *c = NULL;
    NB_REQUIRE_OK(nb_call_begin(step, &c));
    NB_EXPECT_OK(nb_call_arg_named(c, "this.pos", tp));
    NB_EXPECT_OK(nb_call_arg_named(c, "this.vel", tv));
    NB_EXPECT_OK(nb_call_arg_double(c, 1, 0.5));
    NB_REQUIRE_OK(nb_call_run(c, NULL));
    NB_EXPECT_OK(nb_tensor_to_host(tp, got, sizeof got));
    NB_EXPECT(got[0] == 0.5f && got[1] == 1.0f && got[2] == 2.5f && got[3] == 3.0f);
    NB_REQUIRE_OK(nb_call_begin(speed, &c));
    NB_EXPECT_OK(nb_call_arg_named(c, "this.pos", tp));
    NB_EXPECT_OK(nb_call_arg_named(c, "this.vel", tv));
    NB_REQUIRE_OK(nb_call_run(c, &r));
    NB_EXPECT_OK(nb_tensor_to_host(r, got, 2 * sizeof(float)));
    NB_EXPECT_NEAR(got[0], 2.2360680, 1e-6);
    NB_EXPECT_NEAR(got[1], 5.0, 1e-6);
    nb_tensor_free(r);
    /* a mutating method's fields are written: a single value cannot take them */
    float one[2] = {1, 1};
    int64_t s2[1] = {2};
    NB_REQUIRE_OK(nb_call_begin(step, &c));
    NB_EXPECT_OK(nb_call_arg_named(c, "this.pos", tp));
    NB_EXPECT_OK(nb_call_arg_value_named(c, "this.vel", NB_F32, 1, s2, one));
    NB_EXPECT_OK(nb_call_arg_double(c, 1, 0.5));
    NB_EXPECT_ERR(nb_call_run(c, NULL), NB_ERR_INVALID_ARG, "'this.vel' is inout");
    nb_tensor_free(tp);
    nb_tensor_free(tv);
    nb_module_free(m);
    nb_device_close(d);
}

/* A CUDA call signature of fn over ndim kernel dims with nleaves leaves (to be filled in). */
static void cuda_sig(nb_call_sig *sig, const char *fn, int ndim, int nleaves) {
    memset(sig, 0, sizeof *sig);
    sig->func = fn;
    sig->target = NB_TARGET_CUDA;
    sig->ndim = ndim;
    sig->nleaves = nleaves;
}

/* The CUDA call kernel of sig is emitted and compiles with NVRTC for sm_90 (its layout into *lay). */
static void expect_nvrtc(nb_program *p, const nb_call_sig *sig, const char *name, nb_call_layout *lay) {
    nb_strbuf src;
    nb_strbuf_init(&src);
    NB_EXPECT_OK(nb_program_emit_call(p, sig, &src, lay));
    void *img = NULL;
    size_t size = 0;
    int cubin = 0;
    nb_status s = nb_nvrtc_compile(nb_strbuf_cstr(&src), name, "compute_90", NULL, &img, &size, &cubin);
    NB_EXPECT(s == NB_OK);
    if (s != NB_OK) fprintf(stderr, "  NVRTC: %s\n%s\n", nb_last_error(), nb_strbuf_cstr(&src));
    if (img) nb_free(img, size);
    nb_strbuf_free(&src);
}

/* The CUDA call kernels of every generator kind compile with NVRTC (without a GPU too). */
static void test_generators_nvrtc(void) {
    if (nb_nvrtc_version() == 0) NB_SKIP("NVRTC is not available");
    nb_program *p = NULL;
    NB_REQUIRE_OK(nb_program_compile_source("gen.nb", SRC, NULL, &p));
    struct { const char *fn; int gen; nb_dtype st, rs; } ks[] = {
        {"id2", NB_GEN_SIG_INDEX, NB_I32, NB_I32}, {"ida", NB_GEN_SIG_INDEX, NB_I32, NB_I32},
        {"idu3", NB_GEN_SIG_THREAD, NB_U32, NB_U32}, {"idu3", NB_GEN_SIG_HASH, NB_U32, NB_U32},
        {"idu", NB_GEN_SIG_HASH, NB_U32, NB_U32}, {"idf3", NB_GEN_SIG_RAND, NB_F32, NB_F32},
    };
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        nb_call_sig sig;
        cuda_sig(&sig, ks[i].fn, 2, 2);
        sig.has_result = 1;
        sig.leaves[0].param = 0;
        sig.leaves[0].path = "v";
        sig.leaves[0].bind = NB_BIND_GEN;
        sig.leaves[0].storage = ks[i].st;
        sig.leaves[0].gen = ks[i].gen;
        sig.leaves[1].param = -1;
        sig.leaves[1].path = "_result";
        sig.leaves[1].bind = NB_BIND_ARRAY;
        sig.leaves[1].storage = ks[i].rs;
        nb_call_layout lay;
        expect_nvrtc(p, &sig, "gen.cu", &lay);
    }
    nb_program_free(p);
}

/* Arrays of views as kernel parameters and struct fields ("ws[1]", "m.d[1]": a tensor leaf per
 * element, as host code and launchRaw bind them): the CUDA block-launch call kernels compile. */
static void test_view_arrays_nvrtc(void) {
    if (nb_nvrtc_version() == 0) NB_SKIP("NVRTC is not available");
    static const char *VSRC =
        "struct ManyViews { TensorView<float> a[2]; DiffTensorView d[2]; }\n"
        "[CudaKernel] void diffOf(TensorView<float> ws[2], TensorView<float> res) {\n"
        "  uint i = cudaThreadIdx().x; if (i < res.size(0)) res[i] = ws[0][i] - ws[1][i]; }\n"
        "[CudaKernel] void sumMany(ManyViews m, TensorView<float> res) {\n"
        "  uint i = cudaThreadIdx().x;\n"
        "  if (i < res.size(0)) res[i] = m.a[0][i] + m.a[1][i] + m.d[0].primal[i] + m.d[1].diff.diff[i]; }\n";
    nb_program *p = NULL;
    NB_REQUIRE_OK(nb_program_compile_source("views.slang", VSRC, NULL, &p));
    struct { const char *fn; int n; const char *paths[5]; } ks[] = {
        {"diffOf", 3, {"ws[0]", "ws[1]", "res"}},
        {"sumMany", 5, {"m.a[0]", "m.a[1]", "m.d[0]", "m.d[1]", "res"}},
    };
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        nb_call_sig sig;
        cuda_sig(&sig, ks[i].fn, 6, ks[i].n);
        sig.blocks = 1;
        for (int j = 0; j < ks[i].n; j++) {
            sig.leaves[j].param = j < ks[i].n - 1 ? 0 : 1;
            sig.leaves[j].path = ks[i].paths[j];
            sig.leaves[j].bind = NB_BIND_TENSOR;
            sig.leaves[j].storage = NB_F32;
        }
        nb_call_layout lay;
        expect_nvrtc(p, &sig, "views.cu", &lay);
        /* every element is its own tensor in the parameter block */
        NB_EXPECT(lay.leaves[0].offset != lay.leaves[1].offset && lay.leaves[1].offset != lay.leaves[2].offset);
    }
    nb_program_free(p);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_generators_cpu, test_generators_cuda, test_generators_nvrtc, test_struct_methods,
                 test_view_arrays_nvrtc);
}

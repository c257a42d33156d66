/* Call kernels end to end: .nb source -> checker -> IR -> C -> `cc -shared` -> dlopen -> run over
 * arrays laid out through nb_call_layout -> numbers. Every kernel's CUDA source is also compiled
 * with NVRTC to PTX (skipped where NVRTC cannot be loaded). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "device/cuda/cuda_api.h"
#include "lang/compiler.h"
#include "nabla/alloc.h"
#include "nb_test.h"

typedef void (*entry_fn)(const void *params, int64_t begin, int64_t end);

typedef struct kern {
    nb_program *p;
    void *dl;
    entry_fn fn;
    nb_call_layout lay;
    nb_call_sig sig;
    unsigned char block[4096];
    char *src;
} kern;

static char g_dir[256];
static int g_counter;
static int g_nvrtc_ok = -1; /* -1 unknown, 0 unavailable, 1 available */
static int g_cuda_compiled;

static const char *tmpdir(void)
{
    if (!g_dir[0]) {
        snprintf(g_dir, sizeof g_dir, "/tmp/nb_test_emit_XXXXXX");
        if (!mkdtemp(g_dir)) g_dir[0] = 0;
    }
    return g_dir;
}

static nb_leaf_sig L(int param, const char *path, nb_bind_kind bind, nb_dtype st)
{
    nb_leaf_sig l;
    memset(&l, 0, sizeof l);
    l.param = param;
    l.path = path;
    l.bind = bind;
    l.storage = st;
    return l;
}

/* Compiles CUDA source of the same signature with NVRTC (records a failure on error). */
static void check_cuda(nb_program *p, const nb_call_sig *csig)
{
    nb_call_sig sig = *csig;
    sig.target = NB_TARGET_CUDA;
    nb_strbuf src;
    nb_strbuf_init(&src);
    nb_call_layout lay;
    nb_status s = nb_program_emit_call(p, &sig, &src, &lay);
    NB_EXPECT(s == NB_OK);
    if (s != NB_OK) {
        fprintf(stderr, "  CUDA emit failed: %s\n", nb_last_error());
        nb_strbuf_free(&src);
        return;
    }
    if (g_nvrtc_ok == 0) {
        nb_strbuf_free(&src);
        return;
    }
    void *img = NULL;
    size_t size = 0;
    int cubin = 0;
    s = nb_nvrtc_compile(nb_strbuf_cstr(&src), "kernel.cu", "compute_90", NULL, &img, &size, &cubin);
    if (s == NB_ERR_UNSUPPORTED && g_nvrtc_ok < 0) {
        g_nvrtc_ok = 0;
    } else {
        g_nvrtc_ok = 1;
        NB_EXPECT(s == NB_OK);
        if (s != NB_OK) fprintf(stderr, "  NVRTC failed: %s\n--- source ---\n%s\n", nb_last_error(), nb_strbuf_cstr(&src));
        else g_cuda_compiled++;
        if (img) nb_free(img, size);
    }
    nb_strbuf_free(&src);
}

static int kern_build_prog(kern *k, nb_program *p, const nb_call_sig *sig)
{
    memset(k, 0, sizeof *k);
    k->p = p;
    k->sig = *sig;
    nb_strbuf src;
    nb_strbuf_init(&src);
    nb_status s = nb_program_emit_call(p, sig, &src, &k->lay);
    if (s != NB_OK) {
        fprintf(stderr, "  emit_call(%s) failed: %s\n", sig->func, nb_last_error());
        nb_strbuf_free(&src);
        return 0;
    }
    k->src = strdup(nb_strbuf_cstr(&src));
    nb_strbuf_free(&src);
    char cpath[512], sopath[512], cmd[1400];
    int id = ++g_counter;
    snprintf(cpath, sizeof cpath, "%s/k%d.c", tmpdir(), id);
    snprintf(sopath, sizeof sopath, "%s/k%d.so", tmpdir(), id);
    FILE *f = fopen(cpath, "w");
    if (!f) return 0;
    fputs(k->src, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cc -std=c99 -O2 -shared -fPIC -Werror=implicit-function-declaration -o %s %s -lm 2>&1", sopath, cpath);
    FILE *pp = popen(cmd, "r");
    char log[4096];
    size_t nlog = pp ? fread(log, 1, sizeof log - 1, pp) : 0;
    log[nlog] = 0;
    int rc = pp ? pclose(pp) : -1;
    if (rc != 0) {
        fprintf(stderr, "  cc failed for %s:\n%s\n--- source ---\n%s\n", sig->func, log, k->src);
        return 0;
    }
    k->dl = dlopen(sopath, RTLD_NOW | RTLD_LOCAL);
    if (!k->dl) {
        fprintf(stderr, "  dlopen: %s\n", dlerror());
        return 0;
    }
    k->fn = (entry_fn)dlsym(k->dl, k->lay.entry);
    if (!k->fn) {
        fprintf(stderr, "  dlsym %s failed\n", k->lay.entry);
        return 0;
    }
    check_cuda(p, sig);
    return 1;
}

static nb_program *compile(const char *src)
{
    nb_program *p = NULL;
    if (nb_program_compile_source("test.nb", src, NULL, &p) != NB_OK) {
        fprintf(stderr, "  compile failed: %s\n", nb_last_error());
        return NULL;
    }
    return p;
}

static int kern_build(kern *k, const char *src, const nb_call_sig *sig)
{
    nb_program *p = compile(src);
    if (!p) return 0;
    if (!kern_build_prog(k, p, sig)) {
        nb_program_free(p);
        k->p = NULL;
        return 0;
    }
    return 1;
}

static void kern_free(kern *k)
{
    if (k->dl) dlclose(k->dl);
    if (k->p) nb_program_free(k->p);
    free(k->src);
    memset(k, 0, sizeof *k);
}

static void set_shape(kern *k, const long long *shape)
{
    memcpy(k->block + k->lay.shape_offset, shape, sizeof(long long) * (size_t)k->sig.ndim);
}

/* data, strides[ndim] (bytes), inner[value_rank] (bytes) */
static void set_array(kern *k, int leaf, void *data, const long long *strides, const long long *inner)
{
    const nb_leaf_layout *l = &k->lay.leaves[leaf];
    uint64_t d = (uint64_t)(uintptr_t)data;
    memcpy(k->block + l->offset, &d, 8);
    if (k->sig.ndim && strides) memcpy(k->block + l->strides_offset, strides, sizeof(long long) * (size_t)k->sig.ndim);
    if (l->value_rank && inner) memcpy(k->block + l->inner_offset, inner, sizeof(long long) * (size_t)l->value_rank);
}

static void set_uniform(kern *k, int leaf, const void *bytes)
{
    const nb_leaf_layout *l = &k->lay.leaves[leaf];
    memcpy(k->block + l->offset, bytes, l->value_bytes);
}

static void set_tensor(kern *k, int leaf, void *data, int rank, const long long *shape, const long long *strides)
{
    const nb_leaf_layout *l = &k->lay.leaves[leaf];
    uint64_t d = (uint64_t)(uintptr_t)data;
    memcpy(k->block + l->offset, &d, 8);
    memcpy(k->block + l->strides_offset, shape, sizeof(long long) * (size_t)rank);
    memcpy(k->block + l->strides_offset + 8 * (size_t)rank, strides, sizeof(long long) * (size_t)rank);
}

static void run(kern *k, int64_t n) { k->fn(k->block, 0, n); }

static nb_call_sig mksig(const char *func, int overload, int ndim, int has_result, int n, const nb_leaf_sig *leaves)
{
    nb_call_sig s;
    memset(&s, 0, sizeof s);
    s.func = func;
    s.overload = overload;
    s.target = NB_TARGET_C;
    s.mode = NB_CALL_PRIMAL;
    s.ndim = ndim;
    s.nleaves = n;
    s.has_result = has_result;
    for (int i = 0; i < n; i++) s.leaves[i] = leaves[i];
    return s;
}

/* ---- tests ------------------------------------------------------------------------------- */

static void test_add_scalars(void)
{
    const char *src = "float add(float a, float b) { return a + b; }";
    nb_leaf_sig ls[3] = {L(0, "a", NB_BIND_ARRAY, NB_F32), L(1, "b", NB_BIND_ARRAY, NB_F32), L(-1, "_result", NB_BIND_ARRAY, NB_F32)};
    nb_call_sig sig = mksig("add", 0, 1, 1, 3, ls);
    kern k;
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    /* layout: shape @0, then data/strides per leaf */
    NB_EXPECT(k.lay.shape_offset == 0);
    NB_EXPECT(k.lay.leaves[0].offset == 8);
    NB_EXPECT(k.lay.leaves[0].strides_offset == 16);
    NB_EXPECT(k.lay.leaves[1].offset == 24);
    NB_EXPECT(k.lay.oob_offset == 56); /* the bounds-check record's address last */
    NB_EXPECT(k.lay.size == 64);
    float a[8], b[16], r[8];
    for (int i = 0; i < 8; i++) { a[i] = (float)i; b[2 * i] = 10.0f * (float)i; r[i] = -1; }
    long long shape[1] = {8}, sa[1] = {4}, sb[1] = {8}, sr[1] = {4};
    set_shape(&k, shape);
    set_array(&k, 0, a, sa, NULL);
    set_array(&k, 1, b, sb, NULL); /* every other element */
    set_array(&k, 2, r, sr, NULL);
    run(&k, 8);
    for (int i = 0; i < 8; i++) NB_EXPECT_NEAR(r[i], 11.0 * i, 1e-6);
    /* broadcasting: b stride 0; a uniform; partial range */
    float one = 100.0f;
    long long s0[1] = {0};
    set_array(&k, 1, &one, s0, NULL);
    for (int i = 0; i < 8; i++) r[i] = -1;
    k.fn(k.block, 2, 5);
    NB_EXPECT(r[1] == -1 && r[5] == -1);
    for (int i = 2; i < 5; i++) NB_EXPECT_NEAR(r[i], i + 100.0, 1e-6);
    kern_free(&k);

    /* uniform leaf + f64/f16/i32 storage conversions */
    nb_leaf_sig ls2[3] = {L(0, "a", NB_BIND_ARRAY, NB_F64), L(1, "b", NB_BIND_UNIFORM, NB_I32), L(-1, "_result", NB_BIND_ARRAY, NB_F16)};
    sig = mksig("add", 0, 1, 1, 3, ls2);
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    NB_EXPECT(k.lay.leaves[1].value_bytes == 4);
    double ad[4] = {0.5, 1.5, 2.5, -3.25};
    int bi = 2;
    uint16_t rh[4];
    long long s8[1] = {8}, s2[1] = {2}, sh[1] = {4};
    set_shape(&k, sh);
    set_array(&k, 0, ad, s8, NULL);
    set_uniform(&k, 1, &bi);
    set_array(&k, 2, rh, s2, NULL);
    run(&k, 4);
    for (int i = 0; i < 4; i++) NB_EXPECT_NEAR(nb_f16_to_f32(rh[i]), ad[i] + 2, 1e-3);
    kern_free(&k);
}

static void test_vectors_swizzles(void)
{
    const char *src =
        "float3 f(float3 a, float2 b) {\n"
        "  float3 r = a.zyx;\n"
        "  r.xy += b;\n"
        "  r.z = r[0] * 2.0;\n"
        "  return r * 2.0 + a.x;\n"
        "}\n";
    nb_leaf_sig ls[3] = {L(0, "a", NB_BIND_ARRAY, NB_F32), L(1, "b", NB_BIND_ARRAY, NB_F32), L(-1, "_result", NB_BIND_ARRAY, NB_F32)};
    nb_call_sig sig = mksig("f", 0, 1, 1, 3, ls);
    kern k;
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    NB_EXPECT(k.lay.leaves[0].value_rank == 1 && k.lay.leaves[0].value_shape[0] == 3);
    /* a: (2,3) but with a padded row (stride 16) and component stride 4;
       b: (2,2) stored transposed: component stride 8, row stride 4 (non-contiguous inner) */
    float a[8] = {1, 2, 3, 0, 4, 5, 6, 0};
    float b[4] = {10, 20, 30, 40}; /* b[n][c] at b[c*2 + n] */
    float r[6];
    long long shape[1] = {2}, sa[1] = {16}, ia[1] = {4}, sb[1] = {4}, ib[1] = {8}, sr[1] = {12}, ir[1] = {4};
    set_shape(&k, shape);
    set_array(&k, 0, a, sa, ia);
    set_array(&k, 1, b, sb, ib);
    set_array(&k, 2, r, sr, ir);
    run(&k, 2);
    for (int n = 0; n < 2; n++) {
        float ax = a[n * 4], ay = a[n * 4 + 1], az = a[n * 4 + 2];
        float bx = b[n], by = b[2 + n];
        float rx = az + bx, ry = ay + by, rz = rx * 2;
        NB_EXPECT_NEAR(r[n * 3 + 0], rx * 2 + ax, 1e-5);
        NB_EXPECT_NEAR(r[n * 3 + 1], ry * 2 + ax, 1e-5);
        NB_EXPECT_NEAR(r[n * 3 + 2], rz * 2 + ax, 1e-5);
    }
    kern_free(&k);
}

static void test_matrices(void)
{
    const char *src =
        "float3 mv(float3x3 m, float3 v) { return mul(m, v) + mul(v, transpose(m)) * 0.0; }\n"
        "float det(float2x2 m) { float2x2 t = m * 2.0; return determinant(t) + m[1][0]; }\n";
    nb_leaf_sig ls[3] = {L(0, "m", NB_BIND_UNIFORM, NB_F32), L(1, "v", NB_BIND_ARRAY, NB_F32), L(-1, "_result", NB_BIND_ARRAY, NB_F32)};
    nb_call_sig sig = mksig("mv", 0, 1, 1, 3, ls);
    kern k;
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    NB_EXPECT(k.lay.leaves[0].value_rank == 2 && k.lay.leaves[0].value_bytes == 36);
    float m[9] = {1, 2, 3, 4, 5, 6, 7, 8, 10};
    float v[6] = {1, 0, 0, 1, 1, 1}, r[6];
    long long shape[1] = {2}, sv[1] = {12}, iv[1] = {4};
    set_shape(&k, shape);
    set_uniform(&k, 0, m);
    set_array(&k, 1, v, sv, iv);
    set_array(&k, 2, r, sv, iv);
    run(&k, 2);
    NB_EXPECT_NEAR(r[0], 1, 1e-6);
    NB_EXPECT_NEAR(r[1], 4, 1e-6);
    NB_EXPECT_NEAR(r[2], 7, 1e-6);
    NB_EXPECT_NEAR(r[3], 6, 1e-6);
    NB_EXPECT_NEAR(r[4], 15, 1e-6);
    NB_EXPECT_NEAR(r[5], 25, 1e-6);
    kern_free(&k);

    nb_leaf_sig ls2[2] = {L(0, "m", NB_BIND_ARRAY, NB_F32), L(-1, "_result", NB_BIND_ARRAY, NB_F32)};
    sig = mksig("det", 0, 0, 1, 2, ls2);
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    float mm[4] = {1, 2, 3, 4}, d = 0;
    long long im[2] = {8, 4};
    set_array(&k, 0, mm, NULL, im);
    set_array(&k, 1, &d, NULL, NULL);
    run(&k, 1);
    NB_EXPECT_NEAR(d, (2 * 8 - 4 * 6) + 3, 1e-5);
    kern_free(&k);
}

/* A matrix of more than 4 rows (slang-torch's bezier2d: matrix<float, 20, 2>) as a uniform
 * parameter and through a reverse-mode derivative; the same call compiles for CUDA (check_cuda). */
static void test_tall_matrix(void)
{
    const char *src =
        "[Differentiable] float energy(matrix<float, 20, 2> m) {\n"
        "    float s = 0; for (int i = 0; i < 20; i++) s += m[i][0] * m[i][1]; return s; }\n"
        "float2 grad_row(matrix<float, 20, 2> m, int i) {\n"
        "    var p = diffPair(m); bwd_diff(energy)(p, 1.0); matrix<float, 5, 2> t = {}; t[4] = p.d[i];\n"
        "    return mul(t, float2x2(1, 0, 0, 1))[4]; }\n";
    nb_leaf_sig ls[3] = {L(0, "m", NB_BIND_UNIFORM, NB_F32), L(1, "i", NB_BIND_ARRAY, NB_I32), L(-1, "_result", NB_BIND_ARRAY, NB_F32)};
    nb_call_sig sig = mksig("grad_row", 0, 1, 1, 3, ls);
    kern k;
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    NB_EXPECT(k.lay.leaves[0].value_rank == 2 && k.lay.leaves[0].value_bytes == 20 * 2 * 4);
    float m[40], r[4];
    for (int j = 0; j < 40; j++) m[j] = (float)j;
    int idx[2] = {3, 19};
    long long shape[1] = {2}, si[1] = {4}, sr[1] = {8}, ir[1] = {4};
    set_shape(&k, shape);
    set_uniform(&k, 0, m);
    set_array(&k, 1, idx, si, NULL);
    set_array(&k, 2, r, sr, ir);
    run(&k, 2);
    /* d/dm[i][0] = m[i][1], d/dm[i][1] = m[i][0] */
    NB_EXPECT_NEAR(r[0], 7, 1e-6);
    NB_EXPECT_NEAR(r[1], 6, 1e-6);
    NB_EXPECT_NEAR(r[2], 39, 1e-6);
    NB_EXPECT_NEAR(r[3], 38, 1e-6);
    kern_free(&k);
}

static void test_arrays(void)
{
    const char *src =
        "float sum4(float a[4]) { float s = 0; for (int i = 0; i < 4; i++) s += a[i]; return s; }\n"
        "void fill(out float o[3], float v) { for (int i = 0; i < 3; i++) o[i] = v * i; }\n"
        "float grid(float g[2][3]) { float s = 0; for (int i = 0; i < 2; i++) for (int j = 0; j < 3; j++) s += g[i][j] * (i * 10 + j); return s; }\n";
    nb_leaf_sig ls[2] = {L(0, "a", NB_BIND_ARRAY, NB_F32), L(-1, "_result", NB_BIND_ARRAY, NB_F32)};
    nb_call_sig sig = mksig("sum4", 0, 1, 1, 2, ls);
    kern k;
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, r[2];
    long long shape[1] = {2}, sa[1] = {16}, ia[1] = {4}, sr[1] = {4};
    set_shape(&k, shape);
    set_array(&k, 0, a, sa, ia);
    set_array(&k, 1, r, sr, NULL);
    run(&k, 2);
    NB_EXPECT_NEAR(r[0], 10, 1e-6);
    NB_EXPECT_NEAR(r[1], 26, 1e-6);
    kern_free(&k);

    nb_leaf_sig ls2[2] = {L(0, "o", NB_BIND_ARRAY, NB_F32), L(1, "v", NB_BIND_ARRAY, NB_F32)};
    sig = mksig("fill", 0, 1, 0, 2, ls2);
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    float o[6] = {0}, v[2] = {1, 2};
    long long so[1] = {12}, io[1] = {4}, sv[1] = {4};
    set_shape(&k, shape);
    set_array(&k, 0, o, so, io);
    set_array(&k, 1, v, sv, NULL);
    run(&k, 2);
    NB_EXPECT(o[0] == 0 && o[1] == 1 && o[2] == 2 && o[3] == 0 && o[4] == 2 && o[5] == 4);
    kern_free(&k);

    sig = mksig("grid", 0, 0, 1, 2, ls);
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    float g[6] = {1, 1, 1, 1, 1, 1}, gr = 0;
    long long ig[2] = {12, 4};
    set_array(&k, 0, g, NULL, ig);
    set_array(&k, 1, &gr, NULL, NULL);
    run(&k, 1);
    NB_EXPECT_NEAR(gr, 0 + 1 + 2 + 10 + 11 + 12, 1e-6);
    kern_free(&k);
}

static void test_structs_methods(void)
{
    const char *src =
        "struct P {\n"
        "  float2 pos; float w;\n"
        "  float len() { return length(pos) * w; }\n"
        "  [mutating] void grow(float k) { w *= k; pos = pos + float2(k, k); }\n"
        "  static const float kBias = 0.5;\n"
        "};\n"
        "float f(P p, float k) { P q = p; q.grow(k); return q.len() + p.len() + P.kBias; }\n"
        "P make(float x) { P p; p.pos = float2(x, 2 * x); p.w = 1.0; return p; }\n";
    nb_leaf_sig ls[4] = {L(0, "p.pos", NB_BIND_ARRAY, NB_F32), L(0, "p.w", NB_BIND_UNIFORM, NB_F32),
                         L(1, "k", NB_BIND_UNIFORM, NB_F32), L(-1, "_result", NB_BIND_ARRAY, NB_F32)};
    nb_call_sig sig = mksig("f", 0, 1, 1, 4, ls);
    kern k;
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    float pos[4] = {3, 4, 6, 8}, w = 2, kk = 1, r[2];
    long long shape[1] = {2}, sp[1] = {8}, ip[1] = {4}, sr[1] = {4};
    set_shape(&k, shape);
    set_array(&k, 0, pos, sp, ip);
    set_uniform(&k, 1, &w);
    set_uniform(&k, 2, &kk);
    set_array(&k, 3, r, sr, NULL);
    run(&k, 2);
    for (int n = 0; n < 2; n++) {
        double px = pos[2 * n], py = pos[2 * n + 1];
        double want = sqrt((px + 1) * (px + 1) + (py + 1) * (py + 1)) * 2 + sqrt(px * px + py * py) * 2 + 0.5;
        NB_EXPECT_NEAR(r[n], want, 1e-4);
    }
    kern_free(&k);
    /* a struct result is one leaf per field, not a single leaf */
    nb_program *p = compile(src);
    if (!p) { NB_EXPECT(0); return; }
    nb_leaf_sig ls2[2] = {L(0, "x", NB_BIND_ARRAY, NB_F32), L(-1, "_result", NB_BIND_ARRAY, NB_F32)};
    sig = mksig("make", 0, 1, 1, 2, ls2);
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    nb_call_layout lay;
    NB_EXPECT_ERR(nb_program_emit_call(p, &sig, &sb, &lay), NB_ERR_INVALID_ARG, "leaves");
    sig.has_result = 0;
    sig.nleaves = 1;
    NB_EXPECT_OK(nb_program_emit_call(p, &sig, &sb, &lay));
    nb_strbuf_free(&sb);
    nb_program_free(p);
}

static void test_control_flow(void)
{
    const char *src =
        "int cls(int x) {\n"
        "  if (x < 0) return -1;\n"
        "  int acc = 0;\n"
        "  for (int i = 0; i < 10; i++) {\n"
        "    if (i == 2) continue;\n"
        "    if (i > x) break;\n"
        "    acc += i;\n"
        "  }\n"
        "  int j = 0;\n"
        "  while (j < 3) { j++; if (j == 2) continue; acc += 100; }\n"
        "  int d = 0;\n"
        "  do { d++; if (d == 1) continue; acc += 1000; } while (d < 3);\n"
        "  switch (x) {\n"
        "    case 0: acc += 7; break;\n"
        "    case 1: case 2: acc += 70;\n"
        "    case 3: acc += 700; break;\n"
        "    default: { acc -= 1; }\n"
        "  }\n"
        "  return x > 4 ? acc : -acc;\n"
        "}\n";
    nb_leaf_sig ls[2] = {L(0, "x", NB_BIND_ARRAY, NB_I32), L(-1, "_result", NB_BIND_ARRAY, NB_I32)};
    nb_call_sig sig = mksig("cls", 0, 1, 1, 2, ls);
    kern k;
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    int xs[7] = {-3, 0, 1, 2, 3, 5, 20}, r[7];
    long long shape[1] = {7}, s4[1] = {4};
    set_shape(&k, shape);
    set_array(&k, 0, xs, s4, NULL);
    set_array(&k, 1, r, s4, NULL);
    run(&k, 7);
    for (int n = 0; n < 7; n++) {
        int x = xs[n], want;
        if (x < 0) want = -1;
        else {
            int acc = 0;
            for (int i = 0; i < 10; i++) {
                if (i == 2) continue;
                if (i > x) break;
                acc += i;
            }
            acc += 200 + 2000;
            switch (x) {
            case 0: acc += 7; break;
            case 1: case 2: acc += 70; /* fall through */
            case 3: acc += 700; break;
            default: acc -= 1;
            }
            want = x > 4 ? acc : -acc;
        }
        NB_EXPECT(r[n] == want);
        if (r[n] != want) fprintf(stderr, "  cls(%d) = %d, want %d\n", x, r[n], want);
    }
    kern_free(&k);
}

static void test_out_inout_overloads(void)
{
    const char *src =
        "float g(float x) { return x * 2.0; }\n"
        "int g(int x) { return x + 1; }\n"
        "void split(float x, out float lo, inout float acc) { lo = floor(x); acc += x - lo; }\n"
        "float h(float x) { float lo; float acc = 1.0; split(x, lo, acc); float3 v = float3(0, 0, 0); split(x, v.y, v.z); return lo + acc + v.y * 100.0 + v.z * 1000.0; }\n";
    nb_leaf_sig ls[2] = {L(0, "x", NB_BIND_ARRAY, NB_I32), L(-1, "_result", NB_BIND_ARRAY, NB_I32)};
    nb_call_sig sig = mksig("g", 1, 1, 1, 2, ls);
    kern k;
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    NB_EXPECT(strstr(k.src, "g_1(") != NULL);
    int xi[2] = {5, -1}, ri[2];
    long long shape[1] = {2}, s4[1] = {4};
    set_shape(&k, shape);
    set_array(&k, 0, xi, s4, NULL);
    set_array(&k, 1, ri, s4, NULL);
    run(&k, 2);
    NB_EXPECT(ri[0] == 6 && ri[1] == 0);
    kern_free(&k);

    nb_leaf_sig ls2[3] = {L(0, "x", NB_BIND_ARRAY, NB_F32), L(1, "lo", NB_BIND_ARRAY, NB_F32), L(2, "acc", NB_BIND_ARRAY, NB_F32)};
    sig = mksig("split", 0, 1, 0, 3, ls2);
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    float x[2] = {2.25f, -0.5f}, lo[2] = {9, 9}, acc[2] = {1, 2};
    set_shape(&k, shape);
    set_array(&k, 0, x, s4, NULL);
    set_array(&k, 1, lo, s4, NULL);
    set_array(&k, 2, acc, s4, NULL);
    run(&k, 2);
    NB_EXPECT(lo[0] == 2 && lo[1] == -1);
    NB_EXPECT_NEAR(acc[0], 1.25, 1e-6);
    NB_EXPECT_NEAR(acc[1], 2.5, 1e-6);
    kern_free(&k);

    nb_leaf_sig ls3[2] = {L(0, "x", NB_BIND_ARRAY, NB_F32), L(-1, "_result", NB_BIND_ARRAY, NB_F32)};
    sig = mksig("h", 0, 1, 1, 2, ls3);
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    float r[2];
    set_shape(&k, shape);
    set_array(&k, 0, x, s4, NULL);
    set_array(&k, 1, r, s4, NULL);
    run(&k, 2);
    NB_EXPECT_NEAR(r[0], 2 + 1.25 + 200 + 250, 1e-4);
    NB_EXPECT_NEAR(r[1], -1 + 1.5 - 100 + 500, 1e-4);
    kern_free(&k);
}

static void test_constants(void)
{
    const char *src =
        "static const float kScale = 3.0;\n"
        "static const float3 kDir = float3(1, 2, 3);\n"
        "static const int kTab[4] = { 5, 6, 7, 8 };\n"
        "extern static const int N = 2;\n"
        "float f(int i) { return kScale * kDir.y + kTab[i] * N; }\n";
    nb_program *p = compile(src);
    if (!p) { NB_EXPECT(0); return; }
    nb_leaf_sig ls[2] = {L(0, "i", NB_BIND_ARRAY, NB_I32), L(-1, "_result", NB_BIND_ARRAY, NB_F32)};
    nb_call_sig sig = mksig("f", 0, 1, 1, 2, ls);
    for (int round = 0; round < 2; round++) {
        if (round == 1) NB_EXPECT_OK(nb_program_set_constant(p, "N", 10));
        kern k;
        if (!kern_build_prog(&k, p, &sig)) { NB_EXPECT(0); break; }
        int is[4] = {0, 1, 2, 3};
        float r[4];
        long long shape[1] = {4}, s4[1] = {4};
        set_shape(&k, shape);
        set_array(&k, 0, is, s4, NULL);
        set_array(&k, 1, r, s4, NULL);
        run(&k, 4);
        int n = round ? 10 : 2;
        for (int i = 0; i < 4; i++) NB_EXPECT_NEAR(r[i], 6 + (5 + i) * n, 1e-5);
        k.p = NULL; /* the program is shared */
        kern_free(&k);
    }
    nb_program_free(p);
}

static void test_intrinsics(void)
{
    const char *src =
        "float f(float x, float y) {\n"
        "  return exp(x) + log(y) + sqrt(y) + pow(y, x) + atan2(x, y) + clamp(x, -0.25, 0.25) + lerp(x, y, 0.25)\n"
        "       + smoothstep(0.0, 2.0, y) + frac(y * 3.7) + sign(x) + abs(x) + min(x, y) + max(x, y) + rsqrt(y)\n"
        "       + saturate(x * 4.0) + step(0.5, y) + fmod(y * 5.0, 1.5) + tanh(x) + floor(-y) + ceil(x) + rcp(y);\n"
        "}\n"
        "float3 g(float3 a, float3 b) { return normalize(a) * dot(a, b) + cross(a, b) + reflect(a, b) + distance(a, b) + sin(a) + select(a > b, a, b); }\n"
        "int h(int a, int b) { return min(a, b) * 100 + max(a, b) * 10 + abs(a - b) + clamp(a, 0, 2) + asint(asfloat(a)) + (a << 2) + (b >> 1) + (a & b) + (a ^ 3) + (a % 3); }\n";
    nb_leaf_sig ls[3] = {L(0, "x", NB_BIND_ARRAY, NB_F32), L(1, "y", NB_BIND_ARRAY, NB_F32), L(-1, "_result", NB_BIND_ARRAY, NB_F32)};
    nb_call_sig sig = mksig("f", 0, 1, 1, 3, ls);
    kern k;
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    NB_EXPECT(strstr(k.src, "expf(") && strstr(k.src, "atan2f(") && strstr(k.src, "powf("));
    float xs[3] = {-0.7f, 0.1f, 1.3f}, ys[3] = {0.5f, 1.2f, 2.9f}, r[3];
    long long shape[1] = {3}, s4[1] = {4};
    set_shape(&k, shape);
    set_array(&k, 0, xs, s4, NULL);
    set_array(&k, 1, ys, s4, NULL);
    set_array(&k, 2, r, s4, NULL);
    run(&k, 3);
    for (int i = 0; i < 3; i++) {
        double x = xs[i], y = ys[i];
        double t = fmin(fmax(y / 2, 0), 1);
        double c = x < -0.25 ? -0.25 : x > 0.25 ? 0.25 : x;
        double s = x * 4 < 0 ? 0 : x * 4 > 1 ? 1 : x * 4;
        double want = exp(x) + log(y) + sqrt(y) + pow(y, x) + atan2(x, y) + c + (x + (y - x) * 0.25) + t * t * (3 - 2 * t) +
                      ((float)(y * 3.7f) - floor((float)(y * 3.7f))) + (x > 0 ? 1 : x < 0 ? -1 : 0) + fabs(x) + fmin(x, y) +
                      fmax(x, y) + 1 / sqrt(y) + s + (y >= 0.5 ? 1 : 0) + fmod((float)(y * 5.0f), 1.5) + tanh(x) + floor(-y) +
                      ceil(x) + 1 / y;
        NB_EXPECT_NEAR(r[i], want, 1e-4 * fabs(want) + 1e-4);
    }
    kern_free(&k);

    nb_leaf_sig ls2[3] = {L(0, "a", NB_BIND_ARRAY, NB_F32), L(1, "b", NB_BIND_ARRAY, NB_F32), L(-1, "_result", NB_BIND_ARRAY, NB_F32)};
    sig = mksig("g", 0, 0, 1, 3, ls2);
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    float a[3] = {1, 2, 2}, b[3] = {0, 1, -1}, rg[3];
    long long i4[1] = {4};
    set_array(&k, 0, a, NULL, i4);
    set_array(&k, 1, b, NULL, i4);
    set_array(&k, 2, rg, NULL, i4);
    run(&k, 1);
    double d = 0 + 2 - 2; /* dot */
    double cr[3] = {2 * -1 - 2 * 1, 2 * 0 - 1 * -1, 1 * 1 - 2 * 0};
    double dn = 2 * d;
    double dist = sqrt(1 + 1 + 9);
    for (int c = 0; c < 3; c++) {
        double want = a[c] / 3.0 * d + cr[c] + (a[c] - dn * b[c]) + dist + sin(a[c]) + (a[c] > b[c] ? a[c] : b[c]);
        NB_EXPECT_NEAR(rg[c], want, 1e-5);
    }
    kern_free(&k);

    nb_leaf_sig ls3[3] = {L(0, "a", NB_BIND_ARRAY, NB_I32), L(1, "b", NB_BIND_ARRAY, NB_I32), L(-1, "_result", NB_BIND_ARRAY, NB_I32)};
    sig = mksig("h", 0, 1, 1, 3, ls3);
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    int ia[3] = {1, 5, -4}, ib[3] = {3, 2, 7}, ir[3];
    long long sh[1] = {3}, s4b[1] = {4};
    set_shape(&k, sh);
    set_array(&k, 0, ia, s4b, NULL);
    set_array(&k, 1, ib, s4b, NULL);
    set_array(&k, 2, ir, s4b, NULL);
    run(&k, 3);
    for (int i = 0; i < 3; i++) {
        int x = ia[i], y = ib[i];
        int want = (x < y ? x : y) * 100 + (x > y ? x : y) * 10 + abs(x - y) + (x < 0 ? 0 : x > 2 ? 2 : x) + x + (x * 4) + (y >> 1) +
                   (x & y) + (x ^ 3) + (x % 3);
        NB_EXPECT(ir[i] == want);
    }
    kern_free(&k);
}

static void test_broadcast_2d(void)
{
    const char *src = "float2 f(float a, float2 b) { return b * a; }\n";
    nb_leaf_sig ls[3] = {L(0, "a", NB_BIND_ARRAY, NB_F32), L(1, "b", NB_BIND_ARRAY, NB_F32), L(-1, "_result", NB_BIND_ARRAY, NB_F32)};
    nb_call_sig sig = mksig("f", 0, 2, 1, 3, ls);
    kern k;
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    /* kernel (3,4): a broadcast along dim 1 (shape (3,1)), b along dim 0 (shape (4,2)) */
    float a[3] = {1, 2, 3}, b[8] = {1, 10, 2, 20, 3, 30, 4, 40}, r[24];
    long long shape[2] = {3, 4}, sa[2] = {4, 0}, sb[2] = {0, 8}, ib[1] = {4}, sr[2] = {32, 8}, ir[1] = {4};
    set_shape(&k, shape);
    set_array(&k, 0, a, sa, NULL);
    set_array(&k, 1, b, sb, ib);
    set_array(&k, 2, r, sr, ir);
    /* in two chunks, as a thread pool would */
    k.fn(k.block, 0, 5);
    k.fn(k.block, 5, 12);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
            NB_EXPECT_NEAR(r[(i * 4 + j) * 2], a[i] * b[j * 2], 1e-6);
            NB_EXPECT_NEAR(r[(i * 4 + j) * 2 + 1], a[i] * b[j * 2 + 1], 1e-6);
        }
    kern_free(&k);
}

static void test_kernel_tensor(void)
{
    const char *src =
        "[Kernel]\n"
        "void scale(Tensor<float, 2> t, Tensor<float, 1> sums, float s) {\n"
        "  uint3 id = dispatch_id();\n"
        "  int i = int(id.y), j = int(id.x);\n"
        "  t[i, j] = t[i, j] * s;\n"
        "  atomicAdd(sums[i], t[i, j]);\n"
        "}\n";
    nb_leaf_sig ls[3] = {L(0, "t", NB_BIND_TENSOR, NB_F32), L(1, "sums", NB_BIND_TENSOR, NB_F32), L(2, "s", NB_BIND_UNIFORM, NB_F32)};
    nb_call_sig sig = mksig("scale", 0, 2, 0, 3, ls);
    kern k;
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    float t[6] = {1, 2, 3, 4, 5, 6}, sums[2] = {0, 0}, s = 2;
    long long grid[2] = {2, 3}, ts[2] = {2, 3}, tst[2] = {12, 4}, ss[1] = {2}, sst[1] = {4};
    set_shape(&k, grid);
    set_tensor(&k, 0, t, 2, ts, tst);
    set_tensor(&k, 1, sums, 1, ss, sst);
    set_uniform(&k, 2, &s);
    run(&k, 6);
    for (int i = 0; i < 6; i++) NB_EXPECT(t[i] == 2.0f * (float)(i + 1));
    NB_EXPECT(sums[0] == 12 && sums[1] == 30);
    kern_free(&k);
}

/* Slang compute entry points (check_kernel.c): [numthreads], SV_ semantics, a module-scope buffer
 * reached through a helper function (a trailing parameter of both); C run and CUDA compile. */
static void test_compute_entry(void)
{
    const char *src =
        "RWStructuredBuffer<float> outputBuffer;\n"
        "void put(int i, float v) { outputBuffer[i] = v; }\n"
        "[numthreads(4, 1, 1)]\n"
        "void computeMain(uint3 tid : SV_DispatchThreadID, uint g : SV_GroupID, uint gi : SV_GroupIndex) {\n"
        "  put(int(tid.x), float(g * 10 + gi));\n"
        "}\n";
    nb_leaf_sig ls[1] = {L(0, "outputBuffer", NB_BIND_TENSOR, NB_F32)};
    nb_call_sig sig = mksig("computeMain", 0, 3, 0, 1, ls);
    kern k;
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    float out[8] = {0};
    long long grid[3] = {1, 1, 8}, os[1] = {8}, ost[1] = {4};
    set_shape(&k, grid);
    set_tensor(&k, 0, out, 1, os, ost);
    run(&k, 8);
    for (int i = 0; i < 8; i++) NB_EXPECT(out[i] == (float)(i / 4 * 10 + i % 4));
    kern_free(&k);
}

/* slang-torch's TensorView (check_view.c): inferred rank, size(d), InterlockedAdd; C run and CUDA compile. */
static void test_tensor_view(void)
{
    const char *src =
        "[CudaKernel]\n"
        "void k(TensorView<float> a, TensorView<int> n) {\n"
        "  uint i = cudaThreadIdx().x;\n"
        "  a.store(i, 0, a.load(i, 1) + float(a.size(1)));\n"
        "  n.InterlockedAdd(0, 1);\n"
        "}\n";
    nb_leaf_sig ls[2] = {L(0, "a", NB_BIND_TENSOR, NB_F32), L(1, "n", NB_BIND_TENSOR, NB_I32)};
    nb_call_sig sig = mksig("k", 0, 3, 0, 2, ls);
    kern k;
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    float a[4] = {0, 1, 0, 2};
    int32_t n[1] = {0};
    long long grid[3] = {1, 1, 2}, as[2] = {2, 2}, ast[2] = {8, 4}, ns[1] = {1}, nst[1] = {4};
    set_shape(&k, grid);
    set_tensor(&k, 0, a, 2, as, ast);
    set_tensor(&k, 1, n, 1, ns, nst);
    run(&k, 2);
    NB_EXPECT(a[0] == 3 && a[2] == 4 && n[0] == 2);
    kern_free(&k);
}

/* Slang's inline-CUDA pattern (slang-torch's inline-mlp): __target_switch, a CUDA case with a
 * __requirePrelude including <cuda.h> and <mma.h> (NVRTC gets the toolkit's headers and an empty
 * cuda.h) and an __intrinsic_asm calling a WMMA template with constexpr arguments ($3..$5); a cpp
 * case with the same matmul through pointers. C run, CUDA compile. */
static void test_target_prelude_wmma(void)
{
    const char *src =
        "void mm(Ptr<float> a, Ptr<float> b, Ptr<float> c, constexpr int M, constexpr int N, constexpr int K) {\n"
        "  __target_switch {\n"
        "  case cuda:\n"
        "    __requirePrelude(\"#include <cuda.h>\\n#include <mma.h>\\n"
        "template<int M, int N, int K> __device__ void tc_mm(float *a, float *b, float *c) {\\n"
        "  using namespace nvcuda;\\n"
        "  wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;\\n"
        "  wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> fb;\\n"
        "  wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;\\n"
        "  wmma::fill_fragment(acc, 0.0f);\\n"
        "  wmma::load_matrix_sync(fa, a, K);\\n"
        "  wmma::load_matrix_sync(fb, b, K);\\n"
        "  wmma::mma_sync(acc, fa, fb, acc);\\n"
        "  wmma::store_matrix_sync(c, acc, N, wmma::mem_row_major);\\n"
        "}\");\n"
        "    __intrinsic_asm \"tc_mm<$3, $4, $5>($0, $1, $2)\";\n"
        "  case cpp:\n"
        "    for (int i = 0; i < M; i++)\n"
        "      for (int j = 0; j < N; j++) {\n"
        "        float s = 0.0;\n"
        "        for (int k = 0; k < K; k++) s += a[i * K + k] * b[k * N + j];\n"
        "        c[i * N + j] = s;\n"
        "      }\n"
        "  }\n"
        "}\n"
        "float f(float x) {\n"
        "  float a[4] = {x, 1.0, 2.0, 3.0};\n"
        "  float b[4] = {1.0, 0.0, 0.0, 1.0};\n"
        "  float c[4];\n"
        "  mm(&a[0], &b[0], &c[0], 2, 2, 2);\n"
        "  return c[0] + c[3];\n"
        "}\n";
    nb_leaf_sig ls[2] = {L(0, "x", NB_BIND_ARRAY, NB_F32), L(-1, "_result", NB_BIND_ARRAY, NB_F32)};
    nb_call_sig sig = mksig("f", 0, 1, 1, 2, ls);
    kern k;
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    NB_EXPECT(strstr(k.src, "mma.h") == NULL); /* the CUDA prelude is not in the C source */
    float x[2] = {5.0f, -1.0f}, r[2] = {0, 0};
    long long shape[1] = {2}, st[1] = {4};
    set_shape(&k, shape);
    set_array(&k, 0, x, st, NULL);
    set_array(&k, 1, r, st, NULL);
    run(&k, 2);
    NB_EXPECT_NEAR(r[0], 8.0, 1e-6); /* c = a * I: c[0] + c[3] = x + 3 */
    NB_EXPECT_NEAR(r[1], 2.0, 1e-6);
    kern_free(&k);
}

/* A Ptr<T> parameter bound from the host gets the array's address (check_ptr.c): C run, CUDA compile. */
static void test_pointer_param(void)
{
    const char *src = "void k(Ptr<float> p, int i, float v) { p[i] = v + *p; }\n";
    nb_leaf_sig ls[3] = {L(0, "p", NB_BIND_TENSOR, NB_F32), L(1, "i", NB_BIND_ARRAY, NB_I32), L(2, "v", NB_BIND_ARRAY, NB_F32)};
    nb_call_sig sig = mksig("k", 0, 1, 0, 3, ls);
    kern k;
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    float p[4] = {10, 0, 0, 0}, v[2] = {1, 2};
    int32_t idx[2] = {2, 3};
    long long shape[1] = {2}, ps[1] = {4}, pst[1] = {4}, st[1] = {4};
    set_shape(&k, shape);
    set_tensor(&k, 0, p, 1, ps, pst);
    set_array(&k, 1, idx, st, NULL);
    set_array(&k, 2, v, st, NULL);
    run(&k, 2);
    NB_EXPECT(p[0] == 10 && p[2] == 11 && p[3] == 12);
    kern_free(&k);
}

/* Thread groups (emit_group.c): groupshared memory, barriers and wave operations; the C
 * kernel runs its groups as fibers (layout.group_size), the CUDA one a block per group. */
static void test_group_kernel(void)
{
    const char *src =
        "RWStructuredBuffer<float> data;\n"
        "RWStructuredBuffer<float> res;\n"
        "groupshared float tile[32];\n"
        "float other(uint i) { static groupshared float s2[32]; s2[i] = float(i); GroupMemoryBarrierWithGroupSync(); return s2[31 - i]; }\n"
        "[numthreads(32, 1, 1)]\n"
        "void k(uint3 tid : SV_DispatchThreadID, uint gi : SV_GroupIndex) {\n"
        "  tile[gi] = data[tid.x];\n"
        "  GroupMemoryBarrierWithGroupSync();\n"
        "  float mine = tile[31 - gi] + other(gi);\n"
        "  res[tid.x] = mine + WaveActiveSum(1.0) * 100.0 + float(WaveActiveMax(int(gi))) * 1000.0\n"
        "             + float(WaveActiveBitOr(1u << (gi & 3u))) * 10000.0 + (WaveActiveAllTrue(gi < 32u) ? 100000.0 : 0.0)\n"
        "             + WaveReadLaneAt(float(gi), 3u) * 1000000.0;\n"
        "}\n";
    nb_leaf_sig ls[2] = {L(0, "data", NB_BIND_TENSOR, NB_F32), L(1, "res", NB_BIND_TENSOR, NB_F32)};
    nb_call_sig sig = mksig("k", 0, 3, 0, 2, ls);
    kern k;
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    NB_EXPECT(k.lay.group_size == 32);
    float data[64], out[64] = {0};
    for (int i = 0; i < 64; i++) data[i] = (float)i;
    long long grid[3] = {1, 1, 64}, ds[1] = {64}, dst[1] = {4};
    set_shape(&k, grid);
    set_tensor(&k, 0, data, 1, ds, dst);
    set_tensor(&k, 1, out, 1, ds, dst);
    run(&k, 2); /* two groups */
    for (int i = 0; i < 64; i++) {
        int g = i / 32, gi = i % 32;
        float want = (float)(g * 32 + 31 - gi) + (float)(31 - gi) + 3200 + 31000 + 150000 + 100000 + 3000000;
        NB_EXPECT(out[i] == want);
    }
    kern_free(&k);
    /* every wave operation compiles for CUDA (their C semantics: tests/lang/groupshared.nb) */
    const char *src2 =
        "RWStructuredBuffer<float> f;\n"
        "RWStructuredBuffer<int> n;\n"
        "[numthreads(64, 1, 1)]\n"
        "void w(uint i : SV_DispatchThreadID) {\n"
        "  float v = f[i];\n"
        "  f[i] = WavePrefixSum(v) + WavePrefixProduct(v) + WaveActiveProduct(v) + WaveActiveMin(v) + WaveReadLaneFirst(v)\n"
        "       + float(WaveActiveSum(2.0)) + float(WaveActiveMax(1.0l));\n"
        "  uint4 b = WaveActiveBallot(v > 0.0);\n"
        "  n[i] = int(b.x + WaveActiveCountBits(v > 1.0) + WaveGetLaneIndex() + WaveGetLaneCount()) + WaveActiveBitXor(int(i))\n"
        "       + (WaveIsFirstLane() ? 1 : 0) + (WaveActiveAnyTrue(v > 2.0) ? 1 : 0) + (WaveReadLaneAt(v > 3.0, 1u) ? 1 : 0)\n"
        "       + WaveActiveSum(int(i)) + int(WaveActiveMin(i));\n"
        "  AllMemoryBarrierWithGroupSync(); DeviceMemoryBarrier(); GroupMemoryBarrier(); AllMemoryBarrier();\n"
        "  DeviceMemoryBarrierWithGroupSync();\n"
        "}\n";
    nb_program *p2 = compile(src2);
    NB_EXPECT(p2 != NULL);
    if (p2) {
        nb_leaf_sig ls2[2] = {L(0, "f", NB_BIND_TENSOR, NB_F32), L(1, "n", NB_BIND_TENSOR, NB_I32)};
        nb_call_sig sig2 = mksig("w", 0, 3, 0, 2, ls2);
        check_cuda(p2, &sig2);
        nb_program_free(p2);
    }
}

static void test_bad_sigs(void)
{
    nb_program *p = compile("float add(float a, float b) { return a + b; }\nvoid sink(out float o) { o = 1; }\n");
    if (!p) { NB_EXPECT(0); return; }
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    nb_call_layout lay;
    nb_leaf_sig ls[3] = {L(0, "a", NB_BIND_ARRAY, NB_F32), L(1, "b", NB_BIND_ARRAY, NB_F32), L(-1, "_result", NB_BIND_ARRAY, NB_F32)};
    nb_call_sig sig = mksig("nope", 0, 1, 1, 3, ls);
    NB_EXPECT_ERR(nb_program_emit_call(p, &sig, &sb, &lay), NB_ERR_NOT_FOUND, "nope");
    sig = mksig("add", 3, 1, 1, 3, ls);
    NB_EXPECT_ERR(nb_program_emit_call(p, &sig, &sb, &lay), NB_ERR_NOT_FOUND, "overload");
    sig = mksig("add", 0, 1, 1, 2, ls);
    NB_EXPECT_ERR(nb_program_emit_call(p, &sig, &sb, &lay), NB_ERR_INVALID_ARG, "leaves");
    sig = mksig("add", 0, 1, 1, 3, ls);
    sig.mode = NB_CALL_BWD; /* add is not [Differentiable]: a diagnostic (lang/ad.h) */
    NB_EXPECT_ERR(nb_program_emit_call(p, &sig, &sb, &lay), NB_ERR_COMPILE, "'add' is not differentiable");
    nb_leaf_sig lo[1] = {L(0, "o", NB_BIND_UNIFORM, NB_F32)};
    sig = mksig("sink", 0, 1, 0, 1, lo);
    NB_EXPECT_ERR(nb_program_emit_call(p, &sig, &sb, &lay), NB_ERR_INVALID_ARG, "array");
    nb_leaf_sig lt[3] = {L(0, "a", NB_BIND_TENSOR, NB_F32), L(1, "b", NB_BIND_ARRAY, NB_F32), L(-1, "_result", NB_BIND_ARRAY, NB_F32)};
    sig = mksig("add", 0, 1, 1, 3, lt);
    NB_EXPECT_ERR(nb_program_emit_call(p, &sig, &sb, &lay), NB_ERR_INVALID_ARG, "tensor");
    /* readable whole-program emission and IR dump */
    NB_EXPECT_OK(nb_program_emit(p, NB_TARGET_C, NULL, NB_CALL_PRIMAL, &sb));
    NB_EXPECT(strstr(nb_strbuf_cstr(&sb), "static float add(float a, float b)") != NULL);
    nb_strbuf_clear(&sb);
    NB_EXPECT_OK(nb_program_emit(p, NB_TARGET_CUDA, "add", NB_CALL_PRIMAL, &sb));
    NB_EXPECT(strstr(nb_strbuf_cstr(&sb), "__device__") != NULL);
    NB_EXPECT(strstr(nb_strbuf_cstr(&sb), "sink") == NULL);
    nb_strbuf_clear(&sb);
    NB_EXPECT_OK(nb_program_dump_ir(p, "add", &sb));
    NB_EXPECT(strstr(nb_strbuf_cstr(&sb), "func add(in $a: float, in $b: float) -> float") != NULL);
    NB_EXPECT_ERR(nb_program_dump_ir(p, "zzz", &sb), NB_ERR_NOT_FOUND, "zzz");
    nb_strbuf_free(&sb);
    nb_program_free(p);
}

/* Value generics: an MLP<W, L> struct (weights as uniforms, layers looped up to L) evaluated over
 * an array of inputs, and a generic function whose N is inferred from an array argument. */
static void test_generics(void)
{
    const char *src =
        "struct MLP<let W : int, let L : int> {\n"
        "  float w[L][W][W];\n"
        "  float b[L][W];\n"
        "  static const int kLayers = L;\n"
        "  float[W] eval(float x[W]) {\n"
        "    float h[W] = x;\n"
        "    for (int l = 0; l < L; l++) {\n"
        "      float o[W];\n"
        "      for (int i = 0; i < W; i++) {\n"
        "        float acc = b[l][i];\n"
        "        for (int j = 0; j < W; j++) acc += w[l][i][j] * h[j];\n"
        "        o[i] = l + 1 < L ? max(acc, 0.0) : acc;\n"
        "      }\n"
        "      h = o;\n"
        "    }\n"
        "    return h;\n"
        "  }\n"
        "};\n"
        "float sum<let N : int>(float x[N]) { float s = 0; for (int i = 0; i < N; i++) s += x[i]; return s; }\n"
        "typedef MLP<3, 2> Net;\n"
        "float f(Net m, float3 v) {\n"
        "  float x[3] = {v.x, v.y, v.z};\n"
        "  return sum(m.eval(x)) + sum<3>(x) * 0.5 + Net.kLayers;\n"
        "}\n";
    nb_leaf_sig ls[4] = {L(0, "m.w", NB_BIND_UNIFORM, NB_F32), L(0, "m.b", NB_BIND_UNIFORM, NB_F32),
                         L(1, "v", NB_BIND_ARRAY, NB_F32), L(-1, "_result", NB_BIND_ARRAY, NB_F32)};
    nb_call_sig sig = mksig("f", 0, 1, 1, 4, ls);
    kern k;
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    NB_EXPECT(k.lay.leaves[0].value_rank == 3 && k.lay.leaves[0].value_bytes == 2 * 3 * 3 * 4);
    NB_EXPECT(k.lay.leaves[1].value_rank == 2 && k.lay.leaves[1].value_bytes == 2 * 3 * 4);
    /* readable names for the instantiations in the emitted C */
    NB_EXPECT(strstr(k.src, "typedef struct MLP_3_2 {") && strstr(k.src, "MLP_3_2_eval(") && strstr(k.src, "sum_3("));
    float w[2][3][3], b[2][3];
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < 3; i++) {
            b[l][i] = 0.1f * (float)(i - l);
            for (int j = 0; j < 3; j++) w[l][i][j] = (float)((l + 1) * (i == j ? 1.0 : -0.25 * (j + 1)));
        }
    enum { NV = 5 };
    float v[NV * 3], r[NV];
    for (int n = 0; n < NV * 3; n++) v[n] = (float)(n % 7) * 0.5f - 1.0f;
    long long shape[1] = {NV}, sv[1] = {12}, iv[1] = {4}, sr[1] = {4};
    set_shape(&k, shape);
    set_uniform(&k, 0, w);
    set_uniform(&k, 1, b);
    set_array(&k, 2, v, sv, iv);
    set_array(&k, 3, r, sr, NULL);
    run(&k, NV);
    for (int n = 0; n < NV; n++) {
        double h[3] = {v[3 * n], v[3 * n + 1], v[3 * n + 2]}, want = 0;
        for (int l = 0; l < 2; l++) {
            double o[3];
            for (int i = 0; i < 3; i++) {
                double acc = b[l][i];
                for (int j = 0; j < 3; j++) acc += (double)w[l][i][j] * h[j];
                o[i] = l + 1 < 2 ? (acc > 0 ? acc : 0) : acc;
            }
            memcpy(h, o, sizeof h);
        }
        want = h[0] + h[1] + h[2] + (v[3 * n] + v[3 * n + 1] + v[3 * n + 2]) * 0.5 + 2;
        NB_EXPECT_NEAR(r[n], want, 1e-4);
    }
    kern_free(&k);
}

/* bwds with a shared weight w[16] (stride 0) and a per-element b[16] gradient: w_grad is summed
 * in the kernel's thread-local accumulators (nb_acc, one add per chunk; CUDA: block reduction,
 * one atomicAdd per block), b_grad keeps the per-element adds. */
static void test_bwds_broadcast_accum(void)
{
    const char *src = "[Differentiable]\n"
                      "float f(float w[16], float b[16], float x) {\n"
                      "    float s = 0;\n"
                      "    for (int k = 0; k < 16; k++) s += tanh(w[k] * x + b[k]) * w[k];\n"
                      "    return s;\n"
                      "}\n";
    enum { N = 3000 };
    /* f__bwds(w, b, x, w_grad, b_grad, x_grad, _dout) */
    nb_leaf_sig ls[7];
    for (int i = 0; i < 7; i++) ls[i] = L(i, "?", NB_BIND_ARRAY, NB_F32);
    nb_call_sig sig = mksig("f", 0, 1, 0, 7, ls);
    sig.mode = NB_CALL_BWD;
    kern k;
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    NB_EXPECT(strstr(k.src, "nb_acc->l3[") != NULL);
    static float w[16], b[16], x[N], wg[16], bg[N][16], xg[N], dout[N];
    for (int j = 0; j < 16; j++) { w[j] = 0.1f * (float)(j - 8); b[j] = 0.05f * (float)j; wg[j] = 1.0f; }
    for (int n = 0; n < N; n++) { x[n] = (float)((n % 37) - 18) / 18.0f; dout[n] = 1.0f + (float)(n % 5) * 0.25f; }
    long long shape[1] = {N}, s0[1] = {0}, s4[1] = {4}, s64[1] = {64}, in4[1] = {4};
    set_shape(&k, shape);
    set_array(&k, 0, w, s0, in4);
    set_array(&k, 1, b, s0, in4);
    set_array(&k, 2, x, s4, NULL);
    set_array(&k, 3, wg, s0, in4);
    set_array(&k, 4, bg, s64, in4);
    set_array(&k, 5, xg, s4, NULL);
    set_array(&k, 6, dout, s4, NULL);
    run(&k, N / 2); /* two "chunks": each adds its sums once */
    k.fn(k.block, N / 2, N);
    for (int j = 0; j < 16; j++) {
        double want = 1.0, scale = 1.0;
        for (int n = 0; n < N; n++) {
            double t = tanh((double)w[j] * x[n] + b[j]), d = dout[n] * ((1 - t * t) * x[n] * w[j] + t);
            want += d;
            scale += fabs(d);
            if (j == 3 && n == 5) NB_EXPECT_NEAR(bg[n][j], dout[n] * (1 - t * t) * w[j], 1e-5);
        }
        NB_EXPECT_NEAR(wg[j], want, 1e-6 * scale);
    }
    check_cuda(k.p, &sig);
    sig.target = NB_TARGET_CUDA;
    nb_strbuf cs;
    nb_strbuf_init(&cs);
    nb_call_layout lay;
    NB_EXPECT_OK(nb_program_emit_call(k.p, &sig, &cs, &lay));
    NB_EXPECT(strstr(nb_strbuf_cstr(&cs), "nb_block_sum((double)nb_acc.l3[") != NULL);
    nb_strbuf_free(&cs);
    kern_free(&k);
}

/* [Kernel]s launched with explicit blocks (sig.blocks, nb_call_run_blocks): the real thread ids,
 * a block's threads as one group on the CPU (groupshared + barriers), the derivative kernels. */
static void test_block_kernel(void)
{
    const char *src =
        "groupshared float sh[64];\n"
        "[Kernel]\n"
        "void bsum(Tensor<float, 1> x, Tensor<float, 1> sums, Tensor<uint, 2> ids) {\n"
        "  uint t = cudaThreadIdx().x, b = cudaBlockIdx().x, n = cudaBlockDim().x;\n"
        "  uint g = b * n + t;\n"
        "  sh[t] = x[g];\n"
        "  GroupMemoryBarrierWithGroupSync();\n"
        "  for (uint s = n / 2; s > 0; s /= 2) { if (t < s) sh[t] += sh[t + s]; GroupMemoryBarrierWithGroupSync(); }\n"
        "  if (t == 0) sums[b] = sh[0];\n"
        "  ids[g, 0] = dispatch_id().x; ids[g, 1] = cudaGridDim().x; ids[g, 2] = uint(WaveActiveSum(1.0));\n"
        "}\n"
        "[Kernel] [Differentiable]\n"
        "void sq(DiffTensor<float, 1> x, DiffTensor<float, 1> y) {\n"
        "  uint i = cudaBlockIdx().x * cudaBlockDim().x + cudaThreadIdx().x;\n"
        "  if (i >= x.size(0)) return;\n"
        "  y[i] = x[i] * x[i];\n"
        "}\n";
    nb_leaf_sig ls[3] = {L(0, "x", NB_BIND_TENSOR, NB_F32), L(1, "sums", NB_BIND_TENSOR, NB_F32),
                         L(2, "ids", NB_BIND_TENSOR, NB_U32)};
    nb_call_sig sig = mksig("bsum", 0, 6, 0, 3, ls);
    sig.blocks = 1;
    kern k;
    if (!kern_build(&k, src, &sig)) { NB_EXPECT(0); return; }
    NB_EXPECT(k.lay.group_size == 0 && !k.lay.shared_mem);
    NB_EXPECT(strstr(k.src, "nb_run_group") != NULL); /* (a block's threads as fibers) */
    float x[128], sums[2] = {0};
    unsigned ids[128][3];
    memset(ids, 0, sizeof ids);
    for (int i = 0; i < 128; i++) x[i] = (float)i;
    long long shape[6] = {1, 1, 2, 1, 1, 64}, xs[1] = {128}, xst[1] = {4}, ss[1] = {2}, ids_shape[2] = {128, 3}, ids_st[2] = {12, 4};
    set_shape(&k, shape);
    set_tensor(&k, 0, x, 1, xs, xst);
    set_tensor(&k, 1, sums, 1, ss, xst);
    set_tensor(&k, 2, ids, 2, ids_shape, ids_st);
    run(&k, 2); /* two blocks */
    NB_EXPECT(sums[0] == 2016.0f && sums[1] == 6112.0f);
    for (int i = 0; i < 128; i++) NB_EXPECT(ids[i][0] == (unsigned)i && ids[i][1] == 2 && ids[i][2] == 32);
    check_cuda(k.p, &sig);
    /* a launch over a thread grid of the same kernel reports its groupshared memory */
    nb_call_sig sg = mksig("bsum", 0, 3, 0, 3, ls);
    nb_strbuf o;
    nb_strbuf_init(&o);
    nb_call_layout lay;
    NB_EXPECT_OK(nb_program_emit_call(k.p, &sg, &o, &lay));
    NB_EXPECT(lay.shared_mem == 1);
    nb_strbuf_free(&o);
    kern_free(&k);
    /* the derivative kernels of sq: same parameters (DiffTensor gradients in the tensors) */
    nb_leaf_sig ld[2] = {L(0, "x", NB_BIND_TENSOR, NB_F32), L(1, "y", NB_BIND_TENSOR, NB_F32)};
    for (int mode = NB_CALL_FWD; mode <= NB_CALL_BWD; mode++) {
        nb_call_sig sd = mksig("sq", 0, 6, 0, 2, ld);
        sd.blocks = 1;
        sd.mode = (nb_call_mode)mode;
        if (!kern_build(&k, src, &sd)) { NB_EXPECT(0); return; }
        float xv[5] = {1, 2, 3, 4, 5}, xg[5] = {1, 0, 0, 1, 2}, yv[5] = {0}, yg[5] = {1, 0, 1, 0, 1};
        if (mode == NB_CALL_FWD) memset(yg, 0, sizeof yg);
        else memset(xg, 0, sizeof xg);
        long long sh5[6] = {1, 1, 2, 1, 1, 4}, n5[1] = {5}, st5[1] = {4};
        set_shape(&k, sh5);
        set_tensor(&k, 0, xv, 1, n5, st5);
        set_tensor(&k, 1, yv, 1, n5, st5);
        uint64_t gx = (uint64_t)(uintptr_t)xg, gy = (uint64_t)(uintptr_t)yg;
        memcpy(k.block + k.lay.leaves[0].grad_offset, &gx, 8);
        memcpy(k.block + k.lay.leaves[0].grad_offset + 8, st5, 8);
        memcpy(k.block + k.lay.leaves[1].grad_offset, &gy, 8);
        memcpy(k.block + k.lay.leaves[1].grad_offset + 8, st5, 8);
        run(&k, 2);
        if (mode == NB_CALL_FWD) { /* y = x^2, dy = 2 x dx */
            for (int i = 0; i < 5; i++) NB_EXPECT(yv[i] == xv[i] * xv[i]);
            NB_EXPECT(yg[0] == 2 && yg[1] == 0 && yg[2] == 0 && yg[3] == 8 && yg[4] == 20);
        } else { /* dx += 2 x dy */
            NB_EXPECT(xg[0] == 2 && xg[1] == 0 && xg[2] == 6 && xg[3] == 0 && xg[4] == 10);
        }
        check_cuda(k.p, &sd);
        kern_free(&k);
    }
}

static void test_cuda_compiles(void)
{
    if (g_nvrtc_ok == 0) NB_SKIP("NVRTC is not available: CUDA sources were emitted but not compiled");
    NB_EXPECT(g_cuda_compiled > 0);
    printf("       (%d CUDA kernels compiled to PTX)\n", g_cuda_compiled);
}

/* Compile time stays near-linear (issue #21): reverse-mode code for a 2,000-statement function
 * and checking 20,000 functions took hours / 10 s when name uniquing and symbol lookups were
 * linear scans; now about 0.2 s and 0.2 s (release). CPU-time bounds 50x above that. */
static double cpu_seconds(void) { return (double)clock() / CLOCKS_PER_SEC; }

static void test_compile_time_linear(void)
{
    nb_strbuf src;
    nb_strbuf_init(&src);
    nb_strbuf_append(&src, "[Differentiable]\nfloat f(float x, float y)\n{\n    float a0 = x * y;\n    float a1 = a0 + y;\n");
    for (int i = 2; i < 2000; i++)
        nb_strbuf_printf(&src, "    float a%d = a%d * 1.0001 + sin(a%d) * x;\n", i, i - 1, i - 2);
    nb_strbuf_append(&src, "    return a1999;\n}\n");
    double t0 = cpu_seconds();
    nb_program *p = NULL;
    NB_EXPECT_OK(nb_program_compile_source("long.nb", nb_strbuf_cstr(&src), NULL, &p));
    nb_strbuf out;
    nb_strbuf_init(&out);
    if (p) NB_EXPECT_OK(nb_program_emit(p, NB_TARGET_C, "f", NB_CALL_BWD, &out));
    double t = cpu_seconds() - t0;
    NB_EXPECT(strstr(nb_strbuf_cstr(&out), "a1999") != NULL);
    if (t > 10.0) fprintf(stderr, "  2,000-statement bwd emit took %.1f s CPU\n", t);
    NB_EXPECT(t < 10.0);
    nb_strbuf_free(&out);
    if (p) nb_program_free(p);

    nb_strbuf_clear(&src);
    nb_strbuf_append(&src, "float f0(float x) { return x + 1.0; }\n");
    for (int i = 1; i < 20000; i++) nb_strbuf_printf(&src, "float f%d(float x) { return f%d(x) * 0.5; }\n", i, i - 1);
    t0 = cpu_seconds();
    p = NULL;
    NB_EXPECT_OK(nb_program_compile_source("many.nb", nb_strbuf_cstr(&src), NULL, &p));
    t = cpu_seconds() - t0;
    if (t > 10.0) fprintf(stderr, "  checking 20,000 functions took %.1f s CPU\n", t);
    NB_EXPECT(t < 10.0);
    if (p) nb_program_free(p);
    nb_strbuf_free(&src);
}

static void cleanup(void)
{
    if (!g_dir[0] || strncmp(g_dir, "/tmp/nb_test_emit_", 18) != 0) return;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "  could not remove %s\n", g_dir);
}

int main(int argc, char **argv)
{
    atexit(cleanup);
    NB_TEST_MAIN(argc, argv, test_add_scalars, test_vectors_swizzles, test_matrices, test_tall_matrix, test_arrays, test_structs_methods,
                 test_control_flow, test_out_inout_overloads, test_constants, test_intrinsics, test_broadcast_2d,
                 test_kernel_tensor, test_compute_entry, test_tensor_view, test_group_kernel, test_block_kernel, test_bad_sigs, test_generics, test_bwds_broadcast_accum, test_cuda_compiles,
                 test_compile_time_linear, test_target_prelude_wmma, test_pointer_param);
}

/* Contiguous 1-D calls run 4 indices per CUDA thread (nb_call_sig.contig4: vector loads/stores,
 * the tail one by one): the decision, the PTX, and on a GPU the values against the CPU for sizes
 * with and without a tail.
 * Gradients of bwds calls that one thread owns (nb_leaf_sig.owned) and gradients broadcast over
 * part of the kernel (CUDA: summed per warp, one atomic): the call layer's decision
 * (nb_call_strides_one_to_one, nb_call_owned_grads) for contiguous, transposed, broadcast,
 * partly broadcast, overlapping and huge layouts; the values on the CPU (the plain add keeps what
 * the gradient array held; broadcast sums stay complete over many chunks); the generated C and
 * CUDA (NVRTC, no GPU needed): an owned gradient has no atomic, a partly broadcast one the
 * warp-uniform shuffle sum. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "call/call_internal.h"
#include "device/cuda/cuda_api.h"
#include "lang/compiler.h"
#include "nabla/alloc.h"
#include "nabla/module.h"
#include "nb_test.h"

static const char *SRC = "[Differentiable]\n"
                         "float madd(float a, float b, float c) { return a * b + c; }\n"
                         "float scale(float a, float s) { return a * s; }\n"
                         "void axpy(float a, float x, inout float y) { y = y + a * x; }\n"
                         "float idx(int i) { return float(i); }\n";

/* ---- the decision ------------------------------------------------------------------------- */

static void test_one_to_one(void) {
    const int64_t s2[2] = {8, 16};
    NB_EXPECT(nb_call_strides_one_to_one(2, s2, (int64_t[]){64, 4}, 4));       /* row-major f32 */
    NB_EXPECT(nb_call_strides_one_to_one(2, s2, (int64_t[]){4, 32}, 4));       /* transposed */
    NB_EXPECT(nb_call_strides_one_to_one(2, s2, (int64_t[]){-64, 4}, 4));      /* flipped rows */
    NB_EXPECT(nb_call_strides_one_to_one(2, s2, (int64_t[]){128, 8}, 4));      /* every 2nd column */
    NB_EXPECT(nb_call_strides_one_to_one(2, s2, (int64_t[]){64, 4}, 8) == 0);  /* f64 on 4-byte steps */
    NB_EXPECT(nb_call_strides_one_to_one(2, s2, (int64_t[]){4, 0}, 4) == 0);   /* a row broadcast */
    NB_EXPECT(nb_call_strides_one_to_one(2, s2, (int64_t[]){0, 4}, 4) == 0);   /* a column broadcast */
    NB_EXPECT(nb_call_strides_one_to_one(2, s2, (int64_t[]){32, 4}, 4) == 0);  /* rows overlap */
    NB_EXPECT(nb_call_strides_one_to_one(2, s2, (int64_t[]){4, 4}, 4) == 0);   /* the same element twice */
    NB_EXPECT(nb_call_strides_one_to_one(2, (int64_t[]){1, 16}, (int64_t[]){0, 4}, 4)); /* extent 1 */
    NB_EXPECT(nb_call_strides_one_to_one(1, (int64_t[]){1}, (int64_t[]){0}, 4));        /* one index */
    NB_EXPECT(nb_call_strides_one_to_one(0, NULL, NULL, 4));                            /* rank 0 */
    NB_EXPECT(nb_call_strides_one_to_one(1, (int64_t[]){0}, (int64_t[]){4}, 4) == 0);   /* empty */
    /* more than 2^31 elements: the decision is exact in 64 bits */
    const int64_t big = ((int64_t)1 << 31) + 5;
    NB_EXPECT(nb_call_strides_one_to_one(1, &big, (int64_t[]){4}, 4));
    NB_EXPECT(nb_call_strides_one_to_one(2, (int64_t[]){big, 3}, (int64_t[]){12, 4}, 4));
    NB_EXPECT(nb_call_strides_one_to_one(2, (int64_t[]){big, 3}, (int64_t[]){8, 4}, 4) == 0);
    /* a stride times its extent past INT64_MAX: not proven, so not owned */
    NB_EXPECT(nb_call_strides_one_to_one(2, (int64_t[]){4, big}, (int64_t[]){INT64_MAX / 2, 4}, 4) == 0);
    NB_EXPECT(nb_call_strides_one_to_one(9, s2, s2, 4) == 0); /* rank past NB_MAX_DIMS */
}

/* ---- bound calls ---------------------------------------------------------------------------- */

static nb_tensor *filled(nb_device *dev, int nd, const int64_t *shape, float base, float step) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    float *h = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) h[i] = base + step * (float)(i % 13);
    nb_tensor *t = NULL;
    NB_EXPECT_OK(nb_tensor_from_host(dev, NB_F32, nd, shape, h, &t));
    free(h);
    return t;
}

/* A bwds call of madd over a [R, C] kernel: da (a's gradient, shaped like a) and dc (c's
 * gradient: c is [R, C], [R, 1] or [1] as given). */
static nb_call *madd_bwd(nb_module *m, nb_tensor *a, nb_tensor *b, nb_tensor *c, nb_tensor *dout, nb_tensor *da,
                         nb_tensor *dc) {
    nb_func *f = NULL;
    nb_call *call = NULL;
    NB_EXPECT_OK(nb_module_func(m, "madd", &f));
    NB_EXPECT_OK(nb_call_begin(f, &call));
    NB_EXPECT_OK(nb_call_set_mode(call, NB_MODE_BWD));
    nb_call_arg(call, 0, a), nb_call_arg(call, 1, b), nb_call_arg(call, 2, c);
    if (da) nb_call_grad(call, 0, da);
    if (dc) nb_call_grad(call, 2, dc);
    nb_call_dout(call, dout);
    return call;
}

/* The owned flags the call layer gives leaves path_a / path_c of a bound call (-1: no such leaf). */
static void owned_flags(nb_call *c, int *oa, int *oc) {
    *oa = *oc = -1;
    NB_EXPECT_OK(nb_call_ad_fuse(c, 0));
    NB_EXPECT_OK(nb_call_bind(c, 0, NULL));
    NB_EXPECT_OK(nb_call_materialize(c, 0));
    nb_call_owned_grads(c);
    const nb_fn_info *in = &c->f->infos[c->overload];
    for (int j = 0; j < c->nleaves; j++) {
        if (!strcmp(in->leaves[j].path, "a_grad")) *oa = c->sig.leaves[j].owned;
        if (!strcmp(in->leaves[j].path, "c_grad")) *oc = c->sig.leaves[j].owned;
        if (!strcmp(in->leaves[j].path, "a") || !strcmp(in->leaves[j].path, "_dout"))
            NB_EXPECT(c->sig.leaves[j].owned == 0); /* inputs are never marked */
    }
}

/* Emits the call's kernel for target and returns its source (caller frees). */
static char *emit(nb_call *c, nb_call_target target) {
    nb_call_sig sig = c->sig;
    sig.target = target;
    nb_strbuf src;
    nb_strbuf_init(&src);
    nb_call_layout lay;
    NB_EXPECT_OK(nb_program_emit_call(c->f->m->prog, &sig, &src, &lay));
    char *s = strdup(nb_strbuf_cstr(&src));
    nb_strbuf_free(&src);
    return s;
}

static void check_values(const char *what, nb_tensor *t, const float *want, int64_t n) {
    float *h = malloc((size_t)n * 4);
    NB_EXPECT_OK(nb_tensor_to_host(t, h, (size_t)n * 4));
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 4; i++) {
        double tol = 1e-4 * (1.0 + (want[i] < 0 ? -want[i] : want[i]));
        if (!(h[i] - want[i] <= tol && want[i] - h[i] <= tol)) {
            fprintf(stderr, "  %s[%lld] = %g, want %g\n", what, (long long)i, (double)h[i], (double)want[i]);
            bad++;
        }
    }
    NB_EXPECT(bad == 0);
    free(h);
}

/* da += dout * b (owned: kernel-shaped) and dc += dout summed as c is broadcast, on the CPU; the
 * flags the call layer picks, and the generated C. R x C = 96 x 1024 spans many CPU chunks. */
static void test_cpu_values(void) {
    enum { R = 96, C = 1024 };
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    nb_module *m;
    NB_REQUIRE_OK(nb_module_load_source(dev, "owned.nb", SRC, NULL, &m));
    const int64_t s2[2] = {R, C}, r1[2] = {R, 1}, one = 1, t2[2] = {C, R};
    nb_tensor *a = filled(dev, 2, s2, 0.5f, 0.1f), *b = filled(dev, 2, s2, -1.0f, 0.25f);
    nb_tensor *dout = filled(dev, 2, s2, 0.25f, 0.5f);
    float *hb = malloc(R * C * 4), *hd = malloc(R * C * 4), *want = malloc(R * C * 4);
    NB_REQUIRE_OK(nb_tensor_to_host(b, hb, R * C * 4));
    NB_REQUIRE_OK(nb_tensor_to_host(dout, hd, R * C * 4));
    for (int k = 0; k < 4; k++) {
        /* k = 0: c and dc kernel-shaped; 1: c per row [R, 1] (add_channel's dc); 2: c one value
         * [1] (a whole-kernel broadcast); 3: da a transposed view, dc per row */
        nb_tensor *c = k == 0 ? filled(dev, 2, s2, 1, 0) : k == 2 ? filled(dev, 1, &one, 1, 0) : filled(dev, 2, r1, 1, 0);
        nb_tensor *dc = k == 0 ? filled(dev, 2, s2, 3, 0) : k == 2 ? filled(dev, 1, &one, 3, 0) : filled(dev, 2, r1, 3, 0);
        nb_tensor *da_base = k == 3 ? filled(dev, 2, t2, 2, 0) : filled(dev, 2, s2, 2, 0), *da = da_base;
        if (k == 3) NB_REQUIRE_OK(nb_tensor_transpose(da_base, 0, 1, &da));
        int oa, oc;
        nb_call *call = madd_bwd(m, a, b, c, dout, da, dc);
        owned_flags(call, &oa, &oc);
        NB_EXPECT(oa == 1);            /* kernel-shaped (transposed too): one thread per element */
        NB_EXPECT(oc == (k == 0));     /* broadcast over a row / the kernel: shared */
        char *src = emit(call, NB_TARGET_C);
        NB_EXPECT(strstr(src, "nb_accum_f32((void *)(nb_a3)") == NULL); /* a_grad: leaf 3 */
        NB_EXPECT(strstr(src, "*(float *)(nb_a3) += (float)") != NULL);
        NB_EXPECT((strstr(src, "nb_accum_f32((void *)(nb_a5)") != NULL) == (k != 0)); /* c_grad: leaf 5 */
        free(src);
        nb_call_free(call);
        call = madd_bwd(m, a, b, c, dout, da, dc);
        NB_EXPECT_OK(nb_call_run(call, NULL));
        /* da = 2 + dout * b (the plain add keeps the 2 the array held) */
        for (int64_t i = 0; i < R * C; i++) want[i] = 2.0f + hd[i] * hb[i];
        if (k == 3) { /* read da in kernel order through a contiguous copy */
            nb_tensor *cc = NULL;
            NB_REQUIRE_OK(nb_tensor_contiguous(da, &cc));
            check_values("da (transposed)", cc, want, R * C);
            nb_tensor_free(cc);
        } else {
            check_values("da", da, want, R * C);
        }
        /* dc = 3 + the sum of dout over what c is broadcast over */
        int64_t nc = k == 0 ? R * C : k == 2 ? 1 : R;
        for (int64_t i = 0; i < nc; i++) want[i] = 3.0f;
        for (int64_t i = 0; i < R * C; i++) want[k == 0 ? i : k == 2 ? 0 : i / C] += hd[i];
        check_values("dc", dc, want, nc);
        nb_tensor_free(c), nb_tensor_free(dc), nb_tensor_free(da_base);
        if (da != da_base) nb_tensor_free(da);
    }
    free(hb), free(hd), free(want);
    nb_tensor_free(a), nb_tensor_free(b), nb_tensor_free(dout);
    nb_module_free(m);
    nb_device_close(dev);
}

/* A gradient bound twice over the kernel (a [C] array for a [R, C] kernel: every column's
 * element is shared by R threads) is not owned, and its sums are complete. */
static void test_cpu_shared_columns(void) {
    enum { R = 64, C = 256 };
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    nb_module *m;
    NB_REQUIRE_OK(nb_module_load_source(dev, "owned.nb", SRC, NULL, &m));
    const int64_t s2[2] = {R, C}, c1 = C;
    nb_tensor *a = filled(dev, 1, &c1, 0.5f, 0.1f), *b = filled(dev, 2, s2, -1.0f, 0.25f);
    nb_tensor *c = filled(dev, 2, s2, 1, 0), *dout = filled(dev, 2, s2, 0.25f, 0.5f);
    nb_tensor *da = filled(dev, 1, &c1, 0, 0);
    int oa, oc;
    nb_call *call = madd_bwd(m, a, b, c, dout, da, NULL);
    owned_flags(call, &oa, &oc);
    NB_EXPECT(oa == 0);
    NB_EXPECT(oc == -1 || oc == 0);
    nb_call_free(call);
    call = madd_bwd(m, a, b, c, dout, da, NULL);
    NB_EXPECT_OK(nb_call_run(call, NULL));
    float *hb = malloc(R * C * 4), *hd = malloc(R * C * 4), want[C];
    NB_REQUIRE_OK(nb_tensor_to_host(b, hb, R * C * 4));
    NB_REQUIRE_OK(nb_tensor_to_host(dout, hd, R * C * 4));
    memset(want, 0, sizeof want);
    for (int64_t i = 0; i < R * C; i++) want[i % C] += hd[i] * hb[i];
    check_values("da (shared columns)", da, want, C);
    free(hb), free(hd);
    nb_tensor_free(a), nb_tensor_free(b), nb_tensor_free(c), nb_tensor_free(dout), nb_tensor_free(da);
    nb_module_free(m);
    nb_device_close(dev);
}

/* Two gradients in one buffer: neither the same array twice nor shifted views of one buffer
 * (element i of da is element i - 1 of dc) are owned (atomic adds), and the sums are right. */
static void test_cpu_aliased_grads(void) {
    enum { R = 8, C = 64, NE = R * C };
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    nb_module *m;
    NB_REQUIRE_OK(nb_module_load_source(dev, "owned.nb", SRC, NULL, &m));
    const int64_t s2[2] = {R, C}, nbuf = NE + 1;
    nb_tensor *a = filled(dev, 2, s2, 0.5f, 0.1f), *b = filled(dev, 2, s2, -1.0f, 0.25f), *c = filled(dev, 2, s2, 1, 0);
    nb_tensor *dout = filled(dev, 2, s2, 0.25f, 0.5f);
    float *hb = malloc(NE * 4), *hd = malloc(NE * 4), want[NE + 1];
    NB_REQUIRE_OK(nb_tensor_to_host(b, hb, NE * 4));
    NB_REQUIRE_OK(nb_tensor_to_host(dout, hd, NE * 4));
    for (int k = 0; k < 2; k++) {
        nb_tensor *buf = filled(dev, 1, &nbuf, 0, 0), *v0 = NULL, *v1 = NULL, *g0 = NULL, *g1 = NULL;
        NB_REQUIRE_OK(nb_tensor_slice(buf, 0, 0, NE, 1, &v0));
        NB_REQUIRE_OK(nb_tensor_slice(buf, 0, k, NE + k, 1, &v1));
        NB_REQUIRE_OK(nb_tensor_reshape(v0, 2, s2, &g0));
        NB_REQUIRE_OK(nb_tensor_reshape(v1, 2, s2, &g1));
        int oa, oc;
        nb_call *call = madd_bwd(m, a, b, c, dout, g0, g1);
        owned_flags(call, &oa, &oc);
        NB_EXPECT(oa == 0 && oc == 0); /* k = 0: one array twice; 1: shifted views */
        nb_call_free(call);
        call = madd_bwd(m, a, b, c, dout, g0, g1);
        NB_EXPECT_OK(nb_call_run(call, NULL));
        memset(want, 0, sizeof want);
        for (int i = 0; i < NE; i++) want[i] += hd[i] * hb[i], want[i + k] += hd[i];
        check_values(k ? "shifted gradients" : "one gradient array twice", buf, want, NE + 1);
        nb_tensor_free(g0), nb_tensor_free(g1), nb_tensor_free(v0), nb_tensor_free(v1), nb_tensor_free(buf);
    }
    free(hb), free(hd);
    nb_tensor_free(a), nb_tensor_free(b), nb_tensor_free(c), nb_tensor_free(dout);
    nb_module_free(m);
    nb_device_close(dev);
}

/* The CUDA kernels of these calls compile (NVRTC, compute_90) and their PTX shows the paths: an
 * owned gradient alone has no atomic (k = 0); a row-broadcast one the warp vote, shuffles and
 * atomics and the runtime-selected whole-broadcast block reduction (double shared loads) (k = 1);
 * dc [C] broadcast over the rows (g [F] over [N, F]) with the shacc flag the call layer gives it
 * on CUDA (k = 2): shared atomics, the barriers (bar.sync), the flush's global atomics, no warp
 * vote and no block reduction; without the flag (k = 3): the vote and the reduction, as before. */
static void test_nvrtc(void) {
    if (nb_nvrtc_version() == 0) NB_SKIP("NVRTC is not available");
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    nb_module *m;
    NB_REQUIRE_OK(nb_module_load_source(dev, "owned.nb", SRC, NULL, &m));
    const int64_t s2[2] = {16, 64}, r1[2] = {16, 1}, f1[1] = {64};
    nb_tensor *a = filled(dev, 2, s2, 0, 0), *b = filled(dev, 2, s2, 0, 0), *c = filled(dev, 2, s2, 0, 0);
    nb_tensor *cr = filled(dev, 2, r1, 0, 0), *dout = filled(dev, 2, s2, 0, 0), *da = filled(dev, 2, s2, 0, 0);
    nb_tensor *dcr = filled(dev, 2, r1, 0, 0), *cf = filled(dev, 1, f1, 0, 0), *dcf = filled(dev, 1, f1, 0, 0);
    for (int k = 0; k < 4; k++) {
        int oa, oc;
        nb_call *call = k == 0 ? madd_bwd(m, a, b, c, dout, da, NULL)
                        : k == 1 ? madd_bwd(m, a, b, cr, dout, da, dcr) : madd_bwd(m, a, b, cf, dout, da, dcf);
        owned_flags(call, &oa, &oc);
        nb_call_shared_grads(call, k == 2);
        char *src = emit(call, NB_TARGET_CUDA);
        void *img = NULL;
        size_t size = 0;
        int cubin = 0;
        nb_status s = nb_nvrtc_compile(src, "owned.cu", "compute_90", NULL, &img, &size, &cubin);
        NB_EXPECT(s == NB_OK);
        if (s) fprintf(stderr, "  NVRTC: %s\n%s\n", nb_last_error(), src);
        if (!s && !cubin) {
            const char *ptx = (const char *)img;
            int gatom = strstr(ptx, "atom.global.add.f32") != NULL || strstr(ptx, "red.global.add.f32") != NULL;
            int satom = strstr(ptx, "atom.shared.add.f32") != NULL || strstr(ptx, "red.shared.add.f32") != NULL;
            NB_EXPECT(gatom == (k >= 1));
            NB_EXPECT(satom == (k == 2));
            NB_EXPECT((strstr(ptx, "vote.sync.all") != NULL) == (k == 1 || k == 3));
            NB_EXPECT((strstr(ptx, "ld.shared.f64") != NULL) == (k == 1 || k == 3));
            NB_EXPECT(k != 2 || strstr(ptx, "bar.sync") != NULL);
            NB_EXPECT(strstr(ptx, "st.global.f32") != NULL); /* da's plain add */
        }
        if (img) nb_free(img, size);
        free(src);
        nb_call_free(call);
    }
    nb_tensor *all[] = {a, b, c, cr, dout, da, dcr, cf, dcf};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) nb_tensor_free(all[i]);
    nb_module_free(m);
    nb_device_close(dev);
}

/* ---- 4 contiguous indices per thread ------------------------------------------------------- */

static nb_tensor *typed(nb_device *dev, nb_dtype dt, int64_t n) {
    nb_tensor *t = NULL;
    NB_EXPECT_OK(nb_tensor_zeros(dev, dt, 1, &n, &t));
    return t;
}

/* nb_call_contig4_ok of scale(a, 2.0) -> y after binding (and materializing) on dev. */
static int contig4_of(nb_module *m, nb_tensor *a, nb_tensor *y) {
    nb_func *f = NULL;
    nb_call *c = NULL;
    NB_EXPECT_OK(nb_module_func(m, "scale", &f));
    NB_EXPECT_OK(nb_call_begin(f, &c));
    nb_call_arg(c, 0, a), nb_call_arg_double(c, 1, 2.0), nb_call_result(c, y);
    NB_EXPECT_OK(nb_call_bind(c, 1, NULL));
    NB_EXPECT_OK(nb_call_materialize(c, 1));
    int ok = nb_call_contig4_ok(c);
    nb_call_free(c);
    return ok;
}

/* The same for madd(a, b, c) -> y (2-D kernels: rows of a multiple of 4, per-row operands). */
static int contig4_madd(nb_module *m, nb_tensor *a, nb_tensor *b, nb_tensor *c, nb_tensor *y) {
    nb_func *f = NULL;
    nb_call *call = NULL;
    NB_EXPECT_OK(nb_module_func(m, "madd", &f));
    NB_EXPECT_OK(nb_call_begin(f, &call));
    nb_call_arg(call, 0, a), nb_call_arg(call, 1, b), nb_call_arg(call, 2, c), nb_call_result(call, y);
    NB_EXPECT_OK(nb_call_bind(call, 1, NULL));
    NB_EXPECT_OK(nb_call_materialize(call, 1));
    int ok = nb_call_contig4_ok(call);
    nb_call_free(call);
    return ok;
}

static void test_contig4_decision(void) {
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    nb_module *m;
    NB_REQUIRE_OK(nb_module_load_source(dev, "owned.nb", SRC, NULL, &m));
    nb_tensor *a = typed(dev, NB_F32, 1030), *y = typed(dev, NB_F32, 1030), *ab = typed(dev, NB_BF16, 1030);
    nb_tensor *a64 = typed(dev, NB_F64, 1030), *y2 = typed(dev, NB_F32, 515), *y1 = typed(dev, NB_F32, 1029);
    nb_tensor *sl4 = NULL, *sl1 = NULL, *st2 = NULL, *m2 = NULL, *yo4 = NULL;
    NB_REQUIRE_OK(nb_tensor_slice(a, 0, 4, 1030, 1, &sl4));  /* 16 bytes in: aligned */
    NB_REQUIRE_OK(nb_tensor_slice(a, 0, 1, 1030, 1, &sl1));  /* 4 bytes in: not */
    NB_REQUIRE_OK(nb_tensor_slice(a, 0, 0, 1030, 2, &st2));  /* every second element */
    NB_REQUIRE_OK(nb_tensor_slice(y, 0, 4, 1030, 1, &yo4));
    NB_REQUIRE_OK(nb_tensor_reshape(a, 2, (int64_t[]){10, 103}, &m2));
    NB_EXPECT(contig4_of(m, a, y) == 1);
    NB_EXPECT(contig4_of(m, ab, y) == 1);    /* bf16 in (8-byte vectors), f32 out */
    NB_EXPECT(contig4_of(m, sl4, yo4) == 1);
    NB_EXPECT(contig4_of(m, sl1, y1) == 0);  /* misaligned */
    NB_EXPECT(contig4_of(m, st2, y2) == 0);  /* strided */
    NB_EXPECT(contig4_of(m, a64, y) == 0);   /* 8-byte elements */
    NB_EXPECT(contig4_of(m, m2, NULL) == 0); /* a 2-D kernel */
    nb_tensor *one = typed(dev, NB_F32, 1), *one64 = typed(dev, NB_F64, 1);
    NB_EXPECT(contig4_of(m, one, y) == 1);   /* a broadcast input ([1] for 1030 indices): read in place */
    NB_EXPECT(contig4_of(m, one64, y) == 1); /* (any element size: no vector load) */
    NB_EXPECT(contig4_of(m, one, one) == 0); /* nothing contiguous */
    nb_tensor_free(one), nb_tensor_free(one64);
    { /* 2-D: [16, 64] arrays with a per-row [16, 1] operand; [16, 6] rows are not a multiple of 4 */
        nb_tensor *x = NULL, *z = NULL, *r = NULL, *col = NULL, *xt = NULL, *x6 = NULL, *y6 = NULL, *r6 = NULL;
        NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 2, (int64_t[]){16, 64}, &x));
        NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 2, (int64_t[]){16, 64}, &z));
        NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 2, (int64_t[]){16, 1}, &r));
        NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 2, (int64_t[]){1, 64}, &col));
        NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 2, (int64_t[]){64, 16}, &xt));
        NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 2, (int64_t[]){16, 6}, &x6));
        NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 2, (int64_t[]){16, 6}, &y6));
        NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 2, (int64_t[]){16, 1}, &r6));
        nb_tensor *t = NULL;
        NB_REQUIRE_OK(nb_tensor_transpose(xt, 0, 1, &t));
        NB_EXPECT(contig4_madd(m, x, x, x, z) == 1);
        NB_EXPECT(contig4_madd(m, x, r, r, z) == 1);   /* per-row operands: read in place */
        NB_EXPECT(contig4_madd(m, x, col, x, z) == 0); /* a per-column operand: not (yet) */
        NB_EXPECT(contig4_madd(m, t, x, x, z) == 0);   /* a transposed array */
        NB_EXPECT(contig4_madd(m, x6, r6, x6, y6) == 0);
        nb_tensor *ts[] = {x, z, r, col, xt, x6, y6, r6, t};
        for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) nb_tensor_free(ts[i]);
    }
    /* a generator argument: no */
    nb_func *f = NULL;
    nb_call *c = NULL;
    nb_generator g;
    nb_generator_init(&g, NB_GEN_CALL_ID);
    NB_REQUIRE_OK(nb_module_func(m, "idx", &f));
    NB_REQUIRE_OK(nb_call_begin(f, &c));
    nb_call_arg_generator(c, 0, &g), nb_call_result(c, y);
    NB_EXPECT_OK(nb_call_bind(c, 1, NULL));
    NB_EXPECT_OK(nb_call_materialize(c, 1));
    NB_EXPECT(nb_call_contig4_ok(c) == 0);
    nb_call_free(c);
    nb_tensor *all[] = {a, y, ab, a64, y2, y1, sl4, sl1, st2, m2, yo4};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) nb_tensor_free(all[i]);
    nb_module_free(m);
    nb_device_close(dev);
}

/* The contig4 kernels compile; their quad loop reads and writes with vector instructions (f32:
 * 16 bytes, bf16: 8), the plain kernel of the same call has none. */
static void test_contig4_nvrtc(void) {
    if (nb_nvrtc_version() == 0) NB_SKIP("NVRTC is not available");
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    nb_module *m;
    NB_REQUIRE_OK(nb_module_load_source(dev, "owned.nb", SRC, NULL, &m));
    nb_tensor *a = typed(dev, NB_F32, 64), *x = typed(dev, NB_BF16, 64), *y = typed(dev, NB_F32, 64);
    for (int k = 0; k < 4; k++) { /* scale f32 (contig4, plain); axpy with an inout y and a bf16 x (contig4, plain) */
        nb_func *f = NULL;
        nb_call *c = NULL;
        NB_REQUIRE_OK(nb_module_func(m, k < 2 ? "scale" : "axpy", &f));
        NB_REQUIRE_OK(nb_call_begin(f, &c));
        if (k < 2) nb_call_arg(c, 0, a), nb_call_arg_double(c, 1, 2.0), nb_call_result(c, y);
        else nb_call_arg_double(c, 0, 0.5), nb_call_arg(c, 1, x), nb_call_arg(c, 2, y);
        NB_EXPECT_OK(nb_call_bind(c, k < 2, NULL));
        NB_EXPECT_OK(nb_call_materialize(c, k < 2));
        NB_EXPECT(nb_call_contig4_ok(c) == 1);
        nb_call_mark_contig4(c, k % 2 == 0);
        char *src = emit(c, NB_TARGET_CUDA);
        NB_EXPECT((strstr(src, "nb_quad_") != NULL) == (k % 2 == 0));
        void *img = NULL;
        size_t size = 0;
        int cubin = 0;
        nb_status s = nb_nvrtc_compile(src, "contig4.cu", "compute_90", NULL, &img, &size, &cubin);
        NB_EXPECT(s == NB_OK);
        if (s) fprintf(stderr, "  NVRTC: %s\n%s\n", nb_last_error(), src);
        if (!s && !cubin) {
            const char *ptx = (const char *)img;
            int v4 = strstr(ptx, "ld.global.v4") != NULL, st4 = strstr(ptx, "st.global.v4") != NULL;
            int v2 = strstr(ptx, "ld.global.v2") != NULL || strstr(ptx, "ld.global.v4.u16") != NULL;
            if (k % 2) NB_EXPECT(!v4 && !st4 && !v2);
            else NB_EXPECT(st4 && (k == 0 ? v4 : v2 && v4)); /* axpy: bf16 x (8 bytes), f32 y (16) */
        }
        if (img) nb_free(img, size);
        free(src);
        nb_call_free(c);
    }
    nb_tensor_free(a), nb_tensor_free(x), nb_tensor_free(y);
    nb_module_free(m);
    nb_device_close(dev);
}

/* On a GPU: scale and axpy over sizes with every tail length (and an aligned offset view) agree
 * with the CPU exactly (the same float operations); madd (x * r + x) to one rounding, as NVRTC
 * contracts it into an fma. */
static void test_contig4_cuda(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *devs[2];
    NB_REQUIRE_OK(nb_device_open("cpu", &devs[0]));
    NB_REQUIRE_OK(nb_device_open("cuda", &devs[1]));
    for (int d2 = 0; d2 < 1; d2++) { /* 2-D: madd(x [R, W], r [R, 1], x) with W % 4 == 0 */
        const int64_t R = 37, W = 132;
        float *o2[2];
        for (int d = 0; d < 2; d++) {
            nb_module *m;
            NB_REQUIRE_OK(nb_module_load_source(devs[d], "owned.nb", SRC, NULL, &m));
            nb_tensor *x = filled(devs[d], 2, (int64_t[]){R, W}, -2.0f, 0.31f), *r = filled(devs[d], 2, (int64_t[]){R, 1}, 0.5f, 0.7f);
            nb_tensor *y = filled(devs[d], 2, (int64_t[]){R, W}, 0, 0);
            nb_func *f = NULL;
            nb_call *c = NULL;
            NB_REQUIRE_OK(nb_module_func(m, "madd", &f));
            NB_REQUIRE_OK(nb_call_begin(f, &c));
            nb_call_arg(c, 0, x), nb_call_arg(c, 1, r), nb_call_arg(c, 2, x), nb_call_result(c, y);
            NB_EXPECT_OK(nb_call_run(c, NULL));
            o2[d] = malloc((size_t)(R * W) * 4);
            NB_EXPECT_OK(nb_tensor_to_host(y, o2[d], (size_t)(R * W) * 4));
            nb_tensor_free(x), nb_tensor_free(r), nb_tensor_free(y);
            nb_module_free(m);
        }
        int bad2 = 0; /* madd is x * r + x: NVRTC fuses it into one fma, the C back end rounds twice */
        for (int64_t i = 0; i < R * W; i++) bad2 += !(fabsf(o2[1][i] - o2[0][i]) <= 1e-6f * fabsf(o2[0][i]) + 1e-6f);
        NB_EXPECT(bad2 == 0);
        free(o2[0]), free(o2[1]);
    }
    const int64_t ns[] = {1, 3, 4, 7, 1024, 4099, 100003};
    for (size_t t = 0; t < sizeof ns / sizeof *ns; t++) {
        int64_t n = ns[t];
        float *out[2][3];
        for (int d = 0; d < 2; d++) {
            nb_module *m;
            NB_REQUIRE_OK(nb_module_load_source(devs[d], "owned.nb", SRC, NULL, &m));
            nb_tensor *a = filled(devs[d], 1, (int64_t[]){n + 4}, -3.0f, 0.37f), *y = filled(devs[d], 1, &n, 0, 0);
            nb_tensor *av = NULL, *yy = filled(devs[d], 1, &n, 1.0f, 0.11f);
            NB_REQUIRE_OK(nb_tensor_slice(a, 0, 4, n + 4, 1, &av)); /* 16 bytes in: still aligned */
            nb_func *f = NULL;
            nb_call *c = NULL;
            NB_REQUIRE_OK(nb_module_func(m, "scale", &f));
            NB_REQUIRE_OK(nb_call_begin(f, &c));
            nb_call_arg(c, 0, av), nb_call_arg_double(c, 1, 1.5), nb_call_result(c, y);
            NB_EXPECT_OK(nb_call_run(c, NULL));
            NB_REQUIRE_OK(nb_module_func(m, "axpy", &f));
            NB_REQUIRE_OK(nb_call_begin(f, &c));
            nb_call_arg_double(c, 0, 0.5), nb_call_arg(c, 1, av), nb_call_arg(c, 2, yy);
            NB_EXPECT_OK(nb_call_run(c, NULL));
            nb_tensor *a1 = filled(devs[d], 1, (int64_t[]){1}, 0.3f, 0), *yb = filled(devs[d], 1, &n, 0, 0);
            NB_REQUIRE_OK(nb_module_func(m, "madd", &f)); /* a broadcast [1] input (read in place) */
            NB_REQUIRE_OK(nb_call_begin(f, &c));
            nb_call_arg(c, 0, a1), nb_call_arg(c, 1, av), nb_call_arg(c, 2, a1), nb_call_result(c, yb);
            NB_EXPECT_OK(nb_call_run(c, NULL));
            for (int k = 0; k < 3; k++) {
                out[d][k] = malloc((size_t)n * 4);
                NB_EXPECT_OK(nb_tensor_to_host(k == 2 ? yb : k ? yy : y, out[d][k], (size_t)n * 4));
            }
            nb_tensor_free(a), nb_tensor_free(av), nb_tensor_free(y), nb_tensor_free(yy), nb_tensor_free(a1), nb_tensor_free(yb);
            nb_module_free(m);
        }
        for (int k = 0; k < 3; k++) {
            int bad = 0;
            for (int64_t i = 0; i < n && bad < 4; i++)
                if (k == 2 ? !(fabsf(out[1][k][i] - out[0][k][i]) <= 1e-6f * fabsf(out[0][k][i]) + 1e-6f)
                           : out[1][k][i] != out[0][k][i]) {
                    fprintf(stderr, "  n %lld %s[%lld]: cuda %g cpu %g\n", (long long)n, k == 2 ? "madd" : k ? "axpy" : "scale", (long long)i,
                            (double)out[1][k][i], (double)out[0][k][i]);
                    bad++;
                }
            NB_EXPECT(bad == 0);
            free(out[0][k]), free(out[1][k]);
        }
    }
    nb_device_close(devs[1]);
    nb_device_close(devs[0]);
}

/* ---- per-block shared sums of partly broadcast gradients (nb_leaf_sig.shacc) -------------- */

/* The shacc flag of c_grad of madd's bwds call over [R, C] with c shaped cs (cuda decides). */
static int shacc_of(nb_module *m, nb_device *dev, int64_t R, int64_t C, int cn, const int64_t *cs, int cuda) {
    const int64_t s2[2] = {R, C};
    nb_tensor *a = filled(dev, 2, s2, 0, 0), *b = filled(dev, 2, s2, 0, 0), *dout = filled(dev, 2, s2, 0, 0);
    nb_tensor *da = filled(dev, 2, s2, 0, 0), *c = filled(dev, cn, cs, 0, 0), *dc = filled(dev, cn, cs, 0, 0);
    nb_call *call = madd_bwd(m, a, b, c, dout, da, dc);
    int oa, oc, r = -1;
    owned_flags(call, &oa, &oc);
    nb_call_shared_grads(call, cuda);
    const nb_fn_info *in = &call->f->infos[call->overload];
    for (int j = 0; j < call->nleaves; j++) {
        if (!strcmp(in->leaves[j].path, "c_grad")) r = call->sig.leaves[j].shacc;
        else NB_EXPECT(call->sig.leaves[j].shacc == 0); /* da (owned), inputs */
    }
    nb_call_free(call);
    nb_tensor *all[] = {a, b, dout, da, c, dc};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) nb_tensor_free(all[i]);
    return r;
}

static void test_shacc_decision(void) {
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    nb_module *m;
    NB_REQUIRE_OK(nb_module_load_source(dev, "owned.nb", SRC, NULL, &m));
    NB_EXPECT(shacc_of(m, dev, 16, 64, 1, (int64_t[]){64}, 1) == 1);          /* g [F] over [N, F] */
    NB_EXPECT(shacc_of(m, dev, 16, 64, 2, (int64_t[]){1, 64}, 1) == 1);       /* [1, F] */
    NB_EXPECT(shacc_of(m, dev, 16, 64, 1, (int64_t[]){64}, 0) == 0);          /* the CPU: unchanged */
    NB_EXPECT(shacc_of(m, dev, 16, 64, 2, (int64_t[]){16, 1}, 1) == 0);       /* per row: the warp sum */
    NB_EXPECT(shacc_of(m, dev, 16, 64, 1, (int64_t[]){1}, 1) == 0);           /* whole kernel: thread sums */
    NB_EXPECT(shacc_of(m, dev, 16, 64, 2, (int64_t[]){16, 64}, 1) == 0);      /* owned */
    NB_EXPECT(shacc_of(m, dev, 4, 1024, 1, (int64_t[]){1024}, 1) == 1);       /* NB_SHACC_MAX elements */
    NB_EXPECT(shacc_of(m, dev, 4, 1028, 1, (int64_t[]){1028}, 1) == 0);       /* past it */
    NB_EXPECT(shacc_of(m, dev, 1, 64, 1, (int64_t[]){64}, 1) == 0);           /* one row: owned, nothing broadcast */
    nb_module_free(m);
    nb_device_close(dev);
}

/* On a GPU: dc of madd's bwds call with c [C] broadcast over [R, C] rows (shared block sums) and
 * da (owned) equal the CPU within rounding (only the summation order differs), for shapes whose
 * element count is not a multiple of the block, f32 rows of 64 / 48 / 1024 features; the array
 * keeps its prior content (added to, not overwritten). */
static void test_shacc_cuda(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *devs[2];
    NB_REQUIRE_OK(nb_device_open("cpu", &devs[0]));
    NB_REQUIRE_OK(nb_device_open("cuda", &devs[1]));
    const int64_t shapes[][2] = {{300, 64}, {4099, 48}, {1 << 16, 64}, {37, 1024}};
    for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++) {
        const int64_t R = shapes[t][0], C = shapes[t][1];
        float *got[2][2];
        for (int d = 0; d < 2; d++) {
            nb_module *m;
            NB_REQUIRE_OK(nb_module_load_source(devs[d], "owned.nb", SRC, NULL, &m));
            const int64_t s2[2] = {R, C};
            nb_tensor *a = filled(devs[d], 2, s2, -1.0f, 0.17f), *b = filled(devs[d], 2, s2, 0.5f, 0.09f);
            nb_tensor *dout = filled(devs[d], 2, s2, -0.6f, 0.1f), *da = filled(devs[d], 2, s2, 0, 0);
            nb_tensor *c = filled(devs[d], 1, &C, 0, 0), *dc = filled(devs[d], 1, &C, 1.0f, 0.25f);
            /* the CUDA run takes the shared path (the decision as the run makes it; nb_call_run
             * consumes its call, so the flag is read from a call bound alike) */
            if (d == 1) NB_EXPECT(shacc_of(m, devs[d], R, C, 1, &C, 1) == 1);
            NB_EXPECT_OK(nb_call_run(madd_bwd(m, a, b, c, dout, da, dc), NULL));
            got[d][0] = malloc((size_t)C * 4), got[d][1] = malloc((size_t)(R * C) * 4);
            NB_EXPECT_OK(nb_tensor_to_host(dc, got[d][0], (size_t)C * 4));
            NB_EXPECT_OK(nb_tensor_to_host(da, got[d][1], (size_t)(R * C) * 4));
            nb_tensor *all[] = {a, b, dout, da, c, dc};
            for (size_t i = 0; i < sizeof all / sizeof *all; i++) nb_tensor_free(all[i]);
            nb_module_free(m);
        }
        int bad = 0;
        for (int64_t i = 0; i < C && bad < 4; i++) { /* sums of R terms of |x| < 1: relative 1e-4 of R */
            double tol = 1e-4 * (double)R;
            if (!(fabs((double)got[1][0][i] - got[0][0][i]) <= tol)) {
                fprintf(stderr, "  %lldx%lld dc[%lld]: cuda %g cpu %g\n", (long long)R, (long long)C, (long long)i,
                        (double)got[1][0][i], (double)got[0][0][i]);
                bad++;
            }
        }
        NB_EXPECT(bad == 0);
        NB_EXPECT(memcmp(got[0][1], got[1][1], (size_t)(R * C) * 4) == 0); /* da: one product per element */
        for (int d = 0; d < 2; d++) free(got[d][0]), free(got[d][1]);
    }
    nb_device_close(devs[1]);
    nb_device_close(devs[0]);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_one_to_one, test_cpu_values, test_cpu_shared_columns, test_cpu_aliased_grads, test_nvrtc,
                 test_contig4_decision,
                 test_contig4_nvrtc, test_contig4_cuda, test_shacc_decision, test_shacc_cuda);
}

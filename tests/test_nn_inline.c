/* The inline MLP of the kernel language (lib/nn.nb, `import nn;`) and the grid image model
 * (examples/image_model.nb):
 *   - the embedded copies (src/lang/stdlib_data.c, src/models/image_model_nb.c) match their files;
 *   - CPU: nn_matvec16 / nn_matvec16_t and MLP16x3 / nn_mlp16 results and gradients (w and x)
 *     against a double-precision reference and central finite differences;
 *   - CUDA (warp-cooperative tensor-core path): the same calls agree with the CPU, with an
 *     element count that is not a multiple of 32 (tail lanes), and the image model's fused
 *     backward (grid + MLP gradients) agrees too;
 *   - a short CPU fit of the grid model raises the PSNR;
 *   - errors: an unknown standard module, a weight tensor of the wrong type, a too-small one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang/stdlib.h"
#include "nabla/image.h"
#include "nabla/module.h"
#include "nabla/nn_optim.h"
#include "nb_test.h"

extern const char nb_models_image_model_nb[]; /* src/models/image_model_nb.c: the library's copy of the model */

static const char *g_src =
    "import nn;\n"
    "float[16] mv(Tensor<float, 1> w, float[16] x) { return nn_matvec16(w, 256, x); }\n"
    "float[16] mvt(Tensor<float, 1> w, float[16] x) { return nn_matvec16_t(w, 256, x); }\n"
    "[Differentiable]\n"
    "float net(DiffTensor<float, 1> w, float[16] x) {\n"
    "    MLP16x3 mlp = { 0 };\n"
    "    float y[16] = mlp.eval(w, x);\n"
    "    float s = 0.0;\n"
    "    for (int i = 0; i < 16; i++) s += (0.1 * float(i + 1) * ((i & 1) != 0 ? 1.0 : -1.0)) * y[i];\n"
    "    return s;\n"
    "}\n"
    "[Differentiable]\n"
    "float net2(DiffTensor<float, 1> w, float[16] x) {\n"
    "    MLP16x2 mlp = { 0 };\n"
    "    float y[16] = mlp.eval(w, x);\n"
    "    float s = 0.0;\n"
    "    for (int i = 0; i < 16; i++) s += (0.1 * float(i + 1) * ((i & 1) != 0 ? 1.0 : -1.0)) * y[i];\n"
    "    return s;\n"
    "}\n"
    "[Differentiable]\n"
    "float net4(DiffTensor<float, 1> w, float[16] x) {\n"
    "    MLP16x4 mlp = { 0 };\n"
    "    float y[16] = mlp.eval(w, x);\n"
    "    float s = 0.0;\n"
    "    for (int i = 0; i < 16; i++) s += (0.1 * float(i + 1) * ((i & 1) != 0 ? 1.0 : -1.0)) * y[i];\n"
    "    return s;\n"
    "}\n"
    "[Differentiable]\n"
    "float net_loop(DiffTensor<float, 1> w, float[16] x) {\n"
    "    float y[16] = nn_mlp16(w, 0, 3, x);\n"
    "    float s = 0.0;\n"
    "    for (int i = 0; i < 16; i++) s += (0.1 * float(i + 1) * ((i & 1) != 0 ? 1.0 : -1.0)) * y[i];\n"
    "    return s;\n"
    "}\n";

#define TRY(expr)                                                                              \
    do {                                                                                       \
        nb_status try_s_ = (expr);                                                             \
        if (try_s_ != NB_OK) return try_s_;                                                    \
    } while (0)

/* ---- helpers -------------------------------------------------------------------------------- */

static unsigned long long g_rng = 0x9e3779b97f4a7c15ull;
static float frand(float lo, float hi) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((g_rng >> 40) * (1.0 / 16777216.0));
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

/* the repository root, from this file's path (CMake compiles it by its absolute path) */
static const char *repo_root(void) {
    static char root[1024];
    snprintf(root, sizeof root, "%s", __FILE__);
    char *p = strstr(root, "/tests/test_nn_inline.c");
    if (p) *p = 0;
    else snprintf(root, sizeof root, "..");
    return root;
}

static nb_tensor *host_tensor(nb_device *dev, int ndim, const int64_t *shape, const float *data) {
    nb_tensor *t = NULL;
    if (nb_tensor_from_host(dev, NB_F32, ndim, shape, data, &t) != NB_OK) return NULL;
    return t;
}

static float coef(int i) { return 0.1f * (float)(i + 1) * ((i & 1) ? 1.0f : -1.0f); }

/* double reference: MLP of g_layers layers (ReLU between, the last linear) at w[0..256 L),
 * y = W x; s = sum c_i y_i */
static int g_layers = 3;
static double ref_net(const float *w, const double *x) {
    double h[16], t[16];
    for (int i = 0; i < 16; i++) h[i] = x[i];
    for (int l = 0; l < g_layers; l++) {
        for (int i = 0; i < 16; i++) {
            double s = 0;
            for (int j = 0; j < 16; j++) s += (double)w[256 * l + 16 * i + j] * h[j];
            t[i] = l < g_layers - 1 ? (s > 0 ? s : 0) : s;
        }
        memcpy(h, t, sizeof h);
    }
    double s = 0;
    for (int i = 0; i < 16; i++) s += coef(i) * h[i];
    return s;
}

enum { NW = 1024 }; /* room for 4 layers */

/* Runs `fn` (net / net_loop) in reverse mode on dev: result s[N], gradients gw[NW], gx[N,16]. */
static nb_status run_net(nb_device *dev, const char *fn, const float *w, const float *x, int N, float *s, float *gw,
                         float *gx) {
    nb_module *m = NULL;
    nb_func *f = NULL;
    nb_call *c = NULL;
    nb_tensor *tw = NULL, *tx = NULL, *tgw = NULL, *tgx = NULL, *ts = NULL;
    int64_t sw[1] = {NW}, sx[2] = {N, 16};
    nb_status st = nb_module_load_source(dev, "inline_nn.nb", g_src, NULL, &m);
    if (st == NB_OK) st = nb_module_func(m, fn, &f);
    if (st == NB_OK && !(tw = host_tensor(dev, 1, sw, w))) st = NB_ERR_INTERNAL;
    if (st == NB_OK && !(tx = host_tensor(dev, 2, sx, x))) st = NB_ERR_INTERNAL;
    if (st == NB_OK) st = nb_tensor_zeros(dev, NB_F32, 1, sw, &tgw);
    if (st == NB_OK) st = nb_tensor_zeros(dev, NB_F32, 2, sx, &tgx);
    if (st == NB_OK) st = nb_call_begin(f, &c);
    if (st == NB_OK) st = nb_call_set_mode(c, NB_MODE_BWD);
    if (st == NB_OK) st = nb_call_arg(c, 0, tw);
    if (st == NB_OK) st = nb_call_arg(c, 1, tx);
    if (st == NB_OK) st = nb_call_grad(c, 0, tgw);
    if (st == NB_OK) st = nb_call_grad(c, 1, tgx);
    if (st == NB_OK) {
        st = nb_call_run(c, &ts);
        c = NULL;
    }
    if (st == NB_OK) st = nb_tensor_to_host(ts, s, sizeof(float) * (size_t)N);
    if (st == NB_OK) st = nb_tensor_to_host(tgw, gw, sizeof(float) * NW);
    if (st == NB_OK) st = nb_tensor_to_host(tgx, gx, sizeof(float) * 16 * (size_t)N);
    if (c) nb_call_free(c);
    nb_tensor_free(tw), nb_tensor_free(tx), nb_tensor_free(tgw), nb_tensor_free(tgx), nb_tensor_free(ts);
    nb_module_free(m);
    return st;
}

/* y = mv / mvt (w, x) on dev, y[N,16] */
static nb_status run_mv(nb_device *dev, const char *fn, const float *w, const float *x, int N, float *y) {
    nb_module *m = NULL;
    nb_func *f = NULL;
    nb_tensor *tw = NULL, *tx = NULL, *ty = NULL;
    int64_t sw[1] = {NW}, sx[2] = {N, 16};
    nb_status st = nb_module_load_source(dev, "inline_nn.nb", g_src, NULL, &m);
    if (st == NB_OK) st = nb_module_func(m, fn, &f);
    if (st == NB_OK && !(tw = host_tensor(dev, 1, sw, w))) st = NB_ERR_INTERNAL;
    if (st == NB_OK && !(tx = host_tensor(dev, 2, sx, x))) st = NB_ERR_INTERNAL;
    nb_tensor *args[2] = {tw, tx};
    if (st == NB_OK) st = nb_func_call(f, 2, args, &ty);
    if (st == NB_OK) st = nb_tensor_to_host(ty, y, sizeof(float) * 16 * (size_t)N);
    nb_tensor_free(tw), nb_tensor_free(tx), nb_tensor_free(ty);
    nb_module_free(m);
    return st;
}

static void fill(float *w, float *x, int N) {
    for (int i = 0; i < NW; i++) w[i] = frand(-0.45f, 0.45f);
    for (int i = 0; i < 16 * N; i++) x[i] = frand(-1.0f, 1.0f);
}

/* ---- tests ---------------------------------------------------------------------------------- */

static void test_embedded_copies(void) {
    char path[1200];
    snprintf(path, sizeof path, "%s/lib/nn.nb", repo_root());
    char *nn = read_file(path);
    NB_EXPECT(nn != NULL);
    const char *emb = nb_stdlib_find("nn");
    NB_EXPECT(emb != NULL);
    if (nn && emb && strcmp(nn, emb) != 0)
        fprintf(stderr, "  lib/nn.nb differs from its embedded copy: run python3 tools/embed_nb.py\n");
    NB_EXPECT(nn && emb && strcmp(nn, emb) == 0);
    free(nn);
    snprintf(path, sizeof path, "%s/examples/image_model.nb", repo_root());
    char *im = read_file(path);
    NB_EXPECT(im != NULL);
    if (im && strcmp(im, nb_models_image_model_nb) != 0)
        fprintf(stderr, "  examples/image_model.nb differs from src/models/image_model_nb.c: run python3 tools/embed_nb.py\n");
    NB_EXPECT(im && strcmp(im, nb_models_image_model_nb) == 0);
    free(im);
    NB_EXPECT(nb_stdlib_find("nosuch") == NULL);
}

static void test_cpu_matvec(void) {
    nb_device *cpu = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    enum { N = 37 };
    static float w[NW], x[N * 16], y[N * 16], yt[N * 16];
    fill(w, x, N);
    NB_EXPECT_OK(run_mv(cpu, "mv", w, x, N, y));
    NB_EXPECT_OK(run_mv(cpu, "mvt", w, x, N, yt));
    double err = 0, errt = 0;
    for (int n = 0; n < N; n++)
        for (int i = 0; i < 16; i++) {
            double s = 0, st = 0;
            for (int j = 0; j < 16; j++) {
                s += (double)w[256 + 16 * i + j] * x[16 * n + j];
                st += (double)w[256 + 16 * j + i] * x[16 * n + j];
            }
            err = fmax(err, fabs(s - y[16 * n + i]));
            errt = fmax(errt, fabs(st - yt[16 * n + i]));
        }
    NB_EXPECT(err < 1e-5);
    NB_EXPECT(errt < 1e-5);
    nb_device_close(cpu);
}

static void check_cpu_grads(nb_device *cpu, const char *fn, int layers, const char *fn2) {
    enum { N = 5 };
    static float w[NW], x[N * 16], s[N], gw[NW], gx[N * 16], s2[N], gw2[NW], gx2[N * 16];
    g_layers = layers;
    fill(w, x, N);
    NB_REQUIRE_OK(run_net(cpu, fn, w, x, N, s, gw, gx));
    if (fn2) NB_REQUIRE_OK(run_net(cpu, fn2, w, x, N, s2, gw2, gx2));
    double xd[16];
    for (int n = 0; n < N; n++) {
        for (int j = 0; j < 16; j++) xd[j] = x[16 * n + j];
        double r = ref_net(w, xd);
        NB_EXPECT_NEAR(s[n], r, 1e-5 * (1 + fabs(r)));
        if (fn2) NB_EXPECT_NEAR(s2[n], r, 1e-5 * (1 + fabs(r)));
        for (int j = 0; j < 16; j++) { /* dL/dx by central differences */
            const double h = 1e-4;
            xd[j] = x[16 * n + j] + h;
            double fp = ref_net(w, xd);
            xd[j] = x[16 * n + j] - h;
            double fm = ref_net(w, xd);
            xd[j] = x[16 * n + j];
            NB_EXPECT_NEAR(gx[16 * n + j], (fp - fm) / (2 * h), 1e-4);
            if (fn2) NB_EXPECT_NEAR(gx2[16 * n + j], gx[16 * n + j], 1e-6);
        }
    }
    static float wp[NW];
    for (int k = 0; k < NW; k += 7) { /* dL/dw (summed over the N elements); 0 past the MLP */
        const float h = 1e-3f;
        double fd = 0;
        memcpy(wp, w, sizeof wp);
        for (int n = 0; n < N; n++) {
            for (int j = 0; j < 16; j++) xd[j] = x[16 * n + j];
            wp[k] = w[k] + h;
            double fp = ref_net(wp, xd);
            wp[k] = w[k] - h;
            double fm = ref_net(wp, xd);
            fd += (fp - fm) / (2.0 * (double)h);
        }
        NB_EXPECT_NEAR(gw[k], fd, 2e-3 * (1 + fabs(fd)));
        if (fn2) NB_EXPECT_NEAR(gw2[k], gw[k], 1e-5 * (1 + fabs(fd)));
    }
}

static void test_cpu_mlp_grads(void) {
    nb_device *cpu = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    check_cpu_grads(cpu, "net", 3, "net_loop");
    check_cpu_grads(cpu, "net2", 2, NULL);
    check_cpu_grads(cpu, "net4", 4, NULL);
    g_layers = 3;
    nb_device_close(cpu);
}

/* |a - b| <= tol * (|b| + mean |b|) elementwise, except in at most max_bad_frac of the rows of
 * `row` values: CUDA rounds the MLP's operands to f16, so a pre-activation within ~1e-3 of 0
 * can take the other side of a ReLU than on the CPU, which changes that element's input
 * gradient (and the grid cells it touches) by a whole term. Sums over many elements (results,
 * weight gradients) have no such rows: call with max_bad_frac = 0. */
static int close_rows(const float *a, const float *b, int n, int row, double tol, double max_bad_frac, const char *what) {
    double mean = 0;
    for (int i = 0; i < n; i++) mean += fabs(b[i]);
    mean /= n > 0 ? n : 1;
    int bad = 0, rows = n / row;
    for (int r = 0; r < rows; r++) {
        int rb = 0;
        for (int i = r * row; i < (r + 1) * row; i++)
            if (!(fabs((double)a[i] - b[i]) <= tol * (fabs(b[i]) + mean))) {
                if (bad < 3 && !rb) fprintf(stderr, "  %s[%d]: cuda %.7g, cpu %.7g\n", what, i, a[i], b[i]);
                rb = 1;
            }
        bad += rb;
    }
    if (bad) printf("       %s: %d of %d rows differ (kinks; allowed %.0f)\n", what, bad, rows, max_bad_frac * rows);
    return bad <= max_bad_frac * rows;
}
static int close_rel(const float *a, const float *b, int n, double tol, const char *what) {
    return close_rows(a, b, n, 1, tol, 0.0, what);
}

static void test_cuda_matches_cpu(void) {
    nb_device *gpu = NULL, *cpu = NULL;
    if (nb_device_open("cuda", &gpu) != NB_OK) NB_SKIP("no CUDA device");
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    enum { N = 1000 }; /* not a multiple of 32: the last warp has 8 live lanes */
    static float w[NW], x[N * 16], y0[N * 16], y1[N * 16];
    static float s0[N], s1[N], gw0[NW], gw1[NW], gx0[N * 16], gx1[N * 16];
    fill(w, x, N);
    const char *mvs[2] = {"mv", "mvt"};
    for (int k = 0; k < 2; k++) {
        NB_EXPECT_OK(run_mv(cpu, mvs[k], w, x, N, y0));
        NB_EXPECT_OK(run_mv(gpu, mvs[k], w, x, N, y1));
        NB_EXPECT(close_rel(y1, y0, 16 * N, 1e-2, mvs[k]));
    }
    const char *nets[4] = {"net", "net_loop", "net2", "net4"};
    for (int k = 0; k < 4; k++) {
        NB_EXPECT_OK(run_net(cpu, nets[k], w, x, N, s0, gw0, gx0));
        NB_EXPECT_OK(run_net(gpu, nets[k], w, x, N, s1, gw1, gx1));
        NB_EXPECT(close_rel(s1, s0, N, 2e-2, "s"));
        NB_EXPECT(close_rel(gw1, gw0, NW, 2e-2, "gw"));
        NB_EXPECT(close_rows(gx1, gx0, 16 * N, 16, 2e-2, 0.03, "gx"));
    }
    nb_device_close(cpu);
    nb_device_close(gpu);
}

/* Inputs exact in f16 and a one-hidden-layer MLP: weights k/8, inputs k/4, so the hidden
 * activations are exact on both devices (no ReLU decision can differ) and every element's input
 * gradient must agree (only the output coefficients are rounded to f16 on CUDA). */
static void test_cuda_exact_grads(void) {
    nb_device *gpu = NULL, *cpu = NULL;
    if (nb_device_open("cuda", &gpu) != NB_OK) NB_SKIP("no CUDA device");
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    enum { N = 777 };
    static float w[NW], x[N * 16], s0[N], s1[N], gw0[NW], gw1[NW], gx0[N * 16], gx1[N * 16];
    for (int i = 0; i < NW; i++) w[i] = floorf(frand(-8.0f, 9.0f)) / 8.0f;
    for (int i = 0; i < 16 * N; i++) x[i] = floorf(frand(-8.0f, 9.0f)) / 4.0f;
    NB_EXPECT_OK(run_net(cpu, "net2", w, x, N, s0, gw0, gx0));
    NB_EXPECT_OK(run_net(gpu, "net2", w, x, N, s1, gw1, gx1));
    NB_EXPECT(close_rel(s1, s0, N, 2e-3, "s (exact)"));
    NB_EXPECT(close_rel(gw1, gw0, NW, 2e-3, "gw (exact)"));
    NB_EXPECT(close_rel(gx1, gx0, 16 * N, 2e-3, "gx (exact)"));
    nb_device_close(cpu);
    nb_device_close(gpu);
}

/* ---- the grid image model ------------------------------------------------------------------ */

enum { G = 33, F = 14, NGRID = G * G * F, NWM = 768, NPAR = NGRID + NWM };

typedef struct model {
    nb_module *m;
    nb_func *loss, *model;
    nb_tensor *params, *grads, *grid, *w, *ggrid, *gw;
} model;

static void model_free(model *M) {
    nb_tensor *ts[] = {M->params, M->grads, M->grid, M->w, M->ggrid, M->gw};
    for (int i = 0; i < 6; i++) nb_tensor_free(ts[i]);
    nb_module_free(M->m);
    memset(M, 0, sizeof *M);
}

static nb_status model_init(model *M, nb_device *dev, const float *p) {
    memset(M, 0, sizeof *M);
    int64_t sp[1] = {NPAR}, sg[3] = {G, G, F}, sw[1] = {NWM};
    nb_tensor *flat = NULL;
    TRY(nb_module_load_source(dev, "image_model.nb", nb_models_image_model_nb, NULL, &M->m));
    TRY(nb_module_func(M->m, "image_loss", &M->loss));
    TRY(nb_module_func(M->m, "image_model", &M->model));
    TRY(nb_tensor_from_host(dev, NB_F32, 1, sp, p, &M->params));
    TRY(nb_tensor_zeros(dev, NB_F32, 1, sp, &M->grads));
    for (int k = 0; k < 2; k++) {
        nb_tensor *src = k ? M->grads : M->params;
        TRY(nb_tensor_slice(src, 0, 0, NGRID, 1, &flat));
        nb_status st = nb_tensor_reshape(flat, 3, sg, k ? &M->ggrid : &M->grid);
        nb_tensor_free(flat);
        TRY(st);
        TRY(nb_tensor_slice(src, 0, NGRID, NPAR, 1, k ? &M->gw : &M->w));
    }
    (void)sw;
    return NB_OK;
}

/* reverse mode of image_loss over (uv, target), dout = scale; optional per-element loss */
static nb_status model_bwd(model *M, nb_tensor *uv, nb_tensor *target, float scale, nb_tensor **loss) {
    nb_call *c = NULL;
    nb_tensor *d = NULL;
    TRY(nb_tensor_from_host(nb_tensor_device(uv), NB_F32, 0, NULL, &scale, &d));
    nb_status st = nb_call_begin(M->loss, &c);
    if (st == NB_OK) st = nb_call_set_mode(c, NB_MODE_BWD);
    if (st == NB_OK) st = nb_call_arg(c, 0, M->grid);
    if (st == NB_OK) st = nb_call_arg(c, 1, M->w);
    if (st == NB_OK) st = nb_call_arg(c, 2, uv);
    if (st == NB_OK) st = nb_call_arg(c, 3, target);
    if (st == NB_OK) st = nb_call_grad(c, 0, M->ggrid);
    if (st == NB_OK) st = nb_call_grad(c, 1, M->gw);
    if (st == NB_OK) st = nb_call_dout(c, d);
    if (st == NB_OK) {
        st = nb_call_run(c, loss);
        c = NULL;
    }
    if (c) nb_call_free(c);
    nb_tensor_free(d);
    return st;
}

static void init_params(float *p) {
    for (int i = 0; i < NGRID; i++) p[i] = frand(0.0f, 1.0f);
    for (int i = 0; i < NWM; i++) p[NGRID + i] = frand(-0.6f, 0.6f);
}

static void test_cuda_image_model(void) {
    nb_device *gpu = NULL, *cpu = NULL;
    if (nb_device_open("cuda", &gpu) != NB_OK) NB_SKIP("no CUDA device");
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    enum { N = 999 };
    static float p[NPAR], uv[N * 2], tg[N * 3], g0[NPAR], g1[NPAR], l0[N], l1[N];
    init_params(p);
    for (int i = 0; i < 2 * N; i++) uv[i] = frand(0.0f, 1.0f);
    for (int i = 0; i < 3 * N; i++) tg[i] = frand(0.0f, 1.0f);
    int64_t s2[2] = {N, 2}, s3[2] = {N, 3};
    for (int k = 0; k < 2; k++) {
        nb_device *dev = k ? gpu : cpu;
        model M;
        nb_tensor *tuv = NULL, *ttg = NULL, *loss = NULL;
        NB_EXPECT_OK(model_init(&M, dev, p));
        NB_EXPECT_OK(nb_tensor_from_host(dev, NB_F32, 2, s2, uv, &tuv));
        NB_EXPECT_OK(nb_tensor_from_host(dev, NB_F32, 2, s3, tg, &ttg));
        NB_EXPECT_OK(model_bwd(&M, tuv, ttg, 1.0f / N, &loss));
        if (loss) NB_EXPECT_OK(nb_tensor_to_host(loss, k ? l1 : l0, sizeof l0));
        NB_EXPECT_OK(nb_tensor_to_host(M.grads, k ? g1 : g0, sizeof g0));
        nb_tensor_free(tuv), nb_tensor_free(ttg), nb_tensor_free(loss);
        model_free(&M);
    }
    NB_EXPECT(close_rel(l1, l0, N, 2e-2, "loss"));
    NB_EXPECT(close_rows(g1, g0, NGRID, F, 3e-2, 0.05, "dgrid"));
    NB_EXPECT(close_rel(g1 + NGRID, g0 + NGRID, NWM, 3e-2, "dw"));
    nb_device_close(cpu);
    nb_device_close(gpu);
}

static double model_psnr(model *M, nb_tensor *coords, nb_tensor *img, int W, int H) {
    nb_tensor *pred = NULL, *img3 = NULL;
    nb_tensor *args[3] = {M->grid, M->w, coords};
    double psnr = -1;
    int64_t shape[3] = {H, W, 3};
    if (nb_func_call(M->model, 3, args, &pred) == NB_OK && nb_tensor_reshape(pred, 3, shape, &img3) == NB_OK)
        nb_image_psnr(img3, img, &psnr);
    nb_tensor_free(img3), nb_tensor_free(pred);
    return psnr;
}

static void test_cpu_fit(void) {
    nb_device *cpu = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    enum { S = 48 };
    static float p[NPAR];
    init_params(p);
    model M;
    nb_tensor *img = NULL, *coords = NULL, *target = NULL;
    nb_adam *opt = NULL;
    NB_REQUIRE_OK(model_init(&M, cpu, p));
    NB_REQUIRE_OK(nb_image_procedural(cpu, S, S, &img));
    NB_REQUIRE_OK(nb_image_pixel_coords(cpu, S, S, &coords));
    int64_t s3[2] = {S * S, 3};
    NB_REQUIRE_OK(nb_tensor_reshape(img, 2, s3, &target));
    nb_adam_config ac = {1e-2f, 0.9f, 0.99f, 1e-15f, 0.0f, 0};
    NB_REQUIRE_OK(nb_adam_create(cpu, NPAR, &ac, &opt));
    double p0 = model_psnr(&M, coords, img, S, S);
    for (int step = 0; step < 60; step++) {
        NB_EXPECT_OK(model_bwd(&M, coords, target, 1.0f / (S * S), NULL));
        NB_EXPECT_OK(nb_adam_step(opt, M.params, M.grads, 1));
    }
    double p1 = model_psnr(&M, coords, img, S, S);
    printf("       grid model, %dx%d procedural image, 60 CPU steps: PSNR %.2f -> %.2f dB\n", S, S, p0, p1);
    NB_EXPECT(p1 > p0 + 3.0);
    nb_adam_destroy(opt);
    nb_tensor_free(img), nb_tensor_free(coords), nb_tensor_free(target);
    model_free(&M);
    nb_device_close(cpu);
}

static void test_errors(void) {
    nb_device *cpu = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_module *m = NULL;
    NB_EXPECT_ERR(nb_module_load_source(cpu, "bad.nb", "import nosuch;\nfloat f(float x) { return x; }\n", NULL, &m),
                  NB_ERR_COMPILE, "standard modules: mlp, nn");
    NB_EXPECT_ERR(nb_module_load_source(cpu, "bad.nb", "import nn;\nfloat[16] f(Tensor<int, 1> w, float[16] x) { return nn_matvec16(w, 0, x); }\n",
                                        NULL, &m),
                  NB_ERR_COMPILE, "must be a Tensor or DiffTensor<float,1> of weights");
    NB_EXPECT_ERR(nb_module_load_source(cpu, "bad.nb", "import nn;\nvoid f(Tensor<float, 1> w, float[16] x) { nn_outer16_acc(w, 0, x, x); }\n",
                                        NULL, &m),
                  NB_ERR_COMPILE, "must be a DiffTensor<float,1>");
    NB_EXPECT_ERR(nb_module_load_source(cpu, "bad.nb", "import nn;\nfloat[16] f(Tensor<float, 1> w, float[8] x) { return nn_matvec16(w, 0, x); }\n",
                                        NULL, &m),
                  NB_ERR_COMPILE, "argument 3 of 'nn_matvec16'");
    /* a weight tensor too small for the MLP: NaN results, never a read out of bounds */
    enum { N = 3 };
    static float w[NW], x[N * 16], y[N * 16];
    fill(w, x, N);
    nb_func *f = NULL;
    nb_tensor *tw = NULL, *tx = NULL, *ty = NULL;
    int64_t sw[1] = {300}, sx[2] = {N, 16}; /* mv reads w[256 .. 512) */
    NB_REQUIRE_OK(nb_module_load_source(cpu, "inline_nn.nb", g_src, NULL, &m));
    NB_REQUIRE_OK(nb_module_func(m, "mv", &f));
    NB_REQUIRE_OK(nb_tensor_from_host(cpu, NB_F32, 1, sw, w, &tw));
    NB_REQUIRE_OK(nb_tensor_from_host(cpu, NB_F32, 2, sx, x, &tx));
    nb_tensor *args[2] = {tw, tx};
    NB_EXPECT_OK(nb_func_call(f, 2, args, &ty));
    if (ty) NB_EXPECT_OK(nb_tensor_to_host(ty, y, sizeof y));
    for (int i = 0; i < N * 16; i++) NB_EXPECT(isnan(y[i]));
    nb_tensor_free(tw), nb_tensor_free(tx), nb_tensor_free(ty);
    nb_module_free(m);
    nb_device_close(cpu);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_embedded_copies, test_cpu_matvec, test_cpu_mlp_grads, test_cuda_matches_cpu,
                 test_cuda_exact_grads, test_cuda_image_model, test_cpu_fit, test_errors);
}

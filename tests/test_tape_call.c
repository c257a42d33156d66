/* User kernels as tape ops (nb_tape_call / nb_tape_call_scalars, src/graph/tape_call.c): a
 * kernel-language function called over tape values is one op of the graph (ops.def CALL),
 * forward through the call layer and backward through its reverse mode.
 *   - a mixed chain (linear -> a .nb activation -> mse) gives the values and gradients of the same
 *     math in library ops (linear -> silu -> mse);
 *   - broadcasting, vector parameters (float3: a trailing 3), scalar arguments (float and int), a
 *     0-d result, a no_diff parameter, accumulation into a gradient another op also feeds, against
 *     host references;
 *   - steady state: a fixed-shape loop makes no host allocation once warm (allocator hooks);
 *   - errors: arity, non-differentiable function where a gradient is needed, device, shapes,
 *     unsupported parameters and results;
 *   - CUDA (skips without a GPU): the chain on the GPU against the CPU. */
#include "nb_test.h"
#include "nb_test_alloc.h"
#include "nb_test_nvrtc.h"
#include "device/cuda/cuda_api.h"
#include "nabla/device.h"
#include "nabla/graph.h"
#include "nabla/module.h"
#include "nabla/nn_tape.h"
#include "graph/op_rows.h"
#include "graph/tape_call.h"

static const char *SRC =
    "[Differentiable] float silu_nb(float x) { return x / (1.0 + exp(-x)); }\n"
    "[Differentiable] float madd(float a, float b, float c) { return a * b + c; }\n"
    "[Differentiable] float softplus(float x, float beta) { return log(1.0 + exp(beta * x)) / beta; }\n"
    "[Differentiable] float powi(float x, int n) { float r = 1.0; [MaxIters(8)] for (int i = 0; i < n; i++) r = r * x; return r; }\n"
    "[Differentiable] float3 scale3(float3 v, float s) { return v * s; }\n"
    "[Differentiable] float norm3(float3 v) { return sqrt(dot(v, v)); }\n"
    "[Differentiable] float masked(float x, no_diff float m) { return x * m; }\n"
    "[Differentiable] float scaled(float x, float s = 3.0) { return x * s; }\n"
    "float twice(float x) { return 2.0 * x; }\n"
    "int iid(int x) { return x; }\n"
    "struct P { float a; float b; };\n"
    "[Differentiable] float sfield(P p) { return p.a * p.b; }\n"
    "[Differentiable] void outp(float x, out float y) { y = x; }\n"
    "[Differentiable] float t4(float4 v) { return v.x; }\n";

static nb_module *load(nb_device *dev) {
    nb_module *m = NULL;
    if (nb_module_load_source(dev, "tape_call_test.nb", SRC, NULL, &m)) {
        fprintf(stderr, "  load: %s\n", nb_last_error());
        return NULL;
    }
    return m;
}

static nb_func *fn(nb_module *m, const char *name) {
    nb_func *f = NULL;
    if (nb_module_func(m, name, &f)) fprintf(stderr, "  %s: %s\n", name, nb_last_error());
    return f;
}

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static float frand(void) { /* [-1, 1) */
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static void fill(float *a, int64_t n) {
    for (int64_t i = 0; i < n; i++) a[i] = frand();
}

/* max|a - b| <= tol * max(1, max|b|) */
static int close_to(const char *what, const float *a, const float *b, int64_t n, double tol) {
    double ref = 1, worst = 0;
    int64_t wi = 0;
    for (int64_t i = 0; i < n; i++) ref = fmax(ref, fabs((double)b[i]));
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (e > worst || e != e) worst = e, wi = i;
    }
    if (worst <= tol * ref) return 1;
    fprintf(stderr, "  %s: %s: max error %.3g at [%lld] (%.7g vs %.7g)\n", nb_test_name_, what, worst, (long long)wi,
            a[wi], b[wi]);
    return 0;
}

/* ---- the mixed chain: linear -> activation -> mse, the activation a .nb function or the library's
 * silu, on dev (NULL: CPU). Writes the loss, y, dL/dx and the parameter gradients. */
#define CB 6
#define CI 5
#define CO 4
typedef struct chain_out {
    float loss, y[CB * CO], gx[CB * CI], gp[CO * CI + CO];
} chain_out;

static nb_status chain(nb_device *dev, nb_func *act, const float *x, const float *params, const float *tgt,
                       chain_out *o) {
    nb_tape *t;
    nb_status s = nb_tape_create_on(dev, &t);
    if (s) return s;
    nb_tvar w, b, xv, h, y, tv, loss;
    if (!s) s = nb_tape_param(t, "w", 2, (int64_t[]){CO, CI}, &w);
    if (!s) s = nb_tape_param(t, "b", 1, (int64_t[]){CO}, &b);
    if (!s) s = nb_tape_write_params(t, params, CO * CI + CO);
    if (!s) s = nb_tape_input(t, 2, (int64_t[]){CB, CI}, x, 1, &xv);
    if (!s) s = nb_tape_linear(t, xv, w, b, &h);
    if (!s) s = act ? nb_tape_call(t, act, 1, &h, &y) : nb_tape_silu(t, h, &y);
    if (!s) s = nb_tape_input(t, 2, (int64_t[]){CB, CO}, tgt, 0, &tv);
    if (!s) s = nb_tape_mse(t, y, tv, &loss);
    if (!s) s = nb_tape_backward(t, loss);
    if (!s) s = nb_tape_read(t, loss, &o->loss, 1);
    if (!s) s = nb_tape_read(t, y, o->y, CB * CO);
    if (!s) s = nb_tape_read_grad(t, xv, o->gx, CB * CI);
    if (!s) s = nb_tape_read_grads(t, o->gp, CO * CI + CO);
    if (!s && act) { /* the op recorded is the CALL row holding the function */
        const nb_top *op = &t->ops[t->n_ops - 2];
        if (op->kind != NB_TOP_CALL || op->obj != act || op->nin != 1 || op->in[0] != h || op->out != y)
            s = nb_error(NB_ERR_INTERNAL, "the op before mse is '%s', not the call", nb_tape_op_name(op->kind));
    }
    nb_tape_free(t);
    return s;
}

static void chain_data(float *x, float *params, float *tgt) {
    fill(x, CB * CI);
    fill(params, CO * CI + CO);
    fill(tgt, CB * CO);
}

static void test_chain_matches_library_ops(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_module *m = load(cpu);
    if (!m) {
        nb_test_failures_++;
        nb_device_close(cpu);
        return;
    }
    float x[CB * CI], params[CO * CI + CO], tgt[CB * CO];
    chain_data(x, params, tgt);
    chain_out a, b;
    NB_EXPECT_OK(chain(NULL, fn(m, "silu_nb"), x, params, tgt, &a)); /* host tape, cpu module */
    NB_EXPECT_OK(chain(NULL, NULL, x, params, tgt, &b));
    NB_EXPECT_NEAR(a.loss, b.loss, 1e-6 * fabs(b.loss) + 1e-7);
    NB_EXPECT(close_to("y", a.y, b.y, CB * CO, 2e-6));
    NB_EXPECT(close_to("dL/dx", a.gx, b.gx, CB * CI, 2e-5));
    NB_EXPECT(close_to("dL/dparams", a.gp, b.gp, CO * CI + CO, 2e-5));
    double gmax = 0;
    for (int i = 0; i < CO * CI + CO; i++) gmax = fmax(gmax, fabs(a.gp[i]));
    NB_EXPECT(gmax > 1e-3); /* not vacuous */
    /* the same on a tape of the CPU device (not a host tape) */
    NB_EXPECT_OK(chain(cpu, fn(m, "silu_nb"), x, params, tgt, &a));
    NB_EXPECT(close_to("y (cpu device)", a.y, b.y, CB * CO, 2e-6));
    NB_EXPECT(close_to("dL/dx (cpu device)", a.gx, b.gx, CB * CI, 2e-5));
    nb_module_free(m);
    nb_device_close(cpu);
}

/* L = mse(y, T) for a random T; backward; yh = y and dy = dL/dy = 2 (y - T) / n on the host. */
static nb_status loss_of(nb_tape *t, nb_tvar y, int64_t n, float *yh, float *dy) {
    int nd;
    int64_t sh[4];
    float *T = malloc(sizeof(float) * (size_t)n);
    fill(T, n);
    nb_tvar tv, loss;
    nb_status s = nb_tape_shape(t, y, &nd, sh);
    if (!s) s = nb_tape_input(t, nd, sh, T, 0, &tv);
    if (!s) s = nb_tape_mse(t, y, tv, &loss);
    if (!s) s = nb_tape_backward(t, loss);
    if (!s) s = nb_tape_read(t, y, yh, n);
    for (int64_t i = 0; !s && i < n; i++) dy[i] = 2.0f * (yh[i] - T[i]) / (float)n;
    free(T);
    return s;
}

static int shape_is(nb_tape *t, nb_tvar v, int nd, const int64_t *want) {
    int n;
    int64_t sh[4];
    if (nb_tape_shape(t, v, &n, sh) || n != nd) return 0;
    return !memcmp(sh, want, sizeof(int64_t) * (size_t)nd);
}

struct fix {
    nb_device *cpu;
    nb_module *m;
    nb_tape *t;
};
static int fix_open(struct fix *x) {
    memset(x, 0, sizeof *x);
    if (nb_device_open("cpu", &x->cpu) || !(x->m = load(x->cpu)) || nb_tape_create(&x->t)) {
        fprintf(stderr, "  setup: %s\n", nb_last_error());
        nb_test_failures_++;
        return 0;
    }
    return 1;
}
static void fix_close(struct fix *x) {
    nb_tape_free(x->t); /* before the module: ops hold its functions */
    nb_module_free(x->m);
    nb_device_close(x->cpu);
}

/* y[i,j] = a[i,j] b[j] + c[i]: a [4,5], b [5], c [4,1] broadcast (the call layer's rule). */
static void test_broadcast(void) {
    struct fix F;
    if (!fix_open(&F)) return;
    float a[20], b[5], c[4], y[20], dy[20], ga[20], gb[5], gc[4];
    fill(a, 20), fill(b, 5), fill(c, 4);
    nb_tvar av, bv, cv, yv;
    NB_REQUIRE_OK(nb_tape_input(F.t, 2, (int64_t[]){4, 5}, a, 1, &av));
    NB_REQUIRE_OK(nb_tape_input(F.t, 1, (int64_t[]){5}, b, 1, &bv));
    NB_REQUIRE_OK(nb_tape_input(F.t, 2, (int64_t[]){4, 1}, c, 1, &cv));
    NB_REQUIRE_OK(nb_tape_call(F.t, fn(F.m, "madd"), 3, (nb_tvar[]){av, bv, cv}, &yv));
    NB_EXPECT(shape_is(F.t, yv, 2, (int64_t[]){4, 5}));
    NB_REQUIRE_OK(loss_of(F.t, yv, 20, y, dy));
    NB_EXPECT_OK(nb_tape_read_grad(F.t, av, ga, 20));
    NB_EXPECT_OK(nb_tape_read_grad(F.t, bv, gb, 5));
    NB_EXPECT_OK(nb_tape_read_grad(F.t, cv, gc, 4));
    float ry[20], rga[20], rgb[5] = {0}, rgc[4] = {0};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++) {
            ry[i * 5 + j] = a[i * 5 + j] * b[j] + c[i];
            rga[i * 5 + j] = dy[i * 5 + j] * b[j];
            rgb[j] += dy[i * 5 + j] * a[i * 5 + j];
            rgc[i] += dy[i * 5 + j];
        }
    NB_EXPECT(close_to("y", y, ry, 20, 1e-6));
    NB_EXPECT(close_to("da", ga, rga, 20, 1e-6));
    NB_EXPECT(close_to("db (summed over the broadcast)", gb, rgb, 5, 1e-5));
    NB_EXPECT(close_to("dc (summed over the broadcast)", gc, rgc, 4, 1e-5));
    /* call shapes that do not broadcast */
    nb_tvar bad;
    NB_REQUIRE_OK(nb_tape_input(F.t, 1, (int64_t[]){3}, b, 1, &bad));
    int32_t nops = F.t->n_ops;
    NB_EXPECT_ERR(nb_tape_call(F.t, fn(F.m, "madd"), 3, (nb_tvar[]){av, bad, cv}, &yv), NB_ERR_SHAPE,
                  "do not broadcast");
    NB_EXPECT(F.t->n_ops == nops); /* nothing recorded */
    fix_close(&F);
}

/* float3 parameters take a trailing 3; scalars; a 0-d result; an int scalar; a default. */
static void test_vectors_and_scalars(void) {
    struct fix F;
    if (!fix_open(&F)) return;
    float v[18], y[18], dy[18], gv[18];
    fill(v, 18);
    nb_tvar vv, yv;
    /* scale3(float3 v, float s): [6,3] x 2.5 */
    NB_REQUIRE_OK(nb_tape_input(F.t, 2, (int64_t[]){6, 3}, v, 1, &vv));
    NB_REQUIRE_OK(nb_tape_call_scalars(F.t, fn(F.m, "scale3"), 2, (nb_tvar[]){vv, NB_TVAR_NONE},
                                       (double[]){0, 2.5}, &yv));
    NB_EXPECT(shape_is(F.t, yv, 2, (int64_t[]){6, 3}));
    NB_REQUIRE_OK(loss_of(F.t, yv, 18, y, dy));
    NB_EXPECT_OK(nb_tape_read_grad(F.t, vv, gv, 18));
    float r[18], rg[18];
    for (int i = 0; i < 18; i++) r[i] = 2.5f * v[i], rg[i] = 2.5f * dy[i];
    NB_EXPECT(close_to("scale3 y", y, r, 18, 1e-6));
    NB_EXPECT(close_to("scale3 dv", gv, rg, 18, 1e-6));
    NB_EXPECT(F.t->ops[F.t->n_ops - 2].kind == NB_TOP_CALL && F.t->ops[F.t->n_ops - 2].dp[0] == 2.5);
    nb_tcall tc; /* the op's binding, as a pass reads it */
    nb_tcall_of_op(&F.t->ops[F.t->n_ops - 2], &tc);
    NB_EXPECT(tc.f == fn(F.m, "scale3") && tc.nparams == 2 && tc.src[0] == 0 && tc.src[1] == NB_TCALL_SCALAR &&
              tc.scalar[1] == 2.5 && !tc.out_0d && F.t->ops[F.t->n_ops - 2].in[0] == vv);

    /* norm3(float3 v): [6,3] -> [6], dv = dy v / |v| */
    NB_REQUIRE_OK(nb_tape_reset(F.t));
    NB_REQUIRE_OK(nb_tape_input(F.t, 2, (int64_t[]){6, 3}, v, 1, &vv));
    NB_REQUIRE_OK(nb_tape_call(F.t, fn(F.m, "norm3"), 1, &vv, &yv));
    NB_EXPECT(shape_is(F.t, yv, 1, (int64_t[]){6}));
    NB_REQUIRE_OK(loss_of(F.t, yv, 6, y, dy));
    NB_EXPECT_OK(nb_tape_read_grad(F.t, vv, gv, 18));
    for (int i = 0; i < 6; i++) {
        float n = sqrtf(v[3 * i] * v[3 * i] + v[3 * i + 1] * v[3 * i + 1] + v[3 * i + 2] * v[3 * i + 2]);
        r[i] = n;
        for (int k = 0; k < 3; k++) rg[3 * i + k] = dy[i] * v[3 * i + k] / n;
    }
    NB_EXPECT(close_to("norm3 y", y, r, 6, 1e-6));
    NB_EXPECT(close_to("norm3 dv", gv, rg, 18, 1e-5));

    /* norm3 of one float3 [3]: kernel shape [] and a number -> the tape's [1] */
    NB_REQUIRE_OK(nb_tape_reset(F.t));
    NB_REQUIRE_OK(nb_tape_input(F.t, 1, (int64_t[]){3}, v, 1, &vv));
    NB_REQUIRE_OK(nb_tape_call(F.t, fn(F.m, "norm3"), 1, &vv, &yv));
    NB_EXPECT(shape_is(F.t, yv, 1, (int64_t[]){1}));
    NB_REQUIRE_OK(loss_of(F.t, yv, 1, y, dy));
    NB_EXPECT_OK(nb_tape_read_grad(F.t, vv, gv, 3));
    float n0 = sqrtf(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    NB_EXPECT_NEAR(y[0], n0, 1e-6);
    for (int k = 0; k < 3; k++) NB_EXPECT_NEAR(gv[k], dy[0] * v[k] / n0, 1e-6);

    /* powi(float x, int n): an integer scalar */
    NB_REQUIRE_OK(nb_tape_reset(F.t));
    NB_REQUIRE_OK(nb_tape_input(F.t, 1, (int64_t[]){7}, v, 1, &vv));
    NB_REQUIRE_OK(nb_tape_call_scalars(F.t, fn(F.m, "powi"), 2, (nb_tvar[]){vv, NB_TVAR_NONE}, (double[]){0, 3},
                                       &yv));
    NB_REQUIRE_OK(loss_of(F.t, yv, 7, y, dy));
    NB_EXPECT_OK(nb_tape_read_grad(F.t, vv, gv, 7));
    for (int i = 0; i < 7; i++) r[i] = v[i] * v[i] * v[i], rg[i] = 3 * v[i] * v[i] * dy[i];
    NB_EXPECT(close_to("powi y", y, r, 7, 1e-6));
    NB_EXPECT(close_to("powi dx", gv, rg, 7, 1e-5));
    NB_EXPECT_ERR(nb_tape_call_scalars(F.t, fn(F.m, "powi"), 2, (nb_tvar[]){vv, NB_TVAR_NONE}, (double[]){0, 2.5},
                                       &yv), NB_ERR_DTYPE, "is an integer, given 2.5");

    /* softplus(x, beta) with beta = 2; scaled(x) leaves s at its default 3 */
    NB_REQUIRE_OK(nb_tape_reset(F.t));
    NB_REQUIRE_OK(nb_tape_input(F.t, 1, (int64_t[]){7}, v, 1, &vv));
    NB_REQUIRE_OK(nb_tape_call_scalars(F.t, fn(F.m, "softplus"), 2, (nb_tvar[]){vv, NB_TVAR_NONE},
                                       (double[]){0, 2.0}, &yv));
    nb_tvar y2;
    NB_REQUIRE_OK(nb_tape_call(F.t, fn(F.m, "scaled"), 1, &yv, &y2));
    NB_REQUIRE_OK(loss_of(F.t, y2, 7, y, dy));
    NB_EXPECT_OK(nb_tape_read_grad(F.t, vv, gv, 7));
    for (int i = 0; i < 7; i++) {
        r[i] = 3.0f * logf(1.0f + expf(2.0f * v[i])) / 2.0f;
        rg[i] = dy[i] * 3.0f / (1.0f + expf(-2.0f * v[i])); /* d/dx softplus = sigmoid(beta x) */
    }
    NB_EXPECT(close_to("softplus*3 y", y, r, 7, 1e-5));
    NB_EXPECT(close_to("softplus*3 dx", gv, rg, 7, 1e-5));
    fix_close(&F);
}

/* One prepared binding serves runs with other scalar values and other addresses; another shape is
 * another binding. */
static void test_prepared_reuse(void) {
    struct fix F;
    if (!fix_open(&F)) return;
    float v[24], y[24], dy[24], gv[24];
    fill(v, 24);
    for (int run = 0; run < 6; run++) {
        int64_t n = run < 4 ? 12 : 24;
        double beta = 0.5 + run;
        nb_tvar pad, vv, yv;
        NB_REQUIRE_OK(nb_tape_reset(F.t));
        if (run & 1) NB_REQUIRE_OK(nb_tape_input(F.t, 1, (int64_t[]){5}, v, 0, &pad)); /* moves the arena */
        NB_REQUIRE_OK(nb_tape_input(F.t, 1, &n, v, 1, &vv));
        NB_REQUIRE_OK(nb_tape_call_scalars(F.t, fn(F.m, "softplus"), 2, (nb_tvar[]){vv, NB_TVAR_NONE},
                                           (double[]){0, beta}, &yv));
        NB_REQUIRE_OK(loss_of(F.t, yv, n, y, dy));
        NB_EXPECT_OK(nb_tape_read_grad(F.t, vv, gv, n));
        float r[24], rg[24];
        for (int i = 0; i < n; i++) {
            r[i] = (float)(log1p(exp(beta * v[i])) / beta);
            rg[i] = dy[i] / (1.0f + expf((float)(-beta * v[i])));
        }
        NB_EXPECT(close_to("softplus y", y, r, n, 1e-5));
        NB_EXPECT(close_to("softplus dx", gv, rg, n, 1e-5));
    }
    NB_EXPECT(nb_tcall_prepares(F.t) == 4); /* [12] and [24], forward and backward */
    fix_close(&F);
}

/* Gradients add up: x feeds two parameters of one call and a library op; a no_diff parameter
 * passes no gradient. */
static void test_accumulation_and_no_diff(void) {
    struct fix F;
    if (!fix_open(&F)) return;
    float x[10], m[10], c[10], y[10], dy[10], gx[10], gm[10], gc[10];
    fill(x, 10), fill(m, 10), fill(c, 10);
    nb_tvar xv, mv, cv, p, q, yv;
    NB_REQUIRE_OK(nb_tape_input(F.t, 1, (int64_t[]){10}, x, 1, &xv));
    NB_REQUIRE_OK(nb_tape_input(F.t, 1, (int64_t[]){10}, c, 1, &cv));
    NB_REQUIRE_OK(nb_tape_call(F.t, fn(F.m, "madd"), 3, (nb_tvar[]){xv, xv, cv}, &p)); /* x^2 + c */
    NB_REQUIRE_OK(nb_tape_silu(F.t, xv, &q));
    NB_REQUIRE_OK(nb_tape_add(F.t, p, q, &yv));
    NB_REQUIRE_OK(loss_of(F.t, yv, 10, y, dy));
    NB_EXPECT_OK(nb_tape_read_grad(F.t, xv, gx, 10));
    NB_EXPECT_OK(nb_tape_read_grad(F.t, cv, gc, 10));
    float r[10], rg[10];
    for (int i = 0; i < 10; i++) {
        float sg = 1.0f / (1.0f + expf(-x[i]));
        r[i] = x[i] * x[i] + c[i] + x[i] * sg;
        rg[i] = dy[i] * (2 * x[i] + sg * (1 + x[i] * (1 - sg)));
    }
    NB_EXPECT(close_to("y", y, r, 10, 1e-6));
    NB_EXPECT(close_to("dx (two parameters and silu)", gx, rg, 10, 1e-5));
    NB_EXPECT(close_to("dc", gc, dy, 10, 1e-6));

    NB_REQUIRE_OK(nb_tape_reset(F.t));
    NB_REQUIRE_OK(nb_tape_input(F.t, 1, (int64_t[]){10}, x, 1, &xv));
    NB_REQUIRE_OK(nb_tape_input(F.t, 1, (int64_t[]){10}, m, 1, &mv));
    NB_REQUIRE_OK(nb_tape_call(F.t, fn(F.m, "masked"), 2, (nb_tvar[]){xv, mv}, &yv));
    NB_REQUIRE_OK(loss_of(F.t, yv, 10, y, dy));
    NB_EXPECT_OK(nb_tape_read_grad(F.t, xv, gx, 10));
    NB_EXPECT_OK(nb_tape_read_grad(F.t, mv, gm, 10));
    for (int i = 0; i < 10; i++) rg[i] = dy[i] * m[i], r[i] = 0;
    NB_EXPECT(close_to("masked dx", gx, rg, 10, 1e-6));
    NB_EXPECT(close_to("no_diff dm = 0", gm, r, 10, 0));
    fix_close(&F);
}

/* Bad input: a typed error naming the cause, nothing recorded. */
static void test_errors(void) {
    struct fix F;
    if (!fix_open(&F)) return;
    float a[12] = {0};
    nb_tvar x, xn, x4, y;
    NB_REQUIRE_OK(nb_tape_input(F.t, 2, (int64_t[]){3, 4}, a, 1, &x));
    NB_REQUIRE_OK(nb_tape_input(F.t, 2, (int64_t[]){3, 4}, a, 0, &xn));
    NB_REQUIRE_OK(nb_tape_input(F.t, 2, (int64_t[]){4, 3}, a, 1, &x4));
    int32_t nops = F.t->n_ops, nvals = F.t->n_vals;
    nb_tape *t = F.t;
    /* arity */
    NB_EXPECT_ERR(nb_tape_call(t, fn(F.m, "madd"), 2, (nb_tvar[]){x, x}, &y), NB_ERR_INVALID_ARG,
                  "takes 3 parameters, 2 arguments given (parameter 'c' has no default value)");
    NB_EXPECT_ERR(nb_tape_call(t, fn(F.m, "silu_nb"), 2, (nb_tvar[]){x, x}, &y), NB_ERR_INVALID_ARG,
                  "takes 1 parameter, 2 arguments given");
    NB_EXPECT_ERR(nb_tape_call(t, fn(F.m, "silu_nb"), 0, NULL, &y), NB_ERR_INVALID_ARG,
                  "parameter 'x' has no default value");
    NB_EXPECT_ERR(nb_tape_call_scalars(t, fn(F.m, "softplus"), 2, (nb_tvar[]){NB_TVAR_NONE, NB_TVAR_NONE},
                                       (double[]){1, 2}, &y), NB_ERR_INVALID_ARG, "no argument is a tape value");
    NB_EXPECT_ERR(nb_tape_call(t, fn(F.m, "softplus"), 2, (nb_tvar[]){x, NB_TVAR_NONE}, &y), NB_ERR_INVALID_ARG,
                  "nb_tape_call_scalars");
    NB_EXPECT_ERR(nb_tape_call_scalars(t, fn(F.m, "softplus"), 2, (nb_tvar[]){x, NB_TVAR_NONE}, NULL, &y),
                  NB_ERR_INVALID_ARG, "scalars is NULL");
    NB_EXPECT_ERR(nb_tape_call(t, fn(F.m, "silu_nb"), 1, (nb_tvar[]){77}, &y), NB_ERR_INVALID_ARG,
                  "argument 0 is not a live value");
    NB_EXPECT_ERR(nb_tape_call(t, NULL, 1, &x, &y), NB_ERR_INVALID_ARG, "NULL");
    /* a function without a reverse mode where a gradient is needed; fine where none is */
    NB_EXPECT_ERR(nb_tape_call(t, fn(F.m, "twice"), 1, &x, &y), NB_ERR_INVALID_ARG,
                  "float twice(float x) is not [Differentiable] but its argument 0 needs a gradient");
    NB_EXPECT(t->n_ops == nops && t->n_vals == nvals);
    NB_EXPECT_OK(nb_tape_call(t, fn(F.m, "twice"), 1, &xn, &y));
    NB_EXPECT(t->n_ops == nops + 1);
    nops = t->n_ops, nvals = t->n_vals;
    /* shapes: a float3 parameter needs a trailing 3 */
    NB_EXPECT_ERR(nb_tape_call(t, fn(F.m, "norm3"), 1, &x, &y), NB_ERR_SHAPE,
                  "argument 0 is [3,4] but parameter 'v' of float norm3(float3 v) needs arrays ending in [3]");
    NB_EXPECT_ERR(nb_tape_call(t, fn(F.m, "madd"), 3, (nb_tvar[]){x, x4, x}, &y), NB_ERR_SHAPE,
                  "argument 0 ('a') is [3,4] and argument 1 ('b') is [4,3]");
    NB_EXPECT_ERR(nb_tape_call_scalars(t, fn(F.m, "scale3"), 2, (nb_tvar[]){NB_TVAR_NONE, x}, (double[]){1, 0}, &y),
                  NB_ERR_SHAPE, "parameter 'v' of float3 scale3(float3 v, float s) is not a number");
    /* what a tape op cannot bind or return */
    NB_EXPECT_ERR(nb_tape_call(t, fn(F.m, "sfield"), 1, &x, &y), NB_ERR_UNSUPPORTED, "struct parameter 'p'");
    NB_EXPECT_ERR(nb_tape_call(t, fn(F.m, "outp"), 2, (nb_tvar[]){x, x}, &y), NB_ERR_UNSUPPORTED,
                  "parameter 'y' of void outp(float x, out float y) is out");
    NB_EXPECT_ERR(nb_tape_call(t, fn(F.m, "outp"), 1, &x, &y), NB_ERR_INVALID_ARG, "has no default value");
    NB_EXPECT_ERR(nb_tape_call_scalars(t, fn(F.m, "iid"), 2, (nb_tvar[]){xn, NB_TVAR_NONE}, (double[]){0, 1}, &y),
                  NB_ERR_INVALID_ARG, "takes 1 parameter");
    NB_EXPECT_ERR(nb_tape_call(t, fn(F.m, "iid"), 1, &xn, &y), NB_ERR_DTYPE, "holds i32; tape values are floats");
    NB_EXPECT(t->n_ops == nops && t->n_vals == nvals);
    /* a module without a device; CUDA: a CPU module on a GPU tape */
    nb_module *nodev = load(NULL);
    if (nodev) {
        NB_EXPECT_ERR(nb_tape_call(t, fn(nodev, "silu_nb"), 1, &x, &y), NB_ERR_NO_DEVICE, "without a device");
        nb_module_free(nodev);
    }
    if (nb_cuda_device_count() > 0) {
        nb_device *gpu;
        nb_tape *tg;
        NB_REQUIRE_OK(nb_device_open("cuda", &gpu));
        NB_REQUIRE_OK(nb_tape_create_on(gpu, &tg));
        nb_tvar xg;
        NB_EXPECT_OK(nb_tape_input(tg, 2, (int64_t[]){3, 4}, a, 1, &xg));
        NB_EXPECT_ERR(nb_tape_call(tg, fn(F.m, "silu_nb"), 1, &xg, &y), NB_ERR_DEVICE, "runs on cpu");
        nb_tape_free(tg);
        nb_device_close(gpu);
    }
    fix_close(&F);
}

/* ---- a recorded graph (nabla/graph.h) with CALL nodes replays bit for bit ---------------------- */

/* linear -> softplus(., 2) (a CALL with a scalar) -> madd(a, a, h) (a CALL reading two values) ->
 * mse against tgt; backward. */
static nb_status user_chain(nb_tape *t, nb_module *m, nb_tvar w, nb_tvar b, const float *x, const float *tgt,
                            nb_tvar *xv, nb_tvar *loss) {
    nb_func *sp, *madd;
    nb_tvar h, a, y, tv;
    nb_status s = nb_module_func(m, "softplus", &sp);
    if (!s) s = nb_module_func(m, "madd", &madd);
    if (!s) s = nb_tape_input(t, 2, (int64_t[]){CB, CI}, x, 1, xv);
    if (!s) s = nb_tape_input(t, 2, (int64_t[]){CB, CO}, tgt, 0, &tv);
    if (!s) s = nb_tape_linear(t, *xv, w, b, &h);
    if (!s) s = nb_tape_call_scalars(t, sp, 2, (nb_tvar[]){h, NB_TVAR_NONE}, (double[]){0, 2.0}, &a);
    if (!s) s = nb_tape_call(t, madd, 3, (nb_tvar[]){a, a, h}, &y);
    if (!s) s = nb_tape_mse(t, y, tv, loss);
    if (!s) s = nb_tape_backward(t, *loss);
    return s;
}

/* Records the chain on a tape of dev (NULL: host), replays it 4 times with new inputs against
 * immediate mode: bit for bit on the CPU; on CUDA within tolerance, and from the third run on as
 * one captured CUDA graph (the CALL rows launch prepared calls: capturable). */
static void check_recorded_graph(nb_device *dev) {
    struct fix F;
    if (!fix_open(&F)) return;
    nb_tape *t, *ref;
    if (dev) { /* the module and both tapes on the GPU */
        nb_tape_free(F.t);
        nb_module_free(F.m);
        NB_REQUIRE_OK(nb_tape_create_on(dev, &F.t));
        F.m = load(dev);
        NB_REQUIRE_OK(F.m ? NB_OK : NB_ERR_COMPILE);
    }
    t = F.t;
    NB_REQUIRE_OK(nb_tape_create_on(dev, &ref));
    nb_tvar w, b, rw, rb, xv, loss, rx, rloss;
    float params[CO * CI + CO], x[CB * CI], tgt[CB * CO];
    fill(params, CO * CI + CO);
    NB_REQUIRE_OK(nb_tape_param(t, "w", 2, (int64_t[]){CO, CI}, &w));
    NB_REQUIRE_OK(nb_tape_param(t, "b", 1, (int64_t[]){CO}, &b));
    NB_REQUIRE_OK(nb_tape_param(ref, "w", 2, (int64_t[]){CO, CI}, &rw));
    NB_REQUIRE_OK(nb_tape_param(ref, "b", 1, (int64_t[]){CO}, &rb));
    NB_REQUIRE_OK(nb_tape_write_params(t, params, CO * CI + CO));
    NB_REQUIRE_OK(nb_tape_write_params(ref, params, CO * CI + CO));
    fill(x, CB * CI), fill(tgt, CB * CO);
    NB_REQUIRE_OK(nb_graph_record_begin(t));
    NB_REQUIRE_OK(user_chain(t, F.m, w, b, x, tgt, &xv, &loss));
    nb_graph *g;
    NB_REQUIRE_OK(nb_graph_record_end(t, &g));
    int ncall = 0;
    for (int32_t i = 0; i < t->n_ops; i++) ncall += t->ops[i].kind == NB_TOP_CALL;
    NB_EXPECT(ncall == 2);
    for (int run = 0; run < 4; run++) {
        fill(x, CB * CI), fill(tgt, CB * CO);
        NB_EXPECT_OK(nb_graph_set_input(g, 0, x, NB_F32, 2, (int64_t[]){CB, CI}));
        NB_EXPECT_OK(nb_graph_set_input(g, 1, tgt, NB_F32, 2, (int64_t[]){CB, CO}));
        NB_EXPECT_OK(nb_tape_zero_grad(t));
        NB_EXPECT_OK(nb_graph_run(g));
        NB_EXPECT_OK(nb_tape_reset(ref));
        NB_EXPECT_OK(nb_tape_zero_grad(ref));
        NB_EXPECT_OK(user_chain(ref, F.m, rw, rb, x, tgt, &rx, &rloss));
        float l, rl, gx[CB * CI], rgx[CB * CI], gp[CO * CI + CO], rgp[CO * CI + CO];
        NB_EXPECT_OK(nb_graph_read(g, loss, &l, 1));
        NB_EXPECT_OK(nb_graph_read_grad(g, xv, gx, CB * CI));
        NB_EXPECT_OK(nb_tape_read_grads(t, gp, CO * CI + CO));
        NB_EXPECT_OK(nb_tape_read(ref, rloss, &rl, 1));
        NB_EXPECT_OK(nb_tape_read_grad(ref, rx, rgx, CB * CI));
        NB_EXPECT_OK(nb_tape_read_grads(ref, rgp, CO * CI + CO));
        if (!dev) { /* the same rows over other memory: bit for bit on the CPU */
            NB_EXPECT(l == rl);
            NB_EXPECT(!memcmp(gx, rgx, sizeof gx));
            NB_EXPECT(!memcmp(gp, rgp, sizeof gp));
        } else {
            NB_EXPECT_NEAR(l, rl, 1e-5 * fabs(rl) + 1e-6);
            NB_EXPECT(close_to("replayed dL/dx", gx, rgx, CB * CI, 1e-4));
            NB_EXPECT(close_to("replayed dL/dparams", gp, rgp, CO * CI + CO, 1e-4));
        }
        double gm = 0;
        for (int i = 0; i < CO * CI + CO; i++) gm = fmax(gm, fabs(gp[i]));
        NB_EXPECT(gm > 1e-4); /* gradients reach the parameters through both calls */
    }
    char dump[8192];
    NB_EXPECT_OK(nb_graph_dump(g, NB_GRAPH_DUMP_TEXT, dump, sizeof dump, NULL));
    NB_EXPECT(strstr(dump, "call(softplus):") && strstr(dump, "call(madd):")); /* nodes name the function */
    nb_graph_info gi;
    NB_EXPECT_OK(nb_graph_get_info(g, &gi));
    if (dev) NB_EXPECT(gi.cuda_graph == 2 && gi.captures == 1); /* captured, CALL nodes and all */
    nb_graph_free(g);
    nb_tape_free(ref);
    fix_close(&F);
}

static void test_recorded_graph(void) { check_recorded_graph(NULL); }

static void test_recorded_graph_cuda(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *gpu;
    NB_REQUIRE_OK(nb_device_open("cuda", &gpu));
    check_recorded_graph(gpu);
    nb_device_close(gpu);
}

/* ---- steady state: a fixed-shape training loop allocates nothing once warm ----------------------- */

static void test_steady_state_no_alloc(void) {
    struct fix F;
    if (!fix_open(&F)) return;
    nb_tape *t = F.t;
    nb_func *act = fn(F.m, "softplus"), *madd = fn(F.m, "madd");
    nb_tvar w, b;
    NB_REQUIRE_OK(nb_tape_param(t, "w", 2, (int64_t[]){CO, CI}, &w));
    NB_REQUIRE_OK(nb_tape_param(t, "b", 1, (int64_t[]){CO}, &b));
    NB_REQUIRE_OK(nb_tape_param_init_uniform(t, w, 0.5f, 1));
    float x[CB * CI], tgt[CB * CO], sh[CB * CO];
    fill(x, CB * CI), fill(tgt, CB * CO), fill(sh, CB * CO);
    nb_test_count_allocs_begin();
    int64_t allocs_early = 0, tape_allocs = 0, prepares = 0;
    float first = 0, last = 0;
    for (int step = 0; step < 8; step++) {
        if (step == 3) {
            allocs_early = nb_test_allocs;
            nb_tape_stats st;
            nb_tape_get_stats(t, &st);
            tape_allocs = st.host_allocs;
            prepares = nb_tcall_prepares(t);
            nb_test_allocs = 0;
        }
        nb_tvar xv, h, a, s, y, tv, loss;
        NB_EXPECT_OK(nb_tape_reset(t));
        NB_EXPECT_OK(nb_tape_zero_grad(t));
        NB_EXPECT_OK(nb_tape_input(t, 2, (int64_t[]){CB, CI}, x, 0, &xv));
        NB_EXPECT_OK(nb_tape_input(t, 2, (int64_t[]){CB, CO}, sh, 0, &s));
        NB_EXPECT_OK(nb_tape_linear(t, xv, w, b, &h));
        NB_EXPECT_OK(nb_tape_call_scalars(t, act, 2, (nb_tvar[]){h, NB_TVAR_NONE}, (double[]){0, 1.5 + 0.01 * step}, &a));
        NB_EXPECT_OK(nb_tape_call_scalars(t, madd, 3, (nb_tvar[]){a, s, NB_TVAR_NONE}, (double[]){0, 0, 0.25}, &y));
        NB_EXPECT_OK(nb_tape_input(t, 2, (int64_t[]){CB, CO}, tgt, 0, &tv));
        NB_EXPECT_OK(nb_tape_mse(t, y, tv, &loss));
        NB_EXPECT_OK(nb_tape_backward(t, loss));
        float *l, *p, *g;
        int64_t np;
        nb_tape_data(t, loss, &l, NULL);
        if (step == 0) first = l[0];
        last = l[0];
        nb_tape_params(t, &p, &np);
        nb_tape_grads(t, &g, &np);
        for (int64_t i = 0; i < np; i++) p[i] -= 0.5f * g[i]; /* SGD */
    }
    int64_t allocs_late = nb_test_allocs, prep_late = nb_tcall_prepares(t);
    nb_test_count_allocs_end();
    nb_tape_stats st;
    NB_EXPECT_OK(nb_tape_get_stats(t, &st));
    NB_EXPECT(allocs_early > 0); /* the hooks see the first steps' allocations */
    NB_EXPECT(allocs_late == 0);
    NB_EXPECT(st.host_allocs == tape_allocs);
    NB_EXPECT(prepares == 4 && prep_late == 4); /* softplus and madd, forward and backward, once */
    NB_EXPECT(last < first); /* and it trains */
    if (allocs_late) fprintf(stderr, "  %lld host allocations in steps 3..7\n", (long long)allocs_late);
    fix_close(&F);
}

/* ---- the CUDA kernels of CALL ops compile (NVRTC, no GPU needed) ------------------------------- */

/* A call of f bound as the CALL row binds it (tape_call.c prep_build): arrays f32 arrays[p] of
 * nd[p] dims (0: a scalar), in backward mode a gradient per array and dout, else the
 * result; then NVRTC compiles its CUDA kernel. */
static int nvrtc_like_tape(nb_func *f, int backward, int nparams, const int *nd, const int64_t (*shape)[4], int ond,
                           const int64_t *oshape, const char *what) {
    static float buf[4096];
    nb_device *cpu = nb_module_device(nb_func_module(f));
    nb_tensor *w[33];
    int nw = 0;
    nb_call *c = NULL;
    nb_status s = nb_call_begin(f, &c);
    if (!s && backward) s = nb_call_set_mode(c, NB_MODE_BWD);
    for (int p = 0; p < nparams && !s; p++) {
        if (!nd[p]) { /* a float scalar from a double, an integer one from a whole number */
            nb_leaf_info li;
            s = nb_func_leaf(f, 0, p, &li);
            if (!s) s = nb_dtype_is_float(li.dtype) ? nb_call_arg_double(c, p, 1.5) : nb_call_arg_int(c, p, 3);
            continue;
        }
        s = nb_tensor_wrap(cpu, NB_F32, nd[p], shape[p], NULL, buf, &w[nw]);
        if (!s) s = nb_call_arg(c, p, w[nw++]);
        if (!s && backward) s = nb_tensor_wrap(cpu, NB_F32, nd[p], shape[p], NULL, buf + 1024, &w[nw]);
        if (!s && backward) s = nb_call_grad(c, p, w[nw++]);
    }
    if (!s) s = nb_tensor_wrap(cpu, NB_F32, ond, oshape, NULL, buf + 2048, &w[nw]);
    if (!s) s = backward ? nb_call_dout(c, w[nw++]) : nb_call_result(c, w[nw++]);
    int ok = 0;
    if (s) {
        fprintf(stderr, "  %s: %s\n", what, nb_last_error());
        nb_test_failures_++;
        nb_call_free(c);
    } else {
        ok = nb_test_nvrtc_call(c, what);
    }
    for (int i = 0; i < nw; i++) nb_tensor_free(w[i]);
    return ok;
}

static void test_nvrtc_kernels(void) {
    if (nb_nvrtc_version() == 0) NB_SKIP("NVRTC is not available");
    struct fix F;
    if (!fix_open(&F)) return;
    const int64_t sh[3][4] = {{6, 4}, {4}, {6, 1}}, sh3[1][4] = {{6, 3}}, o[2] = {6, 4}, o3[1] = {6};
    int ok = 0;
    for (int bwd = 0; bwd < 2; bwd++) {
        ok += nvrtc_like_tape(fn(F.m, "softplus"), bwd, 2, (int[]){2, 0}, sh, 2, o, "softplus (scalar beta)");
        ok += nvrtc_like_tape(fn(F.m, "madd"), bwd, 3, (int[]){2, 1, 2}, sh, 2, o, "madd (broadcast)");
        ok += nvrtc_like_tape(fn(F.m, "norm3"), bwd, 1, (int[]){2}, sh3, 1, o3, "norm3 (float3)");
        ok += nvrtc_like_tape(fn(F.m, "powi"), bwd, 2, (int[]){2, 0}, sh, 2, o, "powi (int scalar)");
    }
    NB_EXPECT(ok == 8);
    fix_close(&F);
}

/* ---- CUDA: the chain and a broadcast call on the GPU against the CPU --------------------------- */

static void test_cuda_vs_cpu(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *gpu, *cpu;
    NB_REQUIRE_OK(nb_device_open("cuda", &gpu));
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_module *mg = load(gpu), *mc = load(cpu);
    NB_REQUIRE_OK(mg && mc ? NB_OK : NB_ERR_COMPILE);
    float x[CB * CI], params[CO * CI + CO], tgt[CB * CO];
    chain_data(x, params, tgt);
    chain_out a, b;
    NB_EXPECT_OK(chain(gpu, fn(mg, "silu_nb"), x, params, tgt, &a));
    NB_EXPECT_OK(chain(NULL, fn(mc, "silu_nb"), x, params, tgt, &b));
    NB_EXPECT_NEAR(a.loss, b.loss, 1e-5 * fabs(b.loss) + 1e-6);
    NB_EXPECT(close_to("cuda y", a.y, b.y, CB * CO, 1e-5));
    NB_EXPECT(close_to("cuda dL/dx", a.gx, b.gx, CB * CI, 1e-4));
    NB_EXPECT(close_to("cuda dL/dparams", a.gp, b.gp, CO * CI + CO, 1e-4));
    /* bf16 storage: the row reads f32 (the tape casts the linear's bf16 output first) */
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create_on(gpu, &t));
    NB_EXPECT_OK(nb_tape_set_precision(t, NB_TAPE_BF16));
    nb_tvar w, bb, xv, h, y;
    NB_EXPECT_OK(nb_tape_param(t, "w", 2, (int64_t[]){CO, CI}, &w));
    NB_EXPECT_OK(nb_tape_param(t, "b", 1, (int64_t[]){CO}, &bb));
    NB_EXPECT_OK(nb_tape_write_params(t, params, CO * CI + CO));
    NB_EXPECT_OK(nb_tape_input(t, 2, (int64_t[]){CB, CI}, x, 1, &xv));
    NB_EXPECT_OK(nb_tape_linear(t, xv, w, bb, &h));
    NB_EXPECT_OK(nb_tape_call(t, fn(mg, "silu_nb"), 1, &h, &y));
    nb_dtype dt;
    NB_EXPECT_OK(nb_tape_dtype(t, y, &dt));
    NB_EXPECT(dt == NB_F32);
    float yb[CB * CO];
    NB_EXPECT_OK(nb_tape_read(t, y, yb, CB * CO));
    NB_EXPECT(close_to("bf16 tape y", yb, b.y, CB * CO, 2e-2));
    nb_tape_free(t);
    nb_module_free(mg);
    nb_module_free(mc);
    nb_device_close(cpu);
    nb_device_close(gpu);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_chain_matches_library_ops, test_broadcast, test_vectors_and_scalars,
                 test_prepared_reuse, test_accumulation_and_no_diff, test_errors, test_recorded_graph, test_steady_state_no_alloc, test_nvrtc_kernels,
                 test_cuda_vs_cpu, test_recorded_graph_cuda);
}

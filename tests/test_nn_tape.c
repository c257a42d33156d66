/* Tape autograd (nn_tape.h), CPU reference: every op's forward against an independent double
 * reference or known values, every op's input and parameter gradients against central finite
 * differences, a composed model, no allocation in steady state, and bad input. */
#include "nb_test.h"
#include "nb_test_alloc.h"
#include "nabla/nn_optim.h"
#include "nabla/nn_tape.h"
#include "device/cuda/cuda_api.h"
#include "nabla/alloc.h"
#include "nabla/device.h"
#include "graph/op_rows.h"

/* ---- helpers -------------------------------------------------------------------------------- */

static uint64_t rng_state = 88172645463325252ull;
static float frand(void) { /* uniform [-1, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static void fill(float *a, int64_t n) {
    for (int64_t i = 0; i < n; i++) a[i] = frand();
}
static int64_t numel(int nd, const int64_t *s) {
    int64_t c = 1;
    for (int i = 0; i < nd; i++) c *= s[i];
    return c;
}

/* A graph under test: inputs (host arrays, perturbed by the checker), parameters (in the tape's
 * buffer), and a build function that records the forward and returns a scalar loss. */
#define MAXIN 4
/* |analytic - fd| <= GC_ATOL * max|gradient| + GC_RTOL * |fd| (f32 forward, h = 1e-2) */
#ifndef GC_ATOL
#define GC_ATOL 2e-4
#define GC_RTOL 2e-3
#endif
typedef struct gcase gcase;
struct gcase {
    nb_tape *t;
    int nin;
    float *in[MAXIN];
    int nd[MAXIN];
    int64_t shape[MAXIN][4];
    int req[MAXIN];
    nb_tvar v[MAXIN];     /* set by build */
    nb_tvar p[6];         /* parameters (NB_TVAR_NONE when absent) */
    float target[4096];   /* random regression target for the final MSE */
    int op, ia, ib;       /* op under test and integer attributes */
    nb_status (*build)(gcase *c, nb_tvar *loss);
};

enum { OP_LINEAR, OP_CONV, OP_GN, OP_SILU, OP_ADD, OP_ADDC, OP_CONCAT, OP_UP, OP_POOL, OP_MSE, OP_ATTN, OP_GNS };

static nb_status add_inputs(gcase *c) {
    for (int i = 0; i < c->nin; i++) {
        nb_status s = nb_tape_input(c->t, c->nd[i], c->shape[i], c->in[i], c->req[i], &c->v[i]);
        if (s) return s;
    }
    return NB_OK;
}

/* loss = mse(y, target[shape of y]) */
static nb_status mse_to_target(gcase *c, nb_tvar y, nb_tvar *loss) {
    int nd;
    int64_t sh[4];
    nb_status s = nb_tape_shape(c->t, y, &nd, sh);
    if (s) return s;
    if (numel(nd, sh) > 4096) return nb_error(NB_ERR_SHAPE, "test target too small");
    nb_tvar tg;
    if ((s = nb_tape_input(c->t, nd, sh, c->target, 0, &tg))) return s;
    return nb_tape_mse(c->t, y, tg, loss);
}

static nb_status build_single(gcase *c, nb_tvar *loss) {
    nb_status s = add_inputs(c);
    if (s) return s;
    nb_tape *t = c->t;
    nb_tvar y = NB_TVAR_NONE, *v = c->v, *p = c->p;
    switch (c->op) {
    case OP_LINEAR: s = nb_tape_linear(t, v[0], p[0], p[1], &y); break;
    case OP_CONV: s = nb_tape_conv2d(t, v[0], p[0], p[1], c->ia, c->ib, &y); break;
    case OP_GN: s = nb_tape_group_norm(t, v[0], c->ia, p[0], p[1], 1e-5f, &y); break;
    case OP_GNS: s = nb_tape_group_norm_silu(t, v[0], c->ia, p[0], p[1], 1e-5f, &y); break;
    case OP_SILU: s = nb_tape_silu(t, v[0], &y); break;
    case OP_ADD: s = nb_tape_add(t, v[0], v[1], &y); break;
    case OP_ADDC: s = nb_tape_add_channel(t, v[0], v[1], &y); break;
    case OP_CONCAT: s = nb_tape_concat(t, v[0], v[1], &y); break;
    case OP_UP: s = nb_tape_upsample2x(t, v[0], &y); break;
    case OP_POOL: s = nb_tape_avgpool2x(t, v[0], &y); break;
    case OP_MSE: return nb_tape_mse(t, v[0], v[1], loss);
    case OP_ATTN: s = nb_tape_attention(t, v[0], v[1], v[2], &y); break;
    default: return nb_error(NB_ERR_INTERNAL, "bad test op");
    }
    if (s) return s;
    if (c->op == OP_UP) { /* a SiLU after: checks gradients flowing through a chain too */
        nb_tvar z;
        if ((s = nb_tape_silu(t, y, &z))) return s;
        y = z;
    }
    return mse_to_target(c, y, loss);
}

static nb_status eval_loss(gcase *c, float *out) {
    nb_tvar loss;
    nb_status s = nb_tape_reset(c->t);
    if (!s) s = c->build(c, &loss);
    if (s) return s;
    float *d;
    if ((s = nb_tape_data(c->t, loss, &d, NULL))) return s;
    *out = d[0];
    return NB_OK;
}

/* Compares analytic gradients of every required input and every parameter with central
 * differences; returns the number of mismatches. */
static int grad_check(gcase *c, const char *what) {
    nb_tape *t = c->t;
    nb_tvar loss;
    NB_EXPECT_OK(nb_tape_reset(t));
    NB_EXPECT_OK(nb_tape_zero_grad(t));
    nb_status s = c->build(c, &loss);
    NB_EXPECT_OK(s);
    if (s) return 1;
    NB_EXPECT_OK(nb_tape_backward(t, loss));
    /* copy analytic grads out (the arena is reset by every evaluation below) */
    static float gin[MAXIN][4096];
    float *pbuf, *gbuf;
    int64_t np;
    NB_EXPECT_OK(nb_tape_params(t, &pbuf, &np));
    NB_EXPECT_OK(nb_tape_grads(t, &gbuf, &np));
    float *gpar = malloc(sizeof(float) * (size_t)(np ? np : 1));
    if (np) memcpy(gpar, gbuf, sizeof(float) * (size_t)np);
    double gmax = 1e-6;
    for (int i = 0; i < c->nin; i++) {
        if (!c->req[i]) continue;
        float *g;
        int64_t n;
        NB_EXPECT_OK(nb_tape_grad(t, c->v[i], &g, &n));
        NB_EXPECT(g != NULL);
        if (!g) { free(gpar); return 1; }
        memcpy(gin[i], g, sizeof(float) * (size_t)n);
        for (int64_t k = 0; k < n; k++) gmax = fmax(gmax, fabs(gin[i][k]));
    }
    for (int64_t k = 0; k < np; k++) gmax = fmax(gmax, fabs(gpar[k]));
    const float h = 1e-2f;
    int bad = 0;
    double worst = 0.0;
    for (int i = -1; i < c->nin; i++) {
        if (i >= 0 && !c->req[i]) continue;
        float *x = i < 0 ? pbuf : c->in[i];
        int64_t n = i < 0 ? np : numel(c->nd[i], c->shape[i]);
        for (int64_t k = 0; k < n; k++) {
            float x0 = x[k], lp = 0, lm = 0;
            x[k] = x0 + h;
            NB_EXPECT_OK(eval_loss(c, &lp));
            x[k] = x0 - h;
            NB_EXPECT_OK(eval_loss(c, &lm));
            x[k] = x0;
            double fd = ((double)lp - (double)lm) / (2.0 * h);
            double an = i < 0 ? gpar[k] : gin[i][k];
            double err = fabs(an - fd) / (GC_ATOL * gmax + GC_RTOL * fabs(fd));
            if (err > worst) worst = err;
            if (err > 1.0) {
                if (bad < 5)
                    fprintf(stderr, "  %s: %s[%lld]: analytic %.6g, finite difference %.6g\n", what,
                            i < 0 ? "param" : "input", (long long)k, an, fd);
                bad++;
            }
        }
    }
    if (bad) fprintf(stderr, "  %s: %d gradient mismatches\n", what, bad);
    if (getenv("NB_TAPE_VERBOSE")) fprintf(stderr, "  %s: worst error / tolerance %.3f\n", what, worst);
    free(gpar);
    return bad;
}

static void setup_in(gcase *c, int i, int nd, const int64_t *shape, int req) {
    c->nd[i] = nd;
    memcpy(c->shape[i], shape, sizeof(int64_t) * (size_t)nd);
    c->req[i] = req;
    c->in[i] = malloc(sizeof(float) * (size_t)numel(nd, shape));
    fill(c->in[i], numel(nd, shape));
    if (i + 1 > c->nin) c->nin = i + 1;
}

static gcase *new_case(int op) {
    gcase *c = calloc(1, sizeof *c);
    NB_EXPECT_OK(nb_tape_create(&c->t));
    c->op = op;
    c->build = build_single;
    for (int i = 0; i < 6; i++) c->p[i] = NB_TVAR_NONE;
    fill(c->target, 4096);
    return c;
}

static void add_param(gcase *c, int slot, const char *name, int nd, const int64_t *shape, float bound) {
    NB_EXPECT_OK(nb_tape_param(c->t, name, nd, shape, &c->p[slot]));
    NB_EXPECT_OK(nb_tape_param_init_uniform(c->t, c->p[slot], bound, (uint64_t)slot + 7));
}

static void free_case(gcase *c) {
    for (int i = 0; i < c->nin; i++) free(c->in[i]);
    nb_tape_free(c->t);
    free(c);
}

/* ---- gradient checks, op by op -------------------------------------------------------------- */

static void test_grad_linear(void) {
    for (int bias = 0; bias < 2; bias++) {
        gcase *c = new_case(OP_LINEAR);
        setup_in(c, 0, 2, (int64_t[]){3, 5}, 1);
        add_param(c, 0, "w", 2, (int64_t[]){4, 5}, 0.5f);
        if (bias) add_param(c, 1, "b", 1, (int64_t[]){4}, 0.5f);
        NB_EXPECT(grad_check(c, bias ? "linear+bias" : "linear") == 0);
        free_case(c);
    }
}

static void test_grad_conv2d(void) {
    const int cfg[][3] = {{3, 1, 1}, {3, 2, 1}, {3, 1, 0}, {3, 2, 0}, {1, 1, 0}, {1, 2, 0}, {1, 1, 1}};
    for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
        gcase *c = new_case(OP_CONV);
        int K = cfg[k][0];
        c->ia = cfg[k][1], c->ib = cfg[k][2];
        setup_in(c, 0, 4, (int64_t[]){2, 3, 5, 4}, 1);
        add_param(c, 0, "w", 4, (int64_t[]){4, 3, K, K}, 0.4f);
        add_param(c, 1, "b", 1, (int64_t[]){4}, 0.4f);
        char name[64];
        snprintf(name, sizeof name, "conv K=%d stride=%d pad=%d", K, c->ia, c->ib);
        NB_EXPECT(grad_check(c, name) == 0);
        free_case(c);
    }
}

static void test_grad_group_norm(void) {
    for (int affine = 0; affine < 2; affine++) {
        gcase *c = new_case(OP_GN);
        c->ia = 2;
        setup_in(c, 0, 4, (int64_t[]){2, 4, 3, 2}, 1);
        if (affine) {
            add_param(c, 0, "gamma", 1, (int64_t[]){4}, 1.0f);
            add_param(c, 1, "beta", 1, (int64_t[]){4}, 1.0f);
        }
        NB_EXPECT(grad_check(c, affine ? "group_norm affine" : "group_norm") == 0);
        free_case(c);
    }
    gcase *c = new_case(OP_GN); /* [N,C] features, 3 groups of 2 */
    c->ia = 3;
    setup_in(c, 0, 2, (int64_t[]){3, 6}, 1);
    add_param(c, 0, "gamma", 1, (int64_t[]){6}, 1.0f);
    NB_EXPECT(grad_check(c, "group_norm [N,C]") == 0);
    free_case(c);
}

/* the fused group norm + SiLU: finite differences, and equal to group_norm then silu */
static void test_group_norm_silu(void) {
    for (int affine = 0; affine < 2; affine++) {
        gcase *c = new_case(OP_GNS);
        c->ia = 3;
        setup_in(c, 0, 4, (int64_t[]){2, 6, 3, 2}, 1);
        for (int i = 0; i < 72; i++) c->in[0][i] *= 2.0f;
        if (affine) {
            add_param(c, 0, "gamma", 1, (int64_t[]){6}, 1.5f);
            add_param(c, 1, "beta", 1, (int64_t[]){6}, 1.0f);
        }
        NB_EXPECT(grad_check(c, affine ? "group_norm_silu affine" : "group_norm_silu") == 0);
        free_case(c);
    }
    /* fused vs composed: forward values, dx, dgamma, dbeta */
    const int64_t shape[4] = {3, 6, 5, 7};
    const int64_t n = 3 * 6 * 5 * 7;
    float *x = malloc(sizeof(float) * n), *dy = malloc(sizeof(float) * n);
    fill(x, n);
    fill(dy, n);
    float *out[2], *dx[2], *pg[2];
    for (int fused = 0; fused < 2; fused++) {
        nb_tape *t;
        nb_tvar gm, bt, xv, tg, y, loss;
        NB_REQUIRE_OK(nb_tape_create(&t));
        NB_REQUIRE_OK(nb_tape_param(t, "gamma", 1, (int64_t[]){6}, &gm));
        NB_REQUIRE_OK(nb_tape_param(t, "beta", 1, (int64_t[]){6}, &bt));
        NB_REQUIRE_OK(nb_tape_param_init_uniform(t, gm, 1.5f, 1));
        NB_REQUIRE_OK(nb_tape_param_init_uniform(t, bt, 1.0f, 2));
        NB_REQUIRE_OK(nb_tape_input(t, 4, shape, x, 1, &xv));
        NB_REQUIRE_OK(nb_tape_input(t, 4, shape, dy, 0, &tg));
        if (fused) {
            NB_REQUIRE_OK(nb_tape_group_norm_silu(t, xv, 3, gm, bt, 1e-5f, &y));
        } else {
            nb_tvar z;
            NB_REQUIRE_OK(nb_tape_group_norm(t, xv, 3, gm, bt, 1e-5f, &z));
            NB_REQUIRE_OK(nb_tape_silu(t, z, &y));
        }
        NB_REQUIRE_OK(nb_tape_mse(t, y, tg, &loss));
        NB_REQUIRE_OK(nb_tape_backward(t, loss));
        out[fused] = malloc(sizeof(float) * n);
        dx[fused] = malloc(sizeof(float) * n);
        NB_EXPECT_OK(nb_tape_read(t, y, out[fused], n));
        NB_EXPECT_OK(nb_tape_read_grad(t, xv, dx[fused], n));
        pg[fused] = malloc(sizeof(float) * 12);
        NB_EXPECT_OK(nb_tape_read_grads(t, pg[fused], 12));
        nb_tape_free(t);
    }
    double e_y = 0, e_dx = 0, e_p = 0, m_dx = 1e-12, m_p = 1e-12;
    for (int64_t i = 0; i < n; i++) {
        e_y = fmax(e_y, fabs(out[0][i] - out[1][i]));
        e_dx = fmax(e_dx, fabs(dx[0][i] - dx[1][i]));
        m_dx = fmax(m_dx, fabs(dx[0][i]));
    }
    for (int i = 0; i < 12; i++) {
        e_p = fmax(e_p, fabs(pg[0][i] - pg[1][i]));
        m_p = fmax(m_p, fabs(pg[0][i]));
    }
    NB_EXPECT(e_y < 1e-5);
    NB_EXPECT(m_dx > 1e-4 && m_p > 1e-3); /* the comparison is not of zeros */
    NB_EXPECT(e_dx < 1e-5 * m_dx + 1e-7);
    NB_EXPECT(e_p < 1e-5 * m_p);
    for (int k = 0; k < 2; k++) free(out[k]), free(dx[k]), free(pg[k]);
    free(x);
    free(dy);
}

static void test_grad_elementwise(void) {
    gcase *c = new_case(OP_SILU);
    setup_in(c, 0, 3, (int64_t[]){2, 3, 4}, 1);
    for (int i = 0; i < 24; i++) c->in[0][i] *= 3.0f;
    NB_EXPECT(grad_check(c, "silu") == 0);
    free_case(c);
    c = new_case(OP_ADD);
    setup_in(c, 0, 4, (int64_t[]){2, 3, 2, 2}, 1);
    setup_in(c, 1, 4, (int64_t[]){2, 3, 2, 2}, 1);
    NB_EXPECT(grad_check(c, "add") == 0);
    free_case(c);
    c = new_case(OP_ADDC);
    setup_in(c, 0, 4, (int64_t[]){2, 3, 2, 3}, 1);
    setup_in(c, 1, 2, (int64_t[]){2, 3}, 1);
    NB_EXPECT(grad_check(c, "add_channel") == 0);
    free_case(c);
    c = new_case(OP_CONCAT);
    setup_in(c, 0, 4, (int64_t[]){2, 2, 3, 3}, 1);
    setup_in(c, 1, 4, (int64_t[]){2, 3, 3, 3}, 1);
    NB_EXPECT(grad_check(c, "concat") == 0);
    free_case(c);
    c = new_case(OP_UP);
    setup_in(c, 0, 4, (int64_t[]){2, 2, 3, 2}, 1);
    NB_EXPECT(grad_check(c, "upsample2x") == 0);
    free_case(c);
    c = new_case(OP_POOL);
    setup_in(c, 0, 4, (int64_t[]){2, 2, 4, 6}, 1);
    NB_EXPECT(grad_check(c, "avgpool2x") == 0);
    free_case(c);
    c = new_case(OP_MSE);
    setup_in(c, 0, 2, (int64_t[]){3, 4}, 1);
    setup_in(c, 1, 2, (int64_t[]){3, 4}, 1);
    NB_EXPECT(grad_check(c, "mse") == 0);
    free_case(c);
}

static void test_grad_attention(void) {
    gcase *c = new_case(OP_ATTN);
    setup_in(c, 0, 4, (int64_t[]){2, 2, 3, 4}, 1);
    setup_in(c, 1, 4, (int64_t[]){2, 2, 5, 4}, 1);
    setup_in(c, 2, 4, (int64_t[]){2, 2, 5, 4}, 1);
    for (int i = 0; i < 48; i++) c->in[0][i] *= 2.0f;
    NB_EXPECT(grad_check(c, "attention") == 0);
    free_case(c);
}

/* ---- forward against independent references ------------------------------------------------- */

static void test_forward_conv_linear(void) {
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    nb_tvar w, b, lw, lb, x, y, xl, yl;
    int64_t N = 2, C = 3, H = 6, W = 5, O = 4, K = 3, S = 2, P = 1;
    NB_REQUIRE_OK(nb_tape_param(t, "w", 4, (int64_t[]){O, C, K, K}, &w));
    NB_REQUIRE_OK(nb_tape_param(t, "b", 1, (int64_t[]){O}, &b));
    NB_REQUIRE_OK(nb_tape_param(t, "lw", 2, (int64_t[]){3, 7}, &lw));
    NB_REQUIRE_OK(nb_tape_param(t, "lb", 1, (int64_t[]){3}, &lb));
    nb_tape_param_init_uniform(t, w, 1, 1);
    nb_tape_param_init_uniform(t, b, 1, 2);
    nb_tape_param_init_uniform(t, lw, 1, 3);
    nb_tape_param_init_uniform(t, lb, 1, 4);
    float xd[2 * 3 * 6 * 5], xld[5 * 7];
    fill(xd, N * C * H * W);
    fill(xld, 35);
    NB_REQUIRE_OK(nb_tape_input(t, 4, (int64_t[]){N, C, H, W}, xd, 0, &x));
    NB_REQUIRE_OK(nb_tape_conv2d(t, x, w, b, (int)S, (int)P, &y));
    NB_REQUIRE_OK(nb_tape_input(t, 2, (int64_t[]){5, 7}, xld, 0, &xl));
    NB_REQUIRE_OK(nb_tape_linear(t, xl, lw, lb, &yl));
    int nd;
    int64_t sh[4];
    NB_EXPECT_OK(nb_tape_shape(t, y, &nd, sh));
    int64_t OH = (H + 2 * P - K) / S + 1, OW = (W + 2 * P - K) / S + 1;
    NB_EXPECT(nd == 4 && sh[0] == N && sh[1] == O && sh[2] == OH && sh[3] == OW);
    float *yd, *wd, *bd, *lwd, *lbd, *yld;
    nb_tape_data(t, y, &yd, NULL);
    nb_tape_data(t, w, &wd, NULL);
    nb_tape_data(t, b, &bd, NULL);
    nb_tape_data(t, lw, &lwd, NULL);
    nb_tape_data(t, lb, &lbd, NULL);
    nb_tape_data(t, yl, &yld, NULL);
    double worst = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t i = 0; i < OH; i++)
                for (int64_t j = 0; j < OW; j++) {
                    double r = bd[o];
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t ki = 0; ki < K; ki++)
                            for (int64_t kj = 0; kj < K; kj++) {
                                int64_t ii = i * S - P + ki, jj = j * S - P + kj;
                                if (ii >= 0 && ii < H && jj >= 0 && jj < W)
                                    r += (double)wd[((o * C + c) * K + ki) * K + kj] *
                                         xd[((n * C + c) * H + ii) * W + jj];
                            }
                    worst = fmax(worst, fabs(r - yd[((n * O + o) * OH + i) * OW + j]));
                }
    NB_EXPECT(worst < 1e-5);
    worst = 0;
    for (int n = 0; n < 5; n++)
        for (int o = 0; o < 3; o++) {
            double r = lbd[o];
            for (int f = 0; f < 7; f++) r += (double)xld[n * 7 + f] * lwd[o * 7 + f];
            worst = fmax(worst, fabs(r - yld[n * 3 + o]));
        }
    NB_EXPECT(worst < 1e-5);
    nb_tape_free(t);
}

static void test_forward_norm_attention(void) {
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    float xd[2 * 6 * 3 * 3], qd[1 * 2 * 3 * 4], kd[1 * 2 * 5 * 4], vd[1 * 2 * 5 * 4];
    fill(xd, 108);
    for (int i = 0; i < 108; i++) xd[i] = 3.0f * xd[i] + 1.0f;
    fill(qd, 24), fill(kd, 40), fill(vd, 40);
    nb_tvar x, y, q, k, v, o;
    NB_REQUIRE_OK(nb_tape_input(t, 4, (int64_t[]){2, 6, 3, 3}, xd, 0, &x));
    NB_REQUIRE_OK(nb_tape_group_norm(t, x, 3, NB_TVAR_NONE, NB_TVAR_NONE, 1e-5f, &y));
    float *yd;
    nb_tape_data(t, y, &yd, NULL);
    for (int g = 0; g < 6; g++) { /* each (n, group) block: 2 channels × 9 = 18 values */
        double m = 0, var = 0;
        for (int i = 0; i < 18; i++) m += yd[g * 18 + i];
        m /= 18;
        for (int i = 0; i < 18; i++) var += (yd[g * 18 + i] - m) * (yd[g * 18 + i] - m);
        var /= 18;
        NB_EXPECT_NEAR(m, 0.0, 1e-5);
        NB_EXPECT_NEAR(var, 1.0, 1e-3);
    }
    NB_REQUIRE_OK(nb_tape_input(t, 4, (int64_t[]){1, 2, 3, 4}, qd, 0, &q));
    NB_REQUIRE_OK(nb_tape_input(t, 4, (int64_t[]){1, 2, 5, 4}, kd, 0, &k));
    NB_REQUIRE_OK(nb_tape_input(t, 4, (int64_t[]){1, 2, 5, 4}, vd, 0, &v));
    NB_REQUIRE_OK(nb_tape_attention(t, q, k, v, &o));
    float *od;
    nb_tape_data(t, o, &od, NULL);
    double worst = 0;
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 3; i++) {
            double s[5], mx = -1e30, sum = 0;
            for (int j = 0; j < 5; j++) {
                s[j] = 0;
                for (int e = 0; e < 4; e++) s[j] += (double)qd[(h * 3 + i) * 4 + e] * kd[(h * 5 + j) * 4 + e];
                s[j] /= 2.0; /* sqrt(d = 4) */
                mx = fmax(mx, s[j]);
            }
            for (int j = 0; j < 5; j++) sum += (s[j] = exp(s[j] - mx));
            for (int e = 0; e < 4; e++) {
                double r = 0;
                for (int j = 0; j < 5; j++) r += s[j] / sum * vd[(h * 5 + j) * 4 + e];
                worst = fmax(worst, fabs(r - od[(h * 3 + i) * 4 + e]));
            }
        }
    NB_EXPECT(worst < 1e-5);
    nb_tape_free(t);
}

static void test_forward_small_ops(void) {
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}; /* [1,2,2,2] */
    float cc[2] = {10, 20};
    nb_tvar x, c, y, u, p, cat, s, e;
    NB_REQUIRE_OK(nb_tape_input(t, 4, (int64_t[]){1, 2, 2, 2}, a, 0, &x));
    NB_REQUIRE_OK(nb_tape_input(t, 2, (int64_t[]){1, 2}, cc, 0, &c));
    NB_REQUIRE_OK(nb_tape_add_channel(t, x, c, &y));
    NB_REQUIRE_OK(nb_tape_upsample2x(t, x, &u));
    NB_REQUIRE_OK(nb_tape_avgpool2x(t, x, &p));
    NB_REQUIRE_OK(nb_tape_concat(t, x, y, &cat));
    NB_REQUIRE_OK(nb_tape_silu(t, x, &s));
    float *yd, *ud, *pd, *cd, *sd, *ed;
    nb_tape_data(t, y, &yd, NULL);
    nb_tape_data(t, u, &ud, NULL);
    nb_tape_data(t, p, &pd, NULL);
    nb_tape_data(t, cat, &cd, NULL);
    nb_tape_data(t, s, &sd, NULL);
    NB_EXPECT(yd[0] == 11 && yd[3] == 14 && yd[4] == 25 && yd[7] == 28);
    /* u [1,2,4,4]: row 0 of channel 0 = 1 1 2 2, row 2 = 3 3 4 4 */
    NB_EXPECT(ud[0] == 1 && ud[1] == 1 && ud[2] == 2 && ud[3] == 2 && ud[8] == 3 && ud[15] == 4);
    NB_EXPECT(ud[16] == 5 && ud[31] == 8);
    NB_EXPECT(pd[0] == 2.5f && pd[1] == 6.5f);
    NB_EXPECT(cd[0] == 1 && cd[7] == 8 && cd[8] == 11 && cd[15] == 28);
    NB_EXPECT_NEAR(sd[0], 0.7310585786, 1e-6);
    float ts[3] = {0, 10, 999};
    NB_REQUIRE_OK(nb_tape_timestep_embedding(t, 3, ts, 8, 10000.0f, &e));
    nb_tape_data(t, e, &ed, NULL);
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++) {
            double f = exp(-log(10000.0) * k / 4.0);
            NB_EXPECT_NEAR(ed[i * 8 + k], cos(ts[i] * f), 1e-5);
            NB_EXPECT_NEAR(ed[i * 8 + 4 + k], sin(ts[i] * f), 1e-5);
        }
    NB_EXPECT(ed[0] == 1.0f && ed[4] == 0.0f);
    nb_tape_free(t);
}

/* ---- composed models ------------------------------------------------------------------------ */

/* conv 3x3 (3->4) -> group norm (2 groups, affine) -> SiLU -> conv 3x3 stride 2 (4->2) -> MSE */
static nb_status build_small_model(gcase *c, nb_tvar *loss) {
    nb_status s = add_inputs(c);
    if (s) return s;
    nb_tape *t = c->t;
    nb_tvar h, g, a, y;
    if ((s = nb_tape_conv2d(t, c->v[0], c->p[0], c->p[1], 1, 1, &h))) return s;
    if ((s = nb_tape_group_norm(t, h, 2, c->p[2], c->p[3], 1e-5f, &g))) return s;
    if ((s = nb_tape_silu(t, g, &a))) return s;
    if ((s = nb_tape_conv2d(t, a, c->p[4], c->p[5], 2, 1, &y))) return s;
    return mse_to_target(c, y, loss);
}

static gcase *small_model(int hw) {
    gcase *c = new_case(-1);
    c->build = build_small_model;
    setup_in(c, 0, 4, (int64_t[]){2, 3, hw, hw}, 1);
    add_param(c, 0, "conv1.w", 4, (int64_t[]){4, 3, 3, 3}, 0.3f);
    add_param(c, 1, "conv1.b", 1, (int64_t[]){4}, 0.3f);
    add_param(c, 2, "norm.gamma", 1, (int64_t[]){4}, 1.0f);
    add_param(c, 3, "norm.beta", 1, (int64_t[]){4}, 0.5f);
    add_param(c, 4, "conv2.w", 4, (int64_t[]){2, 4, 3, 3}, 0.3f);
    add_param(c, 5, "conv2.b", 1, (int64_t[]){2}, 0.3f);
    return c;
}

static void test_grad_small_model(void) {
    gcase *c = small_model(6);
    int64_t np;
    float *p;
    NB_EXPECT_OK(nb_tape_params(c->t, &p, &np));
    NB_EXPECT(np == 108 + 4 + 4 + 4 + 72 + 2);
    int64_t off, cnt;
    NB_EXPECT_OK(nb_tape_param_info(c->t, c->p[4], &off, &cnt));
    NB_EXPECT(off == 120 && cnt == 72);
    NB_EXPECT(grad_check(c, "conv-gn-silu-conv-mse") == 0);
    free_case(c);
}

/* UNet-like block: timestep embedding -> linear -> SiLU -> per-channel add; avg pool -> 1x1 conv
 * -> upsample; concat skip; 3x3 conv; residual add; attention over 2 heads of [T=4, d=4]. */
static nb_status build_unet_block(gcase *c, nb_tvar *loss) {
    nb_status s = add_inputs(c);
    if (s) return s;
    nb_tape *t = c->t;
    const float ts[2] = {3.0f, 250.0f};
    nb_tvar e, el, ea, h, d, d1, u, cat, y, r, o;
    if ((s = nb_tape_timestep_embedding(t, 2, ts, 8, 10000.0f, &e))) return s;
    if ((s = nb_tape_linear(t, e, c->p[0], c->p[1], &el))) return s;
    if ((s = nb_tape_silu(t, el, &ea))) return s;
    if ((s = nb_tape_add_channel(t, c->v[0], ea, &h))) return s;       /* [2,2,4,4] */
    if ((s = nb_tape_avgpool2x(t, h, &d))) return s;                   /* [2,2,2,2] */
    if ((s = nb_tape_conv2d(t, d, c->p[2], NB_TVAR_NONE, 1, 0, &d1))) return s; /* [2,3,2,2] */
    if ((s = nb_tape_upsample2x(t, d1, &u))) return s;                 /* [2,3,4,4] */
    if ((s = nb_tape_concat(t, h, u, &cat))) return s;                 /* [2,5,4,4] */
    if ((s = nb_tape_conv2d(t, cat, c->p[3], c->p[4], 1, 1, &y))) return s; /* [2,2,4,4] */
    if ((s = nb_tape_add(t, y, c->v[0], &r))) return s;
    /* [2,2,4,4] read as [N=2, heads=2, T=4, d=4]: attention over rows */
    if ((s = nb_tape_attention(t, r, r, r, &o))) return s;
    return mse_to_target(c, o, loss);
}

static void test_grad_unet_block(void) {
    gcase *c = new_case(-1);
    c->build = build_unet_block;
    setup_in(c, 0, 4, (int64_t[]){2, 2, 4, 4}, 1);
    add_param(c, 0, "temb.w", 2, (int64_t[]){2, 8}, 0.5f);
    add_param(c, 1, "temb.b", 1, (int64_t[]){2}, 0.5f);
    add_param(c, 2, "down.w", 4, (int64_t[]){3, 2, 1, 1}, 0.5f);
    add_param(c, 3, "out.w", 4, (int64_t[]){2, 5, 3, 3}, 0.3f);
    add_param(c, 4, "out.b", 1, (int64_t[]){2}, 0.3f);
    NB_EXPECT(grad_check(c, "unet block") == 0);
    free_case(c);
}

/* UNet attention block: group norm -> 1x1 conv to q,k,v -> slice channels -> [N,heads,d,HW] ->
 * transpose -> attention -> transpose back -> reshape [N,C,H,W] -> 1x1 conv -> residual add. */
static nb_status build_attn_block(gcase *c, nb_tvar *loss) {
    nb_status s = add_inputs(c);
    if (s) return s;
    nb_tape *t = c->t;
    const int64_t N = 2, C = 4, H = 2, W = 3, heads = 2, d = C / heads;
    nb_tvar g, qkv, part[3], o, ot, of, pr, r;
    if ((s = nb_tape_group_norm(t, c->v[0], 2, c->p[0], c->p[1], 1e-5f, &g))) return s;
    if ((s = nb_tape_conv2d(t, g, c->p[2], c->p[3], 1, 0, &qkv))) return s; /* [N,3C,H,W] */
    for (int i = 0; i < 3; i++) {
        nb_tvar sl, rs;
        if ((s = nb_tape_slice_channels(t, qkv, i * C, C, &sl))) return s;
        if ((s = nb_tape_reshape(t, sl, 4, (int64_t[]){N, heads, d, H * W}, &rs))) return s;
        if ((s = nb_tape_transpose(t, rs, &part[i]))) return s; /* [N,heads,HW,d] */
    }
    if ((s = nb_tape_attention(t, part[0], part[1], part[2], &o))) return s;
    if ((s = nb_tape_transpose(t, o, &ot))) return s; /* [N,heads,d,HW] */
    if ((s = nb_tape_reshape(t, ot, 4, (int64_t[]){N, C, H, W}, &of))) return s;
    if ((s = nb_tape_conv2d(t, of, c->p[4], c->p[5], 1, 0, &pr))) return s;
    if ((s = nb_tape_add(t, pr, c->v[0], &r))) return s;
    return mse_to_target(c, r, loss);
}

static void test_grad_attention_block(void) {
    gcase *c = new_case(-1);
    c->build = build_attn_block;
    setup_in(c, 0, 4, (int64_t[]){2, 4, 2, 3}, 1);
    add_param(c, 0, "norm.gamma", 1, (int64_t[]){4}, 1.0f);
    add_param(c, 1, "norm.beta", 1, (int64_t[]){4}, 0.5f);
    add_param(c, 2, "qkv.w", 4, (int64_t[]){12, 4, 1, 1}, 0.8f);
    add_param(c, 3, "qkv.b", 1, (int64_t[]){12}, 0.3f);
    add_param(c, 4, "proj.w", 4, (int64_t[]){4, 4, 1, 1}, 0.5f);
    add_param(c, 5, "proj.b", 1, (int64_t[]){4}, 0.3f);
    NB_EXPECT(grad_check(c, "attention block") == 0);
    free_case(c);
}

static void test_layout_ops(void) {
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    float a[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    nb_tvar x, tr, sl, rs;
    NB_REQUIRE_OK(nb_tape_input(t, 3, (int64_t[]){1, 3, 4}, a, 0, &x));
    NB_REQUIRE_OK(nb_tape_transpose(t, x, &tr)); /* [1,4,3] */
    NB_REQUIRE_OK(nb_tape_slice_channels(t, x, 1, 2, &sl)); /* rows 1, 2 */
    NB_REQUIRE_OK(nb_tape_reshape(t, x, 2, (int64_t[]){6, 2}, &rs));
    float *td, *sd;
    nb_tape_data(t, tr, &td, NULL);
    nb_tape_data(t, sl, &sd, NULL);
    NB_EXPECT(td[0] == 0 && td[1] == 4 && td[2] == 8 && td[3] == 1 && td[11] == 11);
    NB_EXPECT(sd[0] == 4 && sd[7] == 11);
    int nd;
    int64_t sh[4];
    NB_EXPECT_OK(nb_tape_shape(t, rs, &nd, sh));
    NB_EXPECT(nd == 2 && sh[0] == 6 && sh[1] == 2);
    NB_EXPECT_ERR(nb_tape_reshape(t, x, 2, (int64_t[]){5, 2}, &rs), NB_ERR_SHAPE,
                  "has 12 elements, the new shape 10");
    NB_EXPECT_ERR(nb_tape_slice_channels(t, x, 2, 2, &sl), NB_ERR_SHAPE, "channels [2, 4) are outside");
    nb_tvar v1;
    NB_REQUIRE_OK(nb_tape_input(t, 1, (int64_t[]){3}, a, 0, &v1));
    NB_EXPECT_ERR(nb_tape_transpose(t, v1, &tr), NB_ERR_SHAPE, "at least 2 dims");
    nb_tape_free(t);
}

/* ---- steady state: no host allocation after the first steps --------------------------------- */

static void test_steady_state_no_alloc(void) {
    gcase *c = small_model(8);
    nb_test_count_allocs_begin();
    float first = 0, last = 0;
    int64_t allocs_late = 0, allocs_early = 0, tape_allocs_after2 = 0;
    for (int step = 0; step < 8; step++) {
        if (step == 2) {
            allocs_early = nb_test_allocs; /* the first step carves the arena: the hooks see it */
            nb_tape_stats st;
            nb_tape_get_stats(c->t, &st);
            tape_allocs_after2 = st.host_allocs;
            nb_test_allocs = 0;
        }
        nb_tvar loss;
        NB_EXPECT_OK(nb_tape_reset(c->t));
        NB_EXPECT_OK(nb_tape_zero_grad(c->t));
        NB_EXPECT_OK(c->build(c, &loss));
        NB_EXPECT_OK(nb_tape_backward(c->t, loss));
        float *l, *p, *g;
        int64_t np;
        nb_tape_data(c->t, loss, &l, NULL);
        if (step == 0) first = l[0];
        last = l[0];
        nb_tape_params(c->t, &p, &np);
        nb_tape_grads(c->t, &g, &np);
        for (int64_t i = 0; i < np; i++) p[i] -= 0.5f * g[i]; /* SGD */
    }
    allocs_late = nb_test_allocs;
    nb_test_count_allocs_end();
    nb_tape_stats st;
    NB_EXPECT_OK(nb_tape_get_stats(c->t, &st));
    NB_EXPECT(allocs_early > 0);
    NB_EXPECT(allocs_late == 0);
    NB_EXPECT(st.host_allocs == tape_allocs_after2);
    NB_EXPECT(st.arena_capacity >= st.arena_high_water);
    NB_EXPECT(last < first); /* and it trains */
    if (allocs_late) fprintf(stderr, "  %lld allocations in steps 2..7\n", (long long)allocs_late);
    free_case(c);
}

/* An arena that outgrows its first block coalesces into one block at the next reset. */
static void test_arena_growth(void) {
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    static float big[300000];
    for (int step = 0; step < 4; step++) {
        NB_EXPECT_OK(nb_tape_reset(t));
        nb_tvar v;
        for (int i = 0; i < 8; i++) /* 8 × 1.2 MB: several blocks on the first step */
            NB_EXPECT_OK(nb_tape_input(t, 1, (int64_t[]){300000}, big, 0, &v));
        nb_tape_stats st;
        nb_tape_get_stats(t, &st);
        static int64_t allocs_step2;
        if (step == 2) allocs_step2 = st.host_allocs;
        if (step == 3) NB_EXPECT(st.host_allocs == allocs_step2);
        NB_EXPECT(st.arena_used >= 8 * 1200000);
    }
    nb_tape_free(t);
}

/* Training with nn_optim's Adam over the tape's flat buffers (wrapped, not copied): the
 * optimizer state is two more contiguous buffers, and the loop still allocates nothing. */
static void test_train_adam(void) {
    gcase *c = small_model(8);
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    float *p, *g;
    int64_t np;
    nb_tape_params(c->t, &p, &np);
    nb_tape_grads(c->t, &g, &np);
    nb_tensor *tp, *tg;
    NB_REQUIRE_OK(nb_tensor_wrap(cpu, NB_F32, 1, &np, NULL, p, &tp));
    NB_REQUIRE_OK(nb_tensor_wrap(cpu, NB_F32, 1, &np, NULL, g, &tg));
    nb_adam_config ac = nb_adam_config_default();
    ac.lr = 2e-2f;
    nb_adam *opt;
    NB_REQUIRE_OK(nb_adam_create(cpu, np, &ac, &opt));
    float first = 0, last = 0;
    for (int step = 0; step < 40; step++) {
        if (step == 2) nb_test_count_allocs_begin();
        nb_tvar loss;
        float *l;
        NB_EXPECT_OK(nb_tape_reset(c->t));
        NB_EXPECT_OK(c->build(c, &loss));
        NB_EXPECT_OK(nb_tape_backward(c->t, loss));
        NB_EXPECT_OK(nb_adam_step(opt, tp, tg, 1)); /* 1: zeroes the grads */
        nb_tape_data(c->t, loss, &l, NULL);
        if (step == 0) first = l[0];
        last = l[0];
    }
    nb_test_count_allocs_end();
    NB_EXPECT(nb_test_allocs == 0);
    NB_EXPECT(last < 0.5f * first);
    nb_adam_destroy(opt);
    nb_tensor_free(tp);
    nb_tensor_free(tg);
    nb_device_close(cpu);
    free_case(c);
}

/* ---- gradients accumulate; inputs without requires_grad get none ---------------------------- */

static void test_accumulate(void) {
    gcase *c = new_case(OP_LINEAR);
    setup_in(c, 0, 2, (int64_t[]){3, 5}, 0);
    add_param(c, 0, "w", 2, (int64_t[]){4, 5}, 0.5f);
    nb_tvar loss;
    float *g, g1[20];
    int64_t np;
    NB_REQUIRE_OK(nb_tape_reset(c->t));
    NB_REQUIRE_OK(c->build(c, &loss));
    NB_REQUIRE_OK(nb_tape_backward(c->t, loss));
    nb_tape_grads(c->t, &g, &np);
    memcpy(g1, g, sizeof g1);
    NB_REQUIRE_OK(nb_tape_reset(c->t));
    NB_REQUIRE_OK(c->build(c, &loss));
    NB_REQUIRE_OK(nb_tape_backward(c->t, loss));
    for (int i = 0; i < 20; i++) NB_EXPECT_NEAR(g[i], 2 * g1[i], 1e-6);
    float *gx;
    NB_EXPECT_OK(nb_tape_grad(c->t, c->v[0], &gx, NULL));
    NB_EXPECT(gx == NULL);
    NB_EXPECT_OK(nb_tape_zero_grad(c->t));
    NB_EXPECT(g[0] == 0.0f && g[19] == 0.0f);
    free_case(c);
}

/* ---- host read / write API, device, precision (CPU tape) ------------------------------------ */

static void test_read_write_api(void) {
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create_on(NULL, &t));
    struct nb_device *d = nb_tape_device(t);
    NB_EXPECT(d != NULL && nb_device_get_kind(d) == NB_DEVICE_CPU);
    NB_EXPECT(nb_tape_device(t) == d); /* opened once */
    NB_EXPECT(nb_tape_get_precision(t) == NB_TAPE_FP32);
    NB_EXPECT_OK(nb_tape_set_precision(t, NB_TAPE_BF16));
    NB_EXPECT(nb_tape_get_precision(t) == NB_TAPE_BF16);
    NB_EXPECT_ERR(nb_tape_set_precision(t, (nb_tape_precision)7), NB_ERR_INVALID_ARG,
                  "precision 7 is not NB_TAPE_FP32");
    NB_EXPECT_ERR(nb_tape_set_precision(t, (nb_tape_precision)-1), NB_ERR_INVALID_ARG, "precision -1");
    NB_EXPECT(nb_tape_get_precision(t) == NB_TAPE_BF16); /* unchanged by the bad calls */
    nb_tvar w, b, x, y, loss;
    NB_REQUIRE_OK(nb_tape_param(t, "w", 2, (int64_t[]){2, 3}, &w));
    NB_REQUIRE_OK(nb_tape_param(t, "b", 1, (int64_t[]){2}, &b));
    float p[8] = {1, 2, 3, 4, 5, 6, 7, 8}, r[8];
    NB_EXPECT_OK(nb_tape_write_params(t, p, 8));
    NB_EXPECT_ERR(nb_tape_write_params(t, p, 7), NB_ERR_SHAPE, "count 7 does not match the 8 floats");
    NB_EXPECT_ERR(nb_tape_read_params(t, r, 9), NB_ERR_SHAPE, "count 9");
    NB_EXPECT_ERR(nb_tape_read_params(t, NULL, 8), NB_ERR_INVALID_ARG, "host pointer is NULL");
    NB_EXPECT_OK(nb_tape_read_params(t, r, 8));
    NB_EXPECT(memcmp(p, r, sizeof p) == 0);
    float xd[3] = {1, -1, 2};
    NB_REQUIRE_OK(nb_tape_input(t, 2, (int64_t[]){1, 3}, xd, 1, &x));
    NB_REQUIRE_OK(nb_tape_linear(t, x, w, b, &y));
    float yv[2];
    NB_EXPECT_ERR(nb_tape_read(t, y, yv, 3), NB_ERR_SHAPE, "count 3 does not match the 2 floats");
    NB_EXPECT_ERR(nb_tape_read(t, 999, yv, 2), NB_ERR_INVALID_ARG, "not a live value");
    NB_EXPECT_OK(nb_tape_read(t, y, yv, 2));
    NB_EXPECT(yv[0] == 1 - 2 + 6 + 7 && yv[1] == 4 - 5 + 12 + 8);
    float gx[3] = {9, 9, 9};
    NB_EXPECT_OK(nb_tape_read_grad(t, x, gx, 3)); /* before backward: zeros */
    NB_EXPECT(gx[0] == 0 && gx[1] == 0 && gx[2] == 0);
    nb_tvar tg;
    float tgd[2] = {0, 0};
    NB_REQUIRE_OK(nb_tape_input(t, 2, (int64_t[]){1, 2}, tgd, 0, &tg));
    NB_REQUIRE_OK(nb_tape_mse(t, y, tg, &loss));
    NB_REQUIRE_OK(nb_tape_backward(t, loss));
    NB_EXPECT_OK(nb_tape_read_grad(t, x, gx, 3));
    /* dL/dy = y (mean over 2 of squares), dL/dx = W^T y */
    NB_EXPECT_NEAR(gx[0], 1 * yv[0] + 4 * yv[1], 1e-4);
    NB_EXPECT_NEAR(gx[2], 3 * yv[0] + 6 * yv[1], 1e-4);
    float g[8], *gp;
    NB_EXPECT_OK(nb_tape_read_grads(t, g, 8));
    NB_EXPECT_OK(nb_tape_grads(t, &gp, NULL));
    NB_EXPECT(memcmp(g, gp, sizeof g) == 0);
    NB_EXPECT_ERR(nb_tape_read_grads(t, g, 0), NB_ERR_SHAPE, "count 0");
    float tv[2];
    NB_EXPECT_OK(nb_tape_read_grad(t, tg, tv, 2)); /* no gradient wanted: zeros */
    NB_EXPECT(tv[0] == 0 && tv[1] == 0);
    nb_tape_stats st;
    NB_EXPECT_OK(nb_tape_get_stats(t, &st));
    NB_EXPECT(st.device_allocs == 0);
    nb_tape_free(t);
    /* a CPU device handle given explicitly: a CPU tape holding a reference */
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    NB_REQUIRE_OK(nb_tape_create_on(cpu, &t));
    NB_EXPECT(nb_tape_device(t) == cpu);
    nb_tape_free(t);
    NB_EXPECT(nb_device_get_kind(cpu) == NB_DEVICE_CPU); /* still open: our reference */
    nb_device_close(cpu);
    NB_EXPECT_ERR(nb_tape_create_on(NULL, NULL), NB_ERR_INVALID_ARG, "out is NULL");
    NB_EXPECT(nb_tape_device(NULL) == NULL);
}

/* ---- bad input ------------------------------------------------------------------------------ */

static void test_errors(void) {
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    nb_tvar w, gm, p, a, b, x, y, q, k, loss;
    NB_REQUIRE_OK(nb_tape_param(t, "w", 4, (int64_t[]){4, 3, 3, 3}, &w));
    NB_REQUIRE_OK(nb_tape_param(t, "gamma", 1, (int64_t[]){5}, &gm));
    NB_EXPECT_ERR(nb_tape_param(t, "w", 1, (int64_t[]){2}, &p), NB_ERR_INVALID_ARG, "already registered");
    NB_EXPECT_ERR(nb_tape_param(t, "z", 1, (int64_t[]){0}, &p), NB_ERR_SHAPE, "size 0");
    NB_EXPECT_ERR(nb_tape_param(t, "z", 5, (int64_t[]){1, 1, 1, 1, 1}, &p), NB_ERR_SHAPE, "ndim 5");
    NB_EXPECT_ERR(nb_tape_param_find(t, "nope", &p), NB_ERR_NOT_FOUND, "no parameter named 'nope'");
    NB_EXPECT_OK(nb_tape_param_find(t, "gamma", &p));
    NB_EXPECT(p == gm);
    float d[64] = {0};
    NB_REQUIRE_OK(nb_tape_input(t, 2, (int64_t[]){2, 3}, d, 1, &a));
    NB_EXPECT_ERR(nb_tape_param(t, "late", 1, (int64_t[]){2}, &p), NB_ERR_INVALID_ARG,
                  "after the first step");
    NB_EXPECT_ERR(nb_tape_param_info(t, a, NULL, NULL), NB_ERR_INVALID_ARG, "not a parameter");
    NB_REQUIRE_OK(nb_tape_input(t, 2, (int64_t[]){3, 2}, d, 1, &b));
    NB_EXPECT_ERR(nb_tape_add(t, a, b, &y), NB_ERR_SHAPE, "shapes [2,3] and [3,2] differ");
    NB_EXPECT_ERR(nb_tape_mse(t, a, b, &y), NB_ERR_SHAPE, "differ in shape");
    NB_EXPECT_ERR(nb_tape_linear(t, a, b, NB_TVAR_NONE, &y), NB_ERR_SHAPE, "[N,F] and [O,F]");
    NB_REQUIRE_OK(nb_tape_input(t, 4, (int64_t[]){1, 5, 3, 3}, d, 1, &x));
    NB_EXPECT_ERR(nb_tape_conv2d(t, x, w, NB_TVAR_NONE, 1, 1, &y), NB_ERR_SHAPE,
                  "has 3 input channels, x [1,5,3,3] has 5");
    NB_EXPECT_ERR(nb_tape_conv2d(t, a, w, NB_TVAR_NONE, 1, 1, &y), NB_ERR_SHAPE, "[N,C,H,W]");
    NB_EXPECT_ERR(nb_tape_group_norm(t, x, 2, NB_TVAR_NONE, NB_TVAR_NONE, 1e-5f, &y), NB_ERR_SHAPE,
                  "5 channels are not divisible by 2 groups");
    NB_EXPECT_ERR(nb_tape_group_norm(t, x, 5, w, NB_TVAR_NONE, 1e-5f, &y), NB_ERR_SHAPE,
                  "gamma [4,3,3,3] must be [C] = [5]");
    NB_EXPECT_OK(nb_tape_group_norm(t, x, 5, gm, NB_TVAR_NONE, 1e-5f, &y));
    NB_EXPECT_ERR(nb_tape_avgpool2x(t, x, &y), NB_ERR_SHAPE, "H, W even");
    NB_EXPECT_ERR(nb_tape_add_channel(t, x, a, &y), NB_ERR_SHAPE, "[N,C,H,W] and [N,C]");
    NB_EXPECT_ERR(nb_tape_concat(t, x, a, &y), NB_ERR_SHAPE, "[N,Ca,H,W]");
    NB_EXPECT_ERR(nb_tape_timestep_embedding(t, 2, d, 7, 10000.0f, &y), NB_ERR_SHAPE, "must be even");
    NB_REQUIRE_OK(nb_tape_input(t, 4, (int64_t[]){1, 2, 3, 4}, d, 1, &q));
    NB_REQUIRE_OK(nb_tape_input(t, 4, (int64_t[]){1, 2, 3, 5}, d, 1, &k));
    NB_EXPECT_ERR(nb_tape_attention(t, q, k, k, &y), NB_ERR_SHAPE, "must be [N,H,Tq,d]");
    /* kernel and stride limits */
    nb_tape *t2;
    nb_tvar w5, x2;
    NB_REQUIRE_OK(nb_tape_create(&t2));
    NB_REQUIRE_OK(nb_tape_param(t2, "w5", 4, (int64_t[]){1, 1, 5, 5}, &w5));
    NB_REQUIRE_OK(nb_tape_input(t2, 4, (int64_t[]){1, 1, 6, 6}, d, 0, &x2));
    NB_EXPECT_ERR(nb_tape_conv2d(t2, x2, w5, NB_TVAR_NONE, 1, 0, &y), NB_ERR_UNSUPPORTED, "only 1x1 and 3x3");
    nb_tape_free(t2);
    NB_EXPECT_ERR(nb_tape_conv2d(t, q, w, NB_TVAR_NONE, 3, 0, &y), NB_ERR_SHAPE, "input channels");
    /* backward: non-scalar, no gradient path, stale handle */
    NB_EXPECT_ERR(nb_tape_backward(t, a), NB_ERR_SHAPE, "loss must be a scalar (1 element), got [2,3]");
    nb_tvar c0, c1;
    NB_REQUIRE_OK(nb_tape_input(t, 1, (int64_t[]){1}, d, 0, &c0));
    NB_REQUIRE_OK(nb_tape_input(t, 1, (int64_t[]){1}, d, 0, &c1));
    NB_REQUIRE_OK(nb_tape_mse(t, c0, c1, &loss));
    NB_EXPECT_ERR(nb_tape_backward(t, loss), NB_ERR_INVALID_ARG, "does not depend");
    NB_EXPECT_ERR(nb_tape_backward(t, 12345), NB_ERR_INVALID_ARG, "not a live value");
    NB_REQUIRE_OK(nb_tape_reset(t));
    NB_EXPECT_ERR(nb_tape_silu(t, a, &y), NB_ERR_INVALID_ARG, "not a live value");
    NB_EXPECT_ERR(nb_tape_input(t, 1, (int64_t[]){2}, NULL, 0, &y), NB_ERR_INVALID_ARG, "data is NULL");
    nb_tape_free(t);
}

/* ---- per-op profiler ------------------------------------------------------------------------ */

/* x [2,3,8,8] -> conv3x3 -> silu -> conv1x1 -> conv3x3 s2 -> mse against silu(target): the
 * target's silu needs no gradient, so its backward never runs. */
static nb_status prof_step(nb_tape *t, nb_tvar w3, nb_tvar w1, nb_tvar ws, const float *x,
                           const float *tg) {
    nb_tvar xv, tv, a, b, c, d, e, loss;
    nb_status s;
    if ((s = nb_tape_reset(t)) || (s = nb_tape_zero_grad(t)) ||
        (s = nb_tape_input(t, 4, (int64_t[]){2, 3, 8, 8}, x, 0, &xv)) ||
        (s = nb_tape_input(t, 4, (int64_t[]){2, 4, 4, 4}, tg, 0, &tv)) ||
        (s = nb_tape_conv2d(t, xv, w3, NB_TVAR_NONE, 1, 1, &a)) || (s = nb_tape_silu(t, a, &b)) ||
        (s = nb_tape_conv2d(t, b, w1, NB_TVAR_NONE, 1, 0, &c)) ||
        (s = nb_tape_conv2d(t, c, ws, NB_TVAR_NONE, 2, 1, &d)) || (s = nb_tape_silu(t, tv, &e)) ||
        (s = nb_tape_mse(t, d, e, &loss)))
        return s;
    return nb_tape_backward(t, loss);
}

static const nb_tape_profile_row *prof_find(const nb_tape_profile_row *r, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(r[i].name, name)) return &r[i];
    return NULL;
}

static void test_profiler(void) {
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    nb_tvar w3, w1, ws;
    NB_REQUIRE_OK(nb_tape_param(t, "w3", 4, (int64_t[]){4, 3, 3, 3}, &w3));
    NB_REQUIRE_OK(nb_tape_param(t, "w1", 4, (int64_t[]){4, 4, 1, 1}, &w1));
    NB_REQUIRE_OK(nb_tape_param(t, "ws", 4, (int64_t[]){4, 4, 3, 3}, &ws));
    NB_REQUIRE_OK(nb_tape_param_init_uniform(t, w3, 0.5f, 1));
    NB_REQUIRE_OK(nb_tape_param_init_uniform(t, w1, 0.5f, 2));
    NB_REQUIRE_OK(nb_tape_param_init_uniform(t, ws, 0.5f, 3));
    float x[2 * 3 * 8 * 8], tg[2 * 4 * 4 * 4];
    fill(x, 2 * 3 * 8 * 8);
    fill(tg, 2 * 4 * 4 * 4);
    nb_tape_profile_row rows[16];
    int n = -1;
    int64_t passes = -1;
    /* off: nothing is collected */
    NB_REQUIRE_OK(prof_step(t, w3, w1, ws, x, tg));
    NB_EXPECT_OK(nb_tape_profile_rows(t, rows, 16, &n, &passes));
    NB_EXPECT(n == 0 && passes == 0);
    NB_REQUIRE_OK(nb_tape_set_profiling(t, 1));
    for (int i = 0; i < 3; i++) NB_REQUIRE_OK(prof_step(t, w3, w1, ws, x, tg));
    NB_EXPECT_OK(nb_tape_profile_rows(t, rows, 16, &n, &passes));
    NB_EXPECT(n == 5 && passes == 3);
    const char *names[5] = {"conv2d 3x3", "conv2d 1x1", "conv2d 3x3 s2", "silu", "mse"};
    int64_t fwd[5] = {3, 3, 3, 6, 3}, bwd[5] = {3, 3, 3, 3, 3};
    for (int i = 0; i < 5; i++) {
        const nb_tape_profile_row *r = prof_find(rows, n, names[i]);
        NB_EXPECT(r != NULL);
        if (!r) continue;
        NB_EXPECT(r->calls[0] == fwd[i] && r->calls[1] == bwd[i]);
        NB_EXPECT(r->ms[0] >= 0 && r->ms[1] >= 0 && r->host_ms[0] == r->ms[0]);
    }
    for (int i = 1; i < n; i++) /* sorted by total time */
        NB_EXPECT(rows[i - 1].ms[0] + rows[i - 1].ms[1] >= rows[i].ms[0] + rows[i].ms[1]);
    char rep[4096];
    NB_EXPECT_OK(nb_tape_profile_report(t, rep, sizeof rep));
    for (int i = 0; i < 5; i++) NB_EXPECT(strstr(rep, names[i]) != NULL);
    NB_EXPECT(strstr(rep, "total") && strstr(rep, "3 backward passes"));
    NB_EXPECT_ERR(nb_tape_profile_report(t, rep, 40), NB_ERR_INVALID_ARG, "too small");
    NB_EXPECT(strlen(rep) == 39);
    /* off keeps the totals; reset forgets them */
    NB_EXPECT_OK(nb_tape_set_profiling(t, 0));
    NB_REQUIRE_OK(prof_step(t, w3, w1, ws, x, tg));
    NB_EXPECT_OK(nb_tape_profile_rows(t, rows, 16, &n, &passes));
    NB_EXPECT(n == 5 && passes == 3);
    NB_EXPECT_OK(nb_tape_profile_reset(t));
    NB_EXPECT_OK(nb_tape_profile_rows(t, NULL, 0, &n, &passes));
    NB_EXPECT(n == 0 && passes == 0);
    /* level 2: per shape (the two silus differ) */
    NB_EXPECT_OK(nb_tape_set_profiling(t, 2));
    NB_REQUIRE_OK(prof_step(t, w3, w1, ws, x, tg));
    NB_EXPECT_OK(nb_tape_profile_rows(t, rows, 16, &n, &passes));
    NB_EXPECT(n == 6 && passes == 1);
    const nb_tape_profile_row *r = prof_find(rows, n, "conv2d 3x3 s2 [2,4,8,8]->[2,4,4,4]");
    NB_EXPECT(r && r->calls[0] == 1 && r->calls[1] == 1);
    r = prof_find(rows, n, "silu [2,4,4,4]->[2,4,4,4]");
    NB_EXPECT(r && r->calls[0] == 1 && r->calls[1] == 0);
    /* bad arguments */
    NB_EXPECT_ERR(nb_tape_set_profiling(t, 3), NB_ERR_INVALID_ARG, "level 3");
    NB_EXPECT_ERR(nb_tape_set_profiling(NULL, 1), NB_ERR_INVALID_ARG, "tape is NULL");
    NB_EXPECT_ERR(nb_tape_profile_report(t, NULL, 10), NB_ERR_INVALID_ARG, "buf is NULL");
    NB_EXPECT_ERR(nb_tape_profile_report(t, rep, 0), NB_ERR_INVALID_ARG, "cap 0");
    NB_EXPECT_ERR(nb_tape_profile_rows(t, NULL, 4, &n, NULL), NB_ERR_INVALID_ARG, "rows is NULL");
    NB_EXPECT_ERR(nb_tape_profile_rows(t, rows, 4, NULL, NULL), NB_ERR_INVALID_ARG, "n is NULL");
    NB_EXPECT_ERR(nb_tape_profile_reset(NULL), NB_ERR_INVALID_ARG, "tape is NULL");
    nb_tape_free(t);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_forward_conv_linear, test_forward_norm_attention,
                 test_forward_small_ops, test_grad_linear, test_grad_conv2d, test_grad_group_norm,
                 test_grad_elementwise, test_grad_attention, test_grad_small_model,
                 test_grad_unet_block, test_grad_attention_block, test_layout_ops,
                 test_steady_state_no_alloc, test_profiler, test_train_adam, test_arena_growth,
                 test_accumulate, test_errors, test_group_norm_silu, test_read_write_api);
}

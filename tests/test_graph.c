/* Recorded graphs (include/nabla/graph.h, src/graph/graph*.c): a graph recorded from a tape and
 * replayed with new inputs gives the immediate tape's results bit for bit on the CPU (outputs,
 * parameter gradients, input gradients) and within tolerance on CUDA; the memory plan never
 * shares live memory (a poisoned run is unchanged, a deliberately shortened lifetime is caught,
 * and every pair of overlapping lifetimes is checked for disjoint memory); every error names its
 * cause. An MLP-like and a small UNet-like graph. CUDA cases skip without a GPU
 * (NB_REQUIRE_CUDA=1: fail). */
#include <math.h>

#include "nb_test.h"
#include "nb_test_alloc.h"
#include "nabla/device.h"
#include "nabla/graph.h"
#include "nabla/nn_encoding.h"
#include "nabla/nn_mlp.h"
#include "nabla/nn_tape.h"
#include "nabla/tensor.h"
#include "graph/graph_internal.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform [-1, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static int64_t numel(int nd, const int64_t *s) {
    int64_t c = 1;
    for (int i = 0; i < nd; i++) c *= s[i];
    return c;
}

/* ---- models --------------------------------------------------------------------------------- */

#define MAXP 12
#define MAXIN 3
typedef struct model {
    const char *name;
    int n_par;
    const char *pname[MAXP];
    int pnd[MAXP];
    int64_t pshape[MAXP][4];
    int n_in;
    int ind[MAXIN];
    int64_t inshape[MAXIN][4];
    int in_grad[MAXIN];
    /* builds the forward from inputs in[] and params p[]: *y the prediction, *loss a scalar */
    nb_status (*build)(nb_tape *t, const nb_tvar *p, const nb_tvar *in, nb_tvar *y, nb_tvar *loss);
} model;

/* x [8,16] -> linear 32 -> silu -> linear 16 -> + x -> linear 4 -> mse(target [8,4]) */
static nb_status mlp_build(nb_tape *t, const nb_tvar *p, const nb_tvar *in, nb_tvar *y, nb_tvar *loss) {
    nb_tvar h, h2, r;
    nb_status s;
    if ((s = nb_tape_linear(t, in[0], p[0], p[1], &h))) return s;
    if ((s = nb_tape_silu(t, h, &h))) return s;
    if ((s = nb_tape_linear(t, h, p[2], p[3], &h2))) return s;
    if ((s = nb_tape_add(t, h2, in[0], &r))) return s;
    if ((s = nb_tape_silu(t, r, &r))) return s;
    if ((s = nb_tape_linear(t, r, p[4], p[5], y))) return s;
    return nb_tape_mse(t, *y, in[1], loss);
}
static const model MLP = {
    "mlp", 6, {"l1.w", "l1.b", "l2.w", "l2.b", "l3.w", "l3.b"}, {2, 1, 2, 1, 2, 1},
    {{32, 16}, {32}, {16, 32}, {16}, {4, 16}, {4}},
    2, {2, 2}, {{8, 16}, {8, 4}}, {1, 0}, mlp_build,
};

/* x [2,4,8,8]: conv3x3 8 -> gn+silu -> avgpool -> conv3x3 8 -> upsample -> concat(skip) ->
 * conv1x1 4 -> + x -> mse(target) */
static nb_status unet_build(nb_tape *t, const nb_tvar *p, const nb_tvar *in, nb_tvar *y, nb_tvar *loss) {
    nb_tvar a, b, c, d, e, f, g;
    nb_status s;
    if ((s = nb_tape_conv2d(t, in[0], p[0], p[1], 1, 1, &a))) return s;
    if ((s = nb_tape_group_norm_silu(t, a, 2, p[2], p[3], 1e-5f, &b))) return s;
    if ((s = nb_tape_avgpool2x(t, b, &c))) return s;
    if ((s = nb_tape_conv2d(t, c, p[4], p[5], 1, 1, &d))) return s;
    if ((s = nb_tape_silu(t, d, &d))) return s;
    if ((s = nb_tape_upsample2x(t, d, &e))) return s;
    if ((s = nb_tape_concat(t, e, a, &f))) return s;
    if ((s = nb_tape_conv2d(t, f, p[6], p[7], 1, 0, &g))) return s;
    if ((s = nb_tape_add(t, g, in[0], y))) return s;
    return nb_tape_mse(t, *y, in[1], loss);
}
static const model UNET = {
    "unet", 8, {"c1.w", "c1.b", "gn.g", "gn.b", "c2.w", "c2.b", "c3.w", "c3.b"},
    {4, 1, 1, 1, 4, 1, 4, 1},
    {{8, 4, 3, 3}, {8}, {8}, {8}, {8, 8, 3, 3}, {8}, {4, 16, 1, 1}, {4}},
    2, {4, 4}, {{2, 4, 8, 8}, {2, 4, 8, 8}}, {1, 0}, unet_build,
};

/* x [2,8,4,4]: conv1x1 -> qkv [2,24,4,4] -> qkv attention (2 heads) -> group norm -> reshape
 * [16,16] (a view on CUDA) -> transpose -> linear 16 -> reshape [16,2,8] -> reshape [16,16] ->
 * slice channels [4, 12) -> mse(target [16,8]) */
static nb_status attn_build(nb_tape *t, const nb_tvar *p, const nb_tvar *in, nb_tvar *y, nb_tvar *loss) {
    nb_tvar a, b, c, d, e, f, g;
    nb_status s;
    if ((s = nb_tape_conv2d(t, in[0], p[0], p[1], 1, 0, &a))) return s;
    if ((s = nb_tape_qkv_attention(t, a, 2, &b))) return s;
    if ((s = nb_tape_group_norm(t, b, 2, p[2], p[3], 1e-5f, &c))) return s;
    if ((s = nb_tape_reshape(t, c, 2, (int64_t[]){16, 16}, &d))) return s;
    if ((s = nb_tape_transpose(t, d, &e))) return s;
    if ((s = nb_tape_linear(t, e, p[4], p[5], &f))) return s;
    if ((s = nb_tape_reshape(t, f, 3, (int64_t[]){16, 2, 8}, &g))) return s;
    if ((s = nb_tape_reshape(t, g, 2, (int64_t[]){16, 16}, &f))) return s;
    if ((s = nb_tape_slice_channels(t, f, 4, 8, y))) return s;
    return nb_tape_mse(t, *y, in[1], loss);
}
static const model ATTN = {
    "attn", 6, {"qkv.w", "qkv.b", "gn.g", "gn.b", "l.w", "l.b"}, {4, 1, 1, 1, 2, 1},
    {{24, 8, 1, 1}, {24}, {8}, {8}, {16, 16}, {16}},
    2, {4, 2}, {{2, 8, 4, 4}, {16, 8}}, {1, 0}, attn_build,
};

/* The course's graph (issue #17's benchmark): Linear / ReLU ops in a fixed random-looking order,
 * ending in ReLU + Softmax, x [16,32]; here with an mse so the backward is recorded too. */
static nb_status course_build(nb_tape *t, const nb_tvar *p, const nb_tvar *in, nb_tvar *y, nb_tvar *loss) {
    static const char order[] = "LRLLRLLRL"; /* 6 linears (12 parameters), 3 relus */
    nb_tvar h = in[0];
    nb_status s;
    int li = 0;
    for (const char *c = order; *c; c++) {
        if (*c == 'L') s = nb_tape_linear(t, h, p[2 * li], p[2 * li + 1], &h), li++;
        else s = nb_tape_relu(t, h, &h);
        if (s) return s;
    }
    if ((s = nb_tape_relu(t, h, &h)) || (s = nb_tape_softmax(t, h, y))) return s;
    return nb_tape_mse(t, *y, in[1], loss);
}
static const model COURSE = {
    "course", 12, {"l0.w", "l0.b", "l1.w", "l1.b", "l2.w", "l2.b", "l3.w", "l3.b", "l4.w", "l4.b",
                   "l5.w", "l5.b"},
    {2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1},
    {{32, 32}, {32}, {32, 32}, {32}, {32, 32}, {32}, {32, 32}, {32}, {32, 32}, {32}, {32, 32}, {32}},
    2, {2, 2}, {{16, 32}, {16, 32}}, {1, 0}, course_build,
};

/* ---- harness -------------------------------------------------------------------------------- */

typedef struct result {
    float loss;
    float *y, *gp, *gx;
    int64_t ny, np, nx;
} result;
static void free_result(result *r) {
    free(r->y);
    free(r->gp);
    free(r->gx);
    memset(r, 0, sizeof *r);
}

static nb_tape_precision g_prec = NB_TAPE_FP32; /* of the tapes make_tape creates */

/* A tape on dev (NULL: CPU) with m's parameters, initialised from seed. */
static nb_status make_tape(nb_device *dev, const model *m, nb_tvar *p, nb_tape **out) {
    nb_tape *t;
    nb_status s = nb_tape_create_on(dev, &t);
    if (s) return s;
    if (dev && (s = nb_tape_set_precision(t, g_prec))) {
        nb_tape_free(t);
        return s;
    }
    for (int i = 0; i < m->n_par && !s; i++)
        s = nb_tape_param(t, m->pname[i], m->pnd[i], m->pshape[i], &p[i]);
    for (int i = 0; i < m->n_par && !s; i++)
        s = nb_tape_param_init_uniform(t, p[i], m->pname[i][3] == 'g' ? 1.0f : 0.4f, 11 + (uint64_t)i);
    if (s) {
        nb_tape_free(t);
        return s;
    }
    *out = t;
    return NB_OK;
}

/* Input data set k of m (deterministic). */
static float **make_inputs(const model *m, int k) {
    float **d = calloc(MAXIN, sizeof *d);
    rng_state = 0x1234567ull + (uint64_t)k * 7919;
    for (int i = 0; i < m->n_in; i++) {
        int64_t n = numel(m->ind[i], m->inshape[i]);
        d[i] = malloc(sizeof(float) * (size_t)n);
        for (int64_t j = 0; j < n; j++) d[i][j] = frand();
    }
    return d;
}
static void free_inputs(float **d) {
    for (int i = 0; i < MAXIN; i++) free(d[i]);
    free(d);
}

/* Reads y, loss, the parameter gradients and input 0's gradient after a step. */
static nb_status collect(nb_tape *t, nb_graph *g, nb_tvar y, nb_tvar loss, nb_tvar x0, result *r) {
    nb_status s;
    int nd;
    int64_t sh[4];
    if ((s = nb_tape_params(t, &(float *){0}, &r->np))) return s;
    if (g) {
        nb_tvar in0;
        if ((s = nb_graph_input(g, 0, &in0))) return s;
        x0 = in0;
    }
    (void)nd, (void)sh;
    r->gp = malloc(sizeof(float) * (size_t)r->np);
    if ((s = nb_tape_read_grads(t, r->gp, r->np))) return s;
    if (g) {
        nb_graph_info gi;
        nb_graph_get_info(g, &gi);
        r->ny = g->vals[y].count;
        r->nx = g->vals[x0].count;
        r->y = malloc(sizeof(float) * (size_t)r->ny);
        r->gx = malloc(sizeof(float) * (size_t)r->nx);
        if ((s = nb_graph_read(g, y, r->y, r->ny))) return s;
        if ((s = nb_graph_read(g, loss, &r->loss, 1))) return s;
        return nb_graph_read_grad(g, x0, r->gx, r->nx);
    }
    if ((s = nb_tape_shape(t, y, &nd, sh))) return s;
    r->ny = numel(nd, sh);
    if ((s = nb_tape_shape(t, x0, &nd, sh))) return s;
    r->nx = numel(nd, sh);
    r->y = malloc(sizeof(float) * (size_t)r->ny);
    r->gx = malloc(sizeof(float) * (size_t)r->nx);
    if ((s = nb_tape_read(t, y, r->y, r->ny))) return s;
    if ((s = nb_tape_read(t, loss, &r->loss, 1))) return s;
    return nb_tape_read_grad(t, x0, r->gx, r->nx);
}

/* One immediate step of m on t with data d (zero: zero the parameter gradients first). */
static nb_status immediate_z(nb_tape *t, const model *m, const nb_tvar *p, float **d, int zero,
                             result *r) {
    nb_status s;
    nb_tvar in[MAXIN], y, loss;
    if ((s = nb_tape_reset(t)) || (zero && (s = nb_tape_zero_grad(t)))) return s;
    for (int i = 0; i < m->n_in; i++)
        if ((s = nb_tape_input(t, m->ind[i], m->inshape[i], d[i], m->in_grad[i], &in[i]))) return s;
    if ((s = m->build(t, p, in, &y, &loss)) || (s = nb_tape_backward(t, loss))) return s;
    return collect(t, NULL, y, loss, in[0], r);
}
static nb_status immediate(nb_tape *t, const model *m, const nb_tvar *p, float **d, result *r) {
    return immediate_z(t, m, p, d, 1, r);
}

/* Records m on t with data d (the recording step is an immediate step too). */
static nb_status record(nb_tape *t, const model *m, const nb_tvar *p, float **d, int backward,
                        nb_graph **g, nb_tvar *y, nb_tvar *loss) {
    nb_status s;
    nb_tvar in[MAXIN];
    if ((s = nb_tape_reset(t)) || (s = nb_tape_zero_grad(t))) return s;
    if ((s = nb_graph_record_begin(t))) return s;
    for (int i = 0; i < m->n_in && !s; i++)
        s = nb_tape_input(t, m->ind[i], m->inshape[i], d[i], m->in_grad[i], &in[i]);
    if (!s) s = m->build(t, p, in, y, loss);
    if (!s && backward) s = nb_tape_backward(t, *loss);
    nb_status e = nb_graph_record_end(t, g);
    return s ? s : e;
}

static nb_status replay(nb_tape *t, nb_graph *g, const model *m, float **d, nb_tvar y,
                        nb_tvar loss, result *r) {
    nb_status s;
    for (int i = 0; i < m->n_in; i++)
        if ((s = nb_graph_set_input(g, i, d[i], NB_F32, m->ind[i], m->inshape[i]))) return s;
    if ((s = nb_tape_zero_grad(t)) || (s = nb_graph_run(g))) return s;
    return collect(t, g, y, loss, NB_TVAR_NONE, r);
}

/* Max |a - b| / (1 + |b|) over n, or exact equality when tol == 0 (a count of mismatches). */
static int compare(const char *what, const float *a, const float *b, int64_t n, float tol) {
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        int ok = tol == 0 ? memcmp(&a[i], &b[i], sizeof(float)) == 0
                          : fabsf(a[i] - b[i]) <= tol * (1.0f + fabsf(b[i]));
        if (!ok && bad++ < 3)
            fprintf(stderr, "    %s[%lld]: %.9g vs %.9g\n", what, (long long)i, a[i], b[i]);
    }
    return bad;
}

static int compare_results(const result *a, const result *b, float tol) {
    int bad = compare("y", a->y, b->y, a->ny, tol) + compare("loss", &a->loss, &b->loss, 1, tol) +
              compare("grad params", a->gp, b->gp, a->np, tol) +
              compare("grad x", a->gx, b->gx, a->nx, tol);
    return bad;
}

/* Every pair of planned buffers whose lifetimes overlap is disjoint in memory. */
static int plan_overlaps(const nb_graph *g) {
    int bad = 0;
    for (nb_tvar a = 0; a < g->n_vals; a++)
        for (int ga = 0; ga < 2; ga++)
            for (nb_tvar b = 0; b < g->n_vals; b++)
                for (int gb = 0; gb < 2; gb++) {
                    if (a > b || (a == b && ga >= gb)) continue;
                    const nb_gval *x = &g->gv[a], *y = &g->gv[b];
                    const int32_t *lx = ga ? x->glife : x->life, *ly = gb ? y->glife : y->life;
                    int64_t ox = ga ? x->goff : x->off, oy = gb ? y->goff : y->off;
                    if (ox < 0 || oy < 0 || lx[0] < 0 || ly[0] < 0) continue;
                    if (lx[0] > ly[1] || ly[0] > lx[1]) continue; /* not live together */
                    if (ox < oy + y->bytes && oy < ox + x->bytes) bad++;
                }
    return bad;
}

/* Immediate vs recorded over 3 data sets (record with set 0; replay sets 1, 2, 0, then 1 poisoned). */
static void check_model(nb_device *dev, const model *m, float tol) {
    nb_tape *t;
    nb_tvar p[MAXP], y, loss;
    NB_REQUIRE_OK(make_tape(dev, m, p, &t));
    float **d[3] = {make_inputs(m, 0), make_inputs(m, 1), make_inputs(m, 2)};
    result ref[3] = {0}, got = {0};
    nb_graph *g = NULL;
    nb_status s = record(t, m, p, d[0], 1, &g, &y, &loss);
    NB_EXPECT_OK(s);
    if (!s) NB_EXPECT_OK(nb_graph_output(g, y));
    for (int k = 0; k < 3 && !s; k++) NB_EXPECT_OK(s = immediate(t, m, p, d[k], &ref[k]));
    int order[5] = {1, 2, 0, 1, 2};
    for (int r = 0; r < 5 && !s; r++) {
        if (r == 3) NB_EXPECT_OK(nb_graph_set_poison(g, 1));
        NB_EXPECT_OK(s = replay(t, g, m, d[order[r]], y, loss, &got));
        if (!s) {
            int bad = compare_results(&got, &ref[order[r]], tol);
            if (bad) fprintf(stderr, "    %s: replay %d (data %d%s): %d mismatches\n", m->name, r,
                             order[r], r >= 3 ? ", poisoned" : "", bad);
            NB_EXPECT(bad == 0);
        }
        free_result(&got);
    }
    if (g) {
        int64_t peak = 0, naive = 0;
        NB_EXPECT_OK(nb_graph_memory(g, &peak, &naive));
        NB_EXPECT(peak > 0 && peak < naive);
        NB_EXPECT(plan_overlaps(g) == 0);
        nb_graph_info gi;
        NB_EXPECT_OK(nb_graph_get_info(g, &gi));
        NB_EXPECT(gi.runs == 5 && gi.has_backward && gi.loss == loss && gi.n_inputs == 2);
        if (dev) { /* the third replay was captured as one CUDA graph and launched */
            if (gi.captures != 1) fprintf(stderr, "    %s: not captured: %s\n", m->name, g->cg_why);
            NB_EXPECT(gi.captures == 1);
        }
    }
    nb_graph_free(g);
    for (int k = 0; k < 3; k++) {
        free_result(&ref[k]);
        free_inputs(d[k]);
    }
    nb_tape_free(t);
}

static void test_mlp_cpu_bitexact(void) { check_model(NULL, &MLP, 0); }
static void test_unet_cpu_bitexact(void) { check_model(NULL, &UNET, 0); }
static void test_attn_cpu_bitexact(void) { check_model(NULL, &ATTN, 0); }
static void test_course_cpu_bitexact(void) { check_model(NULL, &COURSE, 0); }

static nb_device *g_cuda;
static int open_cuda(void) {
    if (!g_cuda && nb_device_open("cuda", &g_cuda) != NB_OK) g_cuda = NULL;
    return g_cuda != NULL;
}
static void test_mlp_cuda(void) {
    if (!open_cuda()) NB_SKIP("no CUDA device");
    check_model(g_cuda, &MLP, 1e-5f);
}
static void test_unet_cuda(void) {
    if (!open_cuda()) NB_SKIP("no CUDA device");
    check_model(g_cuda, &UNET, 1e-5f);
}
static void test_unet_cuda_bf16(void) { /* bf16 activation storage: 2-byte planned buffers */
    if (!open_cuda()) NB_SKIP("no CUDA device");
    g_prec = NB_TAPE_BF16;
    check_model(g_cuda, &UNET, 2e-2f);
    g_prec = NB_TAPE_FP32;
}
static void test_course_cuda(void) {
    if (!open_cuda()) NB_SKIP("no CUDA device");
    check_model(g_cuda, &COURSE, 1e-5f);
}
/* Per-node times on CUDA (events), and no CUDA graph while profiling. */
static void test_profile_cuda(void) {
    if (!open_cuda()) NB_SKIP("no CUDA device");
    nb_tape *t;
    nb_tvar p[MAXP], y, loss;
    NB_REQUIRE_OK(make_tape(g_cuda, &MLP, p, &t));
    float **d = make_inputs(&MLP, 0);
    nb_graph *g;
    NB_REQUIRE_OK(record(t, &MLP, p, d, 1, &g, &y, &loss));
    NB_REQUIRE_OK(nb_graph_set_profiling(g, 1));
    for (int r = 0; r < 4; r++) NB_REQUIRE_OK(nb_graph_run(g));
    nb_graph_info gi;
    NB_EXPECT_OK(nb_graph_get_info(g, &gi));
    NB_EXPECT(gi.captures == 0 && gi.runs == 4);
    for (int k = 0; k < g->n_nodes; k++) {
        nb_graph_node ni;
        NB_EXPECT_OK(nb_graph_node_info(g, k, &ni));
        NB_EXPECT(ni.ms[0] >= 0 && ni.ms[1] >= 0); /* every node's backward is reached here */
    }
    size_t need = 0;
    NB_EXPECT_OK(nb_graph_dump(g, NB_GRAPH_DUMP_TEXT, NULL, 0, &need));
    char *buf = malloc(need + 1);
    NB_EXPECT_OK(nb_graph_dump(g, NB_GRAPH_DUMP_TEXT, buf, need + 1, NULL));
    NB_EXPECT(strstr(buf, "on cuda") && strstr(buf, "time: forward "));
    free(buf);
    nb_graph_free(g);
    free_inputs(d);
    nb_tape_free(t);
}
static void test_attn_cuda(void) { /* reshape is a view on CUDA: aliases in the plan */
    if (!open_cuda()) NB_SKIP("no CUDA device");
    check_model(g_cuda, &ATTN, 1e-5f);
}

/* ---- forward-only graphs, constants, tensors ------------------------------------------------ */

/* A forward-only graph reading a constant (a value made before recording) */
static void test_forward_only_and_constant(void) {
    nb_tape *t;
    nb_tvar p[MAXP], y, loss;
    NB_REQUIRE_OK(make_tape(NULL, &MLP, p, &t));
    float **d = make_inputs(&MLP, 3), **d2 = make_inputs(&MLP, 4);
    nb_tvar c;
    NB_REQUIRE_OK(nb_tape_input(t, 2, MLP.inshape[1], d[1], 0, &c)); /* before recording */
    NB_REQUIRE_OK(nb_graph_record_begin(t));
    NB_EXPECT(nb_graph_recording(t));
    nb_tvar x;
    NB_REQUIRE_OK(nb_tape_input(t, 2, MLP.inshape[0], d[0], 0, &x));
    nb_tvar in[2] = {x, c};
    NB_REQUIRE_OK(MLP.build(t, p, in, &y, &loss));
    nb_graph *g;
    NB_REQUIRE_OK(nb_graph_record_end(t, &g));
    NB_EXPECT(!nb_graph_recording(t));
    nb_graph_info gi;
    NB_EXPECT_OK(nb_graph_get_info(g, &gi));
    NB_EXPECT(gi.n_inputs == 1 && gi.n_consts == 1 && !gi.has_backward && gi.n_outputs == 0);
    NB_EXPECT_OK(nb_graph_output(g, y));
    NB_EXPECT_OK(nb_graph_output(g, loss));
    float yl[32], ly, ly2, yl2[32];
    nb_graph_value vi;
    NB_EXPECT_OK(nb_graph_value_info(g, c, &vi));
    NB_EXPECT(vi.role == NB_GRAPH_CONST && vi.ndim == 2 && vi.shape[0] == 8 && vi.shape[1] == 4 &&
              vi.count == 32 && vi.dtype == NB_F32 && vi.input_index == -1 && vi.producer == -1);
    NB_EXPECT_OK(nb_graph_value_info(g, x, &vi));
    NB_EXPECT(vi.role == NB_GRAPH_INPUT && vi.input_index == 0 && !vi.needs_grad);
    NB_EXPECT_OK(nb_graph_value_info(g, y, &vi));
    NB_EXPECT(vi.role == NB_GRAPH_ACT && vi.output && vi.producer == 5 && vi.needs_grad);
    NB_EXPECT_OK(nb_graph_value_info(g, p[0], &vi));
    NB_EXPECT(vi.role == NB_GRAPH_PARAM);
    NB_EXPECT_ERR(nb_graph_value_info(g, 999, &vi), NB_ERR_INVALID_ARG, "not a value");
    nb_graph_node ni;
    NB_EXPECT_OK(nb_graph_node_info(g, 0, &ni));
    NB_EXPECT(!strcmp(ni.op, "linear") && ni.nin == 3 && ni.in[0] == x && ni.in[1] == p[0] &&
              ni.in[3] == NB_TVAR_NONE && ni.ms[0] == -1);
    NB_EXPECT_OK(nb_graph_node_info(g, 6, &ni));
    NB_EXPECT(!strcmp(ni.op, "mse") && ni.out == loss && ni.in[1] == c);
    NB_EXPECT_ERR(nb_graph_node_info(g, 7, &ni), NB_ERR_INVALID_ARG, "node 7 of 7");
    NB_EXPECT_ERR(nb_graph_read(g, y, yl, 32), NB_ERR_INVALID_ARG, "has not run");
    /* the tape moves on (a reset): the graph keeps its own copy of the constant */
    NB_REQUIRE_OK(nb_tape_reset(t));
    NB_REQUIRE_OK(nb_graph_run(g));
    NB_EXPECT_OK(nb_graph_read(g, y, yl, 32));
    NB_EXPECT_OK(nb_graph_read(g, loss, &ly, 1));
    float gx[128];
    NB_EXPECT_ERR(nb_graph_read_grad(g, x, gx, 128), NB_ERR_INVALID_ARG, "no backward");
    /* immediate with the same data */
    nb_tvar ix, ic, iy, il;
    NB_REQUIRE_OK(nb_tape_input(t, 2, MLP.inshape[0], d[0], 0, &ix));
    NB_REQUIRE_OK(nb_tape_input(t, 2, MLP.inshape[1], d[1], 0, &ic));
    nb_tvar iin[2] = {ix, ic};
    NB_REQUIRE_OK(MLP.build(t, p, iin, &iy, &il));
    NB_REQUIRE_OK(nb_tape_read(t, iy, yl2, 32));
    NB_REQUIRE_OK(nb_tape_read(t, il, &ly2, 1));
    NB_EXPECT(memcmp(yl, yl2, sizeof yl) == 0 && memcmp(&ly, &ly2, 4) == 0);
    /* a new input through a CPU tensor */
    nb_tensor *xt;
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    NB_REQUIRE_OK(nb_tensor_from_host(cpu, NB_F32, 2, MLP.inshape[0], d2[0], &xt));
    NB_EXPECT_OK(nb_graph_set_input_tensor(g, 0, xt));
    NB_EXPECT_OK(nb_graph_run(g));
    NB_EXPECT_OK(nb_graph_read(g, y, yl2, 32));
    NB_EXPECT(memcmp(yl, yl2, sizeof yl) != 0);
    nb_tensor_free(xt);
    nb_device_close(cpu);
    nb_graph_free(g);
    free_inputs(d);
    free_inputs(d2);
    nb_tape_free(t);
}

/* The parameters are the tape's: a replay after an update (an optimizer's) sees the new ones. */
static void test_params_shared(void) {
    nb_tape *t;
    nb_tvar p[MAXP], y, loss;
    NB_REQUIRE_OK(make_tape(NULL, &MLP, p, &t));
    float **d = make_inputs(&MLP, 5);
    nb_graph *g;
    NB_REQUIRE_OK(record(t, &MLP, p, d, 1, &g, &y, &loss));
    NB_REQUIRE_OK(nb_graph_output(g, y));
    int64_t np;
    float *w;
    NB_REQUIRE_OK(nb_tape_params(t, &w, &np));
    for (int64_t i = 0; i < np; i++) w[i] = w[i] * 0.5f + 0.01f; /* "an optimizer step" */
    result ref = {0}, got = {0};
    NB_REQUIRE_OK(immediate(t, &MLP, p, d, &ref));
    NB_REQUIRE_OK(replay(t, g, &MLP, d, y, loss, &got));
    NB_EXPECT(compare_results(&got, &ref, 0) == 0);
    /* gradients accumulate across runs as across nb_tape_backward calls (no zero_grad between) */
    float *g1 = malloc(sizeof(float) * (size_t)np), *g2 = malloc(sizeof(float) * (size_t)np);
    NB_REQUIRE_OK(nb_graph_run(g));
    NB_REQUIRE_OK(nb_tape_read_grads(t, g2, np));
    free_result(&ref);
    NB_REQUIRE_OK(immediate_z(t, &MLP, p, d, 1, &ref));
    free_result(&ref);
    NB_REQUIRE_OK(immediate_z(t, &MLP, p, d, 0, &ref));
    NB_REQUIRE_OK(nb_tape_read_grads(t, g1, np));
    NB_EXPECT(memcmp(g1, g2, sizeof(float) * (size_t)np) == 0);
    NB_EXPECT(memcmp(g1, got.gp, sizeof(float) * (size_t)np) != 0); /* they did accumulate */
    /* CPU graphs take the CUDA-graph switch and never use one */
    nb_graph_info gi;
    NB_EXPECT_OK(nb_graph_set_cuda_graph(g, 0));
    NB_EXPECT_OK(nb_graph_set_cuda_graph(g, 1));
    NB_EXPECT_OK(nb_graph_get_info(g, &gi));
    NB_EXPECT(gi.cuda_graph == 0 && gi.captures == 0 && !gi.on_cuda && gi.runs == 2);
    free(g1);
    free(g2);
    free_result(&ref);
    free_result(&got);
    nb_graph_free(g);
    free_inputs(d);
    nb_tape_free(t);
}

/* The module rows (ENCODING, MLP: op->obj a module object with its own workspace) replay bit
 * for bit: hash-grid encoding -> fused MLP -> + skip -> mse, on the CPU. */
static nb_encoding *g_enc;
static nb_mlp *g_mlp;
static nb_status mods_build(nb_tape *t, const nb_tvar *p, const nb_tvar *in, nb_tvar *y, nb_tvar *loss) {
    nb_tvar f, z;
    nb_status s;
    if ((s = nb_tape_encoding(t, g_enc, in[0], p[0], &f))) return s;
    if ((s = nb_tape_mlp(t, g_mlp, f, p[1], &z))) return s;
    if ((s = nb_tape_add(t, z, in[0], y))) return s;
    return nb_tape_mse(t, *y, in[1], loss);
}
static void test_module_rows_cpu_bitexact(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_encoding_config ec = nb_hash_grid_config(2, 2, 2, 4, 2, 2.0f);
    nb_mlp_config mc = nb_mlp_config_default(4, 2, 16, 1);
    mc.act = NB_ACT_SILU;
    mc.bias = 1;
    nb_status s = nb_encoding_create(cpu, &ec, &g_enc);
    if (!s) s = nb_mlp_create(cpu, &mc, &g_mlp);
    NB_EXPECT_OK(s);
    if (!s) {
        NB_EXPECT(nb_encoding_n_output_dims(g_enc) == 4);
        model m = {"mods", 2, {"enc", "mlp"}, {1, 1},
                   {{nb_encoding_n_params(g_enc)}, {nb_mlp_n_params(g_mlp)}},
                   2, {2, 2}, {{16, 2}, {16, 2}}, {1, 0}, mods_build};
        check_model(NULL, &m, 0);
    }
    nb_mlp_free(g_mlp);
    nb_encoding_destroy(g_enc);
    nb_device_close(cpu);
}

/* A warm replay allocates nothing (host; on CUDA what a CUDA graph needs): set inputs, run, read
 * on the UNet-like graph, after two warm-up runs. */
static void test_steady_state_no_alloc(void) {
    nb_tape *t;
    nb_tvar p[MAXP], y, loss;
    NB_REQUIRE_OK(make_tape(NULL, &UNET, p, &t));
    float **d = make_inputs(&UNET, 0);
    nb_graph *g;
    NB_REQUIRE_OK(record(t, &UNET, p, d, 1, &g, &y, &loss));
    NB_REQUIRE_OK(nb_graph_output(g, y));
    NB_REQUIRE_OK(nb_graph_run(g));
    NB_REQUIRE_OK(nb_graph_run(g));
    float l, *yv = malloc(sizeof(float) * 512), *gx = malloc(sizeof(float) * 512);
    nb_tvar x0;
    NB_REQUIRE_OK(nb_graph_input(g, 0, &x0));
    nb_status s = NB_OK;
    nb_test_count_allocs_begin();
    for (int r = 0; r < 3 && !s; r++) {
        for (int i = 0; i < UNET.n_in && !s; i++)
            s = nb_graph_set_input(g, i, d[i], NB_F32, UNET.ind[i], UNET.inshape[i]);
        if (!s) s = nb_graph_run(g);
        if (!s) s = nb_graph_read(g, loss, &l, 1);
        if (!s) s = nb_graph_read(g, y, yv, 512);
        if (!s) s = nb_graph_read_grad(g, x0, gx, 512);
    }
    nb_test_count_allocs_end();
    NB_EXPECT_OK(s);
    NB_EXPECT(nb_test_allocs == 0);
    free(yv);
    free(gx);
    nb_graph_free(g);
    free_inputs(d);
    nb_tape_free(t);
}

/* ---- errors --------------------------------------------------------------------------------- */

/* A recorded MLP step with backward on a fresh CPU tape (for the replay errors). */
static nb_status mlp_graph(nb_tape **t, nb_tvar *p, nb_graph **g, nb_tvar *y, nb_tvar *loss) {
    nb_status s = make_tape(NULL, &MLP, p, t);
    if (s) return s;
    float **d = make_inputs(&MLP, 0);
    s = record(*t, &MLP, p, d, 1, g, y, loss);
    free_inputs(d);
    return s;
}

static void test_errors_set_input(void) {
    nb_tape *t;
    nb_tvar p[MAXP], y, loss;
    nb_graph *g;
    NB_REQUIRE_OK(mlp_graph(&t, p, &g, &y, &loss));
    float buf[8 * 16] = {0};
    int64_t bad[2] = {8, 8};
    NB_EXPECT_ERR(nb_graph_set_input(g, 0, buf, NB_F32, 2, bad), NB_ERR_SHAPE,
                  "input 0 (value 6, read by node 0 (linear)) has shape [8,8], recorded [8,16]");
    NB_EXPECT_ERR(nb_graph_set_input(g, 0, buf, NB_F32, 1, bad), NB_ERR_SHAPE, "recorded [8,16]");
    NB_EXPECT_ERR(nb_graph_set_input(g, 1, buf, NB_F64, 2, MLP.inshape[1]), NB_ERR_DTYPE,
                  "input 1 (value 7, read by node 6 (mse)) has dtype f64, recorded f32");
    NB_EXPECT_ERR(nb_graph_set_input(g, 0, NULL, NB_F32, 2, MLP.inshape[0]), NB_ERR_INVALID_ARG,
                  "input 0 (value 6, read by node 0 (linear)): data is NULL");
    NB_EXPECT_ERR(nb_graph_set_input(g, 2, buf, NB_F32, 2, MLP.inshape[0]), NB_ERR_INVALID_ARG,
                  "input 2 of 2");
    NB_EXPECT_ERR(nb_graph_set_input_tensor(g, 0, NULL), NB_ERR_INVALID_ARG, "tensor is NULL");
    nb_tensor *bt;
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F32, 2, bad, &bt));
    NB_EXPECT_ERR(nb_graph_set_input_tensor(g, 0, bt), NB_ERR_SHAPE, "has shape [8,8]");
    nb_tensor_free(bt);
    /* a CUDA tensor into a CPU graph */
    if (open_cuda()) {
        NB_REQUIRE_OK(nb_tensor_zeros(g_cuda, NB_F32, 2, MLP.inshape[0], &bt));
        NB_EXPECT_ERR(nb_graph_set_input_tensor(g, 0, bt), NB_ERR_INVALID_ARG,
                      "the graph runs on the CPU");
        nb_tensor_free(bt);
    }
    nb_device_close(cpu);
    nb_graph_free(g);
    nb_tape_free(t);
}

static void test_errors_read(void) {
    nb_tape *t;
    nb_tvar p[MAXP], y, loss;
    nb_graph *g;
    NB_REQUIRE_OK(mlp_graph(&t, p, &g, &y, &loss));
    float v[512];
    NB_EXPECT_ERR(nb_graph_read(g, loss, v, 1), NB_ERR_INVALID_ARG, "has not run yet");
    NB_REQUIRE_OK(nb_graph_run(g));
    NB_EXPECT_OK(nb_graph_read(g, loss, v, 1));
    /* y was not marked: its memory is reused */
    NB_EXPECT_ERR(nb_graph_read(g, y, v, 32), NB_ERR_INVALID_ARG,
                  "value 13 (output of node 5 (linear)) is not an output of the graph");
    NB_EXPECT_ERR(nb_graph_read(g, 9, v, 256), NB_ERR_INVALID_ARG, "value 9 (output of node 1 (silu))");
    NB_EXPECT_ERR(nb_graph_read(g, loss, v, 2), NB_ERR_SHAPE, "count 2");
    NB_EXPECT_ERR(nb_graph_read(g, 999, v, 1), NB_ERR_INVALID_ARG, "not a value of the graph");
    NB_EXPECT_ERR(nb_graph_read_grad(g, 9, v, 256), NB_ERR_INVALID_ARG, "intermediate");
    NB_EXPECT_ERR(nb_graph_read_grad(g, p[0], v, 512), NB_ERR_INVALID_ARG, "nb_tape_read_grads");
    nb_tvar tgt;
    NB_REQUIRE_OK(nb_graph_input(g, 1, &tgt));
    NB_EXPECT_ERR(nb_graph_read_grad(g, tgt, v, 32), NB_ERR_INVALID_ARG, "needs no gradient");
    NB_EXPECT_OK(nb_graph_read(g, tgt, v, 32)); /* inputs are readable */
    NB_EXPECT_ERR(nb_graph_output(g, p[0]), NB_ERR_INVALID_ARG, "parameter 'l1.w'");
    NB_EXPECT_ERR(nb_graph_output(g, 999), NB_ERR_INVALID_ARG, "not a value");
    /* marking y changes the plan: y readable after the next run, and not before */
    NB_EXPECT_OK(nb_graph_output(g, y));
    NB_EXPECT_ERR(nb_graph_read(g, y, v, 32), NB_ERR_INVALID_ARG, "since its plan changed");
    NB_REQUIRE_OK(nb_graph_run(g));
    NB_EXPECT_OK(nb_graph_read(g, y, v, 32));
    nb_graph_free(g);
    nb_tape_free(t);
}

/* The tape freed before the graph: the graph refuses to run (and frees cleanly). */
static void test_errors_tape_freed(void) {
    nb_tape *t;
    nb_tvar p[MAXP], y, loss;
    nb_graph *g;
    NB_REQUIRE_OK(mlp_graph(&t, p, &g, &y, &loss));
    NB_REQUIRE_OK(nb_graph_run(g));
    nb_tape_free(t);
    NB_EXPECT_ERR(nb_graph_run(g), NB_ERR_INVALID_ARG, "tape that recorded the graph was freed");
    float v;
    NB_EXPECT_OK(nb_graph_read(g, loss, &v, 1)); /* the graph's own memory is still there */
    nb_graph_free(g);
    /* and a tape freed while recording */
    NB_REQUIRE_OK(make_tape(NULL, &MLP, p, &t));
    NB_REQUIRE_OK(nb_graph_record_begin(t));
    nb_tape_free(t);
}

/* Starts a recording on a fresh MLP tape; x [8,16] an input, xs its values. */
static nb_status rec_start(nb_tape **t, nb_tvar *p, nb_tvar *x, float *xs) {
    nb_status s = make_tape(NULL, &MLP, p, t);
    if (s) return s;
    for (int i = 0; i < 128; i++) xs[i] = frand();
    if ((s = nb_graph_record_begin(*t))) return s;
    return nb_tape_input(*t, 2, MLP.inshape[0], xs, 1, x);
}

static void test_errors_record(void) {
    nb_tape *t;
    nb_tvar p[MAXP], x, h, h2, l;
    nb_graph *g = (nb_graph *)1;
    float xs[128], v[256];
    /* not recording / twice / nothing recorded */
    NB_REQUIRE_OK(make_tape(NULL, &MLP, p, &t));
    NB_EXPECT_ERR(nb_graph_record_end(t, &g), NB_ERR_INVALID_ARG, "not recording");
    NB_EXPECT(g == NULL);
    NB_REQUIRE_OK(nb_graph_record_begin(t));
    NB_EXPECT_ERR(nb_graph_record_begin(t), NB_ERR_INVALID_ARG, "already recording");
    NB_EXPECT_ERR(nb_graph_record_end(t, &g), NB_ERR_INVALID_ARG, "no op was recorded");
    NB_EXPECT_ERR(nb_graph_record_begin(NULL), NB_ERR_INVALID_ARG, "tape is NULL");
    nb_tape_free(t);

    /* a value made by the timestep embedding (host data), read by an op */
    NB_REQUIRE_OK(rec_start(&t, p, &x, xs));
    nb_tvar e;
    float ts[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    NB_REQUIRE_OK(nb_tape_timestep_embedding(t, 8, ts, 16, 10000.0f, &e));
    NB_REQUIRE_OK(nb_tape_add(t, x, e, &h));
    NB_EXPECT_ERR(nb_graph_record_end(t, &g), NB_ERR_INVALID_ARG,
                  "node 0 (add): input 1 is value 7, made during recording by neither an op nor "
                  "nb_tape_input (e.g. nb_tape_timestep_embedding");
    NB_EXPECT(!nb_graph_recording(t));
    nb_tape_free(t);

    /* a host read of an intermediate before more ops */
    NB_REQUIRE_OK(rec_start(&t, p, &x, xs));
    NB_REQUIRE_OK(nb_tape_linear(t, x, p[0], p[1], &h));
    NB_REQUIRE_OK(nb_tape_read(t, h, v, 256));
    NB_REQUIRE_OK(nb_tape_silu(t, h, &h2));
    NB_EXPECT_ERR(nb_graph_record_end(t, &g), NB_ERR_INVALID_ARG,
                  "value 7 was accessed on the host (nb_tape_read) during recording before node "
                  "1 (silu)");
    nb_tape_free(t);

    /* ... but reading the last op's output (and inputs' values) is fine */
    NB_REQUIRE_OK(rec_start(&t, p, &x, xs));
    NB_REQUIRE_OK(nb_tape_read(t, x, v, 128));
    NB_REQUIRE_OK(nb_tape_linear(t, x, p[0], p[1], &h));
    NB_REQUIRE_OK(nb_tape_read(t, h, v, 256));
    NB_EXPECT_OK(nb_graph_record_end(t, &g));
    nb_graph_free(g);
    nb_tape_free(t);

    /* a raw pointer of an input, then ops (the host may write it) */
    NB_REQUIRE_OK(rec_start(&t, p, &x, xs));
    float *raw;
    NB_REQUIRE_OK(nb_tape_data(t, x, &raw, NULL));
    NB_REQUIRE_OK(nb_tape_linear(t, x, p[0], p[1], &h));
    NB_EXPECT_ERR(nb_graph_record_end(t, &g), NB_ERR_INVALID_ARG, "(nb_tape_data)");
    nb_tape_free(t);

    /* parameter registration during recording */
    nb_tape_create(&t);
    NB_REQUIRE_OK(nb_graph_record_begin(t));
    nb_tvar w;
    NB_REQUIRE_OK(nb_tape_param(t, "late.w", 2, (int64_t[]){4, 4}, &w));
    NB_REQUIRE_OK(nb_tape_input(t, 2, (int64_t[]){2, 4}, xs, 0, &x));
    NB_REQUIRE_OK(nb_tape_linear(t, x, w, NB_TVAR_NONE, &h));
    NB_EXPECT_ERR(nb_graph_record_end(t, &g), NB_ERR_INVALID_ARG,
                  "parameter 'late.w' was registered during recording");
    nb_tape_free(t);

    /* a reset during recording */
    NB_REQUIRE_OK(rec_start(&t, p, &x, xs));
    NB_REQUIRE_OK(nb_tape_linear(t, x, p[0], p[1], &h));
    NB_REQUIRE_OK(nb_tape_reset(t));
    NB_EXPECT_ERR(nb_graph_record_end(t, &g), NB_ERR_INVALID_ARG, "reset during recording");
    nb_tape_free(t);

    /* two backward passes; an op after the backward */
    for (int k = 0; k < 2; k++) {
        NB_REQUIRE_OK(rec_start(&t, p, &x, xs));
        NB_REQUIRE_OK(nb_tape_linear(t, x, p[0], p[1], &h));
        NB_REQUIRE_OK(nb_tape_mse(t, h, h, &l));
        NB_REQUIRE_OK(nb_tape_linear(t, x, p[0], p[1], &h2));
        nb_tvar l2;
        NB_REQUIRE_OK(nb_tape_mse(t, h2, h2, &l2));
        NB_REQUIRE_OK(nb_tape_backward(t, l));
        if (k == 0) {
            NB_REQUIRE_OK(nb_tape_backward(t, l2));
            NB_EXPECT_ERR(nb_graph_record_end(t, &g), NB_ERR_INVALID_ARG,
                          "nb_tape_backward ran 2 times");
        } else {
            NB_REQUIRE_OK(nb_tape_silu(t, h2, &h2));
            NB_EXPECT_ERR(nb_graph_record_end(t, &g), NB_ERR_INVALID_ARG,
                          "node 4 (silu) was recorded after nb_tape_backward");
        }
        nb_tape_free(t);
    }
}

/* ---- the memory plan has teeth -------------------------------------------------------------- */

/* Poison with one lifetime cut short (the plan's mistake simulated): the poisoned run must differ
 * (NaN) from the clean one, so the poisoned-run checks above could fail. */
static void test_poison_catches_short_lifetime(void) {
    nb_tape *t;
    nb_tvar p[MAXP], y, loss;
    NB_REQUIRE_OK(make_tape(NULL, &UNET, p, &t));
    float **d = make_inputs(&UNET, 0);
    nb_graph *g;
    NB_REQUIRE_OK(record(t, &UNET, p, d, 1, &g, &y, &loss));
    NB_REQUIRE_OK(nb_graph_set_poison(g, 1));
    NB_REQUIRE_OK(nb_graph_run(g));
    float l0, l1;
    NB_REQUIRE_OK(nb_graph_read(g, loss, &l0, 1));
    NB_EXPECT(isfinite(l0));
    /* node 0's output (the concat's skip input) ends right after node 0 */
    nb_tvar a = g->nodes[0].out;
    NB_EXPECT(g->gv[a].life[1] > 1);
    g->gv[a].life[1] = 0;
    NB_REQUIRE_OK(nb_graph_run(g));
    NB_REQUIRE_OK(nb_graph_read(g, loss, &l1, 1));
    NB_EXPECT(isnan(l1));
    nb_graph_free(g);
    free_inputs(d);
    nb_tape_free(t);
}

/* Views (a CUDA reshape shares its input's data and gradient through alias1): planned as their
 * root's memory, whose lifetimes grow to cover the views' uses. White-box on the CPU: the
 * aliases are set by hand on a recorded graph and only the plan is inspected. */
static void test_plan_views(void) {
    nb_tape *t;
    nb_tvar p[MAXP], x, h, r, r2, sv, tg, l;
    float xs[128], ts[256];
    NB_REQUIRE_OK(rec_start(&t, p, &x, xs));
    for (int i = 0; i < 256; i++) ts[i] = frand();
    NB_REQUIRE_OK(nb_tape_input(t, 2, (int64_t[]){8, 32}, ts, 0, &tg));
    NB_REQUIRE_OK(nb_tape_linear(t, x, p[0], p[1], &h));                  /* node 0 */
    NB_REQUIRE_OK(nb_tape_reshape(t, h, 1, (int64_t[]){256}, &r));        /* node 1 */
    NB_REQUIRE_OK(nb_tape_reshape(t, r, 2, (int64_t[]){8, 32}, &r2));     /* node 2 */
    NB_REQUIRE_OK(nb_tape_silu(t, r2, &sv));                              /* node 3 */
    NB_REQUIRE_OK(nb_tape_mse(t, sv, tg, &l));                            /* node 4 */
    NB_REQUIRE_OK(nb_tape_backward(t, l));
    nb_graph *g;
    NB_REQUIRE_OK(nb_graph_record_end(t, &g));
    g->vals[r].alias1 = h + 1;
    g->vals[r2].alias1 = r + 1;
    nb_graph_invalidate(g);
    NB_REQUIRE_OK(nb_graph_plan(g));
    NB_EXPECT(g->gv[r].off < 0 && g->gv[r2].off < 0 && g->gv[r].goff < 0 && g->gv[r2].goff < 0);
    NB_EXPECT(g->gv[h].off >= 0 && g->gv[h].goff >= 0);
    /* h's data is read by silu's forward (step 3) and backward (step 10 - 3 = 7) through r2 */
    NB_EXPECT(g->gv[h].life[0] == 0 && g->gv[h].life[1] == 10);
    /* h's gradient is first written by silu's backward (step 7), read by the linear's (10) */
    NB_EXPECT(g->gv[h].glife[0] == 7 && g->gv[h].glife[1] == 10);
    NB_EXPECT(plan_overlaps(g) == 0);
    /* an output view keeps its root alive to the end */
    NB_REQUIRE_OK(nb_graph_output(g, r2));
    NB_REQUIRE_OK(nb_graph_plan(g));
    NB_EXPECT(g->gv[h].life[1] == g->t_end);
    nb_graph_free(g);
    nb_tape_free(t);
}

/* ---- dumps and profiling -------------------------------------------------------------------- */

static void test_dump(void) {
    nb_tape *t;
    nb_tvar p[MAXP], y, loss;
    nb_graph *g;
    NB_REQUIRE_OK(mlp_graph(&t, p, &g, &y, &loss));
    NB_REQUIRE_OK(nb_graph_set_profiling(g, 1));
    NB_REQUIRE_OK(nb_graph_run(g));
    size_t need = 0;
    NB_EXPECT_OK(nb_graph_dump(g, NB_GRAPH_DUMP_TEXT, NULL, 0, &need));
    NB_EXPECT(need > 100);
    char *buf = malloc(need + 1);
    size_t need2 = 0;
    NB_EXPECT_OK(nb_graph_dump(g, NB_GRAPH_DUMP_TEXT, buf, need + 1, &need2));
    NB_EXPECT(need2 == need && strlen(buf) == need);
    NB_EXPECT(strstr(buf, "graph: 7 nodes, 2 inputs, 0 constants, 1 outputs, forward + backward"));
    NB_EXPECT(strstr(buf, "node 0 linear: v6 [8,16] f32 (input), v0 [32,16] 'l1.w', v1 [32] 'l1.b' -> v8 [8,32] f32, 1024 B, fwd "));
    NB_EXPECT(strstr(buf, "node 6 mse:"));
    NB_EXPECT(strstr(buf, "(output)"));
    NB_EXPECT(strstr(buf, "bwd "));
    NB_EXPECT(strstr(buf, "memory: planned peak"));
    char small[16];
    NB_EXPECT_OK(nb_graph_dump(g, NB_GRAPH_DUMP_TEXT, small, sizeof small, &need2));
    NB_EXPECT(strlen(small) == sizeof small - 1 && need2 == need);
    free(buf);
    NB_EXPECT_OK(nb_graph_dump(g, NB_GRAPH_DUMP_DOT, NULL, 0, &need));
    buf = malloc(need + 1);
    NB_EXPECT_OK(nb_graph_dump(g, NB_GRAPH_DUMP_DOT, buf, need + 1, NULL));
    NB_EXPECT(!strncmp(buf, "digraph nabla_graph {", 21));
    NB_EXPECT(strstr(buf, "n0 -> n1 [label=\"[8,32]\"]"));
    NB_EXPECT(strstr(buf, "v6 -> n0"));
    NB_EXPECT(strstr(buf, "label=\"6: mse\\n[1] 4 B"));
    free(buf);
    NB_EXPECT_ERR(nb_graph_dump(g, 0, NULL, 0, NULL), NB_ERR_INVALID_ARG, "flags");
    NB_EXPECT_ERR(nb_graph_dump(g, 8, NULL, 0, NULL), NB_ERR_INVALID_ARG, "flags");
    FILE *f = tmpfile();
    NB_EXPECT_OK(nb_graph_dump_file(g, NB_GRAPH_DUMP_TEXT | NB_GRAPH_DUMP_DOT, f));
    NB_EXPECT(ftell(f) > 200);
    fclose(f);
    NB_EXPECT_ERR(nb_graph_dump_file(g, NB_GRAPH_DUMP_TEXT, NULL), NB_ERR_INVALID_ARG, "NULL");
    nb_graph_free(g);
    nb_tape_free(t);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_mlp_cpu_bitexact, test_unet_cpu_bitexact, test_attn_cpu_bitexact,
                 test_course_cpu_bitexact, test_mlp_cuda, test_unet_cuda, test_unet_cuda_bf16,
                 test_attn_cuda, test_course_cuda, test_profile_cuda,
                 test_plan_views, test_forward_only_and_constant,
                 test_module_rows_cpu_bitexact, test_params_shared, test_steady_state_no_alloc,
                 test_errors_set_input, test_errors_read, test_errors_tape_freed, test_errors_record,
                 test_poison_catches_short_lifetime, test_dump);
}

/* Compiled graphs (nb_graph_compile, src/graph/graph_compile.c): the passes (dead nodes,
 * duplicate nodes, fusion of elementwise chains into generated .nb kernels) on graphs with
 * chains, branches (a value read twice inside a chain; a value read outside it ends the chain),
 * broadcasts (a per-channel add), parameters and GEMM epilogues (linear -> relu); the compiled graph's outputs, loss, input and
 * parameter gradients equal the same recording replayed uncompiled, with the recorded inputs and
 * with new ones, also with poisoned (NaN-filled) dead buffers; the dump names the fused ops and
 * shows the generated source; removed values give errors that say why. CUDA: the same against
 * the CPU (skipped without a GPU; NB_REQUIRE_CUDA=1 makes that a failure).
 *
 * Tolerance: fused kernels compute each element with the rows' f32 operations; sums (mse, the
 * per-channel gradient) run in another order: max |a - b| / (1 + |b|) <= 1e-5. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "device/cuda/cuda_api.h"
#include "nabla/graph.h"
#include "nabla/module.h"
#include "nabla/nn_tape.h"
#include "nb_test.h"

enum { N = 2, C = 3, H = 4, W = 5 };
#define NUMEL ((int64_t)N * C * H * W)
static const int64_t S4[4] = {N, C, H, W}, S2[2] = {N, C};

/* ---- graph A: broadcasts, branches, a duplicate, a dead node, an output inside a chain -------
 *   u = add_channel(x, c); s = silu(u); v = add(s, u)        v is an output: a chain ends there
 *   d1 = silu(z); d2 = silu(z)                              d2 duplicates d1
 *   dead = silu(x)                                          reaches nothing
 *   w = add(v, d1); w2 = add(w, d2); y = silu(w2); loss = mse(y, tgt)
 * Compiled: 1 dead, 1 duplicate, fused [add_channel+silu+add] (u read twice inside) and
 * [silu+add+add+silu+mse] (d1 read twice inside, after the duplicate is gone). */
typedef struct run_out {
    float loss, v[NUMEL], gx[NUMEL], gc[N * C], gz[NUMEL];
} run_out;

typedef struct graph_a {
    nb_tape *t;
    nb_graph *g;
    nb_tvar x, c, z, tgt, v, dead, s, loss;
} graph_a;

static void record_a(nb_device *dev, graph_a *a) {
    static float x[NUMEL], c[N * C], z[NUMEL], tgt[NUMEL];
    nb_test_fill(x, NUMEL, 1, 1.5f), nb_test_fill(c, N * C, 2, 1.5f);
    nb_test_fill(z, NUMEL, 3, 1.5f), nb_test_fill(tgt, NUMEL, 4, 1.5f);
    memset(a, 0, sizeof *a);
    NB_REQUIRE_OK(dev ? nb_tape_create_on(dev, &a->t) : nb_tape_create(&a->t));
    nb_tape *t = a->t;
    nb_tvar u, d1, d2, w, w2, y;
    NB_REQUIRE_OK(nb_graph_record_begin(t));
    NB_EXPECT_OK(nb_tape_input(t, 4, S4, x, 1, &a->x));
    NB_EXPECT_OK(nb_tape_input(t, 2, S2, c, 1, &a->c));
    NB_EXPECT_OK(nb_tape_input(t, 4, S4, z, 1, &a->z));
    NB_EXPECT_OK(nb_tape_input(t, 4, S4, tgt, 0, &a->tgt));
    NB_EXPECT_OK(nb_tape_add_channel(t, a->x, a->c, &u));
    NB_EXPECT_OK(nb_tape_silu(t, u, &a->s));
    NB_EXPECT_OK(nb_tape_add(t, a->s, u, &a->v));
    NB_EXPECT_OK(nb_tape_silu(t, a->z, &d1));
    NB_EXPECT_OK(nb_tape_silu(t, a->z, &d2));
    NB_EXPECT_OK(nb_tape_silu(t, a->x, &a->dead));
    NB_EXPECT_OK(nb_tape_add(t, a->v, d1, &w));
    NB_EXPECT_OK(nb_tape_add(t, w, d2, &w2));
    NB_EXPECT_OK(nb_tape_silu(t, w2, &y));
    NB_EXPECT_OK(nb_tape_mse(t, y, a->tgt, &a->loss));
    NB_EXPECT_OK(nb_tape_backward(t, a->loss));
    NB_REQUIRE_OK(nb_graph_record_end(t, &a->g));
    NB_EXPECT_OK(nb_graph_output(a->g, a->v));
}

static void free_a(graph_a *a) {
    nb_graph_free(a->g);
    nb_tape_free(a->t);
}

/* New inputs (seed) when seed != 0, a run, the results. */
static void run_a(graph_a *a, uint32_t seed, run_out *o) {
    if (seed) {
        static float x[NUMEL], c[N * C], z[NUMEL], tgt[NUMEL];
        nb_test_fill(x, NUMEL, seed, 1.5f), nb_test_fill(c, N * C, seed + 1, 1.5f);
        nb_test_fill(z, NUMEL, seed + 2, 1.5f), nb_test_fill(tgt, NUMEL, seed + 3, 1.5f);
        NB_EXPECT_OK(nb_graph_set_input(a->g, 0, x, NB_F32, 4, S4));
        NB_EXPECT_OK(nb_graph_set_input(a->g, 1, c, NB_F32, 2, S2));
        NB_EXPECT_OK(nb_graph_set_input(a->g, 2, z, NB_F32, 4, S4));
        NB_EXPECT_OK(nb_graph_set_input(a->g, 3, tgt, NB_F32, 4, S4));
    }
    NB_EXPECT_OK(nb_graph_run(a->g));
    NB_EXPECT_OK(nb_graph_read(a->g, a->loss, &o->loss, 1));
    NB_EXPECT_OK(nb_graph_read(a->g, a->v, o->v, NUMEL));
    NB_EXPECT_OK(nb_graph_read_grad(a->g, a->x, o->gx, NUMEL));
    NB_EXPECT_OK(nb_graph_read_grad(a->g, a->c, o->gc, N * C));
    NB_EXPECT_OK(nb_graph_read_grad(a->g, a->z, o->gz, NUMEL));
}

static void compare_a(const char *label, const run_out *a, const run_out *b) {
    char w[128];
#define CMP(f, n)                                                                                        \
    snprintf(w, sizeof w, "%s " #f, label), nb_test_expect_close(w, a->f, b->f, (n), 1e-5)
    CMP(v, NUMEL);
    CMP(gx, NUMEL);
    CMP(gc, N * C);
    CMP(gz, NUMEL);
#undef CMP
    snprintf(w, sizeof w, "%s loss", label);
    nb_test_expect_close(w, &a->loss, &b->loss, 1, 1e-5);
}

static void test_compile_graph_a(void) {
    graph_a ref, cg;
    record_a(NULL, &ref);
    record_a(NULL, &cg);
    nb_graph_compile_stats st;
    NB_REQUIRE_OK(nb_graph_compile(cg.g, NULL, &st));
    NB_EXPECT(st.dead == 1 && st.duplicates == 1 && st.fused_nodes == 2 && st.fused_ops == 8);
    if (!(st.dead == 1 && st.duplicates == 1 && st.fused_nodes == 2 && st.fused_ops == 8))
        fprintf(stderr, "  stats: dead %d dup %d fused %d (%d ops)\n", st.dead, st.duplicates, st.fused_nodes,
                st.fused_ops);
    nb_graph_info info;
    NB_EXPECT_OK(nb_graph_get_info(cg.g, &info));
    NB_EXPECT(info.n_nodes == 2);
    static run_out r0, r1;
    run_a(&ref, 0, &r0); /* the recorded inputs */
    run_a(&cg, 0, &r1);
    compare_a("recorded inputs", &r1, &r0);
    NB_EXPECT(r0.gc[0] != 0.0f && r0.gz[0] != 0.0f && r0.gx[NUMEL - 1] != 0.0f);
    run_a(&ref, 77, &r0); /* new inputs, twice (the prepared calls' second launch) */
    run_a(&cg, 77, &r1);
    compare_a("new inputs", &r1, &r0);
    NB_EXPECT_OK(nb_graph_set_poison(cg.g, 1));
    run_a(&cg, 77, &r1);
    compare_a("poisoned", &r1, &r0);
    /* the dump: fused nodes with the ops they hold, the generated source */
    char *dump = malloc(1 << 16);
    NB_EXPECT_OK(nb_graph_dump(cg.g, NB_GRAPH_DUMP_TEXT | NB_GRAPH_DUMP_DOT, dump, 1 << 16, NULL));
    NB_EXPECT(strstr(dump, "fused[add_channel+silu+add]") != NULL);
    NB_EXPECT(strstr(dump, "fused[silu+add+add+silu+mse]") != NULL);
    NB_EXPECT(strstr(dump, "    [Differentiable]") != NULL && strstr(dump, "    float t1 = t0 / (1.0 + exp(-t0)); // silu") != NULL);
    NB_EXPECT(strstr(dump, "fused kernel of node 0:") != NULL && strstr(dump, "fused kernel of node 1:") != NULL);
    if (!strstr(dump, "fused[add_channel+silu+add]")) fprintf(stderr, "%s", dump);
    free(dump);
    /* removed values say why */
    float buf[NUMEL];
    NB_EXPECT_ERR(nb_graph_read(cg.g, cg.s, buf, NUMEL), NB_ERR_INVALID_ARG, "removed by nb_graph_compile (fused into value");
    NB_EXPECT_ERR(nb_graph_output(cg.g, cg.dead), NB_ERR_INVALID_ARG, "(dead: it reaches no output)");
    NB_EXPECT_ERR(nb_graph_compile(NULL, NULL, NULL), NB_ERR_INVALID_ARG, "graph is NULL");
    /* compiling again changes nothing */
    NB_EXPECT_OK(nb_graph_compile(cg.g, NULL, &st));
    NB_EXPECT(st.dead == 0 && st.duplicates == 0 && st.fused_nodes == 0);
    run_a(&cg, 77, &r1);
    compare_a("compiled twice", &r1, &r0);
    free_a(&ref);
    free_a(&cg);
}

/* Passes one at a time: each alone gives the recorded results. */
static void test_compile_options(void) {
    static run_out r0, r1;
    graph_a ref;
    record_a(NULL, &ref);
    run_a(&ref, 5, &r0);
    for (int pass = 0; pass < 3; pass++) {
        graph_a cg;
        record_a(NULL, &cg);
        nb_graph_compile_options o;
        nb_graph_compile_options_init(&o);
        o.no_dead = pass != 0, o.no_dedup = pass != 1, o.no_fuse = pass != 2, o.no_fold = 1;
        nb_graph_compile_stats st;
        NB_EXPECT_OK(nb_graph_compile(cg.g, &o, &st));
        NB_EXPECT(pass == 0 ? st.dead == 1 && st.duplicates == 0 && st.fused_nodes == 0
                  : pass == 1 ? st.dead == 0 && st.duplicates == 1 && st.fused_nodes == 0
                              : st.dead == 0 && st.duplicates == 0 && st.fused_nodes == 2);
        run_a(&cg, 5, &r1);
        char label[32];
        snprintf(label, sizeof label, "pass %d alone", pass);
        compare_a(label, &r1, &r0);
        free_a(&cg);
    }
    free_a(&ref);
}

/* ---- graph B: linear layers and parameters around fused chains --------------------------------
 *   h1 = linear(x, w1, b1); h2 = linear(x, w2, b2); a = add(silu(h1), h2)    -> fused [silu+add]
 *   y = linear(a, w3, b3); loss = mse(silu(y), tgt)                          -> fused [silu+mse]
 * h1 is read by the silu only; x by both linears (not fusable). Parameter gradients compared. */
static nb_status build_b(nb_tape *t, const nb_tvar *p, nb_tvar x, nb_tvar tgt, nb_tvar *loss) {
    nb_tvar h1, h2, s1, a, y, sy;
    nb_status s;
    if ((s = nb_tape_linear(t, x, p[0], p[1], &h1)) || (s = nb_tape_linear(t, x, p[2], p[3], &h2)) ||
        (s = nb_tape_silu(t, h1, &s1)) || (s = nb_tape_add(t, s1, h2, &a)) ||
        (s = nb_tape_linear(t, a, p[4], p[5], &y)) || (s = nb_tape_silu(t, y, &sy)))
        return s;
    return nb_tape_mse(t, sy, tgt, loss);
}

/* ---- graph D: GEMM epilogues and relu chains ------------------------------------------------------
 *   h1 = linear(x, w1, b1); r1 = relu(h1); e = add(r1, h1)   h1 read twice: no epilogue; fused [relu+add]
 *   y = linear(e, w3, b3); r2 = relu(y)                        epilogue: one linear_relu
 *   loss = mse(relu(add(r2, tgt)), tgt)                        fused [add+relu+mse] */
static nb_status build_d(nb_tape *t, const nb_tvar *p, nb_tvar x, nb_tvar tgt, nb_tvar *loss) {
    nb_tvar h1, r1, e, y, r2, a, ra;
    nb_status s;
    if ((s = nb_tape_linear(t, x, p[0], p[1], &h1)) || (s = nb_tape_relu(t, h1, &r1)) ||
        (s = nb_tape_add(t, r1, h1, &e)) || (s = nb_tape_linear(t, e, p[4], p[5], &y)) ||
        (s = nb_tape_relu(t, y, &r2)) || (s = nb_tape_add(t, r2, tgt, &a)) || (s = nb_tape_relu(t, a, &ra)))
        return s;
    return nb_tape_mse(t, ra, tgt, loss);
}

/* The backward from l, the end of the recording, and (compile) nb_graph_compile into *st. */
static nb_graph *finish(nb_tape *t, nb_tvar l, int compile, nb_graph_compile_stats *st) {
    nb_graph *g = NULL;
    memset(st, 0, sizeof *st);
    NB_EXPECT_OK(nb_tape_backward(t, l));
    NB_EXPECT_OK(nb_graph_record_end(t, &g));
    if (g && compile) NB_EXPECT_OK(nb_graph_compile(g, NULL, st));
    return g;
}

typedef nb_status (*build_fn)(nb_tape *t, const nb_tvar *p, nb_tvar x, nb_tvar tgt, nb_tvar *loss);

static void run_b(nb_device *dev, build_fn build, int compile, float *loss, float *grads, int64_t *np) {
    static const int64_t ps[6][2] = {{12, 6}, {12, 0}, {12, 6}, {12, 0}, {4, 12}, {4, 0}};
    static float x[7 * 6], tgt[7 * 4];
    nb_test_fill(x, 7 * 6, 11, 1.5f), nb_test_fill(tgt, 7 * 4, 12, 1.5f);
    nb_tape *t;
    NB_REQUIRE_OK(dev ? nb_tape_create_on(dev, &t) : nb_tape_create(&t));
    nb_tvar p[6], xv, tv, l;
    for (int i = 0; i < 6; i++) {
        char name[8];
        snprintf(name, sizeof name, "p%d", i);
        NB_EXPECT_OK(nb_tape_param(t, name, ps[i][1] ? 2 : 1, ps[i], &p[i]));
        NB_EXPECT_OK(nb_tape_param_init_uniform(t, p[i], 0.5f, 100u + (uint64_t)i));
    }
    NB_REQUIRE_OK(nb_graph_record_begin(t));
    NB_EXPECT_OK(nb_tape_input(t, 2, (int64_t[]){7, 6}, x, 0, &xv));
    NB_EXPECT_OK(nb_tape_input(t, 2, (int64_t[]){7, 4}, tgt, 0, &tv));
    NB_EXPECT_OK(build(t, p, xv, tv, &l));
    nb_graph_compile_stats st;
    nb_graph *g = finish(t, l, compile, &st);
    if (!g) return;
    if (compile) {
        if (build == build_b) NB_EXPECT(st.fused_nodes == 2 && st.fused_ops == 4 && st.epilogues == 0);
        else NB_EXPECT(st.fused_nodes == 2 && st.fused_ops == 5 && st.epilogues == 1);
    }
    for (int rep = 0; rep < 2; rep++) {
        NB_EXPECT_OK(nb_tape_zero_grad(t));
        NB_EXPECT_OK(nb_graph_run(g));
    }
    NB_EXPECT_OK(nb_graph_read(g, l, loss, 1));
    float *gp;
    NB_EXPECT_OK(nb_tape_grads(t, &gp, np));
    NB_EXPECT_OK(nb_tape_read_grads(t, grads, *np));
    nb_graph_free(g);
    nb_tape_free(t);
}

static void test_compile_graph_b_d(void) {
    static float g0[1024], g1[1024];
    float l0, l1;
    int64_t n0, n1;
    for (int d = 0; d < 2; d++) {
        build_fn b = d ? build_d : build_b;
        run_b(NULL, b, 0, &l0, g0, &n0);
        run_b(NULL, b, 1, &l1, g1, &n1);
        NB_EXPECT(n0 == n1 && n0 == 6 * 12 + 12 + 6 * 12 + 12 + 4 * 12 + 4);
        nb_test_expect_close(d ? "d loss" : "b loss", &l1, &l0, 1, 1e-5);
        nb_test_expect_close(d ? "d parameter gradients" : "b parameter gradients", g1, g0, n0, 1e-5);
        NB_EXPECT(l0 > 0.0f);
    }
}

/* ---- graph C: constant folding ------------------------------------------------------------------
 * k: an activation made before recording (a constant of the graph);
 *   k2 = silu(k); k3 = add(k2, k)            -> folded (constants in, no gradient)
 *   y = add(x, k3); loss = mse(silu(y), tgt)  -> fused [add+silu+mse] reading x, k3, tgt */
static void run_c(int compile, float *loss, float *gx, float *k3out) {
    static float k[NUMEL], x[NUMEL], tgt[NUMEL];
    nb_test_fill(k, NUMEL, 21, 1.5f), nb_test_fill(x, NUMEL, 22, 1.5f), nb_test_fill(tgt, NUMEL, 23, 1.5f);
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    nb_tvar kv, xv, tv, k2, k3, y, sy, l;
    NB_EXPECT_OK(nb_tape_input(t, 4, S4, k, 0, &kv));
    NB_REQUIRE_OK(nb_graph_record_begin(t));
    NB_EXPECT_OK(nb_tape_input(t, 4, S4, x, 1, &xv));
    NB_EXPECT_OK(nb_tape_input(t, 4, S4, tgt, 0, &tv));
    NB_EXPECT_OK(nb_tape_silu(t, kv, &k2));
    NB_EXPECT_OK(nb_tape_add(t, k2, kv, &k3));
    NB_EXPECT_OK(nb_tape_add(t, xv, k3, &y));
    NB_EXPECT_OK(nb_tape_silu(t, y, &sy));
    NB_EXPECT_OK(nb_tape_mse(t, sy, tv, &l));
    NB_EXPECT_OK(nb_tape_backward(t, l));
    nb_graph *g;
    NB_REQUIRE_OK(nb_graph_record_end(t, &g));
    NB_EXPECT_OK(nb_graph_output(g, k3));
    if (compile) {
        nb_graph_compile_stats st;
        NB_EXPECT_OK(nb_graph_compile(g, NULL, &st));
        NB_EXPECT(st.folded == 2 && st.fused_nodes == 1 && st.fused_ops == 3);
        nb_graph_info info;
        NB_EXPECT_OK(nb_graph_get_info(g, &info));
        NB_EXPECT(info.n_nodes == 1 && info.n_consts == 3);
        /* folded before any run: the constant is readable at once */
        NB_EXPECT_OK(nb_graph_read(g, k3, k3out, NUMEL));
    }
    NB_EXPECT_OK(nb_graph_run(g));
    NB_EXPECT_OK(nb_graph_run(g));
    NB_EXPECT_OK(nb_graph_read(g, l, loss, 1));
    NB_EXPECT_OK(nb_graph_read_grad(g, xv, gx, NUMEL));
    if (!compile) NB_EXPECT_OK(nb_graph_read(g, k3, k3out, NUMEL));
    nb_graph_free(g);
    nb_tape_free(t);
}

static void test_compile_fold(void) {
    static float g0[NUMEL], g1[NUMEL], k0[NUMEL], k1[NUMEL];
    float l0, l1;
    run_c(0, &l0, g0, k0);
    run_c(1, &l1, g1, k1);
    nb_test_expect_close("folded constant", k1, k0, NUMEL, 0.0); /* the same row: bit for bit */
    nb_test_expect_close("loss", &l1, &l0, 1, 1e-5);
    nb_test_expect_close("dx", g1, g0, NUMEL, 1e-5);
}

/* ---- graph E: a user function inlined (the CALL row) ---------------------------------------------
 *   h = silu(x); a = softplus(h, 2.0) (a .nb function, a CALL node); y = add(a, x); mse(y, tgt)
 * compiled: one fused node [silu+call(softplus)+add+mse]; the function's module loaded from a
 * string (its text goes into the generated module) and from a file (imported). */
static const char *SOFTPLUS = "[Differentiable]\nfloat softplus(float x, float beta)\n{\n"
                              "    return log(1.0 + exp(beta * x)) / beta;\n}\n";

static void run_e(int from_file, int compile, float *loss, float *gx, char *dump, size_t cap) {
    static float x[NUMEL], tgt[NUMEL];
    nb_test_fill(x, NUMEL, 31, 1.5f), nb_test_fill(tgt, NUMEL, 32, 1.5f);
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    nb_module *m = NULL;
    if (from_file) {
        const char *path = "/tmp/nb_test_graph_compile_act.nb";
        FILE *f = fopen(path, "w");
        NB_REQUIRE_OK(f ? NB_OK : NB_ERR_IO);
        fputs(SOFTPLUS, f);
        fclose(f);
        NB_REQUIRE_OK(nb_module_load(nb_tape_device(t), path, NULL, &m));
    } else {
        NB_REQUIRE_OK(nb_module_load_source(nb_tape_device(t), "act.nb", SOFTPLUS, NULL, &m));
    }
    nb_func *sp;
    NB_REQUIRE_OK(nb_module_func(m, "softplus", &sp));
    nb_tvar xv, tv, h, a, y, l;
    NB_REQUIRE_OK(nb_graph_record_begin(t));
    NB_EXPECT_OK(nb_tape_input(t, 4, S4, x, 1, &xv));
    NB_EXPECT_OK(nb_tape_input(t, 4, S4, tgt, 0, &tv));
    NB_EXPECT_OK(nb_tape_silu(t, xv, &h));
    NB_EXPECT_OK(nb_tape_call_scalars(t, sp, 2, (nb_tvar[]){h, NB_TVAR_NONE}, (double[]){0, 2.0}, &a));
    NB_EXPECT_OK(nb_tape_add(t, a, xv, &y));
    NB_EXPECT_OK(nb_tape_mse(t, y, tv, &l));
    nb_graph_compile_stats st;
    nb_graph *g = finish(t, l, compile, &st);
    if (!g) return;
    if (compile) {
        NB_EXPECT(st.fused_nodes == 1 && st.fused_ops == 4);
        NB_EXPECT_OK(nb_graph_dump(g, NB_GRAPH_DUMP_TEXT, dump, cap, NULL));
    }
    NB_EXPECT_OK(nb_graph_run(g));
    NB_EXPECT_OK(nb_graph_run(g));
    NB_EXPECT_OK(nb_graph_read(g, l, loss, 1));
    NB_EXPECT_OK(nb_graph_read_grad(g, xv, gx, NUMEL));
    nb_graph_free(g);
    nb_tape_free(t);
    nb_module_free(m);
}

static void test_compile_call(void) {
    static float g0[NUMEL], g1[NUMEL];
    static char dump[1 << 14];
    float l0, l1;
    for (int file = 0; file < 2; file++) {
        run_e(file, 0, &l0, g0, NULL, 0);
        run_e(file, 1, &l1, g1, dump, sizeof dump);
        nb_test_expect_close(file ? "file module loss" : "source module loss", &l1, &l0, 1, 1e-5);
        nb_test_expect_close(file ? "file module dx" : "source module dx", g1, g0, NUMEL, 1e-5);
        NB_EXPECT(strstr(dump, "fused[silu+call(softplus)+add+mse]") != NULL);
        NB_EXPECT(strstr(dump, "    float t1 = softplus(t0, 2.0); // call") != NULL);
        NB_EXPECT(strstr(dump, file ? "import \"nb_test_graph_compile_act\";" : "inlined ----") != NULL);
        if (!strstr(dump, "call(softplus)")) fprintf(stderr, "%s", dump);
    }
    remove("/tmp/nb_test_graph_compile_act.nb");
}

/* ---- CUDA: compiled on the GPU against recorded on the CPU ------------------------------------- */

static void test_compile_cuda(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *gpu;
    NB_REQUIRE_OK(nb_device_open("cuda", &gpu));
    graph_a ref, cg;
    record_a(NULL, &ref);
    record_a(gpu, &cg);
    nb_graph_compile_stats st;
    NB_REQUIRE_OK(nb_graph_compile(cg.g, NULL, &st));
    NB_EXPECT(st.fused_nodes == 2);
    static run_out r0, r1;
    for (int rep = 0; rep < 4; rep++) { /* from the third run on: one CUDA graph */
        run_a(&ref, 9, &r0);
        run_a(&cg, 9, &r1);
        compare_a("cuda", &r1, &r0);
    }
    nb_graph_info info;
    NB_EXPECT_OK(nb_graph_get_info(cg.g, &info));
    NB_EXPECT(info.cuda_graph == 2);
    free_a(&cg);
    free_a(&ref);
    static float g0[1024], g1[1024];
    float l0, l1;
    int64_t n0, n1;
    for (int d = 0; d < 2; d++) {
        run_b(NULL, d ? build_d : build_b, 0, &l0, g0, &n0);
        run_b(gpu, d ? build_d : build_b, 1, &l1, g1, &n1);
        nb_test_expect_close(d ? "cuda loss d" : "cuda loss b", &l1, &l0, 1, 1e-4);
        nb_test_expect_close(d ? "cuda parameter gradients d" : "cuda parameter gradients b", g1, g0, n0, 1e-4);
    }
    nb_device_close(gpu);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_compile_graph_a, test_compile_options, test_compile_graph_b_d, test_compile_fold, test_compile_call,
                 test_compile_cuda);
}

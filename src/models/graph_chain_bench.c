/* Benchmark 2 of issue #17 (include/nabla/graph_chain_bench.h): a chain of user .nb functions
 * (CALL ops) and library ops (linear, mse), one training step timed as an immediate tape, a
 * recorded graph and a compiled graph (node by node and as one CUDA graph), with the kernels of
 * a step counted from a captured CUDA graph and every row checked against the immediate one. */
#include "nabla/graph_chain_bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/bench_clock.h"
#include "nabla/device.h"
#include "nabla/graph.h"
#include "nabla/module.h"
#include "nabla/nn_tape.h"
#include "nabla/tensor.h"

static const char *const row_names[NB_GC_ROWS] = {
    [NB_GC_IMMEDIATE] = "immediate",
    [NB_GC_RECORDED] = "recorded",
    [NB_GC_RECORDED_CG] = "recorded_cuda_graph",
    [NB_GC_COMPILED] = "compiled",
    [NB_GC_COMPILED_CG] = "compiled_cuda_graph",
};

const char *nb_graph_chain_row_name(int row) {
    return row >= 0 && row < NB_GC_ROWS ? row_names[row] : NULL;
}

void nb_graph_chain_defaults(nb_graph_chain_opts *o) {
    memset(o, 0, sizeof *o);
    o->device = "cuda";
    o->module = "examples/graph_chain.nb";
    o->act = "chain_act";
    o->norm = "chain_norm";
    o->rows = (int64_t)1 << 20;
    o->width = 64;
    o->steps = 20;
    o->warmup = 3;
    o->precision = NB_TAPE_FP32;
    o->seed = 17;
}

/* ---- data --------------------------------------------------------------------------------- */

/* splitmix64 -> uniform [-1, 1) */
static float unif(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((double)(z >> 40) / 8388608.0 - 1.0);
}

/* What every row shares: the device, the user functions, the parameters (host, tape order
 * w1 [F,F], b1 [F], g [F], w2 [F,F], b2 [F]) and the resident data x, target [N,F]. */
typedef struct chain {
    nb_device *dev;
    int cuda;
    nb_module *mod;
    nb_func *act, *norm;
    int64_t N, F, n_params;
    float *params;
    nb_tensor *x, *target;
    int precision;
} chain;

/* One row's state: its tape (parameters registered), the graph (graph rows), the handles. */
typedef struct row_ctx {
    const chain *c;
    nb_tape *t;
    nb_tvar w1, b1, g, w2, b2, loss;
    nb_graph *gr;
} row_ctx;

static nb_status row_tape(row_ctx *r) {
    const chain *c = r->c;
    nb_status s = nb_tape_create_on(c->dev, &r->t);
    if (!s) s = nb_tape_param(r->t, "w1", 2, (int64_t[]){c->F, c->F}, &r->w1);
    if (!s) s = nb_tape_param(r->t, "b1", 1, (int64_t[]){c->F}, &r->b1);
    if (!s) s = nb_tape_param(r->t, "g", 1, (int64_t[]){c->F}, &r->g);
    if (!s) s = nb_tape_param(r->t, "w2", 2, (int64_t[]){c->F, c->F}, &r->w2);
    if (!s) s = nb_tape_param(r->t, "b2", 1, (int64_t[]){c->F}, &r->b2);
    if (!s) s = nb_tape_set_precision(r->t, (nb_tape_precision)c->precision);
    if (!s) s = nb_tape_write_params(r->t, c->params, c->n_params);
    return s;
}

/* The chain's forward and backward on r->t from new input values (r->loss: the loss). */
static nb_status chain_ops(row_ctx *r) {
    const chain *c = r->c;
    nb_tvar x, tgt, h;
    nb_status s = nb_tape_input_tensor(r->t, c->x, 0, &x);
    if (!s) s = nb_tape_input_tensor(r->t, c->target, 0, &tgt);
    if (!s) s = nb_tape_call(r->t, c->act, 1, &x, &h);                      /* [N,F] */
    if (!s) s = nb_tape_linear(r->t, h, r->w1, r->b1, &h);                  /* [N,F] */
    if (!s) s = nb_tape_call(r->t, c->norm, 2, (nb_tvar[]){h, r->g}, &h);    /* g [F] broadcast */
    if (!s) s = nb_tape_linear(r->t, h, r->w2, r->b2, &h);
    if (!s) s = nb_tape_mse(r->t, h, tgt, &r->loss);                         /* [1] */
    if (!s) s = nb_tape_backward(r->t, r->loss);
    return s;
}

/* One step of a row (queued; not synchronised). */
static nb_status row_step(row_ctx *r) {
    nb_status s = nb_tape_zero_grad(r->t);
    if (s) return s;
    if (r->gr) return nb_graph_run(r->gr);
    s = nb_tape_reset(r->t);
    return s ? s : chain_ops(r);
}

/* Graph rows: the step recorded once; compiled when asked (NULL opts: every pass). */
static nb_status row_graph(row_ctx *r, int compile, int cuda_graph, nb_graph_compile_stats *st) {
    nb_status s = nb_graph_record_begin(r->t);
    if (s) return s;
    s = chain_ops(r);
    nb_status e = nb_graph_record_end(r->t, &r->gr);
    if (!s) s = e;
    if (!s && compile) s = nb_graph_compile(r->gr, NULL, st); /* every pass */
    if (!s) s = nb_graph_set_cuda_graph(r->gr, cuda_graph);
    return s;
}


/* The kernels of one step: the step captured as a CUDA graph (never launched; a graph row runs
 * node by node inside the capture), its kernel nodes counted. A step that cannot be captured
 * leaves kernels at -1 and says why (the benchmark goes on). */
static void count_kernels(row_ctx *r, nb_graph_chain_row_result *out) {
    out->kernels = -1;
    nb_device *dev = r->c->dev;
    nb_graph_info gi = {0};
    if (r->gr && (nb_graph_get_info(r->gr, &gi) || nb_graph_set_cuda_graph(r->gr, 0))) goto fail;
    nb_status s = nb_device_synchronize(dev);
    if (!s) s = nb_device_graph_capture_begin(dev);
    if (s) goto fail;
    nb_status s1 = row_step(r);
    char why[200] = "";
    if (s1) snprintf(why, sizeof why, "%s", nb_last_error());
    nb_device_graph *dg = NULL;
    nb_status s2 = nb_device_graph_capture_end(dev, &dg);
    if (!s1 && !s2) s2 = nb_device_graph_count(dg, &out->kernels, NULL);
    nb_device_graph_destroy(dg);
    if (r->gr) nb_graph_set_cuda_graph(r->gr, gi.cuda_graph != 0);
    if (s1 || s2) {
        out->kernels = -1;
        /* (the reason is cut to what fits: "%.160s" keeps gcc's -Wformat-truncation quiet) */
        snprintf(out->why, sizeof out->why, "capture failed: %.160s", s1 ? why : nb_last_error());
        nb_clear_error();
    }
    return;
fail:
    snprintf(out->why, sizeof out->why, "capture failed: %s", nb_last_error());
    nb_clear_error();
}

/* Reads the checked step's loss and parameter gradients (grad: n_params floats). */
static nb_status row_read(row_ctx *r, double *loss, float *grad) {
    float l = 0;
    nb_status s = r->gr ? nb_graph_read(r->gr, r->loss, &l, 1) : nb_tape_read(r->t, r->loss, &l, 1);
    if (!s) s = nb_tape_read_grads(r->t, grad, r->c->n_params);
    *loss = l;
    return s;
}

/* max |a - b| / max |ref| over one parameter's slice */
static double rel_diff(const float *a, const float *ref, int64_t n) {
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)ref[i]);
        if (!(e <= d)) d = e; /* NaN wins */
        if (fabs((double)ref[i]) > m) m = fabs((double)ref[i]);
    }
    return m > 0 ? d / m : d;
}

/* Runs one row: set up, warm up, check one step from zeroed gradients against ref (the
 * immediate row's loss / gradients; NULL: this is the immediate row, fill them), time, count. */
static nb_status run_row(const chain *c, int row, const nb_graph_chain_opts *o,
                         nb_graph_chain_row_result *res, double *ref_loss, float *ref_grad,
                         nb_graph_compile_stats *st) {
    memset(res, 0, sizeof *res);
    res->kernels = -1;
    res->err = NAN;
    if ((row == NB_GC_RECORDED_CG || row == NB_GC_COMPILED_CG) && !c->cuda) return NB_OK;
    row_ctx r = {.c = c, .loss = NB_TVAR_NONE};
    float *grad = malloc(sizeof(float) * (size_t)c->n_params);
    double *t = malloc(sizeof(double) * (size_t)o->steps);
    nb_status s = grad && t ? NB_OK : nb_error(NB_ERR_OUT_OF_MEMORY, "graph bench-chain: row buffers");
    if (!s) s = row_tape(&r);
    if (!s && row != NB_GC_IMMEDIATE)
        s = row_graph(&r, row == NB_GC_COMPILED || row == NB_GC_COMPILED_CG,
                      row == NB_GC_RECORDED_CG || row == NB_GC_COMPILED_CG, st);
    for (int i = 0; i < o->warmup && !s; i++) s = row_step(&r);
    if (!s) s = row_step(&r); /* the checked step: gradients of this step only */
    if (!s) s = row_read(&r, &res->loss, grad);
    if (!s && row == NB_GC_IMMEDIATE) {
        *ref_loss = res->loss;
        memcpy(ref_grad, grad, sizeof(float) * (size_t)c->n_params);
    }
    if (!s) {
        double e = fabs(res->loss - *ref_loss) / fmax(fabs(*ref_loss), 1e-30);
        const int64_t F = c->F, seg[5] = {F * F, F, F, F * F, F};
        int64_t off = 0;
        for (int k = 0; k < 5; k++) {
            double d = rel_diff(grad + off, ref_grad + off, seg[k]);
            if (!(d <= e)) e = d;
            off += seg[k];
        }
        res->err = e;
        if (!(e <= 1e-3))
            s = nb_error(NB_ERR_INTERNAL, "graph bench-chain: %s differs from immediate mode by %g "
                         "(relative; loss %g vs %g)", row_names[row], e, res->loss, *ref_loss);
    }
    for (int i = 0; i < o->steps && !s; i++) {
        double t0 = nb_bench_now_ms();
        s = row_step(&r);
        if (!s) s = nb_device_synchronize(c->dev);
        t[i] = nb_bench_now_ms() - t0;
    }
    if (!s) {
        res->ms = nb_bench_median(t, o->steps);
        res->ran = 1;
        if (r.gr) {
            nb_graph_info gi;
            s = nb_graph_get_info(r.gr, &gi);
            res->nodes = gi.n_nodes;
            res->cuda_graph = gi.cuda_graph == 2;
        } else {
            nb_tape_stats ts;
            s = nb_tape_get_stats(r.t, &ts);
            res->nodes = ts.n_ops;
        }
    }
    if (!s && c->cuda) count_kernels(&r, res);
    nb_graph_free(r.gr);
    nb_tape_free(r.t);
    free(grad);
    free(t);
    return s;
}

static void chain_free(chain *c) {
    nb_tensor_free(c->x);
    nb_tensor_free(c->target);
    free(c->params);
    nb_module_free(c->mod);
    if (c->dev) nb_device_close(c->dev);
}

static nb_status chain_make(const nb_graph_chain_opts *o, chain *c) {
    memset(c, 0, sizeof *c);
    c->N = o->rows, c->F = o->width, c->precision = o->precision;
    nb_status s = nb_device_open(o->device ? o->device : "cuda", &c->dev);
    if (s) return s;
    c->cuda = nb_device_get_info(c->dev)->kind == NB_DEVICE_CUDA;
    s = nb_module_load(c->dev, o->module, NULL, &c->mod);
    if (!s) s = nb_module_func(c->mod, o->act, &c->act);
    if (!s) s = nb_module_func(c->mod, o->norm, &c->norm);
    if (s) return s;
    const int64_t N = c->N, F = c->F;
    c->n_params = 2 * F * F + 3 * F;
    c->params = malloc(sizeof(float) * (size_t)c->n_params);
    float *h = malloc(sizeof(float) * (size_t)(N * F));
    if (!c->params || !h) {
        free(h);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "graph bench-chain: %lld x %lld floats", (long long)N,
                        (long long)F);
    }
    /* weights +-sqrt(3/F) (unit gain), biases +-0.1, gains 1 +- 0.25; x in +-2 (GELU's curved
     * part), target in +-0.5 */
    uint64_t r = o->seed * 0x2545F4914F6CDD1Dull + 2;
    float a = sqrtf(3.0f / (float)F), *p = c->params;
    for (int l = 0; l < 2; l++) {
        for (int64_t i = 0; i < F * F; i++) *p++ = a * unif(&r);
        for (int64_t i = 0; i < F; i++) *p++ = 0.1f * unif(&r);
        if (l == 0)
            for (int64_t i = 0; i < F; i++) *p++ = 1.0f + 0.25f * unif(&r);
    }
    const int64_t shape[2] = {N, F};
    for (int64_t i = 0; i < N * F; i++) h[i] = 2.0f * unif(&r);
    s = nb_tensor_from_host(c->dev, NB_F32, 2, shape, h, &c->x);
    for (int64_t i = 0; i < N * F && !s; i++) h[i] = 0.5f * unif(&r);
    if (!s) s = nb_tensor_from_host(c->dev, NB_F32, 2, shape, h, &c->target);
    free(h);
    return s;
}

nb_status nb_graph_chain_run(const nb_graph_chain_opts *o, nb_graph_chain_result *r, FILE *progress) {
    if (!o || !r) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_chain_run: NULL options or result");
    memset(r, 0, sizeof *r);
    if (o->rows < 1 || o->width < 1 || o->width > 65536 || o->rows > ((int64_t)1 << 40) / o->width ||
        o->steps < 1 || o->warmup < 0 || !o->module || !o->act || !o->norm)
        return nb_error(NB_ERR_INVALID_ARG, "nb_graph_chain_run: rows %lld, width %lld, steps %d, "
                        "warmup %d, module %s (rows, width, steps >= 1, rows x width <= 2^40, width "
                        "<= 65536, warmup >= 0, module and function names given)", (long long)o->rows,
                        (long long)o->width, o->steps, o->warmup, o->module ? o->module : "NULL");
    if (o->precision != NB_TAPE_FP32 && o->precision != NB_TAPE_TF32)
        return nb_error(NB_ERR_INVALID_ARG, "nb_graph_chain_run: precision %d (FP32 or TF32: the "
                        "benchmark is f32)", o->precision);
    chain c;
    nb_status s = chain_make(o, &c);
    if (!s) {
        const nb_device_info *info = nb_device_get_info(c.dev);
        snprintf(r->device, sizeof r->device, "%s (%s)", nb_device_name(c.dev), info->name);
        snprintf(r->act, sizeof r->act, "%s", o->act);
        snprintf(r->norm, sizeof r->norm, "%s", o->norm);
        snprintf(r->module, sizeof r->module, "%s", o->module);
        r->rows = o->rows, r->width = o->width, r->precision = o->precision, r->steps = o->steps;
        r->gflop = 12.0 * (double)o->rows * (double)o->width * (double)o->width / 1e9;
    }
    double ref_loss = 0;
    float *ref_grad = s ? NULL : malloc(sizeof(float) * (size_t)c.n_params);
    if (!s && !ref_grad) s = nb_error(NB_ERR_OUT_OF_MEMORY, "graph bench-chain: gradients");
    nb_graph_compile_stats st = {0};
    for (int row = 0; row < NB_GC_ROWS && !s; row++) {
        s = run_row(&c, row, o, &r->row[row], &ref_loss, ref_grad, &st);
        if (!s && progress && r->row[row].ran)
            fprintf(progress, "  %-20s %10.4f ms/step\n", row_names[row], r->row[row].ms);
    }
    r->compile_dead = st.dead, r->compile_duplicates = st.duplicates;
    r->compile_epilogues = st.epilogues, r->compile_fused_nodes = st.fused_nodes;
    r->compile_fused_ops = st.fused_ops;
    free(ref_grad);
    chain_free(&c);
    return s;
}

void nb_graph_chain_print(const nb_graph_chain_result *r, FILE *f) {
    fprintf(f, "# nabla graph bench-chain: %s, %lld rows x %lld features, f32 (%s GEMMs), median of "
            "%d steps (zero grads + forward + backward)\n", r->device, (long long)r->rows,
            (long long)r->width, r->precision == NB_TAPE_TF32 ? "tf32" : "fp32", r->steps);
    fprintf(f, "# x -> %s (.nb) -> linear -> %s(., g) (.nb) -> linear -> mse; user functions: %s; "
            "GEMMs %.2f GFLOP per step\n", r->act, r->norm, r->module, r->gflop);
    fprintf(f, "# nodes: forward op rows per step; kernels: CUDA kernels of one step captured as a "
            "CUDA graph; max_rel_err: vs immediate\n");
    fprintf(f, "%-20s %10s %6s %8s %14s %12s\n", "row", "ms_step", "nodes", "kernels", "loss",
            "max_rel_err");
    for (int k = 0; k < NB_GC_ROWS; k++) {
        const nb_graph_chain_row_result *w = &r->row[k];
        if (!w->ran) {
            fprintf(f, "%-20s %10s %6s %8s %14s %12s\n", row_names[k], "-", "-", "-", "-", "-");
            continue;
        }
        char kern[32] = "-";
        if (w->kernels >= 0) snprintf(kern, sizeof kern, "%lld", (long long)w->kernels);
        fprintf(f, "%-20s %10.4f %6d %8s %14.7g %12.3g\n", row_names[k], w->ms, w->nodes, kern,
                w->loss, w->err);
    }
    if (r->row[NB_GC_COMPILED].ran)
        fprintf(f, "# compiled: %d fused nodes replacing %d, %d GEMM epilogues, %d dead, %d duplicate "
                "nodes removed\n", r->compile_fused_nodes, r->compile_fused_ops, r->compile_epilogues,
                r->compile_dead, r->compile_duplicates);
    for (int k = 0; k < NB_GC_ROWS; k++) {
        if (r->row[k].why[0]) fprintf(f, "# %s: kernels not counted: %s\n", row_names[k], r->row[k].why);
        if ((k == NB_GC_RECORDED_CG || k == NB_GC_COMPILED_CG) && r->row[k].ran && !r->row[k].cuda_graph)
            fprintf(f, "# %s: NOT replayed as one CUDA graph (a node could not be captured)\n",
                    row_names[k]);
    }
}

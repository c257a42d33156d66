/* The course's computational-graph benchmark (include/nabla/graph_bench.h): random graphs of
 * Linear / ReLU operators ending in ReLU + softmax, run on the CPU tape, on CUDA tapes in
 * immediate mode (fresh tape per run / one kept tape), timed per run, with the cuBLAS GEMM floor;
 * recorded and compiled graphs (include/nabla/graph.h) replayed; the table and the two plots. */
#include "nabla/graph_bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/cublas.h"
#include "models/bench_clock.h"
#include "nabla/device.h"
#include "nabla/graph.h"
#include "nabla/image.h"
#include "nabla/nn_tape.h"

static const char *const row_names[NB_GB_ROWS] = {
    [NB_GB_CPU] = "cpu",           [NB_GB_IMMEDIATE] = "immediate",
    [NB_GB_IMMEDIATE_CACHED] = "immediate_cached", [NB_GB_RECORDED] = "recorded",
    [NB_GB_COMPILED] = "compiled", [NB_GB_COMPILED_REPLAY] = "compiled_replay",
};

const char *nb_graph_bench_row_name(int row) {
    return row >= 0 && row < NB_GB_ROWS ? row_names[row] : NULL;
}

void nb_graph_bench_defaults(nb_graph_bench_opts *o) {
    memset(o, 0, sizeof *o);
    o->device = "cuda";
    for (int i = 0; i < 8; i++) o->sizes[o->n_sizes++] = (int64_t)32 << i;     /* 32 .. 4096 */
    for (int i = 0; i < 10; i++) o->depths[o->n_depths++] = (int64_t)2 << i;  /* 2 .. 1024 */
    o->depth = 64;
    o->size = 256;
    o->samples = 10;
    o->replay = 10;
    o->precision = NB_TAPE_FP32;
    o->seed = 17;
    o->cpu_max_gflop = 10.0;
}

/* ---- the graphs -------------------------------------------------------------------------------- */

/* splitmix64 (ref_graph.py has the same lines) */
static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* uniform [-1, 1) */
static float unif(uint64_t *s) { return (float)((double)(mix(s) >> 40) / 8388608.0 - 1.0); }

int64_t nb_graph_bench_structure(uint64_t seed, int64_t size, int64_t depth, int *ops) {
    if (depth < 2) {
        nb_error(NB_ERR_INVALID_ARG, "graph bench: depth %lld < 2 (the final relu + softmax)",
                 (long long)depth);
        return -1;
    }
    uint64_t s = seed ^ ((uint64_t)size * 1000003ull) ^ ((uint64_t)depth << 32);
    int64_t lin = 0;
    for (int64_t i = 0; i < depth - 2; i++) {
        ops[i] = (int)(mix(&s) >> 63); /* the top bit: 0 linear, 1 relu */
        lin += ops[i] == 0;
    }
    ops[depth - 2] = 1;
    ops[depth - 1] = 2;
    return lin;
}

/* One graph's host data: structure, parameters in tape order (w0 [S,S], b0 [S], w1, ...), the
 * input. Weights uniform in +-sqrt(3/S) (unit gain), biases in +-0.1: activations stay O(1). */
typedef struct graph {
    int64_t S, D, lin;
    int *ops;
    float *params, *x;
    int64_t n_params;
} graph;

static void graph_free(graph *g) {
    free(g->ops);
    free(g->params);
    free(g->x);
    memset(g, 0, sizeof *g);
}

static nb_status graph_make(uint64_t seed, int64_t S, int64_t D, graph *g) {
    memset(g, 0, sizeof *g);
    if (S < 1 || S > 65536)
        return nb_error(NB_ERR_INVALID_ARG, "graph bench: size %lld not in 1..65536", (long long)S);
    g->S = S, g->D = D;
    g->ops = malloc(sizeof(int) * (size_t)(D > 2 ? D : 2));
    if (!g->ops) return nb_error(NB_ERR_OUT_OF_MEMORY, "graph bench: structure of depth %lld", (long long)D);
    g->lin = nb_graph_bench_structure(seed, S, D, g->ops);
    if (g->lin < 0) {
        graph_free(g);
        return NB_ERR_INVALID_ARG;
    }
    g->n_params = g->lin * (S * S + S);
    g->params = malloc(sizeof(float) * (size_t)(g->n_params ? g->n_params : 1));
    g->x = malloc(sizeof(float) * (size_t)(S * S));
    if (!g->params || !g->x) {
        graph_free(g);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "graph bench: %lld parameters of size %lld",
                        (long long)(g->lin * (S * S + S)), (long long)S);
    }
    uint64_t s = seed * 31 + (uint64_t)S * 7 + (uint64_t)D;
    float a = sqrtf(3.0f / (float)S);
    float *p = g->params;
    for (int64_t l = 0; l < g->lin; l++) {
        for (int64_t i = 0; i < S * S; i++) *p++ = a * unif(&s);
        for (int64_t i = 0; i < S; i++) *p++ = 0.1f * unif(&s);
    }
    for (int64_t i = 0; i < S * S; i++) g->x[i] = unif(&s);
    return NB_OK;
}

/* Registers the graph's parameters on a new tape t and uploads them. */
static nb_status tape_params(nb_tape *t, const graph *g, int precision, nb_tvar *w) {
    char name[32];
    nb_status s = NB_OK;
    for (int64_t l = 0; l < g->lin && !s; l++) {
        snprintf(name, sizeof name, "w%lld", (long long)l);
        s = nb_tape_param(t, name, 2, (int64_t[]){g->S, g->S}, &w[2 * l]);
        snprintf(name, sizeof name, "b%lld", (long long)l);
        if (!s) s = nb_tape_param(t, name, 1, (int64_t[]){g->S}, &w[2 * l + 1]);
    }
    if (!s) s = nb_tape_set_precision(t, (nb_tape_precision)precision);
    if (!s && g->lin) s = nb_tape_write_params(t, g->params, g->n_params);
    return s;
}

/* The graph's ops on t (parameters registered: w) from a new input value: *out = the output. */
static nb_status tape_ops(nb_tape *t, const graph *g, const nb_tvar *w, nb_tvar *out) {
    nb_tvar v;
    nb_status s = nb_tape_input(t, 2, (int64_t[]){g->S, g->S}, g->x, 0, &v);
    int64_t l = 0;
    for (int64_t i = 0; i < g->D && !s; i++) {
        if (g->ops[i] == 0) s = nb_tape_linear(t, v, w[2 * l], w[2 * l + 1], &v), l++;
        else if (g->ops[i] == 1) s = nb_tape_relu(t, v, &v);
        else s = nb_tape_softmax(t, v, &v);
    }
    *out = v;
    return s;
}

/* One run on t: input, the ops, output read into y [S*S]. */
static nb_status tape_forward(nb_tape *t, const graph *g, const nb_tvar *w, float *y) {
    nb_tvar v;
    nb_status s = tape_ops(t, g, w, &v);
    return s ? s : nb_tape_read(t, v, y, g->S * g->S);
}

/* ---- timing --------------------------------------------------------------------------------- */

/* A row's state for one graph: set up once (not timed), run per sample (timed), torn down. */
typedef struct row_ctx {
    nb_device *dev; /* NULL: the CPU */
    const graph *g;
    int precision;
    nb_tape *t;     /* kept tape (cpu, immediate_cached, the graphs' tape) */
    nb_tvar *w;
    float *y;
    nb_graph *gr;   /* recorded graph */
    nb_tvar out;    /* its output */
    int replay;     /* graph runs per timed run */
} row_ctx;

static nb_status kept_setup(row_ctx *c) {
    nb_status s = c->dev ? nb_tape_create_on(c->dev, &c->t) : nb_tape_create(&c->t);
    return s ? s : tape_params(c->t, c->g, c->precision, c->w);
}
static nb_status kept_run(row_ctx *c) {
    nb_status s = nb_tape_reset(c->t);
    return s ? s : tape_forward(c->t, c->g, c->w, c->y);
}
/* immediate: everything per run, the tape included */
static nb_status fresh_run(row_ctx *c) {
    nb_tape *t;
    nb_status s = nb_tape_create_on(c->dev, &t);
    if (s) return s;
    s = tape_params(t, c->g, c->precision, c->w);
    if (!s) s = tape_forward(t, c->g, c->w, c->y);
    nb_tape_free(t);
    return s;
}
/* recorded: the ops recorded once on a kept tape (forward only, the output marked), then
 * replayed: a run = set the input, nb_graph_run (from its third run one CUDA graph), read */
static nb_status recorded_setup(row_ctx *c) {
    nb_status s = kept_setup(c);
    if (!s) s = nb_graph_record_begin(c->t);
    if (!s) {
        s = tape_ops(c->t, c->g, c->w, &c->out);
        nb_status e = nb_graph_record_end(c->t, &c->gr);
        if (!s) s = e;
    }
    return s ? s : nb_graph_output(c->gr, c->out);
}
/* compiled: the recorded graph through every pass of nb_graph_compile (dead / duplicate nodes,
 * folding, linear -> relu epilogues, fused elementwise chains), replayed as recorded */
static nb_status compiled_setup(row_ctx *c) {
    nb_status s = recorded_setup(c);
    return s ? s : nb_graph_compile(c->gr, NULL, NULL);
}
static nb_status graph_run(row_ctx *c) {
    nb_status s = nb_graph_set_input(c->gr, 0, c->g->x, NB_F32, 2, (int64_t[]){c->g->S, c->g->S});
    for (int i = 0; i < c->replay && !s; i++) s = nb_graph_run(c->gr);
    return s ? s : nb_graph_read(c->gr, c->out, c->y, c->g->S * c->g->S);
}

static nb_status no_setup(row_ctx *c) {
    (void)c;
    return NB_OK;
}

typedef struct row_impl {
    nb_status (*setup)(row_ctx *c);
    nb_status (*run)(row_ctx *c);
    int cuda;   /* 0: runs on the CPU, 1: needs a CUDA device, 2: on the bench's device */
    int replay; /* a timed run is opts.replay graph runs (the time is divided by it) */
} row_impl;

static const row_impl graph_rows[NB_GB_ROWS] = {
    [NB_GB_CPU] = {kept_setup, kept_run, 0, 0},
    [NB_GB_IMMEDIATE] = {no_setup, fresh_run, 1, 0},
    [NB_GB_IMMEDIATE_CACHED] = {kept_setup, kept_run, 1, 0},
    [NB_GB_RECORDED] = {recorded_setup, graph_run, 2, 0},
    [NB_GB_COMPILED] = {compiled_setup, graph_run, 2, 0},
    [NB_GB_COMPILED_REPLAY] = {compiled_setup, graph_run, 2, 1},
};

/* The median ms of one row on graph g (NAN when the row does not apply). ref [S*S]: the output
 * of the first row that ran on g (*have_ref set then); every later row's output must match it
 * (max |diff| <= 1e-4 with FP32 GEMMs, 2e-2 with TF32; softmax outputs lie in [0, 1]). */
static nb_status time_row(int row, nb_device *cuda, const graph *g, const nb_graph_bench_opts *o,
                          float *ref, int *have_ref, double *ms) {
    *ms = NAN;
    const row_impl *r = &graph_rows[row];
    if (!r->run || (r->cuda == 1 && !cuda)) return NB_OK;
    nb_device *dev = r->cuda ? cuda : NULL;
    if (!dev && o->cpu_max_gflop > 0 &&
        2.0 * (double)g->lin * (double)g->S * (double)g->S * (double)g->S / 1e9 > o->cpu_max_gflop)
        return NB_OK;
    row_ctx c = {dev, g, o->precision, NULL, NULL, NULL, NULL, NB_TVAR_NONE,
                 r->replay ? o->replay : 1};
    c.w = malloc(sizeof(nb_tvar) * (size_t)(2 * g->lin + 1));
    c.y = malloc(sizeof(float) * (size_t)(g->S * g->S));
    double *t = malloc(sizeof(double) * (size_t)o->samples);
    nb_status s = c.w && c.y && t ? NB_OK : nb_error(NB_ERR_OUT_OF_MEMORY, "graph bench: row buffers");
    if (!s) s = r->setup(&c);
    if (!s) s = r->run(&c); /* warm-up: kernels loaded / compiled, arena grown */
    for (int i = 0; i < o->samples && !s; i++) {
        double t0 = nb_bench_now_ms();
        s = r->run(&c);
        t[i] = nb_bench_now_ms() - t0;
    }
    /* the output is a softmax: each row sums to 1 (a broken run is no timing) */
    for (int64_t i = 0; i < g->S && !s; i++) {
        double sum = 0;
        for (int64_t j = 0; j < g->S; j++) sum += c.y[i * g->S + j];
        if (!(fabs(sum - 1.0) < 1e-3))
            s = nb_error(NB_ERR_INTERNAL, "graph bench: %s, size %lld depth %lld: output row %lld "
                         "sums to %g, not 1", row_names[row], (long long)g->S, (long long)g->D,
                         (long long)i, sum);
    }
    if (!s && *have_ref) {
        double worst = 0, tol = o->precision == NB_TAPE_TF32 ? 2e-2 : 1e-4;
        int64_t wi = 0;
        for (int64_t i = 0; i < g->S * g->S; i++) {
            double e = fabs((double)c.y[i] - (double)ref[i]);
            if (!(e <= worst)) worst = e, wi = i;
        }
        if (!(worst <= tol))
            s = nb_error(NB_ERR_INTERNAL, "graph bench: %s, size %lld depth %lld: output [%lld] = %g, "
                         "the first row gave %g (tolerance %g)", row_names[row], (long long)g->S,
                         (long long)g->D, (long long)wi, c.y[wi], ref[wi], tol);
    } else if (!s) {
        memcpy(ref, c.y, sizeof(float) * (size_t)(g->S * g->S));
        *have_ref = 1;
    }
    if (!s) *ms = nb_bench_median(t, o->samples) / c.replay;
    nb_graph_free(c.gr);
    nb_tape_free(c.t);
    free(c.w);
    free(c.y);
    free(t);
    return s;
}

/* cuBLAS peak (TFLOP/s) of a 4096^3 GEMM at precision on dev: the best of 5 after 2 warm-ups. */
static nb_status gemm_peak(nb_device *dev, int precision, double *tflops) {
    const int64_t n = 4096;
    nb_buffer *b[3] = {NULL, NULL, NULL};
    nb_status s = NB_OK;
    for (int i = 0; i < 3 && !s; i++) s = nb_buffer_alloc(dev, (size_t)(n * n) * sizeof(float), &b[i]);
    float *A = s ? NULL : nb_buffer_ptr(b[0]), *B = s ? NULL : nb_buffer_ptr(b[1]),
          *C = s ? NULL : nb_buffer_ptr(b[2]);
    /* zeros: no NaN or denormal from whatever the allocator held */
    for (int i = 0; i < 3 && !s; i++) s = nb_memset(dev, nb_buffer_ptr(b[i]), 0, (size_t)(n * n) * sizeof(float));
    double best = 1e30;
    for (int it = 0; it < 7 && !s; it++) {
        double t0 = nb_bench_now_ms();
        s = nb_cublas_gemm_rm(dev, precision, 0, 1, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n, 1, 0, 0, 0);
        if (!s) s = nb_device_synchronize(dev);
        double dt = nb_bench_now_ms() - t0;
        if (it >= 2 && dt < best) best = dt;
    }
    for (int i = 0; i < 3; i++)
        if (b[i]) nb_buffer_release(b[i]);
    *tflops = s ? NAN : 2.0 * (double)n * (double)n * (double)n / (best * 1e-3) / 1e12;
    return s;
}

nb_status nb_graph_bench_run(const nb_graph_bench_opts *o, nb_graph_bench_result *r,
                             FILE *progress) {
    if (!o || !r) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_bench_run: NULL options or result");
    memset(r, 0, sizeof *r);
    r->peak_tflops = NAN;
    if (o->samples < 1 || o->replay < 1 || o->n_sizes < 0 || o->n_sizes > NB_GB_MAX_POINTS || o->n_depths < 0 ||
        o->n_depths > NB_GB_MAX_POINTS || (o->n_sizes && o->depth < 2) || (o->n_depths && o->size < 1))
        return nb_error(NB_ERR_INVALID_ARG,
                        "nb_graph_bench_run: samples %d, replay %d, %d sizes at depth %lld, %d depths "
                        "at size %lld (samples and replay >= 1, at most %d points a sweep, depth >= 2, "
                        "size >= 1)", o->samples, o->replay, o->n_sizes, (long long)o->depth, o->n_depths,
                        (long long)o->size, NB_GB_MAX_POINTS);
    if (o->precision < NB_TAPE_FP32 || o->precision > NB_TAPE_TF32)
        return nb_error(NB_ERR_INVALID_ARG, "nb_graph_bench_run: precision %d (FP32 or TF32: the "
                        "benchmark is f32)", o->precision);
    nb_device *dev;
    nb_status s = nb_device_open(o->device ? o->device : "cuda", &dev);
    if (s) return s;
    const nb_device_info *info = nb_device_get_info(dev);
    nb_device *cuda = info->kind == NB_DEVICE_CUDA ? dev : NULL;
    snprintf(r->device, sizeof r->device, "%s (%s)", nb_device_name(dev), info->name);
    r->precision = o->precision;
    r->samples = o->samples;
    if (cuda) s = gemm_peak(cuda, o->precision, &r->peak_tflops);
    for (int sweep = 0; sweep < 2 && !s; sweep++) {
        int n = sweep ? o->n_depths : o->n_sizes;
        for (int i = 0; i < n && !s; i++) {
            int64_t S = sweep ? o->size : o->sizes[i], D = sweep ? o->depths[i] : o->depth;
            graph g;
            if ((s = graph_make(o->seed, S, D, &g))) break;
            nb_graph_bench_point *p = &r->points[r->n_points++];
            p->sweep = sweep, p->size = S, p->depth = D, p->linears = g.lin;
            p->gflop = 2.0 * (double)g.lin * (double)S * (double)S * (double)S / 1e9;
            p->floor_ms = p->gflop / r->peak_tflops; /* GFLOP / (TFLOP/s = GFLOP/ms); NAN without a peak */
            float *ref = malloc(sizeof(float) * (size_t)(S * S));
            int have_ref = 0;
            if (!ref) s = nb_error(NB_ERR_OUT_OF_MEMORY, "graph bench: output of size %lld", (long long)S);
            for (int row = 0; row < NB_GB_ROWS && !s; row++) {
                s = time_row(row, cuda, &g, o, ref, &have_ref, &p->ms[row]);
                if (!s && progress && !isnan(p->ms[row]))
                    fprintf(progress, "  size %5lld depth %5lld  %-16s %10.4f ms\n", (long long)S,
                            (long long)D, row_names[row], p->ms[row]);
            }
            free(ref);
            graph_free(&g);
        }
    }
    nb_device_close(dev);
    return s;
}

/* ---- output --------------------------------------------------------------------------------- */

void nb_graph_bench_print(const nb_graph_bench_result *r, FILE *f) {
    fprintf(f, "# nabla graph bench: %s, f32 (%s GEMMs), median of %d runs (ms per run: input "
            "upload, forward, output read)\n", r->device, r->precision == NB_TAPE_TF32 ? "tf32" : "fp32",
            r->samples);
    if (!isnan(r->peak_tflops))
        fprintf(f, "# cuBLAS peak %.1f TFLOP/s (4096^3 GEMM); floor_ms = gflop / peak\n", r->peak_tflops);
    fprintf(f, "%-6s %6s %6s %7s %10s %10s", "sweep", "size", "depth", "linears", "gflop", "floor_ms");
    for (int k = 0; k < NB_GB_ROWS; k++) fprintf(f, " %16s", row_names[k]);
    fputc('\n', f);
    for (int i = 0; i < r->n_points; i++) {
        const nb_graph_bench_point *p = &r->points[i];
        fprintf(f, "%-6s %6lld %6lld %7lld %10.4f", p->sweep ? "depth" : "size", (long long)p->size,
                (long long)p->depth, (long long)p->linears, p->gflop);
        if (isnan(p->floor_ms)) fprintf(f, " %10s", "-");
        else fprintf(f, " %10.4f", p->floor_ms);
        for (int k = 0; k < NB_GB_ROWS; k++)
            if (isnan(p->ms[k])) fprintf(f, " %16s", "-");
            else fprintf(f, " %16.4f", p->ms[k]);
        fputc('\n', f);
    }
}

nb_status nb_graph_bench_plots(const nb_graph_bench_result *r, const char *dir) {
    if (!r || !dir) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_bench_plots: NULL result or dir");
    for (int sweep = 0; sweep < 2; sweep++) {
        double x[2 * NB_GB_MAX_POINTS], y[(NB_GB_ROWS + 1) * 2 * NB_GB_MAX_POINTS];
        const char *names[NB_GB_ROWS + 1];
        int n = 0, k = 0;
        for (int i = 0; i < r->n_points; i++)
            if (r->points[i].sweep == sweep)
                x[n++] = (double)(sweep ? r->points[i].depth : r->points[i].size);
        if (!n) continue;
        for (int row = 0; row <= NB_GB_ROWS; row++) { /* (NB_GB_ROWS: the floor) */
            int m = 0, any = 0;
            for (int i = 0; i < r->n_points; i++) {
                const nb_graph_bench_point *p = &r->points[i];
                if (p->sweep != sweep) continue;
                double v = row < NB_GB_ROWS ? p->ms[row] : p->floor_ms;
                y[k * n + m++] = v;
                any |= !isnan(v);
            }
            if (any) names[k++] = row < NB_GB_ROWS ? row_names[row] : "gemm floor";
        }
        char path[4096], title[96];
        snprintf(path, sizeof path, "%s/%s", dir, sweep ? "graphs_depth.png" : "graphs_size.png");
        const nb_graph_bench_point *p0 = NULL;
        for (int i = 0; i < r->n_points && !p0; i++)
            if (r->points[i].sweep == sweep) p0 = &r->points[i];
        if (sweep) snprintf(title, sizeof title, "graphs: ms per run, size %lld", (long long)p0->size);
        else snprintf(title, sizeof title, "graphs: ms per run, depth %lld", (long long)p0->depth);
        nb_status s = nb_image_plot_lines(path, title, sweep ? "depth" : "size", "ms per run", x, n,
                                          names, y, k);
        if (s) return s;
    }
    return NB_OK;
}

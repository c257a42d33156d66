/* Replay of a recorded graph (include/nabla/graph.h): inputs, the run (node by node, or as one
 * CUDA graph once warm), reads of outputs and input gradients, per-node profiling.
 *
 * A run is what immediate mode did, over the graph's memory: the same rows of ops.def run on the
 * replay tape g->rt, whose values are the graph's (activation data at their planned offsets,
 * activation gradients through rt->grad_plan), in the recorded order; the backward starts with
 * nb_tape_backward_seed and visits the nodes in reverse exactly as nb_tape_backward does. */
#include <string.h>
#include <time.h>

#include "nabla/alloc.h"
#include "nabla/device.h"
#include "nabla/log.h"
#include "nabla/tensor.h"
#include "graph/graph_internal.h"

/* ---- inputs --------------------------------------------------------------------------------- */

/* "input 1 (value 3, read by node 0 (linear))" */
static const char *input_str(const nb_graph *g, int i, char *buf, size_t cap) {
    nb_tvar v = g->inputs[i];
    int32_t k = -1;
    for (int32_t n = 0; n < g->n_nodes && k < 0; n++)
        for (int j = 0; j < g->nodes[n].nin; j++)
            if (g->nodes[n].in[j] == v) k = n;
    char nb[64];
    if (k >= 0)
        snprintf(buf, cap, "input %d (value %d, read by %s)", i, (int)v,
                 nb_graph_node_str(g, k, nb, sizeof nb));
    else
        snprintf(buf, cap, "input %d (value %d, read by no node)", i, (int)v);
    return buf;
}

/* dtype and shape of input i against the recording. */
static nb_status check_input(nb_graph *g, const char *fn, int i, nb_dtype dtype, int ndim,
                             const int64_t *shape) {
    if (i < 0 || i >= g->n_inputs)
        return nb_error(NB_ERR_INVALID_ARG, "%s: input %d of %d", fn, i, (int)g->n_inputs);
    const nb_tval *tv = &g->vals[g->inputs[i]];
    char ib[128], b1[96], b2[96];
    if (dtype != tv->dtype)
        return nb_error(NB_ERR_DTYPE, "%s: %s has dtype %s, recorded %s", fn,
                        input_str(g, i, ib, sizeof ib), nb_dtype_name(dtype),
                        nb_dtype_name(tv->dtype));
    if (!shape || ndim < 1 || ndim > NB_TAPE_MAX_DIMS)
        return nb_error(NB_ERR_SHAPE, "%s: %s: ndim %d (or shape NULL), recorded %s", fn,
                        input_str(g, i, ib, sizeof ib), ndim, nb_tape_shape_str(tv, b2, sizeof b2));
    if (ndim != tv->ndim || memcmp(shape, tv->shape, (size_t)ndim * sizeof(int64_t))) {
        nb_tval tmp = {.ndim = ndim};
        memcpy(tmp.shape, shape, (size_t)ndim * sizeof(int64_t));
        return nb_error(NB_ERR_SHAPE, "%s: %s has shape %s, recorded %s", fn,
                        input_str(g, i, ib, sizeof ib), nb_tape_shape_str(&tmp, b1, sizeof b1),
                        nb_tape_shape_str(tv, b2, sizeof b2));
    }
    return NB_OK;
}

nb_status nb_graph_set_input(nb_graph *g, int i, const void *host, nb_dtype dtype, int ndim,
                             const int64_t *shape) {
    if (!g) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_set_input: graph is NULL");
    char ib[128];
    if (i >= 0 && i < g->n_inputs && !host)
        return nb_error(NB_ERR_INVALID_ARG, "nb_graph_set_input: %s: data is NULL",
                        input_str(g, i, ib, sizeof ib));
    nb_status s = check_input(g, "nb_graph_set_input", i, dtype, ndim, shape);
    if (s) return s;
    const nb_tval *tv = &g->vals[g->inputs[i]];
    size_t bytes = (size_t)g->gv[g->inputs[i]].bytes;
    if (g->on_cuda) return nb_memcpy_h2d(g->rt->dev, tv->data, host, bytes);
    memcpy(tv->data, host, bytes);
    return NB_OK;
}

nb_status nb_graph_set_input_tensor(nb_graph *g, int i, const nb_tensor *x) {
    if (!g) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_set_input_tensor: graph is NULL");
    char ib[128];
    if (i >= 0 && i < g->n_inputs && !x)
        return nb_error(NB_ERR_INVALID_ARG, "nb_graph_set_input_tensor: %s: tensor is NULL",
                        input_str(g, i, ib, sizeof ib));
    if (!x) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_set_input_tensor: tensor is NULL");
    nb_status s = check_input(g, "nb_graph_set_input_tensor", i, nb_tensor_dtype(x),
                              nb_tensor_ndim(x), nb_tensor_shape(x));
    if (s) return s;
    if (!nb_tensor_is_contiguous(x))
        return nb_error(NB_ERR_LAYOUT, "nb_graph_set_input_tensor: %s: the tensor is not "
                        "contiguous", input_str(g, i, ib, sizeof ib));
    nb_device *xd = nb_tensor_device(x);
    int x_cuda = xd && nb_device_get_kind(xd) == NB_DEVICE_CUDA;
    const nb_tval *tv = &g->vals[g->inputs[i]];
    size_t bytes = (size_t)g->gv[g->inputs[i]].bytes;
    if (!x_cuda) return nb_graph_set_input(g, i, nb_tensor_data(x), nb_tensor_dtype(x),
                                           nb_tensor_ndim(x), nb_tensor_shape(x));
    if (!g->on_cuda || strcmp(nb_device_name(xd), nb_device_name(g->rt->dev)))
        return nb_error(NB_ERR_INVALID_ARG, "nb_graph_set_input_tensor: %s: the tensor is on %s, "
                        "the graph runs on %s", input_str(g, i, ib, sizeof ib),
                        nb_device_name(xd), g->on_cuda ? nb_device_name(g->rt->dev) : "the CPU");
    return nb_memcpy_d2d(g->rt->dev, tv->data, nb_tensor_data(x), bytes);
}

/* ---- one node ------------------------------------------------------------------------------- */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Runs node k's forward or backward (its hook or its row); errors name the node. */
static nb_status run_node(nb_graph *g, int32_t k, int bwd) {
    nb_status s;
    nb_event **ev = g->profiling && g->on_cuda && g->ev ? &g->ev[4 * k + 2 * bwd] : NULL;
    double t0 = g->profiling && !g->on_cuda ? now_ms() : 0;
    if (ev && (s = nb_event_record(ev[0], nb_device_stream(g->rt->dev)))) return s;
    if (g->gn[k].hook)
        s = g->gn[k].hook(g, k, bwd, g->gn[k].hook_ctx);
    else
        s = nb_tape_run_op(g->rt, &g->nodes[k], bwd);
    if (s) {
        char msg[400], nb[64];
        snprintf(msg, sizeof msg, "%s", nb_last_error());
        return nb_error(s, "graph: %s %s: %s", nb_graph_node_str(g, k, nb, sizeof nb),
                        bwd ? "backward" : "forward", msg);
    }
    if (ev && (s = nb_event_record(ev[1], nb_device_stream(g->rt->dev)))) return s;
    if (ev) g->gn[k].ms[bwd] = 0; /* ran: prof_collect reads its events */
    if (g->profiling && !g->on_cuda) g->gn[k].ms[bwd] = now_ms() - t0;
    return NB_OK;
}

/* The forward, then the backward when recorded (what a run queues; no checks). */
static nb_status run_body(nb_graph *g) {
    nb_tape *rt = g->rt;
    nb_status s = nb_tape_reset(rt); /* the rows' own arena allocations start afresh */
    if (s) return s;
    rt->n_vals = g->n_vals, rt->n_ops = g->n_nodes;
    for (nb_tvar v = 0; v < g->n_vals; v++) {
        const nb_gval *gv = &g->gv[v];
        if (gv->off >= 0) g->vals[v].data = (float *)((char *)g->block + gv->off);
        if (v >= g->n_param_vals) g->vals[v].grad = NULL;
    }
    int32_t n = g->n_nodes;
    for (int32_t k = 0; k < n; k++) {
        if ((s = run_node(g, k, 0))) return s;
        if (g->poison && (s = nb_graph_poison_step(g, k))) return s;
    }
    if (!g->has_backward) return NB_OK;
    if ((s = nb_tape_backward_seed(rt, g->loss))) return s;
    if (g->poison && (s = nb_graph_poison_step(g, n))) return s;
    for (int32_t k = n - 1; k >= 0; k--) {
        const nb_tval *o = &g->vals[g->nodes[k].out];
        if (o->needs_grad && o->grad && (s = run_node(g, k, 1))) return s; /* else not reached */
        if (g->poison && (s = nb_graph_poison_step(g, nb_graph_bwd_step(g, k)))) return s;
    }
    return NB_OK;
}

/* ---- profiling ------------------------------------------------------------------------------ */

static nb_status prof_events(nb_graph *g) {
    if (!g->on_cuda || g->n_ev == 4 * g->n_nodes) return NB_OK;
    for (int32_t i = 0; i < g->n_ev; i++) nb_event_destroy(g->ev[i]);
    if (g->ev) nb_free(g->ev, (size_t)g->n_ev * sizeof(*g->ev));
    g->n_ev = 0;
    int32_t ne = 4 * g->n_nodes;
    g->ev = nb_calloc((size_t)(ne ? ne : 1) * sizeof(*g->ev), 16);
    if (!g->ev) return nb_error(NB_ERR_OUT_OF_MEMORY, "graph profiling: out of host memory");
    for (; g->n_ev < ne; g->n_ev++) {
        nb_status s = nb_event_create(g->rt->dev, &g->ev[g->n_ev]);
        if (s) return s;
    }
    return NB_OK;
}

/* CUDA: the times of the last run's events (waits for them). */
static nb_status prof_collect(nb_graph *g) {
    if (!g->on_cuda || !g->ev) return NB_OK;
    nb_status s = nb_device_synchronize(g->rt->dev);
    if (s) return s;
    for (int32_t k = 0; k < g->n_nodes; k++)
        for (int d = 0; d < 2; d++) {
            float ms;
            if (g->gn[k].ms[d] < 0) continue; /* not run this time (its events are older) */
            if ((s = nb_event_elapsed_ms(g->ev[4 * k + 2 * d], g->ev[4 * k + 2 * d + 1], &ms)))
                return s;
            g->gn[k].ms[d] = ms;
        }
    return NB_OK;
}

nb_status nb_graph_set_profiling(nb_graph *g, int on) {
    if (!g) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_set_profiling: graph is NULL");
    g->profiling = on != 0;
    for (int32_t k = 0; k < g->n_nodes; k++) g->gn[k].ms[0] = g->gn[k].ms[1] = -1;
    return NB_OK;
}

nb_status nb_graph_set_cuda_graph(nb_graph *g, int on) {
    if (!g) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_set_cuda_graph: graph is NULL");
    g->cg_on = on != 0;
    if (!g->cg_on) nb_graph_invalidate(g);
    return NB_OK;
}

/* ---- the run -------------------------------------------------------------------------------- */

/* The recording tape and its parameters are as the graph was recorded. */
static nb_status check_tape(nb_graph *g) {
    if (!g->tape)
        return nb_error(NB_ERR_INVALID_ARG,
                        "nb_graph_run: the tape that recorded the graph was freed (the graph "
                        "shares its parameters)");
    if (g->tape->params != g->params0 || g->tape->grads != g->grads0 ||
        g->tape->n_params != g->n_params0)
        return nb_error(NB_ERR_INVALID_ARG,
                        "nb_graph_run: the tape's parameters moved since recording (%lld floats "
                        "then, %lld now)", (long long)g->n_params0, (long long)g->tape->n_params);
    return NB_OK;
}

static uint64_t device_frees(nb_graph *g) {
    nb_mem_stats st;
    return nb_device_mem_stats(g->rt->dev, &st) == NB_OK ? st.buffer_frees : 0;
}

/* CUDA: capture the run body into one CUDA graph and launch it. *captured = 0 when the body
 * could not be captured (g->cg_failed set, the reason in g->cg_why): run it plainly then. */
static nb_status capture(nb_graph *g, int *captured) {
    *captured = 0;
    nb_device *dev = g->rt->dev;
    nb_mem_stats m0, m1;
    nb_status s = nb_device_mem_stats(dev, &m0);
    if (s) return s;
    int64_t allocs0 = g->rt->device_allocs + g->rt->host_allocs;
    if ((s = nb_device_graph_capture_begin(dev))) return s;
    nb_status body = run_body(g);
    char why[160] = "";
    if (body) snprintf(why, sizeof why, "%s", nb_last_error());
    nb_device_graph *cg = NULL;
    nb_status e = nb_device_graph_capture_end(dev, &cg);
    if (!why[0] && e) snprintf(why, sizeof why, "%s", nb_last_error());
    if (!why[0] && (nb_device_mem_stats(dev, &m1) || m1.driver_allocs != m0.driver_allocs ||
                    m1.buffer_frees != m0.buffer_frees ||
                    g->rt->device_allocs + g->rt->host_allocs != allocs0))
        snprintf(why, sizeof why, "a node allocated or freed memory during the capture");
    if (why[0]) {
        nb_device_graph_destroy(cg);
        g->cg_failed = 1;
        snprintf(g->cg_why, sizeof g->cg_why, "%s", why);
        NB_LOG_W("graph: not replayed as one CUDA graph: %s", why);
        nb_clear_error();
        return NB_OK;
    }
    g->cg = cg;
    g->cg_frees = m1.buffer_frees;
    g->captures++;
    *captured = 1;
    return nb_device_graph_launch(cg);
}

nb_status nb_graph_run(nb_graph *g) {
    if (!g) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_run: graph is NULL");
    if (g->broken)
        return nb_error(NB_ERR_INVALID_ARG, "nb_graph_run: an nb_graph_compile of this graph failed part way "
                        "(its nodes may be half rewritten): free it and record again");
    nb_status s = check_tape(g);
    if (s) return s;
    if (!g->validated && (s = nb_graph_validate(g))) return s;
    if ((s = nb_graph_plan(g))) return s;
    int cuda_graph = g->on_cuda && g->cg_on && !g->cg_failed && !g->profiling;
    if (cuda_graph && g->cg) {
        if (device_frees(g) == g->cg_frees) {
            if ((s = nb_device_graph_launch(g->cg))) return s;
            g->runs++;
            return NB_OK;
        }
        /* memory was given back since the capture: it may have been the graph's */
        nb_device_graph_destroy(g->cg);
        g->cg = NULL;
        g->cg_warm = 0;
    }
    if (cuda_graph && g->cg_warm >= 2) { /* warm: kernels loaded, the arena at its size */
        int captured;
        if ((s = capture(g, &captured))) return s;
        if (captured) {
            g->runs++;
            return NB_OK;
        }
    }
    if (g->profiling) { /* this run's times only (a node the backward skips shows none) */
        if ((s = prof_events(g))) return s;
        for (int32_t k = 0; k < g->n_nodes; k++) g->gn[k].ms[0] = g->gn[k].ms[1] = -1;
    }
    if ((s = run_body(g))) return s;
    if (g->profiling && (s = prof_collect(g))) return s;
    g->cg_warm++;
    g->runs++;
    return NB_OK;
}

/* ---- reads ---------------------------------------------------------------------------------- */

static nb_status check_read(nb_graph *g, nb_tvar v, const char *fn, float *host, int64_t count) {
    nb_status s = nb_graph_check_value(g, v, fn);
    if (s) return s;
    if (!host) return nb_error(NB_ERR_INVALID_ARG, "%s: host pointer is NULL", fn);
    if (count != g->vals[v].count)
        return nb_error(NB_ERR_SHAPE, "%s: count %lld does not match the %lld elements of value %d",
                        fn, (long long)count, (long long)g->vals[v].count, (int)v);
    return NB_OK;
}

nb_status nb_graph_read(nb_graph *g, nb_tvar v, float *host, int64_t count) {
    nb_status s = check_read(g, v, "nb_graph_read", host, count);
    if (s) return s;
    const nb_gval *gv = &g->gv[v];
    char nb[64];
    if (gv->role == NB_GV_ACT && !gv->output)
        return nb_error(NB_ERR_INVALID_ARG,
                        "nb_graph_read: value %d (output of %s) is not an output of the graph: "
                        "its memory is reused by later values (mark it with nb_graph_output)",
                        (int)v, nb_graph_node_str(g, gv->producer, nb, sizeof nb));
    if (gv->role == NB_GV_ACT && (g->runs == 0 || !g->planned))
        return nb_error(NB_ERR_INVALID_ARG, "nb_graph_read: value %d: the graph has not run%s",
                        (int)v, g->runs ? " since its plan changed" : " yet");
    if (gv->role == NB_GV_PARAM && (s = check_tape(g))) return s;
    return nb_tape_download_dt(g->rt, host, g->vals[v].data, g->vals[v].dtype, count);
}

nb_status nb_graph_read_grad(nb_graph *g, nb_tvar v, float *host, int64_t count) {
    nb_status s = check_read(g, v, "nb_graph_read_grad", host, count);
    if (s) return s;
    const nb_gval *gv = &g->gv[v];
    if (!g->has_backward)
        return nb_error(NB_ERR_INVALID_ARG, "nb_graph_read_grad: the graph has no backward");
    if (gv->role == NB_GV_PARAM)
        return nb_error(NB_ERR_INVALID_ARG, "nb_graph_read_grad: value %d is parameter '%s': its "
                        "gradient is in the tape (nb_tape_read_grads)", (int)v, g->vals[v].name);
    if (gv->role == NB_GV_ACT && v != g->loss)
        return nb_error(NB_ERR_INVALID_ARG,
                        "nb_graph_read_grad: value %d is an intermediate: its gradient's memory "
                        "is reused (only inputs, constants and the loss)", (int)v);
    if (!g->vals[v].needs_grad)
        return nb_error(NB_ERR_INVALID_ARG, "nb_graph_read_grad: value %d needs no gradient "
                        "(nb_tape_input with requires_grad = 0)", (int)v);
    if (g->runs == 0 || !g->planned)
        return nb_error(NB_ERR_INVALID_ARG, "nb_graph_read_grad: the graph has not run%s",
                        g->runs ? " since its plan changed" : " yet");
    if (!g->vals[v].grad) { /* the backward did not reach it */
        memset(host, 0, (size_t)count * sizeof(float));
        return NB_OK;
    }
    return nb_tape_download_dt(g->rt, host, g->vals[v].grad, g->vals[v].dtype, count);
}

/* Recorded graphs (include/nabla/graph.h): recording from a running tape, the checks at record
 * end, the graph's structure (roles, inputs, outputs) and the helpers passes use
 * (graph_internal.h). Planning is graph_plan.c, replay graph_run.c, dumps graph_dump.c. */
#include <stdio.h>
#include <string.h>

#include "nabla/alloc.h"
#include "nabla/device.h"
#include "graph/fuse.h"
#include "graph/graph_internal.h"

/* ---- recording hooks ------------------------------------------------------------------------ */

static nb_status rec_grow(void **arr, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return NB_OK;
    int32_t nc = *cap ? *cap : 16;
    while (nc < need) nc *= 2;
    void *n = nb_alloc((size_t)nc * elem, 16);
    if (!n) return nb_error(NB_ERR_OUT_OF_MEMORY, "graph: out of host memory (%d entries)", nc);
    memset(n, 0, (size_t)nc * elem);
    if (*arr) {
        memcpy(n, *arr, (size_t)*cap * elem);
        nb_free(*arr, (size_t)*cap * elem);
    }
    *arr = n;
    *cap = nc;
    return NB_OK;
}

static void rec_free(nb_graph_rec *r) {
    if (!r) return;
    if (r->inputs) nb_free(r->inputs, (size_t)r->inputs_cap * sizeof(nb_tvar));
    nb_free(r, sizeof *r);
}

nb_status nb_graph_record_begin(nb_tape *t) {
    if (!t) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_record_begin: tape is NULL");
    if (t->rec) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_record_begin: the tape is already recording");
    nb_graph_rec *r = nb_calloc(sizeof *r, 16);
    if (!r) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_graph_record_begin: out of host memory");
    r->op0 = t->n_ops;
    r->val0 = t->n_vals;
    r->nparam0 = t->n_param_vals;
    r->resets0 = t->resets;
    r->loss = NB_TVAR_NONE;
    r->read_val = NB_TVAR_NONE;
    r->read_ops = -1;
    t->rec = r;
    return NB_OK;
}

int nb_graph_recording(const nb_tape *t) { return t && t->rec; }

void nb_graph_rec_input(nb_tape *t, nb_tvar v) {
    nb_graph_rec *r = t->rec;
    /* out of memory: the input is then missing and record end reports the orphan value */
    if (rec_grow((void **)&r->inputs, &r->inputs_cap, r->n_inputs + 1, sizeof(nb_tvar)) == NB_OK)
        r->inputs[r->n_inputs++] = v;
}

void nb_graph_rec_host(nb_tape *t, nb_tvar v, const char *fn) {
    nb_graph_rec *r = t->rec;
    if (v < r->val0 || r->read_val != NB_TVAR_NONE) return; /* parameters, constants; first only */
    for (int32_t i = 0; i < r->n_inputs; i++)
        if (r->inputs[i] == v && strcmp(fn, "nb_tape_data") && strcmp(fn, "nb_tape_grad"))
            return; /* reading an input's values is harmless; its raw pointer is not */
    r->read_val = v;
    r->read_ops = t->n_ops;
    r->read_fn = fn;
}

void nb_graph_rec_backward(nb_tape *t, nb_tvar loss) {
    nb_graph_rec *r = t->rec;
    if (r->n_backward++ == 0) {
        r->loss = loss;
        r->ops_at_backward = t->n_ops;
    }
}

void nb_graph_tape_freed(nb_tape *t) {
    rec_free(t->rec);
    t->rec = NULL;
    for (nb_graph *g = t->graphs; g; g = g->next) g->tape = NULL;
    t->graphs = NULL;
}

/* ---- names ---------------------------------------------------------------------------------- */

const char *nb_graph_node_str(const nb_graph *g, int32_t node, char *buf, size_t cap) {
    const char *nm = node >= 0 && node < g->n_nodes ? nb_tape_op_name(g->nodes[node].kind) : NULL;
    snprintf(buf, cap, "node %d (%s)", (int)node, nm ? nm : "?");
    return buf;
}

/* "value 5 (output of node 2 (silu))", "value 0 (input 0)", ... */
static const char *val_str(const nb_graph *g, nb_tvar v, char *buf, size_t cap) {
    char nb[64];
    const nb_gval *gv = &g->gv[v];
    switch (gv->role) {
    case NB_GV_PARAM: snprintf(buf, cap, "value %d (parameter '%s')", (int)v, g->vals[v].name); break;
    case NB_GV_INPUT: snprintf(buf, cap, "value %d (input %d)", (int)v, gv->input_index); break;
    case NB_GV_CONST: snprintf(buf, cap, "value %d (constant)", (int)v); break;
    case NB_GV_ACT:
        snprintf(buf, cap, "value %d (output of %s)", (int)v,
                 nb_graph_node_str(g, gv->producer, nb, sizeof nb));
        break;
    default: snprintf(buf, cap, "value %d", (int)v); break;
    }
    return buf;
}

/* ---- graph construction --------------------------------------------------------------------- */

static nb_status g_grow_vals(nb_graph *g, int32_t need) {
    int32_t cap = g->vals_cap, cap2 = g->vals_cap;
    nb_status s = rec_grow((void **)&g->vals, &cap, need, sizeof(nb_tval));
    if (!s) s = rec_grow((void **)&g->gv, &cap2, need, sizeof(nb_gval));
    if (!s) {
        int32_t c3 = g->vals_cap;
        if (g->grad_plan) {
            nb_free(g->grad_plan, (size_t)c3 * sizeof(float *));
            g->grad_plan = NULL;
            g->planned = 0;
        }
        g->vals_cap = cap;
    }
    return s;
}

static nb_status g_grow_nodes(nb_graph *g, int32_t need) {
    int32_t cap = g->nodes_cap, cap2 = g->nodes_cap;
    nb_status s = rec_grow((void **)&g->nodes, &cap, need, sizeof(nb_top));
    if (!s) s = rec_grow((void **)&g->gn, &cap2, need, sizeof(nb_gnode));
    if (!s) g->nodes_cap = cap;
    return s;
}

/* The graph facts of value v (g->vals[v] set) before roles are known: not planned. */
static void gv_init(nb_graph *g, nb_tvar v, int role) {
    nb_gval *gv = &g->gv[v];
    memset(gv, 0, sizeof *gv);
    gv->role = role;
    gv->producer = -1;
    gv->input_index = -1;
    gv->bytes = g->vals[v].count * (int64_t)nb_tape_dt_size(g->vals[v].dtype);
    gv->off = gv->goff = -1;
    gv->life[0] = gv->life[1] = gv->glife[0] = gv->glife[1] = -1;
}

nb_status nb_graph_add_value(nb_graph *g, const nb_tval *v, nb_tvar *out) {
    nb_status s = g_grow_vals(g, g->n_vals + 1);
    if (s) return s;
    nb_tvar i = g->n_vals++;
    g->vals[i] = *v;
    g->vals[i].data = g->vals[i].grad = NULL;
    gv_init(g, i, NB_GV_ACT);
    if (g->rt) g->rt->vals = g->vals, g->rt->n_vals = g->n_vals, g->rt->vals_cap = g->vals_cap;
    nb_graph_invalidate(g);
    *out = i;
    return NB_OK;
}

nb_status nb_graph_add_node(nb_graph *g, const nb_top *op, int32_t *out) {
    nb_status s = g_grow_nodes(g, g->n_nodes + 1);
    if (s) return s;
    int32_t i = g->n_nodes++;
    g->nodes[i] = *op;
    memset(&g->gn[i], 0, sizeof g->gn[i]);
    g->gn[i].ms[0] = g->gn[i].ms[1] = -1;
    if (g->rt) g->rt->ops = g->nodes, g->rt->n_ops = g->n_nodes, g->rt->ops_cap = g->nodes_cap;
    nb_graph_invalidate(g);
    *out = i;
    return NB_OK;
}

/* Host or device bytes of the graph's device (the fixed block, the planned block). */
nb_status nb_graph_alloc(nb_graph *g, int64_t bytes, void **p, struct nb_buffer **buf) {
    *p = NULL;
    *buf = NULL;
    if (bytes <= 0) return NB_OK;
    if (g->on_cuda) {
        nb_status s = nb_buffer_alloc(g->rt->dev, (size_t)bytes, buf);
        if (s) return s;
        *p = nb_buffer_ptr(*buf);
        return NB_OK;
    }
    *p = nb_alloc((size_t)bytes, 64);
    return *p ? NB_OK : nb_error(NB_ERR_OUT_OF_MEMORY, "graph: out of host memory (%lld bytes)",
                                 (long long)bytes);
}

static void g_release(nb_graph *g, void *p, struct nb_buffer *buf, int64_t bytes) {
    if (buf)
        nb_buffer_release(buf);
    else if (p)
        nb_free(p, (size_t)bytes);
    (void)g;
}

void nb_graph_invalidate(nb_graph *g) {
    g->planned = 0;
    g->validated = 0;
    g->cg_warm = 0;
    if (g->cg) {
        nb_device_graph_destroy(g->cg);
        g->cg = NULL;
    }
}

/* Frees the graph's memory (the plan's block, the fixed block, arrays). */
void nb_graph_free(nb_graph *g) {
    if (!g) return;
    if (g->tape) { /* unlink from the tape's list */
        nb_graph **pp = &g->tape->graphs;
        while (*pp && *pp != g) pp = &(*pp)->next;
        if (*pp) *pp = g->next;
    }
    if (g->cg) nb_device_graph_destroy(g->cg);
    for (int32_t i = 0; i < g->n_fk; i++) nb_fuse_kernel_free(g->fk[i]);
    if (g->fk) nb_free(g->fk, (size_t)g->fk_cap * sizeof(*g->fk));
    for (int32_t i = 0; i < g->n_ev; i++) nb_event_destroy(g->ev[i]);
    if (g->ev) nb_free(g->ev, (size_t)g->n_ev * sizeof(*g->ev));
    g_release(g, g->block, g->block_buf, g->block_bytes);
    g_release(g, g->fixed, g->fixed_buf, g->fixed_bytes);
    g_release(g, g->fold, g->fold_buf, g->fold_bytes);
    if (g->rt) { /* the replay tape: its arrays and parameter memory are not its own */
        nb_tape *rt = g->rt;
        rt->vals = NULL, rt->vals_cap = 0, rt->n_vals = 0;
        rt->ops = NULL, rt->ops_cap = 0, rt->n_ops = 0;
        rt->params = rt->grads = NULL;
        rt->params_buf = rt->grads_buf = NULL;
        rt->grad_plan = NULL;
        nb_tape_free(rt);
    }
    if (g->grad_plan) nb_free(g->grad_plan, (size_t)g->vals_cap * sizeof(float *));
    if (g->vals) nb_free(g->vals, (size_t)g->vals_cap * sizeof(nb_tval));
    if (g->gv) nb_free(g->gv, (size_t)g->vals_cap * sizeof(nb_gval));
    if (g->nodes) nb_free(g->nodes, (size_t)g->nodes_cap * sizeof(nb_top));
    if (g->gn) nb_free(g->gn, (size_t)g->nodes_cap * sizeof(nb_gnode));
    if (g->inputs) nb_free(g->inputs, (size_t)(g->n_inputs ? g->n_inputs : 1) * sizeof(nb_tvar));
    nb_free(g, sizeof *g);
}

/* ---- record end ----------------------------------------------------------------------------- */

/* The checks of the recording itself (effects a replay cannot repeat). */
static nb_status rec_check(const nb_tape *t, const nb_graph_rec *r) {
    if (t->resets != r->resets0)
        return nb_error(NB_ERR_INVALID_ARG,
                        "nb_graph_record_end: the tape was reset during recording: the recorded "
                        "ops and values are gone");
    if (t->n_param_vals != r->nparam0)
        return nb_error(NB_ERR_INVALID_ARG,
                        "nb_graph_record_end: parameter '%s' was registered during recording: "
                        "register parameters before nb_graph_record_begin",
                        t->vals[r->nparam0].name);
    if (t->n_ops < r->op0 || t->n_vals < r->val0)
        return nb_error(NB_ERR_INTERNAL, "nb_graph_record_end: the tape's op log shrank");
    if (t->n_ops == r->op0)
        return nb_error(NB_ERR_INVALID_ARG, "nb_graph_record_end: no op was recorded");
    if (r->n_backward > 1)
        return nb_error(NB_ERR_INVALID_ARG,
                        "nb_graph_record_end: nb_tape_backward ran %d times during recording "
                        "(a graph holds one backward)", r->n_backward);
    if (r->n_backward && t->n_ops > r->ops_at_backward) {
        int32_t k = r->ops_at_backward - r->op0;
        return nb_error(NB_ERR_INVALID_ARG,
                        "nb_graph_record_end: node %d (%s) was recorded after nb_tape_backward: "
                        "a graph's forward ends at its backward", (int)k,
                        nb_tape_op_name(t->ops[r->ops_at_backward].kind));
    }
    if (r->read_val != NB_TVAR_NONE && t->n_ops > r->read_ops) {
        int32_t k = r->read_ops - r->op0;
        return nb_error(NB_ERR_INVALID_ARG,
                        "nb_graph_record_end: value %d was accessed on the host (%s) during "
                        "recording before node %d (%s): a replay cannot repeat what the host did "
                        "with it (e.g. attributes of later ops); access outputs after the last op, "
                        "or nb_graph_read after a run", (int)r->read_val, r->read_fn, (int)k,
                        nb_tape_op_name(t->ops[r->read_ops].kind));
    }
    return NB_OK;
}

/* Builds the graph's values and nodes from the tape's [val0, n_vals) / [op0, n_ops). */
static nb_status rec_build(nb_tape *t, const nb_graph_rec *r, nb_graph *g) {
    nb_status s;
    int32_t nv = t->n_vals, nn = t->n_ops - r->op0;
    if ((s = g_grow_vals(g, nv)) || (s = g_grow_nodes(g, nn))) return s;
    g->n_vals = nv;
    g->n_nodes = nn;
    g->n_param_vals = t->n_param_vals;
    for (nb_tvar v = 0; v < nv; v++) {
        g->vals[v] = t->vals[v];
        gv_init(g, v, v < t->n_param_vals ? NB_GV_PARAM : NB_GV_NONE);
        if (v >= t->n_param_vals) g->vals[v].grad = NULL;
    }
    g->inputs = nb_alloc((size_t)(r->n_inputs ? r->n_inputs : 1) * sizeof(nb_tvar), 16);
    if (!g->inputs) return nb_error(NB_ERR_OUT_OF_MEMORY, "graph: out of host memory");
    g->n_inputs = r->n_inputs;
    for (int32_t i = 0; i < r->n_inputs; i++) {
        g->inputs[i] = r->inputs[i];
        g->gv[r->inputs[i]].role = NB_GV_INPUT;
        g->gv[r->inputs[i]].input_index = i;
    }
    for (int32_t k = 0; k < nn; k++) {
        g->nodes[k] = t->ops[r->op0 + k];
        memset(&g->gn[k], 0, sizeof g->gn[k]);
        g->gn[k].ms[0] = g->gn[k].ms[1] = -1;
        nb_top *op = &g->nodes[k];
        op->saved[0] = op->saved[1] = NULL; /* the replay's rows set their own */
        char nb[64], vb[96];
        for (int i = 0; i < op->nin; i++) {
            nb_tvar x = op->in[i];
            if (x == NB_TVAR_NONE) continue;
            if (x < 0 || x >= nv)
                return nb_error(NB_ERR_INTERNAL, "nb_graph_record_end: %s: input %d is not a value",
                                nb_graph_node_str(g, k, nb, sizeof nb), i);
            nb_gval *gx = &g->gv[x];
            if (gx->role == NB_GV_NONE && x < r->val0) { /* made before recording: a constant */
                gx->role = NB_GV_CONST;
                g->n_consts++;
            } else if (gx->role == NB_GV_NONE) {
                return nb_error(NB_ERR_INVALID_ARG,
                                "nb_graph_record_end: %s: input %d is value %d, made during "
                                "recording by neither an op nor nb_tape_input (e.g. "
                                "nb_tape_timestep_embedding from host data): a replay cannot "
                                "remake it", nb_graph_node_str(g, k, nb, sizeof nb), i, (int)x);
            } else if (gx->role == NB_GV_ACT && gx->producer >= k) {
                return nb_error(NB_ERR_INTERNAL, "nb_graph_record_end: %s: input %d is %s, "
                                "written later", nb_graph_node_str(g, k, nb, sizeof nb), i,
                                val_str(g, x, vb, sizeof vb));
            }
        }
        nb_tvar y = op->out;
        if (y < r->val0 || y >= nv || g->gv[y].role != NB_GV_NONE)
            return nb_error(NB_ERR_INTERNAL, "nb_graph_record_end: %s: output %d is not a fresh value",
                            nb_graph_node_str(g, k, nb, sizeof nb), (int)y);
        /* a view (CUDA reshape): its row points it at its input again at each replay */
        nb_tvar al = g->vals[y].alias1 - 1;
        if (al >= 0 && (al >= y || g->gv[al].role == NB_GV_NONE))
            return nb_error(NB_ERR_INTERNAL, "nb_graph_record_end: %s: its output aliases value "
                            "%d, not one of the graph's", nb_graph_node_str(g, k, nb, sizeof nb),
                            (int)al);
        g->gv[y].role = NB_GV_ACT;
        g->gv[y].producer = k;
    }
    if (r->n_backward) {
        g->has_backward = 1;
        g->loss = r->loss;
        if (r->loss < r->val0 || g->gv[r->loss].role != NB_GV_ACT)
            return nb_error(NB_ERR_INVALID_ARG,
                            "nb_graph_record_end: the loss given to nb_tape_backward (value %d) "
                            "is not the output of a recorded op", (int)r->loss);
        g->gv[r->loss].output = 1;
    } else {
        g->loss = NB_TVAR_NONE;
    }
    return NB_OK;
}

/* The replay tape and the fixed block (inputs and constants, with their recorded data). */
static nb_status rec_memory(nb_tape *t, nb_graph *g) {
    nb_status s = nb_tape_create_on(nb_tape_on_cuda(t) ? t->dev : NULL, &g->rt);
    if (s) return s;
    nb_tape *rt = g->rt;
    g->on_cuda = nb_tape_on_cuda(rt);
    rt->precision = t->precision;
    rt->frozen = 1;
    rt->params = t->params, rt->grads = t->grads;
    rt->n_params = t->n_params;
    rt->n_param_vals = t->n_param_vals;
    rt->vals = g->vals, rt->n_vals = g->n_vals, rt->vals_cap = g->vals_cap;
    rt->ops = g->nodes, rt->n_ops = g->n_nodes, rt->ops_cap = g->nodes_cap;
    g->params0 = t->params, g->grads0 = t->grads, g->n_params0 = t->n_params;
    int64_t bytes = 0;
    for (nb_tvar v = 0; v < g->n_vals; v++)
        if (g->gv[v].role == NB_GV_INPUT || g->gv[v].role == NB_GV_CONST)
            bytes += (g->gv[v].bytes + 63) / 64 * 64;
    if ((s = nb_graph_alloc(g, bytes, &g->fixed, &g->fixed_buf))) return s;
    g->fixed_bytes = bytes;
    int64_t off = 0;
    for (nb_tvar v = 0; v < g->n_vals; v++) {
        nb_gval *gv = &g->gv[v];
        if (gv->role != NB_GV_INPUT && gv->role != NB_GV_CONST) continue;
        char *dst = (char *)g->fixed + off;
        const void *src = t->vals[v].data; /* the recorded data, still on the tape */
        s = g->on_cuda ? nb_memcpy_d2d(rt->dev, dst, src, (size_t)gv->bytes)
                       : (memcpy(dst, src, (size_t)gv->bytes), NB_OK);
        if (s) return s;
        g->vals[v].data = (float *)dst;
        g->vals[v].alias1 = 0; /* a copy now, whatever it viewed on the tape */
        off += (gv->bytes + 63) / 64 * 64;
    }
    return NB_OK;
}

nb_status nb_graph_record_end(nb_tape *t, nb_graph **out) {
    if (!t || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_record_end: tape or out is NULL");
    *out = NULL;
    nb_graph_rec *r = t->rec;
    if (!r) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_record_end: the tape is not recording");
    t->rec = NULL;
    nb_status s = rec_check(t, r);
    nb_graph *g = NULL;
    if (!s) {
        g = nb_calloc(sizeof *g, 16);
        if (!g) s = nb_error(NB_ERR_OUT_OF_MEMORY, "nb_graph_record_end: out of host memory");
    }
    if (!s) {
        g->loss = NB_TVAR_NONE;
        g->cg_on = 1;
        s = rec_build(t, r, g);
    }
    if (!s) s = rec_memory(t, g);
    if (!s) s = nb_graph_validate(g);
    rec_free(r);
    if (s) {
        nb_graph_free(g);
        return s;
    }
    g->tape = t;
    g->next = t->graphs;
    t->graphs = g;
    *out = g;
    return NB_OK;
}

/* ---- validation ----------------------------------------------------------------------------- */

nb_status nb_graph_validate(nb_graph *g) {
    char nb[64], vb[96], b1[96];
    for (int32_t k = 0; k < g->n_nodes; k++) {
        const nb_top *op = &g->nodes[k];
        if (op->kind < 0 || op->kind >= NB_TOP_COUNT)
            return nb_error(NB_ERR_INTERNAL, "graph: node %d: unknown op kind %d", (int)k, op->kind);
        if (op->out < 0 || op->out >= g->n_vals || g->gv[op->out].producer != k)
            return nb_error(NB_ERR_INTERNAL, "graph: %s: its output is not a value it writes",
                            nb_graph_node_str(g, k, nb, sizeof nb));
        for (int i = 0; i < op->nin; i++) {
            nb_tvar x = op->in[i];
            if (x == NB_TVAR_NONE) continue;
            if (x < 0 || x >= g->n_vals)
                return nb_error(NB_ERR_INTERNAL, "graph: %s: input %d is not a value",
                                nb_graph_node_str(g, k, nb, sizeof nb), i);
            const nb_gval *gx = &g->gv[x];
            if (gx->role == NB_GV_NONE || (gx->role == NB_GV_ACT && (gx->producer < 0 ||
                                                                     gx->producer >= k)))
                return nb_error(NB_ERR_INTERNAL, "graph: %s: input %d (%s) is not written "
                                "before the node", nb_graph_node_str(g, k, nb, sizeof nb), i,
                                val_str(g, x, vb, sizeof vb));
            const nb_tval *tx = &g->vals[x];
            if (tx->dtype != NB_F32 && tx->dtype != NB_BF16)
                return nb_error(NB_ERR_DTYPE, "graph: %s: input %d has dtype %s (f32 or bf16)",
                                nb_graph_node_str(g, k, nb, sizeof nb), i,
                                nb_dtype_name(tx->dtype));
            if (tx->dtype == NB_BF16 && !g->on_cuda)
                return nb_error(NB_ERR_DTYPE, "graph: %s: input %d %s is bf16 on a CPU graph",
                                nb_graph_node_str(g, k, nb, sizeof nb), i,
                                nb_tape_shape_str(tx, b1, sizeof b1));
        }
        /* the row's arity and shape rule, over the graph's values */
        nb_status s = nb_tape_check_op(g->rt, op);
        if (s) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s", nb_last_error());
            return nb_error(NB_ERR_SHAPE, "graph: %s: %s", nb_graph_node_str(g, k, nb, sizeof nb), msg);
        }
    }
    g->validated = 1;
    return NB_OK;
}

/* ---- structure ------------------------------------------------------------------------------ */

nb_status nb_graph_check_value(const nb_graph *g, nb_tvar v, const char *fn) {
    if (!g) return nb_error(NB_ERR_INVALID_ARG, "%s: graph is NULL", fn);
    if (v >= 0 && v < g->n_vals && g->gv[v].gone) { /* (graph_compile.c) */
        const nb_gval *gv = &g->gv[v];
        char why[160], nb[64];
        if (gv->gone == NB_GONE_DEAD || gv->gone_to < 0)
            snprintf(why, sizeof why, "dead: it reaches no output");
        else
            snprintf(why, sizeof why, "%s value %d, written by %s", gv->gone == NB_GONE_DUP ? "a duplicate of" :
                     "fused into", (int)gv->gone_to, g->gv[gv->gone_to].producer >= 0 ?
                     nb_graph_node_str(g, g->gv[gv->gone_to].producer, nb, sizeof nb) : "no node");
        return nb_error(NB_ERR_INVALID_ARG, "%s: value %d was removed by nb_graph_compile (%s): mark outputs "
                        "before compiling", fn, (int)v, why);
    }
    if (v < 0 || v >= g->n_vals || g->gv[v].role == NB_GV_NONE)
        return nb_error(NB_ERR_INVALID_ARG, "%s: handle %d is not a value of the graph (%d values)",
                        fn, (int)v, (int)g->n_vals);
    return NB_OK;
}

nb_status nb_graph_output(nb_graph *g, nb_tvar v) {
    nb_status s = nb_graph_check_value(g, v, "nb_graph_output");
    if (s) return s;
    if (g->gv[v].role == NB_GV_PARAM)
        return nb_error(NB_ERR_INVALID_ARG, "nb_graph_output: value %d is parameter '%s': read it "
                        "from the tape", (int)v, g->vals[v].name);
    if (!g->gv[v].output) {
        g->gv[v].output = 1;
        nb_graph_invalidate(g); /* its lifetime grows: plan again */
    }
    return NB_OK;
}

nb_status nb_graph_get_info(const nb_graph *g, nb_graph_info *out) {
    if (!g || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_get_info: graph or out is NULL");
    memset(out, 0, sizeof *out);
    out->n_nodes = g->n_nodes;
    out->n_values = g->n_vals;
    out->n_inputs = g->n_inputs;
    out->n_consts = g->n_consts;
    for (nb_tvar v = 0; v < g->n_vals; v++) out->n_outputs += g->gv[v].output;
    out->has_backward = g->has_backward;
    out->loss = g->loss;
    out->on_cuda = g->on_cuda;
    out->runs = g->runs;
    out->cuda_graph = !g->on_cuda || !g->cg_on || g->cg_failed ? 0 : g->cg ? 2 : 1;
    out->captures = g->captures;
    return NB_OK;
}

nb_status nb_graph_input(const nb_graph *g, int i, nb_tvar *v) {
    if (!g || !v) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_input: graph or v is NULL");
    if (i < 0 || i >= g->n_inputs)
        return nb_error(NB_ERR_INVALID_ARG, "nb_graph_input: input %d of %d", i, (int)g->n_inputs);
    *v = g->inputs[i];
    return NB_OK;
}

_Static_assert((int)NB_GV_PARAM == (int)NB_GRAPH_PARAM && (int)NB_GV_INPUT == (int)NB_GRAPH_INPUT &&
                   (int)NB_GV_CONST == (int)NB_GRAPH_CONST && (int)NB_GV_ACT == (int)NB_GRAPH_ACT,
               "graph roles: internal and public values agree");
_Static_assert(NB_GRAPH_NODE_MAX_IN == NB_TOP_MAX_IN, "nb_graph_node.in holds every input");

nb_status nb_graph_value_info(const nb_graph *g, nb_tvar v, nb_graph_value *out) {
    if (!g || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_value_info: graph or out is NULL");
    if (v < 0 || v >= g->n_vals)
        return nb_error(NB_ERR_INVALID_ARG, "nb_graph_value_info: handle %d is not a value of the "
                        "graph (%d values)", (int)v, (int)g->n_vals);
    const nb_tval *tv = &g->vals[v];
    const nb_gval *gv = &g->gv[v];
    memset(out, 0, sizeof *out);
    out->role = (nb_graph_role)gv->role;
    out->ndim = tv->ndim;
    memcpy(out->shape, tv->shape, sizeof out->shape);
    out->count = tv->count;
    out->dtype = tv->dtype;
    out->needs_grad = tv->needs_grad;
    out->output = gv->output;
    out->input_index = gv->input_index;
    out->producer = gv->producer;
    return NB_OK;
}

nb_status nb_graph_node_info(const nb_graph *g, int k, nb_graph_node *out) {
    if (!g || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_node_info: graph or out is NULL");
    if (k < 0 || k >= g->n_nodes)
        return nb_error(NB_ERR_INVALID_ARG, "nb_graph_node_info: node %d of %d", k, (int)g->n_nodes);
    const nb_top *op = &g->nodes[k];
    memset(out, 0, sizeof *out);
    out->op = nb_tape_op_name(op->kind);
    out->nin = op->nin;
    for (int i = 0; i < NB_GRAPH_NODE_MAX_IN; i++) out->in[i] = i < op->nin ? op->in[i] : NB_TVAR_NONE;
    out->out = op->out;
    out->ms[0] = g->gn[k].ms[0];
    out->ms[1] = g->gn[k].ms[1];
    return NB_OK;
}

/* Dumps of a recorded graph (include/nabla/graph.h: nb_graph_dump): a text listing (one line
 * per node: op, input and output shapes, output bytes, last profiled times) and Graphviz DOT. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "nabla/device.h"
#include "graph/fuse.h"
#include "graph/graph_internal.h"
#include "nabla/module.h"

typedef struct dump_out {
    char *buf;
    size_t cap, len; /* len: the full length, also past cap */
    FILE *f;
    int ioerr;
} dump_out;

static void put(dump_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(dump_out *o, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    size_t m = (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1;
    if (o->f) {
        if (fwrite(tmp, 1, m, o->f) != m) o->ioerr = 1;
    } else if (o->buf && o->len < o->cap) {
        size_t room = o->cap - 1 - o->len;
        memcpy(o->buf + o->len, tmp, m < room ? m : room);
        o->buf[o->len + (m < room ? m : room)] = 0;
    }
    o->len += m;
}

static const char *role_name(int r) {
    switch (r) {
    case NB_GV_PARAM: return "param";
    case NB_GV_INPUT: return "input";
    case NB_GV_CONST: return "const";
    case NB_GV_ACT: return "act";
    default: return "none";
    }
}

/* "v5 [64,32] f32" / "w1 [32,16] (param 'l1.w')" */
static void val_desc(const nb_graph *g, nb_tvar v, char *buf, size_t cap) {
    char sb[96];
    const nb_tval *tv = &g->vals[v];
    nb_tape_shape_str(tv, sb, sizeof sb);
    if (g->gv[v].role == NB_GV_PARAM)
        snprintf(buf, cap, "v%d %s '%s'", (int)v, sb, tv->name);
    else
        snprintf(buf, cap, "v%d %s %s%s", (int)v, sb, nb_dtype_name(tv->dtype),
                 g->gv[v].role == NB_GV_INPUT ? " (input)" : g->gv[v].role == NB_GV_CONST ? " (const)" : "");
}

/* "[add+add_channel+silu]" for a fused node (the ops it holds), else "". */
static const char *fused_ops(const nb_top *op, char *buf, size_t cap) {
    char d[224];
    buf[0] = 0;
    if (op->kind == NB_TOP_FUSED && op->obj)
        snprintf(buf, cap, "[%s]", nb_fuse_describe(nb_fuse_kernel_spec(op->obj), d, sizeof d));
    return buf;
}

static void dump_text(nb_graph *g, dump_out *o) {
    nb_graph_info in;
    nb_graph_get_info(g, &in);
    put(o, "graph: %d nodes, %d inputs, %d constants, %d outputs, %s, on %s\n", in.n_nodes,
        in.n_inputs, in.n_consts, in.n_outputs, in.has_backward ? "forward + backward" : "forward",
        g->on_cuda ? nb_device_name(g->rt->dev) : "cpu");
    if (g->planned)
        put(o, "memory: planned peak %lld bytes (naive %lld), inputs + constants %lld bytes\n",
            (long long)g->plan_peak, (long long)g->plan_naive, (long long)g->fixed_bytes);
    if (g->has_backward) put(o, "loss: v%d\n", (int)g->loss);
    for (int32_t i = 0; i < g->n_inputs; i++) {
        char vb[256];
        val_desc(g, g->inputs[i], vb, sizeof vb);
        put(o, "input %d: %s\n", (int)i, vb);
    }
    double tot[2] = {0, 0};
    for (int32_t k = 0; k < g->n_nodes; k++) {
        const nb_top *op = &g->nodes[k];
        char fb[256];
        put(o, "node %d %s%s", (int)k, nb_tape_op_name(op->kind), fused_ops(op, fb, sizeof fb));
        if (op->kind == NB_TOP_CALL && op->obj) put(o, "(%s)", nb_func_name(op->obj)); /* the user's function */
        put(o, ":");
        for (int i = 0; i < op->nin; i++) {
            char vb[256];
            if (op->in[i] < 0) {
                put(o, "%s -", i ? "," : "");
                continue;
            }
            val_desc(g, op->in[i], vb, sizeof vb);
            put(o, "%s %s", i ? "," : "", vb);
        }
        char vb[256];
        val_desc(g, op->out, vb, sizeof vb);
        put(o, " -> %s%s, %lld B", vb, g->gv[op->out].output ? " (output)" : "",
            (long long)g->gv[op->out].bytes);
        if (g->gn[k].hook) put(o, ", hooked");
        for (int d = 0; d < 2; d++)
            if (g->gn[k].ms[d] >= 0) {
                put(o, ", %s %.4f ms", d ? "bwd" : "fwd", g->gn[k].ms[d]);
                tot[d] += g->gn[k].ms[d];
            }
        if (g->planned && g->gv[op->out].off >= 0)
            put(o, ", @%lld live %d..%d", (long long)g->gv[op->out].off, (int)g->gv[op->out].life[0],
                (int)g->gv[op->out].life[1]);
        put(o, "\n");
    }
    if (tot[0] > 0 || tot[1] > 0) put(o, "time: forward %.4f ms, backward %.4f ms\n", tot[0], tot[1]);
    /* the compiled graph's generated kernels (nb_graph_compile), each once, after the nodes
     * that run it */
    for (int32_t k = 0; k < g->n_nodes; k++) {
        const void *fk = g->nodes[k].kind == NB_TOP_FUSED ? g->nodes[k].obj : NULL;
        int seen = 0;
        for (int32_t j = 0; fk && j < k; j++) seen |= g->nodes[j].obj == fk && g->nodes[j].kind == NB_TOP_FUSED;
        if (!fk || seen) continue;
        put(o, "fused kernel of node %d", (int)k);
        for (int32_t j = k + 1; j < g->n_nodes; j++)
            if (g->nodes[j].kind == NB_TOP_FUSED && g->nodes[j].obj == fk) put(o, ", %d", (int)j);
        put(o, ":\n");
        const char *src = nb_fuse_kernel_source(fk); /* line by line: put() writes <= 1 KiB */
        for (const char *p = src; *p;) {
            const char *e = strchr(p, '\n');
            int len = e ? (int)(e - p) : (int)strlen(p);
            put(o, "    %.*s\n", len, p);
            p += len + (e != NULL);
        }
    }
}

static void dump_dot(nb_graph *g, dump_out *o) {
    put(o, "digraph nabla_graph {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n");
    char sb[96];
    /* sources: inputs, constants, parameters that a node reads */
    for (nb_tvar v = 0; v < g->n_vals; v++) {
        const nb_gval *gv = &g->gv[v];
        if (gv->role == NB_GV_NONE || gv->role == NB_GV_ACT) continue;
        int used = 0;
        for (int32_t k = 0; k < g->n_nodes && !used; k++)
            for (int i = 0; i < g->nodes[k].nin; i++) used |= g->nodes[k].in[i] == v;
        if (!used) continue;
        nb_tape_shape_str(&g->vals[v], sb, sizeof sb);
        if (gv->role == NB_GV_PARAM)
            put(o, "  v%d [shape=box, style=dashed, label=\"param %s\\n%s\"];\n", (int)v,
                g->vals[v].name, sb);
        else
            put(o, "  v%d [shape=box, label=\"%s %d\\n%s %s\"];\n", (int)v, role_name(gv->role),
                gv->role == NB_GV_INPUT ? gv->input_index : (int)v, sb,
                nb_dtype_name(g->vals[v].dtype));
    }
    for (int32_t k = 0; k < g->n_nodes; k++) {
        const nb_top *op = &g->nodes[k];
        const nb_gval *gy = &g->gv[op->out];
        nb_tape_shape_str(&g->vals[op->out], sb, sizeof sb);
        char fb[256];
        put(o, "  n%d [shape=ellipse%s, label=\"%d: %s%s\\n%s %lld B", (int)k,
            gy->output ? ", peripheries=2" : "", (int)k, nb_tape_op_name(op->kind),
            fused_ops(op, fb, sizeof fb), sb, (long long)gy->bytes);
        for (int d = 0; d < 2; d++)
            if (g->gn[k].ms[d] >= 0) put(o, "\\n%s %.4f ms", d ? "bwd" : "fwd", g->gn[k].ms[d]);
        put(o, "\"];\n");
        for (int i = 0; i < op->nin; i++) {
            nb_tvar x = op->in[i];
            if (x < 0) continue;
            nb_tape_shape_str(&g->vals[x], sb, sizeof sb);
            if (g->gv[x].role == NB_GV_ACT)
                put(o, "  n%d -> n%d [label=\"%s\"];\n", (int)g->gv[x].producer, (int)k, sb);
            else
                put(o, "  v%d -> n%d [label=\"%s\"];\n", (int)x, (int)k, sb);
        }
    }
    put(o, "}\n");
}

static nb_status dump(nb_graph *g, unsigned flags, dump_out *o, const char *fn) {
    if (!g) return nb_error(NB_ERR_INVALID_ARG, "%s: graph is NULL", fn);
    if (!flags || (flags & ~(NB_GRAPH_DUMP_TEXT | NB_GRAPH_DUMP_DOT)))
        return nb_error(NB_ERR_INVALID_ARG, "%s: flags 0x%x (NB_GRAPH_DUMP_TEXT and/or "
                        "NB_GRAPH_DUMP_DOT)", fn, flags);
    if (flags & NB_GRAPH_DUMP_TEXT) dump_text(g, o);
    if (flags & NB_GRAPH_DUMP_DOT) dump_dot(g, o);
    if (o->ioerr) return nb_error(NB_ERR_IO, "%s: writing the dump failed", fn);
    return NB_OK;
}

nb_status nb_graph_dump(nb_graph *g, unsigned flags, char *buf, size_t cap, size_t *needed) {
    if (!buf && cap) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_dump: buf is NULL");
    dump_out o = {.buf = buf, .cap = cap};
    if (buf && cap) buf[0] = 0;
    nb_status s = dump(g, flags, &o, "nb_graph_dump");
    if (needed) *needed = o.len;
    return s;
}

nb_status nb_graph_dump_file(nb_graph *g, unsigned flags, FILE *f) {
    if (!f) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_dump_file: f is NULL");
    dump_out o = {.f = f};
    return dump(g, flags, &o, "nb_graph_dump_file");
}

/* Compiled graphs (include/nabla/graph.h: nb_graph_compile): passes over a recorded graph's node
 * list, in place.
 *
 *   dead        nodes whose output reaches no output (nb_graph_output, the loss) are dropped
 *   duplicates  a node with the kind, inputs, attributes and module object of an earlier one is
 *               dropped and its readers read the earlier one's output (not when its own output
 *               is an output: the handle must stay readable)
 *   epilogues   linear -> relu (the relu the linear's only reader) becomes one LINEAR_RELU node
 *               (nb_top_fuse_linear_relu: the relu in the GEMM's bias pass on CUDA)
 *   fusion      maximal groups of fusable nodes (fuse.h: silu, relu, add, add_channel, cast
 *               to f32, mse as the last op, and CALL nodes of elementwise user functions --
 *               float scalar parameters, arrays of the output's shape -- inlined) whose intermediate values no other node reads and that are
 *               not outputs become ONE node of the FUSED row: a generated [Differentiable] .nb
 *               function compiled through the module layer (the text is the structure: equal
 *               groups share one kernel, and the disk cache makes the next process warm), run
 *               forward by a vectorized call and backward by its NB_MODE_BWD call, so the
 *               backward graph is compiled the same way.
 * Grouping: nodes are visited from the last; a fusable node not yet grouped is a root, and the
 * producers of its members' operands join while (a) the producer is fusable, (b) every reader
 * of its output is in the group and the output is no graph output, (c) the value has the
 * group's full shape (add_channel's per-channel operand and anything feeding it stays outside:
 * it is an input of the kernel, broadcast by its binding), (d) the kernel stays within
 * NB_FUSE_MAX_IN inputs and NB_FUSE_MAX_NODES ops. A group of one node stays as it is. Values
 * must be f32 (bf16 storage: a fused kernel's gradients are f32 arrays; such graphs keep their
 * rows).
 *   folding     a node whose inputs are all constants (activations made before recording) and
 *               whose output needs no gradient runs once, at compile time, by its own row; its
 *               output becomes a constant (the graph's fold block) and the node goes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "graph/fuse.h"
#include "graph/graph_internal.h"
#include "graph/tape_call.h"
#include "nabla/alloc.h"
#include "nabla/device.h"

/* ---- editing the node list ------------------------------------------------------------------- */

/* Drops the nodes with why[k] != 0 (NB_GONE_*: their outputs become NB_GV_NONE, remembering why
 * and, for duplicates and fused nodes, the value that took them over: to[k]), keeping the order
 * of the rest. */
static nb_status compact(nb_graph *g, const unsigned char *why, const nb_tvar *to) {
    int32_t j = 0;
    for (int32_t k = 0; k < g->n_nodes; k++) {
        nb_gval *gy = &g->gv[g->nodes[k].out];
        if (why[k] == NB_GONE_FOLDED) { /* its output is a constant now */
            gy->producer = -1;
            continue;
        }
        if (why[k]) {
            gy->role = NB_GV_NONE;
            gy->producer = -1;
            gy->gone = why[k];
            gy->gone_to = to ? to[k] : NB_TVAR_NONE;
            continue;
        }
        g->nodes[j] = g->nodes[k];
        g->gn[j] = g->gn[k];
        gy->producer = j++;
    }
    g->n_nodes = j;
    g->rt->n_ops = j;
    nb_graph_invalidate(g);
    return NB_OK;
}

/* Per-value reader counts over the current nodes (outputs and the loss count as one more, so
 * they are never "only read inside a group"). */
static nb_status count_readers(const nb_graph *g, int32_t **cnt) {
    *cnt = nb_calloc((size_t)g->n_vals * sizeof **cnt + 1, 16);
    if (!*cnt) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_graph_compile: out of host memory");
    for (int32_t k = 0; k < g->n_nodes; k++)
        for (int i = 0; i < g->nodes[k].nin; i++)
            if (g->nodes[k].in[i] >= 0) (*cnt)[g->nodes[k].in[i]]++;
    for (nb_tvar v = 0; v < g->n_vals; v++)
        if (g->gv[v].output || v == g->loss) (*cnt)[v]++;
    return NB_OK;
}

static void free_counts(const nb_graph *g, int32_t *cnt) {
    nb_free(cnt, (size_t)g->n_vals * sizeof *cnt + 1);
}

/* ---- dead nodes -------------------------------------------------------------------------------- */

static nb_status pass_dead(nb_graph *g, int *removed) {
    int32_t n = g->n_nodes;
    unsigned char *live = nb_calloc((size_t)g->n_vals + 1, 16), *why = nb_calloc((size_t)n + 1, 16);
    nb_status s = live && why ? NB_OK : nb_error(NB_ERR_OUT_OF_MEMORY, "nb_graph_compile: out of host memory");
    if (!s) {
        for (nb_tvar v = 0; v < g->n_vals; v++) live[v] = g->gv[v].output || v == g->loss;
        for (int32_t k = n - 1; k >= 0; k--) {
            const nb_top *op = &g->nodes[k];
            if (!live[op->out]) {
                why[k] = NB_GONE_DEAD;
                (*removed)++;
                continue;
            }
            for (int i = 0; i < op->nin; i++)
                if (op->in[i] >= 0) live[op->in[i]] = 1;
        }
        if (*removed) s = compact(g, why, NULL);
    }
    if (live) nb_free(live, (size_t)g->n_vals + 1);
    if (why) nb_free(why, (size_t)n + 1);
    return s;
}

/* ---- duplicate nodes --------------------------------------------------------------------------- */

static int same_node(const nb_graph *g, const nb_top *a, const nb_top *b) {
    if (a->kind != b->kind || a->nin != b->nin || a->obj != b->obj || memcmp(a->ip, b->ip, sizeof a->ip) ||
        memcmp(a->fp, b->fp, sizeof a->fp))
        return 0;
    for (int i = 0; i < a->nin; i++)
        if (a->in[i] != b->in[i]) return 0;
    const nb_tval *x = &g->vals[a->out], *y = &g->vals[b->out];
    return x->ndim == y->ndim && x->dtype == y->dtype && x->needs_grad == y->needs_grad &&
           !memcmp(x->shape, y->shape, sizeof(int64_t) * (size_t)x->ndim);
}

static nb_status pass_dedup(nb_graph *g, int *removed) {
    int32_t n = g->n_nodes;
    unsigned char *why = nb_calloc((size_t)n + 1, 16);
    nb_tvar *to = nb_calloc((size_t)(n + 1) * sizeof *to, 16);
    nb_status s = why && to ? NB_OK : nb_error(NB_ERR_OUT_OF_MEMORY, "nb_graph_compile: out of host memory");
    for (int32_t k = 0; !s && k < n; k++) {
        nb_top *op = &g->nodes[k];
        nb_tvar y = op->out;
        if (g->gv[y].output || y == g->loss) continue;
        for (int32_t j = 0; j < k; j++) {
            if (why[j] || !same_node(g, &g->nodes[j], op)) continue;
            /* later readers of y read the earlier node's output (inputs compare equal after this,
             * so chains of duplicates go in one sweep) */
            nb_tvar x = g->nodes[j].out;
            for (int32_t m = k + 1; m < n; m++)
                for (int i = 0; i < g->nodes[m].nin; i++)
                    if (g->nodes[m].in[i] == y) g->nodes[m].in[i] = x;
            why[k] = NB_GONE_DUP;
            to[k] = x;
            (*removed)++;
            break;
        }
    }
    if (!s && *removed) s = compact(g, why, to);
    if (why) nb_free(why, (size_t)n + 1);
    if (to) nb_free(to, (size_t)(n + 1) * sizeof *to);
    return s;
}

/* ---- constant folding -------------------------------------------------------------------------- */

/* A node whose inputs are all constants (activations made before recording, or folded) and whose
 * output needs no gradient is computed once, now, by its row, into the graph's fold block; its
 * output becomes a constant and the node goes. */
static nb_status pass_fold(nb_graph *g, int *folded) {
    int32_t n = g->n_nodes;
    unsigned char *why = nb_calloc((size_t)n + 1, 16), *cst = nb_calloc((size_t)g->n_vals + 1, 16);
    nb_status s = why && cst ? NB_OK : nb_error(NB_ERR_OUT_OF_MEMORY, "nb_graph_compile: out of host memory");
    int64_t bytes = 0;
    for (nb_tvar v = 0; !s && v < g->n_vals; v++) cst[v] = g->gv[v].role == NB_GV_CONST;
    for (int32_t k = 0; !s && k < n; k++) {
        const nb_top *op = &g->nodes[k];
        int ok = !g->vals[op->out].needs_grad, any = 0;
        for (int i = 0; i < op->nin; i++)
            if (op->in[i] >= 0) ok &= cst[op->in[i]], any = 1;
        if (!ok || !any) continue;
        why[k] = NB_GONE_FOLDED;
        cst[op->out] = 1;
        bytes += (g->gv[op->out].bytes + 63) / 64 * 64;
        (*folded)++;
    }
    if (!s && *folded) {
        /* a new block: the earlier folds' data, then this pass's */
        void *blk = NULL;
        struct nb_buffer *buf = NULL;
        int64_t old = g->fold_bytes, off = old;
        s = nb_graph_alloc(g, old + bytes, &blk, &buf);
        if (!s && old) {
            s = g->on_cuda ? nb_memcpy_d2d(g->rt->dev, blk, g->fold, (size_t)old)
                           : (memcpy(blk, g->fold, (size_t)old), NB_OK);
            for (nb_tvar v = 0; !s && v < g->n_vals; v++) {
                char *d = (char *)g->vals[v].data;
                if (g->gv[v].role == NB_GV_CONST && d >= (char *)g->fold && d < (char *)g->fold + old)
                    g->vals[v].data = (float *)((char *)blk + (d - (char *)g->fold));
            }
        }
        if (!s && (s = nb_tape_reset(g->rt))) (void)0; /* what rows allocate for themselves */
        g->rt->n_vals = g->n_vals;
        for (int32_t k = 0; !s && k < n; k++) {
            if (why[k] != NB_GONE_FOLDED) continue;
            nb_top *op = &g->nodes[k];
            g->vals[op->out].data = (float *)((char *)blk + off);
            off += (g->gv[op->out].bytes + 63) / 64 * 64;
            s = nb_tape_run_op(g->rt, op, 0);
            if (s) {
                char msg[300], nb[64];
                snprintf(msg, sizeof msg, "%s", nb_last_error());
                s = nb_error(s, "nb_graph_compile: folding %s: %s", nb_graph_node_str(g, k, nb, sizeof nb), msg);
            }
            g->gv[op->out].role = NB_GV_CONST;
            g->n_consts++;
        }
        if (s) { /* (the graph is broken: nb_graph_compile marks it) */
            if (buf) nb_buffer_release(buf);
            else if (blk) nb_free(blk, (size_t)(old + bytes));
        } else {
            if (g->fold_buf) nb_buffer_release(g->fold_buf);
            else if (g->fold) nb_free(g->fold, (size_t)old);
            g->fold = blk, g->fold_buf = buf, g->fold_bytes = old + bytes;
            s = compact(g, why, NULL);
        }
    }
    if (why) nb_free(why, (size_t)n + 1);
    if (cst) nb_free(cst, (size_t)g->n_vals + 1);
    return s;
}

/* ---- GEMM epilogues ------------------------------------------------------------------------------ */

/* linear -> relu, where the relu is the linear's only reader and the linear's output no graph
 * output: one LINEAR_RELU node (the relu rides in the GEMM's bias pass on CUDA; ops.def). */
static nb_status pass_epilogue(nb_graph *g, int *made) {
    int32_t n = g->n_nodes, *readers = NULL;
    unsigned char *why = nb_calloc((size_t)n + 1, 16);
    nb_tvar *to = nb_calloc((size_t)(n + 1) * sizeof *to, 16);
    nb_status s = why && to ? count_readers(g, &readers)
                            : nb_error(NB_ERR_OUT_OF_MEMORY, "nb_graph_compile: out of host memory");
    for (int32_t k = 0; !s && k < n; k++) {
        nb_top *op = &g->nodes[k], f;
        nb_tvar x = op->nin > 0 ? op->in[0] : NB_TVAR_NONE;
        if (op->kind != NB_TOP_RELU || x < 0 || g->gv[x].role != NB_GV_ACT || readers[x] != 1) continue;
        int32_t p = g->gv[x].producer;
        if (p < 0 || why[p] || !nb_top_fuse_linear_relu(&g->nodes[p], op, &f)) continue;
        *op = f;
        why[p] = NB_GONE_FUSED;
        to[p] = op->out;
        (*made)++;
    }
    if (!s && *made) s = compact(g, why, to);
    if (readers) free_counts(g, readers);
    if (why) nb_free(why, (size_t)n + 1);
    if (to) nb_free(to, (size_t)(n + 1) * sizeof *to);
    return s;
}

/* ---- fusion ------------------------------------------------------------------------------------ */

static int same_dims(const nb_tval *a, const nb_tval *b) {
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim);
}

/* Node k can join a fused kernel: its row has an expression and its values are f32. */
static int fusable(const nb_graph *g, const nb_top *op) {
    if (op->kind == NB_TOP_CALL) { /* a user function, elementwise: inlined */
        nb_tcall tc;
        nb_tcall_of_op(op, &tc);
        if (tc.out_0d || !nb_fuse_func_inlinable(tc.f, tc.nparams) || tc.nparams > NB_FUSE_MAX_PARAMS) return 0;
        for (int i = 0; i < op->nin; i++)
            if (tc.view_ndim[i] || op->in[i] < 0 || !same_dims(&g->vals[op->in[i]], &g->vals[op->out])) return 0;
    } else if (!nb_fuse_kind_fusable(op->kind) || (op->kind == NB_TOP_CAST && op->ip[0] != NB_F32)) {
        return 0;
    }
    if (g->vals[op->out].dtype != NB_F32) return 0;
    for (int i = 0; i < op->nin; i++)
        if (op->in[i] < 0 || g->vals[op->in[i]].dtype != NB_F32) return 0;
    return 1;
}

/* One group being formed: member nodes (schedule order after sorting) and its inputs. */
typedef struct fgroup {
    int32_t mem[NB_FUSE_MAX_NODES];
    int n;
    nb_tvar in[NB_FUSE_MAX_IN];
    unsigned char chan[NB_FUSE_MAX_IN];
    int n_in;
} fgroup;

static int in_group(const fgroup *G, int32_t k) {
    for (int i = 0; i < G->n; i++)
        if (G->mem[i] == k) return 1;
    return 0;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* The inputs of G (values read by members and written by no member), in schedule order of
 * their first reader; 0 when more than NB_FUSE_MAX_IN. */
static int group_inputs(const nb_graph *g, fgroup *G) {
    qsort(G->mem, (size_t)G->n, sizeof G->mem[0], cmp_i32);
    G->n_in = 0;
    for (int m = 0; m < G->n; m++) {
        const nb_top *op = &g->nodes[G->mem[m]];
        for (int i = 0; i < op->nin; i++) {
            nb_tvar x = op->in[i];
            int32_t p = g->gv[x].role == NB_GV_ACT ? g->gv[x].producer : -1;
            if (p >= 0 && in_group(G, p)) continue;
            int seen = 0;
            for (int j = 0; j < G->n_in; j++) seen |= G->in[j] == x;
            if (seen) continue;
            if (G->n_in == NB_FUSE_MAX_IN) return 0;
            G->chan[G->n_in] = op->kind == NB_TOP_ADD_CHANNEL && i == 1;
            G->in[G->n_in++] = x;
        }
    }
    return 1;
}

/* Grows the group rooted at G->mem[0] by the producers that may join (see the file comment). */
static void grow(const nb_graph *g, const int32_t *readers, const int32_t *grouped, const nb_tval *full,
                 fgroup *G) {
    for (int changed = 1; changed;) {
        changed = 0;
        for (int m = 0; m < G->n && G->n < NB_FUSE_MAX_NODES; m++) {
            const nb_top *op = &g->nodes[G->mem[m]];
            for (int i = 0; i < op->nin && G->n < NB_FUSE_MAX_NODES; i++) {
                nb_tvar x = op->in[i];
                if (x < 0 || g->gv[x].role != NB_GV_ACT || (op->kind == NB_TOP_ADD_CHANNEL && i == 1)) continue;
                int32_t p = g->gv[x].producer;
                if (p < 0 || grouped[p] >= 0 || in_group(G, p) || !fusable(g, &g->nodes[p]) ||
                    nb_fuse_kind_reduces(g->nodes[p].kind) || !same_dims(&g->vals[x], full))
                    continue;
                int inside = 0; /* reads of x by members */
                for (int q = 0; q < G->n; q++)
                    for (int j = 0; j < g->nodes[G->mem[q]].nin; j++) inside += g->nodes[G->mem[q]].in[j] == x;
                if (inside != readers[x]) continue;
                fgroup T = *G;
                T.mem[T.n++] = p;
                if (!group_inputs(g, &T)) continue;
                *G = T;
                changed = 1;
            }
        }
    }
}

/* The spec of a formed group (members sorted, inputs collected). */
static nb_status group_spec(const nb_graph *g, const fgroup *G, nb_fuse_spec *sp) {
    memset(sp, 0, sizeof *sp);
    for (int i = 0; i < G->n_in; i++) nb_fuse_add_input(sp, G->chan[i] ? NB_FUSE_CHANNEL : NB_FUSE_FULL);
    for (int m = 0; m < G->n; m++) {
        const nb_top *op = &g->nodes[G->mem[m]];
        int in[NB_FUSE_MAX_IN] = {0};
        for (int i = 0; i < op->nin; i++) {
            nb_tvar x = op->in[i];
            in[i] = -1;
            for (int j = 0; j < G->n_in; j++)
                if (G->in[j] == x) in[i] = j;
            for (int q = 0; q < m; q++)
                if (g->nodes[G->mem[q]].out == x) in[i] = G->n_in + q;
        }
        if (op->kind == NB_TOP_CALL) {
            nb_tcall tc;
            nb_tcall_of_op(op, &tc);
            nb_fuse_call c = {.f = tc.f, .nparams = tc.nparams};
            for (int p = 0; p < tc.nparams; p++) {
                c.arg[p] = tc.src[p] == NB_TCALL_SCALAR ? -1 : tc.src[p];
                c.scalar[p] = tc.scalar[p];
            }
            if (nb_fuse_add_call(sp, &c, op->nin, in) < 0) return NB_ERR_INVALID_ARG;
            continue;
        }
        if (nb_fuse_add_node(sp, op->kind, op->nin, in) < 0) return NB_ERR_INVALID_ARG;
        if (op->kind == NB_TOP_CAST) sp->node[m].ip[0] = op->ip[0];
    }
    return nb_fuse_spec_check(sp);
}

/* The graph's kernel for spec sp: an existing one with the same text, or a new one it owns. */
static nb_status kernel_for(nb_graph *g, const nb_fuse_spec *sp, nb_fuse_kernel **out) {
    char *text = NULL;
    NB_TRY(nb_fuse_codegen(sp, "nb_fused", &text));
    for (int32_t i = 0; i < g->n_fk; i++)
        if (!strcmp(nb_fuse_kernel_source(g->fk[i]), text)) {
            nb_fuse_free_text(text);
            *out = g->fk[i];
            return NB_OK;
        }
    nb_fuse_free_text(text);
    if (g->n_fk == g->fk_cap) {
        int32_t cap = g->fk_cap ? 2 * g->fk_cap : 8;
        nb_fuse_kernel **a = nb_calloc((size_t)cap * sizeof *a, 16);
        if (!a) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_graph_compile: out of host memory");
        if (g->fk) {
            memcpy(a, g->fk, (size_t)g->n_fk * sizeof *a);
            nb_free(g->fk, (size_t)g->fk_cap * sizeof *a);
        }
        g->fk = a;
        g->fk_cap = cap;
    }
    NB_TRY(nb_fuse_kernel_create(nb_tape_device(g->rt), sp, out));
    g->fk[g->n_fk++] = *out;
    return NB_OK;
}

static nb_status pass_fuse(nb_graph *g, int *fused_nodes, int *fused_ops) {
    int32_t n = g->n_nodes, *readers = NULL, *grouped = nb_alloc((size_t)(n + 1) * sizeof(int32_t), 16);
    unsigned char *why = nb_calloc((size_t)n + 1, 16);
    nb_tvar *to = nb_calloc((size_t)(n + 1) * sizeof *to, 16);
    nb_status s = grouped && why && to ? count_readers(g, &readers)
                                       : nb_error(NB_ERR_OUT_OF_MEMORY, "nb_graph_compile: out of host memory");
    for (int32_t k = 0; k < n && grouped; k++) grouped[k] = -1;
    for (int32_t k = n - 1; !s && k >= 0; k--) {
        nb_top *op = &g->nodes[k];
        if (grouped[k] >= 0 || !fusable(g, op)) continue;
        /* the full shape: the root's output, or what a reduction reduces */
        const nb_tval *full = &g->vals[nb_fuse_kind_reduces(op->kind) ? op->in[0] : op->out];
        fgroup G = {.mem = {k}, .n = 1};
        if (!group_inputs(g, &G)) continue;
        G.mem[0] = k;
        grow(g, readers, grouped, full, &G);
        if (G.n < 2) continue;
        nb_fuse_spec sp;
        nb_fuse_kernel *fk = NULL;
        s = group_spec(g, &G, &sp);
        if (!s) s = kernel_for(g, &sp, &fk);
        if (s && sp.n_calls) { /* an inlined function's module that does not import here (its own
                                * imports need include paths we do not know): keep the rows */
            nb_clear_error();
            s = NB_OK;
            continue;
        }
        if (s) break;
        nb_top f = {.kind = NB_TOP_FUSED, .nin = G.n_in, .out = op->out, .obj = fk};
        for (int i = 0; i < NB_TOP_MAX_IN; i++) f.in[i] = i < G.n_in ? G.in[i] : NB_TVAR_NONE;
        for (int m = 0; m < G.n; m++) {
            grouped[G.mem[m]] = k;
            if (G.mem[m] != k) {
                why[G.mem[m]] = NB_GONE_FUSED;
                to[G.mem[m]] = op->out;
            }
        }
        *op = f;
        memset(&g->gn[k], 0, sizeof g->gn[k]);
        g->gn[k].ms[0] = g->gn[k].ms[1] = -1;
        (*fused_nodes)++;
        *fused_ops += G.n;
    }
    if (!s && *fused_nodes) s = compact(g, why, to);
    if (readers) free_counts(g, readers);
    if (grouped) nb_free(grouped, (size_t)(n + 1) * sizeof(int32_t));
    if (why) nb_free(why, (size_t)n + 1);
    if (to) nb_free(to, (size_t)(n + 1) * sizeof *to);
    return s;
}

/* ---- the entry ---------------------------------------------------------------------------------- */

void nb_graph_compile_options_init(nb_graph_compile_options *o) {
    if (o) memset(o, 0, sizeof *o);
}

nb_status nb_graph_compile(nb_graph *g, const nb_graph_compile_options *opts, nb_graph_compile_stats *stats) {
    if (!g) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_compile: graph is NULL");
    if (!g->tape) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_compile: the graph's tape was freed");
    nb_graph_compile_options o;
    nb_graph_compile_options_init(&o);
    if (opts) o = *opts;
    nb_graph_compile_stats st = {0};
    nb_status s = NB_OK;
    if (!o.no_dead) s = pass_dead(g, &st.dead);
    if (!s && !o.no_dedup) s = pass_dedup(g, &st.duplicates);
    if (!s && !o.no_dead && st.duplicates) s = pass_dead(g, &st.dead);
    if (!s && !o.no_fold) s = pass_fold(g, &st.folded);
    if (!s && !o.no_epilogue) s = pass_epilogue(g, &st.epilogues);
    if (!s && !o.no_fuse) s = pass_fuse(g, &st.fused_nodes, &st.fused_ops);
    if (!s) s = nb_graph_validate(g);
    if (s) g->broken = 1;
    if (stats) *stats = st;
    return s;
}

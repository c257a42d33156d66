/* Memory plan of a recorded graph (graph_internal.h): the lifetime of every activation and
 * activation gradient over the forward + backward schedule, and offsets in ONE block such that
 * buffers whose lifetimes overlap never overlap in memory.
 *
 * Schedule: forward node i at step i, the backward's seed at step N (N nodes), the backward of
 * node i at step 2N - i. A value's data lives from its producer's step to its last reader: the
 * forward of every consumer and, with a backward, the backward of its producer and of every
 * consumer (a row's backward may read its inputs and its output). Its gradient lives from the
 * first backward that can write it (the backward of its latest consumer; the seed for the loss)
 * to its producer's backward, which reads it. Outputs (data), and gradients of inputs and
 * constants, live to the end. Inputs and constants themselves are in the fixed block.
 *
 * Placement: greedy by size (the largest buffer first, each at the lowest offset where it
 * overlaps no placed buffer of overlapping lifetime; 64-byte aligned): TFLite's "greedy by size"
 * arena planner. Row scratch and saved tensors stay in the replay tape's arena (not planned). */
#include <stdlib.h>
#include <string.h>

#include "nabla/alloc.h"
#include "nabla/device.h"
#include "graph/graph_internal.h"

#define NB_PLAN_ALIGN 64

typedef struct pbuf {
    int64_t size, off;
    int32_t first, last;
    nb_tvar v;
    int grad; /* 0: data, 1: gradient */
} pbuf;

static int pbuf_cmp(const void *a, const void *b) {
    const pbuf *x = a, *y = b;
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    return x->v < y->v ? -1 : x->v > y->v;
}

static int off_cmp(const void *a, const void *b) {
    const pbuf *const *x = a, *const *y = b;
    return (*x)->off < (*y)->off ? -1 : (*x)->off > (*y)->off;
}

/* The value whose memory v uses: v itself, or what a view (alias1: a CUDA reshape) shares data
 * and gradient with, followed to the end. */
static nb_tvar plan_root(const nb_graph *g, nb_tvar v) {
    for (int hops = 0; g->vals[v].alias1 && hops < g->n_vals; hops++) v = g->vals[v].alias1 - 1;
    return v;
}

/* Lifetimes of every planned buffer of g (data of NB_GV_ACT values; gradients). A view has no
 * buffer of its own: its uses extend its root's lifetimes. */
static void plan_lifetimes(nb_graph *g) {
    int32_t n = g->n_nodes;
    int bwd = g->has_backward;
    g->t_end = bwd ? 2 * n : n - 1;
    for (nb_tvar v = 0; v < g->n_vals; v++) {
        nb_gval *gv = &g->gv[v];
        gv->life[0] = gv->life[1] = gv->glife[0] = gv->glife[1] = -1;
        gv->off = gv->goff = -1;
        if (gv->role == NB_GV_ACT && gv->producer >= 0 && !g->vals[v].alias1) {
            gv->life[0] = gv->life[1] = gv->producer;
            if (bwd) gv->life[1] = nb_graph_bwd_step(g, gv->producer);
        }
    }
    for (nb_tvar v = 0; v < g->n_vals; v++) { /* views' producers and outputs */
        nb_gval *gv = &g->gv[v], *gr = &g->gv[plan_root(g, v)];
        if (gr->life[0] < 0) continue;
        if (gv->producer >= 0) {
            int32_t last = bwd ? nb_graph_bwd_step(g, gv->producer) : gv->producer;
            if (last > gr->life[1]) gr->life[1] = last;
        }
        if (gv->output) gr->life[1] = g->t_end;
    }
    for (int32_t k = 0; k < n; k++) {
        const nb_top *op = &g->nodes[k];
        for (int i = 0; i < op->nin; i++) {
            nb_tvar x = op->in[i];
            if (x < 0) continue;
            nb_gval *gx = &g->gv[plan_root(g, x)];
            if (gx->life[0] >= 0) {
                int32_t last = bwd ? nb_graph_bwd_step(g, k) : k;
                if (last > gx->life[1]) gx->life[1] = last;
            }
            /* the gradient: written first by the backward of the latest consumer */
            if (bwd && g->vals[x].needs_grad && gx->role != NB_GV_PARAM) {
                int32_t first = nb_graph_bwd_step(g, k);
                if (gx->glife[0] < 0 || first < gx->glife[0]) gx->glife[0] = first;
            }
        }
    }
    if (bwd && g->loss >= 0 && g->vals[g->loss].needs_grad) {
        nb_gval *gl = &g->gv[plan_root(g, g->loss)];
        if (gl->glife[0] < 0 || n < gl->glife[0]) gl->glife[0] = n; /* the seed */
    }
    nb_tvar lroot = g->loss >= 0 ? plan_root(g, g->loss) : NB_TVAR_NONE;
    for (nb_tvar v = 0; v < g->n_vals; v++) {
        nb_gval *gv = &g->gv[v];
        if (gv->glife[0] < 0) continue;
        if (gv->role == NB_GV_ACT && gv->producer >= 0 && v != lroot)
            gv->glife[1] = nb_graph_bwd_step(g, gv->producer);
        else
            gv->glife[1] = g->t_end; /* inputs, constants, the loss: readable after the run */
        if (gv->glife[1] < gv->glife[0]) gv->glife[1] = gv->glife[0];
    }
}

/* Greedy by size; returns the peak (bytes). */
static nb_status plan_place(pbuf *b, int32_t nb, int64_t *peak) {
    qsort(b, (size_t)nb, sizeof *b, pbuf_cmp);
    pbuf **live = nb_alloc((size_t)(nb ? nb : 1) * sizeof *live, 16);
    if (!live) return nb_error(NB_ERR_OUT_OF_MEMORY, "graph plan: out of host memory");
    int64_t top = 0;
    for (int32_t i = 0; i < nb; i++) {
        int32_t nl = 0;
        for (int32_t j = 0; j < i; j++) /* placed buffers whose lifetime overlaps b[i]'s */
            if (b[j].first <= b[i].last && b[i].first <= b[j].last) live[nl++] = &b[j];
        qsort(live, (size_t)nl, sizeof *live, off_cmp);
        int64_t off = 0;
        for (int32_t j = 0; j < nl; j++) {
            if (live[j]->off - off >= b[i].size) break; /* the gap before it fits */
            int64_t end = live[j]->off + live[j]->size;
            if (end > off) off = end;
        }
        b[i].off = off;
        if (off + b[i].size > top) top = off + b[i].size;
    }
    nb_free(live, (size_t)(nb ? nb : 1) * sizeof *live);
    *peak = top;
    return NB_OK;
}

static void *g_block_alloc(nb_graph *g, int64_t bytes) {
    if (bytes <= 0) return NULL;
    if (g->on_cuda) {
        if (nb_buffer_alloc(g->rt->dev, (size_t)bytes, &g->block_buf) != NB_OK) return NULL;
        return nb_buffer_ptr(g->block_buf);
    }
    void *p = nb_alloc((size_t)bytes, NB_PLAN_ALIGN);
    if (!p) nb_error(NB_ERR_OUT_OF_MEMORY, "graph: out of host memory (%lld bytes)", (long long)bytes);
    return p;
}

static void g_block_free(nb_graph *g) {
    if (g->block_buf)
        nb_buffer_release(g->block_buf);
    else if (g->block)
        nb_free(g->block, (size_t)g->block_bytes);
    g->block = NULL;
    g->block_buf = NULL;
    g->block_bytes = 0;
}

nb_status nb_graph_plan(nb_graph *g) {
    if (g->planned) return NB_OK;
    plan_lifetimes(g);
    int32_t nb = 0;
    for (nb_tvar v = 0; v < g->n_vals; v++) nb += (g->gv[v].life[0] >= 0) + (g->gv[v].glife[0] >= 0);
    pbuf *b = nb_alloc((size_t)(nb ? nb : 1) * sizeof *b, 16);
    if (!b) return nb_error(NB_ERR_OUT_OF_MEMORY, "graph plan: out of host memory");
    int32_t k = 0;
    int64_t naive = 0;
    for (nb_tvar v = 0; v < g->n_vals; v++) {
        const nb_gval *gv = &g->gv[v];
        int64_t sz = (gv->bytes + NB_PLAN_ALIGN - 1) / NB_PLAN_ALIGN * NB_PLAN_ALIGN;
        if (sz < NB_PLAN_ALIGN) sz = NB_PLAN_ALIGN;
        for (int gr = 0; gr < 2; gr++) {
            const int32_t *l = gr ? gv->glife : gv->life;
            if (l[0] < 0) continue;
            b[k++] = (pbuf){.size = sz, .off = 0, .first = l[0], .last = l[1], .v = v, .grad = gr};
            naive += sz;
        }
    }
    int64_t peak = 0;
    nb_status s = plan_place(b, nb, &peak);
    if (s) {
        nb_free(b, (size_t)(nb ? nb : 1) * sizeof *b);
        return s;
    }
    /* the block: reused when the new plan fits in it */
    if (peak > g->block_bytes) {
        if (g->cg) { /* the captured CUDA graph points into the old block */
            nb_device_graph_destroy(g->cg);
            g->cg = NULL;
        }
        g_block_free(g);
        g->block = g_block_alloc(g, peak);
        if (!g->block && peak > 0) {
            nb_free(b, (size_t)(nb ? nb : 1) * sizeof *b);
            return NB_ERR_OUT_OF_MEMORY;
        }
        g->block_bytes = peak;
    }
    if (!g->grad_plan) {
        g->grad_plan = nb_alloc((size_t)(g->vals_cap ? g->vals_cap : 1) * sizeof(float *), 16);
        if (!g->grad_plan) {
            nb_free(b, (size_t)(nb ? nb : 1) * sizeof *b);
            return nb_error(NB_ERR_OUT_OF_MEMORY, "graph plan: out of host memory");
        }
    }
    memset(g->grad_plan, 0, (size_t)g->vals_cap * sizeof(float *));
    for (int32_t i = 0; i < nb; i++) {
        nb_gval *gv = &g->gv[b[i].v];
        char *p = (char *)g->block + b[i].off;
        if (b[i].grad) {
            gv->goff = b[i].off;
            g->grad_plan[b[i].v] = (float *)p;
        } else {
            gv->off = b[i].off;
        }
    }
    nb_free(b, (size_t)(nb ? nb : 1) * sizeof *b);
    g->plan_peak = peak;
    g->plan_naive = naive;
    g->rt->grad_plan = g->grad_plan;
    g->planned = 1;
    return NB_OK;
}

nb_status nb_graph_memory(nb_graph *g, int64_t *planned_peak, int64_t *naive_bytes) {
    if (!g) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_memory: graph is NULL");
    nb_status s = nb_graph_plan(g);
    if (s) return s;
    if (planned_peak) *planned_peak = g->plan_peak;
    if (naive_bytes) *naive_bytes = g->plan_naive;
    return NB_OK;
}

nb_status nb_graph_set_poison(nb_graph *g, int on) {
    if (!g) return nb_error(NB_ERR_INVALID_ARG, "nb_graph_set_poison: graph is NULL");
    if ((on != 0) != g->poison) {
        g->poison = on != 0;
        nb_graph_invalidate(g); /* a captured CUDA graph has (or lacks) the poison fills */
    }
    return NB_OK;
}

/* Fills bytes at p with all-ones bits: a NaN in f32 (0xFFFFFFFF) and in bf16 (0xFFFF). */
static nb_status poison(nb_graph *g, void *p, int64_t bytes) {
    if (g->on_cuda) return nb_memset(g->rt->dev, p, 0xFF, (size_t)bytes);
    memset(p, 0xFF, (size_t)bytes);
    return NB_OK;
}

nb_status nb_graph_poison_step(nb_graph *g, int32_t s) {
    if (s >= g->t_end) return NB_OK; /* the end: outputs stay */
    for (nb_tvar v = 0; v < g->n_vals; v++) {
        const nb_gval *gv = &g->gv[v];
        nb_status e;
        if (gv->off >= 0 && gv->life[1] == s &&
            (e = poison(g, (char *)g->block + gv->off, gv->bytes)))
            return e;
        if (gv->goff >= 0 && gv->glife[1] == s &&
            (e = poison(g, (char *)g->block + gv->goff, gv->bytes)))
            return e;
    }
    return NB_OK;
}

/* Command lists (include/nabla/cmdlist.h): calls recorded once (bound, compiled, parameter block
 * filled) and submitted in order; on CUDA the first submit captures them into a CUDA graph that
 * later submits replay. */
#include <string.h>

#include "call/call_internal.h"
#include "device/sync_check.h"
#include "nabla/alloc.h"
#include "nabla/cmdlist.h"

typedef struct cmd_entry {
    nb_call *c;      /* the recorded call (kept: its block, temporaries and bounds-check record) */
    nb_kentry *e;    /* its kernel */
} cmd_entry;

struct nb_cmdlist {
    nb_device *dev;
    cmd_entry *items;
    int n, cap;
    nb_tensor **keep;
    int nkeep, capkeep;
    nb_device_graph *graph;  /* CUDA: the calls captured by the first submit */
};

nb_status nb_cmdlist_create(nb_device *dev, nb_cmdlist **out) {
    if (!out) return nb_error(NB_ERR_INVALID_ARG, "nb_cmdlist_create: out is NULL");
    *out = NULL;
    if (!dev) return nb_error(NB_ERR_INVALID_ARG, "nb_cmdlist_create: device is NULL");
    nb_cmdlist *l = nb_calloc(sizeof *l, 16);
    if (!l) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_cmdlist_create: out of host memory");
    l->dev = dev;
    *out = l;
    return NB_OK;
}

nb_device *nb_cmdlist_device(const nb_cmdlist *l) { return l ? l->dev : NULL; }
int nb_cmdlist_count(const nb_cmdlist *l) { return l ? l->n : 0; }
int nb_cmdlist_uses_graph(const nb_cmdlist *l) { return l && l->graph; }

static void drop_graph(nb_cmdlist *l) {
    if (l->graph) nb_device_graph_destroy(l->graph);
    l->graph = NULL;
}

static nb_status append(nb_cmdlist *l, nb_call *c, nb_tensor **results, int max, int *count, const int64_t *grid,
                        const char *who) {
    if (count) *count = 0;
    if (!c) return nb_error(NB_ERR_INVALID_ARG, "%s: call is NULL", who);
    if (!l) {
        nb_call_free(c);
        return nb_error(NB_ERR_INVALID_ARG, "%s: list is NULL", who);
    }
    if (nb_module_device(c->f->m) != l->dev) {
        nb_status s = nb_error(NB_ERR_DEVICE, "%s: %s runs on %s but the command list is for %s", who,
                               nb_func_name(c->f), c->f->m->dev ? nb_device_name(c->f->m->dev) : "no device",
                               nb_device_name(l->dev));
        nb_call_free(c);
        return s;
    }
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 16;
        cmd_entry *ni = nb_alloc(sizeof *ni * (size_t)nc, 16);
        if (!ni) {
            nb_call_free(c);
            return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: out of host memory", who);
        }
        if (l->n) memcpy(ni, l->items, sizeof *ni * (size_t)l->n);
        if (l->items) nb_free(l->items, sizeof *l->items * (size_t)l->cap);
        l->items = ni;
        l->cap = nc;
    }
    nb_kentry *e = NULL;
    nb_status s = nb_call_record(c, results, max, count, grid, &e);
    if (s) { /* (nb_call_record released the call) */
        return s;
    }
    drop_graph(l); /* the batch changed: the next submit captures it anew */
    l->items[l->n].c = c;
    l->items[l->n].e = e;
    l->n++;
    return NB_OK;
}

nb_status nb_cmdlist_append(nb_cmdlist *l, nb_call *c, nb_tensor **results, int max, int *count) {
    if (max < 0 || (max > 0 && (!results || !count))) {
        if (c) nb_call_free(c);
        return nb_error(NB_ERR_INVALID_ARG, "nb_cmdlist_append: bad results/max/count");
    }
    return append(l, c, max > 0 ? results : NULL, max, count, NULL, "nb_cmdlist_append");
}

nb_status nb_cmdlist_append_grid(nb_cmdlist *l, nb_call *c, const int64_t grid[3]) {
    if (!grid) {
        if (c) nb_call_free(c);
        return nb_error(NB_ERR_INVALID_ARG, "nb_cmdlist_append_grid: grid is NULL");
    }
    return append(l, c, NULL, 0, NULL, grid, "nb_cmdlist_append_grid");
}

nb_status nb_cmdlist_keep(nb_cmdlist *l, nb_tensor *t) {
    if (!l || !t) return nb_error(NB_ERR_INVALID_ARG, "nb_cmdlist_keep: NULL argument");
    if (l->nkeep == l->capkeep) {
        int nc = l->capkeep ? l->capkeep * 2 : 16;
        nb_tensor **nk = nb_alloc(sizeof *nk * (size_t)nc, 16);
        if (!nk) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_cmdlist_keep: out of host memory");
        if (l->nkeep) memcpy(nk, l->keep, sizeof *nk * (size_t)l->nkeep);
        if (l->keep) nb_free(l->keep, sizeof *l->keep * (size_t)l->capkeep);
        l->keep = nk;
        l->capkeep = nc;
    }
    l->keep[l->nkeep++] = t;
    return NB_OK;
}

/* After the launches: device printf flushed, then each call's bounds-check record. */
static nb_status after(nb_cmdlist *l) {
    nb_status s = NB_OK;
    for (int i = 0; i < l->n && !s; i++) s = nb_call_after_launch(l->items[i].c, l->items[i].e);
    return s;
}

nb_status nb_cmdlist_submit(nb_cmdlist *l) {
    if (!l) return nb_error(NB_ERR_INVALID_ARG, "nb_cmdlist_submit: list is NULL");
    if (l->n == 0) return NB_OK;
    nb_status s;
    if (nb_device_get_kind(l->dev) != NB_DEVICE_CUDA) { /* the CPU: in order, each checked */
        for (int i = 0; i < l->n; i++) {
            if ((s = nb_call_launch_only(l->items[i].c, l->items[i].e))) return s;
            if ((s = nb_call_after_launch(l->items[i].c, l->items[i].e))) return s;
        }
        return NB_OK;
    }
    if (!l->graph) { /* the first submit: capture the launches into one graph */
        if ((s = nb_device_graph_capture_begin(l->dev))) return s;
        nb_status ls = NB_OK;
        for (int i = 0; i < l->n && !ls; i++) ls = nb_call_launch_only(l->items[i].c, l->items[i].e);
        nb_device_graph *g = NULL;
        s = nb_device_graph_capture_end(l->dev, &g); /* (always ends the capture) */
        if (ls) {
            if (g) nb_device_graph_destroy(g);
            return ls;
        }
        if (s) return s;
        l->graph = g;
    }
    if ((s = nb_device_graph_launch(l->graph))) return s;
    return after(l);
}

void nb_cmdlist_free(nb_cmdlist *l) {
    if (!l) return;
    drop_graph(l); /* (waits for a launch of it) */
    if (l->n && nb_device_get_kind(l->dev) == NB_DEVICE_CUDA) nb_device_wait(l->dev);
    for (int i = 0; i < l->n; i++) {
        nb_call_release_temps(l->items[i].c);
        nb_call_free(l->items[i].c);
    }
    for (int i = 0; i < l->nkeep; i++) nb_tensor_free(l->keep[i]);
    if (l->items) nb_free(l->items, sizeof *l->items * (size_t)l->cap);
    if (l->keep) nb_free(l->keep, sizeof *l->keep * (size_t)l->capkeep);
    nb_free(l, sizeof *l);
}

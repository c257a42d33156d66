/* Private to the graph layer: the recorded graph (include/nabla/graph.h) as the files of
 * src/graph/graph*.c and the passes of the compiled graph (fusion, dead / duplicate nodes,
 * constant folding) see it.
 *
 * A graph is a copy of a tape's op log: nodes are nb_top entries (the same rows of ops.def) over
 * values that are nb_tval entries (shape, dtype, needs_grad; data / grad pointers into the
 * graph's memory during a replay). Value handles are the recording tape's handles: values
 * [0, n_param_vals) are the tape's parameters (data / grad point into the tape's parameter and
 * gradient buffers, shared), the others are activations (role below).
 *
 * Replay runs the rows on a private tape g->rt ("replay tape") whose vals / ops arrays ARE
 * g->vals / g->nodes, whose parameter pointers are borrowed from the recording tape, and whose
 * arena holds what rows allocate themselves (saved tensors, scratch). Activation data and
 * activation gradients live in ONE planned block (graph_plan.c); inputs and constants in a fixed
 * block that keeps their data between runs.
 *
 * Passes that edit the graph (gfuse, ...): change g->nodes / g->vals / g->gv through the
 * helpers below, then call nb_graph_invalidate(g): the plan, the CUDA graph and the validation
 * are redone at the next run. A node whose gn[i].hook is set runs through it instead of its row
 * (forward and backward), e.g. a compiled kernel that replaces a chain of nodes. */
#ifndef NB_GRAPH_GRAPH_INTERNAL_H
#define NB_GRAPH_GRAPH_INTERNAL_H

#include "nabla/graph.h"
#include "graph/tape_internal.h"

struct nb_device_graph;
struct nb_event;

/* Role of a value slot in the graph. */
enum nb_gval_role {
    NB_GV_NONE = 0, /* not used by the graph (made before recording, or an unused orphan) */
    NB_GV_PARAM,    /* a tape parameter (shared memory; gradient in the tape's buffer) */
    NB_GV_INPUT,    /* made by nb_tape_input during recording: fixed block, set by set_input */
    NB_GV_CONST,    /* an activation made before recording that a node reads: fixed block,
                     * copied at record end */
    NB_GV_ACT,      /* the output of a node: planned memory */
};

/* Per-value graph facts (parallel to g->vals). */
typedef struct nb_gval {
    int role;          /* enum nb_gval_role */
    int output;        /* marked by nb_graph_output (or the loss): live to the end, readable */
    int input_index;   /* NB_GV_INPUT: its index; else -1 */
    int32_t producer;  /* NB_GV_ACT: the node that writes it; else -1 */
    int64_t bytes;     /* data bytes (count * dtype size) */
    /* the plan (graph_plan.c): schedule steps [first, last] of the data and of the gradient;
     * -1 when not planned. off / goff: offsets in the planned block, -1 when none. */
    int32_t life[2], glife[2];
    int64_t off, goff;
    /* removed by nb_graph_compile (graph_compile.c): NB_GONE_DEAD / _DUP / _FUSED (role is then
     * NB_GV_NONE) and,
     * for a duplicate or a fused node's intermediate, the value that took it over */
    int gone;
    nb_tvar gone_to;
} nb_gval;
enum { NB_GONE_DEAD = 1, NB_GONE_DUP = 2, NB_GONE_FUSED = 3,
       NB_GONE_FOLDED = 4 /* (nodes only: their output stays, as a constant) */ };

/* A node's run in place of its row (forward when backward == 0). */
typedef nb_status (*nb_gnode_hook)(nb_graph *g, int node, int backward, void *ctx);

/* Per-node graph facts (parallel to g->nodes). */
typedef struct nb_gnode {
    nb_gnode_hook hook; /* NULL: the op row of nodes[i].kind */
    void *hook_ctx;
    double ms[2];       /* last profiled run: forward, backward milliseconds (-1: not timed) */
} nb_gnode;

/* The recording state a tape carries between nb_graph_record_begin and _end (t->rec). */
typedef struct nb_graph_rec {
    int32_t op0, val0, nparam0; /* the tape's op / value / parameter counts at begin */
    uint64_t resets0;           /* t->resets at begin */
    nb_tvar *inputs;            /* values made by nb_tape_input, in order */
    int32_t n_inputs, inputs_cap;
    int n_backward;             /* nb_tape_backward calls */
    nb_tvar loss;
    int32_t ops_at_backward;    /* t->n_ops at the (first) backward */
    /* the first host access to an intermediate: value, t->n_ops then, the function */
    nb_tvar read_val;
    int32_t read_ops;
    const char *read_fn;
} nb_graph_rec;

struct nb_graph {
    nb_tape *tape;          /* the recording tape; NULL once it was freed */
    nb_graph *next;         /* the tape's list of its graphs (t->graphs) */
    nb_tape *rt;            /* the replay tape (see above) */
    int on_cuda;
    /* nodes: the forward schedule */
    nb_top *nodes;
    nb_gnode *gn;
    int32_t n_nodes, nodes_cap;
    /* values */
    nb_tval *vals;
    nb_gval *gv;
    int32_t n_vals, vals_cap;
    int32_t n_param_vals;
    nb_tvar *inputs;
    int32_t n_inputs;
    int32_t n_consts;
    int has_backward;
    nb_tvar loss;
    /* the recording tape's parameter memory at record time (a replay checks it did not move) */
    float *params0, *grads0;
    int64_t n_params0;
    /* fixed block: inputs and constants */
    void *fixed;
    struct nb_buffer *fixed_buf;
    int64_t fixed_bytes;
    /* constants folded by nb_graph_compile (graph_compile.c): their data, computed once */
    void *fold;
    struct nb_buffer *fold_buf;
    int64_t fold_bytes;
    int broken; /* an nb_graph_compile failed part way: the graph refuses to run */
    /* the plan (graph_plan.c) */
    int planned;
    int64_t plan_peak, plan_naive;
    void *block;                 /* planned_peak bytes, host or device */
    struct nb_buffer *block_buf;
    int64_t block_bytes;
    float **grad_plan;           /* per value: its planned gradient, or NULL (rt->grad_plan) */
    int32_t t_end;               /* the last schedule step */
    /* options and state */
    int poison, profiling;
    int validated;
    int64_t runs;
    /* CUDA graph (graph_run.c) */
    int cg_on;                   /* wanted (nb_graph_set_cuda_graph) */
    int cg_failed;               /* a capture failed: node by node from then on */
    int64_t cg_warm;             /* plain runs since the last (re)plan */
    struct nb_device_graph *cg;
    uint64_t cg_frees;           /* the device's buffer_frees at the capture */
    int64_t captures;
    char cg_why[160];            /* why not captured (the capture's error) */
    /* compiled graphs (graph_compile.c): the fused kernels its FUSED nodes run (op->obj), owned */
    struct nb_fuse_kernel **fk;
    int32_t n_fk, fk_cap;
        /* profiling events (CUDA): 4 per node */
    struct nb_event **ev;
    int32_t n_ev;
};

/* Schedule steps of the plan: forward node i runs at step i, the backward's seed at n_nodes,
 * backward node i at 2 * n_nodes - i. The last step (t_end) is 2 * n_nodes with a backward,
 * n_nodes - 1 without. */
static inline int32_t nb_graph_bwd_step(const nb_graph *g, int32_t node) {
    return 2 * g->n_nodes - node;
}

/* ---- recording hooks (tape.c calls them while t->rec is set; graph_record.c) ---------------- */
void nb_graph_rec_input(nb_tape *t, nb_tvar v);
/* A host read or a raw pointer of v by fn (nb_tape_read, nb_tape_data, ...). */
void nb_graph_rec_host(nb_tape *t, nb_tvar v, const char *fn);
void nb_graph_rec_backward(nb_tape *t, nb_tvar loss);
/* nb_tape_free: stop recording, detach the graphs (they refuse to run from then on). */
void nb_graph_tape_freed(nb_tape *t);

/* ---- for graph*.c and passes ---------------------------------------------------------------- */
/* "node 7 (linear)" into buf. */
const char *nb_graph_node_str(const nb_graph *g, int32_t node, char *buf, size_t cap);
/* NB_OK when v is a value of the graph; else NB_ERR_INVALID_ARG naming fn (and, for a value
 * nb_graph_compile removed, why: dead, a duplicate of, fused into). */
nb_status nb_graph_check_value(const nb_graph *g, nb_tvar v, const char *fn);
/* Checks every node (kind, arity, inputs defined before use, shape rules, dtypes); an error
 * names the node. Sets g->validated. */
nb_status nb_graph_validate(nb_graph *g);
/* Computes the plan (lifetimes, offsets, the block) unless g->planned (graph_plan.c). */
nb_status nb_graph_plan(nb_graph *g);
/* Forgets the plan, the CUDA graph and the validation (after any edit of nodes / values). */
void nb_graph_invalidate(nb_graph *g);
/* Poisons (NaN) the planned buffers whose lifetime ends at step s (graph_plan.c). */
nb_status nb_graph_poison_step(nb_graph *g, int32_t s);
/* bytes of memory on the graph's device (host memory, or a device buffer in *buf); 0 bytes: NULL. */
nb_status nb_graph_alloc(nb_graph *g, int64_t bytes, void **p, struct nb_buffer **buf);
/* Appends a value slot (metadata only; role NB_GV_ACT, producer -1) and a node (gn zeroed);
 * the new index in *out. Pointers into g->vals / g->nodes may move. */
nb_status nb_graph_add_value(nb_graph *g, const nb_tval *v, nb_tvar *out);
nb_status nb_graph_add_node(nb_graph *g, const nb_top *op, int32_t *out);

#endif

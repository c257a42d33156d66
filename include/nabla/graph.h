/* nabla — recorded computational graphs (issue #17): record a tape's ops once, replay many times.
 *
 *   nb_tape *t; ... nb_tape_param(t, ...) ...                 // parameters as always
 *   nb_graph_record_begin(t);
 *   nb_tvar x, tgt, h, y, loss;
 *   nb_tape_input(t, 2, (int64_t[]){64, 16}, xdata, 0, &x);    // input 0 of the graph
 *   nb_tape_input(t, 2, (int64_t[]){64, 4}, tdata, 0, &tgt);   // input 1
 *   nb_tape_linear(t, x, w1, b1, &h);                          // ops run now (immediate mode) ...
 *   nb_tape_silu(t, h, &h);                                    // ... and are copied into the graph
 *   nb_tape_linear(t, h, w2, b2, &y);
 *   nb_tape_mse(t, y, tgt, &loss);
 *   nb_tape_backward(t, loss);                                 // backward is part of the graph
 *   nb_graph *g;
 *   nb_graph_record_end(t, &g);                                // validated here
 *   nb_graph_output(g, y);                                     // loss is an output already
 *   for (step...) {
 *       nb_graph_set_input(g, 0, xnew, NB_F32, 2, (int64_t[]){64, 16});
 *       nb_graph_set_input(g, 1, tnew, NB_F32, 2, (int64_t[]){64, 4});
 *       nb_tape_zero_grad(t);                                  // grads accumulate, as on the tape
 *       nb_graph_run(g);                                       // forward + backward
 *       nb_graph_read(g, loss, &l, 1);                         // outputs; param grads: nb_tape_grads
 *   }
 *   nb_graph_free(g);
 *
 * The model. A recorded graph is a copy of the tape's op log (the same op rows, src/graph/ops.def)
 * made while the tape runs, plus its values' metadata (shape, dtype, role). Replay runs the same
 * CPU or CUDA rows as immediate mode over the graph's own memory, so a CPU replay is bit-for-bit
 * the immediate result. Value handles (nb_tvar) of the recording are the graph's handles.
 *   - inputs: the values made by nb_tape_input during recording, in order (index 0, 1, ...).
 *     Each starts with the data it was recorded with; nb_graph_set_input replaces it.
 *   - parameters: the tape's own (shared, not copied): a replay reads the tape's current
 *     parameters and ACCUMULATES into its gradient buffer exactly as nb_tape_backward does.
 *   - constants: activations made before recording began that recorded ops read: their data is
 *     copied at nb_graph_record_end.
 *   - outputs: marked by nb_graph_output (the loss given to nb_tape_backward is one). Only
 *     outputs, inputs and constants can be read after a run: other values share memory.
 * Memory: the lifetimes of all activations and activation gradients over the forward + backward
 * schedule are planned; buffers of non-overlapping lifetimes share memory (nb_graph_memory).
 * On CUDA, from the third run on, a graph whose nodes are all capturable replays as one CUDA
 * graph (nb_device_graph_*; nb_graph_set_cuda_graph turns it off).
 *
 * Errors name the node: "node 7 (linear): ...". Recording fails (at nb_graph_record_end) for
 * effects a replay cannot repeat: a value made during recording by something other than an op or
 * nb_tape_input (e.g. nb_tape_timestep_embedding from host data), a host read (nb_tape_read /
 * nb_tape_read_grad) or a raw pointer (nb_tape_data / nb_tape_grad) of an intermediate followed
 * by more ops (it may have set their attributes), parameter registration, a reset of the tape,
 * two backward passes or ops after the backward. A replay fails when the tape was freed or its
 * parameters moved; set_input fails for another shape, dtype or device, or NULL data.
 * Never stale results: reading a value whose memory is shared is refused.
 */
#ifndef NABLA_GRAPH_H
#define NABLA_GRAPH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "nabla/dtype.h"
#include "nabla/nn_tape.h"
#include "nabla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct nb_tensor;

typedef struct nb_graph nb_graph;

/* ---- recording ------------------------------------------------------------------------------ */

/* Starts recording on t: ops recorded from now on (and a backward) are copied into a graph.
 * NB_ERR_INVALID_ARG when t is NULL or already recording. */
nb_status nb_graph_record_begin(nb_tape *t);
/* Ends the recording begun on t, validates it and returns the graph (*out; NULL on error: the
 * error names the node or value). The tape keeps its values; it stops recording either way. */
nb_status nb_graph_record_end(nb_tape *t, nb_graph **out);
/* 1 while t is recording. */
int nb_graph_recording(const nb_tape *t);
/* Frees the graph (its memory; never the tape's parameters). NULL: no-op. The graph must be
 * freed before, or may be freed after, its tape: a graph whose tape was freed refuses to run. */
void nb_graph_free(nb_graph *g);

/* Marks v (a value of the graph) as an output: kept alive after a run, readable. */
nb_status nb_graph_output(nb_graph *g, nb_tvar v);

/* ---- shape of the graph --------------------------------------------------------------------- */

typedef struct nb_graph_info {
    int n_nodes;      /* forward nodes (op rows) */
    int n_values;     /* value slots (handles 0 .. n_values-1; parameters first) */
    int n_inputs, n_outputs, n_consts;
    int has_backward; /* 1: nb_graph_run runs the backward too */
    nb_tvar loss;     /* the backward's seed, NB_TVAR_NONE without backward */
    int on_cuda;
    int64_t runs;     /* nb_graph_run calls that succeeded */
    int cuda_graph;   /* 0 not used (CPU, off or not capturable), 1 waiting to capture, 2 replayed
                       * as one CUDA graph */
    int64_t captures; /* CUDA graphs captured */
} nb_graph_info;
nb_status nb_graph_get_info(const nb_graph *g, nb_graph_info *out);
/* The handle of input i (0-based, in nb_tape_input order). */
nb_status nb_graph_input(const nb_graph *g, int i, nb_tvar *v);

/* What a value slot of the graph is. */
typedef enum nb_graph_role {
    NB_GRAPH_UNUSED = 0, /* a handle the graph does not use (made before recording, unread) */
    NB_GRAPH_PARAM,      /* a parameter of the tape (shared) */
    NB_GRAPH_INPUT,      /* made by nb_tape_input while recording */
    NB_GRAPH_CONST,      /* an activation made before recording that a node reads (copied) */
    NB_GRAPH_ACT,        /* the output of a node */
} nb_graph_role;
typedef struct nb_graph_value {
    nb_graph_role role;
    int ndim;
    int64_t shape[NB_TAPE_MAX_DIMS];
    int64_t count;
    nb_dtype dtype;    /* storage: NB_F32, or NB_BF16 on a bf16-storage CUDA tape */
    int needs_grad;
    int output;        /* marked (readable after a run) */
    int input_index;   /* NB_GRAPH_INPUT: its index; else -1 */
    int producer;      /* NB_GRAPH_ACT: the node writing it; else -1 */
} nb_graph_value;
nb_status nb_graph_value_info(const nb_graph *g, nb_tvar v, nb_graph_value *out);

#define NB_GRAPH_NODE_MAX_IN 8
typedef struct nb_graph_node {
    const char *op;    /* the op row's name ("linear", ...; static storage) */
    int nin;
    nb_tvar in[NB_GRAPH_NODE_MAX_IN]; /* NB_TVAR_NONE for an absent optional input */
    nb_tvar out;
    double ms[2];      /* the last profiled run's forward / backward milliseconds, -1 if none */
} nb_graph_node;
/* Node k (0 <= k < n_nodes, forward order). */
nb_status nb_graph_node_info(const nb_graph *g, int k, nb_graph_node *out);

/* ---- replay --------------------------------------------------------------------------------- */

/* Input i := host data (dtype and shape must be the recorded ones: NB_F32 and the shape given to
 * nb_tape_input). Copied now (an h2d copy on CUDA). */
nb_status nb_graph_set_input(nb_graph *g, int i, const void *host, nb_dtype dtype, int ndim,
                             const int64_t *shape);
/* Input i := a tensor's data: a CPU tensor (any graph) or a tensor on the graph's CUDA device;
 * dense, dtype and shape as recorded. Copied now (queued on the stream on CUDA). */
nb_status nb_graph_set_input_tensor(nb_graph *g, int i, const struct nb_tensor *x);
/* Runs the forward, and the backward when one was recorded (parameter gradients accumulate in
 * the tape's gradient buffer). CUDA: asynchronous (queued on the tape device's stream). */
nb_status nb_graph_run(nb_graph *g);
/* Copies an output, input or constant (f32; bf16 storage widened) to host memory (waits).
 * count must be the value's element count. Refused before the first run. */
nb_status nb_graph_read(nb_graph *g, nb_tvar v, float *host, int64_t count);
/* The gradient of an input recorded with requires_grad (or of the loss) after a run with
 * backward, to host memory (zeros where the backward did not reach it). Parameter gradients are
 * in the tape (nb_tape_grads / nb_tape_read_grads). */
nb_status nb_graph_read_grad(nb_graph *g, nb_tvar v, float *host, int64_t count);

/* CUDA: 1 (default) replays as one CUDA graph once the graph is warm and every node was
 * captured without error; 0 runs node by node. CPU graphs: accepted, no effect. */
nb_status nb_graph_set_cuda_graph(nb_graph *g, int on);

/* ---- memory plan ---------------------------------------------------------------------------- */

/* The planned peak of activation and activation-gradient memory (bytes of the one shared block
 * the graph allocates) and the naive total (every buffer its own memory). Plans if needed. */
nb_status nb_graph_memory(nb_graph *g, int64_t *planned_peak, int64_t *naive_bytes);
/* Test option: when on, every planned buffer is filled with NaN (all bits set) when its lifetime
 * ends during a run, so a plan that shared live memory shows up as NaNs in the results. */
nb_status nb_graph_set_poison(nb_graph *g, int on);

/* ---- inspection ----------------------------------------------------------------------------- */

/* Per-node timing of the next runs (CUDA events / a monotonic clock; a CUDA run then goes node
 * by node, not as one CUDA graph). 0: off (the default). The dump shows the last run's times. */
nb_status nb_graph_set_profiling(nb_graph *g, int on);

#define NB_GRAPH_DUMP_TEXT 1u /* one line per node: op, input and output shapes, bytes, time */
#define NB_GRAPH_DUMP_DOT 2u  /* Graphviz: values and nodes, edges labelled with shapes */
/* Writes the dump into buf (cap bytes, NUL-terminated, truncated if short); *needed (if not
 * NULL) gets the full length without the NUL. TEXT and DOT together: the text, then the DOT. */
nb_status nb_graph_dump(nb_graph *g, unsigned flags, char *buf, size_t cap, size_t *needed);
/* The same to a stdio stream. */
nb_status nb_graph_dump_file(nb_graph *g, unsigned flags, FILE *f);

/* ---- compiled graphs ------------------------------------------------------------------------
 * nb_graph_compile rewrites a recorded graph in place (mark its outputs first: values that
 * reach no output are removed, and removed values cannot be read or marked afterwards):
 *   - dead nodes: nodes whose output reaches no output (nb_graph_output, the loss) are dropped;
 *   - duplicate nodes: a node with the same op, inputs, attributes and module object as an
 *     earlier one is dropped, its readers read the earlier output (unless it is an output);
 *   - constant folding: a node whose inputs are all constants (activations made before
 *     recording) and whose output needs no gradient runs once, now, by its row; its output
 *     becomes a constant of the graph;
 *   - GEMM epilogues: a relu that is a linear's only reader joins it (one linear_relu node);
 *   - fusion: maximal chains of elementwise / broadcast ops (silu, relu, add, add_channel, casts
 *     to f32, ending maybe in mse; elementwise user functions of CALL nodes, inlined) whose
 *     intermediate values nothing else reads become ONE node
 *     ("fused" in dumps, with the ops it holds): a generated kernel-language function compiled
 *     through the module layer (disk cache: the text is the key, so a second process starts
 *     warm), run by a vectorized call forward and by its reverse-mode call backward. A value
 *     read twice (a branch) ends a chain unless all its readers are in it. f32 graphs only
 *     (bf16-storage graphs keep their rows).
 * The compiled graph replays like any graph (nb_graph_run, reads, the plan, CUDA graphs) and
 * gives the recorded results within rounding (sums are taken in another order). */
typedef struct nb_graph_compile_options {
    int no_dead, no_dedup, no_fold, no_epilogue, no_fuse; /* 1 turns a pass off (comparisons, tests) */
} nb_graph_compile_options;
void nb_graph_compile_options_init(nb_graph_compile_options *o); /* every pass on */

typedef struct nb_graph_compile_stats {
    int dead;        /* nodes removed as dead */
    int duplicates;  /* nodes removed as duplicates */
    int folded;      /* nodes computed at compile time (their outputs are constants now) */
    int epilogues;   /* linear -> relu pairs made one linear_relu node */
    int fused_nodes; /* fused nodes made */
    int fused_ops;   /* recorded nodes they replace */
} nb_graph_compile_stats;
/* opts NULL: every pass; stats may be NULL. Errors name the node (a folded row that fails);
 * NB_ERR_COMPILE from a generated kernel would be a bug (the diagnostics show its text). A graph
 * whose compile failed part way refuses to run (NB_ERR_INVALID_ARG): free it. */
nb_status nb_graph_compile(nb_graph *g, const nb_graph_compile_options *opts,
                           nb_graph_compile_stats *stats);

#ifdef __cplusplus
}
#endif

#endif

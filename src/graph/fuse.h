/* Fused elementwise kernels (issue #17, compiled graphs): a small DAG of the op table's
 * elementwise / broadcast / reduction ops (a "fuse spec") becomes the text of ONE
 * [Differentiable] kernel-language function (fuse_codegen.c), compiled through the module layer
 * (nb_module_load_source: the disk cache keys the text, so equal structure = equal text = a warm
 * cache) and run over arrays by the call layer: forward as a plain vectorized call, backward as
 * its NB_MODE_BWD call (the compiler's reverse mode of the whole chain; the primal is recomputed
 * in registers, so no intermediate is stored). fuse_kernel.c runs it; the op table's FUSED row
 * (ops.def) runs it over tape values.
 *
 *   nb_fuse_spec s = {0};                         // silu(x + c[n,c]) for x [N,C,H,W], c [N,C]
 *   int x = nb_fuse_add_input(&s, NB_FUSE_FULL), c = nb_fuse_add_input(&s, NB_FUSE_CHANNEL);
 *   int a = nb_fuse_add_node(&s, NB_TOP_ADD_CHANNEL, 2, (int[]){x, c});
 *   nb_fuse_add_node(&s, NB_TOP_SILU, 1, (int[]){a}); // the last node is the result
 *   nb_fuse_kernel *k; nb_fuse_kernel_create(dev, &s, &k);
 *   nb_fuse_forward(k, (nb_tensor *[]){xt, ct}, yt);
 *   nb_fuse_backward(k, (nb_tensor *[]){xt, ct}, dyt, (nb_tensor *[]){dxt, dct}); // += grads
 *
 * Operands are numbered in one space: 0 .. n_in-1 are the inputs, n_in + j is node j. Inputs:
 *   NB_FUSE_FULL     an array of the kernel's shape (every full input has the same shape)
 *   NB_FUSE_CHANNEL  an array of the kernel shape's leading dims [d0 .. dk-1] (k >= 1, fewer
 *                    than the kernel's), broadcast over the rest: add_channel's c [N,C] over
 *                    x [N,C,H,W]; its gradient is summed over the broadcast dims by the call
 *   NB_FUSE_SCALAR   a one-element array ([1]) broadcast over the whole kernel
 * The kernel runs one thread per element of the full shape (as [numel], or [rows, cols] when a
 * channel input is present: rows = the channel elements), reading each input in its own shape.
 * A reduction (mse) may only be the last node: the result is then one f32 value ([1]).
 *
 * Not internal to the tape: compiled graphs (nb_graph_compile) build specs from recorded nodes;
 * tests build them by hand. Everything here errs with nb_status + a message. */
#ifndef NB_GRAPH_FUSE_H
#define NB_GRAPH_FUSE_H

#include "graph/op_rows.h"
#include "nabla/device.h"
#include "nabla/module.h"
#include "nabla/tensor.h"

#define NB_FUSE_MAX_IN NB_TOP_MAX_IN /* inputs of one fused kernel (= the inputs of an op) */
#define NB_FUSE_MAX_NODES 48

typedef enum nb_fuse_in_kind {
    NB_FUSE_FULL = 0,
    NB_FUSE_CHANNEL = 1,
    NB_FUSE_SCALAR = 2,
} nb_fuse_in_kind;

typedef struct nb_fuse_node {
    int kind;   /* NB_TOP_* of a fusable row (nb_fuse_kind_fusable), or NB_TOP_CALL */
    int nin;
    int in[NB_FUSE_MAX_IN]; /* operands (inputs 0 .. n_in-1, earlier nodes n_in + j) */
    int ip[2];  /* the op's integer attributes where they matter (cast: ip[0] = target dtype) */
    int call;   /* NB_TOP_CALL: its entry in spec->call[] */
} nb_fuse_node;

/* A user function called by a CALL node (inlined: the generated module imports the function's
 * module, or contains its text when it was loaded from a string). Every bound parameter is a
 * float `in` scalar: parameter p < nparams takes the node's operand in[arg[p]], or (arg[p] < 0)
 * the literal scalar[p]; the others keep their defaults. The result is a float. */
#define NB_FUSE_MAX_CALLS 8
#define NB_FUSE_MAX_PARAMS 16
typedef struct nb_fuse_call {
    nb_func *f;
    int nparams;
    int arg[NB_FUSE_MAX_PARAMS];
    double scalar[NB_FUSE_MAX_PARAMS];
} nb_fuse_call;

typedef struct nb_fuse_spec {
    int n_in;
    nb_fuse_in_kind in_kind[NB_FUSE_MAX_IN];
    int n_nodes;
    nb_fuse_node node[NB_FUSE_MAX_NODES]; /* in evaluation order; the last is the result */
    int n_calls;
    nb_fuse_call call[NB_FUSE_MAX_CALLS];
} nb_fuse_spec;

/* 1 when the op kind has a fused expression (silu, add, add_channel, cast to f32, mse, ...). */
int nb_fuse_kind_fusable(int kind);
/* 1 when the kind reduces to one value (mse): it can only end a fused chain. */
int nb_fuse_kind_reduces(int kind);

/* Builders: append an input (returns its operand number) / a node (returns its operand number,
 * n_in + j); -1 and an nb_error when the spec is full or the node is malformed. Inputs must all
 * be added before the first node. */
int nb_fuse_add_input(nb_fuse_spec *s, nb_fuse_in_kind kind);
int nb_fuse_add_node(nb_fuse_spec *s, int kind, int nin, const int *in);

/* Appends a CALL node: c (copied) over the operands in[0 .. nin); returns its operand number or
 * -1 and an nb_error. */
int nb_fuse_add_call(nb_fuse_spec *s, const nb_fuse_call *c, int nin, const int *in);
/* 1 when f can be inlined: one overload, [Differentiable], no [Kernel] / host function, a float
 * result, and its first nparams parameters float `in` scalars. */
int nb_fuse_func_inlinable(nb_func *f, int nparams);

/* Checks a spec (operands defined before use, every input used, a reduction only last,
 * add_channel's second operand a channel input, ...): NB_ERR_INVALID_ARG naming the node. */
nb_status nb_fuse_spec_check(const nb_fuse_spec *s);
/* The kernel-language text of the spec's function `name` (a deterministic function of the spec:
 * the same structure gives the same bytes). *text: nb_malloc'ed, free with nb_fuse_free_text. */
nb_status nb_fuse_codegen(const nb_fuse_spec *s, const char *name, char **text);
void nb_fuse_free_text(char *text);
/* A module file's name without directory and extension ("act" for "dir/act.nb") and its
 * directory ("dir"; "." without one): how the generated text imports it. */
void nb_fuse_module_stem(const char *path, char *stem, size_t cap);
void nb_fuse_module_dir(const char *path, char *dir, size_t cap);
/* One line naming the ops the spec holds, innermost first: "add_channel+silu+mse" (into buf). */
const char *nb_fuse_describe(const nb_fuse_spec *s, char *buf, size_t cap);

/* A compiled fused kernel: the spec, its source and the module / function on one device. */
typedef struct nb_fuse_kernel nb_fuse_kernel;
nb_status nb_fuse_kernel_create(nb_device *dev, const nb_fuse_spec *s, nb_fuse_kernel **out);
void nb_fuse_kernel_free(nb_fuse_kernel *k);
const nb_fuse_spec *nb_fuse_kernel_spec(const nb_fuse_kernel *k);
const char *nb_fuse_kernel_source(const nb_fuse_kernel *k);
nb_device *nb_fuse_kernel_device(const nb_fuse_kernel *k);
/* 1 when the kernel's result is one reduced value ([1]). */
int nb_fuse_kernel_reduces(const nb_fuse_kernel *k);

/* Forward: out = the spec's result over in[0 .. n_in) (dense C-order arrays on the kernel's
 * device, f32 or bf16 inputs; out f32 or bf16 of the full shape, or f32 [1] for a reduction,
 * overwritten). Backward: grads[i] += dL/d in[i] for every non-NULL grads[i] (f32, in[i]'s
 * shape), from dout = dL/d out (out's shape; [1] for a reduction). Shapes, dtypes and devices
 * are checked first: NB_ERR_SHAPE / NB_ERR_DTYPE / NB_ERR_DEVICE naming the input. */
nb_status nb_fuse_forward(nb_fuse_kernel *k, nb_tensor *const *in, nb_tensor *out);
nb_status nb_fuse_backward(nb_fuse_kernel *k, nb_tensor *const *in, nb_tensor *dout,
                           nb_tensor *const *grads);

/* The same over raw arrays (the FUSED row's path: no tensor is made per run). An array: its
 * address (host or device memory of the kernel's device, dense C order), dtype and dims. The
 * shapes are checked (nb_fuse_layout_check); dtypes and devices are trusted. res is out (forward)
 * or dout (backward); grads[i].data NULL = not wanted (grads may be NULL for a forward).
 * The kernel keeps a few prepared calls (one per binding: direction, gradients, flat shape,
 * dtypes, alignments): a run that matches one only patches addresses and launches (no
 * allocation; capturable in a CUDA graph). A kernel is used by one thread at a time. */
typedef struct nb_fuse_arg {
    void *data;
    nb_dtype dtype;
    int ndim;
    int64_t shape[NB_MAX_DIMS];
} nb_fuse_arg;
nb_status nb_fuse_run(nb_fuse_kernel *k, int backward, const nb_fuse_arg *in, const nb_fuse_arg *res,
                      const nb_fuse_arg *grads);
/* Checks the inputs' shapes against the spec (full inputs alike, channel inputs the leading dims)
 * and gives the flat call shape [rows, cols] (rows 1 without a channel input). */
nb_status nb_fuse_layout_check(const nb_fuse_kernel *k, const char *fn, const nb_fuse_arg *in, int64_t *rows,
                               int64_t *cols);
/* The call a run makes (before nb_call_prepare): bound over views of the arrays, which it
 * returns in wrap[0 .. *nwrap) (at most 2 n_in + 1; free them after the call). For tests that
 * compile the call's kernel for another target. */
nb_status nb_fuse_call_begin(nb_fuse_kernel *k, int backward, const nb_fuse_arg *in, const nb_fuse_arg *res,
                             const nb_fuse_arg *grads, nb_tensor **wrap, int *nwrap, nb_call **out);
/* Calls prepared so far (each a cache miss: a new binding). */
int64_t nb_fuse_kernel_prepares(const nb_fuse_kernel *k);

/* The tape's FUSED op (ops.def): out = k over tape values in[0 .. n) (n = the spec's n_in, each
 * value used once; f32 storage: bf16 inputs are cast first), recorded and run now; its backward
 * adds into the inputs' gradients. k must live on the tape's device and outlive the op. */
nb_status nb_tape_fused(nb_tape *t, nb_fuse_kernel *k, int n, const nb_tvar *in, nb_tvar *out);

#endif

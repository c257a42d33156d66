/* Running a kernel-language function (an nb_func of a loaded module) over tape values through the
 * call layer: the CALL row of ops.def (a user's [Differentiable] .nb function as a graph node,
 * builder nb_tape_call in nn_tape.h) and any other row whose kernel is a generated .nb function
 * (the compiled graph's FUSED row) share this. Private to src/graph.
 *
 * An nb_tcall says how the function's parameters are bound for one op:
 *   parameter p < nparams takes op->in[src[p]] (a tape value, wrapped zero-copy as an array on the
 *   module's device: host memory on a CPU tape, device memory on a CUDA one), or, for
 *   src[p] = NB_TCALL_SCALAR, the host value scalar[p] (a uniform: every thread gets it; a float
 *   parameter from a double, an integer one from a whole number). Parameters from nparams on are
 *   left unbound: they must have default values.
 *   view_ndim[k] > 0 wraps input k with the shape view_shape[k] instead of its own (the same
 *   element count, dense): e.g. [N,C,1,1] for a per-channel [N,C] array that broadcasts against
 *   [N,C,H,W] in the call layer's right-aligned broadcast.
 *   out_0d: the result is wrapped as a 0-d array (the call's kernel shape and result value shape
 *   are both empty; the tape holds it as [1]).
 * The output op->out receives the function's result over the kernel shape (the broadcast of the
 * arrays' call shapes) + the result's value shape (float3 -> a trailing 3).
 *
 *   nb_tcall_shape    checks the binding against the function's reflection and the input values
 *                     (before anything is recorded) and gives the output's shape;
 *   nb_tcall_forward  runs the function: op->out = f(...) (one vectorized call);
 *   nb_tcall_backward runs its reverse mode (the call layer's bwds kernel): dL/d(input) is ADDED
 *                     into the gradient of every input that needs one and feeds a differentiable
 *                     parameter (a no_diff parameter passes none), from op->out's gradient.
 * Inputs must be f32 tape values (rows using this have flags 0: nb_tape_record casts bf16
 * inputs); op->out is f32.
 * Runs go through prepared calls (module.h) that the tape keeps per binding (function, direction,
 * shapes, gradients, alignment; the 32 most recently used): a run with a known binding only sets
 * addresses and scalar values and queues the kernel on the device's stream, so a fixed-shape loop
 * allocates nothing once warm and its launches can be captured into a CUDA graph. Bounds: on the
 * CPU a launch reports an out-of-range index at once; on CUDA the first launch of each binding is
 * checked (one wait), later ones are not read back. The tape holds these calls until
 * nb_tape_free: free a tape (and graphs replaying it) before the module of a function it ran. */
#ifndef NB_GRAPH_TAPE_CALL_H
#define NB_GRAPH_TAPE_CALL_H

#include "graph/op_rows.h"
#include "nabla/module.h"

#define NB_TCALL_MAX_PARAMS 16
#define NB_TCALL_SCALAR (-1)

typedef struct nb_tcall {
    nb_func *f;                             /* one overload, not a [Kernel] / host function */
    int nparams;                            /* parameters bound, 0 .. nparams-1 */
    int src[NB_TCALL_MAX_PARAMS];           /* input index into op->in, or NB_TCALL_SCALAR */
    double scalar[NB_TCALL_MAX_PARAMS];     /* the value of a scalar parameter */
    int view_ndim[NB_TOP_MAX_IN];           /* 0: input k as its own shape */
    int64_t view_shape[NB_TOP_MAX_IN][NB_TAPE_MAX_DIMS];
    int out_0d;
} nb_tcall;

/* Checks tc against f's reflection and the nin input values in[] (who names the caller in
 * messages): one overload, no [Kernel] / host function; every bound parameter an `in` value
 * parameter (no struct, Tensor, out or inout parameter: NB_ERR_UNSUPPORTED), unbound ones with
 * defaults; array inputs f32 values whose trailing dims are the parameter's value shape (float3:
 * 3), scalars for scalar (value rank 0) number parameters (a fraction for an integer one:
 * NB_ERR_DTYPE); the arrays' call shapes broadcast (NB_ERR_SHAPE naming both); the result a
 * float number, vector or matrix (NB_ERR_DTYPE / NB_ERR_UNSUPPORTED otherwise); f's module on the
 * tape's device (NB_ERR_DEVICE). Gives the output shape (*ndim <= NB_TAPE_MAX_DIMS; [1] for an
 * empty one, with *out_0d = 1). */
nb_status nb_tcall_shape(nb_tape *t, const nb_tcall *tc, int nin, const nb_tvar *in, const char *who,
                         int *ndim, int64_t *shape, int *out_0d);
/* op->out = f(bound arguments) (op->in: the input values; see above). */
nb_status nb_tcall_forward(nb_tape *t, const nb_tcall *tc, const nb_top *op);
/* The inputs' gradients += the reverse mode of f from op->out's gradient. */
nb_status nb_tcall_backward(nb_tape *t, const nb_tcall *tc, const nb_top *op);
/* The binding of a recorded CALL op (ops.def; e.g. for a pass that inlines the function into a
 * fused kernel): tc->f = op->obj, parameter p = op->in[tc->src[p]] or the scalar tc->scalar[p]. */
void nb_tcall_of_op(const nb_top *op, nb_tcall *tc);
/* 1 when input k of tc feeds at least one differentiable parameter of f. */
int nb_tcall_input_differentiable(const nb_tcall *tc, int k);
/* The calls the tape prepared so far (misses of its cache; tests). */
int64_t nb_tcall_prepares(const nb_tape *t);
/* Frees the tape's prepared calls (nb_tape_free). */
void nb_tcall_cache_free(nb_tape *t);

#endif

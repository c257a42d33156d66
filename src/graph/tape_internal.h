/* Private to src/graph: what only the tape itself uses (op dispatch and checks, the per-op
 * profiler). The row interface that op implementers use is op_rows.h. */
#ifndef NB_GRAPH_TAPE_INTERNAL_H
#define NB_GRAPH_TAPE_INTERNAL_H

#include "graph/op_rows.h"

/* CUDA half of nb_tape_accumulate (tape_cuda_basic.c: the add row's accumulate kernel). */
nb_status nb_tape_cuda_accumulate(nb_tape *t, float *dst, const float *src, int64_t count);
/* Builder of a one-input op of kind whose output has x's shape (silu, relu, softmax): checks,
 * records, *out = the output; errors name fn. */
nb_status nb_tape_unary_op(nb_tape *t, int kind, nb_tvar x, nb_tvar *out, const char *fn);
/* CUDA half of nb_tape_relu_grad (tape_cuda_basic.c). */
nb_status nb_tape_cuda_relu_grad(nb_tape *t, void *dz, const void *y, const void *dy, int64_t count,
                                 nb_dtype dt);
/* Forward (backward = 0) or backward of one recorded op on the tape's device (tape_ops.c). */
nb_status nb_tape_run_op(nb_tape *t, nb_top *op, int backward);
/* NB_ERR_INTERNAL unless op (about to be recorded; its out value created) has a known kind, its
 * row's arity, valid inputs and an output that keeps the row's shape rule (tape_ops.c). */
nb_status nb_tape_check_op(const nb_tape *t, const nb_top *op);
/* Profiler (tape_profile.c): nb_tape_run_op timed (CUDA events / a monotonic clock) and
 * aggregated per op kind; called by tape.c when t->prof_level is set. */
nb_status nb_tape_prof_run(nb_tape *t, nb_top *op, int backward);
/* Adds the times of events still pending (waits for them; no-op without profiling data). */
nb_status nb_tape_prof_collect(nb_tape *t);
/* Counts one backward pass (the report's per-step unit). */
void nb_tape_prof_pass(nb_tape *t);
void nb_tape_prof_free(nb_tape *t);

/* Rows written in .nb (tape_nbrows.c): elementwise functions of lib/nn_ops.nb over tape memory,
 * launched on the device's stream through prepared calls (module.h) that the tape keeps per
 * (function, count, dtypes, alignment): after the first step of a fixed-shape loop a row is two
 * pointer updates and a launch (no allocation, no host synchronisation: a CUDA graph may capture
 * it). The functions: */
typedef enum nb_tape_nbfn {
    NB_TNB_SILU = 0, /* nn_silu: y = x sigmoid(x) */
    NB_TNB_COUNT
} nb_tape_nbfn;
/* y[0, n) = fn(x[0, n)), x and y dense, each f32 or bf16 (dtypes xdt, ydt; bf16 stores round to
 * nearest even), n < 2^31. */
nb_status nb_tape_nb_unary(nb_tape *t, nb_tape_nbfn fn, const void *x, nb_dtype xdt, void *y, nb_dtype ydt, int64_t n);
/* Frees the prepared calls and the module (nb_tape_free). */
void nb_tape_nb_free(nb_tape *t);

#endif

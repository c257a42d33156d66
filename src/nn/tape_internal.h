/* Internals of the tape autograd (include/nabla/nn_tape.h): values, the op log, the per-op
 * implementation table and the activation arena. */
#ifndef NB_NN_TAPE_INTERNAL_H
#define NB_NN_TAPE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "nabla/nn_tape.h"

typedef struct nb_tval {
    int ndim;
    int64_t shape[NB_TAPE_MAX_DIMS];
    int64_t count;
    float *data;  /* params: into the param buffer; else arena */
    float *grad;  /* params: into the grad buffer; else arena, allocated on first need */
    int needs_grad;
    int is_param;
    int64_t offset; /* params: offset in floats */
    char name[64];  /* params */
} nb_tval;

enum nb_top_kind {
    NB_TOP_LINEAR = 0,
    NB_TOP_CONV2D,
    NB_TOP_GROUP_NORM,
    NB_TOP_SILU,
    NB_TOP_ADD,
    NB_TOP_ADD_CHANNEL,
    NB_TOP_CONCAT,
    NB_TOP_UPSAMPLE2X,
    NB_TOP_AVGPOOL2X,
    NB_TOP_MSE,
    NB_TOP_ATTENTION,
    NB_TOP_RESHAPE,
    NB_TOP_TRANSPOSE,
    NB_TOP_SLICE_CHANNELS,
    NB_TOP_COUNT
};

#define NB_TOP_MAX_IN 3
typedef struct nb_top {
    int kind;
    int nin;
    nb_tvar in[NB_TOP_MAX_IN]; /* NB_TVAR_NONE for an absent optional input */
    nb_tvar out;
    int ip[4];      /* integer attributes (stride, pad, groups, ...) */
    float fp[2];    /* float attributes (eps, ...) */
    float *saved[2];/* saved tensors in the arena (e.g. group norm mean / rstd) */
} nb_top;

/* Per-op implementation table: one row per op kind, with a CPU forward and backward. */
typedef struct nb_top_impl {
    const char *name;
    nb_status (*cpu_forward)(nb_tape *t, nb_top *op);
    nb_status (*cpu_backward)(nb_tape *t, const nb_top *op);
} nb_top_impl;

/* CUDA column of the table (tape.c dispatches on the tape's device): a row per op kind, defined
 * in the tape_cuda_*.c file that implements it. NULL functions = no CUDA path (a clear error).
 * On a CUDA tape every nb_tval data/grad pointer is a device address on t->dev; work is queued
 * on nb_device_stream(t->dev) and nothing synchronises unless the host needs a value. */
typedef struct nb_top_cuda_impl {
    nb_status (*forward)(nb_tape *t, nb_top *op);
    nb_status (*backward)(nb_tape *t, const nb_top *op);
} nb_top_cuda_impl;

struct nb_device;
struct nb_tape {
    struct nb_device *dev;  /* NULL or a CPU device: host memory; else a CUDA device */
    int precision;          /* nb_tape_precision: math mode of GEMMs, convolutions, attention */
    /* parameters */
    float *params, *grads;
    int64_t n_params, params_cap; /* floats */
    int frozen;                   /* set by the first input/op: no more nb_tape_param */
    int32_t n_param_vals;         /* values [0, n_param_vals) are parameters */
    /* values and op log (grow-only arrays) */
    nb_tval *vals;
    int32_t n_vals, vals_cap;
    nb_top *ops;
    int32_t n_ops, ops_cap;
    /* activation arena */
    struct nb_tape_block *blocks; /* newest first */
    int64_t arena_cap, arena_used, arena_high;
    int64_t host_allocs;
};

/* Allocation from the arena (64-byte aligned); NULL + nb_error on out of memory. */
float *nb_tape_alloc_f32(nb_tape *t, int64_t count, int zero);
/* New activation value of the given shape (data in the arena, uninitialised). */
nb_status nb_tape_new_value(nb_tape *t, int ndim, const int64_t *shape, int needs_grad,
                            nb_tvar *out);
/* Checks a handle and returns its value (NULL + nb_error naming `what` if invalid). */
nb_tval *nb_tape_val(nb_tape *t, nb_tvar v, const char *what);
/* Gradient buffer of v for accumulation: *g = NULL when v needs no gradient. */
nb_status nb_tape_grad_buf(nb_tape *t, nb_tvar v, float **g);
/* Creates op->out of the given shape; it needs a gradient when any of op->in does. */
nb_status nb_tape_op_out(nb_tape *t, nb_top *op, int ndim, const int64_t *shape);
/* Records an op (copy of *op) and runs its forward through the implementation table. */
nb_status nb_tape_record(nb_tape *t, const nb_top *op);
/* Runs fn over [0, n) on the global thread pool (inline when it is absent). */
void nb_tape_parallel(int64_t n, int64_t grain, void (*fn)(void *, int64_t, int64_t), void *ctx);

/* Shape helpers for error messages. */
const char *nb_tape_shape_str(const nb_tval *v, char *buf, size_t cap);

/* Implementation rows, one per source file. */
extern const nb_top_impl nb_top_linear_impl, nb_top_silu_impl, nb_top_add_impl,
    nb_top_add_channel_impl, nb_top_concat_impl, nb_top_upsample_impl, nb_top_avgpool_impl,
    nb_top_mse_impl, nb_top_conv2d_impl, nb_top_group_norm_impl, nb_top_attention_impl,
    nb_top_reshape_impl, nb_top_transpose_impl, nb_top_slice_impl;

/* CUDA rows (tape_cuda_basic.c, tape_cuda_conv.c, tape_cuda_attn.c). */
extern const nb_top_cuda_impl nb_top_linear_cuda, nb_top_silu_cuda, nb_top_add_cuda,
    nb_top_add_channel_cuda, nb_top_concat_cuda, nb_top_upsample_cuda, nb_top_avgpool_cuda,
    nb_top_mse_cuda, nb_top_conv2d_cuda, nb_top_group_norm_cuda, nb_top_attention_cuda,
    nb_top_reshape_cuda, nb_top_transpose_cuda, nb_top_slice_cuda;
/* 1 when the tape runs on a CUDA device. */
int nb_tape_on_cuda(const nb_tape *t);

#endif

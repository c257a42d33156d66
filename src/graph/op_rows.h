/* The graph layer's op-row interface: the contract between the op table (ops.def) and the modules
 * that implement its rows. The tape (immediate mode, include/nabla/nn_tape.h) records ops as
 * nb_top entries over nb_tval values; each op kind's row names a CPU and a CUDA forward and
 * backward. Rows whose kernels belong to a higher layer (conv, attention, group norm, MLP,
 * encodings in src/nn/<module>/) are DEFINED there and only DECLARED here (the prototypes below,
 * generated from ops.def): the graph layer includes no nn header, the linker joins the table to
 * the functions, and a row without its function fails the build (an undefined symbol), not a run.
 *
 * Who includes this: src/graph itself, every src/nn module that implements rows, src/models (tape
 * values of the UNet / DDPM), tests and two benches. What only the tape itself needs (the arena's
 * blocks, dispatch, the profiler) is in src/graph/tape_internal.h, private to src/graph. */
#ifndef NB_GRAPH_OP_ROWS_H
#define NB_GRAPH_OP_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "nabla/dtype.h"
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
    int32_t alias1; /* 0, or 1 + the value whose data and gradient this one shares (a CUDA
                     * reshape: same elements, same order; see nb_tape_grad_buf) */
    nb_dtype dtype; /* storage of data AND grad: NB_F32, or NB_BF16 for activations of a CUDA
                     * tape in bf16 storage (nb_tape_bf16_storage). data / grad keep the type
                     * float * but then address 2-byte bf16 elements (count * 2 bytes). Parameters
                     * and their gradients are always NB_F32. */
    char name[64];  /* params */
} nb_tval;

/* Op kinds: NB_TOP_<ID> for each row of ops.def, in its order. */
enum nb_top_kind {
#define NB_OP(id, name, nin, shape, cpu_fwd, cpu_bwd, cuda_fwd, cuda_bwd, flags) NB_TOP_##id,
#include "graph/ops.def"
#undef NB_OP
    NB_TOP_COUNT
};

/* Shape rules of ops.def (what the out shape is; nb_tape_record checks LIKE_IN0 and SCALAR). */
enum nb_top_shape_rule {
    NB_OPSHAPE_LIKE_IN0 = 0, /* out has in[0]'s shape */
    NB_OPSHAPE_SCALAR,       /* out is [1] */
    NB_OPSHAPE_ATTRS,        /* out computed by the op's builder from inputs and attributes */
};

/* Inputs of one op: 3 for the library's ops; FUSED (and user-function nodes) take up to 8. A
 * row whose nin is NB_TOP_NIN_ANY takes any count 1 .. NB_TOP_MAX_IN (op->nin says how many). */
#define NB_TOP_MAX_IN 8
#define NB_TOP_NIN_ANY (-1)
#define NB_TOP_MAX_DP 4
typedef struct nb_top {
    int kind;
    int nin;
    nb_tvar in[NB_TOP_MAX_IN]; /* NB_TVAR_NONE for an absent optional input */
    nb_tvar out;
    int ip[4];      /* integer attributes (stride, pad, groups, ...) */
    float fp[2];    /* float attributes (eps, ...) */
    double dp[NB_TOP_MAX_DP]; /* double attributes (a CALL op's scalar arguments, in order) */
    float *saved[2];/* saved tensors in the arena (e.g. group norm mean / rstd) */
    void *obj;      /* the module object of an op kind that has one (MLP: nb_mlp *, ENCODING:
                     * nb_encoding *): its configuration and workspace; owned by the caller,
                     * alive while the op is on the tape. NULL for the others. */
} nb_top;

/* One op kind's row of ops.def (tape_ops.c holds the table nb_top_rows[NB_TOP_COUNT]). The CPU
 * functions are the reference. On a CUDA tape every nb_tval data/grad pointer is a device
 * address on t->dev; CUDA work is queued on nb_device_stream(t->dev) and nothing synchronises
 * unless the host needs a value. */
typedef nb_status (*nb_top_fwd_fn)(nb_tape *t, nb_top *op);
typedef nb_status (*nb_top_bwd_fn)(nb_tape *t, const nb_top *op);
typedef struct nb_top_row {
    const char *name;
    int nin;
    int shape;      /* enum nb_top_shape_rule */
    nb_top_fwd_fn cpu_forward, cuda_forward;
    nb_top_bwd_fn cpu_backward, cuda_backward;
    unsigned flags; /* NB_TOPF_*: which storage dtypes the CUDA row handles */
} nb_top_row;
extern const nb_top_row nb_top_rows[NB_TOP_COUNT];

/* The functions named in ops.def (defined in the file of each op's module). */
#define NB_OP(id, name, nin, shape, cpu_fwd, cpu_bwd, cuda_fwd, cuda_bwd, flags)                 \
    nb_status cpu_fwd(nb_tape *t, nb_top *op);                                                     \
    nb_status cpu_bwd(nb_tape *t, const nb_top *op);                                               \
    nb_status cuda_fwd(nb_tape *t, nb_top *op);                                                    \
    nb_status cuda_bwd(nb_tape *t, const nb_top *op);
#include "graph/ops.def"
#undef NB_OP
/* The op kind's name ("conv2d", ...: ops.def), or NULL for an unknown kind. */
const char *nb_tape_op_name(int kind);
/* The CUDA functions of an op without a CUDA path (NB_ERR_UNSUPPORTED naming the op). */
nb_status nb_op_no_cuda_fwd(nb_tape *t, nb_top *op);
nb_status nb_op_no_cuda_bwd(nb_tape *t, const nb_top *op);

/* BF16 storage (CUDA tapes in NB_TAPE_BF16 precision; see nb_tape_bf16_storage):
 *   NB_TOPF_IN_BF16   the row's forward reads, and its backward writes the gradients of, BF16
 *                     activation inputs, in any mix with F32 ones (it checks each input value's
 *                     dtype). Without the flag nb_tape_record casts BF16 inputs to F32 first (a
 *                     recorded NB_TOP_CAST op: correct, but a copy each way).
 *   NB_TOPF_OUT_BF16  on a bf16-storage tape the op's output (and so its gradient) is BF16; the
 *                     row writes it, and reads its gradient, as BF16 (it checks the out value's
 *                     dtype: FP32 / TF32 tapes and CPU tapes are all F32).
 *   NB_TOPF_OUT_LIKE_IN  the output takes in[0]'s dtype (views such as reshape).
 * Parameters are F32 whatever the flags. */
#define NB_TOPF_IN_BF16 1u
#define NB_TOPF_OUT_BF16 2u
#define NB_TOPF_OUT_LIKE_IN 4u

/* CUDA kernels a tape has loaded (per tape, so a launch needs no source hashing). */
enum nb_tape_kern {
    /* tape_cuda_basic.c */
    NB_TK_ADD_SCALAR = 0,
    NB_TK_SILU_BWD, NB_TK_ADD_FWD, NB_TK_ACC,
    NB_TK_ADDC_FWD, NB_TK_ADDC_BWD, NB_TK_CONCAT_FWD, NB_TK_CONCAT_BWD,
    NB_TK_UP_FWD, NB_TK_UP_BWD, NB_TK_POOL_FWD, NB_TK_POOL_BWD,
    NB_TK_MSE_PART, NB_TK_MSE_FIN, NB_TK_MSE_BWD,
    NB_TK_TR, NB_TK_SLICE_FWD, NB_TK_SLICE_BWD, NB_TK_TEMB,
    /* tape_cuda_norm.c */
    NB_TK_GN_FWD2, NB_TK_GN_FWD4, NB_TK_GN_FWD8, NB_TK_GN_BWD2, NB_TK_GN_BWD4,
    NB_TK_GN_DGB,
    /* bf16 variants of NB_TK_GN_FWD2 .. NB_TK_GN_BWD4, in the same order (tape_cuda_norm.c) */
    NB_TK_GN_FWD2_BF, NB_TK_GN_FWD4_BF, NB_TK_GN_FWD8_BF, NB_TK_GN_BWD2_BF, NB_TK_GN_BWD4_BF,
    /* tape_cast.c (one kernel, both directions) */
    NB_TK_CAST,
    /* tape_cuda_norm.c, the split group norm (bf16 storage only; nb_gn_cuda_set_path) */
    NB_TK_GN_FST_BF, NB_TK_GN_FNM_BF, NB_TK_GN_BST_BF, NB_TK_GN_BDX_BF,
    /* tape_cuda_basic.c: relu and the row softmax */
    NB_TK_RELU_FWD, NB_TK_RELU_BWD, NB_TK_SOFTMAX_FWD, NB_TK_SOFTMAX_BWD,
    NB_TK_COUNT = 48 /* room for more */
};

struct nb_device;
struct nb_buffer;
struct nb_jit_kernel;

/* An arena block. Host tapes: the header and the memory are one host allocation (base just
 * after the header). CUDA tapes: the header is a host allocation, the memory a device buffer. */
struct nb_tape_block {
    struct nb_tape_block *next;
    size_t size; /* usable bytes at base */
    size_t used;
    char *base;
    struct nb_buffer *buf; /* CUDA tapes: the device memory */
};
struct nb_tape {
    struct nb_device *dev;  /* NULL or a CPU device: host memory; else a CUDA device */
    int precision;          /* nb_tape_precision: math mode of GEMMs, convolutions, attention */
    /* parameters */
    float *params, *grads;
    struct nb_buffer *params_buf, *grads_buf; /* CUDA tapes: the device memory behind them */
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
    int64_t host_allocs, device_allocs;
    /* host scratch (grow-only) for values built on the host and uploaded */
    float *scratch;
    int64_t scratch_cap;
    struct nb_jit_kernel *kern[NB_TK_COUNT];
    /* per-op profiler (tape_profile.c): prof_level 0 = off (the only cost: one branch per op) */
    int prof_level;
    struct nb_tape_prof *prof;
    /* graph replay (ddpm.c): resets counts nb_tape_reset calls (a captured step stays valid
     * while it does not move); temb_dev: nb_tape_set_device_timesteps */
    uint64_t resets;
    const float *temb_dev;
    /* recorded graphs (include/nabla/graph.h, src/graph/graph_internal.h): the recording in
     * progress (NULL: none), the graphs recorded from this tape (nb_tape_free detaches them),
     * and on a graph's replay tape the planned gradient buffer of each value (NULL: the arena) */
    struct nb_graph_rec *rec;
    struct nb_graph *graphs;
    float **grad_plan;
    /* arrays wrapping tape memory for calls of .nb functions (tape_call.c), made on first use */
    struct nb_tcall_cache *tcall_cache;
    /* rows written in .nb (tape_nbrows.c): lib/nn_ops on the tape's device, loaded on first use,
     * and the prepared calls of its functions, one per (function, count, dtypes, alignment) */
    struct nb_module *nb_mod;
    struct nb_tape_prep *preps;
    int32_t n_preps, preps_cap;
};

/* Allocation from the arena (64-byte aligned; host or device memory after the tape's device;
 * zero: filled with 0, queued on the stream on CUDA); NULL + nb_error on out of memory. */
float *nb_tape_alloc_f32(nb_tape *t, int64_t count, int zero);
/* The same for count elements of dtype dt (NB_F32 or NB_BF16). */
void *nb_tape_alloc_dt(nb_tape *t, int64_t count, nb_dtype dt, int zero);
/* Bytes per element of a tape storage dtype (4 for NB_F32, 2 for NB_BF16). */
static inline size_t nb_tape_dt_size(nb_dtype dt) { return dt == NB_BF16 ? 2 : 4; }
/* 1 when ops whose CUDA row has NB_TOPF_OUT_BF16 store their outputs as BF16: a CUDA tape in
 * NB_TAPE_BF16 precision. */
int nb_tape_bf16_storage(const nb_tape *t);
/* Group norm on CUDA (tape_cuda_norm.c), for tests and benchmarks like nb_cuda_conv_set_algo:
 * 0 the automatic choice, 1 the per-group kernels always, 2 the split kernels wherever they can
 * run (bf16 storage, aligned, S % 8 == 0; small groups' backward too). Process-wide. */
void nb_gn_cuda_set_path(int path);
/* Host scratch of at least count floats, valid until the next call (NULL + nb_error). */
float *nb_tape_scratch(nb_tape *t, int64_t count);
/* Host -> tape memory (memcpy, or an h2d copy on CUDA); zeroing of tape memory (async on CUDA). */
nb_status nb_tape_upload(nb_tape *t, float *dst, const float *src, int64_t count);
nb_status nb_tape_zero(nb_tape *t, float *dst, int64_t count);
/* dst[0, count) = src (tape memory to tape memory, f32; queued on the stream on CUDA). */
nb_status nb_tape_copy(nb_tape *t, float *dst, const float *src, int64_t count);
/* dst[0, count) += src (tape memory, f32; one kernel on CUDA): rows whose kernel overwrites its
 * result (a module's backward) add it into the tape's accumulated gradient this way. */
nb_status nb_tape_accumulate(nb_tape *t, float *dst, const float *src, int64_t count);
/* For a backward whose kernel OVERWRITES dL/dv (a module's own backward, e.g. the MLP's dx):
 * *dst is where it should write -- v's gradient buffer itself when this is the first
 * contribution, else f32 arena scratch; *g is v's gradient (both NULL when v needs none). After
 * the kernel, nb_tape_grad_finish adds the scratch into the gradient (nothing when dst == g). */
nb_status nb_tape_grad_dst(nb_tape *t, nb_tvar v, float **g, float **dst);
nb_status nb_tape_grad_finish(nb_tape *t, float *g, const float *dst, int64_t count);
/* dz[i] = dy[i] where y[i] > 0, else 0, over count elements of tape memory stored in dt (NB_F32;
 * NB_BF16 on CUDA tapes): the gradient through a ReLU from its output y (LINEAR_RELU's backward).
 * Queued on the stream on CUDA. */
nb_status nb_tape_relu_grad(nb_tape *t, void *dz, const void *y, const void *dy, int64_t count,
                            nb_dtype dt);
/* The compile pass's fusion rule for the GEMM epilogue: when relu (a RELU op) reads lin's output
 * (a LINEAR op), *out = the one LINEAR_RELU op computing relu's output from lin's inputs, and 1;
 * else 0 (*out untouched). The caller checks that lin's output has no other consumer (it is no
 * longer computed). */
int nb_top_fuse_linear_relu(const nb_top *lin, const nb_top *relu, nb_top *out);
/* CUDA tapes: *p += v on the device (one tiny kernel; the backward seed). */
nb_status nb_tape_cuda_add_scalar(nb_tape *t, float *p, float v);
/* CUDA tapes: y [n, dim] = the sinusoidal embedding of n <= NB_TAPE_TEMB_MAX host timesteps,
 * which travel in the kernel's parameter block (asynchronous: no host -> device copy). */
#define NB_TAPE_TEMB_MAX 512
nb_status nb_tape_cuda_timestep_embedding(nb_tape *t, float *y, int64_t n, const float *timesteps,
                                          int dim, float max_period);
/* CUDA tapes: while dev_ts != NULL, nb_tape_timestep_embedding (n <= NB_TAPE_TEMB_MAX) reads its
 * n timesteps from dev_ts (device memory the caller fills before the work runs) instead of the
 * host array's values in the kernel's parameters: a captured graph then replays with whatever
 * the caller wrote there (ddpm.c). NULL: back to the host values. */
static inline void nb_tape_set_device_timesteps(nb_tape *t, const float *dev_ts) { t->temb_dev = dev_ts; }
/* New activation value of the given shape (data in the arena, uninitialised). */
nb_status nb_tape_new_value(nb_tape *t, int ndim, const int64_t *shape, int needs_grad,
                            nb_tvar *out);
/* The same with a storage dtype (NB_F32 or NB_BF16). */
nb_status nb_tape_new_value_dt(nb_tape *t, int ndim, const int64_t *shape, nb_dtype dt,
                               int needs_grad, nb_tvar *out);
/* x converted to dtype dt (a recorded NB_TOP_CAST op; gradients flow back converted), or x
 * itself when it already has that dtype. */
nb_status nb_tape_cast(nb_tape *t, nb_tvar x, nb_dtype dt, nb_tvar *out);
/* A parameter value over memory that other parameters own: count(shape) floats from first's
 * offset (e.g. the consecutive weights of several layers seen as one matrix, for one GEMM
 * instead of many). It shares their values and gradients, adds no floats to the buffers, and is
 * registered like a parameter (before any input or op; a unique name). */
nb_status nb_tape_param_view(nb_tape *t, const char *name, nb_tvar first, int ndim,
                            const int64_t *shape, nb_tvar *out);
/* Checks a handle and returns its value (NULL + nb_error naming `what` if invalid). */
nb_tval *nb_tape_val(nb_tape *t, nb_tvar v, const char *what);
/* Gradient buffer of v for accumulation: *g = NULL when v needs no gradient. For a value that
 * aliases another (alias1), the buffer is the aliased value's (allocated there if needed). */
nb_status nb_tape_grad_buf(nb_tape *t, nb_tvar v, float **g);
/* The same for a backward that writes EVERY element of v's gradient: when this is the first
 * contribution the buffer is left unfilled and *overwrite = 1 (store, don't add); else
 * *overwrite = 0 (accumulate). Saves a zero fill and a read per gradient on memory-bound ops. */
nb_status nb_tape_grad_buf_w(nb_tape *t, nb_tvar v, float **g, int *overwrite);
/* Creates op->out of the given shape; it needs a gradient when any of op->in does. Its dtype
 * follows the op kind's CUDA row flags (NB_TOPF_OUT_BF16 / OUT_LIKE_IN) on a bf16-storage
 * tape; else NB_F32. op->kind must be set. */
nb_status nb_tape_op_out(nb_tape *t, nb_top *op, int ndim, const int64_t *shape);
/* Records an op (copy of *op) and runs its forward through the implementation table. */
nb_status nb_tape_record(nb_tape *t, const nb_top *op);
/* Runs fn over [0, n) on the global thread pool (inline when it is absent). */
void nb_tape_parallel(int64_t n, int64_t grain, void (*fn)(void *, int64_t, int64_t), void *ctx);

/* count elements of dtype dt in tape memory -> host floats (bf16 widened); waits. */
nb_status nb_tape_download_dt(nb_tape *t, float *dst, const void *src, nb_dtype dt, int64_t count);
/* The start of a backward from loss (a scalar needing a gradient): forgets the activation
 * gradients of an earlier backward and seeds dL/dloss += 1 (nb_tape_backward, graph replay). */
nb_status nb_tape_backward_seed(nb_tape *t, nb_tvar loss);

/* Shape helpers for error messages. */
const char *nb_tape_shape_str(const nb_tval *v, char *buf, size_t cap);

/* 1 when the tape runs on a CUDA device. */
int nb_tape_on_cuda(const nb_tape *t);


#endif

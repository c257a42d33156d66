/* nabla — tape autograd (immediate mode): layers with forward and backward, CPU reference.
 *
 *   nb_tape *t;
 *   nb_tape_create(&t);
 *   int64_t ws[4] = {8, 3, 3, 3};                              // [O,C,K,K]
 *   nb_tvar w, b;                                              // parameters: registered once
 *   nb_tape_param(t, "conv.w", 4, ws, &w);
 *   nb_tape_param(t, "conv.b", 1, (int64_t[]){8}, &b);
 *   float *p; int64_t np;
 *   nb_tape_params(t, &p, &np);                               // ONE contiguous f32 buffer: init it
 *   for (int step = 0; step < steps; step++) {
 *       nb_tape_reset(t);                                      // forget last step's activations
 *       nb_tape_zero_grad(t);                                  // parameter grads := 0
 *       nb_tvar x, tgt, y, loss;
 *       nb_tape_input(t, 4, (int64_t[]){2, 3, 8, 8}, xdata, 0, &x);   // copied into the arena
 *       nb_tape_input(t, 4, (int64_t[]){2, 8, 8, 8}, tdata, 0, &tgt);
 *       nb_tape_conv2d(t, x, w, b, 1, 1, &y);                 // ops run now and are recorded
 *       nb_tape_silu(t, y, &y);
 *       nb_tape_mse(t, y, tgt, &loss);                         // scalar [1]
 *       nb_tape_backward(t, loss);                             // grads accumulate into the buffer
 *       float *g; nb_tape_grads(t, &g, &np);                   // same layout as the params
 *       ... optimizer updates p from g, e.g. nb_adam_step on nb_tensor_wrap(p), (g) ...
 *   }
 *   nb_tape_free(t);
 *
 * Values. An nb_tvar is a handle (index) into the tape: a dense row-major f32 tensor of 1 to 4
 * dims. Activations use [N,C,H,W] (images), [N,F] (features) or [N,heads,T,d] (attention).
 * Handles of activations are valid until the next nb_tape_reset; parameter handles forever.
 *
 * Parameters are registered with nb_tape_param before the first step (before any nb_tape_input
 * or op); they live in one contiguous f32 buffer in registration order (nb_tape_param_info gives
 * each offset), their gradients in a second buffer of the same layout. Gradients ACCUMULATE
 * across backward calls until nb_tape_zero_grad. Optimizer state (e.g. Adam moments) can be
 * kept in buffers of the same layout (nn_optim.h works on such flat buffers).
 *
 * Memory. Every activation, saved tensor and activation gradient is carved from an arena owned
 * by the tape and reset by nb_tape_reset. The arena is grow-only: when a step outgrows it, the
 * next reset replaces its blocks by one block of the high-water size, so from the second step
 * of a fixed-shape loop on, a step makes no host (or device) allocation (nb_tape_stats counts
 * them).
 *
 * Gradients. nb_tape_input(..., requires_grad) marks inputs whose gradient is wanted; parameters
 * always get gradients; an op's output needs a gradient when any input does. nb_tape_backward
 * runs the op log in reverse from a scalar (one element) value; nb_tape_grad then returns the
 * gradient of any value that needs one (NULL data when backward did not reach it).
 *
 * Devices. nb_tape_create runs on the CPU (host memory, threaded loops: the reference).
 * nb_tape_create_on(cuda device) keeps parameters, gradients and the arena in device memory and
 * runs every op on the GPU (queued on nb_device_stream; nothing waits unless the host reads).
 * On such a tape the pointers returned by nb_tape_params / nb_tape_grads / nb_tape_data /
 * nb_tape_grad are DEVICE addresses; nb_tape_read / nb_tape_read_grad / nb_tape_write_params
 * copy to and from host memory on any device. Each op kind has a row in a per-op table
 * (src/graph/op_rows.h) with a CPU and a CUDA forward and backward; an op whose CUDA row is
 * missing fails with NB_ERR_UNSUPPORTED naming the op.
 *
 *   nb_device *gpu; nb_device_open("cuda", &gpu);
 *   nb_tape *t; nb_tape_create_on(gpu, &t);                  // holds a reference to gpu
 *   ... nb_tape_param(...) ...; nb_tape_write_params(t, host_init, n_params);
 *   per step: nb_tape_reset, nb_tape_zero_grad, nb_tape_input (a host -> device copy, which
 *   waits for the device), ops, nb_tape_backward (all asynchronous), then e.g.
 *   nb_tape_read(t, loss, &l, 1) (waits) and an optimizer on the device pointer of nb_tape_grads.
 *
 * On CUDA, parameters and the arena are device buffers (nb_tape_stats.device_allocs counts them):
 * from the second step of a fixed-shape loop on, a step allocates neither host nor device memory.
 * nb_tape_input copies host data to the device, which waits for the device's stream (as does
 * nb_tape_timestep_embedding for more than 512 timesteps; fewer travel in a kernel's parameter
 * block); no other step function synchronises.
 * CUDA rows of: silu, add, add_channel, concat, upsample2x, avgpool2x, mse, reshape, transpose,
 * slice_channels (tape_cuda_basic.c), group_norm, group_norm_silu (tape_cuda_norm.c); linear,
 * conv2d: tape_cuda_conv.c; attention: tape_cuda_attn.c. The CUDA mse is a deterministic
 * two-pass reduction; group norm's dgamma / dbeta are reduced over the batch in fixed order.
 *
 * Precision (nb_tape_set_precision) chooses the math of GEMMs, convolutions and attention on
 * CUDA: FP32 (exact fp32), TF32 (tensor cores, fp32 storage), BF16 (bf16 operands, fp32
 * accumulation, and BF16 STORAGE of activations: PyTorch's autocast, done by the tape). On a
 * BF16 CUDA tape the outputs of ops (and their gradients) are stored as bfloat16 (rounded to
 * nearest even) wherever the op's CUDA row reads and writes bf16 (every op of this header
 * except mse, whose [1] output stays f32, and nb_tape_attention, whose inputs are cast to f32
 * by a recorded cast op); parameters, their gradients and optimizer state,
 * inputs (nb_tape_input) and the timestep embedding stay f32, and every sum is taken in f32.
 * nb_tape_read / nb_tape_read_grad return such values widened to f32; the raw pointers of
 * nb_tape_data / nb_tape_grad then address 2-byte elements.
 * The CPU always computes and stores in fp32.
 */
#ifndef NABLA_NN_TAPE_H
#define NABLA_NN_TAPE_H

#include <stdint.h>

#include "nabla/dtype.h"
#include "nabla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct nb_tensor;
typedef struct nb_tape nb_tape;
typedef int32_t nb_tvar; /* handle of a value in a tape; NB_TVAR_NONE for "absent" (no bias) */
#define NB_TVAR_NONE ((nb_tvar)-1)
#define NB_TAPE_MAX_DIMS 4

typedef struct nb_tape_stats {
    int64_t host_allocs;     /* host allocations made by this tape since creation */
    int64_t device_allocs;   /* device buffers taken by a CUDA tape (arena, parameters) */
    int64_t arena_capacity;  /* bytes of arena held */
    int64_t arena_used;      /* bytes carved since the last reset */
    int64_t arena_high_water;/* most bytes carved in one step */
    int32_t n_values;        /* values alive (parameters included) */
    int32_t n_ops;           /* ops recorded since the last reset */
} nb_tape_stats;

typedef enum nb_tape_precision {
    NB_TAPE_FP32 = 0,
    NB_TAPE_TF32 = 1,
    NB_TAPE_BF16 = 2,
} nb_tape_precision;

struct nb_device;
struct nb_func;
nb_status nb_tape_create(nb_tape **out);
/* dev NULL or a CPU device = nb_tape_create; a CUDA device: everything lives on that GPU. The
 * tape holds a reference to dev until nb_tape_free. */
nb_status nb_tape_create_on(struct nb_device *dev, nb_tape **out);
void nb_tape_free(nb_tape *t);
/* The tape's device (a CPU device handle for host tapes, opened on the first call and closed
 * by nb_tape_free; not thread-safe on that first call). NULL only for a NULL tape. */
struct nb_device *nb_tape_device(const nb_tape *t);
/* NB_ERR_INVALID_ARG for a value outside the enum (the precision stays unchanged). */
nb_status nb_tape_set_precision(nb_tape *t, nb_tape_precision p);
nb_tape_precision nb_tape_get_precision(const nb_tape *t);

/* --- parameters ---------------------------------------------------------------------------- */
/* Registers a parameter (zero-initialised) of shape [shape[0..ndim)] under a unique name. Only
 * before the first step. */
nb_status nb_tape_param(nb_tape *t, const char *name, int ndim, const int64_t *shape, nb_tvar *out);
/* NB_ERR_NOT_FOUND when no parameter has that name. */
nb_status nb_tape_param_find(const nb_tape *t, const char *name, nb_tvar *out);
/* Offset (in floats) of a parameter in the parameter/gradient buffers and its element count. */
nb_status nb_tape_param_info(const nb_tape *t, nb_tvar p, int64_t *offset, int64_t *count);
/* The contiguous parameter buffer / gradient buffer ([count] f32 each). Pointers stay valid
 * until the next nb_tape_param. */
nb_status nb_tape_params(nb_tape *t, float **data, int64_t *count);
nb_status nb_tape_grads(nb_tape *t, float **grad, int64_t *count);
/* Fills a parameter with uniform(-bound, bound) values from a seed (deterministic). */
nb_status nb_tape_param_init_uniform(nb_tape *t, nb_tvar p, float bound, uint64_t seed);
nb_status nb_tape_zero_grad(nb_tape *t);

/* --- steps --------------------------------------------------------------------------------- */
/* Forgets all activations and recorded ops (parameters stay). */
nb_status nb_tape_reset(nb_tape *t);
/* Copies data ([shape] f32, row-major) into the arena as a new value. */
nb_status nb_tape_input(nb_tape *t, int ndim, const int64_t *shape, const float *data,
                        int requires_grad, nb_tvar *out);
/* The same from a tensor: f32, contiguous, on the CPU (copied as nb_tape_input) or on the tape's
 * CUDA device (a device-to-device copy queued on the tape's stream: no wait, capturable). The
 * value's shape is the tensor's. Errors: another dtype (NB_ERR_DTYPE), not contiguous
 * (NB_ERR_LAYOUT), a CUDA tensor on another device or with a CPU tape (NB_ERR_DEVICE). */
nb_status nb_tape_input_tensor(nb_tape *t, const struct nb_tensor *x, int requires_grad,
                               nb_tvar *out);
/* Runs the log in reverse from loss (a value with exactly one element), seeding dloss = 1. */
nb_status nb_tape_backward(nb_tape *t, nb_tvar loss);

/* --- inspection ---------------------------------------------------------------------------- */
/* ndim and shape (shape may be NULL; else room for NB_TAPE_MAX_DIMS). */
nb_status nb_tape_shape(const nb_tape *t, nb_tvar v, int *ndim, int64_t *shape);
/* Storage of v's data and gradient: NB_F32, or NB_BF16 (a BF16 CUDA tape; see Precision). */
nb_status nb_tape_dtype(const nb_tape *t, nb_tvar v, nb_dtype *dtype);
nb_status nb_tape_data(nb_tape *t, nb_tvar v, float **data, int64_t *count);
/* Gradient of v (*grad = NULL if backward did not reach v or v needs no gradient). */
nb_status nb_tape_grad(nb_tape *t, nb_tvar v, float **grad, int64_t *count);
nb_status nb_tape_get_stats(const nb_tape *t, nb_tape_stats *out);
/* Copies a value / its gradient (zeros when backward did not reach it) into host memory
 * (count floats, must equal the value's element count, else NB_ERR_SHAPE); waits for the
 * device. */
nb_status nb_tape_read(nb_tape *t, nb_tvar v, float *host, int64_t count);
nb_status nb_tape_read_grad(nb_tape *t, nb_tvar v, float *host, int64_t count);
/* Host <-> the whole parameter / gradient buffers ([count] floats = nb_tape_params' count). */
nb_status nb_tape_write_params(nb_tape *t, const float *host, int64_t count);
nb_status nb_tape_read_params(nb_tape *t, float *host, int64_t count);
nb_status nb_tape_read_grads(nb_tape *t, float *host, int64_t count);

/* --- per-op profiler ------------------------------------------------------------------------
 *   nb_tape_set_profiling(t, 1);              // 1: per op kind, 2: per kind and shape, 0: off
 *   for (...) { nb_tape_reset(t); ...ops...; nb_tape_backward(t, loss); }
 *   char rep[16384]; nb_tape_profile_report(t, rep, sizeof rep); fputs(rep, stdout);
 *   nb_tape_profile_reset(t);                 // forget the totals (e.g. after warm-up steps)
 * While on, every op's forward (when recorded) and backward (in nb_tape_backward) is timed: on a
 * CUDA tape by a pair of events recorded on nb_device_stream around it (device time; events are
 * created once and reused, so steady state allocates nothing), on the CPU by a monotonic clock.
 * The host time spent issuing each op is kept too (on CUDA: launch / enqueue cost). Rows are op
 * kinds, with conv2d split into "conv2d 1x1", "conv2d 3x3", "conv2d 3x3 s2" (level 2 adds the
 * input and output shapes). CUDA event times are read lazily: nb_tape_reset (the next step),
 * nb_tape_profile_report / _rows and turning profiling off wait for the events still pending,
 * so profiling adds one device wait per step. Off (the default) it costs one branch per op.
 * Times are sums; the report divides them by the number of backward passes ("per step"). */
typedef struct nb_tape_profile_row {
    char name[128];    /* "conv2d 3x3", or with level 2 "conv2d 3x3 [32,128,64,64]->[32,128,64,64]" */
    int64_t calls[2];  /* [0] forward, [1] backward */
    double ms[2];      /* summed op time: device time (CUDA events) or wall time (CPU) */
    double host_ms[2]; /* summed host time spent issuing the ops (= ms on the CPU) */
} nb_tape_profile_row;
/* level 0 (off), 1 (per op kind) or 2 (per op kind and shape); changing between 1 and 2
 * clears the totals; 0 keeps them for the report. NB_ERR_INVALID_ARG for another level. */
nb_status nb_tape_set_profiling(nb_tape *t, int level);
/* Forgets the totals and the pass count (pending events are dropped after a wait). */
nb_status nb_tape_profile_reset(nb_tape *t);
/* The rows, sorted by total (forward + backward) time, largest first: *n = the number of rows
 * (rows may be NULL with cap 0 to ask), min(cap, *n) written; *passes (may be NULL) = backward
 * passes profiled. Waits for pending CUDA events. */
nb_status nb_tape_profile_rows(nb_tape *t, nb_tape_profile_row *rows, int cap, int *n,
                               int64_t *passes);
/* A text table of the rows (per step, with each row's share of the total) into buf (NUL-
 * terminated). NB_ERR_INVALID_ARG for a NULL buf or cap 0, or when cap is too small (the table
 * is then cut short; the message gives the size needed). */
nb_status nb_tape_profile_report(nb_tape *t, char *buf, size_t cap);

/* --- ops (each runs now and is recorded; *out is a new value) ---------------------------------
 * A bias / gamma / beta argument may be NB_TVAR_NONE. */
/* x [N,F], w [O,F] (nn.Linear layout), b [O] -> [N,O] */
nb_status nb_tape_linear(nb_tape *t, nb_tvar x, nb_tvar w, nb_tvar b, nb_tvar *out);
/* x [N,C,H,W], w [O,C,K,K] with K = 1 or 3, b [O]; stride 1 or 2; pad >= 0
 * -> [N,O,(H+2pad-K)/stride+1,(W+2pad-K)/stride+1] */
nb_status nb_tape_conv2d(nb_tape *t, nb_tvar x, nb_tvar w, nb_tvar b, int stride, int pad,
                         nb_tvar *out);
/* x [N,C,H,W] (or [N,C]), C % groups == 0; gamma, beta [C]; biased variance -> same shape */
nb_status nb_tape_group_norm(nb_tape *t, nb_tvar x, int groups, nb_tvar gamma, nb_tvar beta,
                             float eps, nb_tvar *out);
/* silu(group_norm(x)) in one op (the UNet's norm + activation pair; saves a pass over memory
 * and the intermediate); same arguments and shapes as nb_tape_group_norm. */
nb_status nb_tape_group_norm_silu(nb_tape *t, nb_tvar x, int groups, nb_tvar gamma, nb_tvar beta,
                                  float eps, nb_tvar *out);
/* x * sigmoid(x), any shape */
nb_status nb_tape_silu(nb_tape *t, nb_tvar x, nb_tvar *out);
/* max(x, 0), any shape (NaN passes through) */
nb_status nb_tape_relu(nb_tape *t, nb_tvar x, nb_tvar *out);
/* softmax over the last dim, any shape: each row of D = shape[ndim-1] elements becomes
 * exp(x - max) / sum exp(x - max) (numerically stable) */
nb_status nb_tape_softmax(nb_tape *t, nb_tvar x, nb_tvar *out);
/* relu(x w^T + b) as one op (x [N,F], w [O,F], b [O] or NB_TVAR_NONE -> [N,O]): on CUDA the ReLU
 * runs in the GEMM's bias pass; the same values as nb_tape_relu(nb_tape_linear(...)) */
nb_status nb_tape_linear_relu(nb_tape *t, nb_tvar x, nb_tvar w, nb_tvar b, nb_tvar *out);
/* a + b, same shape */
nb_status nb_tape_add(nb_tape *t, nb_tvar a, nb_tvar b, nb_tvar *out);
/* x [N,C,H,W] + c [N,C] broadcast over H,W -> [N,C,H,W] */
nb_status nb_tape_add_channel(nb_tape *t, nb_tvar x, nb_tvar c, nb_tvar *out);
/* a [N,Ca,H,W], b [N,Cb,H,W] -> [N,Ca+Cb,H,W] */
nb_status nb_tape_concat(nb_tape *t, nb_tvar a, nb_tvar b, nb_tvar *out);
/* nearest ×2: x [N,C,H,W] -> [N,C,2H,2W] */
nb_status nb_tape_upsample2x(nb_tape *t, nb_tvar x, nb_tvar *out);
/* average pool 2×2 stride 2: x [N,C,H,W] with H, W even -> [N,C,H/2,W/2] */
nb_status nb_tape_avgpool2x(nb_tape *t, nb_tvar x, nb_tvar *out);
/* mean((pred - target)^2) over all elements -> [1]; gradients flow to both */
nb_status nb_tape_mse(nb_tape *t, nb_tvar pred, nb_tvar target, nb_tvar *out);
/* Sinusoidal embedding of n timesteps (host array), dim even: out[i] = [cos(t f_k) for k <
 * dim/2, sin(t f_k) for k < dim/2] with f_k = exp(-ln(max_period) k / (dim/2)) -> [n,dim],
 * no gradient (the diffusers / DDPM convention with flip_sin_to_cos=True, shift 0). */
nb_status nb_tape_timestep_embedding(nb_tape *t, int64_t n, const float *timesteps, int dim,
                                     float max_period, nb_tvar *out);
/* softmax(q k^T / sqrt(d)) v per (n, head): q [N,Hd,Tq,d], k, v [N,Hd,Tk,d] -> [N,Hd,Tq,d] */
nb_status nb_tape_attention(nb_tape *t, nb_tvar q, nb_tvar k, nb_tvar v, nb_tvar *out);
/* Fused multi-head self-attention on the legacy QKV layout (guided-diffusion's
 * QKVAttentionLegacy), straight from a qkv 1x1-conv output with no layout copies:
 *   qkv [N, 3*heads*d, H, W] (or [N, 3*heads*d, L]) -> out [N, heads*d, H, W] (same rank),
 *   channel of qkv = head*3d + j*d + i (j = 0 q, 1 k, 2 v), out channel = head*d + i,
 *   out[n, head*d + i, l] = sum_s softmax_s(q(l) . k(s) / sqrt(d)) v_i(s) over L = H*W positions.
 * The same as reshape [N*heads, 3d, L] -> slice_channels q/k/v -> transpose -> nb_tape_attention
 * -> transpose -> reshape. Errors: heads < 1, qkv not 3-D / 4-D, channels not a multiple of
 * 3*heads; on CUDA d <= 128. */
nb_status nb_tape_qkv_attention(nb_tape *t, nb_tvar qkv, int heads, nb_tvar *out);

/* --- user kernels as ops: a kernel-language function called over tape values ---------------
 *   // act.nb:  [Differentiable] float softplus(float x, float beta) { return log(1 + exp(beta * x)) / beta; }
 *   nb_module *m; nb_module_load(nb_tape_device(t), "act.nb", NULL, &m);
 *   nb_func *sp;  nb_module_func(m, "softplus", &sp);
 *   nb_tape_call_scalars(t, sp, 2, (nb_tvar[]){h, NB_TVAR_NONE}, (double[]){0, 2.0}, &y);
 * y = f(args) through the call layer (include/nabla/module.h): one vectorized call over the
 * arguments' broadcast call shapes, in the call layer's rules (an argument's trailing dims are its
 * parameter's value shape: float3 takes [..., 3]; call shapes broadcast right-aligned, equal or
 * 1); y has the kernel shape + the result's value shape ([1] when both are empty). Backward runs
 * the function's reverse mode (generated by the compiler: the call layer's bwds kernel) and adds
 * dL/d(argument) into the gradient of every argument that needs one; a no_diff parameter passes
 * none. f (one overload, not a [Kernel]) must outlive the op on the tape; its module must be on
 * the tape's device. Arguments bind the parameters in order; trailing parameters with default
 * values may be left out. Errors (nothing recorded): the wrong number of arguments, a struct /
 * Tensor / out parameter or a struct / void result (NB_ERR_UNSUPPORTED), an argument whose trailing
 * dims are not its parameter's value shape or call shapes that do not broadcast (NB_ERR_SHAPE),
 * a function that is not [Differentiable] with an argument that needs a gradient
 * (NB_ERR_INVALID_ARG), the module on another device (NB_ERR_DEVICE). At most 8 tape values and 4
 * scalars. Every argument here is a tape value. */
nb_status nb_tape_call(nb_tape *t, struct nb_func *f, int nargs, const nb_tvar *args, nb_tvar *out);
/* The same with scalars: args[p] == NB_TVAR_NONE binds parameter p to scalars[p] (a number
 * parameter: one value for every thread; an integer parameter needs a whole number). */
nb_status nb_tape_call_scalars(nb_tape *t, struct nb_func *f, int nargs, const nb_tvar *args,
                               const double *scalars, nb_tvar *out);


/* --- layout ops (copies; reshape is a view on CUDA), for attention blocks:
 * [N,C,H,W] -> [N,heads,d,HW] -> [N,heads,HW,d] */
/* Same elements, new shape (product must match). On CUDA tapes a view: the output shares the
 * input's memory and gradient buffer (no copy either way; nb_tape_grad of the output then shows
 * the input's whole gradient); the CPU copies. */
nb_status nb_tape_reshape(nb_tape *t, nb_tvar x, int ndim, const int64_t *shape, nb_tvar *out);
/* Swaps the last two dims: [..., A, B] -> [..., B, A] (x has >= 2 dims) */
nb_status nb_tape_transpose(nb_tape *t, nb_tvar x, nb_tvar *out);
/* Channels [c0, c0 + count) of x [N,C,...] -> [N,count,...] */
nb_status nb_tape_slice_channels(nb_tape *t, nb_tvar x, int64_t c0, int64_t count, nb_tvar *out);

#ifdef __cplusplus
}
#endif
#endif

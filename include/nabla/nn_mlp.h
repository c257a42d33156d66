/* nabla — fully fused multi-layer perceptron (tiny-cuda-nn style), CPU reference + CUDA.
 *
 *   nb_mlp_config cfg = nb_mlp_config_default(32, 3, 64, 2);   // n_in, n_out, width, hidden
 *   cfg.act = NB_ACT_RELU; cfg.out_act = NB_ACT_NONE; cfg.bias = 0;
 *   nb_mlp *mlp;
 *   nb_mlp_create(dev, &cfg, &mlp);
 *   nb_mlp_init_params(mlp, 1234);
 *   for (;;) {                                          // a training step
 *       nb_mlp_forward(mlp, x, y, 1);                   // x [B,n_in] f32|f16, y [B,n_out] f32
 *       ... loss outside the MLP: dy = dL/dy [B,n_out] f32 ...
 *       nb_mlp_backward(mlp, dy, dx);                   // dx [B,n_in] f32 or NULL; writes grads
 *       ... optimizer updates nb_mlp_params(mlp) from nb_mlp_grads(mlp) (flat f32 buffers) ...
 *   }
 *   nb_mlp_inference(mlp, x, y);                        // forward, nothing saved
 *   nb_mlp_free(mlp);
 *
 * Model. Layers l = 0 .. L-1 with L = n_hidden_layers + 1:
 *   h_0 = x;   z_l = h_l W_l^T (+ b_l);   h_{l+1} = act(z_l) for l < L-1;   y = out_act(z_{L-1})
 *   W_0 [width, n_in], W_l [width, width] for 0 < l < L-1, W_{L-1} [n_out, width].
 * Parameters: ONE flat f32 buffer of nb_mlp_n_params(mlp) values, layer by layer: W_l row-major
 * ([out][in], PyTorch's nn.Linear layout), then b_l [out] when cfg.bias (nb_mlp_layer_info gives
 * the offsets). These f32 values are the master weights; every forward rounds them to the compute
 * dtype (f16 or bf16), so an optimizer may update the buffer in place between steps.
 *
 * Precision (CUDA and the CPU reference alike): matrix operands (inputs, weights, activations,
 * back-propagated gradients) are rounded to cfg.compute (f16 or bf16); every product is summed in
 * f32 (tiny-cuda-nn sums in f16). Activations are applied in f32 to the rounded pre-activation.
 * Gradients flowing backward are multiplied by cfg.loss_scale before rounding to the compute
 * dtype (f16 underflows below 6e-8) and divided by it again in the f32 results; the scale is
 * internal — dx and the weight gradients come out unscaled.
 *
 * Training memory: a training forward saves what the backward needs (on CUDA by default only the
 * network input, in the compute dtype: the backward recomputes the rest; see docs/NN.md) in
 * workspace owned by the mlp, sized for the largest batch seen (grow-only: no allocation in
 * steady state).
 * nb_mlp_backward uses what the last training forward saved: call it with the same batch size,
 * before the next forward. Gradients are OVERWRITTEN by each backward (not accumulated): one
 * backward per optimizer step, the usual fused-training pattern.
 *
 * Devices: the mlp's tensors live on the device it was created on; x, y, dy, dx must live there
 * too (no hidden copies). CPU runs use the reference implementation (threaded), CUDA runs the
 * fused tensor-core kernels (mma.sync, sm_80+), compiled by NVRTC on first use and cached on disk.
 * Work on CUDA is queued on the device's main stream; functions return before it finishes.
 */
#ifndef NABLA_NN_MLP_H
#define NABLA_NN_MLP_H

#include <stdint.h>

#include "nabla/device.h"
#include "nabla/dtype.h"
#include "nabla/nn_tape.h"
#include "nabla/status.h"
#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef NB_ACTIVATION_DEFINED
#define NB_ACTIVATION_DEFINED
typedef enum nb_activation {
    NB_ACT_NONE = 0,
    NB_ACT_RELU,
    NB_ACT_LEAKY_RELU, /* x > 0 ? x : 0.01 x */
    NB_ACT_SILU,       /* x * sigmoid(x) */
    NB_ACT_SIGMOID,
    NB_ACT_TANH,
    NB_ACT_COUNT
} nb_activation;
#endif

/* "none", "relu", "leaky_relu", "silu", "sigmoid", "tanh"; "invalid" otherwise. */
const char *nb_activation_name(nb_activation a);
/* Inverse of nb_activation_name; -1 if unknown. */
int nb_activation_from_name(const char *name);

typedef struct nb_mlp_config {
    int n_in;            /* input features (>= 1; padded to 16 internally) */
    int n_out;           /* output features (>= 1; padded to 16 internally) */
    int width;           /* hidden width: 16, 32, 64 or 128 */
    int n_hidden_layers; /* >= 1 hidden layers (so n_hidden_layers + 1 weight matrices) */
    nb_activation act;   /* after every hidden layer */
    nb_activation out_act; /* on the output */
    int bias;            /* 1: every layer has a bias vector */
    nb_dtype compute;    /* NB_F16 or NB_BF16: operand dtype of the matrix products */
    float loss_scale;    /* backward gradient scale before rounding; 0 = default (128 for f16, 1 for bf16) */
} nb_mlp_config;

/* A config with the given sizes, ReLU hidden activations, no output activation, no bias, f16. */
nb_mlp_config nb_mlp_config_default(int n_in, int n_out, int width, int n_hidden_layers);

typedef struct nb_mlp nb_mlp;

/* Validates cfg (NB_ERR_INVALID_ARG / NB_ERR_UNSUPPORTED naming the field) and allocates the
 * parameter and gradient buffers on dev (zero-filled; call nb_mlp_init_params). */
nb_status nb_mlp_create(nb_device *dev, const nb_mlp_config *cfg, nb_mlp **out);
void nb_mlp_free(nb_mlp *mlp);

const nb_mlp_config *nb_mlp_get_config(const nb_mlp *mlp);
nb_device *nb_mlp_device(const nb_mlp *mlp);
int64_t nb_mlp_n_params(const nb_mlp *mlp);
int nb_mlp_n_layers(const nb_mlp *mlp); /* n_hidden_layers + 1 */

/* Where layer l's weights and bias lie in the flat parameter buffer (element offsets; *b_off =
 * -1 without bias) and its matrix shape [rows = out, cols = in]. Any out-pointer may be NULL. */
nb_status nb_mlp_layer_info(const nb_mlp *mlp, int layer, int64_t *w_off, int64_t *b_off,
                            int *rows, int *cols);

/* The flat f32 parameter and gradient tensors, [n_params], on the mlp's device. Borrowed: owned
 * by the mlp, valid until nb_mlp_free. Write parameters with nb_tensor_from_host_into etc. */
nb_tensor *nb_mlp_params(nb_mlp *mlp);
nb_tensor *nb_mlp_grads(nb_mlp *mlp);

/* Deterministic init from seed (same values on every device): weights of layer l uniform in
 * [-s, s] with s = sqrt(6 / (fan_in + fan_out)) (tiny-cuda-nn's Xavier-uniform), biases zero. */
nb_status nb_mlp_init_params(nb_mlp *mlp, uint64_t seed);

/* x [B, n_in] f32 or f16, contiguous; y [B, n_out] f32, contiguous. B >= 1, any value.
 * training = 1 saves what nb_mlp_backward needs; 0 is the same as nb_mlp_inference. */
nb_status nb_mlp_forward(nb_mlp *mlp, const nb_tensor *x, nb_tensor *y, int training);
nb_status nb_mlp_inference(nb_mlp *mlp, const nb_tensor *x, nb_tensor *y);

/* dy = dL/dy [B, n_out] f32 for the batch of the last training forward; writes dL/dx into dx
 * [B, n_in] f32 (NULL: skip) and OVERWRITES the gradient buffer with dL/dparams. */
nb_status nb_mlp_backward(nb_mlp *mlp, const nb_tensor *dy, nb_tensor *dx);

/* Bytes of workspace the mlp holds now (saved activations, half weights). */
size_t nb_mlp_workspace_bytes(const nb_mlp *mlp);

/* Profiling (benchmarks): on != 0 times every CUDA launch of this mlp with events (each launch
 * synchronised: slow) and prints the mean time per kernel to stderr when the mlp is freed.
 * on = 0 stops it (the totals so far are dropped). No effect on the CPU device. */
nb_status nb_mlp_set_profile(nb_mlp *mlp, int on);

/* The mlp as an op of a tape (nn_tape.h; the row MLP of the op table): out [B, n_out] f32 =
 * mlp(x) for x [B, n_in] with the weights taken from w, a tape value of nb_mlp_n_params(mlp)
 * floats (usually an nb_tape_param, [n_params], initialised e.g. from nb_mlp_params after
 * nb_mlp_init_params). The forward copies w into the mlp's parameter buffer and runs
 * nb_mlp_forward (training when out needs a gradient); nb_tape_backward runs nb_mlp_backward and
 * ADDS dL/dw into w's gradient and dL/dx into x's, like every tape op. The mlp must live on the
 * tape's device and stay alive while the op is on the tape. Its saved activations hold ONE
 * training forward, so an mlp is used by at most one op that needs a gradient per tape step
 * (NB_ERR_UNSUPPORTED otherwise; nb_tape_reset starts a new step). */
nb_status nb_tape_mlp(nb_tape *t, nb_mlp *mlp, nb_tvar x, nb_tvar w, nb_tvar *out);

#ifdef __cplusplus
}
#endif
#endif

/* nabla — input encodings for neural fields: dense feature grids, multiresolution hash grids
 * (Instant-NGP) and frequency (Fourier) encodings. Forward and backward, CPU and CUDA.
 *
 *   nb_encoding_config c = nb_hash_grid_config(2, 16, 2, 15, 16, 1.5f); // tiny-cuda-nn's image
 *   nb_encoding *enc;
 *   nb_encoding_create(dev, &c, &enc);
 *   int64_t np = nb_encoding_n_params(enc);           // floats in the parameter vector
 *   // params, grads: f32[np] tensors on dev (often slices of one flat buffer, see nn_optim.h)
 *   nb_encoding_init_params(enc, params, seed);        // uniform(-1e-4, 1e-4), as tiny-cuda-nn
 *   nb_encoding_forward(enc, params, x, feat);         // x f32[B, n_dims] in [0,1] -> feat f32[B, F]
 *   nb_encoding_backward(enc, params, x, dfeat, grads, NULL); // grads += dL/dparams
 *   nb_encoding_destroy(enc);
 *
 * The encoding holds no parameters itself: they are passed in, so that one Adam step can update
 * the parameters of a whole model held in one contiguous buffer.
 *
 * Grids. A grid level has `side` vertices along each input dimension, placed on [0,1]: a point x
 * maps to pos = x * (side - 1), its cell is floor(pos) (clamped to side - 2) and its value is the
 * bi/trilinear interpolation of the 4 / 8 corner feature vectors. x is clamped to [0,1].
 *   - Dense grid: one level with sides resolution[0..n_dims-1] (each >= 2), features stored as
 *     params[((z * side_y + y) * side_x + x) * F + f].
 *   - Hash grid (Instant-NGP): level l has resolution N_l = floor(base * scale^l) (so side N_l + 1);
 *     a level whose (N_l + 1)^d vertices fit in the table of 2^log2_table_size entries is indexed
 *     densely (and uses only (N_l + 1)^d entries), else through the spatial hash
 *     (x * 1 ^ y * 2654435761 ^ z * 805459861) mod 2^log2_table_size (uint32 arithmetic).
 *     Levels are stored one after another, each as [entries][F]. Output: feat[b, l * F + f].
 * Frequency: feat[b, (d * n_frequencies + k) * 2 + {0,1}] = {sin, cos}(2^k * pi * x[b, d]);
 *   no parameters (n_params = 0), x is not clamped.
 *
 * Backward: grads (f32[n_params]) are ACCUMULATED into (+=), as with nabla's .bwds: zero them
 * yourself (nb_adam_step can do it after reading them). dx (f32[B, n_dims], or NULL when not
 * needed) is OVERWRITTEN with dL/dx. Either of grads and dx may be NULL, not both (for the
 * frequency encoding grads must be NULL or empty, since it has no parameters).
 *
 * All tensors must be f32 (feat may also be f16), contiguous and on the encoding's device. On CUDA the calls are queued
 * on the device's main stream and return at once: no host synchronisation, no allocation (the
 * kernels are compiled on the first call, through the JIT cache). On the CPU they run in plain C
 * on the thread pool (the reference the CUDA path is tested against). The CPU parameter gradient
 * is deterministic; CUDA's uses float atomics, so its rounding order varies run to run.
 */
#ifndef NABLA_NN_ENCODING_H
#define NABLA_NN_ENCODING_H

#include <stdint.h>

#include "nabla/device.h"
#include "nabla/nn_tape.h"
#include "nabla/status.h"
#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nb_encoding_kind {
    NB_ENCODING_DENSE_GRID = 0,
    NB_ENCODING_HASH_GRID = 1,
    NB_ENCODING_FREQUENCY = 2
} nb_encoding_kind;

#define NB_ENCODING_MAX_LEVELS 32

typedef struct nb_encoding_config {
    nb_encoding_kind kind;
    int n_dims;           /* input dimensions: 2 or 3 for grids, 1..8 for frequency */
    int n_features;       /* grids: features per vertex (per level), 1..64 */
    /* dense grid */
    int resolution[3];    /* vertices per dimension, each >= 2 (only n_dims of them used) */
    /* hash grid */
    int n_levels;         /* 1..NB_ENCODING_MAX_LEVELS */
    int log2_table_size;  /* table entries per level = 2^log2_table_size, 4..26 */
    int base_resolution;  /* N_0 >= 1 */
    float per_level_scale;/* >= 1 */
    /* frequency */
    int n_frequencies;    /* 1..24 */
} nb_encoding_config;

typedef struct nb_encoding nb_encoding;

/* Convenience constructors for the three kinds. */
nb_encoding_config nb_dense_grid_config(int n_dims, int n_features, int res_x, int res_y, int res_z);
nb_encoding_config nb_hash_grid_config(int n_dims, int n_levels, int n_features, int log2_table_size,
                                       int base_resolution, float per_level_scale);
nb_encoding_config nb_frequency_config(int n_dims, int n_frequencies);

/* Validates the config (NB_ERR_INVALID_ARG naming the field otherwise). dev: cpu or cuda. */
nb_status nb_encoding_create(nb_device *dev, const nb_encoding_config *cfg, nb_encoding **out);
void nb_encoding_destroy(nb_encoding *enc);

int64_t nb_encoding_n_params(const nb_encoding *enc);  /* floats */
nb_device *nb_encoding_device(const nb_encoding *enc); /* the device it was created on */
int nb_encoding_n_input_dims(const nb_encoding *enc);
int nb_encoding_n_output_dims(const nb_encoding *enc); /* F: features per point */
const nb_encoding_config *nb_encoding_get_config(const nb_encoding *enc);
/* Describes level l of a grid: side (vertices per dimension), first float of the level in the
 * parameter vector, entries (vertices stored), hashed (1 if indexed through the hash). */
nb_status nb_encoding_level_info(const nb_encoding *enc, int level, int side[3], int64_t *offset,
                                 int64_t *entries, int *hashed);

/* A hint for the CUDA parameter backward of grids: 1 = the points of a batch come in a
 * spatially coherent order (neighbours in the batch are neighbours in space, as from
 * nb_image_sample_stratified), so lanes of a warp often update the same parameters; the
 * backward then merges those updates with warp shuffles before its atomics (faster for such
 * batches, slower for random ones). 0 (the default) = random order. Results are the same up to
 * float rounding order. */
nb_status nb_encoding_set_spatially_ordered(nb_encoding *enc, int ordered);

/* params f32[n_params] <- uniform(-1e-4, 1e-4) from a counter-based generator (same values on
 * every device for the same seed). */
nb_status nb_encoding_init_params(nb_encoding *enc, nb_tensor *params, uint64_t seed);

/* x f32[B, n_dims], feat f32[B, F] or f16[B, F] (overwritten; f16 halves the traffic into an
 * MLP that takes f16 inputs, see nn_mlp.h). params may be NULL when n_params is 0. */
nb_status nb_encoding_forward(nb_encoding *enc, const nb_tensor *params, const nb_tensor *x,
                              nb_tensor *feat);

/* dfeat f32[B, F]. grads f32[n_params] += dL/dparams (or NULL); dx f32[B, n_dims] = dL/dx (or
 * NULL). */
nb_status nb_encoding_backward(nb_encoding *enc, const nb_tensor *params, const nb_tensor *x,
                               const nb_tensor *dfeat, nb_tensor *grads, nb_tensor *dx);

/* The backward of encoding -> mlp in one call: nb_mlp_backward(mlp, dy, dfeat) then
 * nb_encoding_backward(enc, params, x, dfeat, grads, NULL). mlp's n_in must be the encoding's
 * output size and its last training forward must have had the encoded x as input. On CUDA, for
 * 2-D grids of 2 features and an mlp in the recomputing backward (nn_mlp.h), it is one kernel
 * (plus the mlp's weight-gradient reduction) that never stores dfeat; elsewhere the two calls
 * (with a temporary dfeat). dy f32[B, n_out]; grads f32[n_params] +=; the mlp's grads written. */
typedef struct nb_mlp nb_mlp;
nb_status nb_encoding_backward_mlp(nb_encoding *enc, nb_mlp *mlp, const nb_tensor *params,
                                   const nb_tensor *x, const nb_tensor *dy, nb_tensor *grads);

/* The rest of a training step after feat = nb_encoding_forward(enc, params, x): the mlp's
 * training forward on feat (f16 or f32 [B, n_in]), the loss (`loss` is an nb_loss_kind,
 * nn_optim.h) against target f32[B, n_out] with its mean added into loss_sum (one f32, or NULL),
 * and the backward of both into the mlp's grads (written) and grads (+=): nb_mlp_forward +
 * nb_loss + nb_encoding_backward_mlp. On CUDA, where nb_encoding_backward_mlp fuses and the mlp
 * has at most 16 outputs and 64 inputs, one kernel (+ the weight-gradient reduction) that stores
 * neither y nor dL/dy nor dL/dfeat; elsewhere the three calls (with temporaries). The mlp keeps
 * no saved state for a later nb_mlp_backward. */
nb_status nb_encoding_mlp_train(nb_encoding *enc, nb_mlp *mlp, const nb_tensor *params, const nb_tensor *x,
                                const nb_tensor *feat, const nb_tensor *target, int loss,
                                nb_tensor *loss_sum, nb_tensor *grads);

/* The encoding as an op of a tape (nn_tape.h; the row ENCODING of the op table): out [B, F] f32 =
 * encoding(x) for x [B, n_dims] with the parameters in params, a tape value of
 * nb_encoding_n_params(enc) floats (an nb_tape_param, [n_params]; NB_TVAR_NONE for the frequency
 * encoding, which has none). nb_tape_backward adds dL/dparams into params' gradient and dL/dx
 * into x's. enc must live on the tape's device and stay alive while the op is on the tape. */
nb_status nb_tape_encoding(nb_tape *t, nb_encoding *enc, nb_tvar x, nb_tvar params, nb_tvar *out);

#ifdef __cplusplus
}
#endif
#endif

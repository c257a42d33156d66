/* Internals of the encodings (src/nn/encoding/): the encoding object, its level table and the
 * CUDA halves (encoding_cuda.c). Only encoding/ includes this (tests/test_layers.py checks);
 * the helpers every nn file shares are in nn/common/nn_common.h. */
#ifndef NB_NN_ENCODING_INTERNAL_H
#define NB_NN_ENCODING_INTERNAL_H

#include <stdint.h>

#include "jit/jit.h"
#include "nabla/nn_encoding.h"
#include "nabla/tensor.h"
#include "nn/common/nn_common.h"

/* ---- encodings -------------------------------------------------------------------------- */

typedef struct nb_enc_level {
    int side[3];      /* vertices per dimension (1 for unused dimensions) */
    int hashed;
    int64_t offset;   /* first float of the level in the parameter vector */
    int64_t entries;  /* vertices stored */
} nb_enc_level;

#define NB_ENC_MLP_DEFS 8 /* nb_enc_cuda_mlp_defines */

struct nb_encoding {
    nb_device *dev;
    nb_encoding_config cfg;
    int n_levels;     /* grids: levels (1 for a dense grid); frequency: 0 */
    int n_out;
    int64_t n_params;
    nb_enc_level level[NB_ENCODING_MAX_LEVELS];
    int spatially_ordered; /* nb_encoding_set_spatially_ordered */
    /* CUDA kernels, loaded on first use */
    /* nb_enc_cuda_mlp_defines, built on first use (mlp_defs[0] NULL: not yet): 4 settings and 4
     * level tables of up to NB_ENCODING_MAX_LEVELS values */
    const char *mlp_defs[NB_ENC_MLP_DEFS + 1];
    char mlp_def_buf[128 + 4 * (16 + NB_ENCODING_MAX_LEVELS * 11)];
    nb_jit_kernel *k_fwd, *k_fwd_h, *k_bwd, *k_bwd_smem, *k_bwd_agg, *k_bwd_dx;
};

/* CUDA halves (encoding_cuda.c); arguments already checked. x, feat, dfeat, grads, dx are device
 * addresses (grads / dx may be NULL); feat holds f16 when feat_f16, else f32. */
nb_status nb_enc_cuda_forward(nb_encoding *enc, const float *params, const float *x, void *feat,
                              int feat_f16, int64_t B);
nb_status nb_enc_cuda_backward(nb_encoding *enc, const float *params, const float *x,
                               const float *dfeat, float *grads, float *dx, int64_t B);
void nb_enc_cuda_release(nb_encoding *enc);
/* The defines of src/nn/encoding/kernels/grid_scatter.cuh (the grid backward fused into the
 * MLP's: ENC_L, ENC_SMEM_LEVELS, ENC_SMEM_FLOATS, ENC_AGG and the level tables ENC_SX, ENC_SY,
 * ENC_OFF, ENC_MASK; NULL-terminated, owned by enc) and the shared-memory floats it needs.
 * NB_ERR_UNSUPPORTED unless enc is a 2-D grid of 2 features. */
nb_status nb_enc_cuda_mlp_defines(nb_encoding *enc, const char *const **defs, int *smem_floats);

#endif

/* Internals shared by the encodings, optimizers, losses and image code of src/nn: tensor
 * argument checks, the counter-based random generator (the same numbers on CPU and CUDA), and
 * the CUDA halves of the encodings. */
#ifndef NB_NN_ENCODING_INTERNAL_H
#define NB_NN_ENCODING_INTERNAL_H

#include <stdint.h>

#include "jit/jit.h"
#include "nabla/nn_encoding.h"
#include "nabla/tensor.h"

/* Checks that t is an f32, contiguous tensor on dev with ndim dims; each of d0, d1 that is >= 0
 * must match the shape (for ndim == 1 only d0 is used). fn and arg name the call and the argument
 * in the message. */
nb_status nb_nn_check_f32(const char *fn, const char *arg, const nb_tensor *t, nb_device *dev,
                          int ndim, int64_t d0, int64_t d1);

/* Runs fn over [0, n) on the global thread pool (inline if there is none). */
void nb_nn_parallel(int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t b, int64_t e), void *ctx);

/* Loads a CUDA kernel `entry` from `source` on dev through the JIT (memory cache after the first
 * call); name is for messages. */
nb_status nb_nn_cuda_kernel(nb_device *dev, const char *source, const char *entry, nb_jit_kernel **out);

/* ---- counter-based random numbers (PCG hash); NB_NN_RNG_CUDA is the same code for kernels -- */

static inline uint32_t nb_nn_pcg(uint32_t v) {
    uint32_t s = v * 747796405u + 2891336453u;
    uint32_t w = ((s >> ((s >> 28u) + 4u)) ^ s) * 277803737u;
    return (w >> 22u) ^ w;
}
/* Key of (seed, stream): mixes both halves of the seed. */
static inline uint32_t nb_nn_rng_key(uint64_t seed, uint32_t stream) {
    return nb_nn_pcg((uint32_t)seed ^ nb_nn_pcg((uint32_t)(seed >> 32) ^ nb_nn_pcg(stream)));
}
/* Uniform float in [0, 1) for counter i under key. */
static inline float nb_nn_uniform(uint32_t key, uint32_t i) {
    return (float)(nb_nn_pcg(i ^ key) >> 8) * (1.0f / 16777216.0f);
}

#define NB_NN_RNG_CUDA                                                                          \
    "__device__ __forceinline__ unsigned nb_pcg(unsigned v) {\n"                                \
    "    unsigned s = v * 747796405u + 2891336453u;\n"                                          \
    "    unsigned w = ((s >> ((s >> 28u) + 4u)) ^ s) * 277803737u;\n"                           \
    "    return (w >> 22u) ^ w;\n"                                                              \
    "}\n"                                                                                       \
    "__device__ __forceinline__ float nb_uniform(unsigned key, unsigned i) {\n"                 \
    "    return (float)(nb_pcg(i ^ key) >> 8) * (1.0f / 16777216.0f);\n"                        \
    "}\n"

/* ---- encodings -------------------------------------------------------------------------- */

typedef struct nb_enc_level {
    int side[3];      /* vertices per dimension (1 for unused dimensions) */
    int hashed;
    int64_t offset;   /* first float of the level in the parameter vector */
    int64_t entries;  /* vertices stored */
} nb_enc_level;

struct nb_encoding {
    nb_device *dev;
    nb_encoding_config cfg;
    int n_levels;     /* grids: levels (1 for a dense grid); frequency: 0 */
    int n_out;
    int64_t n_params;
    nb_enc_level level[NB_ENCODING_MAX_LEVELS];
    int spatially_ordered; /* nb_encoding_set_spatially_ordered */
    /* CUDA kernels, loaded on first use */
    char *cuda_src;
    char *mlp_src;    /* nb_enc_cuda_mlp_source, built on first use ([mlp_src_cap] bytes) */
    size_t mlp_src_cap;
    nb_jit_kernel *k_fwd, *k_fwd_h, *k_bwd, *k_bwd_smem, *k_bwd_agg, *k_bwd_dx;
};

/* CUDA halves (encoding_cuda.c); arguments already checked. x, feat, dfeat, grads, dx are device
 * addresses (grads / dx may be NULL); feat holds f16 when feat_f16, else f32. */
nb_status nb_enc_cuda_forward(nb_encoding *enc, const float *params, const float *x, void *feat,
                              int feat_f16, int64_t B);
nb_status nb_enc_cuda_backward(nb_encoding *enc, const float *params, const float *x,
                               const float *dfeat, float *grads, float *dx, int64_t B);
void nb_enc_cuda_release(nb_encoding *enc);
/* CUDA device code of the grid backward fused into the MLP's (enc_scatter, enc_smem_zero,
 * enc_smem_flush and their level tables; owned by enc), and the shared-memory floats it needs.
 * NB_ERR_UNSUPPORTED unless enc is a 2-D grid of 2 features. */
nb_status nb_enc_cuda_mlp_source(nb_encoding *enc, const char **src, int *smem_floats);

#endif

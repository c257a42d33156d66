/* Helpers shared by the layers of src/nn and by src/models: tensor argument checks, the
 * thread-pool loop and the counter-based random generator (the same
 * numbers on CPU and CUDA). Implemented in nn_common.c. */
#ifndef NB_NN_COMMON_H
#define NB_NN_COMMON_H

#include <stdint.h>

#include "jit/jit.h"
#include "nabla/tensor.h"

/* Checks that t is an f32, contiguous tensor on dev with ndim dims; each of d0, d1 that is >= 0
 * must match the shape (for ndim == 1 only d0 is used). fn and arg name the call and the argument
 * in the message. */
nb_status nb_nn_check_f32(const char *fn, const char *arg, const nb_tensor *t, nb_device *dev,
                          int ndim, int64_t d0, int64_t d1);

/* Runs fn over [0, n) on the global thread pool (inline if there is none). */
void nb_nn_parallel(int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t b, int64_t e), void *ctx);

/* ---- counter-based random numbers (PCG hash); nn/common/kernels/rng.cuh is the same code for kernels */

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

#endif

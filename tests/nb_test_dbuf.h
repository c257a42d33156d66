/* Scaffolding shared by the CUDA conv tests (test_nn_conv_*_cuda.c): a uniform [-1, 1)
 * generator (define NB_TEST_SEED before including to pick the stream), bf16 rounding, and device
 * buffers of f32 or bf16 filled from host f32 (dput, at dput_offset elements: > 0 gives
 * misaligned pointers; dput_at with an explicit offset), read back as f32 (dget), freed (dfree);
 * open_gpu: the CUDA device, or NULL without one or without cuBLAS (the tests then skip). */
#ifndef NB_TEST_DBUF_H
#define NB_TEST_DBUF_H

#include <stdint.h>
#include <stdlib.h>

#include "nabla/device.h"
#include "nabla/dtype.h"
#include "device/cublas.h"

#ifndef NB_TEST_SEED
#define NB_TEST_SEED 0x9e3779b97f4a7c15ull
#endif

static uint64_t rng_state = NB_TEST_SEED;
static inline float frand(void) { /* uniform [-1, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static inline float bf_round(float f) { return nb_bf16_to_f32(nb_f32_to_bf16(f)); }

typedef struct {
    nb_buffer *b;
    void *p;
    nb_dtype dt;
    int64_t n;
} dbuf;
static int dput_offset; /* elements: > 0 gives misaligned device pointers */
static inline int dput_at(nb_device *gpu, dbuf *d, const float *host, int64_t n, nb_dtype dt, int off) {
    d->b = NULL, d->p = NULL, d->dt = dt, d->n = n;
    size_t es = dt == NB_BF16 ? 2 : 4;
    if (nb_buffer_alloc(gpu, (size_t)(n + off + 16) * es, &d->b) != NB_OK) return 0;
    d->p = (char *)nb_buffer_ptr(d->b) + (size_t)off * es;
    if (!host) return 1;
    if (dt == NB_F32) return nb_memcpy_h2d(gpu, d->p, host, (size_t)n * 4) == NB_OK;
    uint16_t *h = malloc((size_t)(n > 0 ? n : 1) * 2);
    for (int64_t i = 0; i < n; i++) h[i] = nb_f32_to_bf16(host[i]);
    int ok = nb_memcpy_h2d(gpu, d->p, h, (size_t)n * 2) == NB_OK;
    free(h);
    return ok;
}
static inline int dput(nb_device *gpu, dbuf *d, const float *host, int64_t n, nb_dtype dt) {
    return dput_at(gpu, d, host, n, dt, dput_offset);
}
/* device -> host f32 (1 on success) */
static inline int dget(nb_device *gpu, const dbuf *d, float *host) {
    if (d->dt == NB_F32) return nb_memcpy_d2h(gpu, host, d->p, (size_t)d->n * 4) == NB_OK;
    uint16_t *h = malloc((size_t)(d->n > 0 ? d->n : 1) * 2);
    int ok = nb_memcpy_d2h(gpu, h, d->p, (size_t)d->n * 2) == NB_OK;
    for (int64_t i = 0; ok && i < d->n; i++) host[i] = nb_bf16_to_f32(h[i]);
    free(h);
    return ok;
}
static inline void dfree(dbuf *d) {
    if (d->b) nb_buffer_release(d->b);
    d->b = NULL;
}
static inline nb_device *open_gpu(void) {
    nb_device *gpu = NULL;
    if (nb_device_open("cuda", &gpu) != NB_OK) return NULL;
    if (!nb_cublas_available()) {
        nb_device_close(gpu);
        return NULL;
    }
    return gpu;
}

#endif

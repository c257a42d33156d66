/* Internals of the DDPM trainer / sampler (src/models/ddpm.c): the small elementwise steps around the
 * UNet, each a CUDA kernel (ddpm_kernels.c, one launch, no host wait) with a CPU reference of the
 * same arithmetic. Pointers are on dev (host memory for the CPU device). */
#ifndef NB_NN_DDPM_INTERNAL_H
#define NB_NN_DDPM_INTERNAL_H

#include <stdint.h>

#include "jit/jit.h"
#include "nabla/device.h"

/* The device statistics block (floats): two alternating grad-norm^2 accumulators (a step sums
 * into one; its clip kernel zeroes the other for the next step), then the window statistics. */
#define NB_DDPM_STATS 8
enum {
    NB_DDPM_LOSS_SUM = 2,  /* sum of the window's losses */
    NB_DDPM_LAST_NORM = 3, /* last step's norm before clipping */
    NB_DDPM_MAX_NORM = 4,
    NB_DDPM_COUNT = 5,     /* steps in the window */
    NB_DDPM_BAD = 6,       /* 1 once a non-finite norm was seen */
};
/* Per-launch cap of nb_ddpm_qsample's per-image coefficients (kernel argument arrays). */
#define NB_DDPM_QMAX 256

typedef struct nb_ddpm_dev {
    nb_device *dev; /* borrowed from the tape */
    int cuda;
    nb_jit_kernel *k_q, *k_sq, *k_clip, *k_ema, *k_upd, *k_randn;
    double *partial; /* CPU: per-chunk sums of squares */
    int64_t partial_cap;
} nb_ddpm_dev;

/* Sampler update of x from the model's eps e (mode 0 DDIM, 1 DDPM with noise, 2 DDPM last step). */
typedef struct nb_ddpm_update_args {
    float *x;
    const float *e;
    int64_t n;
    uint32_t key, base; /* noise: counter base + i under key */
    int32_t mode;
    float sa, s1a, sap, s1ap, c0, c1, sigma;
} nb_ddpm_update_args;

nb_status nb_ddpm_dev_init(nb_ddpm_dev *k, nb_device *dev);
void nb_ddpm_dev_release(nb_ddpm_dev *k);
/* host -> dev, dev -> host (waits), dev -> dev; count floats */
nb_status nb_ddpm_put(nb_ddpm_dev *k, float *dst, const float *src, int64_t count);
nb_status nb_ddpm_get(nb_ddpm_dev *k, float *dst, const float *src, int64_t count);
nb_status nb_ddpm_copy(nb_ddpm_dev *k, float *dst, const float *src, int64_t count);
/* x0, eps, xt [n, img]: eps = N(0,1) from (key, i), xt = qa[i] x0 + qb[i] eps (qa, qb host [n]) */
nb_status nb_ddpm_qsample(nb_ddpm_dev *k, const float *x0, float *eps, float *xt, int64_t img, int n,
                          uint32_t key, const float *qa, const float *qb);
/* *acc += sum g^2 (acc on dev) */
nb_status nb_ddpm_sumsq(nb_ddpm_dev *k, const float *g, int64_t n, float *acc);
/* norm = sqrt(stats[slot]); g *= clip / (norm + 1e-6) when clip > 0 and norm > clip, 0 when the
 * norm is not finite; window stats += (loss, norm); stats[1 - slot] = 0 */
nb_status nb_ddpm_clip(nb_ddpm_dev *k, float *g, int64_t n, float *stats, int slot, float clip,
                       const float *loss);
/* ema = a ema + (1 - a) p */
nb_status nb_ddpm_ema_update(nb_ddpm_dev *k, float *ema, const float *p, int64_t n, float a);
/* x[i] = N(0,1) from (key, base + i) */
nb_status nb_ddpm_randn(nb_ddpm_dev *k, float *x, int64_t n, uint32_t key, uint32_t base);
nb_status nb_ddpm_update(nb_ddpm_dev *k, float *x, const float *e, int64_t n, nb_ddpm_update_args *a);

#endif

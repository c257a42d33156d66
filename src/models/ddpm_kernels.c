/* The DDPM trainer's / sampler's elementwise steps (ddpm_internal.h): CUDA kernels compiled by
 * NVRTC on first use, one launch each and no host wait, beside CPU references with the same float
 * arithmetic. Noise comes from the counter-based generator of nn/common/nn_common.h (Box-Muller on
 * two PCG uniforms per value), so the CPU and the GPU draw the same numbers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "jit/cuda_files.h"
#include "nabla/nn_unet.h"
#include "models/ddpm_internal.h"
#include "nn/common/nn_common.h"

/* Argument blocks; the CUDA structs below have the same layouts. */
typedef struct q_args {
    const float *x0;
    float *eps, *xt;
    int64_t img, n;
    uint32_t key, base;
    float a[NB_DDPM_QMAX], b[NB_DDPM_QMAX];
} q_args;
typedef struct sq_args {
    const float *g;
    int64_t n;
    float *acc;
} sq_args;
typedef struct clip_args {
    float *g;
    int64_t n;
    float *st;
    const float *loss;
    int32_t slot;
    float clip;
} clip_args;
typedef struct ema_args {
    float *ema;
    const float *p;
    int64_t n;
    float a, b;
} ema_args;
typedef struct randn_args {
    float *x;
    int64_t n;
    uint32_t key, base;
} randn_args;

/* The kernels' file (src/models/kernels/ddpm.cu) takes the q-sample table size as QMAX. */
#define NB_DDPM_CU "src/models/kernels/ddpm.cu"
#define QMAX_STR "256"
_Static_assert(NB_DDPM_QMAX == 256, "QMAX_STR");
static const char *const nb_ddpm_defs[] = {"QMAX=" QMAX_STR, NULL};

static inline float gauss(uint32_t key, uint32_t c) {
    float u1 = ((float)(nb_nn_pcg((2u * c) ^ key) >> 8) + 0.5f) * (1.0f / 16777216.0f);
    float u2 = (float)(nb_nn_pcg((2u * c + 1u) ^ key) >> 8) * (1.0f / 16777216.0f);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.283185307f * u2);
}

nb_status nb_ddpm_dev_init(nb_ddpm_dev *k, nb_device *dev) {
    memset(k, 0, sizeof *k);
    if (!dev) return nb_error(NB_ERR_INVALID_ARG, "DDPM: the tape has no device");
    k->dev = dev;
    k->cuda = nb_device_get_kind(dev) == NB_DEVICE_CUDA;
    if (!k->cuda) return NB_OK;
    NB_TRY(nb_jit_cuda_kernel(dev, NB_DDPM_CU, nb_ddpm_defs, "nb_ddpm_qsample", &k->k_q));
    NB_TRY(nb_jit_cuda_kernel(dev, NB_DDPM_CU, nb_ddpm_defs, "nb_ddpm_sumsq", &k->k_sq));
    NB_TRY(nb_jit_cuda_kernel(dev, NB_DDPM_CU, nb_ddpm_defs, "nb_ddpm_clip", &k->k_clip));
    NB_TRY(nb_jit_cuda_kernel(dev, NB_DDPM_CU, nb_ddpm_defs, "nb_ddpm_ema", &k->k_ema));
    NB_TRY(nb_jit_cuda_kernel(dev, NB_DDPM_CU, nb_ddpm_defs, "nb_ddpm_randn", &k->k_randn));
    return nb_jit_cuda_kernel(dev, NB_DDPM_CU, nb_ddpm_defs, "nb_ddpm_update", &k->k_upd);
}

void nb_ddpm_dev_release(nb_ddpm_dev *k) {
    free(k->partial);
    k->partial = NULL;
    k->partial_cap = 0;
}

nb_status nb_ddpm_put(nb_ddpm_dev *k, float *dst, const float *src, int64_t count) {
    if (count <= 0) return NB_OK;
    if (k->cuda) return nb_memcpy_h2d(k->dev, dst, src, (size_t)count * sizeof(float));
    memcpy(dst, src, (size_t)count * sizeof(float));
    return NB_OK;
}

nb_status nb_ddpm_get(nb_ddpm_dev *k, float *dst, const float *src, int64_t count) {
    if (count <= 0) return NB_OK;
    if (k->cuda) return nb_memcpy_d2h(k->dev, dst, src, (size_t)count * sizeof(float));
    memcpy(dst, src, (size_t)count * sizeof(float));
    return NB_OK;
}

nb_status nb_ddpm_copy(nb_ddpm_dev *k, float *dst, const float *src, int64_t count) {
    if (count <= 0 || dst == src) return NB_OK;
    if (k->cuda) return nb_memcpy_d2d(k->dev, dst, src, (size_t)count * sizeof(float));
    memmove(dst, src, (size_t)count * sizeof(float));
    return NB_OK;
}

/* ---- CPU references (thread pool over element ranges) ------------------------------------- */

static void q_cpu(void *ctx, int64_t b, int64_t e) {
    const q_args *q = ctx;
    for (int64_t i = b; i < e; i++) {
        int s = (int)(i / q->img);
        float g = gauss(q->key, q->base + (uint32_t)i);
        q->eps[i] = g;
        q->xt[i] = q->a[s] * q->x0[i] + q->b[s] * g;
    }
}

nb_status nb_ddpm_qsample(nb_ddpm_dev *k, const float *x0, float *eps, float *xt, int64_t img, int n,
                          uint32_t key, const float *qa, const float *qb) {
    for (int i0 = 0; i0 < n; i0 += NB_DDPM_QMAX) {
        int m = n - i0 < NB_DDPM_QMAX ? n - i0 : NB_DDPM_QMAX;
        q_args a;
        a.x0 = x0 + (int64_t)i0 * img;
        a.eps = eps + (int64_t)i0 * img;
        a.xt = xt + (int64_t)i0 * img;
        a.img = img;
        a.n = (int64_t)m * img;
        a.key = key;
        a.base = (uint32_t)((int64_t)i0 * img);
        memcpy(a.a, qa + i0, sizeof(float) * (size_t)m);
        memcpy(a.b, qb + i0, sizeof(float) * (size_t)m);
        if (k->cuda) NB_TRY(nb_jit_launch_cuda(k->k_q, &a, sizeof a, a.n, NULL));
        else nb_nn_parallel(a.n, 16384, q_cpu, &a);
    }
    return NB_OK;
}

#define SQ_CHUNK 65536
typedef struct sq_cpu_ctx {
    const float *g;
    int64_t n;
    double *partial;
} sq_cpu_ctx;
static void sq_cpu(void *ctx, int64_t c0, int64_t c1) {
    const sq_cpu_ctx *c = ctx;
    for (int64_t ch = c0; ch < c1; ch++) {
        int64_t b = ch * SQ_CHUNK, e = b + SQ_CHUNK < c->n ? b + SQ_CHUNK : c->n;
        double s = 0;
        for (int64_t i = b; i < e; i++) s += (double)c->g[i] * c->g[i];
        c->partial[ch] = s;
    }
}

nb_status nb_ddpm_sumsq(nb_ddpm_dev *k, const float *g, int64_t n, float *acc) {
    if (k->cuda) {
        sq_args a = {g, n, acc};
        /* 8 blocks of 256 per SM stream the data; fewer blocks = fewer atomics on the one scalar */
        return nb_jit_launch_cuda_n(k->k_sq, &a, sizeof a, n, 8, NULL);
    }
    int64_t chunks = (n + SQ_CHUNK - 1) / SQ_CHUNK;
    if (chunks > k->partial_cap) {
        double *p = realloc(k->partial, sizeof(double) * (size_t)chunks);
        if (!p) return nb_error(NB_ERR_OUT_OF_MEMORY, "DDPM: out of host memory");
        k->partial = p;
        k->partial_cap = chunks;
    }
    sq_cpu_ctx c = {g, n, k->partial};
    nb_nn_parallel(chunks, 1, sq_cpu, &c);
    double s = 0; /* chunk order: the same sum for any thread count */
    for (int64_t i = 0; i < chunks; i++) s += k->partial[i];
    *acc += (float)s;
    return NB_OK;
}

typedef struct scale_ctx {
    float *g;
    float k;
} scale_ctx;
static void scale_cpu(void *ctx, int64_t b, int64_t e) {
    const scale_ctx *c = ctx;
    for (int64_t i = b; i < e; i++) c->g[i] *= c->k;
}

nb_status nb_ddpm_clip(nb_ddpm_dev *k, float *g, int64_t n, float *stats, int slot, float clip,
                       const float *loss) {
    if (k->cuda) {
        clip_args a = {g, n, stats, loss, slot, clip};
        return nb_jit_launch_cuda(k->k_clip, &a, sizeof a, n, NULL); /* blocks exit at once when k == 1 */
    }
    float norm = sqrtf(stats[slot]);
    float s = !isfinite(norm) ? 0.0f : (clip > 0.0f && norm > clip) ? clip / (norm + 1e-6f) : 1.0f;
    if (s != 1.0f) {
        scale_ctx c = {g, s};
        nb_nn_parallel(n, 65536, scale_cpu, &c);
    }
    stats[NB_DDPM_LOSS_SUM] += *loss;
    stats[NB_DDPM_LAST_NORM] = norm;
    stats[NB_DDPM_MAX_NORM] = fmaxf(stats[NB_DDPM_MAX_NORM], norm);
    stats[NB_DDPM_COUNT] += 1.0f;
    if (!isfinite(norm)) stats[NB_DDPM_BAD] = 1.0f;
    stats[1 - slot] = 0.0f;
    return NB_OK;
}

static void ema_cpu(void *ctx, int64_t b, int64_t e) {
    const ema_args *a = ctx;
    for (int64_t i = b; i < e; i++) a->ema[i] = a->a * a->ema[i] + a->b * a->p[i];
}

nb_status nb_ddpm_ema_update(nb_ddpm_dev *k, float *ema, const float *p, int64_t n, float a) {
    ema_args e = {ema, p, n, a, 1.0f - a};
    if (k->cuda) return nb_jit_launch_cuda(k->k_ema, &e, sizeof e, n, NULL);
    nb_nn_parallel(n, 65536, ema_cpu, &e);
    return NB_OK;
}

static void randn_cpu(void *ctx, int64_t b, int64_t e) {
    const randn_args *a = ctx;
    for (int64_t i = b; i < e; i++) a->x[i] = gauss(a->key, a->base + (uint32_t)i);
}

nb_status nb_ddpm_randn(nb_ddpm_dev *k, float *x, int64_t n, uint32_t key, uint32_t base) {
    randn_args a = {x, n, key, base};
    if (k->cuda) return nb_jit_launch_cuda(k->k_randn, &a, sizeof a, n, NULL);
    nb_nn_parallel(n, 16384, randn_cpu, &a);
    return NB_OK;
}

static void upd_cpu(void *ctx, int64_t b, int64_t e) {
    const nb_ddpm_update_args *a = ctx;
    for (int64_t i = b; i < e; i++) {
        float x = a->x[i], x0 = (x - a->s1a * a->e[i]) / a->sa;
        x0 = fminf(fmaxf(x0, -1.0f), 1.0f);
        if (a->mode == 0) x = a->sap * x0 + a->s1ap * ((x - a->sa * x0) / a->s1a);
        else {
            x = a->c0 * x0 + a->c1 * x;
            if (a->mode == 1) x += a->sigma * gauss(a->key, a->base + (uint32_t)i);
        }
        a->x[i] = x;
    }
}

nb_status nb_ddpm_update(nb_ddpm_dev *k, float *x, const float *e, int64_t n, nb_ddpm_update_args *a) {
    a->x = x;
    a->e = e;
    a->n = n;
    if (k->cuda) return nb_jit_launch_cuda(k->k_upd, a, sizeof *a, n, NULL);
    nb_nn_parallel(n, 16384, upd_cpu, a);
    return NB_OK;
}

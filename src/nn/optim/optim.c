/* Adam / AdamW over flat f32 buffers (nn_optim.h): one fused update per element. CPU: the .nb
 * step of lib/nn_ops.nb (nn_adamw through nb_nbops_adamw, one vectorized call per segment on the
 * thread pool; measured within 10% of the hand-written loop it replaced, docs/PERF.md). CUDA: a
 * hand-written kernel (one launch per step, segments of several buffers in one launch); both
 * take the bias corrections computed on the host as arguments. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "jit/cuda_files.h"
#include "nabla/alloc.h"
#include "nabla/nn_optim.h"
#include "nn/common/nn_common.h"
#include "nn/ops/nb_ops.h"

struct nb_adam {
    nb_device *dev;
    int64_t n;
    nb_adam_config cfg;
    int64_t t;
    nb_tensor *m, *v; /* f32[n] */
    nb_jit_kernel *k;
    nb_nbops *ops;    /* CPU: the .nb ops (nn_adamw), loaded on the first step */
    /* CPU: views of m and v per segment, kept while the segments' ranges stay the same, so a
     * steady-state step allocates nothing */
    nb_tensor *mseg[NB_ADAM_MAX_SEGMENTS], *vseg[NB_ADAM_MAX_SEGMENTS];
    int64_t seg0[NB_ADAM_MAX_SEGMENTS], seg1[NB_ADAM_MAX_SEGMENTS];
};

/* The kernel's argument block; the CUDA struct below has the same layout. */
typedef struct nb_adam_seg {
    float *p, *g;
    int64_t start, end; /* [start, end) in the state vector */
} nb_adam_seg;

typedef struct nb_adam_args {
    float *m, *v;
    int64_t n;
    float lr_bc1, inv_sqrt_bc2, beta1, beta2, eps, l2, lr_wd;
    int32_t zero, nseg;
    nb_adam_seg seg[NB_ADAM_MAX_SEGMENTS];
} nb_adam_args;

nb_adam_config nb_adam_config_default(void) {
    nb_adam_config c = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 0};
    return c;
}

nb_status nb_adam_create(nb_device *dev, int64_t n_params, const nb_adam_config *cfg, nb_adam **out) {
    if (!out) return nb_error(NB_ERR_INVALID_ARG, "nb_adam_create: out is NULL");
    *out = NULL;
    if (!dev) return nb_error(NB_ERR_INVALID_ARG, "nb_adam_create: dev is NULL");
    if (n_params < 1 || n_params > ((int64_t)1 << 40))
        return nb_error(NB_ERR_INVALID_ARG, "nb_adam_create: n_params = %lld (want >= 1)", (long long)n_params);
    nb_adam_config c = cfg ? *cfg : nb_adam_config_default();
    NB_TRY(nb_adamw_check_config("adam", &c));
    nb_adam *o = nb_calloc(sizeof *o, 16);
    if (!o) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_adam_create: out of host memory");
    o->dev = dev;
    o->n = n_params;
    o->cfg = c;
    nb_status s = nb_tensor_zeros(dev, NB_F32, 1, &n_params, &o->m);
    if (s == NB_OK) s = nb_tensor_zeros(dev, NB_F32, 1, &n_params, &o->v);
    if (s == NB_OK && nb_device_get_kind(dev) == NB_DEVICE_CUDA)
        s = nb_jit_cuda_kernel(dev, "src/nn/optim/kernels/adam.cu", NULL, "nb_adam_step", &o->k);
    if (s != NB_OK) {
        nb_adam_destroy(o);
        return s;
    }
    *out = o;
    return NB_OK;
}

void nb_adam_destroy(nb_adam *o) {
    if (!o) return;
    for (int i = 0; i < NB_ADAM_MAX_SEGMENTS; i++) nb_tensor_free(o->mseg[i]), nb_tensor_free(o->vseg[i]);
    nb_tensor_free(o->m);
    nb_tensor_free(o->v);
    nb_nbops_destroy(o->ops);
    nb_free(o, sizeof *o);
}

nb_status nb_adam_set_lr(nb_adam *o, float lr) {
    if (!o) return nb_error(NB_ERR_INVALID_ARG, "nb_adam_set_lr: opt is NULL");
    nb_adam_config c = o->cfg;
    c.lr = lr;
    NB_TRY(nb_adamw_check_config("adam", &c));
    o->cfg = c;
    return NB_OK;
}

int64_t nb_adam_steps(const nb_adam *o) { return o ? o->t : 0; }

nb_status nb_adam_reset(nb_adam *o) {
    if (!o) return nb_error(NB_ERR_INVALID_ARG, "nb_adam_reset: opt is NULL");
    o->t = 0;
    NB_TRY(nb_tensor_fill_bytes(o->m, 0));
    return nb_tensor_fill_bytes(o->v, 0);
}

nb_status nb_adam_step_multi(nb_adam *o, int n, nb_tensor *const *params, nb_tensor *const *grads,
                             int zero_grads) {
    const char *fn = "nb_adam_step";
    if (!o) return nb_error(NB_ERR_INVALID_ARG, "%s: opt is NULL", fn);
    if (n < 1 || n > NB_ADAM_MAX_SEGMENTS || !params || !grads)
        return nb_error(NB_ERR_INVALID_ARG, "%s: %d segments (want 1..%d, params and grads non-NULL)", fn,
                        n, NB_ADAM_MAX_SEGMENTS);
    nb_adam_args a;
    memset(&a, 0, sizeof a);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        char pn[32], gn[32];
        snprintf(pn, sizeof pn, "params[%d]", i);
        snprintf(gn, sizeof gn, "grads[%d]", i);
        NB_TRY(nb_nn_check_f32(fn, pn, params[i], o->dev, 1, -1, -1));
        int64_t len = nb_tensor_shape(params[i])[0];
        NB_TRY(nb_nn_check_f32(fn, gn, grads[i], o->dev, 1, len, -1));
        a.seg[i].p = nb_tensor_data(params[i]);
        a.seg[i].g = nb_tensor_data(grads[i]);
        a.seg[i].start = total;
        total += len;
        a.seg[i].end = total;
    }
    if (total != o->n)
        return nb_error(NB_ERR_SHAPE, "%s: the parameters hold %lld values but the optimizer was made for %lld",
                        fn, (long long)total, (long long)o->n);
    int cuda = nb_device_get_kind(o->dev) == NB_DEVICE_CUDA;
    if (!cuda && !o->ops) NB_TRY(nb_nbops_create(o->dev, &o->ops));
    o->t++;
    const nb_adam_config *c = &o->cfg;
    if (!cuda) { /* each segment with its slice of m and v */
        for (int i = 0; i < n; i++) {
            if (!o->mseg[i] || o->seg0[i] != a.seg[i].start || o->seg1[i] != a.seg[i].end) {
                nb_tensor_free(o->mseg[i]), nb_tensor_free(o->vseg[i]);
                o->mseg[i] = o->vseg[i] = NULL;
                NB_TRY(nb_tensor_slice(o->m, 0, a.seg[i].start, a.seg[i].end, 1, &o->mseg[i]));
                NB_TRY(nb_tensor_slice(o->v, 0, a.seg[i].start, a.seg[i].end, 1, &o->vseg[i]));
                o->seg0[i] = a.seg[i].start, o->seg1[i] = a.seg[i].end;
            }
            NB_TRY(nb_nbops_adamw(o->ops, c, o->t, params[i], grads[i], o->mseg[i], o->vseg[i], zero_grads));
        }
        return NB_OK;
    }
    nb_adamw_consts k;
    nb_adamw_consts_at(c, o->t, &k);
    a.m = nb_tensor_data(o->m);
    a.v = nb_tensor_data(o->v);
    a.n = total;
    a.lr_bc1 = k.lr_bc1;
    a.inv_sqrt_bc2 = k.inv_sqrt_bc2;
    a.beta1 = k.beta1;
    a.beta2 = k.beta2;
    a.eps = k.eps;
    a.l2 = k.l2;
    a.lr_wd = k.lr_wd;
    a.zero = zero_grads ? 1 : 0;
    a.nseg = n;
    return nb_jit_launch_cuda(o->k, &a, sizeof a, total, NULL);
}

nb_status nb_adam_step(nb_adam *o, nb_tensor *params, nb_tensor *grads, int zero_grads) {
    return nb_adam_step_multi(o, 1, &params, &grads, zero_grads);
}

/* Adam / AdamW over flat f32 buffers (nn_optim.h): one fused update per element, the .nb step of
 * lib/nn_ops.nb (nn_adamw, or nn_adamw_zero which also zeroes the gradient) on every device, run
 * per segment through a prepared call (nb_nbops_adamw_prepare) kept while the segment's range
 * stays the same: a steady-state step sets the constants and two arrays and launches, with no
 * allocation or host synchronisation. The bias corrections are computed on the host and travel
 * as the kernel's arguments. Measured against the hand-written CUDA kernel it replaced (one
 * launch for all segments) in docs/PERF.md: the .nb step at 0.91x its time on an H200. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "nabla/alloc.h"
#include "nabla/nn_optim.h"
#include "nn/common/nn_common.h"
#include "nn/ops/nb_ops.h"

/* One segment's slice of the state and its prepared step. */
typedef struct adam_seg {
    nb_tensor *m, *v;    /* views of the state over [start, end) */
    int64_t start, end;
    int zero;            /* the step zeroes the gradient */
    nb_prepared *p;
} adam_seg;

struct nb_adam {
    nb_device *dev;
    int64_t n;
    nb_adam_config cfg;
    int64_t t;
    nb_tensor *m, *v; /* f32[n] */
    nb_nbops *ops;    /* the .nb ops (nn_adamw), loaded on the first step */
    adam_seg seg[NB_ADAM_MAX_SEGMENTS];
};

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
    if (s != NB_OK) {
        nb_adam_destroy(o);
        return s;
    }
    *out = o;
    return NB_OK;
}

static void seg_drop(adam_seg *q) {
    nb_prepared_free(q->p);
    nb_tensor_free(q->m), nb_tensor_free(q->v);
    memset(q, 0, sizeof *q);
}

void nb_adam_destroy(nb_adam *o) {
    if (!o) return;
    for (int i = 0; i < NB_ADAM_MAX_SEGMENTS; i++) seg_drop(&o->seg[i]);
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

/* Segment i's prepared step over params / grads, made (again) when its range or zero_grads
 * changed. */
static nb_status seg_prepare(nb_adam *o, int i, int64_t start, int64_t end, int zero, nb_tensor *params,
                             nb_tensor *grads) {
    adam_seg *q = &o->seg[i];
    seg_drop(q);
    nb_status s = nb_tensor_slice(o->m, 0, start, end, 1, &q->m);
    if (!s) s = nb_tensor_slice(o->v, 0, start, end, 1, &q->v);
    if (!s) s = nb_nbops_adamw_prepare(o->ops, params, grads, q->m, q->v, zero, &q->p);
    if (s) {
        seg_drop(q);
        return s;
    }
    q->start = start, q->end = end, q->zero = zero;
    return NB_OK;
}

nb_status nb_adam_step_multi(nb_adam *o, int n, nb_tensor *const *params, nb_tensor *const *grads,
                             int zero_grads) {
    const char *fn = "nb_adam_step";
    if (!o) return nb_error(NB_ERR_INVALID_ARG, "%s: opt is NULL", fn);
    if (n < 1 || n > NB_ADAM_MAX_SEGMENTS || !params || !grads)
        return nb_error(NB_ERR_INVALID_ARG, "%s: %d segments (want 1..%d, params and grads non-NULL)", fn,
                        n, NB_ADAM_MAX_SEGMENTS);
    int64_t start[NB_ADAM_MAX_SEGMENTS], total = 0;
    for (int i = 0; i < n; i++) {
        char pn[32], gn[32];
        snprintf(pn, sizeof pn, "params[%d]", i);
        snprintf(gn, sizeof gn, "grads[%d]", i);
        NB_TRY(nb_nn_check_f32(fn, pn, params[i], o->dev, 1, -1, -1));
        int64_t len = nb_tensor_shape(params[i])[0];
        NB_TRY(nb_nn_check_f32(fn, gn, grads[i], o->dev, 1, len, -1));
        start[i] = total;
        total += len;
    }
    if (total != o->n)
        return nb_error(NB_ERR_SHAPE, "%s: the parameters hold %lld values but the optimizer was made for %lld",
                        fn, (long long)total, (long long)o->n);
    if (!o->ops) NB_TRY(nb_nbops_create(o->dev, &o->ops));
    o->t++;
    nb_adamw_consts k;
    nb_adamw_consts_at(&o->cfg, o->t, &k);
    int zero = zero_grads != 0;
    for (int i = 0; i < n; i++) {
        int64_t end = i + 1 < n ? start[i + 1] : total;
        adam_seg *q = &o->seg[i];
        if (!q->p || q->start != start[i] || q->end != end || q->zero != zero)
            NB_TRY(seg_prepare(o, i, start[i], end, zero, params[i], grads[i]));
        else if (nb_nbops_adamw_launch(q->p, &k, params[i], grads[i]) == NB_OK)
            continue;
        else /* other arrays the prepared kernel cannot take (an address of another alignment): bind anew */
            NB_TRY(seg_prepare(o, i, start[i], end, zero, params[i], grads[i]));
        NB_TRY(nb_nbops_adamw_launch(q->p, &k, NULL, NULL));
    }
    return NB_OK;
}

nb_status nb_adam_step(nb_adam *o, nb_tensor *params, nb_tensor *grads, int zero_grads) {
    return nb_adam_step_multi(o, 1, &params, &grads, zero_grads);
}

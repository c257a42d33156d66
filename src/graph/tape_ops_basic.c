/* Tape ops, CPU reference: linear, SiLU, add, per-channel add, channel concat, nearest
 * upsample ×2, average pool 2×2, MSE, sinusoidal timestep embedding. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph/tape_internal.h"

#define VAL(t, v) (&(t)->vals[(v)])

/* Fetches a value for an op argument, or returns the error from the calling function. */
#define GET(var, handle, what)                                                                 \
    nb_tval *var = nb_tape_val(t, (handle), (what));                                           \
    if (!var) return NB_ERR_INVALID_ARG

static nb_status nb_tape_check_args(nb_tape *t, nb_tvar *out, const char *fn) {
    if (!t || !out) return nb_error(NB_ERR_INVALID_ARG, "%s: tape or out is NULL", fn);
    return NB_OK;
}

/* ---- linear: x [N,F], w [O,F], b [O] -> [N,O] ----------------------------------------------- */

typedef struct {
    const float *x, *w, *b;
    float *y;
    int64_t F, O;
} lin_ctx;

static void lin_fwd_rows(void *c_, int64_t n0, int64_t n1) {
    lin_ctx *c = c_;
    for (int64_t n = n0; n < n1; n++)
        for (int64_t o = 0; o < c->O; o++) {
            float s = c->b ? c->b[o] : 0.0f;
            const float *xr = c->x + n * c->F, *wr = c->w + o * c->F;
            for (int64_t f = 0; f < c->F; f++) s += xr[f] * wr[f];
            c->y[n * c->O + o] = s;
        }
}

nb_status nb_op_linear_cpu_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]), *w = VAL(t, op->in[1]);
    lin_ctx c = {x->data, w->data, op->in[2] >= 0 ? VAL(t, op->in[2])->data : NULL,
                 VAL(t, op->out)->data, x->shape[1], w->shape[0]};
    nb_tape_parallel(x->shape[0], 16, lin_fwd_rows, &c);
    return NB_OK;
}

/* The gradients of x, w and b from dy [N,O] (the linear's output gradient, or LINEAR_RELU's
 * masked one). */
static nb_status linear_cpu_bwd_dy(nb_tape *t, const nb_top *op, const float *dy) {
    const nb_tval *x = VAL(t, op->in[0]), *w = VAL(t, op->in[1]);
    int64_t N = x->shape[0], F = x->shape[1], O = w->shape[0];
    float *dx, *dw, *db;
    nb_status s;
    if ((s = nb_tape_grad_buf(t, op->in[0], &dx)) || (s = nb_tape_grad_buf(t, op->in[1], &dw)) ||
        (s = nb_tape_grad_buf(t, op->in[2], &db)))
        return s;
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++) {
            float g = dy[n * O + o];
            if (db) db[o] += g;
            if (dx)
                for (int64_t f = 0; f < F; f++) dx[n * F + f] += g * w->data[o * F + f];
            if (dw)
                for (int64_t f = 0; f < F; f++) dw[o * F + f] += g * x->data[n * F + f];
        }
    return NB_OK;
}

nb_status nb_op_linear_cpu_bwd(nb_tape *t, const nb_top *op) {
    return linear_cpu_bwd_dy(t, op, VAL(t, op->out)->grad);
}

/* ---- linear + relu: y = relu(x w^T + b) (one op; see ops.def LINEAR_RELU) ------------------- */

static void relu_rows(void *c_, int64_t n0, int64_t n1) {
    lin_ctx *c = c_;
    for (int64_t i = n0 * c->O; i < n1 * c->O; i++) c->y[i] = c->y[i] < 0.0f ? 0.0f : c->y[i];
}

nb_status nb_op_linear_relu_cpu_fwd(nb_tape *t, nb_top *op) {
    nb_status s = nb_op_linear_cpu_fwd(t, op);
    if (s) return s;
    const nb_tval *x = VAL(t, op->in[0]), *w = VAL(t, op->in[1]);
    lin_ctx c = {NULL, NULL, NULL, VAL(t, op->out)->data, x->shape[1], w->shape[0]};
    nb_tape_parallel(x->shape[0], 64, relu_rows, &c);
    return NB_OK;
}

/* dz = dy where y > 0 (else 0), then the linear's backward with dz */
nb_status nb_op_linear_relu_cpu_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *y = VAL(t, op->out);
    float *dz = nb_tape_alloc_f32(t, y->count, 0);
    if (!dz) return NB_ERR_OUT_OF_MEMORY;
    nb_status s = nb_tape_relu_grad(t, dz, y->data, y->grad, y->count, NB_F32);
    return s ? s : linear_cpu_bwd_dy(t, op, dz);
}

static nb_status linear_op(nb_tape *t, int kind, nb_tvar x, nb_tvar w, nb_tvar b, nb_tvar *out,
                           const char *fn) {
    nb_status s = nb_tape_check_args(t, out, fn);
    if (s) return s;
    char wx[64], ww[64], wb[64];
    snprintf(wx, sizeof wx, "%s: x", fn), snprintf(ww, sizeof ww, "%s: w", fn);
    snprintf(wb, sizeof wb, "%s: b", fn);
    GET(xv, x, wx);
    GET(wv, w, ww);
    char b1[96], b2[96];
    if (xv->ndim != 2 || wv->ndim != 2 || xv->shape[1] != wv->shape[1])
        return nb_error(NB_ERR_SHAPE, "%s: x %s and w %s must be [N,F] and [O,F]", fn,
                        nb_tape_shape_str(xv, b1, sizeof b1), nb_tape_shape_str(wv, b2, sizeof b2));
    if (b >= 0) {
        GET(bv, b, wb);
        if (bv->ndim != 1 || bv->shape[0] != wv->shape[0])
            return nb_error(NB_ERR_SHAPE, "%s: b %s must be [O] = [%lld]", fn,
                            nb_tape_shape_str(bv, b1, sizeof b1), (long long)wv->shape[0]);
    }
    nb_top op = {.kind = kind, .nin = 3, .in = {x, w, b}};
    int64_t shape[2] = {xv->shape[0], wv->shape[0]};
    if ((s = nb_tape_op_out(t, &op, 2, shape))) return s;
    if ((s = nb_tape_record(t, &op))) return s;
    *out = op.out;
    return NB_OK;
}

nb_status nb_tape_linear(nb_tape *t, nb_tvar x, nb_tvar w, nb_tvar b, nb_tvar *out) {
    return linear_op(t, NB_TOP_LINEAR, x, w, b, out, "nb_tape_linear");
}

nb_status nb_tape_linear_relu(nb_tape *t, nb_tvar x, nb_tvar w, nb_tvar b, nb_tvar *out) {
    return linear_op(t, NB_TOP_LINEAR_RELU, x, w, b, out, "nb_tape_linear_relu");
}

/* ---- SiLU ----------------------------------------------------------------------------------- */

nb_status nb_op_silu_cpu_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    float *y = VAL(t, op->out)->data;
    for (int64_t i = 0; i < x->count; i++) {
        float v = x->data[i];
        y[i] = v / (1.0f + expf(-v));
    }
    return NB_OK;
}

nb_status nb_op_silu_cpu_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    const float *dy = VAL(t, op->out)->grad;
    float *dx;
    nb_status s = nb_tape_grad_buf(t, op->in[0], &dx);
    if (s || !dx) return s;
    for (int64_t i = 0; i < x->count; i++) {
        float v = x->data[i], sg = 1.0f / (1.0f + expf(-v));
        dx[i] += dy[i] * sg * (1.0f + v * (1.0f - sg));
    }
    return NB_OK;
}

nb_status nb_tape_unary_op(nb_tape *t, int kind, nb_tvar x, nb_tvar *out, const char *fn) {
    nb_status s = nb_tape_check_args(t, out, fn);
    if (s) return s;
    GET(xv, x, fn);
    nb_top op = {.kind = kind, .nin = 1, .in = {x, NB_TVAR_NONE, NB_TVAR_NONE}};
    int64_t shape[NB_TAPE_MAX_DIMS];
    memcpy(shape, xv->shape, sizeof shape);
    if ((s = nb_tape_op_out(t, &op, xv->ndim, shape))) return s;
    if ((s = nb_tape_record(t, &op))) return s;
    *out = op.out;
    return NB_OK;
}

nb_status nb_tape_silu(nb_tape *t, nb_tvar x, nb_tvar *out) {
    return nb_tape_unary_op(t, NB_TOP_SILU, x, out, "nb_tape_silu");
}

/* ---- add ------------------------------------------------------------------------------------ */

nb_status nb_op_add_cpu_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *a = VAL(t, op->in[0]), *b = VAL(t, op->in[1]);
    float *y = VAL(t, op->out)->data;
    for (int64_t i = 0; i < a->count; i++) y[i] = a->data[i] + b->data[i];
    return NB_OK;
}

nb_status nb_op_add_cpu_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *o = VAL(t, op->out);
    for (int k = 0; k < 2; k++) {
        float *d;
        nb_status s = nb_tape_grad_buf(t, op->in[k], &d);
        if (s) return s;
        if (d)
            for (int64_t i = 0; i < o->count; i++) d[i] += o->grad[i];
    }
    return NB_OK;
}

static int same_shape(const nb_tval *a, const nb_tval *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

nb_status nb_tape_add(nb_tape *t, nb_tvar a, nb_tvar b, nb_tvar *out) {
    nb_status s = nb_tape_check_args(t, out, "nb_tape_add");
    if (s) return s;
    GET(av, a, "nb_tape_add: a");
    GET(bv, b, "nb_tape_add: b");
    char b1[96], b2[96];
    if (!same_shape(av, bv))
        return nb_error(NB_ERR_SHAPE, "nb_tape_add: shapes %s and %s differ",
                        nb_tape_shape_str(av, b1, sizeof b1), nb_tape_shape_str(bv, b2, sizeof b2));
    nb_top op = {.kind = NB_TOP_ADD, .nin = 2, .in = {a, b, NB_TVAR_NONE}};
    if ((s = nb_tape_op_out(t, &op, av->ndim, av->shape))) return s;
    if ((s = nb_tape_record(t, &op))) return s;
    *out = op.out;
    return NB_OK;
}

/* ---- per-channel add: x [N,C,H,W] + c [N,C] ------------------------------------------------- */

nb_status nb_op_add_channel_cpu_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]), *c = VAL(t, op->in[1]);
    float *y = VAL(t, op->out)->data;
    int64_t NC = x->shape[0] * x->shape[1], HW = x->shape[2] * x->shape[3];
    for (int64_t i = 0; i < NC; i++)
        for (int64_t j = 0; j < HW; j++) y[i * HW + j] = x->data[i * HW + j] + c->data[i];
    return NB_OK;
}

nb_status nb_op_add_channel_cpu_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    const float *dy = VAL(t, op->out)->grad;
    int64_t NC = x->shape[0] * x->shape[1], HW = x->shape[2] * x->shape[3];
    float *dx, *dc;
    nb_status s;
    if ((s = nb_tape_grad_buf(t, op->in[0], &dx)) || (s = nb_tape_grad_buf(t, op->in[1], &dc)))
        return s;
    for (int64_t i = 0; i < NC; i++) {
        float acc = 0.0f;
        for (int64_t j = 0; j < HW; j++) {
            if (dx) dx[i * HW + j] += dy[i * HW + j];
            acc += dy[i * HW + j];
        }
        if (dc) dc[i] += acc;
    }
    return NB_OK;
}

nb_status nb_tape_add_channel(nb_tape *t, nb_tvar x, nb_tvar c, nb_tvar *out) {
    nb_status s = nb_tape_check_args(t, out, "nb_tape_add_channel");
    if (s) return s;
    GET(xv, x, "nb_tape_add_channel: x");
    GET(cv, c, "nb_tape_add_channel: c");
    char b1[96], b2[96];
    if (xv->ndim != 4 || cv->ndim != 2 || cv->shape[0] != xv->shape[0] ||
        cv->shape[1] != xv->shape[1])
        return nb_error(NB_ERR_SHAPE, "nb_tape_add_channel: x %s and c %s must be [N,C,H,W] and [N,C]",
                        nb_tape_shape_str(xv, b1, sizeof b1), nb_tape_shape_str(cv, b2, sizeof b2));
    nb_top op = {.kind = NB_TOP_ADD_CHANNEL, .nin = 2, .in = {x, c, NB_TVAR_NONE}};
    if ((s = nb_tape_op_out(t, &op, 4, xv->shape))) return s;
    if ((s = nb_tape_record(t, &op))) return s;
    *out = op.out;
    return NB_OK;
}

/* ---- channel concat: a [N,Ca,H,W], b [N,Cb,H,W] -> [N,Ca+Cb,H,W] ---------------------------- */

nb_status nb_op_concat_cpu_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *a = VAL(t, op->in[0]), *b = VAL(t, op->in[1]);
    float *y = VAL(t, op->out)->data;
    int64_t N = a->shape[0], sa = a->count / N, sb = b->count / N;
    for (int64_t n = 0; n < N; n++) {
        memcpy(y + n * (sa + sb), a->data + n * sa, (size_t)sa * sizeof(float));
        memcpy(y + n * (sa + sb) + sa, b->data + n * sb, (size_t)sb * sizeof(float));
    }
    return NB_OK;
}

nb_status nb_op_concat_cpu_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *a = VAL(t, op->in[0]), *b = VAL(t, op->in[1]);
    const float *dy = VAL(t, op->out)->grad;
    int64_t N = a->shape[0], sa = a->count / N, sb = b->count / N;
    float *da, *db;
    nb_status s;
    if ((s = nb_tape_grad_buf(t, op->in[0], &da)) || (s = nb_tape_grad_buf(t, op->in[1], &db)))
        return s;
    for (int64_t n = 0; n < N; n++) {
        if (da)
            for (int64_t i = 0; i < sa; i++) da[n * sa + i] += dy[n * (sa + sb) + i];
        if (db)
            for (int64_t i = 0; i < sb; i++) db[n * sb + i] += dy[n * (sa + sb) + sa + i];
    }
    return NB_OK;
}

nb_status nb_tape_concat(nb_tape *t, nb_tvar a, nb_tvar b, nb_tvar *out) {
    nb_status s = nb_tape_check_args(t, out, "nb_tape_concat");
    if (s) return s;
    GET(av, a, "nb_tape_concat: a");
    GET(bv, b, "nb_tape_concat: b");
    char b1[96], b2[96];
    if (av->ndim != 4 || bv->ndim != 4 || av->shape[0] != bv->shape[0] ||
        av->shape[2] != bv->shape[2] || av->shape[3] != bv->shape[3])
        return nb_error(NB_ERR_SHAPE,
                        "nb_tape_concat: a %s and b %s must be [N,Ca,H,W] and [N,Cb,H,W]",
                        nb_tape_shape_str(av, b1, sizeof b1), nb_tape_shape_str(bv, b2, sizeof b2));
    nb_top op = {.kind = NB_TOP_CONCAT, .nin = 2, .in = {a, b, NB_TVAR_NONE}};
    int64_t shape[4] = {av->shape[0], av->shape[1] + bv->shape[1], av->shape[2], av->shape[3]};
    if ((s = nb_tape_op_out(t, &op, 4, shape))) return s;
    if ((s = nb_tape_record(t, &op))) return s;
    *out = op.out;
    return NB_OK;
}

/* ---- nearest upsample ×2 and average pool 2×2 ----------------------------------------------- */

nb_status nb_op_upsample2x_cpu_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    float *y = VAL(t, op->out)->data;
    int64_t NC = x->shape[0] * x->shape[1], H = x->shape[2], W = x->shape[3];
    for (int64_t p = 0; p < NC; p++)
        for (int64_t i = 0; i < 2 * H; i++)
            for (int64_t j = 0; j < 2 * W; j++)
                y[(p * 2 * H + i) * 2 * W + j] = x->data[(p * H + i / 2) * W + j / 2];
    return NB_OK;
}

nb_status nb_op_upsample2x_cpu_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    const float *dy = VAL(t, op->out)->grad;
    float *dx;
    nb_status s = nb_tape_grad_buf(t, op->in[0], &dx);
    if (s || !dx) return s;
    int64_t NC = x->shape[0] * x->shape[1], H = x->shape[2], W = x->shape[3];
    for (int64_t p = 0; p < NC; p++)
        for (int64_t i = 0; i < 2 * H; i++)
            for (int64_t j = 0; j < 2 * W; j++)
                dx[(p * H + i / 2) * W + j / 2] += dy[(p * 2 * H + i) * 2 * W + j];
    return NB_OK;
}

nb_status nb_op_avgpool2x_cpu_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    float *y = VAL(t, op->out)->data;
    int64_t NC = x->shape[0] * x->shape[1], H = x->shape[2], W = x->shape[3];
    const float *d = x->data;
    for (int64_t p = 0; p < NC; p++)
        for (int64_t i = 0; i < H / 2; i++)
            for (int64_t j = 0; j < W / 2; j++) {
                const float *r = d + (p * H + 2 * i) * W + 2 * j;
                y[(p * (H / 2) + i) * (W / 2) + j] = 0.25f * (r[0] + r[1] + r[W] + r[W + 1]);
            }
    return NB_OK;
}

nb_status nb_op_avgpool2x_cpu_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    const float *dy = VAL(t, op->out)->grad;
    float *dx;
    nb_status s = nb_tape_grad_buf(t, op->in[0], &dx);
    if (s || !dx) return s;
    int64_t NC = x->shape[0] * x->shape[1], H = x->shape[2], W = x->shape[3];
    for (int64_t p = 0; p < NC; p++)
        for (int64_t i = 0; i < H / 2; i++)
            for (int64_t j = 0; j < W / 2; j++) {
                float g = 0.25f * dy[(p * (H / 2) + i) * (W / 2) + j];
                float *r = dx + (p * H + 2 * i) * W + 2 * j;
                r[0] += g, r[1] += g, r[W] += g, r[W + 1] += g;
            }
    return NB_OK;
}

nb_status nb_tape_upsample2x(nb_tape *t, nb_tvar x, nb_tvar *out) {
    nb_status s = nb_tape_check_args(t, out, "nb_tape_upsample2x");
    if (s) return s;
    GET(xv, x, "nb_tape_upsample2x: x");
    char b1[96];
    if (xv->ndim != 4)
        return nb_error(NB_ERR_SHAPE, "nb_tape_upsample2x: x %s must be [N,C,H,W]",
                        nb_tape_shape_str(xv, b1, sizeof b1));
    nb_top op = {.kind = NB_TOP_UPSAMPLE2X, .nin = 1, .in = {x, NB_TVAR_NONE, NB_TVAR_NONE}};
    int64_t shape[4] = {xv->shape[0], xv->shape[1], 2 * xv->shape[2], 2 * xv->shape[3]};
    if ((s = nb_tape_op_out(t, &op, 4, shape))) return s;
    if ((s = nb_tape_record(t, &op))) return s;
    *out = op.out;
    return NB_OK;
}

nb_status nb_tape_avgpool2x(nb_tape *t, nb_tvar x, nb_tvar *out) {
    nb_status s = nb_tape_check_args(t, out, "nb_tape_avgpool2x");
    if (s) return s;
    GET(xv, x, "nb_tape_avgpool2x: x");
    char b1[96];
    if (xv->ndim != 4 || xv->shape[2] % 2 || xv->shape[3] % 2)
        return nb_error(NB_ERR_SHAPE, "nb_tape_avgpool2x: x %s must be [N,C,H,W] with H, W even",
                        nb_tape_shape_str(xv, b1, sizeof b1));
    nb_top op = {.kind = NB_TOP_AVGPOOL2X, .nin = 1, .in = {x, NB_TVAR_NONE, NB_TVAR_NONE}};
    int64_t shape[4] = {xv->shape[0], xv->shape[1], xv->shape[2] / 2, xv->shape[3] / 2};
    if ((s = nb_tape_op_out(t, &op, 4, shape))) return s;
    if ((s = nb_tape_record(t, &op))) return s;
    *out = op.out;
    return NB_OK;
}

/* ---- MSE: mean((p - q)^2) -> [1] ------------------------------------------------------------ */

nb_status nb_op_mse_cpu_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *p = VAL(t, op->in[0]), *q = VAL(t, op->in[1]);
    double acc = 0.0;
    for (int64_t i = 0; i < p->count; i++) {
        double d = (double)p->data[i] - (double)q->data[i];
        acc += d * d;
    }
    VAL(t, op->out)->data[0] = (float)(acc / (double)p->count);
    return NB_OK;
}

nb_status nb_op_mse_cpu_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *p = VAL(t, op->in[0]), *q = VAL(t, op->in[1]);
    float g = VAL(t, op->out)->grad[0] * 2.0f / (float)p->count;
    float *dp, *dq;
    nb_status s;
    if ((s = nb_tape_grad_buf(t, op->in[0], &dp)) || (s = nb_tape_grad_buf(t, op->in[1], &dq)))
        return s;
    for (int64_t i = 0; i < p->count; i++) {
        float d = g * (p->data[i] - q->data[i]);
        if (dp) dp[i] += d;
        if (dq) dq[i] -= d;
    }
    return NB_OK;
}

nb_status nb_tape_mse(nb_tape *t, nb_tvar pred, nb_tvar target, nb_tvar *out) {
    nb_status s = nb_tape_check_args(t, out, "nb_tape_mse");
    if (s) return s;
    GET(pv, pred, "nb_tape_mse: pred");
    GET(qv, target, "nb_tape_mse: target");
    char b1[96], b2[96];
    if (!same_shape(pv, qv))
        return nb_error(NB_ERR_SHAPE, "nb_tape_mse: pred %s and target %s differ in shape",
                        nb_tape_shape_str(pv, b1, sizeof b1), nb_tape_shape_str(qv, b2, sizeof b2));
    nb_top op = {.kind = NB_TOP_MSE, .nin = 2, .in = {pred, target, NB_TVAR_NONE}};
    int64_t one = 1;
    if ((s = nb_tape_op_out(t, &op, 1, &one))) return s;
    if ((s = nb_tape_record(t, &op))) return s;
    *out = op.out;
    return NB_OK;
}

/* ---- sinusoidal timestep embedding (no gradient, not recorded) ------------------------------ */

nb_status nb_tape_timestep_embedding(nb_tape *t, int64_t n, const float *timesteps, int dim,
                                     float max_period, nb_tvar *out) {
    nb_status s = nb_tape_check_args(t, out, "nb_tape_timestep_embedding");
    if (s) return s;
    if (!timesteps) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_timestep_embedding: timesteps is NULL");
    if (n < 1) return nb_error(NB_ERR_SHAPE, "nb_tape_timestep_embedding: n = %lld must be >= 1", (long long)n);
    if (dim < 2 || dim % 2)
        return nb_error(NB_ERR_SHAPE, "nb_tape_timestep_embedding: dim = %d must be even and >= 2", dim);
    if (!(max_period > 1.0f))
        return nb_error(NB_ERR_INVALID_ARG, "nb_tape_timestep_embedding: max_period must be > 1");
    int64_t shape[2] = {n, dim};
    if ((s = nb_tape_new_value(t, 2, shape, 0, out))) return s;
    if (nb_tape_on_cuda(t) && n <= NB_TAPE_TEMB_MAX) /* a kernel; no copy, no wait */
        return nb_tape_cuda_timestep_embedding(t, VAL(t, *out)->data, n, timesteps, dim, max_period);
    /* built on the host (no gradient); uploaded on CUDA tapes */
    float *y = nb_tape_on_cuda(t) ? nb_tape_scratch(t, n * dim) : VAL(t, *out)->data;
    if (!y) return NB_ERR_OUT_OF_MEMORY;
    int half = dim / 2;
    for (int64_t i = 0; i < n; i++)
        for (int k = 0; k < half; k++) {
            double f = exp(-log((double)max_period) * (double)k / (double)half);
            double a = (double)timesteps[i] * f;
            y[i * dim + k] = (float)cos(a);
            y[i * dim + half + k] = (float)sin(a);
        }
    float *dst = VAL(t, *out)->data;
    return y == dst ? NB_OK : nb_tape_upload(t, dst, y, n * dim);
}

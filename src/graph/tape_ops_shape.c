/* Tape ops, CPU reference: layout changes (reshape, transpose of the last two dims, channel
 * slice). Each copies into a new arena value, so every value stays dense row-major. */
#include <string.h>

#include "graph/op_rows.h"

#define VAL(t, v) (&(t)->vals[(v)])

/* ---- reshape -------------------------------------------------------------------------------- */

nb_status nb_op_reshape_cpu_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    memcpy(VAL(t, op->out)->data, x->data, (size_t)x->count * sizeof(float));
    return NB_OK;
}

nb_status nb_op_reshape_cpu_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *o = VAL(t, op->out);
    float *dx;
    nb_status s = nb_tape_grad_buf(t, op->in[0], &dx);
    if (s || !dx) return s;
    for (int64_t i = 0; i < o->count; i++) dx[i] += o->grad[i];
    return NB_OK;
}

nb_status nb_tape_reshape(nb_tape *t, nb_tvar x, int ndim, const int64_t *shape, nb_tvar *out) {
    if (!t || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_reshape: tape or out is NULL");
    nb_tval *xv = nb_tape_val(t, x, "nb_tape_reshape: x");
    if (!xv) return NB_ERR_INVALID_ARG;
    if (ndim < 1 || ndim > NB_TAPE_MAX_DIMS || !shape)
        return nb_error(NB_ERR_SHAPE, "nb_tape_reshape: ndim %d is not in 1..%d", ndim, NB_TAPE_MAX_DIMS);
    int64_t c = 1;
    for (int i = 0; i < ndim; i++) c *= shape[i] > 0 ? shape[i] : 0;
    char b1[96];
    if (c != xv->count)
        return nb_error(NB_ERR_SHAPE, "nb_tape_reshape: x %s has %lld elements, the new shape %lld",
                        nb_tape_shape_str(xv, b1, sizeof b1), (long long)xv->count, (long long)c);
    nb_top op = {.kind = NB_TOP_RESHAPE, .nin = 1, .in = {x, NB_TVAR_NONE, NB_TVAR_NONE}};
    nb_status s;
    if ((s = nb_tape_op_out(t, &op, ndim, shape))) return s;
    if ((s = nb_tape_record(t, &op))) return s;
    *out = op.out;
    return NB_OK;
}

/* ---- transpose of the last two dims --------------------------------------------------------- */

static void tr_dims(const nb_tval *x, int64_t *B, int64_t *R, int64_t *C) {
    *R = x->shape[x->ndim - 2], *C = x->shape[x->ndim - 1];
    *B = x->count / (*R * *C);
}

nb_status nb_op_transpose_cpu_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    float *y = VAL(t, op->out)->data;
    int64_t B, R, C;
    tr_dims(x, &B, &R, &C);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < C; j++) y[(b * C + j) * R + i] = x->data[(b * R + i) * C + j];
    return NB_OK;
}

nb_status nb_op_transpose_cpu_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    const float *dy = VAL(t, op->out)->grad;
    float *dx;
    nb_status s = nb_tape_grad_buf(t, op->in[0], &dx);
    if (s || !dx) return s;
    int64_t B, R, C;
    tr_dims(x, &B, &R, &C);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < C; j++) dx[(b * R + i) * C + j] += dy[(b * C + j) * R + i];
    return NB_OK;
}

nb_status nb_tape_transpose(nb_tape *t, nb_tvar x, nb_tvar *out) {
    if (!t || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_transpose: tape or out is NULL");
    nb_tval *xv = nb_tape_val(t, x, "nb_tape_transpose: x");
    if (!xv) return NB_ERR_INVALID_ARG;
    char b1[96];
    if (xv->ndim < 2)
        return nb_error(NB_ERR_SHAPE, "nb_tape_transpose: x %s needs at least 2 dims",
                        nb_tape_shape_str(xv, b1, sizeof b1));
    int nd = xv->ndim;
    int64_t shape[NB_TAPE_MAX_DIMS];
    memcpy(shape, xv->shape, sizeof shape);
    shape[nd - 2] = xv->shape[nd - 1];
    shape[nd - 1] = xv->shape[nd - 2];
    nb_top op = {.kind = NB_TOP_TRANSPOSE, .nin = 1, .in = {x, NB_TVAR_NONE, NB_TVAR_NONE}};
    nb_status s;
    if ((s = nb_tape_op_out(t, &op, nd, shape))) return s;
    if ((s = nb_tape_record(t, &op))) return s;
    *out = op.out;
    return NB_OK;
}

/* ---- channel slice: ip[0] = c0 ---------------------------------------------------------------- */

nb_status nb_op_slice_channels_cpu_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]), *o = VAL(t, op->out);
    int64_t N = x->shape[0], S = x->count / (N * x->shape[1]);
    int64_t sx = x->count / N, so = o->count / N;
    for (int64_t n = 0; n < N; n++)
        memcpy(o->data + n * so, x->data + n * sx + op->ip[0] * S, (size_t)so * sizeof(float));
    return NB_OK;
}

nb_status nb_op_slice_channels_cpu_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]), *o = VAL(t, op->out);
    float *dx;
    nb_status s = nb_tape_grad_buf(t, op->in[0], &dx);
    if (s || !dx) return s;
    int64_t N = x->shape[0], S = x->count / (N * x->shape[1]);
    int64_t sx = x->count / N, so = o->count / N;
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < so; i++) dx[n * sx + op->ip[0] * S + i] += o->grad[n * so + i];
    return NB_OK;
}

nb_status nb_tape_slice_channels(nb_tape *t, nb_tvar x, int64_t c0, int64_t count, nb_tvar *out) {
    if (!t || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_slice_channels: tape or out is NULL");
    nb_tval *xv = nb_tape_val(t, x, "nb_tape_slice_channels: x");
    if (!xv) return NB_ERR_INVALID_ARG;
    char b1[96];
    nb_tape_shape_str(xv, b1, sizeof b1);
    if (xv->ndim < 2)
        return nb_error(NB_ERR_SHAPE, "nb_tape_slice_channels: x %s must be [N,C,...]", b1);
    if (c0 < 0 || count < 1 || c0 + count > xv->shape[1] || c0 > INT32_MAX)
        return nb_error(NB_ERR_SHAPE, "nb_tape_slice_channels: channels [%lld, %lld) are outside x %s",
                        (long long)c0, (long long)(c0 + count), b1);
    int64_t shape[NB_TAPE_MAX_DIMS];
    memcpy(shape, xv->shape, sizeof shape);
    shape[1] = count;
    nb_top op = {.kind = NB_TOP_SLICE_CHANNELS, .nin = 1, .in = {x, NB_TVAR_NONE, NB_TVAR_NONE},
                 .ip = {(int)c0}};
    nb_status s;
    if ((s = nb_tape_op_out(t, &op, xv->ndim, shape))) return s;
    if ((s = nb_tape_record(t, &op))) return s;
    *out = op.out;
    return NB_OK;
}

/* Tape ops, CPU reference: ReLU and the row softmax (ops.def RELU, SOFTMAX; CUDA rows in
 * tape_cuda_basic.c), their builders, the ReLU mask helper nb_tape_relu_grad and the fusion
 * rule nb_top_fuse_linear_relu (LINEAR -> RELU into one LINEAR_RELU op, whose rows sit beside
 * the linear's: tape_ops_basic.c, src/nn/conv/tape_cuda_conv.c). */
#include <math.h>
#include <string.h>

#include "graph/tape_internal.h"

#define VAL(t, v) (&(t)->vals[(v)])

/* ReLU that lets NaN through (as torch.relu does): v < 0 is false for NaN. */
static inline float relu1(float v) { return v < 0.0f ? 0.0f : v; }

/* ---- ReLU ----------------------------------------------------------------------------------- */

nb_status nb_op_relu_cpu_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    float *y = VAL(t, op->out)->data;
    for (int64_t i = 0; i < x->count; i++) y[i] = relu1(x->data[i]);
    return NB_OK;
}

nb_status nb_op_relu_cpu_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    const float *dy = VAL(t, op->out)->grad;
    float *dx;
    nb_status s = nb_tape_grad_buf(t, op->in[0], &dx);
    if (s || !dx) return s;
    for (int64_t i = 0; i < x->count; i++)
        if (x->data[i] > 0.0f) dx[i] += dy[i];
    return NB_OK;
}

nb_status nb_tape_relu(nb_tape *t, nb_tvar x, nb_tvar *out) {
    return nb_tape_unary_op(t, NB_TOP_RELU, x, out, "nb_tape_relu");
}

nb_status nb_tape_relu_grad(nb_tape *t, void *dz, const void *y, const void *dy, int64_t count,
                            nb_dtype dt) {
    if (!t || (count > 0 && (!dz || !y || !dy)))
        return nb_error(NB_ERR_INVALID_ARG, "nb_tape_relu_grad: NULL tape or buffer");
    if (nb_tape_on_cuda(t)) return nb_tape_cuda_relu_grad(t, dz, y, dy, count, dt);
    if (dt != NB_F32)
        return nb_error(NB_ERR_INTERNAL, "nb_tape_relu_grad: %s on a CPU tape (f32 only)",
                        nb_dtype_name(dt));
    const float *yf = y, *gf = dy;
    float *zf = dz;
    for (int64_t i = 0; i < count; i++) zf[i] = yf[i] > 0.0f ? gf[i] : 0.0f;
    return NB_OK;
}

/* ---- softmax over the last dim: x [..., D] as rows of D ------------------------------------- */

typedef struct {
    const float *x, *dy;
    float *y, *dx;
    int64_t D;
} sm_ctx;

static void sm_fwd_rows(void *c_, int64_t r0, int64_t r1) {
    const sm_ctx *c = c_;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = c->x + r * c->D;
        float *y = c->y + r * c->D, m = -INFINITY, sum = 0.0f;
        for (int64_t j = 0; j < c->D; j++) m = fmaxf(m, x[j]);
        for (int64_t j = 0; j < c->D; j++) sum += y[j] = expf(x[j] - m);
        float inv = 1.0f / sum;
        for (int64_t j = 0; j < c->D; j++) y[j] *= inv;
    }
}

/* dx += y * (dy - sum_j dy_j y_j), per row */
static void sm_bwd_rows(void *c_, int64_t r0, int64_t r1) {
    const sm_ctx *c = c_;
    for (int64_t r = r0; r < r1; r++) {
        const float *y = c->y + r * c->D, *dy = c->dy + r * c->D;
        float *dx = c->dx + r * c->D, dot = 0.0f;
        for (int64_t j = 0; j < c->D; j++) dot += dy[j] * y[j];
        for (int64_t j = 0; j < c->D; j++) dx[j] += y[j] * (dy[j] - dot);
    }
}

static int64_t sm_rows(const nb_tval *x, int64_t *D) {
    *D = x->shape[x->ndim - 1];
    return *D ? x->count / *D : 0;
}

nb_status nb_op_softmax_cpu_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]);
    sm_ctx c = {.x = x->data, .y = VAL(t, op->out)->data};
    int64_t rows = sm_rows(x, &c.D);
    nb_tape_parallel(rows, 8, sm_fwd_rows, &c);
    return NB_OK;
}

nb_status nb_op_softmax_cpu_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]), *o = VAL(t, op->out);
    float *dx;
    nb_status s = nb_tape_grad_buf(t, op->in[0], &dx);
    if (s || !dx) return s;
    sm_ctx c = {.y = o->data, .dy = o->grad, .dx = dx};
    int64_t rows = sm_rows(x, &c.D);
    nb_tape_parallel(rows, 8, sm_bwd_rows, &c);
    return NB_OK;
}

nb_status nb_tape_softmax(nb_tape *t, nb_tvar x, nb_tvar *out) {
    if (t && out) {
        nb_tval *xv = nb_tape_val(t, x, "nb_tape_softmax");
        if (!xv) return NB_ERR_INVALID_ARG;
        char b[96];
        if (xv->ndim < 1 || xv->shape[xv->ndim - 1] < 1)
            return nb_error(NB_ERR_SHAPE, "nb_tape_softmax: x %s has no last dim to normalise",
                            nb_tape_shape_str(xv, b, sizeof b));
    }
    return nb_tape_unary_op(t, NB_TOP_SOFTMAX, x, out, "nb_tape_softmax");
}

/* ---- fusion rule for the compile pass -------------------------------------------------------- */

int nb_top_fuse_linear_relu(const nb_top *lin, const nb_top *relu, nb_top *out) {
    if (!lin || !relu || !out || lin->kind != NB_TOP_LINEAR || relu->kind != NB_TOP_RELU ||
        relu->in[0] != lin->out)
        return 0;
    nb_top f = *lin;
    f.kind = NB_TOP_LINEAR_RELU;
    f.out = relu->out;
    f.saved[0] = f.saved[1] = NULL; /* the forward plans its own (the CUDA weight cache) */
    f.ip[2] = 0;
    *out = f;
    return 1;
}

/* Tape ops, CPU reference: conv2d (NCHW, kernel 1 or 3, stride 1 or 2, zero padding, bias).
 * Threaded over independent output slices. (Group norm: nn/norm/tape_ops_norm.c.) */
#include <string.h>

#include "graph/op_rows.h"

#define VAL(t, v) (&(t)->vals[(v)])
#define GET(var, handle, what)                                                                 \
    nb_tval *var = nb_tape_val(t, (handle), (what));                                           \
    if (!var) return NB_ERR_INVALID_ARG

/* ---- conv2d --------------------------------------------------------------------------------- */

typedef struct {
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw, *db;
    int64_t N, C, H, W, O, K, OH, OW, stride, pad;
} conv_ctx;

/* y[n,o] for (n,o) in [i0, i1) of N*O */
static void conv_fwd_range(void *c_, int64_t i0, int64_t i1) {
    const conv_ctx *c = c_;
    for (int64_t idx = i0; idx < i1; idx++) {
        int64_t n = idx / c->O, o = idx % c->O;
        float *y = c->y + idx * c->OH * c->OW;
        for (int64_t p = 0; p < c->OH * c->OW; p++) y[p] = c->b ? c->b[o] : 0.0f;
        for (int64_t ch = 0; ch < c->C; ch++) {
            const float *x = c->x + (n * c->C + ch) * c->H * c->W;
            const float *w = c->w + (o * c->C + ch) * c->K * c->K;
            for (int64_t ki = 0; ki < c->K; ki++)
                for (int64_t kj = 0; kj < c->K; kj++) {
                    float wv = w[ki * c->K + kj];
                    for (int64_t i = 0; i < c->OH; i++) {
                        int64_t ii = i * c->stride - c->pad + ki;
                        if (ii < 0 || ii >= c->H) continue;
                        for (int64_t j = 0; j < c->OW; j++) {
                            int64_t jj = j * c->stride - c->pad + kj;
                            if (jj < 0 || jj >= c->W) continue;
                            y[i * c->OW + j] += wv * x[ii * c->W + jj];
                        }
                    }
                }
        }
    }
}

/* dx[n] for n in [n0, n1) */
static void conv_bwd_dx(void *c_, int64_t n0, int64_t n1) {
    const conv_ctx *c = c_;
    for (int64_t n = n0; n < n1; n++)
        for (int64_t o = 0; o < c->O; o++) {
            const float *dy = c->dy + (n * c->O + o) * c->OH * c->OW;
            for (int64_t ch = 0; ch < c->C; ch++) {
                float *dx = c->dx + (n * c->C + ch) * c->H * c->W;
                const float *w = c->w + (o * c->C + ch) * c->K * c->K;
                for (int64_t ki = 0; ki < c->K; ki++)
                    for (int64_t kj = 0; kj < c->K; kj++) {
                        float wv = w[ki * c->K + kj];
                        for (int64_t i = 0; i < c->OH; i++) {
                            int64_t ii = i * c->stride - c->pad + ki;
                            if (ii < 0 || ii >= c->H) continue;
                            for (int64_t j = 0; j < c->OW; j++) {
                                int64_t jj = j * c->stride - c->pad + kj;
                                if (jj < 0 || jj >= c->W) continue;
                                dx[ii * c->W + jj] += wv * dy[i * c->OW + j];
                            }
                        }
                    }
            }
        }
}

/* dw[o], db[o] for o in [o0, o1) */
static void conv_bwd_dw(void *c_, int64_t o0, int64_t o1) {
    const conv_ctx *c = c_;
    for (int64_t o = o0; o < o1; o++)
        for (int64_t n = 0; n < c->N; n++) {
            const float *dy = c->dy + (n * c->O + o) * c->OH * c->OW;
            if (c->db) {
                float acc = 0.0f;
                for (int64_t p = 0; p < c->OH * c->OW; p++) acc += dy[p];
                c->db[o] += acc;
            }
            if (!c->dw) continue;
            for (int64_t ch = 0; ch < c->C; ch++) {
                const float *x = c->x + (n * c->C + ch) * c->H * c->W;
                float *dw = c->dw + (o * c->C + ch) * c->K * c->K;
                for (int64_t ki = 0; ki < c->K; ki++)
                    for (int64_t kj = 0; kj < c->K; kj++) {
                        float acc = 0.0f;
                        for (int64_t i = 0; i < c->OH; i++) {
                            int64_t ii = i * c->stride - c->pad + ki;
                            if (ii < 0 || ii >= c->H) continue;
                            for (int64_t j = 0; j < c->OW; j++) {
                                int64_t jj = j * c->stride - c->pad + kj;
                                if (jj < 0 || jj >= c->W) continue;
                                acc += dy[i * c->OW + j] * x[ii * c->W + jj];
                            }
                        }
                        dw[ki * c->K + kj] += acc;
                    }
            }
        }
}

static void conv_fill(nb_tape *t, const nb_top *op, conv_ctx *c) {
    const nb_tval *x = VAL(t, op->in[0]), *w = VAL(t, op->in[1]), *y = VAL(t, op->out);
    memset(c, 0, sizeof *c);
    c->x = x->data;
    c->w = w->data;
    c->b = op->in[2] >= 0 ? VAL(t, op->in[2])->data : NULL;
    c->y = y->data;
    c->dy = y->grad;
    c->N = x->shape[0], c->C = x->shape[1], c->H = x->shape[2], c->W = x->shape[3];
    c->O = w->shape[0], c->K = w->shape[2], c->OH = y->shape[2], c->OW = y->shape[3];
    c->stride = op->ip[0], c->pad = op->ip[1];
}

nb_status nb_op_conv2d_cpu_fwd(nb_tape *t, nb_top *op) {
    conv_ctx c;
    conv_fill(t, op, &c);
    nb_tape_parallel(c.N * c.O, 1, conv_fwd_range, &c);
    return NB_OK;
}

nb_status nb_op_conv2d_cpu_bwd(nb_tape *t, const nb_top *op) {
    conv_ctx c;
    conv_fill(t, op, &c);
    nb_status s;
    if ((s = nb_tape_grad_buf(t, op->in[0], &c.dx)) || (s = nb_tape_grad_buf(t, op->in[1], &c.dw)) ||
        (s = nb_tape_grad_buf(t, op->in[2], &c.db)))
        return s;
    if (c.dx) nb_tape_parallel(c.N, 1, conv_bwd_dx, &c);
    if (c.dw || c.db) nb_tape_parallel(c.O, 1, conv_bwd_dw, &c);
    return NB_OK;
}

nb_status nb_tape_conv2d(nb_tape *t, nb_tvar x, nb_tvar w, nb_tvar b, int stride, int pad,
                         nb_tvar *out) {
    if (!t || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_conv2d: tape or out is NULL");
    GET(xv, x, "nb_tape_conv2d: x");
    GET(wv, w, "nb_tape_conv2d: w");
    char b1[96], b2[96];
    nb_tape_shape_str(xv, b1, sizeof b1);
    nb_tape_shape_str(wv, b2, sizeof b2);
    if (xv->ndim != 4 || wv->ndim != 4)
        return nb_error(NB_ERR_SHAPE, "nb_tape_conv2d: x %s and w %s must be [N,C,H,W] and [O,C,K,K]",
                        b1, b2);
    if (wv->shape[1] != xv->shape[1])
        return nb_error(NB_ERR_SHAPE, "nb_tape_conv2d: w %s has %lld input channels, x %s has %lld",
                        b2, (long long)wv->shape[1], b1, (long long)xv->shape[1]);
    int64_t K = wv->shape[2];
    if (wv->shape[3] != K || (K != 1 && K != 3))
        return nb_error(NB_ERR_UNSUPPORTED, "nb_tape_conv2d: kernel %s: only 1x1 and 3x3 are supported", b2);
    if (stride != 1 && stride != 2)
        return nb_error(NB_ERR_UNSUPPORTED, "nb_tape_conv2d: stride %d (1 or 2 supported)", stride);
    if (pad < 0 || pad > 8) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_conv2d: pad %d not in 0..8", pad);
    int64_t OH = (xv->shape[2] + 2 * pad - K) / stride + 1, OW = (xv->shape[3] + 2 * pad - K) / stride + 1;
    if (xv->shape[2] + 2 * pad < K || xv->shape[3] + 2 * pad < K)
        return nb_error(NB_ERR_SHAPE, "nb_tape_conv2d: x %s with pad %d is smaller than the kernel",
                        b1, pad);
    if (b >= 0) {
        GET(bv, b, "nb_tape_conv2d: b");
        if (bv->ndim != 1 || bv->shape[0] != wv->shape[0])
            return nb_error(NB_ERR_SHAPE, "nb_tape_conv2d: b %s must be [O] = [%lld]",
                            nb_tape_shape_str(bv, b1, sizeof b1), (long long)wv->shape[0]);
    }
    nb_top op = {.kind = NB_TOP_CONV2D, .nin = 3, .in = {x, w, b}, .ip = {stride, pad}};
    int64_t shape[4] = {xv->shape[0], wv->shape[0], OH, OW};
    nb_status s;
    if ((s = nb_tape_op_out(t, &op, 4, shape))) return s;
    if ((s = nb_tape_record(t, &op))) return s;
    *out = op.out;
    return NB_OK;
}

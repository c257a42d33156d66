/* CUDA rows of the tape's GEMM ops: linear, linear + relu and conv2d (CPU reference: tape_ops_basic.c,
 * tape_ops_conv.c). The math lives in conv_cuda.c (cuBLAS, im2col) and conv_cuda_igemm.c
 * (implicit-GEMM tensor-core kernels); these rows unpack the op's values. The input's gradient
 * comes from nb_tape_grad_buf_w: on its first contribution the data-gradient GEMM / kernel
 * stores (no zero fill, no read); weight and bias gradients always accumulate. Activations (x,
 * y and their gradients) are passed in their storage dtype (nb_tval.dtype: bf16 on a bf16-storage
 * tape, where these rows read bf16 inputs and write bf16 outputs: NB_TOPF_IN_BF16 |
 * NB_TOPF_OUT_BF16); weights and biases are f32 always. The forward keeps the weights in the
 * layout its backward's data gradient reads (nb_conv_wcache: flipped for the implicit-GEMM
 * kernels, or a bf16 copy for cuBLAS) in the op's arena memory, written by the launch that
 * prepares the forward's own weights: the backward prepares nothing. */
#include "core/util.h"
#include "nn/conv/conv_cuda.h"
#include "graph/op_rows.h"

#define VAL(t, v) (&(t)->vals[(v)])

/* Weights kept from the forward for the backward (nb_conv_wcache, conv_cuda.h): bytes of arena
 * memory in op->saved[0] (NULL when nothing is kept), the layout's key in op->ip[2] (conv2d
 * uses ip[0..1], linear none). */
static nb_status wcache_alloc(nb_tape *t, nb_top *op, size_t bytes, nb_conv_wcache *wc) {
    op->saved[0] = NULL, op->ip[2] = 0;
    wc->buf = NULL, wc->key = 0;
    if (!bytes) return NB_OK;
    wc->buf = nb_tape_alloc_f32(t, (int64_t)((bytes + 3) / 4), 0);
    return wc->buf ? NB_OK : NB_ERR_OUT_OF_MEMORY;
}
static void wcache_keep(nb_top *op, const nb_conv_wcache *wc) {
    op->saved[0] = wc->key ? (float *)wc->buf : NULL;
    op->ip[2] = wc->key;
}
static nb_conv_wcache wcache_of(const nb_top *op) {
    nb_conv_wcache wc = {op->saved[0], op->saved[0] ? op->ip[2] : 0};
    return wc;
}

/* x [N,F], w [O,F], b [O] -> y [N,O] (relu: y = relu(x w^T + b), LINEAR_RELU) */
static nb_status linear_fwd(nb_tape *t, nb_top *op, int relu) {
    const nb_tval *x = VAL(t, op->in[0]), *w = VAL(t, op->in[1]), *y = VAL(t, op->out);
    const float *b = op->in[2] >= 0 ? VAL(t, op->in[2])->data : NULL;
    nb_conv_wcache wc;
    /* (nothing to keep where x wants no gradient: the backward has no data gradient) */
    NB_TRY(wcache_alloc(t, op,
                        x->needs_grad ? nb_cuda_linear_wcache_bytes(t->precision, x->shape[1],
                                                                    w->shape[0], x->dtype, y->dtype)
                                      : 0,
                        &wc));
    nb_status s = (relu ? nb_cuda_linear_relu_forward_wc : nb_cuda_linear_forward_wc)(
        t->dev, t->precision, x->shape[0], x->shape[1], w->shape[0], x->dtype, y->dtype, x->data,
        w->data, b, y->data, &wc);
    wcache_keep(op, &wc);
    return s;
}

/* dy: the output's gradient (LINEAR_RELU: masked by the relu) in y's dtype */
static nb_status linear_bwd(nb_tape *t, const nb_top *op, const void *dy) {
    const nb_tval *x = VAL(t, op->in[0]), *w = VAL(t, op->in[1]), *y = VAL(t, op->out);
    float *dx, *dw, *db;
    int store;
    nb_status s;
    /* w and b first: should x share a buffer with them (linear(x, x)), it is then no first
     * contribution and x's gradient accumulates */
    if ((s = nb_tape_grad_buf(t, op->in[1], &dw)) || (s = nb_tape_grad_buf(t, op->in[2], &db)) ||
        (s = nb_tape_grad_buf_w(t, op->in[0], &dx, &store)))
        return s;
    nb_conv_wcache wc = wcache_of(op);
    return nb_cuda_linear_backward_wc(t->dev, t->precision, x->shape[0], x->shape[1], w->shape[0],
                                      x->dtype, y->dtype, x->data, w->data, dy, dx, dw, db,
                                      store, &wc);
}

nb_status nb_op_linear_cuda_fwd(nb_tape *t, nb_top *op) { return linear_fwd(t, op, 0); }

nb_status nb_op_linear_cuda_bwd(nb_tape *t, const nb_top *op) {
    return linear_bwd(t, op, VAL(t, op->out)->grad);
}

nb_status nb_op_linear_relu_cuda_fwd(nb_tape *t, nb_top *op) { return linear_fwd(t, op, 1); }

/* dz = dy where y > 0 (arena memory in y's dtype), then the linear's backward with dz */
nb_status nb_op_linear_relu_cuda_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *y = VAL(t, op->out);
    void *dz = nb_tape_alloc_dt(t, y->count, y->dtype, 0);
    if (!dz) return NB_ERR_OUT_OF_MEMORY;
    NB_TRY(nb_tape_relu_grad(t, dz, y->data, y->grad, y->count, y->dtype));
    return linear_bwd(t, op, dz);
}

static nb_status conv_cuda_dims(nb_tape *t, const nb_top *op, nb_conv_dims *d) {
    const nb_tval *x = VAL(t, op->in[0]), *w = VAL(t, op->in[1]);
    return nb_conv_dims_make(d, x->shape[0], x->shape[1], x->shape[2], x->shape[3], w->shape[0],
                             w->shape[2], op->ip[0], op->ip[1]);
}

/* x [N,C,H,W], w [O,C,K,K], b [O] -> y [N,O,OH,OW] */
nb_status nb_op_conv2d_cuda_fwd(nb_tape *t, nb_top *op) {
    nb_conv_dims d;
    NB_TRY(conv_cuda_dims(t, op, &d));
    const float *b = op->in[2] >= 0 ? VAL(t, op->in[2])->data : NULL;
    const nb_tval *x = VAL(t, op->in[0]), *y = VAL(t, op->out);
    nb_conv_wcache wc;
    NB_TRY(wcache_alloc(t, op,
                        x->needs_grad ? nb_cuda_conv2d_wcache_bytes(t->precision, &d, x->dtype, y->dtype)
                                      : 0,
                        &wc));
    nb_status s = nb_cuda_conv2d_forward_wc(t->dev, t->precision, &d, x->dtype, y->dtype, x->data,
                                            VAL(t, op->in[1])->data, b, y->data, &wc);
    wcache_keep(op, &wc);
    return s;
}

nb_status nb_op_conv2d_cuda_bwd(nb_tape *t, const nb_top *op) {
    nb_conv_dims d;
    NB_TRY(conv_cuda_dims(t, op, &d));
    float *dx, *dw, *db;
    int store;
    nb_status s;
    /* w and b first: should x share a buffer with them (linear(x, x)), it is then no first
     * contribution and x's gradient accumulates */
    if ((s = nb_tape_grad_buf(t, op->in[1], &dw)) || (s = nb_tape_grad_buf(t, op->in[2], &db)) ||
        (s = nb_tape_grad_buf_w(t, op->in[0], &dx, &store)))
        return s;
    const nb_tval *x = VAL(t, op->in[0]), *y = VAL(t, op->out);
    nb_conv_wcache wc = wcache_of(op);
    return nb_cuda_conv2d_backward_wc(t->dev, t->precision, &d, x->dtype, y->dtype, x->data,
                                      VAL(t, op->in[1])->data, y->grad, dx, dw, db, store, &wc);
}

/* CUDA rows of the tape's GEMM ops: linear and conv2d (CPU reference: tape_ops_basic.c,
 * tape_ops_conv.c). The math lives in conv_cuda.c (cuBLAS, im2col) and conv_cuda_igemm.c
 * (implicit-GEMM tensor-core kernels); these rows unpack the op's values. The input's gradient
 * comes from nb_tape_grad_buf_w: on its first contribution the data-gradient GEMM / kernel
 * stores (no zero fill, no read); weight and bias gradients always accumulate. Activations (x,
 * y and their gradients) are passed in their storage dtype (nb_tval.dtype: bf16 on a bf16-storage
 * tape, where these rows read bf16 inputs and write bf16 outputs: NB_TOPF_IN_BF16 |
 * NB_TOPF_OUT_BF16); weights and biases are f32 always. */
#include "core/util.h"
#include "nn/conv_cuda.h"
#include "nn/tape_internal.h"

#define VAL(t, v) (&(t)->vals[(v)])

/* x [N,F], w [O,F], b [O] -> y [N,O] */
static nb_status linear_cuda_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]), *w = VAL(t, op->in[1]), *y = VAL(t, op->out);
    const float *b = op->in[2] >= 0 ? VAL(t, op->in[2])->data : NULL;
    return nb_cuda_linear_forward(t->dev, t->precision, x->shape[0], x->shape[1], w->shape[0],
                                  x->dtype, y->dtype, x->data, w->data, b, y->data);
}

static nb_status linear_cuda_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *x = VAL(t, op->in[0]), *w = VAL(t, op->in[1]), *y = VAL(t, op->out);
    float *dx, *dw, *db;
    int store;
    nb_status s;
    /* w and b first: should x share a buffer with them (linear(x, x)), it is then no first
     * contribution and x's gradient accumulates */
    if ((s = nb_tape_grad_buf(t, op->in[1], &dw)) || (s = nb_tape_grad_buf(t, op->in[2], &db)) ||
        (s = nb_tape_grad_buf_w(t, op->in[0], &dx, &store)))
        return s;
    return nb_cuda_linear_backward(t->dev, t->precision, x->shape[0], x->shape[1], w->shape[0],
                                   x->dtype, y->dtype, x->data, w->data, y->grad, dx, dw, db,
                                   store);
}

static nb_status conv_cuda_dims(nb_tape *t, const nb_top *op, nb_conv_dims *d) {
    const nb_tval *x = VAL(t, op->in[0]), *w = VAL(t, op->in[1]);
    return nb_conv_dims_make(d, x->shape[0], x->shape[1], x->shape[2], x->shape[3], w->shape[0],
                             w->shape[2], op->ip[0], op->ip[1]);
}

/* x [N,C,H,W], w [O,C,K,K], b [O] -> y [N,O,OH,OW] */
static nb_status conv_cuda_fwd(nb_tape *t, nb_top *op) {
    nb_conv_dims d;
    NB_TRY(conv_cuda_dims(t, op, &d));
    const float *b = op->in[2] >= 0 ? VAL(t, op->in[2])->data : NULL;
    const nb_tval *x = VAL(t, op->in[0]), *y = VAL(t, op->out);
    return nb_cuda_conv2d_forward(t->dev, t->precision, &d, x->dtype, y->dtype, x->data,
                                  VAL(t, op->in[1])->data, b, y->data);
}

static nb_status conv_cuda_bwd(nb_tape *t, const nb_top *op) {
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
    return nb_cuda_conv2d_backward(t->dev, t->precision, &d, x->dtype, y->dtype, x->data,
                                   VAL(t, op->in[1])->data, y->grad, dx, dw, db, store);
}

const nb_top_cuda_impl nb_top_linear_cuda = {linear_cuda_fwd, linear_cuda_bwd,
                                             NB_TOPF_IN_BF16 | NB_TOPF_OUT_BF16};
const nb_top_cuda_impl nb_top_conv2d_cuda = {conv_cuda_fwd, conv_cuda_bwd,
                                             NB_TOPF_IN_BF16 | NB_TOPF_OUT_BF16};

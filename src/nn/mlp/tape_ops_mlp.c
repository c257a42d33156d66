/* The fused MLP as a row of the graph layer's op table (ops.def: MLP): the tape builder
 * nb_tape_mlp (nn_mlp.h) and the row's forward and backward, which run the mlp module's own
 * implementation (nb_mlp_forward / nb_mlp_backward: the CPU reference or the tensor-core kernels,
 * after the mlp's device) over the tape's memory. One autodiff story: the tape drives the MLP's
 * hand-written backward like any other op's.
 *
 *   op->in[0] = x [B, n_in] f32, op->in[1] = w [n_params] f32 (the weights, nn_mlp.h's layout),
 *   op->out = y [B, n_out] f32, op->obj = the nb_mlp (configuration, f32 parameter and gradient
 *   buffers, the workspace holding one training forward's saved activations). */
#include <string.h>

#include "graph/op_rows.h"
#include "nabla/nn_mlp.h"

/* x [rows, cols] f32 at p (tape memory) as a tensor on the mlp's device (NULL p: *out = NULL). */
static nb_status wrap2(nb_mlp *m, float *p, int64_t rows, int64_t cols, nb_tensor **out) {
    *out = NULL;
    if (!p) return NB_OK;
    return nb_tensor_wrap(nb_mlp_device(m), NB_F32, 2, (int64_t[]){rows, cols}, NULL, p, out);
}

/* Forward: w -> the mlp's parameter buffer, then the mlp's forward (training when y needs a
 * gradient, so that the backward has its saved activations). */
static nb_status mlp_fwd(nb_tape *t, nb_top *op) {
    nb_mlp *m = op->obj;
    const nb_mlp_config *c = nb_mlp_get_config(m);
    const nb_tval *x = &t->vals[op->in[0]], *w = &t->vals[op->in[1]];
    nb_tval *y = &t->vals[op->out];
    nb_status s = nb_tape_copy(t, nb_tensor_data(nb_mlp_params(m)), w->data, w->count);
    nb_tensor *xt = NULL, *yt = NULL;
    if (!s) s = wrap2(m, x->data, x->shape[0], c->n_in, &xt);
    if (!s) s = wrap2(m, y->data, x->shape[0], c->n_out, &yt);
    if (!s) s = nb_mlp_forward(m, xt, yt, y->needs_grad);
    nb_tensor_free(xt);
    nb_tensor_free(yt);
    return s;
}

/* Backward: the mlp's backward writes dL/dx (into x's gradient when this is its first
 * contribution, else into arena scratch that is then added) and OVERWRITES the mlp's gradient
 * buffer, which is added into w's gradient. */
static nb_status mlp_bwd(nb_tape *t, const nb_top *op) {
    nb_mlp *m = op->obj;
    const nb_mlp_config *c = nb_mlp_get_config(m);
    const nb_tval *x = &t->vals[op->in[0]], *y = &t->vals[op->out];
    int64_t B = x->shape[0];
    float *gx = NULL, *gw = NULL, *dx = NULL;
    nb_status s = nb_tape_grad_dst(t, op->in[0], &gx, &dx);
    if (!s) s = nb_tape_grad_buf(t, op->in[1], &gw);
    if (s || (!gx && !gw)) return s;
    nb_tensor *dyt = NULL, *dxt = NULL;
    s = wrap2(m, y->grad, B, c->n_out, &dyt);
    if (!s) s = wrap2(m, dx, B, c->n_in, &dxt);
    if (!s) s = nb_mlp_backward(m, dyt, dxt);
    nb_tensor_free(dyt);
    nb_tensor_free(dxt);
    if (!s) s = nb_tape_grad_finish(t, gx, dx, x->count);
    if (!s && gw) s = nb_tape_accumulate(t, gw, nb_tensor_data(nb_mlp_grads(m)), nb_mlp_n_params(m));
    return s;
}

/* The CPU and CUDA rows are the same functions: the mlp module dispatches on its device (the
 * builder checked that it is the tape's) to its CPU reference or its fused CUDA kernels. */
nb_status nb_op_mlp_cpu_fwd(nb_tape *t, nb_top *op) { return mlp_fwd(t, op); }
nb_status nb_op_mlp_cpu_bwd(nb_tape *t, const nb_top *op) { return mlp_bwd(t, op); }
nb_status nb_op_mlp_cuda_fwd(nb_tape *t, nb_top *op) { return mlp_fwd(t, op); }
nb_status nb_op_mlp_cuda_bwd(nb_tape *t, const nb_top *op) { return mlp_bwd(t, op); }

/* 1 when module device d is the tape's device (a CPU tape has none or a CPU one). */
static int same_device(const nb_tape *t, nb_device *d) {
    if (!nb_tape_on_cuda(t)) return nb_device_get_kind(d) == NB_DEVICE_CPU;
    return d == t->dev;
}

nb_status nb_tape_mlp(nb_tape *t, nb_mlp *mlp, nb_tvar x, nb_tvar w, nb_tvar *out) {
    const char *fn = "nb_tape_mlp";
    if (!t || !mlp || !out) return nb_error(NB_ERR_INVALID_ARG, "%s: tape, mlp or out is NULL", fn);
    const nb_mlp_config *c = nb_mlp_get_config(mlp);
    nb_tval *xv = nb_tape_val(t, x, "nb_tape_mlp: x");
    if (!xv) return NB_ERR_INVALID_ARG;
    nb_tval *wv = nb_tape_val(t, w, "nb_tape_mlp: w");
    if (!wv) return NB_ERR_INVALID_ARG;
    char b1[96];
    if (xv->ndim != 2 || xv->shape[1] != c->n_in || xv->shape[0] < 1)
        return nb_error(NB_ERR_SHAPE, "%s: x is %s, expected [B, n_in] = [B, %d] with B >= 1", fn,
                        nb_tape_shape_str(xv, b1, sizeof b1), c->n_in);
    if (wv->count != nb_mlp_n_params(mlp))
        return nb_error(NB_ERR_SHAPE, "%s: w is %s (%lld floats), the mlp has %lld parameters", fn,
                        nb_tape_shape_str(wv, b1, sizeof b1), (long long)wv->count,
                        (long long)nb_mlp_n_params(mlp));
    if (wv->dtype != NB_F32)
        return nb_error(NB_ERR_DTYPE, "%s: w must be f32 (the mlp's master weights)", fn);
    if (!same_device(t, nb_mlp_device(mlp)))
        return nb_error(NB_ERR_INVALID_ARG, "%s: the mlp lives on %s, the tape on %s", fn,
                        nb_device_name(nb_mlp_device(mlp)),
                        nb_tape_on_cuda(t) ? nb_device_name(t->dev) : "cpu");
    nb_top op = {.kind = NB_TOP_MLP, .nin = 2, .in = {x, w, NB_TVAR_NONE}, .obj = mlp};
    nb_status s = nb_tape_op_out(t, &op, 2, (int64_t[]){xv->shape[0], c->n_out});
    if (s) return s;
    /* the mlp's workspace holds one training forward: a second op of the same mlp that needs a
     * gradient would overwrite what the first one's backward reads */
    if (t->vals[op.out].needs_grad)
        for (int32_t i = 0; i < t->n_ops; i++)
            if (t->ops[i].kind == NB_TOP_MLP && t->ops[i].obj == mlp &&
                t->vals[t->ops[i].out].needs_grad)
                return nb_error(NB_ERR_UNSUPPORTED,
                                "%s: this mlp already has an op that needs a gradient on the tape "
                                "(op %d); its workspace holds one training forward per step "
                                "(use a second nb_mlp, or nb_tape_reset first)", fn, (int)i);
    if ((s = nb_tape_record(t, &op))) return s;
    *out = op.out;
    return NB_OK;
}

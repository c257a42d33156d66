/* The input encodings (dense grid, hash grid, frequency) as a row of the graph layer's op table
 * (ops.def: ENCODING): the tape builder nb_tape_encoding (nn_encoding.h) and the row's forward
 * and backward, which run the encoding module's own implementation (nb_encoding_forward /
 * nb_encoding_backward: plain C on the thread pool or the CUDA kernels, after the encoding's
 * device) over the tape's memory.
 *
 *   op->in[0] = x [B, n_dims] f32, op->in[1] = params [n_params] f32 (NB_TVAR_NONE: frequency),
 *   op->out = feat [B, F] f32, op->obj = the nb_encoding (configuration only: it holds no
 *   parameters and no saved state, so one encoding may serve any number of ops). */
#include "graph/op_rows.h"
#include "nabla/nn_encoding.h"

/* count floats at p (tape memory) as a tensor [rows, cols] (cols 0: [rows]) on the encoding's
 * device; NULL p: *out = NULL. */
static nb_status wrap(nb_encoding *e, float *p, int64_t rows, int64_t cols, nb_tensor **out) {
    *out = NULL;
    if (!p) return NB_OK;
    return nb_tensor_wrap(nb_encoding_device(e), NB_F32, cols ? 2 : 1, (int64_t[]){rows, cols}, NULL, p, out);
}

static nb_status enc_fwd(nb_tape *t, nb_top *op) {
    nb_encoding *e = op->obj;
    const nb_tval *x = &t->vals[op->in[0]];
    float *pp = op->in[1] >= 0 ? t->vals[op->in[1]].data : NULL;
    int64_t B = x->shape[0];
    nb_tensor *xt = NULL, *pt = NULL, *ft = NULL;
    nb_status s = wrap(e, x->data, B, nb_encoding_n_input_dims(e), &xt);
    if (!s) s = wrap(e, pp, nb_encoding_n_params(e), 0, &pt);
    if (!s) s = wrap(e, t->vals[op->out].data, B, nb_encoding_n_output_dims(e), &ft);
    if (!s) s = nb_encoding_forward(e, pt, xt, ft);
    nb_tensor_free(xt);
    nb_tensor_free(pt);
    nb_tensor_free(ft);
    return s;
}

/* The encoding's backward ADDS dL/dparams (straight into the parameters' gradient) and
 * OVERWRITES dL/dx (into x's gradient when this is its first contribution, else into arena
 * scratch that is then added). */
static nb_status enc_bwd(nb_tape *t, const nb_top *op) {
    nb_encoding *e = op->obj;
    const nb_tval *x = &t->vals[op->in[0]];
    int64_t B = x->shape[0];
    float *gx = NULL, *gp = NULL, *dx = NULL;
    nb_status s = nb_tape_grad_dst(t, op->in[0], &gx, &dx);
    if (!s) s = nb_tape_grad_buf(t, op->in[1], &gp);
    if (s || (!gx && !gp)) return s;
    float *pp = op->in[1] >= 0 ? t->vals[op->in[1]].data : NULL;
    int64_t np = nb_encoding_n_params(e);
    nb_tensor *xt = NULL, *pt = NULL, *dft = NULL, *gpt = NULL, *dxt = NULL;
    s = wrap(e, x->data, B, nb_encoding_n_input_dims(e), &xt);
    if (!s) s = wrap(e, pp, np, 0, &pt);
    if (!s) s = wrap(e, t->vals[op->out].grad, B, nb_encoding_n_output_dims(e), &dft);
    if (!s) s = wrap(e, gp, np, 0, &gpt);
    if (!s) s = wrap(e, dx, B, nb_encoding_n_input_dims(e), &dxt);
    if (!s) s = nb_encoding_backward(e, pt, xt, dft, gpt, dxt);
    nb_tensor_free(xt);
    nb_tensor_free(pt);
    nb_tensor_free(dft);
    nb_tensor_free(gpt);
    nb_tensor_free(dxt);
    if (!s) s = nb_tape_grad_finish(t, gx, dx, x->count);
    return s;
}

/* The CPU and CUDA rows are the same functions: the encoding module dispatches on its device
 * (the builder checked that it is the tape's) to its C or CUDA implementation. */
nb_status nb_op_encoding_cpu_fwd(nb_tape *t, nb_top *op) { return enc_fwd(t, op); }
nb_status nb_op_encoding_cpu_bwd(nb_tape *t, const nb_top *op) { return enc_bwd(t, op); }
nb_status nb_op_encoding_cuda_fwd(nb_tape *t, nb_top *op) { return enc_fwd(t, op); }
nb_status nb_op_encoding_cuda_bwd(nb_tape *t, const nb_top *op) { return enc_bwd(t, op); }

nb_status nb_tape_encoding(nb_tape *t, nb_encoding *enc, nb_tvar x, nb_tvar params, nb_tvar *out) {
    const char *fn = "nb_tape_encoding";
    if (!t || !enc || !out)
        return nb_error(NB_ERR_INVALID_ARG, "%s: tape, encoding or out is NULL", fn);
    nb_tval *xv = nb_tape_val(t, x, "nb_tape_encoding: x");
    if (!xv) return NB_ERR_INVALID_ARG;
    int D = nb_encoding_n_input_dims(enc);
    int64_t np = nb_encoding_n_params(enc);
    char b1[96];
    if (xv->ndim != 2 || xv->shape[1] != D || xv->shape[0] < 1)
        return nb_error(NB_ERR_SHAPE, "%s: x is %s, expected [B, n_dims] = [B, %d] with B >= 1", fn,
                        nb_tape_shape_str(xv, b1, sizeof b1), D);
    if (np == 0 && params != NB_TVAR_NONE)
        return nb_error(NB_ERR_INVALID_ARG,
                        "%s: this encoding has no parameters: pass params = NB_TVAR_NONE", fn);
    if (np > 0) {
        nb_tval *pv = nb_tape_val(t, params, "nb_tape_encoding: params");
        if (!pv) return NB_ERR_INVALID_ARG;
        if (pv->count != np)
            return nb_error(NB_ERR_SHAPE, "%s: params is %s (%lld floats), the encoding has %lld",
                            fn, nb_tape_shape_str(pv, b1, sizeof b1), (long long)pv->count,
                            (long long)np);
        if (pv->dtype != NB_F32) return nb_error(NB_ERR_DTYPE, "%s: params must be f32", fn);
    }
    nb_device *d = nb_encoding_device(enc);
    nb_status s;
    int same = nb_tape_on_cuda(t) ? d == t->dev : nb_device_get_kind(d) == NB_DEVICE_CPU;
    if (!same)
        return nb_error(NB_ERR_INVALID_ARG, "%s: the encoding lives on %s, the tape on %s", fn,
                        nb_device_name(d), nb_tape_on_cuda(t) ? nb_device_name(t->dev) : "cpu");
    nb_top op = {.kind = NB_TOP_ENCODING, .nin = 2, .in = {x, params, NB_TVAR_NONE}, .obj = enc};
    if ((s = nb_tape_op_out(t, &op, 2, (int64_t[]){xv->shape[0], nb_encoding_n_output_dims(enc)})))
        return s;
    if ((s = nb_tape_record(t, &op))) return s;
    *out = op.out;
    return NB_OK;
}

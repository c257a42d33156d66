/* The op table's FUSED row (ops.def): a fused kernel (fuse.h) over tape values. The row wraps the
 * values' memory (host or device) as arrays on the kernel's device and runs the kernel through
 * the call layer; CPU and CUDA rows are the same functions (the call compiles for the kernel's
 * device, which the builder checked is the tape's).
 *
 *   op->in[0 .. nin) = the kernel's inputs (f32 values: the row has no bf16 flag, so
 *   nb_tape_record casts bf16 inputs first), op->out = the full shape or [1] (a reduction),
 *   op->obj = the nb_fuse_kernel (owned by the caller: a compiled graph, or a test). */
#include <stdio.h>
#include <string.h>

#include "graph/fuse.h"
#include "core/util.h"

/* Value v's memory p (its data, or its gradient g) as an array of the fused kernel. */
static nb_fuse_arg arg_of(const nb_tval *v, void *p, nb_dtype dt) {
    nb_fuse_arg a = {.data = p, .dtype = dt, .ndim = v->ndim};
    memcpy(a.shape, v->shape, sizeof(int64_t) * (size_t)v->ndim);
    return a;
}

static nb_status fused_fwd(nb_tape *t, nb_top *op) {
    nb_fuse_arg in[NB_TOP_MAX_IN];
    for (int i = 0; i < op->nin; i++) {
        const nb_tval *v = &t->vals[op->in[i]];
        in[i] = arg_of(v, v->data, v->dtype);
    }
    const nb_tval *o = &t->vals[op->out];
    nb_fuse_arg out = arg_of(o, o->data, o->dtype);
    return nb_fuse_run(op->obj, 0, in, &out, NULL);
}

/* The call's backward ADDS into the gradient arrays, as the tape accumulates. */
static nb_status fused_bwd(nb_tape *t, const nb_top *op) {
    nb_fuse_arg in[NB_TOP_MAX_IN], g[NB_TOP_MAX_IN];
    int any = 0;
    for (int i = 0; i < op->nin; i++) {
        const nb_tval *v = &t->vals[op->in[i]];
        float *gb = NULL;
        NB_TRY(nb_tape_grad_buf(t, op->in[i], &gb));
        in[i] = arg_of(v, v->data, v->dtype);
        g[i] = arg_of(v, gb, NB_F32);
        any |= gb != NULL;
    }
    if (!any) return NB_OK;
    const nb_tval *o = &t->vals[op->out];
    nb_fuse_arg dout = arg_of(o, o->grad, o->dtype);
    return nb_fuse_run(op->obj, 1, in, &dout, g);
}

nb_status nb_op_fused_cpu_fwd(nb_tape *t, nb_top *op) { return fused_fwd(t, op); }
nb_status nb_op_fused_cpu_bwd(nb_tape *t, const nb_top *op) { return fused_bwd(t, op); }
nb_status nb_op_fused_cuda_fwd(nb_tape *t, nb_top *op) { return fused_fwd(t, op); }
nb_status nb_op_fused_cuda_bwd(nb_tape *t, const nb_top *op) { return fused_bwd(t, op); }

nb_status nb_tape_fused(nb_tape *t, nb_fuse_kernel *k, int n, const nb_tvar *in, nb_tvar *out) {
    const char *fn = "nb_tape_fused";
    if (!t || !k || !out || (n > 0 && !in))
        return nb_error(NB_ERR_INVALID_ARG, "%s: tape, kernel, inputs or out is NULL", fn);
    const nb_fuse_spec *sp = nb_fuse_kernel_spec(k);
    if (n != sp->n_in)
        return nb_error(NB_ERR_INVALID_ARG, "%s: %d inputs given, the kernel takes %d", fn, n, sp->n_in);
    nb_device *d = nb_fuse_kernel_device(k);
    int same = nb_tape_on_cuda(t) ? d == t->dev : nb_device_get_kind(d) == NB_DEVICE_CPU;
    if (!same)
        return nb_error(NB_ERR_DEVICE, "%s: the kernel lives on %s, the tape on %s", fn, nb_device_name(d),
                        nb_tape_on_cuda(t) ? nb_device_name(t->dev) : "cpu");
    /* shapes: the kernel's own checks, over shape-only descriptions of the values */
    const nb_tval *full = NULL, *chan = NULL;
    char b1[96], b2[96];
    for (int i = 0; i < n; i++) {
        char what[48];
        snprintf(what, sizeof what, "%s: input %d", fn, i);
        const nb_tval *v = nb_tape_val(t, in[i], what);
        if (!v) return NB_ERR_INVALID_ARG;
        for (int j = 0; j < i; j++)
            if (in[j] == in[i])
                return nb_error(NB_ERR_INVALID_ARG, "%s: input %d is input %d again (a value is one input; "
                                "the spec refers to it twice)", fn, i, j);
        const nb_tval **ref = sp->in_kind[i] == NB_FUSE_FULL ? &full : &chan;
        if (!*ref) *ref = v;
        else if (v->ndim != (*ref)->ndim || memcmp(v->shape, (*ref)->shape, (size_t)v->ndim * sizeof(int64_t)))
            return nb_error(NB_ERR_SHAPE, "%s: input %d %s differs from the other %s inputs' %s", fn, i,
                            nb_tape_shape_str(v, b1, sizeof b1), sp->in_kind[i] == NB_FUSE_FULL ? "full" : "per-channel",
                            nb_tape_shape_str(*ref, b2, sizeof b2));
    }
    if (chan && (chan->ndim >= full->ndim || memcmp(chan->shape, full->shape, (size_t)chan->ndim * sizeof(int64_t))))
        return nb_error(NB_ERR_SHAPE, "%s: per-channel inputs %s must be the leading dims of the full inputs' %s", fn,
                        nb_tape_shape_str(chan, b1, sizeof b1), nb_tape_shape_str(full, b2, sizeof b2));
    nb_top op = {.kind = NB_TOP_FUSED, .nin = n, .obj = k};
    for (int i = 0; i < NB_TOP_MAX_IN; i++) op.in[i] = i < n ? in[i] : NB_TVAR_NONE;
    int64_t one = 1;
    nb_status s = nb_fuse_kernel_reduces(k) ? nb_tape_op_out(t, &op, 1, &one)
                                            : nb_tape_op_out(t, &op, full->ndim, full->shape);
    if (s || (s = nb_tape_record(t, &op))) return s;
    *out = op.out;
    return NB_OK;
}

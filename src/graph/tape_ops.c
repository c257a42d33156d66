/* The op table of the tape, generated from ops.def: the rows (name, arity, shape rule, CPU and
 * CUDA functions, flags), the dispatch of one op to the tape's device, and the checks that a
 * recorded op keeps its row's arity and shape rule. */
#include <string.h>

#include "graph/tape_internal.h"

const nb_top_row nb_top_rows[NB_TOP_COUNT] = {
#define NB_OP(id, name, nin, shape, cpu_fwd, cpu_bwd, cuda_fwd, cuda_bwd, flags)                 \
    [NB_TOP_##id] = {name, nin, shape, cpu_fwd, cuda_fwd, cpu_bwd, cuda_bwd, flags},
#include "graph/ops.def"
#undef NB_OP
};

const char *nb_tape_op_name(int kind) {
    return kind >= 0 && kind < NB_TOP_COUNT ? nb_top_rows[kind].name : NULL;
}

nb_status nb_op_no_cuda_fwd(nb_tape *t, nb_top *op) {
    (void)t;
    return nb_error(NB_ERR_UNSUPPORTED, "tape: op '%s' has no CUDA forward path yet",
                    nb_tape_op_name(op->kind));
}

nb_status nb_op_no_cuda_bwd(nb_tape *t, const nb_top *op) {
    (void)t;
    return nb_error(NB_ERR_UNSUPPORTED, "tape: op '%s' has no CUDA backward path yet",
                    nb_tape_op_name(op->kind));
}

/* Forward / backward of one recorded op on the tape's device. */
nb_status nb_tape_run_op(nb_tape *t, nb_top *op, int backward) {
    const nb_top_row *r = &nb_top_rows[op->kind];
    if (nb_tape_on_cuda(t)) return backward ? r->cuda_backward(t, op) : r->cuda_forward(t, op);
    return backward ? r->cpu_backward(t, op) : r->cpu_forward(t, op);
}

static int nb_top_valid_in(const nb_tape *t, nb_tvar v) {
    return v == NB_TVAR_NONE || (v >= 0 && v < t->n_vals);
}

nb_status nb_tape_check_op(const nb_tape *t, const nb_top *op) {
    if (op->kind < 0 || op->kind >= NB_TOP_COUNT)
        return nb_error(NB_ERR_INTERNAL, "tape: unknown op kind %d", op->kind);
    const nb_top_row *r = &nb_top_rows[op->kind];
    if (r->nin == NB_TOP_NIN_ANY ? op->nin < 1 || op->nin > NB_TOP_MAX_IN : op->nin != r->nin)
        return nb_error(NB_ERR_INTERNAL, "tape: op '%s' recorded with %d inputs, ops.def says %d",
                        r->name, op->nin, r->nin);
    for (int i = 0; i < op->nin; i++)
        if (!nb_top_valid_in(t, op->in[i]))
            return nb_error(NB_ERR_INTERNAL, "tape: op '%s': input %d is not a value", r->name, i);
    if (op->out < 0 || op->out >= t->n_vals)
        return nb_error(NB_ERR_INTERNAL, "tape: op '%s': no output value", r->name);
    const nb_tval *y = &t->vals[op->out];
    int ok = 1;
    if (r->shape == NB_OPSHAPE_SCALAR) {
        ok = y->ndim == 1 && y->shape[0] == 1;
    } else if (r->shape == NB_OPSHAPE_LIKE_IN0) {
        const nb_tval *x = op->in[0] >= 0 ? &t->vals[op->in[0]] : NULL;
        ok = x && x->ndim == y->ndim &&
             !memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof(int64_t));
    }
    if (!ok) {
        char b[96];
        return nb_error(NB_ERR_INTERNAL, "tape: op '%s': output %s breaks its ops.def shape rule",
                        r->name, nb_tape_shape_str(y, b, sizeof b));
    }
    return NB_OK;
}

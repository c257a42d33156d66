/* Call checking of intrinsics (elementwise math, mul, and the other built-in functions of
 * intrinsics.h), split from check_call.c. */
#include <stdio.h>
#include <string.h>

#include "lang/check_internal.h"
#include "lang/lexer.h"
#include "nabla/alloc.h"

/* ---- intrinsics --------------------------------------------------------------------------- */

/* Common elementwise type of all args; float: promote to a float kind. NULL after an error. */
static const nb_type *elementwise_type(nb_checker *c, nb_expr *call, const char *name, int want_float) {
    nb_expr **args = call->u.call.args;
    const nb_type *t = args[0]->type;
    for (int i = 0; i < call->u.call.nargs; i++) {
        if (!ck_is_value_shape(args[i]->type)) {
            nb_strbuf sb;
            nb_strbuf_init(&sb);
            ck_describe_call(name, args, call->u.call.nargs, &sb);
            ck_err(c, call->loc, "no matching function for call to '%s' (arguments must be scalars, "
                   "vectors or matrices)", nb_strbuf_cstr(&sb));
            nb_strbuf_free(&sb);
            return NULL;
        }
        if (i > 0) {
            char op[64];
            snprintf(op, sizeof op, "call to '%s'", name);
            t = ck_common_type(c, call->loc, t, args[i]->type, op, 0);
            if (!t) return NULL;
        }
    }
    if (t->scalar == NB_SC_BOOL) t = ck_with_kind(c, t, want_float ? NB_SC_FLOAT : NB_SC_INT);
    if (want_float && !ck_is_float_kind(t->scalar)) t = ck_with_kind(c, t, NB_SC_FLOAT);
    return t;
}

static void coerce_all(nb_checker *c, nb_expr *call, const nb_type *t, const char *name) {
    for (int i = 0; i < call->u.call.nargs; i++) {
        char what[96];
        snprintf(what, sizeof what, "argument %d of '%s'", i + 1, name);
        ck_coerce(c, &call->u.call.args[i], t, what);
    }
}

static int in_tensor_element(const nb_expr *e) {
    return e && e->kind == NB_EX_INDEX && e->u.index.base && e->u.index.base->type &&
           e->u.index.base->type->kind == NB_TY_TENSOR;
}

static const nb_type *call_mul(nb_checker *c, nb_expr *call) {
    nb_expr **args = call->u.call.args;
    const nb_type *a = args[0]->type, *b = args[1]->type;
    if (!ck_is_value_shape(a) || !ck_is_value_shape(b)) goto bad;
    nb_scalar_kind k = ck_scalar_rank(a->scalar) >= ck_scalar_rank(b->scalar) ? a->scalar : b->scalar;
    if (k == NB_SC_BOOL) k = NB_SC_INT;
    const nb_type *ta = ck_with_kind(c, a, k), *tb = ck_with_kind(c, b, k), *r = NULL;
    if (a->kind == NB_TY_SCALAR) r = tb;
    else if (b->kind == NB_TY_SCALAR) r = ta;
    else if (a->kind == NB_TY_VECTOR && b->kind == NB_TY_VECTOR) {
        if (a->cols != b->cols) goto bad;
        r = nb_type_scalar(c->tt, k);
    } else if (a->kind == NB_TY_VECTOR && b->kind == NB_TY_MATRIX) {
        if (a->cols != b->rows) goto bad;
        r = nb_type_vector(c->tt, k, b->cols);
    } else if (a->kind == NB_TY_MATRIX && b->kind == NB_TY_VECTOR) {
        if (a->cols != b->cols) goto bad;
        if (a->rows > 4) {
            /* vectors have 1 to 4 components, as Slang's CPU/CUDA Vector<T, N> */
            ck_err(c, call->loc, "mul: '%s' times a vector gives %d components, but a vector has 1 to 4; "
                   "take dot(m[i], v) row by row", a->name, a->rows);
            return call->type = c->tt->t_error;
        }
        r = nb_type_vector(c->tt, k, a->rows);
    } else {
        if (a->cols != b->rows) goto bad;
        r = nb_type_matrix(c->tt, k, a->rows, b->cols);
    }
    ck_coerce(c, &args[0], ta, "argument 1 of 'mul'");
    ck_coerce(c, &args[1], tb, "argument 2 of 'mul'");
    return call->type = r;
bad:
    ck_err(c, call->loc, "mul: incompatible operands '%s' and '%s'", a->name, b->name);
    return call->type = c->tt->t_error;
}

const nb_type *ck_call_intrinsic(nb_checker *c, nb_expr *call, int id) {
    const nb_intrinsic_info *in = nb_intrinsic_get(id);
    const char *name = in->name;
    int n = call->u.call.nargs;
    nb_expr **args = call->u.call.args;
    call->ref = NB_REF_INTRINSIC;
    call->index = id;
    if (in->sig == NB_ISIG_FWD_DIFF || in->sig == NB_ISIG_BWD_DIFF) {
        ck_err(c, call->loc, "'%s(f)' must be called with f's arguments: %s(f)(…)", name, name);
        return call->type = c->tt->t_error;
    }
    if (in->sig == NB_ISIG_DIFFPAIR && n == 2 && ck_is_pending_list(args[1])) {
        /* diffPair(a, {…}): the list is a's Differential */
        const nb_type *pt = ck_expr(c, &args[0]);
        const nb_type *dt = ck_is_error(pt) ? NULL : nb_type_differential(c->tt, pt);
        if (dt) ck_expr_to(c, &args[1], dt, "argument 2 of 'diffPair'");
        else ck_fail_pending(c, call);
    } else {
        ck_check_args(c, call);
    }
    if (n < in->min_args || n > in->max_args) {
        if (in->min_args == in->max_args)
            ck_err(c, call->loc, "'%s' takes %d argument%s, got %d", name, in->min_args,
                   in->min_args == 1 ? "" : "s", n);
        else
            ck_err(c, call->loc, "'%s' takes %d to %d arguments, got %d", name, in->min_args, in->max_args, n);
        return call->type = c->tt->t_error;
    }
    if (call->u.call.arg_names)
        for (int i = 0; i < n; i++)
            if (call->u.call.arg_names[i]) {
                ck_err(c, call->loc, "built-in '%s' does not take named arguments", name);
                return call->type = c->tt->t_error;
            }
    for (int i = 0; i < n; i++)
        if (ck_is_error(args[i]->type)) return call->type = c->tt->t_error;
    if ((in->flags & NB_IFLAG_KERNEL) && !(c->fn && c->fn->u.func.is_kernel)) {
        /* any function may read the thread indices; it then takes the kernel's thread ids and must
         * be reached from a kernel (check_kernel.c ck_bind_shader_params) */
        if (!c->fn) {
            ck_err(c, call->loc, "'%s()' is only allowed in functions called from a [Kernel] / [CudaKernel]", name);
            return call->type = c->tt->t_error;
        }
        c->fn->u.func.uses_tid = 1;
        c->saw_tid = 1;
    }
    const nb_type *t;
    switch (in->sig) {
    case NB_ISIG_FLOAT_UNARY:
    case NB_ISIG_FLOAT_BINARY:
    case NB_ISIG_FLOAT_TERNARY:
    case NB_ISIG_NUM_UNARY:
    case NB_ISIG_NUM_BINARY:
    case NB_ISIG_NUM_TERNARY: {
        int want_float = in->sig == NB_ISIG_FLOAT_UNARY || in->sig == NB_ISIG_FLOAT_BINARY ||
                         in->sig == NB_ISIG_FLOAT_TERNARY;
        t = elementwise_type(c, call, name, want_float);
        if (!t) return call->type = c->tt->t_error;
        coerce_all(c, call, t, name);
        return call->type = t;
    }
    case NB_ISIG_VEC_UNARY:
    case NB_ISIG_VEC_BINARY:
    case NB_ISIG_DOT:
    case NB_ISIG_DISTANCE:
    case NB_ISIG_CROSS:
    case NB_ISIG_LENGTH: {
        int want_float = in->sig != NB_ISIG_DOT;
        t = elementwise_type(c, call, name, want_float);
        if (!t) return call->type = c->tt->t_error;
        if (t->kind == NB_TY_MATRIX || (t->kind == NB_TY_SCALAR && in->sig != NB_ISIG_LENGTH &&
                                        in->sig != NB_ISIG_DOT && in->sig != NB_ISIG_DISTANCE)) {
            ck_err(c, call->loc, "'%s' needs vector arguments, got '%s'", name, args[0]->type->name);
            return call->type = c->tt->t_error;
        }
        if (in->sig == NB_ISIG_CROSS && t->cols != 3) {
            ck_err(c, call->loc, "'cross' needs 3-component vectors, got '%s'", t->name);
            return call->type = c->tt->t_error;
        }
        coerce_all(c, call, t, name);
        if (in->sig == NB_ISIG_DOT || in->sig == NB_ISIG_LENGTH || in->sig == NB_ISIG_DISTANCE)
            return call->type = nb_type_scalar(c->tt, t->scalar);
        return call->type = t;
    }
    case NB_ISIG_SELECT: {
        const nb_type *ct = args[0]->type;
        if (ct->kind != NB_TY_SCALAR && ct->kind != NB_TY_VECTOR) {
            ck_err(c, args[0]->loc, "select condition must be bool or a bool vector, got '%s'", ct->name);
            return call->type = c->tt->t_error;
        }
        if (args[1]->type == args[2]->type && !ck_is_value_shape(args[1]->type) && ct->kind == NB_TY_SCALAR) {
            ck_coerce(c, &args[0], c->tt->t_bool, "select condition");
            return call->type = args[1]->type;
        }
        t = ck_common_type(c, call->loc, args[1]->type, args[2]->type, "call to 'select'", 1);
        if (!t) return call->type = c->tt->t_error;
        if (ct->kind == NB_TY_VECTOR) {
            if (t->kind == NB_TY_SCALAR) t = nb_type_vector(c->tt, t->scalar, ct->cols);
            if (t->kind != NB_TY_VECTOR || t->cols != ct->cols) {
                ck_err(c, call->loc, "select: condition '%s' and values '%s' have different sizes",
                       ct->name, t->name);
                return call->type = c->tt->t_error;
            }
        }
        ck_coerce(c, &args[0], ck_with_kind(c, ct, NB_SC_BOOL), "select condition");
        ck_coerce(c, &args[1], t, "argument 2 of 'select'");
        ck_coerce(c, &args[2], t, "argument 3 of 'select'");
        return call->type = t;
    }
    case NB_ISIG_MUL: return call_mul(c, call);
    case NB_ISIG_TRANSPOSE:
        if (args[0]->type->kind != NB_TY_MATRIX) {
            ck_err(c, call->loc, "'transpose' needs a matrix, got '%s'", args[0]->type->name);
            return call->type = c->tt->t_error;
        }
        if (args[0]->type->rows > 4) {
            /* the transpose would have rows of more than 4 columns (Slang's CPU/CUDA matrices too) */
            ck_err(c, call->loc, "'transpose' of '%s' would have %d columns, but a matrix has 1 to 4 columns",
                   args[0]->type->name, args[0]->type->rows);
            return call->type = c->tt->t_error;
        }
        return call->type = nb_type_matrix(c->tt, args[0]->type->scalar, args[0]->type->cols, args[0]->type->rows);
    case NB_ISIG_DETERMINANT: {
        const nb_type *m = args[0]->type;
        if (m->kind != NB_TY_MATRIX || m->rows != m->cols) {
            ck_err(c, call->loc, "'determinant' needs a square matrix, got '%s'", m->name);
            return call->type = c->tt->t_error;
        }
        if (!ck_is_float_kind(m->scalar)) ck_coerce(c, &args[0], ck_with_kind(c, m, NB_SC_FLOAT), "argument 1 of 'determinant'");
        return call->type = nb_type_scalar(c->tt, args[0]->type->scalar);
    }
    case NB_ISIG_ANY_ALL:
        if (!ck_is_value_shape(args[0]->type)) {
            ck_err(c, call->loc, "'%s' needs a scalar or vector, got '%s'", name, args[0]->type->name);
            return call->type = c->tt->t_error;
        }
        return call->type = c->tt->t_bool;
    case NB_ISIG_FLOAT_TEST:
        t = elementwise_type(c, call, name, 1);
        if (!t) return call->type = c->tt->t_error;
        coerce_all(c, call, t, name);
        return call->type = ck_with_kind(c, t, NB_SC_BOOL);
    case NB_ISIG_BITCAST: {
        const nb_type *a = args[0]->type;
        if ((a->kind != NB_TY_SCALAR && a->kind != NB_TY_VECTOR) ||
            (a->scalar != NB_SC_INT && a->scalar != NB_SC_UINT && a->scalar != NB_SC_FLOAT)) {
            ck_err(c, call->loc, "'%s' needs a 32-bit int, uint or float value, got '%s'", name, a->name);
            return call->type = c->tt->t_error;
        }
        nb_scalar_kind k = id == NB_INTR_ASFLOAT ? NB_SC_FLOAT : id == NB_INTR_ASINT ? NB_SC_INT : NB_SC_UINT;
        return call->type = ck_with_kind(c, a, k);
    }
    case NB_ISIG_ATOMIC: {
        if (!in_tensor_element(args[0])) {
            ck_err(c, args[0]->loc, "the first argument of '%s' must be a tensor element (t[i, …])", name);
            return call->type = c->tt->t_error;
        }
        const nb_type *et = args[0]->type;
        if (et->kind != NB_TY_SCALAR || et->scalar == NB_SC_BOOL) {
            ck_err(c, args[0]->loc, "'%s' needs a tensor of int, uint or float scalars, got '%s'", name, et->name);
            return call->type = c->tt->t_error;
        }
        ck_coerce(c, &args[1], et, "argument 2 of 'atomicAdd'");
        return call->type = et;
    }
    case NB_ISIG_DIFFPAIR: {
        const nb_type *pt = args[0]->type;
        if (ck_is_value_shape(pt) && !ck_is_float_kind(pt->scalar)) {
            pt = ck_with_kind(c, pt, NB_SC_FLOAT);
            ck_coerce(c, &args[0], pt, "argument 1 of 'diffPair'");
        }
        if (!nb_type_is_differentiable(pt)) { /* (pairs of pairs: higher-order derivatives) */
            ck_err(c, call->loc, "'diffPair' needs a differentiable value, got '%s'", pt->name);
            return call->type = c->tt->t_error;
        }
        if (n == 2) {
            const nb_type *dt = nb_type_differential(c->tt, pt);
            ck_coerce(c, &args[1], dt ? dt : c->tt->t_error, "argument 2 of 'diffPair'");
        }
        return call->type = nb_type_diffpair(c->tt, pt);
    }
    case NB_ISIG_DETACH:
        if (args[0]->type->kind == NB_TY_VOID) {
            ck_err(c, call->loc, "'%s' needs a value", name);
            return call->type = c->tt->t_error;
        }
        return call->type = args[0]->type;
    case NB_ISIG_THREAD_ID: return call->type = nb_type_vector(c->tt, NB_SC_UINT, 3);
    case NB_ISIG_BARRIER: return call->type = c->tt->t_void;
    case NB_ISIG_WAVE: return call->type = ck_group_intrinsic(c, call, id, args, n, name);
    case NB_ISIG_TENSOR_SIZE: {
        int64_t d;
        if (args[0]->type->kind != NB_TY_TENSOR || !ck_const_int(args[1], &d) || d < 0 || d >= args[0]->type->rank) {
            ck_err(c, call->loc, "'%s' takes a tensor and a constant dimension below its rank", name);
            return call->type = c->tt->t_error;
        }
        ck_coerce(c, &args[1], c->tt->t_int, "dimension");
        return call->type = c->tt->t_uint;
    }
    case NB_ISIG_TENSOR_PART: { /* v.primal, v.diff.diff, v.primal = t (check_view.c) */
        const nb_type *dt = args[0]->type;
        if (dt->kind != NB_TY_TENSOR || !dt->diff_tensor || dt->buffer) {
            ck_err(c, call->loc, "'%s' takes a DiffTensor", name);
            return call->type = c->tt->t_error;
        }
        const nb_type *pt = nb_type_tensor(c->tt, dt->elem, dt->rank, 0);
        if (id != NB_INTR_TENSOR_WITH_PRIMAL) return call->type = pt;
        const nb_type *at = args[1]->type;
        if (at->kind == NB_TY_TENSOR && !at->buffer && at->elem == dt->elem && at->rank == dt->rank) return call->type = dt;
        ck_err(c, args[1]->loc, "the primal of '%s' must be a '%s' (a view of the same element type and rank), got '%s'",
               dt->name, pt->name, at->name ? at->name : "?");
        return call->type = c->tt->t_error;
    }
    case NB_ISIG_TORCH: /* host code: typed where it is made (check_host.c), never called by name */
        ck_err(c, call->loc, "'%s' is not a function", name);
        return call->type = c->tt->t_error;
    case NB_ISIG_TENSOR_DATA_PTR: /* t.data_ptr() (check_ptr.c) */
        if (args[0]->type->kind != NB_TY_TENSOR) {
            ck_err(c, call->loc, "'%s' takes a tensor", name);
            return call->type = c->tt->t_error;
        }
        return call->type = nb_type_ptr(c->tt, args[0]->type->elem);
    case NB_ISIG_NN_MATVEC:
    case NB_ISIG_NN_OUTER: { /* (w, offset, vectors...): lib/nn.nb's building blocks */
        const nb_type *wt = args[0]->type;
        int outer = in->sig == NB_ISIG_NN_OUTER;
        if (wt->kind != NB_TY_TENSOR || wt->rank != 1 || wt->elem != c->tt->t_float || (outer && !wt->diff_tensor)) {
            ck_err(c, args[0]->loc, "the first argument of '%s' must be a %s<float,1> of weights, got '%s'", name,
                   outer ? "DiffTensor" : "Tensor or DiffTensor", wt->name ? wt->name : "?");
            return call->type = c->tt->t_error;
        }
        char what[64];
        snprintf(what, sizeof what, "argument 2 of '%s'", name);
        ck_coerce(c, &args[1], c->tt->t_int, what);
        const nb_type *v16 = nb_type_array(c->tt, c->tt->t_float, 16);
        for (int i = 2; i < n; i++) {
            snprintf(what, sizeof what, "argument %d of '%s'", i + 1, name);
            ck_coerce(c, &args[i], v16, what);
        }
        return call->type = outer ? c->tt->t_void : v16;
    }
    case NB_ISIG_FWD_DIFF:
    case NB_ISIG_BWD_DIFF:
        ck_err(c, call->loc, "'%s(f)' must be called with f's arguments: %s(f)(…)", name, name);
        return call->type = c->tt->t_error;
    }
    return call->type = c->tt->t_error;
}

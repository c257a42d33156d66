/* Host evaluation of constant values (fold_value.h). */
#include <math.h>
#include <stdint.h>

#include "lang/check.h"
#include "lang/fold_value.h"
#include "lang/lexer.h"
#include "lang/types.h"

static int flat_count(const nb_type *t) {
    if (!t) return -1;
    switch (t->kind) {
    case NB_TY_SCALAR:
    case NB_TY_VECTOR:
    case NB_TY_MATRIX: return nb_type_components(t);
    case NB_TY_ARRAY: {
        int n = flat_count(t->elem);
        return n < 0 ? -1 : n * t->length;
    }
    default: return -1;
    }
}

static nb_scalar_kind flat_scalar(const nb_type *t) {
    while (t->kind == NB_TY_ARRAY) t = t->elem;
    return t->scalar;
}

int64_t nb_fold_d2i(double v) {
    if (v != v) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}

double nb_fold_f32(double v) {
    if (v > 3.4028234663852886e38) return INFINITY;
    if (v < -3.4028234663852886e38) return -INFINITY;
    return (double)(float)v;
}

/* v truncated toward zero and wrapped to 32 bits */
static int64_t wrap32(double v) { return (int64_t)(uint32_t)(uint64_t)nb_fold_d2i(v); }

/* Rounds v as the scalar kind k stores it. */
static double as_kind(nb_scalar_kind k, double v) {
    switch (k) {
    case NB_SC_BOOL: return v != 0;
    case NB_SC_INT: return (double)(int32_t)(uint32_t)wrap32(v);
    case NB_SC_UINT: return (double)(uint32_t)wrap32(v);
    case NB_SC_INT64:
    case NB_SC_UINT64: return trunc(v);
    case NB_SC_FLOAT:
    case NB_SC_HALF: return nb_fold_f32(v);
    case NB_SC_DOUBLE: return v;
    }
    return v;
}

static int fold(const nb_expr *e, double *out, int max, int depth) {
    if (!e || !e->type || depth > 32) return -1;
    const nb_type *t = e->type;
    int want = flat_count(t);
    if (want < 0 || want > max) return -1;
    if (t->kind == NB_TY_SCALAR) {
        int is_int = 0;
        int64_t i = 0;
        double f = 0;
        if (nb_check_const_eval(e, &is_int, &i, &f)) {
            out[0] = is_int ? (double)i : f;
            return 1;
        }
    }
    int n = 0;
    switch (e->kind) {
    case NB_EX_NAME:
    case NB_EX_MEMBER:
        /* a static const global / member with a constant initializer */
        if ((e->ref == NB_REF_GLOBAL || e->ref == NB_REF_STATIC) && e->decl && e->decl->kind == NB_DECL_VAR &&
            e->decl->u.var.init)
            return fold(e->decl->u.var.init, out, max, depth + 1) == want ? want : -1;
        return -1;
    case NB_EX_UNARY:
        if (e->u.unary.op == NB_TOK_PLUS || e->u.unary.op == NB_TOK_MINUS) {
            n = fold(e->u.unary.operand, out, max, depth + 1);
            if (n != want) return -1;
            if (e->u.unary.op == NB_TOK_MINUS)
                for (int k = 0; k < n; k++) out[k] = as_kind(flat_scalar(t), -out[k]);
            return n;
        }
        return -1;
    case NB_EX_CAST:
        n = fold(e->u.cast.operand, out, max, depth + 1);
        break;
    case NB_EX_CALL: {
        /* constructors only: the callee names a type */
        if (e->ref != NB_REF_TYPE) return -1;
        for (int a = 0; a < e->u.call.nargs; a++) {
            int k = fold(e->u.call.args[a], out + n, max - n, depth + 1);
            if (k < 0) return -1;
            n += k;
        }
        break;
    }
    case NB_EX_INIT_LIST:
        for (int a = 0; a < e->u.init_list.nitems; a++) {
            int k = fold(e->u.init_list.items[a], out + n, max - n, depth + 1);
            if (k < 0) return -1;
            n += k;
        }
        break;
    default: return -1;
    }
    if (n == 1 && want > 1) /* splat */
        for (int k = 1; k < want; k++) out[k] = out[0];
    else if (n != want) return -1;
    for (int k = 0; k < want; k++) out[k] = as_kind(flat_scalar(t), out[k]);
    return want;
}

int nb_fold_components(const nb_expr *e, double *out, int max) { return fold(e, out, max, 0); }

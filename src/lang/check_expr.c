/* Expression checking: types, implicit conversions, operators, members, indexing (see check.h).
 * Calls (functions, methods, constructors, intrinsics, fwd_diff/bwd_diff) are in check_call.c. */
#include <stdio.h>
#include <string.h>

#include "lang/check_internal.h"
#include "lang/fold_value.h"
#include "lang/lexer.h"


/* ---- basics ------------------------------------------------------------------------------- */

int ck_is_error(const nb_type *t) {
    return !t || t->kind == NB_TY_ERROR;
}

nb_expr *ck_new_expr(nb_checker *c, nb_expr_kind kind, nb_loc loc) {
    nb_expr *e = ck_alloc(c, sizeof *e);
    if (!e) return NULL;
    e->kind = kind;
    e->loc = loc;
    e->type = c->tt->t_error;
    return e;
}

int ck_scalar_rank(nb_scalar_kind s) {
    switch (s) {
    case NB_SC_BOOL: return 0;
    case NB_SC_INT: return 1;
    case NB_SC_UINT: return 2;
    case NB_SC_INT64: return 3;
    case NB_SC_UINT64: return 4;
    case NB_SC_HALF: return 5;
    case NB_SC_FLOAT: return 6;
    case NB_SC_DOUBLE: return 7;
    }
    return 0;
}

int ck_is_int_scalar_kind(nb_scalar_kind s) {
    return s == NB_SC_INT || s == NB_SC_UINT || s == NB_SC_INT64 || s == NB_SC_UINT64;
}

static int is_float_kind(nb_scalar_kind s) {
    return s == NB_SC_HALF || s == NB_SC_FLOAT || s == NB_SC_DOUBLE;
}

static int is_value_shape(const nb_type *t) {
    return t && (t->kind == NB_TY_SCALAR || t->kind == NB_TY_VECTOR || t->kind == NB_TY_MATRIX);
}

/* Same shape as t, with scalar kind k. */
static const nb_type *with_kind(nb_checker *c, const nb_type *t, nb_scalar_kind k) {
    switch (t->kind) {
    case NB_TY_SCALAR: return nb_type_scalar(c->tt, k);
    case NB_TY_VECTOR: return nb_type_vector(c->tt, k, t->cols);
    case NB_TY_MATRIX: return nb_type_matrix(c->tt, k, t->rows, t->cols);
    default: return t;
    }
}

static int scalar_cost(nb_scalar_kind f, nb_scalar_kind t) {
    if (f == t) return 0;
    if (f == NB_SC_BOOL || t == NB_SC_BOOL) return 40;
    if (ck_is_int_scalar_kind(f) && is_float_kind(t))
        return 12 + (t == NB_SC_DOUBLE ? 1 : 0) + (t == NB_SC_HALF ? 2 : 0) +
               (f == NB_SC_INT64 || f == NB_SC_UINT64 ? 0 : 0);
    int rf = ck_scalar_rank(f), rt = ck_scalar_rank(t);
    if (rt > rf) return 10 + (rt - rf);
    return 30 + (rf - rt);
}

int nb_check_conversion_cost(const nb_type *from, const nb_type *to) {
    if (!from || !to) return -1;
    if (from == to) return 0;
    if (from->kind == NB_TY_ERROR || to->kind == NB_TY_ERROR) return 0;
    switch (from->kind) {
    case NB_TY_SCALAR:
        if (to->kind == NB_TY_SCALAR) return scalar_cost(from->scalar, to->scalar);
        if (to->kind == NB_TY_VECTOR || to->kind == NB_TY_MATRIX)
            return scalar_cost(from->scalar, to->scalar) + 1;
        return -1;
    case NB_TY_VECTOR:
        if (to->kind == NB_TY_VECTOR && to->cols == from->cols)
            return scalar_cost(from->scalar, to->scalar);
        return -1;
    case NB_TY_MATRIX:
        if (to->kind == NB_TY_MATRIX && to->cols == from->cols && to->rows == from->rows)
            return scalar_cost(from->scalar, to->scalar);
        return -1;
    case NB_TY_STRUCT: /* a conforming struct to a value of interface type (check_dyn.c) */
        return ck_existential_index(from, to) >= 0 ? 5 : -1;
    case NB_TY_PTR: /* nullptr converts to every pointer type */
        return to->kind == NB_TY_PTR && from->elem && from->elem->kind == NB_TY_VOID ? 1 : -1;
    default: return -1;
    }
}

static void report_conv_error(nb_checker *c, nb_loc loc, const nb_type *from, const nb_type *to,
                              const char *what) {
    const char *hint = "";
    if ((from->kind == NB_TY_VECTOR || from->kind == NB_TY_MATRIX) &&
        (to->kind == NB_TY_SCALAR ||
         (to->kind == NB_TY_VECTOR && from->kind == NB_TY_VECTOR && to->cols < from->cols)))
        hint = " (implicit vector truncation is an error in nabla; use a swizzle such as .x or .xy)";
    if (what && *what)
        ck_err(c, loc, "cannot convert '%s' to '%s' in %s%s", from->name, to->name, what, hint);
    else
        ck_err(c, loc, "cannot convert '%s' to '%s'%s", from->name, to->name, hint);
}

/* Wraps *slot in an implicit cast to `to` (no checks). */
static void wrap_cast(nb_checker *c, nb_expr **slot, const nb_type *to) {
    nb_expr *e = *slot;
    /* fold literals directly: an int literal used as a float is a float literal */
    if (to->kind == NB_TY_SCALAR && e->kind == NB_EX_INT && is_float_kind(to->scalar)) {
        double v = e->u.ilit.is_unsigned ? (double)e->u.ilit.value : (double)(int64_t)e->u.ilit.value;
        e->kind = NB_EX_FLOAT;
        e->u.flit.value = v;
        e->u.flit.kind = to->scalar;
        e->type = to;
        return;
    }
    if (to->kind == NB_TY_SCALAR && e->kind == NB_EX_FLOAT && is_float_kind(to->scalar)) {
        e->u.flit.kind = to->scalar;
        e->type = to;
        return;
    }
    nb_expr *k = ck_new_expr(c, NB_EX_CAST, e->loc);
    if (!k) return;
    k->u.cast.texpr = NULL;
    k->u.cast.operand = e;
    k->u.cast.implicit = 1;
    k->type = to;
    *slot = k;
}

int ck_coerce(nb_checker *c, nb_expr **slot, const nb_type *to, const char *what) {
    nb_expr *e = *slot;
    if (!e || !to) return 0;
    const nb_type *from = e->type;
    if (ck_is_error(from) || ck_is_error(to)) return 1;
    if (from == to) return 1;
    if (to->kind == NB_TY_VOID || from->kind == NB_TY_VOID) {
        if (from->kind == NB_TY_VOID)
            ck_err(c, e->loc, "a void expression has no value%s%s", what && *what ? " in " : "",
                   what ? what : "");
        else
            report_conv_error(c, e->loc, from, to, what);
        return 0;
    }
    /* host code: a TorchTensor<T> converts to a TensorView<T> / DiffTensorView (its primal) as in
     * Slang, so that a struct of views can be filled and passed to __dispatch_kernel (check_host.c) */
    if (from->kind == NB_TY_TORCH && to->kind == NB_TY_TENSOR && !to->buffer && to->elem == from->elem && c->fn &&
        c->fn->u.func.is_host) {
        wrap_cast(c, slot, to);
        return 1;
    }
    if (nb_check_conversion_cost(from, to) < 0) {
        report_conv_error(c, e->loc, from, to, what);
        return 0;
    }
    if (ck_box(c, slot, to)) return 1; /* A -> IFoo */
    wrap_cast(c, slot, to);
    return 1;
}

const nb_type *ck_expr_to(nb_checker *c, nb_expr **slot, const nb_type *to, const char *what) {
    nb_expr *e = *slot;
    if (!e) return c->tt->t_error;
    if (e->kind == NB_EX_INIT_LIST) return ck_init_list(c, e, to);
    const nb_type *hv = ck_host_diff_view(c, slot, to); /* DiffTensorView(x, dx) in host code (check_host.c) */
    if (hv) return hv;
    if (!e->pretyped) ck_expr(c, slot);
    ck_coerce(c, slot, to, what);
    return (*slot)->type;
}

/* ---- constant folding --------------------------------------------------------------------- */

/* Integer arithmetic wraps (two's complement), as the emitted C and CUDA do for 64-bit values;
 * int and uint results are truncated to 32 bits afterwards. */
static int64_t wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static int64_t wrap_sub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static int64_t wrap_mul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

static int is_int_type(const nb_type *t) {
    return t && t->kind == NB_TY_SCALAR && (ck_is_int_scalar_kind(t->scalar) || t->scalar == NB_SC_BOOL);
}

int nb_check_const_eval(const nb_expr *e, int *is_int, int64_t *iv, double *fv) {
    if (!e || !e->type || e->type->kind != NB_TY_SCALAR) return 0;
    int ii = is_int_type(e->type);
    int64_t ri = 0;
    double rf = 0;
    switch (e->kind) {
    case NB_EX_INT: ri = (int64_t)e->u.ilit.value; rf = (double)ri; break;
    case NB_EX_FLOAT: rf = e->u.flit.value; ri = nb_fold_d2i(rf); break;
    case NB_EX_BOOL: ri = e->u.blit ? 1 : 0; rf = (double)ri; break;
    case NB_EX_NAME:
    case NB_EX_MEMBER: {
        if ((e->ref != NB_REF_GLOBAL && e->ref != NB_REF_STATIC && e->ref != NB_REF_LOCAL) || !e->decl ||
            e->decl->kind != NB_DECL_VAR || !e->decl->u.var.has_const)
            return 0;
        ri = e->decl->u.var.const_i;
        rf = e->decl->u.var.const_f;
        break;
    }
    case NB_EX_CAST: {
        int si; int64_t a; double b;
        if (!nb_check_const_eval(e->u.cast.operand, &si, &a, &b)) return 0;
        if (ii) {
            if (e->type->scalar == NB_SC_BOOL) ri = si ? (a != 0) : (b != 0);
            else ri = si ? a : nb_fold_d2i(b);
            if (e->type->scalar == NB_SC_UINT) ri = (int64_t)(uint32_t)ri;
            else if (e->type->scalar == NB_SC_INT) ri = (int64_t)(int32_t)ri;
            rf = (double)ri;
        } else {
            rf = si ? (double)a : b;
            ri = nb_fold_d2i(rf);
        }
        break;
    }
    case NB_EX_UNARY: {
        int si; int64_t a; double b;
        if (e->u.unary.op == NB_TOK_INC || e->u.unary.op == NB_TOK_DEC) return 0;
        if (!nb_check_const_eval(e->u.unary.operand, &si, &a, &b)) return 0;
        switch (e->u.unary.op) {
        case NB_TOK_MINUS: ri = wrap_sub(0, a); rf = -b; break;
        case NB_TOK_PLUS: ri = a; rf = b; break;
        case NB_TOK_NOT: ri = si ? !a : !b; rf = (double)ri; break;
        case NB_TOK_TILDE: ri = ~a; rf = (double)ri; break;
        default: return 0;
        }
        if (!ii) rf = si ? (double)ri : rf;
        break;
    }
    case NB_EX_BINARY: {
        int sa, sb; int64_t a, b; double fa, fb;
        if (!nb_check_const_eval(e->u.binary.lhs, &sa, &a, &fa)) return 0;
        if (!nb_check_const_eval(e->u.binary.rhs, &sb, &b, &fb)) return 0;
        int opi = sa && sb; /* operands are ints (both converted to a common type) */
        switch (e->u.binary.op) {
        case NB_TOK_PLUS: ri = wrap_add(a, b); rf = fa + fb; break;
        case NB_TOK_MINUS: ri = wrap_sub(a, b); rf = fa - fb; break;
        case NB_TOK_STAR: ri = wrap_mul(a, b); rf = fa * fb; break;
        case NB_TOK_SLASH:
            if (opi) {
                if (b == 0) return 0;
                ri = (b == -1) ? wrap_sub(0, a) : a / b;
                rf = (double)ri;
            } else { rf = fa / fb; ri = nb_fold_d2i(rf); }
            break;
        case NB_TOK_PERCENT:
            if (!opi || b == 0) return 0;
            ri = (b == -1) ? 0 : a % b; rf = (double)ri; break;
        case NB_TOK_SHL: if (!opi || b < 0 || b > 63) return 0; ri = (int64_t)((uint64_t)a << b); break;
        case NB_TOK_SHR: if (!opi || b < 0 || b > 63) return 0; ri = a >> b; break;
        case NB_TOK_AMP: ri = a & b; break;
        case NB_TOK_PIPE: ri = a | b; break;
        case NB_TOK_CARET: ri = a ^ b; break;
        case NB_TOK_LT: ri = opi ? a < b : fa < fb; break;
        case NB_TOK_GT: ri = opi ? a > b : fa > fb; break;
        case NB_TOK_LE: ri = opi ? a <= b : fa <= fb; break;
        case NB_TOK_GE: ri = opi ? a >= b : fa >= fb; break;
        case NB_TOK_EQ: ri = opi ? a == b : fa == fb; break;
        case NB_TOK_NE: ri = opi ? a != b : fa != fb; break;
        case NB_TOK_ANDAND: ri = (opi ? a : fa != 0) && (opi ? b : fb != 0); break;
        case NB_TOK_OROR: ri = (opi ? a : fa != 0) || (opi ? b : fb != 0); break;
        default: return 0;
        }
        if (ii) rf = (double)ri;
        else ri = nb_fold_d2i(rf);
        break;
    }
    case NB_EX_TERNARY: {
        int sc; int64_t cv; double cf;
        if (!nb_check_const_eval(e->u.ternary.cond, &sc, &cv, &cf)) return 0;
        const nb_expr *pick = (sc ? cv != 0 : cf != 0) ? e->u.ternary.then_e : e->u.ternary.else_e;
        int sp;
        if (!nb_check_const_eval(pick, &sp, &ri, &rf)) return 0;
        break;
    }
    default: return 0;
    }
    if (ii && e->type->scalar == NB_SC_INT) ri = (int64_t)(int32_t)ri;
    if (ii && e->type->scalar == NB_SC_UINT) ri = (int64_t)(uint32_t)ri;
    if (ii) rf = (double)ri;
    *is_int = ii;
    *iv = ri;
    *fv = rf;
    return 1;
}

int ck_const_int(const nb_expr *e, int64_t *out) {
    int ii; int64_t i; double f;
    if (!nb_check_const_eval(e, &ii, &i, &f)) return 0;
    if (!ii) return 0;
    *out = i;
    return 1;
}

/* ---- common types for operators ----------------------------------------------------------- */

static nb_scalar_kind max_kind(nb_scalar_kind a, nb_scalar_kind b) {
    return ck_scalar_rank(a) >= ck_scalar_rank(b) ? a : b;
}

/* Common operand type of a binary operator; NULL after reporting an error. keep_bool: two bool
 * operands stay bool (==, !=, &, |, ^); otherwise bool promotes to int. */
static const nb_type *common_type(nb_checker *c, nb_loc loc, const nb_type *a, const nb_type *b,
                                  const char *op, int keep_bool) {
    if (!is_value_shape(a) || !is_value_shape(b)) {
        ck_err(c, loc, "invalid operands to binary %s ('%s' and '%s')", op, a->name, b->name);
        return NULL;
    }
    nb_scalar_kind k = max_kind(a->scalar, b->scalar);
    if (k == NB_SC_BOOL && !keep_bool) k = NB_SC_INT;
    if (a->kind == NB_TY_SCALAR) return with_kind(c, b, k);
    if (b->kind == NB_TY_SCALAR) return with_kind(c, a, k);
    if (a->kind == NB_TY_VECTOR && b->kind == NB_TY_VECTOR) {
        if (a->cols != b->cols) {
            ck_err(c, loc, "vector size mismatch in %s: '%s' and '%s' (nabla does not truncate "
                   "vectors implicitly)", op, a->name, b->name);
            return NULL;
        }
        return nb_type_vector(c->tt, k, a->cols);
    }
    if (a->kind == NB_TY_MATRIX && b->kind == NB_TY_MATRIX) {
        if (a->rows != b->rows || a->cols != b->cols) {
            ck_err(c, loc, "matrix size mismatch in %s: '%s' and '%s'", op, a->name, b->name);
            return NULL;
        }
        return nb_type_matrix(c->tt, k, a->rows, a->cols);
    }
    ck_err(c, loc, "invalid operands to binary %s ('%s' and '%s'); use mul() for matrix-vector "
           "products", op, a->name, b->name);
    return NULL;
}

/* ---- lvalues ------------------------------------------------------------------------------ */

static const nb_expr *lvalue_root(const nb_expr *e) {
    for (;;) {
        if (e->kind == NB_EX_MEMBER) e = e->u.member.base;
        else if (e->kind == NB_EX_INDEX) e = e->u.index.base;
        else return e;
    }
}

/* Reports why e cannot be assigned ("what" describes the use). */
static void report_not_lvalue(nb_checker *c, const nb_expr *e, const char *what) {
    const nb_expr *r = lvalue_root(e);
    if (e->kind == NB_EX_INDEX && e->u.index.base && e->u.index.base->type && e->u.index.base->type->buffer == 2) {
        ck_err(c, e->loc, "cannot write to an element of read-only '%s' (use RWStructuredBuffer)",
               e->u.index.base->type->name);
        return;
    }
    if (r->kind == NB_EX_NAME && r->ref == NB_REF_PARAM && r->index == -1) {
        ck_err(c, e->loc, "cannot modify 'this' in a non-mutating method (add [mutating])");
        return;
    }
    if (r->kind == NB_EX_NAME && (r->ref == NB_REF_GLOBAL || r->ref == NB_REF_STATIC)) {
        ck_err(c, e->loc, "cannot assign to constant '%s'", r->u.name.name);
        return;
    }
    if (r->kind == NB_EX_NAME && r->ref == NB_REF_LOCAL && r->decl && (r->decl->mods & NB_MOD_CONST)) {
        ck_err(c, e->loc, "cannot assign to const variable '%s'", r->u.name.name);
        return;
    }
    if (e->kind == NB_EX_MEMBER && e->ref == NB_REF_SWIZZLE && e->u.member.base->is_lvalue) {
        ck_err(c, e->loc, "cannot assign to swizzle '.%s' with repeated components", e->u.member.member);
        return;
    }
    ck_err(c, e->loc, "%s", what);
}

/* ---- names -------------------------------------------------------------------------------- */

static nb_expr *make_this(nb_checker *c, nb_loc loc) {
    nb_expr *t = ck_new_expr(c, NB_EX_NAME, loc);
    if (!t) return NULL;
    t->u.name.name = "this";
    t->ref = NB_REF_PARAM;
    t->index = -1;
    t->decl = c->fn;
    t->type = c->strct ? ck_struct_type(c, c->strct) : c->tt->t_error;
    t->is_lvalue = c->fn && c->fn->u.func.is_mutating;
    return t;
}

static int find_field(nb_decl *sd, const char *name) {
    for (int i = 0; i < sd->u.strct.nfields; i++)
        if (sd->u.strct.fields[i] && sd->u.strct.fields[i]->name &&
            strcmp(sd->u.strct.fields[i]->name, name) == 0)
            return i;
    return -1;
}

static nb_decl *find_static(nb_decl *sd, const char *name) {
    for (int i = 0; i < sd->u.strct.nstatics; i++)
        if (sd->u.strct.statics[i] && sd->u.strct.statics[i]->name &&
            strcmp(sd->u.strct.statics[i]->name, name) == 0)
            return sd->u.strct.statics[i];
    return NULL;
}

int ck_has_method(nb_decl *sd, const char *name) {
    for (int i = 0; i < sd->u.strct.nmethods; i++)
        if (sd->u.strct.methods[i] && sd->u.strct.methods[i]->name &&
            strcmp(sd->u.strct.methods[i]->name, name) == 0)
            return 1;
    return 0;
}

/* Resolves a name used as a type (struct, typedef, builtin); NULL if it is not a type. */
const nb_type *ck_name_as_type(nb_checker *c, const char *name, nb_loc loc) {
    nb_type_expr te;
    memset(&te, 0, sizeof te);
    te.loc = loc;
    te.name = name;
    /* quiet probe: only builtin spellings and user types */
    if (strcmp(name, "This") == 0 && c->strct) return ck_struct_type(c, c->strct); /* `G<This>` inside S */
    nb_decl *d[2];
    if (ck_lookup_global(c, name, NB_DECL_STRUCT, d, 2) > 0 || ck_lookup_global(c, name, NB_DECL_TYPEDEF, d, 2) > 0) {
        nb_type_expr *copy = ck_alloc(c, sizeof *copy);
        if (!copy) return NULL;
        *copy = te;
        return ck_resolve_type(c, copy);
    }
    return ck_builtin_type_name(c, name);
}

static const nb_type *check_name(nb_checker *c, nb_expr **slot) {
    nb_expr *e = *slot;
    const char *name = e->u.name.name ? e->u.name.name : "";
    if (strcmp(name, "this") == 0 && !(c->fn && c->fn->u.func.is_init)) { /* (in __init: a local) */
        if (!c->strct || !c->fn || (c->fn->mods & NB_MOD_STATIC)) {
            ck_err(c, e->loc, "'this' is only available inside a non-static method");
            return e->type = c->tt->t_error;
        }
        nb_expr *t = make_this(c, e->loc);
        if (t) *e = *t;
        return e->type;
    }
    nb_decl *d = ck_lookup_local(c, name);
    if (d) {
        if (d->kind == NB_DECL_PARAM) {
            e->ref = NB_REF_PARAM;
            e->index = d->u.param.index;
            e->type = d->u.param.type ? d->u.param.type : c->tt->t_error;
            e->is_lvalue = !(d->mods & NB_MOD_CONST);
        } else {
            e->ref = NB_REF_LOCAL;
            e->type = d->u.var.type ? d->u.var.type : c->tt->t_error;
            e->is_lvalue = !(d->mods & NB_MOD_CONST);
            if (e->type->kind == NB_TY_VOID) { /* `let r = voidCall();` */
                ck_err(c, e->loc, "'%s' was declared from a void expression: it holds no value", name);
                return e->type = c->tt->t_error;
            }
        }
        e->decl = d;
        return e->type;
    }
    if (c->strct) {
        int fi = find_field(c->strct, name);
        if (fi >= 0) {
            int in_init = c->fn && c->fn->u.func.is_init;
            if (c->fn && (c->fn->mods & NB_MOD_STATIC) && !in_init) {
                ck_err(c, e->loc, "field '%s' used in a static method", name);
                return e->type = c->tt->t_error;
            }
            /* rewrite `x` to `this.x` (in a constructor `this` is the object being built) */
            nb_expr *base = in_init ? ck_new_expr(c, NB_EX_NAME, e->loc) : make_this(c, e->loc);
            if (!base) return e->type = c->tt->t_error;
            if (in_init) {
                base->u.name.name = "this";
                if (ck_is_error(ck_expr(c, &base))) return e->type = c->tt->t_error;
            }
            nb_decl *fd = c->strct->u.strct.fields[fi];
            e->kind = NB_EX_MEMBER;
            memset(&e->u, 0, sizeof e->u);
            e->u.member.base = base;
            e->u.member.member = name;
            e->ref = NB_REF_FIELD;
            e->index = fi;
            e->decl = fd;
            e->type = fd->u.var.type ? fd->u.var.type : c->tt->t_error;
            e->is_lvalue = base->is_lvalue;
            return e->type;
        }
        nb_decl *sv = find_static(c->strct, name);
        if (sv) {
            ck_check_global_var(c, sv);
            e->ref = NB_REF_STATIC;
            e->decl = sv;
            e->type = sv->u.var.type ? sv->u.var.type : c->tt->t_error;
            return e->type;
        }
    }
    nb_decl *g[4];
    int n = ck_lookup_global(c, name, NB_DECL_VAR, g, 4);
    if (n > 0) {
        ck_check_global_var(c, g[0]);
        e->ref = NB_REF_GLOBAL;
        e->decl = g[0];
        e->type = g[0]->u.var.type ? g[0]->u.var.type : c->tt->t_error;
        e->is_lvalue = g[0]->u.var.shader_param >= 2; /* (groupshared: check_kernel.c) */
        return e->type;
    }
    if (ck_lookup_global(c, name, NB_DECL_FUNC, g, 4) > 0 || (c->strct && ck_has_method(c->strct, name))) {
        ck_err(c, e->loc, "'%s' is a function; call it with arguments", name);
        return e->type = c->tt->t_error;
    }
    if (nb_intrinsic_lookup(name) >= 0) {
        ck_err(c, e->loc, "'%s' is a built-in function; call it with arguments", name);
        return e->type = c->tt->t_error;
    }
    if (ck_name_as_type(c, name, e->loc)) {
        ck_err(c, e->loc, "'%s' is a type, not a value", name);
        return e->type = c->tt->t_error;
    }
    if (strcmp(name, "nullptr") == 0) return ck_nullptr(c, e); /* check_ptr.c */
    const nb_type *et = ck_enum_dotted_name(c, e); /* `f<E.A>`: the generic argument "E.A" */
    if (et) return et;
    if ((et = ck_enum_bare_case(c, e))) return et; /* `enum E { V = 1, X = V + 2 }` */
    ck_err(c, e->loc, "use of undeclared identifier '%s'", name);
    ck_note_hidden(c, name);
    return e->type = c->tt->t_error;
}

/* ---- members ------------------------------------------------------------------------------ */

static int swizzle_index(char ch, int *set) {
    const char *xyzw = "xyzw", *rgba = "rgba";
    for (int i = 0; i < 4; i++) {
        if (ch == xyzw[i]) { *set = 1; return i; }
        if (ch == rgba[i]) { *set = 2; return i; }
    }
    return -1;
}

static const nb_type *check_swizzle(nb_checker *c, nb_expr *e, const nb_type *bt) {
    const char *m = e->u.member.member;
    int n = (int)strlen(m), set = 0;
    int limit = bt->kind == NB_TY_SCALAR ? 1 : bt->cols;
    if (n < 1 || n > 4) {
        ck_err(c, e->loc, "no member named '%s' in '%s'", m, bt->name);
        return e->type = c->tt->t_error;
    }
    int used = 0, repeat = 0;
    for (int i = 0; i < n; i++) {
        int s = 0;
        int k = swizzle_index(m[i], &s);
        if (k < 0 || (set && s != set)) {
            ck_err(c, e->loc, "no member named '%s' in '%s'", m, bt->name);
            return e->type = c->tt->t_error;
        }
        set = s;
        if (k >= limit) {
            ck_err(c, e->loc, "swizzle component '%c' is out of range for '%s'", m[i], bt->name);
            return e->type = c->tt->t_error;
        }
        if (used & (1 << k)) repeat = 1;
        used |= 1 << k;
        e->u.member.swizzle[i] = k;
    }
    e->u.member.swizzle_len = n;
    e->ref = NB_REF_SWIZZLE;
    e->is_lvalue = e->u.member.base->is_lvalue && !repeat;
    return e->type = nb_type_vector(c->tt, bt->scalar, n);
}

/* `S.k` / `S::k` where the base names a type. Returns NULL if base is not a type name. */
/* Scalar type constants of Slang's core module: `int.maxValue`, `float.minValue` (the most
 * negative finite value), `T.getPi()` for float types: e becomes the literal. Returns 1 if
 * `member` is one of them (0: not handled). */
int ck_scalar_limit(nb_checker *c, nb_expr *e, const nb_type *t, const char *member) {
    int is_max = strcmp(member, "maxValue") == 0, is_min = strcmp(member, "minValue") == 0;
    int is_pi = strcmp(member, "getPi") == 0;
    nb_scalar_kind k = t->scalar;
    int is_f = k == NB_SC_HALF || k == NB_SC_FLOAT || k == NB_SC_DOUBLE;
    if (!is_max && !is_min && !(is_pi && is_f)) return 0;
    if (is_f) {
        double v = is_pi ? 3.14159265358979323846264338328
                   : k == NB_SC_HALF ? 65504.0 : k == NB_SC_FLOAT ? 3.40282346638528859811704183484516925440e38
                                                                : 1.7976931348623157e308;
        e->kind = NB_EX_FLOAT;
        memset(&e->u, 0, sizeof e->u);
        e->u.flit.value = v;
        e->u.flit.kind = k;
        if (is_min) { /* -(max) */
            nb_expr *lit = ck_new_expr(c, NB_EX_FLOAT, e->loc);
            if (!lit) return 0;
            *lit = *e;
            lit->type = t;
            e->kind = NB_EX_UNARY;
            memset(&e->u, 0, sizeof e->u);
            e->u.unary.op = NB_TOK_MINUS;
            e->u.unary.operand = lit;
        }
        e->ref = NB_REF_NONE;
        e->type = t;
        return 1;
    }
    uint64_t v = 0;
    int neg = 0;
    switch (k) {
    case NB_SC_BOOL: v = is_max; break;
    case NB_SC_INT: v = is_max ? 0x7FFFFFFFull : 0x80000000ull; neg = is_min; break;
    case NB_SC_UINT: v = is_max ? 0xFFFFFFFFull : 0; break;
    case NB_SC_INT64: v = is_max ? 0x7FFFFFFFFFFFFFFFull : 0x8000000000000000ull; neg = is_min; break;
    case NB_SC_UINT64: v = is_max ? 0xFFFFFFFFFFFFFFFFull : 0; break;
    default: return 0;
    }
    if (k == NB_SC_BOOL) {
        e->kind = NB_EX_BOOL;
        memset(&e->u, 0, sizeof e->u);
        e->u.blit = (int)v;
    } else {
        /* a cast of the literal, so that int.minValue is the int -2147483648 */
        nb_expr *lit = ck_new_expr(c, NB_EX_INT, e->loc);
        if (!lit) return 0;
        lit->u.ilit.value = neg ? (uint64_t)(-(int64_t)(v - 1)) - 1 : v;
        lit->u.ilit.is_unsigned = !neg && v > 0x7FFFFFFFFFFFFFFFull;
        lit->type = nb_type_scalar(c->tt, lit->u.ilit.is_unsigned ? NB_SC_UINT64 : NB_SC_INT64);
        e->kind = NB_EX_CAST;
        memset(&e->u, 0, sizeof e->u);
        e->u.cast.operand = lit;
        e->u.cast.implicit = 1;
    }
    e->ref = NB_REF_NONE;
    e->type = t;
    return 1;
}

static const nb_type *check_static_member(nb_checker *c, nb_expr *e) {
    nb_expr *b = e->u.member.base;
    const nb_type *t = NULL;
    { /* `E.A` / `E::A` of an enum E (check_enum.c) */
        const char *bn = b->kind == NB_EX_NAME ? b->u.name.name
                         : (b->kind == NB_EX_TYPE && !b->u.type.texpr->ntargs && !b->u.type.texpr->narray_dims)
                             ? b->u.type.texpr->name : NULL;
        nb_decl *ed = bn && !ck_lookup_local(c, bn) ? ck_find_enum(c, bn) : NULL;
        if (ed) {
            b->ref = NB_REF_TYPE;
            b->type = ck_name_as_type(c, bn, b->loc);
            if (!b->type) b->type = c->tt->t_error;
            return ck_enum_member(c, e, ed);
        }
    }
    if (b->kind == NB_EX_TYPE) t = ck_resolve_type(c, b->u.type.texpr);
    else if (b->kind == NB_EX_NAME && b->u.name.name && !ck_lookup_local(c, b->u.name.name)) {
        nb_decl *g[1];
        if (ck_lookup_global(c, b->u.name.name, NB_DECL_VAR, g, 1) > 0) return NULL;
        if (c->strct && find_field(c->strct, b->u.name.name) >= 0) return NULL;
        t = ck_name_as_type(c, b->u.name.name, b->loc);
    }
    if (!t) return NULL;
    b->ref = NB_REF_TYPE;
    b->type = t;
    if (ck_is_error(t)) return e->type = t;
    if (t->kind == NB_TY_SCALAR && ck_scalar_limit(c, e, t, e->u.member.member)) return e->type;
    if (t->kind != NB_TY_STRUCT) {
        ck_err(c, e->loc, "type '%s' has no static member '%s'", t->name, e->u.member.member);
        return e->type = c->tt->t_error;
    }
    nb_decl *sv = find_static(t->decl, e->u.member.member);
    if (!sv) {
        if (ck_has_method(t->decl, e->u.member.member))
            ck_err(c, e->loc, "method '%s' of '%s' must be called", e->u.member.member, t->name);
        else
            ck_err(c, e->loc, "'%s' has no static member '%s'", t->name, e->u.member.member);
        return e->type = c->tt->t_error;
    }
    ck_check_global_var(c, sv);
    e->ref = NB_REF_STATIC;
    e->decl = sv;
    return e->type = sv->u.var.type ? sv->u.var.type : c->tt->t_error;
}

/* Whether e was checked already (with success): parsed and cloned expressions have no type or
 * the error type until checked. Used where a base is checked ahead (properties, subscripts). */
int ck_checked(const nb_expr *e) { return e && e->type && !ck_is_error(e->type); }

/* Whether member expression e's base names a type (`S.k`, a static member), without reporting. */
static int check_static_member_probe(nb_checker *c, nb_expr *e) {
    nb_expr *b = e->u.member.base;
    if (b->kind == NB_EX_TYPE) return 1;
    if (b->kind != NB_EX_NAME || !b->u.name.name || ck_lookup_local(c, b->u.name.name)) return 0;
    if (strcmp(b->u.name.name, "this") == 0) return 0;
    nb_decl *g[1];
    if (ck_lookup_global(c, b->u.name.name, NB_DECL_VAR, g, 1) > 0) return 0;
    if (c->strct && find_field(c->strct, b->u.name.name) >= 0) return 0;
    return ck_name_as_type(c, b->u.name.name, b->loc) != NULL;
}

/* Turns e into the call `base.method(args)` (properties and `__subscript`: parser.c makes their
 * accessors methods named __get_p / __set_p / __subscript_get / __subscript_set); base is
 * checked, args are not. */
static const nb_type *accessor_call(nb_checker *c, nb_expr *e, nb_expr *base, const char *method, nb_expr **args,
                                    int nargs) {
    nb_expr *m = ck_new_expr(c, NB_EX_MEMBER, e->loc);
    nb_expr **a = ck_alloc(c, sizeof(nb_expr *) * (size_t)(nargs ? nargs : 1));
    if (!m || !a) return e->type = c->tt->t_error;
    m->u.member.base = base;
    m->u.member.member = method;
    for (int i = 0; i < nargs; i++) a[i] = args[i];
    e->kind = NB_EX_CALL;
    memset(&e->u, 0, sizeof e->u);
    e->u.call.callee = m;
    e->u.call.args = a;
    e->u.call.nargs = nargs;
    e->is_lvalue = 0;
    return ck_call_method(c, e, m, base->type->decl);
}

/* The accessor method `prefix` + member of struct type t when it exists (and no field of that
 * name does): "__get_p" for `s.p`. Returns the method name or NULL. */
static const char *accessor_name(nb_checker *c, const nb_type *t, const char *prefix, const char *member) {
    if (!t || t->kind != NB_TY_STRUCT || !t->decl) return NULL;
    if (member && find_field(t->decl, member) >= 0) return NULL;
    char buf[192];
    snprintf(buf, sizeof buf, "%s%s", prefix, member ? member : "");
    if (!ck_has_method(t->decl, buf)) return NULL;
    return nb_arena_strdup(c->arena, buf);
}

static const nb_type *check_member(nb_checker *c, nb_expr **slot) {
    nb_expr *e = *slot;
    if (!e->u.member.base || !e->u.member.member) return e->type = c->tt->t_error;
    /* `N.k` / `N::k` of a namespace N; `N.S.k` / `N.E.A` of a struct or enum in one (check_namespace.c) */
    if (e->u.member.base->kind == NB_EX_MEMBER && ck_namespace_member(c, e, NB_DECL_VAR)) return ck_expr(c, slot);
    if (e->u.member.base->kind == NB_EX_NAME && ck_namespace_member(c, e, NB_DECL_VAR)) return ck_expr(c, slot);
    if (e->u.member.base->kind == NB_EX_MEMBER && !ck_namespace_member(c, e->u.member.base, NB_DECL_STRUCT))
        ck_namespace_member(c, e->u.member.base, NB_DECL_TYPEDEF);
    if (ck_namespace_unknown_member(c, e)) return e->type;
    const nb_type *st = check_static_member(c, e);
    if (st) return st;
    if (e->u.member.is_static) {
        ck_err(c, e->loc, "'::' needs a type on its left");
        return e->type = c->tt->t_error;
    }
    const nb_type *vm = ck_view_member(c, slot); /* DiffTensorView .primal / .diff.diff (check_view.c) */
    if (vm) return vm;
    const nb_type *bt = ck_checked(e->u.member.base) ? e->u.member.base->type /* (by check_assign) */
                                                     : ck_expr(c, &e->u.member.base);
    const char *m = e->u.member.member;
    if (ck_is_error(bt)) return e->type = c->tt->t_error;
    switch (bt->kind) {
    case NB_TY_SCALAR:
    case NB_TY_VECTOR: return check_swizzle(c, e, bt);
    case NB_TY_MATRIX: /* m._11, m._m00_m11 (check_swizzle.c) */
        if (m[0] == '_') return ck_matrix_swizzle(c, slot, bt);
        ck_err(c, e->loc, "no member named '%s' in '%s'", m, bt->name);
        return e->type = c->tt->t_error;
    case NB_TY_STRUCT: {
        nb_decl *sd = bt->decl;
        ck_struct_type(c, sd);
        int fi = find_field(sd, m);
        if (fi >= 0) {
            nb_decl *fd = sd->u.strct.fields[fi];
            if (!ck_check_member_access(c, sd, fd, e->loc)) return e->type = c->tt->t_error;
            e->ref = NB_REF_FIELD;
            e->index = fi;
            e->decl = fd;
            e->is_lvalue = e->u.member.base->is_lvalue;
            return e->type = fd->u.var.type ? fd->u.var.type : c->tt->t_error;
        }
        nb_decl *sv = find_static(sd, m);
        if (sv) {
            if (!ck_check_member_access(c, sd, sv, e->loc)) return e->type = c->tt->t_error;
            ck_check_global_var(c, sv);
            e->ref = NB_REF_STATIC;
            e->decl = sv;
            return e->type = sv->u.var.type ? sv->u.var.type : c->tt->t_error;
        }
        if (ck_has_method(sd, m)) {
            ck_err(c, e->loc, "method '%s' of '%s' must be called", m, bt->name);
            return e->type = c->tt->t_error;
        }
        const char *getter = accessor_name(c, bt, "__get_", m);
        if (getter) return accessor_call(c, e, e->u.member.base, getter, NULL, 0); /* a property */
        if (accessor_name(c, bt, "__set_", m)) {
            ck_err(c, e->loc, "property '%s' of '%s' has no 'get' accessor", m, bt->name);
            return e->type = c->tt->t_error;
        }
        ck_err(c, e->loc, "no member named '%s' in '%s'", m, bt->name);
        return e->type = c->tt->t_error;
    }
    case NB_TY_DIFFPAIR: {
        if (strcmp(m, "p") == 0 || strcmp(m, "primal") == 0) {
            e->ref = NB_REF_FIELD;
            e->index = 0;
            e->is_lvalue = e->u.member.base->is_lvalue;
            return e->type = bt->elem;
        }
        if (strcmp(m, "d") == 0 || strcmp(m, "differential") == 0) {
            const nb_type *d = nb_type_differential(c->tt, bt->elem);
            e->ref = NB_REF_FIELD;
            e->index = 1;
            e->is_lvalue = e->u.member.base->is_lvalue;
            return e->type = d ? d : c->tt->t_error;
        }
        ck_err(c, e->loc, "no member named '%s' in '%s' (use .p or .d)", m, bt->name);
        return e->type = c->tt->t_error;
    }
    default:
        ck_err(c, e->loc, "no member named '%s' in '%s'", m, bt->name);
        return e->type = c->tt->t_error;
    }
}

/* ---- indexing ----------------------------------------------------------------------------- */

static int check_index_value(nb_checker *c, nb_expr **slot) {
    const nb_type *t = ck_expr(c, slot);
    if (ck_is_error(t)) return 1;
    if (t->kind != NB_TY_SCALAR || is_float_kind(t->scalar)) {
        ck_err(c, (*slot)->loc, "index must be an integer, got '%s'", t->name);
        return 0;
    }
    return ck_coerce(c, slot, c->tt->t_int, "index");
}

static const nb_type *check_index(nb_checker *c, nb_expr **slot) {
    nb_expr *e = *slot;
    const nb_type *bt = ck_checked(e->u.index.base) ? e->u.index.base->type /* (by check_assign) */
                                                    : ck_expr(c, &e->u.index.base);
    int n = e->u.index.nindices;
    const char *getter = accessor_name(c, bt, "__subscript_get", NULL);
    if (getter) return accessor_call(c, e, e->u.index.base, getter, e->u.index.indices, n); /* s[i] */
    if (ck_is_error(bt)) {
        for (int i = 0; i < n; i++) ck_expr(c, &e->u.index.indices[i]);
        return e->type = c->tt->t_error;
    }
    if (bt->kind == NB_TY_PTR) return ck_ptr_index(c, slot); /* check_ptr.c */
    if (bt->kind == NB_TY_TENSOR && ck_host_view_use(c, e->loc)) { /* (check_host.c) */
        for (int i = 0; i < n; i++) ck_expr(c, &e->u.index.indices[i]);
        return e->type = c->tt->t_error;
    }
    if (bt->kind == NB_TY_TENSOR) {
        e->is_lvalue = bt->buffer != 2; /* (StructuredBuffer is read-only) */
        e->type = bt->elem;
        if (n == 1) {
            const nb_type *it = ck_expr(c, &e->u.index.indices[0]);
            if (ck_is_error(it)) return e->type;
            if (it->kind == NB_TY_VECTOR && !is_float_kind(it->scalar)) {
                if (it->cols != bt->rank) {
                    ck_err(c, e->loc, "'%s' needs %d indices, got a '%s'", bt->name, bt->rank, it->name);
                    return e->type = c->tt->t_error;
                }
                ck_coerce(c, &e->u.index.indices[0], nb_type_vector(c->tt, NB_SC_INT, bt->rank), "index");
                return e->type;
            }
            if (it->kind != NB_TY_SCALAR || is_float_kind(it->scalar)) {
                ck_err(c, e->u.index.indices[0]->loc, "index must be an integer, got '%s'", it->name);
                return e->type = c->tt->t_error;
            }
            ck_coerce(c, &e->u.index.indices[0], c->tt->t_int, "index");
            if (bt->rank != 1) {
                ck_err(c, e->loc, "'%s' needs %d indices, got 1", bt->name, bt->rank);
                return e->type = c->tt->t_error;
            }
            return e->type;
        }
        for (int i = 0; i < n; i++) check_index_value(c, &e->u.index.indices[i]);
        if (n != bt->rank) {
            ck_err(c, e->loc, "'%s' needs %d indices, got %d", bt->name, bt->rank, n);
            return e->type = c->tt->t_error;
        }
        return e->type;
    }
    if (n != 1) {
        for (int i = 0; i < n; i++) ck_expr(c, &e->u.index.indices[i]);
        ck_err(c, e->loc, "'%s' takes one index, got %d", bt->name, n);
        return e->type = c->tt->t_error;
    }
    if (!check_index_value(c, &e->u.index.indices[0])) return e->type = c->tt->t_error;
    int64_t k;
    int limit = 0;
    switch (bt->kind) {
    case NB_TY_ARRAY: e->type = bt->elem; limit = bt->length; break;
    case NB_TY_VECTOR: e->type = nb_type_scalar(c->tt, bt->scalar); limit = bt->cols; break;
    case NB_TY_MATRIX: e->type = nb_type_vector(c->tt, bt->scalar, bt->cols); limit = bt->rows; break;
    default:
        ck_err(c, e->loc, "cannot index a value of type '%s'", bt->name);
        return e->type = c->tt->t_error;
    }
    if (ck_const_int(e->u.index.indices[0], &k) && (k < 0 || k >= limit)) {
        ck_err(c, e->u.index.indices[0]->loc, "index %lld is out of bounds for '%s'", (long long)k, bt->name);
        return e->type = c->tt->t_error;
    }
    e->is_lvalue = e->u.index.base->is_lvalue;
    return e->type;
}

/* ---- operators ---------------------------------------------------------------------------- */

static int is_compare(int op) {
    return op == NB_TOK_LT || op == NB_TOK_GT || op == NB_TOK_LE || op == NB_TOK_GE ||
           op == NB_TOK_EQ || op == NB_TOK_NE;
}

static int is_bitwise(int op) {
    return op == NB_TOK_AMP || op == NB_TOK_PIPE || op == NB_TOK_CARET || op == NB_TOK_SHL ||
           op == NB_TOK_SHR;
}

static int compound_to_binary(int op) {
    switch (op) {
    case NB_TOK_PLUS_ASSIGN: return NB_TOK_PLUS;
    case NB_TOK_MINUS_ASSIGN: return NB_TOK_MINUS;
    case NB_TOK_STAR_ASSIGN: return NB_TOK_STAR;
    case NB_TOK_SLASH_ASSIGN: return NB_TOK_SLASH;
    case NB_TOK_PERCENT_ASSIGN: return NB_TOK_PERCENT;
    case NB_TOK_AMP_ASSIGN: return NB_TOK_AMP;
    case NB_TOK_PIPE_ASSIGN: return NB_TOK_PIPE;
    case NB_TOK_CARET_ASSIGN: return NB_TOK_CARET;
    case NB_TOK_SHL_ASSIGN: return NB_TOK_SHL;
    case NB_TOK_SHR_ASSIGN: return NB_TOK_SHR;
    default: return 0;
    }
}

/* Operand type of arithmetic/bitwise/comparison `a op b`; NULL after an error. */
static const nb_type *binary_operand_type(nb_checker *c, nb_loc loc, int op, const nb_type *a,
                                          const nb_type *b) {
    const char *opn = nb_tok_name((nb_tok_kind)op);
    int keep_bool = op == NB_TOK_EQ || op == NB_TOK_NE || op == NB_TOK_AMP || op == NB_TOK_PIPE ||
                    op == NB_TOK_CARET;
    const nb_type *t = common_type(c, loc, a, b, opn, keep_bool);
    if (!t) return NULL;
    if (is_bitwise(op) && is_float_kind(t->scalar)) {
        ck_err(c, loc, "operator %s requires integer operands ('%s' and '%s')", opn, a->name, b->name);
        return NULL;
    }
    return t;
}

/* "+" for NB_TOK_PLUS (the operator's spelling, as in `operator+`). */
static const char *op_spelling(int op) {
    const char *n = nb_tok_name((nb_tok_kind)op); /* "'+'" */
    static char buf[8];
    size_t len = n ? strlen(n) : 0;
    if (len >= 3 && n[0] == '\'' && len - 2 < sizeof buf) {
        memcpy(buf, n + 1, len - 2);
        buf[len - 2] = 0;
        return buf;
    }
    return "?";
}

static const nb_type *check_binary(nb_checker *c, nb_expr **slot) {
    nb_expr *e = *slot;
    int op = e->u.binary.op;
    const nb_type *a = ck_expr(c, &e->u.binary.lhs);
    const nb_type *b = ck_expr(c, &e->u.binary.rhs);
    if (op == NB_TOK_COMMA) return e->type = b; /* for-loop init/step lists */
    if (ck_is_error(a) || ck_is_error(b)) return e->type = c->tt->t_error;
    if (a->kind == NB_TY_PTR || b->kind == NB_TY_PTR) return ck_ptr_binary(c, slot, a, b); /* check_ptr.c */
    if (a->kind == NB_TY_STRUCT || b->kind == NB_TY_STRUCT) { /* user operators */
        char opname[24];
        snprintf(opname, sizeof opname, "operator%s", op_spelling(op));
        nb_expr *args[2] = {e->u.binary.lhs, e->u.binary.rhs};
        const nb_type *r = ck_call_operator(c, slot, opname, args, 2);
        if (r) return r;
    }
    if (op == NB_TOK_ANDAND || op == NB_TOK_OROR) {
        const char *opn = nb_tok_name((nb_tok_kind)op);
        int ok = 1;
        const nb_type *ts[2] = {a, b};
        for (int i = 0; i < 2; i++) {
            if (ts[i]->kind != NB_TY_SCALAR) {
                ck_err(c, i ? e->u.binary.rhs->loc : e->u.binary.lhs->loc,
                       "operator %s requires scalar operands, got '%s' (use and()/or() or select() "
                       "for vectors)", opn, ts[i]->name);
                ok = 0;
            }
        }
        if (!ok) return e->type = c->tt->t_error;
        ck_coerce(c, &e->u.binary.lhs, c->tt->t_bool, NULL);
        ck_coerce(c, &e->u.binary.rhs, c->tt->t_bool, NULL);
        return e->type = c->tt->t_bool;
    }
    const nb_type *t = binary_operand_type(c, e->loc, op, a, b);
    if (!t) return e->type = c->tt->t_error;
    ck_coerce(c, &e->u.binary.lhs, t, NULL);
    ck_coerce(c, &e->u.binary.rhs, t, NULL);
    if (is_compare(op)) return e->type = with_kind(c, t, NB_SC_BOOL);
    return e->type = t;
}

static const nb_type *check_unary(nb_checker *c, nb_expr **slot) {
    nb_expr *e = *slot;
    if (e->u.unary.op == NB_TOK_STAR || e->u.unary.op == NB_TOK_AMP) return ck_ptr_unary(c, slot); /* check_ptr.c */
    const nb_type *t = ck_expr(c, &e->u.unary.operand);
    int op = e->u.unary.op;
    if (ck_is_error(t)) return e->type = t;
    if (op == NB_TOK_KW_NO_DIFF) { /* `no_diff expr`: the value, without derivative */
        if (t->kind == NB_TY_VOID) {
            ck_err(c, e->loc, "'no_diff' needs a value");
            return e->type = c->tt->t_error;
        }
        return e->type = t;
    }
    const char *opn = nb_tok_name((nb_tok_kind)op);
    if (t->kind == NB_TY_STRUCT && op != NB_TOK_INC && op != NB_TOK_DEC) { /* `-s`: operator- with 1 argument */
        char opname[24];
        snprintf(opname, sizeof opname, "operator%s", op_spelling(op));
        nb_expr *args[1] = {e->u.unary.operand};
        const nb_type *r = ck_call_operator(c, slot, opname, args, 1);
        if (r) return r;
    }
    if (!is_value_shape(t)) {
        ck_err(c, e->loc, "invalid operand to unary %s ('%s')", opn, t->name);
        return e->type = c->tt->t_error;
    }
    switch (op) {
    case NB_TOK_INC:
    case NB_TOK_DEC:
        if (t->scalar == NB_SC_BOOL) {
            ck_err(c, e->loc, "invalid operand to %s ('%s')", opn, t->name);
            return e->type = c->tt->t_error;
        }
        if (!e->u.unary.operand->is_lvalue) {
            report_not_lvalue(c, e->u.unary.operand, "expression is not assignable");
            return e->type = c->tt->t_error;
        }
        return e->type = t;
    case NB_TOK_NOT: {
        const nb_type *r = with_kind(c, t, NB_SC_BOOL);
        ck_coerce(c, &e->u.unary.operand, r, NULL);
        return e->type = r;
    }
    case NB_TOK_TILDE:
        if (!ck_is_int_scalar_kind(t->scalar)) {
            ck_err(c, e->loc, "operator %s requires an integer operand ('%s')", opn, t->name);
            return e->type = c->tt->t_error;
        }
        return e->type = t;
    default: { /* - + */
        const nb_type *r = t->scalar == NB_SC_BOOL ? with_kind(c, t, NB_SC_INT) : t;
        ck_coerce(c, &e->u.unary.operand, r, NULL);
        return e->type = r;
    }
    }
}

static const nb_type *check_assign(nb_checker *c, nb_expr **slot) {
    nb_expr *e = *slot;
    nb_expr *lhs = e->u.assign.lhs;
    const nb_type *ga = ck_view_grad_assign(c, slot); /* DiffTensorView `v.diff.diff = g` (check_view.c) */
    if (ga) return ga;
    if (lhs && lhs->kind == NB_EX_MEMBER && !lhs->u.member.is_static && lhs->u.member.base && !ck_checked(lhs) &&
        !check_static_member_probe(c, lhs)) {
        /* `s.p = v` with p a property: s.__set_p(v) */
        const nb_type *bt = ck_expr(c, &lhs->u.member.base);
        if (ck_is_error(bt)) return e->type = bt;
        const nb_type *pa = ck_view_primal_assign(c, slot, bt); /* DiffTensorView `v.primal = t` */
        if (pa) return pa;
        const char *setter = accessor_name(c, bt, "__set_", lhs->u.member.member);
        if (setter) {
            if (e->u.assign.op != NB_TOK_ASSIGN) {
                ck_err(c, e->loc, "compound assignment to property '%s' is not supported; write 's.%s = s.%s op v'",
                       lhs->u.member.member, lhs->u.member.member, lhs->u.member.member);
                return e->type = c->tt->t_error;
            }
            nb_expr *rhs = e->u.assign.rhs;
            return accessor_call(c, e, lhs->u.member.base, setter, &rhs, 1);
        }
    }
    if (lhs && lhs->kind == NB_EX_INDEX && lhs->u.index.base && !ck_checked(lhs)) {
        /* `s[i] = v` with a __subscript setter: s.__subscript_set(i, v) */
        const nb_type *bt = ck_expr(c, &lhs->u.index.base);
        if (ck_is_error(bt)) return e->type = bt;
        const char *setter = accessor_name(c, bt, "__subscript_set", NULL);
        if (setter && e->u.assign.op == NB_TOK_ASSIGN && lhs->u.index.nindices < 16) {
            nb_expr *args[17];
            int n = lhs->u.index.nindices;
            for (int i = 0; i < n; i++) args[i] = lhs->u.index.indices[i];
            args[n] = e->u.assign.rhs;
            return accessor_call(c, e, lhs->u.index.base, setter, args, n + 1);
        }
    }
    const nb_type *lt = ck_expr(c, &e->u.assign.lhs);
    int op = e->u.assign.op;
    if (!e->u.assign.lhs->is_lvalue && !ck_is_error(lt)) {
        report_not_lvalue(c, e->u.assign.lhs, "expression is not assignable");
        lt = c->tt->t_error;
    }
    if (op == NB_TOK_ASSIGN) {
        ck_expr_to(c, &e->u.assign.rhs, lt, "assignment");
        return e->type = lt;
    }
    const nb_type *rt = ck_expr(c, &e->u.assign.rhs);
    if (ck_is_error(lt) || ck_is_error(rt)) return e->type = c->tt->t_error;
    int bop = compound_to_binary(op);
    const nb_type *t = binary_operand_type(c, e->loc, bop, lt, rt);
    if (!t) return e->type = c->tt->t_error;
    if (nb_check_conversion_cost(t, lt) < 0) {
        report_conv_error(c, e->loc, t, lt, "compound assignment");
        return e->type = c->tt->t_error;
    }
    ck_coerce(c, &e->u.assign.rhs, lt, "compound assignment");
    return e->type = lt;
}

static const nb_type *check_ternary(nb_checker *c, nb_expr **slot) {
    nb_expr *e = *slot;
    const nb_type *ct = ck_expr(c, &e->u.ternary.cond);
    const nb_type *a = ck_expr(c, &e->u.ternary.then_e);
    const nb_type *b = ck_expr(c, &e->u.ternary.else_e);
    if (ck_is_error(ct) || ck_is_error(a) || ck_is_error(b)) return e->type = c->tt->t_error;
    const nb_type *t;
    if (a == b) t = a;
    else {
        t = common_type(c, e->loc, a, b, "'?:'", 1);
        if (!t) return e->type = c->tt->t_error;
    }
    if (ct->kind == NB_TY_SCALAR) {
        ck_coerce(c, &e->u.ternary.cond, c->tt->t_bool, "condition");
    } else if (ct->kind == NB_TY_VECTOR) {
        /* element-wise select */
        if (t->kind == NB_TY_SCALAR) t = nb_type_vector(c->tt, t->scalar, ct->cols);
        if (t->kind != NB_TY_VECTOR || t->cols != ct->cols) {
            ck_err(c, e->loc, "vector condition '%s' needs operands with %d components, got '%s'",
                   ct->name, ct->cols, t->name);
            return e->type = c->tt->t_error;
        }
        ck_coerce(c, &e->u.ternary.cond, nb_type_vector(c->tt, NB_SC_BOOL, ct->cols), "condition");
    } else {
        ck_err(c, e->u.ternary.cond->loc, "condition must be a scalar or vector, got '%s'", ct->name);
        return e->type = c->tt->t_error;
    }
    if (t->kind == NB_TY_VOID) {
        ck_err(c, e->loc, "'?:' operands must have a value");
        return e->type = c->tt->t_error;
    }
    ck_coerce(c, &e->u.ternary.then_e, t, NULL);
    ck_coerce(c, &e->u.ternary.else_e, t, NULL);
    return e->type = t;
}

static const nb_type *check_cast(nb_checker *c, nb_expr **slot) {
    nb_expr *e = *slot;
    const nb_type *to = e->u.cast.texpr ? ck_resolve_type(c, e->u.cast.texpr) : e->type;
    const nb_type *from = ck_expr(c, &e->u.cast.operand);
    if (ck_is_error(to) || ck_is_error(from)) return e->type = to ? to : c->tt->t_error;
    e->type = to;
    if (from == to) return to;
    if (from->kind == NB_TY_PTR && to->kind == NB_TY_PTR) return to; /* pointer casts (check_ptr.c) */
    if (nb_check_conversion_cost(from, to) < 0) {
        report_conv_error(c, e->loc, from, to, "cast");
        return e->type = c->tt->t_error;
    }
    return to;
}

/* ---- init lists --------------------------------------------------------------------------- */

/* Completes `{a}` for a struct of more fields: each missing field takes its default
 * (`float x = 1;` in the struct) or the zero value `{}`. */
static int fill_struct_list(nb_checker *c, nb_expr *e, nb_decl *sd) {
    int nf = sd->u.strct.nfields, n = e->u.init_list.nitems;
    nb_expr **items = ck_alloc(c, sizeof(nb_expr *) * (size_t)nf);
    if (!items) return 0;
    for (int i = 0; i < n; i++) items[i] = e->u.init_list.items[i];
    for (int i = n; i < nf; i++) {
        nb_decl *fd = sd->u.strct.fields[i];
        nb_expr *d = fd && fd->u.var.init && fd->u.var.init->kind != NB_EX_INIT_LIST ? fd->u.var.init : NULL;
        if (d) {
            /* the field's (checked) default: a cast of it to the field type re-checks nothing */
            nb_expr *k = ck_new_expr(c, NB_EX_CAST, e->loc);
            if (!k) return 0;
            k->u.cast.operand = d;
            k->u.cast.implicit = 1;
            k->type = fd->u.var.type;
            items[i] = k;
        } else {
            nb_expr *z = ck_new_expr(c, NB_EX_INIT_LIST, e->loc); /* {} : zero */
            if (!z) return 0;
            items[i] = z;
        }
    }
    e->u.init_list.items = items;
    e->u.init_list.nitems = nf;
    return 1;
}

/* ---- brace elision: `A a = {1.0, 2.0}` for struct A { B b; float y; } with B { float x; } ---- */

/* A number (or a negated one): never an aggregate, so before a struct/array member it starts
 * that member's elided braces. (Other expressions are not elided: only their type could say.) */
static int is_number_literal(const nb_expr *x) {
    while (x && x->kind == NB_EX_UNARY && !x->u.unary.postfix &&
           (x->u.unary.op == NB_TOK_MINUS || x->u.unary.op == NB_TOK_PLUS))
        x = x->u.unary.operand;
    return x && (x->kind == NB_EX_INT || x->kind == NB_EX_FLOAT || x->kind == NB_EX_BOOL);
}

/* An aggregate whose members an init list lists: arrays and structs without constructors. */
static int elidable(const nb_type *t) {
    return t && (t->kind == NB_TY_ARRAY ||
                 (t->kind == NB_TY_STRUCT && t->decl && !ck_has_method(t->decl, "__init")));
}

/* Members of aggregate `to` in order (shapes: an array's `length` elements, a struct's fields). */
static int member_count(const nb_type *to) {
    return to->kind == NB_TY_ARRAY ? to->length : to->decl->u.strct.nfields;
}
static const nb_type *member_type(const nb_type *to, int i) {
    return to->kind == NB_TY_ARRAY ? to->elem : to->decl->u.strct.fields[i]->u.var.type;
}

/* Takes items[*pos..] for the members of `to` (as C/Slang do when braces are left out): a
 * number before an aggregate member opens that member's braces; the list ends when the
 * items do. Returns the init list for `to` (NULL: out of memory). */
static nb_expr *elide_group(nb_checker *c, nb_expr **items, int n, int *pos, const nb_type *to, nb_loc loc) {
    int m = member_count(to);
    nb_expr *g = ck_new_expr(c, NB_EX_INIT_LIST, loc);
    nb_expr **out = ck_alloc(c, sizeof(nb_expr *) * (size_t)(m > 0 ? m : 1));
    if (!g || !out) return NULL;
    int k = 0;
    for (int i = 0; i < m && *pos < n; i++) {
        const nb_type *mt = member_type(to, i);
        if (elidable(mt) && is_number_literal(items[*pos])) {
            if (mt->kind == NB_TY_STRUCT) ck_struct_type(c, mt->decl);
            if (!(out[k++] = elide_group(c, items, n, pos, mt, items[*pos]->loc))) return NULL;
        } else {
            out[k++] = items[(*pos)++];
        }
    }
    g->u.init_list.items = out;
    g->u.init_list.nitems = k;
    return g;
}

/* Rewrites e's items with the elided braces put back when a number stands where an aggregate
 * member starts; leaves e alone otherwise (and when items are left over: the count error). */
static int elide_braces(nb_checker *c, nb_expr *e, const nb_type *to) {
    int n = e->u.init_list.nitems, m = member_count(to), need = 0;
    for (int i = 0; i < n && i < m; i++)
        if (elidable(member_type(to, i)) && is_number_literal(e->u.init_list.items[i])) need = 1;
    if (!need) return 1;
    int pos = 0;
    nb_expr *g = elide_group(c, e->u.init_list.items, n, &pos, to, e->loc);
    if (!g) return 0;
    if (pos < n) return 1; /* too many: reported as written */
    e->u.init_list.items = g->u.init_list.items;
    e->u.init_list.nitems = g->u.init_list.nitems;
    return 1;
}

const nb_type *ck_init_list(nb_checker *c, nb_expr *e, const nb_type *to) {
    if (!ck_is_error(to) && e->u.init_list.nitems > 0 && elidable(to)) {
        if (to->kind == NB_TY_STRUCT) ck_struct_type(c, to->decl);
        if (!elide_braces(c, e, to)) return e->type = c->tt->t_error;
    }
    int n = e->u.init_list.nitems;
    nb_expr **items = e->u.init_list.items;
    e->type = to;
    if (ck_is_error(to)) {
        for (int i = 0; i < n; i++)
            if (items[i]->kind != NB_EX_INIT_LIST) ck_expr(c, &items[i]);
        return to;
    }
    if (n == 0) return to; /* {} is the zero value */
    char what[96];
    switch (to->kind) {
    case NB_TY_ARRAY:
        if (n != to->length) goto count;
        for (int i = 0; i < n; i++) {
            snprintf(what, sizeof what, "element %d of the initializer", i);
            ck_expr_to(c, &items[i], to->elem, what);
        }
        return to;
    case NB_TY_STRUCT: {
        nb_decl *sd = to->decl;
        ck_struct_type(c, sd);
        if (ck_has_method(sd, "__init")) { /* with constructors, `{a, b}` calls the matching one */
            nb_type_expr *te = ck_alloc(c, sizeof *te);
            nb_expr *callee = ck_new_expr(c, NB_EX_TYPE, e->loc);
            if (!te || !callee) return e->type = c->tt->t_error;
            te->loc = e->loc;
            te->name = to->name;
            te->subst = to;
            callee->u.type.texpr = te;
            e->kind = NB_EX_CALL;
            memset(&e->u, 0, sizeof e->u);
            e->u.call.callee = callee;
            e->u.call.args = items;
            e->u.call.nargs = n;
            nb_expr *slot = e;
            return ck_call(c, &slot);
        }
        /* fewer initializers than fields (Slang, as C): the rest are zero or their defaults */
        if (n > sd->u.strct.nfields) goto count;
        int given = n;
        if (n < sd->u.strct.nfields && !fill_struct_list(c, e, sd)) return e->type = c->tt->t_error;
        n = e->u.init_list.nitems;
        items = e->u.init_list.items;
        for (int i = 0; i < n; i++) {
            nb_decl *fd = sd->u.strct.fields[i];
            if (i >= given && items[i]->kind == NB_EX_CAST) continue; /* a default, checked with the struct */
            snprintf(what, sizeof what, "initializer of field '%s'", fd->name ? fd->name : "?");
            ck_expr_to(c, &items[i], fd->u.var.type ? fd->u.var.type : c->tt->t_error, what);
        }
        return to;
    }
    case NB_TY_SCALAR:
        if (n != 1) goto count;
        ck_expr_to(c, &items[0], to, "initializer");
        return to;
    case NB_TY_VECTOR:
    case NB_TY_MATRIX: {
        const nb_type *row = to->kind == NB_TY_MATRIX ? nb_type_vector(c->tt, to->scalar, to->cols) : NULL;
        const nb_type *el = row && n == to->rows ? row : nb_type_scalar(c->tt, to->scalar);
        if (n != nb_type_components(to) && !(row && n == to->rows)) goto count;
        for (int i = 0; i < n; i++) ck_expr_to(c, &items[i], el, "initializer");
        return to;
    }
    default:
        ck_err(c, e->loc, "an initializer list cannot initialize a '%s'", to->name);
        for (int i = 0; i < n; i++)
            if (items[i]->kind != NB_EX_INIT_LIST) ck_expr(c, &items[i]);
        return e->type = c->tt->t_error;
    }
count:
    ck_err(c, e->loc, "wrong number of initializers for '%s': expected %d, got %d", to->name,
           to->kind == NB_TY_ARRAY    ? to->length
           : to->kind == NB_TY_STRUCT ? to->decl->u.strct.nfields
                                      : nb_type_components(to),
           n);
    for (int i = 0; i < n; i++)
        if (items[i]->kind != NB_EX_INIT_LIST) ck_expr(c, &items[i]);
    return e->type = c->tt->t_error;
}

/* ---- dispatcher --------------------------------------------------------------------------- */

const nb_type *ck_expr(nb_checker *c, nb_expr **slot) {
    nb_expr *e = slot ? *slot : NULL;
    if (!e) return c->tt->t_error;
    e->is_lvalue = 0;
    switch (e->kind) {
    case NB_EX_INT:
        if (e->u.ilit.is_unsigned) e->type = e->u.ilit.value > 0xFFFFFFFFull ? nb_type_scalar(c->tt, NB_SC_UINT64) : c->tt->t_uint;
        else if (e->u.ilit.value <= 0x7FFFFFFFull) e->type = c->tt->t_int;
        else if (e->u.ilit.value <= 0xFFFFFFFFull) e->type = c->tt->t_uint;
        else e->type = nb_type_scalar(c->tt, NB_SC_INT64);
        return e->type;
    case NB_EX_FLOAT: {
        nb_scalar_kind k = e->u.flit.kind;
        if (k != NB_SC_HALF && k != NB_SC_DOUBLE) k = NB_SC_FLOAT;
        e->u.flit.kind = k;
        return e->type = nb_type_scalar(c->tt, k);
    }
    case NB_EX_BOOL: return e->type = c->tt->t_bool;
    case NB_EX_NAME: return check_name(c, slot);
    case NB_EX_UNARY: return check_unary(c, slot);
    case NB_EX_BINARY: return check_binary(c, slot);
    case NB_EX_ASSIGN: return check_assign(c, slot);
    case NB_EX_TERNARY: return check_ternary(c, slot);
    case NB_EX_CALL: return ck_call(c, slot);
    case NB_EX_MEMBER: return check_member(c, slot);
    case NB_EX_INDEX: return check_index(c, slot);
    case NB_EX_TYPE: {
        const nb_type *t = ck_resolve_type(c, e->u.type.texpr);
        if (!ck_is_error(t)) ck_err(c, e->loc, "type '%s' used as a value", t->name);
        return e->type = c->tt->t_error;
    }
    case NB_EX_CAST:
        if (e->u.cast.implicit && !e->u.cast.texpr) return e->type; /* already checked */
        return check_cast(c, slot);
    case NB_EX_INIT_LIST:
        ck_err(c, e->loc, "an initializer list needs a declared type (use it to initialize a variable)");
        for (int i = 0; i < e->u.init_list.nitems; i++)
            if (e->u.init_list.items[i]->kind != NB_EX_INIT_LIST) ck_expr(c, &e->u.init_list.items[i]);
        return e->type = c->tt->t_error;
    case NB_EX_STRING:
        ck_err(c, e->loc, "string literals are only supported as the format of printf");
        return e->type = c->tt->t_error;
    }
    return e->type = c->tt->t_error;
}

/* exported for check_call.c */
void ck_report_not_lvalue(nb_checker *c, const nb_expr *e, const char *what) {
    report_not_lvalue(c, e, what);
}
const nb_type *ck_common_type(nb_checker *c, nb_loc loc, const nb_type *a, const nb_type *b,
                              const char *op, int keep_bool) {
    return common_type(c, loc, a, b, op, keep_bool);
}
const nb_type *ck_with_kind(nb_checker *c, const nb_type *t, nb_scalar_kind k) {
    return with_kind(c, t, k);
}

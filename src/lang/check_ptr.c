/* Checker: Slang pointers.
 *
 *   Ptr<T> / T*        a pointer to T (Ptr's Access / AddressSpace arguments are accepted and
 *                      ignored); Ptr<void> is the type of nullptr, which converts to any pointer
 *   *p, p[i], p->f     the pointee (an lvalue); p->f is (*p).f (parser)
 *   &x, __getAddress(x) the address of an lvalue that lives in a variable: a local, parameter,
 *                      field or array element (not a swizzle, a tensor element or a temporary)
 *   p + i, p - i       pointer arithmetic (elements); p == q, p != q (also against nullptr)
 *   (T*)p, (Ptr<T>)p   casts between pointer types
 *
 * Pointers are not differentiable (derivatives of values loaded through them are zero).
 */
#include <stdio.h>
#include <string.h>

#include "lang/check_internal.h"
#include "lang/lexer.h"

const nb_type *ck_resolve_ptr_type(nb_checker *c, nb_type_expr *te) {
    if (te->ntargs < 1 || !te->targs || !te->targs[0]) {
        ck_err(c, te->loc, "'Ptr' takes the pointee type as its first generic argument");
        return c->tt->t_error;
    }
    const nb_type *e = ck_resolve_type(c, te->targs[0]);
    if (ck_is_error(e)) return e;
    if (e->kind == NB_TY_TENSOR || e->kind == NB_TY_FUNC) {
        ck_err(c, te->loc, "pointers to '%s' are not supported", e->name);
        return c->tt->t_error;
    }
    return nb_type_ptr(c->tt, e);
}

/* Does the lvalue expression live in a variable (so that its address can be taken)? */
static int addressable(const nb_expr *e) {
    switch (e->kind) {
    case NB_EX_NAME: /* (a writable global: a groupshared array or a shader parameter, check_kernel.c) */
        return e->ref == NB_REF_LOCAL || e->ref == NB_REF_PARAM || (e->ref == NB_REF_GLOBAL && e->is_lvalue);
    case NB_EX_MEMBER:
        if (e->ref == NB_REF_SWIZZLE) return 0;
        return e->u.member.base && e->u.member.base->type && e->u.member.base->type->kind == NB_TY_STRUCT &&
               e->ref == NB_REF_FIELD && addressable(e->u.member.base);
    case NB_EX_INDEX: {
        const nb_type *bt = e->u.index.base ? e->u.index.base->type : NULL;
        if (!bt || e->u.index.nindices != 1) return 0;
        if (bt->kind == NB_TY_PTR) return 1;
        return bt->kind == NB_TY_ARRAY && addressable(e->u.index.base);
    }
    case NB_EX_UNARY:
        return e->u.unary.op == NB_TOK_STAR; /* &*p */
    default:
        return 0;
    }
}

const nb_type *ck_ptr_unary(nb_checker *c, nb_expr **slot) {
    nb_expr *e = *slot;
    const nb_type *t = ck_expr(c, &e->u.unary.operand);
    if (ck_is_error(t)) return e->type = t;
    if (e->u.unary.op == NB_TOK_STAR) {
        if (t->kind != NB_TY_PTR) {
            ck_err(c, e->loc, "cannot dereference a value of type '%s' (not a pointer)", t->name);
            return e->type = c->tt->t_error;
        }
        if (t->elem->kind == NB_TY_VOID) {
            ck_err(c, e->loc, "cannot dereference a null pointer");
            return e->type = c->tt->t_error;
        }
        e->is_lvalue = 1;
        return e->type = t->elem;
    }
    /* & */
    if (!e->u.unary.operand->is_lvalue || !addressable(e->u.unary.operand)) {
        ck_err(c, e->u.unary.operand->loc,
               "cannot take the address of this expression (only of a variable, field, array element or *p)");
        return e->type = c->tt->t_error;
    }
    /* (a function whose derivatives are all user-given — a [BackwardDerivative] without
     * [Differentiable], or custom forward and backward ones — is never differentiated itself:
     * inline-mlp's Linear.eval passes shared-memory pointers to a matmul) */
    const nb_decl *f = c->fn;
    int body_diff = f && f->u.func.differentiable &&
                    !(f->u.func.bwd_derivative && (f->u.func.fwd_derivative || (!nb_attr_find(&f->attrs, "Differentiable") &&
                                                                                !nb_attr_find(&f->attrs, "BackwardDifferentiable"))));
    if (body_diff && nb_type_is_differentiable(t))
        ck_warn(c, e->loc, "derivatives do not flow through pointers: what is read or written through this address "
                "has no derivative (give the function a custom derivative, or keep the value out of pointers)");
    return e->type = nb_type_ptr(c->tt, t);
}

const nb_type *ck_ptr_index(nb_checker *c, nb_expr **slot) {
    nb_expr *e = *slot;
    const nb_type *bt = e->u.index.base->type;
    if (e->u.index.nindices != 1) {
        for (int i = 0; i < e->u.index.nindices; i++) ck_expr(c, &e->u.index.indices[i]);
        ck_err(c, e->loc, "a pointer takes one index, got %d", e->u.index.nindices);
        return e->type = c->tt->t_error;
    }
    const nb_type *it = ck_expr(c, &e->u.index.indices[0]);
    if (ck_is_error(it)) return e->type = it;
    if (it->kind != NB_TY_SCALAR || !ck_is_int_scalar_kind(it->scalar)) {
        ck_err(c, e->u.index.indices[0]->loc, "pointer index must be an integer, got '%s'", it->name);
        return e->type = c->tt->t_error;
    }
    ck_coerce(c, &e->u.index.indices[0], c->tt->t_int, "pointer index");
    if (bt->elem->kind == NB_TY_VOID) {
        ck_err(c, e->loc, "cannot index a null pointer");
        return e->type = c->tt->t_error;
    }
    e->is_lvalue = 1;
    return e->type = bt->elem;
}

/* A binary operator with a pointer operand (a, b checked). NULL: not a pointer operation. */
const nb_type *ck_ptr_binary(nb_checker *c, nb_expr **slot, const nb_type *a, const nb_type *b) {
    nb_expr *e = *slot;
    int op = e->u.binary.op;
    if (op == NB_TOK_EQ || op == NB_TOK_NE) {
        if (a->kind != NB_TY_PTR || b->kind != NB_TY_PTR) {
            ck_err(c, e->loc, "cannot compare '%s' with '%s'", a->name, b->name);
            return e->type = c->tt->t_error;
        }
        if (a != b) {
            if (a->elem->kind == NB_TY_VOID) ck_coerce(c, &e->u.binary.lhs, b, NULL);
            else if (b->elem->kind == NB_TY_VOID) ck_coerce(c, &e->u.binary.rhs, a, NULL);
            else {
                ck_err(c, e->loc, "cannot compare pointers of different types '%s' and '%s'", a->name, b->name);
                return e->type = c->tt->t_error;
            }
        }
        return e->type = c->tt->t_bool;
    }
    if ((op == NB_TOK_PLUS || op == NB_TOK_MINUS) && a->kind == NB_TY_PTR && b->kind == NB_TY_SCALAR &&
        ck_is_int_scalar_kind(b->scalar) && a->elem->kind != NB_TY_VOID) {
        ck_coerce(c, &e->u.binary.rhs, c->tt->t_int, NULL);
        return e->type = a;
    }
    if (op == NB_TOK_PLUS && b->kind == NB_TY_PTR && a->kind == NB_TY_SCALAR && ck_is_int_scalar_kind(a->scalar) &&
        b->elem->kind != NB_TY_VOID) { /* i + p: swapped so the pointer comes first */
        nb_expr *t = e->u.binary.lhs;
        e->u.binary.lhs = e->u.binary.rhs;
        e->u.binary.rhs = t;
        ck_coerce(c, &e->u.binary.rhs, c->tt->t_int, NULL);
        return e->type = b;
    }
    ck_err(c, e->loc, "invalid operands to %s ('%s' and '%s')", nb_tok_name((nb_tok_kind)op), a->name, b->name);
    return e->type = c->tt->t_error;
}

/* `nullptr` (when no variable has that name). */
const nb_type *ck_nullptr(nb_checker *c, nb_expr *e) {
    e->ref = NB_REF_NULL;
    return e->type = nb_type_ptr(c->tt, c->tt->t_void);
}

/* `__getAddress(x)` is `&x`. */
const nb_type *ck_get_address(nb_checker *c, nb_expr **slot) {
    nb_expr *call = *slot;
    if (call->u.call.nargs != 1) {
        ck_err(c, call->loc, "__getAddress takes one argument, got %d", call->u.call.nargs);
        return call->type = c->tt->t_error;
    }
    nb_expr *u = ck_new_expr(c, NB_EX_UNARY, call->loc);
    if (!u) return call->type = c->tt->t_error;
    u->u.unary.op = NB_TOK_AMP;
    u->u.unary.operand = call->u.call.args[0];
    *slot = u;
    return ck_ptr_unary(c, slot);
}

/* ---- differentiable pointer types (Slang's IDifferentiablePtrType) ------------------------
 * `struct P : IDifferentiablePtrType { typealias Differential = D; … }` is a pointer-like type: a
 * handle to memory (a buffer and an offset), not a value with tangent arithmetic. It is not
 * IDifferentiable (no zero/add); its derivative is another handle, `D` (P itself when no
 * Differential is given), that points at the gradient memory. DifferentialPtrPair<P> holds both:
 * `.p` (P) and `.d` (P.Differential), built as `DifferentialPtrPair<P>(p, d)`. */

int ck_is_ptr_type(nb_checker *c, const nb_type *t) {
    return t && t->kind == NB_TY_STRUCT && t->decl && ck_conforms(c, t, "IDifferentiablePtrType");
}

/* P.Differential of a pointer type P (its `typealias Differential`, else P). */
const nb_type *ck_ptr_differential(nb_checker *c, const nb_type *t) {
    nb_decl *sd = (nb_decl *)t->decl;
    for (int i = 0; i < sd->u.strct.ntypes; i++) {
        nb_decl *td = sd->u.strct.types[i];
        if (!td || !td->name || strcmp(td->name, "Differential") != 0 || !td->u.tdef.texpr) continue;
        const nb_type *dt = ck_struct_member_type(c, sd, "Differential", td->u.tdef.texpr);
        return dt ? dt : c->tt->t_error;
    }
    return t;
}

/* DifferentialPtrPair<P>: a struct "DifferentialPtrPair<P>" { P p; P.Differential d; } made once
 * per P (kept on P's declaration), so its implicit constructor takes (p, d) and `.p` / `.d` are
 * ordinary fields. */
const nb_type *ck_ptr_pair_type(nb_checker *c, const nb_type *t) {
    const nb_type *in = t;
    while (in && in->kind == NB_TY_ARRAY) in = in->elem;
    if (!in || !ck_is_ptr_type(c, in)) return NULL;
    return ck_resolve_ptr_pair(c, NULL, t);
}

/* The Differential of a pointer type or an array of them (P.Differential[n]). */
static const nb_type *ptr_diff_of(nb_checker *c, const nb_type *t) {
    if (t->kind != NB_TY_ARRAY) return ck_ptr_differential(c, t);
    const nb_type *e = ptr_diff_of(c, t->elem);
    return ck_is_error(e) ? e : nb_type_array(c->tt, e, t->length);
}

const nb_type *ck_resolve_ptr_pair(nb_checker *c, nb_type_expr *te, const nb_type *e) {
    const nb_type *in = e;
    while (in->kind == NB_TY_ARRAY) in = in->elem; /* DifferentialPtrPair<P[2]>: an array of pointers */
    if (e->kind == NB_TY_ARRAY && ck_is_ptr_type(c, in)) {
        if (e->ptr_pair) return e->ptr_pair;
    } else if (!ck_is_ptr_type(c, e)) {
        ck_err(c, te->loc, "'DifferentialPtrPair' needs a type conforming to IDifferentiablePtrType, got '%s'%s",
               e->name, nb_type_is_differentiable(e) ? " (use DifferentialPair for IDifferentiable types)" : "");
        return c->tt->t_error;
    }
    nb_decl *pd = (nb_decl *)in->decl;
    if (e == in && pd->u.strct.ptr_pair) return ck_struct_type(c, pd->u.strct.ptr_pair);
    const nb_type *dt = ptr_diff_of(c, e);
    if (ck_is_error(dt)) return dt;
    nb_decl *sd = ck_alloc(c, sizeof *sd);
    nb_decl **fields = ck_alloc(c, 2 * sizeof(nb_decl *));
    size_t ln = strlen(e->name);
    char *name = ck_alloc(c, ln + 22);
    if (!sd || !fields || !name) return c->tt->t_error;
    snprintf(name, ln + 22, "DifferentialPtrPair<%s>", e->name);
    for (int k = 0; k < 2; k++) {
        nb_decl *f = ck_alloc(c, sizeof *f);
        nb_type_expr *ft = ck_alloc(c, sizeof *ft);
        if (!f || !ft) return c->tt->t_error;
        ft->loc = pd->loc;
        ft->resolved = k ? dt : e;
        ft->name = ft->resolved->name;
        f->kind = NB_DECL_VAR;
        f->loc = pd->loc;
        f->name = k ? "d" : "p";
        f->module = pd->module;
        f->u.var.texpr = ft;
        f->u.var.type = ft->resolved;
        fields[k] = f;
    }
    sd->kind = NB_DECL_STRUCT;
    sd->loc = pd->loc;
    sd->name = name;
    sd->module = pd->module;
    sd->ns = pd->ns;
    sd->u.strct.fields = fields;
    sd->u.strct.nfields = 2;
    sd->u.strct.is_ptr_pair = 1;
    const nb_type *pt = ck_struct_type(c, sd);
    if (e == in) pd->u.strct.ptr_pair = sd;
    else ((nb_type *)e)->ptr_pair = pt; /* (interned: every use of P[n] sees it) */
    return pt;
}

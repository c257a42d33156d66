/* Generics (`struct MLP<let W : int, let L : int>`, `float sum<let N : int>(float x[N])`,
 * `T sqr<T : IFoo>(T x)`, `struct S<T : IFoo>`) by monomorphization at check time.
 *
 * A value parameter's argument is an integer; a type parameter's argument is a type, kept in the
 * same int64 argument list as its type id (nb_type.id; types are interned, so equal ids are equal
 * types). Uses of a type parameter are replaced by written types that carry the concrete type
 * (nb_type_expr.subst; `T.A` keeps assoc_base) and by NB_EX_TYPE in expressions (`T(1)`,
 * `T.create()`). Constraints (`T : IFoo`, `where T : IFoo`) are checked on the concrete types
 * before instantiating (check_iface.c).
 *
 * A template is never checked itself. Each distinct list of argument values is instantiated once
 * per program: the template's declaration is deep-copied with every use of a generic parameter
 * replaced by an integer literal (so it is a constant everywhere: array sizes, loop bounds, static
 * consts, expressions) and a bare use of a struct template's own name inside its body replaced by
 * the instantiation (`MLP` inside `MLP<16,3>` means `MLP<16,3>`). The copy is an ordinary struct
 * or function named "MLP<16,3>" / "sum<4>" (emitted as MLP_16_3 / sum_4), appended to the decls
 * of the module being checked and checked there (its names are looked up in the template's module),
 * so lowering, the emitters and reflection see ordinary declarations.
 *
 * Function arguments are taken from the explicit `f<4>(…)` list first, then inferred from the
 * argument types (array lengths `float x[N]`, vector/matrix sizes `vector<float, N>`, tensor ranks,
 * generic struct arguments `MLP<W, L> m`), then from defaults. */
#include <stdio.h>
#include <string.h>

#include "lang/check_internal.h"
#include "lang/lexer.h"
#include "nabla/alloc.h"

/* ---- templates ---------------------------------------------------------------------------- */

int ck_is_template(const nb_decl *d) {
    if (!d) return 0;
    if (d->kind == NB_DECL_STRUCT) return d->u.strct.ngparams > 0;
    if (d->kind == NB_DECL_FUNC) return d->u.func.ngparams > 0;
    return 0;
}

static int gp_is_type(const nb_decl *g) { return g && g->u.param.is_type; }

/* The type whose id is stored as a type parameter's argument. */
static const nb_type *type_arg(nb_checker *c, int64_t id) {
    return id >= 0 && id < c->tt->count ? c->tt->types[id] : c->tt->t_error;
}

static nb_decl **gparams_of(const nb_decl *d, int *n) {
    if (d->kind == NB_DECL_STRUCT) {
        *n = d->u.strct.ngparams;
        return d->u.strct.gparams;
    }
    *n = d->u.func.ngparams;
    return d->u.func.gparams;
}

/* The scalar kind of generic parameter g (int, uint or bool; anything else was reported by
 * ck_check_template and is treated as int). */
static nb_scalar_kind gparam_kind(nb_checker *c, const nb_decl *g) {
    const nb_type *t = g->u.param.texpr ? ck_value_gparam_type(c, g->u.param.texpr->name) : NULL;
    if (t && t->kind == NB_TY_SCALAR && (t->scalar == NB_SC_UINT || t->scalar == NB_SC_BOOL)) return t->scalar;
    return NB_SC_INT;
}

void ck_check_template(nb_checker *c, nb_decl *d) {
    int ng;
    nb_decl **gp = gparams_of(d, &ng);
    const char *name = d->name ? d->name : "?";
    ck_merge_wheres(c, d);
    if (ng > CK_MAX_GPARAMS)
        ck_err(c, d->loc, "'%s' has %d generic parameters (at most %d are supported)", name, ng, CK_MAX_GPARAMS);
    for (int i = 0; i < ng; i++) {
        nb_decl *g = gp[i];
        if (!g) continue;
        if (gp_is_type(g)) {
            for (int k = 0; k < g->u.param.nconstraints; k++) ck_check_constraint_name(c, g->u.param.constraints[k]);
            for (int j = 0; j < i; j++)
                if (gp[j] && gp[j]->name && g->name && strcmp(gp[j]->name, g->name) == 0)
                    ck_err(c, g->loc, "redefinition of generic parameter '%s'", g->name);
            continue;
        }
        nb_type_expr *te = g->u.param.texpr;
        const nb_type *t = te && te->ntargs == 0 && te->narray_dims == 0 ? ck_value_gparam_type(c, te->name) : NULL;
        if (te && (!t || t->kind != NB_TY_SCALAR ||
                   (t->scalar != NB_SC_INT && t->scalar != NB_SC_UINT && t->scalar != NB_SC_BOOL)))
            ck_err(c, te->loc, "generic parameter '%s' must have type 'int', 'uint' or 'bool'", g->name);
        for (int j = 0; j < i; j++)
            if (gp[j] && gp[j]->name && g->name && strcmp(gp[j]->name, g->name) == 0)
                ck_err(c, g->loc, "redefinition of generic parameter '%s'", g->name);
    }
    if (d->kind == NB_DECL_STRUCT)
        for (int k = 0; k < d->u.strct.nmethods; k++)
            if (ck_is_template(d->u.strct.methods[k])) ck_check_template(c, d->u.strct.methods[k]);
}

/* ---- cloning with substitution ------------------------------------------------------------ */

typedef struct subst {
    nb_checker *c;
    nb_decl *tmpl;
    nb_decl **gparams;
    int ngparams;
    int nknown;          /* gparams[0..nknown) have values */
    const int64_t *vals;
    int oom;
} subst;

static void *s_alloc(subst *s, size_t n) {
    void *p = ck_alloc(s->c, n);
    if (!p) s->oom = 1;
    return p;
}

static int gparam_index(const subst *s, const char *name) {
    if (!name) return -1;
    for (int i = 0; i < s->nknown; i++)
        if (s->gparams[i] && s->gparams[i]->name && strcmp(s->gparams[i]->name, name) == 0) return i;
    return -1;
}

/* The literal standing for generic parameter k (a negative int is -(literal)). */
static nb_expr *param_literal(subst *s, int k, nb_loc loc) {
    int64_t v = s->vals[k];
    nb_scalar_kind kind = gparam_kind(s->c, s->gparams[k]);
    if (kind == NB_SC_BOOL) { /* `let colMajor : bool`: true / false */
        nb_expr *b = ck_new_expr(s->c, NB_EX_BOOL, loc);
        if (!b) { s->oom = 1; return NULL; }
        b->u.blit = v != 0;
        return b;
    }
    int is_uint = kind == NB_SC_UINT;
    nb_expr *lit = ck_new_expr(s->c, NB_EX_INT, loc);
    if (!lit) { s->oom = 1; return NULL; }
    lit->u.ilit.is_unsigned = is_uint;
    lit->u.ilit.value = is_uint ? (uint64_t)(uint32_t)v : (uint64_t)(v < 0 ? -v : v);
    if (is_uint || v >= 0) return lit;
    nb_expr *neg = ck_new_expr(s->c, NB_EX_UNARY, loc);
    if (!neg) { s->oom = 1; return NULL; }
    neg->u.unary.op = NB_TOK_MINUS;
    neg->u.unary.operand = lit;
    return neg;
}

/* A written type standing for type parameter k's argument. */
static nb_type_expr *param_type(subst *s, int k, nb_loc loc) {
    nb_type_expr *t = s_alloc(s, sizeof *t);
    if (!t) return NULL;
    const nb_type *ty = type_arg(s->c, s->vals[k]);
    t->loc = loc;
    t->name = ty->name;
    t->subst = ty;
    return t;
}

/* `T.Differential` with T a type parameter: the index of T, and the rest ".Differential". */
static int assoc_param(const subst *s, const char *name, const char **rest);

static nb_expr *clone_expr(subst *s, const nb_expr *e);
static nb_stmt *clone_stmt(subst *s, const nb_stmt *st);
static nb_decl *clone_decl(subst *s, const nb_decl *d);

static nb_expr **clone_exprs(subst *s, nb_expr *const *a, int n) {
    if (!a || n <= 0) return NULL;
    nb_expr **r = s_alloc(s, sizeof(nb_expr *) * (size_t)n);
    if (!r) return NULL;
    for (int i = 0; i < n; i++) r[i] = clone_expr(s, a[i]);
    return r;
}

/* The written generic arguments `<16, 3>` of the instantiation being made (its own name). */
static void self_args(subst *s, nb_type_expr *t, nb_loc loc) {
    t->ntargs = s->ngparams;
    t->targs = s_alloc(s, sizeof(nb_type_expr *) * (size_t)s->ngparams);
    t->vargs = s_alloc(s, sizeof(nb_expr *) * (size_t)s->ngparams);
    if (!t->targs || !t->vargs) { t->ntargs = 0; return; }
    for (int i = 0; i < s->ngparams; i++) {
        if (gp_is_type(s->gparams[i])) t->targs[i] = param_type(s, i, loc);
        else t->vargs[i] = param_literal(s, i, loc);
    }
}

static int assoc_param(const subst *s, const char *name, const char **rest) {
    const char *dot = name ? strchr(name, '.') : NULL;
    if (!dot) return -1;
    for (int i = 0; i < s->nknown; i++) {
        const nb_decl *g = s->gparams[i];
        if (gp_is_type(g) && g->name && strlen(g->name) == (size_t)(dot - name) &&
            memcmp(g->name, name, (size_t)(dot - name)) == 0) {
            *rest = dot;
            return i;
        }
    }
    return -1;
}

static int is_self_name(const subst *s, const char *name) {
    return s->tmpl->kind == NB_DECL_STRUCT && name && s->tmpl->name && strcmp(name, s->tmpl->name) == 0 &&
           s->nknown == s->ngparams;
}

static nb_type_expr *clone_te(subst *s, const nb_type_expr *t) {
    if (!t) return NULL;
    nb_type_expr *r = s_alloc(s, sizeof *r);
    if (!r) return NULL;
    r->loc = t->loc;
    r->name = t->name;
    r->subst = t->subst;
    r->assoc_base = t->assoc_base;
    r->member_of = clone_te(s, t->member_of);
    r->ntargs = t->ntargs;
    const char *rest = NULL;
    int kt = t->ntargs == 0 ? gparam_index(s, t->name) : -1;
    int ka = kt < 0 ? assoc_param(s, t->name, &rest) : -1;
    if (kt >= 0 && gp_is_type(s->gparams[kt])) {        /* `T` -> the argument type */
        const nb_type *ty = type_arg(s->c, s->vals[kt]);
        r->name = ty->name;
        r->subst = ty;
    } else if (ka >= 0) {                                /* `T.A` -> `S.A` with S known */
        const nb_type *ty = type_arg(s->c, s->vals[ka]);
        size_t n1 = strlen(ty->name), n2 = strlen(rest);
        char *nm = s_alloc(s, n1 + n2 + 1);
        if (nm) {
            memcpy(nm, ty->name, n1);
            memcpy(nm + n1, rest, n2 + 1);
            r->name = nm;
        }
        r->assoc_base = ty;
    }
    if (t->ntargs > 0) {
        r->targs = s_alloc(s, sizeof(nb_type_expr *) * (size_t)t->ntargs);
        r->vargs = s_alloc(s, sizeof(nb_expr *) * (size_t)t->ntargs);
        if (!r->targs || !r->vargs) { r->ntargs = 0; return r; }
        for (int i = 0; i < t->ntargs; i++) {
            const nb_type_expr *ta = t->targs ? t->targs[i] : NULL;
            int k = ta && ta->ntargs == 0 && ta->narray_dims == 0 ? gparam_index(s, ta->name) : -1;
            if (k >= 0 && !gp_is_type(s->gparams[k]))
                r->vargs[i] = param_literal(s, k, ta->loc); /* a value parameter taken for a type */
            else r->targs[i] = clone_te(s, ta);
            const nb_expr *va = t->vargs ? t->vargs[i] : NULL;
            int kv = va && va->kind == NB_EX_NAME ? gparam_index(s, va->u.name.name) : -1;
            if (kv >= 0 && gp_is_type(s->gparams[kv])) r->targs[i] = param_type(s, kv, va->loc);
            else if (va) r->vargs[i] = clone_expr(s, va);
        }
    } else if (is_self_name(s, t->name)) {
        self_args(s, r, t->loc);
    }
    r->narray_dims = t->narray_dims;
    r->array_dims = clone_exprs(s, t->array_dims, t->narray_dims);
    return r;
}

static nb_attr_list clone_attrs(subst *s, nb_attr_list a) {
    nb_attr_list r = {NULL, 0};
    if (a.count <= 0 || !a.items) return r;
    r.items = s_alloc(s, sizeof(nb_attr) * (size_t)a.count);
    if (!r.items) return r;
    r.count = a.count;
    for (int i = 0; i < a.count; i++) {
        r.items[i] = a.items[i];
        r.items[i].args = clone_exprs(s, a.items[i].args, a.items[i].nargs);
    }
    return r;
}

static nb_expr *clone_expr(subst *s, const nb_expr *e) {
    if (!e) return NULL;
    if (e->kind == NB_EX_NAME) {
        int k = gparam_index(s, e->u.name.name);
        if (k >= 0 && gp_is_type(s->gparams[k])) { /* `T(1)`, `T.create()`: the type */
            nb_expr *r = ck_new_expr(s->c, NB_EX_TYPE, e->loc);
            if (!r) { s->oom = 1; return NULL; }
            r->u.type.texpr = param_type(s, k, e->loc);
            return r;
        }
        if (k >= 0) return param_literal(s, k, e->loc);
        if (is_self_name(s, e->u.name.name)) { /* `MLP(…)`, `MLP.kWidth` inside MLP */
            nb_expr *r = ck_new_expr(s->c, NB_EX_TYPE, e->loc);
            nb_type_expr *t = s_alloc(s, sizeof *t);
            if (!r || !t) { s->oom = 1; return NULL; }
            t->loc = e->loc;
            t->name = e->u.name.name;
            self_args(s, t, e->loc);
            r->u.type.texpr = t;
            return r;
        }
    }
    nb_expr *r = ck_new_expr(s->c, e->kind, e->loc);
    if (!r) { s->oom = 1; return NULL; }
    r->u = e->u;
    switch (e->kind) {
    case NB_EX_INT: case NB_EX_FLOAT: case NB_EX_BOOL: case NB_EX_NAME: break;
    case NB_EX_UNARY: r->u.unary.operand = clone_expr(s, e->u.unary.operand); break;
    case NB_EX_BINARY:
        r->u.binary.lhs = clone_expr(s, e->u.binary.lhs);
        r->u.binary.rhs = clone_expr(s, e->u.binary.rhs);
        break;
    case NB_EX_ASSIGN:
        r->u.assign.lhs = clone_expr(s, e->u.assign.lhs);
        r->u.assign.rhs = clone_expr(s, e->u.assign.rhs);
        break;
    case NB_EX_TERNARY:
        r->u.ternary.cond = clone_expr(s, e->u.ternary.cond);
        r->u.ternary.then_e = clone_expr(s, e->u.ternary.then_e);
        r->u.ternary.else_e = clone_expr(s, e->u.ternary.else_e);
        break;
    case NB_EX_CALL:
        r->u.call.callee = clone_expr(s, e->u.call.callee);
        r->u.call.args = clone_exprs(s, e->u.call.args, e->u.call.nargs);
        if (e->u.call.arg_names && e->u.call.nargs > 0) {
            r->u.call.arg_names = s_alloc(s, sizeof(char *) * (size_t)e->u.call.nargs);
            if (r->u.call.arg_names)
                memcpy((void *)r->u.call.arg_names, e->u.call.arg_names, sizeof(char *) * (size_t)e->u.call.nargs);
        }
        break;
    case NB_EX_MEMBER:
        r->u.member.base = clone_expr(s, e->u.member.base);
        r->u.member.targs = clone_te(s, e->u.member.targs);
        break;
    case NB_EX_INDEX:
        r->u.index.base = clone_expr(s, e->u.index.base);
        r->u.index.indices = clone_exprs(s, e->u.index.indices, e->u.index.nindices);
        break;
    case NB_EX_TYPE: r->u.type.texpr = clone_te(s, e->u.type.texpr); break;
    case NB_EX_CAST:
        r->u.cast.texpr = clone_te(s, e->u.cast.texpr);
        r->u.cast.operand = clone_expr(s, e->u.cast.operand);
        break;
    case NB_EX_INIT_LIST:
        r->u.init_list.items = clone_exprs(s, e->u.init_list.items, e->u.init_list.nitems);
        break;
    case NB_EX_STRING: break;
    }
    return r;
}

static nb_stmt **clone_stmts(subst *s, nb_stmt *const *a, int n) {
    if (!a || n <= 0) return NULL;
    nb_stmt **r = s_alloc(s, sizeof(nb_stmt *) * (size_t)n);
    if (!r) return NULL;
    for (int i = 0; i < n; i++) r[i] = clone_stmt(s, a[i]);
    return r;
}

static nb_stmt *clone_stmt(subst *s, const nb_stmt *st) {
    if (!st) return NULL;
    nb_stmt *r = s_alloc(s, sizeof *r);
    if (!r) return NULL;
    r->kind = st->kind;
    r->loc = st->loc;
    r->attrs = clone_attrs(s, st->attrs);
    r->max_iters = -1;
    r->u = st->u;
    switch (st->kind) {
    case NB_ST_BLOCK: r->u.block.items = clone_stmts(s, st->u.block.items, st->u.block.count); break;
    case NB_ST_EXPR: r->u.expr.expr = clone_expr(s, st->u.expr.expr); break;
    case NB_ST_VAR:
        if (st->u.var.count > 0 && st->u.var.vars) {
            r->u.var.vars = s_alloc(s, sizeof(nb_decl *) * (size_t)st->u.var.count);
            if (!r->u.var.vars) { r->u.var.count = 0; break; }
            for (int i = 0; i < st->u.var.count; i++) r->u.var.vars[i] = clone_decl(s, st->u.var.vars[i]);
        }
        break;
    case NB_ST_IF:
        r->u.if_s.cond = clone_expr(s, st->u.if_s.cond);
        r->u.if_s.then_s = clone_stmt(s, st->u.if_s.then_s);
        r->u.if_s.else_s = clone_stmt(s, st->u.if_s.else_s);
        break;
    case NB_ST_FOR:
        r->u.for_s.init = clone_stmt(s, st->u.for_s.init);
        r->u.for_s.cond = clone_expr(s, st->u.for_s.cond);
        r->u.for_s.step = clone_expr(s, st->u.for_s.step);
        r->u.for_s.body = clone_stmt(s, st->u.for_s.body);
        break;
    case NB_ST_WHILE:
    case NB_ST_DO_WHILE:
        r->u.while_s.cond = clone_expr(s, st->u.while_s.cond);
        r->u.while_s.body = clone_stmt(s, st->u.while_s.body);
        break;
    case NB_ST_SWITCH: {
        r->u.switch_s.value = clone_expr(s, st->u.switch_s.value);
        int n = st->u.switch_s.ncases;
        if (n <= 0 || !st->u.switch_s.cases) break;
        r->u.switch_s.cases = s_alloc(s, sizeof(nb_switch_case) * (size_t)n);
        if (!r->u.switch_s.cases) { r->u.switch_s.ncases = 0; break; }
        for (int i = 0; i < n; i++) {
            const nb_switch_case *k = &st->u.switch_s.cases[i];
            nb_switch_case *q = &r->u.switch_s.cases[i];
            *q = *k;
            q->values = clone_exprs(s, k->values, k->nvalues);
            q->body = clone_stmts(s, k->body, k->nbody);
        }
        break;
    }
    case NB_ST_RETURN: r->u.ret.value = clone_expr(s, st->u.ret.value); break;
    case NB_ST_TARGET_SWITCH: {
        int n = st->u.tswitch.ncases;
        if (n <= 0 || !st->u.tswitch.cases) break;
        r->u.tswitch.cases = s_alloc(s, sizeof(nb_target_case) * (size_t)n);
        if (!r->u.tswitch.cases) { r->u.tswitch.ncases = 0; break; }
        for (int i = 0; i < n; i++) {
            r->u.tswitch.cases[i] = st->u.tswitch.cases[i];
            r->u.tswitch.cases[i].body = clone_stmts(s, st->u.tswitch.cases[i].body, st->u.tswitch.cases[i].nbody);
        }
        break;
    }
    case NB_ST_ASM: r->u.asm_s.args = clone_exprs(s, st->u.asm_s.args, st->u.asm_s.nargs); break;
    case NB_ST_PRELUDE: break;
    case NB_ST_BREAK: case NB_ST_CONTINUE: case NB_ST_EMPTY: break;
    }
    return r;
}

static nb_decl **clone_decls(subst *s, nb_decl *const *a, int n) {
    if (!a || n <= 0) return NULL;
    nb_decl **r = s_alloc(s, sizeof(nb_decl *) * (size_t)n);
    if (!r) return NULL;
    for (int i = 0; i < n; i++) r[i] = clone_decl(s, a[i]);
    return r;
}

/* A parameter `T x` of a generic function whose type parameter T is constrained only by
 * interfaces that do not inherit IDifferentiable (`f<T : IFoo>(T obj, …)`): Slang treats x as
 * no_diff, whatever type T is instantiated with (the interface gives no Differential). An
 * unconstrained T, or one with a `where` clause, is left differentiable as its argument type. */
static int nondiff_assoc_param(subst *s, const nb_type_expr *te);

static int nondiff_type_param(subst *s, const nb_decl *d) {
    const nb_type_expr *te = d->u.param.texpr;
    if (!s->tmpl || s->tmpl->kind != NB_DECL_FUNC || !te || te->ntargs || te->narray_dims || te->member_of || !te->name)
        return 0;
    if (strchr(te->name, '.')) return nondiff_assoc_param(s, te);
    int k = gparam_index(s, te->name);
    if (k < 0 || !gp_is_type(s->gparams[k])) return 0;
    const nb_decl *g = s->gparams[k];
    if (g->u.param.nconstraints == 0) return 0;
    for (int i = 0; i < s->tmpl->u.func.nwheres; i++) /* (a where clause may add IDifferentiable) */
        if (s->tmpl->u.func.wheres[i] && s->tmpl->u.func.wheres[i]->name &&
            strncmp(s->tmpl->u.func.wheres[i]->name, te->name, strlen(te->name)) == 0)
            return 0;
    for (int i = 0; i < g->u.param.nconstraints; i++) {
        const nb_type_expr *ce = g->u.param.constraints[i];
        if (!ce || !ce->name || ce->ntargs || ck_is_builtin_iface(ce->name) ||
            ck_iface_extends(s->c, ce->name, "IDifferentiable") ||
            ck_iface_extends(s->c, ce->name, "IDifferentiablePtrType")) /* (a pointer type: its pair) */
            return 0;
    }
    return 1;
}

/* A parameter `T.A x` (`T::A`) whose associated type A is declared in T's constraint interface
 * with constraints none of which inherits IDifferentiable (`associatedtype Params : IParams;`):
 * Slang treats x as no_diff through that view, whatever A is for the argument type. */
static int nondiff_assoc_param(subst *s, const nb_type_expr *te) {
    const char *rest = NULL;
    int k = assoc_param(s, te->name, &rest);
    if (k < 0 || !gp_is_type(s->gparams[k]) || !rest || strchr(rest + 1, '.') || !strcmp(rest, ".Differential"))
        return 0;
    const nb_decl *g = s->gparams[k];
    int found = 0;
    for (int i = 0; i < g->u.param.nconstraints; i++) {
        const nb_type_expr *ce = g->u.param.constraints[i];
        nb_decl *iface[1];
        if (!ce || !ce->name || ce->ntargs || ck_lookup_global(s->c, ce->name, NB_DECL_INTERFACE, iface, 1) <= 0)
            continue;
        for (int j = 0; j < iface[0]->u.strct.ntypes; j++) {
            const nb_decl *at = iface[0]->u.strct.types[j];
            if (!at || at->kind != NB_DECL_TYPEDEF || at->u.tdef.texpr || !at->name || strcmp(at->name, rest + 1))
                continue;
            found = 1;
            for (int q = 0; q < at->u.tdef.nconstraints; q++) {
                const nb_type_expr *ac = at->u.tdef.constraints[q];
                if (!ac || !ac->name || ck_is_builtin_iface(ac->name) || ck_iface_extends(s->c, ac->name, "IDifferentiable") ||
                    ck_iface_extends(s->c, ac->name, "IDifferentiablePtrType"))
                    return 0;
            }
        }
    }
    return found;
}

/* Copies a declaration below the template (checker annotations are left empty). Names that
 * would hide a generic parameter are reported once per template by ck_instantiate. */
static nb_decl *clone_decl(subst *s, const nb_decl *d) {
    if (!d) return NULL;
    nb_decl *r = s_alloc(s, sizeof *r);
    if (!r) return NULL;
    r->kind = d->kind;
    r->loc = d->loc;
    r->name = d->name;
    r->attrs = clone_attrs(s, d->attrs);
    r->mods = d->mods;
    r->module = d->module;
    switch (d->kind) {
    case NB_DECL_FUNC:
        r->u.func.ret = clone_te(s, d->u.func.ret);
        r->u.func.params = clone_decls(s, d->u.func.params, d->u.func.nparams);
        r->u.func.nparams = r->u.func.params ? d->u.func.nparams : 0;
        r->u.func.body = clone_stmt(s, d->u.func.body);
        r->u.func.parent = d->u.func.parent;
        r->u.func.is_mutating = d->u.func.is_mutating;
        r->u.func.is_init = d->u.func.is_init;
        /* a generic method stays a template (reported by ck_check_template) */
        r->u.func.gparams = d->u.func.gparams;
        r->u.func.ngparams = d->u.func.ngparams;
        r->u.func.wheres = d->u.func.wheres;
        r->u.func.nwheres = d->u.func.nwheres;
        break;
    case NB_DECL_STRUCT:
    case NB_DECL_INTERFACE:
    case NB_DECL_EXTENSION:
        r->u.strct.types = clone_decls(s, d->u.strct.types, d->u.strct.ntypes);
        r->u.strct.ntypes = r->u.strct.types ? d->u.strct.ntypes : 0;
        r->u.strct.fields = clone_decls(s, d->u.strct.fields, d->u.strct.nfields);
        r->u.strct.nfields = r->u.strct.fields ? d->u.strct.nfields : 0;
        r->u.strct.statics = clone_decls(s, d->u.strct.statics, d->u.strct.nstatics);
        r->u.strct.nstatics = r->u.strct.statics ? d->u.strct.nstatics : 0;
        r->u.strct.methods = clone_decls(s, d->u.strct.methods, d->u.strct.nmethods);
        r->u.strct.nmethods = r->u.strct.methods ? d->u.strct.nmethods : 0;
        r->u.strct.conforms = d->u.strct.conforms;
        r->u.strct.nconforms = d->u.strct.nconforms;
        r->u.strct.wheres = d->u.strct.wheres;
        r->u.strct.nwheres = d->u.strct.nwheres;
        break;
    case NB_DECL_VAR:
        r->u.var.texpr = clone_te(s, d->u.var.texpr);
        r->u.var.init = clone_expr(s, d->u.var.init);
        r->u.var.is_global = d->u.var.is_global;
        break;
    case NB_DECL_PARAM:
        if (nondiff_type_param(s, d)) r->mods |= NB_MOD_NO_DIFF;
        r->u.param.texpr = clone_te(s, d->u.param.texpr);
        r->u.param.dir = d->u.param.dir;
        r->u.param.default_value = clone_expr(s, d->u.param.default_value);
        r->u.param.index = d->u.param.index;
        r->u.param.is_type = d->u.param.is_type;
        r->u.param.constraints = d->u.param.constraints;
        r->u.param.nconstraints = d->u.param.nconstraints;
        r->u.param.default_type = d->u.param.default_type;
        break;
    case NB_DECL_IMPORT: r->u.import = d->u.import; break;
    case NB_DECL_TYPEDEF:
        r->u.tdef = d->u.tdef;
        r->u.tdef.texpr = clone_te(s, d->u.tdef.texpr);
        break;
    }
    return r;
}

nb_decl *ck_clone_method(nb_checker *c, const nb_decl *m, nb_decl *sd) {
    subst s = {c, (nb_decl *)m, NULL, 0, 0, NULL, 0};
    nb_decl *r = clone_decl(&s, m);
    if (s.oom || !r) return NULL;
    r->u.func.parent = sd;
    r->module = sd->module;
    return r;
}

/* ---- shadowing (reported once per template) ----------------------------------------------- */

static void report_shadow(nb_checker *c, const subst *s, const nb_decl *d) {
    if (!d || !d->name) return;
    int k = gparam_index(s, d->name);
    if (k < 0) return;
    ck_err(c, d->loc, "declaration of '%s' shadows a generic parameter of '%s'", d->name, s->tmpl->name);
    ck_note(c, s->gparams[k]->loc, "generic parameter '%s' is declared here", d->name);
}

static void shadow_stmt(nb_checker *c, const subst *s, const nb_stmt *st) {
    if (!st) return;
    switch (st->kind) {
    case NB_ST_BLOCK:
        for (int i = 0; i < st->u.block.count; i++) shadow_stmt(c, s, st->u.block.items[i]);
        break;
    case NB_ST_VAR:
        for (int i = 0; i < st->u.var.count; i++) report_shadow(c, s, st->u.var.vars[i]);
        break;
    case NB_ST_IF: shadow_stmt(c, s, st->u.if_s.then_s); shadow_stmt(c, s, st->u.if_s.else_s); break;
    case NB_ST_FOR: shadow_stmt(c, s, st->u.for_s.init); shadow_stmt(c, s, st->u.for_s.body); break;
    case NB_ST_WHILE: case NB_ST_DO_WHILE: shadow_stmt(c, s, st->u.while_s.body); break;
    case NB_ST_SWITCH:
        for (int i = 0; i < st->u.switch_s.ncases; i++)
            for (int j = 0; j < st->u.switch_s.cases[i].nbody; j++) shadow_stmt(c, s, st->u.switch_s.cases[i].body[j]);
        break;
    default: break;
    }
}

static void shadow_func(nb_checker *c, const subst *s, const nb_decl *f) {
    if (!f) return;
    for (int i = 0; i < f->u.func.nparams; i++) report_shadow(c, s, f->u.func.params[i]);
    shadow_stmt(c, s, f->u.func.body);
}

static void check_shadowing(nb_checker *c, const subst *s) {
    const nb_decl *t = s->tmpl;
    if (t->kind == NB_DECL_FUNC) {
        shadow_func(c, s, t);
        return;
    }
    for (int i = 0; i < t->u.strct.nfields; i++) report_shadow(c, s, t->u.strct.fields[i]);
    for (int i = 0; i < t->u.strct.nstatics; i++) report_shadow(c, s, t->u.strct.statics[i]);
    for (int i = 0; i < t->u.strct.nmethods; i++) {
        report_shadow(c, s, t->u.strct.methods[i]);
        shadow_func(c, s, t->u.strct.methods[i]);
    }
}

/* ---- instantiation ------------------------------------------------------------------------ */

static ck_inst *find_inst(nb_checker *c, const nb_decl *tmpl, const int64_t *vals, int n) {
    for (int i = 0; i < c->ninsts; i++) {
        ck_inst *k = &c->insts[i];
        if (k->tmpl == tmpl && k->nargs == n && (n == 0 || memcmp(k->args, vals, sizeof(int64_t) * (size_t)n) == 0))
            return k;
    }
    return NULL;
}

static const ck_inst *inst_of_clone(nb_checker *c, const nb_decl *d) {
    if (!d) return NULL;
    if (d->kind == NB_DECL_FUNC && d->u.func.parent && !d->u.func.generic_of) d = d->u.func.parent;
    if ((d->kind == NB_DECL_FUNC && !d->u.func.generic_of) || (d->kind == NB_DECL_STRUCT && !d->u.strct.generic_of))
        return NULL;
    for (int i = 0; i < c->ninsts; i++)
        if (c->insts[i].clone == d) return &c->insts[i];
    return NULL;
}

static nb_decl *instantiate(nb_checker *c, nb_decl *tmpl, const int64_t *vals, nb_loc loc);

/* The instantiation of template function tmpl with the generic arguments of the function
 * instantiation inst (`[BackwardDerivative(m_bwd)]` on `m<let M : E>`: m<E.A>'s derivative is
 * m_bwd<E.A>); NULL when inst is no function instantiation or the parameter lists differ in
 * count or kind (type / value). */
nb_decl *ck_instantiate_like(nb_checker *c, nb_decl *tmpl, const nb_decl *inst, nb_loc loc) {
    if (!inst || inst->kind != NB_DECL_FUNC || !inst->u.func.generic_of || !ck_is_template(tmpl)) return NULL;
    const ck_inst *k = inst_of_clone(c, inst);
    if (!k) return NULL;
    int ng, nk;
    nb_decl **gp = gparams_of(tmpl, &ng);
    nb_decl **kp = gparams_of(k->tmpl, &nk);
    if (ng != nk || ng != k->nargs) return NULL;
    for (int i = 0; i < ng; i++)
        if (gp_is_type(gp[i]) != gp_is_type(kp[i])) return NULL;
    return instantiate(c, tmpl, k->args, loc);
}

int ck_inst_depth(nb_checker *c, const nb_decl *d) {
    const ck_inst *k = inst_of_clone(c, d);
    return k ? k->depth : 0;
}

void ck_inst_note(nb_checker *c, const nb_decl *d, int errors0) {
    if (c->src->nerrors <= errors0) return;
    const ck_inst *k = inst_of_clone(c, d);
    if (k) ck_note(c, k->loc, "in instantiation of '%s' requested here", k->clone->name);
}

/* Appends d to the decls of the module being checked. */
static int append_decl(nb_checker *c, nb_decl *d) {
    nb_module_ast *m = c->inst_mod;
    if (!m) return 0;
    if (m->ndecls + 1 > c->inst_cap) {
        int cap = c->inst_cap ? c->inst_cap * 2 : m->ndecls + 16;
        nb_decl **n = ck_alloc(c, sizeof(nb_decl *) * (size_t)cap); /* arena: the old array is abandoned */
        if (!n) return 0;
        if (m->ndecls) memcpy(n, m->decls, sizeof(nb_decl *) * (size_t)m->ndecls);
        m->decls = n;
        c->inst_cap = cap;
    }
    m->decls[m->ndecls++] = d;
    return 1;
}

static const char *inst_name(nb_checker *c, const nb_decl *tmpl, const int64_t *vals, int n) {
    char buf[512];
    int ng;
    nb_decl **gp = gparams_of(tmpl, &ng);
    int len = snprintf(buf, sizeof buf, "%s<", tmpl->name ? tmpl->name : "?");
    for (int i = 0; i < n && len > 0 && len < (int)sizeof buf; i++) {
        if (i < ng && gp_is_type(gp[i]))
            len += snprintf(buf + len, sizeof buf - (size_t)len, "%s%s", i ? "," : "", type_arg(c, vals[i])->name);
        else
            len += snprintf(buf + len, sizeof buf - (size_t)len, "%s%lld", i ? "," : "", (long long)vals[i]);
    }
    if (len > 0 && len < (int)sizeof buf - 1) {
        buf[len++] = '>';
        buf[len] = 0;
    }
    return nb_arena_strdup(c->arena, buf);
}

nb_decl *ck_instantiate_like(nb_checker *c, nb_decl *tmpl, const nb_decl *inst, nb_loc loc);

/* After instantiating a generic function tmpl as clone: the generic functions of its module
 * that name it in [ForwardDerivativeOf] / [BackwardDerivativeOf] / [PrimalSubstituteOf] are
 * instantiated with the same arguments, so that their attributes link clone to them. */
static void instantiate_derivatives_of(nb_checker *c, nb_decl *tmpl, nb_decl *clone, nb_loc loc) {
    nb_module_ast *m = tmpl->module;
    if (!m || !tmpl->name) return;
    int n = m->ndecls; /* (instantiations append to m->decls: read it afresh each time) */
    for (int i = 0; i < n; i++) {
        nb_decl *d = m->decls[i];
        if (!d || d->kind != NB_DECL_FUNC || d == tmpl || !ck_is_template(d)) continue;
        for (int j = 0; j < d->attrs.count; j++) {
            const nb_attr *a = &d->attrs.items[j];
            size_t len = a->name ? strlen(a->name) : 0;
            if (len < 3 || strcmp(a->name + len - 2, "Of") != 0 || a->nargs != 1 || !a->args[0] ||
                a->args[0]->kind != NB_EX_NAME || !a->args[0]->u.name.name ||
                strcmp(a->args[0]->u.name.name, tmpl->name) != 0)
                continue;
            ck_instantiate_like(c, d, clone, loc);
            break;
        }
    }
}

/* The instantiation of tmpl for vals (all of its parameters), made and checked on first use;
 * NULL after an error. loc: where it is requested. */
static nb_decl *instantiate(nb_checker *c, nb_decl *tmpl, const int64_t *vals, nb_loc loc) {
    int ng;
    nb_decl **gp = gparams_of(tmpl, &ng);
    ck_inst *have = find_inst(c, tmpl, vals, ng);
    if (have) return have->clone;
    const char *name = inst_name(c, tmpl, vals, ng);
    if (!name) return NULL;
    int depth = c->inst_depth + 1;
    if (depth > CK_MAX_INST_DEPTH) {
        ck_err(c, loc, "instantiating '%s' nests more than %d generic instantiations (does '%s' instantiate itself "
               "without end?)", name, CK_MAX_INST_DEPTH, tmpl->name);
        return NULL;
    }
    if (c->ninsts >= CK_MAX_INSTS) {
        ck_err(c, loc, "too many generic instantiations (more than %d) instantiating '%s'", CK_MAX_INSTS, name);
        return NULL;
    }
    subst s = {c, tmpl, gp, ng, ng, vals, 0};
    int seen = 0; /* first instantiation of tmpl: report names hiding its parameters (once) */
    for (int i = 0; i < c->ninsts && !seen; i++) seen = c->insts[i].tmpl == tmpl;
    if (!seen) check_shadowing(c, &s);
    nb_decl *clone = clone_decl(&s, tmpl);
    int64_t *args = ck_alloc(c, sizeof(int64_t) * (size_t)(ng ? ng : 1));
    if (s.oom || !clone || !args || !ck_grow((void **)&c->insts, &c->cap_insts, c->ninsts + 1, sizeof(ck_inst))) {
        ck_err(c, loc, "out of memory instantiating '%s'", name);
        return NULL;
    }
    memcpy(args, vals, sizeof(int64_t) * (size_t)ng);
    clone->name = name;
    if (clone->kind == NB_DECL_STRUCT) {
        clone->u.strct.generic_of = tmpl;
        clone->u.strct.gargs = args;
        clone->u.strct.ngargs = ng;
        for (int k = 0; k < clone->u.strct.nmethods; k++)
            if (clone->u.strct.methods[k]) clone->u.strct.methods[k]->u.func.parent = clone;
    } else {
        clone->u.func.generic_of = tmpl;
        clone->u.func.gparams = NULL;
        clone->u.func.ngparams = 0;
    }
    ck_inst *k = &c->insts[c->ninsts++];
    k->tmpl = tmpl;
    k->args = args;
    k->nargs = ng;
    k->clone = clone;
    k->depth = depth;
    k->loc = loc;
    if (!append_decl(c, clone)) {
        ck_err(c, loc, "out of memory instantiating '%s'", name);
        return NULL;
    }
    /* declarations now (bodies are checked with the module's other bodies) */
    int saved = c->inst_depth, errors0 = c->src->nerrors;
    c->inst_depth = depth;
    if (clone->kind == NB_DECL_STRUCT) ck_check_struct_decl(c, clone);
    else {
        ck_check_func_sig(c, clone);
        if (!tmpl->u.func.parent) instantiate_derivatives_of(c, tmpl, clone, loc);
    }
    c->inst_depth = saved;
    /* one note, at the request from ordinary code (not one per level of a nested chain) */
    if (c->src->nerrors > errors0 && saved == 0) ck_note(c, loc, "in instantiation of '%s' requested here", name);
    return clone;
}

/* ---- generic arguments -------------------------------------------------------------------- */

static void gparam_list(const nb_decl *tmpl, char *buf, size_t n) {
    int ng;
    nb_decl **gp = gparams_of(tmpl, &ng);
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < ng && len + 1 < n; i++) {
        int w = snprintf(buf + len, n - len, "%s%s", i ? ", " : "", gp[i] && gp[i]->name ? gp[i]->name : "?");
        if (w < 0) break;
        len += (size_t)w;
    }
}

/* Checks an argument value against its parameter's type. */
static int check_arg_value(nb_checker *c, const nb_decl *tmpl, int i, int64_t v, nb_loc loc) {
    int ng;
    nb_decl **gp = gparams_of(tmpl, &ng);
    if (gp_is_type(gp[i])) return 1;
    if (gparam_kind(c, gp[i]) == NB_SC_BOOL) {
        if (v == 0 || v == 1) return 1;
        ck_err(c, loc, "generic argument %d of '%s' must be 'true' or 'false', got %lld", i + 1, tmpl->name,
               (long long)v);
        return 0;
    }
    int is_uint = gparam_kind(c, gp[i]) == NB_SC_UINT;
    if (is_uint ? (v < 0 || v > (int64_t)UINT32_MAX) : (v < INT32_MIN || v > INT32_MAX)) {
        ck_err(c, loc, "generic argument %d of '%s' is out of range for '%s': %lld", i + 1, tmpl->name,
               is_uint ? "uint" : "int", (long long)v);
        return 0;
    }
    return 1;
}

/* Gives every parameter without a value (bound[k] == 0) its default, in order (a default may use
 * earlier parameters). Returns the index of the first parameter left without a value (ng when
 * all have one); reports why when `report`. */
static int fill_defaults(nb_checker *c, nb_decl *tmpl, int64_t *vals, int *bound, int report) {
    int ng;
    nb_decl **gp = gparams_of(tmpl, &ng);
    for (int k = 0; k < ng; k++) {
        if (bound[k]) continue;
        nb_decl *g = gp[k];
        if (gp_is_type(g)) {
            if (!g->u.param.default_type) return k;
            subst s = {c, tmpl, gp, ng, k, vals, 0};
            nb_type_expr *te = clone_te(&s, g->u.param.default_type);
            if (s.oom || !te) return k;
            ck_ctx_save save = ck_enter_global_ctx(c, tmpl->module);
            c->ns = tmpl->ns;
            const nb_type *t = ck_resolve_type(c, te);
            ck_leave_global_ctx(c, save);
            if (ck_is_error(t)) return k;
            vals[k] = t->id;
            bound[k] = 1;
            continue;
        }
        if (!g || !g->u.param.default_value) return k;
        subst s = {c, tmpl, gp, ng, k, vals, 0};
        nb_expr *e = clone_expr(&s, g->u.param.default_value);
        if (s.oom || !e) return k;
        ck_ctx_save save = ck_enter_global_ctx(c, tmpl->module);
        c->ns = tmpl->ns;
        int errors0 = c->src->nerrors;
        const nb_type *t = ck_expr(c, &e);
        int ok = !ck_is_error(t) && ck_const_int(e, &vals[k]);
        if (!ok && report && c->src->nerrors == errors0)
            ck_err(c, g->u.param.default_value->loc, "the default of generic parameter '%s' must be a constant integer",
                   g->name);
        ck_leave_global_ctx(c, save);
        if (!ok || (report && !check_arg_value(c, tmpl, k, vals[k], g->loc))) return k;
        bound[k] = 1;
    }
    return ng;
}

/* Written generic argument i of te for a type parameter of tmpl: the type, or NULL after an
 * error. A name the parser took for a value (an imported struct) is looked up as a type. */
static const nb_type *explicit_type_arg(nb_checker *c, nb_decl *tmpl, nb_type_expr *te, int i) {
    const nb_type *t = NULL;
    if (te->targs && te->targs[i]) {
        t = ck_resolve_type(c, te->targs[i]);
    } else {
        nb_expr *v = te->vargs ? te->vargs[i] : NULL;
        if (v && v->kind == NB_EX_TYPE) t = ck_resolve_type(c, v->u.type.texpr);
        else if (v && v->kind == NB_EX_NAME) t = ck_name_as_type(c, v->u.name.name, v->loc);
        if (!t) {
            ck_err(c, v ? v->loc : te->loc, "generic argument %d of '%s' must be a type, not a value", i + 1,
                   tmpl->name);
            return NULL;
        }
    }
    return ck_is_error(t) ? NULL : t;
}

/* Evaluates te's written arguments for tmpl into vals; returns how many, or -1 after an error. */
static int explicit_args(nb_checker *c, nb_decl *tmpl, nb_type_expr *te, int64_t *vals) {
    int ng;
    gparams_of(tmpl, &ng);
    int n = te ? te->ntargs : 0;
    if (n > ng) {
        ck_err(c, te->loc, "'%s' takes %d generic argument%s, got %d", tmpl->name, ng, ng == 1 ? "" : "s", n);
        return -1;
    }
    nb_decl **gp = gparams_of(tmpl, &ng);
    for (int i = 0; i < n; i++) {
        if (gp_is_type(gp[i])) {
            const nb_type *t = explicit_type_arg(c, tmpl, te, i);
            if (!t) return -1;
            vals[i] = t->id;
            continue;
        }
        if (te->targs && te->targs[i]) {
            /* a type where a value is expected (names the parser could not tell apart are values) */
            nb_type_expr *ta = te->targs[i];
            nb_decl *d[1];
            if (ta->ntargs || ta->narray_dims || ck_builtin_type_name(c, ta->name) ||
                ck_lookup_global(c, ta->name, NB_DECL_STRUCT, d, 1) > 0 ||
                ck_lookup_global(c, ta->name, NB_DECL_TYPEDEF, d, 1) > 0) {
                ck_err(c, ta->loc, "generic argument %d of '%s' must be an integer value, not a type", i + 1,
                       tmpl->name);
                return -1;
            }
        }
        if (!ck_generic_int(c, te, i, &vals[i])) return -1;
        nb_loc at = te->vargs && te->vargs[i] ? te->vargs[i]->loc : te->loc;
        if (!check_arg_value(c, tmpl, i, vals[i], at)) return -1;
    }
    return n;
}

const nb_type *ck_instantiate_struct(nb_checker *c, nb_decl *sd, nb_type_expr *te) {
    int64_t vals[CK_MAX_GPARAMS];
    int ng;
    gparams_of(sd, &ng);
    if (ng > CK_MAX_GPARAMS) return c->tt->t_error; /* reported with the template */
    int n = explicit_args(c, sd, te, vals);
    if (n < 0) return c->tt->t_error;
    int bound[CK_MAX_GPARAMS] = {0};
    for (int i = 0; i < n; i++) bound[i] = 1;
    int errors0 = c->src->nerrors;
    int k = fill_defaults(c, sd, vals, bound, 1);
    if (k < ng) {
        if (c->src->nerrors > errors0) return c->tt->t_error; /* a bad default, reported */
        char list[256];
        gparam_list(sd, list, sizeof list);
        if (n == 0)
            ck_err(c, te->loc, "generic struct '%s' needs generic arguments: '%s<%s>'", sd->name, sd->name, list);
        else
            ck_err(c, te->loc, "'%s' takes %d generic argument%s (%s), got %d", sd->name, ng, ng == 1 ? "" : "s", list,
                   n);
        return c->tt->t_error;
    }
    char why[512];
    if (!ck_satisfies(c, sd, vals, why, sizeof why)) {
        ck_err(c, te->loc, "%s", why);
        ck_note(c, sd->loc, "'%s' is declared here", sd->name);
        return c->tt->t_error;
    }
    nb_decl *inst = instantiate(c, sd, vals, te->loc);
    return inst && inst->u.strct.type ? inst->u.strct.type : c->tt->t_error;
}

/* ---- inference for generic functions ------------------------------------------------------ */

typedef struct infer {
    nb_type_table *tt;
    nb_decl *tmpl;
    int64_t vals[CK_MAX_GPARAMS];
    int bound[CK_MAX_GPARAMS];
    int conflict;      /* parameter index + 1 of the first conflict */
    int64_t other;     /* the conflicting value */
} infer;

/* The generic parameter written as the i-th generic argument of te (`N` in `vector<float, N>`). */
static int targ_param(const infer *f, const nb_type_expr *te, int i) {
    int ng;
    nb_decl **gp = gparams_of(f->tmpl, &ng);
    const char *name = NULL;
    if (te->vargs && te->vargs[i] && te->vargs[i]->kind == NB_EX_NAME) name = te->vargs[i]->u.name.name;
    else if (te->targs && te->targs[i] && !te->targs[i]->ntargs && !te->targs[i]->narray_dims) name = te->targs[i]->name;
    if (!name) return -1;
    for (int k = 0; k < ng; k++)
        if (gp[k] && gp[k]->name && strcmp(gp[k]->name, name) == 0) return k;
    return -1;
}

static int expr_param(const infer *f, const nb_expr *e) {
    int ng;
    nb_decl **gp = gparams_of(f->tmpl, &ng);
    if (!e || e->kind != NB_EX_NAME || !e->u.name.name) return -1;
    for (int k = 0; k < ng; k++)
        if (gp[k] && gp[k]->name && strcmp(gp[k]->name, e->u.name.name) == 0) return k;
    return -1;
}

static void bind(infer *f, int k, int64_t v) {
    if (k < 0) return;
    if (f->bound[k] && f->vals[k] != v) {
        if (!f->conflict) {
            f->conflict = k + 1;
            f->other = v;
        }
        return;
    }
    f->bound[k] = 1;
    f->vals[k] = v;
}

static void unify(infer *f, const nb_type_expr *te, const nb_type *at);

/* `vector<T, N>` against a float3: T is float. */
static void unify_scalar(infer *f, const nb_type_expr *te, nb_scalar_kind k) {
    unify(f, te, nb_type_scalar(f->tt, k));
}

/* Matches a written parameter type against an argument's type, binding generic parameters. */
static void unify(infer *f, const nb_type_expr *te, const nb_type *at) {
    if (!te || !at || at->kind == NB_TY_ERROR) return;
    for (int i = 0; i < te->narray_dims; i++) {
        if (at->kind != NB_TY_ARRAY) return;
        bind(f, expr_param(f, te->array_dims ? te->array_dims[i] : NULL), at->length);
        at = at->elem;
    }
    if (te->ntargs <= 0 && te->name) { /* `T x`: T is the argument's type */
        int ng;
        nb_decl **gp = gparams_of(f->tmpl, &ng);
        for (int k = 0; k < ng; k++)
            if (gp_is_type(gp[k]) && gp[k]->name && strcmp(gp[k]->name, te->name) == 0) bind(f, k, at->id);
        return;
    }
    if (te->ntargs <= 0 || !te->name) return;
    const char *n = te->name;
    if (!strcmp(n, "vector") && at->kind == NB_TY_VECTOR && te->ntargs == 2) {
        if (te->targs && te->targs[0]) unify_scalar(f, te->targs[0], at->scalar);
        bind(f, targ_param(f, te, 1), at->cols);
    } else if (!strcmp(n, "matrix") && at->kind == NB_TY_MATRIX && te->ntargs == 3) {
        if (te->targs && te->targs[0]) unify_scalar(f, te->targs[0], at->scalar);
        bind(f, targ_param(f, te, 1), at->rows);
        bind(f, targ_param(f, te, 2), at->cols);
    } else if ((!strcmp(n, "Tensor") || !strcmp(n, "DiffTensor") || !strcmp(n, "RWTensor")) &&
               at->kind == NB_TY_TENSOR && te->ntargs == 2) {
        if (te->targs && te->targs[0]) unify(f, te->targs[0], at->elem);
        bind(f, targ_param(f, te, 1), at->rank);
    } else if (!strcmp(n, "Array") && at->kind == NB_TY_ARRAY && te->ntargs == 2) { /* Array<T, N> */
        if (te->targs && te->targs[0]) unify(f, te->targs[0], at->elem);
        bind(f, targ_param(f, te, 1), at->length);
    } else if (!strcmp(n, "DifferentialPair") && at->kind == NB_TY_DIFFPAIR && te->ntargs == 1) {
        if (te->targs && te->targs[0]) unify(f, te->targs[0], at->elem);
    } else if (!strcmp(n, "DifferentialPtrPair") && at->kind == NB_TY_STRUCT && at->decl &&
               at->decl->u.strct.is_ptr_pair && te->ntargs == 1) { /* its field p is the P */
        if (te->targs && te->targs[0]) unify(f, te->targs[0], at->decl->u.strct.fields[0]->u.var.type);
    } else if (at->kind == NB_TY_STRUCT && at->decl && at->decl->u.strct.generic_of &&
               at->decl->u.strct.generic_of->name && strcmp(at->decl->u.strct.generic_of->name, n) == 0) {
        const nb_decl *sd = at->decl;
        for (int i = 0; i < te->ntargs && i < sd->u.strct.ngargs; i++) bind(f, targ_param(f, te, i), sd->u.strct.gargs[i]);
    }
}

/* The parameter index argument a of the call maps to (named or positional); -1 if none. */
static int arg_param(const nb_decl *fn, const nb_expr *call, int a) {
    const char *an = call->u.call.arg_names ? call->u.call.arg_names[a] : NULL;
    if (!an) return a < fn->u.func.nparams ? a : -1;
    for (int i = 0; i < fn->u.func.nparams; i++)
        if (fn->u.func.params[i] && fn->u.func.params[i]->name && strcmp(fn->u.func.params[i]->name, an) == 0) return i;
    return -1;
}

int ck_generic_candidates(nb_checker *c, nb_expr *call, nb_decl **fns, int n, nb_type_expr *explicit_args_te,
                          const char *name) {
    int ntmpl = 0;
    for (int i = 0; i < n; i++) ntmpl += ck_is_template(fns[i]);
    if (!explicit_args_te && ntmpl == 0) return n;
    if (explicit_args_te && ntmpl == 0) {
        ck_err(c, explicit_args_te->loc, "'%s' is not a generic function", name);
        return -1;
    }
    for (int a = 0; a < call->u.call.nargs; a++)
        if (!call->u.call.args[a] ||
            (ck_is_error(call->u.call.args[a]->type) && call->u.call.args[a]->kind != NB_EX_INIT_LIST))
            return -1; /* no cascade (an unchecked `{…}` waits for its parameter's type) */
    int ngiven = explicit_args_te ? explicit_args_te->ntargs : 0;
    if (ngiven > CK_MAX_GPARAMS) {
        ck_err(c, explicit_args_te->loc, "too many generic arguments for '%s' (%d)", name, ngiven);
        return -1;
    }
    int w = 0, failed = 0, last_fail = -1;
    char reason[512] = "";
    for (int i = 0; i < n; i++) {
        nb_decl *fn = fns[i];
        if (!ck_is_template(fn)) {
            if (!explicit_args_te) fns[w++] = fn;
            continue;
        }
        int ng;
        nb_decl **gp = gparams_of(fn, &ng);
        if (ng > CK_MAX_GPARAMS || ngiven > ng) {
            failed++;
            last_fail = i;
            snprintf(reason, sizeof reason, "'%s' takes %d generic argument%s, got %d", name, ng, ng == 1 ? "" : "s",
                     ngiven);
            continue;
        }
        infer f;
        memset(&f, 0, sizeof f);
        f.tmpl = fn;
        f.tt = c->tt;
        if (ngiven) { /* the written arguments, evaluated for this template's parameter kinds */
            int64_t given[CK_MAX_GPARAMS];
            if (explicit_args(c, fn, explicit_args_te, given) < 0) return -1;
            for (int k = 0; k < ngiven; k++) bind(&f, k, given[k]);
        }
        for (int a = 0; a < call->u.call.nargs; a++) {
            int pi = arg_param(fn, call, a);
            if (pi >= 0 && fn->u.func.params[pi]) unify(&f, fn->u.func.params[pi]->u.param.texpr, call->u.call.args[a]->type);
        }
        if (f.conflict) {
            failed++;
            last_fail = i;
            int k = f.conflict - 1;
            if (gp_is_type(gp[k]))
                snprintf(reason, sizeof reason, "conflicting types for generic parameter '%s' of '%s': '%s' and '%s'",
                         gp[k]->name, name, type_arg(c, f.vals[k])->name, type_arg(c, f.other)->name);
            else
                snprintf(reason, sizeof reason, "conflicting values for generic parameter '%s' of '%s': %lld and %lld",
                         gp[k]->name, name, (long long)f.vals[k], (long long)f.other);
            continue;
        }
        int k = fill_defaults(c, fn, f.vals, f.bound, 0);
        if (k < ng) {
            failed++;
            last_fail = i;
            if (gp[k]->name && strncmp(gp[k]->name, "__len_", 6) == 0) /* `int b[]` (parser.c) */
                snprintf(reason, sizeof reason, "the argument for the unsized array parameter '%s' of '%s' must be "
                         "an array", gp[k]->name + 6, name);
            else
                snprintf(reason, sizeof reason, "cannot infer generic parameter '%s' of '%s' from the arguments "
                         "(write %s<…>(…))", gp[k]->name, name, name);
            continue;
        }
        int bad = 0;
        for (int q = 0; q < ng && !bad; q++) bad = !check_arg_value(c, fn, q, f.vals[q], call->loc);
        if (bad) return -1;
        if (!ck_satisfies(c, fn, f.vals, reason, sizeof reason)) {
            failed++;
            last_fail = i;
            continue;
        }
        nb_decl *inst = instantiate(c, fn, f.vals, call->loc);
        if (!inst) return -1;
        fns[w++] = inst;
    }
    if (w == 0 && failed) {
        if (failed == 1) {
            ck_err(c, call->loc, "%s", reason);
            ck_note(c, fns[last_fail]->loc, "'%s' is declared here", name);
        } else {
            ck_err(c, call->loc, "no generic '%s' matches this call (%s)", name, reason);
        }
        return -1;
    }
    return w;
}

void ck_free_generics(nb_checker *c) {
    nb_free(c->insts, sizeof(ck_inst) * (size_t)c->cap_insts);
    c->insts = NULL;
    c->ninsts = c->cap_insts = 0;
}

int ck_append_decl(nb_checker *c, nb_decl *d) { return append_decl(c, d); }

/* fwd_diff / bwd_diff of built-in functions (`fwd_diff(sin)`, `bwd_diff(length)(dpx, dout)`,
 * Slang's derivatives of its standard library functions as values): the checker makes a
 * [Differentiable] wrapper function `T __d_sin_float3(T x) { return sin(x); }` for the argument
 * types of the call, appends it to the module like a generic instantiation, and the derivative
 * operators apply to it as to any user function (the intrinsic's rules in ad_rules.c do the
 * work). One wrapper per intrinsic and primal signature. */
#include <stdio.h>
#include <string.h>

#include "lang/check_internal.h"
#include "lang/intrinsics.h"
#include "lang/lexer.h"

#define CK_WRAP_MAX_ARGS 8

/* The primal argument types behind a derivative call's argument types: each operator, outermost
 * first, is undone (bwd_diff: the trailing result gradient is dropped; a pair stands for its
 * primal). Returns the count, -1 when they cannot be recovered. */
static int primal_arg_types(nb_expr *call, const int *ids, int nops, const nb_type **out) {
    int n = call->u.call.nargs;
    if (n > CK_WRAP_MAX_ARGS + nops) return -1;
    const nb_type *t[CK_WRAP_MAX_ARGS + 8];
    for (int i = 0; i < n; i++) {
        t[i] = call->u.call.args[i] ? call->u.call.args[i]->type : NULL;
        if (!t[i] || ck_is_error(t[i])) return -1;
    }
    for (int k = 0; k < nops; k++) {
        if (ids[k] == NB_INTR_BWD_DIFF) {
            if (n < 1) return -1;
            n--; /* the result's gradient */
        }
        for (int i = 0; i < n; i++)
            if (t[i]->kind == NB_TY_DIFFPAIR) t[i] = t[i]->elem;
    }
    if (n > CK_WRAP_MAX_ARGS) return -1;
    for (int i = 0; i < n; i++) out[i] = t[i];
    return n;
}

static nb_type_expr *resolved_texpr(nb_checker *c, const nb_type *t, nb_loc loc) {
    nb_type_expr *te = ck_alloc(c, sizeof *te);
    if (!te) return NULL;
    te->loc = loc;
    te->name = t->name;
    te->resolved = t;
    return te;
}

/* Appends a type's name to a synthesized function's name, identifier characters only. */
static void mangle(char *name, size_t cap, int *len, const char *type_name) {
    for (const char *s = type_name; *s && *len < (int)cap - 1; s++)
        name[(*len)++] = (char)(((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9')) ? *s : '_');
    name[*len] = 0;
}

/* The function `name` this module was given by an earlier synthesis, else NULL. */
static nb_decl *made_before(nb_module_ast *m, const char *name) {
    for (int i = m->ndecls - 1; i >= 0; i--)
        if (m->decls[i] && m->decls[i]->kind == NB_DECL_FUNC && m->decls[i]->name && !strcmp(m->decls[i]->name, name))
            return m->decls[i];
    return NULL;
}

static nb_decl *syn_param(nb_checker *c, nb_module_ast *m, const char *name, const nb_type *t, nb_param_dir dir,
                          int index, nb_loc loc) {
    nb_decl *p = ck_alloc(c, sizeof *p);
    if (!p) return NULL;
    p->kind = NB_DECL_PARAM;
    p->loc = loc;
    p->name = name;
    p->module = m;
    p->u.param.texpr = resolved_texpr(c, t, loc);
    p->u.param.type = t;
    p->u.param.dir = dir;
    p->u.param.index = index;
    return p->name && p->u.param.texpr ? p : NULL;
}

/* `ret name(params) { items }`, appended to module m and its signature checked; NULL when out of
 * memory. differentiable: [Differentiable]; prefer_recompute: [PreferRecompute]. */
static nb_decl *syn_func(nb_checker *c, nb_module_ast *m, const char *name, const nb_type *ret, nb_decl **params,
                         int n, nb_stmt **items, int nitems, int differentiable, int prefer_recompute, nb_loc loc) {
    nb_decl *fn = ck_alloc(c, sizeof *fn);
    nb_stmt *body = ck_syn_stmt(c, NB_ST_BLOCK, loc);
    if (!fn || !body) return NULL;
    body->u.block.items = items;
    body->u.block.count = nitems;
    fn->kind = NB_DECL_FUNC;
    fn->loc = loc;
    fn->name = nb_arena_strdup(c->arena, name);
    fn->module = m;
    fn->u.func.ret = resolved_texpr(c, ret, loc);
    fn->u.func.params = params;
    fn->u.func.nparams = n;
    fn->u.func.body = body;
    fn->u.func.differentiable = differentiable;
    fn->u.func.prefer_recompute = prefer_recompute;
    if (!fn->name || !fn->u.func.ret || !ck_append_decl(c, fn)) return NULL;
    ck_check_func_sig(c, fn);
    return fn;
}

static nb_expr *intrinsic_call(nb_checker *c, const char *iname, nb_decl **params, int n, nb_loc loc) {
    nb_expr *call = ck_new_expr(c, NB_EX_CALL, loc);
    nb_expr *callee = ck_new_expr(c, NB_EX_NAME, loc);
    nb_expr **args = ck_alloc(c, sizeof(nb_expr *) * (size_t)(n ? n : 1));
    if (!call || !callee || !args) return NULL;
    callee->u.name.name = iname;
    for (int i = 0; i < n; i++) {
        args[i] = ck_new_expr(c, NB_EX_NAME, loc);
        if (!args[i]) return NULL;
        args[i]->u.name.name = params[i]->name;
    }
    call->u.call.callee = callee;
    call->u.call.args = args;
    call->u.call.nargs = n;
    return call;
}

nb_decl *ck_builtin_diff_wrapper(nb_checker *c, const char *iname, nb_expr *call, const int *ids, int nops,
                                 const char *dname, nb_loc loc) {
    int id = nb_intrinsic_lookup(iname);
    const nb_intrinsic_info *info = id >= 0 ? nb_intrinsic_get(id) : NULL;
    if (!info || info->diff == NB_IDIFF_SPECIAL || id == NB_INTR_ATOMIC_ADD) {
        ck_err(c, loc, "'%s' of the built-in '%s' is not supported (it is not a differentiable math function)", dname,
               iname);
        return NULL;
    }
    const nb_type *pt[CK_WRAP_MAX_ARGS];
    int n = primal_arg_types(call, ids, nops, pt);
    if (n < 0) return NULL; /* (the arguments' own errors are reported) */
    /* the wrapper's name: __d_<intrinsic>_<primal types>, identifier characters only */
    char name[256];
    int len = snprintf(name, sizeof name, "__d_%s", iname);
    for (int i = 0; i < n && len > 0 && len < (int)sizeof name - 2; i++) {
        name[len++] = '_';
        mangle(name, sizeof name, &len, pt[i]->name);
    }
    nb_module_ast *m = c->inst_mod;
    if (!m) return NULL;
    nb_decl *made = made_before(m, name);
    if (made) return made;
    nb_decl **params = ck_alloc(c, sizeof(nb_decl *) * (size_t)(n ? n : 1));
    if (!params) return NULL;
    for (int i = 0; i < n; i++) {
        char pn[16];
        snprintf(pn, sizeof pn, "__x%d", i);
        if (!(params[i] = syn_param(c, m, nb_arena_strdup(c->arena, pn), pt[i], NB_DIR_IN, i, loc))) return NULL;
    }
    /* the result type: the intrinsic call typed with the parameters in scope (errors here are
     * the user's: `bwd_diff(sin)(dpx, dpy, 1.0)` has no sin(float, float)) */
    nb_expr *probe = intrinsic_call(c, iname, params, n, loc);
    if (!probe) return NULL;
    ck_push_scope(c);
    for (int i = 0; i < n; i++) ck_declare(c, params[i]->name, params[i], loc);
    int errors0 = c->src->nerrors;
    const nb_type *rt = ck_expr(c, &probe);
    ck_pop_scope(c);
    if (ck_is_error(rt) || c->src->nerrors > errors0) {
        if (c->src->nerrors == errors0) ck_err(c, loc, "'%s' of '%s' with these arguments has no primal form", dname, iname);
        return NULL;
    }
    nb_stmt *ret = ck_syn_stmt(c, NB_ST_RETURN, loc);
    nb_stmt **items = ck_alloc(c, sizeof(nb_stmt *));
    nb_expr *value = intrinsic_call(c, iname, params, n, loc);
    if (!ret || !items || !value) return NULL;
    ret->u.ret.value = value;
    items[0] = ret;
    /* (prefer recompute: cheap, reverse mode calls it again rather than storing) */
    return syn_func(c, m, name, rt, params, n, items, 1, 1, 1, loc);
}

/* ---- sincos(x, out s, out c) ---------------------------------------------------------------
 * Slang's sincos is a library function with out parameters (no intrinsic has any): the checker
 * makes `[Differentiable] void __sincos_T(T x, out T s, out T c) { s = sin(x); c = cos(x); }` for
 * the float type T of x (int promotes to float) and calls it; `bwd_diff(sincos)(dpx, ds, dc)`
 * applies to it as to any user function (dx += ds cos x - dc sin x). */

static nb_stmt *assign_stmt(nb_checker *c, nb_decl *dst, const char *fn, nb_decl *x, nb_loc loc) {
    nb_stmt *st = ck_syn_stmt(c, NB_ST_EXPR, loc);
    nb_expr *as = ck_new_expr(c, NB_EX_ASSIGN, loc);
    nb_expr *lhs = ck_new_expr(c, NB_EX_NAME, loc);
    nb_expr *rhs = intrinsic_call(c, fn, &x, 1, loc);
    if (!st || !as || !lhs || !rhs) return NULL;
    lhs->u.name.name = dst->name;
    as->u.assign.op = NB_TOK_ASSIGN;
    as->u.assign.lhs = lhs;
    as->u.assign.rhs = rhs;
    st->u.expr.expr = as;
    return st;
}

nb_decl *ck_sincos_func(nb_checker *c, const nb_type *t, nb_loc loc) {
    if (t && t->kind == NB_TY_SCALAR && t->scalar != NB_SC_BOOL && !nb_type_is_float_based(t)) t = c->tt->t_float;
    if (!t || ck_is_error(t)) return NULL;
    if ((t->kind != NB_TY_SCALAR && t->kind != NB_TY_VECTOR && t->kind != NB_TY_MATRIX) || !nb_type_is_float_based(t)) {
        ck_err(c, loc, "'sincos' needs a floating-point scalar, vector or matrix, got '%s'", t->name);
        return NULL;
    }
    char name[128];
    int len = snprintf(name, sizeof name, "__sincos_");
    mangle(name, sizeof name, &len, t->name);
    nb_module_ast *m = c->inst_mod;
    if (!m) return NULL;
    nb_decl *made = made_before(m, name);
    if (made) return made;
    static const char *const pnames[3] = {"__x", "__s", "__c"};
    nb_decl **params = ck_alloc(c, sizeof(nb_decl *) * 3);
    if (!params) return NULL;
    for (int i = 0; i < 3; i++)
        if (!(params[i] = syn_param(c, m, pnames[i], t, i ? NB_DIR_OUT : NB_DIR_IN, i, loc))) return NULL;
    nb_stmt **items = ck_alloc(c, sizeof(nb_stmt *) * 2);
    if (!items) return NULL;
    items[0] = assign_stmt(c, params[1], "sin", params[0], loc);
    items[1] = assign_stmt(c, params[2], "cos", params[0], loc);
    if (!items[0] || !items[1]) return NULL;
    return syn_func(c, m, name, c->tt->t_void, params, 3, items, 2, 1, 0, loc);
}

nb_decl *ck_sincos_diff_wrapper(nb_checker *c, nb_expr *call, const int *ids, int nops, const char *dname, nb_loc loc) {
    (void)ids;
    (void)nops;
    /* x's primal type: the first argument, a pair standing for its primal (bwd_diff's gradients
     * of s and c take the out parameters' places; there is no result gradient) */
    if (call->u.call.nargs != 3) {
        ck_err(c, call->loc, "'%s(sincos)' takes 3 arguments (x and the pairs or gradients of s and c), got %d", dname,
               call->u.call.nargs);
        return NULL;
    }
    const nb_type *t = call->u.call.args[0] ? call->u.call.args[0]->type : NULL;
    while (t && t->kind == NB_TY_DIFFPAIR) t = t->elem;
    return ck_sincos_func(c, t, loc);
}

/* ---- CoopVec store: v.store(buffer, byteOffset = 0) ----------------------------------------
 * CoopVec<T, N> is vector<T, N> here; Slang's store writes element i of v to
 * buffer[byteOffset / sizeof(T) + i]. The checker makes `void __coopvec_store_<V>_<B>(V v, B b,
 * int o) { b[o / S + 0] = v[0]; … }` (N statements) and calls it. */

static nb_expr *name_expr(nb_checker *c, const char *n, nb_loc loc) {
    nb_expr *e = ck_new_expr(c, NB_EX_NAME, loc);
    if (e) e->u.name.name = n;
    return e;
}
static nb_expr *int_expr(nb_checker *c, int v, nb_loc loc) {
    nb_expr *e = ck_new_expr(c, NB_EX_INT, loc);
    if (e) e->u.ilit.value = (unsigned long long)v;
    return e;
}
static nb_expr *bin_expr(nb_checker *c, int op, nb_expr *l, nb_expr *r, nb_loc loc) {
    nb_expr *e = ck_new_expr(c, NB_EX_BINARY, loc);
    if (!e || !l || !r) return NULL;
    e->u.binary.op = op;
    e->u.binary.lhs = l;
    e->u.binary.rhs = r;
    return e;
}
static nb_expr *index_expr(nb_checker *c, nb_expr *base, nb_expr *i, nb_loc loc) {
    nb_expr *e = ck_new_expr(c, NB_EX_INDEX, loc);
    nb_expr **ix = ck_alloc(c, sizeof(nb_expr *));
    if (!e || !ix || !base || !i) return NULL;
    ix[0] = i;
    e->u.index.base = base;
    e->u.index.indices = ix;
    e->u.index.nindices = 1;
    return e;
}

const nb_type *ck_vector_store(nb_checker *c, nb_expr **slot, const nb_type *vt) {
    nb_expr *call = *slot;
    nb_expr *callee = call->u.call.callee;
    nb_loc loc = callee->loc;
    int na = call->u.call.nargs;
    for (int i = 0; i < na; i++) ck_expr(c, &call->u.call.args[i]);
    const nb_type *bt = na >= 1 && call->u.call.args[0] ? call->u.call.args[0]->type : NULL;
    if (na < 1 || na > 2 || !bt || bt->kind != NB_TY_TENSOR || bt->buffer != 1 || bt->rank != 1 ||
        bt->elem != nb_type_scalar(c->tt, vt->scalar)) {
        ck_err(c, call->loc, "'%s.store' takes an RWStructuredBuffer<%s> and a byte offset (CoopVec's store)", vt->name,
               nb_type_scalar(c->tt, vt->scalar)->name);
        return call->type = c->tt->t_error;
    }
    if (na == 2) ck_coerce(c, &call->u.call.args[1], c->tt->t_int, "byte offset of 'store'");
    int size = vt->scalar == NB_SC_HALF ? 2 : (vt->scalar == NB_SC_DOUBLE || vt->scalar == NB_SC_INT64 || vt->scalar == NB_SC_UINT64) ? 8 : 4;
    char name[128];
    snprintf(name, sizeof name, "__coopvec_store_%s", vt->name);
    nb_module_ast *m = c->inst_mod;
    if (!m) return call->type = c->tt->t_error;
    nb_decl *fn = made_before(m, name);
    if (!fn) {
        static const char *const pn[3] = {"__v", "__b", "__o"};
        const nb_type *pt[3] = {vt, bt, c->tt->t_int};
        nb_decl **params = ck_alloc(c, sizeof(nb_decl *) * 3);
        int n = nb_type_components(vt);
        nb_stmt **items = ck_alloc(c, sizeof(nb_stmt *) * (size_t)n);
        if (!params || !items) return call->type = c->tt->t_error;
        for (int i = 0; i < 3; i++)
            if (!(params[i] = syn_param(c, m, pn[i], pt[i], NB_DIR_IN, i, loc))) return call->type = c->tt->t_error;
        for (int i = 0; i < n; i++) { /* __b[__o / size + i] = __v[i]; */
            nb_expr *at = bin_expr(c, NB_TOK_PLUS, bin_expr(c, NB_TOK_SLASH, name_expr(c, "__o", loc), int_expr(c, size, loc), loc),
                                   int_expr(c, i, loc), loc);
            nb_expr *as = ck_new_expr(c, NB_EX_ASSIGN, loc);
            nb_stmt *st = ck_syn_stmt(c, NB_ST_EXPR, loc);
            if (!as || !st) return call->type = c->tt->t_error;
            as->u.assign.op = NB_TOK_ASSIGN;
            as->u.assign.lhs = index_expr(c, name_expr(c, "__b", loc), at, loc);
            as->u.assign.rhs = index_expr(c, name_expr(c, "__v", loc), int_expr(c, i, loc), loc);
            if (!as->u.assign.lhs || !as->u.assign.rhs) return call->type = c->tt->t_error;
            st->u.expr.expr = as;
            items[i] = st;
        }
        if (!(fn = syn_func(c, m, name, c->tt->t_void, params, 3, items, n, 0, 0, loc))) return call->type = c->tt->t_error;
    }
    /* the call: __coopvec_store_V(v, b, o) */
    nb_expr **args = ck_alloc(c, sizeof(nb_expr *) * 3);
    nb_expr *nc = name_expr(c, fn->name, loc);
    if (!args || !nc) return call->type = c->tt->t_error;
    args[0] = callee->u.member.base;
    args[1] = call->u.call.args[0];
    args[2] = na == 2 ? call->u.call.args[1] : int_expr(c, 0, loc);
    if (na < 2) ck_expr(c, &args[2]);
    call->u.call.callee = nc;
    call->u.call.args = args;
    call->u.call.nargs = 3;
    nc->ref = NB_REF_FUNCTION;
    nc->decl = fn;
    nc->type = nb_type_func(c->tt, fn);
    call->ref = NB_REF_FUNCTION;
    call->decl = fn;
    ck_add_edge(c, fn, call->loc);
    return call->type = c->tt->t_void;
}

/* ---- T.dzero() / T.dadd(a, b) / T.dmul(s, a) --------------------------------------------- */

const nb_type *ck_diff_static(nb_checker *c, nb_expr **slot, const nb_type *st, const char *mname) {
    int which = !strcmp(mname, "dzero") ? 0 : !strcmp(mname, "dadd") ? 1 : !strcmp(mname, "dmul") ? 2 : -1;
    if (which < 0) return NULL;
    if (st->kind == NB_TY_STRUCT && st->decl && ck_has_method(st->decl, mname)) return NULL; /* user-defined */
    nb_expr *call = *slot;
    const nb_type *d = nb_type_is_differentiable(st) ? nb_type_differential(c->tt, st) : NULL;
    nb_loc loc = call->u.call.callee->loc;
    if (!d) {
        ck_err(c, loc, "'%s' is not differentiable, so it has no '%s'", st->name, mname);
        return call->type = c->tt->t_error;
    }
    int want = which == 0 ? 0 : 2;
    if (call->u.call.nargs != want) {
        ck_err(c, call->loc, "'%s.%s' takes %d argument%s, got %d", st->name, mname, want, want == 1 ? "" : "s",
               call->u.call.nargs);
        return call->type = c->tt->t_error;
    }
    int value = d->kind == NB_TY_SCALAR || d->kind == NB_TY_VECTOR || d->kind == NB_TY_MATRIX;
    char what[96];
    if (which == 0) { /* the zero of the Differential: D(0), or {} for arrays and structs */
        nb_expr *z;
        if (value) {
            z = ck_new_expr(c, NB_EX_CAST, call->loc);
            nb_expr *zero = ck_new_expr(c, NB_EX_INT, call->loc);
            if (!z || !zero) return call->type = c->tt->t_error;
            z->u.cast.operand = zero;
            z->u.cast.texpr = resolved_texpr(c, d, call->loc);
            if (!z->u.cast.texpr) return call->type = c->tt->t_error;
        } else {
            z = ck_new_expr(c, NB_EX_INIT_LIST, call->loc);
            if (!z) return call->type = c->tt->t_error;
        }
        *slot = z;
        return value ? ck_expr(c, slot) : ck_init_list(c, z, d);
    }
    /* dadd(a, b) = a + b (aggregates member by member in the IR); dmul(s, a) = s * a */
    nb_expr *bin = ck_new_expr(c, NB_EX_BINARY, call->loc);
    if (!bin) return call->type = c->tt->t_error;
    bin->u.binary.op = which == 1 ? NB_TOK_PLUS : NB_TOK_STAR;
    bin->u.binary.lhs = call->u.call.args[0];
    bin->u.binary.rhs = call->u.call.args[1];
    *slot = bin;
    if (which == 2 && !value) {
        ck_err(c, loc, "'%s.dmul' of an array or struct Differential is not supported", st->name);
        return bin->type = c->tt->t_error;
    }
    snprintf(what, sizeof what, "argument of '%s.%s'", st->name, mname);
    /* (typed here, not by the operator's rules: a + b of structs is this one use) */
    const nb_type *ta = ck_expr_to(c, &bin->u.binary.lhs, which == 2 ? nb_type_scalar(c->tt, d->scalar) : d, what);
    const nb_type *tb = ck_expr_to(c, &bin->u.binary.rhs, d, what);
    return bin->type = ck_is_error(ta) || ck_is_error(tb) ? c->tt->t_error : d;
}

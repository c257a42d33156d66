/* `createDynamicObject<IFoo>(id, data)` and Slang's type conformance ids.
 *
 * In Slang the host gives the compiler an id per conforming type (`type_conformance A:IFoo = 0`
 * in slang-test, `nabla … --conformance A:IFoo=0` / nb_module_options.conformances here), and
 * createDynamicObject<IFoo>(id, data) makes a value of the type with that id whose bits are
 * data's: data is packed into 32-bit words (Slang's AnyValue) and the type's fields unpacked from
 * them in order; fields past the data are zero. Without ids for an interface, its conforming
 * structs get 0, 1, … in declaration order (the existential's own tags, check_dyn.c).
 *
 * Each (interface, data type) pair becomes one ordinary function, appended to the module and
 * checked with the other bodies:
 *
 *     IFoo __createDynamicObject_IFoo_float(uint id, float data) {
 *         IFoo r = {};
 *         if (id == 0u) { r.tag = 0; r.as_A.a = data; }                 // A: { float a }
 *         if (id == 1u) { r.tag = 1; r.as_B.n = asint(asuint(data)); }   // B: { int n; float k }
 *         return r;
 *     }
 *
 * so lowering, autodiff (it is [TreatAsDifferentiable]: the data gets no derivative, as in
 * Slang) and both back ends see plain code. Only 32-bit scalars (float, int, uint, bool) and vectors, matrices, arrays and
 * structs of them are packed: anything else is a diagnostic. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang/check_internal.h"
#include "nabla/alloc.h"
#include "lang/lexer.h"

#define CDO_MAX_DEPTH 16
#define CDO_MAX_LEAVES 1024

/* ---- conformance ids ------------------------------------------------------------------------ */

/* "TYPE : IFACE = ID" (blanks anywhere) into its parts; 0 when malformed. */
static int parse_conformance(const char *s, char *ty, size_t nty, char *iface, size_t nif, long long *id) {
    char buf[512];
    size_t n = 0;
    for (const char *p = s; *p && n + 1 < sizeof buf; p++)
        if (*p != ' ' && *p != '\t') buf[n++] = *p;
    buf[n] = 0;
    char *colon = strchr(buf, ':'), *eq = strrchr(buf, '=');
    if (!colon || !eq || eq < colon || colon == buf || eq == colon + 1 || !eq[1]) return 0;
    if ((size_t)(colon - buf) >= nty || (size_t)(eq - colon - 1) >= nif) return 0;
    memcpy(ty, buf, (size_t)(colon - buf));
    ty[colon - buf] = 0;
    memcpy(iface, colon + 1, (size_t)(eq - colon - 1));
    iface[eq - colon - 1] = 0;
    char *end = NULL;
    long long v = strtoll(eq + 1, &end, 0);
    if (!end || *end || v < 0 || v > 0xFFFFFFFFll) return 0;
    *id = v;
    return 1;
}

/* A type name as the host writes it may have blanks (`S<float, 2>`); compare without them. */
static int same_name(const char *a, const char *b) {
    for (;;) {
        while (*a == ' ') a++;
        while (*b == ' ') b++;
        if (*a != *b) return 0;
        if (!*a) return 1;
        a++, b++;
    }
}

/* The conformance id of conformer `sname` (declaration index k) of interface `iname`: the host's;
 * -1 when the host gave ids for iname but not for sname; k when it gave none for iname. */
static long long conformance_id(nb_checker *c, const char *sname, const char *iname, int k) {
    int any = 0;
    for (int i = 0; i < c->p->nconformances; i++) {
        char ty[256], ifn[256];
        long long id;
        if (!parse_conformance(c->p->conformances[i], ty, sizeof ty, ifn, sizeof ifn, &id) || !same_name(ifn, iname))
            continue;
        any = 1;
        if (same_name(ty, sname)) return id;
    }
    return any ? -1 : k;
}

static nb_decl *find_decl(nb_checker *c, const char *name, int kind) {
    for (int mi = 0; mi < c->p->nmodules; mi++) {
        nb_module_ast *m = c->p->modules[mi];
        for (int i = 0; m && i < m->ndecls; i++) {
            nb_decl *d = m->decls[i];
            if (d && (int)d->kind == kind && d->name && same_name(d->name, name) &&
                !(kind == NB_DECL_STRUCT && d->u.strct.is_existential))
                return d;
        }
    }
    return NULL;
}

void ck_check_conformance_ids(nb_checker *c) {
    nb_loc none = {-1, 0, 0};
    for (int i = 0; i < c->p->nconformances; i++) {
        const char *s = c->p->conformances[i];
        char ty[256], ifn[256];
        long long id;
        if (!parse_conformance(s, ty, sizeof ty, ifn, sizeof ifn, &id)) {
            ck_err(c, none, "bad conformance '%s': expected TYPE:INTERFACE=ID with ID an integer >= 0", s);
            continue;
        }
        nb_decl *id_decl = find_decl(c, ifn, NB_DECL_INTERFACE);
        nb_decl *sd = find_decl(c, ty, NB_DECL_STRUCT);
        if (!id_decl) {
            ck_err(c, none, "conformance '%s': no interface named '%s'", s, ifn);
            continue;
        }
        if (!sd) {
            ck_err(c, none, "conformance '%s': no struct named '%s'", s, ty);
            continue;
        }
        int yes = 0;
        for (int k = 0; k < sd->u.strct.nconforms && !yes; k++)
            yes = ck_iface_extends(c, sd->u.strct.conforms[k], id_decl->name);
        if (!yes) {
            ck_err(c, none, "conformance '%s': '%s' does not conform to '%s'", s, sd->name, id_decl->name);
            ck_note(c, sd->loc, "'%s' is declared here", sd->name);
            continue;
        }
        for (int j = 0; j < i; j++) { /* one type per id, one id per type */
            char ty2[256], if2[256];
            long long id2;
            if (!parse_conformance(c->p->conformances[j], ty2, sizeof ty2, if2, sizeof if2, &id2) ||
                !same_name(if2, ifn))
                continue;
            if (id2 == id && !same_name(ty2, ty)) {
                ck_err(c, none, "conformance '%s': id %lld of '%s' is also given to '%s'", s, id, ifn, ty2);
                break;
            }
            if (id2 != id && same_name(ty2, ty)) {
                ck_err(c, none, "conformance '%s': '%s' already has id %lld for '%s'", s, ty, id2, ifn);
                break;
            }
        }
    }
}

/* ---- small AST builders (checked later as ordinary code) ------------------------------------ */

static nb_expr *ex_new(nb_checker *c, nb_expr_kind k, nb_loc loc) {
    nb_expr *e = ck_new_expr(c, k, loc);
    if (e) e->type = NULL;
    return e;
}


static nb_expr *ex_uint(nb_checker *c, uint64_t v, nb_loc loc) {
    nb_expr *e = ex_new(c, NB_EX_INT, loc);
    if (e) {
        e->u.ilit.value = v;
        e->u.ilit.is_unsigned = 1;
    }
    return e;
}


static nb_expr *ex_call1(nb_checker *c, nb_expr *callee, nb_expr *arg, nb_loc loc) {
    nb_expr *e = ex_new(c, NB_EX_CALL, loc);
    nb_expr **args = ck_alloc(c, sizeof(nb_expr *));
    if (!e || !args || !callee) return NULL;
    args[0] = arg;
    e->u.call.callee = callee;
    e->u.call.args = args;
    e->u.call.nargs = 1;
    return e;
}

static nb_expr *ex_binary(nb_checker *c, int op, nb_expr *a, nb_expr *b, nb_loc loc) {
    nb_expr *e = ex_new(c, NB_EX_BINARY, loc);
    if (e) {
        e->u.binary.op = op;
        e->u.binary.lhs = a;
        e->u.binary.rhs = b;
    }
    return e;
}


static nb_stmt *st_expr(nb_checker *c, nb_expr *e, nb_loc loc) {
    nb_stmt *s = ck_syn_stmt(c, NB_ST_EXPR, loc);
    if (s) s->u.expr.expr = e;
    return e ? s : NULL;
}

static nb_stmt *st_assign(nb_checker *c, nb_expr *lhs, nb_expr *rhs, nb_loc loc) {
    nb_expr *a = ex_new(c, NB_EX_ASSIGN, loc);
    if (!a || !lhs || !rhs) return NULL;
    a->u.assign.op = NB_TOK_ASSIGN;
    a->u.assign.lhs = lhs;
    a->u.assign.rhs = rhs;
    return st_expr(c, a, loc);
}


/* ---- flattening a value into its 32-bit scalars --------------------------------------------- */

typedef struct cdo_step {
    const char *field; /* a field, or NULL for an index */
    int index;
} cdo_step;

typedef struct cdo_leaf {
    cdo_step steps[CDO_MAX_DEPTH];
    int n;
    nb_scalar_kind k;
} cdo_leaf;

typedef struct cdo_leaves {
    cdo_leaf *v;
    int n;
    const nb_type *bad; /* what could not be packed */
    nb_type_table *tt;
} cdo_leaves;

/* Appends t's scalars in memory order (fields, elements, rows then columns); 0 on a type that
 * is not made of 32-bit scalars (L->bad) or a value too large or deep. */
static int flatten(const nb_type *t, cdo_step *path, int depth, cdo_leaves *L) {
    if (depth >= CDO_MAX_DEPTH) {
        L->bad = t;
        return 0;
    }
    switch (t->kind) {
    case NB_TY_SCALAR:
        if (t->scalar != NB_SC_FLOAT && t->scalar != NB_SC_INT && t->scalar != NB_SC_UINT && t->scalar != NB_SC_BOOL) {
            L->bad = t;
            return 0;
        }
        if (L->n == CDO_MAX_LEAVES) {
            L->bad = t;
            return 0;
        }
        memcpy(L->v[L->n].steps, path, sizeof(cdo_step) * (size_t)depth);
        L->v[L->n].n = depth;
        L->v[L->n].k = t->scalar;
        L->n++;
        return 1;
    case NB_TY_VECTOR:
    case NB_TY_MATRIX: {
        const nb_type *s = nb_type_scalar(L->tt, t->scalar);
        for (int r = 0; r < (t->kind == NB_TY_MATRIX ? t->rows : 1); r++)
            for (int k = 0; k < t->cols; k++) {
                int d = depth;
                if (t->kind == NB_TY_MATRIX) path[d++] = (cdo_step){NULL, r};
                if (d >= CDO_MAX_DEPTH) { L->bad = t; return 0; }
                path[d++] = (cdo_step){NULL, k};
                if (!flatten(s, path, d, L)) return 0;
            }
        return 1;
    }
    case NB_TY_ARRAY:
        for (int i = 0; i < t->length; i++) {
            path[depth] = (cdo_step){NULL, i};
            if (!flatten(t->elem, path, depth + 1, L)) return 0;
        }
        return 1;
    case NB_TY_STRUCT:
        if (!t->decl) break;
        for (int i = 0; i < t->decl->u.strct.nfields; i++) {
            nb_decl *f = t->decl->u.strct.fields[i];
            if (!f || !f->u.var.type) continue;
            path[depth] = (cdo_step){f->name, 0};
            if (!flatten(f->u.var.type, path, depth + 1, L)) return 0;
        }
        return 1;
    default: break;
    }
    L->bad = t;
    return 0;
}

/* `root.f[2].g` for a leaf (a fresh tree). */
static nb_expr *leaf_expr(nb_checker *c, nb_expr *root, const cdo_leaf *l, nb_loc loc) {
    nb_expr *e = root;
    for (int i = 0; e && i < l->n; i++) {
        if (l->steps[i].field) {
            e = ck_syn_member(c, e, l->steps[i].field, loc);
            continue;
        }
        nb_expr *ix = ex_new(c, NB_EX_INDEX, loc);
        nb_expr **idx = ck_alloc(c, sizeof(nb_expr *));
        nb_expr *lit = ex_new(c, NB_EX_INT, loc);
        if (!ix || !idx || !lit) return NULL;
        lit->u.ilit.value = (uint64_t)l->steps[i].index;
        idx[0] = lit;
        ix->u.index.base = e;
        ix->u.index.indices = idx;
        ix->u.index.nindices = 1;
        e = ix;
    }
    return e;
}

static nb_expr *type_callee(nb_checker *c, const nb_type *t, nb_loc loc) {
    nb_expr *e = ex_new(c, NB_EX_TYPE, loc);
    if (e) e->u.type.texpr = ck_syn_type(c, t, loc);
    return e;
}

/* The data word `w` (of kind from) as a scalar of kind `to`: the same bits. */
static nb_expr *convert_word(nb_checker *c, nb_expr *w, nb_scalar_kind from, nb_scalar_kind to, nb_loc loc) {
    if (from == to || !w) return w;
    if (from == NB_SC_BOOL) w = ex_call1(c, type_callee(c, c->tt->t_uint, loc), w, loc); /* 0 / 1 */
    else if (from != NB_SC_UINT) w = ex_call1(c, ck_syn_name(c, "asuint", loc), w, loc);
    switch (to) {
    case NB_SC_UINT: return w;
    case NB_SC_BOOL: return ex_binary(c, NB_TOK_NE, w, ex_uint(c, 0, loc), loc);
    case NB_SC_INT: return ex_call1(c, ck_syn_name(c, "asint", loc), w, loc);
    default: return ex_call1(c, ck_syn_name(c, "asfloat", loc), w, loc);
    }
}

/* ---- the function of one (interface, data type) pair ---------------------------------------- */

/* `if (id == ID) { r.tag = k; r.as_K.<leaf j> = data.<leaf j>; … }` for conformer k. */
static nb_stmt *conformer_branch(nb_checker *c, const nb_decl *ex, int k, long long id, const cdo_leaves *src,
                                 nb_loc loc) {
    const nb_decl *field = ex->u.strct.fields[k + 1];
    cdo_leaf *tv = nb_alloc(sizeof(cdo_leaf) * CDO_MAX_LEAVES, 16);
    if (!tv) return NULL;
    cdo_leaves T = {tv, 0, NULL, c->tt};
    cdo_step path[CDO_MAX_DEPTH];
    int ok = flatten(field->u.var.type, path, 0, &T);
    if (!ok) {
        ck_err(c, loc, "createDynamicObject: '%s' (conforming to '%s') holds '%s', which is not packed into 32-bit "
               "words (float, int, uint, bool and vectors, matrices, arrays and structs of them are)",
               field->u.var.type->name, ex->name, T.bad ? T.bad->name : "?");
        nb_free(tv, sizeof(cdo_leaf) * CDO_MAX_LEAVES);
        return NULL;
    }
    int n = 1 + (T.n < src->n ? T.n : src->n);
    nb_stmt **items = ck_alloc(c, sizeof(nb_stmt *) * (size_t)n);
    nb_stmt *blk = ck_syn_stmt(c, NB_ST_BLOCK, loc), *iff = ck_syn_stmt(c, NB_ST_IF, loc);
    nb_expr *tag = ex_new(c, NB_EX_INT, loc);
    if (!items || !blk || !iff || !tag) ok = 0;
    if (ok) {
        tag->u.ilit.value = (uint64_t)k;
        items[0] = st_assign(c, ck_syn_member(c, ck_syn_name(c, "r", loc), "tag", loc), tag, loc);
        for (int j = 0; j + 1 < n; j++) {
            nb_expr *to = leaf_expr(c, ck_syn_member(c, ck_syn_name(c, "r", loc), field->name, loc), &T.v[j], loc);
            nb_expr *from = leaf_expr(c, ck_syn_name(c, "data", loc), &src->v[j], loc);
            items[j + 1] = st_assign(c, to, convert_word(c, from, src->v[j].k, T.v[j].k, loc), loc);
            if (!items[j + 1]) ok = 0;
        }
        blk->u.block.items = items;
        blk->u.block.count = n;
        iff->u.if_s.cond = ex_binary(c, NB_TOK_EQ, ck_syn_name(c, "id", loc), ex_uint(c, (uint64_t)id, loc), loc);
        iff->u.if_s.then_s = blk;
    }
    nb_free(tv, sizeof(cdo_leaf) * CDO_MAX_LEAVES);
    return ok && items[0] && iff->u.if_s.cond ? iff : NULL;
}

static nb_decl *make_param(nb_checker *c, const char *name, const nb_type *t, int index, nb_loc loc) {
    nb_decl *p = ck_alloc(c, sizeof *p);
    if (!p) return NULL;
    p->kind = NB_DECL_PARAM;
    p->loc = loc;
    p->name = name;
    p->module = c->inst_mod;
    p->u.param.texpr = ck_syn_type(c, t, loc);
    p->u.param.dir = NB_DIR_IN;
    p->u.param.index = index;
    return p->u.param.texpr ? p : NULL;
}

/* The function for existential type et and data type dt, made on first use; NULL after a
 * diagnostic at loc. */
static nb_decl *create_func(nb_checker *c, const nb_type *et, const nb_type *dt, nb_loc loc) {
    char name[512];
    int len = snprintf(name, sizeof name, "__createDynamicObject_%s_", et->name);
    for (const char *p = dt->name; *p && len + 2 < (int)sizeof name; p++) /* float[4] -> float_4_ */
        name[len++] = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ? *p : '_';
    name[len] = 0;
    nb_decl *have[4];
    int nh = ck_lookup_global(c, name, NB_DECL_FUNC, have, 4);
    for (int i = 0; i < nh && i < 4; i++)
        if (have[i]->u.func.nparams == 2 && have[i]->u.func.params[1]->u.param.type == dt) return have[i];

    cdo_leaf *sv = nb_alloc(sizeof(cdo_leaf) * CDO_MAX_LEAVES, 16);
    if (!sv) return NULL;
    cdo_leaves S = {sv, 0, NULL, c->tt};
    cdo_step path[CDO_MAX_DEPTH];
    nb_decl *fn = NULL;
    if (!flatten(dt, path, 0, &S)) {
        ck_err(c, loc, "createDynamicObject: the data '%s' is not packed into 32-bit words (%s'%s' is not a float, "
               "int, uint or bool, nor a vector, matrix, array or struct of them)", dt->name,
               S.bad && S.bad != dt ? "it holds " : "", S.bad ? S.bad->name : "?");
        goto done;
    }
    const nb_decl *ex = et->decl;
    int nconf = ex->u.strct.nfields - 1;
    nb_stmt **items = ck_alloc(c, sizeof(nb_stmt *) * (size_t)(nconf + 2));
    nb_stmt *body = ck_syn_stmt(c, NB_ST_BLOCK, loc), *var = ck_syn_stmt(c, NB_ST_VAR, loc), *ret = ck_syn_stmt(c, NB_ST_RETURN, loc);
    nb_decl *r = ck_alloc(c, sizeof *r), **vars = ck_alloc(c, sizeof(nb_decl *));
    nb_expr *zero = ex_new(c, NB_EX_INIT_LIST, loc);
    fn = ck_alloc(c, sizeof *fn);
    nb_decl **params = ck_alloc(c, sizeof(nb_decl *) * 2);
    if (!items || !body || !var || !ret || !r || !vars || !zero || !fn || !params) {
        fn = NULL;
        goto done;
    }
    r->kind = NB_DECL_VAR; /* IFoo r = {}; */
    r->loc = loc;
    r->name = "r";
    r->module = c->inst_mod;
    r->u.var.texpr = ck_syn_type(c, et, loc);
    r->u.var.init = zero;
    vars[0] = r;
    var->u.var.vars = vars;
    var->u.var.count = 1;
    int n = 0;
    items[n++] = var;
    for (int k = 0; k < nconf; k++) {
        const nb_type *ft = ex->u.strct.fields[k + 1]->u.var.type;
        long long id = conformance_id(c, ft && ft->decl ? ft->decl->name : "", ex->name, k);
        if (id < 0) continue; /* the host gave ids to other conformers only */
        nb_stmt *b = conformer_branch(c, ex, k, id, &S, loc);
        if (!b) {
            fn = NULL;
            goto done;
        }
        items[n++] = b;
    }
    ret->u.ret.value = ck_syn_name(c, "r", loc);
    items[n++] = ret;
    body->u.block.items = items;
    body->u.block.count = n;
    params[0] = make_param(c, "id", c->tt->t_uint, 0, loc);
    params[1] = make_param(c, "data", dt, 1, loc);
    if (!params[0] || !params[1]) {
        fn = NULL;
        goto done;
    }
    fn->kind = NB_DECL_FUNC;
    fn->loc = loc;
    fn->name = nb_arena_strdup(c->arena, name);
    fn->module = c->inst_mod;
    fn->u.func.ret = ck_syn_type(c, et, loc);
    fn->u.func.params = params;
    fn->u.func.nparams = 2;
    fn->u.func.body = body;
    if (!fn->name || !fn->u.func.ret || !ck_append_decl(c, fn)) {
        ck_err(c, loc, "out of memory making createDynamicObject<%s>", et->name);
        fn = NULL;
        goto done;
    }
    ck_check_func_sig(c, fn);
    /* as Slang's: callable from differentiable code, no derivative reaches the data (the
     * [TreatAsDifferentiable] rule: zero tangents forward, nothing backward) */
    fn->u.func.treat_as_diff = 1;
    fn->u.func.differentiable = 1;
done:
    nb_free(sv, sizeof(cdo_leaf) * CDO_MAX_LEAVES);
    return fn;
}

const nb_type *ck_create_dynamic(nb_checker *c, nb_expr **slot) {
    nb_expr *call = *slot;
    nb_type_expr *te = call->u.call.callee->u.type.texpr;
    int n = call->u.call.nargs;
    for (int i = 0; i < n; i++) ck_expr(c, &call->u.call.args[i]);
    for (int i = 0; i < te->ntargs && te->targs && te->vargs; i++) { /* a name the parser did not know as a type */
        nb_expr *v = te->vargs[i];
        if (te->targs[i] || !v || v->kind != NB_EX_NAME) continue;
        nb_type_expr *t = ck_alloc(c, sizeof *t);
        if (!t) return call->type = c->tt->t_error;
        t->loc = v->loc;
        t->name = v->u.name.name;
        te->targs[i] = t;
    }
    if (te->ntargs < 1 || te->ntargs > 2 || !te->targs || !te->targs[0]) {
        ck_err(c, te->loc, "createDynamicObject<I>(id, data) / createDynamicObject<I, T>(id, data) takes an "
               "interface and optionally the data's type");
        return call->type = c->tt->t_error;
    }
    const nb_type *et = ck_resolve_type(c, te->targs[0]);
    if (ck_is_error(et)) return call->type = et;
    if (et->kind != NB_TY_STRUCT || !et->decl || !et->decl->u.strct.is_existential) {
        ck_err(c, te->targs[0]->loc, "createDynamicObject<%s>: '%s' is not an interface", et->name, et->name);
        return call->type = c->tt->t_error;
    }
    const nb_type *dt = NULL;
    if (te->ntargs == 2) {
        dt = te->targs[1] ? ck_resolve_type(c, te->targs[1]) : NULL;
        if (!dt) {
            ck_err(c, te->loc, "generic argument 2 of 'createDynamicObject' must be a type");
            return call->type = c->tt->t_error;
        }
        if (ck_is_error(dt)) return call->type = dt;
    }
    if (n != 2) {
        ck_err(c, call->loc, "createDynamicObject<%s>(id, data) takes 2 arguments, got %d", et->name, n);
        return call->type = c->tt->t_error;
    }
    for (int i = 0; i < n; i++)
        if (ck_is_error(call->u.call.args[i]->type)) return call->type = c->tt->t_error;
    if (!dt) dt = call->u.call.args[1]->type;
    if (!ck_coerce(c, &call->u.call.args[0], c->tt->t_uint, "argument 1 of 'createDynamicObject' (the id)") ||
        !ck_coerce(c, &call->u.call.args[1], dt, "argument 2 of 'createDynamicObject' (the data)"))
        return call->type = c->tt->t_error;
    nb_decl *fn = create_func(c, et, dt, call->loc);
    if (!fn) return call->type = c->tt->t_error;
    nb_expr *callee = call->u.call.callee;
    callee->kind = NB_EX_NAME;
    memset(&callee->u, 0, sizeof callee->u);
    callee->u.name.name = fn->name;
    callee->ref = NB_REF_FUNCTION;
    callee->decl = fn;
    callee->type = nb_type_func(c->tt, fn);
    call->ref = NB_REF_FUNCTION;
    call->decl = fn;
    ck_add_edge(c, fn, call->loc);
    return call->type = et;
}

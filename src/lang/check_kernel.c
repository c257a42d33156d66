/* Slang's compute-shader forms (issue #14): entry points and the buffers they write.
 *
 *   [numthreads(X, Y, Z)] void computeMain(uint3 tid : SV_DispatchThreadID) { … }
 *     is a [Kernel] function whose thread group is X×Y×Z. Its system-value parameters are not
 *     parameters for the host: each becomes a local initialized from the thread indices
 *     (dispatch_id() / cudaThreadIdx() / cudaBlockIdx(), which callgen.c fills consistently with
 *     the group size), so reflection, binding and the call kernels see an ordinary [Kernel].
 *     The semantics are also accepted on [Kernel] / [CudaKernel] functions (group size 1 on the
 *     CPU, the launch's block on CUDA).
 *   RWStructuredBuffer<T> / StructuredBuffer<T>  are Tensor<T, 1>: whole-array bindings,
 *     bounds-checked indexing buf[i].
 *   RWStructuredBuffer<float> out;  at module scope is a *shader parameter*: after checking,
 *     every function that uses it (directly or through the functions it calls) gets it as a
 *     trailing parameter of the same name, and every call passes it on (ck_bind_shader_params).
 *     So the entry point lists the buffers it reaches after its own parameters and the host
 *     binds them by name like any Tensor parameter; code without such globals is unchanged.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "lang/check_internal.h"
#include "lang/lexer.h"
#include "nabla/alloc.h"

/* ---- types -------------------------------------------------------------------------------- */

int ck_is_buffer_type_name(const char *n) {
    return n && (!strcmp(n, "RWStructuredBuffer") || !strcmp(n, "StructuredBuffer") ||
                 !strcmp(n, "RasterizerOrderedStructuredBuffer"));
}

const nb_type *ck_resolve_buffer_type(nb_checker *c, nb_type_expr *te) {
    const char *n = te->name;
    if (te->ntargs != 1 || !te->targs || !te->targs[0]) {
        ck_err(c, te->loc, "'%s' takes 1 generic argument (the element type), got %d", n, te->ntargs);
        return c->tt->t_error;
    }
    const nb_type *e = ck_resolve_type(c, te->targs[0]);
    if (ck_is_error(e)) return e;
    if (e->kind != NB_TY_SCALAR && e->kind != NB_TY_VECTOR && e->kind != NB_TY_MATRIX) {
        ck_err(c, te->targs[0]->loc, "'%s' element must be a scalar, vector or matrix type, got '%s' "
               "(buffers of structs or arrays are not supported: use one buffer per field)", n, e->name);
        return c->tt->t_error;
    }
    return nb_type_buffer(c->tt, e, strcmp(n, "StructuredBuffer") ? 1 : 2);
}

/* ---- [numthreads(x, y, z)] ---------------------------------------------------------------- */

void ck_kernel_numthreads(nb_checker *c, nb_decl *fn, const nb_attr *a) {
    fn->u.func.is_kernel = 1; /* (an entry point even when the sizes are wrong: no follow-on errors) */
    if (a->nargs < 1 || a->nargs > 3) {
        ck_err(c, a->loc, "[numthreads] takes 1 to 3 constant integers, got %d", a->nargs);
        return;
    }
    int64_t n[3] = {1, 1, 1}, total = 1;
    for (int i = 0; i < a->nargs; i++) {
        ck_expr(c, &a->args[i]);
        if (!ck_const_int(a->args[i], &n[i])) {
            ck_err(c, a->args[i]->loc, "[numthreads] arguments must be constant integers");
            return;
        }
        if (n[i] < 1 || n[i] > 1024) {
            ck_err(c, a->args[i]->loc, "[numthreads] sizes must be 1 to 1024, got %lld", (long long)n[i]);
            return;
        }
        total *= n[i];
    }
    if (n[2] > 64 || total > 1024) {
        ck_err(c, a->loc, "[numthreads(%lld, %lld, %lld)]: a thread group has at most 1024 threads and z at most 64",
               (long long)n[0], (long long)n[1], (long long)n[2]);
        return;
    }
    for (int i = 0; i < 3; i++) fn->u.func.numthreads[i] = (int)n[i];
    fn->u.func.is_kernel = 1;
}

/* [shader("compute")] marks an entry point (Slang); without [numthreads] its thread group is
 * 1×1×1 (one thread per group). Other stages ("vertex", "fragment", …) have no meaning here and
 * are accepted without effect; the argument must be one string. */
void ck_kernel_shader_stage(nb_checker *c, nb_decl *fn, const nb_attr *a) {
    /* (the parser gives a string argument of an attribute as a NAME of its unquoted text) */
    if (a->nargs != 1 || !a->args[0] || a->args[0]->kind != NB_EX_NAME || !a->args[0]->u.name.name) {
        ck_err(c, a->nargs >= 1 && a->args[0] ? a->args[0]->loc : a->loc,
               "[shader] takes the stage name as one string, e.g. [shader(\"compute\")]");
        return;
    }
    if (strcmp(a->args[0]->u.name.name, "compute") != 0) return;
    for (int i = 0; i < fn->attrs.count; i++) /* ([numthreads] sets the group itself) */
        if (fn->attrs.items[i].name && !strcmp(fn->attrs.items[i].name, "numthreads")) return;
    fn->u.func.is_kernel = 1;
    for (int i = 0; i < 3; i++) fn->u.func.numthreads[i] = 1;
}

/* ---- system-value parameters --------------------------------------------------------------- */

typedef enum { SV_DISPATCH, SV_GROUP_THREAD, SV_GROUP, SV_GROUP_INDEX } sv_kind;

static const struct { const char *name; sv_kind k; const char *intr; } sv_table[] = {
    {"SV_DispatchThreadID", SV_DISPATCH, "dispatch_id"},
    {"SV_GroupThreadID", SV_GROUP_THREAD, "cudaThreadIdx"},
    {"SV_GroupID", SV_GROUP, "cudaBlockIdx"},
    {"SV_GroupIndex", SV_GROUP_INDEX, "cudaThreadIdx"},
};

static int sv_lookup(const char *s) {
    for (int i = 0; i < (int)(sizeof sv_table / sizeof sv_table[0]); i++)
        if (!strcasecmp(s, sv_table[i].name)) return i; /* (HLSL semantics are case-insensitive) */
    return -1;
}

static nb_expr *mk_name(nb_checker *c, const char *name, nb_loc loc) {
    nb_expr *e = ck_new_expr(c, NB_EX_NAME, loc);
    if (e) e->u.name.name = name;
    return e;
}

static nb_expr *mk_int(nb_checker *c, int64_t v, nb_loc loc) {
    nb_expr *e = ck_new_expr(c, NB_EX_INT, loc);
    if (e) e->u.ilit.value = (uint64_t)v, e->u.ilit.is_unsigned = 1;
    return e;
}

static nb_expr *mk_call0(nb_checker *c, const char *fn, nb_loc loc) {
    nb_expr *e = ck_new_expr(c, NB_EX_CALL, loc);
    if (e) e->u.call.callee = mk_name(c, fn, loc);
    return e;
}

static nb_expr *mk_member(nb_checker *c, nb_expr *base, const char *m, nb_loc loc) {
    nb_expr *e = ck_new_expr(c, NB_EX_MEMBER, loc);
    if (e) e->u.member.base = base, e->u.member.member = m;
    return e;
}

static nb_expr *mk_binary(nb_checker *c, int op, nb_expr *a, nb_expr *b, nb_loc loc) {
    nb_expr *e = ck_new_expr(c, NB_EX_BINARY, loc);
    if (e) e->u.binary.op = op, e->u.binary.lhs = a, e->u.binary.rhs = b;
    return e;
}

/* The value of semantic k for parameter type t, as an expression over the thread indices. */
static nb_expr *sv_value(nb_checker *c, nb_decl *fn, int k, const nb_type *t, nb_loc loc) {
    const char *intr = sv_table[k].intr;
    nb_expr *v;
    if (sv_table[k].k == SV_GROUP_INDEX) { /* x + y * X + z * X * Y within the group */
        int nx = fn->u.func.numthreads[0] ? fn->u.func.numthreads[0] : 1;
        int ny = fn->u.func.numthreads[1] ? fn->u.func.numthreads[1] : 1;
        v = mk_binary(c, NB_TOK_PLUS, mk_member(c, mk_call0(c, intr, loc), "x", loc),
                      mk_binary(c, NB_TOK_PLUS,
                                mk_binary(c, NB_TOK_STAR, mk_member(c, mk_call0(c, intr, loc), "y", loc), mk_int(c, nx, loc), loc),
                                mk_binary(c, NB_TOK_STAR, mk_member(c, mk_call0(c, intr, loc), "z", loc),
                                          mk_int(c, (int64_t)nx * ny, loc), loc),
                                loc),
                      loc);
    } else {
        v = mk_call0(c, intr, loc);
        int n = t->kind == NB_TY_VECTOR ? t->cols : 1;
        if (n < 3) v = mk_member(c, v, n == 1 ? "x" : "xy", loc);
    }
    nb_expr *cast = ck_new_expr(c, NB_EX_CAST, loc);
    if (!cast) return NULL;
    nb_type_expr *te = ck_alloc(c, sizeof *te);
    if (!te) return NULL;
    te->loc = loc;
    te->name = t->name;
    te->resolved = t;
    cast->u.cast.texpr = te;
    cast->u.cast.operand = v;
    cast->u.cast.implicit = 0;
    return cast;
}

/* Called by ck_check_func_sig once parameter types and attributes are known: the parameters
 * with system-value semantics become locals at the top of the body. */
void ck_kernel_semantics(nb_checker *c, nb_decl *fn) {
    int nsv = 0;
    for (int i = 0; i < fn->u.func.nparams; i++) {
        nb_decl *p = fn->u.func.params[i];
        if (p && p->u.param.semantic) nsv++;
    }
    if (!nsv) return;
    const char *fname = fn->name ? fn->name : "?";
    nb_decl **keep = ck_alloc(c, sizeof(nb_decl *) * (size_t)fn->u.func.nparams);
    nb_decl **locals = ck_alloc(c, sizeof(nb_decl *) * (size_t)nsv);
    if (!keep || !locals) return;
    int nkeep = 0, nloc = 0, bad = 0;
    for (int i = 0; i < fn->u.func.nparams; i++) {
        nb_decl *p = fn->u.func.params[i];
        if (!p || !p->u.param.semantic) {
            if (p) p->u.param.index = nkeep;
            keep[nkeep++] = p;
            continue;
        }
        const char *sem = p->u.param.semantic;
        int k = sv_lookup(sem);
        const nb_type *t = p->u.param.type;
        if (k < 0) {
            if (!strncasecmp(sem, "SV_", 3))
                ck_err(c, p->u.param.semantic_loc, "unknown system-value semantic '%s' (compute entry points take "
                       "SV_DispatchThreadID, SV_GroupThreadID, SV_GroupID, SV_GroupIndex)", sem);
            else if (fn->u.func.is_kernel)
                ck_err(c, p->u.param.semantic_loc, "semantic '%s' on a parameter of compute entry point '%s': only "
                       "system values (SV_DispatchThreadID, SV_GroupThreadID, SV_GroupID, SV_GroupIndex) are inputs "
                       "of a compute kernel", sem, fname);
            else { /* a user semantic on an ordinary function means nothing here (as in Slang) */
                p->u.param.index = nkeep;
                keep[nkeep++] = p;
                continue;
            }
            bad = 1;
            continue;
        }
        if (!fn->u.func.is_kernel) {
            ck_err(c, p->u.param.semantic_loc, "'%s' is only available in compute entry points: give '%s' a "
                   "[numthreads(x, y, z)] (or [Kernel]) attribute", sem, fname);
            bad = 1;
            continue;
        }
        if (ck_is_error(t)) { bad = 1; continue; }
        int ok;
        if (sv_table[k].k == SV_GROUP_INDEX)
            ok = t->kind == NB_TY_SCALAR && (t->scalar == NB_SC_INT || t->scalar == NB_SC_UINT);
        else
            ok = (t->kind == NB_TY_SCALAR || (t->kind == NB_TY_VECTOR && t->cols <= 3)) &&
                 (t->scalar == NB_SC_INT || t->scalar == NB_SC_UINT);
        if (!ok) {
            if (sv_table[k].k == SV_GROUP_INDEX)
                ck_err(c, p->loc, "'%s' parameter '%s' must be 'uint' or 'int', got '%s'", sv_table[k].name,
                       p->name ? p->name : "?", t->name);
            else
                ck_err(c, p->loc, "'%s' parameter '%s' must be 'uint', 'uint2', 'uint3' (or 'int', 'int2', 'int3'), "
                       "got '%s'", sv_table[k].name, p->name ? p->name : "?", t->name);
            bad = 1;
            continue;
        }
        if (p->u.param.dir != NB_DIR_IN || p->u.param.default_value) {
            ck_err(c, p->loc, "system-value parameter '%s' must be a plain 'in' parameter", p->name ? p->name : "?");
            bad = 1;
            continue;
        }
        nb_decl *v = ck_alloc(c, sizeof *v);
        if (!v) return;
        v->kind = NB_DECL_VAR;
        v->loc = p->loc;
        v->name = p->name && *p->name ? p->name : "_sv";
        v->module = fn->module;
        v->u.var.texpr = p->u.param.texpr;
        v->u.var.init = sv_value(c, fn, k, t, p->u.param.semantic_loc);
        locals[nloc++] = v;
    }
    fn->u.func.params = keep;
    fn->u.func.nparams = nkeep;
    (void)bad;
    if (!nloc || !fn->u.func.body || fn->u.func.body->kind != NB_ST_BLOCK) return;
    /* prepend `T name = (T)<thread index>;` to the body */
    nb_stmt *body = fn->u.func.body;
    nb_stmt *st = ck_alloc(c, sizeof *st);
    nb_stmt **items = ck_alloc(c, sizeof(nb_stmt *) * (size_t)(body->u.block.count + 1));
    if (!st || !items) return;
    st->kind = NB_ST_VAR;
    st->loc = body->loc;
    st->u.var.vars = locals;
    st->u.var.count = nloc;
    items[0] = st;
    for (int i = 0; i < body->u.block.count; i++) items[i + 1] = body->u.block.items[i];
    body->u.block.items = items;
    body->u.block.count++;
}

/* ---- module-scope shader parameters -------------------------------------------------------- */

/* Called by ck_check_global_var for a global of buffer / tensor type without static/const:
 * returns 1 when it is a shader parameter (type set), 0 to let the caller report. */
int ck_kernel_global(nb_checker *c, nb_decl *d, const nb_type *t) {
    if (d->mods & NB_MOD_GROUPSHARED) { /* `groupshared float tile[64];`: one per thread group */
        const char *name = d->name ? d->name : "?";
        if (d->mods & (NB_MOD_CONST | NB_MOD_EXTERN))
            ck_err(c, d->loc, "groupshared variable '%s' cannot be const or extern", name);
        if (d->u.var.init) ck_err(c, d->u.var.init->loc, "groupshared variable '%s' cannot have an initializer", name);
        if (t && !ck_is_error(t) && (t->kind == NB_TY_TENSOR || t->kind == NB_TY_VOID)) {
            ck_err(c, d->loc, "groupshared variable '%s' cannot have type '%s'", name, t->name);
            t = c->tt->t_error;
        }
        d->u.var.type = t ? t : c->tt->t_error;
        d->u.var.shader_param = 2;
        return 1;
    }
    if (ck_is_error(t) && d->u.var.texpr && ck_is_buffer_type_name(d->u.var.texpr->name) &&
        !(d->mods & (NB_MOD_STATIC | NB_MOD_CONST | NB_MOD_EXTERN))) { /* (reported) */
        d->u.var.type = t;
        return 1;
    }
    if (!t || (d->mods & (NB_MOD_STATIC | NB_MOD_CONST | NB_MOD_EXTERN))) return 0;
    /* `uniform float scale;` / `float3 g;` (Slang's implicit uniforms): a shader parameter bound by
     * name like a module-scope buffer (SlangPy's f.set({...})) */
    if (t->kind != NB_TY_TENSOR && t->kind != NB_TY_SCALAR && t->kind != NB_TY_VECTOR && t->kind != NB_TY_MATRIX &&
        t->kind != NB_TY_STRUCT && t->kind != NB_TY_ARRAY) return 0;
    if (d->u.var.init) ck_err(c, d->u.var.init->loc, "shader parameter '%s' cannot have an initializer (it is bound by the host)",
                              d->name ? d->name : "?");
    d->u.var.type = t;
    d->u.var.shader_param = 1;
    return 1;
}

/* After checking: every function reaching a shader parameter takes it as a trailing parameter. */

#define MAX_SP 64 /* shader parameters in one program (a bit mask) */

typedef struct sp_fn {
    nb_decl *fn;
    uint64_t mask;       /* shader parameters (and groupshared globals) it reaches */
    nb_decl **callees;   /* user functions it calls (duplicates allowed) */
    int ncallees, cap;
    nb_decl *hid[MAX_SP]; /* by global: the parameter or (groupshared in an entry) local standing for it */
    int called, reached, local_shared;
} sp_fn;

typedef struct sp_ctx {
    nb_checker *c;
    nb_decl *sp[MAX_SP];
    int nsp;
    sp_fn *fns;
    int nfns, cap;
    sp_fn *cur;          /* function being walked */
    int pass;            /* 0: collect, 1: rewrite */
} sp_ctx;

static int sp_index(sp_ctx *x, nb_decl *g) {
    for (int i = 0; i < x->nsp; i++)
        if (x->sp[i] == g) return i;
    return -1;
}

static sp_fn *sp_find(sp_ctx *x, nb_decl *fn) {
    for (int i = 0; i < x->nfns; i++)
        if (x->fns[i].fn == fn) return &x->fns[i];
    return NULL;
}

/* Marks every function reached from a [Kernel] / [CudaKernel] through calls (and, with
 * derivatives, through a reached function's custom fwd/bwd derivatives, which run in its
 * derivatives' kernels): sp_fn.reached. */
static void reach_from_kernels(sp_ctx *x, int derivatives) {
    for (int i = 0; i < x->nfns; i++) x->fns[i].reached = x->fns[i].fn->u.func.is_kernel;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < x->nfns; i++) {
            if (!x->fns[i].reached) continue;
            for (int j = 0; j < x->fns[i].ncallees; j++) {
                sp_fn *t = sp_find(x, x->fns[i].callees[j]);
                if (t && !t->reached) t->reached = changed = 1;
            }
            nb_decl *fd = x->fns[i].fn;
            nb_decl *rel[2] = {fd->u.func.fwd_derivative, fd->u.func.bwd_derivative};
            for (int r = 0; derivatives && r < 2; r++) {
                sp_fn *t = rel[r] ? sp_find(x, rel[r]) : NULL;
                if (t && !t->reached) t->reached = changed = 1;
            }
        }
    }
}

static void sp_walk_stmt(sp_ctx *x, nb_stmt *s);

static nb_expr *hidden_arg(sp_ctx *x, int g, nb_loc loc) {
    nb_decl *p = x->cur->hid[g];
    if (!p) return NULL;
    nb_expr *e = ck_new_expr(x->c, NB_EX_NAME, loc);
    if (!e) return NULL;
    e->u.name.name = p->name;
    if (p->kind == NB_DECL_PARAM) {
        e->ref = NB_REF_PARAM;
        e->index = p->u.param.index;
        e->type = p->u.param.type;
    } else {
        e->ref = NB_REF_LOCAL;
        e->type = p->u.var.type;
    }
    e->decl = p;
    e->is_lvalue = x->sp[g]->u.var.shader_param >= 2;
    return e;
}

static void sp_walk_expr(sp_ctx *x, nb_expr *e) {
    if (!e) return;
    switch (e->kind) {
    case NB_EX_NAME:
        if (e->ref == NB_REF_GLOBAL && e->decl && e->decl->kind == NB_DECL_VAR && e->decl->u.var.shader_param) {
            int g = sp_index(x, e->decl);
            if (g < 0) return;
            if (x->pass == 0) {
                x->cur->mask |= 1ull << g;
            } else {
                nb_expr *a = hidden_arg(x, g, e->loc);
                if (a) *e = *a;
            }
        }
        return;
    case NB_EX_UNARY: sp_walk_expr(x, e->u.unary.operand); return;
    case NB_EX_BINARY: sp_walk_expr(x, e->u.binary.lhs); sp_walk_expr(x, e->u.binary.rhs); return;
    case NB_EX_ASSIGN: sp_walk_expr(x, e->u.assign.lhs); sp_walk_expr(x, e->u.assign.rhs); return;
    case NB_EX_TERNARY:
        sp_walk_expr(x, e->u.ternary.cond);
        sp_walk_expr(x, e->u.ternary.then_e);
        sp_walk_expr(x, e->u.ternary.else_e);
        return;
    case NB_EX_CALL: {
        nb_expr *callee = e->u.call.callee;
        if (callee && callee->kind == NB_EX_MEMBER) sp_walk_expr(x, callee->u.member.base);
        else if (callee && callee->kind == NB_EX_CALL) sp_walk_expr(x, callee);
        for (int i = 0; i < e->u.call.nargs; i++) sp_walk_expr(x, e->u.call.args[i]);
        int diff = callee && callee->kind == NB_EX_CALL; /* fwd_diff(f)(…) / bwd_diff(f)(…) */
        nb_decl *fn = (e->ref == NB_REF_FUNCTION || e->ref == NB_REF_METHOD || diff) ? e->decl : NULL;
        if (!fn || fn->kind != NB_DECL_FUNC) return;
        if (x->pass == 0) {
            sp_fn *f = x->cur;
            if (!ck_grow((void **)&f->callees, &f->cap, f->ncallees + 1, sizeof(nb_decl *))) return;
            f->callees[f->ncallees++] = fn;
            return;
        }
        sp_fn *t = sp_find(x, fn);
        if (!t || !t->mask) return;
        /* (fwd_diff(f)(…) / bwd_diff(f)(…) pass them last too: the derivatives of f take them
         * after every other parameter, bwd's result gradient included; ad_bwd.c bwd_func) */
        int nh = __builtin_popcountll(t->mask);
        nb_expr **na = ck_alloc(x->c, sizeof(nb_expr *) * (size_t)(e->u.call.nargs + nh));
        if (!na) return;
        for (int i = 0; i < e->u.call.nargs; i++) na[i] = e->u.call.args[i];
        int k = e->u.call.nargs;
        for (int g = 0; g < x->nsp; g++)
            if (t->mask >> g & 1) na[k++] = hidden_arg(x, g, e->loc);
        e->u.call.args = na;
        e->u.call.nargs = k;
        e->u.call.arg_names = NULL;
        return;
    }
    case NB_EX_MEMBER: sp_walk_expr(x, e->u.member.base); return;
    case NB_EX_INDEX:
        sp_walk_expr(x, e->u.index.base);
        for (int i = 0; i < e->u.index.nindices; i++) sp_walk_expr(x, e->u.index.indices[i]);
        return;
    case NB_EX_CAST: sp_walk_expr(x, e->u.cast.operand); return;
    case NB_EX_INIT_LIST:
        for (int i = 0; i < e->u.init_list.nitems; i++) sp_walk_expr(x, e->u.init_list.items[i]);
        return;
    default: return;
    }
}

static void sp_walk_stmt(sp_ctx *x, nb_stmt *s) {
    if (!s) return;
    switch (s->kind) {
    case NB_ST_BLOCK:
        for (int i = 0; i < s->u.block.count; i++) sp_walk_stmt(x, s->u.block.items[i]);
        return;
    case NB_ST_EXPR: sp_walk_expr(x, s->u.expr.expr); return;
    case NB_ST_VAR:
        for (int i = 0; i < s->u.var.count; i++)
            if (s->u.var.vars[i]) {
                if (s->u.var.vars[i]->mods & NB_MOD_GROUPSHARED) x->cur->local_shared = 1;
                sp_walk_expr(x, s->u.var.vars[i]->u.var.init);
            }
        return;
    case NB_ST_IF:
        sp_walk_expr(x, s->u.if_s.cond);
        sp_walk_stmt(x, s->u.if_s.then_s);
        sp_walk_stmt(x, s->u.if_s.else_s);
        return;
    case NB_ST_FOR:
        sp_walk_stmt(x, s->u.for_s.init);
        sp_walk_expr(x, s->u.for_s.cond);
        sp_walk_expr(x, s->u.for_s.step);
        sp_walk_stmt(x, s->u.for_s.body);
        return;
    case NB_ST_WHILE:
    case NB_ST_DO_WHILE:
        sp_walk_expr(x, s->u.while_s.cond);
        sp_walk_stmt(x, s->u.while_s.body);
        return;
    case NB_ST_SWITCH:
        sp_walk_expr(x, s->u.switch_s.value);
        for (int i = 0; i < s->u.switch_s.ncases; i++)
            for (int j = 0; j < s->u.switch_s.cases[i].nbody; j++) sp_walk_stmt(x, s->u.switch_s.cases[i].body[j]);
        return;
    case NB_ST_RETURN: sp_walk_expr(x, s->u.ret.value); return;
    default: return;
    }
}

static void sp_add_fn(sp_ctx *x, nb_decl *fn) {
    if (!fn || fn->kind != NB_DECL_FUNC || ck_is_template(fn) || !fn->u.func.body) return;
    if (!ck_grow((void **)&x->fns, &x->cap, x->nfns + 1, sizeof(sp_fn))) return;
    memset(&x->fns[x->nfns], 0, sizeof(sp_fn));
    x->fns[x->nfns++].fn = fn;
}

void ck_bind_shader_params(nb_checker *c) {
    sp_ctx x;
    memset(&x, 0, sizeof x);
    x.c = c;
    nb_program *p = c->p;
    for (int mi = 0; mi < p->nmodules; mi++) {
        nb_module_ast *m = p->modules[mi];
        for (int i = 0; m && i < m->ndecls; i++) {
            nb_decl *d = m->decls[i];
            if (d && d->kind == NB_DECL_VAR && d->u.var.shader_param) {
                if (x.nsp == MAX_SP) {
                    ck_err(c, d->loc, "too many module-scope buffers (at most %d)", MAX_SP);
                    return;
                }
                x.sp[x.nsp++] = d;
            }
        }
    }
    if (!x.nsp && !c->saw_groupshared && !c->saw_tid) return; /* (the common case: nothing to do) */
    for (int mi = 0; mi < p->nmodules; mi++) {
        nb_module_ast *m = p->modules[mi];
        for (int i = 0; m && i < m->ndecls; i++) {
            nb_decl *d = m->decls[i];
            if (!d) continue;
            if (d->kind == NB_DECL_FUNC) sp_add_fn(&x, d);
            else if (d->kind == NB_DECL_STRUCT && !ck_is_template(d))
                for (int k = 0; k < d->u.strct.nmethods; k++) sp_add_fn(&x, d->u.strct.methods[k]);
        }
    }
    /* pass 0: direct uses and callees; then the closure over the call graph */
    x.pass = 0;
    for (int i = 0; i < x.nfns; i++) {
        x.cur = &x.fns[i];
        sp_walk_stmt(&x, x.fns[i].fn->u.func.body);
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < x.nfns; i++) {
            for (int j = 0; j < x.fns[i].ncallees; j++) {
                sp_fn *t = sp_find(&x, x.fns[i].callees[j]);
                if (t && (t->mask & ~x.fns[i].mask)) {
                    x.fns[i].mask |= t->mask;
                    changed = 1;
                }
            }
            /* a function and its custom derivatives / primal substitute take the same buffers:
             * a call of f's derivative, generated or user-given, passes f's (Slang: a derivative
             * may write a global buffer, e.g. a gradient; the buffer itself is not differentiable) */
            nb_decl *fd = x.fns[i].fn;
            nb_decl *rel[3] = {fd->u.func.fwd_derivative, fd->u.func.bwd_derivative, fd->u.func.primal_subst};
            for (int r = 0; r < 3; r++) {
                sp_fn *t = rel[r] ? sp_find(&x, rel[r]) : NULL;
                if (!t || t->mask == x.fns[i].mask) continue;
                t->mask = x.fns[i].mask = t->mask | x.fns[i].mask;
                changed = 1;
            }
        }
    }
    /* thread indices: a function calling one that reads them reads them too (and so do a function
     * and its custom derivatives: a call of f's derivative passes f's thread ids); each must be
     * reached from a kernel, which has them */
    for (int changed = c->saw_tid; changed;) {
        changed = 0;
        for (int i = 0; i < x.nfns; i++) {
            nb_decl *fd = x.fns[i].fn;
            for (int j = 0; j < x.fns[i].ncallees && !fd->u.func.uses_tid; j++)
                if (x.fns[i].callees[j]->u.func.uses_tid && !x.fns[i].callees[j]->u.func.is_kernel)
                    fd->u.func.uses_tid = changed = 1;
            nb_decl *rel[3] = {fd->u.func.fwd_derivative, fd->u.func.bwd_derivative, fd->u.func.primal_subst};
            for (int r = 0; r < 3; r++)
                if (rel[r] && rel[r]->u.func.uses_tid != fd->u.func.uses_tid)
                    rel[r]->u.func.uses_tid = fd->u.func.uses_tid = changed = 1;
        }
    }
    if (c->saw_tid) {
        reach_from_kernels(&x, 1);
        for (int i = 0; i < x.nfns; i++) {
            nb_decl *fd = x.fns[i].fn;
            if (!x.fns[i].reached && fd->u.func.uses_tid && !fd->u.func.is_kernel)
                ck_err(c, fd->loc, "'%s' reads the thread indices (cudaThreadIdx(), cudaBlockIdx(), cudaBlockDim() or "
                       "dispatch_id(), directly or through a callee) but is not called from a [Kernel] / [CudaKernel] "
                       "function: thread indices exist only in a kernel launch", fd->name ? fd->name : "?");
        }
    }
    /* groupshared memory needs a thread group: every function using it is reached from an entry */
    uint64_t shared_mask = 0;
    for (int g = 0; g < x.nsp; g++)
        if (x.sp[g]->u.var.shader_param >= 2) shared_mask |= 1ull << g; /* (and mutable statics: per thread) */
    for (int i = 0; i < x.nfns; i++)
        for (int j = 0; j < x.fns[i].ncallees; j++) {
            sp_fn *t = sp_find(&x, x.fns[i].callees[j]);
            if (t && t != &x.fns[i]) t->called = 1;
        }
    /* [numthreads] entries run thread groups; a [Kernel] / [CudaKernel] has them when launched with
     * explicit blocks (nb_call_run_blocks: a block is the group; a launch over a thread grid of
     * such a kernel is refused at call time, callgen.c layout.shared_mem) */
    reach_from_kernels(&x, 0);
    for (int i = 0; i < x.nfns; i++) {
        sp_fn *f = &x.fns[i];
        if (f->reached || (!(f->mask & shared_mask) && !f->local_shared)) continue;
        const char *what = f->local_shared ? "a static groupshared variable" : NULL;
        char buf[160];
        if (!what) {
            nb_decl *gd = x.sp[__builtin_ctzll(f->mask & shared_mask)];
            if (gd->u.var.shader_param == 3) {
                ck_err(c, f->fn->loc, "'%s' uses the static variable '%s' but is not called from a [numthreads] compute "
                       "entry point or a [Kernel]: a mutable static global is per thread of an entry point",
                       f->fn->name ? f->fn->name : "?", gd->name ? gd->name : "?");
                continue;
            }
            snprintf(buf, sizeof buf, "groupshared '%s'", gd->name);
            what = buf;
        }
        ck_err(c, f->fn->loc, "'%s' uses %s but is not called from a [numthreads] compute entry point or a [Kernel]: "
               "groupshared memory belongs to a thread group (calls over arrays have none)",
               f->fn->name ? f->fn->name : "?", what);
    }
    /* the added parameters (groupshared globals: locals of the entry points, inout parameters elsewhere) */
    for (int i = 0; i < x.nfns; i++) {
        sp_fn *f = &x.fns[i];
        nb_decl *fn = f->fn;
        if (!f->mask) continue;
        int entry = fn->u.func.is_kernel && !f->called;
        uint64_t as_param = entry ? f->mask & ~shared_mask : f->mask, as_local = entry ? f->mask & shared_mask : 0;
        int nh = __builtin_popcountll(as_param), np = fn->u.func.nparams;
        if (as_local) {
            int nl = __builtin_popcountll(as_local), k = 0;
            nb_decl **locals = ck_alloc(c, sizeof(nb_decl *) * (size_t)nl);
            nb_stmt *body = fn->u.func.body, *st = ck_alloc(c, sizeof *st);
            nb_stmt **items = body && body->kind == NB_ST_BLOCK ? ck_alloc(c, sizeof(nb_stmt *) * (size_t)(body->u.block.count + 1)) : NULL;
            if (!locals || !st || !items) return;
            for (int g = 0; g < x.nsp; g++) {
                if (!(as_local >> g & 1)) continue;
                nb_decl *v = ck_alloc(c, sizeof *v);
                if (!v) return;
                *v = *x.sp[g];
                v->mods = x.sp[g]->u.var.shader_param == 3 ? 0 : NB_MOD_STATIC | NB_MOD_GROUPSHARED; /* (static: a plain local with its initializer) */
                v->u.var.is_global = 0;
                v->u.var.shader_param = 0;
                v->module = fn->module;
                f->hid[g] = locals[k++] = v;
            }
            st->kind = NB_ST_VAR;
            st->loc = body->loc;
            st->u.var.vars = locals;
            st->u.var.count = nl;
            items[0] = st;
            for (int j = 0; j < body->u.block.count; j++) items[j + 1] = body->u.block.items[j];
            body->u.block.items = items;
            body->u.block.count++;
        }
        if (!nh) continue;
        nb_decl **ps = ck_alloc(c, sizeof(nb_decl *) * (size_t)(np + nh));
        if (!ps) return;
        for (int k = 0; k < np; k++) ps[k] = fn->u.func.params[k];
        for (int g = 0; g < x.nsp; g++) {
            if (!(as_param >> g & 1)) continue;
            nb_decl *gd = x.sp[g];
            for (int k = 0; k < np; k++)
                if (ps[k] && ps[k]->name && gd->name && !strcmp(ps[k]->name, gd->name))
                    ck_err(c, ps[k]->loc, "parameter '%s' of '%s' has the name of the module-scope buffer '%s' "
                           "that the function uses", gd->name, fn->name ? fn->name : "?", gd->name);
            nb_decl *q = ck_alloc(c, sizeof *q);
            if (!q) return;
            q->kind = NB_DECL_PARAM;
            q->loc = gd->loc;
            q->name = gd->name;
            q->module = fn->module;
            q->u.param.texpr = gd->u.var.texpr;
            q->u.param.type = gd->u.var.type;
            q->u.param.dir = gd->u.var.shader_param >= 2 ? NB_DIR_INOUT : NB_DIR_IN;
            q->u.param.index = np;
            f->hid[g] = q;
            q->u.param.hidden = 1;
            ps[np++] = q;
        }
        fn->u.func.params = ps;
        fn->u.func.nparams = np;
    }
    /* pass 1: references become the parameters, calls pass them */
    x.pass = 1;
    for (int i = 0; i < x.nfns; i++) {
        x.cur = &x.fns[i];
        sp_walk_stmt(&x, x.fns[i].fn->u.func.body);
    }
    for (int i = 0; i < x.nfns; i++) nb_free(x.fns[i].callees, sizeof(nb_decl *) * (size_t)x.fns[i].cap);
    nb_free(x.fns, sizeof(sp_fn) * (size_t)x.cap);
}

/* ---- wave intrinsics ------------------------------------------------------------------------ */

/* Types a Wave* call (intrinsics.h NB_ISIG_WAVE). Values are scalars (Slang also takes vectors:
 * not supported yet); integer-only and bool-only operations as in HLSL. */
const nb_type *ck_group_intrinsic(nb_checker *c, nb_expr *call, int id, nb_expr **args, int n, const char *name) {
    (void)n;
    switch (id) {
    case NB_INTR_WAVE_LANE_INDEX: case NB_INTR_WAVE_LANE_COUNT: return c->tt->t_uint;
    case NB_INTR_WAVE_IS_FIRST: return c->tt->t_bool;
    case NB_INTR_WAVE_ALL_TRUE: case NB_INTR_WAVE_ANY_TRUE: case NB_INTR_WAVE_BALLOT: case NB_INTR_WAVE_COUNT_BITS:
        if (!ck_coerce(c, &args[0], c->tt->t_bool, name)) return c->tt->t_error;
        if (id == NB_INTR_WAVE_BALLOT) return nb_type_vector(c->tt, NB_SC_UINT, 4);
        return id == NB_INTR_WAVE_COUNT_BITS ? c->tt->t_uint : c->tt->t_bool;
    default: break;
    }
    const nb_type *t = args[0]->type;
    int bits = id == NB_INTR_WAVE_BIT_AND || id == NB_INTR_WAVE_BIT_OR || id == NB_INTR_WAVE_BIT_XOR;
    int any = id == NB_INTR_WAVE_READ_AT || id == NB_INTR_WAVE_READ_FIRST;
    int ok = t->kind == NB_TY_SCALAR &&
             (bits ? (t->scalar == NB_SC_INT || t->scalar == NB_SC_UINT)
                   : (t->scalar == NB_SC_INT || t->scalar == NB_SC_UINT || t->scalar == NB_SC_FLOAT ||
                      t->scalar == NB_SC_DOUBLE || (any && t->scalar == NB_SC_BOOL)));
    if (!ok) {
        ck_err(c, args[0]->loc, "'%s' takes %s, got '%s'%s", name,
               bits ? "an int or uint" : any ? "an int, uint, float, double or bool" : "an int, uint, float or double",
               t->name, t->kind == NB_TY_VECTOR ? " (vectors: call it per component)" : "");
        return c->tt->t_error;
    }
    if (id == NB_INTR_WAVE_READ_AT && !ck_coerce(c, &args[1], c->tt->t_uint, name)) return c->tt->t_error;
    (void)call;
    return t;
}

/* ---- groupshared ------------------------------------------------------------------------------ */

/* `static groupshared T x[N];` inside a function (check.c check_local_var). */
void ck_kernel_shared_local(nb_checker *c, nb_decl *d) {
    const char *name = d->name ? d->name : "?";
    if (!(d->mods & NB_MOD_STATIC))
        ck_err(c, d->loc, "groupshared variable '%s' inside a function must be 'static groupshared'", name);
    if (d->u.var.init) ck_err(c, d->u.var.init->loc, "groupshared variable '%s' cannot have an initializer", name);
    if (d->mods & NB_MOD_CONST) ck_err(c, d->loc, "groupshared variable '%s' cannot be const", name);
    c->saw_groupshared = 1;
}

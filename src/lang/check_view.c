/* slang-torch's kernel style (issue #14): TensorView<T> / DiffTensorView<T> parameters, their
 * methods, and [TorchEntryPoint] host functions.
 *
 * TensorView<T> has no rank in its type (slang-torch reads the rank from the bound tensor at
 * run time). nabla compiles a kernel per signature, so before checking, each TensorView
 * parameter gets the rank the function uses it with (ck_infer_view_ranks):
 *   t[i, j]            2           t[uint2(...)] / t[loc] with `uint2 loc`   2
 *   t.load(i, j)       2           t.store(i, j, v) / t.storeOnce(uint3(...), v)   2 / 3
 *   g(..., t, ...)     the rank g's parameter gets     t.size(d)   at least d + 1
 * and becomes Tensor<T, R> (DiffTensorView: DiffTensor<T, R>; bare DiffTensorView is float).
 * Uses that disagree are an error; a view that is never indexed gets the rank its size() calls
 * need, else 1. A bound array of another rank is then a binding error naming both shapes.
 *
 * Methods (ck_tensor_method, for Tensor, TensorView and structured buffers alike):
 *   t.load(i…) / t.loadOnce(i…)            t[i…]
 *   t.store(i…, v) / t.storeOnce(i…, v)    t[i…] = v
 *   t.size(d)                              the extent of dim d (uint; d constant)
 *   b.GetDimensions(out uint n)            n = the buffer's length (StructuredBuffer)
 *
 * [TorchEntryPoint] functions are host code (TorchTensor<T>, __dispatch_kernel): slang-torch
 * runs them on the CPU to launch kernels; the host side is issue #15. Here they are checked for
 * what the kernels need (every __dispatch_kernel names a [CudaKernel] function and passes it as
 * many arguments as it has parameters) and then left out of the program.
 */
#include <stdio.h>
#include <string.h>

#include "lang/check_internal.h"
#include "lang/lexer.h"

/* ---- rank inference ------------------------------------------------------------------------ */

static int is_view_name(const char *n) { return n && (!strcmp(n, "TensorView") || !strcmp(n, "DiffTensorView")); }

/* Component count of a written vector type name (uint2 -> 2, int3 -> 3, vector<int,2> -> 2), 1 for
 * anything else. */
static int type_width(const nb_type_expr *te) {
    if (!te || !te->name) return 1;
    const char *n = te->name;
    if (!strcmp(n, "vector") && te->ntargs == 2 && te->vargs && te->vargs[1] && te->vargs[1]->kind == NB_EX_INT)
        return (int)te->vargs[1]->u.ilit.value;
    size_t l = strlen(n);
    if (l > 1 && n[l - 1] >= '2' && n[l - 1] <= '4' && (!strncmp(n, "int", 3) || !strncmp(n, "uint", 4)) &&
        !strchr(n, 'x'))
        return n[l - 1] - '0';
    return 1;
}

typedef struct vi_ctx {
    nb_checker *c;
    nb_decl *fn;
    nb_module_ast *m;
    int depth;
} vi_ctx;

static int infer_param_rank(vi_ctx *x, nb_decl *fn, int pi);

/* The declared width of a local or parameter named `name` in fn (1 when unknown). */
static int name_width(vi_ctx *x, nb_stmt *s, const char *name, int *found);

static int name_width_in_params(nb_decl *fn, const char *name) {
    for (int i = 0; i < fn->u.func.nparams; i++) {
        nb_decl *p = fn->u.func.params[i];
        if (p && p->name && !strcmp(p->name, name)) return type_width(p->u.param.texpr);
    }
    return 0;
}

static int name_width(vi_ctx *x, nb_stmt *s, const char *name, int *found) {
    if (!s || *found) return 1;
    switch (s->kind) {
    case NB_ST_BLOCK:
        for (int i = 0; i < s->u.block.count && !*found; i++) {
            int w = name_width(x, s->u.block.items[i], name, found);
            if (*found) return w;
        }
        return 1;
    case NB_ST_VAR:
        for (int i = 0; i < s->u.var.count; i++) {
            nb_decl *v = s->u.var.vars[i];
            if (v && v->name && !strcmp(v->name, name)) {
                *found = 1;
                if (v->u.var.texpr) return type_width(v->u.var.texpr);
                return 1;
            }
        }
        return 1;
    case NB_ST_IF: {
        int w = name_width(x, s->u.if_s.then_s, name, found);
        if (*found) return w;
        return name_width(x, s->u.if_s.else_s, name, found);
    }
    case NB_ST_FOR: {
        int w = name_width(x, s->u.for_s.init, name, found);
        if (*found) return w;
        return name_width(x, s->u.for_s.body, name, found);
    }
    case NB_ST_WHILE: case NB_ST_DO_WHILE: return name_width(x, s->u.while_s.body, name, found);
    default: return 1;
    }
}

/* Components of an index expression, judged from how it is written. */
static int expr_width(vi_ctx *x, const nb_expr *e) {
    if (!e) return 1;
    switch (e->kind) {
    case NB_EX_CALL: {
        const nb_expr *cal = e->u.call.callee;
        if (cal && cal->kind == NB_EX_TYPE) return type_width(cal->u.type.texpr);
        if (cal && cal->kind == NB_EX_NAME) {
            nb_type_expr te;
            memset(&te, 0, sizeof te);
            te.name = cal->u.name.name;
            int w = type_width(&te);
            if (w > 1) return w;
            if (!strcmp(cal->u.name.name, "dispatch_id") || !strcmp(cal->u.name.name, "cudaThreadIdx") ||
                !strcmp(cal->u.name.name, "cudaBlockIdx") || !strcmp(cal->u.name.name, "cudaBlockDim"))
                return 3;
        }
        return 1;
    }
    case NB_EX_CAST: return type_width(e->u.cast.texpr);
    case NB_EX_MEMBER: {
        const char *m = e->u.member.member;
        size_t l = m ? strlen(m) : 0;
        if (l < 1 || l > 4) return 1;
        for (size_t i = 0; i < l; i++)
            if (!strchr("xyzwrgba", m[i])) return 1;
        return (int)l;
    }
    case NB_EX_BINARY: {
        int a = expr_width(x, e->u.binary.lhs), b = expr_width(x, e->u.binary.rhs);
        return a > b ? a : b;
    }
    case NB_EX_TERNARY: {
        int a = expr_width(x, e->u.ternary.then_e), b = expr_width(x, e->u.ternary.else_e);
        return a > b ? a : b;
    }
    case NB_EX_NAME: {
        const char *n = e->u.name.name ? e->u.name.name : "";
        int found = 0;
        int w = name_width(x, x->fn->u.func.body, n, &found);
        if (found) return w;
        w = name_width_in_params(x->fn, n);
        return w ? w : 1;
    }
    default: return 1;
    }
}

typedef struct vi_use {
    const char *name;
    int rank;        /* 0: not known yet */
    nb_loc loc;      /* where it was fixed */
    int min_rank;    /* from size(d) */
    int conflict;
    int field;       /* a struct field: uses are `anything.name` */
} vi_use;

static void use_rank(vi_ctx *x, vi_use *u, int r, nb_loc loc) {
    if (r <= 0 || u->conflict) return;
    if (!u->rank) {
        u->rank = r;
        u->loc = loc;
    } else if (u->rank != r) {
        ck_err(x->c, loc, "'%s' is used here with %d ind%s but with %d at %d:%d (a TensorView has one rank in a function)",
               u->name, r, r == 1 ? "ex" : "ices", u->rank, u->loc.line, u->loc.col);
        u->conflict = 1;
    }
}

static int g_vi_field; /* (is_view_ref matches `x.name` instead of `name`) */

static int is_view_ref(const nb_expr *e, const char *name) {
    if (g_vi_field) return e && e->kind == NB_EX_MEMBER && e->u.member.member && !strcmp(e->u.member.member, name);
    return e && e->kind == NB_EX_NAME && e->u.name.name && !strcmp(e->u.name.name, name);
}

/* The functions of module m named `name` with nargs parameters. */
static nb_decl *find_callee(vi_ctx *x, const char *name, int nargs) {
    for (int i = 0; i < x->m->ndecls; i++) {
        nb_decl *d = x->m->decls[i];
        if (d && d->kind == NB_DECL_FUNC && d->name && !strcmp(d->name, name) && d->u.func.nparams == nargs) return d;
    }
    /* a function of an imported module (`import m;` then `m_helper(t, loc)`) */
    nb_decl *g[16];
    int ng = ck_lookup_global(x->c, name, NB_DECL_FUNC, g, 16);
    for (int i = 0; i < ng && i < 16; i++)
        if (g[i] && g[i]->u.func.nparams == nargs) return g[i];
    return NULL;
}

static void vi_expr(vi_ctx *x, vi_use *u, nb_expr *e);

static void vi_stmt(vi_ctx *x, vi_use *u, nb_stmt *s) {
    if (!s) return;
    switch (s->kind) {
    case NB_ST_BLOCK:
        for (int i = 0; i < s->u.block.count; i++) vi_stmt(x, u, s->u.block.items[i]);
        return;
    case NB_ST_EXPR: vi_expr(x, u, s->u.expr.expr); return;
    case NB_ST_VAR:
        for (int i = 0; i < s->u.var.count; i++)
            if (s->u.var.vars[i]) vi_expr(x, u, s->u.var.vars[i]->u.var.init);
        return;
    case NB_ST_IF:
        vi_expr(x, u, s->u.if_s.cond);
        vi_stmt(x, u, s->u.if_s.then_s);
        vi_stmt(x, u, s->u.if_s.else_s);
        return;
    case NB_ST_FOR:
        vi_stmt(x, u, s->u.for_s.init);
        vi_expr(x, u, s->u.for_s.cond);
        vi_expr(x, u, s->u.for_s.step);
        vi_stmt(x, u, s->u.for_s.body);
        return;
    case NB_ST_WHILE: case NB_ST_DO_WHILE:
        vi_expr(x, u, s->u.while_s.cond);
        vi_stmt(x, u, s->u.while_s.body);
        return;
    case NB_ST_SWITCH:
        vi_expr(x, u, s->u.switch_s.value);
        for (int i = 0; i < s->u.switch_s.ncases; i++)
            for (int j = 0; j < s->u.switch_s.cases[i].nbody; j++) vi_stmt(x, u, s->u.switch_s.cases[i].body[j]);
        return;
    case NB_ST_RETURN: vi_expr(x, u, s->u.ret.value); return;
    default: return;
    }
}

static void vi_expr(vi_ctx *x, vi_use *u, nb_expr *e) {
    if (!e) return;
    switch (e->kind) {
    case NB_EX_INDEX:
        if (is_view_ref(e->u.index.base, u->name))
            use_rank(x, u, e->u.index.nindices == 1 ? expr_width(x, e->u.index.indices[0]) : e->u.index.nindices, e->loc);
        else vi_expr(x, u, e->u.index.base);
        for (int i = 0; i < e->u.index.nindices; i++) vi_expr(x, u, e->u.index.indices[i]);
        return;
    case NB_EX_CALL: {
        nb_expr *cal = e->u.call.callee;
        int n = e->u.call.nargs;
        if (cal && cal->kind == NB_EX_MEMBER && is_view_ref(cal->u.member.base, u->name)) {
            const char *m = cal->u.member.member ? cal->u.member.member : "";
            if (!strcmp(m, "load") || !strcmp(m, "loadOnce"))
                use_rank(x, u, n == 1 ? expr_width(x, e->u.call.args[0]) : n, e->loc);
            else if ((!strcmp(m, "InterlockedAdd") || !strcmp(m, "interlockedAdd")) && n >= 2)
                use_rank(x, u, expr_width(x, e->u.call.args[0]), e->loc);
            else if ((!strcmp(m, "store") || !strcmp(m, "storeOnce")) && n >= 2)
                use_rank(x, u, n == 2 ? expr_width(x, e->u.call.args[0]) : n - 1, e->loc);
            else if (!strcmp(m, "size") && n == 1 && e->u.call.args[0]->kind == NB_EX_INT &&
                     (int)e->u.call.args[0]->u.ilit.value + 1 > u->min_rank)
                u->min_rank = (int)e->u.call.args[0]->u.ilit.value + 1;
        } else if (cal && cal->kind == NB_EX_NAME && cal->u.name.name && x->depth < 16) {
            for (int i = 0; i < n; i++) {
                if (!is_view_ref(e->u.call.args[i], u->name)) continue;
                nb_decl *g = find_callee(x, cal->u.name.name, n);
                if (!g || g == x->fn) continue;
                nb_decl *gp = g->u.func.params[i];
                if (!gp || !gp->u.param.texpr) continue;
                int r = 0;
                nb_type_expr *gt = gp->u.param.texpr;
                if (is_view_name(gt->name)) {
                    vi_ctx y = *x;
                    y.fn = g;
                    y.depth = x->depth + 1;
                    r = infer_param_rank(&y, g, i);
                } else if ((!strcmp(gt->name, "Tensor") || !strcmp(gt->name, "DiffTensor")) && gt->ntargs == 2 &&
                           gt->vargs && gt->vargs[1] && gt->vargs[1]->kind == NB_EX_INT) {
                    r = (int)gt->vargs[1]->u.ilit.value;
                }
                use_rank(x, u, r, e->loc);
            }
        }
        if (cal && cal->kind != NB_EX_NAME) vi_expr(x, u, cal);
        for (int i = 0; i < n; i++) vi_expr(x, u, e->u.call.args[i]);
        return;
    }
    case NB_EX_UNARY: vi_expr(x, u, e->u.unary.operand); return;
    case NB_EX_BINARY: vi_expr(x, u, e->u.binary.lhs); vi_expr(x, u, e->u.binary.rhs); return;
    case NB_EX_ASSIGN: vi_expr(x, u, e->u.assign.lhs); vi_expr(x, u, e->u.assign.rhs); return;
    case NB_EX_TERNARY:
        vi_expr(x, u, e->u.ternary.cond);
        vi_expr(x, u, e->u.ternary.then_e);
        vi_expr(x, u, e->u.ternary.else_e);
        return;
    case NB_EX_MEMBER: vi_expr(x, u, e->u.member.base); return;
    case NB_EX_CAST: vi_expr(x, u, e->u.cast.operand); return;
    case NB_EX_INIT_LIST:
        for (int i = 0; i < e->u.init_list.nitems; i++) vi_expr(x, u, e->u.init_list.items[i]);
        return;
    default: return;
    }
}

static int set_view_rank(vi_ctx *x, nb_type_expr *te, int r);

/* Gives view parameter pi of fn its rank (its written type becomes TensorView<T, R>); returns R. */
static int infer_param_rank(vi_ctx *x, nb_decl *fn, int pi) {
    nb_decl *p = fn->u.func.params[pi];
    nb_type_expr *te = p->u.param.texpr;
    if (te->ntargs == 2) { /* (already done, or written with a rank) */
        if (te->vargs && te->vargs[1] && te->vargs[1]->kind == NB_EX_INT) return (int)te->vargs[1]->u.ilit.value;
        return 0;
    }
    if (te->narray_dims || te->ntargs > 1) return 0; /* (reported by the type's resolution) */
    vi_use u;
    memset(&u, 0, sizeof u);
    u.name = p->name ? p->name : "";
    vi_ctx y = *x;
    y.fn = fn;
    int saved = g_vi_field;
    g_vi_field = 0;
    vi_stmt(&y, &u, fn->u.func.body);
    g_vi_field = saved;
    return set_view_rank(x, te, u.rank ? u.rank : u.min_rank ? u.min_rank : 1);
}

/* A struct field of view type: its uses `s.name` in every function of the module. */
static void infer_field_rank(vi_ctx *x, nb_decl *fd) {
    nb_type_expr *te = fd->u.var.texpr;
    if (!te || te->ntargs >= 2 || te->narray_dims) return;
    vi_use u;
    memset(&u, 0, sizeof u);
    u.name = fd->name ? fd->name : "";
    u.field = 1;
    g_vi_field = 1;
    for (int i = 0; i < x->m->ndecls; i++) {
        nb_decl *d = x->m->decls[i];
        if (!d || d->kind != NB_DECL_FUNC || !d->u.func.body) continue;
        vi_ctx y = *x;
        y.fn = d;
        vi_stmt(&y, &u, d->u.func.body);
    }
    g_vi_field = 0;
    set_view_rank(x, te, u.rank ? u.rank : u.min_rank ? u.min_rank : 1);
}

static int set_view_rank(vi_ctx *x, nb_type_expr *te, int r) {
    if (r > 8) r = 8;
    /* rewrite: TensorView<T> -> TensorView<T, r>; DiffTensorView -> DiffTensorView<float, r> */
    nb_type_expr **targs = ck_alloc(x->c, sizeof(nb_type_expr *) * 2);
    nb_expr **vargs = ck_alloc(x->c, sizeof(nb_expr *) * 2);
    nb_expr *rank = ck_new_expr(x->c, NB_EX_INT, te->loc);
    if (!targs || !vargs || !rank) return r;
    if (te->ntargs == 1) {
        targs[0] = te->targs ? te->targs[0] : NULL;
        vargs[0] = te->vargs ? te->vargs[0] : NULL;
    } else {
        nb_type_expr *fl = ck_alloc(x->c, sizeof *fl);
        if (!fl) return r;
        fl->loc = te->loc;
        fl->name = "float";
        targs[0] = fl;
    }
    rank->u.ilit.value = (uint64_t)r;
    vargs[1] = rank;
    te->targs = targs;
    te->vargs = vargs;
    te->ntargs = 2;
    te->resolved = NULL;
    return r;
}

static void infer_fn(vi_ctx *x, nb_decl *fn) {
    if (!fn || fn->kind != NB_DECL_FUNC) return;
    for (int i = 0; i < fn->u.func.nparams; i++) {
        nb_decl *p = fn->u.func.params[i];
        if (p && p->u.param.texpr && is_view_name(p->u.param.texpr->name)) {
            x->fn = fn;
            infer_param_rank(x, fn, i);
        }
    }
}

/* ---- [TorchEntryPoint] host functions ------------------------------------------------------- */

static void te_expr(nb_checker *c, nb_module_ast *m, nb_expr *e);

static void te_stmt(nb_checker *c, nb_module_ast *m, nb_stmt *s) {
    if (!s) return;
    switch (s->kind) {
    case NB_ST_BLOCK:
        for (int i = 0; i < s->u.block.count; i++) te_stmt(c, m, s->u.block.items[i]);
        return;
    case NB_ST_EXPR: te_expr(c, m, s->u.expr.expr); return;
    case NB_ST_VAR:
        for (int i = 0; i < s->u.var.count; i++)
            if (s->u.var.vars[i]) te_expr(c, m, s->u.var.vars[i]->u.var.init);
        return;
    case NB_ST_IF: te_stmt(c, m, s->u.if_s.then_s); te_stmt(c, m, s->u.if_s.else_s); return;
    case NB_ST_FOR: te_stmt(c, m, s->u.for_s.body); return;
    case NB_ST_WHILE: case NB_ST_DO_WHILE: te_stmt(c, m, s->u.while_s.body); return;
    case NB_ST_RETURN: te_expr(c, m, s->u.ret.value); return;
    default: return;
    }
}

static void te_expr(nb_checker *c, nb_module_ast *m, nb_expr *e) {
    if (!e || e->kind != NB_EX_CALL) return;
    nb_expr *cal = e->u.call.callee;
    if (!cal || cal->kind != NB_EX_CALL || !cal->u.call.callee || cal->u.call.callee->kind != NB_EX_NAME ||
        strcmp(cal->u.call.callee->u.name.name, "__dispatch_kernel"))
        return;
    if (cal->u.call.nargs != 3 || cal->u.call.args[0]->kind != NB_EX_NAME) {
        ck_err(c, cal->loc, "__dispatch_kernel takes a kernel function, the block count and the group size");
        return;
    }
    const char *kn = cal->u.call.args[0]->u.name.name;
    nb_decl *k = NULL;
    for (int i = 0; i < m->ndecls && !k; i++) {
        nb_decl *d = m->decls[i];
        if (d && d->kind == NB_DECL_FUNC && d->name && !strcmp(d->name, kn)) k = d;
    }
    if (!k) {
        ck_err(c, cal->u.call.args[0]->loc, "__dispatch_kernel: no function named '%s' in this module", kn);
        return;
    }
    if (!nb_attr_find(&k->attrs, "CudaKernel") && !nb_attr_find(&k->attrs, "CUDAKernel") &&
        !nb_attr_find(&k->attrs, "Kernel")) {
        ck_err(c, cal->u.call.args[0]->loc, "__dispatch_kernel: '%s' is not a [CudaKernel] function", kn);
        return;
    }
    if (e->u.call.nargs != k->u.func.nparams)
        ck_err(c, e->loc, "__dispatch_kernel: '%s' takes %d argument%s, %d given", kn, k->u.func.nparams,
               k->u.func.nparams == 1 ? "" : "s", e->u.call.nargs);
}

/* Before a module is checked: view ranks, and host functions checked and set aside. */
void ck_prepare_views(nb_checker *c, nb_module_ast *m) {
    vi_ctx x;
    memset(&x, 0, sizeof x);
    x.c = c;
    x.m = m;
    for (int i = 0; i < m->ndecls; i++) {
        nb_decl *d = m->decls[i];
        if (!d || d->kind != NB_DECL_FUNC || !nb_attr_find(&d->attrs, "TorchEntryPoint")) continue;
        te_stmt(c, m, d->u.func.body);
        /* host code, not part of the kernel program (issue #15 runs it): kept as a bodiless void
         * declaration, which nothing lowers, emits or reflects */
        d->u.func.body = NULL;
        d->u.func.ret = NULL;
        d->u.func.nparams = 0;
    }
    for (int i = 0; i < m->ndecls; i++) { /* host structs (TorchTensor fields) and view fields */
        nb_decl *d = m->decls[i];
        if (!d || d->kind != NB_DECL_STRUCT) continue;
        int host = 0;
        for (int k = 0; k < d->u.strct.nfields; k++) {
            nb_decl *f = d->u.strct.fields[k];
            if (f && f->u.var.texpr && f->u.var.texpr->name && !strcmp(f->u.var.texpr->name, "TorchTensor")) host = 1;
        }
        if (host) { /* slang-torch's host-side structs: only [TorchEntryPoint] code uses them (issue #15) */
            d->u.strct.nfields = 0;
            continue;
        }
        for (int k = 0; k < d->u.strct.nfields; k++) {
            nb_decl *f = d->u.strct.fields[k];
            if (f && f->u.var.texpr && is_view_name(f->u.var.texpr->name)) infer_field_rank(&x, f);
        }
    }
    for (int i = 0; i < m->ndecls; i++) {
        nb_decl *d = m->decls[i];
        if (!d) continue;
        if (d->kind == NB_DECL_FUNC) infer_fn(&x, d);
        else if (d->kind == NB_DECL_STRUCT)
            for (int k = 0; k < d->u.strct.nmethods; k++) infer_fn(&x, d->u.strct.methods[k]);
    }
}

/* ---- methods of tensors, views and buffers ---------------------------------------------------- */

const nb_type *ck_tensor_method(nb_checker *c, nb_expr **slot, const nb_type *bt) {
    nb_expr *call = *slot;
    nb_expr *callee = call->u.call.callee;
    nb_expr *base = callee->u.member.base;
    const char *m = callee->u.member.member;
    int n = call->u.call.nargs;
    nb_expr **args = call->u.call.args;
    if (!strcmp(m, "load") || !strcmp(m, "loadOnce") || !strcmp(m, "store") || !strcmp(m, "storeOnce")) {
        int store = m[0] == 's';
        int ni = store ? n - 1 : n;
        if (ni < 1) {
            ck_err(c, call->loc, "'%s' takes the element's indices%s", m, store ? " and the value" : "");
            return call->type = c->tt->t_error;
        }
        nb_expr *ix = ck_new_expr(c, NB_EX_INDEX, call->loc);
        if (!ix) return call->type = c->tt->t_error;
        ix->u.index.base = base;
        ix->u.index.indices = args;
        ix->u.index.nindices = ni;
        if (!store) {
            *slot = ix;
            return ck_expr(c, slot);
        }
        nb_expr *as = ck_new_expr(c, NB_EX_ASSIGN, call->loc);
        if (!as) return call->type = c->tt->t_error;
        as->u.assign.op = NB_TOK_ASSIGN;
        as->u.assign.lhs = ix;
        as->u.assign.rhs = args[n - 1];
        *slot = as;
        return ck_expr(c, slot);
    }
    if (!strcmp(m, "InterlockedAdd") || !strcmp(m, "interlockedAdd")) {
        /* t.InterlockedAdd(index, v [, out old]) -> [old =] atomicAdd(t[index], v) */
        if (n < 2 || n > 3) {
            ck_err(c, call->loc, "'%s' takes an index, a value and optionally an 'out' old value", m);
            return call->type = c->tt->t_error;
        }
        nb_expr *ix = ck_new_expr(c, NB_EX_INDEX, call->loc);
        nb_expr *at = ck_new_expr(c, NB_EX_CALL, call->loc);
        nb_expr *nm = ck_new_expr(c, NB_EX_NAME, call->loc);
        nb_expr **a2 = ck_alloc(c, sizeof(nb_expr *) * 2);
        if (!ix || !at || !nm || !a2) return call->type = c->tt->t_error;
        ix->u.index.base = base;
        ix->u.index.indices = args;
        ix->u.index.nindices = 1;
        nm->u.name.name = "atomicAdd";
        a2[0] = ix;
        a2[1] = args[1];
        at->u.call.callee = nm;
        at->u.call.args = a2;
        at->u.call.nargs = 2;
        if (n == 2) {
            *slot = at;
            return ck_expr(c, slot);
        }
        nb_expr *as = ck_new_expr(c, NB_EX_ASSIGN, call->loc);
        if (!as) return call->type = c->tt->t_error;
        as->u.assign.op = NB_TOK_ASSIGN;
        as->u.assign.lhs = args[2];
        as->u.assign.rhs = at;
        *slot = as;
        return ck_expr(c, slot);
    }
    if (!strcmp(m, "data_ptr") && n == 0) { /* Ptr<T> to the data (check_ptr.c): __tensor_data_ptr(t) */
        nb_expr *nm = ck_new_expr(c, NB_EX_NAME, call->loc);
        nb_expr **a1 = ck_alloc(c, sizeof(nb_expr *));
        if (!nm || !a1) return call->type = c->tt->t_error;
        nm->u.name.name = "__tensor_data_ptr";
        a1[0] = base;
        call->u.call.callee = nm;
        call->u.call.args = a1;
        call->u.call.nargs = 1;
        return ck_expr(c, slot);
    }
    if (!strcmp(m, "size") || !strcmp(m, "GetDimensions")) {
        int gd = m[0] == 'G';
        for (int i = 0; i < n; i++) ck_expr(c, &args[i]);
        int64_t d = 0;
        if (!gd && (n != 1 || !ck_const_int(args[0], &d))) {
            ck_err(c, call->loc, "'size' takes one constant dimension index");
            return call->type = c->tt->t_error;
        }
        if (gd && (n != 1 || bt->rank != 1)) {
            ck_err(c, call->loc, "'GetDimensions' takes one 'out uint' argument (the element count)%s",
                   n == 2 ? "; the stride form is not supported" : "");
            return call->type = c->tt->t_error;
        }
        if (d < 0 || d >= bt->rank) {
            ck_err(c, args[0]->loc, "dimension %lld is out of range for '%s' (rank %d)", (long long)d, bt->name, bt->rank);
            return call->type = c->tt->t_error;
        }
        /* __tensor_size(t, d) */
        nb_expr *sz = ck_new_expr(c, NB_EX_CALL, call->loc);
        nb_expr *nm = ck_new_expr(c, NB_EX_NAME, call->loc);
        nb_expr **a2 = ck_alloc(c, sizeof(nb_expr *) * 2);
        nb_expr *dl = ck_new_expr(c, NB_EX_INT, call->loc);
        if (!sz || !nm || !a2 || !dl) return call->type = c->tt->t_error;
        nm->u.name.name = "__tensor_size";
        dl->u.ilit.value = (uint64_t)d;
        a2[0] = base;
        a2[1] = dl;
        sz->u.call.callee = nm;
        sz->u.call.args = a2;
        sz->u.call.nargs = 2;
        if (!gd) {
            *slot = sz;
            return ck_expr(c, slot);
        }
        nb_expr *as = ck_new_expr(c, NB_EX_ASSIGN, call->loc);
        if (!as) return call->type = c->tt->t_error;
        as->u.assign.op = NB_TOK_ASSIGN;
        as->u.assign.lhs = args[0];
        as->u.assign.rhs = sz;
        *slot = as;
        return ck_expr(c, slot);
    }
    for (int i = 0; i < n; i++) ck_expr(c, &args[i]);
    ck_err(c, callee->loc, "'%s' has no method '%s' (tensors have load, store, loadOnce, storeOnce, size, InterlockedAdd%s)", bt->name, m,
           bt->buffer ? ", GetDimensions" : "");
    return call->type = c->tt->t_error;
}

/* Rank inference for slang-torch's rankless TensorView<T> / DiffTensorView (issue #14).
 *
 * slang-torch reads a view's rank from the bound tensor at run time. nabla compiles a kernel per
 * signature instead, so before a module is checked every written rankless view type (a
 * parameter, a struct field, a local, an array of them) gets the rank the program uses it with,
 * and becomes TensorView<T, R> (= Tensor<T, R>; DiffTensorView: DiffTensor<T, R>, float by
 * default). Why static: the rank is fixed by the binding anyway (one kernel per signature), and a
 * compile-time rank keeps indexing a few multiply-adds with no rank loop or rank check per access.
 *
 * Each written view type is a slot; the module's function bodies are walked once with their
 * scopes, and
 *   uses fix a slot's rank:      t[i, j]  t[uint2(...)]  t.load(i, j)  t.store(i, j, v)
 *                                t.storeOnce(uint3(...), v)  t.InterlockedAdd(idx, v[, old])
 *                                t.size(d), t.stride(d) (at least d + 1)
 *   (an index's width comes from how it is written: uint2(…), int3 x, .xy, a `var` from its
 *   initializer, cudaThreadIdx() is 3 wide)
 *   flows join two slots:        g(..., t, ...) (g's parameter; also __dispatch_kernel(g, …)(…, t, …)
 *                                in host code), a = b, T a = b,
 *                                s = { a, b } (the struct's fields in order), v.primal = t
 * Joined slots share one rank (union-find). `v.primal` and `v.diff.diff` (the gradient view,
 * slang-torch's AtomicAdd wrapper) are views of v's rank; an array of views indexed once is a
 * view. A slot with no rank-fixing use gets the rank its size() / stride() calls need, else 1. Uses that
 * disagree are an error naming both places; a bound array of another rank is a binding error.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lang/check_internal.h"
#include "lang/lexer.h"

static int is_view_name(const char *n) { return n && (!strcmp(n, "TensorView") || !strcmp(n, "DiffTensorView")); }
static int is_tensor_name(const char *n) { return n && (!strcmp(n, "Tensor") || !strcmp(n, "DiffTensor")); }

/* ---- widths of index expressions --------------------------------------------------------------- */

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

/* ---- slots and scopes ------------------------------------------------------------------------ */

typedef struct vslot {
    nb_type_expr *te; /* the written type (rewritten at the end) */
    const char *name; /* what it declares (for messages) */
    int parent;       /* union-find */
    int rank;         /* 0: not fixed yet */
    nb_loc loc;       /* where it was fixed */
    int min_rank;     /* from size(d) */
    int conflict;     /* reported once */
    int written;      /* rank from the written type (loc: the declaration) */
} vslot;

typedef struct vname { /* a name in scope: its written type (NULL: `var x = …`) */
    const char *name;
    nb_type_expr *te;
    const nb_expr *init; /* `var x = init;`: what its width is judged from */
    int busy;            /* (being judged: `var a = a + 1` loops no further) */
} vname;

typedef struct vr_ctx {
    nb_checker *c;
    nb_module_ast *m;
    vslot *s;
    int n, cap;
    vname *sc;
    int nsc, capsc;
    nb_decl *fn;    /* the function walked */
    nb_decl *owner; /* its struct (methods), or NULL */
    nb_decl **structs; /* the module's structs by name (open addressing, nstructs a power of 2) */
    int nstructs;
    int *smap;         /* slot index + 1 by written type address (open addressing, nsmap a power of 2) */
    int nsmap;
} vr_ctx;

static unsigned ptr_hash(const void *p) { return (unsigned)(((uintptr_t)p >> 4) * 2654435761u); }

/* The slot of te in the map, or the empty entry where it goes. */
static int *smap_entry(vr_ctx *x, const nb_type_expr *te) {
    unsigned m = (unsigned)x->nsmap - 1;
    for (unsigned i = ptr_hash(te) & m;; i = (i + 1) & m)
        if (!x->smap[i] || x->s[x->smap[i] - 1].te == te) return &x->smap[i];
}

static int smap_grow(vr_ctx *x) {
    int nc = x->nsmap ? x->nsmap * 2 : 64;
    int *old = x->smap, on = x->nsmap;
    x->smap = calloc((size_t)nc, sizeof *x->smap);
    if (!x->smap) {
        x->smap = old;
        return 0;
    }
    x->nsmap = nc;
    for (int i = 0; i < on; i++)
        if (old[i]) *smap_entry(x, x->s[old[i] - 1].te) = old[i];
    free(old);
    return 1;
}

static unsigned name_hash(const char *s) {
    unsigned h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static int slot_find(vr_ctx *x, int i) {
    while (x->s[i].parent != i) i = x->s[i].parent = x->s[x->s[i].parent].parent;
    return i;
}

/* The slot of a written view or tensor type (-1 for other types, or out of memory). Written
 * ranks (TensorView<T, 2>, Tensor<T, 2>) are fixed slots. */
static int slot_of(vr_ctx *x, nb_type_expr *te, const char *name) {
    if (!te || !(is_view_name(te->name) || (is_tensor_name(te->name) && te->ntargs == 2))) return -1;
    if (2 * (x->n + 1) > x->nsmap && !smap_grow(x)) return -1;
    int *ent = smap_entry(x, te);
    if (*ent) return *ent - 1;
    if (x->n == x->cap) {
        int nc = x->cap ? x->cap * 2 : 32;
        vslot *ns = realloc(x->s, sizeof *ns * (size_t)nc);
        if (!ns) return -1;
        x->s = ns;
        x->cap = nc;
    }
    vslot *s = &x->s[x->n];
    memset(s, 0, sizeof *s);
    s->te = te;
    s->name = name ? name : "";
    s->parent = x->n;
    s->loc = te->loc;
    *ent = x->n + 1;
    if (te->ntargs == 2) { /* a written rank (or one set by an earlier module's inference) */
        if (te->vargs && te->vargs[1] && te->vargs[1]->kind == NB_EX_INT) s->rank = (int)te->vargs[1]->u.ilit.value, s->written = 1;
        else s->conflict = 1; /* (a generic rank: nothing to infer) */
    }
    return x->n++;
}

static void fix_rank(vr_ctx *x, int si, int r, nb_loc loc) {
    if (si < 0 || r <= 0) return;
    vslot *s = &x->s[slot_find(x, si)];
    if (s->conflict) return;
    if (!s->rank) {
        s->rank = r;
        s->loc = loc;
    } else if (s->rank != r) {
        ck_err(x->c, loc, "'%s' is used here with %d ind%s but with %d at %d:%d (a TensorView has one rank)",
               x->s[si].name, r, r == 1 ? "ex" : "ices", s->rank, s->loc.line, s->loc.col);
        s->conflict = 1;
    }
}

static void join(vr_ctx *x, int a, int b, nb_loc loc) {
    if (a < 0 || b < 0) return;
    int ra = slot_find(x, a), rb = slot_find(x, b);
    if (ra == rb) return;
    vslot *A = &x->s[ra], *B = &x->s[rb];
    if (A->rank && B->rank && A->rank != B->rank && !A->conflict && !B->conflict) {
        ck_err(x->c, loc, "'%s' (rank %d, from %d:%d) is passed or assigned to '%s' of rank %d (from %d:%d): a TensorView "
               "has one rank", x->s[a].name, A->rank, A->loc.line, A->loc.col, x->s[b].name, B->rank, B->loc.line,
               B->loc.col);
        A->conflict = B->conflict = 1;
    }
    if (!B->rank && A->rank) B->rank = A->rank, B->loc = A->written ? loc : A->loc; /* (a written rank: fixed here) */
    else if (B->rank && !A->rank && B->written) B->loc = loc, B->written = 0;
    if (A->min_rank > B->min_rank) B->min_rank = A->min_rank;
    B->conflict |= A->conflict;
    A->parent = rb;
}

static void push_name(vr_ctx *x, const char *name, nb_type_expr *te) {
    if (!name) return;
    if (x->nsc == x->capsc) {
        int nc = x->capsc ? x->capsc * 2 : 64;
        vname *ns = realloc(x->sc, sizeof *ns * (size_t)nc);
        if (!ns) return;
        x->sc = ns;
        x->capsc = nc;
    }
    x->sc[x->nsc].name = name;
    x->sc[x->nsc].te = te;
    x->sc[x->nsc].init = NULL;
    x->sc[x->nsc].busy = 0;
    x->nsc++;
}

/* ---- what an expression is (syntactically) ----------------------------------------------------- */

static nb_decl *find_struct(vr_ctx *x, const char *name) {
    if (!name) return NULL;
    if (x->nstructs)
        for (unsigned i = name_hash(name) & (unsigned)(x->nstructs - 1);; i = (i + 1) & (unsigned)(x->nstructs - 1)) {
            nb_decl *d = x->structs[i];
            if (!d) break;
            if (!strcmp(d->name, name)) return d;
        }
    nb_decl *g[1];
    return ck_lookup_global(x->c, name, NB_DECL_STRUCT, g, 1) > 0 ? g[0] : NULL;
}

static nb_decl *find_field(nb_decl *st, const char *name) {
    if (!st || !name) return NULL;
    for (int i = 0; i < st->u.strct.nfields; i++)
        if (st->u.strct.fields[i] && st->u.strct.fields[i]->name && !strcmp(st->u.strct.fields[i]->name, name))
            return st->u.strct.fields[i];
    return NULL;
}

/* A field named `name` of view type in any struct of the module, when exactly one has it (for
 * `p.A` where p's struct is not known from how it is written). */
static nb_decl *unique_view_field(vr_ctx *x, const char *name) {
    nb_decl *found = NULL;
    for (int i = 0; i < x->m->ndecls; i++) {
        nb_decl *d = x->m->decls[i];
        if (!d || d->kind != NB_DECL_STRUCT) continue;
        nb_decl *f = find_field(d, name);
        if (f && f->u.var.texpr && (is_view_name(f->u.var.texpr->name) || is_tensor_name(f->u.var.texpr->name))) {
            if (found) return NULL;
            found = f;
        }
    }
    return found;
}

/* The written type of what e names (a local, parameter, field, element of an array of them, a
 * view's .primal / .diff.diff), with *dims the array dimensions left; NULL when unknown. */
static nb_type_expr *expr_te(vr_ctx *x, const nb_expr *e, int *dims, const char **name) {
    *dims = 0;
    if (!e) return NULL;
    switch (e->kind) {
    case NB_EX_NAME: {
        const char *n = e->u.name.name;
        if (!n) return NULL;
        *name = n;
        for (int i = x->nsc - 1; i >= 0; i--)
            if (!strcmp(x->sc[i].name, n)) {
                *dims = x->sc[i].te ? x->sc[i].te->narray_dims : 0;
                return x->sc[i].te;
            }
        if (x->fn)
            for (int i = 0; i < x->fn->u.func.nparams; i++) {
                nb_decl *p = x->fn->u.func.params[i];
                if (p && p->name && !strcmp(p->name, n)) {
                    *dims = p->u.param.texpr ? p->u.param.texpr->narray_dims : 0;
                    return p->u.param.texpr;
                }
            }
        nb_decl *f = find_field(x->owner, n);
        if (f) {
            *dims = f->u.var.texpr ? f->u.var.texpr->narray_dims : 0;
            return f->u.var.texpr;
        }
        return NULL;
    }
    case NB_EX_INDEX: {
        nb_type_expr *te = expr_te(x, e->u.index.base, dims, name);
        if (!te || *dims < 1 || e->u.index.nindices != 1) return NULL;
        (*dims)--;
        return te;
    }
    case NB_EX_MEMBER: {
        const char *m = e->u.member.member;
        if (!m) return NULL;
        int bd;
        const char *bn = NULL;
        nb_type_expr *bt = NULL;
        if (e->u.member.base && e->u.member.base->kind == NB_EX_NAME && e->u.member.base->u.name.name &&
            !strcmp(e->u.member.base->u.name.name, "this")) {
            nb_decl *f = find_field(x->owner, m);
            if (!f) return NULL;
            *name = m;
            *dims = f->u.var.texpr ? f->u.var.texpr->narray_dims : 0;
            return f->u.var.texpr;
        }
        bt = expr_te(x, e->u.member.base, &bd, &bn);
        if (bt && !bd && is_view_name(bt->name) && (!strcmp(m, "primal") || !strcmp(m, "diff"))) {
            *name = bn;
            return bt; /* v.primal, v.diff, v.diff.diff: v's rank */
        }
        if (bt && !bd) {
            nb_decl *f = find_field(find_struct(x, bt->name), m);
            if (f) {
                *name = m;
                *dims = f->u.var.texpr ? f->u.var.texpr->narray_dims : 0;
                return f->u.var.texpr;
            }
            return NULL;
        }
        if (bt) return NULL;
        nb_decl *f = unique_view_field(x, m);
        if (!f) return NULL;
        *name = m;
        *dims = f->u.var.texpr ? f->u.var.texpr->narray_dims : 0;
        return f->u.var.texpr;
    }
    default: return NULL;
    }
}

/* The slot e stands for as a whole value (a view, or an array of views: *dims > 0), or -1. */
static int expr_slot(vr_ctx *x, const nb_expr *e, int *dims) {
    const char *name = NULL;
    nb_type_expr *te = expr_te(x, e, dims, &name);
    return te ? slot_of(x, te, name) : -1;
}

/* The declared width of what an index expression names (uint2 loc -> 2). */
static int expr_width(vr_ctx *x, const nb_expr *e);

static int name_width(vr_ctx *x, const char *n) {
    for (int i = x->nsc - 1; i >= 0; i--) /* `var loc = uint2(…)`: the initializer's width */
        if (!strcmp(x->sc[i].name, n)) {
            if (x->sc[i].te || !x->sc[i].init || x->sc[i].busy) break;
            x->sc[i].busy = 1;
            int w = expr_width(x, x->sc[i].init);
            x->sc[i].busy = 0;
            return w;
        }
    nb_expr e;
    memset(&e, 0, sizeof e);
    e.kind = NB_EX_NAME;
    e.u.name.name = n;
    int dims;
    const char *nm = NULL;
    nb_type_expr *te = expr_te(x, &e, &dims, &nm);
    return te && !dims ? type_width(te) : 1;
}

/* Components of an index expression, judged from how it is written. */
static int expr_width(vr_ctx *x, const nb_expr *e) {
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
    case NB_EX_NAME: return name_width(x, e->u.name.name ? e->u.name.name : "");
    default: return 1;
    }
}

/* ---- callees --------------------------------------------------------------------------------- */

static nb_decl *method_named(nb_decl *st, const char *name, int nargs) {
    if (!st) return NULL;
    for (int i = 0; i < st->u.strct.nmethods; i++) {
        nb_decl *f = st->u.strct.methods[i];
        if (f && f->name && !strcmp(f->name, name) && f->u.func.nparams == nargs) return f;
    }
    return NULL;
}

/* The function a call `name(args)` / `obj.name(args)` reaches, judged by name and arity. */
static nb_decl *find_callee(vr_ctx *x, const nb_expr *callee, int nargs) {
    if (!callee) return NULL;
    if (callee->kind == NB_EX_MEMBER) { /* obj.f(…): obj's struct if known, else the one method so named */
        int d;
        const char *nm = NULL;
        nb_type_expr *bt = expr_te(x, callee->u.member.base, &d, &nm);
        if (bt && !d) return method_named(find_struct(x, bt->name), callee->u.member.member, nargs);
        nb_decl *found = NULL;
        for (int i = 0; i < x->m->ndecls; i++) {
            nb_decl *s = x->m->decls[i];
            nb_decl *f = s && s->kind == NB_DECL_STRUCT ? method_named(s, callee->u.member.member, nargs) : NULL;
            if (f) {
                if (found) return NULL;
                found = f;
            }
        }
        return found;
    }
    if (callee->kind == NB_EX_CALL && callee->u.call.callee && callee->u.call.callee->kind == NB_EX_NAME &&
        callee->u.call.callee->u.name.name && !strcmp(callee->u.call.callee->u.name.name, "__dispatch_kernel") &&
        callee->u.call.nargs >= 1) /* host code: __dispatch_kernel(k, grid, block)(args…) passes args to k */
        callee = callee->u.call.args[0];
    if (callee->kind != NB_EX_NAME || !callee->u.name.name) return NULL;
    const char *name = callee->u.name.name;
    nb_decl *f = method_named(x->owner, name, nargs);
    if (f) return f;
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

/* ---- the walk -------------------------------------------------------------------------------- */

static void vr_expr(vr_ctx *x, nb_expr *e);

/* `lhs = rhs` / `T lhs = rhs`: a view flows into a view; `{ a, b }` into a struct's fields. */
static void flow(vr_ctx *x, nb_type_expr *lte, int ldims, int ls, nb_expr *rhs, nb_loc loc) {
    if (!rhs) return;
    if (rhs->kind == NB_EX_INIT_LIST && lte) {
        nb_decl *st = ldims ? NULL : find_struct(x, lte->name);
        for (int i = 0; i < rhs->u.init_list.nitems; i++) {
            nb_expr *it = rhs->u.init_list.items[i];
            if (st) {
                if (i >= st->u.strct.nfields) break;
                nb_decl *f = st->u.strct.fields[i];
                nb_type_expr *ft = f ? f->u.var.texpr : NULL;
                flow(x, ft, ft ? ft->narray_dims : 0, ft ? slot_of(x, ft, f->name) : -1, it, loc);
            } else if (ldims > 0) { /* an array of views / structs: each item is an element */
                flow(x, lte, ldims - 1, ls, it, loc);
            }
        }
        return;
    }
    if (ls < 0) return;
    int rd;
    int rs = expr_slot(x, rhs, &rd);
    if (rs >= 0 && rd == ldims) join(x, rs, ls, loc);
}

static void vr_call(vr_ctx *x, nb_expr *e) {
    nb_expr *cal = e->u.call.callee;
    int n = e->u.call.nargs;
    nb_expr **args = e->u.call.args;
    if (cal && cal->kind == NB_EX_MEMBER) { /* a method of a view: t.load(…), v.primal.store(…), … */
        int d;
        int s = expr_slot(x, cal->u.member.base, &d);
        if (s >= 0 && !d) {
            const char *m = cal->u.member.member ? cal->u.member.member : "";
            if (!strcmp(m, "load") || !strcmp(m, "loadOnce"))
                fix_rank(x, s, n == 1 ? expr_width(x, args[0]) : n, e->loc);
            else if ((!strcmp(m, "InterlockedAdd") || !strcmp(m, "interlockedAdd")) && n >= 2)
                fix_rank(x, s, expr_width(x, args[0]), e->loc);
            else if ((!strcmp(m, "store") || !strcmp(m, "storeOnce")) && n >= 2)
                fix_rank(x, s, n == 2 ? expr_width(x, args[0]) : n - 1, e->loc);
            else if ((!strcmp(m, "size") || !strcmp(m, "stride")) && n == 1 && args[0]->kind == NB_EX_INT) {
                vslot *r = &x->s[slot_find(x, s)];
                if ((int)args[0]->u.ilit.value + 1 > r->min_rank) r->min_rank = (int)args[0]->u.ilit.value + 1;
            }
        }
    }
    /* views passed to a function join its parameters */
    nb_decl *g = NULL;
    int looked = 0;
    for (int i = 0; i < n; i++) {
        int d;
        int s = expr_slot(x, args[i], &d);
        if (s < 0) continue;
        if (!looked) g = find_callee(x, cal, n), looked = 1;
        if (!g || i >= g->u.func.nparams || !g->u.func.params[i]) continue;
        nb_decl *gp = g->u.func.params[i];
        nb_type_expr *gt = gp->u.param.texpr;
        if (!gt || gt->narray_dims != d) continue;
        join(x, s, slot_of(x, gt, gp->name), args[i]->loc);
    }
    if (cal && cal->kind != NB_EX_NAME) vr_expr(x, cal);
    for (int i = 0; i < n; i++) vr_expr(x, args[i]);
}

static void vr_expr(vr_ctx *x, nb_expr *e) {
    if (!e) return;
    switch (e->kind) {
    case NB_EX_INDEX: {
        int d;
        int s = expr_slot(x, e->u.index.base, &d);
        if (s >= 0 && !d) /* an element of a view */
            fix_rank(x, s, e->u.index.nindices == 1 ? expr_width(x, e->u.index.indices[0]) : e->u.index.nindices,
                     e->loc);
        vr_expr(x, e->u.index.base);
        for (int i = 0; i < e->u.index.nindices; i++) vr_expr(x, e->u.index.indices[i]);
        return;
    }
    case NB_EX_CALL: vr_call(x, e); return;
    case NB_EX_UNARY: vr_expr(x, e->u.unary.operand); return;
    case NB_EX_BINARY: vr_expr(x, e->u.binary.lhs); vr_expr(x, e->u.binary.rhs); return;
    case NB_EX_ASSIGN:
        if (e->u.assign.op == NB_TOK_ASSIGN) {
            int d;
            const char *nm = NULL;
            nb_type_expr *lte = expr_te(x, e->u.assign.lhs, &d, &nm);
            flow(x, lte, d, lte ? slot_of(x, lte, nm) : -1, e->u.assign.rhs, e->loc);
        }
        vr_expr(x, e->u.assign.lhs);
        vr_expr(x, e->u.assign.rhs);
        return;
    case NB_EX_TERNARY:
        vr_expr(x, e->u.ternary.cond);
        vr_expr(x, e->u.ternary.then_e);
        vr_expr(x, e->u.ternary.else_e);
        return;
    case NB_EX_MEMBER: vr_expr(x, e->u.member.base); return;
    case NB_EX_CAST: vr_expr(x, e->u.cast.operand); return;
    case NB_EX_INIT_LIST:
        for (int i = 0; i < e->u.init_list.nitems; i++) vr_expr(x, e->u.init_list.items[i]);
        return;
    default: return;
    }
}

static void vr_stmt(vr_ctx *x, nb_stmt *s) {
    if (!s) return;
    int mark = x->nsc;
    switch (s->kind) {
    case NB_ST_BLOCK:
        for (int i = 0; i < s->u.block.count; i++) vr_stmt(x, s->u.block.items[i]);
        x->nsc = mark;
        return;
    case NB_ST_EXPR: vr_expr(x, s->u.expr.expr); return;
    case NB_ST_VAR: /* (declarations stay in scope until the enclosing block ends) */
        for (int i = 0; i < s->u.var.count; i++) {
            nb_decl *v = s->u.var.vars[i];
            if (!v) continue;
            vr_expr(x, v->u.var.init);
            nb_type_expr *te = v->u.var.texpr;
            push_name(x, v->name, te);
            if (!te && x->nsc > mark && x->sc[x->nsc - 1].name == v->name) x->sc[x->nsc - 1].init = v->u.var.init;
            if (te) slot_of(x, te, v->name); /* (every view local gets a rank, used or not) */
            if (te && v->u.var.init)
                flow(x, te, te->narray_dims, slot_of(x, te, v->name), v->u.var.init, v->loc);
            else if (!te && v->u.var.init) { /* `var w = v;`: w is v */
                int d;
                const char *nm = NULL;
                nb_type_expr *rte = expr_te(x, v->u.var.init, &d, &nm);
                if (rte && d == rte->narray_dims && x->nsc > mark) x->sc[x->nsc - 1].te = rte;
            }
        }
        return;
    case NB_ST_IF:
        vr_expr(x, s->u.if_s.cond);
        vr_stmt(x, s->u.if_s.then_s);
        x->nsc = mark;
        vr_stmt(x, s->u.if_s.else_s);
        x->nsc = mark;
        return;
    case NB_ST_FOR:
        vr_stmt(x, s->u.for_s.init);
        vr_expr(x, s->u.for_s.cond);
        vr_expr(x, s->u.for_s.step);
        vr_stmt(x, s->u.for_s.body);
        x->nsc = mark;
        return;
    case NB_ST_WHILE: case NB_ST_DO_WHILE:
        vr_expr(x, s->u.while_s.cond);
        vr_stmt(x, s->u.while_s.body);
        x->nsc = mark;
        return;
    case NB_ST_SWITCH:
        vr_expr(x, s->u.switch_s.value);
        for (int i = 0; i < s->u.switch_s.ncases; i++)
            for (int j = 0; j < s->u.switch_s.cases[i].nbody; j++) vr_stmt(x, s->u.switch_s.cases[i].body[j]);
        x->nsc = mark;
        return;
    case NB_ST_TARGET_SWITCH:
        for (int i = 0; i < s->u.tswitch.ncases; i++) {
            for (int j = 0; j < s->u.tswitch.cases[i].nbody; j++) vr_stmt(x, s->u.tswitch.cases[i].body[j]);
            x->nsc = mark;
        }
        return;
    case NB_ST_RETURN: vr_expr(x, s->u.ret.value); return;
    default: return;
    }
}

static void vr_fn(vr_ctx *x, nb_decl *fn, nb_decl *owner) {
    if (!fn || fn->kind != NB_DECL_FUNC) return;
    x->fn = fn;
    x->owner = owner;
    x->nsc = 0;
    for (int i = 0; i < fn->u.func.nparams; i++) { /* (rankless parameters get a slot even if unused) */
        nb_decl *p = fn->u.func.params[i];
        if (p && p->u.param.texpr) slot_of(x, p->u.param.texpr, p->name);
    }
    vr_stmt(x, fn->u.func.body);
    x->fn = NULL;
    x->owner = NULL;
}

/* ---- the rewrite ----------------------------------------------------------------------------- */

static void set_view_rank(nb_checker *c, nb_type_expr *te, int r) {
    if (r > 8) r = 8;
    /* TensorView<T> -> TensorView<T, r>; DiffTensorView -> DiffTensorView<float, r> */
    nb_type_expr **targs = ck_alloc(c, sizeof(nb_type_expr *) * 2);
    nb_expr **vargs = ck_alloc(c, sizeof(nb_expr *) * 2);
    nb_expr *rank = ck_new_expr(c, NB_EX_INT, te->loc);
    if (!targs || !vargs || !rank) return;
    if (te->ntargs == 1) {
        targs[0] = te->targs ? te->targs[0] : NULL;
        vargs[0] = te->vargs ? te->vargs[0] : NULL;
    } else {
        nb_type_expr *fl = ck_alloc(c, sizeof *fl);
        if (!fl) return;
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
}

/* Whether a statement declares a local of view type (the quick test before the walk). */
static int has_view_local(const nb_stmt *s) {
    if (!s) return 0;
    switch (s->kind) {
    case NB_ST_BLOCK:
        for (int i = 0; i < s->u.block.count; i++)
            if (has_view_local(s->u.block.items[i])) return 1;
        return 0;
    case NB_ST_VAR:
        for (int i = 0; i < s->u.var.count; i++)
            if (s->u.var.vars[i] && s->u.var.vars[i]->u.var.texpr && is_view_name(s->u.var.vars[i]->u.var.texpr->name))
                return 1;
        return 0;
    case NB_ST_IF: return has_view_local(s->u.if_s.then_s) || has_view_local(s->u.if_s.else_s);
    case NB_ST_FOR: return has_view_local(s->u.for_s.init) || has_view_local(s->u.for_s.body);
    case NB_ST_WHILE: case NB_ST_DO_WHILE: return has_view_local(s->u.while_s.body);
    case NB_ST_SWITCH:
        for (int i = 0; i < s->u.switch_s.ncases; i++)
            for (int j = 0; j < s->u.switch_s.cases[i].nbody; j++)
                if (has_view_local(s->u.switch_s.cases[i].body[j])) return 1;
        return 0;
    case NB_ST_TARGET_SWITCH:
        for (int i = 0; i < s->u.tswitch.ncases; i++)
            for (int j = 0; j < s->u.tswitch.cases[i].nbody; j++)
                if (has_view_local(s->u.tswitch.cases[i].body[j])) return 1;
        return 0;
    default: return 0;
    }
}

static int fn_has_view(const nb_decl *f) {
    if (!f || f->kind != NB_DECL_FUNC) return 0;
    for (int i = 0; i < f->u.func.nparams; i++)
        if (f->u.func.params[i] && f->u.func.params[i]->u.param.texpr &&
            is_view_name(f->u.func.params[i]->u.param.texpr->name))
            return 1;
    return has_view_local(f->u.func.body);
}

/* Whether the module writes a rankless-capable view type anywhere (most modules: no, and the
 * walk is skipped). */
static int module_has_views(const nb_module_ast *m) {
    for (int i = 0; i < m->ndecls; i++) {
        const nb_decl *d = m->decls[i];
        if (!d) continue;
        if (d->kind == NB_DECL_FUNC && fn_has_view(d)) return 1;
        if (d->kind != NB_DECL_STRUCT) continue;
        for (int k = 0; k < d->u.strct.nfields; k++)
            if (d->u.strct.fields[k] && d->u.strct.fields[k]->u.var.texpr &&
                is_view_name(d->u.strct.fields[k]->u.var.texpr->name))
                return 1;
        for (int k = 0; k < d->u.strct.nmethods; k++)
            if (fn_has_view(d->u.strct.methods[k])) return 1;
    }
    return 0;
}

/* Before a module is checked (check_view.c ck_prepare_views): every rankless view type written in
 * it gets its rank. */
void ck_infer_view_ranks(nb_checker *c, nb_module_ast *m) {
    if (!module_has_views(m)) return;
    vr_ctx x;
    memset(&x, 0, sizeof x);
    x.c = c;
    x.m = m;
    int ns = 0;
    for (int i = 0; i < m->ndecls; i++) ns += m->decls[i] && m->decls[i]->kind == NB_DECL_STRUCT && m->decls[i]->name;
    if (ns) { /* the struct table: find_struct is called for every member expression */
        int cap = 16;
        while (cap < 2 * ns) cap *= 2;
        x.structs = calloc((size_t)cap, sizeof *x.structs);
        if (x.structs) {
            x.nstructs = cap;
            for (int i = 0; i < m->ndecls; i++) {
                nb_decl *d = m->decls[i];
                if (!d || d->kind != NB_DECL_STRUCT || !d->name) continue;
                unsigned h = name_hash(d->name) & (unsigned)(cap - 1);
                while (x.structs[h] && strcmp(x.structs[h]->name, d->name)) h = (h + 1) & (unsigned)(cap - 1);
                if (!x.structs[h]) x.structs[h] = d; /* (the first of a name, as the scan found it) */
            }
        }
    }
    for (int i = 0; i < m->ndecls; i++) { /* struct fields first: their slots exist before uses */
        nb_decl *d = m->decls[i];
        if (!d || d->kind != NB_DECL_STRUCT) continue;
        for (int k = 0; k < d->u.strct.nfields; k++) {
            nb_decl *f = d->u.strct.fields[k];
            if (f && f->u.var.texpr) slot_of(&x, f->u.var.texpr, f->name);
        }
    }
    for (int i = 0; i < m->ndecls; i++) {
        nb_decl *d = m->decls[i];
        if (!d) continue;
        if (d->kind == NB_DECL_FUNC) vr_fn(&x, d, NULL);
        else if (d->kind == NB_DECL_STRUCT)
            for (int k = 0; k < d->u.strct.nmethods; k++) vr_fn(&x, d->u.strct.methods[k], d);
    }
    for (int i = 0; i < x.n; i++) {
        nb_type_expr *te = x.s[i].te;
        if (!is_view_name(te->name) || te->ntargs >= 2) continue;
        vslot *r = &x.s[slot_find(&x, i)];
        set_view_rank(c, te, r->rank ? r->rank : r->min_rank ? r->min_rank : 1);
    }
    free(x.s);
    free(x.sc);
    free(x.structs);
    free(x.smap);
}

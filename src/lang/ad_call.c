/* Derivatives on demand and the fwds / bwds call wrappers (see ad.h). */
#include <stdio.h>
#include <string.h>

#include "lang/ad.h"

static void optimize_new(nb_ir_module *m, int from)
{
    for (int i = from; i < m->nfuncs; i++)
        for (int round = 0; round < 4; round++)
            if (!nb_ir_fold(m->funcs[i]) + !nb_ir_dce(m->funcs[i]) == 2) break;
}

nb_ir_func *nb_ad_deriv_on_demand(nb_ir_module *m, nb_source_set *src, nb_ir_func *f, int bwd)
{
    int n0 = m->nfuncs;
    nb_loc loc = f->decl ? f->decl->loc : (nb_loc){0};
    nb_ir_func *d = bwd == 2 ? nb_ad_bwdr_func(m, src, f, loc) : bwd ? nb_ad_bwd_func(m, src, f, loc) : nb_ad_fwd_func(m, src, f, loc);
    if (!d) return NULL;
    if (nb_ad_generate(m, src)) return NULL;
    optimize_new(m, n0);
    return d;
}

static nb_ir_var *param(nb_ir_func *w, const char *name, const nb_type *t, nb_param_dir dir)
{
    return nb_ir_param_new(w, name, t, dir);
}

nb_ir_func *nb_ad_call_wrapper(nb_ir_module *m, nb_source_set *src, nb_ir_func *f, int kind)
{
    char name[300];
    int bwd = kind != NB_AD_FWDS, with_result = kind == NB_AD_BWDR;
    snprintf(name, sizeof name, "%s__%s", f->cname, kind == NB_AD_BWDR ? "bwdr" : bwd ? "bwds" : "fwds");
    for (int i = 0; i < m->nfuncs; i++)
        if (m->funcs[i]->primal == f && m->funcs[i]->role == NB_IR_PRIMAL && !strcmp(m->funcs[i]->cname, name))
            return m->funcs[i];
    /* bwdr: the derivative that returns the primal result; a custom [BackwardDerivative] has none,
     * so the wrapper calls f for the result and then the custom derivative */
    nb_ir_func *d = NULL, *fused = NULL;
    if (with_result && f->ret->kind != NB_TY_VOID) {
        int n0 = m->nfuncs, ne0 = src->nerrors;
        fused = nb_ad_deriv_on_demand(m, src, f, 2);
        if (!fused && src->nerrors > ne0) return NULL;
        (void)n0;
    }
    d = fused ? fused : nb_ad_deriv_on_demand(m, src, f, bwd);
    if (!d) return NULL;
    nb_type_table *tt = m->types;
    int n = f->nparams;
    int diff_ret = f->ret->kind != NB_TY_VOID && nb_type_is_differentiable(f->ret);
    nb_ir_func *w = nb_ir_func_new(m, name, bwd && !with_result ? tt->t_void : f->ret);
    if (!w) return NULL;
    w->primal = f; /* (role stays primal: it is an ordinary function calling f's derivative) */
    w->has_tid = f->has_tid;
    /* a [Kernel]'s wrapper is the derivative kernel (slangtorch's f.bwd / f.fwd): launched like f,
     * with f's thread ids; its gradients are those of the DiffTensor parameters (their gradient
     * tensors), value parameters get none (a zero tangent, a dropped gradient) */
    w->is_kernel = f->is_kernel;
    memcpy(w->numthreads, f->numthreads, sizeof w->numthreads);
    nb_ir_var *pv[64] = {0}, *gv[64] = {0}, *rd = NULL;
    if (n > 64) return NULL;
    for (int i = 0; i < n; i++) {
        nb_ir_var *p = f->params[i];
        if (bwd && p->dir == NB_DIR_OUT) continue;
        pv[i] = param(w, p->name, p->type, bwd ? NB_DIR_IN : p->dir);
    }
    for (int i = 0; i < n; i++) {
        nb_ir_var *p = f->params[i];
        if (!nb_ad_param_is_diff(p)) continue;
        char gn[160];
        const nb_type *dt = nb_ad_dtype(tt, p->type);
        if (f->is_kernel) { /* a local: zero tangent in, gradient out dropped */
            snprintf(gn, sizeof gn, "%s_%s", p->name, bwd ? "grad" : "d");
            if (!(gv[i] = nb_ir_var_new(w, gn, dt))) return NULL;
            gv[i]->is_temp = 1;
            nb_ir_builder zb = {m, w, w->body, f->decl ? f->decl->loc : (nb_loc){0}, NB_IRF_DERIV};
            nb_ir_store(&zb, gv[i], NULL, 0, NULL, nb_ir_zero(&zb, dt));
            continue;
        }
        if (!bwd) {
            snprintf(gn, sizeof gn, "d_%s", p->name);
            gv[i] = param(w, gn, dt, p->dir);
        } else {
            snprintf(gn, sizeof gn, "%s_grad", p->name);
            gv[i] = param(w, gn, dt, p->dir == NB_DIR_IN ? NB_DIR_OUT : p->dir == NB_DIR_INOUT ? NB_DIR_INOUT : NB_DIR_IN);
            if (gv[i] && p->dir == NB_DIR_IN) gv[i]->flags |= NB_IRF_ACCUM;
        }
    }
    if (diff_ret) rd = param(w, bwd ? "_dout" : "_result_d", nb_ad_dtype(tt, f->ret), bwd ? NB_DIR_IN : NB_DIR_OUT);
    nb_ir_builder bb = {m, w, w->body, f->decl ? f->decl->loc : (nb_loc){0}, NB_IRF_DERIV};
    nb_ir_builder *b = &bb;
    nb_ir_inst *args[66] = {0};
    nb_ir_var *refs[66] = {0}, *tmps[64] = {0};
    int k = 0;
    for (int i = 0; i < n; i++) {
        nb_ir_var *p = f->params[i];
        int diff = nb_ad_param_is_diff(p);
        if (bwd && (p->flags & NB_IRF_HIDDEN)) continue; /* after _dout, as ad_bwd.c orders them */
        if (!diff) {
            if (bwd) {
                if (p->dir != NB_DIR_OUT) args[k++] = nb_ir_load(b, pv[i], NULL, 0, NULL);
            } else if (p->dir == NB_DIR_IN) args[k++] = nb_ir_load(b, pv[i], NULL, 0, NULL);
            else refs[k++] = pv[i];
            continue;
        }
        if (bwd && p->dir == NB_DIR_OUT) {
            args[k++] = nb_ir_load(b, gv[i], NULL, 0, NULL);
            continue;
        }
        const nb_type *pt = d->params[k]->type; /* DifferentialPair<T> */
        nb_ir_inst *ops[2];
        ops[0] = p->dir == NB_DIR_OUT ? nb_ir_zero(b, p->type) : nb_ir_load(b, pv[i], NULL, 0, NULL);
        ops[1] = (p->dir == NB_DIR_OUT || (bwd && p->dir == NB_DIR_IN)) ? nb_ir_zero(b, nb_ad_dtype(tt, p->type))
                                                                          : nb_ir_load(b, gv[i], NULL, 0, NULL);
        nb_ir_inst *pair = nb_ir_construct(b, pt, ops, 2);
        if (!bwd && p->dir == NB_DIR_IN) {
            args[k++] = pair;
            continue;
        }
        tmps[i] = nb_ir_var_new(w, p->name, pt);
        if (!tmps[i]) return NULL;
        tmps[i]->is_temp = 1;
        nb_ir_store(b, tmps[i], NULL, 0, NULL, pair);
        refs[k++] = tmps[i];
    }
    if (bwd && diff_ret) args[k++] = nb_ir_load(b, rd, NULL, 0, NULL);
    for (int i = 0; bwd && i < n; i++) /* module-scope parameters passed on (NB_IRF_HIDDEN): last */
        if ((f->params[i]->flags & NB_IRF_HIDDEN) && f->params[i]->dir != NB_DIR_OUT)
            args[k++] = nb_ir_load(b, pv[i], NULL, 0, NULL);
    nb_ir_inst *res = NULL; /* bwdr with a custom derivative: f's result, computed first */
    if (with_result && !fused && f->ret->kind != NB_TY_VOID) {
        nb_ir_inst *pargs[66] = {0};
        nb_ir_var *prefs[66] = {0};
        int np = 0, ok = 1;
        for (int i = 0; i < n; i++) {
            if (f->params[i]->dir != NB_DIR_IN) ok = 0; /* (out / inout: the custom path cannot replay them) */
            else pargs[np++] = nb_ir_load(b, pv[i], NULL, 0, NULL);
        }
        if (!ok) {
            nb_ad_error(src, b->loc, "a fused forward + backward call of '%s' (custom [BackwardDerivative] with out/inout "
                        "parameters) is not supported: run the primal call and the bwds call separately", f->name);
            return NULL;
        }
        res = nb_ir_call(b, f, pargs, prefs);
    }
    if (k != d->nparams) {
        nb_ad_error(src, b->loc, "internal: call wrapper of '%s' does not match its derivative", f->name);
        return NULL;
    }
    nb_ir_inst *r = nb_ir_call(b, d, args, refs);
    for (int i = 0; i < n; i++) {
        if (!tmps[i]) continue;
        nb_ir_inst *pr = nb_ir_load(b, tmps[i], NULL, 0, NULL);
        if (!bwd) nb_ir_store(b, pv[i], NULL, 0, NULL, nb_ir_extract(b, pr, 0));
        nb_ir_store(b, gv[i], NULL, 0, NULL, nb_ir_extract(b, pr, 1));
    }
    if (with_result && f->ret->kind != NB_TY_VOID) nb_ir_jump(b, NB_IR_RETURN, fused ? r : res);
    else if (bwd) nb_ir_jump(b, NB_IR_RETURN, NULL);
    else if (diff_ret) {
        nb_ir_store(b, rd, NULL, 0, NULL, nb_ir_extract(b, r, 1));
        nb_ir_jump(b, NB_IR_RETURN, nb_ir_extract(b, r, 0));
    } else nb_ir_jump(b, NB_IR_RETURN, f->ret->kind == NB_TY_VOID ? NULL : r);
    return w;
}

/* ---- reflection of the wrappers (nb_program_functions("f__bwds") etc., compiler.h) ------- */

#include "core/util.h"
#include "lang/emit_c.h"
#include "lang/program.h"
#include "nabla/alloc.h"

int nb_ad_wrapper_name(const char *name, char *base, size_t cap)
{
    size_t n = name ? strlen(name) : 0;
    if (n < 7 || n - 6 >= cap) return 0;
    const char *suf = name + n - 6;
    int kind = !strcmp(suf, "__bwds") ? NB_AD_BWDS : !strcmp(suf, "__bwdr") ? NB_AD_BWDR : !strcmp(suf, "__fwds") ? NB_AD_FWDS : 0;
    if (!kind) return 0;
    memcpy(base, name, n - 6);
    base[n - 6] = '\0';
    return kind;
}

typedef struct rleaves {
    nb_fn_leaf *items;
    int n, cap;
    nb_arena *a;
} rleaves;

static const nb_type *innermost(const nb_type *t)
{
    while (t->kind == NB_TY_ARRAY) t = t->elem;
    return t;
}

static void *ones_or_zeros(nb_arena *a, nb_dtype dt, long long count, double v)
{
    if (dt != NB_F32 && dt != NB_F64) return NULL;
    size_t es = dt == NB_F64 ? 8 : 4;
    unsigned char *d = nb_arena_zalloc(a, es * (size_t)(count ? count : 1), 8);
    for (long long i = 0; d && i < count; i++) {
        if (dt == NB_F64) ((double *)d)[i] = v;
        else ((float *)d)[i] = (float)v;
    }
    return d;
}

static int rleaf_add(rleaves *L, const nb_type *t, const char *path, int param, int dir, int nodiff, double defv,
                     int has_def)
{
    if (t->kind == NB_TY_STRUCT && t->decl) {
        for (int i = 0; i < t->decl->u.strct.nfields; i++) {
            nb_decl *fd = t->decl->u.strct.fields[i];
            char p2[256];
            snprintf(p2, sizeof p2, "%s.%s", path, fd->name);
            if (!rleaf_add(L, fd->u.var.type, nb_arena_strdup(L->a, p2), param, dir, nodiff, defv, has_def)) return 0;
        }
        return 1;
    }
    if (t->kind == NB_TY_ARRAY && innermost(t)->kind == NB_TY_STRUCT) { /* element by element (program.c) */
        for (int i = 0; i < t->length; i++) {
            char p2[256];
            snprintf(p2, sizeof p2, "%s[%d]", path, i);
            if (!rleaf_add(L, t->elem, nb_arena_strdup(L->a, p2), param, dir, nodiff, defv, has_def)) return 0;
        }
        return 1;
    }
    if (L->n == L->cap) {
        int nc = L->cap ? L->cap * 2 : 16;
        nb_fn_leaf *ni = nb_arena_zalloc(L->a, sizeof *ni * (size_t)nc, 16);
        if (!ni) return 0;
        if (L->n) memcpy(ni, L->items, sizeof *ni * (size_t)L->n);
        L->items = ni;
        L->cap = nc;
    }
    nb_fn_leaf *l = &L->items[L->n++];
    memset(l, 0, sizeof *l);
    l->path = path;
    l->param = param;
    l->dir = dir;
    if (t->kind == NB_TY_TENSOR) {
        l->kind = NB_LEAF_TENSOR;
        l->scalar = nb_emit_natural_dtype(nb_type_elem_scalar(t->elem));
        l->tensor_rank = t->rank;
        l->diff_tensor = t->diff_tensor;
        return 1;
    }
    const nb_type *in = innermost(t);
    l->kind = NB_LEAF_VALUE;
    l->scalar = nb_emit_natural_dtype(in->scalar);
    l->value_rank = nb_type_value_shape(t, l->value_shape);
    if (l->value_rank < 0) l->value_rank = 0;
    l->differentiable = !nodiff && nb_type_is_float_based(in);
    if (has_def) {
        long long cnt = 1;
        for (int d = 0; d < l->value_rank; d++) cnt *= l->value_shape[d];
        l->default_value = ones_or_zeros(L->a, l->scalar, cnt, defv);
        l->has_default = l->default_value != NULL;
    }
    return 1;
}

/* Wrapper parameter i < nkept is a copy of one of base function f's parameters (all of them in
 * order for fwds; bwds leaves out f's out parameters): its leaves [from, L->n) take the default
 * values of the base's leaves of the same path (bi: the base's reflection). */
static void inherit_defaults(const nb_fn_info *bi, const nb_ir_func *f, int kind, int i, rleaves *L, int from,
                             int *hasdef)
{
    int j = -1;
    for (int q = 0, seen = -1; q < f->nparams && j < 0; q++) {
        if (kind != NB_AD_FWDS && f->params[q]->dir == NB_DIR_OUT) continue;
        if (++seen == i) j = q;
    }
    if (j < 0 || j >= bi->nparams || !bi->param_has_default || !bi->param_has_default[j]) return;
    int all = L->n > from;
    for (int l = from; l < L->n; l++) {
        nb_fn_leaf *wl = &L->items[l];
        const nb_fn_leaf *bl = NULL;
        for (int b = bi->param_first_leaf[j]; b < bi->param_first_leaf[j + 1] && !bl; b++)
            if (!strcmp(bi->leaves[b].path, wl->path)) bl = &bi->leaves[b];
        if (bl && bl->has_default) {
            wl->has_default = 1;
            wl->default_value = bl->default_value;
        } else {
            all = 0;
        }
    }
    if (all) *hasdef = 1;
}

nb_status nb_ad_reflect_wrappers(nb_program *p, const char *name, const nb_fn_info **infos, int *count)
{
    char base[256];
    int kind = nb_ad_wrapper_name(name, base, sizeof base);
    if (!kind) return nb_error(NB_ERR_NOT_FOUND, "no function '%s'", name);
    nb_decl *decls[64];
    int nd = nb_program_find_functions(p, base, decls, 64);
    if (nd <= 0) return nb_error(NB_ERR_NOT_FOUND, "no function '%s' (for '%s')", base, name);
    if (nd > 64) nd = 64;
    nb_ir_module *m;
    NB_TRY(nb_program_get_ir(p, &m));
    nb_arena *A = &p->arena;
    /* the base functions' reflection (in decls' order): the wrapper's copies of their parameters
     * keep their default values, so a call that leaves one unbound runs in every mode */
    const nb_fn_info *binfos = NULL;
    int bcount = 0;
    if (nb_program_functions(p, base, &binfos, &bcount) != NB_OK || bcount != nd) {
        nb_clear_error();
        binfos = NULL;
    }
    nb_fn_info *arr = nb_arena_zalloc(A, sizeof *arr * (size_t)nd, 16);
    if (!arr) return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
    int n = 0;
    for (int k = 0; k < nd; k++) {
        nb_ir_func *f = nb_ir_find_func(m, decls[k]);
        if (!f || !f->differentiable) continue;
        int nd0 = p->src.ndiags, ne0 = p->src.nerrors;
        nb_ir_func *w = nb_ad_call_wrapper(m, &p->src, f, kind);
        if (!w) {
            nb_status st = nb_diag_status(&p->src);
            for (int i = nd0; i < p->src.ndiags; i++)
                if (p->src.diags[i].msg) nb_free(p->src.diags[i].msg, strlen(p->src.diags[i].msg) + 1);
            p->src.ndiags = nd0;
            p->src.nerrors = ne0;
            return st;
        }
        nb_fn_info *info = &arr[n];
        rleaves L = {NULL, 0, 0, A};
        const char **names = nb_arena_zalloc(A, sizeof(char *) * (size_t)(w->nparams + 1), 16);
        int *dirs = nb_arena_zalloc(A, sizeof(int) * (size_t)(w->nparams + 1), 16);
        int *first = nb_arena_zalloc(A, sizeof(int) * (size_t)(w->nparams + 1), 16);
        int *hasdef = nb_arena_zalloc(A, sizeof(int) * (size_t)(w->nparams + 1), 16);
        if (!names || !dirs || !first || !hasdef) return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
        int nkept = 0; /* f's parameters that the wrapper takes first (bwd: all but out) */
        for (int i = 0; i < f->nparams; i++) nkept += kind == NB_AD_FWDS || f->params[i]->dir != NB_DIR_OUT;
        nb_strbuf sig;
        nb_strbuf_init(&sig);
        nb_type_print(w->ret, &sig);
        nb_strbuf_printf(&sig, " %s(", name);
        for (int i = 0; i < w->nparams; i++) {
            nb_ir_var *v = w->params[i];
            names[i] = v->name;
            /* accumulated gradients are bound like inputs (they may be broadcast) */
            dirs[i] = (v->flags & NB_IRF_ACCUM) ? 0 : (int)v->dir;
            first[i] = L.n;
            int is_tan = kind == 1 && i >= f->nparams && strcmp(v->name, "_result_d") != 0;
            /* the result's gradient, and an out parameter's (an input of bwds), default to 1 */
            int is_dout = kind != NB_AD_FWDS && (strcmp(v->name, "_dout") == 0 ||
                                                 (i >= nkept && v->dir == NB_DIR_IN && !(v->flags & NB_IRF_ACCUM)));
            /* a gradient not asked for is bound to a zero uniform that is never written back: the
             * kernel's compiler then drops the work that only fed it */
            hasdef[i] = is_tan || is_dout || (v->flags & NB_IRF_ACCUM) != 0;
            if (!rleaf_add(&L, v->type, v->name, i, dirs[i], (v->flags & NB_IRF_NO_DIFF) != 0, is_dout ? 1.0 : 0.0,
                           hasdef[i]))
                return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory");
            if (binfos && i < nkept) inherit_defaults(&binfos[k], f, kind, i, &L, first[i], &hasdef[i]);
            if (i) nb_strbuf_append(&sig, ", ");
            if (v->flags & NB_IRF_ACCUM) nb_strbuf_append(&sig, "accumulate ");
            else if (v->dir == NB_DIR_OUT) nb_strbuf_append(&sig, "out ");
            else if (v->dir == NB_DIR_INOUT) nb_strbuf_append(&sig, "inout ");
            nb_type_print(v->type, &sig);
            nb_strbuf_printf(&sig, " %s", v->name);
        }
        nb_strbuf_append(&sig, ")");
        first[w->nparams] = L.n;
        info->name = nb_arena_strdup(A, name);
        info->overload = n;
        info->nparams = w->nparams;
        info->param_names = names;
        info->param_dirs = dirs;
        info->param_first_leaf = first;
        info->param_has_default = hasdef;
        info->nleaves = L.n;
        info->leaves = L.items;
        info->differentiable = 0;
        info->is_kernel = w->is_kernel;
        memcpy(info->numthreads, w->numthreads, sizeof info->numthreads);
        info->signature = nb_arena_strdup(A, nb_strbuf_cstr(&sig));
        nb_strbuf_free(&sig);
        if (w->ret->kind != NB_TY_VOID) {
            rleaves R = {NULL, 0, 0, A};
            if (w->ret->kind == NB_TY_STRUCT || !rleaf_add(&R, w->ret, "_result", -1, 1, 0, 0, 0))
                return nb_error(NB_ERR_UNSUPPORTED, "%s: struct results of derivative calls are not supported yet", name);
            info->has_result = 1;
            info->result = R.items[0];
            info->nresults = 1;
            info->results = &info->result;
        }
        n++;
    }
    if (!n) return nb_error(NB_ERR_NOT_FOUND, "'%s' is not differentiable (add [Differentiable]), so '%s' does not exist", base, name);
    *infos = arr;
    *count = n;
    return NB_OK;
}

/* ---- [TreatAsDifferentiable]: trivial derivatives ----------------------------------------- */

int nb_ad_treat_as_diff(const nb_ir_func *pf)
{
    return pf && pf->role == NB_IR_PRIMAL && pf->decl && pf->decl->kind == NB_DECL_FUNC &&
           pf->decl->u.func.treat_as_diff;
}

/* A primal with a custom backward derivative, no forward one, and no [Differentiable] /
 * [ForwardDifferentiable] / [BackwardDifferentiable] of its own: Slang's forward mode gives it a
 * trivial derivative (the primal value, zero tangents) rather than differentiating its body. */
int nb_ad_fwd_trivial(const nb_ir_func *pf)
{
    if (!pf || pf->role != NB_IR_PRIMAL || !pf->decl || pf->decl->kind != NB_DECL_FUNC) return 0;
    const nb_decl *d = pf->decl;
    if (!d->u.func.bwd_derivative || d->u.func.fwd_derivative) return 0;
    for (int i = 0; i < d->attrs.count; i++) {
        const char *n = d->attrs.items[i].name ? d->attrs.items[i].name : "";
        if (!strcmp(n, "Differentiable") || !strcmp(n, "ForwardDifferentiable") || !strcmp(n, "BackwardDifferentiable"))
            return 0;
    }
    return 1;
}

/* The zero tangent of a value of primal type t: the type's own `static Differential dzero()` where
 * a struct declares one (Slang's IDifferentiable.dzero: a type may represent its additive identity
 * other than by all-zero bits), else all-zero. */
static nb_ir_inst *dzero_of(nb_ir_builder *b, const nb_type *t)
{
    const nb_type *dt = nb_type_differential(b->m->types, t);
    if (t->kind == NB_TY_STRUCT && t->decl && t->decl->kind == NB_DECL_STRUCT)
        for (int i = 0; i < t->decl->u.strct.nmethods; i++) {
            nb_decl *md = t->decl->u.strct.methods[i];
            if (!md || !md->name || strcmp(md->name, "dzero") || !(md->mods & NB_MOD_STATIC) || md->u.func.nparams)
                continue;
            nb_ir_func *f = nb_ir_find_func(b->m, md);
            if (f && f->ret == dt) return nb_ir_call(b, f, NULL, NULL);
        }
    return nb_ir_zero(b, dt);
}

/* The derivative df of a [TreatAsDifferentiable] primal: forward mode runs the primal and gives
 * every tangent (result, out/inout pairs) zero; reverse mode sets every gradient to zero (and the
 * fused form returns the primal result). Slang: "trivial forward and backward propagation
 * functions that return 0". */
int nb_ad_gen_trivial(nb_ir_module *m, nb_ir_func *df)
{
    nb_ir_func *pf = df->primal;
    nb_ir_builder bb = {m, df, df->body, pf->decl ? pf->decl->loc : (nb_loc){0}, NB_IRF_DERIV};
    nb_ir_builder *b = &bb;
    int bwd = df->role == NB_IR_BWD_DERIV;
    int n = pf->nparams;
    nb_ir_inst **args = nb_arena_zalloc(&m->arena, sizeof(void *) * (size_t)(n + 1), sizeof(void *));
    nb_ir_var **refs = nb_arena_zalloc(&m->arena, sizeof(void *) * (size_t)(n + 1), sizeof(void *));
    nb_ir_var **tmps = nb_arena_zalloc(&m->arena, sizeof(void *) * (size_t)(n + 1), sizeof(void *));
    if (!args || !refs || !tmps) return 1;
    nb_ir_step d1;
    memset(&d1, 0, sizeof d1);
    d1.kind = NB_IR_STEP_FIELD;
    d1.index = 1;
    int k = 0, run = !bwd || df->returns_primal;
    for (int i = 0; i < n; i++) {
        nb_ir_var *p = pf->params[i];
        int diff = nb_ad_param_is_diff(p);
        if (bwd && !diff && p->dir == NB_DIR_OUT) continue; /* (dropped from f_bwd) */
        nb_ir_var *q = k < df->nparams ? df->params[k++] : NULL;
        if (!q) return 1;
        if (bwd) {
            if (diff && p->dir != NB_DIR_OUT) /* the gradient: zero */
                nb_ir_store(b, q, &d1, 1, NULL, dzero_of(b, p->type));
            if (p->dir == NB_DIR_IN) args[i] = diff ? nb_ir_extract(b, nb_ir_load(b, q, NULL, 0, NULL), 0)
                                                    : nb_ir_load(b, q, NULL, 0, NULL);
            else run = 0; /* (out/inout: the fused form only runs primal-only signatures) */
            continue;
        }
        if (!diff) {
            if (p->dir == NB_DIR_IN) args[i] = nb_ir_load(b, q, NULL, 0, NULL);
            else refs[i] = q;
            continue;
        }
        nb_ir_var *t = nb_ir_var_new(df, p->name, p->type);
        if (!t) return 1;
        t->is_temp = 1;
        if (p->dir != NB_DIR_OUT) nb_ir_store(b, t, NULL, 0, NULL, nb_ir_extract(b, nb_ir_load(b, q, NULL, 0, NULL), 0));
        if (p->dir == NB_DIR_IN) args[i] = nb_ir_load(b, t, NULL, 0, NULL);
        else refs[i] = t;
        tmps[i] = t;
    }
    nb_ir_inst *r = run ? nb_ir_call(b, pf, args, refs) : NULL;
    if (bwd) {
        nb_ir_jump(b, NB_IR_RETURN, df->returns_primal ? (r ? r : nb_ir_zero(b, pf->ret)) : NULL);
        return 0;
    }
    k = 0;
    for (int i = 0; i < n; i++) {
        nb_ir_var *q = df->params[i];
        if (!tmps[i] || pf->params[i]->dir == NB_DIR_IN) continue;
        nb_ir_inst *ops[2] = {nb_ir_load(b, tmps[i], NULL, 0, NULL), dzero_of(b, pf->params[i]->type)};
        nb_ir_store(b, q, NULL, 0, NULL, nb_ir_construct(b, q->type, ops, 2));
    }
    if (df->ret->kind == NB_TY_DIFFPAIR && pf->ret != df->ret) {
        nb_ir_inst *ops[2] = {r, dzero_of(b, pf->ret)};
        nb_ir_jump(b, NB_IR_RETURN, nb_ir_construct(b, df->ret, ops, 2));
    } else {
        nb_ir_jump(b, NB_IR_RETURN, pf->ret->kind == NB_TY_VOID ? NULL : r);
    }
    return 0;
}

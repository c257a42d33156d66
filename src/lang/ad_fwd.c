/* Derivative-function registry, structured cloning, and forward mode (see ad.h, docs/AUTODIFF.md).
 *
 * Forward mode clones the primal body instruction by instruction and emits, right after each
 * clone, the instruction's tangent (tmap[id], NULL = zero). Every differentiable var gets a
 * tangent var written and read through the same access paths, so tangents flow through
 * if/switch/loops, early returns and break/continue with no special treatment.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lang/ad.h"
#include "lang/intrinsics.h"

void nb_ad_error(nb_source_set *src, nb_loc loc, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    nb_diag_error(src, loc, "%s", buf);
}

const nb_type *nb_ad_dtype(nb_type_table *tt, const nb_type *t)
{
    if (!t || t->kind == NB_TY_ERROR || t->kind == NB_TY_VOID) return NULL;
    return nb_type_differential(tt, t);
}

int nb_ad_field_map(nb_type_table *tt, const nb_type *s, int k)
{
    const nb_type *d = nb_type_differential(tt, s);
    if (!d || d == s) return k;
    if (!s->decl || k < 0 || k >= s->decl->u.strct.nfields || d->kind != NB_TY_STRUCT || !d->decl) return -1;
    const nb_decl *f = s->decl->u.strct.fields[k];
    if (!f || (f->mods & NB_MOD_NO_DIFF)) return -1;
    const char *name = f->name;
    for (int i = 0; i < f->attrs.count; i++) { /* [DerivativeMember(Differential.x)] */
        const nb_attr *a = &f->attrs.items[i];
        if (a->name && !strcmp(a->name, "DerivativeMember") && a->nargs == 1 && a->args[0]) {
            const nb_expr *e = a->args[0];
            if (e->kind == NB_EX_MEMBER && e->u.member.member) name = e->u.member.member;
            else if (e->kind == NB_EX_NAME && e->u.name.name) name = e->u.name.name;
        }
    }
    for (int j = 0; name && j < d->decl->u.strct.nfields; j++)
        if (d->decl->u.strct.fields[j] && d->decl->u.strct.fields[j]->name &&
            !strcmp(d->decl->u.strct.fields[j]->name, name))
            return j;
    return -1;
}

int nb_ad_tangent_steps(nb_type_table *tt, const nb_type *t, nb_ir_step *st, int n)
{
    for (int i = 0; i < n && t; i++) {
        if (st[i].kind == NB_IR_STEP_SWIZZLE) break;
        if (st[i].kind == NB_IR_STEP_FIELD) {
            if (t->kind == NB_TY_STRUCT && t->decl) {
                int f = st[i].index;
                if (f < 0 || f >= t->decl->u.strct.nfields) return 0;
                int k = nb_ad_field_map(tt, t, f);
                if (k < 0) return 0;
                t = t->decl->u.strct.fields[f]->u.var.type;
                st[i].index = k;
            } else if (t->kind == NB_TY_DIFFPAIR) {
                t = st[i].index == 0 ? t->elem : nb_type_differential(tt, t->elem);
            } else {
                return 1;
            }
        } else { /* index: an array element, a vector component, a matrix row */
            if (t->kind == NB_TY_ARRAY) t = t->elem;
            else return 1;
        }
    }
    return 1;
}

nb_ir_step *nb_ad_tangent_path(nb_ir_module *m, const nb_type *t, const nb_ir_step *path, int n, int *ok)
{
    *ok = 1;
    if (!n) return (nb_ir_step *)path;
    nb_ir_step *c = nb_arena_alloc(&m->arena, sizeof *c * (size_t)n, sizeof(void *));
    if (!c) {
        *ok = 0;
        return NULL;
    }
    memcpy(c, path, sizeof *c * (size_t)n);
    *ok = nb_ad_tangent_steps(m->types, t, c, n);
    return c;
}

int nb_ad_param_is_diff(const nb_ir_var *p)
{
    return !(p->flags & NB_IRF_NO_DIFF) && nb_type_is_differentiable(p->type); /* (`this` too) */
}

int nb_ad_param_is_ptr(const nb_ir_var *p)
{
    return !(p->flags & (NB_IRF_NO_DIFF | NB_IRF_HIDDEN)) && p->dir != NB_DIR_OUT && nb_type_ptr_pair(p->type);
}

/* The pair of a pointer value a: a pointer parameter's pair, or for an array literal of such
 * (`{a, a}`: construct) the pair of the arrays of their .p and .d; NULL when not known. */
static nb_ir_inst *ptr_pair_of(nb_ir_builder *b, nb_ir_var **pairv, nb_ir_inst *a, int depth)
{
    if (!a || depth > 8) return NULL;
    if (a->op == NB_IR_LOAD && a->npath == 0 && a->var && pairv[a->var->id])
        return nb_ir_load(b, pairv[a->var->id], NULL, 0, NULL);
    const nb_type *pt = nb_type_ptr_pair(a->type);
    if (a->op != NB_IR_CONSTRUCT || a->type->kind != NB_TY_ARRAY || !pt || a->nops != a->type->length ||
        a->nops > 64)
        return NULL;
    nb_ir_inst *ps[64], *ds[64];
    for (int k = 0; k < a->nops; k++) {
        nb_ir_inst *e = ptr_pair_of(b, pairv, a->ops[k], depth + 1);
        if (!e) return NULL;
        ps[k] = nb_ir_extract(b, e, 0);
        ds[k] = nb_ir_extract(b, e, 1);
    }
    nb_ir_inst *two[2];
    two[0] = nb_ir_construct(b, pt->decl->u.strct.fields[0]->u.var.type, ps, a->nops);
    two[1] = nb_ir_construct(b, pt->decl->u.strct.fields[1]->u.var.type, ds, a->nops);
    return nb_ir_construct(b, pt, two, 2);
}

nb_ir_inst *nb_ad_ptr_arg(nb_ir_builder *b, nb_source_set *src, nb_ir_var **pairv, nb_ir_inst *in, int i)
{
    nb_ir_var *v = in->refs ? in->refs[i] : NULL;
    nb_ir_inst *a = in->ops[i];
    if (!v && a && a->op == NB_IR_LOAD && a->npath == 0) v = a->var;
    nb_ir_var *pv = v ? pairv[v->id] : NULL;
    if (pv) return nb_ir_load(b, pv, NULL, 0, NULL);
    nb_ir_inst *r = !(in->refs && in->refs[i]) ? ptr_pair_of(b, pairv, a, 0) : NULL;
    if (r) return r;
    nb_ad_error(src, in->loc, "cannot differentiate this call to '%s': its pointer-type argument %d must be a "
                "pointer-type parameter of the calling function (its derivative pointer is not known here)",
                in->callee->name, i + 1);
    return NULL;
}

/* ---- registry ---------------------------------------------------------------------------- */

/* Generated derivatives are differentiable (higher order); their decl is the primal's, so its
 * custom-derivative attributes apply to the primal only. */
static int is_differentiable(nb_ir_func *f)
{
    if (f->role != NB_IR_PRIMAL) return 1;
    return f->differentiable || (f->decl && (f->decl->u.func.fwd_derivative || f->decl->u.func.bwd_derivative));
}

nb_ir_func *nb_ad_primal_subst(nb_ir_module *m, nb_ir_func *f)
{
    if (f->role != NB_IR_PRIMAL || !f->decl || f->decl->kind != NB_DECL_FUNC || !f->decl->u.func.primal_subst) return NULL;
    nb_ir_func *g = nb_ir_find_func(m, f->decl->u.func.primal_subst);
    /* (one level: a substitute that has a substitute itself is not used, so a cycle cannot loop) */
    if (!g || g == f || (g->decl && g->decl->kind == NB_DECL_FUNC && g->decl->u.func.primal_subst)) return NULL;
    return g;
}

/* aux of a derivative function: 1 = body pending, 2 = generated */
nb_ir_func *nb_ad_fwd_func(nb_ir_module *m, nb_source_set *src, nb_ir_func *primal, nb_loc loc)
{
    if (primal->role == NB_IR_PRIMAL && primal->decl && primal->decl->u.func.fwd_derivative) {
        nb_ir_func *g = nb_ir_find_func(m, primal->decl->u.func.fwd_derivative);
        if (g) return g;
    }
    nb_ir_func *sub = nb_ad_primal_subst(m, primal);
    if (sub) return nb_ad_fwd_func(m, src, sub, loc);
    if (primal->derivs[0]) return primal->derivs[0];
    if (!is_differentiable(primal)) {
        nb_ad_error(src, loc, "'%s' is not differentiable (add [Differentiable])", primal->name);
        return NULL;
    }
    if (nb_ad_target_specific(src, primal, loc)) return NULL;
    nb_type_table *tt = m->types;
    const nb_type *rt = primal->ret;
    if (rt->kind != NB_TY_VOID && nb_type_is_differentiable(rt)) rt = nb_type_diffpair(tt, rt);
    char name[300];
    snprintf(name, sizeof name, "%s_fwd", primal->cname);
    nb_ir_unique_cname(m, name, sizeof name); /* (a user function may be called sq_fwd) */
    nb_ir_func *d = nb_ir_func_new(m, name, rt);
    if (!d) return NULL;
    d->role = NB_IR_FWD_DERIV;
    d->primal = primal;
    d->has_tid = primal->has_tid; /* (it reads the thread ids where the primal does) */
    primal->derivs[0] = d;
    d->decl = primal->decl; /* (diagnostics in it belong to the primal; nb_ir_find_func skips it by role) */
    d->aux = (void *)1;
    for (int i = 0; i < primal->nparams; i++) {
        nb_ir_var *p = primal->params[i];
        const nb_type *t = nb_ad_param_is_diff(p) ? nb_type_diffpair(tt, p->type)
                           : nb_ad_param_is_ptr(p) ? nb_type_ptr_pair(p->type) : p->type;
        nb_ir_var *q = nb_ir_param_new(d, p->name, t, p->dir);
        if (!q) return NULL;
        q->flags = p->flags;
    }
    return d;
}

int nb_ad_generate(nb_ir_module *m, nb_source_set *src)
{
    int errors = 0;
    for (int again = 1; again;) {
        again = 0;
        for (int i = 0; i < m->nfuncs; i++) {
            nb_ir_func *d = m->funcs[i];
            if (d->role == NB_IR_PRIMAL || d->aux != (void *)1) continue;
            d->aux = (void *)2;
            again = 1;
            if (nb_ad_treat_as_diff(d->primal) || (d->role == NB_IR_FWD_DERIV && nb_ad_fwd_trivial(d->primal)))
                errors += nb_ad_gen_trivial(m, d);
            else errors += d->role == NB_IR_FWD_DERIV ? nb_ad_gen_fwd(m, src, d) : nb_ad_gen_bwd(m, src, d);
        }
    }
    for (int i = 0; i < m->nfuncs; i++)
        if (m->funcs[i]->role != NB_IR_PRIMAL) m->funcs[i]->aux = NULL;
    return errors;
}

/* ---- cloning ----------------------------------------------------------------------------- */

nb_ir_inst *nb_ad_map(nb_ad_cloner *c, nb_ir_inst *in)
{
    if (!in) return NULL;
    nb_ir_inst *r = c->pmap[in->id];
    return r ? r : in; /* (never: operands are cloned before their uses) */
}

static nb_ir_inst *clone_one(nb_ad_cloner *c, nb_ir_inst *in)
{
    nb_ir_builder *b = &c->b;
    nb_ir_inst *o = nb_ir_new(b, in->op, in->type, in->nops);
    if (!o) return NULL;
    o->name = in->name;
    o->cv = in->cv;
    o->field = in->field;
    memcpy(o->swz, in->swz, sizeof o->swz);
    o->nswz = in->nswz;
    o->intrinsic = in->intrinsic;
    o->callee = in->callee;
    if (in->op == NB_IR_CALL && in->callee) { /* derivative code runs a [PrimalSubstitute] */
        nb_ir_func *sub = nb_ad_primal_subst(b->m, in->callee);
        if (sub) o->callee = sub;
    }
    o->global = in->global;
    o->var = in->var ? c->vmap[in->var->id] : NULL;
    o->path = in->path;
    o->npath = in->npath;
    o->cases = in->cases;
    o->max_iters = in->max_iters;
    if (in->op == NB_IR_CALL) {
        int n = in->callee->nparams;
        o->refs = nb_arena_zalloc(&b->m->arena, sizeof(nb_ir_var *) * (size_t)(n ? n : 1), sizeof(void *));
        for (int i = 0; i < n && o->refs; i++) o->refs[i] = in->refs[i] ? c->vmap[in->refs[i]->id] : NULL;
    }
    int is_loop = in->op == NB_IR_LOOP;
    for (int i = 0; i < in->nops; i++)
        if (!(is_loop && i == 0)) o->ops[i] = nb_ad_map(c, in->ops[i]);
    if (in->nblocks) {
        o->nblocks = in->nblocks;
        o->blocks = nb_arena_zalloc(&b->m->arena, sizeof(nb_ir_block *) * (size_t)in->nblocks, sizeof(void *));
        if (!o->blocks) return NULL;
        nb_ir_block *save = b->block;
        for (int k = 0; k < in->nblocks; k++) {
            o->blocks[k] = nb_ir_block_new(b->f, o);
            b->block = o->blocks[k];
            nb_ad_clone_block(c, in->blocks[k]);
        }
        b->block = save;
        if (is_loop && in->ops[0]) o->ops[0] = nb_ad_map(c, in->ops[0]);
    }
    return o;
}

void nb_ad_clone_block(nb_ad_cloner *c, nb_ir_block *src)
{
    for (nb_ir_inst *in = src->first; in; in = in->next) {
        nb_loc sl = c->b.loc;
        unsigned sf = c->b.flags;
        c->b.loc = in->loc;
        c->b.flags = in->flags | NB_IRF_DERIV;
        if (!(c->pre && c->pre(c, in))) {
            nb_ir_inst *o = clone_one(c, in);
            c->pmap[in->id] = o;
            if (o && c->post) c->post(c, in, o);
        }
        c->b.loc = sl;
        c->b.flags = sf;
    }
}

/* ---- forward mode ------------------------------------------------------------------------ */

typedef struct fwd {
    nb_ad_cloner cl;
    nb_ir_module *m;
    nb_type_table *tt;
    nb_source_set *src;
    nb_ir_func *pf, *df;
    nb_ir_inst **tmap;   /* primal inst id -> tangent */
    nb_ir_var **tvmap;   /* primal var id -> tangent var */
    nb_ir_var **pvar;    /* primal param index -> local primal var (differentiable params) */
    nb_ir_var **pairv;   /* primal var id -> DifferentialPtrPair parameter (pointer-type params) */
    int errors;
} fwd;

static nb_ir_inst *T(fwd *F, nb_ir_inst *in) { return in ? F->tmap[in->id] : NULL; }

static nb_ir_inst *zero_or(fwd *F, nb_ir_inst *t, const nb_type *ty)
{
    if (t) return t;
    const nb_type *d = nb_ad_dtype(F->tt, ty);
    return nb_ir_zero(&F->cl.b, d ? d : ty);
}

/* write back out/inout pairs, then return */
static void fwd_exit(fwd *F, nb_ir_inst *ret, nb_ir_inst *retd)
{
    nb_ir_builder *b = &F->cl.b;
    for (int i = 0; i < F->pf->nparams; i++) {
        nb_ir_var *p = F->pf->params[i];
        if (!F->pvar[i] || p->dir == NB_DIR_IN) continue;
        nb_ir_inst *ops[2] = {nb_ir_load(b, F->pvar[i], NULL, 0, NULL), NULL};
        ops[1] = F->tvmap[p->id] ? nb_ir_load(b, F->tvmap[p->id], NULL, 0, NULL) : zero_or(F, NULL, p->type);
        nb_ir_store(b, F->df->params[i], NULL, 0, NULL, nb_ir_construct(b, F->df->params[i]->type, ops, 2));
    }
    if (!ret) {
        nb_ir_jump(b, NB_IR_RETURN, NULL);
        return;
    }
    if (F->df->ret->kind == NB_TY_DIFFPAIR && ret->type != F->df->ret) {
        nb_ir_inst *ops[2] = {ret, zero_or(F, retd, ret->type)};
        ret = nb_ir_construct(b, F->df->ret, ops, 2);
    }
    nb_ir_jump(b, NB_IR_RETURN, ret);
}

/* A call: the callee's forward derivative when a tangent flows in, else the primal call. */
static int fwd_call(fwd *F, nb_ir_inst *in)
{
    nb_ir_builder *b = &F->cl.b;
    nb_ir_func *cf = in->callee;
    int n = cf->nparams, active = 0;
    for (int i = 0; i < n; i++) {
        if (!nb_ad_param_is_diff(cf->params[i])) continue;
        if (in->refs[i] ? F->tvmap[in->refs[i]->id] != NULL : T(F, in->ops[i]) != NULL) active = 1;
    }
    for (int i = 0; i < n; i++) /* a pointer-type argument: its derivative pointer flows in */
        if (nb_ad_param_is_ptr(cf->params[i])) active = 1;
    if (in->flags & NB_IRF_NO_DIFF) active = 0;
    int diff_out = nb_type_is_differentiable(cf->ret);
    for (int i = 0; i < n; i++)
        if (in->refs[i] && nb_ad_param_is_diff(cf->params[i])) diff_out = 1;
    if (active && !is_differentiable(cf)) {
        if (diff_out) {
            nb_ad_error(F->src, in->loc,
                        "cannot differentiate through '%s': it is not [Differentiable] (mark it, or wrap the call "
                        "in no_diff(…) / detach(…))",
                        cf->name);
            F->errors++;
        }
        active = 0;
    }
    if (!active) {
        nb_ir_inst *o = clone_one(&F->cl, in);
        F->cl.pmap[in->id] = o;
        for (int i = 0; i < n; i++) { /* a by-reference argument was overwritten: no tangent now */
            nb_ir_var *tv = in->refs[i] ? F->tvmap[in->refs[i]->id] : NULL;
            if (tv && cf->params[i]->dir != NB_DIR_IN) nb_ir_store(b, tv, NULL, 0, NULL, nb_ir_zero(b, tv->type));
        }
        return 1;
    }
    nb_ir_func *df = nb_ad_fwd_func(F->m, F->src, cf, in->loc);
    if (!df) {
        F->errors++;
        F->cl.pmap[in->id] = clone_one(&F->cl, in);
        return 1;
    }
    nb_ir_inst **args = nb_arena_zalloc(&F->m->arena, sizeof *args * (size_t)(n ? n : 1), sizeof(void *));
    nb_ir_var **refs = nb_arena_zalloc(&F->m->arena, sizeof *refs * (size_t)(n ? n : 1), sizeof(void *));
    nb_ir_var **tmps = nb_arena_zalloc(&F->m->arena, sizeof *tmps * (size_t)(n ? n : 1), sizeof(void *));
    if (!args || !refs || !tmps) return 1;
    for (int i = 0; i < n; i++) {
        nb_ir_var *p = cf->params[i];
        int d = nb_ad_param_is_diff(p);
        if (nb_ad_param_is_ptr(p)) {
            nb_ir_inst *a = nb_ad_ptr_arg(b, F->src, F->pairv, in, i);
            if (!a) {
                F->errors++;
                return 1;
            }
            if (!in->refs[i]) args[i] = a;
            else { /* (an inout pointer: a copy of the pair) */
                nb_ir_var *tmp = nb_ir_var_new(F->df, p->name, df->params[i]->type);
                if (!tmp) return 1;
                tmp->is_temp = 1;
                nb_ir_store(b, tmp, NULL, 0, NULL, a);
                refs[i] = tmp;
            }
            continue;
        }
        if (!in->refs[i]) {
            nb_ir_inst *a = nb_ad_map(&F->cl, in->ops[i]);
            if (d) {
                nb_ir_inst *ops[2] = {a, zero_or(F, T(F, in->ops[i]), p->type)};
                a = nb_ir_construct(b, df->params[i]->type, ops, 2);
            }
            args[i] = a;
            continue;
        }
        nb_ir_var *rv = F->cl.vmap[in->refs[i]->id];
        if (!d) {
            refs[i] = rv;
            continue;
        }
        nb_ir_var *tmp = nb_ir_var_new(F->df, p->name, df->params[i]->type);
        if (!tmp) return 1;
        tmp->is_temp = 1;
        tmps[i] = tmp;
        refs[i] = tmp;
        if (p->dir == NB_DIR_INOUT) {
            nb_ir_var *tv = F->tvmap[in->refs[i]->id];
            nb_ir_inst *ops[2] = {nb_ir_load(b, rv, NULL, 0, NULL),
                                  tv ? nb_ir_load(b, tv, NULL, 0, NULL) : zero_or(F, NULL, p->type)};
            nb_ir_store(b, tmp, NULL, 0, NULL, nb_ir_construct(b, tmp->type, ops, 2));
        }
    }
    nb_ir_inst *call = nb_ir_call(b, df, args, refs);
    for (int i = 0; i < n; i++) {
        if (!tmps[i]) continue;
        nb_ir_inst *pr = nb_ir_load(b, tmps[i], NULL, 0, NULL);
        nb_ir_store(b, F->cl.vmap[in->refs[i]->id], NULL, 0, NULL, nb_ir_extract(b, pr, 0));
        nb_ir_var *tv = F->tvmap[in->refs[i]->id];
        if (tv) nb_ir_store(b, tv, NULL, 0, NULL, nb_ir_extract(b, pr, 1));
    }
    if (df->ret->kind == NB_TY_DIFFPAIR && cf->ret != df->ret) {
        F->cl.pmap[in->id] = nb_ir_extract(b, call, 0);
        F->tmap[in->id] = nb_ir_extract(b, call, 1);
    } else {
        F->cl.pmap[in->id] = call;
    }
    return 1;
}

static int fwd_pre(nb_ad_cloner *c, nb_ir_inst *in)
{
    fwd *F = c->ud;
    if (in->op == NB_IR_RETURN) {
        nb_ir_inst *v = in->nops ? nb_ad_map(c, in->ops[0]) : NULL;
        fwd_exit(F, v, in->nops ? T(F, in->ops[0]) : NULL);
        return 1;
    }
    if (in->op == NB_IR_CALL) return fwd_call(F, in);
    return 0;
}

static void fwd_post(nb_ad_cloner *c, nb_ir_inst *in, nb_ir_inst *o)
{
    fwd *F = c->ud;
    nb_ir_builder *b = &c->b;
    nb_ir_inst *t = NULL;
    nb_ir_inst **x = o->ops;
    int fl = nb_ad_dtype(F->tt, in->type) != NULL;
    if (in->flags & NB_IRF_NO_DIFF) return;
    switch (in->op) {
    case NB_IR_NEG:
        if (fl) t = nb_ad_neg(b, T(F, in->ops[0]));
        break;
    case NB_IR_ADD:
        if (fl) t = nb_ad_add(b, T(F, in->ops[0]), T(F, in->ops[1]));
        break;
    case NB_IR_SUB:
        if (fl) t = nb_ad_sub(b, T(F, in->ops[0]), T(F, in->ops[1]));
        break;
    case NB_IR_MUL:
        if (fl) t = nb_ad_add(b, nb_ad_mul(b, T(F, in->ops[0]), x[1]), nb_ad_mul(b, x[0], T(F, in->ops[1])));
        break;
    case NB_IR_DIV: /* (da - r db) / b */
        if (fl && (T(F, in->ops[0]) || T(F, in->ops[1]))) {
            nb_ir_inst *num = nb_ad_sub(b, T(F, in->ops[0]), nb_ad_mul(b, o, T(F, in->ops[1])));
            t = nb_ir_binary(b, NB_IR_DIV, num, x[1]);
        }
        break;
    case NB_IR_MOD: /* float fmod: da - trunc(a/b) db */
        if (fl && (T(F, in->ops[0]) || T(F, in->ops[1]))) {
            nb_ir_inst *q = nb_ir_binary(b, NB_IR_DIV, x[0], x[1]);
            nb_ir_inst *tq = nb_ir_intrin(b, NB_INTR_TRUNC, q->type, &q, 1);
            t = nb_ad_sub(b, T(F, in->ops[0]), nb_ad_mul(b, tq, T(F, in->ops[1])));
        }
        break;
    case NB_IR_CONVERT: case NB_IR_SPLAT:
        if (fl && T(F, in->ops[0])) t = nb_ir_convert(b, T(F, in->ops[0]), in->type);
        break;
    case NB_IR_SELECT:
        if (fl && (T(F, in->ops[1]) || T(F, in->ops[2])))
            t = nb_ir_select(b, x[0], zero_or(F, T(F, in->ops[1]), in->type), zero_or(F, T(F, in->ops[2]), in->type));
        break;
    case NB_IR_CONSTRUCT: {
        int any = 0;
        for (int i = 0; i < in->nops; i++) any |= T(F, in->ops[i]) != NULL;
        if (!fl || !any) break;
        const nb_type *dt = nb_ad_dtype(F->tt, in->type);
        if (in->type->kind == NB_TY_STRUCT && dt != in->type) { /* its own Differential: fields by name */
            int nd = dt->kind == NB_TY_STRUCT && dt->decl ? dt->decl->u.strct.nfields : 0;
            nb_ir_inst **dops = nb_arena_alloc(&F->m->arena, sizeof *dops * (size_t)(nd ? nd : 1), sizeof(void *));
            if (!dops) break;
            for (int j = 0; j < nd; j++) dops[j] = NULL;
            for (int i = 0; i < in->nops; i++) {
                int k = nb_ad_field_map(F->tt, in->type, i);
                if (k >= 0 && k < nd) dops[k] = T(F, in->ops[i]);
            }
            for (int j = 0; j < nd; j++)
                if (!dops[j]) dops[j] = nb_ir_zero(b, dt->decl->u.strct.fields[j]->u.var.type);
            t = nb_ir_construct(b, dt, dops, nd);
            break;
        }
        nb_ir_inst **ops = nb_arena_alloc(&F->m->arena, sizeof *ops * (size_t)in->nops, sizeof(void *));
        if (!ops) break;
        for (int i = 0; i < in->nops; i++) ops[i] = zero_or(F, T(F, in->ops[i]), in->ops[i]->type);
        t = nb_ir_construct(b, dt, ops, in->nops);
        break;
    }
    case NB_IR_EXTRACT:
        if (fl && T(F, in->ops[0]))
        {
            int k = in->ops[0]->type->kind == NB_TY_STRUCT ? nb_ad_field_map(F->tt, in->ops[0]->type, in->field) : in->field;
            if (in->nops > 1) t = nb_ir_extract_dyn(b, T(F, in->ops[0]), x[1]);
            else if (k >= 0) t = nb_ir_extract(b, T(F, in->ops[0]), k); /* (a field without a tangent: none) */
        }
        break;
    case NB_IR_SWIZZLE:
        if (fl && T(F, in->ops[0])) t = nb_ir_swizzle(b, T(F, in->ops[0]), in->swz, in->nswz);
        break;
    case NB_IR_INTRIN: {
        if (!fl || in->intrinsic == NB_INTR_DETACH) break;
        nb_ir_inst *d[8] = {0};
        int any = 0;
        for (int i = 0; i < in->nops && i < 8; i++) any |= (d[i] = T(F, in->ops[i])) != NULL;
        if (!any) break;
        if (nb_ad_jvp(b, in->intrinsic, o, x, in->nops, d, &t) < 0) {
            nb_ad_error(F->src, in->loc, "'%s' has no derivative rule", nb_intrinsic_name(in->intrinsic));
            F->errors++;
        }
        break;
    }
    case NB_IR_LOAD: {
        nb_ir_var *tv = F->tvmap[in->var->id];
        int ok;
        const nb_ir_step *tp = fl && tv ? nb_ad_tangent_path(F->m, in->var->type, in->path, in->npath, &ok) : NULL;
        if (fl && tv && ok) t = nb_ir_load(b, tv, tp, in->npath, x);
        break;
    }
    case NB_IR_TLOAD: /* a DiffTensor element's tangent is in its gradient buffer */
        if (fl && in->ops[0]->type->diff_tensor) {
            t = nb_ir_new(b, NB_IR_TLOAD, in->type, in->nops);
            if (t) {
                for (int i = 0; i < in->nops; i++) t->ops[i] = x[i];
                t->flags |= NB_IRF_TGRAD;
            }
        }
        break;
    case NB_IR_TSTORE: case NB_IR_TATOMIC_ADD: /* ... and a written value's tangent goes there */
        if (in->ops[0]->type->diff_tensor && nb_ad_dtype(F->tt, in->ops[in->nops - 1]->type)) {
            nb_ir_inst *tv = zero_or(F, T(F, in->ops[in->nops - 1]), in->ops[in->nops - 1]->type);
            nb_ir_inst *w = nb_ir_new(b, in->op, in->type, in->nops);
            if (w) {
                for (int i = 0; i + 1 < in->nops; i++) w->ops[i] = x[i];
                w->ops[in->nops - 1] = tv;
                w->flags |= NB_IRF_TGRAD;
            }
        }
        break;
    case NB_IR_STORE: {
        nb_ir_var *tv = F->tvmap[in->var->id];
        const nb_type *vt = in->ops[0]->type;
        int ok = 0;
        const nb_ir_step *tp = tv ? nb_ad_tangent_path(F->m, in->var->type, in->path, in->npath, &ok) : NULL;
        if (tv && ok && nb_ad_dtype(F->tt, vt))
            nb_ir_store(b, tv, tp, in->npath, x + 1, zero_or(F, T(F, in->ops[0]), vt));
        break;
    }
    default:
        break;
    }
    if (t && t->type != nb_ad_dtype(F->tt, in->type)) t = NULL; /* (defensive: never mistype) */
    F->tmap[in->id] = t;
}

int nb_ad_gen_fwd(nb_ir_module *m, nb_source_set *src, nb_ir_func *df)
{
    nb_ir_func *pf = df->primal;
    fwd F;
    memset(&F, 0, sizeof F);
    F.m = m;
    F.tt = m->types;
    F.src = src;
    F.pf = pf;
    F.df = df;
    size_t ni = (size_t)(pf->next_id + 1), nv = (size_t)(pf->nvars + 1);
    F.tmap = nb_arena_zalloc(&m->arena, sizeof(void *) * ni, sizeof(void *));
    F.cl.pmap = nb_arena_zalloc(&m->arena, sizeof(void *) * ni, sizeof(void *));
    F.cl.vmap = nb_arena_zalloc(&m->arena, sizeof(void *) * nv, sizeof(void *));
    F.tvmap = nb_arena_zalloc(&m->arena, sizeof(void *) * nv, sizeof(void *));
    F.pvar = nb_arena_zalloc(&m->arena, sizeof(void *) * (size_t)(pf->nparams + 1), sizeof(void *));
    F.pairv = nb_arena_zalloc(&m->arena, sizeof(void *) * nv, sizeof(void *));
    if (!F.tmap || !F.cl.pmap || !F.cl.vmap || !F.tvmap || !F.pvar || !F.pairv) return 1;
    nb_ir_builder *b = &F.cl.b;
    b->m = m;
    b->f = df;
    b->block = df->body;
    b->loc = pf->decl ? pf->decl->loc : (nb_loc){0};
    b->flags = NB_IRF_DERIV;
    F.cl.ud = &F;
    F.cl.pre = fwd_pre;
    F.cl.post = fwd_post;
    for (int i = 0; i < pf->nvars; i++) { /* params come first */
        nb_ir_var *v = pf->vars[i];
        int diff = !(v->flags & NB_IRF_NO_DIFF) && nb_ad_dtype(F.tt, v->type) != NULL;
        if (v->param >= 0) {
            nb_ir_var *q = df->params[v->param];
            if (nb_ad_param_is_ptr(v)) { /* its primal: a local copy of the pair's .p */
                nb_ir_var *lv = nb_ir_var_new(df, v->name, v->type);
                if (!lv) return 1;
                nb_ir_store(b, lv, NULL, 0, NULL, nb_ir_extract(b, nb_ir_load(b, q, NULL, 0, NULL), 0));
                F.cl.vmap[v->id] = lv;
                F.pairv[v->id] = q;
                continue;
            }
            if (!nb_ad_param_is_diff(v)) {
                F.cl.vmap[v->id] = q;
                continue;
            }
            char nm[128];
            snprintf(nm, sizeof nm, "d_%s", v->name);
            nb_ir_var *lv = nb_ir_var_new(df, v->name, v->type);
            nb_ir_var *tv = nb_ir_var_new(df, nm, nb_ad_dtype(F.tt, v->type));
            if (!lv || !tv) return 1;
            F.cl.vmap[v->id] = lv;
            F.tvmap[v->id] = tv;
            F.pvar[v->param] = lv;
            if (v->dir != NB_DIR_OUT) {
                nb_ir_inst *pr = nb_ir_load(b, q, NULL, 0, NULL);
                nb_ir_store(b, lv, NULL, 0, NULL, nb_ir_extract(b, pr, 0));
                nb_ir_store(b, tv, NULL, 0, NULL, nb_ir_extract(b, pr, 1));
            } else {
                nb_ir_store(b, lv, NULL, 0, NULL, nb_ir_zero(b, lv->type));
                nb_ir_store(b, tv, NULL, 0, NULL, nb_ir_zero(b, tv->type));
            }
            continue;
        }
        nb_ir_var *nv2 = nb_ir_var_new(df, v->name, v->type);
        if (!nv2) return 1;
        nv2->is_temp = v->is_temp;
        nv2->decl = v->decl;
        F.cl.vmap[v->id] = nv2;
        if (diff) {
            char nm[128];
            snprintf(nm, sizeof nm, "d_%s", v->name);
            nb_ir_var *tv = nb_ir_var_new(df, nm, nb_ad_dtype(F.tt, v->type));
            if (!tv) return 1;
            tv->is_temp = 1;
            F.tvmap[v->id] = tv;
            nb_ir_store(b, tv, NULL, 0, NULL, nb_ir_zero(b, tv->type));
        }
    }
    nb_ad_clone_block(&F.cl, pf->body);
    if (!nb_ir_block_terminated(df->body)) fwd_exit(&F, NULL, NULL);
    return F.errors;
}

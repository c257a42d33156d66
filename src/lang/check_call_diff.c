/* fwd_diff(f)(…) / bwd_diff(f)(…) calls (and Slang's __fwd_diff / __bwd_diff, member spellings
 * f.fwd_diff(…), derivatives of methods through a synthesized wrapper taking 'this'): the operator
 * chain is applied to the callee's candidates, then resolved as an ordinary call (check_call.c). */
#include <stdio.h>
#include <string.h>

#include "lang/check_call_internal.h"
#include "lang/check_internal.h"
#include "lang/lexer.h"
#include "nabla/alloc.h"

/* ---- fwd_diff(f)(…) / bwd_diff(f)(…) ------------------------------------------------------ */

#define CK_MAX_DIFF_ORDER 4

/* The derivative operator named `name` (NB_INTR_FWD_DIFF / NB_INTR_BWD_DIFF), else -1; Slang's
 * spellings `__fwd_diff` / `__bwd_diff` are the same operators. */
int ck_diff_name(const char *name) {
    if (name[0] == '_' && name[1] == '_') name += 2;
    if (strcmp(name, "fwd_diff") == 0) return NB_INTR_FWD_DIFF;
    if (strcmp(name, "bwd_diff") == 0) return NB_INTR_BWD_DIFF;
    return -1;
}

/* The derivative operator of e when e is `fwd_diff(X)` / `bwd_diff(X)` (NB_INTR_…), else -1. */
static int diff_op(nb_checker *c, const nb_expr *e) {
    if (!e || e->kind != NB_EX_CALL || !e->u.call.callee || e->u.call.callee->kind != NB_EX_NAME ||
        !e->u.call.callee->u.name.name || ck_lookup_local(c, e->u.call.callee->u.name.name))
        return -1;
    return ck_diff_name(e->u.call.callee->u.name.name);
}

/* The static methods named by `S.m` in fwd_diff(S.m); 0 after a diagnostic. */
static int static_methods(nb_checker *c, nb_expr *fe, const char *dname, nb_decl **out, int max) {
    nb_expr *base = fe->u.member.base;
    const char *mname = fe->u.member.member;
    const nb_type *st = NULL;
    if (base->kind == NB_EX_TYPE) st = ck_resolve_type(c, base->u.type.texpr);
    else if (base->kind == NB_EX_NAME && base->u.name.name && !ck_lookup_local(c, base->u.name.name))
        st = ck_name_as_type(c, base->u.name.name, base->loc);
    else if (base->kind == NB_EX_MEMBER) { /* fwd_diff(Lib.S.m): a struct of a namespace */
        char path[256];
        size_t n = 0;
        const nb_expr *parts[16];
        int np = 0;
        const nb_expr *e = base;
        for (; e->kind == NB_EX_MEMBER && np < 15; e = e->u.member.base) parts[np++] = e;
        if (e->kind == NB_EX_NAME && e->u.name.name && !ck_lookup_local(c, e->u.name.name)) {
            n = (size_t)snprintf(path, sizeof path, "%s", e->u.name.name);
            for (int i = np - 1; i >= 0 && n < sizeof path; i--)
                n += (size_t)snprintf(path + n, sizeof path - n, ".%s", parts[i]->u.member.member);
            if (n < sizeof path) st = ck_name_as_type(c, nb_arena_strdup(c->arena, path), base->loc);
        }
    }
    if (!st) {
        ck_err(c, fe->loc, "'%s' of a method needs the struct's name and a static method ('%s(S.m)'); for an "
               "object's method pass the object to a static method or a function", dname, dname);
        return 0;
    }
    if (ck_is_error(st)) return 0;
    if (st->kind != NB_TY_STRUCT || !st->decl) {
        ck_err(c, fe->loc, "type '%s' has no member function '%s'", st->name, mname);
        return 0;
    }
    base->ref = NB_REF_TYPE;
    base->type = st;
    nb_decl *sd = st->decl;
    int n = 0, any = 0;
    for (int i = 0; i < sd->u.strct.nmethods; i++) {
        nb_decl *m = sd->u.strct.methods[i];
        if (!m || !m->name || strcmp(m->name, mname) != 0) continue;
        any = 1;
        if ((m->mods & NB_MOD_STATIC) && n < max) out[n++] = m;
    }
    if (!n)
        ck_err(c, fe->loc, any ? "'%s' of the non-static method '%s.%s' is not supported (make it static with the "
                                 "object as a parameter)"
                               : "'%s': no member function named '%s' in '%s'",
               dname, any ? sd->name : mname, any ? mname : sd->name);
    return n;
}

/* Whether `base` in fwd_diff(base.m) is a value (a local, a field, a call…), not a type or a
 * namespace. */
static int is_value_base(nb_checker *c, const nb_expr *base) {
    while (base->kind == NB_EX_MEMBER && base->u.member.base) base = base->u.member.base; /* h.s.m: h */
    if (base->kind == NB_EX_NAME && base->u.name.name)
        return ck_lookup_local(c, base->u.name.name) != NULL || !strcmp(base->u.name.name, "this");
    return base->kind == NB_EX_INDEX || base->kind == NB_EX_CALL;
}

/* fwd_diff(obj.m)(args) with m an instance method of a struct without a Differential (an
 * interface value of a non-differentiable interface, a plain struct): a synthesized
 *     [Differentiable] R __diff_this_S_m(no_diff S self, P… p) { return self.m(p…); }
 * (one per S.m), and obj becomes the call's first argument. A differentiable `this` is refused:
 * Slang gives it a pair, which this spelling has no place for. */
static nb_decl *this_wrapper(nb_checker *c, nb_expr *call, nb_expr *fe, const char *dname) {
    nb_expr *base = fe->u.member.base;
    const char *mname = fe->u.member.member;
    const nb_type *st = ck_expr(c, &fe->u.member.base);
    base = fe->u.member.base;
    if (ck_is_error(st)) return NULL;
    nb_decl *sd = st->kind == NB_TY_STRUCT ? st->decl : NULL;
    nb_decl *m = NULL;
    for (int i = 0; sd && i < sd->u.strct.nmethods; i++)
        if (sd->u.strct.methods[i] && sd->u.strct.methods[i]->name && !strcmp(sd->u.strct.methods[i]->name, mname)) {
            if (m) {
                ck_err(c, fe->loc, "'%s(%s.%s)': '%s' has several overloads named '%s'", dname, "obj", mname, st->name, mname);
                return NULL;
            }
            m = sd->u.strct.methods[i];
        }
    if (!m) {
        ck_err(c, fe->loc, "'%s': no member function named '%s' in '%s'", dname, mname, st->name);
        return NULL;
    }
    if (call->u.call.arg_names || call->u.call.nargs + 1 > CK_MAX_PARAMS) {
        ck_err(c, call->loc, "'%s(obj.%s)(…)' takes positional arguments only", dname, mname);
        return NULL;
    }
    ck_check_func_sig(c, m);
    if (m->mods & NB_MOD_STATIC) return m; /* obj.m of a static method: S.m itself, obj unused */
    if (nb_type_differential(c->tt, st) || m->u.func.is_mutating) {
        ck_err(c, fe->loc, "'%s(obj.%s)' of a %s is not supported: make '%s' static with the object as a "
               "parameter", dname, mname, m->u.func.is_mutating ? "[mutating] method" : "differentiable struct's method", mname);
        return NULL;
    }
    char nm[300];
    snprintf(nm, sizeof nm, "__diff_this_%s_%s", st->name, mname);
    for (char *q = nm; *q; q++)
        if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9'))) *q = '_';
    nb_decl *w = NULL;
    for (int i = 0; i < c->mod->ndecls && !w; i++)
        if (c->mod->decls[i] && c->mod->decls[i]->kind == NB_DECL_FUNC && c->mod->decls[i]->name &&
            !strcmp(c->mod->decls[i]->name, nm))
            w = c->mod->decls[i];
    if (!w) {
        nb_loc loc = m->loc;
        int np = m->u.func.nparams;
        w = ck_alloc(c, sizeof *w);
        nb_decl **ps = ck_alloc(c, sizeof(nb_decl *) * (size_t)(np + 1));
        nb_expr **args = ck_alloc(c, sizeof(nb_expr *) * (size_t)(np ? np : 1));
        nb_attr *at = ck_alloc(c, sizeof *at);
        nb_expr *inner = ck_new_expr(c, NB_EX_CALL, loc);
        nb_stmt *blk = ck_syn_stmt(c, NB_ST_BLOCK, loc);
        nb_stmt **items = ck_alloc(c, sizeof(nb_stmt *) * 2);
        if (!w || !ps || !args || !at || !inner || !blk || !items) return NULL;
        w->kind = NB_DECL_FUNC;
        w->loc = loc;
        w->name = nb_arena_strdup(c->arena, nm);
        w->module = c->mod;
        at->loc = loc;
        at->name = "Differentiable";
        w->attrs.items = at;
        w->attrs.count = 1;
        const nb_type *rt = m->u.func.ret && m->u.func.ret->resolved ? m->u.func.ret->resolved : c->tt->t_void;
        w->u.func.ret = ck_syn_type(c, rt, loc);
        for (int i = 0; i <= np; i++) {
            nb_decl *src = i ? m->u.func.params[i - 1] : NULL;
            nb_decl *p = ck_alloc(c, sizeof *p);
            if (!p) return NULL;
            p->kind = NB_DECL_PARAM;
            p->loc = loc;
            p->module = c->mod;
            p->name = i ? src->name : "__self";
            p->mods = i ? src->mods : NB_MOD_NO_DIFF;
            p->u.param.texpr = ck_syn_type(c, i ? (src->u.param.type ? src->u.param.type : c->tt->t_error) : st, loc);
            p->u.param.dir = i ? src->u.param.dir : NB_DIR_IN;
            p->u.param.index = i;
            ps[i] = p;
            if (i) args[i - 1] = ck_syn_name(c, src->name, loc);
        }
        w->u.func.params = ps;
        w->u.func.nparams = np + 1;
        inner->type = NULL;
        inner->u.call.callee = ck_syn_member(c, ck_syn_name(c, "__self", loc), mname, loc);
        inner->u.call.args = args;
        inner->u.call.nargs = np;
        nb_stmt *ret = ck_syn_stmt(c, NB_ST_RETURN, loc);
        if (!ret) return NULL;
        int n = 0;
        if (rt->kind == NB_TY_VOID) {
            nb_stmt *ex = ck_syn_stmt(c, NB_ST_EXPR, loc);
            if (!ex) return NULL;
            ex->u.expr.expr = inner;
            items[n++] = ex;
        } else {
            ret->u.ret.value = inner;
        }
        items[n++] = ret;
        blk->u.block.items = items;
        blk->u.block.count = n;
        w->u.func.body = blk;
        if (!ck_append_decl(c, w)) return NULL;
    }
    /* obj becomes the first argument (already checked: only converted from here on) */
    nb_expr **na = ck_alloc(c, sizeof(nb_expr *) * (size_t)(call->u.call.nargs + 1));
    if (!na) return NULL;
    base->pretyped = 1;
    na[0] = base;
    for (int i = 0; i < call->u.call.nargs; i++) na[i + 1] = call->u.call.args[i];
    call->u.call.args = na;
    call->u.call.nargs++;
    return w;
}

/* fwd_diff(f)(…), bwd_diff(f)(…) and higher orders: fwd_diff(fwd_diff(f))(…) (pairs of pairs),
 * fwd_diff(bwd_diff(f))(…) (Hessian-vector products), bwd_diff(fwd_diff(f))(…) (reverse over
 * forward), bwd_diff(bwd_diff(f))(…). The inner operators are typed like the outer one (ref NB_REF_INTRINSIC, index). */
const nb_type *ck_call_diff(nb_checker *c, nb_expr *call, nb_expr *inner, int id) {
    const char *dname = inner->u.call.callee->u.name.name; /* as spelled: fwd_diff or __fwd_diff */
    inner->ref = NB_REF_INTRINSIC;
    inner->index = id;
    inner->type = c->tt->t_error;
    call->ref = NB_REF_INTRINSIC;
    call->index = id;
    ck_check_args_defer(c, call);
    /* the operators, outermost first: fwd_diff(bwd_diff(f)) -> {fwd, bwd} */
    nb_expr *ops[CK_MAX_DIFF_ORDER];
    int ids[CK_MAX_DIFF_ORDER], nops = 0;
    ops[nops] = inner;
    ids[nops++] = id;
    nb_expr *fe = NULL;
    for (;;) {
        nb_expr *op = ops[nops - 1];
        const char *on = ids[nops - 1] == NB_INTR_FWD_DIFF ? "fwd_diff" : "bwd_diff";
        if (op->u.call.nargs != 1 || !op->u.call.args[0]) {
            ck_err(c, op->loc, "'%s' takes one function name", on);
            return call->type = c->tt->t_error;
        }
        nb_expr *arg = op->u.call.args[0];
        if (arg->kind == NB_EX_MEMBER) ck_namespace_member(c, arg, NB_DECL_FUNC); /* fwd_diff(N.f) */
        int k = diff_op(c, arg);
        if (k < 0) {
            fe = arg;
            break;
        }
        if (nops == CK_MAX_DIFF_ORDER) {
            ck_err(c, arg->loc, "derivatives of order above %d are not supported", CK_MAX_DIFF_ORDER);
            return call->type = c->tt->t_error;
        }
        arg->ref = NB_REF_INTRINSIC;
        arg->index = k;
        arg->type = c->tt->t_error;
        ops[nops] = arg;
        ids[nops++] = k;
    }
    nb_type_expr *explicit_te = NULL; /* fwd_diff(sqr<float>): an explicit instantiation */
    if (fe->kind == NB_EX_TYPE && fe->u.type.texpr && fe->u.type.texpr->ntargs > 0 &&
        fe->u.type.texpr->narray_dims == 0) {
        explicit_te = fe->u.type.texpr;
        const char *tn = explicit_te->name;
        fe->kind = NB_EX_NAME;
        memset(&fe->u, 0, sizeof fe->u);
        fe->u.name.name = tn;
    }
    nb_decl *fns[CK_MAX_CANDS];
    int nf = 0;
    if (fe->kind == NB_EX_MEMBER && fe->u.member.base && fe->u.member.member && nops == 1 &&
        is_value_base(c, fe->u.member.base)) {
        /* fwd_diff(obj.m)(args): fwd_diff(wrapper)(obj, args), the wrapper taking `this` no_diff */
        nb_decl *w = this_wrapper(c, call, fe, dname);
        if (!w) return call->type = c->tt->t_error;
        fns[nf++] = w;
        fe->kind = NB_EX_NAME;
        memset(&fe->u, 0, sizeof fe->u);
        fe->u.name.name = w->name;
    } else if (fe->kind == NB_EX_MEMBER && fe->u.member.base && fe->u.member.member) {
        /* fwd_diff(S.m) / fwd_diff(S::m): a static method */
        nf = static_methods(c, fe, dname, fns, CK_MAX_CANDS);
        if (nf <= 0) return call->type = c->tt->t_error;
        fe->kind = NB_EX_NAME; /* (lowered through its decl, like a function name) */
        const char *mn = fe->u.member.member;
        memset(&fe->u, 0, sizeof fe->u);
        fe->u.name.name = mn;
    } else if (fe->kind != NB_EX_NAME || !fe->u.name.name) {
        ck_err(c, fe->loc, "'%s' needs the name of a function", dname);
        return call->type = c->tt->t_error;
    }
    const char *fname = fe->u.name.name;
    if (!nf) nf = ck_lookup_global(c, fname, NB_DECL_FUNC, fns, CK_MAX_CANDS);
    if (nf > CK_MAX_CANDS) nf = CK_MAX_CANDS;
    if (nf == 0 && !ck_lookup_local(c, fname) && nb_intrinsic_lookup(fname) >= 0 && !explicit_te) {
        /* fwd_diff(sin): a wrapper function of the built-in for these argument types */
        fns[0] = ck_builtin_diff_wrapper(c, fname, call, ids, nops, dname, fe->loc);
        if (!fns[0]) return call->type = c->tt->t_error;
        nf = 1;
    }
    if (nf == 0 && !ck_lookup_local(c, fname) && !strcmp(fname, "sincos") && !explicit_te) {
        fns[0] = ck_sincos_diff_wrapper(c, call, ids, nops, dname, fe->loc); /* (check_diff_builtin.c) */
        if (!fns[0]) return call->type = c->tt->t_error;
        nf = 1;
    }
    if (nf == 0) {
        if (ck_lookup_local(c, fname) || nb_intrinsic_lookup(fname) >= 0)
            ck_err(c, fe->loc, "'%s' needs a user function; '%s' is not one", dname, fname);
        else {
            ck_err(c, fe->loc, "use of undeclared function '%s'", fname);
            ck_note_hidden(c, fname);
        }
        return call->type = c->tt->t_error;
    }
    int ntmpl = 0;
    for (int i = 0; i < nf; i++) ntmpl += ck_is_template(fns[i]);
    if (ntmpl || explicit_te) {
        /* generic: instantiate from the written arguments, else infer from the primal types of
         * the derivative's arguments (a DifferentialPair<T> argument stands for a T) */
        nb_expr fake = *call;
        int na = call->u.call.nargs;
        nb_expr *fargs_store[CK_MAX_PARAMS], fvals[CK_MAX_PARAMS];
        for (int a = 0; a < na && a < CK_MAX_PARAMS; a++) {
            fvals[a] = *call->u.call.args[a];
            const nb_type *at = fvals[a].type;
            if (at && at->kind == NB_TY_DIFFPAIR) fvals[a].type = at->elem;
            else if (at && at->kind == NB_TY_STRUCT && at->decl && at->decl->u.strct.is_ptr_pair)
                fvals[a].type = at->decl->u.strct.fields[0]->u.var.type; /* DifferentialPtrPair<P>: a P */
            fargs_store[a] = &fvals[a];
        }
        fake.u.call.args = fargs_store;
        fake.u.call.nargs = explicit_te ? 0 : na;
        fake.u.call.arg_names = explicit_te ? NULL : call->u.call.arg_names;
        nf = ck_generic_candidates(c, &fake, fns, nf, explicit_te, fname);
        if (nf <= 0) return call->type = c->tt->t_error;
    }
    int w = nf;
    nf = w;
    int any_diff = 0;
    for (int i = 0; i < nf; i++) {
        ck_check_func_sig(c, fns[i]);
        if (fns[i]->u.func.differentiable) any_diff = 1;
    }
    if (!any_diff) {
        ck_err(c, fe->loc, "'%s' is not differentiable (add [Differentiable])", fname);
        ck_note(c, fns[0]->loc, "'%s' declared here", fname);
        return call->type = c->tt->t_error;
    }
    ck_cand *cands = nb_alloc(sizeof(ck_cand) * (size_t)nf, 16);
    if (!cands) return call->type = c->tt->t_error;
    int modes[CK_MAX_DIFF_ORDER];
    for (int i = 0; i < nops; i++) modes[i] = ids[nops - 1 - i] == NB_INTR_FWD_DIFF ? 1 : 2;
    int nc = 0;
    for (int i = 0; i < nf; i++)
        if (fns[i]->u.func.differentiable) ck_cand_from_decl(c, &cands[nc++], fns[i], modes, nops);
    char display[160];
    int dl = 0;
    for (int i = 0; i < nops && dl < 100; i++)
        dl += snprintf(display + dl, sizeof display - (size_t)dl, "%s(", ids[i] == NB_INTR_FWD_DIFF ? "fwd_diff" : "bwd_diff");
    if (dl < 100) dl += snprintf(display + dl, sizeof display - (size_t)dl, "%.40s", fname);
    for (int i = 0; i < nops && dl < (int)sizeof display - 1; i++) display[dl++] = ')';
    display[dl] = 0;
    int k = ck_resolve_cands(c, call, display, cands, nc);
    if (k < 0) {
        ck_fail_pending(c, call);
        nb_free(cands, sizeof(ck_cand) * (size_t)nf);
        return call->type = c->tt->t_error;
    }
    nb_decl *fn = cands[k].decl;
    const nb_type *r = cands[k].dret;
    ck_apply_args(c, call, &cands[k], display);
    nb_free(cands, sizeof(ck_cand) * (size_t)nf);
    call->decl = fn;
    fe->ref = NB_REF_FUNCTION;
    fe->decl = fn;
    fe->type = nb_type_func(c->tt, fn);
    for (int i = 0; i < nops; i++) {
        ops[i]->type = fe->type;
        ops[i]->decl = fn;
    }
    ck_add_edge(c, fn, call->loc);
    return call->type = r ? r : c->tt->t_error;
}

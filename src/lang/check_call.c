/* Call checking: overload resolution, user functions, methods, constructors, intrinsics and
 * fwd_diff / bwd_diff (conventions in check.h and intrinsics.h). Intrinsic calls are in
 * check_call_intrin.c. */
#include <stdio.h>
#include <string.h>

#include "lang/check_call_internal.h"
#include "lang/check_internal.h"
#include "lang/lexer.h"
#include "nabla/alloc.h"


int ck_is_float_kind(nb_scalar_kind s) {
    return s == NB_SC_HALF || s == NB_SC_FLOAT || s == NB_SC_DOUBLE;
}

int ck_is_value_shape(const nb_type *t) {
    return t && (t->kind == NB_TY_SCALAR || t->kind == NB_TY_VECTOR || t->kind == NB_TY_MATRIX);
}

/* An initializer-list argument not checked yet: it takes its type from the parameter it is
 * passed to (`f({1.0, 2.0})`, `DifferentialPair<S>({p, q}, {dp, dq})`), once the overload is
 * chosen (check_args_defer, apply_args). */
int ck_is_pending_list(const nb_expr *e) { return e && e->kind == NB_EX_INIT_LIST && !e->type; }

/* Types an initializer list can stand for. */
static int list_param_ok(const nb_type *t) {
    return t && (t->kind == NB_TY_STRUCT || t->kind == NB_TY_ARRAY || t->kind == NB_TY_VECTOR ||
                 t->kind == NB_TY_MATRIX || t->kind == NB_TY_DIFFPAIR || t->kind == NB_TY_SCALAR);
}

/* An argument converted to a parameter type: a pending list is checked as that type. */
static void arg_to(nb_checker *c, nb_expr **slot, const nb_type *t, const char *what) {
    if (ck_is_pending_list(*slot)) ck_expr_to(c, slot, t, what);
    else ck_coerce(c, slot, t, what);
}

/* "f(float3, int)" */
void ck_describe_call(const char *name, nb_expr **args, int nargs, nb_strbuf *sb) {
    nb_strbuf_printf(sb, "%s(", name);
    for (int i = 0; i < nargs; i++) {
        if (i) nb_strbuf_append(sb, ", ");
        if (ck_is_pending_list(args[i])) nb_strbuf_append(sb, "{…}");
        else nb_strbuf_append(sb, args[i] && args[i]->type ? args[i]->type->name : "?");
    }
    nb_strbuf_append(sb, ")");
}

static int param_is_diff(nb_decl *p) {
    return p && !(p->mods & NB_MOD_NO_DIFF) && p->u.param.type &&
           nb_type_is_differentiable(p->u.param.type);
}

/* Fills cand's params from a function decl: plain (nmodes 0), or the signature of a derivative,
 * modes[0] applied first (1 fwd_diff, 2 bwd_diff): fwd_diff(bwd_diff(f)) is modes {2, 1}. A
 * parameter of a derivative is differentiable exactly as in the IR (lang/ad.h): not no_diff and
 * of a differentiable type. k->dret: the derivative's result type. */
void ck_cand_from_decl(nb_checker *c, ck_cand *k, nb_decl *fn, const int *modes, int nmodes) {
    ck_check_func_sig(c, fn);
    k->decl = fn;
    k->nparams = 0;
    k->cost = 0;
    int diff[CK_MAX_PARAMS];
    for (int i = 0; i < fn->u.func.nparams && k->nparams < CK_MAX_PARAMS; i++) {
        nb_decl *p = fn->u.func.params[i];
        ck_param *q = &k->params[k->nparams];
        q->type = p->u.param.type ? p->u.param.type : c->tt->t_error;
        q->dir = p->u.param.dir;
        q->defval = nmodes == 0 ? p->u.param.default_value : NULL;
        q->name = p->name;
        diff[k->nparams++] = param_is_diff(p);
    }
    const nb_type *r = fn->u.func.ret ? fn->u.func.ret->resolved : c->tt->t_void;
    if (!r) r = c->tt->t_error;
    for (int m = 0; m < nmodes; m++) {
        int rdiff = r->kind != NB_TY_VOID && r->kind != NB_TY_ERROR && nb_type_is_differentiable(r);
        /* a pointer-type parameter (IDifferentiablePtrType) takes its DifferentialPtrPair in both
         * modes, an `in` parameter in reverse mode (the pair is not accumulated: lang/ad.h) */
        for (int i = 0; i < k->nparams; i++)
            if (!diff[i] && k->params[i].dir != NB_DIR_OUT && ck_ptr_pair_type(c, k->params[i].type) && !(m == 0 && (fn->u.func.params[i]->mods & NB_MOD_NO_DIFF))) {
                k->params[i].type = ck_ptr_pair_type(c, k->params[i].type);
                if (modes[m] == 2) k->params[i].dir = NB_DIR_IN;
            }
        if (modes[m] == 1) {
            for (int i = 0; i < k->nparams; i++)
                if (diff[i]) k->params[i].type = nb_type_diffpair(c->tt, k->params[i].type);
            if (rdiff) r = nb_type_diffpair(c->tt, r);
            continue;
        }
        int n = 0;
        for (int i = 0; i < k->nparams; i++) {
            ck_param q = k->params[i];
            int d = diff[i];
            if (d && q.dir == NB_DIR_OUT) {
                const nb_type *dt = nb_type_differential(c->tt, q.type);
                q.type = dt ? dt : c->tt->t_error;
                q.dir = NB_DIR_IN;
            } else if (d) {
                q.type = nb_type_diffpair(c->tt, q.type);
                q.dir = NB_DIR_INOUT;
            } else if (q.dir == NB_DIR_OUT) {
                continue; /* non-differentiable out: no argument */
            } else {
                q.dir = NB_DIR_IN; /* non-differentiable inout: its value going in (Slang) */
            }
            k->params[n] = q;
            diff[n++] = d;
        }
        k->nparams = n;
        if (rdiff && k->nparams < CK_MAX_PARAMS) {
            const nb_type *dt = nb_type_differential(c->tt, r);
            ck_param *q = &k->params[k->nparams];
            q->type = dt ? dt : c->tt->t_error;
            q->dir = NB_DIR_IN;
            q->defval = NULL;
            q->name = "_result_grad";
            diff[k->nparams++] = 1;
        }
        r = c->tt->t_void;
    }
    k->dret = r;
}

/* Maps the call's args onto k's params and computes the cost; -1 if not viable. */
static int cand_cost(ck_cand *k, nb_expr **args, const char **names, int nargs) {
    for (int i = 0; i < k->nparams; i++) k->map[i] = -1;
    if (nargs > k->nparams) return -1;
    int named = 0;
    for (int a = 0; a < nargs; a++) {
        int pi = a;
        if (names && names[a]) {
            named = 1;
            pi = -1;
            for (int i = 0; i < k->nparams; i++)
                if (k->params[i].name && strcmp(k->params[i].name, names[a]) == 0) pi = i;
            if (pi < 0) return -1;
        } else if (named) {
            return -1; /* positional after named */
        }
        if (k->map[pi] >= 0) return -1;
        k->map[pi] = a;
    }
    int cost = 0;
    for (int i = 0; i < k->nparams; i++) {
        if (k->map[i] < 0) {
            if (!k->params[i].defval) return -1;
            continue;
        }
        const nb_type *at = args[k->map[i]]->type;
        const nb_type *pt = k->params[i].type;
        if (ck_is_pending_list(args[k->map[i]])) { /* `{…}`: any aggregate IN parameter, checked later */
            if (k->params[i].dir != NB_DIR_IN || !list_param_ok(pt)) return -1;
            cost += 1;
            continue;
        }
        if (k->params[i].dir != NB_DIR_IN) {
            if (at != pt && !ck_is_error(at) && !ck_is_error(pt)) return -1;
            continue;
        }
        int cc = nb_check_conversion_cost(at, pt);
        if (cc < 0) return -1;
        cost += cc;
    }
    return cost;
}

/* The cost of a pending list `{…}` initializing t (the sum of its items' conversion costs), -1
 * if it cannot, by ck_init_list's rules (array: as many items
 * as elements; struct without __init: at most one per field; scalar: one; vector/matrix: one
 * scalar per component, or one row vector per row), each typed item converting to the slot it
 * fills, nested lists recursively. Items not typed yet cost 0; a struct with constructors or a
 * DifferentialPair costs 0 (its own call decides). */
static int list_cost(nb_checker *c, const nb_expr *e, const nb_type *t) {
    int n = e->u.init_list.nitems, cost = 0;
    if (!t || ck_is_error(t) || n == 0) return 0;
    for (int i = 0; i < n; i++) {
        const nb_type *el = NULL;
        switch (t->kind) {
        case NB_TY_ARRAY:
            if (n != t->length) return -1;
            el = t->elem;
            break;
        case NB_TY_STRUCT:
            ck_struct_type(c, t->decl);
            if (ck_has_method(t->decl, "__init")) return 0;
            if (n > t->decl->u.strct.nfields) return -1;
            el = t->decl->u.strct.fields[i]->u.var.type;
            break;
        case NB_TY_SCALAR:
            if (n != 1) return -1;
            el = t;
            break;
        case NB_TY_VECTOR:
        case NB_TY_MATRIX:
            if (t->kind == NB_TY_MATRIX && n == t->rows) el = nb_type_vector(c->tt, t->scalar, t->cols);
            else if (n == nb_type_components(t)) el = nb_type_scalar(c->tt, t->scalar);
            else return -1;
            break;
        case NB_TY_DIFFPAIR: return 0;
        default: return -1;
        }
        const nb_expr *it = e->u.init_list.items[i];
        int k = 0;
        if (it->kind == NB_EX_INIT_LIST) k = list_cost(c, it, el);
        else if (it->type && el && !ck_is_error(it->type)) k = nb_check_conversion_cost(it->type, el);
        if (k < 0) return -1;
        cost += k;
    }
    return cost;
}

/* Types the items of a pending list (not nested lists): they do not depend on the parameter
 * (Slang checks them before choosing an overload); ck_expr_to does not check them again. */
static void type_list_items(nb_checker *c, nb_expr *e) {
    for (int i = 0; i < e->u.init_list.nitems; i++) {
        nb_expr **it = &e->u.init_list.items[i];
        if ((*it)->kind == NB_EX_INIT_LIST) type_list_items(c, *it);
        else if (!(*it)->pretyped) {
            ck_expr(c, it);
            (*it)->pretyped = 1;
        }
    }
}

/* Overloads tied on cost where an argument is `{…}` (`f({a, b})` with f(float2) and f(AABB)):
 * the items are typed; candidates whose parameter the list cannot initialize drop out (Slang
 * coerces the list to each parameter type), the others add the items' conversion costs
 * (`{s, s}` is a float2 rather than a struct of two float2 filled by splats). A candidate's parameter that is a struct with
 * constructors keeps the tie (its constructor call would check the items again). */
static void untie_lists(nb_checker *c, nb_expr **args, ck_cand *cands, int ncands, int best) {
    int base = cands[best].cost;
    for (int i = 0; i < ncands; i++) {
        if (cands[i].cost != base) continue;
        for (int p = 0; p < cands[i].nparams; p++) {
            const nb_type *pt = cands[i].params[p].type;
            if (cands[i].map[p] >= 0 && ck_is_pending_list(args[cands[i].map[p]]) && pt &&
                pt->kind == NB_TY_STRUCT && ck_has_method(pt->decl, "__init"))
                return;
        }
    }
    for (int i = 0; i < ncands; i++) {
        if (cands[i].cost != base) continue;
        for (int p = 0; p < cands[i].nparams; p++) {
            int a = cands[i].map[p];
            if (a < 0 || !ck_is_pending_list(args[a])) continue;
            type_list_items(c, args[a]);
            int k = list_cost(c, args[a], cands[i].params[p].type);
            if (k < 0) { cands[i].cost = -1; break; }
            cands[i].cost += k;
        }
    }
}

static void note_candidate(nb_checker *c, ck_cand *k) {
    ck_note(c, k->decl->loc, "candidate: %s", ck_func_sig_str(c, k->decl));
}

/* Picks the best candidate; reports errors. Returns its index or -1. */
int ck_resolve_cands(nb_checker *c, nb_expr *call, const char *display, ck_cand *cands, int ncands) {
    nb_expr **args = call->u.call.args;
    int nargs = call->u.call.nargs;
    for (int a = 0; a < nargs; a++)
        if (!ck_is_pending_list(args[a]) && ck_is_error(args[a]->type)) return -1; /* no cascade */
    int best = -1, nbest = 0;
    for (int i = 0; i < ncands; i++) {
        cands[i].cost = cand_cost(&cands[i], args, call->u.call.arg_names, nargs);
        if (cands[i].cost < 0) continue;
        if (best < 0 || cands[i].cost < cands[best].cost) { best = i; nbest = 1; }
        else if (cands[i].cost == cands[best].cost) nbest++;
    }
    if (nbest > 1) {
        int has_list = 0;
        for (int a = 0; a < nargs; a++) has_list |= ck_is_pending_list(args[a]);
        if (has_list) {
            untie_lists(c, args, cands, ncands, best);
            best = -1;
            nbest = 0;
            for (int i = 0; i < ncands; i++) {
                if (cands[i].cost < 0) continue;
                if (best < 0 || cands[i].cost < cands[best].cost) { best = i; nbest = 1; }
                else if (cands[i].cost == cands[best].cost) nbest++;
            }
        }
    }
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    ck_describe_call(display, args, nargs, &sb);
    if (best < 0) {
        ck_err(c, call->loc, "no matching function for call to '%s'", nb_strbuf_cstr(&sb));
        for (int i = 0; i < ncands; i++) note_candidate(c, &cands[i]);
        nb_strbuf_free(&sb);
        return -1;
    }
    if (nbest > 1) {
        ck_err(c, call->loc, "ambiguous call to '%s'", nb_strbuf_cstr(&sb));
        for (int i = 0; i < ncands; i++)
            if (cands[i].cost == cands[best].cost) note_candidate(c, &cands[i]);
        nb_strbuf_free(&sb);
        return -1;
    }
    nb_strbuf_free(&sb);
    return best;
}

/* Rewrites the call's args into parameter order with defaults and conversions. */
void ck_apply_args(nb_checker *c, nb_expr *call, ck_cand *k, const char *fname) {
    nb_expr **old = call->u.call.args;
    nb_expr **na = k->nparams ? ck_alloc(c, sizeof(nb_expr *) * (size_t)k->nparams) : NULL;
    if (k->nparams && !na) return;
    for (int i = 0; i < k->nparams; i++) {
        char what[160];
        snprintf(what, sizeof what, "argument %d of '%s'", i + 1, fname);
        if (k->map[i] < 0) {
            na[i] = k->params[i].defval;
            continue;
        }
        na[i] = old[k->map[i]];
        if (k->params[i].dir == NB_DIR_IN) {
            arg_to(c, &na[i], k->params[i].type, what);
        } else if (!na[i]->is_lvalue && !ck_is_error(na[i]->type)) {
            char msg[256];
            snprintf(msg, sizeof msg, "argument %d of '%s' must be assignable (it is an %s parameter)",
                     i + 1, fname, k->params[i].dir == NB_DIR_OUT ? "out" : "inout");
            ck_report_not_lvalue(c, na[i], msg);
        }
    }
    call->u.call.args = na;
    call->u.call.nargs = k->nparams;
    call->u.call.arg_names = NULL;
}

static const nb_type *ret_type(nb_checker *c, nb_decl *fn) {
    ck_check_func_sig(c, fn);
    const nb_type *r = fn->u.func.ret ? fn->u.func.ret->resolved : c->tt->t_void;
    return r ? r : c->tt->t_error;
}

void ck_check_args(nb_checker *c, nb_expr *call) {
    for (int i = 0; i < call->u.call.nargs; i++) {
        if (!call->u.call.args[i]) continue;
        ck_expr(c, &call->u.call.args[i]);
    }
}

/* As ck_check_args, but initializer lists wait for the chosen overload's parameter types. */
void ck_check_args_defer(nb_checker *c, nb_expr *call) {
    for (int i = 0; i < call->u.call.nargs; i++) {
        nb_expr *a = call->u.call.args[i];
        if (!a || (a->kind == NB_EX_INIT_LIST && !a->type)) continue;
        ck_expr(c, &call->u.call.args[i]);
    }
}

/* After a failed resolution: pending lists get the error type (nothing reads them unchecked). */
void ck_fail_pending(nb_checker *c, nb_expr *call) {
    for (int i = 0; i < call->u.call.nargs; i++)
        if (ck_is_pending_list(call->u.call.args[i])) call->u.call.args[i]->type = c->tt->t_error;
}

/* Calls of user functions / methods. this_base: object expression for method calls. */
static const nb_type *call_user(nb_checker *c, nb_expr *call, nb_decl **fns, int nfns, const char *name) {
    int n = nfns < CK_MAX_CANDS ? nfns : CK_MAX_CANDS;
    ck_cand *cands = nb_alloc(sizeof(ck_cand) * (size_t)n, 16);
    if (!cands) return call->type = c->tt->t_error;
    for (int i = 0; i < n; i++) ck_cand_from_decl(c, &cands[i], fns[i], NULL, 0);
    int k = ck_resolve_cands(c, call, name, cands, n);
    if (k < 0) {
        ck_fail_pending(c, call);
        nb_free(cands, sizeof(ck_cand) * (size_t)n);
        return call->type = c->tt->t_error;
    }
    nb_decl *fn = cands[k].decl;
    ck_apply_args(c, call, &cands[k], name);
    nb_free(cands, sizeof(ck_cand) * (size_t)n);
    ck_check_constexpr_args(c, call, fn); /* check_target.c */
    call->decl = fn;
    ck_add_edge(c, fn, call->loc);
    return call->type = ret_type(c, fn);
}

/* ---- constructors ------------------------------------------------------------------------- */

static const nb_type *call_method(nb_checker *c, nb_expr *call, nb_expr *callee, nb_decl *sd,
                                  int is_static_call);

static const nb_type *call_ctor(nb_checker *c, nb_expr *call, const nb_type *t) {
    /* constructors: S(args) is the static S.__init(args) (parser.c desugars __init) */
    if (t->kind == NB_TY_STRUCT && t->decl && ck_has_method(t->decl, "__init")) {
        nb_expr *base = ck_new_expr(c, NB_EX_TYPE, call->loc);
        nb_type_expr *te = ck_alloc(c, sizeof *te);
        nb_expr *m = ck_new_expr(c, NB_EX_MEMBER, call->loc);
        if (!base || !te || !m) return call->type = c->tt->t_error;
        te->loc = call->loc;
        te->name = t->name;
        te->subst = t;
        te->resolved = t;
        base->u.type.texpr = te;
        base->ref = NB_REF_TYPE;
        base->type = t;
        m->u.member.base = base;
        m->u.member.member = "__init";
        m->u.member.is_static = 1;
        call->u.call.callee = m;
        call->ref = NB_REF_NONE;
        return call_method(c, call, m, t->decl, 1);
    }
    call->ref = NB_REF_TYPE;
    int n = call->u.call.nargs;
    nb_expr **args = call->u.call.args;
    if (t->kind == NB_TY_STRUCT || t->kind == NB_TY_DIFFPAIR) ck_check_args_defer(c, call); /* S({…}, …) */
    else ck_check_args(c, call);
    if (ck_is_error(t)) { ck_fail_pending(c, call); return call->type = t; }
    for (int i = 0; i < n; i++)
        if (!ck_is_pending_list(args[i]) && ck_is_error(args[i]->type)) { ck_fail_pending(c, call); return call->type = t; }
    call->type = t;
    switch (t->kind) {
    case NB_TY_SCALAR:
        if (n != 1) {
            ck_err(c, call->loc, "'%s' constructor takes 1 argument, got %d", t->name, n);
            return call->type = c->tt->t_error;
        }
        ck_coerce(c, &args[0], t, "constructor");
        return t;
    case NB_TY_VECTOR:
    case NB_TY_MATRIX: {
        if (t->kind == NB_TY_MATRIX && n == 1 && args[0]->type->kind == NB_TY_MATRIX &&
            args[0]->type->rows >= t->rows && args[0]->type->cols >= t->cols &&
            (args[0]->type->rows != t->rows || args[0]->type->cols != t->cols)) {
            /* float2x2(m3x3): the top-left block (check_swizzle.c) */
            if (!ck_matrix_truncate_args(c, call, t)) return call->type = c->tt->t_error;
            return call_ctor(c, call, t);
        }
        if (n == 1 && (args[0]->type->kind == NB_TY_SCALAR ||
                       (args[0]->type->kind == t->kind && nb_type_components(args[0]->type) == nb_type_components(t) &&
                        args[0]->type->cols == t->cols))) {
            ck_coerce(c, &args[0], args[0]->type->kind == NB_TY_SCALAR ? nb_type_scalar(c->tt, t->scalar) : t,
                      "constructor");
            return t;
        }
        int total = 0;
        for (int i = 0; i < n; i++) {
            const nb_type *at = args[i]->type;
            if (at->kind != NB_TY_SCALAR && at->kind != NB_TY_VECTOR) {
                ck_err(c, args[i]->loc, "cannot use a '%s' in a '%s' constructor", at->name, t->name);
                return call->type = c->tt->t_error;
            }
            total += nb_type_components(at);
            ck_coerce(c, &args[i], ck_with_kind(c, at, t->scalar), "constructor");
        }
        if (total != nb_type_components(t)) {
            ck_err(c, call->loc, "wrong number of components in '%s' constructor: expected %d, got %d",
                   t->name, nb_type_components(t), total);
            return call->type = c->tt->t_error;
        }
        return t;
    }
    case NB_TY_STRUCT: {
        nb_decl *sd = t->decl;
        ck_struct_type(c, sd);
        if (n != sd->u.strct.nfields) {
            ck_err(c, call->loc, "'%s' constructor takes %d arguments (one per field), got %d", t->name,
                   sd->u.strct.nfields, n);
            ck_fail_pending(c, call);
            return call->type = c->tt->t_error;
        }
        for (int i = 0; i < n; i++) {
            char what[128];
            snprintf(what, sizeof what, "field '%s' of '%s'", sd->u.strct.fields[i]->name, t->name);
            arg_to(c, &args[i], sd->u.strct.fields[i]->u.var.type, what);
        }
        return t;
    }
    case NB_TY_DIFFPAIR: {
        if (n < 1 || n > 2) {
            ck_err(c, call->loc, "'%s' constructor takes 1 or 2 arguments, got %d", t->name, n);
            ck_fail_pending(c, call);
            return call->type = c->tt->t_error;
        }
        arg_to(c, &args[0], t->elem, "constructor");
        if (n == 2) {
            const nb_type *dt = nb_type_differential(c->tt, t->elem);
            arg_to(c, &args[1], dt ? dt : c->tt->t_error, "constructor");
        }
        call->ref = NB_REF_INTRINSIC;
        call->index = NB_INTR_DIFF_PAIR;
        return t;
    }
    default:
        ck_err(c, call->loc, "cannot construct a value of type '%s'", t->name);
        return call->type = c->tt->t_error;
    }
}

/* ---- dispatcher --------------------------------------------------------------------------- */

static nb_decl *struct_methods(nb_decl *sd, const char *name, nb_decl **out, int max, int *n) {
    *n = 0;
    for (int i = 0; i < sd->u.strct.nmethods; i++) {
        nb_decl *m = sd->u.strct.methods[i];
        if (m && m->name && strcmp(m->name, name) == 0 && *n < max) out[(*n)++] = m;
    }
    return *n ? out[0] : NULL;
}

static const nb_type *call_method(nb_checker *c, nb_expr *call, nb_expr *callee, nb_decl *sd,
                                  int is_static_call) {
    nb_decl *ms[CK_MAX_CANDS];
    int n;
    const char *mname = callee->u.member.member;
    struct_methods(sd, mname, ms, CK_MAX_CANDS, &n);
    ck_check_args_defer(c, call);
    if (n == 0) {
        ck_err(c, callee->loc, "no member function named '%s' in '%s'", mname, sd->name);
        ck_fail_pending(c, call);
        return call->type = c->tt->t_error;
    }
    /* generic methods (`f<let N : int>`, `__init<T : IFoo>`): their instantiations for this call */
    n = ck_generic_candidates(c, call, ms, n, callee->u.member.targs, mname);
    if (n <= 0) return call->type = c->tt->t_error;
    /* constructors are named after their type in diagnostics: 'S(float, float)' */
    const nb_type *r = call_user(c, call, ms, n, strcmp(mname, "__init") == 0 && sd->name ? sd->name : mname);
    if (!call->decl) return r;
    nb_decl *m = call->decl;
    if (!ck_check_member_access(c, sd, m, callee->loc)) return call->type = c->tt->t_error;
    int mstatic = (m->mods & NB_MOD_STATIC) != 0;
    if (is_static_call && !mstatic) {
        ck_err(c, callee->loc, "non-static method '%s' needs an object: obj.%s(…)", mname, mname);
        return call->type = c->tt->t_error;
    }
    if (mstatic) {
        call->ref = NB_REF_FUNCTION;
        call->u.call.callee = callee;
        callee->ref = NB_REF_METHOD;
        callee->decl = m;
        callee->type = nb_type_func(c->tt, m);
        return r;
    }
    call->ref = NB_REF_METHOD;
    callee->ref = NB_REF_METHOD;
    callee->decl = m;
    callee->type = nb_type_func(c->tt, m);
    if (m->u.func.is_mutating && !callee->u.member.base->is_lvalue) {
        char msg[200];
        snprintf(msg, sizeof msg, "[mutating] method '%s' needs an assignable object", mname);
        ck_report_not_lvalue(c, callee->u.member.base, msg);
    }
    return r;
}

const nb_type *ck_call_method(nb_checker *c, nb_expr *call, nb_expr *callee, nb_decl *sd) {
    return call_method(c, call, callee, sd, 0);
}

/* `obj(args)` with obj a value: its `operator()` method, else an error. */
static const nb_type *call_object(nb_checker *c, nb_expr *call) {
    nb_expr *callee = call->u.call.callee;
    const nb_type *t = ck_expr(c, &call->u.call.callee);
    callee = call->u.call.callee;
    if (!ck_is_error(t) && t->kind == NB_TY_STRUCT && ck_has_method(t->decl, "operator()")) {
        nb_expr *m = ck_new_expr(c, NB_EX_MEMBER, callee->loc);
        if (!m) return call->type = c->tt->t_error;
        m->u.member.base = callee;
        m->u.member.member = "operator()";
        call->u.call.callee = m;
        return call_method(c, call, m, t->decl, 0);
    }
    ck_check_args(c, call);
    if (!ck_is_error(t)) ck_err(c, callee->loc, "called object of type '%s' is not a function", t->name);
    return call->type = c->tt->t_error;
}

/* Adds the static methods named `name` of struct type t to fns (operators declared inside S). */
static int add_static_ops(const nb_type *t, const char *name, nb_decl **fns, int n) {
    while (t && t->kind == NB_TY_ARRAY) t = t->elem;
    if (!t || t->kind != NB_TY_STRUCT || !t->decl) return n;
    nb_decl *sd = t->decl;
    for (int i = 0; i < sd->u.strct.nmethods && n < CK_MAX_CANDS; i++) {
        nb_decl *m = sd->u.strct.methods[i];
        if (!m || !m->name || strcmp(m->name, name) != 0 || !(m->mods & NB_MOD_STATIC)) continue;
        int dup = 0;
        for (int k = 0; k < n && !dup; k++) dup = fns[k] == m;
        if (!dup) fns[n++] = m;
    }
    return n;
}

const nb_type *ck_call_operator(nb_checker *c, nb_expr **slot, const char *opname, nb_expr **args, int nargs) {
    nb_expr *e = *slot;
    nb_decl *fns[CK_MAX_CANDS];
    int nf = ck_lookup_global(c, opname, NB_DECL_FUNC, fns, CK_MAX_CANDS);
    if (nf > CK_MAX_CANDS) nf = CK_MAX_CANDS;
    for (int i = 0; i < nargs; i++) nf = add_static_ops(args[i]->type, opname, fns, nf);
    if (nf == 0) return NULL;
    nb_expr **a = ck_alloc(c, sizeof(nb_expr *) * (size_t)nargs);
    nb_expr *callee = ck_new_expr(c, NB_EX_NAME, e->loc);
    if (!a || !callee) return e->type = c->tt->t_error;
    memcpy(a, args, sizeof(nb_expr *) * (size_t)nargs);
    callee->u.name.name = opname;
    e->kind = NB_EX_CALL;
    memset(&e->u, 0, sizeof e->u);
    e->u.call.callee = callee;
    e->u.call.args = a;
    e->u.call.nargs = nargs;
    e->is_lvalue = 0;
    nf = ck_generic_candidates(c, e, fns, nf, NULL, opname);
    if (nf <= 0) return e->type = c->tt->t_error;
    e->ref = NB_REF_FUNCTION;
    callee->ref = NB_REF_FUNCTION;
    const nb_type *r = call_user(c, e, fns, nf, opname);
    if (e->decl) {
        callee->decl = e->decl;
        callee->type = nb_type_func(c->tt, e->decl);
    }
    return r;
}

/* `X.Differential` (X a type name, possibly itself `Y.Differential`) written as an expression
 * (the base of `float3.Differential.dzero()`): the type, or NULL when X is not a type. */
static const nb_type *differential_type_expr(nb_checker *c, nb_expr *e) {
    nb_expr *root = e->u.member.base;
    if (!root) return NULL;
    const nb_type *bt = NULL;
    if (root->kind == NB_EX_TYPE && root->u.type.texpr) bt = ck_resolve_type(c, root->u.type.texpr);
    else if (root->kind == NB_EX_NAME && root->u.name.name && !ck_lookup_local(c, root->u.name.name))
        bt = ck_name_as_type(c, root->u.name.name, root->loc);
    else if (root->kind == NB_EX_MEMBER && root->u.member.member && !strcmp(root->u.member.member, "Differential"))
        bt = differential_type_expr(c, root);
    if (!bt || ck_is_error(bt)) return bt;
    const nb_type *d = nb_type_is_differentiable(bt) ? nb_type_differential(c->tt, bt) : NULL;
    if (!d) {
        ck_err(c, e->loc, "'%s' is not differentiable, so it has no 'Differential' type", bt->name);
        return c->tt->t_error;
    }
    return d;
}

/* Slang's updatePrimal(inout p, v) / updateDiff(inout p, dv) / updatePair(inout p, v, dv) of a
 * DifferentialPair: the call becomes the assignment `p.p = v` / `p.d = dv` / `p = diffPair(v, dv)`
 * (p must be assignable: the assignment's diagnostics). */
static const nb_type *update_pair(nb_checker *c, nb_expr **slot, const char *name) {
    nb_expr *call = *slot;
    int pair = name[6] == 'P' && name[7] == 'a';
    int want = pair ? 3 : 2;
    if (call->u.call.nargs != want) {
        ck_check_args(c, call);
        ck_err(c, call->loc, "'%s' takes %d arguments (%s), got %d", name, want,
               pair ? "inout pair, primal, differential" : name[6] == 'D' ? "inout pair, differential" : "inout pair, primal",
               call->u.call.nargs);
        return call->type = c->tt->t_error;
    }
    nb_expr *as = ck_new_expr(c, NB_EX_ASSIGN, call->loc);
    if (!as) return call->type = c->tt->t_error;
    as->u.assign.op = NB_TOK_ASSIGN;
    if (pair) {
        nb_expr *mk = ck_new_expr(c, NB_EX_CALL, call->loc);
        nb_expr *callee = ck_new_expr(c, NB_EX_NAME, call->loc);
        if (!mk || !callee) return call->type = c->tt->t_error;
        callee->u.name.name = "diffPair";
        mk->u.call.callee = callee;
        mk->u.call.args = call->u.call.args + 1;
        mk->u.call.nargs = 2;
        as->u.assign.lhs = call->u.call.args[0];
        as->u.assign.rhs = mk;
    } else {
        nb_expr *m = ck_new_expr(c, NB_EX_MEMBER, call->loc);
        if (!m) return call->type = c->tt->t_error;
        m->u.member.base = call->u.call.args[0];
        m->u.member.member = name[6] == 'D' ? "d" : "p";
        as->u.assign.lhs = m;
        as->u.assign.rhs = call->u.call.args[1];
    }
    *slot = as;
    nb_expr **ps = pair ? &as->u.assign.lhs : &as->u.assign.lhs->u.member.base;
    const nb_type *pt = ck_expr(c, ps);
    if (!ck_is_error(pt) && pt->kind != NB_TY_DIFFPAIR) {
        ck_err(c, call->u.call.args[0]->loc, "'%s' needs a DifferentialPair, got '%s'", name, pt->name);
        return as->type = c->tt->t_error;
    }
    if (ck_is_error(pt)) return as->type = pt;
    return ck_expr(c, slot);
}

const nb_type *ck_call(nb_checker *c, nb_expr **slot) {
    nb_expr *call = *slot;
    nb_expr *callee = call->u.call.callee;
    if (!callee) return call->type = c->tt->t_error;
    if (call->u.call.nargs > CK_MAX_PARAMS) {
        ck_err(c, call->loc, "too many arguments (%d; at most %d)", call->u.call.nargs, CK_MAX_PARAMS);
        return call->type = c->tt->t_error;
    }
    if (callee->kind == NB_EX_MEMBER && callee->u.member.member && !callee->u.member.targs &&
        ck_diff_name(callee->u.member.member) >= 0 && callee->u.member.base) {
        /* `f.fwd_diff(…)`, `obj.m.bwd_diff(…)`: Slang's member spelling of fwd_diff(f)(…) */
        nb_expr *inner = ck_new_expr(c, NB_EX_CALL, callee->loc);
        nb_expr **a = ck_alloc(c, sizeof *a);
        if (!inner || !a) return call->type = c->tt->t_error;
        inner->type = NULL;
        a[0] = callee->u.member.base;
        inner->u.call.callee = ck_syn_name(c, callee->u.member.member, callee->loc);
        inner->u.call.args = a;
        inner->u.call.nargs = 1;
        call->u.call.callee = callee = inner;
    }
    /* fwd_diff(f)(…) */
    if (callee->kind == NB_EX_CALL && callee->u.call.callee && callee->u.call.callee->kind == NB_EX_NAME &&
        callee->u.call.callee->u.name.name) {
        const char *iname = callee->u.call.callee->u.name.name;
        if (!strcmp(iname, "__dispatch_kernel") && !ck_lookup_local(c, iname))
            return ck_dispatch_kernel(c, slot); /* host code (check_host.c) */
        int did = ck_lookup_local(c, iname) ? -1 : ck_diff_name(iname);
        if (did >= 0) return ck_call_diff(c, call, callee, did);
    }
    if (callee->kind == NB_EX_MEMBER && callee->u.member.member && !strcmp(callee->u.member.member, "Differential")) {
        /* `S.Differential(…)` / `float3.Differential(…)`: a constructor of the type's Differential */
        const nb_type *t = differential_type_expr(c, callee);
        if (t && ck_is_error(t)) {
            ck_check_args(c, call);
            return call->type = t;
        }
        nb_type_expr *te = t ? ck_alloc(c, sizeof *te) : NULL;
        if (te) {
            te->loc = callee->loc;
            te->name = t->name;
            te->subst = t;
            te->resolved = t;
            callee->kind = NB_EX_TYPE;
            memset(&callee->u, 0, sizeof callee->u);
            callee->u.type.texpr = te;
            callee->ref = NB_REF_TYPE;
            callee->type = t;
            return call_ctor(c, call, t);
        }
    }
    if (callee->kind == NB_EX_TYPE && callee->u.type.texpr && callee->u.type.texpr->ntargs > 0 &&
        callee->u.type.texpr->narray_dims == 0) {
        /* `sum<4>(x)`: an explicit instantiation of a generic function */
        nb_type_expr *te = callee->u.type.texpr;
        const char *name = te->name ? te->name : "";
        nb_decl *fns[CK_MAX_CANDS], *d[1];
        if (c->strct && ck_has_method(c->strct, name)) {
            /* `f<4>(…)` inside a struct: its generic method, on `this` (or the type when static) */
            nb_expr *m = ck_new_expr(c, NB_EX_MEMBER, callee->loc);
            nb_expr *base = ck_new_expr(c, NB_EX_NAME, callee->loc);
            if (!m || !base) return call->type = c->tt->t_error;
            base->u.name.name = "this";
            int static_ctx = c->fn && (c->fn->mods & NB_MOD_STATIC) && !c->fn->u.func.is_init;
            if (static_ctx) {
                base->ref = NB_REF_TYPE;
                base->type = ck_struct_type(c, c->strct);
                base->u.name.name = c->strct->name;
            } else {
                ck_expr(c, &base);
            }
            m->u.member.base = base;
            m->u.member.member = name;
            m->u.member.targs = te;
            call->u.call.callee = m;
            return call_method(c, call, m, c->strct, static_ctx);
        }
        int nf = ck_lookup_global(c, name, NB_DECL_FUNC, fns, CK_MAX_CANDS);
        if (nf > CK_MAX_CANDS) nf = CK_MAX_CANDS;
        if (nf > 0 && !ck_builtin_type_name(c, name) && ck_lookup_global(c, name, NB_DECL_STRUCT, d, 1) == 0 &&
            ck_lookup_global(c, name, NB_DECL_TYPEDEF, d, 1) == 0) {
            ck_check_args_defer(c, call);
            nf = ck_generic_candidates(c, call, fns, nf, te, name);
            if (nf <= 0) { ck_fail_pending(c, call); return call->type = c->tt->t_error; }
            /* the callee becomes a plain function name */
            callee->kind = NB_EX_NAME;
            memset(&callee->u, 0, sizeof callee->u);
            callee->u.name.name = name;
            call->ref = NB_REF_FUNCTION;
            callee->ref = NB_REF_FUNCTION;
            const nb_type *r = call_user(c, call, fns, nf, name);
            if (call->decl) {
                callee->decl = call->decl;
                callee->type = nb_type_func(c->tt, call->decl);
            }
            return r;
        }
    }
    if (callee->kind == NB_EX_TYPE && callee->u.type.texpr && callee->u.type.texpr->ntargs > 0 &&
        callee->u.type.texpr->narray_dims == 0) {
        const nb_type *r = ck_builtin_generic_call(c, slot); /* pow<float>(…), diffPair<S>(…) (check_target.c) */
        if (r) return r;
    }
    if (callee->kind == NB_EX_TYPE) {
        const nb_type *t = ck_resolve_type(c, callee->u.type.texpr);
        callee->ref = NB_REF_TYPE;
        callee->type = t;
        return call_ctor(c, call, t);
    }
    if (callee->kind == NB_EX_NAME && callee->u.name.name && !strcmp(callee->u.name.name, "__getAddress") &&
        !ck_lookup_local(c, "__getAddress"))
        return ck_get_address(c, slot); /* check_ptr.c */
    if (callee->kind == NB_EX_NAME && callee->u.name.name && !strcmp(callee->u.name.name, "printf") &&
        !ck_lookup_local(c, "printf")) {
        nb_decl *d[1];
        if (ck_lookup_global(c, "printf", NB_DECL_FUNC, d, 1) == 0) return ck_printf(c, call); /* check_target.c */
    }
    if (callee->kind == NB_EX_NAME && callee->u.name.name) {
        const char *name = callee->u.name.name;
        if (ck_lookup_local(c, name)) {
            nb_decl *lv = ck_lookup_local(c, name);
            const nb_type *lt = lv->kind == NB_DECL_PARAM ? lv->u.param.type : lv->u.var.type;
            if (lt && lt->kind == NB_TY_STRUCT && ck_has_method(lt->decl, "operator()"))
                return call_object(c, call); /* f(x) with f a struct value: f.operator()(x) */
            ck_check_args(c, call);
            ck_err(c, callee->loc, "'%s' is a variable, not a function", name);
            return call->type = c->tt->t_error;
        }
        /* methods of the enclosing struct (implicit this) */
        if (c->strct && ck_has_method(c->strct, name)) {
            nb_expr *base = ck_new_expr(c, NB_EX_NAME, callee->loc);
            if (!base) return call->type = c->tt->t_error;
            base->u.name.name = "this";
            int static_ctx = c->fn && (c->fn->mods & NB_MOD_STATIC) && !c->fn->u.func.is_init;
            if (!static_ctx) ck_expr(c, &base);
            nb_expr *m = ck_new_expr(c, NB_EX_MEMBER, callee->loc);
            if (!m) return call->type = c->tt->t_error;
            m->u.member.base = base;
            m->u.member.member = name;
            call->u.call.callee = m;
            if (static_ctx) {
                base->ref = NB_REF_TYPE;
                base->type = ck_struct_type(c, c->strct);
                base->u.name.name = c->strct->name;
            }
            return call_method(c, call, m, c->strct, static_ctx);
        }
        nb_decl *fns[CK_MAX_CANDS];
        int nf = ck_lookup_global(c, name, NB_DECL_FUNC, fns, CK_MAX_CANDS);
        if (nf > CK_MAX_CANDS) nf = CK_MAX_CANDS;
        if (nf > 0) {
            ck_check_args_defer(c, call);
            nf = ck_generic_candidates(c, call, fns, nf, NULL, name);
            if (nf <= 0) { ck_fail_pending(c, call); return call->type = c->tt->t_error; }
            call->ref = NB_REF_FUNCTION;
            callee->ref = NB_REF_FUNCTION;
            const nb_type *r = call_user(c, call, fns, nf, name);
            if (call->decl) {
                callee->decl = call->decl;
                callee->type = nb_type_func(c->tt, call->decl);
            }
            return r;
        }
        int id = nb_intrinsic_lookup(name);
        if (strcmp(name, "no_diff") == 0) id = NB_INTR_DETACH;
        if (id >= 0) {
            callee->ref = NB_REF_INTRINSIC;
            callee->index = id;
            callee->type = c->tt->t_void;
            return ck_call_intrinsic(c, call, id);
        }
        const nb_type *t = ck_name_as_type(c, name, callee->loc);
        if (t) {
            callee->ref = NB_REF_TYPE;
            callee->type = t;
            return call_ctor(c, call, t);
        }
        if (!strcmp(name, "updatePrimal") || !strcmp(name, "updateDiff") || !strcmp(name, "updatePair"))
            return update_pair(c, slot, name);
        if (!strcmp(name, "__mul_p_d") || !strcmp(name, "__mul_d_p")) {
            /* Slang's core-module helpers of custom derivatives: a primal times a differential
             * (either order), a differential; for float scalars/vectors/matrices that is `*` */
            if (call->u.call.nargs != 2) {
                ck_check_args(c, call);
                ck_err(c, call->loc, "'%s' takes 2 arguments, got %d", name, call->u.call.nargs);
                return call->type = c->tt->t_error;
            }
            nb_expr *m = ck_new_expr(c, NB_EX_BINARY, call->loc);
            if (!m) return call->type = c->tt->t_error;
            m->u.binary.op = NB_TOK_STAR;
            m->u.binary.lhs = call->u.call.args[0];
            m->u.binary.rhs = call->u.call.args[1];
            *slot = m;
            const nb_type *r = ck_expr(c, slot);
            if (!ck_is_error(r) && !nb_type_is_float_based(r)) {
                ck_err(c, call->loc, "'%s' needs floating-point operands, got '%s'", name, r->name);
                return m->type = c->tt->t_error;
            }
            return r;
        }
        if (!strcmp(name, "sincos")) { /* Slang's sincos(x, out s, out c): a synthesized function */
            ck_check_args_defer(c, call);
            if (call->u.call.nargs != 3) {
                ck_fail_pending(c, call);
                ck_err(c, call->loc, "'sincos' takes 3 arguments (x, out s, out c), got %d", call->u.call.nargs);
                return call->type = c->tt->t_error;
            }
            nb_decl *sc = ck_sincos_func(c, call->u.call.args[0] ? call->u.call.args[0]->type : NULL,
                                         call->u.call.args[0] ? call->u.call.args[0]->loc : call->loc);
            if (!sc) { ck_fail_pending(c, call); return call->type = c->tt->t_error; }
            call->ref = NB_REF_FUNCTION;
            callee->ref = NB_REF_FUNCTION;
            const nb_type *r = call_user(c, call, &sc, 1, name);
            if (call->decl) {
                callee->decl = call->decl;
                callee->type = nb_type_func(c->tt, call->decl);
            }
            return r;
        }
        if (!strcmp(name, "__dispatch_kernel")) {
            ck_err(c, callee->loc, "__dispatch_kernel(kernel, gridDim, blockDim) is called with the kernel's arguments: "
                   "__dispatch_kernel(k, g, b)(arguments…)");
            return call->type = c->tt->t_error;
        }
        ck_check_args(c, call);
        ck_err(c, callee->loc, "use of undeclared function '%s'", name);
        ck_note_hidden(c, name);
        return call->type = c->tt->t_error;
    }
    if (callee->kind == NB_EX_MEMBER && callee->u.member.base && callee->u.member.member &&
        (ck_namespace_member(c, callee, NB_DECL_FUNC) || ck_namespace_member(c, callee, NB_DECL_STRUCT) ||
         ck_namespace_member(c, callee, NB_DECL_TYPEDEF))) /* N.f(…) / N::f(…) / N.S(…) (check_namespace.c) */
        return ck_call(c, slot);
    if (callee->kind == NB_EX_MEMBER && callee->u.member.base && callee->u.member.base->kind == NB_EX_MEMBER &&
        !ck_namespace_member(c, callee->u.member.base, NB_DECL_STRUCT)) /* N.S.m(…) */
        ck_namespace_member(c, callee->u.member.base, NB_DECL_TYPEDEF);
    if (callee->kind == NB_EX_MEMBER && callee->u.member.base && ck_namespace_unknown_member(c, callee)) {
        ck_check_args(c, call);
        return call->type = c->tt->t_error;
    }
    if (callee->kind == NB_EX_MEMBER && callee->u.member.base && callee->u.member.member) {
        nb_expr *base = callee->u.member.base;
        const char *mname = callee->u.member.member;
        /* S.m(…) / S::m(…) static method */
        const nb_type *st = NULL;
        if (base->kind == NB_EX_TYPE) st = ck_resolve_type(c, base->u.type.texpr);
        else if (base->kind == NB_EX_NAME && base->u.name.name && !ck_lookup_local(c, base->u.name.name)) {
            nb_decl *g[1];
            if (ck_lookup_global(c, base->u.name.name, NB_DECL_VAR, g, 1) == 0 &&
                !(c->strct && strcmp(base->u.name.name, "this") == 0))
                st = ck_name_as_type(c, base->u.name.name, base->loc);
        } else if (base->kind == NB_EX_MEMBER && base->u.member.member &&
                   strcmp(base->u.member.member, "Differential") == 0) {
            st = differential_type_expr(c, base); /* float3.Differential.dzero() */
        }
        if (st) {
            base->ref = NB_REF_TYPE;
            base->type = st;
            if (ck_is_error(st)) { ck_check_args(c, call); return call->type = st; }
            if (st->kind == NB_TY_SCALAR && strcmp(mname, "getPi") == 0 && call->u.call.nargs == 0 &&
                ck_scalar_limit(c, call, st, mname))
                return call->type; /* float.getPi() */
            if (strcmp(mname, "Differential") == 0 && !(st->kind == NB_TY_STRUCT && ck_has_method(st->decl, mname))) {
                /* S.Differential(…): a constructor of S's Differential type */
                const nb_type *d = nb_type_is_differentiable(st) ? nb_type_differential(c->tt, st) : NULL;
                if (!d) {
                    ck_check_args(c, call);
                    ck_err(c, callee->loc, "'%s' is not differentiable, so it has no 'Differential' type", st->name);
                    return call->type = c->tt->t_error;
                }
                nb_type_expr *te = ck_alloc(c, sizeof *te);
                nb_expr *ne = ck_new_expr(c, NB_EX_TYPE, callee->loc);
                if (!te || !ne) return call->type = c->tt->t_error;
                te->loc = callee->loc;
                te->name = d->name;
                te->subst = d;
                ne->u.type.texpr = te;
                call->u.call.callee = ne;
                return ck_call(c, slot);
            }
            const nb_type *dt = ck_diff_static(c, slot, st, mname); /* float.dzero(), S.dadd(a, b) */
            if (dt) return dt;
            if (st->kind == NB_TY_TORCH) return ck_torch_static(c, slot, st, mname); /* check_host.c */
            if (st->kind != NB_TY_STRUCT) {
                ck_check_args(c, call);
                ck_err(c, callee->loc, "type '%s' has no member function '%s'", st->name, mname);
                return call->type = c->tt->t_error;
            }
            return call_method(c, call, callee, st->decl, 1);
        }
        const nb_type *bt = ck_checked(callee->u.member.base) ? callee->u.member.base->type
                                                              : ck_expr(c, &callee->u.member.base);
        if (ck_is_error(bt)) { ck_check_args(c, call); return call->type = c->tt->t_error; }
        if (bt->kind == NB_TY_TENSOR && ck_host_view_use(c, (*slot)->loc)) { /* (check_host.c) */
            ck_check_args(c, *slot);
            return (*slot)->type = c->tt->t_error;
        }
        if (bt->kind == NB_TY_TENSOR) return ck_tensor_method(c, slot, bt); /* t.load(i) … (check_view.c) */
        if (bt->kind == NB_TY_TORCH) return ck_torch_method(c, slot, bt);   /* t.size(d) … (check_host.c) */
        if (bt->kind == NB_TY_ARRAY && strcmp(mname, "getCount") == 0) return ck_array_get_count(c, slot, bt);
        if (bt->kind == NB_TY_DIFFPAIR &&
            (strcmp(mname, "getPrimal") == 0 || strcmp(mname, "getDifferential") == 0)) {
            ck_check_args(c, call);
            if (call->u.call.nargs != 0) {
                ck_err(c, call->loc, "'%s' takes no arguments", mname);
                return call->type = c->tt->t_error;
            }
            int is_p = mname[3] == 'P';
            const nb_type *dt = is_p ? bt->elem : nb_type_differential(c->tt, bt->elem);
            callee->u.member.member = is_p ? "p" : "d";
            callee->ref = NB_REF_FIELD;
            callee->index = is_p ? 0 : 1;
            callee->decl = NULL;
            callee->is_lvalue = 0;
            callee->type = dt ? dt : c->tt->t_error;
            *slot = callee;
            return callee->type;
        }
        if (bt->kind == NB_TY_STRUCT) return call_method(c, call, callee, bt->decl, 0);
        if (bt->kind == NB_TY_VECTOR && strcmp(mname, "store") == 0) return ck_vector_store(c, slot, bt);
        if (bt->kind == NB_TY_SCALAR && bt->scalar != NB_SC_BOOL) {
            /* IInteger's / IFloat's conversions: i.toInt(), .toUInt(), .toInt64(), .toUInt64(),
             * x.toFloat(), .toDouble() -- a cast */
            static const struct { const char *m; nb_scalar_kind k; int from_int; } conv[] = {
                {"toInt", NB_SC_INT, 1},     {"toUInt", NB_SC_UINT, 1},  {"toInt64", NB_SC_INT64, 1},
                {"toUInt64", NB_SC_UINT64, 1}, {"toFloat", NB_SC_FLOAT, 0}, {"toDouble", NB_SC_DOUBLE, 0},
            };
            int is_int = bt->scalar == NB_SC_INT || bt->scalar == NB_SC_UINT || bt->scalar == NB_SC_INT64 ||
                         bt->scalar == NB_SC_UINT64;
            for (size_t i = 0; i < sizeof conv / sizeof conv[0]; i++) {
                if (strcmp(mname, conv[i].m) != 0 || conv[i].from_int != is_int) continue;
                if (call->u.call.nargs != 0) {
                    ck_check_args(c, call);
                    ck_err(c, call->loc, "'%s' takes no arguments", mname);
                    return call->type = c->tt->t_error;
                }
                nb_expr *cast = ck_new_expr(c, NB_EX_CAST, call->loc);
                if (!cast) return call->type = c->tt->t_error;
                cast->type = NULL;
                cast->u.cast.texpr = ck_syn_type(c, nb_type_scalar(c->tt, conv[i].k), call->loc);
                cast->u.cast.operand = callee->u.member.base;
                *slot = cast;
                return ck_expr(c, slot);
            }
        }
        ck_check_args(c, call);
        ck_err(c, callee->loc, "no member function named '%s' in '%s'", mname, bt->name);
        return call->type = c->tt->t_error;
    }
    return call_object(c, call);
}

/* ---- custom derivatives and primal substitutes: signatures ------------------------------- */

/* "void(inout DifferentialPair<float>, float)" of cand k (result r). */
static void describe_sig(const nb_type *r, const ck_param *ps, int n, nb_strbuf *sb) {
    nb_strbuf_printf(sb, "%s(", r ? r->name : "?");
    for (int i = 0; i < n; i++) {
        if (i) nb_strbuf_append(sb, ", ");
        if (ps[i].dir == NB_DIR_OUT) nb_strbuf_append(sb, "out ");
        if (ps[i].dir == NB_DIR_INOUT) nb_strbuf_append(sb, "inout ");
        nb_strbuf_append(sb, ps[i].type ? ps[i].type->name : "?");
    }
    nb_strbuf_append(sb, ")");
}

static int is_instance_method(const nb_decl *f) {
    return f->u.func.parent && !(f->mods & NB_MOD_STATIC);
}

/* Does g have the signature that f's derivative of `mode` (1 forward, 2 backward; 0: f's own,
 * for a primal substitute) has (lang/ad.h)? Writes the expected signature into want. */
static int deriv_sig_fits(nb_checker *c, nb_decl *f, nb_decl *g, int mode, nb_strbuf *want) {
    ck_cand k, h;
    ck_cand_from_decl(c, &k, f, &mode, mode ? 1 : 0);
    ck_cand_from_decl(c, &h, g, NULL, 0);
    if (want) describe_sig(k.dret, k.params, k.nparams, want);
    if (k.nparams != h.nparams || k.dret != h.dret) return 0;
    for (int i = 0; i < k.nparams; i++) {
        if (k.params[i].type != h.params[i].type) return 0;
        /* a pair Slang passes `inout` may be written `in` by a forward derivative, and vice versa
         * only where the mode allows: directions must agree */
        if (k.params[i].dir != h.params[i].dir) return 0;
    }
    return 1;
}

int ck_match_derivative(nb_checker *c, nb_decl **fs, int nf, nb_decl **gs, int ng, int mode, nb_loc loc,
                        const char *attr, nb_decl **fo, nb_decl **go) {
    *fo = *go = NULL;
    for (int i = 0; i < nf; i++) ck_check_func_sig(c, fs[i]);
    for (int j = 0; j < ng; j++) ck_check_func_sig(c, gs[j]);
    /* methods: `this` is implicit on both sides; kept as written (first overload) */
    if (is_instance_method(fs[0]) || is_instance_method(gs[0])) {
        *fo = fs[0];
        *go = gs[0];
        return 1;
    }
    int found = 0;
    for (int i = 0; i < nf; i++)
        for (int j = 0; j < ng; j++) {
            if (ck_is_template(fs[i]) || ck_is_template(gs[j])) continue;
            if (!deriv_sig_fits(c, fs[i], gs[j], mode, NULL)) continue;
            if (!found) {
                *fo = fs[i];
                *go = gs[j];
            }
            found++;
        }
    if (found) return 1;
    const char *what = mode == 1 ? "forward derivative" : mode == 2 ? "backward derivative" : "primal substitute";
    nb_strbuf want, got;
    nb_strbuf_init(&want);
    nb_strbuf_init(&got);
    int any_generic = 0;
    for (int i = 0; i < nf; i++) any_generic |= ck_is_template(fs[i]);
    for (int j = 0; j < ng; j++) any_generic |= ck_is_template(gs[j]);
    if (any_generic) {
        ck_err(c, loc, "[%s] with generic functions is not supported", attr);
    } else {
        /* name the signature wanted from the (first) primal and what the (first) derivative has */
        nb_decl *f = fs[0], *g = gs[0];
        ck_cand h;
        deriv_sig_fits(c, f, g, mode, &want);
        ck_cand_from_decl(c, &h, g, NULL, 0);
        describe_sig(h.dret, h.params, h.nparams, &got);
        ck_err(c, loc, "'%s' does not have the signature of the %s of '%s': expected '%s', got '%s'%s", g->name, what,
               f->name, nb_strbuf_cstr(&want), nb_strbuf_cstr(&got),
               nf > 1 || ng > 1 ? " (no overload fits)" : "");
    }
    nb_strbuf_free(&want);
    nb_strbuf_free(&got);
    return 0;
}

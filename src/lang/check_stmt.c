/* Semantic analysis of statements, reachability (missing return) and function bodies (split
 * from check.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang/check_internal.h"

#include "lang/lexer.h"
#include "nabla/alloc.h"

/* ---- statements --------------------------------------------------------------------------- */

static void check_stmt(nb_checker *c, nb_stmt *s);

static void check_cond(nb_checker *c, nb_expr **slot, const char *what) {
    const nb_type *t = ck_expr(c, slot);
    if (ck_is_error(t)) return;
    if (t->kind != NB_TY_SCALAR) {
        ck_err(c, (*slot)->loc, "%s condition must be a scalar, got '%s'%s", what, t->name,
               t->kind == NB_TY_VECTOR ? " (use any() or all())" : "");
        return;
    }
    ck_coerce(c, slot, c->tt->t_bool, "condition");
}

/* Whether struct sd has a constructor without parameters (`__init()`). */
static int has_default_init(const nb_decl *sd) {
    for (int i = 0; sd && i < sd->u.strct.nmethods; i++) {
        const nb_decl *m = sd->u.strct.methods[i];
        if (m && m->u.func.is_init && m->u.func.nparams == 0 && !m->u.func.ngparams) return 1;
    }
    return 0;
}

static void check_local_var(nb_checker *c, nb_decl *d) {
    const char *name = d->name ? d->name : "?";
    const nb_type *t;
    char what[128];
    snprintf(what, sizeof what, "initialization of '%s'", name);
    if (d->u.var.texpr) {
        ck_infer_array_size(c, d->u.var.texpr, d->u.var.init); /* int a[] = { … } (check_array.c) */
        t = ck_resolve_type(c, d->u.var.texpr);
        if (t->kind == NB_TY_VOID) {
            ck_err(c, d->loc, "variable '%s' has type void", name);
            t = c->tt->t_error;
        }
        if (!d->u.var.init && t->kind == NB_TY_STRUCT && has_default_init(t->decl) &&
            !(c->fn && c->fn->u.func.is_init && strcmp(name, "this") == 0)) {
            /* `S s;` with a constructor `__init()`: Slang calls it */
            nb_expr *call = ck_new_expr(c, NB_EX_CALL, d->loc);
            nb_expr *callee = ck_new_expr(c, NB_EX_TYPE, d->loc);
            nb_type_expr *te = ck_alloc(c, sizeof *te);
            if (call && callee && te) {
                te->loc = d->loc;
                te->name = t->name;
                te->subst = t;
                callee->u.type.texpr = te;
                callee->type = NULL;
                call->u.call.callee = callee;
                call->type = NULL;
                d->u.var.init = call;
            }
        }
        if (d->u.var.init) ck_expr_to(c, &d->u.var.init, t, what);
    } else if (d->u.var.init && d->u.var.init->kind != NB_EX_INIT_LIST) {
        t = ck_expr(c, &d->u.var.init); /* void: `let r = f();` runs f; r holds no value (Slang) */
    } else {
        ck_err(c, d->loc, "cannot infer the type of '%s'", name);
        t = c->tt->t_error;
        if (d->u.var.init) ck_expr(c, &d->u.var.init);
    }
    d->u.var.type = t;
    d->u.var.is_global = 0;
    if (d->mods & NB_MOD_GROUPSHARED) ck_kernel_shared_local(c, d); /* (check_kernel.c) */
    if ((d->mods & NB_MOD_CONST) && !d->u.var.init)
        ck_err(c, d->loc, "const variable '%s' needs an initializer", name);
    if (d->mods & NB_MOD_CONST) ck_fold_var(d);
    ck_declare(c, d->name, d, d->loc);
}

static void check_body(nb_checker *c, nb_stmt *body, int is_switch) {
    if (!is_switch) c->loop_depth++;
    c->break_depth++;
    ck_push_scope(c);
    check_stmt(c, body);
    ck_pop_scope(c);
    c->break_depth--;
    if (!is_switch) c->loop_depth--;
}

static void check_switch(nb_checker *c, nb_stmt *s) {
    const nb_type *t = ck_expr(c, &s->u.switch_s.value);
    if (!ck_is_error(t) && (t->kind != NB_TY_SCALAR || !ck_is_int_scalar_kind(t->scalar))) {
        ck_err(c, s->u.switch_s.value->loc, "switch value must be an integer, got '%s'", t->name);
        t = c->tt->t_error;
    }
    int ncase = 0;
    for (int i = 0; i < s->u.switch_s.ncases; i++) ncase += s->u.switch_s.cases[i].nvalues;
    int64_t *vals = ncase ? ck_alloc(c, sizeof(int64_t) * (size_t)ncase) : NULL;
    nb_loc *locs = ncase ? ck_alloc(c, sizeof(nb_loc) * (size_t)ncase) : NULL;
    int nv = 0;
    const nb_switch_case *dflt = NULL;
    c->break_depth++;
    ck_push_scope(c);
    for (int i = 0; i < s->u.switch_s.ncases; i++) {
        nb_switch_case *k = &s->u.switch_s.cases[i];
        if (k->is_default) {
            if (dflt) {
                ck_err(c, k->loc, "multiple default labels in one switch");
                ck_note(c, dflt->loc, "previous default label is here");
            }
            dflt = k;
        }
        for (int j = 0; j < k->nvalues; j++) {
            const nb_type *vt = ck_expr(c, &k->values[j]);
            if (ck_is_error(vt)) continue;
            int64_t v;
            if (vt->kind != NB_TY_SCALAR || !ck_is_int_scalar_kind(vt->scalar) || !ck_const_int(k->values[j], &v)) {
                ck_err(c, k->values[j]->loc, "case label must be a constant integer");
                continue;
            }
            if (!ck_is_error(t)) ck_coerce(c, &k->values[j], t, "case label");
            for (int q = 0; q < nv; q++) {
                if (vals[q] == v) {
                    ck_err(c, k->values[j]->loc, "duplicate case value %lld", (long long)v);
                    ck_note(c, locs[q], "previous case is here");
                    break;
                }
            }
            if (vals && nv < ncase) { vals[nv] = v; locs[nv] = k->values[j]->loc; nv++; }
        }
        for (int j = 0; j < k->nbody; j++) check_stmt(c, k->body[j]);
    }
    ck_pop_scope(c);
    c->break_depth--;
}

static void check_stmt(nb_checker *c, nb_stmt *s) {
    if (!s) return;
    if (s->kind != NB_ST_FOR && s->kind != NB_ST_WHILE && s->kind != NB_ST_DO_WHILE) {
        s->max_iters = -1;
        if (s->attrs.count > 0 && s->kind != NB_ST_SWITCH && s->kind != NB_ST_IF)
            ck_warn(c, s->attrs.items[0].loc, "attribute '%s' ignored on this statement",
                    s->attrs.items[0].name ? s->attrs.items[0].name : "?");
    }
    switch (s->kind) {
    case NB_ST_BLOCK:
        ck_push_scope(c);
        for (int i = 0; i < s->u.block.count; i++) check_stmt(c, s->u.block.items[i]);
        ck_pop_scope(c);
        break;
    case NB_ST_EXPR: ck_expr(c, &s->u.expr.expr); break;
    case NB_ST_VAR:
        for (int i = 0; i < s->u.var.count; i++)
            if (s->u.var.vars[i]) check_local_var(c, s->u.var.vars[i]);
        break;
    case NB_ST_IF:
        check_cond(c, &s->u.if_s.cond, "if");
        ck_push_scope(c);
        check_stmt(c, s->u.if_s.then_s);
        ck_pop_scope(c);
        ck_push_scope(c);
        check_stmt(c, s->u.if_s.else_s);
        ck_pop_scope(c);
        break;
    case NB_ST_FOR: {
        ck_push_scope(c);
        check_stmt(c, s->u.for_s.init);
        if (s->u.for_s.cond) check_cond(c, &s->u.for_s.cond, "loop");
        if (s->u.for_s.step) ck_expr(c, &s->u.for_s.step);
        ck_check_loop_attrs(c, s);
        check_body(c, s->u.for_s.body, 0);
        ck_pop_scope(c);
        if (s->max_iters < 0) s->max_iters = ck_for_trip_count(c, s);
        if (s->max_iters < 0 && ck_loop_runs_once(s->u.for_s.body)) s->max_iters = 1;
        break;
    }
    case NB_ST_WHILE:
    case NB_ST_DO_WHILE:
        if (s->u.while_s.cond) check_cond(c, &s->u.while_s.cond, "loop");
        ck_check_loop_attrs(c, s);
        check_body(c, s->u.while_s.body, 0);
        if (s->max_iters < 0 && ck_loop_runs_once(s->u.while_s.body)) s->max_iters = 1;
        break;
    case NB_ST_SWITCH: check_switch(c, s); break;
    case NB_ST_BREAK:
        if (c->break_depth == 0) ck_err(c, s->loc, "'break' outside of a loop or switch");
        break;
    case NB_ST_CONTINUE:
        if (c->loop_depth == 0) ck_err(c, s->loc, "'continue' outside of a loop");
        break;
    case NB_ST_RETURN: {
        nb_decl *fn = c->fn;
        const nb_type *r = fn && fn->u.func.ret && fn->u.func.ret->resolved ? fn->u.func.ret->resolved : c->tt->t_void;
        const char *fname = fn && fn->name ? fn->name : "?";
        if (s->u.ret.value) {
            if (r->kind == NB_TY_VOID) {
                const nb_type *vt = ck_expr(c, &s->u.ret.value);
                if (!ck_is_error(vt) && vt->kind != NB_TY_VOID)
                    ck_err(c, s->u.ret.value->loc, "void function '%s' cannot return a value", fname);
            } else {
                ck_expr_to(c, &s->u.ret.value, r, "return");
            }
        } else if (r->kind != NB_TY_VOID && !ck_is_error(r)) {
            ck_err(c, s->loc, "non-void function '%s' must return a value", fname);
        }
        break;
    }
    case NB_ST_EMPTY: break;
    case NB_ST_TARGET_SWITCH: case NB_ST_ASM: case NB_ST_PRELUDE: ck_check_target_stmt(c, s); break;
    }
}

void ck_check_stmt(nb_checker *c, nb_stmt *s) { check_stmt(c, s); }

/* ---- reachability (missing return) -------------------------------------------------------- */

static int const_true(const nb_expr *e) {
    int64_t v;
    if (!e) return 1;
    return ck_const_int(e, &v) && v != 0;
}

/* Does s contain a break that leaves the innermost enclosing loop/switch around s? */
static int has_break(const nb_stmt *s) {
    if (!s) return 0;
    switch (s->kind) {
    case NB_ST_BREAK: return 1;
    case NB_ST_BLOCK:
        for (int i = 0; i < s->u.block.count; i++)
            if (has_break(s->u.block.items[i])) return 1;
        return 0;
    case NB_ST_IF: return has_break(s->u.if_s.then_s) || has_break(s->u.if_s.else_s);
    default: return 0; /* loops and switches own their breaks */
    }
}

static int can_complete(const nb_stmt *s) {
    if (!s) return 1;
    switch (s->kind) {
    case NB_ST_RETURN: return 0;
    case NB_ST_BREAK:
    case NB_ST_CONTINUE: return 0;
    case NB_ST_BLOCK:
        for (int i = 0; i < s->u.block.count; i++)
            if (!can_complete(s->u.block.items[i])) return 0;
        return 1;
    case NB_ST_IF:
        if (!s->u.if_s.else_s) return 1;
        return can_complete(s->u.if_s.then_s) || can_complete(s->u.if_s.else_s);
    case NB_ST_FOR:
        if (!const_true(s->u.for_s.cond)) return 1;
        return has_break(s->u.for_s.body);
    case NB_ST_WHILE:
        if (!const_true(s->u.while_s.cond)) return 1;
        return has_break(s->u.while_s.body);
    case NB_ST_DO_WHILE:
        if (const_true(s->u.while_s.cond)) return has_break(s->u.while_s.body);
        return 1;
    case NB_ST_SWITCH: {
        int has_default = 0;
        for (int i = 0; i < s->u.switch_s.ncases; i++) {
            const nb_switch_case *k = &s->u.switch_s.cases[i];
            if (k->is_default) has_default = 1;
            for (int j = 0; j < k->nbody; j++)
                if (has_break(k->body[j])) return 1;
        }
        if (!has_default || s->u.switch_s.ncases == 0) return 1;
        const nb_switch_case *last = &s->u.switch_s.cases[s->u.switch_s.ncases - 1];
        for (int j = 0; j < last->nbody; j++)
            if (!can_complete(last->body[j])) return 0;
        return 1;
    }
    case NB_ST_ASM: return 0; /* the function is its expansion */
    case NB_ST_TARGET_SWITCH: /* one case runs: completes when some case can */
        for (int i = 0; i < s->u.tswitch.ncases; i++) {
            const nb_target_case *k = &s->u.tswitch.cases[i];
            if (k->targets == NB_TGT_OTHER && !k->is_default) continue; /* (never chosen; skipped unparsed) */
            int done = 1;
            for (int j = 0; j < k->nbody && done; j++) done = can_complete(k->body[j]);
            if (done) return 1;
        }
        return s->u.tswitch.ncases == 0;
    default: return 1;
    }
}

/* ---- function bodies ---------------------------------------------------------------------- */

void ck_check_func_body(nb_checker *c, nb_decl *fn) {
    ck_check_func_sig(c, fn);
    if (!fn->u.func.body) return;
    c->fn = fn;
    c->strct = fn->u.func.parent;
    const char *ns_saved = c->ns;
    c->ns = ck_decl_ns(fn);
    c->loop_depth = c->break_depth = 0;
    ck_push_scope(c);
    for (int i = 0; i < fn->u.func.nparams; i++) {
        nb_decl *p = fn->u.func.params[i];
        if (p) ck_declare(c, p->name, p, p->loc);
    }
    nb_stmt *body = fn->u.func.body;
    /* the body is a scope of its own inside the parameters' (Slang): a local there may shadow
     * a parameter (`void k(DiffTensorView color) { float3 color = …; }`) */
    ck_push_scope(c);
    if (body->kind == NB_ST_BLOCK) {
        body->max_iters = -1;
        for (int i = 0; i < body->u.block.count; i++) check_stmt(c, body->u.block.items[i]);
    } else {
        check_stmt(c, body);
    }
    ck_pop_scope(c);
    ck_pop_scope(c);
    ck_check_asm_placement(c, fn);
    const nb_type *r = fn->u.func.ret && fn->u.func.ret->resolved ? fn->u.func.ret->resolved : c->tt->t_void;
    if (r->kind != NB_TY_VOID && !ck_is_error(r) && can_complete(body))
        ck_err(c, fn->loc, "control reaches the end of non-void function '%s' (missing return)",
               fn->name ? fn->name : "?");
    c->fn = NULL;
    c->strct = NULL;
    c->ns = ns_saved;
}

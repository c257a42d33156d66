/* Loops in the checker: [MaxIters] / [ForceUnroll] attributes and the trip count of a `for`
 * loop whose bound and step are constants (reverse mode sizes its per-iteration tape by it), with
 * the overflow rules of the counter's type. Split from check.c. */
#include <stdint.h>
#include <string.h>

#include "lang/check_internal.h"
#include "lang/lexer.h"

static int is_name_of(const nb_expr *e, const nb_decl *d) {
    while (e && e->kind == NB_EX_CAST && e->u.cast.implicit) e = e->u.cast.operand;
    return e && e->kind == NB_EX_NAME && e->decl == d && (e->ref == NB_REF_LOCAL);
}

/* Does e (or a statement below) assign the variable d? */
static int expr_writes(const nb_expr *e, const nb_decl *d);
static int stmt_writes(const nb_stmt *s, const nb_decl *d);

static int expr_writes(const nb_expr *e, const nb_decl *d) {
    if (!e) return 0;
    switch (e->kind) {
    case NB_EX_ASSIGN: {
        const nb_expr *r = e->u.assign.lhs;
        while (r && (r->kind == NB_EX_MEMBER || r->kind == NB_EX_INDEX))
            r = r->kind == NB_EX_MEMBER ? r->u.member.base : r->u.index.base;
        if (is_name_of(r, d)) return 1;
        return expr_writes(e->u.assign.lhs, d) || expr_writes(e->u.assign.rhs, d);
    }
    case NB_EX_UNARY:
        if ((e->u.unary.op == NB_TOK_INC || e->u.unary.op == NB_TOK_DEC) && is_name_of(e->u.unary.operand, d))
            return 1;
        return expr_writes(e->u.unary.operand, d);
    case NB_EX_BINARY: return expr_writes(e->u.binary.lhs, d) || expr_writes(e->u.binary.rhs, d);
    case NB_EX_TERNARY:
        return expr_writes(e->u.ternary.cond, d) || expr_writes(e->u.ternary.then_e, d) ||
               expr_writes(e->u.ternary.else_e, d);
    case NB_EX_CALL:
        for (int i = 0; i < e->u.call.nargs; i++) {
            const nb_expr *a = e->u.call.args[i];
            if (is_name_of(a, d) && e->ref == NB_REF_FUNCTION && e->decl && i < e->decl->u.func.nparams &&
                e->decl->u.func.params[i]->u.param.dir != NB_DIR_IN)
                return 1;
            if (is_name_of(a, d) && e->ref == NB_REF_INTRINSIC &&
                (e->index == NB_INTR_BWD_DIFF || e->index == NB_INTR_FWD_DIFF))
                return 1;
            if (expr_writes(a, d)) return 1;
        }
        return expr_writes(e->u.call.callee, d);
    case NB_EX_MEMBER: return expr_writes(e->u.member.base, d);
    case NB_EX_INDEX:
        for (int i = 0; i < e->u.index.nindices; i++)
            if (expr_writes(e->u.index.indices[i], d)) return 1;
        return expr_writes(e->u.index.base, d);
    case NB_EX_CAST: return expr_writes(e->u.cast.operand, d);
    case NB_EX_INIT_LIST:
        for (int i = 0; i < e->u.init_list.nitems; i++)
            if (expr_writes(e->u.init_list.items[i], d)) return 1;
        return 0;
    default: return 0;
    }
}

static int stmt_writes(const nb_stmt *s, const nb_decl *d) {
    if (!s) return 0;
    switch (s->kind) {
    case NB_ST_BLOCK:
        for (int i = 0; i < s->u.block.count; i++)
            if (stmt_writes(s->u.block.items[i], d)) return 1;
        return 0;
    case NB_ST_EXPR: return expr_writes(s->u.expr.expr, d);
    case NB_ST_VAR:
        for (int i = 0; i < s->u.var.count; i++)
            if (s->u.var.vars[i] && expr_writes(s->u.var.vars[i]->u.var.init, d)) return 1;
        return 0;
    case NB_ST_IF:
        return expr_writes(s->u.if_s.cond, d) || stmt_writes(s->u.if_s.then_s, d) || stmt_writes(s->u.if_s.else_s, d);
    case NB_ST_FOR:
        return stmt_writes(s->u.for_s.init, d) || expr_writes(s->u.for_s.cond, d) ||
               expr_writes(s->u.for_s.step, d) || stmt_writes(s->u.for_s.body, d);
    case NB_ST_WHILE:
    case NB_ST_DO_WHILE: return expr_writes(s->u.while_s.cond, d) || stmt_writes(s->u.while_s.body, d);
    case NB_ST_SWITCH:
        if (expr_writes(s->u.switch_s.value, d)) return 1;
        for (int i = 0; i < s->u.switch_s.ncases; i++)
            for (int j = 0; j < s->u.switch_s.cases[i].nbody; j++)
                if (stmt_writes(s->u.switch_s.cases[i].body[j], d)) return 1;
        return 0;
    case NB_ST_RETURN: return expr_writes(s->u.ret.value, d);
    default: return 0;
    }
}

/* Values of an integer loop variable's type (int64 constants: uint64 above INT64_MAX are unknown). */
static void int_kind_range(nb_scalar_kind k, int64_t *lo, int64_t *hi) {
    switch (k) {
    case NB_SC_INT: *lo = INT32_MIN; *hi = INT32_MAX; break;
    case NB_SC_UINT: *lo = 0; *hi = UINT32_MAX; break;
    case NB_SC_UINT64: *lo = 0; *hi = INT64_MAX; break;
    default: *lo = INT64_MIN; *hi = INT64_MAX; break;
    }
}

/* Trip count of `for (T i = A; i OP B; i += S)` with constants A, B, S and a body that does not
 * write i; -1 when unknown. Computed without overflow (unsigned distances): a loop whose last
 * step leaves T's range (it would wrap, or overflow a signed type) has no known count and gets
 * a warning. */
int64_t ck_for_trip_count(nb_checker *c, nb_stmt *s) {
    nb_stmt *init = s->u.for_s.init;
    nb_expr *cond = s->u.for_s.cond, *step = s->u.for_s.step;
    if (!init || !cond || !step || init->kind != NB_ST_VAR || init->u.var.count != 1) return -1;
    nb_decl *d = init->u.var.vars[0];
    int64_t a, b, st;
    if (!d || !d->u.var.type || d->u.var.type->kind != NB_TY_SCALAR ||
        !ck_is_int_scalar_kind(d->u.var.type->scalar) || !ck_const_int(d->u.var.init, &a))
        return -1;
    if (cond->kind != NB_EX_BINARY || !is_name_of(cond->u.binary.lhs, d) || !ck_const_int(cond->u.binary.rhs, &b))
        return -1;
    int neg = 0; /* the step is subtracted */
    if (step->kind == NB_EX_UNARY && is_name_of(step->u.unary.operand, d)) {
        if (step->u.unary.op == NB_TOK_INC) st = 1;
        else if (step->u.unary.op == NB_TOK_DEC) st = 1, neg = 1;
        else return -1;
    } else if (step->kind == NB_EX_ASSIGN && is_name_of(step->u.assign.lhs, d) &&
               (step->u.assign.op == NB_TOK_PLUS_ASSIGN || step->u.assign.op == NB_TOK_MINUS_ASSIGN) &&
               ck_const_int(step->u.assign.rhs, &st)) {
        neg = step->u.assign.op == NB_TOK_MINUS_ASSIGN;
    } else {
        return -1;
    }
    if (st == 0 || stmt_writes(s->u.for_s.body, d)) return -1;
    int64_t lo, hi;
    int_kind_range(d->u.var.type->scalar, &lo, &hi);
    if (a < lo || a > hi || b < lo || b > hi) return -1;
    int up = (st > 0) != neg;                                  /* i grows */
    uint64_t ust = st > 0 ? (uint64_t)st : 0 - (uint64_t)st;   /* |step| (2^63 for INT64_MIN) */
    if (ust > (uint64_t)hi - (uint64_t)lo) return -1;         /* the step alone leaves the type */
    uint64_t dist = up ? (uint64_t)b - (uint64_t)a : (uint64_t)a - (uint64_t)b; /* when a, b are in order */
    uint64_t n;
    switch (cond->u.binary.op) {
    case NB_TOK_LT:
        if (!up) return a < b ? -1 : 0;
        if (a >= b) return 0;
        n = dist / ust + (dist % ust != 0);
        break;
    case NB_TOK_LE:
        if (!up) return a <= b ? -1 : 0;
        if (a > b) return 0;
        n = dist / ust + 1;
        break;
    case NB_TOK_GT:
        if (up) return a > b ? -1 : 0;
        if (a <= b) return 0;
        n = dist / ust + (dist % ust != 0);
        break;
    case NB_TOK_GE:
        if (up) return a >= b ? -1 : 0;
        if (a < b) return 0;
        n = dist / ust + 1;
        break;
    case NB_TOK_NE:
        if (a == b) return 0;
        if (up != (b > a) || dist % ust != 0) return -1;
        return dist / ust > (uint64_t)INT64_MAX ? -1 : (int64_t)(dist / ust); /* ends exactly at b */
    default: return -1;
    }
    /* the step after the last iteration, from a + (n-1)*step, must stay in the type */
    uint64_t last = up ? (uint64_t)a + (n - 1) * ust : (uint64_t)a - (n - 1) * ust;
    uint64_t room = up ? (uint64_t)hi - last : last - (uint64_t)lo;
    if (room < ust) {
        ck_warn(c, step->loc, "loop variable '%s' leaves the range of '%s' on its last step (the loop's trip count is unknown)",
                d->name ? d->name : "?", d->u.var.type->name);
        return -1;
    }
    return n > (uint64_t)INT64_MAX ? -1 : (int64_t)n;
}

/* ---- loops whose body never reaches its next iteration ------------------------------------
 * `for (;;) { …; break; }`: every path through the body ends in break or return and none
 * continues, so the body runs at most once (trip bound 1; Slang differentiates these without
 * [MaxIters]). Conservative: a nested loop or switch may complete. */

/* Can s complete normally (reach the statement after it)? */
static int may_complete(const nb_stmt *s) {
    if (!s) return 1;
    switch (s->kind) {
    case NB_ST_BLOCK:
        for (int i = 0; i < s->u.block.count; i++)
            if (!may_complete(s->u.block.items[i])) return 0;
        return 1;
    case NB_ST_IF: return !s->u.if_s.else_s || may_complete(s->u.if_s.then_s) || may_complete(s->u.if_s.else_s);
    case NB_ST_BREAK:
    case NB_ST_CONTINUE:
    case NB_ST_RETURN: return 0;
    default: return 1;
    }
}

/* Does s contain a `continue` of the loop it is in (not of a nested loop)? */
static int has_continue(const nb_stmt *s) {
    if (!s) return 0;
    switch (s->kind) {
    case NB_ST_CONTINUE: return 1;
    case NB_ST_BLOCK:
        for (int i = 0; i < s->u.block.count; i++)
            if (has_continue(s->u.block.items[i])) return 1;
        return 0;
    case NB_ST_IF: return has_continue(s->u.if_s.then_s) || has_continue(s->u.if_s.else_s);
    case NB_ST_SWITCH: /* (a continue in a switch continues the enclosing loop) */
        for (int k = 0; k < s->u.switch_s.ncases; k++)
            for (int j = 0; j < s->u.switch_s.cases[k].nbody; j++)
                if (has_continue(s->u.switch_s.cases[k].body[j])) return 1;
        return 0;
    case NB_ST_FOR: case NB_ST_WHILE: case NB_ST_DO_WHILE: return 0;
    case NB_ST_EXPR: case NB_ST_VAR: case NB_ST_BREAK: case NB_ST_RETURN: case NB_ST_EMPTY: return 0;
    default: return 1; /* (unknown kinds: assume it may) */
    }
}

int ck_loop_runs_once(const nb_stmt *body) { return !may_complete(body) && !has_continue(body); }

void ck_check_loop_attrs(nb_checker *c, nb_stmt *s) {
    s->max_iters = -1;
    for (int i = 0; i < s->attrs.count; i++) {
        nb_attr *a = &s->attrs.items[i];
        const char *n = a->name ? a->name : "";
        if (!strcmp(n, "MaxIters")) {
            int64_t v;
            if (a->nargs != 1 || !a->args || !a->args[0]) {
                ck_err(c, a->loc, "[MaxIters] needs one constant integer");
                continue;
            }
            const nb_type *t = ck_expr(c, &a->args[0]);
            if (ck_is_error(t)) continue;
            if (!ck_const_int(a->args[0], &v) || v <= 0) {
                ck_err(c, a->args[0]->loc, "[MaxIters] needs a positive constant integer");
                continue;
            }
            s->max_iters = v;
        } else if (!strcmp(n, "ForceUnroll") || !strcmp(n, "unroll") || !strcmp(n, "loop") ||
                   !strcmp(n, "fastopt") || !strcmp(n, "allow_uav_condition")) {
            for (int k = 0; k < a->nargs; k++)
                if (a->args && a->args[k]) ck_expr(c, &a->args[k]);
        } else {
            ck_warn(c, a->loc, "unknown attribute '%s' ignored", n);
        }
    }
}

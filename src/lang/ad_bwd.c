/* Reverse mode (see ad.h, docs/AUTODIFF.md).
 *
 * f_bwd = entry (primal locals from the pairs) ; forward sweep ; reverse sweep ; gradient writes.
 *
 *   forward sweep  a clone of the primal body. `return v` becomes `retval = v; returned = true`
 *                  and everything after a region that may return runs under `if (!returned)`
 *                  (the guard's condition is kept in a var for the reverse sweep). Every loop
 *                  gets an iteration counter; its trip count is recorded after it. A return
 *                  inside loops also breaks every enclosing loop (guards follow those loops).
 *   reverse sweep  the primal instructions in reverse order, mirrored control flow (if → if on
 *                  the same condition, switch → switch on the same selector, loop → a loop that
 *                  runs the recorded trip count backwards). Adjoints live in vars: one per
 *                  differentiable SSA value that receives a contribution (reset after it is
 *                  consumed, so loops start each iteration clean) and one per primal var (same
 *                  access paths: loads accumulate into it, stores consume and zero it).
 *   primal values  the reverse sweep needs primal values (operands of MUL, intrinsic args,
 *                  conditions, indices). A value whose clone is at the top level of the forward
 *                  sweep is used directly; any other is *stored* right after its clone into a
 *                  spill var — an array indexed by the iteration indices of the enclosing loops,
 *                  sized by their max_iters — and loaded where needed (the store policy).
 *   calls          a differentiable callee runs forward in the forward sweep and its bwd
 *                  derivative (which recomputes its own primal) in the reverse sweep, with pairs
 *                  built from the recorded arguments (inout arguments are snapshotted before
 *                  the call).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "lang/ad.h"
#include "lang/intrinsics.h"

#define MAX_LOOPS 8

typedef struct loopinfo {
    nb_ir_var *count;      /* forward: iterations started */
    nb_ir_var *iter;       /* forward: index of the current iteration */
    nb_ir_var *trips;      /* trip count, recorded per enclosing iteration */
    nb_ir_inst *rev_index; /* reverse: index of the iteration being reversed */
    int64_t max;
    nb_ir_var *brk, *cont; /* forward: `break` / `continue` taken in this iteration */
    nb_ir_var *brk_rec;    /* recorded per iteration: the step block did not run */
    int has_break;
} loopinfo;

typedef struct bwd {
    nb_ad_cloner cl;
    nb_ir_module *m;
    nb_type_table *tt;
    nb_source_set *src;
    nb_ir_func *pf, *df;
    nb_ir_var **adjv;     /* primal var id -> adjoint var */
    nb_ir_var **adji;     /* primal inst id -> adjoint var of the value */
    nb_ir_var **spill;    /* primal inst id -> spill var */
    nb_ir_var **guardv;   /* primal inst id (IF/SWITCH after which control may have left: return,
                             break, continue) -> recorded "went on" flag */
    nb_ir_var ***snapv;   /* primal CALL id -> per-arg snapshot var (inout) */
    loopinfo **loops;     /* primal LOOP id -> info */
    nb_ir_var *ret_var, *ret_flag;
    nb_ir_var **pvar;     /* primal param index -> local primal var */
    nb_ir_var **pairv;    /* primal var id -> DifferentialPtrPair parameter (pointer-type params) */
    int *bparam;          /* primal param index -> df param index (-1: dropped) */
    nb_ir_var *dout;      /* df param of the result gradient */
    nb_ir_inst *mark;     /* adjoint zero-inits go before this */
    nb_ir_builder rb;     /* reverse sweep builder */
    nb_ir_inst ***vstores; /* primal var id -> the instructions that write it (stores, by-reference calls) */
    int *nvstores;
    int errors;
} bwd;

static void berr(bwd *B, nb_loc loc, const char *msg, const char *arg)
{
    nb_ad_error(B->src, loc, "%s%s", msg, arg ? arg : "");
    B->errors++;
}

static nb_ir_var *tmpvar(bwd *B, const char *name, const nb_type *t)
{
    nb_ir_var *v = nb_ir_var_new(B->df, name, t);
    if (v) v->is_temp = 1;
    return v;
}

static int is_const_like(const nb_ir_inst *in)
{
    return in->op == NB_IR_CONST || in->op == NB_IR_ZERO || in->op == NB_IR_GLOBAL;
}

/* The loop a break / continue leaves (NULL: a break of a switch). */
static nb_ir_inst *jump_target(nb_ir_inst *j)
{
    for (nb_ir_block *bl = j->parent; bl && bl->owner; bl = bl->owner->parent) {
        if (bl->owner->op == NB_IR_LOOP) return bl->owner;
        if (bl->owner->op == NB_IR_SWITCH && j->op == NB_IR_BREAK) return NULL;
    }
    return NULL;
}

static int is_inside(nb_ir_inst *x, nb_ir_block *bl)
{
    for (nb_ir_block *b = x->parent; b; b = b->owner ? b->owner->parent : NULL)
        if (b == bl) return 1;
    return 0;
}

/* Can control leave region `top` early from inside bl: a return, or a break / continue of a loop
 * that is not inside top? */
static int may_escape(nb_ir_block *bl, nb_ir_block *top)
{
    for (nb_ir_inst *in = bl->first; in; in = in->next) {
        if (in->op == NB_IR_RETURN) return 1;
        if (in->op == NB_IR_BREAK || in->op == NB_IR_CONTINUE) {
            nb_ir_inst *t = jump_target(in);
            if (t && !is_inside(t, top)) return 1;
        }
        for (int k = 0; k < in->nblocks; k++)
            if (may_escape(in->blocks[k], top)) return 1;
    }
    return 0;
}

static nb_ir_inst *innermost_loop(nb_ir_inst *x)
{
    for (nb_ir_block *bl = x->parent; bl && bl->owner; bl = bl->owner->parent)
        if (bl->owner->op == NB_IR_LOOP) return bl->owner;
    return NULL;
}

static nb_ir_inst *flt_zero(bwd *B, nb_ir_builder *b, const nb_type *t)
{
    const nb_type *d = nb_ad_dtype(B->tt, t);
    return nb_ir_zero(b, d ? d : t);
}

/* Enclosing primal loops of x, outermost first. */
static int enclosing_loops(nb_ir_inst *x, nb_ir_inst **out)
{
    nb_ir_inst *tmp[64];
    int n = 0;
    for (nb_ir_block *bl = x->parent; bl && bl->owner && n < 64; bl = bl->owner->parent)
        if (bl->owner->op == NB_IR_LOOP) tmp[n++] = bl->owner;
    for (int i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
    return n;
}

/* ---- recording values in the forward sweep, replaying them in the reverse sweep ---------- */

/* Inserts `in` (built detached) after *anchor and makes it the new anchor. */
static void put_after(nb_ir_inst **anchor, nb_ir_inst *in)
{
    if (!in) return;
    nb_ir_inst *a = *anchor;
    if (a->next) nb_ir_insert_before(a->next, in);
    else nb_ir_append(a->parent, in);
    *anchor = in;
}

/* A var holding clone's value per iteration of the loops enclosing primal instruction ctx;
 * the store is inserted right after clone. */
static nb_ir_var *record(bwd *B, nb_ir_inst *clone, nb_ir_inst *ctx, const char *name)
{
    nb_ir_inst *loops[MAX_LOOPS];
    int d = enclosing_loops(ctx, loops);
    if (d > MAX_LOOPS) d = MAX_LOOPS;
    const nb_type *t = clone->type;
    for (int i = d - 1; i >= 0; i--) t = nb_type_array(B->tt, t, (int)B->loops[loops[i]->id]->max);
    nb_ir_var *v = tmpvar(B, name ? name : "rec", t);
    nb_ir_builder b = B->cl.b;
    b.block = NULL;
    nb_ir_step st[MAX_LOOPS];
    nb_ir_inst *idx[MAX_LOOPS];
    nb_ir_inst *anchor = clone;
    for (int i = 0; i < d; i++) {
        memset(&st[i], 0, sizeof st[i]);
        st[i].kind = NB_IR_STEP_INDEX;
        idx[i] = nb_ir_load(&b, B->loops[loops[i]->id]->iter, NULL, 0, NULL);
        put_after(&anchor, idx[i]);
    }
    put_after(&anchor, nb_ir_store(&b, v, st, d, idx, clone));
    return v;
}

static nb_ir_inst *replay(bwd *B, nb_ir_var *v, nb_ir_inst *ctx)
{
    nb_ir_inst *loops[MAX_LOOPS];
    int d = enclosing_loops(ctx, loops);
    if (d > MAX_LOOPS) d = MAX_LOOPS;
    nb_ir_step st[MAX_LOOPS];
    nb_ir_inst *idx[MAX_LOOPS];
    for (int i = 0; i < d; i++) {
        memset(&st[i], 0, sizeof st[i]);
        st[i].kind = NB_IR_STEP_INDEX;
        idx[i] = B->loops[loops[i]->id]->rev_index;
    }
    return nb_ir_load(&B->rb, v, st, d, idx);
}

/* ---- recompute instead of store (docs/AUTODIFF.md, "store versus recompute") --------------- */

static void note_write(bwd *B, nb_ir_var *v, nb_ir_inst *in)
{
    if (!v || v->id < 0 || v->id > B->pf->nvars) return;
    int n = B->nvstores[v->id];
    nb_ir_inst **a = nb_arena_zalloc(&B->m->arena, sizeof(void *) * (size_t)(n + 1), sizeof(void *));
    if (!a) return;
    if (n) memcpy(a, B->vstores[v->id], sizeof(void *) * (size_t)n);
    a[n] = in;
    B->vstores[v->id] = a;
    B->nvstores[v->id] = n + 1;
}

static void collect_writes(bwd *B, nb_ir_block *bl)
{
    for (nb_ir_inst *in = bl->first; in; in = in->next) {
        if (in->op == NB_IR_STORE) note_write(B, in->var, in);
        if (in->op == NB_IR_CALL && in->refs)
            for (int i = 0; i < in->nops; i++) note_write(B, in->refs[i], in);
        for (int k = 0; k < in->nblocks; k++) collect_writes(B, in->blocks[k]);
    }
}

/* The instruction of the function body (top level) that contains x. */
static nb_ir_inst *top_ancestor(nb_ir_inst *x)
{
    while (x->parent && x->parent->owner) x = x->parent->owner;
    return x;
}

static int precedes_top(nb_ir_inst *a, nb_ir_inst *b) /* same block: a before b */
{
    for (nb_ir_inst *in = a->next; in; in = in->next)
        if (in == b) return 1;
    return 0;
}

static nb_ir_inst *P(bwd *B, nb_ir_inst *x);

/* A LOAD whose var is written only at the top level before x's top-level statement (parameters,
 * values set up before the loops): the var still holds that value when the reverse sweep runs,
 * so the load is simply repeated there. */
static nb_ir_inst *recompute_invariant_load(bwd *B, nb_ir_inst *x)
{
    nb_ir_var *v = x->var;
    nb_ir_var *cv = B->cl.vmap[v->id];
    if (!cv || x->npath > 16) return NULL;
    nb_ir_inst *top = top_ancestor(x);
    for (int i = 0; i < B->nvstores[v->id]; i++) {
        nb_ir_inst *w = B->vstores[v->id][i];
        if (w->parent != B->pf->body || !precedes_top(w, top)) return NULL;
    }
    nb_ir_inst *idx[17];
    for (int i = 0; i < x->nops; i++) {
        idx[i] = P(B, x->ops[i]);
        if (!idx[i]) return NULL;
    }
    return nb_ir_load(&B->rb, cv, x->path, x->npath, idx);
}

/* The counter of a counted loop read in its body (`for (int k = K0; ...; k += C)` with k written
 * only by its initialisation just before the loop and the step): k = K0 + C * iteration. */
static nb_ir_inst *recompute_counter(bwd *B, nb_ir_inst *x)
{
    nb_ir_var *v = x->var;
    nb_ir_inst *L = innermost_loop(x);
    if (!L || x->npath || v->type != B->tt->t_int || !B->loops[L->id] || !B->loops[L->id]->rev_index) return NULL;
    if (!is_inside(x, L->blocks[1])) return NULL;
    nb_ir_inst *init = NULL, *step = NULL;
    for (int i = 0; i < B->nvstores[v->id]; i++) {
        nb_ir_inst *w = B->vstores[v->id][i];
        if (w->op != NB_IR_STORE || w->npath) return NULL;
        if (w->parent == L->blocks[2] && !step) step = w;
        else if (w->parent == L->parent && !init && precedes_top(w, L)) init = w; /* (the only other write) */
        else return NULL;
    }
    if (!init || !step || init->ops[0]->op != NB_IR_CONST || !init->ops[0]->cv) return NULL;
    nb_ir_inst *inc = step->ops[0];
    if (inc->op != NB_IR_ADD || inc->nops != 2 || inc->ops[0]->op != NB_IR_LOAD || inc->ops[0]->var != v || inc->ops[0]->npath ||
        inc->ops[1]->op != NB_IR_CONST || !inc->ops[1]->cv)
        return NULL;
    nb_ir_builder *b = &B->rb;
    nb_ir_inst *it = B->loops[L->id]->rev_index;
    nb_ir_inst *k0 = nb_ir_new(b, NB_IR_CONST, init->ops[0]->type, 0), *c = nb_ir_new(b, NB_IR_CONST, inc->ops[1]->type, 0);
    if (!k0 || !c) return NULL;
    k0->cv = init->ops[0]->cv;
    c->cv = inc->ops[1]->cv;
    return nb_ir_binary(b, NB_IR_ADD, k0, nb_ir_binary(b, NB_IR_MUL, c, it));
}

/* The result of a call to a [PreferRecompute] function (arguments by value only): called again
 * with its arguments' primal values instead of stored per iteration. */
static nb_ir_inst *recompute_call(bwd *B, nb_ir_inst *x)
{
    if (x->op == NB_IR_LOAD) { /* `y = g(...); ... y ...` in one block: the call's value */
        nb_ir_inst *p = x->prev;
        for (; p; p = p->prev) {
            if (p->op == NB_IR_STORE && p->var == x->var) break;
            for (int i = 0; i < B->nvstores[x->var->id]; i++) { /* another write in between */
                nb_ir_inst *w = B->vstores[x->var->id][i];
                if (w == p) return NULL;
                for (int k = 0; k < p->nblocks; k++)
                    if (is_inside(w, p->blocks[k])) return NULL;
            }
        }
        if (!p || p->npath || p->ops[0]->op != NB_IR_CALL) return NULL;
        x = p->ops[0];
    }
    nb_ir_func *cf = x->callee;
    if (!cf || !cf->decl || !cf->decl->u.func.prefer_recompute || x->nops > 64) return NULL;
    nb_ir_inst *args[65];
    nb_ir_var *refs[65];
    for (int i = 0; i < x->nops; i++) {
        if (x->refs && x->refs[i]) return NULL;
        refs[i] = NULL;
    }
    for (int i = 0; i < x->nops; i++) args[i] = P(B, x->ops[i]);
    nb_ir_inst *r = nb_ir_call(&B->rb, cf, args, refs);
    if (r) r->flags |= NB_IRF_NO_DIFF; /* (a primal value: its adjoint is the original call's) */
    return r;
}

/* The primal value of x, usable at the reverse sweep's current position. */
static nb_ir_inst *P(bwd *B, nb_ir_inst *x)
{
    nb_ir_inst *c = B->cl.pmap[x->id];
    if (!c) {
        berr(B, x->loc, "internal: reverse mode lost a primal value", NULL);
        return nb_ir_zero(&B->rb, x->type);
    }
    if (c->parent == B->df->body) return c;
    if (x->op == NB_IR_LOAD && B->vstores) {
        nb_ir_inst *r = recompute_counter(B, x);
        if (!r) r = recompute_invariant_load(B, x);
        if (r) return r;
    }
    if (x->op == NB_IR_CALL || (x->op == NB_IR_LOAD && !x->npath)) {
        nb_ir_inst *r = recompute_call(B, x);
        if (r) return r;
    }
    if (is_const_like(c)) { /* rematerialize */
        nb_ir_inst *k = nb_ir_new(&B->rb, c->op, c->type, 0);
        if (k) {
            k->cv = c->cv;
            k->global = c->global;
        }
        return k;
    }
    if (!B->spill[x->id]) B->spill[x->id] = record(B, c, x, x->name);
    return replay(B, B->spill[x->id], x);
}

/* ---- adjoints ---------------------------------------------------------------------------- */

static void zero_at_mark(bwd *B, nb_ir_var *v)
{
    nb_ir_builder b = B->rb;
    b.block = NULL;
    nb_ir_inst *z = nb_ir_zero(&b, v->type);
    nb_ir_insert_before(B->mark, z);
    nb_ir_inst *s = nb_ir_store(&b, v, NULL, 0, NULL, z);
    nb_ir_insert_before(B->mark, s);
}

static nb_ir_inst *fit(bwd *B, nb_ir_inst *val, const nb_type *t, nb_loc loc)
{
    if (!val || val->type == t) return val;
    if (val->type->kind == NB_TY_SCALAR && (t->kind == NB_TY_VECTOR || t->kind == NB_TY_MATRIX || t->kind == NB_TY_SCALAR))
        return nb_ir_convert(&B->rb, val, t);
    berr(B, loc, "internal: reverse mode adjoint type mismatch", NULL);
    return NULL;
}

/* var[path] += val */
static void accum_var(bwd *B, nb_ir_var *v, const nb_ir_step *st, int n, nb_ir_inst **idx, nb_ir_inst *val, nb_loc loc)
{
    nb_ir_builder *b = &B->rb;
    nb_ir_inst *old = nb_ir_load(b, v, st, n, idx);
    val = fit(B, val, old->type, loc);
    if (!val) return;
    nb_ir_store(b, v, st, n, idx, nb_ir_binary(b, NB_IR_ADD, old, val));
}

static nb_ir_var *adj_of(bwd *B, nb_ir_inst *y)
{
    if (!B->adji[y->id]) {
        const nb_type *d = nb_ad_dtype(B->tt, y->type);
        B->adji[y->id] = tmpvar(B, "adj", d);
        zero_at_mark(B, B->adji[y->id]);
    }
    return B->adji[y->id];
}

static int wants_adj(bwd *B, nb_ir_inst *y)
{
    return y && !is_const_like(y) && !(y->flags & NB_IRF_NO_DIFF) && nb_ad_dtype(B->tt, y->type) != NULL;
}

/* adj(y) += val */
static void accum(bwd *B, nb_ir_inst *y, nb_ir_inst *val)
{
    if (!val || !wants_adj(B, y)) return;
    accum_var(B, adj_of(B, y), NULL, 0, NULL, val, y->loc);
}

/* adj(y)[one step] += val */
static void accum_step(bwd *B, nb_ir_inst *y, int field, nb_ir_inst *dyn, nb_ir_inst *val)
{
    if (!val || !wants_adj(B, y)) return;
    nb_ir_step st;
    memset(&st, 0, sizeof st);
    nb_ir_inst *idx[1] = {NULL};
    const nb_type *t = y->type;
    if (t->kind == NB_TY_STRUCT || t->kind == NB_TY_DIFFPAIR) {
        st.kind = NB_IR_STEP_FIELD;
        st.index = t->kind == NB_TY_STRUCT ? nb_ad_field_map(B->tt, t, field) : field;
        if (st.index < 0) return; /* a field without a tangent */
    } else {
        st.kind = NB_IR_STEP_INDEX;
        idx[0] = dyn ? dyn : nb_ir_const_i(&B->rb, B->tt->t_int, field);
    }
    accum_var(B, adj_of(B, y), &st, 1, idx, val, y->loc);
}

/* ---- forward sweep ----------------------------------------------------------------------- */

static int fwd_pre(nb_ad_cloner *c, nb_ir_inst *in)
{
    bwd *B = c->ud;
    nb_ir_builder *b = &c->b;
    switch (in->op) {
    case NB_IR_RETURN:
        if (in->nops && B->ret_var) nb_ir_store(b, B->ret_var, NULL, 0, NULL, nb_ad_map(c, in->ops[0]));
        nb_ir_store(b, B->ret_flag, NULL, 0, NULL, nb_ir_const_i(b, B->tt->t_bool, 1));
        /* inside loops: every enclosing loop breaks (its step is skipped, recorded like a break);
         * the rest of each enclosing body runs under guards (fwd_post, also after inner loops) */
        for (nb_ir_inst *lp = innermost_loop(in); lp; lp = innermost_loop(lp)) {
            loopinfo *L = B->loops[lp->id];
            if (!L) continue;
            L->has_break = 1;
            nb_ir_store(b, L->brk, NULL, 0, NULL, nb_ir_const_i(b, B->tt->t_bool, 1));
        }
        if (in->parent->owner && in->parent->owner->op == NB_IR_SWITCH) nb_ir_jump(b, NB_IR_BREAK, NULL);
        return 1;
    case NB_IR_CALL: {
        nb_ir_func *cf = in->callee;
        for (int i = 0; i < cf->nparams; i++) {
            if (!in->refs[i] || cf->params[i]->dir != NB_DIR_INOUT) continue; /* (all inout: f_bwd takes them in) */
            if (!B->snapv[in->id])
                B->snapv[in->id] = nb_arena_zalloc(&B->m->arena, sizeof(nb_ir_var *) * (size_t)cf->nparams, sizeof(void *));
            if (!B->snapv[in->id]) return 0;
            nb_ir_inst *s = nb_ir_load(b, c->vmap[in->refs[i]->id], NULL, 0, NULL);
            B->snapv[in->id][i] = record(B, s, in, "snap");
        }
        return 0;
    }
    case NB_IR_LOOP: {
        loopinfo *L = nb_arena_zalloc(&B->m->arena, sizeof *L, sizeof(void *));
        if (!L) return 0;
        B->loops[in->id] = L;
        L->max = in->max_iters;
        if (L->max <= 0) {
            berr(B, in->loc, "reverse mode needs a bound on this loop: add [MaxIters(n)] (or use a constant trip count)",
                 NULL);
            L->max = 1;
        } else if (L->max > INT32_MAX) { /* its tape is an array indexed by int */
            berr(B, in->loc, "reverse mode: this loop's bound is too large to record its iterations (at most 2147483647)",
                 NULL);
            L->max = 1;
        }
        L->count = tmpvar(B, "nb_count", B->tt->t_int);
        L->iter = tmpvar(B, "nb_iter", B->tt->t_int);
        L->brk = tmpvar(B, "nb_break", B->tt->t_bool);
        L->cont = tmpvar(B, "nb_continue", B->tt->t_bool);
        nb_ir_store(b, L->count, NULL, 0, NULL, nb_ir_const_i(b, B->tt->t_int, 0));
        nb_ir_store(b, L->iter, NULL, 0, NULL, nb_ir_const_i(b, B->tt->t_int, 0));
        nb_ir_store(b, L->brk, NULL, 0, NULL, nb_ir_const_i(b, B->tt->t_bool, 0));
        return 0;
    }
    case NB_IR_BREAK: case NB_IR_CONTINUE: {
        /* a loop's break / continue becomes a flag; the rest of the iteration runs under guards
         * (fwd_post) and the body ends with `if (break) break;` */
        nb_ir_inst *t = jump_target(in);
        if (!t) {
            if (in == in->parent->last) return 0; /* the break ending a switch case */
            berr(B, in->loc, "reverse mode does not support leaving a switch case early yet", NULL);
            return 0;
        }
        loopinfo *L = B->loops[t->id];
        if (!L) return 0;
        if (in->op == NB_IR_BREAK) L->has_break = 1;
        nb_ir_store(b, in->op == NB_IR_BREAK ? L->brk : L->cont, NULL, 0, NULL, nb_ir_const_i(b, B->tt->t_bool, 1));
        if (in->parent->owner && in->parent->owner->op == NB_IR_SWITCH) nb_ir_jump(b, NB_IR_BREAK, NULL);
        return 1;
    }
    default:
        return 0;
    }
}

static int contains_loop(nb_ir_block *bl)
{
    for (nb_ir_inst *in = bl->first; in; in = in->next) {
        if (in->op == NB_IR_LOOP) return 1;
        for (int k = 0; k < in->nblocks; k++)
            if (contains_loop(in->blocks[k])) return 1;
    }
    return 0;
}

/* Short innermost loops are unrolled on CUDA (forward and reverse sweep alike): the recorded
 * per-iteration values are then indexed by constants and live in registers, not local memory. */
static int unroll_sweeps(const nb_ir_inst *loop, int64_t max)
{
    if (loop->flags & NB_IRF_UNROLL) return 1;
    if (max <= 0 || max > 32) return 0;
    for (int k = 0; k < loop->nblocks; k++)
        if (contains_loop(loop->blocks[k])) return 0;
    return 1;
}

static void fwd_post(nb_ad_cloner *c, nb_ir_inst *in, nb_ir_inst *o)
{
    bwd *B = c->ud;
    nb_ir_builder *b = &c->b;
    if (in->op == NB_IR_LOOP) {
        loopinfo *L = B->loops[in->id];
        if (unroll_sweeps(in, L->max)) o->flags |= NB_IRF_UNROLL;
        /* body start: iter = min(count, max - 1); count += 1 (clamped so a broken [MaxIters]
         * promise cannot write out of bounds) */
        nb_ir_block *body = o->blocks[1];
        nb_ir_builder tb = *b;
        tb.block = NULL;
        nb_ir_inst *cnt = nb_ir_load(&tb, L->count, NULL, 0, NULL);
        nb_ir_inst *mx = nb_ir_const_i(&tb, B->tt->t_int, L->max - 1);
        nb_ir_inst *ops[2] = {cnt, mx};
        nb_ir_inst *it = nb_ir_intrin(&tb, NB_INTR_MIN, B->tt->t_int, ops, 2);
        nb_ir_inst *st1 = nb_ir_store(&tb, L->iter, NULL, 0, NULL, it);
        nb_ir_inst *one = nb_ir_const_i(&tb, B->tt->t_int, 1);
        nb_ir_inst *inc = nb_ir_binary(&tb, NB_IR_ADD, cnt, one);
        nb_ir_inst *st2 = nb_ir_store(&tb, L->count, NULL, 0, NULL, inc);
        nb_ir_inst *f0 = nb_ir_const_i(&tb, B->tt->t_bool, 0);
        nb_ir_inst *st3 = nb_ir_store(&tb, L->cont, NULL, 0, NULL, f0);
        nb_ir_inst *seq[9] = {cnt, mx, it, st1, one, inc, st2, f0, st3};
        if (body->first) {
            nb_ir_inst *first = body->first;
            for (int i = 0; i < 9; i++) nb_ir_insert_before(first, seq[i]);
        } else {
            for (int i = 0; i < 9; i++) nb_ir_append(body, seq[i]);
        }
        if (L->has_break && in->blocks[1]->first) {
            /* end of the body: remember whether this iteration broke (its step did not run),
             * then leave the loop for real */
            nb_ir_builder eb = *b;
            eb.block = body;
            nb_ir_inst *t = nb_ir_load(&eb, L->brk, NULL, 0, NULL);
            L->brk_rec = record(B, t, in->blocks[1]->first, "nb_broke");
            nb_ir_inst *iff = nb_ir_if(&eb, t);
            if (iff) {
                eb.block = iff->blocks[0];
                nb_ir_jump(&eb, NB_IR_BREAK, NULL);
            }
        }
        /* after the loop: trips[outer iterations] = min(count, max) */
        nb_ir_inst *c2 = nb_ir_load(b, L->count, NULL, 0, NULL);
        nb_ir_inst *ops2[2] = {c2, nb_ir_const_i(b, B->tt->t_int, L->max)};
        nb_ir_inst *trips = nb_ir_intrin(b, NB_INTR_MIN, B->tt->t_int, ops2, 2);
        L->trips = record(B, trips, in, "nb_trips");
    }
    if (in->op == NB_IR_SWITCH) /* a case whose return became stores still leaves the switch */
        for (int k = 0; k < o->nblocks; k++)
            if (!nb_ir_block_terminated(o->blocks[k]) && nb_ir_block_terminated(in->blocks[k])) {
                nb_ir_builder tb = *b;
                tb.block = o->blocks[k];
                nb_ir_jump(&tb, NB_IR_BREAK, NULL);
            }
    if ((in->op == NB_IR_IF || in->op == NB_IR_SWITCH || in->op == NB_IR_LOOP) && !B->guardv[in->id]) {
        int r = 0;
        for (int k = 0; k < in->nblocks; k++) r |= may_escape(in->blocks[k], in->parent);
        if (!r || in == in->parent->last) return;
        /* went on = nothing returned, and the innermost loop neither broke nor continued */
        nb_ir_inst *esc = nb_ir_load(b, B->ret_flag, NULL, 0, NULL);
        nb_ir_inst *lp = innermost_loop(in);
        loopinfo *L = lp ? B->loops[lp->id] : NULL;
        if (L) {
            esc = nb_ir_binary(b, NB_IR_LOR, esc, nb_ir_load(b, L->brk, NULL, 0, NULL));
            esc = nb_ir_binary(b, NB_IR_LOR, esc, nb_ir_load(b, L->cont, NULL, 0, NULL));
        }
        nb_ir_inst *g = nb_ir_unary(b, NB_IR_NOT, esc);
        B->guardv[in->id] = record(B, g, in, "nb_go");
        nb_ir_inst *iff = nb_ir_if(b, g);
        if (iff) b->block = iff->blocks[0]; /* the rest of this region runs under the guard */
    }
}

/* ---- reverse sweep ----------------------------------------------------------------------- */

/* The gradient-buffer element a TSTORE / TATOMIC_ADD on a DiffTensor wrote (its indices). */
static nb_ir_inst *tgrad_load(bwd *B, nb_ir_inst *in)
{
    int rank = in->ops[0]->type->rank;
    nb_ir_inst *ops[10];
    if (rank > 8) return NULL;
    for (int i = 0; i <= rank; i++) ops[i] = P(B, in->ops[i]); /* (before the load: SSA order) */
    nb_ir_inst *ld = nb_ir_new(&B->rb, NB_IR_TLOAD, in->ops[0]->type->elem, 1 + rank);
    if (!ld) return NULL;
    for (int i = 0; i <= rank; i++) ld->ops[i] = ops[i];
    ld->flags |= NB_IRF_TGRAD;
    return ld;
}

/* A plain store's gradient is consumed once read (Slang's DiffTensorView store backward exchanges
 * it with 0; slang-torch: "grad_output gets consumed during the reverse-mode"): so an element
 * written several times (`out[i] = out[i] + x`) passes its gradient on once, not once per write.
 * storeOnce leaves it (NB_IRF_ONCE). */
static void tgrad_consume(bwd *B, nb_ir_inst *in)
{
    int rank = in->ops[0]->type->rank;
    nb_ir_inst *ops[10];
    if (rank > 8) return;
    for (int i = 0; i <= rank; i++) ops[i] = P(B, in->ops[i]);
    nb_ir_inst *z = nb_ir_zero(&B->rb, in->ops[0]->type->elem);
    nb_ir_inst *st = z ? nb_ir_new(&B->rb, NB_IR_TSTORE, NULL, 2 + rank) : NULL;
    if (!st) return;
    for (int i = 0; i <= rank; i++) st->ops[i] = ops[i];
    st->ops[1 + rank] = z;
    st->flags |= NB_IRF_TGRAD;
}

static void rev_block(bwd *B, nb_ir_block *bl);
static void rev_range(bwd *B, nb_ir_inst *first, nb_ir_inst *last);

/* Whether a value of type t holds a DiffTensor: itself, or in a field or element at any depth
 * (a struct of views such as slang-torch's `struct Linear { DiffTensorView weights, bias; }`).
 * Reads of such views add their gradients to the views' gradient arrays, so a call taking one has
 * a backward even when no parameter is differentiable. */
static int holds_diff_tensor(const nb_type *t, int depth)
{
    if (!t || depth > 16) return 0;
    if (t->kind == NB_TY_TENSOR) return t->diff_tensor;
    if (t->kind == NB_TY_ARRAY) return holds_diff_tensor(t->elem, depth + 1);
    if (t->kind == NB_TY_STRUCT && t->decl)
        for (int i = 0; i < t->decl->u.strct.nfields; i++) {
            const nb_decl *fd = t->decl->u.strct.fields[i];
            if (fd && holds_diff_tensor(fd->u.var.type, depth + 1)) return 1;
        }
    return 0;
}

static void rev_call(bwd *B, nb_ir_inst *in)
{
    nb_ir_builder *b = &B->rb;
    nb_ir_func *cf = in->callee;
    int n = cf->nparams;
    int has_adj = B->adji[in->id] != NULL, any_diff = 0;
    for (int i = 0; i < n; i++) {
        const nb_type *pt = cf->params[i]->type;
        if (holds_diff_tensor(pt, 0)) any_diff = 1; /* its reads add into the gradient arrays */
        if (nb_ad_param_is_ptr(cf->params[i])) any_diff = 1; /* (accesses through .d write gradients) */
        if (!nb_ad_param_is_diff(cf->params[i])) continue;
        any_diff = 1;
        if (in->refs[i] && cf->params[i]->dir != NB_DIR_IN && B->adjv[in->refs[i]->id]) has_adj = 1;
    }
    /* a user-given [BackwardDerivative] runs whenever a gradient flows back, also for a callee
     * without differentiable parameters: it may write gradients to a buffer (Slang) */
    if (cf->role == NB_IR_PRIMAL && cf->decl && cf->decl->u.func.bwd_derivative) any_diff = 1;
    /* a void callee's gradients may come from its side effects (buffer or DiffTensor writes that a
     * custom [BackwardDerivative] reads back): its backward derivative always runs */
    if (cf->ret->kind == NB_TY_VOID) has_adj = 1;
    if ((in->flags & NB_IRF_NO_DIFF) || !any_diff || !has_adj) return;
    nb_ir_func *bf = nb_ad_bwd_func(B->m, B->src, cf, in->loc);
    if (!bf) {
        B->errors++;
        return;
    }
    nb_ir_inst **args = nb_arena_zalloc(&B->m->arena, sizeof *args * (size_t)(bf->nparams + 1), sizeof(void *));
    nb_ir_var **refs = nb_arena_zalloc(&B->m->arena, sizeof *refs * (size_t)(bf->nparams + 1), sizeof(void *));
    nb_ir_var **tmps = nb_arena_zalloc(&B->m->arena, sizeof *tmps * (size_t)(n + 1), sizeof(void *));
    if (!args || !refs || !tmps) return;
    int k = 0, nh = 0;
    for (int i = 0; i < n; i++) nh += !!(cf->params[i]->flags & NB_IRF_HIDDEN);
    for (int i = 0; i < n && k < bf->nparams; i++) {
        nb_ir_var *p = cf->params[i];
        int d = nb_ad_param_is_diff(p);
        if (p->flags & NB_IRF_HIDDEN) continue; /* (after the result gradient, below) */
        nb_ir_var *av = in->refs[i] ? B->adjv[in->refs[i]->id] : NULL;
        if (nb_ad_param_is_ptr(p)) {
            if (!(args[k++] = nb_ad_ptr_arg(b, B->src, B->pairv, in, i))) {
                B->errors++;
                return;
            }
            continue;
        }
        if (!d) {
            if (p->dir == NB_DIR_IN) args[k++] = P(B, in->ops[i]);
            else if (p->dir == NB_DIR_INOUT) { /* its value before the call */
                nb_ir_var *sv = B->snapv[in->id] ? B->snapv[in->id][i] : NULL;
                args[k++] = sv ? replay(B, sv, in) : nb_ir_zero(b, p->type);
            }
            continue;
        }
        if (p->dir == NB_DIR_OUT) {
            args[k++] = av ? nb_ir_load(b, av, NULL, 0, NULL) : flt_zero(B, b, p->type);
            if (av) nb_ir_store(b, av, NULL, 0, NULL, flt_zero(B, b, p->type));
            continue;
        }
        nb_ir_var *t = tmpvar(B, p->name, bf->params[k]->type);
        nb_ir_inst *ops[2];
        if (p->dir == NB_DIR_IN) {
            ops[0] = P(B, in->ops[i]);
            ops[1] = flt_zero(B, b, p->type);
        } else {
            nb_ir_var *sv = B->snapv[in->id] ? B->snapv[in->id][i] : NULL;
            ops[0] = sv ? replay(B, sv, in) : nb_ir_zero(b, p->type);
            ops[1] = av ? nb_ir_load(b, av, NULL, 0, NULL) : flt_zero(B, b, p->type);
        }
        nb_ir_store(b, t, NULL, 0, NULL, nb_ir_construct(b, t->type, ops, 2));
        tmps[i] = t;
        refs[k++] = t;
    }
    if (k < bf->nparams - nh) /* result gradient */
        args[k++] = B->adji[in->id] ? nb_ir_load(b, B->adji[in->id], NULL, 0, NULL) : flt_zero(B, b, cf->ret);
    for (int i = 0; i < n && k < bf->nparams; i++) /* module-scope buffers passed on */
        if (cf->params[i]->flags & NB_IRF_HIDDEN) {
            if (cf->params[i]->dir == NB_DIR_IN) args[k++] = P(B, in->ops[i]);
            else refs[k++] = in->refs[i] ? B->cl.vmap[in->refs[i]->id] : NULL; /* (groupshared) */
        }
    nb_ir_inst *call = nb_ir_new(b, NB_IR_CALL, bf->ret, bf->nparams);
    if (!call) return;
    call->callee = bf;
    call->refs = refs;
    for (int i = 0; i < bf->nparams; i++) call->ops[i] = args[i];
    for (int i = 0; i < n; i++) {
        if (!tmps[i]) continue;
        nb_ir_inst *g = nb_ir_extract(b, nb_ir_load(b, tmps[i], NULL, 0, NULL), 1);
        if (cf->params[i]->dir == NB_DIR_IN) accum(B, in->ops[i], g);
        else if (B->adjv[in->refs[i]->id]) nb_ir_store(b, B->adjv[in->refs[i]->id], NULL, 0, NULL, g);
    }
}

/* Paths of a LOAD/STORE with the primal index values replayed; a trailing swizzle is returned
 * separately (accumulated component by component). */
static int rev_path(bwd *B, nb_ir_inst *in, int base, nb_ir_step *st, nb_ir_inst **idx, int *swz, int *nswz)
{
    int n = 0, ni = 0;
    *nswz = 0;
    for (int i = 0; i < in->npath && i < 16; i++) {
        const nb_ir_step *s = &in->path[i];
        if (s->kind == NB_IR_STEP_SWIZZLE) {
            memcpy(swz, s->swz, sizeof(int) * 4);
            *nswz = s->nswz;
            continue;
        }
        st[n] = *s;
        if (s->kind == NB_IR_STEP_INDEX) idx[ni++] = P(B, in->ops[s->index]);
        n++;
        (void)base;
    }
    return n;
}

static void rev_inst(bwd *B, nb_ir_inst *in)
{
    nb_ir_builder *b = &B->rb;
    b->loc = in->loc;
    switch (in->op) {
    case NB_IR_IF: {
        nb_ir_inst *iff = nb_ir_if(b, P(B, in->ops[0]));
        if (!iff) return;
        nb_ir_block *save = b->block;
        b->block = iff->blocks[0];
        rev_block(B, in->blocks[0]);
        b->block = iff->blocks[1];
        rev_block(B, in->blocks[1]);
        b->block = save;
        return;
    }
    case NB_IR_SWITCH: {
        nb_ir_inst *sel = P(B, in->ops[0]); /* (before the switch: it may load a spill) */
        nb_ir_inst *sw = nb_ir_new(b, NB_IR_SWITCH, NULL, 1);
        if (!sw) return;
        sw->ops[0] = sel;
        sw->nblocks = in->nblocks;
        sw->cases = in->cases;
        sw->blocks = nb_arena_zalloc(&B->m->arena, sizeof(nb_ir_block *) * (size_t)(in->nblocks ? in->nblocks : 1), sizeof(void *));
        nb_ir_block *save = b->block;
        for (int k = 0; k < in->nblocks && sw->blocks; k++) {
            nb_ir_block *cb = in->blocks[k];
            if (!nb_ir_block_terminated(cb) && k + 1 < in->nblocks)
                berr(B, in->loc, "reverse mode does not support switch fall-through yet", NULL);
            sw->blocks[k] = nb_ir_block_new(B->df, sw);
            b->block = sw->blocks[k];
            rev_block(B, cb);
            nb_ir_jump(b, NB_IR_BREAK, NULL);
        }
        b->block = save;
        return;
    }
    case NB_IR_LOOP: {
        loopinfo *L = B->loops[in->id];
        if (!L || !L->trips) return;
        nb_ir_var *rk = tmpvar(B, "nb_rk", B->tt->t_int);
        nb_ir_store(b, rk, NULL, 0, NULL, replay(B, L->trips, in));
        nb_ir_inst *lp = nb_ir_loop(b);
        if (!lp) return;
        if (unroll_sweeps(in, L->max)) lp->flags |= NB_IRF_UNROLL;
        nb_ir_block *save = b->block;
        b->block = lp->blocks[0];
        nb_ir_inst *cur = nb_ir_load(b, rk, NULL, 0, NULL);
        lp->ops[0] = nb_ir_binary(b, NB_IR_GT, cur, nb_ir_const_i(b, B->tt->t_int, 0));
        b->block = lp->blocks[1];
        nb_ir_inst *r1 = nb_ir_binary(b, NB_IR_SUB, nb_ir_load(b, rk, NULL, 0, NULL), nb_ir_const_i(b, B->tt->t_int, 1));
        nb_ir_store(b, rk, NULL, 0, NULL, r1);
        L->rev_index = r1;
        if (L->brk_rec) { /* the step ran unless this iteration broke */
            nb_ir_inst *broke = replay(B, L->brk_rec, in->blocks[1]->first);
            nb_ir_inst *iff = nb_ir_if(b, nb_ir_unary(b, NB_IR_NOT, broke));
            if (iff) {
                b->block = iff->blocks[0];
                rev_block(B, in->blocks[2]);
                b->block = lp->blocks[1];
            }
        } else {
            rev_block(B, in->blocks[2]);
        }
        rev_block(B, in->blocks[1]);
        L->rev_index = NULL;
        b->block = save;
        return;
    }
    case NB_IR_RETURN:
        if (in->nops && B->dout) accum(B, in->ops[0], nb_ir_load(b, B->dout, NULL, 0, NULL));
        return;
    case NB_IR_STORE: {
        nb_ir_var *av = B->adjv[in->var->id];
        if (!av || !nb_ad_dtype(B->tt, in->ops[0]->type)) return;
        nb_ir_step st[17];
        nb_ir_inst *idx[17];
        int swz[4], nswz;
        int n = rev_path(B, in, 1, st, idx, swz, &nswz);
        if (!nb_ad_tangent_steps(B->tt, in->var->type, st, n)) return; /* a field without a tangent */
        if (nswz) { /* component by component */
            for (int k = 0; k < nswz; k++) {
                memset(&st[n], 0, sizeof st[n]);
                st[n].kind = NB_IR_STEP_INDEX;
                int ni = 0;
                for (int i = 0; i < n; i++) ni += st[i].kind == NB_IR_STEP_INDEX;
                idx[ni] = nb_ir_const_i(b, B->tt->t_int, swz[k]);
                nb_ir_inst *a = nb_ir_load(b, av, st, n + 1, idx);
                accum_step(B, in->ops[0], k, NULL, a);
                nb_ir_store(b, av, st, n + 1, idx, nb_ir_zero(b, a->type));
            }
            return;
        }
        nb_ir_inst *a = nb_ir_load(b, av, st, n, idx);
        accum(B, in->ops[0], a);
        nb_ir_store(b, av, st, n, idx, nb_ir_zero(b, a->type));
        return;
    }
    case NB_IR_CALL:
        rev_call(B, in);
        break;
    case NB_IR_BREAK: case NB_IR_CONTINUE:
        return;
    case NB_IR_TSTORE: case NB_IR_TATOMIC_ADD: {
        /* a DiffTensor element written (or added to): its gradient flows back to the value */
        const nb_type *tt = in->ops[0]->type;
        nb_ir_inst *v = in->ops[in->nops - 1];
        if (tt->diff_tensor && wants_adj(B, v)) accum(B, v, tgrad_load(B, in));
        if (in->op == NB_IR_TSTORE && tt->diff_tensor && !(in->flags & NB_IRF_ONCE)) tgrad_consume(B, in);
        if (in->op == NB_IR_TSTORE) return;
        goto consume; /* (the old value an atomic add returns gets no gradient) */
    }
    default:
        break;
    }
    if (in->op == NB_IR_CALL) goto consume;
    /* value instructions: propagate adj(in) to the operands */
    if (!B->adji[in->id] || (in->flags & NB_IRF_NO_DIFF)) return;
    nb_ir_inst *a = nb_ir_load(b, B->adji[in->id], NULL, 0, NULL);
    nb_ir_inst **x = in->ops;
    switch (in->op) {
    case NB_IR_NEG: accum(B, x[0], nb_ad_neg(b, a)); break;
    case NB_IR_ADD: accum(B, x[0], a); accum(B, x[1], a); break;
    case NB_IR_SUB: accum(B, x[0], a); accum(B, x[1], nb_ad_neg(b, a)); break;
    case NB_IR_MUL:
        if (wants_adj(B, x[0])) accum(B, x[0], nb_ad_mul(b, a, P(B, x[1])));
        if (wants_adj(B, x[1])) accum(B, x[1], nb_ad_mul(b, a, P(B, x[0])));
        break;
    case NB_IR_DIV: {
        if (!wants_adj(B, x[0]) && !wants_adj(B, x[1])) break;
        nb_ir_inst *den = P(B, x[1]);
        nb_ir_inst *g = nb_ir_binary(b, NB_IR_DIV, a, den);
        accum(B, x[0], g);
        if (wants_adj(B, x[1])) accum(B, x[1], nb_ad_neg(b, nb_ad_mul(b, g, P(B, in))));
        break;
    }
    case NB_IR_MOD:
        accum(B, x[0], a);
        if (wants_adj(B, x[1])) {
            nb_ir_inst *q = nb_ir_binary(b, NB_IR_DIV, P(B, x[0]), P(B, x[1]));
            accum(B, x[1], nb_ad_neg(b, nb_ad_mul(b, a, nb_ir_intrin(b, NB_INTR_TRUNC, q->type, &q, 1))));
        }
        break;
    case NB_IR_CONVERT:
        if (nb_ad_dtype(B->tt, x[0]->type)) accum(B, x[0], nb_ir_convert(b, a, x[0]->type));
        break;
    case NB_IR_SPLAT:
        if (nb_ad_dtype(B->tt, x[0]->type)) accum(B, x[0], nb_ad_sum_all(b, a));
        break;
    case NB_IR_SELECT: {
        nb_ir_inst *c = P(B, x[0]);
        if (wants_adj(B, x[1])) accum(B, x[1], nb_ir_select(b, c, a, nb_ir_zero(b, a->type)));
        if (wants_adj(B, x[2])) accum(B, x[2], nb_ir_select(b, c, nb_ir_zero(b, a->type), a));
        break;
    }
    case NB_IR_CONSTRUCT:
        for (int i = 0; i < in->nops; i++) {
            if (!wants_adj(B, x[i])) continue;
            nb_ir_inst *g;
            if (in->type->kind == NB_TY_MATRIX && x[i]->type->kind == NB_TY_SCALAR)
                g = nb_ir_extract(b, nb_ir_extract(b, a, i / in->type->cols), i % in->type->cols);
            else if (in->type->kind == NB_TY_STRUCT) {
                int k = nb_ad_field_map(B->tt, in->type, i);
                if (k < 0) continue;
                g = nb_ir_extract(b, a, k);
            } else g = nb_ir_extract(b, a, i);
            accum(B, x[i], g);
        }
        break;
    case NB_IR_EXTRACT:
        if (in->nops > 1) accum_step(B, x[0], 0, P(B, x[1]), a);
        else accum_step(B, x[0], in->field, NULL, a);
        break;
    case NB_IR_SWIZZLE:
        for (int k = 0; k < in->nswz; k++)
            accum_step(B, x[0], in->swz[k], NULL, in->type->kind == NB_TY_SCALAR ? a : nb_ir_extract(b, a, k));
        break;
    case NB_IR_INTRIN: {
        if (in->intrinsic == NB_INTR_DETACH) break;
        nb_ir_inst *px[8], *g[8];
        int n = in->nops < 8 ? in->nops : 8;
        for (int i = 0; i < n; i++) px[i] = P(B, x[i]);
        if (nb_ad_vjp(b, in->intrinsic, P(B, in), px, n, a, g) < 0) {
            berr(B, in->loc, "this intrinsic has no derivative rule: ", nb_intrinsic_name(in->intrinsic));
            break;
        }
        for (int i = 0; i < n; i++) accum(B, x[i], g[i]);
        break;
    }
    case NB_IR_TLOAD: /* a DiffTensor element read: its gradient is added to the gradient buffer */
        if (in->ops[0]->type->diff_tensor && in->nops <= 9) {
            nb_ir_inst *ops[10];
            for (int i = 0; i < in->nops; i++) ops[i] = P(B, in->ops[i]); /* (before the add: SSA order) */
            nb_ir_inst *at = nb_ir_new(b, NB_IR_TATOMIC_ADD, in->type, in->nops + 1);
            if (!at) break;
            for (int i = 0; i < in->nops; i++) at->ops[i] = ops[i];
            at->ops[in->nops] = a;
            at->flags |= NB_IRF_TGRAD;
        }
        break;
    case NB_IR_LOAD: {
        nb_ir_var *av = B->adjv[in->var->id];
        if (!av) break;
        nb_ir_step st[17];
        nb_ir_inst *idx[17];
        int swz[4], nswz;
        int n = rev_path(B, in, 0, st, idx, swz, &nswz);
        if (!nb_ad_tangent_steps(B->tt, in->var->type, st, n)) break; /* a field without a tangent */
        if (!nswz) {
            accum_var(B, av, st, n, idx, a, in->loc);
            break;
        }
        int ni = 0;
        for (int i = 0; i < n; i++) ni += st[i].kind == NB_IR_STEP_INDEX;
        for (int k = 0; k < nswz; k++) {
            memset(&st[n], 0, sizeof st[n]);
            st[n].kind = NB_IR_STEP_INDEX;
            idx[ni] = nb_ir_const_i(b, B->tt->t_int, swz[k]);
            accum_var(B, av, st, n + 1, idx, in->type->kind == NB_TY_SCALAR ? a : nb_ir_extract(b, a, k), in->loc);
        }
        break;
    }
    default:
        break;
    }
consume:
    /* consumed: reset, so an enclosing loop's earlier iteration starts from zero */
    if (B->adji[in->id]) {
        nb_ir_inst *lp[MAX_LOOPS];
        if (enclosing_loops(in, lp)) nb_ir_store(b, B->adji[in->id], NULL, 0, NULL, nb_ir_zero(b, B->adji[in->id]->type));
    }
}

/* Reverses [first, last] of one region; the part after a guarded (may-return) instruction runs
 * under its guard. The first guard of the range is taken, so later guards nest inside it: a guard
 * is recorded only when the region before it went on, and must not be read otherwise. */
static void rev_range(bwd *B, nb_ir_inst *first, nb_ir_inst *last)
{
    if (!first || !last) return;
    for (nb_ir_inst *k = first;; k = k->next) {
        if (k == last) break;
        if (B->guardv[k->id]) {
            nb_ir_builder *b = &B->rb;
            nb_ir_inst *iff = nb_ir_if(b, replay(B, B->guardv[k->id], k));
            if (iff) {
                nb_ir_block *save = b->block;
                b->block = iff->blocks[0];
                rev_range(B, k->next, last);
                b->block = save;
            }
            rev_range(B, first, k);
            return;
        }
    }
    for (nb_ir_inst *k = last;; k = k->prev) {
        rev_inst(B, k);
        if (k == first) break;
    }
}

static void rev_block(bwd *B, nb_ir_block *bl) { rev_range(B, bl->first, bl->last); }

/* ---- the function ------------------------------------------------------------------------ */

static nb_ir_func *bwd_func(nb_ir_module *m, nb_source_set *src, nb_ir_func *primal, nb_loc loc, int with_result)
{
    if (primal->role == NB_IR_PRIMAL && primal->decl && primal->decl->u.func.bwd_derivative) {
        nb_ir_func *g = nb_ir_find_func(m, primal->decl->u.func.bwd_derivative);
        if (g) return with_result ? NULL : g;
    }
    nb_ir_func *sub = nb_ad_primal_subst(m, primal);
    if (sub) return bwd_func(m, src, sub, loc, with_result); /* (a custom derivative was taken above) */
    if (primal->derivs[1 + !!with_result]) return primal->derivs[1 + !!with_result];
    /* A derivative (role FWD_DERIV / BWD_DERIV: reverse-over-forward, reverse-over-reverse) is
     * differentiated like any function: its pair parameters are differentiable values. */
    if (primal->role == NB_IR_PRIMAL && !(primal->differentiable || (primal->decl && (primal->decl->u.func.fwd_derivative || primal->decl->u.func.bwd_derivative)))) {
        nb_ad_error(src, loc, "'%s' is not differentiable (add [Differentiable])", primal->name);
        return NULL;
    }
    if (nb_ad_target_specific(src, primal, loc)) return NULL;
    nb_type_table *tt = m->types;
    char name[300];
    snprintf(name, sizeof name, "%s_bwd%s", primal->cname, with_result ? "r" : "");
    nb_ir_unique_cname(m, name, sizeof name); /* (a user function may be called sq_bwd) */
    nb_ir_func *d = nb_ir_func_new(m, name, with_result ? primal->ret : tt->t_void);
    if (!d) return NULL;
    d->role = NB_IR_BWD_DERIV;
    d->returns_primal = with_result;
    d->primal = primal;
    d->has_tid = primal->has_tid; /* (it reads the thread ids where the primal does) */
    primal->derivs[1 + !!with_result] = d;
    d->decl = primal->decl; /* (diagnostics in it belong to the primal; nb_ir_find_func skips it by role) */
    d->aux = (void *)1;
    /* pass 0: the parameters; 1: _dout; 2: the module-scope buffers passed on (NB_IRF_HIDDEN,
     * check_kernel.c), last as in every call that passes them */
    for (int pass = 0; pass < 3; pass++) {
        if (pass == 1) {
            if (primal->ret->kind != NB_TY_VOID && nb_type_is_differentiable(primal->ret))
                if (!nb_ir_param_new(d, "_dout", nb_ad_dtype(tt, primal->ret), NB_DIR_IN)) return NULL;
            continue;
        }
        for (int i = 0; i < primal->nparams; i++) {
            nb_ir_var *p = primal->params[i];
            nb_ir_var *q;
            if (!(p->flags & NB_IRF_HIDDEN) != (pass == 0)) continue;
            if (nb_ad_param_is_diff(p)) {
                if (p->dir == NB_DIR_OUT) q = nb_ir_param_new(d, p->name, nb_ad_dtype(tt, p->type), NB_DIR_IN);
                else q = nb_ir_param_new(d, p->name, nb_type_diffpair(tt, p->type), NB_DIR_INOUT);
            } else if (pass == 2) { /* (a groupshared array is passed inout: it stays so) */
                q = nb_ir_param_new(d, p->name, p->type, p->dir);
            } else if (nb_ad_param_is_ptr(p)) { /* DifferentialPtrPair<P>, in (lang/ad.h) */
                q = nb_ir_param_new(d, p->name, nb_type_ptr_pair(p->type), NB_DIR_IN);
            } else if (p->dir != NB_DIR_OUT) { /* (a non-differentiable inout: its value going in) */
                q = nb_ir_param_new(d, p->name, p->type, NB_DIR_IN);
            } else continue;
            if (!q) return NULL;
            q->flags = p->flags;
        }
    }
    return d;
}

nb_ir_func *nb_ad_bwd_func(nb_ir_module *m, nb_source_set *src, nb_ir_func *primal, nb_loc loc)
{
    return bwd_func(m, src, primal, loc, 0);
}

nb_ir_func *nb_ad_bwdr_func(nb_ir_module *m, nb_source_set *src, nb_ir_func *primal, nb_loc loc)
{
    return bwd_func(m, src, primal, loc, 1);
}

int nb_ad_gen_bwd(nb_ir_module *m, nb_source_set *src, nb_ir_func *df)
{
    nb_ir_func *pf = df->primal;
    nb_ad_normalize_switches(m, pf); /* (before anything is sized by pf's ids and vars) */
    bwd B;
    memset(&B, 0, sizeof B);
    B.m = m;
    B.tt = m->types;
    B.src = src;
    B.pf = pf;
    B.df = df;
    size_t ni = (size_t)(pf->next_id + 1), nv = (size_t)(pf->nvars + 1);
    nb_arena *a = &m->arena;
    B.cl.pmap = nb_arena_zalloc(a, sizeof(void *) * ni, sizeof(void *));
    B.cl.vmap = nb_arena_zalloc(a, sizeof(void *) * nv, sizeof(void *));
    B.adjv = nb_arena_zalloc(a, sizeof(void *) * nv, sizeof(void *));
    B.adji = nb_arena_zalloc(a, sizeof(void *) * ni, sizeof(void *));
    B.spill = nb_arena_zalloc(a, sizeof(void *) * ni, sizeof(void *));
    B.guardv = nb_arena_zalloc(a, sizeof(void *) * ni, sizeof(void *));
    B.snapv = nb_arena_zalloc(a, sizeof(void *) * ni, sizeof(void *));
    B.loops = nb_arena_zalloc(a, sizeof(void *) * ni, sizeof(void *));
    B.pvar = nb_arena_zalloc(a, sizeof(void *) * (size_t)(pf->nparams + 1), sizeof(void *));
    B.bparam = nb_arena_zalloc(a, sizeof(int) * (size_t)(pf->nparams + 1), sizeof(int));
    B.pairv = nb_arena_zalloc(a, sizeof(void *) * nv, sizeof(void *));
    if (!B.cl.pmap || !B.cl.vmap || !B.adjv || !B.adji || !B.spill || !B.guardv || !B.snapv || !B.loops || !B.pvar ||
        !B.bparam || !B.pairv)
        return 1;
    nb_ir_builder *b = &B.cl.b;
    b->m = m;
    b->f = df;
    b->block = df->body;
    b->loc = pf->decl ? pf->decl->loc : (nb_loc){0};
    b->flags = NB_IRF_DERIV;
    B.cl.ud = &B;
    B.cl.pre = fwd_pre;
    B.cl.post = fwd_post;
    /* parameters */
    int k = 0, nh = 0;
    for (int i = 0; i < pf->nparams; i++) {
        nb_ir_var *p = pf->params[i];
        int keep = !(p->flags & NB_IRF_HIDDEN) && (nb_ad_param_is_diff(p) || p->dir != NB_DIR_OUT);
        B.bparam[i] = keep ? k++ : -1;
        if (p->flags & NB_IRF_HIDDEN) nh++;
    }
    if (k < df->nparams - nh) B.dout = df->params[k++];
    for (int i = 0; i < pf->nparams; i++) /* the buffers passed on: after _dout (bwd_func) */
        if (pf->params[i]->flags & NB_IRF_HIDDEN) B.bparam[i] = k++;
    B.ret_flag = tmpvar(&B, "nb_returned", B.tt->t_bool);
    nb_ir_store(b, B.ret_flag, NULL, 0, NULL, nb_ir_const_i(b, B.tt->t_bool, 0));
    if (pf->ret->kind != NB_TY_VOID) B.ret_var = tmpvar(&B, "nb_retval", pf->ret);
    for (int i = 0; i < pf->nvars; i++) {
        nb_ir_var *v = pf->vars[i];
        int diff = !(v->flags & NB_IRF_NO_DIFF) && nb_ad_dtype(B.tt, v->type) != NULL;
        if (v->param >= 0 && nb_ad_param_is_ptr(v)) { /* its primal: a local copy of the pair's .p */
            nb_ir_var *q = df->params[B.bparam[v->param]];
            nb_ir_var *lv = nb_ir_var_new(df, v->name, v->type);
            if (!lv) return 1;
            nb_ir_store(b, lv, NULL, 0, NULL, nb_ir_extract(b, nb_ir_load(b, q, NULL, 0, NULL), 0));
            B.cl.vmap[v->id] = lv;
            B.pairv[v->id] = q;
            continue;
        }
        if (v->param >= 0 && !nb_ad_param_is_diff(v) && (v->dir == NB_DIR_IN || (v->flags & NB_IRF_HIDDEN))) {
            B.cl.vmap[v->id] = df->params[B.bparam[v->param]];
            continue;
        }
        nb_ir_var *lv = nb_ir_var_new(df, v->name, v->type);
        if (!lv) return 1;
        lv->is_temp = v->is_temp;
        lv->decl = v->decl;
        B.cl.vmap[v->id] = lv;
        if (v->param >= 0) {
            B.pvar[v->param] = lv;
            if (nb_ad_param_is_diff(v) && v->dir != NB_DIR_OUT)
                nb_ir_store(b, lv, NULL, 0, NULL, nb_ir_extract(b, nb_ir_load(b, df->params[B.bparam[v->param]], NULL, 0, NULL), 0));
            else if (v->dir == NB_DIR_INOUT) /* non-differentiable inout: an in parameter of f_bwd */
                nb_ir_store(b, lv, NULL, 0, NULL, nb_ir_load(b, df->params[B.bparam[v->param]], NULL, 0, NULL));
            else nb_ir_store(b, lv, NULL, 0, NULL, nb_ir_zero(b, v->type));
            if (!nb_ad_param_is_diff(v)) diff = 0;
        }
        if (diff) {
            char nm[128];
            snprintf(nm, sizeof nm, "adj_%s", v->name);
            B.adjv[v->id] = tmpvar(&B, nm, nb_ad_dtype(B.tt, v->type));
        }
    }
    B.vstores = nb_arena_zalloc(a, sizeof(void *) * nv, sizeof(void *));
    B.nvstores = nb_arena_zalloc(a, sizeof(int) * nv, sizeof(int));
    if (!B.vstores || !B.nvstores) return 1;
    collect_writes(&B, pf->body);
    /* forward sweep */
    nb_ad_clone_block(&B.cl, pf->body);
    /* reverse sweep */
    b->block = df->body;
    B.mark = nb_ir_zero(b, B.tt->t_int);
    B.rb = *b;
    B.rb.block = df->body;
    for (int i = 0; i < pf->nvars; i++) {
        nb_ir_var *v = pf->vars[i];
        nb_ir_var *av = B.adjv[v->id];
        if (!av) continue;
        if (v->param >= 0 && v->dir != NB_DIR_IN) { /* inout: .d; out: the incoming gradient */
            nb_ir_inst *src0 = nb_ir_load(&B.rb, df->params[B.bparam[v->param]], NULL, 0, NULL);
            nb_ir_store(&B.rb, av, NULL, 0, NULL, v->dir == NB_DIR_INOUT ? nb_ir_extract(&B.rb, src0, 1) : src0);
        } else {
            nb_ir_store(&B.rb, av, NULL, 0, NULL, nb_ir_zero(&B.rb, av->type));
        }
    }
    rev_block(&B, pf->body);
    /* gradients of the parameters */
    nb_ir_builder *r = &B.rb;
    r->block = df->body;
    for (int i = 0; i < pf->nparams; i++) {
        nb_ir_var *p = pf->params[i];
        nb_ir_var *av = B.adjv[p->id];
        if (!av || !nb_ad_param_is_diff(p) || p->dir == NB_DIR_OUT) continue;
        nb_ir_var *q = df->params[B.bparam[i]];
        nb_ir_step st;
        memset(&st, 0, sizeof st);
        st.kind = NB_IR_STEP_FIELD;
        st.index = 1;
        /* Slang's rule: the pair's .d is SET to dL/dp (for `in`: its incoming value is ignored;
         * for `inout`: it held dL/d(output) and is replaced by dL/d(input)) */
        nb_ir_store(r, q, &st, 1, NULL, nb_ir_load(r, av, NULL, 0, NULL));
    }
    nb_ir_jump(r, NB_IR_RETURN, df->returns_primal && B.ret_var ? nb_ir_load(r, B.ret_var, NULL, 0, NULL) : NULL);
    return B.errors;
}

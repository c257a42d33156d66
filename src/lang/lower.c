/* Lowering: checked syntax tree (ast.h, conventions in check.h) -> structured IR (ir.h).
 *
 * Variables, parameters and `this` become IR vars; reads and writes of places (`a.pos[i].x`) are
 * single LOAD / STORE instructions with access paths. `&&`, `||` and `?:` become pure
 * instructions when their operands can be evaluated speculatively, else if-regions with a
 * temporary. out/inout arguments are passed by reference: a whole variable directly, any other
 * place through a temporary copied in (inout) and out again after the call (HLSL copy-in /
 * copy-out semantics).
 */
#include <stdio.h>
#include <string.h>

#include "lang/ad.h"
#include "lang/check.h"
#include "lang/intrinsics.h"
#include "lang/ir.h"
#include "lang/lexer.h"
#include "lang/lower_target.h"
#include "lang/program.h"
#include "core/strmap.h"

#define MAX_PATH 16

/* decl -> value maps: the latest put wins; hashed (a function with 50,000 locals stays linear) */
typedef struct map_ent {
    nb_ptrmap map;
} map_ent;

typedef struct lower_ctx {
    nb_program *p;
    nb_ir_module *m;
    nb_type_table *tt;
    nb_source_set *src;
    nb_ir_builder b;
    nb_ir_var *this_var;
    map_ent *vars; /* decl -> var, for the function being lowered */
    int nvars, cap_vars;
    map_ent *globals; /* decl -> nb_ir_global */
    int nglobals, cap_globals;
    nb_strmap cnames; /* cnames of m->funcs[0 .. ncnames) (declare_func) */
    int ncnames;
    int error;
    unsigned target;   /* NB_TGT_* of the function being lowered (0: any; lower_target.h) */
    int declaring_alt; /* declare_func is making the second target's variant */
} lower_ctx;

/* A place: a var and an access path, or a tensor element. */
typedef struct place {
    nb_ir_var *var;
    nb_ir_step steps[MAX_PATH];
    int nsteps;
    nb_ir_inst *idx[MAX_PATH];
    int nidx;
    nb_ir_inst *tensor; /* tensor element place */
    nb_ir_inst *ptr;    /* a place through a pointer: steps apply to its pointee (ir_ptr.c) */
    nb_ir_inst *tidx[8];
    int ntidx;
    int once;           /* a storeOnce element (NB_IRF_ONCE) */
} place;

static nb_ir_inst *lower_expr(lower_ctx *c, nb_expr *e);
static void lower_stmt(lower_ctx *c, nb_stmt *s);

static void lerr(lower_ctx *c, nb_loc loc, const char *msg, const char *arg)
{
    nb_diag_error(c->src, loc, "%s%s", msg, arg ? arg : "");
    c->error = 1;
}

/* ---- maps -------------------------------------------------------------------------------- */

static void *map_get(map_ent *m, int n, const void *key)
{
    return m && n ? nb_ptrmap_get(&m->map, key) : NULL;
}

/* (n counts puts: 0 means empty, and setting it to 0 empties the map) */
static int map_put(nb_arena *a, map_ent **m, int *n, int *cap, const void *key, void *val)
{
    if (!*m) {
        *m = nb_arena_alloc(a, sizeof **m, sizeof(void *));
        if (!*m) return 0;
        *cap = 1;
        *n = 0;
    }
    if (*n == 0) nb_ptrmap_init(&(*m)->map, a); /* a fresh table (the old one stays in the arena) */
    if (!nb_ptrmap_put(&(*m)->map, key, val)) return 0;
    (*n)++;
    return 1;
}

/* ---- small helpers ----------------------------------------------------------------------- */

static int is_float_kind(nb_scalar_kind s) { return s == NB_SC_FLOAT || s == NB_SC_DOUBLE || s == NB_SC_HALF; }

static nb_ir_inst *const_int(lower_ctx *c, int64_t v) { return nb_ir_const_i(&c->b, c->tt->t_int, v); }

static nb_ir_inst *one_of(lower_ctx *c, const nb_type *t)
{
    if (is_float_kind(nb_type_elem_scalar(t))) return nb_ir_const_f(&c->b, t, 1.0);
    return nb_ir_const_i(&c->b, t, 1);
}

/* Converts v to type t (the checker normally did this already: this only covers gaps). */
static nb_ir_inst *coerce(lower_ctx *c, nb_ir_inst *v, const nb_type *t, nb_loc loc)
{
    if (!v || !t || v->type == t) return v;
    const nb_type *vt = v->type;
    if (t->kind == NB_TY_ERROR || vt->kind == NB_TY_ERROR) return v;
    if (t->kind == NB_TY_PTR && vt->kind == NB_TY_PTR) { /* nullptr, (T*)p */
        if (v->op == NB_IR_ZERO) return nb_ir_zero(&c->b, t);
        nb_ir_inst *cv = nb_ir_new(&c->b, NB_IR_CONVERT, t, 1);
        if (cv) cv->ops[0] = v;
        return cv;
    }
    if (vt->kind == NB_TY_TORCH && t->kind == NB_TY_TENSOR) /* host code (check_expr.c ck_coerce) */
        return nb_ir_intrin(&c->b, NB_INTR_TORCH_VIEW, t, &v, 1);
    int vc = nb_type_components(vt), tc = nb_type_components(t);
    int vnum = vt->kind == NB_TY_SCALAR || vt->kind == NB_TY_VECTOR || vt->kind == NB_TY_MATRIX;
    int tnum = t->kind == NB_TY_SCALAR || t->kind == NB_TY_VECTOR || t->kind == NB_TY_MATRIX;
    if (vnum && tnum) {
        if (vc == tc && (vt->kind == t->kind || vc == 1)) return nb_ir_convert(&c->b, v, t);
        if (vt->kind == NB_TY_SCALAR) return nb_ir_convert(&c->b, v, t);
        if (vt->kind == NB_TY_VECTOR && t->kind == NB_TY_SCALAR)
            return nb_ir_convert(&c->b, nb_ir_extract(&c->b, v, 0), t);
        if (vt->kind == NB_TY_VECTOR && t->kind == NB_TY_VECTOR && tc < vc) {
            int swz[4] = {0, 1, 2, 3};
            return nb_ir_convert(&c->b, nb_ir_swizzle(&c->b, v, swz, tc), t);
        }
    }
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    nb_strbuf_append(&sb, "internal: cannot convert '");
    nb_type_print(vt, &sb);
    nb_strbuf_append(&sb, "' to '");
    nb_type_print(t, &sb);
    nb_strbuf_append(&sb, "' while lowering");
    lerr(c, loc, nb_strbuf_cstr(&sb), NULL);
    nb_strbuf_free(&sb);
    return nb_ir_zero(&c->b, t);
}

static nb_ir_op binop_of(int tok)
{
    switch (tok) {
    case NB_TOK_PLUS: case NB_TOK_PLUS_ASSIGN: return NB_IR_ADD;
    case NB_TOK_MINUS: case NB_TOK_MINUS_ASSIGN: return NB_IR_SUB;
    case NB_TOK_STAR: case NB_TOK_STAR_ASSIGN: return NB_IR_MUL;
    case NB_TOK_SLASH: case NB_TOK_SLASH_ASSIGN: return NB_IR_DIV;
    case NB_TOK_PERCENT: case NB_TOK_PERCENT_ASSIGN: return NB_IR_MOD;
    case NB_TOK_AMP: case NB_TOK_AMP_ASSIGN: return NB_IR_BAND;
    case NB_TOK_PIPE: case NB_TOK_PIPE_ASSIGN: return NB_IR_BOR;
    case NB_TOK_CARET: case NB_TOK_CARET_ASSIGN: return NB_IR_BXOR;
    case NB_TOK_SHL: case NB_TOK_SHL_ASSIGN: return NB_IR_SHL;
    case NB_TOK_SHR: case NB_TOK_SHR_ASSIGN: return NB_IR_SHR;
    case NB_TOK_ANDAND: return NB_IR_LAND;
    case NB_TOK_OROR: return NB_IR_LOR;
    case NB_TOK_LT: return NB_IR_LT;
    case NB_TOK_LE: return NB_IR_LE;
    case NB_TOK_GT: return NB_IR_GT;
    case NB_TOK_GE: return NB_IR_GE;
    case NB_TOK_EQ: return NB_IR_EQ;
    case NB_TOK_NE: return NB_IR_NE;
    default: return NB_IR_OP_COUNT;
    }
}

/* Is e built only from values, +, -, *, negation, comparisons, member/swizzle reads, casts and
 * constructors, so that its derivative is finite wherever its operands are (no intrinsic
 * calls, divisions or calls)? Decides between a select and a branch for ?: in differentiable
 * functions. */
static int ad_tame(const nb_expr *e)
{
    if (!e) return 1;
    switch (e->kind) {
    case NB_EX_INT: case NB_EX_FLOAT: case NB_EX_BOOL: case NB_EX_NAME: case NB_EX_TYPE:
        return 1;
    case NB_EX_UNARY:
        return ad_tame(e->u.unary.operand);
    case NB_EX_BINARY:
        if (e->u.binary.op == NB_TOK_SLASH || e->u.binary.op == NB_TOK_PERCENT) return 0;
        return ad_tame(e->u.binary.lhs) && ad_tame(e->u.binary.rhs);
    case NB_EX_TERNARY:
        return ad_tame(e->u.ternary.cond) && ad_tame(e->u.ternary.then_e) && ad_tame(e->u.ternary.else_e);
    case NB_EX_CALL:
        if (e->ref != NB_REF_TYPE) return 0;
        for (int i = 0; i < e->u.call.nargs; i++)
            if (!ad_tame(e->u.call.args[i])) return 0;
        return 1;
    case NB_EX_MEMBER:
        return ad_tame(e->u.member.base);
    case NB_EX_INDEX:
        return ad_tame(e->u.index.base);
    case NB_EX_CAST:
        return ad_tame(e->u.cast.operand);
    case NB_EX_INIT_LIST:
        for (int i = 0; i < e->u.init_list.nitems; i++)
            if (!ad_tame(e->u.init_list.items[i])) return 0;
        return 1;
    default:
        return 0;
    }
}

/* May e be evaluated even when the program would not evaluate it (no side effects, no traps,
 * no out-of-bounds reads)? Decides between pure selects and branches for ?:, && and ||. */
static int speculatable(const nb_expr *e)
{
    if (!e) return 1;
    switch (e->kind) {
    case NB_EX_INT: case NB_EX_FLOAT: case NB_EX_BOOL: case NB_EX_NAME: case NB_EX_TYPE:
        return 1;
    case NB_EX_UNARY:
        if (e->u.unary.op == NB_TOK_INC || e->u.unary.op == NB_TOK_DEC) return 0;
        return speculatable(e->u.unary.operand);
    case NB_EX_BINARY:
        if ((e->u.binary.op == NB_TOK_SLASH || e->u.binary.op == NB_TOK_PERCENT) && e->type &&
            !is_float_kind(nb_type_elem_scalar(e->type)))
            return 0;
        return speculatable(e->u.binary.lhs) && speculatable(e->u.binary.rhs);
    case NB_EX_TERNARY:
        return speculatable(e->u.ternary.cond) && speculatable(e->u.ternary.then_e) &&
               speculatable(e->u.ternary.else_e);
    case NB_EX_CALL:
        if (e->ref == NB_REF_INTRINSIC) {
            if (e->index == NB_INTR_ATOMIC_ADD || e->index == NB_INTR_FWD_DIFF || e->index == NB_INTR_BWD_DIFF)
                return 0;
        } else if (e->ref != NB_REF_TYPE) {
            return 0;
        }
        for (int i = 0; i < e->u.call.nargs; i++)
            if (!speculatable(e->u.call.args[i])) return 0;
        return 1;
    case NB_EX_MEMBER:
        return speculatable(e->u.member.base);
    case NB_EX_INDEX:
        /* only constant in-range indices are safe to read early */
        for (int i = 0; i < e->u.index.nindices; i++)
            if (e->u.index.indices[i]->kind != NB_EX_INT) return 0;
        if (e->u.index.base->type && e->u.index.base->type->kind == NB_TY_TENSOR) return 0;
        return speculatable(e->u.index.base);
    case NB_EX_CAST:
        return speculatable(e->u.cast.operand);
    case NB_EX_INIT_LIST:
        for (int i = 0; i < e->u.init_list.nitems; i++)
            if (!speculatable(e->u.init_list.items[i])) return 0;
        return 1;
    default:
        return 0;
    }
}

/* ---- globals ----------------------------------------------------------------------------- */

static nb_ir_inst *lower_global_ref(lower_ctx *c, nb_expr *e, nb_decl *d)
{
    if (!d || d->kind != NB_DECL_VAR) {
        lerr(c, e->loc, "internal: unresolved global", NULL);
        return nb_ir_zero(&c->b, e->type);
    }
    const nb_type *t = d->u.var.type ? d->u.var.type : e->type;
    if (d->u.var.has_const && t->kind == NB_TY_SCALAR) {
        nb_ir_inst *k = is_float_kind(t->scalar) ? nb_ir_const_f(&c->b, t, d->u.var.const_f)
                                                 : nb_ir_const_i(&c->b, t, d->u.var.const_i);
        if (k) k->name = d->name;
        return k;
    }
    nb_ir_global *g = map_get(c->globals, c->nglobals, d);
    if (!g) {
        if (d->mods & NB_MOD_EXTERN)
            lerr(c, e->loc, "link-time constant has no value: ", d->name);
        else
            lerr(c, e->loc, "internal: global constant was not lowered: ", d->name);
        return nb_ir_zero(&c->b, t);
    }
    nb_ir_inst *in = nb_ir_new(&c->b, NB_IR_GLOBAL, g->type, 0);
    if (in) {
        in->global = g;
        in->name = d->name;
    }
    return in;
}

/* ---- places ------------------------------------------------------------------------------ */

static nb_ir_var *var_of_name(lower_ctx *c, nb_expr *e)
{
    if (e->ref == NB_REF_PARAM && e->index < 0) return c->this_var;
    if (e->ref == NB_REF_LOCAL || e->ref == NB_REF_PARAM) return map_get(c->vars, c->nvars, e->decl);
    return NULL;
}

/* Is e an addressable place rooted at a variable (no swizzle except outermost)? */
static int is_var_place(lower_ctx *c, const nb_expr *e, int allow_swizzle)
{
    switch (e->kind) {
    case NB_EX_NAME:
        return (e->ref == NB_REF_LOCAL || e->ref == NB_REF_PARAM) && var_of_name(c, (nb_expr *)e) != NULL;
    case NB_EX_MEMBER:
        if (e->ref == NB_REF_FIELD) return is_var_place(c, e->u.member.base, 0);
        if (e->ref == NB_REF_SWIZZLE && allow_swizzle) {
            const nb_type *bt = e->u.member.base->type;
            if (!bt || (bt->kind != NB_TY_VECTOR && bt->kind != NB_TY_SCALAR)) return 0;
            return is_var_place(c, e->u.member.base, 0);
        }
        return 0;
    case NB_EX_INDEX:
        if (!e->u.index.base->type || e->u.index.base->type->kind == NB_TY_TENSOR) return 0;
        if (e->u.index.nindices != 1) return 0;
        if (e->u.index.base->type->kind == NB_TY_PTR) return 1; /* p[i] */
        return is_var_place(c, e->u.index.base, 0);
    case NB_EX_UNARY:
        return e->u.unary.op == NB_TOK_STAR; /* *p */
    default:
        return 0;
    }
}

static int push_step(lower_ctx *c, place *pl, nb_ir_step st, nb_ir_inst *idx, nb_loc loc)
{
    if (pl->nsteps >= MAX_PATH) {
        lerr(c, loc, "access path too deep", NULL);
        return 0;
    }
    if (st.kind == NB_IR_STEP_INDEX) {
        st.index = pl->nidx;
        pl->idx[pl->nidx++] = idx;
    }
    pl->steps[pl->nsteps++] = st;
    return 1;
}

static void tensor_indices(lower_ctx *c, nb_expr *e, nb_ir_inst **out, int *n)
{
    const nb_type *tt = e->u.index.base->type;
    *n = 0;
    if (e->u.index.nindices == 1 && tt->rank > 1) {
        nb_ir_inst *v = lower_expr(c, e->u.index.indices[0]);
        for (int d = 0; d < tt->rank && d < 8; d++)
            out[(*n)++] = coerce(c, nb_ir_extract(&c->b, v, d), c->tt->t_int, e->loc);
        return;
    }
    for (int i = 0; i < e->u.index.nindices && i < 8; i++)
        out[(*n)++] = coerce(c, lower_expr(c, e->u.index.indices[i]), c->tt->t_int, e->loc);
}

static int lower_place(lower_ctx *c, nb_expr *e, place *pl)
{
    switch (e->kind) {
    case NB_EX_NAME: {
        nb_ir_var *v = var_of_name(c, e);
        if (!v) break;
        memset(pl, 0, sizeof *pl);
        pl->var = v;
        return 1;
    }
    case NB_EX_MEMBER: {
        nb_expr *base = e->u.member.base;
        if (e->ref == NB_REF_FIELD) {
            if (!lower_place(c, base, pl)) return 0;
            if (pl->tensor) break;
            nb_ir_step st = {NB_IR_STEP_FIELD, e->index, {0}, 0, NULL};
            return push_step(c, pl, st, NULL, e->loc);
        }
        if (e->ref == NB_REF_SWIZZLE) {
            if (!lower_place(c, base, pl)) return 0;
            if (pl->tensor) break;
            if (base->type->kind == NB_TY_SCALAR) return 1; /* s.x is s */
            if (e->u.member.swizzle_len == 1) {
                nb_ir_step st = {NB_IR_STEP_INDEX, 0, {0}, 0, NULL};
                return push_step(c, pl, st, const_int(c, e->u.member.swizzle[0]), e->loc);
            }
            nb_ir_step st = {NB_IR_STEP_SWIZZLE, 0, {0}, e->u.member.swizzle_len, NULL};
            memcpy(st.swz, e->u.member.swizzle, sizeof st.swz);
            return push_step(c, pl, st, NULL, e->loc);
        }
        break;
    }
    case NB_EX_UNARY:
        if (e->u.unary.op != NB_TOK_STAR) break;
        memset(pl, 0, sizeof *pl);
        pl->ptr = lower_expr(c, e->u.unary.operand);
        return pl->ptr != NULL;
    case NB_EX_INDEX: {
        nb_expr *base = e->u.index.base;
        if (base->type && base->type->kind == NB_TY_PTR) { /* p[i]: *(p + i) */
            nb_ir_inst *pv = lower_expr(c, base);
            nb_ir_inst *ix = coerce(c, lower_expr(c, e->u.index.indices[0]), c->tt->t_int, e->loc);
            memset(pl, 0, sizeof *pl);
            pl->ptr = nb_ir_padd(&c->b, pv, ix);
            return pl->ptr != NULL;
        }
        if (base->type && base->type->kind == NB_TY_TENSOR) {
            memset(pl, 0, sizeof *pl);
            pl->tensor = lower_expr(c, base);
            pl->once = e->tensor_once;
            tensor_indices(c, e, pl->tidx, &pl->ntidx);
            if (pl->ntidx != base->type->rank) {
                lerr(c, e->loc, "tensor index count does not match its rank", NULL);
                return 0;
            }
            return 1;
        }
        if (!lower_place(c, base, pl)) return 0;
        if (pl->tensor) break;
        nb_ir_inst *ix = coerce(c, lower_expr(c, e->u.index.indices[0]), c->tt->t_int, e->loc);
        nb_ir_step st = {NB_IR_STEP_INDEX, 0, {0}, 0, NULL};
        return push_step(c, pl, st, ix, e->loc);
    }
    default:
        break;
    }
    lerr(c, e->loc, "unsupported assignment target", NULL);
    return 0;
}

static nb_ir_inst *place_load(lower_ctx *c, place *pl, const nb_type *t)
{
    if (pl->tensor) {
        nb_ir_inst *in = nb_ir_new(&c->b, NB_IR_TLOAD, pl->tensor->type->elem, 1 + pl->ntidx);
        if (!in) return NULL;
        in->ops[0] = pl->tensor;
        for (int i = 0; i < pl->ntidx; i++) in->ops[1 + i] = pl->tidx[i];
        return in;
    }
    if (pl->ptr) return nb_ir_ptr_access(&c->b, NB_IR_PLOAD, NULL, pl->ptr, pl->steps, pl->nsteps, pl->idx, NULL);
    nb_ir_inst *v = nb_ir_load(&c->b, pl->var, pl->steps, pl->nsteps, pl->idx);
    (void)t;
    return v;
}

static void place_store(lower_ctx *c, place *pl, nb_ir_inst *value)
{
    if (pl->tensor) {
        nb_ir_inst *in = nb_ir_new(&c->b, NB_IR_TSTORE, NULL, 2 + pl->ntidx);
        if (!in) return;
        in->ops[0] = pl->tensor;
        for (int i = 0; i < pl->ntidx; i++) in->ops[1 + i] = pl->tidx[i];
        in->ops[1 + pl->ntidx] = value;
        if (pl->once) in->flags |= NB_IRF_ONCE;
        return;
    }
    if (pl->ptr) {
        if (pl->nsteps && pl->steps[pl->nsteps - 1].kind == NB_IR_STEP_SWIZZLE) {
            lerr(c, c->b.loc, "a swizzle store through a pointer is not supported (store the components one by one)",
                 NULL);
            return;
        }
        nb_ir_ptr_access(&c->b, NB_IR_PSTORE, NULL, pl->ptr, pl->steps, pl->nsteps, pl->idx, value);
        return;
    }
    nb_ir_store(&c->b, pl->var, pl->steps, pl->nsteps, pl->idx, value);
}

/* Type at the end of a place's path. */
static const nb_type *place_type(lower_ctx *c, place *pl)
{
    if (pl->tensor) return pl->tensor->type->elem;
    const nb_type *t = pl->ptr ? pl->ptr->type->elem : pl->var->type;
    for (int i = 0; i < pl->nsteps && t; i++) t = nb_ir_step_type(c->tt, t, &pl->steps[i]);
    return t;
}

/* ---- expressions ------------------------------------------------------------------------- */

static nb_ir_inst *lower_literal(lower_ctx *c, nb_expr *e)
{
    const nb_type *t = e->type;
    nb_scalar_kind s = nb_type_elem_scalar(t);
    if (e->kind == NB_EX_FLOAT) {
        if (is_float_kind(s)) return nb_ir_const_f(&c->b, t, e->u.flit.value);
        return nb_ir_const_i(&c->b, t, (int64_t)e->u.flit.value);
    }
    int64_t v = e->kind == NB_EX_BOOL ? (e->u.blit != 0) : (int64_t)e->u.ilit.value;
    if (is_float_kind(s)) return nb_ir_const_f(&c->b, t, (double)v);
    return nb_ir_const_i(&c->b, t, v);
}

/* Branching form of cond ? a : b, a && b, a || b: a temporary assigned in an if-region. */
static nb_ir_var *temp_var(lower_ctx *c, const nb_type *t, const char *name)
{
    nb_ir_var *v = nb_ir_var_new(c->b.f, name, t);
    if (v) v->is_temp = 1;
    return v;
}

static nb_ir_inst *lower_branchy(lower_ctx *c, nb_ir_inst *cond, nb_expr *then_e, nb_expr *else_e,
                                 const nb_type *t, nb_ir_inst *then_v, nb_ir_inst *else_v)
{
    nb_ir_var *tmp = temp_var(c, t, "sel");
    nb_ir_inst *iff = nb_ir_if(&c->b, cond);
    if (!tmp || !iff) return NULL;
    nb_ir_block *save = c->b.block;
    c->b.block = iff->blocks[0];
    nb_ir_inst *a = then_v ? then_v : coerce(c, lower_expr(c, then_e), t, then_e->loc);
    nb_ir_store(&c->b, tmp, NULL, 0, NULL, a);
    c->b.block = iff->blocks[1];
    nb_ir_inst *bb = else_v ? else_v : coerce(c, lower_expr(c, else_e), t, else_e->loc);
    nb_ir_store(&c->b, tmp, NULL, 0, NULL, bb);
    c->b.block = save;
    return nb_ir_load(&c->b, tmp, NULL, 0, NULL);
}

static nb_ir_inst *lower_logical(lower_ctx *c, nb_expr *e)
{
    int is_and = e->u.binary.op == NB_TOK_ANDAND;
    nb_ir_inst *l = coerce(c, lower_expr(c, e->u.binary.lhs), c->tt->t_bool, e->loc);
    if (speculatable(e->u.binary.rhs)) {
        nb_ir_inst *r = coerce(c, lower_expr(c, e->u.binary.rhs), c->tt->t_bool, e->loc);
        return nb_ir_binary(&c->b, is_and ? NB_IR_LAND : NB_IR_LOR, l, r);
    }
    /* a && b: if (a) t = b; else t = false.   a || b: if (a) t = true; else t = b. */
    nb_ir_var *tmp = temp_var(c, c->tt->t_bool, is_and ? "and" : "or");
    nb_ir_inst *iff = nb_ir_if(&c->b, l);
    if (!tmp || !iff) return NULL;
    nb_ir_block *save = c->b.block;
    c->b.block = iff->blocks[is_and ? 0 : 1];
    nb_ir_store(&c->b, tmp, NULL, 0, NULL, coerce(c, lower_expr(c, e->u.binary.rhs), c->tt->t_bool, e->loc));
    c->b.block = iff->blocks[is_and ? 1 : 0];
    nb_ir_store(&c->b, tmp, NULL, 0, NULL, nb_ir_const_i(&c->b, c->tt->t_bool, !is_and));
    c->b.block = save;
    return nb_ir_load(&c->b, tmp, NULL, 0, NULL);
}

static nb_ir_inst *lower_assign(lower_ctx *c, nb_expr *e)
{
    place pl;
    nb_expr *lhs = e->u.assign.lhs;
    int op = e->u.assign.op;
    /* evaluate the place (its indices) first, then the value */
    if (!lower_place(c, lhs, &pl)) return nb_ir_zero(&c->b, e->type);
    const nb_type *t = place_type(c, &pl);
    if (!t) t = lhs->type;
    nb_ir_inst *r = lower_expr(c, e->u.assign.rhs);
    nb_ir_inst *v;
    if (op == NB_TOK_ASSIGN) {
        v = coerce(c, r, t, e->loc);
    } else {
        nb_ir_inst *old = place_load(c, &pl, t);
        nb_ir_op bop = binop_of(op);
        if (bop == NB_IR_OP_COUNT) {
            lerr(c, e->loc, "internal: unknown compound assignment", NULL);
            return old;
        }
        v = nb_ir_binary(&c->b, bop, old, coerce(c, r, t, e->loc));
    }
    place_store(c, &pl, v);
    return v;
}

static nb_ir_inst *lower_incdec(lower_ctx *c, nb_expr *e)
{
    place pl;
    if (!lower_place(c, e->u.unary.operand, &pl)) return nb_ir_zero(&c->b, e->type);
    const nb_type *t = place_type(c, &pl);
    nb_ir_inst *old = place_load(c, &pl, t);
    nb_ir_inst *nv = nb_ir_binary(&c->b, e->u.unary.op == NB_TOK_INC ? NB_IR_ADD : NB_IR_SUB, old, one_of(c, t));
    place_store(c, &pl, nv);
    return e->u.unary.postfix ? old : nv;
}

static nb_ir_inst *lower_member(lower_ctx *c, nb_expr *e)
{
    if (e->ref == NB_REF_STATIC || e->ref == NB_REF_GLOBAL) return lower_global_ref(c, e, e->decl);
    if (is_var_place(c, e, 1)) {
        place pl;
        if (!lower_place(c, e, &pl)) return nb_ir_zero(&c->b, e->type);
        return place_load(c, &pl, e->type);
    }
    nb_ir_inst *base = lower_expr(c, e->u.member.base);
    if (e->ref == NB_REF_FIELD) return nb_ir_extract(&c->b, base, e->index);
    if (e->ref == NB_REF_SWIZZLE) {
        int n = e->u.member.swizzle_len;
        if (base->type->kind == NB_TY_SCALAR) {
            if (n == 1) return base;
            return nb_ir_convert(&c->b, base, e->type);
        }
        if (n == 1) return nb_ir_extract(&c->b, base, e->u.member.swizzle[0]);
        return nb_ir_swizzle(&c->b, base, e->u.member.swizzle, n);
    }
    lerr(c, e->loc, "unsupported member expression: ", e->u.member.member);
    return nb_ir_zero(&c->b, e->type);
}

static nb_ir_inst *lower_index(lower_ctx *c, nb_expr *e)
{
    nb_expr *base = e->u.index.base;
    if ((base->type && base->type->kind == NB_TY_TENSOR) || is_var_place(c, e, 0)) {
        place pl;
        if (!lower_place(c, e, &pl)) return nb_ir_zero(&c->b, e->type);
        return place_load(c, &pl, e->type);
    }
    nb_ir_inst *bv = lower_expr(c, base);
    nb_ir_inst *ix = coerce(c, lower_expr(c, e->u.index.indices[0]), c->tt->t_int, e->loc);
    if (base->type->kind == NB_TY_SCALAR) return bv;
    return nb_ir_extract_dyn(&c->b, bv, ix);
}

/* Appends the scalar components of v (converted to scalar kind s) to out. */
static void push_components(lower_ctx *c, nb_ir_inst *v, nb_scalar_kind s, nb_ir_inst **out, int *n, int max)
{
    const nb_type *st = nb_type_scalar(c->tt, s);
    const nb_type *t = v->type;
    if (t->kind == NB_TY_SCALAR) {
        if (*n < max) out[(*n)++] = coerce(c, v, st, v->loc);
    } else if (t->kind == NB_TY_VECTOR) {
        for (int k = 0; k < t->cols; k++)
            if (*n < max) out[(*n)++] = coerce(c, nb_ir_extract(&c->b, v, k), st, v->loc);
    } else if (t->kind == NB_TY_MATRIX) {
        for (int r = 0; r < t->rows; r++) push_components(c, nb_ir_extract(&c->b, v, r), s, out, n, max);
    }
}

static nb_ir_inst *build_value(lower_ctx *c, const nb_type *t, nb_ir_inst **vals, int nvals, nb_loc loc)
{
    if (t->kind == NB_TY_VECTOR || t->kind == NB_TY_MATRIX) {
        int want = nb_type_components(t);
        if (nvals == 0) return nb_ir_zero(&c->b, t); /* `float3 v = {};` */
        if (nvals == 1 && vals[0]->type->kind == NB_TY_SCALAR && want > 1) return coerce(c, vals[0], t, loc);
        if (nvals == 1 && nb_type_components(vals[0]->type) == want && vals[0]->type->kind == t->kind)
            return coerce(c, vals[0], t, loc);
        /* want + 1 slots: one more component than the type holds is a count error below */
        nb_ir_inst **comps = nb_arena_alloc(&c->m->arena, sizeof *comps * (size_t)(want + 1), sizeof(void *));
        if (!comps) return NULL;
        int n = 0;
        for (int i = 0; i < nvals; i++) push_components(c, vals[i], t->scalar, comps, &n, want + 1);
        if (n != want) {
            lerr(c, loc, "wrong number of components in constructor", NULL);
            return nb_ir_zero(&c->b, t);
        }
        return nb_ir_construct(&c->b, t, comps, n);
    }
    if (t->kind == NB_TY_SCALAR) {
        if (nvals < 1) return nb_ir_zero(&c->b, t);
        nb_ir_inst *comps[16];
        int n = 0;
        push_components(c, vals[0], t->scalar, comps, &n, 16);
        return n ? comps[0] : nb_ir_zero(&c->b, t);
    }
    if (nvals == 1 && vals[0]->type == t) return vals[0];
    if (t->kind == NB_TY_STRUCT && t->decl) {
        int nf = t->decl->u.strct.nfields;
        if (nvals == 0) return nb_ir_zero(&c->b, t);
        nb_ir_inst **ops = nb_arena_alloc(&c->m->arena, sizeof *ops * (size_t)(nf ? nf : 1), sizeof(void *));
        if (!ops) return NULL;
        for (int i = 0; i < nf; i++) {
            const nb_type *ft = t->decl->u.strct.fields[i]->u.var.type;
            ops[i] = i < nvals ? coerce(c, vals[i], ft, loc) : nb_ir_zero(&c->b, ft);
        }
        return nb_ir_construct(&c->b, t, ops, nf);
    }
    if (t->kind == NB_TY_ARRAY) {
        if (nvals == 0) return nb_ir_zero(&c->b, t);
        int n = t->length;
        nb_ir_inst **ops = nb_arena_alloc(&c->m->arena, sizeof *ops * (size_t)(n ? n : 1), sizeof(void *));
        if (!ops) return NULL;
        for (int i = 0; i < n; i++) ops[i] = i < nvals ? coerce(c, vals[i], t->elem, loc) : nb_ir_zero(&c->b, t->elem);
        return nb_ir_construct(&c->b, t, ops, n);
    }
    if (t->kind == NB_TY_DIFFPAIR) {
        nb_ir_inst *ops[2];
        ops[0] = nvals > 0 ? coerce(c, vals[0], t->elem, loc) : nb_ir_zero(&c->b, t->elem);
        const nb_type *dt = nb_type_differential(c->tt, t->elem);
        if (!dt) dt = t->elem;
        ops[1] = nvals > 1 ? coerce(c, vals[1], dt, loc) : nb_ir_zero(&c->b, dt);
        return nb_ir_construct(&c->b, t, ops, 2);
    }
    lerr(c, loc, "unsupported constructor type", NULL);
    return nb_ir_zero(&c->b, t);
}

static nb_ir_inst *lower_init_list(lower_ctx *c, nb_expr *e)
{
    int n = e->u.init_list.nitems;
    nb_ir_inst **vals = nb_arena_alloc(&c->m->arena, sizeof *vals * (size_t)(n ? n : 1), sizeof(void *));
    if (!vals) return NULL;
    const nb_type *t = e->type;
    for (int i = 0; i < n; i++) {
        nb_expr *it = e->u.init_list.items[i];
        vals[i] = lower_expr(c, it);
        /* nested lists were typed by the checker; plain items go to the element/field type */
        if (t->kind == NB_TY_ARRAY) vals[i] = coerce(c, vals[i], t->elem, it->loc);
    }
    return build_value(c, t, vals, n, e->loc);
}

static nb_ir_inst *lower_call_to(lower_ctx *c, nb_expr *e, nb_decl *fd, nb_ir_func *callee, nb_expr *receiver);

/* A user function or method call. */
static nb_ir_inst *lower_user_call(lower_ctx *c, nb_expr *e, nb_decl *fd, nb_expr *receiver)
{
    nb_ir_func *callee = nb_ir_find_func(c->m, fd);
    if (!callee) {
        lerr(c, e->loc, "call of a function without a body: ", fd ? fd->name : "?");
        return nb_ir_zero(&c->b, e->type);
    }
    return lower_call_to(c, e, fd, callee, receiver);
}

/* fwd_diff(f)(args) / bwd_diff(f)(args): a call of f's derivative function (lang/ad.h). */
static nb_ir_inst *lower_deriv_call(lower_ctx *c, nb_expr *e)
{
    nb_ir_func *pf = e->decl ? nb_ir_find_func(c->m, e->decl) : NULL;
    nb_ir_func *d = NULL;
    /* the operators, outermost first (higher order: fwd_diff(bwd_diff(f)), see check_call.c) */
    int ids[8], n = 0;
    ids[n++] = e->index;
    for (nb_expr *x = e->u.call.callee && e->u.call.callee->u.call.nargs ? e->u.call.callee->u.call.args[0] : NULL;
         x && x->kind == NB_EX_CALL && x->ref == NB_REF_INTRINSIC && n < 8 && x->u.call.nargs &&
         (x->index == NB_INTR_FWD_DIFF || x->index == NB_INTR_BWD_DIFF);
         x = x->u.call.args[0])
        ids[n++] = x->index;
    if (!pf && e->decl && e->decl->kind == NB_DECL_FUNC && n == 1) {
        /* a declaration without a body (`[ForwardDerivative(f_jvp)] float f(float, float);`):
         * its custom derivative of the operator's kind is the whole derivative */
        nb_decl *cd = ids[0] == NB_INTR_FWD_DIFF ? e->decl->u.func.fwd_derivative : e->decl->u.func.bwd_derivative;
        nb_ir_func *g = cd ? nb_ir_find_func(c->m, cd) : NULL;
        if (g) return lower_call_to(c, e, cd, g, NULL);
    }
    if (!pf) lerr(c, e->loc, "cannot differentiate a function without a body", NULL);
    d = pf;
    for (int i = n - 1; i >= 0 && d; i--)
        d = ids[i] == NB_INTR_FWD_DIFF ? nb_ad_fwd_func(c->m, c->src, d, e->loc) : nb_ad_bwd_func(c->m, c->src, d, e->loc);
    if (!d) {
        c->error = 1;
        return nb_ir_zero(&c->b, e->type->kind == NB_TY_VOID ? c->tt->t_int : e->type);
    }
    return lower_call_to(c, e, e->decl, d, NULL);
}

static nb_ir_inst *lower_call_to(lower_ctx *c, nb_expr *e, nb_decl *fd, nb_ir_func *callee, nb_expr *receiver)
{
    int n = callee->nparams;
    nb_ir_inst **args = nb_arena_zalloc(&c->m->arena, sizeof *args * (size_t)(n ? n : 1), sizeof(void *));
    nb_ir_var **refs = nb_arena_zalloc(&c->m->arena, sizeof *refs * (size_t)(n ? n : 1), sizeof(void *));
    place *back = nb_arena_zalloc(&c->m->arena, sizeof *back * (size_t)(n ? n : 1), sizeof(void *));
    if (!args || !refs || !back) return NULL;
    int has_this = n > 0 && callee->params[0]->is_this;
    for (int i = 0; i < n; i++) {
        nb_ir_var *p = callee->params[i];
        nb_expr *a;
        if (has_this && i == 0) a = receiver;
        else {
            int ai = i - has_this;
            if (ai >= e->u.call.nargs) {
                lerr(c, e->loc, "internal: missing argument calling ", fd->name);
                return nb_ir_zero(&c->b, e->type);
            }
            a = e->u.call.args[ai];
        }
        if (!a) {
            lerr(c, e->loc, "internal: missing method receiver", NULL);
            return nb_ir_zero(&c->b, e->type);
        }
        if (p->dir == NB_DIR_IN) {
            args[i] = coerce(c, lower_expr(c, a), p->type, a->loc);
            continue;
        }
        if (!lower_place(c, a, &back[i])) return nb_ir_zero(&c->b, e->type);
        if (!back[i].tensor && back[i].nsteps == 0 && back[i].var->type == p->type) {
            refs[i] = back[i].var;
            back[i].var = NULL; /* nothing to copy back */
            continue;
        }
        nb_ir_var *tmp = temp_var(c, p->type, p->name);
        if (!tmp) return NULL;
        if (p->dir == NB_DIR_INOUT)
            nb_ir_store(&c->b, tmp, NULL, 0, NULL, coerce(c, place_load(c, &back[i], p->type), p->type, a->loc));
        refs[i] = tmp;
    }
    nb_ir_inst *call = nb_ir_call(&c->b, callee, args, refs);
    for (int i = 0; i < n; i++) {
        if (!refs[i] || (!back[i].var && !back[i].tensor)) continue;
        nb_ir_inst *v = nb_ir_load(&c->b, refs[i], NULL, 0, NULL);
        place_store(c, &back[i], coerce(c, v, place_type(c, &back[i]), e->loc));
    }
    return call;
}

static nb_ir_inst *lower_intrinsic(lower_ctx *c, nb_expr *e)
{
    int id = e->index;
    int n = e->u.call.nargs;
    switch (id) {
    case NB_INTR_ATOMIC_ADD: {
        place pl;
        if (n != 2 || !lower_place(c, e->u.call.args[0], &pl) || !pl.tensor) {
            lerr(c, e->loc, "atomicAdd needs a tensor element as its first argument", NULL);
            return nb_ir_zero(&c->b, e->type);
        }
        nb_ir_inst *v = coerce(c, lower_expr(c, e->u.call.args[1]), pl.tensor->type->elem, e->loc);
        nb_ir_inst *in = nb_ir_new(&c->b, NB_IR_TATOMIC_ADD, pl.tensor->type->elem, 2 + pl.ntidx);
        if (!in) return NULL;
        in->ops[0] = pl.tensor;
        for (int i = 0; i < pl.ntidx; i++) in->ops[1 + i] = pl.tidx[i];
        in->ops[1 + pl.ntidx] = v;
        return in;
    }
    case NB_INTR_DIFF_PAIR: {
        nb_ir_inst *vals[2];
        for (int i = 0; i < n && i < 2; i++) vals[i] = lower_expr(c, e->u.call.args[i]);
        return build_value(c, e->type, vals, n < 2 ? n : 2, e->loc);
    }
    case NB_INTR_FWD_DIFF: case NB_INTR_BWD_DIFF:
        return lower_deriv_call(c, e);
    default:
        break;
    }
    nb_ir_inst *ops8[8], **ops = ops8;
    if (n > 8 && id == NB_INTR_DISPATCH_KERNEL) /* grid, block, the kernel's arguments */
        ops = nb_arena_alloc(&c->m->arena, sizeof *ops * (size_t)n, sizeof(void *));
    else if (n > 8) {
        lerr(c, e->loc, "too many intrinsic arguments", NULL);
        return nb_ir_zero(&c->b, e->type);
    }
    if (!ops) return NULL;
    for (int i = 0; i < n; i++) ops[i] = lower_expr(c, e->u.call.args[i]);
    nb_ir_inst *in = nb_ir_intrin(&c->b, id, e->type, ops, n);
    if (in && id == NB_INTR_DISPATCH_KERNEL) in->text = e->decl && e->decl->name ? e->decl->name : "?"; /* the kernel */
    if (in && id == NB_INTR_DETACH) {
        in->flags |= NB_IRF_NO_DIFF;
        if (n == 1 && ops[0]->op == NB_IR_CALL) ops[0]->flags |= NB_IRF_NO_DIFF; /* no_diff f(x) */
    }
    return in;
}

/* printf("format", a, b): the format as written, the arguments as operands. */
static nb_ir_inst *lower_printf(lower_ctx *c, nb_expr *e)
{
    int n = e->u.call.nargs - 1;
    if (n < 0) return NULL;
    nb_ir_inst **vals = nb_arena_alloc(&c->m->arena, sizeof *vals * (size_t)(n ? n : 1), sizeof(void *));
    if (!vals) return NULL;
    for (int i = 0; i < n; i++) vals[i] = lower_expr(c, e->u.call.args[i + 1]);
    nb_ir_inst *in = nb_ir_new(&c->b, NB_IR_PRINTF, c->tt->t_void, n);
    if (!in) return NULL;
    for (int i = 0; i < n; i++) in->ops[i] = vals[i];
    in->text = e->u.call.args[0]->u.str.text;
    return in;
}

static nb_ir_inst *lower_call(lower_ctx *c, nb_expr *e)
{
    nb_expr *callee = e->u.call.callee;
    switch (e->ref) {
    case NB_REF_PRINTF:
        return lower_printf(c, e);
    case NB_REF_INTRINSIC:
        return lower_intrinsic(c, e);
    case NB_REF_TYPE: {
        int n = e->u.call.nargs;
        nb_ir_inst **vals = nb_arena_alloc(&c->m->arena, sizeof *vals * (size_t)(n ? n : 1), sizeof(void *));
        if (!vals) return NULL;
        for (int i = 0; i < n; i++) vals[i] = lower_expr(c, e->u.call.args[i]);
        return build_value(c, e->type, vals, n, e->loc);
    }
    case NB_REF_FUNCTION:
        return lower_user_call(c, e, e->decl, NULL);
    case NB_REF_METHOD: {
        nb_expr *recv = callee && callee->kind == NB_EX_MEMBER ? callee->u.member.base : NULL;
        return lower_user_call(c, e, e->decl, recv);
    }
    default:
        break;
    }
    /* some checkers put the method on the callee only */
    if (callee && callee->kind == NB_EX_MEMBER && callee->ref == NB_REF_METHOD)
        return lower_user_call(c, e, callee->decl, callee->u.member.base);
    lerr(c, e->loc, "unsupported call", NULL);
    return nb_ir_zero(&c->b, e->type && e->type->kind != NB_TY_VOID ? e->type : c->tt->t_int);
}

static nb_ir_inst *lower_expr(lower_ctx *c, nb_expr *e)
{
    nb_loc save = c->b.loc;
    c->b.loc = e->loc;
    nb_ir_inst *r = NULL;
    switch (e->kind) {
    case NB_EX_INT: case NB_EX_FLOAT: case NB_EX_BOOL:
        r = lower_literal(c, e);
        break;
    case NB_EX_NAME:
        if (e->ref == NB_REF_GLOBAL || e->ref == NB_REF_STATIC) r = lower_global_ref(c, e, e->decl);
        else if (e->ref == NB_REF_NULL) r = nb_ir_zero(&c->b, e->type); /* nullptr */
        else {
            nb_ir_var *v = var_of_name(c, e);
            if (!v) {
                lerr(c, e->loc, "internal: unresolved name ", e->u.name.name);
                r = nb_ir_zero(&c->b, e->type);
            } else r = nb_ir_load(&c->b, v, NULL, 0, NULL);
        }
        break;
    case NB_EX_UNARY: {
        int op = e->u.unary.op;
        if (op == NB_TOK_INC || op == NB_TOK_DEC) { r = lower_incdec(c, e); break; }
        if (op == NB_TOK_STAR || op == NB_TOK_AMP) { /* *p, &x (pointers) */
            place pl;
            if (!lower_place(c, op == NB_TOK_STAR ? e : e->u.unary.operand, &pl)) {
                r = nb_ir_zero(&c->b, e->type);
            } else if (op == NB_TOK_STAR) {
                r = place_load(c, &pl, e->type);
            } else if (pl.tensor) {
                lerr(c, e->loc, "cannot take the address of a tensor element", NULL);
                r = nb_ir_zero(&c->b, e->type);
            } else if (pl.ptr && !pl.nsteps) {
                r = pl.ptr; /* &p[i], &*p */
            } else {
                r = nb_ir_ptr_access(&c->b, NB_IR_ADDR, pl.var, pl.ptr, pl.steps, pl.nsteps, pl.idx, NULL);
            }
            break;
        }
        nb_ir_inst *a = coerce(c, lower_expr(c, e->u.unary.operand), e->type, e->loc);
        if (op == NB_TOK_PLUS) r = a;
        else if (op == NB_TOK_KW_NO_DIFF) { /* `no_diff expr`: detach */
            r = nb_ir_intrin(&c->b, NB_INTR_DETACH, a->type, &a, 1);
            if (r) r->flags |= NB_IRF_NO_DIFF;
            if (a->op == NB_IR_CALL) a->flags |= NB_IRF_NO_DIFF;
        }
        else if (op == NB_TOK_MINUS) r = nb_ir_unary(&c->b, NB_IR_NEG, a);
        else if (op == NB_TOK_NOT) r = nb_ir_unary(&c->b, NB_IR_NOT, a);
        else if (op == NB_TOK_TILDE) r = nb_ir_unary(&c->b, NB_IR_BNOT, a);
        else { lerr(c, e->loc, "internal: unknown unary operator", NULL); r = a; }
        break;
    }
    case NB_EX_BINARY: {
        int op = e->u.binary.op;
        if (op == NB_TOK_ANDAND || op == NB_TOK_OROR) { r = lower_logical(c, e); break; }
        nb_ir_op iop = binop_of(op);
        nb_ir_inst *a = lower_expr(c, e->u.binary.lhs);
        nb_ir_inst *b = lower_expr(c, e->u.binary.rhs);
        if (iop == NB_IR_OP_COUNT) { lerr(c, e->loc, "internal: unknown binary operator", NULL); r = a; break; }
        if (a->type->kind == NB_TY_PTR) { /* p ± i, p == q (check_ptr.c) */
            if (iop == NB_IR_ADD || iop == NB_IR_SUB) {
                nb_ir_inst *off = coerce(c, b, c->tt->t_int, e->loc);
                if (iop == NB_IR_SUB) off = nb_ir_unary(&c->b, NB_IR_NEG, off);
                r = nb_ir_padd(&c->b, a, off);
            } else {
                if (b->type != a->type) b = coerce(c, b, a->type, e->loc);
                r = nb_ir_new(&c->b, iop, c->tt->t_bool, 2);
                if (r) { r->ops[0] = a; r->ops[1] = b; }
            }
            break;
        }
        if (iop >= NB_IR_EQ && iop <= NB_IR_GE) {
            if (a->type != b->type) b = coerce(c, b, a->type, e->loc);
        } else {
            a = coerce(c, a, e->type, e->loc);
            b = coerce(c, b, e->type, e->loc);
        }
        r = nb_ir_binary(&c->b, iop, a, b);
        break;
    }
    case NB_EX_ASSIGN:
        r = lower_assign(c, e);
        break;
    case NB_EX_TERNARY: {
        nb_ir_inst *cond = lower_expr(c, e->u.ternary.cond);
        int spec = speculatable(e->u.ternary.then_e) && speculatable(e->u.ternary.else_e);
        /* in a differentiable function a branch whose derivative may be inf/NaN where it is not
         * taken (sqrt(x) at x < 0, atan2(0, 0), 1/x) is not evaluated: reverse mode would multiply
         * that derivative by the branch's zero adjoint and poison the gradient, as Slang's
         * select-to-if rewrite avoids */
        if (spec && c->b.f && c->b.f->differentiable && cond->type->kind != NB_TY_VECTOR &&
            !(ad_tame(e->u.ternary.then_e) && ad_tame(e->u.ternary.else_e)))
            spec = 0;
        if (cond->type->kind == NB_TY_VECTOR || spec) {
            nb_ir_inst *a = coerce(c, lower_expr(c, e->u.ternary.then_e), e->type, e->loc);
            nb_ir_inst *b = coerce(c, lower_expr(c, e->u.ternary.else_e), e->type, e->loc);
            r = nb_ir_select(&c->b, cond, a, b);
        } else {
            r = lower_branchy(c, coerce(c, cond, c->tt->t_bool, e->loc), e->u.ternary.then_e, e->u.ternary.else_e,
                              e->type, NULL, NULL);
        }
        break;
    }
    case NB_EX_CALL:
        r = lower_call(c, e);
        break;
    case NB_EX_MEMBER:
        r = lower_member(c, e);
        break;
    case NB_EX_INDEX:
        r = lower_index(c, e);
        break;
    case NB_EX_CAST:
        r = coerce(c, lower_expr(c, e->u.cast.operand), e->type, e->loc);
        break;
    case NB_EX_INIT_LIST:
        r = lower_init_list(c, e);
        break;
    case NB_EX_TYPE:
        lerr(c, e->loc, "a type is not a value", NULL);
        r = nb_ir_zero(&c->b, c->tt->t_int);
        break;
    case NB_EX_STRING: /* (the checker allows it only as printf's format) */
        lerr(c, e->loc, "internal: string literal outside printf", NULL);
        r = nb_ir_zero(&c->b, c->tt->t_int);
        break;
    }
    if (!r) {
        lerr(c, e->loc, "out of memory while lowering", NULL);
        r = nb_ir_zero(&c->b, c->tt->t_int);
    }
    c->b.loc = save;
    return r;
}

/* ---- statements -------------------------------------------------------------------------- */

static void lower_stmts(lower_ctx *c, nb_stmt **items, int n)
{
    for (int i = 0; i < n; i++) {
        if (nb_ir_block_terminated(c->b.block)) return; /* unreachable code is dropped */
        lower_stmt(c, items[i]);
    }
}

static void lower_into(lower_ctx *c, nb_ir_block *bl, nb_stmt *s)
{
    nb_ir_block *save = c->b.block;
    c->b.block = bl;
    if (s) lower_stmt(c, s);
    c->b.block = save;
}

static int has_attr(const nb_attr_list *l, const char *name)
{
    for (int i = 0; i < l->count; i++)
        if (l->items[i].name && strcmp(l->items[i].name, name) == 0) return 1;
    return 0;
}

static void lower_loop(lower_ctx *c, nb_stmt *s, nb_expr *cond, nb_stmt *body, nb_expr *step, int test_last)
{
    nb_ir_inst *loop = nb_ir_loop(&c->b);
    if (!loop) return;
    loop->max_iters = s->max_iters;
    if (has_attr(&s->attrs, "ForceUnroll") || has_attr(&s->attrs, "unroll")) loop->flags |= NB_IRF_UNROLL;
    if (test_last) loop->flags |= NB_IRF_TEST_LAST;
    nb_ir_block *save = c->b.block;
    if (cond) {
        c->b.block = loop->blocks[0];
        loop->ops[0] = coerce(c, lower_expr(c, cond), c->tt->t_bool, cond->loc);
    }
    c->b.block = loop->blocks[1];
    if (body) lower_stmt(c, body);
    if (step) {
        c->b.block = loop->blocks[2];
        lower_expr(c, step);
    }
    c->b.block = save;
}

static void lower_switch(lower_ctx *c, nb_stmt *s)
{
    nb_ir_inst *sel = coerce(c, lower_expr(c, s->u.switch_s.value), c->tt->t_int, s->loc);
    if (sel->type->kind != NB_TY_SCALAR) return;
    int n = s->u.switch_s.ncases;
    nb_ir_inst *sw = nb_ir_new(&c->b, NB_IR_SWITCH, NULL, 1);
    if (!sw) return;
    sw->ops[0] = sel;
    sw->nblocks = n;
    sw->blocks = nb_arena_zalloc(&c->m->arena, sizeof(nb_ir_block *) * (size_t)(n ? n : 1), sizeof(void *));
    sw->cases = nb_arena_zalloc(&c->m->arena, sizeof(nb_ir_case) * (size_t)(n ? n : 1), sizeof(void *));
    if (!sw->blocks || !sw->cases) return;
    nb_ir_block *save = c->b.block;
    for (int i = 0; i < n; i++) {
        nb_switch_case *sc = &s->u.switch_s.cases[i];
        nb_ir_case *ic = &sw->cases[i];
        ic->is_default = sc->is_default;
        ic->nvalues = sc->nvalues;
        ic->values = nb_arena_zalloc(&c->m->arena, sizeof(int64_t) * (size_t)(sc->nvalues ? sc->nvalues : 1), 8);
        for (int k = 0; k < sc->nvalues; k++) {
            int is_int = 0;
            int64_t iv = 0;
            double fv = 0;
            if (!nb_check_const_eval(sc->values[k], &is_int, &iv, &fv)) {
                lerr(c, sc->values[k]->loc, "case label is not a constant", NULL);
                continue;
            }
            if (ic->values) ic->values[k] = is_int ? iv : (int64_t)fv;
        }
        sw->blocks[i] = nb_ir_block_new(c->b.f, sw);
        c->b.block = sw->blocks[i];
        lower_stmts(c, sc->body, sc->nbody);
    }
    c->b.block = save;
}

static void lower_var_decl(lower_ctx *c, nb_decl *d)
{
    const nb_type *t = d->u.var.type;
    if (!t) {
        lerr(c, d->loc, "internal: variable without type: ", d->name);
        return;
    }
    if (t->kind == NB_TY_VOID) { /* `let r = f();` of a void f (Slang): only the call */
        if (d->u.var.init) lower_expr(c, d->u.var.init);
        return;
    }
    nb_ir_var *v = nb_ir_var_new(c->b.f, d->name, t);
    if (!v) return;
    v->decl = d;
    map_put(&c->m->arena, &c->vars, &c->nvars, &c->cap_vars, d, v);
    if (d->mods & NB_MOD_GROUPSHARED) { /* shared by the group's threads: no per-thread initialization */
        v->flags |= NB_IRF_SHARED;
        return;
    }
    nb_ir_inst *init = d->u.var.init ? coerce(c, lower_expr(c, d->u.var.init), t, d->loc) : nb_ir_zero(&c->b, t);
    nb_ir_store(&c->b, v, NULL, 0, NULL, init);
}

static void lower_stmt(lower_ctx *c, nb_stmt *s)
{
    nb_loc save = c->b.loc;
    c->b.loc = s->loc;
    switch (s->kind) {
    case NB_ST_BLOCK:
        lower_stmts(c, s->u.block.items, s->u.block.count);
        break;
    case NB_ST_EXPR:
        if (s->u.expr.expr) lower_expr(c, s->u.expr.expr);
        break;
    case NB_ST_VAR:
        for (int i = 0; i < s->u.var.count; i++) lower_var_decl(c, s->u.var.vars[i]);
        break;
    case NB_ST_IF: {
        nb_ir_inst *cond = coerce(c, lower_expr(c, s->u.if_s.cond), c->tt->t_bool, s->loc);
        nb_ir_inst *iff = nb_ir_if(&c->b, cond);
        if (!iff) break;
        lower_into(c, iff->blocks[0], s->u.if_s.then_s);
        lower_into(c, iff->blocks[1], s->u.if_s.else_s);
        break;
    }
    case NB_ST_FOR:
        if (s->u.for_s.init) lower_stmt(c, s->u.for_s.init);
        lower_loop(c, s, s->u.for_s.cond, s->u.for_s.body, s->u.for_s.step, 0);
        break;
    case NB_ST_WHILE:
        lower_loop(c, s, s->u.while_s.cond, s->u.while_s.body, NULL, 0);
        break;
    case NB_ST_DO_WHILE:
        lower_loop(c, s, s->u.while_s.cond, s->u.while_s.body, NULL, 1);
        break;
    case NB_ST_SWITCH:
        lower_switch(c, s);
        break;
    case NB_ST_BREAK:
        nb_ir_jump(&c->b, NB_IR_BREAK, NULL);
        break;
    case NB_ST_CONTINUE:
        nb_ir_jump(&c->b, NB_IR_CONTINUE, NULL);
        break;
    case NB_ST_RETURN: {
        const nb_type *rt = c->b.f->ret;
        if (s->u.ret.value && rt->kind != NB_TY_VOID)
            nb_ir_jump(&c->b, NB_IR_RETURN, coerce(c, lower_expr(c, s->u.ret.value), rt, s->loc));
        else {
            if (s->u.ret.value) lower_expr(c, s->u.ret.value);
            nb_ir_jump(&c->b, NB_IR_RETURN, NULL);
        }
        break;
    }
    case NB_ST_EMPTY:
        break;
    case NB_ST_TARGET_SWITCH: { /* only this function's target's case (lower_target.h) */
        const nb_target_case *k = c->target ? nb_lower_pick_case(s, c->target) : NULL;
        if (!k) {
            if (!c->b.f->missing) {
                c->b.f->missing = 1;
                c->b.f->missing_loc = s->loc;
            }
            break;
        }
        lower_stmts(c, k->body, k->nbody);
        break;
    }
    case NB_ST_ASM:
        if (!nb_lower_asm(c->m, c->b.f, s)) lerr(c, s->loc, "out of memory", NULL);
        break;
    case NB_ST_PRELUDE:
        if (!nb_lower_prelude(c->m, c->b.f, s->u.prelude.text)) lerr(c, s->loc, "out of memory", NULL);
        break;
    }
    c->b.loc = save;
}

/* ---- functions and the program ----------------------------------------------------------- */

static const nb_type *ret_type(lower_ctx *c, nb_decl *fd)
{
    const nb_type *t = fd->u.func.ret ? fd->u.func.ret->resolved : NULL;
    return t ? t : c->tt->t_void;
}

/* Creates the IR function and its parameters (bodies are lowered later, so calls can refer to
 * functions declared after the caller). */
static nb_ir_func *declare_func(lower_ctx *c, nb_decl *fd, nb_decl *parent)
{
    char name[256];
    if (parent) snprintf(name, sizeof name, "%s_%s", parent->name, fd->name);
    else snprintf(name, sizeof name, "%s", fd->name);
    /* unique emitted name: add, add_1, add_2, … */
    char cname[300];
    snprintf(cname, sizeof cname, "%s", name);
    if (c->ncnames > c->m->nfuncs) { /* (functions were dropped: start over) */
        nb_strmap_init(&c->cnames, &c->m->arena);
        c->ncnames = 0;
    }
    for (; c->ncnames < c->m->nfuncs; c->ncnames++)
        if (!nb_strmap_get(&c->cnames, c->m->funcs[c->ncnames]->cname, NULL)) return NULL;
    for (int k = 1;; k++) {
        if (!nb_strmap_find(&c->cnames, cname)) break;
        snprintf(cname, sizeof cname, "%s_%d", name, k);
    }
    nb_ir_func *f = nb_ir_func_new(c->m, name, ret_type(c, fd));
    if (!f) return NULL;
    f->cname = nb_arena_strdup(&c->m->arena, cname);
    f->decl = fd;
    f->is_kernel = fd->u.func.is_kernel;
    f->has_tid = fd->u.func.is_kernel || fd->u.func.uses_tid;
    f->is_host = fd->u.func.is_host;
    memcpy(f->numthreads, fd->u.func.numthreads, sizeof f->numthreads);
    f->differentiable = fd->u.func.differentiable;
    if (parent && !(fd->mods & NB_MOD_STATIC)) {
        const nb_type *st = parent->u.strct.type;
        nb_ir_var *tv = nb_ir_param_new(f, "this", st, fd->u.func.is_mutating ? NB_DIR_INOUT : NB_DIR_IN);
        if (tv) tv->is_this = 1;
        for (int i = 0; tv && i < fd->attrs.count; i++) /* [NoDiffThis]: `this` is no_diff */
            if (fd->attrs.items[i].name && strcmp(fd->attrs.items[i].name, "NoDiffThis") == 0) tv->flags |= NB_IRF_NO_DIFF;
    }
    for (int i = 0; i < fd->u.func.nparams; i++) {
        nb_decl *pd = fd->u.func.params[i];
        nb_ir_var *pv = nb_ir_param_new(f, pd->name, pd->u.param.type ? pd->u.param.type : c->tt->t_error, pd->u.param.dir);
        if (!pv) return NULL;
        pv->decl = pd;
        if (pd->mods & NB_MOD_NO_DIFF) pv->flags |= NB_IRF_NO_DIFF;
        if (pd->u.param.hidden) pv->flags |= NB_IRF_HIDDEN | NB_IRF_NO_DIFF;
    }
    if (!c->declaring_alt && nb_lower_has_target_switch(fd->u.func.body)) {
        /* one variant per back end, same emitted name (lower_target.h) */
        c->declaring_alt = 1;
        nb_ir_func *g = declare_func(c, fd, parent);
        c->declaring_alt = 0;
        if (!g) return NULL;
        g->cname = f->cname;
        f->target = NB_TGT_C;
        g->target = NB_TGT_CUDA;
        f->alt = g;
        g->alt = f;
    }
    return f;
}

static void lower_body(lower_ctx *c, nb_ir_func *f)
{
    nb_decl *fd = f->decl;
    c->nvars = 0;
    c->this_var = NULL;
    for (int i = 0; i < f->nparams; i++) {
        nb_ir_var *v = f->params[i];
        if (v->is_this) c->this_var = v;
        else if (v->decl) map_put(&c->m->arena, &c->vars, &c->nvars, &c->cap_vars, v->decl, v);
    }
    c->b.m = c->m;
    c->b.f = f;
    c->b.block = f->body;
    c->b.loc = fd->loc;
    c->b.flags = 0;
    c->target = f->target;
    lower_stmt(c, fd->u.func.body);
    if (!nb_ir_block_terminated(f->body) && f->ret->kind != NB_TY_VOID)
        nb_ir_jump(&c->b, NB_IR_RETURN, nb_ir_zero(&c->b, f->ret)); /* falling off the end */
}

static void declare_global(lower_ctx *c, nb_decl *d, nb_decl *parent)
{
    const nb_type *t = d->u.var.type;
    if (!t || (d->u.var.has_const && t->kind == NB_TY_SCALAR)) return;
    if (!d->u.var.init) return; /* diagnosed at the use */
    char name[256];
    if (parent) snprintf(name, sizeof name, "%s_%s", parent->name, d->name);
    else snprintf(name, sizeof name, "%s", d->name);
    nb_ir_global *g = nb_ir_global_new(c->m, name, t);
    if (!g) return;
    g->decl = d;
    map_put(&c->m->arena, &c->globals, &c->nglobals, &c->cap_globals, d, g);
    char fname[300];
    snprintf(fname, sizeof fname, "%s_init", name);
    nb_ir_func *f = nb_ir_func_new(c->m, fname, t);
    if (!f) return;
    f->decl = NULL;
    g->init = f;
}

static void lower_global_init(lower_ctx *c, nb_ir_global *g)
{
    nb_ir_func *f = g->init;
    c->nvars = 0;
    c->this_var = NULL;
    c->b.m = c->m;
    c->b.f = f;
    c->b.block = f->body;
    c->b.loc = g->decl->loc;
    nb_ir_inst *v = coerce(c, lower_expr(c, g->decl->u.var.init), g->type, g->decl->loc);
    nb_ir_jump(&c->b, NB_IR_RETURN, v);
}

nb_status nb_ir_lower_program(nb_program *p, nb_ir_module *m)
{
    lower_ctx c;
    memset(&c, 0, sizeof c);
    c.p = p;
    c.m = m;
    c.tt = m->types;
    c.src = &p->src;
    nb_strmap_init(&c.cnames, &m->arena);
    /* pass 1: declare functions and globals of every module (imports first) */
    for (int mi = 0; mi < p->nmodules; mi++) {
        nb_module_ast *mod = p->modules[mi];
        for (int i = 0; i < mod->ndecls; i++) {
            nb_decl *d = mod->decls[i];
            if (d->kind == NB_DECL_FUNC && d->u.func.body && !d->u.func.ngparams) { /* (not a generic template) */
                /* (an instantiated generic method `S.f<4>` is a module decl with its struct as parent) */
                if (!declare_func(&c, d, d->u.func.parent)) return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory lowering IR");
            } else if (d->kind == NB_DECL_VAR && d->u.var.is_global && d->u.var.shader_param != 3) {
                declare_global(&c, d, NULL); /* (a mutable static is a local of its entry points) */
            } else if (d->kind == NB_DECL_STRUCT) {
                if (d->u.strct.ngparams && !d->u.strct.type) continue; /* uninstantiated generic */
                for (int k = 0; k < d->u.strct.nstatics; k++) declare_global(&c, d->u.strct.statics[k], d);
                for (int k = 0; k < d->u.strct.nmethods; k++) {
                    nb_decl *md = d->u.strct.methods[k];
                    if (md->u.func.body && !md->u.func.ngparams && !declare_func(&c, md, d))
                        return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory lowering IR");
                }
            }
        }
    }
    /* pass 2: bodies */
    int nf = m->nfuncs;
    for (int i = 0; i < nf; i++)
        if (m->funcs[i]->decl) lower_body(&c, m->funcs[i]);
    for (int i = 0; i < m->nglobals; i++) lower_global_init(&c, m->globals[i]);
    if (!c.error && nb_ad_generate(m, &p->src)) c.error = 1; /* derivative bodies (lang/ad.h) */
    if (c.error) return nb_diag_status(&p->src);
    return NB_OK;
}

/* IR passes: constant folding and dead-code elimination (see ir.h).
 *
 * Folding replaces an instruction by a constant (or, for a select on a constant condition, by
 * the chosen operand) through a forwarding pointer in inst->aux; every operand is then
 * redirected and the original instruction is left for DCE to delete. An `if` on a constant
 * condition is replaced by the taken region's instructions; a `loop` whose condition is
 * constant false (tested first) disappears.
 */
#include <math.h>
#include <string.h>

#include "lang/fold_value.h"
#include "lang/ir.h"

static int is_fkind(nb_scalar_kind s) { return s == NB_SC_FLOAT || s == NB_SC_DOUBLE || s == NB_SC_HALF; }

static nb_ir_inst *fwd(nb_ir_inst *x)
{
    while (x && x->aux) x = x->aux;
    return x;
}

static void clear_aux(nb_ir_inst *in, void *ud) { (void)ud; in->aux = NULL; }

static void resolve_ops(nb_ir_inst *in, void *ud)
{
    (void)ud;
    for (int i = 0; i < in->nops; i++)
        if (in->ops[i]) in->ops[i] = fwd(in->ops[i]);
}

/* Wraps an integer to the width and signedness of scalar kind s. */
static int64_t wrap_int(nb_scalar_kind s, int64_t v)
{
    switch (s) {
    case NB_SC_BOOL: return v != 0;
    case NB_SC_INT: return (int64_t)(int32_t)(uint32_t)v;
    case NB_SC_UINT: return (int64_t)(uint32_t)v;
    default: return v;
    }
}

static double round_float(nb_scalar_kind s, double v)
{
    return s == NB_SC_DOUBLE ? v : nb_fold_f32(v);
}

static int all_const(const nb_ir_inst *in, int from, int to)
{
    for (int i = from; i < to; i++)
        if (!in->ops[i] || in->ops[i]->op != NB_IR_CONST) return 0;
    return 1;
}

/* Component k of a constant of scalar kind s, as double or int. */
static double cf(const nb_ir_inst *k, int i)
{
    nb_scalar_kind s = nb_type_elem_scalar(k->type);
    if (is_fkind(s)) return k->cv[i].f;
    if (s == NB_SC_UINT64) return (double)(uint64_t)k->cv[i].i;
    return (double)k->cv[i].i;
}

static nb_ir_inst *new_const(nb_ir_inst *at, const nb_type *t)
{
    nb_ir_builder b;
    memset(&b, 0, sizeof b);
    b.m = at->parent->func->module;
    b.f = at->parent->func;
    b.loc = at->loc;
    b.flags = at->flags;
    nb_ir_inst *k = nb_ir_const_i(&b, t, 0);
    if (!k) return NULL;
    nb_ir_insert_before(at, k);
    k->name = at->name;
    return k;
}

/* Folds one component-wise operation; returns 0 when it cannot (division by zero, …). */
static int fold_comp(nb_ir_op op, nb_scalar_kind s, nb_scalar_kind rs, const nb_ir_inst *a, const nb_ir_inst *b,
                     int i, nb_ir_cval *out)
{
    if (is_fkind(s)) {
        double x = a->cv[i].f, y = b ? b->cv[i].f : 0;
        double r;
        switch (op) {
        case NB_IR_NEG: r = -x; break;
        case NB_IR_ADD: r = x + y; break;
        case NB_IR_SUB: r = x - y; break;
        case NB_IR_MUL: r = x * y; break;
        case NB_IR_DIV: r = x / y; break;
        case NB_IR_MOD: if (y == 0) return 0; r = fmod(x, y); break;
        case NB_IR_EQ: out->i = x == y; return 1;
        case NB_IR_NE: out->i = x != y; return 1;
        case NB_IR_LT: out->i = x < y; return 1;
        case NB_IR_LE: out->i = x <= y; return 1;
        case NB_IR_GT: out->i = x > y; return 1;
        case NB_IR_GE: out->i = x >= y; return 1;
        default: return 0;
        }
        out->f = round_float(rs, r);
        return 1;
    }
    int64_t x = a->cv[i].i, y = b ? b->cv[i].i : 0;
    int uns = s == NB_SC_UINT || s == NB_SC_UINT64;
    int64_t r;
    switch (op) {
    case NB_IR_NEG: r = (int64_t)(0 - (uint64_t)x); break;
    case NB_IR_NOT: r = !x; break;
    case NB_IR_BNOT: r = ~x; break;
    case NB_IR_ADD: r = (int64_t)((uint64_t)x + (uint64_t)y); break;
    case NB_IR_SUB: r = (int64_t)((uint64_t)x - (uint64_t)y); break;
    case NB_IR_MUL: r = (int64_t)((uint64_t)x * (uint64_t)y); break;
    case NB_IR_DIV:
    case NB_IR_MOD:
        if (y == 0 || (!uns && y == -1)) return 0;
        if (uns) r = op == NB_IR_DIV ? (int64_t)((uint64_t)x / (uint64_t)y) : (int64_t)((uint64_t)x % (uint64_t)y);
        else r = op == NB_IR_DIV ? x / y : x % y;
        break;
    case NB_IR_BAND: r = x & y; break;
    case NB_IR_BOR: r = x | y; break;
    case NB_IR_BXOR: r = x ^ y; break;
    case NB_IR_SHL: r = (int64_t)((uint64_t)x << (y & 31)); break;
    case NB_IR_SHR: r = uns ? (int64_t)((uint64_t)x >> (y & 31)) : x >> (y & 31); break;
    case NB_IR_LAND: r = x && y; break;
    case NB_IR_LOR: r = x || y; break;
    case NB_IR_EQ: out->i = x == y; return 1;
    case NB_IR_NE: out->i = x != y; return 1;
    case NB_IR_LT: out->i = uns ? (uint64_t)x < (uint64_t)y : x < y; return 1;
    case NB_IR_LE: out->i = uns ? (uint64_t)x <= (uint64_t)y : x <= y; return 1;
    case NB_IR_GT: out->i = uns ? (uint64_t)x > (uint64_t)y : x > y; return 1;
    case NB_IR_GE: out->i = uns ? (uint64_t)x >= (uint64_t)y : x >= y; return 1;
    default: return 0;
    }
    out->i = wrap_int(rs, r);
    return 1;
}

static nb_ir_inst *fold_inst(nb_ir_inst *in)
{
    const nb_type *t = in->type;
    int n = nb_type_components(t);
    nb_scalar_kind rs = nb_type_elem_scalar(t);
    nb_ir_cval vals[16];
    switch (in->op) {
    case NB_IR_NEG: case NB_IR_NOT: case NB_IR_BNOT:
    case NB_IR_ADD: case NB_IR_SUB: case NB_IR_MUL: case NB_IR_DIV: case NB_IR_MOD:
    case NB_IR_BAND: case NB_IR_BOR: case NB_IR_BXOR: case NB_IR_SHL: case NB_IR_SHR:
    case NB_IR_LAND: case NB_IR_LOR:
    case NB_IR_EQ: case NB_IR_NE: case NB_IR_LT: case NB_IR_LE: case NB_IR_GT: case NB_IR_GE: {
        if (!all_const(in, 0, in->nops) || n < 1 || n > 16) return NULL;
        const nb_ir_inst *a = in->ops[0], *b = in->nops > 1 ? in->ops[1] : NULL;
        nb_scalar_kind s = nb_type_elem_scalar(a->type);
        for (int i = 0; i < n; i++)
            if (!fold_comp(in->op, s, rs, a, b, i, &vals[i])) return NULL;
        break;
    }
    case NB_IR_CONVERT: case NB_IR_SPLAT: {
        if (!all_const(in, 0, 1) || n < 1 || n > 16) return NULL;
        const nb_ir_inst *a = in->ops[0];
        nb_scalar_kind s = nb_type_elem_scalar(a->type);
        for (int i = 0; i < n; i++) {
            int si = in->op == NB_IR_SPLAT ? 0 : i;
            if (is_fkind(rs)) vals[i].f = round_float(rs, cf(a, si));
            else if (rs == NB_SC_BOOL) vals[i].i = is_fkind(s) ? a->cv[si].f != 0 : a->cv[si].i != 0;
            else if (is_fkind(s)) {
                double d = a->cv[si].f;
                if (!(d > -9.2e18 && d < 9.2e18)) return NULL; /* out of range: leave to run time */
                vals[i].i = wrap_int(rs, (int64_t)d);
            } else vals[i].i = wrap_int(rs, a->cv[si].i);
        }
        break;
    }
    case NB_IR_SELECT: {
        nb_ir_inst *c = in->ops[0];
        if (!c || c->op != NB_IR_CONST) return NULL;
        if (c->type->kind == NB_TY_SCALAR) return c->cv[0].i ? in->ops[1] : in->ops[2];
        if (!all_const(in, 1, 3) || n > 16) return NULL;
        for (int i = 0; i < n; i++) vals[i] = c->cv[i].i ? in->ops[1]->cv[i] : in->ops[2]->cv[i];
        break;
    }
    case NB_IR_CONSTRUCT:
        if ((t->kind != NB_TY_VECTOR && t->kind != NB_TY_MATRIX) || in->nops != n || n > 16) return NULL;
        if (!all_const(in, 0, in->nops)) return NULL;
        for (int i = 0; i < n; i++) vals[i] = in->ops[i]->cv[0];
        break;
    case NB_IR_EXTRACT: {
        nb_ir_inst *a = in->ops[0];
        if (!a || a->op != NB_IR_CONST) return NULL;
        int field = in->field;
        if (field < 0) {
            if (!in->ops[1] || in->ops[1]->op != NB_IR_CONST) return NULL;
            field = (int)in->ops[1]->cv[0].i;
        }
        int per = n < 1 ? 1 : n; /* components per element */
        if (field < 0 || (field + 1) * per > nb_type_components(a->type)) return NULL;
        for (int i = 0; i < per; i++) vals[i] = a->cv[field * per + i];
        break;
    }
    case NB_IR_SWIZZLE: {
        nb_ir_inst *a = in->ops[0];
        if (!a || a->op != NB_IR_CONST) return NULL;
        for (int i = 0; i < in->nswz; i++) vals[i] = a->cv[in->swz[i]];
        break;
    }
    default:
        return NULL;
    }
    nb_ir_inst *k = new_const(in, t);
    if (!k) return NULL;
    memcpy(k->cv, vals, sizeof(nb_ir_cval) * (size_t)(n < 1 ? 1 : n));
    return k;
}

/* Moves the instructions of `from` before `at`. */
static void splice_before(nb_ir_inst *at, nb_ir_block *from)
{
    for (nb_ir_inst *x = from->first, *next; x; x = next) {
        next = x->next;
        nb_ir_remove(x);
        nb_ir_insert_before(at, x);
    }
}

static int only_pure(const nb_ir_block *bl)
{
    for (const nb_ir_inst *x = bl->first; x; x = x->next)
        if (!nb_ir_is_pure(x)) return 0;
    return 1;
}

static int fold_block(nb_ir_block *bl)
{
    int changes = 0;
    for (nb_ir_inst *in = bl->first, *next; in; in = next) {
        next = in->next;
        if (in->op != NB_IR_LOOP) resolve_ops(in, NULL);
        if (in->op == NB_IR_IF && in->ops[0] && in->ops[0]->op == NB_IR_CONST) {
            nb_ir_block *taken = in->blocks[in->ops[0]->cv[0].i ? 0 : 1];
            nb_ir_inst *first = taken->first;
            splice_before(in, taken);
            nb_ir_remove(in);
            changes++;
            if (first) next = first; /* fold the spliced instructions too */
            continue;
        }
        for (int i = 0; i < in->nblocks; i++) changes += fold_block(in->blocks[i]);
        if (in->op == NB_IR_LOOP) {
            resolve_ops(in, NULL);
            nb_ir_inst *c = in->ops[0];
            if (c && c->op == NB_IR_CONST && !c->cv[0].i && !(in->flags & NB_IRF_TEST_LAST) &&
                only_pure(in->blocks[0])) {
                nb_ir_remove(in);
                changes++;
            }
            continue;
        }
        if (!nb_ir_is_pure(in) || in->op == NB_IR_CONST) continue;
        nb_ir_inst *r = fold_inst(in);
        if (r && r != in) {
            in->aux = r;
            changes++;
        }
    }
    return changes;
}

int nb_ir_fold(nb_ir_func *f)
{
    nb_ir_walk(f->body, clear_aux, NULL);
    int changes = fold_block(f->body);
    nb_ir_walk(f->body, resolve_ops, NULL);
    nb_ir_walk(f->body, clear_aux, NULL);
    return changes;
}

/* ---- DCE --------------------------------------------------------------------------------- */

static int drop_unreachable(nb_ir_block *bl)
{
    int n = 0;
    for (nb_ir_inst *in = bl->first; in; in = in->next) {
        for (int i = 0; i < in->nblocks; i++) n += drop_unreachable(in->blocks[i]);
        if (in->op == NB_IR_BREAK || in->op == NB_IR_CONTINUE || in->op == NB_IR_RETURN) {
            while (in->next) {
                nb_ir_remove(in->next);
                n++;
            }
            break;
        }
    }
    return n;
}

/* reads[v]: the loads and by-reference call arguments of var v still in the function (+1 for a
 * var the caller sees). Kept up to date as loads are removed, so a chain of dead stores
 * (a1 = f(a0); a2 = f(a1); ... with the last never read) goes in one backward sweep instead of
 * one sweep per link. */
static void mark_reads(nb_ir_inst *in, void *ud)
{
    int *reads = ud;
    if ((in->op == NB_IR_LOAD || in->op == NB_IR_ADDR) && in->var) reads[in->var->id]++; /* (an address reads) */
    if (in->op == NB_IR_CALL && in->refs)
        for (int i = 0; i < in->nops; i++)
            if (in->refs[i]) reads[in->refs[i]->id]++;
}

/* One sweep: removes unused pure values, stores to never-read vars and empty ifs. */
static int sweep(nb_ir_block *bl, int *reads)
{
    int n = 0;
    for (nb_ir_inst *in = bl->last, *prev; in; in = prev) {
        prev = in->prev;
        for (int i = 0; i < in->nblocks; i++) n += sweep(in->blocks[i], reads);
        int dead = 0;
        if (nb_ir_is_pure(in) && in->uses == 0) dead = 1;
        else if (in->op == NB_IR_STORE && in->var && !reads[in->var->id] && !(in->var->flags & NB_IRF_SHARED)) dead = 1;
        else if (in->op == NB_IR_IF && !in->blocks[0]->first && !in->blocks[1]->first) dead = 1;
        if (dead) {
            for (int i = 0; i < in->nops; i++)
                if (in->ops[i]) in->ops[i]->uses--;
            if ((in->op == NB_IR_LOAD || in->op == NB_IR_ADDR) && in->var) reads[in->var->id]--;
            nb_ir_remove(in);
            n++;
        }
    }
    return n;
}

int nb_ir_dce(nb_ir_func *f)
{
    int total = drop_unreachable(f->body);
    int reads[4096];
    size_t nv = (size_t)f->nvars;
    /* huge function: skip store elimination (its sweeps cost more than they save: a
     * 20,000-statement reverse-mode function would take 3 s instead of 2 s) */
    if (nv > sizeof reads / sizeof reads[0]) return total;
    for (;;) {
        memset(reads, 0, sizeof(int) * (nv ? nv : 1));
        for (int i = 0; i < f->nvars; i++) {
            nb_ir_var *v = f->vars[i];
            if (v->param >= 0 && v->dir != NB_DIR_IN) reads[i] = 1; /* visible to the caller */
        }
        nb_ir_walk(f->body, mark_reads, reads);
        nb_ir_count_uses(f);
        int n = sweep(f->body, reads);
        total += n;
        if (!n) break;
    }
    return total;
}

void nb_ir_optimize_module(nb_ir_module *m)
{
    for (int i = 0; i < m->nfuncs; i++) {
        nb_ir_func *f = m->funcs[i];
        for (int round = 0; round < 4; round++) {
            int n = nb_ir_fold(f);
            n += nb_ir_dce(f);
            if (!n) break;
        }
    }
}

/* Switches the reverse sweep cannot mirror case by case (see ad.h nb_ad_normalize_switches).
 *
 *   switch (s) { case 1: A; if (c) break; B; case 2: C; break; default: D; }
 *
 * becomes, with two new bool vars (m: a case matched and control is falling through; brk: the
 * switch was left by a break):
 *
 *   m = false; brk = false; dflt = s != 1 && s != 2;
 *   if (!brk && (m || s == 1)) { m = true; A; if (c) brk = true; if (!brk) { B; } }
 *   if (!brk && (m || s == 2)) { m = true; C; brk = true; }
 *   if (!brk && (m || dflt))   { m = true; D; }
 *
 * The case blocks are moved, not copied (no SSA renaming); a `break` of the switch becomes
 * `brk = true` and whatever follows it in the case runs under `if (!brk)` (what follows it in its
 * own block is unreachable and dropped). Breaks of loops and nested switches are left alone.
 * The result is ordinary ifs, which both sweeps handle.
 */
#include <string.h>

#include "lang/ad.h"

/* The loop or switch a BREAK leaves. */
static nb_ir_inst *break_target(nb_ir_inst *j)
{
    for (nb_ir_block *bl = j->parent; bl && bl->owner; bl = bl->owner->parent)
        if (bl->owner->op == NB_IR_LOOP || bl->owner->op == NB_IR_SWITCH) return bl->owner;
    return NULL;
}

static int has_switch_break(nb_ir_block *bl, nb_ir_inst *sw, int skip_last)
{
    for (nb_ir_inst *in = bl->first; in; in = in->next) {
        if (skip_last && in == bl->last) break;
        if (in->op == NB_IR_BREAK && break_target(in) == sw) return 1;
        for (int k = 0; k < in->nblocks; k++)
            if (has_switch_break(in->blocks[k], sw, 0)) return 1;
    }
    return 0;
}

static int needs_rewrite(nb_ir_inst *sw)
{
    for (int k = 0; k < sw->nblocks; k++) {
        nb_ir_block *cb = sw->blocks[k];
        if (k + 1 < sw->nblocks && !nb_ir_block_terminated(cb)) return 1; /* falls through */
        if (has_switch_break(cb, sw, 1)) return 1;                        /* leaves early */
    }
    return 0;
}

static void set_parent(nb_ir_block *bl)
{
    for (nb_ir_inst *in = bl->first; in; in = in->next) in->parent = bl;
}

/* Replaces the breaks of sw inside bl by `brk = true` and guards what follows; returns whether
 * bl may set brk. */
static int guard_breaks(nb_ir_builder *b, nb_ir_block *bl, nb_ir_inst *sw, nb_ir_var *brk)
{
    int any = 0;
    for (nb_ir_inst *in = bl->first; in; in = in->next) {
        if (in->op == NB_IR_BREAK && break_target(in) == sw) {
            nb_ir_builder tb = *b;
            tb.block = NULL;
            tb.loc = in->loc;
            nb_ir_inst *t = nb_ir_const_i(&tb, b->m->types->t_bool, 1);
            nb_ir_inst *st = nb_ir_store(&tb, brk, NULL, 0, NULL, t);
            nb_ir_insert_before(in, t);
            nb_ir_insert_before(in, st);
            while (in->next) nb_ir_remove(in->next); /* (unreachable) */
            nb_ir_remove(in);
            return 1;
        }
        int has = 0;
        for (int k = 0; k < in->nblocks; k++) has |= guard_breaks(b, in->blocks[k], sw, brk);
        if (!has) continue;
        any = 1;
        if (!in->next) continue;
        /* the rest of this block runs only if no break happened */
        nb_ir_builder tb = *b;
        tb.block = NULL;
        tb.loc = in->loc;
        nb_ir_inst *ld = nb_ir_load(&tb, brk, NULL, 0, NULL);
        nb_ir_inst *nt = nb_ir_unary(&tb, NB_IR_NOT, ld);
        nb_ir_inst *iff = nb_ir_if(&tb, nt);
        if (!ld || !nt || !iff) return any;
        nb_ir_block *then = iff->blocks[0];
        then->first = in->next;
        then->last = bl->last;
        in->next->prev = NULL;
        in->next = NULL;
        bl->last = in;
        set_parent(then);
        nb_ir_append(bl, ld);
        nb_ir_append(bl, nt);
        nb_ir_append(bl, iff);
        in = nt; /* (the loop goes on with the new if, whose block is processed as a sub-block) */
    }
    return any;
}

static nb_ir_inst *cmp_const(nb_ir_builder *b, nb_ir_op op, nb_ir_inst *sel, int64_t v)
{
    return nb_ir_binary(b, op, sel, nb_ir_const_i(b, sel->type, v));
}

static void rewrite(nb_ir_module *m, nb_ir_func *f, nb_ir_inst *sw)
{
    nb_type_table *tt = m->types;
    nb_ir_builder b = {m, f, NULL, sw->loc, sw->flags};
    nb_ir_var *mv = nb_ir_var_new(f, "nb_sw_match", tt->t_bool);
    nb_ir_var *bv = nb_ir_var_new(f, "nb_sw_break", tt->t_bool);
    if (!mv || !bv) return;
    mv->is_temp = bv->is_temp = 1;
    /* breaks first, while the cases still belong to the switch */
    for (int k = 0; k < sw->nblocks; k++) {
        nb_ir_block *cb = sw->blocks[k];
        guard_breaks(&b, cb, sw, bv);
    }
    /* the ifs go into a scratch block, then replace the switch */
    nb_ir_block *scratch = nb_ir_block_new(f, NULL);
    if (!scratch) return;
    b.block = scratch;
    nb_ir_inst *sel = sw->ops[0];
    nb_ir_store(&b, mv, NULL, 0, NULL, nb_ir_const_i(&b, tt->t_bool, 0));
    nb_ir_store(&b, bv, NULL, 0, NULL, nb_ir_const_i(&b, tt->t_bool, 0));
    nb_ir_inst *dflt = nb_ir_const_i(&b, tt->t_bool, 1);
    for (int k = 0; k < sw->nblocks; k++)
        for (int v = 0; v < sw->cases[k].nvalues; v++)
            dflt = nb_ir_binary(&b, NB_IR_LAND, dflt, cmp_const(&b, NB_IR_NE, sel, sw->cases[k].values[v]));
    for (int k = 0; k < sw->nblocks; k++) {
        nb_ir_block *cb = sw->blocks[k];
        nb_ir_inst *match = nb_ir_const_i(&b, tt->t_bool, sw->cases[k].is_default ? 1 : 0);
        if (sw->cases[k].is_default) match = dflt;
        for (int v = 0; v < sw->cases[k].nvalues; v++)
            match = nb_ir_binary(&b, NB_IR_LOR, match, cmp_const(&b, NB_IR_EQ, sel, sw->cases[k].values[v]));
        nb_ir_inst *go = nb_ir_binary(&b, NB_IR_LOR, nb_ir_load(&b, mv, NULL, 0, NULL), match);
        go = nb_ir_binary(&b, NB_IR_LAND, nb_ir_unary(&b, NB_IR_NOT, nb_ir_load(&b, bv, NULL, 0, NULL)), go);
        nb_ir_inst *iff = nb_ir_if(&b, go);
        if (!iff) return;
        /* the case block becomes the then-block, after `m = true` */
        nb_ir_builder hb = b;
        hb.block = NULL;
        nb_ir_inst *t = nb_ir_const_i(&hb, tt->t_bool, 1);
        nb_ir_inst *st = nb_ir_store(&hb, mv, NULL, 0, NULL, t);
        if (cb->first) {
            nb_ir_insert_before(cb->first, t);
            nb_ir_insert_before(cb->first, st);
        } else {
            nb_ir_append(cb, t);
            nb_ir_append(cb, st);
        }
        cb->owner = iff;
        iff->blocks[0] = cb;
    }
    /* splice the scratch block in place of the switch */
    nb_ir_inst *in = scratch->first;
    while (in) {
        nb_ir_inst *next = in->next;
        nb_ir_remove(in);
        nb_ir_insert_before(sw, in);
        in = next;
    }
    nb_ir_remove(sw);
}

static void walk(nb_ir_module *m, nb_ir_func *f, nb_ir_block *bl)
{
    for (nb_ir_inst *in = bl->first; in;) {
        nb_ir_inst *next = in->next;
        for (int k = 0; k < in->nblocks; k++) walk(m, f, in->blocks[k]);
        if (in->op == NB_IR_SWITCH && needs_rewrite(in)) rewrite(m, f, in);
        in = next;
    }
}

void nb_ad_normalize_switches(nb_ir_module *m, nb_ir_func *f)
{
    walk(m, f, f->body);
}

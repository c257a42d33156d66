/* Lowering of Slang's target-specific statements: see lower_target.h. */
#include <stdio.h>
#include <string.h>

#include "lang/check.h"
#include "lang/lower_target.h"

static int any_target_switch(nb_stmt *const *items, int n) {
    for (int i = 0; i < n; i++)
        if (nb_lower_has_target_switch(items[i])) return 1;
    return 0;
}

int nb_lower_has_target_switch(const nb_stmt *s) {
    if (!s) return 0;
    switch (s->kind) {
    case NB_ST_TARGET_SWITCH: return 1;
    case NB_ST_BLOCK: return any_target_switch(s->u.block.items, s->u.block.count);
    case NB_ST_IF: return nb_lower_has_target_switch(s->u.if_s.then_s) || nb_lower_has_target_switch(s->u.if_s.else_s);
    case NB_ST_FOR: return nb_lower_has_target_switch(s->u.for_s.body);
    case NB_ST_WHILE: case NB_ST_DO_WHILE: return nb_lower_has_target_switch(s->u.while_s.body);
    case NB_ST_SWITCH:
        for (int k = 0; k < s->u.switch_s.ncases; k++)
            if (any_target_switch(s->u.switch_s.cases[k].body, s->u.switch_s.cases[k].nbody)) return 1;
        return 0;
    default: return 0;
    }
}

const nb_target_case *nb_lower_pick_case(const nb_stmt *s, unsigned target) {
    const nb_target_case *dflt = NULL;
    for (int i = 0; i < s->u.tswitch.ncases; i++) {
        const nb_target_case *k = &s->u.tswitch.cases[i];
        if (k->targets & target) return k;
        if (k->is_default) dflt = k;
    }
    return dflt;
}

int nb_lower_asm(nb_ir_module *m, nb_ir_func *f, const nb_stmt *s) {
    int n = s->u.asm_s.nargs;
    f->asm_text = s->u.asm_s.text ? s->u.asm_s.text : "";
    f->nasm = n;
    if (!n) return 1;
    f->asm_types = nb_arena_zalloc(&m->arena, sizeof(nb_type *) * (size_t)n, sizeof(void *));
    f->asm_vals = nb_arena_zalloc(&m->arena, sizeof(char *) * (size_t)n, sizeof(void *));
    if (!f->asm_types || !f->asm_vals) return 0;
    for (int i = 0; i < n; i++) {
        const nb_expr *a = s->u.asm_s.args[i];
        if (a->ref == NB_REF_TYPE) {
            f->asm_types[i] = a->type;
            continue;
        }
        int is_int = 0;
        int64_t iv = 0;
        double fv = 0;
        char buf[64];
        if (!nb_check_const_eval(a, &is_int, &iv, &fv)) snprintf(buf, sizeof buf, "0"); /* (diagnosed) */
        else if (is_int) snprintf(buf, sizeof buf, "%lld", (long long)iv);
        else snprintf(buf, sizeof buf, "%.9g", fv);
        f->asm_vals[i] = nb_arena_strdup(&m->arena, buf);
        if (!f->asm_vals[i]) return 0;
    }
    return 1;
}

int nb_lower_prelude(nb_ir_module *m, nb_ir_func *f, const char *text) {
    if (!text) return 1;
    for (int i = 0; i < f->npreludes; i++)
        if (!strcmp(f->preludes[i], text)) return 1;
    const char **np = nb_arena_alloc(&m->arena, sizeof(char *) * (size_t)(f->npreludes + 1), sizeof(void *));
    if (!np) return 0;
    if (f->npreludes) memcpy(np, f->preludes, sizeof(char *) * (size_t)f->npreludes);
    np[f->npreludes] = text;
    f->preludes = np;
    f->npreludes++;
    return 1;
}

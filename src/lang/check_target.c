/* Checker: target-specific code and printf (Slang).
 *
 *   __target_switch { case cuda: … case cpp: … }   each case checked in its own scope; a target
 *                                                 may have one case, there is one default at most
 *   __intrinsic_asm "text" [, operand…];           only as the last statement of a function body
 *                                                 or of a case of a __target_switch that is a
 *                                                 top-level statement of the body, after nothing
 *                                                 but __requirePrelude; $N / $TN name parameters
 *                                                 (a method's `this` is $0), $[i] the operands
 *                                                 (compile-time constants or types)
 *   __requirePrelude("text");                      anywhere a statement may be
 *   printf("format", scalar…)                      the format is a string literal whose
 *                                                 conversions match the arguments in number
 *
 * Which case runs is decided per back end when lowering (lower.c makes one IR function per
 * target for a function that holds a __target_switch) and emitting (emit_target.c).
 */
#include <string.h>

#include "lang/check_internal.h"
#include "lang/intrinsics.h"

static int nparams_with_this(const nb_decl *fn) {
    int n = fn->u.func.nparams;
    if (fn->u.func.parent && !(fn->mods & NB_MOD_STATIC)) n++;
    return n;
}

/* Validates the $-references of an __intrinsic_asm text against the enclosing function. */
static void check_asm_text(nb_checker *c, nb_stmt *s) {
    const char *t = s->u.asm_s.text;
    nb_decl *fn = c->fn;
    int np = fn ? nparams_with_this(fn) : 0;
    for (const char *q = t; *q; q++) {
        if (*q != '$') continue;
        const char *d = q + 1;
        int idx = -1;
        if (*d >= '0' && *d <= '9') idx = *d - '0';
        else if (*d == 'T' && d[1] >= '0' && d[1] <= '9') idx = d[1] - '0';
        else if (*d == 'T' && d[1] == 'R') { q = d + 1; continue; }
        else if (*d == 'P') { /* `$P_exp`: the math function of $0's type (float / double) */
            const char *nm = d + 1 + (d[1] == '_');
            size_t len = 0;
            while ((nm[len] >= 'a' && nm[len] <= 'z') || (nm[len] >= '0' && nm[len] <= '9')) len++;
            const nb_type *t0 = fn && fn->u.func.nparams > 0 && fn->u.func.params[0]->u.param.type
                                    ? fn->u.func.params[0]->u.param.type : NULL;
            if (d[1] != '_' || !len) {
                ck_err(c, s->u.asm_s.text_loc, "malformed '$P' in __intrinsic_asm (write $P_ and a math function: "
                       "$P_exp($0))");
                return;
            }
            /* a name nabla does not map is an error where the function is emitted (only then: a
             * function with a C or CUDA case of its own may never be called) */
            if (!t0 || t0->kind != NB_TY_SCALAR || (t0->scalar != NB_SC_FLOAT && t0->scalar != NB_SC_DOUBLE)) {
                ck_err(c, s->u.asm_s.text_loc, "'$P_%.*s' in __intrinsic_asm needs a float or double first parameter, "
                       "'%s' has '%s'", (int)len, nm, fn && fn->name ? fn->name : "?", t0 ? t0->name : "none");
                return;
            }
            q = nm + len - 1;
            continue;
        }
        else if (*d == '[') {
            int k = 0, any = 0;
            const char *e = d + 1;
            while (*e >= '0' && *e <= '9') {
                if (k < 100000) k = k * 10 + (*e - '0'); /* (larger is out of range anyway) */
                e++;
                any = 1;
            }
            if (!any || *e != ']') {
                ck_err(c, s->u.asm_s.text_loc, "malformed '$[' in __intrinsic_asm (write $[0], $[1], …)");
                return;
            }
            if (k >= s->u.asm_s.nargs)
                ck_err(c, s->u.asm_s.text_loc, "__intrinsic_asm refers to operand $[%d] but has %d operand%s", k,
                       s->u.asm_s.nargs, s->u.asm_s.nargs == 1 ? "" : "s");
            q = e;
            continue;
        } else {
            ck_err(c, s->u.asm_s.text_loc,
                   "unsupported '$%c' in __intrinsic_asm (supported: $0-$9, $T0-$T9, $TR, $[i], $P_fn)", *d ? *d : ' ');
            return;
        }
        if (idx >= np) {
            ck_err(c, s->u.asm_s.text_loc, "__intrinsic_asm refers to parameter $%d but '%s' has %d parameter%s", idx,
                   fn && fn->name ? fn->name : "?", np, np == 1 ? "" : "s");
            return;
        }
        q = *d == 'T' ? d + 1 : d;
    }
}

/* An operand of __intrinsic_asm: a type or a compile-time constant. */
static void check_asm_operand(nb_checker *c, nb_expr **slot) {
    nb_expr *e = *slot;
    if (e->kind == NB_EX_TYPE) {
        e->type = ck_resolve_type(c, e->u.type.texpr);
        e->ref = NB_REF_TYPE;
        return;
    }
    if (e->kind == NB_EX_NAME && e->u.name.name && !ck_lookup_local(c, e->u.name.name)) {
        const nb_type *t = ck_name_as_type(c, e->u.name.name, e->loc);
        if (t) {
            e->type = t;
            e->ref = NB_REF_TYPE;
            return;
        }
    }
    const nb_type *t = ck_expr(c, slot);
    if (ck_is_error(t)) return;
    int is_int;
    int64_t iv;
    double fv;
    if (t->kind != NB_TY_SCALAR || !nb_check_const_eval(*slot, &is_int, &iv, &fv))
        ck_err(c, (*slot)->loc, "an __intrinsic_asm operand must be a type or a compile-time constant");
}

static const char *target_name(unsigned bit) {
    return bit == NB_TGT_C ? "cpp" : bit == NB_TGT_CUDA ? "cuda" : "other";
}

void ck_check_target_stmt(nb_checker *c, nb_stmt *s) {
    switch (s->kind) {
    case NB_ST_TARGET_SWITCH: {
        unsigned seen = 0;
        const nb_target_case *dflt = NULL, *by[3] = {NULL, NULL, NULL};
        for (int i = 0; i < s->u.tswitch.ncases; i++) {
            nb_target_case *k = &s->u.tswitch.cases[i];
            if (k->is_default) {
                if (dflt) {
                    ck_err(c, k->loc, "multiple default labels in one __target_switch");
                    ck_note(c, dflt->loc, "previous default label is here");
                }
                dflt = k;
            }
            for (int b = 0; b < 2; b++) { /* C and CUDA; the other targets are never chosen */
                unsigned bit = 1u << b;
                if (!(k->targets & bit)) continue;
                if (seen & bit) {
                    ck_err(c, k->loc, "target '%s' has two cases in one __target_switch", target_name(bit));
                    if (by[b]) ck_note(c, by[b]->loc, "previous case is here");
                }
                seen |= bit;
                by[b] = k;
            }
            ck_push_scope(c);
            for (int j = 0; j < k->nbody; j++) ck_check_stmt(c, k->body[j]);
            ck_pop_scope(c);
        }
        break;
    }
    case NB_ST_ASM:
        if (!s->u.asm_s.text) break;
        for (int i = 0; i < s->u.asm_s.nargs; i++) check_asm_operand(c, &s->u.asm_s.args[i]);
        check_asm_text(c, s);
        break;
    case NB_ST_PRELUDE:
    default:
        break;
    }
}

/* __intrinsic_asm placement: `seq` is a statement list where one may end the list (after
 * __requirePrelude only); anywhere else it is an error. */
static void asm_misplaced(nb_checker *c, const nb_stmt *s);

static void check_seq(nb_checker *c, nb_stmt *const *items, int n, int asm_ok, int top) {
    for (int i = 0; i < n; i++) {
        const nb_stmt *s = items[i];
        if (!s) continue;
        if (s->kind == NB_ST_ASM) {
            int ok = asm_ok && i == n - 1;
            for (int j = 0; ok && j < i; j++) ok = !items[j] || items[j]->kind == NB_ST_PRELUDE;
            if (!ok)
                ck_err(c, s->loc, "__intrinsic_asm must be the last statement of a function body or of a "
                                  "__target_switch case, after nothing but __requirePrelude");
        } else if (s->kind == NB_ST_TARGET_SWITCH) {
            for (int k = 0; k < s->u.tswitch.ncases; k++)
                check_seq(c, s->u.tswitch.cases[k].body, s->u.tswitch.cases[k].nbody, top, 0);
        } else {
            asm_misplaced(c, s);
        }
    }
}

static void asm_misplaced(nb_checker *c, const nb_stmt *s) {
    if (!s) return;
    switch (s->kind) {
    case NB_ST_ASM:
        ck_err(c, s->loc, "__intrinsic_asm must be the last statement of a function body or of a "
                          "__target_switch case, after nothing but __requirePrelude");
        break;
    case NB_ST_BLOCK: check_seq(c, s->u.block.items, s->u.block.count, 0, 0); break;
    case NB_ST_IF: asm_misplaced(c, s->u.if_s.then_s); asm_misplaced(c, s->u.if_s.else_s); break;
    case NB_ST_FOR: asm_misplaced(c, s->u.for_s.body); break;
    case NB_ST_WHILE: case NB_ST_DO_WHILE: asm_misplaced(c, s->u.while_s.body); break;
    case NB_ST_SWITCH:
        for (int k = 0; k < s->u.switch_s.ncases; k++)
            check_seq(c, s->u.switch_s.cases[k].body, s->u.switch_s.cases[k].nbody, 0, 0);
        break;
    case NB_ST_TARGET_SWITCH:
        for (int k = 0; k < s->u.tswitch.ncases; k++)
            check_seq(c, s->u.tswitch.cases[k].body, s->u.tswitch.cases[k].nbody, 0, 0);
        break;
    default: break;
    }
}

void ck_check_asm_placement(nb_checker *c, nb_decl *fn) {
    nb_stmt *body = fn->u.func.body;
    if (!body) return;
    if (body->kind == NB_ST_BLOCK) check_seq(c, body->u.block.items, body->u.block.count, 1, 1);
    else check_seq(c, &body, 1, 1, 1);
}

/* ---- printf --------------------------------------------------------------------------------- */

/* Counts the conversions of a printf format (as written, quotes included); 0 and *bad set to
 * the offending conversion letter when one is not supported. */
static int count_conversions(const char *fmt, char *bad, char *convs, int max) {
    int n = 0;
    size_t len = strlen(fmt);
    const char *end = len >= 2 && fmt[len - 1] == '"' ? fmt + len - 1 : fmt + len; /* (without the quotes) */
    for (const char *q = *fmt == '"' ? fmt + 1 : fmt; q < end; q++) {
        if (*q != '%') continue;
        q++;
        if (q >= end) { *bad = 0; return -1; }
        if (*q == '%') continue;
        while (q < end && strchr("-+ #0", *q)) q++;
        while (q < end && strchr("0123456789.", *q)) q++;
        if (q >= end) { *bad = 0; return -1; }
        if (*q == '*') { *bad = '*'; return -1; }
        if (strchr("hlLqjzt", *q)) { *bad = *q; return -1; }
        if (!strchr("diuxXocfFeEgGaA", *q)) { *bad = *q; return -1; }
        if (n < max) convs[n] = *q;
        n++;
    }
    return n;
}

const nb_type *ck_printf(nb_checker *c, nb_expr *call) {
    int n = call->u.call.nargs;
    call->ref = NB_REF_PRINTF;
    call->type = c->tt->t_void;
    call->u.call.callee->type = c->tt->t_void;
    if (n < 1 || call->u.call.args[0]->kind != NB_EX_STRING) {
        for (int i = 0; i < n; i++)
            if (call->u.call.args[i]->kind != NB_EX_STRING) ck_expr(c, &call->u.call.args[i]);
        ck_err(c, n ? call->u.call.args[0]->loc : call->loc, "printf needs a string literal format as its first argument");
        return call->type;
    }
    nb_expr *fmt = call->u.call.args[0];
    fmt->type = c->tt->t_void;
    char bad = 0, convs[64];
    int want = count_conversions(fmt->u.str.text, &bad, convs, 64);
    if (want < 0 && !bad)
        ck_err(c, fmt->loc, "printf format ends inside a conversion (write %%%% for a literal %%)");
    else if (want < 0)
        ck_err(c, fmt->loc, "printf conversion '%%%c' is not supported (use %%d %%i %%u %%x %%X %%o %%c %%f %%e %%g %%a, "
                            "without length modifiers)", bad);
    for (int i = 1; i < n; i++) {
        const nb_type *t = ck_expr(c, &call->u.call.args[i]);
        if (ck_is_error(t)) continue;
        if (t->kind != NB_TY_SCALAR)
            ck_err(c, call->u.call.args[i]->loc, "printf argument %d has type '%s'; printf takes scalars", i, t->name);
    }
    if (want >= 0 && want != n - 1)
        ck_err(c, fmt->loc, "printf format has %d conversion%s but %d argument%s follow%s", want, want == 1 ? "" : "s",
               n - 1, n - 1 == 1 ? "" : "s", n - 1 == 1 ? "s" : "");
    return call->type;
}

/* ---- constexpr parameters ------------------------------------------------------------------- */

void ck_check_constexpr_args(nb_checker *c, nb_expr *call, nb_decl *fn) {
    int n = call->u.call.nargs < fn->u.func.nparams ? call->u.call.nargs : fn->u.func.nparams;
    for (int i = 0; i < n; i++) {
        nb_decl *p = fn->u.func.params[i];
        nb_expr *a = call->u.call.args[i];
        if (!p || !a || !(p->mods & NB_MOD_CONSTEXPR) || ck_is_error(a->type)) continue;
        int is_int;
        int64_t iv;
        double fv;
        if (!nb_check_const_eval(a, &is_int, &iv, &fv))
            ck_err(c, a->loc, "argument for constexpr parameter '%s' of '%s' must be a compile-time constant",
                   p->name ? p->name : "?", fn->name ? fn->name : "?");
    }
}

/* ---- explicit generic arguments of built-in functions ------------------------------------------ */

const nb_type *ck_builtin_generic_call(nb_checker *c, nb_expr **slot) {
    nb_expr *call = *slot;
    nb_expr *callee = call->u.call.callee;
    nb_type_expr *te = callee->u.type.texpr;
    const char *name = te->name ? te->name : "";
    nb_decl *d[1];
    if (ck_lookup_global(c, name, -1, d, 1) > 0 || ck_lookup_local(c, name)) return NULL; /* the user's */
    if (!strcmp(name, "createDynamicObject")) return ck_create_dynamic(c, slot); /* check_dyn_create.c */
    if (!strcmp(name, "diffPair")) { /* DifferentialPair<T>(p [, d]) */
        te->name = "DifferentialPair";
        return NULL;
    }
    int is_reinterpret = !strcmp(name, "reinterpret");
    if (!is_reinterpret && nb_intrinsic_lookup(name) < 0) return NULL;
    const nb_type *t0 = NULL;
    for (int i = 0; i < te->ntargs; i++) { /* the arguments must name types */
        const nb_type *t = te->targs && te->targs[i] ? ck_resolve_type(c, te->targs[i]) : NULL;
        if (!t) {
            ck_err(c, te->loc, "generic argument %d of '%s' must be a type", i + 1, name);
            return call->type = c->tt->t_error;
        }
        if (ck_is_error(t)) return call->type = t;
        if (!i) t0 = t;
    }
    if (is_reinterpret) { /* reinterpret<To, From>(x): a 32-bit bit cast */
        nb_scalar_kind k = t0 && (t0->kind == NB_TY_SCALAR || t0->kind == NB_TY_VECTOR) ? t0->scalar : NB_SC_BOOL;
        const char *as = k == NB_SC_INT ? "asint" : k == NB_SC_UINT ? "asuint" : k == NB_SC_FLOAT ? "asfloat" : NULL;
        if (!as || call->u.call.nargs != 1) {
            ck_err(c, call->loc, "reinterpret<To, From>(x) is supported between 32-bit int, uint and float scalars and "
                   "vectors, got '%s'", t0 ? t0->name : "?");
            return call->type = c->tt->t_error;
        }
        name = as;
    }
    /* the built-in's own overload resolution picks the type from the arguments */
    callee->kind = NB_EX_NAME;
    memset(&callee->u, 0, sizeof callee->u);
    callee->u.name.name = name;
    const nb_type *r = ck_call(c, slot);
    if (is_reinterpret && t0 && !ck_is_error(r) && r != t0) {
        ck_err(c, call->loc, "reinterpret gives '%s', not '%s' (the sizes differ)", r->name, t0->name);
        return (*slot)->type = c->tt->t_error;
    }
    return r;
}

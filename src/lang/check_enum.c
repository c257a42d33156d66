/* Slang's enumeration types (checker side; the parser's desugaring is in parser_enum.c).
 *
 * An enum E is a typedef of its underlying integer type, so values of E convert to and from
 * integers, compare, switch and index like them (Slang converts an enum to its underlying type
 * implicitly; it also asks for an explicit cast from an integer to an enum, which is not
 * enforced here). Its cases are static const globals whose values are fixed in declaration
 * order: an explicit `= expr` (a constant integer) or, without one, the previous value + 1
 * starting at 0 -- with [Flags], 1, 2, 4, ... (0 is followed by 1) -- wrapping at the
 * underlying type's width as Slang does.
 */
#include <string.h>

#include "lang/check_internal.h"

static int is_enum(const nb_decl *d) { return d && d->kind == NB_DECL_TYPEDEF && d->u.tdef.is_enum; }

/* The next implicit case value after v for an underlying type of `bits` bits. */
static int64_t next_value(int64_t v, int flags, int bits, int is_signed) {
    uint64_t mask = bits >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << bits) - 1);
    uint64_t u;
    if (flags) u = v == 0 ? 1 : (((uint64_t)v << 1) & mask);
    else u = ((uint64_t)v + 1) & mask;
    if (flags && u == 0) u = 1;
    if (is_signed && bits < 64 && (u >> (bits - 1)) & 1) u |= ~mask; /* sign-extend */
    return (int64_t)u;
}

void ck_check_enum(nb_checker *c, nb_decl *d) {
    const void *key = &d->u.tdef.cases;
    if (ck_state(c, key) != CK_TODO) return;
    ck_set_state(c, key, CK_BUSY);
    const nb_type *t = ck_resolve_type(c, d->u.tdef.texpr);
    if (!ck_is_error(t) && (t->kind != NB_TY_SCALAR || !ck_is_int_scalar_kind(t->scalar))) {
        ck_err(c, d->u.tdef.texpr->loc, "the underlying type of enum '%s' must be an integer type, not '%s'",
               d->name[0] ? d->name : "(anonymous)", t->name);
        t = c->tt->t_error;
    }
    int flags = nb_attr_find(&d->attrs, "Flags") != NULL;
    int bits = 32, is_signed = 1;
    if (!ck_is_error(t)) {
        bits = (t->scalar == NB_SC_INT64 || t->scalar == NB_SC_UINT64) ? 64 : 32;
        is_signed = t->scalar == NB_SC_INT || t->scalar == NB_SC_INT64;
    }
    int64_t next = flags ? 1 : 0;
    nb_decl *saved_ctx = c->enum_ctx;
    c->enum_ctx = d;
    for (int i = 0; i < d->u.tdef.ncases; i++) {
        nb_decl *v = d->u.tdef.cases[i];
        for (int j = 0; j < i; j++)
            if (strcmp(d->u.tdef.cases[j]->name, v->name) == 0) {
                ck_err(c, v->loc, "enum case '%s' is declared twice in '%s'", v->name,
                       d->name[0] ? d->name : "(anonymous)");
                ck_note(c, d->u.tdef.cases[j]->loc, "the first declaration of '%s' is here", v->name);
                break;
            }
        if (ck_is_error(t)) {
            v->u.var.type = t;
            ck_set_state(c, v, CK_DONE);
            continue;
        }
        if (!v->u.var.init) {
            nb_expr *lit = ck_new_expr(c, NB_EX_INT, v->loc);
            if (!lit) break;
            lit->u.ilit.value = (uint64_t)next;
            lit->u.ilit.is_unsigned = !is_signed;
            v->u.var.init = lit;
        }
        ck_check_global_var(c, v);
        if (ck_is_error(v->u.var.type)) continue;
        if (!v->u.var.has_const) {
            ck_err(c, v->u.var.init->loc, "the value of enum case '%s' must be a constant integer", v->name);
            continue;
        }
        next = next_value(v->u.var.const_i, flags, bits, is_signed);
    }
    c->enum_ctx = saved_ctx;
    ck_set_state(c, key, CK_DONE);
}

nb_decl *ck_find_enum(nb_checker *c, const char *name) {
    if (!name || !name[0]) return NULL;
    nb_decl *g[2];
    if (ck_lookup_global(c, name, NB_DECL_TYPEDEF, g, 2) < 1 || !is_enum(g[0])) return NULL;
    return g[0];
}

const nb_type *ck_enum_member(nb_checker *c, nb_expr *e, nb_decl *ed) {
    ck_check_enum(c, ed);
    const char *m = e->u.member.member;
    for (int i = 0; i < ed->u.tdef.ncases; i++) {
        nb_decl *v = ed->u.tdef.cases[i];
        if (strcmp(v->name, m) != 0) continue;
        ck_check_global_var(c, v);
        e->ref = NB_REF_STATIC;
        e->decl = v;
        return e->type = v->u.var.type ? v->u.var.type : c->tt->t_error;
    }
    ck_err(c, e->loc, "enum '%s' has no case '%s'", ed->name, m);
    ck_note(c, ed->loc, "'%s' is declared here", ed->name);
    return e->type = c->tt->t_error;
}

const nb_type *ck_value_gparam_type(nb_checker *c, const char *name) {
    const nb_type *t = ck_builtin_type_name(c, name);
    if (t) return t;
    nb_decl *ed = ck_find_enum(c, name);
    return ed ? ck_resolve_type(c, ed->u.tdef.texpr) : NULL;
}

const nb_type *ck_enum_dotted_name(nb_checker *c, nb_expr *e) {
    const char *name = e->u.name.name, *dot = name ? strrchr(name, '.') : NULL;
    if (!dot || dot == name || !dot[1]) return NULL;
    size_t n = (size_t)(dot - name);
    char *base = ck_alloc(c, n + 1);
    if (!base) return NULL;
    memcpy(base, name, n);
    base[n] = 0;
    nb_decl *ed = ck_find_enum(c, base);
    if (!ed) return NULL;
    nb_expr *b = ck_new_expr(c, NB_EX_NAME, e->loc);
    if (!b) return NULL;
    b->u.name.name = base;
    b->ref = NB_REF_TYPE;
    b->type = ck_name_as_type(c, base, e->loc);
    if (!b->type) b->type = c->tt->t_error;
    e->kind = NB_EX_MEMBER;
    memset(&e->u, 0, sizeof e->u);
    e->u.member.base = b;
    e->u.member.member = dot + 1;
    return ck_enum_member(c, e, ed);
}

const nb_type *ck_enum_bare_case(nb_checker *c, nb_expr *e) {
    nb_decl *ed = c->enum_ctx;
    const char *name = e->u.name.name;
    if (!ed || !name) return NULL;
    for (int i = 0; i < ed->u.tdef.ncases; i++) {
        nb_decl *v = ed->u.tdef.cases[i];
        if (strcmp(v->name, name) != 0) continue;
        ck_check_global_var(c, v); /* (a later case: "depends on itself" if it needs this one) */
        e->ref = NB_REF_STATIC;
        e->decl = v;
        return e->type = v->u.var.type ? v->u.var.type : c->tt->t_error;
    }
    return NULL;
}

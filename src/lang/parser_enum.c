/* Slang's enumeration types (parser side).
 *
 *   [Flags] [UnscopedEnum] enum [class] [Name] [: IntType] { A, B = expr, C, } [;]
 *
 * An enum becomes an NB_DECL_TYPEDEF of its underlying integer type (int by default) marked
 * is_enum, whose cases are `static const` NB_DECL_VARs typed by the enum (u.tdef.cases). The
 * checker (check_enum.c) gives the cases without a value theirs (the previous one + 1, or the
 * next power of two under [Flags]) and resolves `Name.A` / `Name::A`. Named enums are scoped
 * (Slang's default); an anonymous enum or one marked [UnscopedEnum] also puts its cases at the
 * top level, so they are found by their bare names.
 */
#include <string.h>

#include "lang/parser_impl.h"

static int has_attr(nb_attr_list a, const char *name) {
    for (int i = 0; i < a.count; i++)
        if (strcmp(a.items[i].name, name) == 0) return 1;
    return 0;
}

static int at_word(nb_parser *p, const char *w) {
    const nb_token *t = np_cur(p);
    return t->kind == NB_TOK_IDENT && (size_t)t->len == strlen(w) && memcmp(t->start, w, strlen(w)) == 0;
}

int np_at_enum(nb_parser *p) {
    if (!at_word(p, "enum")) return 0;
    nb_tok_kind k = np_peek_kind(p, 1);
    return k == NB_TOK_IDENT || k == NB_TOK_LBRACE || k == NB_TOK_COLON;
}

/* At `enum`; appends the enum's typedef (and, when unscoped, its cases) to out. */
void np_parse_enum(nb_parser *p, nb_pvec *out, nb_attr_list attrs, unsigned mods) {
    nb_loc kw = np_loc(p);
    np_advance(p); /* enum */
    int is_class = 0;
    if (at_word(p, "class") || np_kind(p) == NB_TOK_KW_STRUCT) {
        is_class = 1;
        np_advance(p);
    }
    nb_decl *d = np_alloc(p, sizeof *d);
    d->kind = NB_DECL_TYPEDEF;
    d->loc = kw;
    d->name = "";
    d->module = p->mod;
    d->attrs = attrs;
    d->mods = mods;
    d->u.tdef.is_enum = 1;
    if (np_kind(p) == NB_TOK_IDENT) {
        d->loc = np_loc(p);
        d->name = np_tok_text(p);
        np_advance(p);
    } else if (is_class) {
        np_error_here(p, "an 'enum class' needs a name");
        return;
    }
    int unscoped = !d->name[0] || has_attr(attrs, "UnscopedEnum");
    if (is_class && has_attr(attrs, "UnscopedEnum")) {
        np_error_at(p, d->loc, "'[UnscopedEnum]' cannot be used on an 'enum class'");
        return;
    }
    d->u.tdef.enum_unscoped = unscoped;
    if (np_accept(p, NB_TOK_COLON)) {
        d->u.tdef.texpr = np_parse_type(p, 0);
    } else {
        nb_type_expr *t = np_alloc(p, sizeof *t);
        t->loc = d->loc;
        t->name = "int";
        d->u.tdef.texpr = t;
    }
    if (p->panic) return;
    nb_loc open = np_loc(p);
    if (!np_accept(p, NB_TOK_LBRACE)) {
        char found[64];
        np_describe(p, np_cur(p), found, sizeof found);
        np_error_here(p, "expected '{' after enum '%s', found %s", d->name[0] ? d->name : "enum", found);
        return;
    }
    nb_pvec cases = {0};
    while (np_kind(p) != NB_TOK_RBRACE && np_kind(p) != NB_TOK_EOF && !p->panic) {
        if (np_kind(p) != NB_TOK_IDENT) {
            char found[64];
            np_describe(p, np_cur(p), found, sizeof found);
            np_error_here(p, "expected an enum case name, found %s", found);
            /* recover at the enum's closing brace */
            int depth = 0;
            while (np_kind(p) != NB_TOK_EOF && !(depth == 0 && np_kind(p) == NB_TOK_RBRACE)) {
                if (np_kind(p) == NB_TOK_LBRACE) depth++;
                else if (np_kind(p) == NB_TOK_RBRACE) depth--;
                np_advance(p);
            }
            np_accept(p, NB_TOK_RBRACE);
            p->panic = 0;
            return;
        }
        nb_decl *v = np_alloc(p, sizeof *v);
        v->kind = NB_DECL_VAR;
        v->loc = np_loc(p);
        v->name = np_tok_text(p);
        v->module = p->mod;
        v->mods = NB_MOD_STATIC | NB_MOD_CONST | (mods & NB_MOD_PUBLIC);
        v->u.var.is_global = 1;
        v->u.var.enum_of = d;
        np_advance(p);
        /* the case's type is the enum (its name) or, for an anonymous one, the underlying type */
        nb_type_expr *vt = np_alloc(p, sizeof *vt);
        *vt = *d->u.tdef.texpr;
        if (d->name[0]) {
            memset(vt, 0, sizeof *vt);
            vt->name = d->name;
        }
        vt->loc = v->loc;
        v->u.var.texpr = vt;
        if (np_accept(p, NB_TOK_ASSIGN)) v->u.var.init = np_parse_expr(p);
        np_push(p, &cases, v);
        if (!np_accept(p, NB_TOK_COMMA)) break;
    }
    if (!p->panic) np_expect_close(p, NB_TOK_RBRACE, open);
    d->u.tdef.cases = (nb_decl **)np_finish(p, &cases);
    d->u.tdef.ncases = cases.n;
    np_accept(p, NB_TOK_SEMI);
    np_push(p, out, d);
    if (unscoped)
        for (int i = 0; i < cases.n; i++) np_push(p, out, cases.items[i]);
}

/* Slang namespaces (parser side; lookups are in check_namespace.c).
 *
 *   namespace A.B { decls }     (also `namespace A::B`, and nested namespace blocks)
 *   using namespace A.B;        (also `using A.B;`): A.B's names usable unqualified
 *
 * The declarations of a namespace block stay top-level declarations of the module, renamed to
 * their qualified name ("A.B.f", "A.B.S") with ns = "A.B"; a nested block qualifies its
 * declarations first and the enclosing one prefixes its own name.
 */
#include <stdio.h>
#include <string.h>

#include "lang/parser_impl.h"

static int at_word(nb_parser *p, int k, const char *w) {
    const nb_token *t = np_peek(p, k);
    return t->kind == NB_TOK_IDENT && (size_t)t->len == strlen(w) && memcmp(t->start, w, strlen(w)) == 0;
}

int np_at_namespace(nb_parser *p) {
    return (at_word(p, 0, "namespace") && np_peek_kind(p, 1) == NB_TOK_IDENT) ||
           (at_word(p, 0, "using") && np_peek_kind(p, 1) == NB_TOK_IDENT);
}

/* A.B / A::B at the current token -> "A.B" (arena), or NULL after an error. */
static const char *parse_path(nb_parser *p, const char *what) {
    char buf[512];
    size_t n = 0;
    for (;;) {
        if (np_kind(p) != NB_TOK_IDENT) {
            char found[64];
            np_describe(p, np_cur(p), found, sizeof found);
            np_error_here(p, "expected a namespace name after '%s', found %s", what, found);
            return NULL;
        }
        const nb_token *t = np_cur(p);
        if (n + (size_t)t->len + 2 >= sizeof buf) {
            np_error_here(p, "namespace name is too long");
            return NULL;
        }
        if (n) buf[n++] = '.';
        memcpy(buf + n, t->start, (size_t)t->len);
        n += (size_t)t->len;
        np_advance(p);
        if (!np_accept(p, NB_TOK_DOT) && !np_accept(p, NB_TOK_COLONCOLON)) break;
    }
    return np_strndup(p, buf, n);
}

static const char *join(nb_parser *p, const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *s = np_alloc(p, na + nb + 2);
    memcpy(s, a, na);
    s[na] = '.';
    memcpy(s + na + 1, b, nb + 1);
    return s;
}

void np_parse_namespace(nb_parser *p, nb_pvec *out, void (*parse_toplevel)(nb_parser *, nb_pvec *)) {
    if (at_word(p, 0, "using")) {
        np_advance(p);
        if (at_word(p, 0, "namespace")) np_advance(p);
        const char *path = parse_path(p, "using");
        if (!path) return;
        nb_module_ast *m = p->mod;
        const char **u = np_alloc(p, sizeof *u * (size_t)(m->nusings + 1));
        if (m->nusings) memcpy(u, m->usings, sizeof *u * (size_t)m->nusings);
        u[m->nusings] = path;
        m->usings = u;
        m->nusings++;
        np_expect_semi(p, "using");
        return;
    }
    np_advance(p); /* namespace */
    const char *path = parse_path(p, "namespace");
    if (!path) return;
    nb_loc open = np_loc(p);
    if (!np_accept(p, NB_TOK_LBRACE)) {
        char found[64];
        np_describe(p, np_cur(p), found, sizeof found);
        np_error_here(p, "expected '{' after 'namespace %s', found %s", path, found);
        return;
    }
    nb_pvec inner = {0};
    while (np_kind(p) != NB_TOK_RBRACE && np_kind(p) != NB_TOK_EOF && !p->stop) {
        int pos = p->pos;
        parse_toplevel(p, &inner);
        if (p->panic) np_sync(p);
        if (p->pos == pos) np_advance(p); /* (always progress) */
    }
    np_expect_close(p, NB_TOK_RBRACE, open);
    for (int i = 0; i < inner.n; i++) {
        nb_decl *d = inner.items[i];
        if (!d || d->kind == NB_DECL_IMPORT) {
            np_push(p, out, d);
            continue;
        }
        d->name = join(p, path, d->name);
        d->ns = d->ns ? join(p, path, d->ns) : path;
        if (d->kind == NB_DECL_TYPEDEF && d->u.tdef.is_enum)
            for (int k = 0; k < d->u.tdef.ncases; k++) /* scoped cases are found through the enum */
                if (!d->u.tdef.enum_unscoped) d->u.tdef.cases[k]->ns = d->ns;
        np_push(p, out, d);
    }
}

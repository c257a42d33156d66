/* Slang namespaces (checker side; the parser qualifies the names: parser_namespace.c).
 *
 * A declaration in `namespace A.B { … }` is a global named "A.B.f" with ns "A.B". While such a
 * declaration is checked, c->ns is its namespace and ck_lookup_global looks an unqualified name
 * up in A.B, then A, then the top level, then the module's `using` namespaces. Written
 * prefixes -- `A.B.f(x)`, `A::B::f(x)`, `A.k`, `A.E.X`, `A.S.m()` -- are MEMBER chains that
 * become the NAME "A.B.f" here, or dotted type names ("A.S") that the type resolver finds by
 * their full name.
 */
#include <string.h>

#include "lang/check_internal.h"

const char *ck_decl_ns(const nb_decl *d) {
    if (!d) return NULL;
    if (d->ns) return d->ns;
    if (d->kind == NB_DECL_FUNC && d->u.func.parent) return d->u.func.parent->ns;
    if (d->kind == NB_DECL_FUNC && d->u.func.generic_of) return ck_decl_ns(d->u.func.generic_of); /* f<float> */
    if (d->kind == NB_DECL_VAR && d->u.var.enum_of) return d->u.var.enum_of->ns;
    return NULL;
}

static size_t path_len(const nb_expr *e) {
    if (e->kind == NB_EX_NAME) return e->u.name.name ? strlen(e->u.name.name) : 0;
    if (e->kind == NB_EX_MEMBER && e->u.member.base && e->u.member.member && e->ref == NB_REF_NONE) {
        size_t b = path_len(e->u.member.base);
        return b ? b + 1 + strlen(e->u.member.member) : 0;
    }
    return 0;
}

static char *path_write(const nb_expr *e, char *o) {
    if (e->kind == NB_EX_NAME) {
        size_t n = strlen(e->u.name.name);
        memcpy(o, e->u.name.name, n);
        return o + n;
    }
    o = path_write(e->u.member.base, o);
    *o++ = '.';
    size_t n = strlen(e->u.member.member);
    memcpy(o, e->u.member.member, n);
    return o + n;
}

const char *ck_dotted_path(nb_checker *c, const nb_expr *e) {
    size_t n = e ? path_len(e) : 0;
    if (!n) return NULL;
    char *s = ck_alloc(c, n + 1);
    if (!s) return NULL;
    *path_write(e, s) = 0;
    return s;
}

/* The root NAME of a MEMBER chain. */
static const nb_expr *root_of(const nb_expr *e) {
    while (e->kind == NB_EX_MEMBER) e = e->u.member.base;
    return e;
}

int ck_namespace_member(nb_checker *c, nb_expr *e, int kind) {
    if (e->kind != NB_EX_MEMBER) return 0;
    const nb_expr *r = root_of(e);
    if (r->kind != NB_EX_NAME || !r->u.name.name || ck_lookup_local(c, r->u.name.name)) return 0;
    const char *path = ck_dotted_path(c, e);
    if (!path) return 0;
    nb_decl *g[1];
    if (ck_lookup_global(c, path, kind, g, 1) == 0) return 0;
    nb_loc loc = r->loc;
    memset(&e->u, 0, sizeof e->u);
    e->kind = NB_EX_NAME;
    e->loc = loc;
    e->u.name.name = path;
    return 1;
}

static int module_has_namespace(const nb_module_ast *m, const char *ns, size_t n) {
    for (int i = 0; m && i < m->ndecls; i++) {
        const nb_decl *d = m->decls[i];
        if (d && d->ns && strncmp(d->ns, ns, n) == 0 && (d->ns[n] == 0 || d->ns[n] == '.')) return 1;
    }
    return 0;
}

/* Whether some declaration of the current module or of a module it imports is in namespace ns
 * (or one inside it). */
static int is_namespace(nb_checker *c, const char *ns) {
    size_t n = strlen(ns);
    nb_module_ast *m = c->mod;
    if (module_has_namespace(m, ns, n)) return 1;
    for (int i = 0; m && i < m->ndecls; i++) {
        const nb_decl *d = m->decls[i];
        if (d && d->kind == NB_DECL_IMPORT && d->u.import.target &&
            module_has_namespace(d->u.import.target, ns, n))
            return 1;
    }
    return 0;
}

int ck_namespace_unknown_member(nb_checker *c, nb_expr *e) {
    if (e->kind != NB_EX_MEMBER) return 0;
    const nb_expr *r = root_of(e);
    if (r->kind != NB_EX_NAME || !r->u.name.name || ck_lookup_local(c, r->u.name.name)) return 0;
    const char *base = ck_dotted_path(c, e->u.member.base);
    if (!base || !is_namespace(c, base)) return 0;
    nb_decl *g[1];
    if (ck_lookup_global(c, base, -1, g, 1) > 0) return 0; /* (also a declaration's name) */
    ck_err(c, e->loc, "namespace '%s' has no member '%s'", base, e->u.member.member);
    e->type = c->tt->t_error;
    return 1;
}

/* Parser declarations (functions, structs and their members, generics, imports, typedefs, the
 * top level) and the entry point. The core (tokens, errors, recovery, known names) is in
 * parser_core.c, expressions and types in parser_expr.c, statements in parser_stmt.c, the debug
 * printer in ast_print.c. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/hash.h"
#include "lang/parser_impl.h"
#include "lang/preproc.h"
#include "nabla/alloc.h"

/* ---- declarations --------------------------------------------------------------------------- */

static nb_decl *new_decl(nb_parser *p, nb_decl_kind kind, nb_loc loc, const char *name) {
    nb_decl *d = np_alloc(p, sizeof *d);
    d->kind = kind;
    d->loc = loc;
    d->name = name ? name : "";
    d->module = p->mod;
    return d;
}

static int has_attr(nb_attr_list a, const char *name) {
    for (int i = 0; i < a.count; i++)
        if (strcmp(a.items[i].name, name) == 0) return 1;
    return 0;
}

static unsigned parse_mods(nb_parser *p) {
    unsigned mods = 0;
    for (;;) {
        switch (np_kind(p)) {
        case NB_TOK_KW_STATIC: mods |= NB_MOD_STATIC; break;
        case NB_TOK_KW_CONST: mods |= NB_MOD_CONST; break;
        case NB_TOK_KW_EXTERN: mods |= NB_MOD_EXTERN; break;
        case NB_TOK_KW_PUBLIC: mods |= NB_MOD_PUBLIC; break;
        case NB_TOK_KW_INLINE: mods |= NB_MOD_INLINE; break;
        case NB_TOK_IDENT: /* Slang's `internal` / `private` (not keywords of nabla) */
            if ((np_tok_is(np_cur(p), "internal") || np_tok_is(np_cur(p), "private")) &&
                (np_peek_kind(p, 1) == NB_TOK_IDENT || (np_peek_kind(p, 1) >= NB_TOK_KW_STRUCT &&
                                                        np_peek_kind(p, 1) < NB_TOK_LPAREN))) {
                mods |= np_tok_is(np_cur(p), "private") ? NB_MOD_PRIVATE : NB_MOD_INTERNAL;
                break;
            }
            /* slang-torch's `__extern_cpp` on host functions: no meaning here */
            if (np_tok_is(np_cur(p), "__extern_cpp") && np_peek_kind(p, 1) == NB_TOK_IDENT) break;
            /* `uniform RWStructuredBuffer<float> b;`: a module-scope shader parameter is uniform
             * already (check_kernel.c binds it from the host) */
            if (np_tok_is(np_cur(p), "uniform") && np_peek_kind(p, 1) == NB_TOK_IDENT) break;
            if (np_tok_is(np_cur(p), "groupshared") && np_peek_kind(p, 1) == NB_TOK_IDENT) { /* (check_kernel.c) */
                mods |= NB_MOD_GROUPSHARED;
                break;
            }
            return mods;
        default: return mods;
        }
        if (mods & (NB_MOD_PUBLIC | NB_MOD_PRIVATE | NB_MOD_INTERNAL)) p->mod->access_control = 1;
        np_advance(p);
    }
}

/* One parameter: [attrs] (in|out|inout|no_diff|const|constexpr|__constref|uniform)* type [name] [dims]
 * [= default] */
static nb_decl *parse_param(nb_parser *p, int index) {
    nb_attr_list attrs = np_parse_attrs(p);
    nb_loc loc = np_loc(p);
    unsigned mods = 0;
    int in = 0, out = 0;
    for (;;) {
        nb_tok_kind k = np_kind(p);
        if (k == NB_TOK_KW_IN) in = 1;
        else if (k == NB_TOK_KW_OUT) out = 1;
        else if (k == NB_TOK_KW_INOUT) in = out = 1;
        else if (k == NB_TOK_KW_NO_DIFF) mods |= NB_MOD_NO_DIFF;
        else if (k == NB_TOK_KW_CONST) mods |= NB_MOD_CONST;
        else if (np_tok_is(np_cur(p), "uniform") && np_peek_kind(p, 1) == NB_TOK_IDENT)
            ; /* an entry point's `uniform` parameter: one value for every thread, as all host-bound
                 scalars and arrays are */
        else if (np_tok_is(np_cur(p), "__constref") && np_peek_kind(p, 1) != NB_TOK_COMMA &&
                 np_peek_kind(p, 1) != NB_TOK_RPAREN)
            mods |= NB_MOD_CONST; /* Slang's by-reference `in`: read-only, the same value semantics */
        else if (k == NB_TOK_IDENT && np_cur(p)->len == 9 && !memcmp(np_cur(p)->start, "constexpr", 9) &&
                 np_peek_kind(p, 1) == NB_TOK_IDENT)
            mods |= NB_MOD_CONSTEXPR; /* `constexpr int W` (Slang) */
        else break;
        np_advance(p);
    }
    nb_type_expr *t = np_parse_type(p, 1);
    nb_decl *d = new_decl(p, NB_DECL_PARAM, loc, "");
    d->attrs = attrs;
    d->mods = mods;
    d->u.param.dir = out ? (in ? NB_DIR_INOUT : NB_DIR_OUT) : NB_DIR_IN;
    d->u.param.index = index;
    if (np_kind(p) == NB_TOK_IDENT) {
        d->loc = np_loc(p);
        d->name = np_tok_text(p);
        np_advance(p);
    }
    nb_pvec dims = {0};
    np_parse_dims(p, &dims);
    d->u.param.texpr = dims.n ? np_type_with_dims(p, t, &dims) : t;
    if (np_kind(p) == NB_TOK_COLON && np_peek_kind(p, 1) == NB_TOK_IDENT) { /* `: SV_DispatchThreadID` */
        np_advance(p);
        d->u.param.semantic_loc = np_loc(p);
        d->u.param.semantic = np_tok_text(p);
        np_advance(p);
    }
    if (np_accept(p, NB_TOK_ASSIGN)) d->u.param.default_value = np_parse_expr(p);
    return d;
}

/* Skips to the `)` closing a parameter list (balanced), stopping before `{`, `}` or `;`. */
static void skip_params(nb_parser *p) {
    int depth = 0;
    for (;;) {
        nb_tok_kind k = np_kind(p);
        if (k == NB_TOK_EOF) break;
        if (depth == 0 && (k == NB_TOK_LBRACE || k == NB_TOK_RBRACE || k == NB_TOK_SEMI)) break;
        np_advance(p);
        if (k == NB_TOK_LPAREN) depth++;
        else if (k == NB_TOK_RPAREN && depth-- == 0) break;
    }
    p->panic = 0;
}

static void parse_wheres(nb_parser *p, nb_decl *fn);

/* Slang's unsized array parameters `float f(int b[])`: each `[]` of a parameter becomes an
 * implicit value generic parameter `let __len_b : int` (`int b[__len_b]`), so the function is
 * instantiated per argument length like `f<let N : int>(int b[N])` (its length is inferred from
 * the argument). Explicit generic parameters come first (merge_gparams). */
static void implicit_length_gparams(nb_parser *p, nb_decl *fn) {
    nb_pvec g = {0};
    for (int i = 0; i < fn->u.func.nparams; i++) {
        nb_decl *prm = fn->u.func.params[i];
        nb_type_expr *te = prm ? prm->u.param.texpr : NULL;
        for (int k = 0; te && k < te->narray_dims; k++) {
            if (te->array_dims[k]) continue;
            char nm[96];
            if (k) snprintf(nm, sizeof nm, "__len_%s_%d", prm->name[0] ? prm->name : "arg", k);
            else snprintf(nm, sizeof nm, "__len_%s", prm->name[0] ? prm->name : "arg");
            const char *name = np_strndup(p, nm, strlen(nm));
            nb_decl *gp = new_decl(p, NB_DECL_PARAM, te->loc, name);
            nb_type_expr *it = np_alloc(p, sizeof *it);
            it->loc = te->loc;
            it->name = "int";
            gp->u.param.texpr = it;
            gp->u.param.index = g.n;
            np_push(p, &g, gp);
            nb_expr *v = np_new_expr(p, NB_EX_NAME, te->loc);
            v->u.name.name = name;
            te->array_dims[k] = v;
        }
    }
    if (!g.n) return;
    fn->u.func.gparams = (nb_decl **)np_finish(p, &g);
    fn->u.func.ngparams = g.n;
    fn->u.func.nimplicit_gparams = g.n;
}

/* fn's generic parameters become `explicit` followed by its implicit array lengths. */
static void merge_gparams(nb_parser *p, nb_decl *fn, nb_pvec *explicit) {
    int ni = fn->u.func.nimplicit_gparams;
    nb_decl **imp = fn->u.func.gparams;
    for (int i = 0; i < ni; i++) {
        imp[i]->u.param.index = explicit->n;
        np_push(p, explicit, imp[i]);
    }
    fn->u.func.gparams = (nb_decl **)np_finish(p, explicit);
    fn->u.func.ngparams = explicit->n;
}

/* After `type name`, at `(`: parameters and a body or `;`. */
static nb_decl *parse_function(nb_parser *p, nb_attr_list attrs, unsigned mods, nb_type_expr *ret,
                               nb_loc loc, const char *name, nb_decl *parent) {
    nb_decl *d = new_decl(p, NB_DECL_FUNC, loc, name);
    d->attrs = attrs;
    d->mods = mods;
    d->u.func.ret = ret;
    d->u.func.parent = parent;
    d->u.func.is_mutating = has_attr(attrs, "mutating");
    nb_loc open = np_loc(p);
    np_advance(p); /* ( */
    nb_pvec params = {0};
    if (np_kind(p) != NB_TOK_RPAREN) {
        for (;;) {
            np_push(p, &params, parse_param(p, params.n));
            if (p->panic) break;
            if (!np_accept(p, NB_TOK_COMMA)) break;
        }
    }
    if (!p->panic) {
        if (np_kind(p) == NB_TOK_RPAREN) {
            np_advance(p);
        } else {
            char found[64];
            np_describe(p, np_cur(p), found, sizeof found);
            np_error_here(p, "expected ',' or ')' in parameter list opened at %d:%d, found %s", open.line,
                          open.col, found);
        }
    }
    if (p->panic) skip_params(p);
    d->u.func.params = (nb_decl **)np_finish(p, &params);
    d->u.func.nparams = params.n;
    implicit_length_gparams(p, d);
    if (np_tok_is(np_cur(p), "where")) parse_wheres(p, d);
    if (np_kind(p) == NB_TOK_LBRACE) {
        d->u.func.body = np_parse_block(p);
    } else if (!np_accept(p, NB_TOK_SEMI)) {
        char found[64];
        np_describe(p, np_cur(p), found, sizeof found);
        np_error_here(p, "expected '{' or ';' after the parameter list of '%s', found %s", name, found);
    }
    np_apply_target_intrinsics(p, d); /* __target_intrinsic(cuda, "…") (parser_target.c) */
    return d;
}

/* Declarators after a type: name [dims] [= init] {, name [dims] [= init]} ; -> NB_DECL_VARs. */
void np_parse_var_declarators(nb_parser *p, nb_pvec *out, nb_attr_list attrs, unsigned mods,
                                  nb_type_expr *t, nb_loc loc, const char *name, int global) {
    for (;;) {
        nb_decl *d = new_decl(p, NB_DECL_VAR, loc, name);
        d->attrs = attrs;
        d->mods = mods;
        d->u.var.is_global = global;
        nb_pvec dims = {0};
        np_parse_dims(p, &dims);
        d->u.var.texpr = np_type_with_dims(p, t, &dims);
        if (np_accept(p, NB_TOK_ASSIGN)) d->u.var.init = np_parse_expr(p);
        np_push(p, out, d);
        if (p->panic || !np_accept(p, NB_TOK_COMMA)) break;
        if (np_kind(p) != NB_TOK_IDENT) {
            char found[64];
            np_describe(p, np_cur(p), found, sizeof found);
            np_error_here(p, "expected a variable name after ',', found %s", found);
            break;
        }
        loc = np_loc(p);
        name = np_tok_text(p);
        np_advance(p);
    }
    if (!p->panic) np_expect_semi(p, "declaration");
}

static const char *const unsupported_decls[] = {"class",
                                                "cbuffer", "template", "union", NULL};

/* Reports `interface Foo {` and the like clearly; returns 1 if it did. */
static int unsupported_decl(nb_parser *p) {
    const nb_token *t = np_cur(p);
    if (t->kind != NB_TOK_IDENT || np_peek_kind(p, 1) != NB_TOK_IDENT) return 0;
    for (int k = 0; unsupported_decls[k]; k++)
        if ((size_t)t->len == strlen(unsupported_decls[k]) && memcmp(t->start, unsupported_decls[k], (size_t)t->len) == 0) {
            np_error_here(p, "'%s' declarations are not supported", unsupported_decls[k]);
            return 1;
        }
    return 0;
}

static nb_decl *parse_struct(nb_parser *p, nb_attr_list attrs, unsigned mods, int is_interface);
static nb_decl *parse_generic_function(nb_parser *p, nb_attr_list attrs, unsigned mods, nb_type_expr *ret,
                                       nb_loc loc, const char *name, nb_decl *parent);

/* A struct member: field(s), static const, or method. Appends to the struct's lists. */
static nb_decl *parse_typedef(nb_parser *p, int alias);
static void parse_gparams(nb_parser *p, nb_pvec *gparams, int is_func);
static void parse_constraints(nb_parser *p, nb_pvec *list);

/* `__generic<T : IFoo> T f(T x)`: the prefix's parameters become d's (a function or struct). */
static void attach_generic_prefix(nb_parser *p, nb_decl *d, nb_pvec *g) {
    if (!g->n || !d) return;
    if (d->kind == NB_DECL_FUNC && d->u.func.ngparams == d->u.func.nimplicit_gparams) {
        merge_gparams(p, d, g); /* (only implicit array lengths so far) */
        return;
    }
    int have = d->kind == NB_DECL_FUNC ? d->u.func.ngparams : d->u.strct.ngparams;
    if (have) {
        np_error_at(p, d->loc, "'%s' has both '__generic<…>' and '<…>' generic parameters", d->name);
        return;
    }
    nb_decl **items = (nb_decl **)np_finish(p, g);
    if (d->kind == NB_DECL_FUNC) {
        d->u.func.gparams = items;
        d->u.func.ngparams = g->n;
    } else {
        d->u.strct.gparams = items;
        d->u.strct.ngparams = g->n;
    }
}

/* `associatedtype A [: IFoo];` inside an interface (at the word). */
static nb_decl *parse_assoctype(nb_parser *p) {
    np_advance(p);
    if (np_kind(p) != NB_TOK_IDENT) {
        np_error_here(p, "expected a name after 'associatedtype'");
        return NULL;
    }
    nb_decl *d = new_decl(p, NB_DECL_TYPEDEF, np_loc(p), np_tok_text(p));
    np_nameset_add(p, &p->types, np_cur(p)->start, (size_t)np_cur(p)->len);
    np_advance(p);
    nb_pvec cons = {0};
    if (np_accept(p, NB_TOK_COLON)) parse_constraints(p, &cons);
    d->u.tdef.constraints = (nb_type_expr **)np_finish(p, &cons);
    d->u.tdef.nconstraints = cons.n;
    np_expect_semi(p, "associatedtype");
    return d;
}

/* After the word `operator` of `S operator+(S a, S b)`: the operator's symbol, returned as the
 * function's name "operator+" ("operator()" for the call operator, "operator[]"); NULL after an
 * error. */
static const char *parse_operator_name(nb_parser *p) {
    const nb_token *t = np_cur(p);
    switch (t->kind) {
    case NB_TOK_LPAREN:
        if (np_peek_kind(p, 1) != NB_TOK_RPAREN) break;
        np_advance(p);
        np_advance(p);
        return "operator()";
    case NB_TOK_LBRACKET:
        if (np_peek_kind(p, 1) != NB_TOK_RBRACKET) break;
        np_advance(p);
        np_advance(p);
        return "operator[]";
    case NB_TOK_PLUS: case NB_TOK_MINUS: case NB_TOK_STAR: case NB_TOK_SLASH: case NB_TOK_PERCENT:
    case NB_TOK_AMP: case NB_TOK_PIPE: case NB_TOK_CARET: case NB_TOK_TILDE: case NB_TOK_NOT:
    case NB_TOK_SHL: case NB_TOK_SHR: case NB_TOK_LT: case NB_TOK_GT: case NB_TOK_LE: case NB_TOK_GE:
    case NB_TOK_EQ: case NB_TOK_NE: case NB_TOK_ANDAND: case NB_TOK_OROR:
    case NB_TOK_PLUS_ASSIGN: case NB_TOK_MINUS_ASSIGN: case NB_TOK_STAR_ASSIGN: case NB_TOK_SLASH_ASSIGN:
    case NB_TOK_INC: case NB_TOK_DEC: {
        char buf[16];
        snprintf(buf, sizeof buf, "operator%.*s", t->len, t->start);
        np_advance(p);
        return np_strndup(p, buf, strlen(buf));
    }
    default: break;
    }
    char found[64];
    np_describe(p, t, found, sizeof found);
    np_error_here(p, "expected an operator after 'operator', found %s", found);
    return NULL;
}

static nb_stmt *init_stmt(nb_parser *p, nb_stmt_kind kind, nb_loc loc) {
    nb_stmt *st = np_alloc(p, sizeof *st);
    st->kind = kind;
    st->loc = loc;
    st->max_iters = -1;
    return st;
}

static nb_expr *this_name(nb_parser *p, nb_loc loc) {
    nb_expr *e = np_new_expr(p, NB_EX_NAME, loc);
    e->u.name.name = "this";
    return e;
}

/* A parameter declaration made by the parser (`newValue` of a setter). */
static nb_decl *synth_param(nb_parser *p, nb_loc loc, const char *name, nb_type_expr *t, int index) {
    nb_decl *d = new_decl(p, NB_DECL_PARAM, loc, name);
    d->u.param.texpr = t;
    d->u.param.index = index;
    return d;
}

/* The accessor block `{ [attrs] get {…} | get; [attrs] set [(T v)] {…} | set; }` of a property
 * or `__subscript` (at '{'): each accessor becomes a method of s named get_name / set_name
 * (`T get_name(params)`, `[mutating] void set_name(params, T newValue)`). */
static void parse_accessors(nb_parser *p, nb_decl *s, nb_attr_list outer, unsigned mods, nb_type_expr *t,
                            nb_pvec *params, const char *get_name, const char *set_name, nb_pvec *methods) {
    nb_loc open = np_loc(p);
    if (!np_accept(p, NB_TOK_LBRACE)) {
        np_error_here(p, "expected '{' with 'get' / 'set' accessors");
        return;
    }
    while (np_kind(p) != NB_TOK_RBRACE && np_kind(p) != NB_TOK_EOF && !p->panic) {
        nb_attr_list attrs = np_parse_attrs(p);
        if (!attrs.count) attrs = outer;
        nb_loc loc = np_loc(p);
        int is_get = np_tok_is(np_cur(p), "get"), is_set = np_tok_is(np_cur(p), "set");
        if (!is_get && !is_set) {
            char found[64];
            np_describe(p, np_cur(p), found, sizeof found);
            np_error_here(p, "expected 'get' or 'set' in the accessors, found %s", found);
            break;
        }
        np_advance(p);
        nb_decl *fn = new_decl(p, NB_DECL_FUNC, loc, is_get ? get_name : set_name);
        fn->attrs = attrs;
        fn->mods = mods;
        fn->u.func.parent = s;
        nb_pvec ps = {0};
        for (int i = 0; i < params->n; i++) np_push(p, &ps, params->items[i]);
        if (is_get) {
            fn->u.func.ret = t;
        } else {
            nb_type_expr *vt = np_alloc(p, sizeof *vt);
            vt->loc = loc;
            vt->name = "void";
            fn->u.func.ret = vt;
            fn->u.func.is_mutating = !has_attr(attrs, "nonmutating");
            const char *vname = "newValue";
            nb_type_expr *ptype = t;
            if (np_accept(p, NB_TOK_LPAREN)) { /* set(float v) */
                if (np_kind(p) != NB_TOK_RPAREN) {
                    ptype = np_parse_type(p, 1);
                    if (np_kind(p) == NB_TOK_IDENT) {
                        vname = np_tok_text(p);
                        np_advance(p);
                    }
                }
                np_expect_close(p, NB_TOK_RPAREN, loc);
            }
            np_push(p, &ps, synth_param(p, loc, vname, ptype, ps.n));
        }
        fn->u.func.params = (nb_decl **)np_finish(p, &ps);
        fn->u.func.nparams = ps.n;
        if (np_kind(p) == NB_TOK_LBRACE) fn->u.func.body = np_parse_block(p);
        else np_expect_semi(p, is_get ? "get" : "set");
        np_push(p, methods, fn);
    }
    if (!p->panic) np_expect_close(p, NB_TOK_RBRACE, open);
}

/* `property p : float { … }` / `property float p { … }` (at `property`). */
static void parse_property(nb_parser *p, nb_decl *s, nb_attr_list attrs, unsigned mods, nb_pvec *methods) {
    np_advance(p);
    if (np_accept(p, NB_TOK_KW_NO_DIFF)) mods |= NB_MOD_NO_DIFF;
    const char *name = NULL;
    nb_type_expr *t = NULL;
    if (np_kind(p) == NB_TOK_IDENT && np_peek_kind(p, 1) == NB_TOK_COLON) {
        name = np_tok_text(p);
        np_advance(p);
        np_advance(p);
        t = np_parse_type(p, 1);
    } else {
        t = np_parse_type(p, 1);
        if (np_kind(p) != NB_TOK_IDENT) {
            np_error_here(p, "expected a property name");
            return;
        }
        name = np_tok_text(p);
        np_advance(p);
    }
    char gn[160], sn[160];
    snprintf(gn, sizeof gn, "__get_%s", name);
    snprintf(sn, sizeof sn, "__set_%s", name);
    nb_pvec none = {0};
    if (np_accept(p, NB_TOK_SEMI)) return; /* `property float p;`: a plain field would do */
    parse_accessors(p, s, attrs, mods, t, &none, np_strndup(p, gn, strlen(gn)), np_strndup(p, sn, strlen(sn)),
                    methods);
}

/* `__subscript(int i) -> float { get {…} set {…} }` (at `__subscript`). */
static void parse_subscript(nb_parser *p, nb_decl *s, nb_attr_list attrs, unsigned mods, nb_pvec *methods) {
    nb_loc loc = np_loc(p);
    np_advance(p);
    if (np_kind(p) == NB_TOK_LT) {
        np_error_here(p, "generic '__subscript' is not supported");
        return;
    }
    if (!np_accept(p, NB_TOK_LPAREN)) {
        np_error_here(p, "expected '(' after '__subscript'");
        return;
    }
    nb_pvec params = {0};
    if (np_kind(p) != NB_TOK_RPAREN) {
        for (;;) {
            np_push(p, &params, parse_param(p, params.n));
            if (p->panic || !np_accept(p, NB_TOK_COMMA)) break;
        }
    }
    if (p->panic || !np_expect_close(p, NB_TOK_RPAREN, loc)) return;
    if (!np_accept(p, NB_TOK_ARROW)) {
        np_error_here(p, "expected '->' and the element type after the parameters of '__subscript'");
        return;
    }
    if (np_accept(p, NB_TOK_KW_NO_DIFF)) mods |= NB_MOD_NO_DIFF; /* `-> no_diff float` */
    nb_type_expr *t = np_parse_type(p, 1);
    parse_accessors(p, s, attrs, mods, t, &params, "__subscript_get", "__subscript_set", methods);
}

/* `return;` inside a constructor body returns the object being built. */
static void init_returns(nb_parser *p, nb_stmt *st) {
    if (!st) return;
    switch (st->kind) {
    case NB_ST_BLOCK:
        for (int i = 0; i < st->u.block.count; i++) init_returns(p, st->u.block.items[i]);
        break;
    case NB_ST_IF: init_returns(p, st->u.if_s.then_s); init_returns(p, st->u.if_s.else_s); break;
    case NB_ST_FOR: init_returns(p, st->u.for_s.body); break;
    case NB_ST_WHILE: case NB_ST_DO_WHILE: init_returns(p, st->u.while_s.body); break;
    case NB_ST_SWITCH:
        for (int i = 0; i < st->u.switch_s.ncases; i++)
            for (int j = 0; j < st->u.switch_s.cases[i].nbody; j++) init_returns(p, st->u.switch_s.cases[i].body[j]);
        break;
    case NB_ST_RETURN:
        if (!st->u.ret.value) st->u.ret.value = this_name(p, st->loc);
        break;
    default: break;
    }
}

/* `__init(params) { body }` (at `__init`): a constructor, desugared into
 * `static This __init(params) { This this; body; return this; }`. */
static nb_decl *parse_init(nb_parser *p, nb_decl *s, nb_attr_list attrs, unsigned mods) {
    nb_loc loc = np_loc(p);
    np_advance(p);
    nb_type_expr *ret = np_alloc(p, sizeof *ret);
    ret->loc = loc;
    ret->name = "This";
    nb_pvec gparams = {0};
    if (np_kind(p) == NB_TOK_LT) parse_gparams(p, &gparams, 1);
    if (np_kind(p) != NB_TOK_LPAREN) {
        np_error_here(p, "expected '(' after '__init'");
        return NULL;
    }
    nb_decl *fn = parse_function(p, attrs, mods | NB_MOD_STATIC, ret, loc, "__init", s);
    fn->u.func.is_init = 1;
    fn->u.func.gparams = (nb_decl **)np_finish(p, &gparams);
    fn->u.func.ngparams = gparams.n;
    nb_stmt *body = fn->u.func.body;
    if (!body) return fn;
    init_returns(p, body);
    nb_decl *v = new_decl(p, NB_DECL_VAR, loc, "this");
    nb_type_expr *vt = np_alloc(p, sizeof *vt);
    *vt = *ret;
    v->u.var.texpr = vt;
    nb_stmt *decl = init_stmt(p, NB_ST_VAR, loc);
    decl->u.var.vars = np_alloc(p, sizeof(nb_decl *));
    decl->u.var.vars[0] = v;
    decl->u.var.count = 1;
    nb_stmt *ret_st = init_stmt(p, NB_ST_RETURN, np_prev_end(p));
    ret_st->u.ret.value = this_name(p, ret_st->loc);
    nb_stmt *blk = init_stmt(p, NB_ST_BLOCK, body->loc);
    blk->u.block.items = np_alloc(p, sizeof(nb_stmt *) * 3);
    blk->u.block.items[0] = decl;
    blk->u.block.items[1] = body;
    blk->u.block.items[2] = ret_st;
    blk->u.block.count = 3;
    fn->u.func.body = blk;
    return fn;
}

static void parse_member(nb_parser *p, nb_decl *s, nb_pvec *fields, nb_pvec *statics, nb_pvec *methods,
                         nb_pvec *types) {
    if (np_accept(p, NB_TOK_SEMI)) return;
    nb_attr_list attrs = np_parse_attrs(p);
    unsigned mods = parse_mods(p);
    if (np_kind(p) == NB_TOK_KW_TYPEDEF || np_kind(p) == NB_TOK_KW_TYPEALIAS) {
        nb_decl *td = parse_typedef(p, np_kind(p) == NB_TOK_KW_TYPEALIAS);
        td->module = p->mod;
        np_push(p, types, td);
        return;
    }
    if (np_tok_is(np_cur(p), "associatedtype")) {
        nb_decl *td = parse_assoctype(p);
        if (td) np_push(p, types, td);
        return;
    }
    nb_pvec generic_prefix = {0};
    if (np_tok_is(np_cur(p), "__generic") && np_peek_kind(p, 1) == NB_TOK_LT) {
        np_advance(p);
        parse_gparams(p, &generic_prefix, 1);
        nb_attr_list more = np_parse_attrs(p);
        if (!attrs.count) attrs = more;
        mods |= parse_mods(p);
    }
    if (np_accept(p, NB_TOK_KW_NO_DIFF)) mods |= NB_MOD_NO_DIFF;
    nb_tok_kind k = np_kind(p);
    if (k == NB_TOK_KW_STRUCT) {
        np_error_here(p, "nested struct declarations are not supported");
        return;
    }
    if (np_tok_is(np_cur(p), "property") && np_peek_kind(p, 1) != NB_TOK_LPAREN) {
        parse_property(p, s, attrs, mods, methods);
        return;
    }
    if (np_tok_is(np_cur(p), "__subscript")) {
        int n0 = methods->n;
        parse_subscript(p, s, attrs, mods, methods);
        /* `__generic<I : IInteger> __subscript(I i)`: every accessor is generic over I */
        for (int mk = n0; mk < methods->n; mk++) attach_generic_prefix(p, methods->items[mk], &generic_prefix);
        return;
    }
    if (np_tok_is(np_cur(p), "__init") && (np_peek_kind(p, 1) == NB_TOK_LPAREN || np_peek_kind(p, 1) == NB_TOK_LT)) {
        nb_decl *fn = parse_init(p, s, attrs, mods);
        if (fn) {
            attach_generic_prefix(p, fn, &generic_prefix);
            np_push(p, methods, fn);
        }
        return;
    }
    if (k == NB_TOK_IDENT && np_peek_kind(p, 1) == NB_TOK_LPAREN) {
        const nb_token *t = np_cur(p);
        np_error_here(p, "expected a return type before method name '%.*s'", t->len, t->start);
        return;
    }
    if (k != NB_TOK_IDENT) {
        char found[64];
        np_describe(p, np_cur(p), found, sizeof found);
        np_error_here(p, "expected a member declaration, found %s", found);
        return;
    }
    if (unsupported_decl(p)) return;
    nb_type_expr *t = np_parse_type(p, 1);
    if (np_kind(p) != NB_TOK_IDENT) {
        char found[64];
        np_describe(p, np_cur(p), found, sizeof found);
        np_error_here(p, "expected a member name, found %s", found);
        return;
    }
    nb_loc loc = np_loc(p);
    const char *name = np_tok_text(p);
    np_advance(p);
    if (strcmp(name, "operator") == 0 && !(name = parse_operator_name(p))) return;
    nb_decl *fn = parse_generic_function(p, attrs, mods, t, loc, name, s);
    if (!fn && np_kind(p) == NB_TOK_LPAREN) fn = parse_function(p, attrs, mods, t, loc, name, s);
    if (fn) {
        attach_generic_prefix(p, fn, &generic_prefix);
        np_push(p, methods, fn);
        return;
    }
    if (generic_prefix.n) np_error_at(p, loc, "'__generic' must be followed by a function or a struct");
    nb_pvec vars = {0};
    np_parse_var_declarators(p, &vars, attrs, mods, t, loc, name, 0);
    for (int i = 0; i < vars.n; i++) np_push(p, (mods & NB_MOD_STATIC) ? statics : fields, vars.items[i]);
}

/* Interface constraints after ':' (`T : IFoo`, `IFoo & IBar`), appended to list. */
static void parse_constraints(nb_parser *p, nb_pvec *list) {
    do {
        np_push(p, list, np_parse_type(p, 0));
    } while (!p->panic && np_accept(p, NB_TOK_AMP));
}

/* Generic parameters `<let W : int, T : IFoo, let L : int = 2, U = float>` (at '<'); type
 * parameter names become type names for the rest of the file (casts `(T)x`, `vector<T, N>`);
 * recovers to '{', '(' or ';'. */
static void parse_gparams(nb_parser *p, nb_pvec *gparams, int is_func) {
    nb_loc open = np_loc(p);
    np_advance(p);
    while (np_kind(p) != NB_TOK_GT && !p->panic) {
        /* `int N` (Slang's older spelling of `let N : int`): a value parameter of that type */
        int typed = np_kind(p) == NB_TOK_IDENT && np_peek_kind(p, 1) == NB_TOK_IDENT &&
                    np_is_builtin_type_name(np_cur(p)->start, (size_t)np_cur(p)->len);
        nb_type_expr *typed_te = typed ? np_parse_type(p, 0) : NULL;
        if (typed || np_accept(p, NB_TOK_KW_LET)) {
            if (np_kind(p) != NB_TOK_IDENT) {
                np_error_here(p, "expected a name after 'let' in generic parameters");
                break;
            }
            nb_decl *g = new_decl(p, NB_DECL_PARAM, np_loc(p), np_tok_text(p));
            np_advance(p);
            g->u.param.index = gparams->n;
            if (typed_te) {
                g->u.param.texpr = typed_te;
            } else if (np_accept(p, NB_TOK_COLON)) {
                g->u.param.texpr = np_parse_type(p, 0);
            } else {
                np_error_here(p, "expected ':' and a type after generic parameter '%s' (e.g. 'let %s : int')",
                              g->name, g->name);
            }
            if (np_accept(p, NB_TOK_ASSIGN)) g->u.param.default_value = np_parse_generic_value(p);
            np_push(p, gparams, g);
        } else if (np_kind(p) == NB_TOK_IDENT) {
            const nb_token *t = np_cur(p);
            nb_decl *g = new_decl(p, NB_DECL_PARAM, np_loc(p), np_tok_text(p));
            np_nameset_add(p, &p->types, t->start, (size_t)t->len);
            np_advance(p);
            g->u.param.index = gparams->n;
            g->u.param.is_type = 1;
            nb_pvec cons = {0};
            if (np_accept(p, NB_TOK_COLON)) parse_constraints(p, &cons);
            g->u.param.constraints = (nb_type_expr **)np_finish(p, &cons);
            g->u.param.nconstraints = cons.n;
            if (np_accept(p, NB_TOK_ASSIGN)) g->u.param.default_type = np_parse_type(p, 1);
            np_push(p, gparams, g);
        } else {
            np_error_here(p, "expected a generic parameter ('T : IFoo' or 'let N : int')");
            break;
        }
        if (!np_accept(p, NB_TOK_COMMA)) break;
    }
    if (!p->panic) np_expect_close(p, NB_TOK_GT, open);
    if (p->panic) { /* skip to the body or the parameter list */
        while (np_kind(p) != NB_TOK_LBRACE && np_kind(p) != NB_TOK_SEMI && np_kind(p) != NB_TOK_EOF &&
               np_kind(p) != NB_TOK_RBRACE && !(is_func && np_kind(p) == NB_TOK_LPAREN))
            np_advance(p);
        p->panic = 0;
    }
}

/* `where T : IFoo, IBar` / `where T.Differential == T` clauses (possibly several, also
 * `where T : IFoo, U : IBar`) after a function's parameter list or a struct's conformances:
 * each a PARAM named T (or "T.Differential") with its constraints; an equality is kept in
 * default_type (parsed, not enforced: instantiations are checked as ordinary code). */
static void parse_wheres_into(nb_parser *p, nb_pvec *ws) {
    while (np_tok_is(np_cur(p), "where") && !p->panic) {
        np_advance(p);
        for (;;) {
            if (np_kind(p) != NB_TOK_IDENT) {
                np_error_here(p, "expected a generic parameter name after 'where'");
                return;
            }
            nb_type_expr *subject = np_parse_type(p, 1); /* T or T.Differential */
            nb_decl *w = new_decl(p, NB_DECL_PARAM, subject->loc, subject->name);
            w->u.param.is_type = 1;
            if (np_accept(p, NB_TOK_EQ)) {
                w->u.param.default_type = np_parse_type(p, 1);
                np_push(p, ws, w);
            } else if (np_accept(p, NB_TOK_COLON)) {
                nb_pvec cons = {0};
                for (;;) {
                    parse_constraints(p, &cons);
                    /* `, IBar` continues the list; `, U : IBar` starts another clause */
                    if (p->panic || np_kind(p) != NB_TOK_COMMA || np_peek_kind(p, 1) != NB_TOK_IDENT) break;
                    nb_tok_kind after = np_peek_kind(p, 2);
                    if (after == NB_TOK_COLON || after == NB_TOK_EQ || after == NB_TOK_DOT) break;
                    np_advance(p);
                }
                w->u.param.constraints = (nb_type_expr **)np_finish(p, &cons);
                w->u.param.nconstraints = cons.n;
                np_push(p, ws, w);
            } else {
                np_error_here(p, "expected ':' and an interface (or '==' and a type) after 'where %s'", w->name);
                return;
            }
            if (p->panic || !np_accept(p, NB_TOK_COMMA)) break;
        }
    }
}

static void parse_wheres(nb_parser *p, nb_decl *fn) {
    nb_pvec ws = {0};
    parse_wheres_into(p, &ws);
    fn->u.func.wheres = (nb_decl **)np_finish(p, &ws);
    fn->u.func.nwheres = ws.n;
}

/* At '<': whether generic parameters follow (`<let`, `<T :`, `<T,`, `<T>`, `<T =`). */
static int at_gparams(nb_parser *p) {
    if (np_kind(p) != NB_TOK_LT) return 0;
    if (np_peek_kind(p, 1) == NB_TOK_KW_LET) return 1;
    if (np_peek_kind(p, 1) != NB_TOK_IDENT) return 0;
    nb_tok_kind k = np_peek_kind(p, 2);
    const nb_token *t1 = np_peek(p, 1);
    if (k == NB_TOK_IDENT && np_is_builtin_type_name(t1->start, (size_t)t1->len)) return 1; /* <int N> */
    return k == NB_TOK_COLON || k == NB_TOK_COMMA || k == NB_TOK_GT || k == NB_TOK_ASSIGN;
}

/* After `type name`, at `<let` / `<T :`: a generic function `T name<let N : int>(…) {…}`; NULL
 * (nothing consumed) when no generic parameters follow. */
static nb_decl *parse_generic_function(nb_parser *p, nb_attr_list attrs, unsigned mods, nb_type_expr *ret,
                                       nb_loc loc, const char *name, nb_decl *parent) {
    if (!at_gparams(p)) return NULL;
    nb_pvec gparams = {0};
    parse_gparams(p, &gparams, 1);
    nb_decl *d;
    if (np_kind(p) == NB_TOK_LPAREN) {
        d = parse_function(p, attrs, mods, ret, loc, name, parent);
    } else {
        char found[64];
        np_describe(p, np_cur(p), found, sizeof found);
        np_error_here(p, "expected '(' after the generic parameters of '%s', found %s", name, found);
        d = new_decl(p, NB_DECL_FUNC, loc, name);
        d->attrs = attrs;
        d->mods = mods;
        d->u.func.ret = ret;
        d->u.func.parent = parent;
    }
    merge_gparams(p, d, &gparams);
    return d;
}

/* struct Name [<let W : int, T : IFoo, …>] [: I, …] { members } [;]
 * interface Name [: Base, …] { requirements } [;] (is_interface) */
static nb_decl *parse_struct(nb_parser *p, nb_attr_list attrs, unsigned mods, int is_interface) {
    nb_loc kwloc = np_loc(p);
    int is_ext = is_interface == 2; /* extension S [: I] { members } */
    const char *kw = is_ext ? "extension" : is_interface ? "interface" : "struct";
    const char *ext_iface = NULL;
    nb_decl *ext_generic = NULL;
    if (is_ext && np_peek_kind(p, 1) == NB_TOK_LT) {
        /* `extension<T : I> T { members }`: every type conforming to I (and I's values) gets the
         * members: they become members of I with their bodies as defaults (a conformer's own
         * member of the same name wins). Other generic extensions are refused. */
        nb_loc lt = np_peek(p, 1)->loc;
        np_advance(p);
        nb_pvec gp = {0};
        parse_gparams(p, &gp, 1);
        nb_decl *g = gp.n == 1 ? gp.items[0] : NULL;
        if (p->panic) return NULL;
        if (np_kind(p) == NB_TOK_IDENT && np_peek_kind(p, 1) == NB_TOK_LT && np_is_generic_name(p, np_cur(p))) {
            /* `extension<T : IFoo> S<T> { members }` of a generic struct, the same parameters in
             * order: the members become S's (checked per instantiation, as S's own) */
            nb_decl *ext = new_decl(p, NB_DECL_EXTENSION, np_loc(p), np_tok_text(p));
            ext->attrs = attrs;
            ext->mods = mods;
            ext->u.strct.ext_of_generic = 1;
            ext->u.strct.gparams = (nb_decl **)np_finish(p, &gp);
            ext->u.strct.ngparams = gp.n;
            nb_type_expr *te = np_parse_type(p, 0);
            int same = te && te->ntargs == gp.n;
            for (int i = 0; same && i < gp.n; i++) {
                const nb_decl *q = gp.items[i];
                const char *a = te->targs && te->targs[i] ? te->targs[i]->name
                                : te->vargs && te->vargs[i] && te->vargs[i]->kind == NB_EX_NAME ? te->vargs[i]->u.name.name
                                                                                                : NULL;
                same = a && q->name && !strcmp(a, q->name) && (!te->targs || !te->targs[i] || !te->targs[i]->ntargs);
            }
            if (!same) {
                np_error_at(p, te ? te->loc : lt, "an extension of generic struct '%s' must name it with the extension's "
                            "own parameters in order ('extension<T : I> %s<T>'); extensions of instantiations are "
                            "not supported", ext->name, ext->name);
                return NULL;
            }
            ext_generic = ext;
        } else if (!g || !g->u.param.is_type || g->u.param.nconstraints != 1 || !g->u.param.constraints[0]->name ||
            g->u.param.constraints[0]->ntargs || np_kind(p) != NB_TOK_IDENT || !np_tok_is(np_cur(p), g->name) ||
            np_peek_kind(p, 1) == NB_TOK_LT || np_peek_kind(p, 1) == NB_TOK_COLON) {
            np_error_at(p, lt, "generic extensions other than 'extension<T : I> T { … }' (members for every "
                               "type conforming to one interface) and 'extension<T : I> S<T> { … }' (of a generic "
                               "struct S) are not supported");
            return NULL;
        }
        else ext_iface = g->u.param.constraints[0]->name;
    } else {
        np_advance(p); /* struct / interface */
    }
    if (!ext_generic && np_kind(p) != NB_TOK_IDENT) {
        char found[64];
        np_describe(p, np_cur(p), found, sizeof found);
        np_error_here(p, "expected a name after '%s', found %s", kw, found);
        return NULL;
    }
    nb_decl *s = ext_generic;
    if (!s) {
        s = new_decl(p, is_ext ? NB_DECL_EXTENSION : is_interface ? NB_DECL_INTERFACE : NB_DECL_STRUCT, np_loc(p),
                     ext_iface ? ext_iface : np_tok_text(p));
        s->u.strct.ext_of_iface = ext_iface != NULL;
        s->attrs = attrs;
        s->mods = mods;
        np_advance(p);
    }
    (void)kwloc;
    nb_pvec gparams = {0};
    if (is_ext && np_kind(p) == NB_TOK_LT) {
        np_error_here(p, "extensions of generic instantiations ('extension S<…>') are not supported");
        return NULL;
    }
    if (!ext_generic) {
        if (np_kind(p) == NB_TOK_LT) parse_gparams(p, &gparams, 0);
        s->u.strct.gparams = (nb_decl **)np_finish(p, &gparams);
        s->u.strct.ngparams = gparams.n;
    }
    nb_pvec conforms = {0};
    if (np_accept(p, NB_TOK_COLON)) {
        do {
            if (np_kind(p) != NB_TOK_IDENT) {
                np_error_here(p, "expected an interface name after ':'");
                break;
            }
            /* `IData<T, D>`: the interface's name (generic interfaces are checked by their
             * requirements' names, as non-generic ones) */
            nb_type_expr *ct = np_parse_type(p, 0);
            np_push(p, &conforms, (void *)ct->name);
        } while (np_accept(p, NB_TOK_COMMA));
    }
    s->u.strct.conforms = (const char **)np_finish(p, &conforms);
    s->u.strct.nconforms = conforms.n;
    if (np_tok_is(np_cur(p), "where")) {
        nb_pvec ws = {0};
        parse_wheres_into(p, &ws);
        s->u.strct.wheres = (nb_decl **)np_finish(p, &ws);
        s->u.strct.nwheres = ws.n;
    }
    if (p->panic) return s;
    if (np_kind(p) != NB_TOK_LBRACE) {
        char found[64];
        np_describe(p, np_cur(p), found, sizeof found);
        np_error_here(p, "expected '{' after %s name '%s', found %s", kw, s->name, found);
        return s;
    }
    nb_loc open = np_loc(p);
    np_advance(p);
    nb_pvec fields = {0}, statics = {0}, methods = {0}, types = {0};
    while (np_kind(p) != NB_TOK_RBRACE && np_kind(p) != NB_TOK_EOF) {
        int before = p->pos;
        parse_member(p, s, &fields, &statics, &methods, &types);
        if (p->panic) np_sync(p);
        if (p->pos == before && np_kind(p) != NB_TOK_RBRACE) np_advance(p);
    }
    np_expect_close(p, NB_TOK_RBRACE, open);
    np_accept(p, NB_TOK_SEMI);
    s->u.strct.fields = (nb_decl **)np_finish(p, &fields);
    s->u.strct.nfields = fields.n;
    s->u.strct.statics = (nb_decl **)np_finish(p, &statics);
    s->u.strct.nstatics = statics.n;
    s->u.strct.methods = (nb_decl **)np_finish(p, &methods);
    s->u.strct.nmethods = methods.n;
    s->u.strct.types = (nb_decl **)np_finish(p, &types);
    s->u.strct.ntypes = types.n;
    return s;
}

/* A module or file name after import / __include / module / implementing:
 * `name[.name…]` -> "name.name" (*quoted 0), or `"path"` -> path without quotes (*quoted 1).
 * NULL (diagnosed) when neither follows. */
static const char *parse_module_ref(nb_parser *p, const char *what, int *quoted) {
    *quoted = 0;
    if (np_kind(p) == NB_TOK_STRING) {
        const nb_token *t = np_cur(p);
        char *path = np_alloc(p, (size_t)t->len);
        int n = 0;
        for (int i = 1; i < t->len - 1; i++) {
            if (t->start[i] == '\\' && i + 1 < t->len - 1) i++;
            path[n++] = t->start[i];
        }
        path[n] = '\0';
        np_advance(p);
        *quoted = 1;
        return path;
    }
    if (np_kind(p) == NB_TOK_IDENT) {
        /* "a.b.c" from the tokens (whatever blanks or comments sit between the parts) */
        int first = p->pos, last = p->pos;
        size_t len = (size_t)np_cur(p)->len;
        np_advance(p);
        while (np_kind(p) == NB_TOK_DOT && np_peek_kind(p, 1) == NB_TOK_IDENT) {
            np_advance(p);
            len += 1 + (size_t)np_cur(p)->len;
            last = p->pos;
            np_advance(p);
        }
        char *path = np_alloc(p, len + 1);
        size_t n = 0;
        for (int i = first; i <= last; i++) {
            const nb_token *t = &p->toks[i];
            if (t->kind == NB_TOK_DOT) path[n++] = '.';
            else if (t->kind == NB_TOK_IDENT) {
                memcpy(path + n, t->start, (size_t)t->len);
                n += (size_t)t->len;
            }
        }
        path[n] = '\0';
        return path;
    }
    char found[64];
    np_describe(p, np_cur(p), found, sizeof found);
    np_error_here(p, "expected a module name after '%s', found %s", what, found);
    return NULL;
}

/* import name[.name…];  |  import "path";  |  __include name; |  __include "path"; */
static nb_decl *parse_import(nb_parser *p, int include, int exported) {
    nb_loc loc = np_loc(p);
    np_advance(p);
    nb_decl *d = new_decl(p, NB_DECL_IMPORT, loc, "");
    int quoted = 0;
    d->u.import.path = parse_module_ref(p, include ? "__include" : "import", &quoted);
    d->u.import.quoted = quoted;
    d->u.import.include = include;
    d->u.import.exported = exported;
    if (!d->u.import.path) return d;
    d->name = d->u.import.path;
    np_expect_semi(p, include ? "__include" : "import");
    return d;
}

static nb_decl *parse_typedef(nb_parser *p, int alias) {
    nb_loc loc = np_loc(p);
    np_advance(p);
    nb_decl *d = new_decl(p, NB_DECL_TYPEDEF, loc, "");
    if (alias) {
        if (np_kind(p) != NB_TOK_IDENT) {
            np_error_here(p, "expected a name after 'typealias'");
            return d;
        }
        d->loc = np_loc(p);
        d->name = np_tok_text(p);
        np_advance(p);
        if (!np_accept(p, NB_TOK_ASSIGN)) {
            np_error_here(p, "expected '=' after 'typealias %s'", d->name);
            return d;
        }
        d->u.tdef.texpr = np_parse_type(p, 1);
    } else {
        nb_type_expr *t = np_parse_type(p, 1);
        if (np_kind(p) != NB_TOK_IDENT) {
            np_error_here(p, "expected a name for the typedef");
            return d;
        }
        d->loc = np_loc(p);
        d->name = np_tok_text(p);
        np_advance(p);
        nb_pvec dims = {0};
        np_parse_dims(p, &dims);
        d->u.tdef.texpr = dims.n ? np_type_with_dims(p, t, &dims) : t;
    }
    np_expect_semi(p, alias ? "typealias" : "typedef");
    return d;
}

static void parse_toplevel_decl(nb_parser *p, nb_pvec *out, nb_attr_list attrs, unsigned mods);

/* One top-level declaration (possibly several variables); appends to out. */
static void parse_toplevel(nb_parser *p, nb_pvec *out) {
    nb_tok_kind k = np_kind(p);
    if (k == NB_TOK_SEMI) {
        np_advance(p);
        return;
    }
    if (k == NB_TOK_RBRACE || k == NB_TOK_RPAREN || k == NB_TOK_RBRACKET) {
        np_error_here(p, "unexpected %s", nb_tok_name(k));
        np_advance(p);
        p->panic = 0;
        return;
    }
    if (k == NB_TOK_ERROR) { /* already reported by the lexer */
        np_advance(p);
        return;
    }
    if (np_at_namespace(p)) { /* namespace A.B { … } / using namespace A.B; (parser_namespace.c) */
        np_parse_namespace(p, out, parse_toplevel);
        return;
    }
    nb_attr_list attrs = np_parse_attrs(p);
    unsigned mods = parse_mods(p);
    if (np_kind(p) == NB_TOK_KW_NO_DIFF && np_peek_kind(p, 1) != NB_TOK_LPAREN) {
        /* `no_diff static const float k = 1;`: constants carry no derivative anyway */
        np_advance(p);
        mods |= NB_MOD_NO_DIFF | parse_mods(p);
    }
    nb_pvec generic_prefix = {0};
    if (np_tok_is(np_cur(p), "__generic") && np_peek_kind(p, 1) == NB_TOK_LT) {
        np_advance(p);
        parse_gparams(p, &generic_prefix, 1);
        nb_attr_list more = np_parse_attrs(p);
        if (!attrs.count) attrs = more;
        mods |= parse_mods(p);
        int n0 = out->n;
        parse_toplevel_decl(p, out, attrs, mods);
        if (out->n == n0 + 1) attach_generic_prefix(p, out->items[n0], &generic_prefix);
        else np_error_at(p, np_loc(p), "'__generic' must be followed by a function or a struct");
        return;
    }
    parse_toplevel_decl(p, out, attrs, mods);
}

/* The declaration after the attributes and modifiers. */
static void parse_toplevel_decl(nb_parser *p, nb_pvec *out, nb_attr_list attrs, unsigned mods) {
    nb_tok_kind k = np_kind(p);
    if (np_tok_is(np_cur(p), "dyn") && np_tok_is(np_peek(p, 1), "interface")) np_advance(p); /* `dyn interface` */
    if (np_tok_is(np_cur(p), "extension") && (np_peek_kind(p, 1) == NB_TOK_IDENT || np_peek_kind(p, 1) == NB_TOK_LT)) {
        nb_decl *s = parse_struct(p, attrs, mods, 2);
        if (s) np_push(p, out, s);
        return;
    }
    if (np_tok_is(np_cur(p), "interface") && np_peek_kind(p, 1) == NB_TOK_IDENT) {
        nb_decl *s = parse_struct(p, attrs, mods, 1);
        if (s) np_push(p, out, s);
        return;
    }
    if (k == NB_TOK_KW_IMPORT) {
        np_push(p, out, parse_import(p, 0, 0));
        return;
    }
    if (np_tok_is(np_cur(p), "__exported") && np_peek_kind(p, 1) == NB_TOK_KW_IMPORT) {
        np_advance(p);
        np_push(p, out, parse_import(p, 0, 1));
        return;
    }
    if (np_tok_is(np_cur(p), "__include") && (np_peek_kind(p, 1) == NB_TOK_IDENT || np_peek_kind(p, 1) == NB_TOK_STRING)) {
        p->mod->access_control = 1;
        np_push(p, out, parse_import(p, 1, 0));
        return;
    }
    if ((np_tok_is(np_cur(p), "module") || np_tok_is(np_cur(p), "implementing")) &&
        (np_peek_kind(p, 1) == NB_TOK_STRING ||
         (np_peek_kind(p, 1) == NB_TOK_IDENT && (np_peek_kind(p, 2) == NB_TOK_SEMI || np_peek_kind(p, 2) == NB_TOK_DOT)))) {
        /* `module NAME;` (this file is a module's primary file) / `implementing NAME;` */
        int is_module = np_tok_is(np_cur(p), "module"), quoted = 0;
        np_advance(p);
        const char *name = parse_module_ref(p, is_module ? "module" : "implementing", &quoted);
        if (!name) return;
        if (is_module) {
            if (p->mod->declared) np_error_here(p, "a file has at most one 'module' declaration");
            p->mod->declared = name;
            p->mod->access_control = 1;
        } else {
            p->mod->implementing = name;
        }
        np_expect_semi(p, is_module ? "module" : "implementing");
        return;
    }
    if (k == NB_TOK_KW_STRUCT) {
        nb_decl *s = parse_struct(p, attrs, mods, 0);
        if (s) np_push(p, out, s);
        return;
    }
    if (k == NB_TOK_KW_TYPEDEF || k == NB_TOK_KW_TYPEALIAS) {
        np_push(p, out, parse_typedef(p, k == NB_TOK_KW_TYPEALIAS));
        return;
    }
    if (np_at_enum(p)) {
        np_parse_enum(p, out, attrs, mods);
        return;
    }
    if (k == NB_TOK_KW_LET || k == NB_TOK_KW_VAR) {
        nb_stmt *st = np_parse_local_decl(p, attrs);
        for (int i = 0; i < st->u.var.count; i++) {
            st->u.var.vars[i]->u.var.is_global = 1;
            st->u.var.vars[i]->mods |= mods;
            np_push(p, out, st->u.var.vars[i]);
        }
        return;
    }
    if (k != NB_TOK_IDENT) {
        char found[64];
        np_describe(p, np_cur(p), found, sizeof found);
        np_error_here(p, "expected a declaration, found %s", found);
        return;
    }
    if (unsupported_decl(p)) return;
    if (np_peek_kind(p, 1) == NB_TOK_LPAREN) {
        np_error_here(p, "expected a return type before function name '%.*s'", np_cur(p)->len,
                      np_cur(p)->start);
        return;
    }
    nb_type_expr *t = np_parse_type(p, 1);
    if (np_kind(p) != NB_TOK_IDENT) {
        char found[64];
        np_describe(p, np_cur(p), found, sizeof found);
        np_error_here(p, "expected a name after type '%s', found %s", t->name, found);
        return;
    }
    nb_loc loc = np_loc(p);
    const char *name = np_tok_text(p);
    np_advance(p);
    if (strcmp(name, "operator") == 0 && !(name = parse_operator_name(p))) return;
    nb_decl *fn = parse_generic_function(p, attrs, mods, t, loc, name, NULL);
    if (fn) {
        np_push(p, out, fn);
        return;
    }
    if (np_kind(p) == NB_TOK_LPAREN) {
        np_push(p, out, parse_function(p, attrs, mods, t, loc, name, NULL));
        return;
    }
    np_parse_var_declarators(p, out, attrs, mods, t, loc, name, 1);
}

static int loc_before(nb_loc a, nb_loc b) {
    if (a.file != b.file) return a.file < b.file;
    if (a.line != b.line) return a.line < b.line;
    return a.col < b.col;
}

/* The preprocessor reports before the parser starts: put this parse's diagnostics in source
 * order (stable insertion sort; the range is at most max_errors long). A note stays after the
 * diagnostic it belongs to: each group (a diagnostic and its notes) moves as one, by its head. */
static void sort_diags(nb_source_set *src, int from) {
    int n = src->ndiags - from;
    if (n < 2) return;
    nb_diag *tmp = nb_alloc(sizeof(nb_diag) * (size_t)n, 16);
    int *head = nb_alloc(sizeof(int) * (size_t)n, 16); /* group starts */
    if (!tmp || !head) {
        nb_free(tmp, sizeof(nb_diag) * (size_t)n);
        nb_free(head, sizeof(int) * (size_t)n);
        return;
    }
    int ng = 0;
    for (int i = 0; i < n; i++)
        if (i == 0 || src->diags[from + i].level != NB_DIAG_NOTE) head[ng++] = i;
    for (int i = 1; i < ng; i++) { /* sort group starts by their diagnostic's location */
        int g = head[i], j = i;
        while (j > 0 && loc_before(src->diags[from + g].loc, src->diags[from + head[j - 1]].loc)) {
            head[j] = head[j - 1];
            j--;
        }
        head[j] = g;
    }
    int k = 0;
    for (int i = 0; i < ng; i++) {
        int g = head[i];
        do tmp[k++] = src->diags[from + g++];
        while (g < n && src->diags[from + g].level == NB_DIAG_NOTE);
    }
    memcpy(src->diags + from, tmp, sizeof(nb_diag) * (size_t)n);
    nb_free(tmp, sizeof(nb_diag) * (size_t)n);
    nb_free(head, sizeof(int) * (size_t)n);
}

nb_status nb_parse_module(nb_source_set *src, int file, nb_arena *arena, nb_module_ast **out) {
    if (out) *out = NULL;
    if (!src || !arena || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_parse_module: NULL argument");
    if (file < 0 || file >= src->nfiles)
        return nb_error(NB_ERR_INVALID_ARG, "nb_parse_module: no source file %d", file);
    int errors_before = src->nerrors, diags_before = src->ndiags;
    nb_parser *p = nb_arena_zalloc(arena, sizeof *p, 16);
    if (!p) return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory parsing '%s'", src->files[file].path);
    p->src = src;
    p->file = file;
    p->arena = arena;
    if (setjmp(p->oom_jmp)) {
        *out = p->mod; /* partial; may be NULL */
        return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory parsing '%s'", src->files[file].path);
    }
    p->toks = nb_preprocess(src, file, arena, &p->ntoks);
    if (!p->toks || p->ntoks < 1)
        return nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory parsing '%s'", src->files[file].path);
    nb_module_ast *m = np_alloc(p, sizeof *m);
    m->name = np_strndup(p, src->files[file].name, strlen(src->files[file].name));
    m->file = file;
    m->arena = arena;
    p->mod = m;
    np_prescan(p);
    int capped = src->max_errors > 0 && src->nerrors >= src->max_errors;
    if (capped) p->stop = 1; /* too many errors already: an empty module */
    nb_pvec decls = {0};
    while (np_kind(p) != NB_TOK_EOF) {
        int before = p->pos;
        parse_toplevel(p, &decls);
        if (p->panic) np_sync(p);
        if (p->pos == before) np_advance(p);
        if (p->stop) break;
    }
    m->decls = (nb_decl **)np_finish(p, &decls);
    m->ndecls = decls.n;
    sort_diags(src, diags_before);
    *out = m;
    return src->nerrors > errors_before || capped ? NB_ERR_COMPILE : NB_OK;
}

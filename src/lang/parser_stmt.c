/* Parser: statements. */
#include <string.h>

#include "lang/parser_impl.h"

static nb_stmt *new_stmt(nb_parser *p, nb_stmt_kind kind, nb_loc loc) {
    nb_stmt *s = np_alloc(p, sizeof *s);
    s->kind = kind;
    s->loc = loc;
    s->max_iters = -1;
    return s;
}

static void found_desc(nb_parser *p, char *buf, size_t n) { np_describe(p, np_cur(p), buf, n); }

/* `Name<…> x` / `Name[…] x`: tries the tokens as a type and checks that a name follows. */
static int speculate_decl(nb_parser *p) {
    nb_pstate st = np_save(p);
    int saved_failed = p->spec_failed;
    p->spec++;
    p->spec_failed = 0;
    (void)np_parse_type(p, 1);
    int ok = !p->spec_failed && np_kind(p) == NB_TOK_IDENT;
    p->spec--;
    p->spec_failed = saved_failed;
    np_restore(p, st);
    return ok;
}

int np_is_decl_start(nb_parser *p) {
    switch (np_kind(p)) {
    case NB_TOK_KW_LET: case NB_TOK_KW_VAR: case NB_TOK_KW_STATIC: case NB_TOK_KW_CONST:
    case NB_TOK_KW_EXTERN:
        return 1;
    case NB_TOK_IDENT: {
        nb_tok_kind k1 = np_peek_kind(p, 1);
        if (k1 == NB_TOK_IDENT) return 1;
        if (k1 == NB_TOK_STAR && np_is_type_name(p, np_cur(p))) return speculate_decl(p); /* float* p */
        if (k1 == NB_TOK_LT || k1 == NB_TOK_LBRACKET || k1 == NB_TOK_DOT || k1 == NB_TOK_COLONCOLON)
            return speculate_decl(p);
        return 0;
    }
    default:
        return 0;
    }
}

nb_stmt *np_parse_local_decl(nb_parser *p, nb_attr_list attrs) {
    nb_stmt *s = new_stmt(p, NB_ST_VAR, np_loc(p));
    s->attrs = attrs;
    unsigned mods = 0;
    for (;;) {
        nb_tok_kind k = np_kind(p);
        if (k == NB_TOK_KW_STATIC) mods |= NB_MOD_STATIC;
        else if (k == NB_TOK_KW_CONST) mods |= NB_MOD_CONST;
        else if (k == NB_TOK_KW_EXTERN) mods |= NB_MOD_EXTERN;
        else if (k == NB_TOK_IDENT && np_cur(p)->len == 11 && !memcmp(np_cur(p)->start, "groupshared", 11) &&
                 np_peek_kind(p, 1) == NB_TOK_IDENT)
            mods |= NB_MOD_GROUPSHARED;
        else break;
        np_advance(p);
    }
    nb_pvec vars = {0};
    if (np_kind(p) == NB_TOK_KW_LET || np_kind(p) == NB_TOK_KW_VAR) {
        int is_let = np_kind(p) == NB_TOK_KW_LET;
        const char *kw = is_let ? "let" : "var";
        np_advance(p);
        for (;;) {
            if (np_kind(p) != NB_TOK_IDENT) {
                char found[64];
                found_desc(p, found, sizeof found);
                np_error_here(p, "expected a variable name after '%s', found %s", vars.n ? "," : kw, found);
                break;
            }
            nb_decl *d = np_alloc(p, sizeof *d);
            d->kind = NB_DECL_VAR;
            d->loc = np_loc(p);
            d->name = np_tok_text(p);
            d->attrs = attrs;
            d->mods = mods | (is_let ? NB_MOD_CONST : 0);
            d->module = p->mod;
            np_advance(p);
            if (np_accept(p, NB_TOK_COLON)) d->u.var.texpr = np_parse_type(p, 1);
            if (np_accept(p, NB_TOK_ASSIGN)) d->u.var.init = np_parse_expr(p);
            np_push(p, &vars, d);
            if (p->panic || !np_accept(p, NB_TOK_COMMA)) break;
        }
        if (!p->panic) np_expect_semi(p, "declaration");
    } else {
        nb_type_expr *t = np_parse_type(p, 1);
        if (np_kind(p) != NB_TOK_IDENT) {
            char found[64];
            found_desc(p, found, sizeof found);
            np_error_here(p, "expected a variable name after type '%s', found %s", t->name, found);
        } else {
            nb_loc loc = np_loc(p);
            const char *name = np_tok_text(p);
            np_advance(p);
            np_parse_var_declarators(p, &vars, attrs, mods, t, loc, name, 0);
        }
    }
    s->u.var.vars = (nb_decl **)np_finish(p, &vars);
    s->u.var.count = vars.n;
    return s;
}

nb_stmt *np_parse_block(nb_parser *p) {
    nb_loc open = np_loc(p);
    nb_stmt *s = new_stmt(p, NB_ST_BLOCK, open);
    if (!np_accept(p, NB_TOK_LBRACE)) {
        char found[64];
        found_desc(p, found, sizeof found);
        np_error_here(p, "expected '{', found %s", found);
        return s;
    }
    nb_pvec items = {0};
    while (np_kind(p) != NB_TOK_RBRACE && np_kind(p) != NB_TOK_EOF) {
        int before = p->pos;
        np_push(p, &items, np_parse_stmt(p));
        if (p->panic) np_sync(p);
        if (p->pos == before && np_kind(p) != NB_TOK_RBRACE) np_advance(p);
    }
    np_expect_close(p, NB_TOK_RBRACE, open);
    s->u.block.items = (nb_stmt **)np_finish(p, &items);
    s->u.block.count = items.n;
    return s;
}

/* `(` cond `)` after if/while/switch; NULL (and panic) on a syntax error. */
static nb_expr *paren_cond(nb_parser *p, const char *after) {
    nb_loc open = np_loc(p);
    if (!np_accept(p, NB_TOK_LPAREN)) {
        char found[64];
        found_desc(p, found, sizeof found);
        np_error_here(p, "expected '(' after '%s', found %s", after, found);
        return NULL;
    }
    nb_expr *e = np_parse_expr(p);
    if (p->panic) return NULL;
    if (!np_expect_close(p, NB_TOK_RPAREN, open)) return NULL;
    return e;
}

static nb_stmt *parse_for(nb_parser *p, nb_stmt *s) {
    np_advance(p);
    nb_loc open = np_loc(p);
    if (!np_accept(p, NB_TOK_LPAREN)) {
        char found[64];
        found_desc(p, found, sizeof found);
        np_error_here(p, "expected '(' after 'for', found %s", found);
        return s;
    }
    if (np_accept(p, NB_TOK_SEMI)) {
        s->u.for_s.init = NULL;
    } else if (np_is_decl_start(p)) {
        nb_attr_list none = {NULL, 0};
        s->u.for_s.init = np_parse_local_decl(p, none);
    } else {
        nb_stmt *init = new_stmt(p, NB_ST_EXPR, np_loc(p));
        init->u.expr.expr = np_parse_comma_expr(p);
        s->u.for_s.init = init;
        if (!p->panic) np_expect_semi(p, "for-loop initializer");
    }
    if (p->panic) return s;
    if (np_kind(p) != NB_TOK_SEMI) s->u.for_s.cond = np_parse_expr(p);
    if (!p->panic) np_expect_semi(p, "for-loop condition");
    if (p->panic) return s;
    if (np_kind(p) != NB_TOK_RPAREN) s->u.for_s.step = np_parse_comma_expr(p);
    if (p->panic || !np_expect_close(p, NB_TOK_RPAREN, open)) return s;
    s->u.for_s.body = np_parse_stmt(p);
    return s;
}

static nb_stmt *parse_switch(nb_parser *p, nb_stmt *s) {
    np_advance(p);
    s->u.switch_s.value = paren_cond(p, "switch");
    if (!s->u.switch_s.value) return s;
    nb_loc open = np_loc(p);
    if (!np_accept(p, NB_TOK_LBRACE)) {
        char found[64];
        found_desc(p, found, sizeof found);
        np_error_here(p, "expected '{' after 'switch (…)', found %s", found);
        return s;
    }
    nb_pvec cases = {0};           /* nb_switch_case * */
    nb_switch_case *cur = NULL;
    nb_pvec values = {0}, body = {0};
    #define FLUSH_CASE()                                                                    \
        do {                                                                                \
            if (cur) {                                                                      \
                cur->values = (nb_expr **)np_finish(p, &values);                            \
                cur->nvalues = values.n;                                                    \
                cur->body = (nb_stmt **)np_finish(p, &body);                                \
                cur->nbody = body.n;                                                        \
            }                                                                               \
            values.n = 0;                                                                   \
            body.n = 0;                                                                     \
        } while (0)
    while (np_kind(p) != NB_TOK_RBRACE && np_kind(p) != NB_TOK_EOF) {
        int before = p->pos;
        nb_tok_kind k = np_kind(p);
        if (k == NB_TOK_KW_CASE || k == NB_TOK_KW_DEFAULT) {
            nb_loc loc = np_loc(p);
            if (!cur || body.n > 0) { /* a new group of labels */
                FLUSH_CASE();
                values = (nb_pvec){0};
                body = (nb_pvec){0};
                cur = np_alloc(p, sizeof *cur);
                cur->loc = loc;
                np_push(p, &cases, cur);
            }
            np_advance(p);
            if (k == NB_TOK_KW_CASE) {
                np_push(p, &values, np_parse_ternary(p));
                if (!p->panic && !np_accept(p, NB_TOK_COLON)) {
                    char found[64];
                    found_desc(p, found, sizeof found);
                    np_error_here(p, "expected ':' after 'case' value, found %s", found);
                }
            } else {
                cur->is_default = 1;
                if (!np_accept(p, NB_TOK_COLON)) {
                    char found[64];
                    found_desc(p, found, sizeof found);
                    np_error_here(p, "expected ':' after 'default', found %s", found);
                }
            }
        } else {
            nb_stmt *st = np_parse_stmt(p);
            if (!cur)
                np_error_at(p, st->loc, "statement in 'switch' before the first 'case' label");
            else
                np_push(p, &body, st);
        }
        if (p->panic) np_sync(p);
        if (p->pos == before && np_kind(p) != NB_TOK_RBRACE) np_advance(p);
    }
    FLUSH_CASE();
    #undef FLUSH_CASE
    np_expect_close(p, NB_TOK_RBRACE, open);
    s->u.switch_s.ncases = cases.n;
    if (cases.n) {
        s->u.switch_s.cases = np_alloc(p, sizeof(nb_switch_case) * (size_t)cases.n);
        for (int i = 0; i < cases.n; i++) s->u.switch_s.cases[i] = *(nb_switch_case *)cases.items[i];
    }
    return s;
}

nb_stmt *np_parse_stmt(nb_parser *p) {
    nb_loc loc = np_loc(p);
    if (!np_enter(p)) return new_stmt(p, NB_ST_EMPTY, loc);
    nb_attr_list attrs = {NULL, 0};
    if (np_kind(p) == NB_TOK_LBRACKET) {
        attrs = np_parse_attrs(p);
        if (p->panic) {
            np_leave(p);
            return new_stmt(p, NB_ST_EMPTY, loc);
        }
    }
    loc = np_loc(p);
    nb_stmt *s;
    char found[64];
    switch (np_kind(p)) {
    case NB_TOK_LBRACE:
        s = np_parse_block(p);
        break;
    case NB_TOK_SEMI:
        s = new_stmt(p, NB_ST_EMPTY, loc);
        np_advance(p);
        break;
    case NB_TOK_KW_IF:
        s = new_stmt(p, NB_ST_IF, loc);
        np_advance(p);
        s->u.if_s.cond = paren_cond(p, "if");
        if (!s->u.if_s.cond) break;
        s->u.if_s.then_s = np_parse_stmt(p);
        if (np_accept(p, NB_TOK_KW_ELSE)) s->u.if_s.else_s = np_parse_stmt(p);
        break;
    case NB_TOK_KW_FOR:
        s = parse_for(p, new_stmt(p, NB_ST_FOR, loc));
        break;
    case NB_TOK_KW_WHILE:
        s = new_stmt(p, NB_ST_WHILE, loc);
        np_advance(p);
        s->u.while_s.cond = paren_cond(p, "while");
        if (s->u.while_s.cond) s->u.while_s.body = np_parse_stmt(p);
        break;
    case NB_TOK_KW_DO:
        s = new_stmt(p, NB_ST_DO_WHILE, loc);
        np_advance(p);
        s->u.while_s.body = np_parse_stmt(p);
        if (p->panic) break;
        if (!np_accept(p, NB_TOK_KW_WHILE)) {
            found_desc(p, found, sizeof found);
            np_error_here(p, "expected 'while' after the body of 'do' (at %d:%d), found %s", loc.line, loc.col,
                          found);
            break;
        }
        s->u.while_s.cond = paren_cond(p, "while");
        if (s->u.while_s.cond) np_expect_semi(p, "'do … while (…)'");
        break;
    case NB_TOK_KW_SWITCH:
        s = parse_switch(p, new_stmt(p, NB_ST_SWITCH, loc));
        break;
    case NB_TOK_KW_BREAK:
    case NB_TOK_KW_CONTINUE: {
        int is_break = np_kind(p) == NB_TOK_KW_BREAK;
        s = new_stmt(p, is_break ? NB_ST_BREAK : NB_ST_CONTINUE, loc);
        np_advance(p);
        np_expect_semi(p, is_break ? "'break'" : "'continue'");
        break;
    }
    case NB_TOK_KW_RETURN:
        s = new_stmt(p, NB_ST_RETURN, loc);
        np_advance(p);
        if (np_kind(p) == NB_TOK_SEMI) {
            np_advance(p);
        } else {
            s->u.ret.value = np_parse_expr(p);
            if (!p->panic) np_expect_semi(p, "return value");
        }
        break;
    case NB_TOK_KW_CASE:
    case NB_TOK_KW_DEFAULT:
        s = new_stmt(p, NB_ST_EMPTY, loc);
        np_error_here(p, "%s label outside of a 'switch'", nb_tok_name(np_kind(p)));
        break;
    case NB_TOK_KW_ELSE:
        s = new_stmt(p, NB_ST_EMPTY, loc);
        np_error_here(p, "'else' without a matching 'if'");
        break;
    case NB_TOK_KW_STRUCT: case NB_TOK_KW_IMPORT: case NB_TOK_KW_TYPEDEF: case NB_TOK_KW_TYPEALIAS:
        s = new_stmt(p, NB_ST_EMPTY, loc);
        np_error_here(p, "%s declarations are only allowed at the top level of a file", nb_tok_name(np_kind(p)));
        break;
    case NB_TOK_EOF:
        s = new_stmt(p, NB_ST_EMPTY, loc);
        np_error_here(p, "expected a statement, found end of file");
        break;
    default:
        if ((s = np_parse_target_stmt(p, loc)) != NULL) {
            /* __target_switch / __intrinsic_asm / __requirePrelude (parser_target.c) */
        } else if (np_is_decl_start(p)) {
            s = np_parse_local_decl(p, attrs);
        } else {
            s = new_stmt(p, NB_ST_EXPR, loc);
            s->u.expr.expr = np_parse_expr(p);
            if (!p->panic) np_expect_semi(p, "expression");
        }
        break;
    }
    s->attrs = attrs;
    np_leave(p);
    return s;
}

/* Parser: expressions (C precedence), written types, attributes. */
#include <string.h>

#include "lang/intrinsics.h"
#include "lang/parser_impl.h"

enum { PREC_OROR = 1, PREC_ADD = 9 };

nb_expr *np_new_expr(nb_parser *p, nb_expr_kind kind, nb_loc loc) {
    nb_expr *e = np_alloc(p, sizeof *e);
    e->kind = kind;
    e->loc = loc;
    return e;
}

/* Stands in for an expression that could not be parsed (the error is already reported). */
static nb_expr *placeholder(nb_parser *p, nb_loc loc) { return np_new_expr(p, NB_EX_INT, loc); }

static void found_desc(nb_parser *p, char *buf, size_t n) { np_describe(p, np_cur(p), buf, n); }

/* ---- types ---------------------------------------------------------------------------------- */

/* Closes generic arguments with '>' (splitting a '>>'). */
static void expect_gt(nb_parser *p, nb_loc open) {
    if (np_kind(p) == NB_TOK_GT) {
        np_advance(p);
        return;
    }
    if (np_cur(p)->kind == NB_TOK_SHR && !p->split_gt && !p->stop) {
        p->split_gt = 1;
        return;
    }
    np_expect_close(p, NB_TOK_GT, open);
}

static nb_expr *parse_binary_from(nb_parser *p, int minprec, nb_expr *lhs);
static nb_expr *parse_generic_bits(nb_parser *p, int level, nb_expr *first);

/* `row_major` / `column_major` before a matrix type. */
static int is_layout_word(const nb_token *a) {
    return a->kind == NB_TOK_IDENT && ((a->len == 9 && !memcmp(a->start, "row_major", 9)) ||
                                       (a->len == 12 && !memcmp(a->start, "column_major", 12)));
}

static void parse_generic_args(nb_parser *p, nb_type_expr *t) {
    nb_loc open = np_loc(p);
    np_advance(p); /* < */
    nb_pvec targs = {0}, vargs = {0};
    if (np_kind(p) != NB_TOK_GT) {
        for (;;) {
            const nb_token *a = np_cur(p);
            if (a->kind == NB_TOK_IDENT && (np_is_type_name(p, a) || np_peek_kind(p, 1) == NB_TOK_LT ||
                                            is_layout_word(a))) {
                nb_type_expr *ty = np_parse_type(p, 1);
                nb_tok_kind k = np_kind(p);
                if (!ty->ntargs && !ty->narray_dims && strchr(ty->name, '.') &&
                    (k == NB_TOK_PIPE || k == NB_TOK_AMP || k == NB_TOK_CARET || k == NB_TOK_PLUS ||
                     k == NB_TOK_MINUS || k == NB_TOK_STAR || k == NB_TOK_SLASH || k == NB_TOK_PERCENT)) {
                    /* `E.A | E.B`: the dotted name was a value (an enum case) */
                    nb_expr *nm = np_new_expr(p, NB_EX_NAME, ty->loc);
                    nm->u.name.name = ty->name;
                    np_push(p, &targs, NULL);
                    np_push(p, &vargs, parse_generic_bits(p, 3, nm));
                } else {
                    np_push(p, &targs, ty);
                    np_push(p, &vargs, NULL);
                }
            } else {
                np_push(p, &targs, NULL);
                np_push(p, &vargs, parse_generic_bits(p, 3, NULL));
            }
            if (p->panic || !np_accept(p, NB_TOK_COMMA)) break;
        }
    }
    if (!p->panic) expect_gt(p, open);
    t->targs = (nb_type_expr **)np_finish(p, &targs);
    t->vargs = (nb_expr **)np_finish(p, &vargs);
    t->ntargs = targs.n;
}

void np_parse_dims(nb_parser *p, nb_pvec *dims) {
    while (np_kind(p) == NB_TOK_LBRACKET && !p->panic) {
        nb_loc open = np_loc(p);
        np_advance(p);
        if (np_kind(p) == NB_TOK_RBRACKET) {
            np_advance(p);
            np_push(p, dims, NULL);
            continue;
        }
        np_push(p, dims, np_parse_expr(p));
        if (!p->panic) np_expect_close(p, NB_TOK_RBRACKET, open);
    }
}

nb_type_expr *np_parse_type(nb_parser *p, int allow_array) {
    nb_type_expr *t = np_alloc(p, sizeof *t);
    t->loc = np_loc(p);
    t->name = "<error>";
    if (!np_enter(p)) return t;
    /* `row_major float3x3` / `column_major …`: the storage layout of a matrix in memory; a
     * value's m[i] is row i either way, and host arrays bind row-major (docs/LANGUAGE.md) */
    while (np_peek_kind(p, 1) == NB_TOK_IDENT && is_layout_word(np_cur(p))) {
        np_advance(p);
        t->loc = np_loc(p);
    }
    if (np_kind(p) != NB_TOK_IDENT) {
        char found[64];
        found_desc(p, found, sizeof found);
        np_error_here(p, "expected a type, found %s", found);
        np_leave(p);
        return t;
    }
    t->name = np_tok_text(p);
    np_advance(p);
    if (np_kind(p) == NB_TOK_LT) parse_generic_args(p, t);
    /* T* is Ptr<T> (Slang pointers; several stars nest) */
    while (np_kind(p) == NB_TOK_STAR && (np_peek_kind(p, 1) == NB_TOK_IDENT || np_peek_kind(p, 1) == NB_TOK_RPAREN ||
                                         np_peek_kind(p, 1) == NB_TOK_STAR || np_peek_kind(p, 1) == NB_TOK_GT ||
                                         np_peek_kind(p, 1) == NB_TOK_COMMA)) {
        nb_type_expr *w = np_alloc(p, sizeof *w);
        w->loc = t->loc;
        w->name = "Ptr";
        w->ntargs = 1;
        w->targs = np_alloc(p, sizeof(nb_type_expr *));
        w->vargs = np_alloc(p, sizeof(nb_expr *));
        w->targs[0] = t;
        t = w;
        np_advance(p);
    }
    /* Associated types `float.Differential`, `S::Differential`: kept in the name, "S.Differential". */
    while (allow_array && (np_kind(p) == NB_TOK_DOT || np_kind(p) == NB_TOK_COLONCOLON) &&
           np_peek_kind(p, 1) == NB_TOK_IDENT && !t->ntargs) {
        np_advance(p);
        const nb_token *m = np_cur(p);
        size_t n = strlen(t->name);
        char *joined = np_alloc(p, n + 1 + (size_t)m->len + 1);
        memcpy(joined, t->name, n);
        joined[n] = '.';
        memcpy(joined + n + 1, m->start, (size_t)m->len);
        joined[n + 1 + (size_t)m->len] = '\0';
        t->name = joined;
        int generic = np_is_generic_name(p, m);
        np_advance(p);
        if (generic && np_kind(p) == NB_TOK_LT) { /* `Lib.Box<2>`: a generic struct of a namespace */
            parse_generic_args(p, t);
            break;
        }
    }
    /* `ValueHolder<float, 2>.Differential`, `DifferentialPair<B>.Differential`: a member type of
     * a generic instantiation (member_of holds the instantiation) */
    while (allow_array && t->ntargs && (np_kind(p) == NB_TOK_DOT || np_kind(p) == NB_TOK_COLONCOLON) &&
           np_peek_kind(p, 1) == NB_TOK_IDENT) {
        np_advance(p);
        nb_type_expr *m = np_alloc(p, sizeof *m);
        m->loc = np_loc(p);
        m->name = np_tok_text(p);
        m->member_of = t;
        np_advance(p);
        t = m;
    }
    if (allow_array && np_kind(p) == NB_TOK_LBRACKET) {
        nb_pvec dims = {0};
        np_parse_dims(p, &dims);
        /* Slang binds dims written after a TYPE left to right: `T[2][3]` is an array of 3
         * arrays of 2 (std::array<std::array<T, 2>, 3>), the reverse of the C declarator
         * `T x[2][3]`; array_dims holds the outermost first, so reverse them. */
        for (int i = 0, j = dims.n - 1; i < j; i++, j--) {
            void *tmp = dims.items[i];
            dims.items[i] = dims.items[j];
            dims.items[j] = tmp;
        }
        t->array_dims = (nb_expr **)np_finish(p, &dims);
        t->narray_dims = dims.n;
    }
    np_leave(p);
    return t;
}

nb_type_expr *np_type_with_dims(nb_parser *p, const nb_type_expr *base, nb_pvec *dims) {
    nb_type_expr *t = np_alloc(p, sizeof *t);
    *t = *base;
    int n = dims->n + base->narray_dims;
    if (n) {
        t->array_dims = np_alloc(p, sizeof(nb_expr *) * (size_t)n);
        for (int i = 0; i < dims->n; i++) t->array_dims[i] = dims->items[i];
        for (int i = 0; i < base->narray_dims; i++) t->array_dims[dims->n + i] = base->array_dims[i];
    }
    t->narray_dims = n;
    return t;
}

/* ---- attributes ----------------------------------------------------------------------------- */

nb_attr_list np_parse_attrs(nb_parser *p) {
    nb_pvec items = {0};
    for (;;) {
        if (np_tok_is(np_cur(p), "__target_intrinsic") && np_peek_kind(p, 1) == NB_TOK_LPAREN && !p->panic) {
            np_push(p, &items, np_parse_target_intrinsic(p)); /* (parser_target.c) */
            continue;
        }
        if (np_kind(p) != NB_TOK_LBRACKET || p->panic) break;
        nb_loc open = np_loc(p);
        np_advance(p);
        for (;;) {
            if (np_kind(p) != NB_TOK_IDENT) {
                char found[64];
                found_desc(p, found, sizeof found);
                np_error_here(p, "expected an attribute name after '[', found %s", found);
                break;
            }
            nb_attr *a = np_alloc(p, sizeof *a);
            a->loc = np_loc(p);
            a->name = np_tok_text(p);
            np_advance(p);
            if (np_kind(p) == NB_TOK_LPAREN) {
                nb_loc popen = np_loc(p);
                np_advance(p);
                nb_pvec args = {0};
                while (np_kind(p) != NB_TOK_RPAREN && !p->panic) {
                    if (np_kind(p) == NB_TOK_STRING) { /* [shader("compute")]: the unquoted text as a NAME */
                        const nb_token *s = np_cur(p);
                        nb_expr *e = np_new_expr(p, NB_EX_NAME, s->loc);
                        e->u.name.name = np_strndup(p, s->start + 1, (size_t)(s->len - 2));
                        np_advance(p);
                        np_push(p, &args, e);
                    } else {
                        np_push(p, &args, np_parse_expr(p));
                    }
                    if (!np_accept(p, NB_TOK_COMMA)) break;
                }
                if (!p->panic) np_expect_close(p, NB_TOK_RPAREN, popen);
                a->args = (nb_expr **)np_finish(p, &args);
                a->nargs = args.n;
            }
            np_push(p, &items, a);
            if (p->panic || !np_accept(p, NB_TOK_COMMA)) break;
        }
        if (!p->panic) np_expect_close(p, NB_TOK_RBRACKET, open);
    }
    nb_attr_list l = {NULL, 0};
    if (items.n) {
        l.items = np_alloc(p, sizeof(nb_attr) * (size_t)items.n);
        for (int i = 0; i < items.n; i++) l.items[i] = *(nb_attr *)items.items[i];
        l.count = items.n;
    }
    return l;
}

/* ---- expressions ---------------------------------------------------------------------------- */

static int binary_prec(nb_tok_kind k) {
    switch (k) {
    case NB_TOK_OROR: return 1;
    case NB_TOK_ANDAND: return 2;
    case NB_TOK_PIPE: return 3;
    case NB_TOK_CARET: return 4;
    case NB_TOK_AMP: return 5;
    case NB_TOK_EQ: case NB_TOK_NE: return 6;
    case NB_TOK_LT: case NB_TOK_GT: case NB_TOK_LE: case NB_TOK_GE: return 7;
    case NB_TOK_SHL: case NB_TOK_SHR: return 8;
    case NB_TOK_PLUS: case NB_TOK_MINUS: return 9;
    case NB_TOK_STAR: case NB_TOK_SLASH: case NB_TOK_PERCENT: return 10;
    default: return 0;
    }
}

static int is_assign_op(nb_tok_kind k) {
    switch (k) {
    case NB_TOK_ASSIGN: case NB_TOK_PLUS_ASSIGN: case NB_TOK_MINUS_ASSIGN: case NB_TOK_STAR_ASSIGN:
    case NB_TOK_SLASH_ASSIGN: case NB_TOK_PERCENT_ASSIGN: case NB_TOK_AMP_ASSIGN: case NB_TOK_PIPE_ASSIGN:
    case NB_TOK_CARET_ASSIGN: case NB_TOK_SHL_ASSIGN: case NB_TOK_SHR_ASSIGN: return 1;
    default: return 0;
    }
}

static nb_expr *parse_assign_from(nb_parser *p, nb_expr *first);
static nb_expr *parse_unary(nb_parser *p);

/* `pow<float>(x, n)`, `diffPair<S>(p, d)`, `reinterpret<int, uint>(x)`: explicit generic
 * arguments of a built-in function (check_call.c). Only built-in names are tried (a variable is
 * never named like one), and only when the tokens parse as `name<args>(`. */
static int builtin_generic_call(nb_parser *p, const nb_token *t) {
    static const char *const extra[] = {"diffPair", "reinterpret", "createDynamicObject", NULL};
    char name[64];
    if (t->kind != NB_TOK_IDENT || t->len >= (int)sizeof name || np_peek_kind(p, 1) != NB_TOK_LT) return 0;
    memcpy(name, t->start, (size_t)t->len);
    name[t->len] = '\0';
    int known = nb_intrinsic_lookup(name) >= 0;
    for (int i = 0; !known && extra[i]; i++) known = !strcmp(name, extra[i]);
    if (!known) return 0;
    nb_pstate st = np_save(p);
    int saved_failed = p->spec_failed;
    p->spec++;
    p->spec_failed = 0;
    (void)np_parse_type(p, 0);
    int ok = !p->spec_failed && np_kind(p) == NB_TOK_LPAREN;
    p->spec--;
    p->spec_failed = saved_failed;
    np_restore(p, st);
    return ok;
}

static nb_expr *parse_primary(nb_parser *p) {
    const nb_token *t = np_cur(p);
    nb_loc loc = np_loc(p);
    nb_expr *e;
    switch (np_kind(p)) {
    case NB_TOK_INT:
        e = np_new_expr(p, NB_EX_INT, loc);
        e->u.ilit.value = t->v.i.value;
        e->u.ilit.is_unsigned = t->v.i.is_unsigned;
        np_advance(p);
        return e;
    case NB_TOK_FLOAT:
        e = np_new_expr(p, NB_EX_FLOAT, loc);
        e->u.flit.value = t->v.f.value;
        e->u.flit.kind = t->v.f.suffix == 'h' ? NB_SC_HALF : t->v.f.suffix == 'l' ? NB_SC_DOUBLE : NB_SC_FLOAT;
        np_advance(p);
        return e;
    case NB_TOK_KW_TRUE:
    case NB_TOK_KW_FALSE:
        e = np_new_expr(p, NB_EX_BOOL, loc);
        e->u.blit = np_kind(p) == NB_TOK_KW_TRUE;
        np_advance(p);
        return e;
    case NB_TOK_KW_THIS:
        e = np_new_expr(p, NB_EX_NAME, loc);
        e->u.name.name = "this";
        np_advance(p);
        return e;
    case NB_TOK_IDENT:
        if ((np_is_generic_name(p, t) && np_peek_kind(p, 1) == NB_TOK_LT) || builtin_generic_call(p, t)) {
            e = np_new_expr(p, NB_EX_TYPE, loc);
            e->u.type.texpr = np_parse_type(p, 0);
            return e;
        }
        e = np_new_expr(p, NB_EX_NAME, loc);
        e->u.name.name = np_tok_text(p);
        np_advance(p);
        return e;
    case NB_TOK_LPAREN: {
        np_advance(p);
        e = np_parse_expr(p);
        if (!p->panic) np_expect_close(p, NB_TOK_RPAREN, loc);
        return e;
    }
    case NB_TOK_LBRACE: {
        np_advance(p);
        nb_pvec items = {0};
        while (np_kind(p) != NB_TOK_RBRACE && !p->panic) {
            np_push(p, &items, np_parse_expr(p));
            if (!np_accept(p, NB_TOK_COMMA)) break;
        }
        if (!p->panic) np_expect_close(p, NB_TOK_RBRACE, loc);
        e = np_new_expr(p, NB_EX_INIT_LIST, loc);
        e->u.init_list.items = (nb_expr **)np_finish(p, &items);
        e->u.init_list.nitems = items.n;
        return e;
    }
    case NB_TOK_ERROR: /* a malformed literal or stray character, already reported */
        np_advance(p);
        return placeholder(p, loc);
    case NB_TOK_STRING: /* printf's format (check_target.c diagnoses other uses) */
        e = np_new_expr(p, NB_EX_STRING, loc);
        e->u.str.text = np_strndup(p, t->start, (size_t)t->len);
        np_advance(p);
        return e;
    default: {
        char found[64];
        found_desc(p, found, sizeof found);
        np_error_here(p, "expected an expression, found %s", found);
        return placeholder(p, loc);
    }
    }
}

/* Left-deep chains (a.b.c…, a+b+c…) are built in loops, not recursion: each link counts as one
 * level of depth, so that the tree's depth stays bounded for the passes that recurse over it. */
static nb_expr *parse_postfix(nb_parser *p, nb_expr *e) {
    int links = 0;
    while (!p->panic && np_enter(p)) {
        links++;
        nb_loc loc = np_loc(p);
        nb_tok_kind k = np_kind(p);
        if (k == NB_TOK_LPAREN) {
            np_advance(p);
            nb_pvec args = {0};
            while (np_kind(p) != NB_TOK_RPAREN && !p->panic) {
                np_push(p, &args, np_parse_expr(p));
                if (!np_accept(p, NB_TOK_COMMA)) break;
            }
            if (!p->panic) np_expect_close(p, NB_TOK_RPAREN, loc);
            nb_expr *c = np_new_expr(p, NB_EX_CALL, e->loc);
            c->u.call.callee = e;
            c->u.call.args = (nb_expr **)np_finish(p, &args);
            c->u.call.nargs = args.n;
            e = c;
        } else if (k == NB_TOK_LBRACKET) {
            np_advance(p);
            nb_pvec idx = {0};
            do {
                np_push(p, &idx, np_parse_expr(p));
            } while (!p->panic && np_accept(p, NB_TOK_COMMA));
            if (!p->panic) np_expect_close(p, NB_TOK_RBRACKET, loc);
            nb_expr *x = np_new_expr(p, NB_EX_INDEX, loc);
            x->u.index.base = e;
            x->u.index.indices = (nb_expr **)np_finish(p, &idx);
            x->u.index.nindices = idx.n;
            e = x;
        } else if (k == NB_TOK_DOT || k == NB_TOK_COLONCOLON || k == NB_TOK_ARROW) {
            np_advance(p);
            if (k == NB_TOK_ARROW) { /* p->f is (*p).f (check_ptr.c) */
                nb_expr *d = np_new_expr(p, NB_EX_UNARY, loc);
                d->u.unary.op = NB_TOK_STAR;
                d->u.unary.operand = e;
                e = d;
            }
            if (np_kind(p) != NB_TOK_IDENT) {
                char found[64];
                found_desc(p, found, sizeof found);
                np_error_here(p, "expected a member name after %s, found %s", nb_tok_name(k), found);
                return e;
            }
            nb_expr *m = np_new_expr(p, NB_EX_MEMBER, np_loc(p));
            m->u.member.base = e;
            m->u.member.is_static = k == NB_TOK_COLONCOLON;
            if (np_is_generic_name(p, np_cur(p)) && np_peek_kind(p, 1) == NB_TOK_LT) {
                /* a generic method with explicit arguments: obj.f<4>(…), T::decode<4>(…) */
                m->u.member.targs = np_parse_type(p, 0);
                m->u.member.member = m->u.member.targs->name;
            } else {
                m->u.member.member = np_tok_text(p);
                np_advance(p);
            }
            e = m;
        } else if (k == NB_TOK_INC || k == NB_TOK_DEC) {
            np_advance(p);
            nb_expr *u = np_new_expr(p, NB_EX_UNARY, loc);
            u->u.unary.op = k;
            u->u.unary.postfix = 1;
            u->u.unary.operand = e;
            e = u;
        } else {
            break;
        }
    }
    p->depth -= links;
    return e;
}

static nb_expr *parse_unary(nb_parser *p) {
    nb_loc loc = np_loc(p);
    if (!np_enter(p)) return placeholder(p, loc);
    nb_tok_kind k = np_kind(p);
    nb_expr *e;
    switch (k) {
    case NB_TOK_MINUS: case NB_TOK_PLUS: case NB_TOK_NOT: case NB_TOK_TILDE:
    case NB_TOK_INC: case NB_TOK_DEC: case NB_TOK_KW_NO_DIFF:
    case NB_TOK_STAR: case NB_TOK_AMP: /* *p, &x (pointers, check_ptr.c) */
        np_advance(p);
        e = np_new_expr(p, NB_EX_UNARY, loc);
        e->u.unary.op = k;
        e->u.unary.operand = parse_unary(p);
        break;
    case NB_TOK_LPAREN: {
        const nb_token *t1 = np_peek(p, 1);
        int stars = 0;
        while (np_is_type_name(p, t1) && np_peek_kind(p, 2 + stars) == NB_TOK_STAR) stars++;
        if (np_is_type_name(p, t1) && np_peek_kind(p, 2 + stars) == NB_TOK_RPAREN) { /* (float)x, (float4*)p */
            np_advance(p);
            nb_type_expr *ty = np_parse_type(p, 0);
            np_advance(p); /* ) */
            e = np_new_expr(p, NB_EX_CAST, loc);
            e->u.cast.texpr = ty;
            e->u.cast.operand = parse_unary(p);
        } else if (np_is_generic_name(p, t1) && np_peek_kind(p, 2) == NB_TOK_LT) {
            /* (vector<float,3>)x is a cast; (vector<float,3>(…) + y) a parenthesized expression */
            np_advance(p);
            nb_type_expr *ty = np_parse_type(p, 0);
            if (np_kind(p) == NB_TOK_RPAREN) {
                np_advance(p);
                e = np_new_expr(p, NB_EX_CAST, loc);
                e->u.cast.texpr = ty;
                e->u.cast.operand = parse_unary(p);
            } else {
                nb_expr *te = np_new_expr(p, NB_EX_TYPE, ty->loc);
                te->u.type.texpr = ty;
                e = parse_assign_from(p, parse_postfix(p, te));
                if (!p->panic) np_expect_close(p, NB_TOK_RPAREN, loc);
                e = parse_postfix(p, e);
            }
        } else {
            e = parse_postfix(p, parse_primary(p));
        }
        break;
    }
    default:
        e = parse_postfix(p, parse_primary(p));
        break;
    }
    np_leave(p);
    return e;
}

static nb_expr *parse_binary_from(nb_parser *p, int minprec, nb_expr *lhs) {
    if (!lhs) lhs = parse_unary(p);
    int links = 0;
    while (!p->panic) {
        nb_tok_kind k = np_kind(p);
        int prec = binary_prec(k);
        if (!prec || prec < minprec) break;
        if (!np_enter(p)) break;
        links++;
        nb_loc loc = np_loc(p);
        np_advance(p);
        nb_expr *rhs = parse_binary_from(p, prec + 1, NULL);
        nb_expr *e = np_new_expr(p, NB_EX_BINARY, loc);
        e->u.binary.op = k;
        e->u.binary.lhs = lhs;
        e->u.binary.rhs = rhs;
        lhs = e;
    }
    p->depth -= links;
    return lhs;
}

static nb_expr *parse_ternary_from(nb_parser *p, nb_expr *first) {
    nb_loc loc0 = np_loc(p);
    if (!np_enter(p)) return placeholder(p, loc0);
    nb_expr *c = parse_binary_from(p, PREC_OROR, first);
    if (np_kind(p) == NB_TOK_QUESTION && !p->panic) {
        nb_loc q = np_loc(p);
        np_advance(p);
        nb_expr *a = np_parse_expr(p);
        nb_expr *b;
        if (p->panic) {
            b = placeholder(p, np_loc(p));
        } else if (!np_accept(p, NB_TOK_COLON)) {
            char found[64];
            found_desc(p, found, sizeof found);
            np_error_here(p, "expected ':' to match '?' at %d:%d, found %s", q.line, q.col, found);
            b = placeholder(p, np_loc(p));
        } else {
            b = parse_ternary_from(p, NULL);
        }
        nb_expr *e = np_new_expr(p, NB_EX_TERNARY, q);
        e->u.ternary.cond = c;
        e->u.ternary.then_e = a;
        e->u.ternary.else_e = b;
        c = e;
    }
    np_leave(p);
    return c;
}

static nb_expr *parse_assign_from(nb_parser *p, nb_expr *first) {
    nb_loc loc0 = np_loc(p);
    if (!np_enter(p)) return placeholder(p, loc0);
    nb_expr *lhs = parse_ternary_from(p, first);
    nb_tok_kind k = np_kind(p);
    if (is_assign_op(k) && !p->panic) {
        nb_loc loc = np_loc(p);
        np_advance(p);
        nb_expr *rhs = parse_assign_from(p, NULL);
        nb_expr *e = np_new_expr(p, NB_EX_ASSIGN, loc);
        e->u.assign.op = k;
        e->u.assign.lhs = lhs;
        e->u.assign.rhs = rhs;
        lhs = e;
    }
    np_leave(p);
    return lhs;
}

nb_expr *np_parse_expr(nb_parser *p) { return parse_assign_from(p, NULL); }

nb_expr *np_parse_ternary(nb_parser *p) { return parse_ternary_from(p, NULL); }

/* A generic value argument: additive expressions joined by `&`, `^`, `|` (C precedence among
 * them), so `f<E.A | E.B>()` works while `<`, `>`, `<<`, `>>` and comparisons stay out (the `>`
 * closes the list). level: 3 `|`, 4 `^`, 5 `&`; first: an already parsed leftmost operand. */
static nb_expr *parse_generic_bits(nb_parser *p, int level, nb_expr *first) {
    nb_expr *l = level == 5 ? parse_binary_from(p, PREC_ADD, first) : parse_generic_bits(p, level + 1, first);
    while (!p->panic && binary_prec(np_kind(p)) == level) {
        nb_tok_kind op = np_kind(p);
        nb_loc loc = np_loc(p);
        np_advance(p);
        nb_expr *r = level == 5 ? parse_binary_from(p, PREC_ADD, NULL) : parse_generic_bits(p, level + 1, NULL);
        nb_expr *b = np_new_expr(p, NB_EX_BINARY, loc);
        b->u.binary.op = op;
        b->u.binary.lhs = l;
        b->u.binary.rhs = r;
        l = b;
    }
    return l;
}

nb_expr *np_parse_generic_value(nb_parser *p) { return parse_generic_bits(p, 3, NULL); }

nb_expr *np_parse_comma_expr(nb_parser *p) {
    nb_expr *e = np_parse_expr(p);
    int links = 0;
    while (np_kind(p) == NB_TOK_COMMA && !p->panic && np_enter(p)) {
        links++;
        nb_loc loc = np_loc(p);
        np_advance(p);
        nb_expr *c = np_new_expr(p, NB_EX_BINARY, loc);
        c->u.binary.op = NB_TOK_COMMA;
        c->u.binary.lhs = e;
        c->u.binary.rhs = np_parse_expr(p);
        e = c;
    }
    p->depth -= links;
    return e;
}

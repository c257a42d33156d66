/* Parser core: arena allocation, name sets (the prescan of type and generic names), tokens,
 * errors and recovery (split from parser.c). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/hash.h"
#include "lang/parser_impl.h"
#include "lang/preproc.h"
#include "nabla/alloc.h"

/* ---- allocation (arena; out of memory jumps out of the parse) ------------------------------ */

void *np_alloc(nb_parser *p, size_t size) {
    void *x = nb_arena_zalloc(p->arena, size ? size : 1, 16);
    if (!x) {
        p->oom = 1;
        longjmp(p->oom_jmp, 1);
    }
    return x;
}

const char *np_strndup(nb_parser *p, const char *s, size_t n) {
    char *x = np_alloc(p, n + 1);
    memcpy(x, s, n);
    x[n] = '\0';
    return x;
}

void np_push(nb_parser *p, nb_pvec *v, void *x) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        void **items = np_alloc(p, sizeof(void *) * (size_t)cap);
        if (v->n) memcpy(items, v->items, sizeof(void *) * (size_t)v->n);
        v->items = items;
        v->cap = cap;
    }
    v->items[v->n++] = x;
}

void **np_finish(nb_parser *p, const nb_pvec *v) {
    if (!v->n) return NULL;
    void **items = np_alloc(p, sizeof(void *) * (size_t)v->n);
    memcpy(items, v->items, sizeof(void *) * (size_t)v->n);
    return items;
}

/* ---- name sets ------------------------------------------------------------------------------ */

static int nameset_find(const nb_nameset *s, const char *name, size_t n) {
    if (!s->cap) return -1;
    uint64_t h = nb_hash64(name, n, 0);
    int mask = s->cap - 1;
    for (int i = (int)(h & (uint64_t)mask);; i = (i + 1) & mask) {
        const char *x = s->slots[i];
        if (!x) return -1 - i;
        if (strlen(x) == n && memcmp(x, name, n) == 0) return i;
    }
}

void np_nameset_add(nb_parser *p, nb_nameset *s, const char *name, size_t n) {
    if ((s->count + 1) * 2 > s->cap) {
        int cap = s->cap ? s->cap * 2 : 64;
        nb_nameset ns = {np_alloc(p, sizeof(char *) * (size_t)cap), cap, 0};
        for (int i = 0; i < s->cap; i++)
            if (s->slots[i]) {
                int at = nameset_find(&ns, s->slots[i], strlen(s->slots[i]));
                ns.slots[-1 - at] = s->slots[i];
                ns.count++;
            }
        *s = ns;
    }
    int at = nameset_find(s, name, n);
    if (at >= 0) return;
    s->slots[-1 - at] = np_strndup(p, name, n);
    s->count++;
}

static const char *const builtin_generics[] = {
    "vector", "matrix", "Tensor", "DiffTensor", "RWTensor", "TensorView", "DiffTensorView",
    "DifferentialPair", "DifferentialPtrPair", "Array", "StructuredBuffer", "RWStructuredBuffer", "TorchTensor", "NDBuffer", "RWNDBuffer",
    "RasterizerOrderedStructuredBuffer", "CoopVec", NULL};

int np_is_builtin_type_name(const char *s, size_t n) {
    static const char *const scalars[] = {"bool", "int", "uint", "float", "double", "half", "int64_t",
                                          "uint64_t", "int32_t", "uint32_t", "int16_t", "uint16_t",
                                          "int8_t", "uint8_t", "float16_t", "float32_t", "float64_t",
                                          NULL};
    if (n == 4 && memcmp(s, "void", 4) == 0) return 1;
    for (int k = 0; scalars[k]; k++) {
        size_t m = strlen(scalars[k]);
        if (n < m || memcmp(s, scalars[k], m) != 0) continue;
        const char *r = s + m;
        size_t rn = n - m;
        if (rn == 0) return 1;
        if (rn == 1 && r[0] >= '1' && r[0] <= '4') return 1;
        if (rn == 3 && r[0] >= '1' && r[0] <= '4' && r[1] == 'x' && r[2] >= '1' && r[2] <= '4') return 1;
    }
    return 0;
}

int np_is_generic_name(nb_parser *p, const nb_token *t) {
    if (t->kind != NB_TOK_IDENT) return 0;
    return nameset_find(&p->generics, t->start, (size_t)t->len) >= 0;
}

int np_is_type_name(nb_parser *p, const nb_token *t) {
    if (t->kind != NB_TOK_IDENT) return 0;
    return np_is_builtin_type_name(t->start, (size_t)t->len) ||
           nameset_find(&p->types, t->start, (size_t)t->len) >= 0;
}

int np_tok_is(const nb_token *t, const char *word) {
    return t->kind == NB_TOK_IDENT && (size_t)t->len == strlen(word) && memcmp(t->start, word, (size_t)t->len) == 0;
}

/* After `__generic` at toks[i] (`<` next): the name the generic parameters belong to (the struct
 * after `struct`, or the function name before the first `(`), marked generic. */
static void prescan_generic_prefix(nb_parser *p, int i) {
    int depth = 0, j = i + 1;
    for (; j < p->ntoks; j++) { /* skip <…> */
        nb_tok_kind k = p->toks[j].kind;
        if (k == NB_TOK_LT) depth++;
        else if (k == NB_TOK_GT && --depth == 0) break;
        else if (k == NB_TOK_SHR && (depth -= 2) <= 0) break;
        else if (k == NB_TOK_LBRACE || k == NB_TOK_SEMI || k == NB_TOK_EOF) return;
    }
    for (j++; j + 1 < p->ntoks && j < i + 64; j++) {
        nb_tok_kind k = p->toks[j].kind;
        if (k == NB_TOK_LBRACKET || (k == NB_TOK_IDENT && np_tok_is(&p->toks[j], "__target_intrinsic"))) {
            /* `[ForwardDerivative(d_f<T>)]` / `__target_intrinsic(cuda, "…")` before the name: skipped */
            nb_tok_kind open = k == NB_TOK_LBRACKET ? NB_TOK_LBRACKET : NB_TOK_LPAREN;
            nb_tok_kind close = k == NB_TOK_LBRACKET ? NB_TOK_RBRACKET : NB_TOK_RPAREN;
            if (k != NB_TOK_LBRACKET) j++;
            int d = 0;
            for (; j < p->ntoks; j++) {
                if (p->toks[j].kind == open) d++;
                else if (p->toks[j].kind == close && --d == 0) break;
                else if (p->toks[j].kind == NB_TOK_LBRACE || p->toks[j].kind == NB_TOK_SEMI || p->toks[j].kind == NB_TOK_EOF) return;
            }
            continue;
        }
        if (k == NB_TOK_KW_STRUCT && p->toks[j + 1].kind == NB_TOK_IDENT) {
            np_nameset_add(p, &p->generics, p->toks[j + 1].start, (size_t)p->toks[j + 1].len);
            return;
        }
        if (k == NB_TOK_LPAREN && p->toks[j - 1].kind == NB_TOK_IDENT) {
            np_nameset_add(p, &p->generics, p->toks[j - 1].start, (size_t)p->toks[j - 1].len);
            return;
        }
        if (k == NB_TOK_LBRACE || k == NB_TOK_SEMI) return;
    }
}

/* Collects struct/typedef/typealias names of the whole file, so that use before declaration works. */
void np_prescan(nb_parser *p) {
    for (int k = 0; builtin_generics[k]; k++) {
        np_nameset_add(p, &p->generics, builtin_generics[k], strlen(builtin_generics[k]));
        np_nameset_add(p, &p->types, builtin_generics[k], strlen(builtin_generics[k]));
    }
    for (int i = 0; i + 1 < p->ntoks; i++) {
        const nb_token *t = &p->toks[i], *n = &p->toks[i + 1];
        if (np_tok_is(t, "interface") && n->kind == NB_TOK_IDENT) {
            np_nameset_add(p, &p->types, n->start, (size_t)n->len);
        } else if (np_tok_is(t, "enum") && n->kind == NB_TOK_IDENT) { /* enum E / enum class E */
            const nb_token *e = (np_tok_is(n, "class") && i + 2 < p->ntoks && p->toks[i + 2].kind == NB_TOK_IDENT)
                                    ? &p->toks[i + 2] : n;
            np_nameset_add(p, &p->types, e->start, (size_t)e->len);
        } else if (np_tok_is(t, "__generic") && n->kind == NB_TOK_LT) {
            prescan_generic_prefix(p, i);
        } else if (t->kind == NB_TOK_IDENT && n->kind == NB_TOK_LT && i + 3 < p->ntoks && i > 0 &&
                   (p->toks[i - 1].kind == NB_TOK_IDENT || p->toks[i - 1].kind == NB_TOK_GT ||
                    p->toks[i - 1].kind == NB_TOK_SHR || p->toks[i - 1].kind == NB_TOK_RBRACKET) &&
                   p->toks[i + 2].kind == NB_TOK_IDENT &&
                   (p->toks[i + 3].kind == NB_TOK_COLON ||
                    ((p->toks[i + 3].kind == NB_TOK_COMMA || p->toks[i + 3].kind == NB_TOK_GT) &&
                     p->toks[i - 1].kind == NB_TOK_IDENT && !np_tok_is(&p->toks[i - 1], "return")))) {
            /* a type generic function `T sqr<T : IFoo>(…)` / `T f<T>(…)` (also after a generic or
             * array result type, with a constraint: `S<T> f<T : I>(…)`): `sqr<float>(x)` is explicit */
            np_nameset_add(p, &p->generics, t->start, (size_t)t->len);
        } else if ((t->kind == NB_TOK_KW_STRUCT || t->kind == NB_TOK_KW_TYPEALIAS) && n->kind == NB_TOK_IDENT) {
            np_nameset_add(p, &p->types, n->start, (size_t)n->len);
            if (t->kind == NB_TOK_KW_STRUCT && i + 2 < p->ntoks && p->toks[i + 2].kind == NB_TOK_LT)
                np_nameset_add(p, &p->generics, n->start, (size_t)n->len);
        } else if (t->kind == NB_TOK_IDENT && n->kind == NB_TOK_LT && i + 2 < p->ntoks &&
                   (p->toks[i + 2].kind == NB_TOK_KW_LET ||
                    (i + 3 < p->ntoks && p->toks[i + 2].kind == NB_TOK_IDENT && p->toks[i + 3].kind == NB_TOK_IDENT &&
                     np_is_builtin_type_name(p->toks[i + 2].start, (size_t)p->toks[i + 2].len))) &&
                   (i == 0 || p->toks[i - 1].kind != NB_TOK_KW_STRUCT)) {
            /* a generic function `float sum<let N : int>(…)` (or `sum<int N>`): `sum<4>(x)` is an
             * explicit instantiation */
            np_nameset_add(p, &p->generics, t->start, (size_t)t->len);
        } else if (t->kind == NB_TOK_KW_TYPEDEF) {
            const nb_token *last = NULL;
            int depth = 0;
            for (int j = i + 1; j < p->ntoks; j++) {
                nb_tok_kind k = p->toks[j].kind;
                if (k == NB_TOK_SEMI || k == NB_TOK_LBRACE || k == NB_TOK_RBRACE || k == NB_TOK_EOF ||
                    k == NB_TOK_KW_TYPEDEF) /* (so the pre-scan stays linear) */
                    break;
                if (k == NB_TOK_LBRACKET || k == NB_TOK_LT) depth++;
                else if ((k == NB_TOK_RBRACKET || k == NB_TOK_GT) && depth > 0) depth--;
                else if (k == NB_TOK_SHR) depth = depth > 2 ? depth - 2 : 0;
                else if (k == NB_TOK_IDENT && depth == 0) last = &p->toks[j];
            }
            if (last) np_nameset_add(p, &p->types, last->start, (size_t)last->len);
        }
    }
}

/* ---- tokens --------------------------------------------------------------------------------- */

const nb_token *np_cur(nb_parser *p) {
    if (p->stop) return &p->toks[p->ntoks - 1];
    return &p->toks[p->pos];
}

const nb_token *np_peek(nb_parser *p, int k) {
    if (p->stop) return &p->toks[p->ntoks - 1];
    int i = p->pos + k;
    if (i >= p->ntoks) i = p->ntoks - 1;
    return &p->toks[i];
}

nb_tok_kind np_kind(nb_parser *p) {
    if (p->split_gt && !p->stop) return NB_TOK_GT;
    return np_cur(p)->kind;
}

nb_tok_kind np_peek_kind(nb_parser *p, int k) { return np_peek(p, k)->kind; }

nb_loc np_loc(nb_parser *p) {
    nb_loc l = np_cur(p)->loc;
    if (p->split_gt && !p->stop) l.col++;
    return l;
}

nb_loc np_prev_end(nb_parser *p) {
    if (p->pos == 0) return np_loc(p);
    const nb_token *t = &p->toks[p->pos - 1];
    nb_loc l = t->loc;
    l.col += t->len;
    return l;
}

void np_advance(nb_parser *p) {
    if (p->stop) return;
    p->split_gt = 0;
    if (p->pos < p->ntoks - 1) p->pos++;
}

int np_accept(nb_parser *p, nb_tok_kind k) {
    if (np_kind(p) != k) return 0;
    np_advance(p);
    return 1;
}

const char *np_tok_text(nb_parser *p) {
    const nb_token *t = np_cur(p);
    return np_strndup(p, t->start, (size_t)t->len);
}

void np_describe(nb_parser *p, const nb_token *t, char *buf, size_t n) {
    (void)p;
    if (t->kind == NB_TOK_EOF) {
        snprintf(buf, n, "end of file");
        return;
    }
    int len = t->len > 32 ? 32 : t->len;
    snprintf(buf, n, "'%.*s%s'", len, t->start, t->len > 32 ? "..." : "");
}

nb_pstate np_save(nb_parser *p) {
    nb_pstate s = {p->pos, p->split_gt};
    return s;
}

void np_restore(nb_parser *p, nb_pstate s) {
    p->pos = s.pos;
    p->split_gt = s.split_gt;
}

/* ---- errors and recovery -------------------------------------------------------------------- */

static void verror(nb_parser *p, nb_loc loc, const char *fmt, va_list ap) {
    if (p->spec) {
        p->spec_failed = 1;
        return;
    }
    if (p->panic || p->stop) return;
    p->panic = 1;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    nb_diag_error(p->src, loc, "%s", buf);
    if (p->src->max_errors > 0 && p->src->nerrors >= p->src->max_errors) p->stop = 1;
}

void np_error_at(nb_parser *p, nb_loc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    verror(p, loc, fmt, ap);
    va_end(ap);
}

void np_error_here(nb_parser *p, const char *fmt, ...) {
    if (np_kind(p) == NB_TOK_ERROR) { /* the lexer reported it */
        if (p->spec) p->spec_failed = 1;
        else p->panic = 1;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    verror(p, np_loc(p), fmt, ap);
    va_end(ap);
}

int np_expect_close(nb_parser *p, nb_tok_kind close, nb_loc open) {
    if (np_accept(p, close)) return 1;
    const char *opener = close == NB_TOK_RPAREN ? "'('" : close == NB_TOK_RBRACKET ? "'['"
                         : close == NB_TOK_RBRACE ? "'{'" : "'<'";
    char found[64];
    np_describe(p, np_cur(p), found, sizeof found);
    np_error_here(p, "expected %s to close %s opened at %d:%d, found %s", nb_tok_name(close), opener,
                  open.line, open.col, found);
    return 0;
}

int np_expect_semi(nb_parser *p, const char *after) {
    if (np_accept(p, NB_TOK_SEMI)) return 1;
    if (p->panic) return 0;
    if (np_kind(p) == NB_TOK_ERROR) { /* already reported by the lexer: just recover */
        np_error_here(p, "expected ';' after %s", after);
        return 0;
    }
    if (np_kind(p) == NB_TOK_RPAREN || np_kind(p) == NB_TOK_RBRACKET) { /* x = (x)); */
        np_error_here(p, "unexpected %s (no matching %s)", nb_tok_name(np_kind(p)),
                      np_kind(p) == NB_TOK_RPAREN ? "'('" : "'['");
        return 0;
    }
    nb_loc at = np_prev_end(p);
    int same_line = p->pos > 0 && np_cur(p)->loc.line == p->toks[p->pos - 1].loc.line &&
                    np_kind(p) != NB_TOK_RBRACE && np_kind(p) != NB_TOK_EOF;
    np_error_at(p, at, "expected ';' after %s", after);
    if (!same_line && !p->spec) p->panic = 0; /* assume it was forgotten at the end of the line */
    return 0;
}

int np_enter(nb_parser *p) {
    if (p->depth >= NB_PARSE_MAX_DEPTH) {
        if (!p->stop && !p->spec) {
            p->panic = 0;
            np_error_here(p, "nesting is too deep (more than %d levels); giving up", NB_PARSE_MAX_DEPTH);
            p->stop = 1;
        } else if (p->spec) {
            p->spec_failed = 1;
        }
        return 0;
    }
    p->depth++;
    return 1;
}

void np_leave(nb_parser *p) { p->depth--; }

void np_sync(nb_parser *p) {
    int depth = 0;
    for (;;) {
        nb_tok_kind k = np_kind(p);
        if (k == NB_TOK_EOF) break;
        if (k == NB_TOK_SEMI && depth == 0) {
            np_advance(p);
            break;
        }
        if (k == NB_TOK_RBRACE) {
            if (depth == 0) break;
            np_advance(p);
            if (--depth == 0) break;
            continue;
        }
        if (k == NB_TOK_LBRACE || k == NB_TOK_LPAREN || k == NB_TOK_LBRACKET) depth++;
        else if ((k == NB_TOK_RPAREN || k == NB_TOK_RBRACKET) && depth > 0) depth--;
        np_advance(p);
    }
    p->panic = 0;
}

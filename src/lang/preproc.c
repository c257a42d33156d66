/* The preprocessor (see preproc.h).
 *
 * Structure: a stack of files (the module file and its #includes, each lexed whole by nb_lex_raw)
 * under a stack of macro contexts (token lists being rescanned). next_raw() takes the next token
 * from the top context, or from the top file, where it also runs directives and skips false #if
 * groups. next() expands macros on top of next_raw(). The module's tokens are next() until EOF.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lang/preproc.h"
#include "nabla/alloc.h"

#include "lang/preproc_internal.h"

/* ---- growable token lists (heap) ------------------------------------------------------------ */


int pp_tv_push(tokvec *v, const nb_token *t) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 16;
        nb_token *nt = nb_alloc(sizeof(nb_token) * (size_t)cap, 16);
        if (!nt) return 0;
        if (v->t) memcpy(nt, v->t, sizeof(nb_token) * (size_t)v->n);
        nb_free(v->t, sizeof(nb_token) * (size_t)v->cap);
        v->t = nt;
        v->cap = cap;
    }
    v->t[v->n++] = *t;
    return 1;
}

void pp_tv_free(tokvec *v) {
    nb_free(v->t, sizeof(nb_token) * (size_t)v->cap);
    memset(v, 0, sizeof *v);
}

/* ---- macros ---------------------------------------------------------------------------------- */


static uint32_t name_hash(const char *s, int n) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

int pp_is_identlike(const nb_token *t) {
    return t->kind == NB_TOK_IDENT || (t->kind >= NB_TOK_KW_STRUCT && t->kind < NB_TOK_LPAREN);
}

int pp_tok_is(const nb_token *t, const char *word) {
    size_t n = strlen(word);
    return (size_t)t->len == n && memcmp(t->start, word, n) == 0;
}

int pp_find_macro(const pp *P, const char *s, int n) {
    if (!P->table_cap) return -1;
    uint32_t mask = (uint32_t)P->table_cap - 1;
    for (uint32_t h = name_hash(s, n) & mask;; h = (h + 1) & mask) {
        int e = P->table[h];
        if (!e) return -1;
        const pp_macro *m = &P->macros[e - 1];
        if (m->nlen == n && memcmp(m->name, s, (size_t)n) == 0) return e - 1;
    }
}

static void table_insert(pp *P, int idx) {
    uint32_t mask = (uint32_t)P->table_cap - 1;
    uint32_t h = name_hash(P->macros[idx].name, P->macros[idx].nlen) & mask;
    while (P->table[h]) h = (h + 1) & mask;
    P->table[h] = idx + 1;
}

/* The macro slot for a name (new, undefined, when absent); -1 on out of memory. */
int pp_macro_slot(pp *P, const char *s, int n) {
    int i = pp_find_macro(P, s, n);
    if (i >= 0) return i;
    if ((P->nmacros + 1) * 2 > P->table_cap) {
        int cap = P->table_cap ? P->table_cap * 2 : 64;
        int *t = nb_alloc(sizeof(int) * (size_t)cap, 16);
        if (!t) return -1;
        memset(t, 0, sizeof(int) * (size_t)cap);
        nb_free(P->table, sizeof(int) * (size_t)P->table_cap);
        P->table = t;
        P->table_cap = cap;
        for (int k = 0; k < P->nmacros; k++) table_insert(P, k);
    }
    if (P->nmacros == P->cap_macros) {
        int cap = P->cap_macros ? P->cap_macros * 2 : 32;
        pp_macro *m = nb_alloc(sizeof *m * (size_t)cap, 16);
        if (!m) return -1;
        if (P->macros) memcpy(m, P->macros, sizeof *m * (size_t)P->nmacros);
        nb_free(P->macros, sizeof *m * (size_t)P->cap_macros);
        P->macros = m;
        P->cap_macros = cap;
    }
    i = P->nmacros++;
    memset(&P->macros[i], 0, sizeof P->macros[i]);
    P->macros[i].name = s;
    P->macros[i].nlen = n;
    table_insert(P, i);
    return i;
}

/* ---- small helpers ------------------------------------------------------------------------- */

static char *pp_strndup(pp *P, const char *s, size_t n) {
    char *d = nb_arena_alloc(P->arena, n + 1, 1);
    if (!d) {
        P->oom = 1;
        return NULL;
    }
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

const char *pp_file_path(const pp *P, int file) {
    return file >= 0 && file < P->src->nfiles ? P->src->files[file].path : "<input>";
}

/* Index of the end of the directive starting at toks[from] (the first token of the next line). */
int pp_line_end(const pp_file *f, int from) {
    int i = from;
    while (i < f->n && f->toks[i].kind != NB_TOK_EOF && !(i > from && (f->toks[i].flags & NB_TOKF_BOL))) i++;
    return i;
}

/* "'x'" for messages (clipped). */
void pp_spell(const nb_token *t, char *buf, size_t n) {
    if (t->kind == NB_TOK_EOF) snprintf(buf, n, "end of line");
    else snprintf(buf, n, "'%.*s%s'", t->len > 40 ? 40 : t->len, t->start, t->len > 40 ? "..." : "");
}

/* ---- contexts ------------------------------------------------------------------------------ */

static int push_ctx(pp *P, tokvec *toks, int macro, int barrier) {
    if (P->nctx == P->cap_ctx) {
        int cap = P->cap_ctx ? P->cap_ctx * 2 : 16;
        pp_ctx *c = nb_alloc(sizeof *c * (size_t)cap, 16);
        if (!c) {
            pp_tv_free(toks);
            P->oom = 1;
            return 0;
        }
        if (P->ctx) memcpy(c, P->ctx, sizeof *c * (size_t)P->nctx);
        nb_free(P->ctx, sizeof *c * (size_t)P->cap_ctx);
        P->ctx = c;
        P->cap_ctx = cap;
    }
    pp_ctx *c = &P->ctx[P->nctx++];
    c->toks = *toks;
    memset(toks, 0, sizeof *toks);
    c->pos = 0;
    c->macro = macro;
    c->barrier = barrier;
    if (macro >= 0) P->macros[macro].active = 1;
    return 1;
}

static void pop_ctx(pp *P) {
    pp_ctx *c = &P->ctx[--P->nctx];
    if (c->macro >= 0) P->macros[c->macro].active = 0;
    pp_tv_free(&c->toks);
}

static void next(pp *P, nb_token *out);

/* The next token before macro expansion: from the top context, else from the top file (where
 * directives run). At the end of everything: EOF. */
static void next_raw(pp *P, nb_token *out) {
    if (P->has_peek) {
        *out = P->peek;
        P->has_peek = 0;
        return;
    }
    for (;;) {
        if (P->nctx > 0) {
            pp_ctx *c = &P->ctx[P->nctx - 1];
            if (c->pos < c->toks.n) {
                *out = c->toks.t[c->pos++];
                return;
            }
            if (c->barrier) {
                *out = P->eof;
                return;
            }
            pop_ctx(P);
            continue;
        }
        if (P->nfiles == 0 || P->oom) {
            *out = P->eof;
            return;
        }
        pp_file *f = &P->files[P->nfiles - 1];
        const nb_token *t = &f->toks[f->pos];
        if (t->kind == NB_TOK_EOF) {
            while (P->nconds > f->cond_base) {
                pp_cond *c = &P->conds[--P->nconds];
                nb_diag_error(P->src, c->loc, "unterminated '#if' (no '#endif' before the end of '%s')",
                              pp_file_path(P, f->file));
            }
            if (P->nfiles == 1) P->eof = *t;
            P->nfiles--;
            continue;
        }
        if (t->kind == NB_TOK_HASH && (t->flags & NB_TOKF_BOL)) {
            pp_directive(P, f);
            continue;
        }
        f->pos++;
        *out = *t;
        if (t->kind == NB_TOK_ERROR) {
            nb_lex_report(P->src, t);
            out->flags |= NB_TOKF_REPORTED;
        }
        return;
    }
}

/* ---- expansion ----------------------------------------------------------------------------- */

/* Fully macro-expands a token list on its own (an argument, an #if line). */
void pp_expand_list(pp *P, const nb_token *in, int n, tokvec *out) {
    if (P->too_large) return;
    if (P->expand_depth >= PP_MAX_EXPAND_DEPTH) {
        if (!P->too_large && n > 0)
            nb_diag_error(P->src, in[0].loc, "macro arguments nested too deeply (more than %d levels)",
                          PP_MAX_EXPAND_DEPTH);
        P->too_large = 1;
        return;
    }
    tokvec copy = {0};
    for (int i = 0; i < n; i++)
        if (!pp_tv_push(&copy, &in[i])) {
            P->oom = 1;
            pp_tv_free(&copy);
            return;
        }
    int saved_peek = P->has_peek;
    nb_token saved = P->peek;
    P->has_peek = 0;
    int base = P->nctx;
    if (!push_ctx(P, &copy, -1, 1)) return;
    P->expand_depth++;
    for (;;) {
        nb_token t;
        next(P, &t);
        if (t.kind == NB_TOK_EOF) break;
        if (!pp_tv_push(out, &t)) {
            P->oom = 1;
            break;
        }
    }
    P->expand_depth--;
    while (P->nctx > base) pop_ctx(P);
    P->has_peek = saved_peek;
    P->peek = saved;
}

static int param_index(const pp_macro *m, const nb_token *t) {
    if (!m->fn || !pp_is_identlike(t)) return -1;
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i].n == t->len && memcmp(m->params[i].s, t->start, (size_t)t->len) == 0) return i;
    return -1;
}

/* `#arg`: a string literal of the argument's spelling (blanks between tokens become one space). */
static nb_token stringify(pp *P, const tokvec *arg, nb_loc at) {
    size_t cap = 3;
    for (int i = 0; i < arg->n; i++) cap += (size_t)arg->t[i].len * 2 + 1;
    char *s = nb_arena_alloc(P->arena, cap, 1);
    nb_token r;
    memset(&r, 0, sizeof r);
    r.kind = NB_TOK_STRING;
    r.loc = at;
    if (!s) {
        P->oom = 1;
        r.start = "\"\"";
        r.len = 2;
        return r;
    }
    size_t k = 0;
    s[k++] = '"';
    for (int i = 0; i < arg->n; i++) {
        const nb_token *t = &arg->t[i];
        if (i > 0 && (t->flags & NB_TOKF_SPACE)) s[k++] = ' ';
        int quoted = t->kind == NB_TOK_STRING || (t->kind == NB_TOK_ERROR && t->len && t->start[0] == '\'');
        for (int c = 0; c < t->len; c++) {
            if (quoted && (t->start[c] == '"' || t->start[c] == '\\')) s[k++] = '\\';
            s[k++] = t->start[c];
        }
    }
    s[k++] = '"';
    s[k] = 0;
    r.start = s;
    r.len = (int)k;
    return r;
}

/* `a ## b`: one token from the two spellings, or a diagnostic and both tokens kept. */
static int paste(pp *P, tokvec *res, const nb_token *rhs, nb_loc at) {
    nb_token *lhs = &res->t[res->n - 1];
    size_t n = (size_t)lhs->len + (size_t)rhs->len;
    char *text = nb_arena_alloc(P->arena, n + 1, 1);
    if (!text) {
        P->oom = 1;
        return 0;
    }
    memcpy(text, lhs->start, (size_t)lhs->len);
    memcpy(text + lhs->len, rhs->start, (size_t)rhs->len);
    text[n] = 0;
    int cnt = 0;
    nb_token *t = nb_lex_text(P->src, -1, text, n, P->arena, &cnt);
    if (!t) {
        P->oom = 1;
        return 0;
    }
    if (cnt != 2 || t[0].kind == NB_TOK_ERROR) {
        nb_diag_error(P->src, at, "pasting '%.*s' and '%.*s' does not give a valid token", lhs->len, lhs->start,
                      rhs->len, rhs->start);
        nb_token r = *rhs;
        r.loc = at;
        return pp_tv_push(res, &r);
    }
    int flags = lhs->flags & NB_TOKF_SPACE;
    *lhs = t[0];
    lhs->loc = at;
    lhs->flags = flags;
    return 1;
}

/* The body of m with its arguments substituted (raw next to # and ##, else fully expanded). */
static void substitute(pp *P, const pp_macro *m, tokvec *args, nb_loc at, int space, tokvec *res) {
    tokvec *expanded = NULL;
    if (m->nparams) {
        expanded = nb_alloc(sizeof(tokvec) * (size_t)m->nparams, 16);
        if (!expanded) {
            P->oom = 1;
            return;
        }
        memset(expanded, 0, sizeof(tokvec) * (size_t)m->nparams);
    }
    unsigned char *done = expanded ? nb_alloc((size_t)m->nparams, 1) : NULL;
    if (done) memset(done, 0, (size_t)m->nparams);
    int paste_next = 0, lhs_empty = 0;
    for (int i = 0; i < m->nbody && !P->oom; i++) {
        const nb_token *b = &m->body[i];
        if (b->kind == NB_TOK_HASHHASH && i > 0 && i + 1 < m->nbody) {
            paste_next = 1;
            continue;
        }
        int pi = param_index(m, b);
        if (m->fn && b->kind == NB_TOK_HASH && i + 1 < m->nbody && param_index(m, &m->body[i + 1]) >= 0) {
            nb_token s = stringify(P, &args[param_index(m, &m->body[i + 1])], at);
            s.flags = (b->flags & NB_TOKF_SPACE);
            i++;
            if (paste_next && !lhs_empty && res->n > 0) paste(P, res, &s, at);
            else pp_tv_push(res, &s);
            paste_next = 0;
            lhs_empty = 0;
            continue;
        }
        if (pi >= 0) {
            int raw = paste_next || (i + 1 < m->nbody && m->body[i + 1].kind == NB_TOK_HASHHASH);
            const tokvec *src;
            if (raw) {
                src = &args[pi];
            } else {
                if (!done || !done[pi]) {
                    pp_expand_list(P, args[pi].t, args[pi].n, &expanded[pi]);
                    if (done) done[pi] = 1;
                }
                src = &expanded[pi];
            }
            int k = 0;
            if (paste_next && src->n > 0 && !lhs_empty && res->n > 0) {
                paste(P, res, &src->t[0], at);
                k = 1;
            }
            for (; k < src->n; k++) {
                nb_token t = src->t[k];
                t.flags &= ~NB_TOKF_BOL;
                if (k == 0) t.flags = (t.flags & ~NB_TOKF_SPACE) | (b->flags & NB_TOKF_SPACE);
                if (!pp_tv_push(res, &t)) P->oom = 1;
            }
            lhs_empty = src->n == 0;
            paste_next = 0;
            continue;
        }
        nb_token t = *b;
        t.loc = at;
        t.flags &= ~NB_TOKF_BOL;
        if (paste_next && !lhs_empty && res->n > 0) paste(P, res, &t, at);
        else if (!pp_tv_push(res, &t)) P->oom = 1;
        paste_next = 0;
        lhs_empty = 0;
    }
    if (res->n > 0) res->t[0].flags = (res->t[0].flags & ~NB_TOKF_SPACE) | (space ? NB_TOKF_SPACE : 0);
    for (int k = 0; k < m->nparams; k++) pp_tv_free(&expanded[k]);
    nb_free(expanded, sizeof(tokvec) * (size_t)m->nparams);
    nb_free(done, (size_t)m->nparams);
}

static nb_token builtin_token(pp *P, const pp_macro *m, const nb_token *t) {
    nb_token r;
    memset(&r, 0, sizeof r);
    r.loc = t->loc;
    r.flags = t->flags & NB_TOKF_SPACE;
    if (m->builtin == BUILTIN_LINE) {
        char buf[24];
        int n = snprintf(buf, sizeof buf, "%d", t->loc.line);
        r.kind = NB_TOK_INT;
        r.start = pp_strndup(P, buf, (size_t)n);
        r.len = n;
        r.v.i.value = (uint64_t)(t->loc.line > 0 ? t->loc.line : 0);
    } else {
        const char *path = pp_file_path(P, t->loc.file);
        size_t n = strlen(path);
        char *s = nb_arena_alloc(P->arena, n * 2 + 3, 1);
        r.kind = NB_TOK_STRING;
        if (!s) {
            P->oom = 1;
            r.start = "\"\"";
            r.len = 2;
            return r;
        }
        size_t k = 0;
        s[k++] = '"';
        for (size_t i = 0; i < n; i++) {
            if (path[i] == '"' || path[i] == '\\') s[k++] = '\\';
            s[k++] = path[i];
        }
        s[k++] = '"';
        s[k] = 0;
        r.start = s;
        r.len = (int)k;
    }
    if (!r.start) {
        r.start = "0";
        r.len = 1;
    }
    return r;
}

/* Room for at least `need` arguments in *args (zeroed). */
static int args_room(pp *P, tokvec **args, int *cap, int need) {
    if (need <= *cap) return 1;
    int ncap = *cap ? *cap : 4;
    while (ncap < need) ncap *= 2;
    tokvec *na = nb_alloc(sizeof(tokvec) * (size_t)ncap, 16);
    if (!na) {
        P->oom = 1;
        return 0;
    }
    memset(na, 0, sizeof(tokvec) * (size_t)ncap);
    if (*args) memcpy(na, *args, sizeof(tokvec) * (size_t)*cap);
    nb_free(*args, sizeof(tokvec) * (size_t)*cap);
    *args = na;
    *cap = ncap;
    return 1;
}

/* Collects the arguments of a function-like macro invocation after its '(' (raw tokens, split at
 * top-level commas; the variadic parameter takes the rest, commas included). 0: no ')' before
 * the end of the input. *cap is the size of *args either way (free that many). */
static int collect_args(pp *P, const pp_macro *m, tokvec **args, int *n, int *cap) {
    int depth = 0;
    *args = NULL;
    *cap = 0;
    *n = 1;
    if (!args_room(P, args, cap, 4)) return 0;
    for (;;) {
        nb_token t;
        next_raw(P, &t);
        if (t.kind == NB_TOK_EOF || P->oom) return 0;
        if (t.kind == NB_TOK_LPAREN) depth++;
        else if (t.kind == NB_TOK_RPAREN && depth-- == 0) return 1;
        else if (t.kind == NB_TOK_COMMA && depth == 0 && !(m->variadic && *n == m->nparams)) {
            if (!args_room(P, args, cap, *n + 1)) return 0;
            (*n)++;
            continue;
        }
        if (!pp_tv_push(&(*args)[*n - 1], &t)) P->oom = 1;
    }
}

static void free_args(tokvec *args, int cap) {
    for (int k = 0; k < cap; k++) pp_tv_free(&args[k]);
    nb_free(args, sizeof(tokvec) * (size_t)cap);
}

/* The next token after macro expansion. */
static void next(pp *P, nb_token *out) {
    for (;;) {
        next_raw(P, out);
        if (P->nmacros == 0 || !pp_is_identlike(out) || (out->flags & NB_TOKF_NOEXPAND)) return;
        int mi = pp_find_macro(P, out->start, out->len);
        if (mi < 0 || !P->macros[mi].defined) return;
        pp_macro *m = &P->macros[mi];
        if (P->too_large) { /* after "expansion too large": no more expansions, no more tokens */
            *out = P->eof;
            return;
        }
        if (m->active) {
            out->flags |= NB_TOKF_NOEXPAND; /* painted blue: never expanded again */
            return;
        }
        if (m->builtin) {
            *out = builtin_token(P, m, out);
            return;
        }
        nb_token inv = *out;
        tokvec *args = NULL;
        int nargs = 0, cap = 0;
        if (m->fn) {
            nb_token la;
            next_raw(P, &la);
            if (la.kind != NB_TOK_LPAREN) { /* a function-like macro's name alone: not a call */
                P->peek = la;
                P->has_peek = 1;
                return;
            }
            int closed = collect_args(P, m, &args, &nargs, &cap);
            m = &P->macros[mi]; /* a directive among the arguments may have moved the table */
            if (!closed) {
                if (!P->oom)
                    nb_diag_error(P->src, inv.loc, "unterminated argument list invoking macro '%.*s'", m->nlen, m->name);
                free_args(args, cap);
                *out = P->eof;
                return;
            }
            int want = m->variadic ? m->nparams - 1 : m->nparams;
            int ok = nargs == m->nparams || (m->nparams == 0 && nargs == 1 && args[0].n == 0) ||
                     (m->variadic && nargs == m->nparams - 1);
            if (!ok) {
                nb_diag_error(P->src, inv.loc, "macro '%.*s' expects %d argument%s%s, but %d %s given", m->nlen,
                              m->name, want, want == 1 ? "" : "s", m->variadic ? " or more" : "", nargs,
                              nargs == 1 ? "was" : "were");
                free_args(args, cap);
                continue; /* the invocation is dropped */
            }
            if (!args_room(P, &args, &cap, m->nparams)) { /* an empty __VA_ARGS__ */
                free_args(args, cap);
                return;
            }
        }
        nb_source_add_macro_site(P->src, inv.loc, m->def, m->name, m->nlen);
        tokvec res = {0};
        substitute(P, m, args, inv.loc, inv.flags & NB_TOKF_SPACE, &res);
        free_args(args, cap);
        P->expanded += res.n;
        if (P->expanded > PP_MAX_EXPANDED) {
            if (!P->too_large)
                nb_diag_error(P->src, inv.loc, "macro expansion too large (more than %d tokens in one module)",
                              PP_MAX_EXPANDED);
            P->too_large = 1;
            pp_tv_free(&res);
            *out = P->eof;
            return;
        }
        if (!push_ctx(P, &res, mi, 0)) return;
    }
}

/* ---- the module ---------------------------------------------------------------------------- */

static const char *const builtin_defines[] = {
    "__SLANG__=1", "__SLANG_COMPILER__=1", "__HLSL_VERSION=2018", "__HLSL__=0", "__NABLA__=1", NULL,
};

static int define_name_len(const char *d) {
    int n = 0;
    while (d[n] && d[n] != '=') n++;
    return n;
}

/* The "<command-line>" file: one #define line per host define, then the predefined macros that
 * the host did not define. Made once per source set. */
static int prelude_file(nb_source_set *src) {
    if (src->prelude_file) return src->prelude_file - 1;
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    for (int k = 0; k < src->ndefines; k++) {
        const char *d = src->defines[k] ? src->defines[k] : "";
        int n = define_name_len(d), ok = n > 0 && !(d[0] >= '0' && d[0] <= '9');
        for (int c = 0; c < n && ok; c++)
            ok = d[c] == '_' || (d[c] >= 'a' && d[c] <= 'z') || (d[c] >= 'A' && d[c] <= 'Z') || (d[c] >= '0' && d[c] <= '9');
        if (!ok) {
            nb_loc none = {-1, 0, 0};
            nb_diag_error(src, none, "bad define '%s': expected NAME or NAME=VALUE with NAME an identifier", d);
            continue;
        }
        /* a value on one line: newlines would end the directive */
        nb_strbuf_printf(&sb, "#define %.*s", n, d);
        if (d[n] == '=') {
            nb_strbuf_append_char(&sb, ' ');
            for (const char *c = d + n + 1; *c; c++) nb_strbuf_append_char(&sb, *c == '\n' || *c == '\r' ? ' ' : *c);
        }
        nb_strbuf_append(&sb, " \n"); /* (the blank: a value ending in '\\' does not continue the line) */
    }
    for (int b = 0; builtin_defines[b]; b++) {
        int n = define_name_len(builtin_defines[b]), given = 0;
        for (int k = 0; k < src->ndefines && !given; k++)
            given = src->defines[k] && define_name_len(src->defines[k]) == n &&
                    memcmp(src->defines[k], builtin_defines[b], (size_t)n) == 0;
        if (!given) nb_strbuf_printf(&sb, "#define %.*s %s\n", n, builtin_defines[b], builtin_defines[b] + n + 1);
    }
    int idx = nb_strbuf_ok(&sb) ? nb_source_add(src, "<command-line>", nb_strbuf_cstr(&sb), sb.len) : -1;
    nb_strbuf_free(&sb);
    if (idx >= 0) src->prelude_file = idx + 1;
    return idx;
}

static void define_builtin(pp *P, const char *name, int kind) {
    int mi = pp_macro_slot(P, name, (int)strlen(name));
    if (mi < 0) {
        P->oom = 1;
        return;
    }
    P->macros[mi].defined = 1;
    P->macros[mi].builtin = kind;
    P->macros[mi].def.file = -1;
}

static void pp_free(pp *P) {
    while (P->nctx > 0) pop_ctx(P);
    nb_free(P->ctx, sizeof(pp_ctx) * (size_t)P->cap_ctx);
    nb_free(P->macros, sizeof(pp_macro) * (size_t)P->cap_macros);
    nb_free(P->table, sizeof(int) * (size_t)P->table_cap);
    nb_free(P->conds, sizeof(pp_cond) * (size_t)P->cap_conds);
    for (int i = 0; i < P->nseen; i++) nb_free(P->seen[i].canon, strlen(P->seen[i].canon) + 1);
    nb_free(P->seen, sizeof(pp_seen) * (size_t)P->cap_seen);
}

nb_token *nb_preprocess(nb_source_set *src, int file, nb_arena *arena, int *count) {
    if (count) *count = 0;
    if (!src || !arena) return NULL;
    pp P;
    memset(&P, 0, sizeof P);
    P.src = src;
    P.arena = arena;
    P.eof.kind = NB_TOK_EOF;
    P.eof.loc.file = file;
    P.eof.loc.line = 1;
    P.eof.loc.col = 1;
    P.eof.start = "";
    define_builtin(&P, "__LINE__", BUILTIN_LINE);
    define_builtin(&P, "__FILE__", BUILTIN_FILE);
    /* the prelude's #defines, then the module file */
    int pre = prelude_file(src);
    if (pre >= 0 && pp_push_file(&P, pre, -1)) {
        nb_token t;
        next_raw(&P, &t); /* only directives: runs them all */
        while (t.kind != NB_TOK_EOF) {
            nb_diag_error(src, t.loc, "a define must be NAME or NAME=VALUE");
            next_raw(&P, &t);
        }
    }
    P.nfiles = 0;
    P.eof.kind = NB_TOK_EOF;
    tokvec out = {0};
    if (file >= 0 && file < src->nfiles) {
        char *canon = pp_canonical(src->files[file].path);
        int slot = canon ? pp_add_seen(&P, canon, file) : -1;
        if (slot < 0 && canon) nb_free(canon, strlen(canon) + 1);
        if (pp_push_file(&P, file, slot)) {
            /* Fast path: while the output is the file's own tokens one for one (no directive, no
             * expansion yet), nothing is copied; `same` counts them. */
            const nb_token *raw = P.files[0].toks;
            int raw_n = P.files[0].n, same = 0, diverged = 0;
            for (;;) {
                nb_token t;
                next(&P, &t);
                if (t.kind == NB_TOK_EOF || P.oom) break;
                if (t.kind == NB_TOK_HASH || t.kind == NB_TOK_HASHHASH) {
                    nb_diag_error(src, t.loc, "stray '%.*s' outside a preprocessor directive", t.len, t.start);
                    diverged = 1;
                    continue;
                }
                if (!diverged && same < raw_n && t.start == raw[same].start && t.kind == raw[same].kind &&
                    t.loc.file == raw[same].loc.file) {
                    same++;
                    continue;
                }
                if (!diverged) {
                    diverged = 1;
                    for (int k = 0; k < same && !P.oom; k++)
                        if (!pp_tv_push(&out, &raw[k])) P.oom = 1;
                }
                if (t.kind == NB_TOK_ERROR && !(t.flags & NB_TOKF_REPORTED)) { /* from a macro body: */
                    nb_token at = t;                                        /* reported where used */
                    at.v.err.col = t.loc.col;
                    nb_lex_report(src, &at);
                }
                t.flags &= NB_TOKF_BOL | NB_TOKF_SPACE;
                if (!pp_tv_push(&out, &t)) {
                    P.oom = 1;
                    break;
                }
            }
            if (!diverged && !P.oom && same == raw_n - 1 && P.nfiles == 0) { /* untouched: the lexer's array */
                nb_token *res = (nb_token *)raw;
                if (count) *count = raw_n;
                pp_tv_free(&out);
                pp_free(&P);
                return res;
            }
            if (!diverged && !P.oom)
                for (int k = 0; k < same && !P.oom; k++)
                    if (!pp_tv_push(&out, &raw[k])) P.oom = 1;
        }
    }
    nb_token eof = P.eof;
    eof.kind = NB_TOK_EOF;
    if (eof.loc.file != file) { /* the main file's EOF */
        eof.loc.file = file;
    }
    nb_token *res = NULL;
    if (!P.oom && pp_tv_push(&out, &eof)) {
        res = nb_arena_alloc(arena, sizeof(nb_token) * (size_t)out.n, 16);
        if (res) {
            memcpy(res, out.t, sizeof(nb_token) * (size_t)out.n);
            if (count) *count = out.n;
        }
    }
    if (!res) {
        nb_loc at = {file, 1, 1};
        nb_diag_error(src, at, "out of memory while preprocessing the source");
    }
    pp_tv_free(&out);
    pp_free(&P);
    return res;
}

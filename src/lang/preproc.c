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

#define PP_MAX_INCLUDE_DEPTH 64
#define PP_MAX_EXPAND_DEPTH 256      /* nested argument pre-expansions */
#define PP_MAX_EXPANDED 1000000      /* tokens produced by macros in one module (exponential bodies) */
#define PP_MAX_INCLUDES 20000        /* #include operations in one module (a file including itself
                                        twice without guards would double at every level) */

/* ---- growable token lists (heap) ------------------------------------------------------------ */

typedef struct tokvec {
    nb_token *t;
    int n, cap;
} tokvec;

static int tv_push(tokvec *v, const nb_token *t) {
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

static void tv_free(tokvec *v) {
    nb_free(v->t, sizeof(nb_token) * (size_t)v->cap);
    memset(v, 0, sizeof *v);
}

/* ---- macros ---------------------------------------------------------------------------------- */

enum { BUILTIN_NONE, BUILTIN_LINE, BUILTIN_FILE };

typedef struct pp_name {
    const char *s;
    int n;
} pp_name;

typedef struct pp_macro {
    const char *name; /* into its file's text */
    int nlen;
    int defined;      /* 0 after #undef (the slot is kept for a later #define) */
    int fn;           /* function-like */
    int variadic;     /* the last parameter is __VA_ARGS__ */
    int nparams;
    pp_name *params;  /* arena */
    const nb_token *body; /* into the lexed file (arena) */
    int nbody;
    nb_loc def;
    int builtin;
    int active;       /* being expanded: disabled */
} pp_macro;

typedef struct pp_ctx {
    tokvec toks;
    int pos;
    int macro;   /* index of the macro this expands (disabled meanwhile), -1 none */
    int barrier; /* an argument being pre-expanded: its end is EOF, not the tokens after it */
} pp_ctx;

typedef struct pp_cond {
    nb_loc loc;   /* the #if */
    int taken;    /* some group of this #if..#endif was (or is being) taken */
    int in_else;
} pp_cond;

typedef struct pp_file {
    int file;
    nb_token *toks;
    int n, pos;
    int cond_base; /* depth of the #if stack when the file began */
    int once_slot; /* index in pp->seen */
} pp_file;

typedef struct pp_seen { /* files #included so far: reuse and #pragma once */
    char *canon;
    int file;
    int once;
} pp_seen;

typedef struct pp {
    nb_source_set *src;
    nb_arena *arena;
    pp_macro *macros;
    int nmacros, cap_macros;
    int *table; /* open addressing: macro index + 1, 0 empty */
    int table_cap;
    pp_ctx *ctx;
    int nctx, cap_ctx;
    pp_file files[PP_MAX_INCLUDE_DEPTH + 2];
    int nfiles;
    pp_cond *conds;
    int nconds, cap_conds;
    pp_seen *seen;
    int nseen, cap_seen;
    nb_token peek;
    int has_peek;
    nb_token eof;
    int expand_depth;
    long expanded;
    int nincludes;
    int depth_reported; /* the include-depth error is given once */
    int too_large;
    int oom;
} pp;

static uint32_t name_hash(const char *s, int n) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static int is_identlike(const nb_token *t) {
    return t->kind == NB_TOK_IDENT || (t->kind >= NB_TOK_KW_STRUCT && t->kind < NB_TOK_LPAREN);
}

static int tok_is(const nb_token *t, const char *word) {
    size_t n = strlen(word);
    return (size_t)t->len == n && memcmp(t->start, word, n) == 0;
}

static int find_macro(const pp *P, const char *s, int n) {
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
static int macro_slot(pp *P, const char *s, int n) {
    int i = find_macro(P, s, n);
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

static const char *file_path(const pp *P, int file) {
    return file >= 0 && file < P->src->nfiles ? P->src->files[file].path : "<input>";
}

/* Index of the end of the directive starting at toks[from] (the first token of the next line). */
static int line_end(const pp_file *f, int from) {
    int i = from;
    while (i < f->n && f->toks[i].kind != NB_TOK_EOF && !(i > from && (f->toks[i].flags & NB_TOKF_BOL))) i++;
    return i;
}

/* "'x'" for messages (clipped). */
static void spell(const nb_token *t, char *buf, size_t n) {
    if (t->kind == NB_TOK_EOF) snprintf(buf, n, "end of line");
    else snprintf(buf, n, "'%.*s%s'", t->len > 40 ? 40 : t->len, t->start, t->len > 40 ? "..." : "");
}

/* ---- contexts ------------------------------------------------------------------------------ */

static int push_ctx(pp *P, tokvec *toks, int macro, int barrier) {
    if (P->nctx == P->cap_ctx) {
        int cap = P->cap_ctx ? P->cap_ctx * 2 : 16;
        pp_ctx *c = nb_alloc(sizeof *c * (size_t)cap, 16);
        if (!c) {
            tv_free(toks);
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
    tv_free(&c->toks);
}

static void directive(pp *P, pp_file *f);
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
                              file_path(P, f->file));
            }
            if (P->nfiles == 1) P->eof = *t;
            P->nfiles--;
            continue;
        }
        if (t->kind == NB_TOK_HASH && (t->flags & NB_TOKF_BOL)) {
            directive(P, f);
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
static void expand_list(pp *P, const nb_token *in, int n, tokvec *out) {
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
        if (!tv_push(&copy, &in[i])) {
            P->oom = 1;
            tv_free(&copy);
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
        if (!tv_push(out, &t)) {
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
    if (!m->fn || !is_identlike(t)) return -1;
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
        return tv_push(res, &r);
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
            else tv_push(res, &s);
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
                    expand_list(P, args[pi].t, args[pi].n, &expanded[pi]);
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
                if (!tv_push(res, &t)) P->oom = 1;
            }
            lhs_empty = src->n == 0;
            paste_next = 0;
            continue;
        }
        nb_token t = *b;
        t.loc = at;
        t.flags &= ~NB_TOKF_BOL;
        if (paste_next && !lhs_empty && res->n > 0) paste(P, res, &t, at);
        else if (!tv_push(res, &t)) P->oom = 1;
        paste_next = 0;
        lhs_empty = 0;
    }
    if (res->n > 0) res->t[0].flags = (res->t[0].flags & ~NB_TOKF_SPACE) | (space ? NB_TOKF_SPACE : 0);
    for (int k = 0; k < m->nparams; k++) tv_free(&expanded[k]);
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
        const char *path = file_path(P, t->loc.file);
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
        if (!tv_push(&(*args)[*n - 1], &t)) P->oom = 1;
    }
}

static void free_args(tokvec *args, int cap) {
    for (int k = 0; k < cap; k++) tv_free(&args[k]);
    nb_free(args, sizeof(tokvec) * (size_t)cap);
}

/* The next token after macro expansion. */
static void next(pp *P, nb_token *out) {
    for (;;) {
        next_raw(P, out);
        if (P->nmacros == 0 || !is_identlike(out) || (out->flags & NB_TOKF_NOEXPAND)) return;
        int mi = find_macro(P, out->start, out->len);
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
            tv_free(&res);
            *out = P->eof;
            return;
        }
        if (!push_ctx(P, &res, mi, 0)) return;
    }
}

/* ---- #if expressions ----------------------------------------------------------------------- */

typedef struct ifx {
    pp *P;
    const nb_token *t;
    int n, i;
    nb_loc at; /* the directive, for errors at the end of the line */
    int err;
} ifx;

static const nb_token *ifx_peek(ifx *x) { return x->i < x->n ? &x->t[x->i] : NULL; }

static int64_t ifx_cond(ifx *x);

static void ifx_error(ifx *x, const nb_token *t, const char *what) {
    if (x->err) return;
    x->err = 1;
    char buf[64];
    if (t) spell(t, buf, sizeof buf);
    else snprintf(buf, sizeof buf, "the end of the line");
    nb_diag_error(x->P->src, t ? t->loc : x->at, "%s in preprocessor expression, found %s", what, buf);
}

static int64_t ifx_primary(ifx *x) {
    const nb_token *t = ifx_peek(x);
    if (!t) {
        ifx_error(x, NULL, "expected a value");
        return 0;
    }
    switch (t->kind) {
    case NB_TOK_INT: x->i++; return (int64_t)t->v.i.value;
    case NB_TOK_KW_TRUE: x->i++; return 1;
    case NB_TOK_KW_FALSE: x->i++; return 0;
    case NB_TOK_LPAREN: {
        x->i++;
        int64_t v = ifx_cond(x);
        const nb_token *r = ifx_peek(x);
        if (!r || r->kind != NB_TOK_RPAREN) ifx_error(x, r, "expected ')'");
        else x->i++;
        return v;
    }
    case NB_TOK_MINUS: x->i++; return (int64_t)(0 - (uint64_t)ifx_primary(x));
    case NB_TOK_PLUS: x->i++; return ifx_primary(x);
    case NB_TOK_NOT: x->i++; return !ifx_primary(x);
    case NB_TOK_TILDE: x->i++; return ~ifx_primary(x);
    case NB_TOK_FLOAT:
        if (!x->err)
            nb_diag_error(x->P->src, t->loc, "floating-point value in preprocessor expression (integers only)");
        x->err = 1;
        x->i++;
        return 0;
    default:
        if (is_identlike(t)) { /* a name that is not a macro: 0, with a warning (as Slang) */
            nb_diag_add(x->P->src, NB_DIAG_WARNING, t->loc,
                        "'%.*s' is not defined; it evaluates to 0 in a preprocessor expression", t->len, t->start);
            x->i++;
            return 0;
        }
        ifx_error(x, t, "expected a value");
        return 0;
    }
}

static int prec(nb_tok_kind k) {
    switch (k) {
    case NB_TOK_STAR: case NB_TOK_SLASH: case NB_TOK_PERCENT: return 10;
    case NB_TOK_PLUS: case NB_TOK_MINUS: return 9;
    case NB_TOK_SHL: case NB_TOK_SHR: return 8;
    case NB_TOK_LT: case NB_TOK_GT: case NB_TOK_LE: case NB_TOK_GE: return 7;
    case NB_TOK_EQ: case NB_TOK_NE: return 6;
    case NB_TOK_AMP: return 5;
    case NB_TOK_CARET: return 4;
    case NB_TOK_PIPE: return 3;
    case NB_TOK_ANDAND: return 2;
    case NB_TOK_OROR: return 1;
    default: return 0;
    }
}

static int64_t ifx_binary(ifx *x, int min_prec) {
    int64_t l = ifx_primary(x);
    for (;;) {
        const nb_token *op = ifx_peek(x);
        int p = op ? prec(op->kind) : 0;
        if (!p || p < min_prec || x->err) return l;
        x->i++;
        int64_t r = ifx_binary(x, p + 1);
        uint64_t ul = (uint64_t)l, ur = (uint64_t)r;
        switch (op->kind) {
        case NB_TOK_STAR: l = (int64_t)(ul * ur); break;
        case NB_TOK_SLASH:
        case NB_TOK_PERCENT:
            if (r == 0) {
                if (!x->err) nb_diag_error(x->P->src, op->loc, "division by zero in preprocessor expression");
                x->err = 1;
                return 0;
            }
            if (l == INT64_MIN && r == -1) l = op->kind == NB_TOK_SLASH ? INT64_MIN : 0;
            else l = op->kind == NB_TOK_SLASH ? l / r : l % r;
            break;
        case NB_TOK_PLUS: l = (int64_t)(ul + ur); break;
        case NB_TOK_MINUS: l = (int64_t)(ul - ur); break;
        case NB_TOK_SHL: l = (int64_t)(ul << (ur & 63)); break;
        case NB_TOK_SHR: l = l >> (ur & 63); break;
        case NB_TOK_LT: l = l < r; break;
        case NB_TOK_GT: l = l > r; break;
        case NB_TOK_LE: l = l <= r; break;
        case NB_TOK_GE: l = l >= r; break;
        case NB_TOK_EQ: l = l == r; break;
        case NB_TOK_NE: l = l != r; break;
        case NB_TOK_AMP: l = (int64_t)(ul & ur); break;
        case NB_TOK_CARET: l = (int64_t)(ul ^ ur); break;
        case NB_TOK_PIPE: l = (int64_t)(ul | ur); break;
        case NB_TOK_ANDAND: l = l && r; break;
        case NB_TOK_OROR: l = l || r; break;
        default: break;
        }
    }
}

static int64_t ifx_cond(ifx *x) {
    int64_t c = ifx_binary(x, 1);
    const nb_token *q = ifx_peek(x);
    if (!q || q->kind != NB_TOK_QUESTION || x->err) return c;
    x->i++;
    int64_t a = ifx_cond(x);
    const nb_token *colon = ifx_peek(x);
    if (!colon || colon->kind != NB_TOK_COLON) {
        ifx_error(x, colon, "expected ':'");
        return 0;
    }
    x->i++;
    int64_t b = ifx_cond(x);
    return c ? a : b;
}

/* Evaluates the #if / #elif line toks[from, to). */
static int eval_if(pp *P, pp_file *f, int from, int to, const nb_token *hash) {
    tokvec pre = {0};
    /* `defined NAME` / `defined(NAME)` before expansion */
    for (int i = from; i < to; i++) {
        const nb_token *t = &f->toks[i];
        if (tok_is(t, "defined") && t->kind == NB_TOK_IDENT) {
            int j = i + 1, paren = 0;
            if (j < to && f->toks[j].kind == NB_TOK_LPAREN) {
                paren = 1;
                j++;
            }
            if (j >= to || !is_identlike(&f->toks[j]) || (paren && (j + 1 >= to || f->toks[j + 1].kind != NB_TOK_RPAREN))) {
                char buf[64];
                spell(j < to ? &f->toks[j] : &P->eof, buf, sizeof buf);
                nb_diag_error(P->src, j < to ? f->toks[j].loc : t->loc,
                              "expected a macro name%s after 'defined', found %s", paren ? " and ')'" : "", buf);
                tv_free(&pre);
                return 0;
            }
            int mi = find_macro(P, f->toks[j].start, f->toks[j].len);
            nb_token v;
            memset(&v, 0, sizeof v);
            v.kind = NB_TOK_INT;
            v.loc = t->loc;
            v.v.i.value = mi >= 0 && P->macros[mi].defined;
            v.start = v.v.i.value ? "1" : "0";
            v.len = 1;
            tv_push(&pre, &v);
            i = j + paren;
            continue;
        }
        if (t->kind == NB_TOK_ERROR) nb_lex_report(P->src, t);
        tv_push(&pre, t);
    }
    tokvec ex = {0};
    expand_list(P, pre.t, pre.n, &ex);
    tv_free(&pre);
    ifx x = {P, ex.t, ex.n, 0, hash->loc, 0};
    int64_t v = 0;
    if (ex.n == 0) {
        nb_diag_error(P->src, hash->loc, "'#%.*s' needs an expression", f->toks[from - 1].len, f->toks[from - 1].start);
    } else {
        v = ifx_cond(&x);
        if (!x.err && x.i < x.n) ifx_error(&x, &x.t[x.i], "unexpected token");
        if (x.err) v = 0;
    }
    tv_free(&ex);
    return v != 0;
}

/* ---- directives ---------------------------------------------------------------------------- */

static int push_cond(pp *P, nb_loc at, int taken) {
    if (P->nconds == P->cap_conds) {
        int cap = P->cap_conds ? P->cap_conds * 2 : 16;
        pp_cond *c = nb_alloc(sizeof *c * (size_t)cap, 16);
        if (!c) {
            P->oom = 1;
            return 0;
        }
        if (P->conds) memcpy(c, P->conds, sizeof *c * (size_t)P->nconds);
        nb_free(P->conds, sizeof *c * (size_t)P->cap_conds);
        P->conds = c;
        P->cap_conds = cap;
    }
    pp_cond *c = &P->conds[P->nconds++];
    c->loc = at;
    c->taken = taken;
    c->in_else = 0;
    return 1;
}

/* Skips a false group: stops at the '#' of the #elif / #else / #endif that ends it (same depth). */
static void skip_group(pp_file *f) {
    int depth = 0;
    while (f->toks[f->pos].kind != NB_TOK_EOF) {
        const nb_token *t = &f->toks[f->pos];
        if (t->kind == NB_TOK_HASH && (t->flags & NB_TOKF_BOL) && f->pos + 1 < f->n &&
            !(f->toks[f->pos + 1].flags & NB_TOKF_BOL)) {
            const nb_token *d = &f->toks[f->pos + 1];
            if (tok_is(d, "if") || tok_is(d, "ifdef") || tok_is(d, "ifndef")) depth++;
            else if (tok_is(d, "endif")) {
                if (depth == 0) return;
                depth--;
            } else if ((tok_is(d, "elif") || tok_is(d, "else")) && depth == 0)
                return;
        }
        f->pos++;
    }
}

/* Raw text of the rest of a directive line after token `after` (for #error / #warning). */
static void rest_of_line(const pp_file *f, int after, int end, const char **s, int *n) {
    const nb_token *a = &f->toks[after];
    const char *p = a->start + a->len;
    const char *e = p;
    if (end > after + 1) {
        const nb_token *last = &f->toks[end - 1];
        e = last->start + last->len;
    }
    while (p < e && (*p == ' ' || *p == '\t')) p++;
    *s = p;
    *n = (int)(e - p);
}

static void dir_define(pp *P, pp_file *f, int i, int end) {
    if (i >= end || !is_identlike(&f->toks[i])) {
        char buf[64];
        spell(i < end ? &f->toks[i] : &P->eof, buf, sizeof buf);
        nb_diag_error(P->src, i < end ? f->toks[i].loc : f->toks[i - 1].loc, "expected a macro name after '#define', found %s", buf);
        return;
    }
    const nb_token *name = &f->toks[i];
    if (tok_is(name, "defined")) {
        nb_diag_error(P->src, name->loc, "'defined' cannot be a macro name");
        return;
    }
    int fn = 0, variadic = 0, np = 0;
    pp_name params[64];
    int j = i + 1;
    if (j < end && f->toks[j].kind == NB_TOK_LPAREN && !(f->toks[j].flags & NB_TOKF_SPACE)) {
        fn = 1;
        j++;
        for (;;) {
            const nb_token *t = j < end ? &f->toks[j] : NULL;
            if (np == 0 && t && t->kind == NB_TOK_RPAREN) {
                j++;
                break;
            }
            if (t && t->kind == NB_TOK_DOT && j + 2 < end && f->toks[j + 1].kind == NB_TOK_DOT &&
                f->toks[j + 2].kind == NB_TOK_DOT) {
                variadic = 1;
                params[np].s = "__VA_ARGS__";
                params[np].n = 11;
                np++;
                j += 3;
                if (j >= end || f->toks[j].kind != NB_TOK_RPAREN) {
                    nb_diag_error(P->src, j < end ? f->toks[j].loc : t->loc,
                                  "'...' must be the last parameter of macro '%.*s'", name->len, name->start);
                    return;
                }
                j++;
                break;
            }
            if (!t || !is_identlike(t)) {
                char buf[64];
                spell(t ? t : &P->eof, buf, sizeof buf);
                nb_diag_error(P->src, t ? t->loc : f->toks[j - 1].loc,
                              "expected a parameter name in macro '%.*s', found %s", name->len, name->start, buf);
                return;
            }
            for (int k = 0; k < np; k++)
                if (params[k].n == t->len && memcmp(params[k].s, t->start, (size_t)t->len) == 0) {
                    nb_diag_error(P->src, t->loc, "duplicate parameter '%.*s' in macro '%.*s'", t->len, t->start,
                                  name->len, name->start);
                    return;
                }
            if (np == 63) {
                nb_diag_error(P->src, t->loc, "too many parameters in macro '%.*s' (at most 63)", name->len, name->start);
                return;
            }
            params[np].s = t->start;
            params[np].n = t->len;
            np++;
            j++;
            const nb_token *sep = j < end ? &f->toks[j] : NULL;
            if (sep && sep->kind == NB_TOK_COMMA) {
                j++;
                continue;
            }
            if (sep && sep->kind == NB_TOK_RPAREN) {
                j++;
                break;
            }
            char buf[64];
            spell(sep ? sep : &P->eof, buf, sizeof buf);
            nb_diag_error(P->src, sep ? sep->loc : t->loc, "expected ',' or ')' in the parameters of macro '%.*s', found %s",
                          name->len, name->start, buf);
            return;
        }
    }
    const nb_token *body = &f->toks[j];
    int nbody = end - j;
    if (nbody > 0 && body[0].kind == NB_TOK_HASHHASH) {
        nb_diag_error(P->src, body[0].loc, "'##' cannot begin a macro body");
        return;
    }
    if (nbody > 0 && body[nbody - 1].kind == NB_TOK_HASHHASH) {
        nb_diag_error(P->src, body[nbody - 1].loc, "'##' cannot end a macro body");
        return;
    }
    if (fn)
        for (int k = 0; k < nbody; k++)
            if (body[k].kind == NB_TOK_HASH) {
                int ok = 0;
                if (k + 1 < nbody && is_identlike(&body[k + 1]))
                    for (int q = 0; q < np && !ok; q++)
                        ok = params[q].n == body[k + 1].len && memcmp(params[q].s, body[k + 1].start, (size_t)params[q].n) == 0;
                if (!ok) {
                    nb_diag_error(P->src, body[k].loc, "'#' in a function-like macro must be followed by a parameter name");
                    return;
                }
            }
    int mi = macro_slot(P, name->start, name->len);
    if (mi < 0) {
        P->oom = 1;
        return;
    }
    pp_macro *m = &P->macros[mi];
    if (m->defined && m->builtin) {
        nb_diag_error(P->src, name->loc, "cannot redefine the built-in macro '%.*s'", name->len, name->start);
        return;
    }
    if (m->defined) { /* same definition: fine; another one: a warning (as Slang), the new one wins */
        int same = m->fn == fn && m->nparams == np && m->variadic == variadic && m->nbody == nbody;
        for (int k = 0; same && k < np; k++)
            same = m->params[k].n == params[k].n && memcmp(m->params[k].s, params[k].s, (size_t)params[k].n) == 0;
        for (int k = 0; same && k < nbody; k++)
            same = m->body[k].len == body[k].len && memcmp(m->body[k].start, body[k].start, (size_t)body[k].len) == 0 &&
                   (k == 0 || (m->body[k].flags & NB_TOKF_SPACE) == (body[k].flags & NB_TOKF_SPACE));
        if (!same) {
            nb_diag_add(P->src, NB_DIAG_WARNING, name->loc, "macro '%.*s' redefined", name->len, name->start);
            nb_diag_note(P->src, m->def, "the previous definition of '%.*s'", name->len, name->start);
        }
    }
    m->name = name->start;
    m->defined = 1;
    m->fn = fn;
    m->variadic = variadic;
    m->nparams = np;
    m->params = NULL;
    if (np) {
        m->params = nb_arena_alloc(P->arena, sizeof(pp_name) * (size_t)np, 16);
        if (!m->params) {
            P->oom = 1;
            m->defined = 0;
            return;
        }
        memcpy(m->params, params, sizeof(pp_name) * (size_t)np);
    }
    m->body = body;
    m->nbody = nbody;
    m->def = name->loc;
}

static int path_readable(const pp *P, const char *path) {
    const nb_source_set *prev = P->src->prev;
    if (prev)
        for (int i = 0; i < prev->nfiles; i++)
            if (strcmp(prev->files[i].path, path) == 0) return 1;
    return access(path, R_OK) == 0;
}

static char *canonical(const char *path) {
    char buf[PATH_MAX];
    const char *c = realpath(path, buf) ? buf : path;
    size_t n = strlen(c);
    char *d = nb_alloc(n + 1, 16);
    if (d) memcpy(d, c, n + 1);
    return d;
}

static int seen_slot(pp *P, const char *canon) {
    for (int i = 0; i < P->nseen; i++)
        if (strcmp(P->seen[i].canon, canon) == 0) return i;
    return -1;
}

static int add_seen(pp *P, char *canon, int file) {
    if (P->nseen == P->cap_seen) {
        int cap = P->cap_seen ? P->cap_seen * 2 : 8;
        pp_seen *s = nb_alloc(sizeof *s * (size_t)cap, 16);
        if (!s) return -1;
        if (P->seen) memcpy(s, P->seen, sizeof *s * (size_t)P->nseen);
        nb_free(P->seen, sizeof *s * (size_t)P->cap_seen);
        P->seen = s;
        P->cap_seen = cap;
    }
    P->seen[P->nseen].canon = canon;
    P->seen[P->nseen].file = file;
    P->seen[P->nseen].once = 0;
    return P->nseen++;
}

static int push_file(pp *P, int file, int slot) {
    int n = 0;
    nb_token *t = nb_lex_raw(P->src, file, P->arena, &n);
    if (!t || n < 1) {
        P->oom = 1;
        return 0;
    }
    pp_file *f = &P->files[P->nfiles++];
    f->file = file;
    f->toks = t;
    f->n = n;
    f->pos = 0;
    f->cond_base = P->nconds;
    f->once_slot = slot;
    return 1;
}

static void dir_include(pp *P, pp_file *f, int i, int end, const nb_token *hash) {
    /* the file name: "x", <x>, or macros giving one of those */
    char name[1024];
    int angle = 0;
    const nb_token *nt = i < end ? &f->toks[i] : NULL;
    tokvec ex = {0};
    const nb_token *ts = &f->toks[i];
    int n = end - i;
    if (nt && nt->kind != NB_TOK_STRING && nt->kind != NB_TOK_LT) {
        expand_list(P, ts, n, &ex);
        ts = ex.t;
        n = ex.n;
    }
    int ok = 0;
    if (n == 1 && ts[0].kind == NB_TOK_STRING && ts[0].len >= 2 && (size_t)ts[0].len - 2 < sizeof name) {
        memcpy(name, ts[0].start + 1, (size_t)ts[0].len - 2);
        name[ts[0].len - 2] = 0;
        ok = name[0] != 0;
    } else if (n >= 3 && ts[0].kind == NB_TOK_LT && ts[n - 1].kind == NB_TOK_GT) {
        /* <a/b.h>: the text between the brackets, when the tokens are one run of one buffer */
        const char *s = ts[0].start + 1, *e = ts[n - 1].start;
        int one_run = 1;
        for (int k = 1; k < n && one_run; k++)
            one_run = ts[k].start >= ts[k - 1].start + ts[k - 1].len && ts[k].start - ts[0].start < (long)sizeof name;
        if (one_run && e > s && (size_t)(e - s) < sizeof name) {
            memcpy(name, s, (size_t)(e - s));
            name[e - s] = 0;
            ok = 1;
            angle = 1;
        }
    }
    if (!ok) {
        char buf[64];
        spell(nt ? nt : &P->eof, buf, sizeof buf);
        nb_diag_error(P->src, nt ? nt->loc : hash->loc, "expected \"FILE\" or <FILE> after '#include', found %s", buf);
        tv_free(&ex);
        return;
    }
    tv_free(&ex);
    /* where to look: the including file's directory ("..." only), then the search paths */
    char path[PATH_MAX + 1100];
    int found = 0;
    const char *inc_path = file_path(P, f->file);
    char dir[PATH_MAX];
    const char *slash = strrchr(inc_path, '/');
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - inc_path == 0 ? 1 : slash - inc_path), inc_path);
    else snprintf(dir, sizeof dir, ".");
    if (name[0] == '/') {
        snprintf(path, sizeof path, "%s", name);
        found = path_readable(P, path);
    }
    if (!found && !angle) {
        if (slash) snprintf(path, sizeof path, "%s/%s", dir, name);
        else snprintf(path, sizeof path, "%s", name);
        found = path_readable(P, path);
    }
    for (int k = 0; !found && k < P->src->nsearch; k++) {
        snprintf(path, sizeof path, "%s/%s", P->src->search_paths[k], name);
        found = path_readable(P, path);
    }
    if (!found && angle) {
        if (slash) snprintf(path, sizeof path, "%s/%s", dir, name);
        else snprintf(path, sizeof path, "%s", name);
        found = path_readable(P, path);
    }
    if (!found) {
        nb_strbuf sb;
        nb_strbuf_init(&sb);
        if (name[0] != '/') {
            nb_strbuf_append(&sb, dir);
            for (int k = 0; k < P->src->nsearch; k++) nb_strbuf_printf(&sb, ", %s", P->src->search_paths[k]);
        }
        nb_diag_error(P->src, nt->loc, "cannot find include file '%s'%s%s%s", name, sb.len ? " (looked in: " : "",
                      sb.len ? nb_strbuf_cstr(&sb) : "", sb.len ? ")" : "");
        nb_strbuf_free(&sb);
        return;
    }
    char *canon = canonical(path);
    if (!canon) {
        P->oom = 1;
        return;
    }
    int slot = seen_slot(P, canon);
    if (slot >= 0 && P->seen[slot].once) {
        nb_free(canon, strlen(canon) + 1);
        return;
    }
    if (++P->nincludes > PP_MAX_INCLUDES) {
        if (P->nincludes == PP_MAX_INCLUDES + 1)
            nb_diag_error(P->src, nt->loc, "more than %d #includes in one module (a file included again and again "
                          "without '#pragma once' or include guards?)", PP_MAX_INCLUDES);
        nb_free(canon, strlen(canon) + 1);
        return;
    }
    if (P->nfiles > PP_MAX_INCLUDE_DEPTH) {
        if (P->depth_reported++) {
            nb_free(canon, strlen(canon) + 1);
            return;
        }
        nb_strbuf sb;
        nb_strbuf_init(&sb);
        int from = P->nfiles > 6 ? P->nfiles - 6 : 0;
        for (int k = from; k < P->nfiles; k++) nb_strbuf_printf(&sb, "'%s' includes ", file_path(P, P->files[k].file));
        nb_strbuf_printf(&sb, "'%s'", path);
        nb_diag_error(P->src, nt->loc,
                      "#include nested too deeply (more than %d levels; an include cycle without '#pragma once' or "
                      "include guards?): %s%s",
                      PP_MAX_INCLUDE_DEPTH, from ? "... " : "", nb_strbuf_cstr(&sb));
        nb_strbuf_free(&sb);
        nb_free(canon, strlen(canon) + 1);
        return;
    }
    int file = -1;
    if (slot >= 0) {
        file = P->seen[slot].file;
        nb_free(canon, strlen(canon) + 1);
    } else {
        const nb_source_set *prev = P->src->prev;
        for (int k = 0; prev && k < prev->nfiles && file < 0; k++)
            if (strcmp(prev->files[k].path, path) == 0) {
                file = nb_source_add(P->src, path, prev->files[k].text, prev->files[k].len);
                if (file < 0) P->oom = 1;
            }
        if (file < 0 && !P->oom) {
            nb_status st = nb_source_load(P->src, path, &file);
            if (st != NB_OK) {
                nb_diag_error(P->src, nt->loc, "cannot read include file '%s': %s", path, nb_last_error());
                nb_free(canon, strlen(canon) + 1);
                return;
            }
        }
        if (file >= 0 && P->src->files[file].included_from.file < 0) P->src->files[file].included_from = nt->loc;
        if (file < 0 || (slot = add_seen(P, canon, file)) < 0) {
            nb_free(canon, strlen(canon) + 1);
            P->oom = 1;
            return;
        }
    }
    push_file(P, file, slot);
}

/* Runs the directive whose '#' is f->toks[f->pos]; leaves f->pos after its line. */
static void directive(pp *P, pp_file *f) {
    int h = f->pos;
    const nb_token *hash = &f->toks[h];
    int end = line_end(f, h);
    f->pos = end;
    if (end == h + 1) return; /* `#` alone: the null directive */
    const nb_token *d = &f->toks[h + 1];
    int i = h + 2;
    char buf[64];
    if (tok_is(d, "if") || tok_is(d, "ifdef") || tok_is(d, "ifndef")) {
        int v;
        if (tok_is(d, "if")) {
            v = eval_if(P, f, i, end, hash);
        } else {
            if (i >= end || !is_identlike(&f->toks[i])) {
                spell(i < end ? &f->toks[i] : &P->eof, buf, sizeof buf);
                nb_diag_error(P->src, i < end ? f->toks[i].loc : d->loc, "expected a macro name after '#%.*s', found %s",
                              d->len, d->start, buf);
                v = 0;
            } else {
                int mi = find_macro(P, f->toks[i].start, f->toks[i].len);
                v = mi >= 0 && P->macros[mi].defined;
                if (tok_is(d, "ifndef")) v = !v;
            }
        }
        if (!push_cond(P, hash->loc, v)) return;
        if (!v) skip_group(f);
        return;
    }
    if (tok_is(d, "elif") || tok_is(d, "else") || tok_is(d, "endif")) {
        if (P->nconds <= f->cond_base) {
            nb_diag_error(P->src, hash->loc, "'#%.*s' without '#if'", d->len, d->start);
            return;
        }
        pp_cond *c = &P->conds[P->nconds - 1];
        if (tok_is(d, "endif")) {
            P->nconds--;
            return;
        }
        if (c->in_else) {
            nb_diag_error(P->src, hash->loc, "'#%.*s' after '#else'", d->len, d->start);
            nb_diag_note(P->src, c->loc, "the '#if' it belongs to");
            skip_group(f);
            return;
        }
        if (tok_is(d, "else")) {
            c->in_else = 1;
            if (c->taken) skip_group(f);
            else c->taken = 1;
            return;
        }
        /* #elif: evaluated only when no group was taken yet */
        if (c->taken) {
            skip_group(f);
            return;
        }
        int v = eval_if(P, f, i, end, hash);
        if (v) c->taken = 1;
        else skip_group(f);
        return;
    }
    if (tok_is(d, "define")) {
        dir_define(P, f, i, end);
        return;
    }
    if (tok_is(d, "undef")) {
        if (i >= end || !is_identlike(&f->toks[i])) {
            spell(i < end ? &f->toks[i] : &P->eof, buf, sizeof buf);
            nb_diag_error(P->src, i < end ? f->toks[i].loc : d->loc, "expected a macro name after '#undef', found %s", buf);
            return;
        }
        int mi = find_macro(P, f->toks[i].start, f->toks[i].len);
        if (mi >= 0 && P->macros[mi].builtin) {
            nb_diag_error(P->src, f->toks[i].loc, "cannot undefine the built-in macro '%.*s'", f->toks[i].len, f->toks[i].start);
            return;
        }
        if (mi < 0 || !P->macros[mi].defined)
            nb_diag_add(P->src, NB_DIAG_WARNING, f->toks[i].loc, "'#undef' of '%.*s', which is not defined",
                        f->toks[i].len, f->toks[i].start);
        else
            P->macros[mi].defined = 0;
        return;
    }
    if (tok_is(d, "include")) {
        dir_include(P, f, i, end, hash);
        return;
    }
    if (tok_is(d, "pragma")) {
        if (i < end && tok_is(&f->toks[i], "once")) {
            if (f->once_slot >= 0) P->seen[f->once_slot].once = 1;
        } else if (i < end && tok_is(&f->toks[i], "warning")) {
            /* #pragma warning(...): Slang's warning control; nabla has none to adjust */
        } else {
            spell(i < end ? &f->toks[i] : &P->eof, buf, sizeof buf);
            nb_diag_add(P->src, NB_DIAG_WARNING, i < end ? f->toks[i].loc : d->loc, "unknown '#pragma' %s ignored", buf);
        }
        return;
    }
    if (tok_is(d, "error") || tok_is(d, "warning")) {
        const char *s;
        int n;
        rest_of_line(f, h + 1, end, &s, &n);
        int err = tok_is(d, "error");
        nb_diag_add(P->src, err ? NB_DIAG_ERROR : NB_DIAG_WARNING, hash->loc, "#%s%s%.*s", err ? "error" : "warning",
                    n ? ": " : "", n, s);
        return;
    }
    if (tok_is(d, "line") || tok_is(d, "version") || tok_is(d, "extension") || tok_is(d, "language") ||
        tok_is(d, "lang"))
        return; /* accepted and ignored (locations stay those of the real file) */
    spell(d, buf, sizeof buf);
    nb_diag_error(P->src, d->loc, "unknown preprocessor directive '#%.*s'", d->len > 40 ? 40 : d->len, d->start);
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
    int mi = macro_slot(P, name, (int)strlen(name));
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
    if (pre >= 0 && push_file(&P, pre, -1)) {
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
        char *canon = canonical(src->files[file].path);
        int slot = canon ? add_seen(&P, canon, file) : -1;
        if (slot < 0 && canon) nb_free(canon, strlen(canon) + 1);
        if (push_file(&P, file, slot)) {
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
                        if (!tv_push(&out, &raw[k])) P.oom = 1;
                }
                if (t.kind == NB_TOK_ERROR && !(t.flags & NB_TOKF_REPORTED)) { /* from a macro body: */
                    nb_token at = t;                                        /* reported where used */
                    at.v.err.col = t.loc.col;
                    nb_lex_report(src, &at);
                }
                t.flags &= NB_TOKF_BOL | NB_TOKF_SPACE;
                if (!tv_push(&out, &t)) {
                    P.oom = 1;
                    break;
                }
            }
            if (!diverged && !P.oom && same == raw_n - 1 && P.nfiles == 0) { /* untouched: the lexer's array */
                nb_token *res = (nb_token *)raw;
                if (count) *count = raw_n;
                tv_free(&out);
                pp_free(&P);
                return res;
            }
            if (!diverged && !P.oom)
                for (int k = 0; k < same && !P.oom; k++)
                    if (!tv_push(&out, &raw[k])) P.oom = 1;
        }
    }
    nb_token eof = P.eof;
    eof.kind = NB_TOK_EOF;
    if (eof.loc.file != file) { /* the main file's EOF */
        eof.loc.file = file;
    }
    nb_token *res = NULL;
    if (!P.oom && tv_push(&out, &eof)) {
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
    tv_free(&out);
    pp_free(&P);
    return res;
}

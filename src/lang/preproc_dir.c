/* The preprocessor's directives (#define, #include, #if and its expressions, #pragma, …), split
 * from preproc.c (which has the token stacks and macro expansion). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lang/preproc.h"
#include "nabla/alloc.h"

#include "lang/preproc_internal.h"

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
    if (t) pp_spell(t, buf, sizeof buf);
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
        if (pp_is_identlike(t)) { /* a name that is not a macro: 0, with a warning (as Slang) */
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
        if (pp_tok_is(t, "defined") && t->kind == NB_TOK_IDENT) {
            int j = i + 1, paren = 0;
            if (j < to && f->toks[j].kind == NB_TOK_LPAREN) {
                paren = 1;
                j++;
            }
            if (j >= to || !pp_is_identlike(&f->toks[j]) || (paren && (j + 1 >= to || f->toks[j + 1].kind != NB_TOK_RPAREN))) {
                char buf[64];
                pp_spell(j < to ? &f->toks[j] : &P->eof, buf, sizeof buf);
                nb_diag_error(P->src, j < to ? f->toks[j].loc : t->loc,
                              "expected a macro name%s after 'defined', found %s", paren ? " and ')'" : "", buf);
                pp_tv_free(&pre);
                return 0;
            }
            int mi = pp_find_macro(P, f->toks[j].start, f->toks[j].len);
            nb_token v;
            memset(&v, 0, sizeof v);
            v.kind = NB_TOK_INT;
            v.loc = t->loc;
            v.v.i.value = mi >= 0 && P->macros[mi].defined;
            v.start = v.v.i.value ? "1" : "0";
            v.len = 1;
            pp_tv_push(&pre, &v);
            i = j + paren;
            continue;
        }
        if (t->kind == NB_TOK_ERROR) nb_lex_report(P->src, t);
        pp_tv_push(&pre, t);
    }
    tokvec ex = {0};
    pp_expand_list(P, pre.t, pre.n, &ex);
    pp_tv_free(&pre);
    ifx x = {P, ex.t, ex.n, 0, hash->loc, 0};
    int64_t v = 0;
    if (ex.n == 0) {
        nb_diag_error(P->src, hash->loc, "'#%.*s' needs an expression", f->toks[from - 1].len, f->toks[from - 1].start);
    } else {
        v = ifx_cond(&x);
        if (!x.err && x.i < x.n) ifx_error(&x, &x.t[x.i], "unexpected token");
        if (x.err) v = 0;
    }
    pp_tv_free(&ex);
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
            if (pp_tok_is(d, "if") || pp_tok_is(d, "ifdef") || pp_tok_is(d, "ifndef")) depth++;
            else if (pp_tok_is(d, "endif")) {
                if (depth == 0) return;
                depth--;
            } else if ((pp_tok_is(d, "elif") || pp_tok_is(d, "else")) && depth == 0)
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
    if (i >= end || !pp_is_identlike(&f->toks[i])) {
        char buf[64];
        pp_spell(i < end ? &f->toks[i] : &P->eof, buf, sizeof buf);
        nb_diag_error(P->src, i < end ? f->toks[i].loc : f->toks[i - 1].loc, "expected a macro name after '#define', found %s", buf);
        return;
    }
    const nb_token *name = &f->toks[i];
    if (pp_tok_is(name, "defined")) {
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
            if (!t || !pp_is_identlike(t)) {
                char buf[64];
                pp_spell(t ? t : &P->eof, buf, sizeof buf);
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
            pp_spell(sep ? sep : &P->eof, buf, sizeof buf);
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
                if (k + 1 < nbody && pp_is_identlike(&body[k + 1]))
                    for (int q = 0; q < np && !ok; q++)
                        ok = params[q].n == body[k + 1].len && memcmp(params[q].s, body[k + 1].start, (size_t)params[q].n) == 0;
                if (!ok) {
                    nb_diag_error(P->src, body[k].loc, "'#' in a function-like macro must be followed by a parameter name");
                    return;
                }
            }
    int mi = pp_macro_slot(P, name->start, name->len);
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

char *pp_canonical(const char *path) {
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

int pp_add_seen(pp *P, char *canon, int file) {
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

int pp_push_file(pp *P, int file, int slot) {
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
        pp_expand_list(P, ts, n, &ex);
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
        pp_spell(nt ? nt : &P->eof, buf, sizeof buf);
        nb_diag_error(P->src, nt ? nt->loc : hash->loc, "expected \"FILE\" or <FILE> after '#include', found %s", buf);
        pp_tv_free(&ex);
        return;
    }
    pp_tv_free(&ex);
    /* where to look: the including file's directory ("..." only), then the search paths */
    char path[PATH_MAX + 1100];
    int found = 0;
    const char *inc_path = pp_file_path(P, f->file);
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
    char *canon = pp_canonical(path);
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
        for (int k = from; k < P->nfiles; k++) nb_strbuf_printf(&sb, "'%s' includes ", pp_file_path(P, P->files[k].file));
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
        if (file < 0 || (slot = pp_add_seen(P, canon, file)) < 0) {
            nb_free(canon, strlen(canon) + 1);
            P->oom = 1;
            return;
        }
    }
    pp_push_file(P, file, slot);
}

/* Runs the directive whose '#' is f->toks[f->pos]; leaves f->pos after its line. */
void pp_directive(pp *P, pp_file *f) {
    int h = f->pos;
    const nb_token *hash = &f->toks[h];
    int end = pp_line_end(f, h);
    f->pos = end;
    if (end == h + 1) return; /* `#` alone: the null directive */
    const nb_token *d = &f->toks[h + 1];
    int i = h + 2;
    char buf[64];
    if (pp_tok_is(d, "if") || pp_tok_is(d, "ifdef") || pp_tok_is(d, "ifndef")) {
        int v;
        if (pp_tok_is(d, "if")) {
            v = eval_if(P, f, i, end, hash);
        } else {
            if (i >= end || !pp_is_identlike(&f->toks[i])) {
                pp_spell(i < end ? &f->toks[i] : &P->eof, buf, sizeof buf);
                nb_diag_error(P->src, i < end ? f->toks[i].loc : d->loc, "expected a macro name after '#%.*s', found %s",
                              d->len, d->start, buf);
                v = 0;
            } else {
                int mi = pp_find_macro(P, f->toks[i].start, f->toks[i].len);
                v = mi >= 0 && P->macros[mi].defined;
                if (pp_tok_is(d, "ifndef")) v = !v;
            }
        }
        if (!push_cond(P, hash->loc, v)) return;
        if (!v) skip_group(f);
        return;
    }
    if (pp_tok_is(d, "elif") || pp_tok_is(d, "else") || pp_tok_is(d, "endif")) {
        if (P->nconds <= f->cond_base) {
            nb_diag_error(P->src, hash->loc, "'#%.*s' without '#if'", d->len, d->start);
            return;
        }
        pp_cond *c = &P->conds[P->nconds - 1];
        if (pp_tok_is(d, "endif")) {
            P->nconds--;
            return;
        }
        if (c->in_else) {
            nb_diag_error(P->src, hash->loc, "'#%.*s' after '#else'", d->len, d->start);
            nb_diag_note(P->src, c->loc, "the '#if' it belongs to");
            skip_group(f);
            return;
        }
        if (pp_tok_is(d, "else")) {
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
    if (pp_tok_is(d, "define")) {
        dir_define(P, f, i, end);
        return;
    }
    if (pp_tok_is(d, "undef")) {
        if (i >= end || !pp_is_identlike(&f->toks[i])) {
            pp_spell(i < end ? &f->toks[i] : &P->eof, buf, sizeof buf);
            nb_diag_error(P->src, i < end ? f->toks[i].loc : d->loc, "expected a macro name after '#undef', found %s", buf);
            return;
        }
        int mi = pp_find_macro(P, f->toks[i].start, f->toks[i].len);
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
    if (pp_tok_is(d, "include")) {
        dir_include(P, f, i, end, hash);
        return;
    }
    if (pp_tok_is(d, "pragma")) {
        if (i < end && pp_tok_is(&f->toks[i], "once")) {
            if (f->once_slot >= 0) P->seen[f->once_slot].once = 1;
        } else if (i < end && pp_tok_is(&f->toks[i], "warning")) {
            /* #pragma warning(...): Slang's warning control; nabla has none to adjust */
        } else {
            pp_spell(i < end ? &f->toks[i] : &P->eof, buf, sizeof buf);
            nb_diag_add(P->src, NB_DIAG_WARNING, i < end ? f->toks[i].loc : d->loc, "unknown '#pragma' %s ignored", buf);
        }
        return;
    }
    if (pp_tok_is(d, "error") || pp_tok_is(d, "warning")) {
        const char *s;
        int n;
        rest_of_line(f, h + 1, end, &s, &n);
        int err = pp_tok_is(d, "error");
        nb_diag_add(P->src, err ? NB_DIAG_ERROR : NB_DIAG_WARNING, hash->loc, "#%s%s%.*s", err ? "error" : "warning",
                    n ? ": " : "", n, s);
        return;
    }
    if (pp_tok_is(d, "line") || pp_tok_is(d, "version") || pp_tok_is(d, "extension") || pp_tok_is(d, "language") ||
        pp_tok_is(d, "lang"))
        return; /* accepted and ignored (locations stay those of the real file) */
    pp_spell(d, buf, sizeof buf);
    nb_diag_error(P->src, d->loc, "unknown preprocessor directive '#%.*s'", d->len > 40 ? 40 : d->len, d->start);
}

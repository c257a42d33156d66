/* Lexer for the kernel language (see lexer.h).
 *
 * One pass over the bytes of a file. Every problem is a diagnostic; lexing always reaches the end.
 * Malformed literals and stray characters become NB_TOK_ERROR tokens (the parser does not report
 * them again); unterminated comments produce no token at all. Token errors are kept in the
 * token (v.err) and reported by nb_lex, or later by the preprocessor (nb_lex_raw).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang/lexer.h"
#include "nabla/alloc.h"

typedef struct lexer {
    nb_source_set *src;
    int file;
    const char *text;
    size_t len;
    size_t i;          /* current byte */
    size_t line_start; /* byte offset of the current line */
    int line;
    nb_token *toks;
    int ntoks, cap;
    int oom;
    int bol, space;      /* the next token starts a logical line / follows blanks or a comment */
    nb_arena *arena;     /* for error messages */
    const char *err_msg; /* the pending error of the next NB_TOK_ERROR token */
    int err_col;
} lexer;

static const struct {
    const char *word;
    nb_tok_kind kind;
} keywords[] = {
    {"struct", NB_TOK_KW_STRUCT},     {"return", NB_TOK_KW_RETURN},     {"if", NB_TOK_KW_IF},
    {"else", NB_TOK_KW_ELSE},         {"for", NB_TOK_KW_FOR},           {"while", NB_TOK_KW_WHILE},
    {"do", NB_TOK_KW_DO},             {"break", NB_TOK_KW_BREAK},       {"continue", NB_TOK_KW_CONTINUE},
    {"switch", NB_TOK_KW_SWITCH},     {"case", NB_TOK_KW_CASE},         {"default", NB_TOK_KW_DEFAULT},
    {"true", NB_TOK_KW_TRUE},         {"false", NB_TOK_KW_FALSE},       {"in", NB_TOK_KW_IN},
    {"out", NB_TOK_KW_OUT},           {"inout", NB_TOK_KW_INOUT},       {"static", NB_TOK_KW_STATIC},
    {"const", NB_TOK_KW_CONST},       {"extern", NB_TOK_KW_EXTERN},     {"import", NB_TOK_KW_IMPORT},
    {"no_diff", NB_TOK_KW_NO_DIFF},   {"typedef", NB_TOK_KW_TYPEDEF},   {"typealias", NB_TOK_KW_TYPEALIAS},
    {"let", NB_TOK_KW_LET},           {"var", NB_TOK_KW_VAR},           {"public", NB_TOK_KW_PUBLIC},
    {"inline", NB_TOK_KW_INLINE},     {"this", NB_TOK_KW_THIS},
};

const char *nb_tok_name(nb_tok_kind k) {
    switch (k) {
    case NB_TOK_EOF: return "end of file";
    case NB_TOK_ERROR: return "invalid token";
    case NB_TOK_IDENT: return "identifier";
    case NB_TOK_INT: return "integer literal";
    case NB_TOK_FLOAT: return "floating-point literal";
    case NB_TOK_STRING: return "string literal";
    case NB_TOK_KW_STRUCT: return "'struct'";
    case NB_TOK_KW_RETURN: return "'return'";
    case NB_TOK_KW_IF: return "'if'";
    case NB_TOK_KW_ELSE: return "'else'";
    case NB_TOK_KW_FOR: return "'for'";
    case NB_TOK_KW_WHILE: return "'while'";
    case NB_TOK_KW_DO: return "'do'";
    case NB_TOK_KW_BREAK: return "'break'";
    case NB_TOK_KW_CONTINUE: return "'continue'";
    case NB_TOK_KW_SWITCH: return "'switch'";
    case NB_TOK_KW_CASE: return "'case'";
    case NB_TOK_KW_DEFAULT: return "'default'";
    case NB_TOK_KW_TRUE: return "'true'";
    case NB_TOK_KW_FALSE: return "'false'";
    case NB_TOK_KW_IN: return "'in'";
    case NB_TOK_KW_OUT: return "'out'";
    case NB_TOK_KW_INOUT: return "'inout'";
    case NB_TOK_KW_STATIC: return "'static'";
    case NB_TOK_KW_CONST: return "'const'";
    case NB_TOK_KW_EXTERN: return "'extern'";
    case NB_TOK_KW_IMPORT: return "'import'";
    case NB_TOK_KW_NO_DIFF: return "'no_diff'";
    case NB_TOK_KW_TYPEDEF: return "'typedef'";
    case NB_TOK_KW_TYPEALIAS: return "'typealias'";
    case NB_TOK_KW_LET: return "'let'";
    case NB_TOK_KW_VAR: return "'var'";
    case NB_TOK_KW_PUBLIC: return "'public'";
    case NB_TOK_KW_INLINE: return "'inline'";
    case NB_TOK_KW_THIS: return "'this'";
    case NB_TOK_LPAREN: return "'('";
    case NB_TOK_RPAREN: return "')'";
    case NB_TOK_LBRACE: return "'{'";
    case NB_TOK_RBRACE: return "'}'";
    case NB_TOK_LBRACKET: return "'['";
    case NB_TOK_RBRACKET: return "']'";
    case NB_TOK_SEMI: return "';'";
    case NB_TOK_COMMA: return "','";
    case NB_TOK_DOT: return "'.'";
    case NB_TOK_COLON: return "':'";
    case NB_TOK_COLONCOLON: return "'::'";
    case NB_TOK_QUESTION: return "'?'";
    case NB_TOK_PLUS: return "'+'";
    case NB_TOK_MINUS: return "'-'";
    case NB_TOK_STAR: return "'*'";
    case NB_TOK_SLASH: return "'/'";
    case NB_TOK_PERCENT: return "'%'";
    case NB_TOK_AMP: return "'&'";
    case NB_TOK_PIPE: return "'|'";
    case NB_TOK_CARET: return "'^'";
    case NB_TOK_TILDE: return "'~'";
    case NB_TOK_NOT: return "'!'";
    case NB_TOK_ANDAND: return "'&&'";
    case NB_TOK_OROR: return "'||'";
    case NB_TOK_SHL: return "'<<'";
    case NB_TOK_SHR: return "'>>'";
    case NB_TOK_LT: return "'<'";
    case NB_TOK_GT: return "'>'";
    case NB_TOK_LE: return "'<='";
    case NB_TOK_GE: return "'>='";
    case NB_TOK_EQ: return "'=='";
    case NB_TOK_NE: return "'!='";
    case NB_TOK_ASSIGN: return "'='";
    case NB_TOK_PLUS_ASSIGN: return "'+='";
    case NB_TOK_MINUS_ASSIGN: return "'-='";
    case NB_TOK_STAR_ASSIGN: return "'*='";
    case NB_TOK_SLASH_ASSIGN: return "'/='";
    case NB_TOK_PERCENT_ASSIGN: return "'%='";
    case NB_TOK_AMP_ASSIGN: return "'&='";
    case NB_TOK_PIPE_ASSIGN: return "'|='";
    case NB_TOK_CARET_ASSIGN: return "'^='";
    case NB_TOK_SHL_ASSIGN: return "'<<='";
    case NB_TOK_SHR_ASSIGN: return "'>>='";
    case NB_TOK_INC: return "'++'";
    case NB_TOK_DEC: return "'--'";
    case NB_TOK_ARROW: return "'->'";
    case NB_TOK_HASH: return "'#'";
    case NB_TOK_HASHHASH: return "'##'";
    case NB_TOK_DOLLAR: return "'$'";
    case NB_TOK_COUNT: break;
    }
    return "unknown token";
}

static nb_loc loc_at(const lexer *lx, size_t offset) {
    nb_loc l = {lx->file, lx->line, (int)(offset - lx->line_start) + 1};
    return l;
}

static nb_token *push(lexer *lx, nb_tok_kind kind, size_t start, size_t end) {
    if (lx->ntoks == lx->cap) {
        int cap = lx->cap ? lx->cap * 2 : 256;
        nb_token *nt = nb_alloc(sizeof(nb_token) * (size_t)cap, 16);
        if (!nt) {
            lx->oom = 1;
            return NULL;
        }
        if (lx->toks) memcpy(nt, lx->toks, sizeof(nb_token) * (size_t)lx->ntoks);
        nb_free(lx->toks, sizeof(nb_token) * (size_t)lx->cap);
        lx->toks = nt;
        lx->cap = cap;
    }
    nb_token *t = &lx->toks[lx->ntoks++];
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->loc = loc_at(lx, start);
    t->start = lx->text + start;
    t->len = (int)(end - start);
    t->flags = (lx->bol ? NB_TOKF_BOL : 0) | (lx->space ? NB_TOKF_SPACE : 0);
    lx->bol = lx->space = 0;
    if (kind == NB_TOK_ERROR) {
        t->v.err.msg = lx->err_msg;
        t->v.err.col = lx->err_msg ? lx->err_col : t->loc.col;
        lx->err_msg = NULL;
    }
    return t;
}

/* Records the error of the NB_TOK_ERROR token pushed next (the first one, if several). */
static void lex_err(lexer *lx, nb_loc at, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void lex_err(lexer *lx, nb_loc at, const char *fmt, ...) {
    if (lx->err_msg) return;
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    size_t n = strlen(buf);
    char *m = nb_arena_alloc(lx->arena, n + 1, 1);
    if (!m) {
        lx->oom = 1;
        return;
    }
    memcpy(m, buf, n + 1);
    lx->err_msg = m;
    lx->err_col = at.col;
}

void nb_lex_report(nb_source_set *src, const nb_token *t) {
    if (!t || t->kind != NB_TOK_ERROR || !t->v.err.msg) return;
    nb_loc at = t->loc;
    at.col = t->v.err.col;
    nb_diag_error(src, at, "%s", t->v.err.msg);
}

/* ASCII-only classes (the <ctype.h> ones depend on the host program's locale). */
static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_xdigit(int c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static int is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static int lower(int c) { return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c; }
static int is_ident_start(int c) { return is_alpha(c) || c == '_'; }
static int is_ident_char(int c) { return is_alpha(c) || is_digit(c) || c == '_'; }

static void newline(lexer *lx, size_t at) { /* text[at] == '\n' */
    lx->line++;
    lx->line_start = at + 1;
}

/* Skips whitespace, comments and backslash-newlines, noting line starts and blanks. */
static void skip_trivia(lexer *lx) {
    const char *t = lx->text;
    while (lx->i < lx->len) {
        char c = t[lx->i];
        if (c == '\n') {
            newline(lx, lx->i);
            lx->i++;
            lx->bol = lx->space = 1;
        } else if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') {
            lx->i++;
            lx->space = 1;
        } else if (c == '\\' && (lx->i + 1 < lx->len && (t[lx->i + 1] == '\n' ||
                   (t[lx->i + 1] == '\r' && lx->i + 2 < lx->len && t[lx->i + 2] == '\n')))) {
            /* a line continuation: the logical line goes on */
            lx->i += t[lx->i + 1] == '\r' ? 2 : 1;
            newline(lx, lx->i);
            lx->i++;
            lx->space = 1;
        } else if (c == '/' && lx->i + 1 < lx->len && t[lx->i + 1] == '/') {
            while (lx->i < lx->len && t[lx->i] != '\n') lx->i++;
            lx->space = 1;
        } else if (c == '/' && lx->i + 1 < lx->len && t[lx->i + 1] == '*') {
            nb_loc start = loc_at(lx, lx->i);
            lx->i += 2;
            int closed = 0;
            while (lx->i < lx->len) {
                if (t[lx->i] == '*' && lx->i + 1 < lx->len && t[lx->i + 1] == '/') {
                    lx->i += 2;
                    closed = 1;
                    break;
                }
                if (t[lx->i] == '\n') newline(lx, lx->i);
                lx->i++;
            }
            lx->space = 1;
            if (!closed) nb_diag_error(lx->src, start, "unterminated block comment");
        } else {
            return;
        }
    }
}

static int suffix_is(const char *s, size_t n, const char *const *ok) {
    for (int k = 0; ok[k]; k++) {
        size_t m = strlen(ok[k]);
        if (m != n) continue;
        size_t j = 0;
        while (j < n && lower((unsigned char)s[j]) == ok[k][j]) j++;
        if (j == n) return 1;
    }
    return 0;
}

/* Lexes a number starting at lx->i (a digit, or '.' followed by a digit). */
static void lex_number(lexer *lx) {
    const char *t = lx->text;
    size_t start = lx->i, i = lx->i, n = lx->len;
    nb_loc at = loc_at(lx, start);
    int is_float = 0, bad = 0;
    int base = 10;
    size_t digits_start, digits_end;
    if (t[i] == '0' && i + 1 < n && (t[i + 1] == 'x' || t[i + 1] == 'X')) {
        base = 16;
        i += 2;
        digits_start = i;
        while (i < n && is_xdigit((unsigned char)t[i])) i++;
        digits_end = i;
        if (digits_end == digits_start) {
            lex_err(lx, at, "expected hexadecimal digits after '0x'");
            bad = 1;
        }
    } else if (t[i] == '0' && i + 1 < n && (t[i + 1] == 'b' || t[i + 1] == 'B') && i + 2 < n &&
               (t[i + 2] == '0' || t[i + 2] == '1')) {
        base = 2;
        i += 2;
        digits_start = i;
        while (i < n && (t[i] == '0' || t[i] == '1')) i++;
        digits_end = i;
    } else {
        digits_start = i;
        while (i < n && is_digit((unsigned char)t[i])) i++;
        if (i < n && t[i] == '.') {
            is_float = 1;
            i++;
            while (i < n && is_digit((unsigned char)t[i])) i++;
        }
        if (i < n && (t[i] == 'e' || t[i] == 'E')) {
            size_t e = i + 1;
            if (e < n && (t[e] == '+' || t[e] == '-')) e++;
            if (e < n && is_digit((unsigned char)t[e])) {
                is_float = 1;
                i = e;
                while (i < n && is_digit((unsigned char)t[i])) i++;
            } else {
                lex_err(lx, loc_at(lx, i), "exponent has no digits");
                is_float = 1;
                bad = 1;
                i = e;
            }
        }
        digits_end = i;
        if (!is_float && digits_end - digits_start > 1 && t[digits_start] == '0') base = 8;
    }
    size_t num_end = i;
    while (i < n && is_ident_char((unsigned char)t[i])) i++;
    const char *suf = t + num_end;
    size_t sufn = i - num_end;
    static const char *const int_suffixes[] = {"", "u", "l", "ul", "lu", "ll", "ull", "llu", NULL};
    static const char *const float_suffixes[] = {"", "f", "h", "l", "lf", NULL};
    if (!bad && !suffix_is(suf, sufn, is_float ? float_suffixes : int_suffixes)) {
        lex_err(lx, loc_at(lx, num_end), "invalid suffix '%.*s' on %s literal",
                      (int)(sufn > 40 ? 40 : sufn), suf, is_float ? "floating-point" : "integer");
        bad = 1;
    }
    if (bad) {
        push(lx, NB_TOK_ERROR, start, i);
        lx->i = i;
        return;
    }
    if (is_float) {
        char small[128];
        size_t m = num_end - start;
        char *buf = m < sizeof small ? small : nb_alloc(m + 1, 16);
        double v = 0;
        if (buf) {
            memcpy(buf, t + start, m);
            buf[m] = '\0';
            v = strtod(buf, NULL);
            if (buf != small) nb_free(buf, m + 1);
        }
        if (isinf(v)) {
            lex_err(lx, at, "floating-point literal too large");
            push(lx, NB_TOK_ERROR, start, i);
            lx->i = i;
            return;
        }
        nb_token *tok = push(lx, NB_TOK_FLOAT, start, i);
        if (tok) {
            tok->v.f.value = v;
            tok->v.f.suffix = 0;
            if (sufn) tok->v.f.suffix = lower((unsigned char)suf[0]);
        }
        lx->i = i;
        return;
    }
    uint64_t v = 0;
    int overflow = 0;
    for (size_t k = digits_start; k < digits_end; k++) {
        int c = (unsigned char)t[k];
        int d = is_digit(c) ? c - '0' : lower(c) - 'a' + 10;
        if (d >= base) {
            lex_err(lx, loc_at(lx, k), "invalid digit '%c' in octal literal", c);
            push(lx, NB_TOK_ERROR, start, i);
            lx->i = i;
            return;
        }
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) overflow = 1;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    if (overflow) {
        lex_err(lx, at, "integer literal too large");
        push(lx, NB_TOK_ERROR, start, i);
        lx->i = i;
        return;
    }
    nb_token *tok = push(lx, NB_TOK_INT, start, i);
    if (tok) {
        tok->v.i.value = v;
        tok->v.i.is_unsigned = memchr(suf, 'u', sufn) || memchr(suf, 'U', sufn);
    }
    lx->i = i;
}

static void lex_string(lexer *lx) {
    const char *t = lx->text;
    size_t start = lx->i, i = lx->i + 1;
    while (i < lx->len && t[i] != '"' && t[i] != '\n') {
        if (t[i] == '\\' && i + 1 < lx->len && t[i + 1] != '\n') i++;
        i++;
    }
    if (i >= lx->len || t[i] != '"') {
        lex_err(lx, loc_at(lx, start), "unterminated string literal");
        push(lx, NB_TOK_ERROR, start, i);
        lx->i = i;
        return;
    }
    push(lx, NB_TOK_STRING, start, i + 1);
    lx->i = i + 1;
}

/* Length of a valid UTF-8 sequence at s (max n bytes) and its code point, or 0. */
static int utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    int len;
    uint32_t c;
    if (s[0] >= 0xC2 && s[0] <= 0xDF) len = 2, c = s[0] & 0x1Fu;
    else if (s[0] >= 0xE0 && s[0] <= 0xEF) len = 3, c = s[0] & 0x0Fu;
    else if (s[0] >= 0xF0 && s[0] <= 0xF4) len = 4, c = s[0] & 0x07u;
    else return 0;
    if ((size_t)len > n) return 0;
    for (int k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (s[k] & 0x3Fu);
    }
    if ((len == 3 && c < 0x800) || (len == 4 && (c < 0x10000 || c > 0x10FFFF)) || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    return len;
}

static void lex_invalid(lexer *lx) {
    const unsigned char *s = (const unsigned char *)lx->text + lx->i;
    nb_loc at = loc_at(lx, lx->i);
    size_t n = 1;
    uint32_t cp;
    int ulen;
    if (s[0] >= 0x20 && s[0] < 0x7F) {
        lex_err(lx, at, "invalid character '%c'", s[0]);
    } else if (s[0] >= 0x80 && (ulen = utf8_decode(s, lx->len - lx->i, &cp)) > 0) {
        n = (size_t)ulen;
        lex_err(lx, at, "invalid character '%.*s' (U+%04X)", ulen, (const char *)s, (unsigned)cp);
    } else {
        lex_err(lx, at, "invalid character '\\x%02X'", s[0]);
    }
    push(lx, NB_TOK_ERROR, lx->i, lx->i + n);
    lx->i += n;
}

/* Operators and punctuation, longest first within each leading character. */
static const struct {
    const char *text;
    nb_tok_kind kind;
} puncts[] = {
    {"<<=", NB_TOK_SHL_ASSIGN}, {">>=", NB_TOK_SHR_ASSIGN}, {"::", NB_TOK_COLONCOLON},
    {"&&", NB_TOK_ANDAND},      {"||", NB_TOK_OROR},        {"<<", NB_TOK_SHL},
    {">>", NB_TOK_SHR},         {"<=", NB_TOK_LE},          {">=", NB_TOK_GE},
    {"==", NB_TOK_EQ},          {"!=", NB_TOK_NE},          {"+=", NB_TOK_PLUS_ASSIGN},
    {"-=", NB_TOK_MINUS_ASSIGN}, {"*=", NB_TOK_STAR_ASSIGN}, {"/=", NB_TOK_SLASH_ASSIGN},
    {"%=", NB_TOK_PERCENT_ASSIGN}, {"&=", NB_TOK_AMP_ASSIGN}, {"|=", NB_TOK_PIPE_ASSIGN},
    {"^=", NB_TOK_CARET_ASSIGN}, {"++", NB_TOK_INC},        {"--", NB_TOK_DEC},
    {"->", NB_TOK_ARROW},       {"##", NB_TOK_HASHHASH},    {"#", NB_TOK_HASH},
    {"$", NB_TOK_DOLLAR},
    {"(", NB_TOK_LPAREN},       {")", NB_TOK_RPAREN},
    {"{", NB_TOK_LBRACE},       {"}", NB_TOK_RBRACE},       {"[", NB_TOK_LBRACKET},
    {"]", NB_TOK_RBRACKET},     {";", NB_TOK_SEMI},         {",", NB_TOK_COMMA},
    {".", NB_TOK_DOT},          {":", NB_TOK_COLON},        {"?", NB_TOK_QUESTION},
    {"+", NB_TOK_PLUS},         {"-", NB_TOK_MINUS},        {"*", NB_TOK_STAR},
    {"/", NB_TOK_SLASH},        {"%", NB_TOK_PERCENT},      {"&", NB_TOK_AMP},
    {"|", NB_TOK_PIPE},         {"^", NB_TOK_CARET},        {"~", NB_TOK_TILDE},
    {"!", NB_TOK_NOT},          {"<", NB_TOK_LT},           {">", NB_TOK_GT},
    {"=", NB_TOK_ASSIGN},
};

nb_token *nb_lex_text(nb_source_set *src, int file, const char *text, size_t len, nb_arena *arena, int *count) {
    if (count) *count = 0;
    if (!src || !arena) return NULL;
    lexer lx;
    memset(&lx, 0, sizeof lx);
    lx.src = src;
    lx.file = file;
    lx.line = 1;
    lx.bol = 1;
    lx.arena = arena;
    lx.text = text ? text : "";
    lx.len = text ? len : 0;
    const char *t = lx.text;
    for (;;) {
        skip_trivia(&lx);
        if (lx.i >= lx.len || lx.oom) break;
        unsigned char c = (unsigned char)t[lx.i];
        if (is_ident_start(c)) {
            size_t s = lx.i;
            while (lx.i < lx.len && is_ident_char((unsigned char)t[lx.i])) lx.i++;
            nb_tok_kind kind = NB_TOK_IDENT;
            size_t n = lx.i - s;
            for (size_t k = 0; k < sizeof keywords / sizeof keywords[0]; k++) {
                /* (no strlen: this runs for every identifier) */
                const char *w = keywords[k].word;
                if (w[0] != t[s]) continue;
                size_t j = 1;
                while (j < n && w[j] == t[s + j]) j++; /* stops at w's NUL: t[s + j] is never NUL */
                if (j == n && w[n] == '\0') {
                    kind = keywords[k].kind;
                    break;
                }
            }
            push(&lx, kind, s, lx.i);
            continue;
        }
        if (is_digit(c) || (c == '.' && lx.i + 1 < lx.len && is_digit((unsigned char)t[lx.i + 1]))) {
            lex_number(&lx);
            continue;
        }
        if (c == '"') {
            lex_string(&lx);
            continue;
        }
        int matched = 0;
        for (size_t k = 0; k < sizeof puncts / sizeof puncts[0]; k++) {
            const char *pt = puncts[k].text;
            if (pt[0] != t[lx.i]) continue;
            size_t n = pt[1] ? (pt[2] ? 3 : 2) : 1;
            if (n <= lx.len - lx.i && memcmp(pt, t + lx.i, n) == 0) {
                push(&lx, puncts[k].kind, lx.i, lx.i + n);
                lx.i += n;
                matched = 1;
                break;
            }
        }
        if (!matched) lex_invalid(&lx);
    }
    nb_token *eof = lx.oom ? NULL : push(&lx, NB_TOK_EOF, lx.len, lx.len);
    nb_token *out = NULL;
    if (eof) out = nb_arena_alloc(arena, sizeof(nb_token) * (size_t)lx.ntoks, 16);
    if (out) {
        memcpy(out, lx.toks, sizeof(nb_token) * (size_t)lx.ntoks);
        if (count) *count = lx.ntoks;
    } else {
        nb_loc at = {file, 1, 1};
        nb_diag_error(src, at, "out of memory while reading the source");
    }
    nb_free(lx.toks, sizeof(nb_token) * (size_t)lx.cap);
    return out;
}

nb_token *nb_lex_raw(nb_source_set *src, int file, nb_arena *arena, int *count) {
    if (count) *count = 0;
    if (!src) return NULL;
    if (file >= 0 && file < src->nfiles)
        return nb_lex_text(src, file, src->files[file].text, src->files[file].len, arena, count);
    return nb_lex_text(src, -1, "", 0, arena, count);
}

nb_token *nb_lex(nb_source_set *src, int file, nb_arena *arena, int *count) {
    int n = 0;
    nb_token *t = nb_lex_raw(src, file, arena, &n);
    for (int i = 0; t && i < n; i++) nb_lex_report(src, &t[i]);
    if (count) *count = n;
    return t;
}

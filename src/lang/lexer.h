/* Tokens of the kernel language (a Slang/HLSL subset with C-like lexical rules). */
#ifndef NB_LANG_LEXER_H
#define NB_LANG_LEXER_H

#include <stdint.h>

#include "core/arena.h"
#include "lang/source.h"

typedef enum nb_tok_kind {
    NB_TOK_EOF = 0,
    NB_TOK_ERROR,     /* a bad character or malformed literal; already diagnosed */
    NB_TOK_IDENT,
    NB_TOK_INT,       /* 12, 0x1F, 12u, 12U */
    NB_TOK_FLOAT,     /* 1.0, 1., .5, 1e3, 1.0f, 1.0h, 1.0l */
    NB_TOK_STRING,    /* "…" (import paths, attributes) */
    /* keywords */
    NB_TOK_KW_STRUCT, NB_TOK_KW_RETURN, NB_TOK_KW_IF, NB_TOK_KW_ELSE, NB_TOK_KW_FOR,
    NB_TOK_KW_WHILE, NB_TOK_KW_DO, NB_TOK_KW_BREAK, NB_TOK_KW_CONTINUE, NB_TOK_KW_SWITCH,
    NB_TOK_KW_CASE, NB_TOK_KW_DEFAULT, NB_TOK_KW_TRUE, NB_TOK_KW_FALSE, NB_TOK_KW_IN,
    NB_TOK_KW_OUT, NB_TOK_KW_INOUT, NB_TOK_KW_STATIC, NB_TOK_KW_CONST, NB_TOK_KW_EXTERN,
    NB_TOK_KW_IMPORT, NB_TOK_KW_NO_DIFF, NB_TOK_KW_TYPEDEF, NB_TOK_KW_TYPEALIAS, NB_TOK_KW_LET,
    NB_TOK_KW_VAR, NB_TOK_KW_PUBLIC, NB_TOK_KW_INLINE, NB_TOK_KW_THIS,
    /* punctuation and operators */
    NB_TOK_LPAREN, NB_TOK_RPAREN, NB_TOK_LBRACE, NB_TOK_RBRACE, NB_TOK_LBRACKET, NB_TOK_RBRACKET,
    NB_TOK_SEMI, NB_TOK_COMMA, NB_TOK_DOT, NB_TOK_COLON, NB_TOK_COLONCOLON, NB_TOK_QUESTION,
    NB_TOK_PLUS, NB_TOK_MINUS, NB_TOK_STAR, NB_TOK_SLASH, NB_TOK_PERCENT,
    NB_TOK_AMP, NB_TOK_PIPE, NB_TOK_CARET, NB_TOK_TILDE, NB_TOK_NOT,
    NB_TOK_ANDAND, NB_TOK_OROR, NB_TOK_SHL, NB_TOK_SHR,
    NB_TOK_LT, NB_TOK_GT, NB_TOK_LE, NB_TOK_GE, NB_TOK_EQ, NB_TOK_NE,
    NB_TOK_ASSIGN, NB_TOK_PLUS_ASSIGN, NB_TOK_MINUS_ASSIGN, NB_TOK_STAR_ASSIGN,
    NB_TOK_SLASH_ASSIGN, NB_TOK_PERCENT_ASSIGN, NB_TOK_AMP_ASSIGN, NB_TOK_PIPE_ASSIGN,
    NB_TOK_CARET_ASSIGN, NB_TOK_SHL_ASSIGN, NB_TOK_SHR_ASSIGN,
    NB_TOK_INC, NB_TOK_DEC, NB_TOK_ARROW,
    NB_TOK_HASH, NB_TOK_HASHHASH, /* `#` `##`: directives and macro bodies (preproc.c) */
    NB_TOK_DOLLAR,                /* `$`: only in other targets' code (`spirv_asm { … $x }` in a
                                     skipped __target_switch case); a parse error anywhere else */
    NB_TOK_COUNT
} nb_tok_kind;

/* nb_token.flags */
enum {
    NB_TOKF_BOL = 1,      /* first token of its logical line (backslash-newline continues a line) */
    NB_TOKF_SPACE = 2,    /* whitespace or a comment precedes it */
    NB_TOKF_NOEXPAND = 4, /* preprocessor: an identifier that must never be macro-expanded again
                             (it named a macro being expanded: C's "painted blue" rule) */
    NB_TOKF_REPORTED = 8, /* preprocessor: an NB_TOK_ERROR whose error was reported */
};

typedef struct nb_token {
    nb_tok_kind kind;
    nb_loc loc;
    const char *start; /* into the source text (or arena text made by the preprocessor) */
    int len;
    int flags;         /* NB_TOKF_* */
    union {
        struct { uint64_t value; int is_unsigned; } i;
        struct { double value; int suffix; /* 0 none, 'f', 'h', 'l' */ } f;
        struct { const char *msg; int col; } err; /* NB_TOK_ERROR from nb_lex_raw: not yet reported */
    } v;
} nb_token;

/* Splits file `file` of the source set into tokens (arena-allocated array ending with EOF).
 * Lexical errors become diagnostics and NB_TOK_ERROR tokens; lexing never stops early.
 * Comments (// and block) and whitespace are skipped. `#` and `##` are tokens (NB_TOK_HASH with
 * NB_TOKF_BOL starts a directive); the preprocessor (preproc.h) runs over this stream. */
nb_token *nb_lex(nb_source_set *src, int file, nb_arena *arena, int *count);

/* The same, but the errors of NB_TOK_ERROR tokens are not reported: each keeps its message in
 * v.err (column v.err.col on the token's line) for nb_lex_report, so the preprocessor reports
 * only those outside skipped `#if` groups and `#error` lines. Unterminated block comments are
 * reported at once. `text` may be any buffer living as long as the tokens (file gives the
 * locations; -1 for text made by the preprocessor). */
nb_token *nb_lex_raw(nb_source_set *src, int file, nb_arena *arena, int *count);
nb_token *nb_lex_text(nb_source_set *src, int file, const char *text, size_t len, nb_arena *arena, int *count);
/* Reports a deferred NB_TOK_ERROR of nb_lex_raw (no-op for other tokens). */
void nb_lex_report(nb_source_set *src, const nb_token *t);

const char *nb_tok_name(nb_tok_kind k); /* "'+='", "identifier", "end of file" */

#endif

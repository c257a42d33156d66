/* Private to the parser (parser.c, parser_core.c, parser_expr.c, parser_stmt.c, …). */
#ifndef NB_LANG_PARSER_IMPL_H
#define NB_LANG_PARSER_IMPL_H

#include <setjmp.h>

#include "lang/lexer.h"
#include "lang/parser.h"

#define NB_PARSE_MAX_DEPTH 512

/* A set of names (open addressing, arena-backed). */
typedef struct nb_nameset {
    const char **slots;
    int cap, count;
} nb_nameset;

/* Growable pointer array in the arena (old storage is simply abandoned). */
typedef struct nb_pvec {
    void **items;
    int n, cap;
} nb_pvec;

typedef struct nb_parser {
    nb_source_set *src;
    int file;
    nb_arena *arena;
    nb_module_ast *mod;
    nb_token *toks;
    int ntoks;
    int pos;
    int split_gt;    /* the current token is '>>' whose first '>' was consumed */
    int spec;        /* > 0 while speculating: errors are not reported */
    int spec_failed; /* an error happened while speculating */
    int panic;       /* an error was reported; further ones are dropped until resync */
    int stop;        /* too many errors or too deep: behave as if at end of file */
    int depth;
    int oom;
    jmp_buf oom_jmp; /* arena out of memory */
    nb_nameset types;    /* known type names */
    nb_nameset generics; /* known generic type names */
} nb_parser;

typedef struct nb_pstate {
    int pos, split_gt;
} nb_pstate;

/* parser_core.c: tokens, errors, allocation, known names */
void np_prescan(nb_parser *p); /* records the file's type and generic names before parsing */
void np_nameset_add(nb_parser *p, nb_nameset *s, const char *name, size_t n);
int np_is_builtin_type_name(const char *s, size_t n);
int np_tok_is(const nb_token *t, const char *word); /* an identifier spelled `word` */
void *np_alloc(nb_parser *p, size_t size);
const char *np_strndup(nb_parser *p, const char *s, size_t n);
void np_push(nb_parser *p, nb_pvec *v, void *x);
void **np_finish(nb_parser *p, const nb_pvec *v); /* exact-size copy (NULL when empty) */
const nb_token *np_cur(nb_parser *p);
const nb_token *np_peek(nb_parser *p, int k); /* k-th token after the current one (raw) */
nb_tok_kind np_kind(nb_parser *p);
nb_tok_kind np_peek_kind(nb_parser *p, int k);
nb_loc np_loc(nb_parser *p);
nb_loc np_prev_end(nb_parser *p); /* just after the previous token */
void np_advance(nb_parser *p);
int np_accept(nb_parser *p, nb_tok_kind k);
const char *np_tok_text(nb_parser *p); /* identifier text of the current token (arena copy) */
void np_describe(nb_parser *p, const nb_token *t, char *buf, size_t n); /* "'foo'", "end of file" */
void np_error_at(nb_parser *p, nb_loc loc, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Reports at the current token, unless that token is an already-diagnosed NB_TOK_ERROR. */
void np_error_here(nb_parser *p, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* "expected X to close Y opened at L:C" when missing; returns 1 if found (and consumed). */
int np_expect_close(nb_parser *p, nb_tok_kind close, nb_loc open);
/* Missing ';': reported just after the previous token; panic only if the line goes on. */
int np_expect_semi(nb_parser *p, const char *after);
int np_enter(nb_parser *p); /* depth guard: 0 when too deep (parsing stops) */
void np_leave(nb_parser *p);
nb_pstate np_save(nb_parser *p);
void np_restore(nb_parser *p, nb_pstate s);
void np_sync(nb_parser *p); /* skip to after `;` / a closed `{…}`, or before an unmatched `}` */
/* parser.c: declarators after a type: name [dims] [= init] {, name [dims] [= init]} ; -> NB_DECL_VARs. */
void np_parse_var_declarators(nb_parser *p, nb_pvec *out, nb_attr_list attrs, unsigned mods,
                              nb_type_expr *t, nb_loc loc, const char *name, int global);
int np_is_type_name(nb_parser *p, const nb_token *t);
int np_is_generic_name(nb_parser *p, const nb_token *t);

/* parser_expr.c */
nb_expr *np_new_expr(nb_parser *p, nb_expr_kind kind, nb_loc loc);
nb_expr *np_parse_expr(nb_parser *p);        /* assignment expression (no comma) */
nb_expr *np_parse_comma_expr(nb_parser *p);  /* for-loop init/step */
nb_expr *np_parse_ternary(nb_parser *p);     /* conditional expression (case labels) */
nb_expr *np_parse_generic_value(nb_parser *p); /* above relational/shift: `<let N : int = 2>` */
nb_type_expr *np_parse_type(nb_parser *p, int allow_array);
nb_type_expr *np_type_with_dims(nb_parser *p, const nb_type_expr *base, nb_pvec *dims);
void np_parse_dims(nb_parser *p, nb_pvec *dims); /* [N][M]… (empty `[]` -> NULL entry) */
nb_attr_list np_parse_attrs(nb_parser *p);

/* parser_stmt.c */
nb_stmt *np_parse_stmt(nb_parser *p);
nb_stmt *np_parse_block(nb_parser *p);
int np_is_decl_start(nb_parser *p);
nb_stmt *np_parse_local_decl(nb_parser *p, nb_attr_list attrs);
/* parser_target.c: __target_switch / __intrinsic_asm / __requirePrelude at the current token,
 * or NULL (nothing consumed) when it is none of them. */
nb_stmt *np_parse_target_stmt(nb_parser *p, nb_loc loc);
nb_attr *np_parse_target_intrinsic(nb_parser *p);           /* `__target_intrinsic(t, "…")` */
void np_apply_target_intrinsics(nb_parser *p, nb_decl *fn); /* its body for those attributes */

/* parser_enum.c: `enum [class] [Name] [: T] { A, B = 2 }` (at `enum`, np_at_enum) */
int np_at_enum(nb_parser *p);
void np_parse_enum(nb_parser *p, nb_pvec *out, nb_attr_list attrs, unsigned mods);
/* parser_namespace.c: `namespace A.B { … }` (its declarations renamed "A.B.x", appended to out)
 * and `using [namespace] A.B;` (at np_at_namespace) */
int np_at_namespace(nb_parser *p);
void np_parse_namespace(nb_parser *p, nb_pvec *out, void (*parse_toplevel)(nb_parser *, nb_pvec *));

#endif

/* Private to the preprocessor (preproc.c: token stacks, macro expansion, the module;
 * preproc_dir.c: directives and #if expressions): its state and the functions they share. */
#ifndef NB_LANG_PREPROC_INTERNAL_H
#define NB_LANG_PREPROC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "lang/preproc.h"

#define PP_MAX_INCLUDE_DEPTH 64
#define PP_MAX_EXPAND_DEPTH 256      /* nested argument pre-expansions */
#define PP_MAX_EXPANDED 1000000      /* tokens produced by macros in one module (exponential bodies) */
#define PP_MAX_INCLUDES 20000        /* #include operations in one module (a file including itself
                                        twice without guards would double at every level) */

/* growable token list (heap) */
typedef struct tokvec {
    nb_token *t;
    int n, cap;
} tokvec;

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

/* preproc.c: token lists, the macro table, small helpers, expansion */
int pp_tv_push(tokvec *v, const nb_token *t);
void pp_tv_free(tokvec *v);
int pp_is_identlike(const nb_token *t); /* an identifier or a keyword (macro names) */
int pp_tok_is(const nb_token *t, const char *word);
int pp_find_macro(const pp *P, const char *s, int n); /* index, or -1 */
int pp_macro_slot(pp *P, const char *s, int n);      /* index of a new or existing slot, -1 out of memory */
const char *pp_file_path(const pp *P, int file);
int pp_line_end(const pp_file *f, int from);
void pp_spell(const nb_token *t, char *buf, size_t n);
void pp_expand_list(pp *P, const nb_token *in, int n, tokvec *out);

/* preproc_dir.c: directives */
char *pp_canonical(const char *path);
int pp_add_seen(pp *P, char *canon, int file);
int pp_push_file(pp *P, int file, int slot);
void pp_directive(pp *P, pp_file *f); /* at the `#` of a directive line in f */

#endif

/* Source files, locations and diagnostics for the kernel language.
 *
 * A nb_source_set owns the text of every file of one compilation (the main file and its
 * imports), each with a line table. Diagnostics are collected (several per run) and rendered as
 *
 *   square.nb:3:12: error: cannot convert 'float3' to 'float'
 *       return v;
 *              ^
 *
 * The compiler never aborts on bad source: every problem is a diagnostic.
 */
#ifndef NB_LANG_SOURCE_H
#define NB_LANG_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "core/strbuf.h"
#include "nabla/status.h"

typedef struct nb_loc {
    int file;  /* index into the source set; -1 = no location */
    int line;  /* 1-based */
    int col;   /* 1-based, in bytes */
} nb_loc;

typedef struct nb_source_file {
    char *path;        /* as given (used in messages) */
    char *name;        /* module name: file stem */
    char *text;        /* NUL-terminated contents */
    size_t len;
    uint32_t *line_starts; /* byte offset of each line's first character */
    int nlines;
    nb_loc included_from;  /* the `#include` that first read it (file -1: none); diagnostics in
                              the file get "note: in the file included from here" */
} nb_source_file;

typedef enum nb_diag_level { NB_DIAG_NOTE, NB_DIAG_WARNING, NB_DIAG_ERROR } nb_diag_level;

typedef struct nb_diag {
    nb_diag_level level;
    nb_loc loc;
    char *msg;
} nb_diag;

/* A macro expansion (preproc.c): tokens of the macro's body carry the location `at` of the
 * invocation (the user's line); a diagnostic at `at` gets a note pointing at the definition. */
typedef struct nb_macro_site {
    nb_loc at;        /* where the macro was invoked */
    nb_loc def;       /* its #define (the name) */
    const char *name; /* into the defining file's text */
    int nlen;
} nb_macro_site;

typedef struct nb_source_set {
    nb_source_file *files;
    int nfiles, cap_files;
    nb_diag *diags;
    int ndiags, cap_diags;
    int nerrors;
    int max_errors; /* stop collecting after this many errors (default 50) */
    const char **search_paths; /* directories searched by `import` and `#include` (in order) */
    int nsearch;
    /* ---- preprocessor (preproc.h) ---- */
    const char *const *defines; /* host defines "NAME" or "NAME=VALUE" (borrowed) */
    int ndefines;
    const struct nb_source_set *prev; /* an earlier set whose file texts #include may reuse
                                         (borrowed; rebuilds read the same text again) */
    int prelude_file;           /* 1 + index of the "<command-line>" file of the defines; 0 none */
    nb_macro_site *sites;       /* macro expansions, for "in expansion of macro" notes */
    int nsites, cap_sites;
} nb_source_set;

void nb_source_set_init(nb_source_set *s);
void nb_source_set_free(nb_source_set *s);

/* Adds a file from memory (the text is copied). Returns its index, or -1 on out of memory. */
int nb_source_add(nb_source_set *s, const char *path, const char *text, size_t len);
/* Reads and adds a file; NB_ERR_IO naming the path and errno text if it cannot be read. */
nb_status nb_source_load(nb_source_set *s, const char *path, int *out_index);
nb_status nb_source_add_search_path(nb_source_set *s, const char *dir);

/* Records a diagnostic (printf-style). Returns NB_ERR_COMPILE for errors, NB_OK otherwise, so
 * callers may `return nb_diag_error(...)`. Every error is counted in `nerrors`, but only the first
 * `max_errors` are kept (rendering then says how many more there were); notes and warnings that
 * follow a dropped error are dropped with it. Out of memory while recording is counted too. */
nb_status nb_diag_add(nb_source_set *s, nb_diag_level level, nb_loc loc, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
#define nb_diag_error(s, loc, ...) nb_diag_add((s), NB_DIAG_ERROR, (loc), __VA_ARGS__)
#define nb_diag_note(s, loc, ...) nb_diag_add((s), NB_DIAG_NOTE, (loc), __VA_ARGS__)

/* Records a macro expansion site (out of memory: silently dropped; notes are a courtesy). */
void nb_source_add_macro_site(nb_source_set *s, nb_loc at, nb_loc def, const char *name, int nlen);

/* Renders every diagnostic with file:line:col, the source line and a caret:
 *   path:LINE:COL: error: MESSAGE\n<source line>\n<spaces (tabs kept)>^\n
 * A diagnostic without a location (file -1) renders as "error: MESSAGE\n". */
void nb_diag_render(const nb_source_set *s, nb_strbuf *out);
/* Fails with NB_ERR_COMPILE and the rendered diagnostics as nb_last_error() if any error was
 * recorded; NB_OK otherwise. */
nb_status nb_diag_status(const nb_source_set *s);

/* The text of line `line` of `file` (without newline) and its length. */
const char *nb_source_line(const nb_source_set *s, int file, int line, size_t *len);
/* Byte offset of loc in its file's text, or -1 if loc is out of range. */
long nb_source_offset(const nb_source_set *s, nb_loc loc);

#endif

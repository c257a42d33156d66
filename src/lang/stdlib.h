/* Standard kernel-language modules compiled into libnabla (lib/NAME.nb, embedded by
 * tools/embed_nb.py into stdlib_data.c), so `import nn;` works from any directory, from a
 * module given as text, and from Python. program.c looks an import up here after the importing
 * file's directory and the search paths (a user's own nn.nb wins). */
#ifndef NB_LANG_STDLIB_H
#define NB_LANG_STDLIB_H

typedef struct nb_stdlib_module {
    const char *name; /* "nn" */
    const char *text; /* the module's source */
} nb_stdlib_module;

extern const nb_stdlib_module nb_stdlib_modules[]; /* ends with {0, 0} */

/* The source of standard module `name` ("nn"), or NULL. */
const char *nb_stdlib_find(const char *name);

#endif

/* The compiled program (private to src/lang; owner: checker). program.c implements compiler.h's
 * compile / free / set_constant / functions; callgen.c (IR owner) implements emit_call / emit /
 * dump_ir on this struct.
 *
 * After nb_program_compile_* succeeded every module is parsed and checked: every [checker] field
 * of ast.h is filled (see check.h for the conventions), no error diagnostics were recorded.
 *
 * Link-time constants: each `extern static const` global is one nb_constant. The checker folds
 * them like static consts: decl->u.var.has_const / const_i / const_f hold the current value (the
 * host-set one, else the initializer's; has_const = 0 when neither exists). Setting a constant
 * re-runs parse + check over the same sources with the new value (array sizes may depend on it),
 * so after nb_program_set_constant every pointer into the tree below (modules, decls, types) may
 * have changed: re-read them from the nb_program, never cache them across set_constant.
 * (The old trees stay allocated until nb_program_free, so nothing dangles.)
 */
#ifndef NB_LANG_PROGRAM_H
#define NB_LANG_PROGRAM_H

#include "core/arena.h"
#include "lang/ast.h"
#include "lang/compiler.h"
#include "lang/source.h"
#include "lang/types.h"

typedef struct nb_constant {
    const char *name;      /* as declared */
    nb_decl *decl;         /* its NB_DECL_VAR (mods has NB_MOD_EXTERN), in the current tree */
    nb_module_ast *module; /* declaring module */
    int is_set;            /* set by the host (nb_program_set_constant) */
    double value;          /* host value (already converted to the decl's type when is_set) */
} nb_constant;

/* One generation of the compiled tree (replaced when a constant changes). */
typedef struct nb_program_gen nb_program_gen;

struct nb_program {
    nb_source_set src;        /* every file (main first, then imports as loaded) + diagnostics */
    nb_arena arena;           /* owns the modules' nodes, the type table's types, reflection */
    nb_type_table types;      /* interned types of this generation */
    nb_module_ast **modules;  /* dependency order: a module comes after everything it imports;
                                 the main module is last */
    int nmodules;
    nb_module_ast *main;      /* the compiled file */

    nb_constant *constants;   /* every extern static const of every module */
    int nconstants;

    /* ---- private to program.c --------------------------------------------------------- */
    char *main_path;          /* as given ("<name>" for compile_source) */
    char *main_text;          /* compile_source's text (NULL for files) */
    char **search_paths; int nsearch;
    char **defines; int ndefines; /* preprocessor defines "NAME[=VALUE]" (preproc.h) */
    char **conformances; int nconformances; /* "TYPE:INTERFACE=ID" (check_dyn.c) */
    int max_errors;
    int unchecked; /* emit no bounds checks */
    nb_program_gen *old;      /* earlier generations (freed by nb_program_free) */
    void *reflect;            /* reflection cache (program.c) */

    /* ---- free slot for the IR / emit owner (callgen.c) -------------------------------- */
    void *ir;                 /* e.g. lowered IR cache; invalidated (ir_free called, set NULL)
                                 whenever the tree is rebuilt and in nb_program_free */
    void (*ir_free)(void *ir);
};

/* The host-callable functions named `name`: top-level functions with a body, the main module's
 * first, then those of imported modules (modules order), each in declaration order. The index in
 * this list is the `overload` of nb_call_sig / nb_fn_info. Returns the count; writes up to max. */
int nb_program_find_functions(nb_program *p, const char *name, nb_decl **out, int max);

#endif

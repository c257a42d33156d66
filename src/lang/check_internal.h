/* Private state shared by check.c (declarations, statements, program) and check_expr.c
 * (expressions, conversions, calls). */
#ifndef NB_LANG_CHECK_INTERNAL_H
#define NB_LANG_CHECK_INTERNAL_H

#include <stdint.h>

#include "lang/ast.h"
#include "lang/check.h"
#include "lang/intrinsics.h"
#include "lang/program.h"

typedef struct ck_sym {
    const char *name;
    nb_decl *decl; /* NB_DECL_VAR (local) or NB_DECL_PARAM */
} ck_sym;

typedef struct ck_edge {
    nb_decl *from, *to;
    nb_loc loc;
} ck_edge;

/* Per-declaration checking state (side table keyed by the decl pointer). */
enum { CK_TODO = 0, CK_BUSY = 1, CK_DONE = 2 };

typedef struct ck_state_slot {
    const void *key;
    int state;
} ck_state_slot;

typedef struct nb_checker {
    nb_program *p;
    nb_source_set *src;
    nb_type_table *tt;
    nb_arena *arena;
    nb_module_ast *mod;       /* module being checked */
    /* scopes */
    ck_sym *syms;
    int nsyms, cap_syms;
    int *marks;
    int nmarks, cap_marks;
    /* scope floors: signature/global checks hide the locals of the body being checked */
#define CK_MAX_FLOORS 64
    int floors[CK_MAX_FLOORS];
    int nfloors;
    /* current function context */
    nb_decl *fn;              /* function (or method) whose body is checked; NULL at top level */
    nb_decl *strct;           /* struct of the current method */
    int loop_depth;           /* enclosing loops */
    int break_depth;          /* enclosing loops + switches */
    /* call graph */
    ck_edge *edges;
    int nedges, cap_edges;
    /* decl states */
    ck_state_slot *states;
    int nstates, cap_states;
} nb_checker;

/* check.c */
void ck_err(nb_checker *c, nb_loc loc, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void ck_note(nb_checker *c, nb_loc loc, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void ck_warn(nb_checker *c, nb_loc loc, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
int ck_state(nb_checker *c, const void *key);
void ck_set_state(nb_checker *c, const void *key, int state);
nb_decl *ck_lookup_local(nb_checker *c, const char *name);
/* Global declarations named `name` visible from the current module (the module first, then its
 * imports), of kind `kind` (-1 = any). Returns the count; writes up to max. */
int ck_lookup_global(nb_checker *c, const char *name, int kind, nb_decl **out, int max);
const nb_type *ck_resolve_type(nb_checker *c, nb_type_expr *te);
const nb_type *ck_struct_type(nb_checker *c, nb_decl *sd); /* ensures fields are resolved */
void ck_check_global_var(nb_checker *c, nb_decl *d);
void ck_check_func_sig(nb_checker *c, nb_decl *fn);
void ck_add_edge(nb_checker *c, nb_decl *to, nb_loc loc);
const char *ck_func_sig_str(nb_checker *c, nb_decl *fn);
void *ck_alloc(nb_checker *c, size_t size);

const nb_type *ck_builtin_type_name(nb_checker *c, const char *name); /* float3, int, void; NULL if not */

/* check_expr.c */
const nb_type *ck_name_as_type(nb_checker *c, const char *name, nb_loc loc); /* NULL if not a type */
int ck_has_method(nb_decl *sd, const char *name);
void ck_report_not_lvalue(nb_checker *c, const nb_expr *e, const char *what);
const nb_type *ck_common_type(nb_checker *c, nb_loc loc, const nb_type *a, const nb_type *b,
                              const char *op, int keep_bool);
const nb_type *ck_with_kind(nb_checker *c, const nb_type *t, nb_scalar_kind k);
const nb_type *ck_init_list(nb_checker *c, nb_expr *e, const nb_type *to);
/* check_call.c */
const nb_type *ck_call(nb_checker *c, nb_expr **slot);

const nb_type *ck_expr(nb_checker *c, nb_expr **slot);
/* Checks *slot expecting type `to` (init lists take it as their type) and converts. */
const nb_type *ck_expr_to(nb_checker *c, nb_expr **slot, const nb_type *to, const char *what);
/* Converts an already-checked expression; reports an error (with `what` as context) if the
 * conversion is impossible. Returns 1 on success. */
int ck_coerce(nb_checker *c, nb_expr **slot, const nb_type *to, const char *what);
nb_expr *ck_new_expr(nb_checker *c, nb_expr_kind kind, nb_loc loc);
int ck_is_error(const nb_type *t);
int ck_scalar_rank(nb_scalar_kind s);
int ck_is_int_scalar_kind(nb_scalar_kind s);
/* Constant-folds an integer expression (already checked). Returns 1 on success. */
int ck_const_int(const nb_expr *e, int64_t *out);

#endif

/* Private to the call checker (check_call.c, check_call_diff.c): overload candidates and the
 * shared steps of resolving a call. */
#ifndef NB_LANG_CHECK_CALL_INTERNAL_H
#define NB_LANG_CHECK_CALL_INTERNAL_H

#include "lang/check_internal.h"

#define CK_MAX_CANDS 64
#define CK_MAX_PARAMS 64

typedef struct ck_param {
    const nb_type *type;
    nb_param_dir dir;
    nb_expr *defval;
    const char *name;
} ck_param;

typedef struct ck_cand {
    nb_decl *decl;
    ck_param params[CK_MAX_PARAMS];
    int nparams;
    int map[CK_MAX_PARAMS]; /* param -> arg index, -1 = default */
    int cost;
    const nb_type *dret; /* result type (of the derivative, for fwd_diff / bwd_diff) */
} ck_cand;

/* A candidate from a function declaration; modes: derivative modes applied (fwd/bwd), in order. */
void ck_cand_from_decl(nb_checker *c, ck_cand *k, nb_decl *fn, const int *modes, int nmodes);
/* The best candidate's index (diagnostics for none / ambiguous name `display`), else -1. */
int ck_resolve_cands(nb_checker *c, nb_expr *call, const char *display, ck_cand *cands, int ncands);
/* Converts and reorders the call's arguments to candidate k's parameters. */
void ck_apply_args(nb_checker *c, nb_expr *call, ck_cand *k, const char *fname);
/* Checks the arguments, leaving untyped initializer lists for the chosen parameter types. */
void ck_check_args_defer(nb_checker *c, nb_expr *call);

/* NB_INTR_FWD_DIFF / NB_INTR_BWD_DIFF for fwd_diff / bwd_diff / __fwd_diff / __bwd_diff, else -1. */
int ck_diff_name(const char *name);
/* fwd_diff(f)(…) / bwd_diff(f)(…) (operator id) applied to `inner`: check_call_diff.c. */
const nb_type *ck_call_diff(nb_checker *c, nb_expr *call, nb_expr *inner, int id);

#endif

/* Emission scope: a construct the IR cannot lower yet in one function must not break calling the
 * module's other functions.
 *
 * When nb_ir_lower_program reports errors, nb_lower_faults_collect attributes each new diagnostic
 * to the function whose body holds it (by source location: the nearest declaration before it),
 * renders them per function and removes them from the program's source set again. The IR module
 * stays usable for every function whose call graph (calls and global initializers) avoids the
 * broken ones; nb_lower_faults_check tells, for one entry function, which is the case.
 */
#ifndef NB_LANG_LOWER_SCOPE_H
#define NB_LANG_LOWER_SCOPE_H

#include "lang/ir.h"
#include "lang/program.h"

typedef struct nb_lower_faults {
    int n;                /* broken functions */
    int cap;              /* allocated entries of locs / texts */
    nb_loc *locs;         /* their declarations' locations (instantiations share them) */
    char **texts;         /* their rendered diagnostics */
    int global;           /* an error outside any function body: nothing can be emitted */
    char *all;            /* every new diagnostic rendered */
} nb_lower_faults;

/* Diagnostics [ndiags0, p->src.ndiags) are lowering errors: attribute, render, then remove them
 * (p->src returns to ndiags0 / nerrors0). */
nb_status nb_lower_faults_collect(nb_program *p, int ndiags0, int nerrors0, nb_lower_faults *out);
void nb_lower_faults_free(nb_lower_faults *f);
int nb_lower_faults_func_broken(const nb_lower_faults *f, const nb_ir_func *fn);
/* NB_OK when nothing reachable from fn is broken; else NB_ERR_COMPILE with the diagnostics of
 * the broken functions it reaches (NULL faults: NB_OK). */
nb_status nb_lower_faults_check(const nb_lower_faults *f, nb_ir_module *m, nb_ir_func *fn);

#endif

/* Lowering of Slang's target-specific statements (lower.c calls these; emit_target.c emits).
 *
 * A function whose body holds a __target_switch gets one IR function per back end (nb_ir_func
 * target / alt): each is lowered with only its target's case (or `default`), so the IR itself
 * has no target-dependent control flow. __intrinsic_asm sets the function's asm_text (its calls
 * are expanded by the emitter) and __requirePrelude adds to its preludes.
 */
#ifndef NB_LANG_LOWER_TARGET_H
#define NB_LANG_LOWER_TARGET_H

#include "lang/ir.h"

/* Does the statement (tree) hold a __target_switch? */
int nb_lower_has_target_switch(const nb_stmt *s);
/* The case of `s` (a __target_switch) for target (NB_TGT_C / NB_TGT_CUDA): its own case, else
 * the default, else NULL. */
const nb_target_case *nb_lower_pick_case(const nb_stmt *s, unsigned target);
/* Records __intrinsic_asm `s` on f (operands: types or constants, as text); 0 when out of memory. */
int nb_lower_asm(nb_ir_module *m, nb_ir_func *f, const nb_stmt *s);
/* Adds a __requirePrelude text to f (once); 0 when out of memory. */
int nb_lower_prelude(nb_ir_module *m, nb_ir_func *f, const char *text);

#endif

/* Host evaluation of constant values (default parameter values for vectorized calls).
 *
 * nb_fold_components folds a checked expression of scalar, vector, matrix or fixed-array type to
 * its components (C order: arrays outermost, matrices row-major) as doubles. Understood: what
 * nb_check_const_eval folds for scalars (literals, static const / link-time constants,
 * arithmetic, casts, ternaries), constructors `float3(1, 2, 3)` / `float3(v.xy, 1)` of constant
 * parts, splats (`float3(1)`, implicit scalar -> vector), initializer lists `{1, 2}`, unary minus,
 * and names of static const globals with such initializers. Anything else (calls, struct values)
 * is "not a host constant".
 */
#ifndef NB_LANG_FOLD_VALUE_H
#define NB_LANG_FOLD_VALUE_H

#include <stdint.h>

#include "lang/ast.h"

/* Returns the number of components written (== nb_type_components-like count of e->type), or
 * -1 when e is not a host constant or has more than max components. */
int nb_fold_components(const nb_expr *e, double *out, int max);

/* Conversions of folded doubles without C's undefined behaviour for out-of-range values (the
 * fuzzer's UBSan finds them): nb_fold_d2i truncates toward zero, NaN gives 0 and values beyond
 * int64 saturate; nb_fold_f32 rounds to float, values beyond float's range give +-inf. */
int64_t nb_fold_d2i(double v);
double nb_fold_f32(double v);

#endif

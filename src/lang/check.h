/* Semantic analysis (owner: checker). Resolves names and types, picks overloads, inserts implicit
 * conversions and fills every [checker] field of ast.h. Errors are diagnostics in the program's
 * source set; checking continues after errors (an expression of type NB_TY_ERROR converts
 * silently, suppressing cascades) and never aborts.
 *
 * Conventions of a checked tree (what lowering may rely on when no error was reported):
 *
 * Types and conversions
 *   - every expr->type is set; implicit conversions are NB_EX_CAST nodes with implicit = 1,
 *     u.cast.texpr = NULL, type = the target type. A cast (implicit or written) is always one of:
 *     same component count elementwise conversion (scalar->scalar, vecN->vecN, RxC->RxC, also
 *     to/from bool: x != 0), or scalar -> vector/matrix splat (with conversion of the scalar),
 *     or T -> T (written casts only). No cast between structs/arrays/tensors of different types.
 *   - binary arithmetic (+ - * / %) and bitwise (& | ^ << >>): both operands have the result
 *     type (vector/scalar mixes are splatted; `*` of two matrices is elementwise as in HLSL);
 *     comparisons (< <= > >= == !=): both operands have a common type T, result bool (or boolN
 *     with T's shape); && and ||: both operands bool scalars, result bool.
 *   - unary - + ~ : operand has the result type; ! : operand bool/boolN, result same;
 *     ++/-- : operand is a numeric lvalue, result its type.
 *   - assignment: rhs converted to the lhs type (compound too: `i += 1.5` adds int(1.5));
 *     the result has the lhs type; lhs is an lvalue.
 *   - ternary: cond is bool (scalar) or boolN (element-wise select, then/else have N
 *     components); then and else converted to the result type.
 *   - return values converted to the function's return type; var initializers to the var type.
 *
 * Names and members
 *   - NB_EX_NAME: ref LOCAL (decl = NB_DECL_VAR), PARAM (decl = the NB_DECL_PARAM, index = its
 *     number), GLOBAL (decl = static const / extern NB_DECL_VAR), STATIC (struct static const
 *     used unqualified inside a method), FUNCTION (only as fwd_diff/bwd_diff argument).
 *   - `this` (NB_EX_NAME "this"): ref NB_REF_PARAM, index -1, decl = the method (NB_DECL_FUNC),
 *     type = the struct; an lvalue only in [mutating] methods.
 *   - inside a method a bare field name `x` is rewritten to NB_EX_MEMBER(base = `this`, "x") and
 *     a bare method call `m(a)` to a call whose callee is NB_EX_MEMBER(`this`, "m").
 *   - NB_EX_MEMBER: ref FIELD (index = field number, decl = the field's NB_DECL_VAR), SWIZZLE
 *     (swizzle[]/swizzle_len; a scalar base only uses component 0), STATIC (S.k / S::k; base
 *     may be an NB_EX_NAME/NB_EX_TYPE with ref TYPE), METHOD (callee of a method call),
 *     DifferentialPair .p/.d: ref FIELD with index 0 (primal) / 1 (differential), decl NULL.
 *     `.getPrimal()` / `.getDifferential()` calls are rewritten to the .p / .d member.
 *   - NB_EX_INDEX: arrays/vectors/matrices take one int index (converted to int; matrix -> row
 *     vector); tensors take `rank` int indices, or one intN index with N = rank (converted
 *     to intN); result is the element type T, an lvalue.
 *
 * Calls (NB_EX_CALL)
 *   - user function: ref FUNCTION, decl = the chosen overload. Afterwards nargs == nparams:
 *     default arguments are appended (the param's default_value node, shared) and named
 *     arguments reordered into parameter order (arg_names is set to NULL). in args are
 *     converted to the param type; out/inout args are lvalues of exactly the param type.
 *   - method: callee is NB_EX_MEMBER(base = object, ref METHOD, decl = method); args as above
 *     (the object is the implicit `this` argument; for [mutating] methods base is an lvalue).
 *   - constructor (callee is NB_EX_TYPE or a NAME naming a type): ref TYPE, type = the built type.
 *       one arg of exactly the built type: a copy/conversion (the arg was converted);
 *       vector/matrix from one scalar: splat;
 *       vector/matrix otherwise: args are scalars/vectors of the built type's scalar kind whose
 *       components are concatenated in order (count checked; a matrix also takes R row vectors);
 *       struct: one arg per field, converted to the field type.
 *   - intrinsic: ref INTRINSIC, index = nb_intrinsic id; argument conventions in intrinsics.h.
 *     `no_diff(x)` is treated as detach(x).
 *   - fwd_diff(f)(args): ref INTRINSIC, index = NB_INTR_FWD_DIFF, decl = f's NB_DECL_FUNC; args in
 *     f's parameter order: a differentiable param (float-based type, not no_diff) of type T takes
 *     DifferentialPair<T> (in/out/inout as the param); others take T. Result:
 *     DifferentialPair<R> when R is differentiable, else R.
 *   - bwd_diff(f)(args): index = NB_INTR_BWD_DIFF, decl = f; per param: differentiable `in` ->
 *     inout DifferentialPair<T> (an lvalue); differentiable `inout` -> inout DifferentialPair<T>;
 *     differentiable `out` -> in T.Differential (the derivative flowing back); non-differentiable
 *     `in` -> T; non-differentiable out/inout -> skipped (no argument). Then, for a
 *     differentiable non-void R, one last in argument of R.Differential. Result void.
 *
 * Statements and declarations
 *   - loops: stmt->max_iters = n from [MaxIters(n)], else the trip count of a constant-bound
 *     `for (int i = a; i < b; i++)`-style loop (< <= > >= != with ++ -- += -=), else -1.
 *   - every NB_DECL_VAR has u.var.type; NB_DECL_PARAM u.param.type and index; static const and
 *     extern globals have is_global = 1 and has_const/const_i/const_f when they fold.
 *   - NB_DECL_FUNC: differentiable (Differentiable / BackwardDifferentiable /
 *     ForwardDifferentiable, or implied by a custom derivative), is_kernel, is_mutating
 *     ([mutating]), fwd_derivative / bwd_derivative (from [ForwardDerivative(g)] on f, or
 *     [ForwardDerivativeOf(f)] on g; likewise backward). ret->resolved is the return type.
 *   - NB_DECL_STRUCT: u.strct.type.
 *
 * Value generics (check_generic.c)
 *   - a struct or function with gparams is a template: it is never checked, has no type and is
 *     never lowered. Each distinct instantiation (`MLP<16,3>`, `sum<4>`) is a deep copy with
 *     every generic parameter replaced by an int/uint literal, appended to the decls of the module
 *     whose checking requested it, named "MLP<16,3>" / "sum<4>" (emitted MLP_16_3 / sum_4), with
 *     u.strct.generic_of / gargs or u.func.generic_of set; otherwise it is an ordinary decl.
 *   - calls of generic functions refer to the instantiation (call->decl); `f<4>(x)` callees are
 *     rewritten to a NAME with ref FUNCTION.
 */
#ifndef NB_LANG_CHECK_H
#define NB_LANG_CHECK_H

#include "lang/program.h"

/* Checks p->modules[0..nmodules) (dependency order: imports first). Errors go to p->src.
 * Returns NB_OK or NB_ERR_COMPILE (no rendering; the caller renders). Never aborts. */
nb_status nb_check_program(nb_program *p);

/* Folds a checked constant expression (literals, static const / extern globals, arithmetic,
 * casts, ternaries) to a number. Returns 1 and sets *is_int / *i / *f on success. */
int nb_check_const_eval(const nb_expr *e, int *is_int, int64_t *i, double *f);

/* Attribute lookup helper: the attribute named `name` in list (NULL when absent). */
const nb_attr *nb_attr_find(const nb_attr_list *list, const char *name);

/* Implicit-conversion cost from `from` to `to` (0 = same type; < 0 = not convertible); used by
 * overload resolution and exported for tests. */
int nb_check_conversion_cost(const nb_type *from, const nb_type *to);

#endif

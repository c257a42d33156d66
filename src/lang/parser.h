/* Parser for the kernel language: tokens (lexer.h) -> syntax tree (ast.h).
 *
 *   nb_module_ast *m;
 *   nb_status st = nb_parse_module(&src, file, &arena, &m);   // NB_ERR_COMPILE on syntax errors
 *   nb_diag_status(&src);                                      // renders them into nb_last_error()
 *
 * Error recovery: after a syntax error the parser skips to the next `;` or to the `}` closing the
 * current statement or member (balanced), then goes on, so one run reports several errors (up to
 * src->max_errors; then it stops). A missing `;` at the end of a line is reported and assumed.
 * The tree is always produced (as complete as recovery allows); nodes that could not be parsed are
 * replaced by an NB_EX_INT 0 expression or dropped.
 *
 * Disambiguation rules (the parser knows no types; the checker resolves names):
 *   - Known type names: the built-in scalar/vector/matrix names (bool int uint float double half
 *     void int64_t uint64_t …, with N or NxM suffixes 1..4: float3, int2x2), the built-in generic
 *     types (below), and every struct/typedef/typealias declared anywhere in the file (the file is
 *     pre-scanned, so order does not matter). Imported modules' types are not known here.
 *   - Generic arguments: in type position (declarations, parameters, return types, typedefs,
 *     after `(`-cast detection) `Name<` always opens generic arguments. In expression position
 *     `Name<` opens them only when Name is a known generic type: vector, matrix, Tensor,
 *     DiffTensor, RWTensor, TensorView, DiffTensorView, DifferentialPair, Array,
 *     StructuredBuffer, RWStructuredBuffer, or a struct of this file declared with generic
 *     parameters; otherwise `<` is less-than. At the start of a statement, `Name<…> ident` and
 *     `Name[…] ident` are tried as declarations first (backtracking to an expression otherwise).
 *     A `>>` closing two generic lists is split.
 *   - A generic argument is a type if it starts with a known type name or with `Name<`; else it
 *     is a value expression parsed above the relational/shift level (`MLP<W*2, 3>` works;
 *     parenthesize comparisons or shifts). So an unknown bare name (`DifferentialPair<Imported>`,
 *     `Tensor<float, N>`) lands in vargs as an NB_EX_NAME: the checker must accept a NAME that
 *     resolves to a type there.
 *   - `(T)x` is a cast only when T is a known type name followed directly by `)` (or a known
 *     generic type `(vector<float,3>)x`); otherwise the parentheses group an expression.
 *
 * Tree conventions (see also ast.h):
 *   - Locations: a node's first token, except BINARY/ASSIGN/TERNARY (the operator, `?`), postfix
 *     ++/-- (the operator), MEMBER (the member name), INDEX (the `[`), CALL (its callee's loc).
 *     Declarations: the declared name (function, struct, variable, parameter, typedef); an
 *     import: the `import` keyword; an unnamed parameter: its first token.
 *   - Parentheses leave no node. `this` is NB_EX_NAME "this".
 *   - Associated types in type position (`float.Differential`, `S::Differential`) become one
 *     nb_type_expr named "float.Differential" / "S.Differential".
 *   - Attribute string arguments (`[shader("compute")]`) become NB_EX_NAME with the unquoted text.
 *   - `no_diff expr` in expression position is NB_EX_UNARY with op NB_TOK_KW_NO_DIFF.
 *   - Comma expressions exist only in a for-loop's init and step: NB_EX_BINARY op NB_TOK_COMMA.
 *   - Float literals: no suffix and `f` -> NB_SC_FLOAT, `h` -> NB_SC_HALF, `l`/`lf` -> NB_SC_DOUBLE.
 *   - Declarators: `float a[3][4]` and `float[4] a[3]` give a per-variable nb_type_expr whose
 *     array_dims are the declarator's dims followed by the type's dims (outermost first): both
 *     examples give dims [3][4]. Each NB_DECL_VAR of `float a, b[2];` has its own nb_type_expr
 *     (they may share the targs/vargs arrays).
 *   - `let x = …` -> NB_DECL_VAR with NB_MOD_CONST and texpr NULL (or the type of `let x : T`);
 *     `var y = …` -> texpr NULL, no const.
 *   - Unnamed parameters (`float g(float);`) have name "" (never NULL).
 *   - Methods: NB_DECL_FUNC with func.parent set and is_mutating from `[mutating]` (the
 *     attribute stays in attrs too). Struct value generics `<let W : int>` are NB_DECL_PARAM in
 *     strct.gparams (texpr, default_value).
 *   - `static const` struct members go to strct.statics, every other variable member to fields.
 *   - Globals get var.is_global = 1 and their modifiers (`extern static const` ->
 *     NB_MOD_EXTERN|NB_MOD_STATIC|NB_MOD_CONST).
 *   - `import a.b;` -> path "a.b"; `import "dir/x.nb";` -> path "dir/x.nb" (quotes removed).
 *   - Switch: consecutive labels share one nb_switch_case (`case 1: case 2: default: s;`).
 */
#ifndef NB_LANG_PARSER_H
#define NB_LANG_PARSER_H

#include "core/arena.h"
#include "core/strbuf.h"
#include "lang/ast.h"
#include "lang/source.h"

/* Parses file `file` of src into a module whose nodes live in `arena`. *out is always set (to a
 * possibly partial module) unless out of memory. Returns NB_ERR_COMPILE if this parse added any
 * error diagnostic (render them with nb_diag_status), NB_ERR_OUT_OF_MEMORY, or NB_OK. */
nb_status nb_parse_module(nb_source_set *src, int file, nb_arena *arena, nb_module_ast **out);

/* Debug printer: one S-expression per top-level declaration, each on its own line. Used by the
 * parser tests; the format is for humans and may change. */
void nb_ast_print(const nb_module_ast *m, nb_strbuf *out);
void nb_ast_print_decl(const nb_decl *d, nb_strbuf *out);
void nb_ast_print_stmt(const nb_stmt *s, nb_strbuf *out);
void nb_ast_print_expr(const nb_expr *e, nb_strbuf *out);
void nb_ast_print_type(const nb_type_expr *t, nb_strbuf *out); /* "vector<float,3>", "float[4]" */

#endif

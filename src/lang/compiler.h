/* The compiler's interface to the layers above it (jit, call, cli). Everything below this header
 * (lexer, parser, checker, IR, emitters) is private to src/lang.
 *
 *   nb_program *p;
 *   nb_program_compile_file("square.nb", &opts, &p);        // parse + check, imports resolved
 *   nb_program_functions(p, "square", &infos, &n);          // reflection for binding
 *   nb_program_emit_call(p, &sig, &source, &layout);         // a call kernel's C or CUDA source
 *   nb_program_emit(p, NB_TARGET_C, NULL, &source);          // readable code for `nabla emit`
 *
 * Errors: NB_ERR_COMPILE with every diagnostic rendered (file:line:col, source line, caret) in
 * nb_last_error(); NB_ERR_IO for unreadable files; NB_ERR_NOT_FOUND for unknown functions.
 */
#ifndef NB_LANG_COMPILER_H
#define NB_LANG_COMPILER_H

#include "core/strbuf.h"
#include "lang/callsig.h"
#include "nabla/status.h"

typedef struct nb_program nb_program;

typedef struct nb_compile_opts {
    const char *const *search_paths; /* directories for `import` and `#include` (the file's own
                                        dir is first) */
    int nsearch;
    int max_errors;                  /* 0 = default (50) */
    int unchecked;                   /* emit no bounds checks (nb_module_options.unchecked) */
    const char *const *defines;      /* preprocessor defines, "NAME" or "NAME=VALUE" (copied) */
    int ndefines;
    const char *const *conformances; /* "TYPE:INTERFACE=ID" (nb_module_options; copied) */
    int nconformances;
} nb_compile_opts;

nb_status nb_program_compile_file(const char *path, const nb_compile_opts *opts, nb_program **out);
nb_status nb_program_compile_source(const char *name, const char *source, const nb_compile_opts *opts,
                                    nb_program **out);
void nb_program_free(nb_program *p);
/* The warnings (and notes) of a program that compiled, rendered like errors; NULL when there are
 * none or out of memory. Free with nb_free(text, strlen(text) + 1). */
char *nb_program_warnings(const nb_program *p);

/* Link-time constants (`extern static const int N = 4;`): set before emitting. The value is
 * converted to the constant's type; unknown names and non-numeric types are NB_ERR_NOT_FOUND /
 * NB_ERR_DTYPE. Changing a constant changes the emitted source (and so the cache key). */
nb_status nb_program_set_constant(nb_program *p, const char *name, double value);

/* ---- reflection ------------------------------------------------------------------------- */

typedef enum nb_leaf_kind {
    NB_LEAF_VALUE,  /* scalar/vector/matrix/array of those: bound by broadcasting */
    NB_LEAF_TENSOR, /* Tensor<T,N> / DiffTensor<T,N>: bound to a whole array */
} nb_leaf_kind;

typedef struct nb_fn_leaf {
    const char *path;        /* "x" or "s.pos" */
    int param;               /* parameter index; -1 for the result */
    int dir;                 /* 0 in, 1 out, 2 inout */
    nb_leaf_kind kind;
    nb_dtype scalar;         /* scalar element type (f32 for float, f64, f16, i32, u32, bool, …) */
    int value_rank;          /* float -> 0, float3 -> 1, float3x4 -> 2, float[4] -> 1, float3[4] -> 2 */
    long long value_shape[8];
    int is_vector;           /* the value is a vector (float3), not an array (float[3]) */
    int tensor_rank;         /* NB_LEAF_TENSOR */
    int diff_tensor;
    int torch;               /* NB_LEAF_TENSOR of a host function's TorchTensor<T>: any rank */
    int pointer;             /* NB_LEAF_TENSOR of a Ptr<T> parameter (check_ptr.c): the kernel gets
                                the data address, so the array must be contiguous */
    int differentiable;      /* participates in derivatives (float-based, not no_diff) */
    int has_default;         /* the leaf's parameter has a default value (`float s = 2.0`) */
    const void *default_value; /* that value folded on the host: prod(value_shape) scalars of
                                  dtype `scalar`, C order; NULL when it is not a constant the host
                                  can evaluate (struct defaults, calls): the caller must bind it */
} nb_fn_leaf;

typedef struct nb_fn_info {
    const char *name;
    int overload;            /* index among functions of this name */
    int nparams;
    const char *const *param_names;
    const int *param_dirs;   /* 0 in, 1 out, 2 inout */
    const int *param_first_leaf; /* leaves[param_first_leaf[i] .. param_first_leaf[i+1]) */
    int nleaves;
    const nb_fn_leaf *leaves;
    const int *param_has_default; /* 1: parameter i has a default value (may be left unbound) */
    int has_result;
    nb_fn_leaf result;       /* value_rank -1 for a struct result: see results */
    int nresults;            /* result leaves: 0 void, 1 for a non-struct result (== result), or
                                one per field of a struct result, depth-first ("_result.pos") */
    const nb_fn_leaf *results;
    int is_kernel;           /* [Kernel]: launched over an explicit grid, not broadcast */
    int is_host;             /* host code ([TorchEntryPoint]): run by nb_program_emit_host's unit */
    int numthreads[3];       /* [numthreads(x,y,z)] thread group; 0 0 0 without the attribute */
    int differentiable;
    const char *signature;   /* "float add(float a, float b)" for messages */
    int nstructs;            /* struct-valued parameter nodes, depth-first: a struct parameter or
                                field ("foo", "mlp.layers[0]") or an array of structs ("mlp.layers") */
    const char *const *struct_paths;
    const char *const *struct_types; /* their types as written: "Foo", "Linear<16>[3]", "Linear<16>" */
} nb_fn_info;

/* Names of the main module's callable (non-generic, defined) functions, in declaration order, no
 * duplicates for overloads: up to max into out; returns how many there are. */
int nb_program_function_names(nb_program *p, const char **out, int max);

/* All overloads of `name` (count 0 -> NB_ERR_NOT_FOUND naming the function and listing the
 * module's callable functions). The arrays live as long as the program. */
nb_status nb_program_functions(nb_program *p, const char *name, const nb_fn_info **infos, int *count);

/* The leaves of the struct type `name` of the program (its modules' structs, the main module's
 * first; an instantiation such as "MLP<32,8>" once the program uses it), laid out as for a
 * parameter of that type: fields depth-first, paths "pos", "t.x" (param 0, dir in). 0 leaves and
 * NB_ERR_NOT_FOUND (listing the structs) for an unknown name. The array lives as long as the
 * program (each call builds a new one: callers cache). */
nb_status nb_program_type_leaves(nb_program *p, const char *name, const nb_fn_leaf **leaves, int *count);

/* ---- code generation -------------------------------------------------------------------- */

/* Source of the call kernel for sig (C or CUDA C, self-contained: no includes beyond the
 * compiler's standard headers) and its parameter-block layout. */
nb_status nb_program_emit_call(nb_program *p, const nb_call_sig *sig, nb_strbuf *source,
                               nb_call_layout *layout);

/* Readable code of the whole program, or of one entry function and what it calls, for
 * `nabla emit`. mode selects primal / forward / backward derivative code. */
nb_status nb_program_emit(nb_program *p, nb_call_target target, const char *entry, nb_call_mode mode,
                          nb_strbuf *out);

/* The host unit: C for the host CPU with the program's [TorchEntryPoint] host functions and
 * their entry `nb_host_entry` (emit_host.c describes its ABI). *nhost gets the number of host
 * functions (0: the unit has only an empty entry). */
nb_status nb_program_emit_host(nb_program *p, nb_strbuf *out, int *nhost);

/* Textual IR of the program (for `nabla emit --ir` and tests). */
nb_status nb_program_dump_ir(nb_program *p, const char *entry, nb_strbuf *out);

#endif

/* Types of the kernel language. Types are interned in a nb_type_table: two types are equal
 * exactly when their pointers are equal.
 *
 *   scalars   bool int uint float double half (int64/uint64 reserved)
 *   vector    vector<S, N>, N = 2..4     (float3 = vector<float,3>)
 *   matrix    matrix<S, R, C>, R,C = 2..4 (float3x4: 3 rows, 4 columns)
 *   array     T[N] (value semantics), nested for multi-dimensional arrays
 *   struct    user structs (fields, methods, static consts; IDifferentiable)
 *   tensor    Tensor<T, N> / DiffTensor<T, N>: views of device arrays for explicit indexing
 *   diffpair  DifferentialPair<T>
 */
#ifndef NB_LANG_TYPES_H
#define NB_LANG_TYPES_H

#include <stddef.h>

#include "core/arena.h"
#include "core/strbuf.h"

typedef enum nb_scalar_kind {
    NB_SC_BOOL,
    NB_SC_INT,    /* 32-bit signed */
    NB_SC_UINT,   /* 32-bit unsigned */
    NB_SC_INT64,
    NB_SC_UINT64,
    NB_SC_HALF,
    NB_SC_FLOAT,
    NB_SC_DOUBLE,
} nb_scalar_kind;

typedef enum nb_type_kind {
    NB_TY_ERROR,  /* result of a failed check; converts to and from anything silently */
    NB_TY_VOID,
    NB_TY_SCALAR,
    NB_TY_VECTOR,
    NB_TY_MATRIX,
    NB_TY_ARRAY,
    NB_TY_STRUCT,
    NB_TY_TENSOR,
    NB_TY_DIFFPAIR,
    NB_TY_FUNC,   /* a function used as a value (argument of fwd_diff/bwd_diff) */
    NB_TY_PTR,    /* Ptr<T> / T* (Slang): elem; Ptr<void> is nullptr's type (check_ptr.c) */
    NB_TY_TORCH,  /* TorchTensor<T> (slang-torch): a host handle on a tensor of any rank, only in
                     [TorchEntryPoint] host code (check_host.c); elem = T (a scalar) */
} nb_type_kind;

struct nb_decl;

typedef struct nb_type {
    nb_type_kind kind;
    int id;                       /* dense index in the table, stable within one compilation */
    nb_scalar_kind scalar;        /* SCALAR; element scalar of VECTOR/MATRIX */
    int rows, cols;               /* VECTOR: cols = N, rows = 1; MATRIX: rows x cols */
    int length;                   /* ARRAY: element count */
    const struct nb_type *elem;   /* ARRAY element, TENSOR element, DIFFPAIR primal */
    int rank;                     /* TENSOR */
    int diff_tensor;              /* TENSOR: DiffTensor (has a gradient view) */
    struct nb_decl *decl;         /* STRUCT: its declaration; FUNC: the function */
    const char *name;             /* canonical spelling: "float3", "float[4]", "S", … */
    int buffer;                   /* TENSOR: 1 RWStructuredBuffer, 2 StructuredBuffer (rank 1): an
                                     index out of range reads 0 and drops a store without an error
                                     (D3D/Vulkan robust buffer access; check_kernel.c) */
    const struct nb_type *ptr_pair; /* ARRAY of pointer types: its DifferentialPtrPair (check_ptr.c) */
} nb_type;

typedef struct nb_type_table {
    nb_arena *arena;
    nb_type **types;
    int count, cap;
    int *hslots;  /* hash index over types: 1 + index, 0 empty (types.c) */
    int hcap;
    /* shortcuts */
    const nb_type *t_error, *t_void, *t_bool, *t_int, *t_uint, *t_float, *t_double, *t_half;
} nb_type_table;

void nb_types_init(nb_type_table *t, nb_arena *arena);
void nb_types_free(nb_type_table *t);

const nb_type *nb_type_scalar(nb_type_table *t, nb_scalar_kind s);
const nb_type *nb_type_vector(nb_type_table *t, nb_scalar_kind s, int n);   /* n = 1 -> scalar */
/* Matrices are rows of vectors (Slang's CPU/CUDA layout): 1 to NB_MATRIX_MAX_ROWS rows of 1 to 4
 * columns (vectors stay 1 to 4 components, so a column count or a transposed shape past 4 is
 * refused where an operation would need it). */
#define NB_MATRIX_MAX_ROWS 256
const nb_type *nb_type_matrix(nb_type_table *t, nb_scalar_kind s, int rows, int cols);
const nb_type *nb_type_array(nb_type_table *t, const nb_type *elem, int length);
const nb_type *nb_type_struct(nb_type_table *t, struct nb_decl *decl); /* one per decl */
const nb_type *nb_type_tensor(nb_type_table *t, const nb_type *elem, int rank, int diff);
const nb_type *nb_type_buffer(nb_type_table *t, const nb_type *elem, int kind); /* kind: 1 RW, 2 read-only */
const nb_type *nb_type_diffpair(nb_type_table *t, const nb_type *primal);
const nb_type *nb_type_func(nb_type_table *t, struct nb_decl *fn);
const nb_type *nb_type_ptr(nb_type_table *t, const nb_type *elem);
const nb_type *nb_type_torch(nb_type_table *t, const nb_type *elem); /* TorchTensor<elem> */

/* Queries. */
int nb_type_is_numeric(const nb_type *t);        /* scalar (not bool), vector, matrix of such */
int nb_type_is_float_based(const nb_type *t);    /* half/float/double scalar, vector, matrix */
int nb_type_is_differentiable(const nb_type *t); /* float-based, arrays/structs of such, diffpair */
/* DifferentialPtrPair<t> of a pointer-like struct t (IDifferentiablePtrType: not differentiable
 * itself; its derivative is a pointer to the gradient memory, check_ptr.c), else NULL. */
const nb_type *nb_type_ptr_pair(const nb_type *t);
nb_scalar_kind nb_type_elem_scalar(const nb_type *t); /* scalar of scalar/vector/matrix */
int nb_type_components(const nb_type *t);        /* 1, N, R*C; 0 for others */
/* The type's tangent ("Differential") type: itself for float-based types, arrays/structs of the
 * differentiable members' tangents; NULL when not differentiable. */
const nb_type *nb_type_differential(nb_type_table *t, const nb_type *ty);

/* Number of scalars when flattened (vector 3 -> 3, float[4] of float3 -> 12, struct: sum),
 * and the shape a host array must have for one value (float3 -> [3], float3x4 -> [3,4],
 * float[4] -> [4]); returns the rank written to dims (<= 8). */
int nb_type_value_shape(const nb_type *t, long long *dims);

const char *nb_scalar_name(nb_scalar_kind s); /* "float" */
/* Appends the canonical spelling ("float3", "float[4]", "Tensor<float,2>"). */
void nb_type_print(const nb_type *t, nb_strbuf *out);

#endif

/* Built-in functions of the kernel language (owner: checker).
 *
 * One X-macro table (ggml ops.def style):
 *
 *   X(ID, "name", min_args, max_args, SIG, DIFF, FLAGS)
 *
 *   ID     enum suffix: NB_INTR_<ID>
 *   name   spelling in .nb source
 *   SIG    signature class (NB_ISIG_<SIG>, below): how the checker types the call
 *   DIFF   NB_IDIFF_<DIFF>: NONE (result is not float / not part of derivatives),
 *          ZERO (float result, derivative is zero everywhere it exists: floor, sign, step, …),
 *          RULE (needs a derivative rule: the autodiff pass supplies one per id),
 *          SPECIAL (autodiff machinery itself: diffPair, detach, fwd_diff, bwd_diff)
 *   FLAGS  NB_IFLAG_* bits (KERNEL: only allowed inside [Kernel] functions)
 *
 * What the checker guarantees to lowering (so the IR never converts implicitly):
 *   - the NB_EX_CALL has ref = NB_REF_INTRINSIC, index = the nb_intrinsic id, type = result type;
 *   - elementwise classes (FLOAT_*, NUM_*): every argument has EXACTLY the result type
 *     (int args of float intrinsics are converted to float; scalars mixed with vectors are
 *     splatted) through implicit NB_EX_CAST nodes; applies component-wise to vectors/matrices;
 *   - DOT / LENGTH / DISTANCE: args are the same float vector type, result is its scalar;
 *     dot also accepts int vectors (result int);
 *   - CROSS: both args float3 (or half3/double3), result same;
 *   - SELECT: select(c, a, b): a and b converted to the result type T; c is bool (scalar) or a
 *     bool vector with T's component count;
 *   - MUL: mul(a, b) with a/b scalar, vector or matrix; both converted to one common scalar kind;
 *     shapes: s*x, x*s (elementwise scale), vecK*matKxN -> vecN, matMxK*vecK -> vecM,
 *     matMxK*matKxN -> matMxN, vecN*vecN -> scalar (dot);
 *   - TRANSPOSE: matRxC -> matCxR;  DETERMINANT: float matNxN -> scalar;
 *   - ANY_ALL: scalar/vector of any scalar kind -> bool;  FLOAT_TEST: float T -> bool of T's shape;
 *   - BITCAST: asfloat/asint/asuint: 32-bit scalar/vector -> same shape with float/int/uint;
 *   - ATOMIC: atomicAdd(t[i, …], v): first arg is an NB_EX_INDEX into a Tensor/DiffTensor
 *     (an lvalue element of scalar type T), v converted to T; returns the old value (T);
 *   - DIFFPAIR: diffPair(p) / diffPair(p, d) -> DifferentialPair<typeof p> (d converted to the
 *     differential type; missing d = zero);
 *   - DETACH: detach(x) -> typeof x (value without derivative);
 *   - FWD_DIFF / BWD_DIFF: only as the callee of a call: fwd_diff(f)(args…). The inner call
 *     (fwd_diff(f)) has type NB_TY_FUNC and ref = NB_REF_INTRINSIC; its argument is a NAME with
 *     ref = NB_REF_FUNCTION (overload chosen by the outer call's arguments). The outer call has
 *     ref = NB_REF_INTRINSIC, index = NB_INTR_FWD_DIFF/BWD_DIFF, decl = f. See check.h.
 *   - THREAD_ID: dispatch_id(), cudaThreadIdx(), cudaBlockIdx(), cudaBlockDim(), cudaGridDim(): () -> uint3,
 *     [Kernel] functions only.
 *   - NN_MATVEC: nn_matvec16(w, off, x) / nn_matvec16_t(w, off, x): w a Tensor or DiffTensor of
 *     rank 1 over float, off converted to int, x converted to float[16]; result float[16]
 *     (y[i] = sum_j w[off + 16 i + j] x[j]; _t: y[j] = sum_i w[off + 16 i + j] x[i]);
 *   - NN_OUTER: nn_outer16_acc(w, off, dy, x): w a DiffTensor<float,1>; adds dy[i] x[j] into w's
 *     gradient array at off + 16 i + j (nothing without one); returns void.
 */
#ifndef NB_LANG_INTRINSICS_H
#define NB_LANG_INTRINSICS_H

#include <stddef.h>

typedef enum nb_isig {
    NB_ISIG_FLOAT_UNARY,   /* T f(T), T float-based (ints promote to float) */
    NB_ISIG_FLOAT_BINARY,  /* T f(T, T) */
    NB_ISIG_FLOAT_TERNARY, /* T f(T, T, T) */
    NB_ISIG_NUM_UNARY,     /* T f(T), T numeric (int or float): abs, sign */
    NB_ISIG_NUM_BINARY,    /* T f(T, T): min, max */
    NB_ISIG_NUM_TERNARY,   /* T f(T, T, T): clamp */
    NB_ISIG_VEC_UNARY,     /* T f(T), T float vector: normalize */
    NB_ISIG_VEC_BINARY,    /* T f(T, T), T float vector: reflect */
    NB_ISIG_DOT,           /* S dot(vecN, vecN) */
    NB_ISIG_CROSS,         /* float3 cross(float3, float3) */
    NB_ISIG_LENGTH,        /* S length(vecN) (also scalars: |x|) */
    NB_ISIG_DISTANCE,      /* S distance(vecN, vecN) */
    NB_ISIG_SELECT,        /* T select(boolN, T, T) */
    NB_ISIG_MUL,           /* matrix / vector / scalar products */
    NB_ISIG_TRANSPOSE,     /* matCxR transpose(matRxC) */
    NB_ISIG_DETERMINANT,   /* S determinant(matNxN) */
    NB_ISIG_ANY_ALL,       /* bool f(T) */
    NB_ISIG_FLOAT_TEST,    /* boolN f(floatN): isnan, isinf, isfinite */
    NB_ISIG_BITCAST,       /* asfloat / asint / asuint */
    NB_ISIG_ATOMIC,        /* T atomicAdd(tensor element lvalue, T) */
    NB_ISIG_DIFFPAIR,      /* DifferentialPair<T> diffPair(T p [, T.Differential d]) */
    NB_ISIG_DETACH,        /* T detach(T) */
    NB_ISIG_FWD_DIFF,      /* fwd_diff(f) -> callable */
    NB_ISIG_BWD_DIFF,      /* bwd_diff(f) -> callable */
    NB_ISIG_THREAD_ID,     /* uint3 f() */
    NB_ISIG_TENSOR_SIZE,   /* uint __tensor_size(tensor t, const int d): t's extent in dim d */
    NB_ISIG_TENSOR_DATA_PTR, /* Ptr<T> __tensor_data_ptr(tensor t): its data's address (check_ptr.c) */
    NB_ISIG_TENSOR_PART,   /* a DiffTensor's primal / gradient view, or it with another primal (check_view.c) */
    NB_ISIG_BARRIER,       /* void f(): group barriers / memory fences (emit_group.c) */
    NB_ISIG_WAVE,          /* wave (warp) operations, typed by check_kernel.c ck_group_intrinsic */
    NB_ISIG_NN_MATVEC,     /* float[16] f(Tensor<float,1> w, int offset, float[16] x) */
    NB_ISIG_NN_OUTER,      /* void f(DiffTensor<float,1> w, int offset, float[16] dy, float[16] x) */
    NB_ISIG_TORCH,         /* [TorchEntryPoint] host code (check_host.c, emit_host.c): TorchTensor<T>
                              methods and __dispatch_kernel; never written by name */
} nb_isig;

typedef enum nb_idiff {
    NB_IDIFF_NONE,
    NB_IDIFF_ZERO,
    NB_IDIFF_RULE,
    NB_IDIFF_SPECIAL,
} nb_idiff;

enum {
    NB_IFLAG_KERNEL = 1 << 0, /* only inside [Kernel] functions */
    NB_IFLAG_GROUP = 1 << 2,  /* synchronizes the threads of a group / wave (barriers, Wave*): never
                                 moved, merged or dropped; a [numthreads] kernel reaching it runs its
                                 groups as groups on the CPU too (callgen.c, check_kernel.c) */
    NB_IFLAG_WARP = 1 << 1,   /* warp-cooperative on CUDA (lib/nn.nb, docs/NN.md "Inline MLP"): all 32
                                 lanes of a warp must call it together (the call kernel keeps whole
                                 warps iterating); never moved, merged or dropped by the optimizer */
    NB_IFLAG_EFFECT = 1 << 3, /* has a side effect (host code: allocates a tensor, launches a kernel):
                                 never dropped, merged or moved past another effect */
};

/* X(ID, name, min_args, max_args, SIG, DIFF, FLAGS) */
#define NB_INTRINSICS(X)                                                   \
    /* float elementwise unary */                                          \
    X(EXP,         "exp",         1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(EXP2,        "exp2",        1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(LOG,         "log",         1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(LOG2,        "log2",        1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(LOG10,       "log10",       1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(SQRT,        "sqrt",        1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(RSQRT,       "rsqrt",       1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(RCP,         "rcp",         1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(SIN,         "sin",         1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(COS,         "cos",         1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(TAN,         "tan",         1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(ASIN,        "asin",        1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(ACOS,        "acos",        1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(ATAN,        "atan",        1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(SINH,        "sinh",        1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(COSH,        "cosh",        1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(TANH,        "tanh",        1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(ASINH,       "asinh",       1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(ACOSH,       "acosh",       1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(ATANH,       "atanh",       1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(FLOOR,       "floor",       1, 1, FLOAT_UNARY,   ZERO,    0)         \
    X(CEIL,        "ceil",        1, 1, FLOAT_UNARY,   ZERO,    0)         \
    X(ROUND,       "round",       1, 1, FLOAT_UNARY,   ZERO,    0)         \
    X(TRUNC,       "trunc",       1, 1, FLOAT_UNARY,   ZERO,    0)         \
    X(FRAC,        "frac",        1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(SATURATE,    "saturate",    1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(RADIANS,     "radians",     1, 1, FLOAT_UNARY,   RULE,    0)         \
    X(DEGREES,     "degrees",     1, 1, FLOAT_UNARY,   RULE,    0)         \
    /* numeric elementwise */                                              \
    X(ABS,         "abs",         1, 1, NUM_UNARY,     RULE,    0)         \
    X(SIGN,        "sign",        1, 1, NUM_UNARY,     ZERO,    0)         \
    X(MIN,         "min",         2, 2, NUM_BINARY,    RULE,    0)         \
    X(MAX,         "max",         2, 2, NUM_BINARY,    RULE,    0)         \
    X(CLAMP,       "clamp",       3, 3, NUM_TERNARY,   RULE,    0)         \
    /* float elementwise binary / ternary */                               \
    X(POW,         "pow",         2, 2, FLOAT_BINARY,  RULE,    0)         \
    X(ATAN2,       "atan2",       2, 2, FLOAT_BINARY,  RULE,    0)         \
    X(FMOD,        "fmod",        2, 2, FLOAT_BINARY,  RULE,    0)         \
    X(COPYSIGN,    "copysign",    2, 2, FLOAT_BINARY,  RULE,    0)         \
    X(STEP,        "step",        2, 2, FLOAT_BINARY,  ZERO,    0)         \
    X(LERP,        "lerp",        3, 3, FLOAT_TERNARY, RULE,    0)         \
    X(SMOOTHSTEP,  "smoothstep",  3, 3, FLOAT_TERNARY, RULE,    0)         \
    X(MAD,         "mad",         3, 3, FLOAT_TERNARY, RULE,    0)         \
    X(FMA,         "fma",         3, 3, FLOAT_TERNARY, RULE,    0)         \
    /* geometry */                                                         \
    X(DOT,         "dot",         2, 2, DOT,           RULE,    0)         \
    X(CROSS,       "cross",       2, 2, CROSS,         RULE,    0)         \
    X(LENGTH,      "length",      1, 1, LENGTH,        RULE,    0)         \
    X(DISTANCE,    "distance",    2, 2, DISTANCE,      RULE,    0)         \
    X(NORMALIZE,   "normalize",   1, 1, VEC_UNARY,     RULE,    0)         \
    X(REFLECT,     "reflect",     2, 2, VEC_BINARY,    RULE,    0)         \
    /* selection, matrices, tests */                                       \
    X(SELECT,      "select",      3, 3, SELECT,        RULE,    0)         \
    X(MUL,         "mul",         2, 2, MUL,           RULE,    0)         \
    X(TRANSPOSE,   "transpose",   1, 1, TRANSPOSE,     RULE,    0)         \
    X(DETERMINANT, "determinant", 1, 1, DETERMINANT,   RULE,    0)         \
    X(ANY,         "any",         1, 1, ANY_ALL,       NONE,    0)         \
    X(ALL,         "all",         1, 1, ANY_ALL,       NONE,    0)         \
    X(ISNAN,       "isnan",       1, 1, FLOAT_TEST,    NONE,    0)         \
    X(ISINF,       "isinf",       1, 1, FLOAT_TEST,    NONE,    0)         \
    X(ISFINITE,    "isfinite",    1, 1, FLOAT_TEST,    NONE,    0)         \
    /* bit casts (32-bit) */                                               \
    X(ASFLOAT,     "asfloat",     1, 1, BITCAST,       NONE,    0)         \
    X(ASINT,       "asint",       1, 1, BITCAST,       NONE,    0)         \
    X(ASUINT,      "asuint",      1, 1, BITCAST,       NONE,    0)         \
    /* tensors */                                                          \
    X(ATOMIC_ADD,  "atomicAdd",   2, 2, ATOMIC,        RULE,    0)         \
    X(TENSOR_SIZE, "__tensor_size", 2, 2, TENSOR_SIZE, NONE,    0) /* t.size(d) (check_view.c) */ \
    X(TENSOR_STRIDE, "__tensor_stride", 2, 2, TENSOR_SIZE, NONE, 0) /* t.stride(d): bytes (check_view.c) */ \
    X(TENSOR_DATA_PTR, "__tensor_data_ptr", 1, 1, TENSOR_DATA_PTR, NONE, 0) /* t.data_ptr() */ \
    X(TENSOR_PRIMAL, "__tensor_primal", 1, 1, TENSOR_PART, NONE, 0) /* v.primal (a Tensor) */ \
    X(TENSOR_GRAD, "__tensor_grad", 1, 1, TENSOR_PART, NONE, 0) /* v.diff.diff (a Tensor) */ \
    X(TENSOR_WITH_PRIMAL, "__tensor_with_primal", 2, 2, TENSOR_PART, NONE, 0) /* v.primal = t */ \
    /* [TorchEntryPoint] host code (check_host.c): TorchTensor<T>.alloc(d…) ops[i] = the extents; \
       zerosLike/emptyLike(t); t.size(d); t.dims(); t.stride(d); __dispatch_kernel(k, grid, block)(args…): \
       ops = grid, block, args…, the kernel's name in the IR instruction's text */             \
    X(TORCH_ALLOC, "TorchTensor.alloc",     0, 8, TORCH, NONE, NB_IFLAG_EFFECT) \
    X(TORCH_ZEROS_LIKE, "TorchTensor.zerosLike", 1, 1, TORCH, NONE, NB_IFLAG_EFFECT) \
    X(TORCH_EMPTY_LIKE, "TorchTensor.emptyLike", 1, 1, TORCH, NONE, NB_IFLAG_EFFECT) \
    X(TORCH_SIZE,  "TorchTensor.size",      2, 2, TORCH, NONE, 0) \
    X(TORCH_DIMS,  "TorchTensor.dims",      1, 1, TORCH, NONE, 0) \
    X(TORCH_STRIDE, "TorchTensor.stride",   2, 2, TORCH, NONE, 0) \
    X(DISPATCH_KERNEL, "__dispatch_kernel()", 2, 64, TORCH, NONE, NB_IFLAG_EFFECT) \
    /* a TorchTensor assigned to a TensorView (a struct field passed to a kernel): Slang's implicit \
       TorchTensor -> TensorView conversion in host code; the view is the tensor's handle; a       \
       DiffTensorView field assigned DiffTensorView(x, dx): both handles (check_host.c)          */ \
    X(TORCH_VIEW,  "TorchTensor as TensorView", 1, 2, TORCH, NONE, 0) /* (primal[, grad]) */ \
    /* autodiff */                                                         \
    X(DIFF_PAIR,   "diffPair",    1, 2, DIFFPAIR,      SPECIAL, 0)         \
    X(DETACH,      "detach",      1, 1, DETACH,        SPECIAL, 0)         \
    X(FWD_DIFF,    "fwd_diff",    1, 1, FWD_DIFF,      SPECIAL, 0)         \
    X(BWD_DIFF,    "bwd_diff",    1, 1, BWD_DIFF,      SPECIAL, 0)         \
    /* [Kernel] thread indices */                                          \
    X(DISPATCH_ID, "dispatch_id", 0, 0, THREAD_ID,     NONE,    NB_IFLAG_KERNEL) \
    X(THREAD_IDX,  "cudaThreadIdx", 0, 0, THREAD_ID,   NONE,    NB_IFLAG_KERNEL) \
    X(BLOCK_IDX,   "cudaBlockIdx", 0, 0, THREAD_ID,    NONE,    NB_IFLAG_KERNEL) \
    X(BLOCK_DIM,   "cudaBlockDim", 0, 0, THREAD_ID,    NONE,    NB_IFLAG_KERNEL) \
    X(GRID_DIM,    "cudaGridDim", 0, 0, THREAD_ID,     NONE,    NB_IFLAG_KERNEL) \
    /* thread groups and waves (check_kernel.c types them, emit_group.c emits them) */   \
    X(GROUP_SYNC,    "GroupMemoryBarrierWithGroupSync",  0, 0, BARRIER, NONE, NB_IFLAG_GROUP) \
    X(GROUP_FENCE,   "GroupMemoryBarrier",               0, 0, BARRIER, NONE, NB_IFLAG_GROUP) \
    X(ALL_SYNC,      "AllMemoryBarrierWithGroupSync",    0, 0, BARRIER, NONE, NB_IFLAG_GROUP) \
    X(ALL_FENCE,     "AllMemoryBarrier",                 0, 0, BARRIER, NONE, NB_IFLAG_GROUP) \
    X(DEVICE_SYNC,   "DeviceMemoryBarrierWithGroupSync", 0, 0, BARRIER, NONE, NB_IFLAG_GROUP) \
    X(DEVICE_FENCE,  "DeviceMemoryBarrier",              0, 0, BARRIER, NONE, NB_IFLAG_GROUP) \
    X(WAVE_LANE_INDEX, "WaveGetLaneIndex",     0, 0, WAVE, NONE, NB_IFLAG_GROUP) \
    X(WAVE_LANE_COUNT, "WaveGetLaneCount",     0, 0, WAVE, NONE, NB_IFLAG_GROUP) \
    X(WAVE_IS_FIRST,   "WaveIsFirstLane",      0, 0, WAVE, NONE, NB_IFLAG_GROUP) \
    X(WAVE_SUM,        "WaveActiveSum",        1, 1, WAVE, NONE, NB_IFLAG_GROUP) \
    X(WAVE_PRODUCT,    "WaveActiveProduct",    1, 1, WAVE, NONE, NB_IFLAG_GROUP) \
    X(WAVE_MIN,        "WaveActiveMin",        1, 1, WAVE, NONE, NB_IFLAG_GROUP) \
    X(WAVE_MAX,        "WaveActiveMax",        1, 1, WAVE, NONE, NB_IFLAG_GROUP) \
    X(WAVE_PREFIX_SUM, "WavePrefixSum",        1, 1, WAVE, NONE, NB_IFLAG_GROUP) \
    X(WAVE_PREFIX_PRODUCT, "WavePrefixProduct", 1, 1, WAVE, NONE, NB_IFLAG_GROUP) \
    X(WAVE_BIT_AND,    "WaveActiveBitAnd",     1, 1, WAVE, NONE, NB_IFLAG_GROUP) \
    X(WAVE_BIT_OR,     "WaveActiveBitOr",      1, 1, WAVE, NONE, NB_IFLAG_GROUP) \
    X(WAVE_BIT_XOR,    "WaveActiveBitXor",     1, 1, WAVE, NONE, NB_IFLAG_GROUP) \
    X(WAVE_ALL_TRUE,   "WaveActiveAllTrue",    1, 1, WAVE, NONE, NB_IFLAG_GROUP) \
    X(WAVE_ANY_TRUE,   "WaveActiveAnyTrue",    1, 1, WAVE, NONE, NB_IFLAG_GROUP) \
    X(WAVE_BALLOT,     "WaveActiveBallot",     1, 1, WAVE, NONE, NB_IFLAG_GROUP) \
    X(WAVE_COUNT_BITS, "WaveActiveCountBits",  1, 1, WAVE, NONE, NB_IFLAG_GROUP) \
    X(WAVE_READ_AT,    "WaveReadLaneAt",       2, 2, WAVE, NONE, NB_IFLAG_GROUP) \
    X(WAVE_READ_FIRST, "WaveReadLaneFirst",    1, 1, WAVE, NONE, NB_IFLAG_GROUP) \
    /* inline-MLP building blocks (lib/nn.nb): 16x16 row-major matrices at w[offset ..        \
     * offset + 256); CUDA: warp-cooperative mma.sync (f16 operands, f32 accumulation) */      \
    X(NN_MATVEC16,   "nn_matvec16",   3, 3, NN_MATVEC, NONE, NB_IFLAG_WARP) /* W x */       \
    X(NN_MATVEC16_T, "nn_matvec16_t", 3, 3, NN_MATVEC, NONE, NB_IFLAG_WARP) /* W^T x */     \
    X(NN_OUTER16_ACC,"nn_outer16_acc",4, 4, NN_OUTER,  NONE, NB_IFLAG_WARP) /* dW += dy x^T */

typedef enum nb_intrinsic {
#define NB_X_(id, name, mn, mx, sig, diff, flags) NB_INTR_##id,
    NB_INTRINSICS(NB_X_)
#undef NB_X_
    NB_INTR_COUNT
} nb_intrinsic;

typedef struct nb_intrinsic_info {
    const char *name;
    int min_args, max_args;
    nb_isig sig;
    nb_idiff diff;
    unsigned flags;
} nb_intrinsic_info;

/* Table entry for id (NULL when out of range). */
const nb_intrinsic_info *nb_intrinsic_get(int id);
/* Id of a built-in name, or -1. */
int nb_intrinsic_lookup(const char *name);
static inline const char *nb_intrinsic_name(int id)
{
    const nb_intrinsic_info *i = nb_intrinsic_get(id);
    return i ? i->name : "?";
}

/* `$P_name` in an __intrinsic_asm text (Slang's type-prefixed prelude functions, `$P_exp($0)` ->
 * F32_exp): the C / CUDA math function for `name` (len bytes) on a float (is_double 0) or double
 * value, e.g. expf / exp; NULL for a name nabla does not map. */
const char *nb_asm_prefixed_math(const char *name, size_t len, int is_double);

#endif

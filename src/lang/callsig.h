/* The contract between the compiler and the vectorized-call layer.
 *
 * A vectorized call `f(a, b, …)` over arrays runs a generated *call kernel*: for every index of
 * the kernel's N-d shape it loads each argument's value, calls f, and stores the result and any
 * out/inout values. The call layer (src/call) decides how each argument is bound and describes
 * that as an nb_call_sig; the compiler (src/lang) generates the kernel for that signature and
 * returns an nb_call_layout saying where in the kernel's parameter block each piece goes. The
 * signature holds dtypes and ranks, never extents, so a new batch size reuses the same kernel.
 *
 * Struct parameters are flattened field by field ("leaves"): each leaf is bound separately, so a
 * struct whose `pos` field is an array and `scale` field is a uniform is fine.
 *
 * Parameter block (one contiguous byte buffer, layout fixed by nb_call_layout):
 *   int64  shape[ndim]                     kernel shape
 *   per leaf, one of
 *     UNIFORM: the value's bytes inline (its scalars in the leaf's storage dtype, C order)
 *     ARRAY:   uint64 data; int64 strides[ndim]; int64 inner[value_rank]
 *              data = address of element [0,…,0]; strides = bytes per kernel dim (0 = broadcast;
 *              already right-aligned by the call layer); inner = bytes per dim of the value
 *              itself (float3 -> [3], float2x3 -> [2,3]); may be anything (views are fine)
 *     TENSOR:  uint64 data; int64 shape[rank]; int64 strides[rank] (a whole array given to a
 *              Tensor<T,N> parameter; not broadcast; for DiffTensor also uint64 grad; int64
 *              grad_strides[rank])
 *   the result leaves (if the function returns non-void and a result is wanted) are ARRAY leaves
 *   after the parameters' ones: one for a scalar/vector/matrix/array result, one per field of a
 *   struct result ("_result.pos", depth-first, as nb_fn_info.results).
 *
 * Generated entry points (names from nb_call_layout.entry):
 *   CPU:  void ENTRY(const void *params, int64_t begin, int64_t end)   — runs indices [begin,end)
 *   CUDA: extern "C" __global__ void ENTRY(PARAMS_STRUCT params)        — grid-stride over numel
 *   (sig.blocks: CPU runs blocks [begin, end); CUDA is launched <<<grid, block>>> exactly)
 *         (the block is passed by value; its size is nb_call_layout.size, <= 4 KiB)
 */
#ifndef NB_LANG_CALLSIG_H
#define NB_LANG_CALLSIG_H

#include <stddef.h>
#include <stdint.h>

#include "nabla/dtype.h"

#define NB_CALL_MAX_LEAVES 64

/* ---- bounds checks --------------------------------------------------------------------------
 * Every tensor element access (load, store, atomic, gradient access of a DiffTensor) and every
 * local array / matrix / vector index that is not a constant is checked against its extent. An
 * access out of range does not touch memory (a load gives 0, a store is dropped, an array index
 * is replaced by 0) and records itself in the launch's nb_oob_rec (the block's oob pointer: host
 * memory on the CPU, device memory on CUDA; host-mapped memory for deferred checks); the first one
 * wins (compare-and-swap on flag). The call layer reads the record after the launch (or, deferred,
 * at the next check point) and turns it into an error. */
#define NB_OOB_MAX_SITES 32
enum { NB_OOB_TENSOR = 1, NB_OOB_TENSOR_GRAD = 2, NB_OOB_ARRAY = 3 };
typedef struct nb_oob_rec {
    unsigned int flag;      /* 0: no error; set to 1 by the first offending access */
    int kind;               /* NB_OOB_* */
    int site;               /* TENSOR*: 1 + the leaf index (0: unknown); ARRAY: layout.oob_sites index */
    int rank;               /* dims of idx / shape */
    long long idx[8];
    long long shape[8];
    unsigned long long note; /* 0, or the address of a word the kernel sets to 1 after filling the
                              * record (deferred checks: call.c reads one word, not every record) */
} nb_oob_rec;           /* (the generated code declares the same struct) */

typedef enum nb_bind_kind {
    NB_BIND_UNIFORM, /* one value for every thread, passed inline */
    NB_BIND_ARRAY,   /* one value per kernel index, read/written through strides */
    NB_BIND_TENSOR,  /* a whole array given to a Tensor<T,N>/DiffTensor<T,N> parameter */
    NB_BIND_GEN,     /* a generator (nb_leaf_sig.gen): the value is computed per kernel index */
} nb_bind_kind;

/* Generators (SlangPy's call_id / thread_id / grid / wang_hash / rand_float; module.h
 * nb_generator): a leaf's value computed in the kernel from the kernel index. Their GEN block in
 * the parameter block (at nb_leaf_layout.offset, n = the leaf's scalar count, 1 for a scalar):
 *   INDEX kinds (NB_GEN_SIG_INDEX):  int64 off[n]; int64 stride[n]; int64 kdim[n]
 *       component i in array order (vectors: x is the LAST one, i = n-1) is
 *       off[i] + (kdim[i] >= 0 ? idx[kdim[i]] : 0) * stride[i]
 *   THREAD:                         (none) x = the linear kernel index (row-major), y = z = 0
 *   HASH / RAND (NB_GEN_SIG_HASH, _RAND): uint32 seed; int32 warmup; float min; float max
 *       h = tid * (n > 1 ? n : 1); warmup x h = wang(h); h ^= seed; component i: h = wang(h)
 *       (RAND: min + (max - min) * (h & 0x7fffff) / 2^23), tid the linear kernel index */
typedef enum nb_gen_sig {
    NB_GEN_SIG_NONE = 0,
    NB_GEN_SIG_INDEX = 1,
    NB_GEN_SIG_THREAD = 2,
    NB_GEN_SIG_HASH = 3,
    NB_GEN_SIG_RAND = 4,
} nb_gen_sig;

typedef enum nb_call_target { NB_TARGET_C = 0, NB_TARGET_CUDA = 1 } nb_call_target;

typedef enum nb_call_mode {
    NB_CALL_PRIMAL = 0, /* plain call */
    NB_CALL_FWD = 1,    /* forward mode (issue: autodiff) */
    NB_CALL_BWD = 2,    /* reverse mode (issue: autodiff) */
} nb_call_mode;

typedef struct nb_leaf_sig {
    int param;          /* parameter index; -1 for result leaves */
    const char *path;   /* "x", "s.pos", "_result" (for messages and names) */
    nb_bind_kind bind;
    nb_dtype storage;   /* dtype of the scalars in memory; converted to the leaf's type on load */
    int vec4;           /* CUDA ARRAY leaf of a float[N] parameter (N % 4 == 0), f32, whose every
                           row is contiguous and 16-byte aligned (checked by the call layer):
                           read with 16-byte loads (a quarter of the load instructions; each
                           thread reading its own row is bound by L1 requests otherwise) */
    int gen;            /* NB_BIND_GEN: nb_gen_sig */
    int owned;          /* ARRAY leaf of a scalar gradient of a bwds call whose every element
                           belongs to exactly one kernel index (checked by the call layer: no
                           stride 0 on a kernel dim of extent > 1, no two indices on one
                           element): the accumulated gradient is then added with a plain read-
                           modify-write, not an atomic add, and never summed as a broadcast
                           (ignored on leaves that do not accumulate) */
    int bcast;          /* with contig4: an input ARRAY leaf at stride 0 along the kernel's last
                           dim (one element for every index, e.g. a device scalar [1], or one
                           per row of a 2-D kernel, e.g. a per-channel operand): the quads read
                           it in place, not through a vector buffer */
    int shacc;          /* CUDA, ARRAY leaf of a scalar f32/f64 gradient of a bwds call broadcast
                           over some kernel dims but not the last (lanes of a warp add into
                           different elements, e.g. a per-feature gain g [F] over x [N, F]) whose
                           elements all lie within NB_SHACC_MAX of its first (checked by the call
                           layer: nb_call_shared_grads): each thread block sums it in shared
                           memory (shared atomics), then adds the block's sums into the array with
                           one atomic per element per block (ignored by kernels with explicit
                           blocks, thread groups or warp intrinsics, and on the CPU) */
} nb_leaf_sig;

/* nb_leaf_sig.shacc: the most elements (the leaf's span, first to last element touched) summed
 * per block in shared memory (4 KiB of f32, 8 KiB of f64 per leaf), and the most such leaves */
#define NB_SHACC_MAX 1024
#define NB_SHACC_LEAVES 4

typedef struct nb_call_sig {
    const char *func;       /* function name in the module */
    int overload;           /* index among same-named functions (0 if unique) */
    nb_call_target target;
    nb_call_mode mode;
    int ndim;               /* kernel rank, 0..8 */
    int nleaves;
    nb_leaf_sig leaves[NB_CALL_MAX_LEAVES]; /* in parameter order, struct fields depth-first */
    int has_result;         /* store the return value through the last leaves (nb_fn_info.nresults) */
    int blocks;             /* a [Kernel] launched with explicit blocks (slangtorch's launchRaw):
                               ndim == 6, shape = {grid z, y, x, block z, y, x}; the entry runs
                               blocks (CPU: [begin, end) of the linear block index; CUDA: a real
                               <<<grid, block>>> launch) and every thread of each */
    int contig4;            /* CUDA, a 1-D kernel (or 2-D with rows of a multiple of 4) whose
                               every ARRAY leaf is a scalar of 2 or 4 bytes, contiguous (stride =
                               its size, rows back to back) and aligned to 4 elements, or a
                               bcast input (checked by the call layer: nb_call_contig4_ok): each
                               thread runs 4 consecutive indices of one row with one vector load
                               / store per array (the tail scalar); ignored where the kernel has
                               anything else (a generator, a tensor, a gradient added
                               atomically, thread ids) */
} nb_call_sig;

typedef struct nb_leaf_layout {
    size_t offset;          /* UNIFORM: value bytes; ARRAY/TENSOR: the data pointer; GEN: its block */
    size_t strides_offset;  /* ARRAY: int64[ndim]; TENSOR: int64 shape[rank] then strides[rank] */
    size_t inner_offset;    /* ARRAY: int64[value_rank] */
    size_t grad_offset;     /* DiffTensor: uint64 grad, then int64 grad_strides[rank]; 0: none */
    size_t value_bytes;     /* UNIFORM: size of the inline value */
    int value_rank;         /* dims of one value (float3 -> 1, float -> 0) */
    long long value_shape[8];
} nb_leaf_layout;

typedef struct nb_call_layout {
    size_t size;                 /* bytes of the parameter block */
    size_t shape_offset;         /* int64 shape[ndim] */
    nb_leaf_layout leaves[NB_CALL_MAX_LEAVES];
    char entry[128];             /* generated entry point's symbol name */
    int blocks_per_sm;           /* CUDA: cap on the grid-stride launch's blocks per SM (0: the
                                    default); kernels that reduce broadcast gradients per block run
                                    one wave of fewer, longer blocks (fewer block reductions) */
    int group_size;              /* > 0: a [numthreads] kernel run as thread groups of this many
                                    threads: the entry runs group indices [0, prod(shape) / group_size)
                                    (CUDA: one block per group; CPU: a group's threads as fibers) */
    size_t oob_offset;           /* uint64 address of the launch's nb_oob_rec (bounds checks) */
    int bounds_checked;          /* the kernel has bounds checks (else it cannot index out of
                                    range: no record, and no read-back after a CUDA launch) */
    int shared_mem;              /* a [Kernel] without [numthreads] that uses groupshared memory:
                                    it needs explicit blocks (sig.blocks); the call layer refuses a
                                    launch over a thread grid */
    int prints;                  /* the kernel calls printf: a CUDA launch synchronises so that the
                                    device's printf buffer reaches stdout before the call returns */
    int noob_sites;              /* local-array index sites (nb_oob_rec.kind == NB_OOB_ARRAY) */
    char oob_sites[NB_OOB_MAX_SITES][96]; /* "array 'a' of length 4 in function 'g'" */
} nb_call_layout;

#endif

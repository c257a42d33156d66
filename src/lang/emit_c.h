/* C / CUDA C emitter over the IR (private to src/lang; owner: IR + back ends).
 *
 * One emitter, two targets. Output layout:
 *   prelude (C: <math.h> <stdint.h> <string.h> + a bool typedef; CUDA: nothing)
 *   types    typedefs in dependency order: vectors `nb_float3 {x,y,z}`, matrices
 *            `nb_float3x4 { nb_float4 r[3]; }`, arrays `nb_arr_float_4 { float a[4]; }`, structs by
 *            their source names, tensor views `nb_tensor_float_2 { char *data; shape; strides }`
 *   helpers  small static inline functions generated on demand (nb_add_float3, nb_make_S, …)
 *   globals  static const tables
 *   functions one per IR function, named as in the source (overloads add, add_1, …)
 *   tail     the call-kernel entry points (callgen.c)
 * half is computed as float on both targets (converted only when loaded / stored from memory).
 */
#ifndef NB_LANG_EMIT_C_H
#define NB_LANG_EMIT_C_H

#include "core/strbuf.h"
#include "lang/callsig.h"
#include "lang/ir.h"

typedef struct nb_emitter {
    nb_ir_module *m;
    nb_type_table *tt;
    nb_call_target target;
    nb_strbuf types, helpers, globals, protos, funcs, tail;
    /* registries */
    unsigned char *type_done; /* by type id */
    int ntype_done;
    char **type_names;        /* by type id: emitted C name */
    char **helper_names;
    int nhelpers, cap_helpers;
    unsigned char *func_done; /* by function index */
    unsigned char *global_done;
    int ok;                   /* 0 after an emission error */
    char err[512];
    /* per-function state */
    nb_ir_func *f;
    char **var_names;
    char **val_names;         /* by inst id (NULL = inlined) */
    unsigned char *inlined;   /* by inst id */
    nb_ir_inst **user;        /* by inst id: the single user */
    struct nb_strmap *names;  /* this function's names (emit_body.c: unique_name) */
    struct nb_strmap *func_cnames; /* cnames of m->funcs[0 .. nfunc_cnames) */
    int nfunc_cnames;
    int label_counter;
    int *loop_labels;         /* stack: label id or -1 (plain continue) */
    int nloops;
    int indent;
    int warp_kernel;          /* CUDA call kernel iterating whole warps (callgen.c, emit_nn.c) */
    /* bounds checks (callsig.h): local-array sites, described for the error message */
    int noob_sites;
    char oob_sites[NB_OOB_MAX_SITES][96];
    int unchecked;            /* emit no bounds checks (nb_compile_opts.unchecked) */
    int host_views;           /* the host unit (emit_host.c): a TensorView value is a tensor handle
                                 and its gradient's ({ long long h, g; }), not device data */
    int oob_used;             /* some bounds check was emitted (nb_oob_report is needed) */
    int oob_cur_used;         /* an index check reads nb_oob_cur: the entry must set it */
    /* target-specific code (emit_target.c) */
    const struct nb_source_set *src; /* for diagnostics with a location (may be NULL) */
    nb_strbuf preludes;       /* __requirePrelude texts, once each, at the top of the source */
    nb_strbuf prelude_keys;   /* the texts seen (each followed by \1) */
    int need_stdio;           /* printf is used (the C target includes <stdio.h>) */
    /* thread groups (emit_group.c) */
    int group_kernel;         /* the call kernel runs [numthreads] groups (CUDA: a block per group) */
    int need_fibers;          /* the C target's group runtime is used (<ucontext.h>) */
    int wave_sites;           /* Wave* call sites so far (each gets its own id) */
} nb_emitter;

void nb_emit_init(nb_emitter *e, nb_ir_module *m, nb_call_target target);
/* [TorchEntryPoint] host code's intrinsics (TorchTensor methods, __dispatch_kernel; emit_host.c):
 * calls through the host runtime table of the host unit's prelude. */
void nb_emit_host_intrinsic(nb_emitter *e, const nb_ir_inst *x, const nb_type *rt, const nb_type *const *at,
                            const char *const *args, int n, nb_strbuf *o);
/* Barriers and Wave* intrinsics (emit_group.c); the C target's group runtime (fibers). */
void nb_emit_need_group_runtime(nb_emitter *e);
void nb_emit_group_intrinsic(nb_emitter *e, int id, const nb_type *rt, const nb_type *const *at, const char *const *args, int n,
                             nb_strbuf *o);
void nb_emit_free(nb_emitter *e);
void nb_emit_fail(nb_emitter *e, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Bounds checks (callsig.h): an expression for `index` (a C expression) checked against
 * `length`; `what` describes the array ("array 'a' of length 4 in function 'g'"). */
void nb_emit_checked_index(nb_emitter *e, const char *index, int length, const char *what, nb_strbuf *o);

/* The C name of a type (registers its typedef and those of its parts). */
const char *nb_emit_ctype(nb_emitter *e, const nb_type *t);
/* C name of a scalar kind ("float" for half). */
const char *nb_emit_scalar_ctype(nb_scalar_kind s);
/* Suffix to access component k of a vector/matrix value (".x", ".r[1].y"); "" for scalars. */
void nb_emit_comp(const nb_type *t, int k, nb_strbuf *out);
extern const char *const nb_emit_comp_name[4]; /* "x", "y", "z", "w" */
/* Registers helper `name`: returns 1 if the caller must now append its definition to
 * e->helpers (after registering what it depends on), 0 if it exists already. */
int nb_emit_need_helper(nb_emitter *e, const char *name);
/* "static inline" / "static __device__ __forceinline__" */
const char *nb_emit_inline_kw(const nb_emitter *e);
/* Ensures the helper converting between storage dtype and scalar kind exists; writes an
 * expression loading from `addr` (a char pointer expression) into out. */
void nb_emit_load_scalar(nb_emitter *e, nb_dtype storage, nb_scalar_kind s, const char *addr, nb_strbuf *out);
void nb_emit_store_scalar(nb_emitter *e, nb_dtype storage, nb_scalar_kind s, const char *addr,
                          const char *value, nb_strbuf *out);
nb_dtype nb_emit_natural_dtype(nb_scalar_kind s);

/* Expression helpers used by the body emitter (emit_c.c). */
void nb_emit_literal(nb_emitter *e, const nb_type *t, const nb_ir_cval *cv, nb_strbuf *out);
void nb_emit_zero(nb_emitter *e, const nb_type *t, nb_strbuf *out);
/* Writes the helper name for op over type t (registers the helper). */
const char *nb_emit_op_helper(nb_emitter *e, nb_ir_op op, const nb_type *t, const nb_type *from);
const char *nb_emit_make_helper(nb_emitter *e, const nb_type *t);
const char *nb_emit_swizzle_helper(nb_emitter *e, const nb_type *from, const int *swz, int n);
const char *nb_emit_get_helper(nb_emitter *e, const nb_type *t);
/* Renders intrinsic `id` with result type rt over rendered args (types in at[]). */
void nb_emit_intrinsic(nb_emitter *e, int id, const nb_type *rt, const nb_type *const *at, const char *const *args,
                       int n, nb_strbuf *out);
/* emit_c.c, shared with the intrinsics (emit_intrin.c). */
const char *nb_emit_registered(nb_emitter *e, const char *name); /* the module's copy of a helper name */
/* "nb_<prefix>_<t>[_<t2>]" in buf (returned) */
const char *nb_emit_helper_name(nb_emitter *e, const char *prefix, const nb_type *t, const nb_type *t2,
                                char *buf, size_t cap);
int nb_emit_is_float_scalar(nb_scalar_kind s); /* float, half or double */
/* libm name of `base` for s in buf: "sinf", "sin" for double */
const char *nb_emit_math_fn(nb_scalar_kind s, const char *base, char *buf, size_t cap);
void nb_emit_need_bits(nb_emitter *e); /* defines nb_f32_bits / nb_bits_f32 once */
/* The inline-MLP intrinsics (intrinsics.h NN_*; emit_nn.c): C loops, warp-cooperative CUDA. */
void nb_emit_nn_intrinsic(nb_emitter *e, int id, const nb_type *const *at, const char *const *args, int n,
                          nb_strbuf *out);
/* 1 when the emitted code accumulates weight gradients per block (CUDA nn_outer16_acc): the call
 * kernel must then call nb_nn_block_begin() / nb_nn_block_end() in every thread (emit_nn.c). */
int nb_emit_nn_block_accum(const nb_emitter *e);
/* Name of the warp-aggregated float atomic add used for DiffTensor gradients in warp kernels. */
const char *nb_emit_nn_warp_red_helper(nb_emitter *e);
/* Tensor element access helpers: returns the helper name ("nb_tload_tensor_float_2"). */
/* grad: the DiffTensor's gradient buffer (t.grad, t.grad_strides; NULL: loads give 0, stores and
 * atomic adds do nothing) instead of its data. */
const char *nb_emit_tensor_helper(nb_emitter *e, nb_ir_op op, const nb_type *tensor, int grad);
/* A DiffTensor's parts (check_view.c): which 0 = its primal Tensor, 1 = its gradient as a Tensor,
 * 2 = (dt, t) -> dt with t as its primal. Returns the helper's name. */
const char *nb_emit_tensor_part(nb_emitter *e, int which, const nb_type *dt, const nb_type *rt);

/* Scalar C expression of an IR operator over rendered operands (no outer parentheses). */
void nb_emit_scalar_op(nb_ir_op op, nb_scalar_kind s, nb_scalar_kind to, const char *a, const char *b, nb_strbuf *o);
/* Registers the nb_thread_ids struct of [Kernel] functions; returns its name. */
const char *nb_emit_thread_ids_type(nb_emitter *e);

/* Target-specific code (emit_target.c). The variant of f for this emitter's target (lower_target.h). */
nb_ir_func *nb_emit_variant(const nb_emitter *e, nb_ir_func *f);
/* Before emitting f (a variant): fails with a diagnostic when f's __target_switch has no case
 * for this target, registers f's preludes; returns 1 when f is an __intrinsic_asm function
 * (nothing to emit: calls expand it), 0 otherwise. */
int nb_emit_target_prepare(nb_emitter *e, nb_ir_func *f);
/* The expansion of __intrinsic_asm function c called with rendered arguments args[] (types
 * at[]) and result type rt: $0..$9, $T0..$T9, $TR, $[i]. */
void nb_emit_asm_call(nb_emitter *e, nb_ir_func *c, const char *const *args, const nb_type *const *at, int n,
                      nb_strbuf *out);
/* printf(format, args…) with each argument cast as its conversion expects. */
void nb_emit_printf(nb_emitter *e, const char *format, const char *const *args, const nb_type *const *at, int n,
                    nb_strbuf *out);

/* Function bodies (emit_body.c). Emits f and, first, everything it calls and reads. */
void nb_emit_function(nb_emitter *e, nb_ir_func *f);
/* Emits every function of the module. */
void nb_emit_all(nb_emitter *e);
/* A name safe to use in C / CUDA (C keywords, libm and CUDA names get a trailing '_'). */
const char *nb_emit_safe_name(nb_emitter *e, const char *name);
/* Concatenates prelude, types, helpers, globals, prototypes, functions and tail. */
void nb_emit_finish(nb_emitter *e, nb_strbuf *out);

#endif

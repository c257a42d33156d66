/* The kernel language's intermediate representation (private to src/lang).
 *
 * A *structured* SSA IR: every function body is a tree of regions (nb_ir_block), each a list of
 * typed three-address instructions. Control flow is structured (if / loop / switch instructions
 * own their child regions; break / continue / return are terminators), so emitters produce
 * readable C and the autodiff passes see loop structure (reverse mode through bounded loops).
 *
 *   values     every instruction with a non-void type is an SSA value (its result). A value may
 *              be used by later instructions of its own region and of regions nested inside it
 *              (dominance = "defined earlier in this region or an enclosing one").
 *   variables  mutable state lives in explicit slots (nb_ir_var): locals, parameters, temporaries.
 *              LOAD / STORE address a slot through an *access path* (field, element, component,
 *              swizzle steps), so `a.pos[i].x = v` is one STORE with three steps.
 *   parameters each parameter is a var; `in` parameters are by value (the callee may assign its
 *              copy), `out`/`inout` are by reference (the C emitters pass a pointer). A CALL passes
 *              by-reference arguments as vars (refs[]), by-value arguments as operands.
 *   primal vs derivative  every instruction and var carries flags (NB_IRF_DERIV marks code that a
 *              derivative pass generated; NB_IRF_NO_DIFF marks values that must not be
 *              differentiated, e.g. detach()); every function records its role (primal, forward
 *              or backward derivative of another function).
 *
 * Printer syntax (stable; used by tests):
 *   func add(in $a: float, in $b: float) -> float {
 *     %0 = load $a : float
 *     %1 = load $b : float
 *     %2 = add %0, %1 : float
 *     return %2
 *   }
 */
#ifndef NB_LANG_IR_H
#define NB_LANG_IR_H

#include <stdint.h>

#include "core/arena.h"
#include "core/strbuf.h"
#include "lang/ast.h"
#include "lang/types.h"

typedef struct nb_ir_inst nb_ir_inst;
typedef struct nb_ir_block nb_ir_block;
typedef struct nb_ir_var nb_ir_var;
typedef struct nb_ir_func nb_ir_func;
typedef struct nb_ir_global nb_ir_global;
typedef struct nb_ir_module nb_ir_module;

#define NB_IR_OPS(X)                                                                             \
    /* values */                                                                                 \
    X(CONST, "const")       /* scalar/vector/matrix literal: cv[ncomponents] */                  \
    X(ZERO, "zero")         /* the all-zero value of any type */                                 \
    X(GLOBAL, "global")     /* value of a global constant (global) */                            \
    X(NEG, "neg") X(NOT, "not") X(BNOT, "bnot")                                                  \
    X(ADD, "add") X(SUB, "sub") X(MUL, "mul") X(DIV, "div") X(MOD, "mod")                        \
    X(BAND, "band") X(BOR, "bor") X(BXOR, "bxor") X(SHL, "shl") X(SHR, "shr")                   \
    X(LAND, "land") X(LOR, "lor")                                                                \
    X(EQ, "eq") X(NE, "ne") X(LT, "lt") X(LE, "le") X(GT, "gt") X(GE, "ge")                      \
    X(CONVERT, "convert")   /* same shape, other scalar kind (component-wise) */                 \
    X(SPLAT, "splat")       /* scalar -> vector/matrix */                                        \
    X(SELECT, "select")     /* select c, a, b (c bool scalar, or bool vector: per component) */  \
    X(CONSTRUCT, "construct") /* vector/matrix from scalars (row-major), array, struct, pair */  \
    X(EXTRACT, "extract")   /* ops[0] base; field >= 0: struct field / constant component;      \
                               field < 0: dynamic index ops[1] (array elem, vector comp, row) */ \
    X(SWIZZLE, "swizzle")   /* vector -> vector/scalar by swz[nswz] */                           \
    X(INTRIN, "intrin")     /* intrinsic (lang/intrinsics.h id) over ops */                      \
    X(CALL, "call")         /* callee(args): ops[i] by value or refs[i] by reference */         \
    X(LOAD, "load")         /* var + path; ops = the path's dynamic indices */                   \
    X(STORE, "store")       /* var + path = ops[0]; ops[1..] the path's dynamic indices */       \
    X(TLOAD, "tload")       /* tensor element: ops[0] tensor, ops[1..rank] indices */            \
    X(TSTORE, "tstore")     /* ops[0] tensor, ops[1..rank] indices, ops[rank+1] value */         \
    X(TATOMIC_ADD, "tatomic_add") /* like TSTORE, returns the old value */                       \
    X(PRINTF, "printf")     /* printf(text, ops…): a side effect only (check_target.c) */      \
    /* pointers (Slang Ptr<T>; ir_ptr.c): paths as LOAD / STORE's, relative to the pointee */     \
    X(ADDR, "addr")         /* Ptr to var + path (ops = indices), or (var NULL) to *ops[0] + path */ \
    X(PLOAD, "pload")       /* *ops[0] + path; ops[1..] the path's indices */                    \
    X(PSTORE, "pstore")     /* *ops[0] + path = ops[1]; ops[2..] the path's indices */           \
    X(PADD, "padd")         /* ops[0] + ops[1] elements (int) */                                 \
    /* structured control flow (void) */                                                         \
    X(IF, "if")             /* ops[0] cond; blocks[0] then, blocks[1] else */                    \
    X(LOOP, "loop")         /* blocks[0] cond (value ops[0] defined in it; NULL = forever),      \
                               blocks[1] body, blocks[2] step (continue target);                 \
                               test_last: do-while */                                            \
    X(SWITCH, "switch")     /* ops[0] selector; blocks[i] one per case; C fall-through */       \
    X(BREAK, "break")       /* innermost loop or switch */                                       \
    X(CONTINUE, "continue") /* innermost loop */                                                 \
    X(RETURN, "return")     /* ops[0] value or none */

typedef enum nb_ir_op {
#define NB_X_(id, name) NB_IR_##id,
    NB_IR_OPS(NB_X_)
#undef NB_X_
    NB_IR_OP_COUNT
} nb_ir_op;

const char *nb_ir_op_name(nb_ir_op op);

/* Instruction / var flags. */
enum {
    NB_IRF_DERIV = 1 << 0,   /* generated by a derivative pass (not primal code) */
    NB_IRF_NO_DIFF = 1 << 1, /* value is not differentiated (detach, no_diff) */
    NB_IRF_UNROLL = 1 << 2,  /* LOOP: [ForceUnroll] / [unroll] */
    NB_IRF_TEST_LAST = 1 << 3, /* LOOP: condition after the body (do-while) */
    NB_IRF_ACCUM = 1 << 4,   /* out param of a bwds call wrapper: the call kernel ADDS its value into
                                the bound array (atomically; lang/ad.h nb_ad_call_wrapper) */
    NB_IRF_TGRAD = 1 << 5,   /* TLOAD / TSTORE / TATOMIC_ADD on a DiffTensor's gradient buffer
                                (derivative code; a NULL gradient reads 0 and ignores writes) */
    NB_IRF_SHARED = 1 << 6,  /* var: groupshared, one instance per thread group (CUDA __shared__,
                                C static __thread); never initialized, never a dead store */
    NB_IRF_HIDDEN = 1 << 7,  /* param: a module-scope buffer passed on (check_kernel.c); derivatives
                                keep it, after every other parameter (also after bwd's _dout) */
    NB_IRF_ONCE = 1 << 8,    /* TSTORE of storeOnce: reverse mode reads the element's gradient and
                                leaves it (a plain store consumes it: reads, then zeroes it, as
                                Slang's DiffTensorView store / AtomicAdd.store_backward) */
};

/* One component of a constant: integers (bool, int, uint, int64, uint64) in i, floats in f. */
typedef union nb_ir_cval {
    int64_t i;
    double f;
} nb_ir_cval;

typedef enum nb_ir_step_kind {
    NB_IR_STEP_FIELD,   /* struct field `index` (also DifferentialPair: 0 = p, 1 = d) */
    NB_IR_STEP_INDEX,   /* array element / vector component / matrix row: operand `index` of the
                           instruction's ops holds the (integer) index value */
    NB_IR_STEP_SWIZZLE, /* vector components swz[n] (last step only) */
} nb_ir_step_kind;

typedef struct nb_ir_step {
    nb_ir_step_kind kind;
    int index;          /* FIELD: field number; INDEX: operand number in ops[] */
    int swz[4], nswz;   /* SWIZZLE */
    const nb_type *type; /* type after this step */
} nb_ir_step;

typedef struct nb_ir_case {
    int64_t *values;
    int nvalues;
    int is_default;
} nb_ir_case;

struct nb_ir_block {
    nb_ir_inst *first, *last;
    nb_ir_inst *owner;   /* control instruction that owns this region; NULL = function body */
    nb_ir_func *func;
};

struct nb_ir_inst {
    nb_ir_op op;
    int id;                   /* value number (dense per function; printer's %id) */
    const nb_type *type;      /* result type (void type for statements) */
    const char *name;         /* source name hint (a variable the value came from) or NULL */
    nb_loc loc;
    unsigned flags;
    nb_ir_inst **ops;
    int nops;
    nb_ir_block *parent;
    nb_ir_inst *prev, *next;

    /* per-op payload */
    nb_ir_cval *cv;           /* CONST: nb_type_components(type) values */
    int field;                /* EXTRACT: field/component number, or -1 for dynamic ops[1] */
    int swz[4], nswz;         /* SWIZZLE */
    int intrinsic;            /* INTRIN: nb_intrinsic id */
    nb_ir_func *callee;       /* CALL */
    nb_ir_var **refs;         /* CALL: per argument, the var passed by reference or NULL */
    nb_ir_global *global;     /* GLOBAL */
    nb_ir_var *var;           /* LOAD / STORE */
    nb_ir_step *path;         /* LOAD / STORE */
    int npath;
    nb_ir_block **blocks;     /* IF / LOOP / SWITCH */
    int nblocks;
    nb_ir_case *cases;        /* SWITCH: one per block */
    int64_t max_iters;        /* LOOP: -1 unknown */
    const char *text;         /* PRINTF: the format as written (quotes and escapes included) */

    int uses;                 /* scratch: use count (nb_ir_count_uses) */
    void *aux;                /* scratch for passes / emitters */
};

struct nb_ir_var {
    const char *name;         /* source name (unique names are the emitter's job) */
    const nb_type *type;
    int id;
    int param;                /* parameter index, -1 for locals */
    nb_param_dir dir;         /* parameters */
    int is_this;              /* the implicit `this` parameter of a method */
    int is_temp;              /* compiler temporary */
    unsigned flags;
    nb_decl *decl;            /* source declaration, if any */
};

typedef enum nb_ir_func_role {
    NB_IR_PRIMAL = 0,
    NB_IR_FWD_DERIV,          /* forward-mode derivative of `primal` */
    NB_IR_BWD_DERIV,          /* reverse-mode derivative of `primal` */
} nb_ir_func_role;

struct nb_ir_func {
    const char *name;         /* source name ("add", "S.length") */
    const char *cname;        /* unique emitted name ("add", "add_1", "S_length") */
    nb_decl *decl;
    const nb_type *ret;       /* void type when none */
    nb_ir_var **params;       /* includes `this` first for non-static methods */
    int nparams;
    nb_ir_var **vars;         /* every var (params first) */
    int nvars, cap_vars;
    nb_ir_block *body;
    int next_id;
    int is_kernel;            /* [Kernel] / [CudaKernel] / [numthreads] entry */
    int has_tid;              /* has the hidden thread-id parameter `nb_tid`: a kernel, or a function
                                 reading the thread indices (directly or through callees) */
    int is_host;              /* host code ([TorchEntryPoint]; emit_host.c): only in the host unit */
    int numthreads[3];        /* [numthreads(x,y,z)] thread group (0 0 0: none; callgen.c) */
    int differentiable;
    nb_ir_func_role role;
    nb_ir_func *primal;       /* for derivative functions */
    int returns_primal;       /* BWD_DERIV: also returns the primal result (fused fwd + bwd call) */
    nb_ir_func *derivs[3];    /* this primal's FWD_DERIV, BWD_DERIV, BWD_DERIV returning the primal:
                                 the only ones, set where they are made (ad_fwd.c, ad_bwd.c) */
    nb_ir_module *module;
    int index;                /* position in module->funcs */
    void *aux;                /* scratch */
    /* Target-specific code (Slang; lower.c lowers, emit_target.c emits). A function whose body
     * holds a __target_switch is lowered once per back end: this one for `target` (NB_TGT_C or
     * NB_TGT_CUDA of ast.h; 0: every target) and `alt` (same cname) for the other. */
    unsigned target;
    nb_ir_func *alt;
    int missing;              /* a __target_switch without a case for `target` (at missing_loc) */
    nb_loc missing_loc;
    const char *asm_text;     /* __intrinsic_asm: calls expand to this text, nothing is emitted */
    const nb_type **asm_types; /* its operands $[i]: a type, or (NULL) the constant asm_vals[i] */
    const char **asm_vals;
    int nasm;
    const char **preludes;    /* __requirePrelude texts, emitted once at the top */
    int npreludes;
};

struct nb_ir_global {
    const char *name;
    const char *cname;
    const nb_type *type;
    nb_decl *decl;
    nb_ir_func *init;         /* a function () -> type computing the value */
    int index;
};

struct nb_ir_module {
    nb_arena arena;
    nb_type_table *types;
    nb_ir_func **funcs;
    int nfuncs, cap_funcs;
    nb_ir_global **globals;
    int nglobals, cap_globals;
    struct nb_ptrmap *func_index; /* decl -> first primal of funcs[0 .. nfunc_indexed) (ir.c) */
    int nfunc_indexed;
};

/* ---- module / function ------------------------------------------------------------------- */

void nb_ir_module_init(nb_ir_module *m, nb_type_table *types);
void nb_ir_module_free(nb_ir_module *m);
/* Appends _1, _2, … to name until no function of m has it as its C name (generated functions). */
void nb_ir_unique_cname(const nb_ir_module *m, char *name, size_t cap);
nb_ir_func *nb_ir_func_new(nb_ir_module *m, const char *name, const nb_type *ret);
nb_ir_var *nb_ir_var_new(nb_ir_func *f, const char *name, const nb_type *type);
nb_ir_var *nb_ir_param_new(nb_ir_func *f, const char *name, const nb_type *type, nb_param_dir dir);
nb_ir_global *nb_ir_global_new(nb_ir_module *m, const char *name, const nb_type *type);
nb_ir_func *nb_ir_find_func(nb_ir_module *m, const nb_decl *decl);

/* ---- builder: appends at the end of `b->block` ------------------------------------------- */

typedef struct nb_ir_builder {
    nb_ir_module *m;
    nb_ir_func *f;
    nb_ir_block *block;
    nb_loc loc;               /* location given to new instructions */
    unsigned flags;           /* flags given to new instructions */
} nb_ir_builder;

nb_ir_block *nb_ir_block_new(nb_ir_func *f, nb_ir_inst *owner);
nb_ir_inst *nb_ir_new(nb_ir_builder *b, nb_ir_op op, const nb_type *type, int nops);
void nb_ir_append(nb_ir_block *bl, nb_ir_inst *in);
void nb_ir_insert_before(nb_ir_inst *pos, nb_ir_inst *in);
void nb_ir_remove(nb_ir_inst *in);
/* Does the block end with break/continue/return (code after it would be unreachable)? */
int nb_ir_block_terminated(const nb_ir_block *bl);

nb_ir_inst *nb_ir_const_f(nb_ir_builder *b, const nb_type *t, double v);   /* every component */
nb_ir_inst *nb_ir_const_i(nb_ir_builder *b, const nb_type *t, int64_t v);  /* every component */
nb_ir_inst *nb_ir_zero(nb_ir_builder *b, const nb_type *t);
nb_ir_inst *nb_ir_unary(nb_ir_builder *b, nb_ir_op op, nb_ir_inst *a);
/* Arithmetic / bitwise / logical (result = operand type) and comparisons (result bool-shaped). */
nb_ir_inst *nb_ir_binary(nb_ir_builder *b, nb_ir_op op, nb_ir_inst *a, nb_ir_inst *c);
nb_ir_inst *nb_ir_convert(nb_ir_builder *b, nb_ir_inst *a, const nb_type *to); /* CONVERT/SPLAT/no-op */
nb_ir_inst *nb_ir_select(nb_ir_builder *b, nb_ir_inst *c, nb_ir_inst *x, nb_ir_inst *y);
nb_ir_inst *nb_ir_construct(nb_ir_builder *b, const nb_type *t, nb_ir_inst **ops, int n);
nb_ir_inst *nb_ir_extract(nb_ir_builder *b, nb_ir_inst *base, int field);
nb_ir_inst *nb_ir_extract_dyn(nb_ir_builder *b, nb_ir_inst *base, nb_ir_inst *index);
nb_ir_inst *nb_ir_swizzle(nb_ir_builder *b, nb_ir_inst *v, const int *swz, int n);
nb_ir_inst *nb_ir_intrin(nb_ir_builder *b, int id, const nb_type *t, nb_ir_inst **ops, int n);
nb_ir_inst *nb_ir_call(nb_ir_builder *b, nb_ir_func *callee, nb_ir_inst **args, nb_ir_var **refs);
/* path steps: FIELD/SWIZZLE carry their data; INDEX steps take the next entry of idx[]. */
nb_ir_inst *nb_ir_load(nb_ir_builder *b, nb_ir_var *v, const nb_ir_step *path, int npath,
                       nb_ir_inst **idx);
nb_ir_inst *nb_ir_store(nb_ir_builder *b, nb_ir_var *v, const nb_ir_step *path, int npath,
                        nb_ir_inst **idx, nb_ir_inst *value);
nb_ir_inst *nb_ir_if(nb_ir_builder *b, nb_ir_inst *cond); /* blocks[0], blocks[1] created */
nb_ir_inst *nb_ir_loop(nb_ir_builder *b);                  /* 3 blocks created */
nb_ir_inst *nb_ir_jump(nb_ir_builder *b, nb_ir_op op, nb_ir_inst *value); /* BREAK/CONTINUE/RETURN */

/* Pointers (ir_ptr.c). ptr NULL: ADDR of var + path; else ADDR / PLOAD / PSTORE through ptr. */
nb_ir_inst *nb_ir_ptr_access(nb_ir_builder *b, nb_ir_op op, nb_ir_var *v, nb_ir_inst *ptr, const nb_ir_step *path,
                             int npath, nb_ir_inst **idx, nb_ir_inst *value);
nb_ir_inst *nb_ir_padd(nb_ir_builder *b, nb_ir_inst *ptr, nb_ir_inst *offset);

/* Type after applying one step to `t` (NULL if invalid). */
const nb_type *nb_ir_step_type(nb_type_table *tt, const nb_type *t, const nb_ir_step *s);
/* The bool type with t's shape (bool, boolN). */
const nb_type *nb_ir_bool_like(nb_type_table *tt, const nb_type *t);

/* ---- analysis / printing / verification -------------------------------------------------- */

/* Fills inst->uses for every instruction of f (uses by instructions and LOOP conditions). */
void nb_ir_count_uses(nb_ir_func *f);
/* Has no side effect and can be removed when unused. */
int nb_ir_is_pure(const nb_ir_inst *in);
/* Calls fn on every instruction of the region tree in order (pre-order: a control instruction
 * before its regions). */
void nb_ir_walk(nb_ir_block *bl, void (*fn)(nb_ir_inst *in, void *ud), void *ud);

void nb_ir_print_func(const nb_ir_func *f, nb_strbuf *out);
void nb_ir_print_module(const nb_ir_module *m, nb_strbuf *out);
/* Checks types, dominance, terminators; returns 0 when fine, else the number of problems, each
 * described in errs (one per line). */
int nb_ir_verify_func(nb_ir_func *f, nb_strbuf *errs);
int nb_ir_verify_module(nb_ir_module *m, nb_strbuf *errs);

/* ---- lowering and passes ----------------------------------------------------------------- */

struct nb_program;
/* Lowers every function of every module of the program; NB_ERR_COMPILE with diagnostics for
 * constructs the IR does not support yet. */
nb_status nb_ir_lower_program(struct nb_program *p, nb_ir_module *m);

/* Constant folding (scalar and vector arithmetic, comparisons, conversions, selects, constant
 * branches) and dead-code elimination; returns the number of changes. */
int nb_ir_fold(nb_ir_func *f);
int nb_ir_dce(nb_ir_func *f);
void nb_ir_optimize_module(nb_ir_module *m);

#endif

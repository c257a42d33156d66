/* The kernel language's syntax tree, and the annotations the checker adds to it.
 *
 * Ownership: every node lives in the nb_module_ast's arena; nothing is freed individually.
 * Lists are arrays (pointer + count) allocated in the arena once their length is known.
 *
 * Pipeline: parser (parser.c) builds the tree with types as unresolved nb_type_expr; the checker
 * (check.c) resolves names and types, inserts implicit conversions, picks overloads and fills
 * every field marked [checker]; lowering (lower.c) reads the checked tree and builds IR.
 */
#ifndef NB_LANG_AST_H
#define NB_LANG_AST_H

#include <stdint.h>

#include "core/arena.h"
#include "lang/source.h"
#include "lang/types.h"

typedef struct nb_expr nb_expr;
typedef struct nb_stmt nb_stmt;
typedef struct nb_decl nb_decl;

/* ---- attributes: [Name] or [Name(arg, …)] before a declaration or a statement ------------- */

typedef struct nb_attr {
    nb_loc loc;
    const char *name;   /* "Differentiable", "MaxIters", "ForwardDerivative", … */
    nb_expr **args;     /* each an expression: numbers for MaxIters, names for derivatives */
    int nargs;
} nb_attr;

typedef struct nb_attr_list {
    nb_attr *items;
    int count;
} nb_attr_list;

/* ---- written types: `float`, `float3`, `vector<float,3>`, `Tensor<float,2>`, `S`, `MLP<16,2>` */

typedef struct nb_type_expr {
    nb_loc loc;
    const char *name;            /* base name as written; associated types `float.Differential` /
                                    `S::Differential` are one name "S.Differential" */
    struct nb_type_expr **targs; /* generic arguments that are types (NULL entries for values) */
    nb_expr **vargs;             /* generic arguments that are values (NULL entries for types);
                                    a bare name the parser does not know as a type (an imported
                                    struct: `DifferentialPair<Imported>`) is a NAME here */
    int ntargs;                  /* number of generic arguments (targs and vargs both this long) */
    nb_expr **array_dims;        /* T[N][M]: outermost first; NULL entry = unsized `T[]` */
    int narray_dims;
    /* Set when a type generic parameter was substituted (check_generic.c): `subst` stands for the
     * whole base name (`T` -> float); `assoc_base` for the part before the first '.' of an
     * associated type name (`T.Differential` with T = float: name "float.Differential",
     * assoc_base float). Array dims still apply on top. */
    const nb_type *subst;
    const nb_type *assoc_base;
    struct nb_type_expr *member_of; /* `S<float>.Differential`: name is the member ("Differential"),
                                       member_of the instantiation `S<float>` */
    const nb_type *resolved;     /* [checker] */
} nb_type_expr;

/* ---- expressions ------------------------------------------------------------------------- */

typedef enum nb_expr_kind {
    NB_EX_INT,       /* 42, 42u, 0x2A */
    NB_EX_FLOAT,     /* 1.0, 1.0f, 1e-3, 1.0h, 1.0l (double) */
    NB_EX_BOOL,      /* true, false */
    NB_EX_NAME,      /* x, f, S (also a type name used as a constructor callee); `this` is the
                        NAME "this" */
    NB_EX_UNARY,     /* -x  +x  !x  ~x  ++x  --x  x++  x--; also `no_diff f(x)` in expression
                        position: op NB_TOK_KW_NO_DIFF, operand the call */
    NB_EX_BINARY,    /* a op b (arithmetic, comparison, logical, bitwise, shifts); op NB_TOK_COMMA
                        only in a for-loop's init/step (`i++, j--`) */
    NB_EX_ASSIGN,    /* a = b, a += b, … (op NB_TOK_ASSIGN or the compound token) */
    NB_EX_TERNARY,   /* c ? a : b */
    NB_EX_CALL,      /* callee(args): function, method (callee is NB_EX_MEMBER), constructor
                        (callee is a type: NB_EX_TYPE or a NAME that names a type), intrinsic,
                        fwd_diff(f)(…) / bwd_diff(f)(…) (callee is a CALL to fwd_diff/bwd_diff) */
    NB_EX_MEMBER,    /* a.b: field, method, swizzle (.xyz/.rgba), DifferentialPair .p/.d,
                        static member S.kConst / S::kConst */
    NB_EX_INDEX,     /* a[i] (arrays, vectors, matrix rows, tensors with one index per dim a[i, j]) */
    NB_EX_TYPE,      /* a written type in expression position: float3(…), vector<float,3>(…) */
    NB_EX_CAST,      /* (float)x written by the user; [checker] also inserts implicit ones */
    NB_EX_INIT_LIST, /* { a, b, c } for arrays and structs */
    NB_EX_STRING,    /* "text": only as printf's format (check_target.c) */
} nb_expr_kind;

/* What a resolved name or call refers to [checker]. */
typedef enum nb_ref_kind {
    NB_REF_NONE = 0,
    NB_REF_LOCAL,     /* a local variable: decl is its NB_DECL_VAR */
    NB_REF_PARAM,     /* a function parameter: param index in `index` of function `decl` */
    NB_REF_GLOBAL,    /* static const global or link-time constant: decl */
    NB_REF_FUNCTION,  /* a user function: decl (after overload resolution) */
    NB_REF_INTRINSIC, /* a built-in: `index` is an nb_intrinsic (lang/intrinsics.h) */
    NB_REF_TYPE,      /* a type name (constructor call or static member access) */
    NB_REF_FIELD,     /* struct field: `index` is the field number in the struct */
    NB_REF_STATIC,    /* struct static const member: decl is its NB_DECL_VAR */
    NB_REF_METHOD,    /* struct method: decl is the method's NB_DECL_FUNC */
    NB_REF_SWIZZLE,   /* vector swizzle: see nb_expr.swizzle */
    NB_REF_PRINTF,    /* printf("format", …) (check_target.c) */
    NB_REF_NULL,      /* nullptr (check_ptr.c) */
} nb_ref_kind;

struct nb_expr {
    nb_expr_kind kind;
    nb_loc loc;
    const nb_type *type; /* [checker] never NULL after a successful check */
    int is_lvalue;       /* [checker] assignable place (variable, field, element, swizzle w/o repeats) */
    int pretyped;        /* [checker] checked ahead of its context (an item of a `{…}` argument
                            while overloads are compared): ck_expr_to only converts it */
    int tensor_once;     /* [checker] a tensor element of loadOnce / storeOnce (check_view.c): its
                            store's reverse mode reads the gradient without consuming it */
    union {
        struct { uint64_t value; int is_unsigned; } ilit;
        struct { double value; nb_scalar_kind kind; /* NB_SC_FLOAT / DOUBLE / HALF */ } flit;
        int blit;
        struct { const char *name; } name;
        struct { int op; /* token kind: NB_TOK_MINUS, NB_TOK_NOT, NB_TOK_INC, … */
                 int postfix; nb_expr *operand; } unary;
        struct { int op; nb_expr *lhs, *rhs; } binary;  /* op: token kind */
        struct { int op; nb_expr *lhs, *rhs; } assign;  /* op: NB_TOK_ASSIGN, NB_TOK_PLUS_ASSIGN, … */
        struct { nb_expr *cond, *then_e, *else_e; } ternary;
        struct { nb_expr *callee; nb_expr **args; int nargs;
                 const char **arg_names; /* named argument labels or NULL entries; NULL if none */
               } call;
        struct { nb_expr *base; const char *member; int is_static; /* written with :: */
                 nb_type_expr *targs; /* `obj.f<4>(…)`: the written generic arguments (named f) */
                 int swizzle[4]; int swizzle_len; /* [checker] component indices for swizzles */
               } member;
        struct { nb_expr *base; nb_expr **indices; int nindices; } index;
        struct { nb_type_expr *texpr; } type;
        struct { nb_type_expr *texpr; nb_expr *operand; int implicit; } cast;
        struct { nb_expr **items; int nitems; } init_list;
        struct { const char *text; /* as written, quotes and escapes included */ } str;
    } u;
    /* [checker] resolution, for NAME, CALL (the callee target), MEMBER */
    nb_ref_kind ref;
    nb_decl *decl;
    int index;
};

/* ---- statements -------------------------------------------------------------------------- */

typedef enum nb_stmt_kind {
    NB_ST_BLOCK,
    NB_ST_EXPR,
    NB_ST_VAR,      /* one or more local declarations: float a = 1, b[3]; */
    NB_ST_IF,
    NB_ST_FOR,
    NB_ST_WHILE,
    NB_ST_DO_WHILE,
    NB_ST_SWITCH,
    NB_ST_BREAK,
    NB_ST_CONTINUE,
    NB_ST_RETURN,
    NB_ST_EMPTY,
    NB_ST_TARGET_SWITCH, /* __target_switch { case cuda: … case cpp: … } (check_target.c) */
    NB_ST_ASM,           /* __intrinsic_asm "text" [, operand…]; the function is expanded at
                            its call sites ($0..$9 arguments, $T0..$T9 their types, $TR the
                            return type, $[i] the operands) */
    NB_ST_PRELUDE,       /* __requirePrelude("text"); emitted once at the top of the source */
} nb_stmt_kind;

/* Targets of a __target_switch case (bits). `cpp` and `c` are the CPU back end. */
enum { NB_TGT_C = 1 << 0, NB_TGT_CUDA = 1 << 1, NB_TGT_OTHER = 1 << 2 };

typedef struct nb_target_case {
    nb_loc loc;
    unsigned targets;  /* NB_TGT_* of its labels (grouped labels: `case cpp: case cuda:`) */
    int is_default;
    nb_stmt **body;
    int nbody;
} nb_target_case;

typedef struct nb_switch_case {
    nb_loc loc;
    nb_expr **values; /* case labels (constant expressions); none = default */
    int nvalues;
    int is_default;
    nb_stmt **body;   /* statements until the next label (fall-through allowed as in C) */
    int nbody;
} nb_switch_case;

struct nb_stmt {
    nb_stmt_kind kind;
    nb_loc loc;
    nb_attr_list attrs; /* [MaxIters(n)], [ForceUnroll], [unroll], [loop] on loops */
    union {
        struct { nb_stmt **items; int count; } block;
        struct { nb_expr *expr; } expr;
        struct { nb_decl **vars; int count; } var;        /* each an NB_DECL_VAR */
        struct { nb_expr *cond; nb_stmt *then_s, *else_s; } if_s;
        struct { nb_stmt *init; nb_expr *cond, *step; nb_stmt *body; } for_s; /* each may be NULL */
        struct { nb_expr *cond; nb_stmt *body; } while_s; /* also do-while */
        struct { nb_expr *value; nb_switch_case *cases; int ncases; } switch_s;
        struct { nb_expr *value; /* may be NULL */ } ret;
        struct { nb_target_case *cases; int ncases; } tswitch;
        struct { const char *text; /* decoded */ nb_loc text_loc; nb_expr **args; int nargs; } asm_s;
        struct { const char *text; /* decoded */ } prelude;
    } u;
    int64_t max_iters; /* [checker] loop trip bound from the attribute or constant bounds; -1 unknown */
};

/* ---- declarations ------------------------------------------------------------------------ */

typedef enum nb_decl_kind {
    NB_DECL_FUNC,
    NB_DECL_STRUCT,
    NB_DECL_VAR,      /* local, global static const, struct field, struct static const, extern const */
    NB_DECL_PARAM,
    NB_DECL_IMPORT,
    NB_DECL_TYPEDEF,  /* typealias X = T; / typedef T X; also `associatedtype A : I;` inside an
                         interface (texpr NULL, constraint in u.tdef.constraints) */
    NB_DECL_INTERFACE, /* interface I : Base { requirements }: uses u.strct (methods are the
                          requirements, a body is a default implementation; conforms the bases) */
    NB_DECL_EXTENSION, /* extension S [: I] { members }: uses u.strct; merged into struct S by the
                          checker before S is checked (check_iface.c) */
} nb_decl_kind;

/* Parameter direction. */
typedef enum nb_param_dir { NB_DIR_IN = 0, NB_DIR_OUT, NB_DIR_INOUT } nb_param_dir;

/* Declaration modifiers (bit flags). */
enum {
    NB_MOD_STATIC = 1 << 0,
    NB_MOD_CONST = 1 << 1,
    NB_MOD_EXTERN = 1 << 2,  /* extern static const: a link-time constant set from the host */
    NB_MOD_NO_DIFF = 1 << 3, /* no_diff parameter */
    NB_MOD_PUBLIC = 1 << 4,
    NB_MOD_INLINE = 1 << 5,
    NB_MOD_CONSTEXPR = 1 << 6, /* constexpr parameter: the argument must be a compile-time constant */
    NB_MOD_INTERNAL = 1 << 20, /* Slang's access modifiers (parser.c; the checker enforces   */
    NB_MOD_GROUPSHARED = 1 << 24, /* `groupshared` (module scope) / `static groupshared` local:
                                      one instance per thread group (check_kernel.c) */
    NB_MOD_PRIVATE = 1 << 21,  /* `internal`/no modifier across modules, see program.c)     */
};

struct nb_decl {
    nb_decl_kind kind;
    nb_loc loc;
    const char *name;
    nb_attr_list attrs;
    unsigned mods;
    struct nb_module_ast *module; /* the module that declares it */
    const char *ns;               /* `namespace A.B { … }`: "A.B" (the name is then "A.B.f"), or NULL
                                     (parser_enum.c); a method's is its struct's */
    union {
        struct {
            nb_type_expr *ret;
            nb_decl **params; int nparams;    /* NB_DECL_PARAM */
            nb_stmt *body;                    /* NULL for a declaration without a body */
            nb_decl *parent;                  /* enclosing struct for methods, else NULL */
            int is_mutating;                  /* [mutating] method: `this` is inout */
            int is_init;                      /* `__init(…) {…}` constructor, desugared by the
                                                 parser into `static This __init(…) { This this;
                                                 …; return this; }` (`this` is that local) */
            int prefer_recompute;             /* [PreferRecompute]: reverse mode calls it again
                                                 rather than storing its result */
            nb_decl **gparams; int ngparams;  /* generics `float f<let N : int, T : IFoo>(…)`
                                                 (NB_DECL_PARAM); a function with gparams is a
                                                 template: never checked or lowered itself */
            int nimplicit_gparams;            /* the last ones: lengths of unsized array parameters
                                                 `int b[]` (parser.c implicit_length_gparams) */
            nb_decl **wheres; int nwheres;    /* `where T : IFoo` clauses (NB_DECL_PARAM named T
                                                 with constraints), merged into gparams */
            nb_decl **assoc_wheres; int nassoc_wheres; /* [checker] `where T.A : IFoo` (an associated
                                                 type of a type generic parameter), checked per instantiation */
            nb_decl *generic_of;              /* [checker] an instantiation (`f<4>`): its template */
            /* [checker] */
            int differentiable;               /* [Differentiable] / [BackwardDifferentiable] */
            int is_kernel;                    /* [Kernel] / [CudaKernel] / [numthreads] */
            int uses_tid;                     /* [checker] reads the thread indices (cudaThreadIdx(), …)
                                                 directly or through a callee: takes the kernel's
                                                 hidden thread-id parameter (check_kernel.c) */
            int is_host;                      /* host code: [TorchEntryPoint], or TorchTensor in the
                                                 signature (check_host.c); emitted as C for the host
                                                 only (emit_host.c), never part of a kernel */
            int numthreads[3];                /* [numthreads(x,y,z)] (0 0 0 without): the thread
                                                 group of a compute entry point (check_kernel.c) */
            nb_decl *fwd_derivative, *bwd_derivative; /* custom derivatives, resolved */
            nb_decl *primal_subst;            /* [PrimalSubstitute(g)]: derivatives are g's */
            int treat_as_diff;                /* [TreatAsDifferentiable]: trivial (zero) derivatives */
        } func;
        struct {
            nb_decl **fields; int nfields;    /* NB_DECL_VAR (non-static) in order */
            nb_decl **statics; int nstatics;  /* static const members (NB_DECL_VAR) */
            nb_decl **methods; int nmethods;  /* NB_DECL_FUNC */
            const char **conforms; int nconforms; /* `: IDifferentiable, …` */
            int idiff;                        /* [checker] conforms to IDifferentiable through an
                                                 interface that extends it (lang/types.c) */
            nb_decl **gparams; int ngparams;  /* generics `let W : int`, `T : IFoo` (NB_DECL_PARAM); a
                                                 struct with gparams is a template (type NULL) */
            nb_decl **types; int ntypes;      /* member typealias/typedef, interface associatedtype
                                                 (NB_DECL_TYPEDEF) */
            nb_decl **wheres; int nwheres;    /* `where T : IFoo` after the conformances */
            int ext_of_iface;                 /* NB_DECL_EXTENSION written `extension<T : I> T`:
                                                 named I; its members become I's (defaults) */
            int ext_of_generic;               /* NB_DECL_EXTENSION written `extension<T : I> S<T>`
                                                 (gparams: the extension's): S's own members */
            /* [checker] dynamic dispatch (check_dyn.c): an interface's value type, and the flag
             * on that synthesized struct */
            struct nb_decl *existential;
            int is_existential;
            struct nb_decl *ptr_pair;         /* [checker] DifferentialPtrPair<this> (check_ptr.c) */
            int is_ptr_pair;                  /* [checker] this is a DifferentialPtrPair<P> { P p; P.Differential d; } */
            const nb_type *type;              /* [checker] */
            /* [checker] an instantiation `MLP<16,3>` (an ordinary struct named "MLP<16,3>",
             * appended to the module's decls): its template and generic argument values */
            nb_decl *generic_of;
            const int64_t *gargs; int ngargs;
        } strct;
        struct {
            nb_type_expr *texpr;              /* NULL for `let x = …` style inference (unused) */
            nb_expr *init;                    /* may be NULL */
            const nb_type *type;              /* [checker] */
            int is_global;
            int shader_param;                 /* [checker] module-scope `RWStructuredBuffer<T> b;`:
                                                 a parameter of every function using it (check_kernel.c);
                                                 2: groupshared, 3: a mutable `static` global (per thread) */
            /* [checker] value of a static const scalar/vector when constant-foldable */
            int has_const; double const_f; int64_t const_i;
            nb_decl *enum_of;                 /* an enum case: its enum (parser_enum.c) */
        } var;
        struct {
            nb_type_expr *texpr;
            nb_param_dir dir;
            nb_expr *default_value;           /* may be NULL */
            const nb_type *type;              /* [checker] */
            int index;
            /* generic parameters: a type parameter `T : IFoo` (texpr NULL; default_type for
             * `T = float`); its interface constraints from the list and `where` clauses */
            int is_type;
            nb_type_expr **constraints; int nconstraints;
            nb_type_expr *default_type;
            const char *semantic;             /* `uint3 id : SV_DispatchThreadID`: the semantic, or NULL */
            nb_loc semantic_loc;
            int hidden;                       /* [checker] a module-scope buffer passed on as a trailing
                                                 parameter (check_kernel.c ck_bind_shader_params) */
        } param;
        struct { const char *path; /* module name as written: `import nn;` -> "nn" */
                 struct nb_module_ast *target; /* [loader] */
                 int quoted;   /* `import "file.slang";`: a file name, not a module name */
                 int include;  /* `__include x;`: a file of this module (program.c splices
                                  its declarations in; the checker never sees this decl) */
                 int exported; /* `__exported import x;`: importers of this module see x too */
               } import;
        struct { nb_type_expr *texpr; nb_type_expr **constraints; int nconstraints;
                 /* `enum E : uint { A, B = 4 }` (parser_enum.c): a typedef of the underlying
                  * integer type whose cases are static const NB_DECL_VARs of type E, found as
                  * `E.A` / `E::A` (and by bare name when unscoped, where they are also
                  * top-level declarations) */
                 int is_enum, enum_unscoped; nb_decl **cases; int ncases; } tdef;
    } u;
};

/* One parsed source file (a module). */
typedef struct nb_module_ast {
    const char *name;      /* file stem: "square" for square.nb */
    int file;              /* source id in the nb_source_set */
    nb_decl **decls;       /* top-level declarations in order */
    int ndecls;
    const char **usings;   /* `using namespace A.B;` / `using A.B;`: "A.B" (parser_enum.c) */
    int nusings;
    nb_arena *arena;       /* owns every node */
    const char *declared;     /* `module NAME;` (NULL: none) */
    const char *implementing; /* `implementing NAME;` (a file of another module) */
    int access_control;       /* a `module` declaration, an `__include` or an access modifier:
                                 Slang's default visibility (internal) applies; else a "legacy"
                                 module where everything is public */
} nb_module_ast;

#endif

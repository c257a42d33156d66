/* Private state shared by check.c (declarations, statements, program) and check_expr.c
 * (expressions, conversions, calls). */
#ifndef NB_LANG_CHECK_INTERNAL_H
#define NB_LANG_CHECK_INTERNAL_H

#include <stdint.h>

#include "lang/ast.h"
#include "lang/check.h"
#include "lang/intrinsics.h"
#include "lang/program.h"
#include "core/strmap.h"

typedef struct ck_sym {
    const char *name;
    nb_decl *decl; /* NB_DECL_VAR (local) or NB_DECL_PARAM */
    int prev;      /* the sym of the same name this one shadows, -1 */
} ck_sym;

/* A module's declarations by name (ck_lookup_global), extended as decls are appended. */
typedef struct ck_mod_index {
    nb_module_ast *mod;
    int ndone;             /* decls[0 .. ndone) are indexed */
    nb_strmap names;       /* name -> 1 + its entry in chains */
    int (*chains)[2];      /* first and last decl index of a name */
    int nchains, cap_chains;
    int *next;             /* by decl index: the next decl of the same name, -1 */
    int cap_next;
    nb_module_ast **imports; /* distinct import targets, in order */
    int nimports, cap_imports;
} ck_mod_index;

typedef struct ck_edge {
    nb_decl *from, *to;
    nb_loc loc;
} ck_edge;

/* Per-declaration checking state (side table keyed by the decl pointer). */
enum { CK_TODO = 0, CK_BUSY = 1, CK_DONE = 2 };

typedef struct ck_state_slot {
    const void *key;
    int state;
} ck_state_slot;

/* One instantiation of a generic struct or function (check_generic.c). */
typedef struct ck_inst {
    nb_decl *tmpl;   /* the template */
    int64_t *args;   /* its generic parameters' values */
    int nargs;
    nb_decl *clone;  /* the instantiation: an ordinary struct / function */
    int depth;       /* instantiation nesting (1 = requested by non-generic code) */
    nb_loc loc;      /* where it was first requested */
} ck_inst;

#define CK_MAX_GPARAMS 16     /* generic parameters of one template */
#define CK_MAX_INST_DEPTH 64  /* instantiations requested from instantiations (stops A<N> -> A<N+1> -> …) */
#define CK_MAX_INSTS 2048     /* instantiations in one program */

typedef struct nb_checker {
    nb_program *p;
    nb_source_set *src;
    nb_type_table *tt;
    nb_arena *arena;
    nb_module_ast *mod;       /* module being checked */
    /* scopes */
    ck_sym *syms;
    int nsyms, cap_syms;
    int *marks;
    int nmarks, cap_marks;
    nb_strmap local_names;    /* name -> 1 + index of its innermost sym (0: none) */
    ck_mod_index *mod_index;  /* one per module looked into */
    int nmod_index, cap_mod_index;
    /* scope floors: signature/global checks hide the locals of the body being checked */
#define CK_MAX_FLOORS 64
    int floors[CK_MAX_FLOORS];
    int nfloors;
    /* current function context */
    nb_decl *fn;              /* function (or method) whose body is checked; NULL at top level */
    nb_decl *strct;           /* struct of the current method */
    int loop_depth;           /* enclosing loops */
    int break_depth;          /* enclosing loops + switches */
    /* call graph */
    ck_edge *edges;
    int nedges, cap_edges;
    /* decl states */
    ck_state_slot *states;
    int nstates, cap_states;
    /* generics (check_generic.c) */
    ck_inst *insts;
    int ninsts, cap_insts;
    nb_module_ast *inst_mod; /* the module being checked: instantiations are appended to its decls */
    int inst_cap;            /* capacity of inst_mod->decls once grown (0: its parser-made exact size) */
    int inst_depth;          /* depth of the instantiation being checked (0: ordinary code) */
    nb_decl *enum_ctx;       /* the enum whose case values are being checked: its cases are
                                in scope by their bare names (`enum E { V = 1, X = V + 2 }`) */
    const char *ns;          /* namespace of the declaration being checked ("A.B"), or NULL:
                                unqualified names are looked up in it first (ck_lookup_global) */
    int saw_groupshared;     /* a `static groupshared` local was checked (check_kernel.c) */
    int saw_tid;             /* a non-kernel function reads the thread indices (check_kernel.c) */
} nb_checker;

/* Context switch for checking a declaration out of line (signatures, globals, struct fields). */
typedef struct ck_ctx_save {
    const char *ns;
    nb_decl *fn, *strct;
    int loop_depth, break_depth;
    nb_module_ast *mod;
} ck_ctx_save;

/* check.c */
void ck_err(nb_checker *c, nb_loc loc, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void ck_note(nb_checker *c, nb_loc loc, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void ck_warn(nb_checker *c, nb_loc loc, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
int ck_state(nb_checker *c, const void *key);
void ck_set_state(nb_checker *c, const void *key, int state);
nb_decl *ck_lookup_local(nb_checker *c, const char *name);
/* Global declarations named `name` visible from the current module (the module first, then its
 * imports), of kind `kind` (-1 = any). Returns the count; writes up to max. */
int ck_lookup_global(nb_checker *c, const char *name, int kind, nb_decl **out, int max);
/* After "undeclared": a note when `name` exists in an imported module but is not public there. */
void ck_note_hidden(nb_checker *c, const char *name);
/* Slang's access control of a struct member used at loc: `private` only inside the struct,
 * non-`public` only inside its module when that module uses access control (a `module`
 * declaration, `__include` or an access modifier). 0 after reporting an error. */
int ck_check_member_access(nb_checker *c, const nb_decl *sd, const nb_decl *member, nb_loc loc);
const nb_type *ck_resolve_type(nb_checker *c, nb_type_expr *te);
/* `Base.Member` type names (`float.Differential`): te for locations, name the dotted name. */
const nb_type *ck_member_type(nb_checker *c, nb_type_expr *te, const char *name);
/* [ForwardDerivative(g)] / [BackwardDerivative(g)] / [PrimalSubstitute(g)] on f and their …Of
 * forms: among the overloads fs (primals) and gs (derivatives or substitutes), the pair whose
 * signatures fit (mode 1 forward, 2 backward, 0 substitute: lang/ad.h's rules). Reports a
 * mismatch at loc (attr names the attribute) and returns 0; else sets *fo, *go. */
int ck_match_derivative(nb_checker *c, nb_decl **fs, int nf, nb_decl **gs, int ng, int mode, nb_loc loc,
                        const char *attr, nb_decl **fo, nb_decl **go);
const nb_type *ck_struct_type(nb_checker *c, nb_decl *sd); /* ensures fields are resolved */
void ck_check_global_var(nb_checker *c, nb_decl *d);
void ck_check_func_sig(nb_checker *c, nb_decl *fn);
/* check_loop.c: a loop statement's attributes (sets s->max_iters from [MaxIters], else -1), and
 * the trip count of a for loop with constant bounds (-1: unknown, with a warning if it overflows). */
void ck_check_loop_attrs(nb_checker *c, nb_stmt *s);
int64_t ck_for_trip_count(nb_checker *c, nb_stmt *s);
/* a loop body that never reaches its next iteration (every path breaks or returns, none continues) */
int ck_loop_runs_once(const nb_stmt *body);
void ck_add_edge(nb_checker *c, nb_decl *to, nb_loc loc);
const char *ck_func_sig_str(nb_checker *c, nb_decl *fn);
void *ck_alloc(nb_checker *c, size_t size);
int ck_grow(void **arr, int *cap, int need, size_t elem); /* heap array growth; 0 when out of memory */
ck_ctx_save ck_enter_global_ctx(nb_checker *c, nb_module_ast *mod);
void ck_leave_global_ctx(nb_checker *c, ck_ctx_save s);
/* Pass-1 checks of a struct: type, static consts, method signatures, duplicate members (once). */
void ck_check_struct_decl(nb_checker *c, nb_decl *sd);
/* Integer generic argument i of te (a value, or a name the parser took for a type); reports. */
int ck_generic_int(nb_checker *c, nb_type_expr *te, int i, int64_t *out);

/* check_generic.c: value generics by monomorphization. A template (struct or function with
 * gparams) is never checked itself; each distinct argument list is cloned with the parameters
 * replaced by integer literals, appended to c->inst_mod's decls and checked as ordinary code. */
int ck_is_template(const nb_decl *d);
/* Pass-1 checks of a template's own declaration (parameter types, generic methods). */
void ck_check_template(nb_checker *c, nb_decl *d);
/* `MLP<16, 3>` (or `MLP` when every parameter has a default): the instantiated struct type. */
const nb_type *ck_instantiate_struct(nb_checker *c, nb_decl *sd, nb_type_expr *te);
/* Instantiation depth of a clone (or of a clone's method); 0 for ordinary declarations. */
int ck_inst_depth(nb_checker *c, const nb_decl *d);
/* "in instantiation of 'X' requested here" when errors were reported since errors0. */
void ck_inst_note(nb_checker *c, const nb_decl *d, int errors0);
nb_decl *ck_instantiate_like(nb_checker *c, nb_decl *tmpl, const nb_decl *inst, nb_loc loc);
/* Generic function candidates of a call: replaces each template among fns[0..n) by its
 * instantiation for this call (arguments inferred from the call's checked argument types;
 * explicit: the written `f<4>` arguments or NULL). Non-templates are kept unless explicit is
 * given. Returns the new count, or -1 when an error was reported. */
int ck_generic_candidates(nb_checker *c, nb_expr *call, nb_decl **fns, int n, nb_type_expr *explicit_args,
                          const char *name);
void ck_free_generics(nb_checker *c);

const nb_type *ck_builtin_type_name(nb_checker *c, const char *name); /* float3, int, void; NULL if not */
/* A copy of method m (an interface's default implementation) as a method of struct sd. */
nb_decl *ck_clone_method(nb_checker *c, const nb_decl *m, nb_decl *sd);

/* check_dyn.c: values of interface type (dynamic dispatch) */
void ck_normalize_conforms(nb_checker *c, nb_decl *sd); /* A : IFoo, IFoo : IDifferentiable -> A too */
const nb_type *ck_existential(nb_checker *c, nb_decl *iface, nb_loc loc); /* IFoo as a value type */
int ck_existential_index(const nb_type *from, const nb_type *to); /* tag of `from` in existential `to`, -1 */
int ck_box(nb_checker *c, nb_expr **slot, const nb_type *to);      /* A -> IFoo; 0 if not one */
/* check_dyn_create.c: `createDynamicObject<IFoo>(id, data)` (the call at *slot, its callee the
 * generic NB_EX_TYPE), and the host's conformance ids (nb_program.conformances) checked once */
const nb_type *ck_create_dynamic(nb_checker *c, nb_expr **slot);
void ck_check_conformance_ids(nb_checker *c);

/* check_iface.c: interfaces, conformance, constraints, member types */
int ck_is_builtin_iface(const char *name);   /* IDifferentiable, IFloat, IArithmetic, … */
int ck_conforms(nb_checker *c, const nb_type *t, const char *iface);
void ck_check_constraint_name(nb_checker *c, nb_type_expr *te); /* reports a non-interface */
void ck_merge_wheres(nb_checker *c, nb_decl *fn);  /* `where` clauses into the gparams' constraints */
/* Whether vals (a template's generic arguments) satisfy its constraints; else why (n bytes). */
int ck_satisfies(nb_checker *c, const nb_decl *tmpl, const int64_t *vals, char *why, size_t n);
void ck_check_conformance(nb_checker *c, nb_decl *sd); /* struct S : IFoo requirements, defaults */
void ck_check_interface(nb_checker *c, nb_decl *d);    /* pass 1 of an interface declaration */
void ck_merge_extension(nb_checker *c, nb_decl *ext);  /* extension S { … } into struct S (same module) */
/* Member type `member` of struct sd (te: the written type, for locations); NULL if none. */
const nb_type *ck_struct_member_type(nb_checker *c, nb_decl *sd, const char *member, nb_type_expr *te);

/* check_kernel.c: Slang compute forms (RWStructuredBuffer, [numthreads], SV_ semantics,
 * module-scope buffers as parameters of the functions using them). */
int ck_is_buffer_type_name(const char *name);
const nb_type *ck_resolve_buffer_type(nb_checker *c, nb_type_expr *te);
void ck_kernel_numthreads(nb_checker *c, nb_decl *fn, const nb_attr *a);
void ck_kernel_semantics(nb_checker *c, nb_decl *fn);
int ck_kernel_global(nb_checker *c, nb_decl *d, const nb_type *t);
/* [shader("compute")]: an entry point; without [numthreads] its thread group is one thread. */
void ck_kernel_shader_stage(nb_checker *c, nb_decl *fn, const nb_attr *a);
void ck_bind_shader_params(nb_checker *c);
void ck_kernel_shared_local(nb_checker *c, nb_decl *d);
const nb_type *ck_group_intrinsic(nb_checker *c, nb_expr *call, int id, nb_expr **args, int n, const char *name);
/* check_view.c: slang-torch's TensorView / DiffTensorView (ranks inferred before checking),
 * tensor methods (load/store/size/GetDimensions), [TorchEntryPoint] host functions set aside. */
void ck_prepare_views(nb_checker *c, nb_module_ast *m);
void ck_infer_view_ranks(nb_checker *c, nb_module_ast *m); /* check_view_rank.c */
const nb_type *ck_view_member(nb_checker *c, nb_expr **slot); /* v.primal, v.diff.diff (check_view.c) */
const nb_type *ck_view_primal_assign(nb_checker *c, nb_expr **slot, const nb_type *bt); /* v.primal = t */
const nb_type *ck_view_grad_assign(nb_checker *c, nb_expr **slot); /* v.diff.diff = g: diagnostic */
const nb_type *ck_tensor_method(nb_checker *c, nb_expr **slot, const nb_type *bt);
/* [TorchEntryPoint] host code (check_host.c). */
int ck_type_has_torch(const nb_type *t);
void ck_host_signature(nb_checker *c, nb_decl *fn, const nb_type *ret);
int ck_host_type_allowed(nb_checker *c, nb_loc loc);
/* Indexing a view or calling its methods inside host code: a diagnostic, 1 (check_host.c). */
int ck_host_view_use(nb_checker *c, nb_loc loc);
/* `DiffTensorView(x, dx)` converted to the DiffTensorView type `to` in host code (a struct field):
 * the intrinsic TORCH_VIEW of both handles; NULL when *slot is not that (check_host.c). */
const nb_type *ck_host_diff_view(nb_checker *c, nb_expr **slot, const nb_type *to);
const nb_type *ck_torch_static(nb_checker *c, nb_expr **slot, const nb_type *st, const char *m);
const nb_type *ck_torch_method(nb_checker *c, nb_expr **slot, const nb_type *bt);
const nb_type *ck_dispatch_kernel(nb_checker *c, nb_expr **slot);

/* check_enum.c: namespaces: the namespace a declaration's names are looked up in, and
 * `N.f(…)` / `N::k` / `N.E.A` written with a namespace prefix */
const char *ck_decl_ns(const nb_decl *d);
/* The dotted path of a NAME / MEMBER chain (`A.B.f`), or NULL (ck_alloc'd). */
const char *ck_dotted_path(nb_checker *c, const nb_expr *e);
/* e (a MEMBER chain) names a global of kind `kind` through namespace prefixes: e becomes that
 * NAME ("A.B.f") and 1 is returned. */
int ck_namespace_member(nb_checker *c, nb_expr *e, int kind);
/* `N.x` where N is a namespace (of this module or an import) without an x: reported, 1 returned. */
int ck_namespace_unknown_member(nb_checker *c, nb_expr *e);

/* check_enum.c: enums (typedefs with cases) */
void ck_check_enum(nb_checker *c, nb_decl *d);          /* case values, underlying type */
nb_decl *ck_find_enum(nb_checker *c, const char *name); /* the enum typedef named name, or NULL */
const nb_type *ck_enum_member(nb_checker *c, nb_expr *e, nb_decl *ed); /* `E.A` / `E::A` */
/* A bare NAME naming a case of the enum being checked (c->enum_ctx): resolved, its type
 * returned; NULL otherwise. */
const nb_type *ck_enum_bare_case(nb_checker *c, nb_expr *e);
/* The type of a value generic parameter `let M : name`: a built-in scalar or an enum's
 * underlying type; NULL for other names. */
const nb_type *ck_value_gparam_type(nb_checker *c, const char *name);
/* A NAME "E.A" (a generic argument the parser read as a dotted type name) naming an enum case
 * becomes the member expression E.A; returns its type, or NULL when it is not one. */
const nb_type *ck_enum_dotted_name(nb_checker *c, nb_expr *e);

/* check_array.c: `T a[] = { … }` (the outermost length from the list, before resolving te) and
 * `a.getCount()` (the call at *slot becomes the constant length of array type at) */
void ck_infer_array_size(nb_checker *c, nb_type_expr *te, nb_expr *init);
const nb_type *ck_array_get_count(nb_checker *c, nb_expr **slot, const nb_type *at);

/* check_swizzle.c: `m._11` / `m._m00_m11` of a matrix (base already checked) */
const nb_type *ck_matrix_swizzle(nb_checker *c, nb_expr **slot, const nb_type *mt);
/* `float2x2(m)` of a larger matrix m (Slang keeps the top-left block): rewrites the call's
 * arguments to the rows m[r].xy… (unchecked); 0 after a diagnostic. */
int ck_matrix_truncate_args(nb_checker *c, nb_expr *call, const nb_type *t);

/* check_expr.c */
const nb_type *ck_name_as_type(nb_checker *c, const char *name, nb_loc loc); /* NULL if not a type */
int ck_has_method(nb_decl *sd, const char *name);
void ck_report_not_lvalue(nb_checker *c, const nb_expr *e, const char *what);
const nb_type *ck_common_type(nb_checker *c, nb_loc loc, const nb_type *a, const nb_type *b,
                              const char *op, int keep_bool);
const nb_type *ck_with_kind(nb_checker *c, const nb_type *t, nb_scalar_kind k);
const nb_type *ck_init_list(nb_checker *c, nb_expr *e, const nb_type *to);
/* check_call.c, shared with check_call_intrin.c */
int ck_is_float_kind(nb_scalar_kind s);           /* half, float or double */
int ck_is_value_shape(const nb_type *t);          /* scalar, vector or matrix */
int ck_is_pending_list(const nb_expr *e);         /* an initializer-list argument not checked yet */
void ck_describe_call(const char *name, nb_expr **args, int nargs, nb_strbuf *sb); /* "f(float3, int)" */
void ck_check_args(nb_checker *c, nb_expr *call); /* checks every argument */
void ck_fail_pending(nb_checker *c, nb_expr *call); /* pending lists get the error type */
/* check_call_intrin.c: a call of intrinsic `id` (intrinsics.h) */
const nb_type *ck_call_intrinsic(nb_checker *c, nb_expr *call, int id);
/* check_stmt.c: a statement, and a function's body (signature, parameters, statements, missing
 * return) */
void ck_check_stmt(nb_checker *c, nb_stmt *s);
void ck_check_func_body(nb_checker *c, nb_decl *fn);
/* check.c: folds a variable's constant initializer into d->u.var.has_const/const_i/const_f */
void ck_fold_var(nb_decl *d);
/* check.c: scopes, for the checkers in other files */
void ck_push_scope(nb_checker *c);
void ck_pop_scope(nb_checker *c);
void ck_declare(nb_checker *c, const char *name, nb_decl *d, nb_loc loc); /* in the innermost scope */
/* check_generic.c: appends a checker-made declaration to the module being checked (its body is
 * checked with the module's other bodies) */
int ck_append_decl(nb_checker *c, nb_decl *d);
/* check_iface.c: whether interface `have` is `want` or inherits from it */
int ck_iface_extends(nb_checker *c, const char *have, const char *want);
/* check_diff_builtin.c: the [Differentiable] wrapper of the built-in `iname` for a derivative
 * call (fwd_diff(sin)(…)): ids/nops the operators, outermost first; NULL after a diagnostic at
 * loc (dname: the operator as spelled). */
/* `T.dzero()`, `T.dadd(a, b)`, `T.dmul(s, a)` of a differentiable type st without its own: *slot
 * (the call) is rewritten to the Differential's zero / a + b / s * a and typed; NULL when
 * mname is none of these or st's struct declares it. */
const nb_type *ck_diff_static(nb_checker *c, nb_expr **slot, const nb_type *st, const char *mname);
/* sincos(x, out s, out c) of Slang's library: a synthesized [Differentiable] function of x's
 * float type (check_diff_builtin.c); NULL after a diagnostic */
nb_decl *ck_sincos_func(nb_checker *c, const nb_type *t, nb_loc loc);
/* v.store(RWStructuredBuffer<T> b, int byteOffset = 0) of a vector (Slang's CoopVec store) */
const nb_type *ck_vector_store(nb_checker *c, nb_expr **slot, const nb_type *vt);
nb_decl *ck_sincos_diff_wrapper(nb_checker *c, nb_expr *call, const int *ids, int nops, const char *dname, nb_loc loc);
nb_decl *ck_builtin_diff_wrapper(nb_checker *c, const char *iname, nb_expr *call, const int *ids, int nops,
                                 const char *dname, nb_loc loc);
/* check_target.c: __target_switch / __intrinsic_asm / __requirePrelude statements, where
 * __intrinsic_asm may stand in a function body (after the body is checked), and printf calls */
void ck_check_target_stmt(nb_checker *c, nb_stmt *s);
void ck_check_asm_placement(nb_checker *c, nb_decl *fn);
const nb_type *ck_printf(nb_checker *c, nb_expr *call);
/* `pow<float>(x, n)` / `reinterpret<int, uint>(x)` / `diffPair<S>(p, d)`: explicit generic arguments
 * of built-in functions (the callee is a generic NB_EX_TYPE); NULL when the name is not one. */
const nb_type *ck_builtin_generic_call(nb_checker *c, nb_expr **slot);
/* Arguments of fn's constexpr parameters (call's arguments are in parameter order) must be
 * compile-time constants. */
void ck_check_constexpr_args(nb_checker *c, nb_expr *call, nb_decl *fn);
/* check_ptr.c: pointers (Ptr<T>, T*, *p, &x, p[i], p->f, nullptr, __getAddress) */
const nb_type *ck_resolve_ptr_type(nb_checker *c, nb_type_expr *te);
/* IDifferentiablePtrType structs and DifferentialPtrPair<P> (check_ptr.c) */
int ck_is_ptr_type(nb_checker *c, const nb_type *t);
const nb_type *ck_ptr_differential(nb_checker *c, const nb_type *t);
const nb_type *ck_resolve_ptr_pair(nb_checker *c, nb_type_expr *te, const nb_type *e);
/* DifferentialPtrPair<t> of a pointer type or an array of them (made on first use), else NULL. */
const nb_type *ck_ptr_pair_type(nb_checker *c, const nb_type *t);
const nb_type *ck_ptr_unary(nb_checker *c, nb_expr **slot);  /* *p and &x */
const nb_type *ck_ptr_index(nb_checker *c, nb_expr **slot);  /* p[i] (base checked) */
const nb_type *ck_ptr_binary(nb_checker *c, nb_expr **slot, const nb_type *a, const nb_type *b);
const nb_type *ck_nullptr(nb_checker *c, nb_expr *e);
const nb_type *ck_get_address(nb_checker *c, nb_expr **slot);
/* check_call.c */
const nb_type *ck_call(nb_checker *c, nb_expr **slot);
/* call of method callee->u.member.member of struct sd on callee's (checked) base; call's
 * arguments are not checked yet. */
const nb_type *ck_call_method(nb_checker *c, nb_expr *call, nb_expr *callee, nb_decl *sd);
/* A user operator (`S operator+(S a, S b)`, free or static in an operand's struct) for *slot,
 * whose already-checked operands are args: *slot becomes the call. NULL when no function of
 * that name exists (the caller reports the built-in operator's error). */
const nb_type *ck_call_operator(nb_checker *c, nb_expr **slot, const char *opname, nb_expr **args, int nargs);

const nb_type *ck_expr(nb_checker *c, nb_expr **slot);
/* Checks *slot expecting type `to` (init lists take it as their type) and converts. */
const nb_type *ck_expr_to(nb_checker *c, nb_expr **slot, const nb_type *to, const char *what);
/* Converts an already-checked expression; reports an error (with `what` as context) if the
 * conversion is impossible. Returns 1 on success. */
int ck_coerce(nb_checker *c, nb_expr **slot, const nb_type *to, const char *what);
nb_expr *ck_new_expr(nb_checker *c, nb_expr_kind kind, nb_loc loc);
/* Untyped tree nodes for synthesized code (check_dyn.c): a name, base.member, a statement of a
 * kind, a type expression standing for an already-resolved type. */
nb_expr *ck_syn_name(nb_checker *c, const char *name, nb_loc loc);
nb_expr *ck_syn_member(nb_checker *c, nb_expr *base, const char *m, nb_loc loc);
nb_stmt *ck_syn_stmt(nb_checker *c, nb_stmt_kind k, nb_loc loc);
nb_type_expr *ck_syn_type(nb_checker *c, const nb_type *t, nb_loc loc);
int ck_is_error(const nb_type *t);
int ck_checked(const nb_expr *e);
int ck_scalar_limit(nb_checker *c, nb_expr *e, const nb_type *t, const char *member); /* int.maxValue, … */ /* checked with success (a type other than the error type) */
int ck_scalar_rank(nb_scalar_kind s);
int ck_is_int_scalar_kind(nb_scalar_kind s);
/* Constant-folds an integer expression (already checked). Returns 1 on success. */
int ck_const_int(const nb_expr *e, int64_t *out);

#endif

/* The host unit of a module: its [TorchEntryPoint] functions (and the host code they call) as C
 * for the host CPU, whatever device the module's kernels run on (check_host.c says what host
 * code is). src/call/host.c compiles it with the CPU JIT and calls its one entry:
 *
 *   void nb_host_entry(const char *name, int overload, const nb_host_rt *rt,
 *                      const nb_host_val *args, nb_host_val *results, int *found);
 *
 * args / results hold the function's parameter / result leaves in reflection order (struct
 * fields depth-first, arrays of structs or TorchTensors element by element; compiler.h
 * nb_fn_leaf), one slot each: a TorchTensor is a handle (.h), a float scalar .f, an integer or
 * bool scalar .i; a vector, matrix or array leaf takes one slot per component (C order). TorchTensor operations call the runtime table rt (a thread-local
 * pointer while the entry runs, so that host helpers need no extra parameter):
 *
 *   alloc(ctx, dtype, ndim, shape, zero) -> handle     like(ctx, h, zero) -> handle
 *   size(ctx, h, d) / dims(ctx, h) / stride(ctx, h, d) (elements; 0 for a bad handle or dimension)
 *   dispatch(ctx, kernel, grid xyz, block xyz, nargs, args): launch a kernel of the module;
 *       args: one per leaf of the kernel's parameters, a tensor handle (and a DiffTensorView's
 *       gradient handle, 0 for none) or the leaf's numbers (a float3: 3, a struct's fields: a
 *       leaf each)
 *
 * A runtime call that fails records its error in ctx and returns 0; the runtime ignores the
 * calls after the first error and reports it when the entry returns (so generated code needs no
 * error paths). Handles are indices into the runtime's table of the call's tensors; 0 is none.
 */
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "lang/ad.h"
#include "lang/check.h"
#include "lang/compiler.h"
#include "lang/emit_c.h"
#include "lang/intrinsics.h"
#include "lang/program.h"

#define APPEND(sb, ...) nb_strbuf_printf((sb), __VA_ARGS__)

static const char host_runtime[] =
    "/* host runtime (emit_host.c) */\n"
    "typedef struct nb_host_karg { int is_tensor; int n; long long tensor, grad; const double *v; } nb_host_karg;\n"
    "typedef union nb_host_val { long long h; long long i; double f; } nb_host_val;\n"
    "typedef struct nb_host_rt {\n"
    "    void *ctx;\n"
    "    long long (*alloc)(void *ctx, int dtype, int ndim, const long long *shape, int zero);\n"
    "    long long (*like)(void *ctx, long long h, int zero);\n"
    "    long long (*size)(void *ctx, long long h, int dim);\n"
    "    long long (*dims)(void *ctx, long long h);\n"
    "    long long (*stride)(void *ctx, long long h, int dim);\n"
    "    void (*dispatch)(void *ctx, const char *kernel, unsigned gx, unsigned gy, unsigned gz, unsigned bx,\n"
    "                     unsigned by, unsigned bz, int nargs, const nb_host_karg *args);\n"
    "} nb_host_rt;\n"
    "static __thread const nb_host_rt *nb_hrt;\n"
    "static nb_host_karg nb_ka_t(long long h, long long g) { nb_host_karg a; memset(&a, 0, sizeof a); "
    "a.is_tensor = 1; a.tensor = h; a.grad = g; return a; }\n"
    "static nb_host_karg nb_ka_v(int n, const double *v) { nb_host_karg a; memset(&a, 0, sizeof a); a.n = n; "
    "a.v = v; return a; }\n";

/* Calls fn with the C lvalue of each scalar component of a value of type t (a scalar, vector,
 * matrix, or an array of those) at lv, in C order (the order of nb_fn_leaf value_shape). */
typedef void (*comp_fn)(void *u, const char *lv, const nb_type *t);
static void each_comp(const nb_type *t, const char *lv, comp_fn fn, void *u)
{
    char sub[600];
    if (t->kind == NB_TY_ARRAY) {
        for (int i = 0; i < t->length; i++) {
            snprintf(sub, sizeof sub, "%s.a[%d]", lv, i);
            each_comp(t->elem, sub, fn, u);
        }
    } else if (t->kind == NB_TY_VECTOR || t->kind == NB_TY_MATRIX) {
        for (int k = 0; k < (t->kind == NB_TY_VECTOR ? t->cols : t->rows * t->cols); k++) {
            nb_strbuf sb;
            nb_strbuf_init(&sb);
            nb_strbuf_append(&sb, lv);
            nb_emit_comp(t, k, &sb);
            fn(u, nb_strbuf_cstr(&sb), t);
            nb_strbuf_free(&sb);
        }
    } else fn(u, lv, t);
}

/* The innermost element type of (nested) arrays. */
static const nb_type *innermost(const nb_type *t)
{
    while (t && t->kind == NB_TY_ARRAY) t = t->elem;
    return t;
}

typedef struct karg_ctx {
    nb_strbuf *o;
    int first; /* no ", " before the next item */
} karg_ctx;

static void karg_comp(void *u, const char *lv, const nb_type *t)
{
    karg_ctx *k = u;
    (void)t;
    APPEND(k->o, "%s(double)(%s)", k->first ? "" : ", ", lv);
    k->first = 0;
}

/* The kernel-argument leaves of a value of type t at lv (program.c add_leaves' order: struct fields
 * depth-first, arrays of structs and of views element by element, anything else one leaf of its
 * components). */
static void karg_values(nb_emitter *e, const nb_type *t, const char *lv, int *count, nb_strbuf *o)
{
    char sub[600];
    if (t->kind == NB_TY_STRUCT && t->decl) {
        for (int i = 0; i < t->decl->u.strct.nfields; i++) {
            nb_decl *f = t->decl->u.strct.fields[i];
            snprintf(sub, sizeof sub, "%s.%s", lv, nb_emit_safe_name(e, f->name ? f->name : "?"));
            karg_values(e, f->u.var.type, sub, count, o);
        }
        return;
    }
    if (t->kind == NB_TY_ARRAY && (innermost(t)->kind == NB_TY_STRUCT || innermost(t)->kind == NB_TY_TENSOR)) {
        for (int i = 0; i < t->length; i++) {
            snprintf(sub, sizeof sub, "%s.a[%d]", lv, i);
            karg_values(e, t->elem, sub, count, o);
        }
        return;
    }
    if (t->kind == NB_TY_TENSOR) { /* a view field: its handles (E.host_views) */
        APPEND(o, "%snb_ka_t((%s).h, (%s).g)", *count ? ", " : "", lv, lv);
        (*count)++;
        return;
    }
    long long dims[8];
    int r = nb_type_value_shape(t, dims);
    long long n = 1;
    for (int d = 0; d < r; d++) n *= dims[d];
    APPEND(o, "%snb_ka_v(%lld, (const double[]){", *count ? ", " : "", n);
    karg_ctx k = {o, 1};
    each_comp(t, lv, karg_comp, &k);
    nb_strbuf_append(o, "})");
    (*count)++;
}

/* The kernel (a [CudaKernel] of the module) that a __dispatch_kernel names. */
static const nb_decl *dispatch_kernel_decl(nb_emitter *e, const char *name)
{
    for (int i = 0; i < e->m->nfuncs; i++) {
        const nb_ir_func *f = e->m->funcs[i];
        if (f->is_kernel && f->decl && f->role == NB_IR_PRIMAL && f->decl->name && !strcmp(f->decl->name, name))
            return f->decl;
    }
    return NULL;
}

void nb_emit_host_intrinsic(nb_emitter *e, const nb_ir_inst *x, const nb_type *rt, const nb_type *const *at,
                            const char *const *args, int n, nb_strbuf *o)
{
    const char *tn = rt && rt->kind == NB_TY_TORCH ? nb_emit_ctype(e, rt) : "";
    switch (x->intrinsic) {
    case NB_INTR_TORCH_ALLOC: {
        /* TorchTensor<float3>.alloc(n): shape [n, 3] (slang-torch adds the vector's size) */
        int vec = rt->elem && rt->elem->kind == NB_TY_VECTOR ? rt->elem->cols : 0;
        APPEND(o, "((%s){nb_hrt->alloc(nb_hrt->ctx, %d, %d, ", tn, (int)nb_emit_natural_dtype(rt->scalar), n + (vec > 0));
        if (!n && !vec) nb_strbuf_append(o, "(const long long *)0");
        else {
            nb_strbuf_append(o, "(const long long[]){");
            for (int i = 0; i < n; i++) APPEND(o, "%s(long long)%s", i ? ", " : "", args[i]);
            if (vec) APPEND(o, "%s%d", n ? ", " : "", vec);
            nb_strbuf_append(o, "}");
        }
        nb_strbuf_append(o, ", 0)})");
        return;
    }
    case NB_INTR_TORCH_ZEROS_LIKE: case NB_INTR_TORCH_EMPTY_LIKE:
        APPEND(o, "((%s){nb_hrt->like(nb_hrt->ctx, (%s).h, %d)})", tn, args[0], x->intrinsic == NB_INTR_TORCH_ZEROS_LIKE);
        return;
    case NB_INTR_TORCH_SIZE:
        APPEND(o, "((unsigned)nb_hrt->size(nb_hrt->ctx, (%s).h, %s))", args[0], args[1]);
        return;
    case NB_INTR_TORCH_STRIDE:
        APPEND(o, "((unsigned)nb_hrt->stride(nb_hrt->ctx, (%s).h, %s))", args[0], args[1]);
        return;
    case NB_INTR_TORCH_VIEW: /* (E.host_views: a view is { h, g }) */
        APPEND(o, "((%s){(%s).h, %s%s%s})", nb_emit_ctype(e, rt), args[0], n > 1 ? "(" : "", n > 1 ? args[1] : "0",
               n > 1 ? ").h" : "");
        return;
    case NB_INTR_TORCH_DIMS:
        APPEND(o, "((unsigned)nb_hrt->dims(nb_hrt->ctx, (%s).h))", args[0]);
        return;
    case NB_INTR_DISPATCH_KERNEL: {
        /* operands (check_host.c): grid, block, per kernel parameter one, a DiffTensorView two
         * (primal, gradient or the int 0); the runtime gets one nb_host_karg per kernel leaf */
        const nb_decl *k = n >= 2 ? dispatch_kernel_decl(e, x->text ? x->text : "") : NULL;
        if (!k) break;
        APPEND(o, "nb_hrt->dispatch(nb_hrt->ctx, \"%s\", (%s).x, (%s).y, (%s).z, (%s).x, (%s).y, (%s).z, ",
               x->text, args[0], args[0], args[0], args[1], args[1], args[1]);
        nb_strbuf list;
        nb_strbuf_init(&list);
        int count = 0, j = 2;
        for (int i = 0; i < k->u.func.nparams && j < n; i++) {
            const nb_type *pt = k->u.func.params[i]->u.param.type;
            if (pt->kind == NB_TY_TENSOR && pt->diff_tensor && j + 1 < n) {
                if (at[j + 1]->kind == NB_TY_TORCH)
                    APPEND(&list, "%snb_ka_t((%s).h, (%s).h)", count ? ", " : "", args[j], args[j + 1]);
                else APPEND(&list, "%snb_ka_t((%s).h, 0)", count ? ", " : "", args[j]);
                count++;
                j += 2;
            } else if (pt->kind == NB_TY_TENSOR) {
                APPEND(&list, "%snb_ka_t((%s).h, 0)", count ? ", " : "", args[j++]);
                count++;
            } else {
                char lv[512];
                snprintf(lv, sizeof lv, "(%s)", args[j++]);
                karg_values(e, at[j - 1], lv, &count, &list);
            }
        }
        if (!count) APPEND(o, "0, (const nb_host_karg *)0)");
        else APPEND(o, "%d, (const nb_host_karg[]){%s})", count, nb_strbuf_cstr(&list));
        nb_strbuf_free(&list);
        return;
    }
    default: break;
    }
    nb_emit_fail(e, "internal: host intrinsic %d", x->intrinsic);
    nb_strbuf_append(o, "0");
}

/* ---- the entry ------------------------------------------------------------------------------ */

typedef struct slot_ctx {
    nb_strbuf *o;
    const char *arr;
    int out;
    int *k;
} slot_ctx;

static void slot_comp(void *u, const char *lv, const nb_type *t)
{
    slot_ctx *s = u;
    int fl = t->scalar == NB_SC_FLOAT || t->scalar == NB_SC_DOUBLE || t->scalar == NB_SC_HALF;
    if (s->out) APPEND(s->o, "    %s[%d].%s = %s;\n", s->arr, *s->k, fl ? "f" : "i", lv);
    else APPEND(s->o, "    %s = (%s)%s[%d].%s;\n", lv, nb_emit_scalar_ctype(t->scalar), s->arr, *s->k, fl ? "f" : "i");
    (*s->k)++;
}

/* Reads (in) or writes (out) the slots of a value of type t at C lvalue `lv`, counting *k: its
 * leaves in program.c add_leaves' order (struct fields depth-first; arrays of structs or of
 * TorchTensors element by element), a TorchTensor one slot (.h), any other leaf one slot per
 * scalar component (.f or .i; a float3 three, a float[4] four, in C order). */
static void leaves_io(nb_emitter *e, const nb_type *t, const char *lv, int out, const char *arr, int *k, nb_strbuf *o)
{
    char sub[600];
    if (t->kind == NB_TY_STRUCT && t->decl) {
        for (int i = 0; i < t->decl->u.strct.nfields; i++) {
            nb_decl *f = t->decl->u.strct.fields[i];
            snprintf(sub, sizeof sub, "%s.%s", lv, nb_emit_safe_name(e, f->name ? f->name : "?"));
            leaves_io(e, f->u.var.type, sub, out, arr, k, o);
        }
        return;
    }
    const nb_type *in = innermost(t);
    if (t->kind == NB_TY_ARRAY && (in->kind == NB_TY_STRUCT || in->kind == NB_TY_TORCH)) {
        for (int i = 0; i < t->length; i++) {
            snprintf(sub, sizeof sub, "%s.a[%d]", lv, i);
            leaves_io(e, t->elem, sub, out, arr, k, o);
        }
        return;
    }
    if (t->kind == NB_TY_TORCH) {
        if (out) APPEND(o, "    %s[%d].h = %s.h;\n", arr, *k, lv);
        else APPEND(o, "    %s.h = %s[%d].h;\n", lv, arr, *k);
        (*k)++;
        return;
    }
    if (in->kind != NB_TY_SCALAR && in->kind != NB_TY_VECTOR && in->kind != NB_TY_MATRIX) {
        nb_emit_fail(e, "host functions take and return TorchTensor<T>, scalars, vectors, matrices and arrays and "
                     "structs of those, not '%s'", t->name ? t->name : "?");
        return;
    }
    slot_ctx s = {o, arr, out, k};
    each_comp(t, lv, slot_comp, &s);
}

nb_status nb_program_emit_host(nb_program *p, nb_strbuf *out, int *nhost)
{
    NB_CHECK_ARG(p);
    NB_CHECK_ARG(out);
    if (nhost) *nhost = 0;
    nb_ir_module *m;
    NB_TRY(nb_program_get_ir(p, &m));
    nb_emitter E;
    nb_emit_init(&E, m, NB_TARGET_C);
    E.unchecked = p->unchecked;
    E.host_views = 1;
    E.src = &p->src;
    nb_strbuf_append(&E.helpers, host_runtime);
    nb_strbuf entry;
    nb_strbuf_init(&entry);
    nb_strbuf_append(&entry, "\nvoid nb_host_entry(const char *name, int overload, const nb_host_rt *rt, "
                             "const nb_host_val *a, nb_host_val *r, int *found)\n{\n"
                             "    const nb_host_rt *saved = nb_hrt;\n    *found = 0;\n    nb_hrt = rt;\n");
    nb_status st = NB_OK;
    int count = 0;
    /* entry points in the order nb_program_find_functions numbers their overloads */
    for (int mi = 0; mi < p->nmodules && st == NB_OK; mi++) {
        nb_module_ast *mod = p->modules[mi];
        for (int di = 0; di < mod->ndecls && st == NB_OK; di++) {
            nb_decl *d = mod->decls[di];
            if (!d || d->kind != NB_DECL_FUNC || !d->u.func.is_host || !d->u.func.body || !d->name ||
                !nb_attr_find(&d->attrs, "TorchEntryPoint")) /* (helpers: emitted as what entries call) */
                continue;
            nb_decl *all[64];
            int nd = nb_program_find_functions(p, d->name, all, 64), ov = -1;
            for (int i = 0; i < nd && i < 64; i++)
                if (all[i] == d) ov = i;
            if (ov < 0) continue; /* not callable by name (a generic instance, …) */
            nb_ir_func *f = nb_ir_find_func(m, d);
            if (!f) continue;
            st = nb_program_ir_scope(p, m, f);
            if (st != NB_OK) break;
            nb_emit_function(&E, f);
            if (!E.ok) break;
            const char *fname = nb_emit_safe_name(&E, f->cname);
            APPEND(&entry, "    if (!strcmp(name, \"%s\") && overload == %d) {\n", d->name, ov);
            int k = 0;
            nb_strbuf call;
            nb_strbuf_init(&call);
            for (int i = 0; i < f->nparams; i++) {
                char lv[32];
                snprintf(lv, sizeof lv, "p%d", i);
                APPEND(&entry, "    %s p%d;\n", nb_emit_ctype(&E, f->params[i]->type), i);
                leaves_io(&E, f->params[i]->type, lv, 0, "a", &k, &entry);
                APPEND(&call, "%sp%d", i ? ", " : "", i);
            }
            if (f->ret && f->ret->kind != NB_TY_VOID) {
                int kr = 0;
                APPEND(&entry, "    %s res = %s(%s);\n", nb_emit_ctype(&E, f->ret), fname, nb_strbuf_cstr(&call));
                leaves_io(&E, f->ret, "res", 1, "r", &kr, &entry);
            } else
                APPEND(&entry, "    %s(%s);\n", fname, nb_strbuf_cstr(&call));
            nb_strbuf_free(&call);
            nb_strbuf_append(&entry, "    *found = 1;\n    }\n");
            count++;
        }
    }
    nb_strbuf_append(&entry, "    nb_hrt = saved;\n}\n");
    nb_strbuf_append(&E.tail, nb_strbuf_cstr(&entry));
    nb_strbuf_free(&entry);
    if (st == NB_OK && !E.ok) st = nb_error(NB_ERR_UNSUPPORTED, "%s", E.err);
    if (st == NB_OK) {
        nb_emit_finish(&E, out);
        if (!nb_strbuf_ok(out)) st = nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory emitting host code");
    }
    nb_emit_free(&E);
    if (nhost) *nhost = count;
    return st;
}

/* slang-torch's host code (issue #15): [TorchEntryPoint] functions, TorchTensor<T> and
 * __dispatch_kernel.
 *
 *   [TorchEntryPoint]
 *   TorchTensor<float> square_fwd(TorchTensor<float> input)
 *   {
 *       var result = TorchTensor<float>.alloc(input.size(0), input.size(1));
 *       __dispatch_kernel(square_fwd_kernel, uint3(1), uint3(result.size(0), result.size(1), 1))(input, result);
 *       return result;
 *   }
 *
 * A function is host code (nb_decl.func.is_host) when it is a [TorchEntryPoint] or takes or returns
 * a TorchTensor (directly or in a struct). Host code runs on the host CPU, also for a module on
 * CUDA: it is emitted as C into the module's host unit (emit_host.c), with TorchTensor<T> a handle
 * and its operations calls into the runtime the call layer passes in (src/call/host.c).
 *
 * What the checker makes of it (intrinsics.h, ISIG TORCH; ref = NB_REF_INTRINSIC):
 *   TorchTensor<T>.alloc(d0, …)       TORCH_ALLOC, args = the extents (uint; 0 to 8 of them)
 *   TorchTensor<T>.zerosLike(t)       TORCH_ZEROS_LIKE (t a TorchTensor<T>); emptyLike: TORCH_EMPTY_LIKE
 *   t.size(d)                         TORCH_SIZE (t, d as int) -> uint
 *   t.dims()                          TORCH_DIMS (t) -> uint
 *   t.stride(d)                       TORCH_STRIDE (t, d as int) -> uint: in elements, as torch
 *   __dispatch_kernel(k, g, b)(a…)    DISPATCH_KERNEL, decl = k, args = g, b (uint3), then per
 *                                     parameter of k: a TorchTensor<T> for a TensorView<T> (T a
 *                                     scalar or vector; the view's rank is checked when it runs);
 *                                     for a DiffTensorView two: the primal TorchTensor and its
 *                                     gradient (`DiffTensorView(x, dx)` written as the argument) or
 *                                     the int 0 (`x` alone: no gradient); values (scalars, vectors,
 *                                     matrices, arrays and structs of those) converted like a
 *                                     call's arguments; a struct's view fields are filled from
 *                                     TorchTensors in host code (`p.a = x`: ck_coerce's
 *                                     TorchTensor -> TensorView, TORCH_VIEW; primal only).
 * Errors (Slang: "TorchTensor not allowed in device functions"): TorchTensor in a kernel's
 * signature or in the body of a function that is not host code, __dispatch_kernel outside host
 * code, of a function that is not a [CudaKernel], with the wrong number of arguments.
 */
#include <stdio.h>
#include <string.h>

#include "lang/check_internal.h"
#include "lang/intrinsics.h"

int ck_type_has_torch(const nb_type *t) {
    if (!t) return 0;
    if (t->kind == NB_TY_TORCH) return 1;
    if (t->kind == NB_TY_ARRAY) return ck_type_has_torch(t->elem);
    if (t->kind == NB_TY_STRUCT && t->decl)
        for (int i = 0; i < t->decl->u.strct.nfields; i++) {
            nb_decl *f = t->decl->u.strct.fields[i];
            if (f && f->u.var.type && f->u.var.type != t && ck_type_has_torch(f->u.var.type)) return 1;
        }
    return 0;
}

/* A type an entry point's parameter or result may have: TorchTensor<T>, a scalar, vector or matrix,
 * an array or struct of those (the call layer passes them as leaves: program.c add_leaves); *bad
 * gets the first other type. */
static int entry_type_ok(const nb_type *t, const nb_type **bad) {
    if (!t || t->kind == NB_TY_ERROR || t->kind == NB_TY_VOID || t->kind == NB_TY_TORCH || t->kind == NB_TY_SCALAR ||
        t->kind == NB_TY_VECTOR || t->kind == NB_TY_MATRIX)
        return 1;
    if (t->kind == NB_TY_ARRAY && t->length > 0) return entry_type_ok(t->elem, bad);
    if (t->kind == NB_TY_STRUCT && t->decl) {
        for (int i = 0; i < t->decl->u.strct.nfields; i++) {
            nb_decl *f = t->decl->u.strct.fields[i];
            if (f && f->u.var.type && !entry_type_ok(f->u.var.type, bad)) return 0;
        }
        return 1;
    }
    *bad = t;
    return 0;
}

/* After a function's signature and attributes: is it host code, and is that allowed. */
void ck_host_signature(nb_checker *c, nb_decl *fn, const nb_type *ret) {
    int entry = nb_attr_find(&fn->attrs, "TorchEntryPoint") != NULL;
    int torch = ck_type_has_torch(ret);
    for (int i = 0; i < fn->u.func.nparams; i++) {
        nb_decl *p = fn->u.func.params[i];
        if (!p || !ck_type_has_torch(p->u.param.type)) continue;
        torch = 1;
        if (fn->u.func.is_kernel)
            ck_err(c, p->loc, "TorchTensor is not allowed in device functions: parameter '%s' of kernel '%s' (take a "
                   "TensorView<T>; host code passes a TorchTensor to it with __dispatch_kernel)",
                   p->name ? p->name : "?", fn->name ? fn->name : "?");
        if (p->u.param.dir != NB_DIR_IN)
            ck_err(c, p->loc, "host function parameter '%s' must be 'in' (return tensors instead)", p->name ? p->name : "?");
    }
    if (fn->u.func.is_kernel && ck_type_has_torch(ret))
        ck_err(c, fn->loc, "TorchTensor is not allowed in device functions: kernel '%s' returns one", fn->name ? fn->name : "?");
    if (entry && fn->u.func.is_kernel)
        ck_err(c, fn->loc, "'%s' cannot be both a [TorchEntryPoint] (host code) and a kernel", fn->name ? fn->name : "?");
    if (entry && ck_is_template(fn))
        ck_err(c, fn->loc, "generic [TorchEntryPoint] functions are not supported");
    const nb_type *bad = NULL;
    for (int i = 0; entry && !fn->u.func.is_kernel && i < fn->u.func.nparams; i++) {
        nb_decl *p = fn->u.func.params[i];
        if (p && !entry_type_ok(p->u.param.type, &bad))
            ck_err(c, p->loc, "[TorchEntryPoint] parameter '%s': nabla passes TorchTensor<T>, scalars, vectors, "
                   "matrices and arrays and structs of those to host functions, not '%s'", p->name ? p->name : "?",
                   bad->name);
    }
    if (entry && !fn->u.func.is_kernel && !entry_type_ok(ret, &bad))
        ck_err(c, fn->u.func.ret ? fn->u.func.ret->loc : fn->loc, "[TorchEntryPoint] '%s' returns '%s': nabla returns "
               "TorchTensor<T>, scalars, vectors, matrices and arrays and structs of those from host functions", fn->name ? fn->name : "?",
               bad->name);
    fn->u.func.is_host = (entry || torch) && !fn->u.func.is_kernel;
}

/* TorchTensor<T> written in a body: only in host code. 0 after a diagnostic. */
int ck_host_type_allowed(nb_checker *c, nb_loc loc) {
    if (!c->fn || c->fn->u.func.is_host) return 1;
    if (c->fn->u.func.is_kernel)
        ck_err(c, loc, "TorchTensor is not allowed in device functions (kernel '%s'): use TensorView<T>",
               c->fn->name ? c->fn->name : "?");
    else
        ck_err(c, loc, "TorchTensor is host code: it may be used in [TorchEntryPoint] functions and functions taking or "
               "returning a TorchTensor, not in '%s'", c->fn->name ? c->fn->name : "?");
    return 0;
}

/* In host code a view (a struct field filled from a TorchTensor) is only assigned and passed to
 * __dispatch_kernel: its elements and sizes live on the device (emit_host.c has handles only). */
int ck_host_view_use(nb_checker *c, nb_loc loc) {
    if (!c->fn || !c->fn->u.func.is_host) return 0;
    ck_err(c, loc, "a TensorView in host code can only be assigned from a TorchTensor and passed to __dispatch_kernel "
           "(its elements and sizes are device code: use the TorchTensor)");
    return 1;
}

static nb_expr **new_args(nb_checker *c, int n) {
    return ck_alloc(c, sizeof(nb_expr *) * (size_t)(n ? n : 1));
}

static const nb_type *as_intrinsic(nb_checker *c, nb_expr *call, int id, nb_expr **args, int n, const nb_type *t) {
    call->ref = NB_REF_INTRINSIC;
    call->index = id;
    call->u.call.args = args;
    call->u.call.nargs = n;
    return call->type = t;
}

/* TorchTensor<T>.alloc(…) / .zerosLike(t) / .emptyLike(t). */
const nb_type *ck_torch_static(nb_checker *c, nb_expr **slot, const nb_type *st, const char *m) {
    nb_expr *call = *slot;
    int n = call->u.call.nargs;
    if (!ck_host_type_allowed(c, call->loc)) {
        ck_check_args(c, call);
        return call->type = c->tt->t_error;
    }
    if (!strcmp(m, "alloc")) {
        /* TorchTensor<float3>.alloc(n): shape [n, 3] (the vector is the last dimension, as slang-torch) */
        int maxn = st->elem && st->elem->kind == NB_TY_VECTOR ? 7 : 8;
        if (n > maxn) {
            ck_err(c, call->loc, "TorchTensor<%s>.alloc takes at most %d extents, got %d", st->elem ? st->elem->name : "?",
                   maxn, n);
            ck_check_args(c, call);
            return call->type = c->tt->t_error;
        }
        for (int i = 0; i < n; i++) ck_expr_to(c, &call->u.call.args[i], c->tt->t_uint, "an extent of TorchTensor.alloc");
        return as_intrinsic(c, call, NB_INTR_TORCH_ALLOC, call->u.call.args, n, st);
    }
    if (!strcmp(m, "zerosLike") || !strcmp(m, "emptyLike")) {
        if (n != 1) {
            ck_err(c, call->loc, "TorchTensor.%s takes one tensor, got %d arguments", m, n);
            ck_check_args(c, call);
            return call->type = c->tt->t_error;
        }
        ck_expr_to(c, &call->u.call.args[0], st, m);
        return as_intrinsic(c, call, m[0] == 'z' ? NB_INTR_TORCH_ZEROS_LIKE : NB_INTR_TORCH_EMPTY_LIKE, call->u.call.args,
                            1, st);
    }
    ck_check_args(c, call);
    ck_err(c, call->u.call.callee->loc, "'%s' has no static member function '%s' (alloc, zerosLike, emptyLike)", st->name, m);
    return call->type = c->tt->t_error;
}

/* t.size(d) / t.dims(). */
const nb_type *ck_torch_method(nb_checker *c, nb_expr **slot, const nb_type *bt) {
    nb_expr *call = *slot;
    nb_expr *base = call->u.call.callee->u.member.base;
    const char *m = call->u.call.callee->u.member.member;
    int n = call->u.call.nargs;
    if (!strcmp(m, "size") || !strcmp(m, "stride")) {
        if (n != 1) {
            ck_err(c, call->loc, "'%s' takes the dimension, got %d arguments", m, n);
            ck_check_args(c, call);
            return call->type = c->tt->t_error;
        }
        nb_expr **a = new_args(c, 2);
        if (!a) return call->type = c->tt->t_error;
        a[0] = base;
        a[1] = call->u.call.args[0];
        ck_expr_to(c, &a[1], c->tt->t_int, m[1] == 'i' ? "the dimension of size()" : "the dimension of stride()");
        return as_intrinsic(c, call, m[1] == 'i' ? NB_INTR_TORCH_SIZE : NB_INTR_TORCH_STRIDE, a, 2, c->tt->t_uint);
    }
    if (!strcmp(m, "dims")) {
        if (n != 0) {
            ck_err(c, call->loc, "'dims' takes no arguments");
            ck_check_args(c, call);
            return call->type = c->tt->t_error;
        }
        nb_expr **a = new_args(c, 1);
        if (!a) return call->type = c->tt->t_error;
        a[0] = base;
        return as_intrinsic(c, call, NB_INTR_TORCH_DIMS, a, 1, c->tt->t_uint);
    }
    (void)bt;
    ck_check_args(c, call);
    ck_err(c, call->u.call.callee->loc, "no member function named '%s' in '%s' (size, stride, dims)", m, bt->name);
    return call->type = c->tt->t_error;
}

/* A kernel parameter host code passes by value: scalars, vectors, matrices, arrays and structs of
 * those, and views as struct fields (the call layer binds their leaves); *bad gets the first other
 * type (an array of views, a buffer). */
static int kernel_value_ok(const nb_type *t, const nb_type **bad) {
    if (t->kind == NB_TY_SCALAR || t->kind == NB_TY_VECTOR || t->kind == NB_TY_MATRIX) return 1;
    /* a view (a struct field, an array element): filled from a TorchTensor in host code (`p.a = x`,
     * `ws[1] = x`: ck_coerce); the call layer binds each as a leaf ("p.a", "ws[1]") */
    if (t->kind == NB_TY_TENSOR && !t->buffer && (t->elem->kind == NB_TY_SCALAR || t->elem->kind == NB_TY_VECTOR))
        return 1;
    if (t->kind == NB_TY_ARRAY && t->length > 0) return kernel_value_ok(t->elem, bad);
    if (t->kind == NB_TY_STRUCT && t->decl) {
        for (int i = 0; i < t->decl->u.strct.nfields; i++) {
            nb_decl *f = t->decl->u.strct.fields[i];
            if (f && f->u.var.type && !kernel_value_ok(f->u.var.type, bad)) return 0;
        }
        return 1;
    }
    *bad = t;
    return 0;
}

/* Is e `DiffTensorView(…)` / `DiffTensorView<T>(…)` (slang-torch's constructor from a primal and
 * a gradient view)? */
static int is_diff_view_ctor(const nb_expr *e) {
    if (e->kind != NB_EX_CALL || !e->u.call.callee) return 0;
    const nb_expr *cal = e->u.call.callee;
    const char *n = cal->kind == NB_EX_NAME ? cal->u.name.name
                    : cal->kind == NB_EX_TYPE && cal->u.type.texpr ? cal->u.type.texpr->name : NULL;
    return n && !strcmp(n, "DiffTensorView");
}

/* A DiffTensorView parameter's argument (kn, pn: the kernel and parameter; kn NULL: a value
 * assigned to a DiffTensorView in host code): a TorchTensor<T> (the primal view, no gradient) or
 * DiffTensorView(primal, grad) of TorchTensors, into out[0] (primal) and out[1] (the gradient, or
 * the int 0 for none). 0 after a diagnostic. */
static int dispatch_diff_view(nb_checker *c, const char *kn, const char *pn, const nb_type *pt, nb_expr *arg,
                              nb_expr **out) {
    const char *who = kn ? "__dispatch_kernel" : "DiffTensorView in host code";
    nb_expr *zero = ck_alloc(c, sizeof *zero);
    if (!zero) return 0;
    memset(zero, 0, sizeof *zero);
    zero->kind = NB_EX_INT;
    zero->loc = arg->loc;
    zero->type = c->tt->t_int;
    out[0] = arg;
    out[1] = zero;
    int n = 1;
    if (is_diff_view_ctor(arg)) {
        n = arg->u.call.nargs;
        if (n < 1 || n > 2) {
            ck_err(c, arg->loc, "%s: DiffTensorView(primal[, grad]) takes 1 or 2 TorchTensors, got %d", who, n);
            return 0;
        }
        out[0] = arg->u.call.args[0];
        if (n == 2) out[1] = arg->u.call.args[1];
    }
    for (int j = 0; j < n; j++) {
        const nb_type *at = ck_expr(c, &out[j]);
        if (ck_is_error(at)) return 0;
        if (at->kind != NB_TY_TORCH || at->elem != pt->elem) {
            char of[200] = "";
            if (kn) snprintf(of, sizeof of, " of parameter '%s' of '%s'", pn, kn);
            ck_err(c, out[j]->loc, "%s: %s%s (a DiffTensorView of %s) is '%s'; pass a TorchTensor<%s>, or "
                   "DiffTensorView(primal, grad) of two", who, j ? "the gradient" : kn ? "the argument" : "the primal",
                   of, pt->elem->name, at->name, pt->elem->name);
            return 0;
        }
    }
    return 1;
}

/* DiffTensorView(primal, grad) written for a view without a gradient (a TensorView field or
 * parameter): a diagnostic saying so (else it reads as a call of an undeclared function). */
static void diff_view_into_plain(nb_checker *c, const nb_expr *e, const char *who, const char *what,
                                 const nb_type *to) {
    ck_err(c, e->loc, "%s: DiffTensorView(primal, grad) goes to a DiffTensorView, but %s is a TensorView<%s> (no "
           "gradient): pass the TorchTensor<%s> itself", who, what, to->elem->name, to->elem->name);
}

const nb_type *ck_host_diff_view(nb_checker *c, nb_expr **slot, const nb_type *to) {
    nb_expr *e = *slot;
    if (!to || to->kind != NB_TY_TENSOR || to->buffer || !c->fn || !c->fn->u.func.is_host || !is_diff_view_ctor(e))
        return NULL;
    if (!to->diff_tensor) {
        diff_view_into_plain(c, e, "DiffTensorView in host code", "the target", to);
        return e->type = c->tt->t_error;
    }
    nb_expr **a = new_args(c, 2);
    if (!a) return e->type = c->tt->t_error;
    if (!dispatch_diff_view(c, NULL, NULL, to, e, a)) return e->type = c->tt->t_error;
    int n = a[1]->kind == NB_EX_INT ? 1 : 2; /* (the int 0: no gradient) */
    return as_intrinsic(c, e, NB_INTR_TORCH_VIEW, a, n, to);
}

/* __dispatch_kernel(kernel, gridDim, blockDim)(args…). */
const nb_type *ck_dispatch_kernel(nb_checker *c, nb_expr **slot) {
    nb_expr *call = *slot;
    nb_expr *inner = call->u.call.callee;
    const nb_type *err = c->tt->t_error;
    if (!c->fn || !c->fn->u.func.is_host) {
        ck_err(c, inner->loc, "__dispatch_kernel is host code: only [TorchEntryPoint] functions launch kernels");
        ck_check_args(c, call);
        return call->type = err;
    }
    if (inner->u.call.nargs != 3 || inner->u.call.args[0]->kind != NB_EX_NAME) {
        ck_err(c, inner->loc, "__dispatch_kernel takes a kernel function, the grid size (blocks) and the block size "
               "(threads): __dispatch_kernel(k, uint3(…), uint3(…))(arguments…)");
        ck_check_args(c, call);
        return call->type = err;
    }
    nb_expr *kx = inner->u.call.args[0];
    const char *kn = kx->u.name.name;
    nb_decl *ks[4];
    int nk = ck_lookup_global(c, kn, NB_DECL_FUNC, ks, 4);
    if (nk <= 0) {
        ck_err(c, kx->loc, "__dispatch_kernel: no function named '%s'", kn);
        ck_check_args(c, call);
        return call->type = err;
    }
    nb_decl *k = ks[0];
    ck_check_func_sig(c, k);
    if (nk > 1) {
        ck_err(c, kx->loc, "__dispatch_kernel: '%s' is overloaded; launch a kernel with one definition", kn);
        ck_check_args(c, call);
        return call->type = err;
    }
    if (!k->u.func.is_kernel || k->u.func.numthreads[0] > 0) {
        ck_err(c, kx->loc, "__dispatch_kernel: '%s' is not a [CudaKernel] function", kn);
        ck_check_args(c, call);
        return call->type = err;
    }
    int np = k->u.func.nparams, n = call->u.call.nargs;
    if (n != np) {
        ck_err(c, call->loc, "__dispatch_kernel: '%s' takes %d argument%s, %d given", kn, np, np == 1 ? "" : "s", n);
        ck_check_args(c, call);
        return call->type = err;
    }
    /* operands: grid, block, then per kernel parameter one (a DiffTensorView: two, primal and
     * gradient or the int 0 for none) -- emit_host.c walks the kernel's parameters the same way */
    int nd = 0;
    for (int i = 0; i < np; i++) {
        const nb_type *pt = k->u.func.params[i] ? k->u.func.params[i]->u.param.type : NULL;
        nd += pt && pt->kind == NB_TY_TENSOR && pt->diff_tensor;
    }
    nb_expr **a = new_args(c, 2 + n + nd);
    if (!a) return call->type = err;
    const nb_type *u3 = nb_type_vector(c->tt, NB_SC_UINT, 3);
    a[0] = inner->u.call.args[1];
    a[1] = inner->u.call.args[2];
    ck_expr_to(c, &a[0], u3, "the grid size of __dispatch_kernel");
    ck_expr_to(c, &a[1], u3, "the block size of __dispatch_kernel");
    int na = 2;
    for (int i = 0; i < n; i++) {
        nb_decl *p = k->u.func.params[i];
        const nb_type *pt = p ? p->u.param.type : NULL;
        const char *pn = p && p->name ? p->name : "?";
        nb_expr *arg = call->u.call.args[i];
        if (pt && pt->kind == NB_TY_TENSOR && pt->diff_tensor) {
            dispatch_diff_view(c, kn, pn, pt, arg, &a[na]); /* (a diagnostic on failure) */
            na += 2;
            continue;
        }
        a[na] = arg;
        if (!pt || ck_is_error(pt)) { ck_expr(c, &a[na++]); continue; }
        if (pt->kind == NB_TY_TENSOR) {
            if (is_diff_view_ctor(arg) && !pt->buffer) {
                char what[160];
                snprintf(what, sizeof what, "parameter '%s' of '%s'", pn, kn);
                diff_view_into_plain(c, arg, "__dispatch_kernel", what, pt);
                a[na++] = arg;
                continue;
            }
            const nb_type *at = ck_expr(c, &a[na++]);
            if (ck_is_error(at)) continue;
            if (pt->buffer || (pt->elem->kind != NB_TY_SCALAR && pt->elem->kind != NB_TY_VECTOR)) {
                ck_err(c, arg->loc, "__dispatch_kernel: parameter '%s' of '%s' is '%s'; host code passes "
                       "TorchTensor<T> to TensorView<T> and DiffTensorView parameters", pn, kn, pt->name);
                continue;
            }
            if (at->kind != NB_TY_TORCH || at->elem != pt->elem)
                ck_err(c, arg->loc, "__dispatch_kernel: argument %d of '%s' is '%s' but parameter '%s' is a "
                       "TensorView<%s> (pass a TorchTensor<%s>)", i + 1, kn, at->name, pn, pt->elem->name,
                       pt->elem->name);
            continue;
        }
        const nb_type *bad = NULL;
        if (!kernel_value_ok(pt, &bad)) {
            ck_err(c, arg->loc, "__dispatch_kernel: parameter '%s' of '%s' is '%s'%s%s%s; host code passes "
                   "TorchTensor<T> to TensorView<T> / DiffTensorView parameters and fields, and scalars, vectors, "
                   "matrices and arrays and structs of those", pn, kn, pt->name, bad != pt ? " (holding a '" : "",
                   bad != pt ? bad->name : "", bad != pt ? "')" : "");
            ck_expr(c, &a[na++]);
            continue;
        }
        char what[160];
        snprintf(what, sizeof what, "argument '%s' of kernel '%s'", pn, kn);
        ck_expr_to(c, &a[na++], pt, what);
    }
    kx->ref = NB_REF_FUNCTION;
    kx->decl = k;
    kx->type = nb_type_func(c->tt, k);
    call->decl = k;
    return as_intrinsic(c, call, NB_INTR_DISPATCH_KERNEL, a, na, c->tt->t_void);
}

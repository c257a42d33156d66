/* Semantic analysis of function declarations: attributes ([Differentiable], [BackwardDerivative(f)],
 * …), signatures, and the call-graph edges (split from check.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang/check_internal.h"

#include "lang/lexer.h"
#include "nabla/alloc.h"

/* ---- functions ---------------------------------------------------------------------------- */

const nb_attr *nb_attr_find(const nb_attr_list *list, const char *name) {
    if (!list) return NULL;
    for (int i = 0; i < list->count; i++)
        if (list->items[i].name && strcmp(list->items[i].name, name) == 0) return &list->items[i];
    return NULL;
}

const char *ck_func_sig_str(nb_checker *c, nb_decl *fn) {
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    const nb_type *r = fn->u.func.ret ? fn->u.func.ret->resolved : c->tt->t_void;
    nb_strbuf_printf(&sb, "%s ", r ? r->name : "?");
    if (fn->u.func.parent && fn->u.func.parent->name) nb_strbuf_printf(&sb, "%s.", fn->u.func.parent->name);
    nb_strbuf_printf(&sb, "%s(", fn->name ? fn->name : "?");
    for (int i = 0; i < fn->u.func.nparams; i++) {
        nb_decl *p = fn->u.func.params[i];
        if (i) nb_strbuf_append(&sb, ", ");
        if (p->mods & NB_MOD_NO_DIFF) nb_strbuf_append(&sb, "no_diff ");
        if (p->u.param.dir == NB_DIR_OUT) nb_strbuf_append(&sb, "out ");
        if (p->u.param.dir == NB_DIR_INOUT) nb_strbuf_append(&sb, "inout ");
        nb_strbuf_printf(&sb, "%s %s", p->u.param.type ? p->u.param.type->name : "?", p->name ? p->name : "");
    }
    nb_strbuf_append(&sb, ")");
    char *s = nb_arena_strdup(c->arena, nb_strbuf_cstr(&sb));
    nb_strbuf_free(&sb);
    return s ? s : "?";
}

#define CK_ATTR_MAX_OVERLOADS 16

/* Whether the generic arguments written in te (`d_f<T, N>`) are fn's own generic parameters in
 * order (fn: the template, or an instantiation of it). */
static int own_generic_args(const nb_decl *fn, const nb_attr *a) {
    const nb_decl *t = fn->u.func.generic_of ? fn->u.func.generic_of : fn;
    /* the template's own attribute: an instantiation's has the parameters substituted */
    long ai = a - fn->attrs.items;
    if (ai < 0 || ai >= t->attrs.count || t->attrs.items[ai].nargs != 1 || !t->attrs.items[ai].args[0] ||
        t->attrs.items[ai].args[0]->kind != NB_EX_TYPE || !t->attrs.items[ai].args[0]->u.type.texpr)
        return 0;
    const nb_type_expr *te = t->attrs.items[ai].args[0]->u.type.texpr;
    int n = t->u.func.ngparams - t->u.func.nimplicit_gparams;
    if (te->ntargs != n) return 0;
    for (int i = 0; i < n; i++) {
        const char *want = t->u.func.gparams[i]->name, *got = NULL;
        if (te->targs && te->targs[i] && !te->targs[i]->ntargs && !te->targs[i]->narray_dims) got = te->targs[i]->name;
        else if (te->vargs && te->vargs[i] && te->vargs[i]->kind == NB_EX_NAME) got = te->vargs[i]->u.name.name;
        if (!want || !got || strcmp(want, got)) return 0;
    }
    return 1;
}

/* The overloads of the function an attribute names ([ForwardDerivative(g)] …): globals, or the
 * methods of fn's struct; 0 after a diagnostic. */
static int attr_functions_in_ns(nb_checker *c, nb_decl *fn, const nb_attr *a, const char *name, nb_decl **fns,
                                int max, int n);

static int attr_functions(nb_checker *c, nb_decl *fn, const nb_attr *a, nb_decl **fns, int max) {
    if (a->nargs == 1 && a->args && a->args[0] && a->args[0]->kind == NB_EX_TYPE && a->args[0]->u.type.texpr &&
        !a->args[0]->u.type.texpr->narray_dims && !own_generic_args(fn, a)) {
        ck_err(c, a->args[0]->loc, "[%s(%s<…>)]: the generic arguments must be the function's own generic "
               "parameters, in order", a->name, a->args[0]->u.type.texpr->name);
        return 0;
    }
    if (a->nargs != 1 || !a->args || !a->args[0] ||
        (a->args[0]->kind != NB_EX_NAME && !(a->args[0]->kind == NB_EX_TYPE && a->args[0]->u.type.texpr))) {
        ck_err(c, a->loc, "[%s] needs one function name", a->name);
        return 0;
    }
    /* `[ForwardDerivative(d_f<T>)]` on `f<T>`: g<T> is what a bare `g` means already (below) */
    const char *name = a->args[0]->kind == NB_EX_NAME ? a->args[0]->u.name.name : a->args[0]->u.type.texpr->name;
    int n = 0;
    if (fn->u.func.parent) { /* a method's derivative is first looked for among the methods */
        nb_decl *sd = fn->u.func.parent;
        for (int i = 0; i < sd->u.strct.nmethods && n < max; i++)
            if (sd->u.strct.methods[i]->name && strcmp(sd->u.strct.methods[i]->name, name) == 0)
                fns[n++] = sd->u.strct.methods[i];
    }
    /* looked up (and generic ones instantiated) from fn's namespace: an instantiation of fn is
     * checked from where it is used */
    const char *ns = c->ns;
    c->ns = fn->ns ? fn->ns : fn->u.func.generic_of ? fn->u.func.generic_of->ns : NULL;
    n = attr_functions_in_ns(c, fn, a, name, fns, max, n);
    c->ns = ns;
    return n;
}

static int attr_functions_in_ns(nb_checker *c, nb_decl *fn, const nb_attr *a, const char *name, nb_decl **fns,
                                int max, int n) {
    if (n == 0) {
        n = ck_lookup_global(c, name, NB_DECL_FUNC, fns, max);
        if (n > max) n = max;
    }
    if (n == 0) {
        ck_err(c, a->args[0]->loc, "unknown function '%s' in [%s]", name, a->name);
        return 0;
    }
    /* on an instantiation of a generic function, a generic function named by the attribute is
     * instantiated with the same generic arguments (f<A>'s derivative is g<A>) */
    for (int i = 0; i < n; i++)
        if (ck_is_template(fns[i]) && fn->u.func.generic_of) {
            nb_decl *in = ck_instantiate_like(c, fns[i], fn, a->args[0]->loc);
            if (in) fns[i] = in;
        }
    if (ck_is_template(fn)) {
        ck_err(c, a->args[0]->loc, "[%s] with generic functions is not supported", a->name);
        return 0;
    }
    a->args[0]->ref = NB_REF_FUNCTION;
    a->args[0]->decl = fns[0];
    a->args[0]->type = nb_type_func(c->tt, fns[0]);
    return n;
}

static void check_func_attrs(nb_checker *c, nb_decl *fn) {
    for (int i = 0; i < fn->attrs.count; i++) {
        const nb_attr *a = &fn->attrs.items[i];
        const char *n = a->name ? a->name : "";
        if (!strcmp(n, "Differentiable") || !strcmp(n, "BackwardDifferentiable") ||
            !strcmp(n, "ForwardDifferentiable")) {
            fn->u.func.differentiable = 1;
        } else if (!strcmp(n, "Kernel") || !strcmp(n, "CUDAKernel") || !strcmp(n, "CudaKernel")) {
            fn->u.func.is_kernel = 1;
        } else if (!strcmp(n, "numthreads")) {
            ck_kernel_numthreads(c, fn, a);
        } else if (!strcmp(n, "mutating")) {
            if (!fn->u.func.parent) ck_err(c, a->loc, "[mutating] only applies to struct methods");
            fn->u.func.is_mutating = 1;
        } else if (!strcmp(n, "ForwardDerivative") || !strcmp(n, "BackwardDerivative") ||
                   !strcmp(n, "PrimalSubstitute") || !strcmp(n, "ForwardDerivativeOf") ||
                   !strcmp(n, "BackwardDerivativeOf") || !strcmp(n, "PrimalSubstituteOf")) {
            /* the named function's overloads; the one (on either side) whose signature fits */
            nb_decl *named[CK_ATTR_MAX_OVERLOADS];
            int nn = attr_functions(c, fn, a, named, CK_ATTR_MAX_OVERLOADS);
            int of = n[strlen(n) - 2] == 'O' && n[strlen(n) - 1] == 'f'; /* …Of(f): fn is the derivative */
            int mode = n[0] == 'F' ? 1 : n[0] == 'B' ? 2 : 0;
            nb_decl *f = NULL, *g = NULL;
            if (nn > 0 && (of ? ck_match_derivative(c, named, nn, &fn, 1, mode, a->args[0]->loc, n, &f, &g)
                              : ck_match_derivative(c, &fn, 1, named, nn, mode, a->args[0]->loc, n, &f, &g))) {
                nb_decl *other = of ? f : g;
                a->args[0]->decl = other;
                a->args[0]->type = nb_type_func(c->tt, other);
                if (mode == 1) f->u.func.fwd_derivative = g;
                else if (mode == 2) f->u.func.bwd_derivative = g;
                else f->u.func.primal_subst = g;
                f->u.func.differentiable = 1;
            }
        } else if (!strcmp(n, "shader")) {
            ck_kernel_shader_stage(c, fn, a);
        } else if (!strcmp(n, "PreferRecompute")) {
            fn->u.func.prefer_recompute = 1;
        } else if (!strcmp(n, "NoDiffThis")) {
            if (!fn->u.func.parent || (fn->mods & NB_MOD_STATIC))
                ck_err(c, a->loc, "[NoDiffThis] only applies to non-static struct methods");
        } else if (!strcmp(n, "TreatAsDifferentiable")) {
            fn->u.func.treat_as_diff = 1;
            fn->u.func.differentiable = 1;
        } else if (!strcmp(n, "PreferCheckpoint") || !strcmp(n, "AutoPyBindCUDA") ||
                   !strcmp(n, "CudaDeviceExport") || !strcmp(n, "ForceInline") || !strcmp(n, "noinline") ||
                   !strcmp(n, "TorchEntryPoint") || !strcmp(n, "__target_intrinsic") ||
                   !strcmp(n, "__unsafeForceInlineEarly") || !strcmp(n, "nonmutating")) {
            /* accepted: inlining hints; [nonmutating] is a method's default (`this` is read-only) */
        } else if (!strcmp(n, "MaxIters") || !strcmp(n, "ForceUnroll") || !strcmp(n, "unroll") ||
                   !strcmp(n, "loop")) {
            ck_err(c, a->loc, "[%s] applies to loops, not functions", n);
        } else {
            ck_warn(c, a->loc, "unknown attribute '%s' ignored", n);
        }
    }
}

void ck_check_func_sig(nb_checker *c, nb_decl *fn) {
    if (ck_state(c, fn) != CK_TODO || ck_is_template(fn)) return;
    ck_set_state(c, fn, CK_BUSY);
    ck_ctx_save s = ck_enter_global_ctx(c, fn->module);
    c->strct = fn->u.func.parent;
    c->ns = ck_decl_ns(fn);
    const nb_type *r = fn->u.func.ret ? ck_resolve_type(c, fn->u.func.ret) : c->tt->t_void;
    if (r->kind == NB_TY_TENSOR) {
        ck_err(c, fn->u.func.ret->loc, "functions cannot return '%s'", r->name);
        fn->u.func.ret->resolved = c->tt->t_error;
    }
    int seen_default = 0;
    for (int i = 0; i < fn->u.func.nparams; i++) {
        nb_decl *p = fn->u.func.params[i];
        if (!p) continue;
        p->module = fn->module;
        p->u.param.index = i;
        const nb_type *t = ck_resolve_type(c, p->u.param.texpr);
        if (t->kind == NB_TY_VOID) {
            ck_err(c, p->loc, "parameter '%s' has type void", p->name ? p->name : "?");
            t = c->tt->t_error;
        }
        p->u.param.type = t;
        if (t->kind == NB_TY_ARRAY) (void)ck_ptr_pair_type(c, t); /* (an array of pointers: its pair, for derivatives) */
        if (p->u.param.default_value) {
            seen_default = 1;
            if (p->u.param.dir != NB_DIR_IN)
                ck_err(c, p->loc, "%s parameter '%s' cannot have a default value",
                       p->u.param.dir == NB_DIR_OUT ? "out" : "inout", p->name ? p->name : "?");
            char what[128];
            snprintf(what, sizeof what, "default value of '%s'", p->name ? p->name : "?");
            ck_expr_to(c, &p->u.param.default_value, t, what);
        } else if (seen_default) {
            ck_err(c, p->loc, "parameter '%s' needs a default value because an earlier parameter has one",
                   p->name ? p->name : "?");
        }
        for (int j = 0; j < i; j++) {
            nb_decl *q = fn->u.func.params[j];
            if (q && q->name && p->name && *p->name && strcmp(q->name, p->name) == 0)
                ck_err(c, p->loc, "redefinition of parameter '%s'", p->name);
        }
    }
    check_func_attrs(c, fn);
    ck_host_signature(c, fn, r); /* [TorchEntryPoint] / TorchTensor: host code (check_host.c) */
    ck_kernel_semantics(c, fn); /* `uint3 id : SV_DispatchThreadID` (check_kernel.c) */
    if (fn->u.func.is_kernel) {
        if (r->kind != NB_TY_VOID && !ck_is_error(r))
            ck_err(c, fn->loc, "[Kernel] function '%s' must return void", fn->name ? fn->name : "?");
        for (int i = 0; i < fn->u.func.nparams; i++) {
            nb_decl *p = fn->u.func.params[i];
            if (p && p->u.param.dir != NB_DIR_IN)
                ck_err(c, p->loc, "[Kernel] function parameters must be 'in' (write results through tensors)");
        }
    }
    ck_leave_global_ctx(c, s);
    ck_set_state(c, fn, CK_DONE);
}

void ck_add_edge(nb_checker *c, nb_decl *to, nb_loc loc) {
    if (!c->fn || !to) return;
    if (!ck_grow((void **)&c->edges, &c->cap_edges, c->nedges + 1, sizeof(ck_edge))) return;
    c->edges[c->nedges].from = c->fn;
    c->edges[c->nedges].to = to;
    c->edges[c->nedges].loc = loc;
    c->nedges++;
}

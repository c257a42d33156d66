/* Derivative calls over arrays (module.h "derivatives"; docs/AUTODIFF.md).
 *
 * A call in NB_MODE_FWD / NB_MODE_BWD is an ordinary call of the function's generated wrapper
 * "f__fwds" / "f__bwds" (lang/ad.h): its parameters are f's, then one tangent / gradient per
 * differentiable parameter, then the result tangent / result gradient. nb_call_set_mode swaps the
 * call's function for the wrapper; the setters below bind the extra parameters by name, so the
 * binding, broadcasting and kernel-cache machinery is the one of every call.
 */
#include <stdio.h>
#include <string.h>

#include "call/call_internal.h"
#include "core/util.h"

static int wrapper_kind(const nb_call *c)
{
    size_t n = strlen(c->f->name);
    if (n > 6 && !strcmp(c->f->name + n - 6, "__fwds")) return 1;
    if (n > 6 && !strcmp(c->f->name + n - 6, "__bwds")) return 2;
    if (n > 6 && !strcmp(c->f->name + n - 6, "__bwdr")) return 2; /* (the fused form of a bwds call) */
    return 0;
}

/* Makes the call one of the module's function `name` (a wrapper of c's function). */
static nb_status switch_func(nb_call *c, const char *name)
{
    nb_func *w = NULL;
    NB_TRY(nb_module_func(c->f->m, name, &w));
    pthread_mutex_lock(&w->m->lock);
    nb_status s = nb_func_refresh(w);
    pthread_mutex_unlock(&w->m->lock);
    if (s) return s;
    c->f = w;
    return NB_OK;
}

nb_status nb_call_set_mode(nb_call *c, nb_diff_mode mode)
{
    if (!c) return nb_error(NB_ERR_INVALID_ARG, "nb_call_set_mode: call is NULL");
    if ((int)mode < 0 || mode > NB_MODE_BWD) return nb_error(NB_ERR_INVALID_ARG, "nb_call_set_mode: bad mode %d", (int)mode);
    int k = wrapper_kind(c);
    if ((int)mode == k) return NB_OK;
    if (k) return nb_error(NB_ERR_INVALID_ARG, "nb_call_set_mode: the call's mode is already set");
    if (mode == NB_MODE_PRIMAL) return NB_OK;
    if (c->nargs || c->nmaps || c->into || c->ninto)
        return nb_error(NB_ERR_INVALID_ARG, "nb_call_set_mode: set the mode before binding arguments");
    char name[512];
    snprintf(name, sizeof name, "%s__%s", c->f->name, mode == NB_MODE_BWD ? "bwds" : "fwds");
    return switch_func(c, name);
}

/* The base function of the call (f for "f__bwds" etc.). */
static nb_status base_func(nb_call *c, nb_func **out)
{
    int k = wrapper_kind(c);
    if (!k) {
        *out = c->f;
        return NB_OK;
    }
    char base[512];
    snprintf(base, sizeof base, "%.*s", (int)strlen(c->f->name) - 6, c->f->name);
    return nb_module_func(c->f->m, base, out);
}

/* The wrapper's parameter (a name that lives as long as the module) for primal parameter `index`
 * (index -1: the result's tangent / gradient). */
static nb_status wrapper_param(nb_call *c, const char *api, int index, const char **out)
{
    int k = wrapper_kind(c);
    char want[600];
    nb_func *pf = NULL;
    NB_TRY(base_func(c, &pf));
    if (index < 0) snprintf(want, sizeof want, "%s", k == 2 ? "_dout" : "_result_d");
    else {
        if (index >= nb_func_param_count(pf, 0))
            return nb_error(NB_ERR_INVALID_ARG, "%s: %s has no parameter %d", api, nb_func_signature(pf, 0), index);
        snprintf(want, sizeof want, k == 2 ? "%s_grad" : "d_%s", nb_func_param_name(pf, 0, index));
    }
    const nb_fn_info *in = &c->f->infos[0];
    for (int i = 0; i < in->nparams; i++)
        if (!strcmp(in->param_names[i], want)) {
            *out = in->param_names[i];
            return NB_OK;
        }
    return nb_error(NB_ERR_INVALID_ARG, "%s: parameter %d of '%s' is not differentiable (%s)", api, index,
                    nb_func_name(pf), in->signature);
}

static nb_status bind_extra(nb_call *c, const char *api, int kind, int index, nb_tensor *t)
{
    if (!c) return nb_error(NB_ERR_INVALID_ARG, "%s: call is NULL", api);
    if (wrapper_kind(c) != kind)
        return nb_error(NB_ERR_INVALID_ARG, "%s: call nb_call_set_mode(c, %s) first", api, kind == 2 ? "NB_MODE_BWD" : "NB_MODE_FWD");
    const char *name = NULL;
    NB_TRY(wrapper_param(c, api, index, &name));
    return nb_call_arg_named(c, name, t);
}

/* DiffTensor parameter `index` of the base function: its gradient (tangent) array is bound by
 * name, in any mode (a plain call of a function that runs bwd_diff inside uses it too).
 * Returns 1 when handled (status in *st), 0 when the parameter is not a DiffTensor. */
static int bind_tgrad(nb_call *c, const char *api, int index, nb_tensor *g, nb_status *st)
{
    nb_func *pf = NULL;
    if (base_func(c, &pf) != NB_OK) {
        nb_clear_error();
        return 0;
    }
    int nl = nb_func_leaf_count(pf, 0);
    for (int l = 0; l < nl; l++) {
        nb_leaf_info li;
        if (nb_func_leaf(pf, 0, l, &li) != NB_OK || li.param != index || !li.is_diff_tensor) continue;
        if (!g) *st = nb_error(NB_ERR_INVALID_ARG, "%s: the gradient array for '%s' is NULL", api, li.path);
        else if (nb_tensor_dtype(g) != li.dtype)
            *st = nb_error(NB_ERR_DTYPE, "%s: DiffTensor '%s' holds %s, its gradient array is %s", api, li.path,
                           nb_dtype_name(li.dtype), nb_dtype_name(nb_tensor_dtype(g)));
        else if (nb_tensor_device(g) != nb_module_device(pf->m))
            *st = nb_error(NB_ERR_INVALID_ARG, "%s: the gradient array for '%s' is on another device than the module", api,
                           li.path);
        else if (c->ntgrads >= (int)(sizeof c->tgrads / sizeof c->tgrads[0]))
            *st = nb_error(NB_ERR_UNSUPPORTED, "%s: at most %d DiffTensor gradients per call", api,
                           (int)(sizeof c->tgrads / sizeof c->tgrads[0]));
        else {
            c->tgrads[c->ntgrads].param = nb_func_param_name(pf, 0, index);
            c->tgrads[c->ntgrads++].t = g;
            *st = NB_OK;
        }
        return 1;
    }
    return 0;
}

nb_status nb_call_tgrad_for(nb_call *c, int j, const nb_leaf_bind *b, uint64_t *ptr, int64_t *strides)
{
    const nb_fn_info *in = &c->f->infos[c->overload];
    const char *name = in->leaves[j].path;
    *ptr = 0;
    for (int k = c->ntgrads - 1; k >= 0; k--) {
        if (strcmp(c->tgrads[k].param, name)) continue;
        nb_tensor *g = c->tgrads[k].t;
        int nd = nb_tensor_ndim(g);
        int same = nd == b->tensor_rank;
        for (int d = 0; same && d < nd; d++) same = nb_tensor_shape(g)[d] == b->tshape[d];
        if (!same) {
            char s1[128], s2[128];
            return nb_error(NB_ERR_SHAPE, "%s: the gradient array of DiffTensor '%s' is %s but the tensor is %s",
                            in->name, name, nb_shape_str(nd, nb_tensor_shape(g), s1, sizeof s1),
                            nb_shape_str(b->tensor_rank, b->tshape, s2, sizeof s2));
        }
        *ptr = (uint64_t)(uintptr_t)nb_tensor_data(g);
        memcpy(strides, nb_tensor_strides(g), sizeof(int64_t) * (size_t)nd);
        return NB_OK;
    }
    /* the derivative kernel of a [Kernel] (slangtorch's f.bwd / f.fwd) reads and writes every
     * DiffTensor's gradient: one left out would silently drop (bwd) or zero (fwd) derivatives */
    int k = wrapper_kind(c);
    if (k && in->is_kernel && b->tensor_rank >= 0) {
        char base[512];
        snprintf(base, sizeof base, "%.*s", (int)strlen(c->f->name) - 6, c->f->name);
        return nb_error(NB_ERR_INVALID_ARG, "%s.%s: DiffTensor parameter '%s' has no gradient tensor: give one (C: "
                        "nb_call_grad / nb_call_grad_named; Python: a (tensor, grad) pair)", base, k == 2 ? "bwd" : "fwd", name);
    }
    return NB_OK;
}

nb_status nb_call_grad_named(nb_call *c, const char *path, nb_tensor *grad)
{
    if (!c) return nb_error(NB_ERR_INVALID_ARG, "nb_call_grad_named: call is NULL");
    if (!path) return nb_error(NB_ERR_INVALID_ARG, "nb_call_grad_named: path is NULL");
    nb_func *pf = NULL;
    NB_TRY(base_func(c, &pf));
    int nl = nb_func_leaf_count(pf, 0);
    for (int l = 0; l < nl; l++) {
        nb_leaf_info li;
        if (nb_func_leaf(pf, 0, l, &li) != NB_OK || strcmp(li.path, path)) continue;
        if (!li.is_diff_tensor) {
            if (li.path == nb_func_param_name(pf, 0, li.param) || !strchr(path, '.'))
                return nb_call_grad(c, li.param, grad); /* a top-level parameter: its gradient */
            return nb_error(NB_ERR_INVALID_ARG, "nb_call_grad_named: '%s' of %s is not a DiffTensor", path,
                            nb_func_signature(pf, 0));
        }
        if (!grad) return nb_error(NB_ERR_INVALID_ARG, "nb_call_grad_named: the gradient array for '%s' is NULL", path);
        if (nb_tensor_dtype(grad) != li.dtype)
            return nb_error(NB_ERR_DTYPE, "nb_call_grad_named: DiffTensor '%s' holds %s, its gradient array is %s", path,
                            nb_dtype_name(li.dtype), nb_dtype_name(nb_tensor_dtype(grad)));
        if (nb_tensor_device(grad) != nb_module_device(pf->m))
            return nb_error(NB_ERR_INVALID_ARG, "nb_call_grad_named: the gradient array for '%s' is on another device than "
                            "the module", path);
        if (c->ntgrads >= (int)(sizeof c->tgrads / sizeof c->tgrads[0]))
            return nb_error(NB_ERR_UNSUPPORTED, "nb_call_grad_named: at most %d DiffTensor gradients per call",
                            (int)(sizeof c->tgrads / sizeof c->tgrads[0]));
        c->tgrads[c->ntgrads].param = li.path; /* (lives as long as the module's reflection) */
        c->tgrads[c->ntgrads++].t = grad;
        return NB_OK;
    }
    return nb_error(NB_ERR_NOT_FOUND, "nb_call_grad_named: %s has no parameter or field '%s'", nb_func_signature(pf, 0), path);
}

nb_status nb_call_grad(nb_call *c, int index, nb_tensor *grad)
{
    if (!c) return nb_error(NB_ERR_INVALID_ARG, "nb_call_grad: call is NULL");
    if (index < 0) return nb_error(NB_ERR_INVALID_ARG, "nb_call_grad: index %d (use nb_call_dout for the result)", index);
    nb_status st = NB_OK;
    if (bind_tgrad(c, "nb_call_grad", index, grad, &st)) return st;
    return bind_extra(c, "nb_call_grad", 2, index, grad);
}

nb_status nb_call_dout(nb_call *c, nb_tensor *dout) { return bind_extra(c, "nb_call_dout", 2, -1, dout); }

nb_status nb_call_tangent(nb_call *c, int index, nb_tensor *tangent)
{
    nb_status st = NB_OK;
    if (c && index >= 0 && bind_tgrad(c, "nb_call_tangent", index, tangent, &st)) return st;
    return bind_extra(c, "nb_call_tangent", 1, index < 0 ? -1 : index, tangent);
}

nb_status nb_call_tangent_alloc(nb_call *c, nb_tensor **slot)
{
    if (!c) return nb_error(NB_ERR_INVALID_ARG, "nb_call_tangent_alloc: call is NULL");
    if (wrapper_kind(c) != 1) return nb_error(NB_ERR_INVALID_ARG, "nb_call_tangent_alloc: call nb_call_set_mode(c, NB_MODE_FWD) first");
    const char *name = NULL;
    NB_TRY(wrapper_param(c, "nb_call_tangent_alloc", -1, &name));
    return nb_call_arg_alloc_named(c, name, slot);
}

/* A bwds call whose result is wanted (nb_call_run with a result slot, nb_call_result) runs the
 * fused forward + backward wrapper "f__bwdr": the same parameters, and f's result. */
nb_status nb_call_ad_fuse(nb_call *c, int want_result)
{
    size_t n = strlen(c->f->name);
    if (n <= 6 || strcmp(c->f->name + n - 6, "__bwds") || !(want_result || c->into || c->ninto)) return NB_OK;
    char name[512];
    snprintf(name, sizeof name, "%.*s__bwdr", (int)(n - 6), c->f->name);
    return switch_func(c, name);
}

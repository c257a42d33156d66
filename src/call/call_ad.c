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
    nb_func *w = NULL;
    NB_TRY(nb_module_func(c->f->m, name, &w));
    pthread_mutex_lock(&w->m->lock);
    nb_status s = nb_func_refresh(w);
    pthread_mutex_unlock(&w->m->lock);
    if (s) return s;
    c->f = w;
    return NB_OK;
}

/* The wrapper's parameter (a name that lives as long as the module) for primal parameter `index`
 * (index -1: the result's tangent / gradient). */
static nb_status wrapper_param(nb_call *c, const char *api, int index, const char **out)
{
    int k = wrapper_kind(c);
    size_t n = strlen(c->f->name) - 6;
    char base[512], want[600];
    snprintf(base, sizeof base, "%.*s", (int)n, c->f->name);
    if (index < 0) snprintf(want, sizeof want, "%s", k == 2 ? "_dout" : "_result_d");
    else {
        nb_func *pf = NULL;
        NB_TRY(nb_module_func(c->f->m, base, &pf));
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
    return nb_error(NB_ERR_INVALID_ARG, "%s: parameter %d of '%s' is not differentiable (%s)", api, index, base,
                    in->signature);
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

nb_status nb_call_grad(nb_call *c, int index, nb_tensor *grad)
{
    if (index < 0) return nb_error(NB_ERR_INVALID_ARG, "nb_call_grad: index %d (use nb_call_dout for the result)", index);
    return bind_extra(c, "nb_call_grad", 2, index, grad);
}

nb_status nb_call_dout(nb_call *c, nb_tensor *dout) { return bind_extra(c, "nb_call_dout", 2, -1, dout); }

nb_status nb_call_tangent(nb_call *c, int index, nb_tensor *tangent)
{
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
    nb_func *w = NULL;
    NB_TRY(nb_module_func(c->f->m, name, &w));
    pthread_mutex_lock(&w->m->lock);
    nb_status s = nb_func_refresh(w);
    pthread_mutex_unlock(&w->m->lock);
    if (s) return s;
    c->f = w;
    return NB_OK;
}

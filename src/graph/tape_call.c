/* Kernel-language functions over tape values through the call layer (tape_call.h): the shared
 * binding / shape check, forward and reverse mode of an nb_tcall, the per-tape cache of arrays
 * wrapping tape memory, and the CALL row of ops.def with its builders (nb_tape_call,
 * nb_tape_call_scalars in nn_tape.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph/tape_call.h"
#include "nabla/alloc.h"
#include "nabla/device.h"
#include "nabla/tensor.h"

/* ---- arrays wrapping tape memory ------------------------------------------------------------ */

/* An open-addressed table of wrapped arrays keyed by (device, address, shape). A fixed-shape loop
 * gets the same arena addresses every step, so after the first step every lookup hits and no
 * host allocation is made. When it fills past 3/4 (shapes or addresses that keep changing) it is
 * emptied and refilled: bounded memory, correct in any case (a hit is an exact key match). */
#define NB_TCALL_CACHE 512
typedef struct nb_tcall_wrap {
    const void *data;
    nb_device *dev;
    int ndim;
    int64_t shape[NB_TAPE_MAX_DIMS];
    nb_tensor *arr; /* NULL: empty slot */
} nb_tcall_wrap;
struct nb_tcall_cache {
    int n;
    nb_tcall_wrap e[NB_TCALL_CACHE];
};

static void cache_clear(struct nb_tcall_cache *c) {
    for (int i = 0; i < NB_TCALL_CACHE; i++) nb_tensor_free(c->e[i].arr);
    memset(c, 0, sizeof *c);
}

void nb_tcall_cache_free(nb_tape *t) {
    if (!t->tcall_cache) return;
    cache_clear(t->tcall_cache);
    nb_free(t->tcall_cache, sizeof *t->tcall_cache);
    t->tcall_cache = NULL;
}

static int wrap_eq(const nb_tcall_wrap *w, nb_device *dev, const void *data, int ndim, const int64_t *shape) {
    return w->data == data && w->dev == dev && w->ndim == ndim &&
           (ndim == 0 || !memcmp(w->shape, shape, sizeof(int64_t) * (size_t)ndim));
}

/* The f32 array [shape] at data (tape memory) on dev: borrowed from the tape's cache. */
static nb_status wrap(nb_tape *t, nb_device *dev, void *data, int ndim, const int64_t *shape, nb_tensor **out) {
    if (!t->tcall_cache) {
        t->host_allocs++;
        t->tcall_cache = nb_calloc(sizeof *t->tcall_cache, 16);
        if (!t->tcall_cache) return nb_error(NB_ERR_OUT_OF_MEMORY, "tape: out of host memory (call cache)");
    }
    struct nb_tcall_cache *c = t->tcall_cache;
    uint64_t h = (uint64_t)(uintptr_t)data * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)dev;
    for (int i = 0; i < ndim; i++) h = (h ^ (uint64_t)shape[i]) * 0x100000001B3ull;
    int i = (int)((h >> 32) % NB_TCALL_CACHE);
    for (; c->e[i].arr; i = (i + 1) % NB_TCALL_CACHE)
        if (wrap_eq(&c->e[i], dev, data, ndim, shape)) {
            *out = c->e[i].arr;
            return NB_OK;
        }
    if (c->n >= NB_TCALL_CACHE * 3 / 4) { /* full of other keys: start afresh */
        cache_clear(c);
        return wrap(t, dev, data, ndim, shape, out);
    }
    nb_tcall_wrap *w = &c->e[i];
    nb_status s = nb_tensor_wrap(dev, NB_F32, ndim, shape, NULL, data, &w->arr);
    if (s) return s;
    w->data = data;
    w->dev = dev;
    w->ndim = ndim;
    if (ndim) memcpy(w->shape, shape, sizeof(int64_t) * (size_t)ndim);
    c->n++;
    *out = w->arr;
    return NB_OK;
}

/* ---- binding checks and the shape rule ------------------------------------------------------- */

static const char *dir_name(nb_arg_dir d) { return d == NB_ARG_OUT ? "out" : "inout"; }

static const char *shape_str(int nd, const int64_t *s, char *b, size_t cap) {
    size_t n = (size_t)snprintf(b, cap, "[");
    for (int i = 0; i < nd && n < cap; i++) n += (size_t)snprintf(b + n, cap - n, "%s%lld", i ? "," : "", (long long)s[i]);
    if (n < cap) snprintf(b + n, cap - n, "]");
    return b;
}

/* The shape input k is bound with (its view, or its own). */
static void input_shape(const nb_tcall *tc, const nb_tval *v, int k, int *nd, const int64_t **shape) {
    if (tc->view_ndim[k] > 0) {
        *nd = tc->view_ndim[k];
        *shape = tc->view_shape[k];
    } else {
        *nd = v->ndim;
        *shape = v->shape;
    }
}

static int tape_and_module_agree(const nb_tape *t, nb_device *md) {
    if (nb_tape_on_cuda(t)) return md == t->dev;
    return nb_device_get_kind(md) == NB_DEVICE_CPU;
}

nb_status nb_tcall_shape(nb_tape *t, const nb_tcall *tc, int nin, const nb_tvar *in, const char *who,
                         int *ndim, int64_t *shape, int *out_0d) {
    nb_func *f = tc->f;
    if (!f) return nb_error(NB_ERR_INVALID_ARG, "%s: the function is NULL", who);
    const char *fn = nb_func_name(f);
    if (nb_func_overload_count(f) != 1)
        return nb_error(NB_ERR_UNSUPPORTED, "%s: '%s' has %d overloads; a tape op calls a function with one", who, fn,
                        nb_func_overload_count(f));
    const char *sig = nb_func_signature(f, 0);
    if (nb_func_is_kernel(f, 0) || nb_func_is_host(f, 0))
        return nb_error(NB_ERR_UNSUPPORTED, "%s: %s is a %s function; a tape op calls a function over arrays", who, sig,
                        nb_func_is_kernel(f, 0) ? "[Kernel]" : "host ([TorchEntryPoint])");
    nb_device *md = nb_module_device(nb_func_module(f));
    if (!md) return nb_error(NB_ERR_NO_DEVICE, "%s: the module of '%s' was loaded without a device", who, fn);
    if (!tape_and_module_agree(t, md))
        return nb_error(NB_ERR_DEVICE, "%s: '%s' runs on %s (its module's device), the tape on %s: load the module on "
                        "the tape's device (nb_tape_device)", who, fn, nb_device_name(md),
                        nb_tape_on_cuda(t) ? nb_device_name(t->dev) : "cpu");
    int np = nb_func_param_count(f, 0);
    if (tc->nparams > np || tc->nparams > NB_TCALL_MAX_PARAMS)
        return nb_error(NB_ERR_INVALID_ARG, "%s: %s takes %d parameter%s, %d arguments given", who, sig, np,
                        np == 1 ? "" : "s", tc->nparams);
    for (int p = tc->nparams; p < np; p++)
        if (!nb_func_param_has_default(f, 0, p))
            return nb_error(NB_ERR_INVALID_ARG, "%s: %s takes %d parameter%s, %d arguments given (parameter '%s' has no "
                            "default value)", who, sig, np, np == 1 ? "" : "s", tc->nparams, nb_func_param_name(f, 0, p));
    if (nb_func_leaf_count(f, 0) != np || nb_func_struct_count(f, 0) > 0) {
        const char *path = NULL, *type = NULL;
        if (nb_func_struct_node(f, 0, 0, &path, &type)) nb_clear_error();
        return nb_error(NB_ERR_UNSUPPORTED, "%s: %s has the struct parameter '%s'%s%s; tape values bind number, vector "
                        "and matrix parameters (pass the fields as parameters of their own)", who, sig,
                        path ? path : "?", type ? " of type " : "", type ? type : "");
    }
    int kd = 0, kfrom[NB_MAX_DIMS];
    int64_t ks[NB_MAX_DIMS];
    int narrays = 0;
    char b1[96], b2[96];
    for (int p = 0; p < tc->nparams; p++) {
        nb_leaf_info li;
        nb_status s = nb_func_leaf(f, 0, p, &li);
        if (s) return s;
        const char *pn = nb_func_param_name(f, 0, p);
        if (li.dir != NB_ARG_IN)
            return nb_error(NB_ERR_UNSUPPORTED, "%s: parameter '%s' of %s is %s; a tape op's output is the function's "
                            "result", who, pn, sig, dir_name(li.dir));
        if (li.is_tensor)
            return nb_error(NB_ERR_UNSUPPORTED, "%s: parameter '%s' of %s is a Tensor; tape values bind number, vector "
                            "and matrix parameters", who, pn, sig);
        if (tc->src[p] == NB_TCALL_SCALAR) {
            if (li.value_rank != 0)
                return nb_error(NB_ERR_SHAPE, "%s: parameter '%s' of %s is not a number: give it a tape value, not a "
                                "scalar", who, pn, sig);
            if (li.dtype == NB_BOOL)
                return nb_error(NB_ERR_DTYPE, "%s: parameter '%s' of %s is a bool: a tape op binds numbers", who, pn, sig);
            double v = tc->scalar[p];
            if (!nb_dtype_is_float(li.dtype) && (v != floor(v) || !isfinite(v)))
                return nb_error(NB_ERR_DTYPE, "%s: parameter '%s' of %s is an integer, given %g", who, pn, sig, v);
            continue;
        }
        int k = tc->src[p];
        if (k < 0 || k >= nin)
            return nb_error(NB_ERR_INTERNAL, "%s: parameter %d bound to input %d of %d", who, p, k, nin);
        char what[64];
        snprintf(what, sizeof what, "%s: argument %d", who, p);
        nb_tval *v = nb_tape_val(t, in[k], what);
        if (!v) return NB_ERR_INVALID_ARG;
        narrays++;
        if (!nb_dtype_is_float(li.dtype))
            return nb_error(NB_ERR_DTYPE, "%s: parameter '%s' of %s holds %s; tape values are floats (pass integers "
                            "as scalars)", who, pn, sig, nb_dtype_name(li.dtype));
        int vnd;
        const int64_t *vs;
        input_shape(tc, v, k, &vnd, &vs);
        if (tc->view_ndim[k] > 0) {
            int64_t c = 1;
            for (int i = 0; i < vnd; i++) c *= vs[i];
            if (c != v->count)
                return nb_error(NB_ERR_SHAPE, "%s: argument %d is %s, viewed as %s", who, p,
                                nb_tape_shape_str(v, b1, sizeof b1), shape_str(vnd, vs, b2, sizeof b2));
        }
        int r = li.value_rank;
        int ok = vnd >= r;
        for (int i = 0; ok && i < r; i++) ok = vs[vnd - r + i] == li.value_shape[i];
        if (!ok)
            return nb_error(NB_ERR_SHAPE, "%s: argument %d is %s but parameter '%s' of %s needs arrays ending in %s", who,
                            p, shape_str(vnd, vs, b1, sizeof b1), pn, sig, shape_str(r, li.value_shape, b2, sizeof b2));
        int cr = vnd - r; /* call dims, broadcast right-aligned against the others' */
        if (cr > kd) {
            memmove(ks + (cr - kd), ks, sizeof(int64_t) * (size_t)kd);
            memmove(kfrom + (cr - kd), kfrom, sizeof(int) * (size_t)kd);
            for (int i = 0; i < cr - kd; i++) ks[i] = 1, kfrom[i] = p;
            kd = cr;
        }
        for (int i = 0; i < cr; i++) {
            int j = kd - cr + i;
            if (vs[i] == ks[j] || vs[i] == 1) continue;
            if (ks[j] != 1) {
                int q = kfrom[j];
                const nb_tval *o = &t->vals[in[tc->src[q]]];
                int ond;
                const int64_t *os;
                input_shape(tc, o, tc->src[q], &ond, &os);
                return nb_error(NB_ERR_SHAPE, "%s: %s: argument %d ('%s') is %s and argument %d ('%s') is %s: their call "
                                "shapes do not broadcast (dim %d: %lld vs %lld)", who, sig, q, nb_func_param_name(f, 0, q),
                                shape_str(ond, os, b1, sizeof b1), p, pn, shape_str(vnd, vs, b2, sizeof b2), j,
                                (long long)ks[j], (long long)vs[i]);
            }
            ks[j] = vs[i];
            kfrom[j] = p;
        }
    }
    if (!narrays)
        return nb_error(NB_ERR_INVALID_ARG, "%s: %s: no argument is a tape value (a tape op needs at least one)", who, sig);
    nb_leaf_info ri;
    if (!nb_func_result(f, 0, &ri))
        return nb_error(NB_ERR_UNSUPPORTED, "%s: %s returns nothing; a tape op's output is the function's result", who, sig);
    if (ri.value_rank < 0)
        return nb_error(NB_ERR_UNSUPPORTED, "%s: %s returns a struct; a tape op's output is one array (return a number, "
                        "vector or matrix)", who, sig);
    if (!nb_dtype_is_float(ri.dtype))
        return nb_error(NB_ERR_DTYPE, "%s: %s returns %s; tape values are floats", who, sig, nb_dtype_name(ri.dtype));
    int nd = kd + ri.value_rank;
    if (nd > NB_TAPE_MAX_DIMS)
        return nb_error(NB_ERR_SHAPE, "%s: %s: the result would have %d dims (call shape %s + value shape %s); tape "
                        "values have at most %d", who, sig, nd, shape_str(kd, ks, b1, sizeof b1),
                        shape_str(ri.value_rank, ri.value_shape, b2, sizeof b2), NB_TAPE_MAX_DIMS);
    for (int i = 0; i < kd; i++) shape[i] = ks[i];
    for (int i = 0; i < ri.value_rank; i++) shape[kd + i] = ri.value_shape[i];
    *out_0d = nd == 0;
    if (nd == 0) shape[nd++] = 1;
    *ndim = nd;
    return NB_OK;
}

int nb_tcall_input_differentiable(const nb_tcall *tc, int k) {
    for (int p = 0; p < tc->nparams; p++) {
        nb_leaf_info li;
        if (tc->src[p] == k && nb_func_leaf(tc->f, 0, p, &li) == NB_OK && li.differentiable) return 1;
    }
    return 0;
}

/* ---- forward and reverse mode ---------------------------------------------------------------- */

/* Prefixes the call layer's message with the op ("tape: call of 'f': ..."). */
static nb_status op_error(const nb_tcall *tc, int backward, nb_status s) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", nb_last_error());
    return nb_error(s, "tape: %s of '%s': %s", backward ? "backward of the call" : "call", nb_func_name(tc->f), msg);
}

/* Binds the primal arguments of tc (scalars and the input arrays) to c. */
static nb_status bind_args(nb_tape *t, const nb_tcall *tc, const nb_top *op, nb_device *dev, nb_call *c) {
    for (int p = 0; p < tc->nparams; p++) {
        nb_status s;
        if (tc->src[p] == NB_TCALL_SCALAR) {
            nb_leaf_info li;
            s = nb_func_leaf(tc->f, 0, p, &li);
            if (!s) s = nb_dtype_is_float(li.dtype) ? nb_call_arg_double(c, p, tc->scalar[p])
                                                    : nb_call_arg_int(c, p, (int64_t)tc->scalar[p]);
        } else {
            int k = tc->src[p], nd;
            const nb_tval *v = &t->vals[op->in[k]];
            const int64_t *shape;
            input_shape(tc, v, k, &nd, &shape);
            nb_tensor *a;
            s = wrap(t, dev, v->data, nd, shape, &a);
            if (!s) s = nb_call_arg(c, p, a);
        }
        if (s) return s;
    }
    return NB_OK;
}

/* The output (its data, or its gradient when grad) as the call sees it. */
static nb_status wrap_out(nb_tape *t, const nb_tcall *tc, const nb_top *op, nb_device *dev, int grad, nb_tensor **a) {
    const nb_tval *y = &t->vals[op->out];
    return wrap(t, dev, grad ? y->grad : y->data, tc->out_0d ? 0 : y->ndim, y->shape, a);
}

/* Runs c once its binding went well (s: the binding's status): deferred bounds checks on CUDA
 * (no host wait), then the launch; frees c; errors name the op. */
static nb_status finish(nb_tape *t, const nb_tcall *tc, int backward, nb_call *c, nb_status s) {
    if (!s && nb_tape_on_cuda(t)) s = nb_call_defer_checks(c);
    if (s) {
        nb_call_free(c);
        return op_error(tc, backward, s);
    }
    s = nb_call_run(c, NULL);
    return s ? op_error(tc, backward, s) : NB_OK;
}

nb_status nb_tcall_forward(nb_tape *t, const nb_tcall *tc, const nb_top *op) {
    nb_device *dev = nb_module_device(nb_func_module(tc->f));
    nb_call *c = NULL;
    nb_tensor *y = NULL;
    nb_status s = nb_call_begin(tc->f, &c);
    if (!s) s = bind_args(t, tc, op, dev, c);
    if (!s) s = wrap_out(t, tc, op, dev, 0, &y);
    if (!s) s = nb_call_result(c, y);
    return finish(t, tc, 0, c, s);
}

nb_status nb_tcall_backward(nb_tape *t, const nb_tcall *tc, const nb_top *op) {
    float *g[NB_TOP_MAX_IN] = {0};
    int any = 0;
    for (int k = 0; k < op->nin; k++) {
        if (op->in[k] < 0 || !t->vals[op->in[k]].needs_grad || !nb_tcall_input_differentiable(tc, k)) continue;
        nb_status s = nb_tape_grad_buf(t, op->in[k], &g[k]); /* zeroed when fresh: the call adds */
        if (s) return s;
        any |= g[k] != NULL;
    }
    if (!any) return NB_OK;
    nb_device *dev = nb_module_device(nb_func_module(tc->f));
    nb_call *c = NULL;
    nb_tensor *dy = NULL;
    nb_status s = nb_call_begin(tc->f, &c);
    if (!s) s = nb_call_set_mode(c, NB_MODE_BWD);
    if (!s) s = bind_args(t, tc, op, dev, c);
    for (int p = 0; p < tc->nparams && !s; p++) {
        int k = tc->src[p];
        if (k == NB_TCALL_SCALAR || !g[k]) continue;
        nb_leaf_info li;
        s = nb_func_leaf(tc->f, 0, p, &li);
        if (s || !li.differentiable) continue;
        const nb_tval *v = &t->vals[op->in[k]];
        int nd;
        const int64_t *shape;
        input_shape(tc, v, k, &nd, &shape);
        nb_tensor *ga;
        s = wrap(t, dev, g[k], nd, shape, &ga);
        if (!s) s = nb_call_grad(c, p, ga);
    }
    if (!s) s = wrap_out(t, tc, op, dev, 1, &dy);
    if (!s) s = nb_call_dout(c, dy);
    return finish(t, tc, 1, c, s);
}

/* ---- the CALL row ------------------------------------------------------------------------------- */

/* The binding of a recorded CALL op: ip[0] parameters, ip[1] the mask of scalar ones (their
 * values dp[] in order), the others op->in[] in order; ip[2] out_0d. */
static void call_of_op(const nb_top *op, nb_tcall *tc) {
    memset(tc, 0, sizeof *tc);
    tc->f = op->obj;
    tc->nparams = op->ip[0];
    int k = 0, j = 0;
    for (int p = 0; p < tc->nparams; p++) {
        if (op->ip[1] >> p & 1) {
            tc->src[p] = NB_TCALL_SCALAR;
            tc->scalar[p] = op->dp[j++];
        } else {
            tc->src[p] = k++;
        }
    }
    tc->out_0d = op->ip[2];
}

static nb_status call_fwd(nb_tape *t, nb_top *op) {
    nb_tcall tc;
    call_of_op(op, &tc);
    return nb_tcall_forward(t, &tc, op);
}

static nb_status call_bwd(nb_tape *t, const nb_top *op) {
    nb_tcall tc;
    call_of_op(op, &tc);
    return nb_tcall_backward(t, &tc, op);
}

/* One function for both devices: the call layer runs on the module's device (the tape's). */
nb_status nb_op_call_cpu_fwd(nb_tape *t, nb_top *op) { return call_fwd(t, op); }
nb_status nb_op_call_cpu_bwd(nb_tape *t, const nb_top *op) { return call_bwd(t, op); }
nb_status nb_op_call_cuda_fwd(nb_tape *t, nb_top *op) { return call_fwd(t, op); }
nb_status nb_op_call_cuda_bwd(nb_tape *t, const nb_top *op) { return call_bwd(t, op); }

nb_status nb_tape_call_scalars(nb_tape *t, nb_func *f, int nargs, const nb_tvar *args, const double *scalars,
                               nb_tvar *out) {
    const char *who = "nb_tape_call";
    if (!t || !f || !out) return nb_error(NB_ERR_INVALID_ARG, "%s: tape, function or out is NULL", who);
    if (nargs < 0 || (nargs > 0 && !args)) return nb_error(NB_ERR_INVALID_ARG, "%s: %d arguments at NULL", who, nargs);
    if (nargs > NB_TCALL_MAX_PARAMS)
        return nb_error(NB_ERR_UNSUPPORTED, "%s: %d arguments; at most %d", who, nargs, NB_TCALL_MAX_PARAMS);
    nb_top op = {.kind = NB_TOP_CALL, .obj = f};
    nb_tcall tc = {.f = f, .nparams = nargs};
    int ns = 0;
    for (int p = 0; p < nargs; p++) {
        if (args[p] == NB_TVAR_NONE) {
            if (!scalars)
                return nb_error(NB_ERR_INVALID_ARG, "%s: argument %d is NB_TVAR_NONE (a scalar) but scalars is NULL",
                                who, p);
            if (ns == NB_TOP_MAX_DP)
                return nb_error(NB_ERR_UNSUPPORTED, "%s: more than %d scalar arguments", who, NB_TOP_MAX_DP);
            tc.src[p] = NB_TCALL_SCALAR;
            tc.scalar[p] = scalars[p];
            op.dp[ns++] = scalars[p];
            op.ip[1] |= 1 << p;
        } else {
            if (op.nin == NB_TOP_MAX_IN)
                return nb_error(NB_ERR_UNSUPPORTED, "%s: more than %d tape values as arguments", who, NB_TOP_MAX_IN);
            tc.src[p] = op.nin;
            op.in[op.nin++] = args[p];
        }
    }
    op.ip[0] = nargs;
    int nd = 0;
    int64_t shape[NB_TAPE_MAX_DIMS];
    nb_status s = nb_tcall_shape(t, &tc, op.nin, op.in, who, &nd, shape, &op.ip[2]);
    if (s) return s;
    /* a gradient is needed when an input needs one: the function must have a reverse mode */
    for (int p = 0; p < nargs; p++)
        if (tc.src[p] != NB_TCALL_SCALAR && t->vals[args[p]].needs_grad && !nb_func_is_differentiable(f, 0))
            return nb_error(NB_ERR_INVALID_ARG, "%s: %s is not [Differentiable] but its argument %d needs a gradient "
                            "(mark the function [Differentiable], or pass values that need none)", who,
                            nb_func_signature(f, 0), p);
    if ((s = nb_tape_op_out(t, &op, nd, shape))) return s;
    if ((s = nb_tape_record(t, &op))) return s;
    *out = op.out;
    return NB_OK;
}

nb_status nb_tape_call(nb_tape *t, nb_func *f, int nargs, const nb_tvar *args, nb_tvar *out) {
    for (int p = 0; args && p < nargs; p++)
        if (args[p] == NB_TVAR_NONE)
            return nb_error(NB_ERR_INVALID_ARG, "nb_tape_call: argument %d is NB_TVAR_NONE (scalars: "
                            "nb_tape_call_scalars)", p);
    return nb_tape_call_scalars(t, f, nargs, args, NULL, out);
}

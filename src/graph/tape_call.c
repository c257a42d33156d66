/* Kernel-language functions over tape values through the call layer (tape_call.h): the shared
 * binding / shape check, forward and reverse mode of an nb_tcall, the per-tape cache of arrays
 * wrapping tape memory, and the CALL row of ops.def with its builders (nb_tape_call,
 * nb_tape_call_scalars in nn_tape.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph/tape_call.h"
#include "core/util.h"
#include "nabla/alloc.h"
#include "nabla/device.h"
#include "nabla/tensor.h"

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

/* ---- forward and reverse mode through prepared calls ------------------------------------------ */

/* A prepared call (module.h "prepared calls") of one binding: function, direction, which
 * parameters are arrays (their wrapped shapes) and which scalars, which gradients, the output's
 * shape, the 16-byte alignment of every address (a vectorized kernel is specialised for it). A
 * run with the same key only patches addresses and scalar values and launches: no allocation,
 * hashing, lock or host synchronisation, so a fixed-shape loop allocates nothing once warm and a
 * CUDA graph can capture the launches. The tape keeps NB_TCALL_PREP of them (the least recently
 * used is replaced), until nb_tape_free. */
#define NB_TCALL_PREP 32
typedef struct tc_prep {
    int live;
    uint64_t stamp;
    /* the key */
    nb_func *f;
    int backward, nparams, ond;
    unsigned scalars, gmask;
    uint64_t amask;
    int nd[NB_TCALL_MAX_PARAMS];
    int64_t shape[NB_TCALL_MAX_PARAMS][NB_TAPE_MAX_DIMS], oshape[NB_TAPE_MAX_DIMS];
    /* the call */
    nb_prepared *p;
    int slot[NB_TCALL_MAX_PARAMS], gslot[NB_TCALL_MAX_PARAMS], rslot;
    nb_tensor *wrap[2 * NB_TCALL_MAX_PARAMS + 1]; /* the arrays it was prepared with */
    int nwrap;
} tc_prep;
struct nb_tcall_cache {
    tc_prep e[NB_TCALL_PREP];
    uint64_t clock;
    int64_t prepares; /* misses: calls prepared */
};

static void prep_free(tc_prep *e) {
    nb_prepared_free(e->p);
    for (int i = 0; i < e->nwrap; i++) nb_tensor_free(e->wrap[i]);
    memset(e, 0, sizeof *e);
}

void nb_tcall_cache_free(nb_tape *t) {
    if (!t->tcall_cache) return;
    for (int i = 0; i < NB_TCALL_PREP; i++) prep_free(&t->tcall_cache->e[i]);
    nb_free(t->tcall_cache, sizeof *t->tcall_cache);
    t->tcall_cache = NULL;
}

int64_t nb_tcall_prepares(const nb_tape *t) { return t && t->tcall_cache ? t->tcall_cache->prepares : 0; }

/* One run's addresses: per parameter its data (arrays) and gradient (NULL: none), the output. */
typedef struct tc_ptrs {
    void *data[NB_TCALL_MAX_PARAMS], *grad[NB_TCALL_MAX_PARAMS], *out;
} tc_ptrs;

/* Prefixes the call layer's message with the op ("tape: call of 'f': ..."). */
static nb_status op_error(const nb_tcall *tc, int backward, nb_status s) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", nb_last_error());
    return nb_error(s, "tape: %s of '%s': %s", backward ? "backward of the call" : "call", nb_func_name(tc->f), msg);
}

static int same_key(const tc_prep *a, const tc_prep *b) {
    if (a->f != b->f || a->backward != b->backward || a->nparams != b->nparams || a->scalars != b->scalars ||
        a->gmask != b->gmask || a->amask != b->amask || a->ond != b->ond ||
        memcmp(a->oshape, b->oshape, sizeof(int64_t) * (size_t)a->ond))
        return 0;
    for (int p = 0; p < a->nparams; p++)
        if (a->nd[p] != b->nd[p] || memcmp(a->shape[p], b->shape[p], sizeof(int64_t) * (size_t)a->nd[p])) return 0;
    return 1;
}

/* Binds a fresh call of e's key over the addresses of r and prepares it (the arrays it binds are
 * wrapped anew and kept by e). */
static nb_status prep_build(nb_tape *t, const nb_tcall *tc, tc_prep *e, const tc_ptrs *r) {
    nb_device *dev = nb_module_device(nb_func_module(tc->f));
    nb_call *c = NULL;
    nb_tensor *a;
    nb_status s = nb_call_begin(tc->f, &c);
    if (!s && e->backward) s = nb_call_set_mode(c, NB_MODE_BWD);
#define WRAP(nd, shape, ptr) \
    (s ? s : (s = nb_tensor_wrap(dev, NB_F32, (nd), (shape), NULL, (ptr), &a)) ? s : (e->wrap[e->nwrap++] = a, NB_OK))
    for (int p = 0; p < tc->nparams && !s; p++) {
        if (e->scalars >> p & 1) {
            nb_leaf_info li;
            s = nb_func_leaf(tc->f, 0, p, &li);
            if (!s) s = nb_dtype_is_float(li.dtype) ? nb_call_arg_double(c, p, tc->scalar[p])
                                                    : nb_call_arg_int(c, p, (int64_t)tc->scalar[p]);
            continue;
        }
        if (!WRAP(e->nd[p], e->shape[p], r->data[p])) s = nb_call_arg(c, p, a);
        if (e->gmask >> p & 1 && !WRAP(e->nd[p], e->shape[p], r->grad[p])) s = nb_call_grad(c, p, a);
    }
    if (!WRAP(e->ond, e->oshape, r->out)) s = e->backward ? nb_call_dout(c, a) : nb_call_result(c, a);
#undef WRAP
    if (s) {
        nb_call_free(c);
        return s;
    }
    if ((s = nb_call_prepare(c, &e->p))) return s; /* (takes c) */
    for (int p = 0; p < tc->nparams && !s; p++) {
        e->gslot[p] = -1;
        s = nb_prepared_param_slot(e->p, p, &e->slot[p]);
        if (!s && e->gmask >> p & 1) {
            char path[300];
            snprintf(path, sizeof path, "%s_grad", nb_func_param_name(tc->f, 0, p));
            s = nb_prepared_slot(e->p, path, &e->gslot[p]);
        }
    }
    if (!s) s = nb_prepared_slot(e->p, e->backward ? "_dout" : "_result", &e->rslot);
    t->tcall_cache->prepares += !s;
    return s;
}

/* r's addresses and tc's scalars into e's call, then one launch. */
static nb_status prep_launch(const nb_tcall *tc, tc_prep *e, const tc_ptrs *r) {
    for (int p = 0; p < tc->nparams; p++) {
        if (e->scalars >> p & 1) {
            NB_TRY(nb_prepared_set_double(e->p, e->slot[p], tc->scalar[p]));
            continue;
        }
        NB_TRY(nb_prepared_set_ptr(e->p, e->slot[p], r->data[p]));
        if (e->gslot[p] >= 0) NB_TRY(nb_prepared_set_ptr(e->p, e->gslot[p], r->grad[p]));
    }
    NB_TRY(nb_prepared_set_ptr(e->p, e->rslot, r->out));
    return nb_prepared_launch(e->p, NULL);
}

static unsigned aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }

/* Forward (grads NULL) or backward (grads[k]: input k's gradient buffer or NULL) of tc over op. */
static nb_status tc_run(nb_tape *t, const nb_tcall *tc, const nb_top *op, float *const *grads) {
    if (!t->tcall_cache) {
        t->host_allocs++;
        t->tcall_cache = nb_calloc(sizeof *t->tcall_cache, 16);
        if (!t->tcall_cache) return nb_error(NB_ERR_OUT_OF_MEMORY, "tape: out of host memory (prepared calls)");
    }
    struct nb_tcall_cache *C = t->tcall_cache;
    int backward = grads != NULL;
    tc_prep key = {.f = tc->f, .backward = backward, .nparams = tc->nparams};
    tc_ptrs r;
    memset(&r, 0, sizeof r);
    for (int p = 0; p < tc->nparams; p++) {
        int k = tc->src[p];
        if (k == NB_TCALL_SCALAR) {
            key.scalars |= 1u << p;
            continue;
        }
        const nb_tval *v = &t->vals[op->in[k]];
        const int64_t *shape;
        input_shape(tc, v, k, &key.nd[p], &shape);
        memcpy(key.shape[p], shape, sizeof(int64_t) * (size_t)key.nd[p]);
        r.data[p] = v->data;
        key.amask |= (uint64_t)aligned16(v->data) << p;
        if (backward && grads[k]) {
            nb_leaf_info li;
            if (nb_func_leaf(tc->f, 0, p, &li) == NB_OK && li.differentiable) {
                key.gmask |= 1u << p;
                r.grad[p] = grads[k];
                key.amask |= (uint64_t)aligned16(grads[k]) << (NB_TCALL_MAX_PARAMS + p);
            }
        }
    }
    if (backward && !key.gmask) return NB_OK;
    const nb_tval *y = &t->vals[op->out];
    key.ond = tc->out_0d ? 0 : y->ndim;
    memcpy(key.oshape, y->shape, sizeof(int64_t) * (size_t)key.ond);
    r.out = backward ? (void *)y->grad : (void *)y->data;
    key.amask |= (uint64_t)aligned16(r.out) << (2 * NB_TCALL_MAX_PARAMS);
    tc_prep *e = NULL, *old = &C->e[0];
    for (int i = 0; i < NB_TCALL_PREP; i++) {
        tc_prep *q = &C->e[i];
        if (q->live && same_key(q, &key)) {
            e = q;
            break;
        }
        if (!q->live || (old->live && q->stamp < old->stamp)) old = q;
    }
    nb_status s;
    if (e) {
        s = prep_launch(tc, e, &r);
        if (s != NB_ERR_INVALID_ARG) { /* (an address the prepared kernel refuses: prepare anew) */
            e->stamp = ++C->clock;
            return s ? op_error(tc, backward, s) : NB_OK;
        }
        old = e;
    }
    prep_free(old);
    *old = key;
    s = prep_build(t, tc, old, &r);
    if (!s) s = prep_launch(tc, old, &r);
    /* CUDA: a new binding's first launch is checked for out-of-range indices (a wait, once per
     * binding: later launches of the same shapes are not read back) */
    if (!s && nb_tape_on_cuda(t)) s = nb_prepared_check(old->p);
    if (s) {
        prep_free(old);
        return op_error(tc, backward, s);
    }
    old->live = 1;
    old->stamp = ++C->clock;
    return NB_OK;
}

nb_status nb_tcall_forward(nb_tape *t, const nb_tcall *tc, const nb_top *op) { return tc_run(t, tc, op, NULL); }

nb_status nb_tcall_backward(nb_tape *t, const nb_tcall *tc, const nb_top *op) {
    float *g[NB_TOP_MAX_IN] = {0};
    int any = 0;
    for (int k = 0; k < op->nin; k++) {
        if (op->in[k] < 0 || !t->vals[op->in[k]].needs_grad || !nb_tcall_input_differentiable(tc, k)) continue;
        nb_status s = nb_tape_grad_buf(t, op->in[k], &g[k]); /* zeroed when fresh: the call adds */
        if (s) return s;
        any |= g[k] != NULL;
    }
    return any ? tc_run(t, tc, op, g) : NB_OK;
}

/* ---- the CALL row ------------------------------------------------------------------------------- */

/* The binding of a recorded CALL op: ip[0] parameters, ip[1] the mask of scalar ones (their
 * values dp[] in order), the others op->in[] in order; ip[2] out_0d. */
void nb_tcall_of_op(const nb_top *op, nb_tcall *tc) {
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
    nb_tcall_of_op(op, &tc);
    return nb_tcall_forward(t, &tc, op);
}

static nb_status call_bwd(nb_tape *t, const nb_top *op) {
    nb_tcall tc;
    nb_tcall_of_op(op, &tc);
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

/* Fused kernels, part 2: compiling a spec's generated function through the module layer and
 * running it over arrays through the call layer (fuse.h), and the op table's FUSED row, which
 * runs it over tape values. CPU and CUDA are the same code: the call layer compiles the function
 * for the module's device (C on the thread pool, or CUDA through NVRTC) and caches it per
 * argument signature, never per extent. */
#include <stdio.h>
#include <string.h>

#include "graph/fuse.h"
#include "core/util.h"
#include "nabla/alloc.h"

#define FUSED_FN "nb_fused"

/* A prepared call (module.h "prepared calls") of the kernel for one binding: forward or
 * backward, which gradients, the flat call shape, the dtypes and 16-byte alignments of the
 * arrays. A launch only patches the arrays' addresses: no allocation, no lock, no sync, so a
 * fixed-shape loop allocates nothing once warm and a CUDA graph can capture it. */
#define FUSE_PREP_CACHE 4
typedef struct fuse_prep {
    int live;
    uint64_t stamp; /* last use (the least recent entry is replaced) */
    /* the key */
    int backward, two_d;
    unsigned gmask, amask;
    int64_t rows, cols;
    nb_dtype dt[NB_FUSE_MAX_IN + 1]; /* inputs, then the result / dout */
    /* the call */
    nb_prepared *p;
    int slot_in[NB_FUSE_MAX_IN], slot_g[NB_FUSE_MAX_IN], slot_res; /* slot_res -1: none */
    nb_tensor *wrap[2 * NB_FUSE_MAX_IN + 1]; /* the arrays it was bound with (kept while it lives) */
    int nwrap;
} fuse_prep;

struct nb_fuse_kernel {
    nb_fuse_spec spec;
    char *source;
    nb_device *dev;
    nb_module *mod;
    nb_func *fn;
    int reduces;
    fuse_prep prep[FUSE_PREP_CACHE];
    uint64_t clock;
    int64_t prepares; /* calls prepared (misses of the cache) */
    float inv_n;      /* a reduction's dL/dterm = 1/n, the host value its forward's call binds
                       * (borrowed by the call until prepared: it must outlive the binding) */
};

nb_status nb_fuse_kernel_create(nb_device *dev, const nb_fuse_spec *s, nb_fuse_kernel **out) {
    if (!out) return nb_error(NB_ERR_INVALID_ARG, "nb_fuse_kernel_create: out is NULL");
    *out = NULL;
    if (!dev) return nb_error(NB_ERR_INVALID_ARG, "nb_fuse_kernel_create: device is NULL");
    nb_fuse_kernel *k = nb_calloc(sizeof *k, 16);
    if (!k) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_fuse_kernel_create: out of host memory");
    nb_status st = nb_fuse_codegen(s, FUSED_FN, &k->source);
    if (!st) {
        k->spec = *s;
        k->dev = dev;
        k->reduces = nb_fuse_kind_reduces(s->node[s->n_nodes - 1].kind);
        /* inlined functions of file modules: their directories, where the import finds them */
        char dirs[NB_FUSE_MAX_CALLS][512];
        const char *dp[NB_FUSE_MAX_CALLS];
        nb_module_options o = {0};
        for (int i = 0; i < s->n_calls; i++) {
            nb_module *m = nb_func_module(s->call[i].f);
            if (nb_module_source(m)) continue;
            nb_fuse_module_dir(nb_module_path(m), dirs[o.ninclude_dirs], sizeof dirs[0]);
            dp[o.ninclude_dirs] = dirs[o.ninclude_dirs];
            o.ninclude_dirs++;
        }
        o.include_dirs = dp;
        st = nb_module_load_source(dev, "nb_fused.nb", k->source, &o, &k->mod);
    }
    if (!st) st = nb_module_func(k->mod, FUSED_FN, &k->fn);
    if (st) {
        nb_fuse_kernel_free(k);
        return st;
    }
    *out = k;
    return NB_OK;
}

static void prep_free(fuse_prep *e) {
    nb_prepared_free(e->p);
    for (int i = 0; i < e->nwrap; i++) nb_tensor_free(e->wrap[i]);
    memset(e, 0, sizeof *e);
}

void nb_fuse_kernel_free(nb_fuse_kernel *k) {
    if (!k) return;
    for (int i = 0; i < FUSE_PREP_CACHE; i++) prep_free(&k->prep[i]);
    nb_module_free(k->mod);
    nb_fuse_free_text(k->source);
    nb_free(k, sizeof *k);
}

const nb_fuse_spec *nb_fuse_kernel_spec(const nb_fuse_kernel *k) { return k ? &k->spec : NULL; }
const char *nb_fuse_kernel_source(const nb_fuse_kernel *k) { return k ? k->source : NULL; }
nb_device *nb_fuse_kernel_device(const nb_fuse_kernel *k) { return k ? k->dev : NULL; }
int nb_fuse_kernel_reduces(const nb_fuse_kernel *k) { return k ? k->reduces : 0; }
int64_t nb_fuse_kernel_prepares(const nb_fuse_kernel *k) { return k ? k->prepares : 0; }

/* ---- shapes ------------------------------------------------------------------------------------ */

/* The kernel's flat call shape for one set of arguments: [numel] (1-D), or [rows, cols] when a
 * channel input is present (rows = its element count; channel arrays are seen as [rows, 1]). */
typedef struct fuse_layout {
    int ndim;
    const int64_t *shape; /* the first full input's shape */
    int64_t numel, rows, cols;
    int two_d;
} fuse_layout;

static int64_t count_of(int nd, const int64_t *s) {
    int64_t c = 1;
    for (int i = 0; i < nd; i++) c *= s[i];
    return c;
}

static const char *dims_str(const nb_fuse_arg *a, char *buf, size_t cap) {
    return nb_shape_str(a->ndim, a->shape, buf, cap);
}

nb_status nb_fuse_layout_check(const nb_fuse_kernel *k, const char *fn, const nb_fuse_arg *in, int64_t *rows,
                               int64_t *cols) {
    const nb_fuse_spec *s = &k->spec;
    char b1[128], b2[128];
    int first = -1, chan = -1;
    for (int i = 0; i < s->n_in; i++) {
        if (s->in_kind[i] == NB_FUSE_FULL && first < 0) first = i;
        if (s->in_kind[i] == NB_FUSE_CHANNEL && chan < 0) chan = i;
    }
    const nb_fuse_arg *f = &in[first];
    int64_t numel = count_of(f->ndim, f->shape);
    *rows = 1;
    *cols = numel;
    if (numel < 1) return nb_error(NB_ERR_SHAPE, "%s: input %d %s is empty", fn, first, dims_str(f, b1, sizeof b1));
    for (int i = 0; i < s->n_in; i++) {
        const nb_fuse_arg *a = &in[i];
        if (s->in_kind[i] == NB_FUSE_FULL) {
            if (a->ndim != f->ndim || memcmp(a->shape, f->shape, (size_t)a->ndim * sizeof(int64_t)))
                return nb_error(NB_ERR_SHAPE, "%s: input %d %s must have input %d's shape %s", fn, i,
                                dims_str(a, b1, sizeof b1), first, dims_str(f, b2, sizeof b2));
            continue;
        }
        const nb_fuse_arg *c0 = &in[chan];
        if (a->ndim != c0->ndim || memcmp(a->shape, c0->shape, (size_t)a->ndim * sizeof(int64_t)))
            return nb_error(NB_ERR_SHAPE, "%s: per-channel input %d %s must have input %d's shape %s", fn, i,
                            dims_str(a, b1, sizeof b1), chan, dims_str(c0, b2, sizeof b2));
        if (a->ndim < 1 || a->ndim >= f->ndim || memcmp(a->shape, f->shape, (size_t)a->ndim * sizeof(int64_t)))
            return nb_error(NB_ERR_SHAPE, "%s: per-channel input %d %s must be the leading dims of input %d %s", fn, i,
                            dims_str(a, b1, sizeof b1), first, dims_str(f, b2, sizeof b2));
        *rows = count_of(a->ndim, a->shape);
        *cols = numel / *rows;
    }
    return NB_OK;
}

/* ---- the prepared calls ------------------------------------------------------------------------ */

/* The flat view's dims of an array: full [numel] or [rows, cols], channel [rows, 1], one value [1]. */
static int view_dims(int two_d, int64_t rows, int64_t cols, int kind, int64_t *sh) {
    if (kind == 2) { /* one value */
        sh[0] = 1;
        return 1;
    }
    if (!two_d) {
        sh[0] = rows * cols;
        return 1;
    }
    sh[0] = rows;
    sh[1] = kind == 1 ? 1 : cols;
    return 2;
}

nb_status nb_fuse_call_begin(nb_fuse_kernel *k, int backward, const nb_fuse_arg *in, const nb_fuse_arg *res,
                             const nb_fuse_arg *grads, nb_tensor **wrap, int *nwrap, nb_call **out) {
    const nb_fuse_spec *sp = &k->spec;
    int64_t rows, cols;
    *out = NULL;
    *nwrap = 0;
    NB_TRY(nb_fuse_layout_check(k, backward ? "nb_fuse_backward" : "nb_fuse_forward", in, &rows, &cols));
    int two_d = 0;
    for (int i = 0; i < sp->n_in; i++) two_d |= sp->in_kind[i] == NB_FUSE_CHANNEL;
    nb_call *c = NULL;
    nb_status s = nb_call_begin(k->fn, &c);
    if (!s && (backward || k->reduces)) s = nb_call_set_mode(c, NB_MODE_BWD);
    int64_t sh[2];
    nb_tensor *t;
#define WRAP(arg, kind)                                                                                   \
    (s ? s : (s = nb_tensor_wrap(k->dev, (arg)->dtype, view_dims(two_d, rows, cols, (kind), sh), sh, NULL, \
                                 (arg)->data, &t)) ? s : (wrap[(*nwrap)++] = t, NB_OK))
    for (int i = 0; i < sp->n_in; i++) {
        int chan = sp->in_kind[i] == NB_FUSE_CHANNEL;
        if (!WRAP(&in[i], chan)) s = nb_call_arg(c, i, t);
        if (backward && grads[i].data && !WRAP(&grads[i], chan)) s = nb_call_grad(c, i, t);
    }
    int red = k->reduces;
    if (!backward && red) {
        /* out = d/dw sum_i w term_i / n at w = 1: w's gradient, one value broadcast to every
         * thread (the call sums it per thread and block, then adds it once); dL/dterm = 1/n */
        k->inv_n = (float)(1.0 / (double)(rows * cols));
        if (!s) s = nb_call_arg_double(c, sp->n_in, 1.0);
        if (!WRAP(res, 2)) s = nb_call_grad(c, sp->n_in, t);
        if (!s) s = nb_call_arg_value_named(c, "_dout", NB_F32, 0, NULL, &k->inv_n);
    } else if (!backward) {
        if (!WRAP(res, 0)) s = nb_call_result(c, t);
    } else {
        /* dL/dterm_i = dout w with w = 1/n (a uniform: the float the forward used) and dout the
         * loss's gradient, one value broadcast to every thread */
        if (red && !s) s = nb_call_arg_double(c, sp->n_in, (double)(float)(1.0 / (double)(rows * cols)));
        if (!WRAP(res, red ? 2 : 0)) s = nb_call_dout(c, t);
    }
#undef WRAP
    if (s) {
        nb_call_free(c);
        for (int i = 0; i < *nwrap; i++) nb_tensor_free(wrap[i]);
        *nwrap = 0;
        return s;
    }
    *out = c;
    return NB_OK;
}

/* Binds a fresh call for entry e (its key set) over the given arrays and prepares it. */
static nb_status prep_build(nb_fuse_kernel *k, fuse_prep *e, const nb_fuse_arg *in, const nb_fuse_arg *res,
                            const nb_fuse_arg *grads) {
    const nb_fuse_spec *sp = &k->spec;
    nb_call *c = NULL;
    NB_TRY(nb_fuse_call_begin(k, e->backward, in, res, grads, e->wrap, &e->nwrap, &c));
    nb_status s = nb_call_prepare(c, &e->p); /* takes c */
    for (int i = 0; !s && i < sp->n_in; i++) {
        char path[32];
        s = nb_prepared_param_slot(e->p, i, &e->slot_in[i]);
        e->slot_g[i] = -1;
        snprintf(path, sizeof path, "x%d_grad", i);
        if (!s && e->backward && grads[i].data) s = nb_prepared_slot(e->p, path, &e->slot_g[i]);
    }
    e->slot_res = -1;
    if (!s) s = nb_prepared_slot(e->p, e->backward ? "_dout" : k->reduces ? "w_grad" : "_result", &e->slot_res);
    k->prepares += !s;
    return s;
}

/* The arrays' addresses into e's call, then one launch. */
static nb_status prep_launch(nb_fuse_kernel *k, fuse_prep *e, const nb_fuse_arg *in, const nb_fuse_arg *res,
                             const nb_fuse_arg *grads) {
    for (int i = 0; i < k->spec.n_in; i++) {
        NB_TRY(nb_prepared_set_ptr(e->p, e->slot_in[i], in[i].data));
        if (e->slot_g[i] >= 0) NB_TRY(nb_prepared_set_ptr(e->p, e->slot_g[i], grads[i].data));
    }
    NB_TRY(nb_prepared_set_ptr(e->p, e->slot_res, res->data));
    return nb_prepared_launch(e->p, NULL);
}

nb_status nb_fuse_run(nb_fuse_kernel *k, int backward, const nb_fuse_arg *in, const nb_fuse_arg *res,
                      const nb_fuse_arg *grads) {
    const char *fn = backward ? "nb_fuse_backward" : "nb_fuse_forward";
    fuse_prep key = {.backward = backward};
    NB_TRY(nb_fuse_layout_check(k, fn, in, &key.rows, &key.cols));
    for (int i = 0; i < k->spec.n_in; i++) key.two_d |= k->spec.in_kind[i] == NB_FUSE_CHANNEL;
    for (int i = 0; i < k->spec.n_in; i++) {
        key.dt[i] = in[i].dtype;
        key.amask |= (unsigned)((uintptr_t)in[i].data % 16 == 0) << i;
        if (backward && grads[i].data) {
            key.gmask |= 1u << i;
            key.amask |= (unsigned)((uintptr_t)grads[i].data % 16 == 0) << (NB_FUSE_MAX_IN + i);
        }
    }
    if (backward && !key.gmask) return NB_OK;
    key.dt[k->spec.n_in] = res->dtype;
    key.amask |= (unsigned)((uintptr_t)res->data % 16 == 0) << (2 * NB_FUSE_MAX_IN);
    if (!backward && k->reduces) NB_TRY(nb_memset(k->dev, res->data, 0, sizeof(float))); /* the sum adds */
    fuse_prep *e = NULL, *old = &k->prep[0];
    for (int i = 0; i < FUSE_PREP_CACHE; i++) {
        fuse_prep *q = &k->prep[i];
        if (q->live && q->backward == key.backward && q->two_d == key.two_d && q->gmask == key.gmask &&
            q->amask == key.amask && q->rows == key.rows && q->cols == key.cols &&
            !memcmp(q->dt, key.dt, sizeof key.dt)) {
            e = q;
            break;
        }
        if (!q->live || (old->live && q->stamp < old->stamp)) old = q;
    }
    nb_status s = NB_OK;
    if (e) {
        s = prep_launch(k, e, in, res, grads);
        if (s != NB_ERR_INVALID_ARG) { /* (an address the prepared kernel refuses: prepare anew) */
            e->stamp = ++k->clock;
            return s;
        }
        old = e;
    }
    prep_free(old);
    *old = key;
    s = prep_build(k, old, in, res, grads);
    if (!s) s = prep_launch(k, old, in, res, grads);
    if (s) {
        prep_free(old);
        return s;
    }
    old->live = 1;
    old->stamp = ++k->clock;
    return NB_OK;
}

/* ---- over tensors ------------------------------------------------------------------------------ */

static nb_status check_tensor(const nb_fuse_kernel *k, const char *fn, const char *what, int i,
                              const nb_tensor *t, int allow_bf16, nb_fuse_arg *a) {
    char b[128];
    if (!t) return nb_error(NB_ERR_INVALID_ARG, "%s: %s %d is NULL", fn, what, i);
    if (nb_tensor_device(t) != k->dev)
        return nb_error(NB_ERR_DEVICE, "%s: %s %d is on %s, the kernel on %s", fn, what, i,
                        nb_device_name(nb_tensor_device(t)), nb_device_name(k->dev));
    nb_dtype dt = nb_tensor_dtype(t);
    if (dt != NB_F32 && !(allow_bf16 && dt == NB_BF16))
        return nb_error(NB_ERR_DTYPE, "%s: %s %d %s must be f32%s", fn, what, i, nb_tensor_describe(t, b, sizeof b),
                        allow_bf16 ? " or bf16" : "");
    if (!nb_tensor_is_contiguous(t))
        return nb_error(NB_ERR_LAYOUT, "%s: %s %d %s must be contiguous", fn, what, i, nb_tensor_describe(t, b, sizeof b));
    a->data = nb_tensor_data(t);
    a->dtype = dt;
    a->ndim = nb_tensor_ndim(t);
    memcpy(a->shape, nb_tensor_shape(t), sizeof(int64_t) * (size_t)a->ndim);
    return NB_OK;
}

/* out / dout: the inputs' full shape, or one f32 value for a reduction. */
static nb_status check_result(const nb_fuse_kernel *k, const char *fn, const char *what, const nb_fuse_arg *in,
                              const nb_tensor *t, nb_fuse_arg *a) {
    char b[128];
    NB_TRY(check_tensor(k, fn, what, 0, t, !k->reduces, a));
    const nb_fuse_arg *f = NULL;
    for (int i = 0; !f && i < k->spec.n_in; i++)
        if (k->spec.in_kind[i] == NB_FUSE_FULL) f = &in[i];
    if (k->reduces) {
        if (nb_tensor_numel(t) != 1 || a->ndim > 1)
            return nb_error(NB_ERR_SHAPE, "%s: %s %s must hold one value ([1]): the kernel reduces", fn, what,
                            nb_tensor_describe(t, b, sizeof b));
    } else if (a->ndim != f->ndim || memcmp(a->shape, f->shape, sizeof(int64_t) * (size_t)a->ndim)) {
        return nb_error(NB_ERR_SHAPE, "%s: %s %s must have the inputs' shape", fn, what, nb_tensor_describe(t, b, sizeof b));
    }
    return NB_OK;
}

static nb_status check_inputs(const nb_fuse_kernel *k, const char *fn, nb_tensor *const *in, nb_fuse_arg *a) {
    if (!k) return nb_error(NB_ERR_INVALID_ARG, "%s: kernel is NULL", fn);
    if (!in) return nb_error(NB_ERR_INVALID_ARG, "%s: inputs are NULL", fn);
    for (int i = 0; i < k->spec.n_in; i++) NB_TRY(check_tensor(k, fn, "input", i, in[i], 1, &a[i]));
    int64_t r, c;
    return nb_fuse_layout_check(k, fn, a, &r, &c);
}

nb_status nb_fuse_forward(nb_fuse_kernel *k, nb_tensor *const *in, nb_tensor *out) {
    const char *fn = "nb_fuse_forward";
    nb_fuse_arg a[NB_FUSE_MAX_IN], r;
    NB_TRY(check_inputs(k, fn, in, a));
    NB_TRY(check_result(k, fn, "out", a, out, &r));
    return nb_fuse_run(k, 0, a, &r, NULL);
}

nb_status nb_fuse_backward(nb_fuse_kernel *k, nb_tensor *const *in, nb_tensor *dout, nb_tensor *const *grads) {
    const char *fn = "nb_fuse_backward";
    nb_fuse_arg a[NB_FUSE_MAX_IN], r, g[NB_FUSE_MAX_IN];
    NB_TRY(check_inputs(k, fn, in, a));
    if (!grads) return nb_error(NB_ERR_INVALID_ARG, "%s: grads is NULL (an array of n_in entries, NULL = not wanted)", fn);
    NB_TRY(check_result(k, fn, "dout", a, dout, &r));
    memset(g, 0, sizeof g);
    for (int i = 0; i < k->spec.n_in; i++) {
        if (!grads[i]) continue;
        char b1[128], b2[128];
        NB_TRY(check_tensor(k, fn, "gradient", i, grads[i], 0, &g[i]));
        if (g[i].ndim != a[i].ndim || memcmp(g[i].shape, a[i].shape, sizeof(int64_t) * (size_t)a[i].ndim))
            return nb_error(NB_ERR_SHAPE, "%s: gradient %d %s must have input %d's shape %s", fn, i,
                            nb_tensor_describe(grads[i], b1, sizeof b1), i, nb_tensor_describe(in[i], b2, sizeof b2));
    }
    return nb_fuse_run(k, 1, a, &r, g);
}

/* Fused kernels, part 2: compiling a spec's generated function through the module layer and
 * running it over arrays through the call layer (fuse.h), and the op table's FUSED row, which
 * runs it over tape values. CPU and CUDA are the same code: the call layer compiles the function
 * for the module's device (C on the thread pool, or CUDA through NVRTC) and caches it per
 * argument signature, never per extent. */
#include <string.h>

#include "graph/fuse.h"
#include "core/util.h"
#include "nabla/alloc.h"

#define FUSED_FN "nb_fused"

struct nb_fuse_kernel {
    nb_fuse_spec spec;
    char *source;
    nb_device *dev;
    nb_module *mod;
    nb_func *fn;
    int reduces;
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
        st = nb_module_load_source(dev, "nb_fused.nb", k->source, NULL, &k->mod);
    }
    if (!st) st = nb_module_func(k->mod, FUSED_FN, &k->fn);
    if (st) {
        nb_fuse_kernel_free(k);
        return st;
    }
    *out = k;
    return NB_OK;
}

void nb_fuse_kernel_free(nb_fuse_kernel *k) {
    if (!k) return;
    nb_module_free(k->mod);
    nb_fuse_free_text(k->source);
    nb_free(k, sizeof *k);
}

const nb_fuse_spec *nb_fuse_kernel_spec(const nb_fuse_kernel *k) { return k ? &k->spec : NULL; }
const char *nb_fuse_kernel_source(const nb_fuse_kernel *k) { return k ? k->source : NULL; }
nb_device *nb_fuse_kernel_device(const nb_fuse_kernel *k) { return k ? k->dev : NULL; }
int nb_fuse_kernel_reduces(const nb_fuse_kernel *k) { return k ? k->reduces : 0; }

/* ---- shapes and views ------------------------------------------------------------------------ */

/* The kernel's layout for one set of arguments: the full shape, and the call's flat view of it:
 * [numel] (1-D), or [rows, cols] with rows = a channel input's element count when one exists. */
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

static nb_status check_tensor(const nb_fuse_kernel *k, const char *fn, const char *what, int i,
                              const nb_tensor *t, int allow_bf16) {
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
    return NB_OK;
}

/* Checks the inputs against the spec and fills the layout. */
static nb_status layout_of(const nb_fuse_kernel *k, const char *fn, nb_tensor *const *in, fuse_layout *L) {
    const nb_fuse_spec *s = &k->spec;
    char b1[128], b2[128];
    if (!in) return nb_error(NB_ERR_INVALID_ARG, "%s: inputs are NULL", fn);
    memset(L, 0, sizeof *L);
    int first = -1, chan = -1;
    for (int i = 0; i < s->n_in; i++) {
        NB_TRY(check_tensor(k, fn, "input", i, in[i], 1));
        if (s->in_kind[i] == NB_FUSE_FULL && first < 0) first = i;
        if (s->in_kind[i] == NB_FUSE_CHANNEL && chan < 0) chan = i;
    }
    const nb_tensor *f = in[first];
    L->ndim = nb_tensor_ndim(f);
    L->shape = nb_tensor_shape(f);
    L->numel = nb_tensor_numel(f);
    L->rows = 1;
    L->cols = L->numel;
    if (L->numel < 1) return nb_error(NB_ERR_SHAPE, "%s: input %d %s is empty", fn, first, nb_tensor_describe(f, b1, sizeof b1));
    for (int i = 0; i < s->n_in; i++) {
        const nb_tensor *t = in[i];
        int nd = nb_tensor_ndim(t);
        const int64_t *sh = nb_tensor_shape(t);
        if (s->in_kind[i] == NB_FUSE_FULL) {
            if (nd != L->ndim || memcmp(sh, L->shape, (size_t)nd * sizeof *sh))
                return nb_error(NB_ERR_SHAPE, "%s: input %d %s must have input %d's shape %s", fn, i,
                                nb_tensor_describe(t, b1, sizeof b1), first, nb_tensor_describe(f, b2, sizeof b2));
        } else {
            const nb_tensor *c0 = in[chan];
            if (i != chan && (nd != nb_tensor_ndim(c0) || memcmp(sh, nb_tensor_shape(c0), (size_t)nd * sizeof *sh)))
                return nb_error(NB_ERR_SHAPE, "%s: per-channel input %d %s must have input %d's shape", fn, i,
                                nb_tensor_describe(t, b1, sizeof b1), chan);
            if (nd < 1 || nd >= L->ndim || memcmp(sh, L->shape, (size_t)nd * sizeof *sh))
                return nb_error(NB_ERR_SHAPE, "%s: per-channel input %d %s must be the leading dims of input %d %s", fn,
                                i, nb_tensor_describe(t, b1, sizeof b1), first, nb_tensor_describe(f, b2, sizeof b2));
            L->two_d = 1;
            L->rows = count_of(nd, sh);
            L->cols = L->numel / L->rows;
        }
    }
    return NB_OK;
}

/* Views of the call: full arrays as [numel] or [rows, cols], channel arrays as [rows, 1]. */
typedef struct fuse_views {
    nb_tensor *v[2 * NB_FUSE_MAX_IN + 2];
    int n;
} fuse_views;

static nb_status view(fuse_views *fv, const fuse_layout *L, nb_tensor *t, int channel, nb_tensor **out) {
    int64_t sh[2] = {L->two_d ? L->rows : L->numel, channel ? 1 : L->cols};
    NB_TRY(nb_tensor_reshape(t, L->two_d ? 2 : 1, sh, out));
    fv->v[fv->n++] = *out;
    return NB_OK;
}

static void views_free(fuse_views *fv) {
    for (int i = 0; i < fv->n; i++) nb_tensor_free(fv->v[i]);
    fv->n = 0;
}

/* Binds every input (its view) to the call. */
static nb_status bind_inputs(nb_call *c, const nb_fuse_kernel *k, const fuse_layout *L, nb_tensor *const *in,
                             fuse_views *fv) {
    for (int i = 0; i < k->spec.n_in; i++) {
        nb_tensor *v;
        NB_TRY(view(fv, L, in[i], k->spec.in_kind[i] == NB_FUSE_CHANNEL, &v));
        NB_TRY(nb_call_arg(c, i, v));
    }
    return NB_OK;
}

/* out (or dout) must be the full shape, or one f32 value for a reduction. */
static nb_status check_result(const nb_fuse_kernel *k, const char *fn, const char *what, const fuse_layout *L,
                              const nb_tensor *t) {
    char b[128];
    NB_TRY(check_tensor(k, fn, what, 0, t, !k->reduces));
    if (k->reduces) {
        if (nb_tensor_numel(t) != 1 || nb_tensor_ndim(t) > 1)
            return nb_error(NB_ERR_SHAPE, "%s: %s %s must hold one value ([1]): the kernel reduces", fn, what,
                            nb_tensor_describe(t, b, sizeof b));
    } else if (nb_tensor_ndim(t) != L->ndim || memcmp(nb_tensor_shape(t), L->shape, (size_t)L->ndim * 8)) {
        return nb_error(NB_ERR_SHAPE, "%s: %s %s must have the inputs' shape", fn, what, nb_tensor_describe(t, b, sizeof b));
    }
    return NB_OK;
}

/* ---- forward and backward -------------------------------------------------------------------- */

nb_status nb_fuse_forward(nb_fuse_kernel *k, nb_tensor *const *in, nb_tensor *out) {
    const char *fn = "nb_fuse_forward";
    if (!k) return nb_error(NB_ERR_INVALID_ARG, "%s: kernel is NULL", fn);
    fuse_layout L;
    NB_TRY(layout_of(k, fn, in, &L));
    NB_TRY(check_result(k, fn, "out", &L, out));
    fuse_views fv = {.n = 0};
    nb_call *c = NULL;
    nb_status s = nb_call_begin(k->fn, &c);
    if (!s && k->reduces) {
        /* out = d/dw sum_i w term_i / n at w = 1: w's gradient, one value broadcast to every
         * thread, summed per thread and block by the call before one add; dL/dterm = 1/n */
        int64_t one = 1;
        nb_tensor *o1 = NULL;
        const float inv_n = (float)(1.0 / (double)L.numel);
        s = nb_tensor_reshape(out, 1, &one, &o1);
        if (!s) fv.v[fv.n++] = o1;
        if (!s) s = nb_tensor_fill_bytes(o1, 0);
        if (!s) s = nb_call_set_mode(c, NB_MODE_BWD);
        if (!s) s = bind_inputs(c, k, &L, in, &fv);
        if (!s) s = nb_call_arg_double(c, k->spec.n_in, 1.0);
        if (!s) s = nb_call_grad(c, k->spec.n_in, o1);
        if (!s) s = nb_call_arg_value_named(c, "_dout", NB_F32, 0, NULL, &inv_n);
    } else if (!s) {
        nb_tensor *ov = NULL;
        s = bind_inputs(c, k, &L, in, &fv);
        if (!s) s = view(&fv, &L, out, 0, &ov);
        if (!s) s = nb_call_result(c, ov);
    }
    if (c) s = s ? (nb_call_free(c), s) : nb_call_run(c, NULL); /* run frees c */
    views_free(&fv);
    return s;
}

nb_status nb_fuse_backward(nb_fuse_kernel *k, nb_tensor *const *in, nb_tensor *dout, nb_tensor *const *grads) {
    const char *fn = "nb_fuse_backward";
    if (!k) return nb_error(NB_ERR_INVALID_ARG, "%s: kernel is NULL", fn);
    if (!grads) return nb_error(NB_ERR_INVALID_ARG, "%s: grads is NULL (an array of n_in entries, NULL = not wanted)", fn);
    fuse_layout L;
    NB_TRY(layout_of(k, fn, in, &L));
    NB_TRY(check_result(k, fn, "dout", &L, dout));
    int any = 0;
    for (int i = 0; i < k->spec.n_in; i++) {
        if (!grads[i]) continue;
        char b1[128], b2[128];
        NB_TRY(check_tensor(k, fn, "gradient", i, grads[i], 0));
        int nd = nb_tensor_ndim(in[i]);
        if (nb_tensor_ndim(grads[i]) != nd || memcmp(nb_tensor_shape(grads[i]), nb_tensor_shape(in[i]), (size_t)nd * 8))
            return nb_error(NB_ERR_SHAPE, "%s: gradient %d %s must have input %d's shape %s", fn, i,
                            nb_tensor_describe(grads[i], b1, sizeof b1), i, nb_tensor_describe(in[i], b2, sizeof b2));
        any = 1;
    }
    if (!any) return NB_OK;
    fuse_views fv = {.n = 0};
    nb_call *c = NULL;
    nb_status s = nb_call_begin(k->fn, &c);
    if (!s) s = nb_call_set_mode(c, NB_MODE_BWD);
    if (!s) s = bind_inputs(c, k, &L, in, &fv);
    for (int i = 0; !s && i < k->spec.n_in; i++) {
        nb_tensor *gv = NULL;
        if (!grads[i]) continue;
        s = view(&fv, &L, grads[i], k->spec.in_kind[i] == NB_FUSE_CHANNEL, &gv);
        if (!s) s = nb_call_grad(c, i, gv);
    }
    if (!s && k->reduces) {
        /* dterm_i = dL/dloss * w with w = 1/n (a uniform; the float the forward used) and
         * dL/dloss one value broadcast to every thread */
        int64_t one = 1;
        nb_tensor *d1 = NULL;
        s = nb_call_arg_double(c, k->spec.n_in, (double)(float)(1.0 / (double)L.numel));
        if (!s) s = nb_tensor_reshape(dout, 1, &one, &d1);
        if (!s) fv.v[fv.n++] = d1;
        if (!s) s = nb_call_dout(c, d1);
    } else if (!s) {
        nb_tensor *dv = NULL;
        s = view(&fv, &L, dout, 0, &dv);
        if (!s) s = nb_call_dout(c, dv);
    }
    if (c) s = s ? (nb_call_free(c), s) : nb_call_run(c, NULL);
    views_free(&fv);
    return s;
}

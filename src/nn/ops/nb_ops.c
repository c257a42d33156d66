/* The .nb ops of lib/nn_ops.nb over arrays (nb_ops.h): argument checks, then one vectorized call
 * per op. Forward: nb_call_result into the caller's output. Backward: NB_MODE_BWD calls (the
 * generated bwds kernels) whose gradient arrays accumulate, as the tape's do. */
#include <math.h>
#include <string.h>

#include "nn/ops/nb_ops.h"
#include "core/util.h"
#include "nabla/alloc.h"

/* The functions of nn_ops, in this order. */
enum { F_SILU, F_ADD, F_MUL, F_CAST, F_MSE, F_ADAMW, /* ops */
       F_SILU_BWD, F_CAST_BWD, F_ADD_BWD, F_ADD_BWD_A, F_MUL_BWD, F_MUL_BWD_A, F_MSE_BWD, /* owned bwd */
       F_ADDC_ROWS, F_ADDC_BWD_ROWS, /* CPU row kernels */
       F_SILU_TO, F_CAST_TO, F_ADD_TO, F_ADD_A_TO, F_MUL_TO, F_MUL_A_TO, F_MSE_TO, F_MSE_P_TO, /* stored bwd */
       F_ADAMW_ZERO, F_COUNT };
static const char *const fn_names[F_COUNT] = {
    "nn_silu",     "nn_add",     "nn_mul",       "nn_cast",    "nn_mse_term", "nn_adamw",  "nn_silu_bwd",
    "nn_cast_bwd", "nn_add_bwd", "nn_add_bwd_a", "nn_mul_bwd", "nn_mul_bwd_a", "nn_mse_bwd",
    "nn_add_channel_rows", "nn_add_channel_bwd_rows", "nn_silu_bwd_to", "nn_cast_bwd_to", "nn_add_bwd_to",
    "nn_add_bwd_a_to", "nn_mul_bwd_to", "nn_mul_bwd_a_to", "nn_mse_bwd_to", "nn_mse_bwd_p_to", "nn_adamw_zero"};

struct nb_nbops {
    nb_device *dev;
    nb_module *mod;
    nb_func *fn[F_COUNT];
};

nb_status nb_nbops_create(nb_device *dev, nb_nbops **out) {
    if (!out) return nb_error(NB_ERR_INVALID_ARG, "nb_nbops_create: out is NULL");
    *out = NULL;
    if (!dev) return nb_error(NB_ERR_INVALID_ARG, "nb_nbops_create: dev is NULL");
    nb_nbops *o = nb_calloc(sizeof *o, 16);
    if (!o) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_nbops_create: out of host memory");
    o->dev = dev;
    nb_status s = nb_module_load_source(dev, "nn_ops_host.nb", "import nn_ops;\n", NULL, &o->mod);
    for (int i = 0; !s && i < F_COUNT; i++) s = nb_module_func(o->mod, fn_names[i], &o->fn[i]);
    if (s) {
        nb_nbops_destroy(o);
        return s;
    }
    *out = o;
    return NB_OK;
}

void nb_nbops_destroy(nb_nbops *o) {
    if (!o) return;
    nb_module_free(o->mod);
    nb_free(o, sizeof *o);
}

nb_device *nb_nbops_device(const nb_nbops *o) { return o ? o->dev : NULL; }

/* ---- argument checks ------------------------------------------------------------------------ */

/* t is non-NULL, on o's device, and of dtype f32 (or also bf16 when allow_bf16). */
static nb_status check_arg(const nb_nbops *o, const char *fn, const char *arg, const nb_tensor *t,
                           int allow_bf16) {
    char b[128];
    if (!t) return nb_error(NB_ERR_INVALID_ARG, "%s: %s is NULL", fn, arg);
    if (nb_tensor_device(t) != o->dev)
        return nb_error(NB_ERR_DEVICE, "%s: %s is on %s, the ops run on %s", fn, arg,
                        nb_device_name(nb_tensor_device(t)), nb_device_name(o->dev));
    nb_dtype dt = nb_tensor_dtype(t);
    if (dt != NB_F32 && !(allow_bf16 && dt == NB_BF16))
        return nb_error(NB_ERR_DTYPE, "%s: %s %s must be f32%s", fn, arg, nb_tensor_describe(t, b, sizeof b),
                        allow_bf16 ? " or bf16" : "");
    return NB_OK;
}

static int same_shape(const nb_tensor *a, const nb_tensor *b) {
    int n = nb_tensor_ndim(a);
    return n == nb_tensor_ndim(b) && (n == 0 || !memcmp(nb_tensor_shape(a), nb_tensor_shape(b), (size_t)n * 8));
}

/* b (named bn) has a's shape (a named an). */
static nb_status check_same(const char *fn, const char *an, const nb_tensor *a, const char *bn,
                            const nb_tensor *b) {
    char b1[128], b2[128];
    if (!same_shape(a, b))
        return nb_error(NB_ERR_SHAPE, "%s: %s %s and %s %s must have one shape", fn, an,
                        nb_tensor_describe(a, b1, sizeof b1), bn, nb_tensor_describe(b, b2, sizeof b2));
    return NB_OK;
}

/* An optional gradient: NULL, or an f32 array of ref's shape. */
static nb_status check_grad(const nb_nbops *o, const char *fn, const char *arg, const nb_tensor *g,
                            const char *refn, const nb_tensor *ref) {
    if (!g) return NB_OK;
    NB_TRY(check_arg(o, fn, arg, g, 0));
    return check_same(fn, refn, ref, arg, g);
}

static nb_status check_ctx(const nb_nbops *o, const char *fn) {
    if (!o) return nb_error(NB_ERR_INVALID_ARG, "%s: ops context is NULL", fn);
    return NB_OK;
}

/* ---- calls ----------------------------------------------------------------------------------- */

/* Elementwise ops run over flat [numel] views of their (same-shaped, contiguous) arrays: the call
 * kernel then walks one dimension instead of unravelling a 4-D index per element (measured 2-6x
 * faster on the CPU for [32,128,32,32]). A non-contiguous array is passed as it is. */
typedef struct flat_views {
    int on; /* 0: pass arrays as they are (a broadcasting call) */
    nb_tensor *v[8];
    int n;
} flat_views;

static nb_tensor *flat(flat_views *fv, nb_tensor *t) {
    if (!t || !fv->on || nb_tensor_ndim(t) == 1 || !nb_tensor_is_contiguous(t) || fv->n == 8) return t;
    int64_t n = nb_tensor_numel(t);
    nb_tensor *v;
    if (nb_tensor_reshape(t, 1, &n, &v)) return t; /* (cannot fail for a contiguous array) */
    fv->v[fv->n++] = v;
    return v;
}

static void flat_free(flat_views *fv) {
    for (int i = 0; i < fv->n; i++) nb_tensor_free(fv->v[i]);
    fv->n = 0;
}

/* Binds args[0 .. nargs) (NULL = leave unbound) and runs f forward into y; flatten: over flat
 * views (same-shaped arrays only). */
static nb_status run_fwd(nb_func *f, int flatten, int nargs, nb_tensor *const *args, nb_tensor *y) {
    nb_call *c;
    NB_TRY(nb_call_begin(f, &c));
    flat_views fv = {.on = flatten};
    for (int i = 0; i < nargs; i++)
        if (args[i]) nb_call_arg(c, i, flat(&fv, args[i]));
    nb_call_result(c, flat(&fv, y));
    nb_status s = nb_call_run(c, NULL); /* reports the first binding error, frees c */
    flat_free(&fv);
    return s;
}

/* Runs f's bwds kernel: primal args, dout = dy, gradient arrays grads[i] (NULL = not wanted). */
static nb_status run_bwd(nb_func *f, int flatten, int nargs, nb_tensor *const *args, nb_tensor *dy,
                         nb_tensor *const *grads) {
    int any = 0;
    for (int i = 0; i < nargs; i++) any |= grads[i] != NULL;
    if (!any) return NB_OK;
    nb_call *c;
    NB_TRY(nb_call_begin(f, &c));
    flat_views fv = {.on = flatten};
    nb_call_set_mode(c, NB_MODE_BWD);
    for (int i = 0; i < nargs; i++) {
        nb_call_arg(c, i, flat(&fv, args[i]));
        if (grads[i]) nb_call_grad(c, i, flat(&fv, grads[i]));
    }
    nb_call_dout(c, flat(&fv, dy));
    nb_status s = nb_call_run(c, NULL);
    flat_free(&fv);
    return s;
}

/* One argument of a plain call: an array, or (t NULL) a number for every thread (an int when
 * is_int), or (row) the kernel index (a call_id generator: the row of a row kernel). */
typedef struct slot {
    nb_tensor *t;
    double v;
    int is_int, row;
} slot;

/* Runs the plain function f (an owned-gradient backward of nn_ops: inputs, then inout gradient
 * arrays of the kernel's shape, added in place) with args[0 .. n). */
static nb_status run_plain(nb_func *f, int flatten, int n, const slot *args) {
    nb_call *c;
    NB_TRY(nb_call_begin(f, &c));
    flat_views fv = {.on = flatten};
    nb_generator g;
    nb_generator_init(&g, NB_GEN_CALL_ID);
    for (int i = 0; i < n; i++) {
        if (args[i].t) nb_call_arg(c, i, flat(&fv, args[i].t));
        else if (args[i].row) nb_call_arg_generator(c, i, &g);
        else if (args[i].is_int) nb_call_arg_int(c, i, (int64_t)args[i].v);
        else nb_call_arg_double(c, i, args[i].v);
    }
    nb_status s = nb_call_run(c, NULL);
    flat_free(&fv);
    return s;
}

/* ---- unary: silu, cast ----------------------------------------------------------------------- */

/* y = f(x) (x, y of one shape; bf16: either may be bf16) */
static nb_status unary_fwd(nb_nbops *o, int f, const char *fn, int bf16, nb_tensor *x, nb_tensor *y) {
    NB_TRY(check_ctx(o, fn));
    NB_TRY(check_arg(o, fn, "x", x, bf16));
    NB_TRY(check_arg(o, fn, "y", y, bf16));
    NB_TRY(check_same(fn, "x", x, "y", y));
    return run_fwd(o->fn[f], 1, 1, &x, y);
}

/* dx += dy f'(x) through f_bwd (the owned-element wrapper; or dx = ... through the stored form);
 * dx stays f32 */
static nb_status unary_bwd(nb_nbops *o, int f_bwd, const char *fn, int bf16, nb_tensor *x, nb_tensor *dy,
                           nb_tensor *dx) {
    char b[128];
    NB_TRY(check_ctx(o, fn));
    NB_TRY(check_arg(o, fn, "x", x, bf16));
    NB_TRY(check_arg(o, fn, "dy", dy, bf16));
    NB_TRY(check_same(fn, "x", x, "dy", dy));
    if (bf16 && dx && nb_tensor_dtype(dx) == NB_BF16)
        return nb_error(NB_ERR_UNSUPPORTED, "%s: dx %s is bf16; gradients accumulate in f32 arrays only", fn,
                        nb_tensor_describe(dx, b, sizeof b));
    NB_TRY(check_grad(o, fn, "dx", dx, "x", x));
    if (!dx) return NB_OK;
    return run_plain(o->fn[f_bwd], 1, 3, (slot[]){{.t = x}, {.t = dy}, {.t = dx}});
}

nb_status nb_nbops_silu(nb_nbops *o, nb_tensor *x, nb_tensor *y) {
    return unary_fwd(o, F_SILU, "nb_nbops_silu", 0, x, y);
}
nb_status nb_nbops_silu_bwd(nb_nbops *o, nb_tensor *x, nb_tensor *dy, nb_tensor *dx) {
    return unary_bwd(o, F_SILU_BWD, "nb_nbops_silu_bwd", 0, x, dy, dx);
}
nb_status nb_nbops_cast(nb_nbops *o, nb_tensor *x, nb_tensor *y) {
    return unary_fwd(o, F_CAST, "nb_nbops_cast", 1, x, y);
}
nb_status nb_nbops_cast_bwd(nb_nbops *o, nb_tensor *x, nb_tensor *dy, nb_tensor *dx) {
    return unary_bwd(o, F_CAST_BWD, "nb_nbops_cast_bwd", 1, x, dy, dx);
}
nb_status nb_nbops_silu_bwd_to(nb_nbops *o, nb_tensor *x, nb_tensor *dy, nb_tensor *dx) {
    return unary_bwd(o, F_SILU_TO, "nb_nbops_silu_bwd_to", 0, x, dy, dx);
}
nb_status nb_nbops_cast_bwd_to(nb_nbops *o, nb_tensor *x, nb_tensor *dy, nb_tensor *dx) {
    return unary_bwd(o, F_CAST_TO, "nb_nbops_cast_bwd_to", 1, x, dy, dx);
}

/* ---- binary: add, mul ----------------------------------------------------------------------- */

static nb_status binary_fwd(nb_nbops *o, int f, const char *fn, nb_tensor *a, nb_tensor *b, nb_tensor *y) {
    NB_TRY(check_ctx(o, fn));
    NB_TRY(check_arg(o, fn, "a", a, 0));
    NB_TRY(check_arg(o, fn, "b", b, 0));
    NB_TRY(check_arg(o, fn, "y", y, 0));
    NB_TRY(check_same(fn, "a", a, "b", b));
    NB_TRY(check_same(fn, "a", a, "y", y));
    nb_tensor *args[2] = {a, b};
    return run_fwd(o->fn[f], 1, 2, args, y);
}

/* da, db += (store: =) the gradients of f = F_ADD / F_MUL */
static nb_status binary_bwd(nb_nbops *o, int f, const char *fn, nb_tensor *a, nb_tensor *b, nb_tensor *dy,
                            nb_tensor *da, nb_tensor *db, int store) {
    NB_TRY(check_ctx(o, fn));
    NB_TRY(check_arg(o, fn, "a", a, 0));
    NB_TRY(check_arg(o, fn, "b", b, 0));
    NB_TRY(check_arg(o, fn, "dy", dy, 0));
    NB_TRY(check_same(fn, "a", a, "b", b));
    NB_TRY(check_same(fn, "a", a, "dy", dy));
    NB_TRY(check_grad(o, fn, "da", da, "a", a));
    NB_TRY(check_grad(o, fn, "db", db, "b", b));
    int both = f == F_ADD ? F_ADD_BWD : F_MUL_BWD, one = f == F_ADD ? F_ADD_BWD_A : F_MUL_BWD_A;
    if (store) both = f == F_ADD ? F_ADD_TO : F_MUL_TO, one = f == F_ADD ? F_ADD_A_TO : F_MUL_A_TO;
    if (da && db) return run_plain(o->fn[both], 1, 5, (slot[]){{.t = a}, {.t = b}, {.t = dy}, {.t = da}, {.t = db}});
    if (da) return run_plain(o->fn[one], 1, 4, (slot[]){{.t = a}, {.t = b}, {.t = dy}, {.t = da}});
    if (db) return run_plain(o->fn[one], 1, 4, (slot[]){{.t = b}, {.t = a}, {.t = dy}, {.t = db}}); /* symmetric ops */
    return NB_OK;
}

nb_status nb_nbops_add(nb_nbops *o, nb_tensor *a, nb_tensor *b, nb_tensor *y) {
    return binary_fwd(o, F_ADD, "nb_nbops_add", a, b, y);
}
nb_status nb_nbops_add_bwd(nb_nbops *o, nb_tensor *a, nb_tensor *b, nb_tensor *dy, nb_tensor *da,
                           nb_tensor *db) {
    return binary_bwd(o, F_ADD, "nb_nbops_add_bwd", a, b, dy, da, db, 0);
}
nb_status nb_nbops_add_bwd_to(nb_nbops *o, nb_tensor *a, nb_tensor *b, nb_tensor *dy, nb_tensor *da,
                              nb_tensor *db) {
    return binary_bwd(o, F_ADD, "nb_nbops_add_bwd_to", a, b, dy, da, db, 1);
}
nb_status nb_nbops_mul(nb_nbops *o, nb_tensor *a, nb_tensor *b, nb_tensor *y) {
    return binary_fwd(o, F_MUL, "nb_nbops_mul", a, b, y);
}
nb_status nb_nbops_mul_bwd(nb_nbops *o, nb_tensor *a, nb_tensor *b, nb_tensor *dy, nb_tensor *da,
                           nb_tensor *db) {
    return binary_bwd(o, F_MUL, "nb_nbops_mul_bwd", a, b, dy, da, db, 0);
}
nb_status nb_nbops_mul_bwd_to(nb_nbops *o, nb_tensor *a, nb_tensor *b, nb_tensor *dy, nb_tensor *da,
                              nb_tensor *db) {
    return binary_bwd(o, F_MUL, "nb_nbops_mul_bwd_to", a, b, dy, da, db, 1);
}

/* ---- per-channel add: nn_add over x [N,C,H,W] and ch viewed as [N,C,1,1] -------------------- */

/* ch (and dch) must be [N,C] for x [N,C,H,W]. The call runs over 2-D views: x, y, dy, dx as
 * [N*C, H*W] (view2) and ch, dch as [N*C, 1] (the broadcast operand); fewer dims to unravel per
 * element than [N,C,H,W] with [N,C,1,1]. Non-contiguous x-like arrays keep their 4 dims and ch
 * is then viewed as [N,C,1,1]. */
static nb_status channel_view(const char *fn, const char *arg, const nb_tensor *x, nb_tensor *ch, int two_d,
                              nb_tensor **view) {
    char b1[128], b2[128];
    const int64_t *xs = nb_tensor_shape(x), *cs = nb_tensor_shape(ch);
    if (nb_tensor_ndim(x) != 4 || nb_tensor_ndim(ch) != 2 || cs[0] != xs[0] || cs[1] != xs[1])
        return nb_error(NB_ERR_SHAPE, "%s: x %s and %s %s must be [N,C,H,W] and [N,C]", fn,
                        nb_tensor_describe(x, b1, sizeof b1), arg, nb_tensor_describe(ch, b2, sizeof b2));
    int64_t s2[2] = {xs[0] * xs[1], 1}, s4[4] = {xs[0], xs[1], 1, 1};
    return two_d ? nb_tensor_reshape(ch, 2, s2, view) : nb_tensor_reshape(ch, 4, s4, view);
}

/* t as [N*C, H*W] (a new view in *owned) when two_d, else t itself. */
static nb_tensor *view2(nb_tensor *t, int two_d, nb_tensor **owned, nb_status *s) {
    *owned = NULL;
    if (!t || !two_d || *s) return t;
    const int64_t *sh = nb_tensor_shape(t);
    int64_t s2[2] = {sh[0] * sh[1], sh[2] * sh[3]};
    *s = nb_tensor_reshape(t, 2, s2, owned);
    return *owned;
}

static int contiguous_all(nb_tensor *const *ts, int n) {
    for (int i = 0; i < n; i++)
        if (ts[i] && !nb_tensor_is_contiguous(ts[i])) return 0;
    return 1;
}

nb_status nb_nbops_add_channel(nb_nbops *o, nb_tensor *x, nb_tensor *ch, nb_tensor *y) {
    const char *fn = "nb_nbops_add_channel";
    NB_TRY(check_ctx(o, fn));
    NB_TRY(check_arg(o, fn, "x", x, 0));
    NB_TRY(check_arg(o, fn, "c", ch, 0));
    NB_TRY(check_arg(o, fn, "y", y, 0));
    NB_TRY(check_same(fn, "x", x, "y", y));
    int two_d = contiguous_all((nb_tensor *[]){x, ch, y}, 3);
    nb_tensor *cv, *xo, *yo;
    NB_TRY(channel_view(fn, "c", x, ch, two_d, &cv));
    nb_status s = NB_OK;
    nb_tensor *args[2] = {view2(x, two_d, &xo, &s), cv}, *yv = view2(y, two_d, &yo, &s);
    if (!s && two_d && nb_device_get_kind(o->dev) == NB_DEVICE_CPU) {
        /* CPU: one thread per contiguous row (nn_add_channel_rows); cv is [N*C, 1] */
        int64_t rows = nb_tensor_shape(yv)[0], hw = nb_tensor_shape(yv)[1];
        nb_tensor *c1 = NULL;
        s = nb_tensor_reshape(cv, 1, &rows, &c1);
        if (!s)
            s = run_plain(o->fn[F_ADDC_ROWS], 0, 5,
                          (slot[]){{.t = args[0]}, {.t = c1}, {.t = yv}, {.row = 1}, {.v = (double)hw, .is_int = 1}});
        nb_tensor_free(c1);
    } else if (!s) {
        s = run_fwd(o->fn[F_ADD], 0, 2, args, yv);
    }
    nb_tensor_free(cv), nb_tensor_free(xo), nb_tensor_free(yo);
    return s;
}

nb_status nb_nbops_add_channel_bwd(nb_nbops *o, nb_tensor *x, nb_tensor *ch, nb_tensor *dy,
                                   nb_tensor *dx, nb_tensor *dch) {
    const char *fn = "nb_nbops_add_channel_bwd";
    NB_TRY(check_ctx(o, fn));
    NB_TRY(check_arg(o, fn, "x", x, 0));
    NB_TRY(check_arg(o, fn, "c", ch, 0));
    NB_TRY(check_arg(o, fn, "dy", dy, 0));
    NB_TRY(check_same(fn, "x", x, "dy", dy));
    NB_TRY(check_grad(o, fn, "dx", dx, "x", x));
    NB_TRY(check_grad(o, fn, "dc", dch, "c", ch));
    int two_d = contiguous_all((nb_tensor *[]){x, ch, dy, dx, dch}, 5);
    nb_tensor *cv = NULL, *dcv = NULL, *xo, *dyo, *dxo;
    int dcv_done = 0;
    nb_status s = channel_view(fn, "c", x, ch, two_d, &cv);
    if (!s && dch) s = channel_view(fn, "dc", x, dch, two_d, &dcv);
    nb_tensor *args[2] = {view2(x, two_d, &xo, &s), cv}, *dxv = view2(dx, two_d, &dxo, &s);
    nb_tensor *dyv = view2(dy, two_d, &dyo, &s);
    if (!s && two_d && dxv && dcv && nb_device_get_kind(o->dev) == NB_DEVICE_CPU) {
        /* CPU: one thread per row, dx and dc in one pass (nn_add_channel_bwd_rows) */
        const int64_t *sh = nb_tensor_shape(x);
        int64_t rows = sh[0] * sh[1];
        nb_tensor *c1 = NULL, *dc1 = NULL;
        s = nb_tensor_reshape(ch, 1, &rows, &c1);
        if (!s) s = nb_tensor_reshape(dch, 1, &rows, &dc1);
        if (!s)
            s = run_plain(o->fn[F_ADDC_BWD_ROWS], 0, 7,
                          (slot[]){{.t = args[0]}, {.t = c1}, {.t = dyv}, {.t = dxv}, {.row = 1},
                                   {.v = (double)(sh[2] * sh[3]), .is_int = 1}, {.t = dc1}});
        nb_tensor_free(c1), nb_tensor_free(dc1);
        dxv = NULL, dcv_done = 1;
    }
    /* one bwds call of nn_add, one thread per element: dx += dy (each element belongs to one
     * thread: a plain add, nb_leaf_sig.owned) and dc += the sums of dy over H, W (dc is
     * broadcast over a row: on CUDA each warp sums its 32 lanes' contributions to one channel
     * and adds them with one atomic, the call layer's nb_accum) */
    nb_tensor *grads[2] = {dxv, dcv};
    if (!s && !dcv_done) s = run_bwd(o->fn[F_ADD], 0, 2, args, dyv, grads);
    nb_tensor_free(cv), nb_tensor_free(dcv), nb_tensor_free(xo), nb_tensor_free(dyo), nb_tensor_free(dxo);
    return s;
}

/* ---- MSE: a reduction through the broadcast gradient of nn_mse_term's w ---------------------- */

/* loss must be one f32 value ([1] or a scalar). */
static nb_status check_one(const nb_nbops *o, const char *fn, const char *arg, const nb_tensor *t) {
    char b[128];
    NB_TRY(check_arg(o, fn, arg, t, 0));
    if (nb_tensor_numel(t) != 1 || nb_tensor_ndim(t) > 1)
        return nb_error(NB_ERR_SHAPE, "%s: %s %s must hold one value ([1])", fn, arg,
                        nb_tensor_describe(t, b, sizeof b));
    return NB_OK;
}

static nb_status check_mse(nb_nbops *o, const char *fn, nb_tensor *p, nb_tensor *q) {
    char b[128];
    NB_TRY(check_ctx(o, fn));
    NB_TRY(check_arg(o, fn, "p", p, 0));
    NB_TRY(check_arg(o, fn, "q", q, 0));
    NB_TRY(check_same(fn, "p", p, "q", q));
    if (nb_tensor_numel(p) < 1)
        return nb_error(NB_ERR_SHAPE, "%s: p %s is empty (the mean of nothing)", fn, nb_tensor_describe(p, b, sizeof b));
    return NB_OK;
}

nb_status nb_nbops_mse(nb_nbops *o, nb_tensor *p, nb_tensor *q, nb_tensor *loss) {
    const char *fn = "nb_nbops_mse";
    NB_TRY(check_mse(o, fn, p, q));
    NB_TRY(check_one(o, fn, "loss", loss));
    /* loss = d/dw sum_i w (p_i - q_i)^2 / n at w = 1: the gradient of w, one value broadcast to
     * every thread, which the call sums per thread and per block before one atomic add. */
    int64_t one = 1;
    nb_tensor *l1;
    NB_TRY(nb_tensor_reshape(loss, 1, &one, &l1));
    nb_status s = nb_tensor_fill_bytes(l1, 0);
    const float inv_n = (float)(1.0 / (double)nb_tensor_numel(p)); /* dL/dterm: a uniform (no upload) */
    nb_call *c = NULL;
    flat_views fv = {.on = 1};
    if (!s) s = nb_call_begin(o->fn[F_MSE], &c);
    if (!s) {
        nb_call_set_mode(c, NB_MODE_BWD);
        nb_call_arg(c, 0, flat(&fv, p));
        nb_call_arg(c, 1, flat(&fv, q));
        nb_call_arg_double(c, 2, 1.0);
        nb_call_grad(c, 2, l1);
        nb_call_arg_value_named(c, "_dout", NB_F32, 0, NULL, &inv_n);
        s = nb_call_run(c, NULL);
    }
    flat_free(&fv);
    nb_tensor_free(l1);
    return s;
}

/* dp, dq += (store: =) the gradients of the mean squared error */
static nb_status mse_bwd(nb_nbops *o, const char *fn, nb_tensor *p, nb_tensor *q, nb_tensor *dloss, nb_tensor *dp,
                         nb_tensor *dq, int store) {
    NB_TRY(check_mse(o, fn, p, q));
    NB_TRY(check_one(o, fn, "dloss", dloss));
    NB_TRY(check_grad(o, fn, "dp", dp, "p", p));
    NB_TRY(check_grad(o, fn, "dq", dq, "q", q));
    if (!dp && !dq) return NB_OK;
    /* dp = dout w 2 (p - q) with w = 1/n (a uniform) and dout = dL/dloss broadcast */
    int64_t one = 1;
    nb_tensor *g1;
    NB_TRY(nb_tensor_reshape(dloss, 1, &one, &g1));
    double w = (double)(1.0f / (float)nb_tensor_numel(p));
    if ((dp && dq) || store) {
        nb_status s;
        if (dp && dq)
            s = run_plain(o->fn[store ? F_MSE_TO : F_MSE_BWD], 1, 6,
                          (slot[]){{.t = p}, {.t = q}, {.v = w}, {.t = g1}, {.t = dp}, {.t = dq}});
        else /* one stored gradient: dq is dp's formula with p and q swapped */
            s = run_plain(o->fn[F_MSE_P_TO], 1, 5,
                          (slot[]){{.t = dp ? p : q}, {.t = dp ? q : p}, {.v = w}, {.t = g1}, {.t = dp ? dp : dq}});
        nb_tensor_free(g1);
        return s;
    }
    nb_call *c;
    flat_views fv = {.on = 1};
    nb_status s = nb_call_begin(o->fn[F_MSE], &c);
    if (!s) {
        nb_call_set_mode(c, NB_MODE_BWD);
        nb_call_arg(c, 0, flat(&fv, p));
        nb_call_arg(c, 1, flat(&fv, q));
        nb_call_arg_double(c, 2, w);
        if (dp) nb_call_grad(c, 0, flat(&fv, dp));
        if (dq) nb_call_grad(c, 1, flat(&fv, dq));
        nb_call_dout(c, g1);
        s = nb_call_run(c, NULL);
    }
    flat_free(&fv);
    nb_tensor_free(g1);
    return s;
}

nb_status nb_nbops_mse_bwd(nb_nbops *o, nb_tensor *p, nb_tensor *q, nb_tensor *dloss, nb_tensor *dp,
                           nb_tensor *dq) {
    return mse_bwd(o, "nb_nbops_mse_bwd", p, q, dloss, dp, dq, 0);
}
nb_status nb_nbops_mse_bwd_to(nb_nbops *o, nb_tensor *p, nb_tensor *q, nb_tensor *dloss, nb_tensor *dp,
                              nb_tensor *dq) {
    return mse_bwd(o, "nb_nbops_mse_bwd_to", p, q, dloss, dp, dq, 1);
}

/* ---- AdamW ---------------------------------------------------------------------------------- */

nb_status nb_adamw_check_config(const char *fn, const nb_adam_config *c) {
    if (!c) return nb_error(NB_ERR_INVALID_ARG, "%s: cfg is NULL", fn);
    if (!(c->lr > 0.0f) || !isfinite(c->lr))
        return nb_error(NB_ERR_INVALID_ARG, "%s: lr = %g (want > 0)", fn, (double)c->lr);
    if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f) || !(c->beta2 >= 0.0f && c->beta2 < 1.0f))
        return nb_error(NB_ERR_INVALID_ARG, "%s: betas (%g, %g) must lie in [0, 1)", fn, (double)c->beta1,
                        (double)c->beta2);
    if (!(c->eps >= 0.0f) || !(c->weight_decay >= 0.0f))
        return nb_error(NB_ERR_INVALID_ARG, "%s: eps = %g and weight_decay = %g must be >= 0", fn,
                        (double)c->eps, (double)c->weight_decay);
    return NB_OK;
}

void nb_adamw_consts_at(const nb_adam_config *c, int64_t step, nb_adamw_consts *k) {
    double bc1 = 1.0 - pow((double)c->beta1, (double)step);
    double bc2 = 1.0 - pow((double)c->beta2, (double)step);
    k->lr_bc1 = (float)((double)c->lr / bc1);
    k->inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    k->beta1 = c->beta1;
    k->beta2 = c->beta2;
    k->eps = c->eps;
    k->l2 = c->decoupled ? 0.0f : c->weight_decay;
    k->lr_wd = c->decoupled ? c->lr * c->weight_decay : 0.0f;
}

/* params, grads, m, v: f32 arrays of one shape on o's device */
static nb_status check_adamw_arrays(nb_nbops *o, const char *fn, nb_tensor *params, nb_tensor *grads, nb_tensor *m,
                                    nb_tensor *v) {
    NB_TRY(check_ctx(o, fn));
    NB_TRY(check_arg(o, fn, "params", params, 0));
    NB_TRY(check_arg(o, fn, "grads", grads, 0));
    NB_TRY(check_arg(o, fn, "m", m, 0));
    NB_TRY(check_arg(o, fn, "v", v, 0));
    NB_TRY(check_same(fn, "params", params, "grads", grads));
    NB_TRY(check_same(fn, "params", params, "m", m));
    return check_same(fn, "params", params, "v", v);
}

/* The step constants in nn_adamw's parameter order (4 .. 10). */
static void adamw_consts_list(const nb_adamw_consts *a, float k[7]) {
    k[0] = a->lr_bc1, k[1] = a->inv_sqrt_bc2, k[2] = a->beta1, k[3] = a->beta2, k[4] = a->eps, k[5] = a->l2;
    k[6] = a->lr_wd;
}

nb_status nb_nbops_adamw(nb_nbops *o, const nb_adam_config *cfg, int64_t step, nb_tensor *params,
                         nb_tensor *grads, nb_tensor *m, nb_tensor *v, int zero_grads) {
    const char *fn = "nb_nbops_adamw";
    NB_TRY(check_ctx(o, fn));
    if (!cfg) return nb_error(NB_ERR_INVALID_ARG, "%s: cfg is NULL", fn);
    if (step < 1) return nb_error(NB_ERR_INVALID_ARG, "%s: step = %lld (want >= 1)", fn, (long long)step);
    NB_TRY(nb_adamw_check_config(fn, cfg));
    NB_TRY(check_adamw_arrays(o, fn, params, grads, m, v));
    nb_adamw_consts a;
    nb_adamw_consts_at(cfg, step, &a);
    float k[7];
    adamw_consts_list(&a, k);
    nb_call *c;
    NB_TRY(nb_call_begin(o->fn[F_ADAMW], &c));
    flat_views fv = {.on = 1};
    nb_call_arg(c, 0, flat(&fv, params));
    nb_call_arg(c, 1, flat(&fv, grads));
    nb_call_arg(c, 2, flat(&fv, m));
    nb_call_arg(c, 3, flat(&fv, v));
    for (int i = 0; i < 7; i++) nb_call_arg_double(c, 4 + i, (double)k[i]);
    nb_status s = nb_call_run(c, NULL);
    flat_free(&fv);
    NB_TRY(s);
    return zero_grads ? nb_tensor_fill_bytes(grads, 0) : NB_OK;
}

/* Slots of the prepared step: nn_adamw(_zero)'s parameters, one leaf each, in order. */
enum { ADAMW_P, ADAMW_G, ADAMW_M, ADAMW_V, ADAMW_K0 };

nb_status nb_nbops_adamw_prepare(nb_nbops *o, nb_tensor *params, nb_tensor *grads, nb_tensor *m, nb_tensor *v,
                                 int zero_grads, nb_prepared **out) {
    const char *fn = "nb_nbops_adamw_prepare";
    if (!out) return nb_error(NB_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    NB_TRY(check_adamw_arrays(o, fn, params, grads, m, v));
    for (int i = 0; i < 4; i++) {
        nb_tensor *t = (nb_tensor *[]){params, grads, m, v}[i];
        if (nb_tensor_ndim(t) != 1 || !nb_tensor_is_contiguous(t))
            return nb_error(NB_ERR_SHAPE, "%s: %s must be a dense 1-D array", fn, (const char *[]){"params", "grads", "m", "v"}[i]);
    }
    nb_call *c;
    NB_TRY(nb_call_begin(o->fn[zero_grads ? F_ADAMW_ZERO : F_ADAMW], &c));
    nb_call_arg(c, ADAMW_P, params);
    nb_call_arg(c, ADAMW_G, grads);
    nb_call_arg(c, ADAMW_M, m);
    nb_call_arg(c, ADAMW_V, v);
    for (int i = 0; i < 7; i++) nb_call_arg_double(c, ADAMW_K0 + i, 0.0); /* (set per step) */
    return nb_call_prepare(c, out);
}

nb_status nb_nbops_adamw_launch(nb_prepared *p, const nb_adamw_consts *a, nb_tensor *params, nb_tensor *grads) {
    if (!a) return nb_error(NB_ERR_INVALID_ARG, "nb_nbops_adamw_launch: constants are NULL");
    float k[7];
    adamw_consts_list(a, k);
    for (int i = 0; i < 7; i++) NB_TRY(nb_prepared_set_double(p, ADAMW_K0 + i, (double)k[i]));
    if (params) NB_TRY(nb_prepared_set_arg(p, ADAMW_P, params));
    if (grads) NB_TRY(nb_prepared_set_arg(p, ADAMW_G, grads));
    return nb_prepared_launch(p, NULL);
}

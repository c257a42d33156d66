/* The .nb ops of lib/nn_ops.nb over arrays (nb_ops.h): argument checks, then one vectorized call
 * per op. Forward: nb_call_result into the caller's output. Backward: NB_MODE_BWD calls (the
 * generated bwds kernels) whose gradient arrays accumulate, as the tape's do. */
#include <math.h>
#include <string.h>

#include "nn/ops/nb_ops.h"
#include "core/util.h"
#include "nabla/alloc.h"

/* The functions of nn_ops, in this order. */
enum { F_SILU, F_ADD, F_MUL, F_CAST, F_MSE, F_ADAMW, F_COUNT };
static const char *const fn_names[F_COUNT] = {"nn_silu", "nn_add", "nn_mul", "nn_cast", "nn_mse_term",
                                              "nn_adamw"};

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

/* ---- calls ---------------------------------------------------------------------------------- */

/* Binds args[0 .. nargs) (NULL = leave unbound) and runs f forward into y. */
static nb_status run_fwd(nb_func *f, int nargs, nb_tensor *const *args, nb_tensor *y) {
    nb_call *c;
    NB_TRY(nb_call_begin(f, &c));
    for (int i = 0; i < nargs; i++)
        if (args[i]) nb_call_arg(c, i, args[i]);
    nb_call_result(c, y);
    return nb_call_run(c, NULL); /* reports the first binding error, frees c */
}

/* Runs f's bwds kernel: primal args, dout = dy, gradient arrays grads[i] (NULL = not wanted). */
static nb_status run_bwd(nb_func *f, int nargs, nb_tensor *const *args, nb_tensor *dy,
                         nb_tensor *const *grads) {
    int any = 0;
    for (int i = 0; i < nargs; i++) any |= grads[i] != NULL;
    if (!any) return NB_OK;
    nb_call *c;
    NB_TRY(nb_call_begin(f, &c));
    nb_call_set_mode(c, NB_MODE_BWD);
    for (int i = 0; i < nargs; i++) {
        nb_call_arg(c, i, args[i]);
        if (grads[i]) nb_call_grad(c, i, grads[i]);
    }
    nb_call_dout(c, dy);
    return nb_call_run(c, NULL);
}

/* ---- unary: silu ---------------------------------------------------------------------------- */

nb_status nb_nbops_silu(nb_nbops *o, nb_tensor *x, nb_tensor *y) {
    const char *fn = "nb_nbops_silu";
    NB_TRY(check_ctx(o, fn));
    NB_TRY(check_arg(o, fn, "x", x, 0));
    NB_TRY(check_arg(o, fn, "y", y, 0));
    NB_TRY(check_same(fn, "x", x, "y", y));
    return run_fwd(o->fn[F_SILU], 1, &x, y);
}

nb_status nb_nbops_silu_bwd(nb_nbops *o, nb_tensor *x, nb_tensor *dy, nb_tensor *dx) {
    const char *fn = "nb_nbops_silu_bwd";
    NB_TRY(check_ctx(o, fn));
    NB_TRY(check_arg(o, fn, "x", x, 0));
    NB_TRY(check_arg(o, fn, "dy", dy, 0));
    NB_TRY(check_same(fn, "x", x, "dy", dy));
    NB_TRY(check_grad(o, fn, "dx", dx, "x", x));
    return run_bwd(o->fn[F_SILU], 1, &x, dy, &dx);
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
    return run_fwd(o->fn[f], 2, args, y);
}

static nb_status binary_bwd(nb_nbops *o, int f, const char *fn, nb_tensor *a, nb_tensor *b, nb_tensor *dy,
                            nb_tensor *da, nb_tensor *db) {
    NB_TRY(check_ctx(o, fn));
    NB_TRY(check_arg(o, fn, "a", a, 0));
    NB_TRY(check_arg(o, fn, "b", b, 0));
    NB_TRY(check_arg(o, fn, "dy", dy, 0));
    NB_TRY(check_same(fn, "a", a, "b", b));
    NB_TRY(check_same(fn, "a", a, "dy", dy));
    NB_TRY(check_grad(o, fn, "da", da, "a", a));
    NB_TRY(check_grad(o, fn, "db", db, "b", b));
    nb_tensor *args[2] = {a, b}, *grads[2] = {da, db};
    return run_bwd(o->fn[f], 2, args, dy, grads);
}

nb_status nb_nbops_add(nb_nbops *o, nb_tensor *a, nb_tensor *b, nb_tensor *y) {
    return binary_fwd(o, F_ADD, "nb_nbops_add", a, b, y);
}
nb_status nb_nbops_add_bwd(nb_nbops *o, nb_tensor *a, nb_tensor *b, nb_tensor *dy, nb_tensor *da,
                           nb_tensor *db) {
    return binary_bwd(o, F_ADD, "nb_nbops_add_bwd", a, b, dy, da, db);
}
nb_status nb_nbops_mul(nb_nbops *o, nb_tensor *a, nb_tensor *b, nb_tensor *y) {
    return binary_fwd(o, F_MUL, "nb_nbops_mul", a, b, y);
}
nb_status nb_nbops_mul_bwd(nb_nbops *o, nb_tensor *a, nb_tensor *b, nb_tensor *dy, nb_tensor *da,
                           nb_tensor *db) {
    return binary_bwd(o, F_MUL, "nb_nbops_mul_bwd", a, b, dy, da, db);
}

/* ---- per-channel add: nn_add over x [N,C,H,W] and ch viewed as [N,C,1,1] -------------------- */

/* ch (and dch) must be [N,C] for x [N,C,H,W]; *view4 gets the [N,C,1,1] view (free it). */
static nb_status channel_view(const char *fn, const char *arg, const nb_tensor *x, nb_tensor *ch,
                              nb_tensor **view4) {
    char b1[128], b2[128];
    const int64_t *xs = nb_tensor_shape(x), *cs = nb_tensor_shape(ch);
    if (nb_tensor_ndim(x) != 4 || nb_tensor_ndim(ch) != 2 || cs[0] != xs[0] || cs[1] != xs[1])
        return nb_error(NB_ERR_SHAPE, "%s: x %s and %s %s must be [N,C,H,W] and [N,C]", fn,
                        nb_tensor_describe(x, b1, sizeof b1), arg, nb_tensor_describe(ch, b2, sizeof b2));
    int64_t s4[4] = {xs[0], xs[1], 1, 1};
    return nb_tensor_reshape(ch, 4, s4, view4);
}

nb_status nb_nbops_add_channel(nb_nbops *o, nb_tensor *x, nb_tensor *ch, nb_tensor *y) {
    const char *fn = "nb_nbops_add_channel";
    NB_TRY(check_ctx(o, fn));
    NB_TRY(check_arg(o, fn, "x", x, 0));
    NB_TRY(check_arg(o, fn, "c", ch, 0));
    NB_TRY(check_arg(o, fn, "y", y, 0));
    NB_TRY(check_same(fn, "x", x, "y", y));
    nb_tensor *c4;
    NB_TRY(channel_view(fn, "c", x, ch, &c4));
    nb_tensor *args[2] = {x, c4};
    nb_status s = run_fwd(o->fn[F_ADD], 2, args, y);
    nb_tensor_free(c4);
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
    nb_tensor *c4 = NULL, *dc4 = NULL;
    nb_status s = channel_view(fn, "c", x, ch, &c4);
    if (!s && dch) s = channel_view(fn, "dc", x, dch, &dc4);
    if (!s) {
        nb_tensor *args[2] = {x, c4}, *grads[2] = {dx, dc4};
        s = run_bwd(o->fn[F_ADD], 2, args, dy, grads);
    }
    nb_tensor_free(c4);
    nb_tensor_free(dc4);
    return s;
}

/* ---- cast ----------------------------------------------------------------------------------- */

nb_status nb_nbops_cast(nb_nbops *o, nb_tensor *x, nb_tensor *y) {
    const char *fn = "nb_nbops_cast";
    NB_TRY(check_ctx(o, fn));
    NB_TRY(check_arg(o, fn, "x", x, 1));
    NB_TRY(check_arg(o, fn, "y", y, 1));
    NB_TRY(check_same(fn, "x", x, "y", y));
    return run_fwd(o->fn[F_CAST], 1, &x, y);
}

nb_status nb_nbops_cast_bwd(nb_nbops *o, nb_tensor *x, nb_tensor *dy, nb_tensor *dx) {
    const char *fn = "nb_nbops_cast_bwd";
    char b[128];
    NB_TRY(check_ctx(o, fn));
    NB_TRY(check_arg(o, fn, "x", x, 1));
    NB_TRY(check_arg(o, fn, "dy", dy, 1));
    NB_TRY(check_same(fn, "x", x, "dy", dy));
    if (dx && nb_tensor_dtype(dx) == NB_BF16)
        return nb_error(NB_ERR_UNSUPPORTED, "%s: dx %s is bf16; gradients accumulate in f32 arrays only", fn,
                        nb_tensor_describe(dx, b, sizeof b));
    NB_TRY(check_grad(o, fn, "dx", dx, "x", x));
    return run_bwd(o->fn[F_CAST], 1, &x, dy, &dx);
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
    nb_tensor *dout = NULL;
    double inv_n = 1.0 / (double)nb_tensor_numel(p);
    if (!s) s = nb_tensor_from_host(o->dev, NB_F32, 1, &one, &(float){(float)inv_n}, &dout);
    nb_call *c = NULL;
    if (!s) s = nb_call_begin(o->fn[F_MSE], &c);
    if (!s) {
        nb_call_set_mode(c, NB_MODE_BWD);
        nb_call_arg(c, 0, p);
        nb_call_arg(c, 1, q);
        nb_call_arg_double(c, 2, 1.0);
        nb_call_grad(c, 2, l1);
        nb_call_dout(c, dout);
        s = nb_call_run(c, NULL);
    }
    nb_tensor_free(dout);
    nb_tensor_free(l1);
    return s;
}

nb_status nb_nbops_mse_bwd(nb_nbops *o, nb_tensor *p, nb_tensor *q, nb_tensor *dloss, nb_tensor *dp,
                           nb_tensor *dq) {
    const char *fn = "nb_nbops_mse_bwd";
    NB_TRY(check_mse(o, fn, p, q));
    NB_TRY(check_one(o, fn, "dloss", dloss));
    NB_TRY(check_grad(o, fn, "dp", dp, "p", p));
    NB_TRY(check_grad(o, fn, "dq", dq, "q", q));
    if (!dp && !dq) return NB_OK;
    /* dp = dout w 2 (p - q) with w = 1/n (a uniform) and dout = dL/dloss broadcast */
    int64_t one = 1;
    nb_tensor *g1;
    NB_TRY(nb_tensor_reshape(dloss, 1, &one, &g1));
    nb_call *c;
    nb_status s = nb_call_begin(o->fn[F_MSE], &c);
    if (!s) {
        nb_call_set_mode(c, NB_MODE_BWD);
        nb_call_arg(c, 0, p);
        nb_call_arg(c, 1, q);
        nb_call_arg_double(c, 2, (double)(1.0f / (float)nb_tensor_numel(p)));
        if (dp) nb_call_grad(c, 0, dp);
        if (dq) nb_call_grad(c, 1, dq);
        nb_call_dout(c, g1);
        s = nb_call_run(c, NULL);
    }
    nb_tensor_free(g1);
    return s;
}

/* ---- AdamW ---------------------------------------------------------------------------------- */

nb_status nb_nbops_adamw(nb_nbops *o, const nb_adam_config *cfg, int64_t step, nb_tensor *params,
                         nb_tensor *grads, nb_tensor *m, nb_tensor *v, int zero_grads) {
    const char *fn = "nb_nbops_adamw";
    NB_TRY(check_ctx(o, fn));
    if (!cfg) return nb_error(NB_ERR_INVALID_ARG, "%s: cfg is NULL", fn);
    if (step < 1) return nb_error(NB_ERR_INVALID_ARG, "%s: step = %lld (want >= 1)", fn, (long long)step);
    if (!(cfg->lr > 0.0f) || !(cfg->beta1 >= 0.0f && cfg->beta1 < 1.0f) ||
        !(cfg->beta2 >= 0.0f && cfg->beta2 < 1.0f) || !(cfg->eps >= 0.0f) || !(cfg->weight_decay >= 0.0f))
        return nb_error(NB_ERR_INVALID_ARG,
                        "%s: lr %g must be > 0, betas (%g, %g) in [0, 1), eps %g and weight_decay %g >= 0", fn,
                        (double)cfg->lr, (double)cfg->beta1, (double)cfg->beta2, (double)cfg->eps,
                        (double)cfg->weight_decay);
    NB_TRY(check_arg(o, fn, "params", params, 0));
    NB_TRY(check_arg(o, fn, "grads", grads, 0));
    NB_TRY(check_arg(o, fn, "m", m, 0));
    NB_TRY(check_arg(o, fn, "v", v, 0));
    NB_TRY(check_same(fn, "params", params, "grads", grads));
    NB_TRY(check_same(fn, "params", params, "m", m));
    NB_TRY(check_same(fn, "params", params, "v", v));
    /* the host-side constants exactly as nb_adam_step computes them */
    double bc1 = 1.0 - pow((double)cfg->beta1, (double)step);
    double bc2 = 1.0 - pow((double)cfg->beta2, (double)step);
    float k[7] = {(float)((double)cfg->lr / bc1), (float)(1.0 / sqrt(bc2)), cfg->beta1, cfg->beta2, cfg->eps,
                  cfg->decoupled ? 0.0f : cfg->weight_decay, cfg->decoupled ? cfg->lr * cfg->weight_decay : 0.0f};
    nb_call *c;
    NB_TRY(nb_call_begin(o->fn[F_ADAMW], &c));
    nb_call_arg(c, 0, params);
    nb_call_arg(c, 1, grads);
    nb_call_arg(c, 2, m);
    nb_call_arg(c, 3, v);
    for (int i = 0; i < 7; i++) nb_call_arg_double(c, 4 + i, (double)k[i]);
    NB_TRY(nb_call_run(c, NULL));
    return zero_grads ? nb_tensor_fill_bytes(grads, 0) : NB_OK;
}

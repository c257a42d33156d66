/* The .nb ops (lib/nn_ops.nb through src/nn/ops/nb_ops.c) against the hand-written ones on the
 * CPU: silu, add, add_channel, mse against the tape's CPU rows (forward values; backward fed the
 * tape's own dy), casts against nb_f32_to_bf16 / nb_bf16_to_f32, AdamW/Adam against nb_adam_step,
 * mul against its definition; then every op on CUDA against the CPU (skipped without a GPU; a
 * failure under NB_REQUIRE_CUDA=1); and each kind of bad argument. */
#include "call/call_internal.h"
#include "device/cuda/cuda_api.h"
#include "lang/compiler.h"
#include "nabla/alloc.h"
#include "nabla/nn_optim.h"
#include "nabla/nn_tape.h"
#include "nb_test.h"
#include "nb_test_nvrtc.h"
#include "nn/ops/nb_ops.h"

static nb_tensor *mk(nb_device *dev, int ndim, const int64_t *shape, const float *data) {
    nb_tensor *t = NULL;
    if (data) nb_tensor_from_host(dev, NB_F32, ndim, shape, data, &t);
    else nb_tensor_zeros(dev, NB_F32, ndim, shape, &t);
    return t;
}

static void get(const nb_tensor *t, float *out) { nb_tensor_to_host(t, out, nb_tensor_nbytes(t)); }

static float *rnd(int64_t n, uint32_t seed, float scale) {
    float *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = scale * ((float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f);
    }
    return p;
}

enum { N = 4, C = 8, H = 16, W = 12 };
#define NUMEL ((int64_t)N * C * H * W)
static const int64_t S4[4] = {N, C, H, W}, S2[2] = {N, C};

/* tape: y = op(x[, b]); loss = mse(y, target); backward. Gives y, dy, dx, db and the loss. */
typedef struct {
    float *y, *dy, *dx, *db, loss;
} tape_ref;

static void tape_run(int op, const float *x, const float *b, const float *target, tape_ref *r) {
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    nb_tvar xv, bv = NB_TVAR_NONE, yv, tv, lv;
    NB_REQUIRE_OK(nb_tape_input(t, 4, S4, x, 1, &xv));
    if (op == 1) NB_REQUIRE_OK(nb_tape_input(t, 4, S4, b, 1, &bv));
    if (op == 2) NB_REQUIRE_OK(nb_tape_input(t, 2, S2, b, 1, &bv));
    NB_REQUIRE_OK(nb_tape_input(t, 4, S4, target, 0, &tv));
    if (op == 0) NB_REQUIRE_OK(nb_tape_silu(t, xv, &yv));
    if (op == 1) NB_REQUIRE_OK(nb_tape_add(t, xv, bv, &yv));
    if (op == 2) NB_REQUIRE_OK(nb_tape_add_channel(t, xv, bv, &yv));
    NB_REQUIRE_OK(nb_tape_mse(t, yv, tv, &lv));
    NB_REQUIRE_OK(nb_tape_backward(t, lv));
    int64_t nb = op == 2 ? (int64_t)N * C : NUMEL;
    r->y = malloc(NUMEL * 4), r->dy = malloc(NUMEL * 4), r->dx = malloc(NUMEL * 4), r->db = malloc(nb * 4);
    NB_REQUIRE_OK(nb_tape_read(t, yv, r->y, NUMEL));
    NB_REQUIRE_OK(nb_tape_read_grad(t, yv, r->dy, NUMEL));
    NB_REQUIRE_OK(nb_tape_read_grad(t, xv, r->dx, NUMEL));
    if (bv != NB_TVAR_NONE) NB_REQUIRE_OK(nb_tape_read_grad(t, bv, r->db, nb));
    NB_REQUIRE_OK(nb_tape_read(t, lv, &r->loss, 1));
    nb_tape_free(t);
}

static void tape_ref_free(tape_ref *r) { free(r->y), free(r->dy), free(r->dx), free(r->db); }

/* op 0 silu, 1 add, 2 add_channel: forward and backward (fed the tape's dy) vs the tape. */
static void check_vs_tape(int op) {
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    nb_nbops *o;
    NB_REQUIRE_OK(nb_nbops_create(dev, &o));
    int64_t nb = op == 2 ? (int64_t)N * C : NUMEL;
    float *x = rnd(NUMEL, 1, 4.0f), *b = rnd(nb, 2, 1.0f), *target = rnd(NUMEL, 3, 1.0f);
    tape_ref r;
    tape_run(op, x, b, target, &r);
    nb_tensor *tx = mk(dev, 4, S4, x), *tb = op == 2 ? mk(dev, 2, S2, b) : mk(dev, 4, S4, b);
    nb_tensor *ty = mk(dev, 4, S4, NULL), *tdy = mk(dev, 4, S4, r.dy), *tdx = mk(dev, 4, S4, NULL);
    nb_tensor *tdb = op == 2 ? mk(dev, 2, S2, NULL) : mk(dev, 4, S4, NULL);
    float *y = malloc(NUMEL * 4), *dx = malloc(NUMEL * 4), *db = malloc(nb * 4);
    if (op == 0) {
        NB_EXPECT_OK(nb_nbops_silu(o, tx, ty));
        NB_EXPECT_OK(nb_nbops_silu_bwd(o, tx, tdy, tdx));
    } else if (op == 1) {
        NB_EXPECT_OK(nb_nbops_add(o, tx, tb, ty));
        NB_EXPECT_OK(nb_nbops_add_bwd(o, tx, tb, tdy, tdx, tdb));
    } else {
        NB_EXPECT_OK(nb_nbops_add_channel(o, tx, tb, ty));
        NB_EXPECT_OK(nb_nbops_add_channel_bwd(o, tx, tb, tdy, tdx, tdb));
    }
    get(ty, y), get(tdx, dx), get(tdb, db);
    nb_test_expect_close("y", y, r.y, NUMEL, op == 0 ? 4e-7 : 0.0);
    nb_test_expect_close("dx", dx, r.dx, NUMEL, op == 0 ? 1e-6 : 0.0);
    if (op) nb_test_expect_close("db", db, r.db, nb, op == 2 ? 1e-6 : 0.0);
    /* one gradient at a time (other code paths): db alone, then dx alone */
    if (op) {
        NB_EXPECT_OK(nb_tensor_fill_bytes(tdb, 0));
        NB_EXPECT_OK(nb_tensor_fill_bytes(tdx, 0));
        if (op == 1) NB_EXPECT_OK(nb_nbops_add_bwd(o, tx, tb, tdy, NULL, tdb));
        else NB_EXPECT_OK(nb_nbops_add_channel_bwd(o, tx, tb, tdy, NULL, tdb));
        get(tdb, db), get(tdx, dx);
        nb_test_expect_close("db alone", db, r.db, nb, op == 2 ? 1e-6 : 0.0);
        for (int64_t i = 0; i < NUMEL; i++) NB_EXPECT(dx[i] == 0.0f);
        if (op == 1) NB_EXPECT_OK(nb_nbops_add_bwd(o, tx, tb, tdy, tdx, NULL));
        else NB_EXPECT_OK(nb_nbops_add_channel_bwd(o, tx, tb, tdy, tdx, NULL));
        get(tdx, dx);
        nb_test_expect_close("dx alone", dx, r.dx, NUMEL, 0.0);
    }
    /* gradients accumulate: a second backward doubles them */
    if (op == 0) {
        NB_EXPECT_OK(nb_nbops_silu_bwd(o, tx, tdy, tdx));
        get(tdx, dx);
        for (int64_t i = 0; i < NUMEL; i++) dx[i] *= 0.5f;
        nb_test_expect_close("dx accumulated", dx, r.dx, NUMEL, 1e-6);
    }
    /* the MSE of the tape's y against target: value and dy (dloss = 1) */
    nb_tensor *tt = mk(dev, 4, S4, target), *loss = mk(dev, 1, (int64_t[]){1}, NULL);
    nb_tensor *dl = mk(dev, 1, (int64_t[]){1}, (float[]){1.0f}), *dp = mk(dev, 4, S4, NULL);
    nb_tensor *dq = mk(dev, 4, S4, NULL);
    float l, *dph = malloc(NUMEL * 4), *dqh = malloc(NUMEL * 4);
    NB_EXPECT_OK(nb_nbops_mse(o, ty, tt, loss));
    NB_EXPECT_OK(nb_nbops_mse_bwd(o, ty, tt, dl, dp, dq));
    get(loss, &l), get(dp, dph), get(dq, dqh);
    nb_test_expect_close("mse", &l, &r.loss, 1, 1e-6);
    nb_test_expect_close("mse dp", dph, r.dy, NUMEL, 1e-6);
    for (int64_t i = 0; i < NUMEL; i++) dqh[i] = -dqh[i];
    nb_test_expect_close("mse dq", dqh, r.dy, NUMEL, 1e-6);
    NB_EXPECT_OK(nb_tensor_fill_bytes(dp, 0));
    NB_EXPECT_OK(nb_nbops_mse_bwd(o, ty, tt, dl, dp, NULL)); /* dp alone: the bwds path */
    get(dp, dph);
    nb_test_expect_close("mse dp alone", dph, r.dy, NUMEL, 1e-6);
    free(dph), free(dqh);
    nb_tensor_free(tt), nb_tensor_free(loss), nb_tensor_free(dl), nb_tensor_free(dp), nb_tensor_free(dq);
    free(x), free(b), free(target), free(y), free(dx), free(db);
    tape_ref_free(&r);
    nb_tensor_free(tx), nb_tensor_free(tb), nb_tensor_free(ty), nb_tensor_free(tdy), nb_tensor_free(tdx);
    nb_tensor_free(tdb);
    nb_nbops_destroy(o);
    nb_device_close(dev);
}

static void test_silu_cpu(void) { check_vs_tape(0); }
static void test_add_cpu(void) { check_vs_tape(1); }
static void test_add_channel_cpu(void) { check_vs_tape(2); }

/* add_channel over a non-contiguous x (a transposed view: the 4-D call path) vs the contiguous
 * (row-kernel) path on the same values */
static void test_add_channel_strided_cpu(void) {
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    nb_nbops *o;
    NB_REQUIRE_OK(nb_nbops_create(dev, &o));
    int64_t st[4] = {N, C, W, H};
    float *x = rnd(NUMEL, 21, 1.0f), *c = rnd(N * C, 22, 1.0f), *dy = rnd(NUMEL, 23, 1.0f);
    float *a = malloc(NUMEL * 4), *b = malloc(NUMEL * 4), da[N * C], db[N * C];
    nb_tensor *xs = mk(dev, 4, st, x), *xt, *xc, *tc = mk(dev, 2, S2, c), *dys = mk(dev, 4, st, dy), *dyt, *dyc;
    NB_REQUIRE_OK(nb_tensor_transpose(xs, 2, 3, &xt)); /* [N,C,H,W], strided */
    NB_REQUIRE_OK(nb_tensor_transpose(dys, 2, 3, &dyt));
    NB_REQUIRE_OK(nb_tensor_contiguous(xt, &xc));
    NB_REQUIRE_OK(nb_tensor_contiguous(dyt, &dyc));
    nb_tensor *y1 = mk(dev, 4, S4, NULL), *y2 = mk(dev, 4, S4, NULL), *dx1 = mk(dev, 4, S4, NULL);
    nb_tensor *dx2 = mk(dev, 4, S4, NULL), *dc1 = mk(dev, 2, S2, NULL), *dc2 = mk(dev, 2, S2, NULL);
    NB_EXPECT_OK(nb_nbops_add_channel(o, xt, tc, y1));
    NB_EXPECT_OK(nb_nbops_add_channel(o, xc, tc, y2));
    get(y1, a), get(y2, b);
    nb_test_expect_close("strided y", a, b, NUMEL, 0.0);
    NB_EXPECT_OK(nb_nbops_add_channel_bwd(o, xt, tc, dyt, dx1, dc1));
    NB_EXPECT_OK(nb_nbops_add_channel_bwd(o, xc, tc, dyc, dx2, dc2));
    get(dx1, a), get(dx2, b), get(dc1, da), get(dc2, db);
    nb_test_expect_close("strided dx", a, b, NUMEL, 0.0);
    nb_test_expect_close("strided dc", da, db, N * C, 1e-6);
    nb_tensor *all[] = {xs, xt, xc, tc, dys, dyt, dyc, y1, y2, dx1, dx2, dc1, dc2};
    for (int i = 0; i < 13; i++) nb_tensor_free(all[i]);
    free(x), free(c), free(dy), free(a), free(b);
    nb_nbops_destroy(o);
    nb_device_close(dev);
}

static void test_mul_cpu(void) {
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    nb_nbops *o;
    NB_REQUIRE_OK(nb_nbops_create(dev, &o));
    float *a = rnd(NUMEL, 4, 2.0f), *b = rnd(NUMEL, 5, 2.0f), *dy = rnd(NUMEL, 6, 1.0f);
    float *ref = malloc(NUMEL * 4), *got = malloc(NUMEL * 4);
    nb_tensor *ta = mk(dev, 4, S4, a), *tb = mk(dev, 4, S4, b), *ty = mk(dev, 4, S4, NULL);
    nb_tensor *tdy = mk(dev, 4, S4, dy), *tda = mk(dev, 4, S4, NULL), *tdb = mk(dev, 4, S4, NULL);
    NB_EXPECT_OK(nb_nbops_mul(o, ta, tb, ty));
    NB_EXPECT_OK(nb_nbops_mul_bwd(o, ta, tb, tdy, tda, tdb));
    for (int64_t i = 0; i < NUMEL; i++) ref[i] = a[i] * b[i];
    get(ty, got);
    nb_test_expect_close("mul y", got, ref, NUMEL, 0.0);
    for (int64_t i = 0; i < NUMEL; i++) ref[i] = dy[i] * b[i];
    get(tda, got);
    nb_test_expect_close("mul da", got, ref, NUMEL, 0.0);
    for (int64_t i = 0; i < NUMEL; i++) ref[i] = dy[i] * a[i];
    get(tdb, got);
    nb_test_expect_close("mul db", got, ref, NUMEL, 0.0);
    /* only da wanted, then only db */
    NB_EXPECT_OK(nb_tensor_fill_bytes(tda, 0));
    NB_EXPECT_OK(nb_nbops_mul_bwd(o, ta, tb, tdy, tda, NULL));
    for (int64_t i = 0; i < NUMEL; i++) ref[i] = dy[i] * b[i];
    get(tda, got);
    nb_test_expect_close("mul da alone", got, ref, NUMEL, 0.0);
    for (int64_t i = 0; i < NUMEL; i++) ref[i] = dy[i] * a[i];
    NB_EXPECT_OK(nb_tensor_fill_bytes(tdb, 0));
    NB_EXPECT_OK(nb_nbops_mul_bwd(o, ta, tb, tdy, NULL, tdb));
    get(tdb, got);
    nb_test_expect_close("mul db alone", got, ref, NUMEL, 0.0);
    free(a), free(b), free(dy), free(ref), free(got);
    nb_tensor_free(ta), nb_tensor_free(tb), nb_tensor_free(ty), nb_tensor_free(tdy), nb_tensor_free(tda);
    nb_tensor_free(tdb);
    nb_nbops_destroy(o);
    nb_device_close(dev);
}

/* The stored backward forms (*_bwd_to) equal the accumulating ones run on zeroed gradients, bit
 * for bit, whatever the gradient arrays held before (NaN bytes: never read), with every
 * combination of wanted gradients; on dev (the CPU here, CUDA too where present). */
static void stored_bwd(nb_device *dev) {
    nb_nbops *o;
    NB_REQUIRE_OK(nb_nbops_create(dev, &o));
    float *a = rnd(NUMEL, 14, 2.0f), *b = rnd(NUMEL, 15, 2.0f), *dy = rnd(NUMEL, 16, 1.0f), dl = 0.75f;
    float *ref = malloc(NUMEL * 4), *got = malloc(NUMEL * 4);
    int64_t one = 1;
    nb_tensor *ta = mk(dev, 4, S4, a), *tb = mk(dev, 4, S4, b), *tdy = mk(dev, 4, S4, dy), *tdl;
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, &one, &dl, &tdl));
    nb_tensor *acc[2] = {mk(dev, 4, S4, NULL), mk(dev, 4, S4, NULL)}, *sto[2] = {mk(dev, 4, S4, NULL), mk(dev, 4, S4, NULL)};
    for (int op = 0; op < 5; op++) { /* silu, cast, add, mul, mse */
        for (int want = 1; want < (op < 2 ? 2 : 4); want++) {
            for (int k = 0; k < 2; k++) {
                NB_REQUIRE_OK(nb_tensor_fill_bytes(acc[k], 0));
                NB_REQUIRE_OK(nb_tensor_fill_bytes(sto[k], 0xff)); /* NaN: a read would show */
            }
            nb_tensor *ga = want & 1 ? acc[0] : NULL, *gb = want & 2 ? acc[1] : NULL;
            nb_tensor *sa = want & 1 ? sto[0] : NULL, *sb = want & 2 ? sto[1] : NULL;
            switch (op) {
            case 0: NB_EXPECT_OK(nb_nbops_silu_bwd(o, ta, tdy, ga));
                NB_EXPECT_OK(nb_nbops_silu_bwd_to(o, ta, tdy, sa));
                break;
            case 1: NB_EXPECT_OK(nb_nbops_cast_bwd(o, ta, tdy, ga));
                NB_EXPECT_OK(nb_nbops_cast_bwd_to(o, ta, tdy, sa));
                break;
            case 2: NB_EXPECT_OK(nb_nbops_add_bwd(o, ta, tb, tdy, ga, gb));
                NB_EXPECT_OK(nb_nbops_add_bwd_to(o, ta, tb, tdy, sa, sb));
                break;
            case 3: NB_EXPECT_OK(nb_nbops_mul_bwd(o, ta, tb, tdy, ga, gb));
                NB_EXPECT_OK(nb_nbops_mul_bwd_to(o, ta, tb, tdy, sa, sb));
                break;
            default: NB_EXPECT_OK(nb_nbops_mse_bwd(o, ta, tb, tdl, ga, gb));
                NB_EXPECT_OK(nb_nbops_mse_bwd_to(o, ta, tb, tdl, sa, sb));
                break;
            }
            for (int k = 0; k < 2; k++) {
                if (!(want >> k & 1)) continue;
                char what[64];
                snprintf(what, sizeof what, "op %d stored gradient %d of mask %d", op, k, want);
                get(acc[k], ref), get(sto[k], got);
                nb_test_expect_close(what, got, ref, NUMEL, 0.0);
            }
        }
    }
    /* bad arguments are checked as for the accumulating forms */
    NB_EXPECT_ERR(nb_nbops_add_bwd_to(o, ta, tdl, tdy, sto[0], NULL), NB_ERR_SHAPE, "nb_nbops_add_bwd_to");
    NB_EXPECT_ERR(nb_nbops_mse_bwd_to(o, ta, tb, tb, sto[0], NULL), NB_ERR_SHAPE, "one value");
    free(a), free(b), free(dy), free(ref), free(got);
    nb_tensor *all[] = {ta, tb, tdy, tdl, acc[0], acc[1], sto[0], sto[1]};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) nb_tensor_free(all[i]);
    nb_nbops_destroy(o);
}

static void test_stored_bwd_cpu(void) {
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    stored_bwd(dev);
    nb_device_close(dev);
}

static void test_stored_bwd_cuda(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cuda", &dev));
    stored_bwd(dev);
    nb_device_close(dev);
}

/* f32 -> bf16 (round to nearest even, bit for bit), bf16 -> f32 (exact), backward dx += dy. */
static void test_cast_cpu(void) {
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    nb_nbops *o;
    NB_REQUIRE_OK(nb_nbops_create(dev, &o));
    enum { M = 1000 };
    int64_t n = M;
    float *x = rnd(M, 7, 100.0f), back[M], dx[M];
    x[0] = 1.00390625f; /* a tie: 1 + 2^-8 rounds to even (1.0) */
    x[1] = 1.01171875f; /* 1 + 3·2^-8: a tie rounding up */
    uint16_t b[M];
    nb_tensor *tx = mk(dev, 1, &n, x), *tb, *tf = mk(dev, 1, &n, NULL), *tdx = mk(dev, 1, &n, NULL);
    NB_REQUIRE_OK(nb_tensor_empty(dev, NB_BF16, 1, &n, &tb));
    NB_EXPECT_OK(nb_nbops_cast(o, tx, tb));
    NB_EXPECT_OK(nb_tensor_to_host(tb, b, sizeof b));
    int bad = 0;
    for (int i = 0; i < M; i++) bad += b[i] != nb_f32_to_bf16(x[i]);
    NB_EXPECT(bad == 0);
    NB_EXPECT_OK(nb_nbops_cast(o, tb, tf));
    get(tf, back);
    for (int i = 0; i < M; i++) bad += back[i] != nb_bf16_to_f32(b[i]);
    NB_EXPECT(bad == 0);
    NB_EXPECT_OK(nb_nbops_cast_bwd(o, tx, tb, tdx)); /* dy bf16 -> dx f32 */
    NB_EXPECT_OK(nb_nbops_cast_bwd(o, tx, tx, tdx)); /* + dy f32 */
    get(tdx, dx);
    for (int i = 0; i < M; i++) bad += dx[i] != nb_bf16_to_f32(b[i]) + x[i];
    NB_EXPECT(bad == 0);
    NB_EXPECT_ERR(nb_nbops_cast_bwd(o, tx, tx, tb), NB_ERR_UNSUPPORTED, "bf16");
    free(x);
    nb_tensor_free(tx), nb_tensor_free(tb), nb_tensor_free(tf), nb_tensor_free(tdx);
    nb_nbops_destroy(o);
    nb_device_close(dev);
}

/* The hand-written CPU Adam/AdamW loop that nb_adam_step ran before it moved to the .nb op (the
 * same float arithmetic, in the same order): nb_nbops_adamw must match it bit for bit. */
static void adam_ref_f32(float *p, float *g, float *m, float *v, int n, const nb_adam_config *c, int t) {
    double bc1 = 1.0 - pow((double)c->beta1, (double)t), bc2 = 1.0 - pow((double)c->beta2, (double)t);
    float lr_bc1 = (float)((double)c->lr / bc1), inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    float l2 = c->decoupled ? 0.0f : c->weight_decay, lr_wd = c->decoupled ? c->lr * c->weight_decay : 0.0f;
    for (int i = 0; i < n; i++) {
        float pi = p[i], gi = g[i] + l2 * pi;
        float mi = c->beta1 * m[i] + (1.0f - c->beta1) * gi;
        float vi = c->beta2 * v[i] + (1.0f - c->beta2) * gi * gi;
        m[i] = mi, v[i] = vi;
        pi -= lr_wd * pi;
        pi -= lr_bc1 * mi / (sqrtf(vi) * inv_sqrt_bc2 + c->eps);
        p[i] = pi, g[i] = 0.0f;
    }
}

/* nb_nbops_adamw against that loop and against nb_adam_step (which runs it on the CPU, through
 * two segments here): T steps, Adam (L2) and AdamW. */
static void run_adam(int decoupled) {
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    nb_nbops *o;
    NB_REQUIRE_OK(nb_nbops_create(dev, &o));
    enum { P = 3000, P1 = 1234, T = 4 };
    int64_t n = P, n1 = P1, n2 = P - P1;
    nb_adam_config c = nb_adam_config_default();
    c.lr = 0.02f, c.beta2 = 0.99f, c.weight_decay = 0.05f, c.decoupled = decoupled;
    nb_adam *opt;
    NB_REQUIRE_OK(nb_adam_create(dev, P, &c, &opt));
    static float ref[P], rm[P], rv[P], got[P], gz[P], via[P];
    float *p0 = rnd(P, 8, 1.0f);
    memcpy(ref, p0, sizeof ref), memset(rm, 0, sizeof rm), memset(rv, 0, sizeof rv);
    nb_tensor *p2 = mk(dev, 1, &n, p0), *g2 = mk(dev, 1, &n, NULL), *m = mk(dev, 1, &n, NULL);
    nb_tensor *v = mk(dev, 1, &n, NULL), *pa = mk(dev, 1, &n1, p0), *pb = mk(dev, 1, &n2, p0 + P1);
    nb_tensor *ga = mk(dev, 1, &n1, NULL), *gb = mk(dev, 1, &n2, NULL);
    for (int t = 1; t <= T; t++) {
        float *g = rnd(P, 100 + t, 0.3f);
        NB_REQUIRE_OK(nb_tensor_from_host_into(g2, g, P * 4));
        NB_REQUIRE_OK(nb_tensor_from_host_into(ga, g, P1 * 4));
        NB_REQUIRE_OK(nb_tensor_from_host_into(gb, g + P1, (P - P1) * 4));
        NB_EXPECT_OK(nb_nbops_adamw(o, &c, t, p2, g2, m, v, 1));
        NB_EXPECT_OK(nb_adam_step_multi(opt, 2, (nb_tensor *[]){pa, pb}, (nb_tensor *[]){ga, gb}, 1));
        adam_ref_f32(ref, g, rm, rv, P, &c, t);
        free(g);
    }
    get(p2, got), get(g2, gz), get(pa, via), get(pb, via + P1);
    nb_test_expect_close("adam params", got, ref, P, 0.0);
    nb_test_expect_close("nb_adam_step params", via, ref, P, 0.0);
    get(m, got);
    nb_test_expect_close("adam m", got, rm, P, 0.0);
    /* one more step of nb_adam_step over one segment (a new layout of m and v's views) */
    float *g = rnd(P, 200, 0.3f);
    nb_tensor *pc = mk(dev, 1, &n, via), *gc = mk(dev, 1, &n, g);
    NB_EXPECT_OK(nb_adam_step(opt, pc, gc, 1));
    adam_ref_f32(ref, g, rm, rv, P, &c, T + 1);
    get(pc, via);
    nb_test_expect_close("nb_adam_step, new segments", via, ref, P, 0.0);
    nb_tensor_free(pc), nb_tensor_free(gc), free(g);
    int nz = 0;
    for (int i = 0; i < P; i++) nz += gz[i] != 0.0f;
    NB_EXPECT(nz == 0);
    free(p0);
    nb_tensor *all[] = {p2, g2, m, v, pa, pb, ga, gb};
    for (int i = 0; i < 8; i++) nb_tensor_free(all[i]);
    nb_adam_destroy(opt);
    nb_nbops_destroy(o);
    nb_device_close(dev);
}

static void test_adam_cpu(void) { run_adam(0); }
static void test_adamw_cpu(void) { run_adam(1); }

/* Every op on dev vs the same op on the CPU: outputs[k] of each run, to f32 rounding (the order
 * of summation of the reductions differs). */
static void run_all(nb_device *dev, float *out[8]) {
    nb_nbops *o;
    NB_REQUIRE_OK(nb_nbops_create(dev, &o));
    float *x = rnd(NUMEL, 11, 3.0f), *b = rnd(NUMEL, 12, 1.0f), *c = rnd(N * C, 13, 1.0f);
    nb_tensor *tx = mk(dev, 4, S4, x), *tb = mk(dev, 4, S4, b), *tc = mk(dev, 2, S2, c);
    nb_tensor *ty = mk(dev, 4, S4, NULL), *tdx = mk(dev, 4, S4, NULL), *tdb = mk(dev, 4, S4, NULL);
    nb_tensor *tdc = mk(dev, 2, S2, NULL), *loss = mk(dev, 1, (int64_t[]){1}, NULL), *tbf;
    nb_tensor *m = mk(dev, 4, S4, NULL), *v = mk(dev, 4, S4, NULL);
    NB_REQUIRE_OK(nb_tensor_empty(dev, NB_BF16, 4, S4, &tbf));
    for (int k = 0; k < 8; k++) out[k] = malloc(NUMEL * 4);
    NB_EXPECT_OK(nb_nbops_silu(o, tx, ty));
    NB_EXPECT_OK(nb_nbops_silu_bwd(o, tx, tb, tdx));
    get(ty, out[0]), get(tdx, out[1]);
    NB_EXPECT_OK(nb_nbops_mul(o, tx, tb, ty));
    NB_EXPECT_OK(nb_nbops_mul_bwd(o, tx, tb, tb, tdx, tdb));
    get(ty, out[2]), get(tdb, out[3]);
    NB_EXPECT_OK(nb_nbops_add_channel(o, tx, tc, ty));
    NB_EXPECT_OK(nb_nbops_add_channel_bwd(o, tx, tc, tb, tdx, tdc));
    get(ty, out[4]), get(tdc, out[5]);
    NB_EXPECT_OK(nb_nbops_mse(o, tx, tb, loss));
    get(loss, out[6]);
    NB_EXPECT_OK(nb_nbops_cast(o, tx, tbf));
    NB_EXPECT_OK(nb_nbops_cast(o, tbf, ty));
    get(ty, out[6] + 1);
    nb_adam_config cfg = nb_adam_config_default();
    cfg.decoupled = 1, cfg.weight_decay = 0.01f;
    NB_EXPECT_OK(nb_nbops_adamw(o, &cfg, 1, tx, tb, m, v, 0));
    get(tx, out[7]);
    free(x), free(b), free(c);
    nb_tensor_free(tx), nb_tensor_free(tb), nb_tensor_free(tc), nb_tensor_free(ty), nb_tensor_free(tdx);
    nb_tensor_free(tdb), nb_tensor_free(tdc), nb_tensor_free(loss), nb_tensor_free(tbf), nb_tensor_free(m);
    nb_tensor_free(v);
    nb_nbops_destroy(o);
}

static void test_cuda_vs_cpu(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *cpu, *gpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    NB_REQUIRE_OK(nb_device_open("cuda", &gpu));
    float *a[8], *b[8];
    run_all(cpu, a);
    run_all(gpu, b);
    const char *names[8] = {"silu", "silu bwd", "mul", "mul bwd", "add_channel", "add_channel bwd",
                            "mse, cast", "adamw"};
    int64_t counts[8] = {NUMEL, NUMEL, NUMEL, NUMEL, NUMEL, N * C, 1 + NUMEL, NUMEL};
    for (int k = 0; k < 8; k++) {
        nb_test_expect_close(names[k], b[k], a[k], counts[k], k == 5 || k == 6 ? 1e-5 : 1e-6);
        free(a[k]), free(b[k]);
    }
    nb_device_close(gpu);
    nb_device_close(cpu);
}

/* The CUDA call kernels of nn_ops compile with NVRTC (no GPU needed): each function bound as
 * nb_ops.c binds it (flat f32 arrays; add_channel's [N*C, H*W] with a [N*C, 1] operand; a bf16
 * result; bwds calls with element and broadcast gradients), the signature taken after binding on
 * the CPU and emitted for CUDA. */
static int g_nvrtc_n;

/* want: a string the PTX must contain (the vector accesses of a contig4 kernel), or NULL */
static void nvrtc_check_ptx(nb_call *c, const char *what, const char *want) {
    g_nvrtc_n += nb_test_nvrtc_call_ptx(c, what, want);
}

static void nvrtc_check(nb_call *c, const char *what) { nvrtc_check_ptx(c, what, NULL); }

static void test_nvrtc(void) {
    if (nb_nvrtc_version() == 0) NB_SKIP("NVRTC is not available");
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    nb_module *m;
    NB_REQUIRE_OK(nb_module_load_source(dev, "nn_ops_host.nb", "import nn_ops;\n", NULL, &m));
    int64_t n = 64, s2[2] = {8, 16}, c2[2] = {8, 1}, one = 1;
    nb_tensor *a = mk(dev, 1, &n, NULL), *b = mk(dev, 1, &n, NULL), *y = mk(dev, 1, &n, NULL);
    nb_tensor *x2 = mk(dev, 2, s2, NULL), *ch = mk(dev, 2, c2, NULL), *l = mk(dev, 1, &one, NULL), *yb;
    NB_REQUIRE_OK(nb_tensor_empty(dev, NB_BF16, 1, &n, &yb));
    nb_func *f;
    nb_call *c;
    const char *unary[] = {"nn_silu", "nn_cast"};
    for (int k = 0; k < 2; k++) { /* forward (cast: into bf16) and the owned backward */
        char bw[32];
        NB_REQUIRE_OK(nb_module_func(m, unary[k], &f));
        NB_REQUIRE_OK(nb_call_begin(f, &c));
        nb_call_arg(c, 0, a), nb_call_result(c, k ? yb : y);
        nvrtc_check(c, unary[k]);
        snprintf(bw, sizeof bw, "%s_bwd", unary[k]);
        NB_REQUIRE_OK(nb_module_func(m, bw, &f));
        NB_REQUIRE_OK(nb_call_begin(f, &c));
        nb_call_arg(c, 0, a), nb_call_arg(c, 1, k ? yb : b), nb_call_arg(c, 2, y);
        nvrtc_check(c, bw);
    }
    const char *binary[] = {"nn_add", "nn_mul"};
    for (int k = 0; k < 2; k++) {
        char bw[32];
        NB_REQUIRE_OK(nb_module_func(m, binary[k], &f));
        NB_REQUIRE_OK(nb_call_begin(f, &c));
        nb_call_arg(c, 0, a), nb_call_arg(c, 1, b), nb_call_result(c, y);
        nvrtc_check(c, binary[k]);
        snprintf(bw, sizeof bw, "%s_bwd", binary[k]);
        NB_REQUIRE_OK(nb_module_func(m, bw, &f));
        NB_REQUIRE_OK(nb_call_begin(f, &c));
        for (int i = 0; i < 5; i++) nb_call_arg(c, i, i < 3 ? a : y);
        nvrtc_check(c, bw);
        snprintf(bw, sizeof bw, "%s_bwd_a", binary[k]);
        NB_REQUIRE_OK(nb_module_func(m, bw, &f));
        NB_REQUIRE_OK(nb_call_begin(f, &c));
        for (int i = 0; i < 4; i++) nb_call_arg(c, i, i < 3 ? a : y);
        nvrtc_check(c, bw);
    }
    /* add_channel: forward with a broadcast operand; dx owned; dc through bwds (broadcast grad) */
    NB_REQUIRE_OK(nb_module_func(m, "nn_add", &f));
    NB_REQUIRE_OK(nb_call_begin(f, &c));
    nb_call_arg(c, 0, x2), nb_call_arg(c, 1, ch), nb_call_result(c, x2);
    nvrtc_check(c, "add_channel");
    NB_REQUIRE_OK(nb_module_func(m, "nn_add_bwd_a", &f));
    NB_REQUIRE_OK(nb_call_begin(f, &c));
    nb_call_arg(c, 0, x2), nb_call_arg(c, 1, ch), nb_call_arg(c, 2, x2), nb_call_arg(c, 3, x2);
    nvrtc_check(c, "add_channel dx");
    NB_REQUIRE_OK(nb_module_func(m, "nn_add", &f));
    NB_REQUIRE_OK(nb_call_begin(f, &c));
    nb_call_set_mode(c, NB_MODE_BWD);
    nb_call_arg(c, 0, x2), nb_call_arg(c, 1, ch), nb_call_grad(c, 1, ch), nb_call_dout(c, x2);
    nvrtc_check(c, "add_channel dc");
    NB_REQUIRE_OK(nb_call_begin(f, &c)); /* what nb_ops.c runs on CUDA: dx (owned) and dc in one call */
    nb_call_set_mode(c, NB_MODE_BWD);
    nb_call_arg(c, 0, x2), nb_call_arg(c, 1, ch), nb_call_grad(c, 0, x2), nb_call_grad(c, 1, ch), nb_call_dout(c, x2);
    nvrtc_check(c, "add_channel dx, dc");
    /* mse: forward = the broadcast gradient of w; backward owned, and bwds for one gradient */
    NB_REQUIRE_OK(nb_module_func(m, "nn_mse_term", &f));
    NB_REQUIRE_OK(nb_call_begin(f, &c));
    nb_call_set_mode(c, NB_MODE_BWD);
    nb_call_arg(c, 0, a), nb_call_arg(c, 1, b), nb_call_arg_double(c, 2, 1.0), nb_call_grad(c, 2, l);
    float inv_n = 1.0f / 64;
    nb_call_arg_value_named(c, "_dout", NB_F32, 0, NULL, &inv_n); /* (a uniform, as nb_ops.c binds it) */
    nvrtc_check(c, "mse");
    NB_REQUIRE_OK(nb_call_begin(f, &c));
    nb_call_set_mode(c, NB_MODE_BWD);
    nb_call_arg(c, 0, a), nb_call_arg(c, 1, b), nb_call_arg_double(c, 2, 0.5), nb_call_grad(c, 0, y);
    nb_call_dout(c, l);
    nvrtc_check(c, "mse dp");
    NB_REQUIRE_OK(nb_module_func(m, "nn_mse_bwd", &f));
    NB_REQUIRE_OK(nb_call_begin(f, &c));
    nb_call_arg(c, 0, a), nb_call_arg(c, 1, b), nb_call_arg_double(c, 2, 0.5), nb_call_arg(c, 3, l);
    nb_call_arg(c, 4, y), nb_call_arg(c, 5, b);
    nvrtc_check(c, "mse_bwd");
    /* the CPU row kernels of add_channel (bound here as nb_ops.c binds them) */
    int64_t rows = 8;
    nb_tensor *c1 = mk(dev, 1, &rows, NULL);
    nb_generator g;
    nb_generator_init(&g, NB_GEN_CALL_ID);
    NB_REQUIRE_OK(nb_module_func(m, "nn_add_channel_rows", &f));
    NB_REQUIRE_OK(nb_call_begin(f, &c));
    nb_call_arg(c, 0, x2), nb_call_arg(c, 1, c1), nb_call_arg(c, 2, x2), nb_call_arg_generator(c, 3, &g);
    nb_call_arg_int(c, 4, 16);
    nvrtc_check(c, "add_channel rows");
    NB_REQUIRE_OK(nb_module_func(m, "nn_add_channel_bwd_rows", &f));
    NB_REQUIRE_OK(nb_call_begin(f, &c));
    nb_call_arg(c, 0, x2), nb_call_arg(c, 1, c1), nb_call_arg(c, 2, x2), nb_call_arg(c, 3, x2);
    nb_call_arg_generator(c, 4, &g), nb_call_arg_int(c, 5, 16), nb_call_arg(c, 6, c1);
    nvrtc_check(c, "add_channel bwd rows");
    nb_tensor_free(c1);
    NB_REQUIRE_OK(nb_module_func(m, "nn_adamw", &f));
    NB_REQUIRE_OK(nb_call_begin(f, &c));
    nb_tensor *v = mk(dev, 1, &n, NULL);
    for (int i = 0; i < 4; i++) nb_call_arg(c, i, i == 0 ? a : i == 1 ? b : i == 2 ? y : v);
    for (int i = 4; i < 11; i++) nb_call_arg_double(c, i, 0.5);
    nvrtc_check(c, "adamw");
    /* what nb_adam's prepared step runs (zero_grads: the gradient stored as 0 too) and the tape's
     * CUDA silu forward in each storage (tape_nbrows.c binds them as 1-D arrays like this) */
    NB_REQUIRE_OK(nb_module_func(m, "nn_adamw_zero", &f));
    NB_REQUIRE_OK(nb_call_begin(f, &c));
    for (int i = 0; i < 4; i++) nb_call_arg(c, i, i == 0 ? a : i == 1 ? b : i == 2 ? y : v);
    for (int i = 4; i < 11; i++) nb_call_arg_double(c, i, 0.5);
    nvrtc_check_ptx(c, "adamw_zero", "st.global.v4");
    nb_tensor *xb;
    NB_REQUIRE_OK(nb_tensor_empty(dev, NB_BF16, 1, &n, &xb));
    for (int k = 0; k < 3; k++) { /* f32 -> f32, bf16 -> bf16, bf16 -> f32 */
        NB_REQUIRE_OK(nb_module_func(m, "nn_silu", &f));
        NB_REQUIRE_OK(nb_call_begin(f, &c));
        nb_call_arg(c, 0, k ? xb : a), nb_call_result(c, k == 1 ? yb : y);
        nvrtc_check_ptx(c, k == 0 ? "silu f32" : k == 1 ? "silu bf16" : "silu bf16 -> f32",
                        k == 1 ? "st.global.v4.u16" : "st.global.v4");
    }
    nb_tensor_free(xb);
    const char *stored[] = {"nn_silu_bwd_to", "nn_add_bwd_to", "nn_mse_bwd_to"}; /* out gradients */
    for (int k = 0; k < 3; k++) {
        NB_REQUIRE_OK(nb_module_func(m, stored[k], &f));
        NB_REQUIRE_OK(nb_call_begin(f, &c));
        if (k == 0) nb_call_arg(c, 0, a), nb_call_arg(c, 1, b), nb_call_arg(c, 2, y);
        if (k == 1) nb_call_arg(c, 0, a), nb_call_arg(c, 1, b), nb_call_arg(c, 2, b), nb_call_arg(c, 3, y), nb_call_arg(c, 4, v);
        if (k == 2) {
            nb_call_arg(c, 0, a), nb_call_arg(c, 1, b), nb_call_arg_double(c, 2, 0.5), nb_call_arg(c, 3, l);
            nb_call_arg(c, 4, y), nb_call_arg(c, 5, v);
        }
        nvrtc_check(c, stored[k]);
    }
    NB_EXPECT(g_nvrtc_n == 27);
    nb_tensor_free(a), nb_tensor_free(b), nb_tensor_free(y), nb_tensor_free(x2), nb_tensor_free(ch);
    nb_tensor_free(l), nb_tensor_free(yb), nb_tensor_free(v);
    nb_module_free(m);
    nb_device_close(dev);
}

static void test_bad_args(void) {
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    nb_nbops *o;
    NB_EXPECT_ERR(nb_nbops_create(NULL, &o), NB_ERR_INVALID_ARG, "dev");
    NB_REQUIRE_OK(nb_nbops_create(dev, &o));
    int64_t s3[3] = {2, 3, 4}, s4b[4] = {N, C + 1, H, W}, one = 1, two = 2;
    nb_tensor *x = mk(dev, 4, S4, NULL), *y = mk(dev, 4, S4, NULL), *z = mk(dev, 3, s3, NULL);
    nb_tensor *c = mk(dev, 2, S2, NULL), *cbad = mk(dev, 4, s4b, NULL), *l = mk(dev, 1, &one, NULL);
    nb_tensor *l2 = mk(dev, 1, &two, NULL), *xi;
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_I32, 4, S4, &xi));
    NB_EXPECT_ERR(nb_nbops_silu(NULL, x, y), NB_ERR_INVALID_ARG, "context");
    NB_EXPECT_ERR(nb_nbops_silu(o, NULL, y), NB_ERR_INVALID_ARG, "x is NULL");
    NB_EXPECT_ERR(nb_nbops_silu(o, x, z), NB_ERR_SHAPE, "one shape");
    NB_EXPECT_ERR(nb_nbops_silu(o, xi, y), NB_ERR_DTYPE, "must be f32");
    NB_EXPECT_ERR(nb_nbops_add(o, x, z, y), NB_ERR_SHAPE, "b");
    NB_EXPECT_ERR(nb_nbops_mul_bwd(o, x, y, y, z, NULL), NB_ERR_SHAPE, "da");
    NB_EXPECT_ERR(nb_nbops_add_channel(o, x, cbad, y), NB_ERR_SHAPE, "[N,C]");
    NB_EXPECT_ERR(nb_nbops_add_channel(o, z, c, z), NB_ERR_SHAPE, "[N,C,H,W]");
    NB_EXPECT_ERR(nb_nbops_add_channel_bwd(o, x, c, y, x, x), NB_ERR_SHAPE, "dc");
    NB_EXPECT_ERR(nb_nbops_mse(o, x, y, l2), NB_ERR_SHAPE, "one value");
    NB_EXPECT_ERR(nb_nbops_mse(o, x, z, l), NB_ERR_SHAPE, "one shape");
    NB_EXPECT_ERR(nb_nbops_mse_bwd(o, x, y, l2, x, NULL), NB_ERR_SHAPE, "dloss");
    NB_EXPECT_ERR(nb_nbops_cast(o, xi, y), NB_ERR_DTYPE, "f32 or bf16");
    nb_adam_config cfg = nb_adam_config_default();
    NB_EXPECT_ERR(nb_nbops_adamw(o, &cfg, 0, x, y, x, y, 0), NB_ERR_INVALID_ARG, "step");
    NB_EXPECT_ERR(nb_nbops_adamw(o, NULL, 1, x, y, x, y, 0), NB_ERR_INVALID_ARG, "cfg");
    cfg.beta1 = 1.0f;
    NB_EXPECT_ERR(nb_nbops_adamw(o, &cfg, 1, x, y, x, y, 0), NB_ERR_INVALID_ARG, "betas");
    cfg = nb_adam_config_default();
    NB_EXPECT_ERR(nb_nbops_adamw(o, &cfg, 1, x, y, z, y, 0), NB_ERR_SHAPE, "m");
    if (nb_cuda_device_count() > 0) {
        nb_device *gpu;
        NB_REQUIRE_OK(nb_device_open("cuda", &gpu));
        nb_tensor *g = mk(gpu, 4, S4, NULL);
        NB_EXPECT_ERR(nb_nbops_silu(o, g, y), NB_ERR_DEVICE, "x is on cuda");
        nb_tensor_free(g);
        nb_device_close(gpu);
    }
    nb_tensor_free(x), nb_tensor_free(y), nb_tensor_free(z), nb_tensor_free(c), nb_tensor_free(cbad);
    nb_tensor_free(l), nb_tensor_free(l2), nb_tensor_free(xi);
    nb_nbops_destroy(o);
    nb_device_close(dev);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_silu_cpu, test_add_cpu, test_add_channel_cpu, test_add_channel_strided_cpu, test_mul_cpu, test_cast_cpu,
                 test_adam_cpu, test_adamw_cpu, test_cuda_vs_cpu, test_nvrtc, test_bad_args, test_stored_bwd_cpu,
                 test_stored_bwd_cuda);
}

/* Micro-benchmark of the tape's CUDA group norm and fused group norm + SiLU, forward + backward
 * (dx, dgamma, dbeta), at the UNet's shapes, and of the elementwise / layout rows (silu, add,
 * add_channel, concat, upsample2x, avgpool2x, transpose, slice_channels) at [32,128,32,32]; each
 * with f32 activations (an FP32 tape) and bf16 ones (a BF16 tape: bf16 activation storage, the
 * inputs cast to bf16 first). Times the op's CUDA row directly (the op is recorded once; forward
 * and backward are re-run on the same values) with events on the device stream.
 * The PyTorch reference of the same computations: bench/torch/bench_tape_ops.py.
 *
 * Then a whole tape step (reset, ops, backward) of a UNet-like chain of the tape's non-GEMM ops
 * at [32,128,32,32] (bench/torch/bench_tape_ops.py has the same chain in PyTorch):
 *   h = gn_silu(x); h = add_channel(h, emb); h = gn_silu(h); y = add(h, x); z = concat(y, x);
 *   p = avgpool2x(z); u = upsample2x(p); loss = mse(u, target)
 * x and target are copied (device to device) into the step's arena, as a data loader's batch
 * already on the GPU would be; on the bf16 tape x is a bf16 activation (a conv output), the
 * target stays f32.
 *
 *   bench_tape_ops [iters [small|full [gn-bf16]]]   one line per (shape, op): ms per fwd+bwd,
 *                                                   fwd, bwd, GB/s
 * ("small": tiny shapes, to check the program itself; "gn-bf16": the bf16 group norms only, for
 * timing them alone). */
#include <string.h>
#include <stdio.h>
#include <stdlib.h>

#include "nabla/device.h"
#include "nabla/dtype.h"
#include "nabla/nn_tape.h"
#include "graph/op_rows.h"

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        nb_status s_ = (x);                                                                        \
        if (s_) {                                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, nb_last_error());         \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static float frand(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* ms per call of fn over iters calls (after 5 warm-up calls) */
static double time_ms(nb_device *dev, int iters, nb_status (*fn)(nb_tape *, nb_top *), nb_tape *t,
                      nb_top *op) {
    nb_event *e0, *e1;
    CHECK(nb_event_create(dev, &e0));
    CHECK(nb_event_create(dev, &e1));
    for (int i = 0; i < 5; i++) CHECK(fn(t, op));
    CHECK(nb_event_record(e0, nb_device_stream(dev)));
    for (int i = 0; i < iters; i++) CHECK(fn(t, op));
    CHECK(nb_event_record(e1, nb_device_stream(dev)));
    CHECK(nb_event_synchronize(e1));
    float ms;
    CHECK(nb_event_elapsed_ms(e0, e1, &ms));
    nb_event_destroy(e0);
    nb_event_destroy(e1);
    return ms / iters;
}

/* Re-running the forward re-carves mean / rstd, the backward a fresh dx (as a first gradient
 * contribution: stored, not added, like PyTorch's autograd) and the dgamma / dbeta partials: both
 * rewind the arena (one block, pre-sized) to where setup / the forward left it. */
static const nb_top_row *g_row;
static size_t g_mark[2]; /* arena fill before the forward's allocations, and after dy */
static nb_tvar g_in[2];  /* the op's inputs whose gradients each backward recreates */
static int g_nin;
static nb_status fwd(nb_tape *t, nb_top *op) {
    t->blocks->used = g_mark[0];
    t->arena_used = (int64_t)g_mark[0];
    return g_row->cuda_forward(t, op);
}
static nb_status bwd(nb_tape *t, nb_top *op) {
    t->blocks->used = g_mark[1];
    t->arena_used = (int64_t)g_mark[1];
    for (int i = 0; i < g_nin; i++) t->vals[g_in[i]].grad = NULL;
    return g_row->cuda_backward(t, op);
}
static nb_status both(nb_tape *t, nb_top *op) {
    nb_status s = fwd(t, op);
    return s ? s : bwd(t, op);
}

static const char *prec_name(int bf16) { return bf16 ? "bf16" : "f32"; }

/* A tape for a micro-benchmark: FP32, or BF16 precision (bf16 activation storage). */
static nb_tape *bench_tape(nb_device *dev, int bf16) {
    nb_tape *t;
    CHECK(nb_tape_create_on(dev, &t));
    CHECK(nb_tape_set_precision(t, bf16 ? NB_TAPE_BF16 : NB_TAPE_FP32));
    if (bf16 && !nb_tape_bf16_storage(t)) {
        fprintf(stderr, "bf16 storage is off (not a CUDA tape?)\n");
        exit(1);
    }
    return t;
}

/* One arena block of `floats` floats for everything (after the parameters). */
static void bench_arena(nb_tape *t, int64_t floats) {
    CHECK(nb_tape_alloc_f32(t, floats, 0) ? NB_OK : NB_ERR_OUT_OF_MEMORY);
    CHECK(nb_tape_reset(t));
}

/* An activation input of the given shape with random values: f32 (nb_tape_input), or on a bf16
 * tape cast to bf16 (as a conv output would be). */
static nb_tvar bench_input(nb_tape *t, int nd, const int64_t *sh, uint64_t seed) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= sh[i];
    float *h = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) h[i] = frand(&seed);
    nb_tvar x, xb;
    CHECK(nb_tape_input(t, nd, sh, h, 1, &x));
    free(h);
    CHECK(nb_tape_cast(t, x, nb_tape_bf16_storage(t) ? NB_BF16 : NB_F32, &xb));
    return xb;
}

/* Fills the gradient buffer of y (its dtype) with random values. */
static void bench_dy(nb_tape *t, nb_tvar y, uint64_t seed) {
    float *dy;
    CHECK(nb_tape_grad_buf(t, y, &dy));
    int64_t n = t->vals[y].count;
    float *h = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) h[i] = frand(&seed);
    if (t->vals[y].dtype == NB_BF16) {
        uint16_t *b = malloc(2 * (size_t)n);
        for (int64_t i = 0; i < n; i++) b[i] = nb_f32_to_bf16(h[i]);
        CHECK(nb_memcpy_h2d(t->dev, dy, b, 2 * (size_t)n));
        free(b);
    } else {
        CHECK(nb_tape_upload(t, dy, h, n));
    }
    free(h);
}

/* Times the last recorded op's row: forward, backward (fresh input gradients), both. */
static void time_row(nb_device *dev, nb_tape *t, int iters, const nb_top_row *row,
                     double *tf, double *tb, double *ta) {
    nb_top *op = &t->ops[t->n_ops - 1];
    if (t->blocks->next) {
        fprintf(stderr, "arena has more than one block\n");
        exit(1);
    }
    g_row = row;
    g_nin = 0;
    for (int i = 0; i < op->nin; i++)
        if (op->in[i] >= 0 && !t->vals[op->in[i]].is_param) g_in[g_nin++] = op->in[i];
    /* group norm: the forward re-carves mean / rstd from where they are */
    g_mark[0] = op->saved[0] ? (size_t)((char *)op->saved[0] - t->blocks->base) : t->blocks->used;
    g_mark[1] = t->blocks->used;
    *tf = time_ms(dev, iters, fwd, t, op);
    *tb = time_ms(dev, iters, bwd, t, op);
    *ta = time_ms(dev, iters, both, t, op);
}

/* Group norm (+ SiLU) at the UNet's shapes, f32 and bf16 storage. */
static void bench_gn(nb_device *dev, int iters, const int64_t *sh, int silu, int bf16) {
    int64_t n = sh[0] * sh[1] * sh[2] * sh[3];
    nb_tape *t = bench_tape(dev, bf16);
    nb_tvar gm, bt, x, y;
    CHECK(nb_tape_param(t, "gamma", 1, &sh[1], &gm));
    CHECK(nb_tape_param(t, "beta", 1, &sh[1], &bt));
    CHECK(nb_tape_param_init_uniform(t, gm, 1.0f, 1));
    CHECK(nb_tape_param_init_uniform(t, bt, 1.0f, 2));
    bench_arena(t, 7 * n);
    x = bench_input(t, 4, sh, 12345);
    if (silu)
        CHECK(nb_tape_group_norm_silu(t, x, 32, gm, bt, 1e-5f, &y));
    else
        CHECK(nb_tape_group_norm(t, x, 32, gm, bt, 1e-5f, &y));
    bench_dy(t, y, 777);
    double tf, tb, ta;
    time_row(dev, t, iters, silu ? &nb_top_rows[NB_TOP_GROUP_NORM_SILU] : &nb_top_rows[NB_TOP_GROUP_NORM], &tf, &tb, &ta);
    /* minimum traffic: fwd reads x, writes y; bwd reads x, dy and writes dx (fresh) */
    double gb = 5.0 * (bf16 ? 2.0 : 4.0) * (double)n / 1e9;
    printf("%-16s %-4s [%lld,%lld,%lld,%lld] G=32  fwd+bwd %.4f ms  fwd %.4f ms  bwd %.4f ms  "
           "(%.0f GB/s at 5 passes)\n",
           silu ? "group_norm_silu" : "group_norm", prec_name(bf16), (long long)sh[0],
           (long long)sh[1], (long long)sh[2], (long long)sh[3], ta, tf, tb, gb / (ta / 1e3));
    nb_tape_free(t);
}

enum { R_SILU, R_ADD, R_ADDC, R_CONCAT, R_UP, R_POOL, R_TRANSPOSE, R_SLICE, R_COUNT };

/* One elementwise / layout row at a UNet-like size ([N,128,32,32] activations), f32 or bf16
 * storage; GB/s from the minimum traffic of fwd + bwd (elements read + written). */
static void bench_ew(nb_device *dev, int iters, int which, int bf16, int use_small) {
    int64_t N = use_small ? 2 : 32, C = use_small ? 8 : 128, H = use_small ? 8 : 32;
    int64_t sh[4] = {N, C, H, H}, n = N * C * H * H;
    nb_tape *t = bench_tape(dev, bf16);
    bench_arena(t, 14 * n);
    nb_tvar a, b, y = 0;
    const nb_top_row *row = NULL;
    const char *name = "";
    double elems = 0; /* fwd + bwd minimum traffic, in elements */
    switch (which) {
    case R_SILU:
        a = bench_input(t, 4, sh, 1);
        CHECK(nb_tape_silu(t, a, &y));
        row = &nb_top_rows[NB_TOP_SILU], name = "silu", elems = 2.0 * n + 3.0 * n;
        break;
    case R_ADD:
        a = bench_input(t, 4, sh, 1), b = bench_input(t, 4, sh, 2);
        CHECK(nb_tape_add(t, a, b, &y));
        row = &nb_top_rows[NB_TOP_ADD], name = "add", elems = 3.0 * n + 3.0 * n;
        break;
    case R_ADDC:
        a = bench_input(t, 4, sh, 1), b = bench_input(t, 2, (int64_t[]){N, C}, 2);
        CHECK(nb_tape_add_channel(t, a, b, &y));
        row = &nb_top_rows[NB_TOP_ADD_CHANNEL], name = "add_channel", elems = 2.0 * n + 2.0 * n;
        break;
    case R_CONCAT:
        a = bench_input(t, 4, sh, 1), b = bench_input(t, 4, sh, 2);
        CHECK(nb_tape_concat(t, a, b, &y));
        row = &nb_top_rows[NB_TOP_CONCAT], name = "concat", elems = 4.0 * n + 4.0 * n;
        break;
    case R_UP: {
        int64_t s2[4] = {N, C, H / 2, H / 2};
        a = bench_input(t, 4, s2, 1);
        CHECK(nb_tape_upsample2x(t, a, &y));
        row = &nb_top_rows[NB_TOP_UPSAMPLE2X], name = "upsample2x", elems = 1.25 * n + 1.25 * n;
        break;
    }
    case R_POOL:
        a = bench_input(t, 4, sh, 1);
        CHECK(nb_tape_avgpool2x(t, a, &y));
        row = &nb_top_rows[NB_TOP_AVGPOOL2X], name = "avgpool2x", elems = 1.25 * n + 1.25 * n;
        break;
    case R_TRANSPOSE: /* attention's [B, C, HW] -> [B, HW, C] */
        a = bench_input(t, 3, (int64_t[]){N, C, H * H}, 1);
        CHECK(nb_tape_transpose(t, a, &y));
        row = &nb_top_rows[NB_TOP_TRANSPOSE], name = "transpose", elems = 2.0 * n + 2.0 * n;
        break;
    case R_SLICE: { /* half the channels of a [N, 2C, H, W] (backward: zero fill + add) */
        int64_t s2[4] = {N, 2 * C, H, H};
        a = bench_input(t, 4, s2, 1);
        CHECK(nb_tape_slice_channels(t, a, 0, C, &y));
        row = &nb_top_rows[NB_TOP_SLICE_CHANNELS], name = "slice_channels", elems = 2.0 * n + 4.0 * n;
        break;
    }
    }
    bench_dy(t, y, 3);
    double tf, tb, ta;
    time_row(dev, t, iters, row, &tf, &tb, &ta);
    double gb = elems * (bf16 ? 2.0 : 4.0) / 1e9;
    printf("%-16s %-4s [%lld,%lld,%lld,%lld]  fwd+bwd %.4f ms  fwd %.4f ms  bwd %.4f ms  (%.0f GB/s)\n",
           name, prec_name(bf16), (long long)N, (long long)C, (long long)H, (long long)H, ta, tf,
           tb, gb / (ta / 1e3));
    nb_tape_free(t);
}

typedef struct chain {
    nb_tape *t;
    nb_tvar emb, g1, b1, g2, b2;
    const void *xd, *td; /* device copies of x (in the activations' dtype) and the target (f32) */
    int64_t sx[4], st[4];
    nb_dtype xdt;
} chain;

static nb_status chain_step(chain *c) {
    nb_tape *t = c->t;
    nb_tvar x, tg, h, h2, h3, y, z, p, u, loss;
    nb_status s;
    if ((s = nb_tape_reset(t)) || (s = nb_tape_new_value_dt(t, 4, c->sx, c->xdt, 1, &x)) ||
        (s = nb_tape_new_value(t, 4, c->st, 0, &tg)))
        return s;
    int64_t nx = c->sx[0] * c->sx[1] * c->sx[2] * c->sx[3], nt = 2 * nx;
    if ((s = nb_memcpy_d2d(t->dev, t->vals[x].data, c->xd, (size_t)nx * nb_tape_dt_size(c->xdt))) ||
        (s = nb_memcpy_d2d(t->dev, t->vals[tg].data, c->td, (size_t)nt * 4)))
        return s;
    if ((s = nb_tape_group_norm_silu(t, x, 32, c->g1, c->b1, 1e-5f, &h)) ||
        (s = nb_tape_add_channel(t, h, c->emb, &h2)) ||
        (s = nb_tape_group_norm_silu(t, h2, 32, c->g2, c->b2, 1e-5f, &h3)) ||
        (s = nb_tape_add(t, h3, x, &y)) || (s = nb_tape_concat(t, y, x, &z)) ||
        (s = nb_tape_avgpool2x(t, z, &p)) || (s = nb_tape_upsample2x(t, p, &u)))
        return s;
    if ((s = nb_tape_mse(t, u, tg, &loss))) return s; /* u, target: [N,2C,H,W] */
    return nb_tape_backward(t, loss);
}

static void bench_chain(nb_device *dev, int iters, int use_small, int bf16) {
    chain c;
    memset(&c, 0, sizeof c);
    c.xdt = bf16 ? NB_BF16 : NB_F32;
    int64_t N = use_small ? 2 : 32, C = use_small ? 64 : 128, H = use_small ? 8 : 32;
    int64_t sx[4] = {N, C, H, H}, st[4] = {N, 2 * C, H, H};
    memcpy(c.sx, sx, sizeof sx);
    memcpy(c.st, st, sizeof st);
    int64_t nx = N * C * H * H, nt = 2 * nx;
    CHECK(nb_tape_create_on(dev, &c.t));
    CHECK(nb_tape_set_precision(c.t, bf16 ? NB_TAPE_BF16 : NB_TAPE_FP32));
    CHECK(nb_tape_param(c.t, "emb", 2, (int64_t[]){N, C}, &c.emb));
    CHECK(nb_tape_param(c.t, "g1", 1, &C, &c.g1));
    CHECK(nb_tape_param(c.t, "b1", 1, &C, &c.b1));
    CHECK(nb_tape_param(c.t, "g2", 1, &C, &c.g2));
    CHECK(nb_tape_param(c.t, "b2", 1, &C, &c.b2));
    CHECK(nb_tape_param_init_uniform(c.t, c.emb, 1.0f, 1));
    CHECK(nb_tape_param_init_uniform(c.t, c.g1, 1.0f, 2));
    CHECK(nb_tape_param_init_uniform(c.t, c.g2, 1.0f, 3));
    nb_buffer *bx, *bt;
    CHECK(nb_buffer_alloc(dev, (size_t)nx * 4, &bx));
    CHECK(nb_buffer_alloc(dev, (size_t)nt * 4, &bt));
    float *h = malloc(sizeof(float) * (size_t)nt);
    uint64_t r = 777;
    for (int64_t i = 0; i < nt; i++) h[i] = frand(&r);
    if (bf16) { /* x as a bf16 activation (a conv output), the target f32 (a data batch) */
        uint16_t *b = malloc(2 * (size_t)nx);
        for (int64_t i = 0; i < nx; i++) b[i] = nb_f32_to_bf16(h[i]);
        CHECK(nb_memcpy_h2d(dev, nb_buffer_ptr(bx), b, (size_t)nx * 2));
        free(b);
    } else {
        CHECK(nb_memcpy_h2d(dev, nb_buffer_ptr(bx), h, (size_t)nx * 4));
    }
    CHECK(nb_memcpy_h2d(dev, nb_buffer_ptr(bt), h, (size_t)nt * 4));
    free(h);
    c.xd = nb_buffer_ptr(bx);
    c.td = nb_buffer_ptr(bt);
    for (int i = 0; i < 3; i++) CHECK(chain_step(&c));
    nb_event *e0, *e1;
    CHECK(nb_event_create(dev, &e0));
    CHECK(nb_event_create(dev, &e1));
    CHECK(nb_device_synchronize(dev));
    CHECK(nb_event_record(e0, nb_device_stream(dev)));
    for (int i = 0; i < iters; i++) CHECK(chain_step(&c));
    CHECK(nb_event_record(e1, nb_device_stream(dev)));
    CHECK(nb_event_synchronize(e1));
    float ms;
    CHECK(nb_event_elapsed_ms(e0, e1, &ms));
    nb_tape_stats stt;
    CHECK(nb_tape_get_stats(c.t, &stt));
    int casts = 0;
    for (int32_t i = 0; i < c.t->n_ops; i++) casts += c.t->ops[i].kind == NB_TOP_CAST;
    printf("chain step %-4s [%lld,%lld,%lld,%lld] (gn_silu, add_channel, gn_silu, add, concat, "
           "avgpool, upsample2x, mse; fwd+bwd): %.4f ms per step, %d ops (%d casts)\n",
           prec_name(bf16), (long long)N, (long long)C, (long long)H, (long long)H, ms / iters,
           (int)stt.n_ops, casts);
    nb_event_destroy(e0);
    nb_event_destroy(e1);
    nb_buffer_release(bx);
    nb_buffer_release(bt);
    nb_tape_free(c.t);
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 50;
    nb_device *dev;
    CHECK(nb_device_open("cuda", &dev));
    printf("device: %s\n", nb_device_get_info(dev)->name);
    const int64_t shapes[][4] = {{32, 128, 32, 32}, {32, 64, 64, 64}, {32, 256, 16, 16}, {32, 256, 8, 8}};
    const int64_t small[][4] = {{2, 64, 8, 8}};
    int use_small = argc > 2 && !strcmp(argv[2], "small");
    int gn_bf16_only = argc > 3 && !strcmp(argv[3], "gn-bf16"); /* the bf16 group norms alone */
    size_t nshapes = use_small ? 1 : sizeof shapes / sizeof shapes[0];
    for (size_t k = 0; k < nshapes; k++)
        for (int silu = 0; silu < 2; silu++)
            for (int bf16 = gn_bf16_only; bf16 < 2; bf16++)
                bench_gn(dev, iters, use_small ? small[k] : shapes[k], silu, bf16);
    if (gn_bf16_only) {
        nb_device_close(dev);
        return 0;
    }
    for (int r = 0; r < R_COUNT; r++)
        for (int bf16 = 0; bf16 < 2; bf16++) bench_ew(dev, iters, r, bf16, use_small);
    bench_chain(dev, iters, use_small, 0);
    bench_chain(dev, iters, use_small, 1);
    nb_device_close(dev);
    return 0;
}

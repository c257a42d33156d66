/* Micro-benchmark of the tape's CUDA group norm and fused group norm + SiLU, forward + backward
 * (dx, dgamma, dbeta), at the UNet's shapes. Times the op's CUDA row directly (the op is recorded
 * once; forward and backward are re-run on the same values) with events on the device stream.
 * The PyTorch eager reference of the same computation: bench/torch/bench_tape_ops.py.
 *
 * Then a whole tape step (reset, ops, backward) of a UNet-like chain of the tape's non-GEMM ops
 * at [32,128,32,32] (bench/torch/bench_tape_ops.py has the same chain in PyTorch):
 *   h = gn_silu(x); h = add_channel(h, emb); h = gn_silu(h); y = add(h, x); z = concat(y, x);
 *   p = avgpool2x(z); u = upsample2x(p); loss = mse(u, target)
 * x and target are copied (device to device) into the step's arena, as a data loader's batch
 * already on the GPU would be.
 *
 *   tapecuda_bench [iters [small]]   one line per (shape, op): ms per fwd+bwd, fwd, bwd, GB/s
 * ("small": tiny shapes, to check the program itself). */
#include <string.h>
#include <stdio.h>
#include <stdlib.h>

#include "nabla/device.h"
#include "nabla/nn_tape.h"
#include "nn/tape_internal.h"

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
static const nb_top_cuda_impl *g_row;
static size_t g_mark[2]; /* arena fill before the forward's mean / rstd, and after dy */
static nb_tvar g_x;
static nb_status fwd(nb_tape *t, nb_top *op) {
    t->blocks->used = g_mark[0];
    t->arena_used = (int64_t)g_mark[0];
    return g_row->forward(t, op);
}
static nb_status bwd(nb_tape *t, nb_top *op) {
    t->blocks->used = g_mark[1];
    t->arena_used = (int64_t)g_mark[1];
    t->vals[g_x].grad = NULL;
    return g_row->backward(t, op);
}
static nb_status both(nb_tape *t, nb_top *op) {
    nb_status s = fwd(t, op);
    return s ? s : bwd(t, op);
}

typedef struct chain {
    nb_tape *t;
    nb_tvar emb, g1, b1, g2, b2;
    const float *xd, *td; /* device copies of x and the target */
    int64_t sx[4], st[4];
} chain;

static nb_status chain_step(chain *c) {
    nb_tape *t = c->t;
    nb_tvar x, tg, h, h2, h3, y, z, p, u, loss;
    nb_status s;
    if ((s = nb_tape_reset(t)) || (s = nb_tape_new_value(t, 4, c->sx, 1, &x)) ||
        (s = nb_tape_new_value(t, 4, c->st, 0, &tg)))
        return s;
    int64_t nx = c->sx[0] * c->sx[1] * c->sx[2] * c->sx[3], nt = 2 * nx;
    if ((s = nb_memcpy_d2d(t->dev, t->vals[x].data, c->xd, (size_t)nx * 4)) ||
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

static void bench_chain(nb_device *dev, int iters, int use_small) {
    chain c;
    memset(&c, 0, sizeof c);
    int64_t N = use_small ? 2 : 32, C = use_small ? 64 : 128, H = use_small ? 8 : 32;
    int64_t sx[4] = {N, C, H, H}, st[4] = {N, 2 * C, H, H};
    memcpy(c.sx, sx, sizeof sx);
    memcpy(c.st, st, sizeof st);
    int64_t nx = N * C * H * H, nt = 2 * nx;
    CHECK(nb_tape_create_on(dev, &c.t));
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
    CHECK(nb_memcpy_h2d(dev, nb_buffer_ptr(bx), h, (size_t)nx * 4));
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
    printf("chain step [%lld,%lld,%lld,%lld] (gn_silu, add_channel, gn_silu, add, concat, avgpool, "
           "upsample2x, mse; fwd+bwd): %.4f ms per step, %d ops\n",
           (long long)N, (long long)C, (long long)H, (long long)H, ms / iters, (int)stt.n_ops);
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
    size_t nshapes = use_small ? 1 : sizeof shapes / sizeof shapes[0];
    for (size_t k = 0; k < nshapes; k++) {
        const int64_t *sh = use_small ? small[k] : shapes[k];
        int64_t n = sh[0] * sh[1] * sh[2] * sh[3];
        for (int silu = 0; silu < 2; silu++) {
            nb_tape *t;
            CHECK(nb_tape_create_on(dev, &t));
            nb_tvar gm, bt, x, y;
            CHECK(nb_tape_param(t, "gamma", 1, &sh[1], &gm));
            CHECK(nb_tape_param(t, "beta", 1, &sh[1], &bt));
            CHECK(nb_tape_param_init_uniform(t, gm, 1.0f, 1));
            CHECK(nb_tape_param_init_uniform(t, bt, 1.0f, 2));
            float *h = malloc(sizeof(float) * (size_t)n);
            uint64_t st = 12345;
            for (int64_t i = 0; i < n; i++) h[i] = frand(&st);
            /* one arena block large enough for everything below */
            CHECK(nb_tape_alloc_f32(t, 6 * n, 0) ? NB_OK : NB_ERR_OUT_OF_MEMORY);
            CHECK(nb_tape_reset(t));
            CHECK(nb_tape_input(t, 4, sh, h, 1, &x));
            if (silu)
                CHECK(nb_tape_group_norm_silu(t, x, 32, gm, bt, 1e-5f, &y));
            else
                CHECK(nb_tape_group_norm(t, x, 32, gm, bt, 1e-5f, &y));
            float *dy;
            CHECK(nb_tape_grad_buf(t, y, &dy));
            for (int64_t i = 0; i < n; i++) h[i] = frand(&st);
            CHECK(nb_tape_upload(t, dy, h, n));
            nb_top *op = &t->ops[t->n_ops - 1];
            g_x = x;
            /* arena (one block): x | y | mean | rstd | dy; rewind the forward to mean, the
             * backward to after dy */
            if (t->blocks->next) {
                fprintf(stderr, "arena has more than one block\n");
                return 1;
            }
            g_mark[0] = (size_t)((char *)op->saved[0] - t->blocks->base);
            g_mark[1] = t->blocks->used;
            g_row = silu ? &nb_top_group_norm_silu_cuda : &nb_top_group_norm_cuda;
            double tf = time_ms(dev, iters, fwd, t, op);
            double tb = time_ms(dev, iters, bwd, t, op);
            double ta = time_ms(dev, iters, both, t, op);
            /* minimum traffic: fwd reads x, writes y; bwd reads x, dy, dx and writes dx */
            double gb = 6.0 * 4.0 * (double)n / 1e9;
            printf("%-16s [%lld,%lld,%lld,%lld] G=32  fwd+bwd %.4f ms  fwd %.4f ms  bwd %.4f ms  "
                   "(%.0f GB/s at 6 passes)\n",
                   silu ? "group_norm_silu" : "group_norm", (long long)sh[0], (long long)sh[1],
                   (long long)sh[2], (long long)sh[3], ta, tf, tb, gb / (ta / 1e3));
            free(h);
            nb_tape_free(t);
        }
    }
    bench_chain(dev, iters, use_small);
    nb_device_close(dev);
    return 0;
}

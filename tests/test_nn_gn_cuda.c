/* Group norm (+ SiLU) on CUDA, src/nn/norm/tape_cuda_norm.c: the split kernels (the default for
 * bf16 storage where S % 8 == 0: per-(n, c) statistics kernels, then per-slice kernels) against
 * the per-group kernels (nb_gn_cuda_set_path) at UNet shapes and edge shapes (more than 32
 * channels per group, planes longer than the statistics kernel's registers, several slices per
 * group), bf16 storage, dx stored (a first gradient) and added (an existing one): y, dx, dgamma,
 * dbeta within rounding of each other. The CPU references of both paths are in
 * test_nn_tape_cuda.c / test_nn_tape_bf16_cuda.c. Skips without a GPU.
 *
 * NB_GN_BENCH=1: also a micro-benchmark of the forward and the backward
 * (dx, dgamma, dbeta) of group norm + SiLU at every group-norm shape of the reference UNet step
 * (batch 32, 64 channels, mult 1,2,3,4, GroupNorm(32)), f32 and bf16 storage, per-group and
 * the automatic choice (split for bf16): the median of 20 calls each
 * timed with device events after an L2 flush ("cold"), and 20 calls back to back ("warm"), next
 * to the byte floor (forward: read x, write y; backward: read x and dy, write dx) at 3 TB/s;
 * then the per-step sums weighted by each shape's count. */
#include <math.h>

#include "nabla/device.h"
#include "nabla/dtype.h"
#include "nabla/nn_tape.h"
#include "nb_test.h"
#include "graph/op_rows.h"

static nb_device *g_dev;

static uint64_t rng_state = 0x5851F42D4C957F2Dull;
static float frand(void) { /* uniform [-1, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static int open_cuda(void) {
    if (g_dev) return 1;
    if (nb_device_open("cuda", &g_dev) != NB_OK) {
        g_dev = NULL;
        return 0;
    }
    return 1;
}

/* One recorded group-norm op whose forward and backward rows are re-run on the same values:
 * each forward rewinds the arena to where its allocations started, each backward to after dy. */
typedef struct gcase {
    nb_tape *t;
    nb_tvar x, gm, bt, y;
    const nb_top_row *row;
    size_t mark0, mark1;
    int64_t n, C;
    int bf16;
} gcase;

static int gc_make(gcase *c, const int64_t sh[4], int groups, int silu, int bf16, float shift) {
    memset(c, 0, sizeof *c);
    c->n = sh[0] * sh[1] * sh[2] * sh[3];
    c->C = sh[1];
    c->bf16 = bf16;
    if (nb_tape_create_on(g_dev, &c->t) || nb_tape_set_precision(c->t, bf16 ? NB_TAPE_BF16 : NB_TAPE_FP32) ||
        nb_tape_param(c->t, "gamma", 1, &sh[1], &c->gm) || nb_tape_param(c->t, "beta", 1, &sh[1], &c->bt) ||
        nb_tape_param_init_uniform(c->t, c->gm, 1.0f, 1) || nb_tape_param_init_uniform(c->t, c->bt, 1.0f, 2))
        return 0;
    if (bf16 && !nb_tape_bf16_storage(c->t)) return 0;
    /* one arena block for everything */
    if (!nb_tape_alloc_f32(c->t, 8 * c->n + 4096, 0) || nb_tape_reset(c->t)) return 0;
    float *h = malloc(sizeof(float) * (size_t)c->n);
    for (int64_t i = 0; i < c->n; i++) h[i] = shift + 2.0f * frand();
    nb_tvar x0;
    nb_status s = nb_tape_input(c->t, 4, sh, h, 1, &x0);
    if (!s) s = nb_tape_cast(c->t, x0, bf16 ? NB_BF16 : NB_F32, &c->x);
    /* recorded on the split path where it can run, whose forward allocates the most (the arena
     * marks below: each re-run forward's allocations stay below dy) */
    nb_gn_cuda_set_path(2);
    if (!s)
        s = silu ? nb_tape_group_norm_silu(c->t, c->x, groups, c->gm, c->bt, 1e-5f, &c->y)
                 : nb_tape_group_norm(c->t, c->x, groups, c->gm, c->bt, 1e-5f, &c->y);
    nb_gn_cuda_set_path(0);
    float *dy = NULL;
    if (!s) s = nb_tape_grad_buf(c->t, c->y, &dy);
    if (!s) {
        for (int64_t i = 0; i < c->n; i++) h[i] = frand();
        if (bf16) {
            uint16_t *b = malloc(2 * (size_t)c->n);
            for (int64_t i = 0; i < c->n; i++) b[i] = nb_f32_to_bf16(h[i]);
            s = nb_memcpy_h2d(g_dev, dy, b, 2 * (size_t)c->n);
            free(b);
        } else {
            s = nb_tape_upload(c->t, dy, h, c->n);
        }
    }
    free(h);
    if (s || c->t->blocks->next) return 0;
    nb_top *op = &c->t->ops[c->t->n_ops - 1];
    c->row = silu ? &nb_top_rows[NB_TOP_GROUP_NORM_SILU] : &nb_top_rows[NB_TOP_GROUP_NORM];
    c->mark0 = (size_t)((char *)op->saved[0] - c->t->blocks->base);
    c->mark1 = c->t->blocks->used;
    return 1;
}

static nb_status gc_fwd(gcase *c) {
    c->t->blocks->used = c->mark0;
    c->t->arena_used = (int64_t)c->mark0;
    return c->row->cuda_forward(c->t, &c->t->ops[c->t->n_ops - 1]);
}

/* acc: dx added to an existing gradient of known values (else stored); dgamma / dbeta are
 * zeroed first (parameter gradients always add) */
static nb_status gc_bwd(gcase *c, int acc) {
    c->t->blocks->used = c->mark1;
    c->t->arena_used = (int64_t)c->mark1;
    c->t->vals[c->x].grad = NULL;
    nb_status s = acc < 0 ? NB_OK : nb_tape_zero_grad(c->t);
    if (!s && acc > 0) { /* an existing gradient: 0.25 everywhere */
        float *g;
        s = nb_tape_grad_buf(c->t, c->x, &g);
        if (!s) {
            if (c->bf16) {
                uint16_t *b = malloc(2 * (size_t)c->n);
                for (int64_t i = 0; i < c->n; i++) b[i] = nb_f32_to_bf16(0.25f);
                s = nb_memcpy_h2d(g_dev, g, b, 2 * (size_t)c->n);
                free(b);
            } else {
                float *h = malloc(sizeof(float) * (size_t)c->n);
                for (int64_t i = 0; i < c->n; i++) h[i] = 0.25f;
                s = nb_tape_upload(c->t, g, h, c->n);
                free(h);
            }
        }
    }
    return s ? s : c->row->cuda_backward(c->t, &c->t->ops[c->t->n_ops - 1]);
}

/* y, dx, dgamma, dbeta of one run into out (n, n, C, C floats) */
static nb_status gc_read(gcase *c, float *out) {
    nb_status s = nb_tape_read(c->t, c->y, out, c->n);
    if (!s) s = nb_tape_read_grad(c->t, c->x, out + c->n, c->n);
    if (!s) s = nb_tape_read_grad(c->t, c->gm, out + 2 * c->n, c->C);
    if (!s) s = nb_tape_read_grad(c->t, c->bt, out + 2 * c->n + c->C, c->C);
    return s;
}

/* max |a - b| / max |b| over a segment */
static double rel_err(const float *a, const float *b, int64_t n) {
    double m = 0, d = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = fabs((double)b[i]), e = fabs((double)a[i] - (double)b[i]);
        if (v > m) m = v;
        if (e > d || e != e) d = e;
    }
    return d / (m > 0 ? m : 1);
}

static void test_split_vs_old(void) {
    if (!open_cuda()) NB_SKIP("no CUDA device");
    static const struct {
        int64_t sh[4];
        int groups;
        float shift;
    } cases[] = {
        {{2, 64, 64, 64}, 32, 0.0f},  /* 256 threads per plane, 2 slices per group */
        {{2, 192, 64, 64}, 32, 0.5f}, /* 6 channels per group, 3 slices */
        {{3, 128, 32, 32}, 32, 0.0f}, /* 64 threads per plane */
        {{2, 512, 8, 8}, 32, 0.0f},   /* 8 threads per plane, 32 planes per block */
        {{2, 320, 16, 16}, 32, 3.0f}, /* a mean far from 0 */
        {{3, 40, 12, 12}, 1, 0.0f},   /* 40 channels per group (> a warp) */
        {{1, 6, 96, 96}, 1, 0.0f},    /* planes beyond the statistics kernel's registers */
        {{5, 12, 4, 4}, 3, 0.0f},     /* planes count not a multiple of the planes per block */
    };
    const char *small = getenv("NB_GN_TEST_SMALL"); /* for a CPU emulation: the small cases only */
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int silu = 0; silu < 2; silu++)
            for (int bf16 = 1; bf16 < 2; bf16++) /* (f32 storage has the per-group kernels only) */
                for (int acc = 0; acc < 2; acc++) {
                    gcase c;
                    if (small && cases[k].sh[0] * cases[k].sh[1] * cases[k].sh[2] * cases[k].sh[3] > 100000)
                        continue;
                    rng_state = 0x5851F42D4C957F2Dull + k;
                    if (!gc_make(&c, cases[k].sh, cases[k].groups, silu, bf16, cases[k].shift)) {
                        fprintf(stderr, "  setup failed: %s\n", nb_last_error());
                        NB_EXPECT(0);
                        if (c.t) nb_tape_free(c.t);
                        continue;
                    }
                    size_t sz = sizeof(float) * (size_t)(2 * c.n + 2 * c.C);
                    float *ref = malloc(sz), *got = malloc(sz);
                    nb_gn_cuda_set_path(1);
                    NB_EXPECT_OK(gc_fwd(&c));
                    NB_EXPECT_OK(gc_bwd(&c, acc));
                    NB_EXPECT_OK(gc_read(&c, ref));
                    static const char *const impls[2] = {"split", "auto"};
                    for (int im = 0; im < 2; im++) {
                        /* split wherever it can run (the backward of small groups too), then the
                         * automatic choice */
                        nb_gn_cuda_set_path(im == 0 ? 2 : 0);
                        NB_EXPECT_OK(gc_fwd(&c));
                        NB_EXPECT_OK(gc_bwd(&c, acc));
                        NB_EXPECT_OK(gc_read(&c, got));
                        /* f32: rounding of different summation orders; bf16: one bf16 ulp of y / dx
                         * (2^-8 of the value), relative to each tensor's max */
                        double tol = bf16 ? 1.2e-2 : 2e-5;
                        double ey = rel_err(got, ref, c.n), ex = rel_err(got + c.n, ref + c.n, c.n);
                        double eg = rel_err(got + 2 * c.n, ref + 2 * c.n, c.C);
                        double eb = rel_err(got + 2 * c.n + c.C, ref + 2 * c.n + c.C, c.C);
                        if (!(ey <= tol && ex <= tol && eg <= (bf16 ? 2e-3 : 2e-5) &&
                              eb <= (bf16 ? 2e-3 : 2e-5)))
                            fprintf(stderr,
                                    "  %s [%lld,%lld,%lld,%lld] G=%d silu=%d bf16=%d acc=%d: y %.3g dx %.3g "
                                    "dgamma %.3g dbeta %.3g\n",
                                    impls[im], (long long)cases[k].sh[0], (long long)cases[k].sh[1],
                                    (long long)cases[k].sh[2], (long long)cases[k].sh[3], cases[k].groups,
                                    silu, bf16, acc, ey, ex, eg, eb);
                        NB_EXPECT(ey <= tol);
                        NB_EXPECT(ex <= tol);
                        NB_EXPECT(eg <= (bf16 ? 2e-3 : 2e-5));
                        NB_EXPECT(eb <= (bf16 ? 2e-3 : 2e-5));
                    }
                    nb_gn_cuda_set_path(0);
                    free(ref);
                    free(got);
                    nb_tape_free(c.t);
                }
}

/* ---- micro-benchmark (NB_GN_BENCH=1) -------------------------------------------------------- */

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* ms per call of fwd (which 0) or bwd (1): flush != NULL: the median of 20 calls, each between
 * two events after a 128 MB device memset (L2 cold; the host's launch latency is inside the
 * events: ~5 us per call, see the 8x8 rows); flush == NULL: 20 calls back to back between two
 * events, averaged (L2 warm, launch latency hidden where the GPU is the bottleneck) */
static double time_call(gcase *c, int which, void *flush, size_t flush_bytes) {
    nb_event *e0, *e1;
    if (nb_event_create(g_dev, &e0) || nb_event_create(g_dev, &e1)) return -1;
    nb_stream *st = nb_device_stream(g_dev);
    float ms[20], m = 0;
    for (int i = -3; i < (flush ? 20 : 1); i++) {
        if (flush && nb_memset(g_dev, flush, i & 1, flush_bytes)) return -1;
        if (nb_event_record(e0, st)) return -1;
        for (int k = 0; k < (flush || i < 0 ? 1 : 20); k++)
            if (which ? gc_bwd(c, -1) : gc_fwd(c)) return -1;
        if (nb_event_record(e1, st) || nb_event_synchronize(e1)) return -1;
        if (nb_event_elapsed_ms(e0, e1, &m)) return -1;
        if (i >= 0) ms[i] = m;
    }
    nb_event_destroy(e0);
    nb_event_destroy(e1);
    if (!flush) return ms[0] / 20;
    qsort(ms, 20, sizeof ms[0], cmp_f);
    return 0.5 * (ms[9] + ms[10]);
}

static void test_bench(void) {
    const char *b = getenv("NB_GN_BENCH");
    if (!b || !b[0] || !strcmp(b, "0")) return; /* not asked for: passes (NB_REQUIRE_CUDA runs) */
    if (!open_cuda()) NB_SKIP("no CUDA device");
    /* the reference UNet's group norms: (channels, side, count per step) */
    static const int sh[][3] = {
        {64, 64, 8},  {128, 64, 2}, {192, 64, 1}, {64, 32, 1},   {128, 32, 6}, {192, 32, 1},
        {256, 32, 1}, {320, 32, 1}, {128, 16, 1}, {192, 16, 11}, {320, 16, 1}, {384, 16, 1},
        {448, 16, 1}, {192, 8, 1},  {256, 8, 17}, {448, 8, 1},   {512, 8, 2},
    };
    size_t flush_bytes = (size_t)128 << 20;
    nb_buffer *fb = NULL;
    NB_REQUIRE_OK(nb_buffer_alloc(g_dev, flush_bytes, &fb));
    void *flush = nb_buffer_ptr(fb);
    enum { NI = 2 };
    /* nb_gn_cuda_set_path of each variant: the per-group kernels, the automatic choice */
    static const int impl[NI] = {1, 0};
    static const char *const name[NI] = {"per-group", "auto"};
    /* per-step sums [bf16][impl][fwd/bwd][cold/warm], floors [bf16][fwd/bwd] */
    double tot[2][NI][2][2] = {{{{0}}}}, floor_tot[2][2] = {{0}};
    printf("group norm + SiLU, N=32, G=32, us per call: cold = median of 20 single calls after an L2 "
           "flush (includes ~5 us of host launch latency), warm = 20 calls back to back; floor = bytes / "
           "3 TB/s (fwd: x + y, bwd: x + dy + dx)\n");
    printf("%-15s %-4s %3s %-3s %7s |", "shape", "stor", "cnt", "dir", "floor");
    for (int im = 0; im < NI; im++) printf(" %-10s cold/warm |", name[im]);
    printf("\n");
    for (size_t k = 0; k < sizeof sh / sizeof sh[0]; k++)
        for (int bf16 = 1; bf16 >= 0; bf16--) {
            int64_t shape[4] = {32, sh[k][0], sh[k][1], sh[k][1]};
            gcase c;
            if (!gc_make(&c, shape, 32, 1, bf16, 0.0f)) {
                fprintf(stderr, "  setup failed: %s\n", nb_last_error());
                NB_EXPECT(0);
                if (c.t) nb_tape_free(c.t);
                continue;
            }
            double es = bf16 ? 2.0 : 4.0;
            double fl[2] = {2 * es * (double)c.n / 3e12 * 1e6, 3 * es * (double)c.n / 3e12 * 1e6};
            double r[NI][2][2]; /* [impl][fwd/bwd][cold/warm], us */
            for (int im = 0; im < NI; im++) {
                nb_gn_cuda_set_path(impl[im]);
                NB_EXPECT_OK(gc_fwd(&c)); /* mean / rstd of this path for its backward */
                for (int w = 0; w < 2; w++)
                    for (int d = 0; d < 2; d++)
                        r[im][d][w] = 1e3 * time_call(&c, d, w ? NULL : flush, flush_bytes);
                for (int d = 0; d < 2; d++)
                    for (int w = 0; w < 2; w++) tot[bf16][im][d][w] += sh[k][2] * r[im][d][w];
            }
            for (int d = 0; d < 2; d++) {
                floor_tot[bf16][d] += sh[k][2] * fl[d];
                printf("[32,%3d,%2d,%2d]  %-4s %3d %-3s %7.1f |", sh[k][0], sh[k][1], sh[k][1],
                       bf16 ? "bf16" : "f32", sh[k][2], d ? "bwd" : "fwd", fl[d]);
                for (int im = 0; im < NI; im++) printf(" %9.1f %9.1f |", r[im][d][0], r[im][d][1]);
                printf("\n");
            }
            fflush(stdout);
            nb_tape_free(c.t);
        }
    nb_gn_cuda_set_path(0);
    printf("per step (counts above), ms:\n");
    for (int bf16 = 1; bf16 >= 0; bf16--)
        for (int d = 0; d < 2; d++) {
            printf("  %-4s %s floor %.3f |", bf16 ? "bf16" : "f32", d ? "bwd" : "fwd",
                   floor_tot[bf16][d] / 1e3);
            for (int im = 0; im < NI; im++)
                printf(" %s %.3f cold %.3f warm |", name[im], tot[bf16][im][d][0] / 1e3,
                       tot[bf16][im][d][1] / 1e3);
            printf("\n");
        }
    nb_buffer_release(fb);
}

static void test_close(void) {
    if (!g_dev) NB_SKIP("no CUDA device");
    nb_device_close(g_dev);
    g_dev = NULL;
}

int main(int argc, char **argv) { NB_TEST_MAIN(argc, argv, test_split_vs_old, test_bench, test_close); }

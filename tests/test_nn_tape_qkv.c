/* Fused legacy-layout QKV attention (nb_tape_qkv_attention; CPU row in src/nn/attention/tape_ops_attn.c,
 * CUDA row in src/nn/attention/tape_cuda_attn.c):
 *   - CPU: values and dqkv against the old composition reshape / slice_channels / transpose /
 *     nb_tape_attention / transpose / reshape (those ops are tested against PyTorch), heads
 *     1..4, d 8..64, L 4..256 incl. odd, 3-D and 4-D qkv, qkv used twice (accumulation);
 *   - CUDA tape vs CPU tape in FP32, TF32 and BF16 (bf16 storage: f32 and bf16 qkv), one and
 *     several 64-key tiles, d up to 128 (skips without a GPU);
 *   - bad input: heads <= 0, channels not a multiple of 3*heads, wrong rank, d over the CUDA
 *     limit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/device.h"
#include "nabla/nn_tape.h"
#include "nb_test.h"
#include "graph/op_rows.h" /* nb_tape_cast: a bf16 qkv like a bf16 conv output */

static void fill(float *x, int64_t n, uint32_t seed, float scale) {
    uint32_t s = seed * 2654435761u + 12345u;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ((float)(s >> 8) / 16777216.0f * 2.0f - 1.0f) * scale;
    }
}

/* max |a - b| / max(max |b|, floor) */
static double rel_err(const float *a, const float *b, int64_t n, double floor) {
    double e = 0.0, m = floor;
    for (int64_t i = 0; i < n; i++) {
        if (fabs(b[i]) > m) m = fabs(b[i]);
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= e)) e = d; /* NaN propagates */
    }
    return e / m;
}

typedef struct {
    int64_t N;
    int heads;
    int64_t d, H, W; /* W = 0: a 3-D qkv [N, 3*heads*d, H] */
    int twice;       /* out = attn(qkv) + attn(qkv): the second contribution accumulates */
} qcase;

static int64_t qc_L(const qcase *c) { return c->W ? c->H * c->W : c->H; }
static int64_t qc_nin(const qcase *c) { return c->N * 3 * c->heads * c->d * qc_L(c); }
static int64_t qc_nout(const qcase *c) { return c->N * c->heads * c->d * qc_L(c); }

/* out of the old composition (the UNet's attention block before the fused op) */
static nb_status old_composition(nb_tape *t, const qcase *c, nb_tvar qkv, nb_tvar *out) {
    int64_t n = c->N, heads = c->heads, d = c->d, L = qc_L(c);
    nb_tvar r, q[3], o;
    nb_status s;
    if ((s = nb_tape_reshape(t, qkv, 3, (int64_t[]){n * heads, 3 * d, L}, &r))) return s;
    for (int j = 0; j < 3; j++) {
        if ((s = nb_tape_slice_channels(t, r, j * d, d, &q[j]))) return s;
        if ((s = nb_tape_reshape(t, q[j], 4, (int64_t[]){n, heads, d, L}, &q[j]))) return s;
        if ((s = nb_tape_transpose(t, q[j], &q[j]))) return s;
    }
    if ((s = nb_tape_attention(t, q[0], q[1], q[2], &o))) return s;
    if ((s = nb_tape_transpose(t, o, &o))) return s;
    int64_t sh[4] = {n, heads * d, c->H, c->W};
    return nb_tape_reshape(t, o, c->W ? 4 : 3, sh, out);
}

/* Runs [cast to bf16 ->] attention (fused or old) [twice, summed] -> mse(out, tgt) -> backward
 * on a tape on dev (NULL: CPU); reads out and dqkv. */
static nb_status run(nb_device *dev, int prec, int fused, int cast_bf16, const qcase *c,
                     const float *x, const float *tgt, float *out, float *gx) {
    nb_tape *t = NULL;
    nb_status s = dev ? nb_tape_create_on(dev, &t) : nb_tape_create(&t);
    if (s) return s;
    int64_t L = qc_L(c), C = 3 * c->heads * c->d;
    int64_t sin[4] = {c->N, C, c->H, c->W}, sout[4] = {c->N, c->heads * c->d, c->H, c->W};
    int nd = c->W ? 4 : 3;
    (void)L;
    nb_tvar tx, xa, o, o2, tt, loss;
    if ((s = nb_tape_set_precision(t, (nb_tape_precision)prec))) goto done;
    if ((s = nb_tape_input(t, nd, sin, x, 1, &tx))) goto done;
    xa = tx;
    if (cast_bf16 && (s = nb_tape_cast(t, tx, NB_BF16, &xa))) goto done;
    if ((s = nb_tape_input(t, nd, sout, tgt, 0, &tt))) goto done;
    s = fused ? nb_tape_qkv_attention(t, xa, c->heads, &o) : old_composition(t, c, xa, &o);
    if (s) goto done;
    if (c->twice) {
        if ((s = fused ? nb_tape_qkv_attention(t, xa, c->heads, &o2) : old_composition(t, c, xa, &o2)))
            goto done;
        if ((s = nb_tape_add(t, o, o2, &o))) goto done;
    }
    if ((s = nb_tape_mse(t, o, tt, &loss))) goto done;
    if ((s = nb_tape_backward(t, loss))) goto done;
    if ((s = nb_tape_read(t, o, out, qc_nout(c)))) goto done;
    s = nb_tape_read_grad(t, tx, gx, qc_nin(c));
done:
    nb_tape_free(t);
    return s;
}

typedef struct {
    float *x, *tgt, *o0, *g0, *o1, *g1;
} qbufs;

static void qb_alloc(const qcase *c, qbufs *b) {
    int64_t ni = qc_nin(c), no = qc_nout(c);
    b->x = malloc((size_t)ni * 4), b->g0 = malloc((size_t)ni * 4), b->g1 = malloc((size_t)ni * 4);
    b->tgt = malloc((size_t)no * 4), b->o0 = malloc((size_t)no * 4), b->o1 = malloc((size_t)no * 4);
    fill(b->x, ni, (uint32_t)(c->d * 7 + qc_L(c)), 1.5f);
    fill(b->tgt, no, (uint32_t)(c->heads * 3 + 1), 1.0f);
}

static void qb_free(qbufs *b) {
    free(b->x), free(b->tgt), free(b->o0), free(b->g0), free(b->o1), free(b->g1);
}

static void print_case(const char *what, const qcase *c, double eo, double eg) {
    printf("  %s N=%lld heads=%d d=%lld L=%lld (%s)%s: rel err out %.1e dqkv %.1e\n", what,
           (long long)c->N, c->heads, (long long)c->d, (long long)qc_L(c), c->W ? "4-D" : "3-D",
           c->twice ? " twice" : "", eo, eg);
}

/* ---- CPU: the fused op against the old composition --------------------------------------- */

static void test_qkv_cpu_vs_composition(void) {
    const qcase cases[] = {
        {2, 1, 8, 4, 0, 0},     /* tiny, 3-D */
        {1, 2, 16, 37, 0, 0},   /* odd L */
        {2, 3, 32, 8, 8, 0},    /* the UNet's 8x8 maps */
        {1, 4, 64, 10, 10, 0},  /* d 64, L 100 */
        {1, 2, 8, 16, 16, 0},   /* L 256 */
        {1, 1, 24, 7, 0, 0},    /* d not a power of two, odd L */
        {2, 4, 8, 5, 3, 1},     /* L 15, qkv used twice */
        {1, 3, 12, 129, 0, 1},  /* odd L over two 64-tiles, twice */
        {2, 2, 8, 1, 0, 0},     /* L = 1 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const qcase *c = &cases[i];
        qbufs b;
        qb_alloc(c, &b);
        NB_REQUIRE_OK(run(NULL, NB_TAPE_FP32, 0, 0, c, b.x, b.tgt, b.o0, b.g0));
        NB_REQUIRE_OK(run(NULL, NB_TAPE_FP32, 1, 0, c, b.x, b.tgt, b.o1, b.g1));
        double eo = rel_err(b.o1, b.o0, qc_nout(c), 1e-3), eg = rel_err(b.g1, b.g0, qc_nin(c), 1e-6);
        print_case("cpu fused vs composition", c, eo, eg);
        NB_EXPECT(eo < 2e-6);
        NB_EXPECT(eg < 2e-5);
        qb_free(&b);
    }
}

/* The fused op's output layout and values on a hand-checkable case: one head, d = 1, L = 2,
 * q = k = 0 (uniform softmax): out = mean of v over positions. */
static void test_qkv_cpu_uniform(void) {
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    const float x[6] = {0, 0, 0, 0, 3, 5}; /* [1, 3, 2]: q = (0,0), k = (0,0), v = (3,5) */
    nb_tvar q, o;
    NB_EXPECT_OK(nb_tape_input(t, 3, (int64_t[]){1, 3, 2}, x, 1, &q));
    NB_EXPECT_OK(nb_tape_qkv_attention(t, q, 1, &o));
    int nd;
    int64_t sh[NB_TAPE_MAX_DIMS];
    NB_EXPECT_OK(nb_tape_shape(t, o, &nd, sh));
    NB_EXPECT(nd == 3 && sh[0] == 1 && sh[1] == 1 && sh[2] == 2);
    float h[2];
    NB_EXPECT_OK(nb_tape_read(t, o, h, 2));
    NB_EXPECT(fabsf(h[0] - 4.0f) < 1e-6f && fabsf(h[1] - 4.0f) < 1e-6f);
    nb_tape_free(t);
}

/* ---- bad input ---------------------------------------------------------------------------- */

static void test_qkv_bad_input(void) {
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    float *z = calloc(4096, sizeof(float));
    nb_tvar a3, a4, a2, a5, odd, o; /* (tapes hold at most 4 dims) */
    NB_EXPECT_OK(nb_tape_input(t, 3, (int64_t[]){2, 12, 4}, z, 1, &a3));
    NB_EXPECT_OK(nb_tape_input(t, 4, (int64_t[]){1, 12, 2, 2}, z, 1, &a4));
    NB_EXPECT_OK(nb_tape_input(t, 2, (int64_t[]){12, 4}, z, 1, &a2));
    NB_EXPECT_OK(nb_tape_input(t, 1, (int64_t[]){12}, z, 1, &a5)); /* rank 1 */
    NB_EXPECT_OK(nb_tape_input(t, 3, (int64_t[]){1, 10, 4}, z, 1, &odd));
    NB_EXPECT_ERR(nb_tape_qkv_attention(t, a3, 0, &o), NB_ERR_INVALID_ARG, "heads = 0");
    NB_EXPECT_ERR(nb_tape_qkv_attention(t, a3, -2, &o), NB_ERR_INVALID_ARG, "heads = -2");
    NB_EXPECT_ERR(nb_tape_qkv_attention(t, odd, 1, &o), NB_ERR_SHAPE, "not a positive multiple of 3*heads = 3");
    NB_EXPECT_ERR(nb_tape_qkv_attention(t, a3, 8, &o), NB_ERR_SHAPE, "3*heads = 24");
    NB_EXPECT_ERR(nb_tape_qkv_attention(t, a4, 3, &o), NB_ERR_SHAPE, "multiple of 3*heads = 9");
    NB_EXPECT_ERR(nb_tape_qkv_attention(t, a2, 1, &o), NB_ERR_SHAPE, "must be [N, 3*heads*d, H, W]");
    NB_EXPECT_ERR(nb_tape_qkv_attention(t, a5, 1, &o), NB_ERR_SHAPE, "must be [N, 3*heads*d, H, W]");
    NB_EXPECT_ERR(nb_tape_qkv_attention(t, 9999, 1, &o), NB_ERR_INVALID_ARG, "qkv");
    NB_EXPECT_ERR(nb_tape_qkv_attention(t, a3, 1, NULL), NB_ERR_INVALID_ARG, "NULL");
    NB_EXPECT_ERR(nb_tape_qkv_attention(NULL, a3, 1, &o), NB_ERR_INVALID_ARG, "NULL");
    /* the good ones work: 12 channels = 1 head of d 4, 2 heads of d 2, 4 heads of d 1 */
    NB_EXPECT_OK(nb_tape_qkv_attention(t, a3, 1, &o));
    NB_EXPECT_OK(nb_tape_qkv_attention(t, a3, 2, &o));
    NB_EXPECT_OK(nb_tape_qkv_attention(t, a4, 4, &o));
    free(z);
    nb_tape_free(t);
}

/* ---- CUDA tape against the CPU tape ------------------------------------------------------- */

static nb_device *open_gpu(void) {
    nb_device *d = NULL;
    if (nb_device_open("cuda", &d) != NB_OK) return NULL;
    return d;
}

static void cuda_case(nb_device *dev, const qcase *c) {
    qbufs b;
    qb_alloc(c, &b);
    NB_REQUIRE_OK(run(NULL, NB_TAPE_FP32, 1, 0, c, b.x, b.tgt, b.o0, b.g0));
    static const char *const pname[] = {"fp32", "tf32", "bf16"};
    /* relative to the largest reference magnitude; bf16 storage rounds qkv, out and the
     * gradients to 8 significant bits on top of the bf16 tensor-core operands */
    static const double tol_o[] = {2e-5, 5e-3, 3e-2}, tol_g[] = {5e-5, 1e-2, 8e-2};
    for (int p = 0; p < 3; p++) {
        for (int cast = 0; cast < (p == NB_TAPE_BF16 ? 2 : 1); cast++) {
            NB_EXPECT_OK(run(dev, p, 1, cast, c, b.x, b.tgt, b.o1, b.g1));
            double eo = rel_err(b.o1, b.o0, qc_nout(c), 1e-3),
                   eg = rel_err(b.g1, b.g0, qc_nin(c), 1e-6);
            char what[64];
            snprintf(what, sizeof what, "cuda %s%s vs cpu", pname[p], cast ? " (bf16 qkv)" : "");
            print_case(what, c, eo, eg);
            NB_EXPECT(eo < tol_o[p]);
            NB_EXPECT(eg < tol_g[p]);
        }
    }
    qb_free(&b);
}

static void test_qkv_cuda_vs_cpu(void) {
    nb_device *dev = open_gpu();
    if (!dev) NB_SKIP("no CUDA device");
    const qcase cases[] = {
        {2, 3, 32, 8, 8, 0},     /* 8x8 maps: one key tile (dq stored directly) */
        {2, 2, 32, 16, 16, 0},   /* 16x16: four key tiles (dq atomics / scratch) */
        {1, 2, 16, 37, 0, 0},    /* odd L: scalar loads */
        {1, 1, 8, 4, 0, 0},      /* tiny */
        {1, 4, 64, 10, 10, 0},   /* d 64 */
        {1, 1, 24, 130, 0, 0},   /* d padded to 32, odd tiles */
        {2, 2, 8, 1, 1, 0},      /* one position: both strides 1 */
        {1, 2, 128, 9, 9, 0},    /* d 128: SIMT in every precision */
        {2, 2, 32, 12, 12, 1},   /* used twice: the second contribution accumulates */
        {1, 2, 32, 6, 6, 1},     /* twice, one key tile */
        {1, 2, 32, 17, 17, 0},   /* L = 289 > 256: the tiled kernels in TF32 / BF16 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) cuda_case(dev, &cases[i]);
    nb_device_close(dev);
}

/* The UNet's shapes (N = 2; f32 and bf16 qkv, and a second contribution that accumulates), where
 * TF32 (forward, L > 64) and BF16 (bf16 qkv) run the whole-sequence kernels nb_attn_fwd_fa /
 * nb_attn_bwd_fa and the others the 64 x 64 tiled ones, against the CPU tape. */
static void test_qkv_cuda_fa_shapes(void) {
    nb_device *dev = open_gpu();
    if (!dev) NB_SKIP("no CUDA device");
    const qcase cases[] = {{2, 6, 32, 16, 16, 0}, {2, 8, 32, 8, 8, 0}, {1, 3, 32, 12, 12, 1},
                           {1, 2, 24, 11, 0, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) cuda_case(dev, &cases[i]);
    nb_device_close(dev);
}

/* On a CUDA tape the fused op's arena use is the output and the row log-sum-exp: no copies of
 * q, k, v (the composition made three, plus the transposed output). */
static void test_qkv_cuda_memory(void) {
    nb_device *dev = open_gpu();
    if (!dev) NB_SKIP("no CUDA device");
    const int64_t N = 2, heads = 2, d = 32, L = 256, n = N * 3 * heads * d * L;
    float *x = malloc((size_t)n * 4);
    fill(x, n, 3, 1.0f);
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create_on(dev, &t));
    nb_tvar q, o;
    NB_EXPECT_OK(nb_tape_input(t, 3, (int64_t[]){N, 3 * heads * d, L}, x, 1, &q));
    nb_tape_stats s0, s1;
    NB_EXPECT_OK(nb_tape_get_stats(t, &s0));
    NB_EXPECT_OK(nb_tape_qkv_attention(t, q, (int)heads, &o));
    NB_EXPECT_OK(nb_tape_get_stats(t, &s1));
    int64_t used = s1.arena_used - s0.arena_used, bound = n / 3 * 4 + N * heads * L * 4 + 256;
    printf("  qkv attention [2,192,256] on the arena: %lld bytes (output + lse: %lld)\n",
           (long long)used, (long long)bound);
    NB_EXPECT(used <= bound);
    free(x);
    nb_tape_free(t);
    nb_device_close(dev);
}

static void test_qkv_cuda_bad_head_dim(void) {
    nb_device *dev = open_gpu();
    if (!dev) NB_SKIP("no CUDA device");
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create_on(dev, &t));
    float *x = calloc(3 * 200 * 4, sizeof(float));
    nb_tvar a, o;
    NB_EXPECT_OK(nb_tape_input(t, 3, (int64_t[]){1, 600, 4}, x, 1, &a));
    NB_EXPECT_ERR(nb_tape_qkv_attention(t, a, 1, &o), NB_ERR_UNSUPPORTED, "limit of 128");
    NB_EXPECT_OK(nb_tape_qkv_attention(t, a, 2, &o)); /* d = 100 is fine */
    free(x);
    nb_tape_free(t);
    nb_device_close(dev);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_qkv_cpu_vs_composition, test_qkv_cpu_uniform,
                 test_qkv_bad_input, test_qkv_cuda_vs_cpu, test_qkv_cuda_fa_shapes,
                 test_qkv_cuda_memory,
                 test_qkv_cuda_bad_head_dim);
}

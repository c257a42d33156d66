/* Fused attention on CUDA (src/nn/attention/tape_cuda_attn.c): the kernels on raw device buffers against a
 * double-precision reference, and the CUDA tape against the CPU tape (forward and the three
 * gradients) for odd sequence lengths, head dims 16..128, every precision, inputs without
 * gradients, accumulation into shared gradient buffers, and the head-dim limit.
 * Skips without a GPU. NB_ATTN_BENCH=1 also times forward + backward at the reference UNet's
 * attention shapes (batch 32: [32,6,256,32] and [32,8,64,32]), and the UNet's attention block
 * core on the tape: the fused nb_tape_qkv_attention against the old layout-copy composition
 * (qkv [32,576,16,16] heads 6 and [32,768,8,8] heads 8) in FP32 / TF32 / BF16, and the kernels
 * alone on qkv-layout vs row-major views (f32 / bf16 storage). NB_ATTN_BENCH=qkv: only those. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/device.h"
#include "nabla/dtype.h"
#include "nabla/nn_tape.h"
#include "nb_test.h"
#include "device/cuda/cuda_api.h" /* nb_nvrtc_compile */
#include "nn/attention/attn_cuda.h"
#include "graph/op_rows.h" /* nb_tape_cast (the bench's bf16 qkv) */

#define NB_TRY_T(e)                                                                             \
    do {                                                                                        \
        nb_status s_ = (e);                                                                     \
        if (s_) return s_;                                                                      \
    } while (0)

static nb_device *open_gpu(void) {
    nb_device *d = NULL;
    if (nb_device_open("cuda", &d) != NB_OK) return NULL;
    return d;
}

static void fill(float *x, int64_t n, uint32_t seed, float scale) {
    uint32_t s = seed * 2654435761u + 12345u;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ((float)(s >> 8) / 16777216.0f * 2.0f - 1.0f) * scale;
    }
}

/* max |a - b| / max(max |b|, floor) */
static double rel_err(const float *a, const double *b, int64_t n, double floor) {
    double e = 0.0, m = floor;
    for (int64_t i = 0; i < n; i++) {
        if (fabs(b[i]) > m) m = fabs(b[i]);
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= e)) e = d; /* NaN propagates */
    }
    return e / m;
}

static double rel_errf(const float *a, const float *b, int64_t n, double floor) {
    double *bd = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) bd[i] = b[i];
    double e = rel_err(a, bd, n, floor);
    free(bd);
    return e;
}

/* Reference in double: o = softmax(q k^T / sqrt d) v; with dout, dq/dk/dv (+=). */
static void ref_attention(const float *q, const float *k, const float *v, const float *dout,
                          int64_t BH, int64_t Tq, int64_t Tk, int64_t d, double *o, double *lse2,
                          double *dq, double *dk, double *dv) {
    double sc = 1.0 / sqrt((double)d);
    double *P = malloc((size_t)(Tq * Tk) * sizeof(double));
    for (int64_t b = 0; b < BH; b++) {
        const float *qb = q + b * Tq * d, *kb = k + b * Tk * d, *vb = v + b * Tk * d;
        for (int64_t i = 0; i < Tq; i++) {
            double mx = -1e300, sum = 0.0;
            for (int64_t j = 0; j < Tk; j++) {
                double a = 0.0;
                for (int64_t e = 0; e < d; e++) a += (double)qb[i * d + e] * kb[j * d + e];
                P[i * Tk + j] = a * sc;
                if (a * sc > mx) mx = a * sc;
            }
            for (int64_t j = 0; j < Tk; j++) sum += (P[i * Tk + j] = exp(P[i * Tk + j] - mx));
            for (int64_t j = 0; j < Tk; j++) P[i * Tk + j] /= sum;
            if (lse2) lse2[b * Tq + i] = (mx + log(sum)) / log(2.0);
            for (int64_t e = 0; e < d; e++) {
                double a = 0.0;
                for (int64_t j = 0; j < Tk; j++) a += P[i * Tk + j] * vb[j * d + e];
                o[(b * Tq + i) * d + e] = a;
            }
        }
        if (!dout) continue;
        const float *gb = dout + b * Tq * d;
        for (int64_t i = 0; i < Tq; i++) {
            double D = 0.0;
            for (int64_t e = 0; e < d; e++) D += o[(b * Tq + i) * d + e] * gb[i * d + e];
            for (int64_t j = 0; j < Tk; j++) {
                double dp = 0.0;
                for (int64_t e = 0; e < d; e++) dp += (double)gb[i * d + e] * vb[j * d + e];
                double p = P[i * Tk + j], ds = p * (dp - D) * sc;
                for (int64_t e = 0; e < d; e++) {
                    if (dv) dv[(b * Tk + j) * d + e] += p * gb[i * d + e];
                    if (dq) dq[(b * Tq + i) * d + e] += ds * kb[j * d + e];
                    if (dk) dk[(b * Tk + j) * d + e] += ds * qb[i * d + e];
                }
            }
        }
    }
    free(P);
}

/* ---- kernels on raw device buffers ------------------------------------------------------ */

typedef struct {
    nb_buffer *b;
    float *p;
} dbuf;

static nb_status dalloc(nb_device *dev, int64_t n, const float *host, dbuf *out) {
    nb_status s = nb_buffer_alloc(dev, (size_t)n * sizeof(float), &out->b);
    if (s) return s;
    out->p = nb_buffer_ptr(out->b);
    return host ? nb_memcpy_h2d(dev, out->p, host, (size_t)n * sizeof(float)) : NB_OK;
}

/* One raw case: forward + backward with gradients pre-filled (accumulation checked); want_*:
 * which gradients are requested. */
static void raw_case(nb_device *dev, int prec, int64_t BH, int64_t Tq, int64_t Tk, int64_t d,
                     int want_q, int want_k, int want_v) {
    int64_t nq = BH * Tq * d, nk = BH * Tk * d;
    float *h = malloc((size_t)(4 * nq + 5 * nk + 2 * BH * Tq) * sizeof(float));
    float *q = h, *dout = q + nq, *o = dout + nq, *gq = o + nq, *k = gq + nq, *v = k + nk,
          *gk = v + nk, *gv = gk + nk, *g0 = gv + nk, *lse = g0 + nk;
    fill(q, nq, 1, 1.5f);
    fill(k, nk, 2, 1.5f);
    fill(v, nk, 3, 1.0f);
    fill(dout, nq, 4, 1.0f);
    fill(g0, nk, 5, 0.5f); /* initial gradient contents: accumulation */
    double *r = calloc((size_t)(2 * nq + 2 * nk + BH * Tq), sizeof(double));
    double *ro = r, *rdq = ro + nq, *rdk = rdq + nq, *rdv = rdk + nk, *rl = rdv + nk;
    for (int64_t i = 0; i < nq; i++) rdq[i] = g0[i % nk];
    for (int64_t i = 0; i < nk; i++) rdk[i] = rdv[i] = g0[i];
    ref_attention(q, k, v, dout, BH, Tq, Tk, d, ro, rl, rdq, rdk, rdv);
    for (int64_t i = 0; i < nq; i++) gq[i] = g0[i % nk];
    dbuf Q, K, V, O, G, L, DL, DQ, DK, DV;
    NB_REQUIRE_OK(dalloc(dev, nq, q, &Q));
    NB_REQUIRE_OK(dalloc(dev, nk, k, &K));
    NB_REQUIRE_OK(dalloc(dev, nk, v, &V));
    NB_REQUIRE_OK(dalloc(dev, nq, NULL, &O));
    NB_REQUIRE_OK(dalloc(dev, nq, dout, &G));
    NB_REQUIRE_OK(dalloc(dev, BH * Tq, NULL, &L));
    NB_REQUIRE_OK(dalloc(dev, BH * Tq, NULL, &DL));
    NB_REQUIRE_OK(dalloc(dev, nq, gq, &DQ));
    NB_REQUIRE_OK(dalloc(dev, nk, g0, &DK));
    NB_REQUIRE_OK(dalloc(dev, nk, g0, &DV));
    NB_EXPECT_OK(nb_attn_cuda_forward(dev, prec, Q.p, K.p, V.p, O.p, L.p, BH, Tq, Tk, d));
    NB_EXPECT_OK(nb_attn_cuda_backward(dev, prec, Q.p, K.p, V.p, O.p, G.p, L.p, DL.p, want_q ? DQ.p : NULL, want_k ? DK.p : NULL,
                                       want_v ? DV.p : NULL, BH, Tq, Tk, d));
    NB_EXPECT_OK(nb_memcpy_d2h(dev, o, O.p, (size_t)nq * 4));
    NB_EXPECT_OK(nb_memcpy_d2h(dev, lse, L.p, (size_t)(BH * Tq) * 4));
    NB_EXPECT_OK(nb_memcpy_d2h(dev, gq, DQ.p, (size_t)nq * 4));
    NB_EXPECT_OK(nb_memcpy_d2h(dev, gk, DK.p, (size_t)nk * 4));
    NB_EXPECT_OK(nb_memcpy_d2h(dev, gv, DV.p, (size_t)nk * 4));
    if (!want_q)
        for (int64_t i = 0; i < nq; i++) rdq[i] = g0[i % nk];
    if (!want_k)
        for (int64_t i = 0; i < nk; i++) rdk[i] = g0[i];
    if (!want_v)
        for (int64_t i = 0; i < nk; i++) rdv[i] = g0[i];
    double eo = rel_err(o, ro, nq, 1e-3), el = rel_err(lse, rl, BH * Tq, 1.0),
           eq = rel_err(gq, rdq, nq, 1e-3), ek = rel_err(gk, rdk, nk, 1e-3),
           ev = rel_err(gv, rdv, nk, 1e-3);
    static const char *const pname[] = {"fp32", "tf32", "bf16"};
    static const double tol_o[] = {2e-5, 5e-3, 3e-2}, tol_g[] = {5e-5, 1e-2, 6e-2};
    printf("  raw %s BH=%lld Tq=%lld Tk=%lld d=%lld grads %d%d%d: rel err o %.1e lse %.1e dq %.1e "
           "dk %.1e dv %.1e\n", pname[prec], (long long)BH, (long long)Tq, (long long)Tk,
           (long long)d, want_q, want_k, want_v, eo, el, eq, ek, ev);
    NB_EXPECT(eo < tol_o[prec] && el < tol_o[prec]);
    NB_EXPECT(eq < tol_g[prec] && ek < tol_g[prec] && ev < tol_g[prec]);
    dbuf all[] = {Q, K, V, O, G, L, DL, DQ, DK, DV};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) nb_buffer_release(all[i].b);
    free(r);
    free(h);
}

static void test_attn_raw_kernels(void) {
    nb_device *dev = open_gpu();
    if (!dev) NB_SKIP("no CUDA device");
    for (int p = 0; p < 3; p++) { /* fp32: SIMT; tf32 / bf16: tensor cores (SIMT at d > 64) */
        raw_case(dev, p, 2, 37, 37, 16, 1, 1, 1);
        raw_case(dev, p, 3, 64, 64, 32, 1, 1, 1);
        raw_case(dev, p, 1, 256, 256, 32, 1, 1, 1);
        raw_case(dev, p, 2, 100, 70, 20, 1, 1, 1);  /* Tq != Tk, d padded to 32 */
        raw_case(dev, p, 1, 5, 3, 7, 1, 1, 1);      /* tiny */
        raw_case(dev, p, 1, 150, 129, 64, 1, 1, 1);
        raw_case(dev, p, 1, 70, 140, 128, 1, 1, 1);
        raw_case(dev, p, 1, 65, 33, 50, 0, 1, 1);   /* no dq */
        raw_case(dev, p, 1, 65, 33, 32, 1, 0, 0);   /* dq only */
        raw_case(dev, p, 1, 40, 90, 32, 0, 0, 1);   /* dv only */
        raw_case(dev, p, 5, 129, 65, 49, 1, 1, 1);  /* odd d: scalar atomics */
    }
    nb_device_close(dev);
}

/* Self-attention with q = k = v = one buffer and dq = dk = dv = one gradient buffer: the three
 * contributions accumulate into the same memory. */
static void test_attn_raw_aliased_grads(void) {
    nb_device *dev = open_gpu();
    if (!dev) NB_SKIP("no CUDA device");
    const int64_t BH = 2, T = 77, d = 32, n = BH * T * d;
    float *x = malloc((size_t)n * 4), *g = malloc((size_t)n * 4), *out = malloc((size_t)n * 4);
    fill(x, n, 7, 1.0f);
    fill(g, n, 8, 1.0f);
    double *ro = calloc((size_t)n, sizeof(double)), *rg = calloc((size_t)n, sizeof(double));
    ref_attention(x, x, x, g, BH, T, T, d, ro, NULL, rg, rg, rg);
    dbuf X, O, G, L, DL, DX;
    NB_REQUIRE_OK(dalloc(dev, n, x, &X));
    NB_REQUIRE_OK(dalloc(dev, n, NULL, &O));
    NB_REQUIRE_OK(dalloc(dev, n, g, &G));
    NB_REQUIRE_OK(dalloc(dev, BH * T, NULL, &L));
    NB_REQUIRE_OK(dalloc(dev, BH * T, NULL, &DL));
    NB_REQUIRE_OK(dalloc(dev, n, NULL, &DX));
    static const double tol[] = {5e-5, 1e-2, 6e-2};
    for (int p = 0; p < 3; p++) {
        NB_EXPECT_OK(nb_memset(dev, DX.p, 0, (size_t)n * 4));
        NB_EXPECT_OK(nb_attn_cuda_forward(dev, p, X.p, X.p, X.p, O.p, L.p, BH, T, T, d));
        NB_EXPECT_OK(nb_attn_cuda_backward(dev, p, X.p, X.p, X.p, O.p, G.p, L.p, DL.p, DX.p, DX.p,
                                           DX.p, BH, T, T, d));
        NB_EXPECT_OK(nb_memcpy_d2h(dev, out, DX.p, (size_t)n * 4));
        double e = rel_err(out, rg, n, 1e-3);
        printf("  aliased dq = dk = dv, precision %d: rel err %.1e\n", p, e);
        NB_EXPECT(e < tol[p]);
    }
    dbuf all[] = {X, O, G, L, DL, DX};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) nb_buffer_release(all[i].b);
    free(x), free(g), free(out), free(ro), free(rg);
    nb_device_close(dev);
}

/* ---- the tape: CUDA against the CPU reference ------------------------------------------ */

typedef struct {
    int64_t N, H, Tq, Tk, d;
    int grad_q, grad_k, grad_v; /* requires_grad of the inputs */
    int self;                   /* attention(x, x, x) on one input (grads accumulate) */
} tape_case;

/* Runs attention + mse(out, target) and backward on a tape on dev (NULL: CPU); reads the output
 * and the inputs' gradients (zeros when not wanted) into host arrays. */
static nb_status run_tape(nb_device *dev, int prec, const tape_case *c, const float *q,
                          const float *k, const float *v, const float *tgt, float *o, float *gq,
                          float *gk, float *gv) {
    nb_tape *t = NULL;
    nb_status s = dev ? nb_tape_create_on(dev, &t) : nb_tape_create(&t);
    if (s) return s;
    int64_t sq[4] = {c->N, c->H, c->Tq, c->d}, sk[4] = {c->N, c->H, c->Tk, c->d};
    int64_t nq = c->N * c->H * c->Tq * c->d, nk = c->N * c->H * c->Tk * c->d;
    nb_tvar tq, tk, tv, to, tt, loss;
    if ((s = nb_tape_set_precision(t, (nb_tape_precision)prec))) goto done;
    if ((s = nb_tape_input(t, 4, sq, q, c->grad_q, &tq))) goto done;
    if (c->self) {
        tk = tv = tq;
    } else {
        if ((s = nb_tape_input(t, 4, sk, k, c->grad_k, &tk))) goto done;
        if ((s = nb_tape_input(t, 4, sk, v, c->grad_v, &tv))) goto done;
    }
    if ((s = nb_tape_input(t, 4, sq, tgt, 0, &tt))) goto done;
    if ((s = nb_tape_attention(t, tq, tk, tv, &to))) goto done;
    if ((s = nb_tape_mse(t, to, tt, &loss))) goto done;
    if ((s = nb_tape_backward(t, loss))) goto done;
    if ((s = nb_tape_read(t, to, o, nq))) goto done;
    if ((s = nb_tape_read_grad(t, tq, gq, nq))) goto done;
    if (!c->self) {
        if ((s = nb_tape_read_grad(t, tk, gk, nk))) goto done;
        if ((s = nb_tape_read_grad(t, tv, gv, nk))) goto done;
    }
done:
    nb_tape_free(t);
    return s;
}

static void tape_case_run(nb_device *dev, const tape_case *c) {
    int64_t nq = c->N * c->H * c->Tq * c->d, nk = c->N * c->H * c->Tk * c->d;
    float *h = malloc((size_t)(8 * nq + 6 * nk) * sizeof(float));
    float *q = h, *tgt = q + nq, *o0 = tgt + nq, *o1 = o0 + nq, *gq0 = o1 + nq, *gq1 = gq0 + nq,
          *k = gq1 + nq, *v = k + nk, *gk0 = v + nk, *gk1 = gk0 + nk, *gv0 = gk1 + nk,
          *gv1 = gv0 + nk;
    fill(q, nq, 11, 1.5f);
    fill(k, nk, 12, 1.5f);
    fill(v, nk, 13, 1.0f);
    fill(tgt, nq, 14, 1.0f);
    memset(gk0, 0, (size_t)nk * 4), memset(gv0, 0, (size_t)nk * 4);
    memset(gk1, 0, (size_t)nk * 4), memset(gv1, 0, (size_t)nk * 4);
    NB_REQUIRE_OK(run_tape(NULL, NB_TAPE_FP32, c, q, k, v, tgt, o0, gq0, gk0, gv0));
    static const char *const pname[] = {"fp32", "tf32", "bf16"};
    /* Tolerances relative to the largest reference magnitude (the tensor-core variants, when
     * they exist, round operands to 10 / 7 mantissa bits). */
    static const double tol_o[] = {2e-5, 5e-3, 3e-2}, tol_g[] = {5e-5, 1e-2, 6e-2};
    for (int p = 0; p < 3; p++) {
        NB_EXPECT_OK(run_tape(dev, p, c, q, k, v, tgt, o1, gq1, gk1, gv1));
        double eo = rel_errf(o1, o0, nq, 1e-3), eq = rel_errf(gq1, gq0, nq, 1e-6),
               ek = rel_errf(gk1, gk0, nk, 1e-6), ev = rel_errf(gv1, gv0, nk, 1e-6);
        printf("  tape %s [%lld,%lld,%lld|%lld,%lld] grads %d%d%d%s: rel err o %.1e dq %.1e dk %.1e "
               "dv %.1e\n", pname[p], (long long)c->N, (long long)c->H, (long long)c->Tq,
               (long long)c->Tk, (long long)c->d, c->grad_q, c->grad_k, c->grad_v,
               c->self ? " self" : "", eo, eq, ek, ev);
        NB_EXPECT(eo < tol_o[p]);
        NB_EXPECT(eq < tol_g[p] && ek < tol_g[p] && ev < tol_g[p]);
    }
    /* Gradients not requested read as zeros on both tapes. */
    double zq = 0.0;
    if (!c->grad_q)
        for (int64_t i = 0; i < nq; i++) zq += fabs(gq1[i]) + fabs(gq0[i]);
    NB_EXPECT(zq == 0.0);
    free(h);
}

static void test_attn_tape_vs_cpu(void) {
    nb_device *dev = open_gpu();
    if (!dev) NB_SKIP("no CUDA device");
    const tape_case cases[] = {
        {1, 2, 37, 37, 16, 1, 1, 1, 0},
        {2, 1, 64, 64, 32, 1, 1, 1, 0},
        {1, 2, 256, 256, 32, 1, 1, 1, 0},
        {1, 1, 50, 100, 64, 1, 1, 1, 0}, /* Tq != Tk */
        {1, 1, 33, 33, 128, 1, 1, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) tape_case_run(dev, &cases[i]);
    nb_device_close(dev);
}

static void test_attn_tape_partial_grads(void) {
    nb_device *dev = open_gpu();
    if (!dev) NB_SKIP("no CUDA device");
    const tape_case cases[] = {
        {1, 2, 45, 45, 32, 0, 1, 1, 0}, /* q needs no gradient */
        {1, 1, 45, 70, 32, 1, 0, 0, 0}, /* only q */
        {1, 1, 45, 70, 16, 0, 0, 1, 0}, /* only v */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) tape_case_run(dev, &cases[i]);
    nb_device_close(dev);
}

/* attention(x, x, x): the three gradients accumulate into x's one buffer. */
static void test_attn_tape_self_accumulates(void) {
    nb_device *dev = open_gpu();
    if (!dev) NB_SKIP("no CUDA device");
    const tape_case c = {2, 2, 41, 41, 32, 1, 1, 1, 1};
    tape_case_run(dev, &c);
    nb_device_close(dev);
}

/* The CUDA forward keeps only the row log-sum-exp ([BH,Tq]) beside the output: the arena holds
 * inputs + output + lse, far less than the [BH,Tq,Tk] probabilities the CPU path saves. */
static void test_attn_tape_memory(void) {
    nb_device *dev = open_gpu();
    if (!dev) NB_SKIP("no CUDA device");
    const int64_t N = 1, H = 2, T = 1024, d = 32, n = N * H * T * d;
    float *x = malloc((size_t)n * sizeof(float));
    fill(x, n, 3, 1.0f);
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create_on(dev, &t));
    int64_t sh[4] = {N, H, T, d};
    nb_tvar q, k, v, o;
    NB_EXPECT_OK(nb_tape_input(t, 4, sh, x, 1, &q));
    NB_EXPECT_OK(nb_tape_input(t, 4, sh, x, 1, &k));
    NB_EXPECT_OK(nb_tape_input(t, 4, sh, x, 1, &v));
    nb_tape_stats s0, s1;
    NB_EXPECT_OK(nb_tape_get_stats(t, &s0));
    NB_EXPECT_OK(nb_tape_attention(t, q, k, v, &o));
    NB_EXPECT_OK(nb_tape_get_stats(t, &s1));
    int64_t used = s1.arena_used - s0.arena_used, bound = n * 4 + N * H * T * 4 + 256;
    printf("  attention [1,2,1024,32] on the arena: %lld bytes (output + lse: %lld; P would be %lld)\n",
           (long long)used, (long long)bound, (long long)(N * H * T * T * 4));
    NB_EXPECT(used <= bound);
    float *ho = malloc((size_t)n * sizeof(float));
    NB_EXPECT_OK(nb_tape_read(t, o, ho, n));
    NB_EXPECT(isfinite(ho[0]) && isfinite(ho[n - 1]));
    free(ho);
    free(x);
    nb_tape_free(t);
    nb_device_close(dev);
}

static void test_attn_tape_bad_head_dim(void) {
    nb_device *dev = open_gpu();
    if (!dev) NB_SKIP("no CUDA device");
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create_on(dev, &t));
    int64_t sh[4] = {1, 1, 4, 200};
    float *x = calloc(800, sizeof(float));
    nb_tvar a, o;
    NB_EXPECT_OK(nb_tape_input(t, 4, sh, x, 1, &a));
    NB_EXPECT_ERR(nb_tape_attention(t, a, a, a, &o), NB_ERR_UNSUPPORTED, "limit of 128");
    NB_EXPECT_ERR(nb_attn_cuda_forward(dev, 0, NULL, NULL, NULL, NULL, NULL, 1, 4, 4, 129),
                  NB_ERR_UNSUPPORTED, "head dim d = 129");
    free(x);
    nb_tape_free(t);
    nb_device_close(dev);
}

/* ---- timing (NB_ATTN_BENCH=1) ------------------------------------------------------------ */

static void bench_shape(nb_device *dev, int prec, int64_t N, int64_t H, int64_t T, int64_t d) {
    int64_t BH = N * H, n = BH * T * d;
    float *h = malloc((size_t)n * 4);
    dbuf Q, K, V, O, G, L, DL, DQ, DK, DV;
    dbuf *all[] = {&Q, &K, &V, &O, &G, &DQ, &DK, &DV};
    for (int i = 0; i < 8; i++) {
        fill(h, n, 20 + (uint32_t)i, 1.0f);
        NB_REQUIRE_OK(dalloc(dev, n, h, all[i]));
    }
    NB_REQUIRE_OK(dalloc(dev, BH * T, NULL, &L));
    NB_REQUIRE_OK(dalloc(dev, BH * T, NULL, &DL));
    nb_event *e0, *e1, *e2;
    NB_REQUIRE_OK(nb_event_create(dev, &e0));
    NB_REQUIRE_OK(nb_event_create(dev, &e1));
    NB_REQUIRE_OK(nb_event_create(dev, &e2));
    nb_stream *s = nb_device_stream(dev);
    const int iters = 50;
    float best_f = 1e30f, best_b = 1e30f;
    for (int rep = 0; rep < 4; rep++) {
        float tf = 0, tb = 0;
        for (int it = 0; it < iters; it++) {
            NB_EXPECT_OK(nb_event_record(e0, s));
            NB_EXPECT_OK(nb_attn_cuda_forward(dev, prec, Q.p, K.p, V.p, O.p, L.p, BH, T, T, d));
            NB_EXPECT_OK(nb_event_record(e1, s));
            NB_EXPECT_OK(nb_attn_cuda_backward(dev, prec, Q.p, K.p, V.p, O.p, G.p, L.p, DL.p, DQ.p,
                                               DK.p, DV.p, BH, T, T, d));
            NB_EXPECT_OK(nb_event_record(e2, s));
            NB_EXPECT_OK(nb_event_synchronize(e2));
            float a = 0, b = 0;
            NB_EXPECT_OK(nb_event_elapsed_ms(e0, e1, &a));
            NB_EXPECT_OK(nb_event_elapsed_ms(e1, e2, &b));
            tf += a, tb += b;
        }
        if (rep > 0 && tf / iters < best_f) best_f = tf / iters; /* rep 0: warm-up, compile */
        if (rep > 0 && tb / iters < best_b) best_b = tb / iters;
    }
    /* Backward split: dq only (atomics into dq) and dk, dv only. */
    float best_q = 1e30f, best_kv = 1e30f;
    for (int rep = 0; rep < 3; rep++) {
        for (int which = 0; which < 2; which++) {
            NB_EXPECT_OK(nb_event_record(e0, s));
            for (int it = 0; it < iters; it++)
                NB_EXPECT_OK(nb_attn_cuda_backward(dev, prec, Q.p, K.p, V.p, O.p, G.p, L.p, DL.p,
                                                   which ? NULL : DQ.p, which ? DK.p : NULL,
                                                   which ? DV.p : NULL, BH, T, T, d));
            NB_EXPECT_OK(nb_event_record(e1, s));
            NB_EXPECT_OK(nb_event_synchronize(e1));
            float ms = 0;
            NB_EXPECT_OK(nb_event_elapsed_ms(e0, e1, &ms));
            float *best = which ? &best_kv : &best_q;
            if (ms / iters < *best) *best = ms / iters;
        }
    }
    double flops_f = 4.0 * (double)BH * T * T * d, flops_b = 2.5 * flops_f;
    static const char *const pname[] = {"fp32", "tf32", "bf16"};
    printf("BENCH attn %s q[%lld,%lld,%lld,%lld]: fwd %.1f us (%.1f TFLOP/s)  bwd %.1f us "
           "(%.1f TFLOP/s)  fwd+bwd %.1f us\n", pname[prec], (long long)N, (long long)H,
           (long long)T, (long long)d, best_f * 1e3, flops_f / (best_f * 1e-3) * 1e-12,
           best_b * 1e3, flops_b / (best_b * 1e-3) * 1e-12, (best_f + best_b) * 1e3);
    printf("BENCH attn %s q[%lld,%lld,%lld,%lld]: bwd with dq only %.1f us, dk+dv only %.1f us\n",
           pname[prec], (long long)N, (long long)H, (long long)T, (long long)d, best_q * 1e3,
           best_kv * 1e3);
    nb_event_destroy(e0), nb_event_destroy(e1), nb_event_destroy(e2);
    for (int i = 0; i < 8; i++) nb_buffer_release(all[i]->b);
    nb_buffer_release(L.b), nb_buffer_release(DL.b);
    free(h);
}

/* The UNet's attention block core on a CUDA tape, qkv [N, 3*heads*d, H, W] -> [N, heads*d, H, W]:
 * fused (nb_tape_qkv_attention) or the old composition (reshape / slice_channels / transpose /
 * nb_tape_attention / transpose / reshape). Times the forward ops and the backward (which also
 * runs mse's backward, the same for both). On a BF16 tape with bf16 storage qkv is cast to bf16
 * first, outside the timed region, like the qkv conv's bf16 output. */
static nb_status qkv_block(nb_tape *t, int fused, nb_tvar x, int64_t N, int64_t heads, int64_t d,
                           int64_t H, int64_t W, nb_tvar *out) {
    if (fused) return nb_tape_qkv_attention(t, x, (int)heads, out);
    int64_t L = H * W;
    nb_tvar r, q[3], o;
    NB_TRY_T(nb_tape_reshape(t, x, 3, (int64_t[]){N * heads, 3 * d, L}, &r));
    for (int j = 0; j < 3; j++) {
        NB_TRY_T(nb_tape_slice_channels(t, r, j * d, d, &q[j]));
        NB_TRY_T(nb_tape_reshape(t, q[j], 4, (int64_t[]){N, heads, d, L}, &q[j]));
        NB_TRY_T(nb_tape_transpose(t, q[j], &q[j]));
    }
    NB_TRY_T(nb_tape_attention(t, q[0], q[1], q[2], &o));
    NB_TRY_T(nb_tape_transpose(t, o, &o));
    return nb_tape_reshape(t, o, 4, (int64_t[]){N, heads * d, H, W}, out);
}

static void bench_qkv_tape(nb_device *dev, int prec, int64_t N, int64_t heads, int64_t d,
                           int64_t H, int64_t W) {
    int64_t C = 3 * heads * d, nx = N * C * H * W, no = nx / 3;
    float *x = malloc((size_t)nx * 4), *tg = malloc((size_t)no * 4);
    fill(x, nx, 31, 1.0f);
    fill(tg, no, 32, 1.0f);
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create_on(dev, &t));
    NB_EXPECT_OK(nb_tape_set_precision(t, (nb_tape_precision)prec));
    nb_event *e0, *e1, *e2;
    NB_REQUIRE_OK(nb_event_create(dev, &e0));
    NB_REQUIRE_OK(nb_event_create(dev, &e1));
    NB_REQUIRE_OK(nb_event_create(dev, &e2));
    nb_stream *s = nb_device_stream(dev);
    static const char *const pname[] = {"fp32", "tf32", "bf16"};
    double res[2][2];
    for (int fused = 0; fused < 2; fused++) {
        const int iters = 20;
        float best_f = 1e30f, best_b = 1e30f;
        for (int rep = 0; rep < 4; rep++) {
            float tf = 0, tb = 0;
            for (int it = 0; it < iters; it++) {
                nb_tvar tx, tt, o, loss;
                NB_EXPECT_OK(nb_tape_reset(t));
                NB_EXPECT_OK(nb_tape_input(t, 4, (int64_t[]){N, C, H, W}, x, 1, &tx));
                NB_EXPECT_OK(nb_tape_input(t, 4, (int64_t[]){N, heads * d, H, W}, tg, 0, &tt));
                nb_tvar xa = tx;
                if (prec == NB_TAPE_BF16) NB_EXPECT_OK(nb_tape_cast(t, tx, NB_BF16, &xa));
                NB_EXPECT_OK(nb_event_record(e0, s));
                NB_EXPECT_OK(qkv_block(t, fused, xa, N, heads, d, H, W, &o));
                NB_EXPECT_OK(nb_event_record(e1, s));
                NB_EXPECT_OK(nb_tape_mse(t, o, tt, &loss));
                NB_EXPECT_OK(nb_tape_backward(t, loss));
                NB_EXPECT_OK(nb_event_record(e2, s));
                NB_EXPECT_OK(nb_event_synchronize(e2));
                float a = 0, b = 0;
                NB_EXPECT_OK(nb_event_elapsed_ms(e0, e1, &a));
                NB_EXPECT_OK(nb_event_elapsed_ms(e1, e2, &b));
                tf += a, tb += b;
            }
            if (rep > 0 && tf / iters < best_f) best_f = tf / iters;
            if (rep > 0 && tb / iters < best_b) best_b = tb / iters;
        }
        res[fused][0] = best_f * 1e3, res[fused][1] = best_b * 1e3;
        printf("BENCH qkv-block %s %s qkv[%lld,%lld,%lld,%lld] heads %lld: fwd %.1f us  bwd(+mse) "
               "%.1f us  total %.1f us\n", pname[prec], fused ? "fused      " : "composition",
               (long long)N, (long long)C, (long long)H, (long long)W, (long long)heads,
               res[fused][0], res[fused][1], res[fused][0] + res[fused][1]);
    }
    printf("BENCH qkv-block %s [%lld,%lld,%lld,%lld]: fused saves %.1f us per step (fwd %.1f, bwd %.1f)\n",
           pname[prec], (long long)N, (long long)C, (long long)H, (long long)W,
           res[0][0] + res[0][1] - res[1][0] - res[1][1], res[0][0] - res[1][0], res[0][1] - res[1][1]);
    nb_event_destroy(e0), nb_event_destroy(e1), nb_event_destroy(e2);
    nb_tape_free(t);
    free(x), free(tg);
}

/* The kernels alone on strided views at one shape: q, k, v, o, dout in the legacy qkv layout
 * (feature-major: what nb_tape_qkv_attention runs) or row-major [BH,T,d] (nb_tape_attention's
 * layout), f32 or bf16 storage; the backward in STORE mode (the fused op's first contribution). */
static void bench_views(nb_device *dev, int prec, int64_t N, int64_t heads, int64_t L, int64_t d,
                        int fm, int bf, int gmask) {
    int64_t BH = N * heads, n = BH * 3 * d * L, no = BH * d * L, es = bf ? 2 : 4;
    float *h = malloc((size_t)n * 4);
    uint16_t *hb = malloc((size_t)n * 2);
    dbuf X, O, G, DX, L_, DL, SC;
    fill(h, n, 41, 1.0f);
    for (int64_t i = 0; i < n; i++) hb[i] = nb_f32_to_bf16(h[i]);
    NB_REQUIRE_OK(dalloc(dev, n, NULL, &X));
    NB_REQUIRE_OK(nb_memcpy_h2d(dev, X.p, bf ? (const void *)hb : (const void *)h, (size_t)(n * es)));
    NB_REQUIRE_OK(dalloc(dev, no, NULL, &O));
    NB_REQUIRE_OK(dalloc(dev, no, NULL, &G));
    NB_REQUIRE_OK(nb_memcpy_h2d(dev, G.p, bf ? (const void *)hb : (const void *)h, (size_t)(no * es)));
    NB_REQUIRE_OK(dalloc(dev, n, NULL, &DX));
    NB_REQUIRE_OK(dalloc(dev, BH * L, NULL, &L_));
    NB_REQUIRE_OK(dalloc(dev, BH * L, NULL, &DL));
    NB_REQUIRE_OK(dalloc(dev, no, NULL, &SC));
    nb_attn_view q, k, v, o, g, dq, dk, dv;
    for (int j = 0; j < 3; j++) {
        /* feature-major: the qkv layout; row-major: three [BH,L,d] blocks in the same buffer */
        nb_attn_view w = fm ? (nb_attn_view){(char *)X.p + j * d * L * es, 3 * d * L, 1, L, bf}
                            : (nb_attn_view){(char *)X.p + j * no * es, L * d, d, 1, bf};
        nb_attn_view wg = w;
        wg.p = (char *)DX.p + ((char *)w.p - (char *)X.p);
        if (j == 0) q = w, dq = wg;
        else if (j == 1) k = w, dk = wg;
        else v = w, dv = wg;
    }
    o = fm ? (nb_attn_view){O.p, d * L, 1, L, bf} : (nb_attn_view){O.p, L * d, d, 1, bf};
    g = o;
    g.p = G.p;
    const int mode = fm ? NB_ATTN_GRAD_STORE : NB_ATTN_GRAD_ATOMIC;
    nb_event *e0, *e1, *e2;
    NB_REQUIRE_OK(nb_event_create(dev, &e0));
    NB_REQUIRE_OK(nb_event_create(dev, &e1));
    NB_REQUIRE_OK(nb_event_create(dev, &e2));
    nb_stream *s = nb_device_stream(dev);
    float best_f = 1e30f, best_b = 1e30f;
    nb_status st = NB_OK;
    for (int rep = 0; rep < 4 && !st; rep++) {
        const int iters = 30;
        float tf = 0, tb = 0;
        for (int it = 0; it < iters && !st; it++) {
            NB_EXPECT_OK(nb_event_record(e0, s));
            st = nb_attn_cuda_forward_v(dev, prec, &q, &k, &v, &o, L_.p, BH, L, L, d);
            NB_EXPECT_OK(nb_event_record(e1, s));
            if (!st)
                st = nb_attn_cuda_backward_v(dev, prec, &q, &k, &v, &o, &g, L_.p, DL.p,
                                             gmask & 1 ? &dq : NULL, gmask & 2 ? &dk : NULL,
                                             gmask & 4 ? &dv : NULL, mode, SC.p, BH, L, L, d);
            NB_EXPECT_OK(nb_event_record(e2, s));
            NB_EXPECT_OK(nb_event_synchronize(e2));
            float a = 0, b = 0;
            NB_EXPECT_OK(nb_event_elapsed_ms(e0, e1, &a));
            NB_EXPECT_OK(nb_event_elapsed_ms(e1, e2, &b));
            tf += a, tb += b;
        }
        if (rep > 0 && tf / iters < best_f) best_f = tf / iters;
        if (rep > 0 && tb / iters < best_b) best_b = tb / iters;
    }
    static const char *const pname[] = {"fp32", "tf32", "bf16"};
    if (st) {
        printf("BENCH attn-views %s %s %s: %s\n", pname[prec], fm ? "qkv-layout" : "row-major ",
               bf ? "bf16" : "f32 ", nb_last_error());
    } else {
        static const char *const gname[8] = {"", " (bwd: dq only)", " (bwd: dk only)", "",
                                             " (bwd: dv only)", "", " (bwd: dk, dv only)", ""};
        printf("BENCH attn-views %s %s %s storage BH=%lld L=%lld d=%lld: fwd %.1f us  bwd %.1f us  "
               "total %.1f us%s\n", pname[prec], fm ? "qkv-layout" : "row-major ", bf ? "bf16" : "f32 ",
               (long long)BH, (long long)L, (long long)d, best_f * 1e3, best_b * 1e3,
               (best_f + best_b) * 1e3, gname[gmask & 7]);
    }
    /* GPU time alone: 20 calls captured in a CUDA graph per direction (the loop above also
     * counts the host's launch work, e.g. the JIT's lookup of a module by its source text) */
    if (!st) {
        nb_device_graph *gf = NULL, *gb = NULL;
        const int reps = 20;
        nb_status sg = nb_device_graph_capture_begin(dev);
        for (int r = 0; r < reps && !sg; r++)
            sg = nb_attn_cuda_forward_v(dev, prec, &q, &k, &v, &o, L_.p, BH, L, L, d);
        nb_status se = nb_device_graph_capture_end(dev, &gf);
        if (!sg) sg = se;
        if (!sg && !(sg = nb_device_graph_capture_begin(dev))) {
            for (int r = 0; r < reps && !sg; r++)
                sg = nb_attn_cuda_backward_v(dev, prec, &q, &k, &v, &o, &g, L_.p, DL.p,
                                             gmask & 1 ? &dq : NULL, gmask & 2 ? &dk : NULL,
                                             gmask & 4 ? &dv : NULL, mode, SC.p, BH, L, L, d);
            se = nb_device_graph_capture_end(dev, &gb);
            if (!sg) sg = se;
        }
        float gbf = 1e30f, gbb = 1e30f;
        for (int rep = 0; rep < 4 && !sg; rep++) {
            float a = 0, b = 0;
            sg = nb_event_record(e0, s);
            if (!sg) sg = nb_device_graph_launch(gf);
            if (!sg) sg = nb_event_record(e1, s);
            if (!sg) sg = nb_device_graph_launch(gb);
            if (!sg) sg = nb_event_record(e2, s);
            if (!sg) sg = nb_event_synchronize(e2);
            if (!sg) sg = nb_event_elapsed_ms(e0, e1, &a);
            if (!sg) sg = nb_event_elapsed_ms(e1, e2, &b);
            if (rep > 0 && a / reps < gbf) gbf = a / reps;
            if (rep > 0 && b / reps < gbb) gbb = b / reps;
        }
        if (sg)
            printf("BENCH attn-views (graph): %s\n", nb_last_error());
        else
            printf("BENCH attn-views-gpu %s %s %s storage BH=%lld L=%lld d=%lld: fwd %.1f us  bwd %.1f us  "
                   "total %.1f us (graph, GPU time)\n", pname[prec], fm ? "qkv-layout" : "row-major ",
                   bf ? "bf16" : "f32 ", (long long)BH, (long long)L, (long long)d, gbf * 1e3,
                   gbb * 1e3, (gbf + gbb) * 1e3);
        if (gf) nb_device_graph_destroy(gf);
        if (gb) nb_device_graph_destroy(gb);
    }
    nb_event_destroy(e0), nb_event_destroy(e1), nb_event_destroy(e2);
    dbuf all[] = {X, O, G, DX, L_, DL, SC};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) nb_buffer_release(all[i].b);
    free(h), free(hb);
}

static void test_attn_bench(void) {
    nb_device *dev = open_gpu();
    if (!dev) NB_SKIP("no CUDA device");
    const char *b = getenv("NB_ATTN_BENCH");
    const int only_qkv = b && !strcmp(b, "qkv");
    if (!b || (strcmp(b, "1") != 0 && !only_qkv)) {
        printf("  (timing runs with NB_ATTN_BENCH=1; =qkv: only the fused QKV block vs the composition)\n");
        nb_device_close(dev);
        return;
    }
    for (int p = 0; p < 3 && !only_qkv; p++) {
        bench_shape(dev, p, 32, 6, 256, 32); /* 16x16 maps, 192 channels */
        bench_shape(dev, p, 32, 8, 64, 32);  /* 8x8 maps, 256 channels */
        bench_shape(dev, p, 8, 8, 1024, 64); /* a larger one, for context */
    }
    for (int p = 0; p < 3; p++) /* the kernels alone: layouts and storage dtypes */
        for (int sh = 0; sh < 2; sh++)
            for (int c = 0; c < (p == NB_TAPE_BF16 ? 3 : 2); c++) /* row-major, qkv, qkv bf16 */
                bench_views(dev, p, 32, sh ? 8 : 6, sh ? 64 : 256, 32, c > 0, c == 2, 7);
    /* the backward's parts at the 16x16 shape (qkv layout, the UNet's storage): dk + dv, dq */
    bench_views(dev, NB_TAPE_TF32, 32, 6, 256, 32, 1, 0, 6);
    bench_views(dev, NB_TAPE_TF32, 32, 6, 256, 32, 1, 0, 1);
    bench_views(dev, NB_TAPE_BF16, 32, 6, 256, 32, 1, 1, 6);
    bench_views(dev, NB_TAPE_BF16, 32, 6, 256, 32, 1, 1, 1);
    for (int p = 0; p < 3; p++) { /* the UNet's attention blocks on the tape: fused vs copies */
        bench_qkv_tape(dev, p, 32, 6, 32, 16, 16); /* 192 channels at 16x16 */
        bench_qkv_tape(dev, p, 32, 8, 32, 8, 8);   /* 256 channels at 8x8 */
    }
    nb_device_close(dev);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_attn_raw_kernels, test_attn_raw_aliased_grads,
                 test_attn_tape_vs_cpu, test_attn_tape_partial_grads,
                 test_attn_tape_self_accumulates, test_attn_tape_memory,
                 test_attn_tape_bad_head_dim, test_attn_bench);
}

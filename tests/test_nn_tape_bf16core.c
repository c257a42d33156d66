/* BF16 storage core of the tape (op_rows.h: nb_tval.dtype, nb_tape_cast, the casts that
 * nb_tape_record inserts before rows that read f32 only, gradient buffers in the value's dtype,
 * nb_tape_read widening bf16). Runs on the CPU tape (whose rows read f32 only, so every bf16
 * value goes through recorded casts) and, when a GPU is present, on a CUDA tape, where a BF16
 * precision tape also stores the outputs of rows flagged NB_TOPF_OUT_BF16 as bf16. */
#include <math.h>

#include "nb_test.h"
#include "nabla/device.h"
#include "nabla/dtype.h"
#include "nabla/nn_tape.h"
#include "graph/op_rows.h"

#define N 1027 /* odd: the CUDA cast's scalar tail */

static float rnd(int i) { return (float)sin(i * 0.37 + 0.1) * 2.0f; }
static float bf(float x) { return nb_bf16_to_f32(nb_f32_to_bf16(x)); }

/* x (f32 input, requires grad) -> cast bf16 -> silu -> mse against tgt (f32). Checks the bf16
 * value, the loss and dL/dx against a host computation with the same roundings. */
static void run_chain(nb_device *dev) {
    nb_tape *t;
    NB_REQUIRE_OK(dev ? nb_tape_create_on(dev, &t) : nb_tape_create(&t));
    float x[N], tgt[N], xb[N], dx[N];
    for (int i = 0; i < N; i++) x[i] = rnd(i), tgt[i] = 0.25f * rnd(3 * i + 1);
    nb_tvar xv, tv, b, y, l;
    NB_REQUIRE_OK(nb_tape_input(t, 1, (int64_t[]){N}, x, 1, &xv));
    NB_REQUIRE_OK(nb_tape_input(t, 1, (int64_t[]){N}, tgt, 0, &tv));
    NB_REQUIRE_OK(nb_tape_cast(t, xv, NB_BF16, &b));
    NB_EXPECT(b != xv);
    nb_dtype dt = NB_F32;
    NB_REQUIRE_OK(nb_tape_dtype(t, b, &dt));
    NB_EXPECT(dt == NB_BF16);
    NB_EXPECT_ERR(nb_tape_dtype(t, 12345, &dt), NB_ERR_INVALID_ARG, "not a live value");
    nb_tvar same;
    NB_REQUIRE_OK(nb_tape_cast(t, b, NB_BF16, &same)); /* already bf16: no op */
    NB_EXPECT(same == b);
    NB_REQUIRE_OK(nb_tape_read(t, b, xb, N));
    int bad = 0;
    for (int i = 0; i < N; i++) bad += xb[i] != bf(x[i]);
    NB_EXPECT(bad == 0);
    NB_REQUIRE_OK(nb_tape_silu(t, b, &y)); /* f32 row on the CPU: a cast back is recorded */
    NB_REQUIRE_OK(nb_tape_mse(t, y, tv, &l));
    float loss;
    NB_REQUIRE_OK(nb_tape_read(t, l, &loss, 1));
    double ref = 0;
    float yr[N];
    for (int i = 0; i < N; i++) {
        float v = bf(x[i]);
        yr[i] = v / (1.0f + expf(-v));
        ref += ((double)yr[i] - tgt[i]) * ((double)yr[i] - tgt[i]);
    }
    ref /= N;
    NB_EXPECT_NEAR(loss, ref, 1e-3 * ref); /* a bf16 silu output on CUDA adds ~4e-3 per term */
    NB_REQUIRE_OK(nb_tape_backward(t, l));
    NB_REQUIRE_OK(nb_tape_read_grad(t, xv, dx, N));
    double err = 0, mx = 0;
    for (int i = 0; i < N; i++) {
        float v = bf(x[i]), s = 1.0f / (1.0f + expf(-v));
        float g = bf(2.0f * (yr[i] - tgt[i]) / N * s * (1.0f + v * (1.0f - s)));
        err = fmax(err, fabs(dx[i] - g));
        mx = fmax(mx, fabs(g));
    }
    printf("  %s: loss %.6f (ref %.6f), dx max err %.3g of max %.3g\n", dev ? "cuda" : "cpu", loss,
           ref, err, mx);
    NB_EXPECT(err <= 2e-2 * mx);
    nb_tape_free(t);
}

static void test_cpu_chain(void) { run_chain(NULL); }

static void test_cuda_chain(void) {
    nb_device *g;
    if (nb_device_open("cuda", &g) != NB_OK) NB_SKIP("no CUDA device");
    run_chain(g);
    nb_device_close(g);
}

/* A BF16 tape on CUDA: flagged rows store bf16 outputs, the host reads them widened, and the
 * loss matches an FP32 tape's within bf16 rounding. */
static void test_cuda_storage(void) {
    nb_device *g;
    if (nb_device_open("cuda", &g) != NB_OK) NB_SKIP("no CUDA device");
    float x[N], tgt[N];
    for (int i = 0; i < N; i++) x[i] = rnd(i), tgt[i] = 0.25f * rnd(3 * i + 1);
    float loss[2], gx[2][N];
    for (int p = 0; p < 2; p++) {
        nb_tape *t;
        NB_REQUIRE_OK(nb_tape_create_on(g, &t));
        NB_REQUIRE_OK(nb_tape_set_precision(t, p ? NB_TAPE_BF16 : NB_TAPE_FP32));
        nb_tvar xv, tv, y, z, l;
        NB_REQUIRE_OK(nb_tape_input(t, 1, (int64_t[]){N}, x, 1, &xv));
        NB_REQUIRE_OK(nb_tape_input(t, 1, (int64_t[]){N}, tgt, 0, &tv));
        NB_EXPECT(t->vals[xv].dtype == NB_F32); /* inputs stay f32 */
        NB_REQUIRE_OK(nb_tape_silu(t, xv, &y));
        NB_REQUIRE_OK(nb_tape_add(t, y, xv, &z));
        unsigned fl = nb_top_rows[NB_TOP_SILU].flags;
        nb_dtype want = p && (fl & NB_TOPF_OUT_BF16) && nb_tape_bf16_storage(t) ? NB_BF16 : NB_F32;
        NB_EXPECT(t->vals[y].dtype == want);
        NB_REQUIRE_OK(nb_tape_mse(t, z, tv, &l));
        NB_EXPECT(t->vals[l].dtype == NB_F32 || !(nb_top_rows[NB_TOP_MSE].flags & NB_TOPF_OUT_BF16));
        NB_REQUIRE_OK(nb_tape_read(t, l, &loss[p], 1));
        NB_REQUIRE_OK(nb_tape_backward(t, l));
        NB_REQUIRE_OK(nb_tape_read_grad(t, xv, gx[p], N));
        nb_tape_free(t);
    }
    double err = 0, mx = 0;
    for (int i = 0; i < N; i++) err = fmax(err, fabs(gx[1][i] - gx[0][i])), mx = fmax(mx, fabs(gx[0][i]));
    printf("  loss fp32 %.6f bf16 %.6f; dx max diff %.3g of %.3g\n", loss[0], loss[1], err, mx);
    NB_EXPECT_NEAR(loss[1], loss[0], 2e-2 * loss[0]);
    NB_EXPECT(err <= 3e-2 * mx);
    nb_device_close(g);
}

/* backward from a bf16 scalar loss: the seed is a bf16 1.0 (a fresh gradient buffer) */
static void run_bf16_loss(nb_device *dev) {
    nb_tape *t;
    NB_REQUIRE_OK(dev ? nb_tape_create_on(dev, &t) : nb_tape_create(&t));
    float x[8] = {1, -2, 3, -4, 0.5f, 0.25f, -1, 2}, z[8] = {0}, g[8];
    nb_tvar xv, zv, l, lb;
    NB_REQUIRE_OK(nb_tape_input(t, 1, (int64_t[]){8}, x, 1, &xv));
    NB_REQUIRE_OK(nb_tape_input(t, 1, (int64_t[]){8}, z, 0, &zv));
    NB_REQUIRE_OK(nb_tape_mse(t, xv, zv, &l));
    NB_REQUIRE_OK(nb_tape_cast(t, l, NB_BF16, &lb));
    for (int rep = 0; rep < 2; rep++) { /* twice: the seed must not accumulate across passes */
        NB_REQUIRE_OK(nb_tape_backward(t, lb));
        NB_REQUIRE_OK(nb_tape_read_grad(t, xv, g, 8));
        int bad = 0;
        for (int i = 0; i < 8; i++) bad += g[i] != bf(2.0f * x[i] / 8.0f);
        NB_EXPECT(bad == 0);
    }
    nb_tape_free(t);
}

static void test_bf16_loss(void) {
    run_bf16_loss(NULL);
    nb_device *g;
    if (nb_device_open("cuda", &g) != NB_OK) NB_SKIP("no CUDA device (the CPU part ran)");
    run_bf16_loss(g);
    nb_device_close(g);
}

static void test_errors(void) {
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    float x[4] = {1, 2, 3, 4};
    nb_tvar xv, o;
    NB_REQUIRE_OK(nb_tape_input(t, 1, (int64_t[]){4}, x, 0, &xv));
    NB_EXPECT_ERR(nb_tape_cast(t, xv, NB_F16, &o), NB_ERR_INVALID_ARG, "f16");
    NB_EXPECT_ERR(nb_tape_cast(t, 99, NB_BF16, &o), NB_ERR_INVALID_ARG, "not a live value");
    float h[3];
    NB_EXPECT_ERR(nb_tape_read(t, xv, h, 3), NB_ERR_SHAPE, "count 3");
    nb_tape_free(t);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_cpu_chain, test_cuda_chain, test_cuda_storage, test_bf16_loss, test_errors);
}

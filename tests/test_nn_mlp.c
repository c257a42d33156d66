/* Fused MLP: config and argument errors, the CPU reference against finite differences of an
 * exact double-precision model, and CUDA against the CPU reference (forward, dx, weight and
 * bias gradients) for every width, odd batch sizes, several depths, odd n_in/n_out, bias on/off,
 * f16 and bf16, every activation. CUDA tests skip without a GPU (NB_REQUIRE_CUDA=1: fail). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/nn_mlp.h"
#include "nb_test.h"

#define OPEN_CUDA_OR_SKIP(dev)                                                                 \
    do {                                                                                       \
        if (nb_cuda_device_count() == 0) {                                                     \
            char why_[512];                                                                    \
            snprintf(why_, sizeof why_, "no CUDA device: %s", nb_cuda_unavailable_reason());   \
            NB_SKIP(why_);                                                                     \
        }                                                                                      \
        NB_REQUIRE_OK(nb_device_open("cuda", &(dev)));                                         \
    } while (0)

static uint64_t rng_state = 42;
static double urand(void) { /* [0, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}
static float *rand_array(int64_t n, float lo, float hi) {
    float *a = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) a[i] = (float)(lo + (hi - lo) * urand());
    return a;
}
static nb_tensor *mat(nb_device *dev, int64_t r, int64_t c, const float *data) {
    int64_t shape[2] = {r, c};
    nb_tensor *t = NULL;
    if (data) nb_tensor_from_host(dev, NB_F32, 2, shape, data, &t);
    else nb_tensor_zeros(dev, NB_F32, 2, shape, &t);
    return t;
}
static float *to_host(const nb_tensor *t) {
    size_t n = nb_tensor_nbytes(t);
    float *h = malloc(n ? n : 4);
    if (nb_tensor_to_host(t, h, n) != NB_OK) memset(h, 0, n);
    return h;
}
/* Normwise relative error ||a - b|| / max(||b||, floor). */
static double rel_err(const float *a, const float *b, int64_t n, double floor_) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    double dn = sqrt(den);
    return sqrt(num) / (dn > floor_ ? dn : floor_);
}

/* ---- errors ---------------------------------------------------------------------------- */

static void test_config_errors(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_mlp *m = NULL;
    nb_mlp_config c = nb_mlp_config_default(8, 3, 48, 2);
    NB_EXPECT_ERR(nb_mlp_create(cpu, &c, &m), NB_ERR_UNSUPPORTED, "width = 48");
    c = nb_mlp_config_default(0, 3, 64, 2);
    NB_EXPECT_ERR(nb_mlp_create(cpu, &c, &m), NB_ERR_INVALID_ARG, "n_in = 0");
    c = nb_mlp_config_default(8, 0, 64, 2);
    NB_EXPECT_ERR(nb_mlp_create(cpu, &c, &m), NB_ERR_INVALID_ARG, "n_out = 0");
    c = nb_mlp_config_default(8, 3, 64, 0);
    NB_EXPECT_ERR(nb_mlp_create(cpu, &c, &m), NB_ERR_INVALID_ARG, "n_hidden_layers = 0");
    c = nb_mlp_config_default(8, 3, 64, 2);
    c.compute = NB_F32;
    NB_EXPECT_ERR(nb_mlp_create(cpu, &c, &m), NB_ERR_DTYPE, "compute dtype f32");
    c = nb_mlp_config_default(8, 3, 64, 2);
    c.act = (nb_activation)99;
    NB_EXPECT_ERR(nb_mlp_create(cpu, &c, &m), NB_ERR_INVALID_ARG, "act = 99");
    c = nb_mlp_config_default(8, 3, 64, 2);
    c.loss_scale = -1.f;
    NB_EXPECT_ERR(nb_mlp_create(cpu, &c, &m), NB_ERR_INVALID_ARG, "loss_scale");
    NB_EXPECT_ERR(nb_mlp_create(cpu, NULL, &m), NB_ERR_INVALID_ARG, "cfg");
    NB_EXPECT(m == NULL);
    NB_EXPECT(strcmp(nb_activation_name(NB_ACT_SILU), "silu") == 0);
    NB_EXPECT(nb_activation_from_name("leaky_relu") == NB_ACT_LEAKY_RELU);
    NB_EXPECT(nb_activation_from_name("gelu") == -1);
    nb_device_close(cpu);
}

static void test_param_layout(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_mlp_config c = nb_mlp_config_default(5, 3, 16, 2);
    c.bias = 1;
    nb_mlp *m;
    NB_REQUIRE_OK(nb_mlp_create(cpu, &c, &m));
    /* 16x5 + 16, 16x16 + 16, 3x16 + 3 */
    NB_EXPECT(nb_mlp_n_params(m) == 96 + 272 + 51);
    NB_EXPECT(nb_mlp_n_layers(m) == 3);
    int64_t wo, bo;
    int r, cc;
    NB_EXPECT_OK(nb_mlp_layer_info(m, 2, &wo, &bo, &r, &cc));
    NB_EXPECT(wo == 368 && bo == 368 + 48 && r == 3 && cc == 16);
    NB_EXPECT_ERR(nb_mlp_layer_info(m, 3, &wo, &bo, &r, &cc), NB_ERR_INVALID_ARG, "layer 3");
    NB_EXPECT(nb_tensor_numel(nb_mlp_params(m)) == nb_mlp_n_params(m));
    NB_EXPECT(nb_tensor_numel(nb_mlp_grads(m)) == nb_mlp_n_params(m));
    NB_EXPECT_OK(nb_mlp_init_params(m, 7));
    const float *p = nb_tensor_data(nb_mlp_params(m));
    double s0 = sqrt(6.0 / 21.0);
    int in_range = 1, nonzero = 0;
    for (int i = 0; i < 80; i++) {
        if (fabs(p[i]) > s0) in_range = 0;
        if (p[i] != 0.f) nonzero++;
    }
    NB_EXPECT(in_range && nonzero > 70);
    NB_EXPECT(p[80] == 0.f && p[95] == 0.f); /* bias of layer 0 */
    nb_mlp_free(m);
    nb_device_close(cpu);
}

static void test_call_errors(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_mlp_config c = nb_mlp_config_default(5, 3, 16, 1);
    nb_mlp *m;
    NB_REQUIRE_OK(nb_mlp_create(cpu, &c, &m));
    nb_tensor *x = mat(cpu, 4, 5, NULL), *y = mat(cpu, 4, 3, NULL), *bad_x = mat(cpu, 4, 6, NULL);
    nb_tensor *y5 = mat(cpu, 5, 3, NULL), *dy = mat(cpu, 4, 3, NULL), *dy5 = mat(cpu, 5, 3, NULL);
    nb_tensor *x0 = mat(cpu, 0, 5, NULL), *y0 = mat(cpu, 0, 3, NULL);
    NB_EXPECT_ERR(nb_mlp_backward(m, dy, NULL), NB_ERR_INVALID_ARG, "no saved activations");
    NB_EXPECT_ERR(nb_mlp_set_profile(NULL, 1), NB_ERR_INVALID_ARG, "");
    NB_EXPECT_OK(nb_mlp_set_profile(m, 1)); /* no CUDA launches to time on the CPU: no effect */
    NB_EXPECT_OK(nb_mlp_forward(m, x, y, 1));
    NB_EXPECT_OK(nb_mlp_set_profile(m, 0));
    NB_EXPECT_ERR(nb_mlp_forward(m, bad_x, y, 1), NB_ERR_SHAPE, "x has shape [4,6]");
    NB_EXPECT_ERR(nb_mlp_forward(m, x, y5, 1), NB_ERR_SHAPE, "y has shape [5,3]");
    NB_EXPECT_ERR(nb_mlp_inference(m, x0, y0), NB_ERR_SHAPE, "batch size is 0");
    NB_EXPECT_ERR(nb_mlp_forward(m, NULL, y, 1), NB_ERR_INVALID_ARG, "'x'");
    int64_t sh[2] = {4, 5};
    nb_tensor *xi = NULL, *xt = NULL, *xbig = mat(cpu, 5, 4, NULL);
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_I32, 2, sh, &xi));
    NB_EXPECT_ERR(nb_mlp_forward(m, xi, y, 1), NB_ERR_DTYPE, "x has dtype i32");
    NB_REQUIRE_OK(nb_tensor_transpose(xbig, 0, 1, &xt));
    NB_EXPECT_ERR(nb_mlp_forward(m, xt, y, 1), NB_ERR_LAYOUT, "contiguous");
    NB_EXPECT_OK(nb_mlp_forward(m, x, y, 1));
    NB_EXPECT_ERR(nb_mlp_backward(m, dy5, NULL), NB_ERR_SHAPE, "last training forward had batch 4");
    NB_EXPECT_ERR(nb_mlp_backward(m, dy, y), NB_ERR_SHAPE, "dx has shape [4,3]");
    NB_EXPECT_OK(nb_mlp_backward(m, dy, NULL));
    nb_tensor *ts[] = {x, y, bad_x, y5, dy, dy5, x0, y0, xi, xt, xbig};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) nb_tensor_free(ts[i]);
    nb_mlp_free(m);
    nb_device_close(cpu);
}

static void test_cuda_device_mismatch(void) {
    nb_device *gpu, *cpu;
    OPEN_CUDA_OR_SKIP(gpu);
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_mlp_config c = nb_mlp_config_default(5, 3, 16, 1);
    nb_mlp *m;
    NB_REQUIRE_OK(nb_mlp_create(gpu, &c, &m));
    nb_tensor *x = mat(cpu, 4, 5, NULL), *y = mat(gpu, 4, 3, NULL);
    NB_EXPECT_ERR(nb_mlp_forward(m, x, y, 1), NB_ERR_INVALID_ARG, "x is on cpu but the mlp is on cuda:0");
    nb_tensor_free(x);
    nb_tensor_free(y);
    nb_mlp_free(m);
    nb_device_close(cpu);
    nb_device_close(gpu);
}

/* ---- CPU reference vs finite differences of an exact double model ------------------------ */

typedef struct dmodel {
    const nb_mlp *m;
    const nb_mlp_config *c;
    double *p; /* params */
} dmodel;

static double dact(nb_activation a, double x) {
    switch (a) {
    case NB_ACT_RELU: return x > 0 ? x : 0;
    case NB_ACT_LEAKY_RELU: return x > 0 ? x : 0.01 * x;
    case NB_ACT_SILU: return x / (1 + exp(-x));
    case NB_ACT_SIGMOID: return 1 / (1 + exp(-x));
    case NB_ACT_TANH: return tanh(x);
    default: return x;
    }
}

/* L = sum_b sum_o dy[b][o] * y[b][o] for input x (double). */
static double dloss(const dmodel *d, const double *x, const float *dy, int B) {
    const nb_mlp_config *c = d->c;
    int L = nb_mlp_n_layers(d->m);
    double h[256], z[256], loss = 0;
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < c->n_in; i++) h[i] = x[b * c->n_in + i];
        for (int l = 0; l < L; l++) {
            int64_t wo, bo;
            int R, C;
            nb_mlp_layer_info(d->m, l, &wo, &bo, &R, &C);
            for (int o = 0; o < R; o++) {
                double s = bo >= 0 ? d->p[bo + o] : 0;
                for (int i = 0; i < C; i++) s += d->p[wo + o * C + i] * h[i];
                z[o] = s;
            }
            for (int o = 0; o < R; o++) h[o] = dact(l == L - 1 ? c->out_act : c->act, z[o]);
        }
        for (int o = 0; o < c->n_out; o++) loss += dy[b * c->n_out + o] * h[o];
    }
    return loss;
}

static void fd_check(nb_activation act, nb_activation out_act, int bias) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_mlp_config c = nb_mlp_config_default(5, 3, 16, 2);
    c.act = act;
    c.out_act = out_act;
    c.bias = bias;
    nb_mlp *m;
    NB_REQUIRE_OK(nb_mlp_create(cpu, &c, &m));
    NB_REQUIRE_OK(nb_mlp_init_params(m, 3));
    int64_t P = nb_mlp_n_params(m);
    float *pf = nb_tensor_data(nb_mlp_params(m));
    for (int64_t i = 0; i < P; i++) pf[i] += (float)(0.1 * (urand() - 0.5)); /* nonzero biases */
    const int B = 6;
    float *xf = rand_array(B * 5, -1, 1), *dyf = rand_array(B * 3, -1, 1);
    nb_tensor *x = mat(cpu, B, 5, xf), *y = mat(cpu, B, 3, NULL), *dy = mat(cpu, B, 3, dyf);
    nb_tensor *dx = mat(cpu, B, 5, NULL);
    NB_REQUIRE_OK(nb_mlp_forward(m, x, y, 1));
    NB_REQUIRE_OK(nb_mlp_backward(m, dy, dx));
    const float *g = nb_tensor_data(nb_mlp_grads(m)), *gx = nb_tensor_data(dx);
    double *p = malloc(sizeof(double) * (size_t)P), *xd = malloc(sizeof(double) * B * 5);
    for (int64_t i = 0; i < P; i++) p[i] = pf[i];
    for (int i = 0; i < B * 5; i++) xd[i] = xf[i];
    dmodel d = {m, &c, p};
    const double eps = 1e-6;
    float *fd = malloc(sizeof(float) * (size_t)P), *fdx = malloc(sizeof(float) * B * 5);
    for (int64_t i = 0; i < P; i++) {
        double s = p[i];
        p[i] = s + eps;
        double lp = dloss(&d, xd, dyf, B);
        p[i] = s - eps;
        double lm = dloss(&d, xd, dyf, B);
        p[i] = s;
        fd[i] = (float)((lp - lm) / (2 * eps));
    }
    for (int i = 0; i < B * 5; i++) {
        double s = xd[i];
        xd[i] = s + eps;
        double lp = dloss(&d, xd, dyf, B);
        xd[i] = s - eps;
        double lm = dloss(&d, xd, dyf, B);
        xd[i] = s;
        fdx[i] = (float)((lp - lm) / (2 * eps));
    }
    /* Half-precision operands: agreement to about 1e-2 normwise. */
    double ep = rel_err(g, fd, P, 1e-3), ex = rel_err(gx, fdx, B * 5, 1e-3);
    if (!(ep < 2e-2 && ex < 2e-2) || getenv("NB_MLP_VERBOSE"))
        fprintf(stderr, "  act %s/%s bias %d: param grad err %.3g, input grad err %.3g\n",
                nb_activation_name(act), nb_activation_name(out_act), bias, ep, ex);
    NB_EXPECT(ep < 2e-2);
    NB_EXPECT(ex < 2e-2);
    /* And the forward against the double model. */
    const float *yf = nb_tensor_data(y);
    double l_lib = 0;
    for (int i = 0; i < B * 3; i++) l_lib += dyf[i] * yf[i];
    double l_ref = dloss(&d, xd, dyf, B);
    NB_EXPECT(fabs(l_lib - l_ref) <= 2e-2 * (fabs(l_ref) + 0.1));
    free(p); free(xd); free(fd); free(fdx); free(xf); free(dyf);
    nb_tensor_free(x); nb_tensor_free(y); nb_tensor_free(dy); nb_tensor_free(dx);
    nb_mlp_free(m);
    nb_device_close(cpu);
}

static void test_cpu_finite_differences(void) {
    for (int a = 0; a < NB_ACT_COUNT; a++) fd_check((nb_activation)a, NB_ACT_NONE, a % 2);
    fd_check(NB_ACT_RELU, NB_ACT_SIGMOID, 1);
    fd_check(NB_ACT_TANH, NB_ACT_TANH, 0);
    fd_check(NB_ACT_SILU, NB_ACT_SILU, 1);
}

static void test_cpu_inference_keeps_saved_state(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_mlp_config c = nb_mlp_config_default(7, 2, 32, 2);
    c.bias = 1;
    nb_mlp *m;
    NB_REQUIRE_OK(nb_mlp_create(cpu, &c, &m));
    NB_REQUIRE_OK(nb_mlp_init_params(m, 5));
    float *xf = rand_array(10 * 7, -1, 1), *x2f = rand_array(3 * 7, -1, 1), *dyf = rand_array(20, -1, 1);
    nb_tensor *x = mat(cpu, 10, 7, xf), *y = mat(cpu, 10, 2, NULL), *dy = mat(cpu, 10, 2, dyf);
    nb_tensor *x2 = mat(cpu, 3, 7, x2f), *y2 = mat(cpu, 3, 2, NULL);
    NB_REQUIRE_OK(nb_mlp_forward(m, x, y, 1));
    NB_REQUIRE_OK(nb_mlp_backward(m, dy, NULL));
    float *g1 = to_host(nb_mlp_grads(m));
    NB_REQUIRE_OK(nb_mlp_forward(m, x, y, 1));
    NB_REQUIRE_OK(nb_mlp_inference(m, x2, y2));
    NB_REQUIRE_OK(nb_mlp_backward(m, dy, NULL));
    float *g2 = to_host(nb_mlp_grads(m));
    NB_EXPECT(memcmp(g1, g2, sizeof(float) * (size_t)nb_mlp_n_params(m)) == 0);
    free(g1); free(g2); free(xf); free(x2f); free(dyf);
    nb_tensor_free(x); nb_tensor_free(y); nb_tensor_free(dy); nb_tensor_free(x2); nb_tensor_free(y2);
    nb_mlp_free(m);
    nb_device_close(cpu);
}

static void test_cpu_f16_input(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_mlp_config c = nb_mlp_config_default(5, 2, 16, 1);
    nb_mlp *m;
    NB_REQUIRE_OK(nb_mlp_create(cpu, &c, &m));
    NB_REQUIRE_OK(nb_mlp_init_params(m, 9));
    float xf[15];
    uint16_t xh[15];
    for (int i = 0; i < 15; i++) {
        xh[i] = nb_f32_to_f16((float)(urand() * 2 - 1));
        xf[i] = nb_f16_to_f32(xh[i]);
    }
    int64_t sh[2] = {3, 5};
    nb_tensor *x32 = mat(cpu, 3, 5, xf), *x16 = NULL, *y1 = mat(cpu, 3, 2, NULL), *y2 = mat(cpu, 3, 2, NULL);
    NB_REQUIRE_OK(nb_tensor_from_host(cpu, NB_F16, 2, sh, xh, &x16));
    NB_EXPECT_OK(nb_mlp_inference(m, x32, y1));
    NB_EXPECT_OK(nb_mlp_inference(m, x16, y2));
    NB_EXPECT(memcmp(nb_tensor_data(y1), nb_tensor_data(y2), 6 * sizeof(float)) == 0);
    nb_tensor_free(x32); nb_tensor_free(x16); nb_tensor_free(y1); nb_tensor_free(y2);
    nb_mlp_free(m);
    nb_device_close(cpu);
}

/* ---- CUDA vs the CPU reference ------------------------------------------------------------- */

typedef struct cmp_case {
    int n_in, n_out, width, hidden, batch;
    nb_activation act, out_act;
    int bias;
    nb_dtype compute;
    int x_f16;
} cmp_case;

static int compare_case(nb_device *gpu, nb_device *cpu, const cmp_case *k) {
    nb_mlp_config c = nb_mlp_config_default(k->n_in, k->n_out, k->width, k->hidden);
    c.act = k->act;
    c.out_act = k->out_act;
    c.bias = k->bias;
    c.compute = k->compute;
    nb_mlp *mg = NULL, *mc = NULL;
    int fails = 0;
    if (nb_mlp_create(gpu, &c, &mg) != NB_OK || nb_mlp_create(cpu, &c, &mc) != NB_OK) {
        fprintf(stderr, "  create: %s\n", nb_last_error());
        nb_mlp_free(mg);
        nb_mlp_free(mc);
        return 1;
    }
    nb_mlp_init_params(mc, 11);
    int64_t P = nb_mlp_n_params(mc);
    float *pf = nb_tensor_data(nb_mlp_params(mc));
    if (k->bias)
        for (int l = 0; l < nb_mlp_n_layers(mc); l++) {
            int64_t bo;
            int R;
            nb_mlp_layer_info(mc, l, NULL, &bo, &R, NULL);
            for (int o = 0; o < R; o++) pf[bo + o] = (float)(0.2 * (urand() - 0.5));
        }
    nb_tensor_from_host_into(nb_mlp_params(mg), pf, sizeof(float) * (size_t)P);
    int B = k->batch;
    float *xf = rand_array((int64_t)B * k->n_in, -1, 1);
    float *dyf = rand_array((int64_t)B * k->n_out, -1, 1);
    if (k->x_f16) /* exactly representable inputs, so f16 and f32 inputs agree */
        for (int64_t i = 0; i < (int64_t)B * k->n_in; i++) xf[i] = nb_f16_to_f32(nb_f32_to_f16(xf[i]));
    nb_tensor *xc = mat(cpu, B, k->n_in, xf), *yc = mat(cpu, B, k->n_out, NULL);
    nb_tensor *dyc = mat(cpu, B, k->n_out, dyf), *dxc = mat(cpu, B, k->n_in, NULL);
    nb_tensor *xg = NULL, *yg = mat(gpu, B, k->n_out, NULL), *yig = mat(gpu, B, k->n_out, NULL);
    nb_tensor *dyg = mat(gpu, B, k->n_out, dyf), *dxg = mat(gpu, B, k->n_in, NULL);
    if (k->x_f16) {
        uint16_t *xh = malloc(sizeof(uint16_t) * (size_t)B * k->n_in);
        for (int64_t i = 0; i < (int64_t)B * k->n_in; i++) xh[i] = nb_f32_to_f16(xf[i]);
        int64_t sh[2] = {B, k->n_in};
        nb_tensor_from_host(gpu, NB_F16, 2, sh, xh, &xg);
        free(xh);
    } else {
        xg = mat(gpu, B, k->n_in, xf);
    }
    nb_status s = nb_mlp_forward(mc, xc, yc, 1);
    if (s == NB_OK) s = nb_mlp_backward(mc, dyc, dxc);
    if (s == NB_OK) s = nb_mlp_forward(mg, xg, yg, 1);
    if (s == NB_OK) s = nb_mlp_inference(mg, xg, yig);
    if (s == NB_OK) s = nb_mlp_backward(mg, dyg, dxg);
    if (s == NB_OK) s = nb_device_synchronize(gpu);
    if (s != NB_OK) {
        fprintf(stderr, "  %s: %s\n", nb_status_name(s), nb_last_error());
        fails++;
    } else {
        double tol = k->compute == NB_BF16 ? 4e-2 : 1e-2;
        float *y1 = to_host(yc), *y2 = to_host(yg), *y3 = to_host(yig);
        float *dx1 = to_host(dxc), *dx2 = to_host(dxg);
        float *g1 = to_host(nb_mlp_grads(mc)), *g2 = to_host(nb_mlp_grads(mg));
        double ey = rel_err(y2, y1, (int64_t)B * k->n_out, 1e-6);
        double ei = rel_err(y3, y2, (int64_t)B * k->n_out, 1e-6);
        double ex = rel_err(dx2, dx1, (int64_t)B * k->n_in, 1e-6);
        double eg = rel_err(g2, g1, P, 1e-6);
        /* per layer too, so a small layer is not hidden by a big one */
        double egl = 0;
        for (int l = 0; l < nb_mlp_n_layers(mc); l++) {
            int64_t wo, bo;
            int R, C;
            nb_mlp_layer_info(mc, l, &wo, &bo, &R, &C);
            double e = rel_err(g2 + wo, g1 + wo, (int64_t)R * C, 1e-6);
            if (e > egl) egl = e;
            if (bo >= 0) {
                e = rel_err(g2 + bo, g1 + bo, R, 1e-6);
                if (e > egl) egl = e;
            }
        }
        int bad = !(ey < tol) || !(ei == 0) || !(ex < 2 * tol) || !(eg < 2 * tol) || !(egl < 3 * tol);
        if (bad || getenv("NB_MLP_VERBOSE"))
            fprintf(stderr,
                    "  %s in %d out %d w %d h %d B %d act %s/%s bias %d %s%s: y %.2e infer %.2e "
                    "dx %.2e grads %.2e (worst layer %.2e)\n",
                    bad ? "MISMATCH" : "ok", k->n_in, k->n_out, k->width, k->hidden, B,
                    nb_activation_name(k->act), nb_activation_name(k->out_act), k->bias,
                    nb_dtype_name(k->compute), k->x_f16 ? " x f16" : "", ey, ei, ex, eg, egl);
        fails += bad;
        free(y1); free(y2); free(y3); free(dx1); free(dx2); free(g1); free(g2);
    }
    nb_tensor *ts[] = {xc, yc, dyc, dxc, xg, yg, yig, dyg, dxg};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) nb_tensor_free(ts[i]);
    free(xf);
    free(dyf);
    nb_mlp_free(mg);
    nb_mlp_free(mc);
    return fails;
}

/* Every comparison runs the backward the shape selects (mlp_cuda.c): recompute (mlp_bwd_rc,
 * widths <= 64 without an output activation), fused (mlp_bwd_fused + mlp_dw_reduce_w, where the
 * weights fit in shared memory) or split (mlp_bwd + mlp_dw, e.g. width 128 with 3+ hidden
 * layers); the cases below include each. */
/* $NB_MLP_TEST_SHARD = "i/n" runs only the comparisons with index % n == i (the device script
 * runs shards in parallel: every new configuration costs an NVRTC compile of a few seconds). */
static int in_shard(int idx) {
    const char *s = getenv("NB_MLP_TEST_SHARD");
    int i = 0, n = 1;
    if (!s || sscanf(s, "%d/%d", &i, &n) != 2 || n < 1) return 1;
    return idx % n == i;
}

static void test_cuda_vs_cpu(void) {
    nb_device *gpu, *cpu;
    OPEN_CUDA_OR_SKIP(gpu);
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    const int widths[4] = {16, 32, 64, 128};
    const int batches[4] = {1, 7, 129, 1000};
    int fails = 0, n = 0;
    for (int wi = 0; wi < 4; wi++) {
        for (int bi = 0; bi < 4; bi++) {
            int v = wi * 4 + bi;
            cmp_case k = {.n_in = (v % 3 == 0) ? 3 : (v % 3 == 1) ? 17 : widths[wi],
                          .n_out = (v % 2 == 0) ? 1 : (v % 4 == 1) ? 5 : 16,
                          .width = widths[wi],
                          .hidden = 1 + v % 3,
                          .batch = batches[bi],
                          .act = (nb_activation)(1 + v % 5),
                          .out_act = (v % 4 == 3) ? NB_ACT_SIGMOID : NB_ACT_NONE,
                          .bias = v % 2,
                          .compute = (v % 5 == 4) ? NB_BF16 : NB_F16,
                          .x_f16 = (v % 7 == 6)};
            if (!in_shard(v)) continue;
            fails += compare_case(gpu, cpu, &k);
            n++;
        }
    }
    /* The fit-image shape, a deep one, bf16 at every width, big odd in/out. */
    cmp_case extra[] = {
        {32, 3, 64, 2, 4099, NB_ACT_RELU, NB_ACT_NONE, 0, NB_F16, 0},
        {64, 64, 64, 5, 1000, NB_ACT_RELU, NB_ACT_NONE, 0, NB_F16, 0},
        {3, 1, 32, 8, 333, NB_ACT_TANH, NB_ACT_NONE, 1, NB_F16, 0},
        {16, 16, 16, 3, 517, NB_ACT_SILU, NB_ACT_TANH, 1, NB_BF16, 0},
        {32, 32, 32, 3, 517, NB_ACT_LEAKY_RELU, NB_ACT_NONE, 0, NB_BF16, 1},
        {64, 64, 64, 3, 517, NB_ACT_SIGMOID, NB_ACT_NONE, 1, NB_BF16, 0},
        {128, 128, 128, 3, 517, NB_ACT_RELU, NB_ACT_SILU, 1, NB_BF16, 0},
        {200, 70, 64, 2, 300, NB_ACT_RELU, NB_ACT_NONE, 1, NB_F16, 1},
        {130, 33, 128, 1, 65, NB_ACT_TANH, NB_ACT_SIGMOID, 0, NB_F16, 0},
    };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        if (!in_shard(16 + (int)i)) continue;
        fails += compare_case(gpu, cpu, &extra[i]);
        n++;
    }
    printf("  %d of %d CUDA/CPU comparisons agree\n", n - fails, n);
    NB_EXPECT(fails == 0);
    nb_device_close(cpu);
    nb_device_close(gpu);
}

/* The fit-image shape at a batch where every persistent block of the recomputing backward takes
 * several block tiles (2^15 + 3 rows: ~2 per block on 132 SMs, more on smaller GPUs), so the
 * weight-gradient sums carried across tiles (scratch read-modify-write) are checked. In shard 0
 * of NB_MLP_TEST_SHARD. */
static void test_cuda_vs_cpu_fit_shape_large(void) {
    nb_device *gpu, *cpu;
    OPEN_CUDA_OR_SKIP(gpu);
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    cmp_case k = {32, 3, 64, 2, (1 << 15) + 3, NB_ACT_RELU, NB_ACT_NONE, 0, NB_F16, 1};
    if (in_shard(0)) NB_EXPECT(compare_case(gpu, cpu, &k) == 0);
    nb_device_close(cpu);
    nb_device_close(gpu);
}

/* width, hidden layers, output activation: picks the backward path (see test_cuda_vs_cpu) */
static void steady_state(int width, int hidden, nb_activation out_act) {
    nb_device *gpu;
    OPEN_CUDA_OR_SKIP(gpu);
    nb_mlp_config c = nb_mlp_config_default(32, 3, width, hidden);
    c.bias = 1;
    c.out_act = out_act;
    nb_mlp *m;
    NB_REQUIRE_OK(nb_mlp_create(gpu, &c, &m));
    NB_REQUIRE_OK(nb_mlp_init_params(m, 1));
    int B = 5000;
    float *xf = rand_array((int64_t)B * 32, -1, 1), *dyf = rand_array((int64_t)B * 3, -1, 1);
    nb_tensor *x = mat(gpu, B, 32, xf), *y = mat(gpu, B, 3, NULL), *dy = mat(gpu, B, 3, dyf);
    nb_tensor *dx = mat(gpu, B, 32, NULL);
    NB_REQUIRE_OK(nb_mlp_forward(m, x, y, 1));
    NB_REQUIRE_OK(nb_mlp_backward(m, dy, dx));
    nb_mem_stats s0, s1;
    NB_REQUIRE_OK(nb_device_mem_stats(gpu, &s0));
    for (int i = 0; i < 5; i++) {
        NB_EXPECT_OK(nb_mlp_forward(m, x, y, 1));
        NB_EXPECT_OK(nb_mlp_backward(m, dy, dx));
        NB_EXPECT_OK(nb_mlp_inference(m, x, y));
    }
    NB_EXPECT_OK(nb_device_synchronize(gpu));
    NB_REQUIRE_OK(nb_device_mem_stats(gpu, &s1));
    NB_EXPECT(s1.driver_allocs == s0.driver_allocs);
    NB_EXPECT(s1.bytes_in_use == s0.bytes_in_use);
    NB_EXPECT(nb_mlp_workspace_bytes(m) > 0);
    free(xf);
    free(dyf);
    nb_tensor_free(x); nb_tensor_free(y); nb_tensor_free(dy); nb_tensor_free(dx);
    nb_mlp_free(m);
    nb_device_close(gpu);
}

static void test_cuda_steady_state_no_alloc(void) {
    steady_state(128, 4, NB_ACT_NONE);   /* split */
    steady_state(64, 2, NB_ACT_SIGMOID); /* fused */
    steady_state(64, 2, NB_ACT_NONE);    /* recompute */
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_config_errors, test_param_layout, test_call_errors,
                 test_cuda_device_mismatch, test_cpu_finite_differences,
                 test_cpu_inference_keeps_saved_state, test_cpu_f16_input, test_cuda_vs_cpu,
                 test_cuda_vs_cpu_fit_shape_large,
                 test_cuda_steady_state_no_alloc);
}

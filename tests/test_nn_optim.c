/* Adam / AdamW against a hand-written double reference, multi-segment steps, losses (values,
 * gradients, accumulation), CUDA vs CPU, bad arguments. */
#include "nabla/nn_optim.h"
#include "nb_test.h"
#include "nb_test_alloc.h"

static nb_tensor *vec(nb_device *dev, int64_t n, const float *data) {
    nb_tensor *t = NULL;
    if (data)
        nb_tensor_from_host(dev, NB_F32, 1, &n, data, &t);
    else
        nb_tensor_zeros(dev, NB_F32, 1, &n, &t);
    return t;
}

static void get(const nb_tensor *t, float *out) { nb_tensor_to_host(t, out, nb_tensor_nbytes(t)); }

/* PyTorch's Adam/AdamW in double, steps 1..T with the given gradient sequence g(t, i). */
static void adam_ref(double *p, int n, int T, double lr, double b1, double b2, double eps, double wd,
                     int decoupled, double (*g)(int t, int i)) {
    double m[16] = {0}, v[16] = {0};
    for (int t = 1; t <= T; t++)
        for (int i = 0; i < n; i++) {
            double gi = g(t, i) + (decoupled ? 0.0 : wd * p[i]);
            m[i] = b1 * m[i] + (1 - b1) * gi;
            v[i] = b2 * v[i] + (1 - b2) * gi * gi;
            if (decoupled) p[i] -= lr * wd * p[i];
            double mh = m[i] / (1 - pow(b1, t)), vh = v[i] / (1 - pow(b2, t));
            p[i] -= lr * mh / (sqrt(vh) + eps);
        }
}

static double grad_seq(int t, int i) { return sin(1.3 * t + 0.7 * i) * (i + 1) * 0.1; }

static void run_adam(const char *devname, int decoupled) {
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open(devname, &dev));
    enum { N = 7, T = 5 };
    float p0[N];
    double ref[N];
    for (int i = 0; i < N; i++) ref[i] = p0[i] = 0.5f - 0.15f * i;
    nb_adam_config c = nb_adam_config_default();
    c.lr = 0.05f;
    c.beta2 = 0.99f;
    c.weight_decay = 0.1f;
    c.decoupled = decoupled;
    adam_ref(ref, N, T, c.lr, c.beta1, c.beta2, c.eps, c.weight_decay, decoupled, grad_seq);
    nb_adam *opt;
    NB_REQUIRE_OK(nb_adam_create(dev, N, &c, &opt));
    nb_tensor *p = vec(dev, N, p0), *g = vec(dev, N, NULL);
    for (int t = 1; t <= T; t++) {
        float gh[N];
        for (int i = 0; i < N; i++) gh[i] = (float)grad_seq(t, i);
        NB_REQUIRE_OK(nb_tensor_from_host_into(g, gh, sizeof gh));
        NB_REQUIRE_OK(nb_adam_step(opt, p, g, t == T));
    }
    NB_EXPECT(nb_adam_steps(opt) == T);
    float ph[N], gh[N];
    get(p, ph);
    get(g, gh);
    for (int i = 0; i < N; i++) {
        NB_EXPECT_NEAR(ph[i], ref[i], 2e-6);
        NB_EXPECT(gh[i] == 0.0f); /* zero_grads on the last step */
    }
    nb_tensor_free(p), nb_tensor_free(g);
    nb_adam_destroy(opt);
    nb_device_close(dev);
}

static void test_adam_cpu(void) { run_adam("cpu", 0); }
static void test_adamw_cpu(void) { run_adam("cpu", 1); }
static void test_adam_cuda(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    run_adam("cuda", 0);
    run_adam("cuda", 1);
}

/* Two segments in one step = one step over their concatenation. */
static void run_multi(const char *devname) {
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open(devname, &dev));
    enum { A = 5000, B = 3 };
    static float pa[A + B], ga[A + B];
    for (int i = 0; i < A + B; i++) pa[i] = sinf((float)i), ga[i] = cosf(0.3f * i);
    nb_adam_config c = nb_adam_config_default();
    nb_adam *o1, *o2;
    NB_REQUIRE_OK(nb_adam_create(dev, A + B, &c, &o1));
    NB_REQUIRE_OK(nb_adam_create(dev, A + B, &c, &o2));
    nb_tensor *p = vec(dev, A + B, pa), *g = vec(dev, A + B, ga);
    nb_tensor *p1 = vec(dev, A, pa), *g1 = vec(dev, A, ga), *p2 = vec(dev, B, pa + A), *g2 = vec(dev, B, ga + A);
    nb_tensor *ps[2] = {p1, p2}, *gs[2] = {g1, g2};
    for (int t = 0; t < 3; t++) {
        NB_REQUIRE_OK(nb_adam_step(o1, p, g, 0));
        NB_REQUIRE_OK(nb_adam_step_multi(o2, 2, ps, gs, 0));
    }
    static float r[A + B], r1[A], r2[B];
    get(p, r), get(p1, r1), get(p2, r2);
    NB_EXPECT(memcmp(r, r1, sizeof r1) == 0 && memcmp(r + A, r2, sizeof r2) == 0);
    NB_EXPECT(r[0] != pa[0]);
    /* sizes must add up */
    NB_EXPECT_ERR(nb_adam_step_multi(o2, 1, ps, gs, 0), NB_ERR_SHAPE, "hold 5000 values but the optimizer was made for 5003");
    NB_EXPECT_ERR(nb_adam_step_multi(o2, 2, ps, ps + 1, 0), NB_ERR_SHAPE, "grads[0]");
    NB_EXPECT_ERR(nb_adam_step_multi(o2, 0, ps, gs, 0), NB_ERR_INVALID_ARG, "0 segments");
    nb_tensor *ts[] = {p, g, p1, g1, p2, g2};
    for (int i = 0; i < 6; i++) nb_tensor_free(ts[i]);
    nb_adam_destroy(o1), nb_adam_destroy(o2);
    nb_device_close(dev);
}

static void test_adam_multi_cpu(void) { run_multi("cpu"); }
static void test_adam_multi_cuda(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    run_multi("cuda");
}

/* The step is a prepared call per segment, kept across steps: other arrays of the same length
 * (here: a copy, and an offset view of a larger buffer, which on CUDA needs another kernel than
 * an aligned array) and zero_grads switching between steps give the same values as one array
 * stepped throughout; once warm a step allocates nothing. */
static void run_prepared(const char *devname) {
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open(devname, &dev));
    enum { N = 1030, T = 6 };
    static float p0[N], gh[N], r1[N], r2[N];
    for (int i = 0; i < N; i++) p0[i] = sinf(0.1f * i);
    nb_adam_config c = nb_adam_config_default();
    c.decoupled = 1;
    c.weight_decay = 0.01f;
    nb_adam *o1, *o2;
    NB_REQUIRE_OK(nb_adam_create(dev, N, &c, &o1));
    NB_REQUIRE_OK(nb_adam_create(dev, N, &c, &o2));
    nb_tensor *p1 = vec(dev, N, p0), *g1 = vec(dev, N, NULL), *pa = vec(dev, N, p0), *ga = vec(dev, N, NULL);
    nb_tensor *big = vec(dev, N + 1, NULL), *gbig = vec(dev, N + 1, NULL), *pb = NULL, *gb = NULL;
    NB_REQUIRE_OK(nb_tensor_slice(big, 0, 1, N + 1, 1, &pb));
    NB_REQUIRE_OK(nb_tensor_slice(gbig, 0, 1, N + 1, 1, &gb));
    for (int t = 1; t <= T; t++) {
        for (int i = 0; i < N; i++) gh[i] = (float)grad_seq(t, i % 16);
        int zero = t % 2;
        nb_tensor *p2 = t >= 4 ? pb : pa, *g2 = t >= 4 ? gb : ga;
        if (t == 4) { /* o2 moves to the offset view, values as they are */
            get(pa, r2);
            NB_REQUIRE_OK(nb_tensor_from_host_into(pb, r2, sizeof r2));
        }
        NB_REQUIRE_OK(nb_tensor_from_host_into(g1, gh, sizeof gh));
        NB_REQUIRE_OK(nb_tensor_from_host_into(g2, gh, sizeof gh));
        NB_REQUIRE_OK(nb_adam_step(o1, p1, g1, zero));
        NB_REQUIRE_OK(nb_adam_step(o2, p2, g2, zero));
        get(g2, r2);
        NB_EXPECT(zero ? r2[7] == 0.0f && r2[N - 1] == 0.0f : r2[7] == gh[7]);
    }
    get(p1, r1), get(pb, r2);
    NB_EXPECT(memcmp(r1, r2, sizeof r1) == 0);
    NB_EXPECT(r1[3] != p0[3]);
    NB_EXPECT_OK(nb_adam_step(o2, pb, gb, 1)); /* (zero_grads changed: prepared again) */
    nb_device_synchronize(dev);
    nb_test_count_allocs_begin();
    for (int t = 0; t < 4; t++) NB_EXPECT_OK(nb_adam_step(o2, pb, gb, 1));
    nb_test_count_allocs_end();
    NB_EXPECT(nb_test_allocs == 0);
    nb_tensor *ts[] = {p1, g1, pa, ga, big, gbig, pb, gb};
    for (int i = 0; i < 8; i++) nb_tensor_free(ts[i]);
    nb_adam_destroy(o1), nb_adam_destroy(o2);
    nb_device_close(dev);
}

static void test_adam_prepared_cpu(void) { run_prepared("cpu"); }
static void test_adam_prepared_cuda(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    run_prepared("cuda");
}

static void test_adam_bad(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_adam *o = NULL;
    nb_adam_config c = nb_adam_config_default();
    NB_EXPECT_ERR(nb_adam_create(cpu, 0, &c, &o), NB_ERR_INVALID_ARG, "n_params = 0");
    c.lr = -1;
    NB_EXPECT_ERR(nb_adam_create(cpu, 4, &c, &o), NB_ERR_INVALID_ARG, "lr = -1");
    c = nb_adam_config_default();
    c.beta1 = 1.0f;
    NB_EXPECT_ERR(nb_adam_create(cpu, 4, &c, &o), NB_ERR_INVALID_ARG, "betas");
    NB_EXPECT(o == NULL);
    c = nb_adam_config_default();
    NB_REQUIRE_OK(nb_adam_create(cpu, 4, &c, &o));
    NB_EXPECT_ERR(nb_adam_set_lr(o, 0.0f), NB_ERR_INVALID_ARG, "lr = 0");
    nb_tensor *p = vec(cpu, 4, NULL), *g = vec(cpu, 5, NULL);
    NB_EXPECT_ERR(nb_adam_step(o, p, g, 0), NB_ERR_SHAPE, "grads[0] has shape [5], expected [4]");
    NB_EXPECT_ERR(nb_adam_step(o, p, NULL, 0), NB_ERR_INVALID_ARG, "grads[0] is NULL");
    NB_EXPECT(nb_adam_steps(o) == 0);
    NB_EXPECT_OK(nb_adam_reset(o));
    nb_tensor_free(p), nb_tensor_free(g);
    nb_adam_destroy(o);
    nb_device_close(cpu);
}

static void run_losses(const char *devname) {
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open(devname, &dev));
    enum { N = 10000 };
    static float y[N], t[N], d[N];
    for (int i = 0; i < N; i++) y[i] = sinf(0.01f * i), t[i] = cosf(0.013f * i) * 0.5f;
    int64_t shape[2] = {N / 4, 4};
    nb_tensor *yt, *tt, *dt, *loss;
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 2, shape, y, &yt));
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 2, shape, t, &tt));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 2, shape, &dt));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 0, NULL, &loss));
    for (int kind = 0; kind < 3; kind++) {
        double ref = 0;
        for (int i = 0; i < N; i++) {
            double e = (double)y[i] - t[i];
            ref += kind == 0 ? e * e : kind == 1 ? fabs(e) : e * e / ((double)y[i] * y[i] + 0.01);
        }
        ref /= N;
        NB_REQUIRE_OK(nb_tensor_fill_bytes(loss, 0));
        NB_REQUIRE_OK(nb_loss((nb_loss_kind)kind, yt, tt, loss, dt));
        NB_REQUIRE_OK(nb_loss((nb_loss_kind)kind, yt, tt, loss, NULL)); /* accumulates */
        float l;
        get(loss, &l);
        NB_EXPECT_NEAR(l, 2 * ref, 1e-5 * (1 + ref));
        get(dt, d);
        int ok = 1;
        for (int i = 0; i < N; i++) {
            double e = (double)y[i] - t[i];
            double g = kind == 0 ? 2 * e : kind == 1 ? (e > 0) - (e < 0) : 2 * e / ((double)y[i] * y[i] + 0.01);
            ok &= fabs(d[i] - g / N) <= 1e-6 * (1 + fabs(g / N));
        }
        NB_EXPECT(ok);
    }
    NB_EXPECT_OK(nb_loss_l2(yt, tt, NULL, dt));
    NB_EXPECT_OK(nb_loss_l1(yt, tt, loss, NULL));
    NB_EXPECT_OK(nb_loss_relative_l2(yt, tt, loss, dt));
    nb_tensor_free(yt), nb_tensor_free(tt), nb_tensor_free(dt), nb_tensor_free(loss);
    nb_device_close(dev);
}

static void test_losses_cpu(void) { run_losses("cpu"); }
static void test_losses_cuda(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    run_losses("cuda");
}

static void test_loss_bad(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    int64_t s1[2] = {4, 3}, s2[2] = {3, 4};
    nb_tensor *a, *b, *l2, *li;
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F32, 2, s1, &a));
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F32, 2, s2, &b));
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F32, 1, s2, &l2));
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_I32, 0, NULL, &li));
    NB_EXPECT_ERR(nb_loss_l2(a, b, NULL, NULL), NB_ERR_SHAPE, "pred [4,3] and target [3,4] differ");
    NB_EXPECT_ERR(nb_loss_l2(a, a, NULL, b), NB_ERR_SHAPE, "dpred [3,4] must have pred's shape [4,3]");
    NB_EXPECT_ERR(nb_loss_l2(a, a, l2, NULL), NB_ERR_SHAPE, "one element");
    NB_EXPECT_ERR(nb_loss_l2(a, a, li, NULL), NB_ERR_DTYPE, "f32");
    NB_EXPECT_ERR(nb_loss((nb_loss_kind)7, a, a, NULL, NULL), NB_ERR_INVALID_ARG, "unknown loss");
    NB_EXPECT(nb_loss_from_name("relative_l2") == NB_LOSS_RELATIVE_L2 && nb_loss_from_name("l3") == -1);
    NB_EXPECT(!strcmp(nb_loss_name(NB_LOSS_L1), "l1"));
    nb_tensor_free(a), nb_tensor_free(b), nb_tensor_free(l2), nb_tensor_free(li);
    nb_device_close(cpu);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_adam_cpu, test_adamw_cpu, test_adam_cuda, test_adam_prepared_cpu, test_adam_prepared_cuda,
                 test_adam_multi_cpu,
                 test_adam_multi_cuda, test_adam_bad, test_losses_cpu, test_losses_cuda, test_loss_bad);
}

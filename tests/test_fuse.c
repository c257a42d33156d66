/* Fused elementwise kernels (src/graph/fuse*.c, the FUSED row of ops.def): the generated text
 * (exact, deterministic), the spec checks, and fused chains against the same chains of unfused
 * tape ops -- forward values and every input's gradient -- on the CPU, then on CUDA against the
 * CPU (skipped without a GPU; NB_REQUIRE_CUDA=1 makes that a failure); and each kind of bad
 * argument.
 *
 * Tolerance: the fused kernel runs the same f32 operations as the tape's CPU rows per element
 * (silu as v / (1 + exp(-v)), adds), so elementwise values agree to a rounding or two; sums
 * (the mse, the per-channel gradient) are taken in another order (the call's per-chunk double
 * accumulators vs the rows' float loops): max |a - b| / (1 + |b|) <= 1e-5. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/fuse.h"
#include "nabla/nn_tape.h"
#include "nb_test.h"
#include "nb_test_alloc.h"
#include "nb_test_nvrtc.h"

enum { N = 2, C = 3, H = 4, W = 5 };
#define NUMEL ((int64_t)N * C * H * W)
static const int64_t S4[4] = {N, C, H, W}, S2[2] = {N, C};

/* ---- the generated text ------------------------------------------------------------------------- */

static void test_codegen_text(void) {
    nb_fuse_spec s = {0};
    int x = nb_fuse_add_input(&s, NB_FUSE_FULL), c = nb_fuse_add_input(&s, NB_FUSE_CHANNEL);
    int t = nb_fuse_add_input(&s, NB_FUSE_FULL);
    int a = nb_fuse_add_node(&s, NB_TOP_ADD_CHANNEL, 2, (int[]){x, c});
    int y = nb_fuse_add_node(&s, NB_TOP_SILU, 1, (int[]){a});
    nb_fuse_add_node(&s, NB_TOP_MSE, 2, (int[]){y, t});
    char *text = NULL, *again = NULL;
    NB_REQUIRE_OK(nb_fuse_codegen(&s, "nb_fused", &text));
    const char *want = "// nabla fused kernel: add_channel+silu+mse\n"
                       "// x0 [full], x1 [channel], x2 [full]; reduction: w * term, summed (w = 1/n: the mean)\n"
                       "[Differentiable]\n"
                       "float nb_fused(float x0, float x1, float x2, float w)\n"
                       "{\n"
                       "    float t0 = x0 + x1; // add_channel\n"
                       "    float t1 = t0 / (1.0 + exp(-t0)); // silu\n"
                       "    float t2 = (t1 - x2) * (t1 - x2); // mse\n"
                       "    return w * t2;\n"
                       "}\n";
    if (strcmp(text, want)) {
        fprintf(stderr, "  generated:\n%s  expected:\n%s", text, want);
        nb_test_failures_++;
    }
    /* the same structure built again: the same bytes (the disk cache's key) */
    nb_fuse_spec s2 = {0};
    nb_fuse_add_input(&s2, NB_FUSE_FULL);
    nb_fuse_add_input(&s2, NB_FUSE_CHANNEL);
    nb_fuse_add_input(&s2, NB_FUSE_FULL);
    nb_fuse_add_node(&s2, NB_TOP_ADD_CHANNEL, 2, (int[]){0, 1});
    nb_fuse_add_node(&s2, NB_TOP_SILU, 1, (int[]){3});
    nb_fuse_add_node(&s2, NB_TOP_MSE, 2, (int[]){4, 2});
    NB_REQUIRE_OK(nb_fuse_codegen(&s2, "nb_fused", &again));
    NB_EXPECT(!strcmp(text, again));
    nb_fuse_free_text(again);
    /* another structure (the mse's operands swapped): other bytes */
    s2.node[2].in[0] = 2;
    s2.node[2].in[1] = 4;
    NB_REQUIRE_OK(nb_fuse_codegen(&s2, "nb_fused", &again));
    NB_EXPECT(strcmp(text, again) != 0);
    nb_fuse_free_text(again);
    nb_fuse_free_text(text);
    char d[64];
    NB_EXPECT(!strcmp(nb_fuse_describe(&s, d, sizeof d), "add_channel+silu+mse"));
    NB_EXPECT(nb_fuse_kind_fusable(NB_TOP_SILU) && !nb_fuse_kind_fusable(NB_TOP_LINEAR));
    NB_EXPECT(nb_fuse_kind_reduces(NB_TOP_MSE) && !nb_fuse_kind_reduces(NB_TOP_ADD));
}

static void test_spec_errors(void) {
    nb_fuse_spec s;
    char *text = NULL;
#define SPEC0() (memset(&s, 0, sizeof s), nb_fuse_add_input(&s, NB_FUSE_FULL), nb_fuse_add_input(&s, NB_FUSE_FULL))
    SPEC0();
    nb_fuse_add_node(&s, NB_TOP_SILU, 1, (int[]){0});
    NB_EXPECT_ERR(nb_fuse_spec_check(&s), NB_ERR_INVALID_ARG, "input 1 is not used");
    SPEC0();
    nb_fuse_add_node(&s, NB_TOP_MSE, 2, (int[]){0, 1});
    nb_fuse_add_node(&s, NB_TOP_SILU, 1, (int[]){2});
    NB_EXPECT_ERR(nb_fuse_spec_check(&s), NB_ERR_INVALID_ARG, "node 0 (mse) reduces to one value");
    SPEC0();
    nb_fuse_add_node(&s, NB_TOP_ADD_CHANNEL, 2, (int[]){0, 1});
    NB_EXPECT_ERR(nb_fuse_spec_check(&s), NB_ERR_INVALID_ARG, "node 0 (add_channel) operand 1 must be a per-channel input");
    SPEC0();
    nb_fuse_add_node(&s, NB_TOP_ADD, 2, (int[]){0, 3});
    NB_EXPECT_ERR(nb_fuse_spec_check(&s), NB_ERR_INVALID_ARG, "operand 1 is 3: not an input or an earlier node");
    SPEC0();
    nb_fuse_add_node(&s, NB_TOP_LINEAR, 2, (int[]){0, 1});
    NB_EXPECT_ERR(nb_fuse_spec_check(&s), NB_ERR_UNSUPPORTED, "node 0 (linear) is not an op that fuses");
    SPEC0();
    nb_fuse_add_node(&s, NB_TOP_ADD, 2, (int[]){0, 1});
    nb_fuse_add_node(&s, NB_TOP_CAST, 1, (int[]){2});
    s.node[1].ip[0] = NB_BF16;
    NB_EXPECT_ERR(nb_fuse_spec_check(&s), NB_ERR_UNSUPPORTED, "node 1 (cast) to bf16 rounds");
    SPEC0();
    nb_fuse_add_node(&s, NB_TOP_ADD, 2, (int[]){0, 1});
    nb_fuse_add_node(&s, NB_TOP_SILU, 1, (int[]){0});
    NB_EXPECT_ERR(nb_fuse_spec_check(&s), NB_ERR_INVALID_ARG, "the result of node 0 (add) is not used");
    SPEC0();
    nb_fuse_add_node(&s, NB_TOP_ADD, 1, (int[]){0});
    NB_EXPECT_ERR(nb_fuse_spec_check(&s), NB_ERR_INVALID_ARG, "node 0 (add) has 1 operands, the op takes 2");
    memset(&s, 0, sizeof s);
    nb_fuse_add_input(&s, NB_FUSE_CHANNEL);
    nb_fuse_add_node(&s, NB_TOP_SILU, 1, (int[]){0});
    NB_EXPECT_ERR(nb_fuse_spec_check(&s), NB_ERR_INVALID_ARG, "no input has the kernel's full shape");
    NB_EXPECT(nb_fuse_add_input(&s, NB_FUSE_FULL) < 0 && strstr(nb_last_error(), "inputs come before the first node"));
    NB_EXPECT_ERR(nb_fuse_codegen(NULL, "f", &text), NB_ERR_INVALID_ARG, "spec is NULL");
    NB_EXPECT(text == NULL);
#undef SPEC0
}

/* ---- fused chains against the unfused tape ------------------------------------------------------ */

/* The chains (a, b, tgt [N,C,H,W], ch [N,C]; every input requires a gradient):
 *   CHAIN_LOSS   loss = mse(silu(add_channel(add(a, b), ch)), tgt), fused in one kernel
 *   CHAIN_ACT    the same, the fused kernel ending at the silu, the tape's mse after it
 *   CHAIN_BRANCH loss = mse(add(silu(a), relu(a)), tgt): a used twice inside one kernel */
enum { CHAIN_LOSS, CHAIN_ACT, CHAIN_BRANCH, CHAIN_COUNT };
static const char *const chain_names[CHAIN_COUNT] = {"add+add_channel+silu+mse", "add+add_channel+silu (tape mse)",
                                                     "silu+relu+add branch"};

typedef struct chain_out {
    float loss;
    float g[4][NUMEL]; /* gradients of a, b, ch, tgt */
} chain_out;

static void chain_spec(int chain, nb_fuse_spec *s) {
    memset(s, 0, sizeof *s);
    if (chain == CHAIN_BRANCH) {
        int a = nb_fuse_add_input(s, NB_FUSE_FULL), tgt = nb_fuse_add_input(s, NB_FUSE_FULL);
        int y = nb_fuse_add_node(s, NB_TOP_SILU, 1, (int[]){a});
        int r = nb_fuse_add_node(s, NB_TOP_RELU, 1, (int[]){a});
        int z = nb_fuse_add_node(s, NB_TOP_ADD, 2, (int[]){y, r});
        nb_fuse_add_node(s, NB_TOP_MSE, 2, (int[]){z, tgt});
        return;
    }
    int a = nb_fuse_add_input(s, NB_FUSE_FULL), b = nb_fuse_add_input(s, NB_FUSE_FULL);
    int ch = nb_fuse_add_input(s, NB_FUSE_CHANNEL);
    int tgt = chain == CHAIN_LOSS ? nb_fuse_add_input(s, NB_FUSE_FULL) : -1;
    int u = nb_fuse_add_node(s, NB_TOP_ADD, 2, (int[]){a, b});
    int v = nb_fuse_add_node(s, NB_TOP_ADD_CHANNEL, 2, (int[]){u, ch});
    int y = nb_fuse_add_node(s, NB_TOP_SILU, 1, (int[]){v});
    if (chain == CHAIN_LOSS) nb_fuse_add_node(s, NB_TOP_MSE, 2, (int[]){y, tgt});
}

/* Runs the chain on a tape on dev (NULL: the CPU), fused through k (NULL: unfused tape ops). */
static void chain_run(nb_device *dev, int chain, nb_fuse_kernel *k, chain_out *o) {
    static float data[4][NUMEL];
    for (int i = 0; i < 4; i++) nb_test_fill(data[i], NUMEL, 17u + 101u * (uint32_t)i, 2.0f);
    memset(o, 0, sizeof *o);
    nb_tape *t;
    NB_REQUIRE_OK(dev ? nb_tape_create_on(dev, &t) : nb_tape_create(&t));
    nb_tvar v[4], y = NB_TVAR_NONE, loss = NB_TVAR_NONE;
    NB_EXPECT_OK(nb_tape_input(t, 4, S4, data[0], 1, &v[0]));
    NB_EXPECT_OK(nb_tape_input(t, 4, S4, data[1], 1, &v[1]));
    NB_EXPECT_OK(nb_tape_input(t, 2, S2, data[2], 1, &v[2]));
    NB_EXPECT_OK(nb_tape_input(t, 4, S4, data[3], 1, &v[3]));
    if (chain == CHAIN_BRANCH) {
        if (k) {
            NB_EXPECT_OK(nb_tape_fused(t, k, 2, (nb_tvar[]){v[0], v[3]}, &loss));
        } else {
            nb_tvar s, r, z;
            NB_EXPECT_OK(nb_tape_silu(t, v[0], &s));
            NB_EXPECT_OK(nb_tape_relu(t, v[0], &r));
            NB_EXPECT_OK(nb_tape_add(t, s, r, &z));
            NB_EXPECT_OK(nb_tape_mse(t, z, v[3], &loss));
        }
    } else if (k) {
        NB_EXPECT_OK(nb_tape_fused(t, k, chain == CHAIN_LOSS ? 4 : 3, v, chain == CHAIN_LOSS ? &loss : &y));
        if (chain == CHAIN_ACT) NB_EXPECT_OK(nb_tape_mse(t, y, v[3], &loss));
    } else {
        nb_tvar u, w;
        NB_EXPECT_OK(nb_tape_add(t, v[0], v[1], &u));
        NB_EXPECT_OK(nb_tape_add_channel(t, u, v[2], &w));
        NB_EXPECT_OK(nb_tape_silu(t, w, &y));
        NB_EXPECT_OK(nb_tape_mse(t, y, v[3], &loss));
    }
    NB_EXPECT_OK(nb_tape_backward(t, loss));
    NB_EXPECT_OK(nb_tape_read(t, loss, &o->loss, 1));
    NB_EXPECT_OK(nb_tape_read_grad(t, v[0], o->g[0], NUMEL));
    NB_EXPECT_OK(nb_tape_read_grad(t, v[1], o->g[1], NUMEL));
    NB_EXPECT_OK(nb_tape_read_grad(t, v[2], o->g[2], N * C));
    NB_EXPECT_OK(nb_tape_read_grad(t, v[3], o->g[3], NUMEL));
    nb_tape_stats st;
    NB_EXPECT_OK(nb_tape_get_stats(t, &st));
    NB_EXPECT(st.n_ops == (k ? (chain == CHAIN_ACT ? 2 : 1) : 4));
    nb_tape_free(t);
}

static void compare(const char *label, const chain_out *a, const chain_out *b, double tol) {
    char w[256];
    snprintf(w, sizeof w, "%s loss", label);
    nb_test_expect_close(w, &a->loss, &b->loss, 1, tol);
    static const char *const gn[4] = {"da", "db", "dch", "dtgt"};
    static const int64_t cnt[4] = {NUMEL, NUMEL, N * C, NUMEL};
    for (int i = 0; i < 4; i++) {
        snprintf(w, sizeof w, "%s %s", label, gn[i]);
        nb_test_expect_close(w, a->g[i], b->g[i], cnt[i], tol);
    }
}

static void run_chains(nb_device *dev, const char *devname) {
    static chain_out ref, got;
    for (int chain = 0; chain < CHAIN_COUNT; chain++) {
        nb_fuse_spec s;
        chain_spec(chain, &s);
        nb_fuse_kernel *k = NULL;
        nb_device *kd = dev;
        if (!dev) NB_REQUIRE_OK(nb_device_open("cpu", &kd));
        NB_REQUIRE_OK(nb_fuse_kernel_create(kd, &s, &k));
        chain_run(NULL, chain, NULL, &ref); /* the CPU tape, unfused: the reference */
        chain_run(dev, chain, k, &got);
        char label[160];
        snprintf(label, sizeof label, "%s %s", devname, chain_names[chain]);
        compare(label, &got, &ref, 1e-5);
        /* a nonzero gradient everywhere it should be (a dropped term shows as a zero) */
        NB_EXPECT(ref.g[0][0] != 0.0f && ref.g[3][NUMEL - 1] != 0.0f && (chain == CHAIN_BRANCH || ref.g[2][0] != 0.0f));
        nb_fuse_kernel_free(k);
        if (!dev) nb_device_close(kd);
    }
}

static void test_chains_cpu(void) { run_chains(NULL, "cpu"); }

static void test_chains_cuda(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *gpu;
    NB_REQUIRE_OK(nb_device_open("cuda", &gpu));
    run_chains(gpu, "cuda");
    nb_device_close(gpu);
}

/* ---- the kernel over arrays, and bad arguments ---------------------------------------------------- */

static void test_arrays_and_errors(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_fuse_spec s;
    chain_spec(CHAIN_ACT, &s);
    nb_fuse_kernel *k = NULL;
    NB_REQUIRE_OK(nb_fuse_kernel_create(cpu, &s, &k));
    NB_EXPECT(strstr(nb_fuse_kernel_source(k), "[Differentiable]") != NULL && !nb_fuse_kernel_reduces(k));
    static float a[NUMEL], b[NUMEL], ch[N * C], y[NUMEL], dy[NUMEL], da[NUMEL], dch[N * C];
    nb_test_fill(a, NUMEL, 1, 2.0f);
    nb_test_fill(b, NUMEL, 2, 2.0f);
    nb_test_fill(ch, N * C, 3, 2.0f);
    nb_test_fill(dy, NUMEL, 4, 2.0f);
    nb_tensor *ta, *tb, *tc, *ty, *tdy, *tda, *tdc, *bad;
    NB_REQUIRE_OK(nb_tensor_from_host(cpu, NB_F32, 4, S4, a, &ta));
    NB_REQUIRE_OK(nb_tensor_from_host(cpu, NB_F32, 4, S4, b, &tb));
    NB_REQUIRE_OK(nb_tensor_from_host(cpu, NB_F32, 2, S2, ch, &tc));
    NB_REQUIRE_OK(nb_tensor_from_host(cpu, NB_F32, 4, S4, dy, &tdy));
    NB_REQUIRE_OK(nb_tensor_empty(cpu, NB_F32, 4, S4, &ty));
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F32, 4, S4, &tda));
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F32, 2, S2, &tdc));
    nb_tensor *in[3] = {ta, tb, tc};
    NB_EXPECT_OK(nb_fuse_forward(k, in, ty));
    NB_EXPECT_OK(nb_fuse_backward(k, in, tdy, (nb_tensor *[]){tda, NULL, tdc}));
    NB_EXPECT_OK(nb_fuse_backward(k, in, tdy, (nb_tensor *[]){tda, NULL, NULL})); /* adds again */
    NB_EXPECT_OK(nb_tensor_to_host(ty, y, sizeof y));
    NB_EXPECT_OK(nb_tensor_to_host(tda, da, sizeof da));
    NB_EXPECT_OK(nb_tensor_to_host(tdc, dch, sizeof dch));
    /* the definition, element by element (in double) */
    static float yr[NUMEL], dar[NUMEL], dcr[N * C];
    memset(dcr, 0, sizeof dcr);
    for (int64_t i = 0; i < NUMEL; i++) {
        double v = (double)a[i] + b[i] + ch[i / (H * W)], sg = 1.0 / (1.0 + exp(-v));
        double g = dy[i] * sg * (1.0 + v * (1.0 - sg));
        yr[i] = (float)(v * sg);
        dar[i] = (float)(2.0 * g);
        dcr[i / (H * W)] += (float)g;
    }
    nb_test_expect_close("y", y, yr, NUMEL, 1e-5);
    nb_test_expect_close("da (added twice)", da, dar, NUMEL, 1e-5);
    nb_test_expect_close("dch", dch, dcr, N * C, 1e-5);
    /* bad arguments: each a typed error naming the cause */
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F32, 4, (int64_t[]){N, C, H, W + 1}, &bad));
    NB_EXPECT_ERR(nb_fuse_forward(k, (nb_tensor *[]){ta, bad, tc}, ty), NB_ERR_SHAPE, "input 1");
    NB_EXPECT_ERR(nb_fuse_forward(k, in, bad), NB_ERR_SHAPE, "out");
    NB_EXPECT_ERR(nb_fuse_backward(k, in, tdy, (nb_tensor *[]){bad, NULL, NULL}), NB_ERR_SHAPE, "gradient 0");
    nb_tensor_free(bad);
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F32, 2, (int64_t[]){N, C + 1}, &bad));
    NB_EXPECT_ERR(nb_fuse_forward(k, (nb_tensor *[]){ta, tb, bad}, ty), NB_ERR_SHAPE,
                  "per-channel input 2");
    nb_tensor_free(bad);
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_I32, 4, S4, &bad));
    NB_EXPECT_ERR(nb_fuse_forward(k, (nb_tensor *[]){bad, tb, tc}, ty), NB_ERR_DTYPE, "input 0");
    nb_tensor_free(bad);
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_BF16, 4, S4, &bad));
    NB_EXPECT_ERR(nb_fuse_backward(k, in, tdy, (nb_tensor *[]){bad, NULL, NULL}), NB_ERR_DTYPE, "gradient 0");
    nb_tensor_free(bad);
    NB_EXPECT_ERR(nb_fuse_forward(k, (nb_tensor *[]){ta, NULL, tc}, ty), NB_ERR_INVALID_ARG, "input 1 is NULL");
    NB_EXPECT_ERR(nb_fuse_backward(k, in, tdy, NULL), NB_ERR_INVALID_ARG, "grads is NULL");
    nb_fuse_kernel *k2 = NULL;
    NB_EXPECT_ERR(nb_fuse_kernel_create(NULL, &s, &k2), NB_ERR_INVALID_ARG, "device is NULL");
    s.node[0].kind = NB_TOP_CONCAT;
    NB_EXPECT_ERR(nb_fuse_kernel_create(cpu, &s, &k2), NB_ERR_UNSUPPORTED, "node 0 (concat) is not an op that fuses");
    NB_EXPECT(k2 == NULL);
    /* the tape builder */
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    nb_tvar va, vb, vc, vo, vbad, vx;
    NB_EXPECT_OK(nb_tape_input(t, 4, S4, a, 1, &va));
    NB_EXPECT_OK(nb_tape_input(t, 4, S4, b, 0, &vb));
    NB_EXPECT_OK(nb_tape_input(t, 2, S2, ch, 0, &vc));
    NB_EXPECT_OK(nb_tape_input(t, 3, (int64_t[]){N, C, H * W}, a, 0, &vbad));
    NB_EXPECT_OK(nb_tape_input(t, 4, S4, b, 0, &vx));
    NB_EXPECT_ERR(nb_tape_fused(t, k, 2, (nb_tvar[]){va, vb}, &vo), NB_ERR_INVALID_ARG, "2 inputs given, the kernel takes 3");
    NB_EXPECT_ERR(nb_tape_fused(t, k, 3, (nb_tvar[]){va, va, vc}, &vo), NB_ERR_INVALID_ARG, "input 1 is input 0 again");
    NB_EXPECT_ERR(nb_tape_fused(t, k, 3, (nb_tvar[]){va, vbad, vc}, &vo), NB_ERR_SHAPE, "input 1 [2,3,20]");
    NB_EXPECT_ERR(nb_tape_fused(t, k, 3, (nb_tvar[]){va, vb, vx}, &vo), NB_ERR_SHAPE, "must be the leading dims");
    NB_EXPECT_ERR(nb_tape_fused(t, k, 3, (nb_tvar[]){va, vb, 99}, &vo), NB_ERR_INVALID_ARG, "input 2");
    NB_EXPECT_OK(nb_tape_fused(t, k, 3, (nb_tvar[]){va, vb, vc}, &vo));
    nb_tape_free(t);
    nb_tensor *all[] = {ta, tb, tc, ty, tdy, tda, tdc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) nb_tensor_free(all[i]);
    nb_fuse_kernel_free(k);
    nb_device_close(cpu);
}

/* ---- steady state, the cache of prepared calls, NVRTC -------------------------------------------- */

/* A fixed-shape tape loop with a fused op: once warm, a step prepares no call and makes no host
 * allocation (the FUSED row patches addresses into its prepared forward and backward calls). */
static void test_steady_state(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_fuse_spec s;
    chain_spec(CHAIN_LOSS, &s);
    nb_fuse_kernel *k;
    NB_REQUIRE_OK(nb_fuse_kernel_create(cpu, &s, &k));
    static float data[4][NUMEL];
    for (int i = 0; i < 4; i++) nb_test_fill(data[i], NUMEL, 5u + (uint32_t)i, 2.0f);
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    float first = 0.0f;
    for (int step = 0; step < 6; step++) {
        if (step == 2) nb_test_count_allocs_begin();
        nb_tvar v[4], loss;
        NB_EXPECT_OK(nb_tape_reset(t));
        NB_EXPECT_OK(nb_tape_input(t, 4, S4, data[0], 1, &v[0]));
        NB_EXPECT_OK(nb_tape_input(t, 4, S4, data[1], 0, &v[1]));
        NB_EXPECT_OK(nb_tape_input(t, 2, S2, data[2], 1, &v[2]));
        NB_EXPECT_OK(nb_tape_input(t, 4, S4, data[3], 0, &v[3]));
        NB_EXPECT_OK(nb_tape_fused(t, k, 4, v, &loss));
        NB_EXPECT_OK(nb_tape_backward(t, loss));
        float l = 0.0f;
        NB_EXPECT_OK(nb_tape_read(t, loss, &l, 1));
        if (step == 0) first = l;
        NB_EXPECT(l == first && l > 0.0f);
    }
    nb_test_count_allocs_end();
    NB_EXPECT(nb_test_allocs == 0);
    if (nb_test_allocs) fprintf(stderr, "  %lld host allocations in 4 warm steps\n", (long long)nb_test_allocs);
    NB_EXPECT(nb_fuse_kernel_prepares(k) == 2); /* one forward, one backward (a, ch: two gradients) */
    nb_tape_free(t);
    nb_fuse_kernel_free(k);
    nb_device_close(cpu);
}

/* More shapes than the kernel keeps prepared calls for, round robin: every result right. */
static void test_prepared_cache(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_fuse_spec s = {0};
    int x = nb_fuse_add_input(&s, NB_FUSE_FULL), y = nb_fuse_add_input(&s, NB_FUSE_FULL);
    nb_fuse_add_node(&s, NB_TOP_MSE, 2, (int[]){x, y});
    nb_fuse_kernel *k;
    NB_REQUIRE_OK(nb_fuse_kernel_create(cpu, &s, &k));
    enum { SHAPES = 6 };
    static float a[64], b[64];
    nb_test_fill(a, 64, 7, 2.0f);
    nb_test_fill(b, 64, 8, 2.0f);
    for (int round = 0; round < 2; round++)
        for (int j = 0; j < SHAPES; j++) {
            int64_t n = 8 + 9 * j, one = 1;
            nb_tensor *ta, *tb, *tl;
            NB_REQUIRE_OK(nb_tensor_from_host(cpu, NB_F32, 1, &n, a, &ta));
            NB_REQUIRE_OK(nb_tensor_from_host(cpu, NB_F32, 1, &n, b, &tb));
            NB_REQUIRE_OK(nb_tensor_empty(cpu, NB_F32, 1, &one, &tl));
            float l = -1.0f;
            double want = 0.0;
            for (int64_t i = 0; i < n; i++) want += ((double)a[i] - b[i]) * ((double)a[i] - b[i]) / (double)n;
            NB_EXPECT_OK(nb_fuse_forward(k, (nb_tensor *[]){ta, tb}, tl));
            NB_EXPECT_OK(nb_tensor_to_host(tl, &l, sizeof l));
            NB_EXPECT_NEAR(l, want, 1e-5 * want);
            nb_tensor_free(ta), nb_tensor_free(tb), nb_tensor_free(tl);
        }
    NB_EXPECT(nb_fuse_kernel_prepares(k) == 2 * SHAPES); /* 4 kept: each shape evicted before its turn */
    nb_fuse_kernel_free(k);
    nb_device_close(cpu);
}

/* The CUDA kernels of the fused calls compile with NVRTC (no GPU needed): each chain's forward
 * and backward call (every gradient), and a chain with an inlined user function, bound as a run
 * binds them, emitted for CUDA. */
static void test_nvrtc(void) {
    if (nb_nvrtc_version() == 0) NB_SKIP("NVRTC is not available");
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    static float buf[4][NUMEL], gb[4][NUMEL], r[NUMEL];
    int ok = 0;
    for (int chain = 0; chain < CHAIN_COUNT; chain++) {
        nb_fuse_spec s;
        chain_spec(chain, &s);
        nb_fuse_kernel *k;
        NB_REQUIRE_OK(nb_fuse_kernel_create(cpu, &s, &k));
        nb_fuse_arg in[4], g[4], res = {.data = r, .dtype = NB_F32};
        for (int i = 0; i < s.n_in; i++) {
            int chan = s.in_kind[i] == NB_FUSE_CHANNEL;
            in[i] = (nb_fuse_arg){.data = buf[i], .dtype = NB_F32, .ndim = chan ? 2 : 4};
            memcpy(in[i].shape, chan ? S2 : S4, sizeof(int64_t) * (chan ? 2 : 4));
            g[i] = in[i];
            g[i].data = gb[i];
        }
        res.ndim = nb_fuse_kernel_reduces(k) ? 1 : 4;
        if (res.ndim == 1) res.shape[0] = 1;
        else memcpy(res.shape, S4, sizeof S4);
        for (int bwd = 0; bwd < 2; bwd++) {
            nb_tensor *wrap[2 * NB_FUSE_MAX_IN + 1];
            int nwrap = 0;
            nb_call *c = NULL;
            char what[160];
            snprintf(what, sizeof what, "%s %s", chain_names[chain], bwd ? "backward" : "forward");
            NB_EXPECT_OK(nb_fuse_call_begin(k, bwd, in, &res, g, wrap, &nwrap, &c));
            if (c) ok += nb_test_nvrtc_call(c, what);
            for (int i = 0; i < nwrap; i++) nb_tensor_free(wrap[i]);
        }
        nb_fuse_kernel_free(k);
    }
    /* an inlined user function (a module loaded from a string: its text goes into the kernel) */
    nb_module *m;
    nb_func *sp;
    NB_REQUIRE_OK(nb_module_load_source(cpu, "act.nb", "[Differentiable]\nfloat softplus(float x, float beta)\n"
                                        "{\n    return log(1.0 + exp(beta * x)) / beta;\n}\n", NULL, &m));
    NB_REQUIRE_OK(nb_module_func(m, "softplus", &sp));
    nb_fuse_spec s = {0};
    int x = nb_fuse_add_input(&s, NB_FUSE_FULL);
    nb_fuse_call c = {.f = sp, .nparams = 2, .arg = {0, -1}, .scalar = {0, 2.0}};
    int y = nb_fuse_add_call(&s, &c, 1, (int[]){x});
    nb_fuse_add_node(&s, NB_TOP_SILU, 1, (int[]){y});
    nb_fuse_kernel *k;
    NB_REQUIRE_OK(nb_fuse_kernel_create(cpu, &s, &k));
    NB_EXPECT(strstr(nb_fuse_kernel_source(k), "    float t0 = softplus(x0, 2.0); // call\n") != NULL);
    nb_fuse_arg in = {.data = buf[0], .dtype = NB_F32, .ndim = 4}, g = in, res = in;
    memcpy(in.shape, S4, sizeof S4), memcpy(g.shape, S4, sizeof S4), memcpy(res.shape, S4, sizeof S4);
    g.data = gb[0], res.data = r;
    for (int bwd = 0; bwd < 2; bwd++) {
        nb_tensor *wrap[2 * NB_FUSE_MAX_IN + 1];
        int nwrap = 0;
        nb_call *call = NULL;
        NB_EXPECT_OK(nb_fuse_call_begin(k, bwd, &in, &res, &g, wrap, &nwrap, &call));
        if (call) ok += nb_test_nvrtc_call(call, bwd ? "call(softplus)+silu backward" : "call(softplus)+silu forward");
        for (int i = 0; i < nwrap; i++) nb_tensor_free(wrap[i]);
    }
    nb_fuse_kernel_free(k);
    nb_module_free(m);
    NB_EXPECT(ok == 2 * CHAIN_COUNT + 2);
    nb_device_close(cpu);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_codegen_text, test_spec_errors, test_chains_cpu, test_arrays_and_errors,
                 test_steady_state, test_prepared_cache, test_nvrtc, test_chains_cuda);
}

/* Benchmark 2 of issue #17 (include/nabla/graph_chain_bench.h): the chain of user .nb functions
 * and library ops at a tiny size. CPU: every row that runs gives the immediate row's loss and
 * parameter gradients (recorded bit for bit, compiled within rounding), the table prints, the
 * option and module errors are typed. CUDA (skipped without a GPU): the same, the CUDA-graph rows
 * replay as one CUDA graph, and the kernel counts of a step are consistent. Also
 * nb_tape_input_tensor, which the benchmark's immediate row feeds from resident tensors. */
#include <stdio.h>
#include <string.h>

#include "nb_test.h"

/* the repository root, from this file's path (CMake compiles it by its absolute path) */
static const char *module_path(void) {
    static char p[1200];
    snprintf(p, sizeof p, "%s", __FILE__);
    char *e = strstr(p, "/tests/test_graph_chain.c");
    if (e) snprintf(e, sizeof p - (size_t)(e - p), "/examples/graph_chain.nb");
    else snprintf(p, sizeof p, "../examples/graph_chain.nb");
    return p;
}

static void tiny(nb_graph_chain_opts *o, const char *device) {
    nb_graph_chain_defaults(o);
    o->device = device;
    o->module = module_path();
    o->rows = 37; /* not a multiple of anything: tails of every loop */
    o->width = 6;
    o->steps = 3;
    o->warmup = 1;
}

static void test_cpu_rows_agree(void) {
    nb_graph_chain_opts o;
    tiny(&o, "cpu");
    nb_graph_chain_result r;
    NB_REQUIRE_OK(nb_graph_chain_run(&o, &r, NULL));
    const nb_graph_chain_row_result *im = &r.row[NB_GC_IMMEDIATE], *rec = &r.row[NB_GC_RECORDED];
    NB_EXPECT(im->ran && rec->ran);
    NB_EXPECT(isfinite(im->loss) && im->loss > 0);
    NB_EXPECT(im->err == 0);
    NB_EXPECT(rec->err == 0);          /* CPU replay runs the same rows: bit for bit */
    NB_EXPECT(rec->loss == im->loss);
    NB_EXPECT(im->nodes == 5 && rec->nodes == 5); /* act, linear, norm, linear, mse */
    NB_EXPECT(im->kernels == -1 && rec->kernels == -1); /* no CUDA kernels to count */
    NB_EXPECT(!r.row[NB_GC_RECORDED_CG].ran && !r.row[NB_GC_COMPILED_CG].ran);
    const nb_graph_chain_row_result *co = &r.row[NB_GC_COMPILED];
    NB_EXPECT(co->ran && co->err < 1e-5 && fabs(co->loss - im->loss) <= 1e-6 * im->loss);
    /* fewer nodes exactly by what the compiler fused (fused_ops recorded nodes -> fused_nodes) */
    NB_EXPECT(co->nodes == 5 - r.compile_fused_ops + r.compile_fused_nodes - r.compile_epilogues -
              r.compile_dead - r.compile_duplicates);
    NB_EXPECT(im->ms > 0 && rec->ms > 0);
    NB_EXPECT_NEAR(r.gflop, 12.0 * 37 * 6 * 6 / 1e9, 1e-15);

    /* another seed: another loss (the data really come from the seed) */
    o.seed = 18;
    nb_graph_chain_result r2;
    NB_REQUIRE_OK(nb_graph_chain_run(&o, &r2, NULL));
    NB_EXPECT(r2.row[NB_GC_IMMEDIATE].loss != im->loss);
    NB_EXPECT(r2.row[NB_GC_RECORDED].err == 0);

    /* the table */
    char buf[4096] = "";
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    NB_REQUIRE_OK(f ? NB_OK : NB_ERR_INTERNAL);
    nb_graph_chain_print(&r, f);
    fclose(f);
    NB_EXPECT(strstr(buf, "row ") && strstr(buf, "ms_step") && strstr(buf, "kernels"));
    NB_EXPECT(strstr(buf, "\nimmediate ") && strstr(buf, "\nrecorded ") &&
              strstr(buf, "\nrecorded_cuda_graph ") && strstr(buf, "\ncompiled "));
    NB_EXPECT(strstr(buf, "37 rows x 6 features") && strstr(buf, "chain_act"));
    fputs(buf, stdout);
}

/* The user functions can be swapped: a module whose norm ignores g changes the loss; one whose
 * norm is not [Differentiable] is refused by the CALL row (g needs a gradient). */
static void test_other_functions(void) {
    const char *path = "/tmp/nb_test_graph_chain_user.nb";
    FILE *f = fopen(path, "w");
    NB_REQUIRE_OK(f ? NB_OK : NB_ERR_IO);
    fputs("[Differentiable] float act2(float x) { return x * x; }\n"
          "[Differentiable] float norm2(float x, float g) { return x + 0.0 * g; }\n"
          "float plain(float x, float g) { return x * g; }\n", f);
    fclose(f);
    nb_graph_chain_opts o;
    tiny(&o, "cpu");
    nb_graph_chain_result a, b;
    NB_REQUIRE_OK(nb_graph_chain_run(&o, &a, NULL));
    o.module = path, o.act = "act2", o.norm = "norm2";
    NB_REQUIRE_OK(nb_graph_chain_run(&o, &b, NULL));
    NB_EXPECT(b.row[NB_GC_IMMEDIATE].loss != a.row[NB_GC_IMMEDIATE].loss);
    NB_EXPECT(b.row[NB_GC_RECORDED].err == 0);
    o.norm = "plain";
    NB_EXPECT_ERR(nb_graph_chain_run(&o, &b, NULL), NB_ERR_INVALID_ARG, "plain");
    remove(path);
}

static void test_errors(void) {
    nb_graph_chain_opts o;
    nb_graph_chain_result r;
    NB_EXPECT_ERR(nb_graph_chain_run(NULL, &r, NULL), NB_ERR_INVALID_ARG, "NULL");
    tiny(&o, "cpu");
    o.rows = 0;
    NB_EXPECT_ERR(nb_graph_chain_run(&o, &r, NULL), NB_ERR_INVALID_ARG, "rows 0");
    tiny(&o, "cpu");
    o.steps = 0;
    NB_EXPECT_ERR(nb_graph_chain_run(&o, &r, NULL), NB_ERR_INVALID_ARG, "steps 0");
    tiny(&o, "cpu");
    o.precision = NB_TAPE_BF16;
    NB_EXPECT_ERR(nb_graph_chain_run(&o, &r, NULL), NB_ERR_INVALID_ARG, "precision");
    tiny(&o, "cpu");
    o.module = "/nonexistent/chain.nb";
    nb_status s = nb_graph_chain_run(&o, &r, NULL);
    NB_EXPECT(s != NB_OK && strstr(nb_last_error(), "/nonexistent/chain.nb"));
    tiny(&o, "cpu");
    o.act = "no_such_function";
    s = nb_graph_chain_run(&o, &r, NULL);
    NB_EXPECT(s != NB_OK && strstr(nb_last_error(), "no_such_function"));
    tiny(&o, "cpu");
    o.device = "no-such-device";
    NB_EXPECT(nb_graph_chain_run(&o, &r, NULL) != NB_OK);
    NB_EXPECT(nb_graph_chain_row_name(NB_GC_COMPILED_CG) &&
              !strcmp(nb_graph_chain_row_name(NB_GC_COMPILED_CG), "compiled_cuda_graph"));
    NB_EXPECT(!nb_graph_chain_row_name(NB_GC_ROWS) && !nb_graph_chain_row_name(-1));
    int64_t k = 7, n = 7;
    NB_EXPECT_ERR(nb_device_graph_count(NULL, &k, &n), NB_ERR_INVALID_ARG, "NULL");
    NB_EXPECT(k == 0 && n == 0);
}

/* nb_tape_input_tensor: a CPU tensor gives nb_tape_input's value; the typed errors. */
static void test_input_tensor(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    const float data[6] = {1, -2, 3.5f, 4, 0.25f, -6};
    nb_tensor *x = NULL, *xb = NULL, *xt = NULL;
    NB_REQUIRE_OK(nb_tensor_from_host(cpu, NB_F32, 2, (int64_t[]){2, 3}, data, &x));
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create_on(cpu, &t));
    nb_tvar v, w;
    NB_REQUIRE_OK(nb_tape_input_tensor(t, x, 1, &v));
    NB_REQUIRE_OK(nb_tape_input(t, 2, (int64_t[]){2, 3}, data, 1, &w));
    float a[6], b[6];
    int nd = 0;
    int64_t shape[NB_TAPE_MAX_DIMS];
    NB_EXPECT_OK(nb_tape_shape(t, v, &nd, shape));
    NB_EXPECT(nd == 2 && shape[0] == 2 && shape[1] == 3);
    NB_EXPECT_OK(nb_tape_read(t, v, a, 6));
    NB_EXPECT_OK(nb_tape_read(t, w, b, 6));
    NB_EXPECT(!memcmp(a, b, sizeof a));
    NB_EXPECT_ERR(nb_tape_input_tensor(t, NULL, 0, &v), NB_ERR_INVALID_ARG, "NULL");
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_BF16, 2, (int64_t[]){2, 3}, &xb));
    NB_EXPECT_ERR(nb_tape_input_tensor(t, xb, 0, &v), NB_ERR_DTYPE, "bf16");
    NB_REQUIRE_OK(nb_tensor_transpose(x, 0, 1, &xt));
    NB_EXPECT_ERR(nb_tape_input_tensor(t, xt, 0, &v), NB_ERR_LAYOUT, "contiguous");
    nb_tensor_free(xt);
    nb_tensor_free(xb);
    nb_tensor_free(x);
    nb_tape_free(t);
    nb_device_close(cpu);
}

static void test_cuda(void) {
    nb_device *dev;
    if (nb_device_open("cuda", &dev) != NB_OK) {
        nb_clear_error();
        NB_SKIP("no CUDA device");
    }
    /* a CUDA tensor into a CPU tape: refused, naming both sides */
    nb_tensor *x = NULL;
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 2, (int64_t[]){2, 3}, &x));
    nb_tape *t;
    nb_tvar v;
    NB_REQUIRE_OK(nb_tape_create(&t));
    NB_EXPECT_ERR(nb_tape_input_tensor(t, x, 0, &v), NB_ERR_DEVICE, "the CPU");
    nb_tape_free(t);
    nb_tensor_free(x);
    nb_device_close(dev);

    nb_graph_chain_opts o;
    tiny(&o, "cuda");
    o.rows = 4099;
    o.width = 16;
    nb_graph_chain_result r;
    NB_REQUIRE_OK(nb_graph_chain_run(&o, &r, NULL));
    nb_graph_chain_print(&r, stdout);
    for (int k = 0; k < NB_GC_ROWS; k++) {
        const nb_graph_chain_row_result *w = &r.row[k];
        NB_EXPECT(w->ran);
        if (!w->ran) continue;
        NB_EXPECT(w->err < 1e-4);
        if (w->kernels < 0) fprintf(stderr, "  %s: %s\n", nb_graph_chain_row_name(k), w->why);
        NB_EXPECT(w->kernels > 0);
    }
    /* a recorded graph runs the immediate rows: the same kernels, node by node or as a CUDA graph */
    NB_EXPECT(r.row[NB_GC_RECORDED].kernels == r.row[NB_GC_IMMEDIATE].kernels);
    NB_EXPECT(r.row[NB_GC_RECORDED_CG].kernels == r.row[NB_GC_RECORDED].kernels);
    NB_EXPECT(r.row[NB_GC_RECORDED_CG].cuda_graph == 1);
    NB_EXPECT(r.row[NB_GC_COMPILED_CG].cuda_graph == 1);
    NB_EXPECT(r.row[NB_GC_COMPILED].kernels <= r.row[NB_GC_RECORDED].kernels);
    NB_EXPECT(r.row[NB_GC_COMPILED_CG].kernels == r.row[NB_GC_COMPILED].kernels);
    NB_EXPECT(r.row[NB_GC_COMPILED].nodes <= r.row[NB_GC_RECORDED].nodes);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_cpu_rows_agree, test_other_functions, test_errors, test_input_tensor,
                 test_cuda);
}

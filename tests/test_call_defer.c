/* Deferred bounds checks (nb_call_defer_checks, nb_module_check; slangtorch's launchRaw on CUDA):
 * an out-of-range index of a deferred launch is not the launch's error but the module's next
 * check point's (the next call of any of its functions, or nb_module_check), naming the kernel,
 * the tensor and the launch number; in-range launches report nothing; one error is reported
 * once; the ring of records wraps (more launches than slots) and still names the right launch.
 * nabla's own sync points report it too: nb_device_synchronize, nb_tensor_to_host, copies into
 * host memory (nb_tensor_copy / nb_tensor_to), any module's on the device; a module freed with
 * one pending hands it to the device's next sync point.
 * The same checks on the CPU and, when there is a GPU, on CUDA. */
#include <string.h>

#include "device/cuda/cuda_api.h"
#include "device/sync_check.h"
#include "lang/compiler.h"
#include "nabla/alloc.h"
#include "nabla/module.h"
#include "nb_test.h"

static const char *SRC =
    "[CudaKernel]\n"
    "void copy(TensorView<float> input, TensorView<float> output) {\n"
    "  uint i = cudaThreadIdx().x + cudaBlockIdx().x * cudaBlockDim().x;\n"
    "  output[i] = input[i];\n" /* (no size check: threads past the tensors go out of bounds) */
    "}\n"
    "[CudaKernel]\n"
    "void fill(TensorView<float> o, float v) {\n"
    "  uint i = cudaThreadIdx().x;\n"
    "  if (i < o.size(0)) o[i] = v;\n"
    "}\n"
    "float twice(float x) { return 2 * x; }\n";

static nb_tensor *zeros(nb_device *dev, int64_t n) {
    nb_tensor *t = NULL;
    int64_t s[1] = {n};
    if (nb_tensor_zeros(dev, NB_F32, 1, s, &t) != NB_OK) return NULL;
    return t;
}

/* copy over n threads (blocks of 4) of x, y: deferred or not. */
static nb_status copy_n(nb_func *f, nb_tensor *x, nb_tensor *y, int64_t nthreads, int defer) {
    nb_call *c = NULL;
    nb_status s = nb_call_begin(f, &c);
    if (s) return s;
    if (defer) nb_call_defer_checks(c);
    nb_call_arg_named(c, "input", x);
    nb_call_arg_named(c, "output", y);
    return nb_call_run_blocks(c, (int64_t[]){4, 1, 1}, (int64_t[]){nthreads / 4, 1, 1});
}

static nb_status fill(nb_func *f, nb_tensor *o, float v) {
    nb_call *c = NULL;
    nb_status s = nb_call_begin(f, &c);
    if (s) return s;
    nb_call_defer_checks(c);
    nb_call_arg_named(c, "o", o);
    nb_call_arg_double(c, 1, v);
    return nb_call_run_blocks(c, (int64_t[]){8, 1, 1}, (int64_t[]){1, 1, 1});
}

static void run_all(nb_device *dev) {
    nb_module *m = NULL;
    NB_REQUIRE_OK(nb_module_load_source(dev, "defer.slang", SRC, NULL, &m));
    nb_func *copy, *fl, *twice;
    NB_REQUIRE_OK(nb_module_func(m, "copy", &copy));
    NB_REQUIRE_OK(nb_module_func(m, "fill", &fl));
    NB_REQUIRE_OK(nb_module_func(m, "twice", &twice));
    nb_tensor *x = zeros(dev, 8), *y = zeros(dev, 8);
    NB_EXPECT(x && y);
    if (!x || !y) return;

    /* the immediate check (the default) is the launch's own error */
    NB_EXPECT_ERR(copy_n(copy, x, y, 12, 0), NB_ERR_SHAPE, "out-of-bounds index [8] into tensor 'input' of shape [8]");
    NB_EXPECT_OK(nb_module_check(m));

    /* in range: no error now nor later */
    NB_EXPECT_OK(copy_n(copy, x, y, 8, 1));
    NB_EXPECT_OK(fill(fl, y, 3.0f));
    NB_EXPECT_OK(nb_module_check(m));

    /* out of range (launch #3 of the module): the launch returns OK, the next launch of another
     * function of the module reports it, naming the kernel, tensor and launch; then it is gone */
    NB_EXPECT_OK(copy_n(copy, x, y, 12, 1));
    /* a launch looks at the note without waiting: it sees the error once the faulting kernel has
     * run (on CUDA a launch returns before; without this wait the report may come a launch later).
     * (nb_device_wait: nb_device_synchronize would be the check point: test_defer_sync_points) */
    NB_EXPECT_OK(nb_device_wait(dev));
    NB_EXPECT_ERR(fill(fl, y, 1.0f), NB_ERR_SHAPE,
                  "out-of-bounds index [8] into tensor 'input' of shape [8] in function 'copy' (launch #3 of this module, reported late)");
    NB_EXPECT_OK(fill(fl, y, 1.0f));
    NB_EXPECT_OK(nb_module_check(m));
    float h[8];
    NB_EXPECT_OK(nb_tensor_to_host(y, h, sizeof h));
    NB_EXPECT(h[0] == 1.0f && h[7] == 1.0f);

    /* nb_module_check is a check point; so is an ordinary (not deferred) call of any function */
    NB_EXPECT_OK(copy_n(copy, x, y, 16, 1)); /* launch #5 */
    NB_EXPECT_ERR(nb_module_check(m), NB_ERR_SHAPE, "(launch #5 of this module, reported late)");
    NB_EXPECT_OK(nb_module_check(m));
    NB_EXPECT_OK(copy_n(copy, x, y, 16, 1)); /* #6 */
    nb_tensor *a = zeros(dev, 3), *r = NULL;
    NB_EXPECT(a);
    if (!a) return;
    NB_EXPECT_ERR(nb_func_call(twice, 1, &a, &r), NB_ERR_SHAPE, "in function 'copy' (launch #6 of this module");
    NB_EXPECT_OK(nb_func_call(twice, 1, &a, &r));
    nb_tensor_free(r);

    /* the ring wraps: 600 good launches (more than its slots), then a bad one names its number */
    for (int k = 0; k < 600; k++) NB_EXPECT_OK(fill(fl, y, 1.0f));
    NB_EXPECT_OK(copy_n(copy, x, y, 12, 1)); /* #607 */
    NB_EXPECT_ERR(nb_module_check(m), NB_ERR_SHAPE, "(launch #607 of this module, reported late)");
    NB_EXPECT_OK(nb_module_check(m));

    NB_EXPECT_ERR(nb_call_defer_checks(NULL), NB_ERR_INVALID_ARG, "argument 'c' is NULL");
    NB_EXPECT_ERR(nb_module_check(NULL), NB_ERR_INVALID_ARG, "argument 'm' is NULL");
    nb_tensor_free(a);
    nb_tensor_free(x);
    nb_tensor_free(y);
    nb_module_free(m);
}

/* A deferred out-of-range launch (#n of m: copy over 12 threads of 8 elements). */
static void bad_launch(nb_func *copy, nb_tensor *x, nb_tensor *y) { NB_EXPECT_OK(copy_n(copy, x, y, 12, 1)); }

static void run_sync_points(nb_device *dev) {
    nb_module *m = NULL, *other = NULL;
    NB_REQUIRE_OK(nb_module_load_source(dev, "defer.slang", SRC, NULL, &m));
    NB_REQUIRE_OK(nb_module_load_source(dev, "defer2.slang", SRC, NULL, &other));
    nb_func *copy, *fl, *copy2;
    NB_REQUIRE_OK(nb_module_func(m, "copy", &copy));
    NB_REQUIRE_OK(nb_module_func(m, "fill", &fl));
    NB_REQUIRE_OK(nb_module_func(other, "copy", &copy2));
    nb_device *cpu = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_tensor *x = zeros(dev, 8), *y = zeros(dev, 8), *hx = zeros(cpu, 8), *t = NULL;
    NB_EXPECT(x && y && hx);
    if (!x || !y || !hx) return;
    float h[8];
    const char *what = "out-of-bounds index [8] into tensor 'input' of shape [8] in function 'copy'";

    /* in range: every sync point is quiet */
    NB_EXPECT_OK(copy_n(copy, x, y, 8, 1)); /* #1 */
    NB_EXPECT_OK(nb_tensor_to_host(y, h, sizeof h));
    NB_EXPECT_OK(nb_device_synchronize(dev));

    /* reading a tensor to the host reports it (any tensor of the device), once */
    bad_launch(copy, x, y); /* #2 */
    NB_EXPECT_ERR(nb_tensor_to_host(x, h, sizeof h), NB_ERR_SHAPE, "(launch #2 of this module, reported late)");
    NB_EXPECT(strstr(nb_last_error(), what) != NULL);
    NB_EXPECT_OK(nb_tensor_to_host(x, h, sizeof h));
    NB_EXPECT_OK(nb_module_check(m));

    /* nb_device_synchronize */
    bad_launch(copy, x, y); /* #3 */
    NB_EXPECT_ERR(nb_device_synchronize(dev), NB_ERR_SHAPE, "(launch #3 of this module, reported late)");
    NB_EXPECT_OK(nb_device_synchronize(dev));
    NB_EXPECT_OK(fill(fl, y, 2.0f)); /* (#4: the module's own check point has nothing left) */

    /* a copy into host memory: nb_tensor_copy into a CPU tensor, nb_tensor_to the CPU */
    bad_launch(copy, x, y); /* #5 */
    NB_EXPECT_ERR(nb_tensor_copy(hx, y), NB_ERR_SHAPE, "(launch #5 of this module, reported late)");
    bad_launch(copy, x, y); /* #6 */
    NB_EXPECT_ERR(nb_tensor_to(y, cpu, &t), NB_ERR_SHAPE, "(launch #6 of this module, reported late)");
    NB_EXPECT(t == NULL);
    NB_EXPECT_OK(nb_tensor_to(y, cpu, &t));
    nb_tensor_free(t);

    /* another module's error is the device's too; each module numbers its own launches */
    NB_EXPECT_OK(copy_n(copy2, x, y, 8, 1)); /* other #1 */
    NB_EXPECT_OK(copy_n(copy2, x, y, 16, 1)); /* other #2 */
    NB_EXPECT_ERR(nb_tensor_to_host(y, h, sizeof h), NB_ERR_SHAPE, "(launch #2 of this module, reported late)");
    NB_EXPECT_OK(nb_module_check(other));

    /* a module freed with an error pending: the device's next sync point returns it, once */
    NB_EXPECT_OK(copy_n(copy2, x, y, 12, 1)); /* other #3 */
    nb_module_free(other);
    NB_EXPECT_ERR(nb_device_synchronize(dev), NB_ERR_SHAPE,
                  "(launch #3 of this module, reported late) (module 'defer2.slang' was freed before this was reported)");
    NB_EXPECT_OK(nb_device_synchronize(dev));
    NB_EXPECT_OK(nb_tensor_to_host(y, h, sizeof h));

    /* the module is freed with nothing pending: its check is gone from the device */
    NB_EXPECT_OK(nb_module_check(m));
    nb_module_free(m);
    NB_EXPECT_OK(nb_device_synchronize(dev));
    NB_EXPECT_OK(nb_tensor_to_host(y, h, sizeof h));
    nb_tensor_free(x), nb_tensor_free(y), nb_tensor_free(hx);
    nb_device_close(cpu);
}

static void test_defer_sync_points(void) {
    nb_device *dev = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    run_sync_points(dev);
    nb_device_close(dev);
    if (nb_cuda_device_count() == 0) return; /* (the CUDA half needs a GPU) */
    NB_REQUIRE_OK(nb_device_open("cuda", &dev));
    run_sync_points(dev);
    nb_device_close(dev);
}

static void test_defer_cpu(void) {
    nb_device *dev = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    run_all(dev);
    nb_device_close(dev);
}

static void test_defer_cuda(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *dev = NULL;
    NB_REQUIRE_OK(nb_device_open("cuda", &dev));
    run_all(dev);
    nb_device_close(dev);
}

/* The CUDA call kernel of a checked launch compiles with NVRTC (without a GPU too), with the
 * record's note (set after the record is filled) that deferred checks read. */
static void test_defer_nvrtc(void) {
    if (nb_nvrtc_version() == 0) NB_SKIP("NVRTC is not available");
    nb_program *p = NULL;
    NB_REQUIRE_OK(nb_program_compile_source("defer.slang", SRC, NULL, &p));
    nb_call_sig sig;
    memset(&sig, 0, sizeof sig);
    sig.func = "copy";
    sig.target = NB_TARGET_CUDA;
    sig.ndim = 6;
    sig.blocks = 1;
    sig.nleaves = 2;
    for (int j = 0; j < 2; j++) {
        sig.leaves[j].param = j;
        sig.leaves[j].path = j ? "output" : "input";
        sig.leaves[j].bind = NB_BIND_TENSOR;
        sig.leaves[j].storage = NB_F32;
    }
    nb_strbuf src;
    nb_strbuf_init(&src);
    nb_call_layout lay;
    NB_EXPECT_OK(nb_program_emit_call(p, &sig, &src, &lay));
    NB_EXPECT(lay.bounds_checked);
    NB_EXPECT(strstr(nb_strbuf_cstr(&src), "unsigned long long note; } nb_oob_rec;") != NULL);
    NB_EXPECT(strstr(nb_strbuf_cstr(&src), "*(volatile unsigned int *)r->note = 1u;") != NULL);
    void *img = NULL;
    size_t size = 0;
    int cubin = 0;
    nb_status s = nb_nvrtc_compile(nb_strbuf_cstr(&src), "defer.cu", "compute_90", NULL, &img, &size, &cubin);
    NB_EXPECT(s == NB_OK);
    if (s != NB_OK) fprintf(stderr, "  NVRTC: %s\n%s\n", nb_last_error(), nb_strbuf_cstr(&src));
    if (img) nb_free(img, size);
    nb_strbuf_free(&src);
    nb_program_free(p);
}

int main(int argc, char **argv) { NB_TEST_MAIN(argc, argv, test_defer_cpu, test_defer_cuda, test_defer_sync_points, test_defer_nvrtc); }

/* nb_call_set_stream: a call launched on a stream of the caller's (torch's current stream for
 * slangtorch's launchRaw; nb_stream_wrap_native). The kernel runs there; nabla's own uploads for
 * the call (host values) are ordered before it and an immediate bounds check after it; a stream of
 * another device is an error. The CPU ignores the stream. CUDA: a created stream, then the
 * legacy default stream wrapped (skips without a GPU). */
#include <string.h>

#include "nabla/device.h"
#include "nabla/module.h"
#include "nb_test.h"

static const char *SRC =
    "[CudaKernel]\n"
    "void axpy(TensorView<float> x, TensorView<float> y, float a, float3 b) {\n"
    "  uint i = cudaThreadIdx().x + cudaBlockIdx().x * cudaBlockDim().x;\n"
    "  y[i] = a * x[i] + b.x + b.y + b.z;\n" /* (no size check: 12 threads over 8 go out of bounds) */
    "}\n";

static nb_status axpy(nb_func *f, nb_stream *s, nb_tensor *x, nb_tensor *y, int64_t nthreads) {
    nb_call *c = NULL;
    nb_status st = nb_call_begin(f, &c);
    if (st) return st;
    if ((st = nb_call_set_stream(c, s))) {
        nb_call_free(c);
        return st;
    }
    const float b[3] = {1, 2, 3}; /* a host value of 3 floats */
    nb_call_arg_named(c, "x", x);
    nb_call_arg_named(c, "y", y);
    nb_call_arg_double(c, 2, 2.0);
    nb_call_arg_value_named(c, "b", NB_F32, 1, (int64_t[]){3}, b);
    return nb_call_run_blocks(c, (int64_t[]){4, 1, 1}, (int64_t[]){nthreads / 4, 1, 1});
}

static void run_all(nb_device *dev, nb_stream *s) {
    nb_module *m = NULL;
    NB_REQUIRE_OK(nb_module_load_source(dev, "stream.slang", SRC, NULL, &m));
    nb_func *f = NULL;
    NB_REQUIRE_OK(nb_module_func(m, "axpy", &f));
    float xv[8] = {0, 1, 2, 3, 4, 5, 6, 7}, yv[8];
    nb_tensor *x = NULL, *y = NULL;
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, (int64_t[]){8}, xv, &x));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, (int64_t[]){8}, &y));
    for (int rep = 0; rep < 3; rep++) {
        NB_EXPECT_OK(axpy(f, s, x, y, 8));
        NB_EXPECT_OK(nb_stream_synchronize(s));
        NB_EXPECT_OK(nb_tensor_to_host(y, yv, sizeof yv));
        for (int i = 0; i < 8; i++) NB_EXPECT(yv[i] == 2.0f * (float)i + 6.0f);
    }
    /* the immediate bounds check reads the launch's record after it finished on s */
    NB_EXPECT_ERR(axpy(f, s, x, y, 12), NB_ERR_SHAPE, "out-of-bounds index [8] into tensor 'x' of shape [8] in function 'axpy'");
    NB_EXPECT_OK(axpy(f, NULL, x, y, 8)); /* NULL: the device's stream */

    nb_device *other = NULL; /* a stream of another device */
    NB_REQUIRE_OK(nb_device_open(nb_device_get_kind(dev) == NB_DEVICE_CPU && nb_cuda_device_count() > 0 ? "cuda" : "cpu",
                                 &other));
    if (other != dev) {
        NB_EXPECT_ERR(axpy(f, nb_device_stream(other), x, y, 8), NB_ERR_INVALID_ARG,
                      "nb_call_set_stream: the stream belongs to");
    }
    nb_device_close(other);
    NB_EXPECT_ERR(nb_call_set_stream(NULL, s), NB_ERR_INVALID_ARG, "argument 'c' is NULL");
    nb_tensor_free(x);
    nb_tensor_free(y);
    nb_module_free(m);
}

static void test_stream_cpu(void) {
    nb_device *dev = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    nb_stream *s = NULL;
    NB_REQUIRE_OK(nb_stream_wrap_native(dev, NULL, &s));
    NB_EXPECT(nb_stream_device(s) == dev && nb_stream_native(s) == NULL);
    run_all(dev, s);
    nb_stream_destroy(s);
    nb_device_close(dev);
}

static void test_stream_cuda(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *dev = NULL;
    NB_REQUIRE_OK(nb_device_open("cuda", &dev));
    nb_stream *s = NULL, *w = NULL, *legacy = NULL;
    NB_REQUIRE_OK(nb_stream_create(dev, &s));
    run_all(dev, s);
    /* another library's stream: the handle of a created one, and the legacy default stream */
    NB_REQUIRE_OK(nb_stream_wrap_native(dev, nb_stream_native(s), &w));
    NB_EXPECT(nb_stream_native(w) == nb_stream_native(s));
    run_all(dev, w);
    NB_REQUIRE_OK(nb_stream_wrap_native(dev, NULL, &legacy));
    run_all(dev, legacy);
    nb_stream_destroy(legacy);
    nb_stream_destroy(w); /* (the handle only: s still works) */
    NB_EXPECT_OK(nb_stream_synchronize(s));
    nb_stream_destroy(s);
    nb_device_close(dev);
}

int main(int argc, char **argv) { NB_TEST_MAIN(argc, argv, test_stream_cpu, test_stream_cuda); }

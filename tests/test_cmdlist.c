/* Command lists (include/nabla/cmdlist.h): calls appended (bound and checked at append time),
 * submitted in order, submitted again over the arrays' new contents; errors at append; on CUDA
 * the batch is one captured graph. CPU, and CUDA when there is a GPU. */
#include <string.h>

#include "nabla/cmdlist.h"
#include "nabla/module.h"
#include "nb_test.h"

static const char *SRC =
    "float add(float a, float b) { return a + b; }\n"
    "void scale_into(float x, float s, out float y) { y = x * s; }\n"
    "void bump(inout float x, float d) { x = x + d; }\n"
    "int ids(int i) { return i; }\n"
    "[Kernel] void fill(Tensor<float, 1> dst, float v) { uint3 id = dispatch_id(); dst[id.x] = v + float(id.x); }\n";

static void lists(nb_device *dev) {
    nb_module *m = NULL;
    NB_REQUIRE_OK(nb_module_load_source(dev, "cmd.nb", SRC, NULL, &m));
    nb_func *add, *scale_into, *bump, *ids, *fill;
    NB_REQUIRE_OK(nb_module_func(m, "add", &add));
    NB_REQUIRE_OK(nb_module_func(m, "scale_into", &scale_into));
    NB_REQUIRE_OK(nb_module_func(m, "bump", &bump));
    NB_REQUIRE_OK(nb_module_func(m, "ids", &ids));
    NB_REQUIRE_OK(nb_module_func(m, "fill", &fill));
    float x4[4] = {1, 2, 3, 4}, got[4];
    int64_t s4[1] = {4};
    nb_tensor *x = NULL, *z = NULL, *acc = NULL, *dst = NULL;
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, s4, x4, &x));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, s4, &z));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, s4, &acc));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, s4, &dst));

    nb_cmdlist *l = NULL;
    NB_REQUIRE_OK(nb_cmdlist_create(dev, &l));
    NB_EXPECT(nb_cmdlist_device(l) == dev);
    /* y = x + 10 (allocated at append), z = y * 2, acc += z, then a kernel: in order */
    nb_call *c = NULL;
    nb_tensor *y = NULL;
    int n = 0;
    NB_REQUIRE_OK(nb_call_begin(add, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, x));
    NB_EXPECT_OK(nb_call_arg_double(c, 1, 10.0));
    NB_REQUIRE_OK(nb_cmdlist_append(l, c, &y, 1, &n));
    NB_EXPECT(n == 1 && y && nb_tensor_shape(y)[0] == 4);
    NB_REQUIRE_OK(nb_call_begin(scale_into, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, y));
    NB_EXPECT_OK(nb_call_arg_double(c, 1, 2.0));
    NB_EXPECT_OK(nb_call_arg(c, 2, z));
    NB_REQUIRE_OK(nb_cmdlist_append(l, c, NULL, 0, NULL));
    NB_REQUIRE_OK(nb_call_begin(bump, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, acc));
    NB_EXPECT_OK(nb_call_arg(c, 1, z));
    NB_REQUIRE_OK(nb_cmdlist_append(l, c, NULL, 0, NULL));
    NB_REQUIRE_OK(nb_call_begin(fill, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, dst));
    NB_EXPECT_OK(nb_call_arg_double(c, 1, 0.5));
    int64_t grid[3] = {4, 1, 1};
    NB_REQUIRE_OK(nb_cmdlist_append_grid(l, c, grid));
    NB_EXPECT(nb_cmdlist_count(l) == 4);
    /* nothing has run yet */
    NB_EXPECT_OK(nb_tensor_to_host(z, got, sizeof got));
    NB_EXPECT(got[0] == 0 && got[3] == 0);

    NB_REQUIRE_OK(nb_cmdlist_submit(l));
    NB_EXPECT_OK(nb_tensor_to_host(acc, got, sizeof got));
    for (int i = 0; i < 4; i++) NB_EXPECT(got[i] == (x4[i] + 10) * 2);
    NB_EXPECT_OK(nb_tensor_to_host(dst, got, sizeof got));
    for (int i = 0; i < 4; i++) NB_EXPECT(got[i] == 0.5f + (float)i);
    NB_EXPECT(nb_cmdlist_uses_graph(l) == (nb_device_get_kind(dev) == NB_DEVICE_CUDA));
    /* again, over x's new contents: acc accumulates */
    float x4b[4] = {0, 1, 0, 1};
    NB_REQUIRE_OK(nb_tensor_from_host_into(x, x4b, sizeof x4b));
    NB_REQUIRE_OK(nb_cmdlist_submit(l));
    NB_EXPECT_OK(nb_tensor_to_host(acc, got, sizeof got));
    for (int i = 0; i < 4; i++) NB_EXPECT(got[i] == (x4[i] + 10) * 2 + (x4b[i] + 10) * 2);
    NB_EXPECT_OK(nb_tensor_to_host(y, got, sizeof got));
    for (int i = 0; i < 4; i++) NB_EXPECT(got[i] == x4b[i] + 10);

    /* a bad argument is an error of the append, naming it; the list is unchanged */
    float bad3[3] = {1, 2, 3};
    int64_t s3[1] = {3};
    NB_REQUIRE_OK(nb_call_begin(add, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, x));
    NB_EXPECT_OK(nb_call_arg_value(c, 1, NB_F32, 1, s3, bad3));
    nb_tensor *y2 = NULL; /* (a failed append sets its results to NULL: not y, which is kept) */
    NB_EXPECT_ERR(nb_cmdlist_append(l, c, &y2, 1, &n), NB_ERR_SHAPE, "argument 'b'");
    NB_EXPECT(y2 == NULL);
    NB_REQUIRE_OK(nb_call_begin(add, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, x));
    NB_EXPECT_ERR(nb_cmdlist_append(l, c, NULL, 0, NULL), NB_ERR_INVALID_ARG, "missing argument for parameter 'b'");
    NB_REQUIRE_OK(nb_call_begin(ids, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, x));
    NB_EXPECT_ERR(nb_cmdlist_append(l, c, NULL, 0, NULL), NB_ERR_DTYPE, "argument 'i'");
    NB_EXPECT(nb_cmdlist_count(l) == 4);
    NB_REQUIRE_OK(nb_cmdlist_submit(l));

    /* an out-of-range index in a recorded call is reported by the submit */
    nb_cmdlist *l2 = NULL;
    NB_REQUIRE_OK(nb_cmdlist_create(dev, &l2));
    NB_REQUIRE_OK(nb_call_begin(fill, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, dst));
    NB_EXPECT_OK(nb_call_arg_double(c, 1, 0.5));
    int64_t grid8[3] = {8, 1, 1};
    NB_REQUIRE_OK(nb_cmdlist_append_grid(l2, c, grid8));
    NB_EXPECT_ERR(nb_cmdlist_submit(l2), NB_ERR_SHAPE, "out-of-bounds index");
    nb_cmdlist_free(l2);

    /* argument errors of the list itself */
    NB_EXPECT_ERR(nb_cmdlist_append(NULL, NULL, NULL, 0, NULL), NB_ERR_INVALID_ARG, "call is NULL");
    NB_EXPECT_ERR(nb_cmdlist_submit(NULL), NB_ERR_INVALID_ARG, "list is NULL");
    NB_EXPECT_ERR(nb_cmdlist_create(NULL, &l2), NB_ERR_INVALID_ARG, "device is NULL");
    nb_cmdlist *empty = NULL;
    NB_REQUIRE_OK(nb_cmdlist_create(dev, &empty));
    NB_EXPECT_OK(nb_cmdlist_submit(empty));
    nb_cmdlist_free(empty);

    nb_cmdlist_free(l);
    nb_tensor_free(y);
    nb_tensor_free(x);
    nb_tensor_free(z);
    nb_tensor_free(acc);
    nb_tensor_free(dst);
    nb_module_free(m);
}

static void test_cmdlist_cpu(void) {
    nb_device *d = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &d));
    lists(d);
    nb_device_close(d);
}

static void test_cmdlist_cuda(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *d = NULL;
    NB_REQUIRE_OK(nb_device_open("cuda", &d));
    lists(d);
    nb_device_close(d);
}

/* A list for one device does not take another device's calls. */
static void test_cmdlist_device_mismatch(void) {
    nb_device *cpu = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_module *m = NULL;
    NB_REQUIRE_OK(nb_module_load_source(NULL, "nodev.nb", SRC, NULL, &m));
    nb_func *add = NULL;
    NB_REQUIRE_OK(nb_module_func(m, "add", &add));
    nb_cmdlist *l = NULL;
    NB_REQUIRE_OK(nb_cmdlist_create(cpu, &l));
    nb_call *c = NULL;
    NB_REQUIRE_OK(nb_call_begin(add, &c));
    NB_EXPECT_ERR(nb_cmdlist_append(l, c, NULL, 0, NULL), NB_ERR_DEVICE, "command list is for cpu");
    nb_cmdlist_free(l);
    nb_module_free(m);
    nb_device_close(cpu);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_cmdlist_cpu, test_cmdlist_cuda, test_cmdlist_device_mismatch);
}

/* nb_stream_wait_native / nb_native_wait_stream (device.h): ordering nabla's main stream with
 * streams of other CUDA users (PyTorch). No-ops on the CPU; on CUDA, every direction with a
 * created stream and the legacy default stream (NULL), then a synchronize that must succeed. */
#include <string.h>

#include "nabla/nabla.h"
#include "nb_test.h"

static void test_cpu_noop(void) {
    nb_device *cpu = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    NB_EXPECT_OK(nb_stream_wait_native(nb_device_stream(cpu), NULL));
    NB_EXPECT_OK(nb_native_wait_stream(NULL, nb_device_stream(cpu)));
    NB_EXPECT_ERR(nb_stream_wait_native(NULL, NULL), NB_ERR_INVALID_ARG, "");
    NB_EXPECT_ERR(nb_native_wait_stream(NULL, NULL), NB_ERR_INVALID_ARG, "");
    nb_device_close(cpu);
}

static void test_cuda_order(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *dev = NULL;
    NB_REQUIRE_OK(nb_device_open("cuda", &dev));
    nb_stream *other = NULL;
    NB_REQUIRE_OK(nb_stream_create(dev, &other));
    void *native = nb_stream_native(other);
    nb_stream *main_s = nb_device_stream(dev);
    nb_buffer *b = NULL;
    NB_REQUIRE_OK(nb_buffer_alloc(dev, 1 << 20, &b));
    for (int i = 0; i < 100; i++) {
        NB_EXPECT_OK(nb_memset(dev, nb_buffer_ptr(b), i & 0xff, 1 << 20));
        NB_EXPECT_OK(nb_native_wait_stream(native, main_s));
        NB_EXPECT_OK(nb_stream_wait_native(main_s, native));
        NB_EXPECT_OK(nb_stream_wait_native(main_s, NULL)); /* the legacy default stream */
        NB_EXPECT_OK(nb_native_wait_stream(NULL, main_s));
    }
    NB_EXPECT_OK(nb_stream_wait_native(main_s, nb_stream_native(main_s))); /* itself: no-op */
    NB_EXPECT_OK(nb_device_synchronize(dev));
    unsigned char host[16];
    NB_EXPECT_OK(nb_memcpy_d2h(dev, host, nb_buffer_ptr(b), sizeof host));
    NB_EXPECT(host[0] == 99 && host[15] == 99);
    nb_buffer_release(b);
    nb_stream_destroy(other);
    nb_device_close(dev);
}

int main(int argc, char **argv) { NB_TEST_MAIN(argc, argv, test_cpu_noop, test_cuda_order); }

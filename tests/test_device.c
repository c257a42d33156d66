/* Devices: opening by name, the CPU backend, buffers, the caching allocator, streams, events. */
#include "device/device_impl.h"
#include "nb_test.h"

static void test_open_specs(void) {
    nb_device *a = NULL, *b = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &a));
    NB_EXPECT(nb_device_get_kind(a) == NB_DEVICE_CPU);
    NB_EXPECT(strcmp(nb_device_name(a), "cpu") == 0);
    NB_EXPECT(nb_device_get_info(a)->total_memory > 0);
    NB_EXPECT(nb_device_get_info(a)->multiprocessors >= 1);
    NB_REQUIRE_OK(nb_device_open("cpu", &b));
    NB_EXPECT(a == b); /* shared handle */
    nb_device_close(b);
    nb_device_close(a);

    nb_device *d = NULL;
    NB_REQUIRE_OK(nb_device_open("auto", &d));
    if (nb_cuda_device_count() == 0) NB_EXPECT(nb_device_get_kind(d) == NB_DEVICE_CPU);
    else NB_EXPECT(nb_device_get_kind(d) == NB_DEVICE_CUDA);
    nb_device_close(d);
}

static void test_open_bad_specs(void) {
    nb_device *d = (nb_device *)1;
    NB_EXPECT_ERR(nb_device_open("gpu", &d), NB_ERR_INVALID_ARG, "unknown device \"gpu\"");
    NB_EXPECT(d == NULL);
    NB_EXPECT_ERR(nb_device_open("cuda:x", &d), NB_ERR_INVALID_ARG, "cuda:N");
    NB_EXPECT_ERR(nb_device_open("cuda:-1", &d), NB_ERR_INVALID_ARG, "unknown device");
    NB_EXPECT_ERR(nb_device_open("cuda:1x", &d), NB_ERR_INVALID_ARG, "unknown device");
    NB_EXPECT_ERR(nb_device_open(NULL, &d), NB_ERR_INVALID_ARG, "'spec' is NULL");
    NB_EXPECT_ERR(nb_device_open("cpu", NULL), NB_ERR_INVALID_ARG, "'out' is NULL");
    /* Out of range CUDA index: no driver here, or too few GPUs there — both are NO_DEVICE. */
    NB_EXPECT_ERR(nb_device_open("cuda:63", &d), NB_ERR_NO_DEVICE, "cuda");
}

static void test_cpu_buffers_and_copies(void) {
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    nb_buffer *a, *b;
    NB_REQUIRE_OK(nb_buffer_alloc(dev, 1000, &a));
    NB_REQUIRE_OK(nb_buffer_alloc(dev, 1000, &b));
    NB_EXPECT(((uintptr_t)nb_buffer_ptr(a) % 64) == 0);
    NB_EXPECT(nb_buffer_size(a) == 1000 && nb_buffer_device(a) == dev);
    unsigned char src[1000], dst[1000];
    for (int i = 0; i < 1000; i++) src[i] = (unsigned char)(i * 37);
    NB_EXPECT_OK(nb_memcpy_h2d(dev, nb_buffer_ptr(a), src, 1000));
    NB_EXPECT_OK(nb_memcpy_d2d(dev, nb_buffer_ptr(b), nb_buffer_ptr(a), 1000));
    NB_EXPECT_OK(nb_memcpy_d2h(dev, dst, nb_buffer_ptr(b), 1000));
    NB_EXPECT(memcmp(src, dst, 1000) == 0);
    NB_EXPECT_OK(nb_memset(dev, nb_buffer_ptr(b), 0x5a, 500));
    NB_EXPECT_OK(nb_memcpy_d2h(dev, dst, nb_buffer_ptr(b), 1000));
    NB_EXPECT(dst[0] == 0x5a && dst[499] == 0x5a && dst[500] == src[500]);
    NB_EXPECT_OK(nb_memcpy_h2d(dev, NULL, NULL, 0)); /* zero bytes: nothing to check */
    NB_EXPECT_ERR(nb_memcpy_h2d(dev, NULL, src, 4), NB_ERR_INVALID_ARG, "'dst' is NULL");
    nb_buffer_retain(a);
    nb_buffer_release(a);
    NB_EXPECT(nb_buffer_ptr(a) != NULL); /* still alive: one reference left */
    nb_buffer_release(a);
    nb_buffer_release(b);
    nb_device_close(dev);
}

static void test_caching_allocator_steady_state(void) {
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    NB_EXPECT_OK(nb_device_empty_cache(dev));
    nb_mem_stats s0, s1;
    NB_REQUIRE_OK(nb_device_mem_stats(dev, &s0));
    for (int it = 0; it < 100; it++) {
        nb_buffer *x, *y;
        NB_REQUIRE_OK(nb_buffer_alloc(dev, 4096, &x));
        NB_REQUIRE_OK(nb_buffer_alloc(dev, 3 << 20, &y));
        nb_buffer_release(x);
        nb_buffer_release(y);
    }
    NB_REQUIRE_OK(nb_device_mem_stats(dev, &s1));
    NB_EXPECT(s1.driver_allocs - s0.driver_allocs == 2); /* only the first iteration */
    NB_EXPECT(s1.cache_hits - s0.cache_hits == 198);
    NB_EXPECT(s1.bytes_in_use == s0.bytes_in_use);
    NB_EXPECT(s1.bytes_cached >= (3u << 20));
    /* A small request does not take a much larger cached block. */
    nb_buffer *small;
    NB_REQUIRE_OK(nb_buffer_alloc(dev, 100, &small));
    nb_mem_stats s2;
    NB_REQUIRE_OK(nb_device_mem_stats(dev, &s2));
    NB_EXPECT(s2.bytes_in_use - s1.bytes_in_use == 512);
    nb_buffer_release(small);
    NB_EXPECT_OK(nb_device_empty_cache(dev));
    NB_REQUIRE_OK(nb_device_mem_stats(dev, &s2));
    NB_EXPECT(s2.bytes_cached == 0);
    NB_EXPECT(nb_cache_round(1) == 512 && nb_cache_round(513) == 1024);
    NB_EXPECT(nb_cache_round((1u << 20) + 1) == (1u << 20) + (128u << 10));
    NB_EXPECT(nb_cache_round((size_t)-1) == 0);
    nb_device_close(dev);
}

static void test_alloc_too_large(void) {
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    nb_buffer *b = NULL;
    NB_EXPECT_ERR(nb_buffer_alloc(dev, (size_t)-1, &b), NB_ERR_OUT_OF_MEMORY, "cannot allocate");
    NB_EXPECT(b == NULL);
    nb_device_close(dev);
}

static void test_cpu_streams_events(void) {
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    NB_EXPECT(nb_device_stream(dev) != NULL);
    nb_stream *s;
    NB_REQUIRE_OK(nb_stream_create(dev, &s));
    nb_event *e0, *e1;
    NB_REQUIRE_OK(nb_event_create(dev, &e0));
    NB_REQUIRE_OK(nb_event_create(dev, &e1));
    float ms = -1;
    NB_EXPECT_ERR(nb_event_elapsed_ms(e0, e1, &ms), NB_ERR_INVALID_ARG, "never recorded");
    NB_EXPECT_OK(nb_event_record(e0, s));
    volatile double x = 0;
    for (int i = 0; i < 100000; i++) x += i;
    (void)x;
    NB_EXPECT_OK(nb_event_record(e1, NULL));
    NB_EXPECT_OK(nb_stream_wait_event(s, e1));
    NB_EXPECT_OK(nb_event_synchronize(e1));
    NB_EXPECT_OK(nb_event_elapsed_ms(e0, e1, &ms));
    NB_EXPECT(ms >= 0);
    NB_EXPECT_OK(nb_stream_synchronize(s));
    NB_EXPECT_OK(nb_device_synchronize(dev));
    nb_stream_destroy(nb_device_stream(dev)); /* the main stream is not the caller's: ignored */
    nb_event_destroy(e0);
    nb_event_destroy(e1);
    nb_stream_destroy(s);
    nb_device_close(dev);
}

/* Graphs need CUDA: the CPU device says so; bad arguments are errors. */
static void test_cpu_graphs_unsupported(void) {
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    NB_EXPECT_ERR(nb_device_graph_capture_begin(dev), NB_ERR_UNSUPPORTED, "CUDA device");
    nb_device_graph *g = (nb_device_graph *)&g;
    NB_EXPECT_ERR(nb_device_graph_capture_end(dev, &g), NB_ERR_UNSUPPORTED, "CUDA device");
    NB_EXPECT(g == NULL);
    NB_EXPECT_ERR(nb_device_graph_capture_begin(NULL), NB_ERR_INVALID_ARG, "NULL");
    NB_EXPECT_ERR(nb_device_graph_launch(NULL), NB_ERR_INVALID_ARG, "NULL");
    nb_device_graph_destroy(NULL);
    nb_device_close(dev);
}

/* A buffer keeps its device alive: closing the device first is safe. */
static void test_buffer_outlives_close(void) {
    nb_device *dev;
    NB_REQUIRE_OK(nb_device_open("cpu", &dev));
    int64_t shape[1] = {16};
    nb_tensor *t;
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, shape, &t));
    nb_device_close(dev);
    float host[16];
    NB_EXPECT_OK(nb_tensor_to_host(t, host, sizeof host));
    NB_EXPECT(host[15] == 0.0f);
    nb_tensor_free(t); /* releases the last reference: the device goes now */
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_open_specs, test_open_bad_specs, test_cpu_buffers_and_copies,
                 test_caching_allocator_steady_state, test_alloc_too_large, test_cpu_streams_events,
                 test_buffer_outlives_close, test_cpu_graphs_unsupported);
}

/* The CUDA backend on a real GPU: device properties, memory and the caching allocator, copies,
 * streams and events, NVRTC compile + module load + launch, and error reporting.
 *
 * Every test skips ("no CUDA device: <reason>") where there is no GPU or driver, so this
 * executable reports skipped there; NB_REQUIRE_CUDA=1 turns that into a failure on GPU machines.
 * The no-driver behaviour is tested by test_cuda_nodriver.c.
 */
#include <pthread.h>
#include <stdint.h>

#include "device/cuda/cuda_api.h"
#include "nb_test.h"

/* Opens cuda:0 into dev, or skips the test. */
#define OPEN_CUDA(dev)                                                                         \
    do {                                                                                       \
        if (nb_cuda_device_count() == 0) {                                                     \
            char why_[1024];                                                                   \
            snprintf(why_, sizeof why_, "no CUDA device: %s", nb_cuda_unavailable_reason());   \
            NB_SKIP(why_);                                                                     \
        }                                                                                      \
        NB_REQUIRE_OK(nb_device_open("cuda", &(dev)));                                         \
    } while (0)

/* Skips when NVRTC cannot be loaded (closing dev first). */
#define NEED_NVRTC(dev)                                                                        \
    do {                                                                                       \
        if (nb_nvrtc_version() == 0) {                                                         \
            char why_[2200];                                                                   \
            snprintf(why_, sizeof why_, "NVRTC not available: %s",                             \
                     nb_nvrtc_unavailable_reason());                                           \
            nb_device_close(dev);                                                              \
            NB_SKIP(why_);                                                                     \
        }                                                                                      \
    } while (0)

static const char *kAxpy =
    "extern \"C\" __global__ void axpy(float a, const float *x, float *y, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) y[i] = a * x[i] + y[i];\n"
    "}\n"
    "extern \"C\" __global__ void copy_bytes(const unsigned char *src, unsigned char *dst,\n"
    "                                        unsigned long long n) {\n"
    "    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    for (; i < n; i += (unsigned long long)gridDim.x * blockDim.x) dst[i] = src[i];\n"
    "}\n"
    /* Spins for about `cycles` clocks so that a stream has work in flight. */
    "extern \"C\" __global__ void spin(long long cycles) {\n"
    "    long long t0 = clock64();\n"
    "    while (clock64() - t0 < cycles) {}\n"
    "}\n"
    /* Uses `n` floats of dynamic shared memory: writes them, then reads them reversed. */
    "extern \"C\" __global__ void smem_reverse(float *out, int n) {\n"
    "    extern __shared__ float buf[];\n"
    "    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = (float)i;\n"
    "    __syncthreads();\n"
    "    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buf[n - 1 - i];\n"
    "}\n";

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Compiles kAxpy for dev and loads it; returns NULL (after a recorded failure) on error. */
static nb_cuda_module *load_kernels(nb_device *dev) {
    void *img = NULL;
    size_t size = 0;
    nb_status s = nb_cuda_compile(dev, kAxpy, "kernels.cu", NULL, &img, &size);
    if (s != NB_OK) {
        fprintf(stderr, "  nb_cuda_compile: %s: %s\n", nb_status_name(s), nb_last_error());
        nb_test_failures_++;
        return NULL;
    }
    nb_cuda_module *m = NULL;
    s = nb_cuda_module_load(dev, img, size, &m);
    nb_free(img, size);
    if (s != NB_OK) {
        fprintf(stderr, "  nb_cuda_module_load: %s: %s\n", nb_status_name(s), nb_last_error());
        nb_test_failures_++;
        return NULL;
    }
    return m;
}

static void test_cuda_properties(void) {
    nb_device *dev = NULL;
    OPEN_CUDA(dev);
    const nb_device_info *in = nb_device_get_info(dev);
    printf("  %s: %s, sm_%d%d, %d SMs, %.1f GiB, smem %zu/%zu/%zu, L2 %zu, clock %d kHz, bus %d "
           "bits, driver %d, NVRTC %d\n",
           nb_device_name(dev), in->name, in->cc_major, in->cc_minor, in->multiprocessors,
           (double)in->total_memory / (1 << 30), in->shared_mem_per_block,
           in->shared_mem_per_block_optin, in->shared_mem_per_sm, in->l2_cache, in->clock_khz,
           in->memory_bus_width, in->driver_version, nb_nvrtc_version());
    NB_EXPECT(nb_device_get_kind(dev) == NB_DEVICE_CUDA);
    NB_EXPECT(strcmp(nb_device_name(dev), "cuda:0") == 0);
    NB_EXPECT(in->kind == NB_DEVICE_CUDA && in->index == 0);
    NB_EXPECT(in->name[0] != '\0');
    NB_EXPECT(in->cc_major >= 5 && in->cc_minor >= 0 && in->cc_minor < 10);
    NB_EXPECT(in->multiprocessors > 0);
    NB_EXPECT(in->shared_mem_per_block >= 48 * 1024);
    NB_EXPECT(in->shared_mem_per_block_optin >= in->shared_mem_per_block);
    NB_EXPECT(in->shared_mem_per_sm >= in->shared_mem_per_block_optin);
    NB_EXPECT(in->total_memory >= ((size_t)256 << 20));
    NB_EXPECT(in->l2_cache > 0);
    NB_EXPECT(in->warp_size == 32);
    NB_EXPECT(in->max_threads_per_block >= 512);
    NB_EXPECT(in->driver_version >= 11000);
    NB_EXPECT(nb_device_stream(dev) != NULL && nb_stream_native(nb_device_stream(dev)) != NULL);
    nb_device *again = NULL;
    NB_EXPECT_OK(nb_device_open("cuda:0", &again));
    NB_EXPECT(again == dev); /* shared handle */
    nb_device_close(again);
    NB_EXPECT_OK(nb_device_synchronize(dev));
    nb_device_close(dev);
}

static void test_cuda_index_out_of_range(void) {
    nb_device *dev = NULL;
    OPEN_CUDA(dev);
    int n = nb_cuda_device_count();
    char spec[32], want[128];
    snprintf(spec, sizeof spec, "cuda:%d", n);
    snprintf(want, sizeof want, "%s requested but this machine has %d CUDA device(s)", spec, n);
    nb_device *d = (nb_device *)1;
    NB_EXPECT_ERR(nb_device_open(spec, &d), NB_ERR_NO_DEVICE, want);
    NB_EXPECT(d == NULL);
    if (n < 7) NB_EXPECT_ERR(nb_device_open("cuda:7", &d), NB_ERR_NO_DEVICE, "CUDA device(s)");
    NB_EXPECT(nb_cuda_unavailable_reason() == NULL);
    nb_device_close(dev);
}

static void test_cuda_caching_allocator(void) {
    nb_device *dev = NULL;
    OPEN_CUDA(dev);
    nb_mem_stats first, st;
    const size_t bytes = (1u << 20) + 12345;
    for (int i = 0; i < 100; i++) {
        nb_buffer *b = NULL;
        NB_REQUIRE_OK(nb_buffer_alloc(dev, bytes, &b));
        NB_EXPECT(nb_buffer_ptr(b) != NULL && nb_buffer_size(b) == bytes);
        NB_EXPECT(nb_buffer_device(b) == dev);
        nb_buffer_release(b);
        if (i == 0) NB_REQUIRE_OK(nb_device_mem_stats(dev, &first));
    }
    NB_REQUIRE_OK(nb_device_mem_stats(dev, &st));
    /* After the first round trip every allocation is served from the pool. */
    NB_EXPECT(st.driver_allocs == first.driver_allocs);
    NB_EXPECT(st.cache_hits >= first.cache_hits + 99);
    NB_EXPECT(st.bytes_cached >= bytes);
    NB_EXPECT(st.peak_bytes_in_use >= bytes);
    NB_EXPECT_OK(nb_device_empty_cache(dev));
    NB_REQUIRE_OK(nb_device_mem_stats(dev, &st));
    NB_EXPECT(st.bytes_cached == 0);
    NB_EXPECT(st.driver_frees > first.driver_frees);
    nb_device_close(dev);
}

static void test_cuda_alloc_too_large(void) {
    nb_device *dev = NULL;
    OPEN_CUDA(dev);
    nb_buffer *b = (nb_buffer *)1;
    /* More than any GPU has: a clean out-of-memory error, not a crash. */
    size_t huge = nb_device_get_info(dev)->total_memory * 4;
    NB_EXPECT_ERR(nb_buffer_alloc(dev, huge, &b), NB_ERR_OUT_OF_MEMORY, "cuMemAlloc");
    NB_EXPECT(b == NULL);
    /* The device still works afterwards. */
    NB_REQUIRE_OK(nb_buffer_alloc(dev, 4096, &b));
    NB_EXPECT_OK(nb_memset(dev, nb_buffer_ptr(b), 0, 4096));
    NB_EXPECT_OK(nb_device_synchronize(dev));
    nb_buffer_release(b);
    nb_device_close(dev);
}

static void test_cuda_copies_roundtrip(void) {
    nb_device *dev = NULL;
    OPEN_CUDA(dev);
    const size_t n = (1u << 22) + 7; /* odd size: no alignment luck */
    unsigned char *src = malloc(n), *dst = malloc(n);
    NB_REQUIRE_OK(src && dst ? NB_OK : NB_ERR_OUT_OF_MEMORY);
    for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(rng_next() >> 56);
    nb_buffer *a = NULL, *b = NULL;
    NB_REQUIRE_OK(nb_buffer_alloc(dev, n, &a));
    NB_REQUIRE_OK(nb_buffer_alloc(dev, n, &b));
    unsigned char *pa = nb_buffer_ptr(a), *pb = nb_buffer_ptr(b);
    NB_EXPECT_OK(nb_memcpy_h2d(dev, pa, src, n));
    /* The host buffer may be reused as soon as h2d returns. */
    memset(src + n / 2, 0, 16);
    NB_EXPECT_OK(nb_memcpy_d2d(dev, pb, pa, n));
    NB_EXPECT_OK(nb_memcpy_d2h(dev, dst, pb, n));
    memset(dst + n / 2, 0, 16);
    NB_EXPECT(memcmp(src, dst, n) == 0);
    /* Unaligned sub-ranges. */
    NB_EXPECT_OK(nb_memcpy_d2d(dev, pb + 1, pa + 3, 1000));
    NB_EXPECT_OK(nb_memcpy_d2h(dev, dst, pb + 1, 1000));
    unsigned char ref[1000];
    NB_EXPECT_OK(nb_memcpy_d2h(dev, ref, pa + 3, 1000));
    NB_EXPECT(memcmp(dst, ref, 1000) == 0);
    NB_EXPECT_OK(nb_memcpy_h2d(dev, pa, NULL, 0)); /* zero bytes */
    nb_buffer_release(a);
    nb_buffer_release(b);
    free(src);
    free(dst);
    nb_device_close(dev);
}

static void test_cuda_memset(void) {
    nb_device *dev = NULL;
    OPEN_CUDA(dev);
    const size_t n = 3 * 1000 * 1000 + 1;
    unsigned char *h = malloc(n);
    NB_REQUIRE_OK(h ? NB_OK : NB_ERR_OUT_OF_MEMORY);
    nb_buffer *b = NULL;
    NB_REQUIRE_OK(nb_buffer_alloc(dev, n, &b));
    unsigned char *p = nb_buffer_ptr(b);
    NB_EXPECT_OK(nb_memset(dev, p, 0xab, n));
    NB_EXPECT_OK(nb_memset(dev, p + 5, 0x100 + 0x11, 10)); /* only the low byte counts */
    NB_EXPECT_OK(nb_memcpy_d2h(dev, h, p, n));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != ((i >= 5 && i < 15) ? 0x11 : 0xab);
    NB_EXPECT(bad == 0);
    nb_buffer_release(b);
    free(h);
    nb_device_close(dev);
}

static void test_cuda_events_timing(void) {
    nb_device *dev = NULL;
    OPEN_CUDA(dev);
    nb_event *e0 = NULL, *e1 = NULL;
    NB_REQUIRE_OK(nb_event_create(dev, &e0));
    NB_REQUIRE_OK(nb_event_create(dev, &e1));
    /* Never recorded: an error, not a crash. */
    float ms = -1.0f;
    NB_EXPECT(nb_event_elapsed_ms(e0, e1, &ms) != NB_OK);
    nb_buffer *b = NULL;
    const size_t n = (size_t)64 << 20;
    NB_REQUIRE_OK(nb_buffer_alloc(dev, n, &b));
    nb_stream *s = nb_device_stream(dev);
    NB_EXPECT_OK(nb_event_record(e0, s));
    for (int i = 0; i < 20; i++) NB_EXPECT_OK(nb_memset(dev, nb_buffer_ptr(b), i, n));
    NB_EXPECT_OK(nb_event_record(e1, NULL)); /* NULL = the main stream */
    NB_EXPECT_OK(nb_event_synchronize(e1));
    ms = -1.0f;
    NB_EXPECT_OK(nb_event_elapsed_ms(e0, e1, &ms));
    printf("  20 memsets of 64 MiB: %.3f ms\n", ms);
    NB_EXPECT(ms > 0.0f && ms < 10000.0f);
    nb_buffer_release(b);
    nb_event_destroy(e0);
    nb_event_destroy(e1);
    nb_device_close(dev);
}

static void test_cuda_streams_and_wait_event(void) {
    nb_device *dev = NULL;
    OPEN_CUDA(dev);
    NEED_NVRTC(dev);
    nb_cuda_module *m = load_kernels(dev);
    if (!m) {
        nb_device_close(dev);
        return;
    }
    nb_cuda_function *copy = NULL, *spin = NULL;
    NB_REQUIRE_OK(nb_cuda_module_function(m, "copy_bytes", &copy));
    NB_REQUIRE_OK(nb_cuda_module_function(m, "spin", &spin));
    nb_stream *s2 = NULL;
    NB_REQUIRE_OK(nb_stream_create(dev, &s2));
    NB_EXPECT(nb_stream_native(s2) != NULL);
    NB_EXPECT(nb_stream_native(s2) != nb_stream_native(nb_device_stream(dev)));
    nb_event *e = NULL;
    NB_REQUIRE_OK(nb_event_create(dev, &e));

    const size_t n = (size_t)16 << 20;
    nb_buffer *a = NULL, *b = NULL;
    NB_REQUIRE_OK(nb_buffer_alloc(dev, n, &a));
    NB_REQUIRE_OK(nb_buffer_alloc(dev, n, &b));
    void *pa = nb_buffer_ptr(a), *pb = nb_buffer_ptr(b);
    NB_EXPECT_OK(nb_memset(dev, pb, 0, n));
    /* Main stream: ~20 ms of spinning, then fill a. s2 waits for that, then copies a -> b.
     * Without the wait, s2 would copy before the fill lands. */
    long long cycles = (long long)nb_device_get_info(dev)->clock_khz * 20;
    if (cycles <= 0) cycles = 40 * 1000 * 1000;
    unsigned g1[3] = {1, 1, 1}, b1[3] = {1, 1, 1};
    void *spin_args[] = {&cycles};
    NB_EXPECT_OK(nb_cuda_launch(spin, g1, b1, 0, NULL, spin_args));
    NB_EXPECT_OK(nb_memset(dev, pa, 0x77, n));
    NB_EXPECT_OK(nb_event_record(e, nb_device_stream(dev)));
    NB_EXPECT_OK(nb_stream_wait_event(s2, e));
    unsigned long long nn = n;
    unsigned grid[3] = {1024, 1, 1}, block[3] = {256, 1, 1};
    void *args[] = {&pa, &pb, &nn};
    NB_EXPECT_OK(nb_cuda_launch(copy, grid, block, 0, s2, args));
    NB_EXPECT_OK(nb_stream_synchronize(s2));
    unsigned char *h = malloc(n);
    NB_REQUIRE_OK(h ? NB_OK : NB_ERR_OUT_OF_MEMORY);
    NB_EXPECT_OK(nb_memcpy_d2h(dev, h, pb, n));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != 0x77;
    NB_EXPECT(bad == 0);
    free(h);
    nb_buffer_release(a);
    nb_buffer_release(b);
    nb_event_destroy(e);
    nb_stream_destroy(s2);
    nb_cuda_module_unload(m);
    nb_device_close(dev);
}

static void test_cuda_nvrtc_axpy(void) {
    nb_device *dev = NULL;
    OPEN_CUDA(dev);
    NEED_NVRTC(dev);
    nb_cuda_module *m = load_kernels(dev);
    if (!m) {
        nb_device_close(dev);
        return;
    }
    nb_cuda_function *f = NULL, *f2 = NULL;
    NB_REQUIRE_OK(nb_cuda_module_function(m, "axpy", &f));
    NB_REQUIRE_OK(nb_cuda_module_function(m, "axpy", &f2));
    NB_EXPECT(f == f2); /* handles are cached per name */

    const int n = (1 << 20) + 3; /* not a multiple of the block */
    const float a = 2.5f;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    float *out = malloc(n * sizeof(float));
    NB_REQUIRE_OK(x && y && out ? NB_OK : NB_ERR_OUT_OF_MEMORY);
    for (int i = 0; i < n; i++) {
        x[i] = (float)(rng_next() % 20001) / 1000.0f - 10.0f;
        y[i] = (float)(rng_next() % 20001) / 1000.0f - 10.0f;
    }
    nb_buffer *bx = NULL, *by = NULL;
    NB_REQUIRE_OK(nb_buffer_alloc(dev, n * sizeof(float), &bx));
    NB_REQUIRE_OK(nb_buffer_alloc(dev, n * sizeof(float), &by));
    void *px = nb_buffer_ptr(bx), *py = nb_buffer_ptr(by);
    NB_EXPECT_OK(nb_memcpy_h2d(dev, px, x, n * sizeof(float)));
    NB_EXPECT_OK(nb_memcpy_h2d(dev, py, y, n * sizeof(float)));
    unsigned block[3] = {256, 1, 1};
    unsigned grid[3] = {(unsigned)((n + 255) / 256), 1, 1};
    float aa = a;
    int nn = n;
    void *args[] = {&aa, &px, &py, &nn};
    NB_EXPECT_OK(nb_cuda_launch(f, grid, block, 0, NULL, args));
    NB_EXPECT_OK(nb_memcpy_d2h(dev, out, py, n * sizeof(float)));
    int bad = 0;
    for (int i = 0; i < n; i++) {
        float ref = a * x[i] + y[i];
        /* The GPU fuses into an FMA; the CPU may not: allow a couple of ulps. */
        if (fabsf(out[i] - ref) > 1e-5f * (fabsf(ref) + 1.0f)) bad++;
    }
    NB_EXPECT(bad == 0);
    if (bad) fprintf(stderr, "  %d of %d elements differ\n", bad, n);
    nb_buffer_release(bx);
    nb_buffer_release(by);
    free(x);
    free(y);
    free(out);
    nb_cuda_module_unload(m);
    nb_device_close(dev);
}

/* A captured graph (memset + axpy) runs nothing while capturing and replays on the memory and
 * arguments it was captured with, reading the buffers' contents at replay time; after a capture
 * with a pageable host -> device copy in it (refused by the driver) the stream works on. */
static void test_cuda_graph_capture_replay(void) {
    nb_device *dev = NULL;
    OPEN_CUDA(dev);
    NEED_NVRTC(dev);
    nb_cuda_module *m = load_kernels(dev);
    if (!m) {
        nb_device_close(dev);
        return;
    }
    nb_cuda_function *f = NULL;
    NB_REQUIRE_OK(nb_cuda_module_function(m, "axpy", &f));
    const int n = 1000;
    float x[1000], y[1000], out[1000];
    for (int i = 0; i < n; i++) x[i] = (float)i, y[i] = 1.0f;
    nb_buffer *bx = NULL, *by = NULL, *bz = NULL;
    NB_REQUIRE_OK(nb_buffer_alloc(dev, n * sizeof(float), &bx));
    NB_REQUIRE_OK(nb_buffer_alloc(dev, n * sizeof(float), &by));
    NB_REQUIRE_OK(nb_buffer_alloc(dev, n * sizeof(float), &bz));
    void *px = nb_buffer_ptr(bx), *py = nb_buffer_ptr(by), *pz = nb_buffer_ptr(bz);
    NB_EXPECT_OK(nb_memcpy_h2d(dev, px, x, sizeof x));
    NB_EXPECT_OK(nb_memcpy_h2d(dev, py, y, sizeof y));
    unsigned block[3] = {128, 1, 1}, grid[3] = {(unsigned)((n + 127) / 128), 1, 1};
    float a = 2.0f;
    int nn = n;
    void *args[] = {&a, &px, &py, &nn};
    nb_device_graph *g = NULL;
    NB_REQUIRE_OK(nb_device_graph_capture_begin(dev));
    NB_EXPECT_OK(nb_memset(dev, pz, 0, sizeof(float) * n));
    NB_EXPECT_OK(nb_cuda_launch(f, grid, block, 0, NULL, args)); /* y += 2 x */
    a = 100.0f; /* the argument was captured by value */
    NB_REQUIRE_OK(nb_device_graph_capture_end(dev, &g));
    NB_EXPECT_OK(nb_memcpy_d2h(dev, out, py, sizeof out));
    NB_EXPECT(out[7] == 1.0f); /* nothing ran yet */
    NB_EXPECT_OK(nb_device_graph_launch(g));
    NB_EXPECT_OK(nb_device_graph_launch(g));
    NB_EXPECT_OK(nb_memcpy_d2h(dev, out, py, sizeof out));
    int bad = 0;
    for (int i = 0; i < n; i++) bad += out[i] != 1.0f + 4.0f * i;
    NB_EXPECT(bad == 0);
    x[5] = -1.0f; /* replays read the buffers as they are now */
    NB_EXPECT_OK(nb_memcpy_h2d(dev, px, x, sizeof x));
    NB_EXPECT_OK(nb_device_graph_launch(g));
    NB_EXPECT_OK(nb_memcpy_d2h(dev, out, py, sizeof out));
    NB_EXPECT(out[5] == 1.0f + 4.0f * 5 - 2.0f && out[6] == 1.0f + 6.0f * 6);
    nb_device_graph_destroy(g);
    /* a pageable copy inside a capture: an error at the copy or at the end, never a hang */
    NB_REQUIRE_OK(nb_device_graph_capture_begin(dev));
    nb_status cs = nb_memcpy_h2d(dev, px, x, sizeof x);
    nb_status es = nb_device_graph_capture_end(dev, &g);
    printf("  pageable copy in a capture: copy %s, end %s\n", nb_status_name(cs), nb_status_name(es));
    NB_EXPECT(es != NB_OK ? g == NULL : 1);
    nb_device_graph_destroy(g);
    NB_EXPECT_OK(nb_memcpy_d2h(dev, out, py, sizeof out)); /* the stream works again */
    /* no place for the graph: the capture is ended and discarded, an error says so */
    NB_REQUIRE_OK(nb_device_graph_capture_begin(dev));
    NB_EXPECT_ERR(nb_device_graph_capture_end(dev, NULL), NB_ERR_INVALID_ARG, "out is NULL");
    NB_EXPECT_OK(nb_memcpy_d2h(dev, out, py, sizeof out));
    NB_EXPECT(out[6] == 1.0f + 6.0f * 6);
    nb_buffer_release(bx), nb_buffer_release(by), nb_buffer_release(bz);
    nb_cuda_module_unload(m);
    nb_device_close(dev);
}

static void test_cuda_compile_errors(void) {
    nb_device *dev = NULL;
    OPEN_CUDA(dev);
    NEED_NVRTC(dev);
    const char *bad = "extern \"C\" __global__ void k(float *x) { x[0] = not_declared_here; }\n";
    void *img = (void *)1;
    size_t size = 1;
    NB_EXPECT_ERR(nb_cuda_compile(dev, bad, "broken.cu", NULL, &img, &size), NB_ERR_COMPILE,
                  "not_declared_here");
    NB_EXPECT(strstr(nb_last_error(), "broken.cu") != NULL);
    NB_EXPECT(img == NULL && size == 0);
    /* An explicit architecture in the options replaces the device's. */
    const char *opts[] = {"--gpu-architecture=compute_75", NULL};
    NB_EXPECT_OK(nb_cuda_compile(dev, kAxpy, "ptx.cu", opts, &img, &size));
    if (img) {
        NB_EXPECT(strstr((char *)img, ".target sm_75") != NULL);
        nb_cuda_module *m = NULL;
        NB_EXPECT_OK(nb_cuda_module_load(dev, img, size, &m)); /* PTX, JIT-compiled by the driver */
        nb_cuda_module_unload(m);
        nb_free(img, size);
    }
    /* Garbage is rejected before the driver sees it (PTX needs a NUL). */
    nb_cuda_module *m = (nb_cuda_module *)1;
    NB_EXPECT_ERR(nb_cuda_module_load(dev, "garbage", 7, &m), NB_ERR_INVALID_ARG, "NUL");
    NB_EXPECT(m == NULL);
    NB_EXPECT_ERR(nb_cuda_module_load(dev, "garbage", 8, &m), NB_ERR_DEVICE, "cuModuleLoadData");
    nb_device_close(dev);
}

static void test_cuda_missing_function(void) {
    nb_device *dev = NULL;
    OPEN_CUDA(dev);
    NEED_NVRTC(dev);
    nb_cuda_module *m = load_kernels(dev);
    if (!m) {
        nb_device_close(dev);
        return;
    }
    nb_cuda_function *f = (nb_cuda_function *)1;
    NB_EXPECT_ERR(nb_cuda_module_function(m, "no_such_kernel", &f), NB_ERR_NOT_FOUND,
                  "'no_such_kernel'");
    NB_EXPECT(f == NULL);
    nb_cuda_module_unload(m);
    nb_device_close(dev);
}

static void test_cuda_launch_validation(void) {
    nb_device *dev = NULL;
    OPEN_CUDA(dev);
    NEED_NVRTC(dev);
    nb_cuda_module *m = load_kernels(dev);
    if (!m) {
        nb_device_close(dev);
        return;
    }
    nb_cuda_function *f = NULL;
    NB_REQUIRE_OK(nb_cuda_module_function(m, "smem_reverse", &f));
    const nb_device_info *in = nb_device_get_info(dev);
    nb_buffer *b = NULL;
    NB_REQUIRE_OK(nb_buffer_alloc(dev, 4096, &b));
    void *p = nb_buffer_ptr(b);
    int n = 16;
    void *args[] = {&p, &n};
    unsigned g[3] = {1, 1, 1};
    unsigned zero[3] = {0, 1, 1}, big[3] = {(unsigned)in->max_threads_per_block * 2, 1, 1};
    unsigned fat[3] = {32, 32, 32}, ok[3] = {32, 1, 1};
    NB_EXPECT_ERR(nb_cuda_launch(f, g, zero, 0, NULL, args), NB_ERR_INVALID_ARG, "non-zero");
    NB_EXPECT_ERR(nb_cuda_launch(f, zero, ok, 0, NULL, args), NB_ERR_INVALID_ARG, "non-zero");
    NB_EXPECT_ERR(nb_cuda_launch(f, g, big, 0, NULL, args), NB_ERR_INVALID_ARG, "smem_reverse");
    NB_EXPECT_ERR(nb_cuda_launch(f, g, fat, 0, NULL, args), NB_ERR_INVALID_ARG, "threads");
    NB_EXPECT_ERR(nb_cuda_launch(f, g, ok, (unsigned)in->shared_mem_per_block_optin + 1, NULL, args),
                  NB_ERR_INVALID_ARG, "shared memory");
    /* After all those rejections a valid launch works. */
    NB_EXPECT_OK(nb_cuda_launch(f, g, ok, n * sizeof(float), NULL, args));
    float h[16];
    NB_EXPECT_OK(nb_memcpy_d2h(dev, h, p, sizeof h));
    NB_EXPECT(h[0] == 15.0f && h[15] == 0.0f);
    nb_buffer_release(b);
    nb_cuda_module_unload(m);
    nb_device_close(dev);
}

static void test_cuda_large_dynamic_shared(void) {
    nb_device *dev = NULL;
    OPEN_CUDA(dev);
    NEED_NVRTC(dev);
    const nb_device_info *in = nb_device_get_info(dev);
    if (in->shared_mem_per_block_optin < 64 * 1024) {
        nb_device_close(dev);
        NB_SKIP("device has no opt-in shared memory above 64 KiB");
    }
    nb_cuda_module *m = load_kernels(dev);
    if (!m) {
        nb_device_close(dev);
        return;
    }
    nb_cuda_function *f = NULL;
    NB_REQUIRE_OK(nb_cuda_module_function(m, "smem_reverse", &f));
    /* Most of the opt-in limit (> 48 KiB, so nb_cuda_launch must raise the kernel's attribute). */
    int n = (int)((in->shared_mem_per_block_optin - 1024) / sizeof(float));
    nb_buffer *b = NULL;
    NB_REQUIRE_OK(nb_buffer_alloc(dev, n * sizeof(float), &b));
    void *p = nb_buffer_ptr(b);
    void *args[] = {&p, &n};
    unsigned g[3] = {1, 1, 1}, blk[3] = {256, 1, 1};
    float *h = malloc(n * sizeof(float));
    NB_REQUIRE_OK(h ? NB_OK : NB_ERR_OUT_OF_MEMORY);
    NB_EXPECT_OK(nb_cuda_launch(f, g, blk, (unsigned)(n * sizeof(float)), NULL, args));
    NB_EXPECT_OK(nb_memcpy_d2h(dev, h, p, n * sizeof(float)));
    int bad = 0;
    for (int i = 0; i < n; i++) bad += h[i] != (float)(n - 1 - i);
    NB_EXPECT(bad == 0);
    /* Smaller again (still > 48 KiB): the raised limit covers it, no new opt-in needed. */
    n = 60 * 1024 / (int)sizeof(float);
    NB_EXPECT_OK(nb_cuda_launch(f, g, blk, (unsigned)(n * sizeof(float)), NULL, args));
    NB_EXPECT_OK(nb_memcpy_d2h(dev, h, p, n * sizeof(float)));
    bad = 0;
    for (int i = 0; i < n; i++) bad += h[i] != (float)(n - 1 - i);
    NB_EXPECT(bad == 0);
    free(h);
    nb_buffer_release(b);
    nb_cuda_module_unload(m);
    nb_device_close(dev);
}

/* Work from a thread that never touched CUDA: each op must make the context current itself. */
typedef struct thread_job {
    nb_device *dev;
    void *ptr;
    nb_status status;
    int bad;
} thread_job;

static void *thread_main(void *arg) {
    thread_job *job = arg;
    unsigned char h[4096];
    job->status = nb_memset(job->dev, job->ptr, 0x3c, sizeof h);
    if (job->status == NB_OK) job->status = nb_memcpy_d2h(job->dev, h, job->ptr, sizeof h);
    for (size_t i = 0; i < sizeof h; i++) job->bad += h[i] != 0x3c;
    return NULL;
}

static void test_cuda_other_thread(void) {
    nb_device *dev = NULL;
    OPEN_CUDA(dev);
    nb_buffer *b = NULL;
    NB_REQUIRE_OK(nb_buffer_alloc(dev, 4096, &b));
    thread_job job = {dev, nb_buffer_ptr(b), NB_ERR_INTERNAL, 0};
    pthread_t t;
    NB_REQUIRE_OK(pthread_create(&t, NULL, thread_main, &job) == 0 ? NB_OK : NB_ERR_INTERNAL);
    pthread_join(t, NULL);
    NB_EXPECT(job.status == NB_OK);
    NB_EXPECT(job.bad == 0);
    nb_buffer_release(b);
    nb_device_close(dev);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_cuda_properties, test_cuda_index_out_of_range,
                 test_cuda_caching_allocator, test_cuda_alloc_too_large, test_cuda_copies_roundtrip,
                 test_cuda_memset, test_cuda_events_timing, test_cuda_streams_and_wait_event,
                 test_cuda_nvrtc_axpy, test_cuda_compile_errors, test_cuda_missing_function,
                 test_cuda_launch_validation, test_cuda_large_dynamic_shared,
                 test_cuda_other_thread, test_cuda_graph_capture_replay);
}

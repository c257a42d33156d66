/* device_roundtrip: the foundation's end-to-end demo. For every available device it copies a
 * host array to the device, makes a device-side copy of it, (on CUDA) doubles it with a kernel
 * compiled at run time by NVRTC, copies it back and checks every element.
 *
 *   ./build/examples/device_roundtrip
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nabla/nabla.h"

#define CHECK(expr)                                                                            \
    do {                                                                                       \
        if ((expr) != NB_OK) {                                                                 \
            fprintf(stderr, "device_roundtrip: %s: %s\n", #expr, nb_last_error());            \
            goto fail;                                                                         \
        }                                                                                      \
    } while (0)

static const char *kScaleSource =
    "extern \"C\" __global__ void scale(float *x, float a, long long n) {\n"
    "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) x[i] *= a;\n"
    "}\n";

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* Doubles t (a contiguous f32 CUDA tensor) with an NVRTC-compiled kernel. */
static int scale_on_gpu(nb_device *dev, nb_tensor *t) {
    void *image = NULL;
    size_t size = 0;
    nb_cuda_module *mod = NULL;
    nb_cuda_function *fn = NULL;
    int ok = 0;
    double t0 = now_ms();
    CHECK(nb_cuda_compile(dev, kScaleSource, "scale.cu", NULL, &image, &size));
    double t1 = now_ms();
    CHECK(nb_cuda_module_load(dev, image, size, &mod));
    CHECK(nb_cuda_module_function(mod, "scale", &fn));
    {
        void *x = nb_tensor_data(t);
        float a = 2.0f;
        long long n = nb_tensor_numel(t);
        void *args[] = {&x, &a, &n};
        unsigned grid[3] = {(unsigned)((n + 255) / 256), 1, 1}, block[3] = {256, 1, 1};
        CHECK(nb_cuda_launch(fn, grid, block, 0, NULL, args));
        CHECK(nb_device_synchronize(dev));
    }
    printf("  NVRTC compiled a kernel in %.1f ms (%zu-byte image) and ran it\n", t1 - t0, size);
    ok = 1;
fail:
    if (mod) nb_cuda_module_unload(mod);
    if (image) nb_free(image, size);
    return ok;
}

static int roundtrip(const char *spec) {
    enum { N = 1 << 20 };
    int64_t shape[1] = {N};
    float *host = malloc(N * sizeof(float)), *back = malloc(N * sizeof(float));
    nb_device *dev = NULL;
    nb_tensor *a = NULL, *b = NULL;
    int ok = 0;
    if (!host || !back) goto fail;
    for (int i = 0; i < N; i++) host[i] = (float)rand() / (float)RAND_MAX - 0.5f;

    CHECK(nb_device_open(spec, &dev));
    double t0 = now_ms();
    CHECK(nb_tensor_from_host(dev, NB_F32, 1, shape, host, &a)); /* host -> device */
    CHECK(nb_tensor_empty(dev, NB_F32, 1, shape, &b));
    CHECK(nb_tensor_copy(b, a));                                 /* device -> device */
    float factor = 1.0f;
    if (nb_device_get_kind(dev) == NB_DEVICE_CUDA) {
        if (!scale_on_gpu(dev, b)) goto fail;
        factor = 2.0f;
    }
    CHECK(nb_tensor_to_host(b, back, N * sizeof(float)));        /* device -> host */
    double t1 = now_ms();
    for (int i = 0; i < N; i++) {
        if (back[i] != host[i] * factor) {
            fprintf(stderr, "device_roundtrip: %s: element %d is %g, expected %g\n", spec, i,
                    back[i], host[i] * factor);
            goto fail;
        }
    }
    printf("%-8s %s: %d floats there and back, all equal (%.1f ms)\n", spec,
           nb_device_get_info(dev)->name, N, t1 - t0);
    ok = 1;
fail:
    nb_tensor_free(a);
    nb_tensor_free(b);
    nb_device_close(dev);
    free(host);
    free(back);
    return ok;
}

int main(void) {
    srand(1234);
    int failures = !roundtrip("cpu");
    int n = nb_cuda_device_count();
    if (n == 0)
        printf("cuda     skipped: %s\n", nb_cuda_unavailable_reason());
    for (int i = 0; i < n; i++) {
        char spec[32];
        snprintf(spec, sizeof spec, "cuda:%d", i);
        failures += !roundtrip(spec);
    }
    return failures ? 1 : 0;
}

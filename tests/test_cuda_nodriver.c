/* CUDA without a GPU: the "no device" paths and NVRTC, which compiles without a driver.
 *
 * main() hides every GPU (CUDA_VISIBLE_DEVICES="") before the driver is first touched, so the
 * no-device branch is exercised on GPU machines too: there cuInit reports CUDA_ERROR_NO_DEVICE,
 * here dlopen("libcuda.so.1") fails. Should a driver ignore the variable, each test checks the
 * opposite branch instead. The NVRTC tests skip (alone) where libnvrtc is not installed.
 */
#include <stdlib.h>

#include "device/cuda/cuda_api.h"
#include "nb_test.h"

static const char *kAxpy =
    "extern \"C\" __global__ void axpy(float a, const float *x, float *y, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) y[i] = a * x[i] + y[i];\n"
    "}\n";

/* Unannotated helper: only compiles because nabla passes -default-device. */
static const char *kHelper =
    "float twice(float v) { return 2.0f * v; }\n"
    "extern \"C\" __global__ void dbl(float *x) { x[threadIdx.x] = twice(x[threadIdx.x]); }\n";

static void test_no_device_reason(void) {
    int n = nb_cuda_device_count();
    const char *why = nb_cuda_unavailable_reason();
    if (n == 0) {
        NB_EXPECT(why != NULL && why[0] != '\0');
        if (why) printf("  CUDA unavailable: %s\n", why);
        /* Either the driver library is missing or it reported no device. */
        NB_EXPECT(why && (strstr(why, "libcuda.so.1") || strstr(why, "cuInit failed") ||
                          strstr(why, "no CUDA devices") || strstr(why, "cuDeviceGetCount")));
        /* Stable across calls (one load per process). */
        NB_EXPECT(nb_cuda_unavailable_reason() == why);
    } else {
        NB_EXPECT(why == NULL);
    }
}

static void test_open_cuda_without_device(void) {
    nb_device *d = (nb_device *)1;
    if (nb_cuda_device_count() > 0) {
        /* Driver ignored CUDA_VISIBLE_DEVICES: the device opens instead. */
        NB_REQUIRE_OK(nb_device_open("cuda", &d));
        NB_EXPECT(nb_device_get_kind(d) == NB_DEVICE_CUDA);
        nb_device_close(d);
        return;
    }
    NB_EXPECT_ERR(nb_device_open("cuda", &d), NB_ERR_NO_DEVICE, "cuda:0 requested but ");
    NB_EXPECT(d == NULL);
    /* The message carries the loader's reason. */
    NB_EXPECT(strstr(nb_last_error(), nb_cuda_unavailable_reason()) != NULL);
    NB_EXPECT_ERR(nb_device_open("cuda:7", &d), NB_ERR_NO_DEVICE, "cuda:7 requested but ");
    NB_EXPECT(d == NULL);
    /* Asking again gives the same answer (no half-initialised state left behind). */
    NB_EXPECT_ERR(nb_device_open("cuda:0", &d), NB_ERR_NO_DEVICE, "requested but");
}

static void test_auto_picks_cpu_without_device(void) {
    nb_device *d = NULL;
    NB_REQUIRE_OK(nb_device_open("auto", &d));
    NB_EXPECT(nb_device_get_kind(d) ==
              (nb_cuda_device_count() > 0 ? NB_DEVICE_CUDA : NB_DEVICE_CPU));
    nb_device_close(d);
}

static void test_cuda_entry_points_reject_bad_args(void) {
    nb_device *cpu = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    void *img = (void *)1;
    size_t size = 1;
    NB_EXPECT_ERR(nb_cuda_compile(cpu, kAxpy, "axpy.cu", NULL, &img, &size), NB_ERR_INVALID_ARG,
                  "not a CUDA device");
    NB_EXPECT(img == NULL && size == 0);
    NB_EXPECT_ERR(nb_cuda_compile(NULL, kAxpy, "axpy.cu", NULL, &img, &size), NB_ERR_INVALID_ARG,
                  "'dev' is NULL");
    NB_EXPECT_ERR(nb_cuda_compile(cpu, NULL, "axpy.cu", NULL, &img, &size), NB_ERR_INVALID_ARG,
                  "'source' is NULL");
    nb_cuda_module *m = (nb_cuda_module *)1;
    NB_EXPECT_ERR(nb_cuda_module_load(cpu, "x", 2, &m), NB_ERR_INVALID_ARG, "not a CUDA device");
    NB_EXPECT(m == NULL);
    nb_cuda_function *f = (nb_cuda_function *)1;
    NB_EXPECT_ERR(nb_cuda_module_function(NULL, "axpy", &f), NB_ERR_INVALID_ARG, "'m' is NULL");
    unsigned g[3] = {1, 1, 1}, b[3] = {1, 1, 1};
    NB_EXPECT_ERR(nb_cuda_launch(NULL, g, b, 0, NULL, NULL), NB_ERR_INVALID_ARG, "'f' is NULL");
    nb_cuda_module_unload(NULL); /* no-op */
    nb_device_close(cpu);
}

/* ---- NVRTC ------------------------------------------------------------------------------- */

#define NEED_NVRTC()                                                                           \
    do {                                                                                       \
        if (nb_nvrtc_version() == 0) {                                                         \
            char why_[2200];                                                                   \
            snprintf(why_, sizeof why_, "NVRTC not available: %s",                             \
                     nb_nvrtc_unavailable_reason());                                           \
            NB_SKIP(why_);                                                                     \
        }                                                                                      \
    } while (0)

static void test_nvrtc_version(void) {
    NEED_NVRTC();
    int v = nb_nvrtc_version();
    printf("  NVRTC %d.%d from %s\n", v / 1000, v % 1000 / 10, nb_nvrtc_path());
    NB_EXPECT(v >= 11000 && v < 100000);
    NB_EXPECT(v % 10 == 0);
    NB_EXPECT(nb_nvrtc_path() != NULL);
    NB_EXPECT(nb_nvrtc_unavailable_reason() == NULL);
    /* Loaded already: adding a search path is refused with a message naming the library. */
    NB_EXPECT_ERR(nb_nvrtc_add_search_path("/nonexistent/libnvrtc.so"), NB_ERR_INVALID_ARG,
                  "already loaded");
}

static void test_nvrtc_pick_arch(void) {
    NEED_NVRTC();
    int a = nb_nvrtc_pick_arch(90);
    NB_EXPECT(a > 0 && a <= 90);
    NB_EXPECT(nb_nvrtc_pick_arch(10) == 0); /* nothing as old as sm_10 */
    int newest = nb_nvrtc_pick_arch(100000);
    NB_EXPECT(newest >= a);
    NB_EXPECT(nb_nvrtc_pick_arch(0) == 0);
}

static void test_nvrtc_compile_ptx(void) {
    NEED_NVRTC();
    char arch[32];
    snprintf(arch, sizeof arch, "compute_%d", nb_nvrtc_pick_arch(90));
    void *img = NULL;
    size_t size = 0;
    int cubin = -1;
    NB_REQUIRE_OK(nb_nvrtc_compile(kAxpy, "axpy.cu", arch, NULL, &img, &size, &cubin));
    NB_EXPECT(cubin == 0);
    NB_EXPECT(size > 1 && ((char *)img)[size - 1] == '\0'); /* PTX, NUL-terminated */
    NB_EXPECT(strstr((char *)img, ".entry axpy") != NULL);
    NB_EXPECT(strstr((char *)img, ".target sm_") != NULL);
    nb_free(img, size);
}

static void test_nvrtc_compile_cubin(void) {
    NEED_NVRTC();
    char arch[32];
    snprintf(arch, sizeof arch, "sm_%d", nb_nvrtc_pick_arch(90));
    void *img = NULL;
    size_t size = 0;
    int cubin = -1;
    /* An extra option goes through too. */
    const char *opts[] = {"-lineinfo", NULL};
    NB_REQUIRE_OK(nb_nvrtc_compile(kAxpy, "axpy.cu", arch, opts, &img, &size, &cubin));
    NB_EXPECT(cubin == 1);
    NB_EXPECT(size > 64 && memcmp(img, "\x7f" "ELF", 4) == 0);
    nb_free(img, size);
}

static void test_nvrtc_default_device(void) {
    NEED_NVRTC();
    char arch[32];
    snprintf(arch, sizeof arch, "compute_%d", nb_nvrtc_pick_arch(90));
    void *img = NULL;
    size_t size = 0;
    NB_REQUIRE_OK(nb_nvrtc_compile(kHelper, "helper.cu", arch, NULL, &img, &size, NULL));
    NB_EXPECT(strstr((char *)img, ".entry dbl") != NULL);
    nb_free(img, size);
}

static void test_nvrtc_compile_error(void) {
    NEED_NVRTC();
    const char *bad = "extern \"C\" __global__ void bad(float *x) { x[0] = undefined_thing; }\n";
    char arch[32];
    snprintf(arch, sizeof arch, "compute_%d", nb_nvrtc_pick_arch(90));
    void *img = (void *)1;
    size_t size = 1;
    NB_EXPECT_ERR(nb_nvrtc_compile(bad, "bad.cu", arch, NULL, &img, &size, NULL), NB_ERR_COMPILE,
                  "undefined_thing");
    NB_EXPECT(strstr(nb_last_error(), "bad.cu") != NULL); /* the log names the file */
    NB_EXPECT(img == NULL && size == 0);
}

static void test_nvrtc_bad_arch(void) {
    NEED_NVRTC();
    void *img = NULL;
    size_t size = 0;
    NB_EXPECT_ERR(nb_nvrtc_compile(kAxpy, "axpy.cu", "sm_1", NULL, &img, &size, NULL),
                  NB_ERR_UNSUPPORTED, "sm_1");
    NB_EXPECT(img == NULL);
    const char *opts[] = {"--no-such-option", NULL};
    char arch[32];
    snprintf(arch, sizeof arch, "compute_%d", nb_nvrtc_pick_arch(90));
    NB_EXPECT_ERR(nb_nvrtc_compile(kAxpy, "axpy.cu", arch, opts, &img, &size, NULL),
                  NB_ERR_UNSUPPORTED, "rejected");
}

int main(int argc, char **argv) {
    setenv("CUDA_VISIBLE_DEVICES", "", 1); /* before the driver is loaded; see the file comment */
    NB_TEST_MAIN(argc, argv, test_no_device_reason, test_open_cuda_without_device,
                 test_auto_picks_cpu_without_device, test_cuda_entry_points_reject_bad_args,
                 test_nvrtc_version, test_nvrtc_pick_arch, test_nvrtc_compile_ptx,
                 test_nvrtc_compile_cubin, test_nvrtc_default_device, test_nvrtc_compile_error,
                 test_nvrtc_bad_arch);
}

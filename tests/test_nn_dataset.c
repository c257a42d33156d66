/* nn_dataset.h: Fashion-MNIST IDX (a small file written here, gz-compressed through the same
 * zlib), padding and scaling, PNG folders, synthetic data, batches, resize, and bad input. */
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nb_test.h"
#include "nb_test_fifo.h"
#include "nabla/image.h"
#include "nabla/nn_dataset.h"

static char dir[] = "/tmp/nabla_ds_XXXXXX";

static void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

/* 3 images of 28x28: image i has pixel (y, x) = (i * 50 + y + x) % 256. */
static size_t make_idx(unsigned char *buf, uint32_t magic, uint32_t count) {
    put32(buf, magic), put32(buf + 4, count), put32(buf + 8, 28), put32(buf + 12, 28);
    for (uint32_t i = 0; i < 3; i++)
        for (int y = 0; y < 28; y++)
            for (int x = 0; x < 28; x++) buf[16 + i * 784 + y * 28 + x] = (unsigned char)((i * 50 + y + x) % 256);
    return 16 + 3 * 784;
}

static int write_gz(const char *path, const unsigned char *data, size_t n) {
    void *lib = dlopen("libz.so.1", RTLD_NOW);
    if (!lib) return 0;
    void *(*gzopen_)(const char *, const char *);
    int (*gzwrite_)(void *, const void *, unsigned);
    int (*gzclose_)(void *);
    *(void **)&gzopen_ = dlsym(lib, "gzopen");
    *(void **)&gzwrite_ = dlsym(lib, "gzwrite");
    *(void **)&gzclose_ = dlsym(lib, "gzclose");
    void *g = gzopen_(path, "wb");
    int ok = g && gzwrite_(g, data, (unsigned)n) == (int)n;
    if (g) gzclose_(g);
    dlclose(lib);
    return ok;
}

static void subdir(char *out, const char *name) {
    snprintf(out, 256, "%s/%s", dir, name);
    mkdir(out, 0755);
}

static void test_fashion_mnist_gz(void) {
    static unsigned char buf[16 + 3 * 784];
    size_t n = make_idx(buf, 0x803, 3);
    char d[256], p[300];
    subdir(d, "fm");
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", d);
    if (!write_gz(p, buf, n)) NB_SKIP("zlib (libz.so.1) not available");
    nb_dataset *ds;
    NB_REQUIRE_OK(nb_dataset_fashion_mnist(d, 32, 1, &ds));
    int64_t cnt;
    NB_EXPECT_OK(nb_dataset_count(ds, &cnt));
    NB_EXPECT(cnt == 3);
    const float *im;
    NB_EXPECT_OK(nb_dataset_image(ds, 1, &im));
    NB_EXPECT(im[0] == -1.0f && im[31 * 32 + 31] == -1.0f); /* padding is black */
    NB_EXPECT_NEAR(im[2 * 32 + 2], 50 / 127.5 - 1, 1e-6);   /* pixel (0,0) of image 1 */
    NB_EXPECT_NEAR(im[(2 + 5) * 32 + 2 + 7], (50 + 12) / 127.5 - 1, 1e-6);
    nb_dataset_free(ds);
    /* 3 channels at 16x16: gray repeated, resized */
    NB_REQUIRE_OK(nb_dataset_fashion_mnist(d, 16, 3, &ds));
    NB_EXPECT_OK(nb_dataset_image(ds, 2, &im));
    NB_EXPECT(im[5] == im[256 + 5] && im[5] == im[512 + 5]);
    float batch[4 * 3 * 256], batch2[4 * 3 * 256];
    NB_EXPECT_OK(nb_dataset_batch(ds, 4, 1, 7, batch));
    NB_EXPECT_OK(nb_dataset_batch(ds, 4, 1, 7, batch2));
    NB_EXPECT(!memcmp(batch, batch2, sizeof batch));
    nb_dataset_free(ds);
    /* via the environment variable and nb_dataset_open */
    setenv("NABLA_FASHION_MNIST_DIR", d, 1);
    NB_EXPECT_OK(nb_dataset_open("fashion-mnist", 32, 1, 0, &ds));
    nb_dataset_free(ds);
    unsetenv("NABLA_FASHION_MNIST_DIR");
    /* an uncompressed file cut short, a bad magic */
    char d2[256];
    subdir(d2, "fm_bad");
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", d2);
    FILE *f = fopen(p, "wb");
    fwrite(buf, 1, n - 100, f);
    fclose(f);
    NB_EXPECT_ERR(nb_dataset_fashion_mnist(d2, 32, 1, &ds), NB_ERR_IO, "truncated?");
    put32(buf, 0x801);
    f = fopen(p, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    NB_EXPECT_ERR(nb_dataset_fashion_mnist(d2, 32, 1, &ds), NB_ERR_IO, "not an IDX image file");
    /* garbage with a .gz name */
    char d3[256];
    subdir(d3, "fm_gz_bad");
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", d3);
    f = fopen(p, "wb");
    fwrite("\x1f\x8b\x08\x00garbage", 1, 11, f);
    fclose(f);
    nb_status s = nb_dataset_fashion_mnist(d3, 32, 1, &ds);
    NB_EXPECT(s == NB_ERR_IO);
}

/* nb_dataset_fashion_mnist on the directory of `path` */
static nb_status read_fm_dir(const char *path) {
    char d[300];
    snprintf(d, sizeof d, "%s", path);
    *strrchr(d, '/') = 0;
    nb_dataset *ds = NULL;
    nb_status s = nb_dataset_fashion_mnist(d, 32, 1, &ds);
    if (s == NB_OK) nb_dataset_free(ds);
    return s;
}

/* A FIFO in place of the IDX file (gzip'ed or not) is refused at once instead of blocking in
 * open(). */
static void test_fifo(void) {
    char d[256], p[300];
    subdir(d, "fm_fifo");
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", d);
    NB_EXPECT(nb_test_fifo_refused(p, read_fm_dir));
    void *z = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!z) NB_SKIP("zlib (libz.so.1) not available for the .gz case");
    dlclose(z);
    subdir(d, "fm_fifo_gz");
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", d);
    NB_EXPECT(nb_test_fifo_refused(p, read_fm_dir));
}

static void test_missing_dataset(void) {
    nb_dataset *ds;
    NB_EXPECT_ERR(nb_dataset_fashion_mnist("/nonexistent/fm", 32, 1, &ds), NB_ERR_NOT_FOUND,
                  "install Debian's dataset-fashion-mnist package");
    NB_EXPECT_ERR(nb_dataset_open("/nonexistent/pngs", 32, 3, 0, &ds), NB_ERR_NOT_FOUND, "unknown data set");
    NB_EXPECT_ERR(nb_dataset_open("synthetic", 2, 3, 0, &ds), NB_ERR_INVALID_ARG, "image size 2");
    NB_EXPECT_ERR(nb_dataset_open("synthetic", 32, 2, 0, &ds), NB_ERR_INVALID_ARG, "channels must be 1 or 3");
    char d[256];
    subdir(d, "empty");
    NB_EXPECT_ERR(nb_dataset_png_folder(d, 32, 3, &ds), NB_ERR_NOT_FOUND, "holds no .png files");
}

static void test_synthetic(void) {
    nb_dataset *a, *b;
    NB_REQUIRE_OK(nb_dataset_open("synthetic", 16, 3, 9, &a));
    NB_REQUIRE_OK(nb_dataset_synthetic(16, 3, 256, 9, &b));
    int64_t n;
    NB_EXPECT_OK(nb_dataset_count(a, &n));
    NB_EXPECT(n == 256);
    const float *ia, *ib;
    NB_EXPECT_OK(nb_dataset_image(a, 200, &ia));
    NB_EXPECT_OK(nb_dataset_image(b, 200, &ib));
    NB_EXPECT(!memcmp(ia, ib, sizeof(float) * 3 * 256));
    float lo = 2, hi = -2;
    for (int i = 0; i < 3 * 256; i++) lo = fminf(lo, ia[i]), hi = fmaxf(hi, ia[i]);
    NB_EXPECT(lo >= -1 && hi <= 1 && hi > lo);
    NB_EXPECT_ERR(nb_dataset_image(a, 256, &ia), NB_ERR_INVALID_ARG, "index 256");
    nb_dataset_free(a);
    nb_dataset_free(b);
}

static void test_resize(void) {
    float src[2 * 4 * 4], dst[2 * 2 * 2], up[2 * 8 * 8];
    for (int i = 0; i < 32; i++) src[i] = (float)i;
    NB_EXPECT_OK(nb_resize_chw(src, 2, 4, 4, 2, 2, dst)); /* 2x2 box means */
    NB_EXPECT_NEAR(dst[0], (0 + 1 + 4 + 5) / 4.0, 1e-6);
    NB_EXPECT_NEAR(dst[7], (26 + 27 + 30 + 31) / 4.0, 1e-6);
    NB_EXPECT_OK(nb_resize_chw(src, 2, 4, 4, 4, 4, up)); /* identity */
    NB_EXPECT(!memcmp(up, src, sizeof src));
    NB_EXPECT_OK(nb_resize_chw(src, 2, 4, 4, 8, 8, up)); /* bilinear: corners clamp */
    NB_EXPECT_NEAR(up[0], 0, 1e-6);
    NB_EXPECT_NEAR(up[1], 0.25, 1e-6);
    NB_EXPECT_ERR(nb_resize_chw(src, 2, 0, 4, 8, 8, up), NB_ERR_INVALID_ARG, "empty size");
}

static void test_png_folder(void) {
    char d[256], p[300];
    subdir(d, "pngs");
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    for (int k = 0; k < 2; k++) {
        nb_tensor *img;
        NB_REQUIRE_OK(nb_tensor_empty(cpu, NB_F32, 3, (int64_t[]){20, 12, 3}, &img));
        float *px = nb_tensor_data(img);
        for (int i = 0; i < 20 * 12 * 3; i++) px[i] = k ? 1.0f : 0.0f;
        snprintf(p, sizeof p, "%s/img%d.png", d, k);
        nb_status s = nb_image_write_png(p, img);
        nb_tensor_free(img);
        if (s == NB_ERR_UNSUPPORTED) NB_SKIP("libpng not available");
        NB_REQUIRE_OK(s);
    }
    snprintf(p, sizeof p, "%s/notes.txt", d);
    FILE *f = fopen(p, "w");
    fputs("not an image", f);
    fclose(f);
    nb_dataset *ds;
    NB_REQUIRE_OK(nb_dataset_open(d, 8, 3, 0, &ds));
    int64_t n;
    NB_EXPECT_OK(nb_dataset_count(ds, &n));
    NB_EXPECT(n == 2);
    const float *im;
    NB_EXPECT_OK(nb_dataset_image(ds, 0, &im));
    NB_EXPECT(im[0] == -1.0f && im[191] == -1.0f);
    NB_EXPECT_OK(nb_dataset_image(ds, 1, &im));
    NB_EXPECT(im[0] == 1.0f && im[100] == 1.0f);
    nb_dataset_free(ds);
    /* a broken PNG in the folder is named */
    snprintf(p, sizeof p, "%s/zbroken.png", d);
    f = fopen(p, "w");
    fputs("GIF89a", f);
    fclose(f);
    NB_EXPECT_ERR(nb_dataset_png_folder(d, 8, 3, &ds), NB_ERR_IO, "zbroken.png");
}

static void cleanup(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
}

int main(int argc, char **argv) {
    if (!mkdtemp(dir)) return 1;
    atexit(cleanup);
    NB_TEST_MAIN(argc, argv, test_fashion_mnist_gz, test_fifo, test_missing_dataset, test_synthetic,
                 test_resize, test_png_folder);
}

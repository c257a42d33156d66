/* Image data sets for diffusion training: Fashion-MNIST (IDX, gz through a dlopen'ed zlib), a folder
 * of PNGs, synthetic images (see include/nabla/nn_dataset.h). */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nabla/env.h"
#include "nabla/file.h"
#include "nabla/image.h"
#include "nabla/nn_dataset.h"
#include "nabla/tensor.h"

struct nb_dataset {
    int64_t n;
    int c, s;
    float *data; /* [n, c, s, s] */
};

static nb_status alloc_ds(int64_t n, int c, int s, nb_dataset **out) {
    nb_dataset *d = calloc(1, sizeof *d);
    if (d) d->data = malloc(sizeof(float) * (size_t)n * c * s * s);
    if (!d || !d->data) {
        free(d);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "data set: out of memory for %lld images of %dx%dx%d",
                        (long long)n, c, s, s);
    }
    d->n = n, d->c = c, d->s = s;
    *out = d;
    return NB_OK;
}

void nb_dataset_free(nb_dataset *ds) {
    if (ds) free(ds->data);
    free(ds);
}

static nb_status check_args(int image_size, int channels, void *out) {
    if (!out) return nb_error(NB_ERR_INVALID_ARG, "data set: NULL out");
    if (image_size < 4 || image_size > 1024)
        return nb_error(NB_ERR_INVALID_ARG, "data set: image size %d not in 4..1024", image_size);
    if (channels != 1 && channels != 3)
        return nb_error(NB_ERR_INVALID_ARG, "data set: channels must be 1 or 3, got %d", channels);
    return NB_OK;
}

/* ---- resize --------------------------------------------------------------------------------- */

static void bilinear(const float *src, int h, int w, int oh, int ow, float *dst) {
    for (int y = 0; y < oh; y++) {
        double fy = (y + 0.5) * h / oh - 0.5;
        fy = fy < 0 ? 0 : fy > h - 1 ? h - 1 : fy;
        int y0 = (int)fy, y1 = y0 + 1 < h ? y0 + 1 : y0;
        double ay = fy - y0;
        for (int x = 0; x < ow; x++) {
            double fx = (x + 0.5) * w / ow - 0.5;
            fx = fx < 0 ? 0 : fx > w - 1 ? w - 1 : fx;
            int x0 = (int)fx, x1 = x0 + 1 < w ? x0 + 1 : x0;
            double ax = fx - x0;
            double top = src[y0 * w + x0] * (1 - ax) + src[y0 * w + x1] * ax;
            double bot = src[y1 * w + x0] * (1 - ax) + src[y1 * w + x1] * ax;
            dst[y * ow + x] = (float)(top * (1 - ay) + bot * ay);
        }
    }
}

nb_status nb_resize_chw(const float *src, int c, int h, int w, int oh, int ow, float *dst) {
    if (!src || !dst || c < 1 || h < 1 || w < 1 || oh < 1 || ow < 1)
        return nb_error(NB_ERR_INVALID_ARG, "nb_resize_chw: NULL buffer or empty size");
    int k = h / oh < w / ow ? h / oh : w / ow;
    float *box = NULL;
    int bh = h, bw = w;
    if (k >= 2) {
        bh = h / k, bw = w / k;
        box = malloc(sizeof(float) * (size_t)c * bh * bw);
        if (!box) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_resize_chw: out of memory");
        for (int ch = 0; ch < c; ch++)
            for (int y = 0; y < bh; y++)
                for (int x = 0; x < bw; x++) {
                    double acc = 0;
                    for (int i = 0; i < k; i++)
                        for (int j = 0; j < k; j++) acc += src[((size_t)ch * h + y * k + i) * w + x * k + j];
                    box[((size_t)ch * bh + y) * bw + x] = (float)(acc / (k * k));
                }
    }
    const float *s = box ? box : src;
    for (int ch = 0; ch < c; ch++) bilinear(s + (size_t)ch * bh * bw, bh, bw, oh, ow, dst + (size_t)ch * oh * ow);
    free(box);
    return NB_OK;
}

/* ---- gz through zlib (dlopen) ---------------------------------------------------------------- */

typedef void *gzf;
static nb_status read_file(const char *path, unsigned char **out, size_t *n) {
    size_t len = strlen(path);
    int gz = len > 3 && !strcmp(path + len - 3, ".gz");
    void *lib = NULL;
    gzf (*gzdopen_)(int, const char *) = NULL;
    int (*gzread_)(gzf, void *, unsigned) = NULL;
    int (*gzclose_)(gzf) = NULL;
    if (gz) {
        lib = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!lib)
            return nb_error(NB_ERR_UNSUPPORTED, "cannot read '%s': zlib (libz.so.1) is not installed (%s)",
                            path, dlerror());
        *(void **)&gzdopen_ = dlsym(lib, "gzdopen");
        *(void **)&gzread_ = dlsym(lib, "gzread");
        *(void **)&gzclose_ = dlsym(lib, "gzclose");
        if (!gzdopen_ || !gzread_ || !gzclose_) {
            dlclose(lib);
            return nb_error(NB_ERR_UNSUPPORTED, "libz.so.1 lacks gzdopen/gzread/gzclose");
        }
    }
    /* Regular files only (a FIFO is refused without blocking); zlib reads the descriptor we
     * opened, never the path. */
    FILE *f = NULL;
    gzf g = NULL;
    nb_status os = nb_file_open_read(path, "data set file", &f);
    if (os) {
        if (lib) dlclose(lib);
        return os;
    }
    if (gz) {
        int fd = dup(fileno(f));
        fclose(f);
        f = NULL;
        if (fd >= 0 && !(g = gzdopen_(fd, "rb"))) close(fd);
        if (!g) {
            nb_status e = nb_error(NB_ERR_IO, "cannot open '%s' for gzip decoding: %s", path,
                                   fd < 0 ? strerror(errno) : "out of memory");
            dlclose(lib);
            return e;
        }
    }
    size_t cap = 1 << 20, got = 0;
    unsigned char *buf = malloc(cap);
    nb_status s = buf ? NB_OK : nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory reading '%s'", path);
    while (!s) {
        if (got == cap) {
            unsigned char *nb = cap > ((size_t)1 << 31) ? NULL : realloc(buf, cap *= 2);
            if (!nb) {
                s = nb_error(NB_ERR_OUT_OF_MEMORY, "'%s' is too large", path);
                break;
            }
            buf = nb;
        }
        long r = gz ? gzread_(g, buf + got, (unsigned)(cap - got)) : (long)fread(buf + got, 1, cap - got, f);
        if (r < 0) s = nb_error(NB_ERR_IO, "cannot read '%s': corrupt gzip data", path);
        else if (r == 0) break;
        else got += (size_t)r;
    }
    if (gz) gzclose_(g);
    else fclose(f);
    if (lib) dlclose(lib);
    if (s) {
        free(buf);
        return s;
    }
    *out = buf, *n = got;
    return NB_OK;
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

nb_status nb_dataset_fashion_mnist(const char *dir, int image_size, int channels, nb_dataset **out) {
    nb_status s = check_args(image_size, channels, out);
    if (s) return s;
    if (!dir) dir = nb_env_get(NB_ENV_FASHION_MNIST_DIR);
    if (!dir || !*dir) dir = NB_FASHION_MNIST_DIR;
    char path[1024];
    struct stat st;
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
    if (stat(path, &st) != 0) snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", dir);
    if (stat(path, &st) != 0)
        return nb_error(NB_ERR_NOT_FOUND,
                        "Fashion-MNIST not found: no train-images-idx3-ubyte(.gz) in %s; install "
                        "Debian's dataset-fashion-mnist package (apt install dataset-fashion-mnist) "
                        "or set NABLA_FASHION_MNIST_DIR", dir);
    unsigned char *buf = NULL;
    size_t n = 0;
    s = read_file(path, &buf, &n);
    if (s) return s;
    if (n < 16 || be32(buf) != 0x803) {
        free(buf);
        return nb_error(NB_ERR_IO, "'%s' is not an IDX image file (magic 0x00000803 expected)", path);
    }
    uint32_t cnt = be32(buf + 4), h = be32(buf + 8), w = be32(buf + 12);
    if (cnt == 0 || h != 28 || w != 28 || (uint64_t)cnt * 784 != n - 16) {
        free(buf);
        return nb_error(NB_ERR_IO, "'%s': IDX header says %u images of %ux%u (28x28 expected) but the "
                        "file holds %zu bytes of pixels (truncated?)", path, cnt, h, w, n - 16);
    }
    nb_dataset *d = NULL;
    s = alloc_ds(cnt, channels, image_size, &d);
    float pad[32 * 32];
    for (uint32_t i = 0; !s && i < cnt; i++) {
        for (int k = 0; k < 32 * 32; k++) pad[k] = -1.0f;
        for (int y = 0; y < 28; y++)
            for (int x = 0; x < 28; x++) pad[(y + 2) * 32 + x + 2] = buf[16 + (size_t)i * 784 + y * 28 + x] / 127.5f - 1.0f;
        float *dst = d->data + (size_t)i * channels * image_size * image_size;
        if (image_size == 32) memcpy(dst, pad, sizeof pad);
        else s = nb_resize_chw(pad, 1, 32, 32, image_size, image_size, dst);
        for (int c = 1; c < channels; c++)
            memcpy(dst + (size_t)c * image_size * image_size, dst, sizeof(float) * (size_t)image_size * image_size);
    }
    free(buf);
    if (s) {
        nb_dataset_free(d);
        return s;
    }
    *out = d;
    return NB_OK;
}

/* ---- PNG folder ------------------------------------------------------------------------------ */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

nb_status nb_dataset_png_folder(const char *dir, int image_size, int channels, nb_dataset **out) {
    nb_status s = check_args(image_size, channels, out);
    if (s) return s;
    if (!dir) return nb_error(NB_ERR_INVALID_ARG, "data set: NULL directory");
    DIR *dp = opendir(dir);
    if (!dp) return nb_error(NB_ERR_IO, "cannot open data directory '%s': %s", dir, strerror(errno));
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcasecmp(e->d_name + l - 4, ".png")) continue;
        if (n == cap) {
            char **nn = realloc(names, sizeof *nn * (size_t)(cap = cap ? cap * 2 : 64));
            if (!nn) break;
            names = nn;
        }
        names[n] = strdup(e->d_name);
        if (names[n]) n++;
    }
    closedir(dp);
    if (n == 0) {
        free(names);
        return nb_error(NB_ERR_NOT_FOUND, "data directory '%s' holds no .png files", dir);
    }
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    nb_dataset *d = NULL;
    s = alloc_ds(n, channels, image_size, &d);
    for (int i = 0; i < n && !s; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        nb_tensor *img;
        s = nb_image_read_png(path, channels, NULL, &img);
        if (s) break;
        const int64_t *sh = nb_tensor_shape(img);
        int h = (int)sh[0], w = (int)sh[1];
        float *hwc = nb_tensor_data(img), *chw = malloc(sizeof(float) * (size_t)h * w * channels);
        if (!chw) s = nb_error(NB_ERR_OUT_OF_MEMORY, "out of memory reading '%s'", path);
        for (int c = 0; !s && c < channels; c++)
            for (int64_t k = 0; k < (int64_t)h * w; k++) chw[c * (int64_t)h * w + k] = hwc[k * channels + c] * 2 - 1;
        float *dst = d->data + (size_t)i * channels * image_size * image_size;
        if (!s) s = nb_resize_chw(chw, channels, h, w, image_size, image_size, dst);
        free(chw);
        nb_tensor_free(img);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    if (s) {
        nb_dataset_free(d);
        return s;
    }
    *out = d;
    return NB_OK;
}

/* ---- synthetic -------------------------------------------------------------------------------- */

static uint64_t mix(uint64_t z) { /* splitmix64 finaliser */
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double u01(uint64_t *s) { return (double)((*s = mix(*s)) >> 11) / 9007199254740992.0; }

nb_status nb_dataset_synthetic(int image_size, int channels, int count, uint64_t seed, nb_dataset **out) {
    nb_status s = check_args(image_size, channels, out);
    if (s) return s;
    if (count < 1 || count > 1 << 20) return nb_error(NB_ERR_INVALID_ARG, "synthetic data: count %d not in 1..2^20", count);
    nb_dataset *d = NULL;
    s = alloc_ds(count, channels, image_size, &d);
    if (s) return s;
    uint64_t r = seed ^ 0x5EEDull;
    int S = image_size;
    for (int i = 0; i < count; i++) {
        float bg[3], fg[3];
        for (int c = 0; c < 3; c++) bg[c] = (float)u01(&r), fg[c] = (float)u01(&r);
        double cx = S * (0.25 + 0.5 * u01(&r)), cy = S * (0.25 + 0.5 * u01(&r)), rad = S * (0.1 + 0.2 * u01(&r));
        float *img = d->data + (size_t)i * channels * S * S;
        for (int c = 0; c < channels; c++)
            for (int y = 0; y < S; y++)
                for (int x = 0; x < S; x++) {
                    double dx = x + 0.5 - cx, dy = y + 0.5 - cy;
                    float v = dx * dx + dy * dy <= rad * rad ? fg[c] : bg[c];
                    img[((size_t)c * S + y) * S + x] = 2 * v - 1;
                }
    }
    *out = d;
    return NB_OK;
}

/* ---- common ----------------------------------------------------------------------------------- */

nb_status nb_dataset_open(const char *spec, int image_size, int channels, uint64_t seed, nb_dataset **out) {
    if (!spec) return nb_error(NB_ERR_INVALID_ARG, "data set: NULL spec");
    if (!strcmp(spec, "fashion-mnist")) return nb_dataset_fashion_mnist(NULL, image_size, channels, out);
    if (!strcmp(spec, "synthetic")) return nb_dataset_synthetic(image_size, channels, 256, seed, out);
    struct stat st;
    if (stat(spec, &st) != 0 || !S_ISDIR(st.st_mode))
        return nb_error(NB_ERR_NOT_FOUND,
                        "unknown data set '%s': expected fashion-mnist, synthetic or a directory of PNGs", spec);
    return nb_dataset_png_folder(spec, image_size, channels, out);
}

nb_status nb_dataset_count(const nb_dataset *ds, int64_t *n) {
    if (!ds || !n) return nb_error(NB_ERR_INVALID_ARG, "nb_dataset_count: NULL argument");
    *n = ds->n;
    return NB_OK;
}

nb_status nb_dataset_image(const nb_dataset *ds, int64_t i, const float **out) {
    if (!ds || !out || i < 0 || i >= ds->n)
        return nb_error(NB_ERR_INVALID_ARG, "nb_dataset_image: bad data set or index %lld", (long long)i);
    *out = ds->data + (size_t)i * ds->c * ds->s * ds->s;
    return NB_OK;
}

nb_status nb_dataset_batch(const nb_dataset *ds, int n, uint64_t seed, uint64_t step, float *out) {
    if (!ds || !out || n < 1) return nb_error(NB_ERR_INVALID_ARG, "nb_dataset_batch: NULL argument or n < 1");
    size_t img = (size_t)ds->c * ds->s * ds->s;
    uint64_t r = mix(seed * 0x9E3779B97F4A7C15ull ^ mix(step));
    for (int i = 0; i < n; i++) {
        int64_t k = (int64_t)((r = mix(r)) % (uint64_t)ds->n);
        memcpy(out + i * img, ds->data + (size_t)k * img, img * sizeof(float));
    }
    return NB_OK;
}

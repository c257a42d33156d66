/* PNG files through libpng's "simplified" API (png_image, libpng >= 1.6), loaded with dlopen so
 * that nabla needs neither the libpng headers to build nor the library to run anything else.
 * The png_image struct and the format flags below are libpng 1.6's public ABI (png.h). */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "nabla/file.h"
#include "core/util.h"
#include "nabla/alloc.h"
#include "nabla/image.h"
#include "nabla/log.h"

typedef struct nb_png_image {
    void *opaque;
    uint32_t version, width, height, format, flags, colormap_entries, warning_or_error;
    char message[64];
} nb_png_image;

#define NB_PNG_IMAGE_VERSION 1
#define NB_PNG_FORMAT_FLAG_ALPHA 0x01u
#define NB_PNG_FORMAT_FLAG_COLOR 0x02u
#define NB_PNG_FORMAT_FLAG_LINEAR 0x04u
#define NB_PNG_FORMAT_GRAY 0u
#define NB_PNG_FORMAT_RGB 0x02u
#define NB_PNG_FORMAT_RGBA 0x03u

static struct {
    int (*begin_read_from_stdio)(nb_png_image *, FILE *);
    int (*finish_read)(nb_png_image *, const void *background, void *buffer, int32_t row_stride,
                       void *colormap);
    void (*image_free)(nb_png_image *);
    int (*write_to_stdio)(nb_png_image *, FILE *, int convert_to_8bit, const void *buffer,
                          int32_t row_stride, const void *colormap);
    char why[256]; /* empty when loaded */
} nb_png;

static pthread_once_t nb_png_once = PTHREAD_ONCE_INIT;

static void nb_png_load(void) {
    static const char *const names[] = {"libpng16.so.16", "libpng16.so", "libpng.so"};
    void *h = NULL;
    char first[160] = "";
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++) {
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!h && i == 0) {
            const char *e = dlerror();
            snprintf(first, sizeof first, "%.150s", e ? e : "");
        }
    }
    if (!h) {
        snprintf(nb_png.why, sizeof nb_png.why,
                 "PNG support needs libpng16.so.16, which could not be loaded (%s); install libpng16-16",
                 first);
        return;
    }
    *(void **)&nb_png.begin_read_from_stdio = dlsym(h, "png_image_begin_read_from_stdio");
    *(void **)&nb_png.finish_read = dlsym(h, "png_image_finish_read");
    *(void **)&nb_png.image_free = dlsym(h, "png_image_free");
    *(void **)&nb_png.write_to_stdio = dlsym(h, "png_image_write_to_stdio");
    if (!nb_png.begin_read_from_stdio || !nb_png.finish_read || !nb_png.image_free || !nb_png.write_to_stdio)
        snprintf(nb_png.why, sizeof nb_png.why,
                 "the loaded libpng lacks the png_image API (libpng >= 1.6 is needed)");
    else
        nb_png.why[0] = '\0';
}

static nb_status nb_png_ready(void) {
    pthread_once(&nb_png_once, nb_png_load);
    if (nb_png.why[0]) return nb_error(NB_ERR_UNSUPPORTED, "%s", nb_png.why);
    return NB_OK;
}

nb_status nb_image_read_png(const char *path, int channels, nb_device *dev, nb_tensor **out) {
    const char *fn = "nb_image_read_png";
    if (!out) return nb_error(NB_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!path) return nb_error(NB_ERR_INVALID_ARG, "%s: path is NULL", fn);
    if (channels != 0 && channels != 1 && channels != 3 && channels != 4)
        return nb_error(NB_ERR_INVALID_ARG, "%s: channels = %d (want 0, 1, 3 or 4)", fn, channels);
    /* Our own checks first, for messages that say what is wrong with the file. The file is
     * opened once (a regular file only: a FIFO is refused without blocking) and libpng reads the
     * same stream. */
    FILE *f;
    nb_status os = nb_file_open_read(path, "PNG file", &f);
    if (os == NB_ERR_NOT_FOUND) return nb_error(NB_ERR_IO, "cannot open '%s': %s", path, strerror(ENOENT));
    if (os) return os; /* a FIFO, a directory, no permission: the message names the cause */
    unsigned char sig[8];
    size_t got = fread(sig, 1, 8, f);
    static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (got < 8 || memcmp(sig, png_sig, 8) != 0) {
        fclose(f);
        return nb_error(NB_ERR_IO, "'%s' is not a PNG file (%s)", path,
                        got < 8 ? "shorter than the 8-byte signature" : "no PNG signature");
    }
    nb_status rs = nb_png_ready();
    if (rs || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return rs ? rs : nb_error(NB_ERR_IO, "'%s': cannot seek: %s", path, strerror(errno));
    }

    nb_png_image im;
    memset(&im, 0, sizeof im);
    im.version = NB_PNG_IMAGE_VERSION;
    if (!nb_png.begin_read_from_stdio(&im, f)) {
        nb_status s = nb_error(NB_ERR_IO, "'%s' is not a valid PNG file (libpng: %s)", path, im.message);
        nb_png.image_free(&im);
        fclose(f);
        return s;
    }
    uint32_t W = im.width, H = im.height;
    if (W == 0 || H == 0 || W > NB_IMAGE_MAX_SIDE || H > NB_IMAGE_MAX_SIDE ||
        (int64_t)W * H > NB_IMAGE_MAX_PIXELS) {
        nb_png.image_free(&im);
        fclose(f);
        return nb_error(NB_ERR_INVALID_ARG, "'%s' is %ux%u pixels: unsupported size (each side 1..%d, at most %lld pixels)",
                        path, W, H, NB_IMAGE_MAX_SIDE, (long long)NB_IMAGE_MAX_PIXELS);
    }
    if (im.format & NB_PNG_FORMAT_FLAG_LINEAR) {
        nb_png.image_free(&im);
        fclose(f);
        return nb_error(NB_ERR_UNSUPPORTED, "'%s' has 16-bit channels; only 8-bit PNGs are supported", path);
    }
    int file_ch = (im.format & NB_PNG_FORMAT_FLAG_ALPHA) ? 4 : (im.format & NB_PNG_FORMAT_FLAG_COLOR) ? 3 : 1;
    int C = channels ? channels : file_ch;
    size_t npix = (size_t)W * H;
    unsigned char *rgba = nb_alloc(npix * 4, 64);
    float *px = rgba ? nb_alloc(npix * (size_t)C * sizeof(float), 64) : NULL;
    if (!px) {
        if (rgba) nb_free(rgba, npix * 4);
        nb_png.image_free(&im);
        fclose(f);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: no host memory for a %ux%u image", fn, W, H);
    }
    im.format = NB_PNG_FORMAT_RGBA;
    nb_status s = NB_OK;
    if (!nb_png.finish_read(&im, NULL, rgba, 0, NULL)) {
        s = nb_error(NB_ERR_IO, "'%s' is truncated or corrupt (libpng: %s)", path, im.message);
    } else {
        for (size_t i = 0; i < npix; i++) {
            const unsigned char *p = rgba + i * 4;
            float *o = px + i * (size_t)C;
            if (C == 1) {
                o[0] = (0.2126f * p[0] + 0.7152f * p[1] + 0.0722f * p[2]) / 255.0f;
                if (p[0] == p[1] && p[1] == p[2]) o[0] = p[0] / 255.0f; /* gray stays exact */
            } else {
                for (int c = 0; c < C; c++) o[c] = p[c] / 255.0f;
            }
        }
        int64_t shape[3] = {H, W, C};
        nb_device *d = dev;
        nb_device *cpu = NULL;
        if (!d) s = nb_device_open("cpu", &cpu), d = cpu;
        if (s == NB_OK) s = nb_tensor_from_host(d, NB_F32, 3, shape, px, out);
        if (cpu) nb_device_close(cpu);
    }
    nb_png.image_free(&im);
    fclose(f);
    nb_free(px, npix * (size_t)C * sizeof(float));
    nb_free(rgba, npix * 4);
    return s;
}

nb_status nb_image_write_png(const char *path, const nb_tensor *img) {
    const char *fn = "nb_image_write_png";
    if (!path || !img) return nb_error(NB_ERR_INVALID_ARG, "%s: path or img is NULL", fn);
    char buf[128];
    if (nb_tensor_dtype(img) != NB_F32 || nb_tensor_ndim(img) != 3)
        return nb_error(NB_ERR_SHAPE, "%s: want an f32 [H, W, C] image, got %s", fn,
                        nb_tensor_describe(img, buf, sizeof buf));
    const int64_t *sh = nb_tensor_shape(img);
    int64_t H = sh[0], W = sh[1], C = sh[2];
    if (C != 1 && C != 3 && C != 4)
        return nb_error(NB_ERR_SHAPE, "%s: %lld channels (want 1, 3 or 4)", fn, (long long)C);
    if (H < 1 || W < 1 || H > NB_IMAGE_MAX_SIDE || W > NB_IMAGE_MAX_SIDE || H * W > NB_IMAGE_MAX_PIXELS)
        return nb_error(NB_ERR_INVALID_ARG, "%s: unsupported size %lldx%lld (each side 1..%d)", fn,
                        (long long)W, (long long)H, NB_IMAGE_MAX_SIDE);
    NB_TRY(nb_png_ready());
    size_t n = (size_t)(H * W * C);
    float *hf = nb_alloc(n * sizeof(float), 64);
    unsigned char *u8 = hf ? nb_alloc(n, 64) : NULL;
    if (!u8) {
        if (hf) nb_free(hf, n * sizeof(float));
        return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    }
    nb_status s = nb_tensor_to_host(img, hf, n * sizeof(float));
    if (s == NB_OK) {
        for (size_t i = 0; i < n; i++) {
            float v = hf[i];
            v = v > 0.0f ? (v < 1.0f ? v : 1.0f) : 0.0f; /* NaN -> 0 */
            u8[i] = (unsigned char)lrintf(v * 255.0f);
        }
        nb_png_image im;
        memset(&im, 0, sizeof im);
        im.version = NB_PNG_IMAGE_VERSION;
        im.width = (uint32_t)W;
        im.height = (uint32_t)H;
        im.format = C == 1 ? NB_PNG_FORMAT_GRAY : C == 3 ? NB_PNG_FORMAT_RGB : NB_PNG_FORMAT_RGBA;
        /* atomically: a temporary file beside path, fsync, rename */
        nb_file_atomic af;
        s = nb_file_atomic_open(&af, path, "PNG file");
        if (s == NB_OK) {
            errno = 0;
            if (!nb_png.write_to_stdio(&im, af.f, 0, u8, 0, NULL)) {
                s = nb_error(NB_ERR_IO, "cannot write PNG '%s' (libpng: %s%s%s)", path, im.message,
                             errno ? ": " : "", errno ? strerror(errno) : "");
                nb_file_atomic_abort(&af);
            } else {
                s = nb_file_atomic_commit(&af);
            }
        }
        nb_png.image_free(&im);
    }
    nb_free(u8, n);
    nb_free(hf, n * sizeof(float));
    return s;
}

/* Images for fitting (image.h): the procedural test image, random bilinear training samples
 * (CPU reference + one CUDA kernel, the same counter-based positions on both), pixel-centre
 * coordinates and PSNR. PNG files are in png.c. */
#include <math.h>
#include <string.h>

#include "core/util.h"
#include "jit/cuda_files.h"
#include "nabla/alloc.h"
#include "nabla/image.h"
#include "nn/common/nn_common.h"

/* ---- procedural image -------------------------------------------------------------------- */

static double nb_smooth_edge(double d, double aa) { /* 0 inside (d < 0) .. 1 outside, aa wide */
    double t = d / aa + 0.5;
    return t < 0 ? 0 : (t > 1 ? 1 : t);
}

static void nb_procedural_pixel(double u, double v, double aa, float rgb[3]) {
    const double pi = 3.14159265358979323846;
    /* smooth colour field */
    double r = 0.55 + 0.35 * sin(2 * pi * (0.8 * u + 0.1));
    double g = 0.45 + 0.35 * sin(2 * pi * (0.9 * v + 0.3));
    double b = 0.50 + 0.30 * cos(2 * pi * (u + v));
    /* zone plate (fine concentric rings) in a disc */
    double dx = u - 0.70, dy = v - 0.30, rr = sqrt(dx * dx + dy * dy);
    double inside = 1.0 - nb_smooth_edge(rr - 0.22, aa);
    double zone = 0.5 + 0.5 * cos(2 * pi * 60.0 * rr * rr / 0.22);
    r = r * (1 - inside) + zone * inside;
    g = g * (1 - inside) + zone * inside;
    b = b * (1 - inside) + (1.0 - zone) * inside;
    /* checkerboard square, bottom left */
    if (u > 0.06 && u < 0.44 && v > 0.56 && v < 0.94) {
        int cx = (int)floor((u - 0.06) / 0.0475), cy = (int)floor((v - 0.56) / 0.0475);
        double c = ((cx + cy) & 1) ? 0.92 : 0.08;
        r = c;
        g = c * 0.9;
        b = 1.0 - c;
    }
    /* discs with sharp edges */
    static const double disc[4][6] = {{0.22, 0.24, 0.12, 0.95, 0.25, 0.20},
                                      {0.38, 0.16, 0.06, 0.15, 0.85, 0.30},
                                      {0.74, 0.74, 0.14, 0.20, 0.35, 0.95},
                                      {0.86, 0.58, 0.05, 0.98, 0.90, 0.15}};
    for (int k = 0; k < 4; k++) {
        double ex = u - disc[k][0], ey = v - disc[k][1];
        double w = 1.0 - nb_smooth_edge(sqrt(ex * ex + ey * ey) - disc[k][2], aa);
        r = r * (1 - w) + disc[k][3] * w;
        g = g * (1 - w) + disc[k][4] * w;
        b = b * (1 - w) + disc[k][5] * w;
    }
    /* thin diagonal lines across the right half */
    if (u > 0.5 && v > 0.9) {
        double t = fmod((u + v) * 40.0, 1.0);
        if (t < 0.2) r = g = b = 0.05;
    }
    rgb[0] = (float)(r < 0 ? 0 : r > 1 ? 1 : r);
    rgb[1] = (float)(g < 0 ? 0 : g > 1 ? 1 : g);
    rgb[2] = (float)(b < 0 ? 0 : b > 1 ? 1 : b);
}

nb_status nb_image_procedural(nb_device *dev, int width, int height, nb_tensor **out) {
    const char *fn = "nb_image_procedural";
    if (!out) return nb_error(NB_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!dev) return nb_error(NB_ERR_INVALID_ARG, "%s: dev is NULL", fn);
    if (width < 2 || height < 2 || width > NB_IMAGE_MAX_SIDE || height > NB_IMAGE_MAX_SIDE ||
        (int64_t)width * height > NB_IMAGE_MAX_PIXELS)
        return nb_error(NB_ERR_INVALID_ARG, "%s: unsupported size %dx%d (each side 2..%d)", fn, width,
                        height, NB_IMAGE_MAX_SIDE);
    size_t n = (size_t)width * height * 3;
    float *h = nb_alloc(n * sizeof(float), 64);
    if (!h) return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    double aa = 1.0 / (width > height ? width : height);
    for (int y = 0; y < height; y++)
        for (int x = 0; x < width; x++)
            nb_procedural_pixel((x + 0.5) / width, (y + 0.5) / height, aa, h + ((size_t)y * width + x) * 3);
    int64_t shape[3] = {height, width, 3};
    nb_status s = nb_tensor_from_host(dev, NB_F32, 3, shape, h, out);
    nb_free(h, n * sizeof(float));
    return s;
}

/* ---- random bilinear samples ---------------------------------------------------------------- */

typedef struct nb_sample_args {
    const float *img;
    float *x, *target;
    int64_t n;
    int32_t W, H, C;
    uint32_t key;
    int32_t strat_k; /* 0: uniform; k: jittered 2^k x 2^k strata in Morton order */
    int32_t pad_;
} nb_sample_args;

static uint32_t nb_compact1by1(uint32_t x) {
    x &= 0x55555555u;
    x = (x ^ (x >> 1)) & 0x33333333u;
    x = (x ^ (x >> 2)) & 0x0f0f0f0fu;
    x = (x ^ (x >> 4)) & 0x00ff00ffu;
    return (x ^ (x >> 8)) & 0x0000ffffu;
}

static void nb_sample_cpu_range(void *vctx, int64_t b, int64_t e) {
    const nb_sample_args *a = vctx;
    for (int64_t ii = b; ii < e; ii++) {
        uint32_t i = (uint32_t)ii;
        float u = nb_nn_uniform(a->key, 2u * i), v = nb_nn_uniform(a->key, 2u * i + 1u);
        if (a->strat_k) {
            uint32_t st = i & ((1u << (2 * a->strat_k)) - 1u);
            float sc = ldexpf(1.0f, -a->strat_k);
            u = ((float)nb_compact1by1(st) + u) * sc;
            v = ((float)nb_compact1by1(st >> 1) + v) * sc;
        }
        a->x[2 * ii] = u;
        a->x[2 * ii + 1] = v;
        float px = u * (float)a->W - 0.5f, py = v * (float)a->H - 0.5f;
        px = fminf(fmaxf(px, 0.0f), (float)(a->W - 1));
        py = fminf(fmaxf(py, 0.0f), (float)(a->H - 1));
        float x0 = fminf(floorf(px), (float)(a->W - 2)), y0 = fminf(floorf(py), (float)(a->H - 2));
        float fx = px - x0, fy = py - y0;
        const float *p = a->img + ((size_t)y0 * a->W + (size_t)x0) * a->C;
        size_t row = (size_t)a->W * a->C;
        for (int c = 0; c < a->C; c++) {
            float top = p[c] + fx * (p[a->C + c] - p[c]);
            float bot = p[row + c] + fx * (p[row + a->C + c] - p[row + c]);
            a->target[ii * a->C + c] = top + fy * (bot - top);
        }
    }
}

static nb_status nb_image_sample_mode(const nb_tensor *img, uint64_t seed, uint32_t step, nb_tensor *x,
                                     nb_tensor *target, int stratified) {
    const char *fn = stratified ? "nb_image_sample_stratified" : "nb_image_sample";
    if (!img) return nb_error(NB_ERR_INVALID_ARG, "%s: img is NULL", fn);
    nb_device *dev = nb_tensor_device(img);
    char buf[128];
    if (nb_tensor_ndim(img) != 3)
        return nb_error(NB_ERR_SHAPE, "%s: img must be [H, W, C], got %s", fn, nb_tensor_describe(img, buf, sizeof buf));
    const int64_t *sh = nb_tensor_shape(img);
    NB_TRY(nb_nn_check_f32(fn, "img", img, dev, 3, sh[0], sh[1]));
    if (sh[0] < 2 || sh[1] < 2 || sh[2] < 1 || sh[0] > NB_IMAGE_MAX_SIDE || sh[1] > NB_IMAGE_MAX_SIDE || sh[2] > 64)
        return nb_error(NB_ERR_SHAPE, "%s: image of %lldx%lld pixels, %lld channels: want sides 2..%d, 1..64 channels",
                        fn, (long long)sh[1], (long long)sh[0], (long long)sh[2], NB_IMAGE_MAX_SIDE);
    NB_TRY(nb_nn_check_f32(fn, "x", x, dev, 2, -1, 2));
    int64_t B = nb_tensor_shape(x)[0];
    if (B > ((int64_t)1 << 30)) return nb_error(NB_ERR_INVALID_ARG, "%s: batch of %lld is above 2^30", fn, (long long)B);
    NB_TRY(nb_nn_check_f32(fn, "target", target, dev, 2, B, sh[2]));
    if (B == 0) return NB_OK;
    int sk = 0;
    while (stratified && sk < 15 && ((int64_t)1 << (2 * (sk + 1))) <= B) sk++;
    nb_sample_args a = {nb_tensor_data(img), nb_tensor_data(x), nb_tensor_data(target), B,
                        (int32_t)sh[1], (int32_t)sh[0], (int32_t)sh[2], nb_nn_rng_key(seed, step), sk, 0};
    if (nb_device_get_kind(dev) == NB_DEVICE_CUDA) {
        nb_jit_kernel *k;
        NB_TRY(nb_jit_cuda_kernel(dev, "src/models/kernels/image_sample.cu", NULL, "nb_image_sample", &k));
        return nb_jit_launch_cuda(k, &a, sizeof a, B, NULL);
    }
    nb_nn_parallel(B, 4096, nb_sample_cpu_range, &a);
    return NB_OK;
}

nb_status nb_image_sample(const nb_tensor *img, uint64_t seed, uint32_t step, nb_tensor *x,
                          nb_tensor *target) {
    return nb_image_sample_mode(img, seed, step, x, target, 0);
}

nb_status nb_image_sample_stratified(const nb_tensor *img, uint64_t seed, uint32_t step, nb_tensor *x,
                                     nb_tensor *target) {
    return nb_image_sample_mode(img, seed, step, x, target, 1);
}

nb_status nb_image_pixel_coords(nb_device *dev, int width, int height, nb_tensor **out) {
    const char *fn = "nb_image_pixel_coords";
    if (!out) return nb_error(NB_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!dev || width < 1 || height < 1 || (int64_t)width * height > NB_IMAGE_MAX_PIXELS)
        return nb_error(NB_ERR_INVALID_ARG, "%s: bad device or size %dx%d", fn, width, height);
    size_t n = (size_t)width * height;
    float *h = nb_alloc(n * 2 * sizeof(float), 64);
    if (!h) return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    for (int y = 0; y < height; y++)
        for (int x = 0; x < width; x++) {
            h[((size_t)y * width + x) * 2] = (float)((x + 0.5) / width);
            h[((size_t)y * width + x) * 2 + 1] = (float)((y + 0.5) / height);
        }
    int64_t shape[2] = {(int64_t)n, 2};
    nb_status s = nb_tensor_from_host(dev, NB_F32, 2, shape, h, out);
    nb_free(h, n * 2 * sizeof(float));
    return s;
}

nb_status nb_image_psnr(const nb_tensor *pred, const nb_tensor *ref, double *out) {
    const char *fn = "nb_image_psnr";
    if (!pred || !ref || !out) return nb_error(NB_ERR_INVALID_ARG, "%s: NULL argument", fn);
    if (nb_tensor_dtype(pred) != NB_F32 || nb_tensor_dtype(ref) != NB_F32)
        return nb_error(NB_ERR_DTYPE, "%s: pred and ref must be f32", fn);
    int64_t n = nb_tensor_numel(pred);
    if (n != nb_tensor_numel(ref) || n == 0)
        return nb_error(NB_ERR_SHAPE, "%s: pred has %lld elements, ref %lld (want equal, > 0)", fn,
                        (long long)n, (long long)nb_tensor_numel(ref));
    size_t bytes = (size_t)n * sizeof(float);
    float *a = nb_alloc(bytes, 64), *b = a ? nb_alloc(bytes, 64) : NULL;
    if (!b) {
        if (a) nb_free(a, bytes);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    }
    nb_status s = nb_tensor_to_host(pred, a, bytes);
    if (s == NB_OK) s = nb_tensor_to_host(ref, b, bytes);
    if (s == NB_OK) {
        double se = 0.0;
        for (int64_t i = 0; i < n; i++) {
            double p = a[i] > 0.0f ? (a[i] < 1.0f ? a[i] : 1.0) : 0.0; /* NaN -> 0 */
            double d = p - b[i];
            se += d * d;
        }
        double mse = se / (double)n;
        *out = mse > 0.0 ? 10.0 * log10(1.0 / mse) : INFINITY;
    }
    nb_free(b, bytes);
    nb_free(a, bytes);
    return s;
}

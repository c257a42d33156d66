/* nabla — images for neural fitting: PNG files in and out, a built-in procedural test image,
 * random bilinear samples for training, pixel-centre coordinates and PSNR.
 *
 *   nb_tensor *img;                                       // f32 [H, W, C], values in [0, 1]
 *   nb_image_read_png("astronaut.png", 3, dev, &img);     // 3: RGB (alpha dropped, gray spread)
 *   nb_image_sample(img, seed, step, x, target);          // x [B,2] uniform in [0,1)^2, target [B,C]
 *   nb_image_write_png("fit.png", img);                   // 8-bit gray / RGB / RGBA by C
 *
 * Coordinates: x[., 0] runs along the width (column), x[., 1] along the height (row), both in
 * [0, 1]; pixel (row r, column c) has its centre at ((c + 0.5) / W, (r + 0.5) / H). Sampling is
 * bilinear between pixel centres, clamped at the borders, so sampling a pixel centre returns the
 * pixel. The random positions come from a counter-based generator keyed by (seed, step): the same
 * on the CPU and on CUDA, and a training step needs no host round trip.
 *
 * PNG support loads libpng at run time (dlopen of libpng16.so.16), so nabla builds without the
 * libpng headers; without the library, reading and writing fail with NB_ERR_UNSUPPORTED naming
 * it. Input: 8-bit gray, gray + alpha, RGB, RGBA and palette PNGs; 16-bit files are rejected
 * (NB_ERR_UNSUPPORTED). Missing, truncated and corrupt files fail with NB_ERR_IO and libpng's
 * reason; images larger than NB_IMAGE_MAX_SIDE per side or NB_IMAGE_MAX_PIXELS in all fail with
 * NB_ERR_INVALID_ARG before anything is allocated. nb_image_read reads JPEG, OpenEXR, BMP, TGA,
 * Radiance HDR, PFM and PPM / PGM files too (no library needed; ZIP-compressed EXR: zlib at run
 * time), with the file's own channels.
 */
#ifndef NABLA_IMAGE_H
#define NABLA_IMAGE_H

#include <stdint.h>

#include "nabla/device.h"
#include "nabla/status.h"
#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NB_IMAGE_MAX_SIDE 16384
#define NB_IMAGE_MAX_PIXELS ((int64_t)1 << 26)

/* Reads a PNG into a new f32 [H, W, C] tensor on dev (NULL = cpu). channels: 1 (luma), 3 (RGB),
 * 4 (RGBA), or 0 for the file's own (1 for gray, 3 for RGB / palette, 4 when it has alpha). */
nb_status nb_image_read_png(const char *path, int channels, nb_device *dev, nb_tensor **out);

/* What nb_image_read found in a file. */
typedef struct nb_image_info {
    const char *format; /* "PNG", "JPEG", "EXR", "BMP", "TGA", "HDR" (Radiance RGBE), "PFM", "PPM", "PGM" */
    int width, height;
    int channels;       /* the file's: 1 gray, 2 gray + alpha, 3 RGB, 4 RGBA */
    int srgb;           /* 1: integer samples scaled to [0, 1], sRGB-encoded by convention (PNG,
                           JPEG, BMP, TGA, PPM / PGM); 0: linear floats as stored (EXR, HDR, PFM:
                           may exceed 1) */
} nb_image_info;

/* Reads an image file of any supported format, told by its content (TGA, which has no signature,
 * by its ".tga" extension or TGA 2.0 footer), into a new f32 [H, W, C] tensor on dev (NULL = cpu)
 * with the file's own C (info->channels; a palette gives RGB, or RGBA for a PNG with
 * transparency), rows top to bottom, integer samples divided by their maximum. info may be NULL.
 *   PNG   8-bit gray, gray + alpha, RGB, RGBA, palette (through libpng, as nb_image_read_png)
 *   JPEG  baseline / extended sequential and progressive Huffman-coded, 8-bit, gray or YCbCr (RGB
 *         with an Adobe marker or R, G, B component ids), any sampling (4:4:4, 4:2:2, 4:2:0, ...),
 *         restart intervals; chroma upsampled as libjpeg's djpeg does (within 2 / 255 of it)
 *   EXR   OpenEXR single-part scanline files, NONE / RLE / ZIPS / ZIP compression, HALF / FLOAT /
 *         UINT channels R, G, B (A) or Y (A) (others skipped); the data window, linear values
 *   BMP   1/4/8-bit palette, 16/24/32-bit, BI_RGB and BI_BITFIELDS (a 32-bit BI_RGB file whose
 *         fourth bytes are not all 0 has alpha), bottom-up and top-down
 *   TGA   truecolor 15/16/24/32-bit, gray 8-bit (16-bit: gray + alpha), colour-mapped; raw or RLE
 *   HDR   Radiance RGBE (flat, old and new run-length scanlines; -Y H +X W or +Y H +X W):
 *         value = byte * 2^(exponent - 136), as stb_image decodes it
 *   PFM   "PF" (RGB) / "Pf" (gray) float32, either byte order (the scale's sign)
 *   PPM / PGM  P6 / P5 binary and P3 / P2 ASCII, maxval up to 65535
 * Other formats fail with NB_ERR_UNSUPPORTED naming the format found (GIF, TIFF, WebP, PBM, PAM,
 * RLE-compressed BMP, ...) and listing the supported ones, as do arithmetic-coded, 12-bit, lossless,
 * hierarchical and CMYK JPEGs and tiled, deep, multi-part, PIZ / PXR24 / B44 / DWA, subsampled and
 * luminance-chroma EXRs, naming the feature; missing, truncated and
 * corrupt files with NB_ERR_IO naming the cause; sizes beyond NB_IMAGE_MAX_SIDE / _PIXELS with
 * NB_ERR_INVALID_ARG before anything is allocated. */
nb_status nb_image_read(const char *path, nb_device *dev, nb_image_info *info, nb_tensor **out);

/* Writes an f32 [H, W, C] tensor (C = 1, 3 or 4; any device) as an 8-bit PNG; values are
 * clamped to [0, 1] and rounded. */
nb_status nb_image_write_png(const char *path, const nb_tensor *img);

/* The built-in test image (f32 [height, width, 3] on dev): colour gradients, a zone plate, a
 * checkerboard, discs and thin lines — smooth areas, sharp edges and fine detail, so a fit shows
 * its progress. Deterministic. Sides 2..NB_IMAGE_MAX_SIDE. */
nb_status nb_image_procedural(nb_device *dev, int width, int height, nb_tensor **out);

/* B random training samples of img (f32 [H, W, C], H, W >= 2): x f32 [B, 2] <- positions,
 * target f32 [B, C] <- the image there. All on img's device; one launch on CUDA. */
nb_status nb_image_sample(const nb_tensor *img, uint64_t seed, uint32_t step, nb_tensor *x,
                          nb_tensor *target);

/* The same with jittered stratified positions: the square is cut into 2^k x 2^k strata (the
 * largest k with 4^k <= B, k <= 15), sample i lies uniformly inside stratum i mod 4^k, and strata
 * are numbered in Morton (Z) order, so neighbouring samples are neighbours in the image (better
 * cache locality for grid encodings; lower-variance batches). Same generator and targets. */
nb_status nb_image_sample_stratified(const nb_tensor *img, uint64_t seed, uint32_t step, nb_tensor *x,
                                     nb_tensor *target);

/* Pixel-centre coordinates of a W x H image in row-major pixel order: f32 [H * W, 2] on dev. */
nb_status nb_image_pixel_coords(nb_device *dev, int width, int height, nb_tensor **out);

/* PSNR in dB of `pred` against `ref` (same shape, f32, any devices), with pred clamped to [0, 1]
 * as it would be written: 10 log10(1 / MSE); +inf when equal. Synchronises (copies to the host). */
nb_status nb_image_psnr(const nb_tensor *pred, const nb_tensor *ref, double *out);

/* A loss curve as an 800x480 RGB PNG at path: y[i] over x[i] (n points, x increasing: steps)
 * with a log-scale y axis (decade grid lines and labels) and a linear x axis; points with y <= 0
 * or not finite break the line. NB_ERR_INVALID_ARG when n < 1 or no y is positive and finite. */
nb_status nb_image_plot_loss(const char *path, const double *x, const double *y, int n);

/* k named series over the same n points as a 1040x480 RGB PNG at path, log-log axes: y[j*n + i]
 * is series j at x[i] (x positive and increasing; ticks at each x[i]); values <= 0 or not
 * finite are left out (the line breaks there). A legend of names[j] on the right, title on top,
 * xlabel under the axis, ylabel under the legend (any may be NULL but names). Text is drawn in
 * capitals. NB_ERR_INVALID_ARG for bad x or when no value is positive and finite. */
nb_status nb_image_plot_lines(const char *path, const char *title, const char *xlabel,
                              const char *ylabel, const double *x, int n,
                              const char *const *names, const double *y, int k);

#ifdef __cplusplus
}
#endif
#endif

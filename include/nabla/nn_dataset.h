/* nabla — image data sets for diffusion training (CPU, host memory, values in [-1, 1]).
 *
 *   nb_dataset *ds;
 *   nb_dataset_open("fashion-mnist", 32, 1, 0, &ds);   // or "synthetic", or a folder of PNGs
 *   float *x = malloc(sizeof(float) * B * 1 * 32 * 32);
 *   nb_dataset_batch(ds, B, seed, step, x);              // x [B, C, S, S], random images
 *   nb_dataset_free(ds);
 *
 * Sources:
 *   "fashion-mnist": train-images-idx3-ubyte(.gz) from Debian's dataset-fashion-mnist package
 *       (/usr/share/datasets/fashion-mnist, or $NABLA_FASHION_MNIST_DIR), 60000 28x28 gray
 *       images, zero-padded to 32x32 (the DDPM convention), then resized when the image size is
 *       not 32; channels 3 repeats the gray. .gz is read through zlib loaded at run time
 *       (dlopen of libz.so.1): without it, NB_ERR_UNSUPPORTED naming the library.
 *   a directory: every *.png in it (sorted by name), read with image.h, resized (bilinear,
 *       pixel centres aligned; box-filtered first when shrinking by 2 or more) to S x S.
 *   "synthetic": 256 deterministic random images (a random background and a disc of random
 *       colour, centre and radius) — learnable structure, no files.
 * Pixel values v in [0, 1] become 2 v - 1. Errors name the cause: a missing data set says
 * which package provides it; bad IDX headers, truncated files, a folder without PNGs.
 */
#ifndef NABLA_NN_DATASET_H
#define NABLA_NN_DATASET_H

#include <stdint.h>

#include "nabla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NB_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

typedef struct nb_dataset nb_dataset;

/* spec: "fashion-mnist", "synthetic" or a directory of PNGs; image_size 4..1024; channels 1 or 3. */
nb_status nb_dataset_open(const char *spec, int image_size, int channels, uint64_t seed, nb_dataset **out);
/* Fashion-MNIST's training images from dir (NULL: $NABLA_FASHION_MNIST_DIR or NB_FASHION_MNIST_DIR). */
nb_status nb_dataset_fashion_mnist(const char *dir, int image_size, int channels, nb_dataset **out);
nb_status nb_dataset_png_folder(const char *dir, int image_size, int channels, nb_dataset **out);
nb_status nb_dataset_synthetic(int image_size, int channels, int count, uint64_t seed, nb_dataset **out);
void nb_dataset_free(nb_dataset *ds);

nb_status nb_dataset_count(const nb_dataset *ds, int64_t *n);
/* Image i: [C, S, S] f32 in [-1, 1], owned by ds. */
nb_status nb_dataset_image(const nb_dataset *ds, int64_t i, const float **out);
/* n images drawn uniformly (with replacement) by a generator keyed by (seed, step) into
 * out [n, C, S, S]. */
nb_status nb_dataset_batch(const nb_dataset *ds, int n, uint64_t seed, uint64_t step, float *out);

/* Bilinear resize (pixel centres aligned, clamped borders; box pre-filter when shrinking by an
 * integer factor >= 2) of src [c, h, w] into dst [c, oh, ow]. */
nb_status nb_resize_chw(const float *src, int c, int h, int w, int oh, int ow, float *dst);

#ifdef __cplusplus
}
#endif
#endif

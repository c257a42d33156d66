/* Internal to nb_image_read (image_read.c: the entry point, BMP, TGA; image_float.c: Radiance
 * HDR, PFM, PPM / PGM; jpeg.c; exr.c): a whole file in memory, read through bounds-checked helpers, decoded
 * into float pixels. */
#ifndef NB_IO_IMAGE_READ_H
#define NB_IO_IMAGE_READ_H

#include <stddef.h>
#include <stdint.h>

#include "nabla/image.h"
#include "nabla/status.h"

/* The file's bytes (NUL-terminated, from nb_file_read_all) and its path for messages. */
typedef struct nb_img_src {
    const unsigned char *p;
    size_t n;
    const char *path;
    const char *format; /* for messages: "BMP", ... */
} nb_img_src;

/* A decoded image: w * h pixels of c floats, rows top to bottom. */
typedef struct nb_img {
    int w, h, c;
    int srgb;
    float *px; /* nb_alloc'ed (nb_img_bytes) */
} nb_img;

/* Checks w x h against NB_IMAGE_MAX_SIDE / _PIXELS (NB_ERR_INVALID_ARG; a zero side is a corrupt
 * header: NB_ERR_IO) and allocates the pixels. */
nb_status nb_img_alloc(const nb_img_src *s, long long w, long long h, int c, nb_img *im);
size_t nb_img_bytes(const nb_img *im);
/* 1 when a w x h image is within those limits (checked before the data's length, so that a huge
 * header is reported as such, not as a truncated file). */
static inline int nb_img_size_ok(long long w, long long h) {
    return w > 0 && h > 0 && w <= NB_IMAGE_MAX_SIDE && h <= NB_IMAGE_MAX_SIDE && w * h <= NB_IMAGE_MAX_PIXELS;
}

/* "'path' is a truncated FMT file (what)" */
nb_status nb_img_truncated(const nb_img_src *s, const char *what);
/* "'path' is not a valid FMT file (why)" */
nb_status nb_img_corrupt(const nb_img_src *s, const char *fmt, ...);

static inline uint32_t nb_img_le16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static inline uint32_t nb_img_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The decoders: fill *im (srgb included) or return an error (nothing allocated then). */
nb_status nb_img_decode_bmp(const nb_img_src *s, nb_img *im);
nb_status nb_img_decode_tga(const nb_img_src *s, nb_img *im);
nb_status nb_img_decode_hdr(const nb_img_src *s, nb_img *im);
nb_status nb_img_decode_pfm(const nb_img_src *s, nb_img *im);
nb_status nb_img_decode_pnm(const nb_img_src *s, nb_img *im);
nb_status nb_img_decode_jpeg(const nb_img_src *s, nb_img *im); /* jpeg.c */
nb_status nb_img_decode_exr(const nb_img_src *s, nb_img *im);  /* exr.c */

#endif

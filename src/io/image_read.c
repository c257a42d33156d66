/* nb_image_read: image files of any supported format -> f32 [H, W, C] (include/nabla/image.h).
 *
 * The whole file is read into memory once; the format is told by its content (TGA: extension or
 * footer), then one decoder (BMP and TGA here, HDR / PFM / PPM in image_float.c, JPEG in jpeg.c,
 * OpenEXR in exr.c, PNG through libpng in png.c) fills float pixels with rows top to bottom, which
 * go to the device in one copy.
 * Every read goes through a bounds check against the file's length: a truncated or lying header
 * is an NB_ERR_IO naming the file, never a read past the buffer. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "io/image_read.h"
#include "nabla/alloc.h"
#include "nabla/file.h"

#define SUPPORTED "PNG, JPEG, OpenEXR, BMP, TGA, Radiance HDR, PFM and PPM / PGM"

size_t nb_img_bytes(const nb_img *im) { return (size_t)im->w * (size_t)im->h * (size_t)im->c * sizeof(float); }

nb_status nb_img_alloc(const nb_img_src *s, long long w, long long h, int c, nb_img *im) {
    if (w <= 0 || h <= 0)
        return nb_error(NB_ERR_IO, "'%s' is not a valid %s file (its header says %lldx%lld pixels)", s->path,
                        s->format, w, h);
    if (!nb_img_size_ok(w, h))
        return nb_error(NB_ERR_INVALID_ARG,
                        "'%s' is %lldx%lld pixels: unsupported size (each side 1..%d, at most %lld pixels)",
                        s->path, w, h, NB_IMAGE_MAX_SIDE, (long long)NB_IMAGE_MAX_PIXELS);
    im->w = (int)w, im->h = (int)h, im->c = c;
    im->px = nb_alloc(nb_img_bytes(im), 64);
    if (!im->px)
        return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_image_read: no host memory for a %lldx%lld image", w, h);
    return NB_OK;
}

nb_status nb_img_truncated(const nb_img_src *s, const char *what) {
    return nb_error(NB_ERR_IO, "'%s' is a truncated %s file (%s)", s->path, s->format, what);
}

nb_status nb_img_corrupt(const nb_img_src *s, const char *fmt, ...) {
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return nb_error(NB_ERR_IO, "'%s' is not a valid %s file (%s)", s->path, s->format, why);
}

/* ---- BMP ------------------------------------------------------------------------------------- */

/* A channel of a BI_BITFIELDS pixel: (v & mask) scaled to [0, 1]. */
static float bitfield(uint32_t v, uint32_t mask) {
    if (!mask) return 0.0f;
    int shift = 0;
    while (!((mask >> shift) & 1u)) shift++;
    uint32_t m = mask >> shift;
    return (float)((v >> shift) & m) / (float)m;
}

nb_status nb_img_decode_bmp(const nb_img_src *s, nb_img *im) {
    const unsigned char *p = s->p;
    if (s->n < 26) return nb_img_truncated(s, "shorter than its headers");
    uint32_t off = nb_img_le32(p + 10), hs = nb_img_le32(p + 14);
    long long w, h;
    int bpp, core = hs == 12;
    uint32_t comp = 0, nclr = 0, mask[4] = {0, 0, 0, 0};
    if (core) { /* OS/2 BITMAPCOREHEADER: 16-bit sizes, 3-byte palette entries */
        w = nb_img_le16(p + 18), h = nb_img_le16(p + 20), bpp = (int)nb_img_le16(p + 24);
    } else {
        if (hs < 40 || hs > 1024) return nb_img_corrupt(s, "a DIB header of %u bytes", hs);
        if (s->n < 14 + (size_t)hs) return nb_img_truncated(s, "shorter than its DIB header");
        w = (int32_t)nb_img_le32(p + 18), h = (int32_t)nb_img_le32(p + 22);
        bpp = (int)nb_img_le16(p + 28), comp = nb_img_le32(p + 30), nclr = nb_img_le32(p + 46);
        if (comp == 1 || comp == 2)
            return nb_error(NB_ERR_UNSUPPORTED, "'%s' is an RLE-compressed BMP file, which nabla does not read "
                            "(uncompressed and BI_BITFIELDS BMPs are; nabla reads " SUPPORTED ")", s->path);
        if (comp == 4 || comp == 5)
            return nb_error(NB_ERR_UNSUPPORTED, "'%s' is a BMP file holding a %s image, which nabla does not read "
                            "(nabla reads " SUPPORTED ")", s->path, comp == 4 ? "JPEG" : "PNG");
        if (comp != 0 && comp != 3 && comp != 6)
            return nb_img_corrupt(s, "compression %u", comp);
        if (comp == 3 || comp == 6) { /* masks follow a 40-byte header, or sit inside a longer one */
            int nm = comp == 6 || hs >= 56 ? 4 : 3;
            if (s->n < 54 + 4 * (size_t)nm) return nb_img_truncated(s, "no colour masks");
            for (int k = 0; k < nm; k++) mask[k] = nb_img_le32(p + 54 + 4 * k);
            if (bpp != 16 && bpp != 32) return nb_img_corrupt(s, "BI_BITFIELDS with %d bits per pixel", bpp);
        }
    }
    if (bpp != 1 && bpp != 4 && bpp != 8 && bpp != 16 && bpp != 24 && bpp != 32)
        return nb_img_corrupt(s, "%d bits per pixel", bpp);
    int top_down = h < 0;
    if (top_down) h = -h;
    if (!nb_img_size_ok(w, h)) return nb_img_alloc(s, w, h, 3, im); /* (the error) */
    /* palette */
    const unsigned char *pal = NULL;
    uint32_t npal = 0;
    int pe = core ? 3 : 4;
    if (bpp <= 8) {
        npal = nclr ? nclr : 1u << bpp;
        if (npal > 256) return nb_img_corrupt(s, "a palette of %u colours", npal);
        size_t at = 14 + (size_t)hs + (comp == 3 && hs == 40 ? 12 : 0);
        if (at + (size_t)npal * pe > s->n) return nb_img_truncated(s, "palette");
        pal = p + at;
    }
    if (bpp == 16 && comp == 0) mask[0] = 0x7c00, mask[1] = 0x03e0, mask[2] = 0x001f;
    size_t stride = (((size_t)w * (size_t)bpp + 31) / 32) * 4;
    if (off > s->n || (size_t)h * stride > s->n - off) return nb_img_truncated(s, "pixel rows");
    const unsigned char *rows = p + off;
    /* channels: alpha from an alpha mask, or from a 32-bit BI_RGB file's fourth bytes unless all 0 */
    int c = 3;
    if ((comp == 3 || comp == 6) && mask[3]) c = 4;
    if (bpp == 32 && comp == 0) {
        for (long long y = 0; y < h && c == 3; y++)
            for (long long x = 0; x < w; x++)
                if (rows[(size_t)y * stride + (size_t)x * 4 + 3]) {
                    c = 4;
                    break;
                }
    }
    nb_status st = nb_img_alloc(s, w, h, c, im);
    if (st) return st;
    im->srgb = 1;
    for (long long y = 0; y < h; y++) {
        const unsigned char *r = rows + (size_t)(top_down ? y : h - 1 - y) * stride;
        float *o = im->px + (size_t)y * (size_t)w * (size_t)c;
        for (long long x = 0; x < w; x++, o += c) {
            if (bpp <= 8) {
                int per = 8 / bpp, shift = 8 - bpp * (int)(x % per + 1);
                uint32_t i = (uint32_t)(r[x / per] >> shift) & ((1u << bpp) - 1u);
                if (i >= npal) {
                    nb_free(im->px, nb_img_bytes(im));
                    return nb_img_corrupt(s, "palette index %u of %u colours", i, npal);
                }
                const unsigned char *e = pal + (size_t)i * pe;
                o[0] = e[2] / 255.0f, o[1] = e[1] / 255.0f, o[2] = e[0] / 255.0f;
            } else if (bpp == 24 || (bpp == 32 && comp == 0)) {
                const unsigned char *e = r + (size_t)x * (size_t)(bpp / 8);
                o[0] = e[2] / 255.0f, o[1] = e[1] / 255.0f, o[2] = e[0] / 255.0f;
                if (c == 4) o[3] = e[3] / 255.0f;
            } else { /* 16 / 32-bit masks */
                uint32_t v = bpp == 16 ? nb_img_le16(r + (size_t)x * 2) : nb_img_le32(r + (size_t)x * 4);
                for (int k = 0; k < c; k++) o[k] = bitfield(v, mask[k]);
            }
        }
    }
    return NB_OK;
}

/* ---- TGA ------------------------------------------------------------------------------------- */

/* One pixel of `bytes` bytes (BGR(A) little-endian, 15/16-bit 5:5:5, gray(+alpha)) -> c floats. */
static void tga_pixel(const unsigned char *e, int bytes, int gray, float *o) {
    if (gray) {
        o[0] = e[0] / 255.0f;
        if (bytes == 2) o[1] = e[1] / 255.0f;
    } else if (bytes == 2) {
        uint32_t v = nb_img_le16(e);
        o[0] = (float)((v >> 10) & 31u) / 31.0f, o[1] = (float)((v >> 5) & 31u) / 31.0f, o[2] = (float)(v & 31u) / 31.0f;
    } else {
        o[0] = e[2] / 255.0f, o[1] = e[1] / 255.0f, o[2] = e[0] / 255.0f;
        if (bytes == 4) o[3] = e[3] / 255.0f;
    }
}

nb_status nb_img_decode_tga(const nb_img_src *s, nb_img *im) {
    const unsigned char *p = s->p;
    if (s->n < 18) return nb_img_truncated(s, "shorter than its 18-byte header");
    int idlen = p[0], cmtype = p[1], type = p[2], cmbits = p[7], bpp = p[16], desc = p[17];
    uint32_t cmfirst = nb_img_le16(p + 3), cmlen = nb_img_le16(p + 5);
    long long w = nb_img_le16(p + 12), h = nb_img_le16(p + 14);
    int rle = type >= 9, base = type & 7;
    if (type == 0) return nb_img_corrupt(s, "it holds no image data (type 0)");
    if (type == 32 || type == 33)
        return nb_error(NB_ERR_UNSUPPORTED, "'%s' is a Huffman-compressed TGA file (type %d), which nabla does "
                        "not read (types 1-3 and 9-11 are)", s->path, type);
    if ((base != 1 && base != 2 && base != 3) || (type > 3 && type < 9) || type > 11)
        return nb_img_corrupt(s, "image type %d", type);
    if (cmtype > 1) return nb_img_corrupt(s, "colour map type %d", cmtype);
    int gray = base == 3, mapped = base == 1;
    if (mapped && (!cmtype || (bpp != 8 && bpp != 16) || (cmbits != 15 && cmbits != 16 && cmbits != 24 && cmbits != 32)))
        return nb_img_corrupt(s, "a colour-mapped image with %d-bit indices into %d-bit colours", bpp, cmbits);
    if (gray && bpp != 8 && bpp != 16) return nb_img_corrupt(s, "a gray image of %d bits per pixel", bpp);
    if (!mapped && !gray && bpp != 15 && bpp != 16 && bpp != 24 && bpp != 32)
        return nb_img_corrupt(s, "a truecolor image of %d bits per pixel", bpp);
    int cmbytes = (cmbits + 7) / 8, pbytes = (bpp + 7) / 8;
    size_t at = 18 + (size_t)idlen, cmsize = cmtype ? (size_t)cmlen * (size_t)cmbytes : 0;
    if (at + cmsize > s->n) return nb_img_truncated(s, "colour map");
    const unsigned char *cmap = p + at;
    at += cmsize;
    int c = gray ? (bpp == 16 ? 2 : 1) : mapped ? (cmbits == 32 ? 4 : 3) : (bpp == 32 ? 4 : 3);
    int src_bytes = mapped ? cmbytes : pbytes; /* bytes of the colour a pixel resolves to */
    /* the least data the pixels can take (a raw pixel each, or one packet per 128): checked before
     * the pixels are allocated, so that a short file cannot claim a huge image */
    if (nb_img_size_ok(w, h)) {
        size_t npx = (size_t)w * (size_t)h, least = rle ? (npx + 127) / 128 * (size_t)(1 + pbytes) : npx * (size_t)pbytes;
        if (s->n - at < least) return nb_img_truncated(s, rle ? "run-length packets" : "pixel data");
    }
    nb_status st = nb_img_alloc(s, w, h, c, im);
    if (st) return st;
    im->srgb = 1;
    size_t npix = (size_t)w * (size_t)h, i = 0;
    const unsigned char *d = p + at, *end = p + s->n;
    int top = (desc & 0x20) != 0, right_to_left = (desc & 0x10) != 0;
    const char *err = NULL;
    while (i < npix && !err) {
        size_t count = 1;
        int run = 0;
        if (rle) {
            if (d >= end) {
                err = "run-length packets";
                break;
            }
            run = (*d & 0x80) != 0, count = (size_t)(*d & 0x7f) + 1, d++;
            if (count > npix - i) count = npix - i; /* (a packet past the last pixel: the rest is unused) */
        }
        for (size_t k = 0; k < count; k++, i++) {
            const unsigned char *e = d;
            if ((size_t)(end - d) < (size_t)pbytes) {
                err = "pixel data";
                break;
            }
            if (mapped) {
                uint32_t idx = pbytes == 1 ? e[0] : nb_img_le16(e);
                if (idx < cmfirst || idx - cmfirst >= cmlen) {
                    nb_free(im->px, nb_img_bytes(im));
                    return nb_img_corrupt(s, "colour index %u outside the map [%u, %u)", idx, cmfirst, cmfirst + cmlen);
                }
                e = cmap + (size_t)(idx - cmfirst) * (size_t)cmbytes;
            }
            size_t x = i % (size_t)w, y = i / (size_t)w;
            if (right_to_left) x = (size_t)w - 1 - x;
            if (!top) y = (size_t)h - 1 - y;
            tga_pixel(e, src_bytes, gray, im->px + (y * (size_t)w + x) * (size_t)c);
            if (!run) d += pbytes;
        }
        if (run && !err) d += pbytes;
    }
    if (err) {
        nb_free(im->px, nb_img_bytes(im));
        return nb_img_truncated(s, err);
    }
    return NB_OK;
}

/* ---- the entry point ------------------------------------------------------------------------- */

/* PNG through png.c's libpng reader, as the file's own channels (gray + alpha: 2). */
static nb_status decode_png(const nb_img_src *s, nb_img *im) {
    if (s->n < 26 || memcmp(s->p + 12, "IHDR", 4)) return nb_img_truncated(s, "no IHDR header");
    int ctype = s->p[25];
    int ask = ctype == 0 ? 1 : ctype == 2 ? 3 : ctype == 4 || ctype == 6 ? 4 : 0;
    nb_tensor *t = NULL;
    nb_status st = nb_image_read_png(s->path, ask, NULL, &t);
    if (st) return st;
    const int64_t *sh = nb_tensor_shape(t);
    int fc = (int)sh[2], c = ctype == 4 ? 2 : fc;
    size_t n = (size_t)sh[0] * (size_t)sh[1];
    if (!(st = nb_img_alloc(s, sh[1], sh[0], fc, im)) && !(st = nb_tensor_to_host(t, im->px, nb_img_bytes(im)))) {
        if (c == 2) /* gray + alpha read as RGBA (gray spread): keep (gray, alpha) */
            for (size_t i = 0; i < n; i++) im->px[2 * i] = im->px[4 * i], im->px[2 * i + 1] = im->px[4 * i + 3];
        im->c = c; /* (the buffer keeps its size: freed with nb_free(px, w * h * 4 floats) below) */
    }
    nb_tensor_free(t);
    im->srgb = 1;
    if (st && im->px) nb_free(im->px, nb_img_bytes(im)), im->px = NULL;
    return st;
}

static int has_ext(const char *path, const char *ext) {
    size_t n = strlen(path), e = strlen(ext);
    return n > e && !strcasecmp(path + n - e, ext);
}

/* Formats nabla does not read, told by their signatures, for the error message. */
static const char *unsupported_format(const unsigned char *p, size_t n) {
    if (n >= 4 && !memcmp(p, "GIF8", 4)) return "GIF";
    if (n >= 4 && (!memcmp(p, "II*\0", 4) || !memcmp(p, "MM\0*", 4))) return "TIFF";
    if (n >= 12 && !memcmp(p, "RIFF", 4) && !memcmp(p + 8, "WEBP", 4)) return "WebP";
    if (n >= 4 && !memcmp(p, "8BPS", 4)) return "Photoshop (PSD)";
    if (n >= 12 && !memcmp(p + 4, "ftypavif", 8)) return "AVIF";
    if (n >= 2 && p[0] == 'P' && (p[1] == '1' || p[1] == '4')) return "PBM (1-bit)";
    if (n >= 2 && p[0] == 'P' && p[1] == '7') return "PAM";
    if (n >= 8 && !memcmp(p, "\0\0\0\x0cjP  ", 8)) return "JPEG 2000";
    return NULL;
}

nb_status nb_image_read(const char *path, nb_device *dev, nb_image_info *info, nb_tensor **out) {
    const char *fn = "nb_image_read";
    if (!out) return nb_error(NB_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!path) return nb_error(NB_ERR_INVALID_ARG, "%s: path is NULL", fn);
    char *data = NULL;
    size_t len = 0;
    nb_status st = nb_file_read_all(path, "image file", (size_t)NB_IMAGE_MAX_PIXELS * 64, &data, &len);
    if (st == NB_ERR_NOT_FOUND) return nb_error(NB_ERR_IO, "cannot open '%s': %s", path, strerror(ENOENT));
    if (st) return st;
    const unsigned char *p = (const unsigned char *)data;
    nb_img_src s = {p, len, path, NULL};
    nb_img im = {0, 0, 0, 0, NULL};
    static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    const char *other = unsupported_format(p, len);
    if (len >= 8 && !memcmp(p, png_sig, 8)) {
        s.format = "PNG", st = decode_png(&s, &im);
    } else if (len >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff) {
        s.format = "JPEG", st = nb_img_decode_jpeg(&s, &im);
    } else if (len >= 4 && !memcmp(p, "\x76\x2f\x31\x01", 4)) {
        s.format = "EXR", st = nb_img_decode_exr(&s, &im);
    } else if (len >= 2 && p[0] == 'B' && p[1] == 'M') {
        s.format = "BMP", st = nb_img_decode_bmp(&s, &im);
    } else if (len >= 2 && p[0] == '#' && p[1] == '?') {
        s.format = "HDR", st = nb_img_decode_hdr(&s, &im);
    } else if (len >= 2 && p[0] == 'P' && (p[1] == 'F' || p[1] == 'f')) {
        s.format = "PFM", st = nb_img_decode_pfm(&s, &im);
    } else if (len >= 2 && p[0] == 'P' && (p[1] == '2' || p[1] == '3' || p[1] == '5' || p[1] == '6')) {
        s.format = p[1] == '3' || p[1] == '6' ? "PPM" : "PGM", st = nb_img_decode_pnm(&s, &im);
    } else if (!other && (has_ext(path, ".tga") || has_ext(path, ".icb") || has_ext(path, ".vda") ||
                          has_ext(path, ".vst") || (len >= 44 && !memcmp(p + len - 18, "TRUEVISION-XFILE.", 18)))) {
        s.format = "TGA", st = nb_img_decode_tga(&s, &im);
    } else if (other) {
        st = nb_error(NB_ERR_UNSUPPORTED, "'%s' is in the %s format, which nabla does not read (nabla reads " SUPPORTED
                      "; convert it to PNG)", path, other);
    } else {
        const char *dot = strrchr(path, '.');
        st = nb_error(NB_ERR_UNSUPPORTED, "'%s'%s%s%s is not an image format nabla reads (%s): nabla reads " SUPPORTED,
                      path, dot ? " (" : "", dot ? dot : "", dot ? ")" : "",
                      len == 0 ? "the file is empty" : "no known signature");
    }
    nb_free(data, len + 1);
    if (st) return st;
    size_t cap = nb_img_bytes(&im); /* (PNG gray + alpha: the buffer holds 4 channels) */
    if (!strcmp(s.format, "PNG") && im.c == 2) cap = cap * 2;
    int64_t shape[3] = {im.h, im.w, im.c};
    nb_device *d = dev, *cpu = NULL;
    if (!d) st = nb_device_open("cpu", &cpu), d = cpu;
    if (!st) st = nb_tensor_from_host(d, NB_F32, 3, shape, im.px, out);
    if (cpu) nb_device_close(cpu);
    nb_free(im.px, cap);
    if (!st && info) {
        info->format = s.format, info->width = im.w, info->height = im.h, info->channels = im.c;
        info->srgb = im.srgb;
    }
    return st;
}

/* nb_image_read's text-headed formats (image_read.h): Radiance HDR (RGBE), PFM, PPM / PGM.
 * Headers are parsed from the NUL-terminated file buffer; sample data is read with bounds checks
 * against the file's length. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/image_read.h"
#include "nabla/alloc.h"

/* ---- Radiance HDR -------------------------------------------------------------------------- */

/* RGBE -> 3 floats as stb_image decodes it: byte * 2^(e - 136), 0 when e is 0. */
static void rgbe(const unsigned char *e, float *o) {
    if (!e[3]) {
        o[0] = o[1] = o[2] = 0.0f;
        return;
    }
    float f = ldexpf(1.0f, (int)e[3] - 136);
    o[0] = e[0] * f, o[1] = e[1] * f, o[2] = e[2] * f;
}

/* One scanline of w RGBE pixels into line (w * 4 bytes) from *pp; 0 with *why set on bad data. */
static int hdr_scanline(const unsigned char **pp, const unsigned char *end, long long w, unsigned char *line,
                        const char **why) {
    const unsigned char *p = *pp;
    if (end - p < 4) return *why = "scanline data", 0;
    if (w >= 8 && w < 32768 && p[0] == 2 && p[1] == 2 && !(p[2] & 0x80)) { /* new run-length: per channel */
        if (((long long)p[2] << 8 | p[3]) != w) return *why = "a run-length scanline of the wrong width", 0;
        p += 4;
        for (int ch = 0; ch < 4; ch++) {
            long long x = 0;
            while (x < w) {
                if (p >= end) return *why = "run-length scanline data", 0;
                int c = *p++;
                if (c > 128) { /* a run of c - 128 copies */
                    c -= 128;
                    if (p >= end) return *why = "run-length scanline data", 0;
                    if (c > w - x) return *why = "a run past the end of its scanline", 0;
                    for (int k = 0; k < c; k++) line[(x + k) * 4 + ch] = *p;
                    p++;
                } else { /* c literal bytes */
                    if (c == 0 || c > w - x) return *why = "a zero or too-long literal in a scanline", 0;
                    if (end - p < c) return *why = "run-length scanline data", 0;
                    for (int k = 0; k < c; k++) line[(x + k) * 4 + ch] = p[k];
                    p += c;
                }
                x += c;
            }
        }
    } else { /* flat pixels, with old-style runs (1, 1, 1, n): repeat the previous pixel */
        long long x = 0;
        int shift = 0;
        while (x < w) {
            if (end - p < 4) return *why = "scanline data", 0;
            if (p[0] == 1 && p[1] == 1 && p[2] == 1) {
                if (x == 0) return *why = "a repeat with no pixel before it", 0;
                long long n = (long long)p[3] << shift;
                if (n > w - x) return *why = "a run past the end of its scanline", 0;
                for (long long k = 0; k < n; k++, x++) memcpy(line + x * 4, line + (x - 1) * 4, 4);
                shift += 8;
                if (shift > 24) return *why = "too many repeat counts in a row", 0;
            } else {
                memcpy(line + x * 4, p, 4);
                x++;
                shift = 0;
            }
            p += 4;
        }
    }
    *pp = p;
    return 1;
}

nb_status nb_img_decode_hdr(const nb_img_src *s, nb_img *im) {
    const char *t = (const char *)s->p, *end = t + s->n;
    if (strncmp(t, "#?RADIANCE\n", 11) && strncmp(t, "#?RGBE\n", 7))
        return nb_img_corrupt(s, "it starts with '#?' but not '#?RADIANCE' or '#?RGBE'");
    /* header lines up to an empty line */
    const char *line = strchr(t, '\n') + 1;
    for (;;) {
        if (line >= end) return nb_img_truncated(s, "no end of header");
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        if (!nl) return nb_img_truncated(s, "no end of header");
        if (nl == line) {
            line = nl + 1;
            break;
        }
        if (!strncmp(line, "FORMAT=", 7)) {
            size_t n = (size_t)(nl - line - 7);
            if (n == 15 && !strncmp(line + 7, "32-bit_rle_xyze", 15))
                return nb_error(NB_ERR_UNSUPPORTED, "'%s' is a Radiance HDR file of XYZE pixels; nabla reads RGBE "
                                "(FORMAT=32-bit_rle_rgbe) only", s->path);
            if (n != 15 || strncmp(line + 7, "32-bit_rle_rgbe", 15))
                return nb_img_corrupt(s, "FORMAT=%.*s", (int)(n > 40 ? 40 : n), line + 7);
        }
        line = nl + 1;
    }
    /* resolution: -Y H +X W (top to bottom) or +Y H +X W (bottom to top) */
    const char *nl = memchr(line, '\n', (size_t)(end - line));
    if (!nl) return nb_img_truncated(s, "no resolution line");
    char ys, xs;
    long long h, w;
    int used = 0;
    if (sscanf(line, "%cY %lld %cX %lld%n", &ys, &h, &xs, &w, &used) != 4 || line + used != nl ||
        (ys != '-' && ys != '+') || xs != '+')
        return nb_error(NB_ERR_UNSUPPORTED, "'%s': Radiance HDR resolution line '%.*s' (nabla reads '-Y H +X W' and "
                        "'+Y H +X W')", s->path, (int)(nl - line > 40 ? 40 : nl - line), line);
    /* every scanline takes at least 4 bytes (a pixel, or a run-length header): checked before the
     * pixels are allocated, so that a short file cannot claim a huge image */
    if (nb_img_size_ok(w, h) && (size_t)(s->p + s->n - (const unsigned char *)nl - 1) < (size_t)h * 4)
        return nb_img_truncated(s, "scanline data");
    nb_status st = nb_img_alloc(s, w, h, 3, im);
    if (st) return st;
    im->srgb = 0;
    unsigned char *buf = nb_alloc((size_t)w * 4, 64);
    if (!buf) {
        nb_free(im->px, nb_img_bytes(im));
        return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_image_read: no host memory for a scanline");
    }
    const unsigned char *p = (const unsigned char *)nl + 1, *pend = s->p + s->n;
    const char *why = NULL;
    for (long long y = 0; y < h; y++) {
        if (!hdr_scanline(&p, pend, w, buf, &why)) break;
        float *o = im->px + (size_t)(ys == '-' ? y : h - 1 - y) * (size_t)w * 3;
        for (long long x = 0; x < w; x++) rgbe(buf + x * 4, o + x * 3);
    }
    nb_free(buf, (size_t)w * 4);
    if (why) {
        nb_free(im->px, nb_img_bytes(im));
        return strstr(why, "data") ? nb_img_truncated(s, why) : nb_img_corrupt(s, "%s", why);
    }
    return NB_OK;
}

/* ---- netpbm-style headers (PFM, PPM, PGM) ---------------------------------------------------- */

/* Skips whitespace and '#' comments from *i; 0 at the end of the file. */
static int skip_space(const nb_img_src *s, size_t *i) {
    while (*i < s->n) {
        unsigned char c = s->p[*i];
        if (c == '#') {
            while (*i < s->n && s->p[*i] != '\n') (*i)++;
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') {
            (*i)++;
        } else {
            return 1;
        }
    }
    return 0;
}

/* A non-negative decimal integer token (at most 9 digits). */
static int read_uint(const nb_img_src *s, size_t *i, long long *v) {
    if (!skip_space(s, i) || s->p[*i] < '0' || s->p[*i] > '9') return 0;
    long long r = 0;
    int n = 0;
    while (*i < s->n && s->p[*i] >= '0' && s->p[*i] <= '9') {
        if (++n > 9) return 0;
        r = r * 10 + (s->p[(*i)++] - '0');
    }
    *v = r;
    return 1;
}

/* The single whitespace byte that ends a binary header. */
static int end_of_header(const nb_img_src *s, size_t *i) {
    if (*i >= s->n) return 0;
    unsigned char c = s->p[*i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return 0;
    (*i)++;
    return 1;
}

nb_status nb_img_decode_pfm(const nb_img_src *s, nb_img *im) {
    int c = s->p[1] == 'F' ? 3 : 1;
    size_t i = 2;
    long long w, h;
    if (!read_uint(s, &i, &w) || !read_uint(s, &i, &h)) return nb_img_corrupt(s, "no width and height after 'P%c'", s->p[1]);
    if (!skip_space(s, &i)) return nb_img_truncated(s, "no scale");
    char *e;
    double scale = strtod((const char *)s->p + i, &e); /* (the buffer is NUL-terminated) */
    if (e == (const char *)s->p + i || scale == 0.0 || !isfinite(scale))
        return nb_img_corrupt(s, "the scale / byte order field is not a non-zero number");
    i = (size_t)(e - (const char *)s->p);
    if (!end_of_header(s, &i)) return nb_img_corrupt(s, "no whitespace after the scale");
    if (!nb_img_size_ok(w, h)) return nb_img_alloc(s, w, h, c, im); /* (the error) */
    size_t need = (size_t)w * (size_t)h * (size_t)c * 4;
    if (s->n - i < need) return nb_img_truncated(s, "pixel data");
    nb_status st = nb_img_alloc(s, w, h, c, im);
    if (st) return st;
    im->srgb = 0;
    int little = scale < 0;
    const unsigned char *d = s->p + i;
    for (long long y = 0; y < h; y++) { /* rows are stored bottom to top */
        float *o = im->px + (size_t)(h - 1 - y) * (size_t)w * (size_t)c;
        for (long long k = 0; k < w * c; k++, d += 4) {
            uint32_t v = little ? nb_img_le32(d)
                                : (uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3];
            memcpy(o + k, &v, 4);
        }
    }
    return NB_OK;
}

nb_status nb_img_decode_pnm(const nb_img_src *s, nb_img *im) {
    int kind = s->p[1] - '0', c = kind == 3 || kind == 6 ? 3 : 1, ascii = kind == 2 || kind == 3;
    size_t i = 2;
    long long w, h, maxv;
    if (!read_uint(s, &i, &w) || !read_uint(s, &i, &h) || !read_uint(s, &i, &maxv))
        return i >= s->n ? nb_img_truncated(s, "header") : nb_img_corrupt(s, "no width, height and maxval after 'P%d'", kind);
    if (maxv < 1 || maxv > 65535) return nb_img_corrupt(s, "maxval %lld (1..65535)", maxv);
    if (!ascii && !end_of_header(s, &i)) return nb_img_corrupt(s, "no whitespace after maxval");
    if (!nb_img_size_ok(w, h)) return nb_img_alloc(s, w, h, c, im); /* (the error) */
    size_t nsamp = (size_t)w * (size_t)h * (size_t)c, bytes = maxv > 255 ? 2 : 1;
    /* (ASCII: at least one byte a sample, checked before the pixels are allocated) */
    if (s->n - i < (ascii ? nsamp : nsamp * bytes)) return nb_img_truncated(s, "pixel data");
    nb_status st = nb_img_alloc(s, w, h, c, im);
    if (st) return st;
    im->srgb = 1;
    const unsigned char *d = s->p + i;
    for (size_t k = 0; k < nsamp; k++) {
        long long v;
        if (ascii) {
            if (!read_uint(s, &i, &v)) {
                nb_free(im->px, nb_img_bytes(im));
                return i >= s->n ? nb_img_truncated(s, "pixel data") : nb_img_corrupt(s, "a sample that is not a number");
            }
        } else {
            v = bytes == 2 ? (long long)d[0] << 8 | d[1] : d[0];
            d += bytes;
        }
        if (v > maxv) {
            nb_free(im->px, nb_img_bytes(im));
            return nb_img_corrupt(s, "sample %lld above maxval %lld", v, maxv);
        }
        im->px[k] = (float)((double)v / (double)maxv);
    }
    return NB_OK;
}

/* nb_image_read's OpenEXR decoder (image_read.h), written from the OpenEXR file layout document:
 * single-part scanline files, compression NONE, RLE, ZIPS (1 line a chunk) and ZIP (16 lines),
 * HALF, FLOAT (and UINT) channels, RGB(A) or Y(A) -> f32 [H, W, C] of the data window, linear
 * values as stored (info->srgb 0). Other channels (Z, layered names, ...) are skipped.
 *
 * Layout: magic 76 2f 31 01, a version word (2, flags: tiled, long names, deep, multi-part), a
 * header of attributes (name\0 type\0 int32 size, value) ending in an empty name, an offset table
 * of one uint64 per chunk, then chunks: int32 y, int32 size, data. A chunk's data, once
 * decompressed, is its lines one after the other, each line every channel in the header's
 * (alphabetical) order, each channel `width` little-endian values. RLE and ZIP data are stored
 * raw when compressing did not make them smaller (size == the raw size); else RLE runs (a signed
 * count: < 0 literal bytes, >= 0 a run of count + 1) or a zlib stream, then a byte predictor
 * (each byte the previous plus its value minus 128) and the two halves interleaved (first half:
 * the even bytes). ZIP needs zlib at run time (dlopen of libz.so.1, as the data-set reader).
 *
 * Tiled, deep and multi-part files, PIZ / PXR24 / B44 / B44A / DWAA / DWAB compression, subsampled
 * channels and luminance-chroma (RY / BY) images are NB_ERR_UNSUPPORTED naming the feature. */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "io/image_read.h"
#include "nabla/alloc.h"

/* ---- zlib ------------------------------------------------------------------------------------ */

static struct {
    int (*uncompress)(unsigned char *dst, unsigned long *dlen, const unsigned char *src, unsigned long slen);
    char why[200];
} zl;
static pthread_once_t zl_once = PTHREAD_ONCE_INIT;

static void zl_load(void) {
    void *h = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(zl.why, sizeof zl.why, "zlib (libz.so.1) is not installed (%.120s)", e ? e : "");
        return;
    }
    *(void **)&zl.uncompress = dlsym(h, "uncompress");
    if (!zl.uncompress) snprintf(zl.why, sizeof zl.why, "libz.so.1 lacks uncompress");
}

/* ---- the header ------------------------------------------------------------------------------ */

#define MAXCH 64

typedef struct exr_ch {
    char name[256];
    int type; /* 0 UINT, 1 HALF, 2 FLOAT */
    int xs, ys;
    int out;  /* output channel, -1: skipped */
} exr_ch;

typedef struct exr {
    const nb_img_src *s;
    exr_ch ch[MAXCH];
    int nch, comp, have_ch, have_comp, have_dw;
    int32_t x0, y0, x1, y1;
    size_t at; /* past the header */
} exr;

static const char *const comp_names[] = {"NONE", "RLE", "ZIPS", "ZIP", "PIZ", "PXR24", "B44", "B44A", "DWAA", "DWAB"};

static int32_t le32s(const unsigned char *p) { return (int32_t)nb_img_le32(p); }

/* A NUL-terminated string at *at of at most max bytes; NULL when it runs past the end. */
static const char *cstr(const nb_img_src *s, size_t *at, size_t max) {
    const unsigned char *p = s->p + *at, *z = memchr(p, 0, s->n - *at);
    if (!z || (size_t)(z - p) > max) return NULL;
    *at += (size_t)(z - p) + 1;
    return (const char *)p;
}

static nb_status parse_chlist(exr *e, const unsigned char *p, size_t n) {
    size_t i = 0;
    while (i < n && p[i]) {
        const unsigned char *z = memchr(p + i, 0, n - i);
        if (!z || (size_t)(z - p) + 1 + 16 > n) return nb_img_corrupt(e->s, "a channel list that runs past its size");
        if (e->nch == MAXCH) return nb_img_corrupt(e->s, "more than %d channels", MAXCH);
        exr_ch *c = &e->ch[e->nch++];
        size_t len = (size_t)(z - (p + i));
        if (len >= sizeof c->name) return nb_img_corrupt(e->s, "a channel name of %zu bytes", len);
        memcpy(c->name, p + i, len + 1);
        const unsigned char *d = z + 1;
        c->type = le32s(d), c->xs = le32s(d + 8), c->ys = le32s(d + 12), c->out = -1;
        if (c->type < 0 || c->type > 2) return nb_img_corrupt(e->s, "channel '%s' of pixel type %d", c->name, c->type);
        i = (size_t)(d + 16 - p);
    }
    e->have_ch = 1;
    return NB_OK;
}

static nb_status parse_header(exr *e) {
    const nb_img_src *s = e->s;
    if (s->n < 8) return nb_img_truncated(s, "shorter than its version word");
    uint32_t ver = nb_img_le32(s->p + 4);
    if ((ver & 0xff) != 2) return nb_img_corrupt(s, "version %u", ver & 0xff);
    if (ver & 0x1000) return nb_error(NB_ERR_UNSUPPORTED, "'%s' is a multi-part OpenEXR file, which nabla does not "
                                      "read (single-part scanline files are)", s->path);
    if (ver & 0x800) return nb_error(NB_ERR_UNSUPPORTED, "'%s' is an OpenEXR file of deep data, which nabla does not "
                                     "read (scanline files of flat images are)", s->path);
    if (ver & 0x200) return nb_error(NB_ERR_UNSUPPORTED, "'%s' is a tiled OpenEXR file, which nabla does not read "
                                     "(scanline files are)", s->path);
    size_t at = 8, maxname = (ver & 0x400) ? 255 : 31;
    for (;;) {
        if (at >= s->n) return nb_img_truncated(s, "header");
        if (s->p[at] == 0) {
            at++;
            break;
        }
        const char *name = cstr(s, &at, maxname), *type = name ? cstr(s, &at, maxname) : NULL;
        if (!type || s->n - at < 4) return nb_img_truncated(s, "header attribute");
        int32_t size = le32s(s->p + at);
        at += 4;
        if (size < 0 || (size_t)size > s->n - at) return nb_img_truncated(s, "header attribute value");
        const unsigned char *v = s->p + at;
        nb_status st = NB_OK;
        if (!strcmp(name, "channels")) {
            if (strcmp(type, "chlist")) return nb_img_corrupt(s, "'channels' of type '%s'", type);
            st = parse_chlist(e, v, (size_t)size);
        } else if (!strcmp(name, "compression")) {
            if (size != 1) return nb_img_corrupt(s, "'compression' of %d bytes", size);
            e->comp = v[0], e->have_comp = 1;
        } else if (!strcmp(name, "dataWindow")) {
            if (size != 16 || strcmp(type, "box2i")) return nb_img_corrupt(s, "'dataWindow' of type '%s'", type);
            e->x0 = le32s(v), e->y0 = le32s(v + 4), e->x1 = le32s(v + 8), e->y1 = le32s(v + 12), e->have_dw = 1;
        } else if (!strcmp(name, "tiles")) {
            return nb_error(NB_ERR_UNSUPPORTED, "'%s' is a tiled OpenEXR file, which nabla does not read (scanline "
                            "files are)", s->path);
        }
        if (st) return st;
        at += (size_t)size;
    }
    if (!e->have_ch || !e->have_comp || !e->have_dw)
        return nb_img_corrupt(s, "no %s attribute",
                              !e->have_ch ? "'channels'" : !e->have_comp ? "'compression'" : "'dataWindow'");
    e->at = at;
    return NB_OK;
}

/* ---- chunks ---------------------------------------------------------------------------------- */

/* RLE runs from src (n bytes) into exactly `want` bytes of dst; 0 when they do not fit. */
static int rle_decode(const unsigned char *src, size_t n, unsigned char *dst, size_t want) {
    size_t i = 0, o = 0;
    while (i < n) {
        int c = (signed char)src[i++];
        if (c < 0) {
            size_t k = (size_t)-c;
            if (k > n - i || k > want - o) return 0;
            memcpy(dst + o, src + i, k), i += k, o += k;
        } else {
            size_t k = (size_t)c + 1;
            if (i >= n || k > want - o) return 0;
            memset(dst + o, src[i++], k), o += k;
        }
    }
    return o == want;
}

/* The predictor and interleaving RLE and ZIP data go through: tmp (n bytes) -> out. */
static void unpredict(unsigned char *tmp, size_t n, unsigned char *out) {
    for (size_t i = 1; i < n; i++) tmp[i] = (unsigned char)(tmp[i - 1] + tmp[i] - 128);
    size_t half = (n + 1) / 2;
    for (size_t i = 0; i < n; i++) out[i] = i % 2 ? tmp[half + i / 2] : tmp[i / 2];
}

static float half_to_float(uint32_t h) {
    uint32_t sign = (h >> 15) & 1, ex = (h >> 10) & 31, m = h & 1023;
    float v;
    if (ex == 0) v = ldexpf((float)m, -24); /* zero / subnormal */
    else if (ex == 31) v = m ? NAN : INFINITY;
    else v = ldexpf((float)(m | 1024), (int)ex - 25);
    return sign ? -v : v;
}

nb_status nb_img_decode_exr(const nb_img_src *s, nb_img *im) {
    exr *e = nb_alloc(sizeof *e, 64);
    if (!e) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_image_read: no host memory for an OpenEXR header");
    memset(e, 0, sizeof *e);
    e->s = s;
    nb_status st = parse_header(e);
    unsigned char *raw = NULL, *tmp = NULL;
    size_t chunk_bytes = 0;
    if (st) goto done;
    if (e->comp > 3) {
        st = e->comp < 10 ? nb_error(NB_ERR_UNSUPPORTED, "'%s' is an OpenEXR file with %s compression, which nabla "
                                     "does not read (NONE, RLE, ZIPS and ZIP are)", s->path, comp_names[e->comp])
                          : nb_img_corrupt(s, "compression %d", e->comp);
        goto done;
    }
    /* channels: R G B [A] or Y [A] (exact names) */
    int ir = -1, ig = -1, ib = -1, ia = -1, iy = -1;
    for (int k = 0; k < e->nch; k++) {
        const char *n = e->ch[k].name;
        if (!strcmp(n, "RY") || !strcmp(n, "BY")) {
            st = nb_error(NB_ERR_UNSUPPORTED, "'%s' is a luminance-chroma (RY / BY) OpenEXR file, which nabla does not "
                          "read (RGB(A) and Y(A) files are)", s->path);
            goto done;
        }
        int *slot = !strcmp(n, "R") ? &ir : !strcmp(n, "G") ? &ig : !strcmp(n, "B") ? &ib : !strcmp(n, "A") ? &ia
                  : !strcmp(n, "Y") ? &iy : NULL;
        if (slot) *slot = k;
    }
    int c;
    if (ir >= 0 && ig >= 0 && ib >= 0) {
        c = ia >= 0 ? 4 : 3;
        e->ch[ir].out = 0, e->ch[ig].out = 1, e->ch[ib].out = 2;
        if (ia >= 0) e->ch[ia].out = 3;
    } else if (iy >= 0) {
        c = ia >= 0 ? 2 : 1;
        e->ch[iy].out = 0;
        if (ia >= 0) e->ch[ia].out = 1;
    } else {
        char names[200] = "";
        for (int k = 0; k < e->nch && strlen(names) < 150; k++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%.40s", k ? ", " : "", e->ch[k].name);
        st = nb_error(NB_ERR_UNSUPPORTED, "'%s' is an OpenEXR file with channels %s; nabla reads R, G, B (A) or Y (A)",
                      s->path, e->nch ? names : "(none)");
        goto done;
    }
    for (int k = 0; k < e->nch; k++)
        if (e->ch[k].xs != 1 || e->ch[k].ys != 1) {
            st = e->ch[k].xs < 1 || e->ch[k].ys < 1
                     ? nb_img_corrupt(s, "channel '%s' sampled %dx%d", e->ch[k].name, e->ch[k].xs, e->ch[k].ys)
                     : nb_error(NB_ERR_UNSUPPORTED, "'%s' is an OpenEXR file with subsampled channel '%s' (%dx%d), "
                                "which nabla does not read", s->path, e->ch[k].name, e->ch[k].xs, e->ch[k].ys);
            goto done;
        }
    long long w = (long long)e->x1 - e->x0 + 1, h = (long long)e->y1 - e->y0 + 1;
    if (w <= 0 || h <= 0) {
        st = nb_img_corrupt(s, "data window (%d, %d) - (%d, %d)", e->x0, e->y0, e->x1, e->y1);
        goto done;
    }
    int lines = e->comp == 3 ? 16 : 1;
    long long nchunks = (h + lines - 1) / lines;
    if (!nb_img_size_ok(w, h)) {
        st = nb_img_alloc(s, w, h, c, im); /* (the size error) */
        goto done;
    }
    if ((size_t)nchunks > (s->n - e->at) / 8) { /* (each chunk: an offset, and 8 bytes of its own header) */
        st = nb_img_truncated(s, "offset table");
        goto done;
    }
    size_t line_bytes = 0;
    for (int k = 0; k < e->nch; k++) line_bytes += (size_t)w * (e->ch[k].type == 1 ? 2 : 4);
    chunk_bytes = line_bytes * (size_t)lines;
    raw = nb_alloc(chunk_bytes, 64), tmp = nb_alloc(chunk_bytes, 64);
    if (!raw || !tmp) {
        st = nb_error(NB_ERR_OUT_OF_MEMORY, "nb_image_read: no host memory for an OpenEXR chunk");
        goto done;
    }
    if ((st = nb_img_alloc(s, w, h, c, im))) goto done;
    im->srgb = 0;
    unsigned char *seen = nb_alloc((size_t)nchunks, 64);
    if (!seen) {
        st = nb_error(NB_ERR_OUT_OF_MEMORY, "nb_image_read: no host memory");
        goto fail;
    }
    memset(seen, 0, (size_t)nchunks);
    for (long long k = 0; k < nchunks && !st; k++) {
        const unsigned char *ot = s->p + e->at + 8 * k;
        uint64_t off = (uint64_t)nb_img_le32(ot) | (uint64_t)nb_img_le32(ot + 4) << 32;
        if (off < e->at + 8 * (uint64_t)nchunks) {
            st = nb_img_corrupt(s, "chunk offset %llu", (unsigned long long)off);
            break;
        }
        if (off > s->n || s->n - off < 8) {
            st = nb_img_truncated(s, "a chunk past the end of the file");
            break;
        }
        const unsigned char *ck = s->p + off;
        long long y = (long long)le32s(ck) - e->y0;
        int32_t size = le32s(ck + 4);
        if (y < 0 || y >= h || y % lines) {
            st = nb_img_corrupt(s, "a chunk of line %d outside the data window", le32s(ck));
            break;
        }
        long long idx = y / lines;
        if (seen[idx]++) {
            st = nb_img_corrupt(s, "two chunks of line %d", le32s(ck));
            break;
        }
        int nl = (int)(h - y < lines ? h - y : lines);
        size_t want = line_bytes * (size_t)nl;
        if (size < 0 || (size_t)size > s->n - off - 8) {
            st = nb_img_truncated(s, "chunk data");
            break;
        }
        const unsigned char *d = ck + 8, *px = d;
        if ((size_t)size == want) {
            /* stored raw (NONE, or compressing did not help) */
        } else if (e->comp == 0 || (size_t)size > want) {
            st = nb_img_corrupt(s, "a chunk of %d bytes where %zu belong", size, want);
            break;
        } else if (e->comp == 1) {
            if (!rle_decode(d, (size_t)size, tmp, want)) {
                st = nb_img_corrupt(s, "run-length data that does not fill its chunk (line %d)", le32s(ck));
                break;
            }
            unpredict(tmp, want, raw), px = raw;
        } else {
            pthread_once(&zl_once, zl_load);
            if (zl.why[0]) {
                st = nb_error(NB_ERR_UNSUPPORTED, "cannot read '%s' (ZIP-compressed OpenEXR): %s", s->path, zl.why);
                break;
            }
            unsigned long got = (unsigned long)want;
            int zr = zl.uncompress(tmp, &got, d, (unsigned long)size);
            if (zr != 0 || got != want) {
                st = nb_img_corrupt(s, "zlib data that does not inflate to its chunk (line %d)", le32s(ck));
                break;
            }
            unpredict(tmp, want, raw), px = raw;
        }
        /* lines of channels of values -> pixels */
        for (int l = 0; l < nl; l++) {
            float *o = im->px + (size_t)(y + l) * (size_t)w * (size_t)c;
            for (int q = 0; q < e->nch; q++) {
                const exr_ch *ch = &e->ch[q];
                int bytes = ch->type == 1 ? 2 : 4;
                if (ch->out >= 0)
                    for (long long x = 0; x < w; x++) {
                        const unsigned char *v = px + (size_t)x * bytes;
                        float f;
                        uint32_t u = ch->type == 1 ? nb_img_le16(v) : nb_img_le32(v);
                        if (ch->type == 1) f = half_to_float(u);
                        else if (ch->type == 2) memcpy(&f, &u, 4);
                        else f = (float)u; /* (UINT: the number) */
                        o[(size_t)x * c + ch->out] = f;
                    }
                px += (size_t)w * bytes;
            }
        }
    }
    for (long long k = 0; k < nchunks && !st; k++)
        if (!seen[k]) st = nb_img_truncated(s, "a chunk missing");
    nb_free(seen, (size_t)nchunks);
fail:
    if (st) nb_free(im->px, nb_img_bytes(im)), im->px = NULL;
done:
    if (raw) nb_free(raw, chunk_bytes);
    if (tmp) nb_free(tmp, chunk_bytes);
    nb_free(e, sizeof *e);
    return st;
}

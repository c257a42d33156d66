/* nb_image_read's JPEG and OpenEXR decoders (src/io/jpeg.c, src/io/exr.c) on the fixtures in
 * tests/data/image (README.md there says how they were made):
 *   - JPEG: baseline 4:4:4 / 4:2:2 / 4:2:0 / 4:4:0 / 4:1:1, gray, RGB, progressive (spectral
 *     selection + successive approximation), restart intervals: every sample within 2 / 255 of
 *     libjpeg-turbo's djpeg (IDCT and upsampling rounding), mean error below 0.5 / 255; an EXIF
 *     APP1 segment changes nothing; arithmetic coding, 12-bit, lossless, hierarchical and CMYK
 *     are NB_ERR_UNSUPPORTED naming the feature; every truncation and corrupt data NB_ERR_IO.
 *   - OpenEXR: NONE / RLE / ZIPS / ZIP, HALF / FLOAT, RGBA / RGB / Y / YA, a data window not at
 *     the origin: every value exact; PIZ, PXR24, B44, DWAA, tiled, multi-part and deep files
 *     NB_ERR_UNSUPPORTED naming the feature; every truncation an error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nabla/image.h"
#include "nb_test.h"
#include "nb_test_files.h"

#define NB_REQUIRE(cond)      \
    do {                      \
        NB_EXPECT(cond);      \
        if (!(cond)) return;  \
    } while (0)

char nb_test_tmpdir[256];
#define tmpdir nb_test_tmpdir

/* tests/data/image beside this source file (CMake compiles it by its absolute path), else
 * relative to the working directory (a build tree one or two levels down). */
static const char *data(const char *name) {
    static char buf[4][1024];
    static int k;
    k = (k + 1) & 3;
    const char *f = __FILE__, *slash = strrchr(f, '/');
    snprintf(buf[k], sizeof buf[k], "%.*s%sdata/image/%s", slash ? (int)(slash - f) : 0, f, slash ? "/" : "", name);
    if (access(buf[k], R_OK) == 0) return buf[k];
    static const char *const rel[] = {"tests/data/image", "../tests/data/image", "../../tests/data/image"};
    for (int i = 0; i < 3; i++) {
        snprintf(buf[k], sizeof buf[k], "%s/%s", rel[i], name);
        if (access(buf[k], R_OK) == 0) return buf[k];
    }
    return buf[k];
}

static const char *put(const char *name, const void *d, size_t n) {
    const char *p = tmp(name);
    if (!write_file(p, d, n)) fprintf(stderr, "  cannot write %s\n", p);
    return p;
}

/* Reads path into a host copy: *px (malloc'ed) of w * h * c floats. */
static nb_status read_host(const char *path, nb_image_info *info, float **px) {
    nb_tensor *t = NULL;
    *px = NULL;
    nb_status s = nb_image_read(path, NULL, info, &t);
    if (s) return s;
    size_t n = (size_t)info->width * (size_t)info->height * (size_t)info->channels;
    *px = malloc(n * sizeof(float));
    s = nb_tensor_to_host(t, *px, n * sizeof(float));
    nb_tensor_free(t);
    return s;
}

static nb_status read_status(const char *path) {
    nb_tensor *t = NULL;
    nb_status s = nb_image_read(path, NULL, NULL, &t);
    NB_EXPECT(s ? t == NULL : t != NULL);
    nb_tensor_free(t);
    return s;
}

/* ---- JPEG ------------------------------------------------------------------------------------ */

/* name.jpg against djpeg's name.ref.ppm / .pgm: format, size, channels, every sample within 2. */
static void expect_jpeg(const char *name, const char *ref_ext, int channels) {
    char jn[64], rn[64];
    snprintf(jn, sizeof jn, "%s.jpg", name), snprintf(rn, sizeof rn, "%s.ref.%s", name, ref_ext);
    nb_image_info a, b;
    float *pa, *pb;
    NB_REQUIRE_OK(read_host(data(jn), &a, &pa));
    NB_REQUIRE_OK(read_host(data(rn), &b, &pb));
    NB_EXPECT(!strcmp(a.format, "JPEG") && a.srgb == 1 && a.channels == channels);
    NB_EXPECT(a.width == 37 && a.height == 29 && b.width == 37 && b.height == 29 && b.channels == channels);
    size_t n = (size_t)37 * 29 * (size_t)channels;
    double sum = 0, worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)pa[i] - pb[i]) * 255.0;
        sum += d, worst = d > worst ? d : worst;
    }
    if (worst > 2.0 + 1e-3 || sum / (double)n > 0.5) {
        fprintf(stderr, "  %s: max |diff| %.2f, mean %.3f (of 255) against djpeg\n", name, worst, sum / (double)n);
        NB_EXPECT(0);
    }
    free(pa), free(pb);
}

static void test_jpeg_vs_djpeg(void) {
    static const char *const color[] = {"s444", "s422", "s420", "s440", "s411", "rgb",
                                        "prog420", "prog444", "rst420", "rstprog"};
    for (size_t i = 0; i < sizeof color / sizeof color[0]; i++) expect_jpeg(color[i], "ppm", 3);
    expect_jpeg("gray", "pgm", 1);
    expect_jpeg("proggray", "pgm", 1);
}

/* The offset of the first marker FF m in d (0 when none). */
static size_t find_marker(const unsigned char *d, size_t n, unsigned char m) {
    for (size_t i = 2; i + 1 < n; i++)
        if (d[i] == 0xFF && d[i + 1] == m) return i;
    return 0;
}

static void test_jpeg_markers_and_unsupported(void) {
    size_t n;
    unsigned char *d = read_file(data("s420.jpg"), &n);
    NB_REQUIRE(d && n > 100);
    unsigned char *e = malloc(n + 64);
    /* an EXIF APP1 segment after SOI: skipped, the same pixels */
    static const unsigned char app1[] = {0xFF, 0xE1, 0, 22, 'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42,
                                         0, 0, 0, 8, 0, 0, 0xFF, 0xD8, 0xFF, 0xD9};
    memcpy(e, d, 2), memcpy(e + 2, app1, sizeof app1), memcpy(e + 2 + sizeof app1, d + 2, n - 2);
    nb_image_info ia, ib;
    float *pa, *pb;
    NB_REQUIRE_OK(read_host(data("s420.jpg"), &ia, &pa));
    NB_REQUIRE_OK(read_host(put("exif.jpg", e, n + sizeof app1), &ib, &pb));
    NB_EXPECT(ib.width == ia.width && ib.height == ia.height && !memcmp(pa, pb, (size_t)37 * 29 * 3 * sizeof(float)));
    free(pa), free(pb);
    NB_EXPECT_ERR(read_status(data("arith.jpg")), NB_ERR_UNSUPPORTED, "with arithmetic coding, which nabla does not read");
    size_t sof = find_marker(d, n, 0xC0);
    NB_REQUIRE(sof > 0);
    struct {
        size_t at;
        unsigned char v;
        nb_status code;
        const char *why;
    } patch[] = {
        {sof + 1, 0xC3, NB_ERR_UNSUPPORTED, "lossless coding (SOF3)"},
        {sof + 1, 0xC5, NB_ERR_UNSUPPORTED, "hierarchical (differential) coding"},
        {sof + 1, 0xC9, NB_ERR_UNSUPPORTED, "arithmetic coding"},
        {sof + 4, 12, NB_ERR_UNSUPPORTED, "12-bit samples"},
        {sof + 4, 7, NB_ERR_IO, "7-bit samples"},
        {sof + 9, 4, NB_ERR_UNSUPPORTED, "4 components (CMYK / YCCK)"},
        {sof + 9, 2, NB_ERR_IO, "2 components"},
        {sof + 5, 0, NB_ERR_UNSUPPORTED, "DNL"}, /* (height 0 and ...) */
        {sof + 11, 0x52, NB_ERR_IO, "sampling 5x2"},
    };
    for (size_t i = 0; i < sizeof patch / sizeof patch[0]; i++) {
        memcpy(e, d, n);
        e[patch[i].at] = patch[i].v;
        if (patch[i].v == 0 && patch[i].at == sof + 5) e[sof + 6] = 0; /* height 0 */
        nb_status s = read_status(put("patched.jpg", e, n));
        if (s != patch[i].code || !strstr(nb_last_error(), patch[i].why)) {
            fprintf(stderr, "  patch %zu: %s: %s (want \"%s\")\n", i, nb_status_name(s), nb_last_error(), patch[i].why);
            NB_EXPECT(0);
        }
    }
    /* a restart marker out of sequence */
    free(d);
    d = read_file(data("rst420.jpg"), &n);
    NB_REQUIRE(d);
    size_t r1 = find_marker(d, n, 0xD0); /* (one MCU row a restart interval: RST0 between the two rows) */
    NB_REQUIRE(r1 > 0);
    memcpy(e, d, n);
    e[r1 + 1] = 0xD3;
    NB_EXPECT_ERR(read_status(put("rst.jpg", e, n)), NB_ERR_IO, "marker D3 where restart marker RST0 belongs");
    free(d), free(e);
}

/* Every prefix of a file is an error (truncated: NB_ERR_IO), never a crash or a tensor. */
static void expect_truncations_fail(const char *fixture, const char *name) {
    size_t n;
    unsigned char *d = read_file(data(fixture), &n);
    NB_REQUIRE(d);
    int bad = 0;
    for (size_t k = 0; k < n; k++) {
        nb_status s = read_status(put(name, d, k));
        if (s != NB_ERR_IO && s != NB_ERR_UNSUPPORTED) bad++; /* (0 bytes: no signature) */
        if (s == NB_OK) fprintf(stderr, "  %s cut at %zu of %zu bytes was read\n", fixture, k, n);
    }
    NB_EXPECT(bad == 0);
    NB_EXPECT_ERR(read_status(put(name, d, n - 40)), NB_ERR_IO, "truncated");
    free(d);
}

static void test_jpeg_truncated_and_corrupt(void) {
    expect_truncations_fail("s420.jpg", "cut.jpg");
    expect_truncations_fail("prog420.jpg", "cut.jpg");
    expect_truncations_fail("rstprog.jpg", "cut.jpg");
    /* corrupt bytes anywhere: an error or an image, never a crash (deterministic LCG) */
    size_t n;
    unsigned char *d = read_file(data("prog444.jpg"), &n), *e = malloc(n);
    NB_REQUIRE(d && e);
    uint32_t r = 12345;
    int errors = 0;
    for (int it = 0; it < 400; it++) {
        memcpy(e, d, n);
        for (int k = 0; k < 3; k++) {
            r = r * 1664525u + 1013904223u;
            e[(r >> 8) % n] = (unsigned char)(r >> 24);
        }
        nb_status s = read_status(put("bad.jpg", e, n));
        NB_EXPECT(s == NB_OK || s == NB_ERR_IO || s == NB_ERR_UNSUPPORTED || s == NB_ERR_INVALID_ARG);
        errors += s != NB_OK;
    }
    NB_EXPECT(errors > 50); /* (most corruptions are caught, not decoded as noise) */
    /* a bad Huffman table: more codes of 1 bit than fit */
    size_t dht = find_marker(d, n, 0xC4);
    NB_REQUIRE(dht > 0);
    memcpy(e, d, n);
    e[dht + 5] = 3;
    NB_EXPECT_ERR(read_status(put("huff.jpg", e, n)), NB_ERR_IO, "not a valid JPEG file");
    free(d), free(e);
}

/* ---- OpenEXR --------------------------------------------------------------------------------- */

/* The fixtures' values (README.md): channel k of the file's list as written (R G B A / Y A). */
static float exr_val(int k, int x, int y, int float_file) {
    int xx = y % 2 == 0 ? 0 : x;
    float v = (float)((xx * 7 + y * 13 + k * 5) % 32) * 0.125f - 1.5f + (k == 3 ? 3.0f : 0.0f);
    if (float_file && k == 0) v += (float)x / 1024.0f;
    return v;
}

static void expect_exr(const char *name, int w, int h, int c, int float_file) {
    nb_image_info info;
    float *px;
    NB_REQUIRE_OK(read_host(data(name), &info, &px));
    NB_EXPECT(!strcmp(info.format, "EXR") && info.srgb == 0);
    NB_EXPECT(info.width == w && info.height == h && info.channels == c);
    int bad = 0;
    for (int y = 0; y < h && info.width == w && info.channels == c; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++) {
                float want = exr_val(k, x, y, float_file), got = px[((size_t)y * w + x) * c + k];
                if (got != want && !bad++) fprintf(stderr, "  %s (%d, %d, %d): %g, want %g\n", name, x, y, k, got, want);
            }
    NB_EXPECT(bad == 0);
    free(px);
}

static void test_exr_values(void) {
    expect_exr("none_half_rgba.exr", 5, 3, 4, 0);
    expect_exr("rle_half_rgb.exr", 19, 7, 3, 0);
    expect_exr("zips_float_rgb.exr", 11, 5, 3, 1);
    expect_exr("zip_half_rgba.exr", 23, 37, 4, 0); /* (data window (2, -3) - (24, 33)) */
    expect_exr("zip_float_y.exr", 17, 20, 1, 1);
    expect_exr("none_float_ya.exr", 4, 2, 2, 1);
}

/* The offset of the value of header attribute `name` in d. */
static size_t exr_attr(const unsigned char *d, size_t n, const char *name) {
    size_t ln = strlen(name);
    for (size_t i = 8; i + ln + 1 < n; i++)
        if (!memcmp(d + i, name, ln + 1)) {
            size_t t = i + ln + 1;
            while (t < n && d[t]) t++;
            return t + 1 + 4;
        }
    return 0;
}

static void test_exr_unsupported_and_broken(void) {
    NB_EXPECT_ERR(read_status(data("piz_half_rgb.exr")), NB_ERR_UNSUPPORTED, "with PIZ compression, which nabla does not read");
    NB_EXPECT_ERR(read_status(data("tiled_half_rgb.exr")), NB_ERR_UNSUPPORTED, "is a tiled OpenEXR file");
    size_t n;
    unsigned char *d = read_file(data("zip_half_rgba.exr"), &n), *e = malloc(n);
    NB_REQUIRE(d && e);
    size_t comp = exr_attr(d, n, "compression");
    NB_REQUIRE(comp > 0 && d[comp] == 3);
    static const struct {
        int v;
        const char *name;
    } other[] = {{5, "PXR24"}, {6, "B44"}, {7, "B44A"}, {8, "DWAA"}, {9, "DWAB"}};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        memcpy(e, d, n);
        e[comp] = (unsigned char)other[i].v;
        nb_status s = read_status(put("c.exr", e, n));
        NB_EXPECT(s == NB_ERR_UNSUPPORTED && strstr(nb_last_error(), other[i].name));
    }
    memcpy(e, d, n);
    e[comp] = 42;
    NB_EXPECT_ERR(read_status(put("c.exr", e, n)), NB_ERR_IO, "compression 42");
    memcpy(e, d, n);
    e[5] |= 0x10; /* version flags: multi-part */
    NB_EXPECT_ERR(read_status(put("mp.exr", e, n)), NB_ERR_UNSUPPORTED, "multi-part");
    memcpy(e, d, n);
    e[5] |= 0x08; /* deep data */
    NB_EXPECT_ERR(read_status(put("deep.exr", e, n)), NB_ERR_UNSUPPORTED, "deep data");
    /* a channel renamed RY: luminance-chroma; a channel sampled 2x2 */
    size_t ch = exr_attr(d, n, "channels");
    NB_REQUIRE(ch > 0 && d[ch] == 'A');
    memcpy(e, d, n);
    e[ch + 2 + 8] = 2, e[ch + 2 + 12] = 2; /* A's xSampling, ySampling */
    NB_EXPECT_ERR(read_status(put("sub.exr", e, n)), NB_ERR_UNSUPPORTED, "subsampled channel 'A' (2x2)");
    memcpy(e, d, n);
    e[ch] = 'Z';
    e[ch + 18 * 3] = 'Q'; /* R -> Q: no colour channels left */
    NB_EXPECT_ERR(read_status(put("noch.exr", e, n)), NB_ERR_UNSUPPORTED, "channels Z, B, G, Q");
    /* zlib data damaged */
    memcpy(e, d, n);
    for (size_t i = n - 60; i < n - 20; i++) e[i] ^= 0x5a;
    NB_EXPECT_ERR(read_status(put("z.exr", e, n)), NB_ERR_IO, "does not inflate");
    free(d), free(e);
    expect_truncations_fail("zip_half_rgba.exr", "cut.exr");
    expect_truncations_fail("rle_half_rgb.exr", "cut.exr");
}

int main(int argc, char **argv) {
    snprintf(tmpdir, sizeof tmpdir, "%s/nb_test_codecs.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) return 1;
    nb_test_fn fns[] = {test_jpeg_vs_djpeg, test_jpeg_markers_and_unsupported, test_jpeg_truncated_and_corrupt,
                        test_exr_values, test_exr_unsupported_and_broken};
    int rc = nb_test_run_(argc, argv,
                          "test_jpeg_vs_djpeg, test_jpeg_markers_and_unsupported, test_jpeg_truncated_and_corrupt, "
                          "test_exr_values, test_exr_unsupported_and_broken",
                          fns, (int)(sizeof fns / sizeof fns[0]));
    nb_test_tmpdir_remove();
    return rc;
}

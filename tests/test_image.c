/* Images (image.h): PNG round trips and channel conversions, broken and unsupported files (made
 * here: missing, empty, not a PNG, truncated, corrupted, 16-bit, too large), the procedural
 * image, random samples (CPU reference, CUDA agreement), pixel coordinates and PSNR. nb_image_read:
 * BMP, TGA, Radiance HDR, PFM, PPM / PGM and PNG files made here byte by byte with known pixels,
 * read back with their channels, orientation and value scaling; broken files (truncated, lying
 * headers, bad indices, oversized, a FIFO) and formats nabla does not read (GIF, PBM, RLE BMP,
 * XYZE HDR, no signature; JPEG and OpenEXR: test_image_codecs.c) fail with the right status and a message naming the cause. */
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "nabla/image.h"
#include "nb_test.h"
#include "nb_test_fifo.h"
#include "nb_test_files.h"

char nb_test_tmpdir[256];
#define tmpdir nb_test_tmpdir

/* ---- a minimal PNG writer (stored deflate blocks) for files libpng's writer will not make ---- */

static uint32_t crc32_of(const unsigned char *p, size_t n, uint32_t c) {
    c = ~c;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return ~c;
}

static void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

static size_t chunk(unsigned char *out, const char *type, const unsigned char *data, uint32_t n) {
    put32(out, n);
    memcpy(out + 4, type, 4);
    if (n) memcpy(out + 8, data, n);
    put32(out + 8 + n, crc32_of(out + 4, n + 4, 0));
    return 12 + n;
}

/* w x h image, bit depth, colour type, raw (filter-0-prefixed) scanlines of `raw_n` bytes (< 65536). */
static int write_raw_png(const char *path, uint32_t w, uint32_t h, int depth, int ctype,
                         const unsigned char *raw, uint32_t raw_n) {
    static unsigned char buf[1 << 17];
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    size_t n = 0;
    memcpy(buf, sig, 8);
    n = 8;
    unsigned char ihdr[13];
    put32(ihdr, w), put32(ihdr + 4, h);
    ihdr[8] = (unsigned char)depth, ihdr[9] = (unsigned char)ctype, ihdr[10] = ihdr[11] = ihdr[12] = 0;
    n += chunk(buf + n, "IHDR", ihdr, 13);
    unsigned char *z = malloc(raw_n + 16);
    size_t zn = 0;
    z[zn++] = 0x78, z[zn++] = 0x01;                     /* zlib header, no compression */
    z[zn++] = 1;                                        /* final stored block */
    z[zn++] = (unsigned char)raw_n, z[zn++] = (unsigned char)(raw_n >> 8);
    z[zn++] = (unsigned char)~raw_n, z[zn++] = (unsigned char)(~raw_n >> 8);
    memcpy(z + zn, raw, raw_n);
    zn += raw_n;
    uint32_t a = 1, b = 0;
    for (uint32_t i = 0; i < raw_n; i++) a = (a + raw[i]) % 65521u, b = (b + a) % 65521u;
    put32(z + zn, (b << 16) | a);
    zn += 4;
    n += chunk(buf + n, "IDAT", z, (uint32_t)zn);
    free(z);
    n += chunk(buf + n, "IEND", NULL, 0);
    return write_file(path, buf, n);
}

/* ---- tests ------------------------------------------------------------------------------------ */

static int have_png(void) {
    nb_device *cpu;
    if (nb_device_open("cpu", &cpu) != NB_OK) return 0;
    nb_tensor *t = NULL;
    int64_t shape[3] = {1, 1, 3};
    nb_tensor_zeros(cpu, NB_F32, 3, shape, &t);
    nb_status s = nb_image_write_png(tmp("probe.png"), t);
    nb_tensor_free(t);
    nb_device_close(cpu);
    return s == NB_OK;
}

static void test_procedural(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_tensor *a, *b;
    NB_REQUIRE_OK(nb_image_procedural(cpu, 64, 48, &a));
    NB_REQUIRE_OK(nb_image_procedural(cpu, 64, 48, &b));
    NB_EXPECT(nb_tensor_ndim(a) == 3 && nb_tensor_shape(a)[0] == 48 && nb_tensor_shape(a)[1] == 64 &&
              nb_tensor_shape(a)[2] == 3);
    const float *pa = nb_tensor_data(a), *pb = nb_tensor_data(b);
    NB_EXPECT(memcmp(pa, pb, nb_tensor_nbytes(a)) == 0);
    double mn = 1, mx = 0, mean = 0;
    for (int64_t i = 0; i < nb_tensor_numel(a); i++) {
        mn = fmin(mn, pa[i]), mx = fmax(mx, pa[i]);
        mean += pa[i];
    }
    mean /= (double)nb_tensor_numel(a);
    NB_EXPECT(mn >= 0 && mx <= 1 && mx - mn > 0.8 && mean > 0.2 && mean < 0.8);
    nb_tensor *c = NULL;
    NB_EXPECT_ERR(nb_image_procedural(cpu, 1, 48, &c), NB_ERR_INVALID_ARG, "unsupported size 1x48");
    NB_EXPECT_ERR(nb_image_procedural(cpu, 100000, 4, &c), NB_ERR_INVALID_ARG, "unsupported size");
    NB_EXPECT(c == NULL);
    nb_tensor_free(a), nb_tensor_free(b);
    nb_device_close(cpu);
}

/* Without libpng the PNG calls must fail cleanly, naming the library. */
static int check_no_png(void) {
    if (have_png()) return 0;
    nb_tensor *t = NULL;
    NB_EXPECT_ERR(nb_image_read_png(tmp("raw8.png"), 3, NULL, &t), NB_ERR_UNSUPPORTED, "libpng16.so.16");
    fprintf(stderr, "  libpng16.so.16 is not available: checked only the error\n");
    return 1;
}

static void test_png_roundtrip(void) {
    unsigned char raw8[1 + 6] = {0, 255, 0, 0, 0, 0, 255};
    if (!write_raw_png(tmp("raw8.png"), 2, 1, 8, 2, raw8, sizeof raw8)) NB_SKIP("cannot write a temporary file");
    if (check_no_png()) return;
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_tensor *img, *back;
    NB_REQUIRE_OK(nb_image_procedural(cpu, 37, 21, &img));
    NB_REQUIRE_OK(nb_image_write_png(tmp("rt.png"), img));
    NB_REQUIRE_OK(nb_image_read_png(tmp("rt.png"), 0, cpu, &back));
    NB_EXPECT(nb_tensor_shape(back)[0] == 21 && nb_tensor_shape(back)[1] == 37 && nb_tensor_shape(back)[2] == 3);
    const float *a = nb_tensor_data(img), *b = nb_tensor_data(back);
    double worst = 0;
    for (int64_t i = 0; i < nb_tensor_numel(img); i++) worst = fmax(worst, fabs(a[i] - b[i]));
    NB_EXPECT(worst <= 0.5 / 255 + 1e-6);
    double psnr;
    NB_REQUIRE_OK(nb_image_psnr(back, img, &psnr));
    NB_EXPECT(psnr > 50);
    /* channel conversions: 4 adds opaque alpha, 1 is luma */
    nb_tensor *rgba, *gray;
    NB_REQUIRE_OK(nb_image_read_png(tmp("rt.png"), 4, NULL, &rgba));
    NB_REQUIRE_OK(nb_image_read_png(tmp("rt.png"), 1, NULL, &gray));
    const float *r4 = nb_tensor_data(rgba), *g1 = nb_tensor_data(gray);
    NB_EXPECT(nb_tensor_shape(rgba)[2] == 4 && nb_tensor_shape(gray)[2] == 1);
    NB_EXPECT(r4[3] == 1.0f && r4[4] == b[3]);
    NB_EXPECT_NEAR(g1[0], 0.2126 * b[0] + 0.7152 * b[1] + 0.0722 * b[2], 1e-5);
    /* gray and RGBA files come back with their own channel counts */
    NB_REQUIRE_OK(nb_image_write_png(tmp("gray.png"), gray));
    NB_REQUIRE_OK(nb_image_write_png(tmp("rgba.png"), rgba));
    nb_tensor *g2, *r2;
    NB_REQUIRE_OK(nb_image_read_png(tmp("gray.png"), 0, cpu, &g2));
    NB_REQUIRE_OK(nb_image_read_png(tmp("rgba.png"), 0, cpu, &r2));
    NB_EXPECT(nb_tensor_shape(g2)[2] == 1 && nb_tensor_shape(r2)[2] == 4);
    nb_tensor *ts[] = {img, back, rgba, gray, g2, r2};
    for (int i = 0; i < 6; i++) nb_tensor_free(ts[i]);
    nb_device_close(cpu);
}

static nb_status read_png(const char *p) {
    nb_tensor *t = NULL;
    nb_status s = nb_image_read_png(p, 3, NULL, &t);
    nb_tensor_free(t);
    return s;
}

/* A FIFO in place of the PNG is refused at once (checked before libpng is needed); the reader
 * runs in a child with an alarm, so a regression fails instead of hanging. Writing replaces the
 * file atomically: no temporary is left, and a missing directory is named. */
static void test_png_fifo_and_atomic_write(void) {
    NB_EXPECT(nb_test_fifo_refused(tmp("fifo.png"), read_png));
    if (!have_png()) return;
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_tensor *img;
    NB_REQUIRE_OK(nb_image_procedural(cpu, 16, 16, &img));
    NB_EXPECT_ERR(nb_image_write_png(tmp("no/such/dir.png"), img), NB_ERR_IO, "does not exist");
    NB_EXPECT_OK(nb_image_write_png(tmp("atomic.png"), img));
    NB_EXPECT_OK(nb_image_write_png(tmp("atomic.png"), img));
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q 'tmp'", tmpdir);
    NB_EXPECT(system(cmd) != 0);
    nb_tensor *back = NULL;
    NB_EXPECT_OK(nb_image_read_png(tmp("atomic.png"), 3, cpu, &back));
    nb_tensor_free(back);
    nb_tensor_free(img);
    nb_device_close(cpu);
}

static void test_png_broken(void) {
    if (check_no_png()) return;
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_tensor *t = NULL;
    NB_EXPECT_ERR(nb_image_read_png(tmp("missing.png"), 3, cpu, &t), NB_ERR_IO, "No such file");
    write_file(tmp("empty.png"), "", 0);
    NB_EXPECT_ERR(nb_image_read_png(tmp("empty.png"), 3, cpu, &t), NB_ERR_IO, "not a PNG file (shorter than");
    write_file(tmp("text.png"), "hello, this is not an image\n", 28);
    NB_EXPECT_ERR(nb_image_read_png(tmp("text.png"), 3, cpu, &t), NB_ERR_IO, "no PNG signature");
    /* a valid file cut in half, and one with a damaged IDAT */
    nb_tensor *img;
    NB_REQUIRE_OK(nb_image_procedural(cpu, 64, 64, &img));
    NB_REQUIRE_OK(nb_image_write_png(tmp("good.png"), img));
    size_t n;
    unsigned char *d = read_file(tmp("good.png"), &n);
    NB_REQUIRE_OK(d ? NB_OK : NB_ERR_IO);
    write_file(tmp("half.png"), d, n / 2);
    NB_EXPECT_ERR(nb_image_read_png(tmp("half.png"), 3, cpu, &t), NB_ERR_IO, "half.png");
    write_file(tmp("hdr.png"), d, 20);
    NB_EXPECT_ERR(nb_image_read_png(tmp("hdr.png"), 3, cpu, &t), NB_ERR_IO, "hdr.png");
    for (size_t i = n / 3; i < n / 3 + 40 && i < n; i++) d[i] ^= 0x5a;
    write_file(tmp("bad.png"), d, n);
    NB_EXPECT_ERR(nb_image_read_png(tmp("bad.png"), 3, cpu, &t), NB_ERR_IO, "libpng");
    free(d);
    NB_EXPECT(t == NULL);
    /* hand-made files: a valid 2x1 8-bit RGB one (checks the writer above), a 16-bit one, an
     * absurdly large one */
    unsigned char raw8[1 + 6] = {0, 255, 0, 0, 0, 0, 255};
    NB_REQUIRE_OK(write_raw_png(tmp("raw8.png"), 2, 1, 8, 2, raw8, sizeof raw8) ? NB_OK : NB_ERR_IO);
    NB_EXPECT_OK(nb_image_read_png(tmp("raw8.png"), 3, cpu, &t));
    if (t) {
        const float *p = nb_tensor_data(t);
        NB_EXPECT(p[0] == 1.0f && p[1] == 0.0f && p[5] == 1.0f);
        nb_tensor_free(t);
        t = NULL;
    }
    unsigned char raw16[1 + 12] = {0};
    write_raw_png(tmp("raw16.png"), 2, 1, 16, 2, raw16, sizeof raw16);
    NB_EXPECT_ERR(nb_image_read_png(tmp("raw16.png"), 3, cpu, &t), NB_ERR_UNSUPPORTED, "16-bit");
    unsigned char rawbig[1 + 3] = {0};
    write_raw_png(tmp("big.png"), 100000, 1, 8, 2, rawbig, sizeof rawbig);
    NB_EXPECT_ERR(nb_image_read_png(tmp("big.png"), 3, cpu, &t), NB_ERR_INVALID_ARG, "unsupported size");
    write_raw_png(tmp("huge.png"), 16000, 16000, 8, 2, rawbig, sizeof rawbig);
    NB_EXPECT_ERR(nb_image_read_png(tmp("huge.png"), 3, cpu, &t), NB_ERR_INVALID_ARG, "unsupported size");
    NB_EXPECT_ERR(nb_image_read_png(tmp("good.png"), 2, cpu, &t), NB_ERR_INVALID_ARG, "channels = 2");
    NB_EXPECT(t == NULL);
    /* writing: bad shapes and an unwritable path */
    int64_t s2[3] = {4, 4, 2};
    nb_tensor *two;
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F32, 3, s2, &two));
    NB_EXPECT_ERR(nb_image_write_png(tmp("two.png"), two), NB_ERR_SHAPE, "2 channels");
    NB_EXPECT_ERR(nb_image_write_png("/nonexistent-dir/x.png", img), NB_ERR_IO, "/nonexistent-dir/x.png");
    nb_tensor_free(two), nb_tensor_free(img);
    nb_device_close(cpu);
}

/* Samples against a direct bilinear evaluation; pixel centres return the pixel. */
static void test_sample_cpu(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_tensor *img, *x, *t, *x2, *t2;
    NB_REQUIRE_OK(nb_image_procedural(cpu, 40, 30, &img));
    int64_t sx[2] = {5000, 2}, st[2] = {5000, 3};
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F32, 2, sx, &x));
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F32, 2, st, &t));
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F32, 2, sx, &x2));
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F32, 2, st, &t2));
    NB_REQUIRE_OK(nb_image_sample(img, 42, 7, x, t));
    NB_REQUIRE_OK(nb_image_sample(img, 42, 7, x2, t2));
    NB_EXPECT(memcmp(nb_tensor_data(x), nb_tensor_data(x2), nb_tensor_nbytes(x)) == 0);
    NB_REQUIRE_OK(nb_image_sample(img, 42, 8, x2, t2));
    NB_EXPECT(memcmp(nb_tensor_data(x), nb_tensor_data(x2), nb_tensor_nbytes(x)) != 0);
    const float *px = nb_tensor_data(x), *pt = nb_tensor_data(t), *im = nb_tensor_data(img);
    double mean = 0;
    int ok = 1;
    for (int i = 0; i < 5000; i++) {
        double u = px[2 * i], v = px[2 * i + 1];
        ok &= u >= 0 && u < 1 && v >= 0 && v < 1;
        mean += u + v;
        double fx = fmin(fmax(u * 40 - 0.5, 0), 39), fy = fmin(fmax(v * 30 - 0.5, 0), 29);
        int x0 = (int)fmin(floor(fx), 38), y0 = (int)fmin(floor(fy), 28);
        double ax = fx - x0, ay = fy - y0;
        for (int c = 0; c < 3; c++) {
            double p00 = im[(y0 * 40 + x0) * 3 + c], p01 = im[(y0 * 40 + x0 + 1) * 3 + c];
            double p10 = im[((y0 + 1) * 40 + x0) * 3 + c], p11 = im[((y0 + 1) * 40 + x0 + 1) * 3 + c];
            double ref = (1 - ay) * ((1 - ax) * p00 + ax * p01) + ay * ((1 - ax) * p10 + ax * p11);
            ok &= fabs(ref - pt[i * 3 + c]) < 1e-5;
        }
    }
    NB_EXPECT(ok);
    NB_EXPECT(fabs(mean / 10000 - 0.5) < 0.02);
    /* pixel coordinates hit the pixel centres exactly */
    nb_tensor *co;
    NB_REQUIRE_OK(nb_image_pixel_coords(cpu, 40, 30, &co));
    const float *pc = nb_tensor_data(co);
    NB_EXPECT(nb_tensor_shape(co)[0] == 1200);
    NB_EXPECT(pc[0] == 0.5f / 40 && pc[1] == 0.5f / 30 && pc[2 * 41] == 1.5f / 40 && pc[2 * 41 + 1] == 1.5f / 30);
    /* bad arguments */
    int64_t s1[3] = {1, 5, 3}, sb[2] = {5000, 4};
    nb_tensor *thin, *tb;
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F32, 3, s1, &thin));
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F32, 2, sb, &tb));
    NB_EXPECT_ERR(nb_image_sample(thin, 1, 1, x, t), NB_ERR_SHAPE, "image of 5x1 pixels");
    NB_EXPECT_ERR(nb_image_sample(img, 1, 1, x, tb), NB_ERR_SHAPE, "target has shape [5000,4], expected [5000,3]");
    NB_EXPECT_ERR(nb_image_sample(img, 1, 1, t, t), NB_ERR_SHAPE, "x has shape [5000,3]");
    nb_tensor *ts[] = {img, x, t, x2, t2, co, thin, tb};
    for (int i = 0; i < 8; i++) nb_tensor_free(ts[i]);
    nb_device_close(cpu);
}

/* Stratified: with B = 4^k every stratum holds exactly one sample, in Morton order. */
static void test_sample_stratified(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_tensor *img, *x, *t;
    NB_REQUIRE_OK(nb_image_procedural(cpu, 16, 16, &img));
    int64_t sx[2] = {1024, 2}, st[2] = {1024, 3};
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F32, 2, sx, &x));
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F32, 2, st, &t));
    NB_REQUIRE_OK(nb_image_sample_stratified(img, 3, 1, x, t));
    const float *p = nb_tensor_data(x);
    static int seen[32][32];
    memset(seen, 0, sizeof seen);
    int ok = 1;
    for (int i = 0; i < 1024; i++) {
        int cx = (int)(p[2 * i] * 32), cy = (int)(p[2 * i + 1] * 32);
        ok &= cx >= 0 && cx < 32 && cy >= 0 && cy < 32;
        if (ok) seen[cy][cx]++;
    }
    for (int i = 0; i < 32 * 32 && ok; i++) ok &= seen[i / 32][i % 32] == 1;
    NB_EXPECT(ok);
    /* Morton order: samples 0..3 in strata (0,0), (1,0), (0,1), (1,1) */
    NB_EXPECT((int)(p[0] * 32) == 0 && (int)(p[1] * 32) == 0 && (int)(p[2] * 32) == 1 && (int)(p[3] * 32) == 0);
    NB_EXPECT((int)(p[4] * 32) == 0 && (int)(p[5] * 32) == 1 && (int)(p[6] * 32) == 1 && (int)(p[7] * 32) == 1);
    nb_tensor_free(img), nb_tensor_free(x), nb_tensor_free(t);
    nb_device_close(cpu);
}

static void test_sample_cuda(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *cpu, *gpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    NB_REQUIRE_OK(nb_device_open("cuda", &gpu));
    nb_tensor *ic, *ig, *xc, *tc, *xg, *tg;
    NB_REQUIRE_OK(nb_image_procedural(cpu, 123, 77, &ic));
    NB_REQUIRE_OK(nb_image_procedural(gpu, 123, 77, &ig));
    int64_t sx[2] = {100000, 2}, st[2] = {100000, 3};
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F32, 2, sx, &xc));
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F32, 2, st, &tc));
    NB_REQUIRE_OK(nb_tensor_zeros(gpu, NB_F32, 2, sx, &xg));
    NB_REQUIRE_OK(nb_tensor_zeros(gpu, NB_F32, 2, st, &tg));
    NB_REQUIRE_OK(nb_image_sample(ic, 5, 99, xc, tc));
    NB_REQUIRE_OK(nb_image_sample(ig, 5, 99, xg, tg));
    float *a = malloc(nb_tensor_nbytes(tc)), *b = malloc(nb_tensor_nbytes(tc));
    NB_REQUIRE_OK(nb_tensor_to_host(xg, a, nb_tensor_nbytes(xg)));
    NB_EXPECT(memcmp(a, nb_tensor_data(xc), nb_tensor_nbytes(xc)) == 0); /* same positions */
    NB_REQUIRE_OK(nb_tensor_to_host(tg, b, nb_tensor_nbytes(tg)));
    const float *r = nb_tensor_data(tc);
    double worst = 0;
    for (int64_t i = 0; i < nb_tensor_numel(tc); i++) worst = fmax(worst, fabs(b[i] - r[i]));
    NB_EXPECT(worst < 1e-5);
    NB_REQUIRE_OK(nb_image_sample_stratified(ic, 5, 98, xc, tc));
    NB_REQUIRE_OK(nb_image_sample_stratified(ig, 5, 98, xg, tg));
    NB_REQUIRE_OK(nb_tensor_to_host(xg, a, nb_tensor_nbytes(xg)));
    NB_EXPECT(memcmp(a, nb_tensor_data(xc), nb_tensor_nbytes(xc)) == 0);
    free(a), free(b);
    nb_tensor *ts[] = {ic, ig, xc, tc, xg, tg};
    for (int i = 0; i < 6; i++) nb_tensor_free(ts[i]);
    nb_device_close(gpu), nb_device_close(cpu);
}

static void test_psnr(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    float a[4] = {0.5f, 0.5f, 0.5f, 0.5f}, b[4] = {0.6f, 0.4f, 0.5f, 0.5f}, c[4] = {1.7f, 0.5f, 0.5f, 0.5f};
    int64_t n = 4;
    nb_tensor *ta, *tb, *tc;
    NB_REQUIRE_OK(nb_tensor_from_host(cpu, NB_F32, 1, &n, a, &ta));
    NB_REQUIRE_OK(nb_tensor_from_host(cpu, NB_F32, 1, &n, b, &tb));
    NB_REQUIRE_OK(nb_tensor_from_host(cpu, NB_F32, 1, &n, c, &tc));
    double p;
    NB_REQUIRE_OK(nb_image_psnr(ta, ta, &p));
    NB_EXPECT(isinf(p));
    NB_REQUIRE_OK(nb_image_psnr(tb, ta, &p));
    NB_EXPECT_NEAR(p, 10 * log10(1 / (0.02 / 4)), 1e-4);
    NB_REQUIRE_OK(nb_image_psnr(tc, ta, &p)); /* 1.7 clamps to 1 */
    NB_EXPECT_NEAR(p, 10 * log10(1 / (0.25 / 4)), 1e-4);
    int64_t m = 3;
    nb_tensor *td;
    NB_REQUIRE_OK(nb_tensor_zeros(cpu, NB_F32, 1, &m, &td));
    NB_EXPECT_ERR(nb_image_psnr(td, ta, &p), NB_ERR_SHAPE, "pred has 3 elements, ref 4");
    nb_tensor_free(ta), nb_tensor_free(tb), nb_tensor_free(tc), nb_tensor_free(td);
    nb_device_close(cpu);
}

/* ---- nb_image_read: BMP, TGA, Radiance HDR, PFM, PPM / PGM, PNG; formats it does not read ---- */

/* A file in the temporary directory holding n bytes of data. */
static const char *put(const char *name, const void *data, size_t n) {
    const char *p = tmp(name);
    if (!write_file(p, data, n)) fprintf(stderr, "  cannot write %s\n", p);
    return p;
}

/* A file holding the string s. */
static const char *put_str(const char *name, const char *s) { return put(name, s, strlen(s)); }

/* head (a text header) then nd bytes of data into f; returns the length. */
static size_t headed(unsigned char *f, const char *head, const void *data, size_t nd) {
    size_t n = strlen(head);
    memcpy(f, head, n);
    if (nd) memcpy(f + n, data, nd);
    return n + nd;
}

/* Files given as text that must fail with code and a message holding why. */
typedef struct bad_file {
    const char *name, *text;
    nb_status code;
    const char *why;
} bad_file;

static nb_status read_status(const char *path);

static void expect_bad(const bad_file *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        nb_status s = read_status(put_str(b[i].name, b[i].text));
        if (s != b[i].code || !strstr(nb_last_error(), b[i].why)) {
            fprintf(stderr, "  %s: %s: %s, want %s with \"%s\"\n", b[i].name, nb_status_name(s), nb_last_error(),
                    nb_status_name(b[i].code), b[i].why);
            NB_EXPECT(s == b[i].code && strstr(nb_last_error(), b[i].why));
        }
    }
}

static void le16(unsigned char *p, unsigned v) { p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8); }
static void le32(unsigned char *p, uint32_t v) { le16(p, v & 0xffff), le16(p + 2, v >> 16); }

/* Reads path on the CPU; checks the format, size, channels, srgb flag and every value (within
 * 1e-6) against want (rows top to bottom). */
static void expect_image(const char *path, const char *format, int w, int h, int c, int srgb, const float *want) {
    nb_tensor *t = NULL;
    nb_image_info info;
    memset(&info, 0, sizeof info);
    nb_status s = nb_image_read(path, NULL, &info, &t);
    NB_EXPECT_OK(s);
    if (s) return;
    NB_EXPECT(info.format && !strcmp(info.format, format));
    NB_EXPECT(info.width == w && info.height == h && info.channels == c && info.srgb == srgb);
    const int64_t *sh = nb_tensor_shape(t);
    NB_EXPECT(nb_tensor_ndim(t) == 3 && sh[0] == h && sh[1] == w && sh[2] == c);
    float got[256];
    size_t n = (size_t)w * (size_t)h * (size_t)c;
    if (n <= 256 && sh[0] == h && sh[1] == w && sh[2] == c) {
        NB_EXPECT_OK(nb_tensor_to_host(t, got, n * sizeof(float)));
        for (size_t i = 0; i < n; i++)
            if (fabsf(got[i] - want[i]) > 1e-6f) {
                fprintf(stderr, "  %s: value %zu is %g, want %g\n", path, i, got[i], want[i]);
                NB_EXPECT(fabsf(got[i] - want[i]) <= 1e-6f);
                break;
            }
    }
    nb_tensor_free(t);
}

static nb_status read_status(const char *path) {
    nb_tensor *t = NULL;
    nb_status s = nb_image_read(path, NULL, NULL, &t);
    nb_tensor_free(t);
    return s;
}

/* ---- BMP ----------------------------------------------------------------------------------------- */

/* A BMP with a 40-byte info header: extra = bytes between the header and the pixels (palette /
 * masks), rows = the pixel rows as stored. */
static size_t bmp(unsigned char *o, int w, int h, int bpp, uint32_t comp, uint32_t nclr, const void *extra,
                  size_t nextra, const void *rows, size_t nrows) {
    memset(o, 0, 54);
    o[0] = 'B', o[1] = 'M';
    le32(o + 2, (uint32_t)(54 + nextra + nrows));
    le32(o + 10, (uint32_t)(54 + nextra));
    le32(o + 14, 40);
    le32(o + 18, (uint32_t)w), le32(o + 22, (uint32_t)h);
    le16(o + 26, 1), le16(o + 28, (unsigned)bpp);
    le32(o + 30, comp), le32(o + 46, nclr);
    if (nextra) memcpy(o + 54, extra, nextra); /* (memcpy of NULL is undefined even for 0 bytes) */
    if (nrows) memcpy(o + 54 + nextra, rows, nrows);
    return 54 + nextra + nrows;
}

static void test_bmp(void) {
    unsigned char f[512];
    /* 24-bit, bottom-up, 3x2: rows padded to 12 bytes; BGR */
    const unsigned char r24[24] = {10, 20, 30, 40, 50, 60, 70, 80, 90, 0, 0, 0, /* bottom row */
                                   255, 0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0};
    size_t n = bmp(f, 3, 2, 24, 0, 0, NULL, 0, r24, sizeof r24);
    const float w24[18] = {0, 0, 1, 0, 1, 0, 1, 0, 0, 30 / 255.f, 20 / 255.f, 10 / 255.f,
                           60 / 255.f, 50 / 255.f, 40 / 255.f, 90 / 255.f, 80 / 255.f, 70 / 255.f};
    expect_image(put("a.bmp", f, n), "BMP", 3, 2, 3, 1, w24);
    /* 32-bit BI_RGB, top-down (negative height), alpha bytes used */
    const unsigned char r32[16] = {0, 0, 255, 128, 0, 255, 0, 255, 255, 0, 0, 0, 51, 102, 153, 204};
    n = bmp(f, 2, -2, 32, 0, 0, NULL, 0, r32, sizeof r32);
    const float w32[16] = {1, 0, 0, 128 / 255.f, 0, 1, 0, 1, 0, 0, 1, 0, 153 / 255.f, 102 / 255.f, 51 / 255.f, 204 / 255.f};
    expect_image(put("b.bmp", f, n), "BMP", 2, 2, 4, 1, w32);
    /* all fourth bytes 0: no alpha (BGRX), 3 channels */
    const unsigned char x32[8] = {0, 0, 255, 0, 255, 0, 0, 0};
    n = bmp(f, 2, 1, 32, 0, 0, NULL, 0, x32, sizeof x32);
    const float wx[6] = {1, 0, 0, 0, 0, 1};
    expect_image(put("c.bmp", f, n), "BMP", 2, 1, 3, 1, wx);
    /* 8-bit palette of 2 colours (BGRX entries), 2x2, rows padded to 4 */
    const unsigned char pal[8] = {255, 0, 0, 0, 0, 128, 255, 0};
    const unsigned char r8[8] = {1, 0, 0, 0, 0, 1, 0, 0};
    n = bmp(f, 2, 2, 8, 0, 2, pal, sizeof pal, r8, sizeof r8);
    const float w8[12] = {0, 0, 1, 1, 128 / 255.f, 0, 1, 128 / 255.f, 0, 0, 0, 1};
    expect_image(put("d.bmp", f, n), "BMP", 2, 2, 3, 1, w8);
    /* 1-bit, 9x1: the ninth pixel is the next byte's high bit */
    const unsigned char pal1[8] = {0, 0, 0, 0, 255, 255, 255, 0};
    const unsigned char r1[4] = {0xa5, 0x80, 0, 0};
    n = bmp(f, 9, 1, 1, 0, 0, pal1, sizeof pal1, r1, sizeof r1);
    float w1[27];
    for (int i = 0; i < 9; i++) {
        int bit = i < 8 ? (0xa5 >> (7 - i)) & 1 : 1;
        w1[3 * i] = w1[3 * i + 1] = w1[3 * i + 2] = (float)bit;
    }
    expect_image(put("e.bmp", f, n), "BMP", 9, 1, 3, 1, w1);
    /* 16-bit BI_BITFIELDS 5:6:5 (masks after the 40-byte header), 2x1 */
    unsigned char masks[12];
    le32(masks, 0xf800), le32(masks + 4, 0x07e0), le32(masks + 8, 0x001f);
    unsigned char r16[4];
    le16(r16, 0xf800), le16(r16 + 2, (31u << 5) | 0x0f); /* red; green 31/63, blue 15/31 */
    n = bmp(f, 2, 1, 16, 3, 0, masks, sizeof masks, r16, sizeof r16);
    const float w16[6] = {1, 0, 0, 0, 31 / 63.f, 15 / 31.f};
    expect_image(put("f.bmp", f, n), "BMP", 2, 1, 3, 1, w16);

    /* errors */
    n = bmp(f, 2, 1, 8, 1, 0, pal, sizeof pal, r8, 4);
    NB_EXPECT_ERR(read_status(put("rle.bmp", f, n)), NB_ERR_UNSUPPORTED, "RLE-compressed BMP");
    n = bmp(f, 3, 2, 24, 0, 0, NULL, 0, r24, sizeof r24);
    NB_EXPECT_ERR(read_status(put("trunc.bmp", f, n - 5)), NB_ERR_IO, "truncated BMP file (pixel rows)");
    NB_EXPECT_ERR(read_status(put("trunc2.bmp", f, 20)), NB_ERR_IO, "truncated BMP file");
    const unsigned char bad8[4] = {7, 0, 0, 0};
    n = bmp(f, 1, 1, 8, 0, 2, pal, sizeof pal, bad8, sizeof bad8);
    NB_EXPECT_ERR(read_status(put("idx.bmp", f, n)), NB_ERR_IO, "palette index 7 of 2 colours");
    n = bmp(f, 3, 2, 7, 0, 0, NULL, 0, r24, sizeof r24);
    NB_EXPECT_ERR(read_status(put("bpp.bmp", f, n)), NB_ERR_IO, "7 bits per pixel");
    n = bmp(f, 100000, 1, 24, 0, 0, NULL, 0, r24, sizeof r24);
    NB_EXPECT_ERR(read_status(put("big.bmp", f, n)), NB_ERR_INVALID_ARG, "unsupported size");
    n = bmp(f, 0, 1, 24, 0, 0, NULL, 0, r24, sizeof r24);
    NB_EXPECT_ERR(read_status(put("zero.bmp", f, n)), NB_ERR_IO, "0x1 pixels");
}

/* ---- TGA ----------------------------------------------------------------------------------------- */

static size_t tga(unsigned char *o, int type, int w, int h, int bpp, int desc, const void *cmap, int cmlen,
                  int cmbits, const void *data, size_t nd) {
    memset(o, 0, 18);
    o[1] = cmap ? 1 : 0, o[2] = (unsigned char)type;
    le16(o + 5, (unsigned)cmlen), o[7] = (unsigned char)cmbits;
    le16(o + 12, (unsigned)w), le16(o + 14, (unsigned)h);
    o[16] = (unsigned char)bpp, o[17] = (unsigned char)desc;
    size_t cm = cmap ? (size_t)cmlen * (size_t)((cmbits + 7) / 8) : 0;
    if (cm) memcpy(o + 18, cmap, cm);
    memcpy(o + 18 + cm, data, nd);
    return 18 + cm + nd;
}

static void test_tga(void) {
    unsigned char f[512];
    /* type 2, 24-bit, bottom-left origin, 2x2 (BGR) */
    const unsigned char d24[12] = {0, 0, 255, 0, 255, 0, /* bottom row: red, green */
                                   255, 0, 0, 10, 20, 30};
    size_t n = tga(f, 2, 2, 2, 24, 0, NULL, 0, 0, d24, sizeof d24);
    const float w24[12] = {0, 0, 1, 30 / 255.f, 20 / 255.f, 10 / 255.f, 1, 0, 0, 0, 1, 0};
    expect_image(put("a.tga", f, n), "TGA", 2, 2, 3, 1, w24);
    /* type 10 (RLE), 32-bit, top-left origin (desc 0x28: 8 alpha bits + top), 3x2: a run of 4
     * crossing the row end, then 2 raw pixels */
    const unsigned char rle[] = {0x83, 0, 0, 255, 255, 0x01, 255, 0, 0, 128, 0, 255, 0, 64};
    n = tga(f, 10, 3, 2, 32, 0x28, NULL, 0, 0, rle, sizeof rle);
    const float wr[24] = {1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 0, 0, 1, 128 / 255.f, 0, 1, 0, 64 / 255.f};
    expect_image(put("b.tga", f, n), "TGA", 3, 2, 4, 1, wr);
    /* type 3, 8-bit gray, top, right-to-left (desc 0x30), 2x1 */
    const unsigned char g[2] = {0, 255};
    n = tga(f, 3, 2, 1, 8, 0x30, NULL, 0, 0, g, sizeof g);
    const float wg[2] = {1, 0};
    expect_image(put("c.tga", f, n), "TGA", 2, 1, 1, 1, wg);
    /* type 1, colour-mapped: 8-bit indices into 24-bit colours, 2x1, top */
    const unsigned char cm[6] = {255, 0, 0, 0, 0, 255};
    const unsigned char idx[2] = {1, 0};
    n = tga(f, 1, 2, 1, 8, 0x20, cm, 2, 24, idx, sizeof idx);
    const float wc[6] = {1, 0, 0, 0, 0, 1};
    expect_image(put("d.tga", f, n), "TGA", 2, 1, 3, 1, wc);
    /* no .tga extension, but the TGA 2.0 footer */
    unsigned char ft[600];
    n = tga(ft, 3, 2, 1, 8, 0x20, NULL, 0, 0, g, sizeof g);
    memset(ft + n, 0, 8);
    memcpy(ft + n + 8, "TRUEVISION-XFILE.", 18);
    n += 26;
    const float wf[2] = {0, 1};
    expect_image(put("footer.img", ft, n), "TGA", 2, 1, 1, 1, wf);
    /* without either: not recognised */
    n = tga(f, 3, 2, 1, 8, 0x20, NULL, 0, 0, g, sizeof g);
    NB_EXPECT_ERR(read_status(put("nofooter.img", f, n)), NB_ERR_UNSUPPORTED, "no known signature");
    /* errors */
    n = tga(f, 10, 3, 2, 32, 0x28, NULL, 0, 0, rle, sizeof rle);
    NB_EXPECT_ERR(read_status(put("trunc.tga", f, n - 3)), NB_ERR_IO, "truncated TGA file (pixel data)");
    NB_EXPECT_ERR(read_status(put("trunc2.tga", f, n - 9)), NB_ERR_IO, "truncated TGA file (run-length packets)");
    NB_EXPECT_ERR(read_status(put("short.tga", f, 10)), NB_ERR_IO, "18-byte header");
    /* a short file claiming a large image: refused before its pixels are allocated */
    n = tga(f, 2, 8000, 8000, 24, 0, NULL, 0, 0, d24, sizeof d24);
    NB_EXPECT_ERR(read_status(put("huge.tga", f, n)), NB_ERR_IO, "truncated TGA file (pixel data)");
    n = tga(f, 10, 8000, 8000, 24, 0, NULL, 0, 0, d24, sizeof d24);
    NB_EXPECT_ERR(read_status(put("huge_rle.tga", f, n)), NB_ERR_IO, "truncated TGA file (run-length packets)");
    n = tga(f, 1, 2, 1, 8, 0x20, cm, 2, 24, (const unsigned char[]){5, 0}, 2);
    NB_EXPECT_ERR(read_status(put("idx.tga", f, n)), NB_ERR_IO, "colour index 5 outside the map [0, 2)");
    n = tga(f, 5, 2, 1, 8, 0x20, NULL, 0, 0, g, sizeof g);
    NB_EXPECT_ERR(read_status(put("type.tga", f, n)), NB_ERR_IO, "image type 5");
    n = tga(f, 2, 2, 1, 12, 0x20, NULL, 0, 0, g, sizeof g);
    NB_EXPECT_ERR(read_status(put("bpp.tga", f, n)), NB_ERR_IO, "truecolor image of 12 bits");
}

/* ---- HDR ----------------------------------------------------------------------------------------- */

static void test_hdr(void) {
    unsigned char f[1024];
    /* flat pixels, -Y 1 +X 3: (128, 64, 32, e=129) = (1, 0.5, 0.25); e = 0 is black; then an
     * old-style repeat (1, 1, 1, 1) of the previous pixel */
    const unsigned char px[12] = {128, 64, 32, 129, 9, 9, 9, 0, 1, 1, 1, 1};
    const float w1[9] = {1, 0.5f, 0.25f, 0, 0, 0, 0, 0, 0};
    size_t n = headed(f, "#?RADIANCE\n# made by test_image_formats\nFORMAT=32-bit_rle_rgbe\nEXPOSURE=1.0\n\n-Y 1 +X 3\n",
                      px, sizeof px);
    expect_image(put("a.hdr", f, n), "HDR", 3, 1, 3, 0, w1);
    /* new run-length scanlines, +Y 2 +X 8 (stored bottom to top): per channel a run of 8 */
    size_t k = headed(f, "#?RGBE\n\n+Y 2 +X 8\n", NULL, 0);
    const unsigned char rows[2][4] = {{64, 128, 255, 130}, {1, 2, 3, 136}}; /* stored bottom row first */
    for (int r = 0; r < 2; r++) {
        f[k++] = 2, f[k++] = 2, f[k++] = 0, f[k++] = 8;
        for (int ch = 0; ch < 4; ch++) f[k++] = 128 + 8, f[k++] = rows[r][ch];
    }
    float w2[48];
    for (int y = 0; y < 2; y++) {
        const unsigned char *e = rows[1 - y];
        for (int x = 0; x < 8; x++)
            for (int ch = 0; ch < 3; ch++) w2[(y * 8 + x) * 3 + ch] = e[ch] * ldexpf(1.0f, e[3] - 136);
    }
    expect_image(put("b.hdr", f, k), "HDR", 8, 2, 3, 0, w2);
    /* literal runs: channel 0 as 8 literals */
    k = n = headed(f, "#?RADIANCE\n\n-Y 1 +X 8\n", NULL, 0);
    f[k++] = 2, f[k++] = 2, f[k++] = 0, f[k++] = 8;
    f[k++] = 8;
    for (int x = 0; x < 8; x++) f[k++] = (unsigned char)(16 * x);
    f[k++] = 128 + 8, f[k++] = 0, f[k++] = 128 + 8, f[k++] = 0, f[k++] = 128 + 8, f[k++] = 137;
    float w3[24];
    for (int x = 0; x < 8; x++) w3[3 * x] = 16.0f * x * 2.0f, w3[3 * x + 1] = w3[3 * x + 2] = 0;
    expect_image(put("c.hdr", f, k), "HDR", 8, 1, 3, 0, w3);
    NB_EXPECT_ERR(read_status(put("trunc.hdr", f, k - 2)), NB_ERR_IO, "truncated HDR file");
    f[n + 4] = 9; /* a literal of 9 in a scanline of 8 */
    NB_EXPECT_ERR(read_status(put("long.hdr", f, k)), NB_ERR_IO, "too-long literal");
}

/* ---- PFM, PPM / PGM ------------------------------------------------------------------------------ */

static void test_pfm(void) {
    unsigned char f[256];
    /* "PF", little-endian (scale -1), 1x2: rows stored bottom to top */
    const float v[6] = {1.5f, -2.0f, 3.0f, 100.0f, 0.25f, 0.0f}; /* bottom row, then top */
    unsigned char le[24];
    for (int i = 0; i < 6; i++) {
        uint32_t b;
        memcpy(&b, &v[i], 4);
        le32(le + 4 * i, b);
    }
    const float w[6] = {100.0f, 0.25f, 0.0f, 1.5f, -2.0f, 3.0f};
    expect_image(put("a.pfm", f, headed(f, "PF\n1 2\n-1.0\n", le, sizeof le)), "PFM", 1, 2, 3, 0, w);
    /* "Pf" gray, big-endian (scale +1), 2x1 */
    const unsigned char be[8] = {0x3f, 0x80, 0, 0, 0xc0, 0x40, 0, 0}; /* 1.0, -3.0 */
    size_t n = headed(f, "Pf\n2 1\n1\n", be, sizeof be);
    const float wg[2] = {1.0f, -3.0f};
    expect_image(put("b.pfm", f, n), "PFM", 2, 1, 1, 0, wg);
    NB_EXPECT_ERR(read_status(put("trunc.pfm", f, n - 1)), NB_ERR_IO, "truncated PFM file (pixel data)");
}

static void test_pnm(void) {
    unsigned char f[256];
    /* P6, 8-bit, 2x1, a comment in the header */
    const unsigned char px[6] = {255, 0, 51, 0, 102, 255};
    const float w6[6] = {1, 0, 0.2f, 0, 0.4f, 1};
    expect_image(put("a.ppm", f, headed(f, "P6\n# comment\n2 1\n255\n", px, 6)), "PPM", 2, 1, 3, 1, w6);
    /* P5, 16-bit big-endian samples (maxval 1000), 2x1 */
    const unsigned char p16[4] = {0x01, 0xf4, 0x03, 0xe8}; /* 500, 1000 */
    const float w5[2] = {0.5f, 1.0f};
    expect_image(put("b.pgm", f, headed(f, "P5 2 1 1000\n", p16, 4)), "PGM", 2, 1, 1, 1, w5);
    /* P3 and P2: ASCII */
    const char *p3 = "P3\n1 2\n# max\n10\n10 0 5\n# row 2\n0 10 10\n";
    const float w3[6] = {1, 0, 0.5f, 0, 1, 1};
    expect_image(put_str("c.ppm", p3), "PPM", 1, 2, 3, 1, w3);
    const char *p2 = "P2 2 1 4 1 3";
    const float w2[2] = {0.25f, 0.75f};
    expect_image(put_str("d.pgm", p2), "PGM", 2, 1, 1, 1, w2);
}

/* Text headers that lie or name what nabla does not read (HDR, PPM / PGM, PFM). */
static void test_bad_headers(void) {
    static const bad_file bad[] = {
        {"xyz.hdr", "#?RADIANCE\nFORMAT=32-bit_rle_xyze\n\n-Y 1 +X 1\nabcd", NB_ERR_UNSUPPORTED, "XYZE"},
        {"rot.hdr", "#?RADIANCE\n\n+X 1 -Y 1\nabcd", NB_ERR_UNSUPPORTED, "resolution line '+X 1 -Y 1'"},
        {"nohead.hdr", "#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n", NB_ERR_IO, "no end of header"},
        {"rep.hdr", "#?RADIANCE\n\n-Y 1 +X 2\n\x01\x01\x01\x01", NB_ERR_IO, "repeat with no pixel before it"},
        {"huge.hdr", "#?RADIANCE\n\n-Y 100000 +X 2\n", NB_ERR_INVALID_ARG, "unsupported size"},
        {"short.hdr", "#?RADIANCE\n\n-Y 8000 +X 8000\nabcd", NB_ERR_IO, "truncated HDR file (scanline data)"},
        {"short.ppm", "P3 8000 8000 255 1 2 3", NB_ERR_IO, "truncated PPM file (pixel data)"},
        {"magic.hdr", "#?NOTRADIANCE\n\n-Y 1 +X 1\nabcd", NB_ERR_IO, "not '#?RADIANCE' or '#?RGBE'"},
        {"over.pgm", "P2 2 1 4 1 5", NB_ERR_IO, "sample 5 above maxval 4"},
        {"few.pgm", "P2 2 1 4 1", NB_ERR_IO, "truncated PGM file (pixel data)"},
        {"trunc.ppm", "P6\n2 1\n255\n", NB_ERR_IO, "truncated PPM file (pixel data)"},
        {"max.ppm", "P6 1 1 70000\n", NB_ERR_IO, "maxval 70000"},
        {"big.ppm", "P6 20000 1 255\n", NB_ERR_INVALID_ARG, "unsupported size"},
        {"zero.ppm", "P6 0 1 255\n", NB_ERR_IO, "0x1 pixels"},
        {"nan.pgm", "P5 1 x 255\n", NB_ERR_IO, "no width, height and maxval"},
        {"zero.pfm", "PF\n1 1\n0\n123456789012", NB_ERR_IO, "not a non-zero number"},
        {"big.pfm", "PF\n30000 30000\n-1\n", NB_ERR_INVALID_ARG, "unsupported size"},
    };
    expect_bad(bad, sizeof bad / sizeof bad[0]);
}

/* ---- PNG through nb_image_read, formats nabla does not read, bad paths ----------------------------- */

static void test_png_and_unsupported(void) {
    nb_device *cpu;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    float rgba[8] = {1, 0, 0, 1, 0, 0, 1, 0.2f};
    int64_t sh[3] = {1, 2, 4};
    nb_tensor *t;
    NB_REQUIRE_OK(nb_tensor_from_host(cpu, NB_F32, 3, sh, rgba, &t));
    if (nb_image_write_png(tmp("a.png"), t) == NB_OK) { /* (needs libpng at run time) */
        const float want[8] = {1, 0, 0, 1, 0, 0, 1, 51 / 255.f};
        expect_image(tmp("a.png"), "PNG", 2, 1, 4, 1, want);
    }
    nb_tensor_free(t);
    nb_device_close(cpu);
    /* (JPEG and OpenEXR are read: tests/test_image_codecs.c) */
    NB_EXPECT_ERR(read_status(put("a.gif", "GIF89a\1\0\1\0", 10)), NB_ERR_UNSUPPORTED,
                  "is in the GIF format, which nabla does not read (nabla reads PNG, JPEG, OpenEXR, BMP, TGA, Radiance "
                  "HDR, PFM and PPM / PGM");
    NB_EXPECT_ERR(read_status(put("a.pbm", "P4 1 1\n\x80", 8)), NB_ERR_UNSUPPORTED, "PBM (1-bit)");
    NB_EXPECT_ERR(read_status(put("empty.png", "", 0)), NB_ERR_UNSUPPORTED, "(.png) is not an image format nabla reads (the file is empty)");
    NB_EXPECT_ERR(read_status(put("text.xyz", "hello world", 11)), NB_ERR_UNSUPPORTED, "no known signature");
    NB_EXPECT_ERR(read_status(tmp("missing.bmp")), NB_ERR_IO, "cannot open");
    NB_EXPECT_ERR(read_status(tmpdir), NB_ERR_IO, "");
    NB_EXPECT(nb_test_fifo_refused(tmp("fifo.bmp"), read_status));
    nb_tensor *o = NULL;
    NB_EXPECT_ERR(nb_image_read(NULL, NULL, NULL, &o), NB_ERR_INVALID_ARG, "path is NULL");
    NB_EXPECT_ERR(nb_image_read("x", NULL, NULL, NULL), NB_ERR_INVALID_ARG, "out is NULL");
}

static void test_read_onto_cuda(void) {
    nb_device *cuda;
    if (nb_device_open("cuda", &cuda) != NB_OK) NB_SKIP("no CUDA device");
    const char *p3 = "P3 1 1 255 255 0 51";
    nb_tensor *t = NULL;
    nb_image_info info;
    NB_REQUIRE_OK(nb_image_read(put_str("g.ppm", p3), cuda, &info, &t));
    NB_EXPECT(nb_tensor_device(t) == cuda);
    float got[3];
    NB_EXPECT_OK(nb_tensor_to_host(t, got, sizeof got));
    NB_EXPECT(got[0] == 1.0f && got[1] == 0.0f && fabsf(got[2] - 0.2f) < 1e-6f);
    nb_tensor_free(t);
    nb_device_close(cuda);
}

int main(int argc, char **argv) {
    snprintf(tmpdir, sizeof tmpdir, "%s/nb_test_image.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) return 1;
    int rc;
    {
        nb_test_fn fns[] = {test_procedural, test_png_roundtrip, test_png_broken,
                            test_png_fifo_and_atomic_write, test_sample_cpu,
                            test_sample_stratified, test_sample_cuda, test_psnr, test_bmp, test_tga,
                            test_hdr, test_pfm, test_pnm, test_bad_headers, test_png_and_unsupported,
                            test_read_onto_cuda};
        rc = nb_test_run_(argc, argv,
                          "test_procedural, test_png_roundtrip, test_png_broken, "
                          "test_png_fifo_and_atomic_write, test_sample_cpu, "
                          "test_sample_stratified, test_sample_cuda, test_psnr, test_bmp, test_tga, "
                          "test_hdr, test_pfm, test_pnm, test_bad_headers, test_png_and_unsupported, test_read_onto_cuda",
                          fns, (int)(sizeof fns / sizeof fns[0]));
    }
    nb_test_tmpdir_remove();
    return rc;
}

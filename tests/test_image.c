/* Images (image.h): PNG round trips and channel conversions, broken and unsupported files (made
 * here: missing, empty, not a PNG, truncated, corrupted, 16-bit, too large), the procedural
 * image, random samples (CPU reference, CUDA agreement), pixel coordinates and PSNR. */
#include <stdint.h>
#include <unistd.h>

#include "nabla/image.h"
#include "nb_test.h"
#include "nb_test_fifo.h"

static char tmpdir[256];

static const char *tmp(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) & 3;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static int write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    size_t w = fwrite(data, 1, n, f);
    fclose(f);
    return w == n;
}

static unsigned char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *d = malloc((size_t)len + 1);
    *n = fread(d, 1, (size_t)len, f);
    fclose(f);
    return d;
}

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

int main(int argc, char **argv) {
    snprintf(tmpdir, sizeof tmpdir, "%s/nb_test_image.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) return 1;
    int rc;
    {
        nb_test_fn fns[] = {test_procedural, test_png_roundtrip, test_png_broken,
                            test_png_fifo_and_atomic_write, test_sample_cpu,
                            test_sample_stratified, test_sample_cuda, test_psnr};
        rc = nb_test_run_(argc, argv,
                          "test_procedural, test_png_roundtrip, test_png_broken, "
                          "test_png_fifo_and_atomic_write, test_sample_cpu, "
                          "test_sample_stratified, test_sample_cuda, test_psnr",
                          fns, (int)(sizeof fns / sizeof fns[0]));
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return rc;
}

/* .npy reading and writing: round trips of every dtype, hand-made headers (v1, v2, numpy's own
 * spelling), and every error. */
#include <stdint.h>
#include <unistd.h>

#include "nabla/npy.h"
#include "nb_test.h"
#include "nb_test_fifo.h"

static nb_device *cpu(void) {
    static nb_device *d;
    if (!d && nb_device_open("cpu", &d) != NB_OK) return NULL;
    return d;
}

static char tmpdir[256];

static const char *tmp_path(const char *name) {
    static char buf[512];
    if (!tmpdir[0]) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/nb_test_npy_%ld", (long)getpid());
        char cmd[300];
        snprintf(cmd, sizeof cmd, "mkdir -p %s", tmpdir);
        if (system(cmd) != 0) return NULL;
    }
    snprintf(buf, sizeof buf, "%s/%s", tmpdir, name);
    return buf;
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(data, 1, n, f);
    fclose(f);
}

static unsigned char *read_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

/* Builds a v1 (or v2) .npy image from a header dict and raw data into buf; returns its size. */
static size_t make_npy(unsigned char *buf, int major, const char *dict, const void *data,
                       size_t nbytes) {
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t total = (pre + dl + 1 + 63) / 64 * 64, hlen = total - pre;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    buf[8] = (unsigned char)(hlen & 0xff);
    buf[9] = (unsigned char)(hlen >> 8);
    if (major != 1) buf[10] = buf[11] = 0;
    memcpy(buf + pre, dict, dl);
    memset(buf + pre + dl, ' ', hlen - dl - 1);
    buf[pre + hlen - 1] = '\n';
    if (nbytes) memcpy(buf + total, data, nbytes);
    return total + nbytes;
}

static void test_roundtrip_f32(void) {
    float v[6] = {0, 1.5f, -2, 3.25f, 4, 1e-20f};
    int64_t shape[2] = {2, 3};
    nb_tensor *t = NULL, *u = NULL;
    NB_REQUIRE_OK(nb_tensor_from_host(cpu(), NB_F32, 2, shape, v, &t));
    const char *p = tmp_path("a.npy");
    NB_EXPECT_OK(nb_tensor_save_npy(t, p));
    NB_REQUIRE_OK(nb_tensor_load_npy(cpu(), p, &u));
    NB_EXPECT(nb_tensor_dtype(u) == NB_F32);
    NB_EXPECT(nb_tensor_ndim(u) == 2);
    NB_EXPECT(nb_tensor_shape(u)[0] == 2 && nb_tensor_shape(u)[1] == 3);
    float w[6];
    NB_EXPECT_OK(nb_tensor_to_host(u, w, sizeof w));
    NB_EXPECT(!memcmp(v, w, sizeof v));
    /* The file is what numpy writes: header padded to 64 bytes, ending in '\n'. */
    size_t n = 0;
    unsigned char *b = read_bytes(p, &n);
    NB_EXPECT(b && n == 128 + sizeof v);
    if (b) {
        NB_EXPECT(!memcmp(b + 10, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                          59));
        NB_EXPECT(b[127] == '\n');
    }
    free(b);
    nb_tensor_free(t);
    nb_tensor_free(u);
}

static void test_roundtrip_dtypes(void) {
    nb_dtype types[] = {NB_F32, NB_F64, NB_F16, NB_I32, NB_I64, NB_U32, NB_U8, NB_BOOL};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        unsigned char data[5 * 8];
        size_t es = nb_dtype_size(types[k]);
        for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(types[k] == NB_BOOL ? (i & 1) : i * 7 + 1);
        int64_t shape[1] = {5};
        nb_tensor *t = NULL, *u = NULL;
        NB_REQUIRE_OK(nb_tensor_from_host(cpu(), types[k], 1, shape, data, &t));
        const char *p = tmp_path("d.npy");
        NB_EXPECT_OK(nb_tensor_save_npy(t, p));
        NB_REQUIRE_OK(nb_tensor_load_npy(cpu(), p, &u));
        NB_EXPECT(nb_tensor_dtype(u) == types[k]);
        unsigned char back[5 * 8];
        NB_EXPECT_OK(nb_tensor_to_host(u, back, 5 * es));
        NB_EXPECT(!memcmp(data, back, 5 * es));
        nb_tensor_free(t);
        nb_tensor_free(u);
    }
}

static void test_scalar_and_empty(void) {
    double x = 3.5;
    nb_tensor *t = NULL, *u = NULL;
    NB_REQUIRE_OK(nb_tensor_from_host(cpu(), NB_F64, 0, NULL, &x, &t));
    const char *p = tmp_path("s.npy");
    NB_EXPECT_OK(nb_tensor_save_npy(t, p));
    NB_REQUIRE_OK(nb_tensor_load_npy(cpu(), p, &u));
    NB_EXPECT(nb_tensor_ndim(u) == 0);
    double y = 0;
    NB_EXPECT_OK(nb_tensor_to_host(u, &y, sizeof y));
    NB_EXPECT(y == 3.5);
    nb_tensor_free(t);
    nb_tensor_free(u);
    int64_t shape[2] = {0, 3};
    NB_REQUIRE_OK(nb_tensor_empty(cpu(), NB_I32, 2, shape, &t));
    NB_EXPECT_OK(nb_tensor_save_npy(t, p));
    NB_REQUIRE_OK(nb_tensor_load_npy(cpu(), p, &u));
    NB_EXPECT(nb_tensor_ndim(u) == 2 && nb_tensor_shape(u)[0] == 0 && nb_tensor_shape(u)[1] == 3);
    nb_tensor_free(t);
    nb_tensor_free(u);
}

/* A transposed view is written in C order of the view. */
static void test_save_strided(void) {
    int32_t v[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {2, 3};
    nb_tensor *t = NULL, *tt = NULL, *u = NULL;
    NB_REQUIRE_OK(nb_tensor_from_host(cpu(), NB_I32, 2, shape, v, &t));
    NB_REQUIRE_OK(nb_tensor_transpose(t, 0, 1, &tt));
    const char *p = tmp_path("t.npy");
    NB_EXPECT_OK(nb_tensor_save_npy(tt, p));
    NB_REQUIRE_OK(nb_tensor_load_npy(NULL, p, &u));
    int32_t w[6];
    NB_EXPECT_OK(nb_tensor_to_host(u, w, sizeof w));
    int32_t want[6] = {1, 4, 2, 5, 3, 6};
    NB_EXPECT(!memcmp(w, want, sizeof w));
    NB_EXPECT(nb_tensor_shape(u)[0] == 3);
    nb_tensor_free(t);
    nb_tensor_free(tt);
    nb_tensor_free(u);
}

/* Headers as other writers spell them: v2, keys in another order, double quotes, no trailing
 * comma, a 1-d shape "(4,)", '=' byte order, Python 2 long suffix. */
static void test_handmade_headers(void) {
    unsigned char buf[512];
    float f[4] = {1, 2, 3, 4};
    const char *dicts[] = {
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }",
        "{\"shape\": (4,), \"fortran_order\": False, \"descr\": \"<f4\"}",
        "{'descr':'=f4','fortran_order':False,'shape':(4L,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2)}",
    };
    for (int major = 1; major <= 2; major++)
        for (size_t k = 0; k < sizeof dicts / sizeof dicts[0]; k++) {
            size_t n = make_npy(buf, major, dicts[k], f, sizeof f);
            nb_tensor *u = NULL;
            NB_EXPECT_OK(nb_tensor_load_npy_mem(cpu(), buf, n, "mem", &u));
            if (!u) continue;
            NB_EXPECT(nb_tensor_numel(u) == 4);
            float g[4];
            NB_EXPECT_OK(nb_tensor_to_host(u, g, sizeof g));
            NB_EXPECT(!memcmp(f, g, sizeof f));
            nb_tensor_free(u);
        }
    /* |u1 and |b1 as numpy writes them; u1 via a file. */
    unsigned char bytes[3] = {0, 1, 1};
    size_t n = make_npy(buf, 1, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", bytes, 3);
    const char *p = tmp_path("b.npy");
    write_bytes(p, buf, n);
    nb_tensor *u = NULL;
    NB_EXPECT_OK(nb_tensor_load_npy(cpu(), p, &u));
    NB_EXPECT(u && nb_tensor_dtype(u) == NB_BOOL);
    nb_tensor_free(u);
}

static void expect_mem_err(const char *dict, const void *data, size_t nbytes, nb_status code,
                           const char *substr) {
    unsigned char buf[512];
    size_t n = make_npy(buf, 1, dict, data, nbytes);
    nb_tensor *u = NULL;
    NB_EXPECT_ERR(nb_tensor_load_npy_mem(cpu(), buf, n, "x.npy", &u), code, substr);
    NB_EXPECT(u == NULL);
}

static void test_errors(void) {
    float f[4] = {0};
    expect_mem_err("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", f, 16,
                   NB_ERR_UNSUPPORTED, "Fortran-ordered");
    expect_mem_err("{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", f, 16,
                   NB_ERR_UNSUPPORTED, "big-endian");
    expect_mem_err("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", f, 16,
                   NB_ERR_UNSUPPORTED, "unsupported dtype '<c8'");
    expect_mem_err("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", f, 16, NB_ERR_IO,
                   "truncated .npy file: data is 16 bytes but f32[5] needs 20");
    expect_mem_err("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", f, 16, NB_ERR_IO,
                   "size mismatch");
    expect_mem_err("{'descr': '<f4', 'shape': (4,), }", f, 16, NB_ERR_INVALID_ARG,
                   "missing 'fortran_order'");
    expect_mem_err("{'descr': '<f4', 'fortran_order': False}", f, 16, NB_ERR_INVALID_ARG,
                   "missing 'shape'");
    expect_mem_err("{'fortran_order': False, 'shape': (4,)}", f, 16, NB_ERR_INVALID_ARG,
                   "missing 'descr'");
    expect_mem_err("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (4,)}", f, 16,
                   NB_ERR_INVALID_ARG, "True or False");
    expect_mem_err("{'descr': '<f4', 'fortran_order': False, 'shape': [4]}", f, 16,
                   NB_ERR_INVALID_ARG, "shape must be a tuple");
    expect_mem_err("{'descr': '<f4', 'fortran_order': False, 'shape': (-4,)}", f, 16,
                   NB_ERR_INVALID_ARG, "non-negative integers");
    expect_mem_err("{'descr': '<f4', 'fortran_order': False, 'shape': (4 4)}", f, 16,
                   NB_ERR_INVALID_ARG, "expected ',' or ')'");
    expect_mem_err("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1)}", f, 4,
                   NB_ERR_SHAPE, "more than 8 dims");
    expect_mem_err("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}", f, 16,
                   NB_ERR_INVALID_ARG, "unexpected key 'x'");
    expect_mem_err("['descr']", f, 16, NB_ERR_INVALID_ARG, "expected '{'");
    expect_mem_err("{'descr' '<f4'}", f, 16, NB_ERR_INVALID_ARG, "expected ':'");
    expect_mem_err("{'descr': '<f4", f, 16, NB_ERR_INVALID_ARG, "unterminated string");
    expect_mem_err("{descr: 1}", f, 16, NB_ERR_INVALID_ARG, "expected a string");
    expect_mem_err("{'descr': '<f4' 'shape': (4,)}", f, 16, NB_ERR_INVALID_ARG, "expected ',' or '}'");
    expect_mem_err("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", f,
                   16, NB_ERR_INVALID_ARG, "too large");

    nb_tensor *u = NULL;
    NB_EXPECT_ERR(nb_tensor_load_npy_mem(cpu(), "PK\x03\x04 not numpy", 16, "z.npy", &u),
                  NB_ERR_INVALID_ARG, "z.npy: not a .npy file (bad magic");
    NB_EXPECT_ERR(nb_tensor_load_npy_mem(cpu(), "\x93NUM", 4, "z.npy", &u), NB_ERR_IO,
                  "truncated");
    NB_EXPECT_ERR(nb_tensor_load_npy_mem(cpu(), "\x93NUMPY\x01\x00", 8, "z.npy", &u), NB_ERR_IO,
                  "truncated");
    NB_EXPECT_ERR(nb_tensor_load_npy_mem(cpu(), "\x93NUMPY\x02\x00\x00\x00", 10, "z.npy", &u),
                  NB_ERR_IO, "truncated");
    NB_EXPECT_ERR(nb_tensor_load_npy_mem(cpu(), "\x93NUMPY\x07\x00\x00\x00\x00\x00", 12, "z.npy", &u),
                  NB_ERR_UNSUPPORTED, "format version 7.0");
    NB_EXPECT_ERR(nb_tensor_load_npy_mem(cpu(), "\x93NUMPY\x01\x00\xff\x00{", 11, "z.npy", &u),
                  NB_ERR_IO, "header of 255 bytes");
    NB_EXPECT_ERR(nb_tensor_load_npy_mem(cpu(), NULL, 0, "z.npy", &u), NB_ERR_INVALID_ARG,
                  "not a .npy file");
    NB_EXPECT_ERR(nb_tensor_load_npy_mem(cpu(), NULL, 0, "z.npy", NULL), NB_ERR_INVALID_ARG,
                  "'out' is NULL");
    NB_EXPECT_ERR(nb_tensor_load_npy_mem(cpu(), NULL, 5, "z.npy", &u), NB_ERR_INVALID_ARG,
                  "data is NULL");

    NB_EXPECT_ERR(nb_tensor_load_npy(cpu(), "/nonexistent/dir/x.npy", &u), NB_ERR_IO,
                  "/nonexistent/dir/x.npy: cannot open");
    NB_EXPECT_ERR(nb_tensor_load_npy(cpu(), "/tmp", &u), NB_ERR_IO, "/tmp");
    NB_EXPECT_ERR(nb_tensor_load_npy(cpu(), NULL, &u), NB_ERR_INVALID_ARG, "'path' is NULL");
    NB_EXPECT_ERR(nb_tensor_load_npy(cpu(), "x", NULL), NB_ERR_INVALID_ARG, "'out' is NULL");
    /* An empty file and a truncated file on disk. */
    const char *p = tmp_path("empty.npy");
    write_bytes(p, "", 0);
    NB_EXPECT_ERR(nb_tensor_load_npy(cpu(), p, &u), NB_ERR_INVALID_ARG, "not a .npy file");
    unsigned char buf[512];
    size_t n = make_npy(buf, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", f, 16);
    write_bytes(p, buf, n - 3);
    NB_EXPECT_ERR(nb_tensor_load_npy(cpu(), p, &u), NB_ERR_IO, "truncated .npy file");

    /* Saving: bf16 has no numpy dtype; unwritable path; NULL arguments. */
    int64_t shape[1] = {2};
    nb_tensor *t = NULL;
    NB_REQUIRE_OK(nb_tensor_zeros(cpu(), NB_BF16, 1, shape, &t));
    NB_EXPECT_ERR(nb_tensor_save_npy(t, tmp_path("bf.npy")), NB_ERR_UNSUPPORTED, "bf16");
    nb_tensor_free(t);
    NB_REQUIRE_OK(nb_tensor_zeros(cpu(), NB_F32, 1, shape, &t));
    NB_EXPECT_ERR(nb_tensor_save_npy(t, "/nonexistent/dir/y.npy"), NB_ERR_IO,
                  "directory '/nonexistent/dir' does not exist");
    NB_EXPECT_ERR(nb_tensor_save_npy(t, NULL), NB_ERR_INVALID_ARG, "'path' is NULL");
    NB_EXPECT_ERR(nb_tensor_save_npy(NULL, "x"), NB_ERR_INVALID_ARG, "'t' is NULL");
    nb_tensor_free(t);
}

/* numpy pads the dict with spaces and ends the header with '\n': anything else after the dict is
 * junk and refused; each key appears once. */
static void test_header_padding(void) {
    float f[4] = {1, 2, 3, 4};
    const char *d = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }";
    char dict[256];
    snprintf(dict, sizeof dict, "%sxyz", d);
    expect_mem_err(dict, f, 16, NB_ERR_INVALID_ARG, "x.npy: malformed .npy header: unexpected 'x'");
    snprintf(dict, sizeof dict, "%s  , ", d);
    expect_mem_err(dict, f, 16, NB_ERR_INVALID_ARG, "unexpected ','");
    snprintf(dict, sizeof dict, "%s\t", d);
    expect_mem_err(dict, f, 16, NB_ERR_INVALID_ARG, "(byte 0x09)");
    snprintf(dict, sizeof dict, "%s\n", d); /* a newline that is not the last byte */
    expect_mem_err(dict, f, 16, NB_ERR_INVALID_ARG, "only space padding and a final newline");
    snprintf(dict, sizeof dict, "%s{'descr': '<f4'}", d);
    expect_mem_err(dict, f, 16, NB_ERR_INVALID_ARG, "unexpected '{'");
    expect_mem_err("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'descr': '<i4'}", f, 16,
                   NB_ERR_INVALID_ARG, "key 'descr' appears twice");
    /* a NUL byte in the padding */
    unsigned char buf[512];
    size_t n = make_npy(buf, 1, d, f, sizeof f);
    buf[10 + strlen(d) + 3] = 0;
    nb_tensor *u = NULL;
    NB_EXPECT_ERR(nb_tensor_load_npy_mem(cpu(), buf, n, "x.npy", &u), NB_ERR_INVALID_ARG, "(byte 0x00)");
    /* clean padding (and no final newline, as some writers do) loads */
    n = make_npy(buf, 1, d, f, sizeof f);
    NB_EXPECT_OK(nb_tensor_load_npy_mem(cpu(), buf, n, "x.npy", &u));
    nb_tensor_free(u);
    u = NULL;
    buf[n - sizeof f - 1] = ' '; /* the final newline */
    NB_EXPECT_OK(nb_tensor_load_npy_mem(cpu(), buf, n, "x.npy", &u));
    nb_tensor_free(u);
}

static nb_status load_npy(const char *p) {
    nb_tensor *u = NULL;
    nb_status s = nb_tensor_load_npy(cpu(), p, &u);
    nb_tensor_free(u);
    return s;
}

/* A FIFO in place of the file is refused at once, never blocking in open(). */
static void test_fifo(void) { NB_EXPECT(nb_test_fifo_refused(tmp_path("fifo.npy"), load_npy)); }

/* Saving replaces the file atomically: no temporary is left beside it, and a failed save (a
 * dtype numpy lacks) keeps the previous file. */
static void test_save_atomic(void) {
    const char *p = tmp_path("atomic.npy");
    int64_t shape[1] = {3};
    float v[3] = {1, 2, 3};
    nb_tensor *t = NULL, *u = NULL;
    NB_REQUIRE_OK(nb_tensor_from_host(cpu(), NB_F32, 1, shape, v, &t));
    NB_EXPECT_OK(nb_tensor_save_npy(t, p));
    NB_EXPECT_OK(nb_tensor_save_npy(t, p));
    nb_tensor_free(t);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", tmpdir);
    NB_EXPECT(system(cmd) != 0);
    NB_REQUIRE_OK(nb_tensor_zeros(cpu(), NB_BF16, 1, shape, &t));
    NB_EXPECT_ERR(nb_tensor_save_npy(t, p), NB_ERR_UNSUPPORTED, "bf16");
    nb_tensor_free(t);
    NB_REQUIRE_OK(nb_tensor_load_npy(cpu(), p, &u));
    float w[3];
    NB_EXPECT_OK(nb_tensor_to_host(u, w, sizeof w));
    NB_EXPECT(!memcmp(v, w, sizeof v));
    nb_tensor_free(u);
}

/* On a GPU: load straight onto the device and save from it. */
static void test_cuda(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *gpu = NULL;
    NB_REQUIRE_OK(nb_device_open("cuda", &gpu));
    float v[3] = {1, 2, 3};
    int64_t shape[1] = {3};
    nb_tensor *t = NULL, *u = NULL;
    NB_REQUIRE_OK(nb_tensor_from_host(gpu, NB_F32, 1, shape, v, &t));
    const char *p = tmp_path("g.npy");
    NB_EXPECT_OK(nb_tensor_save_npy(t, p));
    NB_REQUIRE_OK(nb_tensor_load_npy(gpu, p, &u));
    NB_EXPECT(nb_tensor_device(u) == gpu);
    float w[3];
    NB_EXPECT_OK(nb_tensor_to_host(u, w, sizeof w));
    NB_EXPECT(!memcmp(v, w, sizeof v));
    nb_tensor_free(t);
    nb_tensor_free(u);
    nb_device_close(gpu);
}

static void test_cleanup(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (tmpdir[0]) NB_EXPECT(system(cmd) == 0);
    nb_device_close(cpu());
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_roundtrip_f32, test_roundtrip_dtypes, test_scalar_and_empty,
                 test_save_strided, test_handmade_headers, test_errors, test_header_padding, test_fifo,
                 test_save_atomic, test_cuda, test_cleanup);
}

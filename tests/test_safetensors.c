/* safetensors.h: round trip, a hand-made file (as PyTorch's safetensors writes it), and corrupt
 * files with clear errors. */
#include <unistd.h>

#include "nb_test.h"
#include "nabla/safetensors.h"

static char dir[] = "/tmp/nabla_st_XXXXXX";

static const char *path_of(const char *name) {
    static char buf[256];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

/* Writes 8-byte length + header + data bytes. */
static void write_raw(const char *path, const char *header, uint64_t hlen, const void *data, size_t dlen) {
    FILE *f = fopen(path, "wb");
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(hlen >> (8 * i));
    fwrite(len, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    if (dlen) fwrite(data, 1, dlen, f);
    fclose(f);
}

static void test_roundtrip(void) {
    float w[12], b[3] = {1.5f, -2, 3}, s = 7;
    for (int i = 0; i < 12; i++) w[i] = (float)i * 0.25f;
    nb_st_tensor ts[3] = {{"layer.w", 2, {3, 4}, w}, {"layer.b", 1, {3}, b}, {"scalar \"q\"", 0, {0}, &s}};
    const char *keys[] = {"format", "note"}, *vals[] = {"pt", "line\nbreak \\ \"quoted\""};
    const char *p = path_of("rt.safetensors");
    NB_REQUIRE_OK(nb_safetensors_write(p, 3, ts, 2, keys, vals));
    nb_safetensors *f;
    NB_REQUIRE_OK(nb_safetensors_read(p, &f));
    int n;
    NB_EXPECT_OK(nb_safetensors_count(f, &n));
    NB_EXPECT(n == 3);
    const nb_st_tensor *t;
    NB_EXPECT_OK(nb_safetensors_find(f, "layer.w", &t));
    NB_EXPECT(t->ndim == 2 && t->shape[0] == 3 && t->shape[1] == 4 && !memcmp(t->data, w, sizeof w));
    NB_EXPECT_OK(nb_safetensors_find(f, "layer.b", &t));
    NB_EXPECT(t->ndim == 1 && !memcmp(t->data, b, sizeof b));
    NB_EXPECT_OK(nb_safetensors_find(f, "scalar \"q\"", &t));
    NB_EXPECT(t->ndim == 0 && t->data[0] == 7);
    NB_EXPECT_OK(nb_safetensors_get(f, 0, &t));
    NB_EXPECT(!strcmp(t->name, "layer.w"));
    const char *v;
    NB_EXPECT_OK(nb_safetensors_meta(f, "note", &v));
    NB_EXPECT(v && !strcmp(v, "line\nbreak \\ \"quoted\""));
    NB_EXPECT_OK(nb_safetensors_meta(f, "absent", &v));
    NB_EXPECT(v == NULL);
    NB_EXPECT_ERR(nb_safetensors_find(f, "nope", &t), NB_ERR_NOT_FOUND, "'nope'");
    nb_safetensors_free(f);
    /* the header length is a multiple of 8 and the data follows it */
    FILE *fp = fopen(p, "rb");
    unsigned char len[8];
    NB_EXPECT(fread(len, 1, 8, fp) == 8);
    fclose(fp);
    NB_EXPECT(len[0] % 8 == 0);
}

/* As the Python safetensors package writes it: sorted keys, metadata first, spaces, no padding
 * requirement on our side. */
static void test_handmade(void) {
    float data[6] = {1, 2, 3, 4, 5, 6};
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
                    "\"data_offsets\":[0,8]}, \"b\" : { \"shape\" : [2, 2], \"dtype\" : \"F32\", "
                    "\"data_offsets\" : [8, 24] } }";
    write_raw(path_of("hand.safetensors"), h, strlen(h), data, sizeof data);
    nb_safetensors *f;
    NB_REQUIRE_OK(nb_safetensors_read(path_of("hand.safetensors"), &f));
    const nb_st_tensor *t;
    NB_EXPECT_OK(nb_safetensors_find(f, "b", &t));
    NB_EXPECT(t->ndim == 2 && t->shape[1] == 2 && t->data[0] == 3 && t->data[3] == 6);
    NB_EXPECT_OK(nb_safetensors_find(f, "a", &t));
    NB_EXPECT(t->data[1] == 2);
    nb_safetensors_free(f);
}

/* F16 / BF16 / F64 tensors (as PyTorch's half / bfloat16 / double checkpoints) are read as f32. */
static void test_other_float_dtypes(void) {
    unsigned char d[64];
    /* f16: 1.0, -2.0, 65504, 2^-24 (subnormal), 0, -0, inf */
    const uint16_t h[7] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x0000, 0x8000, 0x7c00};
    /* bf16: 1.0, -3.0, 1e-20 rounded (0x1e3d) */
    const uint16_t bf[3] = {0x3f80, 0xc040, 0x1e3d};
    double f64[2] = {0.1, -1e30};
    size_t o = 0;
    for (int i = 0; i < 7; i++) d[o++] = (unsigned char)h[i], d[o++] = (unsigned char)(h[i] >> 8);
    for (int i = 0; i < 3; i++) d[o++] = (unsigned char)bf[i], d[o++] = (unsigned char)(bf[i] >> 8);
    memcpy(d + o, f64, 16);
    o += 16;
    const char *hd = "{\"h\":{\"dtype\":\"F16\",\"shape\":[7],\"data_offsets\":[0,14]},"
                     "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[14,20]},"
                     "\"d\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[20,36]}}";
    write_raw(path_of("half.safetensors"), hd, strlen(hd), d, o);
    nb_safetensors *f;
    NB_REQUIRE_OK(nb_safetensors_read(path_of("half.safetensors"), &f));
    const nb_st_tensor *t;
    NB_EXPECT_OK(nb_safetensors_find(f, "h", &t));
    NB_EXPECT(t->data[0] == 1.0f && t->data[1] == -2.0f && t->data[2] == 65504.0f);
    NB_EXPECT(t->data[3] == 5.9604644775390625e-8f && t->data[4] == 0.0f && signbit(t->data[5]) && isinf(t->data[6]));
    NB_EXPECT_OK(nb_safetensors_find(f, "b", &t));
    NB_EXPECT(t->data[0] == 1.0f && t->data[1] == -3.0f);
    NB_EXPECT_NEAR(t->data[2], 1e-20, 1e-22);
    NB_EXPECT_OK(nb_safetensors_find(f, "d", &t));
    NB_EXPECT(t->data[0] == 0.1f && t->data[1] == -1e30f);
    nb_safetensors_free(f);
}

static void expect_bad(const char *name, const char *header, const void *data, size_t dlen, const char *msg) {
    write_raw(path_of(name), header, strlen(header), data, dlen);
    nb_safetensors *f = NULL;
    NB_EXPECT_ERR(nb_safetensors_read(path_of(name), &f), NB_ERR_IO, msg);
}

static void test_corrupt(void) {
    float data[4] = {0};
    nb_safetensors *f;
    NB_EXPECT_ERR(nb_safetensors_read(path_of("missing.safetensors"), &f), NB_ERR_IO, "cannot open");
    FILE *fp = fopen(path_of("short"), "wb");
    fwrite("abc", 1, 3, fp);
    fclose(fp);
    NB_EXPECT_ERR(nb_safetensors_read(path_of("short"), &f), NB_ERR_IO, "shorter than its 8-byte header length");
    /* header length past the end of the file */
    write_raw(path_of("hlen"), "{}", 1000, NULL, 0);
    NB_EXPECT_ERR(nb_safetensors_read(path_of("hlen"), &f), NB_ERR_IO, "truncated or not safetensors");
    expect_bad("json1", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", data, 4, "expected ','");
    expect_bad("json2", "{\"a\" \"x\"}", data, 4, "expected ':'");
    expect_bad("json3", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}xx", data, 4, "trailing");
    expect_bad("dtype", "{\"a\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", data, 16,
               "tensor 'a' has dtype I64; only F32, F16, BF16 and F64");
    expect_bad("noshape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", data, 4, "lacks dtype, shape");
    expect_bad("offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", data, 16,
               "tensor 'a': data_offsets [0, 4] do not match its shape (8 bytes)");
    /* a file cut short: the offsets run past the end of the data */
    expect_bad("trunc", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", data, 10,
               "truncated file?");
    expect_bad("dup", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", data, 4, "duplicate tensor 'a'");
    expect_bad("meta", "{\"__metadata__\":{\"k\":1}}", data, 0, "__metadata__ values must be strings");
    expect_bad("key", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"offsets\":[0,4]}}", data, 4, "unknown key");
    NB_EXPECT_ERR(nb_safetensors_write(path_of("no/dir/x"), 0, NULL, 0, NULL, NULL), NB_ERR_IO, "cannot write");
}

static void cleanup(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
}

int main(int argc, char **argv) {
    if (!mkdtemp(dir)) return 1;
    atexit(cleanup);
    NB_TEST_MAIN(argc, argv, test_roundtrip, test_handmade, test_other_float_dtypes, test_corrupt);
}

/* safetensors.h: round trip, a hand-made file (as PyTorch's safetensors writes it), corrupt
 * files with clear errors (duplicate keys, overlapping or out-of-range offsets, bad escapes), a
 * FIFO in place of the file, and atomic writes (a writer SIGKILLed at random moments never leaves
 * a broken checkpoint). */
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nb_test.h"
#include "nb_test_fifo.h"
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
    NB_EXPECT_ERR(nb_safetensors_write(path_of("no/dir/x"), 0, NULL, 0, NULL, NULL), NB_ERR_IO, "does not exist");
}

/* tests/data/ beside this source file (CMake compiles it by its absolute path). */
static const char *data_path(const char *file) {
    static char buf[1024];
    const char *f = __FILE__, *slash = strrchr(f, '/');
    snprintf(buf, sizeof buf, "%.*s%sdata/%s", slash ? (int)(slash - f) : 0, f, slash ? "/" : "", file);
    return buf;
}

/* Every key of a tensor entry, and every metadata key, may appear once: a second "dtype" that is
 * not a string used to free the first one twice (the 40-byte file aborted the process). */
static void test_duplicate_keys(void) {
    float data[4] = {1, 2, 3, 4};
    nb_safetensors *f = NULL;
    NB_EXPECT_ERR(nb_safetensors_read(data_path("st_dup_dtype.safetensors"), &f), NB_ERR_IO,
                  "tensor 'a': key 'dtype' appears twice");
    NB_EXPECT(f == NULL);
    expect_bad("dup_dtype_num", "{\"a\":{\"dtype\":\"F32\",\"dtype\":1}}", data, 4,
               "tensor 'a': key 'dtype' appears twice");
    expect_bad("dup_dtype_str", "{\"a\":{\"dtype\":\"F16\",\"shape\":[1],\"dtype\":\"F32\",\"data_offsets\":[0,4]}}",
               data, 4, "tensor 'a': key 'dtype' appears twice");
    expect_bad("dup_shape", "{\"a\":{\"shape\":[1],\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}",
               data, 4, "tensor 'a': key 'shape' appears twice");
    expect_bad("dup_offs", "{\"a\":{\"data_offsets\":[0,4],\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
               data, 4, "tensor 'a': key 'data_offsets' appears twice");
    expect_bad("dtype_num", "{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", data, 4,
               "tensor 'a': 'dtype' is not a string");
    expect_bad("dup_meta", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", data, 0,
               "__metadata__ key 'k': appears twice");
    expect_bad("dup_meta_obj", "{\"__metadata__\":{\"k\":\"1\"},\"__metadata__\":{\"j\":\"2\"}}", data, 0,
               "'__metadata__' appears twice");
    /* a duplicate tensor far apart (the name table, not a scan of neighbours) */
    char h[4096];
    int n = snprintf(h, sizeof h, "{");
    for (int i = 0; i < 40; i++)
        n += snprintf(h + n, sizeof h - (size_t)n, "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}",
                      i ? "," : "", i == 39 ? 3 : i);
    snprintf(h + n, sizeof h - (size_t)n, "}");
    expect_bad("dup_far", h, data, 0, "duplicate tensor 't3'");
}

/* data_offsets must stay inside the data section and tensors may not share bytes. */
static void test_offsets(void) {
    float data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    expect_bad("overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                          "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               data, 16, "tensors 'a' (data_offsets [0, 8]) and 'b' (data_offsets [4, 12]) overlap");
    /* the same bytes twice, listed in reverse file order and apart */
    expect_bad("alias", "{\"z\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
                        "\"m\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}",
               data, 32, "and 'y' (data_offsets [16, 24]) overlap");
    /* a small tensor inside a large one that starts earlier, with another in between */
    expect_bad("inside", "{\"big\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]},"
                         "\"s\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[20,24]}}",
               data, 32, "tensors 'big' (data_offsets [0, 24]) and 's' (data_offsets [20, 24]) overlap");
    expect_bad("past_end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[28,36]}}", data, 32,
               "tensor 'a': data_offsets [28, 36] run past the end of the data section (32 bytes");
    expect_bad("huge_off", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[1000000000000000000,1000000000000000004]}}",
               data, 32, "run past the end of the data section");
    expect_bad("reversed", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", data, 32,
               "tensor 'a': data_offsets [8, 4] do not match its shape");
    /* adjacent tensors, an empty tensor at a boundary and a gap are fine */
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                     "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[28,32]}}";
    write_raw(path_of("adjacent"), ok, strlen(ok), data, 32);
    nb_safetensors *f = NULL;
    NB_REQUIRE_OK(nb_safetensors_read(path_of("adjacent"), &f));
    const nb_st_tensor *t;
    NB_EXPECT_OK(nb_safetensors_find(f, "b", &t));
    NB_EXPECT(t->data[0] == 3 && t->data[1] == 4);
    NB_EXPECT_OK(nb_safetensors_find(f, "c", &t));
    NB_EXPECT(t->data[0] == 8);
    nb_safetensors_free(f);
}

/* JSON string escapes: \u as UTF-8 (surrogate pairs too); bad escapes are errors. */
static void test_escapes(void) {
    float data[2] = {1, 2};
    const char *h = "{\"w\\u00e9\\ud83d\\ude00\\/x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    write_raw(path_of("esc"), h, strlen(h), data, 4);
    nb_safetensors *f = NULL;
    NB_REQUIRE_OK(nb_safetensors_read(path_of("esc"), &f));
    const nb_st_tensor *t;
    NB_EXPECT_OK(nb_safetensors_find(f, "w\xc3\xa9\xf0\x9f\x98\x80/x", &t));
    nb_safetensors_free(f);
    expect_bad("esc_hex", "{\"a\\u00zz\":{}}", data, 0, "bad hex digit");
    expect_bad("esc_nul", "{\"a\\u0000b\":{}}", data, 0, "\\u0000 in a string");
    expect_bad("esc_sur", "{\"a\\ud800\":{}}", data, 0, "unpaired surrogate");
    expect_bad("esc_q", "{\"a\\q\":{}}", data, 0, "unknown escape");
}

static nb_status read_st(const char *p) {
    nb_safetensors *f = NULL;
    nb_status s = nb_safetensors_read(p, &f);
    nb_safetensors_free(f);
    return s;
}

/* A FIFO (or a directory) in place of the file is refused at once. */
static void test_fifo(void) {
    NB_EXPECT(nb_test_fifo_refused(path_of("fifo.safetensors"), read_st));
    NB_EXPECT(mkdir(path_of("dir.safetensors"), 0700) == 0);
    nb_safetensors *f = NULL;
    NB_EXPECT_ERR(nb_safetensors_read(path_of("dir.safetensors"), &f), NB_ERR_IO, "not a regular file");
}

/* A checkpoint of 2 x 1 Mi floats whose values all equal `v` (and metadata saying so). */
#define CK_N (1 << 20)
static nb_status write_ck(const char *p, float *buf, int v) {
    for (int i = 0; i < 2 * CK_N; i++) buf[i] = (float)v;
    char vs[32];
    snprintf(vs, sizeof vs, "%d", v);
    const char *keys[] = {"version"}, *vals[] = {vs};
    nb_st_tensor ts[2] = {{"w", 2, {1024, 1024}, buf}, {"b", 1, {CK_N}, buf + CK_N}};
    return nb_safetensors_write(p, 2, ts, 1, keys, vals);
}
/* Complete and self-consistent: every value equals the version in the metadata. */
static int check_ck(const char *p, int *version) {
    nb_safetensors *f = NULL;
    if (nb_safetensors_read(p, &f) != NB_OK) {
        fprintf(stderr, "  checkpoint unreadable: %s\n", nb_last_error());
        return 0;
    }
    const char *v = NULL;
    const nb_st_tensor *w, *b;
    int ok = nb_safetensors_meta(f, "version", &v) == NB_OK && v && nb_safetensors_find(f, "w", &w) == NB_OK &&
             nb_safetensors_find(f, "b", &b) == NB_OK;
    if (ok) {
        *version = atoi(v);
        for (int i = 0; ok && i < CK_N; i++) ok = w->data[i] == (float)*version && b->data[i] == (float)*version;
    }
    nb_safetensors_free(f);
    return ok;
}

/* A child rewrites an 8 MB checkpoint in a loop, reporting each completed write on a pipe; after
 * 0-2 completed writes (so that kills land both before and between writes, never only before the
 * first one however loaded the machine is) plus a random 0-40 ms, it is SIGKILLed. After each kill
 * the file must be a complete checkpoint: the previous one or a new one. */
static void test_atomic_write_killed(void) {
    const char *p = path_of("ck.safetensors");
    float *buf = malloc(sizeof(float) * 2 * CK_N);
    NB_REQUIRE_OK(buf ? NB_OK : NB_ERR_OUT_OF_MEMORY);
    NB_REQUIRE_OK(write_ck(p, buf, 0));
    srand((unsigned)time(NULL));
    int last = 0, changed = 0;
    for (int round = 1; round <= 20; round++) {
        int fds[2];
        NB_REQUIRE_OK(pipe(fds) == 0 ? NB_OK : NB_ERR_IO);
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            for (int v = round * 1000;; v++) {
                if (write_ck(p, buf, v) != NB_OK) _exit(3);
                if (write(fds[1], "w", 1) != 1) _exit(4);
            }
        }
        NB_REQUIRE_OK(pid > 0 ? NB_OK : NB_ERR_INTERNAL);
        close(fds[1]);
        int done = round == 1 ? 1 : rand() % 3;
        for (int k = 0; k < done; k++) {
            char c;
            if (read(fds[0], &c, 1) != 1) break;
        }
        usleep((useconds_t)(rand() % 40000));
        kill(pid, SIGKILL);
        int st = 0;
        waitpid(pid, &st, 0);
        close(fds[0]);
        NB_EXPECT(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        int v = -1;
        if (!check_ck(p, &v)) {
            fprintf(stderr, "  round %d: the checkpoint is broken after SIGKILL\n", round);
            NB_EXPECT(0);
            break;
        }
        NB_EXPECT(v == last || v >= round * 1000);
        NB_EXPECT(!done || v >= round * 1000); /* a completed write is never lost */
        changed += v != last;
        last = v;
    }
    free(buf);
    NB_EXPECT(changed > 0);
}

static void cleanup(void) { nb_test_rm_rf(dir); }

int main(int argc, char **argv) {
    if (!mkdtemp(dir)) return 1;
    atexit(cleanup);
    NB_TEST_MAIN(argc, argv, test_roundtrip, test_handmade, test_other_float_dtypes, test_corrupt,
                 test_duplicate_keys, test_offsets, test_escapes, test_fifo, test_atomic_write_killed);
}

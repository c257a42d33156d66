/* Core: status and messages, logging, allocator hooks, arena, hash, string builder, thread pool,
 * dtypes and half-precision conversion. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/hash.h"
#include "core/strbuf.h"
#include "core/threadpool.h"
#include "core/util.h"
#include "nb_test.h"

static void test_status_messages(void) {
    nb_clear_error();
    NB_EXPECT(nb_last_error()[0] == '\0');
    nb_status s = nb_error(NB_ERR_SHAPE, "argument '%s' has shape %s", "x", "[2,3]");
    NB_EXPECT(s == NB_ERR_SHAPE);
    NB_EXPECT(strcmp(nb_last_error(), "argument 'x' has shape [2,3]") == 0);
    NB_EXPECT(strcmp(nb_status_name(NB_ERR_LAYOUT), "NB_ERR_LAYOUT") == 0);
    NB_EXPECT(strcmp(nb_status_name((nb_status)999), "NB_ERR_UNKNOWN") == 0);
    NB_EXPECT(strcmp(nb_version(), NABLA_VERSION_STRING) == 0);
}

static void *thread_sets_error(void *arg) {
    nb_error(NB_ERR_IO, "from another thread");
    return NULL;
}

static void test_error_is_thread_local(void) {
    nb_error(NB_ERR_DTYPE, "main thread");
    pthread_t t;
    pthread_create(&t, NULL, thread_sets_error, NULL);
    pthread_join(t, NULL);
    NB_EXPECT(strcmp(nb_last_error(), "main thread") == 0);
}

/* nb_error may be given its own message (issue #21: it formatted into the buffer it read from,
 * so "context: %s" with nb_last_error() printed garbage or only the context). */
static void test_error_wraps_last_error(void) {
    nb_error(NB_ERR_IO, "cannot open '%s'", "a.bin");
    nb_error(NB_ERR_IO, "loading weights: %s", nb_last_error());
    NB_EXPECT(strcmp(nb_last_error(), "loading weights: cannot open 'a.bin'") == 0);
    /* Twice more, and as the only argument. */
    nb_error(NB_ERR_IO, "%s (again)", nb_last_error());
    nb_error(NB_ERR_IO, "%s", nb_last_error());
    NB_EXPECT(strcmp(nb_last_error(), "loading weights: cannot open 'a.bin' (again)") == 0);
    /* A message saved before one more error is still intact for the error after it. */
    const char *saved = nb_last_error();
    nb_error(NB_ERR_SHAPE, "something else");
    nb_error(NB_ERR_IO, "[%s] after [%s]", saved, nb_last_error());
    NB_EXPECT(strcmp(nb_last_error(),
                     "[loading weights: cannot open 'a.bin' (again)] after [something else]") == 0);
    /* Long messages wrapped into longer ones (the heap path), several levels deep. */
    size_t n = 20000;
    char *big = malloc(n + 1);
    NB_REQUIRE_OK(big ? NB_OK : NB_ERR_OUT_OF_MEMORY);
    memset(big, 'x', n);
    big[n] = '\0';
    nb_error(NB_ERR_COMPILE, "%s", big);
    for (int i = 0; i < 3; i++) nb_error(NB_ERR_COMPILE, "level %d: %s", i, nb_last_error());
    const char *m = nb_last_error();
    NB_EXPECT(strlen(m) == n + 3 * strlen("level 0: "));
    NB_EXPECT(strncmp(m, "level 2: level 1: level 0: xxx", 30) == 0);
    NB_EXPECT(m[strlen(m) - 1] == 'x');
    free(big);
    nb_clear_error();
    NB_EXPECT(nb_last_error()[0] == '\0');
}

/* The message has no length limit: the real error after a long list of warnings is kept
 * (issue #21: messages were cut at 4096 bytes). */
static void test_long_error_not_cut(void) {
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    for (int i = 0; i < 500; i++)
        nb_strbuf_printf(&sb, "f.nb:%d:1: warning: unknown attribute 'Foo%d' ignored\n[Foo%d] float "
                         "f%d(float x) { return x; }\n^\n", i + 1, i, i, i);
    nb_strbuf_append(&sb, "f.nb:501:5: error: undefined identifier 'nope'");
    NB_REQUIRE_OK(nb_strbuf_ok(&sb) ? NB_OK : NB_ERR_OUT_OF_MEMORY);
    nb_error(NB_ERR_COMPILE, "%s", nb_strbuf_cstr(&sb));
    NB_EXPECT(strlen(nb_last_error()) == sb.len);
    NB_EXPECT(strstr(nb_last_error(), "error: undefined identifier 'nope'") != NULL);
    nb_strbuf_free(&sb);
}

/* Each thread's message is its own, however long, and is freed when the thread ends (the
 * sanitizer build reports a leak otherwise). */
static void *thread_sets_long_error(void *arg) {
    (void)arg;
    for (int i = 0; i < 4; i++) nb_error(NB_ERR_IO, "%0*d", 5000 + i, 7);
    return (void *)(size_t)strlen(nb_last_error());
}

static void test_long_error_per_thread(void) {
    nb_error(NB_ERR_DTYPE, "main thread");
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, thread_sets_long_error, NULL);
    for (int i = 0; i < 4; i++) {
        void *len = NULL;
        pthread_join(t[i], &len);
        NB_EXPECT((size_t)len == 5003);
    }
    NB_EXPECT(strcmp(nb_last_error(), "main thread") == 0);
}

static int sink_count;
static char sink_last[256];
static void count_sink(nb_log_level lv, const char *msg, void *user) {
    sink_count++;
    snprintf(sink_last, sizeof sink_last, "%s", msg);
}

static void test_logging_levels(void) {
    NB_EXPECT(nb_log_parse_level("debug") == NB_LOG_DEBUG);
    NB_EXPECT(nb_log_parse_level("WARN") == NB_LOG_WARN);
    NB_EXPECT(nb_log_parse_level("off") == NB_LOG_OFF);
    NB_EXPECT(nb_log_parse_level("loud") == -1);
    NB_EXPECT(nb_log_parse_level(NULL) == -1);
    nb_log_level saved = nb_log_get_level();
    nb_log_set_sink(count_sink, NULL);
    nb_log_set_level(NB_LOG_WARN);
    sink_count = 0;
    NB_LOG_I("hidden %d", 1);
    NB_LOG_W("shown %d", 2);
    NB_LOG_E("shown %d", 3);
    NB_EXPECT(sink_count == 2);
    NB_EXPECT(strcmp(sink_last, "shown 3") == 0);
    nb_log_set_level(NB_LOG_OFF);
    NB_LOG_E("hidden");
    NB_EXPECT(sink_count == 2);
    nb_log_set_sink(NULL, NULL);
    nb_log_set_level(saved);
}

static size_t hook_allocs, hook_frees;
static void *hook_alloc(size_t size, size_t align, void *user) {
    hook_allocs++;
    return aligned_alloc(align, nb_align_up(size ? size : 1, align));
}
static void hook_free(void *p, size_t size, void *user) {
    hook_frees++;
    free(p);
}

static void test_allocator_hooks(void) {
    nb_allocator a = {hook_alloc, hook_free, NULL};
    nb_set_allocator(&a);
    hook_allocs = hook_frees = 0;
    void *p = nb_alloc(100, 64);
    NB_EXPECT(p && ((uintptr_t)p % 64) == 0);
    nb_free(p, 100);
    NB_EXPECT(hook_allocs == 1 && hook_frees == 1);
    nb_set_allocator(NULL);
    p = nb_alloc(10, 0); /* bad alignment falls back to 16 */
    NB_EXPECT(p && ((uintptr_t)p % 16) == 0);
    nb_free(p, 10);
    NB_EXPECT(hook_allocs == 1);
}

static void test_arena(void) {
    nb_arena a;
    nb_arena_init(&a, 256);
    char *s = nb_arena_strdup(&a, "hello");
    NB_EXPECT(strcmp(s, "hello") == 0);
    for (int i = 0; i < 1000; i++) {
        size_t align = (size_t)1 << (i % 8);
        unsigned char *p = nb_arena_alloc(&a, (size_t)(i % 37) + 1, align);
        NB_EXPECT(p && ((uintptr_t)p % align) == 0);
        memset(p, 0xab, (size_t)(i % 37) + 1);
    }
    void *big = nb_arena_zalloc(&a, 100000, 64); /* larger than a chunk */
    NB_EXPECT(big && ((unsigned char *)big)[99999] == 0);
    NB_EXPECT(strcmp(s, "hello") == 0); /* earlier allocations survive */
    NB_EXPECT(nb_arena_alloc(&a, 8, 3) == NULL); /* non-power-of-two alignment */
    nb_arena_reset(&a);
    NB_EXPECT(a.bytes_used == 0);
    void *again = nb_arena_alloc(&a, 50000, 16); /* served from the kept chunk */
    NB_EXPECT(again != NULL);
    nb_arena_destroy(&a);
}

static void test_hash(void) {
    /* Published xxHash64 test vectors (seed 0). */
    NB_EXPECT(nb_hash64("", 0, 0) == 0xEF46DB3751D8E999ULL);
    NB_EXPECT(nb_hash64("abc", 3, 0) == 0x44BC2CF5AD770999ULL);
    /* Streaming equals one-shot over any split. */
    char data[300];
    for (int i = 0; i < 300; i++) data[i] = (char)(i * 7 + 3);
    uint64_t whole = nb_hash64(data, sizeof data, 42);
    for (size_t split = 0; split <= sizeof data; split += 13) {
        nb_hasher h;
        nb_hasher_init(&h, 42);
        nb_hasher_update(&h, data, split);
        nb_hasher_update(&h, data + split, sizeof data - split);
        NB_EXPECT(nb_hasher_final(&h) == whole);
    }
    NB_EXPECT(nb_hash64(data, 299, 42) != whole);
    NB_EXPECT(nb_hash64(data, 300, 43) != whole);
    char hex[17];
    nb_hash_hex(0x0123456789abcdefULL, hex);
    NB_EXPECT(strcmp(hex, "0123456789abcdef") == 0);
}

static void test_strbuf(void) {
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    NB_EXPECT(strcmp(nb_strbuf_cstr(&sb), "") == 0);
    nb_strbuf_append(&sb, "x = ");
    nb_strbuf_printf(&sb, "%d, %s", 42, "y");
    nb_strbuf_append_char(&sb, '!');
    NB_EXPECT(strcmp(nb_strbuf_cstr(&sb), "x = 42, y!") == 0);
    for (int i = 0; i < 1000; i++) nb_strbuf_printf(&sb, "%04d", i);
    NB_EXPECT(sb.len == 10 + 4000 && nb_strbuf_ok(&sb));
    NB_EXPECT(strncmp(sb.data + 10 + 4 * 999, "0999", 4) == 0);
    size_t len;
    char *s = nb_strbuf_take(&sb, &len);
    NB_EXPECT(len == 4010 && s[len] == '\0' && sb.len == 0);
    nb_free(s, len + 1);
    nb_strbuf_free(&sb);
}

typedef struct {
    atomic_llong sum;
    atomic_int calls;
    nb_threadpool *pool;
} pool_ctx;

static void add_range(void *ctx, int64_t b, int64_t e) {
    pool_ctx *c = ctx;
    long long s = 0;
    for (int64_t i = b; i < e; i++) s += i;
    atomic_fetch_add(&c->sum, s);
    atomic_fetch_add(&c->calls, 1);
}

static void nested_range(void *ctx, int64_t b, int64_t e) {
    pool_ctx *c = ctx;
    for (int64_t i = b; i < e; i++) nb_threadpool_run(c->pool, 10, 1, add_range, c); /* inline */
}

static void test_threadpool(void) {
    nb_threadpool *p;
    NB_REQUIRE_OK(nb_threadpool_create(4, &p));
    NB_EXPECT(nb_threadpool_size(p) == 4);
    for (int rep = 0; rep < 50; rep++) {
        pool_ctx c = {.pool = p};
        int64_t n = 100000 + rep;
        nb_threadpool_run(p, n, 1, add_range, &c);
        NB_EXPECT(atomic_load(&c.sum) == (long long)(n * (n - 1) / 2));
    }
    pool_ctx c = {.pool = p};
    nb_threadpool_run(p, 8, 1, nested_range, &c);
    NB_EXPECT(atomic_load(&c.sum) == 8 * 45);
    pool_ctx z = {.pool = p};
    nb_threadpool_run(p, 0, 1, add_range, &z);
    NB_EXPECT(atomic_load(&z.calls) == 0);
    nb_threadpool_destroy(p);
    NB_EXPECT_ERR(nb_threadpool_create(0, &p), NB_ERR_INVALID_ARG, "threads=0");
    NB_EXPECT(nb_threadpool_global() != NULL);
}

static void test_dtypes(void) {
    NB_EXPECT(nb_dtype_size(NB_F32) == 4 && nb_dtype_size(NB_BF16) == 2 && nb_dtype_size(NB_BOOL) == 1);
    NB_EXPECT(nb_dtype_size((nb_dtype)99) == 0);
    NB_EXPECT(strcmp(nb_dtype_name(NB_I64), "i64") == 0);
    NB_EXPECT(strcmp(nb_dtype_name((nb_dtype)-1), "invalid") == 0);
    for (int t = 0; t < NB_DTYPE_COUNT; t++) NB_EXPECT(nb_dtype_from_name(nb_dtype_name((nb_dtype)t)) == t);
    NB_EXPECT(nb_dtype_from_name("float32") == NB_F32);
    NB_EXPECT(nb_dtype_from_name("f128") == -1);
    NB_EXPECT(nb_dtype_is_float(NB_BF16) && !nb_dtype_is_float(NB_U8));
}

static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static void test_half_conversion(void) {
    NB_EXPECT(nb_f32_to_f16(1.0f) == 0x3C00);
    NB_EXPECT(nb_f32_to_f16(-2.0f) == 0xC000);
    NB_EXPECT(nb_f32_to_f16(65504.0f) == 0x7BFF);
    NB_EXPECT(nb_f32_to_f16(65520.0f) == 0x7C00);  /* rounds up to inf */
    NB_EXPECT(nb_f32_to_f16(5.9604645e-8f) == 0x0001); /* smallest subnormal */
    NB_EXPECT(nb_f32_to_f16(2.9802322e-8f) == 0x0000); /* exactly half of it: ties to even */
    NB_EXPECT(nb_f32_to_f16(0.1f) == 0x2E66);
    NB_EXPECT((nb_f32_to_f16(bitsf(0x7fc00000u)) & 0x7fff) > 0x7c00); /* NaN stays NaN */
    /* Every half converts to float and back unchanged (NaNs stay NaN). */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = nb_f16_to_f32((uint16_t)h);
        uint16_t back = nb_f32_to_f16(f);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) NB_EXPECT(f != f && (back & 0x7fff) > 0x7c00);
        else if (back != h) { NB_EXPECT(back == h); break; }
    }
#ifdef __FLT16_MAX__
    /* Against the compiler's own rounding on many random floats around the half range. */
    uint32_t x = 12345;
    for (int i = 0; i < 200000; i++) {
        x = x * 1664525u + 1013904223u;
        uint32_t bits = (x & 0x8000ffffu) | ((uint32_t)(100 + (x >> 16) % 60) << 23) | ((x >> 7) & 0x7f0000u);
        float f = bitsf(bits);
        _Float16 ref = (_Float16)f;
        uint16_t rb;
        memcpy(&rb, &ref, 2);
        if (nb_f32_to_f16(f) != rb) { NB_EXPECT(nb_f32_to_f16(f) == rb); break; }
    }
#endif
    NB_EXPECT(nb_f32_to_bf16(1.0f) == 0x3F80);
    NB_EXPECT(nb_bf16_to_f32(0x3F80) == 1.0f);
    NB_EXPECT(nb_f32_to_bf16(bitsf(0x3F808000u)) == 0x3F80); /* tie → even */
    NB_EXPECT(nb_f32_to_bf16(bitsf(0x3F818000u)) == 0x3F82); /* tie → even (up) */
    NB_EXPECT(nb_f32_to_bf16(bitsf(0x3F808001u)) == 0x3F81);
    float nan = bitsf(0x7f800001u);
    NB_EXPECT(nb_bf16_to_f32(nb_f32_to_bf16(nan)) != nb_bf16_to_f32(nb_f32_to_bf16(nan)));
    NB_EXPECT(fbits(nb_bf16_to_f32(nb_f32_to_bf16(bitsf(0x7f800000u)))) == 0x7f800000u);
}

static void test_convert(void) {
    float f[4] = {1.5f, -2.25f, 0.0f, 1e10f};
    int32_t i[4];
    nb_convert(i, NB_I32, f, NB_F32, 4);
    NB_EXPECT(i[0] == 1 && i[1] == -2 && i[2] == 0 && i[3] == INT32_MAX);
    uint16_t h[4];
    nb_convert(h, NB_F16, f, NB_F32, 4);
    NB_EXPECT(h[0] == nb_f32_to_f16(1.5f) && h[3] == 0x7C00);
    double d[4];
    nb_convert(d, NB_F64, h, NB_F16, 4);
    NB_EXPECT(d[0] == 1.5 && d[1] == -2.25);
    uint8_t b[4];
    nb_convert(b, NB_BOOL, f, NB_F32, 4);
    NB_EXPECT(b[0] == 1 && b[2] == 0);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_status_messages, test_error_is_thread_local,
                 test_error_wraps_last_error, test_long_error_not_cut, test_long_error_per_thread,
                 test_logging_levels,
                 test_allocator_hooks, test_arena, test_hash, test_strbuf, test_threadpool,
                 test_dtypes, test_half_conversion, test_convert);
}

/* nb_tensor's copy paths for non-host memory, run without a GPU: a fake "device" whose memory
 * lives in host RAM but is handed out under addresses that fault if dereferenced, so any path
 * that touches device memory other than through the device's copy ops crashes the test. Every
 * copy is compared against the same copy done on the CPU device (checked in test_tensor.c).
 * The real CUDA backend is tested against the CPU by the CUDA tests; this covers the staging
 * logic (strided GPU sides, read-modify-write of gappy destinations, overlap, two devices). */
#include <stdlib.h>

#include "device/device_impl.h"
#include "nb_test.h"

#define S(...) ((const int64_t[]){__VA_ARGS__})

/* Device addresses are host addresses with bit 52 flipped: non-canonical on x86-64 and beyond
 * a 48-bit address space on arm64, so a stray dereference faults. */
#define FAKE_BIT ((uintptr_t)1 << 52)
#define to_host(p) ((void *)((uintptr_t)(p) ^ FAKE_BIT)) /* a macro: not a read of *p */

static int n_h2d, n_d2h, n_d2d, n_memset;

static nb_status fake_alloc(nb_device *dev, size_t bytes, void **ptr) {
    void *p = malloc(bytes);
    if (!p) return NB_ERR_OUT_OF_MEMORY;
    *ptr = to_host(p);
    return NB_OK;
}
static void fake_free(nb_device *dev, void *ptr, size_t bytes) { free(to_host(ptr)); }
static nb_status fake_h2d(nb_device *dev, void *dst, const void *src, size_t bytes) {
    n_h2d++;
    memcpy(to_host(dst), src, bytes);
    return NB_OK;
}
static nb_status fake_d2h(nb_device *dev, void *dst, const void *src, size_t bytes) {
    n_d2h++;
    memcpy(dst, to_host(src), bytes);
    return NB_OK;
}
static nb_status fake_d2d(nb_device *dev, void *dst, const void *src, size_t bytes) {
    n_d2d++;
    memmove(to_host(dst), to_host(src), bytes);
    return NB_OK;
}
static nb_status fake_memset(nb_device *dev, void *dst, int byte, size_t bytes) {
    n_memset++;
    memset(to_host(dst), byte, bytes);
    return NB_OK;
}
static nb_status fake_sync(nb_device *dev) { return NB_OK; }

static const nb_device_ops fake_ops = {
    .raw_alloc = fake_alloc,
    .raw_free = fake_free,
    .h2d = fake_h2d,
    .d2h = fake_d2h,
    .d2d = fake_d2d,
    .memset = fake_memset,
    .synchronize = fake_sync,
};

static nb_device fake[2];

static void fake_open(void) {
    for (int i = 0; i < 2; i++) {
        memset(&fake[i], 0, sizeof fake[i]);
        fake[i].ops = &fake_ops;
        fake[i].kind = NB_DEVICE_CUDA;
        fake[i].index = i;
        fake[i].refcount = 1;
        snprintf(fake[i].name, sizeof fake[i].name, "fake:%d", i);
        fake[i].main_stream.dev = &fake[i];
        nb_cache_init(&fake[i].cache);
    }
}

static void fake_close(void) {
    for (int i = 0; i < 2; i++) {
        NB_EXPECT(fake[i].cache.stats.bytes_in_use == 0); /* every buffer was released */
        nb_cache_destroy(&fake[i]);
    }
}

static int64_t numel_of(int nd, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    return n;
}

/* i32 tensor on dev holding start, start+1, … in C order. */
static nb_tensor *iota(nb_device *dev, int nd, const int64_t *shape, int32_t start) {
    int64_t n = numel_of(nd, shape);
    int32_t *h = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) h[i] = start + (int32_t)i;
    nb_tensor *t = NULL;
    if (nb_tensor_from_host(dev, NB_I32, nd, shape, h, &t) != NB_OK) t = NULL;
    free(h);
    return t;
}

/* Whole contents of two tensors of one shape, as host arrays, are equal. */
static int same_contents(const nb_tensor *a, const nb_tensor *b) {
    size_t n = nb_tensor_nbytes(a);
    if (n != nb_tensor_nbytes(b)) return 0;
    char *x = malloc(n + 1), *y = malloc(n + 1);
    int ok = nb_tensor_to_host(a, x, n) == NB_OK && nb_tensor_to_host(b, y, n) == NB_OK &&
             memcmp(x, y, n) == 0;
    free(x);
    free(y);
    return ok;
}

static void test_fake_basic(void) {
    nb_device *cpu = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    fake_open();
    nb_tensor *g = iota(&fake[0], 2, S(4, 6), 0), *c = iota(cpu, 2, S(4, 6), 0), *gt = NULL,
              *ct = NULL, *gc = NULL, *cc = NULL;
    NB_EXPECT(g && c);
    char buf[128];
    NB_EXPECT(!strcmp(nb_tensor_describe(g, buf, sizeof buf), "i32[4,6] strides=[24,4] fake:0"));

    /* Contiguous both ways: exactly one copy op each. */
    n_h2d = n_d2h = n_d2d = 0;
    nb_tensor *g2 = NULL;
    NB_REQUIRE_OK(nb_tensor_to(g, NULL, &g2));
    NB_EXPECT(n_d2d == 1 && n_h2d == 0 && n_d2h == 0);
    NB_EXPECT(same_contents(g2, c) && n_d2h == 1);
    nb_tensor_free(g2);

    /* Transposed GPU tensor to host and to a contiguous GPU tensor (staged). */
    NB_REQUIRE_OK(nb_tensor_transpose(g, 0, 1, &gt));
    NB_REQUIRE_OK(nb_tensor_transpose(c, 0, 1, &ct));
    NB_EXPECT(same_contents(gt, ct));
    NB_REQUIRE_OK(nb_tensor_contiguous(gt, &gc));
    NB_REQUIRE_OK(nb_tensor_contiguous(ct, &cc));
    NB_EXPECT(nb_tensor_is_contiguous(gc) && same_contents(gc, cc));
    nb_tensor_free(gc);
    nb_tensor_free(cc);

    /* GPU <-> CPU in every combination of layouts. */
    NB_REQUIRE_OK(nb_tensor_to(gt, cpu, &cc)); /* strided fake -> contiguous cpu */
    NB_EXPECT(nb_tensor_device(cc) == cpu && same_contents(cc, ct));
    NB_REQUIRE_OK(nb_tensor_empty(&fake[0], NB_I32, 2, S(6, 4), &gc));
    NB_EXPECT_OK(nb_tensor_copy(gc, ct)); /* strided cpu -> contiguous fake */
    NB_EXPECT(same_contents(gc, ct));
    nb_tensor_free(gc);
    nb_tensor_free(cc);

    /* Two devices: through the host. */
    NB_REQUIRE_OK(nb_tensor_to(gt, &fake[1], &gc));
    NB_EXPECT(nb_tensor_device(gc) == &fake[1] && same_contents(gc, ct));
    nb_tensor *back = NULL;
    NB_REQUIRE_OK(nb_tensor_to(gc, &fake[0], &back));
    NB_EXPECT(same_contents(back, ct));
    nb_tensor_free(back);
    nb_tensor_free(gc);

    /* Scalars and empty tensors. */
    nb_tensor *s = NULL;
    NB_REQUIRE_OK(nb_tensor_select(gt, 0, 5, &gc)); /* column 5 of g: [4] stride 24 */
    NB_REQUIRE_OK(nb_tensor_select(gc, 0, 3, &s));
    int32_t x = 0;
    NB_EXPECT_OK(nb_tensor_to_host(s, &x, 4));
    NB_EXPECT(x == 3 * 6 + 5);
    nb_tensor_free(s);
    nb_tensor_free(gc);
    NB_REQUIRE_OK(nb_tensor_slice(g, 0, 2, 2, 1, &gc));
    NB_EXPECT_OK(nb_tensor_to_host(gc, NULL, 0));
    NB_EXPECT_OK(nb_tensor_fill_bytes(gc, 0));
    nb_tensor_free(gc);

    nb_tensor_free(gt);
    nb_tensor_free(ct);
    nb_tensor_free(g);
    nb_tensor_free(c);
    fake_close();
    nb_device_close(cpu);
}

/* Writes into gappy GPU views (read-modify-write) must leave the gaps alone. */
static void test_fake_gappy_writes(void) {
    nb_device *cpu = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    fake_open();
    nb_tensor *g = iota(&fake[0], 2, S(4, 6), 0), *c = iota(cpu, 2, S(4, 6), 0);
    nb_tensor *gv = NULL, *cv = NULL, *gb = NULL, *cb = NULL;
    NB_REQUIRE_OK(nb_tensor_slice(g, 1, 1, 6, 2, &gv)); /* [4,3], columns 1,3,5 */
    NB_REQUIRE_OK(nb_tensor_slice(c, 1, 1, 6, 2, &cv));
    int32_t in[12];
    for (int i = 0; i < 12; i++) in[i] = -1 - i;
    NB_EXPECT_OK(nb_tensor_from_host_into(gv, in, sizeof in));
    NB_EXPECT_OK(nb_tensor_from_host_into(cv, in, sizeof in));
    NB_EXPECT(same_contents(g, c));
    n_memset = 0;
    NB_EXPECT_OK(nb_tensor_fill_bytes(gv, 0x7f));
    NB_EXPECT_OK(nb_tensor_fill_bytes(cv, 0x7f));
    NB_EXPECT(n_memset == 0 && same_contents(g, c)); /* not dense: no flat memset */

    /* Broadcast source into a transposed GPU destination. */
    nb_tensor *r = iota(cpu, 1, S(4), 100), *gt = NULL, *ct = NULL;
    NB_REQUIRE_OK(nb_tensor_broadcast_to(r, 2, S(6, 4), &cb));
    NB_REQUIRE_OK(nb_tensor_transpose(g, 0, 1, &gt));
    NB_REQUIRE_OK(nb_tensor_transpose(c, 0, 1, &ct));
    NB_EXPECT_OK(nb_tensor_copy(gt, cb));
    NB_EXPECT_OK(nb_tensor_copy(ct, cb));
    NB_EXPECT(same_contents(g, c));
    /* Dense (transposed) fill is one memset; broadcast GPU views fill too. */
    n_memset = 0;
    NB_EXPECT_OK(nb_tensor_fill_bytes(gt, 0x11));
    NB_EXPECT_OK(nb_tensor_fill_bytes(ct, 0x11));
    NB_EXPECT(n_memset == 1 && same_contents(g, c)); /* the fake's one; the cpu's is not counted */
    nb_tensor_free(gt);
    nb_tensor_free(ct);
    NB_REQUIRE_OK(nb_tensor_select(g, 1, 2, &gt));
    NB_REQUIRE_OK(nb_tensor_broadcast_to(gt, 2, S(3, 4), &gb));
    NB_EXPECT_OK(nb_tensor_fill_bytes(gb, 0));
    nb_tensor_free(gb);
    nb_tensor_free(gt);
    NB_REQUIRE_OK(nb_tensor_select(c, 1, 2, &ct));
    NB_REQUIRE_OK(nb_tensor_broadcast_to(ct, 2, S(3, 4), &gb));
    NB_EXPECT_OK(nb_tensor_fill_bytes(gb, 0));
    nb_tensor_free(gb);
    nb_tensor_free(ct);
    NB_EXPECT(same_contents(g, c));

    nb_tensor_free(cb);
    nb_tensor_free(r);
    nb_tensor_free(gv);
    nb_tensor_free(cv);
    nb_tensor_free(g);
    nb_tensor_free(c);
    fake_close();
    nb_device_close(cpu);
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* A random [shape] view of the 1-d base b (reshape of a window, permute, steps, maybe one
 * broadcast dim); NULL if it does not fit. Deterministic given the rng state, so the same call
 * sequence builds the same view on a CPU mirror. */
static nb_tensor *random_view(const nb_tensor *b, int nd, const int64_t *shape, int allow_bcast) {
    int64_t len = nb_tensor_numel(b), need = 1, big[NB_MAX_DIMS], step[NB_MAX_DIMS];
    int perm[NB_MAX_DIMS], inv[NB_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        step[i] = 1 + rnd(2);
        perm[i] = i;
    }
    for (int i = nd - 1; i > 0; i--) {
        int j = (int)rnd((uint32_t)i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int i = 0; i < nd; i++) {
        big[i] = shape[perm[i]] * step[perm[i]];
        need *= big[i];
        inv[perm[i]] = i;
    }
    int64_t off = need <= len ? rnd((uint32_t)(len - need + 1)) : 0;
    int k = nd ? (int)rnd((uint32_t)nd) : 0, bc = allow_bcast && nd && rnd(3) == 0;
    if (need > len) return NULL;
    nb_tensor *flat = NULL, *r = NULL, *p = NULL, *v = NULL;
    nb_tensor_slice(b, 0, off, off + need, 1, &flat);
    nb_tensor_reshape(flat, nd, big, &r);
    nb_tensor_permute(r, inv, &p);
    nb_tensor_free(flat);
    nb_tensor_free(r);
    for (int i = 0; i < nd; i++) {
        nb_tensor_slice(p, i, 0, shape[i] * step[i], step[i], &v);
        nb_tensor_free(p);
        p = v;
    }
    if (bc) {
        nb_tensor_slice(p, k, 0, 1, 1, &v);
        nb_tensor_free(p);
        nb_tensor_broadcast_to(v, nd, shape, &p);
        nb_tensor_free(v);
    }
    return p;
}

/* Random layouts on random memories (cpu, fake:0, fake:1), often overlapping in one buffer,
 * mirrored on the CPU device; afterwards both whole buffers must agree. */
static void test_fake_random(void) {
    nb_device *cpu = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    fake_open();
    nb_device *devs[3] = {cpu, &fake[0], &fake[1]};
    int done = 0;
    for (int iter = 0; iter < 400 && !nb_test_failures_; iter++) {
        int nd = (int)rnd(5);
        int64_t shape[NB_MAX_DIMS];
        for (int i = 0; i < nd; i++) shape[i] = rnd(5) + (rnd(8) ? 1 : 0);
        nb_device *ds = devs[rnd(3)], *dd = rnd(2) ? ds : devs[rnd(3)];
        nb_tensor *b1 = iota(ds, 1, S(300), 0), *b2 = iota(dd, 1, S(300), 1000);
        nb_tensor *m1 = iota(cpu, 1, S(300), 0), *m2 = iota(cpu, 1, S(300), 1000);
        int shared = ds == dd && rnd(2);
        uint64_t saved = rng;
        nb_tensor *src = random_view(b1, nd, shape, 1),
                  *dst = random_view(shared ? b1 : b2, nd, shape, 0);
        rng = saved;
        nb_tensor *msrc = random_view(m1, nd, shape, 1),
                  *mdst = random_view(shared ? m1 : m2, nd, shape, 0);
        if (src && dst) {
            NB_EXPECT_OK(nb_tensor_copy(mdst, msrc));
            NB_EXPECT_OK(nb_tensor_copy(dst, src));
            if (!same_contents(b1, m1) || !same_contents(b2, m2)) {
                char a[160], c[160];
                fprintf(stderr, "  copy %s <- %s differs from the cpu\n",
                        nb_tensor_describe(dst, a, sizeof a), nb_tensor_describe(src, c, sizeof c));
                nb_test_failures_++;
            }
            done++;
        }
        nb_tensor *all[8] = {src, dst, msrc, mdst, b1, b2, m1, m2};
        for (int i = 0; i < 8; i++) nb_tensor_free(all[i]);
    }
    NB_EXPECT(done > 200);
    fake_close();
    nb_device_close(cpu);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_fake_basic, test_fake_gappy_writes, test_fake_random);
}

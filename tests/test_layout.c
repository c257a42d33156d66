/* Shape and stride arithmetic (src/core/layout.c): validation, predicates, broadcasting, the
 * reshape-as-view algorithm (checked against a brute-force oracle), permutations, coalescing. */
#include "core/layout.h"
#include "nb_test.h"

#define S(...) ((const int64_t[]){__VA_ARGS__})

static int same(int n, const int64_t *a, const int64_t *b) {
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

static void test_shape_str(void) {
    char buf[64];
    NB_EXPECT(!strcmp(nb_shape_str(3, S(2, 3, 4), buf, sizeof buf), "[2,3,4]"));
    NB_EXPECT(!strcmp(nb_shape_str(0, NULL, buf, sizeof buf), "[]"));
    NB_EXPECT(!strcmp(nb_shape_str(1, S(0), buf, sizeof buf), "[0]"));
    char small[5];
    nb_shape_str(3, S(200, 300, 400), small, sizeof small); /* truncates, stays terminated */
    NB_EXPECT(strlen(small) == 4 && !strncmp(small, "[200", 4));
}

static void test_check_shape(void) {
    int64_t n = -7;
    NB_EXPECT_OK(nb_layout_check_shape("f", 3, S(2, 3, 4), 4, &n));
    NB_EXPECT(n == 24);
    NB_EXPECT_OK(nb_layout_check_shape("f", 0, NULL, 4, &n));
    NB_EXPECT(n == 1);
    NB_EXPECT_OK(nb_layout_check_shape("f", 3, S(2, 0, 4), 4, &n));
    NB_EXPECT(n == 0);
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    NB_EXPECT_ERR(nb_layout_check_shape("f", 9, nine, 4, NULL), NB_ERR_SHAPE,
                  "f: ndim 9 exceeds NB_MAX_DIMS (8)");
    NB_EXPECT_ERR(nb_layout_check_shape("f", -1, NULL, 4, NULL), NB_ERR_INVALID_ARG, "ndim -1");
    NB_EXPECT_ERR(nb_layout_check_shape("f", 2, NULL, 4, NULL), NB_ERR_INVALID_ARG, "'shape'");
    NB_EXPECT_ERR(nb_layout_check_shape("f", 2, S(3, -3), 4, NULL), NB_ERR_SHAPE,
                  "shape[1] = -3 is negative (shape [3,-3])");
    NB_EXPECT_ERR(nb_layout_check_shape("f", 2, S(INT64_C(1) << 32, INT64_C(1) << 31), 1, NULL),
                  NB_ERR_SHAPE, "overflows int64");
    /* Overflow counts the bytes, and a 0 dim does not hide huge other dims. */
    NB_EXPECT_ERR(nb_layout_check_shape("f", 1, S(INT64_C(1) << 62), 4, NULL), NB_ERR_SHAPE,
                  "too large");
    NB_EXPECT_ERR(nb_layout_check_shape("f", 3, S(INT64_C(1) << 40, 0, INT64_C(1) << 40), 1, NULL),
                  NB_ERR_SHAPE, "too large");
    NB_EXPECT(nb_layout_numel(2, S(INT64_C(1) << 40, INT64_C(1) << 40)) == -1);
    NB_EXPECT(nb_layout_numel(2, S(INT64_C(1) << 40, 0)) == 0);
}

static void test_strides_and_predicates(void) {
    int64_t st[8];
    nb_layout_contiguous_strides(3, S(2, 3, 4), 4, st);
    NB_EXPECT(same(3, st, S(48, 16, 4)));
    nb_layout_contiguous_strides(3, S(2, 0, 3), 4, st);
    NB_EXPECT(same(3, st, S(12, 12, 4)));

    NB_EXPECT(nb_layout_is_contiguous(2, S(2, 3), S(12, 4), 4));
    NB_EXPECT(nb_layout_is_contiguous(3, S(2, 1, 3), S(12, 999, 4), 4)); /* size-1 stride ignored */
    NB_EXPECT(!nb_layout_is_contiguous(2, S(3, 2), S(4, 12), 4));
    NB_EXPECT(nb_layout_is_contiguous(2, S(3, 0), S(7, 9), 4)); /* empty */
    NB_EXPECT(nb_layout_is_contiguous(0, NULL, NULL, 4));

    NB_EXPECT(nb_layout_is_dense(2, S(3, 2), S(4, 12), 4));       /* transposed */
    NB_EXPECT(nb_layout_is_dense(3, S(2, 3, 4), S(4, 32, 8), 4)); /* permuted */
    NB_EXPECT(!nb_layout_is_dense(2, S(3, 2), S(4, 16), 4));      /* gap */
    NB_EXPECT(!nb_layout_is_dense(2, S(3, 2), S(0, 4), 4));       /* broadcast */
    NB_EXPECT(!nb_layout_is_dense(2, S(2, 2), S(4, 4), 4));       /* aliasing */
    NB_EXPECT(nb_layout_is_dense(2, S(1, 2), S(0, 4), 4)); /* stride of size-1 dims ignored */

    NB_EXPECT(nb_layout_has_zero_stride(2, S(3, 2), S(0, 4)));
    NB_EXPECT(!nb_layout_has_zero_stride(2, S(1, 2), S(0, 4)));

    NB_EXPECT(nb_layout_span(2, S(3, 4), S(16, 4), 4) == 48);
    NB_EXPECT(nb_layout_span(2, S(3, 4), S(4, 24), 4) == 4 * 2 + 24 * 3 + 4);
    NB_EXPECT(nb_layout_span(2, S(3, 0), S(16, 4), 4) == 0);
    NB_EXPECT(nb_layout_span(0, NULL, NULL, 8) == 8);
    NB_EXPECT(nb_layout_span(1, S(INT64_C(1) << 40), S(INT64_C(1) << 40), 4) == -1);
}

static void test_broadcast_three(void) {
    int nd = -1;
    int64_t out[NB_MAX_DIMS];
    const int64_t *shapes[3] = {S(4, 1, 3), S(5, 1), S(1)};
    NB_EXPECT_OK(nb_broadcast_shapes(3, (const int[]){3, 2, 1}, shapes, &nd, out));
    NB_EXPECT(nd == 3 && same(3, out, S(4, 5, 3)));

    /* A scalar (ndim 0) broadcasts everywhere; 1 broadcasts to 0. */
    const int64_t *z[3] = {NULL, S(1, 0), S(3, 1)};
    NB_EXPECT_OK(nb_broadcast_shapes(3, (const int[]){0, 2, 2}, z, &nd, out));
    NB_EXPECT(nd == 2 && same(2, out, S(3, 0)));

    NB_EXPECT_OK(nb_broadcast_shapes(0, NULL, NULL, &nd, out));
    NB_EXPECT(nd == 0);

    /* Mismatch in the last dim between shapes 0 and 2; shape 1 agrees with shape 0. */
    int conflict[2] = {-1, -1};
    const int64_t *bad[3] = {S(2, 3), S(3), S(4)};
    NB_EXPECT_ERR(nb_broadcast_shapes_ex(3, (const int[]){2, 1, 1}, bad, &nd, out, conflict),
                  NB_ERR_SHAPE,
                  "cannot broadcast shapes [2,3] and [4] (shape 0 vs shape 2): dim -1 is 3 vs 4");
    NB_EXPECT(conflict[0] == 0 && conflict[1] == 2);

    /* Mismatch in a leading dim where the first shape has 1 there: names shapes 1 and 2. */
    const int64_t *bad2[3] = {S(1, 3), S(2, 1), S(7, 3, 3)};
    NB_EXPECT_ERR(nb_broadcast_shapes_ex(3, (const int[]){2, 2, 3}, bad2, &nd, out, conflict),
                  NB_ERR_SHAPE, "[2,1] and [7,3,3] (shape 1 vs shape 2): dim -2 is 2 vs 3");
    NB_EXPECT(conflict[0] == 1 && conflict[1] == 2);

    /* 0 does not broadcast against 2. */
    const int64_t *bad3[2] = {S(0), S(2)};
    NB_EXPECT_ERR(nb_broadcast_shapes(2, (const int[]){1, 1}, bad3, &nd, out), NB_ERR_SHAPE,
                  "[0] and [2]");

    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    const int64_t *big[2] = {S(1), nine};
    NB_EXPECT_ERR(nb_broadcast_shapes(2, (const int[]){1, 9}, big, &nd, out), NB_ERR_SHAPE,
                  "(shape 1): ndim 9 exceeds");
    NB_EXPECT_ERR(nb_broadcast_shapes(2, (const int[]){1, 1}, bad3, NULL, out), NB_ERR_INVALID_ARG,
                  "out_ndim");
}

static void test_infer_shape(void) {
    int64_t out[NB_MAX_DIMS];
    NB_EXPECT_OK(nb_layout_infer_shape("r", "f32[3,4]", 12, 3, S(2, -1, 3), out));
    NB_EXPECT(same(3, out, S(2, 2, 3)));
    NB_EXPECT_OK(nb_layout_infer_shape("r", "f32[3,0]", 0, 2, S(0, 5), out));
    NB_EXPECT_OK(nb_layout_infer_shape("r", "f32[]", 1, 0, NULL, out));
    NB_EXPECT_OK(nb_layout_infer_shape("r", "f32[]", 1, 2, S(-1, 1), out));
    NB_EXPECT(same(2, out, S(1, 1)));
    NB_EXPECT_ERR(nb_layout_infer_shape("r", "f32[3,4]", 12, 2, S(-1, -1), out), NB_ERR_SHAPE,
                  "more than one -1 (dims 0 and 1)");
    NB_EXPECT_ERR(nb_layout_infer_shape("r", "f32[3,4]", 12, 2, S(5, 3), out), NB_ERR_SHAPE,
                  "cannot reshape f32[3,4] (12 elements) to [5,3] (15 elements)");
    NB_EXPECT_ERR(nb_layout_infer_shape("r", "f32[3,4]", 12, 2, S(5, -1), out), NB_ERR_SHAPE,
                  "not a multiple of 5");
    NB_EXPECT_ERR(nb_layout_infer_shape("r", "f32[3,4]", 12, 2, S(-2, -6), out), NB_ERR_SHAPE,
                  "shape[0] = -2 is negative");
    NB_EXPECT_ERR(nb_layout_infer_shape("r", "f32[3,0]", 0, 2, S(0, -1), out), NB_ERR_SHAPE,
                  "cannot infer the -1");
    NB_EXPECT_ERR(
        nb_layout_infer_shape("r", "f32[3,4]", 12, 2, S(INT64_C(1) << 40, INT64_C(1) << 40), out),
        NB_ERR_SHAPE, "cannot reshape");
}

/* ---- reshape-as-view against a brute-force oracle --------------------------------------- */

/* Byte offset of the C-order linear element `lin` of (shape, strides). */
static int64_t offset_of(int ndim, const int64_t *shape, const int64_t *strides, int64_t lin) {
    int64_t off = 0;
    for (int i = ndim - 1; i >= 0; i--) {
        off += (lin % shape[i]) * strides[i];
        lin /= shape[i];
    }
    return off;
}

/* A view exists iff the strides read off the unit steps reproduce every element's address. */
static int oracle_view(int ond, const int64_t *os, const int64_t *ost, int nnd, const int64_t *ns,
                       int64_t *nst) {
    int64_t numel = nb_layout_numel(ond, os);
    int64_t unit = 1;
    for (int d = nnd - 1; d >= 0; d--) {
        nst[d] = ns[d] > 1 ? offset_of(ond, os, ost, unit) : 0;
        unit *= ns[d];
    }
    for (int64_t l = 0; l < numel; l++)
        if (offset_of(ond, os, ost, l) != offset_of(nnd, ns, nst, l)) return 0;
    return 1;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

/* Random factorisation of n into nd dims (with some 1s). */
static void random_shape(int64_t n, int nd, int64_t *shape) {
    for (int i = 0; i < nd; i++) shape[i] = 1;
    for (int i = 0; i < nd && n > 1; i++) {
        int64_t f = 1;
        for (int64_t c = 2; c <= n; c++)
            if (n % c == 0 && rnd(3) == 0) {
                f = c;
                break;
            }
        if (i == nd - 1) f = n;
        shape[i] = f;
        n /= f;
    }
    if (n > 1) shape[nd - 1] *= n;
    for (int i = nd - 1; i > 0; i--) { /* shuffle */
        int j = (int)rnd((uint32_t)i + 1);
        int64_t t = shape[i];
        shape[i] = shape[j];
        shape[j] = t;
    }
}

static void test_view_strides_cases(void) {
    int64_t st[8];
    /* Contiguous [3,4] -> [12], [2,6], [4,3,1]. */
    NB_EXPECT(nb_layout_view_strides(2, S(3, 4), S(16, 4), 1, S(12), 4, st) && st[0] == 4);
    NB_EXPECT(nb_layout_view_strides(2, S(3, 4), S(16, 4), 3, S(4, 3, 1), 4, st) &&
              same(2, st, S(12, 4)));
    /* Transposed [4,3]: shape [3,4] strides [4,12]. Merging is impossible ... */
    NB_EXPECT(!nb_layout_view_strides(2, S(3, 4), S(4, 12), 1, S(12), 4, st));
    /* ... splitting either dim is fine. */
    NB_EXPECT(nb_layout_view_strides(2, S(6, 4), S(4, 24), 3, S(2, 3, 4), 4, st) &&
              same(3, st, S(12, 4, 24)));
    NB_EXPECT(nb_layout_view_strides(2, S(6, 4), S(4, 24), 3, S(6, 2, 2), 4, st) &&
              same(3, st, S(4, 48, 24)));
    /* Broadcast dims can be split but not merged with a real dim. */
    NB_EXPECT(nb_layout_view_strides(2, S(6, 4), S(0, 4), 3, S(2, 3, 4), 4, st) &&
              same(3, st, S(0, 0, 4)));
    NB_EXPECT(!nb_layout_view_strides(2, S(6, 4), S(0, 4), 1, S(24), 4, st));
    /* Scalars and size-1 dims. */
    NB_EXPECT(nb_layout_view_strides(0, NULL, NULL, 2, S(1, 1), 4, st));
    NB_EXPECT(nb_layout_view_strides(2, S(1, 1), S(4, 4), 0, NULL, 4, st));
    /* Empty: any shape with 0 elements. */
    NB_EXPECT(nb_layout_view_strides(2, S(3, 0), S(4, 12), 2, S(0, 5), 4, st) &&
              same(2, st, S(20, 4)));
}

static void test_view_strides_oracle(void) {
    int tried = 0, viewed = 0;
    for (int iter = 0; iter < 3000; iter++) {
        /* An old layout: a contiguous base [numel] reshaped to random dims, permuted, sometimes
         * with one dim broadcast or stepped. Offsets only; no memory. */
        int64_t numel = (int64_t)(1 + rnd(48));
        int ond = 1 + (int)rnd(4), nnd = (int)rnd(5) + 1;
        int64_t os[8], ost[8], tmp[8], ns[8], nst[8], ref[8];
        random_shape(numel, ond, tmp);
        int64_t cst[8];
        nb_layout_contiguous_strides(ond, tmp, 4, cst);
        int perm[8];
        for (int i = 0; i < ond; i++) perm[i] = i;
        for (int i = ond - 1; i > 0; i--) {
            int j = (int)rnd((uint32_t)i + 1), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        for (int i = 0; i < ond; i++) {
            os[i] = tmp[perm[i]];
            ost[i] = cst[perm[i]];
        }
        int k = (int)rnd((uint32_t)ond);
        if (rnd(4) == 0) ost[k] = 0;                /* broadcast */
        else if (rnd(4) == 0) ost[k] *= 2 + rnd(2); /* step */
        random_shape(numel, nnd, ns);
        int got = nb_layout_view_strides(ond, os, ost, nnd, ns, 4, nst);
        int want = oracle_view(ond, os, ost, nnd, ns, ref);
        tried++;
        viewed += want;
        if (got != want) {
            char a[64], b[64], c[64];
            fprintf(stderr, "  view %s strides=%s as %s: got %d, oracle %d\n",
                    nb_shape_str(ond, os, a, sizeof a), nb_shape_str(ond, ost, b, sizeof b),
                    nb_shape_str(nnd, ns, c, sizeof c), got, want);
            nb_test_failures_++;
            return;
        }
        /* Where a view exists, every element must land where the old layout put it. */
        for (int64_t l = 0; got && l < numel; l++)
            if (offset_of(ond, os, ost, l) != offset_of(nnd, ns, nst, l)) {
                nb_test_failures_++;
                return;
            }
    }
    NB_EXPECT(viewed > 100 && viewed < tried - 100); /* both outcomes were exercised */
}

static void test_perm(void) {
    NB_EXPECT_OK(nb_layout_check_perm("p", 3, (const int[]){2, 0, 1}));
    NB_EXPECT_OK(nb_layout_check_perm("p", 0, NULL));
    NB_EXPECT_ERR(nb_layout_check_perm("p", 3, (const int[]){0, 0, 1}), NB_ERR_INVALID_ARG,
                  "p: perm [0,0,1] is not a permutation of 0..2: perm[1] = 0 repeats");
    NB_EXPECT_ERR(nb_layout_check_perm("p", 2, (const int[]){0, 2}), NB_ERR_INVALID_ARG,
                  "perm[1] = 2 is out of range");
    NB_EXPECT_ERR(nb_layout_check_perm("p", 2, (const int[]){-1, 0}), NB_ERR_INVALID_ARG,
                  "perm[0] = -1");
    NB_EXPECT_ERR(nb_layout_check_perm("p", 2, NULL), NB_ERR_INVALID_ARG, "'perm' is NULL");
}

static void test_coalesce(void) {
    /* Contiguous [2,3,4] collapses to [24]; a transposed copy pair keeps two dims. */
    int64_t shape[8] = {2, 3, 4}, a[8] = {48, 16, 4}, b[8] = {48, 16, 4};
    int nd = nb_layout_coalesce(3, shape, 2, (int64_t *const[]){a, b});
    NB_EXPECT(nd == 1 && shape[0] == 24 && a[0] == 4 && b[0] == 4);

    int64_t s2[8] = {2, 1, 3, 4}, c[8] = {48, 7, 16, 4}, d[8] = {4, 9, 32, 8};
    nd = nb_layout_coalesce(4, s2, 2, (int64_t *const[]){c, d});
    /* The size-1 dim goes; [3,4] merges in both (16 == 4*4, 32 == 4*8); [2,3] merges only in
     * c (48 == 3*16, but 4 != 3*32) so stays apart. */
    NB_EXPECT(nd == 2 && same(2, s2, S(2, 12)) && same(2, c, S(48, 4)) && same(2, d, S(4, 8)));

    int64_t s3[8] = {1, 1}, e[8] = {5, 6};
    NB_EXPECT(nb_layout_coalesce(2, s3, 1, (int64_t *const[]){e}) == 0);
    int64_t s4[8] = {3, 0, 2}, f[8] = {8, 8, 4};
    NB_EXPECT(nb_layout_coalesce(3, s4, 1, (int64_t *const[]){f}) == 1 && s4[0] == 0);
    /* Broadcast outer dims merge with each other (0 == n*0). */
    int64_t s5[8] = {2, 3, 4}, g[8] = {0, 0, 4};
    NB_EXPECT(nb_layout_coalesce(3, s5, 1, (int64_t *const[]){g}) == 2 && s5[0] == 6 && g[0] == 0);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_shape_str, test_check_shape, test_strides_and_predicates,
                 test_broadcast_three, test_infer_shape, test_view_strides_cases,
                 test_view_strides_oracle, test_perm, test_coalesce);
}

/* nb_tensor on the CPU device: creation, queries, every view (checked element by element through
 * the strides against an independent index computation), copies between all layouts (including
 * overlapping ones), host transfers, fills, wrapping, and every error with its message. */
#include "nb_test.h"

#define S(...) ((const int64_t[]){__VA_ARGS__})

static nb_device *open_cpu(void) {
    nb_device *d = NULL;
    if (nb_device_open("cpu", &d) != NB_OK) return NULL;
    return d;
}

/* ---- independent index helpers ---------------------------------------------------------- */

static int64_t numel_of(int nd, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    return n;
}

/* C-order successor of idx; 0 after the last one. */
static int next_index(int nd, const int64_t *shape, int64_t *idx) {
    for (int i = nd - 1; i >= 0; i--) {
        if (++idx[i] < shape[i]) return 1;
        idx[i] = 0;
    }
    return 0;
}

#define FOR_EACH_INDEX(nd, shape, idx)                                                             \
    for (int64_t idx[NB_MAX_DIMS] = {0}, go_ = numel_of((nd), (shape)) > 0; go_;                   \
         go_ = next_index((nd), (shape), idx))

static int64_t ravel(int nd, const int64_t *shape, const int64_t *idx) {
    int64_t l = 0;
    for (int i = 0; i < nd; i++) l = l * shape[i] + idx[i];
    return l;
}

static void unravel(int nd, const int64_t *shape, int64_t l, int64_t *idx) {
    for (int i = nd - 1; i >= 0; i--) {
        idx[i] = l % shape[i];
        l /= shape[i];
    }
}

/* Element of a 4-byte tensor at idx, read through its byte strides. */
static int32_t get32(const nb_tensor *t, const int64_t *idx) {
    const char *p = nb_tensor_data(t);
    for (int i = 0; i < nb_tensor_ndim(t); i++) p += idx[i] * nb_tensor_strides(t)[i];
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* i32 tensor whose elements are their C-order linear index. */
static nb_tensor *iota(nb_device *dev, int nd, const int64_t *shape) {
    int64_t n = numel_of(nd, shape);
    int32_t *h = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) h[i] = (int32_t)i;
    nb_tensor *t = NULL;
    if (nb_tensor_from_host(dev, NB_I32, nd, shape, h, &t) != NB_OK) t = NULL;
    free(h);
    return t;
}

static int same_shape(const nb_tensor *t, int nd, const int64_t *shape) {
    if (nb_tensor_ndim(t) != nd) return 0;
    for (int i = 0; i < nd; i++)
        if (nb_tensor_shape(t)[i] != shape[i]) return 0;
    return 1;
}

/* ---- creation and queries --------------------------------------------------------------- */

static void test_create_and_query(void) {
    nb_device *dev = open_cpu();
    NB_EXPECT(dev);
    if (!dev) return;
    nb_tensor *t = NULL;
    NB_EXPECT_OK(nb_tensor_empty(dev, NB_F32, 2, S(2, 3), &t));
    NB_EXPECT(nb_tensor_device(t) == dev && nb_tensor_dtype(t) == NB_F32 && nb_tensor_ndim(t) == 2);
    NB_EXPECT(nb_tensor_strides(t)[0] == 12 && nb_tensor_strides(t)[1] == 4);
    NB_EXPECT(nb_tensor_numel(t) == 6 && nb_tensor_nbytes(t) == 24);
    NB_EXPECT(nb_tensor_is_contiguous(t) && nb_tensor_is_dense(t));
    char buf[128];
    NB_EXPECT(!strcmp(nb_tensor_describe(t, buf, sizeof buf), "f32[2,3] strides=[12,4] cpu"));
    nb_tensor *row = NULL;
    NB_EXPECT_OK(nb_tensor_select(t, 0, 1, &row));
    NB_EXPECT(
        !strcmp(nb_tensor_describe(row, buf, sizeof buf), "f32[3] strides=[4] cpu offset=12"));
    nb_tensor_free(row);
    nb_tensor_free(t);

    NB_EXPECT_OK(nb_tensor_zeros(dev, NB_F64, 3, S(2, 3, 4), &t));
    double z[24];
    memset(z, 0xff, sizeof z);
    NB_EXPECT_OK(nb_tensor_to_host(t, z, sizeof z));
    for (int i = 0; i < 24; i++) NB_EXPECT(z[i] == 0.0);
    nb_tensor_free(t);

    float x = 3.5f, y = 0;
    NB_EXPECT_OK(nb_tensor_from_host(dev, NB_F32, 0, NULL, &x, &t)); /* scalar */
    NB_EXPECT(nb_tensor_ndim(t) == 0 && nb_tensor_numel(t) == 1 && nb_tensor_nbytes(t) == 4);
    NB_EXPECT(!strcmp(nb_tensor_describe(t, buf, sizeof buf), "f32[] strides=[] cpu"));
    NB_EXPECT_OK(nb_tensor_to_host(t, &y, 4));
    NB_EXPECT(y == 3.5f);
    nb_tensor_free(t);

    NB_EXPECT_OK(nb_tensor_empty(dev, NB_F16, 3, S(3, 0, 2), &t)); /* zero-size */
    NB_EXPECT(nb_tensor_numel(t) == 0 && nb_tensor_nbytes(t) == 0);
    NB_EXPECT(nb_tensor_is_contiguous(t) && nb_tensor_is_dense(t));
    NB_EXPECT_OK(nb_tensor_to_host(t, NULL, 0));
    NB_EXPECT_OK(nb_tensor_fill_bytes(t, 1));
    nb_tensor_free(t);
    nb_tensor_free(NULL);
    nb_device_close(dev);
}

static void test_create_errors(void) {
    nb_device *dev = open_cpu();
    if (!dev) NB_SKIP("no cpu device");
    nb_tensor *t = (nb_tensor *)&t; /* must be reset to NULL on failure */
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    NB_EXPECT_ERR(nb_tensor_empty(dev, NB_F32, 9, nine, &t), NB_ERR_SHAPE,
                  "nb_tensor_empty: ndim 9 exceeds NB_MAX_DIMS (8)");
    NB_EXPECT(t == NULL);
    NB_EXPECT_ERR(nb_tensor_zeros(dev, NB_F32, 2, S(2, -1), &t), NB_ERR_SHAPE,
                  "nb_tensor_zeros: shape[1] = -1 is negative");
    NB_EXPECT_ERR(nb_tensor_empty(dev, (nb_dtype)42, 1, S(2), &t), NB_ERR_INVALID_ARG,
                  "dtype 42 is not a valid");
    NB_EXPECT_ERR(nb_tensor_empty(dev, NB_F32, 1, S(2), NULL), NB_ERR_INVALID_ARG, "'out'");
    NB_EXPECT_ERR(nb_tensor_empty(NULL, NB_F32, 1, S(2), &t), NB_ERR_INVALID_ARG, "'dev'");
    NB_EXPECT_ERR(nb_tensor_empty(dev, NB_F32, 2, NULL, &t), NB_ERR_INVALID_ARG, "'shape'");
    NB_EXPECT_ERR(nb_tensor_empty(dev, NB_F32, -1, NULL, &t), NB_ERR_INVALID_ARG, "ndim -1");
    NB_EXPECT_ERR(nb_tensor_empty(dev, NB_F64, 2, S(INT64_C(1) << 31, INT64_C(1) << 31), &t),
                  NB_ERR_SHAPE, "too large");
    NB_EXPECT_ERR(nb_tensor_from_host(dev, NB_F32, 1, S(2), NULL, &t), NB_ERR_INVALID_ARG,
                  "'data' is NULL");
    NB_EXPECT(t == NULL);
    nb_device_close(dev);
}

/* ---- views ------------------------------------------------------------------------------ */

static void test_slice(void) {
    nb_device *dev = open_cpu();
    nb_tensor *b = iota(dev, 3, S(4, 5, 6)), *v = NULL, *w = NULL;
    NB_EXPECT(b);
    if (!b) return;
    NB_REQUIRE_OK(nb_tensor_slice(b, 1, 1, 5, 2, &v)); /* [:, 1:5:2, :] */
    NB_EXPECT(same_shape(v, 3, S(4, 2, 6)) && nb_tensor_strides(v)[1] == 48);
    NB_EXPECT(!nb_tensor_is_contiguous(v) && !nb_tensor_is_dense(v));
    FOR_EACH_INDEX (3, S(4, 2, 6), i)
        NB_EXPECT(get32(v, i) == ravel(3, S(4, 5, 6), (int64_t[]){i[0], 1 + 2 * i[1], i[2]}));
    /* A slice of the slice: [1:4:2] of dim 0, [5:6] of dim 2. */
    NB_REQUIRE_OK(nb_tensor_slice(v, 0, 1, 4, 2, &w));
    nb_tensor_free(v);
    NB_REQUIRE_OK(nb_tensor_slice(w, 2, 5, 6, 1, &v));
    nb_tensor_free(w);
    NB_EXPECT(same_shape(v, 3, S(2, 2, 1)));
    FOR_EACH_INDEX (3, S(2, 2, 1), i)
        NB_EXPECT(get32(v, i) ==
                  ravel(3, S(4, 5, 6), (int64_t[]){1 + 2 * i[0], 1 + 2 * i[1], 5 + i[2]}));
    nb_tensor_free(v);
    /* A step beyond the size leaves one element; an empty range is legal. */
    NB_REQUIRE_OK(nb_tensor_slice(b, 2, 3, 6, INT64_MAX, &v));
    NB_EXPECT(same_shape(v, 3, S(4, 5, 1)) && get32(v, (int64_t[]){1, 1, 0}) == 6 + 30 + 3);
    nb_tensor_free(v);
    NB_REQUIRE_OK(nb_tensor_slice(b, 0, 4, 4, 1, &v));
    NB_EXPECT(same_shape(v, 3, S(0, 5, 6)) && nb_tensor_numel(v) == 0);
    nb_tensor_free(v);
    nb_tensor_free(b);
    nb_device_close(dev);
}

static void test_select(void) {
    nb_device *dev = open_cpu();
    nb_tensor *b = iota(dev, 3, S(4, 5, 6)), *v = NULL, *s = NULL;
    NB_REQUIRE_OK(nb_tensor_select(b, 2, 3, &v)); /* [:, :, 3] */
    NB_EXPECT(same_shape(v, 2, S(4, 5)));
    FOR_EACH_INDEX (2, S(4, 5), i)
        NB_EXPECT(get32(v, i) == ravel(3, S(4, 5, 6), (int64_t[]){i[0], i[1], 3}));
    NB_REQUIRE_OK(nb_tensor_select(v, 1, 4, &s)); /* [:, 4, 3] */
    nb_tensor_free(v);
    NB_REQUIRE_OK(nb_tensor_select(s, 0, 2, &v)); /* [2, 4, 3]: a scalar */
    NB_EXPECT(nb_tensor_ndim(v) == 0 && get32(v, NULL) == 2 * 30 + 4 * 6 + 3);
    int32_t x = 0;
    NB_EXPECT_OK(nb_tensor_to_host(v, &x, 4));
    NB_EXPECT(x == 87);
    nb_tensor_free(v);
    nb_tensor_free(s);
    nb_tensor_free(b);
    nb_device_close(dev);
}

static void test_permute_transpose(void) {
    nb_device *dev = open_cpu();
    nb_tensor *b = iota(dev, 3, S(4, 5, 6)), *v = NULL;
    NB_REQUIRE_OK(nb_tensor_permute(b, (const int[]){2, 0, 1}, &v));
    NB_EXPECT(same_shape(v, 3, S(6, 4, 5)) && !nb_tensor_is_contiguous(v) && nb_tensor_is_dense(v));
    FOR_EACH_INDEX (3, S(6, 4, 5), i)
        NB_EXPECT(get32(v, i) == ravel(3, S(4, 5, 6), (int64_t[]){i[1], i[2], i[0]}));
    nb_tensor_free(v);
    NB_REQUIRE_OK(nb_tensor_transpose(b, 0, 2, &v));
    NB_EXPECT(same_shape(v, 3, S(6, 5, 4)));
    FOR_EACH_INDEX (3, S(6, 5, 4), i)
        NB_EXPECT(get32(v, i) == ravel(3, S(4, 5, 6), (int64_t[]){i[2], i[1], i[0]}));
    nb_tensor_free(v);
    NB_REQUIRE_OK(nb_tensor_transpose(b, 1, 1, &v)); /* identity */
    NB_EXPECT(nb_tensor_is_contiguous(v) && nb_tensor_data(v) == nb_tensor_data(b));
    nb_tensor_free(v);
    nb_tensor_free(b);
    nb_device_close(dev);
}

static void test_broadcast_to(void) {
    nb_device *dev = open_cpu();
    nb_tensor *b = iota(dev, 2, S(5, 1)), *v = NULL;
    NB_REQUIRE_OK(nb_tensor_broadcast_to(b, 3, S(2, 5, 7), &v)); /* adds a leading dim */
    NB_EXPECT(same_shape(v, 3, S(2, 5, 7)));
    NB_EXPECT(nb_tensor_strides(v)[0] == 0 && nb_tensor_strides(v)[1] == 4 &&
              nb_tensor_strides(v)[2] == 0);
    FOR_EACH_INDEX (3, S(2, 5, 7), i) NB_EXPECT(get32(v, i) == i[1]);
    nb_tensor_free(v);
    nb_tensor *sc = iota(dev, 0, NULL);
    NB_REQUIRE_OK(nb_tensor_broadcast_to(sc, 2, S(2, 3), &v)); /* scalar everywhere */
    FOR_EACH_INDEX (2, S(2, 3), i) NB_EXPECT(get32(v, i) == 0);
    nb_tensor_free(v);
    nb_tensor_free(sc);
    nb_tensor *r = iota(dev, 2, S(1, 3));
    NB_REQUIRE_OK(nb_tensor_broadcast_to(r, 2, S(0, 3), &v)); /* 1 -> 0 */
    NB_EXPECT(same_shape(v, 2, S(0, 3)));
    nb_tensor_free(v);
    NB_REQUIRE_OK(nb_tensor_broadcast_to(r, 3, S(4, 2, 3), &v));
    FOR_EACH_INDEX (3, S(4, 2, 3), i) NB_EXPECT(get32(v, i) == i[2]);
    nb_tensor_free(v);
    nb_tensor_free(r);
    nb_tensor_free(b);
    nb_device_close(dev);
}

/* Checks that v (a reshape of o) holds o's elements in C order. */
static int reshaped_ok(const nb_tensor *v, const nb_tensor *o) {
    int64_t oi[NB_MAX_DIMS];
    if (nb_tensor_numel(v) != nb_tensor_numel(o)) return 0;
    FOR_EACH_INDEX (nb_tensor_ndim(v), nb_tensor_shape(v), i) {
        unravel(nb_tensor_ndim(o), nb_tensor_shape(o),
                ravel(nb_tensor_ndim(v), nb_tensor_shape(v), i), oi);
        if (get32(v, i) != get32(o, oi)) return 0;
    }
    return 1;
}

static void test_reshape(void) {
    nb_device *dev = open_cpu();
    nb_tensor *b = iota(dev, 3, S(4, 5, 6)), *v = NULL, *t = NULL, *w = NULL;
    NB_REQUIRE_OK(nb_tensor_reshape(b, 2, S(20, -1), &v));
    NB_EXPECT(same_shape(v, 2, S(20, 6)) && nb_tensor_data(v) == nb_tensor_data(b));
    FOR_EACH_INDEX (2, S(20, 6), i) NB_EXPECT(get32(v, i) == i[0] * 6 + i[1]);
    nb_tensor_free(v);
    NB_REQUIRE_OK(nb_tensor_reshape(b, 5, S(2, 2, -1, 3, 2), &v));
    NB_EXPECT(same_shape(v, 5, S(2, 2, 5, 3, 2)) && reshaped_ok(v, b));
    nb_tensor_free(v);
    nb_tensor_free(b);

    /* Transposed [4,6] -> [6,4]: splitting either dim is a view. Element (x,y,z) of [2,3,4] is
     * linear l of the transposed, i.e. base element (l%4, l/4). */
    b = iota(dev, 2, S(4, 6));
    NB_REQUIRE_OK(nb_tensor_transpose(b, 0, 1, &t));
    NB_REQUIRE_OK(nb_tensor_reshape(t, 3, S(2, 3, 4), &v));
    NB_EXPECT(nb_tensor_data(v) == nb_tensor_data(b));
    FOR_EACH_INDEX (3, S(2, 3, 4), i) {
        int64_t l = i[0] * 12 + i[1] * 4 + i[2];
        NB_EXPECT(get32(v, i) == (l % 4) * 6 + l / 4);
    }
    nb_tensor_free(v);
    NB_REQUIRE_OK(nb_tensor_reshape(t, 4, S(6, 1, 2, -1), &v));
    NB_EXPECT(same_shape(v, 4, S(6, 1, 2, 2)) && reshaped_ok(v, t));
    nb_tensor_free(v);
    nb_tensor_free(t);

    /* [4,6][:, ::2] = [4,3] strides [24,8] is evenly spaced (24 = 3*8): it flattens. */
    NB_REQUIRE_OK(nb_tensor_slice(b, 1, 0, 6, 2, &t));
    NB_REQUIRE_OK(nb_tensor_reshape(t, 1, S(12), &v));
    NB_EXPECT(nb_tensor_strides(v)[0] == 8 && reshaped_ok(v, t));
    nb_tensor_free(v);
    nb_tensor_free(t);
    /* [4,6][:, 0:4:2] = [4,2] strides [24,8] is not: split dim 0, never merge. */
    NB_REQUIRE_OK(nb_tensor_slice(b, 1, 0, 4, 2, &t));
    NB_REQUIRE_OK(nb_tensor_reshape(t, 3, S(2, 2, 2), &v));
    NB_EXPECT(reshaped_ok(v, t));
    nb_tensor_free(v);
    NB_EXPECT_ERR(nb_tensor_reshape(t, 1, S(8), &v), NB_ERR_LAYOUT,
                  "i32[4,2] strides=[24,8] as [8]");
    nb_tensor_free(t);

    /* Broadcast view [2,5,7] strides [0,4,0]: adding size-1 dims is fine, merging is not. */
    nb_tensor_free(b);
    b = iota(dev, 2, S(5, 1));
    NB_REQUIRE_OK(nb_tensor_broadcast_to(b, 3, S(2, 5, 7), &t));
    NB_REQUIRE_OK(nb_tensor_reshape(t, 4, S(2, 5, 7, 1), &v));
    NB_EXPECT(reshaped_ok(v, t));
    nb_tensor_free(v);
    NB_EXPECT_ERR(nb_tensor_reshape(t, 2, S(10, 7), &v), NB_ERR_LAYOUT, "cannot view");
    nb_tensor_free(t);
    nb_tensor_free(b);

    /* Scalars and empty tensors. */
    b = iota(dev, 0, NULL);
    NB_REQUIRE_OK(nb_tensor_reshape(b, 3, S(1, -1, 1), &v));
    NB_REQUIRE_OK(nb_tensor_reshape(v, 0, NULL, &w));
    NB_EXPECT(nb_tensor_ndim(w) == 0 && get32(w, NULL) == 0);
    nb_tensor_free(w);
    nb_tensor_free(v);
    nb_tensor_free(b);
    NB_REQUIRE_OK(nb_tensor_empty(dev, NB_F32, 2, S(3, 0), &b));
    NB_REQUIRE_OK(nb_tensor_reshape(b, 3, S(0, 5, 2), &v));
    NB_EXPECT(same_shape(v, 3, S(0, 5, 2)));
    nb_tensor_free(v);
    NB_EXPECT_ERR(nb_tensor_reshape(b, 2, S(0, -1), &v), NB_ERR_SHAPE, "cannot infer the -1");
    nb_tensor_free(b);
    nb_device_close(dev);
}

static void test_view_errors(void) {
    nb_device *dev = open_cpu();
    nb_tensor *b = NULL, *t = NULL, *v = (nb_tensor *)&v;
    NB_REQUIRE_OK(nb_tensor_empty(dev, NB_F32, 2, S(4, 5), &b));
    NB_EXPECT_ERR(nb_tensor_slice(b, 1, 2, 9, 1, &v), NB_ERR_SHAPE,
                  "nb_tensor_slice: [2:9] out of bounds for dim 1 of size 5 (tensor f32[4,5])");
    NB_EXPECT(v == NULL);
    NB_EXPECT_ERR(nb_tensor_slice(b, 0, 3, 2, 1, &v), NB_ERR_SHAPE, "[3:2] out of bounds");
    NB_EXPECT_ERR(nb_tensor_slice(b, 0, -1, 2, 2, &v), NB_ERR_SHAPE, "[-1:2:2] out of bounds");
    NB_EXPECT_ERR(nb_tensor_slice(b, 0, 0, 2, 0, &v), NB_ERR_INVALID_ARG, "step 0 must be >= 1");
    NB_EXPECT_ERR(nb_tensor_slice(b, 2, 0, 1, 1, &v), NB_ERR_INVALID_ARG,
                  "dim = 2 is out of range for tensor f32[4,5] (2 dims)");
    NB_EXPECT_ERR(nb_tensor_select(b, 0, 4, &v), NB_ERR_SHAPE,
                  "nb_tensor_select: index 4 out of bounds for dim 0 of size 4 (tensor f32[4,5])");
    NB_EXPECT_ERR(nb_tensor_select(b, -1, 0, &v), NB_ERR_INVALID_ARG, "dim = -1");
    NB_EXPECT_ERR(nb_tensor_permute(b, (const int[]){1, 1}, &v), NB_ERR_INVALID_ARG,
                  "nb_tensor_permute: perm [1,1] is not a permutation of 0..1");
    NB_EXPECT_ERR(nb_tensor_transpose(b, 0, 3, &v), NB_ERR_INVALID_ARG, "dim1 = 3 is out of range");
    NB_EXPECT_ERR(nb_tensor_broadcast_to(b, 2, S(2, 5), &v), NB_ERR_SHAPE,
                  "nb_tensor_broadcast_to: cannot broadcast f32[4,5] to [2,5]: dim 0 has size 4");
    NB_EXPECT_ERR(nb_tensor_broadcast_to(b, 1, S(5), &v), NB_ERR_SHAPE, "fewer dims");
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 4, 5};
    NB_EXPECT_ERR(nb_tensor_broadcast_to(b, 9, nine, &v), NB_ERR_SHAPE, "ndim 9 exceeds");
    NB_EXPECT_ERR(nb_tensor_reshape(b, 9, nine, &v), NB_ERR_SHAPE, "ndim 9 exceeds");
    NB_EXPECT_ERR(nb_tensor_reshape(b, 3, S(-1, 2, -1), &v), NB_ERR_SHAPE,
                  "nb_tensor_reshape: shape [-1,2,-1] has more than one -1");
    NB_EXPECT_ERR(
        nb_tensor_reshape(b, 2, S(3, 7), &v), NB_ERR_SHAPE,
        "nb_tensor_reshape: cannot reshape f32[4,5] (20 elements) to [3,7] (21 elements)");
    NB_EXPECT_ERR(nb_tensor_slice(NULL, 0, 0, 1, 1, &v), NB_ERR_INVALID_ARG, "'t' is NULL");
    NB_EXPECT_ERR(nb_tensor_slice(b, 0, 0, 1, 1, NULL), NB_ERR_INVALID_ARG, "'out' is NULL");
    nb_tensor_free(b);
    /* The message of the issue: a transposed [4,3] cannot be flattened in place. */
    NB_REQUIRE_OK(nb_tensor_empty(dev, NB_F32, 2, S(4, 3), &b));
    NB_REQUIRE_OK(nb_tensor_transpose(b, 0, 1, &t));
    NB_EXPECT_ERR(nb_tensor_reshape(t, 1, S(12), &v), NB_ERR_LAYOUT,
                  "nb_tensor_reshape: cannot view f32[3,4] strides=[4,12] as [12]: the layout is "
                  "not contiguous over the merged dims; call nb_tensor_contiguous first");
    nb_tensor_free(t);
    nb_tensor_free(b);
    nb_device_close(dev);
}

/* nb_tensor_view: any strided view of the buffer, another dtype, a byte offset from element 0
 * (down to the buffer's start), everything checked against the buffer's extent. */
static void test_strided_view(void) {
    nb_device *dev = open_cpu();
    nb_tensor *b = iota(dev, 1, S(12)), *s = NULL, *v = NULL, *w = NULL;
    /* [3,2] with strides [16,4] from element 1: rows 1,2 / 5,6 / 9,10 */
    NB_REQUIRE_OK(nb_tensor_view(b, NB_I32, 2, S(3, 2), S(16, 4), 4, &v));
    NB_EXPECT(same_shape(v, 2, S(3, 2)) && nb_tensor_strides(v)[0] == 16);
    FOR_EACH_INDEX (2, S(3, 2), i) NB_EXPECT(get32(v, i) == 1 + 4 * i[0] + i[1]);
    nb_tensor_free(v);
    /* NULL strides: C order; offset relative to a view's element 0, negative down to byte 0 */
    NB_REQUIRE_OK(nb_tensor_slice(b, 0, 6, 12, 1, &s));
    NB_REQUIRE_OK(nb_tensor_view(s, NB_I32, 2, S(2, 3), NULL, -24, &v));
    FOR_EACH_INDEX (2, S(2, 3), i) NB_EXPECT(get32(v, i) == 3 * i[0] + i[1]);
    /* writes go through to the buffer; another dtype reads the same bytes */
    int32_t one = 0x3f800000; /* 1.0f */
    memcpy(nb_tensor_data(v), &one, 4);
    NB_REQUIRE_OK(nb_tensor_view(b, NB_F32, 0, NULL, NULL, 0, &w));
    float f;
    memcpy(&f, nb_tensor_data(w), 4);
    NB_EXPECT(f == 1.0f);
    nb_tensor_free(w);
    /* a stride-0 broadcast and an empty view anywhere inside */
    NB_REQUIRE_OK(nb_tensor_view(b, NB_I32, 2, S(4, 3), S(0, 4), 8, &w));
    NB_EXPECT(get32(w, S(3, 2)) == 4);
    nb_tensor_free(w);
    NB_REQUIRE_OK(nb_tensor_view(b, NB_I32, 1, S(0), NULL, 48, &w));
    nb_tensor_free(w);
    /* errors: past the end, before the start, misaligned, bad strides */
    NB_EXPECT_ERR(nb_tensor_view(b, NB_I32, 1, S(13), NULL, 0, &w), NB_ERR_SHAPE,
                  "nb_tensor_view: a i32[13] view with strides [4] at byte offset 0 from i32[12]'s "
                  "element 0 does not fit in its buffer (48 bytes");
    NB_EXPECT_ERR(nb_tensor_view(s, NB_I32, 1, S(2), NULL, -28, &w), NB_ERR_SHAPE, "does not fit");
    NB_EXPECT_ERR(nb_tensor_view(b, NB_I32, 2, S(3, 4), S(20, 4), 0, &w), NB_ERR_SHAPE, "does not fit");
    NB_EXPECT_ERR(nb_tensor_view(b, NB_I32, 1, S(2), NULL, 2, &w), NB_ERR_SHAPE, "not aligned");
    NB_EXPECT_ERR(nb_tensor_view(b, NB_I32, 1, S(2), S(6), 0, &w), NB_ERR_INVALID_ARG,
                  "nb_tensor_view: strides[0] = 6 is not a multiple of the element size 4 (i32)");
    NB_EXPECT_ERR(nb_tensor_view(b, NB_I32, 1, S(2), S(-4), 8, &w), NB_ERR_INVALID_ARG,
                  "strides[0] = -4 is negative");
    NB_EXPECT_ERR(nb_tensor_view(b, NB_I32, 1, S(2), NULL, INT64_MAX, &w), NB_ERR_SHAPE, "does not fit");
    NB_EXPECT_ERR(nb_tensor_view(b, NB_I32, 1, S(-1), NULL, 0, &w), NB_ERR_SHAPE, "");
    NB_EXPECT_ERR(nb_tensor_view(NULL, NB_I32, 1, S(2), NULL, 0, &w), NB_ERR_INVALID_ARG, "'t' is NULL");
    NB_EXPECT(w == NULL);
    nb_tensor_free(v);
    nb_tensor_free(s);
    nb_tensor_free(b);
    nb_device_close(dev);
}

/* Views keep the buffer alive and write through to it. */
static void test_views_share_buffer(void) {
    nb_device *dev = open_cpu();
    nb_tensor *b = iota(dev, 2, S(3, 4)), *t = NULL, *c = NULL;
    NB_REQUIRE_OK(nb_tensor_transpose(b, 0, 1, &t)); /* [4,3] */
    NB_REQUIRE_OK(nb_tensor_select(t, 0, 2, &c));    /* column 2 of b */
    int32_t col[3] = {-1, -2, -3};
    NB_EXPECT_OK(nb_tensor_from_host_into(c, col, sizeof col));
    nb_tensor_free(t);
    nb_tensor_free(c);
    int32_t h[12];
    NB_EXPECT_OK(nb_tensor_to_host(b, h, sizeof h));
    for (int i = 0; i < 12; i++) NB_EXPECT(h[i] == (i % 4 == 2 ? -1 - i / 4 : i));
    NB_REQUIRE_OK(nb_tensor_slice(b, 1, 1, 3, 1, &t));
    nb_tensor_free(b); /* the view still holds the memory */
    int32_t s[6];
    NB_EXPECT_OK(nb_tensor_to_host(t, s, sizeof s));
    NB_EXPECT(s[0] == 1 && s[1] == -1 && s[2] == 5 && s[5] == -3);
    nb_tensor *c2 = NULL;
    NB_REQUIRE_OK(nb_tensor_contiguous(t, &c2)); /* copies: the slice is not contiguous */
    NB_EXPECT(nb_tensor_data(c2) != nb_tensor_data(t) && nb_tensor_is_contiguous(c2));
    FOR_EACH_INDEX (2, S(3, 2), i) NB_EXPECT(get32(c2, i) == get32(t, i));
    nb_tensor_free(c2);
    nb_tensor_free(t);
    nb_device_close(dev);
}

/* ---- copies ----------------------------------------------------------------------------- */

/* A [3,4,5] i32 view of a fresh base tensor, in one of several layouts; *base gets the base.
 * kinds: 0 contiguous, 1 permuted, 2 stepped slices of a bigger buffer, 3 select of a bigger
 * buffer, 4 reshape of a transposed buffer, 5 broadcast (source only). */
#define NKINDS 6
static nb_tensor *make_layout(nb_device *dev, int kind, nb_tensor **base) {
    nb_tensor *b = NULL, *v = NULL, *w = NULL;
    nb_status s = NB_OK;
    switch (kind) {
    case 0:
        s = nb_tensor_empty(dev, NB_I32, 3, S(3, 4, 5), &b);
        if (!s) s = nb_tensor_slice(b, 0, 0, 3, 1, &v);
        break;
    case 1:
        s = nb_tensor_empty(dev, NB_I32, 3, S(5, 3, 4), &b);
        if (!s) s = nb_tensor_permute(b, (const int[]){1, 2, 0}, &v);
        break;
    case 2:
        s = nb_tensor_empty(dev, NB_I32, 3, S(6, 4, 11), &b);
        if (!s) s = nb_tensor_slice(b, 0, 1, 6, 2, &w);
        if (!s) s = nb_tensor_slice(w, 2, 1, 11, 2, &v);
        break;
    case 3:
        s = nb_tensor_empty(dev, NB_I32, 4, S(3, 2, 4, 5), &b);
        if (!s) s = nb_tensor_select(b, 1, 1, &v);
        break;
    case 4:
        s = nb_tensor_empty(dev, NB_I32, 2, S(5, 12), &b);
        if (!s) s = nb_tensor_transpose(b, 0, 1, &w); /* [12,5] */
        if (!s) s = nb_tensor_reshape(w, 3, S(3, 4, 5), &v);
        break;
    default:
        s = nb_tensor_empty(dev, NB_I32, 2, S(4, 1), &b);
        if (!s) s = nb_tensor_broadcast_to(b, 3, S(3, 4, 5), &v);
        break;
    }
    nb_tensor_free(w);
    if (s != NB_OK) {
        fprintf(stderr, "  make_layout %d: %s\n", kind, nb_last_error());
        nb_tensor_free(b);
        return NULL;
    }
    *base = b;
    return v;
}

static void fill_base(nb_tensor *b, int32_t start, int32_t step) {
    int64_t n = nb_tensor_numel(b);
    int32_t *h = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) h[i] = step ? start + (int32_t)(i * step) : start;
    nb_tensor_from_host_into(b, h, sizeof(int32_t) * (size_t)n);
    free(h);
}

static void test_copy_all_layouts(void) {
    nb_device *dev = open_cpu();
    for (int sk = 0; sk < NKINDS; sk++)
        for (int dk = 0; dk < NKINDS - 1; dk++) { /* a broadcast destination is an error */
            nb_tensor *sb = NULL, *db = NULL;
            nb_tensor *src = make_layout(dev, sk, &sb), *dst = make_layout(dev, dk, &db);
            NB_EXPECT(src && dst);
            if (!src || !dst) return;
            fill_base(sb, 1000, 7);
            fill_base(db, -1, 0); /* sentinel everywhere */
            NB_EXPECT_OK(nb_tensor_copy(dst, src));
            int bad = 0;
            FOR_EACH_INDEX (3, S(3, 4, 5), i) bad += get32(dst, i) != get32(src, i);
            /* Exactly the 60 view elements changed in dst's buffer: no gap was touched. */
            int32_t *h = malloc(nb_tensor_nbytes(db));
            nb_tensor_to_host(db, h, nb_tensor_nbytes(db));
            int changed = 0;
            for (int64_t k = 0; k < nb_tensor_numel(db); k++) changed += h[k] != -1;
            free(h);
            if (bad || changed != 60) {
                fprintf(stderr, "  src kind %d -> dst kind %d: %d wrong, %d changed\n", sk, dk, bad,
                        changed);
                nb_test_failures_++;
            }
            nb_tensor_free(src);
            nb_tensor_free(dst);
            nb_tensor_free(sb);
            nb_tensor_free(db);
        }
    nb_device_close(dev);
}

/* Overlapping source and destination in one buffer: the result is as if src were read first. */
static void test_copy_overlap(void) {
    nb_device *dev = open_cpu();
    nb_tensor *b = iota(dev, 1, S(10)), *d = NULL, *s = NULL;
    NB_REQUIRE_OK(nb_tensor_slice(b, 0, 2, 10, 1, &d));
    NB_REQUIRE_OK(nb_tensor_slice(b, 0, 0, 8, 1, &s));
    NB_EXPECT_OK(nb_tensor_copy(d, s)); /* shift right by 2 */
    int32_t h[10];
    nb_tensor_to_host(b, h, sizeof h);
    for (int i = 0; i < 10; i++) NB_EXPECT(h[i] == (i < 2 ? i : i - 2));
    NB_EXPECT_OK(nb_tensor_copy(s, d)); /* and back left */
    nb_tensor_to_host(b, h, sizeof h);
    for (int i = 0; i < 10; i++) NB_EXPECT(h[i] == (i < 8 ? i : i - 2)); /* 0..7,6,7 */
    nb_tensor_free(d);
    nb_tensor_free(s);
    nb_tensor_free(b);

    /* A square matrix overwritten with its own transpose. */
    b = iota(dev, 2, S(5, 5));
    NB_REQUIRE_OK(nb_tensor_transpose(b, 0, 1, &s));
    NB_EXPECT_OK(nb_tensor_copy(b, s));
    FOR_EACH_INDEX (2, S(5, 5), i) NB_EXPECT(get32(b, i) == i[1] * 5 + i[0]);
    NB_EXPECT_OK(nb_tensor_copy(s, s)); /* onto itself: nothing changes */
    FOR_EACH_INDEX (2, S(5, 5), i) NB_EXPECT(get32(b, i) == i[1] * 5 + i[0]);
    nb_tensor_free(s);
    nb_tensor_free(b);
    nb_device_close(dev);
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* A random view of b with the given shape of nd dims, built from b's [len] buffer by reshape,
 * permute and stepped slices; NULL if the draw does not fit in b. */
static nb_tensor *random_view(nb_tensor *b, int nd, const int64_t *shape, int allow_bcast) {
    int64_t len = nb_tensor_numel(b), need = 1, big[NB_MAX_DIMS], step[NB_MAX_DIMS];
    int perm[NB_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        step[i] = 1 + rnd(2);
        perm[i] = i;
    }
    for (int i = nd - 1; i > 0; i--) {
        int j = (int)rnd((uint32_t)i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    /* The base dims in permuted order, enlarged by the steps. */
    for (int i = 0; i < nd; i++) {
        big[i] = shape[perm[i]] * step[perm[i]];
        need *= big[i];
    }
    if (need > len) return NULL;
    nb_tensor *flat = NULL, *r = NULL, *p = NULL, *v = NULL;
    int64_t off = rnd((uint32_t)(len - need + 1));
    nb_tensor_slice(b, 0, off, off + need, 1, &flat);
    nb_tensor_reshape(flat, nd, big, &r);
    nb_tensor_free(flat);
    int inv[NB_MAX_DIMS];
    for (int i = 0; i < nd; i++) inv[perm[i]] = i;
    nb_tensor_permute(r, inv, &p); /* now dims in the requested order, sizes shape*step */
    nb_tensor_free(r);
    for (int i = 0; i < nd; i++) {
        nb_tensor_slice(p, i, 0, shape[i] * step[i], step[i], &v);
        nb_tensor_free(p);
        p = v;
    }
    if (allow_bcast && nd > 0 && rnd(3) == 0) { /* one dim read with stride 0 */
        int k = (int)rnd((uint32_t)nd);
        nb_tensor_slice(p, k, 0, 1, 1, &v);
        nb_tensor_free(p);
        nb_tensor_broadcast_to(v, nd, shape, &p);
        nb_tensor_free(v);
    }
    return p;
}

/* Random shapes and layouts, source and destination often in the same buffer (overlapping). */
static void test_copy_random(void) {
    nb_device *dev = open_cpu();
    int done = 0;
    for (int iter = 0; iter < 600; iter++) {
        int nd = (int)rnd(5);
        int64_t shape[NB_MAX_DIMS];
        for (int i = 0; i < nd; i++) shape[i] = rnd(5) + (rnd(8) ? 1 : 0);
        nb_tensor *b1 = iota(dev, 1, S(400)), *b2 = iota(dev, 1, S(400));
        int shared = rnd(2);
        nb_tensor *src = random_view(b1, nd, shape, 1),
                  *dst = random_view(shared ? b1 : b2, nd, shape, 0);
        if (src && dst) {
            int64_t n = numel_of(nd, shape), k = 0;
            int32_t *want = malloc(sizeof(int32_t) * (size_t)(n + 1));
            FOR_EACH_INDEX (nd, shape, i) want[k++] = get32(src, i);
            nb_status s = nb_tensor_copy(dst, src);
            NB_EXPECT_OK(s);
            k = 0;
            int bad = 0;
            FOR_EACH_INDEX (nd, shape, i) bad += get32(dst, i) != want[k++];
            if (bad) {
                char a[160], c[160];
                fprintf(stderr, "  copy %s <- %s: %d wrong\n", nb_tensor_describe(dst, a, sizeof a),
                        nb_tensor_describe(src, c, sizeof c), bad);
                nb_test_failures_++;
            }
            free(want);
            done++;
        }
        nb_tensor_free(src);
        nb_tensor_free(dst);
        nb_tensor_free(b1);
        nb_tensor_free(b2);
        if (nb_test_failures_) break;
    }
    NB_EXPECT(done > 300);
    nb_device_close(dev);
}

/* Big enough to go through the thread pool. */
static void test_copy_large(void) {
    nb_device *dev = open_cpu();
    nb_tensor *b = iota(dev, 2, S(1100, 1024)), *t = NULL, *c = NULL;
    NB_REQUIRE_OK(nb_tensor_transpose(b, 0, 1, &t));
    NB_REQUIRE_OK(nb_tensor_contiguous(t, &c));
    int bad = 0;
    FOR_EACH_INDEX (2, S(1024, 1100), i) bad += get32(c, i) != i[1] * 1024 + i[0];
    NB_EXPECT(bad == 0);
    nb_tensor_free(c);
    nb_tensor_free(t);
    nb_tensor_free(b);
    nb_device_close(dev);
}

static void test_copy_errors(void) {
    nb_device *dev = open_cpu();
    nb_tensor *a = NULL, *b = NULL, *c = NULL, *r = NULL, *bc = NULL;
    NB_REQUIRE_OK(nb_tensor_empty(dev, NB_F32, 2, S(2, 3), &a));
    NB_REQUIRE_OK(nb_tensor_empty(dev, NB_F32, 2, S(3, 2), &b));
    NB_REQUIRE_OK(nb_tensor_empty(dev, NB_F64, 2, S(2, 3), &c));
    NB_EXPECT_ERR(nb_tensor_copy(a, b), NB_ERR_SHAPE,
                  "nb_tensor_copy: shape mismatch: dst f32[2,3] vs src f32[3,2]");
    NB_EXPECT_ERR(nb_tensor_copy(a, c), NB_ERR_DTYPE,
                  "nb_tensor_copy: dtype mismatch: dst f32[2,3] vs src f64[2,3]");
    NB_EXPECT_ERR(nb_tensor_copy(NULL, a), NB_ERR_INVALID_ARG, "'dst' is NULL");
    NB_REQUIRE_OK(nb_tensor_empty(dev, NB_F32, 1, S(3), &r));
    NB_REQUIRE_OK(nb_tensor_broadcast_to(r, 2, S(2, 3), &bc));
    NB_EXPECT_OK(nb_tensor_copy(a, bc)); /* broadcast source: fine */
    NB_EXPECT_ERR(nb_tensor_copy(bc, a), NB_ERR_LAYOUT,
                  "dst f32[2,3] strides=[0,4] has stride 0 on dim 0 of size 2");
    float h[6] = {0};
    NB_EXPECT_ERR(nb_tensor_from_host_into(bc, h, sizeof h), NB_ERR_LAYOUT, "stride 0 on dim 0");
    NB_EXPECT_ERR(nb_tensor_to_host(a, h, 10), NB_ERR_INVALID_ARG,
                  "nb_tensor_to_host: bytes = 10 but tensor f32[2,3] holds 24 bytes");
    NB_EXPECT_ERR(nb_tensor_from_host_into(a, h, 28), NB_ERR_INVALID_ARG, "bytes = 28");
    NB_EXPECT_ERR(nb_tensor_to_host(a, NULL, 24), NB_ERR_INVALID_ARG, "'dst' is NULL");
    nb_tensor_free(a);
    nb_tensor_free(b);
    nb_tensor_free(c);
    nb_tensor_free(r);
    nb_tensor_free(bc);
    nb_device_close(dev);
}

/* ---- host transfers, fills, wrap, to/contiguous ----------------------------------------- */

static void test_host_transfers(void) {
    nb_device *dev = open_cpu();
    nb_tensor *b = iota(dev, 3, S(2, 3, 4)), *p = NULL, *s = NULL;
    NB_REQUIRE_OK(nb_tensor_permute(b, (const int[]){2, 0, 1}, &p)); /* [4,2,3] */
    int32_t h[24];
    NB_EXPECT_OK(nb_tensor_to_host(p, h, sizeof h));
    FOR_EACH_INDEX (3, S(4, 2, 3), i)
        NB_EXPECT(h[ravel(3, S(4, 2, 3), i)] == i[1] * 12 + i[2] * 4 + i[0]);
    /* Write C-ordered data into a stepped view; other elements keep their values. */
    NB_REQUIRE_OK(nb_tensor_slice(b, 2, 1, 4, 2, &s)); /* [2,3,2] */
    int32_t in[12];
    for (int i = 0; i < 12; i++) in[i] = -100 - i;
    NB_EXPECT_OK(nb_tensor_from_host_into(s, in, sizeof in));
    FOR_EACH_INDEX (3, S(2, 3, 4), i) {
        int32_t want = (int32_t)ravel(3, S(2, 3, 4), i);
        if (i[2] % 2 == 1)
            want = -100 - (int32_t)ravel(3, S(2, 3, 2), (int64_t[]){i[0], i[1], i[2] / 2});
        NB_EXPECT(get32(b, i) == want);
    }
    nb_tensor_free(s);
    nb_tensor_free(p);
    nb_tensor_free(b);
    nb_device_close(dev);
}

static void test_fill_bytes(void) {
    nb_device *dev = open_cpu();
    nb_tensor *b = iota(dev, 2, S(4, 6)), *v = NULL, *w = NULL;
    NB_REQUIRE_OK(nb_tensor_slice(b, 1, 0, 6, 3, &v)); /* [4,2]: columns 0 and 3, not dense */
    NB_EXPECT_OK(nb_tensor_fill_bytes(v, 0xff));       /* -1 as i32 */
    FOR_EACH_INDEX (2, S(4, 6), i) NB_EXPECT(get32(b, i) == (i[1] % 3 == 0 ? -1 : i[0] * 6 + i[1]));
    nb_tensor_free(v);
    NB_REQUIRE_OK(nb_tensor_select(b, 0, 2, &v));
    NB_REQUIRE_OK(nb_tensor_broadcast_to(v, 2, S(5, 6), &w)); /* broadcast: fills row 2 */
    NB_EXPECT_OK(nb_tensor_fill_bytes(w, 0));
    FOR_EACH_INDEX (2, S(4, 6), i) NB_EXPECT(i[0] != 2 || get32(b, i) == 0);
    NB_EXPECT(get32(b, (int64_t[]){3, 1}) == 19);
    nb_tensor_free(w);
    nb_tensor_free(v);
    NB_REQUIRE_OK(nb_tensor_transpose(b, 0, 1, &v)); /* dense: one memset */
    NB_EXPECT_OK(nb_tensor_fill_bytes(v, 0x01));
    FOR_EACH_INDEX (2, S(4, 6), i) NB_EXPECT(get32(b, i) == 0x01010101);
    nb_tensor_free(v);
    nb_tensor_free(b);
    nb_device_close(dev);
}

static void test_wrap(void) {
    nb_device *dev = open_cpu();
    float m[12];
    for (int i = 0; i < 12; i++) m[i] = (float)i;
    nb_tensor *t = NULL, *c = NULL;
    NB_REQUIRE_OK(nb_tensor_wrap(dev, NB_F32, 2, S(3, 4), NULL, m, &t));
    NB_EXPECT(nb_tensor_data(t) == (void *)m && nb_tensor_is_contiguous(t));
    nb_tensor_free(t);
    NB_REQUIRE_OK(nb_tensor_wrap(dev, NB_F32, 1, S(3), S(16), m + 1, &t)); /* column 1 */
    float col[3];
    NB_EXPECT_OK(nb_tensor_to_host(t, col, sizeof col));
    NB_EXPECT(col[0] == 1 && col[1] == 5 && col[2] == 9);
    NB_REQUIRE_OK(nb_tensor_to(t, NULL, &c));
    NB_EXPECT(nb_tensor_is_contiguous(c) && nb_tensor_data(c) != nb_tensor_data(t));
    col[0] = 0;
    NB_EXPECT_OK(nb_tensor_to_host(c, col, sizeof col));
    NB_EXPECT(col[0] == 1 && col[2] == 9);
    nb_tensor_free(c);
    nb_tensor_free(t); /* must not free m */
    NB_EXPECT_ERR(nb_tensor_wrap(dev, NB_F32, 1, S(3), S(-4), m, &t), NB_ERR_INVALID_ARG,
                  "strides[0] = -4 is negative");
    NB_EXPECT_ERR(nb_tensor_wrap(dev, NB_F32, 1, S(3), S(6), m, &t), NB_ERR_INVALID_ARG,
                  "strides[0] = 6 is not a multiple of the element size 4 (f32)");
    NB_EXPECT_ERR(nb_tensor_wrap(dev, NB_F32, 1, S(3), NULL, (char *)m + 2, &t), NB_ERR_INVALID_ARG,
                  "not aligned");
    NB_EXPECT_ERR(nb_tensor_wrap(dev, NB_F32, 1, S(3), NULL, NULL, &t), NB_ERR_INVALID_ARG,
                  "'data' is NULL");
    NB_EXPECT_OK(nb_tensor_wrap(dev, NB_F32, 1, S(0), NULL, NULL, &t));
    nb_tensor_free(t);
    nb_device_close(dev);
}

/* Eight dims, reversed and copied back. */
static void test_max_dims(void) {
    nb_device *dev = open_cpu();
    const int64_t *shape = S(2, 1, 3, 1, 2, 1, 2, 3);
    nb_tensor *b = iota(dev, 8, shape), *p = NULL, *c = NULL, *back = NULL;
    NB_REQUIRE_OK(nb_tensor_permute(b, (const int[]){7, 6, 5, 4, 3, 2, 1, 0}, &p));
    NB_REQUIRE_OK(nb_tensor_contiguous(p, &c));
    NB_REQUIRE_OK(nb_tensor_permute(c, (const int[]){7, 6, 5, 4, 3, 2, 1, 0}, &back));
    FOR_EACH_INDEX (8, shape, i) NB_EXPECT(get32(back, i) == ravel(8, shape, i));
    nb_tensor *flat = NULL;
    NB_REQUIRE_OK(nb_tensor_reshape(b, 1, S(-1), &flat));
    NB_EXPECT(nb_tensor_numel(flat) == 72);
    nb_tensor_free(flat);
    nb_tensor_free(back);
    nb_tensor_free(c);
    nb_tensor_free(p);
    nb_tensor_free(b);
    nb_device_close(dev);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_create_and_query, test_create_errors, test_slice, test_select,
                 test_permute_transpose, test_broadcast_to, test_reshape, test_view_errors, test_strided_view,
                 test_views_share_buffer, test_copy_all_layouts, test_copy_overlap,
                 test_copy_random, test_copy_large, test_copy_errors, test_host_transfers,
                 test_fill_bytes, test_wrap, test_max_dims);
}

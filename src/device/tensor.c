/* nb_tensor: a typed, strided view of an nb_buffer (include/nabla/tensor.h).
 *
 * A handle is immutable once made, so handles can be shared between threads freely; views
 * retain the buffer and copy nothing. All shape and stride arithmetic lives in core/layout.c;
 * this file adds the buffer, the device and the copies.
 *
 * Describe format (nb_tensor_describe), always the same shape, strides included even when
 * contiguous:
 *     "<dtype>[<shape>] strides=[<byte strides>] <device>"    e.g. "f32[2,3] strides=[12,4] cpu"
 * with " offset=<bytes>" appended when element [0,…,0] is not at the start of the buffer
 * (e.g. "f32[3] strides=[4] cpu offset=12" for row 1 of that tensor).
 * Error messages name a tensor by its short form "f32[2,3]", adding "strides=[…]" where the
 * layout is the reason for the error.
 */
#include <stdio.h>
#include <string.h>

#include "core/layout.h"
#include "core/threadpool.h"
#include "core/util.h"
#include "device/device_impl.h"
#include "device/sync_check.h"
#include "nabla/alloc.h"
#include "nabla/tensor.h"

struct nb_tensor {
    nb_buffer *buf; /* one reference held by this handle */
    size_t offset;  /* bytes from nb_buffer_ptr(buf) to element [0,…,0] */
    nb_dtype dtype;
    int ndim;
    int64_t shape[NB_MAX_DIMS];
    int64_t strides[NB_MAX_DIMS]; /* bytes, >= 0 */
};

/* ---- small helpers ---------------------------------------------------------------------- */

static int64_t esize(const nb_tensor *t) { return (int64_t)nb_dtype_size(t->dtype); }

static nb_device *tdev(const nb_tensor *t) { return nb_buffer_device(t->buf); }

/* "f32[4,5]" for messages. */
static const char *tshort(const nb_tensor *t, char *buf, size_t cap) {
    char sb[160];
    snprintf(buf, cap, "%s%s", nb_dtype_name(t->dtype),
             nb_shape_str(t->ndim, t->shape, sb, sizeof sb));
    return buf;
}

/* "f32[3,4] strides=[4,12]" for layout messages. */
static const char *tlayout(const nb_tensor *t, char *buf, size_t cap) {
    char sb[160], st[200];
    snprintf(buf, cap, "%s%s strides=%s", nb_dtype_name(t->dtype),
             nb_shape_str(t->ndim, t->shape, sb, sizeof sb),
             nb_shape_str(t->ndim, t->strides, st, sizeof st));
    return buf;
}

static nb_status oom(const char *who) {
    return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: out of host memory", who);
}

/* A new handle on t's buffer with t's fields, to be edited into a view. */
static nb_status view_of(const char *who, const nb_tensor *t, nb_tensor **out) {
    nb_tensor *v = nb_alloc(sizeof *v, 16);
    if (!v) return oom(who);
    *v = *t;
    nb_buffer_retain(v->buf);
    *out = v;
    return NB_OK;
}

static nb_status check_dtype(const char *who, nb_dtype dtype) {
    if (!nb_dtype_is_valid((int)dtype))
        return nb_error(NB_ERR_INVALID_ARG, "%s: dtype %d is not a valid nb_dtype", who,
                        (int)dtype);
    return NB_OK;
}

static nb_status check_dim(const char *who, const nb_tensor *t, const char *arg, int dim) {
    if (dim < 0 || dim >= t->ndim) {
        char d[200];
        return nb_error(NB_ERR_INVALID_ARG, "%s: %s = %d is out of range for tensor %s (%d dims)",
                        who, arg, dim, tshort(t, d, sizeof d), t->ndim);
    }
    return NB_OK;
}

/* ---- creation --------------------------------------------------------------------------- */

/* Contiguous tensor on a fresh buffer; validates everything the public creators share. */
static nb_status create(const char *who, nb_device *dev, nb_dtype dtype, int ndim,
                        const int64_t *shape, nb_tensor **out) {
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(dev);
    NB_TRY(check_dtype(who, dtype));
    int64_t es = (int64_t)nb_dtype_size(dtype), numel;
    NB_TRY(nb_layout_check_shape(who, ndim, shape, es, &numel));
    nb_tensor *t = nb_calloc(sizeof *t, 16);
    if (!t) return oom(who);
    nb_status s = nb_buffer_alloc(dev, (size_t)(numel * es), &t->buf);
    if (s != NB_OK) {
        nb_free(t, sizeof *t);
        return s;
    }
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    nb_layout_contiguous_strides(ndim, t->shape, es, t->strides);
    *out = t;
    return NB_OK;
}

nb_status nb_tensor_empty(nb_device *dev, nb_dtype dtype, int ndim, const int64_t *shape,
                          nb_tensor **out) {
    return create(__func__, dev, dtype, ndim, shape, out);
}

nb_status nb_tensor_zeros(nb_device *dev, nb_dtype dtype, int ndim, const int64_t *shape,
                          nb_tensor **out) {
    NB_TRY(create(__func__, dev, dtype, ndim, shape, out));
    nb_status s = nb_memset(dev, nb_tensor_data(*out), 0, nb_tensor_nbytes(*out));
    if (s != NB_OK) {
        nb_tensor_free(*out);
        *out = NULL;
    }
    return s;
}

nb_status nb_tensor_from_host(nb_device *dev, nb_dtype dtype, int ndim, const int64_t *shape,
                              const void *data, nb_tensor **out) {
    NB_TRY(create(__func__, dev, dtype, ndim, shape, out));
    size_t n = nb_tensor_nbytes(*out);
    nb_status s = NB_OK;
    if (n && !data)
        s = nb_error(NB_ERR_INVALID_ARG, "nb_tensor_from_host: argument 'data' is NULL");
    else if (n && nb_device_get_kind(dev) == NB_DEVICE_CPU) memcpy(nb_tensor_data(*out), data, n);
    else s = nb_memcpy_h2d(dev, nb_tensor_data(*out), data, n);
    if (s != NB_OK) {
        nb_tensor_free(*out);
        *out = NULL;
    }
    return s;
}

/* Checks the dtype and shape of a wrap or view and gives its element size, element count and byte
 * strides: the caller's (each >= 0 and a multiple of the element size, as typed loads need) or,
 * for NULL, C order. */
static nb_status layout_args(const char *who, nb_dtype dtype, int ndim, const int64_t *shape,
                             const int64_t *strides, int64_t *es_out, int64_t *numel, int64_t *st) {
    NB_TRY(check_dtype(who, dtype));
    int64_t es = *es_out = (int64_t)nb_dtype_size(dtype);
    NB_TRY(nb_layout_check_shape(who, ndim, shape, es, numel));
    if (!strides) {
        nb_layout_contiguous_strides(ndim, shape, es, st);
        return NB_OK;
    }
    for (int i = 0; i < ndim; i++) {
        if (strides[i] < 0)
            return nb_error(NB_ERR_INVALID_ARG, "%s: strides[%d] = %lld is negative", who, i,
                            (long long)strides[i]);
        if (strides[i] % es)
            return nb_error(NB_ERR_INVALID_ARG,
                            "%s: strides[%d] = %lld is not a multiple of the element size %lld (%s)",
                            who, i, (long long)strides[i], (long long)es, nb_dtype_name(dtype));
        st[i] = strides[i];
    }
    return NB_OK;
}

/* Wrapped memory must be aligned to the element size, with strides that are multiples of it:
 * kernels access elements as typed loads, and a misaligned one is undefined on the CPU and a
 * fault on the GPU. */
nb_status nb_tensor_wrap(nb_device *dev, nb_dtype dtype, int ndim, const int64_t *shape,
                         const int64_t *strides, void *data, nb_tensor **out) {
    const char *who = __func__;
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(dev);
    int64_t es, numel, st[NB_MAX_DIMS];
    NB_TRY(layout_args(who, dtype, ndim, shape, strides, &es, &numel, st));
    int64_t span = nb_layout_span(ndim, shape, st, es);
    if (span < 0) {
        char sb[160], tb[200];
        return nb_error(NB_ERR_SHAPE, "%s: shape %s with strides %s spans more than 2^63 bytes",
                        who, nb_shape_str(ndim, shape, sb, sizeof sb),
                        nb_shape_str(ndim, st, tb, sizeof tb));
    }
    if (numel > 0 && !data) return nb_error(NB_ERR_INVALID_ARG, "%s: argument 'data' is NULL", who);
    if ((uintptr_t)data % (uintptr_t)es)
        return nb_error(NB_ERR_INVALID_ARG,
                        "%s: data %p is not aligned to the element size %lld (%s)", who, data,
                        (long long)es, nb_dtype_name(dtype));
    nb_tensor *t = nb_calloc(sizeof *t, 16);
    if (!t) return oom(who);
    nb_status s = nb_buffer_wrap(dev, data, (size_t)span, &t->buf);
    if (s != NB_OK) {
        nb_free(t, sizeof *t);
        return s;
    }
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        t->strides[i] = st[i];
    }
    *out = t;
    return NB_OK;
}

void nb_tensor_free(nb_tensor *t) {
    if (!t) return;
    nb_buffer_release(t->buf);
    nb_free(t, sizeof *t);
}

/* ---- queries ---------------------------------------------------------------------------- */

nb_device *nb_tensor_device(const nb_tensor *t) { return t ? tdev(t) : NULL; }
nb_dtype nb_tensor_dtype(const nb_tensor *t) { return t ? t->dtype : NB_DTYPE_COUNT; }
int nb_tensor_ndim(const nb_tensor *t) { return t ? t->ndim : 0; }
const int64_t *nb_tensor_shape(const nb_tensor *t) { return t ? t->shape : NULL; }
const int64_t *nb_tensor_strides(const nb_tensor *t) { return t ? t->strides : NULL; }
int64_t nb_tensor_numel(const nb_tensor *t) { return t ? nb_layout_numel(t->ndim, t->shape) : 0; }
size_t nb_tensor_nbytes(const nb_tensor *t) {
    return t ? (size_t)nb_tensor_numel(t) * nb_dtype_size(t->dtype) : 0;
}

/* Integer arithmetic: the buffer may hold a device address that is not a host pointer. */
void *nb_tensor_data(const nb_tensor *t) {
    return t ? (void *)((uintptr_t)nb_buffer_ptr(t->buf) + t->offset) : NULL;
}

int nb_tensor_is_contiguous(const nb_tensor *t) {
    return t && nb_layout_is_contiguous(t->ndim, t->shape, t->strides, esize(t));
}

int nb_tensor_is_dense(const nb_tensor *t) {
    return t && nb_layout_is_dense(t->ndim, t->shape, t->strides, esize(t));
}

const char *nb_tensor_describe(const nb_tensor *t, char *buf, size_t cap) {
    if (!buf || cap == 0) return buf;
    if (!t) {
        snprintf(buf, cap, "(null tensor)");
        return buf;
    }
    char lb[400];
    int n = snprintf(buf, cap, "%s %s", tlayout(t, lb, sizeof lb), nb_device_name(tdev(t)));
    if (t->offset && n >= 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, " offset=%zu", t->offset);
    return buf;
}

/* ---- views ------------------------------------------------------------------------------ */

nb_status nb_tensor_slice(const nb_tensor *t, int dim, int64_t start, int64_t stop, int64_t step,
                          nb_tensor **out) {
    const char *who = __func__;
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(t);
    NB_TRY(check_dim(who, t, "dim", dim));
    char d[200];
    if (step < 1)
        return nb_error(NB_ERR_INVALID_ARG, "%s: step %lld must be >= 1 (dim %d of tensor %s)", who,
                        (long long)step, dim, tshort(t, d, sizeof d));
    int64_t size = t->shape[dim];
    if (start < 0 || start > stop || stop > size) {
        char r[80];
        if (step == 1) snprintf(r, sizeof r, "[%lld:%lld]", (long long)start, (long long)stop);
        else
            snprintf(r, sizeof r, "[%lld:%lld:%lld]", (long long)start, (long long)stop,
                     (long long)step);
        return nb_error(NB_ERR_SHAPE,
                        "%s: %s out of bounds for dim %d of size %lld (tensor %s); need 0 <= "
                        "start <= stop <= size",
                        who, r, dim, (long long)size, tshort(t, d, sizeof d));
    }
    int64_t n = stop > start ? 1 + (stop - start - 1) / step : 0; /* no overflow for huge step */
    nb_tensor *v = NULL;
    NB_TRY(view_of(who, t, &v));
    v->shape[dim] = n;
    if (n > 0) v->offset += (size_t)(start * t->strides[dim]);
    /* With one element the step never multiplies an index; keeping the old stride avoids an
     * overflow from a huge step. With more, step < size so step*stride stays in the span. */
    if (n > 1) v->strides[dim] = t->strides[dim] * step;
    *out = v;
    return NB_OK;
}

nb_status nb_tensor_select(const nb_tensor *t, int dim, int64_t index, nb_tensor **out) {
    const char *who = __func__;
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(t);
    NB_TRY(check_dim(who, t, "dim", dim));
    if (index < 0 || index >= t->shape[dim]) {
        char d[200];
        return nb_error(NB_ERR_SHAPE,
                        "%s: index %lld out of bounds for dim %d of size %lld (tensor %s)", who,
                        (long long)index, dim, (long long)t->shape[dim], tshort(t, d, sizeof d));
    }
    nb_tensor *v = NULL;
    NB_TRY(view_of(who, t, &v));
    v->offset += (size_t)(index * t->strides[dim]);
    for (int i = dim; i + 1 < t->ndim; i++) {
        v->shape[i] = t->shape[i + 1];
        v->strides[i] = t->strides[i + 1];
    }
    v->ndim = t->ndim - 1;
    *out = v;
    return NB_OK;
}

static nb_status permute_impl(const char *who, const nb_tensor *t, const int *perm,
                              nb_tensor **out) {
    NB_TRY(nb_layout_check_perm(who, t->ndim, perm));
    nb_tensor *v = NULL;
    NB_TRY(view_of(who, t, &v));
    for (int i = 0; i < t->ndim; i++) {
        v->shape[i] = t->shape[perm[i]];
        v->strides[i] = t->strides[perm[i]];
    }
    *out = v;
    return NB_OK;
}

nb_status nb_tensor_permute(const nb_tensor *t, const int *perm, nb_tensor **out) {
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(t);
    return permute_impl(__func__, t, perm, out);
}

nb_status nb_tensor_transpose(const nb_tensor *t, int dim0, int dim1, nb_tensor **out) {
    const char *who = __func__;
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(t);
    NB_TRY(check_dim(who, t, "dim0", dim0));
    NB_TRY(check_dim(who, t, "dim1", dim1));
    int perm[NB_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) perm[i] = i;
    perm[dim0] = dim1;
    perm[dim1] = dim0;
    return permute_impl(who, t, perm, out);
}

nb_status nb_tensor_broadcast_to(const nb_tensor *t, int ndim, const int64_t *shape,
                                 nb_tensor **out) {
    const char *who = __func__;
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(t);
    NB_TRY(nb_layout_check_shape(who, ndim, shape, 1, NULL));
    char d[200], sb[160];
    if (ndim < t->ndim)
        return nb_error(
            NB_ERR_SHAPE, "%s: cannot broadcast %s to %s: the target has fewer dims (%d < %d)", who,
            tshort(t, d, sizeof d), nb_shape_str(ndim, shape, sb, sizeof sb), ndim, t->ndim);
    int lead = ndim - t->ndim; /* new leading dims, right alignment */
    for (int i = 0; i < t->ndim; i++) {
        int64_t have = t->shape[i], want = shape[lead + i];
        if (have != want && have != 1)
            return nb_error(NB_ERR_SHAPE,
                            "%s: cannot broadcast %s to %s: dim %d has size %lld but the target's "
                            "dim %d is %lld (sizes must be equal, or 1 in the tensor)",
                            who, tshort(t, d, sizeof d), nb_shape_str(ndim, shape, sb, sizeof sb),
                            i, (long long)have, lead + i, (long long)want);
    }
    nb_tensor *v = NULL;
    NB_TRY(view_of(who, t, &v));
    v->ndim = ndim;
    for (int i = ndim - 1; i >= 0; i--) {
        int j = i - lead;
        int64_t have = j >= 0 ? t->shape[j] : 1;
        v->shape[i] = shape[i];
        /* A stretched size-1 dim reads the same element for every index: stride 0. */
        v->strides[i] = (j >= 0 && have == shape[i]) ? t->strides[j] : 0;
    }
    *out = v;
    return NB_OK;
}

nb_status nb_tensor_reshape(const nb_tensor *t, int ndim, const int64_t *shape, nb_tensor **out) {
    const char *who = __func__;
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(t);
    char d[400], sb[160];
    int64_t ns[NB_MAX_DIMS], nst[NB_MAX_DIMS];
    NB_TRY(nb_layout_infer_shape(who, tshort(t, d, sizeof d), nb_tensor_numel(t), ndim, shape, ns));
    if (!nb_layout_view_strides(t->ndim, t->shape, t->strides, ndim, ns, esize(t), nst))
        return nb_error(NB_ERR_LAYOUT,
                        "%s: cannot view %s as %s: the layout is not contiguous over the merged "
                        "dims; call nb_tensor_contiguous first",
                        who, tlayout(t, d, sizeof d), nb_shape_str(ndim, ns, sb, sizeof sb));
    nb_tensor *v = NULL;
    NB_TRY(view_of(who, t, &v));
    v->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        v->shape[i] = ns[i];
        v->strides[i] = nst[i];
    }
    *out = v;
    return NB_OK;
}

nb_status nb_tensor_view(const nb_tensor *t, nb_dtype dtype, int ndim, const int64_t *shape,
                         const int64_t *strides, int64_t byte_offset, nb_tensor **out) {
    const char *who = __func__;
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(t);
    int64_t es, numel, st[NB_MAX_DIMS];
    NB_TRY(layout_args(who, dtype, ndim, shape, strides, &es, &numel, st));
    char sb[160], tb[200], d[200];
    int64_t span = nb_layout_span(ndim, shape, st, es);
    int64_t size = (int64_t)nb_buffer_size(t->buf), base = (int64_t)t->offset;
    /* start = bytes from the buffer's start to the view's element [0,…,0], in [0, size] */
    int inside = span >= 0 && byte_offset >= -base && byte_offset <= size - base;
    int64_t start = inside ? base + byte_offset : 0;
    if (!inside || (numel > 0 && span > size - start))
        return nb_error(NB_ERR_SHAPE,
                        "%s: a %s%s view with strides %s at byte offset %lld from %s's element 0 "
                        "does not fit in its buffer (%lld bytes, the tensor starting at byte %lld)",
                        who, nb_dtype_name(dtype), nb_shape_str(ndim, shape, sb, sizeof sb),
                        nb_shape_str(ndim, st, tb, sizeof tb), (long long)byte_offset,
                        tshort(t, d, sizeof d), (long long)size, (long long)base);
    if (((uintptr_t)nb_buffer_ptr(t->buf) + (uintptr_t)start) % (uintptr_t)es)
        return nb_error(NB_ERR_SHAPE,
                        "%s: byte offset %lld puts element 0 of a %s view at an address not "
                        "aligned to its size %lld",
                        who, (long long)byte_offset, nb_dtype_name(dtype), (long long)es);
    nb_tensor *v = NULL;
    NB_TRY(view_of(who, t, &v));
    v->offset = (size_t)start;
    v->dtype = dtype;
    v->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        v->shape[i] = shape[i];
        v->strides[i] = st[i];
    }
    *out = v;
    return NB_OK;
}

/* ---- copies ----------------------------------------------------------------------------- */

/* One side of a copy: where element [0,…,0] is and how to step from it. dev NULL means plain
 * host memory that belongs to no device (the caller's buffer in to_host/from_host_into). */
typedef struct view {
    nb_device *dev;
    char *ptr; /* host pointer, or a device address (never dereferenced then) */
    int64_t strides[NB_MAX_DIMS];
} view;

static int is_host(const view *v) { return !v->dev || nb_device_get_kind(v->dev) == NB_DEVICE_CPU; }

static view view_of_tensor(const nb_tensor *t) {
    view v = {tdev(t), nb_tensor_data(t), {0}};
    memcpy(v.strides, t->strides, sizeof v.strides);
    return v;
}

/* A flat copy of `bytes` between any two memories. Two different GPUs go through the host:
 * the device layer copies within one device only. */
static nb_status flat_copy(const char *who, view *dst, const view *src, size_t bytes) {
    if (bytes == 0) return NB_OK;
    int dh = is_host(dst), sh = is_host(src);
    if (dh && sh) {
        memmove(dst->ptr, src->ptr, bytes);
        return NB_OK;
    }
    if (dh) return nb_memcpy_d2h(src->dev, dst->ptr, src->ptr, bytes);
    if (sh) return nb_memcpy_h2d(dst->dev, dst->ptr, src->ptr, bytes);
    if (dst->dev == src->dev) return nb_memcpy_d2d(dst->dev, dst->ptr, src->ptr, bytes);
    void *tmp = nb_alloc(bytes, 64);
    if (!tmp) return oom(who);
    nb_status s = nb_memcpy_d2h(src->dev, tmp, src->ptr, bytes);
    if (s == NB_OK) s = nb_memcpy_h2d(dst->dev, dst->ptr, tmp, bytes);
    nb_free(tmp, bytes);
    return s;
}

/* Host strided copy, split over the outer dim on the thread pool when large enough that the
 * threads pay for themselves. */
typedef struct host_copy_job {
    char *dst;
    const char *src;
    const int64_t *ds, *ss, *shape;
    int ndim;
    size_t es;
} host_copy_job;

static void host_copy_range(void *ctx, int64_t begin, int64_t end) {
    const host_copy_job *j = ctx;
    int64_t shape[NB_MAX_DIMS];
    memcpy(shape, j->shape, sizeof(int64_t) * (size_t)j->ndim);
    shape[0] = end - begin;
    nb_strided_copy_host(j->dst + begin * j->ds[0], j->ds, j->src + begin * j->ss[0], j->ss,
                         j->ndim, shape, j->es);
}

static void host_strided_copy(char *dst, const int64_t *ds, const char *src, const int64_t *ss,
                              int ndim, const int64_t *shape, size_t es) {
    if (ndim == 0) {
        memcpy(dst, src, es);
        return;
    }
    host_copy_job job = {dst, src, ds, ss, shape, ndim, es};
    int64_t bytes = nb_layout_numel(ndim, shape) * (int64_t)es;
    nb_threadpool *pool = bytes >= (4 << 20) && shape[0] > 1 ? nb_threadpool_global() : NULL;
    if (pool) {
        int64_t per_row = bytes / shape[0];
        int64_t grain = per_row >= (256 << 10) ? 1 : (256 << 10) / per_row;
        nb_threadpool_run(pool, shape[0], grain, host_copy_range, &job);
    } else {
        host_copy_range(&job, 0, shape[0]);
    }
}

static nb_status copy_views(const char *who, view *dst, const view *src, int ndim,
                            const int64_t *shape_in, size_t es);

/* Copies src into a new contiguous block in src's memory, then that block into dst: used when
 * source and destination overlap, so no element is overwritten before it is read. */
static nb_status copy_staged(const char *who, view *dst, const view *src, int ndim,
                             const int64_t *shape, size_t es) {
    size_t bytes = (size_t)nb_layout_numel(ndim, shape) * es;
    view tmp = {src->dev, NULL, {0}};
    nb_layout_contiguous_strides(ndim, shape, (int64_t)es, tmp.strides);
    nb_buffer *buf = NULL;
    if (is_host(src)) {
        tmp.dev = NULL;
        tmp.ptr = nb_alloc(bytes, 64);
        if (!tmp.ptr) return oom(who);
    } else {
        NB_TRY(nb_buffer_alloc(src->dev, bytes, &buf));
        tmp.ptr = nb_buffer_ptr(buf);
    }
    nb_status s = copy_views(who, &tmp, src, ndim, shape, es);
    if (s == NB_OK) s = copy_views(who, dst, &tmp, ndim, shape, es);
    if (buf) nb_buffer_release(buf);
    else nb_free(tmp.ptr, bytes);
    return s;
}

/* Copies between two strided views of one shape, in any memories. dst must not have stride-0
 * dims of size > 1 (callers check and report it).
 *
 *   1. same dense layout on both sides  -> one flat memcpy of the right kind
 *   2. both in host memory              -> nb_strided_copy_host
 *   3. otherwise a GPU side is strided  -> stage through host memory. Correct but slow: the
 *      source's whole span is copied down, permuted on the host, and copied up over the
 *      destination's span. A destination with gaps is first read back so that the gap bytes it
 *      writes back are unchanged (this read-modify-write is ordered on the device's stream, but
 *      would lose a concurrent host-thread write into a gap). A GPU gather/scatter kernel will
 *      replace this path.
 */
static nb_status copy_views(const char *who, view *dst, const view *src, int ndim,
                            const int64_t *shape_in, size_t es) {
    int64_t shape[NB_MAX_DIMS];
    view d = *dst, s = *src;
    for (int i = 0; i < ndim; i++) shape[i] = shape_in[i];
    int64_t *strides[2] = {d.strides, s.strides};
    ndim = nb_layout_coalesce(ndim, shape, 2, strides);
    int64_t numel = nb_layout_numel(ndim, shape);
    if (numel == 0) return NB_OK;
    size_t bytes = (size_t)numel * es;
    int64_t dspan = nb_layout_span(ndim, shape, d.strides, (int64_t)es);
    int64_t sspan = nb_layout_span(ndim, shape, s.strides, (int64_t)es);

    /* Overlap is possible only within one memory: host with host, or one GPU with itself. */
    int same_mem = (is_host(&d) && is_host(&s)) || d.dev == s.dev;
    uintptr_t d0 = (uintptr_t)d.ptr, s0 = (uintptr_t)s.ptr;
    if (same_mem && d0 < s0 + (uintptr_t)sspan && s0 < d0 + (uintptr_t)dspan) {
        if (d0 == s0 && !memcmp(d.strides, s.strides, sizeof(int64_t) * (size_t)ndim))
            return NB_OK; /* a view copied onto itself */
        return copy_staged(who, &d, &s, ndim, shape, es);
    }

    int ddense = nb_layout_is_dense(ndim, shape, d.strides, (int64_t)es);
    if (ddense && !memcmp(d.strides, s.strides, sizeof(int64_t) * (size_t)ndim))
        return flat_copy(who, &d, &s, bytes); /* dense: element [0,…,0] is the lowest address */

    if (is_host(&d) && is_host(&s)) {
        host_strided_copy(d.ptr, d.strides, s.ptr, s.strides, ndim, shape, es);
        return NB_OK;
    }

    /* 3: staging through the host. */
    nb_status st = NB_OK;
    char *hs = s.ptr, *hd = d.ptr;
    if (!is_host(&s)) {
        hs = nb_alloc((size_t)sspan, 64);
        if (!hs) return oom(who);
        st = nb_memcpy_d2h(s.dev, hs, s.ptr, (size_t)sspan);
    }
    if (st == NB_OK && !is_host(&d)) {
        hd = nb_alloc((size_t)dspan, 64);
        if (!hd) st = oom(who);
        else if (!ddense) st = nb_memcpy_d2h(d.dev, hd, d.ptr, (size_t)dspan);
    }
    if (st == NB_OK) {
        host_strided_copy(hd, d.strides, hs, s.strides, ndim, shape, es);
        if (!is_host(&d)) st = nb_memcpy_h2d(d.dev, d.ptr, hd, (size_t)dspan);
    }
    if (hs && hs != s.ptr) nb_free(hs, (size_t)sspan);
    if (hd && hd != d.ptr) nb_free(hd, (size_t)dspan);
    return st;
}

/* dst must give every element its own address. */
static nb_status check_writable(const char *who, const char *arg, const nb_tensor *t) {
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] > 1 && t->strides[i] == 0) {
            char d[400];
            return nb_error(NB_ERR_LAYOUT,
                            "%s: %s %s has stride 0 on dim %d of size %lld (a broadcast view): "
                            "several elements share one address, so writing to it would race",
                            who, arg, tlayout(t, d, sizeof d), i, (long long)t->shape[i]);
        }
    return NB_OK;
}

static int same_shape(const nb_tensor *a, const nb_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

nb_status nb_tensor_copy(nb_tensor *dst, const nb_tensor *src) {
    const char *who = __func__;
    NB_CHECK_ARG(dst);
    NB_CHECK_ARG(src);
    char a[200], b[200];
    if (dst->dtype != src->dtype)
        return nb_error(NB_ERR_DTYPE, "%s: dtype mismatch: dst %s vs src %s (convert explicitly)",
                        who, tshort(dst, a, sizeof a), tshort(src, b, sizeof b));
    if (!same_shape(dst, src))
        return nb_error(NB_ERR_SHAPE, "%s: shape mismatch: dst %s vs src %s", who,
                        tshort(dst, a, sizeof a), tshort(src, b, sizeof b));
    NB_TRY(check_writable(who, "dst", dst));
    view d = view_of_tensor(dst), s = view_of_tensor(src);
    NB_TRY(copy_views(who, &d, &s, dst->ndim, dst->shape, nb_dtype_size(dst->dtype)));
    /* a copy into host memory waited for the source: a sync point (sync_check.h) */
    return tdev(dst)->kind == NB_DEVICE_CPU ? nb_device_run_sync_checks(tdev(src)) : NB_OK;
}

nb_status nb_tensor_to(const nb_tensor *t, nb_device *dev, nb_tensor **out) {
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(t);
    if (!dev) dev = tdev(t);
    NB_TRY(create(__func__, dev, t->dtype, t->ndim, t->shape, out));
    nb_status s = nb_tensor_copy(*out, t);
    if (s != NB_OK) {
        nb_tensor_free(*out);
        *out = NULL;
    }
    return s;
}

nb_status nb_tensor_contiguous(const nb_tensor *t, nb_tensor **out) {
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(t);
    if (nb_tensor_is_contiguous(t)) return view_of(__func__, t, out);
    return nb_tensor_to(t, NULL, out);
}

static nb_status check_bytes(const char *who, const nb_tensor *t, size_t bytes) {
    if (bytes != nb_tensor_nbytes(t)) {
        char d[200];
        return nb_error(NB_ERR_INVALID_ARG, "%s: bytes = %zu but tensor %s holds %zu bytes", who,
                        bytes, tshort(t, d, sizeof d), nb_tensor_nbytes(t));
    }
    return NB_OK;
}

nb_status nb_tensor_to_host(const nb_tensor *t, void *dst, size_t bytes) {
    const char *who = __func__;
    NB_CHECK_ARG(t);
    NB_TRY(check_bytes(who, t, bytes));
    if (bytes == 0) return NB_OK;
    NB_CHECK_ARG(dst);
    view d = {NULL, dst, {0}}, s = view_of_tensor(t);
    nb_layout_contiguous_strides(t->ndim, t->shape, esize(t), d.strides);
    NB_TRY(copy_views(who, &d, &s, t->ndim, t->shape, (size_t)esize(t)));
    return nb_device_run_sync_checks(tdev(t)); /* (a sync point: sync_check.h) */
}

nb_status nb_tensor_from_host_into(nb_tensor *t, const void *src, size_t bytes) {
    const char *who = __func__;
    NB_CHECK_ARG(t);
    NB_TRY(check_bytes(who, t, bytes));
    if (bytes == 0) return NB_OK;
    NB_CHECK_ARG(src);
    NB_TRY(check_writable(who, "tensor", t));
    view d = view_of_tensor(t), s = {NULL, (char *)src, {0}};
    nb_layout_contiguous_strides(t->ndim, t->shape, esize(t), s.strides);
    return copy_views(who, &d, &s, t->ndim, t->shape, (size_t)esize(t));
}

nb_status nb_tensor_fill_bytes(nb_tensor *t, int byte) {
    const char *who = __func__;
    NB_CHECK_ARG(t);
    if (nb_tensor_numel(t) == 0) return NB_OK;
    /* Broadcast dims revisit the same bytes, so filling one index of them fills them all:
     * shrink them to size 1 and the broadcast tensor becomes an ordinary writable view. */
    int64_t shape[NB_MAX_DIMS];
    view d = view_of_tensor(t);
    for (int i = 0; i < t->ndim; i++) shape[i] = t->strides[i] == 0 ? 1 : t->shape[i];
    int64_t es = esize(t);
    if (nb_layout_is_dense(t->ndim, shape, d.strides, es))
        return nb_memset(tdev(t), d.ptr, byte, (size_t)(nb_layout_numel(t->ndim, shape) * es));
    /* Gaps between elements: copy from one filled element repeated with stride 0. */
    unsigned char one[16];
    memset(one, byte, sizeof one);
    view s = {NULL, (char *)one, {0}};
    return copy_views(who, &d, &s, t->ndim, shape, (size_t)es);
}

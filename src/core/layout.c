/* Shape and stride arithmetic (see layout.h). Pure functions of their arguments; the only side
 * effect is nb_error's thread-local message on failure. */
#include "core/layout.h"

#include <stdio.h>
#include <string.h>

/* ---- formatting ------------------------------------------------------------------------- */

/* "[2,3,4]", "[]" for a scalar. Never overruns cap; a too-small buffer gets a truncated but
 * NUL-terminated string. Also used for stride arrays. */
const char *nb_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap) {
    if (!buf || cap == 0) return buf;
    size_t len = 0;
    buf[0] = '\0';
#define NB_PUT(...)                                                                                \
    do {                                                                                           \
        if (len < cap) {                                                                           \
            int n_ = snprintf(buf + len, cap - len, __VA_ARGS__);                                  \
            if (n_ > 0) len += (size_t)n_;                                                         \
        }                                                                                          \
    } while (0)
    NB_PUT("[");
    for (int i = 0; shape && i < ndim && i < NB_MAX_DIMS; i++)
        NB_PUT("%s%lld", i ? "," : "", (long long)shape[i]);
    NB_PUT("]");
#undef NB_PUT
    return buf;
}

/* ---- validation and counting ------------------------------------------------------------ */

nb_status nb_layout_check_shape(const char *who, int ndim, const int64_t *shape, int64_t elem_size,
                                int64_t *numel) {
    if (ndim < 0) return nb_error(NB_ERR_INVALID_ARG, "%s: ndim %d is negative", who, ndim);
    if (ndim > NB_MAX_DIMS)
        return nb_error(NB_ERR_SHAPE, "%s: ndim %d exceeds NB_MAX_DIMS (%d)", who, ndim,
                        NB_MAX_DIMS);
    if (ndim > 0 && !shape)
        return nb_error(NB_ERR_INVALID_ARG, "%s: argument 'shape' is NULL but ndim is %d", who,
                        ndim);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0) {
            char sb[160];
            return nb_error(NB_ERR_SHAPE, "%s: shape[%d] = %lld is negative (shape %s)", who, i,
                            (long long)shape[i], nb_shape_str(ndim, shape, sb, sizeof sb));
        }
    /* The extent counts size-0 dims as 1: strides of an empty array are still computed from it,
     * and an array with a 0 dim must not be a way to smuggle in absurd strides. */
    int64_t extent = elem_size > 0 ? elem_size : 1, n = 1;
    for (int i = 0; i < ndim; i++) {
        int64_t d = shape[i] ? shape[i] : 1;
        if (extent > INT64_MAX / d) {
            char sb[160];
            return nb_error(NB_ERR_SHAPE, "%s: shape %s is too large (its size overflows int64)",
                            who, nb_shape_str(ndim, shape, sb, sizeof sb));
        }
        extent *= d;
        n *= shape[i]; /* |n| <= extent: cannot overflow */
    }
    if (numel) *numel = n;
    return NB_OK;
}

int64_t nb_layout_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return -1;
        if (shape[i] == 0) n = 0;
    }
    if (n == 0) return 0;
    for (int i = 0; i < ndim; i++) {
        if (n > INT64_MAX / shape[i]) return -1;
        n *= shape[i];
    }
    return n;
}

/* ---- layout predicates ------------------------------------------------------------------ */

void nb_layout_contiguous_strides(int ndim, const int64_t *shape, int64_t elem_size,
                                  int64_t *strides) {
    int64_t s = elem_size;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i] > 1 ? shape[i] : 1;
    }
}

int nb_layout_is_contiguous(int ndim, const int64_t *shape, const int64_t *strides,
                            int64_t elem_size) {
    int64_t expect = elem_size;
    for (int i = ndim - 1; i >= 0; i--) {
        if (shape[i] == 0) return 1;
        if (shape[i] == 1) continue;
        if (strides[i] != expect) return 0;
        expect *= shape[i];
    }
    return 1;
}

int nb_layout_is_dense(int ndim, const int64_t *shape, const int64_t *strides, int64_t elem_size) {
    /* Dims of size > 1 sorted by stride ascending must form a contiguous chain. Insertion sort:
     * at most 8 entries. */
    int idx[NB_MAX_DIMS], m = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0) return 1;
        if (shape[i] == 1) continue;
        int j = m++;
        while (j > 0 && strides[idx[j - 1]] > strides[i]) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = i;
    }
    int64_t expect = elem_size;
    for (int k = 0; k < m; k++) {
        if (strides[idx[k]] != expect) return 0;
        expect *= shape[idx[k]];
    }
    return 1;
}

int nb_layout_has_zero_stride(int ndim, const int64_t *shape, const int64_t *strides) {
    for (int i = 0; i < ndim; i++)
        if (shape[i] > 1 && strides[i] == 0) return 1;
    return 0;
}

int64_t nb_layout_span(int ndim, const int64_t *shape, const int64_t *strides, int64_t elem_size) {
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0) return 0;
    int64_t last = 0; /* byte offset of the last element */
    for (int i = 0; i < ndim; i++) {
        int64_t k = shape[i] - 1;
        if (k == 0 || strides[i] == 0) continue;
        if (strides[i] < 0 || k > (INT64_MAX - last) / strides[i]) return -1;
        last += k * strides[i];
    }
    if (last > INT64_MAX - elem_size) return -1;
    return last + elem_size;
}

/* ---- broadcasting ----------------------------------------------------------------------- */

nb_status nb_broadcast_shapes_ex(int n, const int *ndims, const int64_t *const *shapes,
                                 int *out_ndim, int64_t *out_shape, int conflict[2]) {
    const char *who = "nb_broadcast_shapes";
    if (n < 0) return nb_error(NB_ERR_INVALID_ARG, "%s: n = %d is negative", who, n);
    if (n > 0 && (!ndims || !shapes))
        return nb_error(NB_ERR_INVALID_ARG, "%s: argument '%s' is NULL", who,
                        !ndims ? "ndims" : "shapes");
    if (!out_ndim || !out_shape)
        return nb_error(NB_ERR_INVALID_ARG, "%s: argument '%s' is NULL", who,
                        !out_ndim ? "out_ndim" : "out_shape");
    int nd = 0;
    for (int k = 0; k < n; k++) {
        char what[64];
        snprintf(what, sizeof what, "%s (shape %d)", who, k);
        nb_status s = nb_layout_check_shape(what, ndims[k], shapes[k], 1, NULL);
        if (s != NB_OK) return s;
        if (ndims[k] > nd) nd = ndims[k];
    }
    /* Walk dims from the right (r = 1 is the last dim). src[r] remembers which shape set the
     * current size, so a mismatch can name both culprits. */
    for (int r = 1; r <= nd; r++) {
        int64_t size = 1;
        int from = -1;
        for (int k = 0; k < n; k++) {
            if (r > ndims[k]) continue;
            int64_t d = shapes[k][ndims[k] - r];
            if (d == 1) continue;
            if (from < 0 || size == 1) {
                size = d;
                from = k;
            } else if (d != size) {
                char a[160], b[160];
                if (conflict) {
                    conflict[0] = from;
                    conflict[1] = k;
                }
                return nb_error(NB_ERR_SHAPE,
                                "cannot broadcast shapes %s and %s (shape %d vs shape %d): dim "
                                "-%d is %lld vs %lld",
                                nb_shape_str(ndims[from], shapes[from], a, sizeof a),
                                nb_shape_str(ndims[k], shapes[k], b, sizeof b), from, k, r,
                                (long long)size, (long long)d);
            }
        }
        out_shape[nd - r] = size;
    }
    *out_ndim = nd;
    return NB_OK;
}

nb_status nb_broadcast_shapes(int n, const int *ndims, const int64_t *const *shapes, int *out_ndim,
                              int64_t *out_shape) {
    return nb_broadcast_shapes_ex(n, ndims, shapes, out_ndim, out_shape, NULL);
}

/* ---- reshape ---------------------------------------------------------------------------- */

nb_status nb_layout_infer_shape(const char *who, const char *what, int64_t numel, int ndim,
                                const int64_t *shape, int64_t *out) {
    if (ndim < 0) return nb_error(NB_ERR_INVALID_ARG, "%s: ndim %d is negative", who, ndim);
    if (ndim > NB_MAX_DIMS)
        return nb_error(NB_ERR_SHAPE, "%s: ndim %d exceeds NB_MAX_DIMS (%d)", who, ndim,
                        NB_MAX_DIMS);
    if (ndim > 0 && !shape)
        return nb_error(NB_ERR_INVALID_ARG, "%s: argument 'shape' is NULL but ndim is %d", who,
                        ndim);
    char sb[160];
    int infer = -1;
    int64_t known = 1; /* product of the given dims, saturated to detect overflow */
    int overflow = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == -1) {
            if (infer >= 0)
                return nb_error(NB_ERR_SHAPE,
                                "%s: shape %s has more than one -1 (dims %d and %d); at most "
                                "one dim can be inferred",
                                who, nb_shape_str(ndim, shape, sb, sizeof sb), infer, i);
            infer = i;
            continue;
        }
        if (shape[i] < 0)
            return nb_error(NB_ERR_SHAPE,
                            "%s: shape[%d] = %lld is negative (only -1, 'infer this dim', is "
                            "allowed)",
                            who, i, (long long)shape[i]);
        if (shape[i] == 0) known = 0;
        else if (known != 0 && known > INT64_MAX / shape[i]) overflow = 1;
        else known *= shape[i];
    }
    if (overflow && known != 0)
        return nb_error(NB_ERR_SHAPE, "%s: cannot reshape %s (%lld elements) to %s", who, what,
                        (long long)numel, nb_shape_str(ndim, shape, sb, sizeof sb));
    int64_t inferred = 0;
    if (infer >= 0) {
        if (known == 0)
            return nb_error(NB_ERR_SHAPE,
                            "%s: cannot infer the -1 in %s for %s (%lld elements): the other "
                            "dims multiply to 0, so any size would fit",
                            who, nb_shape_str(ndim, shape, sb, sizeof sb), what, (long long)numel);
        if (numel % known != 0)
            return nb_error(NB_ERR_SHAPE,
                            "%s: cannot reshape %s (%lld elements) to %s: %lld is not a "
                            "multiple of %lld",
                            who, what, (long long)numel, nb_shape_str(ndim, shape, sb, sizeof sb),
                            (long long)numel, (long long)known);
        inferred = numel / known;
    } else if (known != numel) {
        return nb_error(NB_ERR_SHAPE, "%s: cannot reshape %s (%lld elements) to %s (%lld elements)",
                        who, what, (long long)numel, nb_shape_str(ndim, shape, sb, sizeof sb),
                        (long long)known);
    }
    for (int i = 0; i < ndim; i++) out[i] = i == infer ? inferred : shape[i];
    return NB_OK;
}

int nb_layout_view_strides(int old_ndim, const int64_t *old_shape, const int64_t *old_strides,
                           int new_ndim, const int64_t *new_shape, int64_t elem_size,
                           int64_t *new_strides) {
    int64_t numel = nb_layout_numel(old_ndim, old_shape);
    if (numel == 0) {
        /* Nothing is ever read: keep the old strides if the shape is unchanged, else any valid
         * strides will do. */
        int same = old_ndim == new_ndim;
        for (int i = 0; same && i < old_ndim; i++) same = old_shape[i] == new_shape[i];
        if (same)
            for (int i = 0; i < old_ndim; i++) new_strides[i] = old_strides[i];
        else nb_layout_contiguous_strides(new_ndim, new_shape, elem_size, new_strides);
        return 1;
    }
    /* A scalar behaves as [1] with a unit stride. */
    static const int64_t one = 1;
    int64_t scalar_stride = elem_size;
    if (old_ndim == 0) {
        old_ndim = 1;
        old_shape = &one;
        old_strides = &scalar_stride;
    }
    /* Walk old dims from the right, cutting them into chunks: maximal runs that are contiguous
     * within themselves (stride[d-1] == size[d]*stride[d], size-1 dims join any chunk). Each
     * chunk is a single strided "line" of tensor_numel elements with step chunk_base_stride;
     * it must be covered exactly by a run of new dims, which then get strides that are
     * multiples of chunk_base_stride. A new dim straddling two chunks is impossible. */
    int view_d = new_ndim - 1;
    int64_t chunk_base_stride = old_strides[old_ndim - 1];
    int64_t tensor_numel = 1, view_numel = 1;
    for (int tensor_d = old_ndim - 1; tensor_d >= 0; tensor_d--) {
        tensor_numel *= old_shape[tensor_d];
        if (tensor_d == 0 || (old_shape[tensor_d - 1] != 1 &&
                              old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
            while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
                new_strides[view_d] = view_numel * chunk_base_stride;
                view_numel *= new_shape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) return 0;
            if (tensor_d > 0) {
                chunk_base_stride = old_strides[tensor_d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

/* ---- permutations and coalescing -------------------------------------------------------- */

nb_status nb_layout_check_perm(const char *who, int ndim, const int *perm) {
    if (ndim > 0 && !perm) return nb_error(NB_ERR_INVALID_ARG, "%s: argument 'perm' is NULL", who);
    if (ndim < 0 || ndim > NB_MAX_DIMS)
        return nb_error(NB_ERR_INVALID_ARG, "%s: ndim %d is out of range 0..%d", who, ndim,
                        NB_MAX_DIMS);
    int seen[NB_MAX_DIMS] = {0};
    int64_t p64[NB_MAX_DIMS]; /* for nb_shape_str */
    char pb[160];
    for (int k = 0; k < ndim; k++) p64[k] = perm[k];
    for (int i = 0; i < ndim; i++) {
        if (perm[i] < 0 || perm[i] >= ndim)
            return nb_error(NB_ERR_INVALID_ARG,
                            "%s: perm %s is not a permutation of 0..%d: perm[%d] = %d is out of "
                            "range",
                            who, nb_shape_str(ndim, p64, pb, sizeof pb), ndim - 1, i, perm[i]);
        if (seen[perm[i]]++)
            return nb_error(NB_ERR_INVALID_ARG,
                            "%s: perm %s is not a permutation of 0..%d: perm[%d] = %d repeats an "
                            "earlier entry",
                            who, nb_shape_str(ndim, p64, pb, sizeof pb), ndim - 1, i, perm[i]);
    }
    return NB_OK;
}

int nb_layout_coalesce(int ndim, int64_t *shape, int nstrides, int64_t *const *strides) {
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0) {
            shape[0] = 0;
            for (int k = 0; k < nstrides; k++) strides[k][0] = 0;
            return 1;
        }
    int m = 0; /* drop size-1 dims: they never move an address */
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 1) continue;
        shape[m] = shape[i];
        for (int k = 0; k < nstrides; k++) strides[k][m] = strides[k][i];
        m++;
    }
    if (m == 0) return 0;
    int j = 0; /* last output dim; merge dim i into it when every array allows */
    for (int i = 1; i < m; i++) {
        int merge = 1;
        for (int k = 0; k < nstrides && merge; k++)
            merge = strides[k][j] == shape[i] * strides[k][i];
        if (merge) {
            shape[j] *= shape[i];
            for (int k = 0; k < nstrides; k++) strides[k][j] = strides[k][i];
        } else {
            j++;
            shape[j] = shape[i];
            for (int k = 0; k < nstrides; k++) strides[k][j] = strides[k][i];
        }
    }
    return j + 1;
}

/* nabla — tensors: typed, strided views of device memory.
 *
 * A tensor is a handle on (buffer, byte offset, dtype, up to NB_MAX_DIMS dims of shape and byte
 * strides). Views (slice, select, permute, transpose, broadcast_to, reshape) make a new handle on
 * the same buffer; nothing is copied. Every handle is freed with nb_tensor_free; the memory goes
 * when the last handle on it goes. Strides are in bytes and may be 0 (broadcast) but not negative.
 */
#ifndef NABLA_TENSOR_H
#define NABLA_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "nabla/device.h"
#include "nabla/dtype.h"
#include "nabla/shape.h" /* NB_MAX_DIMS, nb_shape_str */
#include "nabla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nb_tensor nb_tensor;

/* ---- creation ------------------------------------------------------------------------------ */

/* Uninitialised contiguous (C-order) tensor. ndim may be 0 (a scalar). */
nb_status nb_tensor_empty(nb_device *dev, nb_dtype dtype, int ndim, const int64_t *shape,
                          nb_tensor **out);
nb_status nb_tensor_zeros(nb_device *dev, nb_dtype dtype, int ndim, const int64_t *shape,
                          nb_tensor **out);
/* Contiguous tensor filled from contiguous host data of the same dtype. */
nb_status nb_tensor_from_host(nb_device *dev, nb_dtype dtype, int ndim, const int64_t *shape,
                              const void *data, nb_tensor **out);
/* Wraps memory nabla does not own (host pointer for cpu, device address for cuda). strides in
 * bytes, NULL for C order. The caller keeps the memory alive while the tensor and its views live. */
nb_status nb_tensor_wrap(nb_device *dev, nb_dtype dtype, int ndim, const int64_t *shape,
                         const int64_t *strides, void *data, nb_tensor **out);
void nb_tensor_free(nb_tensor *t);

/* ---- queries ------------------------------------------------------------------------------- */

nb_device *nb_tensor_device(const nb_tensor *t);
nb_dtype nb_tensor_dtype(const nb_tensor *t);
int nb_tensor_ndim(const nb_tensor *t);
const int64_t *nb_tensor_shape(const nb_tensor *t);
const int64_t *nb_tensor_strides(const nb_tensor *t); /* bytes */
int64_t nb_tensor_numel(const nb_tensor *t);
size_t nb_tensor_nbytes(const nb_tensor *t); /* numel * element size */
/* Address of element [0,…,0] (host pointer or device address). */
void *nb_tensor_data(const nb_tensor *t);
/* C-order contiguous (strides of size-1 dims are ignored). */
int nb_tensor_is_contiguous(const nb_tensor *t);
/* Every element at its own address, no gaps, in some dimension order. */
int nb_tensor_is_dense(const nb_tensor *t);
/* "f32[2,3] strides=[12,4] cpu" into buf; returns buf. */
const char *nb_tensor_describe(const nb_tensor *t, char *buf, size_t cap);

/* ---- views (no copies) --------------------------------------------------------------------- */

/* Elements start, start+step, … < stop along dim. Requires 0 <= start <= stop <= size, step >= 1. */
nb_status nb_tensor_slice(const nb_tensor *t, int dim, int64_t start, int64_t stop, int64_t step,
                          nb_tensor **out);
/* Index `index` of dim, which is removed. Requires 0 <= index < size. */
nb_status nb_tensor_select(const nb_tensor *t, int dim, int64_t index, nb_tensor **out);
/* out dim i = t dim perm[i]; perm must be a permutation of 0..ndim-1. */
nb_status nb_tensor_permute(const nb_tensor *t, const int *perm, nb_tensor **out);
nb_status nb_tensor_transpose(const nb_tensor *t, int dim0, int dim1, nb_tensor **out);
/* NumPy broadcasting: right-aligned, each dim equal or 1 (becomes stride 0); may add leading dims. */
nb_status nb_tensor_broadcast_to(const nb_tensor *t, int ndim, const int64_t *shape, nb_tensor **out);
/* New shape with the same number of elements; one entry may be -1 (inferred). Succeeds whenever
 * the layout allows a view (any contiguous tensor, and splits/merges of compatible dims);
 * otherwise NB_ERR_LAYOUT: make it contiguous first. */
nb_status nb_tensor_reshape(const nb_tensor *t, int ndim, const int64_t *shape, nb_tensor **out);

/* Any strided view of the memory t's buffer holds: dtype (may differ from t's), ndim dims of shape
 * and byte strides (NULL: C order), starting byte_offset bytes from t's element [0,…,0] (may be
 * negative, down to the start of the buffer). Strides must be >= 0 and multiples of the new
 * element size (NB_ERR_INVALID_ARG), the start aligned to it and every element inside the
 * buffer (NB_ERR_SHAPE naming the view and the buffer's extent). Used for SlangPy's Tensor.view and for the
 * fields of a struct tensor (a u8 tensor of records seen as f32 / i32 field views). */
nb_status nb_tensor_view(const nb_tensor *t, nb_dtype dtype, int ndim, const int64_t *shape,
                         const int64_t *strides, int64_t byte_offset, nb_tensor **out);

/* ---- data movement ------------------------------------------------------------------------- */

/* Copies src into dst elementwise. Same shape and dtype required; any devices, any strides
 * (dst must not have stride-0 dims of size > 1). */
nb_status nb_tensor_copy(nb_tensor *dst, const nb_tensor *src);
/* New contiguous tensor with the contents of t on device dev (NULL = t's device). */
nb_status nb_tensor_to(const nb_tensor *t, nb_device *dev, nb_tensor **out);
/* t itself (a new handle) if it is contiguous, else a contiguous copy. */
nb_status nb_tensor_contiguous(const nb_tensor *t, nb_tensor **out);
/* Copies t's elements in C order into host memory of `bytes` (must equal nb_tensor_nbytes). Like
 * nb_device_synchronize, it then returns a pending deferred bounds error of t's device (the copy
 * itself is done: include/nabla/module.h, nb_call_defer_checks); so do nb_tensor_copy into a CPU
 * tensor and nb_tensor_to the CPU. */
nb_status nb_tensor_to_host(const nb_tensor *t, void *dst, size_t bytes);
/* Copies C-ordered host data into t (any strides). bytes must equal nb_tensor_nbytes. */
nb_status nb_tensor_from_host_into(nb_tensor *t, const void *src, size_t bytes);
/* Sets every byte of every element to `byte` (contiguous or dense tensors). */
nb_status nb_tensor_fill_bytes(nb_tensor *t, int byte);

#ifdef __cplusplus
}
#endif
#endif

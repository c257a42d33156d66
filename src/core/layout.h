/* Shape and stride arithmetic for strided N-d arrays: no memory, no devices, just numbers.
 *
 * Conventions used throughout (the same as nb_tensor's):
 *   - ndim is 0..NB_MAX_DIMS; ndim 0 is a scalar with one element.
 *   - strides are in BYTES, never negative, and may be 0 (a broadcast dim).
 *   - dims of size 0 are legal (the array then has no elements).
 * Functions that validate take `who` (the public function's name) to prefix their messages, so
 * an error reads "nb_tensor_reshape: …" rather than naming an internal helper.
 *
 * Used by tensors (src/device/tensor.c) and by the vectorized-call layer (broadcasting of call
 * shapes), which is why nothing here knows about nb_tensor itself.
 */
#ifndef NB_CORE_LAYOUT_H
#define NB_CORE_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "nabla/status.h"
#include "nabla/shape.h" /* NB_MAX_DIMS, nb_shape_str */

/* Checks 0 <= ndim <= NB_MAX_DIMS, shape non-NULL when ndim > 0, every dim >= 0, and that
 * elem_size times the product of max(dim, 1) fits in int64 — so C-order byte strides can be
 * computed even for shapes with a 0 in them (pass elem_size 1 when no bytes are involved).
 * On success writes the element count to *numel (may be NULL).
 * Errors: NB_ERR_INVALID_ARG (negative ndim, NULL shape), NB_ERR_SHAPE (too many dims, a
 * negative dim, overflow), each naming the argument and its value. */
nb_status nb_layout_check_shape(const char *who, int ndim, const int64_t *shape, int64_t elem_size,
                                int64_t *numel);

/* Product of the dims (1 for a scalar); -1 if a dim is negative or the product overflows. */
int64_t nb_layout_numel(int ndim, const int64_t *shape);

/* C-order (row-major) byte strides: the last dim has stride elem_size. Dims of size 0 or 1 are
 * treated as size 1 when computing the outer strides, so strides stay meaningful for empty
 * arrays (e.g. [2,0,3] f32 -> [12,12,4]). The caller has checked that numel*elem_size fits. */
void nb_layout_contiguous_strides(int ndim, const int64_t *shape, int64_t elem_size,
                                  int64_t *strides);

/* C-order contiguous: strides match nb_layout_contiguous_strides on every dim of size > 1
 * (strides of size-1 dims are irrelevant: they are never multiplied by a non-zero index).
 * Arrays with no elements are contiguous. */
int nb_layout_is_contiguous(int ndim, const int64_t *shape, const int64_t *strides,
                            int64_t elem_size);

/* Dense: the elements tile [0, numel*elem_size) exactly, in some order of the dims (a
 * permutation of a contiguous array). Arrays with no elements are dense. */
int nb_layout_is_dense(int ndim, const int64_t *shape, const int64_t *strides, int64_t elem_size);

/* 1 if some dim of size > 1 has stride 0, i.e. several indices share one address. */
int nb_layout_has_zero_stride(int ndim, const int64_t *shape, const int64_t *strides);

/* Bytes from element [0,…,0] to one past the last byte of the last element — the memory the
 * view touches, given non-negative strides. 0 for an empty array; -1 on overflow. */
int64_t nb_layout_span(int ndim, const int64_t *shape, const int64_t *strides, int64_t elem_size);

/* NumPy broadcasting of n shapes: right-aligned, each dim equal across shapes or 1. out_shape
 * needs NB_MAX_DIMS entries; *out_ndim is the largest ndim. A 1 broadcasts to anything,
 * including 0. Errors (NB_ERR_SHAPE) name both conflicting shapes and the dim, e.g.
 * "cannot broadcast shapes [2,3] and [4] (shape 0 vs shape 2): dim -1 is 3 vs 4" (dims counted
 * from the right, as they align). The message has no function-name prefix: callers add their
 * own context (argument names) around it. */
nb_status nb_broadcast_shapes(int n, const int *ndims, const int64_t *const *shapes, int *out_ndim,
                              int64_t *out_shape);
/* The same, and on a mismatch writes the indices of the two conflicting shapes to conflict[0]
 * and conflict[1] (conflict may be NULL), so a caller can rewrite the message with argument
 * names. */
nb_status nb_broadcast_shapes_ex(int n, const int *ndims, const int64_t *const *shapes,
                                 int *out_ndim, int64_t *out_shape, int conflict[2]);

/* Resolves a reshape target: at most one -1 (inferred from numel), no other negative entry,
 * product == numel. `what` describes the source for messages (e.g. "f32[3,4]"). Writes the
 * resolved shape to out (may alias shape). NB_ERR_SHAPE on any violation. */
nb_status nb_layout_infer_shape(const char *who, const char *what, int64_t numel, int ndim,
                                const int64_t *shape, int64_t *out);

/* PyTorch's view algorithm (ATen computeStride): strides for viewing (old_shape, old_strides)
 * as new_shape without copying. Succeeds whenever every group of old dims that is merged or
 * split is contiguous within itself — e.g. splitting dim 0 of a transposed [4,6] into [2,2,6]
 * works, merging the two dims of a transposed matrix does not. Size-1 dims are free.
 * Requires numel(old) == numel(new). Returns 1 and fills new_strides, or 0 if no view exists. */
int nb_layout_view_strides(int old_ndim, const int64_t *old_shape, const int64_t *old_strides,
                           int new_ndim, const int64_t *new_shape, int64_t elem_size,
                           int64_t *new_strides);

/* Checks that perm[0..ndim) is a permutation of 0..ndim-1. NB_ERR_INVALID_ARG naming the
 * offending entry otherwise. */
nb_status nb_layout_check_perm(const char *who, int ndim, const int *perm);

/* Simplifies `nstrides` arrays that share one shape, for iteration: drops size-1 dims and merges
 * neighbouring dims i, i+1 wherever stride[i] == shape[i+1]*stride[i+1] holds in EVERY stride
 * array, so the same elements are visited in the same order with fewer, longer dims. Rewrites
 * shape and the stride arrays in place and returns the new ndim (0 when one element remains;
 * an empty array is left as a single dim of size 0). */
int nb_layout_coalesce(int ndim, int64_t *shape, int nstrides, int64_t *const *strides);

#endif

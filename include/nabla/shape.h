/* nabla — the shape limits and shape printing shared by tensors, .npy files and the call layer
 * (implemented in core: src/core/layout.c). */
#ifndef NABLA_SHAPE_H
#define NABLA_SHAPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Most dims of a tensor, an array argument or a .npy file. */
#define NB_MAX_DIMS 8

/* Writes "[2,3,4]" into buf; returns buf. */
const char *nb_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif

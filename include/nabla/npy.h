/* nabla — NumPy .npy files.
 *
 * Reads and writes the .npy format (format versions 1.0, 2.0 and 3.0 on read; 1.0, or 2.0 when
 * the header does not fit in 64 KiB, on write). Supported dtypes: f32 ('<f4'), f64 ('<f8'),
 * f16 ('<f2'), i32 ('<i4'), i64 ('<i8'), u32 ('<u4'), u8 ('|u1') and bool ('|b1'). Data must be
 * little-endian and in C order: a Fortran-ordered file is NB_ERR_UNSUPPORTED (save it with
 * np.ascontiguousarray first), as are big-endian data and other dtypes (bf16 has no NumPy dtype).
 *
 * Errors: NB_ERR_IO (cannot open/read/write the file, truncated file, file longer than its
 * header says), NB_ERR_INVALID_ARG (not an .npy file: bad magic or malformed header),
 * NB_ERR_UNSUPPORTED (dtype, byte order, Fortran order, format version), NB_ERR_SHAPE (more
 * than NB_MAX_DIMS dims). Every message names the file.
 */
#ifndef NABLA_NPY_H
#define NABLA_NPY_H

#include "nabla/device.h"
#include "nabla/status.h"
#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads `path` into a new contiguous tensor on dev (NULL = the CPU). */
nb_status nb_tensor_load_npy(nb_device *dev, const char *path, nb_tensor **out);
/* Writes t (any device, any strides) to `path` in C order, replacing the file. */
nb_status nb_tensor_save_npy(const nb_tensor *t, const char *path);

/* The same from/to memory: parses an in-memory .npy image (`name` is used in messages). */
nb_status nb_tensor_load_npy_mem(nb_device *dev, const void *data, size_t size, const char *name,
                                 nb_tensor **out);

#ifdef __cplusplus
}
#endif
#endif

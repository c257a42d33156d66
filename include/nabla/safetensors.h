/* nabla — safetensors files (F32 tensors + string metadata), as written by PyTorch's safetensors.
 *
 *   nb_st_tensor ts[2] = {{"w", 2, {3, 4}, wdata}, {"b", 1, {3}, bdata}};
 *   const char *keys[] = {"format"}, *vals[] = {"pt"};
 *   nb_safetensors_write("m.safetensors", 2, ts, 1, keys, vals);
 *
 *   nb_safetensors *f;
 *   nb_safetensors_read("m.safetensors", &f);            // whole file validated up front
 *   const nb_st_tensor *w;
 *   nb_safetensors_find(f, "w", &w);                     // NB_ERR_NOT_FOUND naming "w"
 *   const char *fmt; nb_safetensors_meta(f, "format", &fmt);   // NULL when absent
 *   nb_safetensors_free(f);
 *
 * Layout: 8-byte little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {"key": "value", ...}} (padded with spaces to a multiple of 8), then the data
 * (offsets relative to its start, little-endian). Writing: F32, atomically (a temporary file
 * beside the target, fsync, rename: a process killed while saving leaves the previous file).
 * Reading: F32, and F16, BF16 and F64 converted to f32 (nb_st_tensor.data is always f32); other
 * dtypes (integers, F8), a truncated file, bad JSON, duplicate tensor names, duplicate keys in a
 * tensor entry or in __metadata__, offsets that do not match the shape, run past the end of the
 * data or overlap another tensor's fail with NB_ERR_IO naming the file and the problem (and the
 * tensor or tensors, if any); so does anything but a regular file (a FIFO is refused without
 * blocking). Values are not checked (NaN / Inf are read as they are). Parsing is linear in the
 * header size. The whole file is read into memory (fine for checkpoints of ~100 MB).
 */
#ifndef NABLA_SAFETENSORS_H
#define NABLA_SAFETENSORS_H

#include <stdint.h>

#include "nabla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NB_ST_MAX_DIMS 8

typedef struct nb_st_tensor {
    const char *name;
    int ndim;                        /* 0..NB_ST_MAX_DIMS */
    int64_t shape[NB_ST_MAX_DIMS];
    const float *data;               /* prod(shape) f32 */
} nb_st_tensor;

nb_status nb_safetensors_write(const char *path, int n, const nb_st_tensor *tensors, int n_meta,
                               const char *const *keys, const char *const *vals);

typedef struct nb_safetensors nb_safetensors;

nb_status nb_safetensors_read(const char *path, nb_safetensors **out);
void nb_safetensors_free(nb_safetensors *f);
/* Number of tensors; tensor i (in file order). */
nb_status nb_safetensors_count(const nb_safetensors *f, int *n);
nb_status nb_safetensors_get(const nb_safetensors *f, int i, const nb_st_tensor **out);
nb_status nb_safetensors_find(const nb_safetensors *f, const char *name, const nb_st_tensor **out);
/* *value = the metadata string for key, or NULL when absent (still NB_OK). */
nb_status nb_safetensors_meta(const nb_safetensors *f, const char *key, const char **value);

#ifdef __cplusplus
}
#endif
#endif

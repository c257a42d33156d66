/* nabla — element types and half-precision conversion. */
#ifndef NABLA_DTYPE_H
#define NABLA_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nb_dtype {
    NB_F32 = 0,
    NB_F64,
    NB_F16,  /* IEEE binary16 */
    NB_BF16, /* bfloat16: the top 16 bits of an f32 */
    NB_I32,
    NB_U32,
    NB_I64,
    NB_U8,
    NB_BOOL, /* one byte, 0 or 1 */
    NB_DTYPE_COUNT
} nb_dtype;

size_t nb_dtype_size(nb_dtype t);          /* bytes per element; 0 for an invalid dtype */
const char *nb_dtype_name(nb_dtype t);     /* "f32", "bf16", …; "invalid" for an invalid dtype */
int nb_dtype_from_name(const char *name);  /* inverse of nb_dtype_name; -1 if unknown */
int nb_dtype_is_float(nb_dtype t);         /* f32 f64 f16 bf16 */
int nb_dtype_is_valid(int t);

/* Round-to-nearest-even conversions; NaN stays NaN, overflow becomes infinity. */
uint16_t nb_f32_to_f16(float f);
float nb_f16_to_f32(uint16_t h);
uint16_t nb_f32_to_bf16(float f);
float nb_bf16_to_f32(uint16_t b);

/* Converts n elements between dtypes on the host, through double: out-of-range values saturate
 * to the target's range, NaN becomes 0 in integer targets, bool is x != 0. */
void nb_convert(void *dst, nb_dtype dst_type, const void *src, nb_dtype src_type, size_t n);

#ifdef __cplusplus
}
#endif
#endif

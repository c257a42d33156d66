/* Element types and exact half-precision conversions (round to nearest, ties to even). */
#include <math.h>
#include <string.h>

#include "nabla/dtype.h"

static const struct {
    const char *name;
    size_t size;
    int is_float;
} nb_dtypes[NB_DTYPE_COUNT] = {
    [NB_F32] = {"f32", 4, 1},  [NB_F64] = {"f64", 8, 1}, [NB_F16] = {"f16", 2, 1},
    [NB_BF16] = {"bf16", 2, 1}, [NB_I32] = {"i32", 4, 0}, [NB_U32] = {"u32", 4, 0},
    [NB_I64] = {"i64", 8, 0},  [NB_U8] = {"u8", 1, 0},   [NB_BOOL] = {"bool", 1, 0},
};

int nb_dtype_is_valid(int t) { return t >= 0 && t < NB_DTYPE_COUNT; }
size_t nb_dtype_size(nb_dtype t) { return nb_dtype_is_valid((int)t) ? nb_dtypes[t].size : 0; }
const char *nb_dtype_name(nb_dtype t) { return nb_dtype_is_valid((int)t) ? nb_dtypes[t].name : "invalid"; }
int nb_dtype_is_float(nb_dtype t) { return nb_dtype_is_valid((int)t) && nb_dtypes[t].is_float; }

int nb_dtype_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < NB_DTYPE_COUNT; i++)
        if (strcmp(name, nb_dtypes[i].name) == 0) return i;
    /* Common long spellings. */
    static const struct { const char *alias; nb_dtype t; } aliases[] = {
        {"float32", NB_F32}, {"float", NB_F32},  {"float64", NB_F64}, {"double", NB_F64},
        {"float16", NB_F16}, {"half", NB_F16},   {"bfloat16", NB_BF16}, {"int32", NB_I32},
        {"int", NB_I32},     {"uint32", NB_U32}, {"uint", NB_U32},    {"int64", NB_I64},
        {"uint8", NB_U8},
    };
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(name, aliases[i].alias) == 0) return (int)aliases[i].t;
    return -1;
}

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

uint16_t nb_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff) /* inf or NaN (keep NaN quiet and non-zero) */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u); /* overflow → inf */
    if (e <= 0) {
        /* Subnormal half (or zero): shift the full mantissa, rounding to nearest even. */
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* may carry into exp: correct */
    return (uint16_t)(sign | h);
}

float nb_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        if (man == 0) return bits_f32(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13));
    return bits_f32(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

uint16_t nb_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)((x + rounding) >> 16);
}

float nb_bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }

/* Loads element i of src as a double (integers above 2^53 lose precision; documented). */
static double nb_load(const void *src, nb_dtype t, size_t i) {
    switch (t) {
    case NB_F32: return ((const float *)src)[i];
    case NB_F64: return ((const double *)src)[i];
    case NB_F16: return nb_f16_to_f32(((const uint16_t *)src)[i]);
    case NB_BF16: return nb_bf16_to_f32(((const uint16_t *)src)[i]);
    case NB_I32: return ((const int32_t *)src)[i];
    case NB_U32: return ((const uint32_t *)src)[i];
    case NB_I64: return (double)((const int64_t *)src)[i];
    case NB_U8: return ((const uint8_t *)src)[i];
    case NB_BOOL: return ((const uint8_t *)src)[i] != 0;
    default: return 0;
    }
}

/* Float → integer conversions that C leaves undefined (NaN, out of range) saturate to the
 * target's range; NaN becomes 0. */
static int64_t nb_to_int(double v, double lo, double hi) {
    if (v != v) return 0;
    if (v <= lo) return (int64_t)lo;
    if (v >= hi) return v >= 9.2233720368547758e18 ? INT64_MAX : (int64_t)hi;
    return (int64_t)v;
}

static void nb_store(void *dst, nb_dtype t, size_t i, double v) {
    switch (t) {
    case NB_F32: ((float *)dst)[i] = (float)v; break;
    case NB_F64: ((double *)dst)[i] = v; break;
    case NB_F16: ((uint16_t *)dst)[i] = nb_f32_to_f16((float)v); break;
    case NB_BF16: ((uint16_t *)dst)[i] = nb_f32_to_bf16((float)v); break;
    case NB_I32: ((int32_t *)dst)[i] = (int32_t)nb_to_int(v, -2147483648.0, 2147483647.0); break;
    case NB_U32: ((uint32_t *)dst)[i] = (uint32_t)nb_to_int(v, 0.0, 4294967295.0); break;
    case NB_I64: ((int64_t *)dst)[i] = nb_to_int(v, -9.2233720368547758e18, 9.2233720368547758e18); break;
    case NB_U8: ((uint8_t *)dst)[i] = (uint8_t)nb_to_int(v, 0.0, 255.0); break;
    case NB_BOOL: ((uint8_t *)dst)[i] = v != 0; break;
    default: break;
    }
}

void nb_convert(void *dst, nb_dtype dst_type, const void *src, nb_dtype src_type, size_t n) {
    if (dst_type == src_type) {
        memmove(dst, src, n * nb_dtype_size(dst_type));
        return;
    }
    /* Exact integer paths where a double would round. */
    if (src_type == NB_I64 && dst_type == NB_I32) {
        for (size_t i = 0; i < n; i++) ((int32_t *)dst)[i] = (int32_t)((const int64_t *)src)[i];
        return;
    }
    for (size_t i = 0; i < n; i++) nb_store(dst, dst_type, i, nb_load(src, src_type, i));
}

/* Built-in function table (see intrinsics.h). */
#include "lang/intrinsics.h"

#include <string.h>

static const nb_intrinsic_info g_intrinsics[NB_INTR_COUNT] = {
#define NB_X_(id, name, mn, mx, sig, diff, flags) {name, mn, mx, NB_ISIG_##sig, NB_IDIFF_##diff, flags},
    NB_INTRINSICS(NB_X_)
#undef NB_X_
};

const nb_intrinsic_info *nb_intrinsic_get(int id)
{
    if (id < 0 || id >= NB_INTR_COUNT) return NULL;
    return &g_intrinsics[id];
}

int nb_intrinsic_lookup(const char *name)
{
    if (!name) return -1;
    for (int i = 0; i < NB_INTR_COUNT; i++)
        if (strcmp(g_intrinsics[i].name, name) == 0) return i;
    return -1;
}

const char *nb_asm_prefixed_math(const char *name, size_t len, int is_double)
{
    /* {Slang's name, float function, double function}: the same names in C (math.h) and CUDA */
    static const char *const map[][3] = {
        {"exp", "expf", "exp"},       {"exp2", "exp2f", "exp2"},    {"log", "logf", "log"},
        {"log2", "log2f", "log2"},    {"log10", "log10f", "log10"}, {"sin", "sinf", "sin"},
        {"cos", "cosf", "cos"},       {"tan", "tanf", "tan"},       {"asin", "asinf", "asin"},
        {"acos", "acosf", "acos"},    {"atan", "atanf", "atan"},    {"sinh", "sinhf", "sinh"},
        {"cosh", "coshf", "cosh"},    {"tanh", "tanhf", "tanh"},    {"sqrt", "sqrtf", "sqrt"},
        {"ceil", "ceilf", "ceil"},    {"floor", "floorf", "floor"}, {"round", "roundf", "round"},
        {"trunc", "truncf", "trunc"}, {"abs", "fabsf", "fabs"},     {"pow", "powf", "pow"},
        {"fmod", "fmodf", "fmod"},    {"atan2", "atan2f", "atan2"}, {"min", "fminf", "fmin"},
        {"max", "fmaxf", "fmax"},     {"fma", "fmaf", "fma"},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strlen(map[i][0]) == len && !memcmp(map[i][0], name, len)) return map[i][is_double ? 2 : 1];
    return NULL;
}

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

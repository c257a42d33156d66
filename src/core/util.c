/* Host helpers: strided copies, CPU count, environment parsing. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"

/* Recursive over dims; the innermost dim is a memcpy when both sides are packed there. */
static void nb_strided_copy_rec(char *dst, const int64_t *ds, const char *src, const int64_t *ss,
                                int ndim, const int64_t *shape, size_t es) {
    if (ndim == 0) {
        memcpy(dst, src, es);
        return;
    }
    if (ndim == 1) {
        if (ds[0] == (int64_t)es && ss[0] == (int64_t)es) {
            memcpy(dst, src, (size_t)shape[0] * es);
            return;
        }
        for (int64_t i = 0; i < shape[0]; i++) memcpy(dst + i * ds[0], src + i * ss[0], es);
        return;
    }
    for (int64_t i = 0; i < shape[0]; i++)
        nb_strided_copy_rec(dst + i * ds[0], ds + 1, src + i * ss[0], ss + 1, ndim - 1, shape + 1, es);
}

void nb_strided_copy_host(void *dst, const int64_t *dst_strides, const void *src,
                          const int64_t *src_strides, int ndim, const int64_t *shape,
                          size_t elem_size) {
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0) return;
    nb_strided_copy_rec(dst, dst_strides, src, src_strides, ndim, shape, elem_size);
}

int nb_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}


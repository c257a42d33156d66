/* Small helpers shared by the library's C files. */
#ifndef NB_CORE_UTIL_H
#define NB_CORE_UTIL_H

#include <stddef.h>
#include <stdint.h>

#define NB_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define NB_MIN(a, b) ((a) < (b) ? (a) : (b))
#define NB_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Returns NB_ERR_INVALID_ARG with a message if ptr is NULL. */
#define NB_CHECK_ARG(ptr)                                                                        \
    do {                                                                                         \
        if (!(ptr)) return nb_error(NB_ERR_INVALID_ARG, "%s: argument '%s' is NULL", __func__,   \
                                    #ptr);                                                       \
    } while (0)

/* Propagates a failing status. */
#define NB_TRY(expr)                                                                             \
    do {                                                                                         \
        nb_status nb_try_s_ = (expr);                                                            \
        if (nb_try_s_ != NB_OK) return nb_try_s_;                                                \
    } while (0)

static inline size_t nb_align_up(size_t x, size_t a) { return (x + a - 1) & ~(a - 1); }

/* Copies with byte strides on the host: shape[ndim], both stride arrays in bytes. */
void nb_strided_copy_host(void *dst, const int64_t *dst_strides, const void *src,
                          const int64_t *src_strides, int ndim, const int64_t *shape,
                          size_t elem_size);

/* Number of online CPUs (>= 1). */
int nb_cpu_count(void);

#endif

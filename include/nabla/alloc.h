/* nabla — host allocator hooks. Every host allocation nabla makes (tensors on the CPU device,
 * arenas, internal tables) goes through these, so an embedding program can route or count them. */
#ifndef NABLA_ALLOC_H
#define NABLA_ALLOC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nb_allocator {
    /* Returns size bytes aligned to align (a power of two, >= sizeof(void*)), or NULL. */
    void *(*alloc)(size_t size, size_t align, void *user);
    /* Frees a block returned by alloc (ptr may be NULL). size is the size that was requested. */
    void (*free)(void *ptr, size_t size, void *user);
    void *user;
} nb_allocator;

/* Installs hooks (NULL restores the default, aligned_alloc/free). Set them before any allocation:
 * blocks are freed by the hooks that are installed when they are freed. */
void nb_set_allocator(const nb_allocator *a);
const nb_allocator *nb_get_allocator(void);

void *nb_alloc(size_t size, size_t align);
void *nb_calloc(size_t size, size_t align);
void nb_free(void *ptr, size_t size);

#ifdef __cplusplus
}
#endif
#endif

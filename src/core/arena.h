/* Bump arena: many small allocations freed together. Chunks come from nb_alloc. */
#ifndef NB_CORE_ARENA_H
#define NB_CORE_ARENA_H

#include <stddef.h>

typedef struct nb_arena_chunk nb_arena_chunk;

typedef struct nb_arena {
    nb_arena_chunk *head;  /* current chunk; older chunks follow ->next */
    size_t chunk_size;     /* default size of new chunks */
    size_t bytes_used;     /* sum of allocation sizes since the last reset */
} nb_arena;

void nb_arena_init(nb_arena *a, size_t chunk_size); /* 0 = 64 KiB */
/* size bytes aligned to align (power of two <= 4096); NULL only when the host is out of memory. */
void *nb_arena_alloc(nb_arena *a, size_t size, size_t align);
void *nb_arena_zalloc(nb_arena *a, size_t size, size_t align);
char *nb_arena_strdup(nb_arena *a, const char *s);
char *nb_arena_strndup(nb_arena *a, const char *s, size_t n);
/* Forgets every allocation but keeps the largest chunk for reuse. */
void nb_arena_reset(nb_arena *a);
void nb_arena_destroy(nb_arena *a);

#endif

/* Bump arena over a list of chunks. */
#include <stdint.h>
#include <string.h>

#include "core/arena.h"
#include "core/util.h"
#include "nabla/alloc.h"

struct nb_arena_chunk {
    nb_arena_chunk *next;
    size_t size; /* usable bytes after the header */
    size_t used;
};

#define NB_CHUNK_HEADER nb_align_up(sizeof(nb_arena_chunk), 64)

void nb_arena_init(nb_arena *a, size_t chunk_size) {
    a->head = NULL;
    a->chunk_size = chunk_size ? chunk_size : (64u << 10);
    a->bytes_used = 0;
}

static unsigned char *nb_chunk_data(nb_arena_chunk *c) { return (unsigned char *)c + NB_CHUNK_HEADER; }

void *nb_arena_alloc(nb_arena *a, size_t size, size_t align) {
    if (align == 0) align = 1;
    if (align & (align - 1) || align > 4096) return NULL;
    nb_arena_chunk *c = a->head;
    if (c) {
        /* Align the address, not the offset: chunks are only 64-byte aligned. */
        uintptr_t base = (uintptr_t)nb_chunk_data(c);
        size_t off = (size_t)(nb_align_up(base + c->used, align) - base);
        if (off >= c->used && off + size >= off && off + size <= c->size) {
            c->used = off + size;
            a->bytes_used += size;
            return nb_chunk_data(c) + off;
        }
    }
    size_t need = size + align; /* room for alignment inside a 64-aligned chunk */
    if (need < size) return NULL;
    size_t csize = need > a->chunk_size ? need : a->chunk_size;
    nb_arena_chunk *n = nb_alloc(NB_CHUNK_HEADER + csize, 64);
    if (!n) return NULL;
    n->size = csize;
    n->used = 0;
    n->next = a->head;
    a->head = n;
    uintptr_t base = (uintptr_t)nb_chunk_data(n);
    size_t off = (size_t)(nb_align_up(base, align) - base);
    n->used = off + size;
    a->bytes_used += size;
    return nb_chunk_data(n) + off;
}

void *nb_arena_zalloc(nb_arena *a, size_t size, size_t align) {
    void *p = nb_arena_alloc(a, size, align);
    if (p) memset(p, 0, size);
    return p;
}

char *nb_arena_strndup(nb_arena *a, const char *s, size_t n) {
    char *p = nb_arena_alloc(a, n + 1, 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *nb_arena_strdup(nb_arena *a, const char *s) { return nb_arena_strndup(a, s, strlen(s)); }

void nb_arena_reset(nb_arena *a) {
    /* Keep the largest chunk so a loop that refills the arena stops allocating. */
    nb_arena_chunk *keep = NULL;
    for (nb_arena_chunk *c = a->head; c; c = c->next)
        if (!keep || c->size > keep->size) keep = c;
    nb_arena_chunk *c = a->head;
    while (c) {
        nb_arena_chunk *next = c->next;
        if (c != keep) nb_free(c, NB_CHUNK_HEADER + c->size);
        c = next;
    }
    if (keep) {
        keep->next = NULL;
        keep->used = 0;
    }
    a->head = keep;
    a->bytes_used = 0;
}

void nb_arena_destroy(nb_arena *a) {
    nb_arena_chunk *c = a->head;
    while (c) {
        nb_arena_chunk *next = c->next;
        nb_free(c, NB_CHUNK_HEADER + c->size);
        c = next;
    }
    a->head = NULL;
    a->bytes_used = 0;
}

/* Host allocator hooks. The default uses aligned_alloc; alignment is at least 16 bytes. */
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "nabla/alloc.h"

static void *nb_default_alloc(size_t size, size_t align, void *user) {
    (void)user;
    if (align < sizeof(void *)) align = sizeof(void *);
    /* aligned_alloc requires size to be a multiple of align. */
    size_t rounded = nb_align_up(size ? size : 1, align);
    if (rounded < size) return NULL; /* overflow */
    return aligned_alloc(align, rounded);
}

static void nb_default_free(void *ptr, size_t size, void *user) {
    (void)size;
    (void)user;
    free(ptr);
}

static const nb_allocator nb_default_allocator = {nb_default_alloc, nb_default_free, NULL};
static nb_allocator nb_current = {nb_default_alloc, nb_default_free, NULL};

void nb_set_allocator(const nb_allocator *a) {
    if (a && a->alloc && a->free)
        nb_current = *a;
    else
        nb_current = nb_default_allocator;
}

const nb_allocator *nb_get_allocator(void) { return &nb_current; }

void *nb_alloc(size_t size, size_t align) {
    if (align == 0 || (align & (align - 1))) align = 16;
    if (align < 16) align = 16;
    return nb_current.alloc(size, align, nb_current.user);
}

void *nb_calloc(size_t size, size_t align) {
    void *p = nb_alloc(size, align);
    if (p) memset(p, 0, size);
    return p;
}

void nb_free(void *ptr, size_t size) {
    if (ptr) nb_current.free(ptr, size, nb_current.user);
}

/* Counting nabla's host allocations (nabla/alloc.h hooks) in a test of a steady state:
 *   nb_test_count_allocs_begin();  ...work...;  nb_test_count_allocs_end();
 *   NB_EXPECT(nb_test_allocs == 0);
 * The hooks forward to the allocator that was installed before, so blocks allocated outside the
 * window are freed by the same code (nb_set_allocator's rule). Reset nb_test_allocs to restart
 * the count inside a window. */
#ifndef NB_TEST_ALLOC_H
#define NB_TEST_ALLOC_H

#include <stdint.h>

#include "nabla/alloc.h"

static int64_t nb_test_allocs;
static nb_allocator nb_test_prev_alloc_;

static void *nb_test_count_alloc_(size_t size, size_t align, void *user) {
    (void)user;
    nb_test_allocs++;
    return nb_test_prev_alloc_.alloc(size, align, nb_test_prev_alloc_.user);
}

static void nb_test_count_free_(void *p, size_t size, void *user) {
    (void)user;
    nb_test_prev_alloc_.free(p, size, nb_test_prev_alloc_.user);
}

static inline void nb_test_count_allocs_begin(void) {
    static const nb_allocator counting = {nb_test_count_alloc_, nb_test_count_free_, NULL};
    nb_test_prev_alloc_ = *nb_get_allocator();
    nb_set_allocator(&counting);
    nb_test_allocs = 0;
}

static inline void nb_test_count_allocs_end(void) { nb_set_allocator(&nb_test_prev_alloc_); }

#endif

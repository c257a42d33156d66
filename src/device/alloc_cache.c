/* Caching allocator: keeps freed blocks and hands them out again, so steady-state loops never
 * reach the driver's allocator (cuMemAlloc synchronises the device and costs tens of µs).
 *
 * Size classes: requests round up to 512 B below 1 MiB, to 128 KiB below 64 MiB and to 2 MiB
 * above. A request is served by the smallest free block of at least its class that is no more than
 * twice as large (so a tiny request never pins a huge block). The pool is a sorted array: small and
 * simple, and its length stays at the number of distinct live sizes a program cycles through.
 * Blocks are not split or merged. All work on a device goes to its main stream, so a block freed
 * by the host may be handed out again at once: later work on the same stream is ordered after
 * earlier work that used the block. */
#include <string.h>

#include "core/util.h"
#include "device/device_impl.h"
#include "nabla/alloc.h"
#include "nabla/log.h"

size_t nb_cache_round(size_t bytes) {
    if (bytes == 0) bytes = 1;
    size_t g = bytes < (1u << 20) ? 512 : bytes < (64u << 20) ? (128u << 10) : (2u << 20);
    size_t r = nb_align_up(bytes, g);
    return r < bytes ? 0 : r; /* 0 signals overflow */
}

void nb_cache_init(nb_caching_allocator *c) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
}

/* Index of the first free block with size >= want (binary search); caller holds the lock. */
static size_t nb_cache_lower_bound(const nb_caching_allocator *c, size_t want) {
    size_t lo = 0, hi = c->free_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->free_blocks[mid].size < want) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Returns every free block to the driver; caller holds the lock. */
static void nb_cache_release_all(nb_device *dev) {
    nb_caching_allocator *c = &dev->cache;
    for (size_t i = 0; i < c->free_count; i++) {
        dev->ops->raw_free(dev, c->free_blocks[i].ptr, c->free_blocks[i].size);
        c->stats.driver_frees++;
    }
    c->stats.bytes_cached = 0;
    c->free_count = 0;
}

nb_status nb_cache_alloc(nb_device *dev, size_t bytes, void **ptr, size_t *block_size) {
    nb_caching_allocator *c = &dev->cache;
    size_t want = nb_cache_round(bytes);
    if (!want)
        return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes (size overflow)",
                        dev->name, bytes);
    pthread_mutex_lock(&c->lock);
    size_t i = nb_cache_lower_bound(c, want);
    if (i < c->free_count && c->free_blocks[i].size <= 2 * want) {
        nb_cache_block b = c->free_blocks[i];
        memmove(c->free_blocks + i, c->free_blocks + i + 1,
                (c->free_count - i - 1) * sizeof(nb_cache_block));
        c->free_count--;
        c->stats.bytes_cached -= b.size;
        c->stats.bytes_in_use += b.size;
        c->stats.cache_hits++;
        if (c->stats.bytes_in_use > c->stats.peak_bytes_in_use)
            c->stats.peak_bytes_in_use = c->stats.bytes_in_use;
        pthread_mutex_unlock(&c->lock);
        *ptr = b.ptr;
        *block_size = b.size;
        return NB_OK;
    }
    void *p = NULL;
    nb_status s = dev->ops->raw_alloc(dev, want, &p);
    if (s == NB_ERR_OUT_OF_MEMORY && c->free_count) {
        /* Cached blocks of other sizes may be what stands in the way: give them back, retry. */
        NB_LOG_I("%s: out of memory for %zu bytes; releasing %zu cached bytes and retrying",
                 dev->name, want, c->stats.bytes_cached);
        nb_cache_release_all(dev);
        s = dev->ops->raw_alloc(dev, want, &p);
    }
    if (s == NB_OK) {
        c->stats.driver_allocs++;
        c->stats.bytes_in_use += want;
        if (c->stats.bytes_in_use > c->stats.peak_bytes_in_use)
            c->stats.peak_bytes_in_use = c->stats.bytes_in_use;
    }
    pthread_mutex_unlock(&c->lock);
    if (s != NB_OK) return s;
    *ptr = p;
    *block_size = want;
    return NB_OK;
}

void nb_cache_free(nb_device *dev, void *ptr, size_t block_size) {
    nb_caching_allocator *c = &dev->cache;
    pthread_mutex_lock(&c->lock);
    c->stats.bytes_in_use -= block_size;
    c->stats.buffer_frees++;
    if (c->free_count == c->free_cap) {
        size_t cap = c->free_cap ? c->free_cap * 2 : 64;
        nb_cache_block *nb = nb_alloc(cap * sizeof *nb, 16);
        if (!nb) {
            /* Cannot grow the pool: give the block straight back instead. */
            dev->ops->raw_free(dev, ptr, block_size);
            c->stats.driver_frees++;
            pthread_mutex_unlock(&c->lock);
            return;
        }
        if (c->free_count) memcpy(nb, c->free_blocks, c->free_count * sizeof *nb);
        nb_free(c->free_blocks, c->free_cap * sizeof *nb);
        c->free_blocks = nb;
        c->free_cap = cap;
    }
    size_t i = nb_cache_lower_bound(c, block_size);
    memmove(c->free_blocks + i + 1, c->free_blocks + i, (c->free_count - i) * sizeof(nb_cache_block));
    c->free_blocks[i].ptr = ptr;
    c->free_blocks[i].size = block_size;
    c->free_count++;
    c->stats.bytes_cached += block_size;
    pthread_mutex_unlock(&c->lock);
}

void nb_cache_empty(nb_device *dev) {
    pthread_mutex_lock(&dev->cache.lock);
    nb_cache_release_all(dev);
    pthread_mutex_unlock(&dev->cache.lock);
}

void nb_cache_destroy(nb_device *dev) {
    nb_caching_allocator *c = &dev->cache;
    if (dev->ops) nb_cache_empty(dev);
    nb_free(c->free_blocks, c->free_cap * sizeof(nb_cache_block));
    c->free_blocks = NULL;
    c->free_cap = c->free_count = 0;
    pthread_mutex_destroy(&c->lock);
}

/* Internal device model: one nb_device struct, a backend vtable per kind (cpu, cuda), and the
 * caching allocator that sits between buffers and the backend's raw allocator. */
#ifndef NB_DEVICE_IMPL_H
#define NB_DEVICE_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include "nabla/device.h"
#include "nabla/status.h"

typedef struct nb_device_ops {
    /* Raw memory from the driver (or host). Called only by the caching allocator. */
    nb_status (*raw_alloc)(nb_device *dev, size_t bytes, void **ptr);
    void (*raw_free)(nb_device *dev, void *ptr, size_t bytes);
    nb_status (*h2d)(nb_device *dev, void *dst, const void *src, size_t bytes);
    nb_status (*d2h)(nb_device *dev, void *dst, const void *src, size_t bytes);
    nb_status (*d2d)(nb_device *dev, void *dst, const void *src, size_t bytes);
    nb_status (*memset)(nb_device *dev, void *dst, int byte, size_t bytes);
    nb_status (*synchronize)(nb_device *dev);
    /* Host memory the device reads and writes (nb_host_mapped_alloc). */
    nb_status (*mapped_alloc)(nb_device *dev, size_t bytes, void **host, uint64_t *dev_addr);
    void (*mapped_free)(nb_device *dev, void *host);
    nb_status (*stream_create)(nb_device *dev, nb_stream *s);
    void (*stream_destroy)(nb_stream *s);
    nb_status (*stream_synchronize)(nb_stream *s);
    nb_status (*stream_wait_event)(nb_stream *s, nb_event *e);
    nb_status (*event_create)(nb_device *dev, nb_event *e);
    void (*event_destroy)(nb_event *e);
    nb_status (*event_record)(nb_event *e, nb_stream *s);
    nb_status (*event_synchronize)(nb_event *e);
    nb_status (*event_elapsed_ms)(nb_event *a, nb_event *b, float *ms);
    void (*close)(nb_device *dev); /* releases backend state (context etc.) */
} nb_device_ops;

/* Free-block pool. Blocks are rounded up to size classes; a request is served by the smallest
 * free block that fits without wasting more than half of it, else by the driver (and on driver
 * OOM, the pool is emptied and the driver is asked once more). */
typedef struct nb_cache_block {
    void *ptr;
    size_t size;
} nb_cache_block;

typedef struct nb_caching_allocator {
    pthread_mutex_t lock;
    nb_cache_block *free_blocks; /* sorted by size ascending */
    size_t free_count, free_cap;
    nb_mem_stats stats;
} nb_caching_allocator;

struct nb_stream {
    nb_device *dev;
    void *native; /* CUstream */
    int owned;    /* 1: created by nb_stream_create; 2: nb_stream_wrap_native (the handle only);
                   * 0: the device's main stream */
};

struct nb_event {
    nb_device *dev;
    void *native;     /* CUevent */
    double host_time; /* cpu: seconds from a monotonic clock at record time */
};

/* Checks run at the device's sync points (sync_check.h / .c). */
typedef struct nb_sync_check {
    nb_status (*fn)(void *ctx);
    void *ctx;
} nb_sync_check;

typedef struct nb_sync_checks {
    pthread_mutex_t lock;
    nb_sync_check *a;
    int n, cap;
    _Atomic int active; /* n, + 1 while an error is posted */
    nb_status posted;   /* an error handed over by a freed module, not yet reported */
    char msg[1024];
} nb_sync_checks;

struct nb_device {
    const nb_device_ops *ops;
    nb_device_kind kind;
    int index;
    int refcount; /* protected by the registry lock in device.c */
    char name[32];
    nb_device_info info;
    nb_caching_allocator cache;
    nb_stream main_stream;
    nb_sync_checks checks;
    void *impl; /* backend state */
};

struct nb_buffer {
    nb_device *dev;
    void *ptr;
    size_t size;      /* requested size */
    size_t alloc_size;/* size of the block from the cache; 0 for wrapped (not owned) memory */
    int refcount;     /* atomic */
};

/* Backends. */
nb_status nb_cpu_device_init(nb_device *dev);
/* Fills dev for cuda:index or fails with NB_ERR_NO_DEVICE and a message naming why. */
nb_status nb_cuda_device_init(nb_device *dev, int index);

/* Caching allocator (device/alloc_cache.c). */
void nb_cache_init(nb_caching_allocator *c);
nb_status nb_cache_alloc(nb_device *dev, size_t bytes, void **ptr, size_t *block_size);
void nb_cache_free(nb_device *dev, void *ptr, size_t block_size);
void nb_cache_empty(nb_device *dev);
void nb_cache_destroy(nb_device *dev);
/* The size class a request of `bytes` is rounded to. */
size_t nb_cache_round(size_t bytes);

/* Wraps external memory in a buffer that does not free it. */
nb_status nb_buffer_wrap(nb_device *dev, void *ptr, size_t bytes, nb_buffer **out);

#endif

/* Device registry and the backend-independent half of the device API: opening by name, buffers
 * over the caching allocator, raw copies, streams and events. Backends fill nb_device_ops. */
#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "device/device_impl.h"
#include "device/sync_check.h"
#include "nabla/alloc.h"
#include "nabla/log.h"

#define NB_MAX_CUDA_DEVICES 64

/* Open devices are shared: slot 0 is the CPU, slot 1+i is cuda:i. */
static nb_device *nb_registry[1 + NB_MAX_CUDA_DEVICES];
static pthread_mutex_t nb_registry_lock = PTHREAD_MUTEX_INITIALIZER;

/* Parses "cpu", "cuda", "cuda:N", "auto" into (kind, index); kind -1 = auto. */
static nb_status nb_parse_spec(const char *spec, int *kind, int *index) {
    *index = 0;
    if (strcmp(spec, "auto") == 0) { *kind = -1; return NB_OK; }
    if (strcmp(spec, "cpu") == 0) { *kind = NB_DEVICE_CPU; return NB_OK; }
    if (strncmp(spec, "cuda", 4) == 0) {
        *kind = NB_DEVICE_CUDA;
        if (spec[4] == '\0') return NB_OK;
        if (spec[4] == ':' && isdigit((unsigned char)spec[5])) {
            char *end;
            long v = strtol(spec + 5, &end, 10);
            if (*end == '\0' && v >= 0 && v < NB_MAX_CUDA_DEVICES) {
                *index = (int)v;
                return NB_OK;
            }
        }
    }
    return nb_error(NB_ERR_INVALID_ARG,
                    "nb_device_open: unknown device \"%s\" (expected auto, cpu, cuda or cuda:N)",
                    spec);
}

static nb_status nb_device_create(int kind, int index, nb_device **out) {
    nb_device *dev = nb_calloc(sizeof *dev, 64);
    if (!dev) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_device_open: out of host memory");
    dev->kind = (nb_device_kind)kind;
    dev->index = index;
    dev->refcount = 1;
    nb_cache_init(&dev->cache);
    dev->main_stream.dev = dev;
    pthread_mutex_init(&dev->checks.lock, NULL);
    nb_status s = kind == NB_DEVICE_CPU ? nb_cpu_device_init(dev) : nb_cuda_device_init(dev, index);
    if (s != NB_OK) {
        nb_cache_destroy(dev);
        nb_device_sync_checks_close(dev);
        nb_free(dev, sizeof *dev);
        return s;
    }
    if (kind == NB_DEVICE_CPU)
        snprintf(dev->name, sizeof dev->name, "cpu");
    else
        snprintf(dev->name, sizeof dev->name, "cuda:%d", index);
    dev->info.kind = dev->kind;
    dev->info.index = index;
    *out = dev;
    return NB_OK;
}

nb_status nb_device_open(const char *spec, nb_device **out) {
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(spec);
    int kind, index;
    NB_TRY(nb_parse_spec(spec, &kind, &index));
    if (kind < 0) {
        if (nb_cuda_device_count() > 0) {
            kind = NB_DEVICE_CUDA;
            NB_LOG_I("device auto: using cuda:0");
        } else {
            kind = NB_DEVICE_CPU;
            NB_LOG_I("device auto: using cpu (%s)",
                     nb_cuda_unavailable_reason() ? nb_cuda_unavailable_reason() : "no CUDA device");
        }
    }
    int slot = kind == NB_DEVICE_CPU ? 0 : 1 + index;
    pthread_mutex_lock(&nb_registry_lock);
    nb_status s = NB_OK;
    if (nb_registry[slot]) {
        nb_registry[slot]->refcount++;
    } else {
        s = nb_device_create(kind, index, &nb_registry[slot]);
        if (s == NB_OK)
            NB_LOG_D("opened %s: %s", nb_registry[slot]->name, nb_registry[slot]->info.name);
    }
    *out = nb_registry[slot];
    pthread_mutex_unlock(&nb_registry_lock);
    return s;
}

void nb_device_close(nb_device *dev) {
    if (!dev) return;
    pthread_mutex_lock(&nb_registry_lock);
    int last = --dev->refcount == 0;
    if (last) {
        int slot = dev->kind == NB_DEVICE_CPU ? 0 : 1 + dev->index;
        nb_registry[slot] = NULL;
    }
    pthread_mutex_unlock(&nb_registry_lock);
    if (!last) return;
    if (dev->cache.stats.bytes_in_use)
        NB_LOG_W("%s closed with %zu bytes still allocated", dev->name, dev->cache.stats.bytes_in_use);
    dev->ops->synchronize(dev);
    nb_device_sync_checks_close(dev);
    nb_cache_destroy(dev);
    dev->ops->close(dev);
    nb_free(dev, sizeof *dev);
}

/* Buffers hold a reference on their device, so a device closed by its user stays alive until
 * the last tensor on it is freed. */
static void nb_device_retain(nb_device *dev) {
    pthread_mutex_lock(&nb_registry_lock);
    dev->refcount++;
    pthread_mutex_unlock(&nb_registry_lock);
}

nb_device_kind nb_device_get_kind(const nb_device *dev) { return dev->kind; }
const nb_device_info *nb_device_get_info(const nb_device *dev) { return &dev->info; }
const char *nb_device_name(const nb_device *dev) { return dev ? dev->name : "(null)"; }

nb_status nb_device_synchronize(nb_device *dev) {
    NB_CHECK_ARG(dev);
    NB_TRY(dev->ops->synchronize(dev));
    return nb_device_run_sync_checks(dev); /* (a deferred launch's bounds error: sync_check.h) */
}

nb_status nb_host_mapped_alloc(nb_device *dev, size_t bytes, void **host, uint64_t *dev_addr) {
    NB_CHECK_ARG(host);
    NB_CHECK_ARG(dev_addr);
    *host = NULL;
    *dev_addr = 0;
    NB_CHECK_ARG(dev);
    if (bytes == 0) return nb_error(NB_ERR_INVALID_ARG, "nb_host_mapped_alloc: 0 bytes");
    return dev->ops->mapped_alloc(dev, bytes, host, dev_addr);
}

void nb_host_mapped_free(nb_device *dev, void *host) {
    if (dev && host) dev->ops->mapped_free(dev, host);
}

/* ---- buffers ------------------------------------------------------------------------------- */

nb_status nb_buffer_alloc(nb_device *dev, size_t bytes, nb_buffer **out) {
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(dev);
    nb_buffer *b = nb_alloc(sizeof *b, 16);
    if (!b) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_buffer_alloc: out of host memory");
    nb_status s = nb_cache_alloc(dev, bytes, &b->ptr, &b->alloc_size);
    if (s != NB_OK) {
        nb_free(b, sizeof *b);
        return s;
    }
    b->dev = dev;
    b->size = bytes;
    b->refcount = 1;
    nb_device_retain(dev);
    *out = b;
    return NB_OK;
}

nb_status nb_buffer_wrap(nb_device *dev, void *ptr, size_t bytes, nb_buffer **out) {
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(dev);
    nb_buffer *b = nb_alloc(sizeof *b, 16);
    if (!b) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_buffer_wrap: out of host memory");
    b->dev = dev;
    b->ptr = ptr;
    b->size = bytes;
    b->alloc_size = 0; /* not ours: never freed */
    b->refcount = 1;
    nb_device_retain(dev);
    *out = b;
    return NB_OK;
}

void nb_buffer_retain(nb_buffer *b) {
    if (b) atomic_fetch_add((_Atomic int *)&b->refcount, 1);
}

void nb_buffer_release(nb_buffer *b) {
    if (!b) return;
    if (atomic_fetch_sub((_Atomic int *)&b->refcount, 1) != 1) return;
    nb_device *dev = b->dev;
    if (b->alloc_size) nb_cache_free(dev, b->ptr, b->alloc_size);
    nb_free(b, sizeof *b);
    nb_device_close(dev);
}

void *nb_buffer_ptr(const nb_buffer *b) { return b ? b->ptr : NULL; }
size_t nb_buffer_size(const nb_buffer *b) { return b ? b->size : 0; }
nb_device *nb_buffer_device(const nb_buffer *b) { return b ? b->dev : NULL; }

/* ---- copies -------------------------------------------------------------------------------- */

#define NB_COPY_CHECK(dev, a, b)                                                                 \
    do {                                                                                         \
        NB_CHECK_ARG(dev);                                                                       \
        if (bytes == 0) return NB_OK;                                                            \
        NB_CHECK_ARG(a);                                                                         \
        NB_CHECK_ARG(b);                                                                         \
    } while (0)

nb_status nb_memcpy_h2d(nb_device *dev, void *dst, const void *src, size_t bytes) {
    NB_COPY_CHECK(dev, dst, src);
    return dev->ops->h2d(dev, dst, src, bytes);
}

nb_status nb_memcpy_d2h(nb_device *dev, void *dst, const void *src, size_t bytes) {
    NB_COPY_CHECK(dev, dst, src);
    return dev->ops->d2h(dev, dst, src, bytes);
}

nb_status nb_memcpy_d2d(nb_device *dev, void *dst, const void *src, size_t bytes) {
    NB_COPY_CHECK(dev, dst, src);
    return dev->ops->d2d(dev, dst, src, bytes);
}

nb_status nb_memset(nb_device *dev, void *dst, int byte, size_t bytes) {
    NB_CHECK_ARG(dev);
    if (bytes == 0) return NB_OK;
    NB_CHECK_ARG(dst);
    return dev->ops->memset(dev, dst, byte, bytes);
}

nb_status nb_device_mem_stats(nb_device *dev, nb_mem_stats *out) {
    NB_CHECK_ARG(dev);
    NB_CHECK_ARG(out);
    pthread_mutex_lock(&dev->cache.lock);
    *out = dev->cache.stats;
    pthread_mutex_unlock(&dev->cache.lock);
    return NB_OK;
}

nb_status nb_device_empty_cache(nb_device *dev) {
    NB_CHECK_ARG(dev);
    nb_cache_empty(dev);
    return NB_OK;
}

/* ---- streams and events -------------------------------------------------------------------- */

nb_stream *nb_device_stream(nb_device *dev) { return dev ? &dev->main_stream : NULL; }

nb_status nb_stream_create(nb_device *dev, nb_stream **out) {
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(dev);
    nb_stream *s = nb_calloc(sizeof *s, 16);
    if (!s) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_stream_create: out of host memory");
    s->dev = dev;
    s->owned = 1;
    nb_status st = dev->ops->stream_create(dev, s);
    if (st != NB_OK) {
        nb_free(s, sizeof *s);
        return st;
    }
    *out = s;
    return NB_OK;
}

nb_status nb_stream_wrap_native(nb_device *dev, void *native, nb_stream **out) {
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(dev);
    nb_stream *s = nb_calloc(sizeof *s, 16);
    if (!s) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_stream_wrap_native: out of host memory");
    s->dev = dev;
    s->native = dev->kind == NB_DEVICE_CUDA ? native : NULL;
    s->owned = 2;
    *out = s;
    return NB_OK;
}

void nb_stream_destroy(nb_stream *s) {
    if (!s || !s->owned) return; /* the main stream belongs to its device */
    if (s->owned == 1) s->dev->ops->stream_destroy(s); /* (2: wrapped, the native one is not ours) */
    nb_free(s, sizeof *s);
}

nb_status nb_stream_synchronize(nb_stream *s) {
    NB_CHECK_ARG(s);
    return s->dev->ops->stream_synchronize(s);
}

nb_status nb_stream_wait_event(nb_stream *s, nb_event *e) {
    NB_CHECK_ARG(s);
    NB_CHECK_ARG(e);
    if (s->dev != e->dev)
        return nb_error(NB_ERR_INVALID_ARG, "nb_stream_wait_event: stream is on %s but event on %s",
                        s->dev->name, e->dev->name);
    return s->dev->ops->stream_wait_event(s, e);
}

void *nb_stream_native(nb_stream *s) { return s ? s->native : NULL; }
nb_device *nb_stream_device(const nb_stream *s) { return s ? s->dev : NULL; }

nb_status nb_event_create(nb_device *dev, nb_event **out) {
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(dev);
    nb_event *e = nb_calloc(sizeof *e, 16);
    if (!e) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_event_create: out of host memory");
    e->dev = dev;
    nb_status st = dev->ops->event_create(dev, e);
    if (st != NB_OK) {
        nb_free(e, sizeof *e);
        return st;
    }
    *out = e;
    return NB_OK;
}

void nb_event_destroy(nb_event *e) {
    if (!e) return;
    e->dev->ops->event_destroy(e);
    nb_free(e, sizeof *e);
}

nb_status nb_event_record(nb_event *e, nb_stream *s) {
    NB_CHECK_ARG(e);
    if (!s) s = &e->dev->main_stream;
    if (s->dev != e->dev)
        return nb_error(NB_ERR_INVALID_ARG, "nb_event_record: event is on %s but stream on %s",
                        e->dev->name, s->dev->name);
    return e->dev->ops->event_record(e, s);
}

nb_status nb_event_synchronize(nb_event *e) {
    NB_CHECK_ARG(e);
    return e->dev->ops->event_synchronize(e);
}

nb_status nb_event_elapsed_ms(nb_event *start, nb_event *end, float *ms) {
    NB_CHECK_ARG(start);
    NB_CHECK_ARG(end);
    NB_CHECK_ARG(ms);
    if (start->dev != end->dev)
        return nb_error(NB_ERR_INVALID_ARG, "nb_event_elapsed_ms: events on %s and %s",
                        start->dev->name, end->dev->name);
    return start->dev->ops->event_elapsed_ms(start, end, ms);
}

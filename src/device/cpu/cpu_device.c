/* The CPU device: host memory (64-byte aligned, through the allocator hooks) and synchronous
 * copies. Work runs on the calling thread or the global thread pool, so streams and events are
 * trivially ordered: an event records the host clock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/threadpool.h"
#include "core/util.h"
#include "device/device_impl.h"
#include "nabla/alloc.h"

static nb_status cpu_raw_alloc(nb_device *dev, size_t bytes, void **ptr) {
    *ptr = nb_alloc(bytes, 64);
    if (!*ptr)
        return nb_error(NB_ERR_OUT_OF_MEMORY, "cpu: cannot allocate %zu bytes of host memory", bytes);
    return NB_OK;
}

static void cpu_raw_free(nb_device *dev, void *ptr, size_t bytes) { nb_free(ptr, bytes); }

static nb_status cpu_copy(nb_device *dev, void *dst, const void *src, size_t bytes) {
    memmove(dst, src, bytes);
    return NB_OK;
}

static nb_status cpu_memset(nb_device *dev, void *dst, int byte, size_t bytes) {
    memset(dst, byte, bytes);
    return NB_OK;
}

static nb_status cpu_ok(nb_device *dev) { return NB_OK; }
/* (CPU kernels write host memory directly: ordinary zeroed memory, its own address) */
static nb_status cpu_mapped_alloc(nb_device *dev, size_t bytes, void **host, uint64_t *dev_addr) {
    (void)dev;
    void *p = calloc(1, bytes);
    if (!p) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_host_mapped_alloc: out of host memory (%zu bytes)", bytes);
    *host = p;
    *dev_addr = (uint64_t)(uintptr_t)p;
    return NB_OK;
}
static void cpu_mapped_free(nb_device *dev, void *host) {
    (void)dev;
    free(host);
}
static nb_status cpu_stream_create(nb_device *dev, nb_stream *s) { return NB_OK; }
static void cpu_stream_destroy(nb_stream *s) {}
static nb_status cpu_stream_sync(nb_stream *s) { return NB_OK; }
static nb_status cpu_stream_wait(nb_stream *s, nb_event *e) { return NB_OK; }
static nb_status cpu_event_create(nb_device *dev, nb_event *e) { e->host_time = -1; return NB_OK; }
static void cpu_event_destroy(nb_event *e) {}

static nb_status cpu_event_record(nb_event *e, nb_stream *s) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    e->host_time = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    return NB_OK;
}

static nb_status cpu_event_sync(nb_event *e) { return NB_OK; }

static nb_status cpu_event_elapsed(nb_event *a, nb_event *b, float *ms) {
    if (a->host_time < 0 || b->host_time < 0)
        return nb_error(NB_ERR_INVALID_ARG, "nb_event_elapsed_ms: an event was never recorded");
    *ms = (float)((b->host_time - a->host_time) * 1e3);
    return NB_OK;
}

static void cpu_close(nb_device *dev) {}

static const nb_device_ops nb_cpu_ops = {
    .raw_alloc = cpu_raw_alloc,
    .raw_free = cpu_raw_free,
    .h2d = cpu_copy,
    .d2h = cpu_copy,
    .d2d = cpu_copy,
    .memset = cpu_memset,
    .synchronize = cpu_ok,
    .mapped_alloc = cpu_mapped_alloc,
    .mapped_free = cpu_mapped_free,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_synchronize = cpu_stream_sync,
    .stream_wait_event = cpu_stream_wait,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_synchronize = cpu_event_sync,
    .event_elapsed_ms = cpu_event_elapsed,
    .close = cpu_close,
};

/* "model name" from /proc/cpuinfo, or a generic name. */
static void cpu_model_name(char *out, size_t cap) {
    snprintf(out, cap, "CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *colon = strchr(line, ':');
            if (colon) {
                colon++;
                while (*colon == ' ' || *colon == '\t') colon++;
                size_t n = strcspn(colon, "\n");
                snprintf(out, cap, "%.*s", (int)n, colon);
            }
            break;
        }
    }
    fclose(f);
}

static size_t cpu_total_memory(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    size_t kb = 0;
    if (f) {
        if (fscanf(f, "MemTotal: %zu kB", &kb) != 1) kb = 0;
        fclose(f);
    }
    return kb * 1024;
}

nb_status nb_cpu_device_init(nb_device *dev) {
    dev->ops = &nb_cpu_ops;
    dev->kind = NB_DEVICE_CPU;
    cpu_model_name(dev->info.name, sizeof dev->info.name);
    dev->info.multiprocessors = nb_threadpool_size(nb_threadpool_global());
    dev->info.total_memory = cpu_total_memory();
    dev->info.warp_size = 1;
    dev->info.max_threads_per_block = 1;
    return NB_OK;
}

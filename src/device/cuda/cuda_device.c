/* The CUDA backend: nb_device_ops over the driver API, plus modules and kernel launches.
 *
 * Each device holds its GPU's primary context (the one the CUDA runtime and PyTorch use too, so
 * pointers and streams interoperate) and a non-blocking main stream on which all of nabla's work
 * is ordered. Callers may be on any thread, so every entry point makes the context current first
 * (cuCtxSetCurrent on the primary context is a cheap thread-local store in the driver).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "device/cuda/cuda_api.h"
#include "device/device_impl.h"
#include "nabla/alloc.h"
#include "nabla/device.h"
#include "nabla/log.h"
#include "nabla/status.h"

/* Dynamic shared memory a kernel may use without opting in (all GPUs since Volta). */
#define NB_DEFAULT_DYN_SMEM (48u * 1024u)

typedef struct nb_cuda_impl {
    const nb_cuda_api *cu;
    CUdevice cudev;
    CUcontext ctx; /* primary context, retained for the life of the nb_device */
    int max_block[3];
    int max_grid[3];
    CUevent order_ev; /* nb_stream_wait_native's event, made on first use (guarded by nb_order_lock) */
} nb_cuda_impl;

struct nb_cuda_function {
    nb_cuda_module *module;
    CUfunction fn;
    unsigned dyn_smem_limit; /* value set for MAX_DYNAMIC_SHARED_SIZE_BYTES; guarded by module lock */
    nb_cuda_function *next;
    size_t alloc_size;
    char name[]; /* NUL-terminated */
};

struct nb_cuda_module {
    nb_device *dev;
    CUmodule mod;
    pthread_mutex_t lock; /* guards fns and each function's dyn_smem_limit */
    nb_cuda_function *fns;     /* looked-up functions, owned by the module */
};

static inline CUdeviceptr nb_dptr(const void *p) { return (CUdeviceptr)(uintptr_t)p; }
static inline CUstream nb_cu_stream(const nb_stream *s) { return (CUstream)s->native; }
static inline CUevent nb_cu_event(const nb_event *e) { return (CUevent)e->native; }
static inline nb_cuda_impl *nb_impl(nb_device *dev) { return (nb_cuda_impl *)dev->impl; }

/* Declares `cu` for NB_CU_TRY and makes dev's context current on this thread. */
#define NB_CU_ENTER(dev)                                                                         \
    const nb_cuda_api *cu = nb_impl(dev)->cu;                                                    \
    NB_CU_TRY(CtxSetCurrent, nb_impl(dev)->ctx)

/* For ops that return void: a failure can only be logged. */
static void nb_cu_warn(CUresult r, const char *call) {
    char err[256];
    NB_LOG_W("%s failed: %s", call, nb_cuda_error_str(r, err, sizeof err));
}

/* ---- memory -------------------------------------------------------------------------------- */

static nb_status nb_cu_raw_alloc(nb_device *dev, size_t bytes, void **ptr) {
    NB_CU_ENTER(dev);
    *ptr = NULL;
    if (bytes == 0) return NB_OK; /* cuMemAlloc rejects 0; nothing to hand out */
    CUdeviceptr p = 0;
    CUresult r = cu->MemAlloc(&p, bytes);
    if (r != CUDA_SUCCESS) {
        char err[256];
        nb_cuda_error_str(r, err, sizeof err);
        size_t free_b = 0, total_b = 0;
        if (r == CUDA_ERROR_OUT_OF_MEMORY && cu->MemGetInfo(&free_b, &total_b) == CUDA_SUCCESS)
            return nb_error(NB_ERR_OUT_OF_MEMORY,
                            "cuMemAlloc of %zu bytes on %s failed: %s (%zu of %zu bytes free)",
                            bytes, dev->name, err, free_b, total_b);
        return nb_error(r == CUDA_ERROR_OUT_OF_MEMORY ? NB_ERR_OUT_OF_MEMORY : NB_ERR_DEVICE,
                        "cuMemAlloc of %zu bytes on %s failed: %s", bytes, dev->name, err);
    }
    *ptr = (void *)(uintptr_t)p;
    return NB_OK;
}

static void nb_cu_raw_free(nb_device *dev, void *ptr, size_t bytes) {
    (void)bytes;
    if (!ptr) return;
    const nb_cuda_api *cu = nb_impl(dev)->cu;
    CUresult r = cu->CtxSetCurrent(nb_impl(dev)->ctx);
    /* cuMemFree synchronizes with pending work on the memory, so no stream sync is needed. */
    if (r == CUDA_SUCCESS) r = cu->MemFree(nb_dptr(ptr));
    if (r != CUDA_SUCCESS) nb_cu_warn(r, "cuMemFree");
}

static nb_status nb_cu_h2d(nb_device *dev, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return NB_OK;
    NB_CU_ENTER(dev);
    CUstream s = nb_cu_stream(&dev->main_stream);
    /* Ordered after earlier work on the main stream; the sync makes the host buffer reusable on
     * return even when it is page-locked (where the copy would otherwise still be in flight). */
    NB_CU_TRY(MemcpyHtoDAsync, nb_dptr(dst), src, bytes, s);
    NB_CU_TRY(StreamSynchronize, s);
    return NB_OK;
}

static nb_status nb_cu_d2h(nb_device *dev, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return NB_OK;
    NB_CU_ENTER(dev);
    CUstream s = nb_cu_stream(&dev->main_stream);
    NB_CU_TRY(MemcpyDtoHAsync, dst, nb_dptr(src), bytes, s);
    NB_CU_TRY(StreamSynchronize, s); /* the data must be there when we return */
    return NB_OK;
}

static nb_status nb_cu_d2d(nb_device *dev, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return NB_OK;
    NB_CU_ENTER(dev);
    NB_CU_TRY(MemcpyDtoDAsync, nb_dptr(dst), nb_dptr(src), bytes, nb_cu_stream(&dev->main_stream));
    return NB_OK;
}

static nb_status nb_cu_memset(nb_device *dev, void *dst, int byte, size_t bytes) {
    if (bytes == 0) return NB_OK;
    NB_CU_ENTER(dev);
    NB_CU_TRY(MemsetD8Async, nb_dptr(dst), (unsigned char)byte, bytes,
              nb_cu_stream(&dev->main_stream));
    return NB_OK;
}

/* "All work queued on the device" includes streams made with nb_stream_create, hence a context
 * synchronize rather than only the main stream's. */
static nb_status nb_cu_synchronize(nb_device *dev) {
    NB_CU_ENTER(dev);
    NB_CU_TRY(CtxSynchronize);
    return NB_OK;
}

/* Pinned host memory mapped into the device (PORTABLE: usable from every context). */
static nb_status nb_cu_mapped_alloc(nb_device *dev, size_t bytes, void **host, uint64_t *dev_addr) {
    NB_CU_ENTER(dev);
    void *p = NULL;
    CUresult r = cu->MemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
    if (r != CUDA_SUCCESS) return nb_cuda_fail(r, "cuMemHostAlloc");
    CUdeviceptr d = 0;
    if ((r = cu->MemHostGetDevicePointer(&d, p, 0)) != CUDA_SUCCESS) {
        cu->MemFreeHost(p);
        return nb_cuda_fail(r, "cuMemHostGetDevicePointer");
    }
    memset(p, 0, bytes);
    *host = p;
    *dev_addr = (uint64_t)d;
    return NB_OK;
}

static void nb_cu_mapped_free(nb_device *dev, void *host) {
    const nb_cuda_api *cu = nb_cuda_api_get();
    (void)dev;
    if (cu) {
        CUresult r = cu->MemFreeHost(host);
        if (r != CUDA_SUCCESS) nb_cu_warn(r, "cuMemFreeHost");
    }
}

/* ---- streams and events -------------------------------------------------------------------- */

static nb_status nb_cu_stream_create(nb_device *dev, nb_stream *s) {
    NB_CU_ENTER(dev);
    CUstream cs = NULL;
    /* Non-blocking: no implicit serialisation with the legacy NULL stream other code may use. */
    NB_CU_TRY(StreamCreate, &cs, CU_STREAM_NON_BLOCKING);
    s->dev = dev;
    s->native = cs;
    return NB_OK;
}

static void nb_cu_stream_destroy(nb_stream *s) {
    if (!s || !s->native) return;
    const nb_cuda_api *cu = nb_impl(s->dev)->cu;
    CUresult r = cu->CtxSetCurrent(nb_impl(s->dev)->ctx);
    /* Returns at once; the driver frees the stream after its queued work completes. */
    if (r == CUDA_SUCCESS) r = cu->StreamDestroy(nb_cu_stream(s));
    if (r != CUDA_SUCCESS) nb_cu_warn(r, "cuStreamDestroy");
    s->native = NULL;
}

static nb_status nb_cu_stream_synchronize(nb_stream *s) {
    NB_CU_ENTER(s->dev);
    NB_CU_TRY(StreamSynchronize, nb_cu_stream(s));
    return NB_OK;
}

static nb_status nb_cu_stream_wait_event(nb_stream *s, nb_event *e) {
    NB_CU_ENTER(s->dev);
    NB_CU_TRY(StreamWaitEvent, nb_cu_stream(s), nb_cu_event(e), 0);
    return NB_OK;
}

static nb_status nb_cu_event_create(nb_device *dev, nb_event *e) {
    NB_CU_ENTER(dev);
    CUevent ev = NULL;
    NB_CU_TRY(EventCreate, &ev, CU_EVENT_DEFAULT); /* with timing, for nb_event_elapsed_ms */
    e->dev = dev;
    e->native = ev;
    return NB_OK;
}

static void nb_cu_event_destroy(nb_event *e) {
    if (!e || !e->native) return;
    const nb_cuda_api *cu = nb_impl(e->dev)->cu;
    CUresult r = cu->CtxSetCurrent(nb_impl(e->dev)->ctx);
    if (r == CUDA_SUCCESS) r = cu->EventDestroy(nb_cu_event(e));
    if (r != CUDA_SUCCESS) nb_cu_warn(r, "cuEventDestroy");
    e->native = NULL;
}

static nb_status nb_cu_event_record(nb_event *e, nb_stream *s) {
    if (!s) s = &e->dev->main_stream;
    if (s->dev != e->dev)
        return nb_error(NB_ERR_INVALID_ARG, "nb_event_record: event of %s, stream of %s",
                        e->dev->name, s->dev ? s->dev->name : "no device");
    NB_CU_ENTER(e->dev);
    NB_CU_TRY(EventRecord, nb_cu_event(e), nb_cu_stream(s));
    return NB_OK;
}

static nb_status nb_cu_event_synchronize(nb_event *e) {
    NB_CU_ENTER(e->dev);
    NB_CU_TRY(EventSynchronize, nb_cu_event(e));
    return NB_OK;
}

static nb_status nb_cu_event_elapsed_ms(nb_event *a, nb_event *b, float *ms) {
    NB_CU_ENTER(a->dev);
    /* CUDA_ERROR_NOT_READY here means an event has not completed: synchronize on it first. */
    NB_CU_TRY(EventElapsedTime, ms, nb_cu_event(a), nb_cu_event(b));
    return NB_OK;
}

/* ---- device lifetime ----------------------------------------------------------------------- */

static void nb_cu_close(nb_device *dev) {
    nb_cuda_impl *impl = nb_impl(dev);
    if (!impl) return;
    const nb_cuda_api *cu = impl->cu;
    CUresult r = cu->CtxSetCurrent(impl->ctx);
    if (r != CUDA_SUCCESS) nb_cu_warn(r, "cuCtxSetCurrent");
    /* Surface (and log) errors of work still in flight before the stream goes away. */
    if (r == CUDA_SUCCESS && (r = cu->CtxSynchronize()) != CUDA_SUCCESS)
        nb_cu_warn(r, "cuCtxSynchronize");
    if (impl->order_ev) {
        r = cu->EventDestroy(impl->order_ev);
        if (r != CUDA_SUCCESS) nb_cu_warn(r, "cuEventDestroy");
        impl->order_ev = NULL;
    }
    if (dev->main_stream.native) {
        r = cu->StreamDestroy(nb_cu_stream(&dev->main_stream));
        if (r != CUDA_SUCCESS) nb_cu_warn(r, "cuStreamDestroy");
        dev->main_stream.native = NULL;
    }
    /* Leave no thread pointing at a context that may be destroyed by the release. */
    cu->CtxSetCurrent(NULL);
    r = cu->DevicePrimaryCtxRelease(impl->cudev);
    if (r != CUDA_SUCCESS) nb_cu_warn(r, "cuDevicePrimaryCtxRelease");
    nb_free(impl, sizeof *impl);
    dev->impl = NULL;
}

static const nb_device_ops nb_cuda_ops = {
    .raw_alloc = nb_cu_raw_alloc,
    .raw_free = nb_cu_raw_free,
    .h2d = nb_cu_h2d,
    .d2h = nb_cu_d2h,
    .d2d = nb_cu_d2d,
    .memset = nb_cu_memset,
    .synchronize = nb_cu_synchronize,
    .mapped_alloc = nb_cu_mapped_alloc,
    .mapped_free = nb_cu_mapped_free,
    .stream_create = nb_cu_stream_create,
    .stream_destroy = nb_cu_stream_destroy,
    .stream_synchronize = nb_cu_stream_synchronize,
    .stream_wait_event = nb_cu_stream_wait_event,
    .event_create = nb_cu_event_create,
    .event_destroy = nb_cu_event_destroy,
    .event_record = nb_cu_event_record,
    .event_synchronize = nb_cu_event_synchronize,
    .event_elapsed_ms = nb_cu_event_elapsed_ms,
    .close = nb_cu_close,
};

/* One attribute; `what` names it in the error message. */
static nb_status nb_cu_attr(const nb_cuda_api *cu, CUdevice d, int attr, const char *what,
                            int *out) {
    CUresult r = cu->DeviceGetAttribute(out, attr, d);
    if (r == CUDA_SUCCESS) return NB_OK;
    char call[96];
    snprintf(call, sizeof call, "cuDeviceGetAttribute(%s)", what);
    return nb_cuda_fail(r, call);
}

/* Attributes that are informational only: 0 ("unknown") when a driver does not report them. */
static int nb_cu_attr_opt(const nb_cuda_api *cu, CUdevice d, int attr) {
    int v = 0;
    if (cu->DeviceGetAttribute(&v, attr, d) != CUDA_SUCCESS) v = 0;
    return v;
}

static nb_status nb_cu_fill_info(nb_device *dev, nb_cuda_impl *impl, int index) {
    const nb_cuda_api *cu = impl->cu;
    CUdevice d = impl->cudev;
    nb_device_info *info = &dev->info;
    memset(info, 0, sizeof *info);
    info->kind = NB_DEVICE_CUDA;
    info->index = index;
    NB_CU_TRY(DeviceGetName, info->name, (int)sizeof info->name, d);
    info->name[sizeof info->name - 1] = '\0';
    int smem = 0, smem_optin = 0, smem_sm = 0;
    NB_TRY(nb_cu_attr(cu, d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "COMPUTE_CAPABILITY_MAJOR",
                      &info->cc_major));
    NB_TRY(nb_cu_attr(cu, d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "COMPUTE_CAPABILITY_MINOR",
                      &info->cc_minor));
    NB_TRY(nb_cu_attr(cu, d, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "MULTIPROCESSOR_COUNT",
                      &info->multiprocessors));
    NB_TRY(nb_cu_attr(cu, d, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
                      "MAX_SHARED_MEMORY_PER_BLOCK", &smem));
    NB_TRY(nb_cu_attr(cu, d, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                      "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", &smem_optin));
    NB_TRY(nb_cu_attr(cu, d, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
                      "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", &smem_sm));
    NB_TRY(nb_cu_attr(cu, d, CU_DEVICE_ATTRIBUTE_WARP_SIZE, "WARP_SIZE", &info->warp_size));
    NB_TRY(nb_cu_attr(cu, d, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "MAX_THREADS_PER_BLOCK",
                      &info->max_threads_per_block));
    static const int block_attr[3] = {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
                                      CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
                                      CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z};
    static const int grid_attr[3] = {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
                                     CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
                                     CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z};
    for (int i = 0; i < 3; i++) {
        NB_TRY(nb_cu_attr(cu, d, block_attr[i], "MAX_BLOCK_DIM", &impl->max_block[i]));
        NB_TRY(nb_cu_attr(cu, d, grid_attr[i], "MAX_GRID_DIM", &impl->max_grid[i]));
    }
    info->shared_mem_per_block = (size_t)smem;
    info->shared_mem_per_block_optin = (size_t)(smem_optin > smem ? smem_optin : smem);
    info->shared_mem_per_sm = (size_t)smem_sm;
    NB_CU_TRY(DeviceTotalMem, &info->total_memory, d);
    info->l2_cache = (size_t)nb_cu_attr_opt(cu, d, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    info->clock_khz = nb_cu_attr_opt(cu, d, CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    info->memory_bus_width = nb_cu_attr_opt(cu, d, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
    NB_CU_TRY(DriverGetVersion, &info->driver_version);
    return NB_OK;
}

nb_status nb_cuda_device_init(nb_device *dev, int index) {
    NB_CHECK_ARG(dev);
    const nb_cuda_api *cu = nb_cuda_api_get();
    if (!cu)
        return nb_error(NB_ERR_NO_DEVICE, "cuda:%d requested but %s", index < 0 ? 0 : index,
                        nb_cuda_unavailable_reason());
    int count = nb_cuda_device_count();
    if (index < 0 || index >= count)
        return nb_error(NB_ERR_NO_DEVICE, "cuda:%d requested but this machine has %d CUDA device(s)",
                        index, count);

    nb_cuda_impl *impl = nb_calloc(sizeof *impl, 16);
    if (!impl) return nb_error(NB_ERR_OUT_OF_MEMORY, "out of host memory opening cuda:%d", index);
    impl->cu = cu;
    nb_status st = NB_OK;
    CUresult r = cu->DeviceGet(&impl->cudev, index);
    if (r != CUDA_SUCCESS) {
        st = nb_cuda_fail(r, "cuDeviceGet");
        goto fail_free;
    }
    r = cu->DevicePrimaryCtxRetain(&impl->ctx, impl->cudev);
    if (r != CUDA_SUCCESS) {
        st = nb_cuda_fail(r, "cuDevicePrimaryCtxRetain");
        goto fail_free;
    }
    r = cu->CtxSetCurrent(impl->ctx);
    if (r != CUDA_SUCCESS) {
        st = nb_cuda_fail(r, "cuCtxSetCurrent");
        goto fail_release;
    }
    dev->impl = impl;
    dev->kind = NB_DEVICE_CUDA;
    dev->index = index;
    snprintf(dev->name, sizeof dev->name, "cuda:%d", index);
    st = nb_cu_fill_info(dev, impl, index);
    if (st != NB_OK) goto fail_release;

    CUstream ms = NULL;
    r = cu->StreamCreate(&ms, CU_STREAM_NON_BLOCKING);
    if (r != CUDA_SUCCESS) {
        st = nb_cuda_fail(r, "cuStreamCreate");
        goto fail_release;
    }
    dev->main_stream.dev = dev;
    dev->main_stream.native = ms;
    dev->main_stream.owned = 0;
    dev->ops = &nb_cuda_ops;
    NB_LOG_I("cuda:%d: %s, sm_%d%d, %d SMs, %.1f GiB, driver %d.%d", index, dev->info.name,
             dev->info.cc_major, dev->info.cc_minor, dev->info.multiprocessors,
             (double)dev->info.total_memory / (1024.0 * 1024.0 * 1024.0),
             dev->info.driver_version / 1000, dev->info.driver_version % 1000 / 10);
    return NB_OK;

fail_release:
    cu->CtxSetCurrent(NULL);
    cu->DevicePrimaryCtxRelease(impl->cudev);
fail_free:
    nb_free(impl, sizeof *impl);
    dev->impl = NULL;
    return st;
}

/* ---- modules and launches ------------------------------------------------------------------ */

nb_status nb_cuda_module_load(nb_device *dev, const void *image, size_t size, nb_cuda_module **out) {
    NB_CHECK_ARG(dev);
    NB_CHECK_ARG(image);
    NB_CHECK_ARG(out);
    *out = NULL;
    if (dev->kind != NB_DEVICE_CUDA || !dev->impl)
        return nb_error(NB_ERR_INVALID_ARG, "nb_cuda_module_load: %s is not a CUDA device", dev->name);
    if (size == 0) return nb_error(NB_ERR_INVALID_ARG, "nb_cuda_module_load: empty image");
    /* cuModuleLoadData takes no size: a cubin (ELF) or fatbinary carries its own, but PTX is
     * read up to its NUL, so make sure there is one inside the buffer. */
    const unsigned char *b = image;
    int elf = size >= 4 && b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F';
    int fatbin = size >= 4 && b[0] == 0x50 && b[1] == 0xed && b[2] == 0x55 && b[3] == 0xba;
    if (!elf && !fatbin && !memchr(image, 0, size))
        return nb_error(NB_ERR_INVALID_ARG,
                        "nb_cuda_module_load: image is neither a cubin nor NUL-terminated PTX");

    nb_cuda_module *m = nb_calloc(sizeof *m, 16);
    if (!m) return nb_error(NB_ERR_OUT_OF_MEMORY, "out of host memory");
    const nb_cuda_api *cu = nb_impl(dev)->cu;
    CUresult r = cu->CtxSetCurrent(nb_impl(dev)->ctx);
    if (r != CUDA_SUCCESS) {
        nb_free(m, sizeof *m);
        return nb_cuda_fail(r, "cuCtxSetCurrent");
    }
    r = cu->ModuleLoadData(&m->mod, image);
    if (r != CUDA_SUCCESS) {
        nb_free(m, sizeof *m);
        char err[256];
        nb_cuda_error_str(r, err, sizeof err);
        if (r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
            return nb_error(NB_ERR_DEVICE,
                            "cuModuleLoadData failed: %s (PTX from NVRTC %d is newer than the "
                            "driver, version %d: update the driver or load a cubin)",
                            err, nb_nvrtc_version(), dev->info.driver_version);
        return nb_error(NB_ERR_DEVICE, "cuModuleLoadData failed on %s (sm_%d%d): %s", dev->name,
                        dev->info.cc_major, dev->info.cc_minor, err);
    }
    m->dev = dev;
    pthread_mutex_init(&m->lock, NULL);
    *out = m;
    return NB_OK;
}

void nb_cuda_module_unload(nb_cuda_module *m) {
    if (!m) return;
    const nb_cuda_api *cu = nb_impl(m->dev)->cu;
    CUresult r = cu->CtxSetCurrent(nb_impl(m->dev)->ctx);
    /* Kernels of this module may still be queued; unloading under them is undefined. Unloads are
     * rare, so a context synchronize is an acceptable price. */
    if (r == CUDA_SUCCESS && (r = cu->CtxSynchronize()) != CUDA_SUCCESS)
        nb_cu_warn(r, "cuCtxSynchronize");
    r = cu->ModuleUnload(m->mod);
    if (r != CUDA_SUCCESS) nb_cu_warn(r, "cuModuleUnload");
    for (nb_cuda_function *f = m->fns, *next; f; f = next) {
        next = f->next;
        nb_free(f, f->alloc_size);
    }
    pthread_mutex_destroy(&m->lock);
    nb_free(m, sizeof *m);
}

nb_status nb_cuda_module_function(nb_cuda_module *m, const char *name, nb_cuda_function **out) {
    NB_CHECK_ARG(m);
    NB_CHECK_ARG(name);
    NB_CHECK_ARG(out);
    *out = NULL;
    nb_status st = NB_OK;
    pthread_mutex_lock(&m->lock);
    /* Handles are cached per name: they live as long as the module and need no free. */
    for (nb_cuda_function *f = m->fns; f; f = f->next)
        if (!strcmp(f->name, name)) {
            *out = f;
            goto done;
        }
    const nb_cuda_api *cu = nb_impl(m->dev)->cu;
    CUresult r = cu->CtxSetCurrent(nb_impl(m->dev)->ctx);
    CUfunction fn = NULL;
    if (r == CUDA_SUCCESS) r = cu->ModuleGetFunction(&fn, m->mod, name);
    if (r == CUDA_ERROR_NOT_FOUND) {
        st = nb_error(NB_ERR_NOT_FOUND,
                      "no kernel named '%s' in the module (declare it extern \"C\" __global__; "
                      "C++ names are mangled)", name);
        goto done;
    }
    if (r != CUDA_SUCCESS) {
        st = nb_cuda_fail(r, "cuModuleGetFunction");
        goto done;
    }
    size_t len = strlen(name);
    size_t bytes = sizeof(nb_cuda_function) + len + 1;
    nb_cuda_function *f = nb_calloc(bytes, 16);
    if (!f) {
        st = nb_error(NB_ERR_OUT_OF_MEMORY, "out of host memory");
        goto done;
    }
    f->module = m;
    f->fn = fn;
    f->dyn_smem_limit = NB_DEFAULT_DYN_SMEM;
    f->alloc_size = bytes;
    memcpy(f->name, name, len + 1);
    f->next = m->fns;
    m->fns = f;
    *out = f;
done:
    pthread_mutex_unlock(&m->lock);
    return st;
}

/* Raises the kernel's dynamic shared memory limit to `bytes` if it is below (sizes above
 * 48 KiB need this opt-in; the driver then reserves the carve-out). */
static nb_status nb_cu_optin_smem(const nb_cuda_api *cu, nb_cuda_function *f, unsigned bytes) {
    nb_status st = NB_OK;
    pthread_mutex_lock(&f->module->lock);
    if (bytes > f->dyn_smem_limit) {
        CUresult r = cu->FuncSetAttribute(f->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          (int)bytes);
        if (r == CUDA_SUCCESS) {
            f->dyn_smem_limit = bytes;
        } else {
            char err[256];
            st = nb_error(NB_ERR_DEVICE,
                          "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES=%u) for '%s' failed: %s "
                          "(static shared memory counts against the limit too)",
                          bytes, f->name, nb_cuda_error_str(r, err, sizeof err));
        }
    }
    pthread_mutex_unlock(&f->module->lock);
    return st;
}

nb_status nb_cuda_launch(nb_cuda_function *f, const unsigned grid[3], const unsigned block[3],
                    unsigned shared_bytes, nb_stream *s, void **args) {
    NB_CHECK_ARG(f);
    NB_CHECK_ARG(grid);
    NB_CHECK_ARG(block);
    nb_device *dev = f->module->dev;
    nb_cuda_impl *impl = nb_impl(dev);
    if (!s) s = &dev->main_stream;
    if (s->dev != dev)
        return nb_error(NB_ERR_INVALID_ARG, "nb_cuda_launch(%s): stream belongs to %s, kernel to %s",
                        f->name, s->dev ? s->dev->name : "no device", dev->name);
    for (int i = 0; i < 3; i++) {
        if (grid[i] == 0 || block[i] == 0)
            return nb_error(NB_ERR_INVALID_ARG,
                            "nb_cuda_launch(%s): grid (%u,%u,%u) and block (%u,%u,%u) must be non-zero "
                            "in every dimension",
                            f->name, grid[0], grid[1], grid[2], block[0], block[1], block[2]);
        if (block[i] > (unsigned)impl->max_block[i] || grid[i] > (unsigned)impl->max_grid[i])
            return nb_error(NB_ERR_INVALID_ARG,
                            "nb_cuda_launch(%s): grid (%u,%u,%u) / block (%u,%u,%u) exceed %s's limits "
                            "grid (%d,%d,%d) / block (%d,%d,%d)",
                            f->name, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                            dev->name, impl->max_grid[0], impl->max_grid[1], impl->max_grid[2],
                            impl->max_block[0], impl->max_block[1], impl->max_block[2]);
    }
    uint64_t threads = (uint64_t)block[0] * block[1] * block[2];
    if (threads > (uint64_t)dev->info.max_threads_per_block)
        return nb_error(NB_ERR_INVALID_ARG,
                        "nb_cuda_launch(%s): block (%u,%u,%u) has %llu threads; %s allows %d per block",
                        f->name, block[0], block[1], block[2], (unsigned long long)threads,
                        dev->name, dev->info.max_threads_per_block);
    if (shared_bytes > dev->info.shared_mem_per_block_optin)
        return nb_error(NB_ERR_INVALID_ARG,
                        "nb_cuda_launch(%s): %u bytes of dynamic shared memory requested; %s allows %zu "
                        "per block",
                        f->name, shared_bytes, dev->name, dev->info.shared_mem_per_block_optin);

    NB_CU_ENTER(dev);
    if (shared_bytes > NB_DEFAULT_DYN_SMEM) NB_TRY(nb_cu_optin_smem(cu, f, shared_bytes));
    CUresult r = cu->LaunchKernel(f->fn, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                  shared_bytes, nb_cu_stream(s), args, NULL);
    if (r != CUDA_SUCCESS) {
        char err[256];
        return nb_error(NB_ERR_DEVICE,
                        "cuLaunchKernel(%s, grid (%u,%u,%u), block (%u,%u,%u), %u shared bytes) "
                        "failed: %s",
                        f->name, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                        shared_bytes, nb_cuda_error_str(r, err, sizeof err));
    }
    return NB_OK;
}

/* ---- ordering with foreign streams (device.h: nb_stream_wait_native) ----------------------- */

#ifndef CU_EVENT_DISABLE_TIMING
#define CU_EVENT_DISABLE_TIMING 0x2 /* cheaper events: no timestamps */
#endif

static pthread_mutex_t nb_order_lock = PTHREAD_MUTEX_INITIALIZER;

/* waiter waits for what is queued on waitee now, through the device's ordering event: a wait
 * uses the event's latest record at the time of cuStreamWaitEvent, so the event is reused at
 * once; the lock keeps one thread's record + wait together. */
static nb_status nb_cu_order(nb_device *dev, CUstream waiter, CUstream waitee) {
    NB_CU_ENTER(dev);
    nb_cuda_impl *impl = nb_impl(dev);
    pthread_mutex_lock(&nb_order_lock);
    CUresult r = CUDA_SUCCESS;
    if (!impl->order_ev) r = cu->EventCreate(&impl->order_ev, CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS) r = cu->EventRecord(impl->order_ev, waitee);
    if (r == CUDA_SUCCESS) r = cu->StreamWaitEvent(waiter, impl->order_ev, 0);
    pthread_mutex_unlock(&nb_order_lock);
    if (r != CUDA_SUCCESS) return nb_cuda_fail(r, "nb_stream_wait_native (cuEventRecord/cuStreamWaitEvent)");
    return NB_OK;
}

nb_status nb_stream_wait_native(nb_stream *s, void *native) {
    NB_CHECK_ARG(s);
    if (!s->dev || s->dev->kind != NB_DEVICE_CUDA) return NB_OK;
    if (native == s->native) return NB_OK;
    return nb_cu_order(s->dev, nb_cu_stream(s), (CUstream)native);
}

nb_status nb_native_wait_stream(void *native, nb_stream *s) {
    NB_CHECK_ARG(s);
    if (!s->dev || s->dev->kind != NB_DEVICE_CUDA) return NB_OK;
    if (native == s->native) return NB_OK;
    return nb_cu_order(s->dev, (CUstream)native, nb_cu_stream(s));
}

/* ---- graphs (device.h: nb_device_graph_*) ---------------------------------------------------------- */
/* A graph records its kernels' arguments and memory at capture: the caller keeps that memory
 * alive and unchanged in place for as long as it replays (ddpm.c checks nb_mem_stats). */

struct nb_device_graph {
    nb_device *dev;
    CUgraph graph;
    CUgraphExec exec;
};

static nb_status nb_device_graph_check(nb_device *dev, const char *fn) {
    if (!dev) return nb_error(NB_ERR_INVALID_ARG, "%s: device is NULL", fn);
    if (dev->kind != NB_DEVICE_CUDA)
        return nb_error(NB_ERR_UNSUPPORTED, "%s: graphs need a CUDA device (%s)", fn, dev->name);
    return NB_OK;
}

nb_status nb_device_graph_capture_begin(nb_device *dev) {
    NB_TRY(nb_device_graph_check(dev, "nb_device_graph_capture_begin"));
    NB_CU_ENTER(dev);
    /* relaxed: other threads' unrelated driver calls (allocations, module loads) stay legal */
    NB_CU_TRY(StreamBeginCapture, nb_cu_stream(&dev->main_stream), CU_STREAM_CAPTURE_MODE_RELAXED);
    return NB_OK;
}

nb_status nb_device_graph_capture_end(nb_device *dev, nb_device_graph **out) {
    if (out) *out = NULL;
    NB_TRY(nb_device_graph_check(dev, "nb_device_graph_capture_end"));
    NB_CU_ENTER(dev);
    CUgraph g = NULL;
    CUresult r = cu->StreamEndCapture(nb_cu_stream(&dev->main_stream), &g);
    if (r != CUDA_SUCCESS) {
        if (g) cu->GraphDestroy(g);
        return nb_cuda_fail(r, "cuStreamEndCapture (work that cannot be captured was queued)");
    }
    if (!out) {
        cu->GraphDestroy(g);
        return nb_error(NB_ERR_INVALID_ARG, "nb_device_graph_capture_end: out is NULL (capture discarded)");
    }
    nb_device_graph *G = nb_alloc(sizeof *G, 16);
    if (!G) {
        cu->GraphDestroy(g);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_device_graph_capture_end: out of host memory");
    }
    G->dev = dev;
    G->graph = g;
    G->exec = NULL;
    r = cu->GraphInstantiate(&G->exec, g, 0);
    if (r != CUDA_SUCCESS) {
        cu->GraphDestroy(g);
        nb_free(G, sizeof *G);
        return nb_cuda_fail(r, "cuGraphInstantiateWithFlags");
    }
    *out = G;
    return NB_OK;
}

nb_status nb_device_graph_launch(nb_device_graph *g) {
    if (!g) return nb_error(NB_ERR_INVALID_ARG, "nb_device_graph_launch: graph is NULL");
    NB_CU_ENTER(g->dev);
    NB_CU_TRY(GraphLaunch, g->exec, nb_cu_stream(&g->dev->main_stream));
    return NB_OK;
}

void nb_device_graph_destroy(nb_device_graph *g) {
    if (!g) return;
    const nb_cuda_api *cu = nb_impl(g->dev)->cu;
    if (cu->CtxSetCurrent(nb_impl(g->dev)->ctx) == CUDA_SUCCESS) {
        /* a launch of it may still run: let it finish first (destroying is rare) */
        CUresult r = cu->StreamSynchronize(nb_cu_stream(&g->dev->main_stream));
        if (r != CUDA_SUCCESS) nb_cu_warn(r, "cuStreamSynchronize (nb_device_graph_destroy)");
        if (g->exec) cu->GraphExecDestroy(g->exec);
        if (g->graph) cu->GraphDestroy(g->graph);
    }
    nb_free(g, sizeof *g);
}

nb_status nb_device_graph_count(const nb_device_graph *g, int64_t *kernels, int64_t *nodes) {
    if (kernels) *kernels = 0;
    if (nodes) *nodes = 0;
    if (!g) return nb_error(NB_ERR_INVALID_ARG, "nb_device_graph_count: graph is NULL");
    NB_CU_ENTER(g->dev);
    size_t n = 0;
    NB_CU_TRY(GraphGetNodes, g->graph, NULL, &n); /* NULL nodes: the count only */
    CUgraphNode *v = n ? nb_alloc(n * sizeof *v, 16) : NULL;
    if (n && !v) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_device_graph_count: %zu nodes", n);
    size_t got = n;
    CUresult r = n ? cu->GraphGetNodes(g->graph, v, &got) : CUDA_SUCCESS;
    int64_t k = 0;
    for (size_t i = 0; i < got && i < n && r == CUDA_SUCCESS; i++) {
        int type = -1;
        r = cu->GraphNodeGetType(v[i], &type);
        k += type == CU_GRAPH_NODE_TYPE_KERNEL;
    }
    if (v) nb_free(v, n * sizeof *v);
    if (r != CUDA_SUCCESS) return nb_cuda_fail(r, "cuGraphGetNodes / cuGraphNodeGetType");
    if (kernels) *kernels = k;
    if (nodes) *nodes = (int64_t)n;
    return NB_OK;
}

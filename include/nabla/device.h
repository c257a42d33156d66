/* nabla — devices, device memory, streams, events and run-time compiled GPU modules.
 *
 * A device is "cpu" (host memory, a thread pool) or "cuda[:N]" (the CUDA driver API, loaded with
 * dlopen at run time, so one build runs with or without a GPU). "auto" picks cuda:0 when a GPU and
 * driver are there, else the CPU, and logs which.
 *
 * Memory on a CUDA device comes from a caching allocator: freed blocks are kept and reused, so a
 * steady-state loop never calls the driver's allocator. All work that nabla queues on a device goes
 * to that device's main stream (nb_device_stream), which keeps reuse of cached blocks ordered.
 */
#ifndef NABLA_DEVICE_H
#define NABLA_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "nabla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nb_device_kind { NB_DEVICE_CPU = 0, NB_DEVICE_CUDA = 1 } nb_device_kind;

typedef struct nb_device nb_device;
typedef struct nb_stream nb_stream;
typedef struct nb_event nb_event;
typedef struct nb_cuda_module nb_cuda_module;
typedef struct nb_cuda_function nb_cuda_function;

typedef struct nb_device_info {
    nb_device_kind kind;
    int index;                  /* N of cuda:N; 0 for the CPU */
    char name[256];             /* "NVIDIA H100 80GB HBM3", or the CPU's model name */
    int cc_major, cc_minor;     /* compute capability (0.0 for the CPU) */
    int multiprocessors;        /* SMs, or CPU threads nabla uses */
    size_t shared_mem_per_block;        /* default per-block limit */
    size_t shared_mem_per_block_optin;  /* limit after opting in (Hopper: 227 KiB) */
    size_t shared_mem_per_sm;
    size_t total_memory;        /* bytes of device (or host) memory */
    size_t l2_cache;            /* bytes */
    int warp_size;
    int max_threads_per_block;
    int clock_khz;              /* SM clock, 0 if unknown */
    int memory_bus_width;       /* bits, 0 if unknown */
    int driver_version;         /* e.g. 13000; 0 for the CPU */
} nb_device_info;

/* Opens "auto", "cpu", "cuda" (= cuda:0) or "cuda:N". Devices are shared: opening the same one
 * twice returns the same handle with its reference count raised; close each open once. */
nb_status nb_device_open(const char *spec, nb_device **out);
void nb_device_close(nb_device *dev);

nb_device_kind nb_device_get_kind(const nb_device *dev);
const nb_device_info *nb_device_get_info(const nb_device *dev);
const char *nb_device_name(const nb_device *dev); /* "cpu" or "cuda:N" */

/* Number of usable CUDA devices (0 with no driver or no GPU; never an error). */
int nb_cuda_device_count(void);
/* Why CUDA is unavailable ("libcuda.so.1 not found", "cuInit failed: …"), or NULL if it is. */
const char *nb_cuda_unavailable_reason(void);
/* Integer version of the loaded NVRTC (e.g. 13000), loading it if needed; 0 if it cannot load. */
int nb_nvrtc_version(void);

/* The datasheet's dense peak FLOP/s of dev's GPU (NOT measured) for math in `precision`: "fp32"
 * (CUDA cores), "tf32" or "bf16" (tensor cores); for a compute floor (`nabla unet bench`). Known:
 * H100 PCIe, H100 / H200 SXM. Other GPUs and the CPU: *flops = 0. *source names the datasheet
 * row, or why there is none. NB_ERR_INVALID_ARG for another precision. */
nb_status nb_device_datasheet_peak(const nb_device *dev, const char *precision, double *flops,
                                   const char **source);

/* Waits until all work queued on the device has finished. Also a check point of deferred bounds
 * checks (nb_call_defer_checks, include/nabla/module.h): returns a pending out-of-bounds error of
 * a deferred launch of any module on dev (reported once). */
nb_status nb_device_synchronize(nb_device *dev);

/* ---- memory ------------------------------------------------------------------------------ */

typedef struct nb_buffer nb_buffer; /* reference-counted block of device memory */

nb_status nb_buffer_alloc(nb_device *dev, size_t bytes, nb_buffer **out);
void nb_buffer_retain(nb_buffer *b);
void nb_buffer_release(nb_buffer *b);
void *nb_buffer_ptr(const nb_buffer *b);  /* host pointer (cpu) or device address (cuda) */
size_t nb_buffer_size(const nb_buffer *b);
nb_device *nb_buffer_device(const nb_buffer *b);

/* Raw copies; the pointers must lie inside memory of the named devices. Ordered on the main
 * streams; a copy that ends on the host returns after the data has arrived. */
nb_status nb_memcpy_h2d(nb_device *dev, void *dst, const void *src, size_t bytes);
nb_status nb_memcpy_d2h(nb_device *dev, void *dst, const void *src, size_t bytes);
nb_status nb_memcpy_d2d(nb_device *dev, void *dst, const void *src, size_t bytes);
nb_status nb_memset(nb_device *dev, void *dst, int byte, size_t bytes);

typedef struct nb_mem_stats {
    size_t bytes_in_use;     /* handed out to live buffers (rounded sizes) */
    size_t bytes_cached;     /* held in the free pool */
    size_t peak_bytes_in_use;
    uint64_t driver_allocs;  /* calls to the driver's (or host) allocator */
    uint64_t driver_frees;
    uint64_t cache_hits;     /* allocations served from the pool */
    uint64_t buffer_frees;   /* buffers given back (to the pool or the driver): a captured graph
                              * may point at freed memory once this moves (nb_device_graph_*) */
} nb_mem_stats;

nb_status nb_device_mem_stats(nb_device *dev, nb_mem_stats *out);
/* Returns every cached free block to the driver. */
nb_status nb_device_empty_cache(nb_device *dev);

/* Zeroed host memory that kernels on `dev` can write and the host can read without a copy or a
 * synchronisation (CUDA: pinned, mapped memory, cuMemHostAlloc DEVICEMAP; the CPU: ordinary
 * memory). *host is its host address, *dev_addr the address kernels use. A kernel's writes are
 * seen by the host in no particular order while it runs, and all of them once it has finished.
 * Free it with nb_host_mapped_free once no queued kernel can write it any more. */
nb_status nb_host_mapped_alloc(nb_device *dev, size_t bytes, void **host, uint64_t *dev_addr);
void nb_host_mapped_free(nb_device *dev, void *host);

/* ---- streams and events -------------------------------------------------------------------- */

/* The device's main stream: all nabla work is queued here (never NULL for an open device). */
nb_stream *nb_device_stream(nb_device *dev);
nb_status nb_stream_create(nb_device *dev, nb_stream **out);
void nb_stream_destroy(nb_stream *s);
nb_status nb_stream_synchronize(nb_stream *s);
/* Makes future work on `s` wait for everything recorded in `e`. */
nb_status nb_stream_wait_event(nb_stream *s, nb_event *e);
/* Native handle (CUstream), NULL for the CPU or the legacy default stream. */
void *nb_stream_native(nb_stream *s);
/* The device the stream belongs to. */
nb_device *nb_stream_device(const nb_stream *s);
/* Ordering with other CUDA users of the same GPU (PyTorch, CuPy), whose streams are CUstreams of
 * the device's primary context (`native` NULL = the legacy default stream):
 *   nb_stream_wait_native(s, native)  future work on s waits for what is queued on `native` now;
 *   nb_native_wait_stream(native, s)  future work on `native` waits for what is queued on s now.
 * Each records a private event; no host synchronisation. No-ops on the CPU device. */
nb_status nb_stream_wait_native(nb_stream *s, void *native);
nb_status nb_native_wait_stream(void *native, nb_stream *s);
/* An nb_stream for another library's CUstream of dev's context (`native` NULL: the legacy default
 * stream; the CPU: a stream like the main one), to launch work there (nb_call_set_stream).
 * nb_stream_destroy frees the handle only: the CUstream stays its owner's. */
nb_status nb_stream_wrap_native(nb_device *dev, void *native, nb_stream **out);

nb_status nb_event_create(nb_device *dev, nb_event **out);
void nb_event_destroy(nb_event *e);
nb_status nb_event_record(nb_event *e, nb_stream *s);
nb_status nb_event_synchronize(nb_event *e);
/* Milliseconds between two recorded, completed events. */
nb_status nb_event_elapsed_ms(nb_event *start, nb_event *end, float *ms);

/* ---- run-time compiled CUDA modules -------------------------------------------------------- */

/* Compiles CUDA C source with NVRTC for this device's architecture. On success *image is a
 * cubin (or PTX where NVRTC cannot target the architecture), allocated with nb_alloc; free it
 * with nb_free(image, size). On a compile error returns NB_ERR_COMPILE with the log in the message.
 * extra_opts: NULL-terminated list of additional NVRTC options, or NULL. */
nb_status nb_cuda_compile(nb_device *dev, const char *source, const char *name,
                          const char *const *extra_opts, void **image, size_t *size);

/* Files a CUDA source may `#include "name"` without a file system: n (name, text) pairs, passed
 * to NVRTC as its headers / includeNames (the name is matched as written in the #include). */
typedef struct nb_cuda_headers {
    int n;
    const char *const *names;
    const char *const *texts;
} nb_cuda_headers;

/* nb_cuda_compile with headers (NULL: none). Compile errors inside a header name it as NVRTC
 * reports it: `name(line): error ...`. */
nb_status nb_cuda_compile_headers(nb_device *dev, const char *source, const char *name,
                                  const char *const *extra_opts, const nb_cuda_headers *headers,
                                  void **image, size_t *size);

nb_status nb_cuda_module_load(nb_device *dev, const void *image, size_t size, nb_cuda_module **out);
void nb_cuda_module_unload(nb_cuda_module *m);
nb_status nb_cuda_module_function(nb_cuda_module *m, const char *name, nb_cuda_function **out);

/* Launches on stream s (NULL = the device's main stream). args: array of pointers to each
 * kernel parameter's value, as for cuLaunchKernel. */
nb_status nb_cuda_launch(nb_cuda_function *f, const unsigned grid[3], const unsigned block[3],
                    unsigned shared_bytes, nb_stream *s, void **args);

/* ---- CUDA graphs: capture and replay -------------------------------------------------------- */
/* (nb_device_graph: a CUDA graph of one stream's work, below everything; the computational graphs
 * that the graph layer builds, fuses and replays are another thing.) */

/* Work queued on the device's main stream between nb_device_graph_capture_begin and
 * nb_device_graph_capture_end is recorded, not run, into a graph; nb_device_graph_launch replays all of it
 * (every kernel with the arguments and memory it was captured with) as one launch, without the
 * per-kernel launch gaps. Host <-> device copies from pageable memory and synchronisation cannot
 * be captured: they fail (or make nb_device_graph_capture_end fail), and the stream is usable again
 * after nb_device_graph_capture_end. CUDA only (NB_ERR_UNSUPPORTED on the CPU).
 *   nb_device_graph_capture_begin(dev);  ...queue kernels...;  nb_device_graph_capture_end(dev, &g);
 *   nb_device_graph_launch(g);  nb_device_graph_launch(g);  ...;  nb_device_graph_destroy(g); */
typedef struct nb_device_graph nb_device_graph;
nb_status nb_device_graph_capture_begin(nb_device *dev);
/* Ends the capture begun on dev; *out: the instantiated graph (NULL on failure). */
nb_status nb_device_graph_capture_end(nb_device *dev, nb_device_graph **out);
/* Queues the whole graph on its device's main stream. */
nb_status nb_device_graph_launch(nb_device_graph *g);
/* Waits for the main stream (a launch may still run), then frees the graph. NULL: no-op. */
void nb_device_graph_destroy(nb_device_graph *g);
/* What the graph holds: *kernels = its kernel nodes (every kernel a replay launches: nabla's own
 * and the libraries' such as cuBLAS), *nodes = all its nodes (kernels, memsets, copies, ...).
 * Either may be NULL. A benchmark's launch counter: capture one step, count, destroy. */
nb_status nb_device_graph_count(const nb_device_graph *g, int64_t *kernels, int64_t *nodes);

#ifdef __cplusplus
}
#endif
#endif

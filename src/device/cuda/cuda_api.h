/* The slice of the CUDA driver API and of NVRTC that nabla uses, declared by hand.
 *
 * Neither <cuda.h> nor <nvrtc.h> is included: libcuda.so.1 and libnvrtc are opened with dlopen at
 * run time, so the library builds on machines without the toolkit and runs on machines without a
 * GPU. The types, enum values and function signatures below copy the ABI of cuda.h / nvrtc.h
 * (CUDA 12/13); the driver keeps these stable. Where cuda.h maps a name to a versioned symbol
 * (cuMemAlloc -> cuMemAlloc_v2), the loader looks up the versioned symbol.
 */
#ifndef NB_DEVICE_CUDA_API_H
#define NB_DEVICE_CUDA_API_H

#include <stddef.h>

#include "nabla/device.h" /* nb_cuda_headers */
#include "nabla/status.h"

/* ---- driver types (cuda.h) ----------------------------------------------------------------- */

typedef int CUresult; /* enum cudaError_enum; an int in the ABI */
typedef int CUdevice;
typedef unsigned long long CUdeviceptr; /* 64-bit builds only, as in cuda.h */
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef int CUdevice_attribute;   /* enum CUdevice_attribute_enum */
typedef int CUfunction_attribute; /* enum CUfunction_attribute_enum */
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUgraphNode_st *CUgraphNode;
#define CU_GRAPH_NODE_TYPE_KERNEL 0 /* enum CUgraphNodeType */

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_UNSUPPORTED_PTX_VERSION 222
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_READY 600

#define CU_STREAM_NON_BLOCKING 0x1 /* no implicit sync with the legacy NULL stream */
#define CU_EVENT_DEFAULT 0x0       /* records timing (unlike CU_EVENT_DISABLE_TIMING) */
#define CU_STREAM_CAPTURE_MODE_RELAXED 2 /* enum CUstreamCaptureMode */
#define CU_MEMHOSTALLOC_PORTABLE 0x01  /* pinned for every context */
#define CU_MEMHOSTALLOC_DEVICEMAP 0x02 /* mapped into the device's address space */

#define CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK 1
#define CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X 2
#define CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y 3
#define CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z 4
#define CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X 5
#define CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y 6
#define CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z 7
#define CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK 8
#define CU_DEVICE_ATTRIBUTE_WARP_SIZE 10
#define CU_DEVICE_ATTRIBUTE_CLOCK_RATE 13
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH 37
#define CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE 38
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR 81
#define CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN 97

#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8

/* The function table filled by the loader. Member names drop the "cu" prefix; comments give the
 * symbol looked up when it differs from "cu" + member name. */
typedef struct nb_cuda_api {
    CUresult (*Init)(unsigned flags);
    CUresult (*DriverGetVersion)(int *version);
    CUresult (*GetErrorString)(CUresult err, const char **str);
    CUresult (*GetErrorName)(CUresult err, const char **str);
    CUresult (*DeviceGet)(CUdevice *dev, int ordinal);
    CUresult (*DeviceGetCount)(int *count);
    CUresult (*DeviceGetName)(char *name, int len, CUdevice dev);
    CUresult (*DeviceGetAttribute)(int *pi, CUdevice_attribute attrib, CUdevice dev);
    CUresult (*DeviceTotalMem)(size_t *bytes, CUdevice dev);              /* _v2 */
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice dev);                    /* _v2 */
    CUresult (*CtxSetCurrent)(CUcontext ctx);
    CUresult (*CtxSynchronize)(void);
    CUresult (*MemGetInfo)(size_t *free_bytes, size_t *total_bytes);      /* _v2 */
    CUresult (*MemAlloc)(CUdeviceptr *dptr, size_t bytes);                /* _v2 */
    CUresult (*MemFree)(CUdeviceptr dptr);                                /* _v2 */
    CUresult (*MemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t n, CUstream s); /* _v2 */
    CUresult (*MemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t n, CUstream s);       /* _v2 */
    CUresult (*MemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s); /* _v2 */
    CUresult (*MemsetD8Async)(CUdeviceptr dst, unsigned char uc, size_t n, CUstream s);
    CUresult (*MemHostAlloc)(void **p, size_t bytes, unsigned flags);
    CUresult (*MemFreeHost)(void *p);
    CUresult (*MemHostGetDevicePointer)(CUdeviceptr *d, void *p, unsigned flags); /* _v2 */
    CUresult (*StreamCreate)(CUstream *s, unsigned flags);
    CUresult (*StreamDestroy)(CUstream s);                                /* _v2 */
    CUresult (*StreamSynchronize)(CUstream s);
    CUresult (*StreamWaitEvent)(CUstream s, CUevent e, unsigned flags);
    CUresult (*EventCreate)(CUevent *e, unsigned flags);
    CUresult (*EventRecord)(CUevent e, CUstream s);
    CUresult (*EventSynchronize)(CUevent e);
    CUresult (*EventElapsedTime)(float *ms, CUevent start, CUevent end);  /* _v2, else v1 */
    CUresult (*EventDestroy)(CUevent e);                                  /* _v2 */
    CUresult (*ModuleLoadData)(CUmodule *mod, const void *image);
    CUresult (*ModuleGetFunction)(CUfunction *fn, CUmodule mod, const char *name);
    CUresult (*ModuleUnload)(CUmodule mod);
    CUresult (*LaunchKernel)(CUfunction f, unsigned gridX, unsigned gridY, unsigned gridZ,
                             unsigned blockX, unsigned blockY, unsigned blockZ,
                             unsigned shared_bytes, CUstream s, void **params, void **extra);
    CUresult (*FuncSetAttribute)(CUfunction f, CUfunction_attribute attrib, int value);
    CUresult (*StreamBeginCapture)(CUstream s, int mode);                 /* _v2 */
    CUresult (*StreamEndCapture)(CUstream s, CUgraph *g);
    CUresult (*GraphInstantiate)(CUgraphExec *e, CUgraph g, unsigned long long flags); /* WithFlags */
    CUresult (*GraphLaunch)(CUgraphExec e, CUstream s);
    CUresult (*GraphExecDestroy)(CUgraphExec e);
    CUresult (*GraphDestroy)(CUgraph g);
    CUresult (*GraphGetNodes)(CUgraph g, CUgraphNode *nodes, size_t *count);
    CUresult (*GraphNodeGetType)(CUgraphNode n, int *type); /* CUgraphNodeType */
} nb_cuda_api;

/* The loaded driver API, or NULL (with nb_cuda_unavailable_reason() saying why). Loads libcuda
 * and calls cuInit(0) once per process, thread-safely. The table never changes afterwards. */
const nb_cuda_api *nb_cuda_api_get(void);

/* Records a failed driver call and returns its status: "cuXxx failed: CUDA_ERROR_NAME: text".
 * CUDA_ERROR_OUT_OF_MEMORY maps to NB_ERR_OUT_OF_MEMORY (the caching allocator retries on it),
 * everything else to NB_ERR_DEVICE. */
nb_status nb_cuda_fail(CUresult r, const char *call);

/* "CUDA_ERROR_NAME: description" of a driver error code, into buf. */
const char *nb_cuda_error_str(CUresult r, char *buf, size_t cap);

/* Calls cu->fn(args…) and returns the mapped failure from the enclosing function. Needs a
 * local `const nb_cuda_api *cu` in scope. */
#define NB_CU_TRY(fn, ...)                                                                       \
    do {                                                                                         \
        CUresult nb_cu_r_ = cu->fn(__VA_ARGS__);                                                 \
        if (nb_cu_r_ != CUDA_SUCCESS) return nb_cuda_fail(nb_cu_r_, "cu" #fn);                   \
    } while (0)

/* ---- NVRTC (nvrtc.h) ------------------------------------------------------------------------ */

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

#define NVRTC_SUCCESS 0
#define NVRTC_ERROR_OUT_OF_MEMORY 1
#define NVRTC_ERROR_INVALID_OPTION 5
#define NVRTC_ERROR_COMPILATION 6

/* Integer version of the loaded NVRTC (13000 for 13.0), 0 if it cannot be loaded. */
int nb_nvrtc_version(void); /* public, declared in nabla/device.h too */
/* Why NVRTC could not be loaded (lists what was tried), or NULL once it is loaded. */
const char *nb_nvrtc_unavailable_reason(void);
/* Path NVRTC was loaded from, or NULL. */
const char *nb_nvrtc_path(void);

/* Hook for installs where libnvrtc is in no default place (the pip wheel nvidia-cuda-nvrtc puts
 * it in site-packages/nvidia/cuda_nvrtc/lib): adds a file to try after $NABLA_NVRTC and before
 * the defaults. Fails if NVRTC is already loaded. A failed load is retried after a new path is
 * added, so a binding may add the wheel's path on demand. */
nb_status nb_nvrtc_add_search_path(const char *path);

/* Highest architecture (e.g. 90 for sm_90) this NVRTC can compile for that is <= want (same
 * encoding, major*10+minor), or 0 when there is none or NVRTC is not loaded. */
int nb_nvrtc_pick_arch(int want);

/* Compiles CUDA C++ for one explicit architecture without a GPU or driver. arch is "sm_XY"
 * (result: cubin, *is_cubin = 1) or "compute_XY" (result: NUL-terminated PTX, *is_cubin = 0).
 * The base options are -default-device and --std=c++17; extra_opts (NULL-terminated, or NULL)
 * follow. The image is allocated with nb_alloc; free it with nb_free(image, size). Returns
 * NB_ERR_COMPILE with the compiler log on a compile error, NB_ERR_UNSUPPORTED when NVRTC cannot
 * be loaded or rejects arch. is_cubin may be NULL. */
nb_status nb_nvrtc_compile(const char *source, const char *name, const char *arch,
                           const char *const *extra_opts, void **image, size_t *size,
                           int *is_cubin);
/* The same with headers the source may #include by name (NVRTC's headers / includeNames; at
 * most 63). */
nb_status nb_nvrtc_compile_headers(const char *source, const char *name, const char *arch,
                                   const char *const *extra_opts, const nb_cuda_headers *headers,
                                   void **image, size_t *size, int *is_cubin);

#endif

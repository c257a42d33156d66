/* Loads the CUDA driver API (libcuda.so.1) with dlopen, once per process.
 *
 * libcuda is never linked: a build must run on machines without an NVIDIA driver, where the CPU
 * device is used and nb_cuda_unavailable_reason() explains why CUDA is not. The library is never
 * dlclose'd: the driver registers exit handlers and unloading it under live contexts crashes.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "device/cuda/cuda_api.h"
#include "nabla/device.h"
#include "nabla/status.h"

/* Under AddressSanitizer cuInit fails with CUDA_ERROR_OUT_OF_MEMORY unless the shadow gap is
 * left unprotected; the reason then says so. */
#if defined(__SANITIZE_ADDRESS__)
#define NB_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NB_UNDER_ASAN 1
#endif
#endif
#ifndef NB_UNDER_ASAN
#define NB_UNDER_ASAN 0
#endif

static nb_cuda_api nb_cu;            /* filled by nb_cuda_load, read-only afterwards */
static int nb_cu_symbols_loaded;     /* nb_cu's pointers are valid (cuInit may still have failed) */
static int nb_cu_usable;             /* cuInit succeeded and there is at least one device */
static int nb_cu_count;              /* devices reported by cuDeviceGetCount */
static char nb_cu_reason[768];       /* why CUDA is not usable; "" when it is */
static pthread_once_t nb_cu_once = PTHREAD_ONCE_INIT;

/* Where each table member lives and which symbols may fill it, preferred first. The versioned
 * names are what cuda.h's #defines resolve to; a plain fallback is listed only where the
 * versioned symbol is newer than the drivers we support (cuEventElapsedTime_v2: CUDA 12.8). */
typedef struct nb_cu_sym {
    size_t offset;
    const char *names[2];
} nb_cu_sym;

#define NB_SYM1(member, name) {offsetof(nb_cuda_api, member), {name, NULL}}
#define NB_SYM2(member, name, fallback) {offsetof(nb_cuda_api, member), {name, fallback}}

static const nb_cu_sym nb_cu_syms[] = {
    NB_SYM1(Init, "cuInit"),
    NB_SYM1(DriverGetVersion, "cuDriverGetVersion"),
    NB_SYM1(GetErrorString, "cuGetErrorString"),
    NB_SYM1(GetErrorName, "cuGetErrorName"),
    NB_SYM1(DeviceGet, "cuDeviceGet"),
    NB_SYM1(DeviceGetCount, "cuDeviceGetCount"),
    NB_SYM1(DeviceGetName, "cuDeviceGetName"),
    NB_SYM1(DeviceGetAttribute, "cuDeviceGetAttribute"),
    NB_SYM1(DeviceTotalMem, "cuDeviceTotalMem_v2"),
    NB_SYM1(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
    NB_SYM1(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
    NB_SYM1(CtxSetCurrent, "cuCtxSetCurrent"),
    NB_SYM1(CtxSynchronize, "cuCtxSynchronize"),
    NB_SYM1(MemGetInfo, "cuMemGetInfo_v2"),
    NB_SYM1(MemAlloc, "cuMemAlloc_v2"),
    NB_SYM1(MemFree, "cuMemFree_v2"),
    NB_SYM1(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
    NB_SYM1(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
    NB_SYM1(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
    NB_SYM1(MemsetD8Async, "cuMemsetD8Async"),
    NB_SYM1(MemHostAlloc, "cuMemHostAlloc"),
    NB_SYM1(MemFreeHost, "cuMemFreeHost"),
    NB_SYM1(MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2"),
    NB_SYM1(StreamCreate, "cuStreamCreate"),
    NB_SYM1(StreamDestroy, "cuStreamDestroy_v2"),
    NB_SYM1(StreamSynchronize, "cuStreamSynchronize"),
    NB_SYM1(StreamWaitEvent, "cuStreamWaitEvent"),
    NB_SYM1(EventCreate, "cuEventCreate"),
    NB_SYM1(EventRecord, "cuEventRecord"),
    NB_SYM1(EventSynchronize, "cuEventSynchronize"),
    NB_SYM2(EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
    NB_SYM1(EventDestroy, "cuEventDestroy_v2"),
    NB_SYM1(ModuleLoadData, "cuModuleLoadData"),
    NB_SYM1(ModuleGetFunction, "cuModuleGetFunction"),
    NB_SYM1(ModuleUnload, "cuModuleUnload"),
    NB_SYM1(LaunchKernel, "cuLaunchKernel"),
    NB_SYM1(FuncSetAttribute, "cuFuncSetAttribute"),
    NB_SYM1(StreamBeginCapture, "cuStreamBeginCapture_v2"),
    NB_SYM1(StreamEndCapture, "cuStreamEndCapture"),
    NB_SYM1(GraphInstantiate, "cuGraphInstantiateWithFlags"),
    NB_SYM1(GraphLaunch, "cuGraphLaunch"),
    NB_SYM1(GraphExecDestroy, "cuGraphExecDestroy"),
    NB_SYM1(GraphDestroy, "cuGraphDestroy"),
    NB_SYM1(GraphGetNodes, "cuGraphGetNodes"),
    NB_SYM1(GraphNodeGetType, "cuGraphNodeGetType"),
};

const char *nb_cuda_error_str(CUresult r, char *buf, size_t cap) {
    const char *name = NULL, *desc = NULL;
    /* cuGetError* work before and without cuInit, so they are usable whenever the symbols are. */
    if (nb_cu_symbols_loaded) {
        if (nb_cu.GetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
        if (nb_cu.GetErrorString(r, &desc) != CUDA_SUCCESS) desc = NULL;
    }
    if (name)
        snprintf(buf, cap, "%s: %s", name, desc ? desc : "(no description)");
    else
        snprintf(buf, cap, "CUDA error %d: (unknown to this driver)", r);
    return buf;
}

nb_status nb_cuda_fail(CUresult r, const char *call) {
    char err[256];
    nb_cuda_error_str(r, err, sizeof err);
    return nb_error(r == CUDA_ERROR_OUT_OF_MEMORY ? NB_ERR_OUT_OF_MEMORY : NB_ERR_DEVICE,
                    "%s failed: %s", call, err);
}

static void nb_cuda_load(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(nb_cu_reason, sizeof nb_cu_reason, "libcuda.so.1 not found (no NVIDIA driver): %s",
                 e ? e : "dlopen failed");
        return;
    }
    for (size_t i = 0; i < NB_ARRAY_LEN(nb_cu_syms); i++) {
        const nb_cu_sym *s = &nb_cu_syms[i];
        void *p = NULL;
        for (int k = 0; k < 2 && !p && s->names[k]; k++) p = dlsym(lib, s->names[k]);
        if (!p) {
            snprintf(nb_cu_reason, sizeof nb_cu_reason,
                     "libcuda.so.1 lacks %s (the NVIDIA driver is too old)",
                     s->names[0]);
            memset(&nb_cu, 0, sizeof nb_cu);
            return;
        }
        /* Function and object pointers have the same representation on every POSIX system (dlsym
         * relies on it); memcpy avoids the cast ISO C does not define. */
        memcpy((char *)&nb_cu + s->offset, &p, sizeof p);
    }
    nb_cu_symbols_loaded = 1;

    char err[256];
    CUresult r = nb_cu.Init(0);
    if (r != CUDA_SUCCESS) {
        snprintf(nb_cu_reason, sizeof nb_cu_reason, "cuInit failed: %s%s",
                 nb_cuda_error_str(r, err, sizeof err),
                 r == CUDA_ERROR_OUT_OF_MEMORY && NB_UNDER_ASAN
                     ? " (AddressSanitizer reserves the address range the driver needs: run "
                       "with ASAN_OPTIONS=protect_shadow_gap=0)"
                     : "");
        return;
    }
    int count = 0;
    r = nb_cu.DeviceGetCount(&count);
    if (r != CUDA_SUCCESS) {
        snprintf(nb_cu_reason, sizeof nb_cu_reason, "cuDeviceGetCount failed: %s",
                 nb_cuda_error_str(r, err, sizeof err));
        return;
    }
    if (count <= 0) {
        snprintf(nb_cu_reason, sizeof nb_cu_reason,
                 "the NVIDIA driver reports no CUDA devices (check CUDA_VISIBLE_DEVICES)");
        return;
    }
    nb_cu_count = count;
    nb_cu_usable = 1;
}

const nb_cuda_api *nb_cuda_api_get(void) {
    pthread_once(&nb_cu_once, nb_cuda_load);
    return nb_cu_usable ? &nb_cu : NULL;
}

int nb_cuda_device_count(void) {
    return nb_cuda_api_get() ? nb_cu_count : 0;
}

const char *nb_cuda_unavailable_reason(void) {
    return nb_cuda_api_get() ? NULL : nb_cu_reason;
}

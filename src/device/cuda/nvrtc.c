/* NVRTC, the CUDA run-time compiler, loaded with dlopen on first use.
 *
 * NVRTC needs no GPU and no driver: it turns CUDA C++ into PTX or (running ptxas inside) a cubin
 * for any architecture it knows. So the compile path is tested on machines without a GPU, and
 * nb_nvrtc_compile takes an explicit architecture for that. nb_cuda_compile picks the
 * architecture of a device.
 *
 * Where libnvrtc is searched, in order:
 *   $NABLA_NVRTC (a file), paths added with nb_nvrtc_add_search_path (e.g. the pip wheel
 *   nvidia-cuda-nvrtc), the loader's search (libnvrtc.so.13, .so.12, .so: LD_LIBRARY_PATH,
 *   ldconfig), $CUDA_HOME/lib64/libnvrtc.so* and $CUDA_PATH/lib64/libnvrtc.so*,
 *   /usr/local/cuda/lib64/libnvrtc.so.13, /usr/local/cuda/lib64/libnvrtc.so.
 * Unlike libcuda, a failed load is retried once a new search path has been added.
 *
 * Sources that include system headers (a Slang __requirePrelude with `#include <mma.h>`) get the
 * toolkit's include directory ($CUDA_HOME/include, $CUDA_PATH/include, beside
 * the loaded libnvrtc, /usr/local/cuda/include: the first holding cuda_runtime_api.h) and an empty
 * "cuda.h": the driver API header is host code that NVRTC cannot compile, and device code does
 * not need it.
 */
#include <dlfcn.h>
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "device/cuda/cuda_api.h"
#include "device/device_impl.h"
#include "nabla/alloc.h"
#include "nabla/device.h"
#include "nabla/env.h"
#include "nabla/log.h"
#include "nabla/status.h"

typedef struct nb_nvrtc_api {
    nvrtcResult (*Version)(int *major, int *minor);
    const char *(*GetErrorString)(nvrtcResult r);
    nvrtcResult (*CreateProgram)(nvrtcProgram *prog, const char *src, const char *name,
                                 int num_headers, const char *const *headers,
                                 const char *const *include_names);
    nvrtcResult (*DestroyProgram)(nvrtcProgram *prog);
    nvrtcResult (*CompileProgram)(nvrtcProgram prog, int num_options, const char *const *options);
    nvrtcResult (*GetPTXSize)(nvrtcProgram prog, size_t *size);
    nvrtcResult (*GetPTX)(nvrtcProgram prog, char *ptx);
    nvrtcResult (*GetCUBINSize)(nvrtcProgram prog, size_t *size);
    nvrtcResult (*GetCUBIN)(nvrtcProgram prog, char *cubin);
    nvrtcResult (*GetProgramLogSize)(nvrtcProgram prog, size_t *size);
    nvrtcResult (*GetProgramLog)(nvrtcProgram prog, char *log);
    /* Optional (NVRTC 11.2+): without them every architecture is assumed to be supported. */
    nvrtcResult (*GetNumSupportedArchs)(int *n);
    nvrtcResult (*GetSupportedArchs)(int *archs);
} nb_nvrtc_api;

typedef struct nb_nvrtc_sym {
    size_t offset;
    const char *name;
    int optional;
} nb_nvrtc_sym;

#define NB_NSYM(member, opt) {offsetof(nb_nvrtc_api, member), "nvrtc" #member, opt}

static const nb_nvrtc_sym nb_nvrtc_syms[] = {
    NB_NSYM(Version, 0),           NB_NSYM(GetErrorString, 0),    NB_NSYM(CreateProgram, 0),
    NB_NSYM(DestroyProgram, 0),    NB_NSYM(CompileProgram, 0),    NB_NSYM(GetPTXSize, 0),
    NB_NSYM(GetPTX, 0),            NB_NSYM(GetCUBINSize, 0),      NB_NSYM(GetCUBIN, 0),
    NB_NSYM(GetProgramLogSize, 0), NB_NSYM(GetProgramLog, 0),     NB_NSYM(GetNumSupportedArchs, 1),
    NB_NSYM(GetSupportedArchs, 1),
};

#define NB_NVRTC_MAX_EXTRA_PATHS 8
#define NB_NVRTC_MAX_ARCHS 64

/* All state below is guarded by nb_nvrtc_lock; once nb_nvrtc_loaded is set the table, version,
 * path and arch list never change again, so callers may use them after unlocking. */
static pthread_mutex_t nb_nvrtc_lock = PTHREAD_MUTEX_INITIALIZER;
static nb_nvrtc_api nb_nvrtc;
static int nb_nvrtc_loaded;
static int nb_nvrtc_tried; /* a load was attempted and failed; reset when a path is added */
static int nb_nvrtc_ver;
static char nb_nvrtc_where[1024];
static char nb_nvrtc_reason[2048];
static int nb_nvrtc_archs[NB_NVRTC_MAX_ARCHS];
static int nb_nvrtc_narchs; /* 0: unknown (every arch assumed supported) */
static char *nb_nvrtc_extra[NB_NVRTC_MAX_EXTRA_PATHS];
static int nb_nvrtc_nextra;

/* Appends to the reason buffer (what was tried and why it failed). */
static void nb_nvrtc_note(const char *what, const char *why) {
    size_t len = strlen(nb_nvrtc_reason);
    if (len + 4 >= sizeof nb_nvrtc_reason) return;
    snprintf(nb_nvrtc_reason + len, sizeof nb_nvrtc_reason - len, "%s%s (%s)",
             len ? "; " : "", what, why ? why : "?");
}

/* Opens one candidate and fills the table. Returns 1 on success. */
static int nb_nvrtc_try(const char *path) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        /* dlerror repeats the path; keep the part after it to keep the reason short. */
        const char *tail = e ? strstr(e, ": ") : NULL;
        nb_nvrtc_note(path, tail ? tail + 2 : e);
        return 0;
    }
    nb_nvrtc_api api;
    memset(&api, 0, sizeof api);
    for (size_t i = 0; i < NB_ARRAY_LEN(nb_nvrtc_syms); i++) {
        void *p = dlsym(lib, nb_nvrtc_syms[i].name);
        if (!p && !nb_nvrtc_syms[i].optional) {
            char why[128];
            snprintf(why, sizeof why, "lacks %s; too old", nb_nvrtc_syms[i].name);
            nb_nvrtc_note(path, why);
            dlclose(lib);
            return 0;
        }
        memcpy((char *)&api + nb_nvrtc_syms[i].offset, &p, sizeof p); /* see cuda_loader.c */
    }
    int major = 0, minor = 0;
    if (api.Version(&major, &minor) != NVRTC_SUCCESS) {
        nb_nvrtc_note(path, "nvrtcVersion failed");
        dlclose(lib);
        return 0;
    }
    nb_nvrtc = api;
    nb_nvrtc_ver = major * 1000 + minor * 10;
    snprintf(nb_nvrtc_where, sizeof nb_nvrtc_where, "%s", path);
    nb_nvrtc_narchs = 0;
    int n = 0;
    if (api.GetNumSupportedArchs && api.GetSupportedArchs &&
        api.GetNumSupportedArchs(&n) == NVRTC_SUCCESS && n > 0 && n <= NB_NVRTC_MAX_ARCHS &&
        api.GetSupportedArchs(nb_nvrtc_archs) == NVRTC_SUCCESS)
        nb_nvrtc_narchs = n;
    return 1;
}

/* The CUDA toolkit roots named by the toolkit's own conventions ($CUDA_HOME, $CUDA_PATH), read
 * once: the libnvrtc search looks in <root>/lib64, the include search in <root>/include. */
static int nb_cuda_env_roots(const char *out[2]) {
    static const char *roots[2];
    static int n = -1;
    if (n < 0) { /* (callers hold nb_nvrtc_lock) */
        n = 0;
        const char *env[2] = {nb_env_get(NB_ENV_CUDA_HOME), nb_env_get(NB_ENV_CUDA_PATH)};
        for (int i = 0; i < 2; i++)
            if (env[i]) roots[n++] = env[i];
    }
    for (int i = 0; i < n; i++) out[i] = roots[i];
    return n;
}

/* Tries every libnvrtc.so* in dir (newest name last in glob order, so walk backwards). */
static int nb_nvrtc_try_dir(const char *dir) {
    if (!dir || !dir[0]) return 0;
    char pattern[1024];
    snprintf(pattern, sizeof pattern, "%s/lib64/libnvrtc.so*", dir);
    glob_t g;
    int found = 0;
    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = g.gl_pathc; i-- > 0 && !found;) found = nb_nvrtc_try(g.gl_pathv[i]);
        globfree(&g);
    } else {
        nb_nvrtc_note(pattern, "no match");
    }
    return found;
}

/* Caller holds nb_nvrtc_lock. */
static void nb_nvrtc_load_locked(void) {
    if (nb_nvrtc_loaded || nb_nvrtc_tried) return;
    nb_nvrtc_tried = 1;
    nb_nvrtc_reason[0] = '\0';
    const char *env = nb_env_get(NB_ENV_NVRTC);
    if (env) {
        if (nb_nvrtc_try(env)) goto ok;
        NB_LOG_W("NABLA_NVRTC=%s could not be loaded; searching the default places", env);
    }
    for (int i = 0; i < nb_nvrtc_nextra; i++)
        if (nb_nvrtc_try(nb_nvrtc_extra[i])) goto ok;
    static const char *const sonames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    for (size_t i = 0; i < NB_ARRAY_LEN(sonames); i++)
        if (nb_nvrtc_try(sonames[i])) goto ok;
    const char *roots[2];
    int nroots = nb_cuda_env_roots(roots);
    for (int i = 0; i < nroots; i++)
        if (nb_nvrtc_try_dir(roots[i])) goto ok;
    static const char *const fixed[] = {"/usr/local/cuda/lib64/libnvrtc.so.13",
                                        "/usr/local/cuda/lib64/libnvrtc.so"};
    for (size_t i = 0; i < NB_ARRAY_LEN(fixed); i++)
        if (nb_nvrtc_try(fixed[i])) goto ok;
    return;
ok:
    nb_nvrtc_loaded = 1;
    nb_nvrtc_reason[0] = '\0';
    NB_LOG_D("NVRTC %d.%d loaded from %s", nb_nvrtc_ver / 1000, nb_nvrtc_ver % 1000 / 10,
             nb_nvrtc_where);
}

/* The loaded table, or NULL. */
static const nb_nvrtc_api *nb_nvrtc_get(void) {
    pthread_mutex_lock(&nb_nvrtc_lock);
    nb_nvrtc_load_locked();
    int ok = nb_nvrtc_loaded;
    pthread_mutex_unlock(&nb_nvrtc_lock);
    return ok ? &nb_nvrtc : NULL;
}

int nb_nvrtc_version(void) { return nb_nvrtc_get() ? nb_nvrtc_ver : 0; }

const char *nb_nvrtc_unavailable_reason(void) {
    if (nb_nvrtc_get()) return NULL;
    /* Stable once the load failed, until a search path is added. */
    return nb_nvrtc_reason[0] ? nb_nvrtc_reason : "libnvrtc not found";
}

const char *nb_nvrtc_path(void) { return nb_nvrtc_get() ? nb_nvrtc_where : NULL; }

nb_status nb_nvrtc_add_search_path(const char *path) {
    NB_CHECK_ARG(path);
    nb_status st = NB_OK;
    pthread_mutex_lock(&nb_nvrtc_lock);
    if (nb_nvrtc_loaded) {
        st = nb_error(NB_ERR_INVALID_ARG, "NVRTC is already loaded from %s; cannot add %s",
                      nb_nvrtc_where, path);
    } else if (nb_nvrtc_nextra >= NB_NVRTC_MAX_EXTRA_PATHS) {
        st = nb_error(NB_ERR_INVALID_ARG, "too many NVRTC search paths (at most %d)",
                      NB_NVRTC_MAX_EXTRA_PATHS);
    } else {
        size_t n = strlen(path) + 1;
        char *copy = nb_alloc(n, 16);
        if (!copy) {
            st = nb_error(NB_ERR_OUT_OF_MEMORY, "out of host memory");
        } else {
            memcpy(copy, path, n);
            nb_nvrtc_extra[nb_nvrtc_nextra++] = copy; /* kept for the life of the process */
            nb_nvrtc_tried = 0;                       /* retry on the next use */
        }
    }
    pthread_mutex_unlock(&nb_nvrtc_lock);
    return st;
}

int nb_nvrtc_pick_arch(int want) {
    if (!nb_nvrtc_get() || want <= 0) return 0;
    if (nb_nvrtc_narchs == 0) return want; /* old NVRTC that cannot tell: try the exact arch */
    int best = 0;
    for (int i = 0; i < nb_nvrtc_narchs; i++)
        if (nb_nvrtc_archs[i] <= want && nb_nvrtc_archs[i] > best) best = nb_nvrtc_archs[i];
    return best;
}

/* Copies the program log into a fresh nb_alloc'd string (never NULL on success). */
static char *nb_nvrtc_log(const nb_nvrtc_api *rt, nvrtcProgram prog, size_t *cap) {
    size_t n = 0;
    *cap = 0;
    if (rt->GetProgramLogSize(prog, &n) != NVRTC_SUCCESS) n = 0;
    char *log = nb_alloc(n + 1, 16);
    if (!log) return NULL;
    log[0] = '\0';
    if (n > 0 && rt->GetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = '\0';
    log[n] = '\0';
    /* Trim trailing newlines and NULs so the message ends cleanly. */
    size_t len = strlen(log);
    while (len > 0 && (log[len - 1] == '\n' || log[len - 1] == '\r')) log[--len] = '\0';
    *cap = n + 1;
    return log;
}

#define NB_NVRTC_MAX_OPTS 64

static int nb_nvrtc_has_include_dir(const char *dir, size_t n) {
    char p[1100];
    snprintf(p, sizeof p, "%.*s/cuda_runtime_api.h", (int)n, dir);
    FILE *f = fopen(p, "rb");
    if (f) fclose(f);
    return f != NULL;
}

/* "-I<toolkit>/include" for sources with system includes, or NULL (see the top). */
static const char *nb_nvrtc_include_opt(void) {
    static char opt[1100];
    static int done;
    pthread_mutex_lock(&nb_nvrtc_lock);
    if (!done) {
        done = 1;
        char cand[4][1024];
        int nc = 0;
        const char *roots[2];
        int nroots = nb_cuda_env_roots(roots);
        for (int i = 0; i < nroots; i++) snprintf(cand[nc++], sizeof cand[0], "%s/include", roots[i]);
        const char *slash = strrchr(nb_nvrtc_where, '/');
        if (slash) { /* <root>/lib64/libnvrtc.so -> <root>/include */
            size_t n = (size_t)(slash - nb_nvrtc_where);
            while (n > 0 && nb_nvrtc_where[n - 1] != '/') n--;
            snprintf(cand[nc++], sizeof cand[0], "%.*sinclude", (int)n, nb_nvrtc_where);
        }
        snprintf(cand[nc++], sizeof cand[0], "/usr/local/cuda/include");
        opt[0] = '\0';
        for (int i = 0; i < nc && !opt[0]; i++)
            if (nb_nvrtc_has_include_dir(cand[i], strlen(cand[i]))) snprintf(opt, sizeof opt, "-I%s", cand[i]);
    }
    pthread_mutex_unlock(&nb_nvrtc_lock);
    return opt[0] ? opt : NULL;
}

nb_status nb_nvrtc_compile(const char *source, const char *name, const char *arch,
                           const char *const *extra_opts, void **image, size_t *size,
                           int *is_cubin) {
    return nb_nvrtc_compile_headers(source, name, arch, extra_opts, NULL, image, size, is_cubin);
}

/* Most headers one program may be given (the caller's plus the empty cuda.h). */
#define NB_NVRTC_MAX_HEADERS 64

nb_status nb_nvrtc_compile_headers(const char *source, const char *name, const char *arch,
                                   const char *const *extra_opts, const nb_cuda_headers *headers,
                                   void **image, size_t *size, int *is_cubin) {
    NB_CHECK_ARG(source);
    NB_CHECK_ARG(image);
    NB_CHECK_ARG(size);
    *image = NULL;
    *size = 0;
    if (!name || !name[0]) name = "nabla_kernel.cu";
    const nb_nvrtc_api *rt = nb_nvrtc_get();
    if (!rt)
        return nb_error(NB_ERR_UNSUPPORTED, "NVRTC is not available: %s",
                        nb_nvrtc_unavailable_reason());

    const char *opts[NB_NVRTC_MAX_OPTS];
    char arch_opt[64];
    int nopts = 0;
    if (arch) {
        snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", arch);
        opts[nopts++] = arch_opt;
    }
    /* -default-device: unannotated functions are __device__, as in our emitted sources.
     * --std=c++17: pinned so the dialect does not change with the NVRTC version. -lineinfo is
     * left to extra_opts: it grows the image and the compile time. */
    opts[nopts++] = "-default-device";
    opts[nopts++] = "--std=c++17";
    for (int i = 0; extra_opts && extra_opts[i]; i++) {
        if (nopts >= NB_NVRTC_MAX_OPTS)
            return nb_error(NB_ERR_INVALID_ARG, "too many NVRTC options (at most %d)",
                            NB_NVRTC_MAX_OPTS - 3);
        opts[nopts++] = extra_opts[i];
    }
    const char *target = arch ? arch : "the architecture in the options";
    /* system includes (Slang preludes): the toolkit's headers and an empty cuda.h (see the top) */
    int sys = strstr(source, "#include <") != NULL;
    const char *inc = sys ? nb_nvrtc_include_opt() : NULL;
    if (inc && nopts < NB_NVRTC_MAX_OPTS) opts[nopts++] = inc;
    /* The caller's headers (found by the name a source #includes them by), then the empty
     * cuda.h for sources with system includes. */
    const char *hdr_text[NB_NVRTC_MAX_HEADERS], *hdr_name[NB_NVRTC_MAX_HEADERS];
    int nh = 0;
    int nuser = headers ? headers->n : 0;
    if (nuser < 0 || nuser > NB_NVRTC_MAX_HEADERS - 1 || (nuser > 0 && (!headers->names || !headers->texts)))
        return nb_error(NB_ERR_INVALID_ARG, "%s: %d headers given (want 0..%d, with names and texts)", name,
                        nuser, NB_NVRTC_MAX_HEADERS - 1);
    for (int i = 0; i < nuser; i++) {
        if (!headers->names[i] || !headers->texts[i])
            return nb_error(NB_ERR_INVALID_ARG, "%s: header %d has no name or no text", name, i);
        hdr_name[nh] = headers->names[i];
        hdr_text[nh++] = headers->texts[i];
    }
    if (sys) {
        hdr_name[nh] = "cuda.h";
        hdr_text[nh++] = "/* cuda.h: host-only driver API; not needed by device code (nabla) */\n";
    }

    nvrtcProgram prog = NULL;
    nvrtcResult r = rt->CreateProgram(&prog, source, name, nh, nh ? hdr_text : NULL, nh ? hdr_name : NULL);
    if (r != NVRTC_SUCCESS)
        return nb_error(r == NVRTC_ERROR_OUT_OF_MEMORY ? NB_ERR_OUT_OF_MEMORY : NB_ERR_INTERNAL,
                        "nvrtcCreateProgram failed for %s: %s", name, rt->GetErrorString(r));

    nb_status st = NB_OK;
    r = rt->CompileProgram(prog, nopts, opts);
    if (r != NVRTC_SUCCESS) {
        size_t logcap = 0;
        char *log = nb_nvrtc_log(rt, prog, &logcap);
        const char *text = log && log[0] ? log : "(empty log)";
        if (r == NVRTC_ERROR_COMPILATION)
            st = nb_error(NB_ERR_COMPILE, "NVRTC failed to compile %s for %s:\n%s", name, target,
                          text);
        else if (r == NVRTC_ERROR_INVALID_OPTION)
            /* An architecture this NVRTC does not know lands here (as does a bad extra option;
             * the log names which). nb_cuda_compile falls back to PTX on it. */
            st = nb_error(NB_ERR_UNSUPPORTED, "NVRTC %d.%d rejected the options for %s (%s): %s",
                          nb_nvrtc_ver / 1000, nb_nvrtc_ver % 1000 / 10, name, target, text);
        else
            st = nb_error(NB_ERR_COMPILE, "nvrtcCompileProgram failed for %s: %s: %s", name,
                          rt->GetErrorString(r), text);
        nb_free(log, logcap);
        rt->DestroyProgram(&prog);
        return st;
    }

    /* A real architecture (sm_XY) yields a cubin; a virtual one (compute_XY) only PTX, and then
     * nvrtcGetCUBINSize reports 0. */
    size_t n = 0;
    int cubin = rt->GetCUBINSize(prog, &n) == NVRTC_SUCCESS && n > 0;
    if (!cubin && (r = rt->GetPTXSize(prog, &n)) != NVRTC_SUCCESS) {
        st = nb_error(NB_ERR_INTERNAL, "nvrtcGetPTXSize failed: %s", rt->GetErrorString(r));
    } else if (n == 0) {
        st = nb_error(NB_ERR_INTERNAL, "NVRTC produced an empty image for %s", name);
    } else {
        /* The PTX size includes the terminating NUL, which cuModuleLoadData needs. */
        char *buf = nb_alloc(n, 16);
        if (!buf) {
            st = nb_error(NB_ERR_OUT_OF_MEMORY, "out of host memory for a %zu-byte image", n);
        } else if ((r = cubin ? rt->GetCUBIN(prog, buf) : rt->GetPTX(prog, buf)) != NVRTC_SUCCESS) {
            st = nb_error(NB_ERR_INTERNAL, "%s failed: %s", cubin ? "nvrtcGetCUBIN" : "nvrtcGetPTX",
                          rt->GetErrorString(r));
            nb_free(buf, n);
        } else {
            *image = buf;
            *size = n;
            if (is_cubin) *is_cubin = cubin;
        }
    }
    rt->DestroyProgram(&prog);
    return st;
}

/* Whether the caller's options already choose an architecture. */
static int nb_opts_have_arch(const char *const *opts) {
    for (int i = 0; opts && opts[i]; i++)
        if (!strncmp(opts[i], "--gpu-architecture", 18) || !strncmp(opts[i], "-arch", 5))
            return 1;
    return 0;
}

nb_status nb_cuda_compile(nb_device *dev, const char *source, const char *name,
                          const char *const *extra_opts, void **image, size_t *size) {
    return nb_cuda_compile_headers(dev, source, name, extra_opts, NULL, image, size);
}

nb_status nb_cuda_compile_headers(nb_device *dev, const char *source, const char *name,
                                  const char *const *extra_opts, const nb_cuda_headers *headers,
                                  void **image, size_t *size) {
    NB_CHECK_ARG(dev);
    NB_CHECK_ARG(source);
    NB_CHECK_ARG(image);
    NB_CHECK_ARG(size);
    *image = NULL;
    *size = 0;
    if (dev->kind != NB_DEVICE_CUDA)
        return nb_error(NB_ERR_INVALID_ARG, "nb_cuda_compile: %s is not a CUDA device",
                        dev->name[0] ? dev->name : "the device");
    if (!nb_nvrtc_get())
        return nb_error(NB_ERR_UNSUPPORTED, "cannot compile CUDA code: NVRTC is not available: %s",
                        nb_nvrtc_unavailable_reason());
    if (nb_opts_have_arch(extra_opts))
        return nb_nvrtc_compile_headers(source, name, NULL, extra_opts, headers, image, size, NULL);

    int want = dev->info.cc_major * 10 + dev->info.cc_minor;
    int pick = nb_nvrtc_pick_arch(want);
    if (pick == 0)
        return nb_error(NB_ERR_UNSUPPORTED,
                        "NVRTC %d.%d (%s) cannot compile for sm_%d or any older architecture",
                        nb_nvrtc_ver / 1000, nb_nvrtc_ver % 1000 / 10, nb_nvrtc_where, want);
    char arch[32];
    if (pick == want) {
        /* Native cubin: no JIT at load time, and it loads even when the driver is older than
         * NVRTC (PTX from a newer NVRTC would not). */
        snprintf(arch, sizeof arch, "sm_%d", want);
        nb_status st = nb_nvrtc_compile_headers(source, name, arch, extra_opts, headers, image, size, NULL);
        if (st != NB_ERR_UNSUPPORTED) return st;
        NB_LOG_I("NVRTC cannot target %s (%s); compiling PTX for compute_%d instead", arch,
                 nb_last_error(), want);
    } else {
        /* The GPU is newer than this NVRTC: PTX of an older virtual arch is JIT-compiled by the
         * driver for it (PTX is forward compatible). */
        NB_LOG_I("NVRTC %d.%d does not know sm_%d; compiling PTX for compute_%d",
                 nb_nvrtc_ver / 1000, nb_nvrtc_ver % 1000 / 10, want, pick);
    }
    snprintf(arch, sizeof arch, "compute_%d", pick);
    return nb_nvrtc_compile_headers(source, name, arch, extra_opts, headers, image, size, NULL);
}

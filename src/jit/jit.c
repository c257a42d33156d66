/* Source string -> callable kernel: the in-process table, the load paths for the CPU (system C
 * compiler + dlopen) and CUDA (NVRTC + module load), launches, and statistics. The rules for the
 * disk cache are in jit.h; its files are handled by cache.c, the compiler by cc.c. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/hash.h"
#include "core/threadpool.h"
#include "core/util.h"
#include "jit/jit.h"
#include "jit/jit_internal.h"
#include "nabla/alloc.h"
#include "nabla/log.h"
#include "nabla/version.h"

struct nb_jit_kernel {
    nb_jit_kernel *next;     /* bucket chain */
    uint64_t mhash;          /* table hash of (source, entry, options, device) */
    size_t alloc_size;       /* this struct plus the strings after it */
    nb_device *dev;          /* CUDA: the device, one reference held; CPU: NULL */
    nb_device_kind kind;
    int ready;               /* 0 while the first loader builds it; others wait */
    const char *source, *entry, *optsig; /* copies, stored after the struct */
    size_t source_len, entry_len, optsig_len;
    void *dl;                /* CPU */
    nb_jit_cpu_fn cpu_fn;
    nb_cuda_module *mod;     /* CUDA */
    nb_cuda_function *cu_fn;
    unsigned max_blocks;     /* SMs x NB_JIT_CUDA_BLOCKS_PER_SM */
    char key[NB_JIT_KEY_LEN + 1];
};

static pthread_mutex_t nb_tab_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t nb_tab_built = PTHREAD_COND_INITIALIZER;
static nb_jit_kernel **nb_tab;
static size_t nb_tab_size, nb_tab_count;

static _Atomic uint64_t nb_counters[NB_JIT_C_COUNT];

void nb_jit_count(nb_jit_counter c, uint64_t n) {
    atomic_fetch_add_explicit(&nb_counters[c], n, memory_order_relaxed);
}

double nb_jit_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void nb_jit_stats(nb_jit_stats_t *out) {
    if (!out) return;
    uint64_t v[NB_JIT_C_COUNT];
    for (int i = 0; i < NB_JIT_C_COUNT; i++) v[i] = atomic_load(&nb_counters[i]);
    out->compiles = v[NB_JIT_C_COMPILES];
    out->compile_errors = v[NB_JIT_C_COMPILE_ERRORS];
    out->disk_hits = v[NB_JIT_C_DISK_HITS];
    out->memory_hits = v[NB_JIT_C_MEMORY_HITS];
    out->corrupt_entries = v[NB_JIT_C_CORRUPT];
    out->uncached = v[NB_JIT_C_UNCACHED];
    out->compile_seconds = (double)v[NB_JIT_C_COMPILE_NS] * 1e-9;
}

void nb_jit_stats_reset(void) {
    for (int i = 0; i < NB_JIT_C_COUNT; i++) atomic_store(&nb_counters[i], 0);
}

/* ---- keys ---------------------------------------------------------------------------------- */

/* Options are stored as each string with its NUL, back to back. */
static size_t nb_optsig_len(const char *const *opts) {
    size_t n = 0;
    for (int i = 0; opts && opts[i]; i++) n += strlen(opts[i]) + 1;
    return n;
}

static int nb_optsig_eq(const char *sig, size_t siglen, const char *const *opts) {
    size_t pos = 0;
    for (int i = 0; opts && opts[i]; i++) {
        size_t l = strlen(opts[i]) + 1;
        if (pos + l > siglen || memcmp(sig + pos, opts[i], l) != 0) return 0;
        pos += l;
    }
    return pos == siglen;
}

static void nb_hash_opts(nb_hasher *h, const char *const *opts) {
    for (int i = 0; opts && opts[i]; i++) nb_hasher_update(h, opts[i], strlen(opts[i]) + 1);
    nb_hasher_update(h, "\x01", 1); /* end of list */
}

static void nb_hash_str(nb_hasher *h, const char *s) { nb_hasher_update(h, s, strlen(s) + 1); }

/* The disk key: two 64-bit hashes (different seeds) of everything that decides the artifact. */
static void nb_disk_key(char out[NB_JIT_KEY_LEN + 1], const char *target, const char *identity,
                        const char *const *opts, const char *source, size_t len) {
    static const uint64_t seeds[2] = {0x6e61626c614a4954ull, 0x9e3779b97f4a7c15ull};
    for (int i = 0; i < 2; i++) {
        nb_hasher h;
        nb_hasher_init(&h, seeds[i]);
        nb_hash_str(&h, "nabla-jit/1");
        nb_hash_str(&h, nb_version());
        nb_hash_str(&h, target);
        nb_hash_str(&h, identity);
        nb_hash_opts(&h, opts);
        uint64_t n = len;
        nb_hasher_update(&h, &n, sizeof n);
        nb_hasher_update(&h, source, len);
        nb_hash_hex(nb_hasher_final(&h), out + 16 * i);
    }
    out[NB_JIT_KEY_LEN] = '\0';
}

/* ---- the in-process table -------------------------------------------------------------- */

/* Caller holds nb_tab_lock. */
static nb_jit_kernel *nb_tab_find(uint64_t h, nb_device *dev, const char *source, size_t len,
                                  const char *entry, const char *const *opts) {
    if (!nb_tab_size) return NULL;
    for (nb_jit_kernel *k = nb_tab[h & (nb_tab_size - 1)]; k; k = k->next)
        if (k->mhash == h && k->dev == dev && k->source_len == len &&
            !strcmp(k->entry, entry) && nb_optsig_eq(k->optsig, k->optsig_len, opts) &&
            !memcmp(k->source, source, len))
            return k;
    return NULL;
}

/* Caller holds nb_tab_lock. */
static int nb_tab_insert(nb_jit_kernel *k) {
    if (nb_tab_count + 1 > nb_tab_size) {
        size_t nsize = nb_tab_size ? nb_tab_size * 2 : 64;
        nb_jit_kernel **nt = nb_calloc(nsize * sizeof *nt, 16);
        if (!nt) return 0;
        for (size_t i = 0; i < nb_tab_size; i++)
            for (nb_jit_kernel *e = nb_tab[i], *next; e; e = next) {
                next = e->next;
                e->next = nt[e->mhash & (nsize - 1)];
                nt[e->mhash & (nsize - 1)] = e;
            }
        nb_free(nb_tab, nb_tab_size * sizeof *nb_tab);
        nb_tab = nt;
        nb_tab_size = nsize;
    }
    nb_jit_kernel **slot = &nb_tab[k->mhash & (nb_tab_size - 1)];
    k->next = *slot;
    *slot = k;
    nb_tab_count++;
    return 1;
}

/* Caller holds nb_tab_lock. */
static void nb_tab_remove(nb_jit_kernel *k) {
    for (nb_jit_kernel **p = &nb_tab[k->mhash & (nb_tab_size - 1)]; *p; p = &(*p)->next)
        if (*p == k) {
            *p = k->next;
            nb_tab_count--;
            return;
        }
}

static nb_jit_kernel *nb_kernel_new(uint64_t h, nb_device *dev, nb_device_kind kind,
                                    const char *source, size_t len, const char *entry,
                                    const char *const *opts) {
    size_t elen = strlen(entry), olen = nb_optsig_len(opts);
    size_t bytes = sizeof(nb_jit_kernel) + len + 1 + elen + 1 + olen + 1;
    nb_jit_kernel *k = nb_calloc(bytes, 16);
    if (!k) return NULL;
    char *p = (char *)(k + 1);
    k->mhash = h;
    k->alloc_size = bytes;
    k->dev = dev;
    k->kind = kind;
    memcpy(p, source, len);
    k->source = p;
    k->source_len = len;
    p += len + 1;
    memcpy(p, entry, elen);
    k->entry = p;
    k->entry_len = elen;
    p += elen + 1;
    for (int i = 0; opts && opts[i]; i++) {
        size_t l = strlen(opts[i]) + 1;
        memcpy(p + k->optsig_len, opts[i], l);
        k->optsig_len += l;
    }
    k->optsig = p;
    return k;
}

/* Releases what a kernel holds (not the table slot). */
static void nb_kernel_free(nb_jit_kernel *k) {
    if (k->dl) dlclose(k->dl);
    if (k->mod) nb_cuda_module_unload(k->mod);
    if (k->kind == NB_DEVICE_CUDA && k->ready && k->dev) nb_device_close(k->dev);
    nb_free(k, k->alloc_size);
}

/* ---- CPU: system compiler + dlopen --------------------------------------------------------- */

static const char *nb_kname(const nb_jit_kernel *k, const nb_jit_options *opts) {
    return opts && opts->name ? opts->name : k->entry;
}

static nb_status nb_cpu_resolve(nb_jit_kernel *k, void *dl, const char *name) {
    void *sym = dlsym(dl, k->entry);
    if (!sym) {
        dlclose(dl);
        return nb_error(NB_ERR_NOT_FOUND, "kernel '%s' has no function '%s'", name, k->entry);
    }
    k->dl = dl;
    memcpy(&k->cpu_fn, &sym, sizeof sym); /* object -> function pointer, as POSIX allows */
    return NB_OK;
}

/* Compiles the kernel in workdir, a directory of this compile alone (nothing else reads, writes
 * or deletes its files meanwhile), into workdir/<key>.so with its trailer, and loads it from
 * there. The loaded object stays mapped when the file is later moved or deleted. */
static nb_status nb_cpu_compile(nb_jit_kernel *k, const char *workdir, const nb_jit_options *opts,
                                void **dl) {
    const char *name = nb_kname(k, opts);
    *dl = NULL;
    char src[NB_JIT_PATH_MAX], so[NB_JIT_PATH_MAX], file[NB_JIT_KEY_LEN + 8];
    snprintf(file, sizeof file, "%s.c", k->key);
    NB_TRY(nb_jit_write_atomic(workdir, file, k->source, k->source_len));
    nb_jit_path(src, sizeof src, "%s/%s", workdir, file);
    nb_jit_path(so, sizeof so, "%s/%s.so", workdir, k->key);
    double t0 = nb_jit_now();
    nb_status st = nb_cc_compile(src, so, opts ? opts->cflags : NULL, name);
    nb_jit_count(NB_JIT_C_COMPILE_NS, (uint64_t)((nb_jit_now() - t0) * 1e9));
    if (st != NB_OK) {
        unlink(so);
        nb_jit_count(NB_JIT_C_COMPILE_ERRORS, 1);
        return st;
    }
    nb_jit_count(NB_JIT_C_COMPILES, 1);
    NB_TRY(nb_jit_entry_seal(so, NULL, k->key, NB_ART_SO));
    NB_LOG_D("jit: compiled '%s' into %s", name, so);
    *dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!*dl)
        return nb_error(NB_ERR_COMPILE, "kernel '%s' compiled but cannot be loaded: %s", name,
                        dlerror());
    return NB_OK;
}

/* Compiles in a locked work directory inside the cache directory, loads the result from there,
 * then publishes <key>.c and <key>.so into the cache by rename. A cache clear in another process
 * never touches the work directory, so it cannot make this fail; the published entry may be
 * deleted by a clear at any time after, which only costs a later process a compile. NB_ERR_IO:
 * the work directory could not be used (the caller compiles privately). */
static nb_status nb_cpu_build_cached(nb_jit_kernel *k, const char *dir, const nb_jit_options *opts,
                                     void **dl) {
    const char *name = nb_kname(k, opts);
    char work[NB_JIT_PATH_MAX], from[NB_JIT_PATH_MAX], file[NB_JIT_KEY_LEN + 8];
    int lock_fd;
    NB_TRY(nb_jit_workdir_open(dir, k->key, work, sizeof work, &lock_fd));
    nb_status st = nb_cpu_compile(k, work, opts, dl);
    snprintf(file, sizeof file, "%s.c", k->key);
    nb_jit_path(from, sizeof from, "%s/%s", work, file);
    if (st == NB_ERR_COMPILE) {
        /* A failed compile leaves its source in the cache for inspection. */
        char kept[NB_JIT_PATH_MAX];
        nb_jit_path(kept, sizeof kept, "%s/%s", dir, file);
        if (rename(from, kept) == 0)
            st = nb_error(NB_ERR_COMPILE, "%s\n(the kernel's source is kept as %s)",
                          nb_last_error(), kept);
    } else if (st == NB_OK) {
        nb_status pst = nb_jit_publish(from, dir, file);
        nb_jit_path(from, sizeof from, "%s/%s.so", work, k->key);
        snprintf(file, sizeof file, "%s.so", k->key);
        if (pst == NB_OK) pst = nb_jit_publish(from, dir, file);
        if (pst != NB_OK) {
            NB_LOG_W("kernel cache: %s; '%s' is not cached", nb_last_error(), name);
            nb_jit_count(NB_JIT_C_UNCACHED, 1);
        }
    }
    nb_jit_workdir_close(work, lock_fd);
    return st;
}

static nb_status nb_cpu_build(nb_jit_kernel *k, const nb_jit_options *opts) {
    const char *identity;
    NB_TRY(nb_cc_identity(&identity));
    nb_disk_key(k->key, "c", identity, opts ? opts->cflags : NULL, k->source, k->source_len);
    const char *name = nb_kname(k, opts);

    char dir[NB_JIT_PATH_MAX], path[NB_JIT_PATH_MAX];
    int exists = 0, writable = 0;
    if (!(opts && opts->no_disk_cache))
        NB_TRY(nb_kernel_cache_prepare(dir, sizeof dir, &exists, &writable));
    if (exists && nb_jit_entry_read(dir, k->key, NB_ART_SO, NULL, NULL, NULL) == NB_OK) {
        nb_jit_path(path, sizeof path, "%s/%s.so", dir, k->key);
        void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (dl) {
            nb_jit_count(NB_JIT_C_DISK_HITS, 1);
            NB_LOG_D("jit: '%s' from the cache: %s", name, path);
            return nb_cpu_resolve(k, dl, name);
        }
        const char *why = dlerror();
        /* Gone since it was verified (a cache clear): not corrupt, just build it again. */
        if (access(path, F_OK) == 0) nb_jit_entry_discard(dir, k->key, NB_ART_SO, why);
    }

    void *dl = NULL;
    nb_status st = NB_ERR_IO;
    if (writable) {
        st = nb_cpu_build_cached(k, dir, opts, &dl);
        if (st == NB_ERR_IO)
            NB_LOG_W("kernel cache: %s; compiling '%s' in a private directory", nb_last_error(),
                     name);
    }
    if (st == NB_ERR_IO) { /* no usable cache directory, or working in it failed */
        char priv[NB_JIT_PATH_MAX];
        NB_TRY(nb_jit_private_dir(priv, sizeof priv));
        st = nb_cpu_compile(k, priv, opts, &dl);
        nb_jit_remove_tree(priv); /* a loaded object stays mapped */
        if (st == NB_OK) nb_jit_count(NB_JIT_C_UNCACHED, 1);
    }
    if (st != NB_OK) return st;
    return nb_cpu_resolve(k, dl, name);
}

/* ---- CUDA: NVRTC + module load --------------------------------------------------------------- */

static nb_status nb_cuda_finish(nb_jit_kernel *k, nb_device *dev, const void *image, size_t size,
                                const char *name) {
    NB_TRY(nb_cuda_module_load(dev, image, size, &k->mod));
    nb_status st = nb_cuda_module_function(k->mod, k->entry, &k->cu_fn);
    if (st == NB_ERR_NOT_FOUND)
        st = nb_error(NB_ERR_NOT_FOUND, "kernel '%s' has no entry '%s' (%s)", name, k->entry,
                      nb_last_error());
    nb_device *ref = NULL;
    if (st == NB_OK) st = nb_device_open(nb_device_name(dev), &ref);
    if (st == NB_OK && ref != dev) {
        nb_device_close(ref);
        st = nb_error(NB_ERR_INVALID_ARG, "kernel '%s': %s is not an open device", name,
                      nb_device_name(dev));
    }
    if (st != NB_OK) {
        nb_cuda_module_unload(k->mod);
        k->mod = NULL;
        k->cu_fn = NULL;
        return st;
    }
    int sms = nb_device_get_info(dev)->multiprocessors;
    k->max_blocks = (unsigned)(sms > 0 ? sms : 1) * NB_JIT_CUDA_BLOCKS_PER_SM;
    return NB_OK;
}

/* keysig: the NVRTC options followed by the headers' names and texts (what the key hashes). */
static nb_status nb_cuda_build(nb_jit_kernel *k, nb_device *dev, const nb_jit_options *opts,
                               const char *const *keysig) {
    const char *name = nb_kname(k, opts);
    const char *const *nv = opts ? opts->nvrtc_opts : NULL;
    const nb_cuda_headers *hd = opts ? opts->headers : NULL;
    int ver = nb_nvrtc_version();
    if (ver == 0) { /* let nb_cuda_compile say why */
        void *img = NULL;
        size_t sz = 0;
        nb_status st = nb_cuda_compile_headers(dev, k->source, name, nv, hd, &img, &sz);
        if (st == NB_OK) nb_free(img, sz);
        return st == NB_OK ? nb_error(NB_ERR_INTERNAL, "NVRTC version unknown") : st;
    }
    const nb_device_info *info = nb_device_get_info(dev);
    char identity[128];
    snprintf(identity, sizeof identity, "nvrtc %d sm_%d%d", ver, info->cc_major, info->cc_minor);
    nb_disk_key(k->key, "cuda", identity, keysig, k->source, k->source_len);

    char dir[NB_JIT_PATH_MAX];
    int exists = 0, writable = 0;
    if (!(opts && opts->no_disk_cache))
        NB_TRY(nb_kernel_cache_prepare(dir, sizeof dir, &exists, &writable));
    for (int kind = NB_ART_CUBIN; exists && kind <= NB_ART_PTX; kind++) {
        void *img;
        size_t sz, cap;
        if (nb_jit_entry_read(dir, k->key, (nb_art_kind)kind, &img, &sz, &cap) != NB_OK) continue;
        nb_status st = nb_cuda_finish(k, dev, img, sz, name);
        nb_free(img, cap);
        if (st == NB_OK) {
            nb_jit_count(NB_JIT_C_DISK_HITS, 1);
            return NB_OK;
        }
        if (st != NB_ERR_DEVICE) return st; /* missing entry etc.: not the file's fault */
        nb_jit_entry_discard(dir, k->key, (nb_art_kind)kind, nb_last_error());
    }

    void *img = NULL;
    size_t sz = 0;
    double t0 = nb_jit_now();
    nb_status st = nb_cuda_compile_headers(dev, k->source, name, nv, hd, &img, &sz);
    nb_jit_count(NB_JIT_C_COMPILE_NS, (uint64_t)((nb_jit_now() - t0) * 1e9));
    if (st != NB_OK) {
        nb_jit_count(NB_JIT_C_COMPILE_ERRORS, 1);
        return st;
    }
    nb_jit_count(NB_JIT_C_COMPILES, 1);
    const unsigned char *b = img;
    nb_art_kind kind = sz >= 4 && b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F'
                           ? NB_ART_CUBIN : NB_ART_PTX;
    st = NB_ERR_IO;
    if (writable) {
        char src[NB_JIT_KEY_LEN + 8];
        snprintf(src, sizeof src, "%s.cu", k->key);
        st = nb_jit_write_atomic(dir, src, k->source, k->source_len);
        if (st == NB_OK) st = nb_jit_entry_write(dir, k->key, kind, img, sz);
        if (st != NB_OK) NB_LOG_W("kernel cache: %s; '%s' is not cached", nb_last_error(), name);
    }
    if (st != NB_OK) nb_jit_count(NB_JIT_C_UNCACHED, 1);
    st = nb_cuda_finish(k, dev, img, sz, name);
    nb_free(img, sz);
    return st;
}

/* ---- loading ------------------------------------------------------------------------------- */

static nb_status nb_jit_load_sig(nb_device *dev, nb_device_kind kind, const char *source, size_t len,
                                 const char *entry, const nb_jit_options *opts, const char *const *o,
                                 nb_jit_kernel **out);

nb_status nb_jit_load(nb_device *dev, const char *source, const char *entry,
                      const nb_jit_options *opts, nb_jit_kernel **out) {
    NB_CHECK_ARG(out);
    *out = NULL;
    NB_CHECK_ARG(source);
    NB_CHECK_ARG(entry);
    if (!entry[0]) return nb_error(NB_ERR_INVALID_ARG, "nb_jit_load: empty entry name");
    nb_device_kind kind = dev ? nb_device_get_kind(dev) : NB_DEVICE_CPU;
    const char *const *o = opts ? (kind == NB_DEVICE_CPU ? opts->cflags : opts->nvrtc_opts) : NULL;
    size_t len = strlen(source);
    /* CUDA headers join the options in the keys: NVRTC options, a marker, then each header's
     * name and text, so a kernel is rebuilt when a file it includes changes. */
    const nb_cuda_headers *hd = kind == NB_DEVICE_CUDA && opts ? opts->headers : NULL;
    const char **sig = NULL;
    size_t sigcap = 0;
    if (hd && hd->n > 0) {
        if (!hd->names || !hd->texts)
            return nb_error(NB_ERR_INVALID_ARG, "nb_jit_load(%s): headers without names or texts", entry);
        size_t no = 0;
        while (o && o[no]) no++;
        sigcap = (no + 2 + 2 * (size_t)hd->n) * sizeof *sig;
        sig = nb_alloc(sigcap, 16);
        if (!sig) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_jit_load: out of host memory");
        size_t i = 0;
        for (size_t j = 0; j < no; j++) sig[i++] = o[j];
        sig[i++] = "\x02headers";
        for (int j = 0; j < hd->n; j++) {
            if (!hd->names[j] || !hd->texts[j]) {
                nb_free(sig, sigcap);
                return nb_error(NB_ERR_INVALID_ARG, "nb_jit_load(%s): header %d has no name or no text", entry, j);
            }
            sig[i++] = hd->names[j];
            sig[i++] = hd->texts[j];
        }
        sig[i] = NULL;
        o = sig;
    }
    nb_status st = nb_jit_load_sig(dev, kind, source, len, entry, opts, o, out);
    if (sig) nb_free(sig, sigcap);
    return st;
}

/* nb_jit_load once the key's option signature o is known. */
static nb_status nb_jit_load_sig(nb_device *dev, nb_device_kind kind, const char *source, size_t len,
                                 const char *entry, const nb_jit_options *opts, const char *const *o,
                                 nb_jit_kernel **out) {
    nb_device *tdev = kind == NB_DEVICE_CUDA ? dev : NULL; /* CPU kernels fit every CPU device */

    nb_hasher h;
    nb_hasher_init(&h, 0);
    nb_hasher_update(&h, source, len);
    nb_hash_str(&h, entry);
    nb_hash_opts(&h, o);
    nb_hasher_update(&h, &tdev, sizeof tdev);
    uint64_t mh = nb_hasher_final(&h);

    pthread_mutex_lock(&nb_tab_lock);
    nb_jit_kernel *k;
    while ((k = nb_tab_find(mh, tdev, source, len, entry, o)) && !k->ready)
        pthread_cond_wait(&nb_tab_built, &nb_tab_lock); /* another thread is building it */
    if (k) {
        pthread_mutex_unlock(&nb_tab_lock);
        nb_jit_count(NB_JIT_C_MEMORY_HITS, 1);
        *out = k;
        return NB_OK;
    }
    k = nb_kernel_new(mh, tdev, kind, source, len, entry, o);
    if (!k || !nb_tab_insert(k)) {
        pthread_mutex_unlock(&nb_tab_lock);
        if (k) nb_free(k, k->alloc_size);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_jit_load: out of host memory");
    }
    pthread_mutex_unlock(&nb_tab_lock);

    nb_status st = kind == NB_DEVICE_CPU ? nb_cpu_build(k, opts) : nb_cuda_build(k, dev, opts, o);

    pthread_mutex_lock(&nb_tab_lock);
    if (st == NB_OK)
        k->ready = 1;
    else
        nb_tab_remove(k); /* waiters retry and report their own error */
    pthread_cond_broadcast(&nb_tab_built);
    pthread_mutex_unlock(&nb_tab_lock);
    if (st != NB_OK) {
        nb_kernel_free(k);
        return st;
    }
    *out = k;
    return NB_OK;
}

nb_device_kind nb_jit_kernel_kind(const nb_jit_kernel *k) { return k->kind; }
nb_jit_cpu_fn nb_jit_kernel_cpu_fn(const nb_jit_kernel *k) { return k->cpu_fn; }
nb_cuda_function *nb_jit_kernel_cuda_fn(const nb_jit_kernel *k) { return k->cu_fn; }
const char *nb_jit_kernel_key(const nb_jit_kernel *k) { return k->key; }

void nb_jit_forget_all(void) {
    pthread_mutex_lock(&nb_tab_lock);
    nb_jit_kernel **tab = nb_tab;
    size_t size = nb_tab_size;
    nb_tab = NULL;
    nb_tab_size = nb_tab_count = 0;
    pthread_mutex_unlock(&nb_tab_lock);
    for (size_t i = 0; i < size; i++)
        for (nb_jit_kernel *k = tab[i], *next; k; k = next) {
            next = k->next;
            nb_kernel_free(k);
        }
    nb_free(tab, size * sizeof *tab);
    nb_cc_forget();
    nb_kernel_cache_forget();
}

/* ---- launching ----------------------------------------------------------------------------- */

typedef struct nb_cpu_job {
    nb_jit_cpu_fn fn;
    const void *params;
} nb_cpu_job;

static void nb_cpu_chunk(void *ctx, int64_t begin, int64_t end) {
    const nb_cpu_job *j = ctx;
    j->fn(j->params, begin, end);
}

nb_status nb_jit_launch_cpu_grain(nb_jit_kernel *k, const void *params, int64_t n, int64_t grain) {
    NB_CHECK_ARG(k);
    if (k->kind != NB_DEVICE_CPU || !k->cpu_fn)
        return nb_error(NB_ERR_INVALID_ARG, "nb_jit_launch_cpu: '%s' is not a CPU kernel", k->entry);
    if (n < 0) return nb_error(NB_ERR_INVALID_ARG, "nb_jit_launch_cpu(%s): n = %lld < 0", k->entry,
                               (long long)n);
    if (grain < 1) grain = 1;
    if (n <= grain) { /* tiny call: no worker is woken */
        if (n > 0) k->cpu_fn(params, 0, n);
        return NB_OK;
    }
    nb_cpu_job job = {k->cpu_fn, params};
    nb_threadpool_run(nb_threadpool_global(), n, grain, nb_cpu_chunk, &job);
    return NB_OK;
}

nb_status nb_jit_launch_cpu(nb_jit_kernel *k, const void *params, int64_t n) {
    return nb_jit_launch_cpu_grain(k, params, n, NB_JIT_CPU_GRAIN);
}

static nb_status nb_cuda_check(nb_jit_kernel *k, const void *params, size_t params_size) {
    NB_CHECK_ARG(k);
    NB_CHECK_ARG(params);
    if (k->kind != NB_DEVICE_CUDA || !k->cu_fn)
        return nb_error(NB_ERR_INVALID_ARG, "nb_jit_launch_cuda: '%s' is not a CUDA kernel", k->entry);
    if (params_size == 0 || params_size > 4096)
        return nb_error(NB_ERR_INVALID_ARG,
                        "nb_jit_launch_cuda(%s): parameter block of %zu bytes (want 1..4096)",
                        k->entry, params_size);
    return NB_OK;
}

nb_status nb_jit_launch_cuda_grid(nb_jit_kernel *k, const void *params, size_t params_size,
                                  const unsigned grid[3], const unsigned block[3], nb_stream *s) {
    NB_TRY(nb_cuda_check(k, params, params_size));
    /* One kernel parameter, the block by value: the driver copies params_size bytes (the size
     * it knows from the kernel's signature) from this pointer at launch. */
    void *args[1] = {(void *)params};
    return nb_cuda_launch(k->cu_fn, grid, block, 0, s, args);
}

nb_status nb_jit_launch_cuda_groups(nb_jit_kernel *k, const void *params, size_t params_size, int64_t ngroups,
                                    int group_size, nb_stream *s) {
    NB_TRY(nb_cuda_check(k, params, params_size));
    if (ngroups < 0 || group_size < 1 || group_size > 1024)
        return nb_error(NB_ERR_INVALID_ARG, "nb_jit_launch_cuda_groups(%s): %lld groups of %d threads", k->entry,
                        (long long)ngroups, group_size);
    if (ngroups == 0) return NB_OK;
    int64_t blocks = ngroups < (int64_t)k->max_blocks ? ngroups : (int64_t)k->max_blocks;
    if (blocks < 1) blocks = 1;
    const unsigned grid[3] = {(unsigned)blocks, 1, 1}, block[3] = {(unsigned)group_size, 1, 1};
    void *args[1] = {(void *)params};
    return nb_cuda_launch(k->cu_fn, grid, block, 0, s, args);
}

nb_status nb_jit_launch_cuda(nb_jit_kernel *k, const void *params, size_t params_size, int64_t n,
                             nb_stream *s) {
    return nb_jit_launch_cuda_n(k, params, params_size, n, 0, s);
}

nb_status nb_jit_launch_cuda_n(nb_jit_kernel *k, const void *params, size_t params_size, int64_t n, int blocks_per_sm,
                               nb_stream *s) {
    NB_TRY(nb_cuda_check(k, params, params_size));
    if (n < 0) return nb_error(NB_ERR_INVALID_ARG, "nb_jit_launch_cuda(%s): n = %lld < 0", k->entry,
                               (long long)n);
    if (n == 0) return NB_OK;
    int64_t blocks = (n + NB_JIT_CUDA_BLOCK - 1) / NB_JIT_CUDA_BLOCK;
    int64_t cap = k->max_blocks;
    if (blocks_per_sm > 0 && blocks_per_sm < NB_JIT_CUDA_BLOCKS_PER_SM)
        cap = (int64_t)k->max_blocks / NB_JIT_CUDA_BLOCKS_PER_SM * blocks_per_sm;
    if (cap < 1) cap = 1;
    if (blocks > cap) blocks = cap;
    const unsigned grid[3] = {(unsigned)blocks, 1, 1}, block[3] = {NB_JIT_CUDA_BLOCK, 1, 1};
    void *args[1] = {(void *)params};
    return nb_cuda_launch(k->cu_fn, grid, block, 0, s, args);
}

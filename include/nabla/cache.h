/* nabla — the on-disk cache of compiled kernels (shared objects for the CPU, cubins/PTX for
 * CUDA). Location: $NABLA_CACHE_DIR, else ~/.cache/nabla, else /tmp/nabla-cache-$UID. Entries are
 * keyed by a hash of the generated source, target, flags, compiler identity and nabla version,
 * written atomically, and verified on load (a corrupt entry is rebuilt, never trusted).
 * `nabla cache dir|ls|clear` uses these functions. */
#ifndef NABLA_CACHE_H
#define NABLA_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "nabla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The cache directory (not created). NB_ERR_INVALID_ARG if buf is too small. */
nb_status nb_kernel_cache_dir(char *buf, size_t cap);

typedef struct nb_kernel_cache_entry {
    const char *path;        /* full path of the artifact */
    const char *key;         /* 32 hex digits */
    const char *kind;        /* "so", "cubin" or "ptx" */
    uint64_t file_size;      /* bytes on disk, trailer included */
    int64_t mtime;           /* seconds since the epoch */
    int valid;               /* trailer, key and image hash all check out */
    int has_source;          /* <key>.c / <key>.cu is there */
} nb_kernel_cache_entry;

/* Calls fn for each artifact in the cache directory (sorted by key); fn returns nonzero to stop.
 * A missing directory is an empty cache. */
nb_status nb_kernel_cache_list(int (*fn)(const nb_kernel_cache_entry *e, void *user), void *user);

/* Deletes the cache's own files (artifacts, sources, leftover temp files) — nothing else, so a
 * mistaken NABLA_CACHE_DIR=$HOME deletes nothing of the user's. removed may be NULL. */
nb_status nb_kernel_cache_clear(size_t *removed);

#ifdef __cplusplus
}
#endif
#endif

/* Pieces shared by jit.c (tables, load, launch), cache.c (directory, entry files) and cc.c (the
 * system C compiler). Private to src/jit. */
#ifndef NB_JIT_INTERNAL_H
#define NB_JIT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/strbuf.h"
#include "nabla/status.h"

#define NB_JIT_KEY_LEN 32 /* hex digits of a disk key */
#define NB_JIT_PATH_MAX 4096
/* The cache directory's path is at most this long, so every name derived from it fits. */
#define NB_JIT_DIR_MAX (NB_JIT_PATH_MAX - 128)

/* snprintf for paths (names under a directory of at most NB_JIT_DIR_MAX bytes always fit). */
void nb_jit_path(char *buf, size_t cap, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

typedef enum nb_art_kind { NB_ART_SO = 0, NB_ART_CUBIN = 1, NB_ART_PTX = 2 } nb_art_kind;

/* "so", "cubin", "ptx"; and the source's extension for the artifact ("c" / "cu"). */
const char *nb_art_ext(nb_art_kind k);
const char *nb_art_src_ext(nb_art_kind k);

/* ---- statistics (jit.c) ---- */
typedef enum nb_jit_counter {
    NB_JIT_C_COMPILES, NB_JIT_C_COMPILE_ERRORS, NB_JIT_C_DISK_HITS, NB_JIT_C_MEMORY_HITS,
    NB_JIT_C_CORRUPT, NB_JIT_C_UNCACHED, NB_JIT_C_COMPILE_NS, NB_JIT_C_COUNT
} nb_jit_counter;
void nb_jit_count(nb_jit_counter c, uint64_t n);
double nb_jit_now(void); /* monotonic seconds */

/* ---- cache directory and entries (cache.c) ---- */

/* Resolves the cache directory and creates it (mode 0755). *writable says whether entries can be
 * written there (if not, a warning is logged once per process, naming the reason). Returns
 * NB_OK with *exists = 0 when the directory is missing and cannot be made. */
nb_status nb_kernel_cache_prepare(char *dir, size_t cap, int *exists, int *writable);

/* Reads and verifies dir/<key>.<ext>. NB_OK with *image (nb_alloc'd, free with nb_free(p, cap))
 * holding the image without trailer; NB_ERR_NOT_FOUND if there is no such file. A file that
 * fails verification is deleted (warn) and reported as NB_ERR_NOT_FOUND. image may be NULL to
 * only verify. */
nb_status nb_jit_entry_read(const char *dir, const char *key, nb_art_kind kind, void **image,
                            size_t *size, size_t *cap);
/* Deletes a bad entry: logs `why` at warn and counts it as corrupt. */
void nb_jit_entry_discard(const char *dir, const char *key, nb_art_kind kind, const char *why);
/* Writes data into dir/name through a unique temp file and rename(). */
nb_status nb_jit_write_atomic(const char *dir, const char *name, const void *data, size_t len);
/* Creates a unique temp file dir/.tmp-<key>-XXXXXX<suffix>, closed, path into buf. */
nb_status nb_jit_temp_file(const char *dir, const char *key, const char *suffix, char *buf,
                           size_t cap);
/* Appends the trailer to the finished artifact at tmp_path and renames it to final_path (if
 * final_path is NULL the trailer is appended and the file stays). */
nb_status nb_jit_entry_seal(const char *tmp_path, const char *final_path, const char *key,
                            nb_art_kind kind);
/* Writes image + trailer as dir/<key>.<ext> atomically. */
nb_status nb_jit_entry_write(const char *dir, const char *key, nb_art_kind kind, const void *image,
                             size_t size);
/* A fresh private directory (mode 0700) under $TMPDIR or /tmp, for uncached compiles. */
nb_status nb_jit_private_dir(char *buf, size_t cap);
/* Removes every file in dir, then dir itself (not recursive). */
void nb_jit_remove_tree(const char *dir);
/* A compile's private work directory in the cache directory, dir/.tmp-<key>-XXXXXX (path into
 * buf), held locked (flock) through *lock_fd until nb_jit_workdir_close, so that a cache clear
 * in any process leaves it and its files alone. Finished files are moved into the cache with
 * nb_jit_publish. */
nb_status nb_jit_workdir_open(const char *dir, const char *key, char *buf, size_t cap,
                              int *lock_fd);
/* Removes the work directory and its files, then releases its lock. */
void nb_jit_workdir_close(const char *path, int lock_fd);
/* rename(from, dir/name): one atomic step, the entry appears complete or not at all. */
nb_status nb_jit_publish(const char *from, const char *dir, const char *name);
void nb_kernel_cache_forget(void); /* re-arms the once-per-process warnings */

/* ---- the system C compiler (cc.c) ---- */

/* Identity of the compiler and its fixed flags for the cache key ($CC, first line of
 * `$CC --version`, flags, $NABLA_CFLAGS). Memoised; NB_ERR_UNSUPPORTED without a compiler. */
nb_status nb_cc_identity(const char **identity);
/* Compiles src_path into the shared object out_path. NB_ERR_COMPILE with the compiler's output. */
nb_status nb_cc_compile(const char *src_path, const char *out_path, const char *const *cflags,
                        const char *name);
void nb_cc_forget(void);

#endif

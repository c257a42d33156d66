/* The JIT layer: a kernel's source string in, something callable out, with an on-disk cache.
 *
 *   nb_jit_kernel *k;
 *   nb_jit_load(dev, c_source, "nb_call_add", NULL, &k);   // compile or fetch from the cache
 *   nb_jit_launch_cpu(k, params, n);                        // run [0, n) on the thread pool
 *
 * Target follows the device: the CPU compiles C with the system compiler into a shared object
 * and dlopens it; CUDA compiles CUDA C with NVRTC (nb_cuda_compile) and loads the cubin/PTX.
 *
 * Entry ABI (lang/callsig.h):
 *   CPU:  void ENTRY(const void *params, int64_t begin, int64_t end)     runs indices [begin, end)
 *   CUDA: extern "C" __global__ void ENTRY(PARAMS_STRUCT params)          the block by value
 *
 * Two cache levels:
 *   memory  (source, entry, options, device) -> handle. A repeated nb_jit_load is one hash of
 *           the source, a table probe and a compare: no file system, no compiler.
 *   disk    $NABLA_CACHE_DIR, else ~/.cache/nabla, else /tmp/nabla-cache-$UID. One file per
 *           entry, `<key>.so` (CPU) or `<key>.cubin` / `<key>.ptx` (CUDA), plus the source beside
 *           it (`<key>.c` / `<key>.cu`) for humans. The key (32 hex digits) hashes the source,
 *           target, flags, compiler identity and version (CPU: $CC, the first line of
 *           `$CC --version`, uname's OS and machine; CUDA: NVRTC version and the GPU
 *           architecture) and nb_version(). The entry name is not in it: one artifact serves
 *           every entry of a source. A failed compile leaves `<key>.c` for inspection.
 *
 * Integrity: every artifact ends with a 72-byte trailer (magic, key, image size, image hash,
 * trailer hash; dlopen ignores bytes past the ELF contents, the CUDA loader is given the image
 * without it), written into a temp file in the cache directory and rename()d into place, so
 * the entry appears complete or not at all — one file, one atomic rename, no sidecar that could
 * disagree with it. Loading reads the file and checks the trailer and the image hash before
 * dlopen / cuModuleLoadData. An entry that fails any check (or fails to load) is deleted,
 * logged at warn and rebuilt — never trusted. No fsync: a file torn by a crash fails the check.
 * Concurrent processes compiling the same key each write their own temp file; the last rename
 * wins and both files are complete.
 *
 * Compiles and `nabla cache clear` in other processes: a CPU compile works in its own directory
 * `.tmp-<key>-XXXXXX` in the cache directory, which its process holds locked (flock) from
 * creation to removal; it writes the source there, compiles, appends the trailer, dlopens the
 * object from there and only then publishes `<key>.c` and `<key>.so` by rename. Clear removes a
 * work directory only if it can take its lock without waiting (the compile is over or its
 * process died), loose temp files only when older than 10 minutes, and never waits on anything:
 * so a clear never makes a compile fail, and a compile never makes a clear hang. A published
 * entry may be deleted at any moment: a loaded object stays mapped, and a load that finds the
 * entry gone between verifying and dlopen just compiles it again. CUDA images are compiled in
 * memory and only written to the cache. An entry that is not a regular file (a FIFO, a
 * directory, a device) is never opened for a blocking read: it is discarded and rebuilt.
 *
 * CPU compile command (no shell; $CC is split on blanks, so CC="ccache gcc" works):
 *   $CC -O2 -std=c99 -fPIC -shared -ffp-contract=off -fno-math-errno $NABLA_CFLAGS <opts.cflags>
 *       -o <tmp>.so <tmp>.c -lm
 * -O2 and no -march=native: artifacts stay portable across machines sharing a cache.
 * -ffp-contract=off: no FMA contraction, so CPU results are IEEE-exact per operation and the
 * same with gcc and clang (the CPU is the oracle the GPU is compared against, with tolerances).
 * -fno-math-errno changes no result, only lets sqrt etc. inline. $CC, $NABLA_CFLAGS and the
 * compiler identity are read once per process (nb_jit_forget_all() rereads them).
 *
 * Unwritable cache directory: a warning (once per process) and the kernel is compiled in a
 * private temporary directory (mode 0700) that is removed right after loading — the program
 * works, nothing is cached. Entries already in a read-only cache directory are still used.
 * The /tmp fallback directory is used only if it is ours (owner = euid, not group/world
 * writable, not a symlink); otherwise it counts as unwritable.
 *
 * Thread safety: every function may be called from any thread. Two threads loading the same new
 * kernel compile it once (the second waits). Handles live until nb_jit_forget_all(); a CUDA
 * handle keeps its device open (a reference from nb_device_open) for as long.
 */
#ifndef NB_JIT_H
#define NB_JIT_H

#include <stddef.h>
#include <stdint.h>

#include "nabla/cache.h"
#include "nabla/device.h"
#include "nabla/status.h"

typedef struct nb_jit_kernel nb_jit_kernel;

typedef struct nb_jit_options {
    const char *name;               /* for messages and logs ("square.nb:add"); NULL: the entry */
    const char *const *cflags;      /* CPU: extra compiler flags, NULL-terminated (part of the key) */
    const char *const *nvrtc_opts;  /* CUDA: extra NVRTC options, NULL-terminated (part of the key) */
    int no_disk_cache;              /* compile privately; neither read nor write the disk cache */
    const nb_cuda_headers *headers; /* CUDA: files the source may #include by name (part of the
                                     * key, texts included); NULL: none */
} nb_jit_options;

/* The CPU entry point's type. */
typedef void (*nb_jit_cpu_fn)(const void *params, int64_t begin, int64_t end);

/* Compiles (or finds) `source` for dev (NULL = the CPU) and resolves `entry` in it. opts may be
 * NULL. Errors: NB_ERR_COMPILE with the compiler's output; NB_ERR_NOT_FOUND if the entry is
 * missing; NB_ERR_UNSUPPORTED without a C compiler / NVRTC; NB_ERR_IO for file trouble. */
nb_status nb_jit_load(nb_device *dev, const char *source, const char *entry,
                      const nb_jit_options *opts, nb_jit_kernel **out);

nb_device_kind nb_jit_kernel_kind(const nb_jit_kernel *k);
nb_jit_cpu_fn nb_jit_kernel_cpu_fn(const nb_jit_kernel *k);          /* NULL for CUDA */
nb_cuda_function *nb_jit_kernel_cuda_fn(const nb_jit_kernel *k);     /* NULL for the CPU */
/* The disk-cache key (32 hex digits) the kernel was built under. */
const char *nb_jit_kernel_key(const nb_jit_kernel *k);

/* Default number of indices per CPU chunk: calls up to this size run inline on the caller. */
#define NB_JIT_CPU_GRAIN 4096

/* Runs indices [0, n) on the global thread pool, in chunks of at least NB_JIT_CPU_GRAIN (or
 * `grain`) indices; a call with n <= grain runs inline without waking a worker. n == 0 is a
 * no-op, n < 0 an error. */
nb_status nb_jit_launch_cpu(nb_jit_kernel *k, const void *params, int64_t n);
nb_status nb_jit_launch_cpu_grain(nb_jit_kernel *k, const void *params, int64_t n, int64_t grain);

/* Block size of nb_jit_launch_cuda, and its cap on blocks per SM for the grid-stride loop. */
#define NB_JIT_CUDA_BLOCK 256
#define NB_JIT_CUDA_BLOCKS_PER_SM 32

/* Launches a grid-stride kernel over n indices on stream s (NULL = the device's main stream):
 * ceil(n / 256) blocks of 256 threads, at most SMs x 32 blocks. The parameter block (params_size
 * bytes, <= 4 KiB) is the entry's single by-value argument. Asynchronous; n == 0 is a no-op. */
/* The same with at most blocks_per_sm blocks per SM (0: NB_JIT_CUDA_BLOCKS_PER_SM). */
nb_status nb_jit_launch_cuda_n(nb_jit_kernel *k, const void *params, size_t params_size, int64_t n, int blocks_per_sm,
                               nb_stream *s);
nb_status nb_jit_launch_cuda(nb_jit_kernel *k, const void *params, size_t params_size, int64_t n,
                             nb_stream *s);
/* [numthreads] kernels: ngroups thread groups of group_size threads, one block per group (at
 * most SMs x 32 blocks, striding over the groups). */
nb_status nb_jit_launch_cuda_groups(nb_jit_kernel *k, const void *params, size_t params_size, int64_t ngroups,
                                    int group_size, nb_stream *s);
/* Explicit grid, for [Kernel] functions. */
nb_status nb_jit_launch_cuda_grid(nb_jit_kernel *k, const void *params, size_t params_size,
                                  const unsigned grid[3], const unsigned block[3], nb_stream *s);

/* ---- the disk cache: public, in include/nabla/cache.h (nb_kernel_cache_*) ------------- */

/* ---- statistics and testing ------------------------------------------------------------- */

typedef struct nb_jit_stats_t {
    uint64_t compiles;        /* compiler runs that produced an artifact */
    uint64_t compile_errors;  /* compiler runs that failed */
    uint64_t disk_hits;       /* loads served from the disk cache */
    uint64_t memory_hits;     /* nb_jit_load calls answered from the in-process table */
    uint64_t corrupt_entries; /* disk entries that failed verification or loading and were rebuilt */
    uint64_t uncached;        /* compiles done in a private dir (unwritable cache, no_disk_cache) */
    double compile_seconds;   /* wall time spent in the compilers */
} nb_jit_stats_t;

void nb_jit_stats(nb_jit_stats_t *out);
void nb_jit_stats_reset(void);

/* Unloads every kernel (dlclose, module unload, device references dropped) and empties the
 * in-process table; rereads $CC / $NABLA_CFLAGS and the compiler identity on the next load.
 * For tests and shutdown: no handle may be used afterwards, and no load may run concurrently. */
void nb_jit_forget_all(void);

#endif

/* Hand-written CUDA kernels as real files: the one loader.
 *
 * Every .cu and .cuh file in a kernels/ folder under src/ is embedded into the library at build time by
 * tools/embed_cu.py (the generated table src/jit/cuda_files_data.c; tests/test_cuda_files.c fails
 * when a copy differs from its file), so nothing is read from disk at run time and nvcc is never
 * needed. A kernel is loaded by its path and entry:
 *
 *   const char *defs[] = {"BM=64", "BF16=1", NULL};      // -D options, part of the cache key
 *   nb_jit_kernel *k;
 *   nb_jit_cuda_kernel(dev, "src/nn/conv/kernels/igemm.cu", defs, "nb_conv_igemm", &k);
 *
 * Includes: `#include "name"` inside a kernel file names another embedded file, either relative
 * to the including file's directory ("common.cuh") or as a path under src/
 * ("graph/kernels/bf16.cuh"). The loader finds every file the .cu reaches and hands them to
 * NVRTC as its headers (includeNames: the name as written), so kernels share device code
 * through #include instead of copies. `#include <...>` is left to NVRTC (toolkit headers).
 *
 * Errors name the real file and line: NVRTC's `name(12): error: ...` becomes
 * `src/nn/conv/kernels/igemm.cu:12: error: ...` (headers too), and an include the table does not
 * hold is reported at its #include line. Compiled images are cached like every JIT kernel (memory
 * and disk; the key covers the .cu text, the defines and the text of every included file).
 */
#ifndef NB_JIT_CUDA_FILES_H
#define NB_JIT_CUDA_FILES_H

#include "core/strbuf.h"
#include "jit/jit.h"
#include "nabla/device.h"
#include "nabla/status.h"

/* One embedded file: path from the repository root ("src/nn/conv/kernels/igemm.cu"), text. */
typedef struct nb_cuda_file {
    const char *path;
    const char *text;
} nb_cuda_file;

/* The generated table, ended by {NULL, NULL}. */
extern const nb_cuda_file nb_cuda_files[];

/* Text of an embedded file, or NULL. */
const char *nb_cuda_file_text(const char *path);

#define NB_CUDA_MAX_INCLUDES 32 /* distinct files one .cu may reach through #include */
#define NB_CUDA_MAX_DEFINES 48
#define NB_CUDA_DEFINE_CHARS 8192 /* all -D options of one program together */

/* A .cu file ready for NVRTC: its text, program name (its path), the headers it reaches and
 * the -D options of the defines. Filled by nb_cuda_program_prepare; holds pointers into the table
 * and into itself (do not copy it while in use). */
typedef struct nb_cuda_program {
    const char *path;
    const char *source;
    int n_headers;
    const char *names[NB_CUDA_MAX_INCLUDES]; /* as written in the #include */
    const char *texts[NB_CUDA_MAX_INCLUDES];
    const char *paths[NB_CUDA_MAX_INCLUDES]; /* the file each name resolved to */
    char name_buf[NB_CUDA_MAX_INCLUDES][128];
    nb_cuda_headers headers;                  /* n_headers, names, texts */
    const char *opts[NB_CUDA_MAX_DEFINES + 1]; /* "-DNAME=VALUE" ..., NULL */
    char opt_buf[NB_CUDA_DEFINE_CHARS];        /* the options' text, one after another */
} nb_cuda_program;

/* Resolves `path` and its includes in `table` (NULL: the embedded table) and turns each define
 * "NAME" or "NAME=VALUE" (NULL-terminated list, or NULL) into an option. Errors: NB_ERR_NOT_FOUND
 * for an unknown path; NB_ERR_COMPILE `file:line: error: ...` for an include that is missing,
 * ambiguous or past NB_CUDA_MAX_INCLUDES; NB_ERR_INVALID_ARG for a bad define. */
nb_status nb_cuda_program_prepare(const nb_cuda_file *table, const char *path,
                                  const char *const *defines, nb_cuda_program *out);

/* Appends an NVRTC log to out with each `name(line): ` at the start of a line written
 * `path:line: `, for the program and every header of p. */
void nb_cuda_log_rewrite(const nb_cuda_program *p, const char *log, nb_strbuf *out);

/* THE loader of hand-written kernels: compiles (or finds in the memory / disk cache) the embedded
 * file `path` with `defines` for dev and resolves `entry`. On a compile error the message names
 * the file and line. */
nb_status nb_jit_cuda_kernel(nb_device *dev, const char *path, const char *const *defines,
                             const char *entry, nb_jit_kernel **out);

#endif

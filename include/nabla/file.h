/* Files nabla reads and writes (public, so that the CLI and bindings write their outputs the same
 * way). Every reader opens through nb_file_open_read (a FIFO, a device or a directory is refused
 * without blocking), every writer through nb_file_atomic_* (a temporary file in the same directory, fsync, rename, fsync of the directory), so a process
 * killed at any point leaves either the previous file or the new one, never half of either. */
#ifndef NABLA_FILE_H
#define NABLA_FILE_H

#include <stddef.h>
#include <stdio.h>

#include "nabla/status.h"

/* Opens `path` for reading as a stdio stream. Refuses anything but a regular file (NB_ERR_IO,
 * naming `what` and the path), and never blocks in open() on a FIFO. NB_ERR_NOT_FOUND when the
 * file does not exist. */
nb_status nb_file_open_read(const char *path, const char *what, FILE **out);

/* Reads a whole regular file into a fresh nb_alloc'ed buffer (NUL-terminated; *len excludes the
 * NUL). Files larger than max_bytes are refused. Free with nb_free(*data, *len + 1). */
nb_status nb_file_read_all(const char *path, const char *what, size_t max_bytes, char **data,
                           size_t *len);

/* An atomic replacement of `path` in progress. */
typedef struct nb_file_atomic {
    FILE *f;    /* write here */
    char *tmp;  /* the temporary file beside path */
    char *path; /* the final name */
} nb_file_atomic;

/* Creates a unique temporary file in path's directory (mode 0644 less the umask). Errors name
 * the path and the cause, e.g. a missing directory. */
nb_status nb_file_atomic_open(nb_file_atomic *af, const char *path, const char *what);
/* Flushes, fsyncs, closes and renames over the final path, then fsyncs the directory. On any
 * failure the temporary is removed and the previous file (if any) is left untouched. Always
 * releases af. */
nb_status nb_file_atomic_commit(nb_file_atomic *af);
/* Closes and removes the temporary; the previous file is untouched. Safe on a zeroed af. */
void nb_file_atomic_abort(nb_file_atomic *af);
/* Writes `len` bytes atomically to path (open + fwrite + commit). */
nb_status nb_file_write_atomic(const char *path, const char *what, const void *data, size_t len);

/* Checks, before long work, that a file can be created at `path`: its directory exists, is a
 * directory and is writable. The error names the directory. */
nb_status nb_file_check_writable(const char *path, const char *what);

#endif

/* Safe file reading (regular files only, no blocking on FIFOs) and atomic file replacement. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nabla/file.h"
#include "core/util.h"
#include "nabla/alloc.h"

/* Opens read-only without blocking (O_NONBLOCK: a FIFO with no writer would block open()),
 * checks that it is a regular file, then clears O_NONBLOCK for ordinary reads. */
static nb_status open_regular(const char *path, const char *what, int *fd_out, size_t *size) {
    *fd_out = -1;
    if (!path || !path[0]) return nb_error(NB_ERR_INVALID_ARG, "%s: empty file name", what);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        return nb_error(e == ENOENT ? NB_ERR_NOT_FOUND : NB_ERR_IO, "%s '%s': cannot open: %s",
                        what, path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int isdir = S_ISDIR(st.st_mode);
        close(fd);
        return nb_error(NB_ERR_IO, "%s '%s': not a regular file%s", what, path,
                        isdir ? " (a directory)" : " (a FIFO, socket or device)");
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    *fd_out = fd;
    if (size) *size = (size_t)st.st_size;
    return NB_OK;
}

nb_status nb_file_open_read(const char *path, const char *what, FILE **out) {
    *out = NULL;
    int fd;
    nb_status s = open_regular(path, what ? what : "file", &fd, NULL);
    if (s) return s;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return nb_error(NB_ERR_IO, "%s '%s': cannot open: %s", what ? what : "file", path,
                        strerror(errno));
    }
    *out = f;
    return NB_OK;
}

nb_status nb_file_read_all(const char *path, const char *what, size_t max_bytes, char **data,
                           size_t *len) {
    *data = NULL;
    *len = 0;
    if (!what) what = "file";
    int fd;
    size_t n;
    nb_status s = open_regular(path, what, &fd, &n);
    if (s) return s;
    if (n > max_bytes) {
        close(fd);
        return nb_error(NB_ERR_IO, "%s '%s': %zu bytes is larger than the limit of %zu", what, path,
                        n, max_bytes);
    }
    char *b = nb_alloc(n + 1, 16);
    if (!b) {
        close(fd);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "%s '%s': out of host memory (%zu bytes)", what, path,
                        n);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, b + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            nb_free(b, n + 1);
            return nb_error(NB_ERR_IO, "%s '%s': read failed: %s", what, path, strerror(e));
        }
        if (r == 0) break; /* the file shrank while we read it */
        got += (size_t)r;
    }
    close(fd);
    b[got] = 0;
    if (got != n) {
        /* keep the allocation size consistent for nb_free(*data, *len + 1) */
        char *c = nb_alloc(got + 1, 16);
        if (!c) {
            nb_free(b, n + 1);
            return nb_error(NB_ERR_OUT_OF_MEMORY, "%s '%s': out of host memory", what, path);
        }
        memcpy(c, b, got + 1);
        nb_free(b, n + 1);
        b = c;
    }
    *data = b;
    *len = got;
    return NB_OK;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* The directory part of path ("." when there is none), malloc'ed. */
static char *dir_of(const char *path) {
    char *c = dup_str(path);
    if (!c) return NULL;
    char *d = dup_str(dirname(c));
    free(c);
    return d;
}

nb_status nb_file_check_writable(const char *path, const char *what) {
    if (!what) what = "output";
    if (!path || !path[0]) return nb_error(NB_ERR_INVALID_ARG, "%s: empty file name", what);
    char *dir = dir_of(path);
    if (!dir) return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    struct stat st;
    nb_status s = NB_OK;
    if (stat(dir, &st) != 0)
        s = nb_error(NB_ERR_IO, "%s '%s': directory '%s' does not exist", what, path, dir);
    else if (!S_ISDIR(st.st_mode))
        s = nb_error(NB_ERR_IO, "%s '%s': '%s' is not a directory", what, path, dir);
    else if (access(dir, W_OK | X_OK) != 0)
        s = nb_error(NB_ERR_IO, "%s '%s': directory '%s' is not writable: %s", what, path, dir,
                     strerror(errno));
    else if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        s = nb_error(NB_ERR_IO, "%s '%s': is a directory", what, path);
    free(dir);
    return s;
}

nb_status nb_file_atomic_open(nb_file_atomic *af, const char *path, const char *what) {
    memset(af, 0, sizeof *af);
    if (!what) what = "output";
    NB_TRY(nb_file_check_writable(path, what));
    size_t n = strlen(path) + 16;
    af->path = dup_str(path);
    af->tmp = malloc(n);
    if (!af->path || !af->tmp) {
        nb_file_atomic_abort(af);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    }
    /* ".name.tmpXXXXXX" would hide it; keep the name recognisable next to the target instead. */
    snprintf(af->tmp, n, "%s.tmpXXXXXX", path);
    int fd = mkstemp(af->tmp);
    if (fd < 0) {
        nb_status s = nb_error(NB_ERR_IO, "%s '%s': cannot create a temporary file: %s", what, path,
                               strerror(errno));
        free(af->tmp);
        af->tmp = NULL;
        nb_file_atomic_abort(af);
        return s;
    }
    /* mkstemp creates 0600; give the file the mode a plain fopen would have. */
    mode_t um = umask(0);
    umask(um);
    fchmod(fd, 0666 & ~um);
    af->f = fdopen(fd, "wb");
    if (!af->f) {
        close(fd);
        nb_status s = nb_error(NB_ERR_IO, "%s '%s': cannot open: %s", what, path, strerror(errno));
        nb_file_atomic_abort(af);
        return s;
    }
    return NB_OK;
}

void nb_file_atomic_abort(nb_file_atomic *af) {
    if (!af) return;
    if (af->f) fclose(af->f);
    if (af->tmp) unlink(af->tmp);
    free(af->tmp);
    free(af->path);
    memset(af, 0, sizeof *af);
}

nb_status nb_file_atomic_commit(nb_file_atomic *af) {
    if (!af || !af->f) return nb_error(NB_ERR_INVALID_ARG, "nb_file_atomic_commit: not open");
    int bad = fflush(af->f) != 0 || ferror(af->f);
    int e = errno;
    if (!bad && fsync(fileno(af->f)) != 0) bad = 1, e = errno;
    if (fclose(af->f) != 0 && !bad) bad = 1, e = errno;
    af->f = NULL;
    if (bad) {
        nb_status s = nb_error(NB_ERR_IO, "'%s': write failed: %s", af->path, strerror(e));
        nb_file_atomic_abort(af);
        return s;
    }
    if (rename(af->tmp, af->path) != 0) {
        nb_status s = nb_error(NB_ERR_IO, "'%s': cannot replace: %s", af->path, strerror(errno));
        nb_file_atomic_abort(af);
        return s;
    }
    /* Make the rename itself durable. */
    char *dir = dir_of(af->path);
    if (dir) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
        free(dir);
    }
    free(af->tmp);
    free(af->path);
    memset(af, 0, sizeof *af);
    return NB_OK;
}

nb_status nb_file_write_atomic(const char *path, const char *what, const void *data, size_t len) {
    nb_file_atomic af;
    NB_TRY(nb_file_atomic_open(&af, path, what));
    if (len && fwrite(data, 1, len, af.f) != len) {
        nb_status s = nb_error(NB_ERR_IO, "%s '%s': write failed: %s", what ? what : "output", path,
                               strerror(errno));
        nb_file_atomic_abort(&af);
        return s;
    }
    return nb_file_atomic_commit(&af);
}

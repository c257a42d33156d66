/* The on-disk kernel cache: where it is, how entries are written (temp file + rename) and how
 * they are verified (a trailer at the end of each artifact; see jit.h for the rules). */
#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nabla/file.h"
#include "core/hash.h"
#include "core/util.h"
#include "jit/jit.h"
#include "jit/jit_internal.h"
#include "nabla/alloc.h"
#include "nabla/env.h"
#include "nabla/log.h"

#define NB_TRAILER_MAGIC "nbjit\0\0\1"
#define NB_IMAGE_SEED 0x6e626a6974696d67ull /* "nbjitimg" */
#define NB_MAX_ARTIFACT ((uint64_t)1 << 30)
#define NB_TEMP_STALE_S 600 /* temp files younger than this may belong to a running compile */

/* Ends every artifact. Host byte order: a cache is shared only between machines of one kind. */
typedef struct nb_jit_trailer {
    char magic[8];
    char key[NB_JIT_KEY_LEN];
    uint64_t image_size;
    uint64_t image_hash;
    uint32_t kind;
    uint32_t version;
    uint64_t check; /* hash of the bytes above */
} nb_jit_trailer;
_Static_assert(sizeof(nb_jit_trailer) == 72, "trailer layout");

static atomic_int nb_warned_dir;

void nb_jit_path(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
} /* the "cache directory unusable" warning was given */

const char *nb_art_ext(nb_art_kind k) {
    return k == NB_ART_SO ? "so" : k == NB_ART_CUBIN ? "cubin" : "ptx";
}
const char *nb_art_src_ext(nb_art_kind k) { return k == NB_ART_SO ? "c" : "cu"; }

void nb_kernel_cache_forget(void) { atomic_store(&nb_warned_dir, 0); }

/* ---- the directory ---------------------------------------------------------------------- */

static int nb_fmt(char *buf, size_t cap, const char *fmt, const char *a, const char *b,
                  const char *c) {
    int n = snprintf(buf, cap, fmt, a, b, c);
    return n >= 0 && (size_t)n < cap;
}

/* is_tmp: the shared /tmp fallback, which must be checked for ownership before use. */
static nb_status nb_cache_resolve(char *buf, size_t cap, int *is_tmp) {
    *is_tmp = 0;
    const char *env = nb_env_get(NB_ENV_CACHE_DIR);
    const char *home = nb_env_get(NB_ENV_HOME);
    int ok;
    if (env) {
        ok = nb_fmt(buf, cap, "%s%s%s", env, "", "");
    } else if (home) {
        ok = nb_fmt(buf, cap, "%s%s%s", home, strcmp(home, "/") ? "/" : "", ".cache/nabla");
    } else {
        char uid[32];
        snprintf(uid, sizeof uid, "%lu", (unsigned long)geteuid());
        ok = nb_fmt(buf, cap, "%s%s%s", "/tmp/nabla-cache-", uid, "");
        *is_tmp = 1;
    }
    if (!ok || strlen(buf) >= NB_JIT_DIR_MAX)
        return nb_error(NB_ERR_INVALID_ARG, "the kernel cache directory's path is too long (%zu "
                        "bytes at most)", NB_MIN(cap, (size_t)NB_JIT_DIR_MAX) - 1);
    /* Trailing slashes would double up in entry paths. */
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/') buf[--n] = '\0';
    return NB_OK;
}

nb_status nb_kernel_cache_dir(char *buf, size_t cap) {
    if (!buf || cap == 0) return nb_error(NB_ERR_INVALID_ARG, "nb_kernel_cache_dir: no buffer");
    int is_tmp;
    return nb_cache_resolve(buf, cap, &is_tmp);
}

/* mkdir -p, intermediate directories with mode 0755. Returns 0 or an errno. */
static int nb_mkdir_p(const char *path) {
    char tmp[NB_JIT_PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof tmp) return ENAMETOOLONG;
    memcpy(tmp, path, n + 1);
    for (char *p = tmp + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return errno;
            *p = c;
            if (c == '\0') break;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0) return errno;
    return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

static void nb_warn_dir_once(const char *dir, const char *why) {
    if (atomic_exchange(&nb_warned_dir, 1)) return;
    NB_LOG_W("kernel cache directory %s is not usable (%s): compiling in a private temporary "
             "directory, nothing will be cached; set NABLA_CACHE_DIR to a writable directory",
             dir, why);
}

nb_status nb_kernel_cache_prepare(char *dir, size_t cap, int *exists, int *writable) {
    int is_tmp;
    *exists = *writable = 0;
    nb_status st = nb_cache_resolve(dir, cap, &is_tmp);
    if (st != NB_OK) return st;
    int err = nb_mkdir_p(dir);
    if (err) {
        nb_warn_dir_once(dir, strerror(err));
        return NB_OK;
    }
    if (is_tmp) {
        /* Anyone can create /tmp/nabla-cache-<uid> first and plant libraries in it. */
        struct stat st2;
        if (lstat(dir, &st2) != 0 || !S_ISDIR(st2.st_mode) || st2.st_uid != geteuid() ||
            (st2.st_mode & 022)) {
            nb_warn_dir_once(dir, "it is not a directory owned by this user and writable only by it");
            return NB_OK;
        }
    }
    *exists = 1;
    if (access(dir, W_OK | X_OK) != 0) {
        nb_warn_dir_once(dir, strerror(errno));
        return NB_OK;
    }
    *writable = 1;
    return NB_OK;
}

/* ---- entry files ------------------------------------------------------------------------ */

/* Reads a whole file into a fresh buffer. NB_ERR_NOT_FOUND if it does not exist; NB_ERR_IO for
 * anything but a regular file (a FIFO is refused without opening it for a blocking read). */
static nb_status nb_read_file(const char *path, unsigned char **buf, size_t *size, size_t *cap) {
    *buf = NULL;
    *size = *cap = 0;
    char *data;
    size_t len;
    nb_status st = nb_file_read_all(path, "kernel cache file", NB_MAX_ARTIFACT, &data, &len);
    if (st != NB_OK) return st;
    *buf = (unsigned char *)data;
    *size = len;
    *cap = len + 1;
    return NB_OK;
}

static uint64_t nb_trailer_check(const nb_jit_trailer *t) {
    return nb_hash64(t, offsetof(nb_jit_trailer, check), NB_IMAGE_SEED);
}

static void nb_trailer_make(nb_jit_trailer *t, const char *key, nb_art_kind kind,
                            const void *image, size_t size) {
    memset(t, 0, sizeof *t);
    memcpy(t->magic, NB_TRAILER_MAGIC, 8);
    memcpy(t->key, key, NB_JIT_KEY_LEN);
    t->image_size = size;
    t->image_hash = nb_hash64(image, size, NB_IMAGE_SEED);
    t->kind = (uint32_t)kind;
    t->version = 1;
    t->check = nb_trailer_check(t);
}

/* NULL if the file's bytes are a valid entry for key/kind, else why not. */
static const char *nb_verify(const unsigned char *buf, size_t size, const char *key,
                             nb_art_kind kind) {
    nb_jit_trailer t;
    if (size < sizeof t) return "truncated (no trailer)";
    memcpy(&t, buf + size - sizeof t, sizeof t);
    if (memcmp(t.magic, NB_TRAILER_MAGIC, 8) != 0) return "no trailer (bad magic)";
    if (t.check != nb_trailer_check(&t)) return "trailer checksum mismatch";
    if (memcmp(t.key, key, NB_JIT_KEY_LEN) != 0) return "trailer names another key";
    if (t.kind != (uint32_t)kind) return "trailer names another artifact kind";
    if (t.image_size != size - sizeof t) return "size mismatch (truncated or extended)";
    if (t.image_hash != nb_hash64(buf, (size_t)t.image_size, NB_IMAGE_SEED))
        return "content hash mismatch";
    return NULL;
}

static void nb_entry_path(char *buf, size_t cap, const char *dir, const char *key, const char *ext) {
    nb_jit_path(buf, cap, "%s/%.32s.%s", dir, key, ext);
}

void nb_jit_entry_discard(const char *dir, const char *key, nb_art_kind kind, const char *why) {
    char path[NB_JIT_PATH_MAX];
    nb_entry_path(path, sizeof path, dir, key, nb_art_ext(kind));
    NB_LOG_W("discarding corrupt kernel cache entry %s: %s; rebuilding it", path, why);
    if (unlink(path) != 0 && errno != ENOENT)
        NB_LOG_W("cannot delete %s: %s", path, strerror(errno));
    nb_jit_count(NB_JIT_C_CORRUPT, 1);
}

nb_status nb_jit_entry_read(const char *dir, const char *key, nb_art_kind kind, void **image,
                            size_t *size, size_t *cap) {
    char path[NB_JIT_PATH_MAX];
    nb_entry_path(path, sizeof path, dir, key, nb_art_ext(kind));
    unsigned char *buf;
    size_t n, bcap;
    nb_status st = nb_read_file(path, &buf, &n, &bcap);
    if (st == NB_ERR_NOT_FOUND) return st;
    if (st != NB_OK) {
        struct stat sb;
        if (lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) /* a FIFO, link, directory, ... */
            nb_jit_entry_discard(dir, key, kind, "not a regular file");
        else
            NB_LOG_W("kernel cache: %s; rebuilding", nb_last_error());
        return NB_ERR_NOT_FOUND;
    }
    const char *why = nb_verify(buf, n, key, kind);
    if (why) {
        nb_free(buf, bcap);
        nb_jit_entry_discard(dir, key, kind, why);
        return NB_ERR_NOT_FOUND;
    }
    size_t isize = n - sizeof(nb_jit_trailer);
    if (image) {
        *image = buf;
        *size = isize;
        *cap = bcap;
    } else {
        nb_free(buf, bcap);
        if (size) *size = isize;
    }
    return NB_OK;
}

static nb_status nb_write_all(int fd, const void *data, size_t len, const char *path) {
    const char *p = data;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return nb_error(NB_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        p += w;
        len -= (size_t)w;
    }
    return NB_OK;
}

nb_status nb_jit_temp_file(const char *dir, const char *key, const char *suffix, char *buf,
                           size_t cap) {
    int n = snprintf(buf, cap, "%s/.tmp-%.32s-XXXXXX%s", dir, key, suffix);
    if (n < 0 || (size_t)n >= cap) return nb_error(NB_ERR_IO, "cache path too long in %s", dir);
    int fd = mkstemps(buf, (int)strlen(suffix));
    if (fd < 0)
        return nb_error(NB_ERR_IO, "cannot create a temp file in %s: %s", dir, strerror(errno));
    fchmod(fd, 0644); /* mkstemp makes 0600; cache entries are as readable as the directory */
    close(fd);
    return NB_OK;
}

static nb_status nb_rename(const char *from, const char *to) {
    if (rename(from, to) == 0) return NB_OK;
    nb_status st = nb_error(NB_ERR_IO, "cannot rename %s to %s: %s", from, to, strerror(errno));
    unlink(from);
    return st;
}

nb_status nb_jit_write_atomic(const char *dir, const char *name, const void *data, size_t len) {
    char tmp[NB_JIT_PATH_MAX], final[NB_JIT_PATH_MAX];
    NB_TRY(nb_jit_temp_file(dir, name, "", tmp, sizeof tmp));
    nb_jit_path(final, sizeof final, "%s/%s", dir, name);
    int fd = open(tmp, O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0) {
        nb_status st = nb_error(NB_ERR_IO, "cannot open %s: %s", tmp, strerror(errno));
        unlink(tmp);
        return st;
    }
    nb_status st = nb_write_all(fd, data, len, tmp);
    if (close(fd) != 0 && st == NB_OK)
        st = nb_error(NB_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    if (st != NB_OK) {
        unlink(tmp);
        return st;
    }
    return nb_rename(tmp, final);
}

nb_status nb_jit_entry_seal(const char *tmp_path, const char *final_path, const char *key,
                            nb_art_kind kind) {
    unsigned char *buf;
    size_t n, cap;
    nb_status st = nb_read_file(tmp_path, &buf, &n, &cap);
    if (st == NB_ERR_NOT_FOUND)
        return nb_error(NB_ERR_IO, "the compiler wrote no output to %s", tmp_path);
    if (st != NB_OK) return st;
    if (n == 0) {
        nb_free(buf, cap);
        return nb_error(NB_ERR_IO, "the compiler wrote an empty %s", tmp_path);
    }
    nb_jit_trailer t;
    nb_trailer_make(&t, key, kind, buf, n);
    nb_free(buf, cap);
    int fd = open(tmp_path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) return nb_error(NB_ERR_IO, "cannot open %s: %s", tmp_path, strerror(errno));
    st = nb_write_all(fd, &t, sizeof t, tmp_path);
    if (close(fd) != 0 && st == NB_OK)
        st = nb_error(NB_ERR_IO, "cannot write %s: %s", tmp_path, strerror(errno));
    if (st != NB_OK || !final_path) return st;
    return nb_rename(tmp_path, final_path);
}

nb_status nb_jit_entry_write(const char *dir, const char *key, nb_art_kind kind, const void *image,
                             size_t size) {
    char tmp[NB_JIT_PATH_MAX], final[NB_JIT_PATH_MAX];
    NB_TRY(nb_jit_temp_file(dir, key, "", tmp, sizeof tmp));
    nb_entry_path(final, sizeof final, dir, key, nb_art_ext(kind));
    nb_jit_trailer t;
    nb_trailer_make(&t, key, kind, image, size);
    int fd = open(tmp, O_WRONLY | O_TRUNC | O_CLOEXEC);
    nb_status st = fd < 0 ? nb_error(NB_ERR_IO, "cannot open %s: %s", tmp, strerror(errno)) : NB_OK;
    if (st == NB_OK) st = nb_write_all(fd, image, size, tmp);
    if (st == NB_OK) st = nb_write_all(fd, &t, sizeof t, tmp);
    if (fd >= 0 && close(fd) != 0 && st == NB_OK)
        st = nb_error(NB_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    if (st != NB_OK) {
        unlink(tmp);
        return st;
    }
    return nb_rename(tmp, final);
}

nb_status nb_jit_private_dir(char *buf, size_t cap) {
    const char *tmp = nb_env_get(NB_ENV_TMPDIR);
    if (!tmp) tmp = "/tmp";
    int n = snprintf(buf, cap, "%s/nabla-jit-XXXXXX", tmp);
    if (n < 0 || (size_t)n >= cap || (size_t)n >= NB_JIT_DIR_MAX)
        return nb_error(NB_ERR_IO, "$TMPDIR's path is too long");
    if (!mkdtemp(buf))
        return nb_error(NB_ERR_IO, "cannot create a temporary directory in %s: %s", tmp,
                        strerror(errno));
    return NB_OK;
}

static size_t nb_remove_dir_files(const char *dir);
void nb_jit_remove_tree(const char *dir) { nb_remove_dir_files(dir); }

/* ---- compile work directories --------------------------------------------------------------
 * A compile into the cache works in its own directory dir/.tmp-<key>-XXXXXX, locked (flock,
 * exclusive) by the compiling process for as long as it exists. Clear removes such a directory
 * only when it can take the lock without waiting, i.e. when its compile is over or its process
 * died; so clear never touches a file a running compile reads or writes, and never waits. */

nb_status nb_jit_workdir_open(const char *dir, const char *key, char *buf, size_t cap,
                              int *lock_fd) {
    *lock_fd = -1;
    for (int attempt = 0; attempt < 8; attempt++) {
        int n = snprintf(buf, cap, "%s/.tmp-%.32s-XXXXXX", dir, key);
        if (n < 0 || (size_t)n >= cap) return nb_error(NB_ERR_IO, "cache path too long in %s", dir);
        if (!mkdtemp(buf))
            return nb_error(NB_ERR_IO, "cannot create a work directory in %s: %s", dir,
                            strerror(errno));
        chmod(buf, 0755); /* what it publishes is as readable as the cache directory */
        int fd = open(buf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            if (errno == ENOENT) continue; /* a clear took it before we locked it: again */
            return nb_error(NB_ERR_IO, "cannot open the work directory %s: %s", buf,
                            strerror(errno));
        }
        /* A clear holds the lock only while it deletes the (then empty) directory. */
        int locked = 0;
        for (int i = 0; i < 200 && !locked; i++) {
            if (flock(fd, LOCK_EX | LOCK_NB) == 0) locked = 1;
            else if (errno == EWOULDBLOCK || errno == EINTR) usleep(1000);
            else break;
        }
        if (!locked) {
            nb_status st = nb_error(NB_ERR_IO, "cannot lock the work directory %s: %s", buf,
                                    strerror(errno));
            close(fd);
            rmdir(buf);
            return st;
        }
        /* Locked: still the directory we made, not one a clear removed in between? */
        struct stat a, b;
        if (fstat(fd, &a) == 0 && lstat(buf, &b) == 0 && a.st_dev == b.st_dev &&
            a.st_ino == b.st_ino) {
            *lock_fd = fd;
            return NB_OK;
        }
        close(fd);
    }
    return nb_error(NB_ERR_IO, "cannot keep a work directory in %s: it is removed as soon as it "
                    "is made (a cache clear running in a loop?)", dir);
}

/* Removes the files in dir, then dir. Returns how many files went. */
static size_t nb_remove_dir_files(const char *dir) {
    size_t n = 0;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char path[NB_JIT_PATH_MAX];
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            nb_jit_path(path, sizeof path, "%s/%s", dir, e->d_name);
            n += unlink(path) == 0;
        }
        closedir(d);
    }
    rmdir(dir);
    return n;
}

void nb_jit_workdir_close(const char *path, int lock_fd) {
    nb_remove_dir_files(path); /* still locked: a clear skips it meanwhile */
    if (lock_fd >= 0) close(lock_fd);
}

nb_status nb_jit_publish(const char *from, const char *dir, const char *name) {
    char to[NB_JIT_PATH_MAX];
    nb_jit_path(to, sizeof to, "%s/%s", dir, name);
    return nb_rename(from, to);
}

/* ---- listing and clearing ---------------------------------------------------------------- */

static int nb_is_key(const char *s) {
    for (int i = 0; i < NB_JIT_KEY_LEN; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

/* Which of the cache's names this is: 1 artifact (kind set), 2 source, 3 temp file, 0 other. */
static int nb_classify(const char *name, nb_art_kind *kind) {
    size_t n = strlen(name);
    if (!strncmp(name, ".tmp-", 5) && n > 5 + NB_JIT_KEY_LEN && nb_is_key(name + 5)) return 3;
    if (n <= NB_JIT_KEY_LEN + 1 || !nb_is_key(name) || name[NB_JIT_KEY_LEN] != '.') return 0;
    const char *ext = name + NB_JIT_KEY_LEN + 1;
    for (int k = NB_ART_SO; k <= NB_ART_PTX; k++)
        if (!strcmp(ext, nb_art_ext((nb_art_kind)k))) {
            *kind = (nb_art_kind)k;
            return 1;
        }
    if (!strcmp(ext, "c") || !strcmp(ext, "cu")) return 2;
    return 0;
}

static int nb_cmp_str(const void *a, const void *b) { return strcmp(a, b); }

nb_status nb_kernel_cache_list(int (*fn)(const nb_kernel_cache_entry *e, void *user), void *user) {
    NB_CHECK_ARG(fn);
    char dir[NB_JIT_PATH_MAX];
    NB_TRY(nb_kernel_cache_dir(dir, sizeof dir));
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return NB_OK;
        return nb_error(NB_ERR_IO, "cannot read the kernel cache directory %s: %s", dir,
                        strerror(errno));
    }
    size_t count = 0, cap = 0;
    char (*names)[NB_JIT_KEY_LEN + 8] = NULL; /* "<key>.cubin" at most */
    nb_status st = NB_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        nb_art_kind kind;
        if (nb_classify(e->d_name, &kind) != 1) continue;
        if (count == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            void *nn = nb_alloc(ncap * sizeof *names, 16);
            if (!nn) {
                st = nb_error(NB_ERR_OUT_OF_MEMORY, "out of host memory listing %s", dir);
                break;
            }
            if (count) memcpy(nn, names, count * sizeof *names);
            nb_free(names, cap * sizeof *names);
            names = nn;
            cap = ncap;
        }
        nb_jit_path(names[count++], sizeof *names, "%s", e->d_name);
    }
    closedir(d);
    if (st == NB_OK && count) qsort(names, count, sizeof *names, nb_cmp_str);
    int stop = 0;
    for (size_t i = 0; i < count && st == NB_OK && !stop; i++) {
        nb_art_kind kind = NB_ART_SO;
        nb_classify(names[i], &kind);
        char path[NB_JIT_PATH_MAX], src[NB_JIT_PATH_MAX], key[NB_JIT_KEY_LEN + 1];
        memcpy(key, names[i], NB_JIT_KEY_LEN);
        key[NB_JIT_KEY_LEN] = '\0';
        nb_jit_path(path, sizeof path, "%s/%s", dir, names[i]);
        nb_entry_path(src, sizeof src, dir, key, nb_art_src_ext(kind));
        struct stat sb;
        if (stat(path, &sb) != 0) continue; /* deleted meanwhile */
        nb_kernel_cache_entry ent = {path, key, nb_art_ext(kind), (uint64_t)sb.st_size,
                                  (int64_t)sb.st_mtime, 0, access(src, F_OK) == 0};
        unsigned char *buf;
        size_t n, bcap;
        if (nb_read_file(path, &buf, &n, &bcap) == NB_OK) {
            ent.valid = nb_verify(buf, n, key, kind) == NULL;
            nb_free(buf, bcap);
        }
        stop = fn(&ent, user);
    }
    nb_free(names, cap * sizeof *names);
    return st;
}

nb_status nb_kernel_cache_clear(size_t *removed) {
    if (removed) *removed = 0;
    char dir[NB_JIT_PATH_MAX];
    NB_TRY(nb_kernel_cache_dir(dir, sizeof dir));
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return NB_OK;
        return nb_error(NB_ERR_IO, "cannot read the kernel cache directory %s: %s", dir,
                        strerror(errno));
    }
    nb_status st = NB_OK;
    time_t now = time(NULL);
    struct dirent *e;
    char path[NB_JIT_PATH_MAX];
    while ((e = readdir(d))) {
        nb_art_kind kind;
        int c = nb_classify(e->d_name, &kind);
        if (!c) continue;
        nb_jit_path(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (c == 3) {
            if (lstat(path, &sb) != 0) continue;
            if (S_ISDIR(sb.st_mode)) {
                /* A compile's work directory: removed only if no process holds its lock. */
                int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0) continue;
                if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
                    size_t n = nb_remove_dir_files(path);
                    if (removed) *removed += n;
                }
                close(fd);
                continue;
            }
            /* A young temp file may be a write in progress in another process: leave it. */
            if (now - sb.st_mtime < NB_TEMP_STALE_S) continue;
        }
        if (unlink(path) == 0) {
            if (removed) (*removed)++;
        } else if (errno != ENOENT && st == NB_OK) {
            st = nb_error(NB_ERR_IO, "cannot delete %s: %s", path, strerror(errno));
        }
    }
    closedir(d);
    return st;
}

/* The system C compiler, run with posix_spawnp (no shell: paths may hold spaces or quotes).
 *
 * $CC (default "cc") is split on blanks, so "ccache gcc" or "gcc -m64" work; quoting is not
 * interpreted. $NABLA_CFLAGS is split the same way. Both, the first line of `$CC --version` and
 * the host's OS and machine (uname) are read once per process and make up the compiler's
 * identity in the cache key.
 */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/strbuf.h"
#include "jit/jit_internal.h"
#include "nabla/alloc.h"
#include "nabla/env.h"
#include "nabla/log.h"

extern char **environ;

#define NB_CC_MAX_ARGS 256
#define NB_CC_LOG_MAX (256 * 1024) /* compiler output kept for messages (all of it, normally) */

/* Flags every kernel is compiled with; why each is there: see jit.h. */
static const char *const nb_cc_base_flags[] = {"-O2", "-std=c99", "-fPIC", "-shared",
                                               "-ffp-contract=off", "-fno-math-errno"};

static pthread_mutex_t nb_cc_lock = PTHREAD_MUTEX_INITIALIZER;
static int nb_cc_ready;
static char nb_cc_words[2048];            /* $CC then $NABLA_CFLAGS, NUL-separated */
static const char *nb_cc_argv[NB_CC_MAX_ARGS];
static int nb_cc_nargs;                   /* words of $CC */
static int nb_cc_nflags;                  /* words of $NABLA_CFLAGS after them */
static nb_strbuf nb_cc_id;

/* Splits s on blanks into the word buffer at *pos, appending to nb_cc_argv. */
static int nb_split(const char *s, size_t *pos, int *count) {
    int n = 0;
    while (s && *s) {
        while (*s == ' ' || *s == '\t' || *s == '\n') s++;
        if (!*s) break;
        size_t len = strcspn(s, " \t\n");
        if (*pos + len + 1 > sizeof nb_cc_words || nb_cc_nargs + nb_cc_nflags + n + 1 >= 64)
            return -1;
        memcpy(nb_cc_words + *pos, s, len);
        nb_cc_words[*pos + len] = '\0';
        nb_cc_argv[nb_cc_nargs + nb_cc_nflags + n++] = nb_cc_words + *pos;
        *pos += len + 1;
        s += len;
    }
    *count = n;
    return 0;
}

/* Runs argv, capturing stdout and stderr together into out (at most NB_CC_LOG_MAX bytes).
 * *exit_code: the exit status, or 128 + signal. NB_ERR_UNSUPPORTED if the program is missing. */
static nb_status nb_run(const char *const *argv, nb_strbuf *out, int *exit_code) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return nb_error(NB_ERR_IO, "cannot create a pipe for %s: %s", argv[0], strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    pid_t pid;
    int err = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (err) {
        close(fds[0]);
        return nb_error(err == ENOENT ? NB_ERR_UNSUPPORTED : NB_ERR_IO,
                        "cannot run the C compiler '%s': %s (set $CC to a C compiler)", argv[0],
                        strerror(err));
    }
    char buf[4096];
    for (;;) {
        ssize_t r = read(fds[0], buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        if (out->len < NB_CC_LOG_MAX) nb_strbuf_append_n(out, buf, (size_t)r); /* else drain */
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno == EINTR) continue;
        /* ECHILD: the host program reaps children itself (SIGCHLD ignored); the caller's
         * output checks still catch a failed compile. */
        status = 0;
        break;
    }
    *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return NB_OK;
}

/* Caller holds nb_cc_lock. */
static nb_status nb_cc_init_locked(void) {
    if (nb_cc_ready) return NB_OK;
    const char *cc = nb_env_get(NB_ENV_CC);
    if (!cc || !cc[strspn(cc, " \t\n")]) cc = "cc";
    size_t pos = 0;
    nb_cc_nargs = nb_cc_nflags = 0;
    int n = 0;
    if (nb_split(cc, &pos, &n) != 0) return nb_error(NB_ERR_INVALID_ARG, "$CC is too long");
    nb_cc_nargs = n;
    if (nb_split(nb_env_get(NB_ENV_CFLAGS), &pos, &n) != 0)
        return nb_error(NB_ERR_INVALID_ARG, "$NABLA_CFLAGS is too long");
    nb_cc_nflags = n;

    const char *argv[66];
    int a = 0;
    for (int i = 0; i < nb_cc_nargs; i++) argv[a++] = nb_cc_argv[i];
    argv[a++] = "--version";
    argv[a] = NULL;
    nb_strbuf out;
    nb_strbuf_init(&out);
    int code = 0;
    nb_status st = nb_run(argv, &out, &code);
    if (st == NB_OK && code != 0)
        st = nb_error(NB_ERR_UNSUPPORTED, "the C compiler '%s' does not work ('%s --version' "
                      "exited with %d): %s", cc, cc, code, nb_strbuf_cstr(&out));
    if (st != NB_OK) {
        nb_strbuf_free(&out);
        return st;
    }
    const char *text = nb_strbuf_cstr(&out);
    size_t line = strcspn(text, "\n");
    nb_strbuf_free(&nb_cc_id);
    nb_strbuf_init(&nb_cc_id);
    nb_strbuf_append(&nb_cc_id, "cc:");
    for (int i = 0; i < nb_cc_nargs; i++) nb_strbuf_printf(&nb_cc_id, " %s", nb_cc_argv[i]);
    /* `cc --version` rarely names the target, and one home directory may serve x86-64 and
     * arm64 machines: the host's system and machine go into the identity too. */
    struct utsname un;
    if (uname(&un) == 0) nb_strbuf_printf(&nb_cc_id, "\nhost: %s %s", un.sysname, un.machine);
    nb_strbuf_append(&nb_cc_id, "\nversion: ");
    nb_strbuf_append_n(&nb_cc_id, text, line);
    nb_strbuf_append(&nb_cc_id, "\nflags:");
    for (size_t i = 0; i < sizeof nb_cc_base_flags / sizeof *nb_cc_base_flags; i++)
        nb_strbuf_printf(&nb_cc_id, " %s", nb_cc_base_flags[i]);
    for (int i = 0; i < nb_cc_nflags; i++)
        nb_strbuf_printf(&nb_cc_id, " %s", nb_cc_argv[nb_cc_nargs + i]);
    nb_strbuf_free(&out);
    if (!nb_strbuf_ok(&nb_cc_id)) return nb_error(NB_ERR_OUT_OF_MEMORY, "out of host memory");
    NB_LOG_D("jit: C compiler identity:\n%s", nb_strbuf_cstr(&nb_cc_id));
    nb_cc_ready = 1;
    return NB_OK;
}

nb_status nb_cc_identity(const char **identity) {
    pthread_mutex_lock(&nb_cc_lock);
    nb_status st = nb_cc_init_locked();
    /* Stable once ready until nb_cc_forget, which must not run concurrently with loads. */
    *identity = st == NB_OK ? nb_strbuf_cstr(&nb_cc_id) : NULL;
    pthread_mutex_unlock(&nb_cc_lock);
    return st;
}

void nb_cc_forget(void) {
    pthread_mutex_lock(&nb_cc_lock);
    nb_cc_ready = 0;
    nb_strbuf_free(&nb_cc_id);
    nb_strbuf_init(&nb_cc_id);
    pthread_mutex_unlock(&nb_cc_lock);
}

nb_status nb_cc_compile(const char *src_path, const char *out_path, const char *const *cflags,
                        const char *name) {
    const char *argv[NB_CC_MAX_ARGS];
    int a = 0;
    pthread_mutex_lock(&nb_cc_lock);
    nb_status st = nb_cc_init_locked();
    if (st == NB_OK) {
        for (int i = 0; i < nb_cc_nargs; i++) argv[a++] = nb_cc_argv[i];
        for (size_t i = 0; i < sizeof nb_cc_base_flags / sizeof *nb_cc_base_flags; i++)
            argv[a++] = nb_cc_base_flags[i];
        for (int i = 0; i < nb_cc_nflags; i++) argv[a++] = nb_cc_argv[nb_cc_nargs + i];
    }
    pthread_mutex_unlock(&nb_cc_lock);
    if (st != NB_OK) return st;
    for (int i = 0; cflags && cflags[i]; i++) {
        if (a >= NB_CC_MAX_ARGS - 6)
            return nb_error(NB_ERR_INVALID_ARG, "too many compiler flags for kernel '%s'", name);
        argv[a++] = cflags[i];
    }
    argv[a++] = "-o";
    argv[a++] = out_path;
    argv[a++] = src_path;
    argv[a++] = "-lm";
    argv[a] = NULL;

    nb_strbuf out;
    nb_strbuf_init(&out);
    int code = 0;
    st = nb_run(argv, &out, &code);
    if (st == NB_OK && code != 0) {
        nb_strbuf cmd;
        nb_strbuf_init(&cmd);
        for (int i = 0; argv[i]; i++) /* quoted where a shell would need it, for copy-paste */
            nb_strbuf_printf(&cmd, strpbrk(argv[i], " \t'\"$\\") ? "%s'%s'" : "%s%s",
                             i ? " " : "", argv[i]);
        const char *log = nb_strbuf_cstr(&out);
        size_t len = strlen(log);
        while (len > 0 && (log[len - 1] == '\n' || log[len - 1] == ' ')) len--;
        st = nb_error(NB_ERR_COMPILE, "C compiler failed on kernel '%s' (exit %d):\n%.*s\n"
                      "command: %s", name, code, (int)len, len ? log : "(no output)",
                      nb_strbuf_cstr(&cmd));
        nb_strbuf_free(&cmd);
    } else if (st == NB_OK && out.len > 0) {
        NB_LOG_D("jit: compiler output for '%s':\n%s", name, nb_strbuf_cstr(&out));
    }
    nb_strbuf_free(&out);
    return st;
}

/* Test helper: a FIFO in place of an input file must be refused at once, never block in open().
 *
 *   static nb_status read_it(const char *path) { nb_safetensors *f; return nb_safetensors_read(path, &f); }
 *   NB_EXPECT(nb_test_fifo_refused(path_in_a_temp_dir, read_it));
 *
 * The reader runs in a forked child under a 10 s alarm, so a regression fails the test instead of
 * hanging it. Passes when the reader returns NB_ERR_IO with a message that says "not a regular
 * file" and names the file. Also: nb_test_rm_rf for temporary directories. */
#ifndef NB_TEST_FIFO_H
#define NB_TEST_FIFO_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nabla/status.h"

static inline int nb_test_fifo_refused(const char *path, nb_status (*read_fn)(const char *path)) {
    unlink(path);
    if (mkfifo(path, 0600) != 0) {
        fprintf(stderr, "  cannot make a FIFO at %s\n", path);
        return 0;
    }
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10);
        nb_status s = read_fn(path);
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        int ok = s == NB_ERR_IO && strstr(nb_last_error(), "not a regular file") && strstr(nb_last_error(), base);
        if (!ok) fprintf(stderr, "  reading the FIFO %s: status %d, \"%s\"\n", path, (int)s, nb_last_error());
        _exit(ok ? 0 : 1);
    }
    int st = 0;
    if (pid > 0) waitpid(pid, &st, 0);
    unlink(path);
    if (pid > 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
        fprintf(stderr, "  reading the FIFO %s blocked (killed after 10 s)\n", path);
    return pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static inline void nb_test_rm_rf(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", dir);
}

#endif

/* `nabla cache dir|ls|clear`: show, list and empty the on-disk kernel cache. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "nabla/nabla.h"

static void cache_usage(FILE *to) {
    fprintf(to,
            "usage: nabla cache dir|ls|clear\n"
            "\n"
            "  dir    print the kernel cache directory ($NABLA_CACHE_DIR, else ~/.cache/nabla)\n"
            "  ls     list the cached kernels: key, kind, size, date, whether the entry checks out\n"
            "  clear  delete the cached kernels (only the cache's own files; compiles running\n"
            "         in other processes are left alone and keep working)\n");
}

typedef struct ls_state {
    size_t count, bad;
    unsigned long long bytes;
} ls_state;

static int ls_one(const nb_kernel_cache_entry *e, void *user) {
    ls_state *s = user;
    char when[32] = "?";
    time_t t = (time_t)e->mtime;
    struct tm tm;
    if (localtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    printf("%s  %-5s %10llu  %s  %s%s\n", e->key, e->kind, (unsigned long long)e->file_size, when,
           e->valid ? "ok" : "CORRUPT", e->has_source ? "" : " (no source)");
    s->count++;
    s->bad += !e->valid;
    s->bytes += e->file_size;
    return 0;
}

int nb_cmd_cache(int argc, char **argv) {
    if (argc < 1) {
        fprintf(stderr, "nabla: cache: missing sub-command (dir, ls or clear)\n\n");
        cache_usage(stderr);
        return 2;
    }
    const char *sub = argv[0];
    if (!strcmp(sub, "-h") || !strcmp(sub, "--help")) {
        cache_usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            cache_usage(stdout);
            return 0;
        }
        return nb_cli_bad_usage("cache: unknown argument '%s'", argv[i]);
    }
    char dir[4096];
    if (nb_kernel_cache_dir(dir, sizeof dir) != NB_OK) {
        fprintf(stderr, "nabla: cache: %s\n", nb_last_error());
        return 1;
    }
    if (!strcmp(sub, "dir")) {
        printf("%s\n", dir);
        return 0;
    }
    if (!strcmp(sub, "ls")) {
        ls_state s = {0, 0, 0};
        if (nb_kernel_cache_list(ls_one, &s) != NB_OK) {
            fprintf(stderr, "nabla: cache: %s\n", nb_last_error());
            return 1;
        }
        printf("%zu kernel%s, %.1f KiB in %s", s.count, s.count == 1 ? "" : "s",
               (double)s.bytes / 1024.0, dir);
        if (s.bad) printf(" (%zu corrupt: they are rebuilt on next use)", s.bad);
        printf("\n");
        return 0;
    }
    if (!strcmp(sub, "clear")) {
        size_t removed = 0;
        if (nb_kernel_cache_clear(&removed) != NB_OK) {
            fprintf(stderr, "nabla: cache: %s\n", nb_last_error());
            return 1;
        }
        printf("removed %zu file%s from %s\n", removed, removed == 1 ? "" : "s", dir);
        return 0;
    }
    return nb_cli_bad_usage("cache: unknown sub-command '%s' (want dir, ls or clear)", sub);
}

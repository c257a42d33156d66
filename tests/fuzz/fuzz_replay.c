/* main() for replaying inputs through a harness without libFuzzer (the normal test suite, and
 * reproducing a finding under gdb): each argument is a file, or a directory whose files (not
 * subdirectories, not dotfiles) are fed in name order. A missing directory is skipped, so an empty
 * tests/fuzz/regressions/<name>/ need not exist. Exit 0 when every input ran; a bug aborts. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_common.h"

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return 1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "%s: out of memory\n", path);
        return 1;
    }
    fprintf(stderr, "replay %s (%zu bytes)\n", path, n);
    /* a copy of exactly n bytes, so reads past the end are caught under ASan */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) abort();
    if (n) memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    int bad = 0, count = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "(no %s: skipped)\n", argv[i]);
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            bad |= run_file(argv[i]), count++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) {
            fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
            bad = 1;
            continue;
        }
        char **names = NULL;
        size_t n = 0, cap = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.') continue;
            if (n == cap) {
                char **nn = realloc(names, (cap = cap ? 2 * cap : 64) * sizeof *names);
                if (!nn) abort();
                names = nn;
            }
            size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
            if (!(names[n] = malloc(len))) abort();
            snprintf(names[n++], len, "%s/%s", argv[i], e->d_name);
        }
        closedir(d);
        if (n) qsort(names, n, sizeof *names, cmp_name);
        for (size_t k = 0; k < n; k++) {
            if (stat(names[k], &st) == 0 && S_ISREG(st.st_mode)) bad |= run_file(names[k]), count++;
            free(names[k]);
        }
        free(names);
    }
    printf("%d inputs replayed%s\n", count, bad ? ", some unreadable" : "");
    return bad;
}

/* Scratch files for tests (test_image.c, test_image_codecs.c): names in a per-test temporary
 * directory, whole-file reads and writes. Header-only; each test defines nb_test_tmpdir. */
#ifndef NB_TEST_FILES_H
#define NB_TEST_FILES_H

#include <stdio.h>
#include <stdlib.h>

extern char nb_test_tmpdir[256];

/* nb_test_tmpdir/name (one of four rotating buffers: up to four names live at once). */
static inline const char *tmp(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) & 3;
    snprintf(buf[k], sizeof buf[k], "%s/%s", nb_test_tmpdir, name);
    return buf[k];
}

static inline int write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    size_t w = fwrite(data, 1, n, f);
    fclose(f);
    return w == n;
}

/* The whole file (malloc'ed, *n bytes) or NULL. */
static inline unsigned char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *d = len >= 0 ? malloc((size_t)len + 1) : NULL;
    *n = d ? fread(d, 1, (size_t)len, f) : 0;
    fclose(f);
    return d;
}

/* Removes nb_test_tmpdir and everything in it (end of a test's main). */
static inline void nb_test_tmpdir_remove(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", nb_test_tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", nb_test_tmpdir);
}

#endif

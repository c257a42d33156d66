/* Helpers shared by the harnesses: see fuzz_common.h. */
#include "fuzz_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[512];
static char g_path[640];
static nb_device *g_cpu;

static void remove_dir(void) {
    if (!g_dir[0]) return;
    static const char *const names[] = {"input.png", "input.safetensors", "train-images-idx3-ubyte",
                                        "train-images-idx3-ubyte.gz"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) nb_fuzz_remove_file(names[i]);
    rmdir(g_dir);
    g_dir[0] = '\0';
}

const char *nb_fuzz_dir(void) {
    if (g_dir[0]) return g_dir;
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/nabla-fuzz-XXXXXX", base);
    if (!mkdtemp(g_dir)) {
        perror("nb_fuzz_dir: mkdtemp");
        abort();
    }
    atexit(remove_dir);
    return g_dir;
}

const char *nb_fuzz_write_file(const char *name, const uint8_t *data, size_t size) {
    snprintf(g_path, sizeof g_path, "%s/%s", nb_fuzz_dir(), name);
    FILE *f = fopen(g_path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(g_path);
        abort();
    }
    return g_path;
}

void nb_fuzz_remove_file(const char *name) {
    char p[640];
    snprintf(p, sizeof p, "%s/%s", nb_fuzz_dir(), name);
    unlink(p);
}

nb_device *nb_fuzz_cpu(void) {
    if (!g_cpu && nb_device_open("cpu", &g_cpu) != NB_OK) nb_fuzz_fail("cannot open the CPU device", nb_last_error());
    return g_cpu;
}

char *nb_fuzz_cstr(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) abort();
    if (size) memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

void nb_fuzz_fail(const char *what, const char *detail) {
    fprintf(stderr, "fuzz harness: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

/* bench_copy: measured memory bandwidth of each device (the "bytes" half of every floor in
 * docs/PERF.md). Device-to-device copy counts bytes read + bytes written; H2D and D2H count the
 * bytes moved. Median of repeated runs, timed with device events after a warm-up.
 *
 *   ./build/bench/bench_copy [--device cuda] [--mib 1024] [--reps 20]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/nabla.h"

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

#define CHECK(expr)                                                                            \
    do {                                                                                       \
        if ((expr) != NB_OK) {                                                                 \
            fprintf(stderr, "bench_copy: %s: %s\n", #expr, nb_last_error());                  \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

int main(int argc, char **argv) {
    const char *spec = "auto";
    size_t mib = 1024;
    int reps = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) spec = argv[++i];
        else if (!strcmp(argv[i], "--mib") && i + 1 < argc) mib = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_copy [--device SPEC] [--mib N] [--reps N]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 10000 || mib < 1) {
        fprintf(stderr, "bench_copy: --reps must be 1..10000 and --mib >= 1\n");
        return 2;
    }
    size_t bytes = mib << 20;
    nb_device *dev;
    CHECK(nb_device_open(spec, &dev));
    nb_buffer *a, *b;
    CHECK(nb_buffer_alloc(dev, bytes, &a));
    CHECK(nb_buffer_alloc(dev, bytes, &b));
    char *host = malloc(bytes);
    if (!host) return 1;
    for (size_t i = 0; i < bytes; i++) host[i] = (char)(i * 131u);
    CHECK(nb_memcpy_h2d(dev, nb_buffer_ptr(a), host, bytes));
    nb_event *e0, *e1;
    CHECK(nb_event_create(dev, &e0));
    CHECK(nb_event_create(dev, &e1));
    float *ms = calloc((size_t)reps, sizeof(float));
    const char *names[3] = {"d2d", "h2d", "d2h"};
    printf("device %s (%s), %zu MiB, median of %d\n", nb_device_name(dev),
           nb_device_get_info(dev)->name, mib, reps);
    for (int kind = 0; kind < 3; kind++) {
        for (int r = -2; r < reps; r++) { /* two warm-ups */
            CHECK(nb_event_record(e0, NULL));
            if (kind == 0) CHECK(nb_memcpy_d2d(dev, nb_buffer_ptr(b), nb_buffer_ptr(a), bytes));
            if (kind == 1) CHECK(nb_memcpy_h2d(dev, nb_buffer_ptr(b), host, bytes));
            if (kind == 2) CHECK(nb_memcpy_d2h(dev, host, nb_buffer_ptr(a), bytes));
            CHECK(nb_event_record(e1, NULL));
            CHECK(nb_event_synchronize(e1));
            if (r >= 0) CHECK(nb_event_elapsed_ms(e0, e1, &ms[r]));
        }
        qsort(ms, (size_t)reps, sizeof(float), cmp_float);
        float med = ms[reps / 2];
        double moved = kind == 0 ? 2.0 * (double)bytes : (double)bytes;
        printf("  %s: %.3f ms  %.1f GB/s%s\n", names[kind], med, moved / (med * 1e-3) / 1e9,
               kind == 0 ? " (read + write)" : "");
    }
    free(ms);
    free(host);
    nb_event_destroy(e0);
    nb_event_destroy(e1);
    nb_buffer_release(a);
    nb_buffer_release(b);
    nb_device_close(dev);
    return 0;
}

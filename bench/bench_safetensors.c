/* bench_safetensors: header parsing cost of nb_safetensors_read with many tensors (a checkpoint
 * of a large model has tens of thousands of entries). Writes a file with N one-element F32
 * tensors (plus a little metadata), then times reading it (best of --reps) and one write.
 * Reading must stay near-linear in N: 100,000 entries in well under half a second.
 *
 *   ./build/bench/bench_safetensors [--entries 100000] [--reps 3] [--keep FILE]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nabla/nabla.h"
#include "nabla/safetensors.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    int n = 100000, reps = 3;
    const char *keep = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--entries") && i + 1 < argc) n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--keep") && i + 1 < argc) keep = argv[++i];
        else {
            fprintf(stderr, "usage: bench_safetensors [--entries N] [--reps R] [--keep FILE]\n");
            return 2;
        }
    }
    if (n < 1 || reps < 1) {
        fprintf(stderr, "bench_safetensors: --entries and --reps must be positive\n");
        return 2;
    }
    char path[256];
    if (keep) snprintf(path, sizeof path, "%s", keep);
    else snprintf(path, sizeof path, "/tmp/bench_safetensors_%ld.safetensors", (long)getpid());
    nb_st_tensor *ts = calloc((size_t)n, sizeof *ts);
    char *names = malloc((size_t)n * 40);
    float *vals = malloc((size_t)n * sizeof(float));
    if (!ts || !names || !vals) {
        fprintf(stderr, "bench_safetensors: out of memory\n");
        return 1;
    }
    for (int i = 0; i < n; i++) {
        snprintf(names + (size_t)i * 40, 40, "blocks.%d.layer.%d.weight", i / 16, i % 16);
        vals[i] = (float)i;
        ts[i] = (nb_st_tensor){names + (size_t)i * 40, 1, {1}, vals + i};
    }
    const char *keys[] = {"format"}, *mv[] = {"pt"};
    double t0 = now();
    if (nb_safetensors_write(path, n, ts, 1, keys, mv) != NB_OK) {
        fprintf(stderr, "bench_safetensors: write: %s\n", nb_last_error());
        return 1;
    }
    double tw = now() - t0, best = 1e30;
    for (int r = 0; r < reps; r++) {
        nb_safetensors *f;
        t0 = now();
        if (nb_safetensors_read(path, &f) != NB_OK) {
            fprintf(stderr, "bench_safetensors: read: %s\n", nb_last_error());
            return 1;
        }
        double t = now() - t0;
        if (t < best) best = t;
        int cnt = 0;
        const nb_st_tensor *last;
        nb_safetensors_count(f, &cnt);
        if (cnt != n || nb_safetensors_find(f, names + (size_t)(n - 1) * 40, &last) != NB_OK ||
            last->data[0] != (float)(n - 1)) {
            fprintf(stderr, "bench_safetensors: read back wrong contents\n");
            return 1;
        }
        nb_safetensors_free(f);
    }
    printf("safetensors %d entries: read %.3f s (best of %d), write %.3f s\n", n, best, reps, tw);
    if (!keep) remove(path);
    free(ts), free(names), free(vals);
    return 0;
}

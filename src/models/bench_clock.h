/* Timing helpers of the benchmarks in src/models (graph_bench.c, graph_chain_bench.c). */
#ifndef NB_MODELS_BENCH_CLOCK_H
#define NB_MODELS_BENCH_CLOCK_H

#include <stdlib.h>
#include <time.h>

/* A monotonic clock in milliseconds. */
static inline double nb_bench_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static inline int nb_bench_cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
/* The median of v[0..n) (n >= 1; sorts v). */
static inline double nb_bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, nb_bench_cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif

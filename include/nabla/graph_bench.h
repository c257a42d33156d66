/* The course's computational-graph benchmark (issue #17, Benchmark 1; `nabla graph bench`,
 * src/models/graph_bench.c; the PyTorch side is bench/torch/ref_graph.py).
 *
 * A graph of depth D at size S: D - 2 operators, each Linear (x [S,S] -> x w^T + b, w [S,S],
 * b [S]) or ReLU, chosen by a seed-derived coin per operator, then ReLU and a softmax over the
 * last dim; f32. One run = upload the input x [S,S] (batch = S rows), run the ops forward, read
 * the output [S,S] back to the host (the course's HostToDevice ... DeviceToHost). Two sweeps:
 * sizes at one depth (default 64 at 32 ... 4096) and depths at one size (256 at 2 ... 1024),
 * each point the median of `samples` runs after one warm-up run.
 *
 * Rows (the same graph each):
 *   cpu               a CPU tape, parameters resident (rows on the CPU skip graphs above
 *                     cpu_max_gflop)
 *   immediate         a fresh CUDA tape per run: created, parameters registered and uploaded,
 *                     kernels looked up again, the ops, the read (everything each time)
 *   immediate_cached  one CUDA tape kept across runs (nb_tape_reset): parameters resident,
 *                     kernel handles kept; the input upload, the ops, the read
 *   recorded          the ops recorded once (nb_graph_record_begin / _end on a kept tape),
 *                     each run: nb_graph_set_input, nb_graph_run (one CUDA graph from its third
 *                     run), nb_graph_read of the output
 *   compiled          the recorded graph after nb_graph_compile (every pass: dead / duplicate
 *                     nodes, folding, linear -> relu epilogues, fused elementwise chains), run
 *                     as recorded
 *   compiled_replay   the same graph run `replay` times between one input set and one read
 *                     (the time divided by replay: the course's "graph loop")
 * The graph rows run on the bench's device (CPU with --device cpu).
 * Every row's output is checked: softmax rows summing to 1, and equal to the first row's output
 * (1e-4; 2e-2 with TF32 GEMMs) — a wrong row is an error, not a timing.
 * The GEMM floor of a point: its FLOPs (2 S^3 per linear) over the cuBLAS peak measured on the
 * device (a 4096^3 GEMM in the tape's precision); the floor no row can beat. */
#ifndef NABLA_GRAPH_BENCH_H
#define NABLA_GRAPH_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "nabla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum nb_graph_bench_row {
    NB_GB_CPU = 0,
    NB_GB_IMMEDIATE,
    NB_GB_IMMEDIATE_CACHED,
    NB_GB_RECORDED,
    NB_GB_COMPILED,
    NB_GB_COMPILED_REPLAY,
    NB_GB_ROWS
};
/* "cpu", "immediate", ... (the table's column names); NULL for an unknown row. */
const char *nb_graph_bench_row_name(int row);

#define NB_GB_MAX_POINTS 32
typedef struct nb_graph_bench_opts {
    const char *device;       /* "cuda", "cuda:1" or "cpu" (then the cpu and graph rows) */
    int64_t sizes[NB_GB_MAX_POINTS];
    int n_sizes;              /* the size sweep (0: none) */
    int64_t depths[NB_GB_MAX_POINTS];
    int n_depths;             /* the depth sweep (0: none) */
    int64_t depth;            /* the size sweep's depth (>= 2) */
    int64_t size;             /* the depth sweep's size */
    int samples;              /* runs per point and row (>= 1) */
    int replay;               /* the compiled_replay row's N (runs per replay call) */
    int precision;            /* nb_tape_precision of the GEMMs (FP32: torch's f32 default) */
    uint64_t seed;            /* structure and values */
    double cpu_max_gflop;     /* the cpu row skips points of more GFLOP (<= 0: no limit) */
} nb_graph_bench_opts;
/* The defaults: cuda, sizes 32..4096 (powers of 2) at depth 64, depths 2..1024 at size
 * 256, 10 samples, replay 10, FP32, seed 17, cpu_max_gflop 10. */
void nb_graph_bench_defaults(nb_graph_bench_opts *o);

typedef struct nb_graph_bench_point {
    int sweep;                /* 0: the size sweep, 1: the depth sweep */
    int64_t size, depth, linears;
    double gflop;             /* 2 S^3 linears / 1e9 */
    double floor_ms;          /* GEMM floor; NAN without a measured peak (CPU) */
    double ms[NB_GB_ROWS];    /* median ms per run; NAN: not run */
} nb_graph_bench_point;

typedef struct nb_graph_bench_result {
    int n_points;
    nb_graph_bench_point points[2 * NB_GB_MAX_POINTS];
    double peak_tflops;       /* measured cuBLAS peak (NAN on the CPU) */
    char device[300];         /* what ran it */
    int precision, samples;
} nb_graph_bench_result;

/* The structure of a graph: ops[i] = 0 (linear) or 1 (relu) for i < depth - 2, then 1 (relu)
 * and 2 (softmax); a pure function of (seed, size, depth) that ref_graph.py computes the same
 * way (splitmix64). Returns the number of linears, or -1 (nb_error) when depth < 2. */
int64_t nb_graph_bench_structure(uint64_t seed, int64_t size, int64_t depth, int *ops);

/* Runs both sweeps (progress lines to `progress`, may be NULL). */
nb_status nb_graph_bench_run(const nb_graph_bench_opts *o, nb_graph_bench_result *r,
                             FILE *progress);
/* The table: a header of comment lines ('#') then one line per point, columns
 *   sweep size depth linears gflop floor_ms <one per row: median ms or ->
 * (bench/torch/ref_graph.py prints the same columns with its own rows). */
void nb_graph_bench_print(const nb_graph_bench_result *r, FILE *f);
/* dir/graphs_size.png and dir/graphs_depth.png (ms per run over size / depth, one line per
 * row that ran, and the GEMM floor); a sweep without points writes no file. */
nb_status nb_graph_bench_plots(const nb_graph_bench_result *r, const char *dir);

#ifdef __cplusplus
}
#endif

#endif

/* Benchmark 2 of issue #17: user kernel-language functions as graph nodes between library ops
 * (`nabla graph bench-chain`, src/models/graph_chain_bench.c; the PyTorch side, with the user
 * functions as torch custom ops, is bench/torch/ref_graph_chain.py).
 *
 * One training step of the chain (N rows, F features, f32):
 *   x [N,F] -> act(x) (user .nb, CALL) -> linear(w1 [F,F], b1 [F]) -> norm(h, g [F]) (user .nb,
 *   CALL, g broadcast over the rows) -> linear(w2, b2) -> mse(., target [N,F]) -> backward
 * A step = zero the parameter gradients, forward, backward (no optimizer). The user functions
 * come from a module file (default examples/graph_chain.nb: chain_act = GELU tanh, chain_norm =
 * g * x / sqrt(1 + x^2)); any [Differentiable] functions of the same signatures may replace them.
 * x and target are resident on the device (set once, as the PyTorch side keeps them).
 *
 * Rows (the same parameters and data each; each row its own tape):
 *   immediate            the tape: ops and backward built per step (x, target copied into the
 *                        tape per step: a device-to-device copy, nb_tape_input_tensor)
 *   recorded             the step recorded once (nb_graph_record_*), replayed node by node
 *   recorded_cuda_graph  the same replayed as one CUDA graph (CUDA only)
 *   compiled             the recorded graph after nb_graph_compile, replayed node by node
 *   compiled_cuda_graph  the compiled graph replayed as one CUDA graph (CUDA only)
 * Per row: the median ms of a step (synchronised after each), the nodes of a step (forward op
 * rows: the tape's ops, the graph's nodes), the CUDA kernels of a step (the kernel nodes of one
 * step captured as a CUDA graph, nb_device_graph_count: nabla's kernels and cuBLAS's alike), the
 * loss and the largest relative difference of loss and parameter gradients from the immediate
 * row (one step from zeroed gradients). */
#ifndef NABLA_GRAPH_CHAIN_BENCH_H
#define NABLA_GRAPH_CHAIN_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "nabla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum nb_graph_chain_row {
    NB_GC_IMMEDIATE = 0,
    NB_GC_RECORDED,
    NB_GC_RECORDED_CG,
    NB_GC_COMPILED,
    NB_GC_COMPILED_CG,
    NB_GC_ROWS
};
/* "immediate", "recorded", ... (the table's row names); NULL for an unknown row. */
const char *nb_graph_chain_row_name(int row);

typedef struct nb_graph_chain_opts {
    const char *device; /* "cuda", "cuda:1" or "cpu" */
    const char *module; /* the user functions' .nb file */
    const char *act;    /* float act(float x) */
    const char *norm;   /* float norm(float x, float g) */
    int64_t rows;       /* N */
    int64_t width;      /* F */
    int steps;          /* timed steps per row (the median is reported) */
    int warmup;         /* untimed steps first (kernels compiled, arenas grown) */
    int precision;      /* nb_tape_precision of the GEMMs: NB_TAPE_FP32 or NB_TAPE_TF32 */
    uint64_t seed;      /* parameters and data */
} nb_graph_chain_opts;
/* cuda, examples/graph_chain.nb (relative to the working directory), chain_act, chain_norm,
 * N = 2^20, F = 64, 20 steps after 3 warm-up steps, FP32, seed 17. */
void nb_graph_chain_defaults(nb_graph_chain_opts *o);

typedef struct nb_graph_chain_row_result {
    int ran;          /* 0: the row does not apply (CUDA graphs on the CPU) */
    double ms;        /* median ms per step */
    int nodes;        /* forward op rows per step */
    int64_t kernels;  /* CUDA kernels per step; -1: not counted (the CPU, or the capture failed:
                       * why says why) */
    int cuda_graph;   /* CUDA-graph rows: 1 when the timed steps replayed as one CUDA graph */
    double loss;      /* of the checked step */
    double err;       /* largest relative difference from the immediate row (loss, each
                       * parameter's gradient: max |a - b| / max |immediate|) */
    char why[200];    /* why kernels were not counted ("" when they were or on the CPU) */
} nb_graph_chain_row_result;

typedef struct nb_graph_chain_result {
    nb_graph_chain_row_result row[NB_GC_ROWS];
    char device[300];
    int64_t rows, width;
    int precision, steps;
    double gflop;     /* GEMM FLOPs of a step (forward + backward) / 1e9 */
    char act[64], norm[64], module[256];
    /* what nb_graph_compile did to the step (the compiled rows' graph) */
    int compile_dead, compile_duplicates, compile_epilogues, compile_fused_nodes, compile_fused_ops;
} nb_graph_chain_result;

/* Runs every row (progress lines to `progress`, may be NULL). Errors: bad options
 * (NB_ERR_INVALID_ARG), the module or its functions (the module layer's errors), a row whose
 * loss or gradients differ from the immediate row's by more than 1e-3 (NB_ERR_INTERNAL: a broken
 * run is no timing). */
nb_status nb_graph_chain_run(const nb_graph_chain_opts *o, nb_graph_chain_result *r, FILE *progress);
/* The table: comment lines ('#') then a header and one line per row:
 *   row ms_step nodes kernels loss max_rel_err   ('-' where a row did not run / count)
 * (bench/torch/ref_graph_chain.py prints the same columns for its rows). */
void nb_graph_chain_print(const nb_graph_chain_result *r, FILE *f);

#ifdef __cplusplus
}
#endif

#endif

/* `nabla graph bench-chain`: Benchmark 2 of issue #17, user .nb functions between library ops
 * (include/nabla/graph_chain_bench.h does the work; this parses the options and prints the
 * table). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "nabla/nabla.h"
#include "nabla/graph_chain_bench.h"

static const char *const chain_usage =
    "usage: nabla graph bench-chain [--device D] [--module FILE] [--act NAME] [--norm NAME]\n"
    "                               [--rows N] [--width F] [--steps N] [--warmup N]\n"
    "                               [--precision fp32|tf32] [--seed N]\n"
    "\n"
    "One training step (zero grads, forward, backward) of the chain\n"
    "  x [N,F] -> ACT (.nb) -> linear [F,F] -> NORM(., g [F]) (.nb) -> linear [F,F] -> mse\n"
    "with the user functions ACT (float ACT(float x)) and NORM (float NORM(float x, float g)) of\n"
    "FILE (default examples/graph_chain.nb: chain_act, chain_norm), N = --rows (1048576),\n"
    "F = --width (64), f32. Rows: immediate (the tape), recorded (a recorded graph replayed node\n"
    "by node), recorded_cuda_graph (replayed as one CUDA graph), compiled, compiled_cuda_graph\n"
    "(after nb_graph_compile). Prints the median ms of --steps (20) steps after --warmup (3),\n"
    "the forward nodes and the CUDA kernels of a step (counted from one step captured as a CUDA\n"
    "graph), the loss and the largest relative difference of loss and gradients from immediate.\n"
    "bench/torch/ref_graph_chain.py prints the same table for PyTorch (custom ops).\n";

/* The integer options: name, range, where the value goes. */
typedef struct int_opt {
    const char *name;
    long long lo, hi;
    const char *range;
} int_opt;
static const int_opt int_opts[] = {
    {"--rows", 1, 1ll << 34, "1 .. 2^34"}, {"--width", 1, 65536, "1 .. 65536"},
    {"--steps", 1, 1000000, "1 or more"},  {"--warmup", 0, 1000000, "0 or more"},
    {"--seed", 0, (long long)(~0ull >> 1), "0 or more"},
};

int nb_cmd_graph_chain(int argc, char **argv) {
    nb_graph_chain_opts o;
    nb_graph_chain_defaults(&o);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(chain_usage, stdout);
            return 0;
        }
        if (i + 1 >= argc) return nb_cli_bad_usage("graph bench-chain: %s needs a value", a);
        const char *v = argv[++i];
        long long x;
        if (!strcmp(a, "--device")) o.device = v;
        else if (!strcmp(a, "--module")) o.module = v;
        else if (!strcmp(a, "--act")) o.act = v;
        else if (!strcmp(a, "--norm")) o.norm = v;
        else if (!strcmp(a, "--precision")) {
            if (!strcmp(v, "fp32")) o.precision = NB_TAPE_FP32;
            else if (!strcmp(v, "tf32")) o.precision = NB_TAPE_TF32;
            else return nb_cli_bad_usage("graph bench-chain: --precision '%s' (fp32 or tf32)", v);
        } else {
            int k = 0, n = (int)(sizeof int_opts / sizeof int_opts[0]);
            while (k < n && strcmp(a, int_opts[k].name)) k++;
            if (k == n) return nb_cli_bad_usage("graph bench-chain: unknown option '%s'", a);
            if (nb_cli_parse_int(v, int_opts[k].lo, int_opts[k].hi, &x)) {
                char msg[300];
                snprintf(msg, sizeof msg, "graph bench-chain: %s '%.200s' (%s)", a, v, int_opts[k].range);
                return nb_cli_bad_usage("%s", msg);
            }
            if (k == 0) o.rows = x;
            else if (k == 1) o.width = x;
            else if (k == 2) o.steps = (int)x;
            else if (k == 3) o.warmup = (int)x;
            else o.seed = (uint64_t)x;
        }
    }
    nb_graph_chain_result *r = malloc(sizeof *r);
    if (!r) return 1;
    nb_status s = nb_graph_chain_run(&o, r, stderr);
    if (!s) nb_graph_chain_print(r, stdout);
    free(r);
    if (s) {
        fprintf(stderr, "nabla: graph bench-chain: %s\n", nb_last_error());
        return 1;
    }
    return 0;
}

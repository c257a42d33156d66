/* `nabla graph bench`: the course's random Linear / ReLU graph benchmark (include/nabla/
 * graph_bench.h does the work; this parses the options, prints the table, writes the plots).
 * Also the `graph` dispatcher (nb_cmd_graph): `graph dump` is cmd_graph_dump.c. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "nabla/nabla.h"

static const char *const bench_usage =
    "usage: nabla graph bench [--device D] [--sizes LIST] [--depth N] [--depths LIST] [--size N]\n"
    "                         [--samples N] [--replay N] [--precision fp32|tf32] [--seed N]\n"
    "                         [--cpu-max-gflop G] [--out DIR]\n"
    "\n"
    "Random graphs of depth-2 operators, each Linear (x w^T + b, all [size,size]) or ReLU, then\n"
    "ReLU + softmax, f32; the input has size rows. Two sweeps: --sizes (default\n"
    "32,64,...,4096) at --depth (64), --depths (2,4,...,1024) at --size (256); an empty LIST\n"
    "skips a sweep. Rows: cpu, immediate (a fresh tape per run), immediate_cached (one tape kept),\n"
    "recorded (a recorded graph replayed), compiled (after nb_graph_compile), compiled_replay\n"
    "(--replay N runs per input / read, the time divided by N); the median ms of --samples\n"
    "(10) runs, and floor_ms = FLOPs / the measured cuBLAS peak. The cpu row skips graphs over\n"
    "--cpu-max-gflop (10; 0: no limit). --device cpu: the cpu and graph rows. Prints the table,\n"
    "writes DIR/graphs_size.png and DIR/graphs_depth.png (DIR: --out, default '.').\n";

/* "a,b,c" of positive integers into v (at most NB_GB_MAX_POINTS); "" gives 0 entries. */
static int parse_list(const char *s, int64_t *v, int *n) {
    *n = 0;
    while (*s) {
        char *end = NULL;
        if (*s < '0' || *s > '9' || *n >= NB_GB_MAX_POINTS) return -1;
        long long x = strtoll(s, &end, 10);
        if (x < 1 || (*end && *end != ',')) return -1;
        v[(*n)++] = x;
        s = *end ? end + 1 : end;
        if (*end && !*s) return -1;
    }
    return 0;
}

static int cmd_bench(int argc, char **argv) {
    nb_graph_bench_opts o;
    nb_graph_bench_defaults(&o);
    const char *out = ".";
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(bench_usage, stdout);
            return 0;
        }
        if (i + 1 >= argc) return nb_cli_bad_usage("graph bench: %s needs a value", a);
        const char *v = argv[++i];
        long long x;
        if (!strcmp(a, "--device")) o.device = v;
        else if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--sizes")) {
            if (parse_list(v, o.sizes, &o.n_sizes))
                return nb_cli_bad_usage("graph bench: --sizes '%s' is not a list of up to 32 positive integers", v);
        } else if (!strcmp(a, "--depths")) {
            if (parse_list(v, o.depths, &o.n_depths))
                return nb_cli_bad_usage("graph bench: --depths '%s' is not a list of up to 32 positive integers", v);
        } else if (!strcmp(a, "--depth")) {
            if (nb_cli_parse_int(v, 2, 1 << 20, &x)) return nb_cli_bad_usage("graph bench: --depth '%s' (2 or more)", v);
            o.depth = x;
        } else if (!strcmp(a, "--size")) {
            if (nb_cli_parse_int(v, 1, 65536, &x)) return nb_cli_bad_usage("graph bench: --size '%s' (1..65536)", v);
            o.size = x;
        } else if (!strcmp(a, "--samples")) {
            if (nb_cli_parse_int(v, 1, 100000, &x)) return nb_cli_bad_usage("graph bench: --samples '%s' (1 or more)", v);
            o.samples = (int)x;
        } else if (!strcmp(a, "--replay")) {
            if (nb_cli_parse_int(v, 1, 1000000, &x)) return nb_cli_bad_usage("graph bench: --replay '%s' (1 or more)", v);
            o.replay = (int)x;
        } else if (!strcmp(a, "--seed")) {
            if (nb_cli_parse_int(v, 0, (long long)(~0ull >> 1), &x)) return nb_cli_bad_usage("graph bench: --seed '%s'", v);
            o.seed = (uint64_t)x;
        } else if (!strcmp(a, "--cpu-max-gflop")) {
            char *end = NULL;
            double g = strtod(v, &end);
            if (!*v || *end || !(g >= 0)) return nb_cli_bad_usage("graph bench: --cpu-max-gflop '%s'", v);
            o.cpu_max_gflop = g;
        } else if (!strcmp(a, "--precision")) {
            if (!strcmp(v, "fp32")) o.precision = NB_TAPE_FP32;
            else if (!strcmp(v, "tf32")) o.precision = NB_TAPE_TF32;
            else return nb_cli_bad_usage("graph bench: --precision '%s' (fp32 or tf32)", v);
        } else {
            return nb_cli_bad_usage("graph bench: unknown option '%s'", a);
        }
    }
    /* the plots' directory must exist and be writable: checked before the (long) run */
    char png[4096];
    snprintf(png, sizeof png, "%s/graphs_size.png", out);
    if (nb_file_check_writable(png, "graph bench --out")) {
        fprintf(stderr, "nabla: %s\n", nb_last_error());
        return 1;
    }
    nb_graph_bench_result *r = malloc(sizeof *r);
    if (!r) return 1;
    nb_status s = nb_graph_bench_run(&o, r, stderr);
    if (!s) {
        nb_graph_bench_print(r, stdout);
        s = nb_graph_bench_plots(r, out);
    }
    free(r);
    if (s) {
        fprintf(stderr, "nabla: graph bench: %s\n", nb_last_error());
        return 1;
    }
    return 0;
}

int nb_cmd_graph(int argc, char **argv) {
    if (argc < 1 || !strcmp(argv[0], "-h") || !strcmp(argv[0], "--help")) {
        printf("usage: nabla graph bench [options]   the course's random-graph benchmark (nabla graph bench --help)\n"
               "       nabla graph dump [options] MODEL   a built-in model's recorded training step (nabla graph dump --help)\n"
               "       nabla graph bench-chain [options]   user .nb functions between library ops (nabla graph bench-chain --help)\n");
        return argc < 1 ? 2 : 0;
    }
    if (!strcmp(argv[0], "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(argv[0], "dump")) return nb_cmd_graph_dump(argc - 1, argv + 1); /* cmd_graph_dump.c */
    if (!strcmp(argv[0], "bench-chain")) return nb_cmd_graph_chain(argc - 1, argv + 1); /* cmd_graph_chain.c */
    return nb_cli_bad_usage("graph: unknown sub-command '%s' (bench, dump, bench-chain)", argv[0]);
}

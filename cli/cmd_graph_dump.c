/* `nabla graph dump MODEL`: records a built-in model's training step as a graph (include/nabla/
 * graph_models.h does the work), compiles it with --compile, replays it once with per-node
 * timing and prints the graph's text dump; --dot writes the Graphviz picture. The `graph`
 * dispatcher is in cmd_graph.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "nabla/nabla.h"

static void dump_usage(FILE *to) {
    fprintf(to,
            "usage: nabla graph dump [--compile] [--dot FILE] [--device auto|cpu|cuda[:N]] [--seed N] [--no-run] MODEL\n"
            "\n"
            "Records one training step (forward, mse, backward) of a built-in model as a computational\n"
            "graph, replays it once with per-node timing and prints one line per node (op, input and\n"
            "output shapes, bytes, forward / backward ms) and the memory plan (planned peak vs every\n"
            "buffer on its own).\n"
            "\n"
            "models:\n");
    const char *help;
    for (int i = 0; nb_graph_model_list(i, &help); i++) fprintf(to, "  %-6s %s\n", nb_graph_model_list(i, NULL), help);
    fprintf(to,
            "\n"
            "options:\n"
            "  --compile       compile the recorded graph first (dead / duplicate nodes, constant\n"
            "                  folding, linear + relu, fused elementwise kernels) and print what\n"
            "                  each pass did\n"
            "  --dot FILE      also write the graph in Graphviz DOT (dot -Tpng FILE -o graph.png)\n"
            "  --device D      (default: cpu)\n"
            "  --seed N        parameter and data seed (default: 0)\n"
            "  --no-run        print the recorded graph without replaying it (no times)\n"
            "  -h, --help      show this help\n");
}

static int dump_fail(const char *what) {
    fprintf(stderr, "nabla graph dump: %s: %s\n", what, nb_last_error());
    return 1;
}

int nb_cmd_graph_dump(int argc, char **argv) {
    const char *dot = NULL, *device = "cpu", *model = NULL;
    unsigned long long seed = 0;
    int run = 1, compile = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            dump_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--no-run")) {
            run = 0;
        } else if (!strcmp(a, "--compile")) {
            compile = 1;
        } else if (!strcmp(a, "--dot") || !strcmp(a, "--device") || !strcmp(a, "--seed")) {
            if (i + 1 >= argc) return nb_cli_bad_usage("graph dump: %s needs a value", a);
            const char *v = argv[++i];
            if (!strcmp(a, "--dot")) dot = v;
            else if (!strcmp(a, "--device")) device = v;
            else {
                char *end = NULL;
                seed = strtoull(v, &end, 10);
                if (!*v || *end || *v == '-') return nb_cli_bad_usage("graph dump: --seed '%s' (an integer >= 0)", v);
            }
        } else if (a[0] == '-') {
            return nb_cli_bad_usage("graph dump: unknown option '%s'", a);
        } else if (model) {
            return nb_cli_bad_usage("graph dump: one MODEL only ('%s' is extra)", a);
        } else {
            model = a;
        }
    }
    if (!model) return nb_cli_bad_usage("graph dump: missing MODEL%s", " (nabla graph dump --help lists them)");
    nb_device *dev = NULL;
    if (nb_device_open(device, &dev)) return dump_fail("device");
    nb_graph_model *m = NULL;
    int rc = 0;
    if (nb_graph_model_record(model, dev, seed, &m)) {
        rc = dump_fail(model);
    } else {
        nb_graph *g = nb_graph_model_graph(m);
        nb_graph_compile_stats cs;
        if (compile && nb_graph_compile(g, NULL, &cs)) rc = dump_fail("compile");
        else if (compile)
            printf("compiled: %d dead, %d duplicate, %d folded, %d linear+relu, %d fused nodes replacing %d\n",
                   cs.dead, cs.duplicates, cs.folded, cs.epilogues, cs.fused_nodes, cs.fused_ops);
        if (!rc && run && (nb_graph_set_profiling(g, 1) || nb_graph_run(g))) rc = dump_fail("run");
        if (!rc && nb_graph_dump_file(g, NB_GRAPH_DUMP_TEXT, stdout)) rc = dump_fail("dump");
        if (!rc && dot) {
            FILE *f = fopen(dot, "w");
            if (!f) {
                fprintf(stderr, "nabla graph dump: cannot write '%s'\n", dot);
                rc = 1;
            } else {
                if (nb_graph_dump_file(g, NB_GRAPH_DUMP_DOT, f)) rc = dump_fail("dot");
                if (fclose(f) && !rc) {
                    fprintf(stderr, "nabla graph dump: cannot write '%s'\n", dot);
                    rc = 1;
                }
            }
        }
    }
    nb_graph_model_free(m);
    nb_device_close(dev);
    return rc;
}

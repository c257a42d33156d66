/* The `nabla` command-line tool. Sub-commands live in a table; each gets argc/argv after its name
 * and returns the process exit code (0 ok, 1 failure, 2 usage error). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "nabla/nabla.h"

static const nb_cli_command nb_commands[] = {
    {"devices", "list devices and their properties", nb_cmd_devices},
    {"check", "parse and type-check .nb / .slang files (-I DIR, -D NAME=V), print diagnostics", nb_cmd_check},
    {"emit", "print the C / CUDA code or IR generated for a .nb / .slang file", nb_cmd_emit},
    {"call", "call a .nb / .slang function over JSON / .npy arrays, print JSON", nb_cmd_call},
    {"cache", "show, list or clear the compiled-kernel cache", nb_cmd_cache},
    {"env", "list the environment settings nabla reads, with their values", nb_cmd_env},
    {"fit-image", "fit a neural field (hash grid + MLP) to an image", nb_cmd_fit_image},
    {"unet", "train / sample / benchmark a diffusion UNet (DDPM, CPU or CUDA)", nb_cmd_unet},
    {"graph", "computational graphs: benchmarks (graph bench, graph bench-chain), a model's graph (graph dump)", nb_cmd_graph},
};

void nb_cli_usage(FILE *to) {
    fprintf(to,
            "usage: nabla [--help] [--version] [--log LEVEL] <command> [args]\n"
            "\n"
            "nabla — differentiable GPU kernels and small fast neural models.\n"
            "\n"
            "commands:\n");
    for (size_t i = 0; i < sizeof nb_commands / sizeof nb_commands[0]; i++)
        fprintf(to, "  %-10s %s\n", nb_commands[i].name, nb_commands[i].help);
    fprintf(to,
            "\n"
            "options:\n"
            "  -h, --help       show this help and exit\n"
            "  -V, --version    print the version and exit\n"
            "  --log LEVEL      debug|info|warn|error|off (default: $NABLA_LOG, else warn)\n"
            "\n"
            "Run `nabla <command> --help` for a command's options.\n");
}

/* The sub-command running (NULL before one is chosen): its usage errors point at its own help,
 * not at the list of commands. */
static const char *g_command;

int nb_cli_bad_usage(const char *fmt, const char *arg) {
    fprintf(stderr, "nabla: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n");
    if (g_command) fprintf(stderr, "Run `nabla %s --help` for its usage and options.\n", g_command);
    else nb_cli_usage(stderr);
    return 2;
}

int main(int argc, char **argv) {
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            nb_cli_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
            printf("nabla %s\n", nb_version());
            return 0;
        }
        if (!strcmp(a, "--log")) {
            if (i + 1 >= argc) return nb_cli_bad_usage("--log needs a level%s", "");
            int lv = nb_log_parse_level(argv[++i]);
            if (lv < 0) return nb_cli_bad_usage("unknown log level '%s'", argv[i]);
            nb_log_set_level((nb_log_level)lv);
            continue;
        }
        return nb_cli_bad_usage("unknown option '%s'", a);
    }
    if (i >= argc) return nb_cli_bad_usage("missing command%s", "");
    for (size_t c = 0; c < sizeof nb_commands / sizeof nb_commands[0]; c++)
        if (!strcmp(argv[i], nb_commands[c].name)) {
            g_command = nb_commands[c].name;
            return nb_commands[c].run(argc - i - 1, argv + i + 1);
        }
    return nb_cli_bad_usage("unknown command '%s'", argv[i]);
}

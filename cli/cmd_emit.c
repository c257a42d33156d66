/* `nabla emit FILE [--target c|cuda|host] [--host] [--entry F] [--mode primal|fwd|bwd] [--ir] [-I DIR]
 *  [--const NAME=VALUE]`: prints the generated C or CUDA code, or the IR, to stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "nabla/nabla.h"

#define EMIT_MAX 32

static void emit_help(void) {
    printf("usage: nabla emit FILE [--target c|cuda|host] [--entry FUNC] [--mode primal|fwd|bwd | --fwd | --bwd]\n"
           "                 [--ir] [-I DIR]... [-D NAME[=VALUE]]... [--const NAME=VALUE]...\n"
           "\n"
           "Prints the code generated for FILE: C (default) or CUDA C, or the compiler's IR\n"
           "with --ir; --host (--target host) prints the host unit: C for the host CPU with the\n"
           "[TorchEntryPoint] functions. --entry limits it to one function and what it calls; --mode picks\n"
           "forward- or reverse-mode derivative code. -I adds a directory for imports and\n"
           "#include files; -D NAME[=VALUE] (or -DNAME) defines a preprocessor macro;\n"
           "--conformance TYPE:INTERFACE=ID gives a Slang type conformance id.\n");
}

int nb_cmd_emit(int argc, char **argv) {
    const char *includes[EMIT_MAX], *consts[EMIT_MAX], *defines[EMIT_MAX], *confs[EMIT_MAX];
    int ninc = 0, nconst = 0, ndef = 0, nconf = 0;
    const char *file = NULL, *entry = NULL;
    nb_dump_format fmt = NB_DUMP_C;
    nb_diff_mode mode = NB_MODE_PRIMAL;
    int ir = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL, *def;
        int dk = nb_cli_define_arg(argc, argv, &i, &def);
        if (dk < 0) return nb_cli_bad_usage("emit: -D needs NAME or NAME=VALUE%s", "");
        if (dk > 0) {
            if (ndef == EMIT_MAX) return nb_cli_bad_usage("emit: too many -D%s", "");
            defines[ndef++] = def;
            continue;
        }
        int ck = nb_cli_conformance_arg(argc, argv, &i, &def);
        if (ck < 0) return nb_cli_bad_usage("emit: --conformance needs TYPE:INTERFACE=ID%s", "");
        if (ck > 0) {
            if (nconf == EMIT_MAX) return nb_cli_bad_usage("emit: too many --conformance%s", "");
            confs[nconf++] = def;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            emit_help();
            return 0;
        } else if (!strcmp(a, "--ir")) {
            ir = 1;
        } else if (!strcmp(a, "--host")) {
            fmt = NB_DUMP_HOST;
        } else if (!strcmp(a, "--target")) {
            if (!next) return nb_cli_bad_usage("emit: --target needs c, cuda or host%s", "");
            if (!strcmp(next, "c")) fmt = NB_DUMP_C;
            else if (!strcmp(next, "cuda")) fmt = NB_DUMP_CUDA;
            else if (!strcmp(next, "host")) fmt = NB_DUMP_HOST;
            else return nb_cli_bad_usage("emit: unknown target '%s' (c, cuda or host)", next);
            i++;
        } else if (!strcmp(a, "--fwd")) { /* the spelling: same as --mode fwd */
            mode = NB_MODE_FWD;
        } else if (!strcmp(a, "--bwd")) {
            mode = NB_MODE_BWD;
        } else if (!strcmp(a, "--mode")) {
            if (!next) return nb_cli_bad_usage("emit: --mode needs primal, fwd or bwd%s", "");
            if (!strcmp(next, "primal")) mode = NB_MODE_PRIMAL;
            else if (!strcmp(next, "fwd")) mode = NB_MODE_FWD;
            else if (!strcmp(next, "bwd")) mode = NB_MODE_BWD;
            else return nb_cli_bad_usage("emit: unknown mode '%s' (primal, fwd or bwd)", next);
            i++;
        } else if (!strcmp(a, "--entry")) {
            if (!next) return nb_cli_bad_usage("emit: --entry needs a function name%s", "");
            entry = argv[++i];
        } else if (!strcmp(a, "-I")) {
            if (!next) return nb_cli_bad_usage("emit: -I needs a directory%s", "");
            if (ninc == EMIT_MAX) return nb_cli_bad_usage("emit: too many -I%s", "");
            includes[ninc++] = argv[++i];
        } else if (!strcmp(a, "--const")) {
            if (!next || !strchr(next, '='))
                return nb_cli_bad_usage("emit: --const needs NAME=VALUE%s", "");
            if (nconst == EMIT_MAX) return nb_cli_bad_usage("emit: too many --const%s", "");
            consts[nconst++] = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            return nb_cli_bad_usage("emit: unknown argument '%s'", a);
        } else if (file) {
            return nb_cli_bad_usage("emit: more than one file ('%s')", a);
        } else {
            file = a;
        }
    }
    if (!file) return nb_cli_bad_usage("emit: no file given%s", "");
    if (ir) fmt = NB_DUMP_IR;
    nb_module_options opts = {0};
    opts.include_dirs = includes;
    opts.ninclude_dirs = ninc;
    opts.defines = defines;
    opts.ndefines = ndef;
    opts.conformances = confs;
    opts.nconformances = nconf;
    nb_module *m = NULL;
    if (nb_module_load(NULL, file, &opts, &m) != NB_OK) {
        fprintf(stderr, "%s\n", nb_last_error());
        return 1;
    }
    int rc = 0;
    for (int i = 0; i < nconst && !rc; i++) {
        char name[256];
        const char *eq = strchr(consts[i], '=');
        size_t n = (size_t)(eq - consts[i]);
        char *end = NULL;
        double v = strtod(eq + 1, &end);
        if (n == 0 || n >= sizeof name || !eq[1] || *end) {
            fprintf(stderr, "nabla: emit: bad --const '%s' (NAME=NUMBER)\n", consts[i]);
            rc = 2;
            break;
        }
        memcpy(name, consts[i], n);
        name[n] = '\0';
        if (nb_module_set_constant(m, name, v) != NB_OK) {
            fprintf(stderr, "nabla: %s\n", nb_last_error());
            rc = 1;
        }
    }
    char *text = NULL;
    if (!rc && nb_module_dump(m, fmt, entry, mode, &text) != NB_OK) {
        fprintf(stderr, "nabla: %s\n", nb_last_error());
        rc = 1;
    }
    if (text) {
        fputs(text, stdout);
        size_t n = strlen(text);
        if (n && text[n - 1] != '\n') fputc('\n', stdout);
    }
    nb_module_free_text(text);
    nb_module_free(m);
    return rc;
}

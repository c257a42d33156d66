/* `nabla check FILE… [-I DIR] [-D NAME[=VALUE]]`: parses and checks kernel-language files. Prints each file's
 * diagnostics (file:line:col: error: …, source line, caret) to stderr, or its warnings (stderr)
 * and "FILE: ok" (stdout).
 * Exit 0 when every file is clean, 1 when any has errors, 2 for usage errors. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "nabla/nabla.h"

#define CHECK_MAX_INCLUDES 32

static void check_help(void) {
    printf("usage: nabla check FILE... [-I DIR]... [-D NAME[=VALUE]]...\n"
           "\n"
           "Parses and type-checks .nb / .slang files (and the modules they import). Prints every\n"
           "diagnostic as file:line:col: error: ... with the source line and a caret, or\n"
           "'FILE: ok'. Exits 1 if any file has errors.\n"
           "\n"
           "  -I DIR     also search DIR for imported modules and #include files (repeatable)\n"
           "  -D NAME[=VALUE]  define a preprocessor macro (also -DNAME; repeatable;\n"
           "             without a value NAME is defined empty, as in Slang)\n"
           "  --conformance TYPE:INTERFACE=ID  Slang's type conformance id: the type\n"
           "             createDynamicObject<INTERFACE>(ID, data) makes (repeatable)\n");
}

int nb_cmd_check(int argc, char **argv) {
    const char *includes[CHECK_MAX_INCLUDES], *defines[CHECK_MAX_INCLUDES], *confs[CHECK_MAX_INCLUDES];
    int ninc = 0, ndef = 0, nconf = 0, nfiles = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            check_help();
            return 0;
        }
        if (!strcmp(a, "-I")) {
            if (i + 1 >= argc) return nb_cli_bad_usage("check: -I needs a directory%s", "");
            if (ninc == CHECK_MAX_INCLUDES) return nb_cli_bad_usage("check: too many -I%s", "");
            includes[ninc++] = argv[++i];
            continue;
        }
        const char *def;
        int dk = nb_cli_define_arg(argc, argv, &i, &def);
        if (dk < 0) return nb_cli_bad_usage("check: -D needs NAME or NAME=VALUE%s", "");
        if (dk > 0) {
            if (ndef == CHECK_MAX_INCLUDES) return nb_cli_bad_usage("check: too many -D%s", "");
            defines[ndef++] = def;
            continue;
        }
        int ck = nb_cli_conformance_arg(argc, argv, &i, &def);
        if (ck < 0) return nb_cli_bad_usage("check: --conformance needs TYPE:INTERFACE=ID%s", "");
        if (ck > 0) {
            if (nconf == CHECK_MAX_INCLUDES) return nb_cli_bad_usage("check: too many --conformance%s", "");
            confs[nconf++] = def;
            continue;
        }
        if (a[0] == '-' && a[1]) return nb_cli_bad_usage("check: unknown argument '%s'", a);
        nfiles++;
    }
    if (!nfiles) return nb_cli_bad_usage("check: no files given%s", "");
    nb_module_options opts = {0};
    opts.include_dirs = includes;
    opts.ninclude_dirs = ninc;
    opts.defines = defines;
    opts.ndefines = ndef;
    opts.conformances = confs;
    opts.nconformances = nconf;
    int rc = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-I")) {
            i++;
            continue;
        }
        const char *def;
        if (nb_cli_define_arg(argc, argv, &i, &def) || nb_cli_conformance_arg(argc, argv, &i, &def)) continue;
        nb_module *m = NULL;
        nb_status s = nb_module_load(NULL, argv[i], &opts, &m);
        if (s == NB_OK) {
            char *warn = nb_module_warnings(m);
            if (warn) {
                size_t wn = strlen(warn);
                fprintf(stderr, "%s%s", warn, wn && warn[wn - 1] == '\n' ? "" : "\n");
                nb_module_free_text(warn);
            }
            printf("%s: ok\n", argv[i]);
            nb_module_free(m);
            continue;
        }
        rc = 1;
        const char *msg = nb_last_error();
        size_t n = strlen(msg);
        fprintf(stderr, "%s%s", msg, n && msg[n - 1] == '\n' ? "" : "\n");
    }
    return rc;
}

/* `nabla env [NAME...]`: the settings nabla reads from the environment (nabla/env.h), each with
 * its current value and where that comes from, its meaning and what it may be. Exit 1 when a
 * value is invalid (the message names it), 2 for an unknown NAME. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "nabla/nabla.h"

static void env_usage(FILE *to) {
    fprintf(to,
            "usage: nabla env [NAME...]\n"
            "\n"
            "Prints the environment settings nabla reads (all of them, or the NAMEs given): the\n"
            "value and its source (environment or default), what it changes and what it may be.\n"
            "Exits with 1 when a set value is invalid.\n");
}

/* One entry; returns 1 when its value is invalid. */
static int env_print(nb_env_id id) {
    const nb_env_var *e = nb_env_var_at((int)id);
    const char *v = nb_env_get(id);
    int bad = nb_env_check(id) != NB_OK;
    if (v)
        printf("%s=%s  (environment%s)\n", e->name, v, bad ? ", INVALID" : "");
    else if (bad) /* set but unusable (too long) */
        printf("%s  (environment, INVALID)\n", e->name);
    else
        printf("%s  (unset; default: %s)\n", e->name, e->def);
    printf("    %s\n    values: %s\n", e->meaning, e->values);
    if (bad) fprintf(stderr, "nabla: env: %s\n", nb_last_error());
    return bad;
}

int nb_cmd_env(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            env_usage(stdout);
            return 0;
        }
        if (argv[i][0] == '-') return nb_cli_bad_usage("env: unknown option '%s'", argv[i]);
        if (nb_env_find(argv[i]) < 0)
            return nb_cli_bad_usage("env: '%s' is not a nabla setting (`nabla env` lists them)", argv[i]);
    }
    int bad = 0;
    if (argc == 0)
        for (int i = 0; i < nb_env_count(); i++) bad |= env_print((nb_env_id)i);
    for (int i = 0; i < argc; i++) bad |= env_print((nb_env_id)nb_env_find(argv[i]));
    return bad ? 1 : 0;
}

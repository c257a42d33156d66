/* Shared declarations of the nabla CLI's sub-commands. */
#ifndef NB_CLI_H
#define NB_CLI_H

#include <stdio.h>

typedef struct nb_cli_command {
    const char *name;
    const char *help;
    int (*run)(int argc, char **argv); /* argv[0] is the first argument after the command name */
} nb_cli_command;

void nb_cli_usage(FILE *to);
/* Prints "nabla: <message>" and the usage to stderr; returns 2. fmt has one %s for arg. */
int nb_cli_bad_usage(const char *fmt, const char *arg);

int nb_cmd_devices(int argc, char **argv);
int nb_cmd_check(int argc, char **argv);
int nb_cmd_emit(int argc, char **argv);
int nb_cmd_call(int argc, char **argv);
int nb_cmd_call_ad(int argc, char **argv); /* call --fwd / --bwd (cmd_call_ad.c) */
int nb_cmd_cache(int argc, char **argv);
int nb_cmd_fit_image(int argc, char **argv); /* cmd_fit_image.c */
int nb_cmd_unet(int argc, char **argv); /* cmd_unet.c */

#endif

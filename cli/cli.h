/* Shared declarations of the nabla CLI's sub-commands. */
#ifndef NB_CLI_H
#define NB_CLI_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct nb_cli_command {
    const char *name;
    const char *help;
    int (*run)(int argc, char **argv); /* argv[0] is the first argument after the command name */
} nb_cli_command;

void nb_cli_usage(FILE *to);
/* Prints "nabla: <message>" and the usage to stderr; returns 2. fmt has one %s for arg. */
int nb_cli_bad_usage(const char *fmt, const char *arg);

/* `-D NAME[=VALUE]` / `-DNAME[=VALUE]` (preprocessor defines, as Slang's): when argv[*i] is one,
 * stores the define in *out, advances *i past a separate value and returns 1; returns 0 when
 * argv[*i] is not a -D option; -1 (usage error printed, exit 2) when the value is missing. */
static inline int nb_cli_define_arg(int argc, char **argv, int *i, const char **out) {
    const char *a = argv[*i];
    if (a[0] != '-' || a[1] != 'D') return 0;
    if (a[2]) {
        *out = a + 2;
        return 1;
    }
    if (*i + 1 >= argc || !argv[*i + 1][0]) return -1;
    *out = argv[++*i];
    return 1;
}

/* `--conformance TYPE:INTERFACE=ID` / `--conformance=…` (Slang's type conformance ids, which a
 * Slang host gives the compiler: `createDynamicObject<INTERFACE>(ID, data)` makes a TYPE): like
 * nb_cli_define_arg, 1 / 0 (not this option) / -1 (value missing). */
static inline int nb_cli_conformance_arg(int argc, char **argv, int *i, const char **out) {
    const char *a = argv[*i], *opt = "--conformance";
    size_t n = 13;
    if (a[0] != '-' || a[1] != '-' || 0 != __builtin_strncmp(a, opt, n) || (a[n] && a[n] != '=')) return 0;
    if (a[n] == '=') {
        *out = a + n + 1;
        return a[n + 1] ? 1 : -1;
    }
    if (*i + 1 >= argc || !argv[*i + 1][0]) return -1;
    *out = argv[++*i];
    return 1;
}

/* A whole decimal integer in [lo, hi] into *out: 0, else -1 (nothing after it, no overflow). */
static inline int nb_cli_parse_int(const char *s, long long lo, long long hi, long long *out) {
    char *end = NULL;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (!*s || *end || errno || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

/* "X[,Y[,Z]]" (missing ones 1, each >= 0, nothing after): 0 and out[3] filled, else -1. For
 * --grid, --block-size and --grid-size. */
static inline int nb_cli_parse_xyz(const char *s, int64_t *out) {
    int64_t v[3] = {1, 1, 1};
    for (int k = 0; k < 3; k++) {
        char *end = NULL;
        if (*s < '0' || *s > '9') return -1;
        v[k] = strtoll(s, &end, 10);
        s = end;
        if (!*s) break;
        if (*s != ',' || k == 2) return -1;
        s++;
    }
    for (int k = 0; k < 3; k++) out[k] = v[k];
    return 0;
}

int nb_cmd_devices(int argc, char **argv);
int nb_cmd_check(int argc, char **argv);
int nb_cmd_emit(int argc, char **argv);
int nb_cmd_call(int argc, char **argv);
/* gen_arg.c: `nabla call` generator arguments (call_id(), grid(4,4), rand_float(0,1), …): 1 when
 * text is spelled as one; parse fills g (0 and a message in err on a bad spelling). */
struct nb_generator;
int cli_is_generator(const char *text);
int cli_parse_generator(const char *text, struct nb_generator *g, char *err, size_t cap);
int nb_cmd_call_ad(int argc, char **argv); /* call --fwd / --bwd (cmd_call_ad.c) */
int nb_cmd_cache(int argc, char **argv);
int nb_cmd_env(int argc, char **argv);
int nb_cmd_fit_image(int argc, char **argv); /* cmd_fit_image.c */
int nb_cmd_unet(int argc, char **argv); /* cmd_unet.c */
int nb_cmd_graph(int argc, char **argv); /* cmd_graph.c: graph bench, graph dump, graph bench-chain */
int nb_cmd_graph_dump(int argc, char **argv); /* cmd_graph_dump.c: graph dump */
int nb_cmd_graph_chain(int argc, char **argv); /* cmd_graph_chain.c: graph bench-chain */

#endif

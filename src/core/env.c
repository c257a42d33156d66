/* The registry of environment settings (nabla/env.h): the only place in nabla that calls getenv
 * (tests/test_env_registry.py checks the tree). Values are copied once, on first use, into fixed
 * buffers; nb_env_reload copies them again. Nothing here logs: nb_log reads NABLA_LOG through
 * this file, and nb_error logs. */
#include "nabla/env.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/util.h"
#include "nabla/log.h"

/* In nb_env_id order (checked by nb_env_find's test: every name once). */
static const nb_env_var nb_env_vars[NB_ENV_COUNT] = {
    [NB_ENV_DEVICE] = {"NABLA_DEVICE", "auto (CUDA when a device works, else the CPU)",
                       "cpu | cuda | cuda:N | auto",
                       "Python: the device of nabla.default_device() and of calls given none"},
    [NB_ENV_THREADS] = {"NABLA_THREADS", "the number of online CPUs", "an integer 1..1024",
                        "worker threads of the CPU device's thread pool (read when it starts)"},
    [NB_ENV_LOG] = {"NABLA_LOG", "warn", "debug | info | warn | error | off (any case)",
                    "log level of messages to stderr (nb_log_set_level and --log override it)"},
    [NB_ENV_CACHE_DIR] = {"NABLA_CACHE_DIR", "$HOME/.cache/nabla (/tmp/nabla-cache-UID without HOME)",
                          "a directory", "where compiled kernels are cached on disk"},
    [NB_ENV_CC] = {"CC", "cc", "a command, words split at blanks",
                   "the C compiler of CPU kernels (with its own leading arguments)"},
    [NB_ENV_CFLAGS] = {"NABLA_CFLAGS", "(none)", "compiler flags, split at blanks",
                       "extra flags for the C compiler of CPU kernels (part of the cache key)"},
    [NB_ENV_NVRTC] = {"NABLA_NVRTC", "libnvrtc.so.13 / .12 / .so, then the toolkit roots",
                      "a path to libnvrtc", "the NVRTC library to load first"},
    [NB_ENV_CUBLAS] = {"NABLA_CUBLAS", "libcublas.so.13 / .12, then /usr/local/cuda/lib64",
                       "a path to libcublas", "the cuBLAS library to load first"},
    [NB_ENV_CUDA_HOME] = {"CUDA_HOME", "(none); /usr/local/cuda is searched after it",
                          "a CUDA toolkit root", "where to look for libnvrtc (lib64/) and CUDA headers (include/)"},
    [NB_ENV_CUDA_PATH] = {"CUDA_PATH", "(none)", "a CUDA toolkit root", "the same, after CUDA_HOME"},
    [NB_ENV_CUDA_GRAPH] = {"NABLA_CUDA_GRAPH", "1", "0 | 1",
                           "0: DDPM training steps on CUDA launch op by op instead of replaying a "
                           "captured CUDA graph (for debugging and profiling)"},
    [NB_ENV_FASHION_MNIST_DIR] = {"NABLA_FASHION_MNIST_DIR", "the directory built in at configure time",
                                  "a directory", "where nb_dataset_fashion_mnist finds the IDX files "
                                                 "when given no directory"},
    [NB_ENV_HOME] = {"HOME", "(none)", "a directory", "the default kernel cache is $HOME/.cache/nabla"},
    [NB_ENV_TMPDIR] = {"TMPDIR", "/tmp", "a directory",
                       "where private scratch directories of the C compiler are made"},
};

#define NB_ENV_MAX 4096 /* bytes of a value, with its terminator */

static char nb_env_buf[NB_ENV_COUNT][NB_ENV_MAX];
static signed char nb_env_state[NB_ENV_COUNT]; /* 0 unset or empty, 1 set, -1 too long */
static pthread_once_t nb_env_once = PTHREAD_ONCE_INIT;

static void nb_env_read(void) {
    for (int i = 0; i < NB_ENV_COUNT; i++) {
        const char *v = getenv(nb_env_vars[i].name);
        size_t n = v ? strlen(v) : 0;
        nb_env_state[i] = n == 0 ? 0 : n < NB_ENV_MAX ? 1 : -1;
        if (nb_env_state[i] == 1) memcpy(nb_env_buf[i], v, n + 1);
        else nb_env_buf[i][0] = '\0';
    }
}

static void nb_env_init(void) { pthread_once(&nb_env_once, nb_env_read); }

void nb_env_reload(void) {
    nb_env_init();
    nb_env_read();
}

int nb_env_count(void) { return NB_ENV_COUNT; }

const nb_env_var *nb_env_var_at(int i) { return i >= 0 && i < NB_ENV_COUNT ? &nb_env_vars[i] : NULL; }

int nb_env_find(const char *name) {
    for (int i = 0; name && i < NB_ENV_COUNT; i++)
        if (!strcmp(nb_env_vars[i].name, name)) return i;
    return -1;
}

const char *nb_env_get(nb_env_id id) {
    if ((int)id < 0 || id >= NB_ENV_COUNT) return NULL;
    nb_env_init();
    return nb_env_state[id] == 1 ? nb_env_buf[id] : NULL;
}

/* Parses an integer setting; 1 when v is a whole decimal number in [lo, hi]. */
static int nb_env_parse_long(const char *v, long lo, long hi, long *out) {
    if (*v < '0' || *v > '9') return 0; /* no sign, no blanks: strtol would take " 4" */
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) return 0;
    *out = x;
    return 1;
}

/* 1 when the set value of id is valid for its entry (or id is unset). */
static int nb_env_valid(nb_env_id id) {
    nb_env_init();
    if (nb_env_state[id] < 0) return 0;
    const char *v = nb_env_get(id);
    long x;
    if (!v) return 1;
    switch (id) {
    case NB_ENV_THREADS: return nb_env_parse_long(v, 1, 1024, &x);
    case NB_ENV_LOG: return nb_log_parse_level(v) >= 0;
    case NB_ENV_CUDA_GRAPH: return !strcmp(v, "0") || !strcmp(v, "1");
    default: return 1; /* paths, commands, flags: used as given; their users report failures */
    }
}

nb_status nb_env_check(nb_env_id id) {
    if ((int)id < 0 || id >= NB_ENV_COUNT)
        return nb_error(NB_ERR_INVALID_ARG, "nb_env_check: no setting %d (0..%d)", (int)id, NB_ENV_COUNT - 1);
    if (nb_env_valid(id)) return NB_OK;
    const nb_env_var *e = &nb_env_vars[id];
    if (nb_env_state[id] < 0)
        return nb_error(NB_ERR_INVALID_ARG, "$%s is longer than %d bytes", e->name, NB_ENV_MAX - 1);
    return nb_error(NB_ERR_INVALID_ARG, "$%s='%s' is not valid: expected %s (default: %s)", e->name,
                    nb_env_get(id), e->values, e->def);
}

/* The set value of id (*v, NULL when unset) after its check (a value too long to keep is an
 * error, not "unset"): the typed getters' common part. */
static nb_status nb_env_checked(nb_env_id id, const char **v) {
    *v = nb_env_get(id);
    return nb_env_check(id);
}

nb_status nb_env_threads(long *out) {
    NB_CHECK_ARG(out);
    *out = nb_cpu_count();
    const char *v;
    NB_TRY(nb_env_checked(NB_ENV_THREADS, &v));
    if (v) nb_env_parse_long(v, 1, 1024, out);
    return NB_OK;
}

nb_status nb_env_log_level(int *out) {
    NB_CHECK_ARG(out);
    *out = NB_LOG_WARN;
    const char *v;
    NB_TRY(nb_env_checked(NB_ENV_LOG, &v));
    if (v) *out = nb_log_parse_level(v);
    return NB_OK;
}

nb_status nb_env_cuda_graph(int *out) {
    NB_CHECK_ARG(out);
    *out = 1;
    const char *v;
    NB_TRY(nb_env_checked(NB_ENV_CUDA_GRAPH, &v));
    if (v) *out = v[0] == '1';
    return NB_OK;
}

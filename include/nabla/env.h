/* The settings nabla reads from the environment: one registry (src/core/env.c, the only code that
 * calls getenv), each entry with its name, default and meaning. Values are read once, on first
 * use, and kept; nb_env_reload re-reads them (for a program that changes its own environment).
 *
 *   const char *dir = nb_env_get(NB_ENV_CACHE_DIR);   // NULL when unset or empty
 *   long n;
 *   nb_env_threads(&n);                                // parsed, range-checked
 *   for (int i = 0; i < nb_env_count(); i++) puts(nb_env_var_at(i)->name);
 *
 * `nabla env` prints every entry with its current value and where it comes from; docs/ENV.md
 * lists them. Experiment switches are not settings: tuning is decided in code from the shape and
 * the device (docs/PERF.md keeps the measurements). */
#ifndef NABLA_ENV_H
#define NABLA_ENV_H

#include "nabla/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nb_env_id {
    NB_ENV_DEVICE,            /* NABLA_DEVICE: Python's default device */
    NB_ENV_THREADS,           /* NABLA_THREADS: CPU worker threads */
    NB_ENV_LOG,               /* NABLA_LOG: log level */
    NB_ENV_CACHE_DIR,         /* NABLA_CACHE_DIR: compiled-kernel cache */
    NB_ENV_CC,                /* CC: C compiler of CPU kernels */
    NB_ENV_CFLAGS,            /* NABLA_CFLAGS: extra C compiler flags */
    NB_ENV_NVRTC,             /* NABLA_NVRTC: libnvrtc to load */
    NB_ENV_CUBLAS,            /* NABLA_CUBLAS: libcublas to load */
    NB_ENV_CUDA_HOME,         /* CUDA_HOME: toolkit root */
    NB_ENV_CUDA_PATH,         /* CUDA_PATH: toolkit root (second choice) */
    NB_ENV_CUDA_GRAPH,        /* NABLA_CUDA_GRAPH: CUDA graphs for DDPM steps */
    NB_ENV_FASHION_MNIST_DIR, /* NABLA_FASHION_MNIST_DIR: dataset directory */
    NB_ENV_HOME,              /* HOME: default cache location */
    NB_ENV_TMPDIR,            /* TMPDIR: private scratch directories */
    NB_ENV_COUNT
} nb_env_id;

typedef struct nb_env_var {
    const char *name;    /* the environment variable, e.g. "NABLA_LOG" */
    const char *def;     /* the default, in words (what applies when unset or empty) */
    const char *values;  /* what a value may be, in words */
    const char *meaning; /* one line: what it changes */
} nb_env_var;

/* Entries of the registry: NB_ENV_COUNT, in nb_env_id order. */
int nb_env_count(void);
/* Entry i (an nb_env_id), NULL out of range. */
const nb_env_var *nb_env_var_at(int i);
/* The entry named name (exact, case-sensitive), -1 when the registry has none. */
int nb_env_find(const char *name);

/* The value read from the environment, NULL when unset or empty. The pointer stays valid until
 * nb_env_reload. */
const char *nb_env_get(nb_env_id id);
/* NB_OK when the variable is unset or its value is valid; else NB_ERR_INVALID_ARG with a message
 * naming the variable, the value and what it may be (nb_last_error). */
nb_status nb_env_check(nb_env_id id);

/* Parsed settings. Each returns NB_OK with the default when unset; NB_ERR_INVALID_ARG (message
 * as nb_env_check) with the default in *out for a bad value. */
nb_status nb_env_threads(long *out);    /* 1..1024; default: the CPU count */
nb_status nb_env_log_level(int *out);   /* an nb_log_level; default NB_LOG_WARN */
nb_status nb_env_cuda_graph(int *out);  /* 0 or 1; default 1 */

/* Re-reads every variable (values returned earlier become invalid). For programs that change
 * their own environment (tests); not safe while other threads read settings. */
void nb_env_reload(void);

#ifdef __cplusplus
}
#endif
#endif

/* nabla — levelled logging to stderr. The level comes from $NABLA_LOG (debug|info|warn|error|off,
 * default warn) the first time anything logs, or from nb_log_set_level(). */
#ifndef NABLA_LOG_H
#define NABLA_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nb_log_level {
    NB_LOG_DEBUG = 0,
    NB_LOG_INFO = 1,
    NB_LOG_WARN = 2,
    NB_LOG_ERROR = 3,
    NB_LOG_OFF = 4
} nb_log_level;

void nb_log_set_level(nb_log_level level);
nb_log_level nb_log_get_level(void);

/* Parses "debug", "info", "warn", "error", "off" (case-insensitive). Returns -1 for anything else. */
int nb_log_parse_level(const char *name);

/* Receives every message at or above the level. NULL restores the default (stderr). */
typedef void (*nb_log_sink)(nb_log_level level, const char *msg, void *user);
void nb_log_set_sink(nb_log_sink sink, void *user);

void nb_log(nb_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#define NB_LOG_D(...) nb_log(NB_LOG_DEBUG, __VA_ARGS__)
#define NB_LOG_I(...) nb_log(NB_LOG_INFO, __VA_ARGS__)
#define NB_LOG_W(...) nb_log(NB_LOG_WARN, __VA_ARGS__)
#define NB_LOG_E(...) nb_log(NB_LOG_ERROR, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif

/* Levelled logging. The level is read from $NABLA_LOG (nabla/env.h) once, lazily, unless set
 * explicitly. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "nabla/log.h"
#include "nabla/env.h"

static int nb_log_level_ = -1; /* -1: not yet read from the environment */
static nb_log_sink nb_log_sink_;
static void *nb_log_user_;
static pthread_once_t nb_log_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t nb_log_lock = PTHREAD_MUTEX_INITIALIZER;

int nb_log_parse_level(const char *name) {
    static const char *names[] = {"debug", "info", "warn", "error", "off"};
    if (!name) return -1;
    for (int i = 0; i < 5; i++)
        if (strcasecmp(name, names[i]) == 0) return i;
    if (strcasecmp(name, "warning") == 0) return NB_LOG_WARN;
    return -1;
}

static void nb_log_init_env(void) {
    if (nb_log_level_ >= 0) return;
    /* not nb_env_log_level: its error path logs (nb_error), which would re-enter this once */
    const char *env = nb_env_get(NB_ENV_LOG);
    int lv = nb_log_parse_level(env);
    if (env && lv < 0)
        fprintf(stderr, "nabla: [warn] $NABLA_LOG='%s' is not valid: expected debug | info | warn | "
                        "error | off; using warn\n", env);
    nb_log_level_ = lv < 0 ? NB_LOG_WARN : lv;
}

void nb_log_set_level(nb_log_level level) {
    pthread_once(&nb_log_once, nb_log_init_env);
    nb_log_level_ = (int)level;
}

nb_log_level nb_log_get_level(void) {
    pthread_once(&nb_log_once, nb_log_init_env);
    return (nb_log_level)nb_log_level_;
}

void nb_log_set_sink(nb_log_sink sink, void *user) {
    pthread_mutex_lock(&nb_log_lock);
    nb_log_sink_ = sink;
    nb_log_user_ = user;
    pthread_mutex_unlock(&nb_log_lock);
}

void nb_log(nb_log_level level, const char *fmt, ...) {
    static const char *tags[] = {"debug", "info", "warn", "error", "off"};
    if ((int)level < (int)nb_log_get_level() || level >= NB_LOG_OFF) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&nb_log_lock);
    if (nb_log_sink_)
        nb_log_sink_(level, msg, nb_log_user_);
    else
        fprintf(stderr, "nabla: [%s] %s\n", tags[level], msg);
    pthread_mutex_unlock(&nb_log_lock);
}

/* Status codes and the thread-local last-error message. */
#include <stdarg.h>
#include <stdio.h>

#include "nabla/nabla.h"

#ifndef NB_VERSION_STRING
#define NB_VERSION_STRING NABLA_VERSION_STRING
#endif

#define NB_ERROR_CAP 4096

static _Thread_local char nb_error_msg[NB_ERROR_CAP];

const char *nb_last_error(void) { return nb_error_msg; }

void nb_clear_error(void) { nb_error_msg[0] = '\0'; }

nb_status nb_error(nb_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(nb_error_msg, sizeof nb_error_msg, fmt, ap);
    va_end(ap);
    nb_log(NB_LOG_DEBUG, "error %s: %s", nb_status_name(s), nb_error_msg);
    return s;
}

const char *nb_status_name(nb_status s) {
    switch (s) {
    case NB_OK: return "NB_OK";
    case NB_ERR_INVALID_ARG: return "NB_ERR_INVALID_ARG";
    case NB_ERR_OUT_OF_MEMORY: return "NB_ERR_OUT_OF_MEMORY";
    case NB_ERR_SHAPE: return "NB_ERR_SHAPE";
    case NB_ERR_DTYPE: return "NB_ERR_DTYPE";
    case NB_ERR_LAYOUT: return "NB_ERR_LAYOUT";
    case NB_ERR_NO_DEVICE: return "NB_ERR_NO_DEVICE";
    case NB_ERR_DEVICE: return "NB_ERR_DEVICE";
    case NB_ERR_COMPILE: return "NB_ERR_COMPILE";
    case NB_ERR_IO: return "NB_ERR_IO";
    case NB_ERR_NOT_FOUND: return "NB_ERR_NOT_FOUND";
    case NB_ERR_UNSUPPORTED: return "NB_ERR_UNSUPPORTED";
    case NB_ERR_INTERNAL: return "NB_ERR_INTERNAL";
    }
    return "NB_ERR_UNKNOWN";
}

const char *nb_version(void) { return NB_VERSION_STRING; }

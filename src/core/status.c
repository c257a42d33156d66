/* Status codes and the thread-local last-error message.
 *
 * The message has no length limit: a compiler's diagnostics can be long, and the error that
 * matters may come after hundreds of warnings. nb_error formats into fresh memory and only then
 * replaces the current message, keeping the one before it alive until the next error: so its
 * arguments may include nb_last_error() (`nb_error(s, "context: %s", nb_last_error())`), or a
 * message saved one error earlier. The buffers are freed when the thread exits. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/log.h"
#include "nabla/status.h"

/* Messages up to this size are formatted once (on the stack, then copied). */
#define NB_ERROR_STACK 1024

typedef struct nb_error_state {
    char *cur;      /* what nb_last_error() shows; NULL: none yet */
    char *prev;     /* the message before it, kept alive for one more error */
    int registered; /* the thread-exit destructor knows this thread */
} nb_error_state;

static _Thread_local nb_error_state nb_err;
/* Holds the (cut) message when there is no memory for it. */
static _Thread_local char nb_err_fallback[NB_ERROR_STACK];
static pthread_key_t nb_err_key;
static pthread_once_t nb_err_once = PTHREAD_ONCE_INIT;
static int nb_err_key_ok;

/* Runs in the exiting thread, so nb_err_fallback is that thread's. */
static void nb_err_free(void *p) {
    nb_error_state *e = p;
    if (e->cur != nb_err_fallback) free(e->cur);
    if (e->prev != nb_err_fallback) free(e->prev);
    e->cur = e->prev = NULL;
    e->registered = 0;
}

static void nb_err_key_init(void) {
    nb_err_key_ok = pthread_key_create(&nb_err_key, nb_err_free) == 0;
}

const char *nb_last_error(void) { return nb_err.cur ? nb_err.cur : ""; }

void nb_clear_error(void) {
    if (nb_err.cur) nb_err.cur[0] = '\0';
}

nb_status nb_error(nb_status s, const char *fmt, ...) {
    char stack[NB_ERROR_STACK];
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(stack, sizeof stack, fmt, ap);
    va_end(ap);
    if (n < 0) { /* an encoding error in an argument */
        n = 0;
        stack[0] = '\0';
    }
    char *msg = malloc((size_t)n + 1);
    if (msg) {
        if ((size_t)n < sizeof stack)
            memcpy(msg, stack, (size_t)n + 1);
        else
            vsnprintf(msg, (size_t)n + 1, fmt, ap2);
        if (!nb_err.registered) { /* free the buffers when this thread exits */
            pthread_once(&nb_err_once, nb_err_key_init);
            if (nb_err_key_ok && pthread_setspecific(nb_err_key, &nb_err) == 0)
                nb_err.registered = 1;
        }
    } else { /* out of memory: the message cut to the stack buffer's size */
        memcpy(nb_err_fallback, stack, sizeof stack);
        msg = nb_err_fallback;
    }
    va_end(ap2);
    if (nb_err.prev != nb_err_fallback) free(nb_err.prev);
    nb_err.prev = nb_err.cur;
    nb_err.cur = msg;
    nb_log(NB_LOG_DEBUG, "error %s: %s", nb_status_name(s), msg);
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

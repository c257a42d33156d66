/* nabla — status codes and error messages.
 *
 * Every public function that can fail returns an nb_status. On failure the calling thread's
 * nb_last_error() holds a message naming the cause (argument, shape, file, CUDA error string).
 */
#ifndef NABLA_STATUS_H
#define NABLA_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nb_status {
    NB_OK = 0,
    NB_ERR_INVALID_ARG,   /* a bad argument: NULL where a value is needed, bad flag, bad range */
    NB_ERR_OUT_OF_MEMORY, /* host or device allocation failed */
    NB_ERR_SHAPE,         /* shapes that do not fit together, views out of bounds */
    NB_ERR_DTYPE,         /* dtypes that do not fit together or are not supported */
    NB_ERR_LAYOUT,        /* a view the memory layout cannot express (reshape of a non-contiguous view) */
    NB_ERR_NO_DEVICE,     /* the requested device does not exist or its driver is missing */
    NB_ERR_DEVICE,        /* a driver call failed (message carries the driver's error string) */
    NB_ERR_COMPILE,       /* a run-time compilation failed (message carries the compiler log) */
    NB_ERR_IO,            /* file or stream I/O failed */
    NB_ERR_NOT_FOUND,     /* a named thing (function, symbol, file) does not exist */
    NB_ERR_UNSUPPORTED,   /* valid request that this build or device cannot do (yet) */
    NB_ERR_INTERNAL       /* a bug in nabla; please report it */
} nb_status;

/* Message of the last failure on this thread ("" when none). Valid until the next failing call. */
const char *nb_last_error(void);

/* Short fixed name of a status code, e.g. "NB_ERR_SHAPE". */
const char *nb_status_name(nb_status s);

/* Clears this thread's last error message. */
void nb_clear_error(void);

/* Records a failure: formats the message into this thread's error slot and returns s, so that
 * library code can write `return nb_error(NB_ERR_SHAPE, "…", …);`. Public so that bindings and
 * extensions report errors the same way. */
nb_status nb_error(nb_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif

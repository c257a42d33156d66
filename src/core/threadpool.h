/* pthread pool for data-parallel loops: nb_threadpool_run splits [0, n) into chunks and runs
 * fn on them from the pool's workers and the calling thread; returns when all are done. */
#ifndef NB_CORE_THREADPOOL_H
#define NB_CORE_THREADPOOL_H

#include <stdint.h>

#include "nabla/status.h"

typedef struct nb_threadpool nb_threadpool;
typedef void (*nb_range_fn)(void *ctx, int64_t begin, int64_t end);

/* threads: total threads including the caller (>= 1). */
nb_status nb_threadpool_create(int threads, nb_threadpool **out);
void nb_threadpool_destroy(nb_threadpool *p);
int nb_threadpool_size(const nb_threadpool *p);
/* Runs fn over [0, n) in chunks of at least `grain` items. Calls are serialised: one run at a
 * time per pool (a second caller waits). Nested calls from inside fn run inline. */
void nb_threadpool_run(nb_threadpool *p, int64_t n, int64_t grain, nb_range_fn fn, void *ctx);
/* The process-wide pool, sized by $NABLA_THREADS or the number of online CPUs; created on first
 * use. Returns NULL only if thread creation failed (then callers run inline). */
nb_threadpool *nb_threadpool_global(void);

#endif

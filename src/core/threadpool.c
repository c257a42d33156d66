/* pthread pool for parallel loops. Workers sleep on a condition variable; a run publishes a job
 * (fn, ctx, n, chunk), everyone — the caller included — grabs chunks with an atomic counter, and
 * the caller waits until every worker has left the job. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/threadpool.h"
#include "core/util.h"
#include "nabla/alloc.h"
#include "nabla/env.h"
#include "nabla/log.h"

struct nb_threadpool {
    int threads; /* including the caller */
    pthread_t *workers;
    int nworkers;
    pthread_mutex_t lock;
    pthread_cond_t wake;  /* workers wait here for a new generation */
    pthread_cond_t done;  /* the caller waits here for active == 0 */
    pthread_mutex_t run_lock; /* one run at a time */
    uint64_t generation;
    int active; /* workers still inside the current job */
    int stop;
    /* the current job */
    nb_range_fn fn;
    void *ctx;
    int64_t n, chunk;
    atomic_llong next;
};

static _Thread_local int nb_in_pool; /* set inside pool work: nested runs go inline */

static void nb_pool_work(nb_threadpool *p) {
    for (;;) {
        int64_t begin = atomic_fetch_add(&p->next, p->chunk);
        if (begin >= p->n) break;
        int64_t end = begin + p->chunk < p->n ? begin + p->chunk : p->n;
        p->fn(p->ctx, begin, end);
    }
}

static void *nb_pool_main(void *arg) {
    nb_threadpool *p = arg;
    uint64_t seen = 0;
    nb_in_pool = 1;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->wake, &p->lock);
        if (p->stop) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->lock);
        nb_pool_work(p);
        pthread_mutex_lock(&p->lock);
        if (--p->active == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

nb_status nb_threadpool_create(int threads, nb_threadpool **out) {
    NB_CHECK_ARG(out);
    *out = NULL;
    if (threads < 1 || threads > 4096)
        return nb_error(NB_ERR_INVALID_ARG, "nb_threadpool_create: threads=%d (want 1..4096)",
                        threads);
    nb_threadpool *p = nb_calloc(sizeof *p, 16);
    if (!p) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_threadpool_create: out of host memory");
    p->threads = threads;
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->run_lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->next, 0);
    if (threads > 1) {
        p->workers = nb_calloc(sizeof(pthread_t) * (size_t)(threads - 1), 16);
        if (!p->workers) {
            nb_threadpool_destroy(p);
            return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_threadpool_create: out of host memory");
        }
        for (int i = 0; i < threads - 1; i++) {
            if (pthread_create(&p->workers[i], NULL, nb_pool_main, p) != 0) {
                /* Run with the threads we got rather than fail. */
                NB_LOG_W("thread pool: could only start %d of %d threads", i + 1, threads);
                break;
            }
            p->nworkers++;
        }
        p->threads = p->nworkers + 1;
    }
    *out = p;
    return NB_OK;
}

void nb_threadpool_destroy(nb_threadpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->nworkers; i++) pthread_join(p->workers[i], NULL);
    if (p->workers) nb_free(p->workers, sizeof(pthread_t) * (size_t)(p->threads - 1));
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->run_lock);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    nb_free(p, sizeof *p);
}

int nb_threadpool_size(const nb_threadpool *p) { return p ? p->threads : 1; }

void nb_threadpool_run(nb_threadpool *p, int64_t n, int64_t grain, nb_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (!p || p->nworkers == 0 || nb_in_pool || n <= grain) {
        fn(ctx, 0, n);
        return;
    }
    /* About four chunks per thread balances uneven work without much counter traffic. */
    int64_t chunk = (n + (int64_t)p->threads * 4 - 1) / ((int64_t)p->threads * 4);
    if (chunk < grain) chunk = grain;
    pthread_mutex_lock(&p->run_lock);
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->chunk = chunk;
    atomic_store(&p->next, 0);
    p->active = p->nworkers;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);

    nb_in_pool = 1;
    nb_pool_work(p);
    nb_in_pool = 0;

    pthread_mutex_lock(&p->lock);
    while (p->active > 0) pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&p->run_lock);
}

static nb_threadpool *nb_global_pool;
static pthread_once_t nb_global_once = PTHREAD_ONCE_INIT;

static void nb_global_pool_destroy(void) { nb_threadpool_destroy(nb_global_pool); }

static void nb_global_pool_init(void) {
    long n = 1;
    if (nb_env_threads(&n) != NB_OK) /* a bad $NABLA_THREADS: said once, the CPU count used */
        NB_LOG_W("%s; using %ld threads", nb_last_error(), n);
    if (nb_threadpool_create((int)n, &nb_global_pool) == NB_OK)
        atexit(nb_global_pool_destroy);
    else
        nb_global_pool = NULL;
}

nb_threadpool *nb_threadpool_global(void) {
    pthread_once(&nb_global_once, nb_global_pool_init);
    return nb_global_pool;
}

/* Checks at nabla's sync points (sync_check.h). A device keeps a small array of (fn, ctx) under
 * its own mutex and one posted error; `active` (registered checks + a posted error) lets the sync
 * points skip everything with two atomic loads when no module on the device defers checks. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "device/device_impl.h"
#include "device/sync_check.h"
#include "nabla/alloc.h"

nb_status nb_device_add_sync_check(nb_device *dev, nb_sync_check_fn fn, void *ctx) {
    nb_sync_checks *c = &dev->checks;
    pthread_mutex_lock(&c->lock);
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 8;
        nb_sync_check *a = nb_alloc(sizeof *a * (size_t)cap, 16);
        if (!a) {
            pthread_mutex_unlock(&c->lock);
            return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: no host memory for a sync check", dev->name);
        }
        if (c->n) memcpy(a, c->a, sizeof *a * (size_t)c->n);
        if (c->a) nb_free(c->a, sizeof *c->a * (size_t)c->cap);
        c->a = a, c->cap = cap;
    }
    c->a[c->n++] = (nb_sync_check){fn, ctx};
    atomic_fetch_add(&c->active, 1);
    pthread_mutex_unlock(&c->lock);
    return NB_OK;
}

void nb_device_remove_sync_check(nb_device *dev, nb_sync_check_fn fn, void *ctx) {
    nb_sync_checks *c = &dev->checks;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->n; i++)
        if (c->a[i].fn == fn && c->a[i].ctx == ctx) {
            c->a[i] = c->a[--c->n];
            atomic_fetch_sub(&c->active, 1);
            break;
        }
    pthread_mutex_unlock(&c->lock);
}

void nb_device_post_error(nb_device *dev, nb_status code, const char *msg) {
    nb_sync_checks *c = &dev->checks;
    pthread_mutex_lock(&c->lock);
    if (!c->posted) {
        c->posted = code;
        snprintf(c->msg, sizeof c->msg, "%s", msg);
        atomic_fetch_add(&c->active, 1);
    } else { /* (one is reported; say the others rather than drop them silently) */
        fprintf(stderr, "nabla: %s: a further deferred error, not reported: %s\n", dev->name, msg);
    }
    pthread_mutex_unlock(&c->lock);
}

nb_status nb_device_run_sync_checks(nb_device *dev) {
    nb_sync_checks *c = &dev->checks;
    if (!atomic_load_explicit(&c->active, memory_order_acquire)) return NB_OK;
    nb_status s = NB_OK;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->n && !s; i++) s = c->a[i].fn(c->a[i].ctx);
    if (!s && c->posted) {
        s = nb_error(c->posted, "%s", c->msg);
        c->posted = NB_OK, c->msg[0] = '\0';
        atomic_fetch_sub(&c->active, 1);
    }
    pthread_mutex_unlock(&c->lock);
    return s;
}

nb_status nb_device_wait(nb_device *dev) { return dev->ops->synchronize(dev); }

void nb_device_sync_checks_close(nb_device *dev) {
    nb_sync_checks *c = &dev->checks;
    if (c->posted) fprintf(stderr, "nabla: %s closed with a deferred error never reported: %s\n", dev->name, c->msg);
    if (c->a) nb_free(c->a, sizeof *c->a * (size_t)c->cap);
    pthread_mutex_destroy(&c->lock);
}

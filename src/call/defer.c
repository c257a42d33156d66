/* Deferred bounds checks (nb_call_defer_checks; include/nabla/module.h, docs/PYTHON.md).
 *
 * A checked launch normally reads its out-of-range record back when it returns: on CUDA a stream
 * synchronisation per launch (~8 µs of a ~20 µs slangtorch launchRaw). A deferred launch instead
 * gets a record of its own in a ring of records in host-mapped memory (nb_host_mapped_alloc), and
 * a kernel that goes out of bounds fills its record and then sets the ring's one `note` word. The
 * host looks at that word only, without waiting, at the module's check points:
 *   - the start of every later call or launch of a function of the module (deferred or not),
 *   - nb_module_check (which first waits for the device: every launch so far is checked),
 *   - refreshing reflection (a constant changed) and freeing the module,
 *   - the device's sync points, where nabla waits for the device on the user's behalf
 *     (nb_device_synchronize, nb_tensor_to_host, copies into host memory: device/sync_check.h;
 *     the module registers a check there when it makes its ring). A module freed with an error
 *     pending hands it to its device, whose next sync point returns it.
 * Once the note is seen the device is synchronised (error path only), every record is read, and
 * the first offending launch (lowest launch number) becomes the error, naming its function and its
 * launch number; the records and the note are cleared, so one error is reported once.
 *
 * Slots: launch n (1-based, per module) writes slot (n - 1) % NB_DEFER_SLOTS, so a slot names its
 * launch exactly as long as a slot is never handed out while its previous launch may still run.
 * An event is recorded on the device stream at the start of every half of the ring; before a half
 * is reused the event of the half before it is waited for (it follows every launch of the half
 * being reused). With the GPU keeping up this never waits; with NB_DEFER_SLOTS / 2 launches queued
 * ahead of the GPU the host waits for it, as CUDA's own launch queue does when it is full.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "call/call_internal.h"
#include "core/util.h"
#include "device/sync_check.h"
#include "nabla/alloc.h"
#include "nabla/log.h"

#define HALF (NB_DEFER_SLOTS / 2)

static unsigned note_get(const nb_defer *d) { return atomic_load_explicit((_Atomic unsigned *)d->note, memory_order_acquire); }

static nb_status defer_new(nb_module *m, nb_defer **out) {
    nb_defer *d = nb_alloc(sizeof *d, 64);
    if (!d) return nb_error(NB_ERR_OUT_OF_MEMORY, "deferred bounds checks: out of host memory");
    memset(d, 0, sizeof *d);
    void *host = NULL;
    uint64_t dev = 0;
    size_t bytes = sizeof(nb_oob_rec) * NB_DEFER_SLOTS + 64; /* the records, then the note word */
    nb_status s = nb_host_mapped_alloc(m->dev, bytes, &host, &dev);
    for (int k = 0; s == NB_OK && k < 2; k++) s = nb_event_create(m->dev, &d->mark[k]);
    if (s) {
        for (int k = 0; k < 2; k++)
            if (d->mark[k]) nb_event_destroy(d->mark[k]);
        nb_host_mapped_free(m->dev, host);
        nb_free(d, sizeof *d);
        return s;
    }
    d->rec = host;
    d->rec_dev = dev;
    d->note = (unsigned *)((char *)host + sizeof(nb_oob_rec) * NB_DEFER_SLOTS);
    uint64_t note_dev = dev + sizeof(nb_oob_rec) * NB_DEFER_SLOTS;
    for (int k = 0; k < NB_DEFER_SLOTS; k++) d->rec[k].note = note_dev;
    *out = d;
    return NB_OK;
}

/* Waits for the device, then turns the first filled record into d->err (the others are counted,
 * all are cleared). Caller holds the module lock. */
static void resolve(nb_module *m, nb_defer *d) {
    nb_status s = nb_device_wait(m->dev); /* (not nb_device_synchronize: its checks take this lock) */
    if (s) { /* (the device failed: that is the error to report) */
        if (!d->err) {
            d->err = s;
            snprintf(d->msg, sizeof d->msg, "%s", nb_last_error());
        }
        return;
    }
    int first = -1; /* (the lowest launch number: later ones are cleared with it) */
    for (int k = 0; k < NB_DEFER_SLOTS; k++)
        if (d->rec[k].flag && (first < 0 || d->log[k].seq < d->log[first].seq)) first = k;
    if (first >= 0 && !d->err) {
        const nb_defer_log *g = &d->log[first];
        char tail[96];
        snprintf(tail, sizeof tail, " (launch #%llu of this module, reported late)", (unsigned long long)g->seq);
        d->err = nb_call_oob_error(&d->rec[first], &g->e->layout, g->f, g->overload, g->nleaves, tail);
        snprintf(d->msg, sizeof d->msg, "%s", nb_last_error());
    }
    for (int k = 0; k < NB_DEFER_SLOTS; k++)
        if (d->rec[k].flag) memset(&d->rec[k], 0, offsetof(nb_oob_rec, note));
    atomic_store_explicit((_Atomic unsigned *)d->note, 0u, memory_order_release);
}

/* The pending error, if any (cleared: reported once). Caller holds the module lock. */
static nb_status take(nb_defer *d) {
    if (!d->err) return NB_OK;
    nb_status s = nb_error(d->err, "%s", d->msg);
    d->err = NB_OK;
    d->msg[0] = '\0';
    return s;
}

nb_status nb_defer_check(nb_module *m) {
    nb_defer *d = m->defer; /* (set once, under the lock, before any deferred launch) */
    if (!d || (!note_get(d) && !d->err)) return NB_OK;
    pthread_mutex_lock(&m->lock);
    if (note_get(d)) resolve(m, d);
    nb_status s = take(d);
    pthread_mutex_unlock(&m->lock);
    return s;
}

/* The module's check at its device's sync points (registered with the ring, removed before it
 * is freed). */
static nb_status sync_check(void *ctx) { return nb_defer_check(ctx); }

nb_status nb_defer_slot(nb_call *c, const nb_kentry *e, uint64_t *addr) {
    nb_module *m = c->f->m;
    nb_status s = NB_OK;
    int made = 0;
    pthread_mutex_lock(&m->lock);
    if (!m->defer && !m->defer_off) {
        if (defer_new(m, &m->defer) == NB_OK) {
            made = 1;
        } else { /* (no host-mapped memory here: this module's launches keep the immediate check) */
            NB_LOG_W("%s: deferred bounds checks unavailable, checking every launch: %s",
                     m->name ? m->name : "module", nb_last_error());
            m->defer_off = 1;
        }
    }
    nb_defer *d = m->defer;
    if (!d) {
        c->defer = 0;
        *addr = 0;
        pthread_mutex_unlock(&m->lock);
        return NB_OK;
    }
    {
        uint64_t n = d->seq + 1;
        int slot = (int)((n - 1) % NB_DEFER_SLOTS);
        if (slot % HALF == 0) { /* a new half: its slots' last launches (a lap ago) must be done */
            uint64_t lap = (n - 1) / HALF; /* half-laps so far */
            if (lap >= 2) s = nb_event_synchronize(d->mark[(lap - 1) % 2]);
            /* (on the launch's stream: a module's launches on several streams at once are named
             * exactly only while none runs a whole ring behind) */
            if (s == NB_OK) s = nb_event_record(d->mark[lap % 2], c->stream ? c->stream : nb_device_stream(m->dev));
        }
        if (s == NB_OK && d->rec[slot].flag) { /* (a late report landed in the slot: say it first) */
            resolve(m, d);
            s = take(d);
        }
        if (s == NB_OK) {
            d->seq = n;
            d->log[slot] = (nb_defer_log){n, c->f, e, c->overload, c->nleaves};
            *addr = d->rec_dev + (uint64_t)slot * sizeof(nb_oob_rec);
        }
    }
    pthread_mutex_unlock(&m->lock);
    /* (after the unlock: a device's check list lock comes before module locks) */
    if (made && nb_device_add_sync_check(m->dev, sync_check, m) == NB_OK) d->registered = 1;
    else if (made) NB_LOG_W("%s: deferred bounds errors are reported at the module's check points only: %s",
                            m->name ? m->name : "module", nb_last_error());
    return s;
}

nb_status nb_module_check(nb_module *m) {
    if (!m) return nb_error(NB_ERR_INVALID_ARG, "nb_module_check: argument 'm' is NULL");
    pthread_mutex_lock(&m->lock);
    nb_status s = NB_OK;
    if (m->defer) {
        resolve(m, m->defer);
        s = take(m->defer);
    }
    pthread_mutex_unlock(&m->lock);
    return s;
}

void nb_defer_settle(nb_module *m) {
    if (m->defer && m->defer->seq) resolve(m, m->defer);
}

void nb_defer_free(nb_module *m) {
    nb_defer *d = m->defer;
    if (!d) return;
    if (d->registered) nb_device_remove_sync_check(m->dev, sync_check, m); /* (first: no check may run on it) */
    if (d->seq) resolve(m, d); /* (no kernel may write the records once they are freed) */
    if (d->err) { /* nothing is left to return it from here: the device's next sync point does */
        char msg[sizeof d->msg + 160];
        snprintf(msg, sizeof msg, "%s (module '%s' was freed before this was reported)", d->msg,
                 m->name ? m->name : "?");
        nb_device_post_error(m->dev, d->err, msg);
    }
    for (int k = 0; k < 2; k++) nb_event_destroy(d->mark[k]);
    nb_host_mapped_free(m->dev, d->rec);
    nb_free(d, sizeof *d);
    m->defer = NULL;
}

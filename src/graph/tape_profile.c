/* Per-op profiler of the tape (nn_tape.h: nb_tape_set_profiling): every op's forward and
 * backward timed by CUDA events on the tape's stream (device time) or a monotonic clock (CPU),
 * aggregated in rows per op kind (conv2d split by kernel size and stride; level 2: and shape).
 *
 * CUDA: each timed op takes a pair of events from a grow-only pool (created on growth only) and
 * a pending entry {row, direction}; the times are read at nb_tape_prof_collect (the next
 * nb_tape_reset, a report, turning profiling off), which waits for the last event. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nabla/alloc.h"
#include "nabla/device.h"
#include "graph/tape_internal.h"

typedef struct prof_row {
    int kind, sub;                 /* sub: conv2d 0 = other, 1 = 1x1, 2 = 3x3, 3 = 3x3 stride 2 */
    int nd_in, nd_out;             /* level 2: the shapes in the key (else 0) */
    int64_t in[NB_TAPE_MAX_DIMS], out[NB_TAPE_MAX_DIMS];
    int64_t calls[2];
    double ms[2], host_ms[2];
} prof_row;

typedef struct prof_pend {
    int32_t row;
    int32_t dir;
} prof_pend;

struct nb_tape_prof {
    prof_row *rows;
    int32_t n_rows, rows_cap;
    int64_t passes;
    int rows_level; /* the level the rows were keyed at */
    /* CUDA: events 2k, 2k + 1 bracket pending entry k */
    nb_event **ev;
    int32_t ev_cap;
    prof_pend *pend;
    int32_t n_pend, pend_cap;
};

static double prof_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Grow-only array of elem-size items (plain host memory; growth only, never in steady state). */
static nb_status prof_grow(void **arr, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return NB_OK;
    int32_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *n = realloc(*arr, (size_t)nc * elem);
    if (!n) return nb_error(NB_ERR_OUT_OF_MEMORY, "tape profiler: out of host memory");
    memset((char *)n + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    *arr = n;
    *cap = nc;
    return NB_OK;
}

static int prof_sub(const nb_tape *t, const nb_top *op) {
    if (op->kind != NB_TOP_CONV2D) return 0;
    int64_t k = t->vals[op->in[1]].shape[2];
    if (k == 1) return 1;
    if (k == 3) return op->ip[0] == 2 ? 3 : 2;
    return 0;
}

/* The row of op (found or appended). */
static nb_status prof_row_of(nb_tape *t, const nb_top *op, int32_t *out) {
    struct nb_tape_prof *p = t->prof;
    prof_row key;
    memset(&key, 0, sizeof key);
    key.kind = op->kind;
    key.sub = prof_sub(t, op);
    if (t->prof_level >= 2) {
        const nb_tval *y = &t->vals[op->out];
        if (op->in[0] >= 0) {
            const nb_tval *x = &t->vals[op->in[0]];
            key.nd_in = x->ndim;
            memcpy(key.in, x->shape, (size_t)x->ndim * sizeof(int64_t));
        }
        key.nd_out = y->ndim;
        memcpy(key.out, y->shape, (size_t)y->ndim * sizeof(int64_t));
    }
    for (int32_t i = 0; i < p->n_rows; i++) {
        const prof_row *r = &p->rows[i];
        if (r->kind == key.kind && r->sub == key.sub && r->nd_in == key.nd_in &&
            r->nd_out == key.nd_out && !memcmp(r->in, key.in, sizeof key.in) &&
            !memcmp(r->out, key.out, sizeof key.out)) {
            *out = i;
            return NB_OK;
        }
    }
    nb_status s = prof_grow((void **)&p->rows, &p->rows_cap, p->n_rows + 1, sizeof(prof_row));
    if (s) return s;
    p->rows[p->n_rows] = key;
    *out = p->n_rows++;
    return NB_OK;
}

/* Event pair for pending entry k (created on growth). */
static nb_status prof_events(nb_tape *t, int32_t k) {
    struct nb_tape_prof *p = t->prof;
    int32_t need = 2 * (k + 1);
    if (need <= p->ev_cap) return NB_OK;
    int32_t old = p->ev_cap;
    nb_status s = prof_grow((void **)&p->ev, &p->ev_cap, need, sizeof(nb_event *));
    if (s) return s;
    for (int32_t i = old; i < p->ev_cap; i++)
        if ((s = nb_event_create(t->dev, &p->ev[i]))) {
            for (int32_t j = old; j < i; j++) nb_event_destroy(p->ev[j]);
            p->ev_cap = old; /* the pool keeps only created events */
            return s;
        }
    return NB_OK;
}

nb_status nb_tape_prof_run(nb_tape *t, nb_top *op, int backward) {
    struct nb_tape_prof *p = t->prof;
    int cuda = nb_tape_on_cuda(t);
    int32_t k = p->n_pend, row;
    nb_status s;
    if (cuda) {
        if ((s = prof_events(t, k)) ||
            (s = prof_grow((void **)&p->pend, &p->pend_cap, k + 1, sizeof(prof_pend))) ||
            (s = nb_event_record(p->ev[2 * k], nb_device_stream(t->dev))))
            return s;
    }
    double h0 = prof_now_ms();
    s = nb_tape_run_op(t, op, backward);
    double h1 = prof_now_ms();
    if (s) return s;
    if ((s = prof_row_of(t, op, &row))) return s;
    prof_row *r = &p->rows[row];
    r->calls[backward]++;
    r->host_ms[backward] += h1 - h0;
    if (!cuda) {
        r->ms[backward] += h1 - h0;
        return NB_OK;
    }
    if ((s = nb_event_record(p->ev[2 * k + 1], nb_device_stream(t->dev)))) return s;
    p->pend[k].row = row;
    p->pend[k].dir = backward;
    p->n_pend = k + 1;
    return NB_OK;
}

nb_status nb_tape_prof_collect(nb_tape *t) {
    struct nb_tape_prof *p = t->prof;
    if (!p || !p->n_pend) return NB_OK;
    int32_t n = p->n_pend;
    p->n_pend = 0;
    nb_status s = nb_event_synchronize(p->ev[2 * n - 1]);
    if (s) return s;
    for (int32_t k = 0; k < n; k++) {
        float ms = 0;
        if ((s = nb_event_elapsed_ms(p->ev[2 * k], p->ev[2 * k + 1], &ms))) return s;
        p->rows[p->pend[k].row].ms[p->pend[k].dir] += ms;
    }
    return NB_OK;
}

void nb_tape_prof_pass(nb_tape *t) {
    if (t->prof) t->prof->passes++;
}

void nb_tape_prof_free(nb_tape *t) {
    struct nb_tape_prof *p = t->prof;
    if (!p) return;
    if (p->n_pend && p->ev_cap) nb_event_synchronize(p->ev[2 * p->n_pend - 1]);
    for (int32_t i = 0; i < p->ev_cap; i++) nb_event_destroy(p->ev[i]);
    free(p->ev);
    free(p->rows);
    free(p->pend);
    free(p);
    t->prof = NULL;
    t->prof_level = 0;
}

/* ---- public API ----------------------------------------------------------------------------- */

nb_status nb_tape_profile_reset(nb_tape *t) {
    if (!t) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_profile_reset: tape is NULL");
    struct nb_tape_prof *p = t->prof;
    if (!p) return NB_OK;
    nb_status s = nb_tape_prof_collect(t); /* waits, so the pool can be reused */
    p->n_rows = 0;
    p->passes = 0;
    return s;
}

nb_status nb_tape_set_profiling(nb_tape *t, int level) {
    if (!t) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_set_profiling: tape is NULL");
    if (level < 0 || level > 2)
        return nb_error(NB_ERR_INVALID_ARG,
                        "nb_tape_set_profiling: level %d is not 0 (off), 1 (per op kind) or 2 "
                        "(per op kind and shape)", level);
    if (level && !t->prof) {
        t->prof = calloc(1, sizeof *t->prof);
        if (!t->prof) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_tape_set_profiling: out of memory");
    }
    nb_status s = nb_tape_prof_collect(t);
    if (s) return s;
    if (level) {
        /* rows keyed at another granularity: start afresh */
        if (t->prof->rows_level != level && (s = nb_tape_profile_reset(t))) return s;
        t->prof->rows_level = level;
    }
    t->prof_level = level;
    return NB_OK;
}

static double row_total(const prof_row *r) { return r->ms[0] + r->ms[1]; }

static int row_cmp(const void *a, const void *b) {
    double x = row_total(a), y = row_total(b);
    return x < y ? 1 : x > y ? -1 : 0;
}

static void shape_str(char *buf, size_t cap, int nd, const int64_t *s) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < nd && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? "," : "", (long long)s[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

static void row_name(const prof_row *r, char *buf, size_t cap) {
    static const char *const subs[] = {"", " 1x1", " 3x3", " 3x3 s2"};
    const char *base = nb_tape_op_name(r->kind);
    char a[64] = "", b[64] = "", tmp[256];
    if (r->nd_in || r->nd_out) {
        shape_str(a, sizeof a, r->nd_in, r->in);
        shape_str(b, sizeof b, r->nd_out, r->out);
    }
    snprintf(tmp, sizeof tmp, "%s%s%s%s%s", base ? base : "?", subs[r->sub & 3], a[0] ? " " : "",
             a, b[0] ? "->" : "");
    size_t n = strlen(tmp), m = strlen(b);
    if (n + m >= sizeof tmp) m = sizeof tmp - 1 - n;
    memcpy(tmp + n, b, m);
    tmp[n + m] = 0;
    n += m;
    if (n >= cap) n = cap - 1;
    memcpy(buf, tmp, n);
    buf[n] = 0;
}

nb_status nb_tape_profile_rows(nb_tape *t, nb_tape_profile_row *rows, int cap, int *n,
                               int64_t *passes) {
    if (!t || !n) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_profile_rows: tape or n is NULL");
    if (cap < 0 || (cap > 0 && !rows))
        return nb_error(NB_ERR_INVALID_ARG, "nb_tape_profile_rows: rows is NULL with cap %d", cap);
    *n = 0;
    if (passes) *passes = 0;
    struct nb_tape_prof *p = t->prof;
    if (!p) return NB_OK;
    nb_status s = nb_tape_prof_collect(t);
    if (s) return s;
    qsort(p->rows, (size_t)p->n_rows, sizeof(prof_row), row_cmp);
    *n = p->n_rows;
    if (passes) *passes = p->passes;
    for (int32_t i = 0; i < p->n_rows && i < cap; i++) {
        const prof_row *r = &p->rows[i];
        nb_tape_profile_row *o = &rows[i];
        row_name(r, o->name, sizeof o->name);
        for (int d = 0; d < 2; d++) {
            o->calls[d] = r->calls[d];
            o->ms[d] = r->ms[d];
            o->host_ms[d] = r->host_ms[d];
        }
    }
    return NB_OK;
}

/* Appends to buf (tracks the size that would be needed). */
typedef struct rep_buf {
    char *buf;
    size_t cap, len;
} rep_buf;

static void rep(rep_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rep(rep_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = b->len < b->cap ? b->cap - b->len : 0;
    int n = vsnprintf(room ? b->buf + b->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) b->len += (size_t)n;
}

nb_status nb_tape_profile_report(nb_tape *t, char *buf, size_t cap) {
    if (!t || !buf || !cap)
        return nb_error(NB_ERR_INVALID_ARG, "nb_tape_profile_report: tape or buf is NULL, or cap 0");
    buf[0] = 0;
    int n = 0;
    int64_t passes = 0;
    nb_status s = nb_tape_profile_rows(t, NULL, 0, &n, &passes);
    if (s) return s;
    nb_tape_profile_row *rows = n ? calloc((size_t)n, sizeof *rows) : NULL;
    if (n && !rows) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_tape_profile_report: out of memory");
    if (n && (s = nb_tape_profile_rows(t, rows, n, &n, &passes))) {
        free(rows);
        return s;
    }
    int cuda = nb_tape_on_cuda(t);
    double div = passes > 0 ? (double)passes : 1.0;
    double tot[2] = {0, 0}, htot[2] = {0, 0};
    int64_t ctot[2] = {0, 0};
    size_t w = 24;
    for (int i = 0; i < n; i++) {
        for (int d = 0; d < 2; d++)
            tot[d] += rows[i].ms[d], htot[d] += rows[i].host_ms[d], ctot[d] += rows[i].calls[d];
        if (strlen(rows[i].name) > w) w = strlen(rows[i].name);
    }
    double all = tot[0] + tot[1];
    rep_buf b = {buf, cap, 0};
    rep(&b, "tape profile: %s time, %s%lld backward pass%s (%s)\n",
        cuda ? "CUDA event (device)" : "CPU wall", passes > 0 ? "per step over " : "totals, ",
        (long long)passes, passes == 1 ? "" : "es",
        cuda ? "host ms = time spent issuing the ops" : "ms = wall time of each op");
    rep(&b, "%-*s %9s %10s %9s %10s %10s %6s %6s %9s %9s\n", (int)w, "op", "fwd calls",
        "fwd ms", "bwd calls", "bwd ms", "total ms", "share", "cum", "host fwd", "host bwd");
    double cum = 0;
    for (int i = 0; i < n; i++) {
        const nb_tape_profile_row *r = &rows[i];
        double t2 = r->ms[0] + r->ms[1];
        cum += t2;
        rep(&b, "%-*s %9.1f %10.3f %9.1f %10.3f %10.3f %5.1f%% %5.1f%% %9.3f %9.3f\n", (int)w,
            r->name, (double)r->calls[0] / div, r->ms[0] / div, (double)r->calls[1] / div,
            r->ms[1] / div, t2 / div, all > 0 ? 100.0 * t2 / all : 0.0,
            all > 0 ? 100.0 * cum / all : 0.0, r->host_ms[0] / div, r->host_ms[1] / div);
    }
    rep(&b, "%-*s %9.1f %10.3f %9.1f %10.3f %10.3f %5.1f%% %6s %9.3f %9.3f\n", (int)w, "total",
        (double)ctot[0] / div, tot[0] / div, (double)ctot[1] / div, tot[1] / div, all / div,
        all > 0 ? 100.0 : 0.0, "", htot[0] / div, htot[1] / div);
    free(rows);
    if (b.len >= cap)
        return nb_error(NB_ERR_INVALID_ARG,
                        "nb_tape_profile_report: buffer of %zu bytes too small (needs %zu)", cap,
                        b.len + 1);
    return NB_OK;
}

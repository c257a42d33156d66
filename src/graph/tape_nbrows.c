/* The tape's rows written in the kernel language (tape_internal.h nb_tape_nb_*): functions of
 * lib/nn_ops.nb run over tape memory through prepared calls (include/nabla/module.h).
 *
 * A row's first launch for a (function, count, dtypes, alignment) wraps the tape's pointers as
 * 1-D arrays, binds the call and compiles the kernel (once per signature, cached in memory and on
 * disk), and keeps the prepared call; every later launch of that kind sets the two addresses and
 * queues the kernel on the device's stream. Alignment is part of the key because the CUDA kernel
 * of 4-element-aligned arrays loads 4 elements at once (contig4): an unaligned view (a parameter
 * slice) gets the scalar kernel instead of failing the set. The cache keeps at most
 * NB_TAPE_MAX_PREPS calls (a loop whose shapes keep changing evicts the oldest). */
#include <string.h>

#include "graph/tape_internal.h"
#include "core/util.h"
#include "nabla/alloc.h"
#include "nabla/module.h"

#define NB_TAPE_MAX_PREPS 64

static const char *const nbfn_name[NB_TNB_COUNT] = {[NB_TNB_SILU] = "nn_silu"};

struct nb_tape_prep {
    int fn;
    int64_t n;
    nb_dtype xdt, ydt;
    int aligned;       /* both addresses a multiple of 4 elements */
    nb_prepared *p;    /* slots: 0 = x, 1 = _result */
};

void nb_tape_nb_free(nb_tape *t) {
    for (int i = 0; i < t->n_preps; i++) nb_prepared_free(t->preps[i].p);
    if (t->preps) nb_free(t->preps, sizeof *t->preps * (size_t)t->preps_cap);
    t->preps = NULL;
    t->n_preps = t->preps_cap = 0;
    nb_module_free(t->nb_mod);
    t->nb_mod = NULL;
}

static int aligned4(const void *p, nb_dtype dt) { return (uintptr_t)p % (4 * nb_tape_dt_size(dt)) == 0; }

/* A new prepared call of fn over x -> y (the tape's memory wrapped for the binding only). */
static nb_status prepare(nb_tape *t, nb_tape_nbfn fn, const void *x, nb_dtype xdt, void *y, nb_dtype ydt, int64_t n,
                         nb_prepared **out) {
    if (!t->nb_mod) NB_TRY(nb_module_load_source(t->dev, "nn_ops_tape.nb", "import nn_ops;\n", NULL, &t->nb_mod));
    nb_func *f;
    NB_TRY(nb_module_func(t->nb_mod, nbfn_name[fn], &f));
    nb_tensor *tx = NULL, *ty = NULL;
    nb_call *c = NULL;
    nb_status s = nb_tensor_wrap(t->dev, xdt, 1, &n, NULL, (void *)x, &tx);
    if (!s) s = nb_tensor_wrap(t->dev, ydt, 1, &n, NULL, y, &ty);
    if (!s) s = nb_call_begin(f, &c);
    if (!s) {
        nb_call_arg(c, 0, tx);
        nb_call_result(c, ty);
        s = nb_call_prepare(c, out); /* (takes c) */
    }
    nb_tensor_free(tx);
    nb_tensor_free(ty);
    return s;
}

/* The cached prepared call for this kind of launch, made on first use. */
static nb_status find(nb_tape *t, nb_tape_nbfn fn, const void *x, nb_dtype xdt, void *y, nb_dtype ydt, int64_t n,
                      nb_prepared **out) {
    int al = aligned4(x, xdt) && aligned4(y, ydt);
    for (int i = 0; i < t->n_preps; i++) {
        const struct nb_tape_prep *q = &t->preps[i];
        if (q->fn == (int)fn && q->n == n && q->xdt == xdt && q->ydt == ydt && q->aligned == al) {
            *out = q->p;
            return NB_OK;
        }
    }
    if (t->n_preps == NB_TAPE_MAX_PREPS) { /* the oldest goes */
        nb_prepared_free(t->preps[0].p);
        memmove(t->preps, t->preps + 1, sizeof *t->preps * (size_t)(t->n_preps - 1));
        t->n_preps--;
    }
    if (t->n_preps == t->preps_cap) {
        int nc = t->preps_cap ? 2 * t->preps_cap : 8;
        struct nb_tape_prep *np = nb_alloc(sizeof *np * (size_t)nc, 16);
        if (!np) return nb_error(NB_ERR_OUT_OF_MEMORY, "tape: out of host memory");
        if (t->n_preps) memcpy(np, t->preps, sizeof *np * (size_t)t->n_preps);
        if (t->preps) nb_free(t->preps, sizeof *t->preps * (size_t)t->preps_cap);
        t->preps = np;
        t->preps_cap = nc;
    }
    nb_prepared *p = NULL;
    NB_TRY(prepare(t, fn, x, xdt, y, ydt, n, &p));
    t->preps[t->n_preps++] = (struct nb_tape_prep){.fn = fn, .n = n, .xdt = xdt, .ydt = ydt, .aligned = al, .p = p};
    *out = p;
    return NB_OK;
}

nb_status nb_tape_nb_unary(nb_tape *t, nb_tape_nbfn fn, const void *x, nb_dtype xdt, void *y, nb_dtype ydt, int64_t n) {
    if ((int)fn < 0 || fn >= NB_TNB_COUNT || n < 0 || n >= ((int64_t)1 << 31))
        return nb_error(NB_ERR_INTERNAL, "tape: .nb row %d over %lld elements", (int)fn, (long long)n);
    if (n == 0) return NB_OK;
    nb_prepared *p = NULL;
    NB_TRY(find(t, fn, x, xdt, y, ydt, n, &p));
    NB_TRY(nb_prepared_set_ptr(p, 0, (void *)x));
    NB_TRY(nb_prepared_set_ptr(p, 1, y));
    return nb_prepared_launch(p, NULL);
}

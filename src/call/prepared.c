/* Prepared calls (include/nabla/module.h "prepared calls"): a call bound once — overload, kernel
 * shape, dtypes, the compiled kernel, its parameter block — and relaunched over other arrays of
 * the same dtypes, shapes and strides.
 *
 * The binding is nb_call_record's (cmdlist.c uses it too); what is added here: slots (the bound
 * function's leaves), the checks that a new array or address keeps what the kernel was
 * specialised for (dtype, shape, strides; the alignment of contig4 / vec4 arrays; the overlap
 * rule of gradients added without atomics, bind.c nb_call_owned_grads), and a bounds-check
 * record of the call's own, never read by a launch.
 *
 * A launch writes the new addresses into the parameter block (they were checked when set) and
 * queues the kernel: nothing that allocates, hashes, locks, waits for the device or touches
 * host-mapped memory, so a CUDA graph may capture it. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "call/call_internal.h"
#include "core/util.h"
#include "device/sync_check.h"
#include "nabla/alloc.h"

/* What the array bound to an ARRAY / TENSOR leaf looked like at prepare time: every array set
 * later must look the same. */
typedef struct prep_leaf {
    int ndim;
    int64_t shape[NB_MAX_DIMS], strides[NB_MAX_DIMS];
    nb_dtype dtype;
    uint64_t align;   /* the data address must be a multiple (vec4 / contig4 arrays), else 1 */
    int narrowed;     /* an integer array range-checked at bind time: cannot be set */
} prep_leaf;

struct nb_prepared {
    nb_call *c;       /* the recorded call: its leaves, block and CPU bounds record */
    nb_kentry *e;     /* its kernel (lives in the function's cache while the module's generation
                         stays the same) */
    int gen;          /* the module generation it was prepared in */
    int cuda;
    int64_t n;        /* kernel indices */
    int owned;        /* some gradient is added without atomics (overlaps checked on set) */
    nb_buffer *oob;   /* CUDA, bounds-checked kernels: the record its launches write */
    prep_leaf leaf[NB_CALL_MAX_LEAVES + 1];
};

/* ---- preparing -------------------------------------------------------------------------------- */

static const nb_fn_leaf *leaf_info(const nb_call *c, int j) {
    const nb_fn_info *in = &c->f->infos[c->overload];
    return j < c->nleaves ? &in->leaves[j] : &in->results[j - c->nleaves];
}

/* The snapshot of leaf j (bound, materialized). */
static void snap_leaf(nb_prepared *p, int j) {
    const nb_call *c = p->c;
    const nb_leaf_bind *b = &c->leaves[j];
    prep_leaf *q = &p->leaf[j];
    q->align = 1;
    if ((b->bind != NB_BIND_ARRAY && b->bind != NB_BIND_TENSOR) || !b->tensor) return;
    q->ndim = nb_tensor_ndim(b->tensor);
    memcpy(q->shape, nb_tensor_shape(b->tensor), sizeof(int64_t) * (size_t)q->ndim);
    memcpy(q->strides, nb_tensor_strides(b->tensor), sizeof(int64_t) * (size_t)q->ndim);
    q->dtype = nb_tensor_dtype(b->tensor);
    const nb_leaf_sig *ls = &c->sig.leaves[j];
    if (ls->vec4) q->align = 16;
    if (c->sig.contig4 && b->bind == NB_BIND_ARRAY && !ls->bcast) q->align = 4 * (uint64_t)nb_dtype_size(b->storage);
    const nb_fn_leaf *l = leaf_info(c, j);
    q->narrowed = l->dir != 1 && nb_call_int_narrowed(q->dtype, l->scalar);
}

nb_status nb_call_prepare(nb_call *c, nb_prepared **out) {
    if (out) *out = NULL;
    if (!c) return nb_error(NB_ERR_INVALID_ARG, "nb_call_prepare: argument 'c' is NULL");
    if (!out) {
        nb_call_free(c);
        return nb_error(NB_ERR_INVALID_ARG, "nb_call_prepare: argument 'out' is NULL");
    }
    if (c->defer || c->blocks) {
        nb_status s = nb_error(NB_ERR_UNSUPPORTED, "nb_call_prepare: %s: a prepared call has its own bounds record "
                               "(nb_prepared_check): it takes neither deferred checks nor explicit blocks",
                               nb_func_name(c->f));
        nb_call_free(c);
        return s;
    }
    nb_prepared *p = nb_calloc(sizeof *p, 64);
    if (!p) {
        nb_call_free(c);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_call_prepare: out of host memory");
    }
    nb_kentry *e = NULL;
    nb_status s = nb_call_record(c, NULL, 0, NULL, NULL, &e); /* (frees c on failure) */
    if (s) {
        nb_free(p, sizeof *p);
        return s;
    }
    p->c = c;
    p->e = e;
    p->gen = c->f->gen;
    p->cuda = nb_jit_kernel_kind(e->kernel) != NB_DEVICE_CPU;
    p->n = 1;
    for (int k = 0; k < c->kdim; k++) p->n *= c->kshape[k];
    for (int j = 0; j < c->sig.nleaves; j++) {
        snap_leaf(p, j);
        p->owned |= c->sig.leaves[j].owned;
    }
    nb_device *dev = c->f->m->dev;
    if (p->cuda && e->layout.bounds_checked) { /* a record of its own (the module's is read per call) */
        s = nb_buffer_alloc(dev, sizeof(nb_oob_rec), &p->oob);
        if (!s) s = nb_memset(dev, nb_buffer_ptr(p->oob), 0, sizeof(nb_oob_rec));
        if (!s) {
            uint64_t a = (uint64_t)(uintptr_t)nb_buffer_ptr(p->oob);
            memcpy(c->block + e->layout.oob_offset, &a, sizeof a);
        }
    }
    /* what prepare queued on the device's stream (uploads, the record's reset) is done before a
     * launch on any stream (a call with neither queued nothing: it may be prepared while a CUDA
     * graph is being captured) */
    int temps = 0;
    for (int j = 0; j < c->sig.nleaves; j++) temps |= c->leaves[j].owns_tensor;
    if (!s && p->cuda && (temps || p->oob)) s = nb_device_wait(dev);
    if (s) {
        nb_prepared_free(p);
        return s;
    }
    *out = p;
    return NB_OK;
}

/* ---- slots ------------------------------------------------------------------------------------ */

static const char *slot_path(const nb_prepared *p, int j) { return leaf_info(p->c, j)->path; }

nb_status nb_prepared_slot(const nb_prepared *p, const char *path, int *slot) {
    if (slot) *slot = -1;
    if (!p || !path || !slot) return nb_error(NB_ERR_INVALID_ARG, "nb_prepared_slot: NULL argument");
    const nb_call *c = p->c;
    for (int j = 0; j < c->sig.nleaves; j++)
        if (!strcmp(slot_path(p, j), path)) {
            *slot = j;
            return NB_OK;
        }
    char list[512];
    size_t n = 0;
    list[0] = '\0';
    for (int j = 0; j < c->sig.nleaves && n < sizeof list; j++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", j ? ", " : "", slot_path(p, j));
    return nb_error(NB_ERR_NOT_FOUND, "nb_prepared_slot: %s has no slot '%s' (slots: %s)", nb_call_fname(c), path, list);
}

nb_status nb_prepared_param_slot(const nb_prepared *p, int index, int *slot) {
    if (slot) *slot = -1;
    if (!p || !slot) return nb_error(NB_ERR_INVALID_ARG, "nb_prepared_param_slot: NULL argument");
    const nb_call *c = p->c;
    int found = -1, count = 0;
    for (int j = 0; j < c->nleaves; j++)
        if (leaf_info(c, j)->param == index) {
            if (found < 0) found = j;
            count++;
        }
    if (found < 0)
        return nb_error(NB_ERR_INVALID_ARG, "nb_prepared_param_slot: %s has no parameter %d", nb_call_fname(c), index);
    if (count > 1 || strchr(slot_path(p, found), '.'))
        return nb_error(NB_ERR_INVALID_ARG, "nb_prepared_param_slot: parameter %d of %s is a struct: name one of its "
                        "fields with nb_prepared_slot (the first is '%s')", index, nb_call_fname(c), slot_path(p, found));
    *slot = found;
    return NB_OK;
}

/* ---- setting arrays ---------------------------------------------------------------------------- */

static nb_status check_slot(const nb_prepared *p, const char *who, int slot) {
    if (!p) return nb_error(NB_ERR_INVALID_ARG, "%s: prepared call is NULL", who);
    if (slot < 0 || slot >= p->c->sig.nleaves)
        return nb_error(NB_ERR_INVALID_ARG, "%s: slot %d out of range (%s has %d)", who, slot, nb_call_fname(p->c),
                        p->c->sig.nleaves);
    return NB_OK;
}

/* Leaf j may take an array (it was bound to one). */
static nb_status check_array_slot(const nb_prepared *p, const char *who, int j) {
    NB_TRY(check_slot(p, who, j));
    const nb_leaf_bind *b = &p->c->leaves[j];
    if (b->bind != NB_BIND_ARRAY && b->bind != NB_BIND_TENSOR)
        return nb_error(NB_ERR_INVALID_ARG, "%s: slot '%s' of %s was bound to %s, not an array", who, slot_path(p, j),
                        nb_call_fname(p->c), b->bind == NB_BIND_UNIFORM ? "a single value" : "a generator");
    if (p->leaf[j].narrowed)
        return nb_error(NB_ERR_UNSUPPORTED, "%s: slot '%s' of %s is a %s array feeding a narrower integer parameter, "
                        "whose values a call checks when it binds: bind it with a new call", who, slot_path(p, j),
                        nb_call_fname(p->c), nb_dtype_name(p->leaf[j].dtype));
    return NB_OK;
}

/* Whether leaf j is written (an out / inout parameter, a result, or an accumulated gradient). */
static int written(const nb_call *c, int j) {
    if (j >= c->nleaves) return 1;
    const nb_fn_leaf *l = leaf_info(c, j);
    return l->dir != 0 || c->sig.leaves[j].owned || (l->has_default && l->param >= 0 && strcmp(l->path, "_dout") != 0);
}

/* With leaf j at `data`: an owned gradient (added without atomics) must not overlap another
 * written array, the same array included (the rule nb_call_owned_grads decided the kernel by). */
static nb_status check_owned(const nb_prepared *p, const char *who, int j, uint64_t data) {
    const nb_call *c = p->c;
    if (!p->owned || p->n == 0 || c->leaves[j].bind != NB_BIND_ARRAY || !written(c, j)) return NB_OK;
    for (int i = 0; i < c->sig.nleaves; i++) {
        const nb_leaf_bind *o = &c->leaves[i], *b = &c->leaves[j];
        if (i == j || o->bind != NB_BIND_ARRAY || !written(c, i)) continue;
        if (!c->sig.leaves[i].owned && !c->sig.leaves[j].owned) continue;
        uint64_t lo, hi, lo2, hi2;
        nb_call_leaf_span(c, b, data, &lo, &hi);
        nb_call_leaf_span(c, o, o->data, &lo2, &hi2);
        if (lo2 >= hi || lo >= hi2) continue;
        return nb_error(NB_ERR_INVALID_ARG, "%s: slot '%s' of %s would overlap '%s'; the kernel adds "
                        "their gradients without atomics (prepare a call over these arrays instead)", who,
                        slot_path(p, j), nb_call_fname(c), slot_path(p, i));
    }
    return NB_OK;
}

static nb_status set_data(nb_prepared *p, const char *who, int j, uint64_t data) {
    const prep_leaf *q = &p->leaf[j];
    if (!data && p->n > 0)
        return nb_error(NB_ERR_INVALID_ARG, "%s: slot '%s' of %s: the address is NULL", who, slot_path(p, j),
                        nb_call_fname(p->c));
    if (data % q->align)
        return nb_error(NB_ERR_INVALID_ARG, "%s: slot '%s' of %s: address 0x%llx is not a multiple of %llu bytes, "
                        "the alignment the kernel was compiled for (vector loads); prepare a call over it instead",
                        who, slot_path(p, j), nb_call_fname(p->c), (unsigned long long)data,
                        (unsigned long long)q->align);
    NB_TRY(check_owned(p, who, j, data));
    nb_leaf_bind *b = &p->c->leaves[j];
    b->data = data;
    memcpy(p->c->block + p->e->layout.leaves[j].offset, &data, sizeof data);
    return NB_OK;
}

static int same_dims(int n, const int64_t *a, const int64_t *b) {
    return n == 0 || !memcmp(a, b, sizeof(int64_t) * (size_t)n);
}

nb_status nb_prepared_set_arg(nb_prepared *p, int slot, nb_tensor *t) {
    const char *who = "nb_prepared_set_arg";
    NB_TRY(check_array_slot(p, who, slot));
    const prep_leaf *q = &p->leaf[slot];
    const char *path = slot_path(p, slot), *fn = nb_call_fname(p->c);
    char b1[160], b2[160];
    if (!t) return nb_error(NB_ERR_INVALID_ARG, "%s: the array for slot '%s' of %s is NULL", who, path, fn);
    nb_device *dev = p->c->f->m->dev;
    if (nb_tensor_device(t) != dev)
        return nb_error(NB_ERR_DEVICE, "%s: slot '%s' of %s: the array is on %s but the module runs on %s", who, path,
                        fn, nb_device_name(nb_tensor_device(t)), nb_device_name(dev));
    if (nb_tensor_dtype(t) != q->dtype)
        return nb_error(NB_ERR_DTYPE, "%s: slot '%s' of %s was prepared for %s; got %s", who, path, fn,
                        nb_dtype_name(q->dtype), nb_tensor_describe(t, b1, sizeof b1));
    int nd = nb_tensor_ndim(t);
    if (nd != q->ndim || !same_dims(nd, nb_tensor_shape(t), q->shape))
        return nb_error(NB_ERR_SHAPE, "%s: slot '%s' of %s was prepared for shape %s; got %s (prepare another call for "
                        "another shape)", who, path, fn, nb_shape_str(q->ndim, q->shape, b2, sizeof b2),
                        nb_tensor_describe(t, b1, sizeof b1));
    if (!same_dims(nd, nb_tensor_strides(t), q->strides))
        return nb_error(NB_ERR_SHAPE, "%s: slot '%s' of %s was prepared for byte strides %s; the array has %s", who,
                        path, fn, nb_shape_str(q->ndim, q->strides, b2, sizeof b2),
                        nb_shape_str(nd, nb_tensor_strides(t), b1, sizeof b1));
    return set_data(p, who, slot, (uint64_t)(uintptr_t)nb_tensor_data(t));
}

nb_status nb_prepared_set_ptr(nb_prepared *p, int slot, void *data) {
    const char *who = "nb_prepared_set_ptr";
    NB_TRY(check_array_slot(p, who, slot));
    return set_data(p, who, slot, (uint64_t)(uintptr_t)data);
}

nb_status nb_prepared_set_double(nb_prepared *p, int slot, double v) {
    const char *who = "nb_prepared_set_double";
    NB_TRY(check_slot(p, who, slot));
    nb_call *c = p->c;
    const nb_leaf_bind *b = &c->leaves[slot];
    const nb_leaf_layout *ll = &p->e->layout.leaves[slot];
    const char *path = slot_path(p, slot), *fn = nb_call_fname(c);
    if (b->bind != NB_BIND_UNIFORM || ll->value_bytes != nb_dtype_size(b->storage))
        return nb_error(NB_ERR_INVALID_ARG, "%s: slot '%s' of %s was not bound to a single scalar value", who, path, fn);
    nb_dtype d = b->storage;
    if (d == NB_BOOL)
        return nb_error(NB_ERR_DTYPE, "%s: slot '%s' of %s is a bool; a number cannot be one", who, path, fn);
    if (!nb_dtype_is_float(d)) {
        double lo = d == NB_U32 || d == NB_U8 ? 0.0 : d == NB_I32 ? -2147483648.0 : -9223372036854775808.0;
        double hi = d == NB_U32 ? 4294967295.0 : d == NB_U8 ? 255.0 : d == NB_I32 ? 2147483647.0 : 9223372036854775807.0;
        if (!(v == floor(v)) || v < lo || v > hi)
            return nb_error(NB_ERR_DTYPE, "%s: slot '%s' of %s is %s; %g is not a whole number in its range", who, path,
                            fn, nb_dtype_name(d), v);
    }
    nb_convert(c->block + ll->offset, d, &v, NB_F64, 1);
    return NB_OK;
}

/* ---- launching --------------------------------------------------------------------------------- */

static nb_status stale(const nb_prepared *p) {
    return nb_error(NB_ERR_INVALID_ARG, "%s: the module's constants changed since the call was prepared "
                    "(nb_module_set_constant): prepare it again", p->c->f->name);
}

nb_status nb_prepared_launch(nb_prepared *p, nb_stream *s) {
    if (!p) return nb_error(NB_ERR_INVALID_ARG, "nb_prepared_launch: prepared call is NULL");
    nb_call *c = p->c;
    if (p->gen != c->f->m->gen) return stale(p);
    if (s && nb_stream_device(s) != c->f->m->dev)
        return nb_error(NB_ERR_INVALID_ARG, "nb_prepared_launch: the stream belongs to %s, the module to %s",
                        nb_device_name(nb_stream_device(s)), nb_device_name(c->f->m->dev));
    c->stream = s;
    NB_TRY(nb_call_launch_only(c, p->e)); /* (CPU: resets the call's record first) */
    if (!p->cuda && p->e->layout.bounds_checked && c->oob.flag && p->n > 0)
        return nb_call_oob_error(&c->oob, &p->e->layout, c->f, c->overload, c->nleaves, "");
    return NB_OK;
}

nb_status nb_prepared_check(nb_prepared *p) {
    if (!p) return nb_error(NB_ERR_INVALID_ARG, "nb_prepared_check: prepared call is NULL");
    if (!p->oob) return NB_OK;
    if (p->gen != p->c->f->m->gen) return stale(p);
    nb_device *dev = p->c->f->m->dev;
    NB_TRY(nb_device_wait(dev));
    void *a = nb_buffer_ptr(p->oob);
    unsigned flag = 0;
    NB_TRY(nb_memcpy_d2h(dev, &flag, a, sizeof flag));
    if (!flag) return NB_OK;
    nb_oob_rec r;
    NB_TRY(nb_memcpy_d2h(dev, &r, a, sizeof r));
    NB_TRY(nb_memset(dev, a, 0, sizeof r));
    NB_TRY(nb_device_wait(dev)); /* (cleared before a launch on any stream) */
    return nb_call_oob_error(&r, &p->e->layout, p->c->f, p->c->overload, p->c->nleaves,
                             " (a launch of a prepared call, reported by nb_prepared_check)");
}

int64_t nb_prepared_size(const nb_prepared *p) { return p ? p->n : 0; }

void nb_prepared_free(nb_prepared *p) {
    if (!p) return;
    nb_call *c = p->c;
    if (c) {
        int temps = 0;
        for (int j = 0; j < c->sig.nleaves; j++) temps |= c->leaves[j].owns_tensor;
        if (p->cuda && (temps || p->oob)) nb_device_wait(c->f->m->dev); /* (a launch may still use them) */
        nb_call_release_temps(c);
        nb_call_free(c);
    }
    if (p->oob) nb_buffer_release(p->oob);
    nb_free(p, sizeof *p);
}

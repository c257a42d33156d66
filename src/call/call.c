/* The nb_call builder, the kernel lookup and the launch (include/nabla/module.h).
 *
 * A warm call: begin (recycled nb_call, no allocation) -> setters (record pointers) -> run:
 * bind (arithmetic on shapes) -> signature key + hash -> cache probe -> parameter block -> launch.
 * The only allocation is the result array (from the device's caching allocator).
 */
#include <stdio.h>
#include <string.h>

#include "call/call_internal.h"
#include "core/layout.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "device/sync_check.h"
#include "lang/ad.h"
#include "nabla/alloc.h"
#include "nabla/log.h"

/* ---- builder --------------------------------------------------------------------------------- */

/* Sticky setter errors: the first status and a copy of its message, re-raised by nb_call_run. */
static nb_status fail(nb_call *c, nb_status s) {
    if (c && !c->err) {
        c->err = s;
        snprintf(c->errmsg, sizeof c->errmsg, "%s", nb_last_error());
    }
    return s;
}

static int max_params(const nb_func *f) {
    int n = 0;
    for (int i = 0; i < f->count; i++)
        if (f->infos[i].nparams > n) n = f->infos[i].nparams;
    return n;
}

nb_status nb_call_begin(nb_func *f, nb_call **out) {
    if (!out) return nb_error(NB_ERR_INVALID_ARG, "nb_call_begin: argument 'out' is NULL");
    *out = NULL;
    if (!f) return nb_error(NB_ERR_INVALID_ARG, "nb_call_begin: argument 'f' is NULL");
    nb_module *m = f->m;
    pthread_mutex_lock(&m->lock);
    nb_status s = nb_func_refresh(f);
    nb_call *c = f->spare;
    f->spare = NULL;
    pthread_mutex_unlock(&m->lock);
    if (s) return s;
    if (!c) {
        c = nb_alloc(sizeof *c, 64);
        if (!c) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_call_begin: out of host memory");
    }
    c->f = f;
    c->origin = f;
    c->err = NB_OK;
    c->nargs = 0;
    c->nmaps = 0;
    c->into = NULL;
    c->ninto = 0;
    c->ntgrads = 0;
    c->overload_slot = NULL;
    c->blocks = 0;
    c->defer = 0;
    c->stream = NULL;
    c->nres = 0;
    c->overload = 0;
    c->nleaves = 0;
    c->sig.nleaves = 0;
    *out = c;
    return NB_OK;
}

void nb_call_free(nb_call *c) {
    if (!c) return;
    nb_call_release_temps(c); /* outputs materialized by a call that never ran (bound, then freed) */
    nb_func *f = c->origin; /* (not c->f: a derivative call's next begin is on the function) */
    pthread_mutex_lock(&f->m->lock);
    if (!f->spare) {
        f->spare = c;
        c = NULL;
    }
    pthread_mutex_unlock(&f->m->lock);
    if (c) nb_free(c, sizeof *c);
}

static nb_status new_arg(nb_call *c, const char *who, int index, const char *name,
                         nb_call_arg_rec **out) {
    if (!c) return nb_error(NB_ERR_INVALID_ARG, "%s: argument 'c' is NULL", who);
    if (index < 0 && !name)
        return fail(c, nb_error(NB_ERR_INVALID_ARG, "%s: argument index %d is negative", who, index));
    if (index < 0 && !name[0])
        return fail(c, nb_error(NB_ERR_INVALID_ARG, "%s: empty argument name", who));
    if (index >= 0 && index >= max_params(c->f))
        return fail(c, nb_error(NB_ERR_INVALID_ARG,
                                "%s: too many arguments: argument %d given but %s takes %d", who,
                                index, c->f->infos[0].signature, max_params(c->f)));
    if (c->nargs >= NB_CALL_MAX_ARGS)
        return fail(c, nb_error(NB_ERR_INVALID_ARG, "%s: more than %d arguments", who,
                                NB_CALL_MAX_ARGS));
    nb_call_arg_rec *a = &c->args[c->nargs++];
    a->kind = NB_ARGK_NONE;
    a->index = index;
    a->name = index >= 0 ? NULL : name;
    a->tensor = NULL;
    a->data = NULL;
    a->slot = NULL;
    a->ndim = 0;
    *out = a;
    return NB_OK;
}

static nb_status arg_tensor(nb_call *c, const char *who, int index, const char *name, nb_tensor *t) {
    nb_call_arg_rec *a = NULL;
    nb_status s = new_arg(c, who, index, name, &a);
    if (s) return s;
    if (!t) {
        c->nargs--;
        return fail(c, nb_error(NB_ERR_INVALID_ARG, "%s: the tensor for argument '%s' is NULL", who,
                                name ? name : c->f->infos[0].nparams > index
                                                  ? c->f->infos[0].param_names[index]
                                                  : "?"));
    }
    a->kind = NB_ARGK_TENSOR;
    a->tensor = t;
    return NB_OK;
}

nb_status nb_call_arg(nb_call *c, int index, nb_tensor *t) {
    return arg_tensor(c, "nb_call_arg", index, NULL, t);
}

nb_status nb_call_arg_named(nb_call *c, const char *name, nb_tensor *t) {
    if (!name) return fail(c, nb_error(NB_ERR_INVALID_ARG, "nb_call_arg_named: name is NULL"));
    return arg_tensor(c, "nb_call_arg_named", -1, name, t);
}

static nb_status arg_value(nb_call *c, const char *who, int index, const char *name, nb_dtype dtype,
                           int ndim, const int64_t *shape, const void *data) {
    nb_call_arg_rec *a = NULL;
    nb_status s = new_arg(c, who, index, name, &a);
    if (s) return s;
    c->nargs--; /* committed below once valid */
    if (!nb_dtype_is_valid((int)dtype))
        return fail(c, nb_error(NB_ERR_INVALID_ARG, "%s: invalid dtype %d", who, (int)dtype));
    if (ndim < 0 || ndim > NB_MAX_DIMS || (ndim > 0 && !shape))
        return fail(c, nb_error(NB_ERR_INVALID_ARG, "%s: bad ndim %d / shape", who, ndim));
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return fail(c, nb_error(NB_ERR_SHAPE, "%s: negative dim %lld", who, (long long)shape[i]));
        numel *= shape[i];
    }
    if (!data && numel > 0)
        return fail(c, nb_error(NB_ERR_INVALID_ARG, "%s: data is NULL", who));
    c->nargs++;
    a->kind = NB_ARGK_VALUE;
    a->dtype = dtype;
    a->ndim = ndim;
    if (ndim) memcpy(a->shape, shape, sizeof(int64_t) * (size_t)ndim);
    a->data = data;
    return NB_OK;
}

nb_status nb_call_arg_value(nb_call *c, int index, nb_dtype dtype, int ndim, const int64_t *shape,
                            const void *data) {
    return arg_value(c, "nb_call_arg_value", index, NULL, dtype, ndim, shape, data);
}

nb_status nb_call_arg_value_named(nb_call *c, const char *name, nb_dtype dtype, int ndim,
                                  const int64_t *shape, const void *data) {
    if (!name) return fail(c, nb_error(NB_ERR_INVALID_ARG, "nb_call_arg_value_named: name is NULL"));
    return arg_value(c, "nb_call_arg_value_named", -1, name, dtype, ndim, shape, data);
}

/* Scalars are copied into the record's shape storage (unused for rank 0), so the caller's
 * variable need not outlive the setter. */
nb_status nb_call_arg_double(nb_call *c, int index, double v) {
    nb_status s = arg_value(c, "nb_call_arg_double", index, NULL, NB_F64, 0, NULL, &v);
    if (s) return s;
    nb_call_arg_rec *a = &c->args[c->nargs - 1];
    memcpy(&a->shape[0], &v, sizeof v);
    a->data = &a->shape[0];
    return NB_OK;
}

nb_status nb_call_arg_int(nb_call *c, int index, int64_t v) {
    nb_status s = arg_value(c, "nb_call_arg_int", index, NULL, NB_I64, 0, NULL, &v);
    if (s) return s;
    nb_call_arg_rec *a = &c->args[c->nargs - 1];
    a->shape[0] = v;
    a->data = &a->shape[0];
    return NB_OK;
}

static nb_status arg_alloc(nb_call *c, const char *who, int index, const char *name,
                           nb_tensor **slot) {
    nb_call_arg_rec *a = NULL;
    nb_status s = new_arg(c, who, index, name, &a);
    if (s) return s;
    if (!slot) {
        c->nargs--;
        return fail(c, nb_error(NB_ERR_INVALID_ARG, "%s: slot is NULL", who));
    }
    *slot = NULL;
    a->kind = NB_ARGK_ALLOC;
    a->slot = slot;
    return NB_OK;
}

nb_status nb_call_arg_alloc(nb_call *c, int index, nb_tensor **slot) {
    return arg_alloc(c, "nb_call_arg_alloc", index, NULL, slot);
}

nb_status nb_call_arg_alloc_named(nb_call *c, const char *name, nb_tensor **slot) {
    if (!name) return fail(c, nb_error(NB_ERR_INVALID_ARG, "nb_call_arg_alloc_named: name is NULL"));
    return arg_alloc(c, "nb_call_arg_alloc_named", -1, name, slot);
}

/* ---- generators ------------------------------------------------------------------------------ */

void nb_generator_init(nb_generator *g, nb_generator_kind kind) {
    if (!g) return;
    memset(g, 0, sizeof *g);
    g->kind = kind;
    g->dims = -1;
    for (int i = 0; i < 8; i++) g->shape[i] = -1, g->stride[i] = 1;
    g->seed = 2640457667u; /* SlangPy's default seed */
    g->hash_seed = 1;
    g->min = 0.0f;
    g->max = 1.0f;
}

uint32_t nb_wang_hash(uint32_t s) {
    s = (s ^ 61u) ^ (s >> 16);
    s *= 9u;
    s = s ^ (s >> 4);
    s *= 0x27d4eb2du;
    s = s ^ (s >> 15);
    return s;
}

static nb_status arg_gen(nb_call *c, const char *who, int index, const char *name, const nb_generator *g) {
    nb_call_arg_rec *a = NULL;
    nb_status s = new_arg(c, who, index, name, &a);
    if (s) return s;
    c->nargs--; /* committed below once valid */
    if (!g) return fail(c, nb_error(NB_ERR_INVALID_ARG, "%s: the generator is NULL", who));
    if (g->kind < NB_GEN_CALL_ID || g->kind > NB_GEN_RAND_FLOAT)
        return fail(c, nb_error(NB_ERR_INVALID_ARG, "%s: unknown generator kind %d", who, (int)g->kind));
    if (g->kind == NB_GEN_GRID) {
        if (g->dims < 1 || g->dims > 8)
            return fail(c, nb_error(NB_ERR_INVALID_ARG, "%s: a grid needs 1 to 8 dims (got %d)", who, g->dims));
        for (int i = 0; i < g->dims; i++)
            if (g->shape[i] < -1)
                return fail(c, nb_error(NB_ERR_SHAPE, "%s: grid shape[%d] is %lld (an extent, or -1 to infer it)",
                                        who, i, (long long)g->shape[i]));
    } else if (g->dims < -1 || g->dims == 0 || g->dims > 8) {
        return fail(c, nb_error(NB_ERR_INVALID_ARG, "%s: dims=%d (-1, or 1 to 8)", who, g->dims));
    }
    if (g->warmup < 0)
        return fail(c, nb_error(NB_ERR_INVALID_ARG, "%s: warmup=%d is negative", who, g->warmup));
    c->nargs++;
    a->kind = NB_ARGK_GEN;
    a->gen = *g;
    if (g->hash_seed) a->gen.seed = nb_wang_hash(g->seed);
    a->gen.hash_seed = 0;
    return NB_OK;
}

nb_status nb_call_arg_generator(nb_call *c, int index, const nb_generator *g) {
    return arg_gen(c, "nb_call_arg_generator", index, NULL, g);
}

nb_status nb_call_arg_generator_named(nb_call *c, const char *name, const nb_generator *g) {
    if (!name) return fail(c, nb_error(NB_ERR_INVALID_ARG, "nb_call_arg_generator_named: name is NULL"));
    return arg_gen(c, "nb_call_arg_generator_named", -1, name, g);
}

static nb_status add_map(nb_call *c, const char *who, int index, const char *name, int ndims,
                         const int *dims) {
    if (!c) return nb_error(NB_ERR_INVALID_ARG, "%s: argument 'c' is NULL", who);
    if (index < 0 && !name)
        return fail(c, nb_error(NB_ERR_INVALID_ARG, "%s: argument index %d is negative", who, index));
    if (ndims < 0 || ndims > NB_MAX_DIMS || (ndims > 0 && !dims))
        return fail(c, nb_error(NB_ERR_INVALID_ARG, "%s: bad ndims %d", who, ndims));
    for (int i = 0; i < ndims; i++) {
        if (dims[i] < 0 || dims[i] >= NB_MAX_DIMS)
            return fail(c, nb_error(NB_ERR_INVALID_ARG, "%s: kernel dim %d out of range 0..%d", who,
                                    dims[i], NB_MAX_DIMS - 1));
        for (int k = 0; k < i; k++)
            if (dims[k] == dims[i])
                return fail(c, nb_error(NB_ERR_INVALID_ARG, "%s: kernel dim %d appears twice", who,
                                        dims[i]));
    }
    for (int i = 0; i < c->nmaps; i++)
        if ((index >= 0 && c->maps[i].index == index) ||
            (index < 0 && c->maps[i].index < 0 && name && c->maps[i].name && !strcmp(c->maps[i].name, name)))
            return fail(c, nb_error(NB_ERR_INVALID_ARG, "%s: argument mapped twice", who));
    if (c->nmaps >= NB_CALL_MAX_MAPS)
        return fail(c, nb_error(NB_ERR_INVALID_ARG, "%s: more than %d maps", who, NB_CALL_MAX_MAPS));
    nb_call_map_rec *m = &c->maps[c->nmaps++];
    m->index = index;
    m->name = index >= 0 ? NULL : name;
    m->ndims = ndims;
    if (ndims) memcpy(m->dims, dims, sizeof(int) * (size_t)ndims);
    return NB_OK;
}

nb_status nb_call_map(nb_call *c, int index, int ndims, const int *dims) {
    return add_map(c, "nb_call_map", index, NULL, ndims, dims);
}

nb_status nb_call_map_named(nb_call *c, const char *name, int ndims, const int *dims) {
    if (!name) return fail(c, nb_error(NB_ERR_INVALID_ARG, "nb_call_map_named: name is NULL"));
    return add_map(c, "nb_call_map_named", -1, name, ndims, dims);
}

nb_status nb_call_result(nb_call *c, nb_tensor *into) {
    if (!c) return nb_error(NB_ERR_INVALID_ARG, "nb_call_result: argument 'c' is NULL");
    if (!into) return fail(c, nb_error(NB_ERR_INVALID_ARG, "nb_call_result: 'into' is NULL"));
    if (c->into) return fail(c, nb_error(NB_ERR_INVALID_ARG, "nb_call_result: result given twice"));
    c->into = into;
    return NB_OK;
}

nb_status nb_call_result_named(nb_call *c, const char *path, nb_tensor *into) {
    if (!c) return nb_error(NB_ERR_INVALID_ARG, "nb_call_result_named: argument 'c' is NULL");
    if (!path) return fail(c, nb_error(NB_ERR_INVALID_ARG, "nb_call_result_named: path is NULL"));
    if (!strcmp(path, "_result")) return nb_call_result(c, into);
    if (strncmp(path, "_result.", 8) != 0 || !path[8])
        return fail(c, nb_error(NB_ERR_INVALID_ARG, "nb_call_result_named: '%s' is not a result "
                                "field path (\"_result.FIELD\")", path));
    if (!into)
        return fail(c, nb_error(NB_ERR_INVALID_ARG, "nb_call_result_named: 'into' is NULL for '%s'",
                                path));
    if (c->ninto >= NB_CALL_MAX_LEAVES)
        return fail(c, nb_error(NB_ERR_INVALID_ARG, "nb_call_result_named: more than %d fields",
                                NB_CALL_MAX_LEAVES));
    c->intos[c->ninto].path = path;
    c->intos[c->ninto++].t = into;
    return NB_OK;
}

nb_status nb_call_report_overload(nb_call *c, int *overload) {
    if (!c) return nb_error(NB_ERR_INVALID_ARG, "nb_call_report_overload: argument 'c' is NULL");
    if (!overload)
        return fail(c, nb_error(NB_ERR_INVALID_ARG, "nb_call_report_overload: 'overload' is NULL"));
    *overload = -1;
    c->overload_slot = overload;
    return NB_OK;
}

/* ---- kernels --------------------------------------------------------------------------------- */

static void make_key(const nb_call *c, nb_sig_key *k) {
    const nb_call_sig *s = &c->sig;
    k->overload = s->overload;
    k->target = (int32_t)s->target;
    k->mode = (int32_t)s->mode;
    k->ndim = s->ndim;
    k->has_result = s->has_result;
    k->blocks = s->blocks;
    k->contig4 = s->contig4;
    k->nleaves = s->nleaves;
    for (int j = 0; j < s->nleaves; j++) {
        k->leaves[j].param = (int16_t)s->leaves[j].param;
        k->leaves[j].bind = (uint8_t)s->leaves[j].bind;
        k->leaves[j].storage = (uint8_t)s->leaves[j].storage;
        k->leaves[j].vec4 = (uint8_t)s->leaves[j].vec4;
        k->leaves[j].gen = (uint8_t)s->leaves[j].gen;
        k->leaves[j].owned = (uint8_t)s->leaves[j].owned;
        k->leaves[j].bcast = (uint8_t)s->leaves[j].bcast;
        k->leaves[j].shacc = (uint8_t)s->leaves[j].shacc;
    }
}

/* Finds or builds the kernel for c->sig. Compiles outside the module lock. */
static nb_status get_kernel(nb_call *c, nb_kentry **out) {
    nb_func *f = c->f;
    nb_module *m = f->m;
    nb_sig_key key;
    make_key(c, &key);
    size_t bytes = nb_sig_key_bytes(&key);
    uint64_t h = nb_sig_key_hash(&key, bytes);
    pthread_mutex_lock(&m->lock);
    nb_kentry *e = nb_kcache_find(&f->kcache, &key, bytes, h);
    pthread_mutex_unlock(&m->lock);
    if (e) {
        *out = e;
        return NB_OK;
    }
    e = nb_calloc(sizeof *e, 64);
    if (!e) return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: out of host memory", nb_call_fname(c));
    e->hash = h;
    e->key_bytes = bytes;
    memcpy(&e->key, &key, bytes);
    nb_strbuf src;
    nb_strbuf_init(&src);
    pthread_mutex_lock(&m->lock); /* the program is not thread-safe */
    nb_status s = nb_program_emit_call(m->prog, &c->sig, &src, &e->layout);
    pthread_mutex_unlock(&m->lock);
    if (s == NB_OK && !nb_strbuf_ok(&src))
        s = nb_error(NB_ERR_OUT_OF_MEMORY, "%s: out of host memory", nb_call_fname(c));
    if (s == NB_OK && e->layout.size > NB_CALL_BLOCK_MAX)
        s = nb_error(NB_ERR_UNSUPPORTED, "%s: the call's parameter block is %zu bytes (at most %d)",
                     nb_call_fname(c), e->layout.size, NB_CALL_BLOCK_MAX);
    if (s == NB_OK) {
        char name[256];
        snprintf(name, sizeof name, "%s:%s", m->name, c->f->infos[c->overload].name);
        nb_jit_options jo;
        memset(&jo, 0, sizeof jo);
        jo.name = name;
        jo.no_disk_cache = m->no_disk_cache;
        s = nb_jit_load(m->dev, nb_strbuf_cstr(&src), e->layout.entry, &jo, &e->kernel);
    }
    nb_strbuf_free(&src);
    if (s) {
        nb_free(e, sizeof *e);
        return s;
    }
    pthread_mutex_lock(&m->lock);
    nb_kentry *other = nb_kcache_find(&f->kcache, &key, bytes, h);
    if (!other) s = nb_kcache_add(&f->kcache, e);
    pthread_mutex_unlock(&m->lock);
    if (other || s) {
        nb_free(e, sizeof *e);
        e = other;
    }
    if (s) return s;
    *out = e;
    return NB_OK;
}

/* ---- parameter block and launch --------------------------------------------------------------- */

static nb_status fill_block(nb_call *c, const nb_call_layout *L) {
    unsigned char *blk = c->block;
    const nb_call_sig *sig = &c->sig;
    memset(blk, 0, L->size);
    if (sig->ndim) memcpy(blk + L->shape_offset, c->kshape, sizeof(int64_t) * (size_t)sig->ndim);
    for (int j = 0; j < sig->nleaves; j++) {
        const nb_leaf_layout *ll = &L->leaves[j];
        const nb_leaf_bind *b = &c->leaves[j];
        switch (b->bind) {
        case NB_BIND_UNIFORM: {
            if (b->arg == NB_ARG_DEFAULT) { /* folded on the host in the leaf's dtype */
                const nb_fn_leaf *l = &c->f->infos[c->overload].leaves[j];
                memcpy(blk + ll->offset, l->default_value, ll->value_bytes);
                break;
            }
            const nb_call_arg_rec *a = &c->args[b->arg];
            int64_t n = nb_layout_numel(a->ndim, a->shape);
            if ((size_t)n * nb_dtype_size(b->storage) != ll->value_bytes)
                return nb_error(NB_ERR_INTERNAL, "%s: uniform '%s' is %zu bytes in the layout but "
                                "%lld values of %s", nb_call_fname(c), sig->leaves[j].path,
                                ll->value_bytes, (long long)n, nb_dtype_name(b->storage));
            if (a->dtype == b->storage) memcpy(blk + ll->offset, a->data, ll->value_bytes);
            else nb_convert(blk + ll->offset, b->storage, a->data, a->dtype, (size_t)n);
            break;
        }
        case NB_BIND_ARRAY:
            memcpy(blk + ll->offset, &b->data, sizeof b->data);
            if (sig->ndim)
                memcpy(blk + ll->strides_offset, b->kstrides, sizeof(int64_t) * (size_t)sig->ndim);
            if (b->value_rank)
                memcpy(blk + ll->inner_offset, b->inner, sizeof(int64_t) * (size_t)b->value_rank);
            break;
        case NB_BIND_GEN: { /* the generator's block (lang/callsig.h) */
            const nb_generator *g = &c->args[b->arg].gen;
            if (b->gen == NB_GEN_SIG_INDEX) {
                int n = (int)(ll->value_bytes / 24);
                int64_t *q = (int64_t *)(blk + ll->offset);
                for (int i = 0; i < n; i++) {
                    int grid = g->kind == NB_GEN_GRID;
                    q[i] = grid ? g->offset[i] : 0;
                    q[n + i] = grid ? g->stride[i] : 1;
                    q[2 * n + i] = b->gen_kdim[i];
                }
            } else if (b->gen == NB_GEN_SIG_HASH || b->gen == NB_GEN_SIG_RAND) {
                unsigned char *q = blk + ll->offset;
                int32_t warm = g->warmup;
                memcpy(q, &g->seed, 4);
                memcpy(q + 4, &warm, 4);
                memcpy(q + 8, &g->min, 4);
                memcpy(q + 12, &g->max, 4);
            }
            break;
        }
        case NB_BIND_TENSOR:
            memcpy(blk + ll->offset, &b->data, sizeof b->data);
            memcpy(blk + ll->strides_offset, b->tshape, sizeof(int64_t) * (size_t)b->tensor_rank);
            memcpy(blk + ll->strides_offset + 8 * (size_t)b->tensor_rank, b->tstrides,
                   sizeof(int64_t) * (size_t)b->tensor_rank);
            if (ll->grad_offset) { /* DiffTensor: its gradient array, or none (NULL) */
                uint64_t gp = 0;
                int64_t gs[NB_MAX_DIMS] = {0};
                nb_status gst = nb_call_tgrad_for(c, j, b, &gp, gs);
                if (gst) return gst;
                memcpy(blk + ll->grad_offset, &gp, sizeof gp);
                memcpy(blk + ll->grad_offset + 8, gs, sizeof(int64_t) * (size_t)b->tensor_rank);
            }
            break;
        }
    }
    return NB_OK;
}

/* ---- bounds checks (lang/callsig.h) ------------------------------------------------------------ */

/* Where the launch records its first out-of-range index: the call's own record on the CPU, the
 * module's device word on CUDA (allocated once, zero while no error is pending); a deferred
 * launch's slot in the module's host-mapped ring (defer.c). */
static nb_status oob_record(nb_call *c, const nb_kentry *e, uint64_t *addr) {
    if (c->defer) { /* a slot of the module's ring (defer.c), unless it cannot be made */
        nb_status s = nb_defer_slot(c, e, addr);
        if (s || c->defer) return s;
    }
    if (nb_jit_kernel_kind(e->kernel) == NB_DEVICE_CPU) {
        c->oob.flag = 0;
        c->oob.note = 0;
        *addr = (uint64_t)(uintptr_t)&c->oob;
        return NB_OK;
    }
    nb_module *m = c->f->m;
    nb_status s = NB_OK;
    pthread_mutex_lock(&m->lock);
    if (!m->oob_dev) {
        s = nb_buffer_alloc(m->dev, sizeof(nb_oob_rec), &m->oob_dev);
        if (s == NB_OK) s = nb_memset(m->dev, nb_buffer_ptr(m->oob_dev), 0, sizeof(nb_oob_rec));
        if (s != NB_OK && m->oob_dev) {
            nb_buffer_release(m->oob_dev);
            m->oob_dev = NULL;
        }
    }
    if (s == NB_OK) *addr = (uint64_t)(uintptr_t)nb_buffer_ptr(m->oob_dev);
    pthread_mutex_unlock(&m->lock);
    return s;
}

static void append_dims(nb_strbuf *o, int n, const long long *v) {
    nb_strbuf_append(o, "[");
    for (int k = 0; k < n; k++) nb_strbuf_printf(o, "%s%lld", k ? ", " : "", v[k]);
    nb_strbuf_append(o, "]");
}

nb_status nb_call_oob_error(const nb_oob_rec *r, const nb_call_layout *L, const nb_func *f, int overload,
                            int nleaves, const char *tail) {
    const nb_fn_info *in = f->infos && overload >= 0 && overload < f->count ? &f->infos[overload] : NULL;
    const char *fn = in ? in->name : f->name;
    int rank = r->rank < 0 ? 0 : r->rank > 8 ? 8 : r->rank;
    nb_strbuf msg;
    nb_strbuf_init(&msg);
    nb_strbuf_append(&msg, "out-of-bounds index ");
    if (r->kind == NB_OOB_ARRAY) {
        nb_strbuf_printf(&msg, "%lld into ", rank ? r->idx[0] : 0LL);
        if (r->site >= 0 && r->site < L->noob_sites && r->site < NB_OOB_MAX_SITES) nb_strbuf_append(&msg, L->oob_sites[r->site]);
        else nb_strbuf_printf(&msg, "a local array of length %lld", rank ? r->shape[0] : 0LL);
    } else {
        append_dims(&msg, rank, r->idx);
        int leaf = r->site - 1; /* parameter leaves, then the result's (as bind.c's sig.leaves) */
        const char *path = !in || leaf < 0 ? NULL
                           : leaf < nleaves ? (leaf < in->nleaves ? in->leaves[leaf].path : NULL)
                           : leaf - nleaves < in->nresults ? in->results[leaf - nleaves].path : NULL;
        const char *what = r->kind == NB_OOB_TENSOR_GRAD ? "the gradient of tensor" : "tensor";
        if (path) nb_strbuf_printf(&msg, " into %s '%s' of shape ", what, path);
        else nb_strbuf_printf(&msg, " into a %s of shape ", what);
        append_dims(&msg, rank, r->shape);
        char base[256]; /* f, not its derivative wrapper f__bwdr */
        nb_strbuf_printf(&msg, " in function '%s'", nb_ad_wrapper_name(fn, base, sizeof base) ? base : fn);
    }
    nb_strbuf_append(&msg, tail);
    nb_status s = nb_strbuf_ok(&msg) ? nb_error(NB_ERR_SHAPE, "%s", nb_strbuf_cstr(&msg))
                                     : nb_error(NB_ERR_SHAPE, "%s: out-of-bounds index", fn);
    nb_strbuf_free(&msg);
    return s;
}

/* After the launch: the error of its first out-of-range access, if any. On CUDA this reads one
 * word back (the call's synchronisation point), and the whole record only when it is set. */
static nb_status oob_check(nb_call *c, const nb_kentry *e) {
    nb_oob_rec r;
    if (nb_jit_kernel_kind(e->kernel) == NB_DEVICE_CPU) {
        if (!c->oob.flag) return NB_OK;
        r = c->oob;
    } else {
        nb_module *m = c->f->m;
        void *p = nb_buffer_ptr(m->oob_dev);
        unsigned flag = 0;
        nb_status s = nb_memcpy_d2h(m->dev, &flag, p, sizeof flag);
        if (s || !flag) return s;
        if ((s = nb_memcpy_d2h(m->dev, &r, p, sizeof r))) return s;
        if ((s = nb_memset(m->dev, p, 0, sizeof r))) return s;
    }
    return nb_call_oob_error(&r, &e->layout, c->f, c->overload, c->nleaves, "");
}

/* The launch alone: nothing that waits for the device (so a CUDA graph can capture it). */
static nb_status launch_only(nb_call *c, nb_kentry *e) {
    int64_t n = 1;
    for (int k = 0; k < c->kdim; k++) n *= c->kshape[k];
    if (n == 0) return NB_OK;
    int gs = e->layout.group_size; /* [numthreads] thread groups: the launch counts groups */
    if (nb_jit_kernel_kind(e->kernel) == NB_DEVICE_CPU) c->oob.flag = 0; /* (a recorded call runs again: its record starts clean) */
    if (c->sig.blocks) { /* explicit blocks: kshape = {grid z, y, x, block z, y, x} */
        int64_t nblocks = c->kshape[0] * c->kshape[1] * c->kshape[2], nt = c->kshape[3] * c->kshape[4] * c->kshape[5];
        if (nb_jit_kernel_kind(e->kernel) == NB_DEVICE_CPU)
            return nb_jit_launch_cpu_grain(e->kernel, c->block, nblocks, NB_JIT_CPU_GRAIN / nt > 0 ? NB_JIT_CPU_GRAIN / nt : 1);
        unsigned grid[3] = {(unsigned)c->kshape[2], (unsigned)c->kshape[1], (unsigned)c->kshape[0]};
        unsigned blk[3] = {(unsigned)c->kshape[5], (unsigned)c->kshape[4], (unsigned)c->kshape[3]};
        nb_status ls = nb_jit_launch_cuda_grid(e->kernel, c->block, e->layout.size, grid, blk, c->stream);
        if (ls) { /* (say which launch: a block too large for the kernel's registers fails here) */
            char msg[512];
            snprintf(msg, sizeof msg, "%s", nb_last_error());
            ls = nb_error(ls, "%s: launching %u x %u x %u blocks of %u x %u x %u threads failed: %s%s", nb_call_fname(c),
                          grid[0], grid[1], grid[2], blk[0], blk[1], blk[2], msg,
                          strstr(msg, "resources") ? " (the kernel needs more registers than a block this large "
                                                     "has: use a smaller block)" : "");
        }
        return ls;
    }
    if (nb_jit_kernel_kind(e->kernel) == NB_DEVICE_CPU) {
        if (gs > 0)
            return nb_jit_launch_cpu_grain(e->kernel, c->block, n / gs, NB_JIT_CPU_GRAIN / gs > 0 ? NB_JIT_CPU_GRAIN / gs : 1);
        return nb_jit_launch_cpu(e->kernel, c->block, n);
    }
    if (gs > 0) return nb_jit_launch_cuda_groups(e->kernel, c->block, e->layout.size, n / gs, gs, c->stream);
    return nb_jit_launch_cuda_n(e->kernel, c->block, e->layout.size, n, e->layout.blocks_per_sm, c->stream);
}

/* After the launch: device printf reaches stdout, and the first out-of-range index is an error. */
static nb_status after_launch(nb_call *c, nb_kentry *e) {
    nb_status s = NB_OK;
    int64_t n = 1;
    for (int k = 0; k < c->kdim; k++) n *= c->kshape[k];
    if (n == 0) return NB_OK;
    /* device printf output is flushed to stdout by a synchronisation only: without one a call
     * whose results stay on the device (or a process that exits) would lose it */
    if (nb_jit_kernel_kind(e->kernel) != NB_DEVICE_CPU && e->layout.prints) {
        fflush(stdout);
        s = nb_device_wait(c->f->m->dev);
    }
    return s || !e->layout.bounds_checked || c->defer ? s : oob_check(c, e);
}

static int owns_temps(const nb_call *c) {
    for (int j = 0; j < c->sig.nleaves && j <= NB_CALL_MAX_LEAVES; j++)
        if (c->leaves[j].owns_tensor) return 1;
    return 0;
}

/* The launch and what follows it. On a stream of the caller's (nb_call_set_stream) what the
 * device's stream did for the call comes first (uploads; the immediate bounds record's reset),
 * and the device's stream waits for the launch where it touches the call's memory after it
 * (temporaries freed, the bounds record read). A deferred launch of torch tensors needs neither. */
static nb_status launch(nb_call *c, nb_kentry *e) {
    nb_stream *ds = nb_device_stream(c->f->m->dev);
    int other = c->stream && c->stream != ds && nb_jit_kernel_kind(e->kernel) != NB_DEVICE_CPU;
    int both = other && (owns_temps(c) || (e->layout.bounds_checked && !c->defer));
    nb_status s = both ? nb_stream_wait_native(c->stream, nb_stream_native(ds)) : NB_OK;
    if (s == NB_OK) s = launch_only(c, e);
    if (s == NB_OK && (both || (other && e->layout.prints)))
        s = nb_stream_wait_native(ds, nb_stream_native(c->stream));
    return s ? s : after_launch(c, e);
}

nb_status nb_call_launch_only(nb_call *c, nb_kentry *e) { return launch_only(c, e); }
nb_status nb_call_after_launch(nb_call *c, nb_kentry *e) { return after_launch(c, e); }

/* Everything before the launch: binding, uploads and allocations, the kernel, the parameter
 * block and its bounds-check record. */
static nb_status prepare(nb_call *c, nb_tensor **results, int max, int single, const int64_t *grid, nb_kentry **out) {
    nb_status s = nb_defer_check(c->f->m); /* a deferred launch's error first (defer.c) */
    if (s) return s;
    s = nb_call_ad_fuse(c, results != NULL);
    if (s) return s;
    s = nb_call_bind(c, results != NULL, grid);
    if (s) return s;
    const nb_fn_info *in = &c->f->infos[c->overload];
    if (single && results && c->sig.has_result && in->result.value_rank < 0) {
        char flds[512];
        size_t n = 0;
        flds[0] = '\0';
        for (int k = 0; k < in->nresults && n < sizeof flds; k++)
            n += (size_t)snprintf(flds + n, sizeof flds - n, "%s%s", k ? ", " : "", in->results[k].path);
        return nb_error(NB_ERR_UNSUPPORTED, "%s: %s returns a struct: use nb_call_run_results to "
                        "get one array per field (%s)", in->name, in->signature, flds);
    }
    if (!single && results && c->nres > max)
        return nb_error(NB_ERR_INVALID_ARG, "%s: %s has %d result leaves but room for %d was given",
                        in->name, in->signature, c->nres, max);
    if ((s = nb_call_materialize(c, results != NULL))) return s;
    nb_call_vec4_rows(c);
    nb_call_owned_grads(c);
    nb_call_shared_grads(c, c->sig.target == NB_TARGET_CUDA);
    nb_call_mark_contig4(c, c->sig.target == NB_TARGET_CUDA);
    for (int j = 0; j < c->sig.nleaves; j++)
        if (c->leaves[j].bind == NB_BIND_TENSOR)
            c->leaves[j].data = (uint64_t)(uintptr_t)nb_tensor_data(c->leaves[j].tensor);
    nb_kentry *e = NULL;
    if ((s = get_kernel(c, &e))) return s;
    if (e->layout.shared_mem && !c->sig.blocks)
        return nb_error(NB_ERR_INVALID_ARG, "%s uses groupshared memory, which belongs to a thread block: launch it with "
                        "explicit blocks (nb_call_run_blocks; `nabla call --block-size/--grid-size`; Python "
                        "launch_raw / launchRaw), not over a thread grid", nb_call_fname(c));
    if ((s = fill_block(c, &e->layout))) return s;
    uint64_t oob = 0; /* (a kernel without bounds checks gets no record and no read-back) */
    if (e->layout.bounds_checked && (s = oob_record(c, e, &oob))) return s;
    memcpy(c->block + e->layout.oob_offset, &oob, sizeof oob);
    *out = e;
    return NB_OK;
}

/* Hands out what the caller asked for: allocated out parameters, and the results. */
static nb_status hand_out(nb_call *c, nb_tensor **results, int *count) {
    nb_status s = NB_OK;
    for (int j = 0; j < c->nleaves; j++) {
        nb_leaf_bind *b = &c->leaves[j];
        if (b->arg >= 0 && c->args[b->arg].kind == NB_ARGK_ALLOC) {
            *c->args[b->arg].slot = b->tensor;
            b->owns_tensor = 0;
        }
    }
    int nout = results ? c->nres : 0;
    for (int k = 0; k < nout && s == NB_OK; k++) {
        nb_leaf_bind *b = &c->leaves[c->nleaves + k];
        if (!b->owns_tensor) { /* the caller's array: a new handle on it */
            s = nb_tensor_broadcast_to(b->tensor, nb_tensor_ndim(b->tensor),
                                       nb_tensor_shape(b->tensor), &results[k]);
        } else {
            results[k] = b->tensor;
            b->owns_tensor = 0;
        }
    }
    if (count) *count = s == NB_OK ? nout : 0;
    if (s == NB_OK && c->overload_slot) *c->overload_slot = c->overload;
    return s;
}

/* Binds, launches and hands out the results: `single` (nb_call_run) wants *results = the one
 * non-struct result; otherwise (nb_call_run_results) up to max result leaves and *count. */
static nb_status run(nb_call *c, nb_tensor **results, int max, int *count, int single,
                     const int64_t *grid) {
    nb_kentry *e = NULL;
    nb_status s = prepare(c, results, max, single, grid, &e);
    if (s) return s;
    if ((s = launch(c, e))) return s;
    return hand_out(c, results, count);
}

static nb_status finish(nb_call *c, nb_status s) {
    if (s) {
        for (int i = 0; i < c->nargs; i++)
            if (c->args[i].kind == NB_ARGK_ALLOC && *c->args[i].slot) {
                nb_tensor_free(*c->args[i].slot);
                *c->args[i].slot = NULL;
            }
    }
    nb_call_release_temps(c);
    nb_call_free(c);
    return s;
}

/* Command lists (cmdlist.c): prepares c and hands out its results without launching; c stays
 * alive for the launches (released here on failure). */
nb_status nb_call_record(nb_call *c, nb_tensor **results, int max, int *count, const int64_t *grid, nb_kentry **entry) {
    if (count) *count = 0;
    for (int i = 0; i < max && results; i++) results[i] = NULL;
    if (c->err) {
        nb_status s = nb_error(c->err, "%s", c->errmsg);
        nb_call_free(c);
        return s;
    }
    c->sig.nleaves = 0;
    nb_status s = prepare(c, grid ? NULL : results, max, 0, grid, entry);
    if (!s) s = hand_out(c, grid ? NULL : results, count);
    if (s) {
        for (int i = 0; i < max && results; i++) {
            if (results[i]) nb_tensor_free(results[i]);
            results[i] = NULL;
        }
        if (count) *count = 0;
        return finish(c, s);
    }
    return NB_OK;
}

nb_status nb_call_run(nb_call *c, nb_tensor **result) {
    if (result) *result = NULL;
    if (!c) return nb_error(NB_ERR_INVALID_ARG, "nb_call_run: argument 'c' is NULL");
    if (c->err) {
        nb_status s = nb_error(c->err, "%s", c->errmsg);
        nb_call_free(c);
        return s;
    }
    c->sig.nleaves = 0;
    nb_status s = run(c, result, 1, NULL, 1, NULL);
    if (s && result && *result) {
        nb_tensor_free(*result);
        *result = NULL;
    }
    return finish(c, s);
}

nb_status nb_call_run_results(nb_call *c, nb_tensor **results, int max, int *count) {
    if (count) *count = 0;
    if (!c) return nb_error(NB_ERR_INVALID_ARG, "nb_call_run_results: argument 'c' is NULL");
    if (!count || max < 0 || (max > 0 && !results)) {
        nb_call_free(c);
        return nb_error(NB_ERR_INVALID_ARG, "nb_call_run_results: bad results/max/count");
    }
    for (int i = 0; i < max; i++) results[i] = NULL;
    if (c->err) {
        nb_status s = nb_error(c->err, "%s", c->errmsg);
        nb_call_free(c);
        return s;
    }
    c->sig.nleaves = 0;
    nb_status s = run(c, max > 0 ? results : NULL, max, count, 0, NULL);
    if (s) {
        for (int i = 0; i < max; i++) {
            if (results[i]) nb_tensor_free(results[i]);
            results[i] = NULL;
        }
        *count = 0;
    }
    return finish(c, s);
}

nb_status nb_call_run_grid(nb_call *c, const int64_t grid[3]) {
    if (!c) return nb_error(NB_ERR_INVALID_ARG, "nb_call_run_grid: argument 'c' is NULL");
    if (!grid) {
        nb_call_free(c);
        return nb_error(NB_ERR_INVALID_ARG, "nb_call_run_grid: grid is NULL");
    }
    if (c->err) {
        nb_status s = nb_error(c->err, "%s", c->errmsg);
        nb_call_free(c);
        return s;
    }
    c->sig.nleaves = 0;
    return finish(c, run(c, NULL, 0, NULL, 1, grid));
}

/* CUDA's launch limits, checked on every device so that a launch that works on the CPU works
 * on a GPU too. */
#define NB_BLOCK_MAX_THREADS 1024
static const int64_t block_max[3] = {1024, 1024, 64};
static const int64_t grid_max[3] = {2147483647LL, 65535, 65535};

/* "square", or "square.bwd" for its derivative kernel (the wrapper square__bwds): error messages. */
static const char *blocks_fname(const nb_call *c, char *fn, size_t cap) {
    char base[256];
    int kind = nb_ad_wrapper_name(c->f->infos[0].name, base, sizeof base);
    if (kind) snprintf(fn, cap, "%s.%s", base, kind == NB_AD_FWDS ? "fwd" : "bwd");
    else snprintf(fn, cap, "%s", c->f->infos[0].name);
    return fn;
}

nb_status nb_call_run_blocks(nb_call *c, const int64_t block[3], const int64_t grid[3]) {
    if (!c) return nb_error(NB_ERR_INVALID_ARG, "nb_call_run_blocks: argument 'c' is NULL");
    nb_status s = NB_OK;
    char fn[300]; /* (formatted only for an error: this is every launchRaw's path) */
    if (!block || !grid) s = nb_error(NB_ERR_INVALID_ARG, "nb_call_run_blocks: %s is NULL", block ? "grid" : "block");
    for (int k = 0; k < 3 && !s; k++) {
        if (block[k] <= 0 || block[k] > block_max[k])
            s = nb_error(NB_ERR_INVALID_ARG, "%s: block size %c is %lld; it must be 1..%lld (block = (%lld, %lld, %lld))",
                         blocks_fname(c, fn, sizeof fn), "xyz"[k], (long long)block[k], (long long)block_max[k],
                         (long long)block[0], (long long)block[1], (long long)block[2]);
        else if (grid[k] <= 0 || grid[k] > grid_max[k])
            s = nb_error(NB_ERR_INVALID_ARG, "%s: grid size %c is %lld; it must be 1..%lld blocks (grid = (%lld, %lld, %lld))",
                         blocks_fname(c, fn, sizeof fn), "xyz"[k], (long long)grid[k], (long long)grid_max[k],
                         (long long)grid[0], (long long)grid[1], (long long)grid[2]);
    }
    if (!s && block[0] * block[1] * block[2] > NB_BLOCK_MAX_THREADS)
        s = nb_error(NB_ERR_INVALID_ARG, "%s: a block of (%lld, %lld, %lld) is %lld threads; at most %d",
                     blocks_fname(c, fn, sizeof fn), (long long)block[0], (long long)block[1], (long long)block[2],
                     (long long)(block[0] * block[1] * block[2]), NB_BLOCK_MAX_THREADS);
    if (!s && c->err) s = nb_error(c->err, "%s", c->errmsg);
    if (s) {
        nb_call_free(c);
        return s;
    }
    c->blocks = 1;
    memcpy(c->bdim, block, sizeof c->bdim);
    c->sig.nleaves = 0;
    return finish(c, run(c, NULL, 0, NULL, 1, grid));
}

nb_status nb_call_set_stream(nb_call *c, nb_stream *s) {
    if (!c) return nb_error(NB_ERR_INVALID_ARG, "nb_call_set_stream: argument 'c' is NULL");
    if (s && nb_stream_device(s) != c->f->m->dev)
        return nb_error(NB_ERR_INVALID_ARG, "nb_call_set_stream: the stream belongs to %s, the module to %s",
                        nb_device_name(nb_stream_device(s)), nb_device_name(c->f->m->dev));
    c->stream = s;
    return NB_OK;
}

nb_status nb_call_defer_checks(nb_call *c) {
    if (!c) return nb_error(NB_ERR_INVALID_ARG, "nb_call_defer_checks: argument 'c' is NULL");
    c->defer = 1;
    return NB_OK;
}

nb_status nb_func_call(nb_func *f, int nargs, nb_tensor *const *args, nb_tensor **result) {
    if (result) *result = NULL;
    if (nargs < 0 || (nargs > 0 && !args))
        return nb_error(NB_ERR_INVALID_ARG, "nb_func_call: bad nargs/args");
    nb_call *c = NULL;
    NB_TRY(nb_call_begin(f, &c));
    for (int i = 0; i < nargs; i++) {
        nb_status s = nb_call_arg(c, i, args[i]);
        if (s) {
            nb_call_free(c);
            return s;
        }
    }
    return nb_call_run(c, result);
}

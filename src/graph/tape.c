/* Tape autograd: parameter store, activation arena, op log, backward (nn_tape.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/threadpool.h"
#include "nabla/alloc.h"
#include "nabla/device.h"
#include "nabla/tensor.h"
#include "graph/graph_internal.h"
#include "graph/tape_call.h"
#include "graph/tape_internal.h"

#define NB_TAPE_ALIGN 64

#define NB_TAPE_HDR ((sizeof(struct nb_tape_block) + NB_TAPE_ALIGN - 1) / NB_TAPE_ALIGN * NB_TAPE_ALIGN)

int nb_tape_on_cuda(const nb_tape *t) {
    return t->dev && nb_device_get_kind(t->dev) == NB_DEVICE_CUDA;
}

/* Runs an op, through the profiler when it is on (one branch when off). */
static inline nb_status nb_top_run(nb_tape *t, nb_top *op, int backward) {
    if (t->prof_level) return nb_tape_prof_run(t, op, backward);
    return nb_tape_run_op(t, op, backward);
}

static void *nb_tape_halloc(nb_tape *t, size_t size) {
    t->host_allocs++;
    return nb_alloc(size, NB_TAPE_ALIGN);
}

/* Grows a grow-only array of elem-size items to hold at least need. */
static nb_status nb_tape_grow(nb_tape *t, void **arr, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return NB_OK;
    int32_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *n = nb_tape_halloc(t, (size_t)nc * elem);
    if (!n) return nb_error(NB_ERR_OUT_OF_MEMORY, "tape: out of host memory (%d entries)", nc);
    if (*arr) {
        memcpy(n, *arr, (size_t)*cap * elem);
        nb_free(*arr, (size_t)*cap * elem);
    }
    *arr = n;
    *cap = nc;
    return NB_OK;
}

nb_status nb_tape_create(nb_tape **out) {
    if (!out) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_create: out is NULL");
    nb_tape *t = nb_calloc(sizeof *t, 16);
    if (!t) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_tape_create: out of host memory");
    t->host_allocs = 1;
    *out = t;
    return NB_OK;
}

nb_status nb_tape_create_on(nb_device *dev, nb_tape **out) {
    if (!out) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_create_on: out is NULL");
    *out = NULL;
    nb_tape *t;
    nb_status s = nb_tape_create(&t);
    if (s || !dev) {
        if (!s) *out = t;
        return s;
    }
    /* Hold a reference: devices are shared, reopening by name raises the count. */
    nb_device *held;
    s = nb_device_open(nb_device_name(dev), &held);
    if (s) {
        nb_tape_free(t);
        return s;
    }
    t->dev = held;
    *out = t;
    return NB_OK;
}

struct nb_device *nb_tape_device(const nb_tape *t) {
    if (!t) return NULL;
    if (!t->dev) {
        /* Host tape: a CPU device handle, opened on first request and closed by nb_tape_free. */
        nb_device *cpu = NULL;
        if (nb_device_open("cpu", &cpu) != NB_OK) return NULL;
        ((nb_tape *)t)->dev = cpu;
    }
    return t->dev;
}

nb_status nb_tape_set_precision(nb_tape *t, nb_tape_precision p) {
    if (!t) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_set_precision: tape is NULL");
    if ((int)p < NB_TAPE_FP32 || (int)p > NB_TAPE_BF16)
        return nb_error(NB_ERR_INVALID_ARG,
                        "nb_tape_set_precision: precision %d is not NB_TAPE_FP32 (0), NB_TAPE_TF32 "
                        "(1) or NB_TAPE_BF16 (2)", (int)p);
    t->precision = (int)p;
    return NB_OK;
}

nb_tape_precision nb_tape_get_precision(const nb_tape *t) {
    return t ? (nb_tape_precision)t->precision : NB_TAPE_FP32;
}

static void nb_tape_free_blocks(nb_tape *t) {
    struct nb_tape_block *b = t->blocks;
    while (b) {
        struct nb_tape_block *n = b->next;
        if (b->buf) {
            nb_buffer_release(b->buf); /* back to the device's cache, ordered on its stream */
            nb_free(b, sizeof *b);
        } else {
            nb_free(b, NB_TAPE_HDR + b->size);
        }
        b = n;
    }
    t->blocks = NULL;
    t->arena_cap = 0;
}

/* Parameter / gradient storage: host memory, or a device buffer on CUDA tapes. */
static void nb_tape_free_pbuf(nb_tape *t, float *p, nb_buffer *buf) {
    if (buf)
        nb_buffer_release(buf);
    else if (p)
        nb_free(p, (size_t)t->params_cap * sizeof(float));
}

void nb_tape_free(nb_tape *t) {
    if (!t) return;
    if (t->rec || t->graphs) nb_graph_tape_freed(t); /* graphs of this tape refuse to run */
    nb_tape_prof_free(t); /* its events belong to t->dev */
    nb_tcall_cache_free(t);
    nb_tape_nb_free(t);   /* (before the device: the module holds kernels of it) */
    nb_tape_free_blocks(t);
    nb_tape_free_pbuf(t, t->params, t->params_buf);
    nb_tape_free_pbuf(t, t->grads, t->grads_buf);
    if (t->vals) nb_free(t->vals, (size_t)t->vals_cap * sizeof(nb_tval));
    if (t->ops) nb_free(t->ops, (size_t)t->ops_cap * sizeof(nb_top));
    if (t->scratch) nb_free(t->scratch, (size_t)t->scratch_cap * sizeof(float));
    if (t->dev) nb_device_close(t->dev);
    nb_free(t, sizeof *t);
}

/* ---- arena ---------------------------------------------------------------------------------- */

/* A new arena block of sz usable bytes (host or device memory after the tape's device). */
static struct nb_tape_block *nb_tape_new_block(nb_tape *t, size_t sz) {
    struct nb_tape_block *b;
    if (nb_tape_on_cuda(t)) {
        b = nb_tape_halloc(t, sizeof *b);
        if (!b) {
            nb_error(NB_ERR_OUT_OF_MEMORY, "tape: out of host memory");
            return NULL;
        }
        t->device_allocs++;
        if (nb_buffer_alloc(t->dev, sz, &b->buf) != NB_OK) {
            nb_free(b, sizeof *b);
            return NULL; /* the device's error stands */
        }
        b->base = nb_buffer_ptr(b->buf);
    } else {
        b = nb_tape_halloc(t, NB_TAPE_HDR + sz);
        if (!b) {
            nb_error(NB_ERR_OUT_OF_MEMORY, "tape: arena out of host memory (%zu bytes)", sz);
            return NULL;
        }
        b->buf = NULL;
        b->base = (char *)b + NB_TAPE_HDR;
    }
    b->next = NULL;
    b->size = sz;
    b->used = 0;
    return b;
}

float *nb_tape_alloc_f32(nb_tape *t, int64_t count, int zero) {
    return nb_tape_alloc_dt(t, count, NB_F32, zero);
}

void *nb_tape_alloc_dt(nb_tape *t, int64_t count, nb_dtype dt, int zero) {
    size_t bytes = (size_t)(count > 0 ? count : 1) * nb_tape_dt_size(dt);
    bytes = (bytes + NB_TAPE_ALIGN - 1) / NB_TAPE_ALIGN * NB_TAPE_ALIGN;
    struct nb_tape_block *b = t->blocks;
    if (!b || b->size - b->used < bytes) {
        size_t sz = (size_t)t->arena_cap;
        if (sz < bytes) sz = bytes;
        if (sz < (size_t)1 << 20) sz = (size_t)1 << 20;
        struct nb_tape_block *nbk = nb_tape_new_block(t, sz);
        if (!nbk) return NULL;
        nbk->next = t->blocks;
        t->blocks = nbk;
        t->arena_cap += (int64_t)sz;
        b = nbk;
    }
    void *p = b->base + b->used;
    b->used += bytes;
    t->arena_used += (int64_t)bytes;
    if (t->arena_used > t->arena_high) t->arena_high = t->arena_used;
    if (zero) {
        if (b->buf) {
            if (nb_memset(t->dev, p, 0, bytes) != NB_OK) return NULL;
        } else {
            memset(p, 0, bytes);
        }
    }
    return p;
}

nb_status nb_tape_reset(nb_tape *t) {
    if (!t) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_reset: tape is NULL");
    if (t->prof) { /* the last step's op times (waits for its events) */
        nb_status ps = nb_tape_prof_collect(t);
        if (ps) return ps;
    }
    t->n_vals = t->n_param_vals;
    t->n_ops = 0;
    t->arena_used = 0;
    t->resets++;
    if (t->blocks && t->blocks->next) {
        /* Outgrown: replace the blocks by one of the high-water size (grow-only). */
        int64_t cap = t->arena_high > t->arena_cap ? t->arena_high : t->arena_cap;
        nb_tape_free_blocks(t);
        /* CUDA: the outgrown blocks went to the device's cache, where nothing of their sizes
         * will ask for them again; hand them back to the driver before taking the large block
         * (a one-off cost of growth steps; steady state never gets here) */
        if (nb_tape_on_cuda(t)) nb_device_empty_cache(t->dev);
        struct nb_tape_block *b = nb_tape_new_block(t, (size_t)cap);
        if (!b) return nb_error(NB_ERR_OUT_OF_MEMORY, "tape: arena out of memory (%lld bytes)",
                                (long long)cap);
        t->blocks = b;
        t->arena_cap = cap;
    } else if (t->blocks) {
        t->blocks->used = 0;
    }
    return NB_OK;
}

/* Host scratch of at least count floats (grow-only; for uploads built on the host). */
float *nb_tape_scratch(nb_tape *t, int64_t count) {
    if (count > t->scratch_cap) {
        int64_t cap = t->scratch_cap ? t->scratch_cap : 256;
        while (cap < count) cap *= 2;
        float *p = nb_tape_halloc(t, (size_t)cap * sizeof(float));
        if (!p) {
            nb_error(NB_ERR_OUT_OF_MEMORY, "tape: out of host memory (%lld floats)", (long long)cap);
            return NULL;
        }
        if (t->scratch) nb_free(t->scratch, (size_t)t->scratch_cap * sizeof(float));
        t->scratch = p;
        t->scratch_cap = cap;
    }
    return t->scratch;
}

/* Copies count floats from host memory into tape memory (host or device). */
nb_status nb_tape_upload(nb_tape *t, float *dst, const float *src, int64_t count) {
    if (count <= 0) return NB_OK;
    if (nb_tape_on_cuda(t)) return nb_memcpy_h2d(t->dev, dst, src, (size_t)count * sizeof(float));
    memcpy(dst, src, (size_t)count * sizeof(float));
    return NB_OK;
}

/* Copies count floats from tape memory (host or device) to host memory; waits for the device. */
static nb_status nb_tape_download(nb_tape *t, float *dst, const float *src, int64_t count) {
    if (count <= 0) return NB_OK;
    if (nb_tape_on_cuda(t)) return nb_memcpy_d2h(t->dev, dst, src, (size_t)count * sizeof(float));
    memcpy(dst, src, (size_t)count * sizeof(float));
    return NB_OK;
}

nb_status nb_tape_download_dt(nb_tape *t, float *dst, const void *src, nb_dtype dt,
                                     int64_t count) {
    if (dt == NB_F32) return nb_tape_download(t, dst, src, count);
    if (count <= 0) return NB_OK;
    /* the bf16 halves land in the upper half of dst, then widen front to back */
    uint16_t *h = (uint16_t *)(dst + count) - count;
    nb_status s = nb_tape_on_cuda(t) ? nb_memcpy_d2h(t->dev, h, src, (size_t)count * 2)
                                     : (memcpy(h, src, (size_t)count * 2), NB_OK);
    if (s) return s;
    for (int64_t i = 0; i < count; i++) dst[i] = nb_bf16_to_f32(h[i]);
    return NB_OK;
}

/* Zeroes count floats of tape memory. */
nb_status nb_tape_zero(nb_tape *t, float *dst, int64_t count) {
    if (count <= 0) return NB_OK;
    if (nb_tape_on_cuda(t)) return nb_memset(t->dev, dst, 0, (size_t)count * sizeof(float));
    memset(dst, 0, (size_t)count * sizeof(float));
    return NB_OK;
}

nb_status nb_tape_copy(nb_tape *t, float *dst, const float *src, int64_t count) {
    if (count <= 0 || dst == src) return NB_OK;
    if (nb_tape_on_cuda(t)) return nb_memcpy_d2d(t->dev, dst, src, (size_t)count * sizeof(float));
    memmove(dst, src, (size_t)count * sizeof(float));
    return NB_OK;
}

nb_status nb_tape_accumulate(nb_tape *t, float *dst, const float *src, int64_t count) {
    if (count <= 0) return NB_OK;
    if (nb_tape_on_cuda(t)) return nb_tape_cuda_accumulate(t, dst, src, count);
    for (int64_t i = 0; i < count; i++) dst[i] += src[i];
    return NB_OK;
}

nb_status nb_tape_grad_dst(nb_tape *t, nb_tvar v, float **g, float **dst) {
    int ow = 0;
    *dst = NULL;
    nb_status s = nb_tape_grad_buf_w(t, v, g, &ow);
    if (s || !*g) return s;
    *dst = ow ? *g : nb_tape_alloc_f32(t, t->vals[v].count, 0);
    return *dst ? NB_OK : NB_ERR_OUT_OF_MEMORY;
}

nb_status nb_tape_grad_finish(nb_tape *t, float *g, const float *dst, int64_t count) {
    return g && dst && dst != g ? nb_tape_accumulate(t, g, dst, count) : NB_OK;
}

/* ---- values --------------------------------------------------------------------------------- */

nb_tval *nb_tape_val(nb_tape *t, nb_tvar v, const char *what) {
    if (v < 0 || v >= t->n_vals) {
        nb_error(NB_ERR_INVALID_ARG, "tape: %s is not a live value (handle %d; %d values alive)",
                 what, (int)v, (int)t->n_vals);
        return NULL;
    }
    return &t->vals[v];
}

const char *nb_tape_shape_str(const nb_tval *v, char *buf, size_t cap) {
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "[");
    for (int i = 0; i < v->ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? "," : "", (long long)v->shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

static nb_status nb_tape_check_shape(const char *fn, int ndim, const int64_t *shape, int64_t *count) {
    if (ndim < 1 || ndim > NB_TAPE_MAX_DIMS)
        return nb_error(NB_ERR_SHAPE, "%s: ndim %d is not in 1..%d", fn, ndim, NB_TAPE_MAX_DIMS);
    if (!shape) return nb_error(NB_ERR_INVALID_ARG, "%s: shape is NULL", fn);
    int64_t c = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1 || shape[i] > ((int64_t)1 << 40))
            return nb_error(NB_ERR_SHAPE, "%s: dimension %d has size %lld (must be >= 1)", fn, i,
                            (long long)shape[i]);
        c *= shape[i];
        if (c > ((int64_t)1 << 40)) return nb_error(NB_ERR_SHAPE, "%s: tensor too large", fn);
    }
    *count = c;
    return NB_OK;
}

nb_status nb_tape_new_value(nb_tape *t, int ndim, const int64_t *shape, int needs_grad,
                            nb_tvar *out) {
    return nb_tape_new_value_dt(t, ndim, shape, NB_F32, needs_grad, out);
}

nb_status nb_tape_new_value_dt(nb_tape *t, int ndim, const int64_t *shape, nb_dtype dt,
                               int needs_grad, nb_tvar *out) {
    int64_t count, shp[NB_TAPE_MAX_DIMS];
    nb_status s = nb_tape_check_shape("tape", ndim, shape, &count);
    if (s) return s;
    memcpy(shp, shape, (size_t)ndim * sizeof(int64_t)); /* shape may point into t->vals */
    shape = shp;
    s = nb_tape_grow(t, (void **)&t->vals, &t->vals_cap, t->n_vals + 1, sizeof(nb_tval));
    if (s) return s;
    float *d = nb_tape_alloc_dt(t, count, dt, 0);
    if (!d) return NB_ERR_OUT_OF_MEMORY;
    nb_tval *v = &t->vals[t->n_vals];
    memset(v, 0, sizeof *v);
    v->dtype = dt;
    v->ndim = ndim;
    for (int i = 0; i < ndim; i++) v->shape[i] = shape[i];
    v->count = count;
    v->data = d;
    v->needs_grad = needs_grad;
    t->frozen = 1;
    *out = t->n_vals++;
    return NB_OK;
}

nb_status nb_tape_input(nb_tape *t, int ndim, const int64_t *shape, const float *data,
                        int requires_grad, nb_tvar *out) {
    if (!t || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_input: tape or out is NULL");
    if (!data) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_input: data is NULL");
    int64_t count;
    nb_status s = nb_tape_check_shape("nb_tape_input", ndim, shape, &count);
    if (s) return s;
    s = nb_tape_new_value(t, ndim, shape, requires_grad != 0, out);
    if (s) return s;
    if (t->rec) nb_graph_rec_input(t, *out); /* an input of the graph being recorded */
    return nb_tape_upload(t, t->vals[*out].data, data, count);
}

nb_status nb_tape_input_tensor(nb_tape *t, const nb_tensor *x, int requires_grad, nb_tvar *out) {
    if (!t || !x || !out)
        return nb_error(NB_ERR_INVALID_ARG, "nb_tape_input_tensor: tape, tensor or out is NULL");
    if (nb_tensor_dtype(x) != NB_F32)
        return nb_error(NB_ERR_DTYPE, "nb_tape_input_tensor: the tensor is %s, inputs are f32",
                        nb_dtype_name(nb_tensor_dtype(x)));
    if (!nb_tensor_is_contiguous(x))
        return nb_error(NB_ERR_LAYOUT, "nb_tape_input_tensor: the tensor is not contiguous");
    nb_device *xd = nb_tensor_device(x);
    if (!xd || nb_device_get_kind(xd) != NB_DEVICE_CUDA)
        return nb_tape_input(t, nb_tensor_ndim(x), nb_tensor_shape(x), nb_tensor_data(x),
                             requires_grad, out);
    if (!nb_tape_on_cuda(t) || strcmp(nb_device_name(xd), nb_device_name(t->dev)))
        return nb_error(NB_ERR_DEVICE, "nb_tape_input_tensor: the tensor is on %s, the tape runs "
                        "on %s", nb_device_name(xd), nb_tape_on_cuda(t) ? nb_device_name(t->dev)
                        : "the CPU");
    int64_t count;
    nb_status s = nb_tape_check_shape("nb_tape_input_tensor", nb_tensor_ndim(x), nb_tensor_shape(x),
                                      &count);
    if (s) return s;
    s = nb_tape_new_value(t, nb_tensor_ndim(x), nb_tensor_shape(x), requires_grad != 0, out);
    if (s) return s;
    if (t->rec) nb_graph_rec_input(t, *out);
    return nb_memcpy_d2d(t->dev, t->vals[*out].data, nb_tensor_data(x), (size_t)count * sizeof(float));
}

/* ---- parameters ----------------------------------------------------------------------------- */

/* Grows the parameter and gradient buffers to hold at least need floats (zero-filled tail;
 * existing values copied; parameter values re-pointed). */
static nb_status nb_tape_grow_params(nb_tape *t, int64_t need) {
    int64_t cap = t->params_cap ? t->params_cap : 1024;
    while (cap < need) cap *= 2;
    size_t bytes = (size_t)cap * sizeof(float), old = (size_t)t->n_params * sizeof(float);
    float *p = NULL, *g = NULL;
    nb_buffer *pb = NULL, *gb = NULL;
    nb_status s = NB_OK;
    if (nb_tape_on_cuda(t)) {
        t->device_allocs += 2;
        if ((s = nb_buffer_alloc(t->dev, bytes, &pb)) || (s = nb_buffer_alloc(t->dev, bytes, &gb))) {
            if (pb) nb_buffer_release(pb);
            return s;
        }
        p = nb_buffer_ptr(pb);
        g = nb_buffer_ptr(gb);
        if ((s = nb_memset(t->dev, p, 0, bytes)) || (s = nb_memset(t->dev, g, 0, bytes)) ||
            (t->params && ((s = nb_memcpy_d2d(t->dev, p, t->params, old)) ||
                           (s = nb_memcpy_d2d(t->dev, g, t->grads, old))))) {
            nb_buffer_release(pb);
            nb_buffer_release(gb);
            return s;
        }
    } else {
        p = nb_tape_halloc(t, bytes);
        g = nb_tape_halloc(t, bytes);
        if (!p || !g) {
            if (p) nb_free(p, bytes);
            if (g) nb_free(g, bytes);
            return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_tape_param: out of host memory");
        }
        memset(p, 0, bytes);
        memset(g, 0, bytes);
        if (t->params) {
            memcpy(p, t->params, old);
            memcpy(g, t->grads, old);
        }
    }
    nb_tape_free_pbuf(t, t->params, t->params_buf);
    nb_tape_free_pbuf(t, t->grads, t->grads_buf);
    t->params = p;
    t->grads = g;
    t->params_buf = pb;
    t->grads_buf = gb;
    t->params_cap = cap;
    for (int32_t i = 0; i < t->n_param_vals; i++) {
        t->vals[i].data = t->params + t->vals[i].offset;
        t->vals[i].grad = t->grads + t->vals[i].offset;
    }
    return NB_OK;
}

nb_status nb_tape_param(nb_tape *t, const char *name, int ndim, const int64_t *shape, nb_tvar *out) {
    if (!t || !name || !out)
        return nb_error(NB_ERR_INVALID_ARG, "nb_tape_param: tape, name or out is NULL");
    if (t->frozen)
        return nb_error(NB_ERR_INVALID_ARG,
                        "nb_tape_param: parameter '%s' registered after the first step "
                        "(register all parameters before any input or op)", name);
    if (!name[0] || strlen(name) >= sizeof t->vals[0].name)
        return nb_error(NB_ERR_INVALID_ARG, "nb_tape_param: name must have 1..%d characters",
                        (int)sizeof t->vals[0].name - 1);
    nb_tvar dup;
    if (nb_tape_param_find(t, name, &dup) == NB_OK)
        return nb_error(NB_ERR_INVALID_ARG, "nb_tape_param: parameter '%s' already registered", name);
    nb_clear_error();
    int64_t count;
    nb_status s = nb_tape_check_shape("nb_tape_param", ndim, shape, &count);
    if (s) return s;
    s = nb_tape_grow(t, (void **)&t->vals, &t->vals_cap, t->n_vals + 1, sizeof(nb_tval));
    if (s) return s;
    int64_t need = t->n_params + count;
    if (need > t->params_cap && (s = nb_tape_grow_params(t, need))) return s;
    nb_tval *v = &t->vals[t->n_vals];
    memset(v, 0, sizeof *v);
    v->ndim = ndim;
    for (int i = 0; i < ndim; i++) v->shape[i] = shape[i];
    v->count = count;
    v->offset = t->n_params;
    v->data = t->params + v->offset;
    v->grad = t->grads + v->offset;
    v->needs_grad = 1;
    v->is_param = 1;
    snprintf(v->name, sizeof v->name, "%s", name);
    t->n_params = need;
    *out = t->n_vals++;
    t->n_param_vals = t->n_vals;
    return NB_OK;
}

nb_status nb_tape_param_view(nb_tape *t, const char *name, nb_tvar first, int ndim,
                            const int64_t *shape, nb_tvar *out) {
    if (!t || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_param_view: tape or out is NULL");
    if (first < 0 || first >= t->n_param_vals)
        return nb_error(NB_ERR_INVALID_ARG, "nb_tape_param_view: handle %d is not a parameter", first);
    int64_t count;
    nb_status s = nb_tape_check_shape("nb_tape_param_view", ndim, shape, &count);
    if (s) return s;
    int64_t off = t->vals[first].offset;
    if (off + count > t->n_params)
        return nb_error(NB_ERR_SHAPE, "nb_tape_param_view: %lld floats from parameter '%s' run past "
                        "the %lld parameters", (long long)count, t->vals[first].name,
                        (long long)t->n_params);
    if ((s = nb_tape_param(t, name, ndim, shape, out))) return s; /* a slot, a name, checks */
    nb_tval *v = &t->vals[*out];
    t->n_params -= count; /* ... but no memory of its own */
    v->offset = off;
    v->data = t->params + off;
    v->grad = t->grads + off;
    return NB_OK;
}

nb_status nb_tape_param_find(const nb_tape *t, const char *name, nb_tvar *out) {
    if (!t || !name || !out)
        return nb_error(NB_ERR_INVALID_ARG, "nb_tape_param_find: tape, name or out is NULL");
    for (int32_t i = 0; i < t->n_param_vals; i++)
        if (strcmp(t->vals[i].name, name) == 0) {
            *out = i;
            return NB_OK;
        }
    return nb_error(NB_ERR_NOT_FOUND, "tape: no parameter named '%s' (%d registered)", name,
                    (int)t->n_param_vals);
}

static nb_status nb_tape_check_param(const nb_tape *t, nb_tvar p, const char *fn) {
    if (!t) return nb_error(NB_ERR_INVALID_ARG, "%s: tape is NULL", fn);
    if (p < 0 || p >= t->n_param_vals)
        return nb_error(NB_ERR_INVALID_ARG, "%s: handle %d is not a parameter", fn, (int)p);
    return NB_OK;
}

nb_status nb_tape_param_info(const nb_tape *t, nb_tvar p, int64_t *offset, int64_t *count) {
    nb_status s = nb_tape_check_param(t, p, "nb_tape_param_info");
    if (s) return s;
    if (offset) *offset = t->vals[p].offset;
    if (count) *count = t->vals[p].count;
    return NB_OK;
}

nb_status nb_tape_params(nb_tape *t, float **data, int64_t *count) {
    if (!t || !data) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_params: tape or data is NULL");
    *data = t->params;
    if (count) *count = t->n_params;
    return NB_OK;
}

nb_status nb_tape_grads(nb_tape *t, float **grad, int64_t *count) {
    if (!t || !grad) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_grads: tape or grad is NULL");
    *grad = t->grads;
    if (count) *count = t->n_params;
    return NB_OK;
}

nb_status nb_tape_param_init_uniform(nb_tape *t, nb_tvar p, float bound, uint64_t seed) {
    nb_status s = nb_tape_check_param(t, p, "nb_tape_param_init_uniform");
    if (s) return s;
    nb_tval *v = &t->vals[p];
    float *h = nb_tape_on_cuda(t) ? nb_tape_scratch(t, v->count) : v->data;
    if (!h) return NB_ERR_OUT_OF_MEMORY;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    for (int64_t i = 0; i < v->count; i++) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27; /* xorshift64* */
        uint64_t r = x * 0x2545F4914F6CDD1Dull;
        float u = (float)(r >> 40) * (1.0f / 16777216.0f); /* [0,1) */
        h[i] = (2.0f * u - 1.0f) * bound;
    }
    return h == v->data ? NB_OK : nb_tape_upload(t, v->data, h, v->count);
}

nb_status nb_tape_zero_grad(nb_tape *t) {
    if (!t) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_zero_grad: tape is NULL");
    return t->grads ? nb_tape_zero(t, t->grads, t->n_params) : NB_OK;
}

/* ---- op log and backward -------------------------------------------------------------------- */

int nb_tape_bf16_storage(const nb_tape *t) {
    return t->precision == NB_TAPE_BF16 && nb_tape_on_cuda(t);
}

/* The row flags of an op kind on this tape (0 on CPU tapes). */
static unsigned nb_top_flags(const nb_tape *t, int kind) {
    if (!nb_tape_on_cuda(t) || kind < 0 || kind >= NB_TOP_COUNT) return 0;
    return nb_top_rows[kind].flags;
}

nb_status nb_tape_op_out(nb_tape *t, nb_top *op, int ndim, const int64_t *shape) {
    int ng = 0;
    for (int i = 0; i < op->nin; i++)
        if (op->in[i] >= 0 && t->vals[op->in[i]].needs_grad) ng = 1;
    unsigned fl = nb_top_flags(t, op->kind);
    nb_dtype dt = NB_F32;
    if (fl & NB_TOPF_OUT_LIKE_IN) {
        if (op->nin > 0 && op->in[0] >= 0) dt = t->vals[op->in[0]].dtype;
    } else if ((fl & NB_TOPF_OUT_BF16) && nb_tape_bf16_storage(t)) {
        dt = NB_BF16;
    }
    return nb_tape_new_value_dt(t, ndim, shape, dt, ng, &op->out);
}

nb_status nb_tape_cast(nb_tape *t, nb_tvar x, nb_dtype dt, nb_tvar *out) {
    nb_tval *v = nb_tape_val(t, x, "tape cast: input");
    if (!v) return NB_ERR_INVALID_ARG;
    if (dt != NB_F32 && dt != NB_BF16)
        return nb_error(NB_ERR_INVALID_ARG, "tape cast: dtype %s (f32 or bf16)", nb_dtype_name(dt));
    if (v->dtype == dt) {
        *out = x;
        return NB_OK;
    }
    nb_top op = {.kind = NB_TOP_CAST, .nin = 1, .in = {x, NB_TVAR_NONE, NB_TVAR_NONE}};
    op.ip[0] = (int)dt;
    int64_t shape[NB_TAPE_MAX_DIMS];
    memcpy(shape, v->shape, sizeof shape);
    nb_status s = nb_tape_new_value_dt(t, v->ndim, shape, dt, v->needs_grad, &op.out);
    if (s) return s;
    if ((s = nb_tape_record(t, &op))) return s;
    *out = op.out;
    return NB_OK;
}

nb_status nb_tape_record(nb_tape *t, const nb_top *op) {
    nb_status s = nb_tape_check_op(t, op);
    if (s) return s;
    nb_top cp = *op;
    if (op->kind != NB_TOP_CAST && !(nb_top_flags(t, op->kind) & NB_TOPF_IN_BF16)) {
        /* the row reads f32 only: record casts of its bf16 inputs first */
        for (int i = 0; i < cp.nin; i++) {
            if (cp.in[i] < 0 || cp.in[i] >= t->n_vals || t->vals[cp.in[i]].dtype == NB_F32) continue;
            if ((s = nb_tape_cast(t, cp.in[i], NB_F32, &cp.in[i]))) return s;
        }
    }
    if ((s = nb_tape_grow(t, (void **)&t->ops, &t->ops_cap, t->n_ops + 1, sizeof(nb_top)))) return s;
    nb_top *rec = &t->ops[t->n_ops];
    *rec = cp;
    s = nb_top_run(t, rec, 0);
    if (s) return s;
    t->n_ops++;
    return NB_OK;
}

/* A fresh gradient buffer for v: its planned buffer on a graph's replay tape, else the arena. */
static float *nb_tape_grad_alloc(nb_tape *t, nb_tvar v, int zero) {
    nb_tval *tv = &t->vals[v];
    float *p = t->grad_plan ? t->grad_plan[v] : NULL;
    if (!p) return nb_tape_alloc_dt(t, tv->count, tv->dtype, zero);
    if (zero) {
        size_t bytes = (size_t)tv->count * nb_tape_dt_size(tv->dtype);
        if (nb_tape_on_cuda(t)) {
            if (nb_memset(t->dev, p, 0, bytes) != NB_OK) return NULL;
        } else {
            memset(p, 0, bytes);
        }
    }
    return p;
}

nb_status nb_tape_grad_buf(nb_tape *t, nb_tvar v, float **g) {
    *g = NULL;
    if (v < 0) return NB_OK;
    nb_tval *tv = &t->vals[v];
    if (!tv->needs_grad) return NB_OK;
    if (tv->alias1) { /* shares the aliased value's gradient */
        nb_status s = nb_tape_grad_buf(t, tv->alias1 - 1, g);
        tv->grad = *g;
        return s;
    }
    if (!tv->grad) {
        tv->grad = nb_tape_grad_alloc(t, v, 1);
        if (!tv->grad) return NB_ERR_OUT_OF_MEMORY;
    }
    *g = tv->grad;
    return NB_OK;
}

nb_status nb_tape_grad_buf_w(nb_tape *t, nb_tvar v, float **g, int *overwrite) {
    *g = NULL;
    *overwrite = 0;
    if (v < 0) return NB_OK;
    nb_tval *tv = &t->vals[v];
    if (!tv->needs_grad) return NB_OK;
    if (tv->alias1) {
        nb_status s = nb_tape_grad_buf_w(t, tv->alias1 - 1, g, overwrite);
        tv->grad = *g;
        return s;
    }
    if (!tv->grad) {
        /* first contribution: the caller writes every element, so no zero fill */
        tv->grad = nb_tape_grad_alloc(t, v, 0);
        if (!tv->grad) return NB_ERR_OUT_OF_MEMORY;
        *overwrite = 1;
    }
    *g = tv->grad;
    return NB_OK;
}

nb_status nb_tape_backward_seed(nb_tape *t, nb_tvar loss) {
    nb_tval *l = &t->vals[loss];
    /* Activation gradients from an earlier backward are stale: start them afresh. */
    for (int32_t i = t->n_param_vals; i < t->n_vals; i++) t->vals[i].grad = NULL;
    float *g;
    nb_status s = nb_tape_grad_buf(t, loss, &g);
    if (s) return s;
    if (l->dtype == NB_BF16) { /* a fresh (zeroed) bf16 gradient: store bf16 1.0 */
        uint16_t one = nb_f32_to_bf16(1.0f);
        return nb_tape_on_cuda(t) ? nb_memcpy_h2d(t->dev, g, &one, sizeof one)
                                  : (memcpy(g, &one, sizeof one), NB_OK);
    }
    if (nb_tape_on_cuda(t)) return nb_tape_cuda_add_scalar(t, g, 1.0f); /* no host round trip */
    g[0] += 1.0f;
    return NB_OK;
}

nb_status nb_tape_backward(nb_tape *t, nb_tvar loss) {
    if (!t) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_backward: tape is NULL");
    nb_tval *l = nb_tape_val(t, loss, "nb_tape_backward: loss");
    if (!l) return NB_ERR_INVALID_ARG;
    if (l->count != 1) {
        char b[96];
        return nb_error(NB_ERR_SHAPE, "nb_tape_backward: loss must be a scalar (1 element), got %s",
                        nb_tape_shape_str(l, b, sizeof b));
    }
    if (!l->needs_grad)
        return nb_error(NB_ERR_INVALID_ARG,
                        "nb_tape_backward: loss does not depend on any parameter or input that "
                        "requires a gradient");
    nb_status s = nb_tape_backward_seed(t, loss);
    if (s) return s;
    if (t->prof_level) nb_tape_prof_pass(t);
    for (int32_t i = t->n_ops - 1; i >= 0; i--) {
        const nb_top *op = &t->ops[i];
        const nb_tval *o = &t->vals[op->out];
        if (!o->needs_grad || !o->grad) continue; /* not reached */
        s = nb_top_run(t, (nb_top *)op, 1);
        if (s) return s;
    }
    if (t->rec) nb_graph_rec_backward(t, loss); /* the backward is part of the graph */
    return NB_OK;
}

/* ---- inspection ----------------------------------------------------------------------------- */

nb_status nb_tape_shape(const nb_tape *t, nb_tvar v, int *ndim, int64_t *shape) {
    if (!t) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_shape: tape is NULL");
    nb_tval *tv = nb_tape_val((nb_tape *)t, v, "nb_tape_shape: value");
    if (!tv) return NB_ERR_INVALID_ARG;
    if (ndim) *ndim = tv->ndim;
    if (shape)
        for (int i = 0; i < tv->ndim; i++) shape[i] = tv->shape[i];
    return NB_OK;
}

nb_status nb_tape_dtype(const nb_tape *t, nb_tvar v, nb_dtype *dtype) {
    if (!t || !dtype) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_dtype: tape or dtype is NULL");
    nb_tval *tv = nb_tape_val((nb_tape *)t, v, "nb_tape_dtype: value");
    if (!tv) return NB_ERR_INVALID_ARG;
    *dtype = tv->dtype;
    return NB_OK;
}

nb_status nb_tape_data(nb_tape *t, nb_tvar v, float **data, int64_t *count) {
    if (!t || !data) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_data: tape or data is NULL");
    nb_tval *tv = nb_tape_val(t, v, "nb_tape_data: value");
    if (!tv) return NB_ERR_INVALID_ARG;
    if (t->rec) nb_graph_rec_host(t, v, "nb_tape_data");
    *data = tv->data;
    if (count) *count = tv->count;
    return NB_OK;
}

nb_status nb_tape_grad(nb_tape *t, nb_tvar v, float **grad, int64_t *count) {
    if (!t || !grad) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_grad: tape or grad is NULL");
    nb_tval *tv = nb_tape_val(t, v, "nb_tape_grad: value");
    if (!tv) return NB_ERR_INVALID_ARG;
    if (t->rec) nb_graph_rec_host(t, v, "nb_tape_grad");
    *grad = tv->needs_grad ? tv->grad : NULL;
    if (count) *count = tv->count;
    return NB_OK;
}

nb_status nb_tape_get_stats(const nb_tape *t, nb_tape_stats *out) {
    if (!t || !out) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_get_stats: tape or out is NULL");
    out->host_allocs = t->host_allocs;
    out->device_allocs = t->device_allocs;
    out->arena_capacity = t->arena_cap;
    out->arena_used = t->arena_used;
    out->arena_high_water = t->arena_high;
    out->n_values = t->n_vals;
    out->n_ops = t->n_ops;
    return NB_OK;
}

/* ---- host read / write (any device) --------------------------------------------------------- */

static nb_status nb_tape_check_count(const char *fn, const char *what, int64_t want, int64_t count,
                                     const void *host) {
    if (!host) return nb_error(NB_ERR_INVALID_ARG, "%s: host pointer is NULL", fn);
    if (count != want)
        return nb_error(NB_ERR_SHAPE, "%s: count %lld does not match the %lld floats of %s", fn,
                        (long long)count, (long long)want, what);
    return NB_OK;
}

nb_status nb_tape_read(nb_tape *t, nb_tvar v, float *host, int64_t count) {
    if (!t) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_read: tape is NULL");
    nb_tval *tv = nb_tape_val(t, v, "nb_tape_read: value");
    if (!tv) return NB_ERR_INVALID_ARG;
    if (t->rec) nb_graph_rec_host(t, v, "nb_tape_read");
    nb_status s = nb_tape_check_count("nb_tape_read", "the value", tv->count, count, host);
    return s ? s : nb_tape_download_dt(t, host, tv->data, tv->dtype, count);
}

nb_status nb_tape_read_grad(nb_tape *t, nb_tvar v, float *host, int64_t count) {
    if (!t) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_read_grad: tape is NULL");
    nb_tval *tv = nb_tape_val(t, v, "nb_tape_read_grad: value");
    if (!tv) return NB_ERR_INVALID_ARG;
    if (t->rec) nb_graph_rec_host(t, v, "nb_tape_read_grad");
    nb_status s = nb_tape_check_count("nb_tape_read_grad", "the value", tv->count, count, host);
    if (s) return s;
    if (!tv->needs_grad || !tv->grad) {
        memset(host, 0, (size_t)count * sizeof(float));
        return NB_OK;
    }
    return nb_tape_download_dt(t, host, tv->grad, tv->dtype, count);
}

nb_status nb_tape_write_params(nb_tape *t, const float *host, int64_t count) {
    if (!t) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_write_params: tape is NULL");
    nb_status s = nb_tape_check_count("nb_tape_write_params", "the parameters", t->n_params, count,
                                      host);
    return s ? s : nb_tape_upload(t, t->params, host, count);
}

nb_status nb_tape_read_params(nb_tape *t, float *host, int64_t count) {
    if (!t) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_read_params: tape is NULL");
    nb_status s = nb_tape_check_count("nb_tape_read_params", "the parameters", t->n_params, count,
                                      host);
    return s ? s : nb_tape_download(t, host, t->params, count);
}

nb_status nb_tape_read_grads(nb_tape *t, float *host, int64_t count) {
    if (!t) return nb_error(NB_ERR_INVALID_ARG, "nb_tape_read_grads: tape is NULL");
    nb_status s = nb_tape_check_count("nb_tape_read_grads", "the gradients", t->n_params, count,
                                      host);
    return s ? s : nb_tape_download(t, host, t->grads, count);
}

void nb_tape_parallel(int64_t n, int64_t grain, void (*fn)(void *, int64_t, int64_t), void *ctx) {
    nb_threadpool *p = nb_threadpool_global();
    if (p && n > grain)
        nb_threadpool_run(p, n, grain, fn, ctx);
    else
        fn(ctx, 0, n);
}

/* Host functions ([TorchEntryPoint], include/nabla/module.h nb_host_call): the module's host unit
 * (lang emit_host.c) compiled for the CPU once per module generation, and the runtime table its
 * generated code calls: tensors allocated on the module's device, kernels of the module launched
 * with nb_call_* over an explicit grid.
 *
 * Handles: the call's tensors in a table, handle = index + 1 (0 = none). Arguments come first
 * (borrowed); tensors allocated by the host code are owned by the table until the call returns:
 * those returned become the results, the others are freed.
 * Errors: the first failing runtime call records its status and message; later runtime calls do
 * nothing (return 0), and nb_host_call reports the error once the generated code returns.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "call/call_internal.h"
#include "core/util.h"
#include "nabla/alloc.h"

typedef struct nb_host_karg {
    int is_tensor;
    int n;
    long long tensor;
    double v[4];
} nb_host_karg;

typedef union nb_host_val {
    long long h;
    long long i;
    double f;
} nb_host_val;

typedef struct nb_host_rt {
    void *ctx;
    long long (*alloc)(void *ctx, int dtype, int ndim, const long long *shape, int zero);
    long long (*like)(void *ctx, long long h, int zero);
    long long (*size)(void *ctx, long long h, int dim);
    long long (*dims)(void *ctx, long long h);
    long long (*stride)(void *ctx, long long h, int dim);
    void (*dispatch)(void *ctx, const char *kernel, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                     unsigned bz, int nargs, const nb_host_karg *args);
} nb_host_rt;

typedef void (*host_entry_fn)(const char *name, int overload, const nb_host_rt *rt, const nb_host_val *a,
                              nb_host_val *r, int *found);

#define HOST_MAX_TENSORS 4096

typedef struct host_ctx {
    nb_module *m;
    const char *fname;
    nb_tensor **t;
    unsigned char *owned;
    int n, cap;
    nb_status st;
    char *msg; /* the first error's message (nb_alloc'd) */
} host_ctx;

static void fail(host_ctx *x, nb_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(host_ctx *x, nb_status st, const char *fmt, ...) {
    if (x->st != NB_OK) return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    x->st = st;
    size_t len = strlen(buf) + 1;
    x->msg = nb_alloc(len, 1);
    if (x->msg) memcpy(x->msg, buf, len);
}

static long long add_tensor(host_ctx *x, nb_tensor *t, int owned) {
    if (x->n >= x->cap) {
        int nc = x->cap ? x->cap * 2 : 16;
        if (nc > HOST_MAX_TENSORS) {
            nb_tensor_free(owned ? t : NULL);
            fail(x, NB_ERR_INVALID_ARG, "%s: more than %d tensors in one call", x->fname, HOST_MAX_TENSORS);
            return 0;
        }
        nb_tensor **nt = nb_alloc(sizeof *nt * (size_t)nc, 16);
        unsigned char *no = nb_alloc((size_t)nc, 16);
        if (!nt || !no) {
            nb_free(nt, sizeof *nt * (size_t)nc);
            nb_free(no, (size_t)nc);
            if (owned) nb_tensor_free(t);
            fail(x, NB_ERR_OUT_OF_MEMORY, "%s: out of host memory", x->fname);
            return 0;
        }
        if (x->n) {
            memcpy(nt, x->t, sizeof *nt * (size_t)x->n);
            memcpy(no, x->owned, (size_t)x->n);
        }
        nb_free(x->t, sizeof *x->t * (size_t)x->cap);
        nb_free(x->owned, (size_t)x->cap);
        x->t = nt;
        x->owned = no;
        x->cap = nc;
    }
    x->t[x->n] = t;
    x->owned[x->n] = (unsigned char)owned;
    return ++x->n;
}

static nb_tensor *get(host_ctx *x, long long h, const char *what) {
    if (x->st != NB_OK) return NULL;
    if (h < 1 || h > x->n) {
        fail(x, NB_ERR_INVALID_ARG, "%s: %s of a TorchTensor that was never allocated or assigned", x->fname, what);
        return NULL;
    }
    return x->t[h - 1];
}

static long long rt_alloc(void *ctx, int dtype, int ndim, const long long *shape, int zero) {
    host_ctx *x = ctx;
    if (x->st != NB_OK) return 0;
    int64_t sh[NB_MAX_DIMS];
    for (int i = 0; i < ndim && i < NB_MAX_DIMS; i++) sh[i] = shape[i];
    nb_tensor *t = NULL;
    nb_status s = zero ? nb_tensor_zeros(x->m->dev, (nb_dtype)dtype, ndim, sh, &t)
                       : nb_tensor_empty(x->m->dev, (nb_dtype)dtype, ndim, sh, &t);
    if (s != NB_OK) {
        fail(x, s, "%s: TorchTensor.alloc: %s", x->fname, nb_last_error());
        return 0;
    }
    return add_tensor(x, t, 1);
}

static long long rt_like(void *ctx, long long h, int zero) {
    host_ctx *x = ctx;
    nb_tensor *o = get(x, h, zero ? "zerosLike" : "emptyLike");
    if (!o) return 0;
    return rt_alloc(ctx, (int)nb_tensor_dtype(o), nb_tensor_ndim(o),
                    (const long long *)(const void *)nb_tensor_shape(o), zero);
}

static long long rt_size(void *ctx, long long h, int d) {
    host_ctx *x = ctx;
    nb_tensor *t = get(x, h, "size()");
    if (!t) return 0;
    if (d < 0 || d >= nb_tensor_ndim(t)) {
        char b[96];
        fail(x, NB_ERR_SHAPE, "%s: size(%d) of a %d-dimensional tensor (%s)", x->fname, d, nb_tensor_ndim(t),
             nb_shape_str(nb_tensor_ndim(t), nb_tensor_shape(t), b, sizeof b));
        return 0;
    }
    return nb_tensor_shape(t)[d];
}

static long long rt_stride(void *ctx, long long h, int d) {
    host_ctx *x = ctx;
    nb_tensor *t = get(x, h, "stride()");
    if (!t) return 0;
    if (d < 0 || d >= nb_tensor_ndim(t)) {
        fail(x, NB_ERR_SHAPE, "%s: stride(%d) of a %d-dimensional tensor", x->fname, d, nb_tensor_ndim(t));
        return 0;
    }
    return nb_tensor_strides(t)[d] / (int64_t)nb_dtype_size(nb_tensor_dtype(t)); /* elements, as torch */
}

static long long rt_dims(void *ctx, long long h) {
    host_ctx *x = ctx;
    nb_tensor *t = get(x, h, "dims()");
    return t ? nb_tensor_ndim(t) : 0;
}

/* A kernel argument's host value in the parameter's dtype (nb_call_arg_value's rules). */
static void value_bytes(nb_dtype dt, const double *v, int n, unsigned char *out) {
    size_t es = nb_dtype_size(dt);
    for (int k = 0; k < n; k++) {
        unsigned char *p = out + es * (size_t)k;
        switch (dt) {
        case NB_F64: { double d = v[k]; memcpy(p, &d, 8); break; }
        case NB_F32: { float f = (float)v[k]; memcpy(p, &f, 4); break; }
        case NB_I64: { int64_t i = (int64_t)v[k]; memcpy(p, &i, 8); break; }
        case NB_U32: { uint32_t u = (uint32_t)(int64_t)v[k]; memcpy(p, &u, 4); break; }
        case NB_BOOL: { p[0] = v[k] != 0; break; }
        default: { int32_t i = (int32_t)v[k]; memcpy(p, &i, 4); break; }
        }
    }
}

static void rt_dispatch(void *ctx, const char *kernel, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, int nargs, const nb_host_karg *args) {
    host_ctx *x = ctx;
    if (x->st != NB_OK) return;
    nb_func *k = NULL;
    nb_status s = nb_module_func(x->m, kernel, &k);
    if (s != NB_OK) {
        fail(x, s, "%s: __dispatch_kernel(%s): %s", x->fname, kernel, nb_last_error());
        return;
    }
    nb_call *c = NULL;
    s = nb_call_begin(k, &c);
    unsigned char vals[16][64];
    for (int i = 0; i < nargs && s == NB_OK; i++) {
        if (args[i].is_tensor) {
            nb_tensor *t = get(x, args[i].tensor, "a kernel argument");
            if (!t) {
                nb_call_free(c);
                return;
            }
            s = nb_call_arg(c, i, t);
            continue;
        }
        nb_leaf_info li;
        s = nb_func_leaf(k, 0, i, &li);
        if (s != NB_OK) break;
        int64_t shape[1] = {args[i].n};
        unsigned char big[64], *buf = i < 16 ? vals[i] : big;
        value_bytes(li.dtype, args[i].v, args[i].n, buf);
        s = nb_call_arg_value(c, i, li.dtype, args[i].n > 1 ? 1 : 0, shape, buf);
        if (i >= 16 && s == NB_OK) { /* (the call borrows host data: run inline past 16 values) */
            s = nb_error(NB_ERR_UNSUPPORTED, "more than 16 value arguments");
            break;
        }
    }
    if (s != NB_OK) {
        if (c) nb_call_free(c);
        fail(x, s, "%s: __dispatch_kernel(%s): %s", x->fname, kernel, nb_last_error());
        return;
    }
    /* grid = blocks, block = threads per block: a real block launch (the kernel's cudaThreadIdx(),
     * cudaBlockIdx(), cudaBlockDim() are the launch's; nb_call_run_blocks) */
    int64_t grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    s = nb_call_run_blocks(c, block, grid);
    if (s != NB_OK) fail(x, s, "%s: __dispatch_kernel(%s): %s", x->fname, kernel, nb_last_error());
}

static const nb_host_rt host_table = {NULL, rt_alloc, rt_like, rt_size, rt_dims, rt_stride, rt_dispatch};

/* The host unit's entry, compiled once per module generation. */
static nb_status host_entry(nb_module *m, host_entry_fn *out) {
    pthread_mutex_lock(&m->lock);
    nb_status s = NB_OK;
    if (!m->host || m->host_gen != m->gen) {
        nb_strbuf src;
        nb_strbuf_init(&src);
        int n = 0;
        s = nb_program_emit_host(m->prog, &src, &n);
        if (s == NB_OK) {
            nb_jit_options o;
            memset(&o, 0, sizeof o);
            o.name = m->name;
            o.no_disk_cache = m->no_disk_cache;
            nb_jit_kernel *k = NULL;
            s = nb_jit_load(NULL, nb_strbuf_cstr(&src), "nb_host_entry", &o, &k);
            if (s == NB_OK) {
                m->host = k;
                m->host_gen = m->gen;
            }
        }
        nb_strbuf_free(&src);
    }
    if (s == NB_OK) *out = (host_entry_fn)(void (*)(void))nb_jit_kernel_cpu_fn(m->host);
    pthread_mutex_unlock(&m->lock);
    return s;
}

nb_status nb_host_call(nb_func *f, int nargs, const nb_host_value *args, nb_host_value *results, int max,
                       int *count) {
    NB_CHECK_ARG(f);
    NB_CHECK_ARG(count);
    *count = 0;
    if (nargs < 0 || (nargs && !args)) return nb_error(NB_ERR_INVALID_ARG, "nb_host_call: bad arguments");
    const char *name = nb_func_name(f);
    int nov = nb_func_overload_count(f), ov = -1, nhost = 0;
    for (int i = 0; i < nov; i++) {
        if (!nb_func_is_host(f, i)) continue;
        nhost++;
        if (ov < 0 && nb_func_leaf_count(f, i) == nargs) ov = i;
    }
    if (!nhost)
        return nb_error(NB_ERR_INVALID_ARG, "%s is not a host function ([TorchEntryPoint]); call it with nb_call_*", name);
    if (ov < 0)
        return nb_error(NB_ERR_INVALID_ARG, "%s: %d argument%s given; %s takes %d", name, nargs, nargs == 1 ? "" : "s",
                        nb_func_signature(f, 0), nb_func_leaf_count(f, 0));
    nb_module *m = f->m;
    if (!m->dev) return nb_error(NB_ERR_NO_DEVICE, "%s: the module was loaded without a device", name);
    int nres = nb_func_result_count(f, ov);
    if (nres > max || (nres && !results))
        return nb_error(NB_ERR_INVALID_ARG, "%s: %d result leaves, room for %d", name, nres, max);
    nb_host_val a[NB_CALL_MAX_LEAVES], r[NB_CALL_MAX_LEAVES];
    memset(r, 0, sizeof r);
    host_ctx x;
    memset(&x, 0, sizeof x);
    x.m = m;
    x.fname = name;
    nb_status s = NB_OK;
    for (int i = 0; i < nargs && s == NB_OK; i++) {
        nb_leaf_info li;
        s = nb_func_leaf(f, ov, i, &li);
        if (s != NB_OK) break;
        if (li.is_tensor) {
            nb_tensor *t = args[i].tensor;
            if (!t) {
                s = nb_error(NB_ERR_INVALID_ARG, "%s: argument '%s' is a TorchTensor<%s>; a number was given", name,
                             li.path, nb_dtype_name(li.dtype));
            } else if (nb_tensor_dtype(t) != li.dtype) {
                s = nb_error(NB_ERR_DTYPE, "%s: argument '%s' is %s but parameter '%s' is TorchTensor<%s>", name,
                             li.path, nb_dtype_name(nb_tensor_dtype(t)), li.path, nb_dtype_name(li.dtype));
            } else if (nb_tensor_device(t) != m->dev) {
                s = nb_error(NB_ERR_DEVICE, "%s: argument '%s' is on %s but the module runs on %s", name, li.path,
                             nb_device_name(nb_tensor_device(t)), nb_device_name(m->dev));
            } else {
                a[i].h = add_tensor(&x, t, 0);
                if (x.st != NB_OK) s = nb_error(x.st, "%s", x.msg ? x.msg : "");
            }
        } else if (args[i].tensor) {
            s = nb_error(NB_ERR_INVALID_ARG, "%s: argument '%s' is a %s number; a tensor was given", name, li.path,
                         nb_dtype_name(li.dtype));
        } else if (nb_dtype_is_float(li.dtype)) {
            a[i].f = args[i].number;
        } else {
            double v = args[i].number;
            if (v != (double)(long long)v)
                s = nb_error(NB_ERR_DTYPE, "%s: argument '%s' is an integer (%s); %g was given", name, li.path,
                             nb_dtype_name(li.dtype), v);
            a[i].i = (long long)v;
        }
    }
    host_entry_fn fn = NULL;
    if (s == NB_OK) s = host_entry(m, &fn);
    if (s == NB_OK) {
        nb_host_rt rt = host_table;
        rt.ctx = &x;
        int found = 0;
        fn(name, ov, &rt, a, r, &found);
        if (!found) s = nb_error(NB_ERR_INTERNAL, "%s: not in the module's host unit", name);
        else if (x.st != NB_OK) s = nb_error(x.st, "%s", x.msg ? x.msg : "host function failed");
    }
    /* results: handles become new tensors (a view for an argument or a tensor returned twice) */
    int nout = 0;
    unsigned char *taken = x.cap ? nb_alloc((size_t)x.cap, 16) : NULL;
    if (taken) memset(taken, 0, (size_t)x.cap);
    for (int i = 0; i < nres && s == NB_OK; i++) {
        nb_leaf_info li;
        s = nb_func_result_leaf(f, ov, i, &li);
        if (s != NB_OK) break;
        results[i].tensor = NULL;
        results[i].number = 0;
        if (!li.is_tensor) {
            results[i].number = nb_dtype_is_float(li.dtype) ? r[i].f : (double)r[i].i;
            nout = i + 1;
            continue;
        }
        long long h = r[i].h;
        if (h < 1 || h > x.n) {
            s = nb_error(NB_ERR_INVALID_ARG, "%s: result '%s' is a TorchTensor that was never allocated or assigned",
                         name, li.path);
            break;
        }
        nb_tensor *t = x.t[h - 1];
        if (x.owned[h - 1] && taken && !taken[h - 1]) {
            taken[h - 1] = 1;
            results[i].tensor = t;
        } else {
            s = nb_tensor_reshape(t, nb_tensor_ndim(t), nb_tensor_shape(t), &results[i].tensor);
        }
        nout = i + 1;
    }
    if (s != NB_OK) { /* nothing survives a failure */
        for (int i = 0; i < nout; i++) {
            if (results[i].tensor) {
                int was_taken = 0;
                for (int k = 0; k < x.n; k++)
                    if (x.t[k] == results[i].tensor && taken && taken[k]) taken[k] = 0, was_taken = 1;
                if (!was_taken) nb_tensor_free(results[i].tensor);
            }
            results[i].tensor = NULL;
        }
        nout = 0;
    }
    for (int k = 0; k < x.n; k++)
        if (x.owned[k] && !(taken && taken[k])) nb_tensor_free(x.t[k]);
    if (taken) nb_free(taken, (size_t)x.cap);
    nb_free(x.t, sizeof *x.t * (size_t)x.cap);
    nb_free(x.owned, (size_t)x.cap);
    if (x.msg) nb_free(x.msg, strlen(x.msg) + 1);
    *count = s == NB_OK ? nres : 0;
    return s;
}

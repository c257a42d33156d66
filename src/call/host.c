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

typedef struct nb_host_karg { /* one leaf of a kernel's parameters (emit_host.c) */
    int is_tensor;
    int n;                  /* values: how many (prod(value_shape)) */
    long long tensor, grad; /* handles; grad 0: none (a DiffTensorView given without one) */
    const double *v;
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

static int64_t leaf_count(const nb_leaf_info *li) {
    int64_t n = 1;
    for (int d = 0; d < li->value_rank; d++) n *= li->value_shape[d];
    return n;
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
    if (nargs != nb_func_leaf_count(k, 0)) {
        fail(x, NB_ERR_INTERNAL, "%s: __dispatch_kernel(%s): %d argument leaves for %d", x->fname, kernel, nargs,
             nb_func_leaf_count(k, 0));
        return;
    }
    /* host values in each leaf's dtype, borrowed by the call until it has run */
    size_t bytes = 0;
    for (int i = 0; i < nargs; i++) bytes += args[i].is_tensor ? 0 : (size_t)args[i].n * 8;
    unsigned char *vals = bytes ? nb_alloc(bytes, 16) : NULL, *at = vals;
    if (bytes && !vals) {
        fail(x, NB_ERR_OUT_OF_MEMORY, "%s: __dispatch_kernel(%s): out of host memory", x->fname, kernel);
        return;
    }
    nb_call *c = NULL;
    s = nb_call_begin(k, &c);
    for (int i = 0; i < nargs && s == NB_OK; i++) {
        nb_leaf_info li;
        s = nb_func_leaf(k, 0, i, &li);
        if (s != NB_OK) break;
        if (args[i].is_tensor) {
            if (args[i].tensor < 1 || args[i].tensor > x->n) { /* (a struct's view field left unset) */
                fail(x, NB_ERR_INVALID_ARG, "%s: __dispatch_kernel(%s): argument '%s' was never given a TorchTensor",
                     x->fname, kernel, li.path);
                break;
            }
            nb_tensor *t = get(x, args[i].tensor, "a kernel argument");
            nb_tensor *g = t && args[i].grad ? get(x, args[i].grad, "the gradient of a kernel argument") : NULL;
            if (!t || (args[i].grad && !g)) break; /* (recorded in x) */
            s = nb_call_arg_named(c, li.path, t);
            if (s == NB_OK && g) s = nb_call_grad_named(c, li.path, g);
            continue;
        }
        if (li.is_tensor || args[i].n != leaf_count(&li)) {
            s = nb_error(NB_ERR_INTERNAL, "argument '%s': %d values for a leaf of %lld", li.path, args[i].n,
                         (long long)leaf_count(&li));
            break;
        }
        nb_convert(at, li.dtype, args[i].v, NB_F64, (size_t)args[i].n); /* (the parameter's dtype) */
        s = nb_call_arg_value_named(c, li.path, li.dtype, li.value_rank, li.value_shape, at);
        at += (size_t)args[i].n * 8;
    }
    if (s == NB_OK && x->st == NB_OK) {
        /* grid = blocks, block = threads per block: a real block launch (the kernel's cudaThreadIdx(),
         * cudaBlockIdx(), cudaBlockDim() are the launch's; nb_call_run_blocks) */
        int64_t grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
        nb_call *cc = c;
        c = NULL; /* (run frees it) */
        s = nb_call_run_blocks(cc, block, grid);
    }
    if (c) nb_call_free(c);
    if (vals) nb_free(vals, bytes);
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

/* "float3" / "float[2][3]" for messages: the leaf's scalar type and value shape. */
static const char *leaf_type(const nb_leaf_info *li, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s", nb_dtype_name(li->dtype));
    for (int d = 0; d < li->value_rank && n > 0 && (size_t)n < cap; d++)
        n += snprintf(buf + n, cap - (size_t)n, "[%lld]", (long long)li->value_shape[d]);
    return buf;
}

/* Argument leaf i into slots a[*k ...]: a tensor one handle, a number one slot, a vector, matrix
 * or array prod(value_shape) slots (emit_host.c leaves_io reads them in the same order). */
static nb_status host_arg(host_ctx *x, const nb_leaf_info *li, const nb_host_value *v, nb_host_val *a, int *k) {
    const char *name = x->fname;
    nb_module *m = x->m;
    char tb[64];
    if (li->is_tensor) {
        nb_tensor *t = v->tensor;
        if (!t)
            return nb_error(NB_ERR_INVALID_ARG, "%s: argument '%s' is a TorchTensor<%s>; a number was given", name,
                            li->path, leaf_type(li, tb, sizeof tb));
        if (nb_tensor_dtype(t) != li->dtype)
            return nb_error(NB_ERR_DTYPE, "%s: argument '%s' is %s but parameter '%s' is TorchTensor<%s>", name,
                            li->path, nb_dtype_name(nb_tensor_dtype(t)), li->path, leaf_type(li, tb, sizeof tb));
        if (nb_tensor_device(t) != m->dev)
            return nb_error(NB_ERR_DEVICE, "%s: argument '%s' is on %s but the module runs on %s", name, li->path,
                            nb_device_name(nb_tensor_device(t)), nb_device_name(m->dev));
        /* TorchTensor<float3>: the tensor's last dimension is the vector (slang-torch) */
        int nd = nb_tensor_ndim(t), ok = nd >= li->value_rank;
        for (int d = 0; ok && d < li->value_rank; d++)
            ok = nb_tensor_shape(t)[nd - li->value_rank + d] == li->value_shape[d];
        if (!ok) {
            char sb[96];
            return nb_error(NB_ERR_SHAPE, "%s: argument '%s' is a TorchTensor of %s vectors of %lld: its last "
                            "dimension must be %lld, got shape %s", name, li->path, nb_dtype_name(li->dtype),
                            (long long)li->value_shape[li->value_rank - 1], (long long)li->value_shape[li->value_rank - 1],
                            nb_shape_str(nd, nb_tensor_shape(t), sb, sizeof sb));
        }
        a[(*k)++].h = add_tensor(x, t, 0);
        return x->st != NB_OK ? nb_error(x->st, "%s", x->msg ? x->msg : "") : NB_OK;
    }
    if (v->tensor)
        return nb_error(NB_ERR_INVALID_ARG, "%s: argument '%s' is a %s %s; a tensor was given", name, li->path,
                        leaf_type(li, tb, sizeof tb), li->value_rank ? "value" : "number");
    int64_t n = leaf_count(li);
    const double *src = &v->number;
    if (li->value_rank > 0) {
        if (!v->values || v->count != n)
            return nb_error(NB_ERR_SHAPE, "%s: argument '%s' is a %s (%lld numbers); %lld given", name, li->path,
                            leaf_type(li, tb, sizeof tb), (long long)n, v->values ? (long long)v->count : 1LL);
        src = v->values;
    }
    for (int64_t j = 0; j < n; j++, (*k)++) {
        double d = src[j];
        if (nb_dtype_is_float(li->dtype)) a[*k].f = d;
        else if (d != (double)(long long)d)
            return nb_error(NB_ERR_DTYPE, "%s: argument '%s' is an integer (%s); %g was given", name, li->path,
                            leaf_type(li, tb, sizeof tb), d);
        else a[*k].i = (long long)d;
    }
    return NB_OK;
}

/* Slots of the leaves of a function's arguments (args 1) or results (0); -1 on a bad leaf. */
static int64_t count_slots(nb_func *f, int ov, int n, int args) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        nb_leaf_info li;
        if ((args ? nb_func_leaf(f, ov, i, &li) : nb_func_result_leaf(f, ov, i, &li)) != NB_OK) return -1;
        total += li.is_tensor ? 1 : leaf_count(&li);
    }
    return total;
}

void nb_host_results_free(nb_host_value *results, int n) {
    for (int i = 0; results && i < n; i++) {
        nb_tensor_free(results[i].tensor);
        if (results[i].values) nb_free(results[i].values, sizeof(double) * (size_t)results[i].count);
        memset(&results[i], 0, sizeof results[i]);
    }
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
    for (int i = 0; i < nres; i++) memset(&results[i], 0, sizeof results[i]);
    int64_t na = count_slots(f, ov, nargs, 1), nr = count_slots(f, ov, nres, 0);
    if (na < 0 || nr < 0) return nb_error(NB_ERR_INTERNAL, "%s: bad leaf reflection", name);
    size_t abytes = sizeof(nb_host_val) * (size_t)(na + 1), rbytes = sizeof(nb_host_val) * (size_t)(nr + 1);
    nb_host_val *a = nb_alloc(abytes, 16), *r = nb_alloc(rbytes, 16);
    if (!a || !r) {
        nb_free(a, abytes);
        nb_free(r, rbytes);
        return nb_error(NB_ERR_OUT_OF_MEMORY, "%s: out of host memory", name);
    }
    memset(r, 0, rbytes);
    host_ctx x;
    memset(&x, 0, sizeof x);
    x.m = m;
    x.fname = name;
    nb_status s = NB_OK;
    for (int i = 0, k = 0; i < nargs && s == NB_OK; i++) {
        nb_leaf_info li;
        s = nb_func_leaf(f, ov, i, &li);
        if (s == NB_OK) s = host_arg(&x, &li, &args[i], a, &k);
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
    /* results: handles become new tensors (a view for an argument or a tensor returned twice),
     * vectors / arrays new arrays of numbers */
    int nout = 0;
    unsigned char *taken = x.cap ? nb_alloc((size_t)x.cap, 16) : NULL;
    if (taken) memset(taken, 0, (size_t)x.cap);
    for (int i = 0, k = 0; i < nres && s == NB_OK; i++) {
        nb_leaf_info li;
        s = nb_func_result_leaf(f, ov, i, &li);
        if (s != NB_OK) break;
        if (!li.is_tensor) {
            int64_t n = leaf_count(&li);
            int fl = nb_dtype_is_float(li.dtype);
            nout = i + 1;
            if (li.value_rank == 0) {
                results[i].number = fl ? r[k].f : (double)r[k].i;
                k++;
                continue;
            }
            results[i].values = nb_alloc(sizeof(double) * (size_t)n, 16);
            if (!results[i].values) {
                s = nb_error(NB_ERR_OUT_OF_MEMORY, "%s: out of host memory", name);
                break;
            }
            results[i].count = n;
            for (int64_t j = 0; j < n; j++, k++) results[i].values[j] = fl ? r[k].f : (double)r[k].i;
            continue;
        }
        long long h = r[k++].h;
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
                for (int k = 0; k < x.n; k++)
                    if (x.t[k] == results[i].tensor && taken && taken[k]) taken[k] = 0, results[i].tensor = NULL;
            }
        }
        nb_host_results_free(results, nout);
        nout = 0;
    }
    for (int k = 0; k < x.n; k++)
        if (x.owned[k] && !(taken && taken[k])) nb_tensor_free(x.t[k]);
    if (taken) nb_free(taken, (size_t)x.cap);
    nb_free(x.t, sizeof *x.t * (size_t)x.cap);
    nb_free(x.owned, (size_t)x.cap);
    if (x.msg) nb_free(x.msg, strlen(x.msg) + 1);
    nb_free(a, abytes);
    nb_free(r, rbytes);
    *count = s == NB_OK ? nres : 0;
    return s;
}

/* `nabla call FILE FUNC ARG… [options]`: calls a kernel-language function over arrays given as
 * JSON or .npy files and prints {"result": …, "out": {…}} as JSON.
 *
 * Arguments, in order, fill the function's parameters that are not `out` (out parameters are
 * allocated by the call and printed under "out"; parameters with defaults may be left out);
 * NAME=VALUE binds by name (a parameter, a struct field path such as s.pos, or _result /
 * _result.FIELD to write into an existing array). A struct result prints as a JSON object with
 * one entry per field. With overloads, the arguments are interpreted against the first overload
 * they fit (choose_overload) and the outputs printed are those of the overload that ran. A VALUE is a
 * JSON literal (number, true/false, nested lists, or an object with one entry per field of a
 * struct parameter) or @file.npy (also as a string inside an object: "@pos.npy").
 *
 * JSON numbers become f64 (i64 when written as integers) host values, which the call converts
 * to the parameter's type under the usual rules (an integer list feeds a float parameter; a
 * fractional number for an int parameter is an error). Output numbers are printed with the
 * fewest digits that read back to the same value (cli/json.h); NaN and infinities, which JSON
 * numbers cannot spell, print as the strings "NaN", "Infinity" and "-Infinity" (the output stays
 * valid JSON), and those strings are read back as numbers in arguments. An integer beyond the
 * parameter's type (2^40 for an int, -1 for a uint) is an error naming the range (call/bind.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/file.h"
#include "cli.h"
#include "json.h"
#include "nabla/nabla.h"

#define CALL_MAX 64

/* The overload whose parameters the arguments are matched against (choose_overload); the call
 * layer still picks the best-fitting one, and outputs are printed for the one it ran. */
static int g_ov;

static void call_help(FILE *to) {
    fprintf(to, "usage: nabla call FILE FUNC [ARG...] [options]\n"
           "\n"
           "Calls FUNC of FILE over arrays and prints {\"result\": ..., \"out\": {...}} as JSON.\n"
           "\n"
           "ARG is one of\n"
           "  JSON          a number, true/false, a nested list, or {\"field\": value, ...} for a\n"
           "                struct parameter\n"
           "  @FILE.npy     a NumPy array\n"
           "  GENERATOR     a value made per thread (SlangPy's generators): call_id(),\n"
           "                thread_id(), grid(4,4) or grid([4,4], stride=[2,2], offset=[0,0]),\n"
           "                wang_hash(seed=7, warmup=0), rand_float(0, 1)\n"
           "  NAME=VALUE    bind by parameter name, struct field path (s.pos) or _result (write\n"
           "                into that array; _result.FIELD for a field of a struct result)\n"
           "Positional ARGs fill the parameters that are not 'out'; parameters with a default\n"
           "value may be left out; out parameters are allocated and printed under \"out\" with\n"
           "the inout and Tensor<> ones. A struct result prints as {\"field\": ..., ...}. With\n"
           "overloads, the arguments are matched against the first overload they fit.\n"
           "\n"
           "options:\n"
           "  --device D        cpu, cuda, cuda:N or auto (default)\n"
           "  --map ARG=DIMS    place ARG's call dims at kernel dims, e.g. --map a=0 --map b=1\n"
           "                    (outer product) or --map x=1,0 (transpose); ARG: name or index\n"
           "  --grid X[,Y[,Z]]  thread grid for [Kernel] functions (threads; [numthreads]: a\n"
           "                    multiple of the group)\n"
           "  --block-size X[,Y[,Z]] --grid-size GX[,GY[,GZ]]\n"
           "                    launch a [Kernel]/[CudaKernel] with explicit blocks, as\n"
           "                    slangtorch's launchRaw(blockSize=, gridSize=): GX*GY*GZ blocks\n"
           "                    of X*Y*Z threads (at most 1024); cudaThreadIdx(), cudaBlockIdx(),\n"
           "                    cudaBlockDim(), cudaGridDim() are the real ones; with --bwd/--fwd\n"
           "                    the kernel's derivative runs (slangtorch's f.bwd / f.fwd):\n"
           "                    every DiffTensor gets a gradient array, --grad NAME=JSON\n"
           "                    (bwd: the output's incoming gradient; fwd: an input's\n"
           "                    tangent) or zeros, printed under \"grad\" after the launch\n"
           "  -o FILE.npy       write the result to FILE.npy instead of printing its values\n"
           "  -I DIR            search DIR for imported modules and #include files (repeatable)\n"
           "  -D NAME[=VALUE]   define a preprocessor macro (also -DNAME; repeatable)\n"
           "  --conformance TYPE:INTERFACE=ID  a Slang type conformance id: the type that\n"
           "                    createDynamicObject<INTERFACE>(ID, data) makes (repeatable)\n"
           "  --const NAME=V    set a link-time constant (extern static const)\n"
           "  --unchecked       no bounds checks on tensor / local-array indices (benchmarks\n"
           "                    only: an index out of range is then undefined behaviour)\n"
           "  --bwd [--dout J]  reverse mode: print {\"result\": ..., \"grad\": {param: ...}}\n"
           "                    (the result gradient J defaults to 1 everywhere)\n"
           "  --fwd [--tangent NAME=J]...  forward mode: print {\"result\": ..., \"tangent\": ...}\n"
           "                    (tangents default to 0)\n"
           "\n"
           "Output is valid JSON: NaN and infinities print as the strings \"NaN\", \"Infinity\" and\n"
           "\"-Infinity\" (accepted back as arguments). Integers out of the parameter's range\n"
           "(2^40 for an int, -1 for a uint) are errors.\n");
}

/* ---- resources freed at the end --------------------------------------------------------------- */

typedef struct out_rec {
    const char *path; /* param or field path */
    nb_tensor *t;     /* inout tensors we made / were given */
    nb_tensor *alloc; /* out tensors the call allocated */
} out_rec;

typedef struct ctx {
    nb_device *dev;
    nb_module *m;
    nb_func *f;
    nb_call *c;
    nb_tensor *tensors[CALL_MAX * 2]; /* everything we created */
    int ntensors;
    void *bufs[CALL_MAX * 4];         /* host arrays (live until the call ran) */
    int nbufs;
    out_rec outs[CALL_MAX];
    int nouts;
    int covered[CALL_MAX];            /* parameter has an argument */
    nb_tensor *into;
    char err[1024];
} ctx;

/* Keeps a host buffer until the end (the call borrows it); frees it and fails when full. */
static int keep_buf(ctx *x, void *p) {
    if (x->nbufs == CALL_MAX * 4) {
        free(p);
        snprintf(x->err, sizeof x->err, "too many arguments");
        return 0;
    }
    x->bufs[x->nbufs++] = p;
    return 1;
}

static int keep_tensor(ctx *x, nb_tensor *t) {
    if (x->ntensors == CALL_MAX * 2) {
        nb_tensor_free(t);
        snprintf(x->err, sizeof x->err, "too many arrays");
        return 0;
    }
    x->tensors[x->ntensors++] = t;
    return 1;
}

/* ---- JSON -> host arrays -------------------------------------------------------------------- */

typedef struct host_arr {
    nb_dtype dtype;
    int ndim;
    int64_t shape[NB_MAX_DIMS];
    void *data;
    size_t bytes;
} host_arr;

/* The strings "NaN", "Infinity" and "-Infinity": how the output spells non-finite numbers
 * (valid JSON), read back as numbers. */
static int nonfinite_string(const nb_json *v) {
    return v->kind == NB_JSON_STRING && (!strcmp(v->string, "NaN") || !strcmp(v->string, "Infinity") ||
                                         !strcmp(v->string, "-Infinity"));
}

static double json_number(const nb_json *v) {
    if (v->kind == NB_JSON_NUMBER) return v->number;
    return !strcmp(v->string, "NaN") ? NAN : v->string[0] == '-' ? -INFINITY : INFINITY;
}

static int check_shape(const nb_json *v, const host_arr *h, int depth, int *has_float, int *has_bool,
                       int *has_num, char *err, size_t cap) {
    if (depth < h->ndim) {
        if (v->kind != NB_JSON_ARRAY || v->count != h->shape[depth]) {
            snprintf(err, cap, "column %d: ragged nested list: expected %s of %lld elements", v->col,
                     v->kind == NB_JSON_ARRAY ? "a list" : "a list", (long long)h->shape[depth]);
            return 0;
        }
        for (int i = 0; i < v->count; i++)
            if (!check_shape(&v->items[i], h, depth + 1, has_float, has_bool, has_num, err, cap))
                return 0;
        return 1;
    }
    if (v->kind == NB_JSON_NUMBER && v->integer_overflow) {
        snprintf(err, cap, "column %d: the integer %.17g is outside the range of 64-bit integers "
                 "(-9223372036854775808..9223372036854775807)", v->col, v->number);
        return 0;
    }
    if (v->kind == NB_JSON_NUMBER || nonfinite_string(v)) {
        *has_num = 1;
        if (v->kind != NB_JSON_NUMBER || !v->is_integer) *has_float = 1;
        return 1;
    }
    if (v->kind == NB_JSON_BOOL) {
        *has_bool = 1;
        return 1;
    }
    snprintf(err, cap, "column %d: expected a number or true/false%s", v->col,
             v->kind == NB_JSON_ARRAY ? " (ragged nested list)" : "");
    return 0;
}

static void fill(const nb_json *v, const host_arr *h, int depth, size_t *k) {
    if (depth < h->ndim) {
        for (int i = 0; i < v->count; i++) fill(&v->items[i], h, depth + 1, k);
        return;
    }
    if (h->dtype == NB_BOOL) ((unsigned char *)h->data)[*k] = (unsigned char)v->boolean;
    else if (h->dtype == NB_I64) ((long long *)h->data)[*k] = v->integer;
    else ((double *)h->data)[*k] = json_number(v);
    (*k)++;
}

static int json_to_host(const nb_json *v, host_arr *h, char *err, size_t cap) {
    memset(h, 0, sizeof *h);
    const nb_json *w = v;
    while (w->kind == NB_JSON_ARRAY) {
        if (h->ndim == NB_MAX_DIMS) {
            snprintf(err, cap, "column %d: more than %d nested lists", w->col, NB_MAX_DIMS);
            return 0;
        }
        h->shape[h->ndim++] = w->count;
        if (!w->count) break;
        w = &w->items[0];
    }
    int has_float = 0, has_bool = 0, has_num = 0;
    if (!check_shape(v, h, 0, &has_float, &has_bool, &has_num, err, cap)) return 0;
    if (has_bool && has_num) {
        snprintf(err, cap, "column %d: a list mixes true/false with numbers", v->col);
        return 0;
    }
    h->dtype = has_bool ? NB_BOOL : has_float || !has_num ? NB_F64 : NB_I64;
    size_t n = 1;
    for (int i = 0; i < h->ndim; i++) n *= (size_t)h->shape[i];
    h->bytes = n * nb_dtype_size(h->dtype);
    h->data = malloc(h->bytes ? h->bytes : 1);
    if (!h->data) {
        snprintf(err, cap, "out of memory");
        return 0;
    }
    size_t k = 0;
    fill(v, h, 0, &k);
    return 1;
}

/* ---- tensors -> JSON ------------------------------------------------------------------------- */

static void print_elems(FILE *o, const unsigned char *d, nb_dtype t, int ndim, const int64_t *shape,
                        size_t *k) {
    if (ndim > 0) {
        fputc('[', o);
        for (int64_t i = 0; i < shape[0]; i++) {
            if (i) fputs(", ", o);
            print_elems(o, d, t, ndim - 1, shape + 1, k);
        }
        fputc(']', o);
        return;
    }
    char buf[48];
    size_t i = (*k)++;
    switch (t) {
    case NB_F32: fputs(nb_json_format_double(((const float *)d)[i], 1, buf, sizeof buf), o); break;
    case NB_F64: fputs(nb_json_format_double(((const double *)d)[i], 0, buf, sizeof buf), o); break;
    case NB_F16:
        fputs(nb_json_format_double(nb_f16_to_f32(((const uint16_t *)d)[i]), 1, buf, sizeof buf), o);
        break;
    case NB_BF16:
        fputs(nb_json_format_double(nb_bf16_to_f32(((const uint16_t *)d)[i]), 1, buf, sizeof buf), o);
        break;
    case NB_I32: fprintf(o, "%d", (int)((const int32_t *)d)[i]); break;
    case NB_U32: fprintf(o, "%u", (unsigned)((const uint32_t *)d)[i]); break;
    case NB_I64: fprintf(o, "%lld", (long long)((const int64_t *)d)[i]); break;
    case NB_U8: fprintf(o, "%u", (unsigned)d[i]); break;
    case NB_BOOL: fputs(d[i] ? "true" : "false", o); break;
    default: fputs("null", o); break;
    }
}

static int print_tensor(FILE *o, const nb_tensor *t) {
    size_t bytes = nb_tensor_nbytes(t);
    unsigned char *h = malloc(bytes ? bytes : 1);
    if (!h) return 0;
    if (nb_tensor_to_host(t, h, bytes) != NB_OK) {
        free(h);
        return 0;
    }
    size_t k = 0;
    print_elems(o, h, nb_tensor_dtype(t), nb_tensor_ndim(t), nb_tensor_shape(t), &k);
    free(h);
    return 1;
}

/* ---- binding ---------------------------------------------------------------------------------- */

/* The leaf at `path` of overload 0 (for dtype and direction), or -1. */
static int find_leaf(nb_func *f, const char *path, nb_leaf_info *li) {
    int n = nb_func_leaf_count(f, g_ov);
    for (int j = 0; j < n; j++)
        if (nb_func_leaf(f, g_ov, j, li) == NB_OK && !strcmp(li->path, path)) return j;
    return -1;
}

static int param_index(nb_func *f, const char *name) {
    int n = nb_func_param_count(f, g_ov);
    for (int p = 0; p < n; p++)
        if (!strcmp(nb_func_param_name(f, g_ov, p), name)) return p;
    return -1;
}

/* A struct (some leaf lies below path). */
/* 1: `path` is a struct (leaves "path.x"); 2: an array of structs (leaves "path[0].x"). */
static int is_struct_path(nb_func *f, const char *path) {
    int n = nb_func_leaf_count(f, g_ov);
    size_t pl = strlen(path);
    nb_leaf_info li;
    for (int j = 0; j < n; j++)
        if (nb_func_leaf(f, g_ov, j, &li) == NB_OK && !strncmp(li.path, path, pl) &&
            (li.path[pl] == '.' || li.path[pl] == '['))
            return li.path[pl] == '.' ? 1 : 2;
    return 0;
}

/* The dtype to upload a JSON array in for a leaf of dtype `leaf`: the leaf's own when the
 * conversion keeps the meaning (ints for floats), else the JSON's, so that the call reports the
 * mismatch. */
static nb_dtype upload_dtype(nb_dtype leaf, nb_dtype json) {
    int lf = nb_dtype_is_float(leaf), lb = leaf == NB_BOOL;
    if (json == NB_BOOL) return lb ? leaf : json;
    if (json == NB_I64) return lb ? json : leaf;
    return lf ? leaf : json;
}

/* Printed under "out": out/inout parameters and Tensor<> ones (written through). */
static int param_is_output(nb_func *f, int p) {
    if (nb_func_param_dir(f, g_ov, p) != NB_ARG_IN) return 1;
    int n = nb_func_leaf_count(f, g_ov);
    nb_leaf_info li;
    for (int j = 0; j < n; j++)
        if (nb_func_leaf(f, g_ov, j, &li) == NB_OK && li.param == p && li.is_tensor) return 1;
    return 0;
}

static int is_struct_param(nb_func *f, int p) {
    nb_leaf_info li;
    return find_leaf(f, nb_func_param_name(f, g_ov, p), &li) < 0;
}

/* A JSON value as a new tensor on the call's device, in the dtype the leaf's data is uploaded
 * as (upload_dtype); the host buffers and the tensor are owned by x. 0 with x->err on failure. */
static int json_to_tensor(ctx *x, const nb_json *v, nb_dtype leaf_dtype, nb_tensor **t) {
    host_arr h;
    if (!json_to_host(v, &h, x->err, sizeof x->err)) return 0;
    if (!keep_buf(x, h.data)) return 0;
    size_t n = h.bytes / nb_dtype_size(h.dtype);
    nb_dtype ud = upload_dtype(leaf_dtype, h.dtype);
    void *conv = malloc(n * nb_dtype_size(ud) + 1);
    if (!conv) return snprintf(x->err, sizeof x->err, "out of memory"), 0;
    if (!keep_buf(x, conv)) return 0;
    nb_convert(conv, ud, h.data, h.dtype, n);
    if (nb_tensor_from_host(x->dev, ud, h.ndim, h.shape, conv, t) != NB_OK || !keep_tensor(x, *t)) {
        snprintf(x->err, sizeof x->err, "%s", nb_last_error());
        return 0;
    }
    return 1;
}

static int load_npy(ctx *x, const char *path, nb_tensor **t) {
    if (nb_tensor_load_npy(x->dev, path, t) != NB_OK) {
        snprintf(x->err, sizeof x->err, "%s", nb_last_error());
        return 0;
    }
    return keep_tensor(x, *t);
}

/* Binds one non-struct value (JSON scalar/list or @npy) to `path`; p is its parameter. */
static int bind_leaf_value(ctx *x, int p, const char *path, const nb_json *v, const char *npy) {
    nb_leaf_info li;
    int positional = !strchr(path, '.') && param_index(x->f, path) == p;
    if (find_leaf(x->f, path, &li) < 0) {
        snprintf(x->err, sizeof x->err, "%s has no parameter or field '%s'",
                 nb_func_signature(x->f, g_ov), path);
        return 0;
    }
    nb_tensor *t = NULL;
    nb_status s;
    int written = li.dir != NB_ARG_IN || li.is_tensor; /* Tensor<> args may be written through */
    if (npy || written) {
        if (npy) {
            if (!load_npy(x, npy, &t)) return 0;
        } else {
            if (!json_to_tensor(x, v, li.dtype, &t)) return 0;
        }
        s = positional ? nb_call_arg(x->c, p, t) : nb_call_arg_named(x->c, path, t);
        if (s == NB_OK && written) {
            x->outs[x->nouts].path = li.path;
            x->outs[x->nouts].t = t;
            x->outs[x->nouts++].alloc = NULL;
        }
    } else {
        host_arr h;
        if (!json_to_host(v, &h, x->err, sizeof x->err)) return 0;
        if (!keep_buf(x, h.data)) return 0;
        s = positional ? nb_call_arg_value(x->c, p, h.dtype, h.ndim, h.shape, h.data)
                       : nb_call_arg_value_named(x->c, path, h.dtype, h.ndim, h.shape, h.data);
    }
    if (s) {
        snprintf(x->err, sizeof x->err, "%s", nb_last_error());
        return 0;
    }
    return 1;
}

/* Binds v (or the npy file) to `path` (a parameter or field path) of parameter p. */
static int bind_json(ctx *x, int p, const char *path, const nb_json *v, const char *npy);

/* bind_json of a struct field or array element at `path` (a copy kept alive until the call runs). */
static int bind_json_at(ctx *x, int p, const char *path, const nb_json *v) {
    char *keep = malloc(strlen(path) + 1);
    if (!keep) return snprintf(x->err, sizeof x->err, "out of memory"), 0;
    strcpy(keep, path);
    if (!keep_buf(x, keep)) return 0;
    return bind_json(x, p, keep, v, NULL);
}

static int bind_json(ctx *x, int p, const char *path, const nb_json *v, const char *npy) {
    if (x->nouts >= CALL_MAX) {
        snprintf(x->err, sizeof x->err, "too many arguments");
        return 0;
    }
    nb_leaf_info li;
    int is_leaf = find_leaf(x->f, path, &li) >= 0;
    if (v && v->kind == NB_JSON_STRING && v->string[0] == '@') return bind_json(x, p, path, NULL, v->string + 1);
    if (v && v->kind == NB_JSON_OBJECT) {
        if (is_leaf) {
            snprintf(x->err, sizeof x->err, "column %d: '%s' is not a struct, but the value is a "
                     "JSON object", v->col, path);
            return 0;
        }
        for (int i = 0; i < v->count; i++) {
            char sub[512];
            snprintf(sub, sizeof sub, "%s.%s", path, v->keys[i]);
            if (!bind_json_at(x, p, sub, &v->items[i])) return 0;
        }
        return 1;
    }
    int sk = is_leaf ? 0 : is_struct_path(x->f, path);
    if (sk == 2 && v && v->kind == NB_JSON_ARRAY) { /* an array of structs: element i is "path[i]" */
        for (int i = 0; i < v->count; i++) {
            char sub[512];
            snprintf(sub, sizeof sub, "%s[%d]", path, i);
            if (!bind_json_at(x, p, sub, &v->items[i])) return 0;
        }
        return 1;
    }
    if (!is_leaf) {
        if (sk == 2)
            snprintf(x->err, sizeof x->err, "'%s' is an array of structs: give a JSON list of objects, or "
                     "bind each field (%s[0].FIELD=...)", path, path);
        else if (sk)
            snprintf(x->err, sizeof x->err, "'%s' is a struct: give a JSON object with one entry "
                     "per field", path);
        else
            snprintf(x->err, sizeof x->err, "%s has no parameter or field '%s'",
                     nb_func_signature(x->f, g_ov), path);
        return 0;
    }
    if (v && v->kind != NB_JSON_NUMBER && v->kind != NB_JSON_BOOL && v->kind != NB_JSON_ARRAY &&
        !nonfinite_string(v)) {
        snprintf(x->err, sizeof x->err, "column %d: expected a number, true/false, a list or an "
                 "object for '%s'", v->col, path);
        return 0;
    }
    return bind_leaf_value(x, p, path, v, npy);
}

/* The result leaf at path ("_result" or "_result.pos"), or 0. */
static int find_result_leaf(nb_func *f, const char *path, nb_leaf_info *li) {
    int n = nb_func_result_count(f, g_ov);
    for (int k = 0; k < n; k++)
        if (nb_func_result_leaf(f, g_ov, k, li) == NB_OK && !strcmp(li->path, path)) return 1;
    return 0;
}

/* The _result=VALUE / _result.FIELD=VALUE argument: an array to write the result into. */
static int bind_result(ctx *x, const char *path, const nb_json *v, const char *npy) {
    nb_tensor *t = NULL;
    nb_leaf_info li;
    if (!nb_func_result(x->f, g_ov, &li)) {
        snprintf(x->err, sizeof x->err, "%s returns nothing; %s cannot be given",
                 nb_func_signature(x->f, g_ov), path);
        return 0;
    }
    if (!find_result_leaf(x->f, path, &li)) {
        char lst[512];
        size_t n = 0;
        lst[0] = '\0';
        for (int k = 0; k < nb_func_result_count(x->f, g_ov) && n < sizeof lst; k++) {
            nb_leaf_info r;
            if (nb_func_result_leaf(x->f, g_ov, k, &r) == NB_OK)
                n += (size_t)snprintf(lst + n, sizeof lst - n, "%s%s", k ? ", " : "", r.path);
        }
        snprintf(x->err, sizeof x->err, "%s: '%s' is not a result of %s (results: %s)%s", path,
                 path, nb_func_signature(x->f, g_ov), lst[0] ? lst : "none",
                 !strcmp(path, "_result") ? "; a struct result takes one array per field" : "");
        return 0;
    }
    if (v && v->kind == NB_JSON_STRING && v->string[0] == '@') npy = v->string + 1;
    if (npy) {
        if (!load_npy(x, npy, &t)) return 0;
    } else {
        if (!json_to_tensor(x, v, li.dtype, &t)) return 0;
    }
    x->into = t;
    if (nb_call_result_named(x->c, path, t) != NB_OK) {
        snprintf(x->err, sizeof x->err, "%s", nb_last_error());
        return 0;
    }
    return 1;
}

/* "name=..." when the text starts with an identifier (dots and [N] element indices allowed:
 * "m.layers[1].w") followed by '='. */
static const char *split_name(const char *a, char *name, size_t cap) {
    size_t n = 0;
    while ((a[n] >= 'a' && a[n] <= 'z') || (a[n] >= 'A' && a[n] <= 'Z') || a[n] == '_' ||
           (n > 0 && ((a[n] >= '0' && a[n] <= '9') || a[n] == '.'))) {
        n++;
        if (a[n] == '[') { /* an element index: digits and ']' */
            size_t k = n + 1;
            while (a[k] >= '0' && a[k] <= '9') k++;
            if (k == n + 1 || a[k] != ']') return NULL;
            n = k + 1;
        }
    }
    if (n == 0 || a[n] != '=' || n >= cap) return NULL;
    memcpy(name, a, n);
    name[n] = '\0';
    return a + n + 1;
}

static int bind_arg_text(ctx *x, const char *text, int *next_pos, int *usage) {
    char name[256];
    const char *val = split_name(text, name, sizeof name);
    int p;
    const char *path;
    if (val) {
        if (!strcmp(name, "_result") || !strncmp(name, "_result.", 8)) p = -2, path = NULL;
        else {
            char root[256];
            snprintf(root, sizeof root, "%s", name);
            root[strcspn(root, ".[")] = '\0';
            p = param_index(x->f, root);
            if (p < 0) {
                snprintf(x->err, sizeof x->err, "%s has no parameter '%s'",
                         nb_func_signature(x->f, g_ov), root);
                return 0;
            }
            path = NULL;
        }
    } else {
        val = text;
        int np = nb_func_param_count(x->f, g_ov);
        p = *next_pos;
        while (p < np && (x->covered[p] || nb_func_param_dir(x->f, g_ov, p) == NB_ARG_OUT)) p++;
        if (p >= np) {
            snprintf(x->err, sizeof x->err, "too many arguments: %s takes %d",
                     nb_func_signature(x->f, g_ov), np);
            return 0;
        }
        *next_pos = p + 1;
        path = nb_func_param_name(x->f, g_ov, p);
    }
    if (p >= 0) {
        if (!path) path = text; /* the name part of "name=..." (kept alive in argv) */
        x->covered[p] = 1;
    }
    nb_json *v = NULL;
    const char *npy = NULL;
    if (p >= 0 && cli_is_generator(val)) { /* call_id(), grid(4,4), … (gen_arg.c) */
        nb_generator g;
        if (!cli_parse_generator(val, &g, x->err, sizeof x->err)) {
            *usage = 1;
            return 0;
        }
        const char *gp = path;
        if (path == text) {
            char *keep = malloc(strlen(name) + 1); /* the call borrows the name until it runs */
            if (!keep || !keep_buf(x, keep)) return 0;
            strcpy(keep, name);
            gp = keep;
        }
        nb_status s = nb_call_arg_generator_named(x->c, gp, &g);
        if (s) snprintf(x->err, sizeof x->err, "%s", nb_last_error());
        return s == NB_OK;
    }
    if (val[0] == '@') {
        npy = val + 1;
    } else {
        char jerr[256];
        v = nb_json_parse(val, jerr, sizeof jerr);
        if (!v) {
            snprintf(x->err, sizeof x->err, "argument '%s': %s", text, jerr);
            *usage = 1;
            return 0;
        }
    }
    int ok;
    if (p == -2) {
        char *keep = malloc(strlen(name) + 1); /* the call borrows the path until it runs */
        if (!keep || !keep_buf(x, keep)) {
            nb_json_free(v);
            return 0;
        }
        strcpy(keep, name);
        ok = bind_result(x, keep, v, npy);
    } else {
        char pathbuf[256];
        if (path == text) { /* cut "name" out of "name=value" */
            snprintf(pathbuf, sizeof pathbuf, "%s", name);
            char *keep = malloc(strlen(pathbuf) + 1);
            if (!keep) {
                nb_json_free(v);
                return 0;
            }
            strcpy(keep, pathbuf);
            if (!keep_buf(x, keep)) {
                nb_json_free(v);
                return 0;
            }
            path = keep;
        }
        ok = bind_json(x, p, path, v, npy);
    }
    nb_json_free(v);
    return ok;
}

/* Does overload ov take these argument texts? Positional ones fill the parameters that are not
 * out, names must exist, every other input needs a default. */
static int overload_fits(nb_func *f, int ov, const char *const *args, int nargs) {
    int np = nb_func_param_count(f, ov), next = 0;
    int covered[CALL_MAX] = {0};
    if (np > CALL_MAX) return 0;
    for (int i = 0; i < nargs; i++) {
        char name[256];
        if (split_name(args[i], name, sizeof name)) {
            if (!strcmp(name, "_result") || !strncmp(name, "_result.", 8)) {
                if (!nb_func_result(f, ov, NULL)) return 0;
                continue;
            }
            name[strcspn(name, ".[")] = '\0';
            int p = -1;
            for (int q = 0; q < np; q++)
                if (!strcmp(nb_func_param_name(f, ov, q), name)) p = q;
            if (p < 0) return 0;
            covered[p] = 1;
            continue;
        }
        while (next < np && (covered[next] || nb_func_param_dir(f, ov, next) == NB_ARG_OUT)) next++;
        if (next >= np) return 0;
        covered[next++] = 1;
    }
    for (int p = 0; p < np; p++)
        if (!covered[p] && nb_func_param_dir(f, ov, p) != NB_ARG_OUT &&
            !nb_func_param_has_default(f, ov, p))
            return 0;
    return 1;
}

/* The first overload the argument texts fit (0 when none: the call then explains). */
static int choose_overload(nb_func *f, const char *const *args, int nargs) {
    int n = nb_func_overload_count(f);
    for (int ov = 0; ov < n; ov++)
        if (overload_fits(f, ov, args, nargs)) return ov;
    return 0;
}

/* Prints result leaves [*k, n) that lie below `prefix` ("_result", "_result.t") as a JSON
 * object keyed by the next path component. */
static void print_result_object(nb_tensor **res, const nb_leaf_info *li, int n, int *k,
                                const char *prefix, const char *out_npy, int *ok);

static int print_result_leaf(nb_tensor *t, const char *leaf_path, const char *out_npy) {
    if (!out_npy) return print_tensor(stdout, t);
    /* -o FILE.npy: a struct result's field f goes to FILE.f.npy */
    char file[1024];
    size_t bl = strlen(out_npy);
    if (bl > 4 && !strcmp(out_npy + bl - 4, ".npy")) bl -= 4;
    if (strcmp(leaf_path, "_result") != 0)
        snprintf(file, sizeof file, "%.*s.%s.npy", (int)bl, out_npy, leaf_path + 8);
    else
        snprintf(file, sizeof file, "%s", out_npy);
    if (nb_tensor_save_npy(t, file) != NB_OK) return 0;
    char sh[160];
    fputs("{\"file\": ", stdout);
    nb_json_print_string(stdout, file);
    printf(", \"dtype\": \"%s\", \"shape\": %s}", nb_dtype_name(nb_tensor_dtype(t)),
           nb_shape_str(nb_tensor_ndim(t), nb_tensor_shape(t), sh, sizeof sh));
    return 1;
}

/* The leaves under prefix (a struct: {"field": …}; an array of structs or tensors, whose leaves
 * continue with "[i]": a JSON list of its elements). */
static void print_result_object(nb_tensor **res, const nb_leaf_info *li, int n, int *k,
                                const char *prefix, const char *out_npy, int *ok) {
    size_t pl = strlen(prefix);
    int first = 1, list = *k < n && li[*k].path[pl] == '[';
    fputc(list ? '[' : '{', stdout);
    while (*k < n && !strncmp(li[*k].path, prefix, pl) && li[*k].path[pl] == (list ? '[' : '.')) {
        const char *rest = li[*k].path + pl;
        size_t kl = 1; /* the child: ".field" or "[i]" */
        if (list) {
            while (rest[kl] && rest[kl] != ']') kl++;
            if (rest[kl]) kl++;
        } else
            while (rest[kl] && rest[kl] != '.' && rest[kl] != '[') kl++;
        char sub[512];
        snprintf(sub, sizeof sub, "%s%.*s", prefix, (int)kl, rest);
        if (!first) fputs(", ", stdout);
        first = 0;
        if (!list) {
            char key[256];
            snprintf(key, sizeof key, "%.*s", (int)(kl - 1), rest + 1);
            nb_json_print_string(stdout, key);
            fputs(": ", stdout);
        }
        if (rest[kl] == '.' || rest[kl] == '[') print_result_object(res, li, n, k, sub, out_npy, ok);
        else {
            if (!print_result_leaf(res[*k], li[*k].path, out_npy)) *ok = 0;
            (*k)++;
        }
    }
    fputc(list ? ']' : '}', stdout);
}

/* ---- host functions ([TorchEntryPoint]) ----------------------------------------------------- */

/* The numbers of a (nested) JSON list in order into out[0 .. cap); how many there are, -1 for an
 * item that is not a number or list. */
static int64_t json_flatten(const nb_json *v, double *out, int64_t cap, int64_t n) {
    if (v->kind == NB_JSON_NUMBER || v->kind == NB_JSON_BOOL) {
        if (n < cap) out[n] = json_number(v);
        return n + 1;
    }
    if (v->kind != NB_JSON_ARRAY) return -1;
    for (int i = 0; i < v->count && n >= 0; i++) n = json_flatten(&v->items[i], out, cap, n);
    return n;
}

/* One JSON value (a list/number for a TorchTensor leaf, a number for a scalar, a (nested) list for
 * a vector / matrix / array: hv->values is malloc'd, the caller frees it) into leaf j. */
static int host_leaf(ctx *x, const nb_json *v, const nb_leaf_info *li, nb_host_value *hv) {
    memset(hv, 0, sizeof *hv);
    if (!li->is_tensor && li->value_rank > 0) {
        int64_t want = 1;
        for (int d = 0; d < li->value_rank; d++) want *= li->value_shape[d];
        hv->values = malloc(sizeof(double) * (size_t)want);
        int64_t got = hv->values && v->kind == NB_JSON_ARRAY ? json_flatten(v, hv->values, want, 0) : -1;
        if (got != want) {
            snprintf(x->err, sizeof x->err, "argument '%s' is %lld %s numbers: give a list of them", li->path,
                     (long long)want, nb_dtype_name(li->dtype));
            return 0;
        }
        hv->count = want;
        return 1;
    }
    if (li->is_tensor) {
        if (v->kind != NB_JSON_ARRAY) {
            snprintf(x->err, sizeof x->err, "argument '%s' is a TorchTensor<%s>: give a list", li->path,
                     nb_dtype_name(li->dtype));
            return 0;
        }
        return json_to_tensor(x, v, li->dtype, &hv->tensor);
    }
    if (v->kind != NB_JSON_NUMBER && !(v->kind == NB_JSON_BOOL)) {
        snprintf(x->err, sizeof x->err, "argument '%s' is a %s number", li->path, nb_dtype_name(li->dtype));
        return 0;
    }
    hv->number = json_number(v);
    return 1;
}

/* Runs a host function: one JSON argument per parameter (a struct parameter: a list of its leaves
 * in order, or an object of its fields); prints {"result": …}. 0 ok, 1 with x->err, -1 with
 * nb_last_error(). */
static int call_host(ctx *x, const char *const *args, int nargs, const char *out_npy, int *usage) {
    nb_host_value hv[CALL_MAX], res[CALL_MAX];
    int nl = nb_func_leaf_count(x->f, 0), np = nb_func_param_count(x->f, 0), k = 0, rc = 1;
    if (nargs != np) {
        snprintf(x->err, sizeof x->err, "%s takes %d argument%s, %d given: %s", nb_func_name(x->f), np,
                 np == 1 ? "" : "s", nargs, nb_func_signature(x->f, 0));
        *usage = 1;
        return 1;
    }
    for (int p = 0; p < np; p++) {
        char err[256];
        nb_json *v = nb_json_parse(args[p], err, sizeof err);
        if (!v) {
            snprintf(x->err, sizeof x->err, "argument %d: %s", p + 1, err);
            for (int i = 0; i < k; i++) free(hv[i].values);
            *usage = 1;
            return 1;
        }
        int first = k, cnt = 0;
        nb_leaf_info li, lj;
        for (int j = k; j < nl && nb_func_leaf(x->f, 0, j, &lj) == NB_OK && lj.param == p; j++) cnt++;
        int ok = 1;
        if (cnt > 0) nb_func_leaf(x->f, 0, first, &li);
        if (cnt == 1 && !strcmp(li.path, nb_func_param_name(x->f, 0, p))) {
            ok = host_leaf(x, v, &li, &hv[k++]);
        } else { /* a struct: [leaf, …] or {"field": …} */
            for (int j = 0; j < cnt && ok; j++) {
                nb_func_leaf(x->f, 0, first + j, &li);
                const nb_json *item = NULL;
                if (v->kind == NB_JSON_ARRAY && v->count == cnt) item = &v->items[j];
                else if (v->kind == NB_JSON_OBJECT) {
                    const char *field = strrchr(li.path, '.');
                    for (int q = 0; q < v->count && field; q++)
                        if (!strcmp(v->keys[q], field + 1)) item = &v->items[q];
                }
                if (!item) {
                    snprintf(x->err, sizeof x->err, "argument '%s' is a struct of %d leaves: give a list of %d values "
                             "or an object of its fields (missing '%s')", nb_func_param_name(x->f, 0, p), cnt, cnt,
                             li.path);
                    ok = 0;
                } else ok = host_leaf(x, item, &li, &hv[k++]);
            }
        }
        nb_json_free(v);
        if (!ok) {
            for (int i = 0; i < k; i++) free(hv[i].values);
            return 1;
        }
    }
    int nres = 0;
    nb_status st = nb_host_call(x->f, k, hv, res, CALL_MAX, &nres);
    for (int i = 0; i < k; i++) free(hv[i].values);
    if (st != NB_OK) return -1;
    nb_tensor *rt[CALL_MAX] = {0};
    nb_leaf_info rli[CALL_MAX];
    int print_ok = 1;
    for (int i = 0; i < nres; i++) { /* numbers print as 0-d arrays */
        if (nb_func_result_leaf(x->f, 0, i, &rli[i]) != NB_OK) print_ok = 0;
        rt[i] = res[i].tensor;
        res[i].tensor = NULL; /* (rt owns it) */
        if (!rt[i] && nb_tensor_from_host(x->dev, NB_F64, res[i].values ? rli[i].value_rank : 0, rli[i].value_shape,
                                          res[i].values ? res[i].values : &res[i].number, &rt[i]) != NB_OK)
            print_ok = 0;
    }
    nb_host_results_free(res, nres); /* (the vectors' numbers) */
    if (print_ok) {
        fputs("{\"result\": ", stdout);
        if (nres == 0) fputs("null", stdout);
        else if (nres == 1 && !strcmp(rli[0].path, "_result")) print_ok = print_result_leaf(rt[0], "_result", out_npy);
        else {
            int kk = 0;
            print_result_object(rt, rli, nres, &kk, "_result", out_npy, &print_ok);
        }
        fputs("}\n", stdout);
        rc = print_ok ? 0 : -1;
    } else rc = -1;
    for (int i = 0; i < nres; i++) nb_tensor_free(rt[i]);
    return rc;
}

/* ---- main ------------------------------------------------------------------------------------ */

static int parse_dims(const char *s, int *dims, int max) {
    int n = 0;
    if (*s == '[') s++;
    while (*s && *s != ']') {
        char *end;
        long d = strtol(s, &end, 10);
        if (end == s || n == max || d < 0 || d > 7) return -1;
        dims[n++] = (int)d;
        s = end;
        if (*s == ',') s++;
    }
    if (*s == ']') s++;
    return *s ? -1 : n;
}

static int is_negative_number(const char *a) {
    return a[0] == '-' && ((a[1] >= '0' && a[1] <= '9') || a[1] == '.' || !strcmp(a, "-Infinity"));
}

static void free_ctx(ctx *x) {
    if (x->c) nb_call_free(x->c);
    for (int i = 0; i < x->nouts; i++)
        if (x->outs[i].alloc) nb_tensor_free(x->outs[i].alloc);
    for (int i = 0; i < x->ntensors; i++) nb_tensor_free(x->tensors[i]);
    for (int i = 0; i < x->nbufs; i++) free(x->bufs[i]);
    nb_module_free(x->m);
    if (x->dev) nb_device_close(x->dev);
}

static void print_outputs(ctx *x) {
    int np = nb_func_param_count(x->f, g_ov), first = 1;
    fputs(", \"out\": {", stdout);
    for (int p = 0; p < np; p++) {
        if (!param_is_output(x->f, p)) continue;
        const char *pn = nb_func_param_name(x->f, g_ov, p);
        size_t pl = strlen(pn);
        if (!first) fputs(", ", stdout);
        first = 0;
        nb_json_print_string(stdout, pn);
        fputs(": ", stdout);
        int sub = 0;
        for (int i = 0; i < x->nouts; i++) {
            const char *path = x->outs[i].path;
            nb_tensor *t = x->outs[i].alloc ? x->outs[i].alloc : x->outs[i].t;
            if (!strcmp(path, pn)) {
                print_tensor(stdout, t);
            } else if (!strncmp(path, pn, pl) && path[pl] == '.') {
                fputs(sub++ ? ", " : "{", stdout);
                nb_json_print_string(stdout, path + pl + 1);
                fputs(": ", stdout);
                print_tensor(stdout, t);
            }
        }
        if (sub) fputc('}', stdout);
    }
    fputc('}', stdout);
}

/* The derivative kernel of an explicit-block launch (--bwd / --fwd with --block-size): every
 * DiffTensor leaf gets a gradient array, --grad PATH=JSON or zeros of its tensor's shape, bound
 * with nb_call_grad_named and printed under "grad" afterwards (bwd: the accumulated gradients;
 * fwd: the tangents). */
static int kernel_grads(ctx *x, nb_call *c, const char *const *given, int ngiven, const char **paths,
                        nb_tensor **grads, int *n, int *usage) {
    int nl = nb_func_leaf_count(x->f, g_ov);
    int used[CALL_MAX] = {0};
    for (int j = 0; j < nl; j++) {
        nb_leaf_info li;
        if (nb_func_leaf(x->f, g_ov, j, &li) != NB_OK || !li.is_diff_tensor) continue;
        nb_tensor *primal = NULL, *g = NULL;
        for (int i = 0; i < x->nouts; i++)
            if (!strcmp(x->outs[i].path, li.path)) primal = x->outs[i].t;
        for (int k = 0; k < ngiven; k++) {
            const char *eq = strchr(given[k], '=');
            if ((size_t)(eq - given[k]) != strlen(li.path) || strncmp(given[k], li.path, (size_t)(eq - given[k]))) continue;
            char jerr[256];
            nb_json *v = nb_json_parse(eq + 1, jerr, sizeof jerr);
            if (!v) {
                snprintf(x->err, sizeof x->err, "--grad %s: %s", given[k], jerr);
                *usage = 1;
                return 0;
            }
            int ok = json_to_tensor(x, v, li.dtype, &g);
            nb_json_free(v);
            if (!ok) return 0;
            used[k] = 1;
        }
        if (!g && primal) {
            if (nb_tensor_zeros(x->dev, li.dtype, nb_tensor_ndim(primal), nb_tensor_shape(primal), &g) != NB_OK ||
                !keep_tensor(x, g)) {
                snprintf(x->err, sizeof x->err, "%s", nb_last_error());
                return 0;
            }
        }
        if (!g) continue; /* (no argument for it: the call reports the missing one) */
        if (nb_call_grad_named(c, li.path, g) != NB_OK) {
            snprintf(x->err, sizeof x->err, "%s", nb_last_error());
            return 0;
        }
        paths[*n] = li.path;
        grads[(*n)++] = g;
    }
    for (int k = 0; k < ngiven; k++)
        if (!used[k]) {
            snprintf(x->err, sizeof x->err, "--grad %s: %s has no DiffTensor parameter or field '%.*s'", given[k],
                     nb_func_signature(x->f, g_ov), (int)(strchr(given[k], '=') - given[k]), given[k]);
            *usage = 1;
            return 0;
        }
    return 1;
}

int nb_cmd_call(int argc, char **argv) {
    const char *includes[CALL_MAX], *consts[CALL_MAX], *maps[CALL_MAX], *args[CALL_MAX], *defines[CALL_MAX];
    const char *confs[CALL_MAX];
    int ndef = 0, nconf = 0;
    int ninc = 0, nconst = 0, nmaps = 0, nargs = 0, only_pos = 0, has_grid = 0, unchecked = 0;
    const char *file = NULL, *func = NULL, *device = "auto", *out_npy = NULL;
    int64_t grid[3] = {1, 1, 1}, bsize[3] = {1, 1, 1}, gsize[3] = {1, 1, 1};
    int has_bsize = 0, has_gsize = 0;
    if (argc == 0) { /* `nabla call` alone: its own usage (not the list of commands), exit 2 */
        call_help(stderr);
        return 2;
    }
    int explicit_blocks = 0; /* (derivative kernels of explicit-block launches stay here) */
    for (int i = 0; i < argc; i++) explicit_blocks |= !strcmp(argv[i], "--block-size");
    for (int i = 0; i < argc && !explicit_blocks; i++) /* derivative calls over arrays: cmd_call_ad.c */
        if (!strcmp(argv[i], "--fwd") || !strcmp(argv[i], "--bwd")) return nb_cmd_call_ad(argc, argv);
    int kmode = 0; /* NB_MODE_* of an explicit-block launch */
    const char *kgrads[CALL_MAX];
    int nkgrads = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!only_pos && a[0] == '-' && !is_negative_number(a)) {
            if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
                call_help(stdout);
                return 0;
            }
            if (!strcmp(a, "--")) {
                only_pos = 1;
                continue;
            }
            if (!strcmp(a, "--unchecked")) {
                unchecked = 1;
                continue;
            }
            if (!strcmp(a, "--bwd") || !strcmp(a, "--fwd")) {
                if (kmode) return nb_cli_bad_usage("call: --fwd and --bwd given together%s", "");
                kmode = !strcmp(a, "--bwd") ? NB_MODE_BWD : NB_MODE_FWD;
                continue;
            }
            if (!strcmp(a, "--grad")) {
                if (!next || !strchr(next, '=')) return nb_cli_bad_usage("call: --grad needs NAME=JSON%s", "");
                if (nkgrads == CALL_MAX) return nb_cli_bad_usage("call: too many --grad%s", "");
                kgrads[nkgrads++] = next;
                i++;
                continue;
            }
            const char *def;
            int dk = nb_cli_define_arg(argc, argv, &i, &def);
            if (dk < 0) return nb_cli_bad_usage("call: -D needs NAME or NAME=VALUE%s", "");
            if (dk > 0) {
                if (ndef == CALL_MAX) return nb_cli_bad_usage("call: too many -D%s", "");
                defines[ndef++] = def;
                continue;
            }
            int ck = nb_cli_conformance_arg(argc, argv, &i, &def);
            if (ck < 0) return nb_cli_bad_usage("call: --conformance needs TYPE:INTERFACE=ID%s", "");
            if (ck > 0) {
                if (nconf == CALL_MAX) return nb_cli_bad_usage("call: too many --conformance%s", "");
                confs[nconf++] = def;
                continue;
            }
            int takes = !strcmp(a, "--device") || !strcmp(a, "--map") || !strcmp(a, "-o") ||
                        !strcmp(a, "-I") || !strcmp(a, "--const") || !strcmp(a, "--grid") ||
                        !strcmp(a, "--block-size") || !strcmp(a, "--grid-size");
            if (!takes) return nb_cli_bad_usage("call: unknown argument '%s'", a);
            if (!next) return nb_cli_bad_usage("call: %s needs a value", a);
            i++;
            if (!strcmp(a, "--device")) device = next;
            else if (!strcmp(a, "-o")) out_npy = next;
            else if (!strcmp(a, "--grid") || !strcmp(a, "--block-size") || !strcmp(a, "--grid-size")) {
                int64_t g[3] = {1, 1, 1};
                if (nb_cli_parse_xyz(next, g) != 0)
                    return nb_cli_bad_usage(!strcmp(a, "--grid") ? "call: bad --grid '%s' (X[,Y[,Z]])"
                                            : !strcmp(a, "--block-size") ? "call: bad --block-size '%s' (X[,Y[,Z]])"
                                                                         : "call: bad --grid-size '%s' (X[,Y[,Z]])",
                                            next);
                int64_t *dst = !strcmp(a, "--grid") ? grid : !strcmp(a, "--block-size") ? bsize : gsize;
                memcpy(dst, g, sizeof g);
                if (!strcmp(a, "--grid")) has_grid = 1;
                else if (!strcmp(a, "--block-size")) has_bsize = 1;
                else has_gsize = 1;
            } else {
                int *cnt = !strcmp(a, "--map") ? &nmaps : !strcmp(a, "-I") ? &ninc : &nconst;
                const char **arr = !strcmp(a, "--map") ? maps : !strcmp(a, "-I") ? includes : consts;
                if (*cnt == CALL_MAX) return nb_cli_bad_usage("call: too many %s", a);
                if (strcmp(a, "-I") && !strchr(next, '='))
                    return nb_cli_bad_usage("call: %s needs NAME=VALUE", a);
                arr[(*cnt)++] = next;
            }
            continue;
        }
        if (!file) file = a;
        else if (!func) func = a;
        else if (nargs == CALL_MAX) return nb_cli_bad_usage("call: too many arguments%s", "");
        else args[nargs++] = a;
    }
    if (!file || !func) return nb_cli_bad_usage("call: need FILE and FUNC%s", "");
    if (has_bsize != has_gsize)
        return nb_cli_bad_usage(has_bsize ? "call: --block-size goes with --grid-size%s"
                                          : "call: --grid-size goes with --block-size%s", "");
    if (has_bsize && has_grid)
        return nb_cli_bad_usage("call: --grid counts threads; with --block-size use --grid-size (blocks)%s", "");
    if (nkgrads && !kmode) return nb_cli_bad_usage("call: --grad goes with --bwd / --fwd%s", "");
    if (out_npy && nb_file_check_writable(out_npy, "-o") != NB_OK) { /* before compiling and running */
        fprintf(stderr, "nabla: call: %s\n", nb_last_error());
        return 1;
    }

    ctx *x = calloc(1, sizeof *x);
    if (!x) return 1;
    int rc = 1, usage = 0;
    nb_module_options opts = {0};
    opts.include_dirs = includes;
    opts.ninclude_dirs = ninc;
    opts.unchecked = unchecked;
    opts.defines = defines;
    opts.ndefines = ndef;
    opts.conformances = confs;
    opts.nconformances = nconf;
    if (nb_device_open(device, &x->dev) != NB_OK ||
        nb_module_load(x->dev, file, &opts, &x->m) != NB_OK) {
        fprintf(stderr, "%s\n", nb_last_error());
        goto done;
    }
    for (int i = 0; i < nconst; i++) {
        char name[256], *end = NULL;
        const char *eq = strchr(consts[i], '=');
        size_t n = (size_t)(eq - consts[i]);
        double v = strtod(eq + 1, &end);
        if (n == 0 || n >= sizeof name || !eq[1] || *end) {
            snprintf(x->err, sizeof x->err, "bad --const '%s' (NAME=NUMBER)", consts[i]);
            usage = 1;
            goto fail;
        }
        memcpy(name, consts[i], n);
        name[n] = '\0';
        if (nb_module_set_constant(x->m, name, v) != NB_OK) goto fail_lib;
    }
    if (nb_module_func(x->m, func, &x->f) != NB_OK) goto fail_lib;
    if (nb_func_is_host(x->f, 0)) { /* [TorchEntryPoint]: nb_host_call */
        int hr = call_host(x, args, nargs, out_npy, &usage);
        if (hr == 0) { rc = 0; goto done; }
        if (hr < 0) goto fail_lib;
        goto fail;
    }
    if (nb_call_begin(x->f, &x->c) != NB_OK) goto fail_lib;
    if (kmode && nb_call_set_mode(x->c, (nb_diff_mode)kmode) != NB_OK) goto fail_lib;
    g_ov = choose_overload(x->f, args, nargs);
    int used_ov = -1;
    if (nb_call_report_overload(x->c, &used_ov) != NB_OK) goto fail_lib;
    if (nb_func_param_count(x->f, g_ov) > CALL_MAX) {
        snprintf(x->err, sizeof x->err, "too many parameters");
        goto fail;
    }
    int next_pos = 0;
    for (int i = 0; i < nargs; i++)
        if (!bind_arg_text(x, args[i], &next_pos, &usage)) goto fail;
    for (int i = 0; i < nmaps; i++) {
        char name[256];
        const char *eq = strchr(maps[i], '=');
        size_t n = (size_t)(eq - maps[i]);
        int dims[NB_MAX_DIMS];
        int nd = parse_dims(eq + 1, dims, NB_MAX_DIMS);
        if (n == 0 || n >= sizeof name || nd < 0) {
            snprintf(x->err, sizeof x->err, "bad --map '%s' (ARG=DIM,DIM,… with dims 0..7)", maps[i]);
            usage = 1;
            goto fail;
        }
        memcpy(name, maps[i], n);
        name[n] = '\0';
        char *keep = malloc(n + 1); /* the call borrows the name until it runs */
        if (!keep || !keep_buf(x, keep)) goto fail;
        memcpy(keep, name, n + 1);
        nb_status s = (name[0] >= '0' && name[0] <= '9')
                          ? nb_call_map(x->c, atoi(name), nd, dims)
                          : nb_call_map_named(x->c, keep, nd, dims);
        if (s) goto fail_lib;
    }
    /* Out parameters nobody gave: the call allocates them, field by field for structs. */
    int np = nb_func_param_count(x->f, g_ov), nl = nb_func_leaf_count(x->f, g_ov);
    for (int p = 0; p < np; p++) {
        if (x->covered[p] || nb_func_param_dir(x->f, g_ov, p) != NB_ARG_OUT) continue;
        for (int j = 0; j < nl; j++) {
            nb_leaf_info li;
            if (nb_func_leaf(x->f, g_ov, j, &li) != NB_OK || li.param != p) continue;
            if (x->nouts == CALL_MAX) break;
            out_rec *o = &x->outs[x->nouts++];
            o->path = li.path;
            o->t = NULL;
            nb_status s = is_struct_param(x->f, p) ? nb_call_arg_alloc_named(x->c, li.path, &o->alloc)
                                                   : nb_call_arg_alloc(x->c, p, &o->alloc);
            if (s) goto fail_lib;
        }
    }
    nb_tensor *results[CALL_MAX] = {0};
    int nres = 0;
    nb_status s;
    nb_call *c = x->c;
    x->c = NULL;
    const char *gpath[CALL_MAX];
    nb_tensor *gten[CALL_MAX];
    int ngrads = 0;
    if (kmode && !kernel_grads(x, c, kgrads, nkgrads, gpath, gten, &ngrads, &usage)) {
        nb_call_free(c);
        goto fail;
    }
    if (has_bsize) { /* explicit blocks (any function: the library says which it launches) */
        s = nb_call_run_blocks(c, bsize, gsize);
    } else if (nb_func_is_kernel(x->f, g_ov)) {
        int nt[3];
        if (!has_grid && nb_func_numthreads(x->f, g_ov, nt)) { /* one thread group, as Slang's test harness dispatches */
            for (int k = 0; k < 3; k++) grid[k] = nt[k];
            has_grid = 1;
        }
        if (!has_grid) {
            nb_call_free(c);
            snprintf(x->err, sizeof x->err, "%s is a [Kernel] function: give --grid X[,Y[,Z]]",
                     func);
            usage = 1;
            goto fail;
        }
        s = nb_call_run_grid(c, grid);
    } else {
        s = nb_call_run_results(c, results, CALL_MAX, &nres);
    }
    if (s) goto fail_lib;
    if (used_ov >= 0) g_ov = used_ov; /* outputs are those of the overload that ran */
    nb_leaf_info rli[CALL_MAX];
    int print_ok = 1;
    for (int k = 0; k < nres; k++)
        if (nb_func_result_leaf(x->f, g_ov, k, &rli[k]) != NB_OK) print_ok = 0;
    fputs("{\"result\": ", stdout);
    if (!print_ok) {
    } else if (nres == 0) {
        fputs("null", stdout);
    } else if (nres == 1 && !strcmp(rli[0].path, "_result")) {
        print_ok = print_result_leaf(results[0], "_result", out_npy);
    } else {
        int k = 0;
        print_result_object(results, rli, nres, &k, "_result", out_npy, &print_ok);
    }
    for (int k = 0; k < nres; k++) nb_tensor_free(results[k]);
    if (!print_ok) {
        fputs("\n", stdout);
        goto fail_lib;
    }
    int has_out = 0;
    np = nb_func_param_count(x->f, g_ov);
    for (int p = 0; p < np; p++) has_out |= param_is_output(x->f, p);
    if (has_out) print_outputs(x);
    if (kmode) {
        fputs(", \"grad\": {", stdout);
        for (int k = 0; k < ngrads; k++) {
            if (k) fputs(", ", stdout);
            nb_json_print_string(stdout, gpath[k]);
            fputs(": ", stdout);
            print_tensor(stdout, gten[k]);
        }
        fputc('}', stdout);
    }
    fputs("}\n", stdout);
    rc = 0;
    goto done;
fail_lib:
    snprintf(x->err, sizeof x->err, "%s", nb_last_error());
fail:
    fprintf(stderr, "nabla: call: %s\n", x->err);
    if (usage) rc = 2;
done:
    free_ctx(x);
    free(x);
    return rc;
}

/* Host functions ([TorchEntryPoint], slangtorch's `m.square_fwd(x)`): m.f(args…) runs
 * nb_host_call on the module's device. Arguments: per parameter a tensor (torch, numpy, nabla.Tensor,
 * DLPack object, or a list) for a TorchTensor, a number for a scalar, and for a struct a
 * tuple/list in field order, a dict or an object with the fields as attributes (namedtuples).
 * Results follow the inputs like every nabla call (torch in -> torch out on the same device,
 * numpy in -> numpy out); a struct result is a tuple in field order (nested structs nested), as
 * slangtorch returns it.
 * Tensors must have the parameter's dtype (no conversion; lists are converted) and, for torch
 * tensors and nabla.Tensors, live on the module's device (DeviceError otherwise: no silent copy);
 * numpy arrays are host data and are copied to a CUDA module's device (and written back). */
#include <string.h>

#include "nbpy.h"


enum { HMAX = 64 };

typedef struct host_state {
    FunctionObject *fn;
    int ov;
    nbp_callctx cx;
    nb_host_value v[HMAX];
    nbp_arg a[HMAX];
    int na;
    nb_tensor *made[HMAX]; /* tensors made from lists */
    int nmade;
    nb_leaf_info li[HMAX];
    int nl;
    double *vals[HMAX]; /* vector / matrix / array leaves' numbers (PyMem) */
} host_state;

static int raise_st(nb_status st) {
    nbp_raise(st);
    return -1;
}

/* "float3" / "int[2][3]" for messages. */
static const char *leaf_type(const nb_leaf_info *li, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s", nb_dtype_name(li->dtype));
    for (int d = 0; d < li->value_rank && n > 0 && (size_t)n < cap; d++)
        n += snprintf(buf + n, cap - (size_t)n, "[%lld]", (long long)li->value_shape[d]);
    return buf;
}

/* The numbers of a vector / matrix / array value (nested sequences, C order) into out[*k ...]:
 * each level must have value_shape[d] items (ShapeError otherwise). */
static int flatten_value(host_state *s, const nb_leaf_info *li, PyObject *o, int d, double *out, int64_t *k) {
    char tb[64];
    if (d == li->value_rank) {
        PyObject *f = PyBool_Check(o) ? (Py_INCREF(o), o) : PyNumber_Float(o);
        if (!f) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: argument '%s' is a %s: its items must be numbers, got %R",
                         nb_func_name(s->fn->f), li->path, leaf_type(li, tb, sizeof tb), o);
            return -1;
        }
        out[(*k)++] = PyFloat_AsDouble(f);
        Py_DECREF(f);
        return PyErr_Occurred() ? -1 : 0;
    }
    Py_ssize_t n = PySequence_Check(o) && !PyUnicode_Check(o) && !PyBytes_Check(o) ? PySequence_Size(o) : -1;
    if (n < 0) PyErr_Clear();
    if (n != li->value_shape[d]) {
        if (n < 0)
            PyErr_Format(nbp_ShapeError, "%s: argument '%s' is a %s: give a sequence of %lld, got %R",
                         nb_func_name(s->fn->f), li->path, leaf_type(li, tb, sizeof tb), (long long)li->value_shape[d], o);
        else
            PyErr_Format(nbp_ShapeError, "%s: argument '%s' is a %s: give %lld items%s, got %zd",
                         nb_func_name(s->fn->f), li->path, leaf_type(li, tb, sizeof tb), (long long)li->value_shape[d],
                         d ? " in each row" : "", n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PySequence_GetItem(o, i);
        int r = it ? flatten_value(s, li, it, d + 1, out, k) : -1;
        Py_XDECREF(it);
        if (r < 0) return -1;
    }
    return 0;
}

/* One leaf's value from o. */
static int host_leaf(host_state *s, int j, PyObject *o) {
    const nb_leaf_info *li = &s->li[j];
    if (!li->is_tensor && li->value_rank > 0) { /* float3, int2, float[4], float2x2: a (nested) sequence */
        int64_t n = 1, k = 0;
        for (int d = 0; d < li->value_rank; d++) n *= li->value_shape[d];
        s->vals[j] = PyMem_Malloc(sizeof(double) * (size_t)(n ? n : 1));
        if (!s->vals[j]) {
            PyErr_NoMemory();
            return -1;
        }
        if (flatten_value(s, li, o, 0, s->vals[j], &k) < 0) return -1;
        s->v[j].values = s->vals[j];
        s->v[j].count = n;
        return 0;
    }
    if (!li->is_tensor) {
        if (PyBool_Check(o)) s->v[j].number = o == Py_True;
        else if (PyFloat_Check(o) || PyLong_Check(o)) s->v[j].number = PyFloat_AsDouble(o);
        else {
            int tt = nbp_is_torch(o);
            if (tt < 0) return -1;
            if (tt || PyObject_CheckBuffer(o) || nbp_is_tensor(o)) {
                PyErr_Format(nbp_ArgumentError, "%s: argument '%s' is a number (%s); a tensor was given",
                             nb_func_name(s->fn->f), li->path, nb_dtype_name(li->dtype));
                return -1;
            }
            PyObject *f = PyNumber_Float(o);
            if (!f) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "%s: argument '%s' is a number (%s), got %R", nb_func_name(s->fn->f),
                             li->path, nb_dtype_name(li->dtype), o);
                return -1;
            }
            s->v[j].number = PyFloat_AsDouble(f);
            Py_DECREF(f);
        }
        return 0;
    }
    if (s->na >= HMAX) {
        PyErr_SetString(nbp_ArgumentError, "too many tensor arguments");
        return -1;
    }
    nbp_arg *a = &s->a[s->na];
    if (nbp_convert(&s->cx, o, 2, a) < 0) return -1; /* (kernels may write through it) */
    s->na++;
    if (a->src > s->cx.src) s->cx.src = a->src;
    if ((a->src == SRC_TORCH || a->src == SRC_TENSOR) && a->user) { /* staged: on another device */
        PyErr_Format(nbp_DeviceError, "%s: argument '%s' is on %s but the module runs on %s (move it first)",
                     nb_func_name(s->fn->f), li->path, nb_device_name(nb_tensor_device(a->user)),
                     nb_device_name(s->cx.dev));
        return -1;
    }
    if (!a->t) { /* a list or a number: a tensor of the parameter's dtype */
        if (a->scalar == 1 || a->scalar == 2) {
            PyErr_Format(nbp_ArgumentError, "%s: argument '%s' is a TorchTensor<%s>; a number was given",
                         nb_func_name(s->fn->f), li->path, nb_dtype_name(li->dtype));
            return -1;
        }
        size_t n = 1;
        for (int d = 0; d < a->vndim; d++) n *= (size_t)a->vshape[d];
        void *buf = PyMem_Malloc(n * nb_dtype_size(li->dtype) + 1);
        if (!buf) {
            PyErr_NoMemory();
            return -1;
        }
        nb_convert(buf, li->dtype, a->vdata, a->vdtype, n);
        nb_tensor *t = NULL;
        nb_status st = nb_tensor_from_host(s->cx.dev, li->dtype, a->vndim, a->vshape, buf, &t);
        PyMem_Free(buf);
        if (st) return raise_st(st);
        s->made[s->nmade++] = t;
        s->v[j].tensor = t;
        return 0;
    }
    s->v[j].tensor = a->t;
    return 0;
}

/* The child of `prefix` that leaf path `path` lies under: ".field" or "[i]" appended to prefix into
 * sub; key gets the field name or the index. */
static void child_of(const char *prefix, const char *path, char *sub, size_t cap, char *key, size_t kcap) {
    size_t pl = strlen(prefix);
    const char *rest = path + pl;
    size_t kl = 1;
    if (*rest == '[') {
        while (rest[kl] && rest[kl] != ']') kl++;
        if (rest[kl] == ']') kl++;
    } else
        while (rest[kl] && rest[kl] != '.' && rest[kl] != '[') kl++;
    snprintf(sub, cap, "%s%.*s", prefix, (int)kl, rest);
    size_t ke = *rest == '[' ? kl - 1 : kl; /* (the key without '.' / '[' and ']') */
    snprintf(key, kcap, "%.*s", (int)(ke > 1 ? ke - 1 : 0), rest + 1);
}

/* Does leaf path lie under sub (sub itself, or sub followed by '.' or '[')? */
static int under(const char *path, const char *sub) {
    size_t sl = strlen(sub);
    return !strncmp(path, sub, sl) && (path[sl] == '.' || path[sl] == '[' || path[sl] == '\0');
}

/* Leaves [lo, hi) all lie under `prefix` (a parameter name, a struct path or an array element):
 * binds them from o (a struct: tuple/list in field order, dict or object; an array of structs or
 * TorchTensors: a sequence of its length). */
static int host_value(host_state *s, int lo, int hi, const char *prefix, PyObject *o) {
    if (hi - lo == 1 && !strcmp(s->li[lo].path, prefix)) return host_leaf(s, lo, o);
    int is_array = s->li[lo].path[strlen(prefix)] == '[';
    if (is_array) { /* the element count: the last leaf's index + 1 */
        char sub[512], key[128];
        child_of(prefix, s->li[hi - 1].path, sub, sizeof sub, key, sizeof key);
        long n = atol(key) + 1;
        Py_ssize_t got = PySequence_Check(o) && !PyUnicode_Check(o) && !PyDict_Check(o) ? PySequence_Size(o) : -1;
        if (got < 0) PyErr_Clear();
        if (got != n) {
            PyErr_Format(nbp_ArgumentError, "%s: argument '%s' is an array of %ld: give a list or tuple of %ld, got %R",
                         nb_func_name(s->fn->f), prefix, n, n, o);
            return -1;
        }
    }
    int field = 0;
    for (int j = lo; j < hi; field++) {
        char key[128], sub[512];
        child_of(prefix, s->li[j].path, sub, sizeof sub, key, sizeof key);
        int k = j;
        while (k < hi && under(s->li[k].path, sub)) k++;
        PyObject *item = NULL;
        if (is_array) {
            item = PySequence_GetItem(o, atol(key));
        } else if (PyDict_Check(o)) {
            item = PyDict_GetItemString(o, key); /* borrowed */
            Py_XINCREF(item);
        } else if (PyTuple_Check(o) || PyList_Check(o)) {
            if (field < PySequence_Size(o)) item = PySequence_GetItem(o, field);
        } else if (PyObject_HasAttrString(o, key)) {
            item = PyObject_GetAttrString(o, key);
        }
        if (!item) {
            if (!PyErr_Occurred())
                PyErr_Format(nbp_ArgumentError, "%s: argument '%s' is a struct: give a tuple in field order, a dict or "
                             "an object with its fields (missing '%s')", nb_func_name(s->fn->f), prefix, sub);
            return -1;
        }
        int r = host_value(s, j, k, sub, item);
        Py_DECREF(item);
        if (r < 0) return -1;
        j = k;
    }
    return 0;
}

/* A vector / matrix / array result's numbers as nested tuples of value_shape. */
static PyObject *value_tuple(const nb_leaf_info *li, const double *v, int d, int64_t *k) {
    if (d == li->value_rank) {
        double x = v[(*k)++];
        if (li->dtype == NB_BOOL) return PyBool_FromLong(x != 0);
        return nb_dtype_is_float(li->dtype) ? PyFloat_FromDouble(x) : PyLong_FromDouble(x);
    }
    PyObject *t = PyTuple_New((Py_ssize_t)li->value_shape[d]);
    for (Py_ssize_t i = 0; t && i < (Py_ssize_t)li->value_shape[d]; i++) {
        PyObject *it = value_tuple(li, v, d + 1, k);
        if (!it) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SetItem(t, i, it);
    }
    return t;
}

/* Results [*k, n) under prefix as a (nested) tuple. */
static PyObject *host_results(host_state *s, nb_host_value *R, nb_leaf_info *rl, int n, int *k, const char *prefix,
                              int kind) {
    size_t pl = strlen(prefix);
    if (*k < n && !strcmp(rl[*k].path, prefix)) {
        int j = (*k)++;
        if (!rl[j].is_tensor && rl[j].value_rank > 0) { /* float2 -> (x, y), as slang-torch returns it */
            int64_t q = 0;
            return value_tuple(&rl[j], R[j].values, 0, &q);
        }
        if (!rl[j].is_tensor) {
            if (rl[j].dtype == NB_BOOL) return PyBool_FromLong(R[j].number != 0);
            if (nb_dtype_is_float(rl[j].dtype)) return PyFloat_FromDouble(R[j].number);
            return PyLong_FromDouble(R[j].number);
        }
        nb_tensor *t = R[j].tensor;
        R[j].tensor = NULL;
        return nbp_wrap_result(&s->cx, kind, t);
    }
    PyObject *out = PyList_New(0);
    while (out && *k < n && !strncmp(rl[*k].path, prefix, pl) && (rl[*k].path[pl] == '.' || rl[*k].path[pl] == '[')) {
        char sub[512], key[128]; /* a field or an array element: items of the tuple in order */
        child_of(prefix, rl[*k].path, sub, sizeof sub, key, sizeof key);
        PyObject *v = host_results(s, R, rl, n, k, sub, kind);
        if (!v || PyList_Append(out, v) < 0) {
            Py_XDECREF(v);
            Py_CLEAR(out);
            break;
        }
        Py_DECREF(v);
    }
    if (!out) return NULL;
    PyObject *t = PyList_AsTuple(out);
    Py_DECREF(out);
    return t;
}

PyObject *nbp_host_call(FunctionObject *fn, PyObject *args, PyObject *kw) {
    if (fn->mode != NBP_PRIMAL)
        return PyErr_Format(nbp_ArgumentError, "%s is a host function ([TorchEntryPoint]): it has no .bwds/.fwds "
                            "(write a backward host function, as the slangtorch tutorial's square_bwd)",
                            nb_func_name(fn->f));
    host_state *s = PyMem_Calloc(1, sizeof *s);
    if (!s) return PyErr_NoMemory();
    PyObject *out = NULL;
    nb_host_value R[HMAX];
    nb_leaf_info rl[HMAX];
    int nres = 0;
    memset(R, 0, sizeof R);
    s->fn = fn;
    s->cx.dev = nb_module_device(((ModuleObject *)fn->module)->m);
    s->nl = nb_func_leaf_count(fn->f, 0);
    int np = nb_func_param_count(fn->f, 0);
    if (s->nl > HMAX || np > 32) {
        PyErr_SetString(nbp_UnsupportedError, "host function with too many parameters");
        goto done;
    }
    for (int j = 0; j < s->nl; j++)
        if (nb_func_leaf(fn->f, 0, j, &s->li[j]) != NB_OK) {
            nbp_raise(NB_ERR_INTERNAL);
            goto done;
        }
    Py_ssize_t npos = PyTuple_Size(args);
    if (npos > np) {
        PyErr_Format(nbp_ArgumentError, "%s takes %d argument%s, %zd given: %s", nb_func_name(fn->f), np,
                     np == 1 ? "" : "s", npos, nb_func_signature(fn->f, 0));
        goto done;
    }
    for (int p = 0, j = 0; p < np; p++) {
        const char *pname = nb_func_param_name(fn->f, 0, p);
        int lo = j;
        while (j < s->nl && s->li[j].param == p) j++;
        PyObject *o = p < npos ? PyTuple_GetItem(args, p) : kw ? PyDict_GetItemString(kw, pname) : NULL;
        if (p < npos && kw && PyDict_GetItemString(kw, pname)) {
            PyErr_Format(nbp_ArgumentError, "%s: argument '%s' given twice", nb_func_name(fn->f), pname);
            goto done;
        }
        if (!o) {
            PyErr_Format(nbp_ArgumentError, "%s: missing argument '%s' (%s)", nb_func_name(fn->f), pname,
                         nb_func_signature(fn->f, 0));
            goto done;
        }
        if (host_value(s, lo, j, pname, o) < 0) goto done;
    }
    if (kw) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(kw, &pos, &k, &v)) {
            const char *ks = PyUnicode_AsUTF8AndSize(k, NULL);
            int found = 0;
            for (int p = 0; ks && p < np; p++) found |= !strcmp(ks, nb_func_param_name(fn->f, 0, p));
            if (!found) {
                PyErr_Format(nbp_ArgumentError, "%s has no parameter '%U' (%s)", nb_func_name(fn->f), k,
                             nb_func_signature(fn->f, 0));
                goto done;
            }
        }
    }
    {
        nb_status st;
        Py_BEGIN_ALLOW_THREADS
        st = nb_host_call(fn->f, s->nl, s->v, R, HMAX, &nres);
        Py_END_ALLOW_THREADS
        if (nbp_torch_after(&s->cx) < 0 && !st) goto done;
        if (st) {
            nbp_raise(st);
            goto done;
        }
    }
    for (int i = 0; i < s->na; i++)
        if (nbp_arg_writeback(&s->a[i]) < 0) goto done;
    for (int i = 0; i < nres; i++)
        if (nb_func_result_leaf(fn->f, 0, i, &rl[i]) != NB_OK) {
            nbp_raise(NB_ERR_INTERNAL);
            goto done;
        }
    if (nres == 0) {
        out = Py_None;
        Py_INCREF(out);
    } else {
        int k = 0;
        out = host_results(s, R, rl, nres, &k, "_result", s->cx.src);
    }
done:
    nb_host_results_free(R, nres);
    for (int i = 0; i < s->nl; i++) PyMem_Free(s->vals[i]);
    for (int i = 0; i < s->na; i++) nbp_arg_release(&s->a[i]);
    for (int i = 0; i < s->nmade; i++) nb_tensor_free(s->made[i]);
    PyMem_Free(s);
    return out;
}

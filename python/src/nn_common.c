/* nabla.nn: argument handling shared by the neural-network objects. See nn_common.h. */
#include "nn_common.h"

#include <string.h>

PyObject *nbn_raise(nb_status st) { return nbp_raise(st); }

nb_tensor *nbn_host_f32(nbn_ctx *c, PyObject *o, const char *who, const char *what, int max_ndim) {
    PyObject *cpu = nbp_device_get("cpu");
    memset(c, 0, sizeof *c);
    if (!cpu) return NULL;
    int r = nbn_begin(c, ((DeviceObject *)cpu)->dev, who);
    Py_DECREF(cpu); /* the device cache keeps it */
    if (r < 0) return NULL;
    c->stage = 1;
    return nbn_in(c, o, what, 0, 1, max_ndim);
}

PyObject *nbn_host_result(int nd, const int64_t *sh, int kind, nbn_fill_fn fill, void *ctx) {
    PyObject *cpu = nbp_device_get("cpu");
    if (!cpu) return NULL;
    nb_tensor *h = NULL;
    nb_status st = nb_tensor_empty(((DeviceObject *)cpu)->dev, NB_F32, nd, sh, &h);
    Py_DECREF(cpu);
    if (st) return nbn_raise(st);
    float *dst = nb_tensor_data(h);
    int64_t n = nb_tensor_numel(h);
    Py_BEGIN_ALLOW_THREADS
    st = fill(ctx, dst, n);
    Py_END_ALLOW_THREADS
    if (st) {
        nb_tensor_free(h);
        return nbn_raise(st);
    }
    nbp_callctx cx;
    memset(&cx, 0, sizeof cx);
    return nbp_wrap_result(&cx, kind < 0 ? SRC_NUMPY : kind, h);
}

static nb_device *cpu_device(void) {
    PyObject *d = nbp_device_get("cpu");
    if (!d) return NULL;
    nb_device *dev = ((DeviceObject *)d)->dev;
    Py_DECREF(d); /* the device cache keeps it */
    return dev;
}

int nbn_begin(nbn_ctx *c, nb_device *dev, const char *who) {
    memset(c, 0, sizeof *c);
    if (!dev) return -1;
    c->dev = dev;
    c->who = who;
    c->cx.dev = dev;
    c->hx.dev = cpu_device();
    c->kind = SRC_PY;
    return c->hx.dev ? 0 : -1;
}

void nbn_end(nbn_ctx *c) {
    for (int i = 0; i < c->nt; i++) nb_tensor_free(c->tmp[i]);
    for (int i = 0; i < c->na; i++) nbp_arg_release(&c->a[i]);
    c->nt = c->na = 0;
}

nb_tensor *nbn_keep(nbn_ctx *c, nb_tensor *t) {
    if (!t) return NULL;
    if (c->nt >= NBN_MAXA) { /* cannot happen with the fixed argument counts used here */
        nb_tensor_free(t);
        PyErr_SetString(nbp_InternalError, "nabla.nn: too many temporaries");
        return NULL;
    }
    c->tmp[c->nt++] = t;
    return t;
}

/* The device name a torch tensor lives on ("cpu" / "cuda:N"). */
static int torch_device_name(PyObject *o, char *buf, size_t cap) {
    PyObject *r = PyObject_CallMethodObjArgs(o, nbp_str_get_device, NULL);
    if (!r) return -1;
    long idx = PyLong_AsLong(r);
    Py_DECREF(r);
    if (idx == -1 && PyErr_Occurred()) return -1;
    if (idx < 0) snprintf(buf, cap, "cpu");
    else snprintf(buf, cap, "cuda:%ld", idx);
    return 0;
}

/* 0 = host data (numpy, buffer, list), 1 = nabla.Tensor, 2 = torch tensor; -1 on error. The
 * device of device data must be c->dev. */
static int classify(nbn_ctx *c, PyObject *o, const char *what) {
    int src = 0;
    char name[32];
    if (nbp_is_tensor(o)) {
        src = 1;
        snprintf(name, sizeof name, "%s", nb_device_name(nb_tensor_device(((TensorObject *)o)->t)));
    } else {
        int tt = nbp_is_torch(o);
        if (tt < 0) return -1;
        if (!tt) return 0;
        src = 2;
        if (torch_device_name(o, name, sizeof name) < 0) return -1;
    }
    const char *want = nb_device_name(c->dev);
    int same = !strcmp(name, want) || (!strcmp(want, "cuda:0") && !strcmp(name, "cuda"));
    if (!same) {
        PyErr_Format(nbp_DeviceError,
                     "%s: %s is a %s on %s but the layer is on %s: move it there first "
                     "(nabla.nn makes no hidden transfers of tensors)",
                     c->who, what, src == 1 ? "nabla.Tensor" : "torch tensor", name, want);
        return -1;
    }
    return src;
}

static int check_ndim(nbn_ctx *c, nb_tensor *t, const char *what, int lo, int hi) {
    int nd = nb_tensor_ndim(t);
    if (nd >= lo && nd <= hi) return 0;
    char buf[128];
    nb_shape_str(nd, nb_tensor_shape(t), buf, sizeof buf);
    if (lo == hi) PyErr_Format(nbp_ShapeError, "%s: %s must have %d dims, got shape %s", c->who, what, lo, buf);
    else PyErr_Format(nbp_ShapeError, "%s: %s must have %d to %d dims, got shape %s", c->who, what, lo, hi, buf);
    return -1;
}

nb_tensor *nbn_in(nbn_ctx *c, PyObject *o, const char *what, int allow_f16, int min_nd, int max_nd) {
    if (c->na >= NBN_MAXA) {
        PyErr_SetString(nbp_InternalError, "nabla.nn: too many arguments");
        return NULL;
    }
    int src = c->stage ? 0 : classify(c, o, what);
    if (src < 0) return NULL;
    nbp_arg *a = &c->a[c->na];
    if (nbp_convert(src || c->stage ? &c->cx : &c->hx, o, 0, a) < 0) {
        c->na++; /* released by nbn_end */
        return NULL;
    }
    c->na++;
    /* lists give numpy results when numpy is there, else nabla.Tensor (SRC_PY) */
    int kind = src == 1 ? SRC_TENSOR : src == 2 ? SRC_TORCH : a->src == SRC_PY ? SRC_PY : SRC_NUMPY;
    if (c->stage) kind = a->src == SRC_PY ? SRC_NUMPY : a->src;
    if (kind > c->kind) c->kind = kind;
    nb_tensor *t = a->t;
    nb_status st;
    if (!t) {
        if (a->scalar != 3) {
            PyErr_Format(PyExc_TypeError, "%s: %s must be an array (numpy, nabla.Tensor, torch or a nested list), got %R",
                         c->who, what, o);
            return NULL;
        }
        nb_tensor *h = NULL;
        st = nb_tensor_from_host(c->hx.dev, a->vdtype, a->vndim, a->vshape, a->vdata, &h);
        if (st) return NBN_RAISE_T(st);
        if (!(t = nbn_keep(c, h))) return NULL;
    }
    if (check_ndim(c, t, what, min_nd, max_nd) < 0) return NULL;
    nb_dtype dt = nb_tensor_dtype(t);
    int ok = dt == NB_F32 || (allow_f16 && dt == NB_F16);
    if (!ok && src) {
        PyErr_Format(nbp_DtypeError, "%s: %s has dtype %s; expected f32%s (nabla.nn makes no hidden casts of tensors)",
                     c->who, what, nb_dtype_name(dt), allow_f16 ? " or f16" : "");
        return NULL;
    }
    if (!ok) { /* host data: converted to f32 */
        if (dt == NB_BOOL) {
            PyErr_Format(nbp_DtypeError, "%s: %s is a bool array; expected numbers", c->who, what);
            return NULL;
        }
        nb_tensor *hc = NULL, *f = NULL;
        st = nb_tensor_contiguous(t, &hc);
        if (!st) st = nb_tensor_empty(c->hx.dev, NB_F32, nb_tensor_ndim(t), nb_tensor_shape(t), &f);
        if (!st) nb_convert(nb_tensor_data(f), NB_F32, nb_tensor_data(hc), dt, (size_t)nb_tensor_numel(t));
        if (hc) nb_tensor_free(hc);
        if (st) {
            if (f) nb_tensor_free(f);
            return NBN_RAISE_T(st);
        }
        if (!(t = nbn_keep(c, f))) return NULL;
    }
    if (!nb_tensor_is_contiguous(t)) {
        nb_tensor *cc = NULL;
        Py_BEGIN_ALLOW_THREADS
        st = nb_tensor_contiguous(t, &cc);
        Py_END_ALLOW_THREADS
        if (st) return NBN_RAISE_T(st);
        if (!(t = nbn_keep(c, cc))) return NULL;
    }
    if (nb_tensor_device(t) != c->dev && !src) { /* host data for a CUDA layer: upload */
        nb_tensor *d = NULL;
        Py_BEGIN_ALLOW_THREADS
        st = nb_tensor_to(t, c->dev, &d);
        Py_END_ALLOW_THREADS
        if (st) return NBN_RAISE_T(st);
        if (!(t = nbn_keep(c, d))) return NULL;
    }
    return t;
}

nb_tensor *nbn_inout(nbn_ctx *c, PyObject *o, const char *what) {
    if (c->na >= NBN_MAXA) {
        PyErr_SetString(nbp_InternalError, "nabla.nn: too many arguments");
        return NULL;
    }
    int src = classify(c, o, what);
    if (src < 0) return NULL;
    if (!src && nb_device_get_kind(c->dev) != NB_DEVICE_CPU) {
        PyErr_Format(nbp_DeviceError, "%s: %s is host memory (numpy) but the optimizer runs on %s: "
                     "pass a nabla.Tensor or torch tensor there", c->who, what, nb_device_name(c->dev));
        return NULL;
    }
    nbp_arg *a = &c->a[c->na];
    if (nbp_convert(src ? &c->cx : &c->hx, o, 1, a) < 0) {
        c->na++;
        return NULL;
    }
    c->na++;
    nb_tensor *t = a->t;
    if (!t) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be an array updated in place, got %R", c->who, what, o);
        return NULL;
    }
    if (nb_tensor_dtype(t) != NB_F32) {
        PyErr_Format(nbp_DtypeError, "%s: %s has dtype %s; expected f32", c->who, what, nb_dtype_name(nb_tensor_dtype(t)));
        return NULL;
    }
    if (!nb_tensor_is_contiguous(t)) {
        PyErr_Format(nbp_LayoutError, "%s: %s must be contiguous (it is updated in place)", c->who, what);
        return NULL;
    }
    if (nb_tensor_ndim(t) != 1) { /* flat view */
        int64_t n = nb_tensor_numel(t);
        nb_tensor *f = NULL;
        nb_status st = nb_tensor_reshape(t, 1, &n, &f);
        if (st) return NBN_RAISE_T(st);
        if (!(t = nbn_keep(c, f))) return NULL;
    }
    return t;
}

int nbn_after(nbn_ctx *c) { return nbp_torch_after(&c->cx); }

PyObject *nbn_out(nbn_ctx *c, nb_tensor *t, int kind) {
    return nbp_wrap_result(&c->cx, kind >= 0 ? kind : c->kind, t);
}

int nbn_activation(PyObject *o, const char *what) {
    if (o == NULL || o == Py_None) return NB_ACT_NONE;
    const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8AndSize(o, NULL) : NULL;
    if (!s) {
        if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "%s must be a str, got %R", what, o);
        return -1;
    }
    int a = nb_activation_from_name(s);
    if (a < 0) {
        PyErr_Format(nbp_ArgumentError,
                     "%s = '%s' is not an activation (none, relu, leaky_relu, silu, sigmoid, tanh)", what, s);
        return -1;
    }
    return a;
}

PyObject *nbn_view(nb_tensor *t, PyObject *owner) {
    nb_tensor *v = NULL;
    nb_status st = nbp_view(t, &v);
    if (st) return nbn_raise(st);
    return nbp_tensor_new(v, owner);
}

PyObject *nbn_torch_view(nb_tensor *t) {
    if (!nbp_T.loaded) {
        PyObject *m = PyImport_ImportModule("torch");
        if (!m) return NULL;
        Py_DECREF(m);
        if (!nbp_torch_load()) return PyErr_Format(nbp_InternalError, "torch could not be loaded");
    }
    if (!nbp_T.from_dlpack) return PyErr_Format(nbp_UnsupportedError, "this torch has no DLPack import");
    PyObject *cap = nbp_dlpack_capsule(t, NULL, 0, 0);
    if (!cap) return NULL;
    PyObject *r = PyObject_CallFunctionObjArgs(nbp_T.from_dlpack, cap, NULL);
    Py_DECREF(cap);
    return r;
}

int nbn_shape(PyObject *o, int max, int *nd, int64_t *sh, const char *what) {
    if (PyLong_Check(o)) {
        *nd = 1;
        sh[0] = PyLong_AsLongLong(o);
        if (PyErr_Occurred()) return -1;
    } else {
        Py_ssize_t n = PySequence_Check(o) ? PySequence_Size(o) : -1;
        if (n < 0) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: shape must be an int or a sequence of ints, got %R", what, o);
            return -1;
        }
        if (n < 1 || n > max) {
            PyErr_Format(nbp_ShapeError, "%s: shape must have 1 to %d dims, got %zd", what, max, n);
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *it = PySequence_GetItem(o, i);
            sh[i] = it ? PyLong_AsLongLong(it) : -1;
            Py_XDECREF(it);
            if (PyErr_Occurred()) return -1;
        }
        *nd = (int)n;
    }
    for (int i = 0; i < *nd; i++)
        if (sh[i] < 1) {
            PyErr_Format(nbp_ShapeError, "%s: shape entries must be >= 1, got %lld in dim %d", what, (long long)sh[i], i);
            return -1;
        }
    return 0;
}

int nbn_kind_arg(PyObject *o, int *kind) {
    *kind = -1;
    if (!o || o == Py_None) return 0;
    const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8AndSize(o, NULL) : NULL;
    if (s && !strcmp(s, "numpy")) *kind = SRC_NUMPY;
    else if (s && !strcmp(s, "tensor")) *kind = SRC_TENSOR;
    else if (s && !strcmp(s, "torch")) *kind = SRC_TORCH;
    else {
        if (!PyErr_Occurred())
            PyErr_Format(nbp_ArgumentError, "result=%R: expected None, \"numpy\", \"tensor\" or \"torch\"", o);
        return -1;
    }
    return 0;
}

int nbp_nn_init(PyObject *mod) {
    if (nbn_mlp_init(mod) < 0 || nbn_optim_init(mod) < 0 || nbn_tape_init(mod) < 0 ||
        nbn_image_init(mod) < 0 || nbn_unet_init(mod) < 0 || nbn_graph_init(mod) < 0)
        return -1;
    return 0;
}

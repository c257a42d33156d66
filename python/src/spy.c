/* SlangPy spelling, the C side (python/nabla/_spy_*.py is the rest): the call hook that lets the
 * Python layer rewrite a call before binding (a Tensor for a struct parameter -> its fields as
 * strided views, dicts with a `_type` key, `_result=Tensor`), struct-type reflection for
 * `module.MyStruct` as a dtype, and zero-copy views for Tensor indexing (t[i], t[:, 1:3]) and
 * broadcast_to. */
#include "nbpy.h"

#include <string.h>

PyObject *nbp_spy_hook = NULL;

static int is_struct_value(PyObject *o) {
    if (PyDict_Check(o)) return 1;
    PyObject *nm = PyType_GetName(Py_TYPE(o));
    const char *tn = nm ? PyUnicode_AsUTF8AndSize(nm, NULL) : NULL;
    int r = tn && !strcmp(tn, "SimpleNamespace");
    Py_XDECREF(nm);
    PyErr_Clear();
    return r;
}

static int typed_dict(PyObject *o) { return PyDict_Check(o) && PyDict_GetItemString(o, "_type") != NULL; }

/* 1 when the Python layer must see the call first: a struct result (made a struct tensor), a struct
 * parameter given something else than a dict (a Tensor / array in the flat layout, a numpy
 * structured array), a dict naming its `_type`, or `_result=` a class. */
int nbp_spy_wants(FunctionObject *fn, PyObject *args, PyObject *kw) {
    if (fn->ret_struct) return 1;
    Py_ssize_t n = PyTuple_Size(args);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GetItem(args, i);
        if (typed_dict(a)) return 1;
        if (fn->has_struct && !is_struct_value(a)) return 1;
    }
    if (kw) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(kw, &pos, &k, &v)) {
            const char *ks = PyUnicode_AsUTF8AndSize(k, NULL);
            if (!ks) return -1;
            if (ks[0] == '_') {
                if (!strcmp(ks, "_result") && PyType_Check(v)) return 1;
                continue;
            }
            if (typed_dict(v)) return 1;
            if (fn->has_struct && !is_struct_value(v)) return 1;
        }
    }
    return 0;
}

static PyObject *py_set_hook(PyObject *self, PyObject *f) {
    Py_XDECREF(nbp_spy_hook);
    nbp_spy_hook = f == Py_None ? NULL : f;
    Py_XINCREF(nbp_spy_hook);
    Py_RETURN_NONE;
}

static PyObject *leaf_tuple(const nb_leaf_info *li) {
    PyObject *shape = PyTuple_New(li->value_rank > 0 ? li->value_rank : 0);
    if (!shape) return NULL;
    for (int d = 0; d < li->value_rank; d++) PyTuple_SetItem(shape, d, PyLong_FromLongLong(li->value_shape[d]));
    return Py_BuildValue("(isNsiii)", li->param, li->path ? li->path : "", shape, nb_dtype_name(li->dtype),
                         li->is_tensor, li->tensor_rank, (int)li->dir);
}

/* type_leaves(cmodule, name) -> [(param, path, value_shape, dtype, is_tensor, tensor_rank, dir)] */
static PyObject *py_type_leaves(PyObject *self, PyObject *args) {
    PyObject *mo;
    const char *name;
    if (!PyArg_ParseTuple(args, "O!s", (PyTypeObject *)nbp_ModuleType, &mo, &name)) return NULL;
    nb_module *m = ((ModuleObject *)mo)->m;
    int n = 0;
    nb_status st = nb_module_type_leaves(m, name, NULL, 0, &n);
    if (st) return nbp_raise(st);
    nb_leaf_info *li = PyMem_Calloc(n ? (size_t)n : 1, sizeof *li);
    if (!li) return PyErr_NoMemory();
    st = nb_module_type_leaves(m, name, li, n, &n);
    PyObject *out = st ? nbp_raise(st) : PyList_New(n);
    for (int i = 0; out && i < n; i++) {
        PyObject *t = leaf_tuple(&li[i]);
        if (!t) Py_CLEAR(out);
        else PyList_SetItem(out, i, t);
    }
    PyMem_Free(li);
    return out;
}

/* func_leaves(fn, overload) -> [(param, path, value_shape, dtype, is_tensor, tensor_rank, dir)],
 * or None past the last overload. */
static PyObject *py_func_leaves(PyObject *self, PyObject *args) {
    PyObject *fo;
    int ov = 0;
    if (!PyArg_ParseTuple(args, "O!|i", (PyTypeObject *)nbp_FunctionType, &fo, &ov)) return NULL;
    nb_func *f = ((FunctionObject *)fo)->f;
    if (ov < 0 || ov >= nb_func_overload_count(f)) Py_RETURN_NONE;
    int n = nb_func_leaf_count(f, ov);
    PyObject *out = PyList_New(n);
    for (int i = 0; out && i < n; i++) {
        nb_leaf_info li;
        nb_status st = nb_func_leaf(f, ov, i, &li);
        PyObject *t = st ? nbp_raise(st) : leaf_tuple(&li);
        if (!t) Py_CLEAR(out);
        else PyList_SetItem(out, i, t);
    }
    return out;
}

/* func_signature(fn, overload) -> str or None */
static PyObject *py_func_signature(PyObject *self, PyObject *args) {
    PyObject *fo;
    int ov = 0;
    if (!PyArg_ParseTuple(args, "O!|i", (PyTypeObject *)nbp_FunctionType, &fo, &ov)) return NULL;
    const char *s = nb_func_signature(((FunctionObject *)fo)->f, ov);
    if (!s) Py_RETURN_NONE;
    return PyUnicode_FromString(s);
}

/* ---- views ---------------------------------------------------------------------------------- */

static PyObject *wrap_view(PyObject *base, nb_status st, nb_tensor *v) {
    if (st) return nbp_raise(st);
    TensorObject *b = (TensorObject *)base;
    return nbp_tensor_new(v, b->owner); /* views share the allocation; owner keeps wrapped memory */
}

static int shape_arg(PyObject *o, int *nd, int64_t *sh) {
    Py_ssize_t n = PySequence_Size(o);
    if (n < 0) return -1;
    if (n > NB_MAX_DIMS) {
        PyErr_Format(nbp_ShapeError, "shape has %zd dims (at most %d)", n, NB_MAX_DIMS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PySequence_GetItem(o, i);
        sh[i] = it ? PyLong_AsLongLong(it) : -1;
        Py_XDECREF(it);
        if (PyErr_Occurred()) return -1;
    }
    *nd = (int)n;
    return 0;
}

/* tensor_slice(t, dim, start, stop, step) */
static PyObject *py_slice(PyObject *self, PyObject *args) {
    PyObject *t;
    int dim;
    long long a, b, s;
    if (!PyArg_ParseTuple(args, "O!iLLL", (PyTypeObject *)nbp_TensorType, &t, &dim, &a, &b, &s)) return NULL;
    nb_tensor *v = NULL;
    nb_status st = nb_tensor_slice(((TensorObject *)t)->t, dim, a, b, s, &v);
    return wrap_view(t, st, v);
}

/* tensor_select(t, dim, index) */
static PyObject *py_select(PyObject *self, PyObject *args) {
    PyObject *t;
    int dim;
    long long i;
    if (!PyArg_ParseTuple(args, "O!iL", (PyTypeObject *)nbp_TensorType, &t, &dim, &i)) return NULL;
    nb_tensor *v = NULL;
    nb_status st = nb_tensor_select(((TensorObject *)t)->t, dim, i, &v);
    return wrap_view(t, st, v);
}

/* tensor_broadcast_to(t, shape) / tensor_reshape(t, shape) */
static PyObject *py_broadcast(PyObject *self, PyObject *args) {
    PyObject *t, *so;
    int nd;
    int64_t sh[NB_MAX_DIMS];
    if (!PyArg_ParseTuple(args, "O!O", (PyTypeObject *)nbp_TensorType, &t, &so) || shape_arg(so, &nd, sh) < 0) return NULL;
    nb_tensor *v = NULL;
    nb_status st = nb_tensor_broadcast_to(((TensorObject *)t)->t, nd, sh, &v);
    return wrap_view(t, st, v);
}

static PyObject *py_reshape(PyObject *self, PyObject *args) {
    PyObject *t, *so;
    int nd;
    int64_t sh[NB_MAX_DIMS];
    if (!PyArg_ParseTuple(args, "O!O", (PyTypeObject *)nbp_TensorType, &t, &so) || shape_arg(so, &nd, sh) < 0) return NULL;
    nb_tensor *v = NULL;
    nb_status st = nb_tensor_reshape(((TensorObject *)t)->t, nd, sh, &v);
    return wrap_view(t, st, v);
}

/* tensor_view(t, dtype, shape, strides (bytes) or None, byte_offset) -> any strided view of t's
 * memory (nb_tensor_view: bounds and alignment checked against the buffer) */
static PyObject *py_view(PyObject *self, PyObject *args) {
    PyObject *t, *dto, *so, *sto;
    long long off;
    int nd, nst = 0, ok = 1;
    int64_t sh[NB_MAX_DIMS], st[NB_MAX_DIMS];
    if (!PyArg_ParseTuple(args, "O!OOOL", (PyTypeObject *)nbp_TensorType, &t, &dto, &so, &sto, &off) ||
        shape_arg(so, &nd, sh) < 0 || (sto != Py_None && shape_arg(sto, &nst, st) < 0))
        return NULL;
    nb_dtype dt = nbp_dtype_arg(dto, &ok);
    if (!ok) return NULL;
    if (sto != Py_None && nst != nd)
        return PyErr_Format(nbp_ShapeError, "view: %d strides for a shape of %d dims", nst, nd);
    nb_tensor *v = NULL;
    nb_status s = nb_tensor_view(((TensorObject *)t)->t, dt, nd, sh, sto == Py_None ? NULL : st, off, &v);
    return wrap_view(t, s, v);
}

static PyMethodDef spy_fns[] = {
    {"_spy_set_hook", py_set_hook, METH_O, "internal: the SlangPy-spelling call hook"},
    {"type_leaves", py_type_leaves, METH_VARARGS, "type_leaves(cmodule, struct name) -> leaves"},
    {"func_leaves", py_func_leaves, METH_VARARGS, "func_leaves(fn, overload=0) -> leaves or None"},
    {"func_signature", py_func_signature, METH_VARARGS, "func_signature(fn, overload=0) -> str or None"},
    {"tensor_slice", py_slice, METH_VARARGS, "tensor_slice(t, dim, start, stop, step) -> view"},
    {"tensor_select", py_select, METH_VARARGS, "tensor_select(t, dim, index) -> view"},
    {"tensor_broadcast_to", py_broadcast, METH_VARARGS, "tensor_broadcast_to(t, shape) -> view"},
    {"tensor_view", py_view, METH_VARARGS, "tensor_view(t, dtype, shape, byte strides or None, byte offset) -> view"},
    {"tensor_reshape", py_reshape, METH_VARARGS, "tensor_reshape(t, shape) -> view (NB_ERR_LAYOUT if impossible)"},
    {NULL},
};

int nbp_spy_init(PyObject *mod) { return PyModule_AddFunctions(mod, spy_fns); }

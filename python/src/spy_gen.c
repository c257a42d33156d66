/* SlangPy's generators as call arguments (nabla/_spy_generators.py; C: module.h nb_generator).
 *
 * The Python classes derive from one base registered with _set_generator_type; func.c's bind()
 * asks nbp_bind_generator first, which turns an instance into an nb_generator through its
 * _nb_spec() tuple: (kind, dims, shape, offset, stride, seed, hash_seed, warmup, min, max). */
#include "nbpy.h"

#include <string.h>

static PyObject *g_gen_type; /* the generators' Python base class, or NULL before registration */

static PyObject *py_set_generator_type(PyObject *self, PyObject *cls) {
    (void)self;
    if (!PyType_Check(cls)) return PyErr_Format(PyExc_TypeError, "_set_generator_type expects a class");
    Py_XDECREF(g_gen_type);
    Py_INCREF(cls);
    g_gen_type = cls;
    Py_RETURN_NONE;
}

static int int_seq(PyObject *o, int64_t *out, int max, const char *what) {
    if (o == Py_None) return 0;
    Py_ssize_t n = PySequence_Size(o);
    if (n < 0) return -1;
    if (n > max) {
        PyErr_Format(nbp_ArgumentError, "%s has %zd entries (at most %d)", what, n, max);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PySequence_GetItem(o, i);
        if (!it) return -1;
        long long v = PyLong_AsLongLong(it);
        Py_DECREF(it);
        if (v == -1 && PyErr_Occurred()) return -1;
        out[i] = v;
    }
    return (int)n;
}

/* The nb_generator of a Python generator object (from its _nb_spec()). */
int nbp_generator_spec(PyObject *o, nb_generator *g) {
    PyObject *spec = PyObject_CallMethod(o, "_nb_spec", NULL);
    if (!spec) return -1;
    int kind = 0, dims = -1, hash_seed = 1, warmup = 0;
    unsigned long long seed = 0;
    double mn = 0, mx = 1;
    PyObject *shape, *offset, *stride;
    if (!PyArg_ParseTuple(spec, "iiOOOKiidd", &kind, &dims, &shape, &offset, &stride, &seed, &hash_seed, &warmup,
                          &mn, &mx)) {
        Py_DECREF(spec);
        return -1;
    }
    nb_generator_init(g, (nb_generator_kind)kind);
    g->dims = dims;
    int r = int_seq(shape, g->shape, 8, "grid shape");
    if (r >= 0) r = int_seq(offset, g->offset, 8, "grid offset");
    if (r >= 0) r = int_seq(stride, g->stride, 8, "grid stride");
    Py_DECREF(spec);
    if (r < 0) return -1;
    g->seed = (uint32_t)seed;
    g->hash_seed = hash_seed;
    g->warmup = warmup;
    g->min = (float)mn;
    g->max = (float)mx;
    return 0;
}

int nbp_is_generator(PyObject *o) {
    return g_gen_type && PyObject_TypeCheck(o, (PyTypeObject *)g_gen_type);
}

int nbp_bind_generator(nb_call *c, int index, const char *name, PyObject *o) {
    if (!nbp_is_generator(o)) return 0;
    nb_generator g;
    if (nbp_generator_spec(o, &g) < 0) return -1;
    nb_status st = name ? nb_call_arg_generator_named(c, name, &g) : nb_call_arg_generator(c, index, &g);
    if (st) {
        nbp_raise(st);
        return -1;
    }
    return 1;
}

static PyObject *py_wang_hash(PyObject *self, PyObject *arg) {
    (void)self;
    unsigned long long v = PyLong_AsUnsignedLongLongMask(arg);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    return PyLong_FromUnsignedLong(nb_wang_hash((uint32_t)v));
}

static PyMethodDef gen_methods[] = {
    {"_set_generator_type", py_set_generator_type, METH_O, "internal: the generators' base class"},
    {"wang_hash", py_wang_hash, METH_O, "wang_hash(x) -> SlangPy's 32-bit wang hash of x"},
    {NULL},
};

int nbp_spy_gen_init(PyObject *mod) { return PyModule_AddFunctions(mod, gen_methods); }

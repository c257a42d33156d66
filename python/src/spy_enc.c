/* SlangPy's command encoders (nabla/_spy_encoder.py) over nb_cmdlist (include/nabla/cmdlist.h).
 *
 * A CommandEncoder holds its nb_cmdlist in a capsule (`_list`). A call with `_append_to=encoder`
 * (f.append_to(encoder, ...) is that call) is bound and recorded instead of run (func.c asks
 * nbp_cmdlist_of); the encoder keeps the call's Python arguments and results alive (`_hold`)
 * because the recorded parameter blocks point at their memory. */
#include "nbpy.h"

#include <string.h>

static const char *CAP = "nabla.cmdlist";

/* The capsule's context is a list of the Python objects the recorded calls use (functions, so
 * their modules; arguments, so their memory): released only after the list is freed. */
static void cap_free(PyObject *cap) {
    nb_cmdlist *l = PyCapsule_GetPointer(cap, CAP);
    PyObject *held = PyCapsule_GetContext(cap);
    if (l) {
        Py_BEGIN_ALLOW_THREADS
        nb_cmdlist_free(l);
        Py_END_ALLOW_THREADS
    }
    Py_XDECREF(held);
}

static nb_cmdlist *from_cap(PyObject *cap) {
    nb_cmdlist *l = PyCapsule_GetPointer(cap, CAP);
    if (!l && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "not a command list");
    return l;
}

nb_cmdlist *nbp_cmdlist_of(PyObject *enc) {
    PyObject *fin = PyObject_GetAttrString(enc, "_finished");
    if (!fin) PyErr_Clear();
    int finished = fin && PyObject_IsTrue(fin) == 1;
    Py_XDECREF(fin);
    if (finished) {
        PyErr_SetString(nbp_ArgumentError, "append_to: this command encoder was finished; create a new one");
        return NULL;
    }
    PyObject *cap = PyObject_GetAttrString(enc, "_list");
    if (!cap) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "_append_to= expects a command encoder (device.create_command_encoder()), got %R",
                     enc);
        return NULL;
    }
    nb_cmdlist *l = from_cap(cap);
    Py_DECREF(cap);
    return l;
}

/* _cmdlist_new(device) -> capsule */
static PyObject *py_new(PyObject *self, PyObject *dev) {
    (void)self;
    if (!PyObject_TypeCheck(dev, (PyTypeObject *)nbp_DeviceType))
        return PyErr_Format(PyExc_TypeError, "create_command_encoder: expected a nabla.Device");
    nb_cmdlist *l = NULL;
    nb_status st = nb_cmdlist_create(((DeviceObject *)dev)->dev, &l);
    if (st) return nbp_raise(st);
    PyObject *held = PyList_New(0);
    PyObject *cap = held ? PyCapsule_New(l, CAP, cap_free) : NULL;
    if (!cap) {
        Py_XDECREF(held);
        nb_cmdlist_free(l);
        return NULL;
    }
    if (PyCapsule_SetContext(cap, held) < 0) {
        Py_DECREF(held);
        Py_DECREF(cap);
        return NULL;
    }
    return cap;
}

/* _cmdlist_hold(capsule, obj): obj lives as long as the list */
static PyObject *py_hold(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap, *obj;
    if (!PyArg_ParseTuple(args, "OO", &cap, &obj)) return NULL;
    if (!from_cap(cap)) return NULL;
    PyObject *held = PyCapsule_GetContext(cap);
    if (!held || PyList_Append(held, obj) < 0) return NULL;
    Py_RETURN_NONE;
}

/* _cmdlist_submit(capsule, torch_index=-1): runs the list. torch_index >= 0 (torch CUDA tensors
 * were bound, on that cuda device): the calls first wait for what torch has queued on its current
 * stream there now, and torch's current stream waits for them, as for a call that runs at once. */
static PyObject *py_submit(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    int tix = -1;
    if (!PyArg_ParseTuple(args, "O|i", &cap, &tix)) return NULL;
    nb_cmdlist *l = from_cap(cap);
    if (!l) return NULL;
    nb_device *dev = nb_cmdlist_device(l);
    void *ts = NULL;
    int order = tix >= 0 && nb_device_get_kind(dev) == NB_DEVICE_CUDA;
    if (order && tix != nb_device_get_info(dev)->index)
        return PyErr_Format(nbp_DeviceError, "submit: the command buffer runs on %s but its torch tensors are on cuda:%d",
                            nb_device_name(dev), tix);
    if (order && nbp_torch_current_stream(tix, &ts) < 0) return NULL;
    nb_status st = order ? nb_stream_wait_native(nb_device_stream(dev), ts) : NB_OK;
    if (st == NB_OK) {
        Py_BEGIN_ALLOW_THREADS
        st = nb_cmdlist_submit(l);
        Py_END_ALLOW_THREADS
    }
    if (st == NB_OK && order) st = nb_native_wait_stream(ts, nb_device_stream(dev));
    if (st) return nbp_raise(st);
    Py_RETURN_NONE;
}

static PyObject *py_count(PyObject *self, PyObject *cap) {
    (void)self;
    nb_cmdlist *l = from_cap(cap);
    return l ? PyLong_FromLong(nb_cmdlist_count(l)) : NULL;
}

static PyObject *py_uses_graph(PyObject *self, PyObject *cap) {
    (void)self;
    nb_cmdlist *l = from_cap(cap);
    return l ? PyBool_FromLong(nb_cmdlist_uses_graph(l)) : NULL;
}

static PyMethodDef enc_methods[] = {
    {"_cmdlist_new", py_new, METH_O, "internal: a command list for a device"},
    {"_cmdlist_submit", py_submit, METH_VARARGS, "internal: _cmdlist_submit(list, torch_index=-1) runs a command list"},
    {"_cmdlist_hold", py_hold, METH_VARARGS, "internal: keeps an object alive as long as the list"},
    {"_cmdlist_count", py_count, METH_O, "internal: recorded calls"},
    {"_cmdlist_uses_graph", py_uses_graph, METH_O, "internal: 1 once replayed as a CUDA graph"},
    {NULL},
};

int nbp_spy_enc_init(PyObject *mod) { return PyModule_AddFunctions(mod, enc_methods); }

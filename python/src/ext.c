/* nabla._nabla: module init, exception classes, devices and modules. See nbpy.h. */
#include "nbpy.h"

#include <string.h>

#include "nabla/env.h"

PyObject *nbp_TensorType, *nbp_DeviceType, *nbp_ModuleType, *nbp_FunctionType;
PyObject *nbp_Error, *nbp_CompileError, *nbp_ShapeError, *nbp_DtypeError, *nbp_LayoutError,
    *nbp_DeviceError, *nbp_NotFoundError, *nbp_ArgumentError, *nbp_UnsupportedError,
    *nbp_MemoryError, *nbp_IOError, *nbp_InternalError;
PyObject *nbp_autograd_hook;

static PyObject *g_devices;        /* dict: name -> DeviceObject (devices stay open) */
static PyObject *g_default_device; /* DeviceObject or NULL */

/* ---- errors -------------------------------------------------------------------------------- */

PyObject *nbp_exc_for(nb_status st) {
    switch (st) {
    case NB_ERR_INVALID_ARG: return nbp_ArgumentError;
    case NB_ERR_OUT_OF_MEMORY: return nbp_MemoryError;
    case NB_ERR_SHAPE: return nbp_ShapeError;
    case NB_ERR_DTYPE: return nbp_DtypeError;
    case NB_ERR_LAYOUT: return nbp_LayoutError;
    case NB_ERR_NO_DEVICE:
    case NB_ERR_DEVICE: return nbp_DeviceError;
    case NB_ERR_COMPILE: return nbp_CompileError;
    case NB_ERR_IO: return nbp_IOError;
    case NB_ERR_NOT_FOUND: return nbp_NotFoundError;
    case NB_ERR_UNSUPPORTED: return nbp_UnsupportedError;
    case NB_ERR_INTERNAL: return nbp_InternalError;
    default: return nbp_Error;
    }
}

PyObject *nbp_raise(nb_status st) {
    const char *msg = nb_last_error();
    PyErr_SetString(nbp_exc_for(st), msg && *msg ? msg : nb_status_name(st));
    return NULL;
}

/* ---- devices ------------------------------------------------------------------------------- */

static void device_dealloc(PyObject *self) {
    /* Devices are kept open for the life of the process (g_devices); nothing to close here. */
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_Free(self);
    Py_DECREF(tp);
}

PyObject *nbp_device_for(nb_device *dev) {
    const char *name = nb_device_name(dev);
    PyObject *d = PyDict_GetItemString(g_devices, name);
    if (d) {
        Py_INCREF(d);
        nb_device_close(dev); /* the caller's reference: the cached object holds one already */
        return d;
    }
    DeviceObject *o = PyObject_New(DeviceObject, (PyTypeObject *)nbp_DeviceType);
    if (!o) return NULL;
    o->dev = dev;
    if (PyDict_SetItemString(g_devices, name, (PyObject *)o) < 0) {
        Py_DECREF(o);
        return NULL;
    }
    return (PyObject *)o;
}

PyObject *nbp_device_get(const char *spec) {
    PyObject *d = PyDict_GetItemString(g_devices, spec);
    if (d) {
        Py_INCREF(d);
        return d;
    }
    nb_device *dev = NULL;
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_device_open(spec, &dev);
    Py_END_ALLOW_THREADS
    if (st) return nbp_raise(st);
    PyObject *o = nbp_device_for(dev);
    if (o && strcmp(spec, nb_device_name(dev)) != 0 &&
        PyDict_SetItemString(g_devices, spec, o) < 0) { /* "auto", "cuda" -> same object */
        Py_DECREF(o);
        return NULL;
    }
    return o;
}

PyObject *nbp_default_device(void) {
    if (!g_default_device) {
        const char *spec = nb_env_get(NB_ENV_DEVICE);
        g_default_device = nbp_device_get(spec ? spec : "auto");
    }
    return g_default_device;
}

nb_device *nbp_device_ptr(PyObject *o) {
    if (!o || o == Py_None) {
        PyObject *d = nbp_default_device();
        return d ? ((DeviceObject *)d)->dev : NULL;
    }
    if (PyObject_TypeCheck(o, (PyTypeObject *)nbp_DeviceType)) return ((DeviceObject *)o)->dev;
    if (PyUnicode_Check(o)) {
        const char *s = PyUnicode_AsUTF8AndSize(o, NULL);
        if (!s) return NULL;
        PyObject *d = nbp_device_get(s);
        if (!d) return NULL;
        nb_device *dev = ((DeviceObject *)d)->dev;
        Py_DECREF(d); /* g_devices keeps it */
        return dev;
    }
    PyErr_Format(PyExc_TypeError, "expected a nabla.Device or a device name, got %R", o);
    return NULL;
}

static PyObject *py_device(PyObject *self, PyObject *arg) {
    if (arg == Py_None) {
        PyObject *d = nbp_default_device();
        Py_XINCREF(d);
        return d;
    }
    if (!PyUnicode_Check(arg)) return PyErr_Format(PyExc_TypeError, "device(spec): spec must be a str");
    const char *s = PyUnicode_AsUTF8AndSize(arg, NULL);
    return s ? nbp_device_get(s) : NULL;
}

static PyObject *py_set_default_device(PyObject *self, PyObject *arg) {
    nb_device *dev = nbp_device_ptr(arg);
    if (!dev) return NULL;
    PyObject *d = nbp_device_get(nb_device_name(dev));
    if (!d) return NULL;
    PyObject *old = g_default_device;
    g_default_device = d;
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

static PyObject *device_get_name(PyObject *self, void *c) {
    return PyUnicode_FromString(nb_device_name(((DeviceObject *)self)->dev));
}
static PyObject *device_get_kind(PyObject *self, void *c) {
    return PyUnicode_FromString(nb_device_get_kind(((DeviceObject *)self)->dev) == NB_DEVICE_CUDA ? "cuda" : "cpu");
}
static PyObject *device_get_index(PyObject *self, void *c) {
    return PyLong_FromLong(nb_device_get_info(((DeviceObject *)self)->dev)->index);
}
static PyObject *device_get_info(PyObject *self, void *c) {
    const nb_device_info *i = nb_device_get_info(((DeviceObject *)self)->dev);
    return Py_BuildValue("{s:s,s:i,s:i,s:i,s:n,s:i}", "name", i->name, "cc_major", i->cc_major,
                         "cc_minor", i->cc_minor, "multiprocessors", i->multiprocessors,
                         "total_memory", (Py_ssize_t)i->total_memory, "driver_version",
                         i->driver_version);
}
static PyObject *device_repr(PyObject *self) {
    return PyUnicode_FromFormat("nabla.device('%s')", nb_device_name(((DeviceObject *)self)->dev));
}
static PyObject *device_synchronize(PyObject *self, PyObject *unused) {
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_device_synchronize(((DeviceObject *)self)->dev);
    Py_END_ALLOW_THREADS
    if (st) return nbp_raise(st);
    Py_RETURN_NONE;
}
static PyObject *device_stream_handle(PyObject *self, PyObject *unused) {
    return PyLong_FromVoidPtr(nb_stream_native(nb_device_stream(((DeviceObject *)self)->dev)));
}

static PyGetSetDef device_getset[] = {
    {"name", device_get_name, NULL, "\"cpu\" or \"cuda:N\"", NULL},
    {"kind", device_get_kind, NULL, "\"cpu\" or \"cuda\"", NULL},
    {"index", device_get_index, NULL, "N of cuda:N (0 for the cpu)", NULL},
    {"info", device_get_info, NULL, "dict: name, compute capability, SMs, memory", NULL},
    {NULL},
};
static PyMethodDef device_methods[] = {
    {"synchronize", device_synchronize, METH_NOARGS, "wait for all queued work"},
    {"stream_handle", device_stream_handle, METH_NOARGS, "nabla's CUstream as an int (0 on cpu)"},
    {NULL},
};
static PyType_Slot device_slots[] = {
    {Py_tp_dealloc, device_dealloc}, {Py_tp_repr, device_repr}, {Py_tp_str, device_get_name},
    {Py_tp_getset, device_getset},   {Py_tp_methods, device_methods},
    {Py_tp_doc, "A nabla device: nabla.device(\"auto\"|\"cpu\"|\"cuda\"|\"cuda:N\")."},
    {0, NULL},
};
static PyType_Spec device_spec = {"nabla.Device", sizeof(DeviceObject), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
                                  device_slots};

/* ---- modules ------------------------------------------------------------------------------- */

static void module_dealloc(PyObject *self) {
    ModuleObject *m = (ModuleObject *)self;
    PyTypeObject *tp = Py_TYPE(self);
    if (m->m) nb_module_free(m->m);
    Py_XDECREF(m->device);
    Py_XDECREF(m->name);
    PyObject_Free(self);
    Py_DECREF(tp);
}

/* The str items of a sequence (None: none) into out[0..cap): their UTF-8 stays valid while the
 * caller's sequence lives. Returns the count, -1 with an exception set. */
static int str_items(PyObject *obj, const char **out, int cap, const char *what) {
    if (!obj || obj == Py_None) return 0;
    char msg[96];
    snprintf(msg, sizeof msg, "%s must be a sequence of str", what);
    PyObject *seq = PySequence_Fast(obj, msg);
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Size(seq);
    if (n > cap) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "too many %s (at most %d)", what, cap);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PySequence_GetItem(seq, i);
        if (!it) {
            Py_DECREF(seq);
            return -1;
        }
        /* str objects in the sequence outlive the load: the caller's sequence keeps them */
        out[i] = PyUnicode_Check(it) ? PyUnicode_AsUTF8AndSize(it, NULL) : NULL;
        Py_DECREF(it);
        if (!out[i]) {
            Py_DECREF(seq);
            if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "%s must be str", what);
            return -1;
        }
    }
    Py_DECREF(seq);
    return (int)n;
}

static int fill_opts(PyObject *incs, PyObject *defs, nb_module_options *o, const char **dirs, const char **defv,
                     int cap) {
    memset(o, 0, sizeof *o);
    int n = str_items(incs, dirs, cap, "include_dirs");
    if (n < 0) return -1;
    o->include_dirs = dirs;
    o->ninclude_dirs = n;
    n = str_items(defs, defv, cap, "defines");
    if (n < 0) return -1;
    o->defines = defv;
    o->ndefines = n;
    return 0;
}

static PyObject *load_common(PyObject *args, PyObject *kw, int from_source) {
    static char *kwl_file[] = {"path", "device", "include_dirs", "unchecked", "defines", "conformances", NULL};
    static char *kwl_src[] = {"source", "name", "device", "include_dirs", "unchecked", "defines", "conformances",
                              NULL};
    const char *a = NULL, *name = "inline.nb";
    PyObject *devo = Py_None, *incs = Py_None, *defs = Py_None, *confs = Py_None;
    int unchecked = 0;
    int ok = from_source ? PyArg_ParseTupleAndKeywords(args, kw, "s|sOO$pOO", kwl_src, &a, &name, &devo, &incs,
                                                       &unchecked, &defs, &confs)
                         : PyArg_ParseTupleAndKeywords(args, kw, "s|OO$pOO", kwl_file, &a, &devo, &incs, &unchecked,
                                                       &defs, &confs);
    if (!ok) return NULL;
    nb_device *dev = nbp_device_ptr(devo);
    if (!dev) return NULL;
    const char *dirs[256], *defv[256], *confv[256];
    nb_module_options opts;
    if (fill_opts(incs, defs, &opts, dirs, defv, 256) < 0) return NULL;
    int nconf = str_items(confs, confv, 256, "conformances"); /* "TYPE:INTERFACE=ID" */
    if (nconf < 0) return NULL;
    opts.conformances = confv;
    opts.nconformances = nconf;
    opts.unchecked = unchecked;
    nb_module *m = NULL;
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = from_source ? nb_module_load_source(dev, name, a, &opts, &m)
                     : nb_module_load(dev, a, &opts, &m);
    Py_END_ALLOW_THREADS
    if (st) return nbp_raise(st);
    ModuleObject *o = PyObject_New(ModuleObject, (PyTypeObject *)nbp_ModuleType);
    if (!o) {
        nb_module_free(m);
        return NULL;
    }
    o->m = m;
    o->device = nbp_device_get(nb_device_name(dev));
    o->name = PyUnicode_FromString(from_source ? name : a);
    if (!o->device || !o->name) {
        Py_DECREF(o);
        return NULL;
    }
    return (PyObject *)o;
}

static PyObject *py_load_module(PyObject *self, PyObject *args, PyObject *kw) {
    return load_common(args, kw, 0);
}
static PyObject *py_load_module_source(PyObject *self, PyObject *args, PyObject *kw) {
    return load_common(args, kw, 1);
}

static PyObject *module_func(PyObject *self, PyObject *arg) {
    ModuleObject *m = (ModuleObject *)self;
    const char *name = PyUnicode_Check(arg) ? PyUnicode_AsUTF8AndSize(arg, NULL) : NULL;
    if (!name) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_TypeError, "name must be a str");
    nb_func *f = NULL;
    nb_status st = nb_module_func(m->m, name, &f);
    if (st) return nbp_raise(st);
    return nbp_func_new(f, self, NBP_PRIMAL, NULL);
}

static PyObject *module_set_constant(PyObject *self, PyObject *args) {
    const char *name;
    double v;
    if (!PyArg_ParseTuple(args, "sd", &name, &v)) return NULL;
    nb_status st = nb_module_set_constant(((ModuleObject *)self)->m, name, v);
    if (st) return nbp_raise(st);
    Py_RETURN_NONE;
}

static PyObject *module_dump(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"format", "entry", "mode", NULL};
    const char *fmt = "c", *entry = NULL, *mode = "primal";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|szs", kwl, &fmt, &entry, &mode)) return NULL;
    nb_dump_format f;
    nb_diff_mode md;
    if (!strcmp(fmt, "c")) f = NB_DUMP_C;
    else if (!strcmp(fmt, "cuda")) f = NB_DUMP_CUDA;
    else if (!strcmp(fmt, "ir")) f = NB_DUMP_IR;
    else return PyErr_Format(nbp_ArgumentError, "dump: unknown format '%s' (allowed: 'c', 'cuda', 'ir')", fmt);
    if (!strcmp(mode, "primal")) md = NB_MODE_PRIMAL;
    else if (!strcmp(mode, "fwd")) md = NB_MODE_FWD;
    else if (!strcmp(mode, "bwd")) md = NB_MODE_BWD;
    else return PyErr_Format(nbp_ArgumentError, "dump: unknown mode '%s' (allowed: 'primal', 'fwd', 'bwd')", mode);
    char *text = NULL;
    nb_status st = nb_module_dump(((ModuleObject *)self)->m, f, entry, md, &text);
    if (st) return nbp_raise(st);
    PyObject *r = PyUnicode_FromString(text);
    nb_module_free_text(text);
    return r;
}

static PyObject *module_get_device(PyObject *self, void *c) {
    PyObject *d = ((ModuleObject *)self)->device;
    Py_INCREF(d);
    return d;
}
static PyObject *module_get_name(PyObject *self, void *c) {
    PyObject *d = ((ModuleObject *)self)->name;
    Py_INCREF(d);
    return d;
}

static PyMethodDef module_methods[] = {
    {"func", module_func, METH_O, "func(name) -> Function (NotFoundError lists the functions)"},
    {"set_constant", module_set_constant, METH_VARARGS, "set_constant(name, value)"},
    {"functions", nbp_module_functions, METH_NOARGS, "functions() -> [name, ...] the module's callable functions"},
    {"check", nbp_module_check, METH_NOARGS, "check(): waits for the device, raises a deferred launch's bounds error"},
    {"dump", (PyCFunction)(void (*)(void))module_dump, METH_VARARGS | METH_KEYWORDS,
     "dump(format='c'|'cuda'|'ir', entry=None, mode='primal'|'fwd'|'bwd') -> generated code"},
    {NULL},
};
static PyGetSetDef module_getset[] = {
    {"device", module_get_device, NULL, "the device calls run on", NULL},
    {"name", module_get_name, NULL, "file or source name", NULL},
    {NULL},
};
static PyType_Slot module_slots[] = {
    {Py_tp_dealloc, module_dealloc}, {Py_tp_methods, module_methods},
    {Py_tp_getset, module_getset},   {Py_tp_doc, "A loaded .nb module (C level)."},
    {0, NULL},
};
static PyType_Spec module_spec = {"nabla._nabla.CModule", sizeof(ModuleObject), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, module_slots};

/* ---- misc --------------------------------------------------------------------------------- */

static PyObject *py_set_autograd_hook(PyObject *self, PyObject *arg) {
    Py_XDECREF(nbp_autograd_hook);
    nbp_autograd_hook = arg == Py_None ? NULL : arg;
    Py_XINCREF(nbp_autograd_hook);
    Py_RETURN_NONE;
}

static PyObject *py_cuda_device_count(PyObject *self, PyObject *unused) {
    return PyLong_FromLong(nb_cuda_device_count());
}
static PyObject *py_cuda_unavailable_reason(PyObject *self, PyObject *unused) {
    const char *r = nb_cuda_unavailable_reason();
    if (!r) Py_RETURN_NONE;
    return PyUnicode_FromString(r);
}

/* kernel_cache_clear() -> number of files removed from the on-disk kernel cache (nabla cache clear;
 * slangtorch.clearPersistentShaderCache). */
static PyObject *py_kernel_cache_clear(PyObject *self, PyObject *unused) {
    size_t removed = 0;
    nb_status st = nb_kernel_cache_clear(&removed);
    if (st) return nbp_raise(st);
    return PyLong_FromSize_t(removed);
}

static PyMethodDef ext_methods[] = {
    {"device", py_device, METH_O, "device(spec or None) -> Device"},
    {"set_default_device", py_set_default_device, METH_O, "set_default_device(device)"},
    {"load_module", (PyCFunction)(void (*)(void))py_load_module, METH_VARARGS | METH_KEYWORDS,
     "load_module(path, device=None, include_dirs=None, *, unchecked=False, defines=None, conformances=None) -> CModule"},
    {"load_module_source", (PyCFunction)(void (*)(void))py_load_module_source,
     METH_VARARGS | METH_KEYWORDS, "load_module_source(source, name='inline.nb', device=None, include_dirs=None, *, unchecked=False, defines=None, conformances=None)"},
    {"_set_autograd_hook", py_set_autograd_hook, METH_O, "internal"},
    {"cuda_device_count", py_cuda_device_count, METH_NOARGS, "number of usable CUDA devices"},
    {"kernel_cache_clear", py_kernel_cache_clear, METH_NOARGS, "deletes the on-disk kernel cache; returns the files removed"},
    {"cuda_unavailable_reason", py_cuda_unavailable_reason, METH_NOARGS, "why CUDA is unusable, or None"},
    {NULL},
};

static struct PyModuleDef ext_def = {PyModuleDef_HEAD_INIT, "nabla._nabla",
                                     "nabla's C extension (use the nabla package)", -1, ext_methods,
                                     NULL, NULL, NULL, NULL};

/* nabla.NAME deriving from base1 and the optional base2 / base3. */
static PyObject *new_exc(PyObject *mod, const char *name, PyObject *base1, PyObject *base2,
                         PyObject *base3, const char *doc) {
    char full[128];
    snprintf(full, sizeof full, "nabla.%s", name);
    PyObject *bases = base3 ? PyTuple_Pack(3, base1, base2, base3)
                      : base2 ? PyTuple_Pack(2, base1, base2) : PyTuple_Pack(1, base1);
    if (!bases) return NULL;
    PyObject *e = PyErr_NewExceptionWithDoc(full, doc, bases, NULL);
    Py_DECREF(bases);
    if (!e) return NULL;
    Py_INCREF(e);
    if (PyModule_AddObject(mod, name, e) < 0) {
        Py_DECREF(e);
        return NULL;
    }
    return e;
}

PyMODINIT_FUNC PyInit__nabla(void) {
    PyObject *mod = PyModule_Create(&ext_def);
    if (!mod) return NULL;
    g_devices = PyDict_New();
    if (!g_devices) goto fail;
#define EXC(var, name, b1, b2, b3, doc)                                                         \
    if (!(var = new_exc(mod, name, b1, b2, b3, doc))) goto fail
    EXC(nbp_Error, "NablaError", PyExc_Exception, NULL, NULL, "Base of nabla's errors.");
    /* CompileError is also a RuntimeError: what torch.utils.cpp_extension and slang-torch raise for a
     * failed build, so `except RuntimeError` code moves over (slang-torch's tests/test.py). The
     * errors about an array argument (its shape, dtype, layout, device) are RuntimeErrors too, as
     * torch's and slang-torch's are (slang-torch's make_tensor_view: "tensor is not of the expected
     * type", "not on CUDA device", "broadcasted dimensions"), besides the Python class they had. */
    EXC(nbp_CompileError, "CompileError", nbp_Error, PyExc_RuntimeError, NULL, "A .nb file or kernel failed to compile; the message has the diagnostics.");
    EXC(nbp_ShapeError, "ShapeError", nbp_Error, PyExc_ValueError, PyExc_RuntimeError, "Shapes that do not fit together (also a ValueError and a RuntimeError).");
    EXC(nbp_DtypeError, "DtypeError", nbp_Error, PyExc_TypeError, PyExc_RuntimeError, "Dtypes that do not fit together or are not supported (also a TypeError and a RuntimeError).");
    EXC(nbp_LayoutError, "LayoutError", nbp_Error, PyExc_ValueError, PyExc_RuntimeError, "A memory layout nabla cannot use here (stride-0 outputs, …; also a ValueError and a RuntimeError).");
    EXC(nbp_DeviceError, "DeviceError", nbp_Error, PyExc_RuntimeError, NULL, "A device is missing or its driver failed, or arrays on the wrong device (also a RuntimeError).");
    EXC(nbp_NotFoundError, "NotFoundError", nbp_Error, PyExc_LookupError, NULL, "A named function, constant or file does not exist.");
    EXC(nbp_ArgumentError, "ArgumentError", nbp_Error, PyExc_ValueError, NULL, "A bad argument.");
    EXC(nbp_UnsupportedError, "UnsupportedError", nbp_Error, NULL, NULL, "A valid request this build or device cannot do (yet).");
    EXC(nbp_MemoryError, "OutOfMemoryError", nbp_Error, PyExc_MemoryError, NULL, "Host or device memory ran out.");
    EXC(nbp_IOError, "FileError", nbp_Error, NULL, NULL, "File I/O failed.");
    EXC(nbp_InternalError, "InternalError", nbp_Error, NULL, NULL, "A bug in nabla; please report it.");
#undef EXC
    if (!(nbp_DeviceType = PyType_FromSpec(&device_spec))) goto fail;
    Py_INCREF(nbp_DeviceType);
    if (PyModule_AddObject(mod, "Device", nbp_DeviceType) < 0) goto fail;
    if (!(nbp_ModuleType = PyType_FromSpec(&module_spec))) goto fail;
    Py_INCREF(nbp_ModuleType);
    if (PyModule_AddObject(mod, "CModule", nbp_ModuleType) < 0) goto fail;
    if (nbp_init_strings() < 0 || nbp_tensor_init_type(mod) < 0 || nbp_func_init_type(mod) < 0) goto fail;
    if (nbp_nn_init(mod) < 0) goto fail;
    if (nbp_spy_gen_init(mod) < 0 || nbp_spy_enc_init(mod) < 0) goto fail;
    if (nbp_spy_init(mod) < 0) goto fail;
    if (PyModule_AddStringConstant(mod, "version", nb_version()) < 0) goto fail;
    return mod;
fail:
    Py_DECREF(mod);
    return NULL;
}

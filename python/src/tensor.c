/* nabla.Tensor: a Python handle on an nb_tensor (any device), with the buffer protocol on the CPU
 * (numpy.asarray(t) is zero-copy) and DLPack both ways (torch.from_dlpack(t), Tensor.from_dlpack). */
#include "nbpy.h"

#include <string.h>

#include "dlpack.h"

/* ---- dtypes -------------------------------------------------------------------------------- */

static const char *buffer_format(nb_dtype d) {
    switch (d) {
    case NB_F32: return "f";
    case NB_F64: return "d";
    case NB_F16: return "e";
    case NB_I32: return "i";
    case NB_U32: return "I";
    case NB_I64: return "q";
    case NB_U8: return "B";
    case NB_BOOL: return "?";
    default: return NULL; /* bf16: the buffer protocol has no code for it */
    }
}

nb_dtype nbp_dtype_arg(PyObject *o, int *ok) {
    *ok = 1;
    if (!o || o == Py_None) return NB_F32;
    PyObject *s = NULL;
    if (PyUnicode_Check(o)) {
        s = o;
        Py_INCREF(s);
    } else {
        /* numpy dtypes and scalar types, torch dtypes: go by their str() ("float32", "torch.float32",
         * "<class 'numpy.float32'>" -> use __name__ there) */
        PyObject *nm = PyObject_HasAttrString(o, "__name__") ? PyObject_GetAttrString(o, "__name__") : NULL;
        s = nm ? nm : PyObject_Str(o);
        if (!s) {
            *ok = 0;
            return NB_F32;
        }
    }
    const char *n = PyUnicode_AsUTF8AndSize(s, NULL);
    if (!n) {
        Py_DECREF(s);
        *ok = 0;
        return NB_F32;
    }
    if (!strncmp(n, "torch.", 6)) n += 6;
    static const struct { const char *name; nb_dtype d; } names[] = {
        {"float32", NB_F32}, {"float", NB_F32},   {"float64", NB_F64}, {"double", NB_F64},
        {"float16", NB_F16}, {"half", NB_F16},    {"bfloat16", NB_BF16}, {"int32", NB_I32},
        {"int", NB_I32},     {"uint32", NB_U32},  {"int64", NB_I64},   {"uint8", NB_U8},
        {"bool", NB_BOOL},
    };
    int d = nb_dtype_from_name(n);
    for (size_t i = 0; d < 0 && i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(n, names[i].name)) d = names[i].d;
    if (d < 0) {
        PyErr_Format(nbp_DtypeError, "unknown dtype %R (nabla has f32 f64 f16 bf16 i32 u32 i64 u8 bool)", o);
        *ok = 0;
        d = NB_F32;
    }
    Py_DECREF(s);
    return (nb_dtype)d;
}

/* A new handle on the same memory and layout. */
nb_status nbp_view(const nb_tensor *t, nb_tensor **out) {
    if (nb_tensor_ndim(t) > 0) return nb_tensor_slice(t, 0, 0, nb_tensor_shape(t)[0], 1, out);
    return nb_tensor_reshape(t, 0, NULL, out);
}

/* ---- the type ------------------------------------------------------------------------------ */

int nbp_is_tensor(PyObject *o) { return PyObject_TypeCheck(o, (PyTypeObject *)nbp_TensorType); }

PyObject *nbp_tensor_new(nb_tensor *t, PyObject *owner) {
    TensorObject *o = PyObject_New(TensorObject, (PyTypeObject *)nbp_TensorType);
    if (!o) {
        nb_tensor_free(t);
        return NULL;
    }
    o->t = t;
    o->owner = owner;
    Py_XINCREF(owner);
    o->grad = NULL;
    o->grad_in = NULL;
    o->stype = NULL;
    o->nexports = 0;
    o->device = nbp_device_get(nb_device_name(nb_tensor_device(t)));
    if (!o->device) {
        Py_DECREF(o);
        return NULL;
    }
    return (PyObject *)o;
}

static void tensor_dealloc(PyObject *self) {
    TensorObject *o = (TensorObject *)self;
    PyTypeObject *tp = Py_TYPE(self);
    if (o->t) nb_tensor_free(o->t);
    Py_XDECREF(o->owner);
    Py_XDECREF(o->grad);
    Py_XDECREF(o->grad_in);
    Py_XDECREF(o->stype);
    Py_XDECREF(o->device);
    PyObject_Free(self);
    Py_DECREF(tp);
}

static PyObject *shape_tuple(int nd, const int64_t *sh) {
    PyObject *t = PyTuple_New(nd);
    if (!t) return NULL;
    for (int i = 0; i < nd; i++) {
        PyObject *v = PyLong_FromLongLong(sh[i]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SetItem(t, i, v);
    }
    return t;
}

/* A shape from an int or a sequence of ints. */
static int parse_shape(PyObject *o, int *nd, int64_t *sh) {
    if (PyLong_Check(o)) {
        *nd = 1;
        sh[0] = PyLong_AsLongLong(o);
        return PyErr_Occurred() ? -1 : 0;
    }
    PyObject *seq = PySequence_Fast(o, "shape must be an int or a sequence of ints");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Size(seq);
    if (n > NB_MAX_DIMS) {
        Py_DECREF(seq);
        PyErr_Format(nbp_ShapeError, "shape has %zd dims (at most %d)", n, NB_MAX_DIMS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PySequence_GetItem(seq, i);
        sh[i] = it ? PyLong_AsLongLong(it) : -1;
        Py_XDECREF(it);
        if (PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    *nd = (int)n;
    return 0;
}

static PyObject *tensor_get_shape(PyObject *self, void *c) {
    nb_tensor *t = ((TensorObject *)self)->t;
    return shape_tuple(nb_tensor_ndim(t), nb_tensor_shape(t));
}
static PyObject *tensor_get_strides(PyObject *self, void *c) {
    nb_tensor *t = ((TensorObject *)self)->t;
    return shape_tuple(nb_tensor_ndim(t), nb_tensor_strides(t));
}
static PyObject *tensor_get_ndim(PyObject *self, void *c) {
    return PyLong_FromLong(nb_tensor_ndim(((TensorObject *)self)->t));
}
static PyObject *tensor_get_numel(PyObject *self, void *c) {
    return PyLong_FromLongLong(nb_tensor_numel(((TensorObject *)self)->t));
}
static PyObject *tensor_get_scalar_dtype(PyObject *self, void *c) {
    return PyUnicode_FromString(nb_dtype_name(nb_tensor_dtype(((TensorObject *)self)->t)));
}
/* dtype: the struct type of a struct tensor (SlangPy's tensor.dtype), else the scalar dtype name */
static PyObject *tensor_get_dtype(PyObject *self, void *c) {
    PyObject *st = ((TensorObject *)self)->stype;
    if (!st) return tensor_get_scalar_dtype(self, c);
    Py_INCREF(st);
    return st;
}
static PyObject *tensor_get_stype(PyObject *self, void *c) {
    PyObject *st = ((TensorObject *)self)->stype;
    if (!st) Py_RETURN_NONE;
    Py_INCREF(st);
    return st;
}
static int tensor_set_stype(PyObject *self, PyObject *v, void *c) {
    PyObject *old = ((TensorObject *)self)->stype;
    ((TensorObject *)self)->stype = v && v != Py_None ? v : NULL;
    Py_XINCREF(((TensorObject *)self)->stype);
    Py_XDECREF(old);
    return 0;
}
static PyObject *tensor_get_device(PyObject *self, void *c) {
    PyObject *d = ((TensorObject *)self)->device;
    Py_INCREF(d);
    return d;
}
static PyObject *tensor_get_grad_in(PyObject *self, void *c) {
    PyObject *g = ((TensorObject *)self)->grad_in;
    if (!g) Py_RETURN_NONE;
    Py_INCREF(g);
    return g;
}

static int tensor_set_grad_in(PyObject *self, PyObject *v, void *c) {
    if (v && v != Py_None && !nbp_is_tensor(v)) {
        PyErr_SetString(PyExc_TypeError, "Tensor.grad_in must be a nabla.Tensor or None");
        return -1;
    }
    PyObject *old = ((TensorObject *)self)->grad_in;
    ((TensorObject *)self)->grad_in = v && v != Py_None ? v : NULL;
    Py_XINCREF(((TensorObject *)self)->grad_in);
    Py_XDECREF(old);
    return 0;
}

static PyObject *tensor_get_grad(PyObject *self, void *c) {
    PyObject *g = ((TensorObject *)self)->grad;
    if (!g) Py_RETURN_NONE;
    Py_INCREF(g);
    return g;
}
static int tensor_set_grad(PyObject *self, PyObject *v, void *c) {
    if (v && v != Py_None && !nbp_is_tensor(v)) {
        PyErr_SetString(PyExc_TypeError, "Tensor.grad must be a nabla.Tensor or None");
        return -1;
    }
    if (v == Py_None) v = NULL;
    PyObject *old = ((TensorObject *)self)->grad;
    Py_XINCREF(v);
    ((TensorObject *)self)->grad = v;
    Py_XDECREF(old);
    return 0;
}
static PyObject *tensor_get_data_ptr(PyObject *self, void *c) {
    return PyLong_FromVoidPtr(nb_tensor_data(((TensorObject *)self)->t));
}

static PyObject *tensor_repr(PyObject *self) {
    char buf[256];
    nb_tensor_describe(((TensorObject *)self)->t, buf, sizeof buf);
    return PyUnicode_FromFormat("nabla.Tensor(%s)", buf);
}

/* ---- buffer protocol (CPU tensors) --------------------------------------------------------- */

static int tensor_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    TensorObject *o = (TensorObject *)self;
    nb_tensor *t = o->t;
    if (nb_device_get_kind(nb_tensor_device(t)) != NB_DEVICE_CPU) {
        PyErr_Format(PyExc_BufferError, "nabla.Tensor on %s has no host buffer: use .to_numpy()",
                     nb_device_name(nb_tensor_device(t)));
        return -1;
    }
    const char *fmt = buffer_format(nb_tensor_dtype(t));
    if (!fmt) {
        PyErr_Format(PyExc_BufferError, "nabla.Tensor of %s has no buffer format",
                     nb_dtype_name(nb_tensor_dtype(t)));
        return -1;
    }
    int nd = nb_tensor_ndim(t);
    const int64_t *sh = nb_tensor_shape(t), *st = nb_tensor_strides(t);
    for (int i = 0; i < nd; i++) {
        o->bshape[i] = (Py_ssize_t)sh[i];
        o->bstrides[i] = (Py_ssize_t)st[i];
    }
    if ((flags & PyBUF_STRIDES) != PyBUF_STRIDES && !nb_tensor_is_contiguous(t)) {
        PyErr_SetString(PyExc_BufferError, "nabla.Tensor is not contiguous");
        return -1;
    }
    view->buf = nb_tensor_data(t);
    view->obj = self;
    Py_INCREF(self);
    view->len = (Py_ssize_t)nb_tensor_nbytes(t);
    view->readonly = 0;
    view->itemsize = (Py_ssize_t)nb_dtype_size(nb_tensor_dtype(t));
    view->format = (flags & PyBUF_FORMAT) ? (char *)fmt : NULL;
    view->ndim = nd;
    view->shape = (flags & PyBUF_ND) ? o->bshape : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? o->bstrides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    o->nexports++;
    return 0;
}

static void tensor_releasebuffer(PyObject *self, Py_buffer *view) { ((TensorObject *)self)->nexports--; }

/* numpy array of t: zero-copy for a CPU tensor (the array keeps a Tensor alive), else a host copy. */
PyObject *nbp_tensor_to_numpy(nb_tensor *t) {
    PyObject *np = nbp_numpy(1);
    if (!np) return NULL;
    nb_tensor *h = NULL;
    nb_status st;
    if (nb_tensor_dtype(t) == NB_BF16) { /* numpy has no bfloat16: widen to f32 */
        PyObject *cpu = nbp_device_get("cpu");
        if (!cpu) return NULL;
        size_t n = (size_t)nb_tensor_numel(t);
        uint16_t *tmp = PyMem_Malloc(n ? n * 2 : 2);
        nb_tensor *f = NULL;
        st = tmp ? nb_tensor_to_host(t, tmp, n * 2) : NB_ERR_OUT_OF_MEMORY;
        if (!st) st = nb_tensor_empty(((DeviceObject *)cpu)->dev, NB_F32, nb_tensor_ndim(t), nb_tensor_shape(t), &f);
        if (!st) nb_convert(nb_tensor_data(f), NB_F32, tmp, NB_BF16, n);
        PyMem_Free(tmp);
        Py_DECREF(cpu);
        if (st) return tmp ? nbp_raise(st) : PyErr_NoMemory();
        PyObject *w = nbp_tensor_new(f, NULL);
        if (!w) return NULL;
        PyObject *arr = PyObject_CallMethod(np, "asarray", "O", w);
        Py_DECREF(w);
        return arr;
    }
    if (nb_device_get_kind(nb_tensor_device(t)) == NB_DEVICE_CPU) {
        st = nb_tensor_contiguous(t, &h);
    } else {
        PyObject *cpu = nbp_device_get("cpu");
        if (!cpu) return NULL;
        Py_BEGIN_ALLOW_THREADS
        st = nb_tensor_to(t, ((DeviceObject *)cpu)->dev, &h);
        Py_END_ALLOW_THREADS
        Py_DECREF(cpu);
    }
    if (st) return nbp_raise(st);
    PyObject *wrap = nbp_tensor_new(h, NULL);
    if (!wrap) return NULL;
    PyObject *arr = PyObject_CallMethod(np, "asarray", "O", wrap);
    Py_DECREF(wrap);
    return arr;
}

/* ---- DLPack export ------------------------------------------------------------------------- */

typedef struct {
    DLManagedTensor m;
    nb_tensor *t;
    void *consumer_stream;
    int has_stream;
    int64_t shape[NB_MAX_DIMS], strides[NB_MAX_DIMS];
} nbp_dl_ctx;

static void dl_deleter(DLManagedTensor *m) {
    nbp_dl_ctx *c = (nbp_dl_ctx *)m->manager_ctx;
    /* The consumer may still have work reading the memory queued on its stream: nabla's stream
     * (which reuses the block next) waits for it. No Python objects are touched here. */
    if (c->has_stream) nb_stream_wait_native(nb_device_stream(nb_tensor_device(c->t)), c->consumer_stream);
    nb_tensor_free(c->t);
    free(c);
}

static void dl_capsule_destructor(PyObject *cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) { /* never consumed */
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
        if (m && m->deleter) m->deleter(m);
    } else {
        PyErr_Clear();
    }
}

static int dl_dtype(nb_dtype d, DLDataType *o) {
    o->lanes = 1;
    o->bits = (uint8_t)(nb_dtype_size(d) * 8);
    switch (d) {
    case NB_F32: case NB_F64: case NB_F16: o->code = kDLFloat; return 0;
    case NB_BF16: o->code = kDLBfloat; return 0;
    case NB_I32: case NB_I64: o->code = kDLInt; return 0;
    case NB_U32: case NB_U8: o->code = kDLUInt; return 0;
    case NB_BOOL: o->code = kDLBool; return 0;
    default: return -1;
    }
}

PyObject *nbp_dlpack_capsule(nb_tensor *t, void *consumer_stream, int has_stream, int bool_as_u8) {
    nbp_dl_ctx *c = calloc(1, sizeof *c);
    if (!c) return PyErr_NoMemory();
    nb_tensor *h = NULL;
    nb_status st = nbp_view(t, &h);
    if (st) {
        free(c);
        return nbp_raise(st);
    }
    c->t = h;
    c->consumer_stream = consumer_stream;
    c->has_stream = has_stream && nb_device_get_kind(nb_tensor_device(t)) == NB_DEVICE_CUDA;
    int nd = nb_tensor_ndim(h);
    int64_t es = (int64_t)nb_dtype_size(nb_tensor_dtype(h));
    for (int i = 0; i < nd; i++) {
        c->shape[i] = nb_tensor_shape(h)[i];
        c->strides[i] = nb_tensor_strides(h)[i] / es;
    }
    DLTensor *dl = &c->m.dl_tensor;
    dl->data = nb_tensor_data(h);
    int cuda = nb_device_get_kind(nb_tensor_device(h)) == NB_DEVICE_CUDA;
    dl->device.device_type = cuda ? kDLCUDA : kDLCPU;
    dl->device.device_id = cuda ? nb_device_get_info(nb_tensor_device(h))->index : 0;
    dl->ndim = nd;
    if (dl_dtype(bool_as_u8 && nb_tensor_dtype(h) == NB_BOOL ? NB_U8 : nb_tensor_dtype(h), &dl->dtype) < 0) {
        nb_tensor_free(h);
        free(c);
        return PyErr_Format(nbp_DtypeError, "no DLPack type for %s", nb_dtype_name(nb_tensor_dtype(t)));
    }
    dl->shape = c->shape;
    dl->strides = c->strides;
    dl->byte_offset = 0;
    c->m.manager_ctx = c;
    c->m.deleter = dl_deleter;
    PyObject *cap = PyCapsule_New(&c->m, "dltensor", dl_capsule_destructor);
    if (!cap) dl_deleter(&c->m);
    return cap;
}

static PyObject *tensor_dlpack(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *maxv = Py_None, *dld = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO", kwl, &stream, &maxv, &dld, &copy)) return NULL;
    nb_tensor *t = ((TensorObject *)self)->t;
    void *s = NULL;
    int has = 0;
    if (stream != Py_None && nb_device_get_kind(nb_tensor_device(t)) == NB_DEVICE_CUDA) {
        long long v = PyLong_AsLongLong(stream);
        if (v == -1 && PyErr_Occurred()) return NULL;
        /* DLPack: 1 = the legacy default stream, 2 = per-thread default; other = a CUstream */
        s = v == 1 ? NULL : v == 2 ? (void *)(uintptr_t)2 : (void *)(uintptr_t)v;
        has = v != -1;
        /* the consumer's stream must see our pending writes */
        if (has) {
            nb_status st = nb_native_wait_stream(s, nb_device_stream(nb_tensor_device(t)));
            if (st) return nbp_raise(st);
        }
    }
    return nbp_dlpack_capsule(t, s, has, 0);
}

static PyObject *tensor_dlpack_device(PyObject *self, PyObject *unused) {
    nb_device *d = nb_tensor_device(((TensorObject *)self)->t);
    int cuda = nb_device_get_kind(d) == NB_DEVICE_CUDA;
    return Py_BuildValue("(ii)", cuda ? kDLCUDA : kDLCPU, cuda ? nb_device_get_info(d)->index : 0);
}

/* ---- DLPack import ------------------------------------------------------------------------- */

static void dl_owner_destructor(PyObject *cap) {
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "nabla.dlpack_owner");
    if (m && m->deleter) m->deleter(m);
    PyErr_Clear();
}

static int dl_to_nb(DLDataType t, nb_dtype *o) {
    if (t.lanes != 1) return -1;
    switch (t.code) {
    case kDLFloat: *o = t.bits == 32 ? NB_F32 : t.bits == 64 ? NB_F64 : t.bits == 16 ? NB_F16 : NB_DTYPE_COUNT; break;
    case kDLBfloat: *o = t.bits == 16 ? NB_BF16 : NB_DTYPE_COUNT; break;
    case kDLInt: *o = t.bits == 32 ? NB_I32 : t.bits == 64 ? NB_I64 : NB_DTYPE_COUNT; break;
    case kDLUInt: *o = t.bits == 32 ? NB_U32 : t.bits == 8 ? NB_U8 : NB_DTYPE_COUNT; break;
    case kDLBool: *o = t.bits == 8 ? NB_BOOL : NB_DTYPE_COUNT; break;
    default: return -1;
    }
    return *o == NB_DTYPE_COUNT ? -1 : 0;
}

PyObject *nbp_tensor_from_capsule(PyObject *cap, PyObject *owner) {
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    if (!m) return NULL;
    DLTensor *dl = &m->dl_tensor;
    nb_dtype dt;
    if (dl_to_nb(dl->dtype, &dt) < 0)
        return PyErr_Format(nbp_DtypeError, "DLPack dtype (code %d, %d bits, %d lanes) is not supported by nabla",
                            dl->dtype.code, dl->dtype.bits, dl->dtype.lanes);
    if (dl->ndim > NB_MAX_DIMS) return PyErr_Format(nbp_ShapeError, "DLPack tensor of rank %d (at most %d)", dl->ndim, NB_MAX_DIMS);
    char spec[32];
    if (dl->device.device_type == kDLCPU || dl->device.device_type == kDLCUDAHost) snprintf(spec, sizeof spec, "cpu");
    else if (dl->device.device_type == kDLCUDA || dl->device.device_type == kDLCUDAManaged) snprintf(spec, sizeof spec, "cuda:%d", dl->device.device_id);
    else return PyErr_Format(nbp_DeviceError, "DLPack device type %d is not supported by nabla", dl->device.device_type);
    PyObject *devo = nbp_device_get(spec);
    if (!devo) return NULL;
    int64_t st[NB_MAX_DIMS];
    int64_t es = (int64_t)nb_dtype_size(dt);
    for (int i = 0; i < dl->ndim; i++) {
        if (dl->strides && dl->strides[i] < 0) {
            Py_DECREF(devo);
            return PyErr_Format(nbp_LayoutError, "DLPack tensor has a negative stride in dim %d: make it contiguous first", i);
        }
        st[i] = dl->strides ? dl->strides[i] * es : 0;
    }
    nb_tensor *t = NULL;
    nb_status s = nb_tensor_wrap(((DeviceObject *)devo)->dev, dt, dl->ndim, dl->shape, dl->strides ? st : NULL,
                                 (char *)dl->data + dl->byte_offset, &t);
    Py_DECREF(devo);
    if (s) return nbp_raise(s);
    /* take ownership: rename the capsule as consumed and hold the manager in our own capsule */
    if (PyCapsule_SetName(cap, "used_dltensor") < 0) {
        nb_tensor_free(t);
        return NULL;
    }
    PyObject *own = PyCapsule_New(m, "nabla.dlpack_owner", dl_owner_destructor);
    if (!own) {
        nb_tensor_free(t);
        return NULL;
    }
    PyObject *r = nbp_tensor_new(t, own);
    Py_DECREF(own);
    (void)owner;
    return r;
}

/* Tensor.from_dlpack(obj): obj has __dlpack__ (torch, cupy, jax, nabla) or is a capsule. */
static PyObject *py_from_dlpack(PyObject *self, PyObject *obj) {
    if (PyCapsule_CheckExact(obj)) return nbp_tensor_from_capsule(obj, NULL);
    PyObject *dev = PyObject_CallMethod(obj, "__dlpack_device__", NULL);
    if (!dev) return NULL;
    long type = 0, id = 0;
    if (!PyArg_ParseTuple(dev, "ll", &type, &id)) {
        Py_DECREF(dev);
        return NULL;
    }
    Py_DECREF(dev);
    PyObject *cap;
    if (type == kDLCUDA) {
        /* the producer orders its pending writes before work on our stream */
        char spec[32];
        snprintf(spec, sizeof spec, "cuda:%ld", id);
        PyObject *d = nbp_device_get(spec);
        if (!d) return NULL;
        void *ns = nb_stream_native(nb_device_stream(((DeviceObject *)d)->dev));
        Py_DECREF(d);
        PyObject *kw = Py_BuildValue("{s:N}", "stream", PyLong_FromVoidPtr(ns ? ns : (void *)1));
        PyObject *meth = PyObject_GetAttrString(obj, "__dlpack__");
        PyObject *empty = PyTuple_New(0);
        cap = meth && kw && empty ? PyObject_Call(meth, empty, kw) : NULL;
        Py_XDECREF(meth);
        Py_XDECREF(kw);
        Py_XDECREF(empty);
    } else {
        cap = PyObject_CallMethod(obj, "__dlpack__", NULL);
    }
    if (!cap) return NULL;
    PyObject *r = nbp_tensor_from_capsule(cap, obj);
    Py_DECREF(cap);
    return r;
}

/* ---- methods ------------------------------------------------------------------------------- */

static PyObject *tensor_to_numpy(PyObject *self, PyObject *unused) {
    /* a copy, so the array never aliases the tensor (use numpy.asarray(t) for a view on cpu) */
    nb_tensor *t = ((TensorObject *)self)->t, *c = NULL;
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_tensor_to(t, NULL, &c);
    Py_END_ALLOW_THREADS
    if (st) return nbp_raise(st);
    PyObject *r = nbp_tensor_to_numpy(c);
    nb_tensor_free(c);
    return r;
}

static PyObject *new_like(nb_tensor *t, int zero) {
    nb_tensor *g = NULL;
    nb_status st = zero ? nb_tensor_zeros(nb_tensor_device(t), nb_tensor_dtype(t), nb_tensor_ndim(t),
                                          nb_tensor_shape(t), &g)
                        : nb_tensor_empty(nb_tensor_device(t), nb_tensor_dtype(t), nb_tensor_ndim(t),
                                          nb_tensor_shape(t), &g);
    if (st) return nbp_raise(st);
    return nbp_tensor_new(g, NULL);
}

/* t.with_grads(): a tensor on the same memory with a zeroed .grad of the same shape (SlangPy). */
static PyObject *tensor_with_grads(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"grad", "zero", NULL};
    PyObject *grad = Py_None;
    int zero = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|Op", kwl, &grad, &zero)) return NULL;
    TensorObject *o = (TensorObject *)self;
    nb_tensor *v = NULL;
    nb_status st = nbp_view(o->t, &v);
    if (st) return nbp_raise(st);
    PyObject *r = nbp_tensor_new(v, o->owner);
    if (!r) return NULL;
    PyObject *g = grad;
    if (g == Py_None) {
        g = new_like(o->t, zero);
        if (!g) {
            Py_DECREF(r);
            return NULL;
        }
    } else {
        Py_INCREF(g);
    }
    if (tensor_set_grad(r, g, NULL) < 0) {
        Py_DECREF(g);
        Py_DECREF(r);
        return NULL;
    }
    Py_DECREF(g);
    return r;
}

static PyObject *tensor_zero_(PyObject *self, PyObject *unused) {
    nb_status st = nb_tensor_fill_bytes(((TensorObject *)self)->t, 0);
    if (st) return nbp_raise(st);
    Py_INCREF(self);
    return self;
}

static PyObject *tensor_to(PyObject *self, PyObject *devo) {
    nb_device *d = nbp_device_ptr(devo);
    if (!d) return NULL;
    nb_tensor *c = NULL;
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_tensor_to(((TensorObject *)self)->t, d, &c);
    Py_END_ALLOW_THREADS
    if (st) return nbp_raise(st);
    return nbp_tensor_new(c, NULL);
}

static PyObject *tensor_copy_from(PyObject *self, PyObject *src) {
    if (!nbp_is_tensor(src)) return PyErr_Format(PyExc_TypeError, "copy_from expects a nabla.Tensor");
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_tensor_copy(((TensorObject *)self)->t, ((TensorObject *)src)->t);
    Py_END_ALLOW_THREADS
    if (st) return nbp_raise(st);
    Py_RETURN_NONE;
}

/* ---- constructors (module functions; nabla.Tensor.zeros etc. wrap them) ------------------- */

static PyObject *make(PyObject *args, PyObject *kw, int zero) {
    static char *kwl[] = {"shape", "dtype", "device", NULL};
    PyObject *shape, *dto = Py_None, *devo = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO", kwl, &shape, &dto, &devo)) return NULL;
    int nd, ok;
    int64_t sh[NB_MAX_DIMS];
    if (parse_shape(shape, &nd, sh) < 0) return NULL;
    nb_dtype dt = nbp_dtype_arg(dto, &ok);
    if (!ok) return NULL;
    nb_device *dev = nbp_device_ptr(devo);
    if (!dev) return NULL;
    nb_tensor *t = NULL;
    nb_status st = zero ? nb_tensor_zeros(dev, dt, nd, sh, &t) : nb_tensor_empty(dev, dt, nd, sh, &t);
    if (st) return nbp_raise(st);
    return nbp_tensor_new(t, NULL);
}
static PyObject *py_zeros(PyObject *self, PyObject *args, PyObject *kw) { return make(args, kw, 1); }
static PyObject *py_empty(PyObject *self, PyObject *args, PyObject *kw) { return make(args, kw, 0); }

/* from_numpy(array, device=None): a new tensor on device with a copy of any buffer's contents. */
static PyObject *py_from_buffer(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"array", "device", NULL};
    PyObject *arr, *devo = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwl, &arr, &devo)) return NULL;
    nb_device *dev = nbp_device_ptr(devo);
    if (!dev) return NULL;
    nbp_callctx cx = {0};
    cx.dev = dev;
    nbp_arg a;
    if (nbp_convert(&cx, arr, 0, &a) < 0) return NULL;
    PyObject *r = NULL;
    if (!a.t) { /* numbers and nested lists: f64 / i64 / bool values */
        nb_tensor *c = NULL;
        nb_status st = nb_tensor_from_host(dev, a.vdtype, a.vndim, a.vshape, a.vdata, &c);
        r = st ? nbp_raise(st) : nbp_tensor_new(c, NULL);
    } else if (a.src != SRC_TENSOR && a.src != SRC_TORCH && nb_device_get_kind(dev) != NB_DEVICE_CPU) {
        r = nbp_tensor_new(a.t, NULL); /* a host buffer staged to the device: already a copy */
        a.t = NULL;
    } else {
        nb_tensor *c = NULL;
        nb_status st;
        Py_BEGIN_ALLOW_THREADS
        st = nb_tensor_to(a.t, dev, &c); /* always a copy: the tensor owns its memory */
        Py_END_ALLOW_THREADS
        r = st ? nbp_raise(st) : nbp_tensor_new(c, NULL);
    }
    nbp_arg_release(&a);
    return r;
}

static PyGetSetDef tensor_getset[] = {
    {"shape", tensor_get_shape, NULL, "tuple of ints", NULL},
    {"strides", tensor_get_strides, NULL, "byte strides", NULL},
    {"ndim", tensor_get_ndim, NULL, "rank", NULL},
    {"numel", tensor_get_numel, NULL, "number of elements", NULL},
    {"dtype", tensor_get_dtype, NULL, "\"f32\", \"f64\", … (a struct tensor: its struct type, module.MyStruct)", NULL},
    {"scalar_dtype", tensor_get_scalar_dtype, NULL, "the stored scalar dtype: \"f32\", … (\"u8\" for a struct of mixed fields)", NULL},
    {"slang_type", tensor_get_stype, tensor_set_stype, "SlangPy: the struct type of a struct tensor (its elements are the trailing dims), or None", NULL},
    {"device", tensor_get_device, NULL, "the nabla.Device holding the memory", NULL},
    {"grad", tensor_get_grad, tensor_set_grad, "gradient Tensor (with_grads) or None", NULL},
    {"grad_in", tensor_get_grad_in, tensor_set_grad_in, "SlangPy's grad_in: the gradient a .bwds call reads for this _result (None: .grad)", NULL},
    {"data_ptr", tensor_get_data_ptr, NULL, "address of element [0,…,0]", NULL},
    {NULL},
};

static PyMethodDef tensor_methods[] = {
    {"to_numpy", tensor_to_numpy, METH_NOARGS, "a numpy copy"},
    {"with_grads", (PyCFunction)(void (*)(void))tensor_with_grads, METH_VARARGS | METH_KEYWORDS,
     "with_grads(grad=None, zero=True): the same memory with a .grad tensor"},
    {"zero_", tensor_zero_, METH_NOARGS, "fills with zeros in place"},
    {"to", tensor_to, METH_O, "to(device) -> a contiguous copy on device"},
    {"copy_from", tensor_copy_from, METH_O, "copy_from(src): elementwise copy, any devices"},
    {"__dlpack__", (PyCFunction)(void (*)(void))tensor_dlpack, METH_VARARGS | METH_KEYWORDS, "DLPack export"},
    {"__dlpack_device__", tensor_dlpack_device, METH_NOARGS, "DLPack device"},
    {NULL},
};

static PyType_Slot tensor_slots[] = {
    {Py_tp_dealloc, tensor_dealloc},
    {Py_tp_repr, tensor_repr},
    {Py_tp_getset, tensor_getset},
    {Py_tp_methods, tensor_methods},
    {Py_bf_getbuffer, tensor_getbuffer},
    {Py_bf_releasebuffer, tensor_releasebuffer},
    {Py_tp_doc, "A typed, strided array on a nabla device."},
    {0, NULL},
};
static PyType_Spec tensor_spec = {"nabla.Tensor", sizeof(TensorObject), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, tensor_slots};

static PyMethodDef tensor_module_fns[] = {
    {"tensor_zeros", (PyCFunction)(void (*)(void))py_zeros, METH_VARARGS | METH_KEYWORDS, "zeros(shape, dtype, device)"},
    {"tensor_empty", (PyCFunction)(void (*)(void))py_empty, METH_VARARGS | METH_KEYWORDS, "empty(shape, dtype, device)"},
    {"tensor_from_buffer", (PyCFunction)(void (*)(void))py_from_buffer, METH_VARARGS | METH_KEYWORDS, "from_numpy(array, device)"},
    {"tensor_from_dlpack", py_from_dlpack, METH_O, "from_dlpack(obj)"},
    {NULL},
};

int nbp_tensor_init_type(PyObject *mod) {
    nbp_TensorType = PyType_FromSpec(&tensor_spec);
    if (!nbp_TensorType) return -1;
    Py_INCREF(nbp_TensorType);
    if (PyModule_AddObject(mod, "CTensor", nbp_TensorType) < 0) return -1;
    return PyModule_AddFunctions(mod, tensor_module_fns);
}

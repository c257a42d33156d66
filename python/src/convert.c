/* Python objects -> call arguments. Kinds, in the order tried:
 *   nabla.Tensor          bound as is (copied to the module's device if it lives elsewhere)
 *   float / int / bool    a host value for every thread
 *   buffer (numpy, …)     wrapped zero-copy on the cpu (any non-negative strides, stride 0 too);
 *                         negative strides: a contiguous copy for inputs, an error for outputs
 *   torch.Tensor          wrapped zero-copy from data_ptr/shape/stride on its device; on CUDA
 *                         nabla's stream first waits for torch's current stream
 *   list / tuple          nested numbers -> host values (f64, i64 or bool)
 *   __dlpack__            any other DLPack producer (cupy, jax)
 * An argument that lives on another device than the module's is staged: copied there, and for
 * outputs copied back after a successful call (never on failure: no half-written outputs). */
#include "nbpy.h"

#include <string.h>

nbp_torch nbp_T;
PyObject *nbp_str_data_ptr, *nbp_str_get_device, *nbp_str_shape, *nbp_str_stride, *nbp_str_dtype,
    *nbp_str_requires_grad, *nbp_str_dlpack;

static PyObject *np_mod, *np_ndarray;
static nb_device *g_cpu;
static nb_device *g_cuda[16];

int nbp_init_strings(void) {
    if (nbp_str_data_ptr) return 0;
#define S(v, s)                                                                                  \
    if (!(v = PyUnicode_InternFromString(s))) return -1
    S(nbp_str_data_ptr, "data_ptr");
    S(nbp_str_get_device, "get_device");
    S(nbp_str_shape, "shape");
    S(nbp_str_stride, "stride");
    S(nbp_str_dtype, "dtype");
    S(nbp_str_requires_grad, "requires_grad");
    S(nbp_str_dlpack, "__dlpack__");
#undef S
    return 0;
}

PyObject *nbp_numpy(int force) {
    if (np_mod) return np_mod;
    PyObject *m = PyDict_GetItemString(PyImport_GetModuleDict(), "numpy");
    if (m) Py_INCREF(m);
    else if (force && !(m = PyImport_ImportModule("numpy"))) return NULL;
    if (!m) return NULL;
    np_ndarray = PyObject_GetAttrString(m, "ndarray");
    if (!np_ndarray) {
        Py_DECREF(m);
        return NULL;
    }
    np_mod = m;
    return m;
}

int nbp_is_ndarray(PyObject *o) {
    if (!np_mod && !nbp_numpy(0)) {
        PyErr_Clear();
        return 0;
    }
    return PyObject_TypeCheck(o, (PyTypeObject *)np_ndarray);
}

static PyObject *getattr_opt(PyObject *o, const char *name) {
    PyObject *r = PyObject_GetAttrString(o, name);
    if (!r) PyErr_Clear();
    return r;
}

int nbp_torch_load(void) {
    if (nbp_T.loaded) return 1;
    PyObject *torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");
    if (!torch) return 0;
    PyObject *T = getattr_opt(torch, "Tensor");
    if (!T || !PyType_Check(T)) { /* torch is being imported */
        Py_XDECREF(T);
        return 0;
    }
    static const char *names[NB_DTYPE_COUNT] = {"float32", "float64", "float16", "bfloat16", "int32",
                                                "uint32",  "int64",   "uint8",   "bool"};
    for (int i = 0; i < NB_DTYPE_COUNT; i++) nbp_T.dtypes[i] = getattr_opt(torch, names[i]);
    PyObject *C = getattr_opt(torch, "_C");
    nbp_T.from_dlpack = C ? getattr_opt(C, "_from_dlpack") : NULL;
    if (!nbp_T.from_dlpack) {
        PyObject *u = PyImport_ImportModule("torch.utils.dlpack");
        if (u) {
            nbp_T.from_dlpack = getattr_opt(u, "from_dlpack");
            Py_DECREF(u);
        } else {
            PyErr_Clear();
        }
    }
    nbp_T.raw_stream = C ? getattr_opt(C, "_cuda_getCurrentRawStream") : NULL;
    Py_XDECREF(C);
    nbp_T.is_grad_enabled = getattr_opt(torch, "is_grad_enabled");
    nbp_T.Tensor = T;
    nbp_T.loaded = 1;
    return 1;
}

int nbp_is_torch(PyObject *o) {
    if (!nbp_T.loaded && !nbp_torch_load()) return 0;
    return PyObject_TypeCheck(o, (PyTypeObject *)nbp_T.Tensor);
}

static nb_device *cpu_dev(void) {
    if (!g_cpu) {
        PyObject *d = nbp_device_get("cpu");
        if (!d) return NULL;
        g_cpu = ((DeviceObject *)d)->dev;
        Py_DECREF(d);
    }
    return g_cpu;
}

static nb_device *cuda_dev(int idx) {
    if (idx < 0 || idx >= 16) {
        PyErr_Format(nbp_DeviceError, "cuda:%d: device index out of range", idx);
        return NULL;
    }
    if (!g_cuda[idx]) {
        char spec[16];
        snprintf(spec, sizeof spec, "cuda:%d", idx);
        PyObject *d = nbp_device_get(spec);
        if (!d) return NULL;
        g_cuda[idx] = ((DeviceObject *)d)->dev;
        Py_DECREF(d);
    }
    return g_cuda[idx];
}

void nbp_arg_release(nbp_arg *a) {
    if (a->t) nb_tensor_free(a->t);
    if (a->user) nb_tensor_free(a->user);
    if (a->vdata && a->vdata != &a->dval && a->vdata != &a->ival) PyMem_Free(a->vdata);
    if (a->has_view) PyBuffer_Release(&a->view);
    Py_XDECREF(a->keep);
    memset(a, 0, sizeof *a);
}

int nbp_arg_writeback(nbp_arg *a) {
    if (!a->user || !a->t) return 0;
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_tensor_copy(a->user, a->t);
    Py_END_ALLOW_THREADS
    if (st) {
        nbp_raise(st);
        return -1;
    }
    return 0;
}

/* Binds t (the user's memory, owned) on device tdev: staged to cx->dev when needed. */
static int place(nbp_callctx *cx, nb_tensor *t, int want_write, nbp_arg *a) {
    if (nb_tensor_device(t) == cx->dev) {
        a->t = t;
        return 0;
    }
    nb_tensor *c = NULL;
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_tensor_to(t, cx->dev, &c);
    Py_END_ALLOW_THREADS
    if (st) {
        nb_tensor_free(t);
        nbp_raise(st);
        return -1;
    }
    a->t = c;
    if (want_write) a->user = t;
    else nb_tensor_free(t);
    return 0;
}

/* ---- buffers ------------------------------------------------------------------------------- */

static int format_dtype(const char *f, Py_ssize_t itemsize, nb_dtype *d) {
    if (!f) f = "B";
    if (*f == '@' || *f == '=' || *f == '<') f++;
    if (f[0] == 0 || f[1] != 0) return -1;
    switch (f[0]) {
    case 'f': *d = NB_F32; return 0;
    case 'd': *d = NB_F64; return 0;
    case 'e': *d = NB_F16; return 0;
    case 'i': *d = NB_I32; return itemsize == 4 ? 0 : -1;
    case 'I': *d = NB_U32; return itemsize == 4 ? 0 : -1;
    case 'l': case 'q': *d = itemsize == 8 ? NB_I64 : NB_I32; return itemsize == 8 || itemsize == 4 ? 0 : -1;
    case 'L': *d = NB_U32; return itemsize == 4 ? 0 : -1;
    case 'B': *d = NB_U8; return 0;
    case '?': *d = NB_BOOL; return 0;
    default: return -1;
    }
}

/* Gathers a strided buffer (any signs) into contiguous memory. */
static void gather(char *dst, const char *src, int nd, const Py_ssize_t *sh, const Py_ssize_t *st,
                   Py_ssize_t es) {
    if (nd == 0) {
        memcpy(dst, src, (size_t)es);
        return;
    }
    Py_ssize_t inner = es;
    for (int i = 1; i < nd; i++) inner *= sh[i];
    for (Py_ssize_t i = 0; i < sh[0]; i++) gather(dst + i * inner, src + i * st[0], nd - 1, sh + 1, st + 1, es);
}

static int from_buffer(nbp_callctx *cx, PyObject *o, int want_write, nbp_arg *a) {
    if (PyObject_GetBuffer(o, &a->view, PyBUF_RECORDS_RO) < 0) return -1;
    a->has_view = 1;
    Py_buffer *v = &a->view;
    nb_dtype dt;
    if (format_dtype(v->format, v->itemsize, &dt) < 0) {
        PyErr_Format(nbp_DtypeError,
                     "array of format '%s' (%zd-byte items) is not supported by nabla "
                     "(f32 f64 f16 i32 u32 i64 u8 bool)",
                     v->format ? v->format : "B", v->itemsize);
        return -1;
    }
    if (v->ndim > NB_MAX_DIMS) {
        PyErr_Format(nbp_ShapeError, "array of rank %d (nabla supports at most %d dims)", v->ndim, NB_MAX_DIMS);
        return -1;
    }
    int64_t sh[NB_MAX_DIMS], st[NB_MAX_DIMS];
    int negative = 0, zero = -1;
    Py_ssize_t es = v->itemsize, acc = es;
    for (int i = v->ndim - 1; i >= 0; i--) {
        sh[i] = v->shape[i];
        st[i] = v->strides ? v->strides[i] : acc;
        acc *= v->shape[i];
        if (st[i] < 0) negative = 1;
        if (st[i] == 0 && sh[i] > 1) zero = i;
    }
    if (want_write == 2 && v->readonly) want_write = 0;
    if (want_write == 1) {
        if (zero >= 0) {
            PyErr_Format(nbp_LayoutError,
                         "an output array has stride 0 in dim %d (a broadcast view): every "
                         "element there would be written by several threads; pass a real array",
                         zero);
            return -1;
        }
        if (v->readonly) {
            PyErr_SetString(nbp_LayoutError, "an output array is read-only");
            return -1;
        }
        if (negative) {
            PyErr_SetString(nbp_LayoutError,
                            "an output array has negative strides (a reversed view): pass a "
                            "contiguous array");
            return -1;
        }
    }
    if (want_write == 2 && negative) {
        PyErr_SetString(nbp_LayoutError,
                        "an array with negative strides (a reversed view) for a Tensor parameter, "
                        "which the function may write through: pass numpy.ascontiguousarray(a)");
        return -1;
    }
    void *data = v->buf;
    if (negative) { /* inputs only: read a contiguous copy */
        size_t n = (size_t)acc;
        a->vdata = PyMem_Malloc(n ? n : 1);
        if (!a->vdata) {
            PyErr_NoMemory();
            return -1;
        }
        Py_ssize_t sh2[NB_MAX_DIMS];
        for (int i = 0; i < v->ndim; i++) sh2[i] = v->shape[i];
        if (n) gather(a->vdata, v->buf, v->ndim, sh2, v->strides, es);
        data = a->vdata;
        for (int i = v->ndim - 1, s = (int)es; i >= 0; i--) {
            st[i] = s;
            s *= (int)sh[i];
        }
    }
    nb_device *cpu = cpu_dev();
    if (!cpu) return -1;
    nb_tensor *t = NULL;
    nb_status s = nb_tensor_wrap(cpu, dt, v->ndim, sh, st, data ? data : (void *)v, &t);
    if (s) {
        nbp_raise(s);
        return -1;
    }
    a->src = SRC_NUMPY;
    return place(cx, t, want_write, a);
}

/* ---- torch --------------------------------------------------------------------------------- */

static int from_torch(nbp_callctx *cx, PyObject *o, int want_write, nbp_arg *a) {
    PyObject *r = PyObject_CallMethodObjArgs(o, nbp_str_get_device, NULL);
    if (!r) return -1;
    long idx = PyLong_AsLong(r);
    Py_DECREF(r);
    r = PyObject_CallMethodObjArgs(o, nbp_str_data_ptr, NULL);
    if (!r) return -1;
    void *ptr = PyLong_AsVoidPtr(r);
    Py_DECREF(r);
    PyObject *dto = PyObject_GetAttr(o, nbp_str_dtype);
    if (!dto) return -1;
    int dt = -1;
    for (int i = 0; i < NB_DTYPE_COUNT; i++)
        if (nbp_T.dtypes[i] == dto) dt = i;
    if (dt < 0) {
        PyErr_Format(nbp_DtypeError, "torch dtype %R is not supported by nabla (f32 f64 f16 bf16 i32 u32 i64 u8 bool)", dto);
        Py_DECREF(dto);
        return -1;
    }
    Py_DECREF(dto);
    PyObject *sho = PyObject_GetAttr(o, nbp_str_shape);
    PyObject *sto = sho ? PyObject_CallMethodObjArgs(o, nbp_str_stride, NULL) : NULL;
    if (!sto) {
        Py_XDECREF(sho);
        return -1;
    }
    Py_ssize_t nd = PyTuple_Size(sho);
    if (nd > NB_MAX_DIMS || nd < 0 || PyTuple_Size(sto) != nd) {
        Py_DECREF(sho);
        Py_DECREF(sto);
        if (!PyErr_Occurred()) PyErr_Format(nbp_ShapeError, "torch tensor of rank %zd (nabla supports at most %d dims)", nd, NB_MAX_DIMS);
        return -1;
    }
    int64_t sh[NB_MAX_DIMS], st[NB_MAX_DIMS];
    int64_t es = (int64_t)nb_dtype_size((nb_dtype)dt);
    int zero = -1;
    int64_t numel = 1;
    for (Py_ssize_t i = 0; i < nd; i++) {
        sh[i] = PyLong_AsLongLong(PyTuple_GetItem(sho, i));
        st[i] = PyLong_AsLongLong(PyTuple_GetItem(sto, i)) * es;
        numel *= sh[i];
        if (st[i] == 0 && sh[i] > 1) zero = (int)i;
    }
    Py_DECREF(sho);
    Py_DECREF(sto);
    if (PyErr_Occurred()) return -1;
    if (want_write == 1 && zero >= 0) {
        PyErr_Format(nbp_LayoutError,
                     "an output torch tensor has stride 0 in dim %d (an expand()ed view): every "
                     "element there would be written by several threads; pass a real tensor",
                     zero);
        return -1;
    }
    nb_device *tdev = idx < 0 ? cpu_dev() : cuda_dev((int)idx);
    if (!tdev) return -1;
    if (idx >= 0 && !cx->torch_cuda) {
        /* nabla's stream waits for the work torch has queued so far on its current stream */
        void *s = NULL;
        if (nbp_torch_current_stream((int)idx, &s) < 0) return -1;
        nb_status ss = cx->lazy_order ? NB_OK : nb_stream_wait_native(nb_device_stream(tdev), s);
        if (ss) {
            nbp_raise(ss);
            return -1;
        }
        cx->torch_cuda = 1;
        cx->torch_stream = s;
        cx->torch_nbdev = tdev;
    }
    static char dummy;
    nb_tensor *t = NULL;
    nb_status s = nb_tensor_wrap(tdev, (nb_dtype)dt, (int)nd, sh, st, ptr ? ptr : (numel ? NULL : &dummy), &t);
    if (s) {
        nbp_raise(s);
        return -1;
    }
    a->src = SRC_TORCH;
    a->torch_dev = (int)idx;
    if (!cx->like) cx->like = o;
    return place(cx, t, want_write, a);
}

/* torch's current stream on cuda:idx (NULL = the legacy default stream). */
int nbp_torch_current_stream(int idx, void **out) {
    *out = NULL;
    if (!nbp_T.raw_stream) return 0;
    PyObject *so = PyObject_CallFunction(nbp_T.raw_stream, "i", idx);
    if (!so) return -1;
    *out = PyLong_AsVoidPtr(so);
    Py_DECREF(so);
    return PyErr_Occurred() ? -1 : 0;
}

int nbp_torch_after(nbp_callctx *cx) {
    if (!cx->torch_cuda) return 0;
    nb_status st = nb_native_wait_stream(cx->torch_stream, nb_device_stream(cx->torch_nbdev));
    if (st) {
        nbp_raise(st);
        return -1;
    }
    return 0;
}

/* ---- lists --------------------------------------------------------------------------------- */

enum { L_BOOL = 0, L_INT = 1, L_FLOAT = 2 };

static int list_shape(PyObject *o, int depth, int *nd, int64_t *sh, int *kind) {
    if (PyList_Check(o) || PyTuple_Check(o)) {
        if (depth >= NB_MAX_DIMS) {
            PyErr_Format(nbp_ShapeError, "nested list deeper than %d", NB_MAX_DIMS);
            return -1;
        }
        Py_ssize_t n = PySequence_Size(o);
        if (depth >= *nd) {
            *nd = depth + 1;
            sh[depth] = n;
        } else if (sh[depth] != n) {
            PyErr_SetString(nbp_ShapeError, "ragged nested list: every row must have the same length");
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *it = PySequence_GetItem(o, i);
            if (!it) return -1;
            int r = list_shape(it, depth + 1, nd, sh, kind);
            Py_DECREF(it);
            if (r < 0) return -1;
        }
        return 0;
    }
    if (depth != *nd && *nd != 0 && depth < *nd) {
        PyErr_SetString(nbp_ShapeError, "ragged nested list: numbers and lists mixed at one level");
        return -1;
    }
    if (PyBool_Check(o)) return 0;
    if (PyLong_Check(o)) {
        if (*kind < L_INT) *kind = L_INT;
        return 0;
    }
    if (PyFloat_Check(o)) {
        *kind = L_FLOAT;
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "a list argument may hold only numbers (and lists), not %R", o);
    return -1;
}

static int list_fill(PyObject *o, int kind, char **p) {
    if (PyList_Check(o) || PyTuple_Check(o)) {
        Py_ssize_t n = PySequence_Size(o);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *it = PySequence_GetItem(o, i);
            if (!it) return -1;
            int r = list_fill(it, kind, p);
            Py_DECREF(it);
            if (r < 0) return -1;
        }
        return 0;
    }
    if (kind == L_FLOAT) {
        double d = PyFloat_AsDouble(o);
        memcpy(*p, &d, 8);
        *p += 8;
    } else if (kind == L_INT) {
        long long v = PyLong_AsLongLong(o);
        int64_t w = v;
        memcpy(*p, &w, 8);
        *p += 8;
    } else {
        **p = (char)(o == Py_True);
        *p += 1;
    }
    return PyErr_Occurred() ? -1 : 0;
}

static int from_list(PyObject *o, nbp_arg *a) {
    int nd = 0, kind = L_BOOL;
    int64_t sh[NB_MAX_DIMS] = {0};
    if (list_shape(o, 0, &nd, sh, &kind) < 0) return -1;
    size_t n = 1;
    for (int i = 0; i < nd; i++) n *= (size_t)sh[i];
    size_t es = kind == L_BOOL ? 1 : 8;
    if (n == 0) kind = L_FLOAT;
    a->vdata = PyMem_Malloc(n > 0 ? n * es : 8);
    if (!a->vdata) {
        PyErr_NoMemory();
        return -1;
    }
    char *p = a->vdata;
    if (n && list_fill(o, kind, &p) < 0) return -1;
    a->vdtype = kind == L_FLOAT ? NB_F64 : kind == L_INT ? NB_I64 : NB_BOOL;
    a->vndim = nd;
    memcpy(a->vshape, sh, sizeof sh);
    a->scalar = 3;
    a->src = SRC_PY;
    return 0;
}

/* ---- entry --------------------------------------------------------------------------------- */

int nbp_convert(nbp_callctx *cx, PyObject *o, int want_write, nbp_arg *a) {
    memset(a, 0, sizeof *a);
    if (nbp_init_strings() < 0) return -1;
    a->keep = o;
    Py_INCREF(o);
    if (nbp_is_tensor(o)) {
        nb_tensor *v = NULL;
        nb_status st = nbp_view(((TensorObject *)o)->t, &v);
        if (st) {
            nbp_raise(st);
            return -1;
        }
        if (want_write == 1) {
            int nd = nb_tensor_ndim(v);
            for (int i = 0; i < nd; i++)
                if (nb_tensor_strides(v)[i] == 0 && nb_tensor_shape(v)[i] > 1) {
                    nb_tensor_free(v);
                    PyErr_Format(nbp_LayoutError, "an output nabla.Tensor has stride 0 in dim %d (a broadcast view); pass a real tensor", i);
                    return -1;
                }
        }
        a->src = SRC_TENSOR;
        return place(cx, v, want_write, a);
    }
    if (PyFloat_Check(o)) {
        a->dval = PyFloat_AsDouble(o);
        a->vdtype = NB_F64;
        a->vdata = &a->dval;
        a->scalar = 1;
        return 0;
    }
    if (PyBool_Check(o)) {
        a->ival = 0;
        *(unsigned char *)&a->ival = (unsigned char)(o == Py_True);
        a->vdtype = NB_BOOL;
        a->vdata = &a->ival;
        a->scalar = 2;
        return 0;
    }
    if (PyLong_Check(o)) {
        a->ival = PyLong_AsLongLong(o);
        if (a->ival == -1 && PyErr_Occurred()) return -1;
        a->vdtype = NB_I64;
        a->vdata = &a->ival;
        a->scalar = 2;
        return 0;
    }
    if (PyObject_CheckBuffer(o)) return from_buffer(cx, o, want_write, a);
    int tt = nbp_is_torch(o);
    if (tt < 0) return -1;
    if (tt) return from_torch(cx, o, want_write, a);
    if (PyList_Check(o) || PyTuple_Check(o)) {
        if (want_write == 1) {
            PyErr_SetString(PyExc_TypeError, "an output must be an array, not a list");
            return -1;
        }
        return from_list(o, a);
    }
    if (PyObject_HasAttr(o, nbp_str_dlpack)) {
        PyObject *mod = PyImport_ImportModule("nabla._nabla");
        PyObject *t = mod ? PyObject_CallMethod(mod, "tensor_from_dlpack", "O", o) : NULL;
        Py_XDECREF(mod);
        if (!t) return -1;
        Py_DECREF(a->keep);
        a->keep = NULL;
        int r = nbp_convert(cx, t, want_write, a);
        Py_DECREF(t);
        return r;
    }
    PyErr_Format(PyExc_TypeError,
                 "cannot pass %R to a nabla function: expected a number, a list, a numpy array, "
                 "a nabla.Tensor, a torch tensor or a DLPack object",
                 o);
    return -1;
}

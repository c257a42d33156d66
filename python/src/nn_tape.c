/* nabla._nabla.CTape: the tape autograd (nn_tape.h) on the CPU or a CUDA device. Values are int
 * handles here; nabla.nn.Tape wraps them in Var objects that know their tape and reset
 * generation.
 *
 *   t = _nabla.tape_create(device)
 *   w = t.param("conv.w", (8, 3, 3, 3)); t.init_uniform(w, 0.1, seed)
 *   x = t.input(array, requires_grad=False)    # host copy (any array kind) -> a tape value
 *   y = t.conv2d(x, w, -1, 1, 1); l = t.mse(y, tgt); t.backward(l)
 *   t.read(v) / t.read_grad(v) -> numpy;  t.params() / t.grads() -> zero-copy nabla.Tensor views
 */
#include "nn_common.h"

#include <string.h>

PyObject *nbn_TapeType;
#define TapeType nbn_TapeType

static void tape_dealloc(PyObject *self) {
    TapeObject *o = (TapeObject *)self;
    PyTypeObject *tp = Py_TYPE(self);
    if (o->t) nb_tape_free(o->t);
    Py_XDECREF(o->keep);
    Py_XDECREF(o->keep_fns); /* after nb_tape_free: its prepared calls go before the modules */
    Py_XDECREF(o->device);
    PyObject_Free(self);
    Py_DECREF(tp);
}

/* st, then *v read after the call (argument evaluation order is unspecified). */
static PyObject *ret(nb_status st, const nb_tvar *v) {
    if (st) return nbn_raise(st);
    return PyLong_FromLong(*v);
}

static PyObject *py_tape_create(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"device", NULL};
    PyObject *devo = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwl, &devo)) return NULL;
    nb_device *dev = nbp_device_ptr(devo);
    if (!dev) return NULL;
    TapeObject *o = PyObject_New(TapeObject, (PyTypeObject *)TapeType);
    if (!o) return NULL;
    o->t = NULL;
    o->device = NULL;
    o->gen = 0;
    o->views_taken = 0;
    o->keep = NULL;
    o->keep_fns = NULL;
    nb_status st = nb_tape_create_on(dev, &o->t);
    if (st) {
        Py_DECREF(o);
        return nbn_raise(st);
    }
    if (!(o->device = nbp_device_get(nb_device_name(nb_tape_device(o->t))))) {
        Py_DECREF(o);
        return NULL;
    }
    return (PyObject *)o;
}

#define T(self) (((TapeObject *)(self))->t)

static PyObject *tape_param(PyObject *self, PyObject *args) {
    const char *name;
    PyObject *sho;
    if (!PyArg_ParseTuple(args, "sO", &name, &sho)) return NULL;
    int nd;
    int64_t sh[NB_TAPE_MAX_DIMS];
    if (nbn_shape(sho, NB_TAPE_MAX_DIMS, &nd, sh, "Tape.param") < 0) return NULL;
    if (((TapeObject *)self)->views_taken)
        return PyErr_Format(nbp_ArgumentError,
                            "Tape.param('%s'): register every parameter before taking params()/grads() views "
                            "(registering moves the parameter buffer)", name);
    nb_tvar v;
    return ret(nb_tape_param(T(self), name, nd, sh, &v), &v);
}

static PyObject *tape_param_find(PyObject *self, PyObject *arg) {
    const char *name = PyUnicode_Check(arg) ? PyUnicode_AsUTF8AndSize(arg, NULL) : NULL;
    if (!name) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_TypeError, "name must be a str");
    nb_tvar v;
    return ret(nb_tape_param_find(T(self), name, &v), &v);
}

static PyObject *tape_param_info(PyObject *self, PyObject *arg) {
    int v = (int)PyLong_AsLong(arg);
    if (PyErr_Occurred()) return NULL;
    int64_t off, n;
    nb_status st = nb_tape_param_info(T(self), v, &off, &n);
    if (st) return nbn_raise(st);
    return Py_BuildValue("(LL)", (long long)off, (long long)n);
}

/* Zero-copy f32[count] view of the parameter (grad = 0) or gradient (grad = 1) buffer. */
static nb_tensor *buffer_tensor(PyObject *self, int grad) {
    float *p = NULL;
    int64_t n = 0;
    nb_status st = grad ? nb_tape_grads(T(self), &p, &n) : nb_tape_params(T(self), &p, &n);
    if (st) return NBN_RAISE_T(st);
    static float dummy;
    nb_tensor *t = NULL;
    st = nb_tensor_wrap(nb_tape_device(T(self)), NB_F32, 1, &n, NULL, p ? p : &dummy, &t);
    if (st) return NBN_RAISE_T(st);
    ((TapeObject *)self)->views_taken = 1;
    return t;
}

static PyObject *tape_params_view(PyObject *self, PyObject *arg) {
    int grad = PyObject_IsTrue(arg);
    if (grad < 0) return NULL;
    nb_tensor *t = buffer_tensor(self, grad);
    return t ? nbp_tensor_new(t, self) : NULL;
}

static PyObject *tape_torch_view(PyObject *self, PyObject *arg) {
    int grad = PyObject_IsTrue(arg);
    if (grad < 0) return NULL;
    nb_tensor *t = buffer_tensor(self, grad);
    if (!t) return NULL;
    /* torch does not know the tape: the view keeps the tape object alive through a Tensor */
    PyObject *keep = nbp_tensor_new(t, self);
    if (!keep) return NULL;
    PyObject *r = nbn_torch_view(((TensorObject *)keep)->t);
    Py_DECREF(keep); /* the capsule took its own handle on the (non-owned) memory */
    return r;
}

static PyObject *tape_init_uniform(PyObject *self, PyObject *args) {
    int v;
    double bound;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "idK", &v, &bound, &seed)) return NULL;
    nb_status st = nb_tape_param_init_uniform(T(self), v, (float)bound, seed);
    if (st) return nbn_raise(st);
    Py_RETURN_NONE;
}

static PyObject *tape_zero_grad(PyObject *self, PyObject *u) {
    nb_status st = nb_tape_zero_grad(T(self));
    if (st) return nbn_raise(st);
    Py_RETURN_NONE;
}

static PyObject *tape_reset(PyObject *self, PyObject *u) {
    nb_status st = nb_tape_reset(T(self));
    if (st) return nbn_raise(st);
    ((TapeObject *)self)->gen++;
    Py_CLEAR(((TapeObject *)self)->keep); /* no op holds a module object any more */
    Py_RETURN_NONE;
}

static PyObject *tape_input(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"data", "requires_grad", NULL};
    PyObject *d;
    int rg = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p", kwl, &d, &rg)) return NULL;
    nbn_ctx c;
    PyObject *r = NULL;
    nb_tensor *h = nbn_host_f32(&c, d, "Tape.input", "data", NB_TAPE_MAX_DIMS);
    if (h) {
        nb_tvar v;
        nb_status st;
        Py_BEGIN_ALLOW_THREADS
        st = nb_tape_input(T(self), nb_tensor_ndim(h), nb_tensor_shape(h), nb_tensor_data(h), rg, &v);
        Py_END_ALLOW_THREADS
        r = ret(st, &v);
    }
    nbn_end(&c);
    return r;
}

static PyObject *tape_backward(PyObject *self, PyObject *arg) {
    int v = (int)PyLong_AsLong(arg);
    if (PyErr_Occurred()) return NULL;
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_tape_backward(T(self), v);
    Py_END_ALLOW_THREADS
    if (st) return nbn_raise(st);
    Py_RETURN_NONE;
}

static PyObject *tape_shape(PyObject *self, PyObject *arg) {
    int v = (int)PyLong_AsLong(arg);
    if (PyErr_Occurred()) return NULL;
    int nd;
    int64_t sh[NB_TAPE_MAX_DIMS];
    nb_status st = nb_tape_shape(T(self), v, &nd, sh);
    if (st) return nbn_raise(st);
    PyObject *t = PyTuple_New(nd);
    for (int i = 0; t && i < nd; i++) PyTuple_SetItem(t, i, PyLong_FromLongLong(sh[i]));
    return t;
}

/* read / read_grad / read_params / read_grads -> a new host array. which: 0 value, 1 grad,
 * 2 params, 3 grads. */
typedef struct read_ctx {
    nb_tape *t;
    int v, which;
} read_ctx;

static nb_status read_fill(void *ctx, float *dst, int64_t n) {
    const read_ctx *r = ctx;
    switch (r->which) {
    case 0: return nb_tape_read(r->t, r->v, dst, n);
    case 1: return nb_tape_read_grad(r->t, r->v, dst, n);
    case 2: return nb_tape_read_params(r->t, dst, n);
    default: return nb_tape_read_grads(r->t, dst, n);
    }
}

static PyObject *read_common(PyObject *self, int v, int which, PyObject *res) {
    int kind;
    if (nbn_kind_arg(res, &kind) < 0) return NULL;
    int nd = 1;
    int64_t sh[NB_TAPE_MAX_DIMS];
    nb_status st;
    if (which < 2) {
        st = nb_tape_shape(T(self), v, &nd, sh);
    } else {
        float *p;
        st = nb_tape_params(T(self), &p, &sh[0]);
    }
    if (st) return nbn_raise(st);
    read_ctx r = {T(self), v, which};
    return nbn_host_result(nd, sh, kind, read_fill, &r);
}

static PyObject *tape_read(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"v", "grad", "result", NULL};
    int v, grad = 0;
    PyObject *res = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i|pO", kwl, &v, &grad, &res)) return NULL;
    return read_common(self, v, grad, res);
}

static PyObject *tape_read_params(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"grads", "result", NULL};
    int grads = 0;
    PyObject *res = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|pO", kwl, &grads, &res)) return NULL;
    return read_common(self, -1, grads ? 3 : 2, res);
}

static PyObject *tape_write_params(PyObject *self, PyObject *arg) {
    nbn_ctx c;
    PyObject *r = NULL;
    nb_tensor *h = nbn_host_f32(&c, arg, "Tape.write_params", "params", NB_MAX_DIMS);
    if (h) {
        nb_status st;
        Py_BEGIN_ALLOW_THREADS
        st = nb_tape_write_params(T(self), nb_tensor_data(h), nb_tensor_numel(h));
        Py_END_ALLOW_THREADS
        r = nbn_none(st);
    }
    nbn_end(&c);
    return r;
}

static PyObject *tape_stats(PyObject *self, PyObject *u) {
    nb_tape_stats s;
    nb_status st = nb_tape_get_stats(T(self), &s);
    if (st) return nbn_raise(st);
    return Py_BuildValue("{s:L,s:L,s:L,s:L,s:i,s:i}", "host_allocs", (long long)s.host_allocs, "arena_capacity",
                         (long long)s.arena_capacity, "arena_used", (long long)s.arena_used, "arena_high_water",
                         (long long)s.arena_high_water, "n_values", s.n_values, "n_ops", s.n_ops);
}

static PyObject *tape_set_precision(PyObject *self, PyObject *arg) {
    const char *s = PyUnicode_Check(arg) ? PyUnicode_AsUTF8AndSize(arg, NULL) : NULL;
    if (!s) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_TypeError, "precision must be a str");
    nb_tape_precision p;
    if (!strcmp(s, "fp32")) p = NB_TAPE_FP32;
    else if (!strcmp(s, "tf32")) p = NB_TAPE_TF32;
    else if (!strcmp(s, "bf16")) p = NB_TAPE_BF16;
    else return PyErr_Format(nbp_ArgumentError, "precision '%s' (fp32, tf32, bf16)", s);
    nb_status st = nb_tape_set_precision(T(self), p);
    if (st) return nbn_raise(st);
    Py_RETURN_NONE;
}
static PyObject *tape_get_precision(PyObject *self, void *c) {
    static const char *n[] = {"fp32", "tf32", "bf16"};
    nb_tape_precision p = nb_tape_get_precision(T(self));
    return PyUnicode_FromString(p >= 0 && p <= 2 ? n[p] : "?");
}
static PyObject *tape_get_gen(PyObject *self, void *c) { return PyLong_FromLongLong(((TapeObject *)self)->gen); }
static PyObject *tape_get_n_params(PyObject *self, void *c) {
    float *p;
    int64_t n = 0;
    nb_status st = nb_tape_params(T(self), &p, &n);
    if (st) return nbn_raise(st);
    return PyLong_FromLongLong(n);
}
static PyObject *tape_get_device(PyObject *self, void *c) {
    Py_INCREF(((TapeObject *)self)->device);
    return ((TapeObject *)self)->device;
}

/* ---- ops ----------------------------------------------------------------------------------- */

static PyObject *op_linear(PyObject *self, PyObject *args) {
    int x, w, b = NB_TVAR_NONE;
    nb_tvar out;
    if (!PyArg_ParseTuple(args, "ii|i", &x, &w, &b)) return NULL;
    return ret(nb_tape_linear(T(self), x, w, b, &out), &out);
}
static PyObject *op_linear_relu(PyObject *self, PyObject *args) {
    int x, w, b = NB_TVAR_NONE;
    nb_tvar out;
    if (!PyArg_ParseTuple(args, "ii|i", &x, &w, &b)) return NULL;
    return ret(nb_tape_linear_relu(T(self), x, w, b, &out), &out);
}
static PyObject *op_conv2d(PyObject *self, PyObject *args) {
    int x, w, b = NB_TVAR_NONE, stride = 1, pad = 0;
    nb_tvar out;
    if (!PyArg_ParseTuple(args, "ii|iii", &x, &w, &b, &stride, &pad)) return NULL;
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_tape_conv2d(T(self), x, w, b, stride, pad, &out);
    Py_END_ALLOW_THREADS
    return ret(st, &out);
}
static PyObject *op_group_norm(PyObject *self, PyObject *args) {
    int x, groups, g = NB_TVAR_NONE, b = NB_TVAR_NONE;
    double eps = 1e-5;
    nb_tvar out;
    if (!PyArg_ParseTuple(args, "ii|iid", &x, &groups, &g, &b, &eps)) return NULL;
    return ret(nb_tape_group_norm(T(self), x, groups, g, b, (float)eps, &out), &out);
}
#define UNARY(fn, call)                                                                        \
    static PyObject *fn(PyObject *self, PyObject *arg) {                                        \
        int x = (int)PyLong_AsLong(arg);                                                        \
        if (PyErr_Occurred()) return NULL;                                                      \
        nb_tvar out;                                                                            \
        return ret(call(T(self), x, &out), &out);                                                \
    }
#define BINARY(fn, call)                                                                       \
    static PyObject *fn(PyObject *self, PyObject *args) {                                       \
        int a, b;                                                                               \
        if (!PyArg_ParseTuple(args, "ii", &a, &b)) return NULL;                                 \
        nb_tvar out;                                                                            \
        return ret(call(T(self), a, b, &out), &out);                                             \
    }
UNARY(op_silu, nb_tape_silu)
UNARY(op_relu, nb_tape_relu)
UNARY(op_softmax, nb_tape_softmax)
UNARY(op_upsample2x, nb_tape_upsample2x)
UNARY(op_avgpool2x, nb_tape_avgpool2x)
UNARY(op_transpose, nb_tape_transpose)
BINARY(op_add, nb_tape_add)
BINARY(op_add_channel, nb_tape_add_channel)
BINARY(op_concat, nb_tape_concat)
BINARY(op_mse, nb_tape_mse)

static PyObject *op_attention(PyObject *self, PyObject *args) {
    int q, k, v;
    nb_tvar out;
    if (!PyArg_ParseTuple(args, "iii", &q, &k, &v)) return NULL;
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_tape_attention(T(self), q, k, v, &out);
    Py_END_ALLOW_THREADS
    return ret(st, &out);
}
static PyObject *op_reshape(PyObject *self, PyObject *args) {
    int x;
    PyObject *sho;
    if (!PyArg_ParseTuple(args, "iO", &x, &sho)) return NULL;
    int nd;
    int64_t sh[NB_TAPE_MAX_DIMS];
    if (nbn_shape(sho, NB_TAPE_MAX_DIMS, &nd, sh, "Tape.reshape") < 0) return NULL;
    nb_tvar out;
    return ret(nb_tape_reshape(T(self), x, nd, sh, &out), &out);
}
static PyObject *op_slice_channels(PyObject *self, PyObject *args) {
    int x;
    long long c0, n;
    if (!PyArg_ParseTuple(args, "iLL", &x, &c0, &n)) return NULL;
    nb_tvar out;
    return ret(nb_tape_slice_channels(T(self), x, c0, n, &out), &out);
}
/* Keeps a module object alive while an op on the tape holds it (until the next reset). */
static int keep_module(PyObject *self, PyObject *mod) {
    TapeObject *o = (TapeObject *)self;
    if (!o->keep && !(o->keep = PyList_New(0))) return -1;
    return PyList_Append(o->keep, mod);
}
static PyObject *op_mlp(PyObject *self, PyObject *args) {
    PyObject *mod;
    int x, w;
    if (!PyArg_ParseTuple(args, "Oii", &mod, &x, &w)) return NULL;
    nb_mlp *m = nbn_mlp_ptr(mod);
    if (!m) return NULL;
    nb_tvar out;
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_tape_mlp(T(self), m, x, w, &out);
    Py_END_ALLOW_THREADS
    if (!st && keep_module(self, mod) < 0) return NULL;
    return ret(st, &out);
}
static PyObject *op_encoding(PyObject *self, PyObject *args) {
    PyObject *mod;
    int x, p = NB_TVAR_NONE;
    if (!PyArg_ParseTuple(args, "Oi|i", &mod, &x, &p)) return NULL;
    nb_encoding *e = nbn_encoding_ptr(mod);
    if (!e) return NULL;
    nb_tvar out;
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_tape_encoding(T(self), e, x, p, &out);
    Py_END_ALLOW_THREADS
    if (!st && keep_module(self, mod) < 0) return NULL;
    return ret(st, &out);
}
/* call(function, args): a kernel-language function of a nabla Module over tape values
 * (nb_tape_call_scalars); args holds handles (int) and scalars (float). */
static PyObject *op_call(PyObject *self, PyObject *args) {
    PyObject *fo, *av;
    if (!PyArg_ParseTuple(args, "OO!", &fo, &PyTuple_Type, &av)) return NULL;
    if (!PyObject_TypeCheck(fo, (PyTypeObject *)nbp_FunctionType))
        return PyErr_Format(PyExc_TypeError, "Tape.call: expected a function of a nabla Module (module.fn), got %R",
                            fo);
    FunctionObject *fn = (FunctionObject *)fo;
    if (fn->mode != NBP_PRIMAL || fn->maps)
        return PyErr_Format(nbp_ArgumentError, "Tape.call: give the function itself (not .bwds / .fwds / .map(...)): "
                            "the tape runs its derivative in the backward");
    Py_ssize_t n = PyTuple_Size(av);
    if (n > 16) return PyErr_Format(nbp_ArgumentError, "Tape.call: %zd arguments; at most 16", n);
    nb_tvar in[16];
    double sc[16];
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GetItem(av, i);
        in[i] = NB_TVAR_NONE;
        sc[i] = 0;
        if (PyLong_Check(a)) {
            in[i] = (nb_tvar)PyLong_AsLong(a);
        } else {
            sc[i] = PyFloat_AsDouble(a);
            if (sc[i] == -1.0 && PyErr_Occurred()) return NULL;
        }
    }
    TapeObject *o = (TapeObject *)self;
    if (!o->keep_fns && !(o->keep_fns = PySet_New(NULL))) return NULL;
    if (PySet_Add(o->keep_fns, fn->module) < 0) return NULL;
    nb_tvar out;
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_tape_call_scalars(T(self), fn->f, (int)n, in, sc, &out);
    Py_END_ALLOW_THREADS
    return ret(st, &out);
}
static PyObject *op_timestep_embedding(PyObject *self, PyObject *args) {
    PyObject *ts;
    int dim;
    double maxp = 10000.0;
    if (!PyArg_ParseTuple(args, "Oi|d", &ts, &dim, &maxp)) return NULL;
    nbn_ctx c;
    PyObject *r = NULL;
    nb_tensor *h = nbn_host_f32(&c, ts, "Tape.timestep_embedding", "timesteps", 1);
    if (h) {
        nb_tvar out;
        r = ret(nb_tape_timestep_embedding(T(self), nb_tensor_numel(h), nb_tensor_data(h), dim, (float)maxp, &out), &out);
    }
    nbn_end(&c);
    return r;
}

static PyMethodDef tape_methods[] = {
    {"param", tape_param, METH_VARARGS, "param(name, shape) -> handle"},
    {"param_find", tape_param_find, METH_O, "param_find(name) -> handle"},
    {"param_info", tape_param_info, METH_O, "param_info(handle) -> (offset, count)"},
    {"buffer_view", tape_params_view, METH_O, "buffer_view(grads: bool) -> nabla.Tensor (zero-copy)"},
    {"torch_view", tape_torch_view, METH_O, "torch_view(grads: bool) -> torch tensor (zero-copy)"},
    {"init_uniform", tape_init_uniform, METH_VARARGS, "init_uniform(handle, bound, seed)"},
    {"zero_grad", tape_zero_grad, METH_NOARGS, "parameter grads := 0"},
    {"reset", tape_reset, METH_NOARGS, "forget activations"},
    {"input", (PyCFunction)(void (*)(void))tape_input, METH_VARARGS | METH_KEYWORDS, "input(data, requires_grad=False) -> handle"},
    {"backward", tape_backward, METH_O, "backward(loss)"},
    {"shape", tape_shape, METH_O, "shape(handle) -> tuple"},
    {"read", (PyCFunction)(void (*)(void))tape_read, METH_VARARGS | METH_KEYWORDS, "read(handle, grad=False, result=None) -> numpy"},
    {"read_params", (PyCFunction)(void (*)(void))tape_read_params, METH_VARARGS | METH_KEYWORDS, "read_params(grads=False, result=None)"},
    {"write_params", tape_write_params, METH_O, "write_params(array)"},
    {"stats", tape_stats, METH_NOARGS, "dict"},
    {"set_precision", tape_set_precision, METH_O, "set_precision('fp32'|'tf32'|'bf16')"},
    {"linear", op_linear, METH_VARARGS, "linear(x, w, b=-1)"},
    {"conv2d", op_conv2d, METH_VARARGS, "conv2d(x, w, b=-1, stride=1, pad=0)"},
    {"group_norm", op_group_norm, METH_VARARGS, "group_norm(x, groups, gamma=-1, beta=-1, eps=1e-5)"},
    {"silu", op_silu, METH_O, "silu(x)"},
    {"relu", op_relu, METH_O, "relu(x)"},
    {"softmax", op_softmax, METH_O, "softmax(x): over the last dim"},
    {"linear_relu", op_linear_relu, METH_VARARGS, "linear_relu(x, w, b=-1)"},
    {"upsample2x", op_upsample2x, METH_O, "upsample2x(x)"},
    {"avgpool2x", op_avgpool2x, METH_O, "avgpool2x(x)"},
    {"transpose", op_transpose, METH_O, "transpose(x)"},
    {"add", op_add, METH_VARARGS, "add(a, b)"},
    {"add_channel", op_add_channel, METH_VARARGS, "add_channel(x, c)"},
    {"concat", op_concat, METH_VARARGS, "concat(a, b)"},
    {"mse", op_mse, METH_VARARGS, "mse(pred, target)"},
    {"attention", op_attention, METH_VARARGS, "attention(q, k, v)"},
    {"reshape", op_reshape, METH_VARARGS, "reshape(x, shape)"},
    {"slice_channels", op_slice_channels, METH_VARARGS, "slice_channels(x, c0, count)"},
    {"mlp", op_mlp, METH_VARARGS, "mlp(CMlp, x, w) -> handle (nb_tape_mlp)"},
    {"encoding", op_encoding, METH_VARARGS, "encoding(CEncoding, x, params=-1) -> handle (nb_tape_encoding)"},
    {"call", op_call, METH_VARARGS, "call(function, (handle or float, ...)) -> handle (nb_tape_call_scalars)"},
    {"timestep_embedding", op_timestep_embedding, METH_VARARGS, "timestep_embedding(timesteps, dim, max_period=10000)"},
    {NULL},
};
static PyGetSetDef tape_getset[] = {
    {"precision", tape_get_precision, NULL, "fp32 | tf32 | bf16", NULL},
    {"generation", tape_get_gen, NULL, "resets so far", NULL},
    {"n_params", tape_get_n_params, NULL, "floats in the parameter buffer", NULL},
    {"device", tape_get_device, NULL, "the device", NULL},
    {NULL},
};
static PyType_Slot tape_slots[] = {
    {Py_tp_dealloc, tape_dealloc}, {Py_tp_methods, tape_methods}, {Py_tp_getset, tape_getset},
    {Py_tp_doc, "nb_tape (use nabla.nn.Tape)"}, {0, NULL},
};
static PyType_Spec tape_spec = {"nabla._nabla.CTape", sizeof(TapeObject), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, tape_slots};

static PyMethodDef tape_module_fns[] = {
    {"tape_create", (PyCFunction)(void (*)(void))py_tape_create, METH_VARARGS | METH_KEYWORDS, "tape_create(device=None)"},
    {NULL},
};

int nbn_tape_init(PyObject *mod) {
    if (!(TapeType = PyType_FromSpec(&tape_spec))) return -1;
    Py_INCREF(TapeType);
    if (PyModule_AddObject(mod, "CTape", TapeType) < 0) return -1;
    return PyModule_AddFunctions(mod, tape_module_fns);
}

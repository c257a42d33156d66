/* Explicit-block kernel launches for the Python layer (slangtorch's launchRaw; docs/PYTHON.md):
 *
 *   Function.launch_raw(block, grid, mode="primal", args={path: value | (primal, grad)}, defer_checks=None)
 *       block, grid: (x, y, z) ints (fewer given: the rest 1). mode "primal", "fwd" or "bwd"
 *       (slangtorch's m.f / m.f.fwd / m.f.bwd). args keys are leaf paths ("x", "foo.A",
 *       "mlp.layers[1].weights"); a DiffTensor leaf takes a (primal, grad) pair (or a 1-tuple /
 *       bare tensor: no gradient), any other leaf a value: a torch tensor (zero-copy; launched on
 *       torch's current stream when all arrays are torch CUDA tensors: torch_order), a numpy
 *       array, a nabla.Tensor, a number or a nested sequence (a vector, matrix or array host
 *       value). Returns None; tensors are written in place.
 *       defer_checks: an out-of-range index is reported at the module's next check point (its
 *       next launch or call, Module.check()) rather than by this launch, which then does not wait
 *       for the GPU (nb_call_defer_checks); None: deferred on CUDA, at once on the CPU.
 *   Module.check() waits for the module's device and raises the pending error of a deferred launch.
 *   Function.kernel_params() -> [ {path, param, param_name, dir, is_tensor, is_diff_tensor,
 *       tensor_rank, dtype, value_shape}, ... ] one dict per leaf (overload 0), depth-first.
 *   Function.param_types() -> {path: type name} of its struct-valued nodes ("foo": "Foo",
 *       "mlp.layers": "Linear<16>[3]", "mlp.layers[0]": "Linear<16>").
 *   Function.is_kernel -> bool ([Kernel] / [CudaKernel]).
 *   CModule.functions() -> [name, ...] the module's callable functions.
 * Everything else (namedtuples, pair normalisation, slang-torch's errors) is python/nabla/slangtorch.py.
 */
#include <string.h>

#include "nbpy.h"

#define LR_MAXA 128 /* converted arrays per launch: the primal and gradient of up to 64 leaves */

static int check(nb_status st) {
    if (st) {
        nbp_raise(st);
        return -1;
    }
    return 0;
}

/* An int or (x[, y[, z]]) of ints into out (missing ones 1); the library checks the ranges. */
static int dims3(PyObject *o, const char *what, int64_t out[3]) {
    out[0] = out[1] = out[2] = 1;
    if (PyLong_Check(o) && !PyBool_Check(o)) {
        out[0] = PyLong_AsLongLong(o);
        return PyErr_Occurred() ? -1 : 0;
    }
    Py_ssize_t n = PySequence_Check(o) && !PyUnicode_Check(o) ? PySequence_Size(o) : -1;
    if (n < 0) PyErr_Clear();
    int ok = n >= 1 && n <= 3;
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        PyObject *v = PySequence_GetItem(o, i);
        ok = v && PyLong_Check(v) && !PyBool_Check(v);
        if (ok) out[i] = PyLong_AsLongLong(v);
        Py_XDECREF(v);
    }
    if (!ok || PyErr_Occurred()) {
        if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "launch_raw: %s must be a tuple of 1 to 3 ints, got %R", what, o);
        return -1;
    }
    return 0;
}

#define LR_SMALL 16 /* converted arrays kept on the stack (launches of up to 8 arguments) */

typedef struct lr_state {
    nbp_callctx cx;
    int na, cap;
    nbp_arg *a; /* small, or cap of them on the heap: sized before binding, never moved (an
                 * nbp_arg may point into itself: vdata = &dval, Py_buffer shape = &len) */
    nbp_arg small[LR_SMALL];
} lr_state;

/* The next free nbp_arg (zeroed); slots are zeroed one at a time, not the whole table per call. */
static nbp_arg *next_arg(lr_state *s) {
    if (s->na >= s->cap) {
        PyErr_Format(nbp_ArgumentError, "launch_raw: more than %d arrays", s->cap);
        return NULL;
    }
    nbp_arg *a = &s->a[s->na++];
    memset(a, 0, sizeof *a);
    return a;
}

static nbp_arg *convert(lr_state *s, const char *path, PyObject *o, int want_write) {
    nbp_arg *a = next_arg(s);
    if (!a || nbp_convert(&s->cx, o, want_write, a) < 0) return NULL;
    /* a torch tensor or nabla.Tensor on another device than the module's is an error, never a
     * silent copy (numpy arrays are host data: staged and written back, as for every call) */
    nb_device *from = NULL;
    if (a->src == SRC_TENSOR) from = nb_tensor_device(((TensorObject *)o)->t);
    int other = from ? from != s->cx.dev : 0;
    char tdev[32] = "";
    if (a->src == SRC_TORCH) {
        /* the module's device index (-1: the CPU) against the tensor's (formatted only on error) */
        int mod_idx = nb_device_get_kind(s->cx.dev) == NB_DEVICE_CUDA ? nb_device_get_info(s->cx.dev)->index : -1;
        other = a->torch_dev != mod_idx;
        if (other) snprintf(tdev, sizeof tdev, a->torch_dev < 0 ? "cpu" : "cuda:%d", a->torch_dev);
    }
    if (other) {
        PyErr_Format(nbp_DeviceError, "launch_raw: '%s' is on %s but the module runs on %s: move it (nabla does not "
                     "copy tensors between devices)", path, from ? nb_device_name(from) : tdev, nb_device_name(s->cx.dev));
        return NULL;
    }
    if (a->src > s->cx.src) s->cx.src = a->src;
    return a;
}

static int find_leaf(nb_func *f, const char *path, nb_leaf_info *li) {
    int n = nb_func_leaf_count(f, 0);
    for (int j = 0; j < n; j++)
        if (nb_func_leaf(f, 0, j, li) == NB_OK && !strcmp(li->path, path)) return j;
    return -1;
}

/* A gradient tensor of a DiffTensor leaf (a value, not a host list). */
static int bind_grad(lr_state *s, nb_call *c, const char *path, PyObject *g) {
    if (g == Py_None) return 0;
    nbp_arg *a = convert(s, path, g, 2);
    if (!a) return -1;
    if (!a->t) {
        PyErr_Format(PyExc_TypeError, "launch_raw: the gradient of '%s' must be a tensor, got %R", path, g);
        return -1;
    }
    return check(nb_call_grad_named(c, path, a->t));
}

static int bind_one(lr_state *s, nb_func *f, nb_call *c, PyObject *key, PyObject *v) {
    const char *path = PyUnicode_Check(key) ? PyUnicode_AsUTF8AndSize(key, NULL) : NULL;
    if (!path) {
        if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "launch_raw: argument names must be str, got %R", key);
        return -1;
    }
    nb_leaf_info li;
    int known = find_leaf(f, path, &li) >= 0;
    PyObject *grad = NULL;
    if (known && li.is_diff_tensor && PyTuple_Check(v) && (PyTuple_Size(v) == 1 || PyTuple_Size(v) == 2)) {
        if (PyTuple_Size(v) == 2) grad = PyTuple_GetItem(v, 1);
        v = PyTuple_GetItem(v, 0);
    }
    /* tensors may be written through (want_write 2); unknown names reach the library's error */
    nbp_arg *a = convert(s, path, v, known && li.is_tensor ? 2 : 0);
    if (!a) return -1;
    nb_status st = a->t ? nb_call_arg_named(c, path, a->t)
                        : nb_call_arg_value_named(c, path, a->vdtype, a->vndim, a->vshape, a->vdata);
    if (check(st) < 0) return -1;
    return grad ? bind_grad(s, c, path, grad) : 0;
}

/* nb_streams wrapping torch's current streams (nb_stream_wrap_native), kept for the process: a
 * program uses a few streams; past NSTREAMS others fall back to ordering nabla's stream. */
#define NSTREAMS 16
static struct {
    nb_device *dev;
    void *native;
    nb_stream *s;
} g_streams[NSTREAMS];

static nb_stream *torch_stream(nb_device *dev, void *native) {
    for (int i = 0; i < NSTREAMS; i++) {
        if (g_streams[i].s && g_streams[i].dev == dev && g_streams[i].native == native) return g_streams[i].s;
        if (!g_streams[i].s) {
            if (nb_stream_wrap_native(dev, native, &g_streams[i].s) != NB_OK) return NULL;
            g_streams[i].dev = dev;
            g_streams[i].native = native;
            return g_streams[i].s;
        }
    }
    return NULL;
}

/* Where a launch that bound torch CUDA tensors runs: on torch's current stream when every array
 * is a torch tensor of the module's device (nothing of nabla's stream to wait for: no ordering
 * either way), else on nabla's stream after it waited for torch's (torch's then waits for it:
 * nbp_torch_after). Returns 1 when launched on torch's stream, 0 if not, -1 on error. */
static int torch_order(lr_state *s, nb_call *c) {
    if (!s->cx.torch_cuda) return 0;
    int all = s->cx.torch_nbdev == s->cx.dev;
    for (int i = 0; all && i < s->na; i++)
        if (s->a[i].t && (s->a[i].src != SRC_TORCH || s->a[i].user)) all = 0;
    nb_stream *ts = all ? torch_stream(s->cx.dev, s->cx.torch_stream) : NULL;
    if (ts && nb_call_set_stream(c, ts) == NB_OK) return 1;
    return check(nb_stream_wait_native(nb_device_stream(s->cx.torch_nbdev), s->cx.torch_stream));
}

PyObject *nbp_func_launch_raw(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"block", "grid", "mode", "args", "defer_checks", NULL};
    PyObject *blk = NULL, *grd = NULL, *dict = NULL, *defer = Py_None;
    const char *mode = "primal";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|sOO:launch_raw", kwl, &blk, &grd, &mode, &dict, &defer)) return NULL;
    FunctionObject *fn = (FunctionObject *)self;
    int64_t b[3], g[3];
    if (dims3(blk, "block", b) < 0 || dims3(grd, "grid", g) < 0) return NULL;
    nb_diff_mode md = !strcmp(mode, "primal") ? NB_MODE_PRIMAL : !strcmp(mode, "fwd") ? NB_MODE_FWD
                      : !strcmp(mode, "bwd") ? NB_MODE_BWD : (nb_diff_mode)-1;
    if ((int)md < 0) {
        PyErr_Format(PyExc_ValueError, "launch_raw: mode must be \"primal\", \"fwd\" or \"bwd\", got \"%s\"", mode);
        return NULL;
    }
    if (dict && dict != Py_None && !PyDict_Check(dict)) {
        PyErr_Format(PyExc_TypeError, "launch_raw: args must be a dict {path: value}, got %R", dict);
        return NULL;
    }
    lr_state s;
    memset(&s.cx, 0, sizeof s.cx);
    s.na = 0;
    /* at most a primal and a gradient per argument (LR_MAXA in all) */
    Py_ssize_t nargs = dict && dict != Py_None ? PyDict_Size(dict) : 0;
    s.cap = nargs * 2 <= LR_SMALL ? LR_SMALL : nargs * 2 <= LR_MAXA ? (int)nargs * 2 : LR_MAXA;
    s.a = s.cap == LR_SMALL ? s.small : PyMem_Malloc((size_t)s.cap * sizeof(nbp_arg));
    if (!s.a) return PyErr_NoMemory();
    s.cx.dev = nb_module_device(((ModuleObject *)fn->module)->m);
    s.cx.lazy_order = 1; /* (torch_order decides after binding) */
    PyObject *ret = NULL;
    nb_call *c = NULL;
    if (check(nb_call_begin(fn->f, &c)) < 0) goto done;
    if (md != NB_MODE_PRIMAL && check(nb_call_set_mode(c, md)) < 0) goto done;
    /* bounds errors: CUDA reports them at the module's next check point (no wait per launch);
     * the CPU's launch has finished, so at once (defer_checks=True/False overrides) */
    if (defer == Py_None ? nb_device_get_kind(s.cx.dev) == NB_DEVICE_CUDA : PyObject_IsTrue(defer) == 1)
        nb_call_defer_checks(c);
    if (dict && dict != Py_None) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(dict, &pos, &k, &v))
            if (bind_one(&s, fn->f, c, k, v) < 0) goto done;
    }
    {
        int on_torch = torch_order(&s, c);
        if (on_torch < 0) goto done;
        nb_status st;
        nb_call *cc = c;
        c = NULL; /* (run frees it) */
        Py_BEGIN_ALLOW_THREADS
        st = nb_call_run_blocks(cc, b, g);
        Py_END_ALLOW_THREADS
        if (!on_torch && nbp_torch_after(&s.cx) < 0 && !st) goto done;
        if (check(st) < 0) goto done;
    }
    for (int i = 0; i < s.na; i++)
        if (nbp_arg_writeback(&s.a[i]) < 0) goto done;
    ret = Py_None;
    Py_INCREF(ret);
done:
    if (c) nb_call_free(c);
    for (int i = 0; i < s.na; i++) nbp_arg_release(&s.a[i]);
    if (s.a != s.small) PyMem_Free(s.a);
    return ret;
}

static int set_item(PyObject *d, const char *k, PyObject *v) {
    if (!v) return -1;
    int r = PyDict_SetItemString(d, k, v);
    Py_DECREF(v);
    return r;
}

PyObject *nbp_func_kernel_params(PyObject *self, PyObject *unused) {
    (void)unused;
    nb_func *f = ((FunctionObject *)self)->f;
    int n = nb_func_leaf_count(f, 0);
    PyObject *out = PyList_New(0);
    static const char *dirs[] = {"in", "out", "inout"};
    for (int j = 0; out && j < n; j++) {
        nb_leaf_info li;
        if (check(nb_func_leaf(f, 0, j, &li)) < 0) goto fail;
        PyObject *d = PyDict_New();
        if (!d || PyList_Append(out, d) < 0) {
            Py_XDECREF(d);
            goto fail;
        }
        Py_DECREF(d);
        PyObject *shape = PyTuple_New(li.value_rank > 0 ? li.value_rank : 0);
        for (int k = 0; shape && k < li.value_rank; k++) PyTuple_SetItem(shape, k, PyLong_FromLongLong(li.value_shape[k]));
        const char *pn = li.param >= 0 ? nb_func_param_name(f, 0, li.param) : "";
        if (set_item(d, "path", PyUnicode_FromString(li.path)) < 0 || set_item(d, "param", PyLong_FromLong(li.param)) < 0 ||
            set_item(d, "param_name", PyUnicode_FromString(pn ? pn : "")) < 0 ||
            set_item(d, "dir", PyUnicode_FromString(dirs[li.dir >= 0 && li.dir <= 2 ? li.dir : 0])) < 0 ||
            set_item(d, "is_tensor", PyBool_FromLong(li.is_tensor)) < 0 ||
            set_item(d, "is_diff_tensor", PyBool_FromLong(li.is_diff_tensor)) < 0 ||
            set_item(d, "tensor_rank", PyLong_FromLong(li.tensor_rank)) < 0 ||
            set_item(d, "dtype", PyUnicode_FromString(nb_dtype_name(li.dtype))) < 0 || set_item(d, "value_shape", shape) < 0)
            goto fail;
    }
    return out;
fail:
    Py_XDECREF(out);
    return NULL;
}

PyObject *nbp_func_param_types(PyObject *self, PyObject *unused) {
    (void)unused;
    nb_func *f = ((FunctionObject *)self)->f;
    int n = nb_func_struct_count(f, 0);
    PyObject *out = PyDict_New();
    for (int i = 0; out && i < n; i++) {
        const char *path = NULL, *tn = NULL;
        if (check(nb_func_struct_node(f, 0, i, &path, &tn)) < 0 || set_item(out, path, PyUnicode_FromString(tn)) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

PyObject *nbp_func_get_is_kernel(PyObject *self, void *unused) {
    (void)unused;
    return PyBool_FromLong(nb_func_is_kernel(((FunctionObject *)self)->f, 0));
}

PyObject *nbp_module_check(PyObject *self, PyObject *unused) {
    (void)unused;
    nb_status st;
    nb_module *m = ((ModuleObject *)self)->m;
    Py_BEGIN_ALLOW_THREADS
    st = nb_module_check(m);
    Py_END_ALLOW_THREADS
    if (check(st) < 0) return NULL;
    Py_RETURN_NONE;
}

PyObject *nbp_module_functions(PyObject *self, PyObject *unused) {
    (void)unused;
    nb_module *m = ((ModuleObject *)self)->m;
    int n = nb_module_function_names(m, NULL, 0);
    const char **names = PyMem_Calloc((size_t)(n ? n : 1), sizeof(char *));
    if (!names) return PyErr_NoMemory();
    nb_module_function_names(m, names, n);
    PyObject *out = PyList_New(n);
    for (int i = 0; out && i < n; i++) {
        PyObject *s = PyUnicode_FromString(names[i]);
        if (!s) {
            Py_CLEAR(out);
            break;
        }
        PyList_SetItem(out, i, s);
    }
    PyMem_Free(names);
    return out;
}

/* nabla functions: m.f(args…), .map, .bwds, .fwds, .constants, results that follow the inputs.
 *
 * One call: special keywords (_result, _grads, _dout, _tangents) are split off; torch tensors that
 * require grad (with grad mode on) divert the call to nabla's torch.autograd.Function (a Python
 * hook, nabla/_torch.py); every other argument is converted (convert.c) and bound by position or
 * name (dicts bind struct fields "s.x"); the call runs with the GIL released; outputs staged on
 * another device are copied back only after success. */
#include "nbpy.h"

#include <stddef.h>
#include <string.h>

#define NBP_MAXA 64

static void func_dealloc(PyObject *self) {
    FunctionObject *f = (FunctionObject *)self;
    PyTypeObject *tp = Py_TYPE(self);
    Py_XDECREF(f->module);
    Py_XDECREF(f->maps);
    Py_XDECREF(f->diff);
    PyObject_Free(self);
    Py_DECREF(tp);
}

PyObject *nbp_func_new(nb_func *f, PyObject *module, int mode, PyObject *maps) {
    FunctionObject *o = PyObject_New(FunctionObject, (PyTypeObject *)nbp_FunctionType);
    if (!o) return NULL;
    o->f = f;
    o->module = module;
    Py_INCREF(module);
    o->mode = mode;
    o->maps = maps;
    Py_XINCREF(maps);
    o->diff = NULL;
    int n = nb_func_param_count(f, 0);
    o->nparams = n < 32 ? n : 32;
    memset(o->ptensor, 0, sizeof o->ptensor);
    o->has_struct = 0;
    for (int i = 0; i < o->nparams; i++) {
        o->pnames[i] = nb_func_param_name(f, 0, i);
        o->pdirs[i] = (int)nb_func_param_dir(f, 0, i);
    }
    int nl = nb_func_leaf_count(f, 0);
    for (int i = 0; i < nl; i++) {
        nb_leaf_info li;
        if (nb_func_leaf(f, 0, i, &li) == NB_OK && li.param >= 0 && li.param < o->nparams && li.is_tensor)
            o->ptensor[li.param] = 1;
    }
    /* a struct parameter of values only (no tensor fields: DiffTensorView, structs of views are
     * slangtorch's) may be given a flat-layout tensor (SlangPy spelling, spy.c's hook) */
    unsigned char dotted[32] = {0}, tens[32] = {0};
    for (int i = 0; i < nl; i++) {
        nb_leaf_info li;
        if (nb_func_leaf(f, 0, i, &li) != NB_OK || li.param < 0 || li.param >= o->nparams) continue;
        if (li.path && strchr(li.path, '.')) dotted[li.param] = 1;
        if (li.is_tensor) tens[li.param] = 1;
    }
    for (int i = 0; i < o->nparams; i++)
        if (dotted[i] && !tens[i]) o->has_struct = 1;
    /* a struct result: spy.c's hook turns it into a struct tensor / structured array */
    nb_leaf_info ri;
    o->ret_struct = mode == NBP_PRIMAL && nb_func_result_count(f, 0) > 0 &&
                    (nb_func_result_count(f, 0) > 1 ||
                     (nb_func_result_leaf(f, 0, 0, &ri) == NB_OK && ri.path && strcmp(ri.path, "_result") != 0));
    return (PyObject *)o;
}

/* Parameter index of a name or field path ("s.x" -> s), -1 if unknown. */
static int param_index(FunctionObject *fn, const char *name) {
    size_t n = strcspn(name, ".");
    for (int i = 0; i < fn->nparams; i++)
        if (fn->pnames[i] && strlen(fn->pnames[i]) == n && !strncmp(fn->pnames[i], name, n)) return i;
    return -1;
}

static int key_index(FunctionObject *fn, PyObject *key) {
    if (PyLong_Check(key)) {
        long i = PyLong_AsLong(key);
        if (i < 0 || i >= fn->nparams) {
            PyErr_Format(nbp_ArgumentError, "%s has no parameter %ld", nb_func_name(fn->f), i);
            return -1;
        }
        return (int)i;
    }
    const char *s = PyUnicode_Check(key) ? PyUnicode_AsUTF8AndSize(key, NULL) : NULL;
    if (!s) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "parameters are named by str or int");
        return -1;
    }
    int i = param_index(fn, s);
    if (i < 0) PyErr_Format(nbp_ArgumentError, "%s has no parameter '%s' (%s)", nb_func_name(fn->f), s, nb_func_signature(fn->f, 0));
    return i;
}

typedef struct call_state {
    FunctionObject *fn;
    nb_call *c;
    nbp_callctx cx;
    int na, nstr;
    nbp_arg *param_arg[32]; /* the argument bound to parameter i as a whole (not by fields) */
    char *strs[NBP_MAXA];
    nbp_arg a[NBP_MAXA]; /* last: only the first na are initialised (nbp_convert clears each) */
} call_state;

static nbp_arg *new_arg(call_state *s) {
    if (s->na >= NBP_MAXA) {
        PyErr_Format(nbp_ArgumentError, "more than %d array arguments in one call", NBP_MAXA);
        return NULL;
    }
    return &s->a[s->na++];
}

static int check(nb_status st) {
    if (st) {
        nbp_raise(st);
        return -1;
    }
    return 0;
}

static int convert_arg(call_state *s, PyObject *o, int want_write, nbp_arg **out) {
    nbp_arg *a = new_arg(s);
    if (!a) return -1;
    if (nbp_convert(&s->cx, o, want_write, a) < 0) return -1;
    if (a->src > s->cx.src) s->cx.src = a->src;
    *out = a;
    return 0;
}

/* A tensor for host values (for setters that take only tensors: dout, tangents). */
static int as_tensor(call_state *s, nbp_arg *a) {
    if (a->t) return 0;
    return check(nb_tensor_from_host(s->cx.dev, a->vdtype, a->vndim, a->vshape, a->vdata, &a->t));
}

/* types.SimpleNamespace: an attribute-style struct value, bound like a dict. */
static int is_namespace(PyObject *o) {
    if (PyDict_Check(o) || PyObject_CheckBuffer(o) || nbp_is_tensor(o) || PyLong_Check(o) || PyFloat_Check(o) ||
        PyList_Check(o) || PyTuple_Check(o) || PyUnicode_Check(o))
        return 0;
    static PyObject *ns_type; /* types.SimpleNamespace, looked up once */
    if (!ns_type) {
        PyObject *types = PyImport_ImportModule("types");
        ns_type = types ? PyObject_GetAttrString(types, "SimpleNamespace") : NULL;
        Py_XDECREF(types);
        if (!ns_type) {
            PyErr_Clear();
            return 0;
        }
    }
    return (PyObject *)Py_TYPE(o) == ns_type;
}

/* The fields of a struct value: a dict, or a SimpleNamespace's __dict__ (new reference). */
static PyObject *struct_fields(PyObject *o) {
    if (PyDict_Check(o)) {
        Py_INCREF(o);
        return o;
    }
    return PyObject_GetAttrString(o, "__dict__");
}

/* A path string that lives until the call ends (s->strs): "%s.%s" of base and key. */
static const char *keep_path(call_state *s, const char *a, const char *b, const char *c) {
    if (s->nstr >= NBP_MAXA) {
        PyErr_SetString(nbp_ArgumentError, "too many struct fields in one call");
        return NULL;
    }
    size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
    char *full = PyMem_Malloc(n);
    if (!full) {
        PyErr_NoMemory();
        return NULL;
    }
    snprintf(full, n, "%s%s%s", a, b, c);
    s->strs[s->nstr++] = full;
    return full;
}

/* Calls cb(s, "base.field", value) for each field of a struct value (dict or SimpleNamespace). */
static int each_field(call_state *s, const char *base, PyObject *o,
                      int (*cb)(call_state *, const char *, PyObject *)) {
    PyObject *d = struct_fields(o);
    if (!d) return -1;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    int r = 0;
    while (r == 0 && PyDict_Next(d, &pos, &k, &v)) {
        const char *ks = PyUnicode_Check(k) ? PyUnicode_AsUTF8AndSize(k, NULL) : NULL;
        const char *full = ks ? keep_path(s, base, ".", ks) : NULL;
        if (!ks && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "struct field names must be str");
        r = full ? cb(s, full, v) : -1;
    }
    Py_DECREF(d);
    return r;
}

static int bind(call_state *s, int index, const char *name, PyObject *o);
static int bind_field(call_state *s, const char *path, PyObject *v) { return bind(s, -1, path, v); }

static int bind(call_state *s, int index, const char *name, PyObject *o) {
    int gr = nbp_bind_generator(s->c, index, name, o); /* call_id(), grid(), … (spy_gen.c) */
    if (gr) return gr < 0 ? -1 : 0;
    if (PyDict_Check(o) || is_namespace(o)) { /* struct parameter: field by field */
        const char *base = name ? name : (index < s->fn->nparams ? s->fn->pnames[index] : NULL);
        if (!base) {
            PyErr_Format(nbp_ArgumentError, "%s has no parameter %d", nb_func_name(s->fn->f), index);
            return -1;
        }
        return each_field(s, base, o, bind_field);
    }
    int pi = name ? param_index(s->fn, name) : index;
    int known = pi >= 0 && pi < s->fn->nparams;
    int want_write = known && s->fn->pdirs[pi] != NB_ARG_IN && s->fn->mode != NBP_BWD ? 1
                     : known && s->fn->ptensor[pi] ? 2 : 0;
    size_t head = name ? strcspn(name, ".") : 0; /* bwds(**{"p_grad.c": dc}): a gradient, written */
    if (!known && s->fn->mode == NBP_BWD && head > 5 && !strncmp(name + head - 5, "_grad", 5)) want_write = 1;
    nbp_arg *a;
    if (convert_arg(s, o, want_write, &a) < 0) return -1;
    nb_status st;
    if (a->t) st = name ? nb_call_arg_named(s->c, name, a->t) : nb_call_arg(s->c, index, a->t);
    else if (name) st = nb_call_arg_value_named(s->c, name, a->vdtype, a->vndim, a->vshape, a->vdata);
    else st = nb_call_arg_value(s->c, index, a->vdtype, a->vndim, a->vshape, a->vdata);
    if (check(st) < 0) return -1;
    if (known && (!name || !strchr(name, '.'))) s->param_arg[pi] = a;
    /* bwds: a nabla.Tensor with a .grad accumulates its gradient there (SlangPy) */
    if (s->fn->mode == NBP_BWD && nbp_is_tensor(o) && ((TensorObject *)o)->grad && pi >= 0) {
        nbp_arg *g;
        if (convert_arg(s, ((TensorObject *)o)->grad, 1, &g) < 0) return -1;
        if (check(nb_call_grad(s->c, pi, g->t)) < 0) return -1;
    }
    return 0;
}

/* Gradient arrays of a struct parameter's fields, .bwds(_grads={"p": {"c": dc, "q": {"x": dx}}})
 * or {"p.c": dc}: bound to the gradient wrapper's parameter "p_grad" field by field (the spelling
 * **{"p_grad.c": dc} names the same thing). The arrays are written (want_write 1), so arrays
 * staged through another device are copied back. `field` is ".c..." of a dotted key, or NULL. */
static int bind_grad_path(call_state *s, const char *path, PyObject *v) {
    if (PyDict_Check(v) || is_namespace(v)) return each_field(s, path, v, bind_grad_path);
    nbp_arg *a;
    if (convert_arg(s, v, 1, &a) < 0) return -1;
    if (!a->t) {
        PyErr_Format(PyExc_TypeError, "_grads: the gradient for '%s' must be an array (gradients accumulate into it)", path);
        return -1;
    }
    return check(nb_call_arg_named(s->c, path, a->t));
}

/* _result={"pos": P, "t": {"x": X}} (or {"t.x": X}) for a struct result: each field is written into
 * its array (nb_call_result_named "_result.pos"); fields not given are allocated. SlangPy's struct
 * tensors pass their field views this way (python/nabla/_spy_struct.py). */
static int bind_result_path(call_state *s, const char *path, PyObject *v) {
    if (PyDict_Check(v) || is_namespace(v)) return each_field(s, path, v, bind_result_path);
    nbp_arg *a;
    if (convert_arg(s, v, 1, &a) < 0) return -1;
    if (!a->t) {
        PyErr_Format(PyExc_TypeError, "_result: the field '%s' must be given an array to write into", path);
        return -1;
    }
    return check(nb_call_result_named(s->c, path, a->t));
}

static int bind_grad_fields(call_state *s, int pi, const char *field, PyObject *v) {
    const char *path = keep_path(s, s->fn->pnames[pi] ? s->fn->pnames[pi] : "", "_grad", field ? field : "");
    return path ? bind_grad_path(s, path, v) : -1;
}

/* nb tensor -> the Python kind the caller gets (steals t). Shared with nn_*.c (nbpy.h). */
PyObject *nbp_wrap_result(nbp_callctx *cx, int kind, nb_tensor *t) {
    if (kind == SRC_TORCH) {
        if (!nbp_T.loaded) {
            PyObject *m = PyImport_ImportModule("torch");
            if (!m) {
                nb_tensor_free(t);
                return NULL;
            }
            Py_DECREF(m);
            nbp_is_torch(Py_None); /* loads the torch cache */
        }
        nb_device *target = cx->torch_nbdev ? cx->torch_nbdev : NULL;
        if (!target && cx->like) target = NULL; /* a torch cpu tensor: results on the cpu */
        if (cx->like && !cx->torch_cuda) {
            PyObject *cpu = nbp_device_get("cpu");
            if (!cpu) {
                nb_tensor_free(t);
                return NULL;
            }
            target = ((DeviceObject *)cpu)->dev;
            Py_DECREF(cpu);
        }
        if (target && target != nb_tensor_device(t)) {
            nb_tensor *c = NULL;
            nb_status st;
            Py_BEGIN_ALLOW_THREADS
            st = nb_tensor_to(t, target, &c);
            Py_END_ALLOW_THREADS
            nb_tensor_free(t);
            if (st) return nbp_raise(st);
            t = c;
        }
        if (!nbp_T.from_dlpack) {
            nb_tensor_free(t);
            return PyErr_Format(nbp_UnsupportedError, "this torch has no DLPack import");
        }
        int cuda = nb_device_get_kind(nb_tensor_device(t)) == NB_DEVICE_CUDA;
        void *consumer = cx->torch_stream;
        if (cuda && !cx->torch_cuda) {
            /* no torch CUDA input ordered the streams: torch's current stream waits for ours */
            nb_device *d = nb_tensor_device(t);
            nb_status st = NB_OK;
            if (nbp_torch_current_stream(nb_device_get_info(d)->index, &consumer) < 0 ||
                (st = nb_native_wait_stream(consumer, nb_device_stream(d))) != NB_OK) {
                nb_tensor_free(t);
                return st ? nbp_raise(st) : NULL;
            }
        }
        int is_bool = nb_tensor_dtype(t) == NB_BOOL; /* older torch lacks DLPack bool: u8 + view */
        PyObject *cap = nbp_dlpack_capsule(t, consumer, cuda, is_bool);
        nb_tensor_free(t);
        if (!cap) return NULL;
        PyObject *r = PyObject_CallFunctionObjArgs(nbp_T.from_dlpack, cap, NULL);
        Py_DECREF(cap);
        if (r && is_bool && nbp_T.dtypes[NB_BOOL]) {
            PyObject *v = PyObject_CallMethod(r, "view", "O", nbp_T.dtypes[NB_BOOL]);
            Py_DECREF(r);
            r = v;
        }
        return r;
    }
    if (kind == SRC_PY && nb_tensor_ndim(t) == 0) {
        unsigned char buf[16] = {0};
        nb_dtype dt = nb_tensor_dtype(t);
        nb_status st;
        Py_BEGIN_ALLOW_THREADS
        st = nb_tensor_to_host(t, buf, nb_dtype_size(dt));
        Py_END_ALLOW_THREADS
        if (st) {
            nb_tensor_free(t);
            return nbp_raise(st);
        }
        double d = 0;
        nb_convert(&d, NB_F64, buf, dt, 1);
        nb_tensor_free(t);
        if (dt == NB_BOOL) return PyBool_FromLong(d != 0);
        if (nb_dtype_is_float(dt)) return PyFloat_FromDouble(d);
        return PyLong_FromDouble(d);
    }
    if (kind == SRC_NUMPY || kind == SRC_PY) {
        if (kind == SRC_PY && !nbp_numpy(1)) {
            PyErr_Clear(); /* no numpy: a nabla.Tensor */
            return nbp_tensor_new(t, NULL);
        }
        PyObject *r = nbp_tensor_to_numpy(t);
        nb_tensor_free(t);
        return r;
    }
    return nbp_tensor_new(t, NULL);
}

static int parse_kind(PyObject *o, int *kind) {
    const char *s = PyUnicode_AsUTF8AndSize(o, NULL);
    if (!s) return -1;
    if (!strcmp(s, "numpy")) *kind = SRC_NUMPY;
    else if (!strcmp(s, "tensor")) *kind = SRC_TENSOR;
    else if (!strcmp(s, "torch")) *kind = SRC_TORCH;
    else {
        PyErr_Format(nbp_ArgumentError, "_result='%s': expected \"numpy\", \"tensor\", \"torch\" or an array", s);
        return -1;
    }
    return 0;
}

/* 1 if any torch argument requires grad and grad mode is on. */
static int wants_autograd(PyObject *args, PyObject *kw) {
    if (!nbp_autograd_hook || (!nbp_T.loaded && !nbp_torch_load())) return 0;
    int any = 0;
    Py_ssize_t n = PyTuple_Size(args);
    for (Py_ssize_t i = 0; i <= n && !any; i++) {
        PyObject *o = i < n ? PyTuple_GetItem(args, i) : NULL;
        if (!o) break;
        if (PyObject_TypeCheck(o, (PyTypeObject *)nbp_T.Tensor)) {
            PyObject *r = PyObject_GetAttr(o, nbp_str_requires_grad);
            if (!r) return -1;
            any = r == Py_True;
            Py_DECREF(r);
        }
    }
    if (kw && !any) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (!any && PyDict_Next(kw, &pos, &k, &v))
            if (PyObject_TypeCheck(v, (PyTypeObject *)nbp_T.Tensor)) {
                PyObject *r = PyObject_GetAttr(v, nbp_str_requires_grad);
                if (!r) return -1;
                any = r == Py_True;
                Py_DECREF(r);
            }
    }
    if (!any || !nbp_T.is_grad_enabled) return 0;
    PyObject *g = PyObject_CallObject(nbp_T.is_grad_enabled, NULL);
    if (!g) return -1;
    int on = g == Py_True;
    Py_DECREF(g);
    return on;
}

static PyObject *do_call_spy(PyObject *self, PyObject *args, PyObject *kw, const int64_t *grid, int spy_done);
static PyObject *do_call(PyObject *self, PyObject *args, PyObject *kw, const int64_t *grid) {
    return do_call_spy(self, args, kw, grid, 0);
}

static PyObject *do_call_spy(PyObject *self, PyObject *args, PyObject *kw, const int64_t *grid, int spy_done) {
    FunctionObject *fn = (FunctionObject *)self;
    if (!grid && nb_func_is_host(fn->f, 0)) return nbp_host_call(fn, args, kw); /* host.c */
    PyObject *res = NULL, *grads = NULL, *dout = NULL, *tangents = NULL, *galloc = NULL, *append_to = NULL;
    int autograd = 1;
    if (kw) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(kw, &pos, &k, &v)) {
            const char *ks = PyUnicode_AsUTF8AndSize(k, NULL);
            if (!ks) return NULL;
            if (ks[0] != '_') continue;
            if (!strcmp(ks, "_result")) res = v;
            else if (!strcmp(ks, "_grads")) grads = v;
            else if (!strcmp(ks, "_dout")) dout = v;
            else if (!strcmp(ks, "_tangents")) tangents = v;
            else if (!strcmp(ks, "_autograd")) autograd = PyObject_IsTrue(v);
            else if (!strcmp(ks, "_grads_alloc")) galloc = v;
            else if (!strcmp(ks, "_append_to")) append_to = v;
            else return PyErr_Format(nbp_ArgumentError, "unknown option %s= (options: _result, _grads, _grads_alloc, _dout, _tangents, _autograd, _append_to)", ks);
        }
    }
    if (nbp_spy_hook && !spy_done) { /* SlangPy spelling: struct tensors, _type dicts, _result=Tensor */
        int w = nbp_spy_wants(fn, args, kw);
        if (w < 0) return NULL;
        if (w) {
            PyObject *r = PyObject_CallFunctionObjArgs(nbp_spy_hook, self, args, kw ? kw : Py_None, NULL);
            if (!r) return NULL;
            /* (args, kwargs) or (args, kwargs, post): post(result) is what the call returns (a
             * struct result as a struct tensor or a numpy structured array) */
            PyObject *a2 = NULL, *k2 = NULL, *post = NULL;
            if (!PyArg_ParseTuple(r, "OO|O", &a2, &k2, &post) || !PyTuple_Check(a2) || (k2 != Py_None && !PyDict_Check(k2))) {
                if (!PyErr_Occurred()) PyErr_SetString(nbp_InternalError, "spy hook: expected (tuple, dict[, post])");
                Py_DECREF(r);
                return NULL;
            }
            PyObject *out2 = do_call_spy(self, a2, k2 == Py_None ? NULL : k2, grid, 1);
            if (out2 && post && post != Py_None) {
                PyObject *p2 = PyObject_CallFunctionObjArgs(post, out2, NULL);
                Py_DECREF(out2);
                out2 = p2;
            }
            Py_DECREF(r);
            return out2;
        }
    }
    /* _append_to=encoder (f.append_to): recorded into its command list, not run (spy_enc.c) */
    nb_cmdlist *rec = NULL;
    if (append_to && append_to != Py_None) {
        if (!(rec = nbp_cmdlist_of(append_to))) return NULL;
        autograd = 0;
        if (res && PyUnicode_Check(res) && strcmp(PyUnicode_AsUTF8AndSize(res, NULL), "tensor") != 0)
            return PyErr_Format(nbp_ArgumentError, "append_to: results of a recorded call are nabla.Tensors filled "
                                "at submit (_result='tensor' or an array), not _result='%U'", res);
    }
    if (fn->mode == NBP_PRIMAL && autograd && !grid) {
        int ag = wants_autograd(args, kw);
        if (ag < 0) return NULL;
        if (ag) return PyObject_CallFunctionObjArgs(nbp_autograd_hook, self, args, kw ? kw : Py_None, NULL);
    }
    if ((grads || galloc) && fn->mode != NBP_BWD) return PyErr_Format(nbp_ArgumentError, "_grads= is for .bwds calls");
    if (dout && fn->mode != NBP_BWD) return PyErr_Format(nbp_ArgumentError, "_dout= is for .bwds calls");
    if (tangents && fn->mode != NBP_FWD) return PyErr_Format(nbp_ArgumentError, "_tangents= is for .fwds calls");

    call_state st_, *s = &st_; /* on the stack: no allocation per call */
    memset(s, 0, offsetof(call_state, a));
    s->fn = fn;
    s->cx.dev = nb_module_device(((ModuleObject *)fn->module)->m);
    PyObject *out = NULL, *into_obj = NULL;
    int kind = -1, ok = 0;
    nb_tensor *R[16] = {0}, *tan = NULL, *G[32] = {0};
    int ng = 0;
    int count = 0, ov = -1;
    if (check(nb_call_begin(fn->f, &s->c)) < 0) goto done;
    if (fn->mode && check(nb_call_set_mode(s->c, fn->mode == NBP_FWD ? NB_MODE_FWD : NB_MODE_BWD)) < 0) goto done;
    Py_ssize_t npos = PyTuple_Size(args);
    for (Py_ssize_t i = 0; i < npos; i++)
        if (bind(s, (int)i, NULL, PyTuple_GetItem(args, i)) < 0) goto done;
    if (kw) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(kw, &pos, &k, &v)) {
            const char *ks = PyUnicode_AsUTF8AndSize(k, NULL);
            if (ks[0] == '_') continue;
            if (bind(s, -1, ks, v) < 0) goto done;
        }
    }
    if (fn->maps) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(fn->maps, &pos, &k, &v)) {
            int dims[NB_MAX_DIMS];
            Py_ssize_t nd = PyTuple_Size(v);
            for (Py_ssize_t i = 0; i < nd && i < NB_MAX_DIMS; i++) dims[i] = (int)PyLong_AsLong(PyTuple_GetItem(v, i));
            nb_status st = PyLong_Check(k) ? nb_call_map(s->c, (int)PyLong_AsLong(k), (int)nd, dims)
                                           : nb_call_map_named(s->c, PyUnicode_AsUTF8AndSize(k, NULL), (int)nd, dims);
            if (check(st) < 0) goto done;
        }
    }
    if (res && PyUnicode_Check(res)) {
        if (parse_kind(res, &kind) < 0) goto done;
    } else if (res && res != Py_None) {
        if (fn->mode == NBP_BWD) {
            /* SlangPy: the result's gradient is the gradient of _result */
            /* SlangPy's grad_in (with_grads(grad_in=...)) first, else .grad */
            PyObject *g = !nbp_is_tensor(res) ? NULL
                          : ((TensorObject *)res)->grad_in ? ((TensorObject *)res)->grad_in : ((TensorObject *)res)->grad;
            if (!g) {
                PyErr_SetString(nbp_ArgumentError, "bwds: _result must be a nabla.Tensor with a .grad (or give _dout=)");
                goto done;
            }
            if (!dout) dout = g;
        } else if (PyDict_Check(res)) { /* a struct result's fields into these arrays */
            if (each_field(s, "_result", res, bind_result_path) < 0) goto done;
            into_obj = res;
        } else {
            nbp_arg *a;
            if (convert_arg(s, res, 1, &a) < 0) goto done;
            if (!a->t) {
                PyErr_SetString(PyExc_TypeError, "_result must be an array (numpy, torch, nabla.Tensor) or a kind name");
                goto done;
            }
            if (check(nb_call_result(s->c, a->t)) < 0) goto done;
            into_obj = res;
        }
    }
    if (grads) {
        if (!PyDict_Check(grads)) {
            PyErr_SetString(PyExc_TypeError, "_grads must be a dict {parameter name or index: gradient array}");
            goto done;
        }
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(grads, &pos, &k, &v)) {
            int pi = key_index(fn, k);
            if (pi < 0) goto done;
            const char *ks = PyUnicode_Check(k) ? PyUnicode_AsUTF8AndSize(k, NULL) : NULL;
            const char *field = ks ? strchr(ks, '.') : NULL; /* "p.c": a field's gradient */
            if (field || PyDict_Check(v) || is_namespace(v)) {
                if (bind_grad_fields(s, pi, field, v) < 0) goto done;
                continue;
            }
            nbp_arg *a;
            if (convert_arg(s, v, 1, &a) < 0) goto done;
            if (!a->t) {
                PyErr_SetString(PyExc_TypeError, "_grads values must be arrays (gradients accumulate into them)");
                goto done;
            }
            if (check(nb_call_grad(s->c, pi, a->t)) < 0) goto done;
        }
    }
    if (galloc) {
        /* _grads_alloc=(i, j, …): zeroed gradients of parameters i, j, … shaped like their
         * arguments (f64 for f64 arguments, else f32) are allocated, accumulated into, and
         * returned as a tuple (torch autograd's backward uses this: one call, no torch.zeros) */
        Py_ssize_t n = PySequence_Size(galloc);
        if (n < 0) goto done;
        for (Py_ssize_t i = 0; i < n && ng < 32; i++) {
            PyObject *k = PySequence_GetItem(galloc, i);
            int pi = k ? key_index(fn, k) : -1;
            Py_XDECREF(k);
            nbp_arg *a = pi >= 0 ? s->param_arg[pi] : NULL;
            if (pi >= 0 && !a) PyErr_Format(nbp_ArgumentError, "_grads_alloc: parameter %d was not given as a whole", pi);
            if (!a) goto done;
            nb_dtype dt = a->t ? nb_tensor_dtype(a->t) : a->vdtype;
            dt = dt == NB_F64 ? NB_F64 : NB_F32;
            nb_status st = a->t ? nb_tensor_zeros(s->cx.dev, dt, nb_tensor_ndim(a->t), nb_tensor_shape(a->t), &G[ng])
                                : nb_tensor_zeros(s->cx.dev, dt, a->vndim, a->vshape, &G[ng]);
            if (!st) st = nb_call_grad(s->c, pi, G[ng]);
            ng++;
            if (check(st) < 0) goto done;
        }
    }
    if (dout) {
        nbp_arg *a;
        if (convert_arg(s, dout, 0, &a) < 0 || as_tensor(s, a) < 0) goto done;
        if (check(nb_call_dout(s->c, a->t)) < 0) goto done;
    }
    if (fn->mode == NBP_FWD) {
        if (tangents) {
            if (!PyDict_Check(tangents)) {
                PyErr_SetString(PyExc_TypeError, "_tangents must be a dict {parameter name or index: tangent}");
                goto done;
            }
            Py_ssize_t pos = 0;
            PyObject *k, *v;
            while (PyDict_Next(tangents, &pos, &k, &v)) {
                int pi = key_index(fn, k);
                nbp_arg *a;
                if (pi < 0 || convert_arg(s, v, 0, &a) < 0 || as_tensor(s, a) < 0) goto done;
                if (check(nb_call_tangent(s->c, pi, a->t)) < 0) goto done;
            }
        }
        if (check(nb_call_tangent_alloc(s->c, &tan)) < 0) goto done;
    }
    if (!grid && check(nb_call_report_overload(s->c, &ov)) < 0) goto done;
    if (rec) { /* a recorded call runs later: nothing may need copying back after it */
        for (int i = 0; i < s->na; i++)
            if (s->a[i].user) {
                PyErr_Format(nbp_ArgumentError, "append_to: an output of %s lives on another device than the "
                             "module (%s) and would be copied back only after a run; pass an array on that device",
                             nb_func_name(fn->f), nb_device_name(s->cx.dev));
                goto done;
            }
        kind = SRC_TENSOR;
    }
    {
        nb_status st;
        nb_call *c = s->c;
        s->c = NULL; /* run frees it */
        Py_BEGIN_ALLOW_THREADS
        if (rec) st = grid ? nb_cmdlist_append_grid(rec, c, grid) : nb_cmdlist_append(rec, c, R, 16, &count);
        else st = grid ? nb_call_run_grid(c, grid) : nb_call_run_results(c, R, 16, &count);
        Py_END_ALLOW_THREADS
        if (nbp_torch_after(&s->cx) < 0) {
            if (!st) goto done;
        }
        if (check(st) < 0) goto done;
    }
    if (rec) { /* the arrays the recorded call binds live as long as the list */
        for (int i = 0; i < s->na; i++)
            if (s->a[i].t) {
                if (check(nb_cmdlist_keep(rec, s->a[i].t)) < 0) goto done;
                s->a[i].t = NULL;
            }
        for (int i = 0; i < count && i < 16; i++) { /* (results: a handle of the list's own) */
            nb_tensor *h = NULL;
            if (R[i] && (check(nb_tensor_broadcast_to(R[i], nb_tensor_ndim(R[i]), nb_tensor_shape(R[i]), &h)) < 0 ||
                         check(nb_cmdlist_keep(rec, h)) < 0)) {
                if (h) nb_tensor_free(h);
                goto done;
            }
        }
        PyObject *held = PyObject_CallMethod(append_to, "_hold", "OOO", self, args, kw ? kw : Py_None);
        if (!held) goto done;
        Py_DECREF(held);
        if (s->cx.torch_cuda) { /* torch CUDA tensors: the submit is ordered with torch's stream */
            PyObject *ix = PyLong_FromLong(nb_device_get_info(s->cx.torch_nbdev)->index);
            int r = ix ? PyObject_SetAttrString(append_to, "_torch_index", ix) : -1;
            Py_XDECREF(ix);
            if (r < 0) goto done;
        }
    }
    for (int i = 0; i < s->na; i++)
        if (nbp_arg_writeback(&s->a[i]) < 0) goto done;
    if (kind < 0) kind = s->cx.src;
    if (fn->mode == NBP_BWD && galloc) {
        out = PyTuple_New(ng);
        for (int i = 0; out && i < ng; i++) {
            PyObject *g = nbp_wrap_result(&s->cx, kind, G[i]);
            G[i] = NULL;
            if (!g) {
                Py_CLEAR(out);
                break;
            }
            PyTuple_SetItem(out, i, g);
        }
        if (!out) goto done;
    } else if (fn->mode == NBP_BWD) {
        out = Py_None;
        Py_INCREF(out);
    } else if (into_obj) {
        out = into_obj;
        Py_INCREF(out);
    } else if (count == 0) {
        out = Py_None;
        Py_INCREF(out);
    } else {
        nb_leaf_info li;
        int is_struct = count > 1 || (nb_func_result_leaf(fn->f, ov, 0, &li) == NB_OK && strcmp(li.path, "_result") != 0);
        if (!is_struct) {
            out = nbp_wrap_result(&s->cx, kind, R[0]);
            R[0] = NULL;
        } else {
            out = PyDict_New();
            for (int i = 0; out && i < count; i++) {
                nb_func_result_leaf(fn->f, ov, i, &li);
                const char *key = strncmp(li.path, "_result.", 8) ? li.path : li.path + 8;
                PyObject *v = nbp_wrap_result(&s->cx, kind, R[i]);
                R[i] = NULL;
                if (!v || PyDict_SetItemString(out, key, v) < 0) {
                    Py_XDECREF(v);
                    Py_CLEAR(out);
                    break;
                }
                Py_DECREF(v);
            }
        }
        if (!out) goto done;
    }
    if (fn->mode == NBP_FWD) {
        PyObject *d = tan ? nbp_wrap_result(&s->cx, kind, tan) : (Py_INCREF(Py_None), Py_None);
        tan = NULL;
        if (!d) {
            Py_CLEAR(out);
            goto done;
        }
        PyObject *pair = PyTuple_Pack(2, out, d);
        Py_DECREF(out);
        Py_DECREF(d);
        out = pair;
    }
    ok = 1;
done:
    if (s->c) nb_call_free(s->c);
    for (int i = 0; i < 16; i++)
        if (R[i]) nb_tensor_free(R[i]);
    if (tan) nb_tensor_free(tan);
    for (int i = 0; i < ng; i++)
        if (G[i]) nb_tensor_free(G[i]);
    for (int i = 0; i < s->na; i++) nbp_arg_release(&s->a[i]);
    for (int i = 0; i < s->nstr; i++) PyMem_Free(s->strs[i]);
    if (!ok) Py_CLEAR(out);
    return out;
}

static PyObject *func_call(PyObject *self, PyObject *args, PyObject *kw) { return do_call(self, args, kw, NULL); }

/* f.dispatch(grid, args…) for [Kernel] functions: grid = n or (x, y, z) threads; the function
 * reads its index with dispatch_id(). Returns None. */
static PyObject *func_dispatch(PyObject *self, PyObject *args, PyObject *kw) {
    Py_ssize_t n = PyTuple_Size(args);
    if (n < 1) return PyErr_Format(PyExc_TypeError, "dispatch(grid, *args): grid is missing");
    PyObject *g = PyTuple_GetItem(args, 0);
    int64_t grid[3] = {1, 1, 1};
    if (PyLong_Check(g)) {
        grid[0] = PyLong_AsLongLong(g);
    } else {
        PyObject *t = PySequence_Tuple(g);
        if (!t) return NULL;
        Py_ssize_t k = PyTuple_Size(t);
        if (k < 1 || k > 3) {
            Py_DECREF(t);
            return PyErr_Format(nbp_ArgumentError, "dispatch: grid must be an int or 1 to 3 ints");
        }
        for (Py_ssize_t i = 0; i < k; i++) grid[i] = PyLong_AsLongLong(PyTuple_GetItem(t, i));
        Py_DECREF(t);
    }
    if (PyErr_Occurred()) return NULL;
    PyObject *rest = PyTuple_GetSlice(args, 1, n);
    if (!rest) return NULL;
    PyObject *r = do_call(self, rest, kw, grid);
    Py_DECREF(rest);
    return r;
}

/* ---- modifiers ----------------------------------------------------------------------------- */

/* The kernel dims of one argument's map: ints in [0, NB_MAX_DIMS), at most NB_MAX_DIMS of them
 * (checked here: a C int cast would read 2**32 as 0). `who` names the argument (index or name). */
static PyObject *dims_tuple(PyObject *v, PyObject *who) {
    PyObject *t = PyLong_Check(v) ? PyTuple_Pack(1, v) : PySequence_Tuple(v);
    if (!t) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "map: argument %R: kernel dims must be an int or a "
                         "sequence of ints, not %R", who, v);
        }
        return NULL;
    }
    if (PyTuple_Size(t) > NB_MAX_DIMS) {
        PyErr_Format(nbp_ArgumentError, "map: argument %R maps %zd dims (at most %d)", who,
                     PyTuple_Size(t), NB_MAX_DIMS);
        Py_DECREF(t);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_Size(t); i++) {
        PyObject *d = PyTuple_GetItem(t, i);
        if (!PyLong_Check(d) || PyBool_Check(d)) {
            Py_DECREF(t);
            return PyErr_Format(PyExc_TypeError, "map: argument %R: kernel dims must be ints, not %R",
                                who, d);
        }
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(d, &overflow);
        if (overflow || x < 0 || x >= NB_MAX_DIMS) {
            PyErr_Format(nbp_ArgumentError, "map: argument %R: kernel dim %R is out of range "
                         "(kernel dims are 0..%d)", who, d, NB_MAX_DIMS - 1);
            Py_DECREF(t);
            return NULL;
        }
    }
    return t;
}

/* f.map(a_dims, b_dims, …, name=dims): each argument's call dims go to the given kernel dims. */
static PyObject *func_map(PyObject *self, PyObject *args, PyObject *kw) {
    FunctionObject *fn = (FunctionObject *)self;
    PyObject *maps = fn->maps ? PyDict_Copy(fn->maps) : PyDict_New();
    if (!maps) return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_Size(args); i++) {
        PyObject *v = PyTuple_GetItem(args, i);
        if (v == Py_None) continue;
        PyObject *k = PyLong_FromSsize_t(i), *d = k ? dims_tuple(v, k) : NULL;
        if (!d || !k || PyDict_SetItem(maps, k, d) < 0) {
            Py_XDECREF(d);
            Py_XDECREF(k);
            Py_DECREF(maps);
            return NULL;
        }
        Py_DECREF(d);
        Py_DECREF(k);
    }
    if (kw) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(kw, &pos, &k, &v)) {
            PyObject *d = dims_tuple(v, k);
            if (!d || PyDict_SetItem(maps, k, d) < 0) {
                Py_XDECREF(d);
                Py_DECREF(maps);
                return NULL;
            }
            Py_DECREF(d);
        }
    }
    PyObject *r = nbp_func_new(fn->f, fn->module, fn->mode, maps);
    Py_DECREF(maps);
    return r;
}

static PyObject *with_mode(PyObject *self, int mode) {
    FunctionObject *fn = (FunctionObject *)self;
    if (fn->mode != NBP_PRIMAL) return PyErr_Format(nbp_ArgumentError, "%s: already a derivative call", nb_func_name(fn->f));
    return nbp_func_new(fn->f, fn->module, mode, fn->maps);
}
static PyObject *func_get_bwds(PyObject *self, void *c) { return with_mode(self, NBP_BWD); }
static PyObject *func_get_fwds(PyObject *self, void *c) { return with_mode(self, NBP_FWD); }

/* f.constants({"N": 4}): link-time constants are module-wide; returns f. */
static PyObject *func_constants(PyObject *self, PyObject *d) {
    FunctionObject *fn = (FunctionObject *)self;
    if (!PyDict_Check(d)) return PyErr_Format(PyExc_TypeError, "constants() expects a dict {name: number}");
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(d, &pos, &k, &v)) {
        const char *ks = PyUnicode_AsUTF8AndSize(k, NULL);
        if (!ks) return NULL;
        double x = PyFloat_AsDouble(v);
        if (x == -1.0 && PyErr_Occurred()) return NULL;
        if (check(nb_module_set_constant(((ModuleObject *)fn->module)->m, ks, x)) < 0) return NULL;
    }
    Py_INCREF(self);
    return self;
}

static PyObject *func_get_name(PyObject *self, void *c) { return PyUnicode_FromString(nb_func_name(((FunctionObject *)self)->f)); }
static PyObject *func_get_signature(PyObject *self, void *c) {
    const char *s = nb_func_signature(((FunctionObject *)self)->f, 0);
    return PyUnicode_FromString(s ? s : "");
}
static PyObject *func_get_is_host(PyObject *self, void *c) {
    return PyBool_FromLong(nb_func_is_host(((FunctionObject *)self)->f, 0));
}
static PyObject *func_get_mode(PyObject *self, void *c) {
    static const char *m[] = {"primal", "fwds", "bwds"};
    return PyUnicode_FromString(m[((FunctionObject *)self)->mode]);
}
static PyObject *func_get_params(PyObject *self, void *c) {
    FunctionObject *fn = (FunctionObject *)self;
    PyObject *t = PyTuple_New(fn->nparams);
    for (int i = 0; t && i < fn->nparams; i++) PyTuple_SetItem(t, i, PyUnicode_FromString(fn->pnames[i] ? fn->pnames[i] : ""));
    return t;
}
static PyObject *func_get_param_dirs(PyObject *self, void *c) {
    FunctionObject *fn = (FunctionObject *)self;
    static const char *d[] = {"in", "out", "inout"};
    PyObject *t = PyTuple_New(fn->nparams);
    for (int i = 0; t && i < fn->nparams; i++) PyTuple_SetItem(t, i, PyUnicode_FromString(d[fn->pdirs[i]]));
    return t;
}
static PyObject *func_get_module(PyObject *self, void *c) {
    PyObject *m = ((FunctionObject *)self)->module;
    Py_INCREF(m);
    return m;
}

/* Tuple of bools: parameter i has a gradient in f.bwds; None if f is not differentiable. */
static PyObject *func_get_diff(PyObject *self, void *c) {
    FunctionObject *fn = (FunctionObject *)self;
    if (fn->diff) {
        Py_INCREF(fn->diff);
        return fn->diff;
    }
    char name[512];
    snprintf(name, sizeof name, "%s__bwds", nb_func_name(fn->f));
    nb_func *w = NULL;
    if (nb_module_func(((ModuleObject *)fn->module)->m, name, &w) != NB_OK) {
        nb_clear_error();
        Py_RETURN_NONE;
    }
    PyObject *t = PyTuple_New(fn->nparams);
    if (!t) return NULL;
    int nw = nb_func_param_count(w, 0);
    for (int i = 0; i < fn->nparams; i++) {
        char want[300];
        snprintf(want, sizeof want, "%s_grad", fn->pnames[i] ? fn->pnames[i] : "");
        int has = 0;
        for (int j = 0; j < nw && !has; j++) has = !strcmp(nb_func_param_name(w, 0, j), want);
        PyTuple_SetItem(t, i, PyBool_FromLong(has));
    }
    fn->diff = t;
    Py_INCREF(t);
    return t;
}

static PyObject *func_repr(PyObject *self) {
    FunctionObject *fn = (FunctionObject *)self;
    const char *s = nb_func_signature(fn->f, 0);
    static const char *m[] = {"", ".fwds", ".bwds"};
    return PyUnicode_FromFormat("<nabla function %s%s: %s>", nb_func_name(fn->f), m[fn->mode], s ? s : "");
}

static PyGetSetDef func_getset[] = {
    {"bwds", func_get_bwds, NULL, "reverse mode: gradients accumulate into _grads / Tensor.grad", NULL},
    {"fwds", func_get_fwds, NULL, "forward mode: returns (result, result tangent)", NULL},
    {"name", func_get_name, NULL, "function name", NULL},
    {"signature", func_get_signature, NULL, "signature of overload 0", NULL},
    {"mode", func_get_mode, NULL, "\"primal\", \"fwds\" or \"bwds\"", NULL},
    {"is_host", func_get_is_host, NULL, "a [TorchEntryPoint] host function (called with tensors and numbers)", NULL},
    {"param_names", func_get_params, NULL, "parameter names (overload 0)", NULL},
    {"param_dirs", func_get_param_dirs, NULL, "\"in\"/\"out\"/\"inout\" per parameter", NULL},
    {"differentiable_params", func_get_diff, NULL, "bools per parameter, or None", NULL},
    {"module", func_get_module, NULL, "the C module", NULL},
    {"is_kernel", nbp_func_get_is_kernel, NULL, "a [Kernel] / [CudaKernel] function (launch_raw, dispatch)", NULL},
    {NULL},
};
static PyMethodDef func_methods[] = {
    {"map", (PyCFunction)(void (*)(void))func_map, METH_VARARGS | METH_KEYWORDS, "map(dims per argument…) -> Function"},
    {"constants", func_constants, METH_O, "constants({name: value}) -> self (module-wide)"},
    {"dispatch", (PyCFunction)(void (*)(void))func_dispatch, METH_VARARGS | METH_KEYWORDS,
     "dispatch(grid, *args, **kw): run a [Kernel] function over grid = n or (x, y, z) threads"},
    {"launch_raw", (PyCFunction)(void (*)(void))nbp_func_launch_raw, METH_VARARGS | METH_KEYWORDS,
     "launch_raw(block, grid, mode='primal'|'fwd'|'bwd', args={path: value | (primal, grad)}, defer_checks=None): "
     "grid blocks of block threads (slangtorch's launchRaw; launch.c)"},
    {"kernel_params", nbp_func_kernel_params, METH_NOARGS, "kernel_params() -> [dict per parameter leaf]"},
    {"param_types", nbp_func_param_types, METH_NOARGS, "param_types() -> {path: struct type name}"},
    {NULL},
};
static PyType_Slot func_slots[] = {
    {Py_tp_dealloc, func_dealloc}, {Py_tp_call, func_call},       {Py_tp_repr, func_repr},
    {Py_tp_getset, func_getset},   {Py_tp_methods, func_methods}, {Py_tp_doc, "A nabla function, callable over arrays."},
    {0, NULL},
};
static PyType_Spec func_spec = {"nabla.Function", sizeof(FunctionObject), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, func_slots};

int nbp_func_init_type(PyObject *mod) {
    nbp_FunctionType = PyType_FromSpec(&func_spec);
    if (!nbp_FunctionType) return -1;
    Py_INCREF(nbp_FunctionType);
    return PyModule_AddObject(mod, "Function", nbp_FunctionType);
}

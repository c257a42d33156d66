/* nabla._nabla.CMlp (nb_mlp: the fused MLP) and nabla._nabla.CEncoding (nb_encoding: dense grid,
 * hash grid, frequency). The Python classes nabla.nn.FusedMLP / HashGrid / … wrap these.
 *
 *   m = _nabla.mlp_create(n_in, n_out, width, hidden_layers, "relu", "none", bias, "f16", 0.0, seed, dev)
 *   y = m.forward(x, training=True)          # x [..., n_in] f32|f16 -> y [..., n_out] f32
 *   dx = m.backward(dy, need_dx=True)        # grads OVERWRITTEN (nb_mlp_backward)
 *   e = _nabla.encoding_create("hash_grid", 2, device=dev, n_levels=16, …)
 *   f = e.forward(x)                         # x [..., n_dims] -> [..., F]
 *   dx = e.backward(x, df, need_dx=False)    # grads ACCUMULATED (nb_encoding_backward)
 */
#include "nn_common.h"

#include <string.h>

/* ---- MLP ----------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    nb_mlp *m;
    PyObject *device;
    long long n_forward;              /* training forwards so far */
    int last_nd;                      /* leading dims of the last training forward's x */
    int64_t last_lead[NB_MAX_DIMS];
    int64_t last_rows;                /* 0: no training forward yet */
} MlpObject;

static PyObject *MlpType;

static void mlp_dealloc(PyObject *self) {
    MlpObject *o = (MlpObject *)self;
    PyTypeObject *tp = Py_TYPE(self);
    if (o->m) nb_mlp_free(o->m);
    Py_XDECREF(o->device);
    PyObject_Free(self);
    Py_DECREF(tp);
}

static PyObject *py_mlp_create(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"n_in", "n_out", "width", "hidden_layers", "activation", "output_activation",
                          "bias", "compute", "loss_scale", "seed", "device", NULL};
    int n_in, n_out, width = 64, hidden = 2, bias = 0;
    PyObject *act = NULL, *oact = NULL, *comp = NULL, *devo = Py_None;
    double loss_scale = 0;
    unsigned long long seed = 1337;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ii|iiOOpOdKO", kwl, &n_in, &n_out, &width, &hidden, &act,
                                     &oact, &bias, &comp, &loss_scale, &seed, &devo))
        return NULL;
    nb_device *dev = nbp_device_ptr(devo);
    if (!dev) return NULL;
    nb_mlp_config cfg = nb_mlp_config_default(n_in, n_out, width, hidden);
    int a = act ? nbn_activation(act, "activation") : NB_ACT_RELU;
    if (a < 0) return NULL;
    int oa = nbn_activation(oact, "output_activation");
    if (oa < 0) return NULL;
    cfg.act = (nb_activation)a;
    cfg.out_act = (nb_activation)oa;
    cfg.bias = bias;
    if (comp && comp != Py_None) {
        int ok;
        cfg.compute = nbp_dtype_arg(comp, &ok);
        if (!ok) return NULL;
    }
    cfg.loss_scale = (float)loss_scale;
    MlpObject *o = PyObject_New(MlpObject, (PyTypeObject *)MlpType);
    if (!o) return NULL;
    o->m = NULL;
    o->device = NULL;
    o->n_forward = 0;
    o->last_nd = 0;
    o->last_rows = 0;
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_mlp_create(dev, &cfg, &o->m);
    if (!st) st = nb_mlp_init_params(o->m, seed);
    Py_END_ALLOW_THREADS
    if (st) {
        Py_DECREF(o);
        return nbn_raise(st);
    }
    o->device = nbp_device_get(nb_device_name(dev));
    if (!o->device) {
        Py_DECREF(o);
        return NULL;
    }
    return (PyObject *)o;
}

/* t [..., last] -> a [rows, last] view kept in c; lead dims copied out. */
static nb_tensor *flatten2(nbn_ctx *c, nb_tensor *t, int64_t last, const char *what, int *nd, int64_t *lead) {
    int n = nb_tensor_ndim(t);
    const int64_t *sh = nb_tensor_shape(t);
    if (sh[n - 1] != last) {
        char buf[128];
        nb_shape_str(n, sh, buf, sizeof buf);
        PyErr_Format(nbp_ShapeError, "%s: %s has shape %s; its last dim must be %lld", c->who, what, buf,
                     (long long)last);
        return NULL;
    }
    int64_t rows = 1;
    for (int i = 0; i < n - 1; i++) {
        rows *= sh[i];
        if (lead) lead[i] = sh[i];
    }
    if (nd) *nd = n - 1;
    if (n == 2) return t;
    int64_t s2[2] = {rows, last};
    nb_tensor *v = NULL;
    nb_status st = nb_tensor_reshape(t, 2, s2, &v);
    if (st) return NBN_RAISE_T(st);
    return nbn_keep(c, v);
}

/* New f32 [rows, last] on dev; *shaped: the same memory as [lead..., last]. */
static nb_tensor *alloc_out(nbn_ctx *c, int64_t rows, int64_t last, int nd, const int64_t *lead,
                            nb_dtype dt, nb_tensor **shaped) {
    int64_t s2[2] = {rows, last};
    nb_tensor *t = NULL;
    nb_status st = nb_tensor_empty(c->dev, dt, 2, s2, &t);
    if (st) return NBN_RAISE_T(st);
    if (!nbn_keep(c, t)) return NULL;
    int64_t full[NB_MAX_DIMS];
    for (int i = 0; i < nd; i++) full[i] = lead[i];
    full[nd] = last;
    st = nb_tensor_reshape(t, nd + 1, full, shaped);
    if (st) return NBN_RAISE_T(st);
    return t;
}

static PyObject *mlp_forward(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"x", "training", "result", NULL};
    PyObject *xo, *res = Py_None;
    int training = 1, kind;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|pO", kwl, &xo, &training, &res)) return NULL;
    if (nbn_kind_arg(res, &kind) < 0) return NULL;
    MlpObject *o = (MlpObject *)self;
    const nb_mlp_config *cfg = nb_mlp_get_config(o->m);
    nbn_ctx c;
    if (nbn_begin(&c, nb_mlp_device(o->m), training ? "FusedMLP.forward" : "FusedMLP.inference") < 0) return NULL;
    PyObject *r = NULL;
    int nd;
    int64_t lead[NB_MAX_DIMS];
    nb_tensor *x = nbn_in(&c, xo, "x", 1, 1, NB_MAX_DIMS), *y, *ys = NULL;
    if (x) x = flatten2(&c, x, cfg->n_in, "x", &nd, lead);
    if (!x) goto done;
    int64_t rows = nb_tensor_shape(x)[0];
    if (!(y = alloc_out(&c, rows, cfg->n_out, nd, lead, NB_F32, &ys))) goto done;
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_mlp_forward(o->m, x, y, training);
    Py_END_ALLOW_THREADS
    if (st) {
        nb_tensor_free(ys);
        nbn_raise(st);
        goto done;
    }
    if (training) {
        o->n_forward++;
        o->last_nd = nd;
        memcpy(o->last_lead, lead, sizeof lead);
        o->last_rows = rows;
    }
    if (nbn_after(&c) < 0) {
        nb_tensor_free(ys);
        goto done;
    }
    r = nbn_out(&c, ys, kind);
done:
    nbn_end(&c);
    return r;
}

static PyObject *mlp_inference(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"x", "result", NULL};
    PyObject *xo, *res = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwl, &xo, &res)) return NULL;
    PyObject *a = Py_BuildValue("(O)", xo);
    PyObject *k = Py_BuildValue("{s:O,s:O}", "training", Py_False, "result", res);
    PyObject *r = a && k ? mlp_forward(self, a, k) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(k);
    return r;
}

static PyObject *mlp_backward(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"dy", "need_dx", "result", NULL};
    PyObject *dyo, *res = Py_None;
    int need_dx = 1, kind;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|pO", kwl, &dyo, &need_dx, &res)) return NULL;
    if (nbn_kind_arg(res, &kind) < 0) return NULL;
    MlpObject *o = (MlpObject *)self;
    if (!o->last_rows)
        return PyErr_Format(nbp_ArgumentError, "FusedMLP.backward: no training forward before it (call forward(x) first)");
    const nb_mlp_config *cfg = nb_mlp_get_config(o->m);
    nbn_ctx c;
    if (nbn_begin(&c, nb_mlp_device(o->m), "FusedMLP.backward") < 0) return NULL;
    PyObject *r = NULL;
    int nd;
    int64_t lead[NB_MAX_DIMS];
    nb_tensor *dy = nbn_in(&c, dyo, "dy", 0, 1, NB_MAX_DIMS), *dx = NULL, *dxs = NULL;
    if (dy) dy = flatten2(&c, dy, cfg->n_out, "dy", &nd, lead);
    if (!dy) goto done;
    if (nb_tensor_shape(dy)[0] != o->last_rows) {
        PyErr_Format(nbp_ShapeError, "FusedMLP.backward: dy has %lld rows but the last training forward had %lld",
                     (long long)nb_tensor_shape(dy)[0], (long long)o->last_rows);
        goto done;
    }
    if (need_dx && !(dx = alloc_out(&c, o->last_rows, cfg->n_in, o->last_nd, o->last_lead, NB_F32, &dxs)))
        goto done;
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_mlp_backward(o->m, dy, dx);
    Py_END_ALLOW_THREADS
    if (st) {
        if (dxs) nb_tensor_free(dxs);
        nbn_raise(st);
        goto done;
    }
    if (nbn_after(&c) < 0) {
        if (dxs) nb_tensor_free(dxs);
        goto done;
    }
    if (dxs) r = nbn_out(&c, dxs, kind);
    else {
        Py_INCREF(Py_None);
        r = Py_None;
    }
done:
    nbn_end(&c);
    return r;
}

static PyObject *mlp_params(PyObject *self, PyObject *u) { return nbn_view(nb_mlp_params(((MlpObject *)self)->m), self); }
static PyObject *mlp_grads(PyObject *self, PyObject *u) { return nbn_view(nb_mlp_grads(((MlpObject *)self)->m), self); }
static PyObject *mlp_torch_params(PyObject *self, PyObject *u) { return nbn_torch_view(nb_mlp_params(((MlpObject *)self)->m)); }
static PyObject *mlp_torch_grads(PyObject *self, PyObject *u) { return nbn_torch_view(nb_mlp_grads(((MlpObject *)self)->m)); }

static PyObject *mlp_init_params(PyObject *self, PyObject *arg) {
    unsigned long long seed = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) return NULL;
    nb_status st = nb_mlp_init_params(((MlpObject *)self)->m, seed);
    if (st) return nbn_raise(st);
    Py_RETURN_NONE;
}

static PyObject *mlp_layer_info(PyObject *self, PyObject *arg) {
    int l = (int)PyLong_AsLong(arg);
    if (PyErr_Occurred()) return NULL;
    int64_t w, b;
    int rows, cols;
    nb_status st = nb_mlp_layer_info(((MlpObject *)self)->m, l, &w, &b, &rows, &cols);
    if (st) return nbn_raise(st);
    return Py_BuildValue("(LLii)", (long long)w, (long long)b, rows, cols);
}

static PyObject *mlp_get_config(PyObject *self, void *c) {
    const nb_mlp_config *g = nb_mlp_get_config(((MlpObject *)self)->m);
    return Py_BuildValue("{s:i,s:i,s:i,s:i,s:s,s:s,s:O,s:s,s:d}", "n_in", g->n_in, "n_out", g->n_out,
                         "width", g->width, "hidden_layers", g->n_hidden_layers, "activation",
                         nb_activation_name(g->act), "output_activation", nb_activation_name(g->out_act),
                         "bias", g->bias ? Py_True : Py_False, "compute", nb_dtype_name(g->compute),
                         "loss_scale", (double)g->loss_scale);
}
static PyObject *mlp_get_n_params(PyObject *self, void *c) { return PyLong_FromLongLong(nb_mlp_n_params(((MlpObject *)self)->m)); }
static PyObject *mlp_get_n_layers(PyObject *self, void *c) { return PyLong_FromLong(nb_mlp_n_layers(((MlpObject *)self)->m)); }
static PyObject *mlp_get_n_forward(PyObject *self, void *c) { return PyLong_FromLongLong(((MlpObject *)self)->n_forward); }
static PyObject *mlp_get_workspace(PyObject *self, void *c) { return PyLong_FromSize_t(nb_mlp_workspace_bytes(((MlpObject *)self)->m)); }
static PyObject *mlp_get_device(PyObject *self, void *c) {
    Py_INCREF(((MlpObject *)self)->device);
    return ((MlpObject *)self)->device;
}

static PyMethodDef mlp_methods[] = {
    {"forward", (PyCFunction)(void (*)(void))mlp_forward, METH_VARARGS | METH_KEYWORDS, "forward(x, training=True, result=None) -> y"},
    {"inference", (PyCFunction)(void (*)(void))mlp_inference, METH_VARARGS | METH_KEYWORDS, "inference(x, result=None) -> y"},
    {"backward", (PyCFunction)(void (*)(void))mlp_backward, METH_VARARGS | METH_KEYWORDS, "backward(dy, need_dx=True, result=None) -> dx or None"},
    {"params", mlp_params, METH_NOARGS, "flat f32 parameters (a zero-copy nabla.Tensor view)"},
    {"grads", mlp_grads, METH_NOARGS, "flat f32 gradients (a zero-copy nabla.Tensor view)"},
    {"torch_params", mlp_torch_params, METH_NOARGS, "the parameters as a torch tensor (zero-copy)"},
    {"torch_grads", mlp_torch_grads, METH_NOARGS, "the gradients as a torch tensor (zero-copy)"},
    {"init_params", mlp_init_params, METH_O, "init_params(seed)"},
    {"layer_info", mlp_layer_info, METH_O, "layer_info(l) -> (w_offset, b_offset or -1, rows, cols)"},
    {NULL},
};
static PyGetSetDef mlp_getset[] = {
    {"config", mlp_get_config, NULL, "dict", NULL},
    {"n_params", mlp_get_n_params, NULL, "parameter count", NULL},
    {"n_layers", mlp_get_n_layers, NULL, "weight matrices", NULL},
    {"n_forward", mlp_get_n_forward, NULL, "training forwards so far", NULL},
    {"workspace_bytes", mlp_get_workspace, NULL, "workspace held", NULL},
    {"device", mlp_get_device, NULL, "the device", NULL},
    {NULL},
};
static PyType_Slot mlp_slots[] = {
    {Py_tp_dealloc, mlp_dealloc}, {Py_tp_methods, mlp_methods}, {Py_tp_getset, mlp_getset},
    {Py_tp_doc, "nb_mlp (use nabla.nn.FusedMLP)"}, {0, NULL},
};
static PyType_Spec mlp_spec = {"nabla._nabla.CMlp", sizeof(MlpObject), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, mlp_slots};

/* ---- encodings ----------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    nb_encoding *e;
    nb_tensor *params, *grads; /* f32[n_params] on the device */
    PyObject *device;
} EncObject;

static PyObject *EncType;

nb_mlp *nbn_mlp_ptr(PyObject *o) {
    if (!MlpType || !PyObject_TypeCheck(o, (PyTypeObject *)MlpType)) {
        PyErr_SetString(PyExc_TypeError, "expected a nabla.nn.FusedMLP");
        return NULL;
    }
    return ((MlpObject *)o)->m;
}

nb_encoding *nbn_encoding_ptr(PyObject *o);

static void enc_dealloc(PyObject *self) {
    EncObject *o = (EncObject *)self;
    PyTypeObject *tp = Py_TYPE(self);
    if (o->e) nb_encoding_destroy(o->e);
    if (o->params) nb_tensor_free(o->params);
    if (o->grads) nb_tensor_free(o->grads);
    Py_XDECREF(o->device);
    PyObject_Free(self);
    Py_DECREF(tp);
}

static PyObject *py_encoding_create(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"kind", "n_dims", "n_features", "resolution", "n_levels", "log2_table_size",
                          "base_resolution", "per_level_scale", "n_frequencies", "seed", "device", NULL};
    const char *kind;
    int n_dims, nf = 2, nl = 16, lt = 19, base = 16, nfreq = 12;
    PyObject *reso = Py_None, *devo = Py_None;
    double scale = 2.0;
    unsigned long long seed = 1337;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "si|iOiiidiKO", kwl, &kind, &n_dims, &nf, &reso, &nl, &lt, &base,
                                     &scale, &nfreq, &seed, &devo))
        return NULL;
    nb_device *dev = nbp_device_ptr(devo);
    if (!dev) return NULL;
    nb_encoding_config cfg;
    if (!strcmp(kind, "hash_grid")) {
        cfg = nb_hash_grid_config(n_dims, nl, nf, lt, base, (float)scale);
    } else if (!strcmp(kind, "dense_grid")) {
        int r[3] = {2, 2, 2};
        if (reso == Py_None) return PyErr_Format(nbp_ArgumentError, "DenseGrid: resolution is required (an int or one int per dimension)");
        if (PyLong_Check(reso)) {
            r[0] = r[1] = r[2] = (int)PyLong_AsLong(reso);
        } else {
            int nd;
            int64_t sh[3];
            if (nbn_shape(reso, 3, &nd, sh, "DenseGrid resolution") < 0) return NULL;
            if (nd != n_dims)
                return PyErr_Format(nbp_ArgumentError, "DenseGrid: resolution has %d entries but n_dims = %d", nd, n_dims);
            for (int i = 0; i < nd; i++) r[i] = (int)sh[i];
        }
        if (PyErr_Occurred()) return NULL;
        cfg = nb_dense_grid_config(n_dims, nf, r[0], r[1], r[2]);
    } else if (!strcmp(kind, "frequency")) {
        cfg = nb_frequency_config(n_dims, nfreq);
    } else {
        return PyErr_Format(nbp_ArgumentError, "encoding kind '%s' (hash_grid, dense_grid, frequency)", kind);
    }
    EncObject *o = PyObject_New(EncObject, (PyTypeObject *)EncType);
    if (!o) return NULL;
    o->e = NULL;
    o->params = o->grads = NULL;
    o->device = NULL;
    nb_status st = nb_encoding_create(dev, &cfg, &o->e);
    if (!st) {
        int64_t n = nb_encoding_n_params(o->e);
        st = nb_tensor_zeros(dev, NB_F32, 1, &n, &o->params);
        if (!st) st = nb_tensor_zeros(dev, NB_F32, 1, &n, &o->grads);
        if (!st && n) st = nb_encoding_init_params(o->e, o->params, seed);
    }
    if (st) {
        Py_DECREF(o);
        return nbn_raise(st);
    }
    o->device = nbp_device_get(nb_device_name(dev));
    if (!o->device) {
        Py_DECREF(o);
        return NULL;
    }
    return (PyObject *)o;
}

static PyObject *enc_forward(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"x", "dtype", "result", NULL};
    PyObject *xo, *dto = Py_None, *res = Py_None;
    int kind, ok;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO", kwl, &xo, &dto, &res)) return NULL;
    if (nbn_kind_arg(res, &kind) < 0) return NULL;
    nb_dtype dt = nbp_dtype_arg(dto, &ok);
    if (!ok) return NULL;
    if (dt != NB_F32 && dt != NB_F16) return PyErr_Format(nbp_DtypeError, "encoding forward: dtype must be f32 or f16");
    EncObject *o = (EncObject *)self;
    nbn_ctx c;
    if (nbn_begin(&c, nb_tensor_device(o->params), "Encoding.forward") < 0) return NULL;
    PyObject *r = NULL;
    int nd;
    int64_t lead[NB_MAX_DIMS];
    nb_tensor *x = nbn_in(&c, xo, "x", 0, 1, NB_MAX_DIMS), *f, *fs = NULL;
    if (x) x = flatten2(&c, x, nb_encoding_n_input_dims(o->e), "x", &nd, lead);
    if (!x) goto done;
    if (!(f = alloc_out(&c, nb_tensor_shape(x)[0], nb_encoding_n_output_dims(o->e), nd, lead, dt, &fs))) goto done;
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_encoding_forward(o->e, o->params, x, f);
    Py_END_ALLOW_THREADS
    if (st || nbn_after(&c) < 0) {
        nb_tensor_free(fs);
        if (st) nbn_raise(st);
        goto done;
    }
    r = nbn_out(&c, fs, kind);
done:
    nbn_end(&c);
    return r;
}

static PyObject *enc_backward(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"x", "dfeat", "need_dx", "need_grads", "result", NULL};
    PyObject *xo, *dfo, *res = Py_None;
    int need_dx = 0, need_grads = 1, kind;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|ppO", kwl, &xo, &dfo, &need_dx, &need_grads, &res)) return NULL;
    if (nbn_kind_arg(res, &kind) < 0) return NULL;
    EncObject *o = (EncObject *)self;
    if (nb_encoding_n_params(o->e) == 0) need_grads = 0;
    if (!need_dx && !need_grads) Py_RETURN_NONE;
    nbn_ctx c;
    if (nbn_begin(&c, nb_tensor_device(o->params), "Encoding.backward") < 0) return NULL;
    PyObject *r = NULL;
    int nd, nd2;
    int64_t lead[NB_MAX_DIMS], lead2[NB_MAX_DIMS];
    nb_tensor *x = nbn_in(&c, xo, "x", 0, 1, NB_MAX_DIMS), *df = NULL, *dx = NULL, *dxs = NULL;
    if (x) x = flatten2(&c, x, nb_encoding_n_input_dims(o->e), "x", &nd, lead);
    if (x) df = nbn_in(&c, dfo, "dfeat", 0, 1, NB_MAX_DIMS);
    if (df) df = flatten2(&c, df, nb_encoding_n_output_dims(o->e), "dfeat", &nd2, lead2);
    if (!df) goto done;
    if (nb_tensor_shape(df)[0] != nb_tensor_shape(x)[0]) {
        PyErr_Format(nbp_ShapeError, "Encoding.backward: dfeat has %lld rows but x has %lld",
                     (long long)nb_tensor_shape(df)[0], (long long)nb_tensor_shape(x)[0]);
        goto done;
    }
    if (need_dx && !(dx = alloc_out(&c, nb_tensor_shape(x)[0], nb_encoding_n_input_dims(o->e), nd, lead, NB_F32, &dxs)))
        goto done;
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_encoding_backward(o->e, o->params, x, df, need_grads ? o->grads : NULL, dx);
    Py_END_ALLOW_THREADS
    if (st || nbn_after(&c) < 0) {
        if (dxs) nb_tensor_free(dxs);
        if (st) nbn_raise(st);
        goto done;
    }
    if (dxs) r = nbn_out(&c, dxs, kind);
    else {
        Py_INCREF(Py_None);
        r = Py_None;
    }
done:
    nbn_end(&c);
    return r;
}

static PyObject *enc_params(PyObject *self, PyObject *u) { return nbn_view(((EncObject *)self)->params, self); }
static PyObject *enc_grads(PyObject *self, PyObject *u) { return nbn_view(((EncObject *)self)->grads, self); }
static PyObject *enc_torch_params(PyObject *self, PyObject *u) { return nbn_torch_view(((EncObject *)self)->params); }
static PyObject *enc_torch_grads(PyObject *self, PyObject *u) { return nbn_torch_view(((EncObject *)self)->grads); }
static PyObject *enc_zero_grad(PyObject *self, PyObject *u) {
    nb_status st = nb_tensor_fill_bytes(((EncObject *)self)->grads, 0);
    if (st) return nbn_raise(st);
    Py_RETURN_NONE;
}
static PyObject *enc_init_params(PyObject *self, PyObject *arg) {
    EncObject *o = (EncObject *)self;
    unsigned long long seed = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) return NULL;
    if (nb_encoding_n_params(o->e) == 0) Py_RETURN_NONE;
    nb_status st = nb_encoding_init_params(o->e, o->params, seed);
    if (st) return nbn_raise(st);
    Py_RETURN_NONE;
}
static PyObject *enc_level_info(PyObject *self, PyObject *arg) {
    int l = (int)PyLong_AsLong(arg);
    if (PyErr_Occurred()) return NULL;
    int side[3] = {0, 0, 0}, hashed = 0;
    int64_t off = 0, entries = 0;
    nb_status st = nb_encoding_level_info(((EncObject *)self)->e, l, side, &off, &entries, &hashed);
    if (st) return nbn_raise(st);
    return Py_BuildValue("{s:(iii),s:L,s:L,s:O}", "side", side[0], side[1], side[2], "offset", (long long)off,
                         "entries", (long long)entries, "hashed", hashed ? Py_True : Py_False);
}
static PyObject *enc_set_ordered(PyObject *self, PyObject *arg) {
    int v = PyObject_IsTrue(arg);
    if (v < 0) return NULL;
    nb_status st = nb_encoding_set_spatially_ordered(((EncObject *)self)->e, v);
    if (st) return nbn_raise(st);
    Py_RETURN_NONE;
}
static PyObject *enc_get_n_params(PyObject *self, void *c) { return PyLong_FromLongLong(nb_encoding_n_params(((EncObject *)self)->e)); }
static PyObject *enc_get_n_in(PyObject *self, void *c) { return PyLong_FromLong(nb_encoding_n_input_dims(((EncObject *)self)->e)); }
static PyObject *enc_get_n_out(PyObject *self, void *c) { return PyLong_FromLong(nb_encoding_n_output_dims(((EncObject *)self)->e)); }
static PyObject *enc_get_device(PyObject *self, void *c) {
    Py_INCREF(((EncObject *)self)->device);
    return ((EncObject *)self)->device;
}

static PyMethodDef enc_methods[] = {
    {"forward", (PyCFunction)(void (*)(void))enc_forward, METH_VARARGS | METH_KEYWORDS, "forward(x, dtype='f32', result=None) -> feat"},
    {"backward", (PyCFunction)(void (*)(void))enc_backward, METH_VARARGS | METH_KEYWORDS,
     "backward(x, dfeat, need_dx=False, need_grads=True, result=None) -> dx or None (grads +=)"},
    {"params", enc_params, METH_NOARGS, "f32[n_params] view"},
    {"grads", enc_grads, METH_NOARGS, "f32[n_params] view"},
    {"torch_params", enc_torch_params, METH_NOARGS, "torch view of the parameters"},
    {"torch_grads", enc_torch_grads, METH_NOARGS, "torch view of the gradients"},
    {"zero_grad", enc_zero_grad, METH_NOARGS, "grads := 0"},
    {"init_params", enc_init_params, METH_O, "init_params(seed)"},
    {"level_info", enc_level_info, METH_O, "level_info(l) -> dict"},
    {"set_spatially_ordered", enc_set_ordered, METH_O, "hint for the CUDA backward"},
    {NULL},
};
static PyGetSetDef enc_getset[] = {
    {"n_params", enc_get_n_params, NULL, "parameter count", NULL},
    {"n_input_dims", enc_get_n_in, NULL, "input dims", NULL},
    {"n_output_dims", enc_get_n_out, NULL, "features per point", NULL},
    {"device", enc_get_device, NULL, "the device", NULL},
    {NULL},
};
static PyType_Slot enc_slots[] = {
    {Py_tp_dealloc, enc_dealloc}, {Py_tp_methods, enc_methods}, {Py_tp_getset, enc_getset},
    {Py_tp_doc, "nb_encoding (use nabla.nn.HashGrid / DenseGrid / Frequency)"}, {0, NULL},
};
static PyType_Spec enc_spec = {"nabla._nabla.CEncoding", sizeof(EncObject), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, enc_slots};

static PyMethodDef mlp_module_fns[] = {
    {"mlp_create", (PyCFunction)(void (*)(void))py_mlp_create, METH_VARARGS | METH_KEYWORDS,
     "mlp_create(n_in, n_out, width=64, hidden_layers=2, activation='relu', output_activation='none', bias=False, compute='f16', loss_scale=0, seed=1337, device=None)"},
    {"encoding_create", (PyCFunction)(void (*)(void))py_encoding_create, METH_VARARGS | METH_KEYWORDS,
     "encoding_create(kind, n_dims, n_features=2, resolution=None, n_levels=16, log2_table_size=19, base_resolution=16, per_level_scale=2.0, n_frequencies=12, seed=1337, device=None)"},
    {NULL},
};

int nbn_mlp_init(PyObject *mod) {
    if (!(MlpType = PyType_FromSpec(&mlp_spec))) return -1;
    Py_INCREF(MlpType);
    if (PyModule_AddObject(mod, "CMlp", MlpType) < 0) return -1;
    if (!(EncType = PyType_FromSpec(&enc_spec))) return -1;
    Py_INCREF(EncType);
    if (PyModule_AddObject(mod, "CEncoding", EncType) < 0) return -1;
    return PyModule_AddFunctions(mod, mlp_module_fns);
}

nb_encoding *nbn_encoding_ptr(PyObject *o) {
    if (!EncType || !PyObject_TypeCheck(o, (PyTypeObject *)EncType)) {
        PyErr_SetString(PyExc_TypeError,
                        "expected a nabla.nn encoding (HashGrid, DenseGrid, Frequency)");
        return NULL;
    }
    return ((EncObject *)o)->e;
}

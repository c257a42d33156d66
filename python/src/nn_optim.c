/* nabla._nabla.CAdam (nb_adam over up to NB_ADAM_MAX_SEGMENTS flat f32 buffers) and
 * nabla._nabla.loss (nb_loss: L2, L1, relative L2). nabla.nn.Adam / AdamW / Loss wrap these.
 *
 *   opt = _nabla.adam_create(n_params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
 *                            decoupled=False, device=None)
 *   opt.step([p0, p1], [g0, g1], zero_grads=True)   # params updated in place, one launch
 *   dpred = _nabla.loss("l2", pred, target, loss_sum=None, grad=True)
 */
#include "nn_common.h"

#include <string.h>

typedef struct {
    PyObject_HEAD
    nb_adam *a;
    nb_device *dev;
    int64_t n_params;
    PyObject *device;
} AdamObject;

static PyObject *AdamType;

static void adam_dealloc(PyObject *self) {
    AdamObject *o = (AdamObject *)self;
    PyTypeObject *tp = Py_TYPE(self);
    if (o->a) nb_adam_destroy(o->a);
    Py_XDECREF(o->device);
    PyObject_Free(self);
    Py_DECREF(tp);
}

static PyObject *py_adam_create(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"n_params", "lr", "betas", "eps", "weight_decay", "decoupled", "device", NULL};
    long long n;
    nb_adam_config cfg = nb_adam_config_default();
    double lr = cfg.lr, b1 = cfg.beta1, b2 = cfg.beta2, eps = cfg.eps, wd = 0;
    int dec = 0;
    PyObject *devo = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "L|d(dd)ddpO", kwl, &n, &lr, &b1, &b2, &eps, &wd, &dec, &devo))
        return NULL;
    nb_device *dev = nbp_device_ptr(devo);
    if (!dev) return NULL;
    cfg.lr = (float)lr;
    cfg.beta1 = (float)b1;
    cfg.beta2 = (float)b2;
    cfg.eps = (float)eps;
    cfg.weight_decay = (float)wd;
    cfg.decoupled = dec;
    AdamObject *o = PyObject_New(AdamObject, (PyTypeObject *)AdamType);
    if (!o) return NULL;
    o->a = NULL;
    o->dev = dev;
    o->n_params = n;
    o->device = NULL;
    nb_status st = nb_adam_create(dev, n, &cfg, &o->a);
    if (st) {
        Py_DECREF(o);
        return nbn_raise(st);
    }
    if (!(o->device = nbp_device_get(nb_device_name(dev)))) {
        Py_DECREF(o);
        return NULL;
    }
    return (PyObject *)o;
}

static PyObject *adam_step(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"params", "grads", "zero_grads", NULL};
    PyObject *po, *go;
    int zero = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|p", kwl, &po, &go, &zero)) return NULL;
    AdamObject *o = (AdamObject *)self;
    PyObject *ps = PySequence_List(po);
    if (!ps) return NULL;
    PyObject *gs = PySequence_List(go);
    if (!gs) {
        Py_DECREF(ps);
        return NULL;
    }
    PyObject *r = NULL;
    Py_ssize_t n = PyList_Size(ps);
    nbn_ctx c;
    if (nbn_begin(&c, o->dev, "Adam.step") < 0) goto out0;
    if (n != PyList_Size(gs) || n < 1 || n > NB_ADAM_MAX_SEGMENTS) {
        PyErr_Format(nbp_ArgumentError, "Adam.step: %zd parameter tensors and %zd gradients (1 to %d of each, paired)",
                     n, PyList_Size(gs), NB_ADAM_MAX_SEGMENTS);
        goto done;
    }
    nb_tensor *P[NB_ADAM_MAX_SEGMENTS], *G[NB_ADAM_MAX_SEGMENTS];
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        char wp[32], wg[32];
        snprintf(wp, sizeof wp, "params[%zd]", i);
        snprintf(wg, sizeof wg, "grads[%zd]", i);
        if (!(P[i] = nbn_inout(&c, PyList_GetItem(ps, i), wp))) goto done;
        if (!(G[i] = nbn_inout(&c, PyList_GetItem(gs, i), wg))) goto done;
        if (nb_tensor_numel(P[i]) != nb_tensor_numel(G[i])) {
            PyErr_Format(nbp_ShapeError, "Adam.step: params[%zd] has %lld elements but its gradient %lld", i,
                         (long long)nb_tensor_numel(P[i]), (long long)nb_tensor_numel(G[i]));
            goto done;
        }
        total += nb_tensor_numel(P[i]);
    }
    if (total != o->n_params) {
        PyErr_Format(nbp_ShapeError, "Adam.step: the parameters have %lld elements in all but the optimizer was made for %lld",
                     (long long)total, (long long)o->n_params);
        goto done;
    }
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = n == 1 ? nb_adam_step(o->a, P[0], G[0], zero) : nb_adam_step_multi(o->a, (int)n, P, G, zero);
    Py_END_ALLOW_THREADS
    if (st) {
        nbn_raise(st);
        goto done;
    }
    if (nbn_after(&c) < 0) goto done;
    Py_INCREF(Py_None);
    r = Py_None;
done:
    nbn_end(&c);
out0:
    Py_DECREF(ps);
    Py_DECREF(gs);
    return r;
}

static PyObject *adam_set_lr(PyObject *self, PyObject *arg) {
    double lr = PyFloat_AsDouble(arg);
    if (PyErr_Occurred()) return NULL;
    nb_status st = nb_adam_set_lr(((AdamObject *)self)->a, (float)lr);
    if (st) return nbn_raise(st);
    Py_RETURN_NONE;
}
static PyObject *adam_reset(PyObject *self, PyObject *u) {
    nb_status st = nb_adam_reset(((AdamObject *)self)->a);
    if (st) return nbn_raise(st);
    Py_RETURN_NONE;
}
static PyObject *adam_get_steps(PyObject *self, void *c) { return PyLong_FromLongLong(nb_adam_steps(((AdamObject *)self)->a)); }
static PyObject *adam_get_n_params(PyObject *self, void *c) { return PyLong_FromLongLong(((AdamObject *)self)->n_params); }
static PyObject *adam_get_device(PyObject *self, void *c) {
    Py_INCREF(((AdamObject *)self)->device);
    return ((AdamObject *)self)->device;
}

static PyMethodDef adam_methods[] = {
    {"step", (PyCFunction)(void (*)(void))adam_step, METH_VARARGS | METH_KEYWORDS, "step(params, grads, zero_grads=True)"},
    {"set_lr", adam_set_lr, METH_O, "set_lr(lr)"},
    {"reset", adam_reset, METH_NOARGS, "zero the moments and the step count"},
    {NULL},
};
static PyGetSetDef adam_getset[] = {
    {"steps", adam_get_steps, NULL, "steps taken", NULL},
    {"n_params", adam_get_n_params, NULL, "parameters updated", NULL},
    {"device", adam_get_device, NULL, "the device", NULL},
    {NULL},
};
static PyType_Slot adam_slots[] = {
    {Py_tp_dealloc, adam_dealloc}, {Py_tp_methods, adam_methods}, {Py_tp_getset, adam_getset},
    {Py_tp_doc, "nb_adam (use nabla.nn.Adam)"}, {0, NULL},
};
static PyType_Spec adam_spec = {"nabla._nabla.CAdam", sizeof(AdamObject), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, adam_slots};

/* loss(kind, pred, target, loss_sum=None, grad=True, result=None) -> dpred or None.
 * The device is pred's (a nabla.Tensor / torch tensor) or device= (host arrays). */
static PyObject *py_loss(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"kind", "pred", "target", "loss_sum", "grad", "result", "device", NULL};
    const char *kname;
    PyObject *po, *to, *lso = Py_None, *res = Py_None, *devo = Py_None;
    int grad = 1, kind;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sOO|OpOO", kwl, &kname, &po, &to, &lso, &grad, &res, &devo)) return NULL;
    int lk = nb_loss_from_name(kname);
    if (lk < 0) return PyErr_Format(nbp_ArgumentError, "loss '%s' (l2, l1, relative_l2)", kname);
    if (nbn_kind_arg(res, &kind) < 0) return NULL;
    nb_device *dev = nbp_device_ptr(devo);
    if (!dev) return NULL;
    nbn_ctx c;
    if (nbn_begin(&c, dev, "loss") < 0) return NULL;
    PyObject *r = NULL;
    nb_tensor *p = nbn_in(&c, po, "pred", 0, 1, NB_MAX_DIMS), *t = NULL, *ls = NULL, *dp = NULL;
    if (p) t = nbn_in(&c, to, "target", 0, 1, NB_MAX_DIMS);
    if (!t) goto done;
    if (lso != Py_None && !(ls = nbn_inout(&c, lso, "loss_sum"))) goto done;
    if (grad) {
        nb_status st = nb_tensor_empty(dev, NB_F32, nb_tensor_ndim(p), nb_tensor_shape(p), &dp);
        if (st) {
            nbn_raise(st);
            goto done;
        }
    }
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_loss((nb_loss_kind)lk, p, t, ls, dp);
    Py_END_ALLOW_THREADS
    if (st || nbn_after(&c) < 0) {
        if (dp) nb_tensor_free(dp);
        if (st) nbn_raise(st);
        goto done;
    }
    if (dp) r = nbn_out(&c, dp, kind);
    else {
        Py_INCREF(Py_None);
        r = Py_None;
    }
done:
    nbn_end(&c);
    return r;
}

/* nn_item(tensor): the first element of an f32 tensor (any device) as a float; no numpy. */
static PyObject *py_nn_item(PyObject *self, PyObject *arg) {
    if (!nbp_is_tensor(arg)) return PyErr_Format(PyExc_TypeError, "nn_item expects a nabla.Tensor");
    nb_tensor *t = ((TensorObject *)arg)->t, *one = NULL;
    if (nb_tensor_dtype(t) != NB_F32 || nb_tensor_numel(t) < 1)
        return PyErr_Format(nbp_DtypeError, "nn_item: expected a non-empty f32 tensor");
    float v = 0;
    nb_status st = nb_tensor_reshape(t, 0, NULL, &one);
    if (st) { /* more than one element: the first */
        nb_tensor *flat = NULL;
        int64_t all = nb_tensor_numel(t);
        st = nb_tensor_reshape(t, 1, &all, &flat);
        if (!st) st = nb_tensor_slice(flat, 0, 0, 1, 1, &one);
        if (flat) nb_tensor_free(flat);
    }
    if (!st) {
        Py_BEGIN_ALLOW_THREADS
        st = nb_tensor_to_host(one, &v, sizeof v);
        Py_END_ALLOW_THREADS
    }
    if (one) nb_tensor_free(one);
    return st ? nbn_raise(st) : PyFloat_FromDouble(v);
}

static PyMethodDef optim_module_fns[] = {
    {"nn_item", py_nn_item, METH_O, "nn_item(f32 tensor) -> float (its first element)"},
    {"adam_create", (PyCFunction)(void (*)(void))py_adam_create, METH_VARARGS | METH_KEYWORDS,
     "adam_create(n_params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, decoupled=False, device=None)"},
    {"loss", (PyCFunction)(void (*)(void))py_loss, METH_VARARGS | METH_KEYWORDS,
     "loss(kind, pred, target, loss_sum=None, grad=True, result=None, device=None) -> dL/dpred or None"},
    {NULL},
};

int nbn_optim_init(PyObject *mod) {
    if (!(AdamType = PyType_FromSpec(&adam_spec))) return -1;
    Py_INCREF(AdamType);
    if (PyModule_AddObject(mod, "CAdam", AdamType) < 0) return -1;
    return PyModule_AddFunctions(mod, optim_module_fns);
}

/* nabla._nabla.CUNet (nb_unet: guided-diffusion's UNet on a tape) and nabla._nabla.CDDPM (DDPM
 * training and DDPM / DDIM sampling). nabla.nn.UNet / DDPM wrap these.
 *
 *   u = _nabla.unet_create(ctape, {"image_size": "32", "channel_mult": "1,2", ...})
 *   u.init(seed); out = u.forward(x_handle, timesteps)       # tape handles
 *   d = _nabla.ddpm_create(u, {"lr": 1e-4, ...})
 *   loss, gnorm = d.train_step(x0)                            # host [n, C, S, S]
 *   imgs = d.sample("ddim", steps, n, seed)                   # numpy [n, C, S, S]
 */
#include "nn_common.h"

#include <string.h>

#include "nabla/nn_unet.h"

typedef struct {
    PyObject_HEAD
    nb_unet *u;
    PyObject *tape; /* TapeObject */
} UNetObject;

typedef struct {
    PyObject_HEAD
    nb_ddpm *d;
    PyObject *unet; /* UNetObject */
    int T;          /* diffusion timesteps */
} DDPMObject;

static PyObject *UNetType, *DDPMType;

static void unet_dealloc(PyObject *self) {
    UNetObject *o = (UNetObject *)self;
    PyTypeObject *tp = Py_TYPE(self);
    if (o->u) nb_unet_free(o->u);
    Py_XDECREF(o->tape);
    PyObject_Free(self);
    Py_DECREF(tp);
}

static void ddpm_dealloc(PyObject *self) {
    DDPMObject *o = (DDPMObject *)self;
    PyTypeObject *tp = Py_TYPE(self);
    if (o->d) nb_ddpm_free(o->d);
    Py_XDECREF(o->unet);
    PyObject_Free(self);
    Py_DECREF(tp);
}

/* unet_create(tape, knobs: dict str -> str (nb_unet_config_set keys), reference=True). */
static PyObject *py_unet_create(PyObject *self, PyObject *args) {
    PyObject *to, *knobs;
    if (!PyArg_ParseTuple(args, "OO", &to, &knobs)) return NULL;
    if (!PyObject_TypeCheck(to, (PyTypeObject *)nbn_TapeType)) return PyErr_Format(PyExc_TypeError, "UNet: expected a nabla.nn.Tape");
    if (!PyDict_Check(knobs)) return PyErr_Format(PyExc_TypeError, "UNet: knobs must be a dict");
    TapeObject *tape = (TapeObject *)to;
    if (tape->views_taken)
        return PyErr_Format(nbp_ArgumentError, "UNet: create it before taking the tape's params()/grads() views (it registers parameters)");
    nb_unet_config cfg = nb_unet_config_reference();
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(knobs, &pos, &k, &v)) {
        const char *ks = PyUnicode_AsUTF8AndSize(k, NULL), *vs = PyUnicode_Check(v) ? PyUnicode_AsUTF8AndSize(v, NULL) : NULL;
        if (!ks || !vs) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_TypeError, "UNet: knob values must be str");
        nb_status st = nb_unet_config_set(&cfg, ks, vs);
        if (st) return nbn_raise(st);
    }
    UNetObject *o = PyObject_New(UNetObject, (PyTypeObject *)UNetType);
    if (!o) return NULL;
    o->u = NULL;
    o->tape = to;
    Py_INCREF(to);
    nb_status st = nb_unet_create(&cfg, tape->t, &o->u);
    if (st) {
        Py_DECREF(o);
        return nbn_raise(st);
    }
    return (PyObject *)o;
}

#define U(self) (((UNetObject *)(self))->u)

static PyObject *unet_init(PyObject *self, PyObject *arg) {
    unsigned long long seed = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) return NULL;
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_unet_init(U(self), seed);
    Py_END_ALLOW_THREADS
    if (st) return nbn_raise(st);
    Py_RETURN_NONE;
}

/* Host f32 copy of an array (any kind / device), borrowed until nbn_end. */
static nb_tensor *host_in(nbn_ctx *c, PyObject *o, const char *who, const char *what, int lo, int hi) {
    PyObject *cpu = nbp_device_get("cpu");
    if (!cpu) return NULL;
    nbn_begin(c, ((DeviceObject *)cpu)->dev, who);
    Py_DECREF(cpu);
    c->stage = 1;
    return nbn_in(c, o, what, 0, lo, hi);
}

static PyObject *unet_forward(PyObject *self, PyObject *args) {
    int x;
    PyObject *ts;
    if (!PyArg_ParseTuple(args, "iO", &x, &ts)) return NULL;
    nbn_ctx c;
    nb_tensor *h = host_in(&c, ts, "UNet.forward", "timesteps", 1, 1);
    PyObject *r = NULL;
    if (h) {
        int nd;
        int64_t sh[NB_TAPE_MAX_DIMS];
        nb_status st = nb_tape_shape(nb_unet_tape(U(self)), x, &nd, sh);
        if (!st && sh[0] != nb_tensor_numel(h))
            st = nb_error(NB_ERR_SHAPE, "UNet.forward: %lld timesteps for a batch of %lld", (long long)nb_tensor_numel(h),
                          (long long)sh[0]);
        nb_tvar out = NB_TVAR_NONE;
        if (!st) {
            Py_BEGIN_ALLOW_THREADS
            st = nb_unet_forward(U(self), x, nb_tensor_data(h), &out);
            Py_END_ALLOW_THREADS
        }
        r = st ? nbn_raise(st) : PyLong_FromLong(out);
    }
    nbn_end(&c);
    return r;
}

static PyObject *unet_params(PyObject *self, PyObject *u) {
    const nb_unet_param_name *p;
    int n;
    nb_status st = nb_unet_params(U(self), &p, &n);
    if (st) return nbn_raise(st);
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++) {
        PyObject *sh = PyTuple_New(p[i].ndim);
        for (int j = 0; sh && j < p[i].ndim; j++) PyTuple_SetItem(sh, j, PyLong_FromLongLong(p[i].shape[j]));
        PyObject *e = sh ? Py_BuildValue("(sNi)", p[i].name, sh, (int)p[i].id) : NULL;
        if (!e) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SetItem(l, i, e);
    }
    return l;
}

static PyObject *unet_config(PyObject *self, PyObject *u) {
    nb_unet_config cfg;
    const char *keys[NB_UNET_META_N];
    char vals[NB_UNET_META_N][64];
    nb_status st = nb_unet_get_config(U(self), &cfg);
    if (!st) st = nb_unet_config_to_meta(&cfg, keys, vals);
    if (st) return nbn_raise(st);
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < NB_UNET_META_N; i++) {
        PyObject *v = PyUnicode_FromString(vals[i]);
        if (!v || PyDict_SetItemString(d, keys[i], v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    return d;
}

static PyObject *unet_flops(PyObject *self, PyObject *u) {
    double f = 0;
    nb_status st = nb_unet_last_forward_flops(U(self), &f);
    return st ? nbn_raise(st) : PyFloat_FromDouble(f);
}

static PyObject *unet_save(PyObject *self, PyObject *arg) {
    const char *path = PyUnicode_Check(arg) ? PyUnicode_AsUTF8AndSize(arg, NULL) : NULL;
    if (!path) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_TypeError, "path must be a str");
    nb_tape *t = nb_unet_tape(U(self));
    float *p;
    int64_t n;
    nb_status st = nb_tape_params(t, &p, &n);
    if (st) return nbn_raise(st);
    float *h = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(float)); /* host copy (CUDA tapes) */
    if (!h) return PyErr_NoMemory();
    Py_BEGIN_ALLOW_THREADS
    st = nb_tape_read_params(t, h, n);
    if (!st) st = nb_unet_save(U(self), h, path);
    Py_END_ALLOW_THREADS
    PyMem_Free(h);
    if (st) return nbn_raise(st);
    Py_RETURN_NONE;
}

static PyObject *unet_load(PyObject *self, PyObject *arg) {
    const char *path = PyUnicode_Check(arg) ? PyUnicode_AsUTF8AndSize(arg, NULL) : NULL;
    if (!path) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_TypeError, "path must be a str");
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_unet_load(U(self), path);
    Py_END_ALLOW_THREADS
    if (st) return nbn_raise(st);
    Py_RETURN_NONE;
}

static PyObject *py_unet_read_config(PyObject *self, PyObject *arg) {
    const char *path = PyUnicode_Check(arg) ? PyUnicode_AsUTF8AndSize(arg, NULL) : NULL;
    if (!path) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_TypeError, "path must be a str");
    nb_unet_config cfg;
    const char *keys[NB_UNET_META_N];
    char vals[NB_UNET_META_N][64];
    nb_status st = nb_unet_read_config(path, &cfg);
    if (!st) st = nb_unet_config_to_meta(&cfg, keys, vals);
    if (st) return nbn_raise(st);
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < NB_UNET_META_N; i++) {
        PyObject *v = PyUnicode_FromString(vals[i]);
        if (!v || PyDict_SetItemString(d, keys[i], v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    return d;
}

static PyMethodDef unet_methods[] = {
    {"init", unet_init, METH_O, "init(seed): PyTorch's default init, zero_module layers zeroed"},
    {"forward", unet_forward, METH_VARARGS, "forward(x_handle, timesteps) -> handle"},
    {"params", unet_params, METH_NOARGS, "[(name, shape, handle)] in state_dict order"},
    {"config", unet_config, METH_NOARGS, "dict of knobs (str values)"},
    {"last_forward_flops", unet_flops, METH_NOARGS, "FLOPs of the last forward"},
    {"save", unet_save, METH_O, "save(path): safetensors"},
    {"load", unet_load, METH_O, "load(path)"},
    {NULL},
};
static PyType_Slot unet_slots[] = {
    {Py_tp_dealloc, unet_dealloc}, {Py_tp_methods, unet_methods}, {Py_tp_doc, "nb_unet (use nabla.nn.UNet)"}, {0, NULL},
};
static PyType_Spec unet_spec = {"nabla._nabla.CUNet", sizeof(UNetObject), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, unet_slots};

/* ---- DDPM ------------------------------------------------------------------------------------ */

static PyObject *py_ddpm_create(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"unet", "timesteps", "beta_start", "beta_end", "lr", "weight_decay", "grad_clip",
                          "ema_decay", "seed", NULL};
    PyObject *uo;
    nb_ddpm_config c = nb_ddpm_config_default();
    double bs = c.beta_start, be = c.beta_end, lr = c.lr, wd = c.weight_decay, clip = c.grad_clip, ema = c.ema_decay;
    unsigned long long seed = c.seed;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|iddddddK", kwl, &uo, &c.timesteps, &bs, &be, &lr, &wd, &clip, &ema, &seed))
        return NULL;
    if (!PyObject_TypeCheck(uo, (PyTypeObject *)UNetType)) return PyErr_Format(PyExc_TypeError, "DDPM: expected a nabla.nn.UNet");
    c.beta_start = (float)bs;
    c.beta_end = (float)be;
    c.lr = (float)lr;
    c.weight_decay = (float)wd;
    c.grad_clip = (float)clip;
    c.ema_decay = (float)ema;
    c.seed = seed;
    DDPMObject *o = PyObject_New(DDPMObject, (PyTypeObject *)DDPMType);
    if (!o) return NULL;
    o->d = NULL;
    o->T = c.timesteps;
    o->unet = uo;
    Py_INCREF(uo);
    nb_status st = nb_ddpm_create(U(uo), &c, &o->d);
    if (st) {
        Py_DECREF(o);
        return nbn_raise(st);
    }
    return (PyObject *)o;
}

#define D(self) (((DDPMObject *)(self))->d)

static PyObject *ddpm_train_step(PyObject *self, PyObject *arg) {
    nbn_ctx c;
    nb_tensor *h = host_in(&c, arg, "DDPM.train_step", "x0", 4, 4);
    PyObject *r = NULL;
    if (h) {
        nb_unet_config cfg;
        nb_status st = nb_unet_get_config(U(((DDPMObject *)self)->unet), &cfg);
        const int64_t *sh = nb_tensor_shape(h);
        if (!st && (sh[1] != cfg.in_channels || sh[2] != cfg.image_size || sh[3] != cfg.image_size))
            st = nb_error(NB_ERR_SHAPE, "DDPM.train_step: x0 must be [n, %d, %d, %d]", cfg.in_channels, cfg.image_size,
                          cfg.image_size);
        float loss = 0, gn = 0;
        if (!st) {
            Py_BEGIN_ALLOW_THREADS
            st = nb_ddpm_train_step(D(self), nb_tensor_data(h), (int)sh[0], &loss, &gn);
            Py_END_ALLOW_THREADS
        }
        r = st ? nbn_raise(st) : Py_BuildValue("(dd)", (double)loss, (double)gn);
    }
    nbn_end(&c);
    return r;
}

/* DDPM.sample's fill of the host result (the GIL released). */
typedef struct sample_ctx {
    nb_ddpm *d;
    nb_sampler smp;
    int steps, n;
    unsigned long long seed;
} sample_ctx;
static nb_status sample_fill(void *ctx, float *dst, int64_t count) {
    const sample_ctx *c = ctx;
    (void)count;
    return nb_ddpm_sample(c->d, c->smp, c->steps, c->n, c->seed, dst);
}

static PyObject *ddpm_sample(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"sampler", "steps", "n", "seed", "result", NULL};
    const char *sname = "ddim";
    int steps = 50, n = 1, kind;
    unsigned long long seed = 0;
    PyObject *res = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|siiKO", kwl, &sname, &steps, &n, &seed, &res)) return NULL;
    nb_sampler smp;
    if (!strcmp(sname, "ddim")) smp = NB_SAMPLER_DDIM;
    else if (!strcmp(sname, "ddpm")) smp = NB_SAMPLER_DDPM;
    else return PyErr_Format(nbp_ArgumentError, "DDPM.sample: sampler '%s' (ddpm, ddim)", sname);
    if (nbn_kind_arg(res, &kind) < 0) return NULL;
    if (n < 1) return PyErr_Format(nbp_ArgumentError, "DDPM.sample: n = %d must be >= 1", n);
    nb_unet_config cfg;
    nb_status st = nb_unet_get_config(U(((DDPMObject *)self)->unet), &cfg);
    if (st) return nbn_raise(st);
    int64_t sh[4] = {n, cfg.out_channels, cfg.image_size, cfg.image_size};
    sample_ctx c = {D(self), smp, steps, n, seed};
    return nbn_host_result(4, sh, kind, sample_fill, &c);
}

static PyObject *ddpm_use_ema(PyObject *self, PyObject *u) {
    nb_status st = nb_ddpm_use_ema(D(self));
    if (st) return nbn_raise(st);
    Py_RETURN_NONE;
}

static PyObject *ddpm_alphas(PyObject *self, PyObject *u) {
    const double *a;
    nb_status st = nb_ddpm_alphas_cumprod(D(self), &a);
    if (st) return nbn_raise(st);
    int T = ((DDPMObject *)self)->T;
    PyObject *l = PyList_New(T);
    for (int i = 0; l && i < T; i++) PyList_SetItem(l, i, PyFloat_FromDouble(a[i]));
    return l;
}

static PyObject *ddpm_set_graphs(PyObject *self, PyObject *on) {
    int v = PyObject_IsTrue(on);
    if (v < 0) return NULL;
    nb_status st = nb_ddpm_set_cuda_graphs(D(self), v);
    if (st) return nbn_raise(st);
    Py_RETURN_NONE;
}

static PyObject *ddpm_graph_state(PyObject *self, PyObject *u) {
    return Py_BuildValue("(ii)", nb_ddpm_graph_state(D(self)), nb_ddpm_graph_captures(D(self)));
}

static PyMethodDef ddpm_methods[] = {
    {"train_step", ddpm_train_step, METH_O, "train_step(x0 [n, C, S, S]) -> (loss, grad_norm)"},
    {"sample", (PyCFunction)(void (*)(void))ddpm_sample, METH_VARARGS | METH_KEYWORDS,
     "sample(sampler='ddim', steps=50, n=1, seed=0, result=None) -> [n, C, S, S]"},
    {"use_ema", ddpm_use_ema, METH_NOARGS, "copy the EMA parameters into the model"},
    {"alphas_cumprod", ddpm_alphas, METH_NOARGS, "alpha_bar[t] for t < timesteps (list)"},
    {"set_cuda_graphs", ddpm_set_graphs, METH_O, "set_cuda_graphs(on): capture and replay the step (CUDA)"},
    {"graph_state", ddpm_graph_state, METH_NOARGS, "(state 0 off / 1 warming / 2 replaying, captures)"},
    {NULL},
};
static PyType_Slot ddpm_slots[] = {
    {Py_tp_dealloc, ddpm_dealloc}, {Py_tp_methods, ddpm_methods}, {Py_tp_doc, "nb_ddpm (use nabla.nn.DDPM)"}, {0, NULL},
};
static PyType_Spec ddpm_spec = {"nabla._nabla.CDDPM", sizeof(DDPMObject), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, ddpm_slots};

static PyMethodDef unet_fns[] = {
    {"unet_create", py_unet_create, METH_VARARGS, "unet_create(ctape, knobs: dict str -> str)"},
    {"unet_read_config", py_unet_read_config, METH_O, "unet_read_config(path) -> dict"},
    {"ddpm_create", (PyCFunction)(void (*)(void))py_ddpm_create, METH_VARARGS | METH_KEYWORDS,
     "ddpm_create(unet, timesteps=1000, beta_start=1e-4, beta_end=0.02, lr=1e-4, weight_decay=0, grad_clip=1, ema_decay=0.9999, seed=0)"},
    {NULL},
};

int nbn_unet_init(PyObject *mod) {
    if (!(UNetType = PyType_FromSpec(&unet_spec))) return -1;
    Py_INCREF(UNetType);
    if (PyModule_AddObject(mod, "CUNet", UNetType) < 0) return -1;
    if (!(DDPMType = PyType_FromSpec(&ddpm_spec))) return -1;
    Py_INCREF(DDPMType);
    if (PyModule_AddObject(mod, "CDDPM", DDPMType) < 0) return -1;
    return PyModule_AddFunctions(mod, unet_fns);
}

/* nabla._nabla image helpers for neural fitting (include/nabla/image.h): the procedural test
 * image, PNG in and out, random training samples on the image's device, pixel coordinates, PSNR.
 * nabla.nn.image_* wrap these. Images are f32 [H, W, C] tensors. */
#include "nn_common.h"

#include <string.h>

#include "nabla/image.h"

static PyObject *py_image_procedural(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"width", "height", "device", NULL};
    int w, h;
    PyObject *devo = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ii|O", kwl, &w, &h, &devo)) return NULL;
    nb_device *dev = nbp_device_ptr(devo);
    if (!dev) return NULL;
    nb_tensor *t = NULL;
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_image_procedural(dev, w, h, &t);
    Py_END_ALLOW_THREADS
    return st ? nbn_raise(st) : nbp_tensor_new(t, NULL);
}

static PyObject *py_image_read_png(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"path", "channels", "device", NULL};
    const char *path;
    int ch = 0;
    PyObject *devo = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|iO", kwl, &path, &ch, &devo)) return NULL;
    nb_device *dev = nbp_device_ptr(devo);
    if (!dev) return NULL;
    nb_tensor *t = NULL;
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_image_read_png(path, ch, dev, &t);
    Py_END_ALLOW_THREADS
    return st ? nbn_raise(st) : nbp_tensor_new(t, NULL);
}

/* image_read(path, device=None) -> (f32 [H, W, C] Tensor with the file's channels, {"format",
 * "width", "height", "channels", "srgb"}): any format nb_image_read reads. */
static PyObject *py_image_read(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"path", "device", NULL};
    const char *path;
    PyObject *devo = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|O", kwl, &path, &devo)) return NULL;
    nb_device *dev = nbp_device_ptr(devo);
    if (!dev) return NULL;
    nb_tensor *t = NULL;
    nb_image_info info;
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_image_read(path, dev, &info, &t);
    Py_END_ALLOW_THREADS
    if (st) return nbn_raise(st);
    PyObject *to = nbp_tensor_new(t, NULL);
    if (!to) return NULL;
    return Py_BuildValue("(N{s:s,s:i,s:i,s:i,s:O})", to, "format", info.format, "width", info.width, "height",
                         info.height, "channels", info.channels, "srgb", info.srgb ? Py_True : Py_False);
}

/* image_write_png(path, img, height=0): img [H, W, C], or [H*W, C] pixels with height = H. */
static PyObject *py_image_write_png(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"path", "img", "height", NULL};
    const char *path;
    PyObject *img;
    int height = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|i", kwl, &path, &img, &height)) return NULL;
    nbn_ctx c;
    PyObject *cpu = nbp_device_get("cpu");
    if (!cpu) return NULL;
    nbn_begin(&c, ((DeviceObject *)cpu)->dev, "image_write_png");
    Py_DECREF(cpu);
    c.stage = 1; /* any device: copied to the host */
    PyObject *r = NULL;
    nb_tensor *t = nbn_in(&c, img, "image", 0, height ? 2 : 3, height ? 2 : 3);
    if (t && height) { /* [H*W, C] pixels -> [H, W, C] */
        int64_t n = nb_tensor_shape(t)[0], sh[3] = {height, height > 0 ? n / height : 0, nb_tensor_shape(t)[1]};
        nb_tensor *v = NULL;
        nb_status st = height < 1 || n % height ? nb_error(NB_ERR_SHAPE, "image_write_png: %lld pixels are not %d rows", (long long)n, height)
                                                : nb_tensor_reshape(t, 3, sh, &v);
        t = st ? NBN_RAISE_T(st) : nbn_keep(&c, v);
    }
    if (t) {
        nb_status st;
        Py_BEGIN_ALLOW_THREADS
        st = nb_image_write_png(path, t);
        Py_END_ALLOW_THREADS
        if (st) nbn_raise(st);
        else {
            Py_INCREF(Py_None);
            r = Py_None;
        }
    }
    nbn_end(&c);
    return r;
}

/* image_sample(img, x, target, seed, step, stratified=False): fills x [B,2] and target [B,C]
 * (nabla.Tensor / torch tensors on img's device, written in place). */
static PyObject *py_image_sample(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"img", "x", "target", "seed", "step", "stratified", NULL};
    PyObject *io, *xo, *to;
    unsigned long long seed;
    unsigned int step;
    int strat = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOKI|p", kwl, &io, &xo, &to, &seed, &step, &strat)) return NULL;
    if (!nbp_is_tensor(io)) return PyErr_Format(PyExc_TypeError, "image_sample: img must be a nabla.Tensor (image_procedural / image_read_png)");
    nb_tensor *img = ((TensorObject *)io)->t;
    nbn_ctx c;
    if (nbn_begin(&c, nb_tensor_device(img), "image_sample") < 0) return NULL;
    PyObject *r = NULL;
    nb_tensor *x = nbn_inout(&c, xo, "x"), *t = x ? nbn_inout(&c, to, "target") : NULL;
    if (t) {
        /* nbn_inout flattens: restore [B, 2] and [B, C] */
        int64_t C = nb_tensor_ndim(img) == 3 ? nb_tensor_shape(img)[2] : 1;
        int64_t B = nb_tensor_numel(x) / 2, sx[2] = {B, 2}, stt[2] = {B, C};
        nb_tensor *x2 = NULL, *t2 = NULL;
        nb_status st = nb_tensor_numel(x) != 2 * B || nb_tensor_numel(t) != B * C
                           ? nb_error(NB_ERR_SHAPE, "image_sample: x must be [B, 2] and target [B, %lld]", (long long)C)
                           : nb_tensor_reshape(x, 2, sx, &x2);
        if (!st) st = nb_tensor_reshape(t, 2, stt, &t2);
        if (!st) {
            Py_BEGIN_ALLOW_THREADS
            st = strat ? nb_image_sample_stratified(img, seed, step, x2, t2) : nb_image_sample(img, seed, step, x2, t2);
            Py_END_ALLOW_THREADS
        }
        if (x2) nb_tensor_free(x2);
        if (t2) nb_tensor_free(t2);
        if (st) nbn_raise(st);
        else if (nbn_after(&c) == 0) {
            Py_INCREF(Py_None);
            r = Py_None;
        }
    }
    nbn_end(&c);
    return r;
}

static PyObject *py_image_pixel_coords(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"width", "height", "device", NULL};
    int w, h;
    PyObject *devo = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ii|O", kwl, &w, &h, &devo)) return NULL;
    nb_device *dev = nbp_device_ptr(devo);
    if (!dev) return NULL;
    nb_tensor *t = NULL;
    nb_status st = nb_image_pixel_coords(dev, w, h, &t);
    return st ? nbn_raise(st) : nbp_tensor_new(t, NULL);
}

static PyObject *py_image_psnr(PyObject *self, PyObject *args) {
    PyObject *po, *ro;
    if (!PyArg_ParseTuple(args, "OO", &po, &ro)) return NULL;
    nbn_ctx c;
    PyObject *cpu = nbp_device_get("cpu");
    if (!cpu) return NULL;
    nbn_begin(&c, ((DeviceObject *)cpu)->dev, "image_psnr");
    Py_DECREF(cpu);
    c.stage = 1;
    PyObject *r = NULL;
    nb_tensor *p = nbn_in(&c, po, "pred", 0, 1, NB_MAX_DIMS), *q = p ? nbn_in(&c, ro, "ref", 0, 1, NB_MAX_DIMS) : NULL;
    if (q && nb_tensor_numel(p) == nb_tensor_numel(q) && nb_tensor_ndim(p) != nb_tensor_ndim(q)) {
        nb_tensor *v = NULL; /* same pixels in another shape ([H*W, C] vs [H, W, C]) */
        nb_status st = nb_tensor_reshape(q, nb_tensor_ndim(p), nb_tensor_shape(p), &v);
        q = st ? NBN_RAISE_T(st) : nbn_keep(&c, v);
    }
    if (q) {
        double v = 0;
        nb_status st;
        Py_BEGIN_ALLOW_THREADS
        st = nb_image_psnr(p, q, &v);
        Py_END_ALLOW_THREADS
        r = st ? nbn_raise(st) : PyFloat_FromDouble(v);
    }
    nbn_end(&c);
    return r;
}

static PyMethodDef image_fns[] = {
    {"image_procedural", (PyCFunction)(void (*)(void))py_image_procedural, METH_VARARGS | METH_KEYWORDS, "image_procedural(width, height, device=None) -> f32 [H, W, 3] Tensor"},
    {"image_read_png", (PyCFunction)(void (*)(void))py_image_read_png, METH_VARARGS | METH_KEYWORDS, "image_read_png(path, channels=0, device=None) -> f32 [H, W, C] Tensor"},
    {"image_read", (PyCFunction)(void (*)(void))py_image_read, METH_VARARGS | METH_KEYWORDS, "image_read(path, device=None) -> (f32 [H, W, C] Tensor, info dict): PNG, JPEG, OpenEXR, BMP, TGA, HDR, PFM, PPM / PGM"},
    {"image_write_png", (PyCFunction)(void (*)(void))py_image_write_png, METH_VARARGS | METH_KEYWORDS, "image_write_png(path, img [H, W, C] or [H*W, C], height=0)"},
    {"image_sample", (PyCFunction)(void (*)(void))py_image_sample, METH_VARARGS | METH_KEYWORDS, "image_sample(img, x, target, seed, step, stratified=False)"},
    {"image_pixel_coords", (PyCFunction)(void (*)(void))py_image_pixel_coords, METH_VARARGS | METH_KEYWORDS, "image_pixel_coords(width, height, device=None) -> f32 [H*W, 2] Tensor"},
    {"image_psnr", py_image_psnr, METH_VARARGS, "image_psnr(pred, ref) -> dB"},
    {NULL},
};

int nbn_image_init(PyObject *mod) { return PyModule_AddFunctions(mod, image_fns); }

/* nabla.nn in the extension: shared argument handling for the neural-network objects
 * (nn_mlp.c: FusedMLP and encodings, nn_optim.c: Adam and losses, nn_tape.c: the tape).
 *
 * Arrays given to a layer: numpy arrays / buffers / lists (host data: any float dtype, any
 * strides; converted to contiguous f32, zero-copy when already contiguous f32 on a CPU layer,
 * else copied, and uploaded to a CUDA layer), nabla.Tensor and torch tensors (device data: must
 * live on the layer's device (DeviceError otherwise: no hidden transfers) and have an accepted
 * dtype (DtypeError otherwise: no hidden casts); non-contiguous ones are made contiguous). The
 * result kind follows the inputs as in nabla calls: torch in -> torch out, numpy -> numpy,
 * nabla.Tensor -> nabla.Tensor. */
#ifndef NBPY_NN_COMMON_H
#define NBPY_NN_COMMON_H

#include "nbpy.h"

#include "nabla/nn_encoding.h"
#include "nabla/nn_mlp.h"
#include "nabla/nn_optim.h"
#include "nabla/nn_tape.h"

#define NBN_MAXA 20

typedef struct nbn_ctx {
    nb_device *dev;   /* the layer's device */
    const char *who;  /* "FusedMLP.forward" … for messages */
    nbp_callctx cx;   /* torch stream state; cx.dev = dev */
    nbp_callctx hx;   /* host conversions; hx.dev = cpu */
    int kind;         /* SRC_* of results: the highest among the inputs */
    int stage;        /* 1: device data is copied to c->dev and converted like host data (tape inputs) */
    int na, nt;
    nbp_arg a[NBN_MAXA];
    nb_tensor *tmp[NBN_MAXA]; /* tensors made here, freed by nbn_end */
} nbn_ctx;

/* Returns -1 with an exception set when dev is NULL. */
int nbn_begin(nbn_ctx *c, nb_device *dev, const char *who);
void nbn_end(nbn_ctx *c);

/* o -> contiguous tensor on c->dev (borrowed: valid until nbn_end). dtype f32, or f16 too when
 * allow_f16 (host data of other float dtypes is converted to f32). min_ndim..max_ndim dims. */
nb_tensor *nbn_in(nbn_ctx *c, PyObject *o, const char *what, int allow_f16, int min_ndim, int max_ndim);
/* A tensor that will be written in place (optimizer parameters and gradients): device data on
 * c->dev, f32, contiguous; or a writable contiguous f32 numpy array on a CPU layer. */
nb_tensor *nbn_inout(nbn_ctx *c, PyObject *o, const char *what);
/* Keeps t for nbn_end to free; returns t (NULL stays NULL). */
nb_tensor *nbn_keep(nbn_ctx *c, nb_tensor *t);
/* Result wrapping (steals t): kind = c->kind, or `kind` when >= 0. Orders torch's stream. */
PyObject *nbn_out(nbn_ctx *c, nb_tensor *t, int kind);
/* After the launches: torch's current stream waits for nabla's (torch CUDA inputs). */
int nbn_after(nbn_ctx *c);

/* Raises for st; returns NULL. */
PyObject *nbn_raise(nb_status st);
/* None for NB_OK, else raises for st (NULL). */
static inline PyObject *nbn_none(nb_status st) {
    if (st) return nbn_raise(st);
    Py_INCREF(Py_None);
    return Py_None;
}
/* Begins c on the CPU device for `who` and converts o to a contiguous host f32 tensor of
 * 1..max_ndim dims (device data is staged to the host, other float dtypes converted): tape and
 * graph inputs. NULL with an exception set; call nbn_end(c) afterwards in every case. */
nb_tensor *nbn_host_f32(nbn_ctx *c, PyObject *o, const char *who, const char *what, int max_ndim);
/* A new host f32 array of shape (nd, sh) filled by fill(ctx, data, count) with the GIL released,
 * returned as kind (SRC_*; -1: numpy). Reads of tape / graph values into Python. */
typedef nb_status (*nbn_fill_fn)(void *ctx, float *dst, int64_t count);
PyObject *nbn_host_result(int nd, const int64_t *sh, int kind, nbn_fill_fn fill, void *ctx);
#define NBN_RAISE_T(st) (nbn_raise(st), (nb_tensor *)NULL)
/* "relu" … -> nb_activation; -1 + ArgumentError. */
int nbn_activation(PyObject *o, const char *what);
/* A new nabla.Tensor view (zero-copy) of t; owner kept alive by it. */
PyObject *nbn_view(nb_tensor *t, PyObject *owner);
/* A torch tensor aliasing t (zero-copy through DLPack; imports torch). */
PyObject *nbn_torch_view(nb_tensor *t);
/* Parses a shape (int or sequence of ints) of 1..max dims. */
int nbn_shape(PyObject *o, int max, int *nd, int64_t *sh, const char *what);
/* The "result kind" keyword: None -> -1, "numpy" / "tensor" / "torch". */
int nbn_kind_arg(PyObject *o, int *kind);

/* nabla._nabla.CTape (nn_tape.c); nn_unet.c registers parameters on it. */
typedef struct {
    PyObject_HEAD
    nb_tape *t;
    PyObject *device;
    long long gen;   /* nb_tape_reset count: handles of activations are valid within one */
    int views_taken; /* params()/grads() views exist: no more nb_tape_param (the buffers move) */
    PyObject *keep;  /* list (or NULL) of the CMlp / CEncoding objects whose ops are on the tape
                      * (an op holds its module object: kept alive until the next reset) */
    PyObject *keep_fns; /* set (or NULL) of the nabla Modules whose functions Tape.call ran: the
                         * tape keeps their prepared calls until it is freed */
} TapeObject;
extern PyObject *nbn_TapeType;

/* The nb_mlp / nb_encoding of a nabla._nabla.CMlp / CEncoding (nn_mlp.c); NULL + TypeError. */
nb_mlp *nbn_mlp_ptr(PyObject *o);
nb_encoding *nbn_encoding_ptr(PyObject *o);

/* Types registered by nbp_nn_init. */
int nbn_mlp_init(PyObject *mod);
int nbn_optim_init(PyObject *mod);
int nbn_tape_init(PyObject *mod);
int nbn_image_init(PyObject *mod);
int nbn_unet_init(PyObject *mod);
int nbn_graph_init(PyObject *mod); /* nn_graph.c: CGraph */

#endif

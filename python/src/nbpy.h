/* nabla._nabla — the CPython extension over nabla's public C API (stable ABI, Python >= 3.11).
 *
 * Files: ext.c (module init, errors, devices, modules), tensor.c (nabla.Tensor, buffer protocol,
 * DLPack), convert.c (Python objects -> call arguments: scalars, lists, buffers, torch tensors),
 * func.c (nabla functions: calls, .map, .bwds, .fwds, results), host.c ([TorchEntryPoint] host
 * functions), launch.c (explicit-block kernel launches: Function.launch_raw, kernel reflection),
 * nn_*.c (nabla.nn: fused MLP,
 * encodings, Adam, losses, images, tape, UNet / DDPM; see nn_common.h).
 *
 * Nothing here imports numpy or torch: an object is a torch tensor only if "torch" is already in
 * sys.modules and it is an instance of torch.Tensor; numpy arrays come in through the buffer
 * protocol, and numpy is looked up (not imported) to build numpy results.
 */
#ifndef NBPY_H
#define NBPY_H

#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030B0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>
#include <stdlib.h>

#include "nabla/nabla.h"

/* ---- objects ------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    nb_device *dev;
} DeviceObject;

typedef struct {
    PyObject_HEAD
    nb_tensor *t;
    PyObject *owner;  /* keeps wrapped memory alive (numpy array, torch tensor, capsule) or NULL */
    PyObject *grad;   /* a Tensor or NULL */
    PyObject *grad_in; /* SlangPy's grad_in: the incoming gradient when this is a _result of .bwds (or NULL) */
    PyObject *device; /* DeviceObject */
    PyObject *stype;  /* SlangPy: the struct type (nabla.SlangType) of a struct tensor, or NULL; its
                       * elements are the trailing dims (python/nabla/_spy_struct.py) */
    Py_ssize_t bshape[NB_MAX_DIMS], bstrides[NB_MAX_DIMS]; /* for the buffer protocol */
    int nexports;
} TensorObject;

typedef struct {
    PyObject_HEAD
    nb_module *m;
    PyObject *device; /* DeviceObject */
    PyObject *name;   /* str */
} ModuleObject;

enum { NBP_PRIMAL = 0, NBP_FWD = 1, NBP_BWD = 2 };

typedef struct {
    PyObject_HEAD
    nb_func *f;
    PyObject *module; /* ModuleObject */
    int mode;         /* NBP_PRIMAL / NBP_FWD / NBP_BWD */
    PyObject *maps;   /* dict: param name or index -> tuple of kernel dims, or NULL */
    PyObject *diff;   /* tuple of bools per parameter: has a gradient (NULL until asked) */
    int nparams;      /* of overload 0 */
    const char *pnames[32]; /* live as long as the module */
    int pdirs[32];
    unsigned char ptensor[32]; /* a Tensor<T,N> parameter: the kernel may write through it */
    int has_struct;   /* some parameter is a struct (SlangPy spelling: spy.c's hook may rewrite the call) */
    int ret_struct;   /* a primal call returning a struct (spy.c's hook wraps the result) */
} FunctionObject;

/* ---- shared state (ext.c) ---------------------------------------------------------------- */

extern PyObject *nbp_TensorType, *nbp_DeviceType, *nbp_ModuleType, *nbp_FunctionType;
extern PyObject *nbp_Error, *nbp_CompileError, *nbp_ShapeError, *nbp_DtypeError,
    *nbp_LayoutError, *nbp_DeviceError, *nbp_NotFoundError, *nbp_ArgumentError,
    *nbp_UnsupportedError, *nbp_MemoryError, *nbp_IOError, *nbp_InternalError;
extern PyObject *nbp_autograd_hook; /* python callable(fn, args, kwargs) or NULL */
/* SlangPy spelling (spy.c, python/nabla/_spy_call.py): callable(fn, args, kwargs) -> (args, kwargs)
 * rewriting a call before binding; or NULL. nbp_spy_wants: 1 if the call needs it. */
extern PyObject *nbp_spy_hook;
int nbp_spy_wants(FunctionObject *fn, PyObject *args, PyObject *kw);
int nbp_spy_init(PyObject *mod);

/* Raises the exception class for st with nb_last_error(); returns NULL. */
PyObject *nbp_raise(nb_status st);
PyObject *nbp_exc_for(nb_status st);
/* The Device object for a spec ("cpu", "cuda:0"), opened once and kept. New reference. */
PyObject *nbp_device_get(const char *spec);
PyObject *nbp_device_for(nb_device *dev); /* new reference */
nb_device *nbp_device_ptr(PyObject *dev_or_spec_or_none); /* borrowed; NULL + exception */
PyObject *nbp_default_device(void); /* borrowed */

/* ---- tensors (tensor.c) ------------------------------------------------------------------ */

int nbp_tensor_init_type(PyObject *mod);
/* Steals t; owner may be NULL (borrowed then increfed). */
PyObject *nbp_tensor_new(nb_tensor *t, PyObject *owner);
int nbp_is_tensor(PyObject *o);
nb_status nbp_view(const nb_tensor *t, nb_tensor **out);
/* numpy array (copy) of a tensor on any device; NULL + exception. */
PyObject *nbp_tensor_to_numpy(nb_tensor *t);
/* DLPack capsule for t (a new handle is taken); torch_stream: the CUDA stream of the consumer
 * whose pending work must finish before the memory is reused after release (or NULL). */
PyObject *nbp_dlpack_capsule(nb_tensor *t, void *consumer_stream, int has_stream, int bool_as_u8);
/* Wraps a DLPack capsule ("dltensor"); marks it used. NULL + exception. */
PyObject *nbp_tensor_from_capsule(PyObject *capsule, PyObject *owner);
nb_dtype nbp_dtype_arg(PyObject *o, int *ok); /* "f32", "float32", numpy/torch dtype objects */

/* ---- argument conversion (convert.c) ----------------------------------------------------- */

enum { SRC_PY = 0, SRC_TENSOR = 1, SRC_NUMPY = 2, SRC_TORCH = 3 };

typedef struct nbp_torch {
    int loaded;           /* 1 once torch has been seen in sys.modules */
    PyObject *Tensor;     /* torch.Tensor */
    PyObject *dtypes[NB_DTYPE_COUNT]; /* torch.float32, …; NULL where torch lacks one */
    PyObject *from_dlpack;      /* torch._C._from_dlpack or torch.utils.dlpack.from_dlpack */
    PyObject *raw_stream;       /* torch._C._cuda_getCurrentRawStream or NULL */
    PyObject *is_grad_enabled;  /* torch.is_grad_enabled */
} nbp_torch;

extern nbp_torch nbp_T;
extern PyObject *nbp_str_data_ptr, *nbp_str_get_device, *nbp_str_shape, *nbp_str_stride,
    *nbp_str_dtype, *nbp_str_requires_grad, *nbp_str_dlpack;

/* 1 if o is a torch tensor (torch already imported), 0 if not, -1 on error. */
int nbp_is_torch(PyObject *o);
int nbp_init_strings(void);
int nbp_torch_load(void); /* 1 once torch (already imported) is cached */
int nbp_is_ndarray(PyObject *o);
/* sys.modules["numpy"] or NULL (borrowed; no import unless force). */
PyObject *nbp_numpy(int force);

/* A Python object converted for one binding. */
typedef struct nbp_arg {
    int src;              /* SRC_* */
    nb_tensor *t;         /* to bind (owned), or NULL for host values */
    nb_tensor *user;      /* the user's memory when t is a staged copy (owned), for write-back */
    nb_dtype vdtype;      /* host values */
    int vndim;
    int64_t vshape[NB_MAX_DIMS];
    void *vdata;          /* PyMem_Malloc'd host values */
    double dval;
    int64_t ival;
    int scalar;           /* 1 = double, 2 = int, 3 = host values */
    Py_buffer view;
    int has_view;
    PyObject *keep;       /* strong ref to the source object */
    int torch_dev;        /* -1 cpu, else cuda index (SRC_TORCH) */
} nbp_arg;

typedef struct nbp_callctx {
    nb_device *dev;       /* the module's device */
    int src;              /* highest SRC_* seen among inputs */
    PyObject *like;       /* borrowed: the first torch tensor seen (device of torch results) */
    int torch_cuda;       /* a torch CUDA tensor was bound: streams ordered */
    void *torch_stream;
    nb_device *torch_nbdev;
    int lazy_order;       /* set by the caller: a torch CUDA tensor only records torch's stream; the
                           * caller launches there or orders the streams itself (launch.c) */
} nbp_callctx;

/* Converts o for binding; want_write: 1 = the parameter is written (out/inout/_result: stride-0,
 * read-only and negatively strided arrays are rejected, staged copies are written back);
 * 2 = it may be written (a Tensor<T,N> view): staged copies of writable arrays are written back. */
int nbp_convert(nbp_callctx *cx, PyObject *o, int want_write, nbp_arg *a);
void nbp_arg_release(nbp_arg *a);
/* After a successful run: copies staged outputs back to the user's memory. */
int nbp_arg_writeback(nbp_arg *a);
/* Makes torch's current stream wait for nabla's after a call that used torch CUDA tensors. */
int nbp_torch_after(nbp_callctx *cx);
int nbp_torch_current_stream(int cuda_index, void **out);

/* nb tensor -> the Python kind the caller gets: SRC_TORCH / SRC_NUMPY / SRC_TENSOR / SRC_PY
 * (steals t; func.c). */
PyObject *nbp_wrap_result(nbp_callctx *cx, int kind, nb_tensor *t);

/* nabla.nn types and functions (nn_*.c). */
int nbp_nn_init(PyObject *mod);

/* ---- functions (func.c) ----------------------------------------------------------------- */

int nbp_func_init_type(PyObject *mod);
/* spy_gen.c: SlangPy generators (call_id, grid, …) as call arguments. nbp_bind_generator binds o
 * to parameter index / name when it is one: 1 bound, 0 not a generator, -1 error set. */
int nbp_spy_gen_init(PyObject *mod);
int nbp_is_generator(PyObject *o);
int nbp_generator_spec(PyObject *o, nb_generator *g);
int nbp_bind_generator(nb_call *c, int index, const char *name, PyObject *o);
/* spy_enc.c: command encoders (SlangPy's append_to) over nb_cmdlist; nbp_cmdlist_of: the list of
 * an encoder object (its `_list` capsule), NULL with TypeError set otherwise. */
int nbp_spy_enc_init(PyObject *mod);
nb_cmdlist *nbp_cmdlist_of(PyObject *enc);
PyObject *nbp_func_new(nb_func *f, PyObject *module, int mode, PyObject *maps);
/* host.c: calls a [TorchEntryPoint] host function (nb_host_call). */
PyObject *nbp_host_call(FunctionObject *fn, PyObject *args, PyObject *kw);

/* launch.c: explicit-block launches and the reflection the slangtorch layer needs. */
PyObject *nbp_func_launch_raw(PyObject *self, PyObject *args, PyObject *kw);
PyObject *nbp_func_kernel_params(PyObject *self, PyObject *unused);
PyObject *nbp_func_param_types(PyObject *self, PyObject *unused);
PyObject *nbp_func_get_is_kernel(PyObject *self, void *unused);
PyObject *nbp_module_functions(PyObject *self, PyObject *unused);
PyObject *nbp_module_check(PyObject *self, PyObject *unused);

#endif

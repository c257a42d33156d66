/* nabla._nabla.CGraph: a recorded computational graph (include/nabla/graph.h) of a CTape.
 * nabla.Graph / nabla.record / nabla.compile (python/nabla/_graph.py) wrap it.
 *
 *   _nabla.graph_record_begin(ctape)
 *   ... tape ops (immediate mode; copied into the graph) ...
 *   g = _nabla.graph_record_end(ctape)           # validated: errors name the node
 *   g.output(v); g.set_input(0, array); g.run(); g.read(v) -> numpy (result= as CTape.read)
 *
 * The CGraph holds its CTape (the graph reads the tape's parameters) and the module objects
 * (CMlp / CEncoding) the tape's ops held at record end: their nb_mlp / nb_encoding are op
 * objects of the graph's nodes, which must outlive it (the tape drops them at its next reset). */
#include "nn_common.h"

#include <string.h>

#include "nabla/graph.h"

static PyObject *GraphType;

typedef struct {
    PyObject_HEAD
    nb_graph *g;
    PyObject *tape; /* the CTape */
    PyObject *keep; /* tuple of module objects the nodes use */
} GraphObject;

#define G(self) (((GraphObject *)(self))->g)

static void graph_dealloc(PyObject *self) {
    GraphObject *o = (GraphObject *)self;
    PyTypeObject *tp = Py_TYPE(self);
    nb_graph_free(o->g); /* before the tape and the modules it refers to */
    Py_XDECREF(o->keep);
    Py_XDECREF(o->tape);
    PyObject_Free(self);
    Py_DECREF(tp);
}

static nb_tape *tape_arg(PyObject *o) {
    if (!PyObject_TypeCheck(o, (PyTypeObject *)nbn_TapeType)) {
        PyErr_SetString(PyExc_TypeError, "expected a nabla._nabla.CTape (nabla.nn.Tape._c)");
        return NULL;
    }
    return ((TapeObject *)o)->t;
}

static PyObject *py_record_begin(PyObject *self, PyObject *arg) {
    nb_tape *t = tape_arg(arg);
    if (!t) return NULL;
    return nbn_none(nb_graph_record_begin(t));
}

static PyObject *py_recording(PyObject *self, PyObject *arg) {
    nb_tape *t = tape_arg(arg);
    if (!t) return NULL;
    return PyBool_FromLong(nb_graph_recording(t));
}

static PyObject *py_record_end(PyObject *self, PyObject *arg) {
    nb_tape *t = tape_arg(arg);
    if (!t) return NULL;
    nb_graph *g = NULL;
    nb_status st = nb_graph_record_end(t, &g);
    if (st) return nbn_raise(st);
    GraphObject *o = PyObject_New(GraphObject, (PyTypeObject *)GraphType);
    if (!o) {
        nb_graph_free(g);
        return NULL;
    }
    o->g = g;
    o->tape = arg;
    Py_INCREF(arg);
    PyObject *keep = ((TapeObject *)arg)->keep;
    o->keep = keep ? PyList_AsTuple(keep) : PyTuple_New(0);
    if (!o->keep) {
        Py_DECREF(o);
        return NULL;
    }
    return (PyObject *)o;
}

static int handle_arg(PyObject *o, nb_tvar *v) {
    long x = PyLong_AsLong(o);
    if (x == -1 && PyErr_Occurred()) return -1;
    *v = (nb_tvar)x;
    return 0;
}

static PyObject *graph_output(PyObject *self, PyObject *arg) {
    nb_tvar v;
    if (handle_arg(arg, &v) < 0) return NULL;
    return nbn_none(nb_graph_output(G(self), v));
}

static PyObject *graph_info(PyObject *self, PyObject *u) {
    nb_graph_info i;
    nb_status st = nb_graph_get_info(G(self), &i);
    if (st) return nbn_raise(st);
    return Py_BuildValue("{s:i,s:i,s:i,s:i,s:i,s:O,s:i,s:O,s:L,s:i,s:L}", "n_nodes", i.n_nodes, "n_values",
                         i.n_values, "n_inputs", i.n_inputs, "n_outputs", i.n_outputs, "n_consts", i.n_consts,
                         "has_backward", i.has_backward ? Py_True : Py_False, "loss", (int)i.loss, "on_cuda",
                         i.on_cuda ? Py_True : Py_False, "runs", (long long)i.runs, "cuda_graph", i.cuda_graph,
                         "captures", (long long)i.captures);
}

static PyObject *graph_input(PyObject *self, PyObject *arg) {
    int i = (int)PyLong_AsLong(arg);
    if (PyErr_Occurred()) return NULL;
    nb_tvar v;
    nb_status st = nb_graph_input(G(self), i, &v);
    if (st) return nbn_raise(st);
    return PyLong_FromLong(v);
}

/* value(v) -> (shape, dtype, role, output, needs_grad, input_index) */
static PyObject *graph_value(PyObject *self, PyObject *arg) {
    nb_tvar v;
    if (handle_arg(arg, &v) < 0) return NULL;
    nb_graph_value vi;
    nb_status st = nb_graph_value_info(G(self), v, &vi);
    if (st) return nbn_raise(st);
    static const char *roles[] = {"unused", "param", "input", "const", "act"};
    PyObject *sh = PyTuple_New(vi.ndim);
    for (int k = 0; sh && k < vi.ndim; k++) PyTuple_SetItem(sh, k, PyLong_FromLongLong(vi.shape[k]));
    if (!sh) return NULL;
    return Py_BuildValue("(Nssiii)", sh, vi.dtype == NB_BF16 ? "bfloat16" : "float32",
                         roles[vi.role >= 1 && vi.role <= 4 ? vi.role : 0], vi.output, vi.needs_grad,
                         vi.input_index);
}

/* set_input(i, data): host data of any float dtype / device arrays staged to the host, made a
 * contiguous f32 copy (as CTape.input does), then copied into the graph's input i. */
static PyObject *graph_set_input(PyObject *self, PyObject *args) {
    int i;
    PyObject *d;
    if (!PyArg_ParseTuple(args, "iO", &i, &d)) return NULL;
    nbn_ctx c;
    PyObject *r = NULL;
    nb_tensor *h = nbn_host_f32(&c, d, "Graph.set_input", "data", NB_TAPE_MAX_DIMS);
    if (h) {
        nb_status st;
        Py_BEGIN_ALLOW_THREADS
        st = nb_graph_set_input(G(self), i, nb_tensor_data(h), NB_F32, nb_tensor_ndim(h), nb_tensor_shape(h));
        Py_END_ALLOW_THREADS
        r = nbn_none(st);
    }
    nbn_end(&c);
    return r;
}

/* set_input_tensor(i, data): device arrays (nabla.Tensor, torch) on the graph's device (a CPU
 * graph: CPU arrays), f32, copied straight into input i (nb_graph_set_input_tensor: queued on
 * the stream on CUDA, torch's stream ordered before and after): no trip through the host. */
static PyObject *graph_set_input_tensor(PyObject *self, PyObject *args) {
    int i;
    PyObject *d;
    if (!PyArg_ParseTuple(args, "iO", &i, &d)) return NULL;
    nbn_ctx c;
    if (nbn_begin(&c, nb_tape_device(((TapeObject *)((GraphObject *)self)->tape)->t), "Graph.set_input") < 0) return NULL;
    PyObject *r = NULL;
    nb_tensor *x = nbn_in(&c, d, "data", 0, 1, NB_TAPE_MAX_DIMS);
    if (x) {
        nb_status st;
        Py_BEGIN_ALLOW_THREADS
        st = nb_graph_set_input_tensor(G(self), i, x);
        Py_END_ALLOW_THREADS
        if (st) nbn_raise(st);
        else if (nbn_after(&c) == 0) r = nbn_none(NB_OK);
    }
    nbn_end(&c);
    return r;
}

static PyObject *graph_run(PyObject *self, PyObject *u) {
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_graph_run(G(self));
    Py_END_ALLOW_THREADS
    if (st) return nbn_raise(st);
    Py_RETURN_NONE;
}

/* read(v, grad=False, result=None) -> a new host array (numpy by default) of v's shape. */
typedef struct read_ctx {
    nb_graph *g;
    nb_tvar v;
    int grad;
} read_ctx;

static nb_status read_fill(void *ctx, float *dst, int64_t n) {
    const read_ctx *r = ctx;
    return r->grad ? nb_graph_read_grad(r->g, r->v, dst, n) : nb_graph_read(r->g, r->v, dst, n);
}

static PyObject *graph_read(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"v", "grad", "result", NULL};
    int v, grad = 0, kind;
    PyObject *res = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i|pO", kwl, &v, &grad, &res)) return NULL;
    if (nbn_kind_arg(res, &kind) < 0) return NULL;
    nb_graph_value vi;
    nb_status st = nb_graph_value_info(G(self), v, &vi);
    if (st) return nbn_raise(st);
    read_ctx r = {G(self), v, grad};
    return nbn_host_result(vi.ndim, vi.shape, kind, read_fill, &r);
}

#define GRAPH_FLAG(fn, call)                                                                   \
    static PyObject *fn(PyObject *self, PyObject *arg) {                                        \
        int on = PyObject_IsTrue(arg);                                                          \
        if (on < 0) return NULL;                                                                \
        return nbn_none(call(G(self), on));                                                     \
    }
GRAPH_FLAG(graph_set_cuda_graph, nb_graph_set_cuda_graph)
GRAPH_FLAG(graph_set_poison, nb_graph_set_poison)
GRAPH_FLAG(graph_set_profiling, nb_graph_set_profiling)

static PyObject *graph_memory(PyObject *self, PyObject *u) {
    int64_t peak = 0, naive = 0;
    nb_status st = nb_graph_memory(G(self), &peak, &naive);
    if (st) return nbn_raise(st);
    return Py_BuildValue("(LL)", (long long)peak, (long long)naive);
}

/* dump(flags) -> str: 1 text, 2 DOT (NB_GRAPH_DUMP_*). */
static PyObject *graph_dump(PyObject *self, PyObject *arg) {
    unsigned flags = (unsigned)PyLong_AsUnsignedLong(arg);
    if (PyErr_Occurred()) return NULL;
    size_t need = 0;
    nb_status st = nb_graph_dump(G(self), flags, NULL, 0, &need);
    if (st) return nbn_raise(st);
    char *buf = PyMem_Malloc(need + 1);
    if (!buf) return PyErr_NoMemory();
    st = nb_graph_dump(G(self), flags, buf, need + 1, NULL);
    PyObject *r = st ? nbn_raise(st) : PyUnicode_DecodeUTF8(buf, (Py_ssize_t)strlen(buf), "replace");
    PyMem_Free(buf);
    return r;
}

/* compile(dead=True, dedup=True, fold=True, epilogue=True, fuse=True) -> dict of what each pass
 * did (nb_graph_compile: in place; a pass set False is skipped). */
static PyObject *graph_compile(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"dead", "dedup", "fold", "epilogue", "fuse", NULL};
    int on[5] = {1, 1, 1, 1, 1};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|ppppp", kwl, &on[0], &on[1], &on[2], &on[3], &on[4])) return NULL;
    nb_graph_compile_options o;
    nb_graph_compile_options_init(&o);
    o.no_dead = !on[0], o.no_dedup = !on[1], o.no_fold = !on[2], o.no_epilogue = !on[3], o.no_fuse = !on[4];
    nb_graph_compile_stats cs;
    memset(&cs, 0, sizeof cs);
    nb_status st;
    Py_BEGIN_ALLOW_THREADS
    st = nb_graph_compile(G(self), &o, &cs);
    Py_END_ALLOW_THREADS
    if (st) return nbn_raise(st);
    return Py_BuildValue("{s:i,s:i,s:i,s:i,s:i,s:i}", "dead", cs.dead, "duplicates", cs.duplicates, "folded",
                         cs.folded, "epilogues", cs.epilogues, "fused_nodes", cs.fused_nodes, "fused_ops",
                         cs.fused_ops);
}

static PyMethodDef graph_methods[] = {
    {"output", graph_output, METH_O, "output(handle): keep and allow reading after a run"},
    {"info", graph_info, METH_NOARGS, "info() -> dict (nb_graph_info)"},
    {"input", graph_input, METH_O, "input(i) -> handle"},
    {"value", graph_value, METH_O, "value(handle) -> (shape, dtype, role, output, needs_grad, input_index)"},
    {"set_input", graph_set_input, METH_VARARGS, "set_input(i, data)"},
    {"set_input_tensor", graph_set_input_tensor, METH_VARARGS, "set_input_tensor(i, device_array)"},
    {"run", graph_run, METH_NOARGS, "run(): forward (+ backward when recorded)"},
    {"read", (PyCFunction)(void (*)(void))graph_read, METH_VARARGS | METH_KEYWORDS,
     "read(handle, grad=False, result=None) -> numpy"},
    {"set_cuda_graph", graph_set_cuda_graph, METH_O, "set_cuda_graph(on)"},
    {"set_poison", graph_set_poison, METH_O, "set_poison(on)"},
    {"set_profiling", graph_set_profiling, METH_O, "set_profiling(on)"},
    {"memory", graph_memory, METH_NOARGS, "memory() -> (planned_peak, naive) bytes"},
    {"dump", graph_dump, METH_O, "dump(flags) -> str (1 text, 2 DOT)"},
    {"compile", (PyCFunction)(void (*)(void))graph_compile, METH_VARARGS | METH_KEYWORDS,
     "compile(dead=True, dedup=True, fold=True, epilogue=True, fuse=True) -> dict"},
    {NULL},
};
static PyType_Slot graph_slots[] = {
    {Py_tp_dealloc, graph_dealloc}, {Py_tp_methods, graph_methods},
    {Py_tp_doc, "nb_graph (use nabla.record / nabla.Graph)"}, {0, NULL},
};
static PyType_Spec graph_spec = {"nabla._nabla.CGraph", sizeof(GraphObject), 0,
                                 Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, graph_slots};

static PyMethodDef graph_module_fns[] = {
    {"graph_record_begin", py_record_begin, METH_O, "graph_record_begin(ctape)"},
    {"graph_record_end", py_record_end, METH_O, "graph_record_end(ctape) -> CGraph"},
    {"graph_recording", py_recording, METH_O, "graph_recording(ctape) -> bool"},
    {NULL},
};

int nbn_graph_init(PyObject *mod) {
    if (!(GraphType = PyType_FromSpec(&graph_spec))) return -1;
    Py_INCREF(GraphType);
    if (PyModule_AddObject(mod, "CGraph", GraphType) < 0) return -1;
    return PyModule_AddFunctions(mod, graph_module_fns);
}

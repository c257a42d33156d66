"""Recorded computational graphs from Python (include/nabla/graph.h; docs/GRAPHS.md).

    tape = nabla.nn.Tape("cpu"); w = tape.param("w", (4, 16), init=0.25); b = tape.param("b", (4,))
    with nabla.record(tape) as g:             # the tape's ops in the block run now (immediate
        x = tape.input(xs)                    # mode) and are copied into g; tape.input values
        y = tape.linear(x, w, b)              # are the graph's inputs, in order
        loss = tape.mse(y, tape.input(ts))
        tape.backward(loss)                   # the backward is part of the graph
        g.output(y)                           # outputs: readable after a run (the loss is one)
    g.run(xs2, ts2)                           # replay with new inputs (same shapes and dtypes)
    g.read(y), g.read(loss) -> numpy; g.grad(w) (parameter grads accumulate in the tape)
    g.memory(), g.dump(), g.dot(), g.save_dot("g.dot")

    @nabla.compile                            # records on the first call, replays after
    def step(tape, x, t):                     # tape first; array arguments arrive as tape values
        loss = tape.mse(tape.linear(x, w, b), t)
        tape.backward(loss)
        return loss                           # a Var, or a tuple / list / dict of Vars
    step(tape, xs, ts) -> numpy (torch when an input is a torch tensor)

Errors are nabla's typed errors (ShapeError, DtypeError, ArgumentError, UnsupportedError, ...)
with the C layer's message, which names the node ("node 3 (linear): ...").
"""
from collections import OrderedDict

from . import _nabla
from ._nabla import ArgumentError, DtypeError, UnsupportedError
from ._nn_tape import Tape, Var

__all__ = ["Graph", "record", "compile", "CompiledFunction"]

_DUMP_TEXT, _DUMP_DOT = 1, 2
_NB_DTYPES = {"f16": "float16", "f32": "float32", "f64": "float64", "bf16": "bfloat16", "i8": "int8",
              "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8", "u16": "uint16",
              "u32": "uint32", "u64": "uint64", "bool": "bool"}


def _dtype_name(x):
    """numpy-style dtype name of an array argument ("float32", ...); None for Python numbers and
    lists (they are converted to f32 like any host data and carry no dtype of their own)."""
    d = getattr(x, "dtype", None)
    if d is None:
        return None
    name = getattr(d, "name", None)
    if not isinstance(name, str):
        name = str(d)
    name = name.replace("torch.", "")
    return _NB_DTYPES.get(name, name)


def _is_array(x):
    """An array argument of a compiled function (a graph input): numpy, nabla.Tensor, torch, any
    object with a shape and a dtype, of 1 or more dims (0-dim ones, like numpy scalars, are
    constants of the graph: part of the cache key by value)."""
    is_arr = (hasattr(x, "__array_interface__") or hasattr(x, "__cuda_array_interface__")
              or hasattr(x, "__dlpack__") or (hasattr(x, "shape") and hasattr(x, "dtype")))
    return is_arr and len(getattr(x, "shape", (1,))) > 0


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _on_cuda(x):
    """True / False for a nabla.Tensor or torch tensor on a CUDA / CPU device; None otherwise."""
    if isinstance(x, _nabla.CTensor):
        return x.device.type != "cpu"
    if _is_torch(x) and hasattr(x, "device"):
        return x.device.type == "cuda"
    return None


class Graph:
    """A recorded graph of a nabla.nn.Tape: made by `with nabla.record(tape) as g:` (usable
    after the block). Values are the Vars of the recording (and the tape's parameters)."""

    def __init__(self, tape):
        if not isinstance(tape, Tape):
            raise TypeError(f"nabla.record: expected a nabla.nn.Tape, got {type(tape).__name__}")
        self.tape = tape
        self._c = None          # the CGraph, once recorded
        self._gen = None        # the tape generation of the recording
        self._pending = []      # outputs marked inside the block
        self._in_dtypes = None  # the dtype name of each input's data at recording (or None)
        self.compiled = None    # compile()'s stats once compiled

    # ---- recording -----------------------------------------------------------------------------

    def _begin(self):
        if self._c is not None:
            raise ArgumentError("nabla.record: this graph was recorded already")
        _nabla.graph_record_begin(self.tape._c)
        self._gen = self.tape._c.generation
        self._in_dtypes = []
        self.tape._graph_rec = self._in_dtypes

    def _end(self, keep):
        self.tape._graph_rec = None
        if not keep:  # the block raised: stop recording, drop what was recorded
            if _nabla.graph_recording(self.tape._c):
                try:
                    _nabla.graph_record_end(self.tape._c)
                except _nabla.NablaError:
                    pass
            return
        self._c = _nabla.graph_record_end(self.tape._c)
        for v in self._pending:
            self._c.output(v)
        self._pending = []

    def _live(self, what):
        if self._c is None:
            raise ArgumentError(f"Graph.{what}: the graph is still being recorded (use it after the "
                                "`with nabla.record(tape)` block)")
        return self._c

    def _h(self, v, what):
        if not isinstance(v, Var):
            raise TypeError(f"Graph.{what}: expected a nabla.nn.Var of the recording, got {type(v).__name__}")
        if v.tape is not self.tape:
            raise ArgumentError(f"Graph.{what}: a Var of another tape")
        if v.gen >= 0 and v.gen != self._gen:
            raise ArgumentError(f"Graph.{what}: Var {v.id} was not made while this graph was recorded")
        return v.id

    # ---- shape of the graph --------------------------------------------------------------------

    def output(self, *vs):
        """Marks values as outputs (kept after a run, readable). Inside the block: applied at its
        end. The loss given to tape.backward is an output already."""
        for v in vs:
            h = self._h(v, "output")
            if self._c is None:
                self._pending.append(h)
            else:
                self._c.output(h)
        return self

    @property
    def info(self):
        """dict: n_nodes, n_values, n_inputs, n_outputs, n_consts, has_backward, loss (handle),
        on_cuda, runs, cuda_graph (0 unused, 1 warming, 2 replayed as one CUDA graph), captures."""
        return self._live("info").info()

    @property
    def inputs(self):
        """The input values (Vars made by tape.input while recording), in order."""
        c = self._live("inputs")
        return [Var(self.tape, c.input(i), self._gen) for i in range(c.info()["n_inputs"])]

    def shape(self, v):
        return self._live("shape").value(self._h(v, "shape"))[0]

    # ---- replay --------------------------------------------------------------------------------

    def set_input(self, i, data):
        """Input i := a copy of data (numpy, list, nabla.Tensor, torch): the recorded shape, and
        the dtype of the data recorded (DtypeError otherwise; Python lists carry none). A
        nabla.Tensor or torch tensor on the graph's device is copied there; other data goes
        through the host like tape.input's (uploaded on CUDA)."""
        c = self._live("set_input")
        n = c.info()["n_inputs"]
        if not isinstance(i, int) or not 0 <= i < n:
            raise ArgumentError(f"Graph.set_input: input {i!r} of {n}")
        want = self._in_dtypes[i] if i < len(self._in_dtypes) else None
        got = _dtype_name(data)
        if want is not None and got is not None and got != want:
            raise DtypeError(f"Graph.set_input: input {i} has dtype {got}, the graph was recorded with {want} "
                             "(convert it, or record again)")
        if _on_cuda(data) == bool(c.info()["on_cuda"]):
            c.set_input_tensor(i, data)  # on the graph's device: copied there, not through the host
        else:
            c.set_input(i, data)  # host data / another device: staged through the host as tape.input

    def run(self, *inputs):
        """Sets inputs 0, 1, ... from the arguments (None keeps an input's data) and runs the
        forward, and the backward when one was recorded (parameter grads accumulate in the tape,
        as tape.backward does: zero them as usual). Returns self."""
        c = self._live("run")
        n = c.info()["n_inputs"]
        if len(inputs) > n:
            raise ArgumentError(f"Graph.run: {len(inputs)} inputs given, the graph has {n}")
        for i, x in enumerate(inputs):
            if x is not None:
                self.set_input(i, x)
        c.run()
        return self

    def read(self, v, result=None):
        """A host copy of value v after a run (an output, input or constant; result: None /
        "numpy", "torch", "tensor"). Parameters: the tape's current values."""
        if isinstance(v, Var) and v.gen < 0:
            return self.tape.value(v, result)
        return self._live("read").read(self._h(v, "read"), False, result)

    def grad(self, v, result=None):
        """The gradient of v after a run with backward: a parameter (the tape's accumulated
        gradient), an input recorded with requires_grad, or the loss."""
        if isinstance(v, Var) and v.gen < 0:
            return self.tape.grad(v, result)
        return self._live("grad").read(self._h(v, "grad"), True, result)

    def set_cuda_graph(self, on=True):
        """CUDA: replay as one CUDA graph once warm (default on); CPU graphs: no effect."""
        self._live("set_cuda_graph").set_cuda_graph(bool(on))

    def set_poison(self, on=True):
        """Test option: planned buffers are filled with NaN when their lifetime ends."""
        self._live("set_poison").set_poison(bool(on))

    def set_profiling(self, on=True):
        """Per-node times of the next runs (shown by dump())."""
        self._live("set_profiling").set_profiling(bool(on))

    def compile(self, dead=True, dedup=True, fold=True, epilogue=True, fuse=True):
        """Rewrites the graph in place (nb_graph_compile; mark outputs first): removes dead and
        duplicate nodes, folds constants, joins linear -> relu into one node and fuses chains of
        elementwise ops into generated kernels (each pass can be turned off). Replays then give
        the recorded results within rounding. Returns what each pass did: {"dead", "duplicates",
        "folded", "epilogues", "fused_nodes", "fused_ops"}; also in self.compiled."""
        self.compiled = self._live("compile").compile(dead, dedup, fold, epilogue, fuse)
        return self.compiled

    # ---- inspection ----------------------------------------------------------------------------

    def memory(self):
        """{"planned_peak": bytes of the one shared block, "naive": every buffer its own}."""
        peak, naive = self._live("memory").memory()
        return {"planned_peak": peak, "naive": naive}

    def dump(self):
        """One line per node: op, input and output shapes, bytes, time (when profiled)."""
        return self._live("dump").dump(_DUMP_TEXT)

    def dot(self):
        """Graphviz DOT text of the graph (values, nodes, edges labelled with shapes)."""
        return self._live("dot").dump(_DUMP_DOT)

    def save_dot(self, path):
        with open(path, "w") as f:
            f.write(self.dot())

    def __repr__(self):
        if self._c is None:
            return "<nabla.Graph (recording)>"
        i = self._c.info()
        return (f"<nabla.Graph {i['n_nodes']} nodes, {i['n_inputs']} inputs, {i['n_outputs']} outputs"
                f"{', backward' if i['has_backward'] else ''}>")


class record:
    """`with nabla.record(tape) as g:` records the tape ops run in the block into the Graph g
    (they also run now, in immediate mode). At the end of the block the graph is validated: an
    effect a replay cannot repeat (reading an intermediate value and then computing on, a
    timestep embedding from host data, registering a parameter, tape.reset()) raises there,
    naming the node or value."""

    def __init__(self, tape):
        self.graph = Graph(tape)

    def __enter__(self):
        self.graph._begin()
        return self.graph

    def __exit__(self, et, ev, tb):
        self.graph._end(et is None)
        return False


class CompiledFunction:
    """The result of nabla.compile(fn): see compile."""

    def __init__(self, fn, cache_size=8, cuda_graph=True, passes=True):
        if not callable(fn):
            raise TypeError(f"nabla.compile: expected a function, got {type(fn).__name__}")
        if cache_size < 1:
            raise ArgumentError("nabla.compile: cache_size must be at least 1")
        self.fn = fn
        self.cache_size = cache_size
        self.cuda_graph = cuda_graph
        if passes is True:
            passes = {}
        elif passes is not False and not isinstance(passes, dict):
            raise TypeError("nabla.compile: passes must be True, False or a dict of Graph.compile switches")
        self.passes = passes  # False: replay the recorded graph as recorded
        self._cache = OrderedDict()  # signature -> _Entry, least recently used first
        self.records = 0
        self.replays = 0
        self.__name__ = getattr(fn, "__name__", "fn")
        self.__doc__ = getattr(fn, "__doc__", None)

    def _signature(self, tape, args, kwargs):
        sig = [id(tape)]
        for a in args:
            if _is_array(a):
                sig.append(("array", tuple(int(s) for s in a.shape), _dtype_name(a)))
            elif hasattr(a, "item") and getattr(a, "shape", None) == ():
                sig.append(("const", a.item()))  # a 0-dim array: its value
            else:
                sig.append(("const", a))
        sig.append(tuple(sorted(kwargs.items())))
        try:
            key = tuple(sig)
            hash(key)
        except TypeError:
            raise TypeError(f"nabla.compile({self.__name__}): arguments other than arrays must be hashable "
                            "(numbers, strings, tuples): they are part of the cache key") from None
        return key

    def __call__(self, tape, *args, **kwargs):
        if not isinstance(tape, Tape):
            raise TypeError(f"nabla.compile({self.__name__}): the first argument must be the nabla.nn.Tape, "
                            f"got {type(tape).__name__}")
        key = self._signature(tape, args, kwargs)
        kind = "torch" if any(_is_torch(a) for a in args) else None
        e = self._cache.get(key)
        if e is not None and e.graph.tape is tape:
            self._cache.move_to_end(key)
            arrays = [a for a in args if _is_array(a)]
            e.graph.run(*arrays)
            self.replays += 1
            return e.results(lambda v: e.graph.read(v, kind))
        e = self._record(tape, args, kwargs)
        self._cache[key] = e
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        self.records += 1
        return e.results(lambda v: tape.value(v, kind))

    def _record(self, tape, args, kwargs):
        name = self.__name__
        tape.reset()  # a recording starts from an empty step, as a training step does
        rec = record(tape)
        try:
            with rec as g:
                call = [tape.input(a) if _is_array(a) else a for a in args]
                out = self.fn(tape, *call, **kwargs)
        except _nabla.NablaError as err:
            raise type(err)(f"nabla.compile({name}): {err}") from None
        e = _Entry(g, out, name)
        g.output(*[v for v in e.leaves if v.gen >= 0])
        if self.passes is not False:
            try:
                g.compile(**self.passes)
            except _nabla.NablaError as err:
                raise type(err)(f"nabla.compile({name}): {err}") from None
        if not self.cuda_graph:
            g.set_cuda_graph(False)
        return e

    def cache_info(self):
        """{"records": graphs recorded, "replays": calls that replayed one, "entries": cached}."""
        return {"records": self.records, "replays": self.replays, "entries": len(self._cache)}

    def clear(self):
        self._cache.clear()

    @property
    def graphs(self):
        """The cached Graphs, least recently used first."""
        return [e.graph for e in self._cache.values()]


class _Entry:
    """A cached graph and the structure of fn's return value (Vars at the leaves)."""

    def __init__(self, graph, out, name):
        self.graph = graph
        self.leaves = []
        self.shape = self._flatten(out, name)

    def _flatten(self, o, name):
        if o is None:
            return None
        if isinstance(o, Var):
            if o.tape is not self.graph.tape:
                raise ArgumentError(f"nabla.compile({name}): returned a Var of another tape")
            self.leaves.append(o)
            return len(self.leaves) - 1
        if isinstance(o, (tuple, list)):
            return (type(o), [self._flatten(x, name) for x in o])
        if isinstance(o, dict):
            return (dict, [(k, self._flatten(x, name)) for k, x in o.items()])
        raise ArgumentError(f"nabla.compile({name}): returned a {type(o).__name__}; a compiled function "
                            "returns tape values (Vars), or tuples / lists / dicts of them, or None")

    def results(self, read):
        vals = [read(v) for v in self.leaves]

        def build(s):
            if s is None:
                return None
            if isinstance(s, int):
                return vals[s]
            t, items = s
            if t is dict:
                return {k: build(x) for k, x in items}
            return t(build(x) for x in items)
        return build(self.shape)


def compile(fn=None, *, cache_size=8, cuda_graph=True, passes=True):
    """Decorator: `@nabla.compile` or `nabla.compile(fn, cache_size=8, cuda_graph=True,
    passes=True)`.

    Calling convention: compiled(tape, *args, **kwargs) calls fn(tape, *args', **kwargs) where
    args' are args with every array (numpy, nabla.Tensor, torch, anything with shape and dtype)
    replaced by a tape value made by tape.input(array) (requires_grad False), in order: these
    are the graph's inputs. Other arguments (numbers, strings, tuples) and kwargs are constants
    of the graph. fn builds the step with the Tape's methods (parameters registered before) and
    returns a Var, a tuple / list / dict of Vars, or None; it may call tape.backward(loss).

    First call for a signature (the tape, each array's shape and dtype, the constants): the tape
    is reset, fn runs in immediate mode while the ops are recorded into a Graph, and the results
    are read from the tape. Later calls with the same signature replay that graph with the new
    arrays (fn is not called: Python side effects in fn happen once per signature, as with
    torch.compile). A new signature records again; at most cache_size graphs are kept (least
    recently used dropped). Results are numpy arrays (torch tensors when an array argument is a
    torch tensor) in fn's structure. Parameter gradients accumulate in the tape as with
    tape.backward. Effects a replay cannot repeat (a host read of an intermediate followed by
    more ops, a timestep embedding from host data, parameter registration) raise at the first
    call, naming the node."""
    if fn is None:
        return lambda f: CompiledFunction(f, cache_size, cuda_graph, passes)
    return CompiledFunction(fn, cache_size, cuda_graph, passes)

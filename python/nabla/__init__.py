"""nabla — differentiable kernels written in .nb, called over arrays from Python.

    import nabla, numpy as np
    m = nabla.load_module("add.nb")            # float add(float a, float b)
    y = m.add(np.arange(4.0), 10.0)            # numpy in -> numpy out, broadcast like NumPy
    m.f.bwds(x, _grads={"x": dx}, _dout=dy)    # reverse mode: dx += dL/dx
    y, dy = m.f.fwds(x, _tangents={"x": dx})   # forward mode

Inputs: Python numbers and lists, numpy arrays (or any buffer), nabla.Tensor, torch tensors
(zero-copy, CPU or CUDA, streams ordered), DLPack objects. The result follows the inputs (torch in
-> torch out on the same device, numpy in -> numpy out) unless _result= says otherwise. Neither
numpy nor torch is imported by `import nabla`. See docs/PYTHON.md.
"""
from . import _nabla
from ._nabla import (  # noqa: F401
    ArgumentError,
    CompileError,
    Device,
    DeviceError,
    DtypeError,
    FileError,
    Function,
    InternalError,
    LayoutError,
    NablaError,
    NotFoundError,
    OutOfMemoryError,
    ShapeError,
    UnsupportedError,
)

__version__ = _nabla.version
__all__ = [
    "device", "set_default_device", "load_module", "load_module_from_source", "Module", "Tensor",
    "Function", "Device", "NablaError", "CompileError", "ShapeError", "DtypeError", "LayoutError",
    "DeviceError", "NotFoundError", "ArgumentError", "UnsupportedError", "OutOfMemoryError",
    "FileError", "InternalError", "init_device", "create_device", "DeviceType", "NDBuffer",
    "SlangType", "FunctionNode", "BufferUsage", "MemoryType",
]


def device(spec="auto"):
    """nabla.device("auto" | "cpu" | "cuda" | "cuda:N") -> Device (opened once, then shared).
    "auto" is cuda:0 when a GPU and driver are present, else the cpu."""
    return _nabla.device(spec)


def set_default_device(dev):
    """Device used when load_module / Tensor constructors get device=None (initially
    $NABLA_DEVICE or "auto")."""
    _nabla.set_default_device(dev)


def cuda_available():
    return _nabla.cuda_device_count() > 0


class Module:
    """A loaded .nb module; its functions are attributes: m.add(a, b)."""

    def __init__(self, cmod):
        self.__dict__["_cmod"] = cmod

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            f = self._cmod.func(name)
        except NotFoundError as e:
            # SlangPy: module.float, module.float3, module.MyStruct name types (dtypes)
            try:
                t = _spy_types.module_type(self, name)
            except NotFoundError:
                raise AttributeError(str(e)) from None
            self.__dict__[name] = t
            return t
        g = self.__dict__.get("_globals")
        if g:  # module.set({...}): bound by name where the function has such a parameter
            vals = {k: v for k, v in g.items() if k in f.param_names}
            if vals:
                f = f.set(vals)
        self.__dict__[name] = f  # cached: later lookups are plain attribute reads
        return f

    def check_errors(self):
        """Waits for the module's device, then raises the bounds error (nabla.ShapeError naming
        the kernel, tensor, index and launch number) of a launch whose check was deferred
        (slangtorch's launchRaw on CUDA), if one is pending. Its next launch or call checks too,
        without waiting. docs/PYTHON.md, "Errors of launches"."""
        self._cmod.check()

    def set(self, values=None, **kw):
        """SlangPy: module-wide global parameters: every later call of a function that has a
        parameter of that name (module-scope buffers are trailing parameters) gets the value.
        Returns self."""
        vals = dict(values or {}, **kw)
        g = dict(self.__dict__.get("_globals") or {})
        g.update(vals)
        for k in list(self.__dict__):  # drop cached functions: they are rebuilt with the values
            if k not in ("_cmod", "_globals"):
                del self.__dict__[k]
        self.__dict__["_globals"] = g
        return self

    def __getitem__(self, name):
        return getattr(self, name)

    def require_function(self, name):
        """The function `name` (NotFoundError lists the module's functions)."""
        return self._cmod.func(name)

    @property
    def device(self):
        return self._cmod.device

    @property
    def name(self):
        return self._cmod.name

    def constants(self, values):
        """Sets link-time constants (`extern static const int N = 4;`) for later calls; returns self."""
        for k, v in values.items():
            self._cmod.set_constant(k, v)
        return self

    def set_constant(self, name, value):
        self._cmod.set_constant(name, value)

    def dump(self, format="c", entry=None, mode="primal"):
        """Generated code: format "c" | "cuda" | "ir", mode "primal" | "fwd" | "bwd"."""
        return self._cmod.dump(format, entry, mode)

    def __repr__(self):
        return f"<nabla.Module {self.name!r} on {self.device.name}>"


def _define_list(defines):
    """defines={"N": 4, "FAST": None} (or ["N=4", "FAST"]) -> ["N=4", "FAST"] for the compiler:
    `#define N 4` and `#define FAST` (empty, as Slang's -DFAST); values are str()'d."""
    if defines is None:
        return None
    if isinstance(defines, dict):
        out = []
        for k, v in defines.items():
            if not isinstance(k, str):
                raise TypeError(f"defines: macro names must be str, got {type(k).__name__}")
            if v is None:
                out.append(k)
            elif isinstance(v, bool):
                out.append(f"{k}={int(v)}")
            else:
                out.append(f"{k}={v}")
        return out
    if isinstance(defines, str):
        raise TypeError("defines must be a dict {name: value} or a list of 'NAME[=VALUE]' strings")
    return [str(d) for d in defines]


def _conformance_list(conformances):
    """conformances={"A:IFoo": 0} (or ["A:IFoo=0"]) -> ["A:IFoo=0"]: Slang's type conformance ids
    (`nabla ... --conformance A:IFoo=0`), which createDynamicObject<IFoo>(id, data) reads."""
    if conformances is None:
        return None
    if isinstance(conformances, dict):
        out = []
        for k, v in conformances.items():
            if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, int):
                raise TypeError("conformances: expected {'TYPE:INTERFACE': int id}")
            out.append(f"{k}={v}")
        return out
    if isinstance(conformances, str):
        raise TypeError("conformances must be a dict {'TYPE:INTERFACE': id} or a list of "
                        "'TYPE:INTERFACE=ID' strings")
    return [str(c) for c in conformances]


def load_module(path, device=None, include_dirs=None, unchecked=False, defines=None,
                conformances=None):
    """Parses and checks a .nb / .slang file (CompileError carries the diagnostics); nothing is
    compiled until a function is first called with a new signature. include_dirs are searched by
    `import` and `#include`. defines={"N": 4} sets preprocessor macros (like `nabla ... -D N=4`;
    None as a value defines the name empty); they are part of the generated code and so of the
    kernel-cache key. unchecked=True drops the bounds checks of tensor and local-array indices
    (for benchmarks: an index out of range is then undefined behaviour). conformances=
    {"A:IFoo": 0} gives Slang's type conformance ids (the type createDynamicObject<IFoo>(0, data)
    makes; like `nabla ... --conformance A:IFoo=0`)."""
    return Module(_nabla.load_module(str(path), device, include_dirs, unchecked=bool(unchecked),
                                     defines=_define_list(defines),
                                     conformances=_conformance_list(conformances)))


def load_module_from_source(source, name="inline.nb", device=None, include_dirs=None,
                            unchecked=False, defines=None, conformances=None):
    """The same from a string; `name` is the file name used in diagnostics."""
    return Module(_nabla.load_module_source(source, name, device, include_dirs,
                                            unchecked=bool(unchecked), defines=_define_list(defines),
                                            conformances=_conformance_list(conformances)))


# ---- Tensor ----------------------------------------------------------------------------------

Tensor = _nabla.CTensor


def _tensor_numpy(self):
    return self.to_numpy()


def _tensor_array(self, dtype=None, copy=None):
    # numpy.asarray(t): a zero-copy view through the buffer protocol for cpu tensors (numpy tries
    # that first); this is the fallback for cuda tensors (a host copy) and bf16 (widened to f32)
    a = self.to_numpy()
    return a if dtype is None else a.astype(dtype, copy=False)


def _tensor_torch(self):
    import torch

    return torch.utils.dlpack.from_dlpack(self)


def _zeros_like(t):
    return _nabla.tensor_zeros(t.shape, t.dtype, t.device)


Tensor.from_numpy = staticmethod(
    lambda array, device=None: _nabla.tensor_from_buffer(array, device))
Tensor.from_numpy.__doc__ = "Tensor.from_numpy(array, device=None): a copy of any buffer on device."
Tensor.zeros = staticmethod(
    lambda shape, dtype="f32", device=None: _nabla.tensor_zeros(shape, dtype, device))
Tensor.empty = staticmethod(
    lambda shape, dtype="f32", device=None: _nabla.tensor_empty(shape, dtype, device))
Tensor.zeros_like = staticmethod(_zeros_like)
Tensor.from_dlpack = staticmethod(_nabla.tensor_from_dlpack)
Tensor.numpy = _tensor_numpy
Tensor.__array__ = _tensor_array
Tensor.torch = _tensor_torch


# ---- SlangPy spelling (docs/PYTHON.md "SlangPy on nabla") ------------------------------------

from . import _spy_types, _spy_tensor, _spy_device, _spy_call  # noqa: E402

_spy_tensor.install()
_spy_device.install(__import__(__name__))
_spy_call.install(__import__(__name__))
SlangType = _spy_types.SlangType
NDBuffer = _spy_tensor.NDBuffer
BufferUsage = _spy_tensor.BufferUsage
MemoryType = _spy_tensor.MemoryType
DeviceType = _spy_device.DeviceType
init_device = _spy_device.init_device
create_device = _spy_device.init_device
FunctionNode = _spy_call.FunctionNode


def from_dlpack(obj):
    """A nabla.Tensor on the memory of any DLPack producer (torch, cupy, jax): zero-copy."""
    return _nabla.tensor_from_dlpack(obj)


# ---- torch autograd (imported only when a torch tensor that requires grad is passed) ----------


def _autograd_hook(fn, args, kwargs):
    from . import _torch

    _nabla._set_autograd_hook(_torch.apply)  # later calls go straight there
    return _torch.apply(fn, args, kwargs)


_nabla._set_autograd_hook(_autograd_hook)


# ---- SlangPy spelling, part 2: generators, instance lists, command encoders (docs/PYTHON.md) ----
from ._spy_generators import (  # noqa: E402,F401
    CallIdArg, GridArg, RandFloatArg, ThreadIdArg, WangHashArg, calc_wang_hash, call_id, grid,
    rand_float, thread_id, wang_hash,
)
from ._spy_instances import InstanceList, InstanceTensor  # noqa: E402,F401
from . import _spy_instances  # noqa: E402
from ._spy_encoder import CommandBuffer, CommandEncoder  # noqa: E402,F401
from . import _spy_encoder  # noqa: E402

_spy_encoder.install(__import__(__name__))
_spy_instances.install(__import__(__name__))


# slang-torch's names on nabla itself (`import nabla as slangtorch`, the tutorial's
# `import nabla as slangpy`; slangpy.loadModule(...)): nabla.slangtorch, imported on first use
_SLANGTORCH_NAMES = ("loadModule", "clearSessionShaderCache", "clearPersistentShaderCache",
                     "clearShaderCaches")


def __getattr__(name):
    # nabla.nn (neural-network layers), nabla.slangtorch and nabla.types are imported on first
    # use: `import nabla` stays small
    if name in ("nn", "slangtorch", "types"):
        import importlib

        return importlib.import_module("." + name, __name__)
    if name in ("record", "compile", "Graph", "CompiledFunction"):
        # recorded computational graphs (python/nabla/_graph.py, docs/GRAPHS.md)
        from . import _graph

        return getattr(_graph, name)
    if name in _SLANGTORCH_NAMES:
        import importlib

        return getattr(importlib.import_module(".slangtorch", __name__), name)
    raise AttributeError(f"module 'nabla' has no attribute {name!r}")

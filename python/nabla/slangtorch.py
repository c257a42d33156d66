"""slang-torch's Python API on nabla: code written for `slangtorch` runs with one import changed.

    import nabla.slangtorch as slangtorch          # or: import nabla as slangtorch (as slangpy)
    m = slangtorch.loadModule("square.slang", defines={"N": 4}, includePaths=["shaders"])
    m.square(input=x, output=y).launchRaw(blockSize=(32, 1, 1), gridSize=((n + 31) // 32, 1, 1))
    m.square.bwd(input=(x, dx), output=(y, dy)).launchRaw(...)      # DiffTensorView: (value, grad)
    m.square.fwd(input=m.DiffTensorView(value=x, grad=tx), output=(y, ty)).launchRaw(...)
    m.multiply(foo=m.Foo(A=a, B=b), result=r).launchRaw(...)         # structs: namedtuple/tuple/dict

A module runs where its tensors are: CUDA torch tensors (or nabla CUDA tensors) launch the CUDA
kernel on torch's current stream, CPU torch tensors / numpy arrays / nabla CPU tensors run the same
kernel through nabla's C back end (blocks spread over the thread pool). Each loadModule reads the
sources again (parsing and checking take well under a millisecond), so a changed file, imported
file or prelude gives the new code; compiled kernels are cached on disk by content (nabla's kernel
cache), so an unchanged module costs no compile. Neither torch nor numpy is needed: without torch,
numpy arrays and nabla.Tensors are the tensors. See docs/PYTHON.md, "slangtorch on nabla".
"""
import collections
import os
import re
import sys
import types

from . import _nabla
from ._nabla import (
    ArgumentError,
    CompileError,  # noqa: F401  (re-exported: loadModule raises it; it is a RuntimeError)
    DeviceError,
    LayoutError,
    NotFoundError,
    UnsupportedError,
)
from . import Module as _NbModule, Tensor as _NbTensor, _define_list

__all__ = [
    "loadModule", "checkErrors", "clearSessionShaderCache", "clearPersistentShaderCache", "clearShaderCaches",
    "DiffTensorView", "SlangModule", "KernelFunction", "LaunchableObject",
    "StructArgumentError",
    "BroadcastError",
]

# slang-torch's DiffTensorView argument type: (primal tensor, gradient tensor); grad may be left out.
DiffTensorView = collections.namedtuple("DiffTensorView", ["value", "grad"], defaults=[None])


class StructArgumentError(ArgumentError, TypeError):
    """A struct argument whose fields do not match the struct (too few / too many tuple items, a
    missing or unknown dict key). Also a TypeError, as slang-torch raises."""


class BroadcastError(LayoutError, RuntimeError):
    """A tensor with a zero stride (torch's expand / broadcast) given to a kernel: threads would
    write or accumulate gradients into one element. Call .contiguous() first. Also a RuntimeError,
    as slang-torch raises."""


# ---- arrays: what kind, which device, zero strides (torch and numpy are never imported here) --


def _torch():
    return sys.modules.get("torch")


_TT = [None]  # torch.Tensor once torch has been imported by the user (looked up, never imported)


def _is_torch(x):
    tt = _TT[0]
    if tt is None:
        t = sys.modules.get("torch")
        if t is None:
            return False
        tt = _TT[0] = t.Tensor
    return isinstance(x, tt)


def _is_numpy(x):
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.ndarray)


def _is_array(x):
    return isinstance(x, _NbTensor) or _is_torch(x) or _is_numpy(x)


_CUDA_NAMES = tuple(f"cuda:{i}" for i in range(64))


def _device_of(x):
    """'cpu' or 'cuda:N' for an array argument; None for host values (numbers, lists)."""
    if _is_torch(x):
        i = x.get_device()  # -1 on the CPU (a method call: cheaper than x.device)
        if i >= 0:
            return _CUDA_NAMES[i] if i < len(_CUDA_NAMES) else f"cuda:{i}"
        if x.device.type == "cpu":
            return "cpu"
        raise DeviceError(f"torch tensors on '{x.device}' are not supported (cpu or cuda only)")
    if isinstance(x, _NbTensor):
        name = x.device.name
        return "cuda:0" if name == "cuda" else name
    if _is_numpy(x):
        return "cpu"
    return None


def _zero_stride(x):
    """True when some dimension of more than one element has stride 0 (a broadcast view)."""
    if _is_torch(x):
        st = x.stride()
        return 0 in st and any(s == 0 and n > 1 for s, n in zip(st, x.shape))
    if _is_numpy(x) or isinstance(x, _NbTensor):
        return 0 in x.strides and any(s == 0 and n > 1 for s, n in zip(x.strides, x.shape))
    return False


def _leading(x, info):
    """slang-torch's TensorView has the bound tensor's rank at run time, and an access with fewer
    indices than dims uses the leading strides (slang's prelude: load(i) = data + strides[0] * i).
    nabla's view has the rank its uses give (check_view_rank.c), so a tensor of more dims binds as
    the view of its leading dims (the same memory, no copy; x[i] reads x[i, 0, ...]). Views of
    vectors (TensorView<float3>: the trailing dims are the element) and empty tensors bind as
    they are (nabla's rank check then names both)."""
    rank = info["tensor_rank"]
    if info["value_shape"] or rank < 1 or not _is_array(x) or len(x.shape) <= rank:
        return x
    shape = tuple(x.shape)
    if 0 in shape[rank:]:
        return x
    if _is_torch(x):
        return x.as_strided(shape[:rank], x.stride()[:rank], x.storage_offset())
    if _is_numpy(x):
        return sys.modules["numpy"].lib.stride_tricks.as_strided(x, shape[:rank], x.strides[:rank])
    return _nabla.tensor_view(x, x.scalar_dtype, shape[:rank], tuple(x.strides)[:rank], 0)


def _zeros_like(x):
    """A zeroed gradient for a DiffTensorView given without one: same kind, shape, device."""
    if _is_torch(x):
        return _torch().zeros_like(x)
    if _is_numpy(x):
        return sys.modules["numpy"].zeros_like(x)
    return _NbTensor.zeros_like(x)


# ---- parameter trees: a kernel's parameters from nabla's leaf reflection ------------------------

_PATH_PART = re.compile(r"\.?([A-Za-z_]\w*)|\[(\d+)\]")


def _split_path(path):
    """'mlp.layers[1].weights' -> ['mlp', 'layers', 1, 'weights']."""
    out, pos = [], 0
    while pos < len(path):
        mo = _PATH_PART.match(path, pos)
        if not mo:
            raise ValueError(f"bad parameter path {path!r}")
        out.append(mo.group(1) if mo.group(1) is not None else int(mo.group(2)))
        pos = mo.end()
    return out


class _Leaf:
    """A parameter or field bound directly: kind 'tensor' (TensorView / Tensor), 'diff'
    (DiffTensorView / DiffTensor) or 'value' (scalars, vectors, matrices, arrays of them)."""

    __slots__ = ("path", "kind", "info")

    def __init__(self, path, kind, info):
        self.path, self.kind, self.info = path, kind, info


class _Struct:
    __slots__ = ("path", "name", "fields")

    def __init__(self, path, name):
        self.path, self.name, self.fields = path, name, collections.OrderedDict()


class _Array:
    __slots__ = ("path", "items")

    def __init__(self, path):
        self.path, self.items = path, []


def _child(parent, key, make):
    """parent[key] (a struct's field dict or an _Array's items), made by make() the first time."""
    if isinstance(parent, _Array):
        while len(parent.items) <= key:
            parent.items.append(None)
        if parent.items[key] is None:
            parent.items[key] = make()
        return parent.items[key]
    if key not in parent:
        parent[key] = make()
    return parent[key]


def _build_tree(leaves, type_names):
    """Parameter nodes {name: node} (in order) from nabla's leaves (paths 'x', 'foo.A',
    'mlp.layers[1].w', depth first, so fields come in declaration order) and type_names
    {path of a struct node: struct name}."""
    roots = collections.OrderedDict()
    for info in leaves:
        parts = _split_path(info["path"])
        kind = "diff" if info.get("is_diff_tensor") else "tensor" if info.get("is_tensor") else "value"
        parent, prefix = roots, ""
        for i, part in enumerate(parts):
            here = prefix + (f"[{part}]" if isinstance(part, int) else f".{part}" if prefix else part)
            if i == len(parts) - 1:
                _child(parent, part, lambda: _Leaf(info["path"], kind, info))
                break
            if isinstance(parts[i + 1], int):
                node = _child(parent, part, lambda: _Array(here))
            else:
                node = _child(parent, part, lambda: _Struct(here, type_names.get(here)))
                if not isinstance(node, (_Struct, _Array)):
                    raise ValueError(f"inconsistent parameter paths at {here!r}")
            parent = node.fields if isinstance(node, _Struct) else node
            prefix = here
    return roots


# ---- argument normalisation ---------------------------------------------------------------------


def _struct_dict(node, value, where):
    """A struct argument (namedtuple, tuple, dict, SimpleNamespace) -> {field: value}."""
    names = list(node.fields)
    tname = node.name or "struct"
    if hasattr(value, "_fields") and isinstance(value, tuple):  # namedtuple (m.Foo or any other)
        d = dict(zip(value._fields, value))
    elif isinstance(value, (tuple, list)) and not _is_array(value):
        if len(value) != len(names):
            raise StructArgumentError(
                f"{where}: {tname} has {len(names)} field(s) ({', '.join(names)}), "
                f"got a {type(value).__name__} of {len(value)}")
        return dict(zip(names, value))
    elif isinstance(value, dict):
        d = value
    elif isinstance(value, types.SimpleNamespace):
        d = vars(value)
    else:
        raise StructArgumentError(
            f"{where}: expected {tname} (a namedtuple, tuple or dict of {', '.join(names)}), "
            f"got {type(value).__name__}")
    unknown = [k for k in d if k not in node.fields]
    missing = [k for k in names if k not in d]
    if unknown or missing:
        msg = []
        if unknown:
            msg.append(f"unknown field(s) {', '.join(map(str, unknown))}")
        if missing:
            msg.append(f"missing field(s) {', '.join(missing)}")
        raise StructArgumentError(f"{where}: {tname} {' and '.join(msg)} (fields: {', '.join(names)})")
    return d


def _diff_pair(value, fn, where):
    """A DiffTensorView argument -> (primal, grad or None)."""
    if _is_torch(value):
        return value, None
    if isinstance(value, DiffTensorView) or (hasattr(value, "_fields") and tuple(getattr(value, "_fields", ())) == ("value", "grad")):
        return value[0], value[1]
    if isinstance(value, (tuple, list)) and not _is_array(value):
        if len(value) == 1:
            return value[0], None
        if len(value) == 2:
            return value[0], value[1]
        raise ArgumentError(f"{fn}: argument '{where}': a DiffTensorView is a tensor, (tensor,), "
                            "(tensor, grad) or "
                            f"DiffTensorView(value=, grad=); got a {type(value).__name__} of {len(value)}")
    return value, None


def _flatten(node, value, fn, where, mode, out):
    """Adds {path: value | (primal, grad)} entries for argument `where` of kernel fn to `out`."""
    if isinstance(node, _Struct):
        d = _struct_dict(node, value, f"{fn}: argument '{where}'")
        for field, fnode in node.fields.items():
            _flatten(fnode, d[field], fn, f"{where}.{field}", mode, out)
    elif isinstance(node, _Array):
        if not isinstance(value, (tuple, list)) or _is_array(value):
            raise ArgumentError(f"{fn}: argument '{where}': expected a list or tuple of "
                                f"{len(node.items)} items, got {type(value).__name__}")
        if len(value) != len(node.items):
            raise ArgumentError(f"{fn}: argument '{where}': expected {len(node.items)} items, "
                                f"got {len(value)}")
        for i, (inode, v) in enumerate(zip(node.items, value)):
            _flatten(inode, v, fn, f"{where}[{i}]", mode, out)
    elif node.kind == "diff":
        primal, grad = _diff_pair(value, fn, where)
        if _zero_stride(primal) or (grad is not None and _zero_stride(grad)):
            raise BroadcastError(f"{fn}: argument '{where}': a tensor with a zero stride "
                                 "(broadcast / expand) cannot be a kernel's view; call "
                                 ".contiguous() first")
        primal = _leading(primal, node.info)
        if grad is not None:
            grad = _leading(grad, node.info)
        elif mode != "primal":
            grad = _zeros_like(primal)  # slang-torch: a view without a gradient gets a scratch one
        out[node.path] = primal if grad is None else (primal, grad)
    elif node.kind == "tensor":
        if isinstance(value, tuple) and len(value) == 1 and _is_array(value[0]):
            value = value[0]  # slang-torch accepts (tensor,) for any tensor parameter
        if _zero_stride(value):
            raise BroadcastError(f"{fn}: argument '{where}': a tensor with a zero stride "
                                 "(broadcast / expand) cannot be a kernel's view; call "
                                 ".contiguous() first")
        out[node.path] = _leading(value, node.info)
    else:
        out[node.path] = value


def _call_device(flat, fname):
    """The device every array argument lives on ('cpu' / 'cuda:N'); DeviceError if they differ."""
    dev = None
    for v in flat.values():
        d = _device_of(v[0] if type(v) is tuple and len(v) == 2 and _is_array(v[0]) else v)
        if d is not None and d != dev:
            if dev is not None:
                break
            dev = d
        if type(v) is tuple and len(v) == 2 and _is_array(v[1]):
            d = _device_of(v[1])
            if d != dev and dev is not None:
                break
    else:
        return dev
    seen = {}  # the error path: name the arguments on each device
    for path, v in flat.items():
        for x in (v if isinstance(v, tuple) and len(v) == 2 and _is_array(v[0]) else (v,)):
            d = _device_of(x)
            if d is not None:
                seen.setdefault(d, path)
    where = ", ".join(f"'{p}' on {d}" for d, p in seen.items())
    raise DeviceError(f"{fname}: tensors on different devices ({where}); nabla does not copy "
                      "them: move them to one device")


# ---- kernels --------------------------------------------------------------------------------------


def _check_dims(what, v):
    if not (type(v) is tuple and len(v) == 3 and type(v[0]) is int and type(v[1]) is int
            and type(v[2]) is int):
        if (not isinstance(v, tuple) or len(v) != 3
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in v)):
            raise ArgumentError(f"{what} should be a tuple of 3 integers. Got: {v!r}")


# autoLaunch's block shape by the rank of the total: 256 threads per block, square-ish tiles
_AUTO_BLOCKS = {1: (256, 1, 1), 2: (16, 16, 1), 3: (8, 8, 4)}


def _total_dims(v):
    """totalSize of launchTotal / autoLaunch: an int or 1 to 3 ints -> (x, y, z) (missing 1)."""
    if isinstance(v, int) and not isinstance(v, bool):
        v = (v,)
    if (not isinstance(v, (tuple, list)) or not 1 <= len(v) <= 3
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in v)):
        raise ArgumentError(f"totalSize should be an int or a tuple of 1 to 3 integers. Got: {v!r}")
    if any(x < 0 for x in v):
        raise ArgumentError(f"totalSize must not be negative. Got: {v!r}")
    return tuple(v) + (1,) * (3 - len(v))


class LaunchableObject:
    """A kernel with its arguments bound; launchRaw runs it (slang-torch's LaunchableObject)."""

    __slots__ = ("_kfn", "_mode", "_flat", "_device", "_f")

    def __init__(self, kfn, mode, flat, device, f=None):
        # f: the kernel's nabla Function on device when already loaded there (else at launch)
        self._kfn, self._mode, self._flat, self._device, self._f = kfn, mode, flat, device, f

    def launchRaw(self, blockSize, gridSize):
        """gridSize[0]*[1]*[2] blocks of blockSize[0]*[1]*[2] threads: in the kernel
        cudaThreadIdx() < blockSize, cudaBlockIdx() < gridSize, cudaBlockDim() = blockSize,
        cudaGridDim() = gridSize. On CUDA the launch is queued on torch's current stream."""
        b, g = blockSize, gridSize
        if not (type(b) is tuple and len(b) == 3 and type(b[0]) is int and type(b[1]) is int
                and type(b[2]) is int and type(g) is tuple and len(g) == 3 and type(g[0]) is int
                and type(g[1]) is int and type(g[2]) is int):
            _check_dims("blockSize", b)  # (raises, or passes int subclasses and lists' cousins)
            _check_dims("gridSize", g)
        f = self._f
        if f is None:
            kfn = self._kfn
            f = kfn._fns.get(self._device) or kfn._fn(self._device)
        f.launch_raw(b, g, self._mode, self._flat)

    def launchTotal(self, blockSize, totalSize):
        """At least totalSize threads in blocks of blockSize: gridSize = ceil(totalSize /
        blockSize) per axis (slang-torch declares launchTotal but raises NotImplementedError).
        The last block of an axis that blockSize does not divide runs threads past the total:
        the kernel must skip them, as slang-torch kernels do (`if (i >= t.size(0)) return;`);
        a view indexed out of bounds raises nabla.ShapeError after the launch. totalSize: an int
        or a tuple of 1 to 3 ints (missing axes 1); an axis of 0 launches nothing."""
        _check_dims("blockSize", blockSize)
        if min(blockSize) < 1:
            raise ArgumentError(f"blockSize must be positive. Got: {blockSize!r}")
        total = _total_dims(totalSize)
        if 0 in total:
            return
        grid = tuple((t + b - 1) // b for t, b in zip(total, blockSize))
        self.launchRaw(blockSize, grid)

    def autoLaunch(self, totalSize):
        """launchTotal with a block shape chosen from the rank of totalSize (the index of its
        last axis above 1, plus one): rank 1 -> (256, 1, 1), rank 2 -> (16, 16, 1), rank 3 ->
        (8, 8, 4): 256 threads per block on every device (the same shape on the CPU, where a
        block's threads run on one worker). Threads past the total must be skipped by the kernel,
        as for launchTotal."""
        total = _total_dims(totalSize)
        rank = 3 if total[2] > 1 else 2 if total[1] > 1 else 1
        self.launchTotal(_AUTO_BLOCKS[rank], total)

    def __repr__(self):
        suffix = "" if self._mode == "primal" else "." + self._mode
        return f"<slangtorch launch {self._kfn._name}{suffix} on {self._device}>"


class KernelFunction:
    """A [CudaKernel] / [AutoPyBindCUDA] function: m.f(**args) -> LaunchableObject; m.f.fwd(...) and
    m.f.bwd(...) bind its forward- / reverse-mode derivative kernels."""

    def __init__(self, module, name):
        self._module, self._name = module, name
        self._tree = None
        self._fns = {}  # device -> the nabla Function of the module loaded there
        self._diff = None  # [Differentiable]: has .fwd / .bwd kernels
        self._plan = None  # ((name, kind), ...) when every parameter is one leaf (_bind_fast)

    @property
    def name(self):
        return self._name

    def _fn(self, dev):
        f = self._module._function(self._name, dev)
        if not hasattr(f, "launch_raw"):
            raise UnsupportedError(f"{self._name}: launchRaw needs nabla's block launches "
                                   "(Function.launch_raw), which this build does not have")
        self._fns[dev] = f
        return f

    def _params(self):
        if self._tree is None:
            tree = self._module._param_tree(self._name)
            # parameters that are all single leaves (no structs / arrays of structs): the fast path
            if all(isinstance(n, _Leaf) and n.path == p for p, n in tree.items()):
                # (with the dims a tensor must have to bind as it is: others take _leading)
                self._plan = tuple((p, n.kind, n.info["tensor_rank"] + len(n.info["value_shape"]))
                                   for p, n in tree.items())
            self._tree = tree
        return self._tree

    def _bind(self, mode, args, kwargs):
        """The general path (structs, arrays, numpy / nabla tensors, pairs, errors); the entry
        points try _bind_fast first."""
        if args:
            raise ArgumentError(f"{self._name} does not support positional arguments, use keyword "
                                f"arguments instead. Available arguments: {list(self._params())}")
        tree = self._tree or self._params()
        if kwargs.keys() != tree.keys():
            unknown = [k for k in kwargs if k not in tree]
            if unknown:
                raise ArgumentError(f"{self._name} got unexpected arguments: {unknown}. "
                                    f"Available arguments: {list(tree)}")
            missing = [k for k in tree if k not in kwargs]
            raise ArgumentError(f"{self._name} missing required arguments: {missing}. "
                                f"Available arguments: {list(tree)}")
        flat = {}
        for pname, node in tree.items():
            _flatten(node, kwargs[pname], self._name, pname, mode, flat)
        device = _call_device(flat, self._name) or self._module._default_device
        return LaunchableObject(self, mode, flat, device)

    def _bind_fast(self, mode, kwargs):
        """The common case in one pass: exactly the kernel's parameters, each a plain torch.Tensor
        (no zero stride; a DiffTensorView only in a primal launch) or a number, all on one device
        -> a LaunchableObject (kwargs itself is the {path: value} dict); None sends the call
        through the general path (which also raises the errors)."""
        plan = self._plan
        if len(kwargs) != len(plan):
            return None
        tt = _TT[0]
        dev, t = -2, None
        for pname, kind, nd in plan:
            v = kwargs.get(pname)
            if type(v) is tt:
                if (kind == "value" or (kind == "diff" and mode != "primal") or 0 in v.stride()
                        or v.dim() != nd):
                    return None
                d = v.get_device()
                if d != dev:
                    if dev != -2:
                        return None
                    dev, t = d, v
            elif kind != "value" or type(v) not in (float, int):
                return None
        if dev >= 0:
            device = _CUDA_NAMES[dev] if dev < len(_CUDA_NAMES) else f"cuda:{dev}"
        elif dev == -1 and t.is_cpu:
            device = "cpu"
        else:
            return None
        return LaunchableObject(self, mode, kwargs, device, self._fns.get(device))

    def __call__(self, *args, **kwargs):
        # (_plan is set once the tree is built, by the first call; _TT once torch is in use)
        if self._plan is not None and not args and _TT[0] is not None:
            lo = self._bind_fast("primal", kwargs)
            if lo is not None:
                return lo
        return self._bind("primal", args, kwargs)

    def fwd(self, *args, **kwargs):
        """The forward-mode derivative kernel: DiffTensorView arguments as (value, tangent)."""
        if self._diff is not True:
            self._need_diff("fwd")
        if self._plan is not None and not args and _TT[0] is not None:
            lo = self._bind_fast("fwd", kwargs)
            if lo is not None:
                return lo
        return self._bind("fwd", args, kwargs)

    def bwd(self, *args, **kwargs):
        """The reverse-mode derivative kernel: DiffTensorView arguments as (value, grad); the
        gradients of views the kernel loads ACCUMULATE into their grad tensors, the grads of
        views it stores are read (dL/d output)."""
        if self._diff is not True:
            self._need_diff("bwd")
        if self._plan is not None and not args and _TT[0] is not None:
            lo = self._bind_fast("bwd", kwargs)
            if lo is not None:
                return lo
        return self._bind("bwd", args, kwargs)

    def _need_diff(self, which):
        if self._diff is None:
            self._diff = self._module._function(self._name, "cpu").differentiable_params is not None
        if not self._diff:
            raise ArgumentError(f"{self._name} does not have a {which}-mode derivative attached "
                                "(mark it [Differentiable])")

    def __repr__(self):
        return f"<slangtorch kernel {self._name} of {self._module._path!r}>"


def _args_device(values, default):
    """The device of the arrays among values (nested lists / tuples / dicts looked into)."""
    flat, stack = {}, [("", v) for v in values]
    while stack:
        where, v = stack.pop()
        if isinstance(v, dict):
            stack.extend((f"{where}.{k}", x) for k, x in v.items())
        elif isinstance(v, (tuple, list)):
            stack.extend((f"{where}[{i}]", x) for i, x in enumerate(v))
        elif _is_array(v):
            flat[where or "argument"] = v
    return _call_device(flat, "call") or default


class _RoutedFunction:
    """A [TorchEntryPoint] host function (m.square_fwd(x): runs on the host CPU, allocates its
    TorchTensors on the arguments' device and launches the module's kernels there; nabla's host
    calls), or a plain function called over arrays as nabla does (m.f(x) elementwise): called on
    the module loaded for the device of the tensors among its arguments."""

    def __init__(self, module, name):
        self._module, self._name = module, name

    def __call__(self, *args, **kwargs):
        dev = _args_device(list(args) + list(kwargs.values()), self._module._default_device)
        return self._module._function(self._name, dev)(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._module._function(self._name, "cpu"), name)

    def __repr__(self):
        return f"<slangtorch function {self._name} of {self._module._path!r}>"


# ---- modules ------------------------------------------------------------------------------------


def _base_type_name(name):
    """'Linear<16>' -> 'Linear' (slang-torch names a generic struct's namedtuple by its base)."""
    return name.split("<", 1)[0].strip()


class SlangModule:
    """What loadModule returns: kernels, struct namedtuples and DiffTensorView as attributes."""

    def __init__(self, path, load_kwargs, devices, verbose):
        d = self.__dict__
        d["_path"] = path
        d["_load_kwargs"] = load_kwargs
        d["_verbose"] = verbose
        d["_mods"] = {}
        d["_attrs"] = {"DiffTensorView": DiffTensorView}
        d["_types_done"] = set()
        for dev in devices:
            self._module(dev)
        # calls without any tensor argument run on nabla's default device choice
        d["_default_device"] = "cuda:0" if "cuda:0" in devices else "cpu"

    def _module(self, dev):
        m = self._mods.get(dev)
        if m is None:
            m = _NbModule(_nabla.load_module(self._path, _nabla.device(dev), **self._load_kwargs))
            self._mods[dev] = m
            if self._verbose:
                print(f"[nabla.slangtorch] loaded {self._path} for {dev}", file=sys.stderr)
        return m

    def _function(self, name, dev):
        return getattr(self._module(dev), name)

    def _param_tree(self, name):
        f = self._function(name, "cpu")
        if not hasattr(f, "kernel_params"):
            raise UnsupportedError(f"{name}: slangtorch kernels need nabla's kernel reflection "
                                   "(Function.kernel_params), which this build does not have")
        leaves = f.kernel_params()
        type_names = {}
        if hasattr(f, "param_types"):
            for path, tname in f.param_types().items():
                type_names[path] = _base_type_name(tname)
        tree = _build_tree(leaves, type_names)
        self._export_types(tree.values())
        return tree

    def _export_types(self, nodes):
        """m.Foo etc.: a namedtuple per struct type reachable from a kernel's parameters."""
        for node in nodes:
            if isinstance(node, _Array):
                self._export_types([n for n in node.items if n is not None])
            elif isinstance(node, _Struct):
                if node.name and node.name not in self._attrs:
                    self._attrs[node.name] = collections.namedtuple(node.name, list(node.fields))
                self._export_types(node.fields.values())

    def _attr(self, name):
        got = self._attrs.get(name)
        if got is not None:
            return got
        try:
            f = self._function(name, "cpu")
            if not isinstance(f, _nabla.Function):  # nabla.Module gives module.Pixel as a SlangType
                raise AttributeError(name)
        except AttributeError:
            got = None
        else:
            kernel = getattr(f, "is_kernel", True) and not getattr(f, "is_host", False)
            got = KernelFunction(self, name) if kernel else _RoutedFunction(self, name)
        if got is None:
            # a struct namedtuple is made when a kernel that takes it is first reflected
            for kname in self._kernel_names():
                k = self._attr(kname)
                if isinstance(k, KernelFunction):
                    k._params()
                    if name in self._attrs:
                        return self._attrs[name]
            raise AttributeError(f"slangtorch module {self._path!r} has no function or struct {name!r}")
        self._attrs[name] = got
        if not hasattr(SlangModule, name):
            # later m.name lookups find it in the instance dict, without the __getattr__ detour
            self.__dict__[name] = got
        return got

    def _kernel_names(self):
        cm = self._module("cpu")._cmod
        return list(cm.functions()) if hasattr(cm, "functions") else []

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._attr(name)

    def __setattr__(self, name, value):
        raise AttributeError("slangtorch modules are read-only")

    def __dir__(self):
        return sorted(set(self._attrs) | set(self._kernel_names()) | set(object.__dir__(self)))

    def __repr__(self):
        return f"<slangtorch module {self._path!r} on {', '.join(self._mods)}>"


_IGNORED_FLAGS = {"-O0", "-O1", "-O2", "-O3", "-g"}


def _parse_slang_flags(flags, defines, includes):
    """extraSlangFlags: -D / -I (joined or separate) become defines / include paths; the
    optimisation and debug flags are accepted; anything else is an UnsupportedError."""
    it = iter(flags)
    for fl in it:
        if not isinstance(fl, str):
            raise TypeError(f"extraSlangFlags must be strings, got {fl!r}")
        if fl in ("-D", "-I"):
            arg = next(it, None)
            if arg is None:
                raise ArgumentError(f"extraSlangFlags: {fl} needs a value")
            fl = fl + arg
        if fl.startswith("-D") and len(fl) > 2:
            k, _, v = fl[2:].partition("=")
            defines[k] = v if _ else None
        elif fl.startswith("-I") and len(fl) > 2:
            includes.append(fl[2:])
        elif fl not in _IGNORED_FLAGS:
            raise UnsupportedError(f"extraSlangFlags: {fl!r} is not supported by nabla (supported: "
                                   "-D NAME[=VALUE], -I DIR, -O0..-O3, -g)")


def loadModule(fileName, skipSlang=None, verbose=False, defines={}, includePaths=[],  # noqa: B006
               skipNinjaCheck=False, slangGenLineInfo=True, cudaFastMath=True, cudaGenLineInfo=True,
               extraSlangFlags=[], extraCudaFlags=[]):  # noqa: B006
    """slang-torch's loadModule: parses and checks fileName (with its imports, includes and
    preludes, as they are on disk now) and returns a SlangModule. defines={"N": 4} are -D macros
    (each value str()'d, None: defined empty), includePaths are searched by `import` and
    `#include`. A compile error raises nabla.CompileError (a RuntimeError) with the diagnostics;
    a missing file nabla.FileError. Kernels compile on their first launch per device and are cached
    on disk by content. skipSlang, skipNinjaCheck, slangGenLineInfo, cudaGenLineInfo and
    cudaFastMath are accepted for compatibility and change nothing (nabla's cache is keyed by
    content, so there is no stale build to skip; nabla's CUDA flags are its own).
    extraCudaFlags must be empty (UnsupportedError otherwise)."""
    if extraCudaFlags:
        raise UnsupportedError("loadModule: extraCudaFlags are not supported (nabla compiles CUDA "
                               "with NVRTC and its own flags)")
    for name, v in (("slangGenLineInfo", slangGenLineInfo), ("cudaFastMath", cudaFastMath),
                    ("cudaGenLineInfo", cudaGenLineInfo)):
        if not isinstance(v, bool):
            raise TypeError(f"loadModule: {name} must be a bool, got {v!r}")
    defs = dict(defines or {})
    # absolute now: kernels compile lazily (per device, at the first launch), maybe after a chdir
    incs = [os.path.abspath(str(p)) for p in (includePaths or [])]
    _parse_slang_flags(list(extraSlangFlags or []), defs, incs)
    load_kwargs = {"include_dirs": incs or None, "defines": _define_list(defs) or None}
    devices = ["cpu"]
    if _nabla.cuda_device_count() > 0:
        devices.append("cuda:0")
    if verbose:
        print(f"[nabla.slangtorch] loadModule {fileName} defines={defs} includePaths={incs}",
              file=sys.stderr)
    return SlangModule(os.path.abspath(str(fileName)), load_kwargs, devices, bool(verbose))


def checkErrors(module):
    """nabla: a check point for module's launches (not in slang-torch). On CUDA launchRaw returns
    once the kernel is queued; an out-of-range index it hits is raised (nabla.ShapeError naming
    the kernel, tensor, index and launch number) by the module's next launch, or here, after
    waiting for the GPU. docs/PYTHON.md, "Errors of launches"."""
    if not isinstance(module, SlangModule):
        raise ArgumentError(f"checkErrors: expected a module of loadModule, got {type(module).__name__}")
    for m in list(module._mods.values()):
        m.check_errors()


def clearSessionShaderCache():
    """No-op kept for slang-torch code: nabla keeps no per-session module cache (every loadModule
    reads the sources again)."""


def clearPersistentShaderCache():
    """Deletes nabla's on-disk kernel cache (`nabla cache clear`); kernels compile again."""
    _nabla.kernel_cache_clear()


def clearShaderCaches():
    clearSessionShaderCache()
    clearPersistentShaderCache()

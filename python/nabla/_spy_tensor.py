"""SlangPy spelling of nabla.Tensor (and NDBuffer, which is the same object here).

nabla's own names stay: `Tensor.from_numpy(array, device=None)`, `Tensor.zeros(shape, dtype,
device)`, `t.numpy()`, `.grad`. SlangPy's are added beside them and told apart by the arguments'
types: a nabla.Device first means SlangPy's `(device, ...)` order. Installed by install().
"""
from . import _nabla
from ._spy_types import SlangType, resolve_dtype

Tensor = _nabla.CTensor
Device = _nabla.Device


class _hybrid:
    """A method that is a constructor on the class (Tensor.numpy(device, arr)) and an instance
    method on a tensor (t.numpy())."""

    def __init__(self, on_class, on_instance):
        self.on_class, self.on_instance = on_class, on_instance

    def __get__(self, obj, cls=None):
        if obj is None:
            return self.on_class
        return self.on_instance.__get__(obj, cls)


def _numpy():
    import numpy

    return numpy


# ---- constructors --------------------------------------------------------------------------


def _full_shape(shape, elem):
    if shape is None:
        raise _nabla.ArgumentError("shape= is missing")
    if isinstance(shape, int):
        shape = (shape,)
    return tuple(shape) + tuple(elem)


def _make(device, shape, dtype, zero):
    if not isinstance(device, Device):
        raise _nabla.ArgumentError(f"expected a nabla.Device (spy.init_device()), got {type(device).__name__}")
    dt, elem = resolve_dtype(dtype)
    shp = _full_shape(shape, elem)
    return (_nabla.tensor_zeros if zero else _nabla.tensor_empty)(shp, dt, device)


def _from_numpy(*args, **kw):
    """Tensor.from_numpy(array, device=None) (nabla) or Tensor.from_numpy(device, array)
    (SlangPy): a copy of the array on the device."""
    if args and isinstance(args[0], Device):
        if len(args) != 2 or kw:
            raise _nabla.ArgumentError("Tensor.from_numpy(device, array) takes exactly these two arguments")
        return _nabla.tensor_from_buffer(args[1], args[0])
    return _nabla.tensor_from_buffer(*args, **kw)


def _sp_or_nabla(zero):
    def make(*args, **kw):
        if args and isinstance(args[0], Device):  # SlangPy: (device, shape, dtype)
            device, rest = args[0], args[1:]
            if len(rest) > 2:
                raise _nabla.ArgumentError("Tensor.zeros/empty(device, shape, dtype): too many arguments")
            names = ("shape", "dtype")
            for n, v in zip(names, rest):
                if n in kw:
                    raise _nabla.ArgumentError(f"Tensor.zeros/empty: {n} given twice")
                kw[n] = v
            unknown = set(kw) - {"shape", "dtype", "device"}
            if unknown:
                raise _nabla.ArgumentError(f"Tensor.zeros/empty: unknown argument(s) {sorted(unknown)}")
            return _make(device, kw.get("shape"), kw.get("dtype"), zero)
        # nabla: (shape, dtype="f32", device=None); a SlangType or Slang type name as dtype too
        shape = args[0] if args else kw.pop("shape")
        dtype = args[1] if len(args) > 1 else kw.pop("dtype", "f32")
        device = args[2] if len(args) > 2 else kw.pop("device", None)
        if kw:
            raise _nabla.ArgumentError(f"Tensor.zeros/empty: unknown argument(s) {sorted(kw)}")
        dt, elem = resolve_dtype(dtype)
        shp = _full_shape(shape, elem)
        return (_nabla.tensor_zeros if zero else _nabla.tensor_empty)(shp, dt, device)

    return make


def _like(zero):
    def like(t):
        if not isinstance(t, Tensor):
            raise _nabla.ArgumentError(f"expected a nabla.Tensor, got {type(t).__name__}")
        return (_nabla.tensor_zeros if zero else _nabla.tensor_empty)(t.shape, t.dtype, t.device)

    return like


def _numpy_ctor(device, array):
    """Tensor.numpy(device, array): SlangPy's older name of Tensor.from_numpy(device, array)."""
    if not isinstance(device, Device):
        raise _nabla.ArgumentError("Tensor.numpy(device, array): the first argument must be a nabla.Device "
                                   "(t.numpy() on a tensor returns a numpy copy)")
    return _nabla.tensor_from_buffer(array, device)


# ---- instance methods ----------------------------------------------------------------------


def _to_numpy(self):
    return self.to_numpy()


def copy_from_numpy(self, array):
    """Copies array (any numeric dtype, cast to the tensor's; same number of elements, reshaped
    to the tensor's shape) into the tensor in place. Returns None (SlangPy's from_numpy on an
    NDBuffer)."""
    np = _numpy()
    a = np.asarray(array)
    if a.size != self.numel:
        raise _nabla.ShapeError(f"from_numpy: the array has {a.size} elements {list(a.shape)}, the tensor "
                                f"{self.numel} {list(self.shape)}")
    if a.dtype.kind not in "biuf":
        raise _nabla.DtypeError(f"from_numpy: array dtype {a.dtype} is not numeric")
    src = _nabla.tensor_from_buffer(np.ascontiguousarray(a.reshape(self.shape).astype(self.to_numpy_dtype(), copy=False)),
                                    self.device)
    self.copy_from(src)


def _np_dtype(self):
    return {"f32": "float32", "f64": "float64", "f16": "float16", "i32": "int32", "u32": "uint32",
            "i64": "int64", "u8": "uint8", "bool": "bool", "bf16": "float32"}[self.dtype]


def _check_grad(self, g, what):
    if g is None:
        return
    if not isinstance(g, Tensor):
        raise _nabla.ArgumentError(f"with_grads: {what} must be a nabla.Tensor, got {type(g).__name__}")
    if tuple(g.shape) != tuple(self.shape):
        raise _nabla.ShapeError(f"with_grads: {what} has shape {list(g.shape)}, the tensor {list(self.shape)}")
    if g.dtype != self.dtype:
        raise _nabla.DtypeError(f"with_grads: {what} is {g.dtype}, the tensor {self.dtype}")
    if g.device.name != self.device.name:
        raise _nabla.DeviceError(f"with_grads: {what} is on {g.device.name}, the tensor on {self.device.name}")


def make_with_grads(c_with_grads):
    def with_grads(self, grad_in=None, grad_out=None, zero=True, *, grad=None):
        """SlangPy: a tensor on the same memory with gradient buffers. No arguments: one new
        buffer serves as grad_in and grad_out (`.grad`). grad_in: the gradient a `.bwds` call reads
        when this tensor is its `_result` (dL/dresult). grad_out (nabla's `grad=`): where `.bwds`
        accumulates this input's gradient. zero=True zeroes grad_out and new buffers — never a
        grad_in you pass (it holds the gradient you supply; SlangPy would clear it)."""
        if grad is not None:
            if grad_out is not None:
                raise _nabla.ArgumentError("with_grads: give grad_out= or grad=, not both")
            grad_out = grad
        _check_grad(self, grad_in, "grad_in")
        _check_grad(self, grad_out, "grad_out")
        if grad_in is None and grad_out is None:
            r = c_with_grads(self, None, bool(zero))
            r.grad_in = r.grad
            return r
        r = self.detach()
        if grad_out is not None:
            if zero:
                grad_out.zero_()
            r.grad = grad_out
        r.grad_in = grad_in
        return r

    return with_grads


def detach(self):
    """The same memory without gradient buffers."""
    if len(self.shape) == 0:
        return _nabla.tensor_reshape(self, ())
    return _nabla.tensor_slice(self, 0, 0, self.shape[0], 1)


def clear(self):
    """Zeroes the tensor in place (SlangPy's clear)."""
    self.zero_()


def flatten_dtype(self):
    """The tensor in the flat layout (nabla stores every dtype flat already: a view of the same
    memory with its gradient buffers)."""
    r = detach(self)
    r.grad = self.grad
    r.grad_in = self.grad_in
    return r


def broadcast_to(self, shape):
    """A zero-copy view broadcast NumPy-style to shape (stride 0 in new / size-1 dims)."""
    if isinstance(shape, int):
        shape = (shape,)
    return _nabla.tensor_broadcast_to(self, tuple(shape))


def _norm_index(i, n, dim):
    if i < 0:
        i += n
    if not 0 <= i < n:
        raise IndexError(f"index {i - n if i < 0 else i} is out of range for dim {dim} of size {n}")
    return i


def _index(t, key):
    if not isinstance(key, tuple):
        key = (key,)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    nreal = sum(1 for k in key if k is not Ellipsis)
    if nreal > len(t.shape):
        raise IndexError(f"too many indices ({nreal}) for a tensor of {len(t.shape)} dims")
    full = []
    for k in key:
        full.extend([slice(None)] * (len(t.shape) - nreal) if k is Ellipsis else [k])
    dim = 0
    for k in full:
        if isinstance(k, bool) or not (isinstance(k, slice) or hasattr(k, "__index__")):
            raise _nabla.UnsupportedError(f"tensor index {k!r}: only ints, slices and ... (zero-copy views)")
        n = t.shape[dim]
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            if step <= 0:
                raise _nabla.UnsupportedError("tensor slices with a negative step are not supported")
            t = _nabla.tensor_slice(t, dim, start, max(stop, start), step)
            dim += 1
        else:
            t = _nabla.tensor_select(t, dim, _norm_index(k.__index__(), n, dim))
    return t


def getitem(self, key):
    """t[i], t[:, 1:3], t[..., 0]: zero-copy strided views (ints remove a dim, slices keep it;
    a negative step is UnsupportedError). The gradient buffers are indexed alike."""
    r = _index(self, key)
    if self.grad is not None:
        r.grad = _index(self.grad, key)
    if self.grad_in is not None:
        r.grad_in = r.grad if self.grad_in is self.grad else _index(self.grad_in, key)
    return r


def _str(self):
    try:
        return str(self.to_numpy())
    except Exception:  # numpy missing
        return repr(self)


def _element_count(self):
    return self.numel


class _NDBufferMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor)


class NDBuffer(metaclass=_NDBufferMeta):
    """SlangPy's NDBuffer: here a nabla.Tensor (the same object and methods).

    NDBuffer(device, dtype=float | "float" | module.float | module.Pixel, shape=(...)): a zeroed
    tensor in the flat layout (a struct dtype adds its fields as a last dim).
    NDBuffer(torch_tensor) (or any DLPack producer): a zero-copy view of it."""

    def __new__(cls, device=None, dtype=None, shape=None, element_count=None, **kw):
        if kw:
            raise _nabla.ArgumentError(f"NDBuffer: unknown argument(s) {sorted(kw)}")
        if device is not None and not isinstance(device, Device) and hasattr(device, "__dlpack__"):
            if dtype is not None or shape is not None:
                raise _nabla.ArgumentError("NDBuffer(tensor) takes no dtype= or shape=")
            return _nabla.tensor_from_dlpack(device)
        if not isinstance(device, Device):
            raise _nabla.ArgumentError(
                f"NDBuffer(device, dtype=, shape=) needs a nabla.Device (spy.init_device()) or a tensor "
                f"(torch, DLPack), got {type(device).__name__}")
        if shape is None and element_count is not None:
            shape = (element_count,)
        return _make(device, shape, dtype, True)

    from_numpy = staticmethod(lambda device, array: _numpy_ctor(device, array))
    zeros = staticmethod(lambda device, shape=None, dtype=None: _make(device, shape, dtype, True))
    empty = staticmethod(lambda device, shape=None, dtype=None: _make(device, shape, dtype, False))
    zeros_like = staticmethod(_like(True))
    empty_like = staticmethod(_like(False))


def install():
    c_with_grads = Tensor.with_grads
    Tensor.from_numpy = _hybrid(_from_numpy, copy_from_numpy)
    Tensor.numpy = _hybrid(_numpy_ctor, _to_numpy)
    Tensor.zeros = staticmethod(_sp_or_nabla(True))
    Tensor.empty = staticmethod(_sp_or_nabla(False))
    Tensor.zeros_like = staticmethod(_like(True))
    Tensor.empty_like = staticmethod(_like(False))
    Tensor.copy_from_numpy = copy_from_numpy
    Tensor.to_numpy_dtype = _np_dtype
    Tensor.with_grads = make_with_grads(c_with_grads)
    Tensor.grad_out = property(lambda self: self.grad, lambda self, g: setattr(self, "grad", g),
                               doc="SlangPy's grad_out: nabla's .grad (where .bwds accumulates)")
    Tensor.detach = detach
    Tensor.clear = clear
    Tensor.flatten_dtype = flatten_dtype
    Tensor.broadcast_to = broadcast_to
    Tensor.__getitem__ = getitem
    Tensor.__str__ = _str
    Tensor.to_torch = Tensor.torch
    Tensor.element_count = property(_element_count)

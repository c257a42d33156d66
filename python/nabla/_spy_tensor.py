"""SlangPy spelling of nabla.Tensor (and NDBuffer, which is the same object here).

nabla's own names stay: `Tensor.from_numpy(array, device=None)`, `Tensor.zeros(shape, dtype,
device)`, `t.numpy()`, `.grad`. SlangPy's are added beside them and told apart by the arguments'
types: a nabla.Device first means SlangPy's `(device, ...)` order. Installed by install().
"""
from . import _nabla
from ._spy_types import SlangType, lazy_module, resolve_dtype

_spy_struct = lazy_module("_spy_struct")  # imported on first use: import nabla stays small

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
    t = (_nabla.tensor_zeros if zero else _nabla.tensor_empty)(shp, dt, device)
    return _spy_struct.tag(t, dtype) if isinstance(dtype, SlangType) else t


class BufferUsage:
    """SlangPy's buffer usage flags (combine with |). nabla accepts them and ignores them: its
    tensors are plain device memory that every kernel may read and write (and share with torch
    through DLPack), so no usage needs declaring."""

    none = 0
    vertex_buffer = 1
    index_buffer = 2
    constant_buffer = 4
    shader_resource = 8
    unordered_access = 16
    indirect_argument = 32
    copy_source = 64
    copy_destination = 128
    acceleration_structure = 256
    acceleration_structure_build_input = 512
    shader_table = 1024
    shared = 2048


class MemoryType:
    """SlangPy's memory types; accepted and ignored (nabla's tensors live in the device's memory:
    host memory for the cpu device, device memory for cuda; to_numpy / from_numpy copy)."""

    device_local = 0
    upload = 1
    read_back = 2


_BUFFER_OPTIONS = ("usage", "memory_type", "program_layout")


def _buffer_options(who, kw):
    """Pops SlangPy's buffer options (usage=, memory_type=, program_layout=) from kw after checking
    them: usage and memory_type must be ints (BufferUsage / MemoryType values)."""
    for k in _BUFFER_OPTIONS:
        v = kw.pop(k, None)
        if k != "program_layout" and v is not None and (isinstance(v, bool) or not hasattr(v, "__index__")):
            raise _nabla.ArgumentError(f"{who}: {k}= must be a spy.{'BufferUsage' if k == 'usage' else 'MemoryType'} "
                                       f"value, got {v!r}")


def _structured(a):
    return getattr(getattr(a, "dtype", None), "names", None) is not None and hasattr(a, "__array_interface__")


def _from_numpy(*args, target_slang_dtype=None, **kw):
    """Tensor.from_numpy(array, device=None) (nabla) or Tensor.from_numpy(device, array,
    target_slang_dtype=None) (SlangPy): a copy of the array on the device. A numpy structured
    array needs target_slang_dtype=module.MyStruct (its record layout must match: ShapeError)."""
    if args and isinstance(args[0], Device):
        _buffer_options("Tensor.from_numpy", kw)  # SlangPy's buffer options: no effect here
        extra = set(kw)
        if len(args) != 2 or extra:
            raise _nabla.ArgumentError("Tensor.from_numpy(device, array, target_slang_dtype=None) takes exactly these "
                                       f"two arguments and the dtype (got {len(args)} positional, {sorted(extra)})")
        device, array = args
    else:
        array = args[0] if args else kw.pop("array", None)
        device = args[1] if len(args) > 1 else kw.pop("device", None)
        if kw or len(args) > 2:
            raise _nabla.ArgumentError(f"Tensor.from_numpy(array, device=None): unknown argument(s) {sorted(kw)}")
    if _structured(array):
        if target_slang_dtype is None:
            raise _nabla.ArgumentError(
                f"Structured numpy dtype {array.dtype} needs target_slang_dtype=module.MyStruct (the struct "
                "its records hold)")
        if device is None:
            device = _nabla.device("cpu")
        return _spy_struct.from_structured(device, array, target_slang_dtype)
    if target_slang_dtype is not None:
        dt, elem = resolve_dtype(target_slang_dtype)
        t = _nabla.tensor_from_buffer(array, device) if device is not None else _nabla.tensor_from_buffer(array)
        if elem and tuple(t.shape[len(t.shape) - len(elem):]) != tuple(elem):
            raise _nabla.ShapeError(f"Tensor.from_numpy: an array of {getattr(target_slang_dtype, 'name', dt)} must "
                                    f"end in {list(elem)}, got shape {list(t.shape)}")
        return _spy_struct.tag(t, target_slang_dtype) if isinstance(target_slang_dtype, SlangType) else t
    return _nabla.tensor_from_buffer(array, device) if device is not None else _nabla.tensor_from_buffer(array)


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
            _buffer_options("Tensor.zeros/empty", kw)
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
        t = (_nabla.tensor_zeros if zero else _nabla.tensor_empty)(shp, dt, device)
        return _spy_struct.tag(t, dtype) if isinstance(dtype, SlangType) else t

    return make


def _like(zero):
    def like(t):
        if not isinstance(t, Tensor):
            raise _nabla.ArgumentError(f"expected a nabla.Tensor, got {type(t).__name__}")
        r = (_nabla.tensor_zeros if zero else _nabla.tensor_empty)(t.shape, t.scalar_dtype, t.device)
        r.slang_type = t.slang_type
        return r

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


def make_to_numpy(c_to_numpy):
    def to_numpy(self):
        """A numpy copy; a struct tensor gives a numpy structured array of its leading shape."""
        if self.slang_type is not None:
            return _spy_struct.to_numpy(self, c_to_numpy)
        return c_to_numpy(self)

    return to_numpy


def copy_from_numpy(self, array):
    """Copies array (any numeric dtype, cast to the tensor's; same number of elements, reshaped
    to the tensor's shape) into the tensor in place. Returns None (SlangPy's from_numpy on an
    NDBuffer). A struct tensor also takes a structured array of its records."""
    np = _numpy()
    a = np.asarray(array)
    if self.slang_type is not None and a.dtype.names is not None:
        st = self.slang_type
        _spy_struct.check_structured(a, st, "copy_from_numpy")
        lead = _spy_struct.lead_shape(self)
        if a.shape != lead:
            raise _nabla.ShapeError(f"copy_from_numpy: {len(a.shape)}-d records {list(a.shape)} for a tensor of "
                                    f"{st.name} {list(lead)}")
        self.copy_from(_spy_struct.from_structured(self.device, a, st))
        return
    if a.size != self.numel:
        raise _nabla.ShapeError(f"from_numpy: the array has {a.size} elements {list(a.shape)}, the tensor "
                                f"{self.numel} {list(self.shape)}")
    if a.dtype.kind not in "biuf":
        raise _nabla.DtypeError(f"from_numpy: array dtype {a.dtype} is not numeric")
    src = _nabla.tensor_from_buffer(np.ascontiguousarray(a.reshape(self.shape).astype(self.to_numpy_dtype(), copy=False)),
                                    self.device)
    self.copy_from(src)


def copy_from_torch(self, tensor):
    """SlangPy's copy_from_torch: copies a torch tensor with as many elements as this tensor into
    it (reshaped to its shape; another dtype is cast as copy_from_numpy does). Same dtype: a
    device-to-device copy through DLPack (no host round trip)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not isinstance(tensor, torch.Tensor):
        raise _nabla.ArgumentError(f"copy_from_torch: expected a torch.Tensor, got {type(tensor).__name__}")
    t = tensor.detach().contiguous()
    if t.numel() != self.numel:
        raise _nabla.ShapeError(f"copy_from_torch: the torch tensor has {t.numel()} elements {list(t.shape)}, the "
                                f"tensor {self.numel} {list(self.shape)}")
    src = _nabla.tensor_from_dlpack(t)
    if src.scalar_dtype == self.scalar_dtype:
        self.copy_from(_nabla.tensor_reshape(src, tuple(self.shape)))
    else:
        self.copy_from_numpy(t.cpu().numpy())


def _np_dtype(self):
    return {"f32": "float32", "f64": "float64", "f16": "float16", "i32": "int32", "u32": "uint32",
            "i64": "int64", "u8": "uint8", "bool": "bool", "bf16": "float32"}[self.scalar_dtype]


def _check_grad(self, g, what):
    if g is None:
        return
    if not isinstance(g, Tensor):
        raise _nabla.ArgumentError(f"with_grads: {what} must be a nabla.Tensor, got {type(g).__name__}")
    if tuple(g.shape) != tuple(self.shape):
        raise _nabla.ShapeError(f"with_grads: {what} has shape {list(g.shape)}, the tensor {list(self.shape)}")
    if g.scalar_dtype != self.scalar_dtype:
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
            r.slang_type = r.grad.slang_type = self.slang_type
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
        r = _nabla.tensor_reshape(self, ())
    else:
        r = _nabla.tensor_slice(self, 0, 0, self.shape[0], 1)
    r.slang_type = self.slang_type
    return r


def clear(self):
    """Zeroes the tensor in place (SlangPy's clear)."""
    self.zero_()


def flatten_dtype(self):
    """The tensor in the flat layout (nabla stores every dtype flat already: a view of the same
    memory with its gradient buffers)."""
    r = detach(self)
    r.slang_type = None  # a struct tensor's records as their scalars
    r.grad = self.grad
    r.grad_in = self.grad_in
    return r


def _elem(t):
    """The element dims of t: a struct tensor's record dims, else none (scalars)."""
    st = t.slang_type
    return tuple(st.shape) if st is not None else ()


def broadcast_to(self, shape):
    """A zero-copy view broadcast NumPy-style to shape (stride 0 in new / size-1 dims); a struct
    tensor's shape counts records (its record dims are kept)."""
    if isinstance(shape, int):
        shape = (shape,)
    r = _nabla.tensor_broadcast_to(self, tuple(shape) + _elem(self))
    r.slang_type = self.slang_type
    return r


def view(self, shape, strides=None, offset=0):
    """SlangPy's Tensor.view: a view of the same memory with this shape, strides (in elements;
    None or () = C order) and offset (in elements, added to the tensor's own). Elements are the
    dtype's: records of a struct tensor (their dims are kept), else scalars. Strides must be >= 0
    and the view inside the tensor's memory (ShapeError otherwise). The gradient buffers are
    viewed alike."""
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise _nabla.ShapeError(f"view: shape {list(shape)} has a negative dim")
    elem = _elem(self)
    nd = len(self.shape) - len(elem)
    es = _spy_struct._SIZE[self.scalar_dtype]
    tstr = tuple(self.strides)
    estr = tstr[nd:]  # the element's own strides stay
    ebytes = es
    for d in elem:
        ebytes *= d
    if strides is None or len(tuple(strides)) == 0:
        st, acc = [], 1
        for d in reversed(shape):
            st.append(acc)
            acc *= max(d, 1)
        strides = tuple(reversed(st))
    strides = tuple(int(x) for x in strides)
    if len(strides) != len(shape):
        raise _nabla.ShapeError(f"view: shape has {len(shape)} dims, strides {len(strides)} ({list(shape)} vs "
                                f"{list(strides)})")
    if any(x < 0 for x in strides):
        raise _nabla.ShapeError(f"view: strides {list(strides)} must be >= 0")

    def one(t):
        return _nabla.tensor_view(t, t.scalar_dtype, shape + elem, tuple(x * ebytes for x in strides) + estr,
                                  int(offset) * ebytes)

    r = one(self)
    r.slang_type = self.slang_type
    if self.grad is not None:
        r.grad = one(self.grad)
    if self.grad_in is not None:
        r.grad_in = r.grad if self.grad_in is self.grad else one(self.grad_in)
    return r


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


def _leading_only(t, key):
    """True if key indexes only the leading (non-record) dims of struct tensor t."""
    if not isinstance(key, tuple):
        key = (key,)
    full = []
    nreal = sum(1 for k in key if k is not Ellipsis)
    for k in key:
        full.extend([slice(None)] * (len(t.shape) - nreal) if k is Ellipsis else [k])
    while full and isinstance(full[-1], slice) and full[-1] == slice(None):
        full.pop()
    return len(full) <= len(t.shape) - len(_elem(t))


def getitem(self, key):
    """t[i], t[:, 1:3], t[..., 0]: zero-copy strided views (ints remove a dim, slices keep it;
    a negative step is UnsupportedError). The gradient buffers are indexed alike. On a struct
    tensor, t["pos"] (or "t.x") is a field's view and indexing the leading dims keeps the struct
    type."""
    st = self.slang_type
    if isinstance(key, str):
        if st is None:
            raise _nabla.ArgumentError(f"tensor['{key}']: field names index struct tensors (dtype module.MyStruct)")
        views = _spy_struct.field_views(self)
        if key not in views:
            sub = {p[len(key) + 1:]: v for p, v in views.items() if p.startswith(key + ".")}
            if not sub:
                raise _nabla.ArgumentError(f"struct {st.name} has no field '{key}' (fields: {', '.join(views)})")
            return _spy_struct.nest(sub)
        return views[key]
    r = _index(self, key)
    if self.grad is not None:
        r.grad = _index(self.grad, key)
    if self.grad_in is not None:
        r.grad_in = r.grad if self.grad_in is self.grad else _index(self.grad_in, key)
    if st is not None and _leading_only(self, key):
        r.slang_type = st
        if r.grad is not None:
            r.grad.slang_type = st
    return r


def _str(self):
    try:
        return str(self.to_numpy())
    except Exception:  # numpy missing
        return repr(self)


def _element_count(self):
    """SlangPy's element_count: the number of elements of the dtype (records of a struct tensor)."""
    n = 1
    for d in self.shape[:len(self.shape) - len(_elem(self))]:
        n *= d
    return n


def _load_from_image(device, path, flip_y=False, linearize=False, scale=1.0, offset=0.0, grayscale=False,
                     greyscale=None):
    """Tensor.load_from_image(device, path, flip_y, linearize, scale, offset, grayscale): a PNG as
    a float / float2 / float3 / float4 tensor (python/nabla/_spy_image.py, imported on first use)."""
    from . import _spy_image

    return _spy_image.load_from_image(device, path, flip_y, linearize, scale, offset, grayscale, greyscale)


def _no_more(who, kw):
    if kw:
        raise _nabla.ArgumentError(f"{who}: unknown argument(s) {sorted(kw)}")


class _NDBufferMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor)


class NDBuffer(metaclass=_NDBufferMeta):
    """SlangPy's NDBuffer: here a nabla.Tensor (the same object and methods).

    NDBuffer(device, dtype=float | "float" | module.float | module.Pixel, shape=(...)): a zeroed
    tensor in the flat layout (a struct dtype adds its fields as a last dim).
    NDBuffer(torch_tensor) (or any DLPack producer): a zero-copy view of it."""

    def __new__(cls, device=None, dtype=None, shape=None, element_count=None, **kw):
        _buffer_options("NDBuffer", kw)
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

    from_numpy = staticmethod(lambda device, array, target_slang_dtype=None:
                              _from_numpy(device, array, target_slang_dtype=target_slang_dtype))
    load_from_image = staticmethod(lambda *a, **k: _load_from_image(*a, **k))
    zeros = staticmethod(lambda device, shape=None, dtype=None, **kw:
                         _buffer_options("NDBuffer.zeros", kw) or _no_more("NDBuffer.zeros", kw) or
                         _make(device, shape, dtype, True))
    empty = staticmethod(lambda device, shape=None, dtype=None, **kw:
                         _buffer_options("NDBuffer.empty", kw) or _no_more("NDBuffer.empty", kw) or
                         _make(device, shape, dtype, False))
    zeros_like = staticmethod(_like(True))
    empty_like = staticmethod(_like(False))


def make_to_torch(c_torch):
    def to_torch(self):
        """The tensor as a torch tensor sharing its memory (DLPack; torch is imported here). A
        tensor of a struct whose fields share one scalar type gives that dtype with the fields as
        its trailing dim, in declaration order, depth-first (`Pixel` (H, W) -> float32 (H, W, 3);
        `struct P { float3 pos; float w; }` -> (..., 4); a one-field struct its field's dims), as
        flatten_dtype() holds it. A struct mixing scalar types (stored as C records) has no torch
        dtype: DtypeError naming the struct and its fields; take its fields one by one
        (`t["w"].to_torch()`: zero-copy strided views) or to_numpy() (a structured array)."""
        st = self.slang_type
        if st is not None and st.is_struct and len({f[1] for f in st.fields}) > 1:
            fields = ", ".join(f"{p}: {d}" for p, d, _ in st.fields)
            first = st.fields[0][0]
            raise _nabla.DtypeError(
                f"to_torch: a tensor of struct {st.name} mixes field types ({fields}): a torch tensor has "
                f"one dtype; convert its fields one by one (t[{first!r}].to_torch(), zero-copy) or use "
                "to_numpy() for a structured array")
        return c_torch(self)

    return to_torch


def install():
    c_with_grads = Tensor.with_grads
    Tensor.to_numpy = make_to_numpy(Tensor.to_numpy)
    Tensor.view = view
    Tensor.load_from_image = staticmethod(_load_from_image)
    Tensor.from_numpy = _hybrid(_from_numpy, copy_from_numpy)
    Tensor.numpy = _hybrid(_numpy_ctor, _to_numpy)
    Tensor.zeros = staticmethod(_sp_or_nabla(True))
    Tensor.empty = staticmethod(_sp_or_nabla(False))
    Tensor.zeros_like = staticmethod(_like(True))
    Tensor.empty_like = staticmethod(_like(False))
    Tensor.copy_from_numpy = copy_from_numpy
    Tensor.copy_from_torch = copy_from_torch
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
    Tensor.torch = Tensor.to_torch = make_to_torch(Tensor.torch)
    Tensor.element_count = property(_element_count)

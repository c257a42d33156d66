"""SlangPy's InstanceList / InstanceTensor: a struct's methods called over an array of instances.

    particles = spy.InstanceList(module.Particle, {"pos": pos, "vel": vel})   # fields as arrays
    particles.update(0.1)            # Particle.update over every element, `this` = one element
    particles = spy.InstanceTensor(module.Particle, (1000,))                 # one flat tensor

Methods are ordinary functions of the module named "Struct.method" (C: nb_module_func(m,
"Particle.update"); they take `this` as parameter 0, `inout` for [mutating] methods so its fields
are written back). An InstanceList holds `this` either as a dict of field -> array / value (SoA:
each field may be an array, broadcast like any argument, or one value; fields a mutating method
writes must be arrays) or as one tensor of the struct in the flat layout (`Tensor.empty(device,
dtype=module.Particle, shape=...)`, whose fields are bound as strided views). InstanceTensor is
the tensor-backed form.
"""
from . import _nabla
from ._spy_types import lazy_module

_spy_struct = lazy_module("_spy_struct")

# scalar names: a name made of one of these, a vector / matrix suffix and [N] dims is not a struct
_SCALARS = ("bool", "half", "float", "double", "int", "uint", "int8_t", "int16_t", "int32_t", "int64_t",
            "uint8_t", "uint16_t", "uint32_t", "uint64_t", "float16_t", "float32_t", "float64_t")


def _is_builtin(name):
    """float, int3, float3x4, uint[4], float2[3][2]: scalar / vector / matrix / array names (no re:
    `import nabla` stays small)."""
    name = name.replace(" ", "")
    while name.endswith("]") and "[" in name:
        name = name[:name.rindex("[")]
    for sc in _SCALARS:
        if name.startswith(sc):
            rest = name[len(sc):]
            if rest == "" or (rest[0] in "1234" and (len(rest) == 1 or (len(rest) == 3 and rest[1] == "x"
                                                                         and rest[2] in "1234"))):
                return True
    return False


__all__ = ["InstanceList", "InstanceTensor"]


def _struct_info(struct, module):
    """(name, module, SlangType or None) of InstanceList's `struct` argument."""
    if isinstance(struct, str):
        name, st = struct, None
    else:
        name, st = getattr(struct, "name", None), struct
        if not isinstance(name, str):
            raise TypeError(f"InstanceList: expected a struct type (module.MyStruct) or its name, got {struct!r}")
    module = module if module is not None else getattr(struct, "module", None)
    if module is None:
        raise _nabla.ArgumentError(f"InstanceList({name!r}): the struct's module is unknown; pass module=")
    fields = getattr(st, "fields", None) if st is not None else None
    if st is not None and not fields:
        raise _nabla.ArgumentError(f"InstanceList: {name} is not a struct type (it has no fields)")
    if st is None and _is_builtin(name):
        raise _nabla.ArgumentError(f"InstanceList: {name} is not a struct type")
    if st is None:  # a name: check it names a struct with fields
        try:
            leaves = _nabla.type_leaves(module._cmod, name) if hasattr(_nabla, "type_leaves") else None
        except _nabla.NablaError as e:
            raise _nabla.ArgumentError(f"InstanceList: {e}") from None
        if leaves is not None and not leaves:
            raise _nabla.ArgumentError(f"InstanceList: {name} is not a struct type (it has no fields)")
    return name, module, st


class _BoundMethod:
    """Struct.method with `this` bound to an InstanceList's data: call(*args, **kwargs) runs the
    method over the instances (the other arguments broadcast as in any call)."""

    def __init__(self, owner, fn, name):
        self._owner = owner
        self._fn = fn
        self.name = name

    @property
    def function(self):
        return self._fn

    def __call__(self, *args, **kwargs):
        return self._fn(self._owner._this_arg(), *args, **kwargs)

    def append_to(self, encoder, *args, **kwargs):
        """Records the call on a command encoder (see CommandEncoder)."""
        return self._fn.append_to(encoder, self._owner._this_arg(), *args, **kwargs)

    def __repr__(self):
        return f"<nabla bound method {self.name} of {self._owner!r}>"


class InstanceList:
    """A list of instances of a struct: `data` is a dict of field -> array / value (SoA) or one
    tensor of the struct in the flat layout. Attribute access gives a field of a dict (SoA) or the
    struct's method bound to these instances."""

    def __init__(self, struct, data=None, module=None):
        name, module, st = _struct_info(struct, module)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_struct", st)
        object.__setattr__(self, "_methods", {})
        object.__setattr__(self, "_data", None)
        self.set_data({} if data is None else data)

    # ---- SlangPy's IThis protocol ----
    def set_data(self, data):
        if isinstance(data, dict):
            t = data.get("_type")
            if t is not None and t != self._name:
                raise _nabla.ArgumentError(f"InstanceList of {self._name}: data has _type {t!r}")
        object.__setattr__(self, "_data", data)

    def get_this(self):
        return self._data

    def update_this(self, value):
        pass

    def _this_arg(self):
        d = self._data
        if isinstance(d, dict):
            return {k: v for k, v in d.items() if k != "_type"}
        return d

    # ---- methods and fields ----
    def _method(self, name):
        m = self._methods.get(name)
        if m is None:
            full = f"{self._name}.{name}"
            try:
                fn = self._module.require_function(full)
            except _nabla.NotFoundError:
                return None
            m = _BoundMethod(self, fn, full)
            self._methods[name] = m
        return m

    def construct(self, *args, **kwargs):
        """Calls the struct's constructor (`__init`) for every instance: the fields it returns are
        written into the data's arrays (or become its values)."""
        try:
            init = self._module.require_function(f"{self._name}.__init")
        except _nabla.NotFoundError:
            raise _nabla.NotFoundError(f"{self._name} has no constructor (__init)") from None
        out = init(*args, **kwargs)
        if getattr(out, "slang_type", None) is not None:  # a struct tensor (tensor inputs): its fields
            out = {k: v for k, v in _spy_struct.field_views(out).items()}
        d = self._data
        if not isinstance(d, dict):
            raise _nabla.UnsupportedError("InstanceList.construct: only dict (SoA) data; fill a tensor "
                                          "with module.f(..., _result=tensor)")
        _merge(d, out)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        d = self._data
        if isinstance(d, dict) and name in d:
            return d[name]
        m = self._method(name)
        if m is not None:
            return m
        raise AttributeError(f"instance list of {self._name!r} has no field or method {name!r}")

    def __setattr__(self, name, value):
        if isinstance(self._data, dict) and not name.startswith("_"):
            self._data[name] = value
        else:
            object.__setattr__(self, name, value)

    def __repr__(self):
        kind = "fields " + ", ".join(k for k in self._data if k != "_type") if isinstance(self._data, dict) \
            else type(self._data).__name__
        return f"<nabla.InstanceList of {self._name} ({kind})>"


def _merge(dst, src):
    """Writes a struct result (dict of field -> array; nested fields as "a.b" keys or dicts) into
    dst's arrays in place (or sets them)."""
    for k, v in src.items():
        if "." in k:
            head, rest = k.split(".", 1)
            sub = dst.get(head)
            if not isinstance(sub, dict):
                sub = dst[head] = {}
            _merge(sub, {rest: v})
            continue
        cur = dst.get(k)
        if isinstance(v, dict):
            if not isinstance(cur, dict):
                cur = dst[k] = {}
            _merge(cur, v)
        elif cur is not None and hasattr(cur, "copy_from"):  # a nabla.Tensor: in place
            cur.copy_from(v if hasattr(v, "copy_from") else _nabla.tensor_from_buffer(v, cur.device))
        elif cur is not None and hasattr(cur, "shape") and hasattr(cur, "__setitem__"):  # numpy
            cur[...] = v
        else:
            dst[k] = v


class InstanceTensor(InstanceList):
    """InstanceList over one tensor of the struct in the flat layout (shape + the struct's flat
    element dims, its one scalar dtype)."""

    def __init__(self, struct, shape=None, data=None, module=None, device=None):
        name, module, st = _struct_info(struct, module)
        if data is None:
            if shape is None:
                raise _nabla.ArgumentError("InstanceTensor needs a shape or data")
            if st is None or getattr(st, "dtype", None) is None:
                raise _nabla.DtypeError(getattr(st, "error", None) or
                                        f"InstanceTensor: {name} has no flat tensor layout (give data=)")
            shape = (shape,) if isinstance(shape, int) else tuple(shape)
            dev = device if device is not None else module.device
            data = _nabla.tensor_zeros(shape + tuple(st.shape), st.dtype, dev)
            data.slang_type = st  # a struct tensor: records of any field types
        InstanceList.__init__(self, struct, data, module)

    @property
    def tensor(self):
        return self._data

    @property
    def shape(self):
        st = self._struct
        n = len(st.shape) if st is not None else 0
        s = tuple(self._data.shape)
        return s[:len(s) - n] if n else s

    def to_numpy(self):
        """The instances in the flat layout (shape + the struct's flat dims) for a struct of one
        scalar type; a numpy structured array of the records for a struct of mixed types."""
        d = self._data
        if getattr(d, "slang_type", None) is not None and d.scalar_dtype != "u8":
            return d.flatten_dtype().to_numpy()
        return d.to_numpy()

    def copy_from_numpy(self, array):
        """Sets the instances from a numpy structured array of the struct's records, or an array
        in the flat layout (same shape as .tensor)."""
        if getattr(getattr(array, "dtype", None), "names", None) is not None:
            self._data.copy_from_numpy(array)
            return
        self._data.copy_from(_nabla.tensor_from_buffer(array, self._data.device))


def install(nabla):
    """Struct types from `module.Particle` (SlangPy part 1's SlangType, when present) remember their
    module, so InstanceList(module.Particle, data) finds the struct's methods without module=."""
    slang_type = getattr(nabla, "SlangType", None)
    module_cls = getattr(nabla, "Module", None)
    if slang_type is None or module_cls is None or getattr(module_cls, "_nb_types_know_module", False):
        return
    orig = module_cls.__getattr__

    def __getattr__(self, name):
        r = orig(self, name)
        if isinstance(r, slang_type) and getattr(r, "module", None) is None:
            r.module = self
        return r

    __getattr__.__doc__ = orig.__doc__
    module_cls.__getattr__ = __getattr__
    module_cls._nb_types_know_module = True


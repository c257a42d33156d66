"""SlangPy's struct-typed tensors: a nabla.Tensor whose dtype is a struct (`module.MyStruct`).

A struct tensor is a nabla.Tensor holding C records of the struct with its SlangType in
`.slang_type` (so `.dtype` is the struct; `.scalar_dtype` the stored scalar). Its memory is the
bytes of a C array of the struct (python/nabla/_spy_types.py, record_layout): a struct of one
scalar type in the flat layout (`Pixel` (16, 16) -> f32 (16, 16, 3)), a struct of mixed types as a
u8 tensor whose last dim is the record (`struct S { int id; float w; }` -> u8 (..., 8)).

- made by NDBuffer / Tensor.zeros / empty(device, dtype=module.S, shape=...), by
  Tensor.from_numpy(device, structured_array, target_slang_dtype=module.S), and by calls of
  functions returning S (the result's fields are written straight into the record's field views);
- `.to_numpy()` gives a numpy structured array (the same bytes as SlangPy's to_numpy);
- passed for a parameter of type S, its fields are bound as zero-copy strided views (one view per
  leaf field: dtype of the field, the record's stride); `t["pos"]` is the field view too;
- numpy structured arrays whose field names match S's are accepted for an S parameter (each
  field a strided numpy view) and as `_result=`.
"""
from . import _nabla
from ._spy_types import SIZES as _SIZE, SlangType, record_layout

_NP = {"f32": "<f4", "f64": "<f8", "f16": "<f2", "i32": "<i4", "u32": "<u4", "i64": "<i8", "u8": "u1",
       "bool": "?"}


def _numpy():
    import numpy

    return numpy


def _prod(dims):
    n = 1
    for d in dims:
        n *= d
    return n


def _contig(dims, size):
    """C-order byte strides of dims for elements of `size` bytes."""
    out, acc = [], size
    for d in reversed(dims):
        out.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(out))


def is_struct_tensor(t):
    return isinstance(t, _nabla.CTensor) and t.slang_type is not None


def numpy_dtype(st):
    """The numpy structured dtype of struct type st (nested structs as nested dtypes, vectors /
    arrays as subarrays; offsets and itemsize of the C record)."""
    np = _numpy()
    tree = {}
    for path, dtype, dims in st.fields:
        if dtype not in _NP:
            raise _nabla.DtypeError(f"{st.name}: field {path} is {dtype}, which numpy cannot hold")
        node, parts = tree, path.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = (path, dtype, dims)

    def build(node, prefix, start, itemsize):
        names, formats, offsets = [], [], []
        for name, v in node.items():
            names.append(name)
            if isinstance(v, dict):
                pre = prefix + name + "."
                sub = [(p[len(pre):], d, s) for p, d, s in st.fields if p.startswith(pre)]
                sub_start = st.offsets[pre + sub[0][0]]
                formats.append(build(v, pre, sub_start, record_layout(sub)[1]))
                offsets.append(sub_start - start)
            else:
                path, dtype, dims = v
                formats.append(np.dtype((_NP[dtype], dims)) if dims else np.dtype(_NP[dtype]))
                offsets.append(st.offsets[path] - start)
        return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": itemsize})

    return build(tree, "", 0, st.itemsize)


def elem_ndim(st):
    """How many trailing dims of a struct tensor are its record (the storage's element dims)."""
    return len(st.shape)


def lead_shape(t):
    st = t.slang_type
    n = len(t.shape) - elem_ndim(st)
    return tuple(t.shape[:n])


def field_views(t, st=None):
    """{field path: zero-copy view} of struct tensor t (or of a tensor in st's storage layout)."""
    st = st or t.slang_type
    k = elem_ndim(st)
    shape, strides = tuple(t.shape), tuple(t.strides)
    if len(shape) < k or shape[len(shape) - k:] != tuple(st.shape):
        raise _nabla.ShapeError(f"a tensor of struct {st.name} must end in {list(st.shape)} (its record), got "
                                f"shape {list(shape)}")
    ssize = _SIZE[t.scalar_dtype]
    if k and strides[len(shape) - k:] != _contig(st.shape, ssize) and _prod(st.shape) > 1:
        raise _nabla.LayoutError(f"a tensor of struct {st.name}: its records must be contiguous (strides "
                                 f"{list(strides)}); copy it first")
    lead, lstr = shape[:len(shape) - k], strides[:len(shape) - k]
    out = {}
    for path, dtype, dims in st.fields:
        out[path] = _nabla.tensor_view(t, dtype, lead + tuple(dims), lstr + _contig(dims, _SIZE[dtype]),
                                       st.offsets[path])
    return out


def nest(flat):
    """{"a.b": x, "c": y} -> {"a": {"b": x}, "c": y} (the C layer binds nested dicts)."""
    out = {}
    for k, v in flat.items():
        parts = k.split(".")
        d = out
        for p in parts[:-1]:
            d = d.setdefault(p, {})
        d[parts[-1]] = v
    return out


def make(device, shape, st, zero=True):
    """A struct tensor of st over `shape` (leading dims) on device."""
    if isinstance(shape, int):
        shape = (shape,)
    t = (_nabla.tensor_zeros if zero else _nabla.tensor_empty)(tuple(shape) + tuple(st.shape), st.dtype, device)
    t.slang_type = st
    return t


def tag(t, st):
    """t (in st's storage layout) marked as a struct tensor of st; returns t."""
    if st is not None and st.is_struct and st.dtype is not None:
        t.slang_type = st
    return t


def to_numpy(t, c_to_numpy):
    """A struct tensor as a numpy structured array of its leading shape."""
    st = t.slang_type
    a = _numpy().ascontiguousarray(c_to_numpy(t))
    lead = lead_shape(t)
    return a.view("u1").reshape(lead + (st.itemsize,)).view(numpy_dtype(st)).reshape(lead)


def _np_leaves(dt, prefix="", base=0):
    """[(path, offset, base dtype, subshape)] of a numpy structured dtype, in field order."""
    out = []
    for name in dt.names:
        f, off = dt.fields[name][0], dt.fields[name][1]
        if f.names:
            out += _np_leaves(f, prefix + name + ".", base + off)
        else:
            out.append((prefix + name, base + off, f.base, f.shape))
    return out


def check_structured(arr, st, what):
    """ShapeError unless arr's structured dtype has st's record layout (sizes, offsets, scalar
    types; names are not compared, as in SlangPy)."""
    np = _numpy()
    dt = arr.dtype
    if dt.itemsize != st.itemsize:
        raise _nabla.ShapeError(f"{what}: the numpy record size {dt.itemsize} does not match struct {st.name} "
                                f"({st.itemsize} bytes: {_describe(st)})")
    leaves = _np_leaves(dt)
    if len(leaves) != len(st.fields):
        raise _nabla.ShapeError(f"{what}: the numpy dtype has {len(leaves)} fields, which does not match struct "
                                f"{st.name} ({_describe(st)})")
    for (npath, off, base, sub), (path, dtype, dims) in zip(leaves, st.fields):
        if off != st.offsets[path] or base != np.dtype(_NP[dtype]) or tuple(sub) != tuple(dims):
            raise _nabla.ShapeError(
                f"{what}: numpy field '{npath}' ({base}{list(sub) if sub else ''} at byte {off}) does not match "
                f"{st.name}.{path} ({dtype}{list(dims) if dims else ''} at byte {st.offsets[path]})")


def _describe(st):
    return ", ".join(f"{p}: {d}{list(s) if s else ''} @{st.offsets[p]}" for p, d, s in st.fields)


def from_structured(device, arr, st):
    """Tensor.from_numpy(device, structured_array, target_slang_dtype=st): a struct tensor holding
    a copy of the records."""
    np = _numpy()
    if not isinstance(st, SlangType) or not st.is_struct or st.dtype is None:
        raise _nabla.ArgumentError(f"target_slang_dtype must be a struct type (module.MyStruct), got {st!r}")
    check_structured(arr, st, "Tensor.from_numpy")
    a = np.ascontiguousarray(arr)
    lead = a.shape
    raw = a.view("u1").reshape(lead + (st.itemsize,))
    if st.dtype != "u8":
        raw = raw.view(_NP[st.dtype]).reshape(lead + tuple(st.shape))
    t = _nabla.tensor_from_buffer(np.ascontiguousarray(raw), device)
    t.slang_type = st
    return t


def structured_fields(arr, st, fname, pname):
    """{path: numpy field view} of a structured array for a parameter of struct st, matched by
    field names (ArgumentError naming the missing / extra fields)."""
    want = [p for p, _, _ in st.fields]
    have = [p for p, _, _, _ in _np_leaves(arr.dtype)]
    if sorted(want) != sorted(have):
        raise _nabla.ArgumentError(
            f"{fname}: argument '{pname}' is a numpy structured array with fields {have}, but struct "
            f"{st.name} has {want}")
    out = {}
    for p in want:
        v = arr
        for part in p.split("."):
            v = v[part]
        out[p] = v
    return out


def from_fields(fields, st, kind):
    """A call's struct result {path: array} as a struct tensor (kind "tensor") or a numpy
    structured array (kind "numpy"); the fields are copied into the records."""
    path0, _, dims0 = st.fields[0]
    v0 = fields[path0]
    lead = tuple(v0.shape[:len(v0.shape) - len(dims0)])
    if kind == "numpy":
        np = _numpy()
        out = np.zeros(lead, numpy_dtype(st))
        for path, _, _ in st.fields:
            dst = out
            for part in path.split("."):
                dst = dst[part]
            v = fields[path]
            dst[...] = v.to_numpy() if isinstance(v, _nabla.CTensor) else np.asarray(v)
        return out
    dev = v0.device if isinstance(v0, _nabla.CTensor) else None
    out = make(dev, lead, st, zero=False)
    for path, view in field_views(out).items():
        v = fields[path]
        view.copy_from(v if isinstance(v, _nabla.CTensor) else _nabla.tensor_from_buffer(_numpy().asarray(v), dev))
    return out

"""SlangPy spelling: Slang types as dtypes (`module.float`, `module.float3`, `module.MyStruct`).

A `SlangType` says how a Slang type is stored in a nabla.Tensor. nabla uses the **flat layout**:
an element of a scalar type is one scalar, a vector / matrix / array type adds its dims at the end
(`float3` -> (3,), `float3x3` -> (3, 3), `float[32]` -> (32,)), and a struct adds one dim holding
its fields in declaration order, depth-first (`struct Pixel { float r, g, b; }` -> (3,);
`struct P { float3 pos; float w; }` -> (4,)), except that a struct of a single field takes that
field's dims (`MLP<32,8> { float weights[32][8]; }` -> (32, 8)). All fields of a struct stored
this way share one scalar type. A struct mixing scalar types (`struct S { int id; float w; }`) is
stored as records: a u8 tensor whose last dim is the record's bytes, each field at its C offset
(aligned to its scalar size, as numpy's `align=True` and SlangPy's buffers on CUDA/CPU lay it out):
`S` -> u8 (8,). Both layouts are the bytes of a C array of the struct (python/nabla/_spy_struct.py).
A Tensor of `Pixel` of shape (16, 16) is thus an f32 tensor of shape (16, 16, 3), and a Tensor (or
numpy array, torch tensor) in this layout can be passed for a struct parameter: its fields are bound
as zero-copy strided views (python/nabla/_spy_call.py).
"""
from . import _nabla

class lazy_module:
    """nabla.NAME imported on first attribute access (so `import nabla` does not compile it)."""

    def __init__(self, name):
        self._name, self._mod = name, None

    def __getattr__(self, attr):
        if self._mod is None:
            import importlib

            self._mod = importlib.import_module("." + self._name, __package__)
        return getattr(self._mod, attr)


# Slang scalar names -> nabla dtype names
SCALARS = {
    "float": "f32", "float32_t": "f32", "half": "f16", "float16_t": "f16", "double": "f64",
    "float64_t": "f64", "int": "i32", "int32_t": "i32", "uint": "u32", "uint32_t": "u32",
    "int64_t": "i64", "uint8_t": "u8", "bool": "bool",
}


class SlangType:
    """A Slang type used as a dtype: `name`, `dtype` (nabla scalar dtype, "f32", ...), `shape`
    (the element's dims in the flat layout) and `fields` (struct leaves: (path, dtype, dims)) or
    None for non-struct types."""

    def __init__(self, name, dtype, shape, fields=None):
        self.name = name
        self.dtype = dtype
        self.shape = tuple(shape)
        self.fields = fields
        # structs: the C record layout, {path: byte offset}, its size and alignment in bytes
        self.offsets, self.itemsize, self.align = (record_layout(fields) if fields else (None, None, None))

    @property
    def is_struct(self):
        return self.fields is not None

    @property
    def flat_size(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __eq__(self, other):
        return isinstance(other, SlangType) and (self.name, self.dtype, self.shape) == (
            other.name, other.dtype, other.shape)

    def __hash__(self):
        return hash((self.name, self.dtype, self.shape))

    def __repr__(self):
        return f"<nabla.SlangType {self.name} ({self.dtype}{list(self.shape)} per element)>"


def builtin_type(name):
    """SlangType of a scalar / vector / matrix / array type name ("float", "float3", "float3x3",
    "float[4]", "float3[2]"), or None."""
    name = name.replace(" ", "")
    if name.endswith("]") and "[" in name:
        inner, n = name[:-1].rsplit("[", 1)
        t = builtin_type(inner) if n.isdigit() else None
        return None if t is None else SlangType(name, t.dtype, (int(n),) + t.shape)
    if name in SCALARS:
        return SlangType(name, SCALARS[name], ())
    base, dims = name, ()
    if len(name) > 3 and name[-2] == "x" and name[-1] in "1234" and name[-3] in "1234":
        base, dims = name[:-3], (int(name[-3]), int(name[-1]))  # float3x3
    elif len(name) > 1 and name[-1] in "1234":
        base, dims = name[:-1], (int(name[-1]),)  # float3
    if dims and base in SCALARS:
        return SlangType(name, SCALARS[base], dims)
    return None


SIZES = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2, "i32": 4, "u32": 4, "i64": 8, "u8": 1, "bool": 1}


def record_layout(fields):
    """({path: byte offset}, itemsize, alignment) of a struct's fields [(path, dtype, dims)] in C
    layout: each leaf aligned to its scalar size, a nested struct ("t.x", "t.y") to its largest
    leaf, sizes rounded up to the alignment."""
    tree = {}  # name -> subtree dict, or a leaf (dtype, dims); insertion order = declaration order
    for path, dtype, dims in fields:
        node, parts = tree, path.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = (dtype, tuple(dims))

    def lay(node, prefix, base, out):
        """(size, alignment) of a (sub)struct; its leaves' offsets into out (None: sizes only)"""
        off, align = 0, 1
        for name, v in node.items():
            if isinstance(v, dict):
                size, a = lay(v, "", 0, None)
                off = (off + a - 1) // a * a
                if out is not None:
                    lay(v, prefix + name + ".", base + off, out)
            else:
                a = SIZES.get(v[0], 4)
                size = a
                for d in v[1]:
                    size *= d
                off = (off + a - 1) // a * a
                if out is not None:
                    out[prefix + name] = base + off
            off += size
            align = max(align, a)
        return (off + align - 1) // align * align, align

    offsets = {}
    itemsize, align = lay(tree, "", 0, offsets)
    return offsets, itemsize, align


def struct_layout(leaves, what):
    """(dtype, shape, fields) of a struct in the flat layout from its leaves
    [(param, path, dims, dtype, ...)]; DtypeError when the fields' scalar types differ."""
    fields = [(lf[1], lf[3], tuple(lf[2])) for lf in leaves]
    if not fields:
        raise _nabla.DtypeError(f"{what} has no fields: it cannot be stored in a tensor")
    dtypes = {f[1] for f in fields}
    if len(dtypes) != 1:
        raise _nabla.DtypeError(
            f"{what} mixes field types ({', '.join(f'{p}: {d}' for p, d, _ in fields)}): the flat "
            "layout of a tensor needs one scalar type; pass it as a dict instead")
    if len(fields) == 1:
        return fields[0][1], fields[0][2], fields
    total = 0
    for _, _, dims in fields:
        n = 1
        for d in dims:
            n *= d
        total += n
    return fields[0][1], (total,), fields


def module_type(module, name):
    """module.X for a type name X: a builtin type, or a struct of the module (NotFoundError lists
    the module's structs)."""
    return cmodule_type(module._cmod, name)


def cmodule_type(cmod, name):
    """module_type on the C module (a function's .module)."""
    t = builtin_type(name)
    if t is not None:
        return t
    leaves = _nabla.type_leaves(cmod, name)
    fields = [(lf[1], lf[3], tuple(lf[2])) for lf in leaves]
    try:
        dtype, shape, fields = struct_layout(leaves, f"struct {name}")
    except _nabla.DtypeError as e:
        if not fields:  # no fields: usable as a type name (_type), not as a tensor dtype
            t = SlangType(name, None, (), fields)
            t.error = str(e)
            return t
        t = SlangType(name, "u8", (), fields)  # mixed scalar types: records of bytes
        t.shape = (t.itemsize,)
        return t
    return SlangType(name, dtype, shape, fields)


def resolve_dtype(dtype):
    """A dtype given to a SlangPy-style constructor -> (nabla dtype name, element dims).
    Accepts SlangType, Slang type names ("float", "float3"), Python float/int/bool, and anything
    nabla.Tensor.zeros takes ("f32", numpy / torch dtypes)."""
    if dtype is None:
        return "f32", ()
    if isinstance(dtype, SlangType):
        if dtype.dtype is None:
            raise _nabla.DtypeError(getattr(dtype, "error", f"{dtype.name} cannot be a tensor dtype"))
        return dtype.dtype, dtype.shape
    if dtype is float:
        return "f32", ()
    if dtype is int:
        return "i32", ()
    if dtype is bool:
        return "bool", ()
    if isinstance(dtype, str):
        t = builtin_type(dtype)
        if t is not None:
            return t.dtype, t.shape
    return dtype, ()

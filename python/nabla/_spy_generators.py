"""SlangPy's generators as call arguments: ``m.f(spy.call_id(), _result=res)``.

A generator is computed in the call kernel per kernel index instead of being read from memory
(C: include/nabla/module.h ``nb_generator``; the kernel code is generated in src/lang/callgen.c
for both back ends). Semantics follow SlangPy's documentation and tests:

- ``call_id(dims=-1)``: the call's index. An ``intN`` vector parameter gets x = the last (fastest)
  dim, an ``int[N]`` array the dims in order; the call's rank must be N (a vector of N+1 gets a zero
  last component). It adds no dims: another argument or ``_result`` gives the shape.
  ``call_id((4, 4))`` (a tuple) is ``grid(shape=(4, 4))``, as in SlangPy.
- ``thread_id(dims=-1)``: the linear thread index (row-major over the call) as x, 0 for y and z.
- ``grid(shape, offset=None, stride=None)``: ``offset + index * stride`` with its own call shape
  (``-1`` extents are inferred from the other arguments; an int shape means that many ``-1`` dims).
- ``wang_hash(dim=-1, seed=2640457667, warmup=0, hash_seed=True)``: SlangPy's Wang hash of the
  thread index (``calc_wang_hash`` is the same hash on the host).
- ``rand_float(min=0, max=1, dim=-1, seed=2640457667, warmup=0, hash_seed=True)``: uniform floats
  in [min, max) from those hashes (23 bits each).
"""
from . import _nabla

__all__ = [
    "call_id", "thread_id", "grid", "wang_hash", "rand_float", "calc_wang_hash", "Generator",
    "CallIdArg", "ThreadIdArg", "GridArg", "WangHashArg", "RandFloatArg",
]

# kinds: include/nabla/module.h nb_generator_kind
_CALL_ID, _THREAD_ID, _GRID, _WANG_HASH, _RAND_FLOAT = 1, 2, 3, 4, 5
DEFAULT_SEED = 2640457667


def _dims(dims, what):
    if isinstance(dims, bool) or not isinstance(dims, int):
        raise TypeError(f"{what}: dims must be an int (-1: from the parameter's type), got {dims!r}")
    if dims != -1 and not 1 <= dims <= 8:
        raise ValueError(f"{what}: dims={dims} (expected -1 or 1..8)")
    return dims


class Generator:
    """Base of the generator arguments (the call layer recognizes its instances)."""

    __slots__ = ()

    def _nb_spec(self):  # (kind, dims, shape, offset, stride, seed, hash_seed, warmup, min, max)
        raise NotImplementedError


class CallIdArg(Generator):
    """The call's index (see call_id)."""

    __slots__ = ("dims",)

    def __init__(self, dims=-1):
        if isinstance(dims, tuple):
            raise ValueError("call_id with a tuple is a grid: use grid(shape=...)")
        self.dims = _dims(dims, "call_id")

    def _nb_spec(self):
        return (_CALL_ID, self.dims, None, None, None, 0, 0, 0, 0.0, 1.0)

    def __repr__(self):
        return f"call_id(dims={self.dims})"


class ThreadIdArg(Generator):
    """The linear thread index as (x, 0, 0) (see thread_id)."""

    __slots__ = ("dims",)

    def __init__(self, dims=-1):
        self.dims = _dims(dims, "thread_id")

    def _nb_spec(self):
        return (_THREAD_ID, self.dims, None, None, None, 0, 0, 0, 0.0, 1.0)

    def __repr__(self):
        return f"thread_id(dims={self.dims})"


def _int_tuple(v, what):
    try:
        t = tuple(int(x) for x in v)
    except TypeError:
        raise TypeError(f"grid: {what} must be a sequence of ints, got {v!r}") from None
    return t


class GridArg(Generator):
    """offset + index * stride over its own shape (see grid)."""

    __slots__ = ("shape", "offset", "stride")

    def __init__(self, shape, offset=None, stride=None):
        if isinstance(shape, int) and not isinstance(shape, bool):
            shape = (-1,) * shape
        shape = _int_tuple(shape, "shape")
        if not 1 <= len(shape) <= 8:
            raise ValueError(f"grid: shape {shape} must have 1 to 8 dims")
        if any(s < -1 for s in shape):
            raise ValueError(f"grid: shape {shape}: extents are >= 0, or -1 to infer them")
        self.shape = shape
        self.stride = _int_tuple(stride, "stride") if stride is not None else (1,) * len(shape)
        self.offset = _int_tuple(offset, "offset") if offset is not None else (0,) * len(shape)
        if len(self.stride) != len(shape):
            raise ValueError(f"grid: shape {shape} and stride {self.stride} must have the same length")
        if len(self.offset) != len(shape):
            raise ValueError(f"grid: shape {shape} and offset {self.offset} must have the same length")
        if any(s < 0 for s in self.stride):
            raise ValueError(f"grid: stride {self.stride} must be concrete (>= 0)")

    @property
    def dims(self):
        return len(self.shape)

    def _nb_spec(self):
        return (_GRID, len(self.shape), self.shape, self.offset, self.stride, 0, 0, 0, 0.0, 1.0)

    def __repr__(self):
        return f"grid(shape={self.shape}, offset={self.offset}, stride={self.stride})"


class WangHashArg(Generator):
    """Wang hashes of the thread index (see wang_hash)."""

    __slots__ = ("dims", "seed", "warmup", "hash_seed")

    def __init__(self, dims=-1, seed=0, warmup=0, hash_seed=True):
        self.dims = _dims(dims, "wang_hash")
        self.seed = int(seed) & 0xFFFFFFFF
        self.warmup = int(warmup)
        if self.warmup < 0:
            raise ValueError(f"wang_hash: warmup={warmup} is negative")
        self.hash_seed = bool(hash_seed)

    def _nb_spec(self):
        return (_WANG_HASH, self.dims, None, None, None, self.seed, int(self.hash_seed), self.warmup, 0.0, 1.0)

    def __repr__(self):
        return f"wang_hash(dim={self.dims}, seed={self.seed}, warmup={self.warmup}, hash_seed={self.hash_seed})"


class RandFloatArg(Generator):
    """Uniform random floats in [min, max) (see rand_float)."""

    __slots__ = ("min", "max", "dims", "seed", "warmup", "hash_seed")

    def __init__(self, min, max, dim=-1, seed=0, warmup=0, hash_seed=True):
        self.min = float(min)
        self.max = float(max)
        self.dims = _dims(dim, "rand_float")
        self.seed = int(seed) & 0xFFFFFFFF
        self.warmup = int(warmup)
        if self.warmup < 0:
            raise ValueError(f"rand_float: warmup={warmup} is negative")
        self.hash_seed = bool(hash_seed)

    def _nb_spec(self):
        return (_RAND_FLOAT, self.dims, None, None, None, self.seed, int(self.hash_seed), self.warmup,
                self.min, self.max)

    def __repr__(self):
        return f"rand_float(min={self.min}, max={self.max}, dim={self.dims}, seed={self.seed})"


_nabla._set_generator_type(Generator)


def call_id(dims=-1):
    """The call's index per thread (a tuple gives grid(shape=dims), as SlangPy)."""
    if isinstance(dims, tuple):
        return GridArg(dims)
    return CallIdArg(dims)


def thread_id(dims=-1):
    """The linear thread index as (x, 0, 0): uint/int scalar or 1..3-vector."""
    return ThreadIdArg(dims)


def grid(shape, offset=None, stride=None):
    """offset + index * stride over `shape` (-1 extents inferred; an int: that many -1 dims)."""
    return GridArg(shape, offset, stride)


def wang_hash(dim=-1, seed=DEFAULT_SEED, warmup=0, hash_seed=True):
    """A Wang hash of the thread index per thread (uint/int scalar or 1..3-vector)."""
    return WangHashArg(dim, seed, warmup, hash_seed)


def rand_float(min=0, max=1, dim=-1, seed=DEFAULT_SEED, warmup=0, hash_seed=True):
    """A uniform float in [min, max) per thread (float scalar or 1..3-vector)."""
    return RandFloatArg(min, max, dim, seed, warmup, hash_seed)


def calc_wang_hash(seed):
    """SlangPy's 32-bit Wang hash of an int on the host (the generators' hash)."""
    return _nabla.wang_hash(int(seed))

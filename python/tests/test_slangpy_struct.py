"""SlangPy's struct-typed tensors on nabla (`import nabla as spy`): a function returning a struct
called over arrays gives a tensor whose dtype is the struct (`module.Rec`), `.to_numpy()` a numpy
structured array; numpy structured arrays are accepted for struct parameters, as `_result=`, and
by `Tensor.from_numpy(device, a, target_slang_dtype=module.Rec)`; structs of mixed scalar types
are C records (u8 storage). Bad input gives typed errors. CPU, and CUDA with a GPU."""
import numpy as np
import pytest

import nabla as spy
from nabla.types import Tensor
from nbtest import devices

SRC = """
struct Inner { int k; float3 v; }
struct Rec { int id; float w; float3 pos; }
struct Nest { float s; Inner q; double d; }
struct Pixel { float r; float g; float b; }
struct Other { float a; int b; float3 c; }
Rec mk(int i, float w) { Rec r; r.id = i * 2; r.w = w + 0.5; r.pos = float3(w, 2.0 * w, 3.0 * w); return r; }
float score(Rec r) { return float(r.id) + r.w + r.pos.z; }
Nest mkn(float s) { Nest n; n.s = s; n.q.k = int(s) + 1; n.q.v = float3(s, s + 1.0, s); n.d = double(s) * 2.0; return n; }
float nsum(Nest n) { return n.s + float(n.q.k) + n.q.v.y + float(n.d); }
Pixel px(float v) { Pixel p; p.r = v; p.g = v * 2.0; p.b = v * 3.0; return p; }
float bright(Pixel p) { return p.r + p.g + p.b; }
"""

REC = np.dtype([("id", "<i4"), ("w", "<f4"), ("pos", "<f4", (3,))])
NEST = np.dtype([("s", "<f4"), ("q", [("k", "<i4"), ("v", "<f4", (3,))]), ("d", "<f8")], align=True)

_mods = {}


def mod(kind):
    if kind not in _mods:
        _mods[kind] = spy.load_module_from_source(SRC, "structs.slang", device=spy.init_device(type=kind))
    return _mods[kind]


def expect_rec(i, w):
    out = np.zeros(len(i), REC)
    out["id"], out["w"] = i * 2, w + 0.5
    out["pos"] = np.stack([w, 2 * w, 3 * w], -1)
    return out


def test_struct_types_have_c_record_layouts():
    m = mod("cpu")
    assert (m.Rec.dtype, m.Rec.shape, m.Rec.itemsize) == ("u8", (20,), 20)  # mixed types: bytes
    assert m.Rec.offsets == {"id": 0, "w": 4, "pos": 8}
    # nested struct aligned to its largest field, the double to 8: as numpy's align=True
    assert m.Nest.offsets == {"s": 0, "q.k": 4, "q.v": 8, "d": 24} and m.Nest.itemsize == NEST.itemsize == 32
    assert (m.Pixel.dtype, m.Pixel.shape) == ("f32", (3,))  # one scalar type: the flat layout


@pytest.mark.parametrize("kind", devices())
def test_struct_result_is_a_struct_tensor(kind):
    m = mod(kind)
    dev = spy.init_device(type=kind)
    i_np, w_np = np.arange(5, dtype=np.int32), np.linspace(0, 1, 5).astype(np.float32)
    i, w = Tensor.from_numpy(dev, i_np), Tensor.from_numpy(dev, w_np)
    r = m.mk(i, w)  # tensor inputs: a struct tensor (SlangPy)
    assert isinstance(r, Tensor) and r.dtype == m.Rec and r.slang_type == m.Rec and r.element_count == 5
    assert r.shape == (5, 20) and r.scalar_dtype == "u8" and r.device.name == dev.name
    a = r.to_numpy()
    assert a.dtype == REC and a.shape == (5,)
    assert a.tobytes() == expect_rec(i_np, w_np).tobytes()
    np.testing.assert_allclose(r["pos"].to_numpy(), np.stack([w_np, 2 * w_np, 3 * w_np], -1))  # a field view
    assert r["id"].dtype == "i32" and r["id"].to_numpy().tolist() == (i_np * 2).tolist()
    # the struct tensor passed back: its fields bound as strided views
    np.testing.assert_allclose(m.score(r).to_numpy(), i_np * 2 + w_np + 0.5 + 3 * w_np, rtol=1e-6)
    # leading-dim views stay struct tensors
    assert r[1:3].dtype == m.Rec and r[1:3].to_numpy().tobytes() == a[1:3].tobytes()
    assert r[2].to_numpy()["id"] == 4


@pytest.mark.parametrize("kind", devices())
def test_struct_result_kinds(kind):
    m = mod(kind)
    i_np, w_np = np.arange(4, dtype=np.int32), np.ones(4, np.float32)
    want = expect_rec(i_np, w_np)
    d = m.mk(i_np, w_np)  # numpy inputs, no _result: nabla's dict of field arrays (unchanged)
    assert set(d) == {"id", "w", "pos"} and d["id"].tolist() == [0, 2, 4, 6]
    assert m.mk(i_np, w_np, _result=np.ndarray).tobytes() == want.tobytes()  # structured array
    assert m.mk(i_np, w_np, _result="numpy").dtype == REC
    t = m.mk(i_np, w_np, _result=Tensor)
    assert t.dtype == m.Rec and t.to_numpy().tobytes() == want.tobytes()
    assert m.mk(i_np, w_np, _result=m.Rec).dtype == m.Rec
    assert m.mk.return_type(m.Rec)(i_np, w_np).to_numpy().tobytes() == want.tobytes()
    # _result= an existing struct tensor / structured array: written in place, field by field
    into = Tensor.zeros(spy.init_device(type=kind), shape=(4,), dtype=m.Rec)
    assert m.mk(i_np, w_np, _result=into) is into and into.to_numpy().tobytes() == want.tobytes()
    arr = np.zeros(4, REC)
    assert m.mk(i_np, w_np, _result=arr) is arr and arr.tobytes() == want.tobytes()
    with pytest.raises(spy.DtypeError, match="tensor of struct Pixel.*returns Rec"):
        m.mk(i_np, w_np, _result=Tensor.zeros(spy.init_device(type=kind), shape=(4,), dtype=m.Pixel))
    with pytest.raises(spy.ArgumentError, match=r"fields \['a', 'b'\].*has \['id', 'w', 'pos'\]"):
        m.mk(i_np, w_np, _result=np.zeros(4, [("a", "<i4"), ("b", "<f4")]))


@pytest.mark.parametrize("kind", devices())
def test_nested_and_uniform_struct_results(kind):
    m = mod(kind)
    dev = spy.init_device(type=kind)
    s_np = np.array([0.0, 1.5, 3.0], np.float32)
    n = m.mkn(Tensor.from_numpy(dev, s_np))
    a = n.to_numpy()
    assert a.dtype == NEST and a["q"]["k"].tolist() == [1, 2, 4] and a["d"].tolist() == [0.0, 3.0, 6.0]
    np.testing.assert_allclose(a["q"]["v"][:, 1], s_np + 1)
    assert n["q"]["k"].to_numpy().tolist() == [1, 2, 4]  # a nested struct's fields: a dict of views
    want = s_np + np.array([1, 2, 4]) + s_np + 1 + 2 * s_np
    np.testing.assert_allclose(m.nsum(n).to_numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(m.nsum(a), want, rtol=1e-6)  # a structured array for a struct parameter
    p = m.px(Tensor.from_numpy(dev, s_np))  # one scalar type: f32 records (the flat layout)
    assert p.dtype == m.Pixel and p.shape == (3, 3) and p.scalar_dtype == "f32"
    assert p.flatten_dtype().to_numpy().tolist() == [[0, 0, 0], [1.5, 3, 4.5], [3, 6, 9]]
    assert p.to_numpy()["b"].tolist() == [0, 4.5, 9]
    np.testing.assert_allclose(m.bright(p).to_numpy(), 6 * s_np)


@pytest.mark.parametrize("kind", devices())
def test_structured_numpy_inputs(kind):
    m = mod(kind)
    dev = spy.init_device(type=kind)
    data = expect_rec(np.arange(6, dtype=np.int32), np.linspace(0, 2, 6).astype(np.float32))
    want = data["id"] + data["w"] + data["pos"][:, 2]
    np.testing.assert_allclose(m.score(data), want, rtol=1e-6)
    np.testing.assert_allclose(m.score(r=data[::2]), want[::2], rtol=1e-6)  # strided records
    t = Tensor.from_numpy(dev, data, target_slang_dtype=m.Rec)  # SlangPy's spelling
    assert t.dtype == m.Rec and t.to_numpy().tobytes() == data.tobytes()
    np.testing.assert_allclose(m.score(t).to_numpy(), want, rtol=1e-6)
    assert Tensor.zeros((6,), m.Rec, dev).dtype == m.Rec  # nabla's (shape, dtype, device) order too
    t2 = spy.NDBuffer.zeros(dev, shape=(6,), dtype=m.Rec)
    t2.copy_from_numpy(data)
    assert t2.to_numpy().tobytes() == data.tobytes()
    # a uniform struct from a structured array: f32 records
    px = np.array([(1, 2, 3), (4, 5, 6)], [("r", "<f4"), ("g", "<f4"), ("b", "<f4")])
    tp = Tensor.from_numpy(dev, px, target_slang_dtype=m.Pixel)
    assert tp.shape == (2, 3) and tp.flatten_dtype().to_numpy().tolist() == [[1, 2, 3], [4, 5, 6]]


def test_struct_tensor_errors():
    m = mod("cpu")
    dev = spy.init_device(type="cpu")
    data = np.zeros(3, REC)
    with pytest.raises(spy.ArgumentError, match="Structured numpy dtype"):
        Tensor.from_numpy(dev, data)
    with pytest.raises(spy.ShapeError, match="does not match"):  # SlangPy: ValueError "does not match"
        Tensor.from_numpy(dev, np.zeros(2, [("x", "<f4"), ("y", "<f4")]), target_slang_dtype=m.Rec)
    swapped = np.dtype([("w", "<f4"), ("id", "<i4"), ("pos", "<f4", (3,))])  # same size, other layout
    with pytest.raises(spy.ShapeError, match="numpy field 'w'.*Rec.id"):
        Tensor.from_numpy(dev, np.zeros(2, swapped), target_slang_dtype=m.Rec)
    with pytest.raises(spy.ArgumentError, match="target_slang_dtype must be a struct"):
        Tensor.from_numpy(dev, data, target_slang_dtype=m.float3)
    with pytest.raises(spy.ArgumentError, match=r"argument 'r' is a numpy structured array with fields"):
        m.score(np.zeros(3, [("id", "<i4"), ("w", "<f4"), ("nope", "<f4", (3,))]))
    with pytest.raises(spy.DtypeError, match="tensor of struct Other, the parameter is Rec"):
        m.score(Tensor.zeros(dev, shape=(3,), dtype=m.Other))  # same size, other struct
    t = Tensor.zeros(dev, shape=(3,), dtype=m.Rec)
    with pytest.raises(spy.ArgumentError, match="no field 'nope'"):
        t["nope"]
    with pytest.raises(spy.ArgumentError, match="field names index struct tensors"):
        Tensor.zeros(dev, shape=(3,), dtype="float")["w"]
    with pytest.raises(spy.ShapeError, match="records"):
        t.copy_from_numpy(np.zeros(2, REC))


@pytest.mark.parametrize("kind", devices())
def test_struct_tensor_to_torch(kind):
    # one scalar type: the fields are the trailing dim (flatten_dtype's layout), zero-copy; mixed
    # scalar types: DtypeError naming the struct, its fields one by one instead
    torch = pytest.importorskip("torch")
    m = mod(kind)
    dev = spy.init_device(type=kind)
    v = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    p = m.px(Tensor.from_numpy(dev, v))
    assert p.dtype == m.Pixel and p.shape == (2, 2, 3)
    tp = p.to_torch()
    assert tp.dtype == torch.float32 and tuple(tp.shape) == (2, 2, 3)
    np.testing.assert_allclose(tp.cpu().numpy(), np.stack([v, 2 * v, 3 * v], -1))
    tp[0, 0, 1] = 7.0  # the same memory
    assert p.to_numpy()["g"][0, 0] == 7.0
    assert p.torch().data_ptr() == tp.data_ptr()
    r = m.mk(Tensor.from_numpy(dev, np.arange(3, dtype=np.int32)), Tensor.from_numpy(dev, np.ones(3, np.float32)))
    with pytest.raises(spy.DtypeError, match=r"struct Rec mixes field types \(id: i32, w: f32, pos: f32\).*"
                                             r"t\['id'\]\.to_torch\(\)"):
        r.to_torch()
    with pytest.raises(RuntimeError, match="struct Rec"):
        r.torch()
    pos = r["pos"].to_torch()  # a field: a strided view into the records
    assert tuple(pos.shape) == (3, 3) and pos.dtype == torch.float32
    np.testing.assert_allclose(pos.cpu().numpy(), np.ones((3, 3)) * [1, 2, 3])
    assert r["id"].to_torch().tolist() == [0, 2, 4]
    assert r.flatten_dtype().to_torch().dtype == torch.uint8  # the records' bytes, asked for

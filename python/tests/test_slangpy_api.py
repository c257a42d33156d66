"""SlangPy's names on nabla (`import nabla as spy`), one test per name, with bad input giving
typed nabla errors: devices and module loading, NDBuffer, the Tensor API (constructors in both
spellings, with_grads / grad_in / grad_out, detach, clear, flatten_dtype, broadcast_to, views),
Slang types as dtypes, struct tensors for struct parameters, `_type`, `_result=` classes,
return_type, set."""
import os

import numpy
import pytest

import nabla as spy
from nabla.types import NDBuffer, Tensor
from nbtest import devices

SRC = """
float add(float a, float b) { return a + b; }
float3 scale3(float3 v, float s) { return v * s; }
void bump(inout float x, float d) { x = x + d; }
struct Pixel { float r; float g; float b; }
struct P2 : IDifferentiable { float3 pos; float w; }
struct MyType { int x; float y; }
float brightness(Pixel p) { return p.r + p.g + p.b; }
float weigh(P2 p) { return (p.pos.x + p.pos.y + p.pos.z) * p.w; }
float my(MyType v) { return float(v.x) + v.y; }
[Differentiable] float wsum(P2 p) { return (p.pos.x + 2.0 * p.pos.y + 3.0 * p.pos.z) * p.w; }
RWStructuredBuffer<float> outputBuffer;
void put(int i, float v) { outputBuffer[i] = v; }
uniform float gain;
[Differentiable] float amp(float x) { return x * x * gain; }
"""


def _mod(dev=None):
    return spy.load_module_from_source(SRC, "spyapi.slang", device=dev or spy.init_device(type="cpu"))


# ---- devices and modules ----------------------------------------------------------------------


def test_init_device_types():
    assert spy.init_device(type=spy.DeviceType.cpu).kind == "cpu"
    assert spy.init_device(type="cpu").type == "cpu"
    assert spy.init_device().kind in ("cpu", "cuda")  # automatic
    assert spy.create_device(type=spy.DeviceType.automatic).kind in ("cpu", "cuda")
    for kind in devices():
        assert spy.init_device(type=kind).kind == kind


def test_init_device_bad_input():
    with pytest.raises(spy.ArgumentError, match="unknown device type 'gpu'"):
        spy.init_device(type="gpu")
    with pytest.raises(spy.UnsupportedError, match="'vulkan' is not supported"):
        spy.init_device(type=spy.DeviceType.vulkan)
    with pytest.raises(spy.ArgumentError, match="unknown argument"):
        spy.init_device(type="cpu", colour="blue")
    with pytest.raises(spy.ArgumentError):
        spy.init_device(type=3)


def test_module_loading():
    import pathlib
    import tempfile

    d = pathlib.Path(tempfile.mkdtemp()) / "shaders"
    d.mkdir()
    (d / "twice.slang").write_text("float twice(float x) { return 2 * x; }\n")
    dev = spy.init_device(type="cpu", include_paths=[str(d)])
    assert str(d) in dev.include_paths
    m = dev.load_module("twice")  # found through the include path, extension added
    assert float(m.twice(3.0)) == 6.0
    m2 = dev.load_module_from_file(str(d / "twice.slang"))
    assert float(m2.twice(1.5)) == 3.0
    m3 = spy.Module.load_from_file(dev, "twice.slang")
    assert float(m3.twice(2.0)) == 4.0
    m4 = dev.load_module_from_source("inline", "float thrice(float x) { return 3 * x; }")
    assert float(m4.thrice(2.0)) == 6.0
    old = os.getcwd()
    try:  # relative to the working directory first
        os.chdir(d)
        assert float(spy.Module.load_from_file(spy.init_device(type="cpu"), "twice.slang").twice(1.0)) == 2.0
    finally:
        os.chdir(old)
    with pytest.raises(spy.FileError, match="module 'nope' not found"):
        dev.load_module("nope")
    with pytest.raises(spy.ArgumentError, match="must be a nabla.Device"):
        spy.Module.load_from_file("cpu", "twice.slang")


# ---- types as dtypes ------------------------------------------------------------------------


def test_module_types():
    m = _mod()
    assert (m.float.dtype, m.float.shape) == ("f32", ())
    assert (m.float3.dtype, m.float3.shape) == ("f32", (3,))
    assert (m.float3x3.shape, m.int.dtype) == ((3, 3), "i32")
    assert (m.Pixel.dtype, m.Pixel.shape) == ("f32", (3,))
    assert m.P2.shape == (4,) and [f[0] for f in m.P2.fields] == ["pos", "w"]
    with pytest.raises(AttributeError, match="nope"):
        m.nope
    # a struct of mixed scalar types is stored as C records of bytes: int x @0, float y @4
    assert (m.MyType.dtype, m.MyType.shape, m.MyType.itemsize) == ("u8", (8,), 8)
    assert m.MyType.offsets == {"x": 0, "y": 4} and m.P2.offsets == {"pos": 0, "w": 12}
    b = spy.NDBuffer(spy.init_device(type="cpu"), dtype=m.MyType, shape=(2,))
    assert b.dtype == m.MyType and b.scalar_dtype == "u8" and b.shape == (2, 8) and b.element_count == 2


def test_ndbuffer():
    dev = spy.init_device(type="cpu")
    m = _mod(dev)
    for dt in (None, float, "float", m.float, "f32"):
        b = spy.NDBuffer(dev, dtype=dt, shape=(4,))
        assert b.shape == (4,) and b.dtype == "f32" and isinstance(b, NDBuffer) and isinstance(b, Tensor)
        assert b.to_numpy().tolist() == [0.0] * 4
    b = spy.NDBuffer(dev, dtype=m.float3, shape=(2,))
    assert b.shape == (2, 3)
    b = spy.NDBuffer(dev, dtype=m.Pixel, shape=(16, 16))
    assert b.shape == (16, 16, 3) and b.dtype == m.Pixel and b.scalar_dtype == "f32"
    b.from_numpy(numpy.arange(16 * 16 * 3))  # any numeric dtype, same element count
    assert b.flatten_dtype().to_numpy()[1, 2].tolist() == [54.0, 55.0, 56.0]
    assert b.to_numpy()[1, 2].tolist() == (54.0, 55.0, 56.0)  # a struct tensor: a structured array
    assert b.to_numpy()["g"][1, 2] == 55.0
    assert spy.NDBuffer(dev, element_count=5).shape == (5,)
    with pytest.raises(spy.ShapeError, match="has 5 elements"):
        b.from_numpy(numpy.zeros(5))
    with pytest.raises(spy.DtypeError, match="not numeric"):
        b.from_numpy(numpy.array(["a"] * (16 * 16 * 3)))
    with pytest.raises(spy.ArgumentError, match="needs a nabla.Device"):
        spy.NDBuffer("cpu", shape=(3,))
    with pytest.raises(spy.ArgumentError, match="shape= is missing"):
        spy.NDBuffer(dev)
    with pytest.raises(spy.ArgumentError, match="unknown argument"):
        spy.NDBuffer(dev, shape=(3,), colour=1)


def test_buffer_usage_flags_accepted():
    """SlangPy's usage= / memory_type= options: accepted (nabla's memory needs no usage), checked."""
    dev = spy.init_device(type="cpu")
    u = spy.BufferUsage.shader_resource | spy.BufferUsage.unordered_access
    a = numpy.arange(4, dtype=numpy.float32)
    assert Tensor.zeros(dev, (4,), "float", usage=u, memory_type=spy.MemoryType.device_local).shape == (4,)
    assert Tensor.empty(dev, shape=(2,), dtype=float, usage=u).shape == (2,)
    assert Tensor.from_numpy(dev, a, usage=u).to_numpy().tolist() == [0, 1, 2, 3]
    assert spy.NDBuffer(dev, dtype=float, shape=(3,), usage=u, memory_type=spy.MemoryType.upload).shape == (3,)
    assert NDBuffer.zeros(dev, shape=(2,), dtype=float, usage=u).shape == (2,)
    with pytest.raises(spy.ArgumentError, match="usage= must be a spy.BufferUsage value"):
        Tensor.zeros(dev, (4,), "float", usage="rw")
    with pytest.raises(spy.ArgumentError, match="memory_type= must be a spy.MemoryType value"):
        spy.NDBuffer(dev, dtype=float, shape=(3,), memory_type=1.5)
    with pytest.raises(spy.ArgumentError, match=r"unknown argument\(s\) \['nope'\]"):
        NDBuffer.empty(dev, shape=(2,), nope=1)


def test_copy_from_torch():
    torch = pytest.importorskip("torch")
    for kind in devices():
        dev = spy.init_device(type=kind)
        b = Tensor.zeros(dev, shape=(2, 3), dtype="float")
        b.copy_from_torch(torch.arange(6, dtype=torch.float32))  # same dtype: through DLPack
        assert b.to_numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
        b.copy_from_torch(torch.arange(6).reshape(3, 2).t() * 2)  # int64, transposed: cast, C order
        assert b.to_numpy().tolist() == [[0, 4, 8], [2, 6, 10]]
        with pytest.raises(spy.ShapeError, match="has 5 elements"):
            b.copy_from_torch(torch.zeros(5))
        with pytest.raises(spy.ArgumentError, match="expected a torch.Tensor"):
            b.copy_from_torch(numpy.zeros(6))


def test_ndbuffer_torch():
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float32)
    b = spy.NDBuffer(t)
    assert b.shape == (6,) and b.to_numpy().tolist() == list(range(6))
    m = _mod()
    m.bump(b, 1.0)  # writes t's memory (zero-copy)
    assert t.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert b.torch().tolist() == t.tolist() and b.to_torch().data_ptr() == t.data_ptr()
    with pytest.raises(spy.ArgumentError, match="no dtype"):
        spy.NDBuffer(t, dtype=float)


# ---- Tensor ---------------------------------------------------------------------------------


def test_tensor_constructors_both_spellings():
    dev = spy.init_device(type="cpu")
    a = numpy.arange(6, dtype=numpy.float32).reshape(2, 3)
    for t in (Tensor.from_numpy(dev, a), Tensor.from_numpy(a, device=dev), Tensor.from_numpy(a),
              Tensor.numpy(dev, a)):
        assert t.shape == (2, 3) and t.to_numpy().tolist() == a.tolist()
    t = Tensor.from_numpy(dev, a)
    assert t.numpy().tolist() == a.tolist()  # on a tensor: a numpy copy (nabla)
    z = Tensor.zeros(dev, dtype=float, shape=(3,))
    assert z.shape == (3,) and z.dtype == "f32"
    assert Tensor.zeros(dev, (2, 2), "int").dtype == "i32"  # SlangPy's positional (device, shape, dtype)
    assert Tensor.zeros((2, 2), "f64", dev).dtype == "f64"  # nabla's (shape, dtype, device)
    assert Tensor.empty(dev, shape=(5,), dtype=spy.Module.__getattr__(_mod(dev), "float3")).shape == (5, 3)
    assert Tensor.zeros_like(t).shape == (2, 3) and Tensor.zeros_like(t).to_numpy().sum() == 0
    assert Tensor.empty_like(t).dtype == "f32"
    t.from_numpy(a * 2)  # on a tensor: copies into it
    assert t.to_numpy().tolist() == (a * 2).tolist()
    with pytest.raises(spy.ArgumentError, match="exactly these two"):
        Tensor.from_numpy(dev, a, 3)
    with pytest.raises(spy.ArgumentError, match="first argument must be a nabla.Device"):
        Tensor.numpy(a, dev)
    with pytest.raises(spy.ArgumentError, match="expected a nabla.Tensor"):
        Tensor.zeros_like(a)
    with pytest.raises(spy.ArgumentError, match="shape= is missing"):
        Tensor.zeros(dev, dtype=float)
    with pytest.raises(spy.ArgumentError, match="unknown argument"):
        Tensor.zeros(dev, shape=(2,), colour=1)


def test_with_grads():
    dev = spy.init_device(type="cpu")
    t = Tensor.from_numpy(dev, numpy.ones(4, dtype=numpy.float32))
    assert t.grad is None and t.grad_in is None and t.grad_out is None
    g = t.with_grads()
    assert g.grad is not None and g.grad_in is g.grad and g.grad_out is g.grad
    assert g.grad.to_numpy().tolist() == [0.0] * 4
    assert g.data_ptr == t.data_ptr  # the same memory
    gi = Tensor.from_numpy(dev, numpy.full(4, 2.0, dtype=numpy.float32))
    h = t.with_grads(grad_in=gi)
    assert h.grad_in is gi and h.grad_out is None
    assert gi.to_numpy().tolist() == [2.0] * 4  # a grad_in given is never cleared
    go = Tensor.from_numpy(dev, numpy.full(4, 5.0, dtype=numpy.float32))
    k = t.with_grads(grad_out=go)
    assert k.grad is go and go.to_numpy().tolist() == [0.0] * 4  # zero=True clears grad_out
    go.from_numpy(numpy.full(4, 5.0))
    k = t.with_grads(grad_out=go, zero=False)
    assert go.to_numpy().tolist() == [5.0] * 4
    assert t.with_grads(grad=go).grad is go  # nabla's spelling
    with pytest.raises(spy.ShapeError, match="grad_in has shape"):
        t.with_grads(grad_in=Tensor.zeros(dev, shape=(3,)))
    with pytest.raises(spy.DtypeError, match="grad_out is f64"):
        t.with_grads(grad_out=Tensor.zeros(dev, shape=(4,), dtype="f64"))
    with pytest.raises(spy.ArgumentError, match="not both"):
        t.with_grads(grad_out=go, grad=go)
    with pytest.raises(spy.ArgumentError, match="must be a nabla.Tensor"):
        t.with_grads(grad_in=numpy.ones(4))


def test_bwds_reads_grad_in_and_accumulates_grad_out():
    dev = spy.init_device(type="cpu")
    m = spy.load_module_from_source("[Differentiable] float sq(float x) { return x * x; }", "sq.slang", device=dev)
    x = Tensor.from_numpy(dev, numpy.array([1.0, 2.0, 3.0], dtype=numpy.float32)).with_grads()
    r = Tensor.zeros(dev, shape=(3,)).with_grads(grad_in=Tensor.from_numpy(dev, numpy.array([1.0, 10.0, 100.0],
                                                                                           dtype=numpy.float32)))
    m.sq.bwds(x, _result=r)
    m.sq.bwds(x, _result=r)  # accumulates
    assert x.grad_out.to_numpy().tolist() == [4.0, 80.0, 1200.0]
    x.grad_out.clear()
    assert x.grad.to_numpy().tolist() == [0.0] * 3


def test_detach_clear_flatten_broadcast():
    dev = spy.init_device(type="cpu")
    t = Tensor.from_numpy(dev, numpy.arange(3, dtype=numpy.float32)).with_grads()
    d = t.detach()
    assert d.grad is None and d.data_ptr == t.data_ptr
    f = t.flatten_dtype()
    assert f.shape == (3,) and f.grad is t.grad and f.data_ptr == t.data_ptr
    b = t.broadcast_to((4, 3))
    assert b.shape == (4, 3) and b.strides == (0, 4)
    assert spy.load_module_from_source(SRC, "b.slang", device=dev).add(b, 1.0)[3].to_numpy().tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(spy.ShapeError):
        t.broadcast_to((4, 2))
    t.clear()
    assert t.to_numpy().tolist() == [0.0] * 3


def test_indexing_views():
    dev = spy.init_device(type="cpu")
    a = numpy.arange(24, dtype=numpy.float32).reshape(4, 6)
    t = Tensor.from_numpy(dev, a)
    assert t[1].to_numpy().tolist() == a[1].tolist()
    assert t[-1].to_numpy().tolist() == a[-1].tolist()
    assert t[:, 1:3].to_numpy().tolist() == a[:, 1:3].tolist()
    assert t[..., 0].to_numpy().tolist() == a[..., 0].tolist()
    assert t[1:4:2, ::3].to_numpy().tolist() == a[1:4:2, ::3].tolist()
    assert t[2, 5].shape == () and float(t[2, 5].to_numpy()) == 17.0
    v = t[:, 1:3]
    assert v.strides == (24, 4)
    spy.load_module_from_source(SRC, "v.slang", device=dev).bump(v, 100.0)  # a view as an inout argument
    a[:, 1:3] += 100
    assert t.to_numpy().tolist() == a.tolist()  # written through the view, zero-copy
    g = t.with_grads()
    assert g[1].grad.shape == (6,)
    with pytest.raises(IndexError, match="out of range"):
        t[4]
    with pytest.raises(IndexError, match="too many indices"):
        t[0, 0, 0]
    with pytest.raises(spy.UnsupportedError, match="negative step"):
        t[::-1]
    with pytest.raises(spy.UnsupportedError, match="only ints, slices"):
        t[[0, 1]]


# ---- calls ----------------------------------------------------------------------------------


def test_struct_tensors_as_struct_arguments():
    for kind in devices():
        dev = spy.init_device(type=kind)
        m = _mod(dev)
        px = numpy.random.rand(5, 3).astype(numpy.float32)
        b = spy.NDBuffer(dev, dtype=m.Pixel, shape=(5,))
        b.from_numpy(px)
        numpy.testing.assert_allclose(m.brightness(b).to_numpy(), px.sum(-1), rtol=1e-6)
        numpy.testing.assert_allclose(m.brightness(px), px.sum(-1), rtol=1e-6)  # numpy in the flat layout
        p2 = numpy.random.rand(7, 4).astype(numpy.float32)
        numpy.testing.assert_allclose(m.weigh(p2), p2[:, :3].sum(-1) * p2[:, 3], rtol=1e-5)
        with pytest.raises(spy.ShapeError, match=r"stored as \[3\] per element"):
            m.brightness(numpy.zeros((5, 4), dtype=numpy.float32))


def test_struct_tensor_gradients():
    dev = spy.init_device(type="cpu")
    m = _mod(dev)
    p = Tensor.from_numpy(dev, numpy.array([[1, 1, 1, 2], [1, 2, 3, 0.5]], dtype=numpy.float32)).with_grads()
    r = Tensor.zeros(dev, shape=(2,)).with_grads(grad_in=Tensor.from_numpy(dev, numpy.ones(2, dtype=numpy.float32)))
    m.wsum.bwds(p, _result=r)
    # d/dpos = w * (1, 2, 3), d/dw = pos.x + 2 pos.y + 3 pos.z
    assert p.grad.to_numpy().tolist() == [[2, 4, 6, 6], [0.5, 1, 1.5, 14]]


def test_type_key():
    m = _mod()
    assert float(m.my({"_type": "MyType", "x": 2, "y": 0.5})) == 2.5
    with pytest.raises(spy.ArgumentError, match="_type 'Nope'"):
        m.my({"_type": "Nope", "x": 2, "y": 0.5})


def test_result_classes_and_return_type():
    m = _mod()
    a = numpy.ones(3, dtype=numpy.float32)
    assert isinstance(m.add(a, 1.0, _result=Tensor), Tensor)
    assert isinstance(m.add(a, 1.0, _result=spy.Tensor), Tensor)
    assert isinstance(m.add(Tensor.from_numpy(a), 1.0, _result=numpy.ndarray), numpy.ndarray)
    assert isinstance(m.add.return_type(Tensor)(a, 2.0), Tensor)
    assert isinstance(m.add.return_type(m.float)(a, 2.0), Tensor)
    assert m.scale3.return_type(m.float3)([1, 2, 3], 2.0).to_numpy().tolist() == [2, 4, 6]
    assert float(m.add.call(1.0, 2.0)) == 3.0
    with pytest.raises(spy.DtypeError, match="returns 'float'"):
        m.add.return_type(m.float3)
    with pytest.raises(spy.ArgumentError, match="_result=dict"):
        m.add(a, 1.0, _result=dict)
    torch = pytest.importorskip("torch")
    assert isinstance(m.add(a, 1.0, _result=torch.Tensor), torch.Tensor)


def test_set_globals():
    m = _mod()
    out = numpy.zeros(4, dtype=numpy.float32)
    put = m.put.set({"outputBuffer": out})
    put(2, 7.0)
    put.set(outputBuffer=out)(1, 3.0)
    assert out.tolist() == [0, 3, 7, 0]
    m.set({"outputBuffer": out})
    m.put(0, 1.0)
    assert out.tolist() == [1, 3, 7, 0]
    with pytest.raises(spy.ArgumentError, match="'nope' is not a global parameter of put"):
        m.put.set({"nope": 1.0})
    with pytest.raises(spy.ArgumentError, match="expected a dict"):
        m.put.set([1])


def test_set_uniform_values():
    m = _mod()
    x = numpy.array([1.0, 2.0, 3.0], dtype=numpy.float32)
    amp = m.amp.set({"gain": 2.0})
    assert amp(x).tolist() == [2.0, 8.0, 18.0]
    assert amp.set(gain=0.5)(x).tolist() == [0.5, 2.0, 4.5]
    xt = Tensor.from_numpy(x).with_grads()
    r = Tensor.zeros(shape=(3,)).with_grads(grad_in=Tensor.from_numpy(numpy.ones(3, dtype=numpy.float32)))
    amp.bwds(xt, _result=r)  # gain is a constant of the call: d/dx = 2 x gain
    assert xt.grad.to_numpy().tolist() == [4.0, 8.0, 12.0]
    m.set({"gain": 3.0})
    assert m.amp(x).tolist() == [3.0, 12.0, 27.0]
    with pytest.raises(spy.NablaError, match="gain"):
        _mod().amp(x)  # not set: the parameter is missing

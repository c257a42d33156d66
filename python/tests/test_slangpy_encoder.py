"""SlangPy's command encoders on nabla: device.create_command_encoder(), f.append_to(enc, ...) /
f(..., _append_to=enc), device.submit_command_buffer(enc.finish()): calls recorded (and checked)
at append time, run in order at submit, submitted again over the arrays' new contents; on CUDA
one captured graph. CPU, and CUDA with a GPU."""
import numpy as np
import pytest

import nabla as spy
from nbtest import devices

SRC = """
float3 polynomial(float3 a, float3 b) { return a * a + b + 1; }
void scale_into(float3 x, float s, out float3 y) { y = x * s; }
void accumulate(inout float3 acc, float3 v) { acc += v; }
[Differentiable] float square(float x) { return x * x; }
int ids(int i) { return i; }
"""

_mods = {}


def mod(dev):
    if dev not in _mods:
        _mods[dev] = spy.load_module_from_source(SRC, "enc.slang", device=dev)
    return _mods[dev]


def T(a, dev):
    return spy.Tensor.from_numpy(np.ascontiguousarray(a, dtype=np.float32), device=dev)


@pytest.mark.parametrize("dev", devices())
def test_append_and_submit_in_order(dev):
    m = mod(dev)
    device = spy.device(dev)
    rng = np.random.default_rng(1)
    a_np = rng.random((10, 3)).astype(np.float32)
    b_np = rng.random((10, 3)).astype(np.float32)
    a, b = T(a_np, dev), T(b_np, dev)
    res = T(np.zeros((10, 3)), dev)
    scaled = T(np.zeros((10, 3)), dev)
    acc = T(np.zeros((10, 3)), dev)
    enc = device.create_command_encoder()
    m.polynomial.append_to(enc, a, b, _result=res)
    m.scale_into(res, 2.0, scaled, _append_to=enc)  # the keyword spelling
    m.accumulate.append_to(enc, acc, scaled)
    y = m.polynomial.append_to(enc, a, [0.0, 0.0, 0.0])  # a result allocated now, filled at submit
    assert len(enc) == 4
    # nothing has run yet
    assert not np.allclose(res.to_numpy(), a_np * a_np + b_np + 1)
    assert np.all(acc.to_numpy() == 0)
    cb = enc.finish()
    device.submit_command_buffer(cb)
    want = a_np * a_np + b_np + 1
    assert np.allclose(res.to_numpy(), want)
    assert np.allclose(acc.to_numpy(), 2 * want)
    assert isinstance(y, spy.Tensor) and np.allclose(y.to_numpy(), a_np * a_np + 1)
    assert cb.uses_graph == (dev == "cuda")
    # submitted again over new contents: acc accumulates
    a.copy_from(T(np.ones((10, 3)), dev))
    device.submit_command_buffer(cb)
    assert np.allclose(res.to_numpy(), 2 + b_np)
    assert np.allclose(acc.to_numpy(), 2 * want + 2 * (2 + b_np))
    assert cb.submit_count == 2


@pytest.mark.parametrize("dev", devices())
def test_append_bwds_and_generators(dev):
    m = mod(dev)
    device = spy.device(dev)
    x = T(np.array([1.0, 2.0, 3.0]), dev)
    gx = T(np.zeros(3), dev)
    enc = device.create_command_encoder()
    m.square.bwds.append_to(enc, x, _grads={"x": gx})
    ids = m.ids.append_to(enc, spy.call_id(), _result=spy.Tensor.zeros((5,), "i32", device=dev))
    device.submit_command_buffer(enc.finish())
    assert gx.to_numpy().tolist() == [2.0, 4.0, 6.0]
    assert ids.to_numpy().tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("dev", devices())
def test_append_errors(dev):
    m = mod(dev)
    device = spy.device(dev)
    enc = device.create_command_encoder()
    a = T(np.zeros((4, 3)), dev)
    # bad arguments raise at append time, naming them; nothing is recorded
    with pytest.raises(spy.ShapeError, match="argument 'b'"):
        m.polynomial.append_to(enc, a, T(np.zeros((5, 3)), dev))
    with pytest.raises(spy.ArgumentError, match="missing argument for parameter 'b'"):
        m.polynomial.append_to(enc, a)
    with pytest.raises(spy.DtypeError, match="argument 'i'"):
        m.ids.append_to(enc, np.zeros(3, np.float32))
    with pytest.raises(spy.ArgumentError, match="_result='numpy'"):
        m.polynomial.append_to(enc, a, a, _result="numpy")
    with pytest.raises(TypeError, match="command encoder"):
        m.polynomial.append_to("enc", a, a)
    with pytest.raises(TypeError, match="command encoder"):
        m.polynomial(a, a, _append_to=3)
    assert len(enc) == 0
    cb = enc.finish()
    with pytest.raises(spy.ArgumentError, match="finished"):
        m.polynomial.append_to(enc, a, a)
    with pytest.raises(spy.ArgumentError, match="finished"):
        m.polynomial(a, a, _append_to=enc)
    assert len(cb) == 0
    device.submit_command_buffer(cb)  # empty: nothing to do
    with pytest.raises(TypeError):
        device.submit_command_buffer(42)


KSRC = """
[Kernel] void fill(Tensor<float, 1> dst, float v) { uint3 id = dispatch_id(); dst[id.x] = dst[id.x] + v + float(id.x); }
"""


@pytest.mark.parametrize("dev", devices())
def test_dispatch_into_command_encoder(dev):
    """SlangPy: f.dispatch(thread_count, ..., command_encoder=enc) records the dispatch; it runs
    at submit (and again at each submit), in order with the other recorded calls."""
    km = spy.load_module_from_source(KSRC, "kenc.slang", device=dev)
    m = mod(dev)
    device = spy.device(dev)
    dst = spy.Tensor.zeros((4,), device=dev)
    enc = device.create_command_encoder()
    assert km.fill.dispatch(4, dst, 1.0, command_encoder=enc) is None
    assert km.fill.dispatch((4, 1, 1), dst=dst, command_encoder=enc, vars={"v": 10.0}) is None
    assert len(enc) == 2 and dst.to_numpy().tolist() == [0, 0, 0, 0]  # not run yet
    x = T(np.ones((4, 3)), dev)
    y = m.polynomial.append_to(enc, x, x)
    cb = enc.finish()
    device.submit_command_buffer(cb)
    assert dst.to_numpy().tolist() == [11, 13, 15, 17]
    np.testing.assert_allclose(y.to_numpy(), np.full((4, 3), 3.0))
    cb.submit()  # again: the same dispatches over the tensor's new contents
    assert dst.to_numpy().tolist() == [22, 26, 30, 34]
    km.fill.dispatch(4, dst, 0.0)  # without an encoder: runs now
    assert dst.to_numpy().tolist() == [22, 27, 32, 37]
    with pytest.raises(TypeError, match=r"dispatch\(command_encoder=\) expects a command encoder"):
        km.fill.dispatch(4, dst, 1.0, command_encoder="enc")
    with pytest.raises(spy.ArgumentError, match="finished"):
        km.fill.dispatch(4, dst, 1.0, command_encoder=enc)
    with pytest.raises(spy.ArgumentError, match=r"\['v'\] given in vars and as keyword"):
        km.fill.dispatch(4, dst, v=1.0, vars={"v": 2.0})
    with pytest.raises(spy.ArgumentError, match="vars must be a dict"):
        km.fill.dispatch(4, dst, 1.0, vars=[1])
    enc2 = device.create_command_encoder()
    with pytest.raises(spy.ArgumentError, match="grid must be an int or 1 to 3 ints"):
        km.fill.dispatch((1, 2, 3, 4), dst, 1.0, command_encoder=enc2)
    assert len(enc2) == 0


def test_submit_orders_with_torch_stream():
    # calls that bound torch tensors: on the CPU nothing to order (the encoder records no torch
    # CUDA device); on CUDA the submit waits for what torch queued on its current stream before
    # it and torch work queued after it sees the results (a side stream, a long matmul first)
    torch = pytest.importorskip("torch")
    m = mod("cpu")
    x = torch.ones((16, 3))
    y = torch.zeros((16, 3))
    enc = spy.device("cpu").create_command_encoder()
    m.scale_into.append_to(enc, x, 3.0, y)
    assert enc._torch_index == -1
    cb = enc.finish()
    cb.submit()
    assert torch.all(y == 3)
    x.fill_(2)
    cb.submit()
    assert torch.all(y == 6)
    if "cuda" not in devices() or not torch.cuda.is_available():
        return
    mc = mod("cuda")
    x = torch.ones((1 << 16, 3), device="cuda")
    y = torch.zeros_like(x)
    enc = spy.device("cuda").create_command_encoder()
    mc.scale_into.append_to(enc, x, 3.0, y)
    assert enc._torch_index == 0
    cb = enc.finish()
    big = torch.rand((4096, 4096), device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        for k in range(3):
            big = big @ big  # keeps the side stream busy
            big = big / big.abs().max()
            x.fill_(k + 5)  # written by torch after the matmuls, before the submit
            cb.submit()
            y.add_(1)  # torch after the submit: sees y = 3 x
            assert torch.all(y == 3 * (k + 5) + 1).item()

"""torch interop: zero-copy in/out on CPU and CUDA, stream ordering, autograd, the slangtorch
pattern. Skipped without torch; run on a GPU machine (NB_REQUIRE_CUDA=1 make test)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import nabla  # noqa: E402
from nbtest import devices, module  # noqa: E402


def tdevices():
    """(nabla module device, torch device) pairs."""
    out = [("cpu", "cpu")]
    if "cuda" in devices():
        assert torch.cuda.is_available(), "nabla sees CUDA but torch does not"
        out.append(("cuda", "cuda"))
    return out


def test_torch_in_torch_out_same_device_zero_copy():
    for nd, td in tdevices():
        m = module(nd)
        a = torch.arange(6, dtype=torch.float32, device=td).reshape(2, 3)
        y = m.add(a, 1.0)
        assert isinstance(y, torch.Tensor) and y.device == a.device and y.dtype == torch.float32
        assert torch.equal(y, a + 1)
        # inout written in place through torch's memory
        z = torch.zeros(3, device=td)
        m.bump(z, 2.0)
        assert z.tolist() == [2, 2, 2]
        out = torch.zeros(2, 3, device=td)
        assert m.add(a, a, _result=out) is out and torch.equal(out, 2 * a)
        assert isinstance(m.add(a, 1.0, _result="numpy"), np.ndarray)
        t = m.add(a, 1.0, _result="tensor")
        assert isinstance(t, nabla.Tensor) and t.to_numpy().tolist() == (a + 1).tolist()
        # numpy in, torch out on request
        yt = m.add(np.ones(2, np.float32), 1.0, _result="torch")
        assert isinstance(yt, torch.Tensor) and yt.tolist() == [2, 2]
        for dt in (torch.float64, torch.int32, torch.int64, torch.float16):
            assert m.add(torch.ones(2, dtype=dt, device=td), 1.0).tolist() == [2, 2]
        assert m.neg(torch.tensor([True, False], device=td)).tolist() == [False, True]


def test_torch_cpu_tensor_on_cuda_module_and_back():
    if "cuda" not in devices():
        pytest.skip("no CUDA")
    m = module("cuda")
    a = torch.arange(4, dtype=torch.float32)
    y = m.add(a, 1.0)  # staged to the GPU and back: the result follows the input (cpu)
    assert y.device.type == "cpu" and y.tolist() == [1, 2, 3, 4]
    z = torch.zeros(3)
    m.bump(z, 1.0)
    assert z.tolist() == [1, 1, 1]


def test_torch_noncontiguous_and_stride0():
    for nd, td in tdevices():
        m = module(nd)
        base = torch.arange(24, dtype=torch.float32, device=td).reshape(4, 6)
        for x in (base[:, ::2], base.t(), torch.tensor(3.0, device=td).expand(4, 5),
                  torch.arange(5.0, device=td).expand(3, 5)):
            assert torch.equal(m.add(x, 1.0), x + 1)
        w = torch.zeros(1, device=td)
        with pytest.raises(nabla.LayoutError, match="stride 0"):
            m.add(base, 1.0, _result=w.expand(4, 6))
        with pytest.raises(nabla.LayoutError, match="stride 0"):
            m.bump(w.expand(3), 1.0)
        assert w.tolist() == [0]
        # strided output written through its strides
        big = torch.zeros(4, 12, device=td)
        m.add(base, 1.0, _result=big[:, ::2])
        assert torch.equal(big[:, ::2], base + 1) and big[:, 1::2].abs().sum() == 0


def test_torch_errors_are_exceptions():
    m = module("cpu")
    with pytest.raises(nabla.ShapeError):
        m.add(torch.zeros(3), torch.zeros(4))
    with pytest.raises(nabla.DtypeError, match="not supported"):
        m.add(torch.zeros(3, dtype=torch.int8), 1.0)
    out = torch.full((3,), 42.0)
    with pytest.raises(nabla.ShapeError):
        m.add(torch.zeros(3), torch.zeros(4), _result=out)
    assert out.tolist() == [42, 42, 42]


def test_autograd_records_and_backward_runs_bwds():
    for nd, td in tdevices():
        m = module(nd)
        x = torch.arange(5, dtype=torch.float32, device=td, requires_grad=True)
        y = m.square(x)
        assert y.requires_grad and y.grad_fn is not None
        y.sum().backward()
        assert x.grad.tolist() == [0, 2, 4, 6, 8]
        # broadcast inputs: gradients come out with the input's shape (reduced)
        xs = torch.arange(4, dtype=torch.float32, device=td)
        a = torch.tensor([3.0], device=td, requires_grad=True)
        b = torch.tensor(0.5, device=td, requires_grad=True)
        (m.axpb(xs, a, b) ** 2).sum().backward()
        ref_a = torch.tensor([3.0], device=td, requires_grad=True)
        ref_b = torch.tensor(0.5, device=td, requires_grad=True)
        ((ref_a * xs + ref_b) ** 2).sum().backward()
        assert a.grad.shape == a.shape and b.grad.shape == b.shape
        assert torch.allclose(a.grad, ref_a.grad) and torch.allclose(b.grad, ref_b.grad)
        # keyword arguments, f64, a chain with torch ops
        p = torch.linspace(-1, 1, 7, dtype=torch.float64, device=td, requires_grad=True)
        q = torch.linspace(0, 2, 7, dtype=torch.float64, device=td, requires_grad=True)
        (torch.sin(m.mul(a=p, b=q)) * 2).sum().backward()
        assert torch.allclose(p.grad, (2 * torch.cos(p * q) * q).detach())
        assert torch.allclose(q.grad, (2 * torch.cos(p * q) * p).detach())
        # gradcheck in double precision
        u = torch.rand(6, dtype=torch.float64, device=td, requires_grad=True)
        v = torch.rand(6, dtype=torch.float64, device=td, requires_grad=True)
        assert torch.autograd.gradcheck(lambda u, v: m.dmuls(u, v), (u, v))
        # no_grad: nothing recorded
        with torch.no_grad():
            assert not m.square(x).requires_grad
        # a function without [Differentiable] records nothing (torch says so at backward)
        assert not m.add(x, 1.0).requires_grad


def test_slangtorch_pattern_explicit_autograd_function():
    for nd, td in tdevices():
        m = module(nd)

        class Square(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return m.square(x)

            @staticmethod
            def backward(ctx, dy):
                (x,) = ctx.saved_tensors
                dx = torch.zeros_like(x)
                m.square.bwds(x, _grads={"x": dx}, _dout=dy)
                return dx

        x = torch.tensor([1.0, 2.0, 3.0], device=td, requires_grad=True)
        y = Square.apply(x)
        y.backward(torch.ones_like(y))
        assert x.grad.tolist() == [2, 4, 6]


def test_cuda_streams_are_ordered():
    if "cuda" not in devices():
        pytest.skip("no CUDA")
    m = module("cuda")
    n = 1 << 24
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(20):
            x = torch.ones(n, device="cuda")
            if hasattr(torch.cuda, "_sleep"):  # a long kernel ahead of the fill on torch's stream
                torch.cuda._sleep(2_000_000)
            else:
                x.mul_(1.0).add_(0.0).mul_(1.0)
            x.fill_(3.0)
            y = m.square(x)  # nabla's stream must wait for the fill
            y.mul_(2.0)  # torch's stream must wait for nabla's kernel
            assert float(y.sum()) == 18.0 * n


def test_torch_call_loop_no_leak():
    for nd, td in tdevices():
        m = module(nd)
        x = torch.ones(1024, device=td)
        for _ in range(3000):
            m.square(x)
        if td == "cuda":
            torch.cuda.synchronize()


def test_first_call_in_a_fresh_process_records_autograd():
    import subprocess
    import sys

    code = ("import torch, nabla\n"
            "m = nabla.load_module_from_source('[Differentiable] float sq(float x) { return x * x; }',"
            " device='cpu')\n"
            "x = torch.ones(3, requires_grad=True)\n"
            "y = m.sq(x)\n"
            "assert y.grad_fn is not None, 'not recorded'\n"
            "y.sum().backward()\n"
            "assert x.grad.tolist() == [2, 2, 2]\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_dlpack_both_ways():
    for nd, td in tdevices():
        a = torch.arange(6, dtype=torch.float32, device=td).reshape(2, 3)
        t = nabla.Tensor.from_dlpack(a)  # zero-copy view of torch memory
        assert t.shape == (2, 3) and t.device.kind == td
        a[0, 0] = 42
        if td == "cuda":  # a view of torch memory: torch's pending write is torch's to finish
            torch.cuda.synchronize()
        assert t.to_numpy()[0, 0] == 42
        u = nabla.Tensor.from_numpy(np.arange(4, dtype=np.float32), device=nd)
        b = torch.from_dlpack(u)  # zero-copy view of nabla memory
        assert b.device.type == td and b.tolist() == [0, 1, 2, 3]
        m = module(nd)
        assert m.add(t, 1.0).to_numpy()[0, 0] == 43

"""nabla.nn with torch: zero-copy tensors and parameter views, torch.autograd through FusedMLP and
the encodings (against the explicit backward and a float64 torch reference), torch optimizers,
errors; CPU here, CUDA on a GPU machine (NB_REQUIRE_CUDA=1 make test). Skipped without torch."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
torch.manual_seed(0)

import nabla  # noqa: E402
import nabla.nn as nn  # noqa: E402
from nbtest import devices  # noqa: E402


def tdevs():
    d = ["cpu"]
    if "cuda" in devices():
        assert torch.cuda.is_available(), "nabla sees CUDA but torch does not"
        d.append("cuda")
    return d


def mk_mlp(dev):
    """16 -> 64 x 2 -> 1, relu, bias: the one MLP configuration of the CUDA tests (each one is an
    NVRTC compile of a few seconds on a fresh machine)."""
    mlp = nn.FusedMLP(16, 1, width=64, hidden_layers=2, activation="relu", bias=True, device=dev, seed=3)
    v = mlp.params.to_numpy()
    for l in range(mlp.n_layers):
        _, b, rows, _ = mlp.layer_info(l)
        v[b:b + rows] = np.linspace(-0.3, 0.3, rows)
    mlp.load_params(v)
    return mlp


def torch_ref(mlp, x64):
    """The same network in float64 torch (no f16 rounding) for gradient checks."""
    p = torch.tensor(mlp.params.to_numpy(), dtype=torch.float64, requires_grad=True)
    h = x64
    for l in range(mlp.n_layers):
        w, b, r, c = mlp.layer_info(l)
        z = h @ p[w:w + r * c].reshape(r, c).T
        if b >= 0:
            z = z + p[b:b + r]
        h = torch.relu(z) if l < mlp.n_layers - 1 else z
    return h, p


def test_params_are_zero_copy_torch_views():
    for dev in tdevs():
        mlp = mk_mlp(dev)
        tp = mlp.torch_params
        assert isinstance(tp, torch.nn.Parameter) and tp.requires_grad
        assert tp.data_ptr() == mlp.params.data_ptr and tp.numel() == mlp.n_params
        assert tp.device.type == dev
        with torch.no_grad():
            tp.mul_(0.5)  # torch writes are nabla's parameters
        if dev == "cuda":
            torch.cuda.synchronize()  # torch's stream vs nabla's: see docs/PYTHON.md
        np.testing.assert_array_equal(mlp.params.to_numpy(), tp.detach().cpu().numpy())
        assert mlp.torch_params is tp  # created once


def test_mlp_torch_autograd_matches_explicit_and_float64_reference():
    torch.manual_seed(0)
    for dev in tdevs():
        mlp = mk_mlp(dev)
        x = torch.rand(16, 16, device=dev, requires_grad=True)
        t = torch.rand(16, 1, device=dev)
        y = mlp(x)
        assert isinstance(y, torch.Tensor) and y.device.type == dev and y.requires_grad
        loss = ((y - t) ** 2).mean()
        loss.backward()
        # explicit API on the same data
        y2 = mlp.forward(x.detach())
        dx2 = mlp.backward(2 * (y2 - t) / y2.numel())
        assert torch.allclose(y, y2) and torch.allclose(x.grad, dx2, rtol=1e-5, atol=1e-7)
        assert torch.allclose(mlp.torch_params.grad, mlp._tg, rtol=1e-5, atol=1e-8)
        # float64 torch reference: nabla rounds operands to f16, which moves a few relu
        # pre-activations near 0 across the kink, so most entries agree to 1%, all to 10%
        xr = x.detach().double().cpu().requires_grad_()
        yr, pr = torch_ref(mlp, xr)
        ((yr - t.double().cpu()) ** 2).mean().backward()
        gp, gx = mlp.torch_params.grad.double().cpu(), x.grad.double().cpu()
        for got, ref in ((gp, pr.grad), (gx, xr.grad)):
            err = (got - ref).abs() / ref.abs().max()
            assert err.max() < 0.1 and (err < 1e-2).double().mean() > 0.95, (err.max(), (err < 1e-2).double().mean())


def test_backward_of_an_earlier_forward_recomputes():
    mlp = mk_mlp("cpu")
    x1 = torch.rand(8, 16, requires_grad=True)
    x2 = torch.rand(4, 16, requires_grad=True)
    y1 = mlp(x1)
    y2 = mlp(x2)  # the MLP now holds x2's activations
    (y1.sum() + 2 * y2.sum()).backward()
    ref = mk_mlp("cpu")
    ref.forward(x1.detach())
    g1 = ref.backward(torch.ones(8, 1))
    p1 = ref._c.torch_grads().clone()
    ref.forward(x2.detach())
    g2 = ref.backward(torch.full((4, 1), 2.0))
    p2 = ref._c.torch_grads().clone()
    assert torch.allclose(x1.grad, g1) and torch.allclose(x2.grad, g2)
    assert torch.allclose(mlp.torch_params.grad, p1 + p2, rtol=1e-5, atol=1e-7)


def test_no_grad_is_inference_and_dtypes():
    mlp = mk_mlp("cpu")
    x = torch.rand(6, 16)
    with torch.no_grad():
        y = mlp(x)
    assert not y.requires_grad and torch.allclose(y, mlp.inference(x))
    assert mlp(x.half()).dtype == torch.float32  # f16 inputs accepted
    xh = x.half().requires_grad_()
    mlp(xh).sum().backward()
    assert xh.grad.dtype == torch.float16
    with pytest.raises(nabla.DtypeError, match="no hidden casts"):
        mlp(x.double())
    with pytest.raises(nabla.ShapeError):
        mlp(torch.rand(6, 4))
    y = mlp(x.t().contiguous().t())  # non-contiguous torch input: made contiguous
    assert y.shape == (6, 1) and torch.allclose(y, mlp.inference(x))


def test_encodings_torch_autograd():
    for dev in tdevs():
        enc = nn.HashGrid(2, n_levels=4, n_features=2, log2_table_size=10, base_resolution=4, device=dev)
        enc.load_params(np.random.default_rng(0).uniform(-1, 1, enc.n_params).astype(np.float32))
        x = torch.rand(32, 2, device=dev, requires_grad=True)
        f = enc(x)
        w = torch.rand_like(f)
        (f * w).sum().backward()
        enc.zero_grad()
        dx = enc.backward(w, need_dx=True, x=x.detach())
        assert torch.allclose(x.grad, dx, rtol=1e-4, atol=1e-5)
        assert torch.allclose(enc.torch_params.grad, enc._c.torch_grads(), rtol=1e-4, atol=1e-6)
        fq = nn.Frequency(2, 3, device=dev)
        x2 = torch.rand(4, 2, device=dev, requires_grad=True)
        fq(x2).sum().backward()
        a = x2.detach()[:, :, None] * (2.0 ** torch.arange(3, device=dev) * np.pi)
        ref = (torch.cos(a) * (2.0 ** torch.arange(3, device=dev) * np.pi)
               - torch.sin(a) * (2.0 ** torch.arange(3, device=dev) * np.pi)).sum(-1)
        assert torch.allclose(x2.grad, ref, rtol=1e-3, atol=1e-3)


def test_torch_training_loop_with_torch_and_nabla_optimizers():
    for dev in tdevs():
        for which in ("torch", "nabla"):
            enc = nn.HashGrid(2, n_levels=8, n_features=2, log2_table_size=12, base_resolution=4,
                              per_level_scale=1.5, device=dev)
            mlp = mk_mlp(dev)
            model = nn.Sequential(enc, mlp)
            if which == "torch":
                opt = torch.optim.Adam(model.torch_parameters(), lr=1e-2)
            else:
                opt = nn.Adam(model.torch_parameters(), lr=1e-2)
            g = torch.Generator().manual_seed(0)
            losses = []
            for step in range(120):
                x = torch.rand(512, 2, generator=g).to(dev)
                t = torch.sin(6 * x[:, :1]) * torch.cos(4 * x[:, 1:])
                loss = ((model(x) - t) ** 2).mean()
                if which == "torch":
                    opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
            assert np.mean(losses[-10:]) < 0.3 * np.mean(losses[:10]), (dev, which, losses[::20])


def test_loss_and_tape_with_torch_tensors():
    for dev in tdevs():
        y, t = torch.rand(4, 3, device=dev), torch.rand(4, 3, device=dev)
        v, d = nn.loss("l2", y, t)
        assert isinstance(d, torch.Tensor) and d.device.type == dev
        assert abs(v - ((y - t) ** 2).mean().item()) < 1e-6
        assert torch.allclose(d, 2 * (y - t) / 12)
        tape = nn.Tape(dev)
        w = tape.param("w", (3, 4), init=0.5)
        x = tape.input(torch.rand(2, 4, device=dev))  # a copy into the tape
        loss = tape.mse(tape.linear(x, w), tape.input(torch.zeros(2, 3, device=dev)))
        tape.backward(loss)
        host = tape.read_grads()  # waits for the device
        tp, tg = tape.torch_params(), tape.torch_grads()
        assert tp.device.type == dev and tp.numel() == 12
        assert torch.allclose(tg.cpu(), torch.from_numpy(host))
        g = tape.grad(w, result="torch")
        assert isinstance(g, torch.Tensor) and g.shape == (3, 4)


def test_cuda_device_mismatch_and_zero_copy():
    if "cuda" not in devices():
        pytest.skip("no CUDA device")
    mlp = mk_mlp("cuda")
    with pytest.raises(nabla.DeviceError, match="torch tensor on cpu"):
        mlp(torch.rand(4, 16))
    cpu = mk_mlp("cpu")
    with pytest.raises(nabla.DeviceError, match="on cuda:0"):
        cpu(torch.rand(4, 16, device="cuda"))
    x = torch.rand(4096, 16, device="cuda")
    y = mlp.inference(x)
    assert y.device.type == "cuda"
    yc = cpu.inference(x.cpu())
    assert torch.allclose(y.cpu(), yc, rtol=2e-3, atol=2e-3)
    # the result is nabla memory handed to torch: later torch work on its stream sees it
    z = (y * 2).sum().item()
    assert abs(z - 2 * yc.sum().item()) < 1e-2 * abs(z) + 1e-3

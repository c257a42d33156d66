"""nabla.nn: FusedMLP, encodings, Adam, losses against numpy references (CPU), the same on CUDA
against the CPU (skipped without a GPU; NB_REQUIRE_CUDA=1 makes that a failure), bad input."""
import sys

import numpy as np
import pytest

import nabla
import nabla.nn as nn
from nbtest import devices

ACT = {
    "none": lambda z: z,
    "relu": lambda z: np.maximum(z, 0),
    "leaky_relu": lambda z: np.where(z > 0, z, 0.01 * z),
    "silu": lambda z: z / (1 + np.exp(-z)),
    "sigmoid": lambda z: 1 / (1 + np.exp(-z)),
    "tanh": np.tanh,
}


def rnd(*shape, seed=0, lo=-1.0, hi=1.0):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(np.float32)


def mlp_layers(mlp):
    return [mlp.weights(l) for l in range(mlp.n_layers)]


def mlp_ref(mlp, x, rounding=True, dtype=np.float32):
    """numpy forward: operands rounded to f16 (as nabla does) when rounding, sums in dtype."""
    c = mlp.config
    r = (lambda a: a.astype(np.float16).astype(dtype)) if rounding else (lambda a: a.astype(dtype))
    h = r(x)
    layers = mlp_layers(mlp)
    for l, (w, b) in enumerate(layers):
        z = h @ r(w).T
        if b is not None:
            z = z + b
        if l < len(layers) - 1:
            h = r(ACT[c["activation"]](z))
        else:
            return ACT[c["output_activation"]](z)


def test_import_nabla_nn_imports_neither_numpy_nor_torch():
    import subprocess

    code = "import sys, nabla, nabla.nn; print('numpy' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("act,oact,bias", [("relu", "none", False), ("silu", "sigmoid", True),
                                           ("tanh", "relu", True), ("leaky_relu", "tanh", False)])
def test_mlp_forward_matches_numpy(act, oact, bias):
    for width, hidden, n_in, n_out, B in [(16, 1, 3, 2, 5), (32, 2, 19, 3, 33), (64, 3, 8, 17, 7),
                                          (128, 1, 5, 4, 2)]:
        mlp = nn.FusedMLP(n_in, n_out, width=width, hidden_layers=hidden, activation=act,
                          output_activation=oact, bias=bias, device="cpu", seed=width)
        if bias:  # biases start at zero: give them values
            p = np.asarray(mlp.params)
            for l in range(mlp.n_layers):
                _, b, rows, _ = mlp.layer_info(l)
                p[b:b + rows] = rnd(rows, seed=l) * 0.5
        x = rnd(B, n_in, seed=B)
        y = mlp(x)
        assert isinstance(y, np.ndarray) and y.shape == (B, n_out) and y.dtype == np.float32
        np.testing.assert_allclose(y, mlp_ref(mlp, x), rtol=2e-3, atol=2e-3)  # f16 ulps
        np.testing.assert_allclose(mlp.inference(x), y, rtol=0, atol=0)


def bf16(a):
    """round-to-nearest-even to bfloat16, as float32"""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def test_mlp_bf16_compute_matches_numpy():
    mlp = nn.FusedMLP(6, 2, width=32, hidden_layers=2, activation="silu", compute="bf16", device="cpu")
    assert mlp.config["compute"] == "bf16"
    x = rnd(9, 6, seed=1)
    h = bf16(x)
    layers = mlp_layers(mlp)
    for l, (w, _) in enumerate(layers):
        z = h @ bf16(w).T
        h = bf16(ACT["silu"](z)) if l < len(layers) - 1 else z
    np.testing.assert_allclose(mlp(x), h, rtol=1e-2, atol=5e-3)  # bf16 ulps


def test_mlp_leading_dims_lists_f64_and_tensor_inputs():
    mlp = nn.FusedMLP(4, 3, width=16, hidden_layers=1, device="cpu")
    x = rnd(2, 5, 4)
    y = mlp(x)
    assert y.shape == (2, 5, 3)
    np.testing.assert_allclose(y.reshape(10, 3), mlp.inference(x.reshape(10, 4)), rtol=1e-6)
    np.testing.assert_allclose(mlp.inference(x.astype(np.float64)), y, rtol=1e-6)  # host f64 -> f32
    np.testing.assert_allclose(mlp.inference(x.tolist()), y, rtol=1e-6)
    np.testing.assert_allclose(mlp.inference(x[:, ::-1, :]), y[:, ::-1, :], rtol=1e-6)  # strided
    t = nabla.Tensor.from_numpy(x, "cpu")
    yt = mlp.inference(t)
    assert isinstance(yt, nabla.Tensor) and yt.shape == (2, 5, 3)
    np.testing.assert_allclose(yt.to_numpy(), y, rtol=1e-6)
    assert isinstance(mlp.inference(x, result="tensor"), nabla.Tensor)
    assert mlp.inference(x.astype(np.float16)).shape == (2, 5, 3)  # f16 inputs


def smooth_mlp(bias=True, n_in=3, n_out=2, width=16, hidden=2, out_act="none", device="cpu"):
    mlp = nn.FusedMLP(n_in, n_out, width=width, hidden_layers=hidden, activation="tanh",
                      output_activation=out_act, bias=bias, device=device, seed=7)
    if bias:
        p = np.asarray(mlp.params) if device == "cpu" else None
        vals = mlp.params.to_numpy()
        for l in range(mlp.n_layers):
            _, b, rows, _ = mlp.layer_info(l)
            vals[b:b + rows] = rnd(rows, seed=10 + l) * 0.3
        mlp.load_params(vals)
        if p is not None:
            assert np.array_equal(p, vals)
    return mlp


def np_forward(layers, x, act, out_act):
    h = x
    for l, (w, b) in enumerate(layers):
        z = h @ w.T + (b if b is not None else 0)
        h = ACT[act](z) if l < len(layers) - 1 else ACT[out_act](z)
    return h


def test_mlp_backward_matches_finite_differences():
    mlp = smooth_mlp(out_act="sigmoid")
    B = 6
    x = rnd(B, 3, seed=3)
    dy = rnd(B, 2, seed=4)
    mlp.forward(x)
    dx = mlp.backward(dy)
    g = mlp.params.grad.to_numpy()
    # finite differences of L = sum(dy * f(x)) in float64, from the f32 master weights
    p0 = mlp.params.to_numpy().astype(np.float64)
    info = [mlp.layer_info(l) for l in range(mlp.n_layers)]

    def L(p, xx):
        layers = [(p[w:w + r * c].reshape(r, c), p[b:b + r] if b >= 0 else None) for w, b, r, c in info]
        return float(np.sum(dy * np_forward(layers, xx.astype(np.float64), "tanh", "sigmoid")))

    eps = 1e-4
    fd = np.empty_like(p0)
    for i in range(p0.size):
        e = np.zeros_like(p0)
        e[i] = eps
        fd[i] = (L(p0 + e, x) - L(p0 - e, x)) / (2 * eps)
    scale = np.abs(fd).max()
    assert np.abs(g - fd).max() < 2e-2 * scale, np.abs(g - fd).max() / scale
    fdx = np.empty((B, 3))
    for i in range(B):
        for j in range(3):
            e = np.zeros((B, 3))
            e[i, j] = eps
            fdx[i, j] = (L(p0, x + e) - L(p0, x - e)) / (2 * eps)
    assert np.abs(dx - fdx).max() < 2e-2 * np.abs(fdx).max()
    # grads are overwritten, not accumulated; need_dx=False gives None
    assert mlp.backward(dy, need_dx=False) is None
    np.testing.assert_allclose(mlp.params.grad.to_numpy(), g, rtol=1e-6)


def np_adam(p, g, m, v, t, lr, b1, b2, eps, wd, decoupled):
    if not decoupled:
        g = g + wd * p
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    if decoupled:
        p = p - lr * wd * p
    p = p - (lr / (1 - b1 ** t)) * m / (np.sqrt(v) / np.sqrt(1 - b2 ** t) + eps)
    return p, m, v


@pytest.mark.parametrize("decoupled,wd", [(False, 0.0), (False, 0.1), (True, 0.05)])
def test_adam_matches_numpy(decoupled, wd):
    for dev in devices():
        a = nabla.Tensor.from_numpy(rnd(37, seed=1), dev)
        b = nabla.Tensor.from_numpy(rnd(5, seed=2), dev)
        a.grad = nabla.Tensor.zeros((37,), device=dev)
        b.grad = nabla.Tensor.zeros((5,), device=dev)
        cls = nn.AdamW if decoupled else nn.Adam
        opt = cls([a, b], lr=0.01, weight_decay=wd) if decoupled else cls([a, b], lr=0.01, weight_decay=wd)
        p = np.concatenate([a.to_numpy(), b.to_numpy()]).astype(np.float64)
        m = np.zeros_like(p)
        v = np.zeros_like(p)
        for t in range(1, 5):
            g = rnd(42, seed=10 + t)
            a.grad.copy_from(nabla.Tensor.from_numpy(g[:37], dev))
            b.grad.copy_from(nabla.Tensor.from_numpy(g[37:], dev))
            opt.step()
            p, m, v = np_adam(p, g.astype(np.float64), m, v, t, 0.01, 0.9, 0.999, 1e-8, wd, decoupled)
            got = np.concatenate([a.to_numpy(), b.to_numpy()])
            np.testing.assert_allclose(got, p, rtol=1e-5, atol=1e-6)
            assert not a.grad.to_numpy().any()  # zeroed after the step
        assert opt.steps == 4
        opt.lr = 0.5
        assert opt.lr == 0.5


def test_adam_numpy_params_in_place_on_cpu():
    p = rnd(10)
    g = rnd(10, seed=5)
    opt = nn.Adam([nabla.Tensor.from_numpy(p, "cpu")], lr=0.1)  # a copy: not updated in place
    ref, _, _ = np_adam(p.astype(np.float64), g.astype(np.float64), 0, 0, 1, 0.1, 0.9, 0.999, 1e-8, 0, False)
    opt._c.step([p], [g.copy()], True)  # raw numpy arrays are updated in place on the CPU
    np.testing.assert_allclose(p, ref, rtol=1e-5)


@pytest.mark.parametrize("kind", nn.LOSSES)
def test_losses_match_numpy(kind):
    for dev in devices():
        y = rnd(4, 6, seed=1)
        t = rnd(4, 6, seed=2)
        if kind == "l2":
            ref, d = (y - t) ** 2, 2 * (y - t)
        elif kind == "l1":
            ref, d = np.abs(y - t), np.sign(y - t)
        else:
            den = y * y + 0.01
            ref, d = (y - t) ** 2 / den, 2 * (y - t) / den
        yt, tt = nabla.Tensor.from_numpy(y, dev), nabla.Tensor.from_numpy(t, dev)
        val, dp = nn.loss(kind, yt, tt)
        assert isinstance(dp, nabla.Tensor) and dp.device.name.startswith(dev)
        np.testing.assert_allclose(val, ref.mean(), rtol=1e-5)
        np.testing.assert_allclose(dp.to_numpy(), d / y.size, rtol=1e-5, atol=1e-7)
        L = nn.Loss(kind)
        L(yt, tt)
        L(yt, tt)
        np.testing.assert_allclose(L.value(), ref.mean(), rtol=1e-5)
        assert np.isnan(L.value())


def grid_ref(enc, x, params):
    """numpy forward of a dense / hash grid from its level_info."""
    D, F = enc.n_input_dims, enc.n_output_dims // 1
    levels = []
    l = 0
    while True:
        try:
            levels.append(enc.level_info(l))
        except nabla.NablaError:
            break
        l += 1
    F = enc.n_output_dims // len(levels)
    out = np.zeros((x.shape[0], len(levels) * F))
    xc = np.clip(x, 0, 1)
    for l, lv in enumerate(levels):
        side = lv["side"]
        cells, fr = [], []
        for d in range(D):
            pos = xc[:, d] * (side[d] - 1)
            c = np.minimum(np.floor(pos), side[d] - 2)
            cells.append(c.astype(np.uint64))
            fr.append(pos - c)
        for corner in range(1 << D):
            g = [cells[d] + ((corner >> d) & 1) for d in range(D)]
            w = np.ones(x.shape[0])
            for d in range(D):
                w *= fr[d] if (corner >> d) & 1 else 1 - fr[d]
            if lv["hashed"]:
                h = g[0] ^ ((g[1] * 2654435761) & 0xFFFFFFFF)
                if D == 3:
                    h ^= (g[2] * 805459861) & 0xFFFFFFFF
                idx = h & (lv["entries"] - 1)
            else:
                idx = g[0] + side[0] * g[1] + (side[0] * side[1] * g[2] if D == 3 else 0)
            rows = params[lv["offset"] + idx.astype(np.int64)[:, None] * F + np.arange(F)]
            out[:, l * F:(l + 1) * F] += w[:, None] * rows
    return out


def make_encodings(dev):
    return [
        nn.HashGrid(2, n_levels=5, n_features=2, log2_table_size=8, base_resolution=4, per_level_scale=2.0, device=dev),
        nn.HashGrid(3, n_levels=3, n_features=4, log2_table_size=10, base_resolution=3, per_level_scale=1.7, device=dev),
        nn.DenseGrid(2, resolution=(5, 7), n_features=3, device=dev),
        nn.DenseGrid(3, resolution=4, n_features=1, device=dev),
    ]


def test_grid_encodings_match_numpy_and_gradients():
    for enc in make_encodings("cpu"):
        enc.load_params(rnd(enc.n_params, seed=3))  # larger than the 1e-4 init
        p = enc.params.to_numpy().astype(np.float64)
        x = rnd(50, enc.n_input_dims, seed=4, lo=-0.1, hi=1.1)
        f = enc(x)
        assert f.shape == (50, enc.n_output_dims)
        np.testing.assert_allclose(f, grid_ref(enc, x.astype(np.float64), p), rtol=1e-4, atol=1e-5)
        # params gradient: features are linear in the params -> exact check by linearity
        df = rnd(50, enc.n_output_dims, seed=5)
        enc.zero_grad()
        dx = enc.backward(df, need_dx=True)
        g = enc.params.grad.to_numpy()
        for i in np.random.default_rng(0).choice(enc.n_params, 20, replace=False):
            e = np.zeros_like(p)
            e[i] = 1
            assert abs(g[i] - np.sum(df * grid_ref(enc, x.astype(np.float64), e))) < 1e-4
        enc.backward(df)  # accumulates
        np.testing.assert_allclose(enc.params.grad.to_numpy(), 2 * g, rtol=1e-5, atol=1e-7)
        # dx against finite differences (inside the cells, away from clamping)
        xi = rnd(8, enc.n_input_dims, seed=6, lo=0.1, hi=0.9).astype(np.float64)
        df8 = df[:8]
        enc.forward(xi.astype(np.float32))
        dx = enc.backward(df8, need_dx=True)
        eps = 1e-4
        for d in range(enc.n_input_dims):
            e = np.zeros_like(xi)
            e[:, d] = eps
            fd = np.sum(df8 * (grid_ref(enc, xi + e, p) - grid_ref(enc, xi - e, p)), axis=1) / (2 * eps)
            np.testing.assert_allclose(dx[:, d], fd, rtol=2e-2, atol=2e-3)


def test_frequency_encoding():
    enc = nn.Frequency(n_dims=3, n_frequencies=4, device="cpu")
    assert enc.n_params == 0 and enc.n_output_dims == 24 and enc.parameters() == []
    x = rnd(9, 3, seed=2, lo=-2, hi=2)
    f = enc(x)
    k = 2.0 ** np.arange(4) * np.pi
    a = x[:, :, None].astype(np.float64) * k  # [B, d, k]
    ref = np.stack([np.sin(a), np.cos(a)], -1).reshape(9, 24)
    np.testing.assert_allclose(f, ref, atol=2e-5)
    df = rnd(9, 24, seed=3)
    dx = enc.backward(df, need_dx=True)
    dref = (df.reshape(9, 3, 4, 2) * np.stack([np.cos(a) * k, -np.sin(a) * k], -1)).sum((2, 3))
    np.testing.assert_allclose(dx, dref, rtol=1e-4, atol=1e-4)


def test_training_loop_loss_falls():
    """HashGrid + FusedMLP on a smooth 2-D function, nabla.nn only (CPU)."""
    enc = nn.HashGrid(2, n_levels=8, n_features=2, log2_table_size=12, base_resolution=4, per_level_scale=1.5, device="cpu")
    mlp = nn.FusedMLP(enc.n_output_dims, 1, width=32, hidden_layers=1, device="cpu")
    model = nn.Sequential(enc, mlp)
    opt = nn.Adam(model, lr=1e-2)
    L = nn.Loss("l2")
    rng = np.random.default_rng(0)
    first = None
    for step in range(150):
        x = rng.random((256, 2), dtype=np.float32)
        t = (np.sin(6 * x[:, :1]) * np.cos(4 * x[:, 1:])).astype(np.float32)
        model.backward(L(model(x), t))
        opt.step()
        if step % 25 == 24:
            v = L.value()
            first = v if first is None else first
    assert v < 0.3 * first, (first, v)


def test_bad_input_errors():
    with pytest.raises(nabla.UnsupportedError, match="width"):
        nn.FusedMLP(4, 3, width=48)
    with pytest.raises(nabla.ArgumentError, match="activation"):
        nn.FusedMLP(4, 3, width=16, activation="gelu")
    with pytest.raises(nabla.NablaError, match="n_in"):
        nn.FusedMLP(0, 3, width=16)
    mlp = nn.FusedMLP(4, 3, width=16, device="cpu")
    with pytest.raises(nabla.ShapeError, match=r"last dim must be 4"):
        mlp(np.zeros((5, 3), np.float32))
    with pytest.raises(nabla.ArgumentError, match="no training forward"):
        nn.FusedMLP(4, 3, width=16, device="cpu").backward(np.zeros((5, 3), np.float32))
    mlp(np.zeros((5, 4), np.float32))
    with pytest.raises(nabla.ShapeError, match="rows"):
        mlp.backward(np.zeros((6, 3), np.float32))
    with pytest.raises(nabla.ShapeError, match="last dim must be 3"):
        mlp.backward(np.zeros((5, 4), np.float32))
    with pytest.raises(nabla.DtypeError, match="expected f32"):
        mlp(nabla.Tensor.zeros((5, 4), dtype="f64", device="cpu"))
    with pytest.raises(nabla.DtypeError, match="bool"):
        mlp(np.zeros((5, 4), bool))
    with pytest.raises(TypeError, match="must be an array"):
        mlp(3.0)
    with pytest.raises(TypeError):
        mlp("x")
    with pytest.raises(nabla.ArgumentError, match="result"):
        mlp(np.zeros((5, 4), np.float32), result="list")
    with pytest.raises(nabla.NablaError, match="n_levels|log2_table_size"):
        nn.HashGrid(2, n_levels=40)
    with pytest.raises(nabla.ArgumentError, match="resolution has 3 entries"):
        nn.DenseGrid(2, resolution=(4, 4, 4))
    with pytest.raises(nabla.ArgumentError, match="loss"):
        nn.Loss("huber")
    with pytest.raises(nabla.ShapeError):
        nn.loss("l2", np.zeros(4, np.float32), np.zeros(5, np.float32))
    a = nabla.Tensor.zeros((4,), device="cpu")
    with pytest.raises(nabla.ArgumentError, match="no gradient"):
        nn.Adam([a]).step()
    a.grad = nabla.Tensor.zeros((5,), device="cpu")
    with pytest.raises(nabla.ShapeError, match="elements"):
        nn.Adam([a]).step()
    with pytest.raises(nabla.ArgumentError, match="at most|1 to 8"):
        ps = [nabla.Tensor.zeros((2,), device="cpu").with_grads() for _ in range(9)]
        nn.Adam(ps).step()


def cuda_config_mlp(dev, seed=7):
    """The one MLP configuration the CUDA tests use (each configuration is an NVRTC compile of a
    few seconds on a fresh machine): 16 -> 64 x 2 -> 1, relu, bias."""
    return nn.FusedMLP(16, 1, width=64, hidden_layers=2, activation="relu", bias=True, device=dev, seed=seed)


def test_cuda_matches_cpu():
    if "cuda" not in devices():
        pytest.skip("no CUDA device")
    cpu, gpu = cuda_config_mlp("cpu"), cuda_config_mlp("cuda", seed=1)
    v = cpu.params.to_numpy()
    for l in range(cpu.n_layers):
        _, b, rows, _ = cpu.layer_info(l)
        v[b:b + rows] = rnd(rows, seed=l) * 0.2
    cpu.load_params(v)
    gpu.load_params(v)
    x = rnd(1000, 16, seed=1)
    dy = rnd(1000, 1, seed=2)
    yc, yg = cpu(x), gpu(x)  # numpy in -> numpy out from the GPU too
    assert isinstance(yg, np.ndarray)
    np.testing.assert_allclose(yg, yc, rtol=2e-3, atol=2e-3)
    dxc, dxg = cpu.backward(dy), gpu.backward(dy)
    np.testing.assert_allclose(dxg, dxc, rtol=1e-2, atol=1e-3)
    gc, gg = cpu.params.grad.to_numpy(), gpu.params.grad.to_numpy()
    assert np.abs(gg - gc).max() < 1e-2 * np.abs(gc).max()
    # nabla.Tensor on the GPU in -> nabla.Tensor on the GPU out
    xt = nabla.Tensor.from_numpy(x, "cuda")
    yt = gpu.inference(xt)
    assert isinstance(yt, nabla.Tensor) and yt.device.kind == "cuda"
    np.testing.assert_allclose(yt.to_numpy(), yc, rtol=2e-3, atol=2e-3)
    with pytest.raises(nabla.DeviceError, match="move it"):
        cpu(xt)
    for ec, eg in zip(make_encodings("cpu"), make_encodings("cuda")):
        eg.load_params(ec.params.to_numpy())
        x = rnd(500, ec.n_input_dims, seed=3)
        np.testing.assert_allclose(eg(x), ec(x), rtol=1e-4, atol=1e-5)
        df = rnd(500, ec.n_output_dims, seed=4)
        ec.zero_grad()
        eg.zero_grad()
        np.testing.assert_allclose(eg.backward(df, need_dx=True), ec.backward(df, need_dx=True), rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(eg.params.grad.to_numpy(), ec.params.grad.to_numpy(), rtol=1e-3, atol=1e-4)
    # Adam on CUDA refuses host arrays it cannot update in place
    with pytest.raises(nabla.DeviceError, match="host memory"):
        nn.Adam([nabla.Tensor.zeros((3,), device="cuda").with_grads()])._c.step([np.zeros(3, np.float32)],
                                                                                 [np.zeros(3, np.float32)])


def test_cuda_training_loop():
    if "cuda" not in devices():
        pytest.skip("no CUDA device")
    enc = nn.HashGrid(2, n_levels=8, n_features=2, log2_table_size=14, base_resolution=4, per_level_scale=1.5, device="cuda")
    mlp = cuda_config_mlp("cuda")
    model = nn.Sequential(enc, mlp)
    opt = nn.Adam(model, lr=1e-2)
    L = nn.Loss("l2")
    rng = np.random.default_rng(0)
    xs = rng.random((4096, 2), dtype=np.float32)
    ts = (np.sin(6 * xs[:, :1]) * np.cos(4 * xs[:, 1:])).astype(np.float32)
    x, t = nabla.Tensor.from_numpy(xs, "cuda"), nabla.Tensor.from_numpy(ts, "cuda")
    vals = []
    for step in range(200):
        model.backward(L(model(x), t))
        opt.step()
        if step % 50 == 49:
            vals.append(L.value())
    assert vals[-1] < 0.2 * vals[0], vals


def test_fit_example_runs():
    import os
    import subprocess

    from nbtest import ROOT

    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", "fit_mlp_nn.py"),
                        "--device", "cpu", "--steps", "10", "--size", "32", "--batch", "1024"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PSNR" in r.stdout


def test_image_helpers():
    img = nn.image_procedural(16, 8, "cpu")
    assert img.shape == (8, 16, 3)
    s = nn.ImageSampler(img, 64, seed=3)
    x, t = s(0)
    assert x.shape == (64, 2) and t.shape == (64, 3)
    xa = x.to_numpy()
    assert (xa >= 0).all() and (xa <= 1).all()
    c = nn.image_pixel_coords(16, 8, "cpu")
    assert c.shape == (128, 2)
    assert nn.psnr(img, img) == float("inf")
    assert nn.psnr(np.zeros((128, 3), np.float32), img) < 30  # pixels vs [H, W, C]
    with pytest.raises(nabla.ShapeError):
        nn.image_write_png("/nonexistent/x.png", np.zeros((10, 3), np.float32), height=3)


def test_sequential_f16_features_change_nothing():
    enc = nn.HashGrid(2, n_levels=4, n_features=2, log2_table_size=10, device="cpu")
    enc.load_params(rnd(enc.n_params, seed=1))
    mlp = nn.FusedMLP(8, 3, width=16, hidden_layers=1, device="cpu")
    x = rnd(64, 2, seed=2, lo=0, hi=1)
    y = nn.Sequential(enc, mlp)(x)  # f16 features between the two
    np.testing.assert_array_equal(y, mlp.inference(enc.forward(x)))
    f16 = enc.forward(x, dtype="f16")
    assert f16.dtype == np.float16
    np.testing.assert_allclose(f16, enc.forward(x), rtol=1e-3, atol=1e-4)

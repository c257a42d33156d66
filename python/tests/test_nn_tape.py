"""nabla.nn.Tape: every op's gradient against finite differences, forwards against numpy, a small
training loop, stale handles and bad input; CUDA tapes against the CPU (skipped without a GPU)."""
import os

import numpy as np
import pytest

import nabla
import nabla.nn as nn
from nbtest import devices


def rnd(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def run(dev, build, arrays, target_seed=99):
    """tape, input Vars, output, loss = mse(build(...), random target)."""
    t = nn.Tape(dev, precision="fp32")
    vs = [t.input(a, requires_grad=True) for a in arrays]
    y = build(t, *vs)
    tgt = t.input(rnd(*y.shape, seed=target_seed))
    return t, vs, y, t.mse(y, tgt)


def check_grad(build, arrays, dev="cpu", eps=1e-2, tol=2e-2, n=12):
    t, vs, y, loss = run(dev, build, arrays)
    t.backward(loss)
    grads = [v.grad for v in vs]
    rng = np.random.default_rng(1)
    for k, a in enumerate(arrays):
        g = grads[k]
        assert g.shape == a.shape
        scale = max(np.abs(g).max(), 1e-3)
        for i in rng.choice(a.size, min(n, a.size), replace=False):
            vals = []
            for s in (eps, -eps):
                b = [x.copy() for x in arrays]
                b[k].reshape(-1)[i] += s
                vals.append(run(dev, build, b)[3].item())
            fd = (vals[0] - vals[1]) / (2 * eps)
            assert abs(g.reshape(-1)[i] - fd) < tol * scale, (k, i, g.reshape(-1)[i], fd)
    return y


def conv_ref(x, w, b, stride, pad):
    N, C, H, W = x.shape
    O, _, K, _ = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    Ho, Wo = (H + 2 * pad - K) // stride + 1, (W + 2 * pad - K) // stride + 1
    out = np.zeros((N, O, Ho, Wo))
    for i in range(K):
        for j in range(K):
            patch = xp[:, :, i:i + stride * Ho:stride, j:j + stride * Wo:stride]  # N C Ho Wo
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out + (b[None, :, None, None] if b is not None else 0)


@pytest.mark.parametrize("K,stride,pad,bias", [(3, 1, 1, True), (3, 2, 1, False), (1, 1, 0, True), (3, 1, 0, True)])
def test_conv2d_forward_and_gradients(K, stride, pad, bias):
    x, w, b = rnd(2, 3, 6, 6, seed=1), rnd(4, 3, K, K, seed=2, scale=0.3), rnd(4, seed=3)
    arrays = [x, w, b] if bias else [x, w]
    y = check_grad(lambda t, x, w, b=None: t.conv2d(x, w, b, stride, pad), arrays)
    np.testing.assert_allclose(y.numpy(), conv_ref(x, w, b if bias else None, stride, pad), rtol=1e-4, atol=1e-4)


def test_linear_group_norm_silu():
    x, w, b = rnd(5, 8, seed=1), rnd(3, 8, seed=2), rnd(3, seed=3)
    y = check_grad(lambda t, x, w, b: t.linear(x, w, b), [x, w, b])
    np.testing.assert_allclose(y.numpy(), x @ w.T + b, rtol=1e-5, atol=1e-5)
    xg, g, be = rnd(2, 4, 3, 3, seed=4), rnd(4, seed=5), rnd(4, seed=6)
    y = check_grad(lambda t, x, g, b: t.group_norm(x, 2, g, b), [xg, g, be])
    xr = xg.reshape(2, 2, -1).astype(np.float64)
    ref = ((xr - xr.mean(-1, keepdims=True)) / np.sqrt(xr.var(-1, keepdims=True) + 1e-5)).reshape(2, 4, 3, 3)
    np.testing.assert_allclose(y.numpy(), ref * g[None, :, None, None] + be[None, :, None, None], rtol=1e-4, atol=1e-4)
    y = check_grad(lambda t, x: t.silu(x), [rnd(3, 4, seed=7)])


def away_from_zero(a, margin=0.1):
    """a with every |value| >= margin (finite differences of eps 1e-2 never cross relu's kink)"""
    return np.where(np.abs(a) < margin, np.where(a < 0, a - margin, a + margin), a).astype(np.float32)


def test_relu_softmax_linear_relu():
    x = away_from_zero(rnd(3, 5, seed=1))
    y = check_grad(lambda t, x: t.relu(x), [x])
    np.testing.assert_array_equal(y.numpy(), np.maximum(x, 0))
    s = rnd(2, 3, 9, seed=2)
    y = check_grad(lambda t, x: t.softmax(x), [s])
    e = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(y.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    xl, w, b = rnd(4, 6, seed=3), rnd(5, 6, seed=4, scale=0.3), rnd(5, seed=5)
    z = xl @ w.T + b
    b = (b + np.where(np.abs(z).min(0) < 0.1, 0.3, 0.0)).astype(np.float32)  # pre-activations off 0
    y = check_grad(lambda t, x, w, b: t.linear_relu(x, w, b), [xl, w, b])
    np.testing.assert_allclose(y.numpy(), np.maximum(xl @ w.T + b, 0), rtol=1e-5, atol=1e-6)
    with pytest.raises(nabla.ShapeError):
        t = nn.Tape()
        t.linear_relu(t.input(xl), t.input(rnd(5, 4, seed=6)))


def test_shape_and_elementwise_ops():
    a, b = rnd(2, 3, 4, 4, seed=1), rnd(2, 3, 4, 4, seed=2)
    y = check_grad(lambda t, a, b: t.add(a, b), [a, b])
    np.testing.assert_allclose(y.numpy(), a + b, rtol=1e-6)
    check_grad(lambda t, a, b: a + b, [a, b])
    c = rnd(2, 3, seed=3)
    y = check_grad(lambda t, x, c: t.add_channel(x, c), [a, c])
    np.testing.assert_allclose(y.numpy(), a + c[:, :, None, None], rtol=1e-6)
    y = check_grad(lambda t, a, b: t.concat(a, b), [a, rnd(2, 2, 4, 4, seed=4)])
    assert y.shape == (2, 5, 4, 4)
    y = check_grad(lambda t, x: t.upsample2x(x), [a])
    np.testing.assert_allclose(y.numpy(), a.repeat(2, 2).repeat(2, 3), rtol=1e-6)
    y = check_grad(lambda t, x: t.avgpool2x(x), [a])
    np.testing.assert_allclose(y.numpy(), a.reshape(2, 3, 2, 2, 2, 2).mean((3, 5)), rtol=1e-5)
    y = check_grad(lambda t, x: t.transpose(t.reshape(x, (2, 3, 16))), [a])
    np.testing.assert_allclose(y.numpy(), a.reshape(2, 3, 16).transpose(0, 2, 1), rtol=1e-6)
    y = check_grad(lambda t, x: t.slice_channels(x, 1, 2), [a])
    np.testing.assert_allclose(y.numpy(), a[:, 1:3], rtol=1e-6)


def test_attention():
    q, k, v = rnd(1, 2, 5, 4, seed=1), rnd(1, 2, 6, 4, seed=2), rnd(1, 2, 6, 4, seed=3)
    y = check_grad(lambda t, q, k, v: t.attention(q, k, v), [q, k, v])
    s = np.einsum("nhqd,nhkd->nhqk", q, k) / 2.0
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(y.numpy(), np.einsum("nhqk,nhkd->nhqd", p, v), rtol=1e-4, atol=1e-5)


def test_timestep_embedding():
    t = nn.Tape()
    e = t.timestep_embedding([0.0, 10.0, 999.0], 8)
    f = np.exp(-np.log(10000.0) * np.arange(4) / 4)
    a = np.array([0.0, 10.0, 999.0])[:, None] * f
    np.testing.assert_allclose(e.numpy(), np.concatenate([np.cos(a), np.sin(a)], 1), rtol=1e-4, atol=1e-4)


def small_net(dev):
    t = nn.Tape(dev, precision="fp32")
    w1 = t.param("c1.w", (8, 3, 3, 3), init=0.3, seed=1)
    b1 = t.param("c1.b", (8,))
    g = t.param("gn.w", (8,), init=np.ones(8))
    w2 = t.param("c2.w", (3, 8, 3, 3), init=0.1, seed=2)
    return t, (w1, b1, g, w2)


def net_step(t, ps, x, tgt):
    w1, b1, g, w2 = ps
    t.reset()
    h = t.silu(t.group_norm(t.conv2d(t.input(x), w1, b1, 1, 1), 4, g))
    y = t.conv2d(h, w2, None, 1, 1)
    loss = t.mse(y, t.input(tgt))
    t.backward(loss)
    return loss


def test_param_training_loop_loss_falls():
    t, ps = small_net("cpu")
    assert t.n_params == 8 * 27 + 8 + 8 + 3 * 72
    assert t.param_info("c1.b") == (216, 8)
    assert np.array_equal(t.read_params()[224:232], np.ones(8))
    opt = nn.Adam(t, lr=1e-2)
    x = rnd(4, 3, 8, 8, seed=1)
    tgt = np.tanh(x[:, ::-1]).copy()  # a learnable map
    losses = []
    for step in range(60):
        losses.append(net_step(t, ps, x, tgt).item())
        g = t.grad(ps[0])
        assert g.shape == (8, 3, 3, 3)
        opt.step()
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    # views: zero-copy on the cpu, .grad is the gradient buffer (zeroed by the step)
    p = t.params()
    assert p.shape == (t.n_params,) and not np.asarray(p.grad).any()
    np.testing.assert_array_equal(np.asarray(p), t.read_params())
    st = t.stats()
    assert st["n_ops"] > 0


def test_tape_errors():
    t = nn.Tape()
    w = t.param("w", (3, 4))
    with pytest.raises(nabla.NablaError):
        t.param("w", (3, 4))  # duplicate name
    x = t.input(np.ones((2, 4), np.float32))
    with pytest.raises(nabla.ShapeError):
        t.linear(x, t.input(np.ones((3, 5), np.float32)))
    with pytest.raises(TypeError, match="tape.input"):
        t.linear(np.ones((2, 4)), w)
    with pytest.raises(nabla.ArgumentError, match="another tape"):
        t.linear(nn.Tape().input(np.ones((2, 4))), w)
    y = t.linear(x, w)
    t.reset()
    with pytest.raises(nabla.ArgumentError, match="before the last tape.reset"):
        t.silu(y)
    t.silu(w)  # parameters stay valid
    with pytest.raises(nabla.ShapeError):
        t.input(np.ones((1, 1, 1, 1, 2)))
    with pytest.raises(nabla.ArgumentError, match="precision"):
        t.precision = "fp16"
    t2 = nn.Tape()
    t2.param("a", 3)
    t2.params()
    with pytest.raises(nabla.ArgumentError, match="before taking params"):
        t2.param("b", 3)
    with pytest.raises(nabla.ShapeError):
        t2.write_params(np.zeros(4, np.float32))


def test_cuda_tape_matches_cpu():
    if "cuda" not in devices():
        pytest.skip("no CUDA device")
    x = rnd(2, 3, 8, 8, seed=1)
    tgt = rnd(2, 3, 8, 8, seed=2)
    res = {}
    for dev in ("cpu", "cuda"):
        t, ps = small_net(dev)
        loss = net_step(t, ps, x, tgt)
        res[dev] = (loss.item(), t.read_grads(), t.grad(ps[0]))
        assert t.params().device.kind == dev
    assert abs(res["cuda"][0] - res["cpu"][0]) < 1e-4 * abs(res["cpu"][0]) + 1e-6
    np.testing.assert_allclose(res["cuda"][1], res["cpu"][1], rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(res["cuda"][2], res["cpu"][2], rtol=1e-3, atol=1e-5)
    # Adam on the CUDA tape's parameters (device memory), one launch
    t, ps = small_net("cuda")
    opt = nn.Adam(t, lr=1e-2)
    first = net_step(t, ps, x, tgt).item()
    for _ in range(30):
        opt.step()
        last = net_step(t, ps, x, tgt).item()
    assert last < first


SMALL_UNET = dict(image_size=8, model_channels=16, channel_mult=(1, 2), num_res_blocks=1,
                  attention_resolutions=(4,), num_head_channels=16, num_groups=8)


def test_unet_and_ddpm():
    import os
    import tempfile

    t = nn.Tape("cpu")
    u = nn.UNet(t, seed=1, **SMALL_UNET)
    assert u.config["channel_mult"] == "1,2" and u.config["attention_resolutions"] == "4"
    names = u.named_parameters()
    assert names[0][0] == "time_embed.0.weight" and names[0][1] == (64, 16)
    assert sum(int(np.prod(s)) for _, s, _ in names) == t.n_params
    x = rnd(2, 3, 8, 8, seed=1)
    e = u(x, [3.0, 700.0])
    assert e.shape == (2, 3, 8, 8) and u.last_forward_flops > 0
    loss = t.mse(e, t.input(rnd(2, 3, 8, 8, seed=2)))
    t.backward(loss)
    assert np.abs(t.read_grads()).sum() > 0  # the zeroed output conv gets a gradient
    d = nn.DDPM(u, timesteps=100, lr=1e-3, ema_decay=0.9)
    ab = d.alphas_cumprod
    assert len(ab) == 100 and 0 < ab[-1] < ab[0] < 1
    for i in range(3):
        lo, gn = d.train_step(rnd(4, 3, 8, 8, seed=10 + i).clip(-1, 1))
        assert np.isfinite(lo) and np.isfinite(gn) and lo > 0
    assert d.cuda_graphs == (0, 0)  # CPU: nothing to capture
    d.cuda_graphs = False
    assert d.cuda_graphs == (0, 0)
    d.use_ema()
    s = d.sample("ddim", steps=4, n=2, seed=1)
    assert s.shape == (2, 3, 8, 8) and np.isfinite(s).all()
    assert np.array_equal(s, d.sample("ddim", steps=4, n=2, seed=1))  # deterministic
    path = os.path.join(tempfile.mkdtemp(), "u.safetensors")
    u.save(path)
    assert nn.UNet.read_config(path)["image_size"] == "8"
    t2 = nn.Tape("cpu")
    u2 = nn.UNet(t2, seed=5, **SMALL_UNET)
    u2.load(path)
    np.testing.assert_array_equal(t2.read_params(), t.read_params())
    with pytest.raises(nabla.ShapeError, match="x0 must be"):
        d.train_step(rnd(4, 3, 16, 16))
    with pytest.raises(nabla.ArgumentError, match="sampler"):
        d.sample("euler")
    with pytest.raises(nabla.ShapeError, match="timesteps"):
        u(x, [1.0])
    with pytest.raises(nabla.NotFoundError):
        nn.UNet(nn.Tape(), nope=3)
    with pytest.raises(nabla.ArgumentError):
        nn.UNet(nn.Tape(), **{**SMALL_UNET, "num_groups": 7})


def test_cuda_unet_matches_cpu():
    if "cuda" not in devices():
        pytest.skip("no CUDA device")
    x = rnd(2, 3, 8, 8, seed=1)
    tgt = rnd(2, 3, 8, 8, seed=2)
    out = {}
    for dev in ("cpu", "cuda"):
        t = nn.Tape(dev, precision="fp32")
        u = nn.UNet(t, seed=1, **SMALL_UNET)
        vals = t.read_params()
        vals += rnd(vals.size, seed=3, scale=0.01)  # un-zero the zero_module layers
        t.write_params(vals)
        loss = t.mse(u(x, [3.0, 700.0]), t.input(tgt))
        t.backward(loss)
        out[dev] = loss.item(), t.read_grads()
    assert abs(out["cuda"][0] - out["cpu"][0]) < 1e-3 * abs(out["cpu"][0])
    g, gc = out["cuda"][1], out["cpu"][1]
    assert np.abs(g - gc).max() < 1e-2 * np.abs(gc).max()


def test_cuda_ops_match_cpu():
    """Every op on a CUDA tape (fp32) against the CPU tape: output and input gradients."""
    if "cuda" not in devices():
        pytest.skip("no CUDA device")
    a, b = rnd(2, 3, 4, 4, seed=1), rnd(2, 3, 4, 4, seed=2)
    cases = [
        (lambda t, x, w, b: t.conv2d(x, w, b, 1, 1), [rnd(2, 3, 6, 6, seed=1), rnd(4, 3, 3, 3, seed=2), rnd(4, seed=3)]),
        (lambda t, x, w: t.conv2d(x, w, None, 2, 1), [rnd(2, 3, 6, 6, seed=1), rnd(4, 3, 3, 3, seed=2)]),
        (lambda t, x, w, b: t.conv2d(x, w, b, 1, 0), [rnd(2, 3, 6, 6, seed=1), rnd(4, 3, 1, 1, seed=2), rnd(4, seed=3)]),
        (lambda t, x, w, b: t.linear(x, w, b), [rnd(5, 8, seed=1), rnd(3, 8, seed=2), rnd(3, seed=3)]),
        (lambda t, x, g, b: t.group_norm(x, 2, g, b), [rnd(2, 4, 3, 3, seed=4), rnd(4, seed=5), rnd(4, seed=6)]),
        (lambda t, x: t.silu(x), [a]),
        (lambda t, x, y: t.add(x, y), [a, b]),
        (lambda t, x, c: t.add_channel(x, c), [a, rnd(2, 3, seed=3)]),
        (lambda t, x, y: t.concat(x, y), [a, b]),
        (lambda t, x: t.upsample2x(x), [a]),
        (lambda t, x: t.avgpool2x(x), [a]),
        (lambda t, x: t.transpose(t.reshape(x, (2, 3, 16))), [a]),
        (lambda t, x: t.slice_channels(x, 1, 2), [a]),
        (lambda t, q, k, v: t.attention(q, k, v), [rnd(1, 2, 5, 4, seed=1), rnd(1, 2, 6, 4, seed=2), rnd(1, 2, 6, 4, seed=3)]),
    ]
    for i, (build, arrays) in enumerate(cases):
        res = {}
        for dev in ("cpu", "cuda"):
            t, vs, y, loss = run(dev, build, arrays)
            t.backward(loss)
            res[dev] = [y.numpy()] + [v.grad for v in vs]
        for k, (g, c) in enumerate(zip(res["cuda"], res["cpu"])):
            np.testing.assert_allclose(g, c, rtol=1e-4, atol=1e-5, err_msg=f"case {i}, output/grad {k}")


def test_read_config_rejects_repeated_key():
    # a 40-byte safetensors file whose tensor entry repeats "dtype" with a non-string value once
    # killed the interpreter (double free in the reader); it must raise instead
    path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "st_dup_dtype.safetensors")
    with pytest.raises(nabla.NablaError, match="dtype"):
        nn.UNet.read_config(path)


def test_mlp_and_encoding_ops_match_the_modules():
    """Tape.mlp / Tape.encoding (the MLP and ENCODING rows of the op table) give what the modules'
    own forward and backward give: outputs, dL/dx and the parameter gradients."""
    rng = np.random.default_rng(5)
    m = nn.FusedMLP(2, 3, width=16, hidden_layers=1, activation="silu", bias=True, device="cpu")
    e = nn.DenseGrid(n_dims=2, resolution=5, n_features=2, device="cpu")
    w0 = np.asarray(m.params).copy()
    p0 = (rng.standard_normal(e.n_params) * 0.5).astype(np.float32)
    np.asarray(e.params)[:] = p0
    xa = rng.uniform(0.05, 0.95, (6, 2)).astype(np.float32)
    tgt = rng.standard_normal((6, 3)).astype(np.float32)

    t = nn.Tape("cpu", precision="fp32")
    p = t.param("enc", e.n_params, init=p0)
    w = t.param("mlp", m.n_params, init=w0)
    x = t.input(xa, requires_grad=True)
    f = t.encoding(e, x, p)
    y = t.mlp(m, f, w)
    loss = t.mse(y, t.input(tgt))
    t.backward(loss)

    # the same through the modules: forward, dL/dy = 2 (y - T) / n, backward
    f_ref = np.asarray(e.forward(xa))
    y_ref = np.asarray(m.forward(f_ref))
    np.testing.assert_allclose(f.numpy(), f_ref, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(y.numpy(), y_ref, rtol=1e-6, atol=1e-7)
    dy = (2.0 * (y_ref - tgt) / y_ref.size).astype(np.float32)
    df = np.asarray(m.backward(dy))
    gw_ref = np.asarray(m.params.grad).copy()
    np.asarray(e.params.grad)[:] = 0
    dx_ref = np.asarray(e.backward(df, need_dx=True, x=xa))
    np.testing.assert_allclose(t.grad(w), gw_ref, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(t.grad(p), np.asarray(e.params.grad), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(x.grad, dx_ref, rtol=1e-5, atol=1e-7)

    # typed errors: not a module, a wrong parameter count, the mlp's second training op
    with pytest.raises(TypeError):
        t.mlp(e, f, w)
    t.reset()
    x = t.input(xa, requires_grad=True)
    f = t.encoding(e, x, p)
    with pytest.raises(nabla.ShapeError):
        t.mlp(m, f, p)
    t.mlp(m, f, w)
    with pytest.raises(nabla.UnsupportedError):
        t.mlp(m, f, w)


CALL_SRC = """
[Differentiable] float softplus(float x, float beta) { return log(1.0 + exp(beta * x)) / beta; }
[Differentiable] float madd(float a, float b, float c) { return a * b + c; }
[Differentiable] float norm3(float3 v) { return sqrt(dot(v, v)); }
float twice(float x) { return 2.0 * x; }
"""


def test_call_user_functions_as_tape_ops():
    """Tape.call(module.fn, *args): a .nb function as a tape op (the CALL row) -- values and
    gradients against numpy, broadcasting, a float3 parameter, scalars, and typed errors."""
    rng = np.random.default_rng(7)
    m = nabla.load_module_from_source(CALL_SRC, device="cpu")
    xa = rng.standard_normal((5, 4)).astype(np.float32)
    wa = rng.standard_normal((3, 4)).astype(np.float32)
    ba = rng.standard_normal(3).astype(np.float32)
    ca = rng.standard_normal((5, 1)).astype(np.float32)
    tgt = rng.standard_normal((5, 3)).astype(np.float32)

    t = nn.Tape("cpu")
    w = t.param("w", (3, 4), init=wa)
    b = t.param("b", 3, init=ba)
    x = t.input(xa, requires_grad=True)
    c = t.input(ca, requires_grad=True)
    h = t.linear(x, w, b)
    a = t.call(m.softplus, h, 2.0)          # a scalar argument
    y = t.call(m.madd, a, a, c)             # a value twice, c [5,1] broadcast over the columns
    loss = t.mse(y, t.input(tgt))
    t.backward(loss)

    h_ref = xa @ wa.T + ba
    a_ref = np.log1p(np.exp(2.0 * h_ref)) / 2.0
    y_ref = a_ref * a_ref + ca
    np.testing.assert_allclose(y.numpy(), y_ref, rtol=1e-5, atol=1e-6)
    dy = 2.0 * (y_ref - tgt) / y_ref.size
    dc = dy.sum(axis=1, keepdims=True)
    dh = dy * 2.0 * a_ref / (1.0 + np.exp(-2.0 * h_ref))
    np.testing.assert_allclose(c.grad, dc, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(x.grad, dh @ wa, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(t.grad(w), dh.T @ xa, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(t.grad(b), dh.sum(axis=0), rtol=1e-4, atol=1e-6)

    # a float3 parameter takes a trailing 3: [5, 3] -> [5]
    t.reset()
    v = t.input(tgt, requires_grad=True)
    n = t.call(m.norm3, v)
    assert n.shape == (5,)
    np.testing.assert_allclose(n.numpy(), np.linalg.norm(tgt, axis=1), rtol=1e-6)

    # typed errors
    with pytest.raises(nabla.ShapeError):
        t.call(m.norm3, t.input(xa))            # trailing 4, not 3
    with pytest.raises(nabla.ArgumentError):
        t.call(m.madd, v, v)                     # 2 of 3 arguments
    with pytest.raises(nabla.ArgumentError):
        t.call(m.twice, v)                       # not [Differentiable], v needs a gradient
    t.call(m.twice, t.input(xa))                 # fine without a gradient
    with pytest.raises(TypeError):
        t.call(m.madd, v, "x", 1.0)
    with pytest.raises(TypeError):
        t.call(len, v)
    if any(d != "cpu" for d in devices()):
        tg = nn.Tape("cuda")
        with pytest.raises(nabla.DeviceError):
            tg.call(m.softplus, tg.input(xa), 1.0)  # a CPU module on a CUDA tape

"""Recorded graphs from Python (nabla.record, nabla.Graph, nabla.compile): a recorded CPU graph
gives the immediate results bit for bit, replays with new inputs, gradients (parameters and
inputs), memory planning under poison, dumps, the compile decorator's cache (hits, re-records on
a shape / dtype change) and every error; CUDA cases skip without a GPU."""
import numpy as np
import pytest

import nabla
import nabla.nn as nn
from nbtest import devices


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def make_tape(dev="cpu"):
    """x [8,16] -> linear 32 -> silu -> linear 16 -> + x -> silu -> linear 4 (test_graph.c's MLP)."""
    t = nn.Tape(dev, precision="fp32")
    p = {
        "w1": t.param("l1.w", (32, 16), init=0.25, seed=1), "b1": t.param("l1.b", (32,), init=0.1, seed=2),
        "w2": t.param("l2.w", (16, 32), init=0.18, seed=3), "b2": t.param("l2.b", (16,), init=0.1, seed=4),
        "w3": t.param("l3.w", (4, 16), init=0.25, seed=5), "b3": t.param("l3.b", (4,), init=0.1, seed=6),
    }
    return t, p


def mlp(t, p, x):
    h = t.silu(t.linear(x, p["w1"], p["b1"]))
    r = t.silu(t.add(t.linear(h, p["w2"], p["b2"]), x))
    return t.linear(r, p["w3"], p["b3"])


def record_step(t, p, xs, ts, x_grad=True):
    """Records forward + backward; returns the graph, input Vars, prediction and loss."""
    with nabla.record(t) as g:
        x = t.input(xs, requires_grad=x_grad)
        tgt = t.input(ts)
        y = mlp(t, p, x)
        loss = t.mse(y, tgt)
        t.backward(loss)
        g.output(y)
    return g, x, y, loss


def immediate(dev, xs, ts):
    """The immediate-mode result on a fresh tape with the same parameters."""
    t, p = make_tape(dev)
    x = t.input(xs, requires_grad=True)
    y = mlp(t, p, x)
    loss = t.mse(y, t.input(ts))
    t.backward(loss)
    return y.numpy(), loss.item(), t.read_grads(), x.grad


def test_recorded_equals_immediate_bit_for_bit():
    xs, ts = rnd(8, 16, seed=10), rnd(8, 4, seed=11)
    t, p = make_tape()
    g, x, y, loss = record_step(t, p, xs, ts)
    # the recording ran the ops (immediate mode): the tape has the results
    y_imm, l_imm, gp_imm, gx_imm = immediate("cpu", xs, ts)
    assert np.array_equal(y.numpy(), y_imm)
    t.zero_grad()
    g.run()  # the recorded inputs
    assert np.array_equal(g.read(y), y_imm)
    assert g.read(loss).reshape(-1)[0] == np.float32(l_imm)
    assert np.array_equal(t.read_grads(), gp_imm)
    assert np.array_equal(g.grad(x), gx_imm)
    assert np.array_equal(g.grad(p["w1"]), t.grad(p["w1"]))
    info = g.info
    assert info["n_nodes"] == 7 and info["n_inputs"] == 2 and info["has_backward"]
    assert info["runs"] == 1 and info["n_outputs"] == 2 and not info["on_cuda"]
    assert [v.id for v in g.inputs] == [x.id, x.id + 1]
    assert g.shape(y) == (8, 4)


def test_replay_new_inputs_and_gradients_accumulate():
    t, p = make_tape()
    g, x, y, loss = record_step(t, p, rnd(8, 16, seed=1), rnd(8, 4, seed=2))
    for k in range(3):
        xs, ts = rnd(8, 16, seed=20 + k), rnd(8, 4, seed=30 + k)
        t.zero_grad()
        g.run(xs, ts)
        y_imm, l_imm, gp_imm, gx_imm = immediate("cpu", xs, ts)
        assert np.array_equal(g.read(y), y_imm)
        assert np.array_equal(t.read_grads(), gp_imm)
        assert np.array_equal(g.grad(x), gx_imm)
    # without zero_grad the parameter gradients accumulate, as tape.backward does
    before = t.read_grads()
    g.run()
    assert np.allclose(t.read_grads(), 2 * before, rtol=1e-6, atol=1e-7)
    # None keeps an input: only the target changes
    g.run(None, rnd(8, 4, seed=99))
    assert np.array_equal(g.read(x), rnd(8, 16, seed=22))
    assert g.info["runs"] == 5


def test_forward_only_graph_torch_results():
    torch = pytest.importorskip("torch")
    t, p = make_tape()
    with nabla.record(t) as g:
        y = mlp(t, p, t.input(rnd(8, 16)))
    g.output(y)
    assert not g.info["has_backward"]
    xs = rnd(8, 16, seed=5)
    g.run(torch.from_numpy(xs))
    out = g.read(y, result="torch")
    assert isinstance(out, torch.Tensor)
    assert np.array_equal(out.numpy(), immediate("cpu", xs, rnd(8, 4))[0])
    with pytest.raises(nabla.ArgumentError, match="no backward"):
        g.grad(y)


def test_set_input_device_arrays():
    """nabla.Tensor and torch inputs are copied on the graph's device (here the CPU)."""
    t, p = make_tape()
    g, x, y, loss = record_step(t, p, rnd(8, 16), rnd(8, 4))
    xs, ts = rnd(8, 16, seed=12), rnd(8, 4, seed=13)
    xt = nabla.Tensor.from_numpy(xs, device="cpu")
    t.zero_grad()
    g.run(xt, ts)
    y_imm = immediate("cpu", xs, ts)[0]
    assert np.array_equal(g.read(y), y_imm)
    assert np.array_equal(g.read(x), xs)
    torch = pytest.importorskip("torch")
    xs2 = rnd(16, 8, seed=14)
    g.run(torch.from_numpy(xs2).t())  # non-contiguous: made contiguous
    assert np.array_equal(g.read(x), xs2.T)
    with pytest.raises(nabla.ShapeError, match="recorded \\[8,16\\]"):
        g.run(torch.zeros(8, 15))
    with pytest.raises(nabla.DtypeError, match="float64"):
        g.run(torch.zeros(8, 16, dtype=torch.float64))


def test_memory_plan_and_poison():
    t, p = make_tape()
    g, x, y, loss = record_step(t, p, rnd(8, 16), rnd(8, 4))
    m = g.memory()
    assert 0 < m["planned_peak"] < m["naive"]
    g.set_poison(True)
    xs, ts = rnd(8, 16, seed=3), rnd(8, 4, seed=4)
    t.zero_grad()
    g.run(xs, ts)
    y_imm, _, gp_imm, _ = immediate("cpu", xs, ts)
    assert np.array_equal(g.read(y), y_imm)  # a plan that shared live memory would show NaNs
    assert np.array_equal(t.read_grads(), gp_imm)


def test_dump_and_dot(tmp_path):
    t, p = make_tape()
    g, x, y, loss = record_step(t, p, rnd(8, 16), rnd(8, 4))
    g.set_profiling(True)
    g.run()
    text = g.dump()
    assert "graph: 7 nodes, 2 inputs, 0 constants, 2 outputs, forward + backward" in text
    assert "node 0 linear:" in text and "node 6 mse:" in text and "memory: planned peak" in text
    dot = g.dot()
    assert dot.startswith("digraph nabla_graph {") and "n0 -> n1" in dot
    f = tmp_path / "g.dot"
    g.save_dot(str(f))
    assert f.read_text() == dot
    assert "7 nodes" in repr(g)
    g.set_cuda_graph(False)  # CPU graph: accepted, no effect


def test_record_errors_name_the_cause():
    t, p = make_tape()
    # a host read of an intermediate followed by more ops cannot be replayed
    with pytest.raises(nabla.ArgumentError, match=r"accessed on the host .*before node 1 \(silu\)"):
        with nabla.record(t):
            h = t.linear(t.input(rnd(8, 16)), p["w1"], p["b1"])
            h.numpy()
            t.silu(h)
    # registering a parameter while recording (the tape refuses it after the first op)
    t2, p2 = make_tape()
    with pytest.raises(nabla.ArgumentError, match="parameter 'late' registered after the first step"):
        with nabla.record(t2):
            t2.silu(t2.input(rnd(4, 4)))
            t2.param("late", (4,))
    # a reset while recording
    with pytest.raises(nabla.ArgumentError, match="reset during recording"):
        with nabla.record(t):
            t.silu(t.input(rnd(4, 4)))
            t.reset()
    # nothing recorded
    with pytest.raises(nabla.ArgumentError, match="no op was recorded"):
        with nabla.record(t):
            pass
    # ops after the backward
    with pytest.raises(nabla.ArgumentError, match=r"after nb_tape_backward"):
        with nabla.record(t):
            loss = t.mse(t.silu(t.input(rnd(4, 4), requires_grad=True)), t.input(rnd(4, 4)))
            t.backward(loss)
            t.silu(loss)
    # the timestep embedding is made from host data: not an op a replay can repeat
    with pytest.raises(nabla.ArgumentError, match="timestep_embedding"):
        with nabla.record(t):
            t.silu(t.timestep_embedding([1.0, 2.0], 8))
    # an exception inside the block stops the recording and propagates unchanged
    with pytest.raises(ZeroDivisionError):
        with nabla.record(t):
            t.silu(t.input(rnd(4, 4)))
            1 / 0
    # the tape records again afterwards
    with nabla.record(t) as g:
        t.silu(t.input(rnd(4, 4)))
    assert g.info["n_nodes"] == 1
    with pytest.raises(TypeError, match="nabla.nn.Tape"):
        nabla.record("tape")


def test_replay_errors():
    t, p = make_tape()
    g, x, y, loss = record_step(t, p, rnd(8, 16), rnd(8, 4))
    with pytest.raises(nabla.ShapeError, match=r"has shape \[8,8\], recorded \[8,16\]"):
        g.set_input(0, rnd(8, 8))
    with pytest.raises(nabla.ShapeError, match=r"input 0 \(value 6, read by node 0 \(linear\)\) has shape \[128\]"):
        g.run(rnd(128))
    with pytest.raises(nabla.DtypeError, match="input 1 has dtype float64, the graph was recorded with float32"):
        g.run(rnd(8, 16), np.zeros((8, 4)))
    with pytest.raises(nabla.ArgumentError, match="3 inputs given, the graph has 2"):
        g.run(rnd(8, 16), rnd(8, 4), rnd(1))
    with pytest.raises(nabla.ArgumentError, match="input 2 of 2"):
        g.set_input(2, rnd(8, 4))
    # before the first run, and values whose memory is shared
    with pytest.raises(nabla.ArgumentError, match="has not run yet"):
        g.read(y)
    g.run()
    with pytest.raises(nabla.ArgumentError, match="not an output of the graph"):
        h = nabla.nn.Var(t, y.id - 1, y.gen)  # the last silu: an intermediate
        g.read(h)
    with pytest.raises(nabla.ArgumentError, match="is an intermediate"):
        g.grad(y)
    # handles of another recording or tape
    t.reset()
    other = t.silu(t.input(rnd(2, 2)))
    with pytest.raises(nabla.ArgumentError, match="not made while this graph was recorded"):
        g.read(other)
    t3, _ = make_tape()
    with pytest.raises(nabla.ArgumentError, match="another tape"):
        g.read(t3.input(rnd(2, 2)))
    with pytest.raises(TypeError, match="nabla.nn.Var"):
        g.read(3)
    # still fine after a reset of the tape: the graph has its own memory
    g.run()
    assert g.read(y).shape == (8, 4)


def test_graph_used_inside_the_block():
    t, p = make_tape()
    with nabla.record(t) as g:
        y = t.silu(t.input(rnd(4, 16)))
        with pytest.raises(nabla.ArgumentError, match="still being recorded"):
            g.run()
        g.output(y)  # deferred to the end of the block
    g.run()
    assert g.info["n_outputs"] == 1
    rec = nabla.record(t)
    with rec as g2:
        t.silu(t.input(rnd(4, 16)))
    with pytest.raises(nabla.ArgumentError, match="recorded already"):
        with rec:
            pass
    assert not nabla._nabla.graph_recording(t._c)
    with pytest.raises(nabla.ArgumentError, match="already recording"):
        with nabla.record(t):
            t.silu(t.input(rnd(4, 16)))
            with nabla.record(t):
                pass


def test_compile_cache_and_rerecord():
    t, p = make_tape()
    calls = []

    @nabla.compile(passes=False)  # the recorded graph as recorded: bit for bit with immediate
    def step(tape, x, target, scale_name="mse"):
        calls.append(x.shape)
        y = mlp(tape, p, x)
        loss = tape.mse(y, target)
        tape.backward(loss)
        return {"y": y, "loss": loss}

    for k in range(3):
        xs, ts = rnd(8, 16, seed=k), rnd(8, 4, seed=50 + k)
        t.zero_grad()
        out = step(t, xs, ts)
        y_imm, l_imm, gp_imm, _ = immediate("cpu", xs, ts)
        assert set(out) == {"y", "loss"}
        assert np.array_equal(out["y"], y_imm)
        assert out["loss"].reshape(-1)[0] == np.float32(l_imm)
        assert np.array_equal(t.read_grads(), gp_imm)
    assert calls == [(8, 16)]  # fn ran once: later calls replayed
    assert step.cache_info() == {"records": 1, "replays": 2, "entries": 1}
    # a new shape records again; the old graph stays cached
    xs, ts = rnd(3, 16, seed=7), rnd(3, 4, seed=8)
    t.zero_grad()
    out = step(t, xs, ts)
    assert out["y"].shape == (3, 4) and np.array_equal(out["y"], immediate("cpu", xs, ts)[0])
    assert calls == [(8, 16), (3, 16)]
    step(t, rnd(8, 16), rnd(8, 4))
    assert step.cache_info() == {"records": 2, "replays": 3, "entries": 2}
    # another dtype is another signature (converted to f32 like tape.input)
    out = step(t, rnd(8, 16).astype(np.float64), rnd(8, 4))
    assert step.cache_info()["records"] == 3
    # constant arguments are part of the key
    step(t, rnd(8, 16), rnd(8, 4), scale_name="other")
    assert step.cache_info()["records"] == 4 and len(step.graphs) == 4
    # a 0-dim array is a constant (keyed by its value), not a graph input
    step(t, rnd(8, 16), rnd(8, 4), np.float32(2.0))
    step(t, rnd(8, 16), rnd(8, 4), np.float32(2.0))
    step(t, rnd(8, 16), rnd(8, 4), np.float32(3.0))
    assert step.cache_info()["records"] == 6 and step.graphs[-2].info["n_inputs"] == 2


def test_compile_cache_size_and_results():
    torch = pytest.importorskip("torch")
    t, p = make_tape()

    @nabla.compile(cache_size=2, passes=False)
    def fwd(tape, x):
        y = mlp(tape, p, x)
        return y, [tape.silu(y)]

    for n in (2, 3, 4):
        fwd(t, rnd(n, 16))
    assert fwd.cache_info() == {"records": 3, "replays": 0, "entries": 2}
    assert [g.shape(g.inputs[0]) for g in fwd.graphs] == [(3, 16), (4, 16)]
    xs = rnd(4, 16, seed=9)
    y, (s,) = fwd(t, torch.from_numpy(xs))
    assert isinstance(y, torch.Tensor) and isinstance(s, torch.Tensor)
    assert fwd.cache_info()["replays"] == 1
    y_imm = immediate("cpu", xs, rnd(4, 4))[0]
    assert np.array_equal(y.numpy(), y_imm)
    np.testing.assert_allclose(s.numpy(), y_imm / (1 + np.exp(-y_imm)), rtol=1e-5, atol=1e-6)


def test_graph_compile_passes():
    """Graph.compile: the MLP's silu / add chains fuse; replays match the recorded graph within
    rounding, forward and gradients; compiled values that were removed cannot be read."""
    xs, ts = rnd(8, 16, seed=40), rnd(8, 4, seed=41)
    t, p = make_tape()
    g, x, y, loss = record_step(t, p, xs, ts)
    stats = g.compile()
    assert stats == g.compiled and stats["fused_nodes"] >= 1 and stats["fused_ops"] >= 2
    assert "fused" in g.dump()
    for k in range(2):
        xs2, ts2 = rnd(8, 16, seed=60 + k), rnd(8, 4, seed=70 + k)
        t.zero_grad()
        g.run(xs2, ts2)
        y_imm, l_imm, gp_imm, gx_imm = immediate("cpu", xs2, ts2)
        np.testing.assert_allclose(g.read(y), y_imm, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(g.read(loss).reshape(-1)[0], l_imm, rtol=1e-5)
        np.testing.assert_allclose(t.read_grads(), gp_imm, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(g.grad(x), gx_imm, rtol=1e-4, atol=1e-6)
    # passes off: nothing changes
    t2, p2 = make_tape()
    g2 = record_step(t2, p2, xs, ts)[0]
    assert g2.compile(dead=False, dedup=False, fold=False, epilogue=False, fuse=False) == {
        "dead": 0, "duplicates": 0, "folded": 0, "epilogues": 0, "fused_nodes": 0, "fused_ops": 0}
    assert g2.info["n_nodes"] == 7


def test_compile_decorator_compiles():
    t, p = make_tape()

    @nabla.compile
    def step(tape, x, target):
        loss = tape.mse(mlp(tape, p, x), target)
        tape.backward(loss)
        return loss

    for k in range(3):
        xs, ts = rnd(8, 16, seed=80 + k), rnd(8, 4, seed=90 + k)
        t.zero_grad()
        loss = step(t, xs, ts)
        _, l_imm, gp_imm, _ = immediate("cpu", xs, ts)
        np.testing.assert_allclose(loss.reshape(-1)[0], l_imm, rtol=1e-5)
        np.testing.assert_allclose(t.read_grads(), gp_imm, rtol=1e-4, atol=1e-6)
    assert step.cache_info() == {"records": 1, "replays": 2, "entries": 1}
    assert step.graphs[0].compiled["fused_nodes"] >= 1
    with pytest.raises(TypeError, match="passes must be"):
        nabla.compile(lambda t: None, passes="all")


def test_compile_errors():
    t, p = make_tape()

    @nabla.compile
    def peeks(tape, x):
        h = tape.linear(x, p["w1"], p["b1"])
        if h.numpy().sum() > 1e9:  # a host read decides what comes next: cannot be replayed
            h = tape.silu(h)
        return tape.silu(h)

    with pytest.raises(nabla.ArgumentError, match=r"nabla.compile\(peeks\): .*accessed on the host"):
        peeks(t, rnd(8, 16))

    @nabla.compile
    def returns_array(tape, x):
        return tape.silu(x).numpy()

    with pytest.raises(nabla.ArgumentError, match="returned a ndarray"):
        returns_array(t, rnd(2, 2))
    with pytest.raises(TypeError, match="first argument must be the nabla.nn.Tape"):
        returns_array(rnd(2, 2))
    with pytest.raises(TypeError, match="hashable"):
        returns_array(t, rnd(2, 2), [1, 2])
    with pytest.raises(TypeError, match="expected a function"):
        nabla.compile(3)
    with pytest.raises(nabla.ArgumentError, match="cache_size"):
        nabla.compile(lambda t: None, cache_size=0)

    @nabla.compile
    def bad_shape(tape, x):
        return tape.linear(x, p["w1"], p["b1"])

    with pytest.raises(nabla.ShapeError):
        bad_shape(t, rnd(8, 5))
    assert bad_shape.cache_info()["entries"] == 0


def test_cuda_graph_matches_cpu():
    if "cuda" not in devices():
        pytest.skip("no CUDA device")
    xs, ts = rnd(8, 16, seed=1), rnd(8, 4, seed=2)
    t, p = make_tape("cuda")
    g, x, y, loss = record_step(t, p, xs, ts)
    y_cpu, l_cpu, gp_cpu, _ = immediate("cpu", xs, ts)
    for k in range(4):  # from the third run on: one CUDA graph
        t.zero_grad()
        g.run(xs, ts)
    assert g.info["on_cuda"] and g.info["cuda_graph"] == 2
    np.testing.assert_allclose(g.read(y), y_cpu, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(t.read_grads(), gp_cpu, rtol=1e-3, atol=1e-5)

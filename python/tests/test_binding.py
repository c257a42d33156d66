"""Argument binding from Python: integer ranges, map dims, struct gradients, string options."""
import types

import numpy as np
import pytest

import nabla
from nbtest import devices

SRC = """
int twice(int x) { return x * 2; }
uint utwice(uint x) { return x * 2; }
int64_t wide(int64_t x) { return x; }
float addf(float a, float b) { return a + b; }
struct P : IDifferentiable { float c; float d; };
struct Q : IDifferentiable { P p; float e; };
[Differentiable] float poly(P p, float x) { return p.c * x * x + p.d * x; }
[Differentiable] float nested(Q q, float x) { return q.p.c * x + q.p.d * x * x + q.e; }
"""

_mods = {}


def mod(dev):
    if dev not in _mods:
        _mods[dev] = nabla.load_module_from_source(SRC, "binding.nb", device=dev)
    return _mods[dev]


def test_int_scalars_out_of_range_are_errors():
    for dev in devices():
        m = mod(dev)
        assert int(m.twice(21)) == 42
        assert int(m.twice(-2**31)) == 0  # wraps in the kernel, but the argument fits
        with pytest.raises(nabla.ArgumentError, match=r"'x'.*1099511627776.*int: -2147483648\.\.2147483647"):
            m.twice(2**40)
        with pytest.raises(nabla.ArgumentError, match=r"-2147483649"):
            m.twice(-2**31 - 1)
        with pytest.raises(nabla.ArgumentError, match=r"holds -1.*uint: 0\.\.4294967295"):
            m.utwice(-1)
        assert int(m.utwice(2**31)) == 0  # 2**32 wraps as uint arithmetic does
        with pytest.raises(nabla.ArgumentError, match=r"4294967296"):
            m.utwice(2**32)
        assert int(m.wide(2**40)) == 2**40
        with pytest.raises(OverflowError):
            m.wide(2**70)


def test_int_arrays_and_lists_are_range_checked():
    for dev in devices():
        m = mod(dev)
        # a wider integer dtype is accepted (as before) when every value fits ...
        assert m.twice(np.arange(4, dtype=np.int64)).tolist() == [0, 2, 4, 6]
        assert m.twice([1, 2]).tolist() == [2, 4]
        # ... and an error naming the argument, the value, its index and the range when not
        a = np.array([1, 2, 2**40], np.int64)
        with pytest.raises(nabla.ArgumentError, match=r"argument 'x' \(i64\[3\]\) holds 1099511627776 at flat index 2"):
            m.twice(a)
        with pytest.raises(nabla.ArgumentError, match=r"flat index 1"):
            m.twice([0, 2**35])
        with pytest.raises(nabla.ArgumentError, match=r"holds -3.*uint"):
            m.utwice(np.array([[1, 2], [3, -3]], np.int32))
        with pytest.raises(nabla.ArgumentError, match=r"holds 2147483648"):
            m.twice(np.array([2**31], np.uint32))
        # strided views are checked element by element, through the view
        b = np.zeros((4, 2), np.int64)
        b[3, 1] = 2**33
        assert m.twice(b[:, 0]).tolist() == [0, 0, 0, 0]
        with pytest.raises(nabla.ArgumentError, match=r"flat index 3"):
            m.twice(b[:, 1])
        t = nabla.Tensor.from_numpy(np.array([5, -2**40], np.int64))
        if dev != "cpu":
            t = t.to(dev) if hasattr(t, "to") else t
        with pytest.raises(nabla.ArgumentError, match=r"holds -1099511627776"):
            m.twice(t)


def test_map_dims_are_range_checked():
    m = mod("cpu")
    a = np.arange(3, dtype=np.float32)
    b = np.arange(2, dtype=np.float32)
    assert m.addf.map((0,), (1,))(a, b).shape == (3, 2)
    with pytest.raises(nabla.ArgumentError, match=r"map: argument 0: kernel dim 4294967296 is out of range"):
        m.addf.map((2**32,), (1,))
    with pytest.raises(nabla.ArgumentError, match=r"argument 'b'.*-1"):
        m.addf.map(a=(0,), b=(-1,))
    with pytest.raises(nabla.ArgumentError, match=r"kernel dim 8 is out of range \(kernel dims are 0\.\.7\)"):
        m.addf.map((8,), (0,))
    with pytest.raises(nabla.ArgumentError, match=r"maps 9 dims"):
        m.addf.map(tuple(range(9)))
    with pytest.raises(TypeError, match=r"argument 0"):
        m.addf.map((0.5,), (0,))


def _poly_ref(c, d, x):
    # d/dc = x^2, d/dd = x, d/dx = 2cx + d
    return x * x, x, 2 * c * x + d


def test_struct_gradients_nested_and_attribute_spellings():
    for dev in devices():
        m = mod(dev)
        c = np.array([1.0, 2.0], np.float32)
        d = np.array([0.5, -1.0], np.float32)
        x = np.array([3.0, 4.0], np.float32)
        gc, gd, gx = _poly_ref(c, d, x)
        spellings = [
            lambda dc, dd, dx: m.poly.bwds({"c": c, "d": d}, x, _grads={"p": {"c": dc, "d": dd}, "x": dx}, _dout=1.0),
            lambda dc, dd, dx: m.poly.bwds({"c": c, "d": d}, x, _grads={0: {"c": dc, "d": dd}, 1: dx}, _dout=1.0),
            lambda dc, dd, dx: m.poly.bwds({"c": c, "d": d}, x, _grads={"p.c": dc, "p.d": dd, "x": dx}, _dout=1.0),
            lambda dc, dd, dx: m.poly.bwds(types.SimpleNamespace(c=c, d=d), x,
                                           _grads={"p": types.SimpleNamespace(c=dc, d=dd), "x": dx}, _dout=1.0),
            # the old spelling: the gradient wrapper's own parameter name
            lambda dc, dd, dx: m.poly.bwds({"c": c, "d": d}, x, _grads={"x": dx}, _dout=1.0,
                                           **{"p_grad.c": dc, "p_grad.d": dd}),
        ]
        for i, call in enumerate(spellings):
            dc, dd, dx = (np.zeros(2, np.float32) for _ in range(3))
            call(dc, dd, dx)
            np.testing.assert_allclose(dc, gc, rtol=1e-6, err_msg=f"spelling {i} on {dev}")
            np.testing.assert_allclose(dd, gd, rtol=1e-6, err_msg=f"spelling {i} on {dev}")
            np.testing.assert_allclose(dx, gx, rtol=1e-6, err_msg=f"spelling {i} on {dev}")
            call(dc, dd, dx)  # gradients accumulate
            np.testing.assert_allclose(dc, 2 * gc, rtol=1e-6)
        # only some fields: the others get no gradient array and are not written
        dd = np.zeros(2, np.float32)
        m.poly.bwds({"c": c, "d": d}, x, _grads={"p": {"d": dd}}, _dout=1.0)
        np.testing.assert_allclose(dd, gd, rtol=1e-6)
        # nested structs
        q = {"p": {"c": c, "d": d}, "e": np.float32(1.0)}
        dpc, dpd, de = (np.zeros(2, np.float32) for _ in range(3))
        m.nested.bwds(q, x, _grads={"q": {"p": {"c": dpc, "d": dpd}, "e": de}}, _dout=1.0)
        np.testing.assert_allclose(dpc, x, rtol=1e-6)
        np.testing.assert_allclose(dpd, x * x, rtol=1e-6)
        np.testing.assert_allclose(de, [1, 1], rtol=1e-6)
        with pytest.raises(nabla.NablaError, match=r"nope"):
            m.poly.bwds({"c": c, "d": d}, x, _grads={"p": {"nope": dd}}, _dout=1.0)
        with pytest.raises(TypeError, match=r"p_grad\.c"):
            m.poly.bwds({"c": c, "d": d}, x, _grads={"p": {"c": 1.0}}, _dout=1.0)


def test_struct_arguments_as_namespaces():
    m = mod("cpu")
    c = np.array([1.0, 2.0], np.float32)
    x = np.array([3.0, 4.0], np.float32)
    r1 = m.poly({"c": c, "d": 0.5}, x)
    r2 = m.poly(types.SimpleNamespace(c=c, d=0.5), x)
    assert r1.tolist() == r2.tolist()


def test_dump_rejects_unknown_format_and_mode():
    m = mod("cpu")
    assert "twice" in m.dump("c")
    assert "twice" in m.dump("ir")
    with pytest.raises(nabla.ArgumentError, match=r"unknown format 'pascal' \(allowed: 'c', 'cuda', 'ir'\)"):
        m.dump("pascal")
    with pytest.raises(ValueError, match=r"unknown mode 'reverse' \(allowed: 'primal', 'fwd', 'bwd'\)"):
        m.dump("c", mode="reverse")
    with pytest.raises(ValueError, match=r"_result='list'"):
        m.twice(1, _result="list")
    with pytest.raises(nabla.NablaError):
        nabla.device("gpu")


BOUNDS_SRC = """
float gather(Tensor<float, 1> t, int i) { return t[i]; }
float lut(int k) { float a[4] = {1, 2, 3, 4}; return a[k]; }
"""


@pytest.mark.parametrize("dev", devices())
def test_bounds_checked_by_default_and_unchecked_on_request(dev):
    t = np.array([10, 20, 30, 40], np.float32)
    m = nabla.load_module_from_source(BOUNDS_SRC, "bounds.nb", device=dev)
    np.testing.assert_array_equal(m.gather(t, np.array([3, 0], np.int32)), [40, 10])
    with pytest.raises(nabla.ShapeError, match=r"out-of-bounds index \[4\] into tensor 't' of shape \[4\]"):
        m.gather(t, 4)
    with pytest.raises(nabla.ShapeError, match=r"out-of-bounds index 7 into array 'a' of length 4"):
        m.lut(np.array([0, 7], np.int32))
    assert "nb_oob_report" in m.dump("c", entry="gather")
    u = nabla.load_module_from_source(BOUNDS_SRC, "bounds.nb", device=dev, unchecked=True)
    np.testing.assert_array_equal(u.gather(t, np.array([3, 0], np.int32)), [40, 10])
    np.testing.assert_array_equal(u.lut(np.array([0, 3], np.int32)), [1, 4])
    assert "nb_oob_report" not in u.dump("c", entry="gather")
    assert "nb_oob_report" not in u.dump("cuda", entry="lut")


TALL_SRC = """
[Differentiable]
float energy(matrix<float, 20, 2> m)
{
    float s = 0;
    for (int i = 0; i < 20; i++) s += m[i][0] * m[i][1] * (i + 1);
    return s;
}
"""


@pytest.mark.parametrize("dev", devices())
def test_tall_matrix_binds_20x2_values_and_gradients(dev):
    # slang-torch's bezier2d holds 20 control points in a matrix<float, 20, 2>: a batch of them
    # binds as [..., 20, 2]; energy = sum (i + 1) m[i][0] m[i][1], d/dm[i] = (i + 1) (m[i][1], m[i][0])
    m = nabla.load_module_from_source(TALL_SRC, "tall.slang", device=dev)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 20, 2)).astype(np.float32)
    w = np.arange(1, 21, dtype=np.float32)
    np.testing.assert_allclose(m.energy(x), (x[..., 0] * x[..., 1] * w).sum(-1), rtol=1e-5, atol=1e-5)
    g = np.zeros_like(x)
    m.energy.bwds(x, _grads={"m": g}, _dout=np.ones(3, np.float32))
    np.testing.assert_allclose(g, np.stack([x[..., 1] * w, x[..., 0] * w], -1), rtol=1e-5, atol=1e-6)
    with pytest.raises(nabla.ShapeError, match=r"shape \[3,19,2\] but parameter .m. is matrix<float,20,2>"):
        m.energy(x[:, :19])

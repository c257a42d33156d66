"""SlangPy's generators as call arguments (`import nabla as spy`): call_id, thread_id, grid,
wang_hash, rand_float — the values SlangPy's documentation and tests give, their shapes, and the
errors for parameter types they cannot fill. CPU, and CUDA with a GPU."""
import numpy as np
import pytest

import nabla as spy
from nbtest import devices

SRC = """
int2 myfunc(int2 value) { return value; }
int2 myfuncarray(int value[2]) { return int2(value[0], value[1]); }
int3 myfunc3d(int3 value) { return value; }
uint3 hashes3(uint3 value) { return value; }
uint hashes(uint value) { return value; }
uint4 hashes4(uint4 value) { return value; }
int ids(int value) { return value; }
float3 randf3(float3 value) { return value; }
float randf(float value) { return value; }
float2 myfuncfloat(float2 value) { return value; }
int arr6(int value[6]) { return value[0] * 100000 + value[5]; }
float addi(float a, int i) { return a + float(i); }
int bucket(float v) { return int(v * 16.0); }
struct S { int a; };
int takes_struct(S s) { return s.a; }
void writes(out int x) { x = 1; }
"""

_mods = {}


def mod(dev):
    if dev not in _mods:
        _mods[dev] = spy.load_module_from_source(SRC, "gen.slang", device=dev)
    return _mods[dev]


def wang_np(s):
    m = np.uint64(0xFFFFFFFF)
    s = np.asarray(s, dtype=np.uint64) & m
    s = (s ^ np.uint64(61)) ^ (s >> np.uint64(16))
    s = (s * np.uint64(9)) & m
    s = s ^ (s >> np.uint64(4))
    s = (s * np.uint64(0x27D4EB2D)) & m
    s = s ^ (s >> np.uint64(15))
    return s.astype(np.uint32)


@pytest.mark.parametrize("dev", devices())
def test_call_id_vector_and_array(dev):
    m = mod(dev)
    res = np.zeros((4, 4, 2), dtype=np.int32)
    m.myfunc(spy.call_id(), _result=res)  # the design doc's example: x = the column
    assert res[0].tolist() == [[0, 0], [1, 0], [2, 0], [3, 0]]
    assert res[1].tolist() == [[0, 1], [1, 1], [2, 1], [3, 1]]
    m.myfuncarray(spy.call_id(), _result=res)  # arrays: the dims in order (transposed)
    assert res[0].tolist() == [[0, 0], [0, 1], [0, 2], [0, 3]]
    assert res[1].tolist() == [[1, 0], [1, 1], [1, 2], [1, 3]]
    # SlangPy's test_call_id: 16^3 call into int3
    r3 = np.zeros((16, 16, 16, 3), dtype=np.int32)
    m.myfunc3d(spy.call_id(3), _result=r3)
    expected = np.flip(np.indices((16, 16, 16)).reshape(3, -1).T, axis=1)
    assert np.array_equal(r3.reshape(-1, 3), expected)
    # a tuple is a grid of that shape
    g = m.myfunc(spy.call_id((2, 3)), _result="numpy")
    assert g.shape == (2, 3, 2) and g[1, 2].tolist() == [2, 1]


@pytest.mark.parametrize("dev", devices())
def test_call_id_beside_arrays(dev):
    m = mod(dev)
    a = np.array([10.0, 20.0, 30.0], dtype=np.float32)
    y = m.addi(a, spy.call_id())
    assert y.tolist() == [10.0, 21.0, 32.0]
    y = m.addi(a, i=spy.call_id())  # by name too
    assert y.tolist() == [10.0, 21.0, 32.0]


@pytest.mark.parametrize("dev", devices())
def test_grid(dev):
    m = mod(dev)
    r = m.myfunc(spy.grid(shape=(4, 4)), _result="numpy")
    assert r.shape == (4, 4, 2)
    assert r[0].tolist() == [[0, 0], [1, 0], [2, 0], [3, 0]]
    r = m.myfunc(spy.grid(shape=(4, 4), stride=(2, 2)), _result="numpy")
    assert r[1].tolist() == [[0, 2], [2, 2], [4, 2], [6, 2]]
    res = np.zeros((4, 4, 2), dtype=np.int32)
    m.myfunc(spy.grid(shape=(-1, -1), stride=(4, 4)), _result=res)
    assert res[1].tolist() == [[0, 4], [4, 4], [8, 4], [12, 4]]
    m.myfunc(spy.grid(2, offset=(-100, 50), stride=(3, 3)), _result=res)  # an int: that many -1 dims
    expected = np.flip(np.indices((4, 4)).transpose(1, 2, 0) * 3 + np.array([-100, 50]), axis=-1)
    assert np.array_equal(res, expected)
    # arrays of 6 dims (SlangPy's test_grid_arrays)
    shape = (2, 3, 1, 2, 2, 3)
    r6 = m.arr6(spy.grid(shape), _result="numpy")
    idx = np.indices(shape)
    assert r6.shape == shape and np.array_equal(r6, idx[0] * 100000 + idx[5])


@pytest.mark.parametrize("dev", devices())
def test_grid_map(dev):
    # .map places a grid's dims like an array's: grid dim 0 -> kernel dim 1, dim 1 -> kernel dim 0
    m = mod(dev)
    r = m.myfunc.map((1, 0))(spy.grid(shape=(2, 3)), _result="numpy")
    assert r.shape == (3, 2, 2)
    assert r.tolist() == [[[0, 0], [0, 1]], [[1, 0], [1, 1]], [[2, 0], [2, 1]]]
    with pytest.raises(spy.ArgumentError, match="no call dims to map"):
        m.myfunc.map((0,))(spy.call_id())


@pytest.mark.parametrize("dev", devices())
def test_grid_shape_mismatch(dev):
    m = mod(dev)
    res = np.zeros((4, 4, 2), dtype=np.int32)
    with pytest.raises(spy.ShapeError, match="grid"):
        m.myfunc(spy.grid(shape=(8, 8)), _result=res)
    with pytest.raises(spy.ArgumentError, match="a grid of 2 dims fills a vector or array of 2"):
        m.myfunc3d(spy.grid(shape=(2, 2)), _result="numpy")
    with pytest.raises(ValueError):
        spy.grid(shape=(2, 2), stride=(1,))


@pytest.mark.parametrize("dev", devices())
def test_thread_id(dev):
    m = mod(dev)
    r = np.zeros((4, 4, 3), dtype=np.int32)
    m.myfunc3d(spy.thread_id(), _result=r)  # the design doc's example
    assert r[0].tolist() == [[0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 0]]
    assert r[1, 0].tolist() == [4, 0, 0]
    r1 = np.zeros((128,), dtype=np.int32)
    m.ids(spy.thread_id(), _result=r1)
    assert r1.tolist() == list(range(128))


@pytest.mark.parametrize("dev", devices())
def test_wang_hash_matches_slangpy(dev):
    m = mod(dev)
    for warmup in (0, 1, 2):
        for hash_seed in (False, True):
            for seed in (0, 2640457667):
                res = np.zeros((16, 3), dtype=np.uint32)
                m.hashes3(spy.WangHashArg(3, seed=seed, warmup=warmup, hash_seed=hash_seed), _result=res)
                h = np.arange(16, dtype=np.uint32) * 3
                s = wang_np(seed) if hash_seed else np.uint32(seed)
                for _ in range(warmup):
                    h = wang_np(h)
                d0 = wang_np(h ^ s)
                d1 = wang_np(d0)
                d2 = wang_np(d1)
                assert np.array_equal(res, np.stack((d0, d1, d2), axis=-1))
                r1 = np.zeros((16,), dtype=np.uint32)
                m.hashes(spy.wang_hash(warmup=warmup, hash_seed=hash_seed, seed=seed), _result=r1)
                h = np.arange(16, dtype=np.uint32)
                for _ in range(warmup):
                    h = wang_np(h)
                assert np.array_equal(r1, wang_np(h ^ s))
    assert spy.calc_wang_hash(2640457667) == int(wang_np(2640457667))


@pytest.mark.parametrize("dev", devices())
def test_rand_float(dev):
    m = mod(dev)
    count = 1000
    res = np.zeros((count, 3), dtype=np.float32)
    m.randf3(spy.RandFloatArg(1.0, 3.0, 3, seed=7, hash_seed=True), _result=res)
    h = np.arange(count, dtype=np.uint32) * 3
    h0 = wang_np(h ^ wang_np(7))
    h1 = wang_np(h0)
    h2 = wang_np(h1)
    u = (np.stack((h0, h1, h2), axis=-1) & 0x7FFFFF) / float(0x800000)
    assert np.allclose(res, 1.0 + 2.0 * u)
    assert res.min() >= 1.0 and res.max() < 3.0
    # the design doc's call: a 4x4 of float2 in [0, 10)
    rf = np.zeros((4, 4, 2), dtype=np.float32)
    m.myfuncfloat(spy.rand_float(min=0, max=10), _result=rf)
    assert rf.min() >= 0 and rf.max() < 10 and len(np.unique(rf)) == 32


@pytest.mark.parametrize("dev", devices())
def test_rand_float_uniform_over_grid(dev):
    # a grid gives the call its shape; rand_float fills the other parameter (SlangPy's uniformity test)
    m = spy.load_module_from_source("int bucket(int id, float v) { return int(v * 16.0); }", "u.slang",
                                    device=dev)
    b = m.bucket(spy.grid((200000,)), spy.rand_float(), _result="numpy")
    counts = np.bincount(b, minlength=17)
    assert counts[16] == 0
    assert np.all(np.abs(counts[:16] - 200000 / 16) / (200000 / 16) < 0.03)


@pytest.mark.parametrize("dev", devices())
def test_generator_errors(dev):
    m = mod(dev)
    res = np.zeros((4,), dtype=np.float32)
    with pytest.raises(spy.ArgumentError, match=r"call_id\(\) cannot fill parameter 'value' \(float\)"):
        m.randf(spy.call_id(), _result=res)
    with pytest.raises(spy.ArgumentError, match=r"rand_float\(\) cannot fill parameter 'value' \(uint3\)"):
        m.hashes3(spy.rand_float(), _result=np.zeros((4, 3), dtype=np.uint32))
    with pytest.raises(spy.ArgumentError, match="struct"):
        m.takes_struct(spy.call_id(), _result=np.zeros((4,), dtype=np.int32))
    with pytest.raises(spy.ArgumentError, match="written by the call"):
        m.writes(spy.thread_id())
    with pytest.raises(spy.ArgumentError, match="dims=3"):
        m.myfunc(spy.call_id(3), _result=np.zeros((4, 4, 2), dtype=np.int32))
    with pytest.raises(spy.ShapeError, match="needs a call of rank 2"):
        m.myfunc(spy.call_id())  # no other argument gives a shape
    with pytest.raises(spy.ShapeError, match="needs a call of rank 2"):
        m.myfunc(spy.call_id(), _result=np.zeros((4, 4, 4, 2), dtype=np.int32))
    with pytest.raises(spy.ArgumentError, match="at most 3 components"):
        m.hashes4(spy.wang_hash(), _result=np.zeros((4, 4), dtype=np.uint32))
    with pytest.raises(spy.ArgumentError, match="not arrays"):
        m.arr6(spy.wang_hash(), _result=np.zeros((4,), dtype=np.int32))
    with pytest.raises(TypeError):
        spy.call_id("x")
    with pytest.raises(ValueError):
        spy.wang_hash(warmup=-1)


@pytest.mark.parametrize("dev", devices())
def test_generators_in_derivative_calls(dev):
    m = spy.load_module_from_source(
        "[Differentiable] float f(float x, no_diff float r, int i) { return x * x * r + float(i); }",
        "d.slang", device=dev)
    x = np.array([1.0, 2.0, 3.0], np.float32)
    assert m.f(x, spy.rand_float(1, 1), spy.call_id()).tolist() == [1.0, 5.0, 11.0]
    gx = spy.Tensor.zeros((3,), device=dev)
    m.f.bwds(spy.Tensor.from_numpy(x, device=dev), spy.rand_float(2, 2), spy.call_id(), _grads={"x": gx})
    assert gx.to_numpy().tolist() == [4.0, 8.0, 12.0]
    y, dy = m.f.fwds(x, spy.rand_float(2, 2), spy.call_id(), _tangents={"x": np.ones(3, np.float32)})
    assert y.tolist() == [2.0, 9.0, 20.0] and dy.tolist() == [4.0, 8.0, 12.0]


def test_generators_refused_in_kernel_dispatch():
    """SlangPy's raw dispatch (f.dispatch of a [numthreads] / thread-id function) binds arguments
    as uniforms; its generator marshalls write no dispatch data (create_dispatchdata is not
    implemented for call_id / thread_id / wang_hash / rand_float / grid), so generators do not
    work there. nabla refuses them with an ArgumentError naming the parameter and pointing to
    dispatch_id() instead of running with an unset value."""
    m = spy.load_module_from_source(
        "[Kernel] void k(Tensor<int, 1> dst, int v) { uint3 id = dispatch_id(); dst[id.x] = v; }\n",
        "kgen.slang", device="cpu")
    dst = spy.Tensor.zeros((4,), "i32", device="cpu")
    for g in (spy.call_id(), spy.thread_id(), spy.wang_hash(), spy.rand_float(), spy.grid((4,))):
        with pytest.raises(spy.ArgumentError, match=r"\[Kernel\] functions take no generators \('v' is .*dispatch_id"):
            m.k.dispatch(4, dst, g)
    assert dst.to_numpy().tolist() == [0, 0, 0, 0]
    m.k.dispatch(4, dst, 7)
    assert dst.to_numpy().tolist() == [7, 7, 7, 7]

"""launch.c: Function.launch_raw (explicit-block launches of [Kernel] / [CudaKernel] functions,
their fwd / bwd derivative kernels with (primal, grad) pairs), kernel_params, param_types,
is_kernel and CModule.functions() -- the C entry points nabla.slangtorch is built on. CPU here
(numpy, nabla tensors, CPU torch tensors); the same on CUDA on a GPU machine."""
import numpy as np
import pytest

import nabla
from nbtest import devices

SRC = """
groupshared float partial[64];
[CudaKernel]
void blockSums(TensorView<float> x, TensorView<float> sums)
{
    uint t = cudaThreadIdx().x;
    partial[t] = x[cudaBlockIdx().x * cudaBlockDim().x + t];
    GroupMemoryBarrierWithGroupSync();
    for (uint s = cudaBlockDim().x / 2; s > 0; s /= 2) {
        if (t < s) partial[t] += partial[t + s];
        GroupMemoryBarrierWithGroupSync();
    }
    if (t == 0) sums[cudaBlockIdx().x] = partial[0];
}
[CudaKernel]
void ids(TensorView<uint> o)
{
    uint3 t = cudaThreadIdx(), b = cudaBlockIdx(), bd = cudaBlockDim(), gd = cudaGridDim();
    uint i = (b.y * gd.x + b.x) * bd.x * bd.y + t.y * bd.x + t.x;
    o[i, 0] = t.x; o[i, 1] = t.y; o[i, 2] = b.x; o[i, 3] = b.y; o[i, 4] = gd.x;
}
[CudaKernel] [Differentiable]
void square(DiffTensorView input, DiffTensorView output)
{
    uint i = cudaThreadIdx().x + cudaBlockIdx().x * cudaBlockDim().x;
    if (i >= input.size(0)) return;
    output[i] = input[i] * input[i];
}
struct Linear { DiffTensorView weights; DiffTensorView bias; };
struct Mlp { Linear layers[2]; float3 scale; };
[CudaKernel] [Differentiable]
void mlp(Mlp m, DiffTensorView y)
{
    uint i = cudaThreadIdx().x;
    if (i >= y.size(0)) return;
    y[i] = m.scale[i] * (m.layers[0].weights[i] * m.layers[1].bias[i] + m.layers[1].weights[i]);
}
float plain(float x) { return x; }
"""


def module(dev):
    return nabla.load_module_from_source(SRC, "launch_test.slang", device=dev)


def f32(*v):
    return np.array(v, dtype=np.float32)


@pytest.mark.parametrize("dev", devices())
def test_blocks_groupshared_and_ids(dev):
    m = module(dev)
    x = nabla.Tensor.from_numpy(np.arange(12, dtype=np.float32), device=dev)
    sums = nabla.Tensor.zeros((3,), dtype="f32", device=dev)
    m.blockSums.launch_raw((4, 1, 1), (3, 1, 1), args={"x": x, "sums": sums})
    assert sums.numpy().tolist() == [6, 22, 38]
    o = nabla.Tensor.zeros((16, 5), dtype="u32", device=dev)
    m.ids.launch_raw((2, 2), (2, 2), args={"o": o})
    got = o.numpy()
    for i in range(16):
        t, b = i % 4, i // 4
        assert got[i].tolist() == [t % 2, t // 2, b % 2, b // 2, 2]


def test_numpy_and_torch_in_place():
    m = module("cpu")
    x = f32(1, 2, 3, 4, 5)
    y = np.zeros(5, np.float32)
    m.square.launch_raw((2,), (3,), args={"input": x, "output": y})
    assert y.tolist() == [1, 4, 9, 16, 25]
    torch = pytest.importorskip("torch")
    X = torch.tensor([1.0, 2.0, 3.0])
    Y = torch.zeros(3)
    m.square.launch_raw((32, 1, 1), (1, 1, 1), args={"input": X, "output": Y})
    assert Y.tolist() == [1, 4, 9]


def test_torch_cuda_zero_copy_on_current_stream():
    torch = pytest.importorskip("torch")
    if "cuda" not in devices() or not torch.cuda.is_available():
        pytest.skip("no CUDA device (or torch without CUDA)")
    m = module("cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):  # nabla's launch is ordered after torch's work on its current stream
        X = torch.arange(1, 4097, dtype=torch.float32, device="cuda") * 0.5
        Y = torch.zeros_like(X)
        Xg, Yg = torch.zeros_like(X), torch.ones_like(X)
        m.square.launch_raw((256, 1, 1), (16, 1, 1), args={"input": X, "output": Y})
        m.square.launch_raw((256, 1, 1), (16, 1, 1), mode="bwd", args={"input": (X, Xg), "output": (Y, Yg)})
        total = (Y.sum() + Xg.sum()).item()  # torch work after nabla's, on the same stream
    want = float((X * X).sum() + (2 * X).sum())
    assert abs(total - want) <= 1e-4 * abs(want)
    # a tensor on another device than the module's: DeviceError, never a silent copy
    with pytest.raises(nabla.DeviceError, match="'input' is on cuda:0 but the module runs on cpu"):
        module("cpu").square.launch_raw((32,), (1,), args={"input": X, "output": torch.zeros(4096)})
    with pytest.raises(nabla.DeviceError, match="'output' is on cpu but the module runs on cuda:0"):
        m.square.launch_raw((32,), (1,), args={"input": X, "output": torch.zeros(4096)})


@pytest.mark.parametrize("dev", devices())
def test_bwd_fwd_pairs(dev):
    m = module(dev)
    T = lambda a: nabla.Tensor.from_numpy(a, device=dev)
    X, Y = T(f32(1, 2, 3, 4)), T(np.zeros(4, np.float32))
    Xg, Yg = T(np.zeros(4, np.float32)), T(f32(1, 0, 1, 0))
    m.square.launch_raw((32, 1, 1), (1, 1, 1), mode="bwd", args={"input": (X, Xg), "output": (Y, Yg)})
    assert Xg.numpy().tolist() == [2, 0, 6, 0]
    Xt, Yt = T(f32(1, 0, 0, 1)), T(np.zeros(4, np.float32))
    m.square.launch_raw((32, 1, 1), (1, 1, 1), mode="fwd", args={"input": (X, Xt), "output": (Y, Yt)})
    assert Y.numpy().tolist() == [1, 4, 9, 16]
    assert Yt.numpy().tolist() == [2, 0, 0, 8]


def test_struct_array_paths_and_host_vectors():
    m = module("cpu")
    w0, b0, w1, b1 = f32(1, 2, 3), f32(0, 0, 0), f32(10, 20, 30), f32(2, 2, 2)
    y, dy = np.zeros(3, np.float32), f32(1, 1, 2)
    dy0 = dy.copy()  # (the store's reverse mode consumes y's gradient, as Slang's DiffTensorView)
    g = {k: np.zeros(3, np.float32) for k in ("w0", "b0", "w1", "b1")}
    m.mlp.launch_raw((32, 1, 1), (1, 1, 1), mode="bwd", args={
        "m.layers[0].weights": (w0, g["w0"]), "m.layers[0].bias": (b0, g["b0"]),
        "m.layers[1].weights": (w1, g["w1"]), "m.layers[1].bias": (b1, g["b1"]),
        "m.scale": (0.5, 1.0, 2.0), "y": (y, dy)})
    s = np.array([0.5, 1.0, 2.0], np.float32)
    assert g["w0"].tolist() == (s * b1 * dy0).tolist()
    assert g["b1"].tolist() == (s * w0 * dy0).tolist()
    assert g["w1"].tolist() == (s * dy0).tolist()
    assert g["b0"].tolist() == [0, 0, 0]
    assert dy.tolist() == [0, 0, 0]


def test_reflection():
    m = module("cpu")
    f = m.mlp
    assert f.is_kernel and not m.plain.is_kernel
    leaves = f.kernel_params()
    assert [d["path"] for d in leaves] == ["m.layers[0].weights", "m.layers[0].bias", "m.layers[1].weights",
                                           "m.layers[1].bias", "m.scale", "y"]
    assert leaves[0]["is_diff_tensor"] and leaves[0]["tensor_rank"] == 1 and leaves[0]["dtype"] == "f32"
    assert leaves[4]["value_shape"] == (3,) and not leaves[4]["is_tensor"]
    assert f.param_types() == {"m": "Mlp", "m.layers": "Linear[2]", "m.layers[0]": "Linear", "m.layers[1]": "Linear"}
    assert m.square.param_types() == {}
    assert m._cmod.functions() == ["blockSums", "ids", "square", "mlp", "plain"]


def test_errors():
    m = module("cpu")
    x, y = f32(1, 2), np.zeros(2, np.float32)
    with pytest.raises(nabla.ArgumentError, match="block size x is 2048; it must be 1..1024"):
        m.square.launch_raw((2048, 1, 1), (1, 1, 1), args={"input": x, "output": y})
    with pytest.raises(nabla.ArgumentError, match="grid size y is 0"):
        m.square.launch_raw((32, 1, 1), (1, 0, 1), args={"input": x, "output": y})
    with pytest.raises(nabla.ArgumentError, match="square.bwd: DiffTensor parameter 'input' has no gradient tensor"):
        m.square.launch_raw((32,), (1,), mode="bwd", args={"input": x, "output": (y, f32(1, 1))})
    with pytest.raises(nabla.ArgumentError, match="missing argument for parameter 'output'"):
        m.square.launch_raw((32,), (1,), args={"input": x})
    with pytest.raises(nabla.NotFoundError, match="outptu"):
        m.square.launch_raw((32,), (1,), args={"input": x, "outptu": y})
    with pytest.raises(ValueError, match="mode must be"):
        m.square.launch_raw((32,), (1,), mode="backward", args={"input": x, "output": y})
    with pytest.raises(TypeError, match="block must be a tuple of 1 to 3 ints"):
        m.square.launch_raw((32, 1, 1, 1), (1,), args={"input": x, "output": y})
    with pytest.raises(nabla.ArgumentError, match="uses groupshared memory"):
        m.blockSums.dispatch((4, 1, 1), x=f32(1, 2, 3, 4), sums=f32(0))
    with pytest.raises(nabla.ArgumentError, match="only \\[Kernel\\] functions"):
        m.plain.launch_raw((1,), (1,), args={"x": 1.0})


MANY_SRC = """
[CudaKernel]
void many(TensorView<float> a, TensorView<float> b, TensorView<float> c, TensorView<float> d,
          float s0, float s1, float s2, int k, TensorView<float> o)
{
    uint i = cudaThreadIdx().x + cudaBlockIdx().x * cudaBlockDim().x;
    if (i >= o.size(0)) return;
    o[i] = a[i] * s0 + b[i] * s1 + c[i] * s2 + d[i] * float(k);
}
"""


@pytest.mark.parametrize("dev", devices())
def test_many_arguments_and_host_scalars(dev):
    # 9 arguments: past the slots launch_raw keeps on the stack (host scalars point into their slot)
    m = nabla.load_module_from_source(MANY_SRC, "launch_many.slang", device=dev)
    a, b, c, d = f32(1, 2, 3), f32(10, 20, 30), f32(100, 200, 300), f32(1000, 2000, 3000)
    for _ in range(3):  # (again: nothing left over from the previous launch)
        o = np.zeros(3, np.float32)
        m.many.launch_raw((2, 1, 1), (2, 1, 1), args={"a": a, "b": b, "c": c, "d": d, "s0": 1.0, "s1": 2.0,
                                                      "s2": 0.5, "k": -1, "o": o})
        assert o.tolist() == (a + 2 * b + 0.5 * c - d).tolist()

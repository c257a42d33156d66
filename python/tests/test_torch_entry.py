"""slang-torch [TorchEntryPoint] host functions from Python: m.square_fwd(x) as the slangtorch
tutorial calls it (torch in -> torch out on the same device, numpy in -> numpy out), struct
arguments and results as slang-torch passes them, and the errors for bad arguments."""
import os

import numpy as np
import pytest

import nabla
from nbtest import ROOT, devices

SQUARE = os.path.join(ROOT, "examples", "square.slang")
TESTS = os.path.join(ROOT, "tests", "lang")

STRUCTS = """
[CudaKernel]
void addv(TensorView<float> a, TensorView<float> r, float v)
{
    uint2 p = (cudaBlockIdx() * cudaBlockDim() + cudaThreadIdx()).xy;
    if (p.x < a.size(0) && p.y < a.size(1)) r[p] = a[p] + v;
}

struct Inputs { TorchTensor<float> input; float value; }
struct Inner { TorchTensor<float> t; int n; }
struct Outputs { TorchTensor<float> v0; Inner inner; float scale; }

[TorchEntryPoint]
Outputs run(Inputs inputs)
{
    Outputs o;
    o.v0 = inputs.input;
    o.inner.t = TorchTensor<float>.zerosLike(inputs.input);
    __dispatch_kernel(addv, uint3(1), uint3(inputs.input.size(0), inputs.input.size(1), 1))(inputs.input, o.inner.t, inputs.value);
    o.inner.n = int(inputs.input.dims());
    o.scale = inputs.value * 2;
    return o;
}

[TorchEntryPoint]
void addInPlace(TorchTensor<float> a, float v)
{
    __dispatch_kernel(addv, uint3(1), uint3(a.size(0), a.size(1), 1))(a, a, v);
}

[TorchEntryPoint]
TorchTensor<double> ones(int n)
{
    var t = TorchTensor<double>.alloc(n);
    return t;
}
"""


def square(dev="cpu"):
    return nabla.load_module(SQUARE, device=dev)


def test_square_numpy_in_numpy_out():
    m = square()
    assert m.square_fwd.is_host and not m.square.is_host
    x = np.array([[3, 4], [0, 1]], np.float32)
    y = m.square_fwd(x)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.tolist() == [[9, 16], [0, 1]]
    g = m.square_bwd(x, np.ones((2, 2), np.float32))
    assert g.tolist() == [[6, 8], [0, 2]]
    # lists are converted to the parameter's dtype; keywords by parameter name
    assert m.square_fwd(input=[[1, 2]]).tolist() == [[1, 4]]


def test_square_torch_same_device_and_autograd_function():
    torch = pytest.importorskip("torch")
    for dev in devices():
        m = square(dev)
        td = "cuda" if dev == "cuda" else "cpu"

        class MySquareFuncInSlang(torch.autograd.Function):
            @staticmethod
            def forward(ctx, input):
                ctx.save_for_backward(input)
                return m.square_fwd(input)

            @staticmethod
            def backward(ctx, grad_output):
                [input] = ctx.saved_tensors
                return m.square_bwd(input, grad_output)

        x = torch.tensor([[3.0, 4.0], [0.0, 1.0]], requires_grad=True, device=td)
        y = MySquareFuncInSlang.apply(x)
        assert isinstance(y, torch.Tensor) and y.device == x.device
        assert y.detach().cpu().tolist() == [[9, 16], [0, 1]]
        y.sum().backward()
        assert x.grad.cpu().tolist() == [[6, 8], [0, 2]]
        # a bigger tensor: one block of 16x16 threads
        r = torch.rand(16, 16, device=td)
        assert torch.allclose(m.square_fwd(r), r * r)


def test_struct_arguments_and_results():
    for dev in devices():
        m = nabla.load_module_from_source(STRUCTS, "structs.slang", device=dev)
        x = np.array([[1, 2], [3, 4]], np.float32)
        v0, (t, n), scale = m.run([x, 1.5])  # slang-torch's runCompute([X, 1.0])
        assert v0.tolist() == x.tolist() and t.tolist() == [[2.5, 3.5], [4.5, 5.5]]
        assert n == 2 and isinstance(n, int) and scale == 3.0
        assert m.run({"input": x, "value": 1})[1][0].tolist() == [[2, 3], [4, 5]]

        class NS:
            input = x
            value = 0.0
        assert m.run(NS())[1][0].tolist() == x.tolist()
        # a kernel writing through an argument writes the caller's array (numpy: written back)
        a = np.zeros((2, 3), np.float32)
        assert m.addInPlace(a, 2.0) is None
        assert a.tolist() == [[2, 2, 2], [2, 2, 2]]
        assert m.ones(3).shape == (3,) and m.ones(3).dtype == np.float64


def test_struct_torch_results_on_the_inputs_device():
    torch = pytest.importorskip("torch")
    for dev in devices():
        m = nabla.load_module_from_source(STRUCTS, "structs.slang", device=dev)
        x = torch.zeros(2, 2, device="cuda" if dev == "cuda" else "cpu")
        out = m.run([x, 1.0])
        assert isinstance(out, tuple) and isinstance(out[1][0], torch.Tensor)
        assert out[1][0].device == x.device and out[1][0].cpu().tolist() == [[1, 1], [1, 1]]
        # the input returned as a result is the same memory (zero-copy both ways)
        assert out[0].data_ptr() == x.data_ptr()


def test_slang_torch_test_files():
    """slang-torch's own tests/*.slang host functions (copied at /work/notes when present)."""
    d = "/work/notes/slang-torch-files/tests"
    if not os.path.isdir(d):
        pytest.skip("slang-torch's test files are not here")
    x = np.array([[1, 2], [3, 4]], np.float32)
    m = nabla.load_module(os.path.join(d, "multiply.slang"), device="cpu", defines={"FACTOR": "2.0"})
    assert m.multiply(x).tolist() == [[2, 4], [6, 8]]
    m = nabla.load_module(os.path.join(d, "addarrays.slang"), device="cpu")
    assert m.add_fwd(x, x * 10).tolist() == [[11, 22], [33, 44]]
    m = nabla.load_module(os.path.join(d, "smoke.slang"), device="cpu")
    assert m.runCompute([np.zeros((2, 2), np.float32), 1.0])[1].tolist() == [[1, 1], [1, 1]]
    m = nabla.load_module(os.path.join(d, "multiply_half.slang"), device="cpu")
    assert m.multiply(x.astype(np.float16)).tolist() == [[2, 4], [6, 8]]


def test_errors():
    m = square()
    x = np.ones((2, 2), np.float32)
    with pytest.raises(nabla.ArgumentError, match="square_fwd takes 1 argument, 2 given"):
        m.square_fwd(x, x)
    with pytest.raises(nabla.ArgumentError, match="missing argument 'grad_in'"):
        m.square_bwd(x)
    with pytest.raises(nabla.ArgumentError, match="no parameter 'foo'"):
        m.square_fwd(x, foo=1)
    with pytest.raises(nabla.DtypeError, match="argument 'input' is f64 but parameter 'input' is TorchTensor<f32>"):
        m.square_fwd(np.ones((2, 2)))
    with pytest.raises(nabla.ArgumentError, match="is a TorchTensor<f32>; a number was given"):
        m.square_fwd(2.0)
    with pytest.raises(nabla.ShapeError, match=r"square_fwd: size\(1\) of a 1-dimensional tensor"):
        m.square_fwd(np.ones(3, np.float32))
    with pytest.raises(nabla.ArgumentError, match="host function"):
        m.square_fwd.bwds(x)
    s = nabla.load_module_from_source(STRUCTS, "structs.slang", device="cpu")
    with pytest.raises(nabla.ArgumentError, match="a number .* a tensor was given"):
        s.addInPlace(x, x)
    with pytest.raises(nabla.ArgumentError, match="missing 'inputs.value'"):
        s.run([x])
    with pytest.raises(nabla.DtypeError, match="is an integer"):
        s.ones(2.5)


def test_torch_on_another_device_is_an_error():
    torch = pytest.importorskip("torch")
    if "cuda" not in devices():
        pytest.skip("needs CUDA")
    m = square("cuda")
    with pytest.raises(nabla.DeviceError, match="argument 'input' is on cpu"):
        m.square_fwd(torch.ones(2, 2))


def test_compile_errors_have_carets():
    with pytest.raises(nabla.CompileError, match="TorchTensor is not allowed in device functions"):
        nabla.load_module(os.path.join(TESTS, "diag_torch_entry.slang"), device="cpu")


VALUES = """
[CudaKernel]
void shift3(TensorView<float3> src, TensorView<float3> dst, float3 by)
{
    uint i = (cudaBlockIdx() * cudaBlockDim() + cudaThreadIdx()).x;
    if (i < src.size(0)) dst[i] = src[i] + by;
}

struct Mix { float2x2 m; int k[2]; }

[CudaKernel]
void mix(DiffTensorView x, TensorView<float> r, Mix p, float w[2])
{
    uint i = cudaThreadIdx().x;
    if (i < x.size(0)) r[i] = x.primal[i] * p.m[1][0] + x.diff.diff[i] * w[1] + p.k[1];
}

[TorchEntryPoint]
TorchTensor<float3> shifted(TorchTensor<float3> points, float3 by)
{
    var r = TorchTensor<float3>.alloc(points.size(0));
    __dispatch_kernel(shift3, uint3((points.size(0) + 1) / 2, 1, 1), uint3(2, 1, 1))(points, r, by);
    return r;
}

struct Res { float3 v; TorchTensor<float> t[2]; int2 n; bool2 b; }

[TorchEntryPoint]
Res mixed(TorchTensor<float> x, TorchTensor<float> dx, float2x2 m, int2 k, float w[2])
{
    Res o;
    o.t[0] = TorchTensor<float>.zerosLike(x);
    o.t[1] = x;
    Mix p;
    p.m = m;
    p.k[0] = k.x;
    p.k[1] = k.y;
    __dispatch_kernel(mix, uint3(1), uint3(x.size(0), 1, 1))(DiffTensorView(x, dx), o.t[0], p, w);
    o.v = float3(m[0][0], m[0][1], w[0]);
    o.n = k * 2;
    o.b = bool2(true, false);
    return o;
}

[TorchEntryPoint]
float2x2 twice(float2x2 m, TorchTensor<float> ts[2])
{
    return m * float(ts[0].size(0) + ts[1].size(0));
}
"""


def test_vector_matrix_array_values_and_float3_tensors():
    for dev in devices():
        m = nabla.load_module_from_source(VALUES, "values.slang", device=dev)
        pts = np.arange(9, dtype=np.float32).reshape(3, 3)
        # TorchTensor<float3>: [n, 3] in, [n, 3] out; a float3 as a tuple, list or numpy array
        for by in ((1, 10, 100), [1.0, 10.0, 100.0], np.array([1, 10, 100], np.float32)):
            r = m.shifted(pts, by)
            assert r.shape == (3, 3) and r.tolist() == (pts + [1, 10, 100]).tolist()
        # matrices as rows, int vectors, arrays; DiffTensorView(x, dx) reaches the kernel
        x, dx = np.array([1, 2], np.float32), np.array([0.5, 0.25], np.float32)
        v, (t0, t1), n, b = m.mixed(x, dx, ((1, 2), (3, 4)), (5, 6), [7, 8])
        assert v == (1.0, 2.0, 7.0) and n == (10, 12) and b == (True, False)
        assert all(isinstance(i, int) for i in n) and t1.tolist() == [1, 2]
        assert t0.tolist() == [1 * 3 + 0.5 * 8 + 6, 2 * 3 + 0.25 * 8 + 6]
        assert m.twice(((1, 2), (3, 4)), [np.zeros(2, np.float32), np.zeros(3, np.float32)]) == \
            ((5.0, 10.0), (15.0, 20.0))
        # keywords
        assert m.shifted(points=pts, by=(0, 0, 0)).tolist() == pts.tolist()
        # an array of TorchTensors as the result: a tuple of tensors
        t = nabla.load_module(os.path.join(TESTS, "torch_entry_values.slang"), device=dev)
        a, b = t.swap(np.ones(1, np.float32), np.zeros(2, np.float32))
        assert a.tolist() == [0, 0] and b.tolist() == [1]
        # a struct of views filled in host code and passed to __dispatch_kernel
        w, bias = np.array([1, 2], np.float32), np.array([10, 20], np.float32)
        assert t.layer(w, bias, 3).tolist() == [317, 330]
        with pytest.raises(nabla.ArgumentError, match="argument 'l.b' was never given a TorchTensor"):
            t.layerUnset(w)


def test_float3_tensors_from_torch():
    torch = pytest.importorskip("torch")
    for dev in devices():
        m = nabla.load_module_from_source(VALUES, "values.slang", device=dev)
        td = "cuda" if dev == "cuda" else "cpu"
        pts = torch.arange(12, dtype=torch.float32, device=td).reshape(4, 3)
        r = m.shifted(pts, (1, 2, 3))
        assert isinstance(r, torch.Tensor) and r.device == pts.device and r.shape == (4, 3)
        assert torch.equal(r, pts + torch.tensor([1.0, 2.0, 3.0], device=td))


def test_vector_and_float3_errors():
    m = nabla.load_module_from_source(VALUES, "values.slang", device="cpu")
    pts = np.zeros((2, 3), np.float32)
    with pytest.raises(nabla.ShapeError, match=r"argument 'by' is a f32\[3\]: give 3 items, got 2"):
        m.shifted(pts, (1, 2))
    with pytest.raises(nabla.ShapeError, match=r"argument 'by' is a f32\[3\]: give a sequence of 3, got 1.0"):
        m.shifted(pts, 1.0)
    with pytest.raises(TypeError, match=r"argument 'by' is a f32\[3\]: its items must be numbers"):
        m.shifted(pts, (1, "a", 3))
    with pytest.raises(nabla.ShapeError, match="TorchTensor of f32 vectors of 3: its last dimension must be 3"):
        m.shifted(np.zeros((3, 2), np.float32), (1, 2, 3))
    with pytest.raises(nabla.DtypeError, match=r"argument 'pts'|argument 'points' is f64"):
        m.shifted(np.zeros((3, 3)), (1, 2, 3))
    x = np.ones(2, np.float32)
    with pytest.raises(nabla.ShapeError, match=r"argument 'm' is a f32\[2\]\[2\]: give 2 items in each row, got 3"):
        m.mixed(x, x, ((1, 2, 3), (3, 4, 5)), (5, 6), [7, 8])
    with pytest.raises(nabla.DtypeError, match=r"argument 'k' is an integer \(i32\[2\]\); 6.5 was given"):
        m.mixed(x, x, ((1, 2), (3, 4)), (5, 6.5), [7, 8])
    with pytest.raises(nabla.ArgumentError, match="argument 'ts' is an array of 2"):
        m.twice(((1, 2), (3, 4)), [x])

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

"""The SlangPy design's (SP#016, /work/shared/seeds/001) Python, step by step, with `import nabla
as spy`: each of its 11 code steps runs as written (typos fixed) and its results are checked
against numpy. CPU always; CUDA too when a GPU is usable (NB_REQUIRE_CUDA=1 makes its absence a
failure). The Slang files are examples/python/slangpy_design/."""
import os

import numpy
import pytest

import nabla as spy
from nabla.types import Tensor
from nbtest import ROOT, devices

DIR = os.path.join(ROOT, "examples", "python", "slangpy_design")
EXAMPLE = os.path.join(DIR, "example.slang")
TEST = os.path.join(DIR, "test.slang")


def _device(kind):
    return spy.init_device(type=spy.DeviceType.cuda if kind == "cuda" else spy.DeviceType.cpu)


def test_step01_addbuffer_dispatch():
    for kind in devices():
        device = _device(kind)
        module = spy.Module.load_from_file(device, EXAMPLE)
        a = numpy.random.rand(1024)
        b = numpy.random.rand(1024)
        r = numpy.zeros(1024)
        bufferA = spy.NDBuffer(device, shape=(1024,))
        bufferB = spy.NDBuffer(device, shape=(1024,))
        bufferRs = spy.NDBuffer(device, shape=(1024,))
        bufferA.from_numpy(a)
        bufferB.from_numpy(b)
        bufferRs.from_numpy(r)
        module.addBuffer.dispatch(1024, bufferA, bufferB, bufferRs)
        assert str(bufferRs).startswith("[")
        numpy.testing.assert_allclose(bufferRs.to_numpy(), (a + b).astype(numpy.float32), rtol=1e-6)


def test_step02_add_direct():
    for kind in devices():
        device = _device(kind)
        module = spy.Module.load_from_file(device, EXAMPLE)
        pa = numpy.random.rand(1024)
        pb = numpy.random.rand(1024)
        result = module.add(pa, pb)
        assert result.shape == (1024,)
        numpy.testing.assert_allclose(result, pa + pb, rtol=1e-6)


def test_step03_scalars():
    module = spy.Module.load_from_file(spy.init_device(type="cpu"), TEST)
    assert module.test(5, 6.0) == 11.0


def test_step04_vector_from_list():
    module = spy.Module.load_from_file(spy.init_device(type="cpu"), TEST)
    assert module.test1([5, 6, 7]) == 18.0


def test_step05_vector_array_from_list():
    module = spy.Module.load_from_file(spy.init_device(type="cpu"), TEST)
    # the float3[2] overload, called once (not float3 vectorized over 2)
    assert float(module.test1([[1, 2, 3], [5, 6, 7]])) == 24.0


def test_step06_numpy_to_array_and_matrix():
    for kind in devices():
        module = spy.Module.load_from_file(_device(kind), TEST)
        assert float(module.test1(numpy.zeros((2, 3)))) == 0.0
        assert float(module.test1(numpy.ones((2, 3)))) == 6.0
        assert float(module.test2(numpy.zeros((3, 3)))) == 0.0
        assert float(module.test2(numpy.diag([1.0, 2.0, 4.0]))) == 7.0


def test_step07_struct_dict():
    for kind in devices():
        module = spy.Module.load_from_file(_device(kind), TEST)
        assert float(module.testStruct({"x": 5, "y": 6.0})) == 11.0


def test_step08_struct_dict_with_type():
    module = spy.Module.load_from_file(spy.init_device(type="cpu"), TEST)
    assert float(module.testStruct({'_type': 'MyType', 'x': 5, 'y': 6.0})) == 11.0
    with pytest.raises(spy.ArgumentError, match="_type 'Pixel'.*'MyType'"):
        module.testStruct({'_type': 'Pixel', 'x': 5, 'y': 6.0})


def test_step09_ndbuffer_struct_dtype():
    for kind in devices():
        device = _device(kind)
        module = spy.Module.load_from_file(device, EXAMPLE)
        tmod = spy.Module.load_from_file(device, TEST)
        image_1 = spy.NDBuffer(device, dtype=tmod.Pixel, shape=(16, 16))
        image_2 = spy.NDBuffer(device, dtype=tmod.Pixel, shape=(16, 16))
        image_2.from_numpy(0.1 * numpy.random.rand(16 * 16 * 3).astype(numpy.float32))
        result = module.add(image_1, image_2)  # float add(float, float) over every channel
        numpy.testing.assert_allclose(numpy.asarray(result.to_numpy() if hasattr(result, "to_numpy") else result),
                                      image_2.flatten_dtype().to_numpy(), rtol=1e-6)
        # a Pixel-typed function reads the same buffer field by field
        b = tmod.brightness(image_2)
        numpy.testing.assert_allclose(numpy.asarray(b.to_numpy() if hasattr(b, "to_numpy") else b),
                                      image_2.flatten_dtype().to_numpy().sum(-1), rtol=1e-5)


def test_step10_torch_interop():
    torch = pytest.importorskip("torch")
    device = spy.init_device(type="cpu")
    module = spy.Module.load_from_file(device, EXAMPLE)
    t = torch.tensor([1.0, 2.0, 3.0])
    buffer = spy.NDBuffer(t)
    out = spy.NDBuffer(device, shape=(3,))
    r = module.add(buffer, buffer, _result=Tensor)
    torchTensor = r.torch()
    assert isinstance(torchTensor, torch.Tensor)
    assert torchTensor.tolist() == [2.0, 4.0, 6.0]
    t[0] = 10.0  # NDBuffer(t) is a view of t's memory
    assert buffer.to_numpy().tolist() == [10.0, 2.0, 3.0]
    assert out.to_torch().tolist() == [0.0, 0.0, 0.0]


def _mlp_reference(w, x, t):
    y = x @ w
    loss = ((y - t) ** 2).sum(-1)
    dw = 2 * x.T @ (y - t)
    return y, loss, dw


def test_step11_mlp_training():
    for kind in devices():
        device = _device(kind)
        module = device.load_module_from_file(EXAMPLE)

        N = 128
        numpy.random.seed(1)
        inputTensor = spy.Tensor.numpy(device, numpy.random.rand(N, 32).astype(numpy.float32))
        outputTensor = spy.Tensor.numpy(device, numpy.random.rand(N, 8).astype(numpy.float32))
        w0 = numpy.random.rand(32, 8).astype(numpy.float32)
        mlp_weights = Tensor.from_numpy(device, w0)
        mlp_weights = mlp_weights.with_grads()
        outputTensor = module.compute(mlp_weights, inputTensor, _result=Tensor)
        assert isinstance(outputTensor, Tensor) and outputTensor.shape == (N, 8)
        x = inputTensor.to_numpy()
        numpy.testing.assert_allclose(outputTensor.to_numpy(), x @ w0, rtol=1e-4)

        lossBuffer = Tensor.zeros(device, dtype=module.float, shape=(N, ))
        lossGrad = Tensor.from_numpy(device, numpy.ones(shape=(N, ), dtype=numpy.float32))
        lossBuffer = lossBuffer.with_grads(grad_in=lossGrad)
        targetOutput = Tensor.from_numpy(device, numpy.random.rand(N, 8).astype(numpy.float32))
        t = targetOutput.to_numpy()

        learning_rate = 1e-4
        losses = []
        for iter in range(30):
            w = mlp_weights.to_numpy()
            mlp_weights.grad_out.clear()
            module.loss.bwds(mlp_weights, inputTensor, targetOutput, _result=lossBuffer)
            if iter == 0:  # the gradient is dL/dW summed over the batch
                numpy.testing.assert_allclose(mlp_weights.grad_out.to_numpy(), _mlp_reference(w, x, t)[2],
                                              rtol=1e-3)
            module.updateWeights(mlp_weights.flatten_dtype(), mlp_weights.grad_out.flatten_dtype(), learning_rate)
            # SlangPy's bwds does not write the primal: the forward call fills lossBuffer
            module.loss(mlp_weights, inputTensor, targetOutput, _result=lossBuffer)
            currentLoss = lossBuffer.to_numpy().mean()
            losses.append(currentLoss)
        assert losses[-1] < 0.05 * losses[0], losses
        assert all(b < a for a, b in zip(losses, losses[1:10])), losses

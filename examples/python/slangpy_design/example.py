# The SlangPy design's (SP#016) Python, as written there with `import nabla as spy` (typos fixed:
# `numpy` imported, `max_iterations` / `iterations` and `::`, the loss read after a forward call
# since .bwds does not write the primal, `Tensor` imported before its first use). Runs on the CPU
# here; pass "cuda" as the first argument for the GPU.
import os
import sys

import numpy

import nabla as spy
from nabla.types import Tensor

HERE = os.path.dirname(os.path.abspath(__file__))
os.chdir(HERE)  # the design loads "example.slang" relative to the working directory
kind = sys.argv[1] if len(sys.argv) > 1 else "cpu"

# ---- Calling Slang entry points from Python --------------------------------------------------

# Create a slangpy GPU execution context
device = spy.init_device(type=kind)

# Load a slang the module
module = spy.Module.load_from_file(device, "example.slang")

# Create numpy arrays
a = numpy.random.rand(1024)
b = numpy.random.rand(1024)
r = numpy.zeros(1024)

# Create buffers for kernel call
bufferA = spy.NDBuffer(device, shape = (1024,))
bufferB = spy.NDBuffer(device, shape = (1024,))
bufferRs = spy.NDBuffer(device, shape = (1024,))

# Populate buffer contents
bufferA.from_numpy(a)
bufferB.from_numpy(b)
bufferRs.from_numpy(r)

# Call the function and print the result
module.addBuffer.dispatch(1024, bufferA, bufferB, bufferRs)
print(bufferRs)
assert numpy.allclose(bufferRs.to_numpy(), a + b, rtol=1e-6)

# ---- Calling Slang functions directly ---------------------------------------------------------

pa = numpy.random.rand(1024)
pb = numpy.random.rand(1024)

result = module.add(pa, pb)
print(result)
assert numpy.allclose(result, pa + pb)

# ---- Marshaling (test.slang) -------------------------------------------------------------------

module2 = spy.Module.load_from_file(device, "test.slang")
module2.test(5, 6.0)                           # OK, passing a basic scalar types as is.
module2.test1([5, 6, 7])                       # OK, passing a matching size array to a vector.
module2.test1([[1,2,3],[5, 6, 7]])             # OK, passing matching size array to a vector array.
module2.test1(numpy.zeros((2,3)))              # OK, passing a numpy array of matching dimensions.
module2.test2(numpy.zeros((3,3)))              # OK, passing a numpy array of matching dimensions.
module2.testStruct({"x":5,  "y":6.0})          # OK, passing a dict to a struct type.
module2.testStruct({'_type': 'MyType', 'x': 5, 'y': 6.0})

# ---- NDBuffer ----------------------------------------------------------------------------------

image_1 = spy.NDBuffer(device, dtype=module2.Pixel, shape=(16, 16))
image_2 = spy.NDBuffer(device, dtype=module2.Pixel, shape=(16, 16))
image_2.from_numpy(0.1 * numpy.random.rand(16 * 16 * 3).astype(numpy.float32))
result = module.add(image_1, image_2)

# ---- Training an MLP ---------------------------------------------------------------------------

device = spy.init_device(type=kind);
module = device.load_module_from_file("example.slang")

N = 128
inputTensor = spy.Tensor.numpy(device, numpy.random.rand(N, 32).astype(numpy.float32))
outputTensor = spy.Tensor.numpy(device, numpy.random.rand(N, 8).astype(numpy.float32))

max_iterations = 200
mlp_weights = Tensor.from_numpy(device, numpy.random.rand(32, 8).astype(numpy.float32))
mlp_weights = mlp_weights.with_grads()

outputTensor = module.compute(mlp_weights, inputTensor, _result=Tensor)

lossBuffer = Tensor.zeros(device, dtype=module.float, shape=(N, ))
lossGrad = Tensor.from_numpy(device, numpy.ones(shape=(N, ), dtype=numpy.float32))
lossBuffer = lossBuffer.with_grads(grad_in=lossGrad)

targetOutput = Tensor.from_numpy(device, numpy.random.rand(N, 8).astype(numpy.float32))

learning_rate = 1e-4

losses = []
for iter in range(max_iterations):
    mlp_weights.grad_out.clear()
    module.loss.bwds(mlp_weights, inputTensor, targetOutput, _result=lossBuffer)

    module.updateWeights(mlp_weights.flatten_dtype(), mlp_weights.grad_out.flatten_dtype(), learning_rate)

    module.loss(mlp_weights, inputTensor, targetOutput, _result=lossBuffer)
    currentLoss = lossBuffer.to_numpy().mean()
    losses.append(currentLoss)
    if iter % 20 == 0 or iter == max_iterations - 1:
        print(f'Iteration {iter}. Loss:{currentLoss}')

assert losses[-1] < 0.1 * losses[0]
print("ok: the loss went from", losses[0], "to", losses[-1])

"""The slangtorch tutorial ("Using Slang to Write PyTorch Kernels") as written, on nabla: square.slang's
[TorchEntryPoint] host functions square_fwd / square_bwd called from PyTorch, and the tutorial's
MySquareFuncInSlang autograd function. Only the import line differs (`import nabla as slangpy`).

    PYTHONPATH=build/python python3 examples/python/square_slangtorch.py

The host functions run on the host CPU (compiled to C); their kernels run on the tensors' device
(CUDA when torch and nabla see a GPU, else the CPU).
"""
import os

import torch

import nabla as slangpy

HERE = os.path.dirname(os.path.abspath(__file__))
cuda_device = "cuda" if torch.cuda.is_available() and slangpy.cuda_available() else "cpu"

m = slangpy.loadModule(os.path.join(HERE, "..", "square.slang"))

x = torch.randn(2, 2, device=cuda_device)
print(f"X = {x}")
y = m.square_fwd(x)
print(f"Y = {y.cpu()}")
assert torch.allclose(y, x * x)


class MySquareFuncInSlang(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return m.square_fwd(input)

    @staticmethod
    def backward(ctx, grad_output):
        [input] = ctx.saved_tensors
        return m.square_bwd(input, grad_output)


x = torch.tensor([[3.0, 4.0], [0.0, 1.0]], requires_grad=True, device=cuda_device)
print(f"X = {x}")
y_pred = MySquareFuncInSlang.apply(x)
loss = y_pred.sum()
loss.backward()
print(f"dX = {x.grad.cpu()}")
assert x.grad.cpu().tolist() == [[6.0, 8.0], [0.0, 2.0]]
print(f"ok on {cuda_device}")

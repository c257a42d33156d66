"""The slangtorch tutorial in nabla: `square` written in .nb, used from PyTorch.

    PYTHONPATH=build/python python3 examples/python/square_torch.py

1. the tutorial's explicit torch.autograd.Function, whose backward calls the generated reverse-mode
   kernel (square.bwds), and
2. the direct way: a [Differentiable] nabla function called on tensors that require grad records
   its own autograd node, so loss.backward() just works.
nabla does not depend on torch: tensors are passed zero-copy (CUDA streams ordered).
"""
import os

import torch

import nabla

HERE = os.path.dirname(os.path.abspath(__file__))
dev = "cuda" if torch.cuda.is_available() and nabla.cuda_available() else "cpu"
m = nabla.load_module(os.path.join(HERE, "..", "square.nb"), device=dev)


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return m.square(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        grad_x = torch.zeros_like(x)
        # dL/dx accumulates into grad_x; the gradient of the result is grad_output
        m.square.bwds(x, _grads={"x": grad_x}, _dout=grad_output)
        return grad_x


x = torch.tensor([[3.0, 4.0], [0.0, 1.0]], requires_grad=True, device=dev)
y_pred = Square.apply(x)
loss = y_pred.sum()
loss.backward()
print("square:", y_pred.detach().cpu().tolist(), " grad:", x.grad.cpu().tolist())
assert torch.equal(x.grad, 2 * x.detach())

# The direct way: no autograd.Function needed.
x2 = torch.tensor([[3.0, 4.0], [0.0, 1.0]], requires_grad=True, device=dev)
(m.square(x2) * 3).sum().backward()
print("direct autograd grad:", x2.grad.cpu().tolist())
assert torch.equal(x2.grad, 6 * x2.detach())
print(f"ok on {dev}")

"""torch.autograd integration of nabla.nn layers (imported on the first call of a layer on a
torch tensor in grad mode). The layer's parameters enter the graph as its torch_params (a
torch.nn.Parameter aliasing the layer's flat buffer), so loss.backward() fills
layer.torch_params.grad (a copy: torch accumulates into it) and x.grad."""
import torch
from torch.autograd.function import once_differentiable


class _MLPFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, mlp, x, params):
        y = mlp._c.forward(x.detach(), True)
        ctx.mlp = mlp
        ctx.fid = mlp._c.n_forward
        ctx.save_for_backward(x)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        mlp = ctx.mlp
        (x,) = ctx.saved_tensors
        c = mlp._c
        if c.n_forward != ctx.fid:
            # another forward ran since this one: recompute its activations (the fused MLP keeps
            # only the last forward's)
            c.forward(x.detach(), True)
        need_dx, need_p = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        dx = c.backward(dy, need_dx)
        if dx is not None and dx.dtype != x.dtype:
            dx = dx.to(x.dtype)
        return None, dx, (mlp._tg.clone() if need_p else None)


class _EncodingFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, enc, x, params):
        f = enc._c.forward(x.detach())
        ctx.enc = enc
        ctx.save_for_backward(x)
        return f

    @staticmethod
    @once_differentiable
    def backward(ctx, df):
        enc = ctx.enc
        (x,) = ctx.saved_tensors
        c = enc._c
        need_dx = ctx.needs_input_grad[1]
        need_p = ctx.needs_input_grad[2] and c.n_params > 0
        if need_p:
            c.zero_grad()  # the layer's gradient buffer is scratch here (backward accumulates)
        dx = c.backward(x.detach(), df, need_dx, need_p) if need_dx or need_p else None
        return None, dx, (enc._tg.clone() if need_p else None)


def mlp_apply(mlp, x):
    return _MLPFunction.apply(mlp, x, mlp.torch_params)


def encoding_apply(enc, x):
    if enc.n_params == 0:
        if not x.requires_grad:
            return enc._c.forward(x)
        p = _empty_param(x)
        enc._tg = None
        return _EncodingFunction.apply(enc, x, p)
    return _EncodingFunction.apply(enc, x, enc.torch_params)


def _empty_param(x):
    return torch.zeros(0, device=x.device)

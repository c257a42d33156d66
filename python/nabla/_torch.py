"""torch.autograd integration: calling a differentiable nabla function on torch tensors that
require grad records this Function; its backward runs the generated reverse-mode kernel (.bwds)
with the incoming gradient, so loss.backward() reaches the inputs. Gradients of broadcast inputs
(a weight shared by every thread) come out with the input's shape (the kernel reduces them).
Imported by nabla only when such a call happens."""
import torch

_FLOAT = (torch.float32, torch.float64)
_Tensor = torch.Tensor


class NablaFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn, npos, names, *flat):
        if names:
            out = fn(*flat[:npos], _autograd=False, **dict(zip(names, flat[npos:])))
        else:
            out = fn(*flat, _autograd=False)
        ctx.fn = fn
        ctx.npos = npos
        ctx.names = names
        if all(isinstance(x, _Tensor) for x in flat):
            ctx.others = None
            ctx.save_for_backward(*flat)
        else:  # numbers, lists, dicts: kept as they are, tensors saved
            ctx.others = [None if isinstance(x, _Tensor) else x for x in flat]
            ctx.save_for_backward(*[x if isinstance(x, _Tensor) else None for x in flat])
        return out

    @staticmethod
    def backward(ctx, gout):
        fn = ctx.fn
        flat = ctx.saved_tensors
        if ctx.others is not None:
            flat = [x if o is None else o for x, o in zip(flat, ctx.others)]
        npos, names = ctx.npos, ctx.names
        diff = fn.differentiable_params or ()
        params = fn.param_names if names else None
        need = ctx.needs_input_grad
        which, slots = [], []  # parameter index and flat position of each gradient wanted
        for j in range(len(flat)):
            if need[3 + j]:
                p = j if j < npos else params.index(names[j - npos].split(".")[0])
                if p < len(diff) and diff[p]:
                    which.append(p)
                    slots.append(j)
        out = [None] * (3 + len(flat))
        if which:
            # one call: nabla allocates zeroed gradients shaped like the inputs (a broadcast
            # input gets its reduced gradient), runs the reverse-mode kernel with dL/dout, and
            # hands the gradients to torch zero-copy
            if names:
                grads = fn.bwds(*flat[:npos], _grads_alloc=which, _dout=gout,
                                **dict(zip(names, flat[npos:])))
            else:
                grads = fn.bwds(*flat, _grads_alloc=which, _dout=gout)
            for j, g in zip(slots, grads):
                x = flat[j]
                out[3 + j] = g if g.dtype == x.dtype and g.device == x.device else g.to(x)
        return tuple(out)


_apply = NablaFunction.apply


def apply(fn, args, kwargs):
    if not kwargs:
        if fn.differentiable_params is None:
            return fn(*args, _autograd=False)
        return _apply(fn, len(args), (), *args)
    if "_result" in kwargs or fn.differentiable_params is None:
        # writing into an existing tensor is not recorded; a function without [Differentiable]
        # gives a result that does not require grad (torch then says so at backward())
        return fn(*args, _autograd=False, **kwargs)
    names = tuple(kwargs)
    return _apply(fn, len(args), names, *args, *kwargs.values())

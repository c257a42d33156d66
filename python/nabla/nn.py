"""nabla.nn — neural-network layers over nabla's C library (src/nn), CPU and CUDA.

    import nabla.nn as nn
    enc = nn.HashGrid(n_dims=2, n_levels=16, n_features=2, log2_table_size=19, device="cuda")
    mlp = nn.FusedMLP(n_in=enc.n_output_dims, n_out=3, width=64, hidden_layers=2, device="cuda")
    model = nn.Sequential(enc, mlp)
    opt = nn.Adam(model, lr=1e-2)
    loss = nn.Loss("l2")
    for step in range(n):
        y = model(x)                      # x: numpy / nabla.Tensor / torch [B, 2] -> y [B, 3]
        model.backward(loss(y, target))   # loss(...) returns dL/dy and accumulates the loss value
        opt.step()                        # one launch for all parameters; grads zeroed after
    print(loss.value())                   # mean loss over the calls since the last value()

    # torch: the same layers record a torch.autograd.Function when called on torch tensors in
    # grad mode; their parameters are torch views: torch.optim.Adam(model.torch_parameters())
    y = model(x_torch); ((y - t) ** 2).mean().backward()

    tape = nn.Tape(device="cpu")          # tape autograd (conv nets, UNets): see Tape
    w = tape.param("conv.w", (8, 3, 3, 3), init=0.2)

Arrays: numpy arrays / lists (host data: converted to f32 as needed and uploaded to a CUDA layer),
nabla.Tensor and torch tensors (must be on the layer's device and f32 — FusedMLP inputs may be
f16 — else DeviceError / DtypeError: no hidden transfers or casts of tensors). Results follow the
inputs (torch -> torch on that device, numpy -> numpy, nabla.Tensor -> nabla.Tensor) unless
result="numpy" | "tensor" | "torch". Parameters live in one flat f32 buffer per layer, exposed
zero-copy as `layer.params` (a nabla.Tensor whose .grad is the gradient buffer) and
`layer.torch_params` (a torch.nn.Parameter on the same memory). Nothing here imports numpy or
torch until an array of that kind is used.
"""
import sys

from . import _nabla
from ._nabla import ArgumentError, UnsupportedError  # noqa: F401

__all__ = ["FusedMLP", "HashGrid", "DenseGrid", "Frequency", "Sequential", "Adam", "AdamW", "Loss",
           "loss", "Tape", "Var", "UNet", "DDPM", "ACTIVATIONS", "LOSSES", "image_procedural", "image_read_png",
           "image_write_png", "ImageSampler", "image_pixel_coords", "psnr"]

ACTIVATIONS = ("none", "relu", "leaky_relu", "silu", "sigmoid", "tanh")
LOSSES = ("l2", "l1", "relative_l2")


def _torch_grad_mode(x):
    """True when x is a torch tensor and torch records autograd now."""
    t = sys.modules.get("torch")
    return t is not None and isinstance(x, t.Tensor) and t.is_grad_enabled()


def _view_with_grad(p, g):
    p.grad = g
    return p


class _Layer:
    """Shared by the layers: a flat f32 parameter buffer and its gradient buffer."""

    _c = None
    _tp = None

    @property
    def device(self):
        return self._c.device

    @property
    def n_params(self):
        return self._c.n_params

    @property
    def params(self):
        """The parameters, a zero-copy nabla.Tensor f32[n_params]; .grad is the gradient buffer.
        numpy.asarray(layer.params) is a writable view on the CPU."""
        return _view_with_grad(self._c.params(), self._c.grads())

    @property
    def grads(self):
        return self._c.grads()

    @property
    def torch_params(self):
        """A torch.nn.Parameter on the same memory as params (created once; imports torch). Used
        by the autograd path: after loss.backward() its .grad holds this layer's gradient."""
        if self._tp is None:
            import torch

            self._tp = torch.nn.Parameter(self._c.torch_params())
            self._tg = self._c.torch_grads()
        return self._tp

    def parameters(self):
        """[params] for nabla.nn.Adam (empty for a layer without parameters)."""
        return [self.params] if self.n_params else []

    def torch_parameters(self):
        """[torch_params] for torch optimizers."""
        return [self.torch_params] if self.n_params else []

    def load_params(self, values):
        """Copies values (any array of n_params numbers, any device) into the parameters."""
        src = _nabla.tensor_from_buffer(values, self.device) if not isinstance(values, _nabla.CTensor) else values
        if src.numel != self.n_params:
            raise _nabla.ShapeError(f"load_params: {src.numel} values for {self.n_params} parameters")
        if src.dtype != "f32":
            raise _nabla.DtypeError(f"load_params: values of dtype {src.dtype}; expected f32")
        self._c.params().copy_from(src if src.ndim == 1 else _flat(src))

    def zero_grad(self):
        self._c.grads().zero_()


def _flat(t):
    return _nabla.tensor_from_buffer(t.to_numpy().reshape(-1), t.device)


class FusedMLP(_Layer):
    """A fully fused MLP (tiny-cuda-nn's FullyFusedMLP): n_in -> width x hidden_layers -> n_out.

    width 16, 32, 64 or 128; any n_in, n_out, depth and batch. activation after every hidden
    layer, output_activation on the output ("none", "relu", "leaky_relu", "silu", "sigmoid",
    "tanh"); bias=True adds a bias vector per layer. Matrix operands are rounded to `compute`
    ("f16" or "bf16") with f32 sums, on the CPU reference and on CUDA alike (so both agree).
    Parameters: one flat f32 buffer, layer by layer W_l [out, in] row-major then b_l; initialised
    Xavier-uniform from seed (the same values on every device).

    forward(x) saves what backward needs (x [..., n_in] f32 or f16 -> y [..., n_out] f32);
    backward(dy) OVERWRITES the gradient buffer and returns dL/dx; inference(x) saves nothing.
    mlp(x) is forward(x), or a torch.autograd.Function when x is a torch tensor in grad mode
    (the parameters are then torch_params), or inference under torch.no_grad().
    """

    def __init__(self, n_in, n_out, width=64, hidden_layers=2, activation="relu",
                 output_activation="none", bias=False, compute="f16", loss_scale=0.0, seed=1337,
                 device=None):
        self._c = _nabla.mlp_create(n_in, n_out, width, hidden_layers, activation,
                                    output_activation, bias, compute, float(loss_scale), seed, device)

    @property
    def config(self):
        return self._c.config

    @property
    def n_in(self):
        return self._c.config["n_in"]

    @property
    def n_out(self):
        return self._c.config["n_out"]

    @property
    def n_layers(self):
        return self._c.n_layers

    def forward(self, x, result=None):
        return self._c.forward(x, True, result)

    def inference(self, x, result=None):
        return self._c.inference(x, result)

    def backward(self, dy, need_dx=True, result=None):
        """dy = dL/dy for the last forward's batch -> dL/dx (None when not need_dx); the
        gradient buffer (params.grad) is overwritten with dL/dparams."""
        return self._c.backward(dy, need_dx, result)

    def __call__(self, x, result=None):
        if _torch_grad_mode(x) and result is None:
            from . import _nn_torch

            return _nn_torch.mlp_apply(self, x)
        t = sys.modules.get("torch")
        if t is not None and isinstance(x, t.Tensor) and result is None:
            return self._c.inference(x)  # torch.no_grad(): nothing to save
        return self._c.forward(x, True, result)

    def init_params(self, seed):
        self._c.init_params(seed)

    def layer_info(self, layer):
        """(w_offset, b_offset or -1, rows, cols) of layer `layer` in the flat parameters."""
        return self._c.layer_info(layer)

    def weights(self, layer):
        """(W [rows, cols], b [rows] or None) of a layer as numpy copies."""
        w, b, rows, cols = self._c.layer_info(layer)
        p = self._c.params().to_numpy()
        return p[w:w + rows * cols].reshape(rows, cols), (p[b:b + rows].copy() if b >= 0 else None)

    def __repr__(self):
        c = self.config
        return (f"FusedMLP(n_in={c['n_in']}, n_out={c['n_out']}, width={c['width']}, "
                f"hidden_layers={c['hidden_layers']}, activation={c['activation']!r}, "
                f"output_activation={c['output_activation']!r}, bias={c['bias']}, "
                f"compute={c['compute']!r}, device={self.device.name!r})")


class _Encoding(_Layer):
    """Input encodings: x [..., n_dims] f32 -> features [..., n_output_dims] f32 (f16 with
    dtype="f16"). Grids clamp x to [0, 1]. backward ACCUMULATES into the gradient buffer
    (zero it with zero_grad(), or let Adam.step(zero_grad=True) do it)."""

    _x = None

    @property
    def n_input_dims(self):
        return self._c.n_input_dims

    @property
    def n_output_dims(self):
        return self._c.n_output_dims

    def forward(self, x, dtype=None, result=None):
        self._x = x
        return self._c.forward(x, dtype, result)

    inference = forward

    def backward(self, dfeat, need_dx=False, x=None, result=None):
        """grads += dL/dparams for the last forward's x (or x=...); returns dL/dx or None."""
        x = self._x if x is None else x
        if x is None:
            raise ArgumentError("encoding backward: no forward before it (or pass x=)")
        return self._c.backward(x, dfeat, need_dx, True, result)

    def __call__(self, x, result=None):
        if _torch_grad_mode(x) and result is None:
            from . import _nn_torch

            return _nn_torch.encoding_apply(self, x)
        return self.forward(x, None, result)

    def init_params(self, seed):
        self._c.init_params(seed)

    def level_info(self, level):
        return self._c.level_info(level)


class HashGrid(_Encoding):
    """Multiresolution hash grid (Instant-NGP): n_levels levels of n_features features, level l
    at resolution floor(base_resolution * per_level_scale^l), 2^log2_table_size entries a level.
    Parameters uniform(-1e-4, 1e-4) from seed."""

    def __init__(self, n_dims=2, n_levels=16, n_features=2, log2_table_size=19, base_resolution=16,
                 per_level_scale=2.0, seed=1337, device=None):
        self._c = _nabla.encoding_create("hash_grid", n_dims, n_features=n_features, n_levels=n_levels,
                                         log2_table_size=log2_table_size, base_resolution=base_resolution,
                                         per_level_scale=float(per_level_scale), seed=seed, device=device)

    def set_spatially_ordered(self, ordered=True):
        """Hint for the CUDA backward: the batch's points are spatially coherent."""
        self._c.set_spatially_ordered(ordered)


class DenseGrid(_Encoding):
    """One dense grid of `resolution` vertices per dimension (an int or one per dim, >= 2),
    n_features per vertex, bi/trilinear interpolation."""

    def __init__(self, n_dims=2, resolution=64, n_features=2, seed=1337, device=None):
        self._c = _nabla.encoding_create("dense_grid", n_dims, n_features=n_features, resolution=resolution,
                                         seed=seed, device=device)


class Frequency(_Encoding):
    """{sin, cos}(2^k pi x) for k < n_frequencies per input dim: 2 n_dims n_frequencies features;
    no parameters."""

    def __init__(self, n_dims=2, n_frequencies=12, device=None):
        self._c = _nabla.encoding_create("frequency", n_dims, n_frequencies=n_frequencies, device=device)


class Sequential:
    """Layers applied in order (e.g. an encoding then a FusedMLP, tiny-cuda-nn's
    NetworkWithInputEncoding). backward(dy) runs the layers' backwards in reverse; parameters()
    concatenates theirs (Adam updates all of them in one launch)."""

    def __init__(self, *layers):
        if not layers:
            raise ArgumentError("Sequential needs at least one layer")
        self.layers = list(layers)

    def _run(self, x, result, method):
        last = len(self.layers) - 1
        for i, l in enumerate(self.layers):
            if i < last and isinstance(l, _Encoding) and self._f16_next(i):
                # features straight into an f16 FusedMLP: f16 halves the traffic and changes
                # nothing (the MLP rounds its input to f16 first)
                x = getattr(l, method)(x, dtype="f16")
            else:
                x = getattr(l, method)(x, result=result if i == last else None)
        return x

    def _f16_next(self, i):
        n = self.layers[i + 1]
        return isinstance(n, FusedMLP) and n.config["compute"] == "f16"

    def forward(self, x, result=None):
        return self._run(x, result, "forward")

    def inference(self, x, result=None):
        return self._run(x, result, "inference")

    def backward(self, dy, need_dx=False, result=None):
        for i in range(len(self.layers) - 1, -1, -1):
            dy = self.layers[i].backward(dy, need_dx=need_dx or i > 0, result=result if i == 0 else None)
        return dy

    def __call__(self, x, result=None):
        t = sys.modules.get("torch")
        if t is None or not isinstance(x, t.Tensor):
            return self._run(x, result, "forward")
        for i, l in enumerate(self.layers):  # torch: each layer records autograd (or infers)
            x = l(x, result=result if i == len(self.layers) - 1 else None)
        return x

    def parameters(self):
        return [p for l in self.layers for p in l.parameters()]

    def torch_parameters(self):
        return [p for l in self.layers for p in l.torch_parameters()]

    def zero_grad(self):
        for l in self.layers:
            l.zero_grad()

    @property
    def n_params(self):
        return sum(l.n_params for l in self.layers)

    @property
    def device(self):
        return self.layers[0].device

    def __repr__(self):
        return "Sequential(" + ", ".join(repr(l) for l in self.layers) + ")"


# ---- optimizers and losses --------------------------------------------------------------------


def _device_name(p):
    if isinstance(p, _nabla.CTensor):
        return p.device.name
    d = getattr(p, "device", None)  # torch
    if d is not None and getattr(d, "type", None) is not None:
        return "cpu" if d.type == "cpu" else f"cuda:{d.index or 0}"
    return "cpu"  # host arrays


def _numel(p):
    n = getattr(p, "numel", None)
    if isinstance(n, int):
        return n  # nabla.Tensor
    if callable(n):
        return n()  # torch
    return getattr(p, "size")  # numpy


class Adam:
    """Adam (PyTorch's torch.optim.Adam / AdamW update) over flat f32 parameter buffers:
    layers (FusedMLP, encodings, Sequential, Tape), nabla.Tensor parameters (gradients in .grad)
    or torch tensors (gradients in .grad after loss.backward()); at most 8 buffers, all on one
    device. step() is one launch on CUDA and zeroes the gradients after reading them unless
    zero_grad=False."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
        if hasattr(params, "parameters") and not isinstance(params, (list, tuple)):
            params = params.parameters()
        flat = []
        for p in params:
            flat.extend(p.parameters() if hasattr(p, "parameters") else [p])
        self._params = [p for p in flat if _numel(p) > 0]
        if not self._params:
            raise ArgumentError("Adam: no parameters")
        devs = {_device_name(p) for p in self._params}
        if len(devs) > 1:
            raise _nabla.DeviceError(f"Adam: parameters on several devices {sorted(devs)}")
        self._lr = float(lr)
        self._c = _nabla.adam_create(sum(_numel(p) for p in self._params), float(lr),
                                     (float(betas[0]), float(betas[1])), float(eps),
                                     float(weight_decay), bool(decoupled), devs.pop())

    def step(self, zero_grad=True):
        grads = []
        for i, p in enumerate(self._params):
            g = p.grad
            if g is None:
                raise ArgumentError(f"Adam.step: parameter {i} has no gradient (run backward first)")
            grads.append(g)
        self._c.step(self._params, grads, zero_grad)

    def zero_grad(self):
        for p in self._params:
            if p.grad is not None:
                p.grad.zero_()

    @property
    def lr(self):
        return self._lr

    @lr.setter
    def lr(self, v):
        self._c.set_lr(float(v))
        self._lr = float(v)

    @property
    def steps(self):
        return self._c.steps

    def reset(self):
        """Zeroes the moments and the step count."""
        self._c.reset()


class AdamW(Adam):
    """Adam with decoupled weight decay (torch.optim.AdamW's defaults)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, lr, betas, eps, weight_decay, decoupled=True)


def _check_loss(kind):
    if kind not in LOSSES:
        raise ArgumentError(f"loss {kind!r}: expected one of {LOSSES}")


def loss(kind, pred, target, grad=True, result=None):
    """(mean loss as a float, dL/dpred or None) for kind "l2" | "l1" | "relative_l2" (reads the
    value back: a host synchronisation; Loss avoids it)."""
    _check_loss(kind)
    dev = _device_name(pred)
    s = _nabla.tensor_zeros((1,), "f32", dev)
    d = _nabla.loss(kind, pred, target, s, grad, result, dev)
    return _nabla.nn_item(s), d


class Loss:
    """loss_fn = Loss("l2"); dpred = loss_fn(pred, target) returns dL/dpred (L = the mean over
    the elements) and adds L to a running sum on the device (no synchronisation);
    loss_fn.value() returns the mean of L over the calls since the last value() and resets."""

    def __init__(self, kind="l2"):
        _check_loss(kind)
        self.kind = kind
        self._sum = None
        self._n = 0

    def __call__(self, pred, target, result=None):
        dev = _device_name(pred)
        if self._sum is None or self._sum.device.name != dev:
            self._sum = _nabla.tensor_zeros((1,), "f32", dev)
            self._n = 0
        self._n += 1
        return _nabla.loss(self.kind, pred, target, self._sum, True, result, dev)

    def value(self, reset=True):
        if not self._n:
            return float("nan")
        v = _nabla.nn_item(self._sum) / self._n
        if reset:
            self._sum.zero_()
            self._n = 0
        return v


# ---- images (include/nabla/image.h): data for neural fitting -----------------------------------


def image_procedural(width, height, device=None):
    """nabla's built-in test image: a nabla.Tensor f32 [height, width, 3] in [0, 1] on device."""
    return _nabla.image_procedural(width, height, device)


def image_read_png(path, channels=0, device=None):
    """A PNG as a nabla.Tensor f32 [H, W, C] in [0, 1] (channels 0 = the file's own)."""
    return _nabla.image_read_png(str(path), channels, device)


def image_write_png(path, img, height=0):
    """Writes f32 [H, W, C] (C = 1, 3, 4; any array kind, any device) as an 8-bit PNG; or
    [H * W, C] pixels (as from image_pixel_coords) with height=H."""
    _nabla.image_write_png(str(path), img, height)


class ImageSampler:
    """Random training batches of an image on its device, no host round trip:
    x, target = sampler(step) with x [batch, 2] positions in [0, 1)^2 (x along the width) and
    target [batch, C] the bilinearly sampled image there. The two buffers are reused by every
    call. stratified=True: jittered strata in Morton order (coherent batches for grids)."""

    def __init__(self, img, batch, seed=0, stratified=False, result="tensor"):
        self.img, self.seed, self.stratified = img, seed, stratified
        dev = img.device
        self.x = _nabla.tensor_empty((batch, 2), "f32", dev)
        self.target = _nabla.tensor_empty((batch, img.shape[2]), "f32", dev)
        if result == "torch":
            self.x, self.target = self.x.torch(), self.target.torch()

    def __call__(self, step):
        _nabla.image_sample(self.img, self.x, self.target, self.seed, step, self.stratified)
        return self.x, self.target


def image_pixel_coords(width, height, device=None):
    """Pixel-centre positions f32 [height * width, 2] in row-major pixel order."""
    return _nabla.image_pixel_coords(width, height, device)


def psnr(pred, ref):
    """PSNR in dB of pred (clamped to [0, 1]) against ref (same elements: [H*W, C] pixels may be
    compared with an [H, W, C] image; any devices)."""
    return _nabla.image_psnr(pred, ref)


from ._nn_tape import DDPM, Tape, UNet, Var  # noqa: E402,F401

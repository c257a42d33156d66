"""nabla.nn.Tape: tape autograd (include/nabla/nn_tape.h) from Python, CPU or CUDA.

    t = nabla.nn.Tape(device="cpu")                  # or "cuda" (every op runs on the GPU)
    w = t.param("conv.w", (8, 3, 3, 3), init=0.19)   # uniform(-0.19, 0.19); registered once
    b = t.param("conv.b", (8,))                      # zeros
    opt = nabla.nn.Adam(t, lr=1e-3)
    for step in range(n):
        t.reset()                                    # forget the last step's activations
        x = t.input(images)                          # [N,3,H,W]: a copy into the tape
        y = t.silu(t.conv2d(x, w, b, stride=1, pad=1))
        loss = t.mse(y, t.input(target))
        t.backward(loss)                             # parameter grads ACCUMULATE
        opt.step()                                   # Adam on t.params(); grads zeroed after
    loss.item(); t.grad(w) -> numpy; t.params() / t.grads() -> zero-copy nabla.Tensor views

Values are Var handles valid until the next reset() (parameters forever); using a stale one
raises ArgumentError. Shapes: activations [N,C,H,W] / [N,F] / [N,heads,T,d], f32.
"""
from . import _nabla
from ._nabla import ArgumentError


class Var:
    """A value on a tape: .shape, .numpy(), .item(), .grad (numpy, zeros if backward did not
    reach it); a + b is tape.add(a, b)."""

    __slots__ = ("tape", "id", "gen")

    def __init__(self, tape, vid, gen):
        self.tape, self.id, self.gen = tape, vid, gen

    @property
    def shape(self):
        return self.tape.shape(self)

    def numpy(self):
        return self.tape.value(self)

    def item(self):
        return float(self.tape.value(self).reshape(-1)[0])

    @property
    def grad(self):
        return self.tape.grad(self)

    def __add__(self, other):
        return self.tape.add(self, other)

    def __repr__(self):
        kind = "param" if self.gen < 0 else "value"
        return f"<nabla.nn.Var {kind} {self.id} {self.shape}>"


_PRECISIONS = ("fp32", "tf32", "bf16")


class Tape:
    """A tape on `device` ("cpu", "cuda", a nabla.Device; None = nabla's default device, as for
    the layers); precision "fp32" | "tf32" | "bf16" selects the math of GEMMs, convolutions and
    attention on CUDA (the CPU computes in fp32)."""

    def __init__(self, device=None, precision=None):
        self._c = _nabla.tape_create(device)
        if precision is not None:
            self.precision = precision

    # ---- parameters --------------------------------------------------------------------------

    def param(self, name, shape, init=None, seed=0):
        """Registers a parameter (before the first step and before params()/grads() views).
        init: None (zeros), a number b (uniform(-b, b) from seed) or an array of values."""
        v = Var(self, self._c.param(name, tuple(shape) if not isinstance(shape, int) else shape), -1)
        if init is None:
            return v
        if isinstance(init, (int, float)):
            self._c.init_uniform(v.id, float(init), seed)
        else:
            self.set_param(v, init)
        return v

    def param_named(self, name):
        return Var(self, self._c.param_find(name), -1)

    def param_info(self, v):
        """(offset, count) of parameter v (a Var or its name) in the flat buffers."""
        if isinstance(v, str):
            v = self.param_named(v)
        return self._c.param_info(self._h(v))

    def set_param(self, v, values):
        """Copies values (count floats, any array) into parameter v (through a host copy of all
        parameters: for initialisation, not for every step)."""
        off, n = self.param_info(v)
        import numpy as np

        vals = np.asarray(values, dtype=np.float32).reshape(-1)
        if vals.size != n:
            raise _nabla.ShapeError(f"set_param: {vals.size} values for a parameter of {n}")
        allp = self._c.read_params()
        allp[off:off + n] = vals
        self._c.write_params(allp)

    def params(self):
        """The flat parameter buffer as a zero-copy nabla.Tensor (device memory on CUDA); its
        .grad is grads(). Register every parameter first."""
        p = self._c.buffer_view(False)
        p.grad = self._c.buffer_view(True)
        return p

    def grads(self):
        return self._c.buffer_view(True)

    def torch_params(self):
        """The parameter / gradient buffers as torch tensors (zero-copy)."""
        return self._c.torch_view(False)

    def torch_grads(self):
        return self._c.torch_view(True)

    def parameters(self):
        return [self.params()] if self._c.n_params else []

    @property
    def n_params(self):
        return self._c.n_params

    def read_params(self, result=None):
        return self._c.read_params(False, result)

    def read_grads(self, result=None):
        return self._c.read_params(True, result)

    def write_params(self, values):
        self._c.write_params(values)

    def zero_grad(self):
        self._c.zero_grad()

    # ---- steps ---------------------------------------------------------------------------------

    def reset(self):
        self._c.reset()

    def input(self, data, requires_grad=False):
        """A copy of data (any array: numpy, list, nabla.Tensor, torch; 1 to 4 dims) as a value."""
        v = self._new(self._c.input(data, requires_grad))
        rec = self.__dict__.get("_graph_rec")
        if rec is not None:  # recording (nabla.record): the graph input's dtype, checked at replay
            from ._graph import _dtype_name

            rec.append(_dtype_name(data))
        return v

    def backward(self, loss):
        self._c.backward(self._h(loss))

    def shape(self, v):
        return self._c.shape(self._h(v))

    def value(self, v, result=None):
        return self._c.read(self._h(v), False, result)

    def grad(self, v, result=None):
        return self._c.read(self._h(v), True, result)

    def stats(self):
        return self._c.stats()

    @property
    def device(self):
        return self._c.device

    @property
    def precision(self):
        return self._c.precision

    @precision.setter
    def precision(self, p):
        if p not in _PRECISIONS:
            raise ArgumentError(f"precision {p!r}: expected one of {_PRECISIONS}")
        self._c.set_precision(p)

    # ---- ops -------------------------------------------------------------------------------------

    def _new(self, vid):
        return Var(self, vid, self._c.generation)

    def _h(self, v):
        if v is None:
            return -1
        if not isinstance(v, Var):
            raise TypeError(f"expected a nabla.nn.Var of this tape, got {type(v).__name__}"
                            " (arrays enter a tape through tape.input(array))")
        if v.tape is not self:
            raise ArgumentError("a Var of another tape")
        if v.gen >= 0 and v.gen != self._c.generation:
            raise ArgumentError(f"Var {v.id} is from before the last tape.reset(): values live one step")
        return v.id

    def linear(self, x, w, b=None):
        """x [N,F], w [O,F], b [O] -> [N,O]"""
        return self._new(self._c.linear(self._h(x), self._h(w), self._h(b)))

    def conv2d(self, x, w, b=None, stride=1, pad=0):
        """x [N,C,H,W], w [O,C,K,K] (K 1 or 3), b [O]; stride 1 or 2"""
        return self._new(self._c.conv2d(self._h(x), self._h(w), self._h(b), stride, pad))

    def group_norm(self, x, groups, gamma=None, beta=None, eps=1e-5):
        return self._new(self._c.group_norm(self._h(x), groups, self._h(gamma), self._h(beta), eps))

    def silu(self, x):
        return self._new(self._c.silu(self._h(x)))

    def relu(self, x):
        """max(x, 0), any shape"""
        return self._new(self._c.relu(self._h(x)))

    def softmax(self, x):
        """softmax over the last dim (each row exp(x - max) / sum), any shape"""
        return self._new(self._c.softmax(self._h(x)))

    def linear_relu(self, x, w, b=None):
        """relu(x w^T + b) as one op (the ReLU in the GEMM's bias pass on CUDA)"""
        return self._new(self._c.linear_relu(self._h(x), self._h(w), self._h(b)))

    def mlp(self, m, x, w):
        """The fused MLP m (a nabla.nn.FusedMLP on the tape's device) as a tape op: x [B, n_in],
        w a value of m's n_params floats (a param, e.g. initialised from m.params) -> [B, n_out].
        The backward adds dL/dw and dL/dx. One op that needs a gradient per FusedMLP and step."""
        return self._new(self._c.mlp(getattr(m, "_c", m), self._h(x), self._h(w)))

    def encoding(self, e, x, params=None):
        """The encoding e (HashGrid, DenseGrid, Frequency on the tape's device) as a tape
        op: x [B, n_dims], params a value of its n_params floats (None for Frequency)
        -> [B, F]. The backward adds dL/dparams and dL/dx."""
        return self._new(self._c.encoding(getattr(e, "_c", e), self._h(x), self._h(params)))

    def call(self, fn, *args):
        """A kernel-language function as a tape op: fn is a function of a nabla Module loaded on
        the tape's device (module.fn; one overload, [Differentiable] where a gradient is needed),
        args its arguments in order: Vars of this tape (arrays; a float3 parameter takes a
        trailing 3) or numbers (one value for every thread). The result is fn over the arguments'
        broadcast shapes (+ the result's vector shape); the backward runs fn's reverse mode and
        adds dL/d(argument) into every Var argument that needs a gradient. Trailing parameters
        with default values may be left out. The tape keeps fn's module alive while it lives."""
        conv = []
        for i, a in enumerate(args):
            if isinstance(a, Var):
                conv.append(self._h(a))
            elif isinstance(a, (int, float)) and not isinstance(a, bool):
                conv.append(float(a))
            else:
                raise TypeError(f"Tape.call: argument {i} is a {type(a).__name__}; give a Var of this tape "
                                "(arrays enter through tape.input) or a number")
        return self._new(self._c.call(fn, tuple(conv)))

    def add(self, a, b):
        return self._new(self._c.add(self._h(a), self._h(b)))

    def add_channel(self, x, c):
        """x [N,C,H,W] + c [N,C] broadcast over H, W"""
        return self._new(self._c.add_channel(self._h(x), self._h(c)))

    def concat(self, a, b):
        """channels: [N,Ca,H,W], [N,Cb,H,W] -> [N,Ca+Cb,H,W]"""
        return self._new(self._c.concat(self._h(a), self._h(b)))

    def upsample2x(self, x):
        return self._new(self._c.upsample2x(self._h(x)))

    def avgpool2x(self, x):
        return self._new(self._c.avgpool2x(self._h(x)))

    def mse(self, pred, target):
        return self._new(self._c.mse(self._h(pred), self._h(target)))

    def attention(self, q, k, v):
        """softmax(q k^T / sqrt(d)) v: q [N,H,Tq,d], k, v [N,H,Tk,d]"""
        return self._new(self._c.attention(self._h(q), self._h(k), self._h(v)))

    def reshape(self, x, shape):
        return self._new(self._c.reshape(self._h(x), tuple(shape)))

    def transpose(self, x):
        """swaps the last two dims"""
        return self._new(self._c.transpose(self._h(x)))

    def slice_channels(self, x, c0, count):
        return self._new(self._c.slice_channels(self._h(x), c0, count))

    def timestep_embedding(self, timesteps, dim, max_period=10000.0):
        """sinusoidal embedding [n, dim] of host timesteps (no gradient)"""
        return self._new(self._c.timestep_embedding(timesteps, dim, max_period))

    def __repr__(self):
        return f"<nabla.nn.Tape on {self.device.name}, {self.n_params} parameters>"


def _knob(v):
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (list, tuple)):
        return ",".join(str(int(x)) for x in v)
    return str(v)


class UNet:
    """guided-diffusion's UNetModel on a Tape (include/nabla/nn_unet.h): starts from the issue's
    reference config (64x64x3, 64 channels, mult 1,2,3,4, 2 res blocks, attention at 16 and 8,
    32-channel heads, GroupNorm(32): 20,494,211 parameters) and changes the knobs given:
    image_size, in_channels, out_channels, model_channels, channel_mult (tuple),
    num_res_blocks, attention_resolutions (tuple, may be empty), num_head_channels,
    conv_resample (bool), num_groups. Registers its parameters on the tape (named like
    guided-diffusion's state_dict) and initialises them (PyTorch's default init, seed)."""

    def __init__(self, tape, seed=0, **knobs):
        self.tape = tape
        self._c = _nabla.unet_create(tape._c, {k: _knob(v) for k, v in knobs.items()})
        self._c.init(seed)

    def __call__(self, x, timesteps):
        """x: a Var [N, in, S, S] (or an array, put on the tape) and N timesteps -> eps Var."""
        if not isinstance(x, Var):
            x = self.tape.input(x)
        return self.tape._new(self._c.forward(self.tape._h(x), timesteps))

    forward = __call__

    def init(self, seed):
        self._c.init(seed)

    @property
    def config(self):
        return self._c.config()

    def named_parameters(self):
        """[(name, shape, Var)] in state_dict order."""
        return [(n, s, Var(self.tape, h, -1)) for n, s, h in self._c.params()]

    @property
    def last_forward_flops(self):
        return self._c.last_forward_flops()

    def save(self, path):
        """safetensors (F32, config in the metadata)."""
        self._c.save(str(path))

    def load(self, path):
        self._c.load(str(path))

    @staticmethod
    def read_config(path):
        return _nabla.unet_read_config(str(path))


class DDPM:
    """DDPM training (linear betas, AdamW, gradient clipping, EMA) and DDPM / DDIM sampling over a
    UNet: loss, grad_norm = ddpm.train_step(x0) with x0 [n, C, S, S] in [-1, 1] (any array);
    ddpm.sample("ddim", steps=50, n=16, seed=0) -> numpy [n, C, S, S]."""

    def __init__(self, unet, timesteps=1000, beta_start=1e-4, beta_end=0.02, lr=1e-4, weight_decay=0.0,
                 grad_clip=1.0, ema_decay=0.9999, seed=0):
        self.unet = unet
        self._c = _nabla.ddpm_create(unet._c, timesteps, beta_start, beta_end, lr, weight_decay, grad_clip,
                                     ema_decay, seed)

    def train_step(self, x0):
        return self._c.train_step(x0)

    def sample(self, sampler="ddim", steps=50, n=1, seed=0, result=None):
        return self._c.sample(sampler, steps, n, seed, result)

    def use_ema(self):
        """Copies the EMA parameters into the model (before sampling)."""
        self._c.use_ema()

    @property
    def alphas_cumprod(self):
        return self._c.alphas_cumprod()

    @property
    def cuda_graphs(self):
        """CUDA graphs of the training step (include/nabla/nn_unet.h, nb_ddpm_set_cuda_graphs):
        on by default on CUDA; (state, captures) with state 0 off, 1 warming, 2 replaying."""
        return self._c.graph_state()

    @cuda_graphs.setter
    def cuda_graphs(self, on):
        self._c.set_cuda_graphs(bool(on))

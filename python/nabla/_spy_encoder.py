"""SlangPy's command encoders: a batch of calls recorded once and submitted as one.

    enc = device.create_command_encoder()
    m.f.append_to(enc, x, _result=y)          # or m.f(x, _result=y, _append_to=enc)
    m.g.bwds.append_to(enc, x, _result=y)
    device.submit_command_buffer(enc.finish())  # runs f, then g.bwds, in order

A call appended is bound, checked and compiled at once (a bad argument raises then, naming it)
but runs only when the command buffer is submitted; its results are nabla.Tensors filled at
submit. The arrays it binds are kept alive by the encoder and read / written at submit time, so a
command buffer submitted again runs the same calls over the arrays' current contents. On CUDA the
first submit captures the batch into one CUDA graph and later submits replay it; on the CPU the
calls run in order. C: include/nabla/cmdlist.h.
"""
from . import _nabla

__all__ = ["CommandEncoder", "CommandBuffer", "install"]


class CommandEncoder:
    """Records calls (Function.append_to / _append_to=) for one device."""

    def __init__(self, device):
        self._list = _nabla._cmdlist_new(device)
        self._device = device
        self._finished = False
        self._torch_index = -1  # a torch CUDA tensor was bound (on cuda:N): submits order with torch

    @property
    def device(self):
        return self._device

    def _hold(self, fn, args, kwargs):
        # the recorded call's function (so its module) and arguments (so their memory) live as
        # long as the command list (they are released after it, by the list's capsule)
        _nabla._cmdlist_hold(self._list, (fn, args, kwargs))

    def finish(self):
        """The recorded calls as a CommandBuffer for device.submit_command_buffer."""
        self._finished = True
        return CommandBuffer(self)

    def __len__(self):
        return _nabla._cmdlist_count(self._list)

    def __repr__(self):
        return f"<nabla.CommandEncoder on {self._device.name}: {len(self)} call(s)>"


class CommandBuffer:
    """A finished batch of calls; submit it (several times if wanted) with
    device.submit_command_buffer(buffer) or buffer.submit()."""

    def __init__(self, encoder):
        self._encoder = encoder
        self._list = encoder._list
        self.submit_count = 0

    @property
    def device(self):
        return self._encoder._device

    @property
    def uses_graph(self):
        """True once a submit captured the batch into a CUDA graph (CUDA devices)."""
        return _nabla._cmdlist_uses_graph(self._list)

    def submit(self):
        """Runs the calls in order. Calls that bound torch CUDA tensors are ordered with torch's
        current stream at submit time: they see what torch queued before, and torch work queued
        after sees their results (as for calls that run at once)."""
        _nabla._cmdlist_submit(self._list, self._encoder._torch_index)
        self.submit_count += 1

    def __len__(self):
        return _nabla._cmdlist_count(self._list)

    def __repr__(self):
        return f"<nabla.CommandBuffer on {self.device.name}: {len(self)} call(s)>"


def _create_command_encoder(self):
    """device.create_command_encoder() -> CommandEncoder (SlangPy)."""
    return CommandEncoder(self)


def _submit_command_buffer(self, command_buffer):
    """device.submit_command_buffer(encoder.finish()): runs its calls in order (SlangPy)."""
    if isinstance(command_buffer, CommandEncoder):
        command_buffer = command_buffer.finish()
    if not isinstance(command_buffer, CommandBuffer):
        raise TypeError(f"submit_command_buffer expects encoder.finish(), got {type(command_buffer).__name__}")
    if command_buffer.device is not self:
        raise _nabla.DeviceError(f"submit_command_buffer: the command buffer is for {command_buffer.device.name}, "
                                 f"not {self.name}")
    command_buffer.submit()


def _check_encoder(who, command_encoder):
    """TypeError unless an open CommandEncoder (ArgumentError when finished)."""
    if not isinstance(command_encoder, CommandEncoder):
        raise TypeError(f"{who} expects a command encoder (device.create_command_encoder()), "
                        f"got {type(command_encoder).__name__}")
    if command_encoder._finished:
        raise _nabla.ArgumentError(f"{who}: this command encoder was finished; create a new one")


def _append_to(self, command_encoder, *args, **kwargs):
    """f.append_to(encoder, *args, **kwargs): records f(*args, **kwargs) into the encoder; returns
    its results (nabla.Tensors, filled when the command buffer is submitted)."""
    _check_encoder("append_to", command_encoder)
    kwargs["_append_to"] = command_encoder
    return self(*args, **kwargs)


def _make_dispatch(c_dispatch):
    def dispatch(self, thread_count, *args, command_encoder=None, vars=None, **kwargs):
        """f.dispatch(thread_count, *args, command_encoder=None, vars=None, **kwargs): a [Kernel] /
        [numthreads] function over thread_count threads (an int or 1 to 3 ints). With
        command_encoder= the dispatch is recorded into it (run at submit, like append_to); vars=
        (SlangPy: uniform values by name) are bound as keyword arguments."""
        if vars:
            if not isinstance(vars, dict):
                raise _nabla.ArgumentError(f"dispatch: vars must be a dict {{name: value}}, got {type(vars).__name__}")
            both = set(vars) & set(kwargs)
            if both:
                raise _nabla.ArgumentError(f"dispatch: {sorted(both)} given in vars and as keyword arguments")
            kwargs.update(vars)
        if command_encoder is not None:
            _check_encoder("dispatch(command_encoder=)", command_encoder)
            kwargs["_append_to"] = command_encoder
        return c_dispatch(self, thread_count, *args, **kwargs)

    dispatch.__wrapped__ = c_dispatch
    return dispatch


def install(nabla):
    if not hasattr(nabla.Function.dispatch, "__wrapped__"):
        nabla.Function.dispatch = _make_dispatch(nabla.Function.dispatch)
    nabla.Device.create_command_encoder = _create_command_encoder
    nabla.Device.submit_command_buffer = _submit_command_buffer
    nabla.Function.append_to = _append_to
    # SlangPy part 1's FunctionNode (f.set({...}), f.return_type(...)): its append_to records the
    # call with its bound values (calling the node, not the bare function it wraps)
    node = getattr(nabla, "FunctionNode", None)
    if node is not None and "append_to" not in vars(node):
        node.append_to = _append_to

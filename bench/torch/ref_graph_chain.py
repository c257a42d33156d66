"""PyTorch reference for `nabla graph bench-chain` (include/nabla/graph_chain_bench.h, issue #17
Benchmark 2): the same training step of the chain

    x [N,F] -> act (custom op) -> linear [F,F] -> norm(., g [F]) (custom op) -> linear -> mse

with the user functions as torch custom ops (torch.library.custom_op, a fake impl each, the
backward a registered autograd formula calling another custom op), so torch.compile treats them
as opaque calls as it would a user's CUDA kernel. act = GELU (tanh) = examples/graph_chain.nb's
chain_act, norm = g * x / sqrt(1 + x^2) = chain_norm. Inside the ops, one kernel per formula where
torch allows it: act forward / backward are aten's gelu / gelu_backward (approximate='tanh');
norm's forward and dx are one jiterator kernel each (torch.cuda.jiterator: a CUDA elementwise
kernel from a source string), dg a jiterator kernel + a sum over the rows (--impl aten: the
formulas as aten op chains, every device).

The parameters and data are nabla's numbers (the same splitmix64 stream from --seed, vectorised
with numpy), so the loss column equals nabla's up to rounding. A step = grads set to None,
forward, backward; the median ms of --steps steps (synchronised after each) after --warmup.
kernels: the CUDA kernels of one step (torch.profiler, CUDA kernel events; memcpy / memset not
counted). max_rel_err: loss and parameter gradients against the eager row.

    python3 bench/torch/ref_graph_chain.py [--device cuda] [--rows 1048576] [--width 64]
        [--steps 20] [--warmup 3] [--precision fp32|tf32] [--seed 17]
        [--modes eager,compile,compile_ro] [--impl jiterator|aten]

torch.library.custom_op needs PyTorch >= 2.4; torch.compile 2.0. Compile time is not timed
(reported on stderr).
"""
import argparse
import statistics
import sys
import time
from typing import Tuple

import numpy as np
import torch

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
MODES = ("eager", "compile", "compile_ro")


# ---- nabla's numbers (graph_chain_bench.c: unif / chain_make) ------------------------------------

def unif(state, n):
    """n draws of graph_chain_bench.c's unif() from state: (float32 values in [-1, 1), new state).
    Draw k uses state + (k + 1) * GOLDEN (mod 2^64), so the stream is computed at once."""
    k = np.arange(1, n + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(state) + k * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    v = ((z >> np.uint64(40)).astype(np.float64) / 8388608.0 - 1.0).astype(np.float32)
    return v, (state + n * GOLDEN) & MASK


def chain_data(seed, N, F):
    """w1 [F,F], b1, g, w2 [F,F], b2 [F], x, target [N,F] as float32 numpy arrays."""
    s = (seed * 0x2545F4914F6CDD1D + 2) & MASK
    a = np.float32(np.sqrt(np.float32(3.0) / np.float32(F)))
    out = {}
    for name, n, f in (("w1", F * F, lambda v: a * v), ("b1", F, lambda v: np.float32(0.1) * v),
                       ("g", F, lambda v: np.float32(1) + np.float32(0.25) * v),
                       ("w2", F * F, lambda v: a * v), ("b2", F, lambda v: np.float32(0.1) * v),
                       ("x", N * F, lambda v: np.float32(2) * v),
                       ("target", N * F, lambda v: np.float32(0.5) * v)):
        v, s = unif(s, n)
        out[name] = f(v).astype(np.float32)
    for k in ("w1", "w2"):
        out[k] = out[k].reshape(F, F)
    for k in ("x", "target"):
        out[k] = out[k].reshape(N, F)
    return out


# ---- the user functions as custom ops -------------------------------------------------------------

C0, C1 = 0.7978845608, 0.044715


class AtenImpl:
    """The formulas as aten op chains (any device)."""
    name = "aten"

    @staticmethod
    def act(x):
        return 0.5 * x * (1.0 + torch.tanh(C0 * (x + C1 * x * x * x)))

    @staticmethod
    def act_bwd(dy, x):
        t = torch.tanh(C0 * (x + C1 * x * x * x))
        return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * C0 * (1.0 + 3.0 * C1 * x * x))

    @staticmethod
    def norm(x, g):
        return g * x * torch.rsqrt(1.0 + x * x)

    @staticmethod
    def norm_bwd(dy, x, g):
        r = torch.rsqrt(1.0 + x * x)
        return dy * g * r * r * r, (dy * x * r).reshape(-1, g.shape[-1]).sum(0)


class JitImpl:
    """One kernel per formula: aten's gelu (tanh) forward / backward, jiterator kernels for norm
    (CUDA only)."""
    name = "jiterator"

    def __init__(self):
        from torch.cuda import jiterator
        self._norm = jiterator._create_jit_fn(
            "template <typename T> T chain_norm_f(T x, T g) { return g * x / sqrt(T(1) + x * x); }")
        self._norm_dx = jiterator._create_jit_fn(
            "template <typename T> T chain_norm_dx(T dy, T x, T g) {"
            " T r = T(1) / sqrt(T(1) + x * x); return dy * g * r * r * r; }")
        self._norm_dgt = jiterator._create_jit_fn(
            "template <typename T> T chain_norm_dgt(T dy, T x) {"
            " return dy * x / sqrt(T(1) + x * x); }")

    @staticmethod
    def act(x):
        return torch.nn.functional.gelu(x, approximate="tanh")

    @staticmethod
    def act_bwd(dy, x):
        return torch.ops.aten.gelu_backward(dy, x, approximate="tanh")

    def norm(self, x, g):
        return self._norm(x, g)

    def norm_bwd(self, dy, x, g):
        return self._norm_dx(dy, x, g), self._norm_dgt(dy, x).reshape(-1, g.shape[-1]).sum(0)


IMPL = None  # set by main() before the first call


def opaque_autograd(op, bwd_op):
    """op's backward = bwd_op(dy, *op's inputs) (itself a custom op: opaque to torch.compile)."""
    def setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, dy):
        return bwd_op(dy, *ctx.saved_tensors)

    op.register_autograd(backward, setup_context=setup)


def register_ops():
    """nbchain::act / act_bwd / norm / norm_bwd with fake impls and autograd formulas."""
    from torch.library import custom_op

    @custom_op("nbchain::act", mutates_args=())
    def act(x: torch.Tensor) -> torch.Tensor:
        return IMPL.act(x)

    @custom_op("nbchain::act_bwd", mutates_args=())
    def act_bwd(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return IMPL.act_bwd(dy, x)

    @custom_op("nbchain::norm", mutates_args=())
    def norm(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return IMPL.norm(x, g)

    @custom_op("nbchain::norm_bwd", mutates_args=())
    def norm_bwd(dy: torch.Tensor, x: torch.Tensor, g: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        dx, dg = IMPL.norm_bwd(dy, x, g)
        return dx, dg

    # fake impls: shapes only (what torch.compile traces instead of running the op)
    act.register_fake(lambda x: torch.empty_like(x))
    act_bwd.register_fake(lambda dy, x: torch.empty_like(x))
    norm.register_fake(lambda x, g: torch.empty_like(x))
    norm_bwd.register_fake(lambda dy, x, g: (torch.empty_like(x), torch.empty_like(g)))
    opaque_autograd(act, act_bwd)
    opaque_autograd(norm, norm_bwd)
    return act, norm


class Chain(torch.nn.Module):
    def __init__(self, data, device, act, norm):
        super().__init__()
        p = lambda k: torch.nn.Parameter(torch.from_numpy(data[k]).to(device))
        self.w1, self.b1, self.g, self.w2, self.b2 = (p(k) for k in ("w1", "b1", "g", "w2", "b2"))
        self.act, self.norm = act, norm

    def forward(self, x, target):
        h = self.act(x)
        h = torch.nn.functional.linear(h, self.w1, self.b1)
        h = self.norm(h, self.g)
        h = torch.nn.functional.linear(h, self.w2, self.b2)
        return torch.mean((h - target) ** 2)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def count_kernels(step, device):
    """CUDA kernels of one step (torch.profiler kernel events; memcpy / memset excluded)."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        sync(device)
    n = 0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith(("Memcpy", "Memset")):
            n += 1
    return n


def run_mode(mode, model, x, target, args, device):
    fwd = model
    if mode == "compile":
        fwd = torch.compile(model)
    elif mode == "compile_ro":
        fwd = torch.compile(model, mode="reduce-overhead")
    params = list(model.parameters())

    def step():
        for p in params:
            p.grad = None
        loss = fwd(x, target)
        loss.backward()
        return loss

    t0 = time.perf_counter()
    for _ in range(max(args.warmup, 3 if mode == "compile_ro" else 1)):
        step()
    sync(device)
    print(f"  {mode}: warm-up (compile) {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    loss = step().item()  # the checked step: this step's gradients only
    grads = [p.grad.detach().clone() for p in params]
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    kernels = count_kernels(step, device)
    return statistics.median(times), kernels, loss, grads


def rel_err(loss, grads, ref_loss, ref_grads):
    e = abs(loss - ref_loss) / max(abs(ref_loss), 1e-30)
    for a, b in zip(grads, ref_grads):
        m = b.abs().max().item()
        d = (a - b).abs().max().item()
        e = max(e, d / m if m > 0 else d)
    return e


def main():
    global IMPL
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rows", type=int, default=1 << 20)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--precision", choices=("fp32", "tf32"), default="fp32")
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--impl", choices=("jiterator", "aten"), default=None,
                    help="inside the custom ops (default: jiterator on CUDA, aten elsewhere)")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            ap.error(f"--modes: unknown mode '{m}' ({', '.join(MODES)})")
    if args.rows < 1 or args.width < 1 or args.steps < 1 or args.warmup < 0:
        ap.error("--rows, --width, --steps >= 1, --warmup >= 0")
    if not hasattr(torch, "library") or not hasattr(torch.library, "custom_op"):
        sys.exit(f"ref_graph_chain.py: torch {torch.__version__} lacks torch.library.custom_op "
                 "(PyTorch >= 2.4)")
    device = torch.device(args.device)
    impl = args.impl or ("jiterator" if device.type == "cuda" else "aten")
    if impl == "jiterator" and device.type != "cuda":
        ap.error("--impl jiterator needs a CUDA device")
    IMPL = JitImpl() if impl == "jiterator" else AtenImpl()
    torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    act, norm = register_ops()

    N, F = args.rows, args.width
    data = chain_data(args.seed, N, F)
    x = torch.from_numpy(data["x"]).to(device)
    target = torch.from_numpy(data["target"]).to(device)
    model = Chain(data, device, act, norm)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"# torch {torch.__version__} ref_graph_chain: {device} ({name}), {N} rows x {F} features, "
          f"f32 ({args.precision} GEMMs), median of {args.steps} steps (zero grads + forward + backward)")
    print(f"# x -> nbchain::act (custom op) -> linear -> nbchain::norm(., g) (custom op) -> linear -> "
          f"mse; custom ops' insides: {impl}; GEMMs {12.0 * N * F * F / 1e9:.2f} GFLOP per step")
    print("# kernels: CUDA kernels of one step (torch.profiler); max_rel_err: vs the first row (eager)")
    print(f"{'row':<20} {'ms_step':>10} {'nodes':>6} {'kernels':>8} {'loss':>14} {'max_rel_err':>12}")
    ref = None
    for mode in modes:
        try:
            ms, kernels, loss, grads = run_mode(mode, model, x, target, args, device)
        except Exception as e:  # a torch without compile support: the row is '-'
            print(f"  {mode}: failed: {type(e).__name__}: {e}", file=sys.stderr)
            print(f"{'torch_' + mode:<20} {'-':>10} {'-':>6} {'-':>8} {'-':>14} {'-':>12}")
            continue
        if ref is None:
            ref = (loss, grads)
        err = rel_err(loss, grads, *ref)
        k = "-" if kernels is None else str(kernels)
        print(f"{'torch_' + mode:<20} {ms:10.4f} {'-':>6} {k:>8} {loss:14.7g} {err:12.3g}", flush=True)


if __name__ == "__main__":
    main()

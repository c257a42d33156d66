"""PyTorch reference for `nabla graph bench` (include/nabla/graph_bench.h): the course's random
graphs, the same structure (the same splitmix64 coin per operator from seed, size and depth),
rows eager, torch.compile and torch.compile(mode="reduce-overhead"), printed in the same table
format (columns sweep size depth linears gflop floor_ms, then one per row: the median ms per run).

A graph of depth D at size S: D - 2 operators, each Linear ([S,S] weights, [S] bias) or ReLU,
then ReLU and softmax over the last dim; f32; the input has S rows. One run = the input from
(pageable) host memory to the device, the forward under torch.no_grad(), the output back to the
host, as nabla's rows do. Parameter VALUES are drawn by torch (uniform +-sqrt(3/S) weights,
+-0.1 biases, +-1 inputs, nabla's distributions) but not the same numbers: only the structure
and the shapes are shared. floor_ms = FLOPs (2 S^3 per linear) / the cuBLAS peak measured here
(a 4096^3 torch.mm at the chosen precision).

    python3 bench/torch/ref_graph.py [--device cuda] [--sizes 32,64,...] [--depth 64]
        [--depths 2,4,...] [--size 256] [--samples 10] [--precision fp32|tf32] [--seed 17]
        [--rows eager,compile,compile_ro]

torch.compile needs PyTorch 2; an older torch prints '-' for the compiled rows. Compile time is
not timed (warm-up runs: 1, reduce-overhead 3); it is reported on stderr.
"""
import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

MASK = (1 << 64) - 1
ROWS = ("eager", "compile", "compile_ro")


def mix(state):
    """splitmix64: (new state, output), as graph_bench.c's mix()."""
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def structure(seed, size, depth):
    """ops[i]: 0 linear, 1 relu, 2 softmax (nb_graph_bench_structure)."""
    if depth < 2:
        raise ValueError(f"depth {depth} < 2 (the final relu + softmax)")
    s = (seed ^ ((size * 1000003) & MASK) ^ ((depth << 32) & MASK)) & MASK
    ops = []
    for _ in range(depth - 2):
        s, z = mix(s)
        ops.append(z >> 63)
    return ops + [1, 2]


class Graph(torch.nn.Module):
    def __init__(self, ops, size, gen):
        super().__init__()
        self.ops = ops
        a = (3.0 / size) ** 0.5
        lin = []
        for op in ops:
            if op == 0:
                w = (torch.rand(size, size, generator=gen) * 2 - 1) * a
                b = (torch.rand(size, generator=gen) * 2 - 1) * 0.1
                lin.append((torch.nn.Parameter(w, requires_grad=False),
                            torch.nn.Parameter(b, requires_grad=False)))
        self.w = torch.nn.ParameterList([p[0] for p in lin])
        self.b = torch.nn.ParameterList([p[1] for p in lin])

    def forward(self, x):
        k = 0
        for op in self.ops:
            if op == 0:
                x = F.linear(x, self.w[k], self.b[k])
                k += 1
            elif op == 1:
                x = torch.relu(x)
            else:
                x = torch.softmax(x, dim=-1)
        return x


def gemm_peak(dev):
    """TFLOP/s of a 4096^3 torch.mm on dev: the best of 5 after 2 warm-ups."""
    n = 4096
    a = torch.zeros(n, n, device=dev)
    b = torch.zeros(n, n, device=dev)
    best = float("inf")
    for i in range(7):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.mm(a, b)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if i >= 2:
            best = min(best, dt)
    return 2.0 * n ** 3 / best / 1e12


def time_row(row, model, x_host, dev, samples):
    """median ms per run of one row (nan when the row cannot run here)."""
    if row == "eager":
        fn, warm = model, 1
    else:
        if not hasattr(torch, "compile"):
            return float("nan")
        t0 = time.perf_counter()
        fn = torch.compile(model, mode="reduce-overhead" if row == "compile_ro" else None)
        warm = 3 if row == "compile_ro" else 1
    ys = []

    def run():
        with torch.no_grad():
            y = fn(x_host.to(dev))
            ys.append(y.cpu())

    for _ in range(warm):
        run()
    if row != "eager":
        print(f"  ({row}: compile + warm-up {time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    t = []
    for _ in range(samples):
        t0 = time.perf_counter()
        run()
        t.append((time.perf_counter() - t0) * 1e3)
    y = ys[-1]
    sums = y.sum(-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-3):
        raise RuntimeError(f"{row}: softmax rows do not sum to 1")
    return statistics.median(t)


def int_list(s):
    return [int(v) for v in s.split(",") if v]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--sizes", type=int_list, default=[32 << i for i in range(8)])
    ap.add_argument("--depth", type=int, default=64)
    ap.add_argument("--depths", type=int_list, default=[2 << i for i in range(10)])
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--precision", choices=("fp32", "tf32"), default="fp32")
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--rows", default=",".join(ROWS))
    a = ap.parse_args()
    rows = [r for r in a.rows.split(",") if r]
    for r in rows:
        if r not in ROWS:
            ap.error(f"unknown row '{r}' ({', '.join(ROWS)})")
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    peak = gemm_peak(dev) if cuda else float("nan")
    name = torch.cuda.get_device_name(dev) if cuda else "cpu"
    print(f"# torch {torch.__version__} graph bench: {a.device} ({name}), f32 ({a.precision} GEMMs), "
          f"median of {a.samples} runs (ms per run: input upload, forward, output read)")
    if cuda:
        print(f"# cuBLAS peak {peak:.1f} TFLOP/s (4096^3 GEMM); floor_ms = gflop / peak")
    print(f"{'sweep':<6} {'size':>6} {'depth':>6} {'linears':>7} {'gflop':>10} {'floor_ms':>10}"
          + "".join(f" {r:>16}" for r in ROWS))
    points = [("size", s, a.depth) for s in a.sizes] + [("depth", a.size, d) for d in a.depths]
    for sweep, S, D in points:
        ops = structure(a.seed, S, D)
        lin = sum(1 for o in ops if o == 0)
        gen = torch.Generator().manual_seed(a.seed * 31 + S * 7 + D)
        model = Graph(ops, S, gen).to(dev)
        x = torch.rand(S, S, generator=gen) * 2 - 1
        gflop = 2.0 * lin * S ** 3 / 1e9
        floor = gflop / peak if cuda else float("nan")
        ms = {r: (time_row(r, model, x, dev, a.samples) if r in rows else float("nan")) for r in ROWS}
        fmt = lambda v, w: f" {'-':>{w}}" if v != v else f" {v:>{w}.4f}"  # noqa: E731
        print(f"{sweep:<6} {S:>6} {D:>6} {lin:>7} {gflop:>10.4f}" + fmt(floor, 10)
              + "".join(fmt(ms[r], 16) for r in ROWS), flush=True)


if __name__ == "__main__":
    main()

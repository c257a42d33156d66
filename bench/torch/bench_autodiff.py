"""PyTorch references for nabla's autodiff benchmarks (the autodiff issue), forward + backward:

  1. fused:  f(w[16], b[16], x) = sum_k tanh(w_k * x + b_k) * w_k over 2^24 values of x, w and b
             shared; gradients of w, b and x.
  2. memory-bound: y = dot(w, x), w: float[64] shared, x: 2^22 rows of 64; gradient of w (the
     issue's case: x needs no gradient), then of w and x.

Eager, torch.compile, and CUDA-graph replay of the compiled step, median ms by CUDA events, plus
the memory floor (bytes that must move over the measured copy bandwidth). Run on the GPU machine:

    python3 bench/torch/bench_autodiff.py
"""
import statistics
import sys

try:
    import torch
except ImportError:
    print("torch not installed; skipping the PyTorch reference")
    sys.exit(0)


def time_ms(fn, reps=30, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def copy_gbs(dev):
    src = torch.empty(1 << 28, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src))
    return 2 * src.numel() / (ms * 1e-3) / 1e9


def fused_problem(dev):
    n = 1 << 24
    w = torch.randn(16, device=dev, requires_grad=True)
    b = torch.randn(16, device=dev, requires_grad=True)
    x = torch.randn(n, device=dev, requires_grad=True)

    def f(w, b, x):
        return (torch.tanh(x[:, None] * w + b) * w).sum(dim=1)

    floor_bytes = n * 4 * 3  # x read (fwd/bwd fused), y written, dx written; dy is ones (implicit)
    return "fused tanh-sum 2^24", f, (w, b, x), n, floor_bytes


def dot_problem(dev, want_dx):
    rows = 1 << 22
    w = torch.randn(64, device=dev, requires_grad=True)
    x = torch.randn(rows, 64, device=dev, requires_grad=want_dx)

    def f(w, x):
        return x @ w

    # x read forward and again backward, y written (+ dx written)
    floor_bytes = rows * 64 * 4 * (3 if want_dx else 2) + rows * 4
    return f"dot(w[64], x) 2^22 rows, {'dw+dx' if want_dx else 'dw'}", f, (w, x), rows, floor_bytes


def run(name, f, args, n, floor_bytes, gbs):
    dev = args[0].device
    dy = torch.ones(n, device=dev)

    def step(fn):
        def go():
            for a in args:
                if a.requires_grad:
                    a.grad = None
            y = fn(*args)
            y.backward(dy)
        return go

    eager = time_ms(step(f))
    compiled_f = torch.compile(f)
    comp = time_ms(step(compiled_f))
    # CUDA graph of the compiled forward+backward step.
    g = torch.cuda.CUDAGraph()
    go = step(compiled_f)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            go()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        go()
    graph = time_ms(g.replay)
    floor = floor_bytes / (gbs * 1e9) * 1e3
    print(f"{name:28s} eager {eager:7.3f} ms  compile {comp:7.3f} ms  graph {graph:7.3f} ms"
          f"  floor {floor:6.3f} ms")


def main():
    if not torch.cuda.is_available():
        print("no CUDA device; skipping")
        return
    dev = torch.device("cuda")
    gbs = copy_gbs(dev)
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  copy {gbs:.0f} GB/s")
    for prob in (fused_problem(dev), dot_problem(dev, False), dot_problem(dev, True)):
        run(*prob, gbs)


if __name__ == "__main__":
    main()

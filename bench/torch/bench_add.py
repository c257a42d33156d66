"""PyTorch reference for nabla's call benchmarks (issue 3): elementwise add over 2^26 floats and
the warm per-call overhead of a one-element elementwise op, in eager mode, torch.compile, and CUDA
graph replay. Run on the GPU machine:

    python3 bench/torch/bench_add.py

Prints one line per variant: median ms (event-timed, after warm-up) and GB/s counting 3 x 4 bytes
per element (two reads, one write), beside a device-to-device copy of the same bytes.
"""
import statistics
import sys

try:
    import torch
except ImportError:  # the reference is optional: nabla itself never needs torch
    print("torch not installed; skipping the PyTorch reference")
    sys.exit(0)


def time_ms(fn, reps=50, warmup=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def per_call_us(fn, calls=2000):
    """Host wall time per call for tiny tensors (launch overhead), synchronizing at the end."""
    import time
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def main():
    if not torch.cuda.is_available():
        print("no CUDA device; skipping")
        return
    dev = torch.device("cuda")
    n = 1 << 26
    a = torch.randn(n, device=dev)
    b = torch.randn(n, device=dev)
    out = torch.empty_like(a)
    gb = 3 * 4 * n / 1e9

    def eager():
        torch.add(a, b, out=out)

    compiled = torch.compile(lambda x, y: x + y)

    def comp():
        compiled(a, b)

    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        eager()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        eager()

    copy_src = torch.randn(n * 3 // 2, device=dev)  # copy moving the same 12 bytes/element
    copy_dst = torch.empty_like(copy_src)

    rows = [
        ("torch eager add 2^26", time_ms(eager)),
        ("torch.compile add 2^26", time_ms(comp)),
        ("torch CUDA graph add 2^26", time_ms(g.replay)),
        ("torch d2d copy (same bytes)", time_ms(lambda: copy_dst.copy_(copy_src))),
    ]
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    for name, ms in rows:
        print(f"{name:32s} {ms:8.3f} ms  {gb / (ms * 1e-3):8.1f} GB/s")

    x1 = torch.randn(1, device=dev)
    y1 = torch.empty_like(x1)
    print(f"{'torch eager 1-elem op':32s} {per_call_us(lambda: torch.mul(x1, x1, out=y1)):8.2f} us/call")
    sq = torch.compile(lambda x: x * x)
    print(f"{'torch.compile 1-elem op':32s} {per_call_us(lambda: sq(x1)):8.2f} us/call")


if __name__ == "__main__":
    main()

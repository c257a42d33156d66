"""Warm per-call overhead of a one-argument nabla function called from Python (issue 5).

    PYTHONPATH=build/python python3 bench/python/bench_call.py [--n 20000]

Measures, each as the best of 5 batches of --n calls (CUDA batches end with a synchronize, so
queued work is counted), square(f32[1]) (examples/square.nb):
  numpy-cpu      numpy array in -> numpy array out, module on the cpu
  tensor-cpu     nabla.Tensor in/out on the cpu
  torch-cpu      torch CPU tensor in -> torch tensor out (if torch is installed)
  torch-cuda     torch CUDA tensor in -> torch CUDA tensor out, module on cuda (streams ordered)
  tensor-cuda    nabla.Tensor on cuda in/out
  autograd-cuda  y = m.square(x) with x.requires_grad, then y.backward(g): fwd + bwd per iteration
and the same computation in PyTorch eager for reference (x * x; autograd fwd+bwd).
Targets: <= 15 us per call, <= 40 us per autograd iteration (SlangPy: ~150-170 us). The
autograd rows are followed by a breakdown (forward alone, the bwds call alone, and torch's own
custom-Function overhead on the same machine).
"""
import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def best(fn, n, sync=None, reps=5):
    fn()
    if sync:
        sync()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if sync:
            sync()
        ts.append((time.perf_counter() - t0) / n * 1e6)
    return min(ts)


def autograd_rows(torch, f, dev, sync, n):
    """y = f(x) with x.requires_grad, y.backward(g) per iteration, checked, with a breakdown:
    the recorded forward alone, the bwds call alone, torch's own custom-Function overhead."""
    rows = []
    xg = torch.ones(1, device=dev, requires_grad=True)
    g = torch.ones(1, device=dev)
    tc = torch.ones(1, device=dev)

    def step():
        f(xg).backward(g)

    def tstep():
        (xg * xg).backward(g)

    rows.append((f"autograd-{dev} fwd+bwd", best(step, max(n // 4, 100), sync)))
    xg.grad = None
    step()
    assert float(xg.grad[0]) == 2.0, xg.grad
    rows.append((f"autograd-{dev} torch eager x*x fwd+bwd (reference)",
                 best(tstep, max(n // 4, 100), sync)))
    rows.append((f"  {dev}: forward only (graph recorded)", best(lambda: f(xg), n, sync)))
    bw = f.bwds
    rows.append((f"  {dev}: bwds call (grads allocated)",
                 best(lambda: bw(tc, _grads_alloc=(0,), _dout=g), n, sync)))

    class Id(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, gy):
            return gy

    rows.append((f"  {dev}: torch custom autograd.Function x*1 fwd+bwd (reference)",
                 best(lambda: Id.apply(xg).backward(g), max(n // 4, 100), sync)))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    args = ap.parse_args()
    n = args.n

    t0 = time.perf_counter()
    import nabla

    t_import = (time.perf_counter() - t0) * 1e3
    print(f"import nabla: {t_import:.1f} ms (numpy imported: {'numpy' in sys.modules}, "
          f"torch imported: {'torch' in sys.modules})")
    import numpy as np

    src = os.path.join(ROOT, "examples", "square.nb")
    rows = []
    m = nabla.load_module(src, device="cpu")
    f = m.square
    x = np.ones(1, np.float32)
    rows.append(("numpy-cpu", best(lambda: f(x), n)))
    xt = nabla.Tensor.from_numpy(x, device="cpu")
    rows.append(("tensor-cpu", best(lambda: f(xt), n)))
    try:
        import torch
    except ImportError:
        torch = None
        print("torch not installed: torch rows skipped")
    if torch is not None:
        tx = torch.ones(1)
        rows.append(("torch-cpu", best(lambda: f(tx), n)))
        rows.append(("torch-cpu eager x*x (reference)", best(lambda: tx * tx, n)))
        rows += autograd_rows(torch, f, "cpu", None, n)
    if nabla.cuda_available():
        mc = nabla.load_module(src, device="cuda")
        fc = mc.square
        dev = nabla.device("cuda")
        xc = nabla.Tensor.from_numpy(x, device=dev)
        rows.append(("tensor-cuda", best(lambda: fc(xc), n, dev.synchronize)))
        if torch is not None and torch.cuda.is_available():
            sync = torch.cuda.synchronize
            tc = torch.ones(1, device="cuda")
            y = fc(tc)
            assert y.device == tc.device and float(y[0]) == 1.0
            rows.append(("torch-cuda", best(lambda: fc(tc), n, sync)))
            rows.append(("torch-cuda eager x*x (reference)", best(lambda: tc * tc, n, sync)))
            rows += autograd_rows(torch, fc, "cuda", sync, n)
            # a larger array: per-call overhead should not grow with N (zero-copy)
            big = torch.ones(1 << 20, device="cuda")
            rows.append(("torch-cuda f32[2^20]", best(lambda: fc(big), max(n // 10, 100), sync)))
            rows.append(("torch-cuda f32[2^20] eager x*x (reference)",
                         best(lambda: big * big, max(n // 10, 100), sync)))
    else:
        print("no CUDA device: cuda rows skipped (" + str(nabla._nabla.cuda_unavailable_reason()) + ")")
    print(f"{'case':55s} us/call")
    for name, us in rows:
        print(f"{name:55s} {us:8.2f}")


if __name__ == "__main__":
    main()

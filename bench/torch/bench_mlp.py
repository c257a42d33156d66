"""PyTorch reference for nabla's fused-MLP benchmark (bench/bench_mlp.c), same model:

  width W in 16/32/64/128, 5 hidden layers, ReLU, no bias, no output activation,
  n_in = n_out = W, batch 2^21, fp16 weights and activations (tensor-core GEMMs accumulate in
  fp32 in cuBLAS).

  train  forward + backward with weight gradients (input needs no grad; dL/dy given: y.backward(dy))
  infer  forward under torch.inference_mode()

Variants: eager fp16 ("half": the model and inputs in fp16) for every width, then torch.compile of
the same and CUDA-graph replay of the compiled step (for --compile-widths, default 64,128: each
compile takes tens of seconds). Median ms per step by CUDA events; samples/s = batch/time.

    python3 bench/torch/bench_mlp.py [--log2b 21] [--widths 16,32,64,128] [--compile-widths 64,128]
"""
import argparse
import statistics
import sys

try:
    import torch
except ImportError:
    print("torch not installed; skipping the PyTorch reference")
    sys.exit(0)


def time_ms(fn, reps=10, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / reps)
    return statistics.median(ts)


def make_model(w, hidden, dev):
    layers = [torch.nn.Linear(w, w, bias=False), torch.nn.ReLU()]
    for _ in range(hidden - 1):
        layers += [torch.nn.Linear(w, w, bias=False), torch.nn.ReLU()]
    layers += [torch.nn.Linear(w, w, bias=False)]
    return torch.nn.Sequential(*layers).to(dev).half()


def problem(w, B, dev):
    model = make_model(w, 5, dev)
    x = torch.rand(B, w, device=dev, dtype=torch.half) * 2 - 1
    dy = (torch.rand(B, w, device=dev, dtype=torch.half) * 2 - 1) * 1e-3
    return model, x, dy


def report(w, B, variant, mode, ms):
    print(f"{w:<6} {variant:<10} {mode:<6} {ms:10.4f} ms {B / (ms * 1e-3):14.4g} samples/s", flush=True)


def train_fn(m, x, dy):
    def f():
        for p in m.parameters():
            p.grad = None
        m(x).backward(dy)
    return f


def infer_fn(m, x):
    def f():
        with torch.inference_mode():
            m(x)
    return f


def bench_eager(w, B, dev):
    model, x, dy = problem(w, B, dev)
    report(w, B, "eager", "train", time_ms(train_fn(model, x, dy)))
    report(w, B, "eager", "infer", time_ms(infer_fn(model, x)))
    del model, x, dy
    torch.cuda.empty_cache()


def bench_compiled(w, B, dev):
    model, x, dy = problem(w, B, dev)
    try:
        cm = torch.compile(model)
        report(w, B, "compile", "train", time_ms(train_fn(cm, x, dy)))
        report(w, B, "compile", "infer", time_ms(infer_fn(cm, x)))
        # CUDA graph of the compiled step (gradients written in place)
        for p in model.parameters():
            p.grad = torch.zeros_like(p)

        def step():
            cm(x).backward(dy)

        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        report(w, B, "cudagraph", "train", time_ms(g.replay))
        gi = torch.cuda.CUDAGraph()
        with torch.inference_mode():
            for _ in range(3):
                cm(x)
            torch.cuda.synchronize()
            with torch.cuda.graph(gi):
                cm(x)
        report(w, B, "cudagraph", "infer", time_ms(gi.replay))
    except Exception as e:  # torch.compile needs a working triton; report and go on
        print(f"  width {w}: torch.compile/cudagraph failed: {type(e).__name__}: {e}", flush=True)
    del model, x, dy
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log2b", type=int, default=21)
    ap.add_argument("--widths", default="16,32,64,128")
    ap.add_argument("--compile-widths", default="64,128")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device; skipping the PyTorch reference")
        return
    dev = torch.device("cuda")
    B = 1 << a.log2b
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}: MLP 5 hidden layers, ReLU,"
          f" no bias, fp16, batch 2^{a.log2b}, n_in = n_out = width")
    print(f"{'width':<6} {'variant':<10} {'mode':<6} {'time':>13} {'throughput':>24}", flush=True)
    for w in [int(s) for s in a.widths.split(",") if s]:
        bench_eager(w, B, dev)
    for w in [int(s) for s in a.compile_widths.split(",") if s]:
        bench_compiled(w, B, dev)


if __name__ == "__main__":
    main()

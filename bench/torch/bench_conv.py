"""PyTorch reference for nabla's CUDA conv2d (tests/test_nn_tape_conv_cuda.c, NB_CONV_BENCH=1):
F.conv2d forward + backward (dx, dw, db) of the reference UNet's convolutions at batch 32, per
precision, cuDNN with benchmark=True, CUDA events:
  fp32   f32 tensors, no TF32
  tf32   f32 tensors, TF32 allowed
  bf16   f32 tensors under bf16 autocast (the cast of x and w is part of the time)
  bf16s  bf16 storage: x, dy (and so y, dx) bf16 channels-first (NCHW) tensors, weights f32
         master copies cast to bf16 inside the step (as autocast does), dw / db summed in f32;
         nabla's "bf16s" rows (bf16-stored activations, f32 parameters) do the same work
Each precision is timed eagerly (forward / backward split by an event) and, as "graph", the
whole step captured in one CUDA graph and replayed (no launch overhead).

  python3 bench_conv.py [--iters 20] [--batch 32] [--precs fp32,tf32,bf16,bf16s]
"""
import argparse

import torch
import torch.nn.functional as F

# (C, O, S, K): the same list as bench_shapes in tests/test_nn_tape_conv_cuda.c
SHAPES = [(64, 64, 64, 3), (128, 64, 64, 3), (128, 128, 32, 3), (256, 128, 32, 3), (192, 192, 16, 3),
          (384, 192, 16, 3), (256, 256, 8, 3), (512, 256, 8, 3), (3, 64, 64, 3), (64, 3, 64, 3),
          (128, 64, 64, 1), (256, 128, 32, 1), (192, 576, 16, 1)]


def bench(C, O, S, K, prec, N, iters):
    torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
    torch.backends.cudnn.allow_tf32 = prec == "tf32"
    dev = "cuda"
    xdt = torch.bfloat16 if prec == "bf16s" else torch.float32
    x = torch.randn(N, C, S, S, device=dev, dtype=xdt).contiguous().requires_grad_()
    w = (torch.randn(O, C, K, K, device=dev) * 0.05).requires_grad_()
    b = torch.zeros(O, device=dev, requires_grad=True)
    dy = torch.randn(N, O, S, S, device=dev)
    ac = torch.autocast("cuda", dtype=torch.bfloat16, enabled=prec == "bf16")

    def fwd():
        with ac:
            if prec == "bf16s":
                return F.conv2d(x, w.to(torch.bfloat16), b.to(torch.bfloat16), padding=K // 2)
            return F.conv2d(x, w, b, padding=K // 2)

    y0 = fwd()
    dyc = dy.to(y0.dtype)
    del y0

    def step():
        y = fwd()
        e1 = torch.cuda.Event(enable_timing=True)
        e1.record()
        y.backward(dyc)
        return e1

    for _ in range(3):
        step()
    tf = tb = 0.0
    for _ in range(iters):
        e0 = torch.cuda.Event(enable_timing=True)
        e2 = torch.cuda.Event(enable_timing=True)
        e0.record()
        e1 = step()
        e2.record()
        e2.synchronize()
        tf += e0.elapsed_time(e1)
        tb += e1.elapsed_time(e2)
    tf /= iters
    tb /= iters
    fl = 2.0 * N * O * S * S * C * K * K
    print(f"torch N{N} C{C:<3d} O{O:<3d} S{S:<2d} K{K} {prec:5s} fwd {tf:7.3f} ms {fl / tf * 1e-9:6.1f} TF/s  "
          f"bwd {tb:7.3f} ms {2 * fl / tb * 1e-9:6.1f} TF/s  total {tf + tb:7.3f} ms", flush=True)
    # the same step captured in one CUDA graph (gradients reset to None before capture so that
    # the graph's backward writes them, as a training step after zero_grad(set_to_none) would)
    try:
        x.grad = w.grad = b.grad = None
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                x.grad = w.grad = b.grad = None
                fwd().backward(dyc)
        torch.cuda.current_stream().wait_stream(s)
        x.grad = w.grad = b.grad = None
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fwd().backward(dyc)
        for _ in range(3):
            g.replay()
        e0 = torch.cuda.Event(enable_timing=True)
        e2 = torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(iters):
            g.replay()
        e2.record()
        e2.synchronize()
        tg = e0.elapsed_time(e2) / iters
        print(f"torch N{N} C{C:<3d} O{O:<3d} S{S:<2d} K{K} {prec:5s} graph fwd+bwd {tg:7.3f} ms "
              f"{3 * fl / tg * 1e-9:6.1f} TF/s", flush=True)
    except Exception as e:  # noqa: BLE001 - report and go on with the next shape
        print(f"torch N{N} C{C} O{O} S{S} K{K} {prec} graph failed: {e}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--precs", default="fp32,tf32,bf16,bf16s")
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    print(torch.__version__, torch.cuda.get_device_name(), "cudnn", torch.backends.cudnn.version(), flush=True)
    for (C, O, S, K) in SHAPES:
        for prec in a.precs.split(","):
            bench(C, O, S, K, prec, a.batch, a.iters)


if __name__ == "__main__":
    main()

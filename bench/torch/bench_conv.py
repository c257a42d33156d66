"""PyTorch reference for nabla's CUDA conv2d (tests/test_nn_tape_conv_cuda.c, NB_CONV_BENCH=1):
F.conv2d forward + backward (dx, dw, db) of the reference UNet's convolutions at batch 32, per
precision (fp32 = no TF32, tf32, bf16 = autocast), cuDNN with benchmark=True, CUDA events.

  python3 bench_conv.py [--iters 20] [--batch 32]
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
    x = torch.randn(N, C, S, S, device=dev, requires_grad=True)
    w = (torch.randn(O, C, K, K, device=dev) * 0.05).requires_grad_()
    b = torch.zeros(O, device=dev, requires_grad=True)
    dy = torch.randn(N, O, S, S, device=dev)
    ac = torch.autocast("cuda", dtype=torch.bfloat16, enabled=prec == "bf16")

    def step():
        with ac:
            y = F.conv2d(x, w, b, padding=K // 2)
        e1 = torch.cuda.Event(enable_timing=True)
        e1.record()
        y.backward(dy.to(y.dtype))
        return y, e1

    for _ in range(3):
        step()
    tf = tb = 0.0
    for _ in range(iters):
        e0 = torch.cuda.Event(enable_timing=True)
        e2 = torch.cuda.Event(enable_timing=True)
        e0.record()
        _, e1 = step()
        e2.record()
        e2.synchronize()
        tf += e0.elapsed_time(e1)
        tb += e1.elapsed_time(e2)
    tf /= iters
    tb /= iters
    fl = 2.0 * N * O * S * S * C * K * K
    print(f"torch N{N} C{C:<3d} O{O:<3d} S{S:<2d} K{K} {prec} fwd {tf:7.3f} ms {fl / tf * 1e-9:6.1f} TF/s  "
          f"bwd {tb:7.3f} ms {2 * fl / tb * 1e-9:6.1f} TF/s  total {tf + tb:7.3f} ms", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    print(torch.__version__, torch.cuda.get_device_name(), "cudnn", torch.backends.cudnn.version(), flush=True)
    for (C, O, S, K) in SHAPES:
        for prec in ("fp32", "tf32", "bf16"):
            bench(C, O, S, K, prec, a.batch, a.iters)


if __name__ == "__main__":
    main()

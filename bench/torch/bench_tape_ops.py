"""PyTorch eager reference for tools/device/tapecuda_bench.c: group norm and group norm + SiLU,
forward + backward (dx, dgamma, dbeta), at the UNet's shapes, fp32, CUDA events.

    python3 bench/torch/bench_tape_ops.py [iters]
"""
import sys

import torch
import torch.nn.functional as F


def time_ms(fn, iters):
    for _ in range(5):
        fn()
    e0 = torch.cuda.Event(enable_timing=True)
    e1 = torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(iters):
        fn()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) / iters


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    print("device:", torch.cuda.get_device_name(), "torch", torch.__version__)
    for shape in [(32, 128, 32, 32), (32, 64, 64, 64), (32, 256, 16, 16), (32, 256, 8, 8)]:
        C = shape[1]
        for silu in (False, True):
            g = torch.Generator(device=dev).manual_seed(0)
            x = torch.randn(shape, device=dev, generator=g, requires_grad=True)
            gamma = (1 + torch.rand(C, device=dev, generator=g)).requires_grad_()
            beta = torch.rand(C, device=dev, generator=g).requires_grad_()
            dy = torch.randn(shape, device=dev, generator=g)

            def fwd():
                y = F.group_norm(x, 32, gamma, beta, 1e-5)
                return F.silu(y) if silu else y

            def fwd_nograd():
                with torch.no_grad():
                    return fwd()

            def both():
                # fresh gradients each time (as the tape's first contribution to dx): no
                # accumulation kernels into x.grad / gamma.grad / beta.grad
                x.grad = gamma.grad = beta.grad = None
                fwd().backward(dy)

            tf = time_ms(fwd_nograd, iters)
            ta = time_ms(both, iters)
            # GPU time alone: the same fwd + bwd captured once in a CUDA graph and replayed (no
            # Python / autograd overhead between kernels)
            try:
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        both()
                torch.cuda.current_stream().wait_stream(s)
                x.grad = gamma.grad = beta.grad = None
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    fwd().backward(dy)
                tg = time_ms(graph.replay, iters)
            except Exception as e:  # report and keep the eager numbers
                print("graph capture failed:", e)
                tg = float("nan")
            n = x.numel()
            gb = 6 * 4 * n / 1e9
            name = "group_norm_silu" if silu else "group_norm"
            print(f"torch {name:16s} {list(shape)} G=32  fwd+bwd {ta:.4f} ms  fwd(no grad) {tf:.4f} ms"
                  f"  graph-replayed fwd+bwd {tg:.4f} ms ({gb / (tg / 1e3):.0f} GB/s at 6 passes)")


def chain(iters):
    """The UNet-like chain of tools/device/tapecuda_bench.c, fwd + bwd, at [32,128,32,32]."""
    dev = torch.device("cuda")
    N, C, H = 32, 128, 32
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(N, C, H, H, device=dev, generator=g, requires_grad=True)
    tgt = torch.randn(N, 2 * C, H, H, device=dev, generator=g)
    emb = torch.randn(N, C, device=dev, generator=g, requires_grad=True)
    ps = [(1 + torch.rand(C, device=dev, generator=g)).requires_grad_() for _ in range(4)]
    leaves = [x, emb] + ps

    def step():
        for t in leaves:
            t.grad = None
        h = F.silu(F.group_norm(x, 32, ps[0], ps[1], 1e-5))
        h = h + emb[:, :, None, None]
        h = F.silu(F.group_norm(h, 32, ps[2], ps[3], 1e-5))
        y = h + x
        z = torch.cat([y, x], 1)
        p = F.avg_pool2d(z, 2)
        u = F.interpolate(p, scale_factor=2, mode="nearest")
        F.mse_loss(u, tgt).backward()

    te = time_ms(step, iters)
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        tg = time_ms(graph.replay, iters)
    except Exception as e:
        print("graph capture failed:", e)
        tg = float("nan")
    print(f"torch chain step [{N},{C},{H},{H}] (same ops, fwd+bwd): eager {te:.4f} ms,"
          f" graph-replayed {tg:.4f} ms")


if __name__ == "__main__":
    main()
    chain(int(sys.argv[1]) if len(sys.argv) > 1 else 50)

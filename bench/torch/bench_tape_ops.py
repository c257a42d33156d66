"""PyTorch reference for bench/bench_tape_ops.c, CUDA events, eager and CUDA-graph
replayed: group norm and group norm + SiLU, forward + backward (dx, dgamma, dbeta), at the UNet's
shapes; the elementwise / layout ops (silu, add, add_channel, concat, upsample2x, avgpool2x,
transpose, slice_channels) at [32,128,32,32]; the UNet-like chain. Each in fp32 and with bf16
activations (bf16 tensors; group norm's gamma / beta stay fp32 where PyTorch takes the mix, as
the tape's parameters do).

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


def graph_ms(step, iters):
    """GPU time alone: step captured once in a CUDA graph and replayed (no Python / autograd
    overhead between kernels); nan when capture fails."""
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
        return time_ms(graph.replay, iters)
    except Exception as e:  # report and keep the eager numbers
        print("graph capture failed:", e)
        return float("nan")


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    print("device:", torch.cuda.get_device_name(), "torch", torch.__version__)
    for shape in [(32, 128, 32, 32), (32, 64, 64, 64), (32, 256, 16, 16), (32, 256, 8, 8)]:
        for silu in (False, True):
            for dt in (torch.float32, torch.bfloat16):
                gn_case(shape, silu, dt, iters)
    for name in EW_OPS:
        for dt in (torch.float32, torch.bfloat16):
            ew_case(name, dt, iters)


def gn_case(shape, silu, dt, iters):
    dev = torch.device("cuda")
    C = shape[1]
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(shape, device=dev, generator=g).to(dt).requires_grad_()
    gamma = (1 + torch.rand(C, device=dev, generator=g)).requires_grad_()
    beta = torch.rand(C, device=dev, generator=g).requires_grad_()
    dy = torch.randn(shape, device=dev, generator=g).to(dt)
    try:  # bf16 input with fp32 gamma / beta (the tape's mix)
        F.group_norm(x.detach(), 32, gamma.detach(), beta.detach(), 1e-5)
    except RuntimeError:
        gamma = gamma.detach().to(dt).requires_grad_()
        beta = beta.detach().to(dt).requires_grad_()

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
    tg = graph_ms(both, iters)
    n = x.numel()
    gb = 5 * x.element_size() * n / 1e9
    name = "group_norm_silu" if silu else "group_norm"
    dn = "bf16" if dt == torch.bfloat16 else "f32"
    print(f"torch {name:16s} {dn:4s} {list(shape)} G=32  fwd+bwd {ta:.4f} ms  fwd(no grad)"
          f" {tf:.4f} ms  graph-replayed fwd+bwd {tg:.4f} ms ({gb / (tg / 1e3):.0f} GB/s at"
          f" 5 passes)")


# name -> (input shapes, fn); activations [32,128,32,32] as in bench/bench_tape_ops.c
N_, C_, H_ = 32, 128, 32
EW_OPS = {
    "silu": ([(N_, C_, H_, H_)], lambda a: F.silu(a)),
    "add": ([(N_, C_, H_, H_)] * 2, lambda a, b: a + b),
    "add_channel": ([(N_, C_, H_, H_), (N_, C_)], lambda a, b: a + b[:, :, None, None]),
    "concat": ([(N_, C_, H_, H_)] * 2, lambda a, b: torch.cat([a, b], 1)),
    "upsample2x": ([(N_, C_, H_ // 2, H_ // 2)],
                   lambda a: F.interpolate(a, scale_factor=2, mode="nearest")),
    "avgpool2x": ([(N_, C_, H_, H_)], lambda a: F.avg_pool2d(a, 2)),
    "transpose": ([(N_, C_, H_ * H_)], lambda a: a.transpose(1, 2).contiguous()),
    "slice_channels": ([(N_, 2 * C_, H_, H_)], lambda a: a[:, :C_].contiguous()),
}


def ew_case(name, dt, iters):
    dev = torch.device("cuda")
    shapes, fn = EW_OPS[name]
    g = torch.Generator(device=dev).manual_seed(0)
    xs = [torch.randn(s, device=dev, generator=g).to(dt).requires_grad_() for s in shapes]
    dy = torch.randn(fn(*xs).shape, device=dev, generator=g).to(dt)

    def both():
        for x in xs:
            x.grad = None
        fn(*xs).backward(dy)

    ta = time_ms(both, iters)
    tg = graph_ms(both, iters)
    dn = "bf16" if dt == torch.bfloat16 else "f32"
    print(f"torch {name:16s} {dn:4s} {list(shapes[0])}  fwd+bwd {ta:.4f} ms  graph-replayed fwd+bwd"
          f" {tg:.4f} ms")


def chain(iters, dt=torch.float32):
    """The UNet-like chain of bench/bench_tape_ops.c, fwd + bwd, at [32,128,32,32]; bf16:
    x and the activations bf16 (emb and the group norms' gamma / beta stay fp32 where PyTorch
    takes the mix), the target fp32."""
    dev = torch.device("cuda")
    N, C, H = 32, 128, 32
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(N, C, H, H, device=dev, generator=g).to(dt).requires_grad_()
    tgt = torch.randn(N, 2 * C, H, H, device=dev, generator=g)
    emb = torch.randn(N, C, device=dev, generator=g).to(dt).requires_grad_()
    ps = [(1 + torch.rand(C, device=dev, generator=g)).requires_grad_() for _ in range(4)]
    try:
        F.group_norm(x.detach(), 32, ps[0].detach(), ps[1].detach(), 1e-5)
    except RuntimeError:
        ps = [p.detach().to(dt).requires_grad_() for p in ps]
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
        F.mse_loss(u.float(), tgt).backward()

    te = time_ms(step, iters)
    tg = graph_ms(step, iters)
    dn = "bf16" if dt == torch.bfloat16 else "f32"
    print(f"torch chain step {dn:4s} [{N},{C},{H},{H}] (same ops, fwd+bwd): eager {te:.4f} ms,"
          f" graph-replayed {tg:.4f} ms")


if __name__ == "__main__":
    main()
    it = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    chain(it)
    chain(it, torch.bfloat16)

"""PyTorch reference for the tape's fused CUDA attention (tests/test_nn_tape_attn_cuda.c, bench part):
torch.nn.functional.scaled_dot_product_attention forward and forward+backward at the reference UNet's
attention shapes (batch 32: q, k, v [32,6,256,32] at 16x16 and [32,8,64,32] at 8x8), fp32 and bf16,
per SDPA backend, timed with CUDA events (best mean of 3 repetitions of 50 iterations): forward,
forward+backward eagerly (includes PyTorch's launch overhead: the small shapes are CPU-bound) and
forward+backward replayed from a CUDA graph (GPU time only, comparable with nabla's event timings).

    python3 bench/torch/bench_attn.py
    python3 bench/torch/bench_attn.py --qkv   # QKVAttentionLegacy (the fused qkv op's reference)
"""
import sys
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [(32, 6, 256, 32), (32, 8, 64, 32), (8, 8, 1024, 64)]
BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}


def timed(fn, iters=50, reps=3):
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(iters):
            fn()
        e1.record()
        e1.synchronize()
        best = min(best, e0.elapsed_time(e1) / iters)
    return best * 1e3  # us


def graphed(fn):
    """fn captured into a CUDA graph and timed by replay (nan if capture fails)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            fn()
    except Exception:
        return float("nan")
    return timed(g.replay)


def legacy_einsum(qkv, heads):
    """guided-diffusion's QKVAttentionLegacy.forward: qkv [N, heads*3d, L] -> [N, heads*d, L]."""
    bs, width, length = qkv.shape
    ch = width // (3 * heads)
    q, k, v = qkv.reshape(bs * heads, ch * 3, length).split(ch, dim=1)
    scale = 1 / ch ** 0.25
    w = torch.einsum("bct,bcs->bts", q * scale, k * scale)
    w = torch.softmax(w.float(), dim=-1).type(w.dtype)
    a = torch.einsum("bts,bcs->bct", w, v)
    return a.reshape(bs, -1, length)


def legacy_sdpa(qkv, heads):
    """The same through scaled_dot_product_attention (layout copies around it)."""
    bs, width, length = qkv.shape
    ch = width // (3 * heads)
    q, k, v = qkv.reshape(bs, heads, 3, ch, length).transpose(-1, -2).unbind(2)
    o = F.scaled_dot_product_attention(q, k, v)  # [bs, heads, L, ch]
    return o.transpose(-1, -2).reshape(bs, heads * ch, length)


def main_qkv():
    """QKVAttentionLegacy at the reference UNet's shapes (nabla's nb_tape_qkv_attention):
    qkv [32, 576, 256] heads 6 (16x16, 192 ch) and [32, 768, 64] heads 8 (8x8, 256 ch)."""
    for dtype, tf32 in ((torch.float32, False), (torch.float32, True), (torch.bfloat16, False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        name = "tf32" if tf32 else str(dtype)[6:]
        for N, heads, d, L in ((32, 6, 32, 256), (32, 8, 32, 64)):
            g = torch.Generator(device="cuda").manual_seed(0)
            qkv = torch.randn((N, 3 * heads * d, L), device="cuda", dtype=dtype, generator=g).requires_grad_()
            do = torch.randn((N, heads * d, L), device="cuda", dtype=dtype, generator=g)
            for impl, fn in (("einsum", legacy_einsum), ("sdpa", legacy_sdpa)):
                try:
                    def fwd():
                        with torch.no_grad():
                            fn(qkv, heads)

                    def fwdbwd():
                        torch.autograd.grad(fn(qkv, heads), (qkv,), do)

                    tf = graphed(fwd)
                    tg = graphed(fwdbwd)
                except Exception as e:
                    print(f"TORCH qkv-legacy {name:8s} qkv[{N},{3 * heads * d},{L}] {impl}: n/a ({str(e).splitlines()[0][:60]})")
                    continue
                print(f"TORCH qkv-legacy {name:8s} qkv[{N},{3 * heads * d},{L}] heads {heads} {impl:6s}: "
                      f"fwd graph {tf:7.1f} us  fwd+bwd graph {tg:7.1f} us")
    torch.backends.cuda.matmul.allow_tf32 = False


def main():
    if not torch.cuda.is_available():
        print("no CUDA")
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    warnings.filterwarnings("ignore")
    print("torch", torch.__version__, torch.cuda.get_device_name())
    if "--qkv" in sys.argv:
        main_qkv()
        return 0
    for dtype in (torch.float32, torch.bfloat16):
        for shape in SHAPES:
            N, H, T, d = shape
            g = torch.Generator(device="cuda").manual_seed(0)
            q, k, v = (torch.randn(shape, device="cuda", dtype=dtype, generator=g).requires_grad_()
                       for _ in range(3))
            do = torch.randn(shape, device="cuda", dtype=dtype, generator=g)
            flops_f = 4.0 * N * H * T * T * d
            for name, be in BACKENDS.items():
                try:
                    with sdpa_kernel(be):
                        o = F.scaled_dot_product_attention(q, k, v)
                        o.backward(do)

                        def fwd():
                            with torch.no_grad():
                                F.scaled_dot_product_attention(q, k, v)

                        def fwdbwd():
                            o = F.scaled_dot_product_attention(q, k, v)
                            # grads w.r.t. inputs only (no accumulation into .grad)
                            torch.autograd.grad(o, (q, k, v), do)

                        tf = timed(fwd)
                        tfb = timed(fwdbwd)
                        # GPU time without eager launch overhead: fwd+bwd replayed from a CUDA graph
                        tg = graphed(fwdbwd)
                except Exception as e:  # backend not available for this dtype / shape
                    print(f"TORCH attn {str(dtype)[6:]:8s} q{list(shape)} {name:9s}: n/a ({str(e).splitlines()[0][:60]})")
                    continue
                print(f"TORCH attn {str(dtype)[6:]:8s} q{list(shape)} {name:9s}: fwd {tf:7.1f} us "
                      f"({flops_f / tf * 1e-6:5.1f} TFLOP/s)  fwd+bwd eager {tfb:7.1f} us  "
                      f"fwd+bwd graph {tg:7.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())

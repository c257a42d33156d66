"""Overheads and the inline-MLP training step of nabla.slangtorch (issue #15's numbers), on CUDA.

    PYTHONPATH=build/python python3 bench/python/bench_slangtorch.py --example DIR [--steps 4000]
    PYTHONPATH=build/python python3 bench/python/bench_slangtorch.py --cpu [--runs 5]

--cpu: the host-side launch overhead on CPU torch tensors (no GPU needed): the same launch, the
bind alone (m.copy(...) without launchRaw), Function.launch_raw called directly with the
prepared dict (the C floor), and x.mul_(1); the minimum over --runs runs of 2000 calls each.

DIR holds slang-torch's examples/inline-mlp-example (image-model.slang, inline-mlp.slang,
cuda_matmul_prelude.cuh, image_model.py; not part of this repository). `slangtorch` is mapped to
nabla.slangtorch in sys.modules, then the example's own image_model.py is imported unmodified.

Prints:
  launch      µs per `m.copy(input=x, output=y).launchRaw(...)` of a [AutoPyBindCUDA] kernel on
              1024 floats (host time per call over 2000 calls, then one synchronize), beside a
              torch eager op (x.mul_(1)) for scale;
  loadModule  ms for slangtorch.loadModule of an already cached module in a fresh process (and
              the first launch there, which loads the kernel from the disk cache);
  inline-MLP  ms/step of mlp_image_fit.py's loop body (RenderImage.apply at 512x512, MSELoss,
              backward, Adam) after 20 warm-up steps, CUDA events, and the loss at a few
              iterations (same seed and init as mlp_image_fit.py and bench/torch/ref_inline_mlp.py).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import torch

import nabla.slangtorch as slangtorch

COPY_SRC = textwrap.dedent("""\
    [AutoPyBindCUDA]
    [CudaKernel]
    void copy(TensorView<float> input, TensorView<float> output)
    {
        uint i = (cudaBlockIdx() * cudaBlockDim() + cudaThreadIdx()).x;
        if (i >= input.size(0)) return;
        output.store(i, input.load(i));
    }
    """)


def bench_launch(tmp):
    path = os.path.join(tmp, "copy.slang")
    with open(path, "w") as f:
        f.write(COPY_SRC)
    m = slangtorch.loadModule(path)
    x = torch.rand(1024, device="cuda")
    y = torch.zeros_like(x)
    for _ in range(50):
        m.copy(input=x, output=y).launchRaw(blockSize=(256, 1, 1), gridSize=(4, 1, 1))
    torch.cuda.synchronize()
    assert torch.equal(x, y), "copy kernel gave wrong values"
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        m.copy(input=x, output=y).launchRaw(blockSize=(256, 1, 1), gridSize=(4, 1, 1))
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    slangtorch.checkErrors(m)  # (launchRaw's bounds checks are deferred on CUDA: none may be pending)
    for _ in range(n):
        x.mul_(1)
    t3 = time.perf_counter()
    torch.cuda.synchronize()
    print(f"launch: {1e6 * (t1 - t0) / n:.2f} us/call (host), {1e6 * (time.perf_counter() - t0 - (t3 - t2)) / n:.2f} us/call "
          f"incl. the final sync; torch eager x.mul_(1): {1e6 * (t3 - t2) / n:.2f} us/call")
    return path


def bench_launch_cpu(tmp, runs):
    """µs per call on CPU torch tensors: the Python layer's overhead beside launch_raw's own."""
    path = os.path.join(tmp, "copy.slang")
    with open(path, "w") as f:
        f.write(COPY_SRC)
    m = slangtorch.loadModule(path)
    x = torch.rand(1024)
    y = torch.zeros_like(x)
    blk, grd = (256, 1, 1), (4, 1, 1)
    m.copy(input=x, output=y).launchRaw(blockSize=blk, gridSize=grd)
    assert torch.equal(x, y), "copy kernel gave wrong values"
    fn = m._function("copy", "cpu")
    flat = {"input": x, "output": y}
    copy = m.copy
    cases = {
        "launch  m.copy(...).launchRaw(...)": lambda: m.copy(input=x, output=y).launchRaw(blockSize=blk, gridSize=grd),
        "bind    m.copy(...)": lambda: copy(input=x, output=y),
        "C floor Function.launch_raw": lambda: fn.launch_raw(blk, grd, "primal", flat),
        "torch   x.mul_(1)": lambda: x.mul_(1),
    }
    n = 2000
    for name, f in cases.items():
        best = float("inf")
        for _ in range(runs):
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            best = min(best, time.perf_counter() - t0)
        print(f"{name:40s} {1e6 * best / n:7.2f} us/call (min of {runs} x {n})")


def bench_load(path):
    code = textwrap.dedent(f"""\
        import time, torch
        import nabla.slangtorch as slangtorch
        x = torch.rand(1024, device="cuda"); y = torch.zeros_like(x); torch.cuda.synchronize()
        t0 = time.perf_counter()
        m = slangtorch.loadModule({path!r})
        t1 = time.perf_counter()
        m.copy(input=x, output=y).launchRaw(blockSize=(256, 1, 1), gridSize=(4, 1, 1))
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        print(f"{{1e3 * (t1 - t0):.2f}} {{1e3 * (t2 - t1):.2f}}")
        """)
    res = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        res.append([float(v) for v in out.split()])
    load = min(r[0] for r in res)
    first = min(r[1] for r in res)
    print(f"loadModule (cached, fresh process): {load:.2f} ms; first launch there: {first:.2f} ms")


def bench_inline_mlp(example, steps):
    sys.modules["slangtorch"] = slangtorch
    cwd = os.getcwd()
    os.chdir(example)
    sys.path.insert(0, example)
    try:
        import image_model  # the example's own file, unmodified
        from image_model import RenderImage
    finally:
        os.chdir(cwd)
    torch.manual_seed(0)
    eye = torch.diag(torch.ones(16, dtype=torch.float)).cuda().contiguous()
    w = [torch.randn((16, 16), dtype=torch.float, requires_grad=True, device="cuda:0") for _ in range(3)]
    b = [torch.zeros(16, dtype=torch.float, requires_grad=True, device="cuda:0") for _ in range(3)]
    grid = torch.randn((33, 33, 14), dtype=torch.float, requires_grad=True, device="cuda:0")
    g = torch.Generator().manual_seed(1)
    target = torch.rand((512, 512, 3), generator=g).cuda()
    opt = torch.optim.Adam([*w, *b, grid], lr=3e-2)
    loss_fn = torch.nn.MSELoss()

    def step():
        pred = RenderImage.apply(512, 512, grid, *[eye + wi * 0.05 for wi in w], *b)
        loss = loss_fn(pred, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    report = {0, 1, 10, 100, 1000, steps - 1}
    losses = {}
    for i in range(steps):
        loss = step()
        if i in report:
            losses[i] = loss.item()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(20):
        step()
    e0.record()
    n = 200
    for _ in range(n):
        step()
    e1.record()
    torch.cuda.synchronize()
    print(f"inline-MLP (nabla.slangtorch): {e0.elapsed_time(e1) / n:.3f} ms/step; loss "
          + ", ".join(f"it {k}: {v:.5f}" for k, v in sorted(losses.items())))

    # the two kernels alone (the example's launches, as RenderImage.forward / backward make them)
    m = image_model.m
    ws = [eye + wi.detach() * 0.05 for wi in w]
    bs = [bi.detach() for bi in b]
    out = torch.zeros((512, 512, 3), device="cuda")
    blk = image_model.launchBlockSize
    grd = ((512 + blk[0] - 1) // blk[0], (512 + blk[1] - 1) // blk[1], 1)
    mlp = m.MLP(layers=[m.Linear(weights=ws[i], bias=bs[i]) for i in range(3)])
    wd = [torch.zeros_like(x) for x in ws]
    bd = [torch.zeros_like(x) for x in bs]
    gd = torch.zeros_like(grid)
    go = torch.ones_like(out)
    mlp_d = m.MLP(layers=[m.Linear(weights=(ws[i], wd[i]), bias=(bs[i], bd[i])) for i in range(3)])
    fg = grid.detach()

    def fwd():
        m.renderImage(mlp=mlp, featureGrid=fg, imageOutput=out).launchRaw(blockSize=blk, gridSize=grd)

    def bwd():
        m.renderImage.bwd(mlp=mlp_d, featureGrid=(fg, gd), imageOutput=(out, go)).launchRaw(blockSize=blk, gridSize=grd)

    for name, fn in (("renderImage", fwd), ("renderImage.bwd", bwd)):
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        e0.record()
        for _ in range(50):
            fn()
        e1.record()
        torch.cuda.synchronize()
        print(f"  {name}: {e0.elapsed_time(e1) / 50:.3f} ms per launch (GPU time incl. launch)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--example", help="slang-torch's examples/inline-mlp-example directory")
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--cpu", action="store_true", help="launch overheads on CPU tensors only")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    if a.cpu:
        print(f"CPU  torch {torch.__version__}")
        with tempfile.TemporaryDirectory() as tmp:
            bench_launch_cpu(tmp, a.runs)
        return
    if not torch.cuda.is_available():
        raise SystemExit("bench_slangtorch: needs a CUDA GPU")
    print(f"GPU {torch.cuda.get_device_name()}  torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        path = bench_launch(tmp)
        bench_load(path)
        if a.example:
            bench_inline_mlp(os.path.abspath(a.example), a.steps)


if __name__ == "__main__":
    main()

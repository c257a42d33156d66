"""PyTorch reference of slang-torch's inline-MLP image example (examples/inline-mlp-example:
image-model.slang + inline-mlp.slang, trained by mlp_image_fit.py), written in plain torch ops so
that its loss curve and its speed can be compared with the Slang kernels run by nabla.slangtorch.

The model, as the Slang code computes it for the pixel (x, y) of a W x H image (x indexes dim 0):
  cell = (W/32) x (H/32) pixels (16 x 16 at 512 x 512) of a (32+1) x (32+1) x 14 feature grid, w = the pixel's position in its cell,
  f = bilinear(grid, cell, w) ++ (w.x, w.y)                                   [W*H, 16]
  h = relu(f @ W1 + b1); h = relu(h @ W2 + b2); h = relu(h @ W3 + b3)         (x^T W + b, ReLU after
  every layer, as MLP.eval does); rgb = h[:, :3]
  loss = MSE(rgb, target), Adam(lr 3e-2) over W_l = I + 0.05 w_l, b_l and the grid.
Initialisation and order of random draws follow mlp_image_fit.py (torch.manual_seed(0), three
randn 16x16, zeros biases, randn grid), so the curves start from the same point.

    python3 bench/torch/ref_inline_mlp.py [--steps 4000] [--variants eager,compile,compile-cudagraphs] [--target IMG.npy]

Prints the loss at a few iterations and ms/step per variant (CUDA events, after 20 warm-up steps;
compile = torch.compile of the model, compile-cudagraphs = mode="reduce-overhead"; the
backward and Adam run as torch runs them).
tf32 matmuls are allowed as the Slang example's WMMA tf32 MMA computes them."""
import argparse

import torch

GRID = 32  # grid cells per side (the grid has GRID + 1 corners)


def render(width, height, grid, ws, bs):
    dev = grid.device
    x = torch.arange(width, device=dev)
    y = torch.arange(height, device=dev)
    px, py = torch.meshgrid(x, y, indexing="ij")               # [W, H]: pixel (x, y) at [x, y]
    sx, sy = width // GRID, height // GRID                     # cellSize = frameDim / 32 (uint)
    cx, cy = px // sx, py // sy
    wx = (px.float() / sx - cx.float()).reshape(-1, 1)
    wy = (py.float() / sy - cy.float()).reshape(-1, 1)
    cx, cy = cx.reshape(-1), cy.reshape(-1)
    f = (grid[cx, cy] * (1 - wx) * (1 - wy) + grid[cx + 1, cy] * wx * (1 - wy)
         + grid[cx, cy + 1] * (1 - wx) * wy + grid[cx + 1, cy + 1] * wx * wy)
    h = torch.cat([f, wx, wy], dim=1)                          # [W*H, 16]
    for w, b in zip(ws, bs):
        h = torch.relu(h @ w + b)
    return h[:, :3].reshape(width, height, 3)


def make_params(dev):
    torch.manual_seed(0)
    eye = torch.eye(16, device=dev)
    w = [torch.randn((16, 16), requires_grad=True, device=dev) for _ in range(3)]
    b = [torch.zeros(16, requires_grad=True, device=dev) for _ in range(3)]
    grid = torch.randn((GRID + 1, GRID + 1, 14), requires_grad=True, device=dev)
    return eye, w, b, grid


def train(target, steps, render_fn=render, report=None):
    report = report or {0, 1, 10, 100, 1000, steps - 1}
    dev = target.device
    eye, w, b, grid = make_params(dev)
    opt = torch.optim.Adam([*w, *b, grid], lr=3e-2)
    loss_fn = torch.nn.MSELoss()
    W, H = target.shape[0], target.shape[1]

    def step():
        pred = render_fn(W, H, grid, [eye + wi * 0.05 for wi in w], b)
        loss = loss_fn(pred, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    losses = {}
    for i in range(steps):
        loss = step()
        if i in report:
            losses[i] = loss.item()
    return losses, step


def time_steps(fn, n=200, warm=20):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    t0 = torch.cuda.Event(enable_timing=True)
    t1 = torch.cuda.Event(enable_timing=True)
    t0.record()
    for _ in range(n):
        fn()
    t1.record()
    torch.cuda.synchronize()
    return t0.elapsed_time(t1) / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--variants", default="eager,compile,compile-cudagraphs")
    ap.add_argument("--target", help=".npy image (H, W, 3) uint8; default: a random image")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = "cuda"
    if a.target:
        import numpy as np
        t = torch.from_numpy(np.load(a.target)).to(dev)[:, :, :3].contiguous().float() / 255.0
    else:
        g = torch.Generator().manual_seed(1)
        t = torch.rand((a.size, a.size, 3), generator=g).to(dev)
    print(f"GPU {torch.cuda.get_device_name()}  torch {torch.__version__}  image {tuple(t.shape)}")
    for v in a.variants.split(","):
        if v == "eager":
            fn = render
        elif v == "compile":
            fn = torch.compile(render)
        elif v == "compile-cudagraphs":
            fn = torch.compile(render, mode="reduce-overhead")
        else:
            raise SystemExit(f"unknown variant {v!r} (eager, compile, compile-cudagraphs)")
        losses, step = train(t, a.steps, fn)
        ms = time_steps(step)
        print(f"torch {v}: {ms:.3f} ms/step; loss " + ", ".join(f"it {k}: {x:.5f}" for k, x in sorted(losses.items())))


if __name__ == "__main__":
    main()

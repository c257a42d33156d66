"""PyTorch reference of `nabla fit-image --model grid` (examples/image_model.nb): a 33x33x14
feature grid, bilinear features + the pixel's position in its cell -> MLP of three 16x16 layers
(ReLU, ReLU, linear; no bias) -> RGB, L2 loss, Adam (lr 1e-2, betas 0.9/0.99, eps 1e-15), every
pixel of a 512x512 image per step. Prints ms/step for eager and torch.compile.

    python3 bench/torch/bench_fit_grid.py [--size 512] [--steps 50]"""
import argparse
import time

import torch

G, F = 33, 14


def features(grid, uv):
    p = uv.clamp(0, 1) * (G - 1)
    c = p.floor().long().clamp(max=G - 2)
    f = p - c.float()
    cx, cy, fx, fy = c[:, 0], c[:, 1], f[:, :1], f[:, 1:]
    g00, g01 = grid[cy, cx], grid[cy, cx + 1]
    g10, g11 = grid[cy + 1, cx], grid[cy + 1, cx + 1]
    a = g00 + (g01 - g00) * fx
    b = g10 + (g11 - g10) * fx
    return torch.cat([a + (b - a) * fy, fx, fy], dim=1)


def model(grid, w, uv):
    h = features(grid, uv)
    h = torch.relu(h @ w[0].t())
    h = torch.relu(h @ w[1].t())
    return (h @ w[2].t())[:, :3]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--variants", default="eager,compile")
    a = ap.parse_args()
    dev = "cuda"
    torch.manual_seed(0)
    H = W = a.size
    ys, xs = torch.meshgrid(torch.arange(H, device=dev), torch.arange(W, device=dev), indexing="ij")
    uv = torch.stack([(xs.flatten() + 0.5) / W, (ys.flatten() + 0.5) / H], dim=1)
    target = torch.rand(H * W, 3, device=dev)
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}: grid model, {H * W} pixels per step")
    for v in a.variants.split(","):
        grid = (torch.rand(G, G, F, device=dev) * 0.2 - 0.1).requires_grad_()
        w = ((torch.rand(3, 16, 16, device=dev) * 2 - 1) * 0.6124).requires_grad_()
        opt = torch.optim.Adam([grid, w], lr=1e-2, betas=(0.9, 0.99), eps=1e-15)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = ((model(grid, w, uv) - target) ** 2).mean()
            loss.backward()
            opt.step()
            return loss

        fn = torch.compile(step) if v == "compile" else step
        try:
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(a.steps):
                fn()
            torch.cuda.synchronize()
            ms = 1e3 * (time.perf_counter() - t) / a.steps
            print(f"{v:8s} {ms:8.3f} ms/step")
        except Exception as e:  # noqa: BLE001 (report and go on with the next variant)
            print(f"{v:8s} failed: {type(e).__name__}: {e}")


if __name__ == "__main__":
    main()

"""PyTorch reference for `nabla fit-image --model hash` (tiny-cuda-nn's image sample):

  multiresolution hash grid (16 levels x 2 features, 2^15 entries per level, base resolution 16,
  per-level scale 1.5; dense indexing where a level fits, else the Instant-NGP spatial hash)
  -> MLP 32 -> 64 -> 64 -> 3, ReLU, no bias -> L2 loss against bilinear samples of an image,
  Adam (lr 1e-2, betas (0.9, 0.99), eps 1e-15) over all parameters, 2^18 samples per step.

The grid follows nabla's conventions exactly (nn_encoding.h: level l has floor(16 * 1.5^l) + 1
vertices per side on [0, 1], same hash, same storage order), written in pure torch and
vectorised over levels and corners (one gather for all 16 levels). Timed variants, median
ms/step by CUDA events over whole training steps (sampling, forward, backward, Adam):

  eager         fp32, torch.optim.Adam(fused=True)
  compile       torch.compile of the forward + loss, fused Adam
  cuda-graph    the compiled step (forward, backward, capturable fused Adam) captured in a CUDA
                graph and replayed
  compile-amp   compile, with the MLP under torch.autocast(bfloat16) (nabla's and tiny-cuda-nn's
                MLPs multiply in 16-bit too; bf16 needs no loss scaling)

Run on the GPU machine:  python3 bench/torch/bench_fit_image.py [--steps N] [--batch N]
"""
import argparse
import math
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
except ImportError:
    print("torch not installed; skipping the PyTorch reference")
    sys.exit(0)


class HashGrid(nn.Module):
    def __init__(self, levels=16, feats=2, log2_table=15, base=16, scale=1.5):
        super().__init__()
        T = 1 << log2_table
        sides, offsets, hashed = [], [], []
        total = 0
        for l in range(levels):
            side = math.floor(base * scale ** l) + 1
            dense = side * side
            h = dense > T
            entries = T if h else dense
            sides.append(side)
            offsets.append(total)
            hashed.append(h)
            total += entries
        self.levels, self.feats, self.mask = levels, feats, T - 1
        self.register_buffer("side", torch.tensor(sides, dtype=torch.int64))
        self.register_buffer("offset", torch.tensor(offsets, dtype=torch.int64))
        self.register_buffer("hashed", torch.tensor(hashed, dtype=torch.bool))
        self.table = nn.Parameter(torch.empty(total, feats).uniform_(-1e-4, 1e-4))
        self.register_buffer("cx", torch.tensor([0, 1, 0, 1], dtype=torch.int64))
        self.register_buffer("cy", torch.tensor([0, 0, 1, 1], dtype=torch.int64))

    def forward(self, x):  # x [B, 2] in [0, 1] -> [B, levels * feats]
        B = x.shape[0]
        sidef = (self.side - 1).to(x.dtype)                           # [L]
        pos = x.clamp(0, 1)[:, None, :] * sidef[None, :, None]        # [B, L, 2]
        cell = torch.minimum(pos.floor(), (self.side - 2).to(x.dtype)[None, :, None])
        frac = pos - cell
        ci = cell.to(torch.int64)
        gx = ci[:, :, 0:1] + self.cx                                  # [B, L, 4]
        gy = ci[:, :, 1:2] + self.cy
        dense_idx = gx + self.side[None, :, None] * gy
        hash_idx = (gx ^ (gy * 2654435761)) & self.mask
        idx = torch.where(self.hashed[None, :, None], hash_idx, dense_idx) + self.offset[None, :, None]
        fx, fy = frac[:, :, 0:1], frac[:, :, 1:2]
        wx = torch.where(self.cx.bool(), fx, 1 - fx)
        wy = torch.where(self.cy.bool(), fy, 1 - fy)
        w = wx * wy                                                   # [B, L, 4]
        v = self.table[idx]                                           # [B, L, 4, F]
        return (w[..., None] * v).sum(dim=2).reshape(B, self.levels * self.feats)


def make_model():
    return nn.Sequential(
        HashGrid(),
        nn.Linear(32, 64, bias=False), nn.ReLU(),
        nn.Linear(64, 64, bias=False), nn.ReLU(),
        nn.Linear(64, 3, bias=False))


def sample(img, x):  # bilinear between pixel centres, clamped (nabla's nb_image_sample)
    H, W, _ = img.shape
    px = (x[:, 0] * W - 0.5).clamp(0, W - 1)
    py = (x[:, 1] * H - 0.5).clamp(0, H - 1)
    x0 = px.floor().clamp(max=W - 2)
    y0 = py.floor().clamp(max=H - 2)
    fx, fy = (px - x0)[:, None], (py - y0)[:, None]
    x0, y0 = x0.long(), y0.long()
    p00, p01 = img[y0, x0], img[y0, x0 + 1]
    p10, p11 = img[y0 + 1, x0], img[y0 + 1, x0 + 1]
    top = p00 + fx * (p01 - p00)
    bot = p10 + fx * (p11 - p10)
    return top + fy * (bot - top)


def time_steps(step, n, warmup):
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts), statistics.mean(ts)


def psnr_of(model, img):
    H, W, _ = img.shape
    ys, xs = torch.meshgrid(torch.arange(H, device=img.device), torch.arange(W, device=img.device), indexing="ij")
    coords = torch.stack([(xs + 0.5) / W, (ys + 0.5) / H], dim=-1).reshape(-1, 2).float()
    with torch.no_grad():
        pred = model(coords).clamp(0, 1).reshape(H, W, 3)
    mse = ((pred - img) ** 2).mean().item()
    return 10 * math.log10(1 / mse) if mse > 0 else float("inf")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=1 << 18)
    ap.add_argument("--steps", type=int, default=50, help="timed steps per variant")
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--variants", default="eager,compile,cuda-graph,compile-amp")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device; skipping")
        return
    dev = torch.device("cuda")
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, batch {args.batch}")
    # a smooth random test image (timing does not depend on the content)
    H = W = args.size
    yy, xx = torch.meshgrid(torch.linspace(0, 1, H, device=dev), torch.linspace(0, 1, W, device=dev), indexing="ij")
    img = torch.stack([0.5 + 0.5 * torch.sin(20 * xx * yy), 0.5 + 0.5 * torch.cos(13 * xx),
                       ((xx * 16).floor() + (yy * 16).floor()) % 2], dim=-1).contiguous()
    B = args.batch
    results = {}
    for variant in args.variants.split(","):
        torch.manual_seed(1)
        model = make_model().to(dev)
        capturable = variant == "cuda-graph"
        opt = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.9, 0.99), eps=1e-15,
                               fused=True, capturable=capturable)

        amp = variant.endswith("-amp")

        def loss_fn(x, target):
            if amp:
                feat = model[0](x)
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    y = model[1:](feat)
                return ((y.float() - target) ** 2).mean()
            return ((model(x) - target) ** 2).mean()

        fwd = torch.compile(loss_fn) if variant in ("compile", "cuda-graph", "compile-amp") else loss_fn

        def step():
            x = torch.rand(B, 2, device=dev)
            target = sample(img, x)
            loss = fwd(x, target)
            opt.zero_grad(set_to_none=False)
            loss.backward()
            opt.step()
            return loss

        t0 = time.time()
        try:
            if variant == "cuda-graph":
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        step()
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    step()
                run = g.replay
            else:
                run = step
            for _ in range(3):
                run()
            torch.cuda.synchronize()
            setup = time.time() - t0
            med, mean = time_steps(run, args.steps, 5)
            p = psnr_of(model, img)
            results[variant] = med
            print(f"{variant:11s} median {med:8.3f} ms/step  mean {mean:8.3f}  (setup {setup:5.1f} s, "
                  f"psnr after {args.steps + 11} steps {p:5.2f} dB)", flush=True)
        except Exception as e:  # a variant that fails to build is reported, not fatal
            print(f"{variant:11s} FAILED: {type(e).__name__}: {str(e)[:300]}", flush=True)
    print("summary ms/step:", ", ".join(f"{k} {v:.3f}" for k, v in results.items()))


if __name__ == "__main__":
    main()

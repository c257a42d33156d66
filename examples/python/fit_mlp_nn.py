"""Fits an image with a multiresolution hash grid + fully fused MLP (Instant-NGP's / tiny-cuda-nn's
"fit an image" sample) using nabla.nn only: no numpy, no torch.

    PYTHONPATH=build/python python3 examples/python/fit_mlp_nn.py                 # built-in image
    PYTHONPATH=build/python python3 examples/python/fit_mlp_nn.py photo.png --steps 2000 --out fit.png

Everything stays on the device: random batches are sampled there (ImageSampler), the loss keeps a
running sum there (Loss), and Adam updates the hash grid and the MLP in one launch; the host reads
a number only when it prints.
"""
import argparse
import time

import nabla
import nabla.nn as nn


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("image", nargs="?", help="PNG to fit (default: nabla's procedural test image)")
    ap.add_argument("--size", type=int, default=256, help="side of the procedural image")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=1 << 16)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", help="write the fitted image here (PNG)")
    a = ap.parse_args()

    dev = nabla.device(a.device)
    if dev.kind == "cpu":  # keep the CPU reference run short
        a.batch = min(a.batch, 1 << 12)
        a.steps = min(a.steps, 200)
        a.size = min(a.size, 128)
    img = nn.image_read_png(a.image, 3, dev) if a.image else nn.image_procedural(a.size, a.size, dev)
    H, W, C = img.shape

    enc = nn.HashGrid(n_dims=2, n_levels=16, n_features=2, log2_table_size=15 if dev.kind == "cpu" else 19,
                      base_resolution=16, per_level_scale=1.5, device=dev)
    mlp = nn.FusedMLP(enc.n_output_dims, C, width=64, hidden_layers=2, activation="relu", device=dev)
    model = nn.Sequential(enc, mlp)
    opt = nn.Adam(model, lr=a.lr, betas=(0.9, 0.99), eps=1e-15)
    loss = nn.Loss("l2")
    sample = nn.ImageSampler(img, a.batch, seed=1, stratified=True)
    enc.set_spatially_ordered(True)
    coords = nn.image_pixel_coords(W, H, dev)
    print(f"{W}x{H}x{C} on {dev.name}: {model.n_params} parameters, batch {a.batch}")

    t0 = time.perf_counter()
    for step in range(a.steps):
        x, target = sample(step)
        model.backward(loss(model(x), target))
        opt.step()
        if (step + 1) % max(a.steps // 5, 1) == 0:
            pred = model.inference(coords)  # [H*W, C], on the device
            ms = (time.perf_counter() - t0) * 1e3 / (step + 1)
            print(f"step {step + 1:5d}  loss {loss.value():.5f}  PSNR {nn.psnr(pred, img):.2f} dB  "
                  f"{ms:.2f} ms/step (with evaluation)")
    if a.out:
        nn.image_write_png(a.out, model.inference(coords), height=H)
        print("wrote", a.out)


if __name__ == "__main__":
    main()

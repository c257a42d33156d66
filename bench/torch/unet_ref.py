"""PyTorch reference for nabla's diffusion UNet (include/nabla/nn_unet.h).

A compact re-implementation of guided-diffusion's UNetModel with the same module names (so the
state_dict keys are the ones nabla writes): num_head_channels set, use_scale_shift_norm=False,
resblock_updown=False, legacy QKV attention order, learn_sigma=False, no dropout.

  python3 unet_ref.py count                      # parameters of the reference config (20,494,211)
  python3 unet_ref.py check UNET_FORWARD_BIN DIR  # PyTorch-written checkpoints -> nabla forward == torch forward
  python3 unet_ref.py load CKPT                   # a nabla-written checkpoint loads into the torch model (strict)
  python3 unet_ref.py bench [--batch 32] [--precision fp32|tf32|bf16] [--steps 20] [--compile MODE]
                                                  # DDPM training step of the reference config on CUDA
                                                  # (eager, or the model under torch.compile with MODE
                                                  # default / reduce-overhead (CUDA graphs) / ...)
No third-party package besides torch: safetensors files are read / written by hand (the layout is
simple); when the `safetensors` package is installed, `load` also reads the file with it.
"""
import json
import math
import os
import struct
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

REFERENCE = dict(image_size=64, in_channels=3, out_channels=3, model_channels=64,
                 channel_mult=[1, 2, 3, 4], num_res_blocks=2, attention_resolutions=[16, 8],
                 num_head_channels=32, conv_resample=0, num_groups=32)


def timestep_embedding(t, dim, max_period=10000):
    half = dim // 2
    # in float64 like nabla (guided-diffusion uses float32; the difference is ~1e-5 at t ~ 1000)
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float64, device=t.device) / half)
    args = t[:, None].double() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1).float()


class ResBlock(nn.Module):
    def __init__(self, ch, emb, out, groups):
        super().__init__()
        self.in_layers = nn.Sequential(nn.GroupNorm(groups, ch), nn.SiLU(), nn.Conv2d(ch, out, 3, padding=1))
        self.emb_layers = nn.Sequential(nn.SiLU(), nn.Linear(emb, out))
        self.out_layers = nn.Sequential(nn.GroupNorm(groups, out), nn.SiLU(), nn.Dropout(0.0),
                                        nn.Conv2d(out, out, 3, padding=1))
        self.skip_connection = nn.Identity() if out == ch else nn.Conv2d(ch, out, 1)

    def forward(self, x, emb):
        h = self.in_layers(x)
        h = h + self.emb_layers(emb).type(h.dtype)[..., None, None]
        return self.skip_connection(x) + self.out_layers(h)


class AttentionBlock(nn.Module):
    def __init__(self, ch, head_channels, groups):
        super().__init__()
        self.heads = ch // head_channels
        self.norm = nn.GroupNorm(groups, ch)
        self.qkv = nn.Conv1d(ch, 3 * ch, 1)
        self.proj_out = nn.Conv1d(ch, ch, 1)

    def forward(self, x):
        b, c, *sp = x.shape
        x2 = x.reshape(b, c, -1)
        qkv = self.qkv(self.norm(x2))
        bs, width, length = qkv.shape
        d = width // (3 * self.heads)
        q, k, v = qkv.reshape(bs * self.heads, 3 * d, length).split(d, dim=1)  # legacy order
        scale = 1 / math.sqrt(math.sqrt(d))
        logits = torch.einsum("bct,bcs->bts", q * scale, k * scale)
        w = torch.softmax(logits if logits.dtype == torch.float64 else logits.float(), dim=-1).type(q.dtype)
        a = torch.einsum("bts,bcs->bct", w, v).reshape(bs, -1, length)
        return (x2 + self.proj_out(a)).reshape(b, c, *sp)


class Downsample(nn.Module):
    def __init__(self, ch, conv):
        super().__init__()
        self.op = nn.Conv2d(ch, ch, 3, stride=2, padding=1) if conv else nn.AvgPool2d(2, 2)

    def forward(self, x):
        return self.op(x)


class Upsample(nn.Module):
    def __init__(self, ch, conv):
        super().__init__()
        self.use_conv = conv
        if conv:
            self.conv = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x):
        x = F.interpolate(x, scale_factor=2, mode="nearest")
        return self.conv(x) if self.use_conv else x


class Seq(nn.Sequential):
    def forward(self, x, emb):
        for layer in self:
            x = layer(x, emb) if isinstance(layer, ResBlock) else layer(x)
        return x


class UNet(nn.Module):
    def __init__(self, c):
        super().__init__()
        mc, g, hc, conv = c["model_channels"], c["num_groups"], c["num_head_channels"], bool(c["conv_resample"])
        emb, S, attn, mult, nrb = 4 * mc, c["image_size"], c["attention_resolutions"], c["channel_mult"], c["num_res_blocks"]
        self.mc = mc
        self.time_embed = nn.Sequential(nn.Linear(mc, emb), nn.SiLU(), nn.Linear(emb, emb))
        self.input_blocks = nn.ModuleList([Seq(nn.Conv2d(c["in_channels"], mc, 3, padding=1))])
        chans, ch, ds = [mc], mc, 1
        for lvl, m in enumerate(mult):
            for _ in range(nrb):
                layers = [ResBlock(ch, emb, m * mc, g)]
                ch = m * mc
                if S // ds in attn:
                    layers.append(AttentionBlock(ch, hc, g))
                self.input_blocks.append(Seq(*layers))
                chans.append(ch)
            if lvl != len(mult) - 1:
                self.input_blocks.append(Seq(Downsample(ch, conv)))
                chans.append(ch)
                ds *= 2
        self.middle_block = Seq(ResBlock(ch, emb, ch, g), AttentionBlock(ch, hc, g), ResBlock(ch, emb, ch, g))
        self.output_blocks = nn.ModuleList()
        for lvl, m in list(enumerate(mult))[::-1]:
            for i in range(nrb + 1):
                ich = chans.pop()
                layers = [ResBlock(ch + ich, emb, mc * m, g)]
                ch = mc * m
                if S // ds in attn:
                    layers.append(AttentionBlock(ch, hc, g))
                if lvl and i == nrb:
                    layers.append(Upsample(ch, conv))
                    ds //= 2
                self.output_blocks.append(Seq(*layers))
        self.out = nn.Sequential(nn.GroupNorm(g, ch), nn.SiLU(), nn.Conv2d(mc, c["out_channels"], 3, padding=1))

    def forward(self, x, t):
        emb = self.time_embed(timestep_embedding(t, self.mc).to(self.time_embed[0].weight.dtype))
        hs, h = [], x
        for m in self.input_blocks:
            h = m(h, emb)
            hs.append(h)
        h = self.middle_block(h, emb)
        for m in self.output_blocks:
            h = m(torch.cat([h, hs.pop()], dim=1), emb)
        return self.out(h)


# ---- safetensors by hand ----------------------------------------------------------------------

def st_write(path, tensors, meta):
    header, off, blobs = {"__metadata__": {k: str(v) for k, v in meta.items()}}, 0, []
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu", torch.float32).contiguous()
        b = t.numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def st_read(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, e in header.items():
        assert e["dtype"] == "F32", (name, e["dtype"])
        a, b = e["data_offsets"]
        buf = bytearray(data[base + a:base + b])
        out[name] = torch.frombuffer(buf, dtype=torch.float32).reshape(e["shape"]) if b > a else torch.zeros(e["shape"])
    return out, meta


def meta_of(c):
    return {k: (",".join(str(x) for x in v) if isinstance(v, list) else v) for k, v in c.items()}


def config_of(meta):
    c = {}
    for k, v in meta.items():
        if k in ("channel_mult", "attention_resolutions"):
            c[k] = [int(x) for x in v.split(",") if x]
        elif k in REFERENCE:
            c[k] = int(v)
    return c


# ---- commands ---------------------------------------------------------------------------------

def cmd_count():
    n = sum(p.numel() for p in UNet(REFERENCE).parameters())
    print(f"reference config parameters (torch): {n:,}", "OK" if n == 20494211 else "MISMATCH (expected 20,494,211)")
    return n == 20494211


def cmd_check(fwd_bin, tmp):
    os.makedirs(tmp, exist_ok=True)
    ok = True
    configs = [
        dict(REFERENCE, image_size=16, model_channels=32, channel_mult=[1, 2], attention_resolutions=[8],
             num_head_channels=16, num_groups=8),
        dict(REFERENCE, image_size=16, in_channels=1, out_channels=1, model_channels=16, channel_mult=[1, 2, 2],
             attention_resolutions=[16, 4], num_head_channels=8, num_groups=4, conv_resample=1, num_res_blocks=1),
    ]
    for i, c in enumerate(configs):
        torch.manual_seed(i)
        m = UNet(c).double()
        with torch.no_grad():  # random everything (no zero-initialised layer hides a path)
            for name, p in m.named_parameters():
                if name.endswith("weight") and p.dim() == 1:
                    p.copy_(1 + 0.2 * torch.randn_like(p))
                else:
                    fan = p[0].numel() if p.dim() > 1 else 16
                    p.copy_(torch.randn_like(p) / math.sqrt(fan))
                p.copy_(p.float().double())  # exactly representable in the f32 file
        ck = os.path.join(tmp, f"torch_{i}.safetensors")
        st_write(ck, dict(m.state_dict()), meta_of(c))
        n, S = 3, c["image_size"]
        x = torch.randn(n, c["in_channels"], S, S, dtype=torch.float64)
        t = torch.tensor([0.0, 371.0, 999.0])[:n]
        x = x.float().double()  # the values nabla sees
        x.float().numpy().tofile(os.path.join(tmp, "x.bin"))
        t.float().numpy().tofile(os.path.join(tmp, "t.bin"))
        with torch.no_grad():
            ref = m(x, t)
        r = subprocess.run([fwd_bin, ck, os.path.join(tmp, "x.bin"), str(n), os.path.join(tmp, "t.bin"),
                            os.path.join(tmp, "y.bin")], capture_output=True, text=True)
        if r.returncode:
            print(f"config {i}: nabla failed: {r.stderr.strip()}")
            ok = False
            continue
        y = torch.from_numpy(__import__("numpy").fromfile(os.path.join(tmp, "y.bin"), dtype="float32")).reshape(ref.shape)
        err = (y.double() - ref).abs().max().item()
        scale = ref.abs().max().item()
        good = err <= 1e-4 * max(scale, 1.0)
        ok &= good
        print(f"config {i} ({sum(p.numel() for p in m.parameters()):,} params, conv_resample={c['conv_resample']}): "
              f"max |nabla - torch(f64)| = {err:.3g}, max |out| = {scale:.3g}  {'OK' if good else 'MISMATCH'}")
    return ok


def cmd_load(path):
    sd, meta = st_read(path)
    c = config_of(meta)
    m = UNet(c)
    m.load_state_dict(sd, strict=True)
    print(f"{path}: {len(sd)} tensors, config {c}: loads into the torch UNet (strict) OK")
    try:
        from safetensors.torch import load_file
        sd2 = load_file(path)
        same = all(torch.equal(sd[k], sd2[k]) for k in sd) and len(sd2) == len(sd)
        print("safetensors.torch.load_file:", "OK, identical" if same else "DIFFERENT")
        return same
    except ImportError:
        print("safetensors package not installed; read by hand only")
    return True


def cmd_bench(argv):
    batch, precision, steps, compile_mode = 32, "fp32", 20, None
    for i in range(0, len(argv), 2):
        if argv[i] == "--batch":
            batch = int(argv[i + 1])
        elif argv[i] == "--precision":
            precision = argv[i + 1]
        elif argv[i] == "--steps":
            steps = int(argv[i + 1])
        elif argv[i] == "--compile":  # default | reduce-overhead (CUDA graphs) | max-autotune-no-cudagraphs
            compile_mode = argv[i + 1]
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
    m = UNet(REFERENCE).to(dev)
    fwd = m if compile_mode is None else torch.compile(m, mode=compile_mode)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.0)
    betas = torch.linspace(1e-4, 0.02, 1000, dtype=torch.float64)
    ab = torch.cumprod(1 - betas, 0).float().to(dev)
    x0 = torch.rand(batch, 3, 64, 64, device=dev) * 2 - 1

    def step():
        t = torch.randint(0, 1000, (batch,), device=dev)
        eps = torch.randn_like(x0)
        a = ab[t][:, None, None, None]
        xt = a.sqrt() * x0 + (1 - a).sqrt() * eps
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = F.mse_loss(fwd(xt, t.float()).float(), eps)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        return loss

    tw = time.perf_counter()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    warm = time.perf_counter() - tw
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(steps):
        step()
    e1.record()
    torch.cuda.synchronize()
    ms = e0.elapsed_time(e1) / steps
    mode = "eager" if compile_mode is None else f"torch.compile(mode={compile_mode})"
    print(f"torch {torch.__version__} reference UNet 64x64x3 (20,494,211 params), batch {batch}, {precision}, "
          f"{mode}: {ms:.2f} ms/step (CUDA events, {steps} steps; 3 warm-up steps took {warm:.1f} s)")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else "count"
    if cmd == "count":
        sys.exit(0 if cmd_count() else 1)
    if cmd == "check":
        sys.exit(0 if cmd_check(sys.argv[2], sys.argv[3]) else 1)
    if cmd == "load":
        sys.exit(0 if cmd_load(sys.argv[2]) else 1)
    if cmd == "bench":
        cmd_bench(sys.argv[2:])
        sys.exit(0)
    print(__doc__)
    sys.exit(2)

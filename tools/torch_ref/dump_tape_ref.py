#!/usr/bin/env python3
"""PyTorch reference dumps for nabla's tape autograd and diffusion UNet (issue 7).

  python3 tools/torch_ref/dump_tape_ref.py [--out tests/data/tape_ref]

Writes small float32 safetensors files that tests/test_nn_tape_ref.c replays on a nabla tape (CPU
and CUDA) and compares:

  op_<case>.safetensors   one tape op (or a short composite, e.g. group_norm -> silu): its inputs,
                          a random upstream gradient "dy", the output "y" and "grad.<input>" for
                          every input that needs a gradient. __metadata__: op, inputs (comma list in
                          the op's argument order, "-" = absent / NB_TVAR_NONE), params (inputs the
                          test registers with nb_tape_param), grads, and the op's scalar arguments
                          (stride, pad, groups, eps, shape, c0, count, dim, max_period).
  unet_grads_<c>.safetensors  a tiny UNet (bench/torch/unet_ref.py, nabla's parameter names):
                          "param.<name>", x, t (timesteps), noise, "out" (model output), "loss" [1]
                          = mean((out - noise)^2) and "grad.<name>" for every parameter.
                          __metadata__: the UNet config (nabla's keys, see nb_unet_config_set).
  unet_adamw10.safetensors  ten AdamW steps from "param.<name>" on fixed batches: per step s
                          "step<s>.x0", "step<s>.t", "step<s>.noise", "step<s>.xt" (= sqrt(ab_t) x0 +
                          sqrt(1 - ab_t) noise, the model input), "losses" [10] (loss of each step
                          before its update) and "final.<name>" (weights after the ten updates).
                          __metadata__: config, lr, beta1, beta2, eps, weight_decay, steps, DDPM
                          schedule (timesteps, beta_start, beta_end), final_sum / final_abs_sum.

Everything is computed with CPU torch in float64 from float32-representable inputs, then stored as
float32: the references are the exact results rounded once, independent of any GPU. Seeds are
fixed (per case: a generator seeded from the case name), so a re-run writes identical files.
No gradient clipping and no EMA in the AdamW run (nabla's nb_ddpm_train_step adds both; the test
builds the step from nb_unet + nb_tape + nb_adam so that x0, t and noise can be given).
Needs only torch (no nabla build); the safetensors writer is bench/torch/unet_ref.py's.
"""
import argparse
import math
import os
import sys
import zlib

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "bench", "torch"))
import unet_ref  # noqa: E402  (UNet with nabla's parameter names, st_write, timestep_embedding)

GENERATOR = "tools/torch_ref/dump_tape_ref.py"
D = torch.float64

# The tiny UNets (nb_unet accepts both: see nb_unet_config_validate). A: the product's choices
# (average-pool down, nearest up) with attention at the lowest resolution; B: resample convs
# (stride-2 conv down, nearest + conv up) and attention at both resolutions.
UNET_A = dict(image_size=8, in_channels=1, out_channels=1, model_channels=8, channel_mult=[1, 2],
              num_res_blocks=1, attention_resolutions=[4], num_head_channels=8, conv_resample=0,
              num_groups=4)
UNET_B = dict(image_size=8, in_channels=2, out_channels=2, model_channels=4, channel_mult=[1, 2],
              num_res_blocks=1, attention_resolutions=[8, 4], num_head_channels=4, conv_resample=1,
              num_groups=2)

# AdamW: nb_adam_config_default()'s betas / eps (PyTorch's), with lr and weight decay set through
# the knobs nb_ddpm_config exposes (lr 1e-3 instead of the trainer's 1e-4 so that ten steps move
# the loss; weight decay 0.01 so that the decoupled decay is exercised).
ADAM = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)
ADAM_STEPS = 10
DDPM = dict(timesteps=1000, beta_start=1e-4, beta_end=0.02)  # nb_ddpm_config_default()


class Rng:
    """float64 values that are exactly representable in float32 (what the f32 file holds)."""

    def __init__(self, name):
        self.g = torch.Generator().manual_seed(zlib.crc32(name.encode()))

    def randn(self, *shape, scale=1.0, shift=0.0):
        return (torch.randn(*shape, generator=self.g, dtype=D) * scale + shift).float().to(D)

    def uniform(self, *shape, lo=-1.0, hi=1.0):
        return (torch.rand(*shape, generator=self.g, dtype=D) * (hi - lo) + lo).float().to(D)

    def randint(self, hi, n):
        return torch.randint(0, hi, (n,), generator=self.g).to(D)


def write(out_dir, fname, tensors, meta):
    path = os.path.join(out_dir, fname)
    meta = dict(meta, generator=GENERATOR, torch=torch.__version__)
    for k, v in tensors.items():
        if v.dim() == 0:
            tensors[k] = v.reshape(1)
    unet_ref.st_write(path, tensors, meta)
    return path


# ---- single ops ---------------------------------------------------------------------------------

def op_case(out_dir, name, op, inputs, fn, params=(), nograd=(), args=None, backward=True):
    """inputs: ordered list of (arg name, tensor or None). fn(dict name -> leaf) -> y."""
    rng = Rng("dy." + name)
    leaves, tensors, order, grads = {}, {}, [], []
    for k, v in inputs:
        if k in leaves or v is None:  # a repeated name is the same value; None is absent
            order.append(k if k in leaves else "-")
            continue
        order.append(k)
        need = backward and k not in nograd
        leaves[k] = v.clone().requires_grad_(need)
        tensors[k] = v
        if need:
            grads.append(k)
    y = fn(leaves)
    tensors["y"] = y.detach()
    if backward:
        dy = rng.randn(*y.shape)
        (y * dy).sum().backward()
        tensors["dy"] = dy
        for k in grads:
            tensors["grad." + k] = leaves[k].grad
    meta = {"op": op, "inputs": ",".join(order), "params": ",".join(p for p in params if p in leaves),
            "grads": ",".join(grads), "backward": "1" if backward else "0"}
    for k, v in (args or {}).items():
        meta[k] = ",".join(str(x) for x in v) if isinstance(v, (list, tuple)) else repr(v)
    return write(out_dir, "op_%s.safetensors" % name, tensors, meta)


def dump_ops(out_dir):
    files = []

    def case(name, op, spec, fn, **kw):
        files.append(op_case(out_dir, name, op, spec, fn, **kw))

    r = Rng("linear")
    case("linear", "linear", [("x", r.randn(3, 5)), ("w", r.randn(4, 5, scale=0.5)), ("b", r.randn(4))],
         lambda a: F.linear(a["x"], a["w"], a["b"]), params=("w", "b"))
    r = Rng("linear_nobias")
    case("linear_nobias", "linear", [("x", r.randn(2, 7)), ("w", r.randn(6, 7, scale=0.5)), ("b", None)],
         lambda a: F.linear(a["x"], a["w"]), params=("w",))

    # conv2d: (name, N, C, H, W, O, K, stride, pad, bias, x needs grad)
    convs = [("k3_s1_p1", 2, 3, 6, 6, 4, 3, 1, 1, True, True),
             ("k3_s1_p1_nobias", 2, 3, 5, 6, 4, 3, 1, 1, False, True),
             ("k3_s1_p0", 1, 2, 6, 5, 3, 3, 1, 0, True, True),
             ("k3_s2_p1", 2, 3, 6, 6, 5, 3, 2, 1, True, True),
             ("k3_s2_p1_odd", 1, 2, 7, 5, 3, 3, 2, 1, True, True),
             ("k3_s2_p0", 1, 3, 7, 7, 2, 3, 2, 0, True, True),
             ("k3_s1_p2", 1, 2, 4, 4, 3, 3, 1, 2, True, True),
             ("k1_s1_p0", 2, 5, 4, 3, 3, 1, 1, 0, True, True),
             ("k1_s1_p0_nobias", 2, 4, 3, 3, 6, 1, 1, 0, False, True),
             ("k1_s2_p0", 1, 3, 5, 5, 2, 1, 2, 0, True, True),
             ("k1_s1_p1", 1, 2, 3, 3, 2, 1, 1, 1, True, True),
             ("k3_s1_p1_nogradx", 2, 3, 4, 4, 4, 3, 1, 1, True, False)]
    for tag, N, C, H, W, O, K, s, p, bias, gx in convs:
        r = Rng("conv2d_" + tag)
        spec = [("x", r.randn(N, C, H, W)), ("w", r.randn(O, C, K, K, scale=1 / math.sqrt(C * K * K))),
                ("b", r.randn(O) if bias else None)]
        case("conv2d_" + tag, "conv2d", spec,
             lambda a, s=s, p=p: F.conv2d(a["x"], a["w"], a.get("b"), stride=s, padding=p),
             params=("w", "b"), nograd=() if gx else ("x",), args=dict(stride=s, pad=p))

    # group_norm: (name, x shape, groups, affine, op, x scale, x shift)
    gns = [("g4", (2, 8, 4, 4), 4, True, "group_norm", 1.0, 0.0),
           ("g1", (2, 6, 3, 3), 1, True, "group_norm", 1.0, 0.0),
           ("g_eq_c", (1, 4, 3, 5), 4, True, "group_norm", 1.0, 0.0),
           ("offset", (2, 8, 4, 4), 2, True, "group_norm", 3.0, 5.0),
           ("noaffine", (2, 8, 3, 3), 4, False, "group_norm", 1.0, 0.0),
           ("2d", (3, 8), 2, True, "group_norm", 1.0, 0.0),
           ("silu", (2, 8, 4, 4), 4, True, "group_norm_silu", 1.0, 0.0)]
    eps = 1e-5
    for tag, shape, G, affine, op, sc, sh in gns:
        r = Rng("group_norm_" + tag)
        C = shape[1]
        spec = [("x", r.randn(*shape, scale=sc, shift=sh)),
                ("gamma", r.randn(C, scale=0.3, shift=1.0) if affine else None),
                ("beta", r.randn(C, scale=0.3) if affine else None)]

        def gn(a, G=G, op=op):
            y = F.group_norm(a["x"], G, a.get("gamma"), a.get("beta"), eps)
            return F.silu(y) if op == "group_norm_silu" else y
        case("group_norm_" + tag, op, spec, gn, params=("gamma", "beta"), args=dict(groups=G, eps=eps))

    r = Rng("silu")
    case("silu", "silu", [("x", r.randn(2, 3, 4, 5, scale=4.0))], lambda a: F.silu(a["x"]))
    case("silu_2d", "silu", [("x", torch.tensor([[-30.0, -8.0, -1.0, -1e-3, 0.0, 1e-3, 1.0, 8.0, 30.0]]).to(D))],
         lambda a: F.silu(a["x"]))
    r = Rng("add")
    case("add", "add", [("a", r.randn(2, 3, 4, 4)), ("b", r.randn(2, 3, 4, 4))], lambda a: a["a"] + a["b"])
    r = Rng("add_same")  # both operands one value: its gradient accumulates twice
    case("add_same", "add", [("a", r.randn(2, 5)), ("a", None)], lambda a: a["a"] + a["a"])
    r = Rng("add_channel")
    case("add_channel", "add_channel", [("x", r.randn(2, 3, 4, 5)), ("c", r.randn(2, 3))],
         lambda a: a["x"] + a["c"][:, :, None, None])
    r = Rng("concat")
    case("concat", "concat", [("a", r.randn(2, 3, 4, 4)), ("b", r.randn(2, 5, 4, 4))],
         lambda a: torch.cat([a["a"], a["b"]], dim=1))
    r = Rng("upsample2x")
    case("upsample2x", "upsample2x", [("x", r.randn(2, 3, 3, 4))],
         lambda a: F.interpolate(a["x"], scale_factor=2, mode="nearest"))
    r = Rng("avgpool2x")
    case("avgpool2x", "avgpool2x", [("x", r.randn(2, 3, 6, 4))], lambda a: F.avg_pool2d(a["x"], 2, 2))
    r = Rng("mse")
    case("mse", "mse", [("pred", r.randn(2, 3, 4, 4)), ("target", r.randn(2, 3, 4, 4))],
         lambda a: F.mse_loss(a["pred"], a["target"]).reshape(1))

    def attention(a):
        d = a["q"].shape[-1]
        w = torch.softmax(a["q"] @ a["k"].transpose(-1, -2) / math.sqrt(d), dim=-1)
        return w @ a["v"]
    for tag, N, Hd, Tq, Tk, d, sc in [("small", 2, 2, 5, 7, 4, 1.0), ("square", 1, 2, 16, 16, 8, 1.0),
                                      ("peaked", 1, 1, 6, 6, 4, 3.0)]:
        r = Rng("attention_" + tag)
        spec = [("q", r.randn(N, Hd, Tq, d, scale=sc)), ("k", r.randn(N, Hd, Tk, d, scale=sc)),
                ("v", r.randn(N, Hd, Tk, d))]
        case("attention_" + tag, "attention", spec, attention)

    r = Rng("reshape")
    case("reshape", "reshape", [("x", r.randn(2, 6, 4))], lambda a: a["x"].reshape(2, 3, 2, 4),
         args=dict(shape=[2, 3, 2, 4]))
    r = Rng("transpose")
    case("transpose", "transpose", [("x", r.randn(2, 3, 4, 5))], lambda a: a["x"].transpose(-1, -2))
    r = Rng("transpose_2d")
    case("transpose_2d", "transpose", [("x", r.randn(3, 5))], lambda a: a["x"].transpose(-1, -2))
    r = Rng("slice_channels")
    case("slice_channels", "slice_channels", [("x", r.randn(2, 6, 3, 3))], lambda a: a["x"][:, 2:5],
         args=dict(c0=2, count=3))
    r = Rng("slice_channels_3d")
    case("slice_channels_3d", "slice_channels", [("x", r.randn(2, 5, 4))], lambda a: a["x"][:, 0:2],
         args=dict(c0=0, count=2))

    # timestep embedding (no gradient): nabla's convention = unet_ref.timestep_embedding
    # ([cos | sin], f_k = exp(-ln(max_period) k / half), computed in float64, stored as float32)
    for tag, ts, dim, mp in [("d16", [0.0, 1.0, 17.0, 250.0, 999.0], 16, 10000.0),
                             ("d8_p100", [0.0, 3.0, 42.5, 1000.0], 8, 100.0)]:
        t = torch.tensor(ts, dtype=D)
        case("timestep_embedding_" + tag, "timestep_embedding", [("t", t)],
             lambda a, dim=dim, mp=mp: unet_ref.timestep_embedding(a["t"], dim, mp).to(D),
             backward=False, args=dict(dim=dim, max_period=mp))
    return files


# ---- the tiny UNets -----------------------------------------------------------------------------

def random_unet(cfg, name):
    """A float64 UNet with random weights everywhere (no zero-initialised layer hides a path),
    exactly representable in float32."""
    torch.manual_seed(zlib.crc32(name.encode()))
    m = unet_ref.UNet(cfg).to(D)
    r = Rng("weights." + name)
    with torch.no_grad():
        for pname, p in m.named_parameters():
            if pname.endswith("weight") and p.dim() == 1:  # GroupNorm gamma
                p.copy_(r.randn(*p.shape, scale=0.2, shift=1.0))
            else:
                fan = p[0].numel() if p.dim() > 1 else 16
                p.copy_(r.randn(*p.shape, scale=1 / math.sqrt(fan)))
    return m


def unet_meta(cfg):
    return {k: str(v) for k, v in unet_ref.meta_of(cfg).items()}


def dump_unet_grads(out_dir, tag, cfg, n=2, timesteps=(3.0, 617.0)):
    name = "unet_grads_" + tag
    m = random_unet(cfg, name)
    r = Rng("data." + name)
    S = cfg["image_size"]
    x = r.randn(n, cfg["in_channels"], S, S)
    noise = r.randn(n, cfg["out_channels"], S, S)
    t = torch.tensor(timesteps[:n], dtype=D)
    out = m(x, t)
    loss = F.mse_loss(out, noise)
    loss.backward()
    tensors = {"x": x, "t": t, "noise": noise, "out": out.detach(), "loss": loss.detach().reshape(1)}
    for pname, p in m.named_parameters():
        tensors["param." + pname] = p.detach()
        tensors["grad." + pname] = p.grad
    meta = dict(unet_meta(cfg), kind="unet_grads", n=str(n),
                n_params=str(sum(p.numel() for p in m.parameters())))
    return write(out_dir, name + ".safetensors", tensors, meta)


def alphas_cumprod():
    """nabla's schedule (src/models/ddpm.c): betas = linspace(scale b0, scale b1, T), scale = 1000 / T,
    from the float32 config values, in float64."""
    T = DDPM["timesteps"]
    b0 = float(torch.tensor(DDPM["beta_start"], dtype=torch.float32)) * 1000.0 / T
    b1 = float(torch.tensor(DDPM["beta_end"], dtype=torch.float32)) * 1000.0 / T
    betas = [b0 + (b1 - b0) * i / (T - 1) for i in range(T)]
    acp, ab = [], 1.0
    for b in betas:
        ab *= 1.0 - b
        acp.append(ab)
    return acp


def dump_unet_adamw(out_dir, cfg, n=2):
    name = "unet_adamw10"
    m = random_unet(cfg, name)
    tensors = {"param." + k: p.detach().clone() for k, p in m.named_parameters()}
    opt = torch.optim.AdamW(m.parameters(), lr=ADAM["lr"], betas=(ADAM["beta1"], ADAM["beta2"]),
                            eps=ADAM["eps"], weight_decay=ADAM["weight_decay"], foreach=False)
    acp = alphas_cumprod()
    r = Rng("data." + name)
    S, C = cfg["image_size"], cfg["in_channels"]
    losses = []
    for s in range(ADAM_STEPS):
        x0 = r.uniform(n, C, S, S)
        t = r.randint(DDPM["timesteps"], n)
        noise = r.randn(n, C, S, S)
        a = torch.tensor([acp[int(v)] for v in t], dtype=D)[:, None, None, None]
        xt = (a.sqrt() * x0 + (1 - a).sqrt() * noise).float().to(D)  # the f32 model input
        loss = F.mse_loss(m(xt, t), noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        tensors.update({"step%d.x0" % s: x0, "step%d.t" % s: t, "step%d.noise" % s: noise, "step%d.xt" % s: xt})
    tensors["losses"] = torch.tensor(losses, dtype=D)
    final = {k: p.detach().clone() for k, p in m.named_parameters()}
    for k, p in final.items():
        tensors["final." + k] = p
    meta = dict(unet_meta(cfg), kind="unet_adamw", n=str(n), steps=str(ADAM_STEPS),
                lr=repr(ADAM["lr"]), beta1=repr(ADAM["beta1"]), beta2=repr(ADAM["beta2"]),
                eps=repr(ADAM["eps"]), weight_decay=repr(ADAM["weight_decay"]),
                timesteps=str(DDPM["timesteps"]), beta_start=repr(DDPM["beta_start"]),
                beta_end=repr(DDPM["beta_end"]), grad_clip="0", ema="0",
                final_sum=repr(sum(p.sum().item() for p in final.values())),
                final_abs_sum=repr(sum(p.abs().sum().item() for p in final.values())),
                losses=",".join("%.9g" % v for v in losses))
    return write(out_dir, name + ".safetensors", tensors, meta), losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "tape_ref"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    files = dump_ops(args.out)
    files.append(dump_unet_grads(args.out, "a", UNET_A))
    files.append(dump_unet_grads(args.out, "b", UNET_B, n=3, timesteps=(0.0, 250.0, 999.0)))
    f, losses = dump_unet_adamw(args.out, UNET_A)
    files.append(f)
    total = sum(os.path.getsize(p) for p in files)
    for p in files:
        print("%8d  %s" % (os.path.getsize(p), os.path.basename(p)))
    print("%d files, %d bytes in all, in %s (torch %s)" % (len(files), total, args.out, torch.__version__))
    print("AdamW losses:", " ".join("%.6f" % v for v in losses))
    if total > 1_500_000:
        print("WARNING: more than 1.5 MB of reference data", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

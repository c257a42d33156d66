"""Kernel timeline of one DDPM training step of the reference UNet (batch 32) through
torch.profiler (CUPTI sees every kernel in the process, nabla's included): per kernel name+grid
count and time, GPU busy time vs the span of the step (the launch gaps), kernels per step; the
same for PyTorch's eager step (cuDNN's convolution kernels). Usage: kprof.py nabla|torch bf16|tf32"""
import sys, time
import numpy as np
import torch
from torch.profiler import profile, ProfilerActivity

who, prec = sys.argv[1], sys.argv[2]
STEPS = 3

if who == "nabla":
    import nabla.nn as nn
    tape = nn.Tape(device="cuda", precision=prec)
    unet = nn.UNet(tape, seed=0)
    ddpm = nn.DDPM(unet, lr=1e-4, seed=0)
    x0 = (np.random.default_rng(0).random((32, 3, 64, 64), dtype=np.float32) * 2 - 1)
    def step():
        ddpm.train_step(x0)
else:
    sys.path.insert(0, "bench/torch")
    import torch.nn.functional as F
    import unet_ref as R
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = prec == "tf32"
    m = R.UNet(R.REFERENCE).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.0)
    x0 = torch.rand(32, 3, 64, 64, device="cuda") * 2 - 1
    def step():
        t = torch.randint(0, 1000, (32,), device="cuda")
        eps = torch.randn_like(x0)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=prec == "bf16"):
            loss = F.mse_loss(m(x0, t.float()).float(), eps)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()

for _ in range(5):
    step()
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(10):
    step()
torch.cuda.synchronize()
wall = (time.perf_counter() - t0) * 100
with profile(activities=[ProfilerActivity.CUDA]) as p:
    for _ in range(STEPS):
        step()
    torch.cuda.synchronize()
ev = [e for e in p.events() if e.device_type.name == "CUDA" and "Memcpy" not in e.name and "Memset" not in e.name]
iv = sorted((e.time_range.start, e.time_range.end, e.name) for e in ev)
busy, cur_s, cur_e = 0.0, None, None
for s, e, _ in iv:
    if cur_e is None or s > cur_e:
        if cur_e is not None: busy += cur_e - cur_s
        cur_s, cur_e = s, e
    else:
        cur_e = max(cur_e, e)
busy += cur_e - cur_s
span = iv[-1][1] - iv[0][0]
print(f"{who} {prec}: wall {wall:.2f} ms/step (10 steps, no profiler); profiled {STEPS} steps: "
      f"{len(iv)/STEPS:.0f} kernels/step, GPU busy {busy/STEPS/1e3:.2f} ms/step, span {span/STEPS/1e3:.2f} ms/step, "
      f"gaps {(span-busy)/STEPS/1e3:.2f} ms/step")
agg = {}
for e in ev:
    k = e.name[:90]
    a = agg.setdefault(k, [0, 0.0])
    a[0] += 1
    a[1] += e.time_range.end - e.time_range.start
tot = sum(v[1] for v in agg.values())
print(f"{'kernel':90s} {'calls/step':>10s} {'ms/step':>8s} {'share':>6s}")
for k, (n, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:45]:
    print(f"{k:90s} {n/STEPS:10.1f} {t/STEPS/1e3:8.3f} {100*t/tot:5.1f}%")
# gaps histogram: the idle time between consecutive kernels
gaps = [iv[i+1][0] - max(x[1] for x in iv[max(0,i-3):i+1]) for i in range(len(iv)-1)]
gaps = [g for g in gaps if g > 0]
if who == "nabla":  # the GEMM kernels by launch grid (one NVRTC name for every configuration)
    import json, os, tempfile
    fn = os.path.join(tempfile.mkdtemp(), "t.json")
    p.export_chrome_trace(fn)
    tr = json.load(open(fn))
    by = {}
    for e in tr.get("traceEvents", []):
        if e.get("cat") == "kernel" and e.get("name", "").startswith(("nb_conv_igemm", "nb_attn", "gn_", "nvjet")):
            a = e.get("args", {})
            k = (e["name"][:28], str(a.get("grid")), str(a.get("block")), a.get("shared memory"))
            v = by.setdefault(k, [0, 0.0]); v[0] += 1; v[1] += e.get("dur", 0)
    print("by grid:")
    for k, (n, t) in sorted(by.items(), key=lambda kv: -kv[1][1])[:60]:
        print(f"  {k[0]:28s} grid {k[1]:16s} block {k[2]:12s} smem {k[3]!s:7s} {n/STEPS:5.1f}/step {t/STEPS:8.1f} us/step {t/n:7.1f} us/call")
if gaps:
    g = np.array(gaps)
    print(f"gaps: n {len(g)/STEPS:.0f}/step, median {np.median(g):.2f} us, p90 {np.percentile(g,90):.2f} us, "
          f"sum {g.sum()/STEPS/1e3:.2f} ms/step, largest {np.sort(g)[-5:]}")

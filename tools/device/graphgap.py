"""Kernel-to-kernel gaps of tiny dependent kernels: queued on a stream vs replayed from a CUDA graph."""
import torch
from torch.profiler import profile, ProfilerActivity
x = torch.zeros(4096, device="cuda")
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    for _ in range(3): x.add_(1)
torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    for _ in range(1000): x.add_(1)
for _ in range(3): g.replay()
torch.cuda.synchronize()
def gaps(fn, label):
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        fn(); torch.cuda.synchronize()
    iv = sorted((e.time_range.start, e.time_range.end) for e in p.events() if e.device_type.name == "CUDA")
    gs = sorted(iv[i+1][0] - iv[i][1] for i in range(len(iv)-1))
    d = sorted(e - s for s, e in iv)
    print(f"{label}: {len(iv)} kernels, median kernel {d[len(d)//2]:.2f} us, median gap {gs[len(gs)//2]:.2f} us, p90 gap {gs[int(len(gs)*.9)]:.2f} us, span {(iv[-1][1]-iv[0][0])/len(iv):.2f} us/kernel")
gaps(g.replay, "graph replay")
def stream():  # queue ahead: a long kernel first so the host gets ahead
    y = torch.randn(8192, 8192, device="cuda"); y @ y
    for _ in range(1000): x.add_(1)
gaps(stream, "stream (host ahead)")
e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
e0.record()
for _ in range(20): g.replay()
e1.record(); torch.cuda.synchronize()
print(f"graph replay without profiler: {e0.elapsed_time(e1)/20/1000*1e3:.2f} us/kernel")

"""The SlangPy design's MLP-training loop in nabla: forward and backward generated from one .nb
loss (loss.bwds), the optimizer step written in .nb too, all data kept on the device as
nabla.Tensor between steps. No PyTorch.

    PYTHONPATH=build/python python3 examples/python/train_mlp.py
"""
import os
import time

import numpy as np

import nabla

HERE = os.path.dirname(os.path.abspath(__file__))
device = nabla.device("auto")
m = nabla.load_module(os.path.join(HERE, "train_mlp.nb"), device=device)

N, H = 4096, 16
rng = np.random.default_rng(0)
xs = np.linspace(-1, 1, N).astype(np.float32)
ys = np.sin(3 * xs).astype(np.float32)
x = nabla.Tensor.from_numpy(xs, device=device)  # f32[N]
y = nabla.Tensor.from_numpy(ys, device=device)  # f32[N]

# Parameters, each with a gradient (accumulated by .bwds) and Adam moments.
params = {
    "w1": rng.normal(0, 1.0, H), "b1": rng.normal(0, 0.5, H),
    "w2": rng.normal(0, 0.3, H), "b2": np.zeros(1),
}
P = {k: nabla.Tensor.from_numpy(v.astype(np.float32), device=device).with_grads() for k, v in params.items()}
M = {k: nabla.Tensor.zeros(t.shape, device=device) for k, t in P.items()}
V = {k: nabla.Tensor.zeros(t.shape, device=device) for k, t in P.items()}
dout = nabla.Tensor.from_numpy(np.full(N, 1.0 / N, np.float32), device=device)  # d(mean)/d(loss_i)


def mse():
    per = m.loss(x, y, P["w1"], P["b1"], P["w2"], P["b2"], _result="numpy")
    return float(per.mean())


first = mse()
t0 = time.perf_counter()
steps = 500
for step in range(1, steps + 1):
    # every parameter tensor carries .grad: loss.bwds accumulates dL/dparam into it; w1 etc. are
    # shared by all N threads, so their gradients are reduced over the batch by the kernel
    m.loss.bwds(x, y, P["w1"], P["b1"], P["w2"], P["b2"], _dout=dout)
    for k, p in P.items():
        m.adam(p, p.grad, M[k], V[k], 0.02, float(step))
device.synchronize()
dt = time.perf_counter() - t0
last = mse()
print(f"{device.name}: mse {first:.4f} -> {last:.5f} after {steps} steps ({dt / steps * 1e3:.2f} ms/step)")
pred = m.net(x, P["w1"], P["b1"], P["w2"], P["b2"], _result="numpy")
print("max |net(x) - sin(3x)|:", float(np.abs(pred - ys).max()))
assert last < first * 0.05, "training did not converge"

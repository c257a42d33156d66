#!/usr/bin/env bash
# Device run for nabla.nn (issues 6 and 7, the Python side): builds libnabla + nabla._nabla in
# build-dev-pynn, runs python/tests/test_nn*.py with NB_REQUIRE_CUDA=1 (torch CUDA tensors
# zero-copy, CPU vs CUDA, torch autograd through FusedMLP and the encodings, CUDA tapes), the
# example examples/python/fit_mlp_nn.py and a per-step timing of the Python training loop
# (nabla.nn only, and through torch autograd). Under ~90 s.
# Logs: $OUT/pynn/{env,build,pytest (= test_nn*.log),example,bench}.log, fit.png
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/pynn"
mkdir -p "$O"
B=build-dev-pynn
PY="$(command -v python3)"
export NABLA_CACHE_DIR="$PWD/$B/cache"
export NB_REQUIRE_CUDA=1
T0=$(date +%s)

{
  date -u
  echo "python: $PY"; "$PY" --version
  "$PY" -c "import numpy; print('numpy', numpy.__version__)" 2>&1
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())" 2>&1
  "$PY" -c "import pytest; print('pytest', pytest.__version__)" 2>&1
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
} > "$O/env.log" 2>&1

{
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$PY"
  cmake --build "$B" -j "$(nproc)" --target nabla_python
  echo "build exit: $?"
} > "$O/build.log" 2>&1
echo "build: $(( $(date +%s) - T0 )) s" >> "$O/build.log"
export PYTHONPATH="$PWD/$B/python"

# The three test files and the example run in parallel (their NVRTC compiles overlap; the disk
# cache is shared), the timing after them on an idle GPU.
if "$PY" -c "import pytest" 2>/dev/null; then RUN=("$PY" -m pytest -v -rs -p no:cacheprovider)
else RUN=("$PY" python/tests/minipytest.py); echo "(pytest not installed: minipytest.py)" > "$O/pytest.log"; fi
for t in test_nn test_nn_tape test_nn_torch; do
  ( timeout 55 "${RUN[@]}" "python/tests/$t.py" > "$O/$t.log" 2>&1; echo "exit: $? after $(( $(date +%s) - T0 )) s" >> "$O/$t.log" ) &
done
( timeout 45 "$PY" examples/python/fit_mlp_nn.py --steps 1000 --out "$O/fit.png" > "$O/example.log" 2>&1
  echo "exit: $? after $(( $(date +%s) - T0 )) s" >> "$O/example.log" ) &
wait
for t in test_nn test_nn_tape test_nn_torch; do echo "== $t"; cat "$O/$t.log"; done >> "$O/pytest.log"

# Per-step time of the example's model (HashGrid 16x2 levels, 2^19 table, 64x2 MLP, batch 2^16
# and 2^18) from Python: nabla.nn only vs torch autograd (torch MSE, loss.backward(), nabla Adam).
timeout 20 "$PY" - > "$O/bench.log" 2>&1 <<'EOF'
import time
import torch
import nabla, nabla.nn as nn

dev = nabla.device("cuda")
img = nn.image_procedural(1024, 1024, dev)
for batch in (1 << 16, 1 << 18):
    enc = nn.HashGrid(2, 16, 2, 19, 16, 1.5, device=dev)
    mlp = nn.FusedMLP(32, 3, width=64, hidden_layers=2, device=dev)
    model = nn.Sequential(enc, mlp)
    opt = nn.Adam(model, lr=1e-2, betas=(0.9, 0.99), eps=1e-15)
    L = nn.Loss("l2")
    S = nn.ImageSampler(img, batch, stratified=True)
    enc.set_spatially_ordered(True)

    def step(i):
        x, t = S(i)
        model.backward(L(model(x), t))
        opt.step()

    for i in range(30):
        step(i)
    dev.synchronize()
    n = 300
    t0 = time.perf_counter()
    for i in range(n):
        step(i)
    dev.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / n
    print(f"nabla.nn loop   batch {batch:7d}: {ms:.3f} ms/step  loss {L.value():.5f}")

    # the same through torch autograd (torch tensors in, torch loss, loss.backward())
    St = nn.ImageSampler(img, batch, stratified=True, result="torch")
    topt = nn.Adam(model.torch_parameters(), lr=1e-2, betas=(0.9, 0.99), eps=1e-15)

    def tstep(i):
        x, t = St(i)
        loss = ((model(x) - t) ** 2).mean()
        loss.backward()
        topt.step()
        return loss

    for i in range(30):
        tstep(i)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(n):
        loss = tstep(i)
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / n
    print(f"torch autograd  batch {batch:7d}: {ms:.3f} ms/step  loss {loss.item():.5f}")

# Python overhead of one small call (FusedMLP inference of 1 row: launch + argument handling)
x = torch.rand(1, 32, device="cuda")
mlp.inference(x)
torch.cuda.synchronize()
t0 = time.perf_counter()
for i in range(2000):
    mlp.inference(x)
torch.cuda.synchronize()
print(f"FusedMLP.inference(torch [1,32]) call: {(time.perf_counter() - t0) * 1e6 / 2000:.1f} us")
EOF
echo "exit: $? after $(( $(date +%s) - T0 )) s" >> "$O/bench.log"
grep -hE "passed|failed|^exit" "$O"/test_nn*.log
cat "$O/example.log" "$O/bench.log"

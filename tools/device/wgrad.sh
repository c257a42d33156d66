#!/usr/bin/env bash
# Device run for the conv2d weight gradient as im2col + one cuBLAS GEMM (helper "wgrad",
# src/nn/conv/conv_cuda_wgrad.c): builds test_nn_conv_wgrad_cuda in build-dev-wgrad, runs it with
# NB_REQUIRE_CUDA=1 (dw vs an f64 reference: UNet shapes, bf16 / f32 storage, FP32 / TF32 / BF16,
# accumulation, odd sizes, K splits, layouts, chunking), then the benchmark (NB_WGRAD_BENCH=1:
# batch 32, today's weight gradient vs the GEMM path, bf16 storage and TF32; then the row-shift
# form in its own process), then while the
# budget lasts PyTorch's (cuDNN) weight gradient alone on the same shapes for reference.
# Logs: $OUT/wgrad/{env,build,test,bench,bench_rowshift,torch}.log. Budget < 90 s.
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/wgrad"
mkdir -p "$O"
B=build-dev-wgrad
export NABLA_CACHE_DIR="$PWD/$B/cache"
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1
} > "$O/env.log" 2>&1
{
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DNB_WERROR=OFF
  cmake --build "$B" -j "$(nproc)" --target test_nn_conv_wgrad_cuda
} > "$O/build.log" 2>&1
echo "build exit: $? (at ${SECONDS} s)" >> "$O/build.log"
lim() { local left=$((85 - SECONDS)); [ "$left" -lt "$1" ] && echo $((left > 3 ? left : 3)) || echo "$1"; }
(
  cd "$B"
  NB_REQUIRE_CUDA=1 timeout "$(lim 35)" stdbuf -oL ./tests/test_nn_conv_wgrad_cuda > "$O/test.log" 2>&1
  echo "exit: $? (at ${SECONDS} s)" >> "$O/test.log"
  NB_WGRAD_BENCH=1 timeout "$(lim 20)" stdbuf -oL ./tests/test_nn_conv_wgrad_cuda test_bench_wgrad_im2col > "$O/bench.log" 2>&1
  echo "exit: $? (at ${SECONDS} s)" >> "$O/bench.log"
  # the row-shift form (layout 2), in its own process
  NB_WGRAD_BENCH=1 timeout "$(lim 15)" stdbuf -oL ./tests/test_nn_conv_wgrad_cuda test_bench_wgrad_rowshift > "$O/bench_rowshift.log" 2>&1
  echo "exit: $? (at ${SECONDS} s)" >> "$O/bench_rowshift.log"
)
if [ $((85 - SECONDS)) -gt 10 ]; then
  timeout "$(lim 25)" python3 -u - > "$O/torch.log" 2>&1 <<'PY'
# cuDNN weight gradient alone (aten.convolution_backward, output_mask = weight only), batch 32,
# 3x3 stride 1 pad 1, median of 20 with CUDA events; bf16 tensors and f32 with TF32.
import torch
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.allow_tf32 = True
torch.backends.cuda.matmul.allow_tf32 = True
print(torch.__version__, torch.cuda.get_device_name(), "cudnn", torch.backends.cudnn.version())
shapes = [(64, 64, 64), (128, 64, 64), (128, 128, 32), (256, 128, 32), (192, 192, 16),
          (384, 192, 16), (256, 256, 8), (512, 256, 8)]
N = 32
for dt, tag in ((torch.bfloat16, "bf16s"), (torch.float32, "tf32")):
    for C, O, S in shapes:
        x = torch.randn(N, C, S, S, device="cuda", dtype=dt)
        w = torch.randn(O, C, 3, 3, device="cuda", dtype=dt)
        dy = torch.randn(N, O, S, S, device="cuda", dtype=dt)
        f = lambda: torch.ops.aten.convolution_backward(dy, x, w, None, [1, 1], [1, 1], [1, 1],
                                                        False, [0, 0], 1, [False, True, False])
        for _ in range(5):
            f()
        torch.cuda.synchronize()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(21)]
        for i in range(20):
            ev[i].record()
            f()
        ev[20].record()
        torch.cuda.synchronize()
        t = sorted(ev[i].elapsed_time(ev[i + 1]) for i in range(20))
        ms = (t[9] + t[10]) / 2
        fl = 2.0 * N * O * S * S * C * 9
        print(f"torch {tag:5s} C{C:<3d} O{O:<3d} S{S:<2d} wgrad {ms:7.4f} ms {fl / ms * 1e-9:6.1f} TF/s",
              flush=True)
PY
  echo "exit: $? (at ${SECONDS} s)" >> "$O/torch.log"
else
  echo "skipped: ${SECONDS} s used of the 85 s budget" > "$O/torch.log"
fi
echo "total ${SECONDS} s" >> "$O/env.log"
date -u >> "$O/env.log"

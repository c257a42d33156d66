#!/usr/bin/env bash
# Device run for bf16-stored activations in CUDA conv2d / linear (helper "bf16conv", BF16 spec):
# builds test_nn_conv_bf16_cuda and test_nn_tape_conv_cuda in build-dev-bf16conv, runs both with
# NB_REQUIRE_CUDA=1 (first the bf16-storage test: vs a double reference on every algorithm),
# then the quick conv benchmark (NB_CONV_BENCH=quick: tf32 f32 storage vs "bf16s" bf16 storage
# at batch 32 on the UNet's convs), then the existing conv test (FP32 / TF32 / BF16 with f32
# storage, unchanged results; the CPU-vs-CUDA tape cases, bf16 storage on the BF16 tape),
# then, while the 85 s budget lasts, the PyTorch reference for bf16 storage (bench/torch/bench_conv.py
# --precs bf16s, CUDA graphs). Logs: $OUT/bf16conv/{env,build,test_bf16,test_conv,bench,torch}.log.
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/bf16conv"
mkdir -p "$O"
B=build-dev-bf16conv
export NABLA_CACHE_DIR="$PWD/$B/cache"
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1
} > "$O/env.log" 2>&1
{
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$B" -j "$(nproc)" --target test_nn_conv_bf16_cuda test_nn_tape_conv_cuda
} > "$O/build.log" 2>&1
echo "build exit: $? (at ${SECONDS} s)" >> "$O/build.log"
lim() { local left=$((85 - SECONDS)); [ "$left" -lt "$1" ] && echo $((left > 3 ? left : 3)) || echo "$1"; }
(
  cd "$B"
  NB_REQUIRE_CUDA=1 timeout "$(lim 30)" stdbuf -oL ./tests/test_nn_conv_bf16_cuda > "$O/test_bf16.log" 2>&1
  echo "exit: $? (at ${SECONDS} s)" >> "$O/test_bf16.log"
  NB_CONV_BENCH=quick timeout "$(lim 25)" stdbuf -oL ./tests/test_nn_tape_conv_cuda test_bench_conv > "$O/bench.log" 2>&1
  echo "exit: $? (at ${SECONDS} s)" >> "$O/bench.log"
  NB_REQUIRE_CUDA=1 timeout "$(lim 25)" stdbuf -oL ./tests/test_nn_tape_conv_cuda > "$O/test_conv.log" 2>&1
  echo "exit: $? (at ${SECONDS} s)" >> "$O/test_conv.log"
)
if [ $((85 - SECONDS)) -gt 12 ]; then
  timeout "$(lim 30)" python3 -u bench/torch/bench_conv.py --iters 10 --precs bf16s > "$O/torch.log" 2>&1
  echo "exit: $? (at ${SECONDS} s)" >> "$O/torch.log"
else
  echo "skipped: ${SECONDS} s used of the 85 s budget" > "$O/torch.log"
fi
echo "total ${SECONDS} s" >> "$O/env.log"
date -u >> "$O/env.log"

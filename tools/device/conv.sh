#!/usr/bin/env bash
# Device run for the CUDA linear / conv2d of the tape (issue 7, part "conv"): builds
# test_nn_tape_conv_cuda and test_nn_unet in build-dev-conv, runs the conv test with
# NB_REQUIRE_CUDA=1 (CUDA vs double reference for every K/stride/pad/bias combination per
# precision and algorithm, dx accumulated and stored, CPU tape vs CUDA tape incl. a value
# consumed twice), then the conv benchmark (NB_CONV_BENCH=1: the reference UNet's convolutions
# at batch 32, fwd + bwd, per precision: im2col+cuBLAS, implicit GEMM, automatic choice), then
# the UNet CPU-vs-CUDA test (test_nn_unet) while the 85 s budget lasts. The PyTorch reference
# (bench/torch/bench_conv.py, ~40 s; logged in .export/device-results/conv/torch.log) runs only
# with CONV_TORCH=1. Logs: $OUT/conv/{env,build,test,bench,unet,torch}.log. < 90 s.
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/conv"
mkdir -p "$O"
B=build-dev-conv
export NABLA_CACHE_DIR="$PWD/$B/cache"

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1
} > "$O/env.log" 2>&1

{
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$B" -j "$(nproc)" --target test_nn_tape_conv_cuda test_nn_unet
} > "$O/build.log" 2>&1
echo "build exit: $? (at ${SECONDS} s)" >> "$O/build.log"

# Each stage gets min(its own limit, what is left of the 85 s budget).
lim() { local left=$((85 - SECONDS)); [ "$left" -lt "$1" ] && echo $((left > 3 ? left : 3)) || echo "$1"; }

(
  cd "$B"
  NB_REQUIRE_CUDA=1 timeout "$(lim 45)" stdbuf -oL ./tests/test_nn_tape_conv_cuda > "$O/test.log" 2>&1
  echo "exit: $? (at ${SECONDS} s)" >> "$O/test.log"
)
(
  cd "$B"
  NB_CONV_BENCH=1 timeout "$(lim 20)" stdbuf -oL ./tests/test_nn_tape_conv_cuda bench > "$O/bench.log" 2>&1
  echo "exit: $? (at ${SECONDS} s)" >> "$O/bench.log"
)
if [ $((85 - SECONDS)) -gt 10 ]; then
  ( cd "$B" && NB_REQUIRE_CUDA=1 timeout "$(lim 30)" ./tests/test_nn_unet ) > "$O/unet.log" 2>&1
  echo "exit: $? (at ${SECONDS} s)" >> "$O/unet.log"
else
  echo "skipped: ${SECONDS} s used of the 85 s budget" > "$O/unet.log"
fi

if [ "${CONV_TORCH:-0}" = 1 ]; then
  timeout 40 python3 -u bench/torch/bench_conv.py --iters 5 > "$O/torch.log" 2>&1
  echo "exit: $?" >> "$O/torch.log"
fi
echo "total ${SECONDS} s" >> "$O/env.log"
date -u >> "$O/env.log"

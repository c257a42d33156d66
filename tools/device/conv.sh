#!/usr/bin/env bash
# Device run for the CUDA linear / conv2d of the tape (issue 7, part "conv"): builds
# test_nn_tape_conv_cuda in build-dev-conv, runs it with NB_REQUIRE_CUDA=1 (CUDA vs double
# reference for every K/stride/pad/bias combination per precision and algorithm, CPU tape vs
# CUDA tape), then the conv benchmark (NB_CONV_BENCH=1: the reference UNet's convolutions at
# batch 32, fwd + bwd, per precision, im2col+cuBLAS vs implicit GEMM; NB_CONV_BENCH=sweep adds
# tile sweeps, ~20 s more) and the PyTorch reference
# (bench/torch/bench_conv.py). Logs: $OUT/conv/{env,build,test,bench,torch}.log. < 90 s.
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/conv"
mkdir -p "$O"
B=build-dev-conv
export NABLA_CACHE_DIR="$PWD/$B/cache"

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1
} > "$O/env.log" 2>&1

{
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$B" -j "$(nproc)" --target test_nn_tape_conv_cuda
} > "$O/build.log" 2>&1
echo "build exit: $?" >> "$O/build.log"

date -u >> "$O/env.log"
(
  cd "$B"
  NB_REQUIRE_CUDA=1 timeout 50 stdbuf -oL ./tests/test_nn_tape_conv_cuda > "$O/test.log" 2>&1
  echo "exit: $?" >> "$O/test.log"
  date -u >> "$O/env.log"
  NB_CONV_BENCH=1 timeout 30 stdbuf -oL ./tests/test_nn_tape_conv_cuda bench > "$O/bench.log" 2>&1
  echo "exit: $?" >> "$O/bench.log"
)

date -u >> "$O/env.log"
timeout 30 python3 -u bench/torch/bench_conv.py --iters 5 > "$O/torch.log" 2>&1
echo "exit: $?" >> "$O/torch.log"
date -u >> "$O/env.log"

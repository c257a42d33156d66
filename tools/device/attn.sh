#!/usr/bin/env bash
# Device run for the tape's fused CUDA attention (issue 7, part "attn"): builds libnabla +
# test_nn_tape_attn_cuda in build-dev-attn, runs the tests with NB_REQUIRE_CUDA=1 (kernels vs a
# double reference, CUDA tape vs CPU tape: forward and dq/dk/dv, odd T, d 7..128, every precision,
# partial and aliased gradients, the d limit), then times forward + backward at the reference
# UNet's attention shapes (NB_ATTN_BENCH=1) next to PyTorch's scaled_dot_product_attention
# (bench/torch/bench_attn.py). Logs: $OUT/attn/{env,build,test,bench,torch}.log. Budget < 90 s.
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/attn"
mkdir -p "$O"
B=build-dev-attn
export NABLA_CACHE_DIR="$PWD/$B/cache"

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1
  nproc
} > "$O/env.log" 2>&1

{
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$B" -j "$(nproc)" --target test_nn_tape_attn_cuda
} > "$O/build.log" 2>&1
echo "build exit: $?" >> "$O/build.log"
echo "build done: $(date -u +%T)" >> "$O/env.log"

# The tests (10 NVRTC modules compiled on first use: fp32 SIMT per padded head dim 16/32/64/128,
# tensor-core per 16/32/64 x tf32/bf16).
( cd "$B" && NB_REQUIRE_CUDA=1 timeout 60 ./tests/test_nn_tape_attn_cuda ) > "$O/test.log" 2>&1
echo "exit: $?" >> "$O/test.log"
echo "tests done: $(date -u +%T)" >> "$O/env.log"

( cd "$B" && NB_ATTN_BENCH=1 timeout 40 ./tests/test_nn_tape_attn_cuda test_attn_bench ) > "$O/bench.log" 2>&1
echo "exit: $?" >> "$O/bench.log"

timeout 40 python3 -u bench/torch/bench_attn.py > "$O/torch.log" 2>&1
echo "exit: $?" >> "$O/torch.log"
echo "end: $(date -u +%T)" >> "$O/env.log"

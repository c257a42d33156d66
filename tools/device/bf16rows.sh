#!/usr/bin/env bash
# Device run of helper "bf16rows" (.export/BF16_SPEC.md): the tape's elementwise, layout and
# normalisation CUDA rows (src/nn/tape/tape_cuda_basic.c, tape_cuda_norm.c) on bf16 activations.
# Builds in build-dev-bf16rows, runs test_nn_tape_cuda (f32 CUDA tapes, unchanged paths) and
# test_nn_tape_bf16_cuda (bf16-storage tapes vs the CPU tape) with NB_REQUIRE_CUDA=1, then the
# micro-benchmark (f32 vs bf16 storage per row; tools/device/tapecuda_bench.c) and its PyTorch
# reference (bench/torch/bench_tape_ops.py). Logs: $OUT/bf16rows/{env,build,test,bench,torch_bench}.log
# Budget: < 90 s (build ~40 s, tests ~20 s, benches ~25 s).
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/bf16rows"
mkdir -p "$O"
B=build-dev-bf16rows
export NABLA_CACHE_DIR="$PWD/$B/cache"
T0=$(date +%s)

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1
  nproc
} > "$O/env.log" 2>&1

{
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$B" -j "$(nproc)" --target nabla test_nn_tape_cuda test_nn_tape_bf16_cuda
  cc -O2 -Iinclude -Isrc tools/device/tapecuda_bench.c "$B/libnabla.a" -lm -lpthread -ldl -o "$B/tapecuda_bench"
} > "$O/build.log" 2>&1
echo "build exit: $? after $(( $(date +%s) - T0 )) s" >> "$O/build.log"

( cd "$B" && NB_REQUIRE_CUDA=1 timeout 60 ctest --output-on-failure -R "^test_nn_tape_(bf16_)?cuda$" ) > "$O/test.log" 2>&1
echo "exit: $? after $(( $(date +%s) - T0 )) s" >> "$O/test.log"

timeout 30 "$B/tapecuda_bench" 50 > "$O/bench.log" 2>&1
echo "exit: $? after $(( $(date +%s) - T0 )) s" >> "$O/bench.log"
# A/B: deeper register tiles for the bf16 group norm (fewer threads per group)
for r in 4 8; do
  NABLA_GN_BF16_R=$r timeout 15 "$B/tapecuda_bench" 50 full gn-bf16 > "$O/bench_gn_r$r.log" 2>&1
  echo "exit: $? after $(( $(date +%s) - T0 )) s" >> "$O/bench_gn_r$r.log"
done
timeout 40 python3 bench/torch/bench_tape_ops.py 50 > "$O/torch_bench.log" 2>&1
echo "exit: $? after $(( $(date +%s) - T0 )) s" >> "$O/torch_bench.log"
echo done > "$O/DONE"

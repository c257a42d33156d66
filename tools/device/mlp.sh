#!/usr/bin/env bash
# Device run for the fused MLP (issue 6, part "mlp"): builds libnabla + test_nn_mlp + bench_mlp in
# build-dev-mlp, runs the MLP tests with NB_REQUIRE_CUDA=1 (CUDA vs CPU reference for every
# width), the nabla benchmark and the PyTorch reference. Logs: $OUT/mlp/{env,build,test,bench,torch}.log
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/mlp"
mkdir -p "$O"
B=build-dev-mlp
export NABLA_CACHE_DIR="$PWD/$B/cache"

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1
} > "$O/env.log" 2>&1

{
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$B" -j "$(nproc)" --target test_nn_mlp bench_mlp
} > "$O/build.log" 2>&1
echo "build exit: $?" >> "$O/build.log"

# The benchmark first (its NVRTC compiles: ~10 configurations, 3-6 s each, then cached).
timeout 120 "$B/bench/bench_mlp" > "$O/bench.log" 2>&1
echo "exit: $?" >> "$O/bench.log"

# ~30 distinct MLP configurations are compiled by NVRTC on first use (1-5 s each, cached after):
# the test binary runs as 8 shards in parallel (NB_MLP_TEST_SHARD=i/8), each with every test.
(
  cd "$B"
  for i in 0 1 2 3 4 5 6 7; do
    NB_REQUIRE_CUDA=1 NB_MLP_VERBOSE=1 NB_MLP_TEST_SHARD=$i/8 timeout 120 ./tests/test_nn_mlp > "$O/test_shard$i.log" 2>&1 &
  done
  wait
)
for i in 0 1 2 3 4 5 6 7; do echo "== shard $i"; cat "$O/test_shard$i.log"; done > "$O/test.log"
grep -h "passed, .* failed" "$O"/test_shard*.log >> "$O/test.log"

timeout 45 python3 -u bench/torch/bench_mlp.py --compile-widths 64 > "$O/torch.log" 2>&1
echo "exit: $?" >> "$O/torch.log"
date -u >> "$O/env.log"

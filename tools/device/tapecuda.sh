#!/usr/bin/env bash
# Device run for the tape's CUDA paths (issue 7, part "tapecuda": tape.c device memory / read-write
# API, tape_cuda_basic.c elementwise + layout rows, tape_cuda_norm.c group norm (+ SiLU)).
# Builds in build-dev-tapecuda, runs the tape tests with NB_REQUIRE_CUDA=1, then the group norm
# micro-benchmark against PyTorch eager. Logs: $OUT/tapecuda/{env,build,test,bench,torch_bench}.log
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/tapecuda"
mkdir -p "$O"
B=build-dev-tapecuda
export NABLA_CACHE_DIR="$PWD/$B/cache"

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1
  nproc
} > "$O/env.log" 2>&1

{
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$B" -j "$(nproc)" --target nabla test_nn_tape test_nn_tape_cuda
  cc -O2 -Iinclude -Isrc tools/device/tapecuda_bench.c "$B/libnabla.a" -lm -lpthread -ldl -o "$B/tapecuda_bench"
} > "$O/build.log" 2>&1
echo "build exit: $?" >> "$O/build.log"

( cd "$B" && NB_REQUIRE_CUDA=1 timeout 150 ctest --output-on-failure -R "^test_nn_tape(_cuda)?$" ) > "$O/test.log" 2>&1
echo "exit: $?" >> "$O/test.log"

timeout 60 "$B/tapecuda_bench" 50 > "$O/bench.log" 2>&1
echo "exit: $?" >> "$O/bench.log"
timeout 90 python3 bench/torch/bench_tape_ops.py 50 > "$O/torch_bench.log" 2>&1
echo "exit: $?" >> "$O/torch_bench.log"
echo done > "$O/DONE"

#!/usr/bin/env bash
# CUDA graphs of the DDPM step (session 5): graph tests (test_cuda, test_nn_unet) with
# NB_REQUIRE_CUDA=1 and the reference UNet bench with graphs on / off (NABLA_CUDA_GRAPH=0).
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/graph"; mkdir -p "$O"
B=${B:-build-dev}
export NABLA_CACHE_DIR=${NABLA_CACHE_DIR:-$PWD/$B/cache}
[ -f $B/CMakeCache.txt ] || cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DNB_WERROR=OFF > "$O/build.log" 2>&1
cmake --build $B -j16 --target nabla_cli test_cuda test_nn_unet >> "$O/build.log" 2>&1 || echo "build failed" | tee -a "$O/summary.txt"
export NB_REQUIRE_CUDA=1
for t in test_cuda test_nn_unet; do
  (cd $B/tests && timeout 150 ./$t > "$O/$t.log" 2>&1; echo "$t rc=$?") | tee -a "$O/summary.txt"
done
for p in bf16 tf32; do for g in 1 0; do
  echo "== $p graphs=$g"; NABLA_CUDA_GRAPH=$g timeout 60 $B/nabla unet bench --device cuda --precision $p --batch 32 --warmup 3 --steps 20 --no-progress 2>&1 | grep -E "ms/step|TFLOP/s|rror"
done; done | tee "$O/bench.log" | tee -a "$O/summary.txt"

#!/usr/bin/env bash
# The lead's closing device run: the whole suite with CUDA required, then the headline numbers.
#   OUT=... bash tools/device/final.sh [tests|bench|torch]...   (default: tests bench)
# Logs: $OUT/final/*.log
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/final"
mkdir -p "$O"
export NABLA_CACHE_DIR=${NABLA_CACHE_DIR:-/tmp/nabla-cache-final}
N=build/nabla
parts=${*:-tests bench}
for part in $parts; do
case $part in
tests)
  nvidia-smi > "$O/nvidia-smi.log" 2>&1
  { time NB_REQUIRE_CUDA=1 make test JOBS=16; echo "make test exit: $?"; } > "$O/make_test.log" 2>&1
  tail -n 25 "$O/make_test.log"
  ;;
bench)
  [ -x "$N" ] || make build JOBS=16 > "$O/build.log" 2>&1
  for p in tf32 bf16 fp32; do
    timeout 90 "$N" unet bench --device cuda --precision $p --batch 32 --warmup 3 --steps 20 --no-progress
  done > "$O/unet_bench.log" 2>&1
  for p in tf32 bf16; do
    timeout 90 "$N" unet bench --device cuda --precision $p --batch 32 --warmup 2 --steps 3 --profile --no-progress > "$O/unet_profile_$p.log" 2>&1
  done
  timeout 60 "$N" fit-image --device cuda --model hash --steps 1000 --profile --out "$O/fit_hash.png" > "$O/fit_hash.log" 2>&1
  timeout 60 "$N" fit-image --device cuda --model hash --sampling stratified --steps 1000 --no-out > "$O/fit_hash_strat.log" 2>&1
  timeout 60 "$N" fit-image --device cuda --model grid --steps 1000 --profile --out "$O/fit_grid.png" > "$O/fit_grid.log" 2>&1
  [ -f .export/astronaut.png ] && timeout 90 "$N" fit-image .export/astronaut.png --device cuda --model hash --steps 2000 --eval-every 250 --out "$O/astro.png" > "$O/fit_astro.log" 2>&1
  grep -h "ms/step\|PSNR\|TFLOP" "$O"/*.log | grep -v "^step" | head -40
  ;;
torch)
  for p in tf32 bf16; do
    timeout 280 python3 bench/torch/unet_ref.py bench --batch 32 --precision $p --steps 20 --compile reduce-overhead
  done > "$O/torch_unet.log" 2>&1
  tail -n 8 "$O/torch_unet.log"
  ;;
esac
done

#!/usr/bin/env bash
# Device run for the UNet / DDPM CUDA path (issue 7, part "unetcuda"): builds the CLI and
# test_nn_unet in build-dev-unetcuda, runs the UNet tests with NB_REQUIRE_CUDA=1 (CPU vs CUDA:
# forward/backward at fp32/tf32/bf16, DDPM steps, both samplers, a CUDA checkpoint loading on the
# CPU), `nabla unet bench --device cuda` of the
# reference config (64x64x3, batch 32) at fp32 / tf32 / bf16 plus a profiled bf16 pass, and the
# PyTorch reference (bench/torch/unet_ref.py bench: torch.compile bf16 while time is left, else
# eager bf16). Target: < 120 s wall (stages are cut to fit a 115 s budget).
# Logs: $OUT/unetcuda/{env,build,test,bench,profile,torch}.log
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/unetcuda"
mkdir -p "$O"
B=build-dev-unetcuda
export NABLA_CACHE_DIR="$PWD/$B/cache"
N="$B/nabla"

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>&1
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1
  nproc
} > "$O/env.log" 2>&1

{
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$B" -j16 --target nabla_cli test_nn_unet
} > "$O/build.log" 2>&1
echo "build exit: $? (at ${SECONDS} s)" >> "$O/build.log"

# Each stage gets min(its own limit, what is left of the 115 s budget).
lim() { local left=$((115 - SECONDS)); [ "$left" -lt "$1" ] && echo $((left > 5 ? left : 5)) || echo "$1"; }

# The benchmark first (the numbers matter most); its first run also compiles the kernels (NVRTC).
{
  for p in fp32 tf32 bf16; do
    echo "== nabla unet bench --device cuda --precision $p (at ${SECONDS} s)"
    timeout "$(lim 40)" "$N" unet bench --device cuda --precision $p --batch 32 --warmup 2 --steps 10 --no-progress
    echo "exit: $?"
  done
} > "$O/bench.log" 2>&1

( cd "$B" && NB_REQUIRE_CUDA=1 timeout "$(lim 60)" ./tests/test_nn_unet ) > "$O/test.log" 2>&1
echo "exit: $? (at ${SECONDS} s)" >> "$O/test.log"

{
  echo "== bf16 with --profile (at ${SECONDS} s)"
  timeout "$(lim 25)" "$N" unet bench --device cuda --precision bf16 --batch 32 --warmup 1 --steps 3 --profile --no-progress
  echo "exit: $?"
} > "$O/profile.log" 2>&1

# PyTorch eager was measured by tools/device/unet.sh and by this script's 10:01 UTC run (tf32 55.0,
# bf16 95.2 ms/step; docs/NN.md): here torch.compile bf16 (about a minute of compiling) when at
# least 40 s are left, else eager bf16 for a same-run comparison.
{
  left=$((115 - SECONDS))
  if [ "$left" -gt 40 ]; then
    echo "== torch.compile bf16 (at ${SECONDS} s, limit ${left} s)"
    timeout "$left" python3 bench/torch/unet_ref.py bench --batch 32 --precision bf16 --steps 10 --compile default
    echo "exit: $?"
  else
    echo "== torch eager bf16 (at ${SECONDS} s); torch.compile skipped (${left} s left of the 115 s budget;"
    echo "   run python3 bench/torch/unet_ref.py bench --batch 32 --precision bf16 --compile default)"
    timeout "$(lim 30)" python3 bench/torch/unet_ref.py bench --batch 32 --precision bf16 --steps 10
    echo "exit: $?"
  fi
} > "$O/torch.log" 2>&1
echo "total ${SECONDS} s" >> "$O/env.log"
date -u >> "$O/env.log"

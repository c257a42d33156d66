#!/usr/bin/env bash
# Device run for encodings / optimizer / losses / PNG / `nabla fit-image` (issue 6, part "enc"):
# builds the CLI and the tests in build-dev-enc, runs the tests with NB_REQUIRE_CUDA=1, fits the
# procedural image and (when found) astronaut.png on CUDA with a per-phase profile, and runs the
# PyTorch reference. Logs: $OUT/enc/{env,build,test,fit,torch}.log and two PNGs.
# astronaut.png is looked for in $NB_ASTRONAUT, ../shared/data, shared/data and .enc-data/
# (the device copy of the repo has no ../shared: `mkdir -p shared/data && cp ../shared/data/astronaut.png
# shared/data/` before the run — a shared/ folder in the checkout travels — or carry .enc-data/).
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/enc"
mkdir -p "$O"
B=build-dev-enc
export NABLA_CACHE_DIR="$PWD/$B/cache"

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1
  ldconfig -p 2>/dev/null | grep -i png || echo "no libpng in ldconfig"
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1
  nproc
} > "$O/env.log" 2>&1

{
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$B" -j "$(nproc)" --target nabla_cli test_nn_encoding test_nn_optim test_image
} > "$O/build.log" 2>&1
echo "build exit: $?" >> "$O/build.log"
N="$B/nabla"

( cd "$B" && NB_REQUIRE_CUDA=1 timeout 150 ctest -V -R "nn_encoding|nn_optim|test_image|cli_fit_image" ) > "$O/test.log" 2>&1
echo "exit: $?" >> "$O/test.log"

ASTRO=""
for f in "${NB_ASTRONAUT:-}" ../shared/data/astronaut.png shared/data/astronaut.png .enc-data/astronaut.png; do
  if [ -n "$f" ] && [ -f "$f" ]; then ASTRO="$f"; break; fi
done
{
  echo "== procedural 512x512, 1000 steps, batch 2^18, cuda"
  timeout 60 "$N" fit-image --device cuda --steps 1000 --eval-every 250 --profile --out "$O/fit_procedural.png"
  echo "exit: $?"
  echo "== A/B (stratified samples, warp-aggregated backward): 8 (default), 16, 32 points per warp"
  for p in 8 16 32; do
    NB_ENC_AGG_P=$p timeout 60 "$N" fit-image --device cuda --steps 300 --profile --sampling stratified --no-out
    echo "exit: $? (NB_ENC_AGG_P=$p)"
  done
  echo "== procedural 512x512, 1000 steps, stratified sampling (warp-aggregated backward)"
  timeout 60 "$N" fit-image --device cuda --steps 1000 --eval-every 250 --profile --sampling stratified --no-out
  echo "exit: $?"
  echo "== --model grid (dense 33x33x14 + the same MLP), 1000 steps"
  timeout 40 "$N" fit-image --device cuda --model grid --steps 1000 --profile --no-out
  echo "exit: $?"
  echo "== batch sweep (300 steps each, uniform / stratified)"
  for b in 65536 262144 1048576; do
    for m in uniform stratified; do
      echo "-- batch $b $m"
      timeout 40 "$N" fit-image --device cuda --steps 300 --batch $b --sampling $m --no-out 2>/dev/null
    done
  done
  if [ -n "$ASTRO" ]; then
    echo "== $ASTRO, 2000 steps, batch 2^18, cuda (PSNR every 100 steps)"
    timeout 60 "$N" fit-image "$ASTRO" --model hash --device cuda --steps 2000 --eval-every 100 --profile --out "$O/fit_astronaut.png"
    echo "exit: $?"
    echo "== $ASTRO, 2000 steps, stratified sampling"
    timeout 60 "$N" fit-image "$ASTRO" --model hash --device cuda --steps 2000 --eval-every 250 --sampling stratified --no-out
    echo "exit: $?"
  else
    echo "== astronaut.png not found (NB_ASTRONAUT, ../shared/data, shared/data, .enc-data): the procedural image, 2000 steps"
    timeout 60 "$N" fit-image --device cuda --steps 2000 --eval-every 200 --no-out
    echo "exit: $?"
  fi
} > "$O/fit.log" 2>&1

timeout 110 python3 -u bench/torch/bench_fit_image.py --steps 30 > "$O/torch.log" 2>&1
echo "exit: $?" >> "$O/torch.log"
date -u >> "$O/env.log"

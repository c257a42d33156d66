#!/usr/bin/env bash
# Device run for the fit-image speed work (issue 6, part "hashperf": hash grid + fused MLP step at
# 2^18 samples, target <= 0.25 ms/step on an H100). Builds nabla + the encoding / MLP tests in
# build-dev-hashperf; runs `nabla fit-image --model hash` with a per-phase profile: the defaults
# and each experiment switch (environment variables read by src/nn and the CLI; docs/PERF.md),
# then astronaut.png for quality (.export/astronaut.png when present), then the tests with
# NB_REQUIRE_CUDA=1 (the encoding test's CUDA parts, MLP shard 0 of 8). Most important numbers
# first, in case a time limit cuts the run short. Logs: $OUT/hashperf/{env,build,fit,astro,test_*}.log.
# About 120 s (the tests are most of it; give it a 150 s limit). The reduction-throughput microbenchmark
# tools/device/hashperf_atomics.cu is run by hand (command in its header).
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/hashperf"
mkdir -p "$O"
B=build-dev-hashperf
export NABLA_CACHE_DIR="$PWD/$B/cache"
T0=$(date +%s)
el() { echo "[t+$(( $(date +%s) - T0 ))s] $*"; }

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1
  nproc
} > "$O/env.log" 2>&1

{
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$B" -j 16 --target nabla_cli test_nn_encoding test_nn_mlp
} > "$O/build.log" 2>&1
echo "build exit: $?" >> "$O/build.log"
el "built" >> "$O/env.log"
N="$B/nabla"

ASTRO=""
for f in .export/astronaut.png shared/data/astronaut.png ../shared/data/astronaut.png; do
  if [ -f "$f" ]; then ASTRO="$f"; break; fi
done

fit() { # label, env assignments..., -- fit-image args
  local label="$1"; shift
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  echo "== $label  [${envs[*]:-defaults}] fit-image $*"
  env "${envs[@]}" timeout 40 "$N" fit-image --device cuda "$@" 2>&1 | grep -v "^step " 
  echo "exit: ${PIPESTATUS[0]}"
}

{
  # defaults: fused kernel (nb_encoding_mlp_train, 2 blocks/SM), paired reductions
  fit "procedural, defaults" -- --steps 1000 --profile --no-out
  fit "procedural, defaults, stratified" -- --steps 1000 --profile --no-out --sampling stratified
  # what the changes are worth (300 steps each; compare the profiles; docs/PERF.md has the rest)
  fit "before: separate calls, unpaired" NB_FIT_FUSED_BWD=0 NB_ENC_PAIR=0 -- --steps 300 --profile --no-out
  fit "fused, 1 block/SM" NB_ENC_MLP_BPS=1 -- --steps 300 --profile --no-out
} > "$O/fit.log" 2>&1
el "fits done" >> "$O/env.log"
{
  if [ -n "$ASTRO" ]; then
    fit "$ASTRO, 2000 steps, defaults" -- "$ASTRO" --steps 2000 --eval-every 250 --out "$O/astro.png"
    fit "$ASTRO, 2000 steps, defaults, stratified" -- "$ASTRO" --steps 2000 --eval-every 500 --no-out --sampling stratified
    fit "$ASTRO, 2000 steps, before (separate calls, unpaired)" NB_FIT_FUSED_BWD=0 NB_ENC_PAIR=0 -- "$ASTRO" --steps 2000 --eval-every 500 --no-out
  else
    echo "astronaut.png not found (.export/, shared/data/): procedural 2000 steps"
    fit "procedural 2000 steps" -- --steps 2000 --eval-every 500 --no-out
  fi
} > "$O/astro.log" 2>&1
el "astro done" >> "$O/env.log"
# Tests, in parallel: the encoding test's CUDA parts and MLP shard 0 of 8 (it holds the fit-image
# shape and the large-batch variants).
(
  cd "$B"
  # the encoding test's CUDA tests in three processes (name filters); its CPU tests pass anywhere
  for t in cuda_agrees paired backward_mlp; do
    ( NB_REQUIRE_CUDA=1 timeout 100 ./tests/test_nn_encoding $t > "$O/test_encoding_$t.log" 2>&1
      echo "exit: $?" >> "$O/test_encoding_$t.log" ) &
  done
  ( NB_REQUIRE_CUDA=1 NB_MLP_TEST_SHARD=0/8 timeout 100 ./tests/test_nn_mlp > "$O/test_mlp_shard0.log" 2>&1
    echo "exit: $?" >> "$O/test_mlp_shard0.log" ) &
  wait
)
el "tests done" >> "$O/env.log"

date -u >> "$O/env.log"

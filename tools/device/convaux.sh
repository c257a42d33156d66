#!/usr/bin/env bash
# Device run for the conv path's helper passes (bias add / fill / gradient, weight arrangement
# and the weights kept for the backward, split-sum endings, row-shift prep; src/nn/conv/conv_cuda_aux.c,
# conv_cuda.c, conv_cuda_igemm.c, conv_cuda_wgrad.c, tape_cuda_conv.c): builds into
# build-dev-convaux, then, each stage while the budget lasts (CONVAUX_BUDGET seconds, default 88;
# about 200 runs every stage):
#   1. `nabla unet bench` (reference UNet 64x64x3, batch 32) at bf16 with the new helper kernels
#      and with the old ones (NABLA_CONV_AUX_LEGACY=1, same binary: A/B; its prewarm fills the
#      NVRTC cache);
#   2. tests/test_nn_conv_aux_cuda, test_nn_tape_conv_cuda, test_nn_conv_bf16_cuda
#      (NB_REQUIRE_CUDA=1);
#   3. the tf32 A/B; test_nn_conv_wgrad_cuda, test_nn_tape_bf16_cuda, test_nn_tape_cuda,
#      test_nn_unet;
#   4. the helper microbenchmark (NB_CONVAUX_BENCH=1: old vs new per UNet shape, CUDA events,
#      median of 20).
# Logs: $OUT/convaux/{env,build,bench_unet,bench_aux,test_*}.log
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/convaux"
mkdir -p "$O"
B=build-dev-convaux
export NABLA_CACHE_DIR="$PWD/$B/cache"
BUDGET="${CONVAUX_BUDGET:-88}"

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1
} > "$O/env.log" 2>&1

TESTS="test_nn_conv_aux_cuda test_nn_tape_conv_cuda test_nn_conv_bf16_cuda test_nn_conv_wgrad_cuda test_nn_tape_bf16_cuda test_nn_tape_cuda test_nn_unet"
{
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$B" -j16 --target nabla_cli $TESTS
} > "$O/build.log" 2>&1
rc=$?
echo "build exit: $rc (at ${SECONDS} s)" >> "$O/build.log"
if [ "$rc" != 0 ]; then # never measure stale binaries
  echo "build failed: nothing run" >> "$O/env.log"
  exit 1
fi

# min(the stage's own limit, what is left of the budget); 0 = skip the stage
lim() {
  local left=$((BUDGET - SECONDS))
  if [ "$left" -lt 4 ]; then echo 0; elif [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}

# End to end, A/B in one binary: new kernels, then the old ones (a precision's first run also
# compiles its kernels: NVRTC, cached for the later runs). $1: the runs (precision:legacy).
bench() {
  local prev= run p legacy t
  for run in "$@"; do
    p=${run%:*} legacy=${run#*:}
    if [ "$p" != "$prev" ]; then t=$(lim 40); else t=$(lim 15); fi; prev=$p
    [ "$t" = 0 ] && { echo "skipped $p legacy=$legacy (budget)"; continue; }
    echo "== $p NABLA_CONV_AUX_LEGACY=$legacy (at ${SECONDS} s)"
    NABLA_CONV_AUX_LEGACY=$legacy timeout "$t" "$B/nabla" unet bench --device cuda --precision $p \
      --batch 32 --warmup 3 --steps 20 --no-progress 2>&1 | grep -E "unet bench:|mean loss|ms/step|rror"
    echo "exit: ${PIPESTATUS[0]}"
  done
}
runtest() { # $1 test, $2 limit (s), then environment assignments
  local tt=$1 t; t=$(lim "$2"); shift 2
  if [ "$t" = 0 ]; then echo "skipped (budget: ${SECONDS} s used)" > "$O/$tt.log"; return; fi
  ( cd "$B" && env NB_REQUIRE_CUDA=1 "$@" timeout "$t" "./tests/$tt" ) > "$O/$tt.log" 2>&1
  echo "exit: $? (at ${SECONDS} s)" >> "$O/$tt.log"
}

bench bf16:0 bf16:1 > "$O/bench_unet.log" 2>&1
runtest test_nn_conv_aux_cuda 30
runtest test_nn_tape_conv_cuda 40
runtest test_nn_conv_bf16_cuda 30
bench tf32:0 tf32:1 >> "$O/bench_unet.log" 2>&1
runtest test_nn_conv_wgrad_cuda 40
runtest test_nn_tape_bf16_cuda 40
runtest test_nn_tape_cuda 40
runtest test_nn_unet 40
t=$(lim 20)
if [ "$t" != 0 ]; then
  ( cd "$B" && NB_CONVAUX_BENCH=1 timeout "$t" ./tests/test_nn_conv_aux_cuda test_bench_aux ) > "$O/bench_aux.log" 2>&1
  echo "exit: $? (at ${SECONDS} s)" >> "$O/bench_aux.log"
fi

echo "total ${SECONDS} s" >> "$O/env.log"
date -u >> "$O/env.log"

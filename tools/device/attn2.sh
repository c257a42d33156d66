#!/usr/bin/env bash
# Device run for the whole-sequence fused attention kernels (helper "attn2": nb_attn_fwd_fa /
# nb_attn_bwd_fa in src/nn/attention/attn_cuda_tc.h, dispatched by src/nn/attention/tape_cuda_attn.c for TF32 / BF16,
# feature-major views, d <= 32, T <= 256, where measured faster; NB_ATTN_IMPL=tiled keeps the old
# 64 x 64 tiled kernels, NB_ATTN_IMPL=fa forces the new ones wherever they can run: A/B in one
# binary). Builds into build-dev-attn2 and runs, most important first, each stage
# capped by what is left of ATTN2_BUDGET seconds (default 88; later stages are skipped, logged):
#   bench        NB_ATTN_BENCH=qkv test_attn_bench (the kernels on qkv-layout views at the UNet's
#                shapes, the backward's parts, and the attention block on the tape), new then
#                NB_ATTN_IMPL=tiled
#   test_qkv_fa  NB_REQUIRE_CUDA=1 test_nn_tape_qkv fa_vs_tiled (whole-sequence vs tiled kernels)
#   unet         `nabla unet bench` bf16 / tf32 (batch 32, 3 + 20 steps), new and tiled
#   test_qkv     test_nn_tape_qkv cuda_vs_cpu (CUDA tape vs CPU tape: FP32 / TF32 / BF16, bf16
#                qkv, odd L, d 8..128, accumulation), then the [BH,T,d] attention, UNet,
#                PyTorch-reference and BF16 tape tests (all NB_REQUIRE_CUDA=1)
#   bench_knobs  the bench with the new kernels forced (NB_ATTN_IMPL=fa), with dQ's keys split
#                over warp pairs (NB_ATTN_FA_DQSPLIT=2) and with 4-warp forward blocks
#   ncu          Nsight Compute sections of nb_attn_fwd_fa / nb_attn_bwd_fa, if ncu is there
# Logs: $OUT/attn2/*.log (env.log: stage times).
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/attn2"
mkdir -p "$O"
B=build-dev-attn2
export NABLA_CACHE_DIR="$PWD/$B/cache"
BUDGET="${ATTN2_BUDGET:-88}"
el() { echo "$1: ${SECONDS} s" >> "$O/env.log"; }

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1
} > "$O/env.log" 2>&1

TESTS="test_nn_tape_qkv test_nn_tape_attn_cuda test_nn_tape_bf16_cuda test_nn_unet test_nn_tape_ref"
{
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$B" -j16 --target nabla_cli $TESTS
} > "$O/build.log" 2>&1
rc=$?
echo "build exit: $rc (at ${SECONDS} s)" >> "$O/build.log"
el build
if [ "$rc" != 0 ]; then
  echo "build failed: nothing run" >> "$O/env.log"
  exit 1
fi

# min(the stage's own limit, what is left of the budget); 0 = skip the stage
lim() {
  local left=$((BUDGET - SECONDS))
  if [ "$left" -lt 4 ]; then echo 0; elif [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}
# bench ENVSPEC LIMIT: NB_ATTN_BENCH=qkv test_attn_bench with extra environment (A/B, tuning)
bench() {
  local t
  t=$(lim "$2")
  [ "$t" = 0 ] && { echo "== $1: skipped (budget)"; return; }
  echo "== $1 (at ${SECONDS} s)"
  ( cd "$B" && env $1 NB_ATTN_BENCH=qkv timeout "$t" stdbuf -oL ./tests/test_nn_tape_attn_cuda test_attn_bench )
  echo "exit: $?"
}
{
  bench "NB_ATTN_IMPL=auto" 20
  bench "NB_ATTN_IMPL=tiled" 12
} > "$O/bench.log" 2>&1
el bench

# test NAME LIMIT BINARY [ARGS]: a CUDA test (NB_REQUIRE_CUDA=1), line-buffered so a timeout
# keeps what ran
ctest1() {
  local name=$1 t
  t=$(lim "$2")
  shift 2
  if [ "$t" = 0 ]; then echo "skipped (budget: ${SECONDS} s used)" > "$O/$name.log"; return; fi
  ( cd "$B" && NB_REQUIRE_CUDA=1 timeout "$t" stdbuf -oL -eL "./tests/$@" ) > "$O/$name.log" 2>&1
  echo "exit: $? (at ${SECONDS} s)" >> "$O/$name.log"
  el "$name"
}
ctest1 test_qkv_fa 20 test_nn_tape_qkv fa_vs_tiled

# end to end, new vs old kernels in one binary (a precision's first run compiles its modules)
unet() {
  local p=$1 impl=$2 t
  t=$(lim "$3")
  [ "$t" = 0 ] && { echo "skipped $p $impl (budget)"; return; }
  echo "== $p NB_ATTN_IMPL=$impl (at ${SECONDS} s)"
  NB_ATTN_IMPL=$impl timeout "$t" "$B/nabla" unet bench --device cuda --precision "$p" \
    --batch 32 --warmup 3 --steps 20 --no-progress 2>&1 | grep -E "unet bench:|ms/step|rror"
  echo "exit: ${PIPESTATUS[0]}"
}
{
  unet bf16 auto 30
  unet bf16 tiled 10
  unet tf32 auto 25
  unet tf32 tiled 10
} > "$O/unet.log" 2>&1
el unet

ctest1 test_unet 20 test_nn_unet cuda_forward_backward
ctest1 test_ref 20 test_nn_tape_ref unet_grads
ctest1 test_bf16 20 test_nn_tape_bf16_cuda
ctest1 test_qkv_mem 10 test_nn_tape_qkv qkv_cuda_m
ctest1 test_qkv_bad 10 test_nn_tape_qkv bad_head_dim
ctest1 test_attn_raw 15 test_nn_tape_attn_cuda test_attn_raw
ctest1 test_attn_tape 20 test_nn_tape_attn_cuda test_attn_tape
ctest1 test_qkv 40 test_nn_tape_qkv cuda_vs_cpu

{
  bench "NB_ATTN_IMPL=fa" 12
  bench "NB_ATTN_IMPL=fa NB_ATTN_FA_DQSPLIT=2" 12
  bench "NB_ATTN_IMPL=fa NB_ATTN_FA_FWD_WARPS=4" 12
} > "$O/bench_knobs.log" 2>&1
el bench_knobs

# a Nsight Compute look at the two kernels (when ncu exists and may read the counters)
t=$(lim 25)
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2> /dev/null)
if [ "$t" != 0 ] && [ -n "$NCU" ]; then
  ( cd "$B" && NB_ATTN_BENCH=qkv timeout "$t" "$NCU" -k regex:nb_attn_.*_fa --launch-count 2 \
      --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy \
      ./tests/test_nn_tape_attn_cuda test_attn_bench ) > "$O/ncu.log" 2>&1
  echo "exit: $? (at ${SECONDS} s)" >> "$O/ncu.log"
  el ncu
else
  echo "ncu: not run (budget or no ncu)" > "$O/ncu.log"
fi

echo "total ${SECONDS} s" >> "$O/env.log"
date -u >> "$O/env.log"

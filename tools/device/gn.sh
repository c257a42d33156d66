#!/usr/bin/env bash
# Device run for the group-norm work (src/nn/norm/tape_cuda_norm.c: the split kernels against the
# per-group ones, NABLA_GN_IMPL=old). Builds only the needed targets in build-dev-gn, runs the
# tape / UNet tests with NB_REQUIRE_CUDA=1 (tests/test_nn_gn_cuda.c compares split and old), the
# micro-benchmark of every UNet group-norm shape (NB_GN_BENCH=1: forward / backward, bf16 and
# f32 storage, old vs split variants, median of 20 event-timed calls after an L2 flush, and 20
# calls back to back, byte floor), and the end-to-end `nabla unet bench --batch 32` in bf16 and
# tf32, default vs old and variants (NABLA_GN_* knobs of src/nn/norm/tape_cuda_norm.c).
# Logs: $OUT/gn/{env,build,test,bench,unet}.log. Target: under 90 s wall.
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/gn"
mkdir -p "$O"
B=build-dev-gn
export NABLA_CACHE_DIR="$PWD/$B/cache"
T0=$SECONDS
stamp() { echo "[gn.sh +$((SECONDS - T0)) s] $*"; }

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1
  nproc
  git log --oneline -1 2>/dev/null
  git status --short src/nn/norm/tape_cuda_norm.c src/nn/tape/tape_internal.h tests/test_nn_gn_cuda.c 2>/dev/null
} > "$O/env.log" 2>&1

{
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build "$B" -j16 --target nabla_cli test_nn_gn_cuda test_nn_tape_cuda test_nn_tape_bf16_cuda \
    test_nn_tape_bf16core test_nn_tape_ref test_nn_unet
  echo "build exit: $?"
} > "$O/build.log" 2>&1
stamp "build done" | tee -a "$O/env.log"

( cd "$B" && NB_REQUIRE_CUDA=1 timeout 75 ctest -j6 --output-on-failure \
    -R "^(test_nn_gn_cuda|test_nn_tape_cuda|test_nn_tape_bf16_cuda|test_nn_tape_bf16core|test_nn_tape_ref|test_nn_unet)$" ) \
  > "$O/test.log" 2>&1
echo "exit: $?" >> "$O/test.log"
stamp "tests done" | tee -a "$O/env.log"

# end to end: the bf16 A/B first (the default: split for bf16 storage, the per-group backward
# for groups under 4096 elements; the first run compiles the UNet's kernels: cold NVRTC cache),
# then the micro-benchmark, then variants while the time lasts (~80 s): the split backward on
# small groups too, 4 / 8 chunks per thread in the statistics kernels, tf32 (f32 storage: the
# default keeps the per-group kernels) and a repeat of the A/B
unet() { # precision [VAR=value ...]
  local p=$1
  shift
  echo "== $p $*"
  env "$@" timeout 60 "$B/nabla" unet bench --device cuda --precision $p \
    --batch 32 --warmup 3 --steps 20 --no-progress 2>&1 | grep -v "^FLOPs\|^floor\|^training"
}
{ unet bf16; unet bf16 NABLA_GN_IMPL=old; } > "$O/unet.log" 2>&1
stamp "unet bench bf16 done" | tee -a "$O/env.log"

NB_GN_BENCH=1 timeout 60 "$B/tests/test_nn_gn_cuda" test_bench > "$O/bench.log" 2>&1
echo "exit: $?" >> "$O/bench.log"
stamp "bench done" | tee -a "$O/env.log"

for run in "bf16 NABLA_GN_SPLIT_MIN_BWD=0" "bf16 NABLA_GN_CPT=4" "bf16 NABLA_GN_CPT=8" "tf32" \
           "tf32 NABLA_GN_IMPL=old" "bf16" "bf16 NABLA_GN_IMPL=old"; do
  if [ $((SECONDS - T0)) -gt 80 ]; then echo "== $run: skipped (time)"; continue; fi
  unet $run
done >> "$O/unet.log" 2>&1
stamp "all done" | tee -a "$O/env.log"
echo done > "$O/DONE"

#!/usr/bin/env bash
# Device run for the tape's per-op profiler (nb_tape_set_profiling, src/nn/tape/tape_profile.c):
# builds libnabla + the tape tests in build-dev-tapeprof, runs test_nn_tape and
# test_nn_tape_cuda with NB_REQUIRE_CUDA=1, then tools/device/tapeprof_unet.c: the reference
# UNet (64x64x3, batch 32, tf32) DDPM training step on CUDA, 3 warm-up steps, 3 timed without
# the profiler, 3 profiled per op kind, 3 per op kind and shape (forward / backward columns).
# Target: < 60 s wall. Logs: $OUT/tapeprof/{env,build,test,unet}.log, tapeprof_{kinds,shapes}.txt
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/tapeprof"
mkdir -p "$O"
B=build-dev-tapeprof
export NABLA_CACHE_DIR="$PWD/$B/cache"

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>&1
  nproc
} > "$O/env.log" 2>&1

{
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$B" -j16 --target nabla test_nn_tape test_nn_tape_cuda &&
  cc -O2 -std=c11 -Iinclude tools/device/tapeprof_unet.c "$B/libnabla.a" -lm -ldl -lpthread \
     -o "$B/tapeprof_unet"
} > "$O/build.log" 2>&1
echo "build exit: $? (at ${SECONDS} s)" >> "$O/build.log"

# The UNet profile first (the table matters most), then the tests.
( timeout 35 "$B/tapeprof_unet" cuda 32 64 64 tf32 "$O" ) > "$O/unet.log" 2>&1
echo "exit: $? (at ${SECONDS} s)" >> "$O/unet.log"

{
  for tst in test_nn_tape_cuda test_nn_tape; do
    echo "== $tst (at ${SECONDS} s)"
    NB_REQUIRE_CUDA=1 timeout 20 "$B/tests/$tst"
    echo "exit: $?"
  done
} > "$O/test.log" 2>&1
echo "at ${SECONDS} s" >> "$O/test.log"
echo done > "$O/DONE"

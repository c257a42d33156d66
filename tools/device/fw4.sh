#!/usr/bin/env bash
# The bf16 3x3 weight-gradient kernel (conv_cuda_fw4.c): test against the CPU reference and the
# benchmark vs the current weight-gradient path (UNet shapes, batch 32).
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/fw4"; mkdir -p "$O"
B=${B:-build-dev}
export NABLA_CACHE_DIR=${NABLA_CACHE_DIR:-$PWD/$B/cache}
[ -f $B/CMakeCache.txt ] || cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DNB_WERROR=OFF > "$O/build.log" 2>&1
cmake -S . -B $B > /dev/null 2>&1
cmake --build $B -j16 --target test_nn_conv_fw4_cuda >> "$O/build.log" 2>&1 || { echo "build failed"; tail -20 "$O/build.log"; }
(cd $B/tests && NB_REQUIRE_CUDA=1 NB_FW4_BENCH=1 timeout 100 ./test_nn_conv_fw4_cuda) 2>&1 | tee "$O/test.log"
cmake --build $B -j16 --target nabla_cli >> "$O/build.log" 2>&1 || echo "cli build failed"
for p in bf16 tf32; do for w in 1 0; do
  echo "== $p NABLA_CONV_FW4=$w"; NABLA_CONV_FW4=$w timeout 60 $B/nabla unet bench --device cuda --precision $p --batch 32 --warmup 3 --steps 20 --no-progress 2>&1 | grep -E "ms/step|rror"
done; done 2>&1 | tee "$O/unet.log"
cmake --build $B -j16 --target test_nn_unet test_nn_tape_conv_cuda test_nn_tape_bf16_cuda test_nn_conv_bf16_cuda >> "$O/build.log" 2>&1
for t in test_nn_unet test_nn_tape_conv_cuda test_nn_tape_bf16_cuda test_nn_conv_bf16_cuda; do
  (cd $B/tests && NB_REQUIRE_CUDA=1 timeout 120 ./$t > "$O/$t.log" 2>&1; echo "$t rc=$? $(tail -1 $O/$t.log)")
done

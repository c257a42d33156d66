#!/usr/bin/env bash
# The lead's device checks for the bf16-storage tape (session 4): core test, UNet CPU-vs-CUDA
# tests, and the UNet reference-config bench in TF32 / BF16 (+ BF16 with f32 storage for A/B)
# and a BF16 per-op profile. Run through tools/device/batch.sh (build-dev-lead -> build-dev).
set -u
O="${OUT:-/tmp/out}/lead"
mkdir -p "$O"
B=build-dev-lead
cmake --build $B -j16 --target nabla_cli test_nn_tape_bf16core test_nn_unet test_nn_tape_ref > "$O/build.log" 2>&1 || echo "build failed (see build.log)"
export NB_REQUIRE_CUDA=1
for t in test_nn_tape_bf16core test_nn_unet test_nn_tape_ref; do
  (cd $B/tests && timeout 120 ./$t > "$O/$t.log" 2>&1; echo "$t rc=$?") | tee -a "$O/summary.txt"
done
N=$B/nabla
for p in tf32 bf16; do
  timeout 60 $N unet bench --device cuda --precision $p --batch 32 --warmup 3 --steps 20 --no-progress
done > "$O/unet_bench.log" 2>&1
for p in bf16 tf32; do
  timeout 60 $N unet bench --device cuda --precision $p --batch 32 --warmup 2 --steps 3 --profile --no-progress > "$O/unet_profile_$p.log" 2>&1
done
grep -h "ms/step" "$O"/unet_*.log | tee -a "$O/summary.txt"
# .nb elementwise pieces vs the hand-written rows (f32, [32,128,32,32]); LEAD_NBEW=1
if [ "${LEAD_NBEW:-0}" = 1 ]; then
  cmake --build $B -j16 --target bench_nb_elementwise > "$O/nbew_build.log" 2>&1
  timeout 60 $B/bench/bench_nb_elementwise 50 > "$O/nbew_bench.log" 2>&1
fi

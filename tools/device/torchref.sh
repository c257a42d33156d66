#!/usr/bin/env bash
# Device run for the PyTorch reference dumps of the tape / UNet (issue 7, part "torchref"):
# writes the dumps with CPU torch (tools/torch_ref/dump_tape_ref.py, float64 -> float32; needs no
# nabla build) into $OUT/torchref/tape_ref while building test_nn_tape_ref in build-dev-torchref,
# then runs the test against the fresh data (NB_TAPE_REF_DIR) with NB_REQUIRE_CUDA=1: CPU tape and
# CUDA tape, every op, the tiny UNets' gradients and ten AdamW steps. The CPU and the CUDA halves
# run as two processes in parallel (test name filters "cpu" / "cuda").
# Copy $OUT/torchref/tape_ref/* into tests/data/tape_ref/ to commit the data.
# Logs: $OUT/torchref/{env,dump,build,test_cpu,test_cuda,reproducible,summary}.log; ~30-70 s.
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/torchref"
mkdir -p "$O"
B=build-dev-torchref
D="$O/tape_ref"
export NABLA_CACHE_DIR="$PWD/$B/cache"

{
  date -u
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
  python3 -c "import torch, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'numpy', numpy.__version__)" 2>&1
  nproc
} > "$O/env.log" 2>&1

# the dumps (CPU torch) while the test builds
(
  T0=$(date +%s)
  timeout 60 python3 -u tools/torch_ref/dump_tape_ref.py --out "$D"
  echo "exit: $? ($(( $(date +%s) - T0 )) s)"
) > "$O/dump.log" 2>&1 &
DUMP=$!

{
  T0=$(date +%s)
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DNB_WERROR=OFF
  cmake --build "$B" -j "$(nproc)" --target test_nn_tape_ref
  echo "build exit: $? ($(( $(date +%s) - T0 )) s)"
} > "$O/build.log" 2>&1

wait "$DUMP"
(
  cd "$B"
  for part in cpu cuda; do
    ( T0=$(date +%s)
      NB_TAPE_REF_DIR="$D" NB_REQUIRE_CUDA=1 NB_TAPE_REF_VERBOSE=1 timeout 50 ./tests/test_nn_tape_ref "$part"
      echo "exit: $? ($(( $(date +%s) - T0 )) s)" ) > "$O/test_$part.log" 2>&1 &
  done
  wait
)
# reproducibility: the fresh dump against the committed data (byte for byte)
if [ -d tests/data/tape_ref ]; then
  for f in "$D"/*.safetensors; do
    cmp -s "$f" "tests/data/tape_ref/$(basename "$f")" && echo "same    $(basename "$f")" || echo "DIFFERS $(basename "$f")"
  done
else
  echo "no committed tests/data/tape_ref to compare with"
fi > "$O/reproducible.log" 2>&1
{ grep -h "MISMATCH\|FAILED\|passed, .* failed\|^exit" "$O"/test_*.log; grep -c "^same" "$O/reproducible.log";
  grep "DIFFERS\|no committed" "$O/reproducible.log"; } > "$O/summary.log" 2>&1
echo done > "$O/DONE"

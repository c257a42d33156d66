#!/usr/bin/env bash
# Device run for the inline MLP of the kernel language (lib/nn.nb, examples/image_model.nb,
# fit-image --model grid): builds libnabla + the CLI + test_nn_inline in build-dev-inlinemlp,
# runs the test with NB_REQUIRE_CUDA=1 (CUDA tensor-core path vs the CPU reference, tail lanes,
# the image model's gradients), then `nabla fit-image --model grid --steps 300 --profile` (every
# pixel of 512x512 per step) and the PyTorch reference. Logs: $OUT/inlinemlp/*.log
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/inlinemlp"
mkdir -p "$O"
B=build-dev-inlinemlp
export NABLA_CACHE_DIR="$PWD/$B/cache"
T0=$(date +%s)

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1
} > "$O/env.log" 2>&1

{
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$B" -j "$(nproc)" --target nabla_cli test_nn_inline
} > "$O/build.log" 2>&1
echo "build exit: $? ($(( $(date +%s) - T0 )) s)" >> "$O/build.log"
cc -O2 -Iinclude tools/device/inlinemlp_bench.c "$B/libnabla.a" -lm -lpthread -ldl -o "$B/inlinemlp_bench" >> "$O/build.log" 2>&1

(cd "$B" && NB_REQUIRE_CUDA=1 timeout 100 ./tests/test_nn_inline) > "$O/test.log" 2>&1
echo "exit: $? ($(( $(date +%s) - T0 )) s)" >> "$O/test.log"

timeout 60 "$B/nabla" fit-image --model grid --device cuda --steps 300 --profile --eval-every 100 \
    --out "$O/fit_grid.png" > "$O/fit_grid.log" 2>&1
echo "exit: $? ($(( $(date +%s) - T0 )) s)" >> "$O/fit_grid.log"
# GPU time of the step's calls, with and without each gradient (what the atomics cost)
timeout 30 "$B/inlinemlp_bench" examples/image_model.nb 512 cuda > "$O/bench.log" 2>&1
echo "exit: $? ($(( $(date +%s) - T0 )) s)" >> "$O/bench.log"
for v in grid_only mlp_only; do # the model without its MLP / without grid reads
  echo "== tools/device/inlinemlp_$v.nb"
  timeout 20 "$B/inlinemlp_bench" tools/device/inlinemlp_$v.nb 512 cuda 2>&1
  echo "exit: $?"
done >> "$O/bench.log"
# the same with random batches of 2^18 (the issue's PyTorch figure: 1.83 ms/step eager)
timeout 30 "$B/nabla" fit-image --model grid --device cuda --steps 100 --batch 262144 --no-out \
    > "$O/fit_grid_batch.log" 2>&1
echo "exit: $? ($(( $(date +%s) - T0 )) s)" >> "$O/fit_grid_batch.log"
# the PyTorch reference of the same model and step (after ours: nothing else on the GPU)
timeout 40 python3 -u bench/torch/bench_fit_grid.py --steps 30 --variants eager,compile > "$O/torch.log" 2>&1
echo "exit: $? ($(( $(date +%s) - T0 )) s)" >> "$O/torch.log"
# the generated CUDA code of the model's backward, for reading
"$B/nabla" emit examples/image_model.nb --target cuda --entry image_loss --mode bwd > "$O/image_loss_bwd.cu" 2>&1
echo "total $(( $(date +%s) - T0 )) s" > "$O/DONE"

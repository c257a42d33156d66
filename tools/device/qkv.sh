#!/usr/bin/env bash
# Device run for the fused legacy-layout QKV attention (nb_tape_qkv_attention; helper "qkv"):
# builds libnabla + the attention / UNet tests in build-dev-qkv, runs with NB_REQUIRE_CUDA=1:
#   test_nn_tape_qkv        CUDA tape vs CPU tape (FP32 / TF32 / BF16 incl. bf16 qkv), memory, d limit
#   test_nn_tape_attn_cuda  the [BH,T,d] attention kernels after the strided-view generalisation
#   test_nn_unet / test_nn_tape_ref (CUDA parts)  the UNet (now using the fused op) vs CPU / PyTorch
# then NB_ATTN_BENCH=qkv test_attn_bench (the attention block core on the tape at the UNet's
# shapes: fused vs the old layout-copy composition, FP32 / TF32 / BF16) and the PyTorch reference
# (bench/torch/bench_attn.py --qkv). Logs: $OUT/qkv/*.log. Budget ~90 s (steps capped).
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/qkv"
mkdir -p "$O"
B=build-dev-qkv
export NABLA_CACHE_DIR="$PWD/$B/cache"
T0=$(date +%s)
el() { echo "$1: $(( $(date +%s) - T0 )) s" >> "$O/env.log"; }

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1
  nproc
} > "$O/env.log" 2>&1

{
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$B" -j "$(nproc)" --target test_nn_tape_qkv test_nn_tape_attn_cuda test_nn_unet test_nn_tape_ref
} > "$O/build.log" 2>&1
echo "build exit: $?" >> "$O/build.log"
el build

# most important first (each step capped; NVRTC compiles each kernel module on first use)
( cd "$B" && NB_REQUIRE_CUDA=1 timeout 35 ./tests/test_nn_tape_qkv ) > "$O/test_qkv.log" 2>&1
echo "exit: $?" >> "$O/test_qkv.log"
el test_qkv

( cd "$B" && NB_REQUIRE_CUDA=1 timeout 20 ./tests/test_nn_unet cuda_forward_backward ) > "$O/test_unet.log" 2>&1
echo "exit: $?" >> "$O/test_unet.log"
( cd "$B" && NB_REQUIRE_CUDA=1 timeout 20 ./tests/test_nn_tape_ref unet_grads ) > "$O/test_ref.log" 2>&1
echo "exit: $?" >> "$O/test_ref.log"
el test_unet_ref

# the kernels on qkv-layout vs row-major views (f32 / bf16 storage) and the attention block core
# on the tape: fused vs the old composition (NB_ATTN_BENCH=qkv: only those)
( cd "$B" && NB_ATTN_BENCH=qkv timeout 30 ./tests/test_nn_tape_attn_cuda test_attn_bench ) > "$O/bench.log" 2>&1
echo "exit: $?" >> "$O/bench.log"
el bench

# the [BH,T,d] kernels after the strided-view generalisation (a test-name argument is a substring
# filter: one per run, so all of them here)
( cd "$B" && NB_REQUIRE_CUDA=1 timeout 30 ./tests/test_nn_tape_attn_cuda ) > "$O/test_attn.log" 2>&1
echo "exit: $?" >> "$O/test_attn.log"
el test_attn

timeout 15 python3 -u bench/torch/bench_attn.py --qkv > "$O/torch.log" 2>&1
echo "exit: $?" >> "$O/torch.log"
el end

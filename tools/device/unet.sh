#!/usr/bin/env bash
# Device run for the diffusion UNet / DDPM / safetensors / data sets (issue 7, part "unet", CPU path):
# builds in build-dev-unet, runs the unit and CLI tests, checks the model against a PyTorch
# re-implementation of guided-diffusion's UNetModel (bench/torch/unet_ref.py: parameter count,
# PyTorch-written checkpoints -> nabla forward == torch forward, a nabla checkpoint loads into
# torch strictly), times nabla's CPU training step, and the PyTorch H100 reference training step.
# Logs: $OUT/unet/{env,build,test,torch_check,cpu_bench,torch_bench}.log
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/unet"
mkdir -p "$O"
B=build-dev-unet
export NABLA_CACHE_DIR="$PWD/$B/cache"

{
  date -u
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
  python3 -c "import torch, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'numpy', numpy.__version__)" 2>&1
  python3 -c "import safetensors; print('safetensors', safetensors.__version__)" 2>&1
  nproc
} > "$O/env.log" 2>&1

{
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$B" -j "$(nproc)" --target nabla_cli nabla test_nn_unet test_safetensors test_nn_dataset
  cc -O2 -Iinclude tools/device/unet_forward.c "$B/libnabla.a" -lm -lpthread -ldl -o "$B/unet_forward"
} > "$O/build.log" 2>&1
echo "build exit: $?" >> "$O/build.log"
N="$B/nabla"

( cd "$B" && NB_REQUIRE_CUDA=1 timeout 120 ctest -V -R "nn_unet|safetensors|nn_dataset|cli_unet" ) > "$O/test.log" 2>&1
echo "exit: $?" >> "$O/test.log"

T="$B/unet-check"
mkdir -p "$T"
{
  echo "== pure-Python reference forward (no torch), both resample modes"
  python3 -c "import struct,random; random.seed(1); open('$T/x.bin','wb').write(struct.pack('<384f',*[random.gauss(0,1) for _ in range(384)])); open('$T/t.bin','wb').write(struct.pack('<2f',5.0,777.0))"
  for cr in "" --conv-resample; do
    "$N" unet train --data synthetic --image-size 8 --channels 8 --mult 1,2 --res-blocks 1 --attn 8,4 --head-channels 4 \
        --groups 4 $cr --batch 2 --steps 5 --lr 0.05 --ema 0 --clip 0 --ckpt "$T/p.safetensors" --no-progress | tail -1
    "$B/unet_forward" "$T/p.safetensors" "$T/x.bin" 2 "$T/t.bin" "$T/y.bin"
    timeout 60 python3 bench/torch/unet_ref_pure.py "$T/p.safetensors" "$T/x.bin" 2 "$T/t.bin" "$T/y.bin"; echo "exit: $?"
  done
  echo "== parameter count"; timeout 60 python3 bench/torch/unet_ref.py count; echo "exit: $?"
  echo "== torch-written checkpoints -> nabla forward vs torch (f64)"
  timeout 90 python3 bench/torch/unet_ref.py check "$B/unet_forward" "$T"; echo "exit: $?"
  echo "== nabla-written checkpoint -> torch"
  timeout 60 "$N" unet train --data synthetic --image-size 16 --channels 32 --mult 1,2 --res-blocks 2 --attn 8 \
      --head-channels 16 --groups 8 --batch 4 --steps 3 --ckpt "$T/nabla.safetensors" --no-progress
  timeout 60 python3 bench/torch/unet_ref.py load "$T/nabla.safetensors"; echo "exit: $?"
} > "$O/torch_check.log" 2>&1

{
  echo "== nabla CPU, tiny config (16x16x3, 165,859 params), batch 8"
  timeout 60 "$N" unet bench --device cpu --image-size 16 --channels 16 --mult 1,2 --res-blocks 1 --attn 8 --head-channels 16 \
      --groups 8 --batch 8 --steps 6 --no-progress
  echo "== nabla CPU, reference config, batch 1, 1 step"
  timeout 100 "$N" unet bench --device cpu --batch 1 --warmup 0 --steps 1 --no-progress; echo "exit: $?"
} > "$O/cpu_bench.log" 2>&1

{
  for p in fp32 tf32 bf16; do timeout 60 python3 bench/torch/unet_ref.py bench --batch 32 --precision $p --steps 20; done
} > "$O/torch_bench.log" 2>&1
echo done > "$O/DONE"

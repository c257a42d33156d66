#!/usr/bin/env bash
# Fashion-MNIST run of the diffusion UNet on the GPU (issue 7): trains a small UNet (32x32x1,
# 64 channels, mult 1,2,2, attention at 16, batch 128, lr 3e-4, EMA 0.999, bf16) on the IDX files the
# lead carries to .export/fmnist/ (Debian's dataset-fashion-mnist is not installed on the device
# machine) for a wall budget (--max-seconds 180: training stops at the first logging point after
# it and saves), then samples 64 images with DDIM (50 steps) and DDPM (250 steps) from the EMA
# weights. Uses the CLI built by tools/device/unetcuda.sh (builds it when missing).
# Writes $OUT/fmnist/{train.log,loss.csv,loss.png,samples.png,samples_ddpm1000.png,sample.log}; the
# checkpoint stays in the build folder (too big for OUT).
# Override: FMNIST_SECONDS=S, FMNIST_STEPS=N (cap), FMNIST_DIR=DIR, FMNIST_PRECISION=fp32|tf32|bf16.
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/fmnist"
mkdir -p "$O"
B=build-dev-unetcuda
export NABLA_CACHE_DIR="$PWD/$B/cache"
N="$B/nabla"
DIR="${FMNIST_DIR:-$PWD/.export/fmnist}"
STEPS="${FMNIST_STEPS:-100000}"
SECS="${FMNIST_SECONDS:-180}"
PREC="${FMNIST_PRECISION:-bf16}"

if [ ! -x "$N" ]; then
  { cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release && cmake --build "$B" -j16 --target nabla_cli; } > "$O/build.log" 2>&1
  echo "build exit: $? (at ${SECONDS} s)" >> "$O/build.log"
fi

MODEL="--image-size 32 --in-channels 1 --channels 64 --mult 1,2,2 --res-blocks 2 --attn 16 --head-channels 32 --groups 32"
{
  date -u
  nvidia-smi --query-gpu=name --format=csv,noheader 2>&1
  # the loop stops after SECS s (or STEPS steps); the timeout is only a guard (the checkpoint is
  # written at the end, so a killed run has no samples).
  timeout 230 "$N" unet train --device cuda --precision "$PREC" --data "fashion-mnist:$DIR" $MODEL \
      --batch 128 --steps "$STEPS" --max-seconds "$SECS" --lr 3e-4 --ema 0.999 --log-every 50 --no-progress \
      --ckpt "$B/fmnist.safetensors" --loss-csv "$O/loss.csv" --loss-png "$O/loss.png"
  echo "exit: $? (at ${SECONDS} s)"
} > "$O/train.log" 2>&1

{
  timeout 60 "$N" unet sample --device cuda --precision "$PREC" --ckpt "$B/fmnist.safetensors" --n 64 \
      --sampler ddim --steps 50 --seed 1 --scale 2 --out "$O/samples.png"
  echo "exit: $? (at ${SECONDS} s)"
  timeout 60 "$N" unet sample --device cuda --precision "$PREC" --ckpt "$B/fmnist.safetensors" --n 64 \
      --sampler ddpm --steps 1000 --seed 1 --scale 2 --out "$O/samples_ddpm1000.png"
  echo "exit: $? (at ${SECONDS} s)"
} > "$O/sample.log" 2>&1
echo "total ${SECONDS} s" >> "$O/train.log"

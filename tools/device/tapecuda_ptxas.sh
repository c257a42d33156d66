#!/usr/bin/env bash
# ptxas report (registers, spills, shared memory) of every kernel of the tape's CUDA rows
# (src/nn/tape/tape_cuda_basic.c, tape_cuda_norm.c), compiled for sm_90 with nvcc (no GPU needed):
# a check that the f32 paths keep their register counts when the bf16 variants are added.
#   tools/device/tapecuda_ptxas.sh [outdir]     (default /tmp/tapecuda_ptxas)
set -eu
cd "$(dirname "$0")/../.."
D="${1:-/tmp/tapecuda_ptxas}"
mkdir -p "$D"
python3 tools/device/tapecuda_extract.py "$D" --helpers
for f in basic norm; do
  nvcc -arch=sm_90 -cubin -Xptxas -v -o "$D/$f.cubin" "$D/$f.cu" 2>&1 |
    awk '/Compiling entry/ {gsub(/\x27/, "", $7); k = $7}
         /spill/ {sp = $5 "/" $9}
         /Used/ {sm = ""; if (match($0, /[0-9]+ bytes smem/)) sm = substr($0, RSTART, RLENGTH);
                 printf "%-16s regs %3s  spill st/ld %-6s %s\n", k, $5, sp, sm}'
done | sort

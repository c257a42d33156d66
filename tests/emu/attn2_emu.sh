#!/usr/bin/env bash
# Builds and runs tests/emu/attn2_emu.cpp for module variants "DP IS_BF16 SBF" (default: the
# UNet's two, plus converted-storage and mixed ones). No GPU needed; builds under $EMU_DIR (default
# $TMPDIR/attn2_emu). ctest emu_attention runs the default variants; exit 77 (skipped) without g++.
set -eu
command -v g++ > /dev/null || { echo "skipped: no g++"; exit 77; }
cd "$(dirname "$0")/../.."
W=${EMU_DIR:-${TMPDIR:-/tmp}/attn2_emu}
mkdir -p "$W"
variants=${*:-"32:1:2 32:0:0 32:1:0 32:0:2 16:1:1"}
K=src/nn/attention/kernels
# The kernel files without their include lines (the emulator supplies its own bf16 and PTX helpers).
strip() { sed -e '/^#pragma once/d' -e '/^#include "/d' "$@"; }
rc=0
for v in $variants; do
  IFS=: read -r dp bf sbf <<< "$v"
  D="$W/v_${dp}_${bf}_${sbf}"
  mkdir -p "$D"
  { printf '#define DP %s\n#define IS_BF16 %s\n#define FM 1\n#define SBF %s\n' "$dp" "$bf" "$sbf"; strip $K/attn_common.cuh; } > "$D/attn2_emu_head.inc"
  strip $K/atomic.cuh $K/tc_frag.cuh > "$D/attn2_emu_frag.inc"
  strip $K/fa.cuh > "$D/attn2_emu_fa.inc"
  sed -i 's/extern __shared__ __align__(16) unsigned char smc\[\];/unsigned char *smc = g_dyn_smem;/g' "$D/attn2_emu_fa.inc"
  g++ -std=c++17 -O1 -w -I"$D" tests/emu/attn2_emu.cpp -o "$D/emu" -lpthread
  "$D/emu" ${ATTN2_EMU_CASES:-} || rc=1
done
exit $rc

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
cat > "$W/gen.c" <<'GEN'
#include <stdio.h>
#include <stdlib.h>
#include "nn/attention/attn_cuda_tc.h"
int main(int argc, char **argv) {
    FILE *f = fopen(argv[4], "w");
    fprintf(f, "#define DP %s\n#define IS_BF16 %s\n#define FM 1\n#define SBF %s\n", argv[1], argv[2], argv[3]);
    fputs(NB_ATTN_SRC_HEAD, f); fclose(f);
    f = fopen(argv[5], "w"); fputs(NB_ATTN_SRC_ATOMIC NB_ATTN_SRC_TC_FRAG, f); fclose(f);
    f = fopen(argv[6], "w"); fputs(NB_ATTN_SRC_FA, f); fclose(f);
    return 0;
}
GEN
cc -Isrc -Iinclude "$W/gen.c" -o "$W/gen"
rc=0
for v in $variants; do
  IFS=: read -r dp bf sbf <<< "$v"
  D="$W/v_${dp}_${bf}_${sbf}"
  mkdir -p "$D"
  "$W/gen" "$dp" "$bf" "$sbf" "$D/attn2_emu_head.inc" "$D/attn2_emu_frag.inc" "$D/attn2_emu_fa.inc"
  sed -i 's/extern __shared__ __align__(16) unsigned char smc\[\];/unsigned char *smc = g_dyn_smem;/g' "$D/attn2_emu_fa.inc"
  g++ -std=c++17 -O1 -w -I"$D" tests/emu/attn2_emu.cpp -o "$D/emu" -lpthread
  "$D/emu" ${ATTN2_EMU_CASES:-} || rc=1
done
exit $rc

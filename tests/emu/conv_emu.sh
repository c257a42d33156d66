#!/usr/bin/env bash
# Runs one implicit-GEMM conv kernel configuration on the CPU (tests/emu/conv_emu.cpp) against
# a double reference; needs g++ with C++20 (std::barrier), no GPU. Builds under $EMU_DIR (default
# $TMPDIR/nabla-conv-emu); tests/emu/conv_emu_suite.sh (ctest emu_conv) runs a set of them.
#   tests/emu/conv_emu.sh MODE PREC BM BN WM WN KS STRIDE  WHICH N C H W O PAD [SPLITS]
# WHICH: fwd | dgrad | dgrads | wgrad (MODE 0/2), hfwd | hdgrad | hdgrads (MODE 1), hwgrad
# (MODE 3); dgrads / hdgrads: the data gradient in store mode (dx starts as NaNs); bhfwd |
# bhdgrad | bhdgrads: MODE 1 on bf16 activations (PREC 2; ABF = 1; bf16 output unless
# EMU_OBF=0, which a k split needs); bfwd | bdgrad | bdgrads: MODE 0 on bf16 (the same);
# bhwgrad: MODE 2 or 3 on bf16 dy and x. Examples:
#   tests/emu/conv_emu.sh 1 1 128 64 4 2 3 1  hfwd 1 16 4 32 40 1
#   tests/emu/conv_emu.sh 3 2 64 64 2 4 3 1  hwgrad 1 32 16 16 70 1 2
# Exit 0 when the relative error is within the precision's tolerance.
set -eu
root="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${EMU_DIR:-${TMPDIR:-/tmp}/nabla-conv-emu}"
mkdir -p "$dir"
abf=0; obf=0
case "${9:-}" in b*) abf=1; obf="${EMU_OBF:-1}";; esac
tag="$1_$2_$3_$4_$5_$6_$7_$8_$abf$obf"
cb=8; [ "$2" = 2 ] && cb=16
# rebuilt when the kernel files or the emulator changed
kdir="$root/src/nn/conv/kernels"; src_cu="$kdir/igemm.cu"
stale=0
for f in "$src_cu" "$kdir/igemm_bf16.cuh" "$kdir/igemm_pipe.cuh" "$root/tests/emu/conv_emu.cpp"; do
  [ "$f" -nt "$dir/kernel.src" ] && stale=1
done
if [ ! -f "$dir/kernel.src" ] || [ $stale = 1 ]; then
  rm -f "$dir"/emu_* "$dir"/kernel_*
  # the kernel source with igemm_pipe.cuh and igemm_bf16.cuh pasted at their #includes and the
  # dynamic shared array made a host pointer
  awk -v kd="$kdir" '/^#include "igemm_[a-z0-9]*\.cuh"/ { inc = kd "/" substr($2, 2, length($2) - 2); while ((getline l < inc) > 0) print l; close(inc); next } { print }' "$src_cu" |
    sed 's/extern __shared__ __align__(16) float smem\[\];/float *smem = emu_smem;/g' > "$dir/kernel.src"
fi
if [ ! -x "$dir/emu_$tag" ]; then
  { printf "#define MODE %s\n#define PREC %s\n#define BM %s\n#define BN %s\n#define WM %s\n#define WN %s\n#define STAGES 3\n#define KS %s\n#define STRIDE %s\n#define CB %s\n#define ABF %s\n#define OBF %s\n" \
      "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" "$cb" "$abf" "$obf"; cat "$dir/kernel.src"; } > "$dir/kernel_$tag.inc"
  g++ -std=c++20 -O1 -w -pthread -DKERNEL_INC="\"$dir/kernel_$tag.inc\"" "$root/tests/emu/conv_emu.cpp" -o "$dir/emu_$tag"
fi
shift 8
"$dir/emu_$tag" "$@"

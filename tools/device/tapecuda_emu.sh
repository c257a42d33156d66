#!/usr/bin/env bash
# Runs the tape's CUDA rows on the CPU under an emulation of the CUDA layer (no GPU or driver
# needed; see tools/device/tapecuda_emu.cpp): extracts the kernel sources from
# src/nn/tape_cuda_{basic,norm}.c and tape_cast.c (tools/device/tapecuda_extract.py), builds
# tests/test_nn_tape_cuda.c, tests/test_nn_tape_bf16_cuda.c and tools/device/tapecuda_bench.c
# against them in $E (default build-tapecuda-emu/), and runs the tests (several minutes on 2
# cores) and the benchmark on tiny shapes. Needs a built libnabla.a: LIB=path/to/libnabla.a
# (default build-tapecuda/libnabla.a). Usage: tools/device/tapecuda_emu.sh [test names...]
# (TESTS="bf16" runs only the bf16 test, TESTS="f32" only the f32 one; NOBENCH=1 skips the bench)
set -eu
cd "$(dirname "$0")/../.."
R=$PWD
LIB="$(realpath "${LIB:-$R/build-tapecuda/libnabla.a}")"
E="${E:-$R/build-tapecuda-emu}"
mkdir -p "$E"
python3 tools/device/tapecuda_extract.py "$E"
cd "$E"
g++ -O1 -g -std=c++17 -w -I. -I"$R/include" -I"$R/src" -c "$R/tools/device/tapecuda_emu.cpp" -o emu.o
OBJS=""
for p in tape/tape tape/tape_ops_basic conv/tape_ops_conv tape/tape_ops_shape attention/tape_ops_attn \
         tape/tape_cuda_basic norm/tape_cuda_norm tape/tape_cast; do
  f=${p#*/}
  gcc -O1 -g -std=gnu11 -Wall -I"$R/include" -I"$R/src" -c "$R/src/nn/$p.c" -o $f.o
  OBJS="$OBJS $f.o"
done
CF="-O1 -g -std=gnu11 -I$R/include -I$R/src -I$R/tests"
# our objects first: their definitions win over libnabla's (device layer, tape files)
LINK="emu.o $OBJS -Wl,--allow-multiple-definition $LIB -lm -lpthread -ldl"
gcc $CF -c "$R/tests/test_nn_tape_cuda.c" -o test.o && g++ -o test_emu test.o $LINK
gcc $CF -c "$R/tests/test_nn_tape_bf16_cuda.c" -o test_bf16.o && g++ -o test_bf16_emu test_bf16.o $LINK
gcc $CF -c "$R/tools/device/tapecuda_bench.c" -o bench.o && g++ -o bench_emu bench.o $LINK
case "${TESTS:-all}" in
  f32) ./test_emu "$@" ;;
  bf16) ./test_bf16_emu "$@" ;;
  *) ./test_emu "$@"; ./test_bf16_emu "$@" ;;
esac
[ -n "${NOBENCH:-}" ] || ./bench_emu 1 small

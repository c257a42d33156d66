#!/usr/bin/env bash
# Runs the tape's CUDA rows on the CPU under an emulation of the CUDA layer (no GPU or driver
# needed; see tools/device/tapecuda_emu.cpp): extracts the kernel sources from
# src/nn/tape_cuda_{basic,norm}.c, builds tests/test_nn_tape_cuda.c and tools/device/tapecuda_bench.c
# against them in build-tapecuda-emu/, and runs the test (several minutes on 2 cores) and the
# benchmark on tiny shapes. Needs a built libnabla.a: LIB=path/to/libnabla.a (default
# build-tapecuda/libnabla.a). Usage: tools/device/tapecuda_emu.sh [test names...]
set -eu
cd "$(dirname "$0")/../.."
R=$PWD
LIB="$(realpath "${LIB:-$R/build-tapecuda/libnabla.a}")"
E="$R/build-tapecuda-emu"
mkdir -p "$E"
python3 - "$E" <<'PY'
import ast, re, sys
out = sys.argv[1]
for src, var, name in [("src/nn/tape_cuda_basic.c", "tk_src", "basic.cu"),
                       ("src/nn/tape_cuda_norm.c", "gn_src", "norm.cu")]:
    s = open(src).read()
    a = s.index("static const char %s[] =" % var)
    m = re.compile(r'"\s*;\n').search(s, a)
    chunk = s[s.index("\n", a) + 1:m.end() - 2]
    lits = re.findall(r'^\s*("(?:[^"\\]|\\.)*")\s*$', chunk, re.M)
    open(out + "/" + name, "w").write("".join(ast.literal_eval(l) for l in lits))
PY
cd "$E"
g++ -O1 -g -std=c++17 -w -I. -I"$R/include" -I"$R/src" -c "$R/tools/device/tapecuda_emu.cpp" -o emu.o
OBJS=""
for f in tape tape_ops_basic tape_ops_conv tape_ops_shape tape_ops_attn tape_cuda_basic tape_cuda_norm; do
  gcc -O1 -g -std=gnu11 -Wall -I"$R/include" -I"$R/src" -c "$R/src/nn/$f.c" -o $f.o
  OBJS="$OBJS $f.o"
done
gcc -O1 -g -std=gnu11 -I"$R/include" -I"$R/src" -I"$R/tests" -c "$R/tests/test_nn_tape_cuda.c" -o test.o
gcc -O1 -g -std=gnu11 -I"$R/include" -I"$R/src" -c "$R/tools/device/tapecuda_bench.c" -o bench.o
# our objects first: their definitions win over libnabla's (device layer, tape files)
g++ -o test_emu test.o emu.o $OBJS -Wl,--allow-multiple-definition "$LIB" -lm -lpthread -ldl
g++ -o bench_emu bench.o emu.o $OBJS -Wl,--allow-multiple-definition "$LIB" -lm -lpthread -ldl
./test_emu "$@"
./bench_emu 1 small

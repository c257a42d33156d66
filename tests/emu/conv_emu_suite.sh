#!/usr/bin/env bash
# ctest emu_conv: the implicit-GEMM conv kernels (src/nn/conv/kernels/igemm.cu, igemm_bf16.cuh, igemm_pipe.cuh) run on the
# CPU emulator (conv_emu.sh / conv_emu.cpp) against a double reference, one configuration of each
# kernel family the dispatcher (conv_cuda_igemm.c) picks: MODE 0 (gather GEMM) forward and data
# gradient, MODE 1 (halo) forward / data gradient, MODE 2 and MODE 3 weight gradients, in TF32
# and on bf16 activations, with and without k splits. Finds index-arithmetic errors without a GPU
# (not pipeline races: cp.async is synchronous there). Exit 77 (skipped) without g++ / C++20.
#   tests/emu/conv_emu_suite.sh BUILD_DIR
set -u
here="$(cd "$(dirname "$0")" && pwd)"
export EMU_DIR="${1:-${TMPDIR:-/tmp}/nabla-conv-emu}"
mkdir -p "$EMU_DIR"
printf '#include <barrier>\nint main(){std::barrier<> b(1);b.arrive_and_wait();}\n' > "$EMU_DIR/probe.cpp"
if ! g++ -std=c++20 -pthread "$EMU_DIR/probe.cpp" -o "$EMU_DIR/probe" > /dev/null 2>&1; then
  echo "skipped: no g++ with C++20 <barrier>"; exit 77
fi
fail=0; n=0
run() { # MODE PREC BM BN WM WN KS STRIDE  WHICH N C H W O PAD [SPLITS]
  n=$((n+1))
  if out=$(bash "$here/conv_emu.sh" "$@" 2>&1); then echo "ok   $out"; else echo "FAIL $* : $out"; fail=$((fail+1)); fi
}
# MODE 0, TF32: forward (with a k split), data gradient (accumulating and storing)
run 0 1 128 64 4 2 3 1  fwd 1 32 8 8 64 1
run 0 1 128 64 4 2 3 1  fwd 1 32 8 8 64 1 3
run 0 1 128 64 4 2 3 1  dgrads 1 64 8 8 32 1
# MODE 0 on bf16 activations
run 0 2 128 64 4 2 3 1  bfwd 1 32 8 8 64 1
# MODE 1 (halo), TF32: forward, data gradient (store), forward with a k split
run 1 1 128 64 4 2 3 1  hfwd 1 16 4 32 40 1
run 1 1 128 64 4 2 3 1  hdgrads 1 40 4 32 16 1
run 1 1 128 64 4 2 3 1  hfwd 1 24 4 32 40 1 2
# MODE 1 on bf16 activations (bf16 output)
run 1 2 128 64 4 2 3 1  bhfwd 1 32 4 32 40 1
# MODE 2 weight gradient, TF32; MODE 3 (halo) weight gradient, bf16 with a split
run 2 1 64 128 2 4 3 1  wgrad 1 32 8 8 64 1 2
run 3 2 64 64 2 4 3 1  hwgrad 1 32 16 16 70 1 2
echo "$((n-fail)) passed, $fail failed"
[ "$fail" -eq 0 ]

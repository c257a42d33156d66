#!/usr/bin/env bash
# Times of one 3x3 conv pass (tools/device/wgprof.c: forward or weight gradient, tf32 / bf16) on
# UNet shapes, then ncu sections of its main kernel for three of them. Logs: $OUT/wgprof/.
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/wgprof"; mkdir -p "$O"
B=${B:-build-dev}
export NABLA_CACHE_DIR=${NABLA_CACHE_DIR:-$PWD/$B/cache}
[ -f $B/CMakeCache.txt ] || cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DNB_WERROR=OFF > "$O/build.log" 2>&1
cmake --build $B -j16 --target nabla >> "$O/build.log" 2>&1
cc -O2 -Iinclude -Isrc tools/device/wgprof.c $B/libnabla.a -lm -lpthread -ldl -o $B/wgprof >> "$O/build.log" 2>&1 || { echo "wgprof build failed"; tail "$O/build.log"; }
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
for s in "64 64 64 2 w" "64 64 64 2 f" "128 128 32 2 w" "256 256 8 2 w" "64 64 64 1 w" "64 64 64 1 f"; do
  $B/wgprof $s 8
done | tee "$O/times.log"
# ncu of one launch per shape (the pass's main kernel: implicit GEMM or wg4)
for s in "64 64 64 2 w" "64 64 64 2 f" "128 128 32 2 w"; do
  echo "=== $s"
  timeout 60 "$NCU" --kernel-name "regex:nb_conv_(igemm|wg4)$" --launch-skip 3 --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis $B/wgprof $s 5 2>&1 | grep -v "^==PROF==" | grep -E "Duration|Throughput|Occupancy|Registers|Shared Memory|Block Size|Grid Size|Stall|Issue|Warp Cycles|Pipe|L2|DRAM|Executed Ipc|Bank|Waves|Eligible|Active Warps|One or More|No Eligible|Hit Rate" | head -60
done > "$O/ncu.log" 2>&1
cat "$O/ncu.log"

#!/usr/bin/env bash
# Kernel timelines (torch.profiler) of the nabla and PyTorch-eager DDPM steps (tools/device/kprof.py);
# KPROF="nabla:bf16 ..." picks runs (default all four); graph gaps (graphgap.py).
set -u
cd "$(dirname "$0")/../.."
O="${OUT:-/tmp/out}/kprof"; mkdir -p "$O"
B=build-dev-pynn; PY="$(command -v python3)"
export NABLA_CACHE_DIR="$PWD/$B/cache"
{ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$PY" >/dev/null
  cmake --build "$B" -j "$(nproc)" --target nabla_python 2>&1 | tail -3; } > "$O/build.log" 2>&1
export PYTHONPATH="$PWD/$B/python"
for r in ${KPROF:-nabla:bf16 nabla:tf32 torch:bf16 torch:tf32}; do
  timeout 100 "$PY" tools/device/kprof.py ${r%%:*} ${r#*:} > "$O/${r%%:*}-${r#*:}.log" 2>&1; echo "exit $?" >> "$O/${r%%:*}-${r#*:}.log"
done
timeout 60 "$PY" tools/device/graphgap.py > "$O/graphgap.log" 2>&1
cat "$O"/*.log | grep -v Warn

#!/usr/bin/env bash
# Runs several helper device scripts in one device session (the lead's batching tool).
#   bash tools/device/batch.sh NAME[:SECONDS] ...   (tools/device/NAME.sh, default limit 150 s)
# Builds every target once into build-dev and points each build-dev-NAME at it (a symlink), so
# the scripts' own cmake/build steps are incremental. Logs: $OUT/NAME.log and $OUT/NAME/.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export NABLA_CACHE_DIR=${NABLA_CACHE_DIR:-/tmp/nabla-cache}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
t0=$(date +%s)
cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release -DNB_WERROR=OFF > "$OUT/build.log" 2>&1
cmake --build build-dev -j16 -- -k >> "$OUT/build.log" 2>&1 || echo "BUILD FAILED" >> "$OUT/build.log"
echo "build: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/summary.txt"
for spec in "$@"; do
    name=${spec%%:*}; lim=150
    [ "$spec" != "$name" ] && lim=${spec#*:}
    [ -e "build-dev-$name" ] || ln -s build-dev "build-dev-$name"
    mkdir -p "$OUT/$name"
    t1=$(date +%s)
    OUT="$OUT" timeout "$lim" bash "tools/device/$name.sh" > "$OUT/$name.log" 2>&1
    rc=$?
    echo "$name: rc=$rc $(( $(date +%s) - t1 )) s" | tee -a "$OUT/summary.txt"
done
cd "$OUT" && tar czf /tmp/all.tgz --exclude=all.tgz . && mv /tmp/all.tgz "$OUT/all.tgz"

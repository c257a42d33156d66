#!/bin/sh
# Runs libFuzzer harnesses one after another: run.sh BUILD_DIR SECONDS NAME...  (`make fuzz`,
# `make fuzz-ci`). Each fuzz_NAME runs for SECONDS on a working corpus under
# BUILD_DIR/fuzz-out/NAME/corpus (seeded from tests/fuzz/corpus/NAME; the source tree is never
# written), with tests/fuzz/regressions/NAME (and tests/lang for lang) as read-only seeds and
# tests/fuzz/NAME.dict when there is one. A crash, a sanitizer report, a leak, an input that runs
# over 10 s or over the memory limit fails the run: the log's tail and the reproducer's path are
# printed (replay it with BUILD_DIR/tests/fuzz/fuzz_NAME FILE). Exit 1 when any harness failed.
set -u
build=$1
secs=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
fail=0
for name in "$@"; do
    bin=$build/tests/fuzz/fuzz_$name
    out=$build/fuzz-out/$name
    if [ ! -x "$bin" ]; then
        echo "fuzz_$name: $bin not built"
        fail=1
        continue
    fi
    rm -f "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-* "$out"/slow-unit-* "$out/log"
    mkdir -p "$out/corpus"
    cp "$here/corpus/$name"/* "$out/corpus/" 2>/dev/null
    set -- "$out/corpus"
    [ -d "$here/regressions/$name" ] && set -- "$@" "$here/regressions/$name"
    [ "$name" = lang ] && set -- "$@" "$root/tests/lang"
    [ -f "$here/$name.dict" ] && set -- -dict="$here/$name.dict" "$@"
    echo "fuzz_$name: ${secs} s (log: $out/log)"
    "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$out/" "$@" >"$out/log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/log" | tail -n 1)
    found=$(ls "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-* 2>/dev/null)
    if [ "$rc" = 0 ] && [ -z "$found" ]; then
        echo "fuzz_$name: ${execs:-?} executions, no findings; corpus $(ls "$out/corpus" | wc -l) inputs"
    else
        fail=1
        tail -n 60 "$out/log"
        echo "fuzz_$name: FAILED (exit $rc) after ${execs:-?} executions"
        for f in $found; do echo "  reproducer: $f   (replay: $bin $f)"; done
    fi
done
exit $fail

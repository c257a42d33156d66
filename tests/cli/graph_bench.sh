#!/bin/sh
# `nabla graph bench`: usage errors (exit 2), a bad --out (exit 1), and a tiny CPU run (sizes 32,
# depth 4, 1 sample) whose table has the header and a line per point with the cpu, recorded,
# compiled and compiled_replay rows timed (outputs checked against the cpu row's by the bench
# itself), and whose two plots are PNG files.
NABLA="$1"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nabla graph.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/checks.sh"
check help 0 "$NABLA" graph bench --help && contains help "usage: nabla graph bench"
check in-usage 0 "$NABLA" --help && contains in-usage "graph"
check no-sub 2 "$NABLA" graph
check bad-sub 2 "$NABLA" graph fly && contains bad-sub "unknown sub-command 'fly'"
check bad-opt 2 "$NABLA" graph bench --frob 1 && contains bad-opt "unknown option '--frob'"
check no-value 2 "$NABLA" graph bench --sizes && contains no-value "--sizes needs a value"
check bad-sizes 2 "$NABLA" graph bench --sizes 32,x && contains bad-sizes "--sizes '32,x'"
check zero-size 2 "$NABLA" graph bench --sizes 0 && contains zero-size "--sizes '0'"
check depth-1 2 "$NABLA" graph bench --depth 1 && contains depth-1 "--depth '1' (2 or more)"
check bad-prec 2 "$NABLA" graph bench --precision bf16 && contains bad-prec "--precision 'bf16' (fp32 or tf32)"
check bad-replay 2 "$NABLA" graph bench --replay 0 && contains bad-replay "--replay '0' (1 or more)"
check bad-out 1 "$NABLA" graph bench --device cpu --sizes 32 --depths "" --out "$tmp/none" &&
    contains bad-out "directory '$tmp/none' does not exist"
check bad-device 1 "$NABLA" graph bench --device tpu --sizes 32 --depths "" --out "$tmp" &&
    contains bad-device "tpu"
check tiny 0 "$NABLA" graph bench --device cpu --sizes 32 --depth 4 --depths 2,4 --size 32 --samples 1 --replay 2 --out "$tmp"
contains tiny "sweep    size  depth linears"
contains tiny "immediate_cached"
# one line per point: the size point at depth 4, the depth points at size 32; cpu and graph rows timed
for want in "size       32      4" "depth      32      2" "depth      32      4"; do contains tiny "$want"; done
n=$(printf '%s\n' "$out" | grep -E '^(size|depth) ' | awk '$7 != "-" && $10 != "-" && $11 != "-" && $12 != "-"' | wc -l)
[ "$n" -eq 3 ] && passed=$((passed+1)) || { echo "FAIL tiny: $n of 3 lines have cpu and graph rows timed"; echo "$out"; fail=$((fail+1)); }
for f in graphs_size.png graphs_depth.png; do
    if [ "$(head -c 8 "$tmp/$f" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ]; then
        passed=$((passed+1)); else echo "FAIL tiny: $tmp/$f is not a PNG"; fail=$((fail+1)); fi
done
# an empty sweep writes no plot
rm -f "$tmp"/*.png
check one-sweep 0 "$NABLA" graph bench --device cpu --sizes 32 --depth 3 --depths "" --samples 1 --out "$tmp"
[ -f "$tmp/graphs_size.png" ] && [ ! -f "$tmp/graphs_depth.png" ] && passed=$((passed+1)) ||
    { echo "FAIL one-sweep: expected graphs_size.png only"; ls "$tmp"; fail=$((fail+1)); }
echo "graph_bench.sh: $passed passed, $fail failed"
[ "$fail" -eq 0 ]

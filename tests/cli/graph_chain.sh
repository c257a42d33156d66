#!/bin/sh
# `nabla graph bench-chain`: usage errors (exit 2), a missing module / function (exit 1, named),
# and a tiny CPU run whose table has the immediate and recorded rows timed, equal losses and a
# relative error of 0 (a CPU replay is bit for bit).
NABLA="$1"
MOD="$(cd "$(dirname "$0")/../.." && pwd)/examples/graph_chain.nb"
. "$(dirname "$0")/checks.sh"
check help 0 "$NABLA" graph bench-chain --help && contains help "usage: nabla graph bench-chain"
check graph-help 0 "$NABLA" graph --help && contains graph-help "bench-chain"
check bad-opt 2 "$NABLA" graph bench-chain --frob 1 && contains bad-opt "unknown option '--frob'"
check no-value 2 "$NABLA" graph bench-chain --rows && contains no-value "--rows needs a value"
check zero-rows 2 "$NABLA" graph bench-chain --rows 0 && contains zero-rows "--rows '0'"
check bad-width 2 "$NABLA" graph bench-chain --width x && contains bad-width "--width 'x'"
check bad-prec 2 "$NABLA" graph bench-chain --precision bf16 && contains bad-prec "--precision 'bf16' (fp32 or tf32)"
check no-module 1 "$NABLA" graph bench-chain --device cpu --module /nonexistent/c.nb &&
    contains no-module "/nonexistent/c.nb"
check no-func 1 "$NABLA" graph bench-chain --device cpu --module "$MOD" --act nope --rows 8 --width 4 &&
    contains no-func "nope"
check tiny 0 "$NABLA" graph bench-chain --device cpu --module "$MOD" --rows 33 --width 5 --steps 2 --warmup 1
contains tiny "row                     ms_step  nodes  kernels"
contains tiny "33 rows x 5 features"
im=$(printf '%s\n' "$out" | awk '$1 == "immediate" && $2 != "-" && $3 == 5 {print $5}')
rec=$(printf '%s\n' "$out" | awk '$1 == "recorded" && $2 != "-" && $3 == 5 && $6 == 0 {print $5}')
[ -n "$im" ] && [ "$im" = "$rec" ] && passed=$((passed+1)) ||
    { echo "FAIL tiny: immediate / recorded rows not timed with equal losses"; echo "$out"; fail=$((fail+1)); }
echo "graph_chain.sh: $passed passed, $fail failed"
[ "$fail" -eq 0 ]

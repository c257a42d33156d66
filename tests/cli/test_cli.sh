#!/bin/sh
# CLI behaviour: help, version, devices, and usage errors (exit 2) for unknown commands/flags;
# nabla env; nabla call's usage, integer ranges and JSON output.
NABLA="$1"
. "$(dirname "$0")/checks.sh"
check help 0 "$NABLA" --help && contains help "usage: nabla"
check help-short 0 "$NABLA" -h && contains help-short "devices"
check version 0 "$NABLA" --version && contains version "nabla 0."
check devices 0 "$NABLA" devices && contains devices "cpu "
contains devices-cuda "cuda"
check devices-help 0 "$NABLA" devices --help
check no-command 2 "$NABLA" && contains no-command "missing command"
check unknown-command 2 "$NABLA" frobnicate && contains unknown-command "unknown command 'frobnicate'"
check unknown-flag 2 "$NABLA" --frob && contains unknown-flag "unknown option '--frob'"
check unknown-subflag 2 "$NABLA" devices --frob && contains unknown-subflag "unknown argument '--frob'"
check bad-log-level 2 "$NABLA" --log loud devices && contains bad-log-level "unknown log level 'loud'"
check log-missing 2 "$NABLA" --log
check log-debug 0 "$NABLA" --log debug devices

# nabla env: every registry setting with its value and source; a bad value names itself (exit 1).
check env 0 env NABLA_CACHE_DIR=/some/cache NABLA_LOG= "$NABLA" env && contains env "NABLA_CACHE_DIR=/some/cache  (environment)" \
    && contains env "NABLA_LOG  (unset; default: warn)" && contains env "NABLA_THREADS" && contains env "TMPDIR" \
    && contains env "values: debug | info | warn | error | off"
check env-one 0 env NABLA_THREADS=3 "$NABLA" env NABLA_THREADS && contains env-one "NABLA_THREADS=3  (environment)" \
    && case "$out" in *NABLA_LOG*) echo "FAIL env-one: printed other settings"; fail=$((fail+1));; esac
check env-help 0 "$NABLA" env --help && contains env-help "usage: nabla env"
check env-unknown 2 "$NABLA" env NABLA_FROB && contains env-unknown "'NABLA_FROB' is not a nabla setting"
check env-bad-log 1 env NABLA_LOG=bogus "$NABLA" env NABLA_LOG \
    && contains env-bad-log "\$NABLA_LOG='bogus' is not valid: expected debug | info | warn | error | off"
check env-bad-threads 1 env NABLA_THREADS=0 "$NABLA" env && contains env-bad-threads "\$NABLA_THREADS='0' is not valid" \
    && contains env-bad-threads "NABLA_THREADS=0  (environment, INVALID)"
check env-bad-graph 1 env NABLA_CUDA_GRAPH=yes "$NABLA" env NABLA_CUDA_GRAPH && contains env-bad-graph "expected 0 | 1"
# a bad NABLA_LOG warns once and the command still runs (at the default level)
check bad-env-log 0 env NABLA_LOG=bogus "$NABLA" devices && contains bad-env-log "\$NABLA_LOG='bogus' is not valid"

# nabla call: its own usage without arguments; out-of-range integers are errors naming the range;
# non-finite results print as valid JSON (the strings "Infinity", "-Infinity", "NaN").
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/f.nb" <<'EOF_NB'
int twice(int x) { return x * 2; }
uint utwice(uint x) { return x * 2; }
int64_t wide(int64_t x) { return x; }
float inv(float x) { return 1.0 / x; }
EOF_NB
check call-alone 2 "$NABLA" call && contains call-alone "usage: nabla call FILE FUNC" \
    && case "$out" in *"commands:"*) echo "FAIL call-alone: printed the top-level help"; fail=$((fail+1));; esac
check call-no-func 2 "$NABLA" call "$tmp/f.nb" && contains call-no-func "nabla call --help"
check call-int 0 "$NABLA" call "$tmp/f.nb" twice 21 --device cpu && contains call-int '{"result": 42}'
check call-int-range 1 "$NABLA" call "$tmp/f.nb" twice 1099511627776 --device cpu \
    && contains call-int-range "holds 1099511627776, outside the range of parameter 'x' (int: -2147483648..2147483647)"
check call-int-min 0 "$NABLA" call "$tmp/f.nb" twice --device cpu -- -2147483648
check call-int-below 1 "$NABLA" call "$tmp/f.nb" twice --device cpu -- -2147483649 && contains call-int-below "(int: "
check call-int-list 1 "$NABLA" call "$tmp/f.nb" twice '[1, 2147483648]' --device cpu \
    && contains call-int-list "holds 2147483648 at flat index 1"
check call-uint-neg 1 "$NABLA" call "$tmp/f.nb" utwice --device cpu -- -1 \
    && contains call-uint-neg "holds -1, outside the range of parameter 'x' (uint: 0..4294967295)"
check call-uint-max 0 "$NABLA" call "$tmp/f.nb" utwice 2147483647 --device cpu && contains call-uint-max 4294967294
check call-i64 0 "$NABLA" call "$tmp/f.nb" wide 1099511627776 --device cpu && contains call-i64 1099511627776
check call-i64-over 1 "$NABLA" call "$tmp/f.nb" wide 99999999999999999999 --device cpu \
    && contains call-i64-over "outside the range of 64-bit integers"
check call-inf 0 "$NABLA" call "$tmp/f.nb" inv 0 --device cpu && contains call-inf '{"result": "Infinity"}'
check call-inf-list 0 "$NABLA" call "$tmp/f.nb" inv '[0, "-Infinity", "NaN", 4]' --device cpu \
    && contains call-inf-list '{"result": ["Infinity", -0, "NaN", 0.25]}'
if command -v python3 >/dev/null 2>&1; then
    check call-json-valid 0 sh -c "\"$NABLA\" call \"$tmp/f.nb\" inv '[0, \"-Infinity\"]' --device cpu |
        python3 -c 'import json, sys; json.loads(sys.stdin.read(), parse_constant=lambda c: sys.exit(\"bare \" + c))'"
fi
echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]

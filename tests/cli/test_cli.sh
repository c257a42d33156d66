#!/bin/sh
# CLI behaviour: help, version, devices, and usage errors (exit 2) for unknown commands/flags.
NABLA="$1"
fail=0; passed=0
check() { # check NAME EXPECTED_RC CMD... ; output in $out
    name=$1; want=$2; shift 2
    out=$("$@" 2>&1); rc=$?
    if [ "$rc" -ne "$want" ]; then echo "FAIL $name: exit $rc, expected $want"; echo "$out"; fail=$((fail+1)); return 1; fi
    passed=$((passed+1)); return 0
}
contains() { # contains NAME TEXT
    case "$out" in *"$2"*) passed=$((passed+1));; *) echo "FAIL $1: output lacks '$2'"; echo "$out"; fail=$((fail+1));; esac
}
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
echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]

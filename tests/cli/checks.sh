# The CLI test scripts' helpers (sourced: . "$(dirname "$0")/checks.sh"): check runs a command and
# compares its exit status, contains looks for text in its output; both count into passed / fail.
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

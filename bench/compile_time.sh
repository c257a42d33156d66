#!/bin/sh
# Compile-time scaling of the kernel-language front end (issue #21): generates
#   stmts N   one [Differentiable] straight-line function of N statements -> nabla emit --mode bwd
#   funcs N   N functions, each calling the previous one                  -> nabla check
#   locals N  one function with N locals, each reading a parameter       -> nabla check
# and prints seconds per N, so the scaling is visible (near-linear: time/N roughly constant).
#
#   usage: bench/compile_time.sh [NABLA_BINARY] [--quick]
# (default binary: build/nabla; --quick: smaller sizes)
set -eu
nabla=build/nabla
quick=0
for a in "$@"; do
    case $a in
    --quick) quick=1 ;;
    *) nabla=$a ;;
    esac
done
[ -x "$nabla" ] || { echo "compile_time.sh: no nabla binary at $nabla (pass its path)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

gen() { # KIND N
    case $1 in
    stmts) awk -v n="$2" 'BEGIN{print "[Differentiable]\nfloat f(float x, float y)\n{\n    float a0 = x * y;\n    float a1 = a0 + y;";
        for (i = 2; i < n; i++) printf "    float a%d = a%d * 1.0001 + sin(a%d) * x;\n", i, i - 1, i - 2;
        printf "    return a%d;\n}\n", n - 1}' ;;
    funcs) awk -v n="$2" 'BEGIN{print "float f0(float x) { return x + 1.0; }";
        for (i = 1; i < n; i++) printf "float f%d(float x) { return f%d(x) * 0.5 + %d.0; }\n", i, i - 1, i % 7}' ;;
    locals) awk -v n="$2" 'BEGIN{print "float g(float x)\n{\n    float v0 = x;";
        for (i = 1; i < n; i++) printf "    float v%d = v%d + x;\n", i, i - 1;
        printf "    return v%d;\n}\n", n - 1}' ;;
    esac
}

now() { date +%s.%N; }

run() { # KIND N COMMAND...
    kind=$1 n=$2
    shift 2
    gen "$kind" "$n" >"$tmp/$kind$n.nb"
    t0=$(now)
    if ! "$@" "$tmp/$kind$n.nb" >/dev/null 2>"$tmp/err"; then
        echo "compile_time.sh: $kind $n failed:" >&2
        head -5 "$tmp/err" >&2
        exit 1
    fi
    t1=$(now)
    awk -v k="$kind" -v n="$n" -v a="$t0" -v b="$t1" -v c="$*" \
        'BEGIN{s = b - a; printf "%-7s %8d  %8.3f s  %8.2f us/unit   %s\n", k, n, s, s * 1e6 / n, c}'
}

emit_bwd() { "$nabla" emit "$1" --mode bwd --entry f; }

if [ $quick = 1 ]; then
    S="500 1000 2000" F="5000 10000 20000" L="5000 10000 20000"
else
    S="2500 5000 10000 20000" F="12500 25000 50000 100000" L="12500 25000 50000"
fi
printf "%-7s %8s  %10s  %14s   %s\n" kind N time per-unit command
for n in $S; do run stmts "$n" emit_bwd; done
for n in $F; do run funcs "$n" "$nabla" check; done
for n in $L; do run locals "$n" "$nabla" check; done

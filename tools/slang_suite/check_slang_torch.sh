#!/bin/sh
# `nabla check` of slang-torch's 23 .slang files (tests/ and examples/), with the defines their
# Python passes to slangtorch.loadModule, printing PASS/FAIL per file and a total.
#
#   tools/slang_suite/check_slang_torch.sh DIR [NABLA]
#
# DIR holds slang-torch's tests/ and examples/ trees (a checkout, or copies of the .slang files in
# the same layout); NABLA defaults to build/nabla. Nothing is copied into this repo. Set
# VERBOSE=1 to print the diagnostics of failing files.
#
# Defines (from the repository's Python):
#   examples/bezier2d/bezier.slang              NUM_CTRL_PTS=20 DIM=2  (bezier_curvefit.py)
#   examples/inline-mlp-example/image-model.slang NUM_THREADS_PER_BLOCK=256 WARP_SIZE=32
#                                               (image_model.py: 32*8*1 threads per block)
#   examples/inline-mlp-example/inline-mlp.slang  the same: Python never loads it alone, only
#                                               through image-model.slang's import, with those
#                                               defines (it reads WARP_SIZE at its top)
#   tests/multiply.slang                        FACTOR=2.0  (test.py)
# tests/multiply_template.slang, tests/imported-module.slang and tests/import-module.slang are
# templates: test.py replaces the text %FACTOR% with 2.0 and loads copies from a temporary
# directory; so does this script.
set -u
dir=${1:?usage: check_slang_torch.sh DIR [NABLA]}
here=$(cd "$(dirname "$0")" && pwd)
nabla=${2:-$here/../../build/nabla}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

pass=0
fail=0
check() { # check REL [DEFINE...]
	rel=$1
	shift
	file=$dir/$rel
	if [ ! -f "$file" ]; then
		echo "MISSING $rel"
		fail=$((fail + 1))
		return
	fi
	case $rel in
	tests/multiply_template.slang | tests/imported-module.slang | tests/import-module.slang)
		mkdir -p "$tmp/tests"
		for t in multiply_template imported-module import-module; do
			[ -f "$dir/tests/$t.slang" ] &&
				sed 's/%FACTOR%/2.0/g' "$dir/tests/$t.slang" >"$tmp/tests/$t.slang"
		done
		file=$tmp/$rel
		;;
	esac
	defs=
	for d in "$@"; do defs="$defs -D $d"; done
	# shellcheck disable=SC2086
	if out=$("$nabla" check $defs -I "$(dirname "$file")" "$file" 2>&1); then
		echo "PASS    $rel"
		pass=$((pass + 1))
	else
		first=$(printf '%s\n' "$out" | grep -m1 -E 'error|unknown|usage' | sed "s|^$tmp/||; s|^$dir/||")
		echo "FAIL    $rel: $first"
		[ "${VERBOSE:-0}" = 1 ] && printf '%s\n' "$out" | sed 's/^/        /'
		fail=$((fail + 1))
	fi
}

check examples/bezier2d/bezier.slang NUM_CTRL_PTS=20 DIM=2
check examples/brdf-appearance-optimize-example/BRDF.slang
check examples/brdf-appearance-optimize-example/lightkernel.slang
check examples/fwd-rasterizer-example/rasterizer2d.slang
check examples/hard-rasterizer-example/hard-rasterizer2d.slang
check examples/hard-rasterizer-example/unittest_bindings.slang
check examples/inline-mlp-example/image-model.slang NUM_THREADS_PER_BLOCK=256 WARP_SIZE=32
check examples/inline-mlp-example/inline-mlp.slang NUM_THREADS_PER_BLOCK=256 WARP_SIZE=32
check examples/soft-rasterizer-example/soft-rasterizer2d.slang
check tests/addarrays.slang
check tests/autobind-multiply-struct.slang
check tests/autobind-square-diff.slang
check tests/autobind-square-half.slang
check tests/autobind-square.slang
check tests/builtin-type-input.slang
check tests/copy.slang
check tests/cuda-intrinsic-binding.slang
check tests/import-module.slang
check tests/imported-module.slang
check tests/multiply.slang FACTOR=2.0
check tests/multiply_half.slang
check tests/multiply_template.slang
check tests/smoke.slang
echo "slang-torch files: $((pass + fail)), pass $pass, fail $fail"

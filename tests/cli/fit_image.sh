#!/bin/sh
# `nabla fit-image`: usage errors (exit 2), bad files (exit 1, messages naming the cause), and a
# short CPU fit whose PSNR must rise above a threshold: on ../shared/data/astronaut.png (beside
# the checkout) when it exists, else on the built-in procedural image.
NABLA="$1"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nabla fit image.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/checks.sh"
psnr_of() { # the number after "final PSNR:" in $out
    printf '%s\n' "$out" | sed -n 's/^final PSNR: \([0-9.]*\) dB$/\1/p'
}
above() { # above NAME VALUE THRESHOLD
    if [ -n "$2" ] && awk "BEGIN { exit !($2 > $3) }"; then passed=$((passed+1)); else
        echo "FAIL $1: PSNR '$2' not above $3"; echo "$out"; fail=$((fail+1)); fi
}

check help 0 "$NABLA" fit-image --help && contains help "usage: nabla fit-image"
check in-usage 0 "$NABLA" --help && contains in-usage "fit-image"
check unknown-flag 2 "$NABLA" fit-image --frob && contains unknown-flag "unknown argument '--frob'"
check steps-zero 2 "$NABLA" fit-image --steps 0 && contains steps-zero "--steps '0'"
check steps-text 2 "$NABLA" fit-image --steps many && contains steps-text "--steps 'many'"
check batch-zero 2 "$NABLA" fit-image --batch 0 && contains batch-zero "--batch '0'"
check batch-absurd 2 "$NABLA" fit-image --batch 99999999999 && contains batch-absurd "1..16777216"
check size-one 2 "$NABLA" fit-image --size 1 && contains size-one "--size '1'"
check lr-neg 2 "$NABLA" fit-image --lr -1 && contains lr-neg "--lr '-1'"
check no-value 2 "$NABLA" fit-image --steps && contains no-value "--steps needs a value"
check model-bad 2 "$NABLA" fit-image --model mlp && contains model-bad "unknown model 'mlp'"
check sampling-bad 2 "$NABLA" fit-image --sampling sobol && contains sampling-bad "unknown sampling 'sobol'"
check loss-bad 2 "$NABLA" fit-image --loss l3 && contains loss-bad "unknown loss 'l3'"
check grid-loss 2 "$NABLA" fit-image --model grid --loss l1 && contains grid-loss "--loss l1 is for --model hash"
check grid-sampling 2 "$NABLA" fit-image --model grid --sampling stratified &&
    contains grid-sampling "--sampling stratified is for --model hash"
check eval-range 2 "$NABLA" fit-image --eval-every 0 && contains eval-range "1..10000000"
check seed-range 2 "$NABLA" fit-image --seed -1 && contains seed-range "0..9223372036854775807"
# the output path is checked before training (exit 1 at once, naming the directory)
check out-dir 1 "$NABLA" fit-image --device cpu --steps 10000000 --out "$tmp/none/x.png" &&
    contains out-dir "--out '$tmp/none/x.png': directory '$tmp/none' does not exist"
check out-dir-grid 1 "$NABLA" fit-image --model grid --device cpu --steps 10000000 --out "$tmp/none/x.png" &&
    contains out-dir-grid "directory '$tmp/none' does not exist"
check two-images 2 "$NABLA" fit-image a.png b.png && contains two-images "more than one image"
check device-bad 2 "$NABLA" fit-image --device frob && contains device-bad "frob"
check model-grid 0 "$NABLA" fit-image --model grid --device cpu --size 32 --steps 20 --batch 1024 --no-out &&
    contains model-grid "dense grid 15246 + MLP" && above model-grid "$(psnr_of)" 11
check missing 1 "$NABLA" fit-image "$tmp/missing.png" --device cpu && contains missing "cannot open '$tmp/missing.png'"
printf 'GIF89a not a png' > "$tmp/fake.png"
check not-png 1 "$NABLA" fit-image "$tmp/fake.png" --device cpu && contains not-png "is not a PNG file"
# A real PNG cut short: make one with fit-image itself, then truncate it.
if check tiny-fit 0 "$NABLA" fit-image --device cpu --size 16 --steps 2 --batch 64 --out "$tmp/tiny.png"; then
    contains tiny-summary "mean ms/step"
    head -c 60 "$tmp/tiny.png" > "$tmp/cut.png"
    check truncated 1 "$NABLA" fit-image "$tmp/cut.png" --device cpu && contains truncated "cut.png"
fi
check unwritable 1 "$NABLA" fit-image --device cpu --size 16 --steps 1 --batch 64 --out "$tmp/no/such/dir/x.png" &&
    contains unwritable "directory '$tmp/no/such/dir' does not exist"

# Learning: the PSNR after a short CPU fit must clear a threshold.
ASTRO="$ROOT/../shared/data/astronaut.png"
if [ -f "$ASTRO" ]; then
    check fit-astronaut 0 "$NABLA" fit-image "$ASTRO" --device cpu --steps 40 --batch 2048 --out "$tmp/a.png"
    above fit-astronaut "$(psnr_of)" 18
    [ -s "$tmp/a.png" ] && passed=$((passed+1)) || { echo "FAIL fit-astronaut wrote no image"; fail=$((fail+1)); }
else
    echo "note: $ASTRO not found; fitting the procedural image only"
fi
check fit-procedural 0 "$NABLA" fit-image --device cpu --size 64 --steps 40 --batch 1024 --eval-every 20 --out "$tmp/p.png"
above fit-procedural "$(psnr_of)" 14
contains fit-curve "eval step 20 psnr"
echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]

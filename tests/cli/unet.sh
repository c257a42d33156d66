#!/bin/sh
# `nabla unet`: usage and config errors (exit 2), missing data / checkpoint problems (exit 1, messages
# naming the cause), and a tiny CPU train -> checkpoint -> sample -> PNG round trip.
NABLA="$1"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nabla unet.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/checks.sh"
TINY="--data synthetic --image-size 16 --channels 16 --mult 1,2 --res-blocks 1 --attn 8 --head-channels 16 --groups 8 --no-progress"

check help 0 "$NABLA" unet --help && contains help "usage: nabla unet train"
check in-usage 0 "$NABLA" --help && contains in-usage "unet"
check no-sub 2 "$NABLA" unet && contains no-sub "missing sub-command"
check bad-sub 2 "$NABLA" unet fly && contains bad-sub "unknown sub-command 'fly'"
check unknown-flag 2 "$NABLA" unet train --frob && contains unknown-flag "unknown argument '--frob'"
check no-value 2 "$NABLA" unet train --steps && contains no-value "--steps needs a value"
check steps-zero 2 "$NABLA" unet train --steps 0 && contains steps-zero "bad value for --steps: '0'"
check mult-bad 2 "$NABLA" unet train --mult 1,x && contains mult-bad "bad value for --mult: '1,x'"
check lr-neg 2 "$NABLA" unet train --lr -1 && contains lr-neg "bad value for --lr"
check sampler-bad 2 "$NABLA" unet sample --sampler euler && contains sampler-bad "unknown sampler 'euler'"
check precision-bad 2 "$NABLA" unet train --precision fp8 && contains precision-bad "unknown precision 'fp8'"
check precision-bf16 1 "$NABLA" unet train $TINY --device cpu --precision bf16 &&
    contains precision-bf16 "--precision bf16 needs a CUDA device"
check bad-device 2 "$NABLA" unet train $TINY --device tpu && contains bad-device "unknown device 'tpu' (auto, cpu or cuda[:N])"
check bad-device-n 2 "$NABLA" unet bench $TINY --device cuda:x && contains bad-device-n "unknown device 'cuda:x'"
# --device cuda: trains on a GPU when there is one, else fails naming the cause
out=$("$NABLA" unet train $TINY --device cuda --batch 2 --steps 2 --ckpt "$tmp/c.safetensors" 2>&1); rc=$?
if [ "$rc" -eq 0 ]; then contains cuda "device cuda:0"; else
    [ "$rc" -eq 1 ] && passed=$((passed+1)) || { echo "FAIL cuda: exit $rc"; fail=$((fail+1)); }
    contains cuda "nabla unet: device:"; fi
# every numeric flag's error states the allowed range
check batch-huge 2 "$NABLA" unet train --batch 65536 && contains batch-huge "bad value for --batch: '65536' (allowed: an integer in 1..4096)"
check size-huge 2 "$NABLA" unet train --image-size 99999 && contains size-huge "(allowed: an integer in 4..1024)"
check channels-zero 2 "$NABLA" unet train --channels 0 && contains channels-zero "(allowed: an integer in 1..4096)"
check lr-range 2 "$NABLA" unet train --lr 100 && contains lr-range "(allowed: a number in [1e-12, 10])"
check ema-range 2 "$NABLA" unet train --ema 1 && contains ema-range "bad value for --ema: '1' (allowed: a number in [0, "
check n-range 2 "$NABLA" unet sample --n 5000 && contains n-range "(allowed: an integer in 1..1024)"
check seed-neg 2 "$NABLA" unet train --seed -3 && contains seed-neg "(allowed: an integer in 0..18446744073709551615)"
check inch-two 2 "$NABLA" unet train --in-channels 2 && contains inch-two "(allowed: 1 or 3"
check mult-range 2 "$NABLA" unet train --mult 1,2,3,4,5,6,7,8,9 && contains mult-range "allowed:"
# output paths are checked before the data, the model or the training (exit 1, naming the path)
check ckpt-dir 1 "$NABLA" unet train $TINY --device cpu --steps 100000 --ckpt "$tmp/none/m.safetensors" &&
    contains ckpt-dir "--ckpt '$tmp/none/m.safetensors': directory '$tmp/none' does not exist"
check csv-dir 1 "$NABLA" unet train $TINY --device cpu --steps 100000 --loss-csv "$tmp/none/l.csv" &&
    contains csv-dir "--loss-csv '$tmp/none/l.csv'"
check png-dir 1 "$NABLA" unet train $TINY --device cpu --steps 100000 --loss-png "$tmp/none/l.png" &&
    contains png-dir "--loss-png '$tmp/none/l.png'"
# a 40-byte checkpoint with a repeated "dtype" key once aborted the process (double free): now an error
DATA="$(dirname "$0")/../data"
check ckpt-dup-key 1 "$NABLA" unet sample --ckpt "$DATA/st_dup_dtype.safetensors" --out "$tmp/g.png" &&
    contains ckpt-dup-key "dtype"
check sample-dir 1 "$NABLA" unet sample --ckpt "$tmp/missing.safetensors" --out "$tmp/none/g.png" &&
    contains sample-dir "--out '$tmp/none/g.png'"
check log-every 2 "$NABLA" unet train --log-every 0 && contains log-every "bad value for --log-every: '0'"
check no-fm-dir 1 "$NABLA" unet train --data "fashion-mnist:$tmp/nofm" --steps 1 &&
    contains no-fm-dir "install Debian's dataset-fashion-mnist package" && contains no-fm-dir "$tmp/nofm"
check groups 2 "$NABLA" unet train --data synthetic --channels 48 && contains groups "not divisible by 32 GroupNorm groups"
check attn-res 2 "$NABLA" unet train --data synthetic --attn 12 && contains attn-res "attention resolution 12 is not in the pyramid (64,32,16,8)"
check no-fm 1 env NABLA_FASHION_MNIST_DIR="$tmp/nofm" "$NABLA" unet train --data fashion-mnist --steps 1 &&
    contains no-fm "install Debian's dataset-fashion-mnist package"
# fashion-mnist:DIR with a hand-made IDX file of 2 blank 28x28 images (uncompressed)
mkdir -p "$tmp/fm"
{ printf '\000\000\010\003\000\000\000\002\000\000\000\034\000\000\000\034'; head -c 1568 /dev/zero; } > "$tmp/fm/train-images-idx3-ubyte"
check fm-dir 0 "$NABLA" unet train --device cpu --data "fashion-mnist:$tmp/fm" --image-size 16 --channels 16 --mult 1,2 \
    --res-blocks 1 --attn none --groups 8 --batch 2 --steps 1 --no-progress --ckpt "$tmp/fm.safetensors" &&
    contains fm-dir "16x16x1" && contains fm-dir "(2 images)"
check no-dir 1 "$NABLA" unet train --data "$tmp/nope" --steps 1 && contains no-dir "unknown data set"

# train -> checkpoint -> sample -> PNG
if check train 0 "$NABLA" unet train $TINY --device cpu --batch 4 --steps 4 --lr 1e-3 --ema 0.9 --ckpt "$tmp/m.safetensors" \
        --loss-csv "$tmp/l.csv" --loss-png "$tmp/l.png" --log-every 2 --profile; then
    contains train "165859 parameters"
    contains train "mean ms/step"
    contains train "saved $tmp/m.safetensors"
    contains train "backward"
    [ "$(head -1 "$tmp/l.csv")" = "step,loss,ms" ] && [ "$(wc -l < "$tmp/l.csv")" -eq 3 ] && passed=$((passed+1)) ||
        { echo "FAIL loss csv"; cat "$tmp/l.csv"; fail=$((fail+1)); }
    [ -s "$tmp/l.png" ] && passed=$((passed+1)) || { echo "FAIL loss png"; fail=$((fail+1)); }
    check max-seconds 0 "$NABLA" unet train $TINY --device cpu --batch 2 --steps 1000 --max-seconds 0.001 --log-every 2 \
        --ckpt "$tmp/ms.safetensors" && contains max-seconds "stopped after 2 steps"
    check sample 0 "$NABLA" unet sample --ckpt "$tmp/m.safetensors" --n 5 --steps 4 --out "$tmp/g.png" && contains sample "sampled 5 images"
    [ -s "$tmp/g.png" ] && passed=$((passed+1)) || { echo "FAIL sample wrote no PNG"; fail=$((fail+1)); }
    check precision-sample 1 "$NABLA" unet sample --device cpu --precision tf32 --ckpt "$tmp/m.safetensors" &&
        contains precision-sample "--precision tf32 needs a CUDA device"
    check sample-ddpm 0 "$NABLA" unet sample --ckpt "$tmp/m.safetensors" --n 2 --sampler ddpm --steps 3 --scale 3 --out "$tmp/d.png"
    check scale-bad 2 "$NABLA" unet sample --ckpt "$tmp/m.safetensors" --scale 0 && contains scale-bad "bad value for --scale"
    check sample-steps 1 "$NABLA" unet sample --ckpt "$tmp/m.safetensors" --steps 2000 --out "$tmp/x.png" &&
        contains sample-steps "steps 2000 not in 1..1000"
    head -c 300 "$tmp/m.safetensors" > "$tmp/cut.safetensors"
    check truncated 1 "$NABLA" unet sample --ckpt "$tmp/cut.safetensors" --out "$tmp/x.png" && contains truncated "cut.safetensors"
    check unwritable 1 "$NABLA" unet sample --ckpt "$tmp/m.safetensors" --n 1 --steps 1 --out "$tmp/no/dir/x.png" &&
        contains unwritable "--out '$tmp/no/dir/x.png': directory '$tmp/no/dir' does not exist"
    # the CSV is renamed into place at the end: no temporary file is left beside it
    [ "$(ls -A "$tmp" | grep -c '^\.\?l\.csv.')" -eq 0 ] && passed=$((passed+1)) ||
        { echo "FAIL loss csv temporaries left:"; ls -A "$tmp"; fail=$((fail+1)); }
fi
check no-ckpt 1 "$NABLA" unet sample --ckpt "$tmp/missing.safetensors" && contains no-ckpt "cannot open"
printf 'not a checkpoint at all' > "$tmp/junk.safetensors"
check junk-ckpt 1 "$NABLA" unet sample --ckpt "$tmp/junk.safetensors" && contains junk-ckpt "junk.safetensors"
check bench 0 "$NABLA" unet bench $TINY --device cpu --batch 2 --steps 2 --warmup 1 && contains bench "TFLOP/s" &&
    contains bench "ms/step" && contains bench "FLOPs per step"
echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]

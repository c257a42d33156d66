#!/bin/sh
# `nabla graph dump`: usage errors (exit 2), an unknown model or device (exit 1 naming it), and the
# mlp and unet models recorded, replayed on the CPU and printed as text and DOT.
NABLA="$1"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nabla graph.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/checks.sh"

check in-usage 0 "$NABLA" --help && contains in-usage "graph"
check graph-help 0 "$NABLA" graph --help && contains graph-help "dump"
check no-sub 2 "$NABLA" graph && contains no-sub "usage: nabla graph bench" && contains no-sub "nabla graph dump [options] MODEL"
check bad-sub 2 "$NABLA" graph fly && contains bad-sub "unknown sub-command 'fly' (bench, dump, bench-chain)"
check help 0 "$NABLA" graph dump --help && contains help "usage: nabla graph dump" && contains help "unet"
check no-model 2 "$NABLA" graph dump && contains no-model "missing MODEL"
check two-models 2 "$NABLA" graph dump mlp unet && contains two-models "one MODEL only ('unet' is extra)"
check bad-flag 2 "$NABLA" graph dump --frob mlp && contains bad-flag "unknown option '--frob'"
check no-value 2 "$NABLA" graph dump mlp --dot && contains no-value "--dot needs a value"
check bad-seed 2 "$NABLA" graph dump mlp --seed x && contains bad-seed "--seed 'x'"
check bad-model 1 "$NABLA" graph dump resnet && contains bad-model "graph model 'resnet': unknown (mlp, unet)"
check bad-device 1 "$NABLA" graph dump mlp --device tpu && contains bad-device "nabla graph dump: device:"
check bad-dot 1 "$NABLA" graph dump mlp --dot "$tmp/no/such/dir/g.dot" && contains bad-dot "cannot write"

check mlp 0 "$NABLA" graph dump mlp --dot "$tmp/mlp.dot" &&
    contains mlp "graph: 8 nodes, 2 inputs, 0 constants, 2 outputs, forward + backward" &&
    contains mlp "node 0 linear: " && contains mlp "node 1 relu:" && contains mlp "node 7 mse:" && contains mlp "fwd " &&
    contains mlp "memory: planned peak"
head -c 21 "$tmp/mlp.dot" | grep -q "digraph nabla_graph {" && passed=$((passed+1)) ||
    { echo "FAIL mlp.dot: not a DOT file"; fail=$((fail+1)); }
check mlp-norun 0 "$NABLA" graph dump mlp --no-run && contains mlp-norun "node 2 linear: "
check mlp-compiled 0 "$NABLA" graph dump mlp --compile && contains mlp-compiled "compiled: 0 dead, 0 duplicate, 0 folded, 1 linear+relu, 1 fused nodes replacing 3" &&
    contains mlp-compiled "linear_relu" && contains mlp-compiled "graph: 5 nodes" && contains mlp-compiled "memory: planned peak"
# the UNet: the timestep embedding is a constant, attention and group norms are nodes
check unet 0 "$NABLA" graph dump unet --seed 3 && contains unet "1 constants" &&
    contains unet "attention" && contains unet "group_norm" && contains unet "concat" && contains unet "mse"

echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]

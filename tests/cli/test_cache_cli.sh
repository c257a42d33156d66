#!/bin/sh
# `nabla cache dir|ls|clear` on a throw-away cache directory (with a space in its path).
NABLA="$1"
root=$(mktemp -d "${TMPDIR:-/tmp}/nabla cache cli.XXXXXX") || exit 1
trap 'rm -rf "$root"' EXIT
export NABLA_CACHE_DIR="$root/cache"
. "$(dirname "$0")/checks.sh"
check dir 0 "$NABLA" cache dir && contains dir "$root/cache"
check ls-missing 0 "$NABLA" cache ls && contains ls-missing "0 kernels"
mkdir -p "$root/cache"
key=0123456789abcdef0123456789abcdef
printf 'not a shared object' > "$root/cache/$key.so"
printf 'int x;\n' > "$root/cache/$key.c"
printf 'user file\n' > "$root/cache/keep-me.txt"
check ls 0 "$NABLA" cache ls && contains ls "$key" && contains ls-corrupt "CORRUPT" && contains ls-count "1 kernel,"
check clear 0 "$NABLA" cache clear && contains clear "removed 2 files"
[ -f "$root/cache/keep-me.txt" ] && passed=$((passed+1)) || { echo "FAIL clear deleted a user file"; fail=$((fail+1)); }
[ ! -e "$root/cache/$key.so" ] && passed=$((passed+1)) || { echo "FAIL clear left the entry"; fail=$((fail+1)); }
check ls-empty 0 "$NABLA" cache ls && contains ls-empty "0 kernels"
# A FIFO in place of an entry: ls and clear do not block on it (timeout turns a hang into exit 124).
if mkfifo "$root/cache/$key.so" 2>/dev/null; then
    check ls-fifo 0 timeout 30 "$NABLA" cache ls && contains ls-fifo "CORRUPT" && contains ls-fifo-count "1 kernel,"
    check clear-fifo 0 timeout 30 "$NABLA" cache clear && contains clear-fifo "removed 1 file"
    [ ! -e "$root/cache/$key.so" ] && passed=$((passed+1)) || { echo "FAIL clear left the FIFO"; fail=$((fail+1)); }
fi
check help 0 "$NABLA" cache --help && contains help "usage: nabla cache"
check in-usage 0 "$NABLA" --help && contains in-usage "cache"
check missing-sub 2 "$NABLA" cache && contains missing-sub "missing sub-command"
check unknown-sub 2 "$NABLA" cache frob && contains unknown-sub "unknown sub-command 'frob'"
check extra-arg 2 "$NABLA" cache ls --frob && contains extra-arg "unknown argument '--frob'"
echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]

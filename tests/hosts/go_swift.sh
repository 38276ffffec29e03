#!/usr/bin/env bash
# The Go and Swift hosts of the cross-host state test on their own (tests/hosts/README.md):
# write_state.c (the C host's write step) prefills the tiny Llama and writes DIR; each host's
# check mode must reproduce next.f32 bit for bit and greedy.txt; then each host's chain mode
# restores the other's snapshot (and its own) and continues with greedy.txt's tokens.
# PACKLM_SKIP_HOSTS=go or =swift skips that host, saying so; CI never sets it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$here/skip.sh"
lib="$root/target/release"
[ -f "$lib/libpacklm.so" ] || { echo "build first: make build" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$root/target/hosts"

hosts=()
for h in go swift; do
  (skip_host "$h"; exit 1) && continue
  hosts+=("$h")
done

cc -std=c11 -Wall -Wextra -Werror -I"$root/include" "$here/write_state.c" -L"$lib" -lpacklm \
  -Wl,-rpath,"$lib" -o "$tmp/write_state"
"$tmp/write_state" "$root/tests/fixtures/tiny/llama" "$tmp"

for h in "${hosts[@]}"; do
  echo "== $h check"
  "$here/${h}_host.sh" check "$tmp"
done
for to in "${hosts[@]}"; do
  for from in "${hosts[@]}"; do
    echo "== $to chain from $from"
    "$here/${to}_host.sh" chain "$tmp" "$from"
  done
done
# The comparisons can fail: one logit's lowest bit flipped, or one greedy id changed, must be
# reported as a failure by every host.
mkdir -p "$tmp/bad"
cp "$tmp"/state*.bin "$tmp/bad/"
python3 - "$tmp" <<'PY'
import struct, sys
d = sys.argv[1]
raw = bytearray(open(d + "/next.f32", "rb").read())
(bits,) = struct.unpack_from("<I", raw, 40)
struct.pack_into("<I", raw, 40, bits ^ 1)
open(d + "/bad/next.f32", "wb").write(raw)
ids = open(d + "/greedy.txt").read().split()
ids[-1] = str((int(ids[-1]) + 1) % 300)
open(d + "/bad/greedy.txt", "w").write("\n".join(ids) + "\n")
PY
for h in "${hosts[@]}"; do
  if "$here/${h}_host.sh" check "$tmp/bad" >/dev/null 2>&1; then
    echo "FAIL: the $h host passed a next.f32 with a flipped bit" >&2; exit 1
  fi
  if "$here/${h}_host.sh" chain "$tmp/bad" "$h" >/dev/null 2>&1; then
    echo "FAIL: the $h host passed a changed greedy.txt" >&2; exit 1
  fi
done
echo "go_swift.sh: ${hosts[*]:-no host} passed (and refused a changed next.f32 and greedy.txt)"

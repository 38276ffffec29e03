#!/usr/bin/env bash
# The Go and Swift hosts of the cross-host state test (tests/hosts/README.md), with the C host
# that writes the state: run.sh with PACKLM_HOSTS="c go swift" (check, then every host chains
# from every host). Then checks that the comparisons can fail: given a next.f32 with one bit
# flipped, or a greedy.txt with one id changed, each of the two hosts must exit non-zero.
# PACKLM_SKIP_HOSTS=go or =swift leaves a host out, saying so; CI never sets it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$here/skip.sh"
lib="$root/target/release"
[ -f "$lib/libpacklm.so" ] || { echo "build first: make build" >&2; exit 1; }

hosts=()
for h in go swift; do
  (skip_host "$h"; exit 1) && continue
  hosts+=("$h")
done
PACKLM_HOSTS="c ${hosts[*]:-}" PACKLM_SKIP_HOSTS="" "$here/run.sh"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model="$root/tests/fixtures/tiny/llama"
cc -std=c11 -Wall -Wextra -Werror -I"$root/include" "$here/c_host.c" -L"$lib" -lpacklm \
  -Wl,-rpath,"$lib" -o "$tmp/c_host"
mkdir -p "$tmp/state" "$tmp/bad"
"$tmp/c_host" write "$model" "$tmp/state" >/dev/null
cp "$tmp/state/state.bin" "$tmp/bad/"
python3 - "$tmp" <<'PY'
import struct, sys
d = sys.argv[1]
raw = bytearray(open(d + "/state/next.f32", "rb").read())
(bits,) = struct.unpack_from("<I", raw, 40)
struct.pack_into("<I", raw, 40, bits ^ 1)
open(d + "/bad/next.f32", "wb").write(raw)
ids = open(d + "/state/greedy.txt").read().split()
ids[-1] = str((int(ids[-1]) + 1) % 300)
open(d + "/bad/greedy.txt", "w").write("\n".join(ids) + "\n")
PY
for h in "${hosts[@]}"; do
  if "$here/${h}_host" check "$model" "$tmp/bad" >/dev/null 2>&1; then
    echo "FAIL: the $h host passed a next.f32 with one bit flipped" >&2; exit 1
  fi
  # state_H.bin (written by the failed check) is still right; only greedy.txt is wrong.
  if "$here/${h}_host" chain "$model" "$tmp/bad" "$h" >/dev/null 2>&1; then
    echo "FAIL: the $h host passed a greedy.txt with one id changed" >&2; exit 1
  fi
done
echo "go_swift.sh: ${hosts[*]:-no host} passed, and refused a changed next.f32 and greedy.txt"

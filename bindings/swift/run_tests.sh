#!/usr/bin/env bash
# make swift-test: `swift test` (XCTest) of bindings/swift inside the Debian 13 root of
# scripts/swift_root.sh (built first when absent; cached outside the repository), linked with
# include/ and target/release. PACKLM_SKIP_HOSTS=swift skips, saying so; CI never sets it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/hosts/skip.sh"
skip_host swift
lib="$root/target/release"
[ -f "$lib/libpacklm.so" ] || { echo "build first: make build" >&2; exit 1; }
"$root/scripts/swift_root.sh" build
# models/ may be a link to a folder elsewhere: bind that folder too, so the link resolves inside.
dirs=$root
[ ! -d "$root/models" ] || dirs="$dirs:$(cd "$root/models" && pwd -P)"
"$root/scripts/swift_root.sh" run "$dirs" sh -c \
  'swift test --package-path bindings/swift -Xcc -I"$0/include" -Xlinker -L"$1" -Xlinker -rpath -Xlinker "$1"' \
  "$root" "$lib"
echo "swift-test: passed"

#!/usr/bin/env bash
# The Swift host's command line for the cross-host test: swift_host.sh check DIR | chain DIR FROM.
# Builds the PackLMHost product of bindings/swift inside the Debian 13 root of
# scripts/swift_root.sh (which must exist) and runs it there, with the repository and DIR bound
# at their own paths.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 2 ] || { echo "usage: swift_host.sh check DIR | chain DIR FROM" >&2; exit 2; }
dir=$(cd "$2" && pwd -P)
lib="$root/target/release"
"$root/scripts/swift_root.sh" run "$root:$dir" sh -c '
  swift build --package-path bindings/swift --product packlm-swift-host -Xcc -I"$0/include" \
    -Xlinker -L"$1" -Xlinker -rpath -Xlinker "$1" >/dev/null 2>"$0/target/hosts/swift_build.log" ||
    { cat "$0/target/hosts/swift_build.log" >&2; exit 1; }
  shift
  exec "$(swift build --package-path bindings/swift --show-bin-path)/packlm-swift-host" "$@"' \
  "$root" "$lib" "$1" "$dir" "${@:3}"

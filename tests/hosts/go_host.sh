#!/usr/bin/env bash
# The Go host's command line for the cross-host test: go_host.sh check DIR | chain DIR FROM.
# Builds tests/hosts/go against include/ and target/release (go's build cache makes a rebuild
# cheap) into target/hosts/go_host, then runs it from the repository root.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
command -v go >/dev/null || { echo "go_host.sh: no go toolchain (apt-get install golang-go)" >&2; exit 1; }
mkdir -p "$root/target/hosts"
(cd "$root/tests/hosts/go" &&
  CGO_CFLAGS="-I$root/include" CGO_LDFLAGS="-L$root/target/release -Wl,-rpath,$root/target/release" \
    go build -o "$root/target/hosts/go_host" .)
cd "$root"
exec "$root/target/hosts/go_host" "$@"

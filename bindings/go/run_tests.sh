#!/usr/bin/env bash
# make go-test: go vet and go test of bindings/go (and the hosts' module), first with the library
# found through CGO_CFLAGS/CGO_LDFLAGS, then through pkg-config (-tags packlm_pkgconfig) with a
# packlm.pc describing include/ and target/release; then runs the chat example
# on SmolLM2 when models/ has it.
# A missing go toolchain fails (apt-get install golang-go); PACKLM_SKIP_HOSTS=go skips, saying so.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/hosts/skip.sh"
skip_host go
command -v go >/dev/null || { echo "go-test: no go toolchain (apt-get install golang-go)" >&2; exit 1; }
lib="$root/target/release"
[ -f "$lib/libpacklm.so" ] || { echo "build first: make build" >&2; exit 1; }
cd "$root/bindings/go"
[ -z "$(gofmt -l . ../../tests/hosts/go)" ] || { gofmt -l . ../../tests/hosts/go; echo "go-test: run gofmt" >&2; exit 1; }

echo "== CGO_CFLAGS / CGO_LDFLAGS"
export CGO_CFLAGS="-I$root/include" CGO_LDFLAGS="-L$lib -Wl,-rpath,$lib"
go vet ./...
go test ./...
(cd "$root/tests/hosts/go" && go vet ./...)
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -f "$model" ]; then
  out=$(go run ./examples/chat "$model" "What is the capital of France? Answer with one word.")
  echo "examples/chat: $out"
  case "$out" in *Paris*) ;; *) echo "FAIL: the chat example did not answer Paris" >&2; exit 1 ;; esac
else
  go build -o /dev/null ./examples/chat
fi

echo "== pkg-config"
unset CGO_CFLAGS CGO_LDFLAGS
pc=$(mktemp -d)
trap 'rm -rf "$pc"' EXIT
cat > "$pc/packlm.pc" <<PC
includedir=$root/include
libdir=$lib

Name: packlm
Description: decoder-only language models behind a C ABI
Version: $(sed -n 's/^#define PACKLM_VERSION "\(.*\)"$/\1/p' "$root/include/packlm.h")
Cflags: -I\${includedir}
Libs: -L\${libdir} -lpacklm
PC
export PKG_CONFIG_PATH="$pc"
go vet -tags packlm_pkgconfig ./...
LD_LIBRARY_PATH="$lib" go test -count=1 -tags packlm_pkgconfig ./...
echo "go-test: passed"

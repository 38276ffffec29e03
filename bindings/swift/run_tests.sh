#!/usr/bin/env bash
# make swift-test: `swift test` (XCTest) of bindings/swift inside the Debian 13 root of
# scripts/swift_root.sh (built first when absent; cached outside the repository), linked with
# include/ and target/release. PACKLM_SKIP_HOSTS=swift skips, saying so; CI never sets it.
# PACKLM_ONNXRUNTIME and PACKLM_REQUIRE_ONNXRUNTIME reach the tests (NpuTests.swift).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/hosts/skip.sh"
skip_host swift
lib="$root/target/release"
[ -f "$lib/libpacklm.so" ] || { echo "build first: make build" >&2; exit 1; }
"$root/scripts/swift_root.sh" build
# The npu tests' ONNX Runtime (PACKLM_ONNXRUNTIME; make swift-test sets it): the root sees only
# the folders bound into it, and binding the library's own folder could cover one of the root's
# (/usr/lib), so the library is copied under target/ (with any provider library beside it, which
# ONNX Runtime loads from its own folder) and named there. PACKLM_REQUIRE_ONNXRUNTIME passes
# through as it is.
if [ -n "${PACKLM_ONNXRUNTIME:-}" ]; then
  ort=$(readlink -f "$PACKLM_ONNXRUNTIME") && [ -f "$ort" ] ||
    { echo "PACKLM_ONNXRUNTIME=$PACKLM_ONNXRUNTIME is not a file" >&2; exit 1; }
  into="$root/target/swift-onnxruntime"
  rm -rf "$into"
  mkdir -p "$into"
  cp "$ort" "$into/"
  for p in "$(dirname "$ort")"/libonnxruntime_providers_*; do
    [ ! -f "$p" ] || cp "$p" "$into/"
  done
  export PACKLM_ONNXRUNTIME="$into/$(basename "$ort")"
fi
# models/ may be a link to a folder elsewhere: bind that folder too, so the link resolves inside.
dirs=$root
[ ! -d "$root/models" ] || dirs="$dirs:$(cd "$root/models" && pwd -P)"
"$root/scripts/swift_root.sh" run "$dirs" sh -c \
  'set -e
   flags="-Xcc -I$0/include -Xlinker -L$1 -Xlinker -rpath -Xlinker $1"
   swift build --package-path bindings/swift $flags
   swift test --package-path bindings/swift $flags
   model=models/SmolLM2-135M-Instruct.Q4_1.gguf
   if [ -f "$model" ]; then
     out=$("$(swift build --package-path bindings/swift --show-bin-path)/packlm-swift-chat" "$model" \
       "What is the capital of France? Answer with one word.")
     echo "packlm-swift-chat: $out"
     case "$out" in *Paris*) ;; *) echo "FAIL: the chat example did not answer Paris" >&2; exit 1 ;; esac
   fi' \
  "$root" "$lib"
echo "swift-test: passed"

#!/usr/bin/env bash
# Builds tests/cpp/test_hpp.cpp and examples/cpp/chat.cpp with g++ -std=c++17 -Wall -Wextra
# -Werror against include/packlm.hpp and the cdylib, runs the test on the tiny fixture and the
# example on the tiny fixture (any text: the weights are random) and, when present, on SmolLM2
# (required when PACKLM_REQUIRE_MODELS is set).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
lib="$root/target/release"
[ -f "$lib/libpacklm.so" ] || { echo "build first: make build" >&2; exit 1; }
command -v g++ >/dev/null || { echo "FAIL: g++ is missing (apt-get install build-essential)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(-std=c++17 -Wall -Wextra -Werror -I"$root/include" -L"$lib" -lpacklm -Wl,-rpath,"$lib")
g++ "$root/tests/cpp/test_hpp.cpp" "${flags[@]}" -o "$tmp/test_hpp"
"$tmp/test_hpp" "$root/tests/fixtures/tiny/llama"
g++ "$root/examples/cpp/chat.cpp" "${flags[@]}" -o "$tmp/chat"
"$tmp/chat" "$root/tests/fixtures/tiny/llama" "Hi" 4 > "$tmp/chat.out" 2>&1 || { cat "$tmp/chat.out"; echo "FAIL: examples/cpp/chat on the tiny fixture" >&2; exit 1; }
if "$tmp/chat" /nonexistent/pack 2> "$tmp/err.txt"; then echo "FAIL: chat opened a missing pack" >&2; exit 1; fi
grep -q "error 3: .*/nonexistent/pack" "$tmp/err.txt" || { cat "$tmp/err.txt"; echo "FAIL: the example's error lacks the status and path" >&2; exit 1; }
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -f "$model" ]; then
  "$tmp/chat" "$model" "What is the capital of France? Answer with one word." 8 | tee "$tmp/paris.txt"
  grep -q Paris "$tmp/paris.txt" || { echo "FAIL: examples/cpp/chat did not answer Paris" >&2; exit 1; }
elif [ -n "${PACKLM_REQUIRE_MODELS:-}" ]; then
  echo "FAIL: $model is missing and PACKLM_REQUIRE_MODELS is set" >&2; exit 1
else
  echo "note: $model absent; the SmolLM2 answer is not checked (make models)" >&2
fi
echo "cpp-test: ok"

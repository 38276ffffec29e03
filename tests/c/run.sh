#!/usr/bin/env bash
# Builds tests/c/test_api.c with cc against include/packlm.h and the cdylib, prepares bad-input
# files in a temporary folder, and runs it. PACKLM_TEST_RUNNER, when set, is a command the test
# programs run under (make c-valgrind sets it to valgrind).
set -euo pipefail
read -r -a runner <<< "${PACKLM_TEST_RUNNER:-}"
root=$(cd "$(dirname "$0")/../.." && pwd)
lib="$root/target/release"
[ -f "$lib/libpacklm.so" ] || { echo "build first: cargo build --release" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tiny="$root/tests/fixtures/tiny/llama"

# A folder whose config.json does not parse.
mkdir -p "$tmp/bad_config" && cp "$tiny"/* "$tmp/bad_config/" && printf '{"model_type": "llama", ' > "$tmp/bad_config/config.json"
# A folder whose safetensors file is cut in half.
mkdir -p "$tmp/trunc_st" && cp "$tiny"/* "$tmp/trunc_st/"
size=$(stat -c %s "$tiny/model.safetensors")
head -c $((size / 2)) "$tiny/model.safetensors" > "$tmp/trunc_st/model.safetensors"
# A GGUF cut inside its metadata: the real model's first 64 KiB when present, else a header.
gguf="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -f "$gguf" ]; then head -c 65536 "$gguf" > "$tmp/trunc.gguf"; else printf 'GGUF\003\000\000\000\001' > "$tmp/trunc.gguf"; fi

cc -std=c11 -Wall -Wextra -Werror -I"$root/include" -I"$root/tests/c" "$root/tests/c/test_api.c" -L"$lib" -lpacklm -Wl,-rpath,"$lib" -o "$tmp/test_api"
"${runner[@]}" "$tmp/test_api" "$tiny" "$tmp"
cc -std=c11 -Wall -Wextra -Werror -I"$root/include" -I"$root/tests/c" "$root/tests/c/test_state.c" -L"$lib" -lpacklm -Wl,-rpath,"$lib" -o "$tmp/test_state"
# Two processes: the second restores what the first saved.
"${runner[@]}" "$tmp/test_state" write "$root/tests/fixtures/tiny/mistral" "$tmp/state"
"${runner[@]}" "$tmp/test_state" read "$root/tests/fixtures/tiny/mistral" "$tmp/state"

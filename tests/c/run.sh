#!/usr/bin/env bash
# Builds tests/c/test_api.c with cc against include/packlm.h and the cdylib, prepares bad-input
# files in a temporary folder, and runs it. PACKLM_TEST_RUNNER, when set, is a command the test
# programs run under (make c-valgrind sets it to valgrind).
set -euo pipefail
read -r -a runner <<< "${PACKLM_TEST_RUNNER:-}"
root=$(cd "$(dirname "$0")/../.." && pwd)
lib="$root/target/release"
[ -f "$lib/libpacklm.so" ] || { echo "build first: make build" >&2; exit 1; }
# The SONAME follows the header's ABI version, and `make build` put that name beside the library.
abi=$(sed -n 's/^#define PACKLM_ABI_VERSION \([0-9][0-9]*\)$/\1/p' "$root/include/packlm.h")
soname=$(readelf -d "$lib/libpacklm.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libpacklm.so.$abi" ] || { echo "FAIL: SONAME is '$soname', expected libpacklm.so.$abi" >&2; exit 1; }
[ -e "$lib/$soname" ] || { echo "FAIL: $soname is missing beside libpacklm.so: make build" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tiny="$root/tests/fixtures/tiny/llama"

# A folder whose config.json does not parse.
mkdir -p "$tmp/bad_config" && cp "$tiny"/* "$tmp/bad_config/" && printf '{"model_type": "llama", ' > "$tmp/bad_config/config.json"
# A folder whose safetensors file is cut in half.
mkdir -p "$tmp/trunc_st" && cp "$tiny"/* "$tmp/trunc_st/"
size=$(stat -c %s "$tiny/model.safetensors")
head -c $((size / 2)) "$tiny/model.safetensors" > "$tmp/trunc_st/model.safetensors"
# A GGUF cut inside its metadata: the real model's first 64 KiB when present (required when
# PACKLM_REQUIRE_MODELS is set), else a header.
gguf="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -f "$gguf" ]; then head -c 65536 "$gguf" > "$tmp/trunc.gguf"
elif [ -n "${PACKLM_REQUIRE_MODELS:-}" ]; then echo "FAIL: $gguf is missing and PACKLM_REQUIRE_MODELS is set" >&2; exit 1
else echo "note: $gguf absent; a bare GGUF header stands for the truncated file (make models)" >&2; printf 'GGUF\003\000\000\000\001' > "$tmp/trunc.gguf"; fi

cc -std=c11 -Wall -Wextra -Werror -I"$root/include" -I"$root/tests/c" "$root/tests/c/test_api.c" -L"$lib" -lpacklm -Wl,-rpath,"$lib" -lm -o "$tmp/test_api"
needed=$(readelf -d "$tmp/test_api" | sed -n 's/.*(NEEDED).*\[\(libpacklm[^]]*\)\]/\1/p')
[ "$needed" = "$soname" ] || { echo "FAIL: a program linked with -lpacklm needs '$needed', not $soname" >&2; exit 1; }
"${runner[@]}" "$tmp/test_api" "$tiny" "$tmp"
cc -std=c11 -Wall -Wextra -Werror -I"$root/include" -I"$root/tests/c" "$root/tests/c/test_state.c" -L"$lib" -lpacklm -Wl,-rpath,"$lib" -o "$tmp/test_state"
# Two processes: the second restores what the first saved.
"${runner[@]}" "$tmp/test_state" write "$root/tests/fixtures/tiny/mistral" "$tmp/state"
"${runner[@]}" "$tmp/test_state" read "$root/tests/fixtures/tiny/mistral" "$tmp/state"
# One program built against the frozen ABI 1 header and against the current one: same results.
cc -std=c11 -Wall -Wextra -Werror -I"$root/tests/c/abi1" -I"$root/tests/c" "$root/tests/c/test_compat.c" -L"$lib" -lpacklm -Wl,-rpath,"$lib" -o "$tmp/compat_abi1"
cc -std=c11 -Wall -Wextra -Werror -I"$root/include" -I"$root/tests/c" "$root/tests/c/test_compat.c" -L"$lib" -lpacklm -Wl,-rpath,"$lib" -o "$tmp/compat_now"
"${runner[@]}" "$tmp/compat_abi1" "$tiny" "$tmp/compat_abi1.out"
"${runner[@]}" "$tmp/compat_now" "$tiny" "$tmp/compat_now.out"
cmp "$tmp/compat_abi1.out" "$tmp/compat_now.out" || { echo "FAIL: an ABI 1 caller's results differ from a current caller's" >&2; exit 1; }
echo "compat: ABI 1 and current callers agree on $(stat -c %s "$tmp/compat_now.out") bytes"
cc -std=c11 -Wall -Wextra -Werror -I"$root/include" -I"$root/tests/c" "$root/tests/c/test_sizes.c" -L"$lib" -lpacklm -Wl,-rpath,"$lib" -o "$tmp/test_sizes"
"${runner[@]}" "$tmp/test_sizes" "$tiny"
cc -std=c11 -Wall -Wextra -Werror -I"$root/include" -I"$root/tests/c" "$root/tests/c/test_precision.c" -L"$lib" -lpacklm -Wl,-rpath,"$lib" -o "$tmp/test_precision"
"${runner[@]}" "$tmp/test_precision" "$tiny"
cc -std=c11 -Wall -Wextra -Werror -I"$root/include" -I"$root/tests/c" "$root/tests/c/test_embed.c" -L"$lib" -lpacklm -Wl,-rpath,"$lib" -lm -o "$tmp/test_embed"
"${runner[@]}" "$tmp/test_embed" "$root/tests/fixtures/tiny"
cc -std=c11 -Wall -Wextra -Werror -I"$root/include" -I"$root/tests/c" "$root/tests/c/test_control_vector.c" -L"$lib" -lpacklm -Wl,-rpath,"$lib" -lm -o "$tmp/test_control_vector"
"${runner[@]}" "$tmp/test_control_vector" "$root/tests/fixtures/tiny"

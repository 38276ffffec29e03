#!/bin/sh
# The llama.cpp API tests: struct layouts against llama.h, then llama-cpp-python 0.3.36's
# public API (its Python sources from the sdist, no llama.cpp build) on libllama.so from
# `make llama`, with the SmolLM2 and Gemma3 GGUFs of models/ (tests/llama/test_llama_cpp.py).
# Without the models it says so and skips them, or fails when PACKLM_REQUIRE_MODELS is set.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
"$root/tests/llama/layout.sh"
cache=$("$root/tests/llama/fetch.sh")
lib=$root/target/release/llama-lib
[ -f "$lib/libllama.so" ] || { echo "FAIL: $lib/libllama.so is missing: run make llama" >&2; exit 1; }
soname=$(objdump -p "$lib/libllama.so" | sed -n 's/^ *SONAME *//p')
[ "$soname" = libllama.so.0 ] || { echo "FAIL: $lib/libllama.so has SONAME '$soname', not libllama.so.0" >&2; exit 1; }
echo "soname: libllama.so.0"
LLAMA_CPP_LIB_PATH=$lib \
PYTHONPATH=$cache/llama_cpp_python-0.3.36:$cache/pydeps \
PACKLM_BIN=$root/target/release/packlm \
  python3 "$root/tests/llama/test_llama_cpp.py" "$root/models"

#!/bin/sh
# The llama.cpp API tests: struct layouts against llama.h, then llama-cpp-python 0.3.36's
# public API (its Python sources from the sdist, no llama.cpp build) on libllama.so from
# `make llama`, with the SmolLM2 and Gemma3 GGUFs of models/ (tests/llama/test_llama_cpp.py);
# seeded sampler chains draw for draw against real llama.cpp (tests/llama/sampler_draws.py), on
# synthetic logits and on SmolLM2's real ones (tests/llama/real_draws.py).
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
# examples/parallel's use of a context: a C program built against the sdist's llama.h, linked
# with -lllama; every client's reply must equal a one-sequence context's.
smollm2=$root/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f "$smollm2" ]; then
  inc=$cache/llama_cpp_python-0.3.36/vendor/llama.cpp
  work=$(mktemp -d)
  cc -std=c11 -Wall -Werror -I "$inc/include" -I "$inc/ggml/include" "$root/tests/llama/parallel.c" \
    -L"$lib" -lllama -Wl,-rpath,"$lib" -o "$work/parallel"
  "$work/parallel" "$smollm2" 2>"$work/log" || { cat "$work/log" >&2; echo "FAIL: tests/llama/parallel.c" >&2; exit 1; }
  rm -rf "$work"
  echo "parallel: three clients in one context, each as alone"
elif [ -n "${PACKLM_REQUIRE_MODELS:-}" ]; then
  echo "FAIL: $smollm2 is missing and PACKLM_REQUIRE_MODELS is set" >&2
  exit 1
else
  echo "note: $smollm2 absent; tests/llama/parallel.c not run"
fi
# Random LoRA adapters for the GGUFs' shapes (tests/llama/make_lora.py, seeded; remade each run,
# in models/, which git ignores): SmolLM2's, an aLoRA of it, and Gemma3's (another base).
gguf_py=$cache/llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py
make_lora() {
  if [ -f "$1" ]; then PYTHONPATH=$cache/pydeps:$gguf_py python3 "$root/tests/llama/make_lora.py" "$@"; fi
}
make_lora "$smollm2" -o "$root/models/SmolLM2-135M-Instruct.lora-r16.gguf"
make_lora "$smollm2" -o "$root/models/SmolLM2-135M-Instruct.alora-r16.gguf" --alora 1,2,3
make_lora "$root/models/gemma3-270m-Q4_K_M.gguf" -o "$root/models/gemma3-270m.lora-r16.gguf"
LLAMA_CPP_LIB_PATH=$lib \
PYTHONPATH=$cache/llama_cpp_python-0.3.36:$cache/pydeps \
PACKLM_BIN=$root/target/release/packlm \
  python3 "$root/tests/llama/test_llama_cpp.py" "$root/models"
# Seeded sampler chains on synthetic logits, draw for draw against real llama.cpp's recording.
LLAMA_CPP_LIB_PATH=$lib \
PYTHONPATH=$cache/llama_cpp_python-0.3.36:$cache/pydeps \
  python3 "$root/tests/llama/sampler_draws.py" check
# A seeded 64-token reply on SmolLM2's real logits as llama.cpp computed them, draw for draw.
LLAMA_CPP_LIB_PATH=$lib \
PYTHONPATH=$cache/llama_cpp_python-0.3.36:$cache/pydeps \
  python3 "$root/tests/llama/real_draws.py" check

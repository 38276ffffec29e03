#!/bin/sh
# Split models: SmolLM2's GGUF split in three the way llama.cpp's gguf-split lays files out
# (tests/llama/split_gguf.py, with the sdist's gguf-py), then opened from its first file by the
# packlm CLI (logits equal to the whole file's, byte for byte; a later split alone refused) and
# by a C program built against llama.h and linked with -lllama (tests/llama/splits.c); and a
# copy with tokenizer.ggml.suppress_tokens, whose list `packlm info --json` and
# llama_vocab_get_suppress_tokens give.
# Without the model it says so and skips, or fails when PACKLM_REQUIRE_MODELS is set.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
smollm2=$root/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$smollm2" ]; then
  if [ -n "${PACKLM_REQUIRE_MODELS:-}" ]; then echo "FAIL: $smollm2 is missing and PACKLM_REQUIRE_MODELS is set" >&2; exit 1; fi
  echo "note: $smollm2 absent; split models not tested"
  exit 0
fi
cache=$("$root/tests/llama/fetch.sh")
lib=$root/target/release/llama-lib
inc=$cache/llama_cpp_python-0.3.36/vendor/llama.cpp
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
PYTHONPATH=$cache/pydeps:$inc/gguf-py python3 "$root/tests/llama/split_gguf.py" "$smollm2" "$work/smol" 3
first=$work/smol-00001-of-00003.gguf
"$root/target/release/packlm" logits "$first" --tokens 1,504,3458,282 --all --out "$work/split.bin"
"$root/target/release/packlm" logits "$smollm2" --tokens 1,504,3458,282 --all --out "$work/whole.bin"
cmp -s "$work/split.bin" "$work/whole.bin" || { echo "FAIL: packlm logits on the first split differ from the whole file's" >&2; exit 1; }
if "$root/target/release/packlm" logits "$work/smol-00002-of-00003.gguf" --tokens 1 --out "$work/x.bin" 2>"$work/err"; then
  echo "FAIL: packlm opened a later split alone" >&2; exit 1
fi
grep -q "open its first split" "$work/err" || { cat "$work/err" >&2; echo "FAIL: the refusal does not name the first split" >&2; exit 1; }
PYTHONPATH=$cache/pydeps:$inc/gguf-py python3 "$root/tests/llama/split_gguf.py" "$smollm2" "$work/sup" 1 --suppress 5,7,-1,99999999
suppressed=$work/sup-00001-of-00001.gguf
"$root/target/release/packlm" info "$suppressed" --json | python3 -c 'import json, sys; v = json.load(sys.stdin)["suppress_tokens"]; sys.exit(0 if v == [5, 7] else "packlm info: suppress_tokens %r, expected [5, 7]" % (v,))'
cc -std=c11 -Wall -Werror -I "$inc/include" -I "$inc/ggml/include" "$root/tests/llama/splits.c" \
  -L"$lib" -lllama -Wl,-rpath,"$lib" -o "$work/splits"
"$work/splits" "$smollm2" "$first" "$work/smol-00002-of-00003.gguf" "$work/smol-00003-of-00003.gguf" "$suppressed" 2>"$work/log" ||
  { cat "$work/log" >&2; echo "FAIL: tests/llama/splits.c" >&2; exit 1; }
echo "split models: the first split opens the model (CLI and llama.h), same logits as the whole file; suppress list read"

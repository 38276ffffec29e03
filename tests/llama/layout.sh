#!/bin/sh
# Every struct the facade passes by value or pointer, laid out as the C compiler reads
# llama-cpp-python 0.3.36's llama.h: each size and each field's offset from
# `cargo run --example layout` (Rust's reading of llama/src/abi.rs) must equal the C one.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=$("$root/tests/llama/fetch.sh")
inc=$cache/llama_cpp_python-0.3.36/vendor/llama.cpp
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"
${CARGO:-cargo} run --release -q -p llama --example layout > "$work/rust.txt"
[ -s "$work/rust.txt" ] || { echo "FAIL: the layout example printed nothing" >&2; exit 1; }
{
  echo '#include <stdio.h>'
  echo '#include <stddef.h>'
  echo '#include "llama.h"'
  echo 'int main(void) {'
  while read -r what kind _; do
    case $kind in
      size) printf '  printf("%s size %%zu\\n", sizeof(struct %s));\n' "$what" "$what" ;;
      offset) printf '  printf("%s offset %%zu\\n", offsetof(struct %s, %s));\n' "$what" "${what%%.*}" "${what#*.}" ;;
    esac
  done < "$work/rust.txt"
  echo '  return 0;'
  echo '}'
} > "$work/layout.c"
cc -std=c11 -I "$inc/include" -I "$inc/ggml/include" -o "$work/layout" "$work/layout.c"
"$work/layout" > "$work/c.txt"
if diff -u "$work/c.txt" "$work/rust.txt"; then
  echo "layout: $(grep -c ' size ' "$work/rust.txt") structs, $(grep -c ' offset ' "$work/rust.txt") fields match llama.h"
else
  echo "FAIL: the facade's struct layouts differ from llama.h (- C, + Rust)" >&2
  exit 1
fi

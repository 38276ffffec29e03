#!/bin/sh
# Programs built against llama.cpp, run on the facade folder of `make llama`
# (target/release/llama-lib: libllama.so, libggml.so, libggml-base.so): llama.cpp's own
# examples simple and simple-chat (from the llama-cpp-python 0.3.36 sdist that
# tests/llama/fetch.sh caches) and tests/llama/ggml_app.c, each compiled with the sdist's
# headers and linked -lllama -lggml -lggml-base, as such a program is.
#   - each program records the SONAMEs of the libraries it uses (libllama.so.0,
#     libggml-base.so.0, and libggml.so.0 for ggml_app) and each resolves into the folder;
#   - ggml_app's checks pass, and GGML_ABORT prints its message and aborts (with and without
#     an abort callback);
#   - simple, greedy, prints the prompt's pieces then exactly what `packlm generate --temp 0`
#     continues the same prompt with (and "Paris" for SmolLM2);
#   - simple-chat answers two scripted user turns through llama_chat_apply_template and the
#     model's own template, and exits 0 at the end of input, no reply filling the context
#     (SmolLM2; Gemma3's GGUF has no chat template);
#   - tests/llama/all_functions.c calls every function llama.h declares, each result checked
#     (SmolLM2 and the tiny llama fixture); the build fails unless its object references every
#     LLAMA_API name of llama.h (255, a literal: a listing that loses one fails too);
#   - tests/llama/backend_sampling.c: sampler chains attached to sequences run at llama_decode
#     (llama_set_sampler, llama_get_sampled_*_ith), as llama_sampler_sample on the host (SmolLM2);
#   - tests/llama/perf_load.c: llama_perf_context's counts and lines as llama.cpp keeps them, the
#     load's progress callback, a model and a LoRA adapter from a FILE *;
#   - tests/llama/cvec.c: llama_set_adapter_cvec on the tiny llama fixture against transformers.
# Without the models it says so and skips their runs, or fails when PACKLM_REQUIRE_MODELS is set.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
cache=$("$root/tests/llama/fetch.sh")
src=$cache/llama_cpp_python-0.3.36/vendor/llama.cpp
lib=$root/target/release/llama-lib
packlm=$root/target/release/packlm
fail() { echo "FAIL: $*" >&2; exit 1; }

for name in libllama libggml libggml-base; do
  [ -f "$lib/$name.so" ] || fail "$lib/$name.so is missing: run make llama"
  soname=$(objdump -p "$lib/$name.so" | sed -n 's/^ *SONAME *//p')
  [ "$soname" = "$name.so.0" ] || fail "$lib/$name.so has SONAME '$soname', not $name.so.0"
  [ "$(readlink "$lib/$name.so.0")" = "$name.so" ] || fail "$lib/$name.so.0 is not a link to $name.so"
done
echo "sonames: libllama.so.0 libggml.so.0 libggml-base.so.0"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
inc="-I$src/include -I$src/ggml/include"
link="-L$lib -lllama -lggml -lggml-base"
# shellcheck disable=SC2086 # $inc and $link are lists of flags
{
  ${CXX:-c++} $inc "$src/examples/simple/simple.cpp" $link -o "$work/simple"
  ${CXX:-c++} $inc "$src/examples/simple-chat/simple-chat.cpp" $link -o "$work/simple-chat"
  ${CC:-cc} -std=c11 -Wall -Wextra -Werror $inc "$root/tests/llama/ggml_app.c" $link -o "$work/ggml_app"
  ${CC:-cc} -std=c11 -Wall -Wextra -Werror $inc -c "$root/tests/llama/all_functions.c" -o "$work/all_functions.o"
  ${CC:-cc} "$work/all_functions.o" $link -lm -o "$work/all_functions"
  ${CC:-cc} -std=c11 -Wall -Wextra -Werror $inc "$root/tests/llama/backend_sampling.c" $link -lm -o "$work/backend_sampling"
  ${CC:-cc} -std=c11 -Wall -Wextra -Werror $inc "$root/tests/llama/cvec.c" $link -lm -o "$work/cvec"
  ${CC:-cc} -std=c11 -Wall -Wextra -Werror $inc "$root/tests/llama/perf_load.c" $link -lm -o "$work/perf_load"
}

# all_functions calls every function of llama.h: each name after LLAMA_API in the header (its
# comments and preprocessor lines left out; DEPRECATED(...) looked through) must be an undefined
# symbol of the program's object. Only a call (or an address taken) makes one, so a name in a
# comment or a string does not count.
python3 - "$src/include/llama.h" >"$work/llama_h.names" <<'EOF2'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
text = re.sub(r"//[^\n]*", " ", text)
text = re.sub(r"^[ \t]*#[^\n]*", " ", text, flags=re.M)
names = []
for m in re.finditer(r"\bLLAMA_API\b", text):
    rest = re.sub(r"^\s*DEPRECATED\s*\(", "", text[m.end():])
    decl = re.match(r"[^;(]*?\b([A-Za-z_]\w*)\s*\(", rest)
    if not decl:
        sys.exit("llama.h: no function name after LLAMA_API at offset %d" % m.start())
    names.append(decl.group(1))
if len(set(names)) != len(names):
    sys.exit("llama.h: a name is declared twice")
print("\n".join(names))
EOF2
n_names=$(wc -l <"$work/llama_h.names")
[ "$n_names" = 255 ] || fail "llama.h declares $n_names LLAMA_API functions by this listing, not the 255 of llama-cpp-python 0.3.36"
nm -u "$work/all_functions.o" | awk '{print $NF}' >"$work/all_functions.refs"
missing=$(grep -vxF -f "$work/all_functions.refs" "$work/llama_h.names" | tr '\n' ' ')
[ -z "$missing" ] || fail "tests/llama/all_functions.c does not call: $missing"
echo "all_functions: calls all $n_names functions of llama.h"
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# needs PROGRAM SONAME...: PROGRAM records each SONAME, and every library of the folder it
# records resolves into the folder.
needs() {
  prog=$1
  shift
  recorded=$(readelf -d "$work/$prog" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  for want in "$@"; do
    echo "$recorded" | grep -qx "$want" || fail "$prog does not record $want (it records: $(echo $recorded))"
  done
  for so in $(echo "$recorded" | grep -E '^lib(llama|ggml|ggml-base)\.so\.0$'); do
    where=$(ldd "$work/$prog" | sed -n "s/^[[:space:]]*$so => \([^ ]*\).*/\1/p")
    [ "$where" = "$lib/$so" ] || fail "$prog: $so resolves to '$where', not $lib/$so"
  done
  echo "$prog: records $(echo "$recorded" | grep -E '^lib(llama|ggml|ggml-base)\.so\.0$' | tr '\n' ' ')"
}
needs simple libllama.so.0 libggml-base.so.0
needs simple-chat libllama.so.0 libggml-base.so.0
needs ggml_app libllama.so.0 libggml.so.0 libggml-base.so.0
needs all_functions libllama.so.0

"$work/ggml_app" || fail "tests/llama/ggml_app.c's checks"
# GGML_ABORT: the program prints the message it expects on stdout, then aborts (status 134,
# SIGABRT); ggml prints the message on stderr, or gives it to the callback, which prints it.
# (The shell may add its own "Aborted" line to stderr: only the first line is ggml's.)
rc=0
"$work/ggml_app" abort >"$work/abort.out" 2>"$work/abort.err" || rc=$?
[ "$rc" = 134 ] || fail "ggml_app abort exited $rc, not 134 (SIGABRT)"
[ "$(head -n 1 "$work/abort.err")" = "$(cat "$work/abort.out")" ] ||
  fail "GGML_ABORT printed '$(cat "$work/abort.err")', not '$(cat "$work/abort.out")'"
rc=0
"$work/ggml_app" abort-cb >"$work/abort.out" 2>"$work/abort.err" || rc=$?
[ "$rc" = 134 ] || fail "ggml_app abort-cb exited $rc, not 134 (SIGABRT)"
! grep -q 'with callback' "$work/abort.err" || fail "GGML_ABORT with a callback printed on stderr: $(cat "$work/abort.err")"
[ "$(sort -u "$work/abort.out" | wc -l)" = 1 ] && [ "$(wc -l <"$work/abort.out")" = 2 ] ||
  fail "the abort callback's message differs from the expected one: $(cat "$work/abort.out")"
echo "ggml_abort: the message on stderr or to the callback, then SIGABRT"

# Control vectors on the tiny llama fixture against transformers (tests/fixtures/tiny/cvec_llama).
"$work/cvec" "$root/tests/fixtures/tiny" 2>"$work/cvec.err" || { cat "$work/cvec.err" >&2; fail "tests/llama/cvec.c"; }

# all_functions on SmolLM2 (and the tiny fixture), with a LoRA and an aLoRA of SmolLM2 that
# tests/llama/make_lora.py writes into the work folder (rank 4, seeded).
smollm2=$root/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f "$smollm2" ]; then
  make_lora() {
    PYTHONPATH=$cache/pydeps:$src/gguf-py python3 "$root/tests/llama/make_lora.py" "$smollm2" --rank 4 "$@" ||
      fail "tests/llama/make_lora.py $*"
  }
  make_lora -o "$work/lora.gguf"
  make_lora -o "$work/alora.gguf" --alora 1,2,3
  "$work/all_functions" "$smollm2" "$root/tests/fixtures/tiny/llama" "$work" >"$work/all_functions.out" 2>"$work/all_functions.err" ||
    { cat "$work/all_functions.out"; cat "$work/all_functions.err" >&2; fail "tests/llama/all_functions.c"; }
  sed 's/^/all_functions: /' "$work/all_functions.out"
  "$work/backend_sampling" "$smollm2" 2>"$work/backend_sampling.err" ||
    { cat "$work/backend_sampling.err" >&2; fail "tests/llama/backend_sampling.c"; }
  "$work/perf_load" "$smollm2" "$work/lora.gguf" 2>"$work/perf_load.err" ||
    { cat "$work/perf_load.err" >&2; fail "tests/llama/perf_load.c"; }
elif [ -n "${PACKLM_REQUIRE_MODELS:-}" ]; then
  fail "$smollm2 is missing and PACKLM_REQUIRE_MODELS is set"
else
  echo "note: $smollm2 absent; tests/llama/all_functions.c built, not run"
fi

# Each model and what simple prints before the prompt's text: the piece of the BOS token the
# tokenizer adds (SmolLM2 adds none).
prompt="The capital of France is"
ran=0
for entry in "SmolLM2-135M-Instruct.Q4_1.gguf|" "gemma3-270m-Q4_K_M.gguf|<bos>"; do
  model=$root/models/${entry%%|*}
  bos=${entry#*|}
  if [ ! -f "$model" ]; then
    [ -z "${PACKLM_REQUIRE_MODELS:-}" ] || fail "$model is missing and PACKLM_REQUIRE_MODELS is set"
    echo "note: $model absent; simple and simple-chat not run on it"
    continue
  fi
  ran=$((ran + 1))
  m=$(basename "$model")
  # simple: greedy, 16 tokens; its stdout is the prompt's pieces, the continuation, a newline.
  "$work/simple" -m "$model" -n 16 "$prompt" >"$work/simple.out" 2>"$work/simple.err" ||
    { cat "$work/simple.err" >&2; fail "simple on $m"; }
  { printf '%s%s' "$bos" "$prompt"; "$packlm" generate "$model" --prompt "$prompt" -n 16 --temp 0; } >"$work/simple.expected"
  cmp -s "$work/simple.expected" "$work/simple.out" ||
    fail "simple on $m printed '$(cat "$work/simple.out")'; packlm generate continues with '$(cat "$work/simple.expected")'"
  case $m in SmolLM2*) grep -q Paris "$work/simple.out" || fail "simple on $m: no Paris in '$(cat "$work/simple.out")'" ;; esac
  echo "simple on $m: $(head -n 1 "$work/simple.out")... (= packlm generate)"

  # simple-chat: two user turns, then the end of input ends it. It colours each reply:
  # ESC[33m, the reply, a newline, ESC[0m. It formats the chat with the model's own template
  # (llama_model_chat_template); Gemma3's GGUF carries none, so simple-chat would fall back to
  # chatml, as it does on llama.cpp, a format Gemma3 does not follow: it runs on SmolLM2 only.
  case $m in gemma3*) echo "note: simple-chat not run on $m: its GGUF has no chat template"; continue ;; esac
  printf 'What is the capital of France?\nAnd of Italy?\n' >"$work/chat.in"
  # It samples at temperature 0.8 with a random seed (LLAMA_DEFAULT_SEED), and SmolLM2 now and
  # then rambles until the context is full (about one run in eight, on llama.cpp as here): it
  # exits 0 then too, without an end of generation. Such a run is retried, up to three runs.
  for attempt in 1 2 3; do
    rc=0
    "$work/simple-chat" -m "$model" -c 1024 <"$work/chat.in" >"$work/chat.out" 2>"$work/chat.err" || rc=$?
    [ "$rc" = 0 ] || { cat "$work/chat.err" >&2; fail "simple-chat on $m exited $rc"; }
    grep -q "context size exceeded" "$work/chat.err" || break
    echo "note: simple-chat on $m: run $attempt's reply filled the context (random seed)"
  done
  ! grep -q "context size exceeded" "$work/chat.err" || fail "simple-chat on $m: a reply filled the context in 3 runs"
  replies=$(python3 - "$work/chat.out" <<'EOF'
import re, sys
out = open(sys.argv[1], encoding="utf-8", errors="replace").read()
replies = re.findall("\x1b\\[33m(.*?)\n\x1b\\[0m", out, re.S)
if len(replies) != 2 or not all(r.strip() for r in replies):
    sys.exit("expected two non-empty replies in %r" % out)
print(" | ".join(r.strip().replace("\n", " ")[:60] for r in replies))
EOF
  ) || fail "simple-chat on $m"
  echo "simple-chat on $m: $replies"
done
[ "$ran" -gt 0 ] || echo "note: no model in models/; simple and simple-chat only built"

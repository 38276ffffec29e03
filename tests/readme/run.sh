#!/usr/bin/env bash
# Runs the commands of README.md's user guide, so that what it tells a user to type works.
#
# Every fenced ```sh block runs in order under `bash -euo pipefail`, from the repository root;
# any command that fails fails the test. The markers, an HTML comment on the line just before a
# fence:
#   <!-- file: NAME -->             the block (any language) is written as NAME to a scratch folder
#   <!-- run in the scratch folder... -->
#                                   the sh block runs in that scratch folder, beside those files,
#                                   with links to the repository's include, target, models, tests
#   <!-- not run: REASON -->        the block is skipped, and the reason printed; a skipped block
#                                   that sets PREFIX= (make install) runs with a temporary PREFIX
# The set-up block (`make demo`, `make test`) is not run here: CI and the demo run those.
#
# Needs `make build` and `make llama` (make readme-test builds both), the real model in models/
# (make models), and the llama-cpp-python 0.3.36 sources for the libllama block, which
# tests/llama/fetch.sh fetches once into its cache: they stand in for an installed llama_cpp.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
readme="$root/README.md"
[ -x "$root/target/release/packlm" ] || { echo "FAIL: build first: make build" >&2; exit 1; }
[ -f "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" ] || { echo "FAIL: the model is missing: make models" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
scratch="$tmp/scratch"
mkdir -p "$scratch" "$tmp/blocks"
for d in include target models tests; do ln -s "$root/$d" "$scratch/$d"; done

# Splits README.md into $tmp/blocks/NNN.sh and a plan, one line per sh block:
#   NNN <tab> root|scratch|skip|prefix <tab> README line <tab> reason or first command
python3 - "$readme" "$tmp/blocks" "$scratch" > "$tmp/plan" <<'PY'
import os, re, sys
readme, blocks, scratch = sys.argv[1:]
lines = open(readme, encoding="utf-8").read().split("\n")
SETUP = {"make demo", "make test"}
i, n, files = 0, 0, 0
while i < len(lines):
    m = re.match(r"^```(\w*)\s*$", lines[i])
    if not m or not m.group(1):
        i += 1
        continue
    lang, start = m.group(1), i + 1
    end = start
    while end < len(lines) and lines[end].rstrip() != "```":
        end += 1
    if end == len(lines):
        sys.exit(f"README.md:{i + 1}: a ``` fence is never closed")
    body = "\n".join(lines[start:end]) + "\n"
    marker = lines[i - 1].strip() if i > 0 else ""
    i = end + 1
    fm = re.match(r"^<!-- file: (\S+) -->$", marker)
    if fm:
        name = fm.group(1)
        if "/" in name or name.startswith("."):
            sys.exit(f"README.md:{start}: file name {name!r} must be a plain name")
        open(os.path.join(scratch, name), "w", encoding="utf-8").write(body)
        files += 1
        continue
    if lang != "sh":
        continue
    commands = [l.split("#", 1)[0].strip() for l in body.split("\n")]
    commands = [c for c in commands if c]
    n += 1
    path = os.path.join(blocks, f"{n:03d}.sh")
    first = commands[0] if commands else "(empty)"
    if commands and set(commands) <= SETUP:
        mode, note = "skip", "the set-up commands (run by CI and the demo)"
    elif marker.startswith("<!-- not run:"):
        note = marker[len("<!-- not run:"):].removesuffix("-->").strip()
        if not note:
            sys.exit(f"README.md:{start}: a not-run marker needs its reason")
        if re.search(r"\bPREFIX=\S+", body):
            mode, note = "prefix", first
            body = re.sub(r"\bPREFIX=\S+", 'PREFIX="$README_PREFIX"', body)
        else:
            mode = "skip"
    elif marker.startswith("<!-- run in the scratch folder"):
        mode, note = "scratch", first
    elif marker.startswith("<!--"):
        sys.exit(f"README.md:{start - 1}: unknown marker {marker!r}")
    else:
        mode, note = "root", first
    open(path, "w", encoding="utf-8").write(body)
    print(f"{n:03d}\t{mode}\t{start}\t{note}")
if n == 0 or files == 0:
    sys.exit(f"README.md: found {n} sh blocks and {files} file blocks; expected both")
PY

# What an installed llama-cpp-python gives a user: its package and the modules it imports.
cache=$("$root/tests/llama/fetch.sh")
export PYTHONPATH="$cache/llama_cpp_python-0.3.36:$cache/pydeps${PYTHONPATH:+:$PYTHONPATH}"
export README_PREFIX="$tmp/prefix"

ran=0 skipped=0
while IFS=$'\t' read -r id mode line note; do
  case $mode in
    skip) echo "== README.md:$line: not run: $note"; skipped=$((skipped + 1)); continue ;;
    scratch) dir=$scratch ;;
    *) dir=$root ;;
  esac
  echo "== README.md:$line: $note"
  if ! (cd "$dir" && bash -euo pipefail "$tmp/blocks/$id.sh") < /dev/null > "$tmp/out" 2>&1; then
    cat "$tmp/out"
    echo "FAIL: the sh block at README.md:$line exited non-zero" >&2
    exit 1
  fi
  sed 's/^/   /' "$tmp/out" | tail -n 12
  if [ "$mode" = prefix ]; then
    for f in include/packlm.h include/packlm.hpp lib/libpacklm.so lib/libpacklm.a lib/pkgconfig/packlm.pc lib/cmake/packlm/packlmConfig.cmake; do
      [ -e "$README_PREFIX/$f" ] || { echo "FAIL: README.md:$line did not install $f" >&2; exit 1; }
    done
    echo "   installed into a temporary PREFIX: include/, lib/, lib/pkgconfig/, lib/cmake/"
  fi
  ran=$((ran + 1))
done < "$tmp/plan"
echo "readme: $ran blocks ran, $skipped not run"

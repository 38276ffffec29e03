#!/usr/bin/env bash
# A short run of every cargo-fuzz target in fuzz/ (two minutes of fuzzing in all, after the
# build), each from its committed seeds in fuzz/seeds/<target>, with an RSS limit and a
# per-input timeout. A crash, a panic, an input over the limits or a leak fails the script;
# the input that did it is left in fuzz/artifacts/<target>/.
#
# A target with a dictionary in fuzz/dicts/<target>.dict gets it. The chat_template target runs
# with a 64 MiB allocation limit: its renders are bounded far below that (tests/chat_memory.rs),
# so one allocation past it is a finding.
#
# Needs a nightly toolchain (cargo-fuzz builds with sanitizers); without one it says so and
# exits 0. cargo-fuzz is installed with `cargo install cargo-fuzz` when missing.
#
#   scripts/fuzz_smoke.sh            every target, 120 s in all
#   FUZZ_SECONDS=600 scripts/fuzz_smoke.sh gguf   one target for 600 s
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz smoke SKIPPED: no nightly toolchain (cargo +nightly) on this machine; cargo-fuzz needs one"
  exit 0
fi
if ! cargo +nightly fuzz --help >/dev/null 2>&1; then
  echo "fuzz smoke: installing cargo-fuzz"
  cargo install cargo-fuzz
fi

all_targets=(gguf safetensors_header config_spec snapshot_restore tokenize chat_template detokenizer_stream gbnf lora_adapter)
if [ "$#" -eq 0 ]; then targets=("${all_targets[@]}"); else targets=("$@"); fi
total=${FUZZ_SECONDS:-120}
each=$(( total / ${#targets[@]} ))
[ "$each" -ge 1 ] || each=1

cd fuzz
# The instrumented build of the dependencies takes many minutes on a small machine, so its
# folder lives outside the repository and is reused by later runs and fresh clones.
export CARGO_TARGET_DIR=${PACKLM_FUZZ_TARGET:-${XDG_CACHE_HOME:-/var/cache}/packlm/fuzz-target}
mkdir -p "$CARGO_TARGET_DIR"
# -a: debug assertions, so integer overflow is a finding too.
cargo +nightly fuzz build -a
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for t in "${targets[@]}"; do
  mkdir -p "$work/$t"
  cp seeds/"$t"/* "$work/$t"/
  echo "fuzz smoke: $t for ${each}s"
  rc=0
  extra=()
  [ -f "dicts/$t.dict" ] && extra+=("-dict=dicts/$t.dict")
  malloc_mb=2048
  [ "$t" = chat_template ] && malloc_mb=64
  cargo +nightly fuzz run -a "$t" "$work/$t" -- \
    -max_total_time="$each" -rss_limit_mb=2048 -malloc_limit_mb="$malloc_mb" -timeout=10 -print_final_stats=1 \
    "${extra[@]}" >"$work/$t.log" 2>&1 || rc=$?
  grep -E "^stat::number_of_executed_units|^Done|panicked|^==[0-9]+==|^SUMMARY|^artifact_prefix|Test unit written" "$work/$t.log" || true
  if [ "$rc" -ne 0 ]; then
    tail -n 40 "$work/$t.log"
    echo "fuzz smoke: $t FAILED (the input is in fuzz/artifacts/$t/)"
    exit 1
  fi
done
echo "fuzz smoke: all ${#targets[@]} targets passed"

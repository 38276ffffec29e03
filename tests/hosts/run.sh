#!/usr/bin/env bash
# The cross-host test (protocol: tests/hosts/README.md). The C host writes a prefilled state;
# every host restores it and must give the C host's next-step logits bit for bit and its greedy
# tokens; then every host restores every host's snapshot and continues greedily.
#
#   PACKLM_HOSTS       hosts to run, in order (default: c cpp python go swift). A host H other
#                      than the built-in three runs as the executable tests/hosts/H_host; a listed host
#                      whose command is missing fails the test.
#   PACKLM_SKIP_HOSTS  hosts to leave out (comma- or space-separated), for someone who opts
#                      out; each is named as skipped.
#   Models: the tiny llama fixture, and the SmolLM2 GGUF when models/ has it (required when
#   PACKLM_REQUIRE_MODELS is set).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
lib="$root/target/release"
[ -f "$lib/libpacklm.so" ] || { echo "build first: make build" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

hosts=()
skip=${PACKLM_SKIP_HOSTS:-}
for h in ${PACKLM_HOSTS:-c cpp python go swift}; do
  case " ${skip//,/ } " in
    *" $h "*) echo "hosts: SKIPPING host $h (PACKLM_SKIP_HOSTS=${PACKLM_SKIP_HOSTS})" ;;
    *) hosts+=("$h") ;;
  esac
done
[ "${#hosts[@]}" -gt 0 ] || { echo "FAIL: no host left to run" >&2; exit 1; }
printf 'hosts: %s\n' "${hosts[*]}"

cc -std=c11 -Wall -Wextra -Werror -I"$root/include" "$root/tests/hosts/c_host.c" -L"$lib" -lpacklm -Wl,-rpath,"$lib" -o "$tmp/c_host"
host_cmd() {
  case "$1" in
    c) echo "$tmp/c_host" ;;
    cpp)
      if [ ! -x "$tmp/cpp_host" ]; then
        g++ -std=c++17 -Wall -Wextra -Werror -I"$root/include" "$root/tests/hosts/cpp_host.cpp" -L"$lib" -lpacklm -Wl,-rpath,"$lib" -o "$tmp/cpp_host" >&2
      fi
      echo "$tmp/cpp_host" ;;
    # The package of the source tree, over the library every other host links.
    python) echo "env PACKLM_LIB=$lib/libpacklm.so python3 $root/tests/hosts/python_host.py" ;;
    *)
      [ -x "$root/tests/hosts/$1_host" ] || { echo "FAIL: host $1 is listed but tests/hosts/$1_host is missing or not executable" >&2; return 1; }
      echo "$root/tests/hosts/$1_host" ;;
  esac
}
declare -A cmd
for h in "${hosts[@]}"; do
  cmd[$h]=$(host_cmd "$h")
done

models=("$root/tests/fixtures/tiny/llama")
smol="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -f "$smol" ]; then
  models+=("$smol")
elif [ -n "${PACKLM_REQUIRE_MODELS:-}" ]; then
  echo "FAIL: $smol is missing and PACKLM_REQUIRE_MODELS is set" >&2; exit 1
else
  echo "hosts: note: $smol absent (scripts/fetch_models.sh); the tiny fixture only"
fi

# Runs one host command; it must exit 0 and print "HOST: N passed, 0 failed".
run() {
  local host=$1; shift
  local out
  if ! out=$(${cmd[$host]} "$@" 2>&1); then
    printf '%s\n' "$out" >&2
    echo "FAIL: host $host $*" >&2
    exit 1
  fi
  printf '%s\n' "$out" | grep -Eq "^$host: [1-9][0-9]* passed, 0 failed$" || {
    printf '%s\n' "$out" >&2; echo "FAIL: host $host $*: no \"$host: N passed, 0 failed\" line" >&2; exit 1; }
  printf '  %-8s %-6s %-8s %s\n' "$host" "$1" "${4:+from $4}" "$(printf '%s\n' "$out" | tail -n 1)"
}

for model in "${models[@]}"; do
  dir="$tmp/$(basename "$model")"
  mkdir -p "$dir"
  echo "hosts: $(basename "$model")"
  run c write "$model" "$dir"
  for h in "${hosts[@]}"; do run "$h" check "$model" "$dir"; done
  for h in "${hosts[@]}"; do
    for from in "${hosts[@]}"; do run "$h" chain "$model" "$dir" "$from"; done
  done
done
echo "hosts: ok (${hosts[*]})"

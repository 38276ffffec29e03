#!/usr/bin/env bash
# The host kernels' tests built for aarch64 and run under qemu's user-mode emulator, so that
# the NEON integer kernels (src/backend/host/neon_int8.rs) are checked against the portable
# bits on an x86_64 machine: tests/host_int8.rs, tests/host_int8_k.rs, tests/host_kernels.rs,
# tests/backend_conformance.rs (the host backend with each kernel path forced) and
# tests/quant_table.rs (the kernels the types' rows give NEON). Any failure
# fails the script. On an aarch64 machine the same tests run natively.
#
# Installs what is missing: the rustup target aarch64-unknown-linux-gnu, and Debian's
# gcc-aarch64-linux-gnu (the linker), libc6-dev-arm64-cross (the C library to link and run
# against) and qemu-user (qemu-aarch64), with apt-get as root or through sudo.
#
#   scripts/aarch64_tests.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# The host kernels' tests; the GPU backend (tests/gpu_backend.rs, a cargo feature) is tested on
# the build machine, so the cross build leaves it out.
tests=(--no-default-features --test host_int8 --test host_int8_k --test host_kernels --test host_act --test backend_conformance --test quant_table)

if [ "$(uname -m)" = aarch64 ]; then
  exec cargo test --release "${tests[@]}"
fi

target=aarch64-unknown-linux-gnu
sysroot=/usr/aarch64-linux-gnu

if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  command -v rustup >/dev/null || { echo "aarch64 tests: rustup is needed to add the $target target" >&2; exit 1; }
  rustup target add "$target"
fi

missing=()
command -v aarch64-linux-gnu-gcc >/dev/null || missing+=(gcc-aarch64-linux-gnu)
[ -e "$sysroot/lib/libc.so" ] || missing+=(libc6-dev-arm64-cross)
command -v qemu-aarch64 >/dev/null || missing+=(qemu-user)
if [ "${#missing[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null || { echo "aarch64 tests: need ${missing[*]} (Debian names); no apt-get here" >&2; exit 1; }
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "aarch64 tests: installing ${missing[*]} needs root" >&2; exit 1; }
    sudo=(sudo)
  fi
  echo "aarch64 tests: installing ${missing[*]}"
  "${sudo[@]}" apt-get update -q
  "${sudo[@]}" apt-get install -y -q "${missing[@]}"
fi

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
# -L: the aarch64 dynamic loader and libc the test binaries are linked against.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L $sysroot"
cargo test --release --target "$target" "${tests[@]}"

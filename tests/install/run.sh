#!/usr/bin/env bash
# Installs packlm into a temporary prefix (make install PREFIX=...) and builds the C example
# (examples/c/chat.c) against the installed tree only: with pkg-config (shared, and static from
# libpacklm.a plus Libs.private) and with CMake's find_package(packlm) (packlm::packlm and
# packlm::packlm_static); runs each build on the tiny fixture. Checks the installed shared
# library carries no debug info and prints its size.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
for tool in cc pkg-config cmake strip; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is missing (.ci/run installs it)" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
make -C "$root" --no-print-directory install PREFIX="$prefix"
abi=$(sed -n 's/^#define PACKLM_ABI_VERSION \([0-9][0-9]*\)$/\1/p' "$root/include/packlm.h")
so="$prefix/lib/libpacklm.so.$abi"
for f in "$so" "$prefix/lib/libpacklm.so" "$prefix/lib/libpacklm.a" "$prefix/include/packlm.h" "$prefix/include/packlm.hpp" \
         "$prefix/lib/pkgconfig/packlm.pc" "$prefix/lib/cmake/packlm/packlmConfig.cmake"; do
  [ -e "$f" ] || { echo "FAIL: $f was not installed" >&2; exit 1; }
done
[ "$(readlink "$prefix/lib/libpacklm.so")" = "libpacklm.so.$abi" ] || { echo "FAIL: libpacklm.so is not a link to libpacklm.so.$abi" >&2; exit 1; }
if readelf -S "$so" | grep -q '\.debug_'; then echo "FAIL: the installed $so carries debug sections" >&2; exit 1; fi
echo "install: libpacklm.so.$abi is $(stat -c %s "$so") bytes without debug info (the build's: $(stat -c %s "$root/target/release/libpacklm.so"))"

tiny="$root/tests/fixtures/tiny/llama"
# Runs a built example on the tiny fixture; it must exit 0 and print a line.
run_chat() {
  local exe=$1
  "$exe" "$tiny" "Hello" 4 > "$tmp/out.txt" || { echo "FAIL: $exe on the tiny fixture" >&2; exit 1; }
  [ -s "$tmp/out.txt" ] || { echo "FAIL: $exe printed nothing" >&2; exit 1; }
  if readelf -d "$exe" | grep -q "NEEDED.*libpacklm"; then echo "  $(basename "$exe"): linked to $(readelf -d "$exe" | sed -n 's/.*NEEDED.*\[\(libpacklm[^]]*\)\]/\1/p')"
  else echo "  $(basename "$exe"): packlm linked in statically"; fi
}
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
libdir=$(pkg-config --variable=libdir packlm)
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror $(pkg-config --cflags packlm) "$root/examples/c/chat.c" $(pkg-config --libs packlm) -Wl,-rpath,"$libdir" -o "$tmp/pc_shared"
run_chat "$tmp/pc_shared"
readelf -d "$tmp/pc_shared" | grep -q "NEEDED.*\[libpacklm.so.$abi\]" || { echo "FAIL: pkg-config build does not need libpacklm.so.$abi" >&2; exit 1; }
# Static: the archive itself, then what Libs.private adds (pkg-config --static).
# shellcheck disable=SC2046
cc -std=c11 $(pkg-config --cflags packlm) "$root/examples/c/chat.c" "$libdir/libpacklm.a" $(pkg-config --static --libs packlm | sed 's/-lpacklm\b//') -o "$tmp/pc_static"
run_chat "$tmp/pc_static"
if readelf -d "$tmp/pc_static" | grep -q "NEEDED.*libpacklm"; then echo "FAIL: the static build needs libpacklm" >&2; exit 1; fi

cmake -S "$root/tests/install" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DPACKLM_SOURCE="$root" > "$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; echo "FAIL: cmake configure" >&2; exit 1; }
cmake --build "$tmp/cmake" > "$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; echo "FAIL: cmake build" >&2; exit 1; }
run_chat "$tmp/cmake/chat_shared"
run_chat "$tmp/cmake/chat_static"
if readelf -d "$tmp/cmake/chat_static" | grep -q "NEEDED.*libpacklm"; then echo "FAIL: packlm::packlm_static links the shared library" >&2; exit 1; fi
echo "install-test: ok"

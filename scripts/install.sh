#!/usr/bin/env bash
# Installs the built library under PREFIX (make install PREFIX=...):
#   lib/libpacklm.so.<ABI> (debug info stripped), lib/libpacklm.so -> libpacklm.so.<ABI>,
#   lib/libpacklm.a, include/packlm.h, include/packlm.hpp, lib/pkgconfig/packlm.pc,
#   lib/cmake/packlm/packlmConfig.cmake and packlmConfigVersion.cmake
#   (find_package(packlm) gives packlm::packlm, the shared library, and packlm::packlm_static).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=${1:?usage: install.sh PREFIX}
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
rel="$root/target/release"
for f in libpacklm.so libpacklm.a libpacklm.rlib; do
  [ -f "$rel/$f" ] || { echo "install: $rel/$f is missing: make build" >&2; exit 1; }
done
header="$root/include/packlm.h"
abi=$(sed -n 's/^#define PACKLM_ABI_VERSION \([0-9][0-9]*\)$/\1/p' "$header")
version=$(sed -n 's/^#define PACKLM_VERSION "\(.*\)"$/\1/p' "$header")
[ -n "$abi" ] && [ -n "$version" ] || { echo "install: $header lacks PACKLM_ABI_VERSION or PACKLM_VERSION" >&2; exit 1; }

# The system libraries a static link needs, as rustc reports them for this target: rustc links
# a one-line static library over the build's own libpacklm.rlib (the same compilation as
# libpacklm.a, with the same dependencies) and prints them, in under a second; compiling
# packlm again as a staticlib to print them took minutes.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo 'extern crate packlm;' > "$tmp/link_flags.rs"
if ! (cd "$root" && "${RUSTC:-rustc}" --edition 2021 --crate-type staticlib --crate-name packlm_link_flags -A warnings \
        -L dependency="$rel/deps" --extern packlm="$rel/libpacklm.rlib" --print native-static-libs \
        --out-dir "$tmp" "$tmp/link_flags.rs" > "$tmp/rustc.log" 2>&1); then
  cat "$tmp/rustc.log" >&2
  echo "install: rustc could not link a static library over $rel/libpacklm.rlib" >&2; exit 1
fi
static_libs=$(sed -n 's/.*native-static-libs: //p' "$tmp/rustc.log" | tail -n 1)
[ -n "$static_libs" ] || { cat "$tmp/rustc.log" >&2; echo "install: rustc printed no native-static-libs" >&2; exit 1; }
rm -rf "$tmp"

lib="$prefix/lib"
mkdir -p "$lib/pkgconfig" "$lib/cmake/packlm" "$prefix/include"
install -m 0755 "$rel/libpacklm.so" "$lib/libpacklm.so.$abi"
strip --strip-debug "$lib/libpacklm.so.$abi"
ln -sf "libpacklm.so.$abi" "$lib/libpacklm.so"
install -m 0644 "$rel/libpacklm.a" "$lib/libpacklm.a"
install -m 0644 "$header" "$root/include/packlm.hpp" "$prefix/include/"

cat > "$lib/pkgconfig/packlm.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: packlm
Description: Embed decoder-only language models (C ABI $abi)
Version: $version
Libs: -L\${libdir} -lpacklm
Libs.private: $static_libs
Cflags: -I\${includedir}
PC

# The config finds its prefix from its own place (lib/cmake/packlm), so the tree can move.
cat > "$lib/cmake/packlm/packlmConfig.cmake" <<CM
# packlm $version, C ABI $abi. Targets: packlm::packlm (shared), packlm::packlm_static.
get_filename_component(_packlm_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET packlm::packlm)
  add_library(packlm::packlm SHARED IMPORTED)
  set_target_properties(packlm::packlm PROPERTIES
    IMPORTED_LOCATION "\${_packlm_prefix}/lib/libpacklm.so.$abi"
    IMPORTED_SONAME "libpacklm.so.$abi"
    INTERFACE_INCLUDE_DIRECTORIES "\${_packlm_prefix}/include")
endif()
if(NOT TARGET packlm::packlm_static)
  add_library(packlm::packlm_static STATIC IMPORTED)
  set_target_properties(packlm::packlm_static PROPERTIES
    IMPORTED_LOCATION "\${_packlm_prefix}/lib/libpacklm.a"
    INTERFACE_INCLUDE_DIRECTORIES "\${_packlm_prefix}/include"
    INTERFACE_LINK_LIBRARIES "$static_libs")
endif()
set(packlm_VERSION "$version")
set(packlm_ABI_VERSION $abi)
unset(_packlm_prefix)
CM

# Compatible: not older than asked for, and the same major version (for 0.x, the same minor).
major=${version%%.*}
minor=$(echo "$version" | cut -d. -f2)
if [ "$major" = 0 ]; then same='PACKAGE_FIND_VERSION_MAJOR STREQUAL "0" AND PACKAGE_FIND_VERSION_MINOR STREQUAL "'$minor'"'
else same='PACKAGE_FIND_VERSION_MAJOR STREQUAL "'$major'"'; fi
cat > "$lib/cmake/packlm/packlmConfigVersion.cmake" <<CM
set(PACKAGE_VERSION "$version")
if(NOT PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
elseif(NOT PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION AND $same)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION VERSION_EQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
else()
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
endif()
CM
echo "installed packlm $version (ABI $abi) under $prefix: libpacklm.so.$abi $(stat -c %s "$lib/libpacklm.so.$abi") bytes"

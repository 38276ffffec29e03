#!/usr/bin/env bash
# ONNX Runtime's shared library for the npu backend (PACKLM_BACKEND_NPU) on its CPU execution
# provider: taken from the `onnxruntime` wheel on PyPI (the wheel is checked by sha256), kept in
# a cache outside the repository and reused. Prints the library's path on stdout.
#   scripts/fetch_onnxruntime.sh          fetch if missing, print the path
# packlm loads the library at run time from PACKLM_ONNXRUNTIME (the Makefile sets it to this
# path); nothing links against it.
set -euo pipefail
version=1.32.0
case "$(uname -m)" in
  x86_64) platform=manylinux_2_28_x86_64; sum=5a34fc4dfeb5a7b4a74c95dcba1e773d722abda720b474edf1b0c419dc6d163d ;;
  aarch64) platform=manylinux_2_28_aarch64; sum=2303372a85299b6757b0e11e1cbf13e410ddf7e10c37f4b37e99d1c90e7daf7c ;;
  *) echo "fetch_onnxruntime.sh: no onnxruntime $version wheel is pinned for $(uname -m)" >&2; exit 1 ;;
esac
dir="${XDG_CACHE_HOME:-$HOME/.cache}/packlm/onnxruntime-$version-$platform"
lib="$dir/libonnxruntime.so.$version"
if [ -f "$lib" ]; then
  echo "$lib"; exit 0
fi
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The cp311 wheel whatever this machine's Python: only its C library is used.
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 --platform "$platform" \
  "onnxruntime==$version" -d "$tmp" >&2
wheel=$(ls "$tmp"/*.whl)
echo "$sum  $wheel" | sha256sum -c --quiet - >&2 || { echo "fetch_onnxruntime.sh: sha256 mismatch for $wheel" >&2; exit 1; }
python3 - "$wheel" "$lib" <<'PY'
import sys, zipfile, shutil
wheel, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.startswith("onnxruntime/capi/libonnxruntime.so."))
    with z.open(name) as src, open(out + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY
chmod 755 "$lib.part"
mv "$lib.part" "$lib"
echo "$lib"

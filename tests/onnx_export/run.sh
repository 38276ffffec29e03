#!/usr/bin/env bash
# make onnx-export-test: `packlm export-onnx` on the tiny llama fixture (its golden tokens), then
# the graphs it wrote run by ONNX Runtime's Python API in a fresh venv (tests/onnx_export/check.py).
# The library's ONNX Runtime comes from PACKLM_ONNXRUNTIME (the Makefile's NPU_ENV).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export PIP_ROOT_USER_ACTION=ignore
python=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install --quiet onnxruntime==1.32.0 numpy
fixture="$root/tests/fixtures/tiny/llama"
tokens=$("$tmp/venv/bin/python" -c 'import json, sys; print(",".join(map(str, json.load(open(sys.argv[1]))["tokens"])))' "$fixture/golden.json")
"$root/target/release/packlm" export-onnx "$fixture" "$tmp/out" --tokens "$tokens"
"$tmp/venv/bin/python" "$root/tests/onnx_export/check.py" "$tmp/out" "$fixture"

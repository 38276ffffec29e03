#!/usr/bin/env bash
# make py-test: the Python package as a user gets it. Builds the wheel of bindings/python (its
# in-tree backend runs cargo, which reuses what `make build` built; nothing is downloaded),
# installs it in a fresh virtual environment, and runs tests/python/test_bindings.py and
# examples/python/chat.py with that environment's python and PACKLM_LIB unset, so the library
# is the one inside the wheel.
#
# Where python3 has no venv module (Debian without python3-venv) it is installed when running as
# root; failing that, the wheel is installed with pip --target into a folder put on PYTHONPATH.
#   PYTHON   the interpreter to test with (default python3)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
unset PACKLM_LIB
export PIP_ROOT_USER_ACTION=ignore  # pip as root (CI) installs only into the temporary folders here
python=${PYTHON:-python3}
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
prompt="What is the capital of France? Answer with one word."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

apt_install() {
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "py-test: apt-get install -y $*"
    apt-get update -q && apt-get install -y -q "$@"
  else
    return 1
  fi
}

# The environment: $py runs the tests; $pip installs into what $py imports from.
if "$python" -m venv "$tmp/venv" >/dev/null 2>&1 || { rm -rf "$tmp/venv"; apt_install python3-venv && "$python" -m venv "$tmp/venv"; }; then
  py="$tmp/venv/bin/python"
  pip=("$py" -m pip)
  echo "py-test: a fresh venv ($("$py" --version))"
else
  echo "py-test: no usable venv module; the wheel goes into a folder on PYTHONPATH"
  "$python" -m pip --version >/dev/null 2>&1 || apt_install python3-pip
  py=$python
  pip=("$python" -m pip)
  export PYTHONPATH="$tmp/site"
fi

# The wheel: platform-tagged, carrying the module, py.typed and the library.
"${pip[@]}" wheel --quiet --no-index --no-deps -w "$tmp/wheel" "$root/bindings/python"
whl=$(ls "$tmp"/wheel/packlm-*.whl)
echo "py-test: built $(basename "$whl")"
case "$(basename "$whl")" in
  *-py3-none-any.whl) echo "FAIL: the wheel carries a native library but is tagged for any platform" >&2; exit 1 ;;
esac
"$py" - "$whl" <<'PY'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
want = {"packlm/__init__.py", "packlm/py.typed", "packlm/libpacklm.so"}
missing = want - names
if missing:
    sys.exit(f"FAIL: the wheel lacks {sorted(missing)} (it holds {sorted(names)})")
PY
if [ -n "${PYTHONPATH:-}" ]; then
  "${pip[@]}" install --quiet --no-index --no-deps --target "$tmp/site" "$whl"
else
  "${pip[@]}" install --quiet --no-index --no-deps "$whl"
fi

# Run away from the checkout, so that nothing of it is on the path by accident.
cd "$tmp"
"$py" -c '
import os, sys, packlm
pkg = os.path.dirname(os.path.abspath(packlm.__file__))
lib = os.path.dirname(os.path.abspath(packlm.library_path()))
if not pkg.startswith(sys.argv[1]) or lib != pkg:
    sys.exit(f"FAIL: packlm imported from {pkg}, its library from {lib}: not the installed wheel")
m = packlm.Model(os.path.join(sys.argv[2], "tests", "fixtures", "tiny", "llama"))
print(f"py-test: installed packlm {packlm.__version__} opens the tiny llama (n_vocab {m.n_vocab})")
' "$tmp" "$root"
"$py" "$root/tests/python/test_bindings.py"
# The streaming example on the tiny fixture (any text: random weights) and, when models/ has it,
# on SmolLM2 (it must answer Paris).
"$py" "$root/examples/python/chat.py" "$root/tests/fixtures/tiny/llama" Hello 4 >/dev/null
if [ ! -f "$model" ] && [ -n "${PACKLM_REQUIRE_MODELS:-}" ]; then
  echo "FAIL: $model is missing and PACKLM_REQUIRE_MODELS is set (make models)" >&2; exit 1
fi
if [ -f "$model" ]; then
  out=$("$py" "$root/examples/python/chat.py" "$model" "$prompt" 8)
  echo "examples/python/chat.py: $out"
  case "$out" in *Paris*) ;; *) echo "FAIL: the chat example did not answer Paris" >&2; exit 1 ;; esac
fi
echo "py-test: passed"

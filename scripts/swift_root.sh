#!/usr/bin/env bash
# Builds (once) a Debian 13 root that carries a Swift toolchain, and runs commands inside it.
# Debian 12 has no Swift package; Debian 13 packages one (swiftlang, Swift 6.0).
#
#   scripts/swift_root.sh build              build the root unless it is already complete
#   scripts/swift_root.sh run DIRS CMD...    bind each folder of DIRS (a colon-separated list)
#                                            read-write at its own path inside the root, and run
#                                            CMD there in the first one, so paths mean the same
#                                            inside and out
#   scripts/swift_root.sh path               print the root's path
#
# The root lives outside the repository: $PACKLM_SWIFT_ROOT, else $XDG_CACHE_HOME/packlm/swift-root
# when XDG_CACHE_HOME is set, else /var/cache/packlm/swift-root. A marker file written after a
# successful build makes later calls reuse it. The first build takes a few minutes and about 3.3 GB.
# Needs root (debootstrap, chroot, mount). Every mount made here is undone on exit.
set -euo pipefail

if [ -n "${PACKLM_SWIFT_ROOT:-}" ]; then
  ROOT=$PACKLM_SWIFT_ROOT
elif [ -n "${XDG_CACHE_HOME:-}" ]; then
  ROOT=$XDG_CACHE_HOME/packlm/swift-root
else
  ROOT=/var/cache/packlm/swift-root
fi
MARKER=$ROOT/.packlm-swift-root-complete
PACKAGES="swiftlang libc6-dev libstdc++-14-dev"

MOUNTED=()
unmount_all() {
  local i
  for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
    umount "${MOUNTED[$i]}" 2>/dev/null || umount -l "${MOUNTED[$i]}" 2>/dev/null || true
  done
  MOUNTED=()
}
trap unmount_all EXIT INT TERM

mount_in_root() {  # mount_in_root TARGET MOUNT-ARGS...
  local target=$1; shift
  mkdir -p "$target"
  mount "$@" "$target"
  MOUNTED+=("$target")
}

mount_system() {
  mount_in_root "$ROOT/proc" -t proc proc
  mount_in_root "$ROOT/dev" --bind /dev
  mount_in_root "$ROOT/dev/pts" --bind /dev/pts
}

build() {
  if [ -f "$MARKER" ]; then
    return 0
  fi
  [ "$(id -u)" = 0 ] || { echo "swift_root.sh: building the Swift root needs root" >&2; exit 1; }
  if ! command -v debootstrap >/dev/null; then
    apt-get update -q && apt-get install -y -q -o DPkg::Lock::Timeout=300 debootstrap
  fi
  # A root left half-built by an interrupted run is started again from nothing.
  if [ -e "$ROOT" ]; then
    echo "swift_root.sh: $ROOT is incomplete; building it again" >&2
    rm -rf --one-file-system "$ROOT"
  fi
  mkdir -p "$ROOT"
  debootstrap --variant=minbase trixie "$ROOT"
  mount_system
  cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
  chroot "$ROOT" /usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get update -q
  # shellcheck disable=SC2086
  chroot "$ROOT" /usr/bin/env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends $PACKAGES
  chroot "$ROOT" /usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get clean
  chroot "$ROOT" swift --version
  unmount_all
  date -u +%Y-%m-%dT%H:%M:%SZ > "$MARKER"
}

run() {
  local dirs=$1 dir first="" list; shift
  [ -f "$MARKER" ] || { echo "swift_root.sh: no Swift root at $ROOT (run: $0 build)" >&2; exit 1; }
  mount_system
  IFS=: read -r -a list <<< "$dirs"
  for dir in "${list[@]}"; do
    dir=$(cd "$dir" && pwd -P)
    [ -n "$first" ] || first=$dir
    mount_in_root "$ROOT$dir" --bind "$dir"
  done
  chroot "$ROOT" /usr/bin/env HOME=/root PATH=/usr/local/bin:/usr/bin:/bin \
    /bin/sh -c 'cd "$0" && exec "$@"' "$first" "$@"
}

case "${1:-}" in
  build) build ;;
  run) shift; [ $# -ge 2 ] || { echo "usage: $0 run DIRS CMD..." >&2; exit 2; }; run "$@" ;;
  path) echo "$ROOT" ;;
  *) echo "usage: $0 build | run DIRS CMD... | path" >&2; exit 2 ;;
esac

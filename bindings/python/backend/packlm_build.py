"""The PEP 517 build backend of the Python package packlm (pyproject.toml says why it is its own).

A wheel holds packlm/ (the ctypes module, py.typed) and the shared library that
`cargo build --release -p packlm --lib` makes, as packlm/libpacklm.so (libpacklm.dylib on macOS,
packlm.dll on Windows): the module loads it by path, so its SONAME does not matter. Cargo runs in
the crate two folders up (the repository), or in crate/ of an sdist; it honours CARGO_TARGET_DIR
and reuses what is already built there. The library is found from cargo's own report of what it
built (--message-format=json), so any target directory works.

The wheel is tagged py3-none-<platform>: any Python 3 (ctypes, no extension module, so no ABI tag)
on the platform whose library it carries. The platform is the interpreter's
(sysconfig.get_platform(), e.g. linux_x86_64); no manylinux tag is claimed, since no auditwheel
check is made of the library's system dependencies.

An sdist carries the crate (its manifest, lock file, build script, src/, include/ and the
workspace's other members) in crate/, so a wheel can be built from it with no repository.
An editable install (pip install -e) puts bindings/python on the path and builds the library;
the module then finds it in target/release/ of the repository (or through PACKLM_LIB).
"""

import base64
import gzip
import hashlib
import io
import json
import os
import platform
import re
import subprocess
import sys
import sysconfig
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

Config = Optional[Dict[str, Any]]
Entry = Tuple[str, bytes, bool]  # path in the wheel, content, executable

NAME = "packlm"
REQUIRES_PYTHON = ">=3.8"
HERE = Path(__file__).resolve().parent.parent  # bindings/python, or the root of an unpacked sdist
LIBRARY_FILE = {"darwin": "libpacklm.dylib", "win32": "packlm.dll"}.get(sys.platform, "libpacklm.so")
# What an sdist carries of the crate, beside the workspace's other members (read from Cargo.toml).
CRATE_FILES = ["Cargo.toml", "Cargo.lock", "build.rs", "cbindgen.toml", "src", "include"]
SKIP_NAMES = {"target", "__pycache__", ".git"}


class BuildError(Exception):
    pass


def _package_field(manifest: str, key: str) -> str:
    """A string value of the [package] table of a Cargo.toml (a plain `key = "value"` line)."""
    section = re.search(r"^\[package\]\s*$(.*?)(?=^\[|\Z)", manifest, re.M | re.S)
    found = section and re.search(rf'^{key}\s*=\s*"([^"]*)"\s*$', section.group(1), re.M)
    if not found:
        raise BuildError(f"Cargo.toml: no {key} = \"...\" in [package]")
    return found.group(1)


def _crate_root() -> Path:
    for candidate in (HERE / "crate", HERE.parent.parent):
        manifest = candidate / "Cargo.toml"
        if manifest.is_file() and _package_field(manifest.read_text(), "name") == NAME:
            return candidate
    raise BuildError(f"the packlm crate is neither in {HERE / 'crate'} (an sdist) nor two folders above {HERE} "
                     "(bindings/python of the repository)")


def _version(crate: Path) -> str:
    """The crate's version as PEP 440 spells it (0.2.0-rc.1 -> 0.2.0rc1)."""
    cargo = _package_field((crate / "Cargo.toml").read_text(), "version")
    m = re.fullmatch(r"(\d+\.\d+\.\d+)(?:-(alpha|beta|rc)\.?(\d+))?", cargo)
    if not m:
        raise BuildError(f"Cargo.toml: version {cargo!r} has no PEP 440 spelling here")
    pre = {"alpha": "a", "beta": "b", "rc": "rc"}.get(m.group(2) or "", "")
    return m.group(1) + (pre + m.group(3) if pre else "")


def _metadata(crate: Path) -> str:
    manifest = (crate / "Cargo.toml").read_text()
    readme = HERE / "README.md"
    head = [
        "Metadata-Version: 2.1",
        f"Name: {NAME}",
        f"Version: {_version(crate)}",
        f"Summary: {_package_field(manifest, 'description')}",
        f"License: {_package_field(manifest, 'license')}",
        f"Requires-Python: {REQUIRES_PYTHON}",
        "Description-Content-Type: text/markdown",
    ]
    return "\n".join(head) + "\n\n" + (readme.read_text() if readme.is_file() else "")


def _build_library(crate: Path) -> Path:
    cargo = os.environ.get("CARGO", "cargo")
    cmd = [cargo, "build", "--release", "-p", NAME, "--lib", "--message-format=json-render-diagnostics"]
    print(f"packlm: {' '.join(cmd)} (in {crate})", file=sys.stderr, flush=True)
    try:
        proc = subprocess.run(cmd, cwd=crate, stdout=subprocess.PIPE, text=True)
    except FileNotFoundError as e:
        raise BuildError(f"{cargo} not found: the library is built with Rust's cargo (rustup.rs), or name it in CARGO") from e
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed with status {proc.returncode}")
    found = []
    for line in proc.stdout.splitlines():
        msg = json.loads(line) if line.startswith("{") else {}
        target = msg.get("target", {})
        if msg.get("reason") == "compiler-artifact" and target.get("name") == NAME and "cdylib" in target.get("kind", []):
            found += [Path(f) for f in msg.get("filenames", []) if Path(f).name == LIBRARY_FILE]
    if len(found) != 1:
        raise BuildError(f"cargo reported {len(found)} files named {LIBRARY_FILE} for the packlm cdylib: {found}")
    return found[0]


def _platform_tag() -> str:
    plat = sysconfig.get_platform()
    if plat.startswith("macosx-") and plat.endswith(("-universal2", "-intel")):
        # The library is built for this machine only, not for every architecture of the interpreter.
        plat = plat.rsplit("-", 1)[0] + "-" + platform.machine()
    return re.sub(r"[-.]", "_", plat)


def _zip_time() -> Tuple[int, int, int, int, int, int]:
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if not epoch:
        return (1980, 1, 1, 0, 0, 0)
    t = time.gmtime(int(epoch))
    return (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _package_files() -> List[Tuple[str, Path]]:
    """(path in the wheel, file) of the Python package: its modules and the py.typed marker."""
    out = []
    for path in sorted((HERE / NAME).rglob("*")):
        if path.is_file() and (path.suffix == ".py" or path.name == "py.typed") and "__pycache__" not in path.parts:
            out.append((path.relative_to(HERE).as_posix(), path))
    return out


def _write_wheel(wheel_directory: str, crate: Path, tag: str, entries: List[Entry]) -> str:
    """Writes the wheel of `entries` with its .dist-info (METADATA, WHEEL, RECORD)."""
    version = _version(crate)
    dist_info = f"{NAME}-{version}.dist-info"
    wheel_meta = f"Wheel-Version: 1.0\nGenerator: packlm_build\nRoot-Is-Purelib: false\nTag: {tag}\n"
    entries = entries + [(f"{dist_info}/METADATA", _metadata(crate).encode(), False),
                         (f"{dist_info}/WHEEL", wheel_meta.encode(), False)]
    record = [f"{name},{_record_hash(data)},{len(data)}" for name, data, _ in entries] + [f"{dist_info}/RECORD,,"]
    entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode(), False))
    filename = f"{NAME}-{version}-{tag}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as whl:
        for name, data, executable in entries:
            info = zipfile.ZipInfo(name, date_time=_zip_time())
            info.external_attr = (0o100755 if executable else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(info, data)
    return filename


# PEP 517 hooks.

def get_requires_for_build_wheel(config_settings: Config = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Config = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Config = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Config = None) -> str:
    crate = _crate_root()
    dist_info = Path(metadata_directory) / f"{NAME}-{_version(crate)}.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(_metadata(crate))
    return dist_info.name


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory: str, config_settings: Config = None, metadata_directory: Optional[str] = None) -> str:
    crate = _crate_root()
    library = _build_library(crate)
    entries = [(name, path.read_bytes(), False) for name, path in _package_files()]
    entries.append((f"{NAME}/{LIBRARY_FILE}", _without_debug_info(library), True))
    return _write_wheel(wheel_directory, crate, "py3-none-" + _platform_tag(), entries)


def _without_debug_info(library: Path) -> bytes:
    """The library's bytes with its debug sections removed (the release profile keeps line
    tables for profiling: 81 MB against 15 MB), as `make install` installs it; the bytes as
    built where no `strip` is found."""
    import shutil
    import subprocess
    import tempfile
    strip = shutil.which("strip")
    if strip is None or sys.platform == "win32":
        return library.read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / library.name
        args = [strip, "-S", str(library), "-o", str(out)]
        if subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
            return library.read_bytes()
        return out.read_bytes()


def build_editable(wheel_directory: str, config_settings: Config = None, metadata_directory: Optional[str] = None) -> str:
    crate = _crate_root()
    library = _build_library(crate)
    expected = crate / "target" / "release" / LIBRARY_FILE
    if not expected.exists() or not os.path.samefile(library, expected):
        print(f"packlm: the library is {library}, not in the repository's target/release: set PACKLM_LIB to it",
              file=sys.stderr)
    pth = (str(HERE) + "\n").encode()
    return _write_wheel(wheel_directory, crate, "py3-none-any", [(f"_{NAME}_editable.pth", pth, False)])


def build_sdist(sdist_directory: str, config_settings: Config = None) -> str:
    crate = _crate_root()
    base = f"{NAME}-{_version(crate)}"
    members = re.search(r"^members\s*=\s*\[([^\]]*)\]", (crate / "Cargo.toml").read_text(), re.M)
    workspace = [m for m in re.findall(r'"([^"]+)"', members.group(1)) if m != "."] if members else []
    # (path in the sdist, the file to copy or the content)
    files: List[Tuple[str, Union[Path, bytes]]] = [("PKG-INFO", _metadata(crate).encode())]
    files += [(name, HERE / name) for name in ("pyproject.toml", "README.md") if (HERE / name).is_file()]
    files += _package_files()
    files.append(("backend/packlm_build.py", Path(__file__).resolve()))
    for top in CRATE_FILES + workspace:
        path = crate / top
        if not path.exists():
            raise BuildError(f"{path} is missing: an sdist carries the crate to build from")
        walk = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for p in walk:
            if SKIP_NAMES.isdisjoint(p.relative_to(crate).parts) and p.suffix != ".pyc":
                files.append(("crate/" + p.relative_to(crate).as_posix(), p))
    filename = f"{base}.tar.gz"
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))  # 1980-01-01 unless told
    with open(os.path.join(sdist_directory, filename), "wb") as raw, \
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=mtime) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, source in files:
            data = source if isinstance(source, bytes) else source.read_bytes()
            info = tarfile.TarInfo(f"{base}/{name}")
            info.size, info.mtime = len(data), mtime
            info.mode = 0o755 if isinstance(source, Path) and os.access(source, os.X_OK) else 0o644
            tar.addfile(info, io.BytesIO(data))
    return filename

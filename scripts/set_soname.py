#!/usr/bin/env python3
"""Rewrites the DT_SONAME of an ELF64 little-endian shared library in place.

Usage: set_soname.py LIB NEW_SONAME

Why: Cargo passes a dependency's `rustc-link-arg-cdylib` lines to the cdylibs that depend on
it, after their own, so libllama.so (which depends on packlm) is linked with packlm's
`-soname libpacklm.so.N` last and gets that name. The new name must not be longer than the
old one: it is written over the old string in .dynstr, padded with NULs.
"""
import struct
import sys


def main():
    path, new = sys.argv[1], sys.argv[2].encode()
    data = bytearray(open(path, "rb").read())
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        sys.exit(f"{path}: not an ELF64 little-endian file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    dynamic = [s for s in sections if s[1] == 6]  # SHT_DYNAMIC
    if len(dynamic) != 1:
        sys.exit(f"{path}: expected one SHT_DYNAMIC section, found {len(dynamic)}")
    dyn = dynamic[0]
    strtab = sections[dyn[6]]  # sh_link: the section of its strings
    for off in range(dyn[4], dyn[4] + dyn[5], 16):
        tag, val = struct.unpack_from("<qQ", data, off)
        if tag == 0:
            break
        if tag == 14:  # DT_SONAME
            start = strtab[4] + val
            end = data.index(b"\0", start)
            old = bytes(data[start:end])
            if len(new) > len(old):
                sys.exit(f"{path}: {new.decode()} is longer than the SONAME it replaces, {old.decode()}")
            data[start:end] = new + b"\0" * (len(old) - len(new))
            open(path, "wb").write(data)
            print(f"{path}: SONAME {old.decode()} -> {new.decode()}")
            return
    sys.exit(f"{path}: no DT_SONAME")


main()

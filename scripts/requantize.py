#!/usr/bin/env python3
"""Requantize a GGUF with llama.cpp's own quantizer, for benchmarks on other block formats.

    VENV/bin/python scripts/requantize.py SRC.gguf TYPE DST.gguf [TYPE DST.gguf ...]

TYPE is a llama.cpp file type name (Q8_0, Q5_0, Q4_0, Q5_1, Q4_K_M, Q5_K_M, Q6_K, ...). The
Python must have llama-cpp-python installed (this script installs nothing). Each output is
written by `llama_model_quantize` with `allow_requantize` (a source already quantized has its
weights dequantized and rounded again) and llama.cpp's default tensor mix for the file type, as
its llama-quantize tool chooses it (for example Q5_0 keeps the tied embedding in Q8_0). Then
llama.cpp opens the file and a short text's logits are checked finite, and the output's sha256
is printed so that a benchmark can name the exact file it ran.

The benchmarks' SmolLM2-135M Q8_0 and Q5_0 files are made this way from
models/SmolLM2-135M-Instruct.Q4_1.gguf, and scripts/make_moe_bench_model.py's quantized files
from its F16 file.
"""

import hashlib
import sys

import numpy as np
import llama_cpp


def ftype_of(name):
    attr = "LLAMA_FTYPE_MOSTLY_" + name.upper()
    if not hasattr(llama_cpp, attr):
        sys.exit(f"requantize: unknown file type {name!r} (no llama_cpp.{attr})")
    return getattr(llama_cpp, attr)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    args = sys.argv[1:]
    if len(args) < 3 or len(args) % 2 == 0:
        sys.exit(__doc__)
    src = args[0]
    for name, dst in zip(args[1::2], args[2::2]):
        p = llama_cpp.llama_model_quantize_default_params()
        p.ftype = ftype_of(name)
        p.allow_requantize = True
        p.nthread = 2
        rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), p)
        if rc != 0:
            sys.exit(f"requantize: llama_model_quantize {dst}: {rc}")
        llm = llama_cpp.Llama(model_path=dst, n_threads=2, n_ctx=256, logits_all=True, verbose=False)
        ids = llm.tokenize(b"The quick brown fox jumps over the lazy dog.")
        llm.eval(ids)
        logits = np.asarray(llm.scores[: len(ids)])
        if not np.isfinite(logits).all():
            sys.exit(f"requantize: {dst}: non-finite logits")
        print(f"{dst}: {name}, sha256 {sha256(dst)}, llama.cpp {llama_cpp.__version__}")


if __name__ == "__main__":
    main()

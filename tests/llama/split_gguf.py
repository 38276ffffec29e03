#!/usr/bin/env python3
"""Splits a GGUF into N files the way llama.cpp's gguf-split lays them out, for the split-model
tests (tests/llama/splits.sh writes them into a temporary folder).

Usage (PYTHONPATH: the llama-cpp-python 0.3.36 sdist's vendored gguf-py and the pinned numpy of
tests/llama/fetch.sh, as splits.sh sets it):
    python3 tests/llama/split_gguf.py MODEL.gguf OUT_PREFIX N [--suppress ID,ID,..]

Writes OUT_PREFIX-00001-of-0000N.gguf .. OUT_PREFIX-0000N-of-0000N.gguf. The layout is
gguf-split's, as llama.cpp documents and reads it (src/llama-model-loader.cpp, examples/
gguf-split): every file holds `split.no` (uint16, from 0) and `split.count` (uint16); the first
also holds every metadata key of MODEL.gguf and `split.tensors.count` (int32, all files'
tensors); the tensors, in MODEL.gguf's order, are dealt out in N runs of about equal count, the
first file's run first. Tensor bytes are copied unchanged. With --suppress the first file also
gets `tokenizer.ggml.suppress_tokens` (an int32 array, as llama.cpp reads it), for the
suppress-list test; N = 1 writes one file holding everything (split.count 1: not a split).
"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

# Keys the writer sets itself or that describe the file, not the model.
SKIP = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.architecture"}


def copy_kv(w, f):
    """Metadata field `f` of a GGUFReader into writer `w`, with its type."""
    ty = f.types[0]
    if ty == GGUFValueType.ARRAY:
        sub = f.types[1]
        if sub == GGUFValueType.STRING:
            vals = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        else:
            vals = [f.parts[i].tolist()[0] for i in f.data]
        w.add_key_value(f.name, vals, GGUFValueType.ARRAY, sub_type=sub)
    elif ty == GGUFValueType.STRING:
        w.add_key_value(f.name, bytes(f.parts[f.data[0]]).decode("utf-8"), ty)
    else:
        w.add_key_value(f.name, f.parts[f.data[0]].tolist()[0], ty)


def main():
    src, prefix, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    suppress = None
    if len(sys.argv) == 6 and sys.argv[4] == "--suppress":
        suppress = [int(v) for v in sys.argv[5].split(",")]
    r = GGUFReader(src)
    arch = bytes(r.fields["general.architecture"].parts[r.fields["general.architecture"].data[0]]).decode()
    tensors = list(r.tensors)
    per = -(-len(tensors) // n)
    for k in range(n):
        w = GGUFWriter(f"{prefix}-{k + 1:05d}-of-{n:05d}.gguf", arch if k == 0 else None)
        if k == 0:
            for f in r.fields.values():
                if f.name not in SKIP and not f.name.startswith("split."):
                    copy_kv(w, f)
            w.add_key_value("split.tensors.count", len(tensors), GGUFValueType.INT32)
            if suppress is not None:
                w.add_key_value("tokenizer.ggml.suppress_tokens", suppress, GGUFValueType.ARRAY, sub_type=GGUFValueType.INT32)
        w.add_key_value("split.no", k, GGUFValueType.UINT16)
        w.add_key_value("split.count", n, GGUFValueType.UINT16)
        for t in tensors[k * per:(k + 1) * per]:
            # The stored bytes as they are (the reader gives a quantized tensor as rows of bytes).
            w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


if __name__ == "__main__":
    main()

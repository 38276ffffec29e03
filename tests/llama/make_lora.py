#!/usr/bin/env python3
"""A random LoRA adapter GGUF for a base GGUF's shapes, for the libllama tests (run.sh makes
them in models/, which git ignores; test_llama_cpp.py loads them with Llama(lora_path=...)).

Usage (from the repository root; run.sh sets PYTHONPATH to the llama-cpp-python 0.3.36 sdist's
vendored gguf-py and the pinned numpy of tests/llama/fetch.sh):
    python3 tests/llama/make_lora.py BASE.gguf -o OUT.gguf [--rank 16] [--alpha 16] [--seed 1]
                                     [--alora 1,2,3]

What is written is llama.cpp's adapter format, as its src/llama-adapter.cpp reads it (and
tests/fixtures/lora_to_gguf.py writes from a PEFT folder):
  general.architecture   the base's (read from BASE.gguf)
  general.type           "adapter"
  adapter.type           "lora"
  adapter.lora.alpha     float32 (llama.cpp scales each pair by scale * alpha / rank)
  general.name           "packlm test lora r<rank> seed <seed>"
  adapter.alora.invocation_tokens  (only with --alora) uint32 array: an activated LoRA,
                         which the facade refuses
  blk.N.{attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down}.weight.lora_a / .lora_b
                         float32 for every N of the base; lora_a has GGUF ne [in, r], lora_b
                         ne [r, out], where the base's blk.N.<map>.weight has ne [in, out].
Values: numpy's default_rng(seed), A ~ N(0, 1/sqrt(in)), B ~ N(0, 0.02), drawn in the order of
the layers, then of the maps above, A before B. With the default alpha = rank (scaling 1) the
adapter moves SmolLM2-135M's logits by about a tenth of their spread: greedy text changes, the
model still writes words.
"""

import argparse
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

MAPS = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]


def field_str(reader, key):
    f = reader.fields[key]
    return bytes(f.parts[f.data[0]]).decode()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=None, help="default: the rank (scaling 1)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--alora", default=None, help="comma-separated invocation token ids")
    args = ap.parse_args()

    reader = GGUFReader(args.base)
    arch = field_str(reader, "general.architecture")
    # ne (GGUF order: [in, out]) of every adapted weight, by (layer, map).
    shapes = {}
    for t in reader.tensors:
        parts = t.name.split(".")
        if len(parts) == 4 and parts[0] == "blk" and parts[2] in MAPS and parts[3] == "weight":
            shapes[(int(parts[1]), parts[2])] = [int(d) for d in t.shape]
    if not shapes:
        sys.exit(f"{args.base}: no blk.N.<map>.weight tensors")
    r = args.rank
    rng = np.random.default_rng(args.seed)
    w = GGUFWriter(args.out, arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", float(r if args.alpha is None else args.alpha))
    w.add_string("general.name", f"packlm test lora r{r} seed {args.seed}")
    if args.alora:
        tokens = [int(x) for x in args.alora.split(",")]
        w.add_key_value("adapter.alora.invocation_tokens", tokens, GGUFValueType.ARRAY, sub_type=GGUFValueType.UINT32)
    for layer in sorted({l for l, _ in shapes}):
        for m in MAPS:
            if (layer, m) not in shapes:
                continue
            n_in, n_out = shapes[(layer, m)]
            # numpy shape is the GGUF ne reversed: A (r, in) -> ne [in, r]; B (out, r) -> ne [r, out].
            a = rng.normal(0.0, 1.0 / np.sqrt(n_in), size=(r, n_in)).astype(np.float32)
            b = rng.normal(0.0, 0.02, size=(n_out, r)).astype(np.float32)
            w.add_tensor(f"blk.{layer}.{m}.weight.lora_a", a)
            w.add_tensor(f"blk.{layer}.{m}.weight.lora_b", b)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()

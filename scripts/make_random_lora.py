#!/usr/bin/env python3
"""Write a random LoRA adapter GGUF for a llama-architecture GGUF, for benchmarks only.

    python3 scripts/make_random_lora.py MODEL.gguf -o models/ADAPTER.gguf [--rank 16] [--alpha 16]
        [--seed 0] [--std-a 0.02] [--std-b 0.02] [--maps attn_q,attn_k,...] [--type f32|f16]

Needs numpy and gguf-py (gguf==0.19.0, numpy==2.4.6, as tests/fixtures/lora_to_gguf.py). The
adapter has one lora_a / lora_b pair on each of the seven maps of every layer (attn_q, attn_k,
attn_v, attn_output, ffn_gate, ffn_up, ffn_down), its shapes read from the model's own tensors:
llama.cpp's adapter layout, as tests/fixtures/lora_to_gguf.py writes it:
  general.architecture  the model's (read from MODEL.gguf)
  general.type          "adapter"; adapter.type "lora"; adapter.lora.alpha (float32)
  blk.{i}.{map}.weight.lora_a  f32 (or f16), GGUF ne [in, r]  (numpy shape [r, in])
  blk.{i}.{map}.weight.lora_b  f32 (or f16), GGUF ne [r, out] (numpy shape [out, r])
`--maps` limits the pairs to some of the seven (to see what each part of a layer costs);
`--type f16` stores A and B in f16 instead of llama.cpp's usual f32 (half the bytes). The
values are N(0, std^2), seeded: the adapter is meant to cost what any rank-r adapter costs,
not to change the model usefully (with the defaults the change to the logits is small). The
file goes to models/ (git-ignored) or wherever -o says; nothing is downloaded.
"""
import argparse
import sys

import numpy as np
from gguf import GGUFReader, GGUFWriter

MAPS = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]


def field_str(reader: GGUFReader, key: str) -> str:
    f = reader.fields[key]
    return bytes(f.parts[f.data[0]]).decode("utf-8")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="the base model's GGUF")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=16.0, help="adapter.lora.alpha (scale alpha / rank)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--std-a", type=float, default=0.02)
    ap.add_argument("--std-b", type=float, default=0.02)
    ap.add_argument("--type", choices=["f32", "f16"], default="f32", help="the tensors' type (default f32)")
    ap.add_argument("--maps", default=",".join(MAPS), help="the maps to adapt, comma-separated (default: all seven)")
    a = ap.parse_args()
    maps = a.maps.split(",")
    unknown = [m for m in maps if m not in MAPS]
    if unknown:
        sys.exit(f"make_random_lora: --maps: {unknown} are not among {MAPS}")

    reader = GGUFReader(a.model)
    arch = field_str(reader, "general.architecture")
    n_layer = int(reader.fields[f"{arch}.block_count"].parts[-1][0])
    # GGUF ne of each weight: [in, out].
    shapes = {t.name: [int(x) for x in t.shape] for t in reader.tensors}
    rng = np.random.default_rng(a.seed)
    writer = GGUFWriter(a.out, arch)
    writer.add_type("adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", float(a.alpha))
    n = 0
    for layer in range(n_layer):
        for m in maps:
            name = f"blk.{layer}.{m}.weight"
            if name not in shapes:
                sys.exit(f"make_random_lora: {a.model} has no tensor {name}")
            n_in, n_out = shapes[name]
            dtype = np.float16 if a.type == "f16" else np.float32
            lora_a = (rng.standard_normal((a.rank, n_in)) * a.std_a).astype(dtype)
            lora_b = (rng.standard_normal((n_out, a.rank)) * a.std_b).astype(dtype)
            writer.add_tensor(f"{name}.lora_a", lora_a)
            writer.add_tensor(f"{name}.lora_b", lora_b)
            n += 2
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"{a.out}: arch {arch}, {n_layer} layers, rank {a.rank}, alpha {a.alpha}, {n} {a.type} tensors", file=sys.stderr)


if __name__ == "__main__":
    main()

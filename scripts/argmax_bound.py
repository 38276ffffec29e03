#!/usr/bin/env python3
"""How many vocabulary rows a cheap bound leaves to check exactly, for a greedy verify's argmax
over a Q8_0 output projection.

    VENV/bin/python scripts/argmax_bound.py MODEL.gguf [--positions 40:120:8]

VENV is the reference environment (torch, transformers, gguf, numpy). The final hidden states
come from HF transformers on the GGUF (dequantized), at positions of the start of
examples/bench/code_edit.txt; each is rounded to 8 bits per 32 values as `fast` rounds
activations (d = max|x| / 127, q = round(x / d)), and multiplied by the output matrix as
stored (token_embd.weight, Q8_0: an f16 scale and 32 int8 values a block). Per position it
prints, of the vocabulary:

- `hi4`, `hi6`: the rows whose upper bound reaches the largest lower bound when each weight q
  is taken as its top 4 or 6 bits, floor(q / 16) or floor(q / 4), the dropped low bits (0..15 or
  0..3) bounded per block by the activations' positive and negative sums; every other row is
  provably below the argmax, so only these would be computed exactly;
- `half+CS`: the same with half of each row's blocks exact and the rest bounded by
  Cauchy-Schwarz per block;
- `within1`: the rows within 1.0 of the largest logit (how close the competition is).

Prints only; installs nothing.
"""
import argparse
import os

import numpy as np
import torch
from gguf import GGUFReader
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))


def q8_0_matrix(path):
    """The output matrix as stored: scales (V, blocks) and int8 values (V, blocks, 32)."""
    reader = GGUFReader(path)
    t = next(x for x in reader.tensors if x.name == "token_embd.weight")
    if t.tensor_type.name != "Q8_0":
        raise SystemExit(f"token_embd.weight is {t.tensor_type.name}, not Q8_0")
    raw = np.asarray(t.data).view(np.uint8).reshape(-1, 34)
    width, vocab = int(t.shape[0]), int(t.shape[1])
    scales = raw[:, :2].copy().view(np.float16).astype(np.float32).reshape(vocab, width // 32)
    values = raw[:, 2:].copy().view(np.int8).astype(np.int32).reshape(vocab, width // 32, 32)
    return scales, values


def survivors(lower, upper):
    return int((upper >= lower.max()).sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--positions", default="40:120:8", help="start:end:step")
    a = ap.parse_args()
    start, end, step = (int(x) for x in a.positions.split(":"))
    dw, qw = q8_0_matrix(a.model)
    vocab, nb = dw.shape
    folder, name = os.path.dirname(os.path.abspath(a.model)), os.path.basename(a.model)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    text = open(os.path.join(HERE, "..", "examples", "bench", "code_edit.txt")).read()
    ids = tok(text, return_tensors="pt").input_ids[:, :end]
    with torch.no_grad():
        hidden = model(ids, output_hidden_states=True).hidden_states[-1][0].numpy()
    print(f"{name}: vocabulary {vocab}, {nb} blocks a row")
    for pos in range(start, min(end, hidden.shape[0]), step):
        x = hidden[pos].reshape(nb, 32)
        da = np.abs(x).max(axis=1) / 127.0
        qa = np.round(x / np.where(da == 0, 1, da)[:, None]).astype(np.int32)
        t = dw * da[None, :]
        exact = np.einsum("vbk,bk->vb", qw, qa)
        logits = (t * exact).sum(1)
        pos_sum, neg_sum = np.where(qa > 0, qa, 0).sum(1), np.where(qa < 0, qa, 0).sum(1)
        row = {}
        for label, unit in (("hi4", 16), ("hi6", 4)):
            high = np.einsum("vbk,bk->vb", np.floor_divide(qw, unit), qa) * unit
            lo, hi = t * (high + (unit - 1) * neg_sum[None, :]), t * (high + (unit - 1) * pos_sum[None, :])
            row[label] = survivors(np.minimum(lo, hi).sum(1), np.maximum(lo, hi).sum(1))
        k = nb // 2
        part = (t[:, :k] * exact[:, :k]).sum(1)
        rest = (np.abs(t[:, k:]) * np.sqrt((qw[:, k:] ** 2).sum(2)) * np.sqrt((qa[k:] ** 2).sum(1))[None, :]).sum(1)
        row["half+CS"] = survivors(part - rest, part + rest)
        row["within1"] = int((logits >= logits.max() - 1).sum())
        print(f"position {pos}: {row}, top logit {logits.max():.2f}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Write a random-weight Qwen3-MoE GGUF for benchmarks: the same file for packlm and llama.cpp.

    /path/to/venv/bin/python scripts/make_moe_bench_model.py \\
        --quantize-with /path/to/llama-cpp-venv/bin/python

Run from the repository root. Pinned versions: python 3.11, numpy==2.4.6, gguf==0.19.0 (the
interpreter that runs this script); llama-cpp-python==0.3.36 (the one given to --quantize-with,
which only has to import llama_cpp). Nothing is downloaded.

The model: architecture "qwen3moe" (as llama.cpp's converter writes Qwen3MoeForCausalLM), hidden
512, 8 layers, 8 attention heads of 64, 4 KV heads, q_norm/k_norm, every layer sparse with 8
experts of width 1024 and 2 used per token (top-k weights renormalised, as llama.cpp's qwen3moe
does), RMSNorm eps 1e-6, rope base 1e6, context 4096, an output matrix of its own. The
vocabulary and every tokenizer.* key (tokens, types, merges, special ids, pre-tokenizer, chat
template) are copied from models/SmolLM2-135M-Instruct.Q4_1.gguf (--tokenizer-from), so the
vocabulary is SmolLM2's 49152 tokens and ordinary English text tokenizes as it does there.

The weights are N(0, std^2) from numpy's default_rng(--seed), drawn tensor by tensor in file
order; norms are ones. They are meaningless as a language model: the file exists to be timed.
The scales keep every activation O(1): linear maps std 0.02 (embedding) and 0.05 (the rest), so
the logits have a std near 1; the router std 0.1 gives router logits of std ~2.3 over a
unit-RMS input, so each token picks its own experts and the second expert's weight is not
negligible. Before writing, a float32 numpy forward of a short prompt checks that the logits
are finite and prints how often each expert was picked.

Writes (models/ is git-ignored):
    models/moe-bench-8x2.f16.gguf   weights F16, norms and router F32
and, with --quantize-with, llama.cpp's own quantizer (llama_model_quantize, its default tensor
type mix for the file type, as the llama-quantize tool does; scripts/requantize.py) makes
    models/moe-bench-8x2.Q8_0.gguf
    models/moe-bench-8x2.Q4_0.gguf
(the Q8_0 file is Q8_0 throughout; in the Q4_0 file llama.cpp's mix puts output.weight in Q6_K
and attn_k / attn_v in Q8_0, its rule for 8-expert models, and the rest in Q4_0; norms and
routers stay F32 in both), then opens each with llama.cpp and checks that the logits of a short prompt are finite. Prints
the parameter count and each file's size and sha256.
"""
import argparse
import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import gguf

ARCH = "qwen3moe"
NAME = "packlm MoE bench"
STEM = "moe-bench-8x2"

HIDDEN = 512
N_LAYER = 8
N_HEAD = 8
N_KV = 4
HEAD_DIM = 64
N_EXPERT = 8
N_EXPERT_USED = 2
EXPERT_FF = 1024
FF = 1024  # qwen3moe.feed_forward_length: written, not used by a model whose layers are all sparse
RMS_EPS = 1e-6
ROPE_BASE = 1e6
CONTEXT = 4096

STD_EMBD = 0.02
STD_LINEAR = 0.05
STD_ROUTER = 0.1


def tensors(seed, n_vocab):
    """(name, array) in file order; linear weights as numpy [out, in] (GGUF ne [in, out])."""
    rng = np.random.default_rng(seed)

    def normal(std, *shape):
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(std)

    def ones(n):
        return np.ones(n, dtype=np.float32)

    yield "token_embd.weight", normal(STD_EMBD, n_vocab, HIDDEN)  # [n_vocab, hidden]
    yield "output_norm.weight", ones(HIDDEN)  # [hidden]
    yield "output.weight", normal(STD_LINEAR, n_vocab, HIDDEN)  # [n_vocab, hidden]
    for i in range(N_LAYER):
        p = f"blk.{i}"
        yield f"{p}.attn_norm.weight", ones(HIDDEN)  # [hidden]
        yield f"{p}.attn_q.weight", normal(STD_LINEAR, N_HEAD * HEAD_DIM, HIDDEN)  # [n_head * head_dim, hidden]
        yield f"{p}.attn_k.weight", normal(STD_LINEAR, N_KV * HEAD_DIM, HIDDEN)  # [n_kv * head_dim, hidden]
        yield f"{p}.attn_v.weight", normal(STD_LINEAR, N_KV * HEAD_DIM, HIDDEN)  # [n_kv * head_dim, hidden]
        yield f"{p}.attn_output.weight", normal(STD_LINEAR, HIDDEN, N_HEAD * HEAD_DIM)  # [hidden, n_head * head_dim]
        yield f"{p}.attn_q_norm.weight", ones(HEAD_DIM)  # [head_dim]
        yield f"{p}.attn_k_norm.weight", ones(HEAD_DIM)  # [head_dim]
        yield f"{p}.ffn_norm.weight", ones(HIDDEN)  # [hidden]
        yield f"{p}.ffn_gate_inp.weight", normal(STD_ROUTER, N_EXPERT, HIDDEN)  # [n_expert, hidden]
        yield f"{p}.ffn_gate_exps.weight", normal(STD_LINEAR, N_EXPERT, EXPERT_FF, HIDDEN)  # [n_expert, ff, hidden]
        yield f"{p}.ffn_up_exps.weight", normal(STD_LINEAR, N_EXPERT, EXPERT_FF, HIDDEN)  # [n_expert, ff, hidden]
        yield f"{p}.ffn_down_exps.weight", normal(STD_LINEAR, N_EXPERT, HIDDEN, EXPERT_FF)  # [n_expert, hidden, ff]


def stored(name, arr):
    """F32 for 1-D tensors and the router (llama.cpp's converter keeps ffn_gate_inp in F32 too),
    F16 for the rest."""
    if arr.ndim == 1 or name.endswith("ffn_gate_inp.weight"):
        return arr.astype(np.float32)
    return arr.astype(np.float16)


def rms_norm(x, w):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + RMS_EPS) * w


def rope_neox(x, pos):
    """x [T, heads, head_dim]; llama.cpp's NEOX rotation (halves), which qwen3moe uses."""
    half = HEAD_DIM // 2
    inv = ROPE_BASE ** (-np.arange(half, dtype=np.float64) * 2 / HEAD_DIM)
    ang = np.outer(pos, inv)[:, None, :]
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def forward(w, ids):
    """float32 logits [T, n_vocab] of one causal pass over ids, and the expert pick counts per layer."""
    f = lambda n: w[n].astype(np.float32)  # noqa: E731
    T = len(ids)
    x = f("token_embd.weight")[ids]  # [T, hidden]
    pos = np.arange(T)
    mask = np.triu(np.full((T, T), -np.inf, dtype=np.float32), 1)
    counts = []
    for i in range(N_LAYER):
        p = f"blk.{i}"
        h = rms_norm(x, f(f"{p}.attn_norm.weight"))
        q = (h @ f(f"{p}.attn_q.weight").T).reshape(T, N_HEAD, HEAD_DIM)
        k = (h @ f(f"{p}.attn_k.weight").T).reshape(T, N_KV, HEAD_DIM)
        v = (h @ f(f"{p}.attn_v.weight").T).reshape(T, N_KV, HEAD_DIM)
        q = rope_neox(rms_norm(q, f(f"{p}.attn_q_norm.weight")), pos)
        k = rope_neox(rms_norm(k, f(f"{p}.attn_k_norm.weight")), pos)
        rep = N_HEAD // N_KV
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(HEAD_DIM) + mask
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        o = np.einsum("hts,shd->thd", s, v).reshape(T, N_HEAD * HEAD_DIM)
        x = x + o @ f(f"{p}.attn_output.weight").T
        h = rms_norm(x, f(f"{p}.ffn_norm.weight"))
        r = h @ f(f"{p}.ffn_gate_inp.weight").T  # [T, n_expert]
        prob = np.exp(r - r.max(axis=-1, keepdims=True))
        prob /= prob.sum(axis=-1, keepdims=True)
        top = np.argsort(-prob, axis=-1)[:, :N_EXPERT_USED]
        wt = np.take_along_axis(prob, top, axis=-1)
        wt /= wt.sum(axis=-1, keepdims=True)
        counts.append(np.bincount(top.reshape(-1), minlength=N_EXPERT).tolist())
        gate, up, down = f(f"{p}.ffn_gate_exps.weight"), f(f"{p}.ffn_up_exps.weight"), f(f"{p}.ffn_down_exps.weight")
        y = np.zeros_like(x)
        for t in range(T):
            for e, we in zip(top[t], wt[t]):
                g = gate[e] @ h[t]
                y[t] += we * (down[e] @ (g / (1 + np.exp(-g)) * (up[e] @ h[t])))
        x = x + y
    return rms_norm(x, f("output_norm.weight")) @ f("output.weight").T, counts


def copy_tokenizer(w, reader):
    """Every tokenizer.* key of reader, with its own GGUF types; returns the vocabulary size."""
    n_vocab = None
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        val = field.contents()
        w.add_key_value(key, val, vtype, sub_type=sub)
        if key == "tokenizer.ggml.tokens":
            n_vocab = len(val)
    if n_vocab is None:
        sys.exit("make_moe_bench_model: the tokenizer source has no tokenizer.ggml.tokens")
    return n_vocab


def describe(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    print(f"{path}: {path.stat().st_size} bytes, sha256 {h.hexdigest()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer-from", default="models/SmolLM2-135M-Instruct.Q4_1.gguf",
                    help="GGUF whose tokenizer.* keys are copied (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--out-dir", default="models")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quantize-with", metavar="PYTHON",
                    help="interpreter with llama_cpp importable: also write the Q8_0 and Q4_0 files")
    a = ap.parse_args()

    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    f16_path = out_dir / f"{STEM}.f16.gguf"
    reader = gguf.GGUFReader(a.tokenizer_from)

    w = gguf.GGUFWriter(str(f16_path), ARCH)
    w.add_name(NAME)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_expert_count(N_EXPERT)
    w.add_expert_used_count(N_EXPERT_USED)
    w.add_expert_feed_forward_length(EXPERT_FF)
    n_vocab = copy_tokenizer(w, reader)
    w.add_vocab_size(n_vocab)

    weights = {name: stored(name, arr) for name, arr in tensors(a.seed, n_vocab)}
    n_params = sum(t.size for t in weights.values())
    per_layer_experts = N_EXPERT * 3 * EXPERT_FF * HIDDEN
    active = n_params - N_LAYER * per_layer_experts * (N_EXPERT - N_EXPERT_USED) // N_EXPERT
    print(f"parameters: {n_params} ({n_params / 1e6:.1f}M; {active / 1e6:.1f}M active per token), "
          f"vocabulary {n_vocab}")

    ids = [int(t) for t in np.random.default_rng(a.seed + 1).integers(0, n_vocab, 24)]
    logits, counts = forward(weights, ids)
    if not np.isfinite(logits).all():
        sys.exit("make_moe_bench_model: the numpy forward gave non-finite logits")
    print(f"numpy forward over {len(ids)} tokens: logits std {logits.std():.3f}, "
          f"expert picks per layer {counts}")

    for name, arr in weights.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    check = gguf.GGUFReader(str(f16_path))
    assert [t.name for t in check.tensors] == list(weights), "tensor order"
    outputs = [f16_path]

    if a.quantize_with:
        quant = [("Q8_0", out_dir / f"{STEM}.Q8_0.gguf"), ("Q4_0", out_dir / f"{STEM}.Q4_0.gguf")]
        argv = [a.quantize_with, str(Path(__file__).with_name("requantize.py")), str(f16_path)]
        for ftype, path in quant:
            argv += [ftype, str(path)]
        # llama.cpp's quantizer logs every tensor on stderr: shown only when the step fails.
        done = subprocess.run(argv, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stderr)
            sys.exit(f"make_moe_bench_model: the quantize step failed ({done.returncode})")
        outputs += [path for _, path in quant]

    for path in outputs:
        describe(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""packlm's `fast` and `exact` precisions against llama.cpp on the same token ids: perplexity and
top-1 agreement with packlm `exact`.

    python3 scripts/perplexity_compare.py MODEL.gguf --llama-python VENV/bin/python \
        [--text /usr/share/common-licenses/GPL-3] [--tokens 512] [--threads 2]

The ids are packlm's tokenization of the text (BOS per the pack), cut to --tokens; packlm's side
is `cargo run --release --example perplexity`, llama.cpp's is llama-cpp-python (already installed
in the Python given by --llama-python; this script installs nothing) with logits_all. Row i's
logits score id i + 1 in both. Prints one JSON line per engine and the two criteria:
fast ppl / llama.cpp ppl (target <= 1.002) and the top-1 agreement with exact of each.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

from llama_side import CPU_KERNELS

LLAMA_SIDE = CPU_KERNELS + textwrap.dedent(
    """
    import json, math, sys
    import numpy as np
    from llama_cpp import Llama
    path, threads, ids = sys.argv[1], int(sys.argv[2]), json.load(open(sys.argv[3]))
    llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=len(ids) + 8,
                n_batch=len(ids), n_ubatch=len(ids), logits_all=True, verbose=False)
    llm.eval(ids[:-1])
    logits = np.array(llm.scores[: len(ids) - 1], dtype=np.float64)
    mx = logits.max(axis=1, keepdims=True)
    lse = (mx[:, 0] + np.log(np.exp(logits - mx).sum(axis=1)))
    nll = float((lse - logits[np.arange(len(ids) - 1), ids[1:]]).sum())
    n = len(ids) - 1
    print(json.dumps({"engine": "llama.cpp", "n": n, "nll": nll, "ppl": math.exp(nll / n),
                      "argmax": [int(a) for a in logits.argmax(axis=1)]}))
    """
)


def run_json(cmd):
    return json.loads(subprocess.check_output(cmd).decode().strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--llama-python", required=True)
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    text = open(a.text, encoding="utf-8").read()
    ids = json.loads(subprocess.check_output(
        ["cargo", "run", "-q", "--release", "--bin", "packlm", "--", "tokenize", a.model, "--text", text,
         "--no-special"]).decode())[: a.tokens]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(ids, f)
        ids_path = f.name
    try:
        ours = {}
        for p in ("exact", "fast"):
            ours[p] = run_json(["cargo", "run", "-q", "--release", "--example", "perplexity", "--", a.model, ids_path,
                                "--precision", p, "--threads", str(a.threads)])
        theirs = run_json([a.llama_python, "-c", LLAMA_SIDE, a.model, str(a.threads), ids_path])
    finally:
        os.unlink(ids_path)
    exact_top = ours["exact"]["argmax"]

    def agree(r):
        return sum(x == y for x, y in zip(r["argmax"], exact_top)) / len(exact_top)

    rows = [("packlm exact", ours["exact"]), ("packlm fast", ours["fast"]), ("llama.cpp", theirs)]
    for name, r in rows:
        print(json.dumps({"engine": name, "n": r["n"], "ppl": r["ppl"], "top1_agree_exact": agree(r)}))
    print(f"fast ppl / llama.cpp ppl = {ours['fast']['ppl'] / theirs['ppl']:.5f} (target <= 1.002)")
    print(f"top-1 agreement with exact: fast {agree(ours['fast']):.4f}, llama.cpp {agree(theirs):.4f} "
          "(target: fast >= llama.cpp)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

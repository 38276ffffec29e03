#!/usr/bin/env python3
"""Many sessions in one pass, packlm against llama.cpp's multi-sequence decode, on the same GGUF,
prompt ids and thread count.

    python3 scripts/bench_sessions_compare.py MODEL.gguf --llama-python VENV/bin/python
        [--threads 2] [--sessions 1,2,4,8,16] [--decode 32] [--rounds 5]

packlm's side is `examples/bench --sessions`: N sessions prefill N prompts of 128 tokens in one
pass, then decode greedy steps of all N in one pass each. llama.cpp's side does the same through
llama-cpp-python's low-level API: one context with n_seq_max = N, one llama_decode for all N
prompts, then one llama_decode per step holding the N sequences' next tokens (greedy, numpy's
argmax over llama_get_logits_ith). Both use packlm's prompt ids. llama-cpp-python must already be
installed in the Python given by --llama-python (this script installs nothing). The engines
alternate, each run in its own process; the script prints medians and [min-max] of aggregate
decode and prefill tok/s per N, and the ratio packlm / llama.cpp.
"""
import argparse
import json
import statistics
import subprocess
import textwrap

from llama_side import CPU_KERNELS

LLAMA_SIDE = CPU_KERNELS + textwrap.dedent(
    """
    import ctypes, json, sys, time
    import numpy as np
    import llama_cpp as L
    path, threads, prompts, n_decode = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
    n = len(prompts)
    L.llama_backend_init()
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    cp = L.llama_context_default_params()
    cp.n_ctx = n * (max(len(p) for p in prompts) + n_decode + 8)
    cp.n_batch = max(512, sum(len(p) for p in prompts))
    cp.n_seq_max = n
    cp.n_threads = cp.n_threads_batch = threads
    ctx = L.llama_init_from_model(model, cp)
    batch = L.llama_batch_init(cp.n_batch, 0, 1)
    def run(entries):
        batch.n_tokens = len(entries)
        for i, (t, p, s, want) in enumerate(entries):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = t, p, 1, want
            batch.seq_id[i][0] = s
        assert L.llama_decode(ctx, batch) == 0
    entries, last = [], []
    for s, p in enumerate(prompts):
        for j, t in enumerate(p):
            entries.append((t, j, s, j == len(p) - 1))
        last.append(len(entries) - 1)
    t0 = time.perf_counter()
    run(entries)
    prefill_s = time.perf_counter() - t0
    def argmax(i):
        return int(np.argmax(np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(n_vocab,))))
    nxt = [argmax(i) for i in last]
    pos = [len(p) for p in prompts]
    t0 = time.perf_counter()
    for _ in range(n_decode):
        run([(nxt[s], pos[s], s, True) for s in range(n)])
        nxt = [argmax(s) for s in range(n)]
        pos = [p + 1 for p in pos]
    decode_s = time.perf_counter() - t0
    print(json.dumps({"engine": "llama.cpp", "sessions": n, "prefill_tok_s": sum(len(p) for p in prompts) / prefill_s,
                      "decode_tok_s": n * n_decode / decode_s}))
    """
)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--llama-python", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sessions", default="1,2,4,8,16")
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    ns = [int(x) for x in a.sessions.split(",")]
    results = {n: {"packlm": [], "llama.cpp": []} for n in ns}
    for _ in range(a.rounds):
        out = subprocess.check_output(["cargo", "run", "-q", "--release", "--example", "bench", "--", a.model, "--threads", str(a.threads),
                                       "--sessions", a.sessions, "--decode", str(a.decode)]).decode()
        for line in out.strip().splitlines():
            r = json.loads(line)
            results[r["sessions"]]["packlm"].append(r)
            lc = subprocess.check_output([a.llama_python, "-c", LLAMA_SIDE, a.model, str(a.threads), json.dumps(r["prompt_ids"]), str(a.decode)])
            results[r["sessions"]]["llama.cpp"].append(json.loads(lc.decode().strip().splitlines()[-1]))

    def cell(rows, key):
        xs = [r[key] for r in rows]
        return statistics.median(xs), min(xs), max(xs)

    print(f"{a.model}, {a.threads} threads, {a.rounds} alternating rounds, {a.decode} decode steps")
    print("N | decode tok/s packlm | llama.cpp | ratio | prefill tok/s packlm | llama.cpp | ratio")
    for n in ns:
        pd, ld = cell(results[n]["packlm"], "decode_tok_s"), cell(results[n]["llama.cpp"], "decode_tok_s")
        pp, lp = cell(results[n]["packlm"], "prefill_tok_s"), cell(results[n]["llama.cpp"], "prefill_tok_s")
        f = lambda c: f"{c[0]:.0f} [{c[1]:.0f}-{c[2]:.0f}]"
        print(f"{n} | {f(pd)} | {f(ld)} | {pd[0] / ld[0]:.2f} | {f(pp)} | {f(lp)} | {pp[0] / lp[0]:.2f}")


if __name__ == "__main__":
    main()

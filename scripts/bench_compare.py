#!/usr/bin/env python3
"""packlm against llama.cpp on the same GGUF, token ids and thread count, in one run.

    python3 scripts/bench_compare.py MODEL.gguf --llama-python VENV/bin/python [--threads 2]
        [--precision exact|fast] [--spec-n 128] [--spec-k 8]

packlm's numbers come from `cargo run --release --example bench`; llama.cpp's from
llama-cpp-python, which must already be installed in the Python given by --llama-python (this
script installs nothing). Each engine runs in its own process so that peak RSS is its own.
Prints both JSON lines and the ratios packlm / llama.cpp (above 1 means packlm is faster,
except for open time and RSS, where below 1 is better), then packlm's own numbers that have no
llama.cpp counterpart here: the precision in use (--precision, default the pack's: fast for
block-quantized weights), the cost of a verify of 8 drafted rows in decode steps (all rejected,
all accepted), and the speedup of n-gram drafting on a code-editing request.
"""
import argparse
import json
import subprocess
import sys
import textwrap

from llama_side import CPU_KERNELS

LLAMA_SIDE = CPU_KERNELS + textwrap.dedent(
    """
    import json, resource, sys, time
    from llama_cpp import Llama
    path, threads, ids, n_decode = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
    t = time.perf_counter()
    llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=1024,
                n_batch=512, verbose=False)
    open_s = time.perf_counter() - t
    llm.tokenize(b"Hello, world")
    open_tokenize_s = time.perf_counter() - t
    best = 1e9
    for _ in range(3):
        llm.reset()
        t = time.perf_counter()
        llm.eval(ids)
        best = min(best, time.perf_counter() - t)
    llm.reset()
    llm.eval(ids)
    tok = ids[-1]
    t = time.perf_counter()
    for _ in range(n_decode):  # decode cost does not depend on which token is fed
        llm.eval([tok])
    decode_s = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"engine": "llama.cpp", "threads": threads, "open_s": open_s, "open_tokenize_s": open_tokenize_s,
                      "prompt_tokens": len(ids), "prefill_tok_s": len(ids) / best,
                      "decode_tok_s": n_decode / decode_s, "peak_rss_mib": rss}))
    """
)


def packlm_side(model, threads, prompt_tokens, decode, precision=None, spec_n=128, spec_k=8):
    """packlm's bench JSON (examples/bench.rs) for one run."""
    cmd = ["cargo", "run", "-q", "--release", "--example", "bench", "--", model, "--threads", str(threads),
           "--prompt-tokens", str(prompt_tokens), "--decode", str(decode), "--spec-n", str(spec_n), "--spec-k", str(spec_k)]
    if precision:
        cmd += ["--precision", precision]
    return json.loads(subprocess.check_output(cmd).decode().strip().splitlines()[-1])


def prompt_ids(model, n):
    """The prompt ids packlm's bench uses (its tokenizer; the GGUF's vocabulary is shared)."""
    text = "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step. " * 64
    ids = json.loads(subprocess.check_output(
        ["cargo", "run", "-q", "--release", "--bin", "packlm", "--", "tokenize", model, "--text", text]).decode())
    return ids[:n]


def llama_side(llama_python, model, threads, ids, decode):
    """llama.cpp's JSON for one run, through llama-cpp-python."""
    out = subprocess.check_output([llama_python, "-c", LLAMA_SIDE, model, str(threads), json.dumps(ids), str(decode)])
    return json.loads(out.decode().strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--llama-python", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--precision", choices=["exact", "fast"], default=None,
                    help="packlm's precision (default: the pack's)")
    ap.add_argument("--spec-n", type=int, default=128, help="tokens generated for spec_speedup_code")
    ap.add_argument("--spec-k", type=int, default=8, help="most tokens drafted per verify for spec_speedup_code")
    a = ap.parse_args()
    ours = packlm_side(a.model, a.threads, a.prompt_tokens, a.decode, a.precision, a.spec_n, a.spec_k)
    theirs = llama_side(a.llama_python, a.model, a.threads, prompt_ids(a.model, a.prompt_tokens), a.decode)
    print(json.dumps(ours))
    print(json.dumps(theirs))
    for key in ("prefill_tok_s", "decode_tok_s", "open_s", "open_tokenize_s", "peak_rss_mib"):
        print(f"{key}: packlm / llama.cpp = {ours[key] / theirs[key]:.2f}")
    print(f"packlm precision: {ours['precision']}")
    print(f"verify_k8_over_step (8 drafts, all rejected): {ours['verify_k8_over_step']:.2f} decode steps")
    print(f"verify_k8_over_step_accepted (8 drafts, all accepted): {ours['verify_k8_over_step_accepted']:.2f} decode steps")
    print(f"spec_speedup_code (n-gram drafting, n={ours['spec_n']}, k={ours['spec_k']}, "
          f"{ours['spec_accepted']} of {ours['spec_drafted']} drafts accepted): {ours['spec_speedup_code']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

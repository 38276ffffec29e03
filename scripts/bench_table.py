#!/usr/bin/env python3
"""The benchmark table of BENCHMARKS.md: packlm against llama.cpp on several GGUFs, 1 and 2 threads,
the median (and range) of alternating runs, with the machine's read bandwidth and each decode's
fraction of the bandwidth roofline.

    python3 scripts/bench_table.py --llama-python VENV/bin/python [--runs 5] MODEL.gguf ...

Each round runs packlm's bench (scripts/bench_compare.py's packlm_side, at the pack's default
precision) then llama.cpp's (llama_side), one process each, on the same prompt ids and thread
count; `exact` decode and prefill come from separate packlm runs. Roofline: a decode step reads
every weight byte once, so its floor is tensor bytes / read bandwidth (examples/bandwidth.rs,
the same thread count); the fraction is measured tok/s over that floor's tok/s. Run it on a
quiet machine: llama.cpp's threads collapse when another process takes a core. Prints JSON
lines as it goes, then the markdown table.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import llama_side, packlm_side, prompt_ids  # noqa: E402


def bandwidth(threads):
    out = subprocess.check_output(["cargo", "run", "-q", "--release", "--example", "bandwidth", "--", "--threads", str(threads)])
    return json.loads(out.decode().strip().splitlines()[-1])["read_gb_s"]


def tensor_bytes(model):
    """Bytes of the weights a decode step reads: the file less its header, near enough."""
    return os.path.getsize(model)


def med(xs):
    return statistics.median(xs)


def rng(xs, fmt="{:.0f}"):
    return f"{fmt.format(min(xs))}-{fmt.format(max(xs))}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--llama-python", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--exact-runs", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    a = ap.parse_args()
    subprocess.check_call(["cargo", "build", "-q", "--release", "--example", "bench", "--example", "bandwidth", "--bin", "packlm"])
    rows = []
    for threads in [int(t) for t in a.threads.split(",")]:
        bw = bandwidth(threads)
        print(json.dumps({"threads": threads, "read_gb_s": bw}), flush=True)
        for model in a.models:
            ids = prompt_ids(model, 128)
            ours, theirs, exact = [], [], []
            for _ in range(a.runs):
                ours.append(packlm_side(model, threads, 128, 64))
                theirs.append(llama_side(a.llama_python, model, threads, ids, 64))
                print(json.dumps({"model": os.path.basename(model), "packlm": ours[-1], "llama.cpp": theirs[-1]}), flush=True)
            for _ in range(a.exact_runs):
                exact.append(packlm_side(model, threads, 128, 64, precision="exact", spec_n=32))
            col = lambda runs, k: [r[k] for r in runs]  # noqa: E731
            floor_tok_s = bw * 1e9 / tensor_bytes(model)
            rows.append({
                "model": os.path.basename(model), "threads": threads, "precision": ours[0]["precision"],
                "decode": med(col(ours, "decode_tok_s")), "decode_range": rng(col(ours, "decode_tok_s")),
                "decode_llama": med(col(theirs, "decode_tok_s")), "decode_llama_range": rng(col(theirs, "decode_tok_s")),
                "prefill": med(col(ours, "prefill_tok_s")), "prefill_range": rng(col(ours, "prefill_tok_s")),
                "prefill_llama": med(col(theirs, "prefill_tok_s")), "prefill_llama_range": rng(col(theirs, "prefill_tok_s")),
                "exact_decode": med(col(exact, "decode_tok_s")), "exact_prefill": med(col(exact, "prefill_tok_s")),
                "open": med(col(ours, "open_tokenize_s")), "open_llama": med(col(theirs, "open_tokenize_s")),
                "rss": med(col(ours, "peak_rss_mib")), "rss_llama": med(col(theirs, "peak_rss_mib")),
                "verify_rejected": med(col(ours, "verify_k8_over_step")), "verify_accepted": med(col(ours, "verify_k8_over_step_accepted")),
                "spec": med(col(ours, "spec_speedup_code")),
                "roofline": med(col(ours, "decode_tok_s")) / floor_tok_s, "roofline_llama": med(col(theirs, "decode_tok_s")) / floor_tok_s,
                "read_gb_s": bw,
            })
            print(json.dumps(rows[-1]), flush=True)
    print()
    print("| model | thr | decode tok/s packlm (range) | llama.cpp (range) | ratio | prefill tok/s packlm (range) | llama.cpp (range) | ratio "
          "| exact decode / llama.cpp | exact prefill / llama.cpp | open+tokenize s packlm / llama.cpp | peak RSS MiB packlm / llama.cpp "
          "| verify(8) / step rejected, accepted | n-gram speedup (code) | decode roofline packlm, llama.cpp |")
    print("|" + "---|" * 15)
    for r in rows:
        print(f"| {r['model']} | {r['threads']} | {r['decode']:.0f} ({r['decode_range']}) | {r['decode_llama']:.0f} ({r['decode_llama_range']}) "
              f"| {r['decode'] / r['decode_llama']:.2f} | {r['prefill']:.0f} ({r['prefill_range']}) | {r['prefill_llama']:.0f} ({r['prefill_llama_range']}) "
              f"| {r['prefill'] / r['prefill_llama']:.2f} | {r['exact_decode'] / r['decode_llama']:.2f} | {r['exact_prefill'] / r['prefill_llama']:.2f} "
              f"| {r['open']:.3f} / {r['open_llama']:.3f} = {r['open'] / r['open_llama']:.2f} | {r['rss']:.0f} / {r['rss_llama']:.0f} "
              f"| {r['verify_rejected']:.2f}, {r['verify_accepted']:.2f} | {r['spec']:.2f}x | {r['roofline']:.2f}, {r['roofline_llama']:.2f} |")
    print(f"\nread bandwidth (examples/bandwidth.rs): " + ", ".join(f"{t} thread(s) {r['read_gb_s']:.1f} GB/s" for t, r in {r['threads']: r for r in rows}.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

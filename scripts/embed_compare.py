#!/usr/bin/env python3
"""Embeddings per second, packlm against llama.cpp's embedding mode, on the same GGUF and texts.

    python3 scripts/embed_compare.py MODEL.gguf --llama-python VENV/bin/python [--threads 2]
        [--texts 64] [--tokens 64] [--rounds 5] [--repeats 2] [--llama-batches 4096,512] [--groups 4,16]

Texts: --texts texts of exactly --tokens tokens each, built from a fixed word list with
llama.cpp's tokenizer (a vocab-only load); packlm's tokenizer must give the same ids for every
text, or the script stops. Mean pooling, not normalized, --threads threads on both sides.

Each round runs, each in its own process and in alternating order (packlm first on even
rounds, llama.cpp first on odd ones):
- packlm: `examples/embed_bench` (all texts in one `Session::embed` call, then one call per
  text, then calls of --groups texts at a time, --repeats times each, after one warm-up call);
- llama.cpp, once per --llama-batches value B: `Llama(model, embedding=True,
  pooling_type=LLAMA_POOLING_TYPE_MEAN, n_threads, n_threads_batch, n_ctx=texts x tokens,
  n_batch=B, n_ubatch=B)` and `llm.embed(texts)` (llama-cpp-python packs up to B tokens of
  whole texts into each `llama_decode`; B = texts x tokens puts them all in one), --repeats
  times after a warm-up on 4 texts; and with the first B, also one `llm.embed(text)` call per
  text.
Prints every round's texts/s, then the medians with [min-max] over all rounds and repeats, the
ratios packlm / llama.cpp, and how close the two engines' vectors are (cosine, first round).
llama.cpp runs from an installed llama-cpp-python in --llama-python; this script installs
nothing. llama.cpp's OpenMP threads slow down sharply when another process takes a core: run
it on a quiet machine (check `uptime` before and after; the script prints the load averages).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap

from llama_side import CPU_KERNELS

WORDS = """time year people way day man thing woman life child world school state family student
group country problem hand part place case week company system program question work government
number night point home water room mother area money story fact month lot right study book eye
job word business issue side kind head house service friend father power hour game line end
member law car city community name president team minute idea kid body information back parent
face others level office door health person art war history party result change morning reason
research girl guy moment air teacher force education river garden window paper music table
market light voice field letter road village summer winter bread stone island forest bridge
horse train ship doctor street picture answer color sound heart plant animal language""".split()

LLAMA_TEXTS = CPU_KERNELS + textwrap.dedent(
    """
    import json, random, sys
    from llama_cpp import Llama
    path, n_texts, n_tokens, words = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
    llm = Llama(model_path=path, vocab_only=True, verbose=False)
    tok = lambda s: llm.tokenize(s.encode("utf-8"))
    texts, ids = [], []
    for i in range(n_texts):
        rng = random.Random(i)
        parts = []
        while True:
            n = len(tok(" ".join(parts)))
            if n == n_tokens:
                break
            if n > n_tokens:
                parts.pop()
            for _ in range(100):
                w = rng.choice(words)
                if len(tok(" ".join(parts + [w]))) <= n_tokens:
                    parts.append(w)
                    break
            else:
                sys.exit(f"text {i}: no word brings it to {n_tokens} tokens")
        text = " ".join(parts)
        texts.append(text)
        ids.append(tok(text))
    print(json.dumps({"texts": texts, "ids": ids}))
    """
)

LLAMA_SIDE = CPU_KERNELS + textwrap.dedent(
    """
    import json, sys, time
    import llama_cpp
    from llama_cpp import Llama
    path, threads, texts_path, n_batch, repeats, single, out = sys.argv[1:8]
    threads, n_batch, repeats, single = int(threads), int(n_batch), int(repeats), single == "1"
    texts = json.load(open(texts_path))
    n_ctx = max(n_batch, 512)
    llm = Llama(model_path=path, embedding=True, pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN,
                n_threads=threads, n_threads_batch=threads, n_ctx=n_ctx, n_batch=n_batch,
                n_ubatch=n_batch, verbose=False)
    llm.embed(texts[:4])  # warm-up
    batched, one = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        vectors = llm.embed(texts)
        batched.append(len(texts) / (time.perf_counter() - t))
        if single:
            t = time.perf_counter()
            for x in texts:
                llm.embed(x)
            one.append(len(texts) / (time.perf_counter() - t))
    if out:
        json.dump({"vectors": vectors}, open(out, "w"))
    print(json.dumps({"engine": "llama.cpp", "n_batch": n_batch, "n_seq_max": llm.context_params.n_seq_max,
                      "batched_texts_s": batched, "single_texts_s": one}))
    """
)


def med_range(v):
    s = sorted(v)
    return f"{s[len(s) // 2]:.1f} [{s[0]:.1f}-{s[-1]:.1f}]"


def median(v):
    return sorted(v)[len(v) // 2]


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--llama-python", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--texts", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--llama-batches", default=None, help="comma-separated n_batch values (default: texts x tokens, and 512)")
    ap.add_argument("--groups", default="4,16", help="packlm's calls of this many texts at a time too (comma-separated; empty: none)")
    a = ap.parse_args()
    batches = [int(b) for b in a.llama_batches.split(",")] if a.llama_batches else [a.texts * a.tokens, 512]

    made = json.loads(subprocess.check_output([a.llama_python, "-c", LLAMA_TEXTS, a.model, str(a.texts), str(a.tokens), json.dumps(WORDS)]))
    tmp = tempfile.mkdtemp(prefix="embed-compare-")
    texts_path = os.path.join(tmp, "texts.json")
    with open(texts_path, "w") as f:
        json.dump(made["texts"], f)
    subprocess.check_call(["cargo", "build", "-q", "--release", "--example", "embed_bench"])
    exe = os.path.join("target", "release", "examples", "embed_bench")
    print(f"load averages before: {os.getloadavg()}", flush=True)

    def packlm(out=""):
        cmd = [exe, a.model, texts_path, "--threads", str(a.threads), "--repeats", str(a.repeats), "--pooling", "mean", "--groups", a.groups]
        if out:
            cmd += ["--out", out]
        return json.loads(subprocess.check_output(cmd).decode().strip().splitlines()[-1])

    def llama(n_batch, single, out=""):
        cmd = [a.llama_python, "-c", LLAMA_SIDE, a.model, str(a.threads), texts_path, str(n_batch), str(a.repeats), "1" if single else "0", out]
        return json.loads(subprocess.check_output(cmd).decode().strip().splitlines()[-1])

    groups = [g for g in a.groups.split(",") if g]
    results = {"packlm batched": [], "packlm single": []}
    for g in groups:
        results[f"packlm {g} texts per call"] = []
    for b in batches:
        results[f"llama.cpp n_batch={b}"] = []
    results[f"llama.cpp single (n_batch={batches[0]})"] = []
    for r in range(a.rounds):
        print(f"round {r}: load averages {os.getloadavg()}", flush=True)
        first = r == 0
        p_out = os.path.join(tmp, "packlm.json") if first else ""
        l_out = os.path.join(tmp, "llama.json") if first else ""

        def run_packlm():
            p = packlm(p_out)
            if first:
                got = json.load(open(p_out))["ids"]
                if got != made["ids"]:
                    bad = next(i for i, (x, y) in enumerate(zip(got, made["ids"])) if x != y)
                    sys.exit(f"text {bad}: packlm's ids {got[bad]} differ from llama.cpp's {made['ids'][bad]}")
                if p["tokens_min"] != a.tokens or p["tokens_max"] != a.tokens:
                    sys.exit(f"packlm tokenized the texts to {p['tokens_min']}-{p['tokens_max']} tokens, not {a.tokens}")
            results["packlm batched"] += p["batched_texts_s"]
            results["packlm single"] += p["single_texts_s"]
            for g in groups:
                results[f"packlm {g} texts per call"] += p["group_texts_s"][g]
            print(f"round {r}: packlm {json.dumps(p)}", flush=True)

        def run_llama():
            for i, b in enumerate(batches):
                v = llama(b, i == 0, l_out if i == 0 else "")
                results[f"llama.cpp n_batch={b}"] += v["batched_texts_s"]
                if i == 0:
                    results[f"llama.cpp single (n_batch={batches[0]})"] += v["single_texts_s"]
                print(f"round {r}: {json.dumps(v)}", flush=True)

        for side in ([run_packlm, run_llama] if r % 2 == 0 else [run_llama, run_packlm]):
            side()
    print(f"load averages after: {os.getloadavg()}")
    print(f"\n{a.texts} texts of {a.tokens} tokens, mean pooling, {a.threads} threads; texts/s, median [min-max] over {a.rounds} rounds x {a.repeats} repeats:")
    for k, v in results.items():
        print(f"  {k:36} {med_range(v)}")
    best_llama = max(median(results[f"llama.cpp n_batch={b}"]) for b in batches)
    print(f"packlm batched / best llama.cpp batched: {median(results['packlm batched']) / best_llama:.2f}")
    for b in batches:
        print(f"packlm batched / llama.cpp n_batch={b}: {median(results['packlm batched']) / median(results[f'llama.cpp n_batch={b}']):.2f}")
    single_key = f"llama.cpp single (n_batch={batches[0]})"
    print(f"packlm single / llama.cpp single: {median(results['packlm single']) / median(results[single_key]):.2f}")
    pv, lv = json.load(open(os.path.join(tmp, "packlm.json")))["vectors"], json.load(open(os.path.join(tmp, "llama.json")))["vectors"]
    cos = [cosine(x, y) for x, y in zip(pv, lv)]
    print(f"cosine(packlm, llama.cpp) over the {len(cos)} texts: min {min(cos):.5f}, median {median(cos):.5f}")


if __name__ == "__main__":
    main()

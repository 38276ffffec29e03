#!/usr/bin/env python3
"""What a LoRA adapter costs a decode step, packlm and llama.cpp, on the same GGUF and adapter.

    python3 scripts/lora_compare.py MODEL.gguf ADAPTER.gguf --llama-python VENV/bin/python
        [--threads 2] [--rounds 5] [--decode 128] [--prompt-tokens 64]

ADAPTER.gguf is a llama.cpp LoRA adapter GGUF (scripts/make_random_lora.py writes a random
one). Each round runs, in alternating order (packlm first on even rounds):
- packlm: `examples/lora_decode MODEL ADAPTER` (one process; a base session and an adapter
  session alternating, 3 inner rounds, fresh sessions, the prompt prefilled, then --decode
  steps);
- llama.cpp: two processes, `Llama(model)` and `Llama(model, lora_path=ADAPTER)` (scale 1),
  each evaluating the same prompt then --decode single-token evals, base first on even rounds.
Prints each engine's decode tok/s with and without the adapter, medians with [min-max], and
the ratio of time per token (adapter / base): the target is at most 1.15. llama.cpp runs from
an installed llama-cpp-python in --llama-python; this script installs nothing. Run it on a
quiet machine (llama.cpp's OpenMP threads collapse when another process takes a core).
"""
import argparse
import json
import os
import subprocess
import textwrap

from llama_side import CPU_KERNELS

PROMPT = "The history of the city goes back many centuries, to a small settlement by the river where traders met. " * 16

LLAMA_SIDE = CPU_KERNELS + textwrap.dedent(
    """
    import json, sys, time
    from llama_cpp import Llama
    path, lora, threads, n_prompt, n_decode, prompt = sys.argv[1:7]
    threads, n_prompt, n_decode = int(threads), int(n_prompt), int(n_decode)
    llm = Llama(model_path=path, lora_path=lora or None, n_threads=threads, n_threads_batch=threads,
                n_ctx=1024, n_batch=512, verbose=False)
    ids = llm.tokenize(prompt.encode("utf-8"))[:n_prompt]
    llm.reset(); llm.eval(ids); llm.eval([ids[-1]] * 4)  # warm-up
    llm.reset()
    t = time.perf_counter()
    llm.eval(ids)
    prefill = len(ids) / (time.perf_counter() - t)
    t = time.perf_counter()
    for _ in range(n_decode):  # a step's cost does not depend on which token is fed
        llm.eval([ids[-1]])
    print(json.dumps({"lora": bool(lora), "prefill_tok_s": prefill, "decode_tok_s": n_decode / (time.perf_counter() - t)}))
    """
)


def med_range(v):
    s = sorted(v)
    return f"{s[len(s) // 2]:.1f} [{s[0]:.1f}-{s[-1]:.1f}]"


def median(v):
    return sorted(v)[len(v) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("adapter")
    ap.add_argument("--llama-python", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    a = ap.parse_args()
    subprocess.check_call(["cargo", "build", "-q", "--release", "--example", "lora_decode"])
    exe = os.path.join("target", "release", "examples", "lora_decode")
    print(f"load averages before: {os.getloadavg()}", flush=True)
    res = {k: [] for k in ["packlm base", "packlm lora", "packlm ratio", "packlm base prefill", "packlm lora prefill",
                           "llama.cpp base", "llama.cpp lora", "llama.cpp ratio", "llama.cpp base prefill", "llama.cpp lora prefill"]}

    def packlm():
        cmd = [exe, a.model, a.adapter, "--threads", str(a.threads), "--rounds", "3", "--decode", str(a.decode), "--prompt-tokens", str(a.prompt_tokens)]
        v = json.loads(subprocess.check_output(cmd).decode().strip().splitlines()[-1])
        res["packlm base"] += v["base_decode_tok_s"]
        res["packlm lora"] += v["lora_decode_tok_s"]
        res["packlm ratio"] += v["time_per_token_ratio"]
        res["packlm base prefill"] += v["base_prefill_tok_s"]
        res["packlm lora prefill"] += v["lora_prefill_tok_s"]
        print(f"packlm: {json.dumps(v['median'])}", flush=True)

    def llama(r):
        out = {}
        for lora in (["", a.adapter] if r % 2 == 0 else [a.adapter, ""]):
            cmd = [a.llama_python, "-c", LLAMA_SIDE, a.model, lora, str(a.threads), str(a.prompt_tokens), str(a.decode), PROMPT]
            out[bool(lora)] = json.loads(subprocess.check_output(cmd).decode().strip().splitlines()[-1])
        res["llama.cpp base"].append(out[False]["decode_tok_s"])
        res["llama.cpp lora"].append(out[True]["decode_tok_s"])
        res["llama.cpp ratio"].append(out[False]["decode_tok_s"] / out[True]["decode_tok_s"])
        res["llama.cpp base prefill"].append(out[False]["prefill_tok_s"])
        res["llama.cpp lora prefill"].append(out[True]["prefill_tok_s"])
        print(f"llama.cpp: {json.dumps(out[False])} {json.dumps(out[True])}", flush=True)

    for r in range(a.rounds):
        print(f"round {r}: load averages {os.getloadavg()}", flush=True)
        if r % 2 == 0:
            packlm()
            llama(r)
        else:
            llama(r)
            packlm()
    print(f"load averages after: {os.getloadavg()}")
    print(f"\ndecode tok/s and prefill tok/s ({a.prompt_tokens} tokens), {a.threads} threads, median [min-max]:")
    for k, v in res.items():
        print(f"  {k:24} {med_range(v)}")
    print(f"time per token, adapter / base: packlm {median(res['packlm ratio']):.2f}, llama.cpp {median(res['llama.cpp ratio']):.2f}")


if __name__ == "__main__":
    main()

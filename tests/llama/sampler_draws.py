#!/usr/bin/env python3
"""Seeded sampler chains, draw for draw: llama.cpp's samplers applied to the same synthetic
logits by real llama.cpp and by the facade select the same tokens with the same probabilities.

The logits need no model: step s of a chain gives token i (0..511) the logit
((i * 7919 + s * 31) % 512) * 0.0137 - 3.5, a permutation of 512 distinct values (no ties, so
no sort order can differ), as float32. Each chain is llama.cpp's own samplers, ending in
dist(seed); after each apply the selected token is accepted (penalties see it).

    record:  env -u LLAMA_CPP_LIB_PATH VENV/bin/python tests/llama/sampler_draws.py record
             (VENV has llama-cpp-python==0.3.36 compiled by pip: real llama.cpp) writes
             tests/fixtures/llama_cpp/sampler_draws.json
    check:   LLAMA_CPP_LIB_PATH=<facade folder> PYTHONPATH=<sdist>:<pydeps> python3
             tests/llama/sampler_draws.py check   (tests/llama/run.sh does this)
"""

import ctypes
import json
import os
import sys

import llama_cpp as L

N, STEPS = 512, 64
FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../fixtures/llama_cpp/sampler_draws.json")

# (name, [(sampler, args)]) in chain order; dist's seed last.
CHAINS = [
    ("top_k-top_p-min_p-temp", [("top_k", (40,)), ("top_p", (0.9, 1)), ("min_p", (0.05, 1)), ("temp", (0.8,)), ("dist", (1234,))]),
    ("typical-temp", [("typical", (0.9, 1)), ("temp", (1.0,)), ("dist", (42,))]),
    ("penalties-top_k-temp", [("penalties", (N, 64, 1.1, 0.1, 0.05)), ("top_k", (50,)), ("temp", (0.7,)), ("dist", (7,))]),
    ("temp-full", [("temp", (1.5,)), ("dist", (99,))]),
    ("min_p", [("min_p", (0.1, 1)), ("dist", (2024,))]),
    ("dist-only", [("dist", (5,))]),
]


def logits(step):
    return [((i * 7919 + step * 31) % 512) * 0.0137 - 3.5 for i in range(N)]


def run(chain):
    c = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    for name, args in chain:
        s = getattr(L, "llama_sampler_init_" + name)(*args)
        assert s, f"llama_sampler_init_{name}{args} returned NULL"
        L.llama_sampler_chain_add(c, s)
    out = []
    for step in range(STEPS):
        data = (L.llama_token_data * N)()
        for i, l in enumerate(logits(step)):
            data[i].id, data[i].logit, data[i].p = i, l, 0.0
        arr = L.llama_token_data_array(data=data, size=N, selected=-1, sorted=False)
        L.llama_sampler_apply(c, ctypes.byref(arr))
        sel = arr.selected
        assert 0 <= sel < arr.size, (step, sel, arr.size)
        tok = data[sel].id
        # The selected token's probability as float32 bits: the normalization too must agree.
        p_bits = ctypes.cast(ctypes.pointer(ctypes.c_float(data[sel].p)), ctypes.POINTER(ctypes.c_uint32)).contents.value
        out.append([tok, arr.size, p_bits])
        L.llama_sampler_accept(c, tok)
    L.llama_sampler_free(c)
    return out


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "check"
    got = {name: run(chain) for name, chain in CHAINS}
    if mode == "record":
        if os.environ.get("LLAMA_CPP_LIB_PATH"):
            sys.exit("LLAMA_CPP_LIB_PATH is set: unset it so that llama.cpp's own library records")
        with open(FIXTURE, "w") as f:
            json.dump({"llama_cpp_python": "0.3.36", "n": N, "steps": STEPS, "chains": [[n, [[s, list(a)] for s, a in c]] for n, c in CHAINS], "draws": got}, f)
            f.write("\n")
        print(f"recorded {len(got)} chains to {FIXTURE}")
        return
    want = json.load(open(FIXTURE))["draws"]
    bad = 0
    for name, _ in CHAINS:
        for step, (g, w) in enumerate(zip(got[name], want[name])):
            if g != w:
                print(f"FAIL: {name}, step {step}: facade [token, size, p bits] {g}, llama.cpp {w}")
                bad += 1
                break
    if bad:
        sys.exit(1)
    print(f"sampler draws: {len(CHAINS)} seeded chains x {STEPS} steps equal llama.cpp's, token, candidates and probability bits")


main()

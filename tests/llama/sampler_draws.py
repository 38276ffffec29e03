#!/usr/bin/env python3
"""Seeded sampler chains, draw for draw: llama.cpp's samplers applied to the same synthetic
logits by real llama.cpp and by the facade select the same tokens with the same probabilities.

The logits need no model: step s of a chain gives token i (0..511) the logit
((i * 7919 + s * 31) % 512) * 0.0137 - 3.5, a permutation of 512 distinct values (no ties, so
no sort order can differ), as float32. A chain with a cycle adds BOOST to the logit of token
cycle[s % len(cycle)], so that the tokens taken repeat (what DRY acts on). Each chain is
llama.cpp's own samplers, ending in one that selects (dist, mirostat, adaptive-p); after each
apply the selected token (read through the array, whose start XTC may move) is accepted.

DRY and infill read a vocabulary: models/SmolLM2-135M-Instruct.Q4_1.gguf, loaded with
vocab_only (its ids 0..511 are the candidates; among them ":" 42 and "\\n" 198, and the ends
of generation 0, 2 and 4). Without the model, check runs the other chains and says so (and
fails when PACKLM_REQUIRE_MODELS is set); record needs it. Record also checks that each DRY
chain's draws differ from the same chain without DRY (else the chain tests nothing).

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

N, STEPS, BOOST = 512, 64, 10.0
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../..")
FIXTURE = os.path.join(ROOT, "tests/fixtures/llama_cpp/sampler_draws.json")
MODEL = os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf")
VOCAB = "vocab"  # an argument that stands for the model's vocabulary

# (name, [(sampler, args)] in chain order, cycle of boosted tokens or None).
CHAINS = [
    ("top_k-top_p-min_p-temp", [("top_k", (40,)), ("top_p", (0.9, 1)), ("min_p", (0.05, 1)), ("temp", (0.8,)), ("dist", (1234,))], None),
    ("typical-temp", [("typical", (0.9, 1)), ("temp", (1.0,)), ("dist", (42,))], None),
    ("penalties-top_k-temp", [("penalties", (N, 64, 1.1, 0.1, 0.05)), ("top_k", (50,)), ("temp", (0.7,)), ("dist", (7,))], None),
    ("temp-full", [("temp", (1.5,)), ("dist", (99,))], None),
    ("min_p", [("min_p", (0.1, 1)), ("dist", (2024,))], None),
    ("dist-only", [("dist", (5,))], None),
    ("temp_ext", [("temp_ext", (0.8, 0.5, 1.0)), ("dist", (11,))], None),
    ("temp_ext-exponent", [("top_k", (64,)), ("temp_ext", (1.2, 1.0, 2.0)), ("dist", (12,))], None),
    # Alone, XTC's threshold is above every probability of the flat logits: it only draws.
    ("xtc", [("xtc", (0.5, 0.1, 1, 13)), ("dist", (14,))], None),
    # After temperature 0.05 the top probabilities are 0.24, 0.18, 0.14, 0.105, ...
    ("temp-xtc", [("temp", (0.05,)), ("xtc", (0.5, 0.1, 1, 15)), ("dist", (16,))], None),
    ("temp-xtc-min_keep", [("temp", (0.05,)), ("xtc", (0.9, 0.05, 507, 17)), ("dist", (18,))], None),
    ("top_n_sigma", [("top_n_sigma", (1.0,)), ("dist", (19,))], None),
    ("temp-top_n_sigma", [("temp", (0.5,)), ("top_n_sigma", (0.5,)), ("dist", (20,))], None),
    ("mirostat", [("mirostat", (N, 21, 5.0, 0.1, 100))], None),
    ("temp-mirostat", [("temp", (0.2,)), ("mirostat", (N, 22, 3.0, 0.2, 50))], None),
    ("mirostat_v2", [("mirostat_v2", (23, 5.0, 0.1))], None),
    ("temp-mirostat_v2", [("temp", (0.1,)), ("mirostat_v2", (24, 2.0, 0.3))], None),
    ("min_p-adaptive_p", [("min_p", (0.05, 1)), ("adaptive_p", (0.5, 0.9, 25))], None),
    # top-k leaves the array marked sorted: adaptive-p's second softmax then takes the first
    # logit as the largest, though its transform has changed the logits.
    ("temp-top_k-adaptive_p", [("temp", (0.05,)), ("top_k", (20,)), ("adaptive_p", (0.2, 0.5, 26))], None),
    ("adaptive_p-off", [("adaptive_p", (-1.0, 0.9, 27))], None),
    ("dry", [("dry", (VOCAB, 0.8, 1.75, 2, 64, ["\n", ":"])), ("dist", (28,))], [100, 200, 300, 400]),
    # Breakers in the cycle: ":" 42 and "\n" 198 alone, and "ab": "a" 81 then "b" 82 (a token
    # ending in "a" followed by the tokens of "b"). A window of 16 drops old tokens.
    ("dry-breakers", [("dry", (VOCAB, 0.8, 1.75, 2, 16, ["\n", ":", "ab"])), ("dist", (29,))], [81, 82, 300, 42, 400, 198, 100, 81, 82, 500]),
    ("infill", [("infill", (VOCAB,)), ("dist", (30,))], None),
    # Sharper: prefixes merged and text below the thresholds dropped ...
    ("temp-infill", [("temp", (0.05,)), ("infill", (VOCAB,)), ("dist", (31,))], None),
    # ... and flatter, where often no text is left and the end of turn is taken.
    ("temp-infill-eot", [("temp", (0.1,)), ("infill", (VOCAB,)), ("dist", (32,))], None),
]

# Chains whose draws the facade cannot give as llama.cpp does: name -> why. Written into
# the fixture by record; check skips them, printing why.
DIFFERS = {}


def needs_vocab(chain):
    return any(VOCAB in args for _, args in chain)


def logits(step, cycle):
    out = [((i * 7919 + step * 31) % 512) * 0.0137 - 3.5 for i in range(N)]
    if cycle:
        out[cycle[step % len(cycle)]] += BOOST
    return out


def load_vocab():
    if not os.path.exists(MODEL):
        return None, None
    params = L.llama_model_default_params()
    params.vocab_only = True
    model = L.llama_model_load_from_file(MODEL.encode(), params)
    assert model, f"{MODEL} does not load"
    return model, L.llama_model_get_vocab(model)


def make(name, args, vocab):
    if name == "dry":
        _, mult, base, allowed, last_n, breakers = args
        arr = (ctypes.c_char_p * len(breakers))(*[b.encode() for b in breakers])
        return L.llama_sampler_init_dry(vocab, mult, base, allowed, last_n, arr, len(breakers))
    args = tuple(vocab if a == VOCAB else a for a in args)
    return getattr(L, "llama_sampler_init_" + name)(*args)


def run(chain, cycle, vocab):
    c = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    for name, args in chain:
        s = make(name, args, vocab)
        assert s, f"llama_sampler_init_{name}{args} returned NULL"
        L.llama_sampler_chain_add(c, s)
    out = []
    for step in range(STEPS):
        data = (L.llama_token_data * N)()
        for i, l in enumerate(logits(step, cycle)):
            data[i].id, data[i].logit, data[i].p = i, l, 0.0
        arr = L.llama_token_data_array(data=data, size=N, selected=-1, sorted=False)
        L.llama_sampler_apply(c, ctypes.byref(arr))
        sel = arr.selected
        assert 0 <= sel < arr.size, (step, sel, arr.size)
        chosen = arr.data[sel]
        # The selected token's probability as float32 bits: the normalization too must agree.
        p_bits = ctypes.cast(ctypes.pointer(ctypes.c_float(chosen.p)), ctypes.POINTER(ctypes.c_uint32)).contents.value
        out.append([chosen.id, arr.size, p_bits])
        L.llama_sampler_accept(c, chosen.id)
    L.llama_sampler_free(c)
    return out


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "check"
    model, vocab = load_vocab()
    chains = [c for c in CHAINS if vocab or not needs_vocab(c[1])]
    if len(chains) < len(CHAINS):
        if mode == "record":
            sys.exit(f"record needs {MODEL} (DRY and infill read its vocabulary)")
        if os.environ.get("PACKLM_REQUIRE_MODELS"):
            sys.exit(f"FAIL: {MODEL} is missing and PACKLM_REQUIRE_MODELS is set")
        print(f"note: {MODEL} absent; the {len(CHAINS) - len(chains)} chains that read a vocabulary (DRY, infill) not run")
    got = {name: run(chain, cycle, vocab) for name, chain, cycle in chains}
    if mode == "record":
        if os.environ.get("LLAMA_CPP_LIB_PATH"):
            sys.exit("LLAMA_CPP_LIB_PATH is set: unset it so that llama.cpp's own library records")
        for name, chain, cycle in chains:
            if any(s == "dry" for s, _ in chain) and got[name] == run([x for x in chain if x[0] != "dry"], cycle, vocab):
                sys.exit(f"{name}: the draws are the same without DRY; choose logits on which it acts")
        with open(FIXTURE, "w") as f:
            fixture = {
                "llama_cpp_python": "0.3.36",
                "n": N,
                "steps": STEPS,
                "boost": BOOST,
                "chains": [[n, [[s, list(a)] for s, a in c], cy] for n, c, cy in CHAINS],
                "differs": DIFFERS,
                "draws": got,
            }
            json.dump(fixture, f)
            f.write("\n")
        print(f"recorded {len(got)} chains to {FIXTURE}")
        return
    fixture = json.load(open(FIXTURE))
    want, differs = fixture["draws"], fixture.get("differs", {})
    bad = 0
    for name, _, _ in chains:
        if name in differs:
            print(f"skipped {name}: {differs[name]}")
            continue
        if name not in want:
            print(f"FAIL: {name} is not in {FIXTURE}: record again")
            bad += 1
            continue
        for step, (g, w) in enumerate(zip(got[name], want[name])):
            if g != w:
                print(f"FAIL: {name}, step {step}: facade [token, size, p bits] {g}, llama.cpp {w}")
                bad += 1
                break
    if model:
        L.llama_model_free(model)
    if bad:
        sys.exit(1)
    n = len([c for c in chains if c[0] not in differs])
    print(f"sampler draws: {n} seeded chains x {STEPS} steps equal llama.cpp's, token, candidates and probability bits")


main()

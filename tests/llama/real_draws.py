#!/usr/bin/env python3
"""A seeded 64-token reply of SmolLM2 on real logits: llama.cpp's sampler chain (top-k 40,
top-p 0.95, min-p 0.05, temperature 0.8, dist with seed 4242) over the logits real llama.cpp
computes for a chat prompt, step by step along the reply it samples. record keeps, per step,
the 64 largest logits (ids and float32 bits) and the draw (token, candidates left, probability
bits); check gives the facade's chain the same candidates and asserts the same draws, so the
sampler is shown to reproduce llama.cpp's reply on real distributions (top-k 40 keeps only
the 64 recorded; record checks that no tie straddles its cut).

check then lets the facade generate its own 64 tokens from its own logits with the same chain,
and prints how many tokens agree with llama.cpp's reply before the first difference (packlm's
logits differ from llama.cpp's by rounding, so a draw near a boundary may go the other way;
this is reported, not asserted).

    record:  env -u LLAMA_CPP_LIB_PATH VENV/bin/python tests/llama/real_draws.py record
             (VENV has llama-cpp-python==0.3.36 compiled by pip: real llama.cpp) writes
             tests/fixtures/llama_cpp/smollm2_draws.json
    check:   LLAMA_CPP_LIB_PATH=<facade folder> PYTHONPATH=<sdist>:<pydeps> python3
             tests/llama/real_draws.py check   (tests/llama/run.sh does this)
"""

import ctypes
import json
import os
import sys

import llama_cpp as L

STEPS, KEEP = 64, 64
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../..")
FIXTURE = os.path.join(ROOT, "tests/fixtures/llama_cpp/smollm2_draws.json")
MODEL = os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPT = "<|im_start|>user\nTell me a short story about a lighthouse.<|im_end|>\n<|im_start|>assistant\n"
CHAIN = [("top_k", (40,)), ("top_p", (0.95, 1)), ("min_p", (0.05, 1)), ("temp", (0.8,)), ("dist", (4242,))]


def f32_bits(x):
    return ctypes.cast(ctypes.pointer(ctypes.c_float(x)), ctypes.POINTER(ctypes.c_uint32)).contents.value


def bits_f32(b):
    return ctypes.cast(ctypes.pointer(ctypes.c_uint32(b)), ctypes.POINTER(ctypes.c_float)).contents.value


def chain():
    c = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    for name, args in CHAIN:
        s = getattr(L, "llama_sampler_init_" + name)(*args)
        assert s, name
        L.llama_sampler_chain_add(c, s)
    return c


def draw(c, cands):
    """Applies chain `c` to `cands` [(id, logit)] in order; returns [token, size, p bits]."""
    data = (L.llama_token_data * len(cands))()
    for i, (t, l) in enumerate(cands):
        data[i].id, data[i].logit, data[i].p = t, l, 0.0
    arr = L.llama_token_data_array(data=data, size=len(cands), selected=-1, sorted=False)
    L.llama_sampler_apply(c, ctypes.byref(arr))
    assert 0 <= arr.selected < arr.size
    chosen = arr.data[arr.selected]
    L.llama_sampler_accept(c, chosen.id)
    return [chosen.id, arr.size, f32_bits(chosen.p)]


class Runner:
    """SmolLM2 in a context of the loaded library (llama.cpp's own, or the facade)."""

    def __init__(self):
        L.llama_backend_init()
        self.model = L.llama_model_load_from_file(MODEL.encode(), L.llama_model_default_params())
        assert self.model, MODEL
        p = L.llama_context_default_params()
        p.n_ctx, p.n_batch, p.n_threads, p.n_threads_batch = 512, 512, 2, 2
        self.ctx = L.llama_init_from_model(self.model, p)
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)

    def tokenize(self, text):
        buf = (L.llama_token * 512)()
        n = L.llama_tokenize(self.vocab, text.encode(), len(text.encode()), buf, 512, False, True)
        assert n > 0
        return list(buf[:n])

    def feed(self, tokens):
        arr = (L.llama_token * len(tokens))(*tokens)
        assert L.llama_decode(self.ctx, L.llama_batch_get_one(arr, len(tokens))) == 0

    def logits(self):
        p = L.llama_get_logits_ith(self.ctx, -1)
        return [p[i] for i in range(self.n_vocab)]

    def piece(self, t):
        buf = ctypes.create_string_buffer(64)
        n = L.llama_token_to_piece(self.vocab, t, buf, 64, 0, True)
        return buf.raw[:max(n, 0)]

    def reply(self, steps, record=None):
        """Samples `steps` tokens with the chain from this library's logits."""
        c = chain()
        self.feed(self.tokenize(PROMPT))
        out = []
        for _ in range(steps):
            lg = self.logits()
            d = draw(c, list(enumerate(lg)))
            if record is not None:
                top = sorted(range(len(lg)), key=lambda i: -lg[i])[:KEEP + 1]
                # top-k 40 sees only these; no tie may straddle the cut of 40 or of KEEP.
                assert lg[top[39]] != lg[top[40]] and lg[top[KEEP - 1]] != lg[top[KEEP]], "a tie at a cut"
                record.append({"top": [[i, f32_bits(lg[i])] for i in sorted(top[:KEEP])], "draw": d})
            out.append(d[0])
            self.feed([d[0]])
        L.llama_sampler_free(c)
        return out


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "check"
    if not os.path.exists(MODEL):
        if mode == "record" or os.environ.get("PACKLM_REQUIRE_MODELS"):
            sys.exit(f"FAIL: {MODEL} is missing")
        print(f"note: {MODEL} absent; real-logit draws not run")
        return
    if mode == "record":
        if os.environ.get("LLAMA_CPP_LIB_PATH"):
            sys.exit("LLAMA_CPP_LIB_PATH is set: unset it so that llama.cpp's own library records")
        r = Runner()
        steps = []
        tokens = r.reply(STEPS, steps)
        text = b"".join(r.piece(t) for t in tokens).decode("utf-8", "replace")
        with open(FIXTURE, "w") as f:
            json.dump({"llama_cpp_python": "0.3.36", "model": os.path.basename(MODEL), "prompt": PROMPT,
                       "chain": [[n, list(a)] for n, a in CHAIN], "keep": KEEP, "tokens": tokens, "text": text,
                       "steps": steps}, f)
            f.write("\n")
        print(f"recorded {STEPS} draws to {FIXTURE}: {text!r}")
        return
    fx = json.load(open(FIXTURE))
    c = chain()
    for s, step in enumerate(fx["steps"]):
        got = draw(c, [(i, bits_f32(b)) for i, b in step["top"]])
        if got != step["draw"]:
            sys.exit(f"FAIL: step {s}: facade [token, size, p bits] {got}, llama.cpp {step['draw']}")
    L.llama_sampler_free(c)
    print(f"real-logit draws: {STEPS} seeded draws on llama.cpp's SmolLM2 logits equal llama.cpp's")
    mine = Runner().reply(STEPS)
    same = next((i for i, (a, b) in enumerate(zip(mine, fx["tokens"])) if a != b), STEPS)
    print(f"real-logit draws: the facade's own reply agrees with llama.cpp's for {same} of {STEPS} tokens")


main()

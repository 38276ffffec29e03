"""llama-cpp-python 0.3.36's public API (the `Llama` class) on packlm's libllama.so.

Run by tests/llama/run.sh with LLAMA_CPP_LIB_PATH at the facade and PYTHONPATH at the sdist's
sources. Per GGUF of models/: construction, tokenize/detokenize (ids, detokenized bytes and
token pieces equal to llama.cpp's own, recorded in tests/fixtures/llama_cpp/tokens.json; ids
equal to `packlm tokenize`; multi-byte text, special tokens), greedy completion (deterministic,
streamed == whole, equal to `packlm generate`), seeded sampling, stop sequences, chat with the
GGUF's own template, eval / sample / save_state / load_state, prefix reuse, logit_bias,
logprobs, grammars (GBNF, llama-cpp-python's JSON grammar, a JSON schema); then bad input (a
missing file, an out-of-range token, a corrupted state) raising in Python, never aborting it.
On SmolLM2 also embeddings (embed, create_embedding, each pooling, against `packlm embed`) and
LoRA adapters (lora_path, lora_scale, against `packlm logits --lora` and `generate --lora`;
the adapters are random ones run.sh makes with tests/llama/make_lora.py). Then the tiny
mixtures of experts (Qwen3-MoE, Mixtral) of tests/fixtures/tiny against HF's logits.
Prints 'N passed, M failed'."""
import ctypes
import hashlib
import json
import os
import subprocess
import sys

import numpy as np

import llama_cpp
from llama_cpp import Llama

models = sys.argv[1]
packlm_bin = os.environ["PACKLM_BIN"]
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "llama_cpp", "tokens.json"), encoding="utf-8") as f:
    TOKENS = json.load(f)
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


def raises(fn, exc):
    try:
        fn()
    except exc:
        return True
    except Exception as e:  # a different failure is a failure of the check
        print("   raised", type(e).__name__, e)
        return False
    return False


def packlm(*args):
    out = subprocess.run([packlm_bin, *args], check=True, capture_output=True, text=True)
    return out.stdout


PROMPT = "The capital of France is"
MULTI = "naïve café, 東京, emoji 😀 — ok"


def text_of(out):
    return out["choices"][0]["text"]


def greedy_steps(llm, n):
    """n tokens by sample(temp=0) + eval, from the context's current logits; the exception's
    text instead when a call fails."""
    out = []
    try:
        for _ in range(n):
            t = llm.sample(temp=0)
            out.append(t)
            llm.eval([t])
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return out


def piece(llm, tok, special):
    """llama_token_to_piece's bytes for one token (lstrip 0)."""
    buf = (ctypes.c_char * 256)()
    n = llama_cpp.llama_token_to_piece(llm._model.vocab, tok, buf, 256, 0, special)
    return bytes(buf[:max(n, 0)]) if n >= 0 else None


def llama_cpp_tokens(name, llm, path):
    """Every case of tests/fixtures/llama_cpp/tokens.json (llama.cpp's own tokenizer on this
    GGUF): the facade's ids, detokenized bytes and per-token pieces equal llama.cpp's."""
    fixture = TOKENS["models"][os.path.basename(path)]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    digest = h.hexdigest()
    if digest != fixture["sha256"]:
        check(False, f"{name}: {path} is not the GGUF tokens.json was recorded from (sha256 {digest})")
        return
    check(llm.token_bos() == fixture["bos"], f"{name}: BOS {llm.token_bos()} == llama.cpp's {fixture['bos']}")
    check(bool(llama_cpp.llama_vocab_get_add_bos(llm._model.vocab)) == fixture["add_bos"], f"{name}: add_bos == llama.cpp's")
    for c in fixture["cases"]:
        what = f"{name}: {c['text']!r} add_bos={c['add_bos']} special={c['special']}"
        ids = llm.tokenize(c["text"].encode(), add_bos=c["add_bos"], special=c["special"])
        check(ids == c["ids"], f"{what}: ids {ids} != llama.cpp's {c['ids']}")
        # The pieces and detokenized bytes of llama.cpp's ids, so that a difference in ids
        # does not hide one in the bytes.
        ref = c["ids"]
        for special, key in [(False, "detokenize"), (True, "detokenize_special")]:
            got = llm.detokenize(ref, special=special)
            check(got == bytes.fromhex(c[key]), f"{what}: detokenize(special={special}) {got!r} != llama.cpp's {bytes.fromhex(c[key])!r}")
        for special, key in [(False, "pieces"), (True, "pieces_special")]:
            got = [piece(llm, t, special) for t in ref]
            want = [bytes.fromhex(h) for h in c[key]]
            check(got == want, f"{what}: pieces(special={special}) {got} != llama.cpp's {want}")


def grammar_checks(name, llm, json_too):
    """llama.cpp's grammar sampler (llama_sampler_init_grammar, as Llama builds its chain with
    a LlamaGrammar): the reply is in the grammar's language, streamed == whole; a grammar that
    does not parse makes sampling fail rather than run unconstrained. With json_too (a model
    that follows instructions), JSON from llama-cpp-python's own JSON grammar and from a
    JSON schema (response_format) parses and has the schema's required keys and types."""
    yes_no = llama_cpp.LlamaGrammar.from_string('root ::= "yes" | "no"')
    out = llm.create_completion("Is Paris in France? Answer:", max_tokens=4, temperature=0, grammar=yes_no)
    check(text_of(out) in ("yes", "no") and out["choices"][0]["finish_reason"] == "stop", f"{name}: grammar yes|no gives {text_of(out)!r}, {out['choices'][0]['finish_reason']}")
    bad = llama_cpp.LlamaGrammar.from_string('root ::= "yes')
    check(raises(lambda: llm.create_completion(PROMPT, max_tokens=4, temperature=0, grammar=bad), RuntimeError),
          f"{name}: a grammar that does not parse makes sampling fail")
    if not json_too:
        return
    json_grammar = llama_cpp.LlamaGrammar.from_string(llama_cpp.llama_grammar.JSON_GBNF)
    prompt = "A JSON object describing a cat:"
    out = llm(prompt, max_tokens=96, temperature=0, grammar=json_grammar)
    try:
        value = json.loads(text_of(out))
    except ValueError:
        value = None
    check(isinstance(value, dict) and out["choices"][0]["finish_reason"] == "stop", f"{name}: JSON grammar gives a JSON object: {text_of(out)!r}")
    streamed = "".join(text_of(c) for c in llm(prompt, max_tokens=96, temperature=0, grammar=json_grammar, stream=True))
    check(streamed == text_of(out), f"{name}: JSON grammar streamed {streamed!r} == whole")
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "pets": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
              "required": ["name", "age", "pets"]}
    msgs = [{"role": "user", "content": "Give the name, age and pets of a person as JSON."}]
    out = llm.create_chat_completion(messages=msgs, response_format={"type": "json_object", "schema": schema}, max_tokens=96, temperature=0)
    content = out["choices"][0]["message"]["content"]
    try:
        value = json.loads(content)
    except ValueError:
        value = None
    ok = (isinstance(value, dict) and isinstance(value.get("name"), str) and type(value.get("age")) is int
          and isinstance(value.get("pets"), list) and all(isinstance(p, str) for p in value["pets"]))
    check(ok, f"{name}: chat with a JSON schema gives {content!r}")


def run_model(name, path, chat_word, marker, expected_meta):
    print(f"== {name}")
    llm = Llama(model_path=path, n_ctx=512, verbose=False, seed=7)
    check(llm.n_vocab() > 0 and llm.n_ctx() == 512, f"{name}: construction (n_vocab, n_ctx)")
    # The GGUF's own metadata, as llama.cpp reports it (the values are the HF configs':
    # architecture, max_position_embeddings, the tokenizer kind).
    for key, want in expected_meta.items():
        check(llm.metadata.get(key) == want, f"{name}: metadata {key} = {llm.metadata.get(key)!r}, expected {want!r}")
    # The hyperparameter getters against the GGUF's own keys; the rope type is llama.cpp's for
    # the architecture (llama-model.cpp: NORM 0 for llama, NEOX 2 for gemma3).
    arch = llm.metadata["general.architecture"]
    facts = {
        "n_swa": (llama_cpp.llama_model_n_swa(llm.model), int(llm.metadata.get(f"{arch}.attention.sliding_window", 0))),
        "ftype": (llama_cpp.llama_model_ftype(llm.model), int(llm.metadata["general.file_type"])),
        "n_embd_inp": (llama_cpp.llama_model_n_embd_inp(llm.model), int(llm.metadata[f"{arch}.embedding_length"])),
        "n_embd_out": (llama_cpp.llama_model_n_embd_out(llm.model), int(llm.metadata[f"{arch}.embedding_length"])),
        "rope_type": (llama_cpp.llama_model_rope_type(llm.model), {"llama": 0, "gemma3": 2}[arch]),
        "n_ctx_seq": (llama_cpp.llama_n_ctx_seq(llm.ctx), 512),
        "n_threads": (llama_cpp.llama_n_threads(llm.ctx), llm.n_threads),
    }
    for fact, (got, want) in facts.items():
        check(got == want, f"{name}: {fact} = {got}, expected {want}")

    # Tokenize: ids equal packlm's tokenizer (tied to HF's by the golden tests), with and
    # without special tokens; detokenize gives the bytes back, multi-byte characters whole.
    for text in [PROMPT, MULTI]:
        ids = llm.tokenize(text.encode(), add_bos=True, special=True)
        ref = json.loads(packlm("tokenize", path, "--text", text))
        check(ids == ref, f"{name}: tokenize {text!r}: {ids} != packlm {ref}")
        check(llm.detokenize(ids).decode() == text, f"{name}: detokenize(tokenize({text!r}))")
    llama_cpp_tokens(name, llm, path)
    # Per-token pieces are raw bytes: joined, they are the UTF-8 of the text.
    ids = llm.tokenize(MULTI.encode(), add_bos=False, special=False)
    pieces = b"".join(piece(llm, t, False) for t in ids)
    check(pieces == MULTI.encode(), f"{name}: token pieces joined == the text's bytes")
    one = llm.tokenize(marker.encode(), add_bos=False, special=True)
    plain = llm.tokenize(marker.encode(), add_bos=False, special=False)
    check(len(one) == 1 and len(plain) > 1, f"{name}: {marker} is one special token only with special=True ({one}, {plain})")
    check(llm.detokenize(one) == b"" and llm.detokenize(one, special=True) == marker.encode(), f"{name}: a control token is hidden unless special")

    # Greedy completion: deterministic, streamed == whole, equal to packlm generate.
    a = llm.create_completion(PROMPT, max_tokens=16, temperature=0)
    b = llm.create_completion(PROMPT, max_tokens=16, temperature=0)
    check(text_of(a) == text_of(b) and text_of(a) != "", f"{name}: greedy completion deterministic ({text_of(a)!r})")
    streamed = "".join(text_of(c) for c in llm.create_completion(PROMPT, max_tokens=16, temperature=0, stream=True))
    check(streamed == text_of(a), f"{name}: streamed {streamed!r} == whole {text_of(a)!r}")
    ref = json.loads(packlm("generate", path, "--prompt", PROMPT, "-n", "16", "--json"))
    check(text_of(a) == ref["text"], f"{name}: greedy {text_of(a)!r} == packlm generate {ref['text']!r}")

    # Seeded sampling: the same seed gives the same text, different seeds differ.
    def sampled(seed):
        return text_of(llm.create_completion(PROMPT, max_tokens=24, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed))
    s1, s1b = sampled(1), sampled(1)
    check(s1 == s1b, f"{name}: seed 1 reproducible ({s1!r} vs {s1b!r})")
    others = {sampled(s) for s in (2, 3, 4)}
    check(any(o != s1 for o in others), f"{name}: seeds 2..4 differ from seed 1")

    # Stop sequences: the text ends before the stop string; finish_reason "stop".
    whole = text_of(a)
    words = [w for w in whole.split() if len(w) > 1]
    if words:
        stop = words[min(1, len(words) - 1)]
        out = llm.create_completion(PROMPT, max_tokens=16, temperature=0, stop=[stop])
        check(out["choices"][0]["finish_reason"] == "stop" and text_of(out) == whole[: whole.index(stop)],
              f"{name}: stop {stop!r}: {text_of(out)!r}, {out['choices'][0]['finish_reason']}")
    else:
        check(False, f"{name}: the greedy text has no word to stop at")
    check(a["choices"][0]["finish_reason"] == "length", f"{name}: finish_reason length at max_tokens")

    # Chat with the GGUF's own template (when the GGUF has one).
    if chat_word is not None:
        check(llm.chat_format == "chat_template.default" or llm.chat_format in ("chatml",), f"{name}: chat format from the GGUF template ({llm.chat_format})")
        msgs = [{"role": "user", "content": "What is the capital of France? Answer with one word."}]
        whole = llm.create_chat_completion(messages=msgs, max_tokens=16, temperature=0)
        content = whole["choices"][0]["message"]["content"]
        parts = [c["choices"][0]["delta"].get("content", "") or "" for c in llm.create_chat_completion(messages=msgs, max_tokens=16, temperature=0, stream=True)]
        check("".join(parts) == content, f"{name}: chat streamed {''.join(parts)!r} == whole {content!r}")
        check(chat_word in content, f"{name}: chat answer {content!r} has {chat_word!r}")
    else:
        check("tokenizer.chat_template" not in llm.metadata, f"{name}: no template reported for a GGUF without one")

    # eval / sample / save_state / load_state: the continuation equals a fresh prompt's.
    toks = llm.tokenize(PROMPT.encode())
    llm.reset()
    llm.eval(toks)
    state = llm.save_state()
    cont = greedy_steps(llm, 6)
    llm.reset()
    llm.eval(llm.tokenize(b"Something else entirely."))
    llm.load_state(state)
    again = greedy_steps(llm, 6)
    fresh = Llama(model_path=path, n_ctx=512, verbose=False)
    fresh.eval(toks)
    ref = greedy_steps(fresh, 6)
    check(cont == ref, f"{name}: eval/sample continuation {cont} == a fresh context's {ref}")
    check(again == ref, f"{name}: after load_state {again} == fresh {ref}")

    # Prefix reuse: a second prompt extending the first reuses its positions and gives the same
    # text as a context that saw only the second prompt.
    longer = PROMPT + " Paris, and the capital of Italy is"
    llm.create_completion(PROMPT, max_tokens=4, temperature=0)
    reused = text_of(llm.create_completion(longer, max_tokens=8, temperature=0))
    fresh_text = text_of(fresh.create_completion(longer, max_tokens=8, temperature=0))
    check(reused == fresh_text, f"{name}: prefix reuse {reused!r} == fresh {fresh_text!r}")

    # logit_bias bans the greedy first token.
    first = llm.tokenize(text_of(a).encode(), add_bos=False)[0]
    banned = llm.create_completion(PROMPT, max_tokens=1, temperature=0, logit_bias={first: -1e9})
    got = llm.tokenize(text_of(banned).encode(), add_bos=False)
    check(got[:1] != [first], f"{name}: logit_bias bans token {first} (got {got})")

    # A caller-defined sampler through the llama_sampler_i vtable (logits_processor) runs
    # in the chain before the selection: pushing the greedy token down changes the choice.
    def push_down(input_ids, scores):
        scores[first] = -1e9
        return scores
    processed = llm.create_completion(PROMPT, max_tokens=1, temperature=0, logits_processor=llama_cpp.LogitsProcessorList([push_down]))
    got = llm.tokenize(text_of(processed).encode(), add_bos=False)
    check(got[:1] != [first], f"{name}: logits_processor through the sampler vtable (got {got})")

    # Grammars, on a Llama of their own: Llama.sample goes on using the chain of the last
    # completion, its grammar included.
    grammar_checks(name, Llama(model_path=path, n_ctx=512, verbose=False, seed=7), chat_word is not None)

    # logprobs with logits_all: each greedy token is the top-1 entry, with log-softmax of the logits.
    la = Llama(model_path=path, n_ctx=512, verbose=False, logits_all=True)
    out = la.create_completion(PROMPT, max_tokens=4, temperature=0, logprobs=3)
    lp = out["choices"][0]["logprobs"]
    ok = lp is not None and len(lp["tokens"]) == 4
    if ok:
        for tok, tlp, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
            best = max(top.values())
            ok &= tlp <= 0.0 and abs(tlp - best) < 1e-4 and tok in top
    check(ok, f"{name}: logprobs with logits_all: {lp and lp['token_logprobs']}")
    # The scores kept for the prompt are the logits row by row: the last row's argmax is the
    # first greedy token.
    la.reset()
    la.eval(toks)
    check(int(np.argmax(la.scores[len(toks) - 1])) == first, f"{name}: logits_all row of the last prompt token")

    # Bad input: Python gets an exception, the process lives, the context still works.
    check(raises(lambda: llm.eval([llm.n_vocab() + 5]), RuntimeError), f"{name}: out-of-range token raises")
    bad = llama_cpp.LlamaState(
        input_ids=state.input_ids, scores=state.scores, n_tokens=state.n_tokens,
        llama_state=b"XXXX" + state.llama_state[4:], llama_state_size=state.llama_state_size, seed=state.seed)
    check(raises(lambda: llm.load_state(bad), RuntimeError), f"{name}: corrupted state raises")
    flipped = bytearray(state.llama_state)
    flipped[len(flipped) // 2] ^= 0xFF
    bad2 = llama_cpp.LlamaState(
        input_ids=state.input_ids, scores=state.scores, n_tokens=state.n_tokens,
        llama_state=bytes(flipped[:-7]), llama_state_size=state.llama_state_size - 7, seed=state.seed)
    check(raises(lambda: llm.load_state(bad2), RuntimeError), f"{name}: truncated state raises")
    check(text_of(llm.create_completion(PROMPT, max_tokens=16, temperature=0)) == text_of(a), f"{name}: still works after bad input")

    # The C calls' own failure values, through the client's ctypes declarations.
    ctx, vocab = llm.ctx, llm._model.vocab
    llm.reset()
    llm.eval(toks)
    n_past = len(toks)
    batch = llama_cpp.llama_batch_init(4, 0, 1)
    batch.n_tokens = 1
    batch.token[0] = toks[0]
    batch.pos[0] = n_past + 3  # not the next position
    batch.n_seq_id[0] = 1
    batch.seq_id[0][0] = 0
    batch.logits[0] = 1
    check(llama_cpp.llama_decode(ctx, batch) == -1, f"{name}: llama_decode at a gap in positions gives -1")
    batch.pos[0] = n_past
    batch.seq_id[0][0] = 1
    check(llama_cpp.llama_decode(ctx, batch) == -1, f"{name}: llama_decode for sequence 1 gives -1")
    batch.seq_id[0][0] = 0
    check(llama_cpp.llama_decode(ctx, batch) == 0, f"{name}: llama_decode at the next position of sequence 0 gives 0")
    check(not llama_cpp.llama_get_logits_ith(ctx, 5), f"{name}: logits of an index the batch did not have are NULL")
    check(bool(llama_cpp.llama_get_logits_ith(ctx, 0)), f"{name}: logits of index 0 of the last batch")
    llama_cpp.llama_batch_free(batch)
    mem = llama_cpp.llama_get_memory(ctx)
    check(not llama_cpp.llama_memory_seq_rm(mem, 0, 1, 2), f"{name}: removing positions from the middle is refused")
    check(llama_cpp.llama_memory_seq_pos_max(mem, 0) == n_past, f"{name}: a refused removal changes nothing")
    check(llama_cpp.llama_memory_seq_rm(mem, 0, 2, -1) and llama_cpp.llama_memory_seq_pos_max(mem, 0) == 1, f"{name}: removing the tail keeps positions 0 and 1")
    # The abort callback: asked before the pass (a stop there decodes nothing) and during it
    # from a watcher (the first ask says go, the next says stop, while a 400-token pass runs):
    # llama_decode gives 2 either way and the sequence keeps its 2 positions.
    asks = []
    def stop_after(n):
        return llama_cpp.ggml_abort_callback(lambda _data: asks.append(1) or len(asks) > n)
    big = llama_cpp.llama_batch_init(400, 0, 1)
    big.n_tokens = 400
    for i in range(400):
        big.token[i], big.pos[i], big.n_seq_id[i], big.seq_id[i][0], big.logits[i] = toks[i % len(toks)], 2 + i, 1, 0, 0
    big.logits[399] = 1
    for n, when in [(0, "before the pass"), (1, "during the pass")]:
        asks.clear()
        cb = stop_after(n)
        llama_cpp.llama_set_abort_callback(ctx, cb, None)
        check(llama_cpp.llama_decode(ctx, big) == 2, f"{name}: an abort callback that stops {when} makes llama_decode give 2")
        check(llama_cpp.llama_memory_seq_pos_max(mem, 0) == 1, f"{name}: an aborted decode ({when}) changes nothing")
    llama_cpp.llama_set_abort_callback(ctx, llama_cpp.ggml_abort_callback(0), None)
    check(llama_cpp.llama_decode(ctx, big) == 0 and llama_cpp.llama_memory_seq_pos_max(mem, 0) == 401, f"{name}: with the callback cleared the same batch decodes")
    llama_cpp.llama_batch_free(big)
    buf = (ctypes.c_char * 8)()
    check(llama_cpp.llama_token_to_piece(vocab, llm.n_vocab() + 1, buf, 8, 0, False) == 0, f"{name}: piece of an out-of-range token is empty")
    out = (llama_cpp.llama_token * 2)()
    check(llama_cpp.llama_tokenize(vocab, MULTI.encode(), len(MULTI.encode()), out, 2, False, False) == -len(ids), f"{name}: tokenize into a short buffer gives minus the count")
    check(not llama_cpp.llama_sampler_init_grammar(vocab, b"root ::= (", b"root"), f"{name}: a grammar that does not parse gives NULL")


def max_diff(a, b):
    """The largest difference, both sides rounded to float32 first (`packlm embed` prints each
    float32 shortest, which parses to the nearest float64, not to the float32 itself)."""
    a, b = (np.asarray(np.asarray(x, dtype=np.float32), dtype=np.float64) for x in (a, b))
    return float(np.max(np.abs(a - b))) if a.shape == b.shape else float("inf")


def packlm_embed(path, texts, pooling, normalize=False):
    args = ["embed", path, "--pooling", pooling, "--normalize" if normalize else "--no-normalize"]
    for t in texts:
        args += ["--text", t]
    return json.loads(packlm(*args))


def embedding_checks(name, path, greedy_text):
    """Llama(embedding=True): embed and create_embedding give packlm's `Session::embed`
    vectors (`packlm embed`, the same tokens and pooling) within 1e-4; the pooled ones equal
    the mean / first / last of the per-token ones (an independent route); the pooling is the
    model's (none declared: LLAMA_POOLING_TYPE_NONE) or pooling_type's; such a context still
    generates the base's greedy text; bad reads give NULL."""
    llm = Llama(model_path=path, n_ctx=512, embedding=True, verbose=False)
    check(llama_cpp.llama_pooling_type(llm.ctx) == 0, f"{name}: no pooling declared: LLAMA_POOLING_TYPE_NONE ({llama_cpp.llama_pooling_type(llm.ctx)})")
    ref = packlm_embed(path, [PROMPT], "none")
    toks = llm.tokenize(PROMPT.encode())
    check(toks == ref["tokens"][0], f"{name}: embed's tokens {toks} == packlm embed's {ref['tokens'][0]}")
    per_token = llm.embed(PROMPT)
    d = max_diff(per_token, ref["embeddings"][0])
    check(d <= 1e-4, f"{name}: embed with pooling none: one vector per token, {d} from packlm embed")
    out = llm.create_embedding(PROMPT)
    d = max_diff(out["data"][0]["embedding"], per_token)
    check(d <= 1e-4 and out["usage"]["prompt_tokens"] == len(toks), f"{name}: create_embedding == embed ({d}, usage {out['usage']})")
    rows = np.asarray(per_token, dtype=np.float64)
    routes = {"mean": rows.mean(axis=0), "cls": rows[0], "last": rows[-1]}
    for code, pooling in [(llama_cpp.LLAMA_POOLING_TYPE_MEAN, "mean"), (llama_cpp.LLAMA_POOLING_TYPE_CLS, "cls"), (llama_cpp.LLAMA_POOLING_TYPE_LAST, "last")]:
        lp = Llama(model_path=path, n_ctx=512, embedding=True, pooling_type=code, verbose=False)
        check(llama_cpp.llama_pooling_type(lp.ctx) == code, f"{name}: pooling_type {code} is the context's")
        v = lp.embed(PROMPT)
        d = max_diff(v, packlm_embed(path, [PROMPT], pooling)["embeddings"][0])
        check(len(v) == lp.n_embd() and d <= 1e-4, f"{name}: {pooling} pooling: {d} from packlm embed")
        d = max_diff(v, routes[pooling])
        check(d <= 1e-4, f"{name}: {pooling} pooling == the {pooling} of the per-token vectors ({d})")
        if pooling == "mean":
            several = lp.embed([PROMPT, MULTI], normalize=True)
            ref2 = packlm_embed(path, [PROMPT, MULTI], "mean", normalize=True)
            d = max_diff(several, ref2["embeddings"])
            check(len(several) == 2 and d <= 1e-4, f"{name}: two texts, normalized: {d} from packlm embed --normalize")
            out = lp.create_embedding([PROMPT, MULTI])
            ok = [e["index"] for e in out["data"]] == [0, 1] and out["usage"]["prompt_tokens"] == sum(len(t) for t in ref2["tokens"])
            d = max_diff([e["embedding"] for e in out["data"]], packlm_embed(path, [PROMPT, MULTI], "mean")["embeddings"])
            check(ok and d <= 1e-4, f"{name}: create_embedding of two texts ({d}, {out['usage']})")
            # A pooled context has no per-token vectors.
            lp.eval(toks)
            check(not llama_cpp.llama_get_embeddings_ith(lp.ctx, 0) and bool(llama_cpp.llama_get_embeddings_seq(lp.ctx, 0)),
                  f"{name}: a pooled context gives sequence vectors, not token vectors")
    # The C reads, after a decode through eval (every token an output).
    llm.reset()
    llm.eval(toks)
    ctx = llm.ctx
    first = llama_cpp.llama_get_embeddings_ith(ctx, 0)
    d = max_diff(first[:llm.n_embd()] if first else [], per_token[0])
    check(d <= 1e-4, f"{name}: llama_get_embeddings_ith(0) after eval ({d})")
    check(not llama_cpp.llama_get_embeddings_ith(ctx, len(toks)), f"{name}: llama_get_embeddings_ith past the batch is NULL")
    check(not llama_cpp.llama_get_embeddings_seq(ctx, 0), f"{name}: llama_get_embeddings_seq of a NONE context is NULL")
    # With embeddings on, a context still generates: the base's greedy text.
    text = text_of(llm.create_completion(PROMPT, max_tokens=16, temperature=0))
    check(text == greedy_text, f"{name}: an embedding context generates {text!r} == {greedy_text!r}")
    plain = Llama(model_path=path, n_ctx=512, verbose=False)
    plain.eval(toks)
    check(not llama_cpp.llama_get_embeddings(plain.ctx), f"{name}: a context without embeddings gives none")
    check(raises(lambda: plain.embed(PROMPT), RuntimeError), f"{name}: embed without embedding=True raises")


def lora_checks(name, path, lora, alora, other_base, greedy_text):
    """Llama(lora_path=...): the logits of every prompt row equal packlm's under the same
    adapter and scale (`packlm logits --lora`), the greedy text differs from the base's and is
    `packlm generate --lora`'s; the adapter's metadata; an aLoRA and an adapter of another base
    make Llama raise."""
    for scale in [1.0, 0.5]:
        la = Llama(model_path=path, n_ctx=512, lora_path=lora, lora_scale=scale, logits_all=True, verbose=False)
        toks = la.tokenize(PROMPT.encode())
        la.eval(toks)
        got = la.scores[: len(toks)]
        out = os.path.join(os.path.dirname(lora), f"lora-logits-{scale}.f32")
        packlm("logits", path, "--tokens", ",".join(map(str, toks)), "--all", "--lora", f"{lora}:{scale}", "--out", out)
        want = np.fromfile(out, dtype="<f4").reshape(len(toks), -1)
        os.remove(out)
        d = max_diff(got, want)
        check(d <= 1e-4, f"{name}: lora scale {scale}: logits {d} from packlm logits --lora (bit-equal: {np.array_equal(got, want)})")
        if scale == 1.0:
            text = text_of(la.create_completion(PROMPT, max_tokens=16, temperature=0))
            ref = json.loads(packlm("generate", path, "--prompt", PROMPT, "-n", "16", "--json", "--lora", lora))
            check(text != greedy_text, f"{name}: the adapter changes the greedy text ({text!r})")
            check(text == ref["text"], f"{name}: lora greedy {text!r} == packlm generate --lora {ref['text']!r}")
            a = la._lora_adapter
            buf = ctypes.create_string_buffer(64)
            n = llama_cpp.llama_adapter_meta_val_str(a, b"adapter.type", buf, 64)
            check(n == 4 and buf.value == b"lora", f"{name}: adapter.type metadata {buf.value!r}")
            n = llama_cpp.llama_adapter_meta_val_str(a, b"adapter.lora.alpha", buf, 64)
            check(buf.value == b"16.000000", f"{name}: adapter.lora.alpha metadata {buf.value!r}")
            count = llama_cpp.llama_adapter_meta_count(a)
            keys = set()
            for i in range(count):
                llama_cpp.llama_adapter_meta_key_by_index(a, i, buf, 64)
                keys.add(buf.value)
            check({b"general.architecture", b"general.type", b"general.name", b"adapter.type", b"adapter.lora.alpha"} <= keys, f"{name}: adapter metadata keys {keys}")
            check(llama_cpp.llama_adapter_meta_key_by_index(a, count, buf, 64) == -1 and buf.value == b"", f"{name}: a key past the end gives -1")
            check(llama_cpp.llama_adapter_get_alora_n_invocation_tokens(a) == 0 and not llama_cpp.llama_adapter_get_alora_invocation_tokens(a),
                  f"{name}: a plain LoRA has no aLoRA invocation tokens")
    check(raises(lambda: Llama(model_path=path, n_ctx=512, lora_path=alora, verbose=False), RuntimeError), f"{name}: an aLoRA is refused")
    if other_base:
        check(raises(lambda: Llama(model_path=path, n_ctx=512, lora_path=other_base, verbose=False), RuntimeError), f"{name}: an adapter of another base is refused")
    elif os.environ.get("PACKLM_REQUIRE_MODELS"):
        check(False, "the adapter of another base (made from the Gemma3 GGUF) is missing")


check(raises(lambda: Llama(model_path=os.path.join(models, "missing.gguf"), verbose=False), ValueError), "missing file raises ValueError")
smol = os.path.join(models, "SmolLM2-135M-Instruct.Q4_1.gguf")
gemma = os.path.join(models, "gemma3-270m-Q4_K_M.gguf")
SMOL_META = {"general.architecture": "llama", "llama.context_length": "8192", "tokenizer.ggml.model": "gpt2"}
GEMMA_META = {"general.architecture": "gemma3", "gemma3.context_length": "32768", "gemma3.attention.sliding_window": "512", "tokenizer.ggml.model": "llama"}
for name, path, word, marker, meta in [("SmolLM2", smol, "Paris", "<|im_start|>", SMOL_META), ("Gemma3", gemma, None, "<start_of_turn>", GEMMA_META)]:
    if os.path.exists(path):
        run_model(name, path, word, marker, meta)
        if name == "SmolLM2":
            greedy = json.loads(packlm("generate", path, "--prompt", PROMPT, "-n", "16", "--json"))["text"]
            embedding_checks(name, path, greedy)
            lora = os.path.join(models, "SmolLM2-135M-Instruct.lora-r16.gguf")
            other = os.path.join(models, "gemma3-270m.lora-r16.gguf")
            lora_checks(name, path, lora, os.path.join(models, "SmolLM2-135M-Instruct.alora-r16.gguf"), other if os.path.exists(other) else None, greedy)
    elif os.environ.get("PACKLM_REQUIRE_MODELS"):
        check(False, f"{path} is missing and PACKLM_REQUIRE_MODELS is set")
    else:
        print(f"skipped {name}: {path} is missing (make models)")


def moe_checks(name, arch):
    """A tiny mixture of experts (tests/fixtures/make_moe_fixtures.py) as llama-cpp-python runs
    it: its architecture and expert counts under llama.cpp's keys, and the logits of every
    position of one batch against HF's golden ones, top-1 equal to real llama.cpp's recorded."""
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "tiny", name)
    golden = json.load(open(os.path.join(folder, "golden.json")))
    want = np.fromfile(os.path.join(folder, "golden.f32"), dtype="<f4").reshape(golden["rows"], golden["n_vocab"])
    recorded = json.load(open(os.path.join(folder, "llama_cpp.json")))["llama_cpp_argmax"]
    llm = Llama(model_path=os.path.join(folder, "model.gguf"), n_ctx=64, logits_all=True, verbose=False)
    meta = llm.metadata
    check(meta.get("general.architecture") == arch, f"{name}: general.architecture {meta.get('general.architecture')!r}")
    check(meta.get(f"{arch}.expert_count") == "8" and meta.get(f"{arch}.expert_used_count") == "2", f"{name}: expert counts in the metadata")
    llm.eval(golden["tokens"])
    got = np.array(llm.scores[: golden["rows"]], dtype=np.float32)
    d = float(np.abs(got - want).max())
    check(d <= 1e-4, f"{name}: max |libllama - HF| = {d}")
    check([int(i) for i in got.argmax(axis=1)] == recorded, f"{name}: top-1 of every position equals llama.cpp's")


for name, arch in [("qwen3_moe", "qwen3moe"), ("qwen2_moe", "qwen2moe"), ("mixtral", "llama"), ("gpt_oss", "gpt-oss")]:
    moe_checks(name, arch)
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)

"""The Python bindings against the tiny llama fixture: every function of include/packlm.h has a
declared signature, every struct's layout and every constant match the header as the C compiler
reads it, the public API is annotated, tokenize as HF, step == step_batch, snapshot/restore,
verify, streaming text, embeddings and LoRA adapters against their reference fixtures, and
errors raised with their status. Prints 'N passed, N failed'.

It tests the packlm that Python imports: tests/python/run.sh installs the wheel in a fresh venv
and runs this file with that venv's python; PYTHONPATH=bindings/python tests the source tree
(with target/release/libpacklm.so)."""
import ctypes
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
from array import array

import packlm

root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
print(f"python: packlm {packlm.__version__} from {os.path.dirname(packlm.__file__)}, library {packlm.library_path()}")
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


with open(os.path.join(root, "include", "packlm.h")) as f:
    header = f.read()
# Every function the header declares has argtypes and restype in the binding's table, and the
# table names no function the header lacks.
declared = set(re.findall(r"^[A-Za-z_][\w \*]*?\b(packlm_\w+)\(", header, re.M))
check(len(declared) >= 40, f"header parse found {len(declared)} functions")
for name in sorted(declared - set(packlm._SIGNATURES)):
    check(False, f"{name} is declared in include/packlm.h but has no signature in packlm")
for name in sorted(set(packlm._SIGNATURES) - declared):
    check(False, f"packlm declares {name}, which include/packlm.h lacks")
for name in sorted(declared & set(packlm._SIGNATURES)):
    fn = getattr(packlm._lib, name)
    check(fn.argtypes is not None, f"{name}: argtypes not set")

# Every macro of the header is a constant of the binding (PACKLM_ dropped from its name) with the
# value the C compiler gives it, or is left out here for the reason given; and every constant of
# the binding is one of the header's.
NOT_EXPOSED = {
    "PACKLM_H": "the include guard",
    "PACKLM_VERSION": "the header's version; version() gives the loaded library's",
    "PACKLM_VERSION_MAJOR": "as PACKLM_VERSION",
    "PACKLM_VERSION_MINOR": "as PACKLM_VERSION",
    "PACKLM_VERSION_PATCH": "as PACKLM_VERSION",
}
macros = dict(re.findall(r"^#define (PACKLM_\w+)[ \t]*(.*)$", header, re.M))
int_macros = sorted(name for name, value in macros.items() if value and not value.startswith('"'))
check(len(int_macros) >= 44, f"header parse found {len(int_macros)} integer macros")
check(sum(n.startswith("PACKLM_ERR_") for n in int_macros) >= 20, "header parse found the PACKLM_ERR_* statuses")
for name in sorted(set(NOT_EXPOSED) - set(macros)):
    check(False, f"NOT_EXPOSED names {name}, which include/packlm.h lacks")
for name in sorted(set(macros) - set(int_macros) - set(NOT_EXPOSED)):
    check(False, f"{name} of include/packlm.h is not a number: give the binding its value or list it in NOT_EXPOSED")
for attr, value in sorted(vars(packlm).items()):
    if re.fullmatch(r"[A-Z][A-Z0-9_]*", attr) and isinstance(value, int):
        check("PACKLM_" + attr in macros, f"packlm.{attr} is not a constant of include/packlm.h")
        check("PACKLM_" + attr not in NOT_EXPOSED, f"packlm.{attr} is exposed but listed in NOT_EXPOSED")

# Every struct the header declares is laid out in the binding. The C compiler's reading of the
# header gives every field's offset, every struct's size, and every integer macro's value.
structs = {name: packlm.STRUCTS.get(name) for name in re.findall(r"^} (packlm_\w+);$", header, re.M)}
for name, cls in list(structs.items()):
    if cls is None:
        check(False, f"struct {name} of include/packlm.h has no ctypes layout in packlm")
        del structs[name]
check(len(structs) == 9, f"{len(structs)} structs checked")
lines = [f'printf("{name} %lld\\n", (long long)({name}));' for name in int_macros]
for c_name, cls in structs.items():
    lines.append(f'printf("{c_name} %zu\\n", sizeof({c_name}));')
    for field, _ in cls._fields_:
        lines.append(f'printf("{c_name}.{field} %zu\\n", offsetof({c_name}, {field}));')
program = "#include <stdio.h>\n#include <stddef.h>\n#include \"packlm.h\"\nint main(void) {\n" + "\n".join(lines) + "\nreturn 0; }\n"
with tempfile.TemporaryDirectory() as tmp:
    src, exe = os.path.join(tmp, "layout.c"), os.path.join(tmp, "layout")
    with open(src, "w") as f:
        f.write(program)
    subprocess.run(["cc", "-std=c11", "-I", os.path.join(root, "include"), src, "-o", exe], check=True)
    c_values = dict(line.rsplit(" ", 1) for line in subprocess.run([exe], check=True, capture_output=True, text=True).stdout.splitlines())
for name in int_macros:
    if name not in NOT_EXPOSED:
        got = getattr(packlm, name[len("PACKLM_"):], None)
        check(got == int(c_values[name]), f"packlm.{name[len('PACKLM_'):]} is {got}, the header's {name} {c_values[name]}")
for c_name, cls in structs.items():
    check(int(c_values[c_name]) == ctypes.sizeof(cls), f"sizeof {c_name}: C {c_values[c_name]}, ctypes {ctypes.sizeof(cls)}")
    for field, _ in cls._fields_:
        got = getattr(cls, field).offset
        check(int(c_values[f"{c_name}.{field}"]) == got, f"offset of {c_name}.{field}: C {c_values[c_name + '.' + field]}, ctypes {got}")

# The public API is annotated (PEP 484) and says so (PEP 561's py.typed).
check(os.path.isfile(os.path.join(os.path.dirname(packlm.__file__), "py.typed")), "py.typed beside the module")


def public_callables():
    for name, obj in vars(packlm).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != "packlm":
            continue
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if attr.startswith("_") and attr != "__init__":
                    continue
                member = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                if inspect.isfunction(member):
                    yield f"{name}.{attr}", member


n_annotated = 0
for name, fn in public_callables():
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    if "." in name:
        params = params[1:]  # self or cls
    missing = [p.name for p in params if p.annotation is inspect.Parameter.empty]
    check(not missing and sig.return_annotation is not inspect.Signature.empty, f"{name}: not annotated ({missing or 'return'})")
    n_annotated += 1
check(n_annotated >= 40, f"{n_annotated} public functions and methods found")

m = packlm.Model(os.path.join(root, "tests", "fixtures", "tiny", "llama"))
check(m.n_vocab == 300 and m.bos == 0, "model info")

# Precision: the tiny pack is a float pack, so exact by default; fast asked of the reference
# backend (no reduced-precision kernels) runs exact; names other than exact/fast are refused.
tiny_dir = os.path.join(root, "tests", "fixtures", "tiny", "llama")
check(m.precision == "exact", f"default precision of a float pack: {m.precision}")
check(packlm.Model(tiny_dir, precision="exact").precision == "exact", "precision='exact'")
check(packlm.Model(tiny_dir, backend=packlm.BACKEND_REFERENCE, precision="fast").precision == "exact",
      "reference backend asked for fast reports exact")
check(packlm.Model(tiny_dir, precision="fast").precision in ("exact", "fast"), "precision='fast' opens")
for bad in ("bogus", "FAST", 2):
    try:
        packlm.Model(tiny_dir, precision=bad)
        check(False, f"precision={bad!r} accepted")
    except packlm.PacklmError as e:
        check(e.status == packlm.ERR_UNSUPPORTED_PRECISION and repr(bad) in str(e), f"precision={bad!r}: {e}")
ids = m.tokenize("Hello world")
check(ids == [0, 41, 283, 77, 80, 265, 272, 77, 69], f"tokenize (HF's ids) got {ids}")
check(m.detokenize(ids[1:]) == "Hello world", "detokenize")

s = m.session()
batched = s.step_batch(ids, all_rows=True)
t = m.session()
stepped = [x for tok in ids for x in t.step(tok)]
check(list(batched) == stepped, "step_batch(all) == steps, bit for bit")

# Several sessions in one pass: each item's logits are the session's alone, bit for bit; a
# session named twice refuses the whole call, naming the item, and changes no session.
sa, sb, ra, rb = m.session(), m.session(), m.session(), m.session()
sa.step_batch(ids[:3]); ra.step_batch(ids[:3])
shared = packlm.step_sessions([(sa, [7], packlm.WANT_LAST), (sb, ids, packlm.WANT_ALL)])
check(list(shared[0]) == list(ra.step(7)), "step_sessions: item 0 == the session alone")
check(list(shared[1]) == list(rb.step_batch(ids, all_rows=True)), "step_sessions: item 1 == the session alone")
snap_a = sa.snapshot()
try:
    packlm.step_sessions([(sa, [8], packlm.WANT_LAST), (sa, [9], packlm.WANT_LAST)])
    check(False, "step_sessions with a session named twice was accepted")
except packlm.PacklmError as e:
    check(e.status == packlm.ERR_INVALID_ARGUMENT and "item 1" in str(e), f"session named twice: {e}")
check(sa.snapshot() == snap_a, "a refused step_sessions changed the session")
# Verify items beside a step: each outcome and state as alone.
va, vb, wa, wb = m.session(), m.session(), m.session(), m.session()
for x in (va, vb, wa, wb):
    x.step_batch(ids[:4])
got = packlm.step_sessions([packlm.VerifyItem(va, 7, [8, 9]), packlm.VerifyItem(vb, 10, [11], sampled=True, temperature=0.8, seed=3)])
want = [wa.verify_greedy(7, [8, 9]), wb.verify_sampled(10, [11], temperature=0.8, seed=3)]
check(got == want, f"step_sessions verify items {got} == alone {want}")
check(va.snapshot() == wa.snapshot() and vb.snapshot() == wb.snapshot(), "verify items leave the state of verifying alone")

# A fork has its source's state and KV bytes (shared, not copied); both then step to the bits of
# fresh sessions fed the same tokens.
fa = m.session()
fa.step_batch(ids)
fb = fa.fork()
check(fb.n_past == fa.n_past and fb.snapshot() == fa.snapshot(), "a fork's state is its source's")
check(fb.kv_bytes == fa.kv_bytes, "a fork copies no KV")
ga, gb = m.session(), m.session()
ga.step_batch(ids); gb.step_batch(ids)
check(list(fa.step(7)) == list(ga.step(7)) and list(fb.step(9)) == list(gb.step(9)), "a fork and its source diverge to fresh bits")

# A constraint: a session holding a copy hands back the rows a standalone constraint masks, bit
# for bit; refused tokens and grammars raise with their status; restore is refused while set.
rx = packlm.Constraint(m, packlm.GRAMMAR_REGEX, "[a-z]{2,4}")
cs, plain = m.session(), m.session()
row = plain.step_batch(ids)
cs.step_batch(ids)
cs.set_constraint(rx)
for _ in range(2):
    t = packlm.argmax(rx.mask(row))
    got = cs.step(t)
    rx.accept(t)
    row = plain.step(t)
    masked = rx.mask(row)
    check(list(got) == list(masked), "a session's constraint masks its rows as the standalone one does")
check(any(v == float("-inf") for v in masked) and any(v != float("-inf") for v in masked), "a regex masks some tokens, not all")
try:
    cs.step(min(range(len(masked)), key=lambda i: masked[i]))
    check(False, "a token the constraint refuses was stepped")
except packlm.PacklmError as e:
    check(e.status == packlm.ERR_INVALID_ARGUMENT, f"refused token: {e}")
try:
    packlm.Constraint(m, packlm.GRAMMAR_REGEX, "([")
    check(False, "a bad regex was taken")
except packlm.PacklmError as e:
    check(e.status == packlm.ERR_INVALID_ARGUMENT and "regex" in str(e), f"bad regex: {e}")
try:
    cs.restore(plain.snapshot())
    check(False, "restore with a constraint set was taken")
except packlm.PacklmError as e:
    check(e.status == packlm.ERR_INVALID_ARGUMENT, f"restore under a constraint: {e}")
# GBNF: the same language as a regex masks the same row the same way; a syntax error names its line.
gb, rx2 = packlm.Constraint(m, packlm.GRAMMAR_GBNF, "root ::= [a-z]{2,4}\n"), packlm.Constraint(m, packlm.GRAMMAR_REGEX, "[a-z]{2,4}")
check(list(gb.mask(row)) == list(rx2.mask(row)), "a GBNF grammar masks as the regex of its language")
try:
    packlm.Constraint(m, packlm.GRAMMAR_GBNF, "root ::= \"a\"\nitem ::= \"b\" )\n")
    check(False, "a bad GBNF grammar was taken")
except packlm.PacklmError as e:
    check(e.status == packlm.ERR_INVALID_ARGUMENT and "line 2" in str(e), f"bad GBNF: {e}")
js = packlm.Constraint(m, packlm.GRAMMAR_JSON_SCHEMA, '{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}')
check(js.state() == (False, False), f"a fresh schema constraint's state {js.state()}")
forced = js.forced()
check(len(forced) > 0 and m.detokenize(forced).startswith("{"), f"the schema forces its opening: {forced}")

snap = s.snapshot()
after = s.step(7)
s.truncate(len(ids))
check(list(s.step(7)) == list(after), "truncate then step")
u = m.session()
u.restore(snap)
check(u.n_past == len(ids) and list(u.step(7)) == list(after), "restore then step")

n_acc, nxt = u.verify_greedy(5, [6, 7])
check(u.n_past == len(ids) + 1 + 1 + n_acc, f"verify holds n_past + 1 + accepted ({u.n_past})")

try:
    s.step(100000)
    check(False, "out-of-range token accepted")
except packlm.PacklmError as e:
    check(e.status == 7 and "outside the vocabulary" in str(e), f"error status/message: {e}")
try:
    u.restore(snap[:-3])
    check(False, "truncated snapshot accepted")
except packlm.PacklmError as e:
    check(e.status == 13, "snapshot error status")
try:
    packlm.Model("/nonexistent/pack")
    check(False, "missing pack opened")
except packlm.PacklmError as e:
    check(e.status == 3 and "/nonexistent/pack" in str(e), "missing pack error")

# A sampled verify through the ABI 2 layout (the sampler behind a pointer, the draft
# probabilities with their count).
v = m.session()
v.step_batch(ids)
n_acc, nxt = v.verify_sampled(5, [6, 7], temperature=0.8, seed=42)
check(v.n_past == len(ids) + 1 + n_acc and 0 <= nxt < m.n_vocab, f"sampled verify: accepted {n_acc}, next {nxt}")

m.set_max_tokenize_bytes(8)
try:
    m.tokenize("Hello world")
    check(False, "text over the tokenize limit accepted")
except packlm.PacklmError as e:
    check(e.status == 17 and "8 bytes" in str(e), f"tokenize limit error: {e}")
m.set_max_tokenize_bytes(0)
t1 = m.session()
before = t1.step_batch(ids)
m.set_threads(1)
t2 = m.session()
check(t2.step_batch(ids) == before, "set_threads(1) keeps the logits' bits")
m.set_threads(0)
try:
    m.set_threads(100000)
    check(False, "a thread count over the maximum was accepted")
except packlm.PacklmError as e:
    check(e.status == 17, f"thread limit error: {e}")
check(m.tokenize("Hello world") == ids, "tokenize after the default limit is restored")

# Model-level calls.
check(m.kv_widths() == [int(w) for w in m.kv_widths()] and len(m.kv_widths()) == m.n_layers, "kv widths")
check('"family"' in m.info_json(), "info json")
check(m.token_to_piece(41) == "H", f"token_to_piece(41) = {m.token_to_piece(41)!r}")
try:
    m.chat_apply([("user", "hi")])
    check(False, "the tiny pack has no chat template")
except packlm.PacklmError as e:
    check(e.status == packlm.ERR_UNSUPPORTED, f"chat_apply without template: {e}")
check(packlm.status_str(packlm.ERR_SNAPSHOT) != packlm.status_str(packlm.ERR_IO), "status_str")
check(packlm.abi_version() == packlm.ABI_VERSION, "abi version")

# Streaming text: the pieces add up to detokenize, each piece whole UTF-8.
text = "Café 日本 😀 done"
toks = m.tokenize(text, add_special=False)
d = m.detokenizer()
pieces = [d.feed(t) for t in toks] + [d.flush()]
check("".join(pieces) == m.detokenize(toks) and "\ufffd" not in "".join(pieces), f"stream {pieces}")
try:
    d.feed(100000)
    check(False, "stream accepted an out-of-range token")
except packlm.PacklmError as e:
    check(e.status == packlm.ERR_TOKEN_OUT_OF_RANGE, "stream error status")

# Sampling, drafting, prefix cache, abort, callbacks.
w = m.session()
logits = w.step_batch(ids)
check(packlm.sample(logits) == packlm.argmax(logits), "greedy sample == argmax")
rng = [7]
first = packlm.sample(logits, temperature=1.0, rng=rng)
rng2 = [7]
check(packlm.sample(logits, temperature=1.0, rng=rng2) == first and rng == rng2 and rng[0] != 7, "seeded sampling")
dr = packlm.Drafter.ngram(3)
check(len(dr.propose(w, 41, 4)) <= 4, "ngram drafter")
cache = packlm.PrefixCache(1 << 24)
cache.store(w)
x = m.session()
check(cache.restore(x, ids + [5]) == len(ids), "prefix cache reuses the stored prompt")
flag = w.abort_flag()
flag.set()
try:
    w.step(5)
    check(False, "an aborted session stepped")
except packlm.PacklmError as e:
    check(e.status == packlm.ERR_ABORTED, "abort status")
flag.clear()
check(len(w.step(5)) == m.n_vocab, "cleared flag steps again")
n_acc, nxt, lg = w.verify_greedy(5, [6], want_logits=True)
check(len(lg) == m.n_vocab and packlm.argmax(lg) == nxt, "verify logits choose the next token")
fractions = []
packlm.Model(os.path.join(root, "tests", "fixtures", "tiny", "llama"), progress=lambda f: fractions.append(f) or True)
check(fractions and fractions[-1] == 1.0, f"progress reported {fractions}")
try:
    packlm.Model(os.path.join(root, "tests", "fixtures", "tiny", "llama"), progress=lambda f: False)
    check(False, "a cancelled open succeeded")
except packlm.PacklmError as e:
    check(e.status == packlm.ERR_ABORTED, "cancelled open status")
messages = []
packlm.set_log_callback(lambda level, msg: messages.append((level, msg)))
packlm.set_log_callback(None)
with packlm.Model(os.path.join(root, "tests", "fixtures", "tiny", "llama")) as scoped:
    check(scoped.n_vocab == 300, "context manager")
check(scoped._ptr is None, "closed on exit")

# Embeddings: the tiny Qwen3 embedder with embeddings.json's token ids, the pack's own pooling
# (last token, normalized), within 1e-4 of sentence-transformers; a batch equals each text
# alone, bit for bit; per-token vectors of text 2 within 1e-4 of HF's last_hidden_state.
tiny = os.path.join(root, "tests", "fixtures", "tiny")
with open(os.path.join(tiny, "embed_qwen3", "embeddings.json")) as f:
    emb = json.load(f)
em = packlm.Model(os.path.join(tiny, "embed_qwen3"))
check(em.embedding_info() == (packlm.POOLING_LAST, True, 64), f"embedding_info {em.embedding_info()}")
check(em.embedding_info(packlm.POOLING_NONE)[2] == 64, "embedding_info(POOLING_NONE) dim")
es = em.session()
vectors = es.embed(emb["tokens"])
worst = max(abs(a - b) for got, want in zip(vectors, emb["embeddings"]) for a, b in zip(got, want))
check(len(vectors) == 5 and all(len(v) == 64 for v in vectors) and worst <= 1e-4,
      f"embed: {len(vectors)} vectors, max abs {worst} from sentence-transformers (1e-4 allowed)")
alone = [es.embed([t])[0] for t in emb["tokens"]]
check(all(array("f", a).tobytes() == array("f", v).tobytes() for a, v in zip(alone, vectors)), "a batch == each text alone, bit for bit")
check(es.embed(emb["tokens"], pooling=packlm.POOLING_LAST, normalize=True) == vectors, "explicit last + normalize == the pack's own")
token_vectors = es.embed([emb["tokens"][emb["token_embeddings_text_index"]]], pooling=packlm.POOLING_NONE)
worst = max(abs(a - b) for got, want in zip(token_vectors, emb["token_embeddings"]) for a, b in zip(got, want))
check(len(token_vectors) == len(emb["token_embeddings"]) and worst <= 1e-4, f"token vectors: max abs {worst} from HF (1e-4 allowed)")
for bad, status in ((dict(pooling=4), packlm.ERR_INVALID_ARGUMENT), (dict(pooling=-2), packlm.ERR_INVALID_ARGUMENT)):
    try:
        es.embed(emb["tokens"], **bad)
        check(False, f"embed({bad}) was accepted")
    except packlm.PacklmError as e:
        check(e.status == status and "params.pooling" in str(e), f"embed({bad}): {e}")
for texts, status in (([], packlm.ERR_INVALID_ARGUMENT), ([[1], []], packlm.ERR_INVALID_ARGUMENT), ([[1, 100000]], packlm.ERR_TOKEN_OUT_OF_RANGE)):
    try:
        es.embed(texts)
        check(False, f"embed({texts}) was accepted")
    except packlm.PacklmError as e:
        check(e.status == status, f"embed({texts}): {e}")
try:
    em.embedding_info(7)
    check(False, "embedding_info(7) was accepted")
except packlm.PacklmError as e:
    check(e.status == packlm.ERR_INVALID_ARGUMENT and "pooling 7" in str(e), f"embedding_info(7): {e}")
check(es.n_past == 0, "embed leaves the session's positions")

# LoRA: tiny/lora_llama on tiny/llama at scale 1.0, every row of lora.json's tokens within 1e-4 of
# PEFT's logits (the PEFT folder and the GGUF alike); a session holding positions refuses a change
# of adapters; an adapter for another base is refused with ERR_TENSOR.
with open(os.path.join(tiny, "lora_llama", "lora.json")) as f:
    lora = json.load(f)
golden = array("f")
with open(os.path.join(tiny, "lora_llama", "logits_scale1.f32"), "rb") as f:
    golden.frombytes(f.read())
if sys.byteorder != "little":
    golden.byteswap()
for source in (os.path.join(tiny, "lora_llama"), os.path.join(tiny, "lora_llama", "adapter.gguf")):
    ad = m.open_adapter(source)
    check((ad.rank, ad.alpha) == (4, 8.0), f"{source}: rank {ad.rank}, alpha {ad.alpha}")
    ls = m.session()
    ls.set_adapters([(ad, 1.0)])
    ad.close()  # the session keeps its own reference
    got = ls.step_batch(lora["tokens"], all_rows=True)
    worst = max(abs(a - b) for a, b in zip(got, golden))
    check(len(got) == len(golden) == lora["rows"] * lora["n_vocab"] and worst <= 1e-4,
          f"{source} at scale 1: max abs {worst} from PEFT (1e-4 allowed)")
    try:
        ls.set_adapters([])
        check(False, "set_adapters on a session holding positions was accepted")
    except packlm.PacklmError as e:
        check(e.status == packlm.ERR_INVALID_ARGUMENT and "positions" in str(e), f"set_adapters on a held session: {e}")
try:
    packlm.Adapter(m, os.path.join(tiny, "lora_other_base"))
    check(False, "an adapter for another base was opened")
except packlm.PacklmError as e:
    check(e.status == packlm.ERR_TENSOR, f"adapter for another base: {e}")
ad = m.open_adapter(os.path.join(tiny, "lora_llama"))
try:
    m.session().set_adapters([(ad, float("nan"))])
    check(False, "a NaN scale was accepted")
except packlm.PacklmError as e:
    check(e.status == packlm.ERR_INVALID_ARGUMENT, f"NaN scale: {e}")
try:
    packlm.Model(tiny_dir).session().set_adapters([(ad, 1.0)])
    check(False, "an adapter of another model handle was accepted")
except packlm.PacklmError as e:
    check(e.status == packlm.ERR_INVALID_ARGUMENT and "another model" in str(e), f"adapter of another model: {e}")
m.session().set_adapters([])

# Control vectors: tiny/cvec_llama (tests/fixtures/make_cvec_fixtures.py, transformers with a hook
# adding v[il] to each decoder layer's output): vectors.f32 on every layer, and a.gguf x 0.75 +
# b.gguf x -0.5 on llama.cpp's default range (1 to the last layer), within 1e-4 of the hooked
# logits; None clears it (a fresh session's bits); a session holding positions refuses a change;
# a wrong width is refused with ERR_INVALID_ARGUMENT, a file that is not a control vector with
# ERR_FORMAT.
cdir = os.path.join(tiny, "cvec_llama")
with open(os.path.join(cdir, "cvec.json")) as f:
    cinfo = json.load(f)


def read_f32(name):
    a = array("f")
    with open(os.path.join(cdir, name), "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    return a


plain = m.session().step_batch(cinfo["tokens"], all_rows=True)
for cv, want_file in ((m.control_vector(read_f32("vectors.f32"), cinfo["hidden"], 0, cinfo["n_layers"] - 1), "logits_data.f32"),
                      (m.open_control_vector([(os.path.join(cdir, "a.gguf"), 0.75), (os.path.join(cdir, "b.gguf"), -0.5)]), "logits_gguf.f32")):
    want = read_f32(want_file)
    cs = m.session()
    cs.set_control_vector(cv)
    cv.close()  # the session keeps its own reference
    got = cs.step_batch(cinfo["tokens"], all_rows=True)
    worst = max(abs(a - b) for a, b in zip(got, want))
    far = max(abs(a - b) for a, b in zip(plain, want))
    check(len(got) == len(want) and worst <= 1e-4 and far > 0.1, f"{want_file}: max abs {worst} from transformers, no vector {far}")
    try:
        cs.set_control_vector(None)
        check(False, "set_control_vector on a session holding positions was accepted")
    except packlm.PacklmError as e:
        check(e.status == packlm.ERR_INVALID_ARGUMENT and "positions" in str(e), f"set_control_vector on a held session: {e}")
    cs.truncate(0)
    cs.set_control_vector(None)
    check(cs.step_batch(cinfo["tokens"], all_rows=True).tobytes() == plain.tobytes(), f"{want_file}: cleared differs from a fresh session")
try:
    m.control_vector(read_f32("vectors.f32"), cinfo["hidden"] + 1, 0, 1)
    check(False, "a control vector of the wrong width was made")
except packlm.PacklmError as e:
    check(e.status == packlm.ERR_INVALID_ARGUMENT and "hidden size" in str(e), f"wrong width: {e}")
try:
    m.open_control_vector([(os.path.join(tiny, "lora_llama", "adapter.gguf"), 1.0)])
    check(False, "a LoRA GGUF was read as a control vector")
except packlm.PacklmError as e:
    check(e.status == packlm.ERR_FORMAT and "not a control vector" in str(e), f"LoRA GGUF as a control vector: {e}")

# A mixture of experts (tests/fixtures/make_moe_fixtures.py; gpt-oss with attention sinks too): the HF folder and its GGUF give HF's
# logits, and the info JSON states the experts and the dense layer.
for moe_pack in [os.path.join(tiny, "qwen3_moe"), os.path.join(tiny, "qwen3_moe", "model.gguf"), os.path.join(tiny, "qwen3_moe_dense"),
                 os.path.join(tiny, "gpt_oss", "model.gguf"), os.path.join(tiny, "gpt_oss"), os.path.join(tiny, "qwen2_moe", "model.gguf")]:
    folder = moe_pack[: -len("/model.gguf")] if moe_pack.endswith(".gguf") else moe_pack
    with open(os.path.join(folder, "golden.json")) as f:
        mg = json.load(f)
    with open(os.path.join(folder, "golden.f32"), "rb") as f:
        want = array("f", f.read())
    mm = packlm.Model(moe_pack)
    got = mm.session().step_batch(mg["tokens"], all_rows=True)
    worst = max(abs(a - b) for a, b in zip(got, want))
    check(len(got) == len(want) and worst <= 1e-4, f"{moe_pack}: max abs {worst} from transformers")
    experts = json.loads(mm.info_json())["experts"]
    dense = [1] if folder.endswith("dense") else []
    check(experts["experts"] == 8 and experts["experts_per_token"] == 2 and experts["dense_layers"] == dense, f"{moe_pack}: info experts {experts}")

# The npu backend on ONNX Runtime's CPU execution provider, its library named by PACKLM_ONNXRUNTIME
# (make py-test sets it from scripts/fetch_onnxruntime.sh, with PACKLM_REQUIRE_ONNXRUNTIME, so a
# missing runtime fails there). Skipped, saying why, only when neither is set.
if not os.environ.get("PACKLM_ONNXRUNTIME") and "PACKLM_REQUIRE_ONNXRUNTIME" not in os.environ:
    print("python: npu part skipped: PACKLM_ONNXRUNTIME (ONNX Runtime's library) and PACKLM_REQUIRE_ONNXRUNTIME are unset")
else:
    # The golden tokens stepped one by one on npu (cpu provider) and on host at exact: every row
    # within 1e-4; the info JSON names the backend and the provider.
    with open(os.path.join(tiny_dir, "golden.json")) as f:
        npu_tokens = json.load(f)["tokens"]
    check(len(npu_tokens) == 20, f"golden.json: {len(npu_tokens)} tokens")
    try:
        npu = packlm.Model(tiny_dir, backend=packlm.BACKEND_NPU, provider="cpu")
    except packlm.PacklmError as e:
        npu = None
        check(False, f"open on the npu backend: {e}")
    if npu is not None:
        host = packlm.Model(tiny_dir, backend=packlm.BACKEND_HOST, precision="exact")
        check(npu.precision == "exact", f"npu precision {npu.precision}")
        info = json.loads(npu.info_json())
        check(info["backend"] == "npu" and "ONNX Runtime" in info["device"] and "cpu" in info["device"],
              f"npu info JSON: backend {info['backend']!r}, device {info['device']!r}")
        check(json.loads(host.info_json())["backend"] == "host", "host info JSON backend")
        ns, hs = npu.session(), host.session()
        worst, rows = 0.0, 0
        for tok in npu_tokens:
            a, b = ns.step(tok), hs.step(tok)
            rows += len(a) == len(b) == 300
            worst = max([worst] + [abs(x - y) for x, y in zip(a, b)])
        check(rows == len(npu_tokens) and worst <= 1e-4, f"npu vs host over {len(npu_tokens)} steps: {rows} full rows, max abs {worst}")
        print(f"python: npu vs host over {len(npu_tokens)} steps: max abs {worst:g}")
    # The provider and its options reach ONNX Runtime: "qnn" is not in the CPU build; the cpu
    # provider takes no options.
    try:
        packlm.Model(tiny_dir, backend=packlm.BACKEND_NPU, provider="qnn")
        check(False, "provider qnn gave a model")
    except packlm.PacklmError as e:
        check(e.status == packlm.ERR_BACKEND_UNAVAILABLE and '"qnn"' in e.message, f"provider qnn: {e}")
    try:
        packlm.Model(tiny_dir, backend=packlm.BACKEND_NPU, provider_options="intra_op_num_threads=1")
        check(False, "the cpu provider took options")
    except packlm.PacklmError as e:
        check(e.status == packlm.ERR_INVALID_ARGUMENT and "intra_op_num_threads=1" in e.message, f"options for the cpu provider: {e}")
    # compile_ahead=100 on the tiny llama (context 128): the open compiles the graphs of 14 pass
    # shapes (parts of 1 to 64 rows ending at 64 and at 100) and reports each as its second half,
    # so at least 13 fractions fall between 0.5 and 1 (an open without it reports only its
    # layers'); a callback that says stop at the fifth of those (only the compiles report so
    # many) raises ERR_ABORTED. The model computes what one opened without it does, bit for bit.
    def past_half(fractions):
        return sum(0.5 < f < 1.0 for f in fractions)
    plain_seen = []
    plain = packlm.Model(tiny_dir, backend=packlm.BACKEND_NPU, progress=lambda f: plain_seen.append(f) or True)
    ahead_seen = []
    ahead = packlm.Model(tiny_dir, backend=packlm.BACKEND_NPU, progress=lambda f: ahead_seen.append(f) or True, compile_ahead=100)
    check(past_half(plain_seen) < 13, f"an open without compile_ahead: {plain_seen}")
    check(past_half(ahead_seen) >= 13 and ahead_seen == sorted(ahead_seen) and ahead_seen[-1] == 1.0,
          f"compile_ahead=100: {past_half(ahead_seen)} fractions in (0.5, 1), want at least 13: {ahead_seen}")
    check(list(ahead.session().step_batch(npu_tokens, all_rows=True)) == list(plain.session().step_batch(npu_tokens, all_rows=True)),
          "compile_ahead=100 changed the golden tokens' logits")
    stop_seen = []
    try:
        packlm.Model(tiny_dir, backend=packlm.BACKEND_NPU, progress=lambda f: stop_seen.append(f) or past_half(stop_seen) < 5, compile_ahead=100)
        check(False, f"a callback that said stop while compiling gave a model: {stop_seen}")
    except packlm.PacklmError as e:
        check(e.status == packlm.ERR_ABORTED and past_half(stop_seen) == 5, f"stopped while compiling: {e}, {stop_seen}")
    del plain, ahead
    # export_onnx_dir: the open makes the folder (and its missing parent); a step_batch compiles
    # at least one graph, written there as graph*.onnx beside a non-empty weights.bin, and
    # graphs.json lists every such file with its inputs and outputs. A folder under a regular
    # file cannot be made: ERR_IO naming it.
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "export", "graphs")
        exporting = packlm.Model(tiny_dir, backend=packlm.BACKEND_NPU, export_onnx_dir=out)
        exporting.session().step_batch(npu_tokens, all_rows=True)
        del exporting
        files = sorted(os.listdir(out)) if os.path.isdir(out) else []
        onnx = [f for f in files if f.startswith("graph") and f.endswith(".onnx")]
        check(len(onnx) >= 1 and "weights.bin" in files and os.path.getsize(os.path.join(out, "weights.bin")) > 0,
              f"export_onnx_dir holds {files}")
        graphs = []
        if "graphs.json" in files:
            with open(os.path.join(out, "graphs.json")) as f:
                graphs = json.load(f)["graphs"]
        check(sorted(g["file"] for g in graphs) == onnx and all(g["inputs"] and g["outputs"] for g in graphs),
              f"graphs.json lists {[g['file'] for g in graphs]}, the folder {onnx}")
        blocker = os.path.join(tmp, "a_file")
        open(blocker, "wb").close()
        try:
            packlm.Model(tiny_dir, backend=packlm.BACKEND_NPU, export_onnx_dir=os.path.join(blocker, "graphs"))
            check(False, "export_onnx_dir under a regular file gave a model")
        except packlm.PacklmError as e:
            check(e.status == packlm.ERR_IO and os.path.join(blocker, "graphs") in e.message, f"export_onnx_dir under a regular file: {e}")
# compile_ahead is a C uint32: a count it cannot hold is refused, not wrapped; this needs no
# ONNX Runtime.
for bad_count in (-1, 1 << 32):
    try:
        packlm.Model(tiny_dir, backend=packlm.BACKEND_NPU, compile_ahead=bad_count)
        check(False, f"compile_ahead={bad_count} gave a model")
    except packlm.PacklmError as e:
        check(e.status == packlm.ERR_INVALID_ARGUMENT and str(bad_count) in e.message, f"compile_ahead={bad_count}: {e}")
# A library that cannot be loaded is unavailable and named (the option in place of
# PACKLM_ONNXRUNTIME); this needs no ONNX Runtime.
with tempfile.TemporaryDirectory() as tmp:
    missing = os.path.join(tmp, "libonnxruntime.so.1")
    try:
        packlm.Model(tiny_dir, backend=packlm.BACKEND_NPU, onnxruntime_library=missing)
        check(False, f"a missing ONNX Runtime library ({missing}) gave a model")
    except packlm.PacklmError as e:
        check(e.status == packlm.ERR_BACKEND_UNAVAILABLE and missing in e.message, f"missing ONNX Runtime library: {e}")
print(f"python: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)

"""The Python bindings against the tiny llama fixture: tokenize as HF, step == step_batch,
snapshot/restore, verify, and errors raised with their status. Prints 'N passed, N failed'."""
import os
import sys

root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(root, "bindings", "python"))
import packlm  # noqa: E402

passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


# The ctypes layouts against the C compiler's reading of include/packlm.h: every field's offset
# and every struct's size.
import ctypes  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402

structs = {"packlm_info": packlm._Info, "packlm_sampler_params": packlm._SamplerParams,
           "packlm_verify_params": packlm._VerifyParams, "packlm_verify_result": packlm._VerifyResult}
lines = []
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
    c_layout = dict(line.rsplit(" ", 1) for line in subprocess.run([exe], check=True, capture_output=True, text=True).stdout.splitlines())
for c_name, cls in structs.items():
    check(int(c_layout[c_name]) == ctypes.sizeof(cls), f"sizeof {c_name}: C {c_layout[c_name]}, ctypes {ctypes.sizeof(cls)}")
    for field, _ in cls._fields_:
        got = getattr(cls, field).offset
        check(int(c_layout[f"{c_name}.{field}"]) == got, f"offset of {c_name}.{field}: C {c_layout[c_name + '.' + field]}, ctypes {got}")

m = packlm.Model(os.path.join(root, "tests", "fixtures", "tiny", "llama"))
check(m.n_vocab == 300 and m.bos == 0, "model info")
ids = m.tokenize("Hello world")
check(ids == [0, 41, 283, 77, 80, 265, 272, 77, 69], f"tokenize (HF's ids) got {ids}")
check(m.detokenize(ids[1:]) == "Hello world", "detokenize")

s = m.session()
batched = s.step_batch(ids, all_rows=True)
t = m.session()
stepped = [x for tok in ids for x in t.step(tok)]
check(list(batched) == stepped, "step_batch(all) == steps, bit for bit")

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
check(m.tokenize("Hello world") == ids, "tokenize after the default limit is restored")

print(f"python: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)

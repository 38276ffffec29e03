"""The graphs `packlm export-onnx` wrote, run by ONNX Runtime's own Python API: the prefill
graph's logits against HF transformers' golden logits of the same tokens (an independent
source, within 1e-4) and against what packlm computed (within 1e-5), and the decode graph fed
with the prefill graph's own new keys and values against packlm's step.

usage: check.py EXPORT_DIR GOLDEN_DIR
"""
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

out, golden_dir = Path(sys.argv[1]), Path(sys.argv[2])
about = json.loads((out / "export.json").read_text())
graphs = json.loads((out / "graphs.json").read_text())["graphs"]
tokens, vocab, step_token = about["tokens"], about["vocab"], about["step_token"]
computed = np.fromfile(out / "logits.f32", dtype=np.float32)
n = len(tokens)
assert computed.size == (n + 1) * vocab, (computed.size, n, vocab)
golden = json.loads((golden_dir / "golden.json").read_text())
assert golden["tokens"] == tokens, "export the fixture's golden tokens"
hf = np.fromfile(golden_dir / "golden.f32", dtype=np.float32)

prefill = next(g for g in graphs if g["rows"] == n)
step = next(g for g in graphs if g["rows"] == 1)
assert prefill is not step


def run(g, feeds_by_role):
    sess = ort.InferenceSession(str(out / g["file"]), providers=["CPUExecutionProvider"])
    feeds = {}
    for i in g["inputs"]:
        role, shape = i["is"], i["shape"]
        if role in feeds_by_role:
            v = feeds_by_role[role]
        elif role.startswith("keys of") or role.startswith("values of"):
            v = np.zeros(shape, dtype=np.float32)
        else:
            sys.exit(f"FAIL: {g['file']}: input {i['name']} is {role!r}, which this check cannot feed")
        feeds[i["name"]] = np.asarray(v, dtype=np.int64 if i["type"] == "int64" else np.float32).reshape(shape)
    names = [o["name"] for o in g["outputs"]]
    return dict(zip([o["is"] + "#" + o["name"] for o in g["outputs"]], sess.run(names, feeds)))


def by_role(results, role):
    hits = [v for k, v in results.items() if k.split("#")[0] == role]
    assert len(hits) == 1, (role, list(results))
    return hits[0]


# Prefill: every row's logits.
res = run(prefill, {"token ids": tokens, "position": [0]})
logits = by_role(res, "read").reshape(-1)
d_hf = float(np.abs(logits - hf).max())
d_packlm = float(np.abs(logits - computed[: n * vocab]).max())
print(f"prefill graph ({prefill['file']}): max |onnxruntime - HF| = {d_hf:.3e}, max |onnxruntime - packlm| = {d_packlm:.3e}")
assert d_hf <= 1e-4, d_hf
assert d_packlm <= 1e-5, d_packlm

# Decode: the KV inputs hold the prefill graph's new rows at positions 0..n.
feeds = {"token ids": [step_token], "position": [n]}
for i in step["inputs"]:
    role = i["is"]
    if role.startswith("keys of") or role.startswith("values of"):
        layer = role.split()[-1]
        new = by_role(res, ("new keys of layer " if role.startswith("keys") else "new values of layer ") + layer)
        buf = np.zeros(i["shape"], dtype=np.float32)
        buf[:n] = new.reshape(n, -1)
        feeds[role] = buf
res = run(step, feeds)
logits = by_role(res, "read").reshape(-1)
d = float(np.abs(logits - computed[n * vocab:]).max())
print(f"decode graph ({step['file']}): max |onnxruntime - packlm| = {d:.3e}")
assert d <= 1e-5, d
print("ok")

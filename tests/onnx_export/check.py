"""The graphs `packlm export-onnx` wrote, run by ONNX Runtime's own Python API as the engine
runs them (a prefill in parts of powers of two, each part's new keys and values kept for the
next): the prefill's logits against HF transformers' golden logits of the same tokens (an
independent source, within 1e-4) and against what packlm computed (within 1e-5), and the
decode graph's against packlm's step.

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


def bucket(end):
    """The KV rows a graph reads for a pass ending at `end` (src/backend/graph: powers of two from 64)."""
    b = 64
    while b < end:
        b *= 2
    return b


def graph_for(rows, end):
    hits = [g for g in graphs if g["rows"] == rows and g["kv_rows"] == bucket(end)]
    assert hits, f"no graph of {rows} rows over {bucket(end)} KV rows in {[g['file'] for g in graphs]}"
    return hits[0]


def run(g, feeds_by_role):
    sess = ort.InferenceSession(str(out / g["file"]), providers=["CPUExecutionProvider"])
    feeds = {}
    for i in g["inputs"]:
        role, shape = i["is"], i["shape"]
        if role not in feeds_by_role:
            sys.exit(f"FAIL: {g['file']}: input {i['name']} is {role!r}, which this check cannot feed")
        v = feeds_by_role[role]
        if role.startswith("keys of") or role.startswith("values of"):
            v = v[: shape[0]]
        feeds[i["name"]] = np.asarray(v, dtype=np.int64 if i["type"] == "int64" else np.float32).reshape(shape)
    names = [o["name"] for o in g["outputs"]]
    return dict(zip([o["is"] + "#" + o["name"] for o in g["outputs"]], sess.run(names, feeds)))


def by_role(results, role):
    hits = [v for k, v in results.items() if k.split("#")[0] == role]
    assert len(hits) == 1, (role, list(results))
    return hits[0]


# The KV planes as the host keeps them: every layer's keys and values, zeros past those held.
kv = {}
for g in graphs:
    for i in g["inputs"]:
        if i["is"].startswith("keys of") or i["is"].startswith("values of"):
            width = i["shape"][1]
            kv.setdefault(i["is"], np.zeros((bucket(n + 1), width), dtype=np.float32))


def step(tokens_part, start):
    g = graph_for(len(tokens_part), start + len(tokens_part))
    res = run(g, {"token ids": tokens_part, "position": [start], **kv})
    for role, plane in kv.items():
        new = by_role(res, "new " + role)
        plane[start : start + len(tokens_part)] = new.reshape(len(tokens_part), -1)
    return g, by_role(res, "read").reshape(-1)


# Prefill: the parts the engine runs (powers of two, largest first, up to 128 rows), each
# with every row's logits.
logits, at, files = [], 0, []
while at < n:
    part = 1 << min(n - at, 128).bit_length() - 1
    g, l = step(tokens[at : at + part], at)
    logits.append(l)
    files.append(g["file"])
    at += part
logits = np.concatenate(logits)
d_hf = float(np.abs(logits - hf).max())
d_packlm = float(np.abs(logits - computed[: n * vocab]).max())
print(f"prefill graphs ({', '.join(files)}): max |onnxruntime - HF| = {d_hf:.3e}, max |onnxruntime - packlm| = {d_packlm:.3e}")
assert d_hf <= 1e-4, d_hf
assert d_packlm <= 1e-5, d_packlm

# Decode: the KV inputs hold the prefill graphs' own new rows at positions 0..n.
g, logits = step([step_token], n)
d = float(np.abs(logits - computed[n * vocab :]).max())
print(f"decode graph ({g['file']}): max |onnxruntime - packlm| = {d:.3e}")
assert d <= 1e-5, d
print("ok")

"""The Python host of the cross-host test, over the source tree's bindings/python/packlm and the
library PACKLM_LIB names, else target/release's (protocol: tests/hosts/README.md).
    python_host.py check MODEL DIR        restore state.bin, step 5, compare; write state_python.bin
    python_host.py chain MODEL DIR FROM   restore state_FROM.bin, continue greedily, compare
"""
import os
import sys

root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(root, "bindings", "python"))
import packlm  # noqa: E402

NEXT_TOKEN, N_GREEDY = 5, 8
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("python: FAIL:", what, file=sys.stderr)


def read(dir, name):
    with open(os.path.join(dir, name), "rb") as f:
        return f.read()


def main(argv):
    if len(argv) < 4 or argv[1] not in ("check", "chain") or (argv[1] == "chain") != (len(argv) == 5):
        print("usage: python_host.py check MODEL DIR | chain MODEL DIR FROM", file=sys.stderr)
        return 2
    if sys.byteorder != "little":
        print("python: the .f32 files are little-endian; this machine is not", file=sys.stderr)
        return 1
    mode, model_path, dir = argv[1], argv[2], argv[3]
    try:
        m = packlm.Model(model_path)
        greedy = [int(x) for x in read(dir, "greedy.txt").split()]
        if len(greedy) < N_GREEDY:
            print("python: greedy.txt: fewer than 8 ids", file=sys.stderr)
            return 1
        if mode == "check":
            s = m.session()
            s.restore(read(dir, "state.bin"))
            logits = s.step(NEXT_TOKEN)
            check(logits.tobytes() == read(dir, "next.f32"), "logits after restore + step 5 are next.f32, bit for bit")
            with open(os.path.join(dir, "state_python.bin"), "wb") as f:
                f.write(s.snapshot())
            for i in range(N_GREEDY):
                t = packlm.argmax(logits)
                check(t == greedy[i], f"greedy token {i} is {greedy[i]} (got {t})")
                logits = s.step(greedy[i])
        else:
            base, s = m.session(), m.session()
            base.restore(read(dir, "state.bin"))
            s.restore(read(dir, f"state_{argv[4]}.bin"))
            check(s.n_past == base.n_past + 1, "the snapshot holds state.bin's positions and token 5")
            for i in range(N_GREEDY - 1):
                t = packlm.argmax(s.step(greedy[i]))
                check(t == greedy[i + 1], f"greedy token {i + 1} is {greedy[i + 1]} (got {t})")
    except packlm.PacklmError as e:
        print(f"python: error {e.status}: {e}", file=sys.stderr)
        return 1
    print(f"python: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))

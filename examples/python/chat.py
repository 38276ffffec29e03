"""A one-turn chat that streams its reply through packlm's detokenizer.
Usage: python3 examples/python/chat.py MODEL [PROMPT] [MAX_TOKENS]"""
import os
import sys

try:
    import packlm  # installed: python -m pip install ./bindings/python
except ModuleNotFoundError as e:
    if e.name != "packlm":
        raise
    # Run from a checkout without installing: the source tree, with target/release's library.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bindings", "python"))
    import packlm


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    prompt = argv[2] if len(argv) > 2 else "What is the capital of France?"
    max_tokens = int(argv[3]) if len(argv) > 3 else 64
    try:
        m = packlm.Model(argv[1])
        s, stream = m.session(), m.detokenizer(skip_special=True)
        # A pack without a chat template gets the prompt as it is.
        text = m.chat_apply([("user", prompt)]) if m.has_chat_template else prompt
        logits = s.step_batch(m.tokenize(text, parse_special=True))
        for _ in range(max_tokens):
            t = packlm.argmax(logits)
            if t in m.stop_tokens:
                break
            print(stream.feed(t), end="", flush=True)
            logits = s.step(t)
        print(stream.flush())
    except packlm.PacklmError as e:
        print(f"error {e.status}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

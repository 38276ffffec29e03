package packlm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// Multi-byte text: accents, a combining mark, CJK, emoji with a skin tone and a ZWJ sequence.
const streamText = "café e\u0301 日本語の文 👋🏽 👩\u200d💻 done"

// streamAll feeds ids one by one and returns every output, the flush's last.
func streamAll(t *testing.T, m *Model, ids []uint32, flags uint32) []string {
	t.Helper()
	d, err := m.NewDetokenizer(flags)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var outs []string
	for _, id := range ids {
		out, err := d.Feed(id)
		if err != nil {
			t.Fatalf("feed %d: %v", id, err)
		}
		outs = append(outs, out)
	}
	out, err := d.Flush()
	if err != nil {
		t.Fatal(err)
	}
	return append(outs, out)
}

func checkStream(t *testing.T, m *Model, text string) {
	t.Helper()
	ids, err := m.Tokenize(text, TokenizeAddSpecial|TokenizeParseSpecial)
	if err != nil {
		t.Fatal(err)
	}
	for _, flags := range []uint32{0, DetokenizeSkipSpecial} {
		want, err := m.Detokenize(ids, flags)
		if err != nil {
			t.Fatal(err)
		}
		outs := streamAll(t, m, ids, flags)
		for i, out := range outs {
			if !utf8.ValidString(out) {
				t.Fatalf("output %d %q is not valid UTF-8", i, out)
			}
		}
		if got := strings.Join(outs, ""); got != want {
			t.Fatalf("flags %d: streamed %q, detokenize %q", flags, got, want)
		}
	}
}

func TestDetokenizerTiny(t *testing.T) {
	checkStream(t, openTiny(t), streamText)
}

// The real SmolLM2 GGUF (byte-level BPE: emoji and CJK span several tokens), when models/ has it;
// PACKLM_REQUIRE_MODELS=1 makes its absence a failure.
func TestDetokenizerSmolLM2(t *testing.T) {
	path := filepath.Join("..", "..", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("PACKLM_REQUIRE_MODELS") == "1" {
			t.Fatalf("PACKLM_REQUIRE_MODELS=1 and %s is missing", path)
		}
		t.Skipf("%s is missing (scripts/fetch_models.sh fetches it)", path)
	}
	m, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ids, err := m.Tokenize(streamText, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A character split over tokens shows as an empty output somewhere before it completes.
	outs := streamAll(t, m, ids, 0)
	held := 0
	for _, out := range outs[:len(outs)-1] {
		if out == "" {
			held++
		}
	}
	if held == 0 {
		t.Fatalf("no token of %v was held back: the text does not test partial characters", ids)
	}
	checkStream(t, m, streamText)
}

func TestDetokenizerBadInput(t *testing.T) {
	m := openTiny(t)
	_, err := m.NewDetokenizer(1 << 7)
	wantStatus(t, err, ErrInvalidArgument)
	d, err := m.NewDetokenizer(0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Feed(uint32(m.Info().VocabSize))
	wantStatus(t, err, ErrTokenOutOfRange)
	d.Close()
	_, err = d.Feed(0)
	wantStatus(t, err, ErrNullArgument)
}

package packlm

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// The tiny random Llama of tests/fixtures, with HF transformers' golden logits and token ids.
var tinyDir = filepath.Join("..", "..", "tests", "fixtures", "tiny")

func openTiny(t *testing.T) *Model {
	t.Helper()
	m, err := Open(filepath.Join(tinyDir, "llama"), nil)
	if err != nil {
		t.Fatalf("open tiny llama: %v", err)
	}
	t.Cleanup(m.Close)
	return m
}

func newSession(t *testing.T, m *Model) *Session {
	t.Helper()
	s, err := m.NewSession(nil)
	if err != nil {
		t.Fatalf("new session: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func wantStatus(t *testing.T, err error, want Status) *Error {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want status %d (%s)", uint32(want), want)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *packlm.Error", err, err)
	}
	if e.Status() != want {
		t.Fatalf("status %d (%v), want %d (%s)", uint32(e.Status()), err, uint32(want), want)
	}
	if e.Message() == "" || !strings.Contains(e.Error(), e.Message()) {
		t.Fatalf("error %q carries no message of the library", e.Error())
	}
	return e
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func nPast(t *testing.T, s *Session) int {
	t.Helper()
	n, err := s.NPast()
	if err != nil {
		t.Fatalf("n_past: %v", err)
	}
	return n
}

func TestVersions(t *testing.T) {
	if LibraryABIVersion() != ABIVersion {
		t.Fatalf("library ABI %d, header ABI %d", LibraryABIVersion(), ABIVersion)
	}
	if Version() == "" {
		t.Fatal("empty version")
	}
	if got := ErrSnapshot.String(); got == "" || got == OK.String() {
		t.Fatalf("status text %q", got)
	}
}

func TestInfo(t *testing.T) {
	info := openTiny(t).Info()
	// tests/fixtures/tiny/llama/config.json and golden_tokenize.json: vocab 300, BOS 0, EOS 1.
	if info.VocabSize != 300 || info.BOS != 0 || info.EOS != 1 {
		t.Fatalf("info %+v", info)
	}
}

// The tiny pack is a float pack: exact by default; the reference backend, which has no
// reduced-precision kernels, runs exact when asked for fast; an unknown code is refused.
func TestPrecision(t *testing.T) {
	if got := openTiny(t).Info().Precision; got != PrecisionExact {
		t.Fatalf("default precision %v, want exact", got)
	}
	dir := filepath.Join(tinyDir, "llama")
	for _, o := range []OpenOptions{{Precision: PrecisionExact}, {Backend: BackendReference, Precision: PrecisionFast}} {
		m, err := Open(dir, &o)
		if err != nil {
			t.Fatalf("open %+v: %v", o, err)
		}
		got := m.Info().Precision
		m.Close()
		if got != PrecisionExact {
			t.Fatalf("open %+v: precision %v, want exact", o, got)
		}
	}
	m, err := Open(dir, &OpenOptions{Precision: 7})
	if m != nil {
		t.Fatalf("precision 7 gave a model")
	}
	if e := wantStatus(t, err, ErrUnsupportedPrecision); !strings.Contains(e.Message(), "precision 7") {
		t.Fatalf("message %q does not name precision 7", e.Message())
	}
	if PrecisionFast.String() != "fast" || Precision(7).String() != "precision(7)" {
		t.Fatalf("names %q %q", PrecisionFast, Precision(7))
	}
}

// Logits within 1e-4 of HF transformers' float32 forward (golden.f32), all 20 rows in one batch.
func TestGoldenLogits(t *testing.T) {
	m := openTiny(t)
	var golden struct {
		Tokens []uint32 `json:"tokens"`
		NVocab int      `json:"n_vocab"`
		Rows   int      `json:"rows"`
	}
	raw, err := os.ReadFile(filepath.Join(tinyDir, "llama", "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(filepath.Join(tinyDir, "llama", "golden.f32"))
	if err != nil {
		t.Fatal(err)
	}
	if len(bin) != 4*golden.Rows*golden.NVocab || golden.Rows != len(golden.Tokens) {
		t.Fatalf("golden.f32 has %d bytes for %d rows of %d", len(bin), golden.Rows, golden.NVocab)
	}
	s := newSession(t, m)
	logits, err := s.StepBatch(golden.Tokens, WantAll)
	if err != nil {
		t.Fatal(err)
	}
	if len(logits) != golden.Rows*golden.NVocab {
		t.Fatalf("%d logits, want %d", len(logits), golden.Rows*golden.NVocab)
	}
	worst := 0.0
	for i := range logits {
		want := math.Float32frombits(binary.LittleEndian.Uint32(bin[4*i:]))
		worst = math.Max(worst, math.Abs(float64(logits[i]-want)))
	}
	if worst > 1e-4 {
		t.Fatalf("max |logit - HF| = %g > 1e-4", worst)
	}
}

// Token ids as HF's tokenizer gives them (golden_tokenize.json), and back to the text.
func TestTokenizeMatchesHF(t *testing.T) {
	m := openTiny(t)
	var golden struct {
		Cases []struct {
			Text       string   `json:"text"`
			AddSpecial []uint32 `json:"ids_add_special"`
			NoSpecial  []uint32 `json:"ids_no_special"`
			Decoded    string   `json:"decoded_no_special"`
		} `json:"cases"`
	}
	raw, err := os.ReadFile(filepath.Join(tinyDir, "golden_tokenize.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	if len(golden.Cases) == 0 {
		t.Fatal("golden_tokenize.json has no cases")
	}
	for _, c := range golden.Cases {
		got, err := m.Tokenize(c.Text, TokenizeAddSpecial|TokenizeParseSpecial)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, c.AddSpecial) {
			t.Fatalf("%q: tokens %v, HF %v", c.Text, got, c.AddSpecial)
		}
		// HF's add_special_tokens=False still parses special-token text (its default).
		got, err = m.Tokenize(c.Text, TokenizeParseSpecial)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, c.NoSpecial) {
			t.Fatalf("%q without special: tokens %v, HF %v", c.Text, got, c.NoSpecial)
		}
		text, err := m.Detokenize(c.NoSpecial, 0)
		if err != nil {
			t.Fatal(err)
		}
		if text != c.Decoded {
			t.Fatalf("detokenize %v = %q, HF %q", c.NoSpecial, text, c.Decoded)
		}
	}
}

// A batch of M tokens gives the same bits as M single steps.
func TestBatchEqualsSequential(t *testing.T) {
	m := openTiny(t)
	tokens := []uint32{0, 41, 283, 77, 80, 265, 272}
	batch, err := newSession(t, m).StepBatch(tokens, WantAll)
	if err != nil {
		t.Fatal(err)
	}
	s := newSession(t, m)
	for i, tok := range tokens {
		row, err := s.Step(tok)
		if err != nil {
			t.Fatal(err)
		}
		if !sameBits(row, batch[i*m.Info().VocabSize:(i+1)*m.Info().VocabSize]) {
			t.Fatalf("row %d: step differs from step_batch", i)
		}
	}
}

// A snapshot restored into a new session continues with the same bits as the original.
func TestSnapshotRestore(t *testing.T) {
	m := openTiny(t)
	a := newSession(t, m)
	if _, err := a.StepBatch([]uint32{0, 41, 283, 77}, WantNone); err != nil {
		t.Fatal(err)
	}
	snap, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	want, err := a.Step(5)
	if err != nil {
		t.Fatal(err)
	}
	b := newSession(t, m)
	if err := b.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if nPast(t, b) != 4 {
		t.Fatalf("restored n_past %d, want 4", nPast(t, b))
	}
	got, err := b.Step(5)
	if err != nil {
		t.Fatal(err)
	}
	if !sameBits(got, want) {
		t.Fatal("restored session's logits differ from the original's")
	}
	// Truncating back to 4 positions is the same state again.
	if err := a.Truncate(4); err != nil {
		t.Fatal(err)
	}
	again, err := a.Step(5)
	if err != nil {
		t.Fatal(err)
	}
	if !sameBits(again, want) {
		t.Fatal("truncated session's logits differ")
	}
}

func TestMissingFile(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "no-such-model.gguf"), nil)
	e := wantStatus(t, err, ErrIO)
	if !strings.Contains(e.Message(), "no-such-model.gguf") {
		t.Fatalf("message %q does not name the file", e.Message())
	}
}

func TestTokenOutOfRange(t *testing.T) {
	m := openTiny(t)
	s := newSession(t, m)
	if _, err := s.Step(0); err != nil {
		t.Fatal(err)
	}
	_, err := s.Step(uint32(m.Info().VocabSize))
	wantStatus(t, err, ErrTokenOutOfRange)
	_, err = s.StepBatch([]uint32{3, 1 << 31}, WantLast)
	wantStatus(t, err, ErrTokenOutOfRange)
	_, err = m.Detokenize([]uint32{1 << 20}, 0)
	wantStatus(t, err, ErrTokenOutOfRange)
	if nPast(t, s) != 1 {
		t.Fatalf("n_past %d after refused steps, want 1", nPast(t, s))
	}
}

func TestCorruptedSnapshot(t *testing.T) {
	m := openTiny(t)
	a := newSession(t, m)
	if _, err := a.StepBatch([]uint32{0, 41, 283}, WantNone); err != nil {
		t.Fatal(err)
	}
	snap, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	b := newSession(t, m)
	if _, err := b.Step(7); err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), snap...)
	flipped[len(flipped)/2] ^= 0x40
	wantStatus(t, b.Restore(flipped), ErrSnapshot)
	wantStatus(t, b.Restore(snap[:len(snap)-1]), ErrSnapshot)
	wantStatus(t, b.Restore(nil), ErrSnapshot)
	if nPast(t, b) != 1 {
		t.Fatalf("n_past %d after refused restores, want 1", nPast(t, b))
	}
}

func TestClosedObjects(t *testing.T) {
	m, err := Open(filepath.Join(tinyDir, "llama"), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.NewSession(nil)
	if err != nil {
		t.Fatal(err)
	}
	// A session holds the model: closing the model first leaves the session usable.
	m.Close()
	if _, err := s.Step(0); err != nil {
		t.Fatalf("step after the model was closed: %v", err)
	}
	s.Close()
	s.Close()
	_, err = s.Step(0)
	wantStatus(t, err, ErrNullArgument)
	_, err = m.Tokenize("x", 0)
	wantStatus(t, err, ErrNullArgument)
}

func TestNoChatTemplate(t *testing.T) {
	m := openTiny(t)
	if m.Info().HasChatTemplate {
		t.Fatal("the tiny llama has no chat template")
	}
	_, err := m.ChatApply([]ChatMessage{{Role: "user", Content: "hi"}}, true)
	wantStatus(t, err, ErrUnsupported)
}

func TestArgmax(t *testing.T) {
	if got := Argmax([]float32{1, 3, 3, -1}); got != 1 {
		t.Fatalf("argmax %d, want 1 (ties to the lowest index)", got)
	}
	if got := Argmax(nil); got != -1 {
		t.Fatalf("argmax of nothing %d", got)
	}
}

// packlm_last_error is per OS thread: each goroutine's error must carry the message of its own
// failed call even while many goroutines fail at once on other threads.
func TestErrorMessagesUnderConcurrency(t *testing.T) {
	m := openTiny(t)
	const workers, rounds = 16, 100
	// A long valid prefix makes each failing call take long enough for the scheduler to hand a
	// goroutine's P to another thread while it is in C, which is when it can move between threads.
	prefix := make([]uint32, 1<<16)
	errs := make(chan string, workers)
	for w := 0; w < workers; w++ {
		go func(w int) {
			for r := 0; r < rounds; r++ {
				// Each goroutine fails with its own value so a message read on the wrong thread shows.
				token := uint32(m.Info().VocabSize + w*rounds + r)
				_, err := m.Detokenize(append(prefix[:len(prefix):len(prefix)], token), 0)
				var e *Error
				if !errors.As(err, &e) || !strings.Contains(e.Message(), strconv.Itoa(int(token))) {
					errs <- fmt.Sprintf("token %d: error %v", token, err)
					return
				}
			}
			errs <- ""
		}(w)
	}
	for w := 0; w < workers; w++ {
		if msg := <-errs; msg != "" {
			t.Fatal(msg)
		}
	}
}

package packlm

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tests/fixtures/tiny/embed_qwen3/embeddings.json: sentence-transformers' vectors of the tiny
// Qwen3 embedder (last-token pooling, then Normalize) and HF's token vectors of one text.
type embedFixture struct {
	Tokens          [][]uint32  `json:"tokens"`
	Dim             int         `json:"dim"`
	Embeddings      [][]float64 `json:"embeddings"`
	TokenIndex      int         `json:"token_embeddings_text_index"`
	TokenEmbeddings [][]float64 `json:"token_embeddings"`
}

// The largest |got[i] - want[i]|, a NaN counting as infinitely far; +Inf for lengths that differ.
func maxAbs[T float32 | float64](got []float32, want []T) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	worst := 0.0
	for i := range got {
		if d := math.Abs(float64(got[i]) - float64(want[i])); !(d <= worst) {
			worst = d
		}
	}
	return worst
}

// The pack's own pooling within 1e-4 of sentence-transformers; a batch equals each text alone,
// bit for bit; per-token vectors within 1e-4 of HF; bad codes and texts refused with their
// status.
func TestEmbedMatchesSentenceTransformers(t *testing.T) {
	dir := filepath.Join(tinyDir, "embed_qwen3")
	raw, err := os.ReadFile(filepath.Join(dir, "embeddings.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx embedFixture
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	m, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	info, err := m.EmbeddingInfo(PoolingDefault)
	if err != nil {
		t.Fatal(err)
	}
	if info != (EmbeddingInfo{DefaultPooling: PoolingLast, DefaultNormalize: true, Dim: 64}) {
		t.Fatalf("EmbeddingInfo(PoolingDefault) = %+v", info)
	}
	s := newSession(t, m)
	all, err := s.Embed(fx.Tokens, PoolingDefault, NormalizeDefault)
	if err != nil {
		t.Fatal(err)
	}
	if all.Rows != len(fx.Embeddings) || all.Dim != fx.Dim {
		t.Fatalf("%d rows x %d, want %d x %d", all.Rows, all.Dim, len(fx.Embeddings), fx.Dim)
	}
	for i, want := range fx.Embeddings {
		if d := maxAbs(all.Row(i), want); d > 1e-4 {
			t.Errorf("text %d: max abs %g from sentence-transformers (1e-4 allowed)", i, d)
		}
		one, err := s.Embed(fx.Tokens[i:i+1], PoolingDefault, NormalizeDefault)
		if err != nil {
			t.Fatal(err)
		}
		if !sameBits(one.Values, all.Row(i)) {
			t.Errorf("text %d alone differs from its row in the batch", i)
		}
	}
	explicit, err := s.Embed(fx.Tokens, PoolingLast, NormalizeOn)
	if err != nil || !sameBits(explicit.Values, all.Values) {
		t.Errorf("PoolingLast + NormalizeOn differs from the pack's own (%v)", err)
	}
	perToken, err := s.Embed(fx.Tokens[fx.TokenIndex:fx.TokenIndex+1], PoolingNone, NormalizeDefault)
	if err != nil {
		t.Fatal(err)
	}
	if perToken.Rows != len(fx.TokenEmbeddings) {
		t.Fatalf("PoolingNone: %d rows, want %d", perToken.Rows, len(fx.TokenEmbeddings))
	}
	for i, want := range fx.TokenEmbeddings {
		if d := maxAbs(perToken.Row(i), want); d > 1e-4 {
			t.Errorf("token %d: max abs %g from HF (1e-4 allowed)", i, d)
		}
	}
	e := wantStatus(t, func() error { _, err := s.Embed(fx.Tokens, Pooling(4), NormalizeDefault); return err }(), ErrInvalidArgument)
	if !strings.Contains(e.Message(), "params.pooling 4") {
		t.Errorf("message %q does not name params.pooling 4", e.Message())
	}
	e = wantStatus(t, func() error { _, err := s.Embed(fx.Tokens, PoolingDefault, Normalize(2)); return err }(), ErrInvalidArgument)
	if !strings.Contains(e.Message(), "params.normalize 2") {
		t.Errorf("message %q does not name params.normalize 2", e.Message())
	}
	wantStatus(t, func() error { _, err := s.Embed(nil, PoolingDefault, NormalizeDefault); return err }(), ErrInvalidArgument)
	wantStatus(t, func() error { _, err := s.Embed([][]uint32{{1}, {}}, PoolingDefault, NormalizeDefault); return err }(), ErrInvalidArgument)
	wantStatus(t, func() error { _, err := s.Embed([][]uint32{{1, 100000}}, PoolingDefault, NormalizeDefault); return err }(), ErrTokenOutOfRange)
	wantStatus(t, func() error { _, err := m.EmbeddingInfo(Pooling(-2)); return err }(), ErrInvalidArgument)
	if n, err := s.NPast(); err != nil || n != 0 {
		t.Errorf("embed left the session at %d positions (%v)", n, err)
	}
}

// tests/fixtures/tiny/lora_llama on tiny/llama at scale 1: every row of lora.json's tokens
// within 1e-4 of PEFT's logits_scale1.f32, from the PEFT folder and the GGUF alike; a session
// holding positions refuses new adapters; an adapter for another base gives ErrTensor.
func TestLoRAMatchesPEFT(t *testing.T) {
	dir := filepath.Join(tinyDir, "lora_llama")
	raw, err := os.ReadFile(filepath.Join(dir, "lora.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Tokens []uint32 `json:"tokens"`
		Rows   int      `json:"rows"`
		NVocab int      `json:"n_vocab"`
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	bytes, err := os.ReadFile(filepath.Join(dir, "logits_scale1.f32"))
	if err != nil {
		t.Fatal(err)
	}
	golden := make([]float32, len(bytes)/4)
	for i := range golden {
		golden[i] = math.Float32frombits(binary.LittleEndian.Uint32(bytes[4*i:]))
	}
	m := openTiny(t)
	for _, source := range []string{dir, filepath.Join(dir, "adapter.gguf")} {
		a, err := m.OpenAdapter(source)
		if err != nil {
			t.Fatal(err)
		}
		if a.Rank() != 4 || a.Alpha() != 8 {
			t.Errorf("%s: rank %d, alpha %g; lora.json says 4 and 8", source, a.Rank(), a.Alpha())
		}
		s := newSession(t, m)
		if err := s.SetAdapters([]AdapterScale{{a, 1}}); err != nil {
			t.Fatal(err)
		}
		a.Close() // the session keeps its own reference
		logits, err := s.StepBatch(fx.Tokens, WantAll)
		if err != nil {
			t.Fatal(err)
		}
		if len(logits) != fx.Rows*fx.NVocab || len(golden) != len(logits) {
			t.Fatalf("%d logits, %d golden, want %d", len(logits), len(golden), fx.Rows*fx.NVocab)
		}
		worst := 0.0
		for i := range logits {
			if d := math.Abs(float64(logits[i] - golden[i])); !(d <= worst) {
				worst = d
			}
		}
		if worst > 1e-4 {
			t.Errorf("%s at scale 1: max abs %g from PEFT (1e-4 allowed)", source, worst)
		}
		e := wantStatus(t, s.SetAdapters(nil), ErrInvalidArgument)
		if !strings.Contains(e.Message(), "positions") {
			t.Errorf("message %q does not say the session holds positions", e.Message())
		}
	}
	_, err = m.OpenAdapter(filepath.Join(tinyDir, "lora_other_base"))
	wantStatus(t, err, ErrTensor)
	a, err := m.OpenAdapter(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	s := newSession(t, m)
	wantStatus(t, s.SetAdapters([]AdapterScale{{a, float32(math.Inf(1))}}), ErrInvalidArgument)
	other := openTiny(t)
	wantStatus(t, newSession(t, other).SetAdapters([]AdapterScale{{a, 1}}), ErrInvalidArgument)
	if err := s.SetAdapters(nil); err != nil {
		t.Errorf("no adapters on an empty session: %v", err)
	}
}

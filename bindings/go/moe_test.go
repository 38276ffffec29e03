package packlm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// A mixture of experts (tests/fixtures/make_moe_fixtures.py): the Qwen3-MoE folder and its
// GGUF, the Mixtral GGUF, the gpt-oss GGUF and its folder (fused experts), give HF transformers' logits
// within 1e-4, and a pass of all the
// tokens gives the bits of stepping them one by one.
func TestMixturesMatchTransformers(t *testing.T) {
	for _, c := range []struct{ fixture, pack string }{
		{"qwen3_moe", "qwen3_moe"},
		{"qwen3_moe", filepath.Join("qwen3_moe", "model.gguf")},
		{"mixtral", filepath.Join("mixtral", "model.gguf")},
		{"gpt_oss", filepath.Join("gpt_oss", "model.gguf")},
		{"gpt_oss", "gpt_oss"},
	} {
		raw, err := os.ReadFile(filepath.Join(tinyDir, c.fixture, "golden.json"))
		if err != nil {
			t.Fatal(err)
		}
		var g struct {
			Tokens []uint32 `json:"tokens"`
		}
		if err := json.Unmarshal(raw, &g); err != nil {
			t.Fatal(err)
		}
		golden := readF32(t, filepath.Join(tinyDir, c.fixture, "golden.f32"))
		m, err := Open(filepath.Join(tinyDir, c.pack), nil)
		if err != nil {
			t.Fatalf("open %s: %v", c.pack, err)
		}
		t.Cleanup(m.Close)
		all, err := newSession(t, m).StepBatch(g.Tokens, WantAll)
		if err != nil {
			t.Fatal(err)
		}
		if d := maxAbs(all, golden); d > 1e-4 {
			t.Errorf("%s: max abs %g from transformers (1e-4 allowed)", c.pack, d)
		}
		s := newSession(t, m)
		var stepped []float32
		for _, tok := range g.Tokens {
			row, err := s.Step(tok)
			if err != nil {
				t.Fatal(err)
			}
			stepped = append(stepped, row...)
		}
		if !sameBits(all, stepped) {
			t.Errorf("%s: a pass of %d tokens differs from stepping them", c.pack, len(g.Tokens))
		}
	}
}

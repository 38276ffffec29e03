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

func readF32(t *testing.T, path string) []float32 {
	t.Helper()
	bytes, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v := make([]float32, len(bytes)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(bytes[4*i:]))
	}
	return v
}

// tests/fixtures/tiny/cvec_llama (make_cvec_fixtures.py: transformers with a hook adding v[il]
// to each decoder layer's output) on tiny/llama: vectors.f32 on layers 0..1 and a.gguf x 0.75 +
// b.gguf x -0.5 on layer 1, every row within 1e-4 of the hooked logits and far from no vector's;
// nil clears it (a fresh session's bits); a session holding positions refuses a change; a wrong
// width gives ErrInvalidArgument, a LoRA GGUF ErrFormat.
func TestControlVectorMatchesTransformers(t *testing.T) {
	dir := filepath.Join(tinyDir, "cvec_llama")
	raw, err := os.ReadFile(filepath.Join(dir, "cvec.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Tokens  []uint32 `json:"tokens"`
		NLayers int      `json:"n_layers"`
		Hidden  int      `json:"hidden"`
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	m := openTiny(t)
	plain, err := newSession(t, m).StepBatch(fx.Tokens, WantAll)
	if err != nil {
		t.Fatal(err)
	}
	fromData, err := m.ControlVectorFromData(readF32(t, filepath.Join(dir, "vectors.f32")), fx.Hidden, 0, uint32(fx.NLayers-1))
	if err != nil {
		t.Fatal(err)
	}
	fromFiles, err := m.OpenControlVector([]ControlVectorFile{{filepath.Join(dir, "a.gguf"), 0.75}, {filepath.Join(dir, "b.gguf"), -0.5}}, 1, uint32(fx.NLayers-1))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cv   *ControlVector
		file string
	}{{fromData, "logits_data.f32"}, {fromFiles, "logits_gguf.f32"}} {
		want := readF32(t, filepath.Join(dir, c.file))
		s := newSession(t, m)
		if err := s.SetControlVector(c.cv); err != nil {
			t.Fatal(err)
		}
		c.cv.Close() // the session keeps its own reference
		got, err := s.StepBatch(fx.Tokens, WantAll)
		if err != nil {
			t.Fatal(err)
		}
		if d, far := maxAbs(got, want), maxAbs(plain, want); d > 1e-4 || far <= 0.1 {
			t.Errorf("%s: max abs %g from transformers (1e-4 allowed), no vector %g", c.file, d, far)
		}
		e := wantStatus(t, s.SetControlVector(nil), ErrInvalidArgument)
		if !strings.Contains(e.Message(), "positions") {
			t.Errorf("message %q does not say the session holds positions", e.Message())
		}
		if err := s.Truncate(0); err != nil {
			t.Fatal(err)
		}
		if err := s.SetControlVector(nil); err != nil {
			t.Fatal(err)
		}
		again, err := s.StepBatch(fx.Tokens, WantAll)
		if err != nil {
			t.Fatal(err)
		}
		for i := range again {
			if math.Float32bits(again[i]) != math.Float32bits(plain[i]) {
				t.Fatalf("%s: cleared, logit %d differs from a fresh session's", c.file, i)
			}
		}
	}
	_, err = m.ControlVectorFromData(readF32(t, filepath.Join(dir, "vectors.f32")), fx.Hidden+1, 0, 1)
	wantStatus(t, err, ErrInvalidArgument)
	_, err = m.OpenControlVector([]ControlVectorFile{{filepath.Join(tinyDir, "lora_llama", "adapter.gguf"), 1}}, 1, 1)
	wantStatus(t, err, ErrFormat)
}

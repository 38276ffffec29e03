package packlm

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The npu backend on ONNX Runtime's CPU execution provider. Its library is named by
// PACKLM_ONNXRUNTIME (make go-test sets it from scripts/fetch_onnxruntime.sh, and sets
// PACKLM_REQUIRE_ONNXRUNTIME, so a missing runtime fails there); these tests skip, saying why,
// only when neither is set.
func needONNXRuntime(t *testing.T) {
	t.Helper()
	_, required := os.LookupEnv("PACKLM_REQUIRE_ONNXRUNTIME")
	if os.Getenv("PACKLM_ONNXRUNTIME") == "" && !required {
		t.Skip("skipped: PACKLM_ONNXRUNTIME (ONNX Runtime's library) and PACKLM_REQUIRE_ONNXRUNTIME are unset; scripts/fetch_onnxruntime.sh prints a library's path")
	}
}

// infoBackend is the "backend" and "device" of the model's info JSON.
func infoBackend(t *testing.T, m *Model) (string, string) {
	t.Helper()
	text, err := m.InfoJSON()
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Backend string  `json:"backend"`
		Device  *string `json:"device"`
	}
	if err := json.Unmarshal([]byte(text), &info); err != nil {
		t.Fatalf("info JSON %q: %v", text, err)
	}
	device := ""
	if info.Device != nil {
		device = *info.Device
	}
	return info.Backend, device
}

// The golden tokens of the tiny llama stepped one by one on the npu backend (the cpu provider)
// and on the host backend at exact: every row within 1e-4 (f32 on both sides); the info JSON
// names the backend and ONNX Runtime's provider.
func TestNPUStepsAsTheHostDoes(t *testing.T) {
	needONNXRuntime(t)
	dir := filepath.Join(tinyDir, "llama")
	var golden struct {
		Tokens []uint32 `json:"tokens"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	if len(golden.Tokens) != 20 {
		t.Fatalf("golden.json has %d tokens, want 20", len(golden.Tokens))
	}
	npu, err := Open(dir, &OpenOptions{Backend: BackendNPU, Provider: "cpu"})
	if err != nil {
		t.Fatalf("open on the npu backend: %v", err)
	}
	t.Cleanup(npu.Close)
	host, err := Open(dir, &OpenOptions{Backend: BackendHost, Precision: PrecisionExact})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Close)
	if got := npu.Info().Precision; got != PrecisionExact {
		t.Fatalf("npu precision %v, want exact", got)
	}
	if backend, device := infoBackend(t, npu); backend != "npu" || !strings.Contains(device, "ONNX Runtime") || !strings.Contains(device, "cpu") {
		t.Fatalf("npu model's info JSON: backend %q, device %q", backend, device)
	}
	if backend, _ := infoBackend(t, host); backend != "host" {
		t.Fatalf("host model's info JSON: backend %q", backend)
	}
	ns, hs := newSession(t, npu), newSession(t, host)
	worst := 0.0
	for i, tok := range golden.Tokens {
		a, err := ns.Step(tok)
		if err != nil {
			t.Fatalf("npu step %d: %v", i, err)
		}
		b, err := hs.Step(tok)
		if err != nil {
			t.Fatalf("host step %d: %v", i, err)
		}
		if len(a) != 300 || len(b) != 300 {
			t.Fatalf("step %d: %d and %d logits, want 300", i, len(a), len(b))
		}
		worst = math.Max(worst, maxAbs(a, b))
	}
	t.Logf("npu vs host over %d steps: max |diff| = %g", len(golden.Tokens), worst)
	if !(worst <= 1e-4) {
		t.Fatalf("npu vs host: max |logit diff| = %g > 1e-4", worst)
	}
}

// The provider and its options reach ONNX Runtime: "qnn" (not in the CPU build) is unavailable
// and named; options given to the cpu provider, which takes none, are refused.
func TestNPUProviderOptions(t *testing.T) {
	needONNXRuntime(t)
	dir := filepath.Join(tinyDir, "llama")
	m, err := Open(dir, &OpenOptions{Backend: BackendNPU, Provider: "qnn"})
	if m != nil {
		m.Close()
		t.Fatal("provider qnn gave a model")
	}
	if e := wantStatus(t, err, ErrBackendUnavailable); !strings.Contains(e.Message(), `"qnn"`) {
		t.Fatalf("message %q does not name the provider qnn", e.Message())
	}
	m, err = Open(dir, &OpenOptions{Backend: BackendNPU, ProviderOptions: "intra_op_num_threads=1"})
	if m != nil {
		m.Close()
		t.Fatal("the cpu provider took options")
	}
	if e := wantStatus(t, err, ErrInvalidArgument); !strings.Contains(e.Message(), "intra_op_num_threads=1") {
		t.Fatalf("message %q does not name the options given", e.Message())
	}
}

// A library that cannot be loaded is unavailable, with its path in the message: the option
// takes the place of PACKLM_ONNXRUNTIME. Needs no ONNX Runtime, so it never skips.
func TestNPUWithoutALibrary(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libonnxruntime.so.1")
	m, err := Open(filepath.Join(tinyDir, "llama"), &OpenOptions{Backend: BackendNPU, ONNXRuntimeLibrary: missing})
	if m != nil {
		m.Close()
		t.Fatalf("a missing ONNX Runtime library (%s) gave a model", missing)
	}
	if e := wantStatus(t, err, ErrBackendUnavailable); !strings.Contains(e.Message(), missing) {
		t.Fatalf("message %q does not name %s", e.Message(), missing)
	}
}

// CompileAhead reaches the open: with 100 (the tiny llama's context is 128) it compiles there
// the graphs of 14 pass shapes, each wanting no logits, the last row's and every row's, which
// an open without it leaves to the passes: InfoJSON's device_counters.graphs_compiled says how
// many. The model computes what one opened without it does, bit for bit; a count that is not
// one is refused.
func TestNPUCompileAhead(t *testing.T) {
	needONNXRuntime(t)
	dir := filepath.Join(tinyDir, "llama")
	open := func(ahead int) (*Model, uint64) {
		t.Helper()
		m, err := Open(dir, &OpenOptions{Backend: BackendNPU, CompileAhead: ahead})
		if err != nil {
			t.Fatalf("open with CompileAhead %d: %v", ahead, err)
		}
		t.Cleanup(m.Close)
		text, err := m.InfoJSON()
		if err != nil {
			t.Fatal(err)
		}
		var info struct {
			DeviceCounters *struct {
				GraphsCompiled uint64 `json:"graphs_compiled"`
			} `json:"device_counters"`
		}
		if err := json.Unmarshal([]byte(text), &info); err != nil || info.DeviceCounters == nil {
			t.Fatalf("info has no device_counters (%v): %s", err, text)
		}
		return m, info.DeviceCounters.GraphsCompiled
	}
	plain, none := open(0)
	ahead, compiled := open(100)
	t.Logf("graphs compiled at open: %d without CompileAhead, %d with 100", none, compiled)
	if none != 0 || compiled < 14 {
		t.Fatalf("graphs compiled at open: %d without CompileAhead, %d with 100 (want 0 and at least 14)", none, compiled)
	}
	tokens := []uint32{0, 41, 283, 77, 80, 265, 272, 77, 69}
	want, err := newSession(t, plain).StepBatch(tokens, WantAll)
	if err != nil {
		t.Fatal(err)
	}
	got, err := newSession(t, ahead).StepBatch(tokens, WantAll)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(got) != len(tokens)*300 {
		t.Fatalf("%d and %d logits, want %d", len(got), len(want), len(tokens)*300)
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("logit %d: %g with CompileAhead, %g without", i, got[i], want[i])
		}
	}
	bad := []int{-1}
	if strconv.IntSize == 64 {
		past := uint64(math.MaxUint32)
		past++
		bad = append(bad, int(past))
	}
	for _, bad := range bad {
		m, err := Open(dir, &OpenOptions{Backend: BackendNPU, CompileAhead: bad})
		if m != nil {
			m.Close()
			t.Fatalf("CompileAhead %d gave a model", bad)
		}
		if e := wantStatus(t, err, ErrInvalidArgument); !strings.Contains(e.Message(), strconv.Itoa(bad)) {
			t.Fatalf("message %q does not name %d", e.Message(), bad)
		}
	}
}

// ExportONNXDir reaches the open: it makes the folder (and its missing parent), and a StepBatch
// compiles at least one graph, written there as graph*.onnx beside a non-empty weights.bin;
// graphs.json lists every such file, each with inputs and outputs. A folder under a regular
// file cannot be made: ErrIO naming it.
func TestNPUExportONNXDir(t *testing.T) {
	needONNXRuntime(t)
	dir := filepath.Join(tinyDir, "llama")
	tmp := t.TempDir()
	out := filepath.Join(tmp, "export", "graphs")
	m, err := Open(dir, &OpenOptions{Backend: BackendNPU, ExportONNXDir: out})
	if err != nil {
		t.Fatalf("open with ExportONNXDir: %v", err)
	}
	t.Cleanup(m.Close)
	if _, err := newSession(t, m).StepBatch([]uint32{0, 41, 283, 77, 80, 265, 272, 77, 69}, WantAll); err != nil {
		t.Fatal(err)
	}
	onnx, err := filepath.Glob(filepath.Join(out, "graph*.onnx"))
	if err != nil || len(onnx) == 0 {
		t.Fatalf("no graph*.onnx in %s (%v)", out, err)
	}
	if st, err := os.Stat(filepath.Join(out, "weights.bin")); err != nil || st.Size() == 0 {
		t.Fatalf("weights.bin: %v, %v", st, err)
	}
	raw, err := os.ReadFile(filepath.Join(out, "graphs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		Graphs []struct {
			File    string            `json:"file"`
			Inputs  []json.RawMessage `json:"inputs"`
			Outputs []json.RawMessage `json:"outputs"`
		} `json:"graphs"`
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatalf("graphs.json: %v", err)
	}
	listed := map[string]bool{}
	for _, g := range manifest.Graphs {
		if len(g.Inputs) == 0 || len(g.Outputs) == 0 {
			t.Fatalf("graphs.json: %s has %d inputs and %d outputs", g.File, len(g.Inputs), len(g.Outputs))
		}
		listed[g.File] = true
	}
	for _, f := range onnx {
		if !listed[filepath.Base(f)] {
			t.Fatalf("graphs.json does not list %s: %s", filepath.Base(f), raw)
		}
	}
	if len(manifest.Graphs) != len(onnx) {
		t.Fatalf("graphs.json lists %d graphs, the folder holds %d", len(manifest.Graphs), len(onnx))
	}
	t.Logf("ExportONNXDir: %d graphs written by one StepBatch", len(onnx))
	blocker := filepath.Join(tmp, "a_file")
	if err := os.WriteFile(blocker, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	under := filepath.Join(blocker, "graphs")
	refused, err := Open(dir, &OpenOptions{Backend: BackendNPU, ExportONNXDir: under})
	if refused != nil {
		refused.Close()
		t.Fatalf("ExportONNXDir %s (under a regular file) gave a model", under)
	}
	if e := wantStatus(t, err, ErrIO); !strings.Contains(e.Message(), under) {
		t.Fatalf("message %q does not name %s", e.Message(), under)
	}
}

// The Go host of the cross-host state test (tests/hosts/README.md):
//
//	go_host check DIR        restore DIR/state.bin, step token 5, compare with DIR/next.f32 bit
//	                         for bit, continue greedily and compare with DIR/greedy.txt; write
//	                         DIR/state_go.bin (the state right after restoring and stepping 5)
//	go_host chain DIR FROM   restore DIR/state_FROM.bin and continue greedily from greedy.txt
//
// The model is $PACKLM_HOST_MODEL, else tests/fixtures/tiny/llama found from the working
// directory upwards. Exit 0 with "go: N passed, 0 failed", else non-zero naming each failure.
package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"packlm"
)

const (
	hostName   = "go"
	stepToken  = 5 // the token every host steps after restoring state.bin
	greedyLen  = 8 // ids in greedy.txt
	defaultRel = "tests/fixtures/tiny/llama"
)

type tally struct{ passed, failed int }

func (t *tally) expect(ok bool, format string, args ...interface{}) {
	if ok {
		t.passed++
		return
	}
	t.failed++
	fmt.Fprintf(os.Stderr, "%s: FAIL: %s\n", hostName, fmt.Sprintf(format, args...))
}

func fatal(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "%s: %s\n", hostName, fmt.Sprintf(format, args...))
	os.Exit(1)
}

func modelPath() string {
	if p := os.Getenv("PACKLM_HOST_MODEL"); p != "" {
		return p
	}
	dir, err := os.Getwd()
	if err != nil {
		fatal("working directory: %v", err)
	}
	for {
		p := filepath.Join(dir, defaultRel)
		if _, err := os.Stat(filepath.Join(p, "config.json")); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			fatal("no %s above the working directory; set PACKLM_HOST_MODEL", defaultRel)
		}
		dir = parent
	}
}

func readLogits(path string, nVocab int) []float32 {
	raw, err := os.ReadFile(path)
	if err != nil {
		fatal("%v", err)
	}
	if len(raw) != 4*nVocab {
		fatal("%s: %d bytes, want %d (n_vocab %d little-endian f32)", path, len(raw), 4*nVocab, nVocab)
	}
	out := make([]float32, nVocab)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

func readGreedy(path string) []uint32 {
	raw, err := os.ReadFile(path)
	if err != nil {
		fatal("%v", err)
	}
	var ids []uint32
	for _, line := range strings.Fields(string(raw)) {
		id, err := strconv.ParseUint(line, 10, 32)
		if err != nil {
			fatal("%s: %q is not a token id", path, line)
		}
		ids = append(ids, uint32(id))
	}
	if len(ids) != greedyLen {
		fatal("%s: %d ids, want %d", path, len(ids), greedyLen)
	}
	return ids
}

func sameBits(a, b []float32) (bool, int) {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false, i
		}
	}
	return len(a) == len(b), len(a)
}

func restored(m *packlm.Model, path string) *packlm.Session {
	snap, err := os.ReadFile(path)
	if err != nil {
		fatal("%v", err)
	}
	s, err := m.NewSession(nil)
	if err != nil {
		fatal("%v", err)
	}
	if err := s.Restore(snap); err != nil {
		fatal("restore %s: %v", path, err)
	}
	return s
}

// greedyFrom feeds greedy[from-1], compares the argmax with greedy[from], and so on to the end.
func greedyFrom(t *tally, s *packlm.Session, greedy []uint32, from int) {
	for i := from; i < len(greedy); i++ {
		logits, err := s.Step(greedy[i-1])
		if err != nil {
			fatal("step %d: %v", greedy[i-1], err)
		}
		got := packlm.Argmax(logits)
		t.expect(got == int(greedy[i]), "greedy token %d: %d, want %d", i, got, greedy[i])
	}
}

func check(m *packlm.Model, dir string) tally {
	var t tally
	want := readLogits(filepath.Join(dir, "next.f32"), m.Info().VocabSize)
	greedy := readGreedy(filepath.Join(dir, "greedy.txt"))
	s := restored(m, filepath.Join(dir, "state.bin"))
	defer s.Close()
	logits, err := s.Step(stepToken)
	if err != nil {
		fatal("step %d: %v", stepToken, err)
	}
	ok, at := sameBits(logits, want)
	t.expect(ok, "logits after restore + step %d differ from next.f32 at %d", stepToken, at)
	snap, err := s.Snapshot()
	if err != nil {
		fatal("snapshot: %v", err)
	}
	out := filepath.Join(dir, "state_"+hostName+".bin")
	if err := os.WriteFile(out, snap, 0o644); err != nil {
		fatal("%v", err)
	}
	got := packlm.Argmax(logits)
	t.expect(got == int(greedy[0]), "greedy token 0: %d, want %d", got, greedy[0])
	greedyFrom(&t, s, greedy, 1)
	return t
}

func chain(m *packlm.Model, dir, from string) tally {
	var t tally
	next := readLogits(filepath.Join(dir, "next.f32"), m.Info().VocabSize)
	greedy := readGreedy(filepath.Join(dir, "greedy.txt"))
	t.expect(packlm.Argmax(next) == int(greedy[0]), "greedy.txt starts with %d, next.f32's argmax is %d",
		greedy[0], packlm.Argmax(next))
	s := restored(m, filepath.Join(dir, "state_"+from+".bin"))
	defer s.Close()
	greedyFrom(&t, s, greedy, 1)
	return t
}

func main() {
	if len(os.Args) < 3 || (os.Args[1] == "check") != (len(os.Args) == 3) ||
		(os.Args[1] == "chain") != (len(os.Args) == 4) {
		fatal("usage: go_host check DIR | go_host chain DIR FROM")
	}
	m, err := packlm.Open(modelPath(), nil)
	if err != nil {
		fatal("%v", err)
	}
	defer m.Close()
	var t tally
	switch os.Args[1] {
	case "check":
		t = check(m, os.Args[2])
	case "chain":
		t = chain(m, os.Args[2], os.Args[3])
	}
	fmt.Printf("%s: %d passed, %d failed\n", hostName, t.passed, t.failed)
	if t.failed > 0 {
		os.Exit(1)
	}
}

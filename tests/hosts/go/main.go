// The Go host of the cross-host state test (protocol: tests/hosts/README.md):
//
//	go_host check MODEL DIR        restore DIR/state.bin, step token 5, compare with DIR/next.f32
//	                               bit for bit; write DIR/state_go.bin (the state right then);
//	                               continue greedily and compare with DIR/greedy.txt
//	go_host chain MODEL DIR FROM   restore DIR/state_FROM.bin (state.bin's positions and token 5)
//	                               and continue greedily with greedy.txt's ids
//
// Exit 0 with "go: N passed, 0 failed" as the last line, else non-zero naming each failure.
package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"packlm"
)

const (
	hostName  = "go"
	stepToken = 5 // the token every host steps after restoring state.bin
	greedyLen = 8 // ids in greedy.txt
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

func nPast(s *packlm.Session) int {
	n, err := s.NPast()
	if err != nil {
		fatal("n_past: %v", err)
	}
	return n
}

// chain: state_FROM holds state.bin's positions and token 5, whose logits chose greedy id 0; so
// stepping greedy id i must give greedy id i + 1 as the argmax, for i = 0..6.
func chain(m *packlm.Model, dir, from string) tally {
	var t tally
	greedy := readGreedy(filepath.Join(dir, "greedy.txt"))
	base := restored(m, filepath.Join(dir, "state.bin"))
	defer base.Close()
	s := restored(m, filepath.Join(dir, "state_"+from+".bin"))
	defer s.Close()
	t.expect(nPast(s) == nPast(base)+1, "state_%s.bin holds %d positions, state.bin %d: want one more (token %d)",
		from, nPast(s), nPast(base), stepToken)
	greedyFrom(&t, s, greedy, 1)
	return t
}

func main() {
	args := os.Args
	if !(len(args) == 4 && args[1] == "check") && !(len(args) == 5 && args[1] == "chain") {
		fatal("usage: go_host check MODEL DIR | go_host chain MODEL DIR FROM")
	}
	// The files are little-endian and compared as this machine's float bytes.
	one := uint16(1)
	if *(*byte)(unsafe.Pointer(&one)) != 1 {
		fatal("refusing to run on a big-endian machine (the files are little-endian)")
	}
	m, err := packlm.Open(args[2], nil)
	if err != nil {
		fatal("%v", err)
	}
	defer m.Close()
	var t tally
	if args[1] == "check" {
		t = check(m, args[3])
	} else {
		t = chain(m, args[3], args[4])
	}
	fmt.Printf("%s: %d passed, %d failed\n", hostName, t.passed, t.failed)
	if t.failed > 0 {
		os.Exit(1)
	}
}

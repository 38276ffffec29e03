package packlm

import (
	"bytes"
	"strings"
	"testing"
)

// snapshot is the session's Snapshot, failing the test on an error.
func snapshot(t *testing.T, s *Session) []byte {
	t.Helper()
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return snap
}

// Two sessions with different prompts stepped together give the bits each gives stepped alone,
// for the prompts and for a decode step after them.
func TestStepSessionsEqualsStepBatch(t *testing.T) {
	m := openTiny(t)
	aloneA, aloneB := newSession(t, m), newSession(t, m)
	togetherA, togetherB := newSession(t, m), newSession(t, m)
	rounds := []struct {
		a, b         []uint32
		wantA, wantB Want
	}{
		{[]uint32{0, 41, 283, 77}, []uint32{0, 80, 265}, WantAll, WantLast},
		{[]uint32{5}, []uint32{7}, WantLast, WantLast},
		{[]uint32{272, 9}, []uint32{11}, WantNone, WantAll},
	}
	for r, round := range rounds {
		wantA, err := aloneA.StepBatch(round.a, round.wantA)
		if err != nil {
			t.Fatal(err)
		}
		wantB, err := aloneB.StepBatch(round.b, round.wantB)
		if err != nil {
			t.Fatal(err)
		}
		got, err := StepSessions(m, []StepItem{
			{Session: togetherA, Tokens: round.a, Want: round.wantA},
			{Session: togetherB, Tokens: round.b, Want: round.wantB},
		})
		if err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		if len(got) != 2 {
			t.Fatalf("round %d: %d results for 2 items", r, len(got))
		}
		if !sameBits(got[0], wantA) || !sameBits(got[1], wantB) {
			t.Fatalf("round %d: logits differ from StepBatch alone (%d and %d floats, want %d and %d)",
				r, len(got[0]), len(got[1]), len(wantA), len(wantB))
		}
		if nPast(t, togetherA) != nPast(t, aloneA) || nPast(t, togetherB) != nPast(t, aloneB) {
			t.Fatalf("round %d: n_past %d and %d, want %d and %d", r,
				nPast(t, togetherA), nPast(t, togetherB), nPast(t, aloneA), nPast(t, aloneB))
		}
	}
}

// A session named twice refuses the whole call, naming the second item, and no session changes.
func TestStepSessionsRefusesAll(t *testing.T) {
	m := openTiny(t)
	a, b := newSession(t, m), newSession(t, m)
	if _, err := StepSessions(m, []StepItem{
		{Session: a, Tokens: []uint32{0, 41, 283}, Want: WantNone},
		{Session: b, Tokens: []uint32{0, 80}, Want: WantNone},
	}); err != nil {
		t.Fatal(err)
	}
	beforeA, beforeB := snapshot(t, a), snapshot(t, b)
	got, err := StepSessions(m, []StepItem{
		{Session: a, Tokens: []uint32{5}, Want: WantLast},
		{Session: a, Tokens: []uint32{6}, Want: WantLast},
		{Session: b, Tokens: []uint32{7}, Want: WantLast},
	})
	if got != nil {
		t.Fatal("a refused call returned logits")
	}
	if e := wantStatus(t, err, ErrInvalidArgument); !strings.Contains(e.Message(), "item 1") {
		t.Fatalf("message %q does not name item 1", e.Message())
	}
	if !bytes.Equal(snapshot(t, a), beforeA) || !bytes.Equal(snapshot(t, b), beforeB) {
		t.Fatal("a session changed in a refused call")
	}

	_, err = StepSessions(m, nil)
	wantStatus(t, err, ErrInvalidArgument)
	c := newSession(t, m)
	c.Close()
	_, err = StepSessions(m, []StepItem{{Session: a, Tokens: []uint32{5}}, {Session: c, Tokens: []uint32{6}}})
	if e := wantStatus(t, err, ErrNullArgument); !strings.Contains(e.Message(), "item 1") {
		t.Fatalf("message %q does not name item 1", e.Message())
	}
	if !bytes.Equal(snapshot(t, a), beforeA) {
		t.Fatal("a session changed in a refused call")
	}
}

// A fork has its source's state and shares its KV; the two then step to the bits of fresh
// sessions fed the same tokens.
func TestForkStepsLikeAFreshSession(t *testing.T) {
	m := openTiny(t)
	prompt := []uint32{0, 41, 283, 77, 9}
	a, fresh := newSession(t, m), newSession(t, m)
	for _, s := range []*Session{a, fresh} {
		if _, err := s.StepBatch(prompt, WantNone); err != nil {
			t.Fatal(err)
		}
	}
	f, err := a.Fork()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !bytes.Equal(snapshot(t, f), snapshot(t, a)) {
		t.Fatal("a fork's snapshot differs from its source's")
	}
	ka, err := a.KVBytes()
	if err != nil {
		t.Fatal(err)
	}
	kf, err := f.KVBytes()
	if err != nil || kf != ka {
		t.Fatalf("a fork's family bytes %d, its source's %d (%v)", kf, ka, err)
	}
	got, err := f.Step(11)
	if err != nil {
		t.Fatal(err)
	}
	want, err := fresh.Step(11)
	if err != nil {
		t.Fatal(err)
	}
	if !sameBits(got, want) {
		t.Fatal("a fork's step differs from a fresh session's")
	}
}

package packlm

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

var verifyPrompt = []uint32{0, 272, 9, 11}

// promptedSession is a new session that has been fed verifyPrompt.
func promptedSession(t *testing.T, m *Model) *Session {
	t.Helper()
	s := newSession(t, m)
	if _, err := s.StepBatch(verifyPrompt, WantNone); err != nil {
		t.Fatal(err)
	}
	return s
}

// greedyChain is the independent reference for a greedy verify: a fresh session fed
// verifyPrompt and then stepped one token at a time, each the argmax of the step before. It
// returns n+1 tokens (tokens[0] the argmax after the prompt) and the logits each was chosen
// from.
func greedyChain(t *testing.T, m *Model, n int) ([]uint32, [][]float32) {
	t.Helper()
	s := newSession(t, m)
	row, err := s.StepBatch(verifyPrompt, WantLast)
	if err != nil {
		t.Fatal(err)
	}
	tokens, rows := []uint32{uint32(Argmax(row))}, [][]float32{row}
	for len(tokens) <= n {
		if row, err = s.Step(tokens[len(tokens)-1]); err != nil {
			t.Fatal(err)
		}
		tokens, rows = append(tokens, uint32(Argmax(row))), append(rows, row)
	}
	return tokens, rows
}

// steppedSnapshot is the snapshot of a fresh session fed verifyPrompt and then tokens one by one.
func steppedSnapshot(t *testing.T, m *Model, tokens []uint32) []byte {
	t.Helper()
	s := promptedSession(t, m)
	for _, tok := range tokens {
		if _, err := s.Step(tok); err != nil {
			t.Fatal(err)
		}
	}
	return snapshot(t, s)
}

func sameResult(a, b VerifyResult) bool {
	return a.NAccepted == b.NAccepted && a.NextToken == b.NextToken && sameBits(a.Logits, b.Logits) &&
		a.TotalRounds == b.TotalRounds && a.TotalDrafted == b.TotalDrafted && a.TotalAccepted == b.TotalAccepted
}

// Greedy verify against stepping the same tokens one by one and taking the argmax: a draft that
// is the greedy continuation is taken whole (the bonus token next), one that departs at its third
// token keeps two and corrects the third, an empty one just steps the pending token. The logits
// returned are the stepped row's bits, and the session is the stepped session, byte for byte.
func TestVerifyGreedyMatchesStepping(t *testing.T) {
	m := openTiny(t)
	chain, rows := greedyChain(t, m, 8)
	wrong := (chain[3] + 1) % uint32(m.Info().VocabSize)
	cases := []struct {
		name      string
		draft     []uint32
		nAccepted int
	}{
		{"whole", chain[1:5], 4},
		{"departs at 3", []uint32{chain[1], chain[2], wrong, chain[4]}, 2},
		{"empty", nil, 0},
	}
	for _, c := range cases {
		s := promptedSession(t, m)
		before := nPast(t, s)
		got, err := s.Verify(chain[0], c.draft, VerifyParams{WantLogits: true})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		n := c.nAccepted
		if got.NAccepted != n || got.NextToken != chain[n+1] {
			t.Fatalf("%s: accepted %d, next %d; stepping gives %d, %d", c.name, got.NAccepted, got.NextToken, n, chain[n+1])
		}
		if !sameBits(got.Logits, rows[n+1]) {
			t.Fatalf("%s: the logits differ from the stepped row that chose the next token", c.name)
		}
		if got.TotalRounds != 1 || got.TotalDrafted != uint64(len(c.draft)) || got.TotalAccepted != uint64(n) {
			t.Fatalf("%s: totals %d/%d/%d, want 1/%d/%d", c.name, got.TotalRounds, got.TotalDrafted, got.TotalAccepted, len(c.draft), n)
		}
		if nPast(t, s) != before+1+n {
			t.Fatalf("%s: n_past %d, want %d", c.name, nPast(t, s), before+1+n)
		}
		if !bytes.Equal(snapshot(t, s), steppedSnapshot(t, m, chain[:n+1])) {
			t.Fatalf("%s: the session differs from one stepped through the accepted tokens", c.name)
		}
		if c.name != "whole" {
			continue
		}
		// The next round starts from the bonus token; the totals add up, logits not asked for.
		got, err = s.Verify(got.NextToken, chain[6:8], VerifyParams{})
		if err != nil {
			t.Fatal(err)
		}
		if got.NAccepted != 2 || got.NextToken != chain[8] || got.Logits != nil {
			t.Fatalf("second round: accepted %d, next %d, %d logits; want 2, %d, none", got.NAccepted, got.NextToken, len(got.Logits), chain[8])
		}
		if got.TotalRounds != 2 || got.TotalDrafted != 6 || got.TotalAccepted != 6 {
			t.Fatalf("second round: totals %d/%d/%d, want 2/6/6", got.TotalRounds, got.TotalDrafted, got.TotalAccepted)
		}
	}
}

// A sampled verify with the same seed gives the same outcome and random state twice; the
// session holds 1 + n_accepted new positions, byte for byte those of a fresh session stepped
// through the pending token and the accepted drafts. (At temperature 0.1 these seeds keep 1 or
// 4 of the 5 greedy drafts on the tiny model, so the accepted prefix is neither empty nor whole.)
func TestVerifySampledReproducible(t *testing.T) {
	m := openTiny(t)
	chain, _ := greedyChain(t, m, 6)
	sampler := DefaultSamplerParams()
	sampler.Temperature = 0.1
	for seed := uint64(1); seed <= 6; seed++ {
		var results [2]VerifyResult
		var rngs [2]uint64
		var snaps [2][]byte
		for i := range results {
			s := promptedSession(t, m)
			before := nPast(t, s)
			rngs[i] = seed
			r, err := s.Verify(chain[0], chain[1:6], VerifyParams{Mode: VerifySampled, Sampler: &sampler, RNG: &rngs[i], WantLogits: true})
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			if nPast(t, s) != before+1+r.NAccepted {
				t.Fatalf("seed %d: n_past %d, want %d", seed, nPast(t, s), before+1+r.NAccepted)
			}
			results[i], snaps[i] = r, snapshot(t, s)
		}
		if !sameResult(results[0], results[1]) || rngs[0] != rngs[1] {
			t.Fatalf("seed %d: two runs differ: %+v (rng %d) and %+v (rng %d)", seed, results[0], rngs[0], results[1], rngs[1])
		}
		if rngs[0] == seed {
			t.Fatalf("seed %d: the random state did not advance", seed)
		}
		if len(results[0].Logits) != m.Info().VocabSize {
			t.Fatalf("seed %d: %d logits", seed, len(results[0].Logits))
		}
		n := results[0].NAccepted
		if !bytes.Equal(snaps[0], steppedSnapshot(t, m, chain[:n+1])) {
			t.Fatalf("seed %d: the session differs from one stepped through the %d accepted tokens", seed, n)
		}
	}
}

// A verify item of StepSessions, beside a step item, gives the outcome, random state and session
// bytes of a lone Verify on an identical session, greedy and sampled; the step item gets the bits
// of StepBatch alone, and the verify item no logits (its Want is unread).
func TestVerifyItemMatchesVerifyAlone(t *testing.T) {
	m := openTiny(t)
	chain, _ := greedyChain(t, m, 4)
	draft := []uint32{chain[1], chain[2], (chain[3] + 7) % 300}
	sampler := DefaultSamplerParams()
	sampler.Temperature = 0.1
	for _, mode := range []VerifyMode{VerifyGreedy, VerifySampled} {
		alone, together := promptedSession(t, m), promptedSession(t, m)
		stepAlone, stepTogether := newSession(t, m), newSession(t, m)
		rngAlone, rngTogether := uint64(99), uint64(99)
		paramsAlone := VerifyParams{Mode: mode, Sampler: &sampler, RNG: &rngAlone, WantLogits: true}
		paramsTogether := VerifyParams{Mode: mode, Sampler: &sampler, RNG: &rngTogether, WantLogits: true}
		want, err := alone.Verify(chain[0], draft, paramsAlone)
		if err != nil {
			t.Fatal(err)
		}
		wantStep, err := stepAlone.StepBatch([]uint32{0, 80, 265}, WantLast)
		if err != nil {
			t.Fatal(err)
		}
		var got VerifyResult
		out, err := StepSessions(m, []StepItem{
			{Session: stepTogether, Tokens: []uint32{0, 80, 265}, Want: WantLast},
			{Session: together, Tokens: append([]uint32{chain[0]}, draft...), Want: WantAll, Verify: &paramsTogether, Result: &got},
		})
		if err != nil {
			t.Fatalf("mode %d: %v", mode, err)
		}
		if !sameResult(got, want) || rngTogether != rngAlone {
			t.Fatalf("mode %d: item %+v (rng %d), alone %+v (rng %d)", mode, got, rngTogether, want, rngAlone)
		}
		if mode == VerifyGreedy && (got.NAccepted != 2 || got.NextToken != chain[3]) {
			t.Fatalf("greedy item: accepted %d, next %d; stepping gives 2, %d", got.NAccepted, got.NextToken, chain[3])
		}
		if mode == VerifySampled && rngTogether == 99 {
			t.Fatal("the sampled item's random state did not advance")
		}
		if !bytes.Equal(snapshot(t, together), snapshot(t, alone)) {
			t.Fatalf("mode %d: the item's session differs from the lone verify's", mode)
		}
		if len(out) != 2 || !sameBits(out[0], wantStep) || len(out[1]) != 0 {
			t.Fatalf("mode %d: logits of %d items, the step's same: %v, the verify's %d floats", mode, len(out), sameBits(out[0], wantStep), len(out[1]))
		}
	}
}

// Refused verifies change nothing: no session, random state or result.
func TestVerifyRefusals(t *testing.T) {
	m := openTiny(t)
	chain, _ := greedyChain(t, m, 2)
	s := promptedSession(t, m)
	before := snapshot(t, s)
	sampler := DefaultSamplerParams()
	sampler.Temperature = 1
	rng := uint64(5)

	_, err := s.Verify(chain[0], chain[1:3], VerifyParams{Mode: VerifySampled, RNG: &rng})
	wantStatus(t, err, ErrNullArgument) // no sampler
	_, err = s.Verify(chain[0], chain[1:3], VerifyParams{Mode: VerifySampled, Sampler: &sampler})
	wantStatus(t, err, ErrNullArgument) // no random state
	// k = 2 rows of the drafter's probabilities are 600 floats.
	_, err = s.Verify(chain[0], chain[1:3], VerifyParams{Mode: VerifySampled, Sampler: &sampler, RNG: &rng, DraftProbs: make([]float32, 599)})
	if e := wantStatus(t, err, ErrBufferTooSmall); !strings.Contains(e.Message(), "600") {
		t.Fatalf("message %q does not name the 600 floats needed", e.Message())
	}
	_, err = s.Verify(chain[0], chain[1:3], VerifyParams{Mode: 2})
	wantStatus(t, err, ErrInvalidArgument)
	_, err = s.Verify(chain[0], []uint32{chain[1], 300}, VerifyParams{})
	wantStatus(t, err, ErrTokenOutOfRange)

	result := VerifyResult{NextToken: 12345}
	_, err = StepSessions(m, []StepItem{{Session: s, Tokens: chain[:3], Verify: &VerifyParams{}}})
	if e := wantStatus(t, err, ErrNullArgument); !strings.Contains(e.Message(), "item 0") {
		t.Fatalf("message %q does not name item 0", e.Message())
	}
	other := newSession(t, m)
	_, err = StepSessions(m, []StepItem{
		{Session: other, Tokens: []uint32{0}, Want: WantLast},
		{Session: s, Tokens: chain[:3], Verify: &VerifyParams{Mode: VerifySampled, Sampler: &sampler, RNG: &rng, DraftProbs: []float32{}}, Result: &result},
	})
	if e := wantStatus(t, err, ErrBufferTooSmall); !strings.Contains(e.Message(), "item 1") {
		t.Fatalf("message %q does not name item 1", e.Message())
	}
	if rng != 5 || result.NextToken != 12345 || nPast(t, other) != 0 || !bytes.Equal(snapshot(t, s), before) {
		t.Fatal("a refused verify changed the random state, the result or a session")
	}
}

// Sample at temperature 0 is Argmax; top-k 1 leaves only the argmax at any temperature; a seed
// reproduces its draw and advances the state; -inf masks tokens; the repetition penalty reads
// Recent; bad parameters and logits are refused.
func TestSample(t *testing.T) {
	logits, err := newSession(t, openTiny(t)).Step(0)
	if err != nil {
		t.Fatal(err)
	}
	rng := uint64(7)
	if tok, err := Sample(logits, DefaultSamplerParams(), &rng); err != nil || int(tok) != Argmax(logits) {
		t.Fatalf("temperature 0: token %d (%v), argmax %d", tok, err, Argmax(logits))
	}
	hot := DefaultSamplerParams()
	hot.Temperature, hot.TopK = 1.5, 1
	if tok, err := Sample(logits, hot, &rng); err != nil || int(tok) != Argmax(logits) {
		t.Fatalf("top-k 1: token %d (%v), argmax %d", tok, err, Argmax(logits))
	}

	hot.TopK = 0
	a, b := uint64(2024), uint64(2024)
	ta, errA := Sample(logits, hot, &a)
	tb, errB := Sample(logits, hot, &b)
	if errA != nil || errB != nil || ta != tb || a != b || a == 2024 {
		t.Fatalf("same seed: tokens %d and %d, states %d and %d (%v, %v)", ta, tb, a, b, errA, errB)
	}

	masked := make([]float32, 300)
	for i := range masked {
		masked[i] = float32(math.Inf(-1))
	}
	masked[7] = 0
	if tok, err := Sample(masked, hot, &rng); err != nil || tok != 7 {
		t.Fatalf("all but 7 masked: token %d (%v)", tok, err)
	}

	// 2.0 / 2 = 1.0 falls below 1.5: HF's rule divides a positive logit of a recent token.
	penalised := DefaultSamplerParams()
	penalised.RepetitionPenalty, penalised.Recent = 2, []uint32{0}
	if tok, err := Sample([]float32{2, 1.5, 0}, penalised, &rng); err != nil || tok != 1 {
		t.Fatalf("repetition penalty: token %d (%v), want 1", tok, err)
	}

	_, err = Sample(logits, SamplerParams{}, &rng)
	if e := wantStatus(t, err, ErrInvalidArgument); !strings.Contains(e.Message(), "top_p") {
		t.Fatalf("message %q does not name top_p", e.Message())
	}
	_, err = Sample(logits, DefaultSamplerParams(), nil)
	wantStatus(t, err, ErrNullArgument)
	_, err = Sample([]float32{0, float32(math.NaN())}, DefaultSamplerParams(), &rng)
	wantStatus(t, err, ErrInvalidArgument)
	_, err = Sample(nil, DefaultSamplerParams(), &rng)
	wantStatus(t, err, ErrInvalidArgument) // n_vocab 0
}

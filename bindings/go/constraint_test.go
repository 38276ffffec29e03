package packlm

import (
	"math"
	"regexp"
	"strings"
	"testing"
)

func newConstraint(t *testing.T, m *Model, kind GrammarKind, text string) *Constraint {
	t.Helper()
	c, err := NewConstraint(m, kind, text)
	if err != nil {
		t.Fatalf("constraint %d %q: %v", kind, text, err)
	}
	t.Cleanup(c.Close)
	return c
}

func masked(t *testing.T, c *Constraint, logits []float32) []float32 {
	t.Helper()
	out := append([]float32(nil), logits...)
	if err := c.Mask(out); err != nil {
		t.Fatalf("mask: %v", err)
	}
	return out
}

// lettersRegex is the grammar of the regex tests: exactly six lowercase letters.
const lettersRegex = `[a-z]{6}`

// allowedUnder is the set of tokens that may follow the text `done` under lettersRegex, worked
// out from the tokens' text alone (Go's regexp, not the library's grammar): a token whose text
// keeps the whole a prefix of a match, or a stop token once the match is whole.
func allowedUnder(t *testing.T, m *Model, done string) map[uint32]bool {
	t.Helper()
	prefix := regexp.MustCompile(`^[a-z]{1,6}$`)
	whole := regexp.MustCompile(`^` + lettersRegex + `$`)
	stops, err := m.StopTokens()
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[uint32]bool{}
	isStop := map[uint32]bool{}
	for _, s := range stops {
		isStop[s] = true
		allowed[s] = whole.MatchString(done)
	}
	for id := 0; id < m.Info().VocabSize; id++ {
		if isStop[uint32(id)] {
			continue
		}
		piece, err := m.TokenToPiece(uint32(id))
		if err != nil {
			t.Fatalf("piece of %d: %v", id, err)
		}
		if prefix.MatchString(done + piece) {
			allowed[uint32(id)] = true
		}
	}
	return allowed
}

// checkMask holds a masked row to the raw one it came from: each entry is the raw entry, bit for
// bit, where allowed holds its token and exactly -Inf elsewhere.
func checkMask(t *testing.T, raw, got []float32, allowed map[uint32]bool) {
	t.Helper()
	finite := 0
	for i := range raw {
		switch {
		case allowed[uint32(i)]:
			if math.Float32bits(got[i]) != math.Float32bits(raw[i]) {
				t.Fatalf("token %d is allowed, but its logit %v became %v", i, raw[i], got[i])
			}
			finite++
		case !math.IsInf(float64(got[i]), -1):
			t.Fatalf("token %d is not allowed, but its logit is %v, not -Inf", i, got[i])
		}
	}
	if finite == 0 {
		t.Fatal("the mask allows no token")
	}
}

// Greedy decoding under the regex [a-z]{6}: each row a standalone constraint masks allows exactly
// the tokens Go's regexp says may come next (each kept bit for bit, the rest -Inf), so its argmax
// is allowed; a second session holding a copy set after the prompt hands back, for the same
// tokens, the same bits as the standalone mask of the unconstrained session's row. The grammar
// reports finished once six letters are in (it allows nothing more but a stop token).
func TestConstraintRegexMasksLikeSession(t *testing.T) {
	m := openTiny(t)
	c := newConstraint(t, m, GrammarRegex, lettersRegex)
	plain := newSession(t, m)
	held := newSession(t, m)
	raw, err := plain.Step(0) // BOS: the prompt, before any constraint
	if err != nil {
		t.Fatal(err)
	}
	if _, err := held.Step(0); err != nil {
		t.Fatal(err)
	}
	if err := held.SetConstraint(c); err != nil {
		t.Fatal(err)
	}
	done := ""
	for step := 0; ; step++ {
		if step == 7 {
			t.Fatalf("%s not finished after %d tokens (%q)", lettersRegex, step, done)
		}
		row := masked(t, c, raw)
		checkMask(t, raw, row, allowedUnder(t, m, done))
		token := uint32(Argmax(row))
		if err := c.Accept(token); err != nil {
			t.Fatalf("accept the masked argmax %d: %v", token, err)
		}
		finished, _, err := c.State()
		if err != nil {
			t.Fatal(err)
		}
		if raw, err = plain.Step(token); err != nil {
			t.Fatal(err)
		}
		got, err := held.Step(token)
		if err != nil {
			t.Fatalf("the session holding the constraint refused %d: %v", token, err)
		}
		if want := masked(t, c, raw); !sameBits(got, want) {
			t.Fatalf("step %d (token %d): the session's row differs from the standalone mask of the same row", step, token)
		}
		piece, err := m.TokenToPiece(token)
		if err != nil {
			t.Fatal(err)
		}
		done += piece
		if finished {
			break
		}
	}
	if !regexp.MustCompile(`^` + lettersRegex + `$`).MatchString(done) {
		t.Fatalf("greedy decoding under %s gave %q", lettersRegex, done)
	}
	// Finished on the sixth letter: the last row allows the stop tokens only.
	checkMask(t, raw, masked(t, c, raw), allowedUnder(t, m, done))
}

// A GBNF grammar of the same language, root ::= [a-z]{6}: along greedy decoding each row it
// masks allows exactly the tokens Go's regexp says may come next, and it finishes on the sixth
// letter.
func TestConstraintGBNFMasksItsLanguage(t *testing.T) {
	m := openTiny(t)
	c := newConstraint(t, m, GrammarGBNF, "root ::= [a-z]{6}\n")
	s := newSession(t, m)
	raw, err := s.Step(0)
	if err != nil {
		t.Fatal(err)
	}
	done := ""
	for step := 0; step < 7; step++ {
		row := masked(t, c, raw)
		checkMask(t, raw, row, allowedUnder(t, m, done))
		token := uint32(Argmax(row))
		if err := c.Accept(token); err != nil {
			t.Fatalf("accept the masked argmax %d: %v", token, err)
		}
		piece, err := m.TokenToPiece(token)
		if err != nil {
			t.Fatal(err)
		}
		done += piece
		if finished, _, _ := c.State(); finished {
			break
		}
		if raw, err = s.Step(token); err != nil {
			t.Fatal(err)
		}
	}
	if !regexp.MustCompile(`^` + lettersRegex + `$`).MatchString(done) {
		t.Fatalf("greedy decoding under the GBNF grammar gave %q", done)
	}
}

// Rollback(1) after each Accept restores the mask from before it, bit for bit, from the
// finished grammar back to its start; rolling back more than was taken is refused and changes nothing.
func TestConstraintRollback(t *testing.T) {
	m := openTiny(t)
	raw, err := newSession(t, m).Step(0)
	if err != nil {
		t.Fatal(err)
	}
	c := newConstraint(t, m, GrammarRegex, lettersRegex)
	start := masked(t, c, raw)
	// "ver", "ts", "s": six letters in three tokens. Each mask is held to the regexp's
	// reference, so the rollbacks are checked against three different masks (after "verts" no
	// two-letter token fits; after six letters only a stop token does).
	var before [][]float32
	done := ""
	for _, token := range []uint32{293, 299, 84} {
		row := masked(t, c, raw)
		checkMask(t, raw, row, allowedUnder(t, m, done))
		before = append(before, row)
		if err := c.Accept(token); err != nil {
			t.Fatalf("accept %d: %v", token, err)
		}
		piece, err := m.TokenToPiece(token)
		if err != nil {
			t.Fatal(err)
		}
		done += piece
	}
	if finished, _, err := c.State(); err != nil || !finished || done != "vertss" {
		t.Fatalf("%q: finished %v, %v", done, finished, err)
	}
	checkMask(t, raw, masked(t, c, raw), allowedUnder(t, m, done))
	for i := len(before) - 1; i >= 0; i-- {
		if err := c.Rollback(1); err != nil {
			t.Fatal(err)
		}
		if !sameBits(masked(t, c, raw), before[i]) {
			t.Fatalf("the mask after Rollback(1) differs from the mask before token %d", i)
		}
	}
	if !sameBits(before[0], start) {
		t.Fatal("the mask changed with no token taken")
	}
	wantStatus(t, c.Rollback(1), ErrInvalidArgument)
	if !sameBits(masked(t, c, raw), start) {
		t.Fatal("a refused rollback changed the mask")
	}
	wantStatus(t, c.Rollback(-1), ErrInvalidArgument)
}

func TestConstraintRefusals(t *testing.T) {
	m := openTiny(t)
	for _, bad := range []struct {
		kind GrammarKind
		text string
	}{{GrammarRegex, "(["}, {GrammarJSONSchema, "{"}, {GrammarKind(99), "[a-z]"}} {
		c, err := NewConstraint(m, bad.kind, bad.text)
		if c != nil {
			t.Fatalf("kind %d %q gave a constraint", bad.kind, bad.text)
		}
		wantStatus(t, err, ErrInvalidArgument)
	}
	// The text's length travels with it: a NUL inside, one byte past MaxGrammarBytes, and bytes
	// that are not UTF-8 are refused by the library, not cut short by the binding.
	for _, bad := range []struct {
		text string
		want Status
	}{{"a\x00b", ErrInvalidArgument}, {strings.Repeat("a", MaxGrammarBytes+1), ErrLimitExceeded}, {"a\xffb", ErrUTF8}} {
		c, err := NewConstraint(m, GrammarRegex, bad.text)
		if c != nil {
			t.Fatalf("%d bytes of text gave a constraint", len(bad.text))
		}
		wantStatus(t, err, bad.want)
	}

	// A token the mask set to -Inf is refused, and the mask after is the mask before.
	s := newSession(t, m)
	raw, err := s.Step(0)
	if err != nil {
		t.Fatal(err)
	}
	c := newConstraint(t, m, GrammarRegex, lettersRegex)
	before := masked(t, c, raw)
	const banned = 17 // "0": a digit, which lettersRegex never takes
	if !math.IsInf(float64(before[banned]), -1) {
		t.Fatalf("the mask left the digit's logit at %v", before[banned])
	}
	wantStatus(t, c.Accept(uint32(banned)), ErrInvalidArgument)
	if !sameBits(masked(t, c, raw), before) {
		t.Fatalf("the refused token %d changed the mask", banned)
	}

	// A session holding a constraint refuses Restore; cleared, it takes it again.
	snap := snapshot(t, s)
	if err := s.SetConstraint(c); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, s.Restore(snap), ErrInvalidArgument)
	if err := s.SetConstraint(nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Restore(snap); err != nil {
		t.Fatalf("restore after clearing the constraint: %v", err)
	}

	// A closed constraint is refused, not taken as nil.
	c.Close()
	wantStatus(t, s.SetConstraint(c), ErrNullArgument)
	wantStatus(t, c.Mask(raw), ErrNullArgument)
}

// The schema of one required integer "a" and nothing else: at the start the grammar can neither
// end nor has it ended, and the tokens it forces are the start of `{"a": ` (the library lays JSON
// out with ": " after keys).
func TestConstraintJSONSchemaForced(t *testing.T) {
	m := openTiny(t)
	c := newConstraint(t, m, GrammarJSONSchema,
		`{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}`)
	finished, canEnd, err := c.State()
	if err != nil || finished || canEnd {
		t.Fatalf("state at the start: finished %v, can end %v, %v", finished, canEnd, err)
	}
	forced, err := c.Forced()
	if err != nil {
		t.Fatal(err)
	}
	text, err := m.Detokenize(forced, 0)
	if err != nil {
		t.Fatal(err)
	}
	if text == "" || !strings.HasPrefix(`{"a": `, text) {
		t.Fatalf("forced %v, text %q: not a non-empty prefix of {\"a\": ", forced, text)
	}
	for _, token := range forced {
		if err := c.Accept(token); err != nil {
			t.Fatalf("accept forced %d: %v", token, err)
		}
	}
	if finished, canEnd, err = c.State(); err != nil || finished || canEnd {
		t.Fatalf("state after %q: finished %v, can end %v, %v", text, finished, canEnd, err)
	}
}

// A literal longer than Forced's first buffer (16 tokens): the buffer grows to the whole run.
func TestConstraintForcedGrows(t *testing.T) {
	m := openTiny(t)
	const literal = "abcdefghijklmnopqrstuvwxyz0123456789"
	c := newConstraint(t, m, GrammarRegex, literal)
	forced, err := c.Forced()
	if err != nil {
		t.Fatal(err)
	}
	text, err := m.Detokenize(forced, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(forced) <= 16 || !strings.HasPrefix(literal, text) {
		t.Fatalf("forced %d tokens, text %q: want more than 16 and a prefix of %q", len(forced), text, literal)
	}
}

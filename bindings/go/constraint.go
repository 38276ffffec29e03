package packlm

/*
#include <stdlib.h>
#include "packlm.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// GrammarKind is what a Constraint's text is (PACKLM_GRAMMAR_*).
type GrammarKind uint32

const (
	// GrammarJSONSchema: a JSON schema; the output is JSON that validates.
	GrammarJSONSchema GrammarKind = C.PACKLM_GRAMMAR_JSON_SCHEMA
	// GrammarLark: llguidance's Lark-like grammar.
	GrammarLark GrammarKind = C.PACKLM_GRAMMAR_LARK
	// GrammarRegex: a regular expression the whole output matches.
	GrammarRegex GrammarKind = C.PACKLM_GRAMMAR_REGEX
	// GrammarGBNF: llama.cpp's GBNF grammar text (rule root the start).
	GrammarGBNF GrammarKind = C.PACKLM_GRAMMAR_GBNF
)

// MaxGrammarBytes is the most bytes of grammar text NewConstraint takes (ErrLimitExceeded past
// it).
const MaxGrammarBytes = C.PACKLM_MAX_GRAMMAR_BYTES

// Constraint is a grammar over a model's vocabulary and the tokens it has taken (structured
// output): it masks logits, takes tokens and rolls them back; or, copied into a session with
// Session.SetConstraint, masks every logits row that session hands back. It keeps the model's C
// object alive itself. Safe to move between goroutines; one goroutine at a time (every call
// changes it). A call that fails leaves it as it was.
type Constraint struct {
	ptr *C.packlm_constraint
}

// NewConstraint builds a constraint of kind over text for m. Refused: an unknown kind, text
// holding a NUL byte, or a grammar or schema llguidance refuses (ErrInvalidArgument, with its
// message); text over MaxGrammarBytes (ErrLimitExceeded); text that is not UTF-8 (ErrUTF8).
func NewConstraint(m *Model, kind GrammarKind, text string) (*Constraint, error) {
	const op = "packlm_constraint_new"
	mptr, err := m.handle(op)
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(m)
	// C.CString copies every byte, a NUL included, so the library sees len(text) bytes and
	// refuses a NUL itself.
	ctext := C.CString(text)
	defer C.free(unsafe.Pointer(ctext))
	var cp *C.packlm_constraint
	if err := call(op, func() C.packlm_status {
		return C.packlm_constraint_new(mptr, C.uint32_t(kind), ctext, C.size_t(len(text)), &cp)
	}); err != nil {
		return nil, err
	}
	c := &Constraint{ptr: cp}
	runtime.SetFinalizer(c, (*Constraint).Close)
	return c, nil
}

// Close frees the constraint; calling it twice is harmless. A session it was copied into keeps
// its copy.
func (c *Constraint) Close() {
	if c.ptr != nil {
		C.packlm_constraint_free(c.ptr)
		c.ptr = nil
	}
	runtime.SetFinalizer(c, nil)
}

func (c *Constraint) handle(op string) (*C.packlm_constraint, error) {
	if c == nil || c.ptr == nil {
		return nil, usageError(op, ErrNullArgument, "the constraint is closed")
	}
	return c.ptr, nil
}

// Mask sets every entry of logits whose token may not come next to -Inf (entries past the
// vocabulary too); the others are left as they were.
func (c *Constraint) Mask(logits []float32) error {
	ptr, err := c.handle("packlm_constraint_mask")
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(c)
	return call("packlm_constraint_mask", func() C.packlm_status {
		return C.packlm_constraint_mask(ptr, floatPtr(logits), C.size_t(len(logits)))
	})
}

// Accept takes token; one the grammar does not allow here gives ErrInvalidArgument and changes
// nothing. A stop token where the grammar may end finishes it.
func (c *Constraint) Accept(token uint32) error {
	ptr, err := c.handle("packlm_constraint_accept")
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(c)
	return call("packlm_constraint_accept", func() C.packlm_status {
		return C.packlm_constraint_accept(ptr, C.uint32_t(token))
	})
}

// Rollback undoes the last n tokens taken; more than it has taken is refused and changes nothing.
func (c *Constraint) Rollback(n int) error {
	ptr, err := c.handle("packlm_constraint_rollback")
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(c)
	if n < 0 {
		return usageError("packlm_constraint_rollback", ErrInvalidArgument, "a negative token count")
	}
	return call("packlm_constraint_rollback", func() C.packlm_status {
		return C.packlm_constraint_rollback(ptr, C.size_t(n))
	})
}

// State reports whether the constraint has ended (a stop token was taken, or the grammar allows
// nothing more) and whether a stop token may come now.
func (c *Constraint) State() (finished, canEnd bool, err error) {
	ptr, err := c.handle("packlm_constraint_state")
	if err != nil {
		return false, false, err
	}
	defer runtime.KeepAlive(c)
	var f, e C.uint32_t
	if err := call("packlm_constraint_state", func() C.packlm_status {
		return C.packlm_constraint_state(ptr, &f, &e)
	}); err != nil {
		return false, false, err
	}
	return f != 0, e != 0, nil
}

// Forced is the run of tokens the grammar forces next (empty where it has a choice). Nothing is
// taken: Accept them to move on.
func (c *Constraint) Forced() ([]uint32, error) {
	ptr, err := c.handle("packlm_constraint_forced")
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(c)
	buf := make([]uint32, 16)
	for {
		var n C.size_t
		err = call("packlm_constraint_forced", func() C.packlm_status {
			return C.packlm_constraint_forced(ptr, tokenPtr(buf), C.size_t(len(buf)), &n)
		})
		if isBufferTooSmall(err) && int(n) > len(buf) {
			buf = make([]uint32, int(n))
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:int(n)], nil
	}
}

// SetConstraint makes the tokens the session takes from now on follow a copy of c in its current
// state (c stays the caller's and may change or close without touching the copy); nil clears the
// session's constraint. While one is set, every logits row the session hands back has -Inf for
// the tokens the grammar does not allow after that row's token, a step whose tokens the grammar
// refuses is refused before it runs, Verify accepts only drafts the grammar allows, Truncate
// rolls the constraint back with the session and Fork copies it. Restore is refused while one is
// set (a snapshot does not hold it), and so is StepSessions (ErrUnsupported). A constraint of
// another model is refused.
func (s *Session) SetConstraint(c *Constraint) error {
	const op = "packlm_session_set_constraint"
	ptr, err := s.handle(op)
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(s)
	var cptr *C.packlm_constraint
	if c != nil {
		// A closed constraint is an error, not a silent clear.
		if cptr, err = c.handle(op); err != nil {
			return err
		}
		defer runtime.KeepAlive(c)
	}
	return call(op, func() C.packlm_status { return C.packlm_session_set_constraint(ptr, cptr) })
}

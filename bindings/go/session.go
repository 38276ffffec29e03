package packlm

/*
#include <stdlib.h>
#include "packlm.h"
*/
import "C"

import (
	"runtime"
	"strconv"
	"unsafe"
)

// Which logits a batch step returns (PACKLM_WANT_*).
type Want uint32

const (
	WantLast Want = C.PACKLM_WANT_LAST
	WantAll  Want = C.PACKLM_WANT_ALL
	WantNone Want = C.PACKLM_WANT_NONE
)

// SessionOptions are the options of NewSession; the zero value gives the library's defaults.
type SessionOptions struct {
	ContextLength uint32 // most positions the session may hold; 0 = the model's
}

// Session is one sequence's state: the positions it holds and their KV cache. One goroutine at
// a time. On failure a call leaves the session as it was.
type Session struct {
	ptr    *C.packlm_session
	nVocab int
}

// NewSession creates a session of the model. opts may be nil.
func (m *Model) NewSession(opts *SessionOptions) (*Session, error) {
	ptr, err := m.handle("packlm_session_new")
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(m)
	var o C.packlm_session_options
	o.size = C.size_t(unsafe.Sizeof(o))
	if opts != nil {
		o.n_ctx = C.uint32_t(opts.ContextLength)
	}
	var sp *C.packlm_session
	if err := call("packlm_session_new", func() C.packlm_status { return C.packlm_session_new(ptr, &o, &sp) }); err != nil {
		return nil, err
	}
	s := &Session{ptr: sp, nVocab: m.info.VocabSize}
	runtime.SetFinalizer(s, (*Session).Close)
	return s, nil
}

// Close frees the session; calling it twice is harmless.
func (s *Session) Close() {
	if s.ptr != nil {
		C.packlm_session_free(s.ptr)
		s.ptr = nil
	}
	runtime.SetFinalizer(s, nil)
}

func (s *Session) handle(op string) (*C.packlm_session, error) {
	if s == nil || s.ptr == nil {
		return nil, usageError(op, ErrNullArgument, "the session is closed")
	}
	return s.ptr, nil
}

// NPast is the number of positions the session holds.
func (s *Session) NPast() (int, error) {
	ptr, err := s.handle("packlm_session_n_past")
	if err != nil {
		return 0, err
	}
	defer runtime.KeepAlive(s)
	var n C.size_t
	if err := call("packlm_session_n_past", func() C.packlm_status { return C.packlm_session_n_past(ptr, &n) }); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Fork creates a new session with this one's exact state. Their KV is shared copy-on-write: no
// copy now; each copies at most one page per layer as it steps on.
func (s *Session) Fork() (*Session, error) {
	ptr, err := s.handle("packlm_session_fork")
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(s)
	var fp *C.packlm_session
	if err := call("packlm_session_fork", func() C.packlm_status { return C.packlm_session_fork(ptr, &fp) }); err != nil {
		return nil, err
	}
	f := &Session{ptr: fp, nVocab: s.nVocab}
	runtime.SetFinalizer(f, (*Session).Close)
	return f, nil
}

// KVBytes is the KV bytes alive for this session and every session it shares them with through
// Fork.
func (s *Session) KVBytes() (int, error) {
	ptr, err := s.handle("packlm_session_kv_bytes")
	if err != nil {
		return 0, err
	}
	defer runtime.KeepAlive(s)
	var n C.size_t
	if err := call("packlm_session_kv_bytes", func() C.packlm_status { return C.packlm_session_kv_bytes(ptr, &n) }); err != nil {
		return 0, err
	}
	return int(n), nil
}

func floatPtr(buf []float32) *C.float {
	if len(buf) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(&buf[0]))
}

// Step feeds one token and returns the logits of its position (VocabSize floats).
func (s *Session) Step(token uint32) ([]float32, error) {
	logits := make([]float32, s.nVocab)
	if err := s.StepInto(token, logits); err != nil {
		return nil, err
	}
	return logits, nil
}

// StepInto feeds one token and writes its logits into logits (at least VocabSize floats; nil
// skips them).
func (s *Session) StepInto(token uint32, logits []float32) error {
	ptr, err := s.handle("packlm_step_into")
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(s)
	var n C.size_t
	return call("packlm_step_into", func() C.packlm_status {
		return C.packlm_step_into(ptr, C.uint32_t(token), floatPtr(logits), C.size_t(len(logits)), &n)
	})
}

// StepBatch feeds tokens in one pass over the weights (bit-identical to stepping them one by
// one) and returns the logits want asks for: the last row, all rows (row-major), or none.
func (s *Session) StepBatch(tokens []uint32, want Want) ([]float32, error) {
	ptr, err := s.handle("packlm_step_batch_into")
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(s)
	var rows int
	switch want {
	case WantLast:
		rows = 1
	case WantAll:
		rows = len(tokens)
	case WantNone:
		rows = 0
	default:
		rows = 1 // the library refuses an unknown value and names it
	}
	logits := make([]float32, rows*s.nVocab)
	var n C.size_t
	if err := call("packlm_step_batch_into", func() C.packlm_status {
		return C.packlm_step_batch_into(ptr, tokenPtr(tokens), C.size_t(len(tokens)), C.uint32_t(want),
			floatPtr(logits), C.size_t(len(logits)), &n)
	}); err != nil {
		return nil, err
	}
	return logits[:int(n)], nil
}

// MaxStepItems is the most items one StepSessions call takes (PACKLM_MAX_STEP_ITEMS).
const MaxStepItems = C.PACKLM_MAX_STEP_ITEMS

// StepItem is one session's part of a StepSessions call (packlm_step_item): a step, which
// feeds Tokens and returns the logits Want asks for, or, with Verify set, a verify of
// Tokens[0] (the pending token) and Tokens[1:] (the draft), whose outcome goes to *Result.
type StepItem struct {
	Session *Session // a session of the call's model, named by this item only
	Tokens  []uint32 // the tokens to feed it, at least one
	Want    Want     // a step's logits to return, as in StepBatch; unread for a verify
	// Verify, when set, makes the item a verify with these parameters, as Session.Verify takes
	// them (a sampled one's RNG advanced when the call succeeds).
	Verify *VerifyParams
	// Result receives a verify's outcome, as Session.Verify returns it; required for a verify
	// (ErrNullArgument without it), unused for a step.
	Result *VerifyResult
}

// StepSessions runs each item on its session, all of them sessions of model, in one pass over
// the weights: a step item's logits (out[i] for items[i]) are the bits StepBatch on that session
// alone returns, and a verify item's *Result (out[i] empty) is what Verify alone returns. A
// session may be named by one item only, and 1 to MaxStepItems items are taken. All or nothing:
// on an error, whose message names the item refused ("item 1: ..."), no session has changed and
// no Result or RNG has been written.
func StepSessions(model *Model, items []StepItem) ([][]float32, error) {
	const op = "packlm_step_sessions"
	mptr, err := model.handle(op)
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(model)
	defer runtime.KeepAlive(items)
	sessions := make([]*C.packlm_session, len(items))
	sizes := make([]int, len(items))
	for i, it := range items {
		ptr, err := it.Session.handle(op)
		if err != nil {
			return nil, usageError(op, ErrNullArgument, "item "+strconv.Itoa(i)+": the session is closed")
		}
		sessions[i] = ptr
		var rows int
		switch {
		case it.Verify != nil:
			rows = 0 // a verify's logits go to its result
		case it.Want == WantLast:
			rows = 1
		case it.Want == WantAll:
			rows = len(it.Tokens)
		case it.Want == WantNone:
			rows = 0
		default:
			rows = 1 // the library refuses an unknown value and names it
		}
		sizes[i] = rows * it.Session.nVocab
	}
	// packlm_step_item holds pointers, so the items, their tokens, logits and verify structs live
	// in C memory for the call.
	var a cArena
	defer a.free()
	array := arenaSlice[C.packlm_step_item](&a, len(items))
	logits := make([][]float32, len(items))
	verifies := make([]cVerify, len(items))
	for i, it := range items {
		if a.failed {
			break
		}
		tokens := arenaSlice[uint32](&a, len(it.Tokens))
		copy(tokens, it.Tokens)
		logits[i] = arenaSlice[float32](&a, sizes[i])
		array[i].session = sessions[i]
		array[i].tokens = tokenPtr(tokens)
		array[i].n_tokens = C.size_t(len(tokens))
		array[i].want = C.uint32_t(it.Want)
		array[i].logits_out = floatPtr(logits[i])
		array[i].capacity = C.size_t(len(logits[i]))
		if it.Verify != nil {
			verifies[i] = newCVerify(&a, it.Verify, it.Session.nVocab)
			array[i].verify = verifies[i].params
			if it.Result != nil {
				array[i].result = verifies[i].result
			}
		}
	}
	if a.failed {
		return nil, usageError(op, ErrOutOfMemory, "no memory for the items")
	}
	var cItems *C.packlm_step_item
	if len(array) > 0 {
		cItems = &array[0]
	}
	if err := call(op, func() C.packlm_status {
		return C.packlm_step_sessions(mptr, cItems, C.size_t(len(items)))
	}); err != nil {
		return nil, err
	}
	out := make([][]float32, len(items))
	for i, it := range items {
		out[i] = append(make([]float32, 0, int(array[i].n_logits)), logits[i][:int(array[i].n_logits)]...)
		if it.Verify != nil && it.Result != nil {
			*it.Result = verifies[i].outcome(it.Verify)
		}
	}
	return out, nil
}

// Truncate keeps exactly the first n positions; step the next token to get logits again.
func (s *Session) Truncate(n int) error {
	ptr, err := s.handle("packlm_truncate")
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(s)
	if n < 0 {
		return usageError("packlm_truncate", ErrInvalidArgument, "a negative position count")
	}
	return call("packlm_truncate", func() C.packlm_status { return C.packlm_truncate(ptr, C.size_t(n)) })
}

// Snapshot returns the session's exact state as bytes that restore into any session of the same
// model, in this process or another.
func (s *Session) Snapshot() ([]byte, error) {
	ptr, err := s.handle("packlm_snapshot")
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(s)
	var needed C.size_t
	err = call("packlm_snapshot", func() C.packlm_status { return C.packlm_snapshot(ptr, nil, 0, &needed) })
	if err != nil && !isBufferTooSmall(err) {
		return nil, err
	}
	buf := make([]byte, int(needed))
	if len(buf) == 0 {
		return nil, usageError("packlm_snapshot", ErrSnapshot, "the library asked for an empty snapshot buffer")
	}
	if err := call("packlm_snapshot", func() C.packlm_status {
		return C.packlm_snapshot(ptr, (*C.uint8_t)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &needed)
	}); err != nil {
		return nil, err
	}
	return buf[:int(needed)], nil
}

// Restore replaces the session's state with a snapshot; a corrupted one, or one of another
// model, gives ErrSnapshot and leaves the session as it was. The logits of the last restored
// position are not returned: the snapshot's last token was already stepped, so step the next.
func (s *Session) Restore(snapshot []byte) error {
	ptr, err := s.handle("packlm_restore")
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(s)
	var p *C.uint8_t
	if len(snapshot) > 0 {
		p = (*C.uint8_t)(unsafe.Pointer(&snapshot[0]))
	}
	return call("packlm_restore", func() C.packlm_status { return C.packlm_restore(ptr, p, C.size_t(len(snapshot))) })
}

// Argmax is the index of the largest value, ties to the lowest index (greedy decoding); -1 for
// an empty slice.
func Argmax(logits []float32) int {
	best := -1
	for i, v := range logits {
		if best < 0 || v > logits[best] {
			best = i
		}
	}
	return best
}

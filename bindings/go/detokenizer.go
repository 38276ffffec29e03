package packlm

/*
#include "packlm.h"
*/
import "C"

import "runtime"

// Detokenizer turns a stream of token ids into text as it grows: each Feed returns only complete
// UTF-8 (a character split across tokens is held back until it is whole), and everything Feed
// and Flush return, concatenated, equals Model.Detokenize of the same tokens. One goroutine at a
// time.
type Detokenizer struct {
	ptr *C.packlm_detokenizer
}

// NewDetokenizer starts an empty stream; flags: DetokenizeSkipSpecial or 0. The stream keeps
// the model's C object alive.
func (m *Model) NewDetokenizer(flags uint32) (*Detokenizer, error) {
	ptr, err := m.handle("packlm_detokenizer_new")
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(m)
	var d *C.packlm_detokenizer
	if err := call("packlm_detokenizer_new", func() C.packlm_status {
		return C.packlm_detokenizer_new(ptr, C.uint32_t(flags), &d)
	}); err != nil {
		return nil, err
	}
	out := &Detokenizer{ptr: d}
	runtime.SetFinalizer(out, (*Detokenizer).Close)
	return out, nil
}

// Close frees the stream; calling it twice is harmless.
func (d *Detokenizer) Close() {
	if d.ptr != nil {
		C.packlm_detokenizer_free(d.ptr)
		d.ptr = nil
	}
	runtime.SetFinalizer(d, nil)
}

func (d *Detokenizer) handle(op string) (*C.packlm_detokenizer, error) {
	if d == nil || d.ptr == nil {
		return nil, usageError(op, ErrNullArgument, "the detokenizer is closed")
	}
	return d.ptr, nil
}

// Feed adds one token and returns the text it completes (possibly ""). A refused token (out of
// the vocabulary) is not consumed.
func (d *Detokenizer) Feed(token uint32) (string, error) {
	ptr, err := d.handle("packlm_detokenizer_feed")
	if err != nil {
		return "", err
	}
	defer runtime.KeepAlive(d)
	return textCall("packlm_detokenizer_feed", func(buf *C.char, capacity C.size_t, n *C.size_t) C.packlm_status {
		return C.packlm_detokenizer_feed(ptr, C.uint32_t(token), buf, capacity, n)
	})
}

// Flush ends the stream: it returns what was held back, and the next Feed starts a new text.
func (d *Detokenizer) Flush() (string, error) {
	ptr, err := d.handle("packlm_detokenizer_flush")
	if err != nil {
		return "", err
	}
	defer runtime.KeepAlive(d)
	return textCall("packlm_detokenizer_flush", func(buf *C.char, capacity C.size_t, n *C.size_t) C.packlm_status {
		return C.packlm_detokenizer_flush(ptr, buf, capacity, n)
	})
}

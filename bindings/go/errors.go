package packlm

// #include "packlm.h"
import "C"

import (
	"errors"
	"fmt"
	"runtime"
)

// Status is the library's packlm_status: a number whose meaning never changes.
type Status uint32

// The statuses of include/packlm.h (PACKLM_OK, PACKLM_ERR_*), same numbers.
const (
	OK                      Status = C.PACKLM_OK
	ErrNullArgument         Status = C.PACKLM_ERR_NULL_ARGUMENT
	ErrInvalidArgument      Status = C.PACKLM_ERR_INVALID_ARGUMENT
	ErrIO                   Status = C.PACKLM_ERR_IO
	ErrFormat               Status = C.PACKLM_ERR_FORMAT
	ErrUnsupported          Status = C.PACKLM_ERR_UNSUPPORTED
	ErrTensor               Status = C.PACKLM_ERR_TENSOR
	ErrTokenOutOfRange      Status = C.PACKLM_ERR_TOKEN_OUT_OF_RANGE
	ErrContextOverflow      Status = C.PACKLM_ERR_CONTEXT_OVERFLOW
	ErrBufferTooSmall       Status = C.PACKLM_ERR_BUFFER_TOO_SMALL
	ErrTokenizer            Status = C.PACKLM_ERR_TOKENIZER
	ErrBackendUnavailable   Status = C.PACKLM_ERR_BACKEND_UNAVAILABLE
	ErrAborted              Status = C.PACKLM_ERR_ABORTED
	ErrSnapshot             Status = C.PACKLM_ERR_SNAPSHOT
	ErrUTF8                 Status = C.PACKLM_ERR_UTF8
	ErrPanic                Status = C.PACKLM_ERR_PANIC
	ErrSessionBusy          Status = C.PACKLM_ERR_SESSION_BUSY
	ErrLimitExceeded        Status = C.PACKLM_ERR_LIMIT_EXCEEDED
	ErrSessionPoisoned      Status = C.PACKLM_ERR_SESSION_POISONED
	ErrUnsupportedPrecision Status = C.PACKLM_ERR_UNSUPPORTED_PRECISION
	ErrOutOfMemory          Status = C.PACKLM_ERR_OUT_OF_MEMORY
	ErrNonFinite            Status = C.PACKLM_ERR_NON_FINITE
)

// String is the library's fixed text for the status (packlm_status_str).
func (s Status) String() string {
	return C.GoString(C.packlm_status_str(C.int32_t(int32(s))))
}

// Error is a failed library call: the status it returned and the message packlm_last_error gave
// on the same thread right after it.
type Error struct {
	op      string
	status  Status
	message string
}

// Status is the packlm_status the call returned.
func (e *Error) Status() Status { return e.status }

// Message is the library's message naming what was wrong (packlm_last_error).
func (e *Error) Message() string { return e.message }

func (e *Error) Error() string {
	if e.message == "" {
		return fmt.Sprintf("%s: %s (status %d)", e.op, e.status, uint32(e.status))
	}
	return fmt.Sprintf("%s: %s (status %d): %s", e.op, e.status, uint32(e.status), e.message)
}

// StatusOf is the status carried by err: OK for nil, ErrInvalidArgument for an error that did
// not come from the library.
func StatusOf(err error) Status {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.status
	}
	return ErrInvalidArgument
}

// call runs one library call and turns a failure into an *Error. packlm_last_error is
// thread-local and a goroutine may move to another OS thread between two cgo calls, so the
// goroutine is held on its thread from the call until the message is read.
func call(op string, f func() C.packlm_status) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	status := Status(f())
	if status == OK {
		return nil
	}
	return &Error{op: op, status: status, message: C.GoString(C.packlm_last_error())}
}

// usageError is an error found by the binding before any library call, given the status the
// library would give for it.
func usageError(op string, status Status, message string) error {
	return &Error{op: op, status: status, message: message}
}

func isBufferTooSmall(err error) bool {
	e, ok := err.(*Error)
	return ok && e.status == ErrBufferTooSmall
}

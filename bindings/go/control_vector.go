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

// ControlVector is a control vector (llama.cpp's cvec) made for one model: a vector of the
// hidden width per layer, added to the residual stream at the end of each layer of its range.
// It may be used from any number of goroutines; sessions it is set on keep it alive, so closing
// it afterwards is safe.
type ControlVector struct {
	ptr *C.packlm_control_vector
}

func newControlVector(ptr *C.packlm_control_vector) *ControlVector {
	c := &ControlVector{ptr: ptr}
	runtime.SetFinalizer(c, (*ControlVector).Close)
	return c
}

// ControlVectorFromData makes a control vector from data (nLayers x nEmbd floats, layer 0
// first), added at the end of layers layerStart..layerEnd (0-based, inclusive). A width other
// than the model's hidden size, a length other than one vector per layer or a range past the
// layers gives ErrInvalidArgument; a value that is not finite ErrNonFinite.
func (m *Model) ControlVectorFromData(data []float32, nEmbd int, layerStart, layerEnd uint32) (*ControlVector, error) {
	const op = "packlm_control_vector_from_data"
	mptr, err := m.handle(op)
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(m)
	defer runtime.KeepAlive(data)
	if nEmbd < 0 {
		return nil, usageError(op, ErrInvalidArgument, "nEmbd "+strconv.Itoa(nEmbd)+" is negative")
	}
	var dp *C.float
	if len(data) > 0 {
		dp = (*C.float)(unsafe.Pointer(&data[0]))
	}
	var ptr *C.packlm_control_vector
	if err := call(op, func() C.packlm_status {
		return C.packlm_control_vector_from_data(mptr, dp, C.size_t(len(data)), C.size_t(nEmbd), C.uint32_t(layerStart), C.uint32_t(layerEnd), &ptr)
	}); err != nil {
		return nil, err
	}
	return newControlVector(ptr), nil
}

// ControlVectorFile is one llama.cpp control-vector GGUF of OpenControlVector with its scale.
type ControlVectorFile struct {
	Path  string
	Scale float32
}

// OpenControlVector reads llama.cpp control-vector GGUFs (tensors direction.N for layer N,
// from 1), sums each file's directions times its scale, and adds the sum at the end of layers
// layerStart..layerEnd (llama.cpp's default: 1 to the last layer). A file that is not a control
// vector gives ErrFormat; a direction of another width or layer than the model has ErrTensor.
func (m *Model) OpenControlVector(files []ControlVectorFile, layerStart, layerEnd uint32) (*ControlVector, error) {
	const op = "packlm_control_vector_open"
	mptr, err := m.handle(op)
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(m)
	// C pointers only: a Go slice holding them may be passed to C.
	paths := make([]*C.char, len(files))
	scales := make([]C.float, len(files))
	for i, f := range files {
		paths[i] = C.CString(f.Path)
		defer C.free(unsafe.Pointer(paths[i]))
		scales[i] = C.float(f.Scale)
	}
	var pp **C.char
	var sp *C.float
	if len(files) > 0 {
		pp, sp = &paths[0], &scales[0]
	}
	var ptr *C.packlm_control_vector
	if err := call(op, func() C.packlm_status {
		return C.packlm_control_vector_open(mptr, pp, sp, C.size_t(len(files)), C.uint32_t(layerStart), C.uint32_t(layerEnd), &ptr)
	}); err != nil {
		return nil, err
	}
	return newControlVector(ptr), nil
}

// Close frees the control vector handle; sessions it was set on keep using it. Calling it twice
// is harmless.
func (c *ControlVector) Close() {
	if c.ptr != nil {
		C.packlm_control_vector_free(c.ptr)
		c.ptr = nil
	}
	runtime.SetFinalizer(c, nil)
}

// SetControlVector adds c at the end of each layer of its range in the session's passes from
// now on; nil removes the session's vector. The adapters stay. Only on an empty session
// (ErrInvalidArgument once it holds positions); a vector of another model is refused too. The
// session keeps the vector alive.
func (s *Session) SetControlVector(c *ControlVector) error {
	const op = "packlm_session_set_control_vector"
	ptr, err := s.handle(op)
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(s)
	defer runtime.KeepAlive(c)
	var cp *C.packlm_control_vector
	if c != nil {
		if c.ptr == nil {
			return usageError(op, ErrNullArgument, "the control vector is closed")
		}
		cp = c.ptr
	}
	return call(op, func() C.packlm_status { return C.packlm_session_set_control_vector(ptr, cp) })
}

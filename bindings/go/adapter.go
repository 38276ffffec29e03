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

// Adapter is a LoRA adapter opened for one model: a PEFT folder (adapter_config.json +
// adapter_model.safetensors) or a llama.cpp adapter GGUF. It may be used from any number of
// goroutines; sessions it is set on keep it alive, so closing it afterwards is safe.
type Adapter struct {
	ptr   *C.packlm_adapter
	rank  uint32
	alpha float32
}

// OpenAdapter opens the adapter at path for the model. An adapter for another base gives
// ErrTensor naming the tensor.
func (m *Model) OpenAdapter(path string) (*Adapter, error) {
	const op = "packlm_adapter_open"
	mptr, err := m.handle(op)
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(m)
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var ptr *C.packlm_adapter
	if err := call(op, func() C.packlm_status { return C.packlm_adapter_open(mptr, cpath, &ptr) }); err != nil {
		return nil, err
	}
	a := &Adapter{ptr: ptr}
	var rank C.uint32_t
	var alpha C.float
	if err := call("packlm_adapter_info", func() C.packlm_status { return C.packlm_adapter_info(ptr, &rank, &alpha) }); err != nil {
		C.packlm_adapter_free(ptr)
		return nil, err
	}
	a.rank, a.alpha = uint32(rank), float32(alpha)
	runtime.SetFinalizer(a, (*Adapter).Close)
	return a, nil
}

// Close frees the adapter handle; sessions it was set on keep using it. Calling it twice is
// harmless.
func (a *Adapter) Close() {
	if a.ptr != nil {
		C.packlm_adapter_free(a.ptr)
		a.ptr = nil
	}
	runtime.SetFinalizer(a, nil)
}

// Rank is the adapter's largest rank.
func (a *Adapter) Rank() uint32 { return a.rank }

// Alpha is the adapter's alpha (PEFT's lora_alpha; a GGUF's adapter.lora.alpha).
func (a *Adapter) Alpha() float32 { return a.alpha }

// AdapterScale is one adapter of SetAdapters with its scale (1 as trained).
type AdapterScale struct {
	Adapter *Adapter
	Scale   float32
}

// SetAdapters applies adapters, in order, to the session's passes from now on; none returns it
// to the base model. Only on an empty session (ErrInvalidArgument once it holds positions); an
// adapter of another model or a scale that is not finite is refused too. The session keeps the
// adapters alive.
func (s *Session) SetAdapters(adapters []AdapterScale) error {
	const op = "packlm_session_set_adapters"
	ptr, err := s.handle(op)
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(s)
	defer runtime.KeepAlive(adapters)
	// C pointers only: a Go slice holding them may be passed to C.
	handles := make([]*C.packlm_adapter, len(adapters))
	scales := make([]C.float, len(adapters))
	for i, a := range adapters {
		if a.Adapter == nil || a.Adapter.ptr == nil {
			return usageError(op, ErrNullArgument, "adapter "+strconv.Itoa(i)+" is nil or closed")
		}
		handles[i] = a.Adapter.ptr
		scales[i] = C.float(a.Scale)
	}
	var hp **C.packlm_adapter
	var sp *C.float
	if len(adapters) > 0 {
		hp, sp = &handles[0], &scales[0]
	}
	return call(op, func() C.packlm_status { return C.packlm_session_set_adapters(ptr, hp, sp, C.size_t(len(adapters))) })
}

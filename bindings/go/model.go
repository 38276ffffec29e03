// Package packlm runs decoder-only language models through libpacklm's C API.
//
// A Model is opened once and shared by any number of goroutines and sessions; a Session is one
// conversation's state and is used by one goroutine at a time. Every failure is an *Error
// carrying the library's Status and message. Close frees the C object at once; a finalizer
// frees one that was never closed, as a safety net only.
package packlm

/*
#include <stdlib.h>
#include "packlm.h"
*/
import "C"

import (
	"math"
	"runtime"
	"strconv"
	"unsafe"
)

// Backend chooses where the model computes (PACKLM_BACKEND_*).
type Backend uint32

const (
	BackendHost      Backend = C.PACKLM_BACKEND_HOST
	BackendReference Backend = C.PACKLM_BACKEND_REFERENCE
	BackendGPU       Backend = C.PACKLM_BACKEND_GPU
	// BackendAccelerator is the earlier name of BackendGPU.
	BackendAccelerator Backend = C.PACKLM_BACKEND_ACCELERATOR
	// BackendNPU runs the model's passes as ONNX graphs on ONNX Runtime's execution provider
	// (OpenOptions.Provider: an NPU, a GPU or the CPU), the runtime's library loaded when the
	// model opens (OpenOptions.ONNXRuntimeLibrary); ErrBackendUnavailable, saying why, where it
	// cannot be loaded or lacks the provider. Computes exact.
	BackendNPU Backend = C.PACKLM_BACKEND_NPU
)

// Precision is what activations are computed in (PACKLM_PRECISION_*).
type Precision uint32

const (
	// PrecisionDefault (an open option only) is the pack's default: PrecisionFast when its
	// weights are block-quantized, PrecisionExact for float packs.
	PrecisionDefault Precision = C.PACKLM_PRECISION_DEFAULT
	// PrecisionExact keeps activations f32 end to end (logits within 1e-4 of HF transformers).
	PrecisionExact Precision = C.PACKLM_PRECISION_EXACT
	// PrecisionFast lets activations be rounded to 8 bits per 32-element block for integer dot
	// products against block-quantized weights. A backend without such kernels runs exact, and
	// Info.Precision says so.
	PrecisionFast Precision = C.PACKLM_PRECISION_FAST
)

// String is "default", "exact", "fast", or the number of a code this package does not know.
func (p Precision) String() string {
	switch p {
	case PrecisionDefault:
		return "default"
	case PrecisionExact:
		return "exact"
	case PrecisionFast:
		return "fast"
	}
	return "precision(" + strconv.FormatUint(uint64(p), 10) + ")"
}

// Tokenize flags (PACKLM_TOKENIZE_*).
const (
	TokenizeAddSpecial   uint32 = C.PACKLM_TOKENIZE_ADD_SPECIAL
	TokenizeParseSpecial uint32 = C.PACKLM_TOKENIZE_PARSE_SPECIAL
)

// DetokenizeSkipSpecial leaves special tokens out of detokenized text.
const DetokenizeSkipSpecial uint32 = C.PACKLM_DETOKENIZE_SKIP_SPECIAL

// ABIVersion is the ABI of the header this package was compiled against.
const ABIVersion = C.PACKLM_ABI_VERSION

// Version is the library's version string.
func Version() string { return C.GoString(C.packlm_version()) }

// LibraryABIVersion is the ABI the loaded library was built with.
func LibraryABIVersion() uint32 { return uint32(C.packlm_abi_version()) }

// OpenOptions are the options of Open; the zero value gives the library's defaults.
type OpenOptions struct {
	Backend Backend
	Threads uint32 // worker threads of the host backend; 0 = one per core
	// Precision asked for; PrecisionDefault (the zero value) is the pack's default. A code
	// other than the three gives ErrUnsupportedPrecision.
	Precision Precision
	// Provider is BackendNPU's execution provider by name: "cpu" (the empty string: the
	// default), "openvino", "vitisai", "qnn", "coreml", "cuda" or "dml". One that ONNX Runtime
	// was not built with gives ErrBackendUnavailable naming it. The other backends ignore it.
	Provider string
	// ProviderOptions are the provider's options as "key=value" pairs separated by ';' (empty:
	// none), passed to ONNX Runtime as they are.
	ProviderOptions string
	// ONNXRuntimeLibrary is the path of ONNX Runtime's shared library (libonnxruntime.so.*,
	// libonnxruntime.*.dylib, onnxruntime.dll); empty: the environment variable
	// PACKLM_ONNXRUNTIME, then the system's search path.
	ONNXRuntimeLibrary string
	// CompileAhead is a count of positions: BackendNPU compiles during the open the graphs that
	// sessions of up to that many positions use (at most the model's context), rather than each
	// at its first use (0, the default). A count below 0 or past what a uint32 holds gives
	// ErrInvalidArgument.
	CompileAhead int
	// ExportONNXDir is a folder BackendNPU writes each graph into as it is compiled
	// (graphN_rowsR_kvK.onnx files, their weights in weights.bin beside them, graphs.json
	// saying what each input and output is), made by the open when missing; one that cannot be
	// made or written gives ErrIO naming it. Empty: nothing is written.
	ExportONNXDir string
}

// Info describes an open model.
type Info struct {
	VocabSize       int
	Layers          int
	ContextLength   int
	HiddenSize      int
	BOS             int32 // -1 when the pack has none
	EOS             int32 // -1 when the pack has none
	AddBOS          bool  // TokenizeAddSpecial prepends BOS
	HasChatTemplate bool
	// Precision in use: PrecisionExact or PrecisionFast, after the pack's default and the
	// backend's kernels.
	Precision Precision
}

// Model is an open model pack (a Hugging Face folder or a GGUF file).
type Model struct {
	ptr  *C.packlm_model
	info Info
}

// Open opens a pack. opts may be nil.
func Open(path string, opts *OpenOptions) (*Model, error) {
	var o C.packlm_open_options
	if err := call("packlm_open_options_init", func() C.packlm_status {
		return C.packlm_open_options_init(&o, C.size_t(unsafe.Sizeof(o)))
	}); err != nil {
		return nil, err
	}
	if opts != nil {
		if opts.CompileAhead < 0 || uint64(opts.CompileAhead) > math.MaxUint32 {
			return nil, usageError("packlm_model_open", ErrInvalidArgument, "CompileAhead "+strconv.Itoa(opts.CompileAhead)+" is not a count of positions (0 to 2^32 - 1)")
		}
		o.backend = C.uint32_t(opts.Backend)
		o.threads = C.uint32_t(opts.Threads)
		o.precision = C.uint32_t(opts.Precision)
		// packlm_model_open copies the strings: they are freed when it has returned.
		o.provider = optionalCString(opts.Provider)
		defer C.free(unsafe.Pointer(o.provider))
		o.provider_options = optionalCString(opts.ProviderOptions)
		defer C.free(unsafe.Pointer(o.provider_options))
		o.onnxruntime_library = optionalCString(opts.ONNXRuntimeLibrary)
		defer C.free(unsafe.Pointer(o.onnxruntime_library))
		o.compile_ahead = C.uint32_t(opts.CompileAhead)
		o.export_onnx_dir = optionalCString(opts.ExportONNXDir)
		defer C.free(unsafe.Pointer(o.export_onnx_dir))
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var ptr *C.packlm_model
	if err := call("packlm_model_open", func() C.packlm_status {
		return C.packlm_model_open(cpath, &o, &ptr)
	}); err != nil {
		return nil, err
	}
	m := &Model{ptr: ptr}
	var ci C.packlm_info
	ci.size = C.size_t(unsafe.Sizeof(ci))
	if err := call("packlm_model_info", func() C.packlm_status { return C.packlm_model_info(ptr, &ci) }); err != nil {
		C.packlm_model_free(ptr)
		return nil, err
	}
	m.info = Info{
		VocabSize:       int(ci.n_vocab),
		Layers:          int(ci.n_layers),
		ContextLength:   int(ci.n_ctx),
		HiddenSize:      int(ci.hidden_size),
		BOS:             int32(ci.bos),
		EOS:             int32(ci.eos),
		AddBOS:          ci.add_bos != 0,
		HasChatTemplate: ci.has_chat_template != 0,
		Precision:       Precision(ci.precision),
	}
	runtime.SetFinalizer(m, (*Model).Close)
	return m, nil
}

// optionalCString is s as a C string the caller frees, or NULL (the option's default) for "".
func optionalCString(s string) *C.char {
	if s == "" {
		return nil
	}
	return C.CString(s)
}

// Close frees the model. Sessions and detokenizers opened from it stay valid (they hold the
// model themselves). Calling Close twice is harmless; calling it while another goroutine is in
// a call of this Model is not (as with any Go value, closing races with use).
func (m *Model) Close() {
	if m.ptr != nil {
		C.packlm_model_free(m.ptr)
		m.ptr = nil
	}
	runtime.SetFinalizer(m, nil)
}

func (m *Model) handle(op string) (*C.packlm_model, error) {
	if m == nil || m.ptr == nil {
		return nil, usageError(op, ErrNullArgument, "the model is closed")
	}
	return m.ptr, nil
}

// Info returns the model's numbers.
func (m *Model) Info() Info { return m.info }

// InfoJSON is the model's description as JSON text (packlm_model_info_json): family, sizes,
// special tokens, "backend" ("host", "reference", "gpu" or "npu") and "device", the precision
// in use, one entry per layer.
func (m *Model) InfoJSON() (string, error) {
	ptr, err := m.handle("packlm_model_info_json")
	if err != nil {
		return "", err
	}
	defer runtime.KeepAlive(m)
	return textCall("packlm_model_info_json", func(buf *C.char, capacity C.size_t, n *C.size_t) C.packlm_status {
		return C.packlm_model_info_json(ptr, buf, capacity, n)
	})
}

// StopTokens are the ids that end a reply (EOS and the chat end-of-turn tokens).
func (m *Model) StopTokens() ([]uint32, error) {
	ptr, err := m.handle("packlm_model_stop_tokens")
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(m)
	var n C.size_t
	buf := make([]uint32, 16)
	for {
		err = call("packlm_model_stop_tokens", func() C.packlm_status {
			return C.packlm_model_stop_tokens(ptr, (*C.uint32_t)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &n)
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

// Tokenize turns UTF-8 text into token ids; flags are Tokenize* bits.
func (m *Model) Tokenize(text string, flags uint32) ([]uint32, error) {
	ptr, err := m.handle("packlm_tokenize")
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(m)
	ctext := C.CString(text)
	defer C.free(unsafe.Pointer(ctext))
	buf := make([]uint32, len(text)+8)
	var n C.size_t
	for {
		err = call("packlm_tokenize", func() C.packlm_status {
			return C.packlm_tokenize(ptr, ctext, C.size_t(len(text)), C.uint32_t(flags),
				(*C.uint32_t)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &n)
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

// textCall runs a call that writes NUL-terminated text into a buffer with a capacity and the
// length (or, with PACKLM_ERR_BUFFER_TOO_SMALL, the capacity needed) into *n.
func textCall(op string, f func(buf *C.char, capacity C.size_t, n *C.size_t) C.packlm_status) (string, error) {
	buf := make([]byte, 256)
	for {
		var n C.size_t
		err := call(op, func() C.packlm_status {
			return f((*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &n)
		})
		if isBufferTooSmall(err) && int(n) > len(buf) {
			buf = make([]byte, int(n))
			continue
		}
		if err != nil {
			return "", err
		}
		return string(buf[:int(n)]), nil
	}
}

func tokenPtr(tokens []uint32) *C.uint32_t {
	if len(tokens) == 0 {
		return nil
	}
	return (*C.uint32_t)(unsafe.Pointer(&tokens[0]))
}

// Detokenize gives the text of token ids; flags: DetokenizeSkipSpecial or 0.
func (m *Model) Detokenize(tokens []uint32, flags uint32) (string, error) {
	ptr, err := m.handle("packlm_detokenize")
	if err != nil {
		return "", err
	}
	defer runtime.KeepAlive(m)
	return textCall("packlm_detokenize", func(buf *C.char, capacity C.size_t, n *C.size_t) C.packlm_status {
		return C.packlm_detokenize(ptr, tokenPtr(tokens), C.size_t(len(tokens)), C.uint32_t(flags), buf, capacity, n)
	})
}

// TokenToPiece gives the text of one token.
func (m *Model) TokenToPiece(token uint32) (string, error) {
	ptr, err := m.handle("packlm_token_to_piece")
	if err != nil {
		return "", err
	}
	defer runtime.KeepAlive(m)
	return textCall("packlm_token_to_piece", func(buf *C.char, capacity C.size_t, n *C.size_t) C.packlm_status {
		return C.packlm_token_to_piece(ptr, C.uint32_t(token), buf, capacity, n)
	})
}

// ChatMessage is one turn of a conversation.
type ChatMessage struct {
	Role    string // "system", "user" or "assistant"
	Content string
}

// ChatApply renders the pack's chat template over messages; addGenerationPrompt opens the
// assistant's turn.
func (m *Model) ChatApply(messages []ChatMessage, addGenerationPrompt bool) (string, error) {
	ptr, err := m.handle("packlm_chat_apply")
	if err != nil {
		return "", err
	}
	defer runtime.KeepAlive(m)
	// packlm_chat_message holds pointers, so the array and its strings live in C memory.
	var msgs *C.packlm_chat_message
	if len(messages) > 0 {
		size := C.size_t(len(messages)) * C.size_t(unsafe.Sizeof(C.packlm_chat_message{}))
		msgs = (*C.packlm_chat_message)(C.calloc(1, size))
		if msgs == nil {
			return "", usageError("packlm_chat_apply", ErrOutOfMemory, "no memory for the messages")
		}
		defer C.free(unsafe.Pointer(msgs))
		array := unsafe.Slice(msgs, len(messages))
		for i, msg := range messages {
			array[i].role = C.CString(msg.Role)
			array[i].content = C.CString(msg.Content)
		}
		defer func() {
			for i := range array {
				C.free(unsafe.Pointer(array[i].role))
				C.free(unsafe.Pointer(array[i].content))
			}
		}()
	}
	add := C.int32_t(0)
	if addGenerationPrompt {
		add = 1
	}
	return textCall("packlm_chat_apply", func(buf *C.char, capacity C.size_t, n *C.size_t) C.packlm_status {
		return C.packlm_chat_apply(ptr, msgs, C.size_t(len(messages)), add, buf, capacity, n)
	})
}

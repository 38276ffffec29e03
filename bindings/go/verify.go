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

// SamplerParams are the settings of Sample and of a sampled verify (packlm_sampler_params).
// Start from DefaultSamplerParams: its zero value has TopP 0, which the library refuses.
type SamplerParams struct {
	Temperature       float32  // <= 0 is greedy
	TopK              uint32   // keep the k most likely tokens; 0 = off
	TopP              float32  // keep the smallest set with this much probability; 1 = off
	MinP              float32  // drop tokens below MinP x the top probability; 0 = off
	RepetitionPenalty float32  // HF's rule over Recent: divide positive logits, multiply negative ones; 1 = off
	Recent            []uint32 // the tokens the repetition penalty applies to
}

// DefaultSamplerParams are greedy with every filter off, as C++'s default_sampler_params().
func DefaultSamplerParams() SamplerParams {
	return SamplerParams{TopP: 1, RepetitionPenalty: 1}
}

// Sample draws a token from logits under params, advancing *rng (any 64-bit seed; the same seed
// gives the same draws on any machine). rng must not be nil (ErrNullArgument), even when the
// params are greedy. Logits that are NaN or +inf, or all -inf, give ErrInvalidArgument; -inf
// masks a token out.
func Sample(logits []float32, params SamplerParams, rng *uint64) (uint32, error) {
	const op = "packlm_sample"
	var a cArena
	defer a.free()
	p := cSampler(&a, &params)
	if a.failed {
		return 0, usageError(op, ErrOutOfMemory, "no memory for the sampler")
	}
	var token C.uint32_t
	if err := call(op, func() C.packlm_status {
		return C.packlm_sample(floatPtr(logits), C.size_t(len(logits)), p, (*C.uint64_t)(unsafe.Pointer(rng)), &token)
	}); err != nil {
		return 0, err
	}
	return uint32(token), nil
}

// VerifyMode is how a verify judges the drafts (PACKLM_VERIFY_*).
type VerifyMode uint32

const (
	// VerifyGreedy keeps a draft while it equals the target's argmax.
	VerifyGreedy VerifyMode = C.PACKLM_VERIFY_GREEDY
	// VerifySampled is the distribution-preserving rejection rule.
	VerifySampled VerifyMode = C.PACKLM_VERIFY_SAMPLED
)

// VerifyParams are the parameters of Verify and of a verify item of StepSessions
// (packlm_verify_params); the zero value is a greedy verify.
type VerifyParams struct {
	Mode VerifyMode
	// Sampler is the target's sampler: required in sampled mode (ErrNullArgument without it),
	// ignored in greedy mode. Its Recent is ignored: the session's history is used.
	Sampler *SamplerParams
	// DraftProbs, sampled mode: the drafter's probabilities, k rows of VocabSize; nil = each
	// draft is a point mass (n-gram drafts, greedy draft models). Fewer than k x VocabSize
	// floats give ErrBufferTooSmall.
	DraftProbs []float32
	// RNG, sampled mode: the random state, advanced in place when the call succeeds. Required
	// in sampled mode (ErrNullArgument without it).
	RNG *uint64
	// WantLogits asks for the VocabSize logits NextToken was chosen from (the C result's
	// logits_out).
	WantLogits bool
}

// VerifyResult is a verify's outcome (packlm_verify_result).
type VerifyResult struct {
	NAccepted int       // drafted tokens accepted, 0..k
	NextToken uint32    // the new pending token: the correction, or the bonus token when all k were accepted
	Logits    []float32 // the logits NextToken was chosen from, with WantLogits; else nil
	// The session's totals over its verifies (the C result's rounds, drafted and accepted).
	TotalRounds, TotalDrafted, TotalAccepted uint64
}

// Verify is the speculative step as one call: pending is the token already chosen but not yet
// fed, draft the k tokens proposed after it. One batched pass over [pending, draft...] accepts
// the longest valid prefix; the session then holds NPast + 1 + NAccepted positions, exactly as
// if those tokens had been stepped one by one. k + 1 rows past the session's context give
// ErrContextOverflow. On an error the session, *params.RNG and the result are unchanged.
func (s *Session) Verify(pending uint32, draft []uint32, params VerifyParams) (VerifyResult, error) {
	const op = "packlm_verify"
	ptr, err := s.handle(op)
	if err != nil {
		return VerifyResult{}, err
	}
	defer runtime.KeepAlive(s)
	var a cArena
	defer a.free()
	v := newCVerify(&a, &params, s.nVocab)
	if a.failed {
		return VerifyResult{}, usageError(op, ErrOutOfMemory, "no memory for the verify's parameters")
	}
	if err := call(op, func() C.packlm_status {
		return C.packlm_verify(ptr, C.uint32_t(pending), tokenPtr(draft), C.size_t(len(draft)), v.params, v.result)
	}); err != nil {
		return VerifyResult{}, err
	}
	return v.outcome(&params), nil
}

// cVerify is one verify's packlm_verify_params and packlm_verify_result in C memory, with the
// sampler, random state and buffers they point to.
type cVerify struct {
	params *C.packlm_verify_params
	result *C.packlm_verify_result
	rng    *C.uint64_t // nil when the caller gave no RNG
	logits []float32   // C memory; nil without WantLogits
}

// newCVerify lays p out in a's memory for a session of nVocab tokens; a.failed says whether
// memory ran out.
func newCVerify(a *cArena, p *VerifyParams, nVocab int) cVerify {
	v := cVerify{params: arenaNew[C.packlm_verify_params](a), result: arenaNew[C.packlm_verify_result](a)}
	if v.params == nil || v.result == nil {
		return v
	}
	v.params.size = C.size_t(unsafe.Sizeof(*v.params))
	v.params.mode = C.uint32_t(p.Mode)
	if p.Sampler != nil {
		v.params.sampler = cSampler(a, p.Sampler)
	}
	if p.DraftProbs != nil {
		// At least one float, so that an empty, non-nil slice stays a buffer (which the library
		// measures) rather than NULL (point-mass drafts).
		probs := arenaSlice[float32](a, len(p.DraftProbs)+1)
		copy(probs, p.DraftProbs)
		v.params.draft_probs = floatPtr(probs)
		v.params.n_draft_probs = C.size_t(len(p.DraftProbs))
	}
	if p.RNG != nil {
		if v.rng = arenaNew[C.uint64_t](a); v.rng != nil {
			*v.rng = C.uint64_t(*p.RNG)
		}
		v.params.rng_state = v.rng
	}
	v.result.size = C.size_t(unsafe.Sizeof(*v.result))
	if p.WantLogits {
		v.logits = arenaSlice[float32](a, nVocab)
		v.result.logits_out = floatPtr(v.logits)
		v.result.logits_capacity = C.size_t(len(v.logits))
	}
	return v
}

// outcome reads the result after a successful call and advances *p.RNG.
func (v cVerify) outcome(p *VerifyParams) VerifyResult {
	if p.RNG != nil && v.rng != nil {
		*p.RNG = uint64(*v.rng)
	}
	r := VerifyResult{
		NAccepted:     int(v.result.n_accepted),
		NextToken:     uint32(v.result.next_token),
		TotalRounds:   uint64(v.result.rounds),
		TotalDrafted:  uint64(v.result.drafted),
		TotalAccepted: uint64(v.result.accepted),
	}
	if v.logits != nil {
		r.Logits = append([]float32(nil), v.logits[:int(v.result.n_logits)]...)
	}
	return r
}

// cSampler lays p out in a's memory (nil when memory ran out; a.failed says so).
func cSampler(a *cArena, p *SamplerParams) *C.packlm_sampler_params {
	s := arenaNew[C.packlm_sampler_params](a)
	if s == nil {
		return nil
	}
	s.size = C.size_t(unsafe.Sizeof(*s))
	s.temperature = C.float(p.Temperature)
	s.top_k = C.uint32_t(p.TopK)
	s.top_p = C.float(p.TopP)
	s.min_p = C.float(p.MinP)
	s.repetition_penalty = C.float(p.RepetitionPenalty)
	recent := arenaSlice[uint32](a, len(p.Recent))
	copy(recent, p.Recent)
	s.recent = tokenPtr(recent)
	s.n_recent = C.size_t(len(recent))
	return s
}

// cArena is the C memory of one call. The C structs a call takes point to each other and to
// buffers, and cgo lets no Go pointer be stored in C memory nor passed inside Go memory, so
// those structs and buffers live here, zeroed, until free.
type cArena struct {
	blocks []unsafe.Pointer
	failed bool // an allocation found no memory
}

// alloc is n zeroed bytes; nil for 0 bytes, or when memory ran out (then failed is set).
func (a *cArena) alloc(n uintptr) unsafe.Pointer {
	if n == 0 {
		return nil
	}
	p := C.calloc(1, C.size_t(n))
	if p == nil {
		a.failed = true
		return nil
	}
	a.blocks = append(a.blocks, p)
	return p
}

func (a *cArena) free() {
	for _, p := range a.blocks {
		C.free(p)
	}
	a.blocks = nil
}

func arenaNew[T any](a *cArena) *T {
	return (*T)(a.alloc(unsafe.Sizeof(*new(T))))
}

func arenaSlice[T any](a *cArena, n int) []T {
	p := a.alloc(uintptr(n) * unsafe.Sizeof(*new(T)))
	if p == nil {
		return nil
	}
	return unsafe.Slice((*T)(p), n)
}

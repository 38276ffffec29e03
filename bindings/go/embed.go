package packlm

/*
#include "packlm.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// Pooling is how Embed turns a text's token vectors into its vector (PACKLM_POOLING_*:
// llama.cpp's numbers).
type Pooling int32

const (
	// PoolingDefault is the pack's own: sentence-transformers' modules.json, a GGUF's
	// pooling_type; PoolingNone when it declares none.
	PoolingDefault Pooling = C.PACKLM_POOLING_DEFAULT
	// PoolingNone gives one vector per token of every text (the final hidden states).
	PoolingNone Pooling = C.PACKLM_POOLING_NONE
	// PoolingMean gives the mean of a text's token vectors.
	PoolingMean Pooling = C.PACKLM_POOLING_MEAN
	// PoolingCLS gives a text's first token's vector.
	PoolingCLS Pooling = C.PACKLM_POOLING_CLS
	// PoolingLast gives a text's last token's vector.
	PoolingLast Pooling = C.PACKLM_POOLING_LAST
)

// Normalize says whether Embed L2-normalizes each vector (packlm_embed_params.normalize).
type Normalize int32

const (
	// NormalizeDefault is the pack's own: its Normalize module, for pooled vectors only.
	NormalizeDefault Normalize = -1
	NormalizeOff     Normalize = 0
	NormalizeOn      Normalize = 1
)

// EmbeddingInfo is what a model embeds by default, and the length of one vector.
type EmbeddingInfo struct {
	DefaultPooling   Pooling // the pack's own (PoolingNone when it declares none)
	DefaultNormalize bool    // whether its vectors are L2-normalized by default
	Dim              int     // the length of one vector under the pooling asked about
}

// EmbeddingInfo reports the pack's own pooling and normalization, and the length of one vector
// under pooling (PoolingDefault: the pack's own). Safe from any goroutine.
func (m *Model) EmbeddingInfo(pooling Pooling) (EmbeddingInfo, error) {
	const op = "packlm_embed_info"
	ptr, err := m.handle(op)
	if err != nil {
		return EmbeddingInfo{}, err
	}
	defer runtime.KeepAlive(m)
	var p C.int32_t
	var normalize C.bool
	var dim C.size_t
	if err := call(op, func() C.packlm_status {
		return C.packlm_embed_info(ptr, C.int32_t(pooling), &p, &normalize, &dim)
	}); err != nil {
		return EmbeddingInfo{}, err
	}
	return EmbeddingInfo{DefaultPooling: Pooling(p), DefaultNormalize: bool(normalize), Dim: int(dim)}, nil
}

// Embeddings are the vectors of an Embed call: Rows x Dim floats, row-major (one row per text
// when pooled, one per token of every text in order with PoolingNone).
type Embeddings struct {
	Rows   int
	Dim    int
	Values []float32
}

// Row is row i's Dim floats (a view of Values).
func (e Embeddings) Row(i int) []float32 { return e.Values[i*e.Dim : (i+1)*e.Dim] }

// Embed returns the vectors of texts (token ids each, as Tokenize gives them with
// TokenizeAddSpecial), pooled as pooling says and normalized as normalize says (PoolingDefault,
// NormalizeDefault: as the pack declares). All texts run in one pass over the weights; a text's
// vector has the same bits whatever texts share the call. The session's adapters apply; its
// positions are untouched.
func (s *Session) Embed(texts [][]uint32, pooling Pooling, normalize Normalize) (Embeddings, error) {
	const op = "packlm_embed"
	ptr, err := s.handle(op)
	if err != nil {
		return Embeddings{}, err
	}
	defer runtime.KeepAlive(s)
	var tokens []uint32
	lengths := make([]C.size_t, len(texts))
	for i, t := range texts {
		tokens = append(tokens, t...)
		lengths[i] = C.size_t(len(t))
	}
	var lp *C.size_t
	if len(lengths) > 0 {
		lp = &lengths[0]
	}
	var params C.packlm_embed_params
	params.size = C.size_t(unsafe.Sizeof(params))
	params.pooling = C.int32_t(pooling)
	params.normalize = C.int32_t(normalize)
	var rows, dim C.size_t
	err = call(op, func() C.packlm_status {
		return C.packlm_embed(ptr, tokenPtr(tokens), lp, C.size_t(len(texts)), &params, nil, 0, &rows, &dim)
	})
	if err != nil && !isBufferTooSmall(err) {
		return Embeddings{}, err
	}
	values := make([]float32, int(rows)*int(dim))
	if err := call(op, func() C.packlm_status {
		return C.packlm_embed(ptr, tokenPtr(tokens), lp, C.size_t(len(texts)), &params, floatPtr(values),
			C.size_t(len(values)), &rows, &dim)
	}); err != nil {
		return Embeddings{}, err
	}
	return Embeddings{Rows: int(rows), Dim: int(dim), Values: values}, nil
}

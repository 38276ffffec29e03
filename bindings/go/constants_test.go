package packlm

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// The constants this package defines for the macros of include/packlm.h, by their names there.
// Each is written as C.PACKLM_X, so cgo takes its value from the header; this table checks that
// stays so (no literal creeps in) and that a macro added to the header is not forgotten here.
var headerConstants = map[string]uint64{
	"PACKLM_OK":                        uint64(OK),
	"PACKLM_ERR_NULL_ARGUMENT":         uint64(ErrNullArgument),
	"PACKLM_ERR_INVALID_ARGUMENT":      uint64(ErrInvalidArgument),
	"PACKLM_ERR_IO":                    uint64(ErrIO),
	"PACKLM_ERR_FORMAT":                uint64(ErrFormat),
	"PACKLM_ERR_UNSUPPORTED":           uint64(ErrUnsupported),
	"PACKLM_ERR_TENSOR":                uint64(ErrTensor),
	"PACKLM_ERR_TOKEN_OUT_OF_RANGE":    uint64(ErrTokenOutOfRange),
	"PACKLM_ERR_CONTEXT_OVERFLOW":      uint64(ErrContextOverflow),
	"PACKLM_ERR_BUFFER_TOO_SMALL":      uint64(ErrBufferTooSmall),
	"PACKLM_ERR_TOKENIZER":             uint64(ErrTokenizer),
	"PACKLM_ERR_BACKEND_UNAVAILABLE":   uint64(ErrBackendUnavailable),
	"PACKLM_ERR_ABORTED":               uint64(ErrAborted),
	"PACKLM_ERR_SNAPSHOT":              uint64(ErrSnapshot),
	"PACKLM_ERR_UTF8":                  uint64(ErrUTF8),
	"PACKLM_ERR_PANIC":                 uint64(ErrPanic),
	"PACKLM_ERR_SESSION_BUSY":          uint64(ErrSessionBusy),
	"PACKLM_ERR_LIMIT_EXCEEDED":        uint64(ErrLimitExceeded),
	"PACKLM_ERR_SESSION_POISONED":      uint64(ErrSessionPoisoned),
	"PACKLM_ERR_UNSUPPORTED_PRECISION": uint64(ErrUnsupportedPrecision),
	"PACKLM_ERR_OUT_OF_MEMORY":         uint64(ErrOutOfMemory),
	"PACKLM_ERR_NON_FINITE":            uint64(ErrNonFinite),
	"PACKLM_BACKEND_HOST":              uint64(BackendHost),
	"PACKLM_BACKEND_REFERENCE":         uint64(BackendReference),
	"PACKLM_BACKEND_GPU":               uint64(BackendGPU),
	"PACKLM_BACKEND_ACCELERATOR":       uint64(BackendAccelerator),
	"PACKLM_BACKEND_NPU":               uint64(BackendNPU),
	"PACKLM_PRECISION_DEFAULT":         uint64(PrecisionDefault),
	"PACKLM_PRECISION_EXACT":           uint64(PrecisionExact),
	"PACKLM_PRECISION_FAST":            uint64(PrecisionFast),
	"PACKLM_WANT_LAST":                 uint64(WantLast),
	"PACKLM_WANT_ALL":                  uint64(WantAll),
	"PACKLM_WANT_NONE":                 uint64(WantNone),
	"PACKLM_MAX_STEP_ITEMS":            uint64(MaxStepItems),
	"PACKLM_VERIFY_GREEDY":             uint64(VerifyGreedy),
	"PACKLM_VERIFY_SAMPLED":            uint64(VerifySampled),
	"PACKLM_GRAMMAR_JSON_SCHEMA":       uint64(GrammarJSONSchema),
	"PACKLM_GRAMMAR_LARK":              uint64(GrammarLark),
	"PACKLM_GRAMMAR_REGEX":             uint64(GrammarRegex),
	"PACKLM_GRAMMAR_GBNF":              uint64(GrammarGBNF),
	"PACKLM_MAX_GRAMMAR_BYTES":         uint64(MaxGrammarBytes),
	"PACKLM_TOKENIZE_ADD_SPECIAL":      uint64(TokenizeAddSpecial),
	"PACKLM_TOKENIZE_PARSE_SPECIAL":    uint64(TokenizeParseSpecial),
	"PACKLM_DETOKENIZE_SKIP_SPECIAL":   uint64(DetokenizeSkipSpecial),
	"PACKLM_ABI_VERSION":               uint64(ABIVersion),
	"PACKLM_POOLING_DEFAULT":           macroBits(int64(PoolingDefault)),
	"PACKLM_POOLING_NONE":              uint64(PoolingNone),
	"PACKLM_POOLING_MEAN":              uint64(PoolingMean),
	"PACKLM_POOLING_CLS":               uint64(PoolingCLS),
	"PACKLM_POOLING_LAST":              uint64(PoolingLast),
}

// macroBits is a negative constant as macroValue reads its text (two's complement in 64 bits).
func macroBits(v int64) uint64 { return uint64(v) }

// The macros of include/packlm.h this package leaves out, and why.
var headerNotExposed = map[string]string{
	"PACKLM_H":                          "the include guard",
	"PACKLM_VERSION":                    "Version() gives the loaded library's version",
	"PACKLM_VERSION_MAJOR":              "as PACKLM_VERSION",
	"PACKLM_VERSION_MINOR":              "as PACKLM_VERSION",
	"PACKLM_VERSION_PATCH":              "as PACKLM_VERSION",
	"PACKLM_LOG_DEBUG":                  "this package sets no log callback",
	"PACKLM_LOG_INFO":                   "this package sets no log callback",
	"PACKLM_LOG_WARN":                   "this package sets no log callback",
	"PACKLM_DEFAULT_MAX_TOKENIZE_BYTES": "this package does not change the tokenize limit",
}

// macroValue is the value of a macro's text: a plain number (a negative one, such as
// PACKLM_POOLING_DEFAULT's -1, as its two's complement in 64 bits), or `(N << M)`, as cbindgen
// writes a Rust constant `N << M` (PACKLM_MAX_GRAMMAR_BYTES).
func macroValue(text string) (uint64, bool) {
	if v, err := strconv.ParseUint(text, 10, 64); err == nil {
		return v, true
	}
	if v, err := strconv.ParseInt(text, 10, 64); err == nil {
		return uint64(v), true
	}
	m := regexp.MustCompile(`^\((\d+) << (\d+)\)$`).FindStringSubmatch(text)
	if m == nil {
		return 0, false
	}
	v, err1 := strconv.ParseUint(m[1], 10, 64)
	shift, err2 := strconv.ParseUint(m[2], 10, 6)
	if err1 != nil || err2 != nil || v<<shift>>shift != v {
		return 0, false
	}
	return v << shift, true
}

// Every macro of the header is a constant of this package with the header's value, or is left
// out for a stated reason; both tables name only macros the header has.
func TestConstantsMatchHeader(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("..", "..", "include", "packlm.h"))
	if err != nil {
		t.Fatal(err)
	}
	macros := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^#define (PACKLM_\w+)[ \t]*(.*)$`).FindAllStringSubmatch(string(text), -1) {
		macros[m[1]] = m[2]
	}
	if len(macros) < 45 {
		t.Fatalf("found %d PACKLM_ macros in include/packlm.h; the parse is wrong", len(macros))
	}
	for name, text := range macros {
		got, exposed := headerConstants[name]
		_, omitted := headerNotExposed[name]
		switch {
		case exposed && omitted:
			t.Errorf("%s is both exposed and listed as left out", name)
		case exposed:
			want, ok := macroValue(text)
			if !ok {
				t.Errorf("%s is %q in the header, not a plain number or (N << M)", name, text)
			} else if got != want {
				t.Errorf("%s: this package has %d, the header %d", name, got, want)
			}
		case !omitted:
			t.Errorf("%s of include/packlm.h is neither a constant of this package nor listed as left out", name)
		}
	}
	for name := range headerConstants {
		if _, ok := macros[name]; !ok {
			t.Errorf("%s is not a macro of include/packlm.h", name)
		}
	}
	for name := range headerNotExposed {
		if _, ok := macros[name]; !ok {
			t.Errorf("%s (listed as left out) is not a macro of include/packlm.h", name)
		}
	}
}

"""Python bindings for packlm over its C ABI (ctypes).

    import packlm
    m = packlm.Model("models/SmolLM2-135M-Instruct.Q4_1.gguf")
    s = m.session()
    stream = m.detokenizer(skip_special=True)
    logits = s.step_batch(m.tokenize(m.chat_apply([("user", "Hi")]), parse_special=True))
    for _ in range(32):
        tok = packlm.argmax(logits)
        if tok in m.stop_tokens: break
        print(stream.feed(tok), end="", flush=True)
        logits = s.step(tok)
    print(stream.flush())

`pip install bindings/python` builds the library with cargo and puts it inside the installed
package. The library loaded is the one PACKLM_LIB names, else the one installed beside this file,
else target/release/ of the checkout this file lies in, else the system's libpacklm.so.<ABI>;
library_path() says which. Every function of include/packlm.h has its argtypes and restype
declared in _SIGNATURES (a test compares that table, and every constant, with the header). Every
failing call raises PacklmError carrying the status (.status) and packlm_last_error()'s message.
A Model or an Adapter may be shared by threads; a Session, Detokenizer or Drafter is used by one
thread at a time. Handles are freed when their Python object is collected, or at once with close().
"""

from __future__ import annotations

import ctypes as C
import os
import sys
from array import array
from typing import (Any, Callable, Dict, FrozenSet, List, Literal, MutableSequence, Optional, Sequence,
                    Tuple, TypeVar, Union, overload)

ABI_VERSION = 2

# The file cargo names the shared library on each platform.
_LIBRARY_FILE = {"darwin": "libpacklm.dylib", "win32": "packlm.dll"}.get(sys.platform, "libpacklm.so")


def _find_library() -> str:
    path = os.environ.get("PACKLM_LIB")
    if path:
        return path
    here = os.path.dirname(os.path.abspath(__file__))
    installed = os.path.join(here, _LIBRARY_FILE)
    checkout = os.path.normpath(os.path.join(here, "..", "..", "..", "target", "release", _LIBRARY_FILE))
    for candidate in (installed, checkout):
        if os.path.exists(candidate):
            return candidate
    # The system's copy, by the SONAME programs linked with -lpacklm record.
    return f"libpacklm.so.{ABI_VERSION}" if _LIBRARY_FILE == "libpacklm.so" else _LIBRARY_FILE


def _load(path: str) -> C.CDLL:
    try:
        return C.CDLL(path)
    except OSError as e:
        raise ImportError(f"packlm: cannot load the library {path} ({e}); install the package "
                          "(pip install bindings/python), build the library (make build), or name it in "
                          "PACKLM_LIB") from e


_library_path = _find_library()
_lib = _load(_library_path)

# The constants of include/packlm.h, each named as there without PACKLM_ (tests/python compares
# every one with the C compiler's reading of the header). Status numbers never change meaning.
OK = 0
ERR_NULL_ARGUMENT = 1
ERR_INVALID_ARGUMENT = 2
ERR_IO = 3
ERR_FORMAT = 4
ERR_UNSUPPORTED = 5
ERR_TENSOR = 6
ERR_TOKEN_OUT_OF_RANGE = 7
ERR_CONTEXT_OVERFLOW = 8
ERR_BUFFER_TOO_SMALL = 9
ERR_TOKENIZER = 10
ERR_BACKEND_UNAVAILABLE = 11
ERR_ABORTED = 12
ERR_SNAPSHOT = 13
ERR_UTF8 = 14
ERR_PANIC = 15
ERR_SESSION_BUSY = 16
ERR_LIMIT_EXCEEDED = 17
ERR_SESSION_POISONED = 18
ERR_UNSUPPORTED_PRECISION = 19
ERR_OUT_OF_MEMORY = 20
ERR_NON_FINITE = 21

TOKENIZE_ADD_SPECIAL, TOKENIZE_PARSE_SPECIAL = 1, 2
DETOKENIZE_SKIP_SPECIAL = 1
WANT_LAST, WANT_ALL, WANT_NONE = 0, 1, 2
VERIFY_GREEDY, VERIFY_SAMPLED = 0, 1
BACKEND_HOST, BACKEND_REFERENCE, BACKEND_GPU = 0, 1, 2
BACKEND_ACCELERATOR = BACKEND_GPU  # the earlier name
# ONNX graphs on ONNX Runtime's execution provider (Model(provider=...)), its library loaded at
# open (Model(onnxruntime_library=...)); ERR_BACKEND_UNAVAILABLE, saying why, where it cannot be.
BACKEND_NPU = 3
DEFAULT_MAX_TOKENIZE_BYTES = 1 << 20  # tokenize's limit until set_max_tokenize_bytes
PRECISION_DEFAULT, PRECISION_EXACT, PRECISION_FAST = 0, 1, 2
# Model(precision=...) by name; None is the pack's default (fast for block-quantized weights,
# exact for float ones).
_PRECISION_CODES: Dict[Optional[str], int] = {None: PRECISION_DEFAULT, "exact": PRECISION_EXACT, "fast": PRECISION_FAST}
_PRECISION_NAMES: Dict[int, str] = {PRECISION_EXACT: "exact", PRECISION_FAST: "fast"}
LOG_DEBUG, LOG_INFO, LOG_WARN = 0, 1, 2
MAX_STEP_ITEMS = 4096  # the most items of one step_sessions call
GRAMMAR_JSON_SCHEMA, GRAMMAR_LARK, GRAMMAR_REGEX, GRAMMAR_GBNF = 0, 1, 2, 3  # Constraint kinds
MAX_GRAMMAR_BYTES = 4 << 20  # the most bytes of grammar text a Constraint takes
# Session.embed(pooling=...) and Model.embedding_info: llama.cpp's numbers; DEFAULT is the pack's own
# (sentence-transformers' modules.json, a GGUF's pooling_type; NONE when it declares none).
POOLING_DEFAULT, POOLING_NONE, POOLING_MEAN, POOLING_CLS, POOLING_LAST = -1, 0, 1, 2, 3


class PacklmError(Exception):
    """A failed packlm call: `.status` is the PACKLM_ERR_* number, str() the library's message."""

    status: int
    message: str

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{message} (status {status})")
        self.status = status
        self.message = message


# Structs, laid out as include/packlm.h declares them (tests/python checks every offset and size
# against the C compiler's reading of the header).
_LOG_FN = C.CFUNCTYPE(None, C.c_int32, C.c_char_p, C.c_void_p)
_PROGRESS_FN = C.CFUNCTYPE(C.c_bool, C.c_float, C.c_void_p)


class _OpenOptions(C.Structure):
    _fields_ = [("size", C.c_size_t), ("backend", C.c_uint32), ("threads", C.c_uint32),
                ("weight_type", C.c_uint32), ("progress", _PROGRESS_FN), ("user_data", C.c_void_p),
                ("precision", C.c_uint32), ("provider", C.c_char_p), ("provider_options", C.c_char_p),
                ("onnxruntime_library", C.c_char_p), ("compile_ahead", C.c_uint32), ("reserved0", C.c_uint32),
                ("export_onnx_dir", C.c_char_p)]


class _Info(C.Structure):
    _fields_ = [("size", C.c_size_t), ("n_vocab", C.c_uint32), ("n_layers", C.c_uint32),
                ("n_ctx", C.c_uint32), ("hidden_size", C.c_uint32), ("bos", C.c_int32),
                ("eos", C.c_int32), ("n_stop", C.c_uint32), ("add_bos", C.c_uint32),
                ("has_chat_template", C.c_uint32), ("reserved", C.c_uint32), ("precision", C.c_uint32)]


class _SessionOptions(C.Structure):
    _fields_ = [("size", C.c_size_t), ("n_ctx", C.c_uint32)]


class _SamplerParams(C.Structure):
    _fields_ = [("size", C.c_size_t), ("temperature", C.c_float), ("top_k", C.c_uint32),
                ("top_p", C.c_float), ("min_p", C.c_float), ("repetition_penalty", C.c_float),
                ("recent", C.POINTER(C.c_uint32)), ("n_recent", C.c_size_t)]


class _VerifyParams(C.Structure):
    # The ABI 2 layout: the sampler is a pointer (ABI 1 embedded it by value).
    _fields_ = [("size", C.c_size_t), ("mode", C.c_uint32), ("sampler", C.POINTER(_SamplerParams)),
                ("draft_probs", C.POINTER(C.c_float)), ("n_draft_probs", C.c_size_t),
                ("rng_state", C.POINTER(C.c_uint64))]


class _VerifyResult(C.Structure):
    _fields_ = [("size", C.c_size_t), ("n_accepted", C.c_uint32), ("next_token", C.c_uint32),
                ("logits_out", C.POINTER(C.c_float)), ("rounds", C.c_uint64),
                ("drafted", C.c_uint64), ("accepted", C.c_uint64),
                ("logits_capacity", C.c_size_t), ("n_logits", C.c_size_t)]


class _ChatMessage(C.Structure):
    _fields_ = [("role", C.c_char_p), ("content", C.c_char_p)]


class _EmbedParams(C.Structure):
    _fields_ = [("size", C.c_size_t), ("pooling", C.c_int32), ("normalize", C.c_int32)]


class _StepItem(C.Structure):
    _fields_ = [("session", C.c_void_p), ("tokens", C.POINTER(C.c_uint32)), ("n_tokens", C.c_size_t),
                ("want", C.c_uint32), ("logits_out", C.POINTER(C.c_float)), ("capacity", C.c_size_t),
                ("n_logits", C.c_size_t), ("verify", C.POINTER(_VerifyParams)),
                ("result", C.POINTER(_VerifyResult))]


STRUCTS: Dict[str, Any] = {"packlm_open_options": _OpenOptions, "packlm_info": _Info,
           "packlm_session_options": _SessionOptions, "packlm_sampler_params": _SamplerParams,
           "packlm_verify_params": _VerifyParams, "packlm_verify_result": _VerifyResult,
           "packlm_chat_message": _ChatMessage, "packlm_step_item": _StepItem,
           "packlm_embed_params": _EmbedParams}

# Every function of include/packlm.h: name -> (restype, argtypes). Handles are void pointers.
_st, _h, _sz, _u32, _i32, _u64 = C.c_uint32, C.c_void_p, C.c_size_t, C.c_uint32, C.c_int32, C.c_uint64
_P = C.POINTER
_SIGNATURES: Dict[str, Tuple[Any, List[Any]]] = {
    "packlm_session_abort_handle": (_st, [_h, _P(_h)]),
    "packlm_abort_set": (_st, [_h]),
    "packlm_abort_clear": (_st, [_h]),
    "packlm_abort_free": (None, [_h]),
    "packlm_set_log_callback": (_st, [_LOG_FN, _h]),
    "packlm_open_options_default": (_st, [_P(_OpenOptions)]),
    "packlm_open_options_init": (_st, [_P(_OpenOptions), _sz]),
    "packlm_model_open": (_st, [C.c_char_p, _P(_OpenOptions), _P(_h)]),
    "packlm_model_free": (None, [_h]),
    "packlm_model_info": (_st, [_h, _P(_Info)]),
    "packlm_model_stop_tokens": (_st, [_h, _P(_u32), _sz, _P(_sz)]),
    "packlm_model_set_max_tokenize_bytes": (_st, [_h, _sz]),
    "packlm_model_set_threads": (_st, [_h, _u32]),
    "packlm_model_kv_widths": (_st, [_h, _P(_u32), _sz, _P(_sz)]),
    "packlm_model_info_json": (_st, [_h, C.c_char_p, _sz, _P(_sz)]),
    "packlm_prefix_cache_new": (_st, [_sz, _P(_h)]),
    "packlm_prefix_cache_store": (_st, [_h, _h]),
    "packlm_prefix_cache_restore": (_st, [_h, _h, _P(_u32), _sz, _P(_sz)]),
    "packlm_prefix_cache_free": (None, [_h]),
    "packlm_session_new": (_st, [_h, _P(_SessionOptions), _P(_h)]),
    "packlm_session_free": (None, [_h]),
    "packlm_session_n_past": (_st, [_h, _P(_sz)]),
    "packlm_session_fork": (_st, [_h, _P(_h)]),
    "packlm_session_kv_bytes": (_st, [_h, _P(_sz)]),
    "packlm_session_set_constraint": (_st, [_h, _h]),
    "packlm_constraint_new": (_st, [_h, _u32, C.c_char_p, _sz, _P(_h)]),
    "packlm_constraint_free": (None, [_h]),
    "packlm_constraint_mask": (_st, [_h, _P(C.c_float), _sz]),
    "packlm_constraint_accept": (_st, [_h, _u32]),
    "packlm_constraint_rollback": (_st, [_h, _sz]),
    "packlm_constraint_state": (_st, [_h, _P(_u32), _P(_u32)]),
    "packlm_constraint_forced": (_st, [_h, _P(_u32), _sz, _P(_sz)]),
    "packlm_step": (_st, [_h, _u32, _P(C.c_float)]),
    "packlm_step_batch": (_st, [_h, _P(_u32), _sz, _u32, _P(C.c_float)]),
    "packlm_step_into": (_st, [_h, _u32, _P(C.c_float), _sz, _P(_sz)]),
    "packlm_step_batch_into": (_st, [_h, _P(_u32), _sz, _u32, _P(C.c_float), _sz, _P(_sz)]),
    "packlm_step_sessions": (_st, [_h, _P(_StepItem), _sz]),
    "packlm_sample": (_st, [_P(C.c_float), _sz, _P(_SamplerParams), _P(_u64), _P(_u32)]),
    "packlm_verify": (_st, [_h, _u32, _P(_u32), _sz, _P(_VerifyParams), _P(_VerifyResult)]),
    "packlm_drafter_new_ngram": (_st, [_u32, _P(_h)]),
    "packlm_drafter_new_model": (_st, [_h, _h, _P(_h)]),
    "packlm_drafter_propose": (_st, [_h, _h, _u32, _sz, _P(_u32), _P(_sz)]),
    "packlm_drafter_free": (None, [_h]),
    "packlm_truncate": (_st, [_h, _sz]),
    "packlm_snapshot": (_st, [_h, _P(C.c_uint8), _sz, _P(_sz)]),
    "packlm_restore": (_st, [_h, _P(C.c_uint8), _sz]),
    "packlm_status_str": (C.c_char_p, [_i32]),
    "packlm_last_error": (C.c_char_p, []),
    "packlm_version": (C.c_char_p, []),
    "packlm_abi_version": (_u32, []),
    "packlm_detokenizer_new": (_st, [_h, _u32, _P(_h)]),
    "packlm_detokenizer_feed": (_st, [_h, _u32, C.c_char_p, _sz, _P(_sz)]),
    "packlm_detokenizer_flush": (_st, [_h, C.c_char_p, _sz, _P(_sz)]),
    "packlm_detokenizer_free": (None, [_h]),
    "packlm_tokenize": (_st, [_h, C.c_char_p, _sz, _u32, _P(_u32), _sz, _P(_sz)]),
    "packlm_detokenize": (_st, [_h, _P(_u32), _sz, _u32, C.c_char_p, _sz, _P(_sz)]),
    "packlm_token_to_piece": (_st, [_h, _u32, C.c_char_p, _sz, _P(_sz)]),
    "packlm_chat_apply": (_st, [_h, _P(_ChatMessage), _sz, _i32, C.c_char_p, _sz, _P(_sz)]),
    "packlm_embed_info": (_st, [_h, _i32, _P(_i32), _P(C.c_bool), _P(_sz)]),
    "packlm_embed": (_st, [_h, _P(_u32), _P(_sz), _sz, _P(_EmbedParams), _P(C.c_float), _sz, _P(_sz), _P(_sz)]),
    "packlm_adapter_open": (_st, [_h, C.c_char_p, _P(_h)]),
    "packlm_adapter_free": (None, [_h]),
    "packlm_adapter_info": (_st, [_h, _P(_u32), _P(C.c_float)]),
    "packlm_session_set_adapters": (_st, [_h, _P(_h), _P(C.c_float), _sz]),
    "packlm_control_vector_from_data": (_st, [_h, _P(C.c_float), _sz, _sz, _u32, _u32, _P(_h)]),
    "packlm_control_vector_open": (_st, [_h, _P(C.c_char_p), _P(C.c_float), _sz, _u32, _u32, _P(_h)]),
    "packlm_control_vector_free": (None, [_h]),
    "packlm_session_set_control_vector": (_st, [_h, _h]),
}
for _name, (_restype, _argtypes) in _SIGNATURES.items():
    _fn = getattr(_lib, _name)  # AttributeError names a function the library lacks
    _fn.restype, _fn.argtypes = _restype, _argtypes

if _lib.packlm_abi_version() != ABI_VERSION:
    raise ImportError(f"packlm (Python) speaks ABI {ABI_VERSION}, the library {_library_path} ABI "
                      f"{_lib.packlm_abi_version()}")


_H = TypeVar("_H", bound="_Handle")


def _check(status: int) -> None:
    if status != OK:
        raise PacklmError(status, (_lib.packlm_last_error() or b"").decode("utf-8", "replace"))


def _text_call(call: Callable[[Any, int, Any], int]) -> str:
    """`call(buf, cap, n)` writing NUL-terminated text; grows the buffer when asked."""
    n = C.c_size_t()
    buf = C.create_string_buffer(256)
    st = call(buf, len(buf), C.byref(n))
    if st == ERR_BUFFER_TOO_SMALL:
        buf = C.create_string_buffer(n.value)
        st = call(buf, len(buf), C.byref(n))
    _check(st)
    return buf.raw[: n.value].decode("utf-8")


def _ids_call(call: Callable[[Any, int, Any], int], guess: int) -> List[int]:
    """`call(buf, cap, n)` writing uint32 ids; grows the buffer when asked."""
    n = C.c_size_t()
    buf = (C.c_uint32 * max(guess, 1))()
    st = call(buf, len(buf), C.byref(n))
    if st == ERR_BUFFER_TOO_SMALL:
        buf = (C.c_uint32 * n.value)()
        st = call(buf, len(buf), C.byref(n))
    _check(st)
    return list(buf[: n.value])


def _u32_array(ids: Sequence[int]) -> Any:
    return (C.c_uint32 * len(ids))(*ids)


def version() -> str:
    """The loaded library's version (packlm_version)."""
    return str(_lib.packlm_version().decode())


def abi_version() -> int:
    """The loaded library's ABI version (packlm_abi_version); equals ABI_VERSION."""
    return int(_lib.packlm_abi_version())


def library_path() -> str:
    """The library this module loaded: PACKLM_LIB, the installed copy, the checkout's, or the
    system's name for it."""
    return _library_path


def status_str(status: int) -> str:
    """The fixed text of a status number (packlm_status_str)."""
    return str(_lib.packlm_status_str(status).decode())


def argmax(logits: Sequence[float]) -> int:
    """The greedy choice: the largest logit, ties to the lowest id."""
    best = 0
    for i in range(1, len(logits)):
        if logits[i] > logits[best]:
            best = i
    return best


_log_callback: Any = None  # the installed callback, kept alive while the library may call it


def set_log_callback(fn: Optional[Callable[[int, str], None]]) -> None:
    """Sends library messages to fn(level, message) (level: LOG_DEBUG, LOG_INFO or LOG_WARN);
    None restores the default."""
    global _log_callback
    if fn is None:
        cb = _LOG_FN()
    else:
        def deliver(level: int, msg: bytes, _ud: Any) -> None:
            fn(level, msg.decode("utf-8", "replace"))
        cb = _LOG_FN(deliver)
    _check(_lib.packlm_set_log_callback(cb, None))
    _log_callback = cb if fn else None


def sample(logits: Sequence[float], temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
           min_p: float = 0.0, repetition_penalty: float = 1.0, recent: Sequence[int] = (),
           rng: Optional[MutableSequence[int]] = None) -> int:
    """Draws a token from `logits`. `rng` is a one-element list holding the 64-bit state,
    advanced in place (same seed, same draws on any machine)."""
    values = (C.c_float * len(logits))(*logits)
    rec = _u32_array(recent)
    p = _SamplerParams(size=C.sizeof(_SamplerParams), temperature=temperature, top_k=top_k, top_p=top_p,
                       min_p=min_p, repetition_penalty=repetition_penalty,
                       recent=C.cast(rec, C.POINTER(C.c_uint32)), n_recent=len(recent))
    state = C.c_uint64(rng[0] if rng else 0)
    tok = C.c_uint32()
    _check(_lib.packlm_sample(values, len(logits), C.byref(p), C.byref(state), C.byref(tok)))
    if rng is not None:
        rng[0] = state.value
    return tok.value


class _Handle:
    _free: Any = None
    _ptr: Any = None

    def close(self) -> None:
        """Frees the C object now rather than when it is collected; a second close does nothing."""
        if getattr(self, "_ptr", None):
            type(self)._free(self._ptr)
            self._ptr = None

    def __del__(self) -> None:
        self.close()

    def __enter__(self: _H) -> _H:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Model(_Handle):
    """An open pack (HF folder or GGUF). `progress(fraction) -> bool` may cancel the open.

    `precision` is "exact" (activations f32 end to end), "fast" (activations may be rounded to
    8 bits per block for integer dot products against block-quantized weights) or None, the
    pack's default: fast for block-quantized weights, exact for float ones. Any other value
    raises PacklmError with ERR_UNSUPPORTED_PRECISION. `.precision` is the one in use ("exact"
    or "fast"): a backend without reduced-precision kernels runs exact whatever is asked.

    With backend=BACKEND_NPU: `provider` is ONNX Runtime's execution provider by name ("cpu",
    the default for None, "openvino", "vitisai", "qnn", "coreml", "cuda" or "dml"; one the
    runtime lacks raises ERR_BACKEND_UNAVAILABLE naming it), `provider_options` its options as
    "key=value;key=value", and `onnxruntime_library` the path of ONNX Runtime's shared library
    (None: the environment variable PACKLM_ONNXRUNTIME, then the system's search path), and
    `compile_ahead` a count of positions: the graphs that sessions of up to that many positions
    use are compiled during the open (at most the model's context), which `progress` counts as
    its second half, rather than at their first use (0, the default), and `export_onnx_dir` a
    folder each graph is written into as it is compiled (graphN_rowsR_kvK.onnx files, their
    weights in weights.bin beside them, graphs.json saying what each input and output is;
    None, the default: nothing is written), made by the open when missing; one that cannot
    be made or written raises ERR_IO naming it. The other backends ignore the five."""

    _free = _lib.packlm_model_free
    n_vocab: int
    n_layers: int
    n_ctx: int
    hidden_size: int
    bos: Optional[int]
    eos: Optional[int]
    add_bos: bool
    has_chat_template: bool
    precision: str
    stop_tokens: FrozenSet[int]

    def __init__(self, path: Union[str, bytes, os.PathLike[str]], backend: int = BACKEND_HOST, threads: int = 0,
                 progress: Optional[Callable[[float], bool]] = None, precision: Optional[str] = None, *,
                 provider: Optional[str] = None, provider_options: Optional[str] = None,
                 onnxruntime_library: Optional[Union[str, bytes, os.PathLike[str]]] = None,
                 compile_ahead: int = 0,
                 export_onnx_dir: Optional[Union[str, bytes, os.PathLike[str]]] = None) -> None:
        if not isinstance(precision, (str, type(None))) or precision not in _PRECISION_CODES:
            raise PacklmError(ERR_UNSUPPORTED_PRECISION, f"precision {precision!r} is not 'exact', 'fast' or None")
        opts = _OpenOptions()
        _check(_lib.packlm_open_options_init(C.byref(opts), C.sizeof(_OpenOptions)))
        opts.backend, opts.threads = backend, threads
        opts.precision = _PRECISION_CODES[precision]
        # The structure keeps the bytes alive until the open, which copies them, has returned.
        opts.provider = None if provider is None else provider.encode("utf-8")
        opts.provider_options = None if provider_options is None else provider_options.encode("utf-8")
        opts.onnxruntime_library = None if onnxruntime_library is None else os.fsencode(onnxruntime_library)
        # A uint32 in C: ctypes would wrap a negative count or one past it to another number.
        if not isinstance(compile_ahead, int) or not 0 <= compile_ahead < 1 << 32:
            raise PacklmError(ERR_INVALID_ARGUMENT, f"compile_ahead {compile_ahead!r} is not a count of positions (0 to 2^32 - 1)")
        opts.compile_ahead = compile_ahead
        opts.export_onnx_dir = None if export_onnx_dir is None else os.fsencode(export_onnx_dir)
        if progress is not None:
            opts.progress = _PROGRESS_FN(lambda f, _ud: bool(progress(f)))
        self._ptr = C.c_void_p()
        _check(_lib.packlm_model_open(os.fsencode(path), C.byref(opts), C.byref(self._ptr)))
        info = _Info(size=C.sizeof(_Info))
        _check(_lib.packlm_model_info(self._ptr, C.byref(info)))
        self.n_vocab, self.n_layers, self.n_ctx = info.n_vocab, info.n_layers, info.n_ctx
        self.hidden_size = info.hidden_size
        self.bos = None if info.bos < 0 else info.bos
        self.eos = None if info.eos < 0 else info.eos
        self.add_bos = bool(info.add_bos)
        self.has_chat_template = bool(info.has_chat_template)
        self.precision = _PRECISION_NAMES.get(info.precision, f"unknown ({info.precision})")
        self.stop_tokens = frozenset(_ids_call(lambda b, c, n: _lib.packlm_model_stop_tokens(self._ptr, b, c, n), 8))

    def kv_widths(self) -> List[int]:
        """Each layer's KV row width (n_kv_heads x head_dim of that layer; 0 for a layer that reads
        another layer's KV)."""
        return _ids_call(lambda b, c, n: _lib.packlm_model_kv_widths(self._ptr, b, c, n), self.n_layers)

    def info_json(self) -> str:
        return _text_call(lambda b, c, n: _lib.packlm_model_info_json(self._ptr, b, c, n))

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> List[int]:
        raw = text.encode("utf-8")
        flags = (TOKENIZE_ADD_SPECIAL if add_special else 0) | (TOKENIZE_PARSE_SPECIAL if parse_special else 0)
        return _ids_call(lambda b, c, n: _lib.packlm_tokenize(self._ptr, raw, len(raw), flags, b, c, n), len(raw) + 2)

    def set_max_tokenize_bytes(self, max_bytes: int) -> None:
        """Longest text (UTF-8 bytes) tokenize accepts on this model; 0 restores the default
        (DEFAULT_MAX_TOKENIZE_BYTES)."""
        _check(_lib.packlm_model_set_max_tokenize_bytes(self._ptr, C.c_size_t(max_bytes)))

    def set_threads(self, threads: int) -> None:
        """Caps the threads this model's passes use (0 = one per core); results keep their bits."""
        _check(_lib.packlm_model_set_threads(self._ptr, C.c_uint32(threads)))

    def detokenize(self, tokens: Sequence[int], skip_special: bool = False) -> str:
        ids = _u32_array(tokens)
        flags = DETOKENIZE_SKIP_SPECIAL if skip_special else 0
        return _text_call(lambda b, c, n: _lib.packlm_detokenize(self._ptr, ids, len(tokens), flags, b, c, n))

    def token_to_piece(self, token: int) -> str:
        return _text_call(lambda b, c, n: _lib.packlm_token_to_piece(self._ptr, token, b, c, n))

    def chat_apply(self, messages: Sequence[Tuple[str, str]], add_generation_prompt: bool = True) -> str:
        """`messages`: (role, content) pairs. Renders the pack's chat template."""
        enc = [(r.encode("utf-8"), t.encode("utf-8")) for r, t in messages]
        arr = (_ChatMessage * len(enc))(*[_ChatMessage(r, t) for r, t in enc])
        return _text_call(lambda b, c, n: _lib.packlm_chat_apply(self._ptr, arr, len(enc), int(add_generation_prompt), b, c, n))

    def session(self, n_ctx: int = 0) -> Session:
        return Session(self, n_ctx)

    def embedding_info(self, pooling: Optional[int] = None) -> Tuple[int, bool, int]:
        """(default_pooling, default_normalize, dim): the pack's own pooling (a POOLING_* code;
        POOLING_NONE when it declares none), whether its vectors are L2-normalized by default, and
        the length of one vector under `pooling` (None or POOLING_DEFAULT: the pack's own)."""
        code = POOLING_DEFAULT if pooling is None else pooling
        default_pooling, default_normalize, dim = C.c_int32(), C.c_bool(), C.c_size_t()
        _check(_lib.packlm_embed_info(self._ptr, code, C.byref(default_pooling), C.byref(default_normalize), C.byref(dim)))
        return default_pooling.value, bool(default_normalize.value), dim.value

    def open_adapter(self, path: Union[str, bytes, os.PathLike[str]]) -> Adapter:
        """The LoRA adapter at `path` (a PEFT folder or an adapter GGUF) for this model."""
        return Adapter(self, path)

    def control_vector(self, data: Sequence[float], n_embd: int, layer_start: int, layer_end: int) -> ControlVector:
        """A control vector from `data` (n_layers x n_embd floats, layer 0 first), added at the end
        of layers layer_start..layer_end (0-based, inclusive)."""
        return ControlVector(self, data=data, n_embd=n_embd, layers=(layer_start, layer_end))

    def open_control_vector(self, files: Sequence[Tuple[Union[str, bytes, os.PathLike[str]], float]],
                            layer_start: int = 1, layer_end: Optional[int] = None) -> ControlVector:
        """The sum of llama.cpp control-vector GGUFs, each (path, scale), added at the end of layers
        layer_start..layer_end (0-based, inclusive; by default 1 to the last, llama.cpp's range)."""
        end = self.n_layers - 1 if layer_end is None else layer_end
        return ControlVector(self, files=files, layers=(layer_start, end))

    def detokenizer(self, skip_special: bool = False) -> Detokenizer:
        return Detokenizer(self, skip_special)


class Adapter(_Handle):
    """A LoRA adapter opened for one model: a PEFT folder (adapter_config.json +
    adapter_model.safetensors) or a llama.cpp adapter GGUF. An adapter for another base raises
    PacklmError with ERR_TENSOR. Give it to sessions with Session.set_adapters; they keep it
    alive, so closing it afterwards is safe. May be shared by threads."""

    _free = _lib.packlm_adapter_free
    model: Model
    rank: int
    alpha: float

    def __init__(self, model: Model, path: Union[str, bytes, os.PathLike[str]]) -> None:
        self.model = model
        self._ptr = C.c_void_p()
        _check(_lib.packlm_adapter_open(model._ptr, os.fsencode(path), C.byref(self._ptr)))
        rank, alpha = C.c_uint32(), C.c_float()
        _check(_lib.packlm_adapter_info(self._ptr, C.byref(rank), C.byref(alpha)))
        self.rank, self.alpha = rank.value, alpha.value


class ControlVector(_Handle):
    """A control vector (llama.cpp's cvec) made for one model: a vector of the hidden width per
    layer, added to the residual stream at the end of each layer of its range. Give it to sessions
    with Session.set_control_vector; they keep it alive, so closing it afterwards is safe. May be
    shared by threads. Made by Model.control_vector or Model.open_control_vector."""

    _free = _lib.packlm_control_vector_free
    model: Model

    def __init__(self, model: Model, *, layers: Tuple[int, int], data: Optional[Sequence[float]] = None,
                 n_embd: int = 0, files: Optional[Sequence[Tuple[Union[str, bytes, os.PathLike[str]], float]]] = None) -> None:
        self.model = model
        self._ptr = C.c_void_p()
        start, end = layers
        if start < 0 or end < 0:
            raise PacklmError(ERR_INVALID_ARGUMENT, f"control vector layer range {start}..{end}: layers are 0 or more")
        if files is None:
            buf = (C.c_float * max(len(data or []), 1))(*(data or []))
            _check(_lib.packlm_control_vector_from_data(model._ptr, buf, len(data or []), n_embd, start, end, C.byref(self._ptr)))
        else:
            paths = (C.c_char_p * max(len(files), 1))(*[os.fsencode(p) for p, _ in files])
            scales = (C.c_float * max(len(files), 1))(*[float(x) for _, x in files])
            _check(_lib.packlm_control_vector_open(model._ptr, paths, scales, len(files), start, end, C.byref(self._ptr)))


class AbortFlag(_Handle):
    """A session's abort flag; set() from any thread stops its passes between layers."""

    _free = _lib.packlm_abort_free

    def __init__(self, ptr: C.c_void_p) -> None:
        self._ptr = ptr

    def set(self) -> None:
        _check(_lib.packlm_abort_set(self._ptr))

    def clear(self) -> None:
        _check(_lib.packlm_abort_clear(self._ptr))


class Constraint(_Handle):
    """A grammar over a model's vocabulary (GRAMMAR_JSON_SCHEMA, GRAMMAR_LARK, GRAMMAR_REGEX or
    GRAMMAR_GBNF): masks logits, takes tokens, rolls back; Session.set_constraint makes a session
    follow a copy."""

    _free = _lib.packlm_constraint_free

    def __init__(self, model: Model, kind: int, text: str) -> None:
        self.model = model
        self._ptr = C.c_void_p()
        data = text.encode("utf-8")
        _check(_lib.packlm_constraint_new(model._ptr, kind, data, len(data), C.byref(self._ptr)))

    def mask(self, logits: Sequence[float]) -> array[float]:
        """The logits with -inf for every token that may not come next."""
        buf = (C.c_float * len(logits))(*logits)
        _check(_lib.packlm_constraint_mask(self._ptr, buf, len(buf)))
        return array("f", buf)

    def accept(self, token: int) -> None:
        _check(_lib.packlm_constraint_accept(self._ptr, token))

    def rollback(self, n: int) -> None:
        _check(_lib.packlm_constraint_rollback(self._ptr, n))

    def state(self) -> Tuple[bool, bool]:
        """(finished, can_end): ended; a stop token may come now."""
        finished, can_end = C.c_uint32(), C.c_uint32()
        _check(_lib.packlm_constraint_state(self._ptr, C.byref(finished), C.byref(can_end)))
        return bool(finished.value), bool(can_end.value)

    def forced(self) -> List[int]:
        """The tokens the grammar forces next (none where it has a choice)."""
        n = C.c_size_t()
        buf = (C.c_uint32 * 64)()
        st = _lib.packlm_constraint_forced(self._ptr, buf, len(buf), C.byref(n))
        if st == ERR_BUFFER_TOO_SMALL:
            buf = (C.c_uint32 * n.value)()
            st = _lib.packlm_constraint_forced(self._ptr, buf, len(buf), C.byref(n))
        _check(st)
        return list(buf[: n.value])


class Session(_Handle):
    """One sequence's state (the positions it holds and their KV cache); one thread at a time."""

    _free = _lib.packlm_session_free
    model: Model

    def __init__(self, model: Model, n_ctx: int = 0) -> None:
        self.model = model  # keeps the Python model object alive as long as the session
        self._ptr = C.c_void_p()
        opts = _SessionOptions(size=C.sizeof(_SessionOptions), n_ctx=n_ctx)
        _check(_lib.packlm_session_new(model._ptr, C.byref(opts), C.byref(self._ptr)))

    @property
    def n_past(self) -> int:
        n = C.c_size_t()
        _check(_lib.packlm_session_n_past(self._ptr, C.byref(n)))
        return n.value

    def set_constraint(self, constraint: Optional[Constraint]) -> None:
        """The session's tokens from now on follow a copy of `constraint` (None clears it): every
        logits row it hands back is masked, verify judges drafts under it."""
        _check(_lib.packlm_session_set_constraint(self._ptr, constraint._ptr if constraint is not None else None))

    def set_adapters(self, adapters: Sequence[Tuple[Adapter, float]]) -> None:
        """Applies `adapters`, each (adapter, scale), to the session's passes from now on (an empty
        list: the base model). Allowed on an empty session only (ERR_INVALID_ARGUMENT once it
        holds positions); an adapter of another model handle or a scale that is not finite is
        refused too. The session keeps the adapters alive."""
        handles = (C.c_void_p * max(len(adapters), 1))(*[a._ptr for a, _ in adapters])
        scales = (C.c_float * max(len(adapters), 1))(*[float(x) for _, x in adapters])
        for i, (a, _) in enumerate(adapters):
            if not a._ptr:
                raise PacklmError(ERR_NULL_ARGUMENT, f"packlm_session_set_adapters: adapter {i} is closed")
        _check(_lib.packlm_session_set_adapters(self._ptr, handles, scales, len(adapters)))

    def set_control_vector(self, control: Optional[ControlVector]) -> None:
        """Adds `control` at the end of each layer of its range in the session's passes from now on
        (None: no vector); the adapters stay. Allowed on an empty session only (ERR_INVALID_ARGUMENT
        once it holds positions); a vector of another model handle is refused too. The session
        keeps the vector alive."""
        if control is not None and not control._ptr:
            raise PacklmError(ERR_NULL_ARGUMENT, "packlm_session_set_control_vector: the control vector is closed")
        _check(_lib.packlm_session_set_control_vector(self._ptr, control._ptr if control is not None else None))

    def embed(self, texts: Sequence[Sequence[int]], pooling: Optional[int] = None,
              normalize: Optional[bool] = None) -> List[List[float]]:
        """The vectors of `texts` (each a list of token ids, as tokenize gives them): one per text
        when pooled, one per token of every text in order with POOLING_NONE. `pooling` None is the
        pack's own (POOLING_DEFAULT); `normalize` None is the pack's own (its Normalize module, for
        pooled vectors). All texts run in one pass; a text's vector has the same bits whatever texts
        share the call. The session's adapters apply; its positions are untouched."""
        flat = [t for text in texts for t in text]
        ids = _u32_array(flat)
        lengths = (C.c_size_t * max(len(texts), 1))(*[len(text) for text in texts])
        params = _EmbedParams(size=C.sizeof(_EmbedParams), pooling=POOLING_DEFAULT if pooling is None else pooling,
                              normalize=-1 if normalize is None else int(bool(normalize)))
        rows, dim = C.c_size_t(), C.c_size_t()
        st = _lib.packlm_embed(self._ptr, ids, lengths, len(texts), C.byref(params), None, 0, C.byref(rows), C.byref(dim))
        if st != ERR_BUFFER_TOO_SMALL:
            _check(st)
        out = (C.c_float * (rows.value * dim.value))()
        _check(_lib.packlm_embed(self._ptr, ids, lengths, len(texts), C.byref(params), out, len(out), C.byref(rows), C.byref(dim)))
        d = dim.value
        return [list(out[i * d:(i + 1) * d]) for i in range(rows.value)]

    def fork(self) -> "Session":
        """A new session with this one's exact state; their KV is shared copy-on-write (no copy
        now; each copies at most one page per layer as it steps on)."""
        f = Session.__new__(Session)
        f.model = self.model
        f._ptr = C.c_void_p()
        _check(_lib.packlm_session_fork(self._ptr, C.byref(f._ptr)))
        return f

    @property
    def kv_bytes(self) -> int:
        """KV bytes alive for this session and every session it shares them with through fork."""
        n = C.c_size_t()
        _check(_lib.packlm_session_kv_bytes(self._ptr, C.byref(n)))
        return n.value

    def step(self, token: int) -> array[float]:
        out = (C.c_float * self.model.n_vocab)()
        n = C.c_size_t()
        _check(_lib.packlm_step_into(self._ptr, token, out, len(out), C.byref(n)))
        return array("f", out[: n.value])

    def step_batch(self, tokens: Sequence[int], all_rows: bool = False, want: Optional[int] = None) -> array[float]:
        """Feeds `tokens` in one pass: the last row's logits, or every row's with all_rows (or
        want=WANT_ALL), or none with want=WANT_NONE."""
        want = want if want is not None else (WANT_ALL if all_rows else WANT_LAST)
        ids = _u32_array(tokens)
        rows = {WANT_LAST: 1, WANT_ALL: len(tokens)}.get(want, 0)
        out = (C.c_float * (rows * self.model.n_vocab))()
        n = C.c_size_t()
        _check(_lib.packlm_step_batch_into(self._ptr, ids, len(tokens), want, out if rows else None, len(out), C.byref(n)))
        return array("f", out[: n.value])

    def truncate(self, n: int) -> None:
        _check(_lib.packlm_truncate(self._ptr, n))

    def snapshot(self) -> bytes:
        need = C.c_size_t()
        st = _lib.packlm_snapshot(self._ptr, None, 0, C.byref(need))
        if st != ERR_BUFFER_TOO_SMALL:
            _check(st)
        buf = (C.c_uint8 * need.value)()
        _check(_lib.packlm_snapshot(self._ptr, buf, need.value, C.byref(need)))
        return bytes(buf[: need.value])

    def restore(self, data: bytes) -> None:
        buf = (C.c_uint8 * len(data)).from_buffer_copy(data)
        _check(_lib.packlm_restore(self._ptr, buf, len(data)))

    def abort_flag(self) -> AbortFlag:
        a = C.c_void_p()
        _check(_lib.packlm_session_abort_handle(self._ptr, C.byref(a)))
        return AbortFlag(a)

    def _verify(self, pending: int, draft: Sequence[int], params: Any, want_logits: bool) -> Any:
        d = _u32_array(draft)
        r = _VerifyResult(size=C.sizeof(_VerifyResult))
        logits = (C.c_float * self.model.n_vocab)() if want_logits else None
        if logits is not None:
            r.logits_out, r.logits_capacity = C.cast(logits, C.POINTER(C.c_float)), len(logits)
        _check(_lib.packlm_verify(self._ptr, pending, d, len(draft), C.byref(params), C.byref(r)))
        out = (r.n_accepted, r.next_token)
        return out + (array("f", logits[: r.n_logits]),) if logits is not None else out

    @overload
    def verify_greedy(self, pending: int, draft: Sequence[int], want_logits: Literal[False] = ...) -> Tuple[int, int]: ...
    @overload
    def verify_greedy(self, pending: int, draft: Sequence[int], want_logits: Literal[True]) -> Tuple[int, int, array[float]]: ...

    def verify_greedy(self, pending: int, draft: Sequence[int], want_logits: bool = False) -> Any:
        """One speculative step; returns (n_accepted, next_token[, logits])."""
        p = _VerifyParams(size=C.sizeof(_VerifyParams), mode=VERIFY_GREEDY)
        return self._verify(pending, draft, p, want_logits)

    @overload
    def verify_sampled(self, pending: int, draft: Sequence[int], temperature: float = ..., seed: int = ...,
                       draft_probs: Optional[Sequence[float]] = ..., want_logits: Literal[False] = ...) -> Tuple[int, int]: ...
    @overload
    def verify_sampled(self, pending: int, draft: Sequence[int], temperature: float = ..., seed: int = ...,
                       draft_probs: Optional[Sequence[float]] = ..., *,
                       want_logits: Literal[True]) -> Tuple[int, int, array[float]]: ...

    def verify_sampled(self, pending: int, draft: Sequence[int], temperature: float = 1.0, seed: int = 0,
                       draft_probs: Optional[Sequence[float]] = None, want_logits: bool = False) -> Any:
        """One speculative step with sampled acceptance; `draft_probs` (k x n_vocab floats) or
        None for point-mass drafts. Returns (n_accepted, next_token[, logits])."""
        sp = _SamplerParams(size=C.sizeof(_SamplerParams), temperature=temperature, top_k=0, top_p=1.0,
                            min_p=0.0, repetition_penalty=1.0)
        rng = C.c_uint64(seed)
        p = _VerifyParams(size=C.sizeof(_VerifyParams), mode=VERIFY_SAMPLED, sampler=C.pointer(sp),
                          rng_state=C.pointer(rng))
        if draft_probs is not None:
            probs = (C.c_float * len(draft_probs))(*draft_probs)
            p.draft_probs, p.n_draft_probs = C.cast(probs, C.POINTER(C.c_float)), len(draft_probs)
        return self._verify(pending, draft, p, want_logits)


class VerifyItem:
    """A speculative step as an item of step_sessions: as Session.verify_greedy(pending, draft),
    or with sampled=True as Session.verify_sampled(pending, draft, temperature, seed)."""

    def __init__(self, session: Session, pending: int, draft: Sequence[int], sampled: bool = False,
                 temperature: float = 1.0, seed: int = 0) -> None:
        self.session, self.pending, self.draft = session, pending, list(draft)
        self.sampled, self.temperature, self.seed = sampled, temperature, seed


def step_sessions(items: Sequence[Union[Tuple[Session, Sequence[int], int], VerifyItem]]) -> List[Any]:
    """Runs several sessions of one model in one pass over the weights. A (session, tokens,
    want) item gets the logits Session.step_batch(tokens, want=want) would give that session
    alone, bit for bit; a VerifyItem gets (n_accepted, next_token), as its verify alone would.
    All or nothing: a bad item raises PacklmError naming it ("item 1: ...") and no session
    changes."""
    if not items:
        raise PacklmError(ERR_INVALID_ARGUMENT, "step_sessions: no items given")
    first = items[0]
    model = first.session.model if isinstance(first, VerifyItem) else first[0].model
    arr = (_StepItem * len(items))()
    keep: List[Any] = []  # the buffers and structs each item points to, alive for the call
    for slot, item in zip(arr, items):
        if isinstance(item, VerifyItem):
            ids = _u32_array([item.pending] + item.draft)
            result = _VerifyResult(size=C.sizeof(_VerifyResult))
            if item.sampled:
                sp = _SamplerParams(size=C.sizeof(_SamplerParams), temperature=item.temperature, top_k=0,
                                    top_p=1.0, min_p=0.0, repetition_penalty=1.0)
                rng = C.c_uint64(item.seed)
                params = _VerifyParams(size=C.sizeof(_VerifyParams), mode=VERIFY_SAMPLED, sampler=C.pointer(sp),
                                       rng_state=C.pointer(rng))
                keep.append((ids, result, params, sp, rng))
            else:
                params = _VerifyParams(size=C.sizeof(_VerifyParams), mode=VERIFY_GREEDY)
                keep.append((ids, result, params))
            slot.session, slot.tokens, slot.n_tokens = item.session._ptr, ids, len(item.draft) + 1
            slot.verify, slot.result = C.pointer(params), C.pointer(result)
            continue
        session, tokens, want = item
        ids = _u32_array(tokens)
        rows = {WANT_LAST: 1, WANT_ALL: len(tokens)}.get(want, 0)
        out = (C.c_float * (rows * session.model.n_vocab))()
        keep.append((ids, out))
        slot.session, slot.tokens, slot.n_tokens, slot.want = session._ptr, ids, len(tokens), want
        slot.logits_out = C.cast(out, C.POINTER(C.c_float)) if rows else None
        slot.capacity = len(out)
    _check(_lib.packlm_step_sessions(model._ptr, arr, len(items)))
    done: List[Any] = []
    for slot, item, kept in zip(arr, items, keep):
        if isinstance(item, VerifyItem):
            done.append((kept[1].n_accepted, kept[1].next_token))
        else:
            done.append(array("f", kept[1][: slot.n_logits]))
    return done


class Drafter(_Handle):
    """Proposes draft tokens: Drafter.ngram(max_ngram) or Drafter.model(draft_model, target)."""

    _free = _lib.packlm_drafter_free

    def __init__(self, ptr: C.c_void_p, keep: Tuple[Model, ...] = ()) -> None:
        self._ptr, self._keep = ptr, keep

    @classmethod
    def ngram(cls, max_ngram: int = 5) -> Drafter:
        d = C.c_void_p()
        _check(_lib.packlm_drafter_new_ngram(max_ngram, C.byref(d)))
        return cls(d)

    @classmethod
    def model(cls, draft_model: Model, target: Model) -> Drafter:
        d = C.c_void_p()
        _check(_lib.packlm_drafter_new_model(draft_model._ptr, target._ptr, C.byref(d)))
        return cls(d, (draft_model, target))

    def propose(self, session: Session, pending: int, k: int) -> List[int]:
        out = (C.c_uint32 * max(k, 1))()
        n = C.c_size_t()
        _check(_lib.packlm_drafter_propose(self._ptr, session._ptr, pending, k, out, C.byref(n)))
        return list(out[: n.value])


class Detokenizer(_Handle):
    """Streaming text: feed() returns only complete UTF-8; everything fed plus flush() equals
    Model.detokenize of the same tokens."""

    _free = _lib.packlm_detokenizer_free
    model: Model

    def __init__(self, model: Model, skip_special: bool = False) -> None:
        self.model = model
        self._ptr = C.c_void_p()
        _check(_lib.packlm_detokenizer_new(model._ptr, DETOKENIZE_SKIP_SPECIAL if skip_special else 0, C.byref(self._ptr)))

    def feed(self, token: int) -> str:
        return _text_call(lambda b, c, n: _lib.packlm_detokenizer_feed(self._ptr, token, b, c, n))

    def flush(self) -> str:
        return _text_call(lambda b, c, n: _lib.packlm_detokenizer_flush(self._ptr, b, c, n))


class PrefixCache(_Handle):
    """Session states keyed by their token prefix, up to `capacity_bytes`."""

    _free = _lib.packlm_prefix_cache_free

    def __init__(self, capacity_bytes: int) -> None:
        self._ptr = C.c_void_p()
        _check(_lib.packlm_prefix_cache_new(capacity_bytes, C.byref(self._ptr)))

    def store(self, session: Session) -> None:
        _check(_lib.packlm_prefix_cache_store(self._ptr, session._ptr))

    def restore(self, session: Session, tokens: Sequence[int]) -> int:
        """Restores the longest stored prefix of `tokens`; returns how many tokens it holds."""
        ids = _u32_array(tokens)
        n = C.c_size_t()
        _check(_lib.packlm_prefix_cache_restore(self._ptr, session._ptr, ids, len(tokens), C.byref(n)))
        return n.value


__version__: str = version()

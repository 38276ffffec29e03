"""Python bindings for packlm over its C ABI (ctypes, no build step).

    from packlm import Model
    m = Model("models/SmolLM2-135M-Instruct.Q4_1.gguf")
    s = m.session()
    logits = s.step_batch(m.tokenize("The capital of France is"))
    ...

The library is found through PACKLM_LIB, else target/release/libpacklm.so beside this checkout.
Every failing call raises PacklmError with the status and packlm_last_error()'s message.
A Model may be shared by threads; a Session is used by one thread at a time.
"""

import ctypes as C
import os
from array import array

_here = os.path.dirname(os.path.abspath(__file__))
_default = os.path.join(_here, "..", "..", "target", "release", "libpacklm.so")
_lib = C.CDLL(os.environ.get("PACKLM_LIB", _default))

OK, ERR_BUFFER_TOO_SMALL = 0, 9
TOKENIZE_ADD_SPECIAL, TOKENIZE_PARSE_SPECIAL = 1, 2
WANT_LAST, WANT_ALL, WANT_NONE = 0, 1, 2
VERIFY_GREEDY, VERIFY_SAMPLED = 0, 1


class PacklmError(Exception):
    def __init__(self, status, message):
        super().__init__(f"{message} (status {status})")
        self.status = status


class _Info(C.Structure):
    _fields_ = [("size", C.c_size_t), ("n_vocab", C.c_uint32), ("n_layers", C.c_uint32),
                ("n_ctx", C.c_uint32), ("hidden_size", C.c_uint32), ("bos", C.c_int32),
                ("eos", C.c_int32), ("n_stop", C.c_uint32), ("add_bos", C.c_uint32),
                ("has_chat_template", C.c_uint32)]


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


_lib.packlm_last_error.restype = C.c_char_p
_lib.packlm_abi_version.restype = C.c_uint32
ABI_VERSION = 2
if _lib.packlm_abi_version() != ABI_VERSION:
    raise ImportError(f"packlm.py speaks ABI {ABI_VERSION}, the library ABI {_lib.packlm_abi_version()}")
_size_p = C.POINTER(C.c_size_t)
_lib.packlm_step_into.argtypes = [C.c_void_p, C.c_uint32, C.POINTER(C.c_float), C.c_size_t, _size_p]
_lib.packlm_step_batch_into.argtypes = [C.c_void_p, C.POINTER(C.c_uint32), C.c_size_t, C.c_uint32,
                                        C.POINTER(C.c_float), C.c_size_t, _size_p]
_lib.packlm_version.restype = C.c_char_p


def _check(status):
    if status != OK:
        raise PacklmError(status, _lib.packlm_last_error().decode("utf-8", "replace"))


def version():
    return _lib.packlm_version().decode()


class Model:
    def __init__(self, path):
        self._ptr = C.c_void_p()
        _check(_lib.packlm_model_open(os.fsencode(path), None, C.byref(self._ptr)))
        info = _Info(size=C.sizeof(_Info))
        _check(_lib.packlm_model_info(self._ptr, C.byref(info)))
        self.n_vocab, self.n_layers, self.n_ctx = info.n_vocab, info.n_layers, info.n_ctx
        self.bos = None if info.bos < 0 else info.bos

    def __del__(self):
        if getattr(self, "_ptr", None):
            _lib.packlm_model_free(self._ptr)
            self._ptr = None

    def tokenize(self, text, add_special=True, parse_special=False):
        raw = text.encode("utf-8")
        flags = (TOKENIZE_ADD_SPECIAL if add_special else 0) | (TOKENIZE_PARSE_SPECIAL if parse_special else 0)
        n = C.c_size_t()
        st = _lib.packlm_tokenize(self._ptr, raw, len(raw), flags, None, 0, C.byref(n))
        if st not in (OK, ERR_BUFFER_TOO_SMALL):
            _check(st)
        buf = (C.c_uint32 * max(n.value, 1))()
        _check(_lib.packlm_tokenize(self._ptr, raw, len(raw), flags, buf, len(buf), C.byref(n)))
        return list(buf[: n.value])

    def set_max_tokenize_bytes(self, max_bytes):
        """Longest text (UTF-8 bytes) tokenize accepts on this model; 0 restores the default."""
        _check(_lib.packlm_model_set_max_tokenize_bytes(self._ptr, C.c_size_t(max_bytes)))

    def detokenize(self, tokens, skip_special=False):
        ids = (C.c_uint32 * len(tokens))(*tokens)
        n = C.c_size_t()
        st = _lib.packlm_detokenize(self._ptr, ids, len(tokens), int(skip_special), None, 0, C.byref(n))
        if st != ERR_BUFFER_TOO_SMALL:
            _check(st)
        buf = C.create_string_buffer(n.value)
        _check(_lib.packlm_detokenize(self._ptr, ids, len(tokens), int(skip_special), buf, n.value, C.byref(n)))
        return buf.raw[: n.value].decode("utf-8")

    def session(self):
        return Session(self)


class Session:
    def __init__(self, model):
        self.model = model  # keeps the model alive as long as the session
        self._ptr = C.c_void_p()
        _check(_lib.packlm_session_new(model._ptr, None, C.byref(self._ptr)))

    def __del__(self):
        if getattr(self, "_ptr", None):
            _lib.packlm_session_free(self._ptr)
            self._ptr = None

    @property
    def n_past(self):
        n = C.c_size_t()
        _check(_lib.packlm_session_n_past(self._ptr, C.byref(n)))
        return n.value

    def step(self, token):
        out = (C.c_float * self.model.n_vocab)()
        n = C.c_size_t()
        _check(_lib.packlm_step_into(self._ptr, token, out, len(out), C.byref(n)))
        return array("f", out[: n.value])

    def step_batch(self, tokens, all_rows=False):
        ids = (C.c_uint32 * len(tokens))(*tokens)
        rows = len(tokens) if all_rows else 1
        out = (C.c_float * (rows * self.model.n_vocab))()
        n = C.c_size_t()
        _check(_lib.packlm_step_batch_into(self._ptr, ids, len(tokens), WANT_ALL if all_rows else WANT_LAST,
                                           out, len(out), C.byref(n)))
        return array("f", out[: n.value])

    def truncate(self, n):
        _check(_lib.packlm_truncate(self._ptr, C.c_size_t(n)))

    def snapshot(self):
        need = C.c_size_t()
        st = _lib.packlm_snapshot(self._ptr, None, 0, C.byref(need))
        if st != ERR_BUFFER_TOO_SMALL:
            _check(st)
        buf = (C.c_uint8 * need.value)()
        _check(_lib.packlm_snapshot(self._ptr, buf, need.value, C.byref(need)))
        return bytes(buf)

    def restore(self, data):
        buf = (C.c_uint8 * len(data)).from_buffer_copy(data)
        _check(_lib.packlm_restore(self._ptr, buf, len(data)))

    def verify_greedy(self, pending, draft):
        """One speculative step; returns (n_accepted, next_token)."""
        d = (C.c_uint32 * len(draft))(*draft)
        p = _VerifyParams(size=C.sizeof(_VerifyParams), mode=VERIFY_GREEDY)
        r = _VerifyResult(size=C.sizeof(_VerifyResult))  # logits_out NULL: no logits wanted
        _check(_lib.packlm_verify(self._ptr, pending, d, len(draft), C.byref(p), C.byref(r)))
        return r.n_accepted, r.next_token

    def verify_sampled(self, pending, draft, temperature=1.0, seed=0):
        """One speculative step with sampled acceptance (each draft a point mass); returns
        (n_accepted, next_token)."""
        d = (C.c_uint32 * len(draft))(*draft)
        sp = _SamplerParams(size=C.sizeof(_SamplerParams), temperature=temperature, top_k=0, top_p=1.0,
                            min_p=0.0, repetition_penalty=1.0)
        rng = C.c_uint64(seed)
        p = _VerifyParams(size=C.sizeof(_VerifyParams), mode=VERIFY_SAMPLED, sampler=C.pointer(sp),
                          rng_state=C.pointer(rng))
        r = _VerifyResult(size=C.sizeof(_VerifyResult))
        _check(_lib.packlm_verify(self._ptr, pending, d, len(draft), C.byref(p), C.byref(r)))
        return r.n_accepted, r.next_token

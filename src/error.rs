//! The one error type inside the library. Every failure carries a [`Status`] (the number the C
//! caller sees) and a message that names the file, key or value that was wrong.

use std::fmt;

/// The status every C call returns: a fixed-width number (never an enum of
/// implementation-defined size). The numbers never change; a retired value stays here as a
/// comment so that it is never reused. `packlm_status_str` gives its text.
#[allow(non_camel_case_types)]
pub type packlm_status = u32;

/// Success.
pub const PACKLM_OK: packlm_status = 0;
/// A pointer argument that must not be NULL was NULL.
pub const PACKLM_ERR_NULL_ARGUMENT: packlm_status = 1;
/// An argument is outside its allowed range (a count, a flag, an options size).
pub const PACKLM_ERR_INVALID_ARGUMENT: packlm_status = 2;
/// A file or folder could not be read (missing, permissions, I/O).
pub const PACKLM_ERR_IO: packlm_status = 3;
/// A file is malformed: JSON that does not parse, a truncated or hostile header.
pub const PACKLM_ERR_FORMAT: packlm_status = 4;
/// The pack asks for something this library does not implement (architecture, rope type,
/// tensor type, config value that changes the math).
pub const PACKLM_ERR_UNSUPPORTED: packlm_status = 5;
/// A tensor is missing or has the wrong shape or type.
pub const PACKLM_ERR_TENSOR: packlm_status = 6;
/// A token id is outside the vocabulary.
pub const PACKLM_ERR_TOKEN_OUT_OF_RANGE: packlm_status = 7;
/// The session would pass the model's context length.
pub const PACKLM_ERR_CONTEXT_OVERFLOW: packlm_status = 8;
/// The caller's buffer is too small; the needed size was written to the size out-parameter.
pub const PACKLM_ERR_BUFFER_TOO_SMALL: packlm_status = 9;
/// The tokenizer or chat template failed.
pub const PACKLM_ERR_TOKENIZER: packlm_status = 10;
/// The requested backend is not available on this machine.
pub const PACKLM_ERR_BACKEND_UNAVAILABLE: packlm_status = 11;
/// A long pass was cancelled through the abort flag.
pub const PACKLM_ERR_ABORTED: packlm_status = 12;
/// A snapshot is malformed, from another model, or of another format version.
pub const PACKLM_ERR_SNAPSHOT: packlm_status = 13;
/// Text is not valid UTF-8.
pub const PACKLM_ERR_UTF8: packlm_status = 14;
/// A Rust panic was caught at the C boundary (a bug in packlm; the object is unchanged).
pub const PACKLM_ERR_PANIC: packlm_status = 15;
/// The session is in use by another call on another thread (sessions are one thread at a
/// time); nothing was done.
pub const PACKLM_ERR_SESSION_BUSY: packlm_status = 16;
/// A stated limit was reached (input length, template fuel or output size, thread count,
/// draft length); the message names the limit and its value.
pub const PACKLM_ERR_LIMIT_EXCEEDED: packlm_status = 17;
/// An earlier call failed inside a pass in a way that could not be rolled back; the session
/// refuses every call but free.
pub const PACKLM_ERR_SESSION_POISONED: packlm_status = 18;
/// The requested precision is not offered by this backend or for this pack.
pub const PACKLM_ERR_UNSUPPORTED_PRECISION: packlm_status = 19;
/// An allocation sized from input could not be made.
pub const PACKLM_ERR_OUT_OF_MEMORY: packlm_status = 20;
/// A pass computed a logit that is not finite (NaN, +inf or -inf). Every logit a pass hands
/// back (packlm_step, packlm_step_batch and their _into forms, the logits packlm_verify
/// returns) and every row packlm_verify judges is checked, one pass over n_vocab floats per row;
/// the first value that is not finite fails the call with this status, and the message names
/// the position, the logit and the first layer whose output was not finite (found by running
/// the pass again): the pack's weights hold NaN or infinity, or a value overflowed f32. The
/// session is as it was before the call. No logit that is not finite is taken for a
/// legitimate one: a forward of finite weights gives none (a final softcap bounds them, and -inf
/// is a mask a caller applies to logits, never a model's output). Weights are not scanned at
/// open, and a pass that hands back no logits (PACKLM_WANT_NONE) is not checked: the next pass
/// that does reports the fault.
pub const PACKLM_ERR_NON_FINITE: packlm_status = 21;

/// The status as a Rust enum (the same numbers, taken from the constants above). It is
/// `#[repr(u32)]`, so an extern function returning it returns a `packlm_status`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    Ok = PACKLM_OK,
    ErrNullArgument = PACKLM_ERR_NULL_ARGUMENT,
    ErrInvalidArgument = PACKLM_ERR_INVALID_ARGUMENT,
    ErrIo = PACKLM_ERR_IO,
    ErrFormat = PACKLM_ERR_FORMAT,
    ErrUnsupported = PACKLM_ERR_UNSUPPORTED,
    ErrTensor = PACKLM_ERR_TENSOR,
    ErrTokenOutOfRange = PACKLM_ERR_TOKEN_OUT_OF_RANGE,
    ErrContextOverflow = PACKLM_ERR_CONTEXT_OVERFLOW,
    ErrBufferTooSmall = PACKLM_ERR_BUFFER_TOO_SMALL,
    ErrTokenizer = PACKLM_ERR_TOKENIZER,
    ErrBackendUnavailable = PACKLM_ERR_BACKEND_UNAVAILABLE,
    ErrAborted = PACKLM_ERR_ABORTED,
    ErrSnapshot = PACKLM_ERR_SNAPSHOT,
    ErrUtf8 = PACKLM_ERR_UTF8,
    ErrPanic = PACKLM_ERR_PANIC,
    ErrSessionBusy = PACKLM_ERR_SESSION_BUSY,
    ErrLimitExceeded = PACKLM_ERR_LIMIT_EXCEEDED,
    ErrSessionPoisoned = PACKLM_ERR_SESSION_POISONED,
    ErrUnsupportedPrecision = PACKLM_ERR_UNSUPPORTED_PRECISION,
    ErrOutOfMemory = PACKLM_ERR_OUT_OF_MEMORY,
    ErrNonFinite = PACKLM_ERR_NON_FINITE,
}

impl Status {
    /// The status with this number, if any.
    pub fn from_code(code: i32) -> Option<Status> {
        const ALL: [Status; 22] = [
            Status::Ok, Status::ErrNullArgument, Status::ErrInvalidArgument, Status::ErrIo,
            Status::ErrFormat, Status::ErrUnsupported, Status::ErrTensor, Status::ErrTokenOutOfRange,
            Status::ErrContextOverflow, Status::ErrBufferTooSmall, Status::ErrTokenizer,
            Status::ErrBackendUnavailable, Status::ErrAborted, Status::ErrSnapshot, Status::ErrUtf8,
            Status::ErrPanic, Status::ErrSessionBusy, Status::ErrLimitExceeded, Status::ErrSessionPoisoned,
            Status::ErrUnsupportedPrecision, Status::ErrOutOfMemory, Status::ErrNonFinite,
        ];
        ALL.iter().copied().find(|s| *s as i32 == code)
    }

    /// Short fixed text of each status, for `packlm_status_str`. NUL-terminated.
    pub fn text(self) -> &'static str {
        match self {
            Status::Ok => "ok\0",
            Status::ErrNullArgument => "null argument\0",
            Status::ErrInvalidArgument => "invalid argument\0",
            Status::ErrIo => "i/o error\0",
            Status::ErrFormat => "malformed file\0",
            Status::ErrUnsupported => "unsupported\0",
            Status::ErrTensor => "missing or mis-shaped tensor\0",
            Status::ErrTokenOutOfRange => "token id out of range\0",
            Status::ErrContextOverflow => "context overflow\0",
            Status::ErrBufferTooSmall => "buffer too small\0",
            Status::ErrTokenizer => "tokenizer error\0",
            Status::ErrBackendUnavailable => "backend unavailable\0",
            Status::ErrAborted => "aborted\0",
            Status::ErrSnapshot => "bad snapshot\0",
            Status::ErrUtf8 => "invalid utf-8\0",
            Status::ErrPanic => "internal panic\0",
            Status::ErrSessionBusy => "session busy\0",
            Status::ErrLimitExceeded => "limit exceeded\0",
            Status::ErrSessionPoisoned => "session poisoned\0",
            Status::ErrUnsupportedPrecision => "unsupported precision\0",
            Status::ErrOutOfMemory => "out of memory\0",
            Status::ErrNonFinite => "non-finite value\0",
        }
    }
}

/// A failure: which kind, and a message naming what was wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub status: Status,
    pub message: String,
}

impl Error {
    pub fn new(status: Status, message: impl Into<String>) -> Self {
        Error { status, message: message.into() }
    }
    pub fn io(path: &std::path::Path, err: std::io::Error) -> Self {
        Error::new(Status::ErrIo, format!("{}: {}", path.display(), err))
    }
    pub fn format(message: impl Into<String>) -> Self {
        Error::new(Status::ErrFormat, message)
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Error::new(Status::ErrUnsupported, message)
    }
    pub fn tensor(message: impl Into<String>) -> Self {
        Error::new(Status::ErrTensor, message)
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::new(Status::ErrInvalidArgument, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status.text().trim_end_matches('\0'), self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

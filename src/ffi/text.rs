//! Tokenizer and chat-template calls on a `packlm_model` (safe from any thread).

use std::ffi::c_char;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::error::{Error, Status};
use crate::ffi::guard::{ffi_boundary, try_cstr, try_mut, try_ref, try_slice, try_text, write_items, write_text};
use crate::ffi::model::packlm_model;
use crate::ChatMessage;

/// The longest text packlm_tokenize accepts by default, in bytes (1 MiB: about 250k tokens of
/// English, more than any context this library runs). Change it per model handle with
/// packlm_model_set_max_tokenize_bytes.
pub const PACKLM_DEFAULT_MAX_TOKENIZE_BYTES: usize = 1 << 20;
const _: () = assert!(PACKLM_DEFAULT_MAX_TOKENIZE_BYTES == crate::DEFAULT_MAX_TOKENIZE_BYTES);

/// One text's tokens, kept from a size query (cap too small) for the fill call that follows.
struct KeptTokens {
    flags: u32,
    text: Box<[u8]>,
    ids: Vec<u32>,
}

/// Per model handle: the last size query's result (the limit is the `Model` handle's own). The
/// lock guards only taking and storing the kept result; tokenizing runs outside it.
pub(crate) struct TokenizeState {
    kept: Mutex<Option<KeptTokens>>,
    /// Tokenizer passes run by packlm_tokenize (for tests: a size query and its fill make one).
    passes: AtomicU64,
}

impl Default for TokenizeState {
    fn default() -> Self {
        TokenizeState { kept: Mutex::new(None), passes: AtomicU64::new(0) }
    }
}

impl TokenizeState {
    /// The kept ids of `text` under `flags`, if the last size query was for them (taken out).
    fn take(&self, text: &[u8], flags: u32) -> Option<Vec<u32>> {
        let mut kept = self.kept.lock();
        match kept.as_ref() {
            Some(k) if k.flags == flags && &*k.text == text => kept.take().map(|k| k.ids),
            _ => None,
        }
    }

    fn keep(&self, text: &[u8], flags: u32, ids: Vec<u32>) {
        let k = KeptTokens { flags, text: text.into(), ids };
        // The old entry is dropped after the lock is released.
        let old = self.kept.lock().replace(k);
        drop(old);
    }
}

/// Tokenizer passes run by packlm_tokenize on this handle. Not in the header: for tests.
#[doc(hidden)]
pub fn tokenize_passes(model: &packlm_model) -> u64 {
    model.tokenize.passes.load(Ordering::Relaxed)
}

/// Sets the longest text (in bytes) packlm_tokenize accepts on this model handle; longer text
/// gives PACKLM_ERR_LIMIT_EXCEEDED. 0 restores PACKLM_DEFAULT_MAX_TOKENIZE_BYTES. Safe from any
/// thread; calls already running keep the limit they started with.
#[no_mangle]
pub unsafe extern "C" fn packlm_model_set_max_tokenize_bytes(model: *const packlm_model, max_bytes: usize) -> Status {
    ffi_boundary!("packlm_model_set_max_tokenize_bytes", {
        let m = try_ref(model, "model")?;
        m.inner.set_max_tokenize_bytes(max_bytes);
        Ok(())
    })
}

/// Tokenize flag: prepend BOS when the pack adds one (never a second one).
pub const PACKLM_TOKENIZE_ADD_SPECIAL: u32 = 1;
/// Tokenize flag: text such as "<|im_start|>" becomes its special token.
pub const PACKLM_TOKENIZE_PARSE_SPECIAL: u32 = 2;
/// Detokenize flag: leave special tokens out of the text.
pub const PACKLM_DETOKENIZE_SKIP_SPECIAL: u32 = 1;

/// Tokenizes `len` bytes of UTF-8 `text` (need not be NUL-terminated) with `flags`
/// (PACKLM_TOKENIZE_*). Ids go to `tokens` (capacity `cap`), their count to `*n`; when `cap` is
/// too small, `*n` receives the count needed and PACKLM_ERR_BUFFER_TOO_SMALL is returned.
/// The ids of such a size query are kept by the model handle (one text at a time), so the call
/// that follows with the same text and flags and a large enough buffer copies them instead of
/// tokenizing again. Text longer than the handle's limit (PACKLM_DEFAULT_MAX_TOKENIZE_BYTES
/// unless changed by packlm_model_set_max_tokenize_bytes) gives PACKLM_ERR_LIMIT_EXCEEDED.
/// Memory: tokenizing N bytes peaks at up to about 300 x N bytes (README, "Limits").
#[no_mangle]
pub unsafe extern "C" fn packlm_tokenize(model: *const packlm_model, text: *const c_char, len: usize, flags: u32, tokens: *mut u32, cap: usize, n: *mut usize) -> Status {
    ffi_boundary!("packlm_tokenize", {
        let handle = try_ref(model, "model")?;
        try_mut(n, "n_out")?;
        if flags & !(PACKLM_TOKENIZE_ADD_SPECIAL | PACKLM_TOKENIZE_PARSE_SPECIAL) != 0 {
            return Err(Error::invalid(format!("unknown tokenize flags {flags:#x}")));
        }
        let max = handle.inner.max_tokenize_bytes();
        if len > max {
            return Err(Error::new(
                Status::ErrLimitExceeded,
                format!("text of {len} bytes is over this model's tokenize limit of {max} bytes (packlm_model_set_max_tokenize_bytes)"),
            ));
        }
        let text = try_text(text, len, "text")?;
        let ids = match handle.tokenize.take(text.as_bytes(), flags) {
            Some(ids) => ids,
            None => {
                handle.tokenize.passes.fetch_add(1, Ordering::Relaxed);
                handle.inner.tokenize(text, flags & PACKLM_TOKENIZE_ADD_SPECIAL != 0, flags & PACKLM_TOKENIZE_PARSE_SPECIAL != 0)?
            }
        };
        if cap < ids.len() {
            let need = ids.len();
            handle.tokenize.keep(text.as_bytes(), flags, ids);
            *try_mut(n, "n_out")? = need;
            return Err(Error::new(Status::ErrBufferTooSmall, format!("needs {need} entries, buffer has {cap}")));
        }
        write_items(&ids, tokens, cap, n)
    })
}

/// Text of `n_tokens` ids, NUL-terminated, into `buf` (capacity `cap`); `*n` receives its byte
/// length, or the capacity needed (length + 1) with PACKLM_ERR_BUFFER_TOO_SMALL.
/// `flags`: PACKLM_DETOKENIZE_SKIP_SPECIAL (another bit gives PACKLM_ERR_INVALID_ARGUMENT). An
/// id outside the vocabulary gives PACKLM_ERR_TOKEN_OUT_OF_RANGE.
#[no_mangle]
pub unsafe extern "C" fn packlm_detokenize(model: *const packlm_model, tokens: *const u32, n_tokens: usize, flags: u32, buf: *mut c_char, cap: usize, n: *mut usize) -> Status {
    ffi_boundary!("packlm_detokenize", {
        let m = &try_ref(model, "model")?.inner;
        let ids = try_slice(tokens, n_tokens, "tokens")?;
        // Unknown bits are refused, so that a flag added later is never silently ignored.
        if flags & !PACKLM_DETOKENIZE_SKIP_SPECIAL != 0 {
            return Err(Error::invalid(format!("unknown detokenize flags {flags:#x}")));
        }
        let text = m.detokenize(ids, flags & PACKLM_DETOKENIZE_SKIP_SPECIAL != 0)?;
        write_text(&text, buf, cap, n)
    })
}

/// The text of one token, NUL-terminated, sizes as packlm_detokenize. (A byte-fallback token
/// that is part of a longer UTF-8 sequence decodes to U+FFFD alone: detokenize whole runs.)
#[no_mangle]
pub unsafe extern "C" fn packlm_token_to_piece(model: *const packlm_model, token: u32, buf: *mut c_char, cap: usize, n: *mut usize) -> Status {
    ffi_boundary!("packlm_token_to_piece", {
        let m = &try_ref(model, "model")?.inner;
        let piece = m.token_to_piece(token)?;
        write_text(&piece, buf, cap, n)
    })
}

/// One chat message: NUL-terminated UTF-8 role ("system", "user", "assistant") and content.
#[repr(C)]
pub struct packlm_chat_message {
    pub role: *const c_char,
    pub content: *const c_char,
}

/// Renders the pack's chat template over `n_messages` messages; with `add_generation_prompt`
/// non-zero the assistant turn is opened. Output as packlm_detokenize. A pack without a
/// template gives PACKLM_ERR_UNSUPPORTED. The render runs within limits that grow with the
/// messages (fuel, an output cap of 1 MiB + 4 x the messages' text, and an allocation budget
/// of 8 x that cap, so its memory stays under twice the budget plus a few MiB): a template
/// that passes one gives PACKLM_ERR_LIMIT_EXCEEDED with a message naming the step and the
/// limit; one that nests values past 64 levels too, and one that stores a namespace inside a
/// value, keeps a loop past its end or turns on autoescape gives PACKLM_ERR_UNSUPPORTED.
#[no_mangle]
pub unsafe extern "C" fn packlm_chat_apply(model: *const packlm_model, messages: *const packlm_chat_message, n_messages: usize, add_generation_prompt: i32, buf: *mut c_char, cap: usize, n: *mut usize) -> Status {
    ffi_boundary!("packlm_chat_apply", {
        let m = &try_ref(model, "model")?.inner;
        let msgs = try_slice(messages, n_messages, "messages")?;
        let msgs = msgs
            .iter()
            .enumerate()
            .map(|(i, msg)| {
                Ok(ChatMessage {
                    role: try_cstr(msg.role, &format!("messages[{i}].role"))?.to_string(),
                    content: try_cstr(msg.content, &format!("messages[{i}].content"))?.to_string(),
                })
            })
            .collect::<crate::Result<Vec<_>>>()?;
        let text = m.chat_apply(&msgs, add_generation_prompt != 0)?;
        write_text(&text, buf, cap, n)
    })
}

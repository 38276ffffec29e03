//! Tokenizer and chat-template calls on a `packlm_model` (read-only: safe from any thread).

use std::ffi::c_char;

use crate::error::{Error, Status};
use crate::ffi::guard::{ffi_boundary, try_cstr, try_ref, try_slice, try_text, write_items, write_text};
use crate::ffi::model::packlm_model;
use crate::pack::chat::Message;

/// Tokenize flag: prepend BOS when the pack adds one (never a second one).
pub const PACKLM_TOKENIZE_ADD_SPECIAL: u32 = 1;
/// Tokenize flag: text such as "<|im_start|>" becomes its special token.
pub const PACKLM_TOKENIZE_PARSE_SPECIAL: u32 = 2;
/// Detokenize flag: leave special tokens out of the text.
pub const PACKLM_DETOKENIZE_SKIP_SPECIAL: u32 = 1;

/// Tokenizes `len` bytes of UTF-8 `text` (need not be NUL-terminated) with `flags`
/// (PACKLM_TOKENIZE_*). Ids go to `tokens` (capacity `cap`), their count to `*n`; when `cap` is
/// too small, `*n` receives the count needed and PACKLM_ERR_BUFFER_TOO_SMALL is returned.
#[no_mangle]
pub extern "C" fn packlm_tokenize(model: *const packlm_model, text: *const c_char, len: usize, flags: u32, tokens: *mut u32, cap: usize, n: *mut usize) -> Status {
    ffi_boundary!("packlm_tokenize", {
        let m = &try_ref(model, "model")?.inner;
        let text = try_text(text, len, "text")?;
        if flags & !(PACKLM_TOKENIZE_ADD_SPECIAL | PACKLM_TOKENIZE_PARSE_SPECIAL) != 0 {
            return Err(Error::invalid(format!("unknown tokenize flags {flags:#x}")));
        }
        let ids = m.vocab().encode(text, flags & PACKLM_TOKENIZE_ADD_SPECIAL != 0, flags & PACKLM_TOKENIZE_PARSE_SPECIAL != 0)?;
        write_items(&ids, tokens, cap, n)
    })
}

/// Text of `n_tokens` ids, NUL-terminated, into `buf` (capacity `cap`); `*n` receives its byte
/// length, or the capacity needed (length + 1) with PACKLM_ERR_BUFFER_TOO_SMALL.
/// `flags`: PACKLM_DETOKENIZE_SKIP_SPECIAL. An id outside the vocabulary gives
/// PACKLM_ERR_TOKEN_OUT_OF_RANGE.
#[no_mangle]
pub extern "C" fn packlm_detokenize(model: *const packlm_model, tokens: *const u32, n_tokens: usize, flags: u32, buf: *mut c_char, cap: usize, n: *mut usize) -> Status {
    ffi_boundary!("packlm_detokenize", {
        let m = &try_ref(model, "model")?.inner;
        let ids = try_slice(tokens, n_tokens, "tokens")?;
        let text = m.vocab().decode(ids, flags & PACKLM_DETOKENIZE_SKIP_SPECIAL != 0)?;
        write_text(&text, buf, cap, n)
    })
}

/// The text of one token, NUL-terminated, sizes as packlm_detokenize. (A byte-fallback token
/// that is part of a longer UTF-8 sequence decodes to U+FFFD alone: detokenize whole runs.)
#[no_mangle]
pub extern "C" fn packlm_token_to_piece(model: *const packlm_model, token: u32, buf: *mut c_char, cap: usize, n: *mut usize) -> Status {
    ffi_boundary!("packlm_token_to_piece", {
        let m = &try_ref(model, "model")?.inner;
        let piece = m.vocab().token_to_piece(token)?;
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
/// template gives PACKLM_ERR_UNSUPPORTED.
#[no_mangle]
pub extern "C" fn packlm_chat_apply(model: *const packlm_model, messages: *const packlm_chat_message, n_messages: usize, add_generation_prompt: i32, buf: *mut c_char, cap: usize, n: *mut usize) -> Status {
    ffi_boundary!("packlm_chat_apply", {
        let m = &try_ref(model, "model")?.inner;
        let msgs = try_slice(messages, n_messages, "messages")?;
        let msgs = msgs
            .iter()
            .enumerate()
            .map(|(i, msg)| {
                Ok(Message {
                    role: try_cstr(msg.role, &format!("messages[{i}].role"))?.to_string(),
                    content: try_cstr(msg.content, &format!("messages[{i}].content"))?.to_string(),
                })
            })
            .collect::<crate::Result<Vec<_>>>()?;
        let text = m.render_chat(&msgs, add_generation_prompt != 0)?;
        write_text(&text, buf, cap, n)
    })
}

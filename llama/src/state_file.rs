//! State files: `llama_state_save_file` / `llama_state_load_file` (and their deprecated names
//! `llama_save_session_file` / `llama_load_session_file`), `llama_state_seq_save_file` /
//! `llama_state_seq_load_file`.
//!
//! The layout is llama.cpp's up to the state: the magic ('ggsn' for a context, 'ggsq' for a
//! sequence) and version of llama.h (10 and 3), little-endian u32 each, the token count (u32),
//! the tokens (i32 each); then the state bytes, which are this library's own
//! (`llama_state_get_data` / `llama_state_seq_get_data`: packlm's checksummed snapshot), not
//! llama.cpp's tensor dump. A file llama.cpp wrote has the same header but a state these
//! calls refuse (its bytes fail the state's format and checksum checks), and llama.cpp refuses
//! this library's: a program that keeps its session files and changes library starts afresh,
//! as it must, since the two caches are not the same numbers. Failures are logged and leave
//! the context as it was: false / 0.

use std::ffi::{c_char, CStr};
use std::io::Write;

use crate::abi::{SeqId, Token};
use crate::context::{llama_state_get_data, llama_state_get_size, llama_state_seq_get_data, llama_state_seq_get_size, llama_state_seq_set_data, llama_state_set_data, LlamaContext};
use crate::log::{error, guard};

/// llama.h's LLAMA_SESSION_MAGIC ('ggsn') and LLAMA_SESSION_VERSION.
const SESSION_MAGIC: u32 = 0x6767_736e;
const SESSION_VERSION: u32 = 10;
/// llama.h's LLAMA_STATE_SEQ_MAGIC ('ggsq') and LLAMA_STATE_SEQ_VERSION.
const SEQ_MAGIC: u32 = 0x6767_7371;
const SEQ_VERSION: u32 = 3;

unsafe fn path_of<'a>(f: &str, p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        error(f, "the path is NULL");
        return None;
    }
    match CStr::from_ptr(p).to_str() {
        Ok(s) => Some(s),
        Err(_) => {
            error(f, "the path is not UTF-8");
            None
        }
    }
}

/// Header and tokens, then `state`, written to `path`; the bytes written.
unsafe fn write(f: &str, path: &str, magic: u32, version: u32, tokens: *const Token, n: usize, state: &[u8]) -> Option<usize> {
    if n > 0 && tokens.is_null() {
        error(f, &format!("tokens is NULL with n_token_count {n}"));
        return None;
    }
    let Ok(n32) = u32::try_from(n) else {
        error(f, &format!("n_token_count {n} does not fit the file's u32"));
        return None;
    };
    let mut bytes = Vec::with_capacity(12 + 4 * n + state.len());
    for v in [magic, version, n32] {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    for i in 0..n {
        bytes.extend_from_slice(&(*tokens.add(i)).to_le_bytes());
    }
    bytes.extend_from_slice(state);
    let written = std::fs::File::create(path).and_then(|mut file| file.write_all(&bytes).and_then(|()| file.sync_all()));
    match written {
        Ok(()) => Some(bytes.len()),
        Err(e) => {
            error(f, &format!("{path}: {e}"));
            None
        }
    }
}

/// The file at `path` checked against `magic` / `version`: its tokens and the state bytes after
/// them. Refused (logged): a short file, another magic or version, more tokens than
/// `capacity`.
fn read(f: &str, path: &str, magic: u32, version: u32, capacity: usize) -> Option<(Vec<Token>, Vec<u8>)> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            error(f, &format!("{path}: {e}"));
            return None;
        }
    };
    let u32_at = |at: usize| bytes.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let (Some(m), Some(v), Some(n)) = (u32_at(0), u32_at(4), u32_at(8)) else {
        error(f, &format!("{path}: {} bytes, shorter than the header", bytes.len()));
        return None;
    };
    if m != magic || v != version {
        error(f, &format!("{path}: unknown (magic, version) {m:08x}, {v:08x}; expected {magic:08x}, {version:08x}"));
        return None;
    }
    let n = n as usize;
    if n > capacity {
        error(f, &format!("{path}: {n} tokens; the buffer holds {capacity}"));
        return None;
    }
    let end = 12 + 4 * n;
    if bytes.len() < end {
        error(f, &format!("{path}: states {n} tokens but is {} bytes", bytes.len()));
        return None;
    }
    let tokens = bytes[12..end].chunks_exact(4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    Some((tokens, bytes[end..].to_vec()))
}

unsafe fn put_tokens(tokens: &[Token], out: *mut Token, count: *mut usize) {
    if !out.is_null() {
        std::ptr::copy_nonoverlapping(tokens.as_ptr(), out, tokens.len());
    }
    if !count.is_null() {
        *count = tokens.len();
    }
}

/// Saves the context's state and `tokens` (the prompt it holds, for the caller's own use).
#[no_mangle]
pub unsafe extern "C" fn llama_state_save_file(ctx: *mut LlamaContext, path_session: *const c_char, tokens: *const Token, n_token_count: usize) -> bool {
    const F: &str = "llama_state_save_file";
    guard(F, false, || {
        let Some(path) = path_of(F, path_session) else { return false };
        let size = llama_state_get_size(ctx);
        if size == 0 {
            return false;
        }
        let mut state = vec![0u8; size];
        if llama_state_get_data(ctx, state.as_mut_ptr(), size) != size {
            return false;
        }
        write(F, path, SESSION_MAGIC, SESSION_VERSION, tokens, n_token_count, &state).is_some()
    })
}

/// Loads a file of `llama_state_save_file` into the context: its tokens into `tokens_out` (at
/// most `n_token_capacity`), their count into `*n_token_count_out`. The tokens are written
/// only when the state is taken.
#[no_mangle]
pub unsafe extern "C" fn llama_state_load_file(ctx: *mut LlamaContext, path_session: *const c_char, tokens_out: *mut Token, n_token_capacity: usize, n_token_count_out: *mut usize) -> bool {
    const F: &str = "llama_state_load_file";
    guard(F, false, || {
        let Some(path) = path_of(F, path_session) else { return false };
        let Some((tokens, state)) = read(F, path, SESSION_MAGIC, SESSION_VERSION, n_token_capacity) else { return false };
        if !tokens.is_empty() && tokens_out.is_null() {
            error(F, "tokens_out is NULL");
            return false;
        }
        if llama_state_set_data(ctx, state.as_ptr(), state.len()) != state.len() {
            return false;
        }
        put_tokens(&tokens, tokens_out, n_token_count_out);
        true
    })
}

/// Deprecated: `llama_state_save_file`.
#[no_mangle]
pub unsafe extern "C" fn llama_save_session_file(ctx: *mut LlamaContext, path_session: *const c_char, tokens: *const Token, n_token_count: usize) -> bool {
    llama_state_save_file(ctx, path_session, tokens, n_token_count)
}

/// Deprecated: `llama_state_load_file`.
#[no_mangle]
pub unsafe extern "C" fn llama_load_session_file(ctx: *mut LlamaContext, path_session: *const c_char, tokens_out: *mut Token, n_token_capacity: usize, n_token_count_out: *mut usize) -> bool {
    llama_state_load_file(ctx, path_session, tokens_out, n_token_capacity, n_token_count_out)
}

/// Saves sequence `seq_id`'s state and `tokens`; the file's size, or 0.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_save_file(ctx: *mut LlamaContext, filepath: *const c_char, seq_id: SeqId, tokens: *const Token, n_token_count: usize) -> usize {
    const F: &str = "llama_state_seq_save_file";
    guard(F, 0, || {
        let Some(path) = path_of(F, filepath) else { return 0 };
        let size = llama_state_seq_get_size(ctx, seq_id);
        if size == 0 {
            return 0;
        }
        let mut state = vec![0u8; size];
        if llama_state_seq_get_data(ctx, state.as_mut_ptr(), size, seq_id) != size {
            return 0;
        }
        write(F, path, SEQ_MAGIC, SEQ_VERSION, tokens, n_token_count, &state).unwrap_or(0)
    })
}

/// Loads a file of `llama_state_seq_save_file` into sequence `dest_seq_id`; the file's size,
/// or 0. As llama.cpp: with `tokens_out` NULL it only reads the token count into
/// `*n_token_count_out` and returns the header's size.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_load_file(ctx: *mut LlamaContext, filepath: *const c_char, dest_seq_id: SeqId, tokens_out: *mut Token, n_token_capacity: usize, n_token_count_out: *mut usize) -> usize {
    const F: &str = "llama_state_seq_load_file";
    guard(F, 0, || {
        let Some(path) = path_of(F, filepath) else { return 0 };
        let capacity = if tokens_out.is_null() { usize::MAX } else { n_token_capacity };
        let Some((tokens, state)) = read(F, path, SEQ_MAGIC, SEQ_VERSION, capacity) else { return 0 };
        if tokens_out.is_null() {
            if !n_token_count_out.is_null() {
                *n_token_count_out = tokens.len();
            }
            return 12 + 4 * tokens.len();
        }
        if llama_state_seq_set_data(ctx, state.as_ptr(), state.len(), dest_seq_id) != state.len() {
            return 0;
        }
        put_tokens(&tokens, tokens_out, n_token_count_out);
        12 + 4 * tokens.len() + state.len()
    })
}

//! The vocabulary (`llama_vocab_*`, `llama_tokenize`, `llama_token_to_piece`,
//! `llama_detokenize`). A `llama_vocab*` is its model's pointer.

use std::ffi::c_char;
use std::ptr;

use crate::abi::Token;
use crate::adapter::{FimRole, TokenKind};
use crate::log::{error, guard};
use crate::model::{deprecated_name, model_ref, LlamaModel};

/// `LLAMA_TOKEN_NULL`.
const NULL_TOKEN: Token = -1;

fn id_or_null(id: Option<u32>) -> Token {
    id.and_then(|i| Token::try_from(i).ok()).unwrap_or(NULL_TOKEN)
}

/// The id as a vocabulary index, or None (and a log line) when it is outside the vocabulary.
fn checked(f: &str, m: &LlamaModel, token: Token) -> Option<u32> {
    match u32::try_from(token) {
        Ok(t) if (t as usize) < m.engine.n_vocab() => Some(t),
        _ => {
            error(f, &format!("token id {token} is outside the vocabulary of {}", m.engine.n_vocab()));
            None
        }
    }
}

macro_rules! vocab_fact {
    ($name:ident, $ty:ty, $fail:expr, |$m:ident| $body:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(vocab: *const LlamaModel) -> $ty {
            guard(stringify!($name), $fail, || match model_ref(stringify!($name), vocab) {
                Some($m) => $body,
                None => $fail,
            })
        }
    };
}

vocab_fact!(llama_vocab_n_tokens, i32, -1, |m| m.engine.n_vocab() as i32);
// LLAMA_VOCAB_TYPE_SPM = 1, LLAMA_VOCAB_TYPE_BPE = 2.
vocab_fact!(llama_vocab_type, i32, 0, |m| if m.engine.is_byte_level() { 2 } else { 1 });
vocab_fact!(llama_vocab_bos, Token, NULL_TOKEN, |m| id_or_null(m.engine.bos()));
vocab_fact!(llama_vocab_eos, Token, NULL_TOKEN, |m| id_or_null(m.engine.eos()));
vocab_fact!(llama_vocab_get_add_bos, bool, false, |m| m.engine.add_bos());
// packlm's tokenizer appends EOS with add-special when the pack says so (a GGUF's
// `tokenizer.ggml.add_eos_token`, an embedding model's post-processor).
vocab_fact!(llama_vocab_get_add_eos, bool, false, |m| m.engine.add_eos());

/// `llama_vocab_get_suppress_tokens`: the GGUF's `tokenizer.ggml.suppress_tokens` (ids outside
/// the vocabulary dropped, as llama-vocab.cpp drops them), valid while the model lives. The
/// count is written whenever `n_suppress_tokens` is not NULL; with no list, NULL and 0 (a NULL
/// vocab: NULL, 0 and a log line).
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_get_suppress_tokens(vocab: *const LlamaModel, n_suppress_tokens: *mut i32) -> *const Token {
    const F: &str = "llama_vocab_get_suppress_tokens";
    guard(F, ptr::null(), || {
        let ids = model_ref(F, vocab).map(|m| m.engine.suppress_tokens()).unwrap_or_default();
        if !n_suppress_tokens.is_null() {
            *n_suppress_tokens = ids.len() as i32;
        }
        // Ids are below the vocabulary's size, so each u32 is the same bits as its i32.
        if ids.is_empty() {
            ptr::null()
        } else {
            ids.as_ptr() as *const Token
        }
    })
}
// `tokenizer.ggml.add_sep_token` when the model states it; false otherwise (llama.cpp's
// default for BPE and SentencePiece vocabularies, the ones packlm reads).
vocab_fact!(llama_vocab_get_add_sep, bool, false, |m| m.meta_value("tokenizer.ggml.add_sep_token") == Some("true"));
// No pack states these roles; LLAMA_TOKEN_NULL is llama.cpp's "none".
vocab_fact!(llama_vocab_sep, Token, NULL_TOKEN, |_m| NULL_TOKEN);
// The GGUF's `tokenizer.ggml.padding_token_id`, a folder's pad token (`Engine::pad`).
vocab_fact!(llama_vocab_pad, Token, NULL_TOKEN, |m| id_or_null(m.engine.pad()));
vocab_fact!(llama_vocab_mask, Token, NULL_TOKEN, |_m| NULL_TOKEN);
// The fill-in-the-middle tokens, by GGUF key or by llama.cpp's names (`Engine::fim`).
vocab_fact!(llama_vocab_fim_pre, Token, NULL_TOKEN, |m| id_or_null(m.engine.fim(FimRole::Pre)));
vocab_fact!(llama_vocab_fim_suf, Token, NULL_TOKEN, |m| id_or_null(m.engine.fim(FimRole::Suf)));
vocab_fact!(llama_vocab_fim_mid, Token, NULL_TOKEN, |m| id_or_null(m.engine.fim(FimRole::Mid)));
vocab_fact!(llama_vocab_fim_pad, Token, NULL_TOKEN, |m| id_or_null(m.engine.fim(FimRole::Pad)));
vocab_fact!(llama_vocab_fim_rep, Token, NULL_TOKEN, |m| id_or_null(m.engine.fim(FimRole::Rep)));
vocab_fact!(llama_vocab_fim_sep, Token, NULL_TOKEN, |m| id_or_null(m.engine.fim(FimRole::Sep)));
// The chat end-of-turn token: a stop token that is not the EOS.
vocab_fact!(llama_vocab_eot, Token, NULL_TOKEN, |m| id_or_null(m.engine.eot()));
vocab_fact!(llama_vocab_nl, Token, NULL_TOKEN, |m| {
    match m.engine.tokenize("\n", false, false) {
        Ok(ids) if ids.len() == 1 => id_or_null(ids.first().copied()),
        _ => NULL_TOKEN,
    }
});

macro_rules! token_fact {
    ($name:ident, $ty:ty, $fail:expr, |$m:ident, $t:ident| $body:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(vocab: *const LlamaModel, token: Token) -> $ty {
            guard(stringify!($name), $fail, || {
                let Some($m) = model_ref(stringify!($name), vocab) else { return $fail };
                let Some($t) = checked(stringify!($name), $m, token) else { return $fail };
                $body
            })
        }
    };
}

// End of generation: the pack's stop tokens (EOS, end of turn) and, as llama.cpp counts
// them, the fill-in-the-middle pad, repository and file-separator tokens.
token_fact!(llama_vocab_is_eog, bool, false, |m, t| m.engine.is_eog(t));
token_fact!(llama_vocab_is_control, bool, false, |m, t| m.engine.token_kind(t) == Some(TokenKind::Control));
token_fact!(llama_vocab_get_text, *const c_char, ptr::null(), |m, t| m
    .texts()
    .get(t as usize)
    .map(|s| s.as_ptr())
    .unwrap_or(ptr::null()));
// Merge scores are not kept by packlm's tokenizer; llama.cpp gives 0 where a vocabulary has none.
token_fact!(llama_vocab_get_score, f32, 0.0, |_m, _t| 0.0);
token_fact!(llama_vocab_get_attr, i32, 0, |m, t| match m.engine.token_kind(t) {
    Some(TokenKind::Normal) => 1 << 2,
    Some(TokenKind::Control) => 1 << 3,
    Some(TokenKind::UserDefined) => 1 << 4,
    Some(TokenKind::Byte) => 1 << 5,
    None => 0,
});

// The deprecated names (llama.h: "use llama_vocab_... instead"): an old client's generation
// loop stops on llama_token_is_eog, so these must give what their replacements give.
deprecated_name!(llama_n_vocab => llama_vocab_n_tokens(vocab: *const LlamaModel) -> i32);
deprecated_name!(llama_token_get_text => llama_vocab_get_text(vocab: *const LlamaModel, token: Token) -> *const c_char);
deprecated_name!(llama_token_get_score => llama_vocab_get_score(vocab: *const LlamaModel, token: Token) -> f32);
deprecated_name!(llama_token_get_attr => llama_vocab_get_attr(vocab: *const LlamaModel, token: Token) -> i32);
deprecated_name!(llama_token_is_eog => llama_vocab_is_eog(vocab: *const LlamaModel, token: Token) -> bool);
deprecated_name!(llama_token_is_control => llama_vocab_is_control(vocab: *const LlamaModel, token: Token) -> bool);
deprecated_name!(llama_token_bos => llama_vocab_bos(vocab: *const LlamaModel) -> Token);
deprecated_name!(llama_token_eos => llama_vocab_eos(vocab: *const LlamaModel) -> Token);
deprecated_name!(llama_token_eot => llama_vocab_eot(vocab: *const LlamaModel) -> Token);
deprecated_name!(llama_token_cls => llama_vocab_cls(vocab: *const LlamaModel) -> Token);
deprecated_name!(llama_token_sep => llama_vocab_sep(vocab: *const LlamaModel) -> Token);
deprecated_name!(llama_token_nl => llama_vocab_nl(vocab: *const LlamaModel) -> Token);
deprecated_name!(llama_token_pad => llama_vocab_pad(vocab: *const LlamaModel) -> Token);
deprecated_name!(llama_add_bos_token => llama_vocab_get_add_bos(vocab: *const LlamaModel) -> bool);
deprecated_name!(llama_add_eos_token => llama_vocab_get_add_eos(vocab: *const LlamaModel) -> bool);
deprecated_name!(llama_token_fim_pre => llama_vocab_fim_pre(vocab: *const LlamaModel) -> Token);
deprecated_name!(llama_token_fim_suf => llama_vocab_fim_suf(vocab: *const LlamaModel) -> Token);
deprecated_name!(llama_token_fim_mid => llama_vocab_fim_mid(vocab: *const LlamaModel) -> Token);
deprecated_name!(llama_token_fim_pad => llama_vocab_fim_pad(vocab: *const LlamaModel) -> Token);
deprecated_name!(llama_token_fim_rep => llama_vocab_fim_rep(vocab: *const LlamaModel) -> Token);
deprecated_name!(llama_token_fim_sep => llama_vocab_fim_sep(vocab: *const LlamaModel) -> Token);
// llama.h: "CLS is equivalent to BOS" (llama.cpp's llama_vocab_cls returns the BOS).
deprecated_name!(llama_vocab_cls => llama_vocab_bos(vocab: *const LlamaModel) -> Token);

/// Tokenizes `text_len` bytes of UTF-8. Returns the count, or minus the count needed when
/// `n_tokens_max` is too small (nothing written then); i32::MIN on a failure (logged).
#[no_mangle]
pub unsafe extern "C" fn llama_tokenize(
    vocab: *const LlamaModel,
    text: *const c_char,
    text_len: i32,
    tokens: *mut Token,
    n_tokens_max: i32,
    add_special: bool,
    parse_special: bool,
) -> i32 {
    const F: &str = "llama_tokenize";
    guard(F, i32::MIN, || {
        let Some(m) = model_ref(F, vocab) else { return i32::MIN };
        let Ok(len) = usize::try_from(text_len) else {
            error(F, &format!("text_len {text_len} is negative"));
            return i32::MIN;
        };
        if text.is_null() && len > 0 {
            error(F, "text is NULL");
            return i32::MIN;
        }
        let bytes = if len == 0 { &[][..] } else { std::slice::from_raw_parts(text as *const u8, len) };
        let Ok(text) = std::str::from_utf8(bytes) else {
            error(F, "text is not valid UTF-8");
            return i32::MIN;
        };
        // BOS by llama.cpp's rule, not packlm's: with add_special it goes first whenever the
        // vocabulary adds one, even before a BOS the text itself produced ("<bos>..." parsed
        // as special gives two), where packlm's own tokenize never adds a second.
        let mut ids = match m.engine.tokenize(text, false, parse_special) {
            Ok(ids) => ids,
            Err(e) => {
                error(F, &e.to_string());
                return i32::MIN;
            }
        };
        if add_special && m.engine.add_bos() {
            if let Some(b) = m.engine.bos() {
                ids.insert(0, b);
            }
        }
        // And EOS last where the vocabulary adds one, also after an EOS the text produced.
        if add_special && m.engine.add_eos() {
            if let Some(e) = m.engine.eos() {
                ids.push(e);
            }
        }
        let Ok(n) = i32::try_from(ids.len()) else {
            error(F, "too many tokens for an int32_t count");
            return i32::MIN;
        };
        if n > n_tokens_max {
            return -n;
        }
        if n > 0 && tokens.is_null() {
            error(F, "tokens is NULL");
            return i32::MIN;
        }
        for (i, &id) in ids.iter().enumerate() {
            *tokens.add(i) = id as Token;
        }
        n
    })
}

/// The token's bytes into `buf` (not NUL-terminated), after removing up to `lstrip` leading
/// spaces; control tokens only when `special`. Returns the length, or minus the length needed
/// when `length` is too small. An id outside the vocabulary gives 0 (and a log line).
#[no_mangle]
pub unsafe extern "C" fn llama_token_to_piece(
    vocab: *const LlamaModel,
    token: Token,
    buf: *mut c_char,
    length: i32,
    lstrip: i32,
    special: bool,
) -> i32 {
    const F: &str = "llama_token_to_piece";
    guard(F, 0, || {
        let Some(m) = model_ref(F, vocab) else { return 0 };
        let Some(t) = checked(F, m, token) else { return 0 };
        let bytes = match m.engine.token_bytes(t, special) {
            Ok(b) => b,
            Err(e) => {
                error(F, &e.to_string());
                return 0;
            }
        };
        let skip = bytes.iter().take(lstrip.max(0) as usize).take_while(|&&b| b == b' ').count();
        write_bytes(&bytes[skip..], buf, length)
    })
}

/// `bytes` into `buf` of `length`: the count, or minus the count when it does not fit.
unsafe fn write_bytes(bytes: &[u8], buf: *mut c_char, length: i32) -> i32 {
    let n = i32::try_from(bytes.len()).unwrap_or(i32::MAX);
    if n > length.max(0) {
        return -n;
    }
    if n > 0 {
        if buf.is_null() {
            return -n;
        }
        ptr::copy_nonoverlapping(bytes.as_ptr(), buf as *mut u8, bytes.len());
    }
    n
}

/// The text of `n_tokens` tokens: their pieces joined (control tokens only when
/// `unparse_special`; `remove_special` drops a leading BOS). Returns the length, minus the
/// length needed when `text_len_max` is too small, or i32::MIN on a failure.
#[no_mangle]
pub unsafe extern "C" fn llama_detokenize(
    vocab: *const LlamaModel,
    tokens: *const Token,
    n_tokens: i32,
    text: *mut c_char,
    text_len_max: i32,
    remove_special: bool,
    unparse_special: bool,
) -> i32 {
    const F: &str = "llama_detokenize";
    guard(F, i32::MIN, || {
        let Some(m) = model_ref(F, vocab) else { return i32::MIN };
        let Ok(n) = usize::try_from(n_tokens) else {
            error(F, &format!("n_tokens {n_tokens} is negative"));
            return i32::MIN;
        };
        if tokens.is_null() && n > 0 {
            error(F, "tokens is NULL");
            return i32::MIN;
        }
        let ids = if n == 0 { &[][..] } else { std::slice::from_raw_parts(tokens, n) };
        // llama.cpp (llama_vocab::impl::detokenize): remove_special drops a leading BOS where
        // the vocabulary adds one, and a trailing EOS where it adds one.
        let e = &m.engine;
        let ids = match (remove_special && e.add_bos(), ids.first()) {
            (true, Some(&first)) if Some(first) == e.bos().map(|b| b as Token) => &ids[1..],
            _ => ids,
        };
        let ids = match (remove_special && e.add_eos(), ids.last()) {
            (true, Some(&last)) if Some(last) == e.eos().map(|b| b as Token) => &ids[..ids.len() - 1],
            _ => ids,
        };
        let mut out = Vec::new();
        for &id in ids {
            let Some(t) = checked(F, m, id) else { return i32::MIN };
            match m.engine.token_bytes(t, unparse_special) {
                Ok(b) => out.extend_from_slice(&b),
                Err(e) => {
                    error(F, &e.to_string());
                    return i32::MIN;
                }
            }
        }
        write_bytes(&out, text, text_len_max)
    })
}

//! The pack's tokenizer and its special-token rules: BOS, EOS, stop tokens, chat template.
//!
//! Encoding never relies on the tokenizer's post-processor: packlm adds BOS and EOS itself
//! (when the pack says to and the caller asks for special tokens), and never a second one when
//! the text already produced it. That gives one rule for HF folders and GGUF files alike.

use tokenizers::{AddedVocabulary, DecoderWrapper, Tokenizer};

use crate::error::{Error, Result, Status};
use crate::pack::gguf_tokenizer::GgufTokenizer;

/// Chat end-of-turn markers that are stop tokens when the vocabulary has them as specials.
const END_OF_TURN: &[&str] = &["<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>", "<|endoftext|>"];

/// A pack's tokenizer: an HF folder's tokenizer.json as `tokenizers` loads it, or one rebuilt
/// from a GGUF's metadata (HF's pipeline around packlm's BPE model, src/pack/gguf_bpe.rs).
#[derive(Clone)]
pub enum PackTokenizer {
    Json(Tokenizer),
    /// `vocab_size` is its `get_vocab_size(true)`, counted when it was built (that call builds
    /// a map of every token text to count them).
    Gguf { tokenizer: GgufTokenizer, vocab_size: usize },
}

/// `$body` with `$t` bound to the tokenizer inside either kind (the two are `TokenizerImpl`s
/// with different models, and share every other type).
macro_rules! with_tokenizer {
    ($tokenizer:expr, $t:ident => $body:expr) => {
        match $tokenizer {
            PackTokenizer::Json($t) => $body,
            PackTokenizer::Gguf { tokenizer: $t, .. } => $body,
        }
    };
}

impl PackTokenizer {
    fn encode(&self, text: &str) -> tokenizers::Result<Vec<u32>> {
        with_tokenizer!(self, t => t.encode(text, false).map(|e| e.get_ids().to_vec()))
    }

    fn decode(&self, ids: &[u32], skip_special: bool) -> tokenizers::Result<String> {
        with_tokenizer!(self, t => t.decode(ids, skip_special))
    }

    fn token_to_id(&self, text: &str) -> Option<u32> {
        with_tokenizer!(self, t => t.token_to_id(text))
    }

    fn id_to_token(&self, id: u32) -> Option<String> {
        with_tokenizer!(self, t => t.id_to_token(id))
    }

    fn added_vocabulary(&self) -> &AddedVocabulary {
        with_tokenizer!(self, t => t.get_added_vocabulary())
    }

    fn decoder(&self) -> Option<&DecoderWrapper> {
        with_tokenizer!(self, t => t.get_decoder())
    }

    fn set_encode_special_tokens(&mut self, value: bool) {
        with_tokenizer!(self, t => t.set_encode_special_tokens(value))
    }

    /// Distinct texts of the vocabulary and the added tokens (`get_vocab_size(true)`).
    fn vocab_size(&self) -> usize {
        match self {
            PackTokenizer::Json(t) => t.get_vocab_size(true),
            PackTokenizer::Gguf { vocab_size, .. } => *vocab_size,
        }
    }

    /// For an added token, whether it is special; None when `id` is not an added token. (It
    /// reads the added vocabulary in place: `get_added_tokens_decoder` copies it, some 6,000
    /// tokens for Gemma 3, at every call.)
    fn is_special(&self, id: u32) -> Option<bool> {
        self.added_vocabulary().get_added_tokens_decoder().get(&id).map(|t| t.special)
    }
}

pub struct Vocab {
    /// Matches special tokens in text ("parse special").
    tokenizer: PackTokenizer,
    /// Treats special-token text as plain text. For a GGUF it shares the BPE tables with
    /// `tokenizer`; only the added-token matcher is copied.
    tokenizer_plain: PackTokenizer,
    pub bos: Option<u32>,
    pub eos: Vec<u32>,
    /// Generation stops at any of these (EOS ids, EOT, chat end-of-turn specials).
    pub stop: Vec<u32>,
    pub add_bos: bool,
    /// The token `encode` appends when asked for special tokens (a GGUF's
    /// `tokenizer.ggml.add_eos_token`, an HF folder's `add_eos_token` or a post-processor that
    /// appends one, as embedding models' do: Qwen3-Embedding's `$A <|endoftext|>`).
    pub add_eos: Option<u32>,
    pub chat_template: Option<String>,
    pub size: usize,
    /// Ids a sampler should never pick, as the pack lists them (a GGUF's
    /// `tokenizer.ggml.suppress_tokens`); packlm's samplers do not read it (llama.cpp's do not
    /// either: it is for the application).
    pub suppress: Vec<u32>,
}

impl Vocab {
    pub fn new(
        tokenizer: PackTokenizer,
        bos: Option<u32>,
        eos: Vec<u32>,
        extra_stop: Vec<u32>,
        add_bos: bool,
        chat_template: Option<String>,
    ) -> Vocab {
        let mut plain = tokenizer.clone();
        plain.set_encode_special_tokens(true);
        let size = tokenizer.vocab_size();
        let mut stop = eos.clone();
        stop.extend(extra_stop);
        for marker in END_OF_TURN {
            if let Some(id) = tokenizer.token_to_id(marker) {
                if tokenizer.is_special(id) == Some(true) {
                    stop.push(id);
                }
            }
        }
        stop.sort_unstable();
        stop.dedup();
        Vocab { tokenizer, tokenizer_plain: plain, bos, eos, stop, add_bos, add_eos: None, chat_template, size, suppress: Vec::new() }
    }

    /// This vocabulary with the suppress list `ids` (see `suppress`).
    pub fn with_suppress(mut self, ids: Vec<u32>) -> Vocab {
        self.suppress = ids;
        self
    }

    /// This vocabulary, appending `eos` when asked for special tokens (see `add_eos`).
    pub fn with_add_eos(mut self, eos: Option<u32>) -> Vocab {
        self.add_eos = eos;
        self
    }

    /// Token ids of `text`. `add_special`: prepend BOS when the pack adds one (never twice),
    /// and append `add_eos` when the pack appends one (never twice).
    /// `parse_special`: text like "<|im_start|>" becomes its special token.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let tk = if parse_special { &self.tokenizer } else { &self.tokenizer_plain };
        let mut ids = tk.encode(text).map_err(|e| Error::new(Status::ErrTokenizer, format!("encode: {e}")))?;
        if add_special && self.add_bos {
            if let Some(b) = self.bos {
                if ids.first() != Some(&b) {
                    ids.insert(0, b);
                }
            }
        }
        if let (true, Some(e)) = (add_special, self.add_eos) {
            if ids.last() != Some(&e) {
                ids.push(e);
            }
        }
        Ok(ids)
    }

    /// Text of `ids`; `skip_special` leaves out special tokens.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.check_ids(ids)?;
        self.tokenizer
            .decode(ids, skip_special)
            .map_err(|e| Error::new(Status::ErrTokenizer, format!("decode: {e}")))
    }

    /// The text one token contributes (its bytes decoded as the decoder would, alone).
    pub fn token_to_piece(&self, id: u32) -> Result<String> {
        self.decode(&[id], false)
    }

    pub fn check_ids(&self, ids: &[u32]) -> Result<()> {
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= self.size) {
            return Err(Error::new(
                Status::ErrTokenOutOfRange,
                format!("token id {bad} is outside the vocabulary of {}", self.size),
            ));
        }
        Ok(())
    }

    pub fn token_text(&self, id: u32) -> Option<String> {
        self.tokenizer.id_to_token(id)
    }

    /// What kind of token `id` is (llama.cpp's token attributes CONTROL, USER_DEFINED, BYTE,
    /// NORMAL); None for an id outside the vocabulary.
    pub fn token_kind(&self, id: u32) -> Option<TokenKind> {
        let text = self.tokenizer.id_to_token(id)?;
        Some(match self.tokenizer.is_special(id) {
            Some(true) => TokenKind::Control,
            Some(false) => TokenKind::UserDefined,
            None if !self.is_byte_level() && byte_token(&text).is_some() => TokenKind::Byte,
            None => TokenKind::Normal,
        })
    }

    /// Whether tokens are GPT-2 byte-level BPE (else SentencePiece-style, "▁" for a space and
    /// <0xNN> byte tokens).
    pub fn is_byte_level(&self) -> bool {
        matches!(self.tokenizer.decoder(), Some(DecoderWrapper::ByteLevel(_)))
    }

    /// The raw bytes one token stands for, as llama.cpp's `llama_token_to_piece` gives them: a
    /// byte token's single byte (never U+FFFD for part of a character), "▁" as a space for
    /// SentencePiece vocabularies, GPT-2's byte-to-character map undone for byte-level ones.
    /// A control token gives its text when `render_special`, else nothing; a user-defined
    /// token always gives its text.
    pub fn token_bytes(&self, id: u32, render_special: bool) -> Result<Vec<u8>> {
        self.check_ids(&[id])?;
        let text = self.tokenizer.id_to_token(id).unwrap_or_default();
        match self.token_kind(id) {
            Some(TokenKind::Control) => Ok(if render_special { text.into_bytes() } else { Vec::new() }),
            Some(TokenKind::UserDefined) => Ok(text.into_bytes()),
            Some(TokenKind::Byte) => Ok(byte_token(&text).map(|b| vec![b]).unwrap_or_default()),
            _ if self.is_byte_level() => text
                .chars()
                .map(|c| gpt2_char_to_byte(c).ok_or(c))
                .collect::<std::result::Result<Vec<u8>, char>>()
                .map_err(|c| Error::new(Status::ErrTokenizer, format!("token {id} ({text:?}) has {c:?}, outside the byte-level alphabet"))),
            _ => Ok(text.replace('\u{2581}', " ").into_bytes()),
        }
    }
}

/// Token attributes, as llama.cpp names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// A special token (BOS, EOS, chat markers): hidden unless asked for.
    Control,
    /// An added token that is not special: text like any other.
    UserDefined,
    /// A SentencePiece byte-fallback token, <0xNN>.
    Byte,
    Normal,
}

/// The byte of a SentencePiece byte token "<0xNN>".
fn byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// GPT-2's `bytes_to_unicode` undone: printable Latin-1 bytes stand for themselves, the other
/// 68 bytes were moved to U+0100.. in byte order (openai/gpt-2 encoder.py).
fn gpt2_char_to_byte(c: char) -> Option<u8> {
    let printable = |b: u32| (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
    let cp = c as u32;
    if cp < 0x100 {
        return if printable(cp) { Some(cp as u8) } else { None };
    }
    let k = cp.checked_sub(0x100)?;
    (0u32..256).filter(|&b| !printable(b)).nth(k as usize).map(|b| b as u8)
}

//! A tokenizer rebuilt from GGUF metadata.
//!
//! A GGUF carries no tokenizer.json, only llama.cpp's `tokenizer.ggml.*` keys. We rebuild the
//! tokenizer the way HF transformers does when it opens a GGUF (transformers 5.24,
//! `transformers/integrations/gguf/gguf_tokenizer_mapping.py`, which hands the vocabulary to
//! `GPT2Tokenizer`, `LlamaTokenizer` or `GemmaTokenizer`), so that our ids are HF's ids. The tests
//! in tests/gguf_tokenizer.rs compare against ids recorded from HF itself.
//!
//! - `tokenizer.ggml.model = "gpt2"`: byte-level BPE from `tokens` + `merges`; the split before
//!   BPE is chosen by `tokenizer.ggml.pre` (see [`byte_level_pre_tokenizer`]).
//! - `tokenizer.ggml.model = "llama"`: SentencePiece vocabularies as BPE with byte fallback, the
//!   merges taken from the file or rebuilt from the scores (Gemma: from the token order).
//! - `tokenizer.ggml.model = "gemma4"`: `GemmaTokenizer` over the tokens as written and the
//!   file's merges; no BOS added (HF's rule for this type).
//! - Tokens typed control (3) become special added tokens, user-defined (4) plain added tokens,
//!   so "<|im_start|>" stays one token when special parsing is on.
//!
//! The BPE model itself is packlm's [`GgufBpe`], which gives the ids `tokenizers`' own BPE gives
//! but is built straight from the token list (see src/pack/gguf_bpe.rs); normalizers,
//! pre-tokenizers, added tokens, post-processor and decoders are HF's.

use crate::error::{Error, Result};
use crate::semantics::families::{self, SpmTokenizer};
use crate::pack::gguf::GgufFile;
use crate::pack::gguf_bpe::{BpeOptions, GgufBpe, MergeSource};
use std::borrow::Cow;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, Model, NormalizerWrapper, PostProcessorWrapper, SplitDelimiterBehavior, TokenizerImpl};

/// A tokenizer rebuilt from GGUF metadata: HF's pipeline around packlm's BPE model.
pub type GgufTokenizer = TokenizerImpl<GgufBpe, NormalizerWrapper, PreTokenizerWrapper, PostProcessorWrapper, DecoderWrapper>;

/// The tokenizer of a GGUF file and the token ids its metadata names.
pub struct GgufVocab {
    /// The rebuilt tokenizer. Its post-processor adds BOS when `add_bos` is true (and EOS when
    /// `add_eos` is), so `encode(text, true)` follows the file's rules.
    pub tokenizer: GgufTokenizer,
    /// `tokenizer.get_vocab_size(true)` (distinct texts of the vocabulary and the added tokens),
    /// counted without building the map that call builds.
    pub vocab_size: usize,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: Option<u32>,
    /// `tokenizer.ggml.eot_token_id` (end of turn), only when the file states it: llama.cpp's
    /// guess from token texts is ambiguous (SmolLM2 has both "<|endoftext|>" and "<|im_end|>").
    pub eot: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`.
    pub pad: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`; when absent, true for SentencePiece ("llama") vocabularies
    /// and false otherwise (HF `get_gguf_tokenizer`, matching llama.cpp).
    pub add_bos: bool,
    /// `tokenizer.ggml.add_eos_token`, false when absent.
    pub add_eos: bool,
    /// `tokenizer.chat_template`.
    pub chat_template: Option<String>,
    /// `tokenizer.ggml.suppress_tokens`: ids a sampler should never pick (llama.h's
    /// `llama_vocab_get_suppress_tokens`), those outside the vocabulary dropped as llama.cpp
    /// drops them; empty when absent.
    pub suppress: Vec<u32>,
}

impl std::fmt::Debug for GgufVocab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufVocab")
            .field("vocab_size", &self.vocab_size)
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("eot", &self.eot)
            .field("pad", &self.pad)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .field("chat_template", &self.chat_template.as_ref().map(|t| t.len()))
            .finish()
    }
}

/// llama.cpp `llama_token_type` (gguf-py `TokenType`): 3 = CONTROL, 4 = USER_DEFINED.
const TOKEN_TYPE_CONTROL: i64 = 3;
const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// The SentencePiece word-boundary mark.
const SPM_SPACE: &str = "\u{2581}";

/// Rebuild the tokenizer and read the special ids of `g`.
pub fn vocab_from_gguf(g: &GgufFile) -> Result<GgufVocab> {
    let meta = Meta::read(g)?;
    let kind = meta.model.as_str();
    // HF `select_tokenizer_builder`: SentencePiece files get a builder by architecture.
    let spm = families::spm_tokenizer(g.architecture()?);

    let mut tokenizer = match kind {
        "gpt2" => byte_level_tokenizer(&meta)?,
        "llama" => match spm {
            SpmTokenizer::Gemma => gemma_tokenizer(&meta)?,
            SpmTokenizer::Phi3 => phi3_tokenizer(&meta)?,
            SpmTokenizer::Llama => llama_tokenizer(&meta)?,
        },
        "gemma4" => gemma4_tokenizer(&meta)?,
        other => {
            return Err(meta.unsupported(format!(
                "tokenizer.ggml.model is {other:?}; packlm rebuilds \"gpt2\", \"llama\" and \"gemma4\" tokenizers"
            )))
        }
    };
    add_special_tokens(&mut tokenizer, &meta, spm);

    let bos = meta.token_id(g, "tokenizer.ggml.bos_token_id")?;
    let eos = meta.token_id(g, "tokenizer.ggml.eos_token_id")?;
    let eot = meta.token_id(g, "tokenizer.ggml.eot_token_id")?;
    let pad = meta.token_id(g, "tokenizer.ggml.padding_token_id")?;
    let explicit_bos = g.get_bool("tokenizer.ggml.add_bos_token")?;
    let add_eos = g.get_bool("tokenizer.ggml.add_eos_token")?.unwrap_or(false);
    // HF get_gguf_tokenizer: "llama" files without the flag get BOS (as llama.cpp does); a
    // "gemma4" file gets none whatever it says (its chat template writes `<bos>` itself;
    // llama.cpp forces BOS on there, HF follows the reference tokenizer).
    let add_bos = match (explicit_bos, bos) {
        _ if kind == "gemma4" => false,
        (Some(true), None) => {
            return Err(meta.format(
                "tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is missing".into(),
            ))
        }
        (Some(flag), _) => flag,
        (None, Some(_)) => kind == "llama",
        (None, None) => false,
    };
    if add_eos && eos.is_none() {
        return Err(meta.format("tokenizer.ggml.add_eos_token is true but tokenizer.ggml.eos_token_id is missing".into()));
    }
    let bos_piece = bos.filter(|_| add_bos).map(|id| (meta.tokens[id as usize].to_string(), id));
    let eos_piece = eos.filter(|_| add_eos).map(|id| (meta.tokens[id as usize].to_string(), id));
    tokenizer.with_post_processor(Some(post_processor(bos_piece, eos_piece).map_err(|e| meta.format(e))?));

    let chat_template = g.get_str("tokenizer.chat_template")?.map(str::to_string);
    let vocab_size = vocab_size_with_added(&tokenizer);
    // llama-vocab.cpp: an array of integers (anything else refused), out-of-range ids dropped.
    let suppress = g.get_int_array("tokenizer.ggml.suppress_tokens")?.unwrap_or_default();
    let suppress = suppress.into_iter().filter(|&id| id >= 0 && (id as usize) < meta.tokens.len()).map(|id| id as u32).collect();
    Ok(GgufVocab { tokenizer, vocab_size, bos, eos, eot, pad, add_bos, add_eos, chat_template, suppress })
}

/// What `TokenizerImpl::get_vocab_size(true)` returns, the size of the union of the model's
/// texts and the added tokens' contents (it builds that map of strings to count it).
fn vocab_size_with_added(tokenizer: &GgufTokenizer) -> usize {
    let model = tokenizer.get_model();
    let added = tokenizer.get_added_vocabulary().get_vocab();
    model.get_vocab_size() + added.keys().filter(|t| model.token_to_id(t).is_none()).count()
}

/// The `tokenizer.ggml.*` arrays, checked for type and length.
struct Meta<'a> {
    path: String,
    model: String,
    pre: Option<&'a str>,
    tokens: Vec<&'a str>,
    /// `token_type`, one per token (empty when the key is absent).
    types: Vec<i64>,
    /// `scores`, one per token (empty when the key is absent).
    scores: Vec<f32>,
    /// `merges` as written ("left right"), None when the key is absent.
    merges: Option<Vec<&'a str>>,
    /// (key suffix, id) of the bos/eos/unknown/padding ids present in the file.
    named_ids: Vec<(&'static str, usize)>,
}

impl<'a> Meta<'a> {
    fn read(g: &'a GgufFile) -> Result<Meta<'a>> {
        let path = g.path.display().to_string();
        let fmt = |msg: String| Error::format(format!("{path}: {msg}"));
        let model = g
            .get_str("tokenizer.ggml.model")?
            .ok_or_else(|| fmt("metadata key 'tokenizer.ggml.model' is missing".into()))?
            .to_string();
        let pre = g.get_str("tokenizer.ggml.pre")?;
        let tokens = g
            .get_str_array("tokenizer.ggml.tokens")?
            .ok_or_else(|| fmt("metadata key 'tokenizer.ggml.tokens' is missing".into()))?;
        if tokens.is_empty() || u32::try_from(tokens.len()).is_err() {
            return Err(fmt(format!("tokenizer.ggml.tokens has {} entries", tokens.len())));
        }
        let types = g.get_int_array("tokenizer.ggml.token_type")?.unwrap_or_default();
        let scores = g.get_f32_array("tokenizer.ggml.scores")?.unwrap_or_default();
        for (key, n) in [("tokenizer.ggml.token_type", types.len()), ("tokenizer.ggml.scores", scores.len())] {
            if n != 0 && n != tokens.len() {
                return Err(fmt(format!("{key} has {n} entries for {} tokens", tokens.len())));
            }
        }
        let merges = g.get_str_array("tokenizer.ggml.merges")?;
        let mut named_ids = Vec::new();
        for key in ["bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id"] {
            if let Some(id) = g.get_u64(&format!("tokenizer.ggml.{key}"))? {
                named_ids.push((key, usize::try_from(id).unwrap_or(usize::MAX)));
            }
        }
        Ok(Meta { path, model, pre, tokens, types, scores, merges, named_ids })
    }

    fn format(&self, msg: String) -> Error {
        Error::format(format!("{}: {msg}", self.path))
    }

    fn unsupported(&self, msg: String) -> Error {
        Error::unsupported(format!("{}: {msg}", self.path))
    }

    fn token_type(&self, id: usize) -> Option<i64> {
        self.types.get(id).copied()
    }

    /// A token id key, checked to name a token of the vocabulary.
    fn token_id(&self, g: &GgufFile, key: &str) -> Result<Option<u32>> {
        match g.get_u64(key)? {
            None => Ok(None),
            Some(id) if id < self.tokens.len() as u64 => Ok(Some(id as u32)),
            Some(id) => Err(self.format(format!("{key} is {id}, outside the {} tokens", self.tokens.len()))),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Byte-level BPE ("gpt2")
// ---------------------------------------------------------------------------------------------

/// GPT-2's printable spelling of the 256 byte values (`bytes_to_unicode` in GPT-2's encoder.py,
/// transformers convert_slow_tokenizer.py): printable Latin-1 bytes stand for themselves, the
/// other 68 are shifted to U+0100.. in byte order.
fn bytes_to_unicode() -> [char; 256] {
    let mut map = ['\0'; 256];
    let mut shifted = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let code = if printable {
            b as u32
        } else {
            shifted += 1;
            255 + shifted
        };
        // Every code here is below U+0200, a valid scalar value.
        map[b as usize] = char::from_u32(code).unwrap_or('\0');
    }
    map
}

/// The split before byte-level BPE, by `tokenizer.ggml.pre`.
///
/// - Names HF lists in `GGUF_PRE_TOKENIZER_SPLITS` get HF's regex, then ByteLevel without its own
///   regex (HF `set_split_regex`).
/// - "smollm": individual digits, then GPT-2's ByteLevel. That is SmolLM2's own tokenizer.json
///   and llama.cpp's LLAMA_VOCAB_PRE_TYPE_SMOLLM (llama-vocab.cpp: "\p{N}" before the GPT-2
///   regex). HF 5.24 has no entry for it and falls back to plain ByteLevel; the ids are the same
///   on SmolLM2's vocabulary, which merges no digit with anything (the tests check this).
/// - "default" and "gpt2": GPT-2's ByteLevel, which is `GPT2Tokenizer`'s own and HF's fallback.
fn byte_level_pre_tokenizer(pre: Option<&str>) -> std::result::Result<PreTokenizerWrapper, String> {
    // transformers gguf_tokenizer_mapping.py `_LLAMA3_SPLIT`, `_TEKKEN_SPLIT`, `_GPT4O_SPLIT`;
    // models/qwen2/tokenization_qwen2.py and models/qwen3_5/tokenization_qwen3_5.py PRETOKENIZE_REGEX.
    const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const QWEN35: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

    // Python's pre_tokenizers.ByteLevel(add_prefix_space=False): trim_offsets and use_regex true.
    let gpt2_byte_level = || PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, true));
    let regex = match pre.unwrap_or("default") {
        "default" | "gpt2" => return Ok(gpt2_byte_level()),
        "smollm" => {
            return Ok(PreTokenizerWrapper::Sequence(PreSequence::new(vec![
                PreTokenizerWrapper::Digits(Digits::new(true)),
                gpt2_byte_level(),
            ])))
        }
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0" | "lfm2"
        | "jina-v5-nano" | "dbrx" | "smaug-bpe" => LLAMA3,
        "tekken" => TEKKEN,
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "megrez" => QWEN2,
        "qwen35" => QWEN35,
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => GPT4O,
        other => return Err(format!("tokenizer.ggml.pre {other:?} is not a pre-tokenizer packlm knows")),
    };
    let split = Split::new(SplitPattern::Regex(regex.to_string()), SplitDelimiterBehavior::Isolated, false)
        .map_err(|e| format!("tokenizer.ggml.pre split regex: {e}"))?;
    Ok(PreTokenizerWrapper::Sequence(PreSequence::new(vec![
        PreTokenizerWrapper::Split(split),
        PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, false)),
    ])))
}

/// HF `byte_level_tokenizer` + `GPT2Tokenizer`: BPE without unk or byte fallback, ByteLevel
/// pre-tokenizer and decoder.
fn byte_level_tokenizer(meta: &Meta) -> Result<GgufTokenizer> {
    // Check the pre-tokenizer name first: an unknown one is a clear ErrUnsupported.
    let pre = byte_level_pre_tokenizer(meta.pre).map_err(|e| meta.unsupported(e))?;
    let spelling = bytes_to_unicode();
    // A token written outside the byte alphabet (a control token with a space, say) is
    // respelled byte by byte, as HF does; a later duplicate overwrites, as in a Python dict.
    let keys = meta.tokens.iter().map(|&token| -> Cow<str> {
        if token.chars().all(in_byte_alphabet) {
            Cow::Borrowed(token)
        } else {
            Cow::Owned(token.bytes().map(|b| spelling[b as usize]).collect())
        }
    });
    let merges = meta
        .merges
        .as_deref()
        .ok_or_else(|| meta.format("metadata key 'tokenizer.ggml.merges' is missing (needed by a gpt2 tokenizer)".into()))?;
    let options = BpeOptions { byte_fallback: false, unk_token: None, fuse_unk: false };
    let bpe = GgufBpe::new(keys, MergeSource::Listed(merges), &options).map_err(|e| meta.format(e))?;
    let mut tokenizer = GgufTokenizer::new(bpe);
    tokenizer.with_pre_tokenizer(Some(pre));
    tokenizer.with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevel::default())));
    Ok(tokenizer)
}

/// Whether `c` is one of the 256 characters of [`bytes_to_unicode`]: a printable Latin-1 byte
/// (0x21..=0x7E, 0xA1..=0xAC, 0xAE..=0xFF) or one of the 68 shifted ones (U+0100..=U+0143).
fn in_byte_alphabet(c: char) -> bool {
    matches!(c, '!'..='~' | '\u{A1}'..='\u{AC}' | '\u{AE}'..='\u{143}')
}

// ---------------------------------------------------------------------------------------------
// SentencePiece vocabularies ("llama")
// ---------------------------------------------------------------------------------------------

/// BPE with byte fallback over `tokens` (HF `sentencepiece_tokenizer`): merges from the file, or
/// HF's `generate_merges` ranked by `generated` (see [`GgufBpe`], which ranks them without
/// building the list).
fn spm_bpe<I>(meta: &Meta, tokens: I, generated: MergeSource, unk: Option<&str>) -> Result<GgufBpe>
where
    I: ExactSizeIterator,
    I::Item: AsRef<str>,
{
    let merges = match meta.merges.as_deref() {
        Some(listed) => MergeSource::Listed(listed),
        None => generated,
    };
    let options = BpeOptions { byte_fallback: true, unk_token: unk, fuse_unk: true };
    GgufBpe::new(tokens, merges, &options).map_err(|e| meta.format(e))
}

/// The SentencePiece decoder: "▁" back to spaces, <0xNN> pieces to bytes, joined; LlamaTokenizer
/// then strips the one space its pre-tokenizer put in front.
fn spm_decoder(strip_prefix_space: bool) -> Result<DecoderWrapper> {
    let replace = Replace::new(SPM_SPACE, " ").map_err(|e| Error::format(format!("decoder: {e}")))?;
    let mut steps = vec![
        DecoderWrapper::Replace(replace),
        DecoderWrapper::ByteFallback(ByteFallback::new()),
        DecoderWrapper::Fuse(Fuse::new()),
    ];
    if strip_prefix_space {
        steps.push(DecoderWrapper::Strip(Strip::new(' ', 1, 0)));
    }
    Ok(DecoderWrapper::Sequence(DecoderSequence::new(steps)))
}

/// HF `LlamaTokenizer` (legacy = False, add_prefix_space = True): no normalizer, Metaspace
/// pre-tokenizer that puts "▁" before the first word only, no unk token in the BPE model.
fn llama_tokenizer(meta: &Meta) -> Result<GgufTokenizer> {
    if meta.scores.is_empty() && meta.merges.is_none() {
        return Err(meta.format("a llama tokenizer needs tokenizer.ggml.scores or tokenizer.ggml.merges".into()));
    }
    let bpe = spm_bpe(meta, meta.tokens.iter(), MergeSource::Scores(&meta.scores), None)?;
    let mut tokenizer = GgufTokenizer::new(bpe);
    tokenizer.with_pre_tokenizer(Some(PreTokenizerWrapper::Metaspace(Metaspace::new('\u{2581}', PrependScheme::First, false))));
    tokenizer.with_decoder(Some(spm_decoder(true)?));
    Ok(tokenizer)
}

/// HF `phi3_tokenizer`: as Llama, but the prefix "▁" comes from a normalizer (Prepend, then
/// spaces to "▁") and there is no pre-tokenizer.
fn phi3_tokenizer(meta: &Meta) -> Result<GgufTokenizer> {
    let mut tokenizer = llama_tokenizer(meta)?;
    let replace = Replace::new(" ", SPM_SPACE).map_err(|e| meta.format(format!("normalizer: {e}")))?;
    tokenizer.with_normalizer(Some(NormalizerWrapper::Sequence(NormalizerSequence::new(vec![
        NormalizerWrapper::Prepend(Prepend::new(SPM_SPACE.to_string())),
        NormalizerWrapper::Replace(replace),
    ]))));
    tokenizer.with_pre_tokenizer(None::<PreTokenizerWrapper>);
    Ok(tokenizer)
}

/// Python's `str.isspace`: Rust's White_Space plus U+001C..U+001F (bidi class B/S).
fn python_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// HF `gemma_tokenizer` + `GemmaTokenizer`: tokens made only of whitespace and containing a space
/// are respelled as that many "▁"; the merges (absent from Gemma files) are rebuilt in token
/// order, not score order; spaces become "▁" in a normalizer, with no prefix; unk is "<unk>".
fn gemma_tokenizer(meta: &Meta) -> Result<GgufTokenizer> {
    let respelled = meta.tokens.iter().map(|&t| -> Cow<str> {
        // A byte loop: memchr's call costs more than it saves on strings this short.
        if t.bytes().any(|b| b == b' ') && t.chars().all(python_isspace) {
            Cow::Owned(SPM_SPACE.repeat(t.chars().count()))
        } else {
            Cow::Borrowed(t)
        }
    });
    // positions = {token: -index}
    let bpe = spm_bpe(meta, respelled, MergeSource::TokenOrder, Some("<unk>"))?;
    gemma_layout(meta, GgufTokenizer::new(bpe))
}

/// HF's "gemma4" builder (`partial(sentencepiece_tokenizer, tokenizer_class=GemmaTokenizer)`):
/// `GemmaTokenizer` over the tokens as written, with the file's merges (Gemma4 files carry
/// them; without, HF's `generate_merges` by score).
fn gemma4_tokenizer(meta: &Meta) -> Result<GgufTokenizer> {
    if meta.scores.is_empty() && meta.merges.is_none() {
        return Err(meta.format("a gemma4 tokenizer needs tokenizer.ggml.merges or tokenizer.ggml.scores".into()));
    }
    let bpe = spm_bpe(meta, meta.tokens.iter(), MergeSource::Scores(&meta.scores), Some("<unk>"))?;
    gemma_layout(meta, GgufTokenizer::new(bpe))
}

/// `GemmaTokenizer` around a BPE model: spaces become "▁" in a normalizer, with no prefix; the
/// text is split after each space; the SentencePiece decoder without a strip.
fn gemma_layout(meta: &Meta, mut tokenizer: GgufTokenizer) -> Result<GgufTokenizer> {
    let replace = Replace::new(" ", SPM_SPACE).map_err(|e| meta.format(format!("normalizer: {e}")))?;
    tokenizer.with_normalizer(Some(NormalizerWrapper::Replace(replace)));
    let split = Split::new(SplitPattern::String(" ".into()), SplitDelimiterBehavior::MergedWithPrevious, false)
        .map_err(|e| meta.format(format!("pre-tokenizer: {e}")))?;
    tokenizer.with_pre_tokenizer(Some(PreTokenizerWrapper::Split(split)));
    tokenizer.with_decoder(Some(spm_decoder(false)?));
    Ok(tokenizer)
}

// ---------------------------------------------------------------------------------------------
// Added tokens and the post-processor
// ---------------------------------------------------------------------------------------------

/// The special and added tokens HF ends up with, in HF's order:
/// 1. the tokenizer class's own default special tokens (GPT2Tokenizer "<|endoftext|>";
///    LlamaTokenizer "<unk>", "<s>", "</s>"; GemmaTokenizer "<bos>", "<eos>", "<unk>", "<pad>",
///    "<mask>"), where the vocabulary has them. HF would also append the missing ones as new ids,
///    past the model's vocabulary; we do not.
/// 2. `add_gguf_special_tokens`: control tokens as special (for byte-level vocabularies only
///    those spelled in the byte alphabet, the rest being llama.cpp mislabels), then user-defined
///    tokens already in the vocabulary as plain added tokens.
/// 3. TokenizersBackend's named special tokens: the texts of bos/eos/unk/padding ids.
///
/// Every one is `normalized = false`: matched in the raw text.
fn add_special_tokens(tokenizer: &mut GgufTokenizer, meta: &Meta, spm: SpmTokenizer) {
    let byte_level = meta.model == "gpt2";
    let class_defaults: &[&str] = match (meta.model.as_str(), spm) {
        ("gpt2", _) => &["<|endoftext|>"],
        ("llama", SpmTokenizer::Gemma) | ("gemma4", _) => &["<bos>", "<eos>", "<unk>", "<pad>", "<mask>"],
        _ => &["<unk>", "<s>", "</s>"],
    };
    let special = |content: &str| AddedToken::from(content, true).normalized(false);
    let defaults: Vec<AddedToken> =
        class_defaults.iter().filter(|t| tokenizer.token_to_id(t).is_some()).map(|t| special(t)).collect();
    tokenizer.add_special_tokens(&defaults);

    let control: Vec<AddedToken> = meta
        .tokens
        .iter()
        .enumerate()
        .filter(|&(id, t)| {
            meta.token_type(id) == Some(TOKEN_TYPE_CONTROL) && (!byte_level || t.chars().all(in_byte_alphabet))
        })
        .map(|(_, t)| special(t))
        .collect();
    let model = tokenizer.get_model();
    if defaults.iter().chain(&control).all(|t| model.token_to_id(&t.content).is_some()) {
        let all = added_tokens_in_one_list(model, meta, defaults, control);
        tokenizer.add_tokens(&all);
        return;
    }
    tokenizer.add_special_tokens(&control);

    let user_defined: Vec<AddedToken> = meta
        .tokens
        .iter()
        .enumerate()
        .filter(|&(id, t)| meta.token_type(id) == Some(TOKEN_TYPE_USER_DEFINED) && tokenizer.token_to_id(t).is_some())
        .map(|(_, t)| AddedToken::from(*t, false).normalized(false))
        .collect();
    tokenizer.add_tokens(&user_defined);

    let named: Vec<AddedToken> = ["bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id"]
        .iter()
        .filter_map(|key| meta.named_token(key))
        .filter(|t| tokenizer.token_to_id(t).is_some() && !tokenizer.get_added_tokens_decoder().values().any(|a| a.content == *t))
        .map(special)
        .collect();
    tokenizer.add_special_tokens(&named);
}

/// The four lists of [`add_special_tokens`] as one, when every token of the first two is in
/// the model's vocabulary. Then no token gets a new id, and one `add_tokens` call over the
/// lists in order leaves what four calls leave (tokenizers added_vocabulary.rs `add_tokens`
/// handles its tokens one by one; between calls only the counter for new ids and the matcher
/// rebuilt at the end of each call differ), with the matcher of some 6,000 special tokens
/// (Gemma 3) built once rather than three times. The filters are the four calls' own: a text
/// known to the tokenizer is one the model knows, as everything added so far is.
fn added_tokens_in_one_list(model: &GgufBpe, meta: &Meta, defaults: Vec<AddedToken>, control: Vec<AddedToken>) -> Vec<AddedToken> {
    let user_defined: Vec<AddedToken> = meta
        .tokens
        .iter()
        .enumerate()
        .filter(|&(id, t)| meta.token_type(id) == Some(TOKEN_TYPE_USER_DEFINED) && model.token_to_id(t).is_some())
        .map(|(_, t)| AddedToken::from(*t, false).normalized(false))
        .collect();
    let mut all = defaults;
    all.extend(control);
    all.extend(user_defined);
    let added: std::collections::HashSet<&str> = all.iter().map(|t| t.content.as_str()).collect();
    let named: Vec<AddedToken> = ["bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id"]
        .iter()
        .filter_map(|key| meta.named_token(key))
        .filter(|t| model.token_to_id(t).is_some() && !added.contains(t))
        .map(|t| AddedToken::from(t, true).normalized(false))
        .collect();
    all.extend(named);
    all
}

impl<'a> Meta<'a> {
    /// Text of the token a `tokenizer.ggml.<key>` id names (ids are range-checked later by
    /// `token_id`; an out-of-range one simply names nothing here).
    fn named_token(&self, key: &str) -> Option<&'a str> {
        self.named_ids.iter().find(|(k, _)| *k == key).and_then(|&(_, id)| self.tokens.get(id).copied())
    }
}

/// HF TokenizersBackend.update_post_processor: single = "[bos:0] $A:0 [eos:0]",
/// pair = single + " [bos:1] $B:1 [eos:1]". Built from pieces rather than parsed from that text,
/// so a token text with spaces or colons cannot break it.
fn post_processor(
    bos: Option<(String, u32)>,
    eos: Option<(String, u32)>,
) -> std::result::Result<TemplateProcessing, String> {
    let piece_special = |t: &str, type_id: u32| serde_json::json!({"SpecialToken": {"id": t, "type_id": type_id}});
    let piece_seq = |s: &str, type_id: u32| serde_json::json!({"Sequence": {"id": s, "type_id": type_id}});
    let mut single = Vec::new();
    let mut pair = Vec::new();
    for (seq, type_id) in [("A", 0u32), ("B", 1)] {
        let mut part = Vec::new();
        if let Some((t, _)) = &bos {
            part.push(piece_special(t, type_id));
        }
        part.push(piece_seq(seq, type_id));
        if let Some((t, _)) = &eos {
            part.push(piece_special(t, type_id));
        }
        if seq == "A" {
            single = part.clone();
        }
        pair.extend(part);
    }
    let mut specials = Vec::new();
    for (t, id) in bos.iter().chain(eos.iter()) {
        if !specials.iter().any(|(s, _): &(String, u32)| s == t) {
            specials.push((t.clone(), *id));
        }
    }
    let processor = serde_json::json!({
        "type": "TemplateProcessing",
        "single": single,
        "pair": pair,
        "special_tokens": specials.iter().map(|(t, id)| (t.clone(), serde_json::json!({"id": t, "ids": [id], "tokens": [t]}))).collect::<serde_json::Map<_, _>>(),
    });
    serde_json::from_value(processor).map_err(|e| format!("post-processor: {e}"))
}

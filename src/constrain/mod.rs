//! Structured output: a constraint holds a grammar (a JSON schema, llguidance's Lark, llama.cpp's
//! GBNF, or a regular expression) and says, after the tokens it has taken, which tokens may come next.
//! Grammars are compiled and run by llguidance against a token table made from the pack's own
//! vocabulary: each token's raw bytes (`Vocab::token_bytes`), special tokens marked as toktrie
//! expects (0xFF then their text), the pack's stop tokens (end-of-turn included) as the EOS set,
//! and packlm's tokenizer for the text a grammar forces. The table and llguidance's factory are
//! built once per model, at the first constraint, and shared by every constraint of it.
//!
//! A stop token is allowed exactly where the grammar may end, and taking one finishes the
//! constraint. A constraint of one model is refused by a session of another.

use std::collections::HashMap;
use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenizerEnv};

use crate::error::{Error, Result, Status};
use crate::pack::vocab::{TokenKind, Vocab};

pub mod gbnf;

/// Most bytes of grammar text a constraint is made from: 4 MiB (a schema or grammar past that
/// is `ErrLimitExceeded`).
pub const MAX_GRAMMAR_BYTES: usize = 4 << 20;

/// What a constraint's text is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrammarKind {
    /// A JSON schema (draft 2020-12 as llguidance reads it); the output is JSON that validates,
    /// laid out with ", " between items and ": " after keys and no other whitespace (unless the
    /// schema sets llguidance's own "x-guidance" options).
    JsonSchema,
    /// llguidance's Lark-like grammar.
    Lark,
    /// A regular expression the whole output must match.
    Regex,
    /// llama.cpp's GBNF grammar text, translated to llguidance's grammar (`gbnf.rs` says how).
    Gbnf,
}

impl GrammarKind {
    /// The kind of grammar text: GBNF when a line defines a rule with `::=` (`name ::= ...`,
    /// comments aside), else llguidance's Lark. What `packlm generate --grammar FILE` reads.
    pub fn of_grammar(text: &str) -> GrammarKind {
        let gbnf = text.lines().any(|line| {
            let line = line.split('#').next().unwrap_or("").trim_start();
            let name = line.trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '-');
            name.len() < line.len() && name.trim_start().starts_with("::=")
        });
        if gbnf {
            GrammarKind::Gbnf
        } else {
            GrammarKind::Lark
        }
    }
}

/// Tokenizes plain text with the model's tokenizer (no special tokens, no BOS).
type Encode = Arc<dyn Fn(&str) -> Result<Vec<u32>> + Send + Sync>;

/// The pack's vocabulary as llguidance sees it.
struct PackTokEnv {
    trie: TokTrie,
    encode: Encode,
}

impl TokenizerEnv for PackTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }
    /// Text is tokenized by the pack's tokenizer (special-token text as plain text, no BOS);
    /// bytes that are not UTF-8 by the trie's longest matches.
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<u32> {
        match std::str::from_utf8(s) {
            Ok(text) => (self.encode)(text).unwrap_or_else(|_| self.trie.greedy_tokenize(s)),
            Err(_) => self.trie.greedy_tokenize(s),
        }
    }
}

/// A model's token table and grammar factory, shared by its constraints.
pub struct ConstraintEnv {
    factory: ParserFactory,
    /// Identifies the model (its `Arc`'s address while it lives): a constraint of one model
    /// is refused by another's session.
    pub(crate) model_key: usize,
    pub(crate) vocab_size: usize,
    /// The stop tokens: the EOS set.
    stop: Vec<u32>,
    /// Control tokens by their text: a GBNF grammar's `<name>`.
    specials: HashMap<String, u32>,
}

impl ConstraintEnv {
    /// Entries of the vocabulary (the length of a logits row a mask covers).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The table of `vocab` (its stop tokens the EOS set). `encode` tokenizes plain text.
    pub(crate) fn new(vocab: &Vocab, model_key: usize, encode: Encode) -> Result<ConstraintEnv> {
        let n = vocab.size;
        let mut words: Vec<Vec<u8>> = Vec::with_capacity(n);
        let mut specials = HashMap::new();
        for id in 0..n as u32 {
            let w = match vocab.token_kind(id) {
                Some(TokenKind::Control) => {
                    let text = vocab.token_text(id).unwrap_or_default();
                    specials.entry(text.to_string()).or_insert(id);
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend_from_slice(text.as_bytes());
                    w
                }
                _ => vocab.token_bytes(id, false).unwrap_or_default(),
            };
            words.push(w);
        }
        let stop: Vec<u32> = if vocab.stop.is_empty() { vocab.eos.clone() } else { vocab.stop.clone() };
        let Some(&eos) = stop.first() else {
            return Err(Error::unsupported("the pack has no stop token: a constraint needs one to end"));
        };
        let mut info = TokRxInfo::new(n as u32, eos);
        info.tok_bos = vocab.bos;
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&stop);
        let env: TokEnv = Arc::new(PackTokEnv { trie, encode });
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| Error::new(Status::ErrTokenizer, format!("the token table: {e}")))?;
        factory.quiet();
        Ok(ConstraintEnv { factory, model_key, vocab_size: n, stop, specials })
    }
}

/// A grammar and the tokens it has taken (see the module comment).
pub struct Constraint {
    env: Arc<ConstraintEnv>,
    matcher: Matcher,
    kind: GrammarKind,
    /// Tokens taken since it was made.
    taken: usize,
    /// Of those, the last ones: stop tokens taken after the grammar had ended, which
    /// llguidance's matcher does not take (it refuses any token once stopped).
    stops_after_end: usize,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint").field("kind", &self.kind).field("taken", &self.taken).finish()
    }
}

impl Clone for Constraint {
    /// An independent copy in the same state.
    fn clone(&self) -> Constraint {
        Constraint { env: self.env.clone(), matcher: self.matcher.deep_clone(), kind: self.kind, taken: self.taken, stops_after_end: self.stops_after_end }
    }
}

/// llguidance's message for a failure, as packlm's error: at most 1,000 bytes of it (it
/// quotes the grammar, which may be megabytes).
fn grammar_error(what: &str, e: impl std::fmt::Display) -> Error {
    let mut m = e.to_string();
    if m.len() > 1000 {
        let cut = (0..=1000).rev().find(|&i| m.is_char_boundary(i)).unwrap_or(0);
        let more = m.len() - cut;
        m.truncate(cut);
        m.push_str(&format!("... ({more} bytes more)"));
    }
    Error::invalid(format!("{what}: {m}"))
}

impl Constraint {
    /// A constraint of `kind` over `text`. Refused: text over MAX_GRAMMAR_BYTES, a NUL byte, a
    /// JSON schema that is not JSON, and anything llguidance refuses, with its message.
    pub fn new(env: Arc<ConstraintEnv>, kind: GrammarKind, text: &str) -> Result<Constraint> {
        Constraint::with_start(env, kind, text, "root")
    }

    /// As `new`; a GBNF grammar starts at rule `root` (llama.cpp's `grammar_root`). Other kinds
    /// ignore it.
    pub fn with_start(env: Arc<ConstraintEnv>, kind: GrammarKind, text: &str, root: &str) -> Result<Constraint> {
        if text.len() > MAX_GRAMMAR_BYTES {
            return Err(Error::new(Status::ErrLimitExceeded, format!("the grammar is {} bytes; at most {MAX_GRAMMAR_BYTES} are taken", text.len())));
        }
        if let Some(at) = text.find('\0') {
            return Err(Error::invalid(format!("the grammar has a NUL byte at offset {at}")));
        }
        let grammar = match kind {
            GrammarKind::JsonSchema => {
                let mut schema: serde_json::Value = serde_json::from_str(text).map_err(|e| grammar_error("the JSON schema is not JSON", e))?;
                // JSON laid out one way: ", " between items, ": " after keys, no other
                // whitespace. With llguidance's default (any whitespace between tokens) a small
                // model can emit whitespace without end and never close the value. A schema
                // with its own "x-guidance" options keeps them.
                if let Some(o) = schema.as_object_mut() {
                    if !o.contains_key("x-guidance") {
                        o.insert("x-guidance".into(), serde_json::json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}));
                    }
                }
                TopLevelGrammar::from_json_schema(schema)
            }
            GrammarKind::Lark => TopLevelGrammar::from_lark(text.to_string()),
            GrammarKind::Regex => TopLevelGrammar::from_regex(text),
            GrammarKind::Gbnf => {
                let lark = gbnf::to_lark(text, root, &|name| env.specials.get(name).copied()).map_err(Error::invalid)?;
                TopLevelGrammar::from_lark(lark)
            }
        };
        // llguidance reports a bad grammar as an error; a panic inside it is caught too, so
        // that a hostile grammar never takes the host down.
        let parser = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| env.factory.create_parser(grammar)))
            .map_err(|_| Error::new(Status::ErrPanic, "the grammar compiler panicked"))?
            .map_err(|e| grammar_error("the grammar was refused", e))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(grammar_error("the grammar was refused", e));
        }
        Ok(Constraint { env, matcher, kind, taken: 0, stops_after_end: 0 })
    }

    pub fn kind(&self) -> GrammarKind {
        self.kind
    }
    /// Tokens taken since it was made (less those rolled back).
    pub fn taken(&self) -> usize {
        self.taken
    }
    pub(crate) fn model_key(&self) -> usize {
        self.env.model_key
    }

    fn failed(&self, what: &str) -> Error {
        Error::invalid(format!("{what}: {}", self.matcher.get_error().unwrap_or_else(|| "the constraint is in an error state".into())))
    }

    /// Which tokens may come next: one bool per vocabulary entry.
    pub fn allowed(&mut self) -> Result<toktrie::SimpleVob> {
        self.matcher.compute_mask_or_eos().map_err(|e| grammar_error("computing the mask", e))
    }

    /// Sets every logit of a token that may not come next to -infinity. `logits` holds at least
    /// the vocabulary (longer rows, as some packs pad theirs, get -infinity past it).
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<()> {
        let allowed = self.allowed()?;
        // A word of the bitset (token t at bit t % 32 of word t / 32) at a time: whole words
        // allowed or refused, as most are, cost one test.
        let words = allowed.as_slice();
        let vocab = self.env.vocab_size;
        for (i, chunk) in logits.chunks_mut(32).enumerate() {
            let valid = vocab.saturating_sub(i * 32).min(32);
            let mut w = words.get(i).copied().unwrap_or(0);
            if valid < 32 {
                w &= (1u32 << valid).wrapping_sub(1);
            }
            match w {
                u32::MAX => {}
                0 => chunk.fill(f32::NEG_INFINITY),
                _ => {
                    for (b, l) in chunk.iter_mut().enumerate() {
                        if w >> b & 1 == 0 {
                            *l = f32::NEG_INFINITY;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether `token` may come next: the parser's check of that one token, without the
    /// vocabulary-wide mask (what `mask` gives for it: tests/constraint.rs checks both).
    pub fn allows(&mut self, token: u32) -> Result<bool> {
        if token as usize >= self.env.vocab_size {
            return Ok(false);
        }
        if self.matcher.is_stopped() {
            return Ok(self.env.stop.contains(&token));
        }
        Ok(self.matcher.validate_tokens(&[token]).map_err(|_| self.failed("checking a token"))? == 1)
    }

    /// Takes `token`; refused (and nothing changes) when the grammar does not allow it. A stop
    /// token once the grammar has ended is taken too (the mask allows only those then).
    pub fn accept(&mut self, token: u32) -> Result<()> {
        if !self.allows(token)? {
            return Err(Error::invalid(format!("token {token} is not allowed by the constraint here")));
        }
        if self.matcher.is_stopped() {
            self.stops_after_end += 1;
        } else {
            self.matcher.consume_token(token).map_err(|_| self.failed("taking a token"))?;
        }
        self.taken += 1;
        Ok(())
    }

    /// How many of `tokens`, from the start, the grammar allows in a row (nothing changes).
    pub fn allowed_prefix(&mut self, tokens: &[u32]) -> Result<usize> {
        let mut n = 0;
        for &t in tokens {
            if self.accept(t).is_err() {
                break;
            }
            n += 1;
        }
        self.rollback(n)?;
        Ok(n)
    }

    /// Undoes the last `n` tokens taken (at most `taken()`).
    pub fn rollback(&mut self, n: usize) -> Result<()> {
        if n > self.taken {
            return Err(Error::invalid(format!("rolling back {n} tokens; the constraint has taken {}", self.taken)));
        }
        let phantom = n.min(self.stops_after_end);
        self.matcher.rollback(n - phantom).map_err(|_| self.failed("rolling back"))?;
        self.stops_after_end -= phantom;
        self.taken -= n;
        Ok(())
    }

    /// Back to the state it was made in.
    pub fn reset(&mut self) -> Result<()> {
        self.rollback(self.taken)
    }

    /// Whether it has ended: a stop token was taken, or the grammar allows nothing more.
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped()
    }

    /// Whether the output so far is a complete match (a stop token is allowed now).
    pub fn can_end(&mut self) -> Result<bool> {
        self.matcher.is_accepting().map_err(|e| grammar_error("asking whether it may end", e))
    }

    /// The tokens the grammar forces next (the run it allows with no choice; empty where it
    /// has a choice). Nothing is taken.
    pub fn forced(&mut self) -> Vec<u32> {
        self.matcher.compute_ff_tokens()
    }
}

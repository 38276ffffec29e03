//! Incremental detokenization: tokens go in one at a time, and only text that no later token
//! can change comes out, so that a host streams a reply without re-detokenizing it.
//!
//! The contract: everything the stream hands out, followed by what `pending` gives at the end,
//! equals `decode(all tokens fed)` byte for byte, and nothing handed out is ever contradicted.
//!
//! What may still change, and is held back:
//! - An open run of byte tokens (`<0xNN>`). HF's ByteFallback decoder turns a run of byte
//!   tokens into its string when the whole run is valid UTF-8, and into one U+FFFD per byte
//!   otherwise, so a run's text is known only once a token that is not a byte token closes it
//!   (a complete character inside a run can still become U+FFFD if the run ends badly).
//! - A trailing run of U+FFFD: the byte-level decoder's lossy conversion of an incomplete
//!   UTF-8 sequence, which a later token may complete.
//!
//! Cost: a feed decodes only a window, the tokens since the last point where everything was
//! handed out and the last token closed the text (not a byte token, and its piece not empty),
//! plus that one token as context. The context token makes the decoders' rules about the start
//! of a text (Strip's and Metaspace's leading space, WordPiece's first token) act on the
//! context, whose text was already given, and never on the new tokens: the stream hands out
//! `decode(window)` past `decode(context)`. The decoders packlm meets (byte-level BPE,
//! SentencePiece with byte fallback, Metaspace, WordPiece, none) join per-token pieces with
//! only those exceptions, so the window's text past the context is the whole text's past the
//! same point. A feed inside a run of byte tokens decodes nothing. A decoder whose output
//! does not extend what it gave before (none known) keeps the window growing rather than
//! break the contract; its flush then refuses if the whole text contradicts the stream.
//!
//! Special tokens that the stream skips are left out of the window altogether: `decode` drops
//! them before its decoder runs, so they change nothing (and do not close a byte run).

use crate::error::{Error, Result, Status};
use crate::pack::vocab::{TokenKind, Vocab};

#[derive(Clone, Debug, Default)]
pub struct DecodeStream {
    skip_special: bool,
    /// The context token (when the window has moved on from the start of the stream) followed
    /// by the tokens fed since.
    window: Vec<u32>,
    /// The part of `decode(window)` already handed out (the context's text included).
    given: String,
    /// Whether the window's last token is a byte token: a run is open.
    in_run: bool,
    /// What `peek` found for its token, for `commit` to apply without decoding again.
    peeked: Option<(u32, Step)>,
}

/// The effect of feeding one token.
#[derive(Clone, Debug)]
struct Step {
    text: String,
    /// A skipped special token: nothing changes.
    skipped: bool,
    byte: bool,
    /// After the token everything is handed out and the token closes the text: the window
    /// restarts at it, and this is `decode([token])`.
    restart: Option<String>,
}

impl DecodeStream {
    pub fn new(skip_special: bool) -> DecodeStream {
        DecodeStream { skip_special, ..Default::default() }
    }

    /// The text that feeding `id` would hand out, without feeding it: the stream is unchanged
    /// until [`DecodeStream::commit`] is called with the same id and text. An id outside the
    /// vocabulary gives ErrTokenOutOfRange.
    pub fn peek(&mut self, vocab: &Vocab, id: u32) -> Result<String> {
        let step = self.step(vocab, id)?;
        let text = step.text.clone();
        self.peeked = Some((id, step));
        Ok(text)
    }

    /// Feeds `id`, whose output `text` came from [`DecodeStream::peek`].
    pub fn commit(&mut self, id: u32, text: &str) {
        let step = match self.peeked.take() {
            Some((peeked, step)) if peeked == id && step.text == text => step,
            // Not what was peeked: keep every token (correct, without the window's bound).
            _ => Step { text: text.to_string(), skipped: false, byte: false, restart: None },
        };
        if step.skipped {
            return;
        }
        match step.restart {
            Some(context) => {
                self.window.clear();
                self.window.push(id);
                self.given = context;
            }
            None => {
                self.window.push(id);
                self.given.push_str(&step.text);
            }
        }
        self.in_run = step.byte;
    }

    /// What is held back (a trailing incomplete sequence or byte run decodes as `decode` gives
    /// it), without emptying the stream; [`DecodeStream::reset`] empties it.
    pub fn pending(&self, vocab: &Vocab) -> Result<String> {
        let text = vocab.decode(&self.window, self.skip_special)?;
        match text.strip_prefix(self.given.as_str()) {
            Some(rest) => Ok(rest.to_string()),
            None => Err(Error::new(
                Status::ErrTokenizer,
                format!(
                    "this tokenizer's decoder changed text it had already given out ({} bytes) when later tokens came; the stream cannot equal its detokenization",
                    self.given.len()
                ),
            )),
        }
    }

    /// Empties the stream: the next token starts a new text.
    pub fn reset(&mut self) {
        self.window.clear();
        self.given.clear();
        self.in_run = false;
        self.peeked = None;
    }

    fn step(&self, vocab: &Vocab, id: u32) -> Result<Step> {
        vocab.check_ids(&[id])?;
        let piece = vocab.token_text(id).unwrap_or_default();
        if self.skip_special && vocab.token_kind(id) == Some(TokenKind::Control) {
            return Ok(Step { text: String::new(), skipped: true, byte: false, restart: None });
        }
        let byte = fallback_byte(&piece).is_some();
        if byte && self.in_run {
            // The run stays open: what is stable ends where the run began, and was handed out
            // when the run began.
            return Ok(Step { text: String::new(), skipped: false, byte, restart: None });
        }
        let mut ids = Vec::with_capacity(self.window.len() + 1);
        ids.extend_from_slice(&self.window);
        // A byte token opening a run adds nothing stable: the text before it is decoded.
        if !byte {
            ids.push(id);
        }
        let text = vocab.decode(&ids, self.skip_special)?;
        let stable = text.trim_end_matches('\u{FFFD}');
        let Some(new) = stable.strip_prefix(self.given.as_str()) else {
            // Not an extension of what was given: nothing is new yet.
            return Ok(Step { text: String::new(), skipped: false, byte, restart: None });
        };
        let all_given = !byte && stable.len() == text.len();
        let restart = if all_given && !piece.is_empty() { Some(vocab.decode(&[id], self.skip_special)?) } else { None };
        Ok(Step { text: new.to_string(), skipped: false, byte, restart })
    }
}

/// The byte of a token that HF's ByteFallback decoder reads as one (its exact test: six
/// bytes, "<0x", two characters `u8::from_str_radix` takes, ">").
fn fallback_byte(piece: &str) -> Option<u8> {
    if piece.len() == 6 && piece.starts_with("<0x") && piece.ends_with('>') {
        u8::from_str_radix(piece.get(3..5)?, 16).ok()
    } else {
        None
    }
}

//! Streaming generation ([`Generate`]), the streaming detokenizer, drafters and the prefix cache.

use crate::api::{Model, Session};
use crate::engine;
use crate::engine::speculative::Generation;
use crate::error::Result;
use crate::pack::decode_stream::DecodeStream;
use crate::sample::SamplerParams;

pub use crate::engine::draft::{Drafter, NgramDrafter};

/// Turns tokens into text one at a time, handing out only text no later token can change: a
/// character split across tokens is held back until it is whole, and a run of byte tokens
/// (`<0xNN>`) until it ends. Everything [`Detokenizer::feed`] gives, followed by
/// [`Detokenizer::flush`], equals [`Model::detokenize`] of the same tokens; a feed costs the
/// same however long the stream is.
pub struct Detokenizer {
    model: Model,
    stream: DecodeStream,
}

impl Detokenizer {
    /// An empty stream over `model`'s vocabulary; `skip_special` leaves special tokens out.
    pub fn new(model: &Model, skip_special: bool) -> Detokenizer {
        Detokenizer { model: model.clone(), stream: DecodeStream::new(skip_special) }
    }

    /// Feeds `token`; returns the text it completes (possibly empty). An id outside the
    /// vocabulary is refused and the stream left as it was.
    pub fn feed(&mut self, token: u32) -> Result<String> {
        let text = self.peek(token)?;
        self.commit(token, &text);
        Ok(text)
    }

    /// Ends the stream: returns what was held back, and empties the stream for a new text.
    pub fn flush(&mut self) -> Result<String> {
        let text = self.pending()?;
        self.reset();
        Ok(text)
    }

    /// The text feeding `token` would give, the stream unchanged until [`Detokenizer::commit`]
    /// (the C call hands the text to a caller's buffer that may be too small).
    pub(crate) fn peek(&mut self, token: u32) -> Result<String> {
        self.stream.peek(self.model.engine().vocab(), token)
    }

    pub(crate) fn commit(&mut self, token: u32, text: &str) {
        self.stream.commit(token, text)
    }

    /// What is held back, the stream unchanged until [`Detokenizer::reset`].
    pub(crate) fn pending(&self) -> Result<String> {
        self.stream.pending(self.model.engine().vocab())
    }

    pub(crate) fn reset(&mut self) {
        self.stream.reset()
    }
}

/// How [`Session::generate`] chooses and drafts tokens.
pub struct GenerateOptions<'d> {
    /// The most tokens to yield (the session's context bounds it too).
    pub max_tokens: usize,
    /// Greedy by default (`temperature` 0).
    pub sampler: SamplerParams,
    /// The sampler's random state: the same seed gives the same draws on any machine.
    pub seed: u64,
    /// A drafter makes each round propose up to `draft_k` tokens and verify them in one pass;
    /// greedy output is then token for token what plain stepping gives.
    pub drafter: Option<&'d mut (dyn Drafter + 'static)>,
    pub draft_k: usize,
    /// Leaves special tokens out of the yielded text.
    pub skip_special: bool,
    /// The reply follows this grammar: set on the session once the prompt is in (see
    /// [`Session::set_constraint`](crate::Session::set_constraint)); it stays set after.
    pub constraint: Option<crate::Constraint>,
}

impl Default for GenerateOptions<'_> {
    fn default() -> Self {
        GenerateOptions { max_tokens: usize::MAX, sampler: SamplerParams::default(), seed: 0, drafter: None, draft_k: 8, skip_special: true, constraint: None }
    }
}

/// One generated token and the text it completes (possibly empty: see [`Detokenizer`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    pub id: u32,
    pub text: String,
}

/// The iterator of [`Session::generate`]: each item is the next token, chosen as soon as the
/// logits before it exist. It ends at a stop token (not yielded), after `max_tokens`, when the
/// context is full, or after the first error (yielded once). [`Generate::rest`] gives the text
/// still held back at the end.
///
/// ```
/// # fn main() -> packlm::Result<()> {
/// # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny/llama");
/// let model = packlm::Model::open(path)?;
/// let mut session = model.session()?;
/// let prompt = model.tokenize("Hello", true, false)?;
/// let options = packlm::GenerateOptions { max_tokens: 8, ..Default::default() };
/// let mut reply = String::new();
/// let mut stream = session.generate(&prompt, options);
/// for token in &mut stream {
///     reply.push_str(&token?.text);
/// }
/// reply.push_str(&stream.rest()?);
/// # Ok(())
/// # }
/// ```
pub struct Generate<'s> {
    session: &'s mut Session,
    generation: Generation<'s>,
    text: Detokenizer,
}

impl<'s> Generate<'s> {
    pub(crate) fn new(session: &'s mut Session, prompt: &[u32], o: GenerateOptions<'s>) -> Generate<'s> {
        let text = Detokenizer::new(session.model(), o.skip_special);
        let generation = Generation::new(prompt.to_vec(), o.max_tokens, o.sampler, o.seed, o.drafter, o.draft_k).with_constraint(o.constraint.map(|c| c.inner));
        Generate { session, generation, text }
    }

    /// The text held back after the last token (an incomplete character as the tokenizer
    /// decodes it); call once the iterator has ended.
    pub fn rest(&mut self) -> Result<String> {
        self.text.flush()
    }

    /// Counters of the drafts verified so far: (rounds, drafted, accepted).
    pub fn draft_counters(&self) -> (u64, u64, u64) {
        (self.generation.rounds, self.generation.drafted, self.generation.accepted)
    }
}

impl Iterator for Generate<'_> {
    type Item = Result<Token>;
    fn next(&mut self) -> Option<Result<Token>> {
        match self.generation.next_token(self.session.engine_mut()) {
            Ok(Some(id)) => Some(self.text.feed(id).map(|text| Token { id, text })),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }
}

/// A drafter running a smaller model greedily in its own session (it must share the target's
/// vocabulary).
pub struct ModelDrafter {
    inner: engine::draft::ModelDrafter,
}

impl ModelDrafter {
    /// A drafter running `draft` for `target`; refused when their vocabularies differ.
    pub fn new(draft: &Model, target: &Model) -> Result<ModelDrafter> {
        Ok(ModelDrafter { inner: engine::draft::ModelDrafter::new(draft.engine().clone(), target.engine())? })
    }
}

impl Drafter for ModelDrafter {
    fn propose(&mut self, history: &[u32], pending: u32, k: usize) -> Result<Vec<u32>> {
        self.inner.propose(history, pending, k)
    }
}

/// Snapshots keyed by their token history, so that a new prompt starting with the same tokens
/// restores the longest cached prefix instead of recomputing it.
pub struct PrefixCache {
    inner: engine::prefix_cache::PrefixCache,
}

impl PrefixCache {
    /// An empty cache holding at most `capacity_bytes` of snapshots (the oldest go first).
    pub fn new(capacity_bytes: usize) -> PrefixCache {
        PrefixCache { inner: engine::prefix_cache::PrefixCache::new(capacity_bytes) }
    }
    /// Keeps `session`'s state under its token history.
    pub fn store(&mut self, session: &Session) {
        self.inner.store(session.engine())
    }
    /// Restores into `session` the cached state sharing the longest prefix with `prompt`,
    /// keeping at most `prompt.len() - 1` positions (so the prompt's last token is still fed and
    /// gives logits); returns how many prompt tokens the session now holds (0: nothing reused,
    /// the session unchanged).
    pub fn restore_longest(&self, session: &mut Session, prompt: &[u32]) -> Result<usize> {
        self.inner.restore_longest(session.engine_mut(), prompt)
    }
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.inner.bytes()
    }
}

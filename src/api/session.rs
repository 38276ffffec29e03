//! [`Session`]: one conversation's state over a [`Model`], and the calls that drive it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::api::{Adapter, Constraint, ControlVector, EmbedOptions, Embeddings, Generate, GenerateOptions, Model};
use crate::engine;
use crate::error::Result;

pub use crate::engine::speculative::{Acceptance, VerifyOutcome};
pub use crate::engine::{Job, JobResult, VerifyCounters, Want};

/// One sequence's state: the KV planes of the positions it holds, its token history and the
/// last logits.
///
/// Safe to move to another thread; `&mut self` calls make it one thread at a time. Many
/// sessions of one model may run on different threads at once. Every call that fails leaves
/// the session as it was.
pub struct Session {
    inner: engine::Session,
    model: Model,
}

/// One session's part of [`Session::step_many`]: the tokens to feed it and which logits to
/// return.
pub struct StepItem<'a> {
    pub session: &'a mut Session,
    pub tokens: &'a [u32],
    pub want: Want,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("n_past", &self.n_past()).field("n_ctx", &self.n_ctx()).finish()
    }
}

impl Session {
    /// A new, empty session on `model` holding at most `n_ctx` positions (0 = the model's
    /// context length).
    pub fn new(model: &Model, n_ctx: usize) -> Result<Session> {
        Ok(Session { inner: engine::Session::new(model.engine().clone(), n_ctx)?, model: model.clone() })
    }

    /// A new session with this one's exact state: its positions, tokens and last logits, so
    /// that stepping it gives the bits this session would give. The keys and values are shared
    /// copy-on-write in pages, not copied: 16 forks of a long conversation cost about one copy
    /// of its KV plus their own new positions (`kv_family_bytes`). Either session may then be
    /// stepped, truncated, restored or dropped without changing the other.
    pub fn fork(&self) -> Session {
        Session { inner: self.inner.fork(), model: self.model.clone() }
    }

    /// Bytes of keys and values alive for this session and every session it shares them with
    /// through [`Session::fork`] (the one it was forked from, its forks, theirs).
    pub fn kv_family_bytes(&self) -> usize {
        self.inner.kv_family_bytes()
    }

    /// Makes the tokens this session takes from now on follow `constraint` (None: none). From
    /// then on every logits row it hands back, its last logits included, has -infinity for
    /// the tokens the grammar does not allow after that row's token, so any sampler honours
    /// it; a step whose tokens the grammar refuses is refused before it runs; a verify accepts
    /// only drafts the grammar allows and picks the next token under the mask (greedy, or
    /// sampled from the masked distribution). Truncate rolls the constraint back with the
    /// session (below the point it was set, to its start); fork copies it. A snapshot does not
    /// hold it: restore is refused while one is set. In a shared pass (`step_many`,
    /// `run_many`) it applies as when the session is stepped alone. A constraint of another
    /// model is refused.
    pub fn set_constraint(&mut self, constraint: Option<Constraint>) -> Result<()> {
        self.inner.set_constraint(constraint.map(|c| c.inner))
    }

    /// Applies `adapters` (each with its scale, in order) to this session's passes from now
    /// on; an empty list is the base model. Allowed on an empty session only (no positions
    /// held), so that every key and value it holds was computed with the same adapters; a
    /// snapshot carries the set's fingerprint and a session with another set refuses it. An
    /// adapter opened for another model, or a scale that is not finite, is refused.
    pub fn set_adapters(&mut self, adapters: &[(Adapter, f32)]) -> Result<()> {
        let list = adapters
            .iter()
            .map(|(a, s)| (a.inner.clone(), *s))
            .collect();
        let set = engine::adapter::AdapterSet::new(self.model.engine(), list)?;
        self.inner.set_adapters(set)
    }

    /// Adds `control` (None: no vector) to the end of each layer of its range in this
    /// session's passes from now on; the adapters stay. Allowed on an empty session only, as
    /// [`set_adapters`](Self::set_adapters): a snapshot carries the vector's fingerprint and a
    /// session with another one refuses it. A vector made for another model is refused.
    pub fn set_control_vector(&mut self, control: Option<&ControlVector>) -> Result<()> {
        self.inner.set_control_vector(control.map(|c| c.inner.clone()))
    }

    /// The control vector this session's passes add (None when it has none, or one that adds
    /// nothing: all its layers zero).
    pub fn control_vector(&self) -> Option<ControlVector> {
        self.inner.adapters().control().map(|c| ControlVector { inner: c.clone() })
    }

    /// The vectors of `texts` (token ids, as [`Model::tokenize`] gives them with
    /// `add_special`): one per text pooled as `options` says (by default as the pack declares:
    /// sentence-transformers' modules.json, a GGUF's pooling type), through the pack's Dense
    /// layers and normalized when it says so; or one per token with [`Pooling::None`](crate::Pooling::None). All
    /// texts run in one pass over the weights, each attending to itself only; a text's vector
    /// is bit-identical whatever texts share the call. The session's adapters apply; its
    /// positions and tokens are untouched.
    pub fn embed(&mut self, texts: &[&[u32]], options: &EmbedOptions) -> Result<Embeddings> {
        self.inner.embed(texts, options)
    }

    /// Whether the session's constraint has ended (None without one).
    pub fn constraint_finished(&self) -> Option<bool> {
        self.inner.constraint().map(|c| c.is_finished())
    }

    /// The model this session runs.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Positions held.
    pub fn n_past(&self) -> usize {
        self.inner.n_past()
    }

    /// The most positions this session may hold.
    pub fn n_ctx(&self) -> usize {
        self.inner.n_ctx()
    }

    /// The tokens of the positions held, in order.
    pub fn tokens(&self) -> &[u32] {
        self.inner.tokens()
    }

    /// The logits of the last position fed (empty before the first pass and after a truncate).
    pub fn last_logits(&self) -> &[f32] {
        self.inner.last_logits()
    }

    /// Feeds one token; returns its position's logits (n_vocab values).
    pub fn step(&mut self, token: u32) -> Result<Vec<f32>> {
        self.inner.step(token)
    }

    /// Feeds `tokens` in one pass over the weights, bit-identical to stepping them one by one;
    /// returns the logits `want` asks for (none, the last row, or every row, row-major).
    pub fn step_batch(&mut self, tokens: &[u32], want: Want) -> Result<Vec<f32>> {
        self.inner.step_batch(tokens, want)
    }

    /// Runs several sessions of one model in one pass over the weights: each item feeds its
    /// tokens to its session (any count: a prefill beside decode steps), and gets the logits
    /// its `want` asks for, bit-identical to [`Session::step_batch`] on that session alone. On
    /// a CPU the weights dominate a decode step, so N sessions cost little more than one.
    ///
    /// Everything is checked before anything runs, and a failure names the item (`item i:
    /// ...`): every session of one model, each item's tokens as `step_batch` checks them. All
    /// or nothing: after any failure (an abort of any item's session, a logit that is not
    /// finite) every session is as it was.
    ///
    /// ```
    /// # fn main() -> packlm::Result<()> {
    /// # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny/llama");
    /// use packlm::{Session, StepItem, Want};
    /// let model = packlm::Model::open(path)?;
    /// let (mut a, mut b) = (model.session()?, model.session()?);
    /// let prompt_a = model.tokenize("Hello", true, false)?;
    /// let prompt_b = model.tokenize("A longer prompt", true, false)?;
    /// let logits = Session::step_many(&mut [
    ///     StepItem { session: &mut a, tokens: &prompt_a, want: Want::Last },
    ///     StepItem { session: &mut b, tokens: &prompt_b, want: Want::Last },
    /// ])?;
    /// assert_eq!(logits.len(), 2);
    /// assert_eq!(logits[0].len(), model.n_vocab());
    /// # Ok(())
    /// # }
    /// ```
    pub fn step_many(items: &mut [StepItem<'_>]) -> Result<Vec<Vec<f32>>> {
        let mut inner: Vec<(&mut engine::Session, &[u32], Want)> = items.iter_mut().map(|it| (&mut it.session.inner, it.tokens, it.want)).collect();
        engine::Session::step_many(&mut inner)
    }

    /// [`Session::step_many`] with speculative steps among the items: a [`Job::Verify`] scores
    /// its pending token and drafts in the shared pass and is judged as [`Session::verify`]
    /// judges it (the same outcome, state and random draws as alone); a [`Job::Step`] is a
    /// `step_many` item. The same checks, item names and all-or-nothing rule; a failure also
    /// leaves every session's last logits and verify counters as they were. The jobs are spent
    /// by the call (each is left a step of no tokens).
    pub fn run_many(items: &mut [(&mut Session, Job<'_>)]) -> Result<Vec<JobResult>> {
        let mut inner: Vec<(&mut engine::Session, Job)> =
            items.iter_mut().map(|(s, job)| (&mut s.inner, std::mem::replace(job, Job::Step { tokens: &[], want: Want::None }))).collect();
        engine::Session::run_many(&mut inner)
    }

    /// The speculative step as one call: `pending` is the token already chosen from the last
    /// logits, `draft` the tokens proposed after it. One pass over `[pending, draft..]`
    /// accepts the longest valid prefix of the draft (greedy: argmax match; sampled: the
    /// distribution-preserving rejection rule) and chooses the next pending token. The session
    /// then holds `n_past + 1 + n_accepted` positions, as if those tokens had been stepped, and
    /// its last logits are those the next token was chosen from.
    pub fn verify(&mut self, pending: u32, draft: &[u32], acceptance: Acceptance) -> Result<VerifyOutcome> {
        self.inner.verify(pending, draft, acceptance)
    }

    /// Refuses a verify of `k` drafts before any buffer is read: the k + 1 rows must fit the
    /// context, and `k x n_vocab` drafter probabilities (`with_probs`) must be a representable
    /// length, which it returns (0 without).
    pub(crate) fn check_verify_lengths(&self, k: usize, with_probs: bool) -> Result<usize> {
        self.inner.check_verify_lengths(k, with_probs)
    }

    /// Counters of this session's verifies (rounds, drafted and accepted tokens).
    pub fn counters(&self) -> VerifyCounters {
        self.inner.counters()
    }

    /// Rolls back to the first `n_positions` positions, exactly: the next step gives the bits
    /// of a session that only saw those tokens.
    pub fn truncate(&mut self, n_positions: usize) -> Result<()> {
        self.inner.truncate(n_positions)
    }

    /// The session's state as portable bytes: restorable into any session of the same model,
    /// in this process or another, on any backend and precision.
    pub fn snapshot(&self) -> Vec<u8> {
        self.inner.snapshot()
    }

    /// The length of [`Session::snapshot`]'s bytes now.
    pub fn snapshot_len(&self) -> usize {
        self.inner.snapshot_len()
    }

    /// The length a snapshot of this session would have holding `positions` positions (None
    /// when that overflows): a reader of several snapshots in one stream can tell where one
    /// ends from the count in its header.
    pub fn snapshot_len_at(&self, positions: usize) -> Option<usize> {
        self.inner.snapshot_len_at(positions)
    }

    /// Replaces the session's state with a snapshot's. Everything is validated before the
    /// session is touched: bytes from another model, of another format, corrupted, or holding
    /// non-finite values give [`crate::Status::ErrSnapshot`] and change nothing.
    pub fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        self.inner.restore(bytes)
    }

    /// A handle that cancels this session's passes from any thread (checked between layers);
    /// a cancelled call returns [`crate::Status::ErrAborted`] and leaves the session as it was.
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle { flag: self.inner.abort_flag().clone() }
    }

    /// Streams a reply: feeds `prompt` in one pass, then yields one [`Token`](crate::Token) at a time, with
    /// its text, until a stop token (not yielded) or `options.max_tokens`. See [`Generate`].
    pub fn generate<'s>(&'s mut self, prompt: &[u32], options: GenerateOptions<'s>) -> Generate<'s> {
        Generate::new(self, prompt, options)
    }

    pub(crate) fn engine(&self) -> &engine::Session {
        &self.inner
    }

    pub(crate) fn engine_mut(&mut self) -> &mut engine::Session {
        &mut self.inner
    }
}

/// Cancels a session's passes from any thread. Cheap to clone; setting it makes the current
/// and every later pass of the session return [`crate::Status::ErrAborted`] until cleared.
#[derive(Clone, Debug)]
pub struct AbortHandle {
    flag: Arc<AtomicBool>,
}

impl AbortHandle {
    /// Asks the session's passes to stop.
    pub fn abort(&self) {
        self.flag.store(true, Ordering::SeqCst);
    }
    /// Lets passes run again.
    pub fn clear(&self) {
        self.flag.store(false, Ordering::SeqCst);
    }
    /// Whether the flag is set.
    pub fn is_aborted(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }
}


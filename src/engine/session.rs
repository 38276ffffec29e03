//! A session: one sequence's KV planes, the tokens it holds and its last logits, stepped,
//! verified, snapshotted and restored over its model (engine/mod.rs).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::*;

/// Counters of a session's speculative steps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerifyCounters {
    /// packlm_verify calls.
    pub rounds: u64,
    /// Draft tokens scored.
    pub drafted: u64,
    /// Draft tokens accepted.
    pub accepted: u64,
}

/// One session's part of `Session::run_many`.
pub enum Job<'a> {
    /// As `step_batch`: `tokens` fed, the logits `want` asks for returned.
    Step { tokens: &'a [u32], want: Want },
    /// As `verify`: `[pending, draft..]` scored in the shared pass, then judged.
    Verify { pending: u32, draft: &'a [u32], acceptance: speculative::Acceptance<'a> },
}

/// What `Session::run_many` gives a job.
#[derive(Debug)]
pub enum JobResult {
    Logits(Vec<f32>),
    Verified(speculative::VerifyOutcome),
}

/// One sequence: KV planes, the tokens it holds, and the logits of its last position.
/// Used by one thread at a time.
pub struct Session {
    pub(super) model: Arc<Model>,
    /// Created by the model's backend; holds the positions held (the only count of them).
    pub(super) kv: Box<dyn KvStore>,
    /// The token at each held position.
    pub(super) tokens: Vec<u32>,
    /// Logits of the last stepped position (empty before the first step, and after a pass that
    /// asked for none, a truncate or a restore).
    pub(super) last_logits: Vec<f32>,
    /// Most positions this session may hold.
    pub(super) n_ctx: usize,
    /// Set from any thread to stop a long pass (between layers, and inside kernels that check
    /// the pass context: backend::pass).
    pub(super) abort: Arc<AtomicBool>,
    pub(super) counters: VerifyCounters,
    /// Activation buffers kept between short passes (forward::PassBuffers).
    pub(super) bufs: forward::PassBuffers,
    /// The grammar the session's tokens since position `.1` follow (`set_constraint`).
    pub(super) constraint: Option<(Constraint, usize)>,
    /// The LoRA adapters its passes apply (`set_adapters`).
    pub(super) adapters: adapter::AdapterSet,
    /// Whether the last verify took all its drafts: the next projects all its rows to logits
    /// in one tile (`speculative`'s `judge`). Only where time goes depends on it, never a value.
    pub(super) took_all: bool,
}

/// What a pass that fails puts back (`Session::save`, `Session::settle`): the positions, the last
/// logits (taken out while the pass runs), the speculative counters and the constraint's tokens.
pub(super) struct Saved {
    base: usize,
    last: Vec<f32>,
    counters: VerifyCounters,
    taken: Option<usize>,
}

impl Session {
    /// The session as a pass about to run finds it; its last logits are taken out.
    pub(super) fn save(&mut self) -> Saved {
        Saved {
            base: self.n_past(),
            last: std::mem::take(&mut self.last_logits),
            counters: self.counters,
            taken: self.constraint.as_ref().map(|(c, _)| c.taken()),
        }
    }

    /// After the pass: if it failed (`ok` false), the session as `saved` holds it. If it
    /// succeeded and `reuse_row` (a verify, which replaced the last logits by a row of its own),
    /// the old logits' allocation serves the next verify's rows (`PassBuffers::take_row`).
    pub(super) fn settle(&mut self, saved: Saved, ok: bool, reuse_row: bool) {
        if ok {
            if reuse_row {
                self.bufs.keep_row(saved.last);
            }
            return;
        }
        self.kv.truncate(saved.base);
        self.tokens.truncate(saved.base);
        self.last_logits = saved.last;
        self.counters = saved.counters;
        if let (Some((c, _)), Some(taken)) = (&mut self.constraint, saved.taken) {
            // Back to where it was (rolling back what it took cannot fail).
            let _ = c.rollback(c.taken().saturating_sub(taken));
        }
    }

    /// `n_ctx == 0` means the model's context length; more than that is refused.
    pub fn new(model: Arc<Model>, n_ctx: usize) -> Result<Session> {
        // A device backend may hold fewer positions than the model's context (its largest binding).
        let max = model.spec.max_context.min(model.backend.max_positions(&model.spec));
        if n_ctx > max {
            return Err(Error::invalid(if max < model.spec.max_context {
                format!("n_ctx {n_ctx} is larger than the {max} positions the {} backend holds for this model", model.backend.name())
            } else {
                format!("n_ctx {n_ctx} is larger than the model's context length {max}")
            }));
        }
        let n_ctx = if n_ctx == 0 { max } else { n_ctx };
        let kv = model.backend.new_kv(&model.spec.layers);
        Ok(Session { model, kv, tokens: Vec::new(), last_logits: Vec::new(), n_ctx, abort: Arc::new(AtomicBool::new(false)), counters: VerifyCounters::default(), bufs: Default::default(), constraint: None, adapters: Default::default(), took_all: false })
    }

    /// A new session with this one's exact state (positions, tokens, last logits, n_ctx,
    /// counters) whose KV shares this one's storage copy-on-write (`KvStore::fork`): nothing is
    /// copied now, and each session's later steps copy at most one page per plane. Its own
    /// abort flag and buffers. Stepping either never changes the other's bits.
    pub fn fork(&self) -> Session {
        Session {
            model: self.model.clone(),
            kv: self.kv.fork(),
            tokens: self.tokens.clone(),
            last_logits: self.last_logits.clone(),
            n_ctx: self.n_ctx,
            abort: Arc::new(AtomicBool::new(false)),
            counters: self.counters,
            bufs: Default::default(),
            constraint: self.constraint.clone(),
            adapters: self.adapters.clone(),
            took_all: self.took_all,
        }
    }

    /// Bytes of KV storage alive for this session and every session it shares storage with
    /// through `fork` (see `KvStore::family_bytes`).
    pub fn kv_family_bytes(&self) -> usize {
        self.kv.family_bytes()
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }
    /// The token at each held position.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }
    /// Logits of the last stepped position; empty before the first step, after a pass that
    /// asked for none, a truncate or a restore.
    pub fn last_logits(&self) -> &[f32] {
        &self.last_logits
    }
    /// Most positions this session may hold.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }
    /// The flag that stops a pass when set (from any thread); see `abort` above.
    pub fn abort_flag(&self) -> &Arc<AtomicBool> {
        &self.abort
    }
    /// Counters of the session's speculative steps.
    pub fn counters(&self) -> VerifyCounters {
        self.counters
    }

    /// Positions held: kept by the KV store alone.
    pub fn n_past(&self) -> usize {
        self.kv.positions()
    }

    /// Each layer's own KV plane width; None for a layer that reads another layer's plane.
    pub fn plane_widths(&self) -> Vec<Option<usize>> {
        (0..self.kv.n_layers()).map(|l| self.kv.plane_width(l)).collect()
    }

    pub(super) fn check(&self, tokens: &[u32]) -> Result<()> {
        if !self.model.spec.causal {
            return Err(Error::unsupported(
                "the model's attention is bidirectional (an embedding model): it has no next-token logits to step; use embed",
            ));
        }
        if tokens.is_empty() {
            return Err(Error::invalid("no tokens given"));
        }
        // The length first: the ids are read only once the count is known to fit.
        if tokens.len() > self.n_ctx.saturating_sub(self.n_past()) {
            return Err(Error::new(
                Status::ErrContextOverflow,
                format!("{} held + {} new positions exceed the context of {}", self.n_past(), tokens.len(), self.n_ctx),
            ));
        }
        // Tokens index the embedding and, on PLE models, the per-layer table too.
        let vocab = match self.model.spec.per_layer_input {
            Some(p) => self.model.spec.vocab_size.min(p.vocab),
            None => self.model.spec.vocab_size,
        };
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= vocab) {
            return Err(Error::new(Status::ErrTokenOutOfRange, format!("token id {bad} is outside the vocabulary of {vocab}")));
        }
        Ok(())
    }

    /// Runs `tokens` as one pass; returns logits of the wanted rows (rows x vocab).
    /// On any failure the session is unchanged.
    pub fn step_batch(&mut self, tokens: &[u32], want: Want) -> Result<Vec<f32>> {
        self.check(tokens)?;
        self.check_constraint(tokens)?;
        let model = self.model.clone();
        let mut logits = forward::forward(&model, self.kv.as_mut(), &mut self.bufs, tokens, want, &self.abort, &self.adapters)?;
        if let Err(e) = self.constrain_rows(tokens, want, &mut logits) {
            self.kv.truncate(self.tokens.len());
            return Err(e);
        }
        // Want::None skips the output projection (on a 262k vocabulary it costs more than a
        // token's layers), so there are no last logits to keep after it.
        let v = model.spec.vocab_size;
        self.last_logits = if logits.is_empty() { Vec::new() } else { logits[logits.len() - v..].to_vec() };
        self.tokens.extend_from_slice(tokens);
        Ok(logits)
    }

    /// Makes the tokens this session takes from now on follow `c` (None: no constraint). A
    /// constraint of another model is refused. From then on every logits row the session
    /// hands back (its last logits too, masked now) has -infinity for the tokens the grammar
    /// does not allow after that row's token, so any sampler honours it; a step or verify whose
    /// fed tokens the grammar refuses is refused before it runs; a verify accepts only drafts
    /// the grammar allows and picks the next token under the mask. Truncate rolls the
    /// constraint back with the session (below the point it was set, to its start); fork copies
    /// it; a snapshot does not hold it, and restore is refused while one is set.
    pub fn set_constraint(&mut self, c: Option<Constraint>) -> Result<()> {
        let Some(mut c) = c else {
            self.constraint = None;
            return Ok(());
        };
        if c.model_key() != Arc::as_ptr(&self.model) as usize {
            return Err(Error::invalid("the constraint was made for another model"));
        }
        if !self.last_logits.is_empty() {
            let mut masked = self.last_logits.clone();
            c.mask(&mut masked)?;
            self.last_logits = masked;
        }
        self.constraint = Some((c, self.tokens.len()));
        Ok(())
    }

    /// The tokens the session's constraint forces right after `pending` (none without a
    /// constraint, where `pending` is refused, or where the grammar has a choice).
    pub fn forced_after(&mut self, pending: u32) -> Result<Vec<u32>> {
        let Some((c, _)) = &mut self.constraint else { return Ok(Vec::new()) };
        if c.accept(pending).is_err() {
            return Ok(Vec::new());
        }
        let forced = c.forced();
        c.rollback(1)?;
        Ok(forced)
    }

    /// The session's constraint, in the state its tokens left it.
    pub fn constraint(&self) -> Option<&Constraint> {
        self.constraint.as_ref().map(|(c, _)| c)
    }

    /// Refuses `tokens` when the constraint does not allow all of them in a row.
    pub(super) fn check_constraint(&mut self, tokens: &[u32]) -> Result<()> {
        if let Some((c, _)) = &mut self.constraint {
            let n = c.allowed_prefix(tokens)?;
            if n < tokens.len() {
                return Err(Error::invalid(format!("token {} (at {n}) is not allowed by the session's constraint", tokens[n])));
            }
        }
        Ok(())
    }

    /// The constraint takes `tokens` (checked already), masking each logits row of `want` with
    /// the state after that row's token. On failure the constraint is as before.
    pub(super) fn constrain_rows(&mut self, tokens: &[u32], want: Want, logits: &mut [f32]) -> Result<()> {
        let Some((c, _)) = &mut self.constraint else { return Ok(()) };
        let v = self.model.spec.vocab_size;
        let before = c.taken();
        let out = (|| {
            for (i, &t) in tokens.iter().enumerate() {
                c.accept(t)?;
                let row = match want {
                    Want::All => Some(i),
                    Want::Last if i + 1 == tokens.len() => Some(0),
                    _ => None,
                };
                if let Some(r) = row {
                    c.mask(&mut logits[r * v..(r + 1) * v])?;
                }
            }
            Ok(())
        })();
        if out.is_err() {
            let taken = c.taken() - before;
            c.rollback(taken)?;
        }
        out
    }

    /// Runs several sessions of one model in one pass over the weights: `items[i]` feeds its
    /// tokens to its session, as `step_batch` would, and gets the same logits bit for bit.
    /// `run_many` with step jobs only.
    pub fn step_many(items: &mut [(&mut Session, &[u32], Want)]) -> Result<Vec<Vec<f32>>> {
        let mut jobs: Vec<(&mut Session, Job)> = items.iter_mut().map(|(s, tokens, want)| (&mut **s, Job::Step { tokens, want: *want })).collect();
        Ok(Session::run_many(&mut jobs)?
            .into_iter()
            .map(|r| match r {
                JobResult::Logits(l) => l,
                JobResult::Verified(_) => unreachable!("step jobs only"),
            })
            .collect())
    }

    /// Runs several sessions of one model in one pass over the weights: a step job feeds its
    /// tokens as `step_batch` would and gets its logits; a verify job scores `[pending, draft..]`
    /// in the same pass and is judged as `verify` judges it. Each result, and each session's
    /// state after, is that of the job run on its session alone, bit for bit (and the same random
    /// draws for a sampled verify). Checked before anything runs, each failure naming the item:
    /// every session of the same model, each job's tokens as its lone call checks them. All or
    /// nothing: on any failure (abort of any item's session, a logit that is not finite, a
    /// panic) every session is unchanged: positions, tokens, last logits and verify counters.
    /// The pass keeps the first item's activation buffers.
    pub fn run_many(items: &mut [(&mut Session, Job)]) -> Result<Vec<JobResult>> {
        let Some(first) = items.first() else {
            return Err(Error::invalid("no items given"));
        };
        let model = first.0.model.clone();
        let named = |i: usize, e: Error| Error::new(e.status, format!("item {i}: {}", e.message));
        // Each verify's rows, [pending, draft..].
        let mut verify_rows: Vec<Vec<u32>> = Vec::with_capacity(items.len());
        for (i, (s, job)) in items.iter_mut().enumerate() {
            if !Arc::ptr_eq(&s.model, &model) {
                return Err(Error::invalid(format!("item {i}: its session belongs to another model than item 0's")));
            }
            // A session's constraint checks the tokens it is fed (a verify's drafts are judged).
            match job {
                Job::Step { tokens, .. } => {
                    s.check(tokens).map_err(|e| named(i, e))?;
                    s.check_constraint(tokens).map_err(|e| named(i, e))?;
                    verify_rows.push(Vec::new());
                }
                Job::Verify { pending, draft, acceptance } => {
                    verify_rows.push(s.verify_rows(*pending, draft, acceptance).map_err(|e| named(i, e))?);
                    s.check_constraint(&[*pending]).map_err(|e| named(i, e))?;
                }
            }
        }
        // What a failure restores.
        let saved: Vec<Saved> = items.iter_mut().map(|(s, _)| s.save()).collect();
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Session::run_many_pass(&model, items, &verify_rows)));
        let ok = matches!(out, Ok(Ok(_)));
        for ((s, job), saved) in items.iter_mut().zip(saved) {
            s.settle(saved, ok, matches!(job, Job::Verify { .. }));
        }
        match out {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// The pass and the judging of `run_many`, its checks done; a failure leaves the restoring
    /// to it.
    pub(super) fn run_many_pass(model: &Arc<Model>, items: &mut [(&mut Session, Job)], verify_rows: &[Vec<u32>]) -> Result<Vec<JobResult>> {
        let mut bufs = std::mem::take(&mut items[0].0.bufs);
        let many = {
            let mut fitems: Vec<forward::Item> = items
                .iter_mut()
                .zip(verify_rows)
                .map(|((s, job), rows)| {
                    let (tokens, want, hidden) = match job {
                        Job::Step { tokens, want } => (*tokens, *want, false),
                        Job::Verify { .. } => (rows.as_slice(), Want::None, true),
                    };
                    forward::Item { kv: s.kv.as_mut(), tokens, want, hidden, abort: &s.abort, adapters: &s.adapters }
                })
                .collect();
            forward::forward_many(model, &mut fitems, &mut bufs)
        };
        items[0].0.bufs = bufs;
        let mut many = many?;
        let v = model.spec.vocab_size;
        let mut out = Vec::with_capacity(items.len());
        for (i, ((s, job), rows)) in items.iter_mut().zip(verify_rows).enumerate() {
            match std::mem::replace(job, Job::Step { tokens: &[], want: Want::None }) {
                Job::Step { tokens, want } => {
                    let mut l = std::mem::take(&mut many.logits[i]);
                    s.constrain_rows(tokens, want, &mut l).map_err(|e| Error::new(e.status, format!("item {i}: {}", e.message)))?;
                    s.last_logits = if l.is_empty() { Vec::new() } else { l[l.len() - v..].to_vec() };
                    s.tokens.extend_from_slice(tokens);
                    *job = Job::Step { tokens, want };
                    out.push(JobResult::Logits(l));
                }
                Job::Verify { acceptance, .. } => {
                    let (xi, row0) = many.hidden[i].expect("a verify's rows are kept");
                    s.tokens.extend_from_slice(rows);
                    let outcome = s.judge(model, &many.xs[xi], row0, rows, acceptance).map_err(|e| Error::new(e.status, format!("item {i}: {}", e.message)))?;
                    // The job is spent; its kind stays for `run_many`'s bookkeeping.
                    *job = Job::Verify { pending: rows[0], draft: &[], acceptance: speculative::Acceptance::Greedy };
                    out.push(JobResult::Verified(outcome));
                }
            }
        }
        Ok(out)
    }

    /// One position.
    pub fn step(&mut self, token: u32) -> Result<Vec<f32>> {
        self.step_batch(&[token], Want::Last)
    }

    /// Keeps exactly the first `n` positions (n <= n_past). The logits of the new last position
    /// are not kept (`last_logits` becomes empty): step the next token to continue.
    pub fn truncate(&mut self, n: usize) -> Result<()> {
        if n > self.n_past() {
            return Err(Error::invalid(format!("cannot truncate to {n} positions: the session holds {}", self.n_past())));
        }
        if n < self.n_past() {
            if let Some((c, start)) = &mut self.constraint {
                if n >= *start {
                    c.rollback(self.tokens.len() - n)?;
                } else {
                    c.reset()?;
                    *start = n;
                }
            }
            self.kv.truncate(n);
            self.tokens.truncate(n);
            self.last_logits.clear();
        }
        Ok(())
    }

    /// A snapshot holds no constraint state, so a restore could leave a constraint out of step
    /// with the tokens: refused while one is set (`set_constraint(None)` first).
    pub(super) fn refuse_restore_with_constraint(&self) -> Result<()> {
        if self.constraint.is_some() {
            return Err(Error::invalid("the session holds a constraint: a snapshot does not hold its state, so set it to none before a restore"));
        }
        Ok(())
    }

    /// The LoRA adapters this session's passes apply, with their scales, in order (empty:
    /// the base model). Allowed on an empty session only (no positions held): the keys and
    /// values a session holds are then all computed with the same adapters, so that a snapshot
    /// (whose fingerprint includes the set) and every later step are those of a session that
    /// always had them. `truncate(0)` first to change them mid-conversation.
    pub fn set_adapters(&mut self, adapters: adapter::AdapterSet) -> Result<()> {
        if self.n_past() > 0 {
            return Err(Error::invalid(format!(
                "the session holds {} positions: adapters change on an empty session only (truncate to 0 first)",
                self.n_past()
            )));
        }
        self.adapters = adapters.with_control(&self.model, self.adapters.control().cloned())?;
        Ok(())
    }

    /// The control vector this session's passes add at the end of each layer of its range
    /// (engine/control.rs), or none. Allowed on an empty session only, as `set_adapters` (the
    /// set's fingerprint includes it); the adapters are kept.
    pub fn set_control_vector(&mut self, control: Option<Arc<control::ControlVector>>) -> Result<()> {
        if self.n_past() > 0 {
            return Err(Error::invalid(format!(
                "the session holds {} positions: a control vector changes on an empty session only (truncate to 0 first)",
                self.n_past()
            )));
        }
        self.adapters = self.adapters.with_control(&self.model, control)?;
        Ok(())
    }

    /// The session's adapters.
    pub fn adapters(&self) -> &adapter::AdapterSet {
        &self.adapters
    }

    /// What a snapshot of this session carries and a restore into it checks: the model's
    /// fingerprint, mixed with the adapter set's hash when it has adapters (so that a snapshot
    /// is refused by a session with another set, and one without adapters keeps the model's).
    pub(super) fn state_fingerprint(&self) -> u64 {
        let base = self.model.snapshot_fingerprint();
        if self.adapters.is_empty() {
            base
        } else {
            content_hash::hash_bytes(&self.adapters.hash().to_le_bytes(), base)
        }
    }

    /// A snapshot's fingerprint mismatch, told apart by cause: another adapter set, or
    /// another model.
    pub(super) fn explain_fingerprint(&self, e: Error) -> Error {
        if e.status != Status::ErrSnapshot || !e.message.contains("another model") {
            return e;
        }
        let n = self.adapters.list().len();
        Error::new(
            Status::ErrSnapshot,
            format!(
                "{}: a snapshot holds the fingerprint of the model and the adapter set and control vector it was taken with (this session has {n} adapter{} and {} control vector)",
                e.message,
                if n == 1 { "" } else { "s" },
                if self.adapters.control().is_some() { "a" } else { "no" }
            ),
        )
    }

    /// The session's exact state as portable bytes (see kv::snapshot).
    pub fn snapshot(&self) -> Vec<u8> {
        crate::kv::snapshot::encode(self.kv.as_ref(), &self.tokens, self.state_fingerprint())
    }

    /// Size of `snapshot()` without building it.
    pub fn snapshot_len(&self) -> usize {
        crate::kv::snapshot::encoded_len(self.kv.as_ref())
    }

    /// The length of a snapshot of this session holding `positions` positions (None on overflow).
    pub fn snapshot_len_at(&self, positions: usize) -> Option<usize> {
        crate::kv::snapshot::encoded_len_at(&self.plane_widths(), positions)
    }

    /// Replaces the state with a snapshot's; everything is validated first, so on failure the
    /// session is unchanged. `last_logits` becomes empty, as after truncate.
    pub fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        self.refuse_restore_with_constraint()?;
        let m = &self.model;
        let d = crate::kv::snapshot::decode(bytes, &m.spec.layers, self.state_fingerprint(), m.spec.vocab_size, self.n_ctx).map_err(|e| self.explain_fingerprint(e))?;
        self.kv.import(d.planes, d.positions)?;
        self.tokens = d.tokens;
        self.last_logits.clear();
        Ok(())
    }

    /// Restores the first `keep` positions of a snapshot (`keep` at most what it holds and at
    /// most this session's context), also when the whole snapshot would not fit this session:
    /// the same as restoring it into a large enough session and truncating to `keep`, which is
    /// exact. Validated like `restore`; on failure the session is unchanged.
    pub fn restore_prefix(&mut self, bytes: &[u8], keep: usize) -> Result<()> {
        self.refuse_restore_with_constraint()?;
        let m = &self.model;
        if keep > self.n_ctx {
            return Err(Error::new(Status::ErrContextOverflow, format!("cannot keep {keep} positions: the session's context is {}", self.n_ctx)));
        }
        let mut d = crate::kv::snapshot::decode(bytes, &m.spec.layers, self.state_fingerprint(), m.spec.vocab_size, m.spec.max_context).map_err(|e| self.explain_fingerprint(e))?;
        if keep > d.positions {
            return Err(Error::invalid(format!("cannot keep {keep} positions: the snapshot holds {}", d.positions)));
        }
        for plane in d.planes.iter_mut().flatten() {
            let width = plane.0.len() / d.positions.max(1);
            plane.0.truncate(keep * width);
            plane.1.truncate(keep * width);
        }
        d.tokens.truncate(keep);
        self.kv.import(d.planes, keep)?;
        self.tokens = d.tokens;
        self.last_logits.clear();
        Ok(())
    }
}

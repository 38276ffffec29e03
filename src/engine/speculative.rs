//! The speculative step as one call (`verify`), and a generation loop built on it.
//!
//! verify(pending, d1..dk): one batched pass over the k+1 rows [pending, d1..dk]; row i's
//! logits judge d(i+1). Greedy: accept while argmax(row i) == d(i+1). Sampled: the standard
//! distribution-preserving rule (Leviathan et al. 2023, Chen et al. 2023): accept d with
//! probability min(1, p(d) / q(d)); on the first rejection draw from the residual
//! norm(max(0, p - q)); when all k are accepted draw the bonus token from row k. A drafter that
//! gives no distribution is a point mass q = delta(d). The rows after the last accepted one are
//! rolled back, so the session holds n_past + 1 + n_accepted positions, exactly as if those
//! tokens had been stepped one by one.

use crate::engine::draft::Drafter;
use crate::backend::all_finite;
use crate::engine::forward::{self, OUTPUT_TILE_ROWS};
use crate::backend::Tensor;
use crate::engine::{Model, Session, Want};
use std::sync::Arc;
use crate::error::{Error, Result, Status};
use crate::sample::{draw, next_f64, probabilities, sample, SamplerParams};

/// How drafted tokens are judged.
pub enum Acceptance<'a> {
    /// Accept while the target's argmax equals the draft.
    Greedy,
    /// Rejection sampling against the target distribution under `params`. `draft_probs`, when
    /// given, holds the drafter's distribution for each drafted token (k rows of n_vocab);
    /// otherwise each draft is a point mass.
    Sampled { params: &'a SamplerParams, draft_probs: Option<&'a [f32]>, rng: &'a mut u64 },
}

#[derive(Clone, Debug, PartialEq)]
pub struct VerifyOutcome {
    pub n_accepted: usize,
    /// The new pending token: the correction, or the bonus token when all were accepted.
    pub next: u32,
}

#[cfg(test)]
thread_local! {
    /// Test-only fault injection: `verify` on this thread panics after its pass, while judging
    /// the drafts. Not compiled into the library.
    pub(crate) static PANIC_IN_ACCEPTANCE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Session {
    /// The speculative step; see the module comment. A row it judges that holds a logit that
    /// is not finite fails it with `ErrNonFinite` (as `forward::forward`). On failure the
    /// session is unchanged, also when it panics (after its pass, while judging the drafts, say): the positions the pass
    /// added and the previous last logits are restored before the panic goes on.
    pub fn verify(&mut self, pending: u32, draft: &[u32], acc: Acceptance) -> Result<VerifyOutcome> {
        // Under a constraint the pending token must be one it allows (the drafts are judged).
        self.check_constraint(&[pending])?;
        let saved = self.save();
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.verify_pass(pending, draft, acc)));
        self.settle(saved, matches!(out, Ok(Ok(_))), true);
        match out {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Refuses a verify of `k` drafts before anything is read or allocated: the k + 1 rows
    /// must fit the context, and with a drafter's distribution, `k x n_vocab` values must be a
    /// representable length. Returns that length (0 without `with_probs`).
    pub fn check_verify_lengths(&self, k: usize, with_probs: bool) -> Result<usize> {
        let held = self.n_past();
        let fits = k.checked_add(1).and_then(|rows| rows.checked_add(held)).is_some_and(|end| end <= self.n_ctx);
        if !fits {
            return Err(Error::new(
                Status::ErrContextOverflow,
                format!("{held} held + 1 pending + {k} drafted positions exceed the context of {}", self.n_ctx),
            ));
        }
        let vocab = self.model.spec.vocab_size;
        match (with_probs, k.checked_mul(vocab)) {
            (false, _) => Ok(0),
            (true, Some(n)) if n.checked_mul(std::mem::size_of::<f32>()).is_some_and(|b| b <= isize::MAX as usize) => Ok(n),
            (true, _) => Err(Error::new(Status::ErrLimitExceeded, format!("draft_probs of {k} drafts x {vocab} values is too large"))),
        }
    }

    /// One pass over [pending, draft..] that keeps the final residual stream, then the output
    /// projection over tiles of at most `OUTPUT_TILE_ROWS` rows, each row judged as soon as its
    /// logits exist; projection stops at the row the new pending token is chosen from, and only
    /// that row's logits are kept. The first tile has the rows the backend projects for about
    /// the time of one (`Backend::rows_for_one`): on a 262k vocabulary the projection of 9
    /// rows at `fast` on AVX2 cost more than the layers, and a draft rejected at its first
    /// token needs one row's logits. After a verify that took all its drafts, the first tile
    /// has every row instead: drafts are taken in runs (a drafter copying text), and for a
    /// verify whose drafts are all taken two tiles read the output matrix twice (Gemma3 at
    /// `fast` on AVX2: the 2-row tile took as long as a step's one-row projection, 20 ms of a
    /// 30 ms step; BENCHMARKS.md). Row i's logits are the bits a projection of all rows at
    /// once gives (backend exactness rule), and the random draws happen in the same order, so
    /// the outcome is that of judging all rows after one full projection, whatever the tiles.
    fn verify_pass(&mut self, pending: u32, draft: &[u32], acc: Acceptance) -> Result<VerifyOutcome> {
        let rows = self.verify_rows(pending, draft, &acc)?;
        let model = self.model.clone();
        let x = forward::forward_hidden(&model, self.kv.as_mut(), &mut self.bufs, &rows, &self.abort, &self.adapters)?;
        self.tokens.extend_from_slice(&rows);
        self.judge(&model, &x, 0, &rows, acc)
    }

    /// A verify's checks, before anything runs; returns its rows, `[pending, draft..]`.
    pub(crate) fn verify_rows(&self, pending: u32, draft: &[u32], acc: &Acceptance) -> Result<Vec<u32>> {
        let vocab = self.model.spec.vocab_size;
        let want_probs = self.check_verify_lengths(draft.len(), matches!(acc, Acceptance::Sampled { draft_probs: Some(_), .. }))?;
        if let Acceptance::Sampled { draft_probs: Some(q), .. } = &acc {
            if q.len() != want_probs {
                return Err(Error::invalid(format!("draft_probs has {} values; {} drafts x {vocab} needed", q.len(), draft.len())));
            }
        }
        let mut rows = Vec::new();
        rows.try_reserve_exact(draft.len() + 1).map_err(|_| Error::new(Status::ErrLimitExceeded, format!("{} drafts cannot be held", draft.len())))?;
        rows.push(pending);
        rows.extend_from_slice(draft);
        self.check(&rows)?;
        Ok(rows)
    }

    /// Judges a verify's `rows` (`[pending, draft..]`), whose pass has run: their final residual
    /// stream is rows `row0..` of `x`, and the session holds them (positions and tokens). Keeps
    /// the pending token and the accepted drafts, and the logits the next token came from.
    pub(crate) fn judge(&mut self, model: &Arc<Model>, x: &Tensor, row0: usize, rows: &[u32], mut acc: Acceptance) -> Result<VerifyOutcome> {
        let model = model.clone();
        let vocab = model.spec.vocab_size;
        let draft = &rows[1..];
        let base = self.tokens.len() - rows.len();
        let mut tile = self.bufs.take_output(&model, rows.len().min(OUTPUT_TILE_ROWS));
        // The row the new token comes from, read from the tile into a buffer the session keeps
        // (the last logits a verify replaced), and kept as the new last logits: no tile is read
        // back whole. A greedy row's argmax is found where its logits lie (`Backend::argmax`),
        // so a row judged and accepted need not be read back; `unread` is the row last judged
        // when `row` does not hold it.
        let mut row = self.bufs.take_row();
        row.resize(vocab, 0.0);
        let mut unread: Option<usize> = None;
        let mut n_accepted = 0;
        let mut chosen: Option<u32> = None;
        let first_tile = if self.took_all { OUTPUT_TILE_ROWS } else { model.backend.rows_for_one().clamp(1, OUTPUT_TILE_ROWS) };
        let mut next_row = 0;
        // Under a constraint each row is read back and masked with the grammar's state after
        // its token (the constraint takes the pending token now, each draft as it is accepted):
        // a draft the grammar refuses has probability 0, so it is rejected, and the next token
        // comes from the masked row, greedy or sampled.
        let constrained = self.constraint.is_some();
        if let Some((c, _)) = &mut self.constraint {
            c.accept(rows[0])?;
        }
        'tiles: while next_row < rows.len() {
            let size = if next_row == 0 { first_tile } else { OUTPUT_TILE_ROWS };
            let ids: Vec<usize> = (next_row..rows.len().min(next_row + size)).collect();
            next_row += ids.len();
            let at: Vec<usize> = ids.iter().map(|&i| row0 + i).collect();
            tile.compute(&model, x, &at, &self.abort)?;
            #[cfg(test)]
            if PANIC_IN_ACCEPTANCE.with(|p| p.get()) {
                panic!("injected panic while judging the drafts");
            }
            for (j, &i) in ids.iter().enumerate() {
                let (best, finite) = match acc {
                    Acceptance::Greedy if !constrained => {
                        let (best, read) = tile.argmax_row(&model, j, &mut row);
                        unread = (!read).then_some(j);
                        (best, if read { all_finite(&row) } else { tile.row_is_finite(&model, j) })
                    }
                    _ => {
                        tile.read_row(&model, j, &mut row);
                        unread = None;
                        (0, all_finite(&row)) // (judged on its logits, not by an argmax)
                    }
                };
                if !finite {
                    if let Err(e) = forward::device_error(&model) {
                        self.kv.truncate(base);
                        self.tokens.truncate(base);
                        return Err(e);
                    }
                    // A row judged must be finite, as the logits a step hands back are
                    // (forward::forward): the pass is run again to name the layer.
                    if unread.is_some() {
                        tile.read_row(&model, j, &mut row);
                    }
                    let column = row.iter().position(|x| !x.is_finite()).unwrap_or(0);
                    let value = row[column];
                    self.kv.truncate(base);
                    self.tokens.truncate(base);
                    return Err(forward::non_finite_error(&model, self.kv.as_mut(), &mut self.bufs, rows, i, column, value, &self.abort, &self.adapters));
                }
                let best = match &mut self.constraint {
                    Some((c, _)) => {
                        c.mask(&mut row)?;
                        crate::sample::argmax(&row)
                    }
                    None => best,
                };
                let row = &row[..];
                let recent = &self.tokens[..base + 1 + i];
                let Some(&d) = draft.get(i) else {
                    // Every draft was accepted: the bonus token comes from the last row.
                    let next = match &mut acc {
                        Acceptance::Greedy => best,
                        Acceptance::Sampled { params, rng, .. } => sample(row, params, recent, rng),
                    };
                    chosen = Some(next);
                    break 'tiles;
                };
                let rejected = match &mut acc {
                    Acceptance::Greedy => Some(best).filter(|&best| best != d),
                    Acceptance::Sampled { params, draft_probs, rng } => {
                        let p = probabilities(row, params, recent);
                        let q_rows: Option<&[f32]> = *draft_probs;
                        let q_of = |t: usize| -> f64 {
                            match q_rows {
                                Some(q) => q[i * vocab + t] as f64,
                                None => (t == d as usize) as u8 as f64,
                            }
                        };
                        let (pd, qd) = (p[d as usize], q_of(d as usize));
                        let accept = qd > 0.0 && next_f64(rng) < (pd / qd).min(1.0);
                        if accept {
                            None
                        } else {
                            // The residual distribution, at the first rejection only.
                            let residual: Vec<f64> = (0..vocab).map(|t| (p[t] - q_of(t)).max(0.0)).collect();
                            let total: f64 = residual.iter().sum();
                            Some(if total > 0.0 { draw(&residual, rng) } else { draw(&p, rng) })
                        }
                    }
                };
                if let Some(next) = rejected {
                    chosen = Some(next);
                    break 'tiles;
                }
                if let Some((c, _)) = &mut self.constraint {
                    c.accept(d)?;
                }
                n_accepted += 1;
            }
        }
        if let Some(j) = unread {
            tile.read_row(&model, j, &mut row);
        }
        self.bufs.keep_output(tile);
        let Some(next) = chosen else {
            // The last row always decides (it has no draft to judge), so this cannot be reached.
            return Err(Error::new(Status::ErrPanic, "verify ended without choosing a token"));
        };
        // Keep pending and the accepted drafts; the row the next token came from gives last_logits.
        // (Not `truncate`: the constraint took only these tokens already.)
        let keep = base + 1 + n_accepted;
        self.kv.truncate(keep);
        self.tokens.truncate(keep);
        self.last_logits = row;
        // A verify without drafts says nothing of the drafter's runs: the last word stands.
        if !draft.is_empty() {
            self.took_all = n_accepted == draft.len();
        }
        self.counters.rounds += 1;
        self.counters.drafted += draft.len() as u64;
        self.counters.accepted += n_accepted as u64;
        Ok(VerifyOutcome { n_accepted, next })
    }
}

/// Tokens and counters of a generation run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Generated {
    pub tokens: Vec<u32>,
    pub drafted: u64,
    pub accepted: u64,
    pub rounds: u64,
}

/// Generates up to `n_new` tokens after `prompt` (stopping at a stop token, which is not
/// included). With a drafter, each round drafts up to `k` tokens and verifies them in one pass;
/// greedy output is then token-for-token what plain greedy stepping gives.
pub fn generate(
    s: &mut Session,
    prompt: &[u32],
    n_new: usize,
    params: &SamplerParams,
    rng: &mut u64,
    drafter: Option<&mut (dyn Drafter + 'static)>,
    k: usize,
) -> Result<Generated> {
    let mut g = Generation::new(prompt.to_vec(), n_new, params.clone(), *rng, drafter, k);
    let mut out = Generated::default();
    while let Some(t) = g.next_token(s)? {
        out.tokens.push(t);
    }
    (out.drafted, out.accepted, out.rounds) = (g.drafted, g.accepted, g.rounds);
    *rng = g.rng;
    Ok(out)
}

/// The generation loop as a state machine that hands out one token at a time (what
/// [`generate`] collects, and what the public streaming iterator yields). A token is handed out
/// as soon as it is chosen; the pass that computes the logits after it runs at the next call.
pub struct Generation<'d> {
    /// The prompt, until the first call prefills it.
    prompt: Option<Vec<u32>>,
    n_new: usize,
    params: SamplerParams,
    pub rng: u64,
    drafter: Option<&'d mut (dyn Drafter + 'static)>,
    k: usize,
    /// Chosen from the last logits; `handed` once it was given out (and so must be fed next).
    pending: u32,
    handed: bool,
    /// Accepted drafts not yet given out.
    queue: std::collections::VecDeque<u32>,
    produced: usize,
    done: bool,
    pub drafted: u64,
    pub accepted: u64,
    pub rounds: u64,
    /// Set on the session once the prompt is in (so that the prompt is not held to it).
    constraint: Option<crate::constrain::Constraint>,
}

impl<'d> Generation<'d> {
    pub fn new(prompt: Vec<u32>, n_new: usize, params: SamplerParams, rng: u64, drafter: Option<&'d mut (dyn Drafter + 'static)>, k: usize) -> Self {
        Generation {
            prompt: Some(prompt),
            n_new,
            params,
            rng,
            drafter,
            k,
            pending: 0,
            handed: false,
            queue: Default::default(),
            produced: 0,
            done: false,
            drafted: 0,
            accepted: 0,
            rounds: 0,
            constraint: None,
        }
    }

    /// The reply follows `c` (set on the session after the prompt's pass).
    pub fn with_constraint(mut self, c: Option<crate::constrain::Constraint>) -> Self {
        self.constraint = c;
        self
    }

    /// The next token, or None at a stop token or after `n_new` tokens. After an error the
    /// generation is over (None from then on).
    pub fn next_token(&mut self, s: &mut Session) -> Result<Option<u32>> {
        let out = self.advance(s);
        if out.is_err() {
            self.done = true;
        }
        out
    }

    fn advance(&mut self, s: &mut Session) -> Result<Option<u32>> {
        if let Some(t) = self.queue.pop_front() {
            self.produced += 1;
            return Ok(Some(t));
        }
        if self.done {
            return Ok(None);
        }
        if let Some(prompt) = self.prompt.take() {
            self.params.check()?;
            s.step_batch(&prompt, Want::Last)?;
            if let Some(c) = self.constraint.take() {
                s.set_constraint(Some(c))?;
            }
            self.choose(s);
        }
        loop {
            if !self.handed {
                if self.produced >= self.n_new || s.model.vocab.stop.contains(&self.pending) {
                    self.done = true;
                    return Ok(None);
                }
                self.handed = true;
                self.produced += 1;
                return Ok(Some(self.pending));
            }
            let room = s.n_ctx.saturating_sub(s.n_past());
            if self.produced >= self.n_new || room == 0 {
                self.done = true;
                return Ok(None);
            }
            let want_k = self.k.min(self.n_new - self.produced).min(room - 1);
            // Under a constraint the grammar's forced run after the pending token (a JSON key,
            // a closing brace) is drafted first, free; the drafter goes on after it.
            let mut draft = if want_k > 0 { s.forced_after(self.pending)? } else { Vec::new() };
            draft.truncate(want_k);
            if let Some(d) = self.drafter.as_deref_mut() {
                if draft.len() < want_k {
                    let mut history = s.tokens.clone();
                    history.push(self.pending);
                    let last = match draft.split_last() {
                        Some((&last, run)) => {
                            history.extend_from_slice(run);
                            last
                        }
                        None => history.pop().unwrap_or(self.pending),
                    };
                    draft.extend(d.propose(&history, last, want_k - draft.len())?);
                }
            }
            if draft.is_empty() {
                s.step(self.pending)?;
                self.choose(s);
                continue;
            }
            let acc = if self.params.temperature <= 0.0 && self.params.repetition_penalty == 1.0 {
                Acceptance::Greedy
            } else {
                Acceptance::Sampled { params: &self.params, draft_probs: None, rng: &mut self.rng }
            };
            let r = s.verify(self.pending, &draft, acc)?;
            self.rounds += 1;
            self.drafted += draft.len() as u64;
            self.accepted += r.n_accepted as u64;
            let mut room_left = self.n_new - self.produced;
            for &t in &draft[..r.n_accepted] {
                if s.model.vocab.stop.contains(&t) || room_left == 0 {
                    self.done = true;
                    break;
                }
                self.queue.push_back(t);
                room_left -= 1;
            }
            self.pending = r.next;
            self.handed = false;
            if let Some(t) = self.queue.pop_front() {
                self.produced += 1;
                return Ok(Some(t));
            }
            if self.done {
                return Ok(None);
            }
        }
    }

    fn choose(&mut self, s: &Session) {
        self.pending = sample(&s.last_logits, &self.params, &s.tokens, &mut self.rng);
        self.handed = false;
    }
}

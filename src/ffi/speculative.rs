//! Sampling and the speculative step: packlm_sample, packlm_verify, drafters.

use crate::{Acceptance, Drafter, ModelDrafter, NgramDrafter, SamplerParams, Session, VerifyOutcome};
use crate::error::{Error, Status};
use crate::ffi::guard::{
    ffi_boundary, free_box, read_prefix, try_mut, try_ref, try_slice, try_slice_mut, write_items, write_prefix, AbiStruct,
};
use crate::ffi::model::packlm_model;
use crate::ffi::session::{packlm_session, session_in_use};

/// Sampler settings. `temperature <= 0` is greedy.
#[repr(C)]
pub struct packlm_sampler_params {
    /// sizeof(packlm_sampler_params) as the caller compiled it.
    pub size: usize,
    pub temperature: f32,
    /// Keep the k most likely tokens; 0 = off.
    pub top_k: u32,
    /// Keep the smallest set with this much probability; 1 = off.
    pub top_p: f32,
    /// Drop tokens below min_p x the top probability; 0 = off.
    pub min_p: f32,
    /// HF's rule over `recent`: divide positive logits, multiply negative ones; 1 = off.
    pub repetition_penalty: f32,
    /// Tokens the repetition penalty applies to (may be NULL when n_recent is 0).
    pub recent: *const u32,
    pub n_recent: usize,
}

// SAFETY: repr(C), starts with the usize size; floats, integers and a raw pointer.
unsafe impl AbiStruct for packlm_sampler_params {
    const NAME: &'static str = "packlm_sampler_params";
    const FIRST_SIZE: usize = std::mem::offset_of!(packlm_sampler_params, n_recent) + std::mem::size_of::<usize>();
    const FIRST_ABI: u32 = 1;
    fn defaults() -> Self {
        packlm_sampler_params {
            size: std::mem::size_of::<packlm_sampler_params>(),
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            recent: std::ptr::null(),
            n_recent: 0,
        }
    }
}

unsafe fn read_sampler<'a>(p: *const packlm_sampler_params, what: &str) -> crate::Result<(SamplerParams, &'a [u32])> {
    let p = read_prefix(p, what)?;
    let params = SamplerParams { temperature: p.temperature, top_k: p.top_k as usize, top_p: p.top_p, min_p: p.min_p, repetition_penalty: p.repetition_penalty };
    params.check()?;
    let recent = try_slice(p.recent, p.n_recent, "params.recent")?;
    Ok((params, recent))
}

/// Draws a token from `n_vocab` logits under `params`, advancing `*rng_state` (any 64-bit seed;
/// the same seed reproduces the same draws on any machine). The token goes to `*token`.
/// Logits that are NaN or +inf, or all -inf, give PACKLM_ERR_INVALID_ARGUMENT naming the first
/// bad index; -inf masks a token out.
#[no_mangle]
pub unsafe extern "C" fn packlm_sample(logits: *const f32, n_vocab: usize, params: *const packlm_sampler_params, rng_state: *mut u64, token: *mut u32) -> Status {
    ffi_boundary!("packlm_sample", {
        let logits = try_slice(logits, n_vocab, "logits")?;
        if logits.is_empty() {
            return Err(Error::invalid("n_vocab is 0"));
        }
        let (p, recent) = read_sampler(params, "params")?;
        let rng = try_mut(rng_state, "rng_state")?;
        let token = try_mut(token, "token")?;
        let mut r = *rng;
        let t = crate::sample(logits, &p, recent, &mut r)?;
        *rng = r;
        *token = t;
        Ok(())
    })
}

/// Greedy acceptance: a draft is kept while it equals the target's argmax.
pub const PACKLM_VERIFY_GREEDY: u32 = 0;
/// Sampled acceptance: the distribution-preserving rejection rule.
pub const PACKLM_VERIFY_SAMPLED: u32 = 1;

/// Parameters of packlm_verify. Re-published in ABI 2: ABI 1 embedded packlm_sampler_params by
/// value (so neither struct could grow); ABI 2 points to it. A caller compiled against ABI 1
/// (whose `size` is the ABI 1 layout's size) is still read as the ABI 1 layout.
#[repr(C)]
pub struct packlm_verify_params {
    /// sizeof(packlm_verify_params) as the caller compiled it.
    pub size: usize,
    /// PACKLM_VERIFY_GREEDY or PACKLM_VERIFY_SAMPLED.
    pub mode: u32,
    /// The target's sampler: required in sampled mode, ignored in greedy mode; its `recent` is
    /// ignored (the session's history is used). Read during the call only.
    pub sampler: *const packlm_sampler_params,
    /// Sampled mode: the drafter's probabilities, k rows of n_vocab; NULL = each draft is a
    /// point mass (n-gram drafts, greedy draft models).
    pub draft_probs: *const f32,
    /// Floats readable at `draft_probs`: fewer than k x n_vocab gives
    /// PACKLM_ERR_BUFFER_TOO_SMALL (the message names the count needed) and nothing is done.
    pub n_draft_probs: usize,
    /// Sampled mode: the random state, advanced in place.
    pub rng_state: *mut u64,
}

// SAFETY: repr(C), starts with the usize size; integers and raw pointers.
unsafe impl AbiStruct for packlm_verify_params {
    const NAME: &'static str = "packlm_verify_params";
    const FIRST_SIZE: usize = std::mem::offset_of!(packlm_verify_params, rng_state) + std::mem::size_of::<*mut u64>();
    const FIRST_ABI: u32 = 2;
    fn defaults() -> Self {
        packlm_verify_params {
            size: std::mem::size_of::<packlm_verify_params>(),
            mode: PACKLM_VERIFY_GREEDY,
            sampler: std::ptr::null(),
            draft_probs: std::ptr::null(),
            n_draft_probs: 0,
            rng_state: std::ptr::null_mut(),
        }
    }
}

/// packlm_verify_params as ABI 1 published it (the sampler embedded by value). Not in the
/// header: packlm_verify recognises it by its size.
#[repr(C)]
struct VerifyParamsAbi1 {
    size: usize,
    mode: u32,
    sampler: packlm_sampler_params,
    draft_probs: *const f32,
    rng_state: *mut u64,
}

// An ABI 1 caller is told apart by its size alone, so no layout of packlm_verify_params may ever
// have the ABI 1 layout's size: when an appended field would make it so, add a reserved field.
const _: () = assert!(std::mem::size_of::<packlm_verify_params>() != std::mem::size_of::<VerifyParamsAbi1>());
// ABI 1 embedded the sampler at its ABI 1 size; it still is.
const _: () = assert!(<packlm_sampler_params as AbiStruct>::FIRST_SIZE == std::mem::size_of::<packlm_sampler_params>());

/// The verify parameters in one form, whichever layout the caller used.
struct VerifyArgs {
    mode: u32,
    sampler: *const packlm_sampler_params,
    draft_probs: *const f32,
    /// None: the ABI 1 layout, whose draft_probs hold k x n_vocab floats by contract.
    n_draft_probs: Option<usize>,
    rng_state: *mut u64,
}

unsafe fn read_verify_params(p: *const packlm_verify_params) -> crate::Result<VerifyArgs> {
    if p.is_null() {
        return Err(Error::new(Status::ErrNullArgument, "params is NULL"));
    }
    // SAFETY: every layout starts with the usize size (read alone: the caller's struct may be
    // smaller than this library's).
    let size = unsafe { std::ptr::read(p as *const usize) };
    if size == std::mem::size_of::<VerifyParamsAbi1>() {
        // SAFETY: the caller's size says it compiled the ABI 1 layout, all of which it gave us.
        let v1 = unsafe { &*(p as *const VerifyParamsAbi1) };
        if v1.mode == PACKLM_VERIFY_SAMPLED && v1.sampler.size != packlm_sampler_params::FIRST_SIZE {
            // Read in sampled mode only (as ABI 1 did). The embedded struct cannot be larger
            // than ABI 1's: it would overlap draft_probs.
            return Err(Error::invalid(format!(
                "params.sampler.size is {}; an ABI 1 packlm_verify_params embeds a packlm_sampler_params of {} bytes",
                v1.sampler.size,
                packlm_sampler_params::FIRST_SIZE
            )));
        }
        return Ok(VerifyArgs { mode: v1.mode, sampler: &v1.sampler, draft_probs: v1.draft_probs, n_draft_probs: None, rng_state: v1.rng_state });
    }
    let v = read_prefix(p, "params").map_err(|e| {
        Error::new(e.status, format!("{} (or the ABI 1 layout's {})", e.message, std::mem::size_of::<VerifyParamsAbi1>()))
    })?;
    Ok(VerifyArgs { mode: v.mode, sampler: v.sampler, draft_probs: v.draft_probs, n_draft_probs: Some(v.n_draft_probs), rng_state: v.rng_state })
}

/// Result of packlm_verify. The caller sets `size`, `logits_out` and (since ABI 2)
/// `logits_capacity`; the library writes the rest.
#[repr(C)]
pub struct packlm_verify_result {
    /// sizeof(packlm_verify_result) as the caller compiled it; set before the call.
    pub size: usize,
    /// Drafted tokens accepted (0..k).
    pub n_accepted: u32,
    /// The new pending token (the correction, or the bonus token when all k were accepted).
    pub next_token: u32,
    /// If not NULL: receives n_vocab logits, those the new pending token was chosen from.
    pub logits_out: *mut f32,
    /// The session's totals: verify calls, drafted tokens, accepted tokens.
    pub rounds: u64,
    pub drafted: u64,
    pub accepted: u64,
    /// Since ABI 2 (set by the caller): floats `logits_out` holds; 0 = n_vocab, unchecked (the
    /// ABI 1 contract). Below n_vocab: PACKLM_ERR_BUFFER_TOO_SMALL, n_vocab goes to
    /// `n_logits`, nothing else is written and the session is unchanged.
    pub logits_capacity: usize,
    /// Since ABI 2 (written by the library): floats written to `logits_out` (n_vocab, or 0
    /// without a buffer), or the floats needed with PACKLM_ERR_BUFFER_TOO_SMALL.
    pub n_logits: usize,
}

// SAFETY: repr(C), starts with the usize size; integers and a raw pointer.
unsafe impl AbiStruct for packlm_verify_result {
    const NAME: &'static str = "packlm_verify_result";
    const FIRST_SIZE: usize = std::mem::offset_of!(packlm_verify_result, accepted) + std::mem::size_of::<u64>();
    const FIRST_ABI: u32 = 1;
    fn defaults() -> Self {
        packlm_verify_result {
            size: std::mem::size_of::<packlm_verify_result>(),
            n_accepted: 0,
            next_token: 0,
            logits_out: std::ptr::null_mut(),
            rounds: 0,
            drafted: 0,
            accepted: 0,
            logits_capacity: 0,
            n_logits: 0,
        }
    }
}

/// The speculative step as one call: `pending` is the token already chosen but not yet fed;
/// `draft` holds `k` proposed tokens after it. One batched pass over [pending, d1..dk]; the
/// longest valid prefix is accepted; the session then holds n_past + 1 + n_accepted positions,
/// exactly as if those tokens had been stepped one by one. Only the first `result->size` bytes
/// of `*result` are written. k + 1 rows that do not fit the session's context return
/// PACKLM_ERR_CONTEXT_OVERFLOW before `draft` or `draft_probs` is read. Logits are computed 16
/// rows at a time, not all k + 1 at once, so the memory a call needs beyond a step_batch of
/// k + 1 rows does not grow with k. Every row judged is checked to be finite
/// (PACKLM_ERR_NON_FINITE otherwise). On failure (bad token, context full, a buffer too small,
/// PACKLM_ERR_NON_FINITE, PACKLM_ERR_ABORTED, PACKLM_ERR_PANIC) the session is unchanged and
/// `*result` is not written, except `n_logits` with PACKLM_ERR_BUFFER_TOO_SMALL for `logits_out`.
#[no_mangle]
pub unsafe extern "C" fn packlm_verify(session: *mut packlm_session, pending: u32, draft: *const u32, k: usize, params: *const packlm_verify_params, result: *mut packlm_verify_result) -> Status {
    ffi_boundary!("packlm_verify", {
        let mut s = session_in_use(session)?;
        let mut call = VerifyCall::read(&s, k, params, result)?;
        let draft = try_slice(draft, k, "draft")?;
        call.check_buffers(&s)?;
        let out = s.verify(pending, draft, call.acceptance())?;
        call.finish(&s, &out)
    })
}

/// A verify's arguments, read and checked before its pass (packlm_verify and the verify items of
/// packlm_step_sessions), and the writing of its result after.
pub(crate) struct VerifyCall<'a> {
    args: VerifyArgs,
    k: usize,
    n_probs: usize,
    r: packlm_verify_result,
    result: *mut packlm_verify_result,
    n_logits: usize,
    /// Read by `check_buffers` in sampled mode.
    sampler: SamplerParams,
    draft_probs: Option<&'a [f32]>,
    rng: Option<&'a mut u64>,
    /// The random state a sampled verify draws from; written back only on success.
    state: u64,
}

impl<'a> VerifyCall<'a> {
    /// Reads `params` and `result` for a verify of `k` drafts on `s`; checks `k` against the
    /// context, and `k x n_vocab`, before any caller buffer is read.
    pub(crate) unsafe fn read(s: &Session, k: usize, params: *const packlm_verify_params, result: *mut packlm_verify_result) -> crate::Result<VerifyCall<'a>> {
        let args = read_verify_params(params)?;
        let r = read_prefix(result, "result")?;
        let with_probs = args.mode == PACKLM_VERIFY_SAMPLED && !args.draft_probs.is_null();
        let n_probs = s.check_verify_lengths(k, with_probs)?;
        let n_logits = if r.logits_out.is_null() { 0 } else { s.model().n_vocab() };
        Ok(VerifyCall { args, k, n_probs, r, result, n_logits, sampler: SamplerParams::default(), draft_probs: None, rng: None, state: 0 })
    }

    /// Checks every buffer before the pass (a refusal leaves the session as it was): the
    /// logits' capacity (PACKLM_ERR_BUFFER_TOO_SMALL writes `n_logits`), the mode, and in
    /// sampled mode the sampler, the drafter's probabilities and the random state.
    pub(crate) unsafe fn check_buffers(&mut self, s: &Session) -> crate::Result<()> {
        let vocab = s.model().n_vocab();
        if self.r.logits_capacity != 0 && self.r.logits_capacity < self.n_logits {
            self.r.n_logits = self.n_logits;
            write_prefix(&self.r, self.result, self.r.size);
            return Err(Error::new(
                Status::ErrBufferTooSmall,
                format!("result.logits_out needs {} floats, result.logits_capacity is {}", self.n_logits, self.r.logits_capacity),
            ));
        }
        match self.args.mode {
            PACKLM_VERIFY_GREEDY => Ok(()),
            PACKLM_VERIFY_SAMPLED => {
                self.sampler = read_sampler(self.args.sampler, "params.sampler")?.0;
                if !self.args.draft_probs.is_null() {
                    if let Some(have) = self.args.n_draft_probs.filter(|&have| have < self.n_probs) {
                        return Err(Error::new(
                            Status::ErrBufferTooSmall,
                            format!("params.draft_probs needs k x n_vocab = {} x {vocab} = {} floats, params.n_draft_probs is {have}", self.k, self.n_probs),
                        ));
                    }
                    self.draft_probs = Some(try_slice(self.args.draft_probs, self.n_probs, "draft_probs")?);
                }
                let rng = try_mut(self.args.rng_state, "rng_state")?;
                self.state = *rng;
                self.rng = Some(rng);
                Ok(())
            }
            other => Err(Error::new(Status::ErrInvalidArgument, format!("verify mode {other} is not GREEDY (0) or SAMPLED (1)"))),
        }
    }

    /// How the drafts are judged (after `check_buffers`).
    pub(crate) fn acceptance(&mut self) -> Acceptance<'_> {
        match self.rng {
            Some(_) => Acceptance::Sampled { params: &self.sampler, draft_probs: self.draft_probs, rng: &mut self.state },
            None => Acceptance::Greedy,
        }
    }

    /// Writes the outcome: the random state, the logits the next token came from (the session's
    /// last logits), and `*result`.
    pub(crate) unsafe fn finish(mut self, s: &Session, out: &VerifyOutcome) -> crate::Result<()> {
        if let Some(rng) = self.rng.take() {
            *rng = self.state;
        }
        if self.n_logits != 0 {
            try_slice_mut(self.r.logits_out, self.n_logits, "logits_out")?.copy_from_slice(s.last_logits());
        }
        let c = s.counters();
        (self.r.n_accepted, self.r.next_token) = (out.n_accepted as u32, out.next);
        (self.r.rounds, self.r.drafted, self.r.accepted, self.r.n_logits) = (c.rounds, c.drafted, c.accepted, self.n_logits);
        write_prefix(&self.r, self.result, self.r.size);
        Ok(())
    }
}

/// A source of drafts (opaque), from packlm_drafter_new_*, freed by packlm_drafter_free.
/// Safe to move to any thread; cannot be used by two threads at once.
pub struct packlm_drafter {
    inner: Box<dyn Drafter + Send>,
}

/// A prompt-lookup drafter: finds the earlier occurrences of the last n tokens (the longest n
/// from `max_ngram` down to 2 that occurred; `max_ngram` 1 allows single-token matches) and
/// proposes the tokens that more than half of them agree followed them, one at a time, ending
/// where they no longer agree. 5 is the library's own default (`packlm generate --draft ngram`).
/// It proposes at most `k` tokens, fewer after its proposals were cut short: half its previous
/// allowance after a cut, twice as many after a proposal taken whole.
/// `*out` is owned by the caller.
#[no_mangle]
pub unsafe extern "C" fn packlm_drafter_new_ngram(max_ngram: u32, out: *mut *mut packlm_drafter) -> Status {
    ffi_boundary!("packlm_drafter_new_ngram", {
        let out = try_mut(out, "out")?;
        if max_ngram == 0 {
            return Err(Error::invalid("max_ngram must be at least 1"));
        }
        *out = Box::into_raw(Box::new(packlm_drafter { inner: Box::new(NgramDrafter::new(max_ngram as usize, (max_ngram as usize).min(2))) }));
        Ok(())
    })
}

/// A drafter running `draft_model` (same tokenizer as `target`) greedily in its own session.
/// The drafter keeps the draft model alive.
#[no_mangle]
pub unsafe extern "C" fn packlm_drafter_new_model(draft_model: *const packlm_model, target: *const packlm_model, out: *mut *mut packlm_drafter) -> Status {
    ffi_boundary!("packlm_drafter_new_model", {
        let d = &try_ref(draft_model, "draft_model")?.inner;
        let t = &try_ref(target, "target")?.inner;
        let out = try_mut(out, "out")?;
        let drafter = ModelDrafter::new(d, t)?;
        *out = Box::into_raw(Box::new(packlm_drafter { inner: Box::new(drafter) }));
        Ok(())
    })
}

/// Proposes up to `k` tokens after the session's history followed by `pending` into
/// `draft_out` (capacity `k`); their count goes to `*n_out` (0 when there is nothing to propose).
/// Any `k` is accepted: fewer tokens come back when the history or the context holds fewer.
#[no_mangle]
pub unsafe extern "C" fn packlm_drafter_propose(drafter: *mut packlm_drafter, session: *const packlm_session, pending: u32, k: usize, draft_out: *mut u32, n_out: *mut usize) -> Status {
    ffi_boundary!("packlm_drafter_propose", {
        let d = try_mut(drafter, "drafter")?;
        let s = session_in_use(session)?;
        let draft = d.inner.propose(s.tokens(), pending, k)?;
        write_items(&draft, draft_out, k, n_out)
    })
}

/// Frees a drafter; NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn packlm_drafter_free(drafter: *mut packlm_drafter) {
    free_box(drafter);
}

//! Sampling and the speculative step: packlm_sample, packlm_verify, drafters.

use crate::engine::draft::{Drafter, ModelDrafter, NgramDrafter};
use crate::engine::speculative::Acceptance;
use crate::error::{Error, Status};
use crate::ffi::guard::{free_box, ffi_boundary, try_mut, try_ref, try_slice, try_slice_mut, write_items};
use crate::ffi::model::packlm_model;
use crate::ffi::session::packlm_session;
use crate::sample::{sample, SamplerParams};

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

fn read_sampler<'a>(p: *const packlm_sampler_params) -> crate::Result<(SamplerParams, &'a [u32])> {
    let p = try_ref(p, "params")?;
    if p.size != std::mem::size_of::<packlm_sampler_params>() {
        return Err(Error::invalid(format!("sampler params size {} expected {}", p.size, std::mem::size_of::<packlm_sampler_params>())));
    }
    let bad = |what: &str, v: f32| Error::invalid(format!("sampler {what} = {v} is out of range"));
    if !p.temperature.is_finite() {
        return Err(bad("temperature", p.temperature));
    }
    if !(p.top_p > 0.0 && p.top_p <= 1.0) {
        return Err(bad("top_p", p.top_p));
    }
    if !(0.0..=1.0).contains(&p.min_p) {
        return Err(bad("min_p", p.min_p));
    }
    if !(p.repetition_penalty > 0.0 && p.repetition_penalty.is_finite()) {
        return Err(bad("repetition_penalty", p.repetition_penalty));
    }
    let recent = try_slice(p.recent, p.n_recent, "params.recent")?;
    Ok((
        SamplerParams { temperature: p.temperature, top_k: p.top_k as usize, top_p: p.top_p, min_p: p.min_p, repetition_penalty: p.repetition_penalty },
        recent,
    ))
}

/// Draws a token from `n_vocab` logits under `params`, advancing `*rng_state` (any 64-bit seed;
/// the same seed reproduces the same draws on any machine). The token goes to `*token`.
#[no_mangle]
pub extern "C" fn packlm_sample(logits: *const f32, n_vocab: usize, params: *const packlm_sampler_params, rng_state: *mut u64, token: *mut u32) -> Status {
    ffi_boundary!("packlm_sample", {
        let logits = try_slice(logits, n_vocab, "logits")?;
        if logits.is_empty() {
            return Err(Error::invalid("n_vocab is 0"));
        }
        let (p, recent) = read_sampler(params)?;
        let rng = try_mut(rng_state, "rng_state")?;
        let token = try_mut(token, "token")?;
        let mut r = *rng;
        let t = sample(logits, &p, recent, &mut r);
        *rng = r;
        *token = t;
        Ok(())
    })
}

/// Greedy acceptance: a draft is kept while it equals the target's argmax.
pub const PACKLM_VERIFY_GREEDY: u32 = 0;
/// Sampled acceptance: the distribution-preserving rejection rule.
pub const PACKLM_VERIFY_SAMPLED: u32 = 1;

#[repr(C)]
pub struct packlm_verify_params {
    /// sizeof(packlm_verify_params) as the caller compiled it.
    pub size: usize,
    /// PACKLM_VERIFY_GREEDY or PACKLM_VERIFY_SAMPLED.
    pub mode: u32,
    /// The target's sampler (sampled mode; its `recent` is ignored: the session's history is used).
    pub sampler: packlm_sampler_params,
    /// Sampled mode: the drafter's probabilities, k rows of n_vocab; NULL = each draft is a
    /// point mass (n-gram drafts, greedy draft models).
    pub draft_probs: *const f32,
    /// Sampled mode: the random state, advanced in place.
    pub rng_state: *mut u64,
}

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
}

/// The speculative step as one call: `pending` is the token already chosen but not yet fed;
/// `draft` holds `k` proposed tokens after it. One batched pass over [pending, d1..dk]; the
/// longest valid prefix is accepted; the session then holds n_past + 1 + n_accepted positions,
/// exactly as if those tokens had been stepped one by one. k + 1 rows that do not fit the
/// session's context return PACKLM_ERR_CONTEXT_OVERFLOW before `draft` or `draft_probs` is read.
/// Logits are computed 16 rows at a time, not all k + 1 at once, so the memory a call needs
/// beyond a step_batch of k + 1 rows does not grow with k. On failure (bad token, context full, PACKLM_ERR_ABORTED, PACKLM_ERR_PANIC)
/// the session is unchanged and `*result` is not written.
#[no_mangle]
pub extern "C" fn packlm_verify(session: *mut packlm_session, pending: u32, draft: *const u32, k: usize, params: *const packlm_verify_params, result: *mut packlm_verify_result) -> Status {
    ffi_boundary!("packlm_verify", {
        let s = &mut try_mut(session, "session")?.inner;
        let p = try_ref(params, "params")?;
        let result = try_mut(result, "result")?;
        if p.size != std::mem::size_of::<packlm_verify_params>() || result.size != std::mem::size_of::<packlm_verify_result>() {
            return Err(Error::invalid("params.size or result.size does not match this library"));
        }
        // k against the context, and k x n_vocab, before any caller buffer is read.
        let with_probs = p.mode == PACKLM_VERIFY_SAMPLED && !p.draft_probs.is_null();
        let n_probs = s.check_verify_lengths(k, with_probs)?;
        let draft = try_slice(draft, k, "draft")?;
        let vocab = s.model().spec().vocab_size;
        let out = match p.mode {
            PACKLM_VERIFY_GREEDY => s.verify(pending, draft, Acceptance::Greedy)?,
            PACKLM_VERIFY_SAMPLED => {
                let (sp, _) = read_sampler(&p.sampler)?;
                let q = if p.draft_probs.is_null() { None } else { Some(try_slice(p.draft_probs, n_probs, "draft_probs")?) };
                let rng = try_mut(p.rng_state, "rng_state")?;
                let mut r = *rng;
                let out = s.verify(pending, draft, Acceptance::Sampled { params: &sp, draft_probs: q, rng: &mut r })?;
                *rng = r;
                out
            }
            other => return Err(Error::new(Status::ErrInvalidArgument, format!("verify mode {other} is not GREEDY (0) or SAMPLED (1)"))),
        };
        if !result.logits_out.is_null() {
            try_slice_mut(result.logits_out, vocab, "logits_out")?.copy_from_slice(s.last_logits());
        }
        result.n_accepted = out.n_accepted as u32;
        result.next_token = out.next;
        result.rounds = s.counters().rounds;
        result.drafted = s.counters().drafted;
        result.accepted = s.counters().accepted;
        Ok(())
    })
}

/// A source of drafts (opaque), from packlm_drafter_new_*, freed by packlm_drafter_free.
/// Safe to move to any thread; cannot be used by two threads at once.
pub struct packlm_drafter {
    inner: Box<dyn Drafter + Send>,
}

/// A prompt-lookup drafter: proposes what followed the latest earlier occurrence of the last
/// n tokens (n from `max_ngram` down to 2; `max_ngram` 1 allows single-token matches).
/// `*out` is owned by the caller.
#[no_mangle]
pub extern "C" fn packlm_drafter_new_ngram(max_ngram: u32, out: *mut *mut packlm_drafter) -> Status {
    ffi_boundary!("packlm_drafter_new_ngram", {
        let out = try_mut(out, "out")?;
        if max_ngram == 0 {
            return Err(Error::invalid("max_ngram must be at least 1"));
        }
        *out = Box::into_raw(Box::new(packlm_drafter { inner: Box::new(NgramDrafter { max_ngram: max_ngram as usize, min_ngram: (max_ngram as usize).min(2) }) }));
        Ok(())
    })
}

/// A drafter running `draft_model` (same tokenizer as `target`) greedily in its own session.
/// The drafter keeps the draft model alive.
#[no_mangle]
pub extern "C" fn packlm_drafter_new_model(draft_model: *const packlm_model, target: *const packlm_model, out: *mut *mut packlm_drafter) -> Status {
    ffi_boundary!("packlm_drafter_new_model", {
        let d = try_ref(draft_model, "draft_model")?.inner.clone();
        let t = &try_ref(target, "target")?.inner;
        let out = try_mut(out, "out")?;
        let drafter = ModelDrafter::new(d, t)?;
        *out = Box::into_raw(Box::new(packlm_drafter { inner: Box::new(drafter) }));
        Ok(())
    })
}

/// Proposes up to `k` tokens after the session's history followed by `pending` into
/// `draft_out` (capacity `k`); their count goes to `*n_out` (0 when there is nothing to propose).
#[no_mangle]
pub extern "C" fn packlm_drafter_propose(drafter: *mut packlm_drafter, session: *const packlm_session, pending: u32, k: usize, draft_out: *mut u32, n_out: *mut usize) -> Status {
    ffi_boundary!("packlm_drafter_propose", {
        let d = try_mut(drafter, "drafter")?;
        let s = &try_ref(session, "session")?.inner;
        let draft = d.inner.propose(s.tokens(), pending, k)?;
        write_items(&draft, draft_out, k, n_out)
    })
}

/// Frees a drafter; NULL is a no-op.
#[no_mangle]
pub extern "C" fn packlm_drafter_free(drafter: *mut packlm_drafter) {
    free_box(drafter);
}

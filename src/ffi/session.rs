//! `packlm_session`: one sequence's state. Owned as `Box<packlm_session>`; it keeps its model
//! alive. Safe to move to another thread; must not be used by two threads at once: every call
//! that reads or writes it takes its in-use flag through `session_in_use`, so a second,
//! concurrent call gets PACKLM_ERR_SESSION_BUSY instead of racing.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

use std::sync::Arc;

use crate::{Job, JobResult, Session, Want};
use crate::ffi::speculative::{packlm_verify_params, packlm_verify_result, VerifyCall};
use crate::error::{Error, Result, Status};
use crate::ffi::guard::{checked_len, ffi_boundary, free_box, read_prefix, try_mut, try_ref, try_slice, try_slice_mut, AbiStruct};
use crate::ffi::model::packlm_model;

/// A conversation's state (opaque): KV planes, positions held, last logits. Created by
/// packlm_session_new, freed by packlm_session_free. Safe to move to any thread; cannot be used
/// by two threads at once (a call made while another runs returns PACKLM_ERR_SESSION_BUSY and
/// does nothing). Many sessions of one model may run in parallel.
pub struct packlm_session {
    /// Reached only through `SessionInUse`, which holds `in_use`.
    inner: UnsafeCell<Session>,
    in_use: AtomicBool,
}

/// The session of a handle, held exclusively until dropped (the flag is lowered on drop, also
/// when a panic unwinds through the call).
pub(crate) struct SessionInUse<'a> {
    handle: &'a packlm_session,
}

/// Takes `session`'s in-use flag, or fails with ErrSessionBusy when another call holds it.
/// Every extern call that reads or writes a session goes through here, once.
pub(crate) unsafe fn session_in_use<'a>(session: *const packlm_session) -> Result<SessionInUse<'a>> {
    let handle = try_ref(session, "session")?;
    if handle.in_use.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        return Err(Error::new(Status::ErrSessionBusy, "the session is in use by a call on another thread"));
    }
    Ok(SessionInUse { handle })
}

impl Deref for SessionInUse<'_> {
    type Target = Session;
    fn deref(&self) -> &Session {
        // SAFETY: this guard holds the in-use flag, so no other reference to the session exists.
        unsafe { &*self.handle.inner.get() }
    }
}

impl DerefMut for SessionInUse<'_> {
    fn deref_mut(&mut self) -> &mut Session {
        // SAFETY: as deref; `&mut self` makes this the only reference made through the guard.
        unsafe { &mut *self.handle.inner.get() }
    }
}

impl Drop for SessionInUse<'_> {
    fn drop(&mut self) {
        self.handle.in_use.store(false, Ordering::Release);
    }
}

/// Options of `packlm_session_new`.
#[repr(C)]
pub struct packlm_session_options {
    /// sizeof(packlm_session_options) as the caller compiled it.
    pub size: usize,
    /// Most positions the session may hold; 0 = the model's context length.
    pub n_ctx: u32,
    // ABI 1's sizeof is 16 on 64-bit targets (4 bytes of trailing padding a caller may leave
    // unset): a field appended here must start past it, so a u32 needs a reserved u32 before it.
}

// SAFETY: repr(C), starts with the usize size, every other field an integer.
unsafe impl AbiStruct for packlm_session_options {
    const NAME: &'static str = "packlm_session_options";
    const FIRST_SIZE: usize = std::mem::offset_of!(packlm_session_options, n_ctx) + std::mem::size_of::<u32>();
    const FIRST_ABI: u32 = 1;
    fn defaults() -> Self {
        packlm_session_options { size: std::mem::size_of::<packlm_session_options>(), n_ctx: 0 }
    }
}

/// `want` of packlm_step_batch: logits of the last row only.
pub const PACKLM_WANT_LAST: u32 = 0;
/// `want` of packlm_step_batch: logits of every row.
pub const PACKLM_WANT_ALL: u32 = 1;
/// `want` of packlm_step_batch: no logits written.
pub const PACKLM_WANT_NONE: u32 = 2;

/// Creates a session on `model` (`options` may be NULL). `*out` receives a session the caller
/// owns (free with packlm_session_free). Sessions of one model may run on different threads
/// at the same time.
#[no_mangle]
pub unsafe extern "C" fn packlm_session_new(model: *const packlm_model, options: *const packlm_session_options, out: *mut *mut packlm_session) -> Status {
    ffi_boundary!("packlm_session_new", {
        let m = &try_ref(model, "model")?.inner;
        let out = try_mut(out, "out")?;
        let n_ctx = if options.is_null() { 0 } else { read_prefix(options, "options")?.n_ctx as usize };
        let s = Session::new(m, n_ctx)?;
        *out = Box::into_raw(Box::new(packlm_session { inner: UnsafeCell::new(s), in_use: AtomicBool::new(false) }));
        Ok(())
    })
}

/// Creates `*out`, a new session with `src`'s exact state (positions, tokens, last logits,
/// n_ctx), as if it had been stepped through the same tokens: stepping it gives the bits `src`
/// would give. Its keys and values are shared with `src` copy-on-write in pages rather than
/// copied, so a fork costs O(1) memory now and each session's later steps copy at most one page
/// per layer: 16 forks of a 2048-token conversation hold about one copy of its KV plus their own
/// new positions. Either session may be stepped, truncated, restored, verified or freed without
/// changing the other; they may run on different threads. The caller owns `*out` (free with
/// packlm_session_free). `src` is read under its in-use flag (PACKLM_ERR_SESSION_BUSY while
/// another call holds it); on failure `*out` is untouched.
#[no_mangle]
pub unsafe extern "C" fn packlm_session_fork(src: *const packlm_session, out: *mut *mut packlm_session) -> Status {
    ffi_boundary!("packlm_session_fork", {
        let s = session_in_use(src)?;
        let out = try_mut(out, "out")?;
        let f = s.fork();
        *out = Box::into_raw(Box::new(packlm_session { inner: UnsafeCell::new(f), in_use: AtomicBool::new(false) }));
        Ok(())
    })
}

/// Bytes of keys and values alive for `session` and every session it shares them with through
/// packlm_session_fork (the session it was forked from, its forks, theirs), into `*bytes`.
#[no_mangle]
pub unsafe extern "C" fn packlm_session_kv_bytes(session: *const packlm_session, bytes: *mut usize) -> Status {
    ffi_boundary!("packlm_session_kv_bytes", {
        let s = session_in_use(session)?;
        *try_mut(bytes, "bytes")? = s.kv_family_bytes();
        Ok(())
    })
}

/// Frees a session; NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn packlm_session_free(session: *mut packlm_session) {
    free_box(session);
}

/// Positions the session holds, into `*n_past`.
#[no_mangle]
pub unsafe extern "C" fn packlm_session_n_past(session: *const packlm_session, n_past: *mut usize) -> Status {
    ffi_boundary!("packlm_session_n_past", {
        let s = session_in_use(session)?;
        *try_mut(n_past, "n_past")? = s.n_past();
        Ok(())
    })
}

/// Feeds one token; when `logits_out` is not NULL it receives n_vocab floats (the buffer's size
/// is implied: see packlm_step_into for a call that takes a capacity), the logits of
/// this position. On failure (token out of range, context full, PACKLM_ERR_NON_FINITE for a
/// logit that is not finite, and PACKLM_ERR_PANIC from a panic inside the pass) the session is
/// unchanged: it is rolled back, never left poisoned.
#[no_mangle]
pub unsafe extern "C" fn packlm_step(session: *mut packlm_session, token: u32, logits_out: *mut f32) -> Status {
    ffi_boundary!("packlm_step", {
        let mut s = session_in_use(session)?;
        let logits = s.step(token)?;
        if !logits_out.is_null() {
            try_slice_mut(logits_out, logits.len(), "logits_out")?.copy_from_slice(&logits);
        }
        Ok(())
    })
}

/// Feeds `m` tokens in one pass over the weights; the result is bit-identical to `m` calls of
/// packlm_step. `want`: PACKLM_WANT_LAST (n_vocab floats written), PACKLM_WANT_ALL
/// (m x n_vocab, row-major) or PACKLM_WANT_NONE; `logits_out` may be NULL to skip them. The
/// buffer's size is implied by `want`, `m` and n_vocab: see packlm_step_batch_into for a call
/// that takes a capacity. The logits handed back are checked to be finite
/// (PACKLM_ERR_NON_FINITE otherwise; PACKLM_WANT_NONE checks none). On failure the session is
/// unchanged, PACKLM_ERR_PANIC included (the pass is rolled back).
#[no_mangle]
pub unsafe extern "C" fn packlm_step_batch(session: *mut packlm_session, tokens: *const u32, m: usize, want: u32, logits_out: *mut f32) -> Status {
    ffi_boundary!("packlm_step_batch", {
        let mut s = session_in_use(session)?;
        let tokens = try_slice(tokens, m, "tokens")?;
        let want = if logits_out.is_null() { Want::None } else { read_want(want)? };
        let logits = s.step_batch(tokens, want)?;
        if !logits.is_empty() {
            try_slice_mut(logits_out, logits.len(), "logits_out")?.copy_from_slice(&logits);
        }
        Ok(())
    })
}

fn read_want(want: u32) -> crate::Result<Want> {
    match want {
        PACKLM_WANT_LAST => Ok(Want::Last),
        PACKLM_WANT_ALL => Ok(Want::All),
        PACKLM_WANT_NONE => Ok(Want::None),
        other => Err(Error::new(Status::ErrInvalidArgument, format!("want {other} is not LAST (0), ALL (1) or NONE (2)"))),
    }
}

/// Floats a pass over `m` rows writes for `want`: 0, n_vocab, or m x n_vocab (checked).
fn logits_len(want: Want, m: usize, n_vocab: usize) -> crate::Result<usize> {
    match want {
        Want::None => Ok(0),
        Want::Last => Ok(n_vocab),
        Want::All => checked_len(m, n_vocab, "m x n_vocab"),
    }
}

/// Refuses a capacity below `need` floats: PACKLM_ERR_BUFFER_TOO_SMALL, `need` into `*n_logits`.
fn check_capacity(need: usize, capacity: usize, n_logits: &mut usize) -> crate::Result<()> {
    if capacity < need {
        *n_logits = need;
        return Err(Error::new(Status::ErrBufferTooSmall, format!("logits_out needs {need} floats, its capacity is {capacity}")));
    }
    Ok(())
}

/// packlm_step with a capacity (since ABI 2): `logits_out` holds `capacity` floats (NULL with
/// capacity 0 skips the logits). On success `*n_logits` receives the floats written (n_vocab,
/// or 0 without a buffer). A capacity below n_vocab gives PACKLM_ERR_BUFFER_TOO_SMALL with
/// n_vocab in `*n_logits`; then nothing else is written and the session is unchanged.
#[no_mangle]
pub unsafe extern "C" fn packlm_step_into(session: *mut packlm_session, token: u32, logits_out: *mut f32, capacity: usize, n_logits: *mut usize) -> Status {
    packlm_step_batch_into(session, &token, 1, PACKLM_WANT_LAST, logits_out, capacity, n_logits)
}

/// packlm_step_batch with a capacity (since ABI 2): `logits_out` holds `capacity` floats (NULL
/// with capacity 0 skips the logits). On success `*n_logits` receives the floats written:
/// n_vocab for PACKLM_WANT_LAST, m x n_vocab for PACKLM_WANT_ALL, 0 for PACKLM_WANT_NONE or
/// without a buffer. A smaller capacity gives PACKLM_ERR_BUFFER_TOO_SMALL with the floats
/// needed in `*n_logits`; then nothing else is written and the session is unchanged.
#[no_mangle]
pub unsafe extern "C" fn packlm_step_batch_into(
    session: *mut packlm_session,
    tokens: *const u32,
    m: usize,
    want: u32,
    logits_out: *mut f32,
    capacity: usize,
    n_logits: *mut usize,
) -> Status {
    ffi_boundary!("packlm_step_batch_into", {
        let mut s = session_in_use(session)?;
        let n_logits = try_mut(n_logits, "n_logits")?;
        if m == 0 {
            return Err(Error::invalid("m is 0: no tokens given"));
        }
        let want = read_want(want)?;
        let want = if logits_out.is_null() && capacity == 0 { Want::None } else { want };
        let need = logits_len(want, m, s.model().n_vocab())?;
        check_capacity(need, capacity, n_logits)?;
        let tokens = try_slice(tokens, m, "tokens")?;
        let out = try_slice_mut(logits_out, need, "logits_out")?;
        let logits = s.step_batch(tokens, want)?;
        out.copy_from_slice(&logits);
        *n_logits = need;
        Ok(())
    })
}

/// One session's part of packlm_step_sessions: a step (`verify` NULL) or a verify. Its layout
/// is fixed (it carries no `size` and never grows: a later ABI that needs more adds a new struct
/// and call).
#[repr(C)]
pub struct packlm_step_item {
    /// The session to feed: one of the call's model, named by one item only.
    pub session: *mut packlm_session,
    /// `n_tokens` tokens (at least 1): a prefill or a decode step alike. For a verify,
    /// `tokens[0]` is the pending token and `tokens[1..n_tokens]` the draft.
    pub tokens: *const u32,
    pub n_tokens: usize,
    /// A step: PACKLM_WANT_LAST, PACKLM_WANT_ALL or PACKLM_WANT_NONE, as in
    /// packlm_step_batch_into. Unread for a verify.
    pub want: u32,
    /// A step's logits: `capacity` floats (NULL with capacity 0 skips them). A verify's go to
    /// `result->logits_out`; these must be NULL and 0.
    pub logits_out: *mut f32,
    pub capacity: usize,
    /// Written by the call for a step: the floats written on success; with
    /// PACKLM_ERR_BUFFER_TOO_SMALL, in the item the message names, the floats it needs.
    pub n_logits: usize,
    /// NULL for a step; else the item is a verify with these parameters, as packlm_verify takes
    /// them (greedy or sampled, its random state advanced on success).
    pub verify: *const packlm_verify_params,
    /// A verify's result, written as packlm_verify writes it (not NULL for a verify).
    pub result: *mut packlm_verify_result,
}

/// Most items of one packlm_step_sessions call.
pub const PACKLM_MAX_STEP_ITEMS: usize = 4096;

/// What an item of packlm_step_sessions asks for, once checked.
enum Planned<'a> {
    Step { tokens: &'a [u32], want: Want, need: usize },
    Verify { tokens: &'a [u32], call: VerifyCall<'a> },
}

/// Runs several sessions of `model` in one pass over the weights: a step item feeds its tokens
/// to its session as packlm_step_batch_into would, a verify item scores its pending token and
/// draft as packlm_verify would, and each item's logits and outcome are bit-identical to that
/// call's on the session alone (at every precision, on every backend; a sampled verify draws
/// the same). On a CPU the weights dominate a decode step, so N sessions stepped together cost
/// little more than one.
///
/// Everything is checked before anything runs, and the message names the item ("item 2: ..."):
/// `model` and `items` not NULL; 1 to PACKLM_MAX_STEP_ITEMS items; every session not NULL, of
/// `model`, not named by another item, and not in use by another call
/// (PACKLM_ERR_SESSION_BUSY); a step's tokens, `want` and capacity as packlm_step_batch_into
/// checks them, a verify's as packlm_verify does. Each session's in-use flag is held for the
/// whole call. All or nothing: on any failure (a refused item, an abort through any item's
/// session, PACKLM_ERR_NON_FINITE in any item's logits or judged rows, a panic) no session
/// changes and no logits or results are written, except the named item's `n_logits` (or its
/// result's, as packlm_verify) with PACKLM_ERR_BUFFER_TOO_SMALL.
#[no_mangle]
pub unsafe extern "C" fn packlm_step_sessions(model: *const packlm_model, items: *mut packlm_step_item, n_items: usize) -> Status {
    ffi_boundary!("packlm_step_sessions", {
        let m = try_ref(model, "model")?;
        if n_items == 0 {
            return Err(Error::invalid("n_items is 0: no items given"));
        }
        if n_items > PACKLM_MAX_STEP_ITEMS {
            return Err(Error::new(Status::ErrLimitExceeded, format!("n_items {n_items} is more than the {PACKLM_MAX_STEP_ITEMS} one call takes")));
        }
        let items = try_slice_mut(items, n_items, "items")?;
        let item_err = |i: usize, e: Error| Error::new(e.status, format!("item {i}: {}", e.message));
        // Each session's item, by address.
        let mut seen: std::collections::HashMap<usize, usize> = std::collections::HashMap::with_capacity(n_items);
        for (i, it) in items.iter().enumerate() {
            try_ref(it.session, "session").map_err(|e| item_err(i, e))?;
            if let Some(j) = seen.insert(it.session as usize, i) {
                return Err(Error::invalid(format!("item {i}: its session is item {j}'s too; a session may be named once per call")));
            }
        }
        let mut guards = Vec::with_capacity(n_items);
        for (i, it) in items.iter().enumerate() {
            let g = session_in_use(it.session).map_err(|e| item_err(i, e))?;
            if !Arc::ptr_eq(g.model().engine(), m.inner.engine()) {
                return Err(Error::invalid(format!("item {i}: its session belongs to another model")));
            }
            guards.push(g);
        }
        let n_vocab = m.inner.n_vocab();
        let mut plan: Vec<Planned> = Vec::with_capacity(n_items);
        for (i, (it, g)) in items.iter_mut().zip(&guards).enumerate() {
            if it.n_tokens == 0 {
                return Err(Error::invalid(format!("item {i}: n_tokens is 0: no tokens given")));
            }
            if !it.verify.is_null() {
                if !it.logits_out.is_null() || it.capacity != 0 {
                    return Err(Error::invalid(format!("item {i}: a verify's logits go to result->logits_out; logits_out must be NULL and capacity 0")));
                }
                let mut call = VerifyCall::read(g, it.n_tokens - 1, it.verify, it.result).map_err(|e| item_err(i, e))?;
                let tokens = try_slice(it.tokens, it.n_tokens, "tokens").map_err(|e| item_err(i, e))?;
                call.check_buffers(g).map_err(|e| item_err(i, e))?;
                plan.push(Planned::Verify { tokens, call });
                continue;
            }
            let want = read_want(it.want).map_err(|e| item_err(i, e))?;
            let want = if it.logits_out.is_null() && it.capacity == 0 { Want::None } else { want };
            let need = logits_len(want, it.n_tokens, n_vocab).map_err(|e| item_err(i, e))?;
            let mut needed = 0;
            check_capacity(need, it.capacity, &mut needed).map_err(|e| {
                it.n_logits = needed;
                item_err(i, e)
            })?;
            if need > 0 && it.logits_out.is_null() {
                return Err(item_err(i, Error::new(Status::ErrNullArgument, "logits_out is NULL")));
            }
            let tokens = try_slice(it.tokens, it.n_tokens, "tokens").map_err(|e| item_err(i, e))?;
            plan.push(Planned::Step { tokens, want, need });
        }
        let results = {
            let mut jobs: Vec<(&mut Session, Job)> = guards
                .iter_mut()
                .zip(plan.iter_mut())
                .map(|(g, p)| {
                    let job = match p {
                        Planned::Step { tokens, want, .. } => Job::Step { tokens, want: *want },
                        Planned::Verify { tokens, call } => Job::Verify { pending: tokens[0], draft: &tokens[1..], acceptance: call.acceptance() },
                    };
                    (&mut **g, job)
                })
                .collect();
            Session::run_many(&mut jobs)?
        };
        for (((it, p), r), g) in items.iter_mut().zip(plan).zip(results).zip(&guards) {
            match (p, r) {
                (Planned::Step { need, .. }, JobResult::Logits(l)) => {
                    debug_assert_eq!(l.len(), need);
                    try_slice_mut(it.logits_out, l.len(), "logits_out")?.copy_from_slice(&l);
                    it.n_logits = l.len();
                }
                (Planned::Verify { call, .. }, JobResult::Verified(out)) => call.finish(g, &out)?,
                _ => return Err(Error::new(Status::ErrPanic, "packlm_step_sessions: a result of another kind than its item")),
            }
        }
        Ok(())
    })
}

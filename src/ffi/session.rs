//! `packlm_session`: one sequence's state. Owned as `Box<packlm_session>`; it keeps its model
//! alive. Safe to move to another thread; must not be used by two threads at once.

use crate::engine::{Session, Want};
use crate::error::{Error, Status};
use crate::ffi::guard::{free_box, ffi_boundary, try_mut, try_ref, try_slice, try_slice_mut};
use crate::ffi::model::packlm_model;

/// A conversation's state (opaque): KV planes, positions held, last logits. Created by
/// packlm_session_new, freed by packlm_session_free. Safe to move to any thread; cannot be used
/// by two threads at once. Many sessions of one model may run in parallel.
pub struct packlm_session {
    pub(crate) inner: Session,
}

/// Options of `packlm_session_new`.
#[repr(C)]
pub struct packlm_session_options {
    /// sizeof(packlm_session_options) as the caller compiled it.
    pub size: usize,
    /// Most positions the session may hold; 0 = the model's context length.
    pub n_ctx: u32,
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
pub extern "C" fn packlm_session_new(model: *const packlm_model, options: *const packlm_session_options, out: *mut *mut packlm_session) -> Status {
    ffi_boundary!("packlm_session_new", {
        let m = try_ref(model, "model")?.inner.clone();
        let out = try_mut(out, "out")?;
        let n_ctx = if options.is_null() {
            0
        } else {
            let o = try_ref(options, "options")?;
            if o.size != std::mem::size_of::<packlm_session_options>() {
                return Err(Error::invalid(format!("options.size is {}, expected {}", o.size, std::mem::size_of::<packlm_session_options>())));
            }
            o.n_ctx as usize
        };
        let s = Session::new(m, n_ctx)?;
        *out = Box::into_raw(Box::new(packlm_session { inner: s }));
        Ok(())
    })
}

/// Frees a session; NULL is a no-op.
#[no_mangle]
pub extern "C" fn packlm_session_free(session: *mut packlm_session) {
    free_box(session);
}

/// Positions the session holds, into `*n_past`.
#[no_mangle]
pub extern "C" fn packlm_session_n_past(session: *const packlm_session, n_past: *mut usize) -> Status {
    ffi_boundary!("packlm_session_n_past", {
        let s = try_ref(session, "session")?;
        *try_mut(n_past, "n_past")? = s.inner.n_past();
        Ok(())
    })
}

/// Feeds one token; when `logits_out` is not NULL it receives n_vocab floats, the logits of
/// this position. On failure (token out of range, context full, and PACKLM_ERR_PANIC from a
/// panic inside the pass) the session is unchanged: it is rolled back, never left poisoned.
#[no_mangle]
pub extern "C" fn packlm_step(session: *mut packlm_session, token: u32, logits_out: *mut f32) -> Status {
    ffi_boundary!("packlm_step", {
        let s = &mut try_mut(session, "session")?.inner;
        let logits = s.step(token)?;
        if !logits_out.is_null() {
            try_slice_mut(logits_out, logits.len(), "logits_out")?.copy_from_slice(&logits);
        }
        Ok(())
    })
}

/// Feeds `m` tokens in one pass over the weights; the result is bit-identical to `m` calls of
/// packlm_step. `want`: PACKLM_WANT_LAST (n_vocab floats written), PACKLM_WANT_ALL
/// (m x n_vocab, row-major) or PACKLM_WANT_NONE; `logits_out` may be NULL to skip them.
/// On failure the session is unchanged, PACKLM_ERR_PANIC included (the pass is rolled back).
#[no_mangle]
pub extern "C" fn packlm_step_batch(session: *mut packlm_session, tokens: *const u32, m: usize, want: u32, logits_out: *mut f32) -> Status {
    ffi_boundary!("packlm_step_batch", {
        let s = &mut try_mut(session, "session")?.inner;
        let tokens = try_slice(tokens, m, "tokens")?;
        let want = match want {
            PACKLM_WANT_LAST => Want::Last,
            PACKLM_WANT_ALL => Want::All,
            PACKLM_WANT_NONE => Want::None,
            other => return Err(Error::new(Status::ErrInvalidArgument, format!("want {other} is not LAST (0), ALL (1) or NONE (2)"))),
        };
        let want = if logits_out.is_null() { Want::None } else { want };
        let logits = s.step_batch(tokens, want)?;
        if !logits.is_empty() {
            try_slice_mut(logits_out, logits.len(), "logits_out")?.copy_from_slice(&logits);
        }
        Ok(())
    })
}

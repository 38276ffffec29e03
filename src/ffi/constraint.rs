//! `packlm_constraint`: structured output. A grammar over a model's vocabulary (a JSON schema,
//! llguidance's Lark, llama.cpp's GBNF, or a regular expression) that masks logits, takes tokens and rolls
//! back; or, copied into a session with packlm_session_set_constraint, masks what the session
//! hands back and judges its verifies. Owned as `Box<packlm_constraint>`, holding its own `Arc`
//! of the model. Safe to move to any thread; one thread at a time (its calls change it).

use std::ffi::c_char;

use crate::error::{Error, Status};
use crate::ffi::guard::{ffi_boundary, free_box, try_mut, try_ref, try_slice_mut, try_text, write_items};
use crate::ffi::model::packlm_model;
use crate::ffi::session::{packlm_session, session_in_use};
use crate::{Constraint, GrammarKind};

/// A grammar and the tokens it has taken (opaque). Created by packlm_constraint_new, freed by
/// packlm_constraint_free. Safe to move to any thread; not to be used from two threads at once.
pub struct packlm_constraint {
    inner: Constraint,
}

/// `kind` of packlm_constraint_new: a JSON schema; the output is JSON that validates.
pub const PACKLM_GRAMMAR_JSON_SCHEMA: u32 = 0;
/// `kind` of packlm_constraint_new: llguidance's Lark-like grammar.
pub const PACKLM_GRAMMAR_LARK: u32 = 1;
/// `kind` of packlm_constraint_new: a regular expression the whole output matches.
pub const PACKLM_GRAMMAR_REGEX: u32 = 2;
/// `kind` of packlm_constraint_new: llama.cpp's GBNF grammar text (rule `root` the start),
/// translated to llguidance's grammar. Its syntax errors name the line and column.
pub const PACKLM_GRAMMAR_GBNF: u32 = 3;
/// Most bytes of grammar text packlm_constraint_new takes (PACKLM_ERR_LIMIT_EXCEEDED past it).
pub const PACKLM_MAX_GRAMMAR_BYTES: usize = 4 << 20;
const _: () = assert!(PACKLM_MAX_GRAMMAR_BYTES == crate::constrain::MAX_GRAMMAR_BYTES);

/// A constraint of `kind` (PACKLM_GRAMMAR_*) over the `len` bytes of UTF-8 `text` for `model`,
/// into `*out`. The model's token table is built at its first constraint (its raw token bytes,
/// its stop tokens as the end) and shared by the others. Refused: text over
/// PACKLM_MAX_GRAMMAR_BYTES (PACKLM_ERR_LIMIT_EXCEEDED), text that is not UTF-8
/// (PACKLM_ERR_UTF8), and with PACKLM_ERR_INVALID_ARGUMENT an unknown kind, text holding a NUL
/// byte, and a grammar or schema llguidance refuses (its message in packlm_last_error). A JSON
/// schema's output is laid out with ", " between items and ": " after keys and no other
/// whitespace, unless the schema sets llguidance's "x-guidance" options.
#[no_mangle]
pub unsafe extern "C" fn packlm_constraint_new(model: *const packlm_model, kind: u32, text: *const c_char, len: usize, out: *mut *mut packlm_constraint) -> Status {
    ffi_boundary!("packlm_constraint_new", {
        let m = try_ref(model, "model")?;
        let out = try_mut(out, "out")?;
        let kind = match kind {
            PACKLM_GRAMMAR_JSON_SCHEMA => GrammarKind::JsonSchema,
            PACKLM_GRAMMAR_LARK => GrammarKind::Lark,
            PACKLM_GRAMMAR_REGEX => GrammarKind::Regex,
            PACKLM_GRAMMAR_GBNF => GrammarKind::Gbnf,
            other => return Err(Error::invalid(format!("unknown grammar kind {other}"))),
        };
        if len > PACKLM_MAX_GRAMMAR_BYTES {
            return Err(Error::new(Status::ErrLimitExceeded, format!("the grammar is {len} bytes; at most {PACKLM_MAX_GRAMMAR_BYTES} are taken")));
        }
        let text = try_text(text, len, "text")?;
        let inner = Constraint::new(&m.inner, kind, text)?;
        *out = Box::into_raw(Box::new(packlm_constraint { inner }));
        Ok(())
    })
}

/// Frees a constraint. NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn packlm_constraint_free(c: *mut packlm_constraint) {
    free_box(c);
}

/// Sets every one of the `n` logits whose token may not come next to -infinity (entries past
/// the vocabulary too).
#[no_mangle]
pub unsafe extern "C" fn packlm_constraint_mask(c: *mut packlm_constraint, logits: *mut f32, n: usize) -> Status {
    ffi_boundary!("packlm_constraint_mask", {
        let c = try_mut(c, "constraint")?;
        let logits = try_slice_mut(logits, n, "logits")?;
        c.inner.mask(logits)
    })
}

/// Takes `token`; one the grammar does not allow here is refused (PACKLM_ERR_INVALID_ARGUMENT)
/// and nothing changes. A stop token where the grammar may end finishes it.
#[no_mangle]
pub unsafe extern "C" fn packlm_constraint_accept(c: *mut packlm_constraint, token: u32) -> Status {
    ffi_boundary!("packlm_constraint_accept", {
        let c = try_mut(c, "constraint")?;
        c.inner.accept(token)
    })
}

/// Undoes the last `n` tokens taken; more than it has taken is refused and nothing changes.
#[no_mangle]
pub unsafe extern "C" fn packlm_constraint_rollback(c: *mut packlm_constraint, n: usize) -> Status {
    ffi_boundary!("packlm_constraint_rollback", {
        let c = try_mut(c, "constraint")?;
        c.inner.rollback(n)
    })
}

/// `*finished` = 1 when the constraint has ended (a stop token was taken, or the grammar
/// allows nothing more), else 0; `*can_end` (may be NULL) = 1 when a stop token may come now.
#[no_mangle]
pub unsafe extern "C" fn packlm_constraint_state(c: *mut packlm_constraint, finished: *mut u32, can_end: *mut u32) -> Status {
    ffi_boundary!("packlm_constraint_state", {
        let c = try_mut(c, "constraint")?;
        let finished = try_mut(finished, "finished")?;
        let end = u32::from(c.inner.can_end()?);
        *finished = u32::from(c.inner.is_finished());
        if !can_end.is_null() {
            *can_end = end;
        }
        Ok(())
    })
}

/// The tokens the grammar forces next (the run it allows with no choice; none where it has a
/// choice) into `tokens` (capacity `cap`), their count into `*n`; with
/// PACKLM_ERR_BUFFER_TOO_SMALL `*n` is the count needed. Nothing is taken.
#[no_mangle]
pub unsafe extern "C" fn packlm_constraint_forced(c: *mut packlm_constraint, tokens: *mut u32, cap: usize, n: *mut usize) -> Status {
    ffi_boundary!("packlm_constraint_forced", {
        let c = try_mut(c, "constraint")?;
        let forced = c.inner.forced();
        write_items(&forced, tokens, cap, n)
    })
}

/// Makes the tokens `session` takes from now on follow a copy of `c` in its current state
/// (`c` stays the caller's); NULL clears the session's constraint. From then on every logits
/// row the session hands back has -infinity for the tokens the grammar does not allow after
/// that row's token (so packlm_sample honours it), a step whose tokens the grammar refuses is
/// refused before it runs, and packlm_verify accepts only drafts the grammar allows and picks
/// the next token under the mask, greedy or sampled. packlm_truncate rolls the constraint
/// back with the session (below the point it was set, to its start); packlm_session_fork
/// copies it. A snapshot does not hold it: packlm_restore is refused while one is set. In
/// packlm_step_sessions it applies as when the session is stepped alone. A constraint of
/// another model is refused.
#[no_mangle]
pub unsafe extern "C" fn packlm_session_set_constraint(session: *mut packlm_session, c: *const packlm_constraint) -> Status {
    ffi_boundary!("packlm_session_set_constraint", {
        let mut s = session_in_use(session)?;
        let c = if c.is_null() { None } else { Some(try_ref(c, "constraint")?.inner.clone()) };
        s.set_constraint(c)
    })
}

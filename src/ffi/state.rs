//! Rolling a session back and moving its state: truncate, snapshot, restore. Same thread rule
//! as every session call: one thread at a time per session.

use crate::error::{Error, Status};
use crate::ffi::guard::{ffi_boundary, try_mut, try_slice, try_slice_mut};
use crate::ffi::session::{packlm_session, session_in_use};

/// Keeps exactly the first `n_positions` positions; more than the session holds gives
/// PACKLM_ERR_INVALID_ARGUMENT. The next step is bit-identical to a session that only ever saw
/// those positions. The logits of the new last position are not kept: step the next token.
#[no_mangle]
pub unsafe extern "C" fn packlm_truncate(session: *mut packlm_session, n_positions: usize) -> Status {
    ffi_boundary!("packlm_truncate", {
        session_in_use(session)?.truncate(n_positions)
    })
}

/// Writes the session's exact state into `buf` (capacity `cap`) and its size into `*needed`.
/// With `buf` NULL or `cap` too small, only `*needed` is written and PACKLM_ERR_BUFFER_TOO_SMALL
/// is returned. The bytes belong to the caller; they restore into any session of the same
/// model, in this process or another.
#[no_mangle]
pub unsafe extern "C" fn packlm_snapshot(session: *const packlm_session, buf: *mut u8, cap: usize, needed: *mut usize) -> Status {
    ffi_boundary!("packlm_snapshot", {
        let s = session_in_use(session)?;
        let needed = try_mut(needed, "needed")?;
        let len = s.snapshot_len();
        if buf.is_null() || cap < len {
            *needed = len;
            return Err(Error::new(Status::ErrBufferTooSmall, format!("the snapshot needs {len} bytes, buffer has {cap}")));
        }
        let bytes = s.snapshot();
        try_slice_mut(buf, len, "buf")?.copy_from_slice(&bytes);
        *needed = len;
        Ok(())
    })
}

/// Replaces the session's state with the snapshot in `buf[0..len]`. Everything is validated
/// first (format version, model fingerprint, sizes, checksum): a snapshot of another model, a
/// truncated or corrupted one gives PACKLM_ERR_SNAPSHOT and leaves the session unchanged.
#[no_mangle]
pub unsafe extern "C" fn packlm_restore(session: *mut packlm_session, buf: *const u8, len: usize) -> Status {
    ffi_boundary!("packlm_restore", {
        let mut s = session_in_use(session)?;
        let bytes = try_slice(buf, len, "buf")?;
        s.restore(bytes)
    })
}

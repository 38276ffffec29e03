//! `packlm_prefix_cache`: snapshots keyed by their token history, reused when a new prompt
//! starts with the same tokens. Owned by the caller; one thread at a time.

use crate::PrefixCache;
use crate::error::Status;
use crate::ffi::guard::{free_box, ffi_boundary, try_mut, try_ref, try_slice};
use crate::ffi::session::{packlm_session, session_in_use};

/// A prefix cache (opaque), from packlm_prefix_cache_new, freed by packlm_prefix_cache_free.
/// Safe to move to any thread; cannot be used by two threads at once.
pub struct packlm_prefix_cache {
    inner: PrefixCache,
}

/// A cache keeping at most `capacity_bytes` of snapshots (oldest dropped first).
#[no_mangle]
pub unsafe extern "C" fn packlm_prefix_cache_new(capacity_bytes: usize, out: *mut *mut packlm_prefix_cache) -> Status {
    ffi_boundary!("packlm_prefix_cache_new", {
        let out = try_mut(out, "out")?;
        *out = Box::into_raw(Box::new(packlm_prefix_cache { inner: PrefixCache::new(capacity_bytes) }));
        Ok(())
    })
}

/// Stores the session's current state.
#[no_mangle]
pub unsafe extern "C" fn packlm_prefix_cache_store(cache: *mut packlm_prefix_cache, session: *const packlm_session) -> Status {
    ffi_boundary!("packlm_prefix_cache_store", {
        let c = try_mut(cache, "cache")?;
        c.inner.store(&*session_in_use(session)?);
        Ok(())
    })
}

/// Restores into `session` the stored state sharing the longest prefix with `tokens[0..n]`
/// (at most n - 1 positions, so the last prompt token is still to be fed, and at most the
/// session's n_ctx: a state stored from a longer context is reused up to what fits). `*n_reused`
/// receives how many prompt tokens the session now holds; 0 means none was usable and the
/// session is untouched. Feed `tokens[*n_reused..]` next.
#[no_mangle]
pub unsafe extern "C" fn packlm_prefix_cache_restore(cache: *const packlm_prefix_cache, session: *mut packlm_session, tokens: *const u32, n: usize, n_reused: *mut usize) -> Status {
    ffi_boundary!("packlm_prefix_cache_restore", {
        let c = try_ref(cache, "cache")?;
        let mut s = session_in_use(session)?;
        let prompt = try_slice(tokens, n, "tokens")?;
        let out = try_mut(n_reused, "n_reused")?;
        *out = c.inner.restore_longest(&mut s, prompt)?;
        Ok(())
    })
}

/// Frees a cache; NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn packlm_prefix_cache_free(cache: *mut packlm_prefix_cache) {
    free_box(cache);
}
